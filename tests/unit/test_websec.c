/*
 * The session cookie, tokens and Origin checks (broker/websec.c): what
 * the frontend and the controller read from a browser's headers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "broker/websec.h"

#define TOKEN	"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
#define TOKEN2	"abcdefghijklmnopqrstuvwxyz-_0123456789ABCDE"
#define A42	"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

static void
test_tokens(void **state)
{
	char	a[WEB_TOKEN_LEN + 1], b[WEB_TOKEN_LEN + 1];

	(void)state;
	assert_int_equal(strlen(TOKEN), WEB_TOKEN_LEN);
	assert_true(websec_token_valid(TOKEN));
	assert_true(websec_token_valid(TOKEN2));
	assert_false(websec_token_valid(""));
	assert_false(websec_token_valid(TOKEN "A"));
	assert_false(websec_token_valid(A42));
	assert_false(websec_token_valid(A42 "="));
	assert_false(websec_token_valid(A42 "+"));
	assert_false(websec_token_valid(A42 "/"));
	assert_false(websec_token_valid(A42 "\xc3"));
	assert_false(websec_token_valid(A42 " "));
	assert_int_equal(websec_token_new(a), 0);
	assert_int_equal(websec_token_new(b), 0);
	assert_true(websec_token_valid(a));
	assert_true(websec_token_valid(b));
	assert_string_not_equal(a, b);
}

static void
test_cookie_find(void **state)
{
	char	v[WEB_TOKEN_LEN + 1];

	(void)state;
	assert_int_equal(websec_cookie_find("mcpb_session=" TOKEN,
	    SESSION_COOKIE, v, sizeof(v)), 1);
	assert_string_equal(v, TOKEN);
	/* others are skipped, whatever they hold */
	assert_int_equal(websec_cookie_find("a=b; theme=\"dark blue\"; x; "
	    "mcpb_session=" TOKEN "; junk=\x01\x02", SESSION_COOKIE, v,
	    sizeof(v)), 1);
	assert_string_equal(v, TOKEN);
	assert_int_equal(websec_cookie_find("a=b;mcpb_session=" TOKEN2 "  ",
	    SESSION_COOKIE, v, sizeof(v)), 1);
	assert_string_equal(v, TOKEN2);
	/* names are exact: no prefix, suffix or case games */
	assert_int_equal(websec_cookie_find("xmcpb_session=" TOKEN
	    "; mcpb_session2=" TOKEN "; MCPB_SESSION=" TOKEN "; mcpb_session ="
	    TOKEN, SESSION_COOKIE, v, sizeof(v)), 0);
	assert_int_equal(websec_cookie_find("", SESSION_COOKIE, v, sizeof(v)),
	    0);
	assert_int_equal(websec_cookie_find(";;; ;", SESSION_COOKIE, v,
	    sizeof(v)), 0);
	/* the TLS name is another cookie */
	assert_int_equal(websec_cookie_find("mcpb_session=" TOKEN,
	    SESSION_COOKIE_TLS, v, sizeof(v)), 0);
	assert_int_equal(websec_cookie_find("__Host-mcpb_session=" TOKEN,
	    SESSION_COOKIE_TLS, v, sizeof(v)), 1);
	/* repeated: counted, the first kept */
	assert_int_equal(websec_cookie_find("mcpb_session=" TOKEN
	    "; mcpb_session=" TOKEN2, SESSION_COOKIE, v, sizeof(v)), 2);
	assert_string_equal(v, TOKEN);
	/* too long, or not cookie octets */
	assert_int_equal(websec_cookie_find("mcpb_session=" TOKEN "A",
	    SESSION_COOKIE, v, sizeof(v)), -1);
	assert_int_equal(websec_cookie_find("mcpb_session=\"" TOKEN "\"",
	    SESSION_COOKIE, v, 64), -1);
	assert_int_equal(websec_cookie_find("mcpb_session=a b",
	    SESSION_COOKIE, v, sizeof(v)), -1);
	assert_int_equal(websec_cookie_find("mcpb_session=a,b",
	    SESSION_COOKIE, v, sizeof(v)), -1);
	assert_int_equal(websec_cookie_find("mcpb_session=a\\b",
	    SESSION_COOKIE, v, sizeof(v)), -1);
	assert_int_equal(websec_cookie_find("mcpb_session=\x7f",
	    SESSION_COOKIE, v, sizeof(v)), -1);
	/* empty: found, and not a token */
	assert_int_equal(websec_cookie_find("mcpb_session=", SESSION_COOKIE,
	    v, sizeof(v)), 1);
	assert_string_equal(v, "");
}

static void
test_set_cookie(void **state)
{
	char	buf[SET_COOKIE_MAX];

	(void)state;
	assert_int_equal(websec_set_cookie(buf, sizeof(buf), 0, TOKEN, 3600),
	    0);
	assert_string_equal(buf, "mcpb_session=" TOKEN "; Path=/; "
	    "Max-Age=3600; HttpOnly; SameSite=Strict");
	assert_int_equal(websec_set_cookie(buf, sizeof(buf), 1, TOKEN, 60), 0);
	assert_string_equal(buf, "__Host-mcpb_session=" TOKEN "; Path=/; "
	    "Max-Age=60; Secure; HttpOnly; SameSite=Strict");
	assert_int_equal(websec_set_cookie(buf, sizeof(buf), 1, NULL, 99), 0);
	assert_string_equal(buf, "__Host-mcpb_session=; Path=/; Max-Age=0; "
	    "Secure; HttpOnly; SameSite=Strict");
	assert_int_equal(websec_set_cookie(buf, sizeof(buf), 0, NULL, 0), 0);
	assert_string_equal(buf, "mcpb_session=; Path=/; Max-Age=0; "
	    "HttpOnly; SameSite=Strict");
	/* what the frontend refuses to put in a header */
	assert_int_equal(websec_set_cookie(buf, sizeof(buf), 0, "x; Domain=e",
	    60), -1);
	assert_int_equal(websec_set_cookie(buf, sizeof(buf), 0, TOKEN, 0), -1);
	assert_int_equal(websec_set_cookie(buf, sizeof(buf), 0, TOKEN, -5),
	    -1);
	assert_int_equal(websec_set_cookie(buf, sizeof(buf), 0, TOKEN,
	    SESSION_MAX_AGE_MAX + 1), -1);
	assert_int_equal(websec_set_cookie(buf, 20, 0, TOKEN, 60), -1);
}

