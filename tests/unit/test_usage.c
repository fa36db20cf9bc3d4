/*
 * Metering and budgets: the calendar periods with a clock the test sets
 * (month ends, leap years, the turn of a year), costs from prices, and
 * budgets on a real database: what counts in a period and what does not,
 * the 80% and 100% marks audited once a period, erasure that keeps the
 * bill, and totals that are the sum of their rows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>
#include <sqlite3.h>

#include "broker/config.h"
#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_store.h"
#include "broker/controller_usage.h"
#include "tests/unit/controller_stub.h"

/* ---- fixtures ---- */

static char dir[64];

#define CONF_TEXT \
	"provider \"p\" { type openai model \"m\" api-key-env \"K\" " \
	"price input 1 output 2 }\n" \
	"budget user \"alice\" daily-tokens 100\n" \
	"budget user \"alice\" tenant \"beta\" monthly-tokens 60\n" \
	"budget tenant \"acme\" monthly-usd 0.001\n" \
	"budget role \"analyst\" daily-tokens 50\n"

static int
setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_usage.XXXXXX");
	if (mkdtemp(dir) == NULL || store_open(dir) == -1)
		return -1;
	stub_conf = config_parse_buffer("t.conf", CONF_TEXT, strlen(CONF_TEXT),
	    stderr);
	return stub_conf != NULL ? 0 : -1;
}

static int
teardown(void **state)
{
	const char *const files[] = { "mcpbroker.db", "mcpbroker.db-wal",
	    "mcpbroker.db-shm" };
	char	path[128];
	size_t	i;

	(void)state;
	store_close();
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		(void)unlink(path);
	}
	config_free(stub_conf);
	stub_conf = NULL;
	stub_forget_reply();
	return rmdir(dir);
}

/* 2026-03-15T12:00:00Z and friends, without the local time zone. */
static time_t
utc(int y, int mo, int d, int h, int mi, int s)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = s;
	return timegm(&tm);
}

static void
assert_period(enum budget_metric m, time_t now, time_t want_start,
    time_t want_reset)
{
	time_t start, reset;

	budget_period(m, now, &start, &reset);
	assert_int_equal(start, want_start);
	assert_int_equal(reset, want_reset);
}

