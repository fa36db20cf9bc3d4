/* x-mcp-header: which annotations are valid, and the headers they give. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "common/util.h"
#include "worker/mcp_params.h"

static struct json_object *
parse(const char *s)
{
	struct json_object *o = json_parse_object(s, strlen(s));

	assert_non_null(o);
	return o;
}

static int
check(const char *schema)
{
	struct json_object	*o = parse(schema);
	char			 why[160];
	int			 rc;

	rc = mcp_param_headers_check(o, why, sizeof(why));
	json_object_put(o);
	return rc;
}

static void
test_valid_and_invalid_annotations(void **state)
{
	(void)state;
	assert_int_equal(check("{\"type\":\"object\",\"properties\":{"
	    "\"region\":{\"type\":\"string\",\"x-mcp-header\":\"Region\"},"
	    "\"n\":{\"type\":\"integer\",\"x-mcp-header\":\"N\"},"
	    "\"deep\":{\"type\":\"object\",\"properties\":{\"b\":{\"type\":"
	    "\"boolean\",\"x-mcp-header\":\"Flag\"}}}}}"), 0);
	/* number is not allowed */
	assert_int_equal(check("{\"properties\":{\"x\":{\"type\":\"number\","
	    "\"x-mcp-header\":\"X\"}}}"), -1);
	/* not a token */
	assert_int_equal(check("{\"properties\":{\"x\":{\"type\":\"string\","
	    "\"x-mcp-header\":\"A B\"}}}"), -1);
	assert_int_equal(check("{\"properties\":{\"x\":{\"type\":\"string\","
	    "\"x-mcp-header\":\"\"}}}"), -1);
	/* case-insensitive duplicates */
	assert_int_equal(check("{\"properties\":{\"x\":{\"type\":\"string\","
	    "\"x-mcp-header\":\"Id\"},\"y\":{\"type\":\"string\","
	    "\"x-mcp-header\":\"ID\"}}}"), -1);
	/* under items, oneOf or $defs: not statically reachable */
	assert_int_equal(check("{\"properties\":{\"a\":{\"type\":\"array\","
	    "\"items\":{\"type\":\"string\",\"x-mcp-header\":\"A\"}}}}"), -1);
	assert_int_equal(check("{\"oneOf\":[{\"properties\":{\"a\":{\"type\":"
	    "\"string\",\"x-mcp-header\":\"A\"}}}]}"), -1);
	assert_int_equal(check("{\"$defs\":{\"t\":{\"type\":\"string\","
	    "\"x-mcp-header\":\"T\"}}}"), -1);
	/* no annotation at all */
	assert_int_equal(check("{\"type\":\"object\"}"), 0);
}

static void
test_headers_from_arguments(void **state)
{
	struct json_object	*schema, *args;
	struct mcp_param_header	 h[MCP_PARAM_HEADERS_MAX];
	size_t			 n;

	(void)state;
	schema = parse("{\"properties\":{"
	    "\"region\":{\"type\":\"string\",\"x-mcp-header\":\"Region\"},"
	    "\"n\":{\"type\":\"integer\",\"x-mcp-header\":\"N\"},"
	    "\"missing\":{\"type\":\"string\",\"x-mcp-header\":\"Missing\"},"
	    "\"deep\":{\"properties\":{\"b\":{\"type\":\"boolean\","
	    "\"x-mcp-header\":\"Flag\"}}}}}");
	args = parse("{\"region\":\"us-west1\",\"n\":-7,"
	    "\"deep\":{\"b\":false},\"other\":1}");
	n = mcp_param_headers(schema, args, h, MCP_PARAM_HEADERS_MAX);
	assert_int_equal(n, 3);
	assert_string_equal(h[0].ph_name, "Mcp-Param-Region");
	assert_string_equal(h[0].ph_value, "us-west1");
	assert_string_equal(h[1].ph_name, "Mcp-Param-N");
	assert_string_equal(h[1].ph_value, "-7");
	assert_string_equal(h[2].ph_name, "Mcp-Param-Flag");
	assert_string_equal(h[2].ph_value, "false");
	json_object_put(schema);
	json_object_put(args);
}

static void
test_value_encoding(void **state)
{
	char out[128], big[256];

	(void)state;
	mcp_header_value("us-west1", 8, out, sizeof(out));
	assert_string_equal(out, "us-west1");
	mcp_header_value("Hello, \xe4\xb8\x96\xe7\x95\x8c", 13, out,
	    sizeof(out));
	assert_string_equal(out, "=?base64?SGVsbG8sIOS4lueVjA==?=");
	mcp_header_value(" padded ", 8, out, sizeof(out));
	assert_string_equal(out, "=?base64?IHBhZGRlZCA=?=");
	mcp_header_value("line1\nline2", 11, out, sizeof(out));
	assert_string_equal(out, "=?base64?bGluZTEKbGluZTI=?=");
	/* a plain value that looks like the sentinel is encoded too */
	mcp_header_value("=?base64?abc?=", 14, out, sizeof(out));
	assert_string_equal(out, "=?base64?PT9iYXNlNjQ/YWJjPz0=?=");
	/* What does not fit is not sent cut, raw or encoded. */
	memset(big, 'a', sizeof(big));
	assert_int_equal(mcp_header_value(big, sizeof(out) - 1, out,
	    sizeof(out)), 0);
	assert_int_equal(strlen(out), sizeof(out) - 1);
	assert_int_equal(mcp_header_value(big, sizeof(out), out, sizeof(out)),
	    -1);
	assert_string_equal(out, "");
	big[0] = '\r';
	big[1] = '\n';
	assert_int_equal(mcp_header_value(big, 100, out, sizeof(out)), -1);
	assert_string_equal(out, "");
	assert_int_equal(mcp_header_value(big, 60, out, sizeof(out)), 0);
	assert_memory_equal(out, "=?base64?DQph", 13);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_and_invalid_annotations),
		cmocka_unit_test(test_headers_from_arguments),
		cmocka_unit_test(test_value_encoding),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
