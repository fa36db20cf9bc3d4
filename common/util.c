#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <openssl/evp.h>

#include "common/log.h"
#include "common/util.h"

uint64_t
backoff_delay_ms(unsigned int attempt)
{
	uint64_t d = BACKOFF_BASE_MS;

	while (attempt-- > 0 && d < BACKOFF_MAX_MS)
		d *= 2;
	return d > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : d;
}

uint64_t
monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
json_get_str(struct json_object *o, const char *key, size_t maxlen,
    int optional, const char **out)
{
	struct json_object	*v;
	const char		*s;
	size_t			 len;

	*out = NULL;
	if (!json_object_object_get_ex(o, key, &v) || v == NULL)
		return optional ? 0 : -1;
	if (!json_object_is_type(v, json_type_string))
		return -1;
	s = json_object_get_string(v);
	len = json_object_get_string_len(v);
	/* Embedded NULs would make C see a different string than JSON. */
	if (len > maxlen || strlen(s) != len)
		return -1;
	*out = s;
	return 0;
}

int
json_get_int(struct json_object *o, const char *key, int64_t min, int64_t max,
    int optional, int64_t *out)
{
	struct json_object	*v;
	int64_t			 n;

	if (!json_object_object_get_ex(o, key, &v) || v == NULL)
		return optional ? 0 : -1;
	if (!json_object_is_type(v, json_type_int))
		return -1;
	n = json_object_get_int64(v);
	if (n < min || n > max)
		return -1;
	*out = n;
	return 0;
}

int
json_get_bool(struct json_object *o, const char *key, int optional, int *out)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) || v == NULL)
		return optional ? 0 : -1;
	if (!json_object_is_type(v, json_type_boolean))
		return -1;
	*out = json_object_get_boolean(v);
	return 0;
}

struct json_object *
json_parse_object(const char *buf, size_t len)
{
	char why[1];

	return json_parse_object_why(buf, len, why, sizeof(why));
}

/* The same, saying why a text is refused, for whoever sent it. */
struct json_object *
json_parse_object_why(const char *buf, size_t len, char *why, size_t whylen)
{
	/*
	 * One tokener for the process, reset for each text: a new one is a
	 * 2 KiB calloc (its depth stack), and that per message showed.  Every
	 * process is single-threaded.
	 */
	static struct json_tokener	*tok;
	struct json_object		*o;
	enum json_tokener_error		 err;
	const char			*nul;

	if (len > INT32_MAX) {
		snprintf(why, whylen, "too large");
		return NULL;
	}
	if (tok == NULL) {
		if ((tok = json_tokener_new_ex(JSON_MAX_DEPTH)) == NULL) {
			snprintf(why, whylen, "out of memory");
			return NULL;
		}
		json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
		    JSON_TOKENER_VALIDATE_UTF8);
	} else
		json_tokener_reset(tok);
	o = json_tokener_parse_ex(tok, buf, (int)len);
	err = json_tokener_get_error(tok);
	/* Whole payload, nothing after it, and an object. */
	if ((o == NULL || err != json_tokener_success) && (nul = memchr(buf,
	    '\0', len)) != NULL && (size_t)(nul - buf) <=
	    json_tokener_get_parse_end(tok))
		snprintf(why, whylen, "a NUL byte at byte %zu", (size_t)(nul -
		    buf));
	else if (o == NULL || err != json_tokener_success)
		snprintf(why, whylen, "%s at byte %zu", err ==
		    json_tokener_continue ? "unexpected end of data" :
		    json_tokener_error_desc(err),
		    json_tokener_get_parse_end(tok));
	else if (json_tokener_get_parse_end(tok) != len)
		snprintf(why, whylen, "data after the object at byte %zu",
		    json_tokener_get_parse_end(tok));
	else if (!json_object_is_type(o, json_type_object))
		snprintf(why, whylen, "not an object");
	else
		return o;
	json_object_put(o);
	return NULL;
}

/*
 * How many bytes from the start are well-formed UTF-8: no overlong form,
 * no surrogate, nothing above U+10FFFF (RFC 3629).  len if all are.
 */
size_t
utf8_valid_len(const char *buf, size_t len)
{
	const unsigned char	*s = (const unsigned char *)buf;
	unsigned int		 cp;
	size_t			 i = 0, n, k;

	while (i < len) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		if (s[i] >= 0xc2 && s[i] <= 0xdf)
			n = 2;
		else if (s[i] >= 0xe0 && s[i] <= 0xef)
			n = 3;
		else if (s[i] >= 0xf0 && s[i] <= 0xf4)
			n = 4;
		else
			return i;
		if (len - i < n)
			return i;
		cp = s[i] & (0x7f >> n);
		for (k = 1; k < n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 ||
		    cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
			return i;
		i += n;
	}
	return len;
}

