/*
 * Metering and budgets on the controller's database.
 *
 * Costs are integers of 1e-9 USD (nano-dollars): a call's cost is rounded
 * once, when it is recorded, and every sum after that is exact, so the
 * totals of /api/v1/usage are the sum of its rows to the last digit.
 *
 * A budget is checked before each LLM call and not reserved: two chats of
 * one tenant that start calls at the same moment may both pass the check,
 * so a limit can be overshot by the calls already in flight, never more.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>
#include <sqlite3.h>

#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_store.h"
#include "broker/controller_usage.h"
#include "common/log.h"

#define USAGE_MAX_DAYS		366	/* one query's range */
#define USAGE_MAX_ROWS		20000	/* one answer's rows */
#define MAX_ROLES		16
#define DAY_LEN			16

/* ---- time and money ---- */

static int
metric_monthly(enum budget_metric m)
{
	return m == BUDGET_MONTHLY_USD || m == BUDGET_MONTHLY_TOKENS;
}

static int
metric_usd(enum budget_metric m)
{
	return m == BUDGET_MONTHLY_USD || m == BUDGET_DAILY_USD;
}

void
budget_period(enum budget_metric m, time_t now, time_t *start, time_t *reset)
{
	struct tm	tm;

	gmtime_r(&now, &tm);
	tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
	tm.tm_isdst = 0;
	if (metric_monthly(m))
		tm.tm_mday = 1;
	*start = timegm(&tm);
	/* timegm normalises: day 32 is the next month, month 12 next year. */
	if (metric_monthly(m))
		tm.tm_mon++;
	else
		tm.tm_mday++;
	*reset = timegm(&tm);
}

const char *
usage_day(time_t t, char *buf, size_t len)
{
	struct tm	tm;

	gmtime_r(&t, &tm);
	if (strftime(buf, len, "%Y-%m-%d", &tm) == 0 && len > 0)
		buf[0] = '\0';
	return buf;
}

static void
iso_time(time_t t, char *buf, size_t len)
{
	struct tm	tm;

	gmtime_r(&t, &tm);
	if (strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0 && len > 0)
		buf[0] = '\0';
}

int64_t
usage_cost_nusd(const struct provider_conf *pv, uint64_t input,
    uint64_t output)
{
	double	c;

	if (pv == NULL || !pv->pv_has_price)
		return 0;
	/* USD per 1e6 tokens is 1e3 nano-dollars per token. */
	c = ((double)input * pv->pv_price_input +
	    (double)output * pv->pv_price_output) * 1e3;
	if (!(c < 9e18))
		return INT64_MAX;
	return (int64_t)(c + 0.5);	/* c >= 0: rounded half up */
}

uint64_t
usage_estimate(size_t bytes)
{
	return (bytes + 3) / 4;
}

/* A cost as a JSON number written exactly: 450000 nUSD is 0.00045. */
static struct json_object *
usd_json(int64_t nusd)
{
	char	buf[40];
	size_t	len;

	snprintf(buf, sizeof(buf), "%s%lld.%09lld", nusd < 0 ? "-" : "",
	    llabs(nusd) / NUSD_PER_USD, llabs(nusd) % NUSD_PER_USD);
	len = strlen(buf);
	while (buf[len - 1] == '0')
		buf[--len] = '\0';
	if (buf[len - 1] == '.')
		buf[--len] = '\0';
	return json_object_new_double_s((double)nusd / NUSD_PER_USD, buf);
}

/* ---- the database ---- */

static int
record_detail(const struct usage_who *w, const struct usage_call *uc)
{
	sqlite3_stmt	*st;

	if ((st = store_prepare("INSERT INTO usage (ts, user, tenant, conversation, "
	    "provider, model, input_tokens, output_tokens, estimated, "
	    "tool_calls, cost_nusd) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
	    "?)")) == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)uc->uc_when * 1000);
	store_bind_str(st, 2, w->uw_user);
	store_bind_str(st, 3, w->uw_tenant);
	store_bind_str(st, 4, uc->uc_conversation);
	store_bind_str(st, 5, uc->uc_provider);
	store_bind_str(st, 6, uc->uc_model);
	sqlite3_bind_int64(st, 7, (sqlite3_int64)uc->uc_input);
	sqlite3_bind_int64(st, 8, (sqlite3_int64)uc->uc_output);
	sqlite3_bind_int(st, 9, uc->uc_estimated != 0);
	sqlite3_bind_int(st, 10, (int)uc->uc_tool_calls);
	sqlite3_bind_int64(st, 11, uc->uc_cost_nusd);
	return store_step_done(st);
}