static int64_t
count(const char *sql)
{
	sqlite3_stmt	*st;
	int64_t		 n = -1;

	assert_int_equal(sqlite3_prepare_v2(store_db(), sql, -1, &st, NULL),
	    SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

static const char *analyst[] = { "analyst" };
static const struct usage_who alice = { "alice", "acme", NULL, 0 };
static const struct usage_who carol = { "carol", "acme", analyst, 1 };
static const struct usage_who erin = { "erin", "acme", analyst, 1 };
static const struct usage_who frank = { "frank", "acme", NULL, 0 };
/* Another tenant's users of the same names: other people. */
static const struct usage_who alice_beta = { "alice", "beta", NULL, 0 };
static const struct usage_who carol_beta = { "carol", "beta", analyst, 1 };

static int crossings;

static void
on_crossed(const struct budget_status *bs, void *arg)
{
	(void)bs;
	(void)arg;
	crossings++;
}

static void
record(const struct usage_who *w, time_t when, uint64_t in, uint64_t out)
{
	struct usage_call uc;

	memset(&uc, 0, sizeof(uc));
	uc.uc_conversation = "c0ffee";
	uc.uc_provider = "p";
	uc.uc_model = "m";
	uc.uc_input = in;
	uc.uc_output = out;
	uc.uc_tool_calls = 1;
	uc.uc_cost_nusd = usage_cost_nusd(TAILQ_FIRST(&stub_conf->c_providers),
	    in, out);
	uc.uc_when = when;
	assert_int_equal(usage_record(stub_conf, w, &uc, on_crossed, NULL), 0);
}

/* The budget of that metric that stops w at now, or NULL. */
static const struct budget_conf *
stopped_by(const struct usage_who *w, time_t now)
{
	struct budget_status bs;

	if (budget_check(stub_conf, w, now, &bs) == 0)
		return NULL;
	return bs.bs_budget;
}

/* ---- periods ---- */

static void
test_period_daily(void **state)
{
	(void)state;
	assert_period(BUDGET_DAILY_TOKENS, utc(2026, 3, 15, 12, 0, 0),
	    utc(2026, 3, 15, 0, 0, 0), utc(2026, 3, 16, 0, 0, 0));
	/* The first and last second of a day. */
	assert_period(BUDGET_DAILY_USD, utc(2026, 3, 15, 0, 0, 0),
	    utc(2026, 3, 15, 0, 0, 0), utc(2026, 3, 16, 0, 0, 0));
	assert_period(BUDGET_DAILY_USD, utc(2026, 3, 15, 23, 59, 59),
	    utc(2026, 3, 15, 0, 0, 0), utc(2026, 3, 16, 0, 0, 0));
	/* Month ends, leap days, the end of a year. */
	assert_period(BUDGET_DAILY_TOKENS, utc(2026, 1, 31, 8, 0, 0),
	    utc(2026, 1, 31, 0, 0, 0), utc(2026, 2, 1, 0, 0, 0));
	assert_period(BUDGET_DAILY_TOKENS, utc(2024, 2, 28, 8, 0, 0),
	    utc(2024, 2, 28, 0, 0, 0), utc(2024, 2, 29, 0, 0, 0));
	assert_period(BUDGET_DAILY_TOKENS, utc(2024, 2, 29, 8, 0, 0),
	    utc(2024, 2, 29, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0));
	assert_period(BUDGET_DAILY_TOKENS, utc(2100, 2, 28, 8, 0, 0),
	    utc(2100, 2, 28, 0, 0, 0), utc(2100, 3, 1, 0, 0, 0));
	assert_period(BUDGET_DAILY_TOKENS, utc(2025, 12, 31, 23, 0, 0),
	    utc(2025, 12, 31, 0, 0, 0), utc(2026, 1, 1, 0, 0, 0));
}

static void
test_period_monthly(void **state)
{
	(void)state;
	assert_period(BUDGET_MONTHLY_USD, utc(2026, 3, 15, 12, 0, 0),
	    utc(2026, 3, 1, 0, 0, 0), utc(2026, 4, 1, 0, 0, 0));
	assert_period(BUDGET_MONTHLY_USD, utc(2026, 3, 1, 0, 0, 0),
	    utc(2026, 3, 1, 0, 0, 0), utc(2026, 4, 1, 0, 0, 0));
	assert_period(BUDGET_MONTHLY_USD, utc(2026, 2, 28, 23, 59, 59),
	    utc(2026, 2, 1, 0, 0, 0), utc(2026, 3, 1, 0, 0, 0));
	/* The 31st does not spill into the month after next. */
	assert_period(BUDGET_MONTHLY_TOKENS, utc(2026, 1, 31, 12, 0, 0),
	    utc(2026, 1, 1, 0, 0, 0), utc(2026, 2, 1, 0, 0, 0));
	assert_period(BUDGET_MONTHLY_TOKENS, utc(2024, 2, 29, 12, 0, 0),
	    utc(2024, 2, 1, 0, 0, 0), utc(2024, 3, 1, 0, 0, 0));
	assert_period(BUDGET_MONTHLY_TOKENS, utc(2025, 12, 31, 23, 59, 59),
	    utc(2025, 12, 1, 0, 0, 0), utc(2026, 1, 1, 0, 0, 0));
	assert_period(BUDGET_MONTHLY_TOKENS, utc(2026, 1, 1, 0, 0, 0),
	    utc(2026, 1, 1, 0, 0, 0), utc(2026, 2, 1, 0, 0, 0));
}

static void
test_day_string(void **state)
{
	char b[16];

	(void)state;
	assert_string_equal(usage_day(utc(2024, 2, 29, 23, 59, 59), b,
	    sizeof(b)), "2024-02-29");
	assert_string_equal(usage_day(utc(2026, 1, 1, 0, 0, 0), b, sizeof(b)),
	    "2026-01-01");
}

/* ---- money and estimates ---- */

static void
test_cost(void **state)
{
	struct provider_conf pv;

	(void)state;
	memset(&pv, 0, sizeof(pv));
	assert_int_equal(usage_cost_nusd(&pv, 1000, 1000), 0);	/* no price */
	assert_int_equal(usage_cost_nusd(NULL, 1000, 1000), 0);
	pv.pv_has_price = 1;
	pv.pv_price_input = 0.15;
	pv.pv_price_output = 0.60;
	/* 1000 × 0.15/1e6 + 500 × 0.60/1e6 = 0.00045 USD */
	assert_int_equal(usage_cost_nusd(&pv, 1000, 500), 450000);
	assert_int_equal(usage_cost_nusd(&pv, 1, 0), 150);
	assert_int_equal(usage_cost_nusd(&pv, 0, 0), 0);
	pv.pv_price_input = 3;
	pv.pv_price_output = 15;
	assert_int_equal(usage_cost_nusd(&pv, 1234567, 89), 3705036000LL);
	/* A million tokens at the price is the price. */
	assert_int_equal(usage_cost_nusd(&pv, 1000000, 0), 3 * NUSD_PER_USD);
	/* Below a nano-dollar rounds to nothing; absurd sums are capped. */
	pv.pv_price_input = 0.000001;
	assert_int_equal(usage_cost_nusd(&pv, 1, 0), 0);
	pv.pv_price_input = 1e12;
	assert_int_equal(usage_cost_nusd(&pv, UINT64_MAX, 0), INT64_MAX);
}

static void
test_estimate(void **state)
{
	(void)state;
	assert_int_equal(usage_estimate(0), 0);
	assert_int_equal(usage_estimate(1), 1);
	assert_int_equal(usage_estimate(4), 1);
	assert_int_equal(usage_estimate(5), 2);
	assert_int_equal(usage_estimate(4000), 1000);
}

/* ---- budgets ---- */

/* Yesterday's tokens do not count today; last month's not this month. */
static void
test_rollover(void **state)
{
	time_t now = utc(2026, 3, 1, 0, 0, 5);

	(void)state;
	/* The last second of February, a lot. */
	record(&alice, utc(2026, 2, 28, 23, 59, 59), 400, 400);
	assert_null(stopped_by(&alice, now));
	/* In February it did stop her, by day and by the tenant's month. */
	assert_non_null(stopped_by(&alice, utc(2026, 2, 28, 23, 59, 59)));
	record(&alice, now, 30, 10);
	assert_null(stopped_by(&alice, now));
	record(&alice, now + 60, 40, 20);		/* 100 today */
	assert_ptr_equal(stopped_by(&alice, now + 120),
	    TAILQ_FIRST(&stub_conf->c_budgets));
	/* The next day she may again, as far as tokens go. */
	assert_null(stopped_by(&alice, utc(2026, 3, 2, 0, 0, 0)));
}

/* Each holder of a role has the role's budget to themselves. */
static void
test_role_budget_per_user(void **state)
{
	time_t				 now = utc(2026, 3, 10, 9, 0, 0);
	const struct budget_conf	*bg;

	(void)state;
	record(&carol, now, 30, 20);
	bg = stopped_by(&carol, now);
	assert_non_null(bg);
	assert_int_equal(bg->bg_scope, BUDGET_ROLE);
	assert_null(stopped_by(&erin, now));
	assert_null(stopped_by(&alice, now));
}

/*
 * A user is a name within a tenant: a user budget, and a role's, counts
 * what its holder used, not what another tenant's user of that name did.
 */
static void
test_budgets_count_a_name_within_its_tenant(void **state)
{
	time_t now = utc(2026, 3, 10, 9, 0, 0);

	(void)state;
	record(&alice, now, 60, 40);			/* her 100 */
	record(&carol, now, 30, 20);			/* the role's 50 */
	assert_non_null(stopped_by(&alice, now));
	assert_non_null(stopped_by(&carol, now));
	assert_null(stopped_by(&alice_beta, now));
	assert_null(stopped_by(&carol_beta, now));
	record(&alice_beta, now, 30, 20);
	assert_null(stopped_by(&alice_beta, now));
	/* A budget for beta's alice: hers alone, counted within beta. */
	record(&alice_beta, now, 5, 5);
	assert_non_null(stopped_by(&alice_beta, now));
}

/* Usage that cannot be read stops the call: the budget is not known. */
static void
test_unreadable_usage_fails_closed(void **state)
{
	time_t			now = utc(2026, 3, 10, 9, 0, 0);
	struct budget_status	bs;

	(void)state;
	assert_int_equal(budget_check(stub_conf, &alice, now, &bs), 0);
	assert_int_equal(sqlite3_exec(store_db(), "ALTER TABLE usage_daily "
	    "RENAME TO usage_daily_gone", NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(budget_check(stub_conf, &alice, now, &bs), BUDGET_UNKNOWN);
	assert_int_equal(sqlite3_exec(store_db(), "ALTER TABLE "
	    "usage_daily_gone RENAME TO usage_daily", NULL, NULL, NULL),
	    SQLITE_OK);
}

/* The tenant's money: every user of it counts. */
static void
test_tenant_budget_usd(void **state)
{
	time_t				 now = utc(2026, 3, 10, 9, 0, 0);
	const struct budget_conf	*bg;

	(void)state;
	/* 1 USD/M in, 2 USD/M out: 0.0005 USD each; the limit is 0.001. */
	record(&frank, now, 10, 245);
	assert_null(stopped_by(&frank, now));
	record(&alice, utc(2026, 3, 3, 0, 0, 0), 10, 245);
	bg = stopped_by(&frank, now);
	assert_non_null(bg);
	assert_int_equal(bg->bg_scope, BUDGET_TENANT);
	assert_int_equal(bg->bg_metric, BUDGET_MONTHLY_USD);
	/* Another tenant is not touched. */
	{
		const struct usage_who other = { "dave", "beta", NULL, 0 };

		assert_null(stopped_by(&other, now));
	}
}

/* Marks: crossed() at each crossing; one audit row per mark and period. */
static void
test_marks_once_a_period(void **state)
{
	time_t day1 = utc(2026, 4, 7, 10, 0, 0), day2 = day1 + 86400;

	(void)state;
	crossings = 0;
	record(&alice, day1, 40, 30);		/* 70 of 100: nothing */
	assert_int_equal(crossings, 0);
	assert_int_equal(count("SELECT COUNT(*) FROM budget_alerts"), 0);
	record(&alice, day1 + 1, 5, 5);		/* 80: the warning */
	assert_int_equal(crossings, 1);
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE kind = "
	    "'budget' AND detail LIKE '%budget_warning%'"), 1);
	record(&alice, day1 + 2, 1, 1);		/* past 80 already */
	assert_int_equal(crossings, 1);
	record(&alice, day1 + 3, 10, 10);	/* 102: the limit */
	assert_int_equal(crossings, 2);
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE kind = "
	    "'budget' AND detail LIKE '%budget_exceeded%'"), 1);
	record(&alice, day1 + 4, 10, 10);	/* over, again: no new rows */
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE kind = "
	    "'budget'"), 2);
	/* A new day is a new period. */
	record(&alice, day2, 50, 50);
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE kind = "
	    "'budget'"), 4);
	assert_int_equal(count("SELECT COUNT(*) FROM budget_alerts WHERE "
	    "holder = 'alice'"), 4);
	/*
	 * Another tenant's alice has marks of her own, of the budget for
	 * any alice and of the one for beta's (monthly-tokens 60).
	 */
	record(&alice_beta, day2, 50, 50);
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE kind = "
	    "'budget' AND tenant = 'beta'"), 4);
	assert_int_equal(count("SELECT COUNT(*) FROM budget_alerts WHERE "
	    "holder = 'alice' AND tenant = 'beta' AND name_tenant = 'beta'"),
	    2);
	/* Periods long over are forgotten. */
	usage_prune_alerts(utc(2026, 6, 2, 0, 0, 0));
	assert_int_equal(count("SELECT COUNT(*) FROM budget_alerts"), 0);
}

