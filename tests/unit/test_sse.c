#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/sse.h"

/*
 * Events are rendered as "type|data|id|retry\n" (NULs in data shown as
 * "\0"), so that a whole stream's outcome is one string to compare.
 */
struct log {
	char		 l_buf[4096];
	size_t		 l_len;
	int		 l_free_after;	/* free the parser after this many */
	int		 l_count;
	struct sse_parser *l_ps;
};

static void
log_add(struct log *l, const char *s, size_t n)
{
	assert_true(l->l_len + n < sizeof(l->l_buf));
	memcpy(l->l_buf + l->l_len, s, n);
	l->l_len += n;
	l->l_buf[l->l_len] = '\0';
}

static void
on_event(const struct sse_event *ev, void *arg)
{
	struct log	*l = arg;
	char		 tail[64];
	size_t		 i;

	log_add(l, ev->ev_type, strlen(ev->ev_type));
	log_add(l, "|", 1);
	for (i = 0; i < ev->ev_data_len; i++) {
		if (ev->ev_data[i] == '\0')
			log_add(l, "\\0", 2);
		else
			log_add(l, ev->ev_data + i, 1);
	}
	assert_int_equal(ev->ev_data[ev->ev_data_len], '\0');
	log_add(l, "|", 1);
	log_add(l, ev->ev_id, strlen(ev->ev_id));
	snprintf(tail, sizeof(tail), "|%lld\n", (long long)ev->ev_retry_ms);
	log_add(l, tail, strlen(tail));
	if (++l->l_count == l->l_free_after)
		sse_parser_free(l->l_ps);
}

/* Feed `s` cut at the given offsets; returns the last feed's result. */
static int
run_split(const char *s, size_t len, const size_t *cuts, size_t ncuts,
    struct log *l, size_t max_line, size_t max_event, char *lastid,
    size_t lastidlen)
{
	struct sse_parser	*ps;
	size_t			 i, from = 0, to;
	int			 r = 0;

	memset(l, 0, sizeof(*l));
	ps = sse_parser_new(max_line, max_event, on_event, l);
	assert_non_null(ps);
	for (i = 0; i <= ncuts && r == 0; i++) {
		to = i < ncuts ? cuts[i] : len;
		r = sse_parser_feed(ps, s + from, to - from);
		from = to;
	}
	if (lastid != NULL)
		snprintf(lastid, lastidlen, "%s", sse_parser_last_id(ps));
	sse_parser_free(ps);
	return r;
}

/* Every way of cutting the stream in two and three, and byte by byte. */
static void
check_stream(const char *s, size_t len, const char *want, const char *wantid)
{
	struct log	 l;
	size_t		 cuts[4096], i, j;
	char		 id[256];

	assert_true(len < sizeof(cuts) / sizeof(cuts[0]));
	assert_int_equal(run_split(s, len, NULL, 0, &l, 1024, 1024, id,
	    sizeof(id)), 0);
	assert_string_equal(l.l_buf, want);
	if (wantid != NULL)
		assert_string_equal(id, wantid);
	for (i = 0; i <= len; i++) {
		cuts[0] = i;
		assert_int_equal(run_split(s, len, cuts, 1, &l, 1024, 1024,
		    NULL, 0), 0);
		if (strcmp(l.l_buf, want) != 0)
			fail_msg("cut at %zu: got \"%s\"", i, l.l_buf);
		for (j = i; j <= len; j++) {
			cuts[1] = j;
			run_split(s, len, cuts, 2, &l, 1024, 1024, NULL, 0);
			if (strcmp(l.l_buf, want) != 0)
				fail_msg("cuts at %zu,%zu: got \"%s\"", i, j,
				    l.l_buf);
		}
	}
	for (i = 0; i < len; i++)
		cuts[i] = i + 1;
	run_split(s, len, cuts, len, &l, 1024, 1024, NULL, 0);
	assert_string_equal(l.l_buf, want);
}

#define CHECK(s, want)		check_stream((s), sizeof(s) - 1, (want), NULL)
#define CHECK_ID(s, want, id)	check_stream((s), sizeof(s) - 1, (want), (id))