/*
 * A copy of buf in which each byte that is not part of well-formed UTF-8
 * is U+FFFD, and its length in *outlen; NULL when buf is well formed.
 */
char *
utf8_repaired(const char *buf, size_t len, size_t *outlen)
{
	static const char	 fffd[] = "\xef\xbf\xbd";
	char			*out;
	size_t			 i, o, n;

	if ((n = utf8_valid_len(buf, len)) == len)
		return NULL;
	if (len > (SIZE_MAX - 1) / 3 || (out = malloc(len * 3 + 1)) == NULL)
		fatal("utf8_repaired");
	/* n: the well-formed run at i, then a bad byte (or the end) */
	for (i = o = 0;; n = utf8_valid_len(buf + i, len - i)) {
		memcpy(out + o, buf + i, n);
		o += n;
		if ((i += n) == len)
			break;
		memcpy(out + o, fffd, 3);
		o += 3;
		i++;
	}
	out[o] = '\0';
	*outlen = o;
	return out;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? and nothing else. */
static int
json_number_text(const char *s)
{
	size_t n;

	s += *s == '-';
	if ((n = strspn(s, "0123456789")) == 0 || (s[0] == '0' && n > 1))
		return 0;
	s += n;
	if (*s == '.') {
		if ((n = strspn(++s, "0123456789")) == 0)
			return 0;
		s += n;
	}
	if (*s == 'e' || *s == 'E') {
		s += s[1] == '+' || s[1] == '-' ? 2 : 1;
		if ((n = strspn(s, "0123456789")) == 0)
			return 0;
		s += n;
	}
	return *s == '\0';
}

/*
 * json-c takes NaN, Infinity and "1." even in strict mode, keeps their text
 * and writes it out again, and clamps integers beyond 64 bits to the
 * nearest end without a word.  Refuse all of them, so that what is
 * passed on is JSON and says what the sender wrote.
 */
int
json_numbers_ok(struct json_object *o, int depth)
{
	size_t i, n;

	if (depth > JSON_MAX_DEPTH)
		return 0;
	switch (json_object_get_type(o)) {
	case json_type_double:
		return isfinite(json_object_get_double(o)) &&
		    json_number_text(json_object_get_string(o));
	case json_type_int:
		return json_object_get_int64(o) != INT64_MIN &&
		    json_object_get_uint64(o) != UINT64_MAX;
	case json_type_object: {
		/* A block: the foreach declares, and C11 lets no label do so. */
		json_object_object_foreach(o, key, v) {
			(void)key;
			if (!json_numbers_ok(v, depth + 1))
				return 0;
		}
		return 1;
	}
	case json_type_array:
		n = json_object_array_length(o);
		for (i = 0; i < n; i++)
			if (!json_numbers_ok(json_object_array_get_idx(o, i),
			    depth + 1))
				return 0;
		return 1;
	default:
		return 1;
	}
}

void
hex_encode(const void *buf, size_t len, char *out)
{
	static const char	 digits[] = "0123456789abcdef";
	const unsigned char	*p = buf;
	size_t			 i;

	for (i = 0; i < len; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 0xf];
	}
	out[2 * len] = '\0';
}

/*
 * The digest fetched once: SHA256() looks it up in the provider tables on
 * every call, which showed per tool call.
 */
void
sha256(const void *buf, size_t len, unsigned char out[32])
{
	static EVP_MD	*md;
	unsigned int	 hlen = 0;

	if (md == NULL && (md = EVP_MD_fetch(NULL, "SHA256", NULL)) == NULL)
		abort();
	if (EVP_Digest(buf, len, out, &hlen, md, NULL) != 1 || hlen != 32)
		abort();
}

void
sha256_hex(const void *buf, size_t len, char out[SHA256_HEX_LEN + 1])
{
	unsigned char h[32];

	sha256(buf, len, h);
	hex_encode(h, sizeof(h), out);
}

const char *
owner_key(const char *user, const char *tenant, char out[OWNER_MAX])
{
	snprintf(out, OWNER_MAX, "%s/%s", tenant, user);
	return out;
}

int
owner_split(const char *s, char buf[OWNER_MAX], const char **tenant,
    const char **name)
{
	const char *slash;

	if (strlen(s) >= OWNER_MAX || (slash = strchr(s, '/')) == NULL)
		return -1;
	snprintf(buf, OWNER_MAX, "%s", s);
	buf[slash - s] = '\0';
	*tenant = buf;
	*name = buf + (slash - s) + 1;
	return 0;
}