/* A deleted user's detail goes; the tenant's bill keeps their spending. */
static void
test_erase_user_keeps_the_bill(void **state)
{
	time_t now = utc(2026, 3, 10, 9, 0, 0);

	(void)state;
	record(&alice, now, 10, 245);
	record(&carol, now, 10, 245);
	record(&alice, now + 1, 1, 1);
	record(&alice_beta, now, 3, 4);
	assert_int_equal(usage_erase_user("alice", "acme"), 0);
	assert_int_equal(count("SELECT COUNT(*) FROM usage WHERE user = "
	    "'alice' AND tenant = 'acme'"), 0);
	assert_int_equal(count("SELECT COUNT(*) FROM usage_daily WHERE user = "
	    "'alice' AND tenant = 'acme'"), 0);
	/* The other tenant's alice keeps hers. */
	assert_int_equal(count("SELECT COUNT(*) FROM usage WHERE user = "
	    "'alice' AND tenant = 'beta'"), 1);
	assert_int_equal(count("SELECT SUM(input_tokens + output_tokens) FROM "
	    "usage_daily WHERE user = 'alice' AND tenant = 'beta'"), 7);
	assert_int_equal(count("SELECT SUM(calls) FROM usage_daily WHERE user "
	    "= ''"), 2);
	assert_int_equal(count("SELECT SUM(input_tokens + output_tokens) FROM "
	    "usage_daily WHERE tenant = 'acme'"), 2 * 255 + 2);
	/* The tenant's money is still spent. */
	assert_non_null(stopped_by(&carol, now));
}