static int
record_daily(const struct usage_who *w, const struct usage_call *uc)
{
	sqlite3_stmt	*st;
	char		 day[DAY_LEN];

	if ((st = store_prepare("INSERT INTO usage_daily (day, tenant, user, "
	    "provider, model, calls, input_tokens, output_tokens, "
	    "estimated_calls, tool_calls, cost_nusd) VALUES (?, ?, ?, ?, ?, "
	    "1, ?, ?, ?, ?, ?) ON CONFLICT (day, tenant, user, provider, "
	    "model) DO UPDATE SET calls = calls + 1, input_tokens = "
	    "input_tokens + excluded.input_tokens, output_tokens = "
	    "output_tokens + excluded.output_tokens, estimated_calls = "
	    "estimated_calls + excluded.estimated_calls, tool_calls = "
	    "tool_calls + excluded.tool_calls, cost_nusd = cost_nusd + "
	    "excluded.cost_nusd")) == NULL)
		return -1;
	store_bind_str(st, 1, usage_day(uc->uc_when, day, sizeof(day)));
	store_bind_str(st, 2, w->uw_tenant);
	store_bind_str(st, 3, w->uw_user);
	store_bind_str(st, 4, uc->uc_provider);
	store_bind_str(st, 5, uc->uc_model);
	sqlite3_bind_int64(st, 6, (sqlite3_int64)uc->uc_input);
	sqlite3_bind_int64(st, 7, (sqlite3_int64)uc->uc_output);
	sqlite3_bind_int(st, 8, uc->uc_estimated != 0);
	sqlite3_bind_int(st, 9, (int)uc->uc_tool_calls);
	sqlite3_bind_int64(st, 10, uc->uc_cost_nusd);
	return store_step_done(st);
}

/* ---- budgets ---- */

/* Does the budget apply to w, and whose usage does it count? */
static int
budget_applies(const struct budget_conf *bg, const struct usage_who *w,
    const char **holder)
{
	size_t	i;

	switch (bg->bg_scope) {
	case BUDGET_TENANT:
		*holder = w->uw_tenant;
		return strcmp(bg->bg_subject, w->uw_tenant) == 0;
	case BUDGET_USER:	/* a name within a tenant, or in any */
		*holder = w->uw_user;
		return strcmp(bg->bg_subject, w->uw_user) == 0 &&
		    (bg->bg_tenant == NULL || strcmp(bg->bg_tenant,
		    w->uw_tenant) == 0);
	case BUDGET_ROLE:
		/* Each holder of the role on their own, not the role's sum. */
		*holder = w->uw_user;
		for (i = 0; i < w->uw_nroles; i++)
			if (strcmp(bg->bg_subject, w->uw_roles[i]) == 0)
				return 1;
		return 0;
	}
	return 0;
}

/* The limit in the unit the aggregates count: tokens or nano-dollars. */
static double
budget_limit_raw(const struct budget_conf *bg)
{
	return metric_usd(bg->bg_metric) ? bg->bg_limit * NUSD_PER_USD :
	    bg->bg_limit;
}

/*
 * What the budget's holder has used in the period that holds now: the
 * tenant, or the user (a name within the tenant).
 */
