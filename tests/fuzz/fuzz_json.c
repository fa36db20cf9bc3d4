/*
 * json_parse_object, which every channel payload goes through, and the
 * field readers every message handler uses on what it returns.  The
 * readers' promises are checked: a string they hand out has no embedded
 * NUL and respects the length bound, a number respects its range.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "common/util.h"
#include "tests/fuzz/fuzz.h"

#define MAX_KEYS	64

static const size_t	str_max[] = { 0, 1, 16, 128, 65536 };
static const int64_t	int_range[][2] = {
	{ 0, 0 }, { 0, 65535 }, { INT32_MIN, INT32_MAX }, { 1, INT64_MAX },
	{ INT64_MIN, INT64_MAX },
};

static void
read_str(struct json_object *o, const char *key)
{
	const char	*s;
	size_t		 i;

	for (i = 0; i < sizeof(str_max) / sizeof(str_max[0]); i++) {
		if (json_get_str(o, key, str_max[i], (int)(i & 1), &s) == -1 ||
		    s == NULL)
			continue;
		if (strlen(s) > str_max[i])
			abort();
	}
}

/* A key present with a value other than null. */
static int
has_value(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) && v != NULL;
}

static void
read_int(struct json_object *o, const char *key)
{
	int64_t	n;
	size_t	i;

	for (i = 0; i < sizeof(int_range) / sizeof(int_range[0]); i++) {
		if (json_get_int(o, key, int_range[i][0], int_range[i][1],
		    (int)(i & 1), &n) == 0 && has_value(o, key) &&
		    (n < int_range[i][0] || n > int_range[i][1]))
			abort();
	}
}

static void
read_bool(struct json_object *o, const char *key)
{
	int b;

	if (json_get_bool(o, key, 0, &b) == 0 && b != 0 && b != 1)
		abort();
	(void)json_get_bool(o, key, 1, &b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct json_object	*o;
	unsigned int		 n = 0;

	if ((o = json_parse_object((const char *)data, size)) == NULL)
		return 0;
	if (!json_object_is_type(o, json_type_object))
		abort();
	json_object_object_foreach(o, key, val) {
		(void)val;
		if (n++ >= MAX_KEYS)
			break;
		read_str(o, key);
		read_int(o, key);
		read_bool(o, key);
	}
	read_str(o, "absent");
	read_int(o, "absent");
	read_bool(o, "absent");
	(void)json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	json_object_put(o);
	return 0;
}
