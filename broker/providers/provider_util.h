/*
 * Helpers shared by the wire formats in broker/providers/ (the
 * implementations are in provider_util.c).  Nothing here does I/O or
 * knows a vendor: building a request is "URL + headers + JSON body", and
 * reading a response is "bounded buffers + JSON objects".
 *
 * Conventions: functions that can fail return -1 (or NULL) and leave
 * their outputs in a state the matching free function accepts; every
 * buffer has a caller-given or documented bound.
 */
#ifndef MCPBROKER_PROVIDER_UTIL_H
#define MCPBROKER_PROVIDER_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "broker/providers/provider.h"

struct json_object;

/* Largest arguments text of one tool call, as streamed or serialised. */
#define PROVIDER_MAX_ARGUMENTS	(1024 * 1024)
/* Longest line of a response stream (one SSE line, one NDJSON object). */
#define PROVIDER_MAX_LINE	(1024 * 1024)
/* Most tool calls one response may carry. */
#define PROVIDER_MAX_CALLS	128
/* Longest provider error message kept (po_error_message, stream errors). */
#define PROVIDER_MAX_ERROR	512

/*
 * Request side.
 */

/* rq_model when set and not empty, else the provider's model, else NULL. */
const char	*provider_model(const struct chat_request *);

/*
 * The provider's API key, or NULL when none is configured or loaded (an
 * empty value counts as none).  The key belongs to the configuration:
 * put it in a header with provider_http_add_header() and nowhere else.
 */
const char	*provider_api_key(const struct provider_conf *);

/*
 * base (trailing slashes removed) followed by path, which should begin
 * with '/' and may carry a query.  Callers take base from
 * provider_base_url(), so that the request goes where the parent lets the
 * controller connect.  NULL when base is NULL or empty, or out of memory;
 * free() the result.
 */
char		*provider_url(const char *base, const char *path);

/*
 * s percent-encoded for one URL path segment or query value: everything
 * but RFC 3986 unreserved characters (A-Z a-z 0-9 - . _ ~) becomes %XX,
 * so a deployment name or model id cannot add path segments or query
 * parameters.  NULL when out of memory; free() the result.
 */
char		*provider_url_escape(const char *s);

/*
 * Append header name: value to ph.  name is not copied: pass a string
 * literal.  The value is formatted into memory that ph owns
 * (ph_header_values[]) and is wiped by provider_http_free(), since it may
 * hold the API key.  -1 when PROVIDER_MAX_HEADERS are already set, the
 * value would contain CR, LF or NUL (header injection through a key file
 * with a stray newline, say), or memory runs out.
 */
int		 provider_http_add_header(struct provider_http *,
		    const char *name, const char *fmt, ...)
		    __attribute__((format(printf, 3, 4)));

/*
 * Serialise body (compact, '/' not escaped) into ph_body/ph_body_len,
 * replacing any earlier body.  body stays the caller's.  -1 when out of
 * memory.
 */
int		 provider_http_set_body(struct provider_http *,
		    struct json_object *body);

/*
 * json_object_object_add / json_object_array_add that fail, releasing v,
 * when v is NULL (a constructor ran out of memory) or the add fails: so
 *	if (provider_json_add(o, "k", json_object_new_string(s)) == -1)
 * handles both, and v is never leaked or left half-owned.
 */
int		 provider_json_add(struct json_object *o, const char *key,
		    struct json_object *v);
int		 provider_json_push(struct json_object *a,
		    struct json_object *v);

/*
 * The tools array in the shape OpenAI's Chat Completions introduced and
 * others (Ollama) copied: [{type: "function", function: {name,
 * description, parameters}}], parameters being each td_schema as is (a
 * new reference, not a copy; {"type":"object","properties":{}} when
 * there is none).  NULL when a tool has no name or out of memory.
 */
struct json_object *provider_function_tools(const struct chat_request *);

/*
 * A JSON number for d written as the shortest decimal that reads back as
 * d: 0.7 goes out as 0.7, not json-c's 0.69999999999999996.  NULL when d
 * is NaN or infinite (JSON has no such numbers) or out of memory.
 */
struct json_object *provider_json_double(double d);

