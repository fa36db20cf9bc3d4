/*
 * Helpers shared by the wire formats; see provider_util.h.  Kept apart
 * from provider.c (the table of formats) because a static library is
 * linked an object at a time: a program or test that uses one format
 * pulls in these helpers without needing every other format.
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "common/util.h"
#include "broker/providers/provider_util.h"


void
provider_http_free(struct provider_http *ph)
{
	size_t	 i;

	if (ph == NULL)
		return;
	for (i = 0; i < PROVIDER_MAX_HEADERS; i++) {
		/* One of them is the API key. */
		if (ph->ph_header_values[i] != NULL)
			explicit_bzero(ph->ph_header_values[i],
			    strlen(ph->ph_header_values[i]));
		free(ph->ph_header_values[i]);
	}
	free(ph->ph_url);
	free(ph->ph_body);
	memset(ph, 0, sizeof(*ph));
}

const char *
provider_model(const struct chat_request *rq)
{
	if (rq->rq_model != NULL && rq->rq_model[0] != '\0')
		return rq->rq_model;
	if (rq->rq_provider->pv_model != NULL &&
	    rq->rq_provider->pv_model[0] != '\0')
		return rq->rq_provider->pv_model;
	return NULL;
}

const char *
provider_api_key(const struct provider_conf *pv)
{
	const char	*k = pv->pv_api_key.sr_value;

	return k != NULL && k[0] != '\0' ? k : NULL;
}

char *
provider_url(const char *base, const char *path)
{
	size_t	 blen;
	char	*url;

	if (base == NULL || base[0] == '\0')
		return NULL;
	blen = strlen(base);
	while (blen > 0 && base[blen - 1] == '/')
		blen--;
	if (asprintf(&url, "%.*s%s", (int)blen, base, path) == -1)
		return NULL;
	return url;
}

char *
provider_url_escape(const char *s)
{
	static const char	 hex[] = "0123456789ABCDEF";
	const unsigned char	*p;
	char			*out, *o;

	if ((out = malloc(strlen(s) * 3 + 1)) == NULL)
		return NULL;
	for (p = (const unsigned char *)s, o = out; *p != '\0'; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~", *p) != NULL) {
			*o++ = (char)*p;
			continue;
		}
		*o++ = '%';
		*o++ = hex[*p >> 4];
		*o++ = hex[*p & 0xf];
	}
	*o = '\0';
	return out;
}

int
provider_http_add_header(struct provider_http *ph, const char *name,
    const char *fmt, ...)
{
	va_list	 ap;
	char	*v;
	int	 n;

	if (ph->ph_nheaders >= PROVIDER_MAX_HEADERS)
		return -1;
	va_start(ap, fmt);
	n = vasprintf(&v, fmt, ap);
	va_end(ap);
	if (n == -1)
		return -1;
	if (strpbrk(v, "\r\n") != NULL || strlen(v) != (size_t)n) {
		explicit_bzero(v, (size_t)n);
		free(v);
		return -1;
	}
	ph->ph_header_values[ph->ph_nheaders] = v;
	ph->ph_headers[ph->ph_nheaders].hf_name = name;
	ph->ph_headers[ph->ph_nheaders].hf_value = v;
	ph->ph_nheaders++;
	return 0;
}

