/*
 * JWT bearer tokens (compact JWS, RFC 7515/7519) checked against a JWKS
 * (RFC 7517): HS256 with "oct" keys, RS256 with "RSA" keys, ES256 with "EC"
 * P-256 keys, nothing else.  The algorithm is a property of the key, never
 * of the token: a token's "alg" selects nothing, it must agree with the key.
 */
#ifndef MCPBROKER_JWT_H
#define MCPBROKER_JWT_H

#include <stddef.h>
#include <time.h>

#define JWT_TOKEN_MAX	8192		/* bytes of a compact token */
#define JWKS_MAX	(1024 * 1024)	/* bytes of a jwks-file */
#define JWT_SKEW	60		/* seconds allowed for clock drift */
#define JWT_ROLES_MAX	16		/* what a policy caller can carry */

struct jwt_conf;
struct jwt_keys;
struct store_user;

/*
 * The usable keys of a JWKS document {"keys": [...]}.  Keys of other types,
 * curves or algorithms, and keys whose "use" is not "sig", are skipped; a
 * malformed key of a supported type, or a document without one usable key,
 * is an error.  NULL with why filled on error.
 */
struct jwt_keys	*jwt_keys_parse(const char *jwks_json, char *why,
		    size_t whylen);
void		 jwt_keys_free(struct jwt_keys *);
size_t		 jwt_keys_count(const struct jwt_keys *);

/*
 * Verify token at time now against keys and the issuer, audience and claim
 * names of conf; on success fill out (name, tenant, comma-separated roles)
 * and return 0.  On failure return -1 with why: a reason fit to show the
 * caller, which never repeats any part of the token.
 */
int		 jwt_verify(const struct jwt_keys *, const struct jwt_conf *,
		    const char *token, time_t now, struct store_user *out,
		    char *why, size_t whylen);

#endif