static void
test_erase_tenant(void **state)
{
	time_t	now = utc(2026, 3, 10, 9, 0, 0);
	int64_t	days;
	const struct usage_who other = { "dave", "beta", NULL, 0 };

	(void)state;
	record(&alice, now, 10, 245);
	record(&other, now, 1, 1);
	assert_int_equal(usage_erase_tenant("acme", &days), 0);
	assert_int_equal(days, 1);
	assert_int_equal(count("SELECT COUNT(*) FROM usage WHERE tenant = "
	    "'acme'"), 0);
	assert_int_equal(count("SELECT COUNT(*) FROM usage_daily WHERE "
	    "tenant = 'acme'"), 0);
	assert_int_equal(count("SELECT COUNT(*) FROM usage_daily"), 1);
	assert_int_equal(usage_erase_conversation("c0ffee"), 0);
	assert_int_equal(count("SELECT COUNT(*) FROM usage"), 0);
	assert_int_equal(count("SELECT COUNT(*) FROM usage_daily"), 1);
}

/* ---- the API ---- */

static int64_t
field(struct json_object *o, const char *key)
{
	return json_object_get_int64(json_object_object_get(o, key));
}

/* Sum of the rows' field: the totals must be exactly that. */
static void
assert_sums(struct json_object *doc)
{
	static const char *const keys[] = { "calls", "input_tokens",
	    "output_tokens", "estimated_calls", "tool_calls" };
	struct json_object	*rows, *totals;
	int64_t			 sum;
	size_t			 i, k;
	double			 usd = 0, total;

	rows = json_object_object_get(doc, "rows");
	totals = json_object_object_get(doc, "totals");
	for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		for (sum = 0, i = 0; i < json_object_array_length(rows); i++)
			sum += field(json_object_array_get_idx(rows, i),
			    keys[k]);
		assert_int_equal(sum, field(totals, keys[k]));
	}
	for (i = 0; i < json_object_array_length(rows); i++)
		usd += json_object_get_double(json_object_object_get(
		    json_object_array_get_idx(rows, i), "cost_usd"));
	total = json_object_get_double(json_object_object_get(totals,
	    "cost_usd"));
	/* Exact in nano-dollars; as doubles, to within rounding. */
	assert_true(usd - total < 1e-12 && total - usd < 1e-12);
	assert_true(total > 0);
}

