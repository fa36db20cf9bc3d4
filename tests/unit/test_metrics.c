#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/metrics.h"

static int
teardown(void **state)
{
	(void)state;
	metrics_free();
	return 0;
}

static void
test_label_values_are_escaped(void **state)
{
	struct metric	*m;
	char		*text, buf[8];

	(void)state;
	m = metric_new(METRIC_COUNTER, "t_total", "Help.", "tool", NULL, 0);
	metric_add(m, 1, "a\"b\\c\nd");
	text = metrics_render();
	assert_string_equal(text, "# HELP t_total Help.\n"
	    "# TYPE t_total counter\n"
	    "t_total{tool=\"a\\\"b\\\\c\\nd\"} 1\n");
	free(text);
	/* Cut whole: never half an escape. */
	metric_escape("ab\"", buf, 4);
	assert_string_equal(buf, "ab");
}

static void
test_series_are_capped(void **state)
{
	struct metric	*m;
	char		 name[32], *text, *p;
	int		 i, lines = 0;

	(void)state;
	m = metric_new(METRIC_COUNTER, "c_total", "Help.", "server,tool", NULL,
	    0);
	for (i = 0; i < METRIC_SERIES_MAX + 50; i++) {
		snprintf(name, sizeof(name), "tool%d", i);
		metric_add(m, 1, "s", name);
	}
	metric_add(m, 2, "s", "tool0");
	text = metrics_render();
	for (p = text; (p = strchr(p, '\n')) != NULL; p++)
		lines++;
	/* HELP, TYPE, the first METRIC_SERIES_MAX and one of the rest. */
	assert_int_equal(lines, 2 + METRIC_SERIES_MAX + 1);
	assert_non_null(strstr(text, "c_total{server=\"s\",tool=\"tool0\"} "
	    "3\n"));
	assert_non_null(strstr(text, "c_total{server=\"other\",tool=\"other\"} "
	    "50\n"));
	assert_null(strstr(text, "tool250"));
	free(text);
}

static void
test_long_values_are_cut(void **state)
{
	struct metric	*m;
	char		 a[300], b[300], *text;

	(void)state;
	memset(a, 'x', sizeof(a) - 1);
	a[sizeof(a) - 1] = '\0';
	memcpy(b, a, sizeof(b));
	b[200] = 'y';		/* differs past the cut: the same series */
	m = metric_new(METRIC_GAUGE, "g", "Help.", "v", NULL, 0);
	metric_add(m, 1, a);
	metric_add(m, 1, b);
	text = metrics_render();
	assert_non_null(strstr(text, "\"} 2\n"));
	assert_null(strstr(text, "y"));
	free(text);
}

static void
test_histogram_buckets(void **state)
{
	static const double	 bounds[] = { 0.1, 1, 10 };
	struct metric		*m;
	char			*text;

	(void)state;
	m = metric_new(METRIC_HISTOGRAM, "h_seconds", "Help.", "server",
	    bounds, 3);
	metric_observe(m, 0.05, "a");
	metric_observe(m, 0.1, "a");	/* le is inclusive */
	metric_observe(m, 5, "a");
	metric_observe(m, 50, "a");
	text = metrics_render();
	assert_string_equal(text, "# HELP h_seconds Help.\n"
	    "# TYPE h_seconds histogram\n"
	    "h_seconds_bucket{server=\"a\",le=\"0.1\"} 2\n"
	    "h_seconds_bucket{server=\"a\",le=\"1\"} 2\n"
	    "h_seconds_bucket{server=\"a\",le=\"10\"} 3\n"
	    "h_seconds_bucket{server=\"a\",le=\"+Inf\"} 4\n"
	    "h_seconds_sum{server=\"a\"} 55.15\n"
	    "h_seconds_count{server=\"a\"} 4\n");
	free(text);
}

static void
test_unlabelled_metrics_start_at_zero(void **state)
{
	struct metric	*g, *h;
	char		*text;

	(void)state;
	g = metric_new(METRIC_GAUGE, "open", "Help.", "", NULL, 0);
	h = metric_new(METRIC_HISTOGRAM, "d_seconds", "Help.", "",
	    metric_latency_buckets, metric_latency_nbuckets);
	metric_add(g, 1);
	metric_add(g, -1);
	metric_observe(h, 0.002);
	metric_add(NULL, 1, "ignored");	/* not made in this process */
	text = metrics_render();
	assert_non_null(strstr(text, "\nopen 0\n"));
	assert_non_null(strstr(text, "\nd_seconds_bucket{le=\"0.005\"} 1\n"));
	assert_non_null(strstr(text, "\nd_seconds_sum 0.002\n"));
	assert_non_null(strstr(text, "\nd_seconds_count 1\n"));
	free(text);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_label_values_are_escaped,
		    teardown),
		cmocka_unit_test_teardown(test_series_are_capped, teardown),
		cmocka_unit_test_teardown(test_long_values_are_cut, teardown),
		cmocka_unit_test_teardown(test_histogram_buckets, teardown),
		cmocka_unit_test_teardown(test_unlabelled_metrics_start_at_zero,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
