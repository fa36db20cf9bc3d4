/*
 * Web sessions on the wire: the session cookie, the tokens in it and in
 * X-CSRF-Token, and Origin checks.  Pure functions (except websec_token_new)
 * so that the frontend, the controller and the config parser agree, and so
 * that the unit tests can reach them.
 */
#ifndef MCPBROKER_WEBSEC_H
#define MCPBROKER_WEBSEC_H

#include <stddef.h>
#include <stdint.h>

/* Under TLS the __Host- prefix pins the cookie to this host, Secure, Path=/ */
#define SESSION_COOKIE		"mcpb_session"
#define SESSION_COOKIE_TLS	"__Host-mcpb_session"

/* Session ids and CSRF tokens: 256 random bits as unpadded base64url. */
#define WEB_TOKEN_LEN		43
#define WEB_TOKEN_BYTES		32

/* An Origin header or allowed-origin: scheme://host[:port], canonical. */
#define ORIGIN_MAX		300
/* A Host header, and the longest header value the frontend relays. */
#define HOST_MAX		260
#define SET_COOKIE_MAX		160
/* An X-CSRF-Token header longer than this is refused, not relayed. */
#define CSRF_HEADER_MAX		128
/* Longest Max-Age we set: a year, as the config caps durations. */
#define SESSION_MAX_AGE_MAX	(365LL * 24 * 3600)

const char	*websec_cookie_name(int tls);

/* A fresh token, NUL-terminated; -1 when getrandom fails. */
int		 websec_token_new(char out[WEB_TOKEN_LEN + 1]);
/* Exactly WEB_TOKEN_LEN characters of base64url. */
int		 websec_token_valid(const char *);

/*
 * Look for cookie `name` in one Cookie header value (RFC 6265 5.4: pairs
 * separated by ";" and spaces; other cookies are skipped unread).  Returns
 * how many times it occurs and copies the first value into out, or -1 when
 * a value of that name does not fit in outlen or is not made of cookie
 * octets.
 */
int		 websec_cookie_find(const char *hdr, const char *name,
		    char *out, size_t outlen);

/*
 * The Set-Cookie value for the session: value NULL clears it.  HttpOnly,
 * SameSite=Strict and Path=/ always; under TLS the __Host- name and Secure.
 * -1 when value is not a token, max_age is out of range or buf too small.
 */
int		 websec_set_cookie(char *buf, size_t len, int tls,
		    const char *value, int64_t max_age);

/*
 * An origin as browsers serialise it (RFC 6454): "http" or "https", "://",
 * a host (a name, an IPv4 address or a bracketed IPv6 one) and an optional
 * port; nothing else.  out gets it lower-cased with the scheme's default
 * port dropped.  -1 for anything else, including "null".
 */
int		 websec_origin_canon(const char *in, char *out, size_t outlen);

/* The request's own origin: the listener's scheme and the Host header. */
int		 websec_host_origin(int tls, const char *host, char *out,
		    size_t outlen);

/*
 * May a request carrying this Origin header be served?  Yes when it is the
 * request's own origin (tls, host) or one of the canonical allowed ones.
 */
int		 websec_origin_allowed(const char *origin, int tls,
		    const char *host, char *const *allowed, size_t nallowed);

#endif