static int
budget_used(const struct budget_conf *bg, const char *holder,
    const char *tenant, time_t now, struct budget_status *bs)
{
	sqlite3_stmt	*st;
	char		 from[DAY_LEN], to[DAY_LEN];
	int		 rc;

	memset(bs, 0, sizeof(*bs));
	bs->bs_budget = bg;
	bs->bs_holder = holder;
	budget_period(bg->bg_metric, now, &bs->bs_start, &bs->bs_reset);
	if ((st = store_prepare(bg->bg_scope == BUDGET_TENANT ?
	    "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), "
	    "COALESCE(SUM(cost_nusd), 0) FROM usage_daily WHERE tenant = ?1 "
	    "AND day >= ?3 AND day < ?4" :
	    "SELECT COALESCE(SUM(input_tokens + output_tokens), 0), "
	    "COALESCE(SUM(cost_nusd), 0) FROM usage_daily WHERE tenant = ?1 "
	    "AND user = ?2 AND day >= ?3 AND day < ?4")) == NULL)
		return -1;
	store_bind_str(st, 1, tenant);
	store_bind_str(st, 2, holder);
	store_bind_str(st, 3, usage_day(bs->bs_start, from, sizeof(from)));
	store_bind_str(st, 4, usage_day(bs->bs_reset, to, sizeof(to)));
	if ((rc = sqlite3_step(st)) == SQLITE_ROW)
		bs->bs_used = (double)sqlite3_column_int64(st,
		    metric_usd(bg->bg_metric) ? 1 : 0);
	else
		log_warnx("usage: %s", sqlite3_errmsg(store_db()));
	sqlite3_finalize(st);
	bs->bs_before = bs->bs_used;
	return rc == SQLITE_ROW ? 0 : -1;
}

/*
 * A database that cannot be read stops the call (fail closed): a budget
 * that cannot be checked is not known to have room.
 */
int
budget_check(const struct mcpbroker_conf *conf, const struct usage_who *w,
    time_t now, struct budget_status *over)
{
	const struct budget_conf	*bg;
	struct budget_status		 bs;
	const char			*holder;

	TAILQ_FOREACH(bg, &conf->c_budgets, bg_entry) {
		if (!budget_applies(bg, w, &holder))
			continue;
		if (budget_used(bg, holder, w->uw_tenant, now, &bs) == -1)
			return BUDGET_UNKNOWN;
		if (bs.bs_used >= budget_limit_raw(bg)) {
			*over = bs;
			return BUDGET_OVER;
		}
	}
	return 0;
}

struct json_object *
budget_status_json(const struct budget_status *bs)
{
	const struct budget_conf	*bg = bs->bs_budget;
	struct json_object		*o = json_object_new_object();
	char				 when[32], b[64];

	json_object_object_add(o, "scope", json_object_new_string(
	    budget_scope_str(bg->bg_scope)));
	json_object_object_add(o, "name", json_object_new_string(
	    bg->bg_subject));
	if (bg->bg_tenant != NULL)
		json_object_object_add(o, "tenant", json_object_new_string(
		    bg->bg_tenant));
	if (bg->bg_scope == BUDGET_ROLE)
		json_object_object_add(o, "user", json_object_new_string(
		    bs->bs_holder));
	json_object_object_add(o, "metric", json_object_new_string(
	    budget_metric_str(bg->bg_metric)));
	if (metric_usd(bg->bg_metric)) {
		json_object_object_add(o, "used", usd_json((int64_t)
		    bs->bs_used));
		snprintf(b, sizeof(b), "%.12g", bg->bg_limit);
		json_object_object_add(o, "limit", json_object_new_double_s(
		    bg->bg_limit, b));
	} else {
		json_object_object_add(o, "used", json_object_new_int64(
		    (int64_t)bs->bs_used));
		json_object_object_add(o, "limit", json_object_new_int64(
		    (int64_t)bg->bg_limit + ((double)(int64_t)bg->bg_limit <
		    bg->bg_limit)));
	}
	iso_time(bs->bs_reset, when, sizeof(when));
	json_object_object_add(o, "resets_at", json_object_new_string(when));
	return o;
}

/*
 * The first time in a period that a budget passes a mark, an audit row,
 * and a row in budget_alerts so that a restart does not repeat it.  Both
 * or neither.
 */