static void
test_basic_and_multiline(void **state)
{
	(void)state;
	CHECK("data: hello\n\n", "message|hello||-1\n");
	CHECK("data: a\ndata: b\n\ndata: c\n\n",
	    "message|a\nb||-1\nmessage|c||-1\n");
	CHECK("data: {\"x\":1}\n\n", "message|{\"x\":1}||-1\n");
	/* An event never closed by a blank line is not dispatched. */
	CHECK("data: a\n\ndata: unfinished\n", "message|a||-1\n");
	CHECK("data: unfinished", "");
}

static void
test_line_endings(void **state)
{
	(void)state;
	CHECK("data: a\r\n\r\n", "message|a||-1\n");
	CHECK("data: a\r\r", "message|a||-1\n");
	CHECK("data: a\r\ndata: b\rdata: c\n\r\n", "message|a\nb\nc||-1\n");
	/* CR LF CR: one line end, then an empty line. */
	CHECK("data: x\r\n\rdata: y\n\n", "message|x||-1\nmessage|y||-1\n");
	/* LF CR is two line ends. */
	CHECK("data: x\n\rdata: y\r\n\r\n", "message|x||-1\nmessage|y||-1\n");
}

static void
test_bom(void **state)
{
	(void)state;
	CHECK("\xEF\xBB\xBF" "data: x\n\n", "message|x||-1\n");
	/* Only one BOM is skipped; a second is part of the field name. */
	CHECK("\xEF\xBB\xBF\xEF\xBB\xBF" "data: x\n\n", "");
	/* Half a BOM is ordinary content. */
	CHECK("\xEF\xBB" "data: x\n\ndata: y\n\n", "message|y||-1\n");
	CHECK("\xEF" "\n" "data: y\n\n", "message|y||-1\n");
	/* Not at the start: just bytes in a value. */
	CHECK("data: \xEF\xBB\xBF\n\n", "message|\xEF\xBB\xBF||-1\n");
}

static void
test_fields(void **state)
{
	(void)state;
	CHECK(": a comment\ndata: x\n: another\n\n", "message|x||-1\n");
	CHECK(":\n\n", "");
	/* A field with no colon has an empty value. */
	CHECK("data\n\n", "message|||-1\n");
	CHECK("data\ndata\n\n", "message|\n||-1\n");
	CHECK("data:\n\n", "message|||-1\n");
	/* Only one leading space goes. */
	CHECK("data:  two\n\n", "message| two||-1\n");
	CHECK("data:none\n\n", "message|none||-1\n");
	CHECK("data:a:b\n\n", "message|a:b||-1\n");
	CHECK("foo: bar\nDATA: x\ndata : y\n\n", "");
	CHECK("data: a\0b\n\n", "message|a\\0b||-1\n");
}

static void
test_event_type(void **state)
{
	(void)state;
	CHECK("event: ping\ndata: x\n\ndata: y\n\n",
	    "ping|x||-1\nmessage|y||-1\n");
	CHECK("event: ping\nevent\ndata: x\n\n", "message|x||-1\n");
	/* The type does not survive an event without data. */
	CHECK("event: ping\n\ndata: x\n\n", "message|x||-1\n");
}

static void
test_ids(void **state)
{
	(void)state;
	CHECK_ID("id: 1\ndata: a\n\ndata: b\n\n",
	    "message|a|1|-1\nmessage|b|1|-1\n", "1");
	CHECK_ID("id: 1\ndata: a\n\nid\ndata: b\n\n",
	    "message|a|1|-1\nmessage|b||-1\n", "");
	/* An id with a NUL is ignored entirely. */
	CHECK_ID("id: 1\n\nid: a\0b\ndata: c\n\n", "message|c|1|-1\n", "1");
	/* An empty event still commits the id. */
	CHECK_ID("id: 7\n\n", "", "7");
	/* Not committed until the blank line. */
	CHECK_ID("id: 7\n\nid: 8\ndata: x\n", "", "7");
	CHECK_ID("data: x\nid: 9\n\n", "message|x|9|-1\n", "9");
}