static void
test_api_totals(void **state)
{
	struct store_user	 u = { "alice", "acme", "tenant-admin" };
	struct json_object	*rows;
	time_t			 now = time(NULL);
	char			 q[64], day[16];

	(void)state;
	record(&alice, now, 100, 7);
	record(&alice, now, 3, 9);
	record(&carol, now, 1000, 1);
	record(&alice, now - 86400 * 400, 5, 5);	/* before either range */
	record(&frank, now - 86400 * 40, 5, 5);	/* last month or before */
	usage_api_user(1, &u, NULL);
	if (last_status != 200)
		fail_msg("%s", json_object_to_json_string(last_body));
	rows = json_object_object_get(last_body, "rows");
	assert_int_equal(json_object_array_length(rows), 1);
	assert_int_equal(field(json_object_object_get(last_body, "totals"),
	    "calls"), 2);
	assert_int_equal(field(json_object_object_get(last_body, "totals"),
	    "input_tokens"), 103);
	assert_sums(last_body);
	/* The tenant view: by user too. */
	snprintf(q, sizeof(q), "from=%s", usage_day(now - 86400 * 60, day,
	    sizeof(day)));
	usage_api_tenant(1, &u, q);
	assert_int_equal(last_status, 200);
	assert_int_equal(json_object_array_length(json_object_object_get(
	    last_body, "rows")), 3);
	assert_int_equal(field(json_object_object_get(last_body, "totals"),
	    "calls"), 4);
	assert_sums(last_body);
	/* At most a year at once. */
	usage_api_tenant(1, &u, "from=2000-01-01");
	assert_int_equal(last_status, 422);
	/* Not dates, a range backwards, another tenant, no role. */
	usage_api_user(1, &u, "from=2026-02-30");
	assert_int_equal(last_status, 422);
	usage_api_user(1, &u, "from=2026-03-02&to=2026-03-01");
	assert_int_equal(last_status, 422);
	usage_api_tenant(1, &u, "tenant=beta");
	assert_int_equal(last_status, 403);
	snprintf(u.su_roles, sizeof(u.su_roles), "%s", "");
	usage_api_tenant(1, &u, NULL);
	assert_int_equal(last_status, 403);
}

#define T(f)	cmocka_unit_test_setup_teardown(f, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_period_daily),
		cmocka_unit_test(test_period_monthly),
		cmocka_unit_test(test_day_string),
		cmocka_unit_test(test_cost),
		cmocka_unit_test(test_estimate),
		T(test_rollover),
		T(test_role_budget_per_user),
		T(test_budgets_count_a_name_within_its_tenant),
		T(test_unreadable_usage_fails_closed),
		T(test_tenant_budget_usd),
		T(test_marks_once_a_period),
		T(test_erase_user_keeps_the_bill),
		T(test_erase_tenant),
		T(test_api_totals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
