#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "common/log.h"
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

static void
test_parse_object_says_why(void **state)
{
	static const struct {
		const char	*in;
		size_t		 len;
		const char	*why;
	} cases[] = {
		{ "{\"a\":\"\xff\"}", 9, "invalid utf-8" },
		{ "{\"a\":\"x\0y\"}", 11, "a NUL byte at byte 7" },
		{ "{\"a\":1", 6, "unexpected end of data" },
		{ "{} {}", 5, "unexpected character at byte 3" },
		{ "[1]", 3, "not an object" },
	};
	struct json_object	*o;
	char			 why[128], deep[200];
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		why[0] = '\0';
		assert_null(json_parse_object_why(cases[i].in, cases[i].len,
		    why, sizeof(why)));
		assert_non_null(strstr(why, cases[i].why));
	}
	memset(deep, '[', sizeof(deep));
	memcpy(deep, "{\"a\":", 5);
	assert_null(json_parse_object_why(deep, sizeof(deep), why,
	    sizeof(why)));
	assert_non_null(strstr(why, "nesting too deep"));
	/* An escaped NUL is JSON; the string keeps its length. */
	o = json_parse_object_why("{\"a\":\"x\\u0000y\"}", 16, why,
	    sizeof(why));
	assert_non_null(o);
	json_object_put(o);
}

static void
test_numbers_must_be_finite_json_within_64_bits(void **state)
{
	static const char *const good[] = {
		"{\"a\":0}", "{\"a\":-0}", "{\"a\":-0.0}", "{\"a\":1.5e3}",
		"{\"a\":1E-400}", "{\"a\":9223372036854775807}",
		"{\"a\":18446744073709551614}", "{\"a\":[1,{\"b\":2.5}]}",
		"{\"a\":1e308}",
	};
	static const char *const bad[] = {
		"{\"a\":NaN}", "{\"a\":Infinity}", "{\"a\":-Infinity}",
		"{\"a\":1e999}", "{\"a\":-1e999}", "{\"a\":1.}",
		"{\"a\":18446744073709551616}", "{\"a\":99999999999999999999}",
		"{\"a\":-9223372036854775809}", "{\"a\":[0,{\"b\":1e999}]}",
	};
	struct json_object	*o;
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_non_null(o = json_parse_object(good[i],
		    strlen(good[i])));
		assert_true(json_numbers_ok(o, 0));
		json_object_put(o);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o = json_parse_object(bad[i], strlen(bad[i]));
		if (o == NULL)
			continue;	/* refused by the parser already */
		assert_false(json_numbers_ok(o, 0));
		json_object_put(o);
	}
}

static void
test_utf8_valid_len_is_strict(void **state)
{
	static const struct {
		const char	*in;
		size_t		 good;
	} cases[] = {
		{ "plain ascii", 11 },
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14 },
		{ "ab\xc0\xaf", 2 },		/* overlong '/' */
		{ "ab\xe0\x80\xaf", 2 },	/* overlong, 3 bytes */
		{ "ab\xed\xa0\x80", 2 },	/* surrogate */
		{ "ab\xf4\x90\x80\x80", 2 },	/* above U+10FFFF */
		{ "ab\xf8\x88\x80\x80\x80", 2 },
		{ "ab\xff", 2 },
		{ "ab\xe2\x82", 2 },		/* cut short */
		{ "ab\xe2\x28\xa1", 2 },	/* bad continuation */
		{ "\xc2\x80", 2 },		/* U+0080 is a character */
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(utf8_valid_len(cases[i].in,
		    strlen(cases[i].in)), cases[i].good);
	assert_int_equal(utf8_valid_len("a\0b", 3), 3);
}

static void
test_utf8_repaired_keeps_the_good_bytes(void **state)
{
	static const struct {
		const char	*in, *out;
	} cases[] = {
		{ "caf\xc3\xa9", NULL },		/* nothing to mend */
		{ "a\xff" "b", "a\xef\xbf\xbd" "b" },
		{ "\xff\xfe\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
		    "\xef\xbf\xbd" },
		{ "caf\xc3\"}", "caf\xef\xbf\xbd\"}" },	/* cut short */
		{ "ab\xe2\x82", "ab\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xed\xa0\x80x", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx" },
	};
	char	*out;
	size_t	 i, len;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		len = 12345;
		out = utf8_repaired(cases[i].in, strlen(cases[i].in), &len);
		if (cases[i].out == NULL) {
			assert_null(out);
			assert_int_equal(len, 12345);
			continue;
		}
		assert_non_null(out);
		assert_int_equal(len, strlen(cases[i].out));
		assert_memory_equal(out, cases[i].out, len);
		assert_int_equal(utf8_valid_len(out, len), len);
		free(out);
	}
}

