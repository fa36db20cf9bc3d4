/*
 * Web session helpers shared by the frontend (cookies), the controller
 * (tokens, origins) and the config parser (allowed-origin).  Everything
 * here reads attacker-supplied header text: parsing is strict, lengths are
 * capped, and anything unexpected is refused rather than repaired.
 */
#include <sys/random.h>

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "broker/websec.h"

const char *
websec_cookie_name(int tls)
{
	return tls ? SESSION_COOKIE_TLS : SESSION_COOKIE;
}

static int
b64url_char(int c)
{
	return isascii(c) && (isalnum(c) || c == '-' || c == '_');
}

int
websec_token_new(char out[WEB_TOKEN_LEN + 1])
{
	unsigned char	raw[WEB_TOKEN_BYTES];
	char		b64[48], *c;

	if (getrandom(raw, sizeof(raw), 0) != sizeof(raw))
		return -1;
	EVP_EncodeBlock((unsigned char *)b64, raw, sizeof(raw));
	explicit_bzero(raw, sizeof(raw));
	b64[WEB_TOKEN_LEN] = '\0';		/* drop the '=' padding */
	for (c = b64; *c != '\0'; c++)
		if (*c == '+')
			*c = '-';
		else if (*c == '/')
			*c = '_';
	memcpy(out, b64, WEB_TOKEN_LEN + 1);
	explicit_bzero(b64, sizeof(b64));
	return 0;
}

int
websec_token_valid(const char *s)
{
	size_t i;

	for (i = 0; i < WEB_TOKEN_LEN; i++)
		if (!b64url_char((unsigned char)s[i]))
			return 0;
	return s[i] == '\0';
}

/* RFC 6265 cookie-octet: printable ASCII but for " , ; \ and space. */
static int
cookie_octet(int c)
{
	return c > 0x20 && c < 0x7f && c != '"' && c != ',' && c != ';' &&
	    c != '\\';
}

static int
ows(int c)
{
	return c == ' ' || c == '\t';
}

int
websec_cookie_find(const char *hdr, const char *name, char *out,
    size_t outlen)
{
	const char	*p = hdr, *end, *eq, *v;
	size_t		 nlen = strlen(name), vlen, i;
	int		 found = 0;

	while (*p != '\0') {
		while (ows((unsigned char)*p))
			p++;
		if ((end = strchr(p, ';')) == NULL)
			end = p + strlen(p);
		eq = memchr(p, '=', (size_t)(end - p));
		/* Nameless or other cookies are none of our business. */
		if (eq != NULL && (size_t)(eq - p) == nlen &&
		    memcmp(p, name, nlen) == 0) {
			v = eq + 1;
			for (vlen = (size_t)(end - v); vlen > 0 &&
			    ows((unsigned char)v[vlen - 1]); vlen--)
				;
			if (vlen >= outlen)
				return -1;
			for (i = 0; i < vlen; i++)
				if (!cookie_octet((unsigned char)v[i]))
					return -1;
			if (found++ == 0) {
				memcpy(out, v, vlen);
				out[vlen] = '\0';
			}
		}
		p = *end == ';' ? end + 1 : end;
	}
	return found;
}

int
websec_set_cookie(char *buf, size_t len, int tls, const char *value,
    int64_t max_age)
{
	int n;

	if (value == NULL) {
		value = "";
		max_age = 0;
	} else if (!websec_token_valid(value) || max_age < 1 ||
	    max_age > SESSION_MAX_AGE_MAX)
		return -1;
	n = snprintf(buf, len, "%s=%s; Path=/; Max-Age=%lld;%s HttpOnly; "
	    "SameSite=Strict", websec_cookie_name(tls), value,
	    (long long)max_age, tls ? " Secure;" : "");
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/*
 * host[:port] at s, to the end of the string: the host lower-cased into
 * host (hostlen bytes), the port into *port (0 when absent).
 */
static int
parse_hostport(const char *s, char *host, size_t hostlen, long *port)
{
	size_t	i = 0, n = 0;
	long	v = 0;

	if (s[0] == '[') {
		for (i = 1; s[i] != ']'; i++)
			if (!isxdigit((unsigned char)s[i]) && s[i] != ':' &&
			    s[i] != '.')
				return -1;
		if (i < 3)
			return -1;
		i++;
	} else
		while (isascii((unsigned char)s[i]) &&
		    (isalnum((unsigned char)s[i]) || s[i] == '-' ||
		    s[i] == '.' || s[i] == '_'))
			i++;
	if (i == 0 || i >= hostlen)
		return -1;
	for (n = 0; n < i; n++)
		host[n] = (char)tolower((unsigned char)s[n]);
	host[i] = '\0';
	*port = 0;
	if (s[i] == '\0')
		return 0;
	if (s[i++] != ':' || s[i] == '\0')
		return -1;
	for (n = 0; isdigit((unsigned char)s[i]); i++, n++) {
		v = v * 10 + (s[i] - '0');
		if (n == 5 || v > 65535)
			return -1;
	}
	if (s[i] != '\0' || v == 0)
		return -1;
	*port = v;
	return 0;
}

int
websec_origin_canon(const char *in, char *out, size_t outlen)
{
	char	host[ORIGIN_MAX];
	long	port, dflt;
	int	n, https;

	if (strncasecmp(in, "https://", 8) == 0) {
		https = 1;
		dflt = 443;
	} else if (strncasecmp(in, "http://", 7) == 0) {
		https = 0;
		dflt = 80;
	} else
		return -1;
	if (parse_hostport(in + (https ? 8 : 7), host, sizeof(host),
	    &port) == -1)
		return -1;
	if (port == 0 || port == dflt)
		n = snprintf(out, outlen, "%s://%s", https ? "https" : "http",
		    host);
	else
		n = snprintf(out, outlen, "%s://%s:%ld", https ? "https" :
		    "http", host, port);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

int
websec_host_origin(int tls, const char *host, char *out, size_t outlen)
{
	char	url[ORIGIN_MAX + 16];
	int	n;

	if (host == NULL || strlen(host) > HOST_MAX)
		return -1;
	n = snprintf(url, sizeof(url), "%s://%s", tls ? "https" : "http",
	    host);
	if (n < 0 || (size_t)n >= sizeof(url))
		return -1;
	return websec_origin_canon(url, out, outlen);
}

int
websec_origin_allowed(const char *origin, int tls, const char *host,
    char *const *allowed, size_t nallowed)
{
	char	o[ORIGIN_MAX], own[ORIGIN_MAX];
	size_t	i;

	if (strlen(origin) >= ORIGIN_MAX ||
	    websec_origin_canon(origin, o, sizeof(o)) == -1)
		return 0;
	if (websec_host_origin(tls, host, own, sizeof(own)) == 0 &&
	    strcmp(o, own) == 0)
		return 1;
	for (i = 0; i < nallowed; i++)
		if (strcmp(o, allowed[i]) == 0)
			return 1;
	return 0;
}