/*
 * Response side.
 */

/*
 * A growing, NUL-terminated byte buffer with a hard size bound: for tool
 * call arguments streamed in pieces (bound PROVIDER_MAX_ARGUMENTS) and for
 * stream lines (bound PROVIDER_MAX_LINE).  A zeroed struct with pb_max set
 * is a valid empty buffer; provider_buf_init() does just that.
 */
struct provider_buf {
	char	*pb_data;	/* NULL until the first byte */
	size_t	 pb_len;	/* bytes held, not counting the NUL */
	size_t	 pb_cap;
	size_t	 pb_max;	/* pb_len never exceeds this */
};

void		 provider_buf_init(struct provider_buf *, size_t max);
/* -1 (buffer unchanged) when pb_max would be exceeded or out of memory. */
int		 provider_buf_add(struct provider_buf *, const char *,
		    size_t);
/* The contents, NUL-terminated; "" when empty.  Valid until the next add. */
const char	*provider_buf_str(const struct provider_buf *);
/* Empty it, keeping the memory for the next use. */
void		 provider_buf_reset(struct provider_buf *);
/* Release the memory; the buffer is empty (and reusable) afterwards. */
void		 provider_buf_free(struct provider_buf *);

/*
 * Split a byte stream into lines (NDJSON): bytes are appended to line
 * (whose pb_max bounds one line, e.g. PROVIDER_MAX_LINE) and fn is called
 * with each complete line, without its LF or a CR before it, NUL-terminated.
 * Returns -1 as soon as a line is longer than the bound, memory runs out
 * or fn returns -1; 0 otherwise.  At the end of the stream, whatever is
 * left in line (pb_len > 0) is a last line without its LF: the caller
 * decides whether to accept it.
 */
typedef int	(*provider_line_fn)(const char *line, size_t len, void *arg);
int		 provider_lines_feed(struct provider_buf *line,
		    const char *buf, size_t len, provider_line_fn fn,
		    void *arg);

/*
 * Reading chunks.  Lenient by design: a member that is missing, null or
 * of another type reads as absent, so that additions to a vendor's
 * format do not break the stream.
 */

/* o[key] if it is a string without embedded NULs, else NULL. */
const char	*provider_json_str(struct json_object *o, const char *key);
#define PROVIDER_COUNT_MAX	(1ULL << 40)
/*
 * o[key] if it is a non-negative integer: 0 and *out set (at most
 * PROVIDER_COUNT_MAX); else -1.
 */
int		 provider_json_u64(struct json_object *o, const char *key,
		    uint64_t *out);

/*
 * Error messages.
 *
 * provider_text_clean: copy len bytes of in to out (outlen > 0) with
 * control characters turned into spaces, so that a provider's message
 * cannot forge log lines or terminal escapes; truncated to fit, never in
 * the middle of a UTF-8 sequence.  Always NUL-terminated.
 *
 * provider_error_json: the message in a parsed error object, in the
 * shapes vendors use:
 *	{"error": {"message": M, "code": C}}	OpenAI, Azure (C string or
 *						number; else "status" or
 *						"type" stands in for it)
 *	{"error": {"message": M, "status": S}}	Gemini
 *	{"type": "error", "error": {"type": T, "message": M}}	Anthropic
 *	{"error": M}				Ollama, some compatible
 *						servers
 *	{"message": M, "code": C}		the error object alone (an
 *						SSE "error" event's data),
 *						gateways (Azure APIM)
 * written as "WHO said: M (C)", or "WHO said: M" when there is no code.
 * -1 (out set to "") when o has no message in any of these shapes.
 *
 * provider_error_format: the same for a raw response body, falling back
 * to "HTTP STATUS" when the body is not such JSON.  Meant to be a whole
 * po_error_message().  Only the body is read: request headers (and so the
 * key) never reach out.
 */
void		 provider_text_clean(char *out, size_t outlen, const char *in,
		    size_t len);
int		 provider_error_json(const char *who, struct json_object *o,
		    char *out, size_t outlen);
void		 provider_error_format(const char *who, int status,
		    const char *body, size_t len, char *out, size_t outlen);

#endif
