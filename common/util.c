#include <string.h>
#include <time.h>

#include <json-c/json.h>

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
	struct json_tokener	*tok;
	struct json_object	*o;

	if (len > INT32_MAX || (tok = json_tokener_new_ex(JSON_MAX_DEPTH)) ==
	    NULL)
		return NULL;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
	    JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, buf, (int)len);
	/* Whole payload, nothing after it, and an object. */
	if (o != NULL && (json_tokener_get_error(tok) != json_tokener_success ||
	    json_tokener_get_parse_end(tok) != len ||
	    !json_object_is_type(o, json_type_object))) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	return o;
}
