#ifndef MCPBROKER_UTIL_H
#define MCPBROKER_UTIL_H

#include <sys/queue.h>
#include <stddef.h>
#include <stdint.h>

/* BSD's, missing from glibc's sys/queue.h: iterate while removing. */
#ifndef TAILQ_FOREACH_SAFE
#define TAILQ_FOREACH_SAFE(var, head, field, tvar)			\
	for ((var) = TAILQ_FIRST(head);					\
	    (var) != NULL && ((tvar) = TAILQ_NEXT(var, field), 1);	\
	    (var) = (tvar))
#endif

struct json_object;

#define BACKOFF_BASE_MS		1000
#define BACKOFF_MAX_MS		30000
#define BACKOFF_STABLE_MS	60000	/* a run this long resets the backoff */

/* Delay before restart number `attempt` (0-based): 1 s doubling, capped. */
uint64_t	 backoff_delay_ms(unsigned int attempt);

uint64_t	 monotonic_ms(void);

/*
 * Read fields of a JSON object received from another process.  Each returns
 * -1 when the field is missing (unless optional), of the wrong type or out of
 * range, so that a handler can reject the whole message.
 */
int	 json_get_str(struct json_object *, const char *key, size_t maxlen,
	    int optional, const char **out);
int	 json_get_int(struct json_object *, const char *key, int64_t min,
	    int64_t max, int optional, int64_t *out);
int	 json_get_bool(struct json_object *, const char *key, int optional,
	    int *out);
/* len bytes as 2 * len lowercase hex digits and a NUL. */
void	 hex_encode(const void *, size_t len, char *out);
#define SHA256_HEX_LEN	64
/* The SHA-256 of len bytes, as its 32 bytes or in hex. */
void	 sha256(const void *, size_t len, unsigned char out[32]);
void	 sha256_hex(const void *, size_t len, char out[SHA256_HEX_LEN + 1]);
/* Parse a payload that must be exactly one JSON object (depth capped). */
struct json_object *json_parse_object(const char *buf, size_t len);
/* The same; on refusal, why (for the sender: "invalid utf-8 at byte 12"). */
struct json_object *json_parse_object_why(const char *buf, size_t len,
	    char *why, size_t whylen);
/* The length of buf's well-formed UTF-8 prefix (len: all of it). */
size_t	 utf8_valid_len(const char *buf, size_t len);
/* buf with U+FFFD for each byte that is not UTF-8 (free it); NULL: none. */
char	*utf8_repaired(const char *buf, size_t len, size_t *outlen);
/* 1 if every number is finite, written as JSON, and within 64 bits. */
int	 json_numbers_ok(struct json_object *, int depth);

#define JSON_MAX_DEPTH	64

/*
 * A user is a name within a tenant: TENANT/NAME ('/' is in neither), what
 * keys a per-user instance (the worker protocol's `owner`) and what
 * administrators may write to name one user.  owner_split copies s into
 * buf and splits it there; -1 if s is not of that form.
 */
#define OWNER_MAX	(64 + 1 + 64 + 1)
const char	*owner_key(const char *user, const char *tenant,
		    char out[OWNER_MAX]);
int		 owner_split(const char *s, char buf[OWNER_MAX],
		    const char **tenant, const char **name);

#endif