int
provider_http_set_body(struct provider_http *ph, struct json_object *body)
{
	const char	*s;
	size_t		 len;
	char		*copy;

	s = json_object_to_json_string_length(body, JSON_C_TO_STRING_PLAIN |
	    JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	if (s == NULL || (copy = malloc(len + 1)) == NULL)
		return -1;
	memcpy(copy, s, len + 1);
	free(ph->ph_body);
	ph->ph_body = copy;
	ph->ph_body_len = len;
	return 0;
}

struct json_object *
provider_json_double(double d)
{
	char	 buf[32];
	int	 prec;

	if (!isfinite(d))
		return NULL;
	for (prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	return json_object_new_double_s(d, buf);
}

int
provider_json_add(struct json_object *o, const char *key,
    struct json_object *v)
{
	if (v == NULL || json_object_object_add(o, key, v) != 0) {
		json_object_put(v);
		return -1;
	}
	return 0;
}

int
provider_json_push(struct json_object *a, struct json_object *v)
{
	if (v == NULL || json_object_array_add(a, v) != 0) {
		json_object_put(v);
		return -1;
	}
	return 0;
}

/* {type: "function", function: {name, description, parameters}} */
static struct json_object *
function_tool(const struct chat_tool_def *td)
{
	struct json_object	*tool = NULL, *fn, *params;

	if (td->td_name == NULL)
		return NULL;
	/* MCP tools always have an inputSchema; be safe anyway. */
	params = td->td_schema != NULL ? json_object_get(td->td_schema) :
	    json_tokener_parse("{\"type\":\"object\",\"properties\":{}}");
	if ((fn = json_object_new_object()) == NULL) {
		json_object_put(params);
		return NULL;
	}
	if (provider_json_add(fn, "name",
	    json_object_new_string(td->td_name)) ||
	    (td->td_description != NULL && provider_json_add(fn,
	    "description", json_object_new_string(td->td_description)))) {
		json_object_put(params);
		json_object_put(fn);
		return NULL;
	}
	/* provider_json_add() takes params, or releases it; fn likewise. */
	if (provider_json_add(fn, "parameters", params) ||
	    (tool = json_object_new_object()) == NULL ||
	    provider_json_add(tool, "type",
	    json_object_new_string("function"))) {
		json_object_put(tool);
		json_object_put(fn);
		return NULL;
	}
	if (provider_json_add(tool, "function", fn)) {
		json_object_put(tool);
		return NULL;
	}
	return tool;
}

struct json_object *
provider_function_tools(const struct chat_request *rq)
{
	struct json_object	*tools;
	size_t			 i;

	if ((tools = json_object_new_array()) == NULL)
		return NULL;
	for (i = 0; i < rq->rq_ntools; i++)
		if (provider_json_push(tools,
		    function_tool(&rq->rq_tools[i])) == -1) {
			json_object_put(tools);
			return NULL;
		}
	return tools;
}

void
provider_buf_init(struct provider_buf *b, size_t max)
{
	memset(b, 0, sizeof(*b));
	b->pb_max = max;
}

int
provider_buf_add(struct provider_buf *b, const char *p, size_t n)
{
	size_t	 cap;
	char	*nb;

	if (n > b->pb_max || b->pb_len > b->pb_max - n)
		return -1;
	if (b->pb_len + n + 1 > b->pb_cap) {
		cap = b->pb_cap ? b->pb_cap : 64;
		while (cap < b->pb_len + n + 1)
			cap *= 2;
		if ((nb = realloc(b->pb_data, cap)) == NULL)
			return -1;
		b->pb_data = nb;
		b->pb_cap = cap;
	}
	memcpy(b->pb_data + b->pb_len, p, n);
	b->pb_len += n;
	b->pb_data[b->pb_len] = '\0';
	return 0;
}

const char *
provider_buf_str(const struct provider_buf *b)
{
	return b->pb_data != NULL ? b->pb_data : "";
}

void
provider_buf_reset(struct provider_buf *b)
{
	b->pb_len = 0;
	if (b->pb_data != NULL)
		b->pb_data[0] = '\0';
}

void
provider_buf_free(struct provider_buf *b)
{
	free(b->pb_data);
	b->pb_data = NULL;
	b->pb_len = b->pb_cap = 0;
}

int
provider_lines_feed(struct provider_buf *line, const char *buf, size_t len,
    provider_line_fn fn, void *arg)
{
	const char	*nl;
	size_t		 n;
	int		 r;

	while (len > 0) {
		nl = memchr(buf, '\n', len);
		n = nl != NULL ? (size_t)(nl - buf) : len;
		if (provider_buf_add(line, buf, n) == -1)
			return -1;
		buf += n;
		len -= n;
		if (nl == NULL)
			break;
		buf++;
		len--;
		n = line->pb_len;
		if (n > 0 && line->pb_data[n - 1] == '\r')
			line->pb_data[--n] = '\0';
		r = fn(provider_buf_str(line), n, arg);
		provider_buf_reset(line);
		if (r == -1)
			return -1;
	}
	return 0;
}

const char *
provider_json_str(struct json_object *o, const char *key)
{
	struct json_object	*v;
	const char		*s;

	if (!json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	s = json_object_get_string(v);
	if (strlen(s) != (size_t)json_object_get_string_len(v))
		return NULL;
	return s;
}

int
provider_json_u64(struct json_object *o, const char *key, uint64_t *out)
{
	struct json_object	*v;
	int64_t			 n;

	if (!json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_int))
		return -1;
	if ((n = json_object_get_int64(v)) < 0)
		return -1;
	/*
	 * Token counts are summed (input and cached input, output and
	 * thoughts) and stored as 64-bit signed: a provider reporting near
	 * 2^64 would wrap the sum to a small or negative number and erase a
	 * budget's spending.  More than 2^40 is no real count: it counts as
	 * 2^40, which any budget refuses.
	 */
	*out = (uint64_t)n > PROVIDER_COUNT_MAX ? PROVIDER_COUNT_MAX :
	    (uint64_t)n;
	return 0;
}

/*
 * Length of the well-formed UTF-8 sequence at in (at most len bytes), or
 * 0 for a byte that starts none.
 */
static size_t
utf8_seq(const unsigned char *in, size_t len)
{
	size_t	 n, i;

	if (in[0] < 0x80)
		return 1;
	if (in[0] >= 0xc2 && in[0] <= 0xdf)
		n = 2;
	else if (in[0] >= 0xe0 && in[0] <= 0xef)
		n = 3;
	else if (in[0] >= 0xf0 && in[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if (n > len)
		return 0;
	for (i = 1; i < n; i++)
		if ((in[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

void
provider_text_clean(char *out, size_t outlen, const char *in, size_t len)
{
	const unsigned char	*p = (const unsigned char *)in;
	size_t			 i = 0, o = 0, n;

	if (outlen == 0)
		return;
	while (i < len) {
		n = utf8_seq(p + i, len - i);
		if (o + (n > 0 ? n : 1) >= outlen)
			break;
		if (n == 0) {
			out[o++] = '?';		/* not UTF-8 */
			i++;
		} else if ((n == 1 && (p[i] < 0x20 || p[i] == 0x7f)) ||
		    (n == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0)) {
			out[o++] = ' ';		/* C0, DEL, C1 */
			i += n;
		} else {
			memcpy(out + o, p + i, n);
			o += n;
			i += n;
		}
	}
	out[o] = '\0';
}

/* C of "M (C)": a string or a number, as vendors differ. */
static void
error_code(struct json_object *err, char *code, size_t codelen)
{
	static const char *const keys[] = { "code", "status", "type" };
	struct json_object	*v;
	const char		*s;
	size_t			 i;

	code[0] = '\0';
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if ((s = provider_json_str(err, keys[i])) != NULL &&
		    s[0] != '\0') {
			provider_text_clean(code, codelen, s, strlen(s));
			return;
		}
		if (json_object_object_get_ex(err, keys[i], &v) &&
		    json_object_is_type(v, json_type_int)) {
			snprintf(code, codelen, "%lld",
			    (long long)json_object_get_int64(v));
			return;
		}
	}
}

int
provider_error_json(const char *who, struct json_object *o, char *out,
    size_t outlen)
{
	struct json_object	*err = NULL;
	const char		*msg;
	char			 clean[PROVIDER_MAX_ERROR], code[64];
	char			 full[PROVIDER_MAX_ERROR + 128];

	if (outlen == 0)
		return -1;
	out[0] = '\0';
	code[0] = '\0';
	if ((msg = provider_json_str(o, "error")) == NULL) {
		if (json_object_object_get_ex(o, "error", &err) &&
		    json_object_is_type(err, json_type_object) &&
		    (msg = provider_json_str(err, "message")) != NULL)
			error_code(err, code, sizeof(code));
		else if ((msg = provider_json_str(o, "message")) != NULL)
			error_code(o, code, sizeof(code));
	}
	if (msg == NULL || msg[0] == '\0')
		return -1;
	provider_text_clean(clean, sizeof(clean), msg, strlen(msg));
	if (code[0] != '\0')
		snprintf(full, sizeof(full), "%s said: %s (%s)", who, clean,
		    code);
	else
		snprintf(full, sizeof(full), "%s said: %s", who, clean);
	/* Again, to cut on a character boundary when out is smaller. */
	provider_text_clean(out, outlen, full, strlen(full));
	return 0;
}

void
provider_error_format(const char *who, int status, const char *body,
    size_t len, char *out, size_t outlen)
{
	struct json_object	*o = NULL;

	if (outlen == 0)
		return;
	if (body != NULL && len > 0)
		o = json_parse_object(body, len);
	if (o == NULL || provider_error_json(who, o, out, outlen) == -1)
		snprintf(out, outlen, "HTTP %d", status);
	json_object_put(o);
}