static char	captured[LOG_LINE_MAX];

static void
capture(int priority, const char *line)
{
	(void)priority;
	snprintf(captured, sizeof(captured), "%s", line);
}

static void
test_log_lines_escape_control_characters(void **state)
{
	static const struct {
		const char	*in;
		const char	*out;
	} cases[] = {
		{ "a\nb", "a\\nb" },
		{ "x\r\nFAKE: forged line", "x\\r\\nFAKE: forged line" },
		{ "\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m" },
		{ "tab\there", "tab\\there" },
		{ "del\x7f", "del\\x7f" },
		{ "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
		    "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80" },
		{ "csi\xc2\x9b" "2J", "csi\\xc2\\x9b2J" },
		{ "stray\x9b\xff", "stray\\x9b\\xff" },
		{ "overlong\xc0\xaf", "overlong\\xc0\\xaf" },
		{ "surrogate\xed\xa0\x80", "surrogate\\xed\\xa0\\x80" },
		{ "cut\xe2\x82", "cut\\xe2\\x82" },
	};
	char	 out[8];
	size_t	 i;

	(void)state;
	log_init(0, 0, LOG_DAEMON);
	log_set_sink(capture);
	log_procinit("test");
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		log_warnx("%s", cases[i].in);
		assert_string_equal(captured + 6, cases[i].out);
		assert_memory_equal(captured, "test: ", 6);
	}
	log_warnx("%s: %d", "ok", 1);
	assert_string_equal(captured, "test: ok: 1");
	/* Cut before an escape or a character that does not fit whole. */
	log_escape("ab\ncd", out, 4);
	assert_string_equal(out, "ab");
	log_escape("a\xe2\x82\xac", out, 4);
	assert_string_equal(out, "a");
	log_escape("abc", out, 0);
	log_set_sink(NULL);
}

static void
test_child_lines_keep_their_name(void **state)
{
	static const struct {
		const char	*in, *out;
	} cases[] = {
		{ "worker a: hello", "worker a: hello" },
		{ "worker ab: forged", "worker a: worker ab: forged" },
		{ "controller: admin: user_add", "worker a: controller: admin: "
		    "user_add" },
		{ "worker a", "worker a: worker a" },
		{ "worker a: \x1b[31m\r\n\x7f \xc2\x9b \xff",
		    "worker a: \\x1b[31m\\r\\n\\x7f \\xc2\\x9b \\xff" },
	};
	char	out[LOG_LINE_MAX];
	size_t	i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		log_child_line("worker a", cases[i].in, out, sizeof(out));
		assert_string_equal(out, cases[i].out);
	}
	log_child_line("worker a", "x", out, 5);	/* no room for the line */
	assert_string_equal(out, "work");
}

/* A user is a name within a tenant: TENANT/NAME, and back. */
static void
test_owner_key_and_split(void **state)
{
	char		 key[OWNER_MAX], buf[OWNER_MAX], big[OWNER_MAX + 8];
	const char	*tenant, *name;

	(void)state;
	assert_string_equal(owner_key("alice", "acme", key), "acme/alice");
	assert_int_equal(owner_split(key, buf, &tenant, &name), 0);
	assert_string_equal(tenant, "acme");
	assert_string_equal(name, "alice");
	assert_int_equal(owner_split("alice", buf, &tenant, &name), -1);
	/* longer than any tenant and name: not split (it names nobody) */
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	big[3] = '/';
	assert_int_equal(owner_split(big, buf, &tenant, &name), -1);
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
		cmocka_unit_test(test_parse_object_says_why),
		cmocka_unit_test(test_numbers_must_be_finite_json_within_64_bits),
		cmocka_unit_test(test_utf8_valid_len_is_strict),
		cmocka_unit_test(test_utf8_repaired_keeps_the_good_bytes),
		cmocka_unit_test(test_child_lines_keep_their_name),
		cmocka_unit_test(test_log_lines_escape_control_characters),
		cmocka_unit_test(test_owner_key_and_split),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