static void
canon_is(const char *in, const char *want)
{
	char	out[ORIGIN_MAX];
	int	rc = websec_origin_canon(in, out, sizeof(out));

	if (want == NULL) {
		if (rc != -1)
			fail_msg("%s: accepted as %s", in, out);
		return;
	}
	if (rc != 0)
		fail_msg("%s: refused", in);
	assert_string_equal(out, want);
}

static void
test_origin_canon(void **state)
{
	(void)state;
	canon_is("https://chat.example.com", "https://chat.example.com");
	canon_is("HTTPS://Chat.Example.COM", "https://chat.example.com");
	canon_is("https://chat.example.com:443", "https://chat.example.com");
	canon_is("http://chat.example.com:80", "http://chat.example.com");
	canon_is("http://chat.example.com:443", "http://chat.example.com:443");
	canon_is("https://127.0.0.1:8443", "https://127.0.0.1:8443");
	canon_is("http://localhost:08080", "http://localhost:8080");
	canon_is("http://[::1]:8080", "http://[::1]:8080");
	canon_is("http://[FE80::1]", "http://[fe80::1]");
	canon_is("http://a_b.internal", "http://a_b.internal");
	/* not origins */
	canon_is("null", NULL);
	canon_is("", NULL);
	canon_is("https://", NULL);
	canon_is("https://x/", NULL);
	canon_is("https://x/path", NULL);
	canon_is("https://x?q", NULL);
	canon_is("https://x#f", NULL);
	canon_is("https://user@x", NULL);
	canon_is("https://x:", NULL);
	canon_is("https://x:0", NULL);
	canon_is("https://x:65536", NULL);
	canon_is("https://x:123456", NULL);
	canon_is("https://x:8a", NULL);
	canon_is("https://x.example.com.evil", "https://x.example.com.evil");
	canon_is("ftp://x", NULL);
	canon_is("file://", NULL);
	canon_is("chrome-extension://abc", NULL);
	canon_is("https://[]", NULL);
	canon_is("https://[::1", NULL);
	canon_is("https://[::1]x", NULL);
	canon_is("https://ex ample.com", NULL);
	canon_is("https://ex\xc3\xa4mple.com", NULL);
	canon_is(" https://x", NULL);
	canon_is("https:/x", NULL);
}

static void
test_origin_allowed(void **state)
{
	char *allowed[] = { "https://chat.example.com",
	    "http://127.0.0.1:3000" };

	(void)state;
	/* the request's own origin: scheme from the listener, Host header */
	assert_true(websec_origin_allowed("http://127.0.0.1:8080", 0,
	    "127.0.0.1:8080", NULL, 0));
	assert_true(websec_origin_allowed("https://Broker.Example",
	    1, "broker.example:443", NULL, 0));
	assert_true(websec_origin_allowed("http://[::1]:8080", 0,
	    "[::1]:8080", NULL, 0));
	/* another scheme, port or host is another origin */
	assert_false(websec_origin_allowed("https://127.0.0.1:8080", 0,
	    "127.0.0.1:8080", NULL, 0));
	assert_false(websec_origin_allowed("http://127.0.0.1:8080", 1,
	    "127.0.0.1:8080", NULL, 0));
	assert_false(websec_origin_allowed("http://127.0.0.1:8081", 0,
	    "127.0.0.1:8080", NULL, 0));
	assert_false(websec_origin_allowed("http://localhost:8080", 0,
	    "127.0.0.1:8080", NULL, 0));
	assert_false(websec_origin_allowed("http://evil.example", 0,
	    "127.0.0.1:8080", NULL, 0));
	/* no or a broken Host: only the list can allow */
	assert_false(websec_origin_allowed("http://127.0.0.1:8080", 0, NULL,
	    NULL, 0));
	assert_false(websec_origin_allowed("http://127.0.0.1:8080", 0,
	    "127.0.0.1:8080/x", NULL, 0));
	assert_false(websec_origin_allowed("null", 0, "null", NULL, 0));
	/* the allowed list */
	assert_true(websec_origin_allowed("https://chat.example.com:443", 0,
	    "127.0.0.1:8080", allowed, 2));
	assert_true(websec_origin_allowed("http://127.0.0.1:3000", 0,
	    "127.0.0.1:8080", allowed, 2));
	assert_false(websec_origin_allowed("http://chat.example.com", 0,
	    "127.0.0.1:8080", allowed, 2));
	assert_false(websec_origin_allowed("https://chat.example.com.evil",
	    0, "127.0.0.1:8080", allowed, 2));
	assert_false(websec_origin_allowed("null", 0, "127.0.0.1:8080",
	    allowed, 2));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tokens),
		cmocka_unit_test(test_cookie_find),
		cmocka_unit_test(test_set_cookie),
		cmocka_unit_test(test_origin_canon),
		cmocka_unit_test(test_origin_allowed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