static void
budget_alert(const struct budget_status *bs, const struct usage_who *w,
    int percent)
{
	const struct budget_conf	*bg = bs->bs_budget;
	struct json_object		*d;
	sqlite3_stmt			*st;
	char				 period[DAY_LEN];
	int				 ok = 0;

	if (store_begin("budget_alert") == -1)
		return;
	if ((st = store_prepare("INSERT OR IGNORE INTO budget_alerts (scope, "
	    "name, name_tenant, metric, holder, tenant, period, percent, ts) "
	    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")) == NULL)
		goto out;
	store_bind_str(st, 1, budget_scope_str(bg->bg_scope));
	store_bind_str(st, 2, bg->bg_subject);
	store_bind_str(st, 3, bg->bg_tenant != NULL ? bg->bg_tenant : "");
	store_bind_str(st, 4, budget_metric_str(bg->bg_metric));
	store_bind_str(st, 5, bs->bs_holder);
	store_bind_str(st, 6, w->uw_tenant);
	store_bind_str(st, 7, usage_day(bs->bs_start, period, sizeof(period)));
	sqlite3_bind_int(st, 8, percent);
	sqlite3_bind_int64(st, 9, (sqlite3_int64)time(NULL) * 1000);
	if (store_step_done(st) == -1)
		goto out;
	if (sqlite3_changes(store_db()) == 0) {
		ok = 1;			/* said already this period */
		goto out;
	}
	d = budget_status_json(bs);
	json_object_object_add(d, "event", json_object_new_string(
	    percent >= 100 ? "budget_exceeded" : "budget_warning"));
	json_object_object_add(d, "period_start", json_object_new_string(
	    period));
	ok = audit_append(AUDIT_KIND_BUDGET, w->uw_user, w->uw_tenant, d) !=
	    -1;
	json_object_put(d);
	log_info("budget %s \"%s\"%s%s%s %s: %d%% reached by %s of %s",
	    budget_scope_str(bg->bg_scope), bg->bg_subject,
	    bg->bg_tenant != NULL ? " tenant \"" : "",
	    bg->bg_tenant != NULL ? bg->bg_tenant : "",
	    bg->bg_tenant != NULL ? "\"" : "", budget_metric_str(bg->bg_metric),
	    percent, w->uw_user, w->uw_tenant);
 out:
	if (store_end("budget_alert", ok) == -1 || !ok)
		log_warnx("usage: a budget alert was not recorded");
}

static void
budget_after(const struct budget_conf *bg, const char *holder,
    const struct usage_who *w, const struct usage_call *uc,
    budget_crossed_fn crossed, void *arg)
{
	struct budget_status	bs;
	double			limit = budget_limit_raw(bg), warn;

	if (budget_used(bg, holder, w->uw_tenant, uc->uc_when, &bs) == -1)
		return;
	bs.bs_before = bs.bs_used - (metric_usd(bg->bg_metric) ?
	    (double)uc->uc_cost_nusd : (double)(uc->uc_input + uc->uc_output));
	warn = limit * BUDGET_WARN_PERCENT / 100;
	if (crossed != NULL && ((bs.bs_before < warn && bs.bs_used >= warn) ||
	    (bs.bs_before < limit && bs.bs_used >= limit)))
		crossed(&bs, arg);
	if (bs.bs_used >= warn)
		budget_alert(&bs, w, BUDGET_WARN_PERCENT);
	if (bs.bs_used >= limit)
		budget_alert(&bs, w, 100);
}

int
usage_record(const struct mcpbroker_conf *conf, const struct usage_who *w,
    const struct usage_call *uc, budget_crossed_fn crossed, void *arg)
{
	const struct budget_conf	*bg;
	const char			*holder;
	int				 ok;

	if (store_begin("usage_record") == -1)
		return -1;
	ok = record_detail(w, uc) == 0 && record_daily(w, uc) == 0;
	if (store_end("usage_record", ok) == -1 || !ok) {
		log_warnx("usage: a call of %s was not recorded", w->uw_user);
		return -1;
	}
	TAILQ_FOREACH(bg, &conf->c_budgets, bg_entry)
		if (budget_applies(bg, w, &holder))
			budget_after(bg, holder, w, uc, crossed, arg);
	return 0;
}

/* ---- erasure ---- */

int
usage_erase_conversation(const char *conversation)
{
	return store_exec_one("DELETE FROM usage WHERE conversation = ?",
	    conversation);
}

/*
 * The user's detail goes; their part of the daily aggregates stays in the
 * tenant's bill under no name (user ""), so that deleting a user neither
 * loses money spent nor resets the tenant's budgets.
 */
int
usage_erase_user(const char *user, const char *tenant)
{
	if (store_exec_two("DELETE FROM usage WHERE user = ?1 AND tenant = ?2",
	    user, tenant) == -1 ||
	    store_exec_two("INSERT INTO usage_daily (day, tenant, user, "
	    "provider, model, calls, input_tokens, output_tokens, "
	    "estimated_calls, tool_calls, cost_nusd) SELECT day, tenant, '', "
	    "provider, model, calls, input_tokens, output_tokens, "
	    "estimated_calls, tool_calls, cost_nusd FROM usage_daily WHERE "
	    "user = ?1 AND tenant = ?2 ON CONFLICT (day, tenant, user, "
	    "provider, model) DO UPDATE SET calls = calls + excluded.calls, "
	    "input_tokens = input_tokens + "
	    "excluded.input_tokens, output_tokens = output_tokens + "
	    "excluded.output_tokens, estimated_calls = estimated_calls + "
	    "excluded.estimated_calls, tool_calls = tool_calls + "
	    "excluded.tool_calls, cost_nusd = cost_nusd + excluded.cost_nusd",
	    user, tenant) == -1 ||
	    store_exec_two("DELETE FROM usage_daily WHERE user = ?1 AND "
	    "tenant = ?2", user, tenant) == -1)
		return -1;
	return store_exec_two("DELETE FROM budget_alerts WHERE holder = ?1 AND "
	    "tenant = ?2 AND scope <> 'tenant'", user, tenant);
}

int
usage_erase_tenant(const char *tenant, int64_t *days)
{
	*days = 0;
	if (store_exec_one("DELETE FROM usage WHERE tenant = ?", tenant) == -1 ||
	    store_exec_one("DELETE FROM usage_daily WHERE tenant = ?", tenant) == -1)
		return -1;
	*days = sqlite3_changes(store_db());
	return store_exec_one("DELETE FROM budget_alerts WHERE tenant = ?", tenant);
}

/* A period that started before last month's first day is long over. */
void
usage_prune_alerts(time_t now)
{
	time_t	start, reset;
	char	day[DAY_LEN];

	budget_period(BUDGET_MONTHLY_USD, now, &start, &reset);
	budget_period(BUDGET_MONTHLY_USD, start - 1, &start, &reset);
	(void)store_exec_one("DELETE FROM budget_alerts WHERE period < ?",
	    usage_day(start, day, sizeof(day)));
}

/* ---- the API ---- */

/* YYYY-MM-DD, a real date; *t is its midnight UTC. */
static int
parse_day(const char *s, time_t *t)
{
	struct tm	tm;
	char		back[DAY_LEN];
	int		y, m, d, n = 0;

	if (strlen(s) != 10 || sscanf(s, "%4d-%2d-%2d%n", &y, &m, &d, &n) !=
	    3 || n != 10)
		return -1;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = m - 1;
	tm.tm_mday = d;
	*t = timegm(&tm);
	/* 2026-02-30 comes back as March: not a date. */
	return strcmp(usage_day(*t, back, sizeof(back)), s) == 0 ? 0 : -1;
}

struct usage_range {
	char	ur_from[DAY_LEN];
	char	ur_to[DAY_LEN];		/* inclusive */
};

/* from and to (inclusive); by default this month up to today. */
static int
usage_range(uint64_t id, struct evkeyvalq *q, struct usage_range *r)
{
	const char	*from = evhttp_find_header(q, "from");
	const char	*to = evhttp_find_header(q, "to");
	time_t		 now = time(NULL), tf, tt, start, reset;

	budget_period(BUDGET_MONTHLY_USD, now, &start, &reset);
	tf = start;
	tt = now;
	if ((from != NULL && parse_day(from, &tf) == -1) ||
	    (to != NULL && parse_day(to, &tt) == -1)) {
		api_error(id, 422, "invalid_field", "\"from\" and \"to\" are "
		    "dates, YYYY-MM-DD (UTC)");
		return -1;
	}
	if (tt < tf || (tt - tf) / 86400 >= USAGE_MAX_DAYS) {
		api_error(id, 422, "invalid_field", "\"from\" must not be "
		    "after \"to\", and at most %d days apart", USAGE_MAX_DAYS);
		return -1;
	}
	usage_day(tf, r->ur_from, sizeof(r->ur_from));
	usage_day(tt, r->ur_to, sizeof(r->ur_to));
	return 0;
}

struct usage_totals {
	int64_t	ut_calls, ut_in, ut_out, ut_estimated, ut_tools, ut_nusd;
};

static void
totals_add(struct usage_totals *t, sqlite3_stmt *st, int col)
{
	t->ut_calls += sqlite3_column_int64(st, col);
	t->ut_in += sqlite3_column_int64(st, col + 1);
	t->ut_out += sqlite3_column_int64(st, col + 2);
	t->ut_estimated += sqlite3_column_int64(st, col + 3);
	t->ut_tools += sqlite3_column_int64(st, col + 4);
	t->ut_nusd += sqlite3_column_int64(st, col + 5);
}

static void
counts_json(struct json_object *o, const struct usage_totals *t)
{
	json_object_object_add(o, "calls", json_object_new_int64(t->ut_calls));
	json_object_object_add(o, "input_tokens",
	    json_object_new_int64(t->ut_in));
	json_object_object_add(o, "output_tokens",
	    json_object_new_int64(t->ut_out));
	json_object_object_add(o, "estimated_calls",
	    json_object_new_int64(t->ut_estimated));
	json_object_object_add(o, "tool_calls",
	    json_object_new_int64(t->ut_tools));
	json_object_object_add(o, "cost_usd", usd_json(t->ut_nusd));
}

static void
text_field(struct json_object *o, const char *key, sqlite3_stmt *st, int col)
{
	const char *s = (const char *)sqlite3_column_text(st, col);

	/* A deleted user's usage is kept under "": no name to show. */
	json_object_object_add(o, key, s != NULL && *s != '\0' ?
	    json_object_new_string(s) : NULL);
}

/*
 * The rows by day and model (and user, for a tenant); the totals are
 * their sum.  NULL with *status set when the answer is refused.
 */
static struct json_object *
usage_rows(const char *tenant, const char *user, const struct usage_range *r,
    struct usage_totals *t, int *status)
{
	struct json_object	*rows = json_object_new_array(), *o;
	struct usage_totals	 one;
	sqlite3_stmt		*st;
	int			 rc;

	*status = 500;
	st = store_prepare(user != NULL ?
	    "SELECT day, provider, model, NULL, SUM(calls), SUM(input_tokens),"
	    " SUM(output_tokens), SUM(estimated_calls), SUM(tool_calls), "
	    "SUM(cost_nusd) FROM usage_daily WHERE tenant = ?1 AND user = ?2 "
	    "AND day >= ?3 AND day <= ?4 GROUP BY day, provider, model "
	    "ORDER BY day, provider, model" :
	    "SELECT day, provider, model, user, SUM(calls), SUM(input_tokens),"
	    " SUM(output_tokens), SUM(estimated_calls), SUM(tool_calls), "
	    "SUM(cost_nusd) FROM usage_daily WHERE tenant = ?1 AND day >= ?3 "
	    "AND day <= ?4 GROUP BY day, provider, model, user "
	    "ORDER BY day, provider, model, user");
	if (st == NULL) {
		json_object_put(rows);
		return NULL;
	}
	store_bind_str(st, 1, tenant);
	store_bind_str(st, 2, user);
	store_bind_str(st, 3, r->ur_from);
	store_bind_str(st, 4, r->ur_to);
	memset(t, 0, sizeof(*t));
	while ((rc = sqlite3_step(st)) == SQLITE_ROW &&
	    json_object_array_length(rows) < USAGE_MAX_ROWS) {
		o = json_object_new_object();
		text_field(o, "day", st, 0);
		text_field(o, "provider", st, 1);
		text_field(o, "model", st, 2);
		if (user == NULL)
			text_field(o, "user", st, 3);
		memset(&one, 0, sizeof(one));
		totals_add(&one, st, 4);
		totals_add(t, st, 4);
		counts_json(o, &one);
		json_object_array_add(rows, o);
	}
	sqlite3_finalize(st);
	if (rc == SQLITE_ROW)
		*status = 422;
	if (rc != SQLITE_DONE) {
		json_object_put(rows);
		return NULL;
	}
	return rows;
}

/* The budgets that apply to w (only the tenant's: w->uw_user NULL). */
static struct json_object *
budgets_json(const struct usage_who *w)
{
	const struct budget_conf	*bg;
	struct json_object		*arr = json_object_new_array();
	struct budget_status		 bs;
	const char			*holder;

	TAILQ_FOREACH(bg, &controller_conf()->c_budgets, bg_entry) {
		if (w->uw_user == NULL ? bg->bg_scope != BUDGET_TENANT ||
		    strcmp(bg->bg_subject, w->uw_tenant) != 0 :
		    !budget_applies(bg, w, &holder))
			continue;
		if (w->uw_user == NULL)
			holder = w->uw_tenant;
		if (budget_used(bg, holder, w->uw_tenant, time(NULL), &bs) ==
		    0)
			json_object_array_add(arr, budget_status_json(&bs));
	}
	return arr;
}

static void
usage_reply(uint64_t id, const struct usage_who *w, struct evkeyvalq *q)
{
	struct usage_range	 r;
	struct usage_totals	 t;
	struct json_object	*o, *rows, *totals;
	int			 status;

	if (usage_range(id, q, &r) == -1)
		return;
	if ((rows = usage_rows(w->uw_tenant, w->uw_user, &r, &t, &status)) ==
	    NULL) {
		if (status == 422)
			api_error(id, 422, "too_many_rows", "more than %d rows; "
			    "ask for fewer days", USAGE_MAX_ROWS);
		else
			api_error(id, 500, "storage", "the usage could not be "
			    "read");
		return;
	}
	o = json_object_new_object();
	if (w->uw_user != NULL)
		json_object_object_add(o, "user",
		    json_object_new_string(w->uw_user));
	json_object_object_add(o, "tenant", json_object_new_string(
	    w->uw_tenant));
	json_object_object_add(o, "from", json_object_new_string(r.ur_from));
	json_object_object_add(o, "to", json_object_new_string(r.ur_to));
	json_object_object_add(o, "rows", rows);
	totals = json_object_new_object();
	counts_json(totals, &t);
	json_object_object_add(o, "totals", totals);
	json_object_object_add(o, "budgets", budgets_json(w));
	api_reply(id, 200, o);
}

static int
parse_query(uint64_t id, const char *query, struct evkeyvalq *q)
{
	TAILQ_INIT(q);
	if (query != NULL && evhttp_parse_query_str(query, q) == -1) {
		api_error(id, 400, "bad_request", "the query string could not "
		    "be parsed");
		return -1;
	}
	return 0;
}

/* GET /api/v1/usage: the caller's own, by day and model. */
void
usage_api_user(uint64_t id, const struct store_user *u, const char *query)
{
	struct evkeyvalq	 q;
	struct usage_who	 w;
	const char		*roles[MAX_ROLES];
	char			 buf[sizeof(u->su_roles)], *save, *r;

	if (parse_query(id, query, &q) == -1)
		return;
	memset(&w, 0, sizeof(w));
	w.uw_user = u->su_name;
	w.uw_tenant = u->su_tenant;
	w.uw_roles = roles;
	snprintf(buf, sizeof(buf), "%s", u->su_roles);
	for (r = strtok_r(buf, ",", &save); r != NULL && w.uw_nroles <
	    MAX_ROLES; r = strtok_r(NULL, ",", &save))
		roles[w.uw_nroles++] = r;
	usage_reply(id, &w, &q);
	evhttp_clear_headers(&q);
}

/*
 * GET /api/v1/usage/tenant: a tenant-admin sees their own tenant, an
 * admin any (?tenant=, else their own); by day, model and user.
 */
void
usage_api_tenant(uint64_t id, const struct store_user *u, const char *query)
{
	struct evkeyvalq	 q;
	struct usage_who	 w;
	const char		*tenant;

	if (!user_has_role(u, "admin") && !user_has_role(u, "tenant-admin")) {
		api_error(id, 403, "forbidden", "a tenant's usage is for the "
		    "admin and tenant-admin roles");
		return;
	}
	if (parse_query(id, query, &q) == -1)
		return;
	if ((tenant = evhttp_find_header(&q, "tenant")) == NULL)
		tenant = u->su_tenant;
	if (strcmp(tenant, u->su_tenant) != 0 && !user_has_role(u, "admin"))
		api_error(id, 403, "forbidden", "a tenant-admin sees their own "
		    "tenant only");
	else if (strlen(tenant) > 64)
		api_error(id, 422, "invalid_field", "\"tenant\": at most 64 "
		    "characters");
	else {
		memset(&w, 0, sizeof(w));
		w.uw_tenant = tenant;
		usage_reply(id, &w, &q);
	}
	evhttp_clear_headers(&q);
}
