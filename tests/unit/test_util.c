#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "common/util.h"

static void
test_backoff_doubles_and_caps(void **state)
{
	static const uint64_t want[] = { 1000, 2000, 4000, 8000, 16000,
	    30000, 30000, 30000 };
	unsigned int i;

	(void)state;
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_int_equal(backoff_delay_ms(i), want[i]);
	assert_int_equal(backoff_delay_ms(1000), BACKOFF_MAX_MS);
	assert_int_equal(backoff_delay_ms(UINT32_MAX), BACKOFF_MAX_MS);
}

static void
test_parse_object_accepts_only_one_object(void **state)
{
	static const char *const bad[] = {
		"", "[]", "1", "\"s\"", "null", "{} {}", "{}x", "{\"a\":}",
		"{\"a\":1,}", "{\"a\":\"\xff\"}",
	};
	struct json_object	*o;
	unsigned int		 i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o = json_parse_object(bad[i], strlen(bad[i]));
		if (o != NULL)
			fail_msg("accepted %s", bad[i]);
	}
	o = json_parse_object("{\"a\":1}", 7);
	assert_non_null(o);
	json_object_put(o);
}

static void
test_parse_object_depth_is_capped(void **state)
{
	char	*deep;
	size_t	 n = JSON_MAX_DEPTH + 8, i;

	(void)state;
	deep = malloc(n * 6 + 8);
	assert_non_null(deep);
	strcpy(deep, "");
	for (i = 0; i < n; i++)
		strcat(deep, "{\"a\":");
	strcat(deep, "1");
	for (i = 0; i < n; i++)
		strcat(deep, "}");
	assert_null(json_parse_object(deep, strlen(deep)));
	free(deep);
}

static void
test_get_str_checks_type_length_and_nul(void **state)
{
	const char		*s;
	struct json_object	*o;

	(void)state;
	o = json_parse_object("{\"a\":\"abc\",\"n\":1,\"z\":\"a\\u0000b\"}",
	    strlen("{\"a\":\"abc\",\"n\":1,\"z\":\"a\\u0000b\"}"));
	assert_non_null(o);
	assert_int_equal(json_get_str(o, "a", 3, 0, &s), 0);
	assert_string_equal(s, "abc");
	assert_int_equal(json_get_str(o, "a", 2, 0, &s), -1);
	assert_int_equal(json_get_str(o, "n", 10, 0, &s), -1);
	assert_int_equal(json_get_str(o, "z", 10, 0, &s), -1);
	assert_int_equal(json_get_str(o, "missing", 10, 0, &s), -1);
	assert_int_equal(json_get_str(o, "missing", 10, 1, &s), 0);
	assert_null(s);
	json_object_put(o);
}

static void
test_get_int_and_bool_check_range_and_type(void **state)
{
	struct json_object	*o;
	int64_t			 n = 0;
	int			 b = 0;

	(void)state;
	o = json_parse_object("{\"n\":5,\"f\":1.5,\"s\":\"5\",\"b\":true}",
	    strlen("{\"n\":5,\"f\":1.5,\"s\":\"5\",\"b\":true}"));
	assert_non_null(o);
	assert_int_equal(json_get_int(o, "n", 0, 10, 0, &n), 0);
	assert_int_equal(n, 5);
	assert_int_equal(json_get_int(o, "n", 6, 10, 0, &n), -1);
	assert_int_equal(json_get_int(o, "f", 0, 10, 0, &n), -1);
	assert_int_equal(json_get_int(o, "s", 0, 10, 0, &n), -1);
	assert_int_equal(json_get_bool(o, "b", 0, &b), 0);
	assert_true(b);
	assert_int_equal(json_get_bool(o, "n", 0, &b), -1);
	json_object_put(o);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backoff_doubles_and_caps),
		cmocka_unit_test(test_parse_object_accepts_only_one_object),
		cmocka_unit_test(test_parse_object_depth_is_capped),
		cmocka_unit_test(test_get_str_checks_type_length_and_nul),
		cmocka_unit_test(test_get_int_and_bool_check_range_and_type),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