static void
test_retry(void **state)
{
	struct sse_parser	*ps;
	struct log		 l;
	static const char	 s[] = "retry: 1500\n\nretry: 15a\ndata: x\n\n"
	    "retry: \nretry: 99999999999999999999999\ndata: y\n\n"
	    "retry: 20\ndata: z\n\n";

	(void)state;
	CHECK(s, "message|x||-1\nmessage|y||-1\nmessage|z||20\n");
	CHECK("retry: 300\ndata: x\n\n", "message|x||300\n");
	CHECK("retry:-1\nretry: 1.5\ndata: x\n\n", "message|x||-1\n");
	memset(&l, 0, sizeof(l));
	ps = sse_parser_new(64, 64, on_event, &l);
	assert_non_null(ps);
	assert_int_equal(sse_parser_retry_ms(ps), -1);
	assert_int_equal(sse_parser_feed(ps, s, sizeof(s) - 1), 0);
	assert_int_equal(sse_parser_retry_ms(ps), 20);
	sse_parser_free(ps);
}

static void
test_limits(void **state)
{
	struct log	 l;
	char		 line[64], big[256];
	size_t		 cut = 5;

	(void)state;
	/* max_line counts the line without its terminator. */
	snprintf(line, sizeof(line), "data: %s\n\n", "0123456789");
	assert_int_equal(run_split(line, strlen(line), NULL, 0, &l, 16, 100,
	    NULL, 0), 0);
	assert_string_equal(l.l_buf, "message|0123456789||-1\n");
	assert_int_equal(run_split(line, strlen(line), &cut, 1, &l, 15, 100,
	    NULL, 0), -1);
	/* A long line fails even before its end arrives. */
	memset(big, 'a', sizeof(big));
	assert_int_equal(run_split(big, sizeof(big), NULL, 0, &l, 100, 100,
	    NULL, 0), -1);
	/* Data: exactly max_event is fine, one more is not. */
	snprintf(line, sizeof(line), "data: 12345\ndata: 123\n\n");
	assert_int_equal(run_split(line, strlen(line), NULL, 0, &l, 100, 9,
	    NULL, 0), 0);
	assert_string_equal(l.l_buf, "message|12345\n123||-1\n");
	assert_int_equal(run_split(line, strlen(line), NULL, 0, &l, 100, 8,
	    NULL, 0), -1);
}

static void
test_error_sticks(void **state)
{
	struct sse_parser	*ps;
	struct log		 l;

	(void)state;
	memset(&l, 0, sizeof(l));
	ps = sse_parser_new(8, 8, on_event, &l);
	assert_non_null(ps);
	assert_null(sse_parser_error(ps));
	assert_int_equal(sse_parser_feed(ps, "data: 123456\n", 13), -1);
	assert_string_equal(sse_parser_error(ps), "line larger than 8 bytes");
	assert_int_equal(sse_parser_feed(ps, "\n", 1), -1);
	assert_int_equal(l.l_count, 0);
	sse_parser_free(ps);
	ps = sse_parser_new(100, 4, on_event, &l);
	assert_int_equal(sse_parser_feed(ps, "data: 12\ndata: 34\n\n", 20), -1);
	assert_string_equal(sse_parser_error(ps),
	    "event data larger than 4 bytes");
	sse_parser_free(ps);
	assert_null(sse_parser_new(0, 1, on_event, NULL));
	assert_null(sse_parser_new(1, 0, on_event, NULL));
	assert_null(sse_parser_new(1, 1, NULL, NULL));
}

static void
test_free_from_callback(void **state)
{
	struct log	 l;
	static const char s[] = "data: a\n\ndata: b\n\n";

	(void)state;
	memset(&l, 0, sizeof(l));
	l.l_free_after = 1;
	l.l_ps = sse_parser_new(64, 64, on_event, &l);
	assert_non_null(l.l_ps);
	/* Returns 0 and stops: the second event is never seen. */
	assert_int_equal(sse_parser_feed(l.l_ps, s, sizeof(s) - 1), 0);
	assert_string_equal(l.l_buf, "message|a||-1\n");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basic_and_multiline),
		cmocka_unit_test(test_line_endings),
		cmocka_unit_test(test_bom),
		cmocka_unit_test(test_fields),
		cmocka_unit_test(test_event_type),
		cmocka_unit_test(test_ids),
		cmocka_unit_test(test_retry),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_error_sticks),
		cmocka_unit_test(test_free_from_callback),
	};

	return cmocka_run_group_tests(tests, 0, NULL);
}
