/*
 * The HTTP API, on the controller's side: the frontend relays each request
 * (MSG_HTTP_REQ) with the caller's identity; here it is routed, every field
 * is checked, and the answer goes back as MSG_HTTP_REP (and, for streams,
 * MSG_HTTP_EVENTs and an MSG_HTTP_END).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>

#include "broker/chat.h"
#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_conv.h"
#include "broker/controller_mcp.h"
#include "broker/controller_pins.h"
#include "broker/controller_session.h"
#include "broker/controller_store.h"
#include "broker/mcpbroker.h"
#include "broker/controller_usage.h"
#include "broker/jwt.h"
#include "broker/websec.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/util.h"
#include "policy/policy.h"

#define PATH_MAX_LEN	512
#define DEV_USER	"dev"

static const char	*api_query;	/* the request's query string */

struct api_route {
	const char	*ar_method;
	const char	*ar_path;	/* exact, or a prefix ending in '/' */
	void		(*ar_fn)(uint64_t, const struct store_user *,
			    const char *rest, struct json_object *body);
};

static void
r_connect(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	chat_connect(id, u, body);
}

static void
r_chat(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	chat_send(id, u, body);
}

static void
r_stop(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	chat_stop(id, u);
}

static void
r_approve(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	chat_approve(id, u, body);
}

static void
r_disconnect(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	chat_disconnect(id, u);
}

/* Another user's session is not the caller's business (no admins yet). */
static int
own(uint64_t id, const char *user, const char *who)
{
	if (strcmp(user, who) == 0)
		return 1;
	api_error(id, 403, "forbidden", "you may only see your own session");
	return 0;
}

static void
r_status(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)body;
	if (own(id, u->su_name, rest))
		chat_status(id, u);
}

static void
r_config(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)body;
	if (own(id, u->su_name, rest))
		chat_config(id, u);
}

static void
r_history(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	chat_history(id, u, 0);
}

static void
r_history_clear(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	chat_history(id, u, 1);
}

/* The server's tools the caller's policy may let it use, less withheld. */
static struct json_object *
visible_tools(const struct store_user *u, const char *server,
    struct json_object *tools)
{
	struct json_object	*out = json_object_new_array(), *t, *name;
	struct policy_caller	 pc;
	struct policy_decision	 pd;
	const char		*roles[16];
	char			 buf[256], tid[256], *save, *r;
	size_t			 i;

	snprintf(buf, sizeof(buf), "%s", u->su_roles);
	memset(&pc, 0, sizeof(pc));
	pc.ps_user = u->su_name;
	pc.ps_tenant = u->su_tenant;
	pc.ps_roles = roles;
	for (r = strtok_r(buf, ",", &save); r != NULL && pc.ps_nroles < 16;
	    r = strtok_r(NULL, ",", &save))
		roles[pc.ps_nroles++] = r;
	for (i = 0; tools != NULL && i < json_object_array_length(tools);
	    i++) {
		t = json_object_array_get_idx(tools, i);
		if (!json_object_object_get_ex(t, "name", &name) ||
		    !controller_tool_usable(server,
		    json_object_get_string(name)))
			continue;
		snprintf(tid, sizeof(tid), "%s.%s", server,
		    json_object_get_string(name));
		policy_decide(&controller_conf()->c_rules, &pc, tid, NULL, 0,
		    &pd);
		if (pd.pd_action != POLICY_DENY)
			json_object_array_add(out, json_object_get(t));
	}
	return out;
}

/* Every configured server with its state and the caller's tools on it. */
static void
r_tools(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	const struct server_conf	*srv;
	struct worker_link		*wl;
	struct json_object		*r, *arr, *o, *tools;
	const char			*state, *error;

	(void)rest;
	(void)body;
	arr = json_object_new_array();
	TAILQ_FOREACH(srv, &controller_conf()->c_servers, srv_entry) {
		if ((wl = controller_worker(srv->srv_name)) == NULL)
			continue;
		state = controller_worker_state(wl, &error);
		tools = controller_worker_tools(wl);
		o = json_object_new_object();
		json_object_object_add(o, "server",
		    json_object_new_string(srv->srv_name));
		json_object_object_add(o, "state", json_object_new_string(
		    state));
		if (error != NULL)
			json_object_object_add(o, "error",
			    json_object_new_string(error));
		json_object_object_add(o, "tools", visible_tools(u,
		    srv->srv_name, tools));
		json_object_array_add(arr, o);
	}
	r = json_object_new_object();
	json_object_object_add(r, "servers", arr);
	api_reply(id, 200, r);
}

/*
 * What a chat may connect to: the configured providers (name, type, model)
 * and toolsets.  Names only, no URL or key; the same for every caller.
 */
static void
r_providers(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	const struct provider_conf	*pv;
	const struct toolset_conf	*ts;
	struct json_object		*r, *arr, *o;

	(void)u;
	(void)rest;
	(void)body;
	arr = json_object_new_array();
	TAILQ_FOREACH(pv, &controller_conf()->c_providers, pv_entry) {
		o = json_object_new_object();
		json_object_object_add(o, "name",
		    json_object_new_string(pv->pv_name));
		json_object_object_add(o, "type", json_object_new_string(
		    provider_type_str(pv->pv_type)));
		json_object_object_add(o, "model", pv->pv_model != NULL ?
		    json_object_new_string(pv->pv_model) : NULL);
		json_object_array_add(arr, o);
	}
	r = json_object_new_object();
	json_object_object_add(r, "providers", arr);
	arr = json_object_new_array();
	TAILQ_FOREACH(ts, &controller_conf()->c_toolsets, ts_entry)
		json_object_array_add(arr, json_object_new_string(
		    ts->ts_name));
	json_object_object_add(r, "toolsets", arr);
	api_reply(id, 200, r);
}

#define QUERY_VALUE_MAX	256

/*
 * The query's parameters are all known and of a sane length: NULL, or what
 * is wrong with it (in why).  A filter that is silently dropped would
 * answer a narrower question with everything.
 */
static const char *
query_check(struct evkeyvalq *q, const char *const *known, char *why,
    size_t whylen)
{
	struct evkeyval	*kv;
	size_t		 i;

	TAILQ_FOREACH(kv, q, next) {
		for (i = 0; known[i] != NULL; i++)
			if (strcmp(kv->key, known[i]) == 0)
				break;
		if (known[i] == NULL)
			snprintf(why, whylen, "unknown query parameter "
			    "\"%.64s\"", kv->key);
		else if (strlen(kv->value) > QUERY_VALUE_MAX)
			snprintf(why, whylen, "query parameter %s is longer "
			    "than %d bytes", kv->key, QUERY_VALUE_MAX);
		else
			continue;
		return why;
	}
	return NULL;
}

static const char *const audit_params[] = { "user", "kind", "tool",
    "decision", "since", "until", "limit", NULL };

/* The filter the query asks for: 0, or -1 with why. */
static int
audit_query(struct evkeyvalq *q, struct audit_filter *f, char *why,
    size_t whylen)
{
	const char	*since, *until, *limit;
	char		*end;
	int64_t		 now = (int64_t)time(NULL) * 1000;
	unsigned long	 n;

	memset(f, 0, sizeof(*f));
	if (query_check(q, audit_params, why, whylen) != NULL)
		return -1;
	f->af_user = evhttp_find_header(q, "user");
	f->af_kind = evhttp_find_header(q, "kind");
	f->af_tool = evhttp_find_header(q, "tool");
	f->af_decision = evhttp_find_header(q, "decision");
	since = evhttp_find_header(q, "since");
	until = evhttp_find_header(q, "until");
	if ((since != NULL && audit_time_parse(since, now, &f->af_since_ms) ==
	    -1) || (until != NULL && audit_time_parse(until, now,
	    &f->af_until_ms) == -1)) {
		snprintf(why, whylen, "since and until: ms since the epoch, "
		    "ISO 8601 in UTC, or a duration such as 1h");
		return -1;
	}
	if ((limit = evhttp_find_header(q, "limit")) != NULL) {
		errno = 0;
		n = strtoul(limit, &end, 10);
		if (*limit < '0' || *limit > '9' || *end != '\0' || errno != 0) {
			snprintf(why, whylen, "limit: a number of rows");
			return -1;
		}
		f->af_limit = n > 10000 ? 10000 : (unsigned int)n;
	}
	return 0;
}

/*
 * The audit trail for administrators: an `admin` sees every tenant, a
 * `tenant-admin` only their own; filters user, kind, tool, decision,
 * since, until (ms, ISO 8601 UTC, or a duration ago: 1h), limit.
 */
static void
r_audit(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	struct audit_filter	 f;
	struct evkeyvalq	 q;
	struct json_object	*r, *rows = NULL;
	char			 why[160], who[OWNER_MAX];
	int			 truncated = 0, bad;

	(void)rest;
	(void)body;
	if (!user_has_role(u, "admin") && !user_has_role(u, "tenant-admin")) {
		api_error(id, 403, "forbidden", "the audit trail is for the "
		    "admin and tenant-admin roles");
		return;
	}
	TAILQ_INIT(&q);
	if (api_query != NULL && evhttp_parse_query_str(api_query, &q) == -1) {
		api_error(id, 400, "bad_request", "the query string could not "
		    "be parsed");
		return;
	}
	if (!(bad = audit_query(&q, &f, why, sizeof(why)) == -1)) {
		audit_filter_who(&f, who);
		/* A tenant-admin's view is their tenant, whoever is named. */
		if (user_has_role(u, "admin"))
			rows = audit_list(&f, &truncated);
		else if (f.af_tenant != NULL && strcmp(f.af_tenant,
		    u->su_tenant) != 0)
			rows = json_object_new_array();
		else {
			f.af_tenant = u->su_tenant;
			rows = audit_list(&f, &truncated);
		}
	}
	evhttp_clear_headers(&q);
	if (bad) {
		api_error(id, 400, "bad_request", "%s", why);
		return;
	}
	r = json_object_new_object();
	json_object_object_add(r, "rows", rows);
	json_object_object_add(r, "truncated", json_object_new_boolean(
	    truncated));
	api_reply(id, 200, r);
}

/* The controller's metrics, for the frontend to put after its own. */
static void
r_metrics(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	struct json_object	*r;
	char			*text;

	(void)rest;
	(void)body;
	if (!user_has_role(u, "admin")) {
		api_error(id, 403, "forbidden", "metrics are for the admin "
		    "role");
		return;
	}
	text = metrics_render();
	r = json_object_new_object();
	json_object_object_add(r, "text", json_object_new_string(text));
	free(text);
	api_reply(id, 200, r);
}

static void
r_pins_pending(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	pins_api_pending(id, u, api_query);
}

static void
r_pins(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	pins_api_pins(id, u, api_query);
}

static void
r_pins_approve(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	pins_api_approve(id, u, body);
}

static void
r_users(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	users_api_list(id, u, api_query);
}

static void
r_user_add(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	users_api_add(id, u, body);
}

static void
r_user_key(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)body;
	users_api_key(id, u, rest);
}

static void
r_user_del(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)body;
	users_api_del(id, u, rest);
}

/* The distinct role names the tool rules mention, in order. */
static size_t
rule_roles(const struct policy_rule_list *rules, const char **out,
    size_t max)
{
	const struct policy_rule	*pr;
	size_t				 n = 0, i;

	TAILQ_FOREACH(pr, rules, pr_entry) {
		if (pr->pr_kind != POLICY_TOOL ||
		    pr->pr_subject != SUBJECT_ROLE)
			continue;
		for (i = 0; i < n; i++)
			if (strcmp(out[i], pr->pr_subject_name) == 0)
				break;
		if (i == n && n < max)
			out[n++] = pr->pr_subject_name;
	}
	return n;
}

/*
 * Who may use the tool: each role the rules name, as a caller holding
 * just that role (no user, no tenant) would be answered when listing;
 * "everyone" for a caller with no role; and the rules naming a user or a
 * tenant that may apply, which such a view cannot evaluate.
 */
static void
tool_access(struct json_object *o, const char *tid, const char **roles,
    size_t nroles)
{
	const struct policy_rule_list	*rules = &controller_conf()->c_rules;
	const struct policy_rule	*pr;
	struct policy_caller		 pc;
	struct policy_decision		 pd;
	struct json_object		*arr, *e;
	size_t				 i;

	memset(&pc, 0, sizeof(pc));
	policy_decide(rules, &pc, tid, NULL, 0, &pd);
	json_object_object_add(o, "everyone", json_object_new_string(
	    policy_action_str(pd.pd_action)));
	arr = json_object_new_array();
	pc.ps_nroles = 1;
	for (i = 0; i < nroles; i++) {
		pc.ps_roles = &roles[i];
		policy_decide(rules, &pc, tid, NULL, 0, &pd);
		if (pd.pd_action == POLICY_DENY)
			continue;
		e = json_object_new_object();
		json_object_object_add(e, "role", json_object_new_string(
		    roles[i]));
		json_object_object_add(e, "action", json_object_new_string(
		    policy_action_str(pd.pd_action)));
		json_object_array_add(arr, e);
	}
	json_object_object_add(o, "roles", arr);
	arr = json_object_new_array();
	TAILQ_FOREACH(pr, rules, pr_entry) {
		if (pr->pr_kind != POLICY_TOOL ||
		    (pr->pr_subject != SUBJECT_USER &&
		    pr->pr_subject != SUBJECT_TENANT))
			continue;
		for (i = 0; i < pr->pr_ntools; i++)
			if (policy_glob_match(pr->pr_tools[i], tid))
				break;
		if (i == pr->pr_ntools)
			continue;
		e = json_object_new_object();
		json_object_object_add(e, "subject", json_object_new_string(
		    policy_subject_str(pr->pr_subject)));
		json_object_object_add(e, "name", json_object_new_string(
		    pr->pr_subject_name));
		if (pr->pr_subject_tenant != NULL)
			json_object_object_add(e, "tenant",
			    json_object_new_string(pr->pr_subject_tenant));
		json_object_object_add(e, "action", json_object_new_string(
		    policy_action_str(pr->pr_action)));
		json_object_object_add(e, "line", json_object_new_int(
		    pr->pr_line));
		json_object_array_add(arr, e);
	}
	json_object_object_add(o, "other_rules", arr);
}

/*
 * GET /api/v1/admin/servers: every configured server with its state, last
 * error and restarts, and every tool its worker listed with who may use it.
 */
static void
r_admin_servers(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	const struct server_conf	*srv;
	struct worker_link		*wl;
	struct json_object		*r, *arr, *o, *tools, *t, *name, *out;
	struct json_object		*e, *v;
	const char			*state, *error, *roles[64];
	char				 tid[256];
	size_t				 nroles, i;

	(void)rest;
	(void)body;
	if (!user_has_role(u, "admin")) {
		api_error(id, 403, "forbidden", "servers are for the admin "
		    "role");
		return;
	}
	if (api_query != NULL && *api_query != '\0') {
		api_error(id, 400, "bad_request", "no query parameters here");
		return;
	}
	nroles = rule_roles(&controller_conf()->c_rules, roles, 64);
	arr = json_object_new_array();
	TAILQ_FOREACH(srv, &controller_conf()->c_servers, srv_entry) {
		if ((wl = controller_worker(srv->srv_name)) == NULL)
			continue;
		state = controller_worker_state(wl, &error);
		tools = controller_worker_tools(wl);
		o = json_object_new_object();
		json_object_object_add(o, "server",
		    json_object_new_string(srv->srv_name));
		json_object_object_add(o, "state", json_object_new_string(
		    state));
		json_object_object_add(o, "error", error != NULL ?
		    json_object_new_string(error) : NULL);
		json_object_object_add(o, "restarts", json_object_new_int64(
		    controller_worker_restarts(wl)));
		out = json_object_new_array();
		for (i = 0; tools != NULL &&
		    i < json_object_array_length(tools); i++) {
			t = json_object_array_get_idx(tools, i);
			if (!json_object_object_get_ex(t, "name", &name))
				continue;
			e = json_object_new_object();
			json_object_object_add(e, "name", json_object_get(
			    name));
			if (json_object_object_get_ex(t, "description", &v))
				json_object_object_add(e, "description",
				    json_object_get(v));
			json_object_object_add(e, "withheld",
			    json_object_new_boolean(!controller_tool_usable(
			    srv->srv_name, json_object_get_string(name))));
			snprintf(tid, sizeof(tid), "%s.%s", srv->srv_name,
			    json_object_get_string(name));
			tool_access(e, tid, roles, nroles);
			json_object_array_add(out, e);
		}
		json_object_object_add(o, "tools", out);
		json_object_array_add(arr, o);
	}
	r = json_object_new_object();
	json_object_object_add(r, "servers", arr);
	api_reply(id, 200, r);
}

static void
r_conversations(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	conv_api_list(id, u, api_query);
}

static void
r_conversation(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)body;
	conv_api_get(id, u, rest, api_query);
}

static void
r_conversation_rename(uint64_t id, const struct store_user *u,
    const char *rest, struct json_object *body)
{
	conv_api_rename(id, u, rest, body);
}

static void
r_conversation_delete(uint64_t id, const struct store_user *u,
    const char *rest, struct json_object *body)
{
	(void)body;
	conv_api_delete(id, u, rest);
}

static void
r_conversation_export(uint64_t id, const struct store_user *u,
    const char *rest, struct json_object *body)
{
	(void)body;
	conv_api_export(id, u, rest, api_query);
}

static void
r_usage(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	usage_api_user(id, u, api_query);
}

static void
r_usage_tenant(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	usage_api_tenant(id, u, api_query);
}

static const struct api_route api_routes[] = {
	{ "GET", "/api/v1/conversations", r_conversations },
	{ "GET", "/api/v1/conversations/*", r_conversation },
	{ "PATCH", "/api/v1/conversations/*", r_conversation_rename },
	{ "DELETE", "/api/v1/conversations/*", r_conversation_delete },
	{ "GET", "/api/v1/conversations/*/export", r_conversation_export },
	{ "GET", "/api/v1/usage", r_usage },
	{ "GET", "/api/v1/usage/tenant", r_usage_tenant },
	{ "GET", "/api/v1/audit", r_audit },
	{ "GET", "/api/v1/admin/tools/pending", r_pins_pending },
	{ "GET", "/api/v1/admin/tools/pins", r_pins },
	{ "POST", "/api/v1/admin/tools/approve", r_pins_approve },
	{ "GET", "/api/v1/admin/users", r_users },
	{ "POST", "/api/v1/admin/users", r_user_add },
	{ "POST", "/api/v1/admin/users/*/key", r_user_key },
	{ "DELETE", "/api/v1/admin/users/", r_user_del },
	{ "GET", "/api/v1/admin/servers", r_admin_servers },
	{ "POST", "/llmchat/connect", r_connect },
	{ "POST", "/llmchat/chat", r_chat },
	{ "POST", "/llmchat/stop", r_stop },
	{ "POST", "/llmchat/approve", r_approve },
	{ "POST", "/llmchat/disconnect", r_disconnect },
	{ "GET", "/llmchat/status/", r_status },
	{ "GET", "/llmchat/config/", r_config },
	{ "GET", "/llmchat/history", r_history },
	{ "DELETE", "/llmchat/history", r_history_clear },
	{ "GET", "/api/v1/tools", r_tools },
	{ "GET", "/api/v1/providers", r_providers },
	{ "GET", "/metrics", r_metrics },
	{ NULL, NULL, NULL }
};

/* What a browser's request carries besides a bearer key (HTTP_REQ). */
struct web_req {
	const char		*wr_method;
	const char		*wr_cookie;	/* the session cookie's value */
	const char		*wr_csrf;	/* X-CSRF-Token */
	const char		*wr_origin;
	const char		*wr_host;
	int			 wr_tls;	/* the listener's */
	int			 wr_session;	/* authenticated by cookie */
	struct web_session	 wr_ws;		/* then, that session */
};

static int
web_fields(struct json_object *req, const char *method, struct web_req *wr)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_method = method;
	if (json_get_str(req, "cookie", WEB_TOKEN_LEN, 1, &wr->wr_cookie) ==
	    -1 || json_get_str(req, "csrf", CSRF_HEADER_MAX, 1,
	    &wr->wr_csrf) == -1 || json_get_str(req, "origin", ORIGIN_MAX - 1,
	    1, &wr->wr_origin) == -1 || json_get_str(req, "host", HOST_MAX, 1,
	    &wr->wr_host) == -1 || json_get_bool(req, "tls", 1, &wr->wr_tls) ==
	    -1 || (wr->wr_cookie != NULL && !websec_token_valid(wr->wr_cookie)))
		return -1;
	return 0;
}

/*
 * A browser names the page behind a request in Origin.  One that is
 * neither ours (the listener's scheme and the Host the browser asked for)
 * nor an allowed-origin is refused before anything else, bearer tokens
 * included: a page that holds a key must still be one of ours.  Clients
 * that are not browsers send no Origin.
 */
static int
origin_ok(uint64_t id, const struct web_req *wr)
{
	const struct auth_conf	*au = &controller_conf()->c_auth;
	char			 o[ORIGIN_MAX];

	if (wr->wr_origin == NULL || websec_origin_allowed(wr->wr_origin,
	    wr->wr_tls, wr->wr_host, au->au_origins, au->au_norigins))
		return 1;
	if (websec_origin_canon(wr->wr_origin, o, sizeof(o)) == -1)
		snprintf(o, sizeof(o), "an opaque or malformed origin");
	log_debug("api: cross-origin request from %s refused", o);
	api_error(id, 403, "cross_origin", "cross-origin request refused: %s "
	    "is neither this broker's origin nor an allowed-origin", o);
	return 0;
}

/* localhost, 127.0.0.1 or [::1], with any port. */
static int
loopback_host(const char *host)
{
	static const char *const names[] = { "localhost", "127.0.0.1",
	    "[::1]" };
	size_t	i, n;

	for (i = 0; host != NULL && i < sizeof(names) / sizeof(names[0]);
	    i++) {
		n = strlen(names[i]);
		if (strncasecmp(host, names[i], n) == 0 && (host[n] == '\0' ||
		    host[n] == ':'))
			return 1;
	}
	return 0;
}

/*
 * MCP clients are not browsers, and a page's request to /mcp that says it
 * comes from the broker's own origin may be a DNS rebinding: the Host it
 * names is the attacker's.  So a page may use /mcp only from an
 * allowed-origin, or from our origin on a loopback Host, which rebinding
 * cannot give an attacker's page.  Requests without Origin (MCP clients)
 * pass.
 */
static int
mcp_origin_ok(uint64_t id, const struct web_req *wr)
{
	const struct auth_conf	*au = &controller_conf()->c_auth;
	char			 o[ORIGIN_MAX];

	if (wr->wr_origin == NULL || websec_origin_allowed(wr->wr_origin,
	    wr->wr_tls, loopback_host(wr->wr_host) ? wr->wr_host : NULL,
	    au->au_origins, au->au_norigins))
		return 1;
	if (websec_origin_canon(wr->wr_origin, o, sizeof(o)) == -1)
		snprintf(o, sizeof(o), "an opaque or malformed origin");
	log_info("mcp: request from origin %s refused (Host %s)", o,
	    wr->wr_host != NULL ? wr->wr_host : "none");
	api_error(id, 403, "cross_origin", "Forbidden: origin %s may not use "
	    "the MCP endpoint (not an allowed-origin)", o);
	return 0;
}

static struct json_object *
error_body(const char *code, const char *message)
{
	struct json_object *o = json_object_new_object(), *e;

	e = json_object_new_object();
	json_object_object_add(e, "code", json_object_new_string(code));
	json_object_object_add(e, "message", json_object_new_string(message));
	json_object_object_add(o, "error", e);
	return o;
}

/* For the frontend: drop the session cookie. */
static struct json_object *
cookie_clear(void)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "clear", json_object_new_boolean(1));
	return o;
}

/* An `auth` row: what happened (or why not) to whom, from where. */
static int64_t
audit_auth(const struct store_user *u, int ok, const char *what,
    const char *peer)
{
	struct json_object	*d = json_object_new_object();
	int64_t			 row;

	json_object_object_add(d, "result", json_object_new_string(ok ?
	    "success" : "failure"));
	json_object_object_add(d, ok ? "event" : "reason",
	    json_object_new_string(what));
	if (peer != NULL)
		json_object_object_add(d, "address", json_object_new_string(
		    peer));
	row = audit_append(AUDIT_KIND_AUTH, u != NULL ? u->su_name : NULL,
	    u != NULL ? u->su_tenant : NULL, d);
	json_object_put(d);
	return row;
}

static int
safe_method(const char *method)
{
	return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
}

/*
 * The browser sends the cookie with every request to us, whichever page
 * made it.  X-CSRF-Token, which only our own pages can have read (from
 * the login or /auth/session answer), shows a state change is the user's.
 */
static int
csrf_ok(uint64_t id, const struct web_req *wr, const struct store_user *u,
    const char *peer)
{
	if (safe_method(wr->wr_method) ||
	    session_csrf_ok(&wr->wr_ws, wr->wr_csrf))
		return 1;
	log_info("api: %s %s by %s from %s without the session's CSRF token "
	    "refused", wr->wr_method, wr->wr_csrf == NULL ? "(no token)" :
	    "(wrong token)", u->su_name, peer != NULL ? peer : "?");
	(void)audit_auth(u, 0, "missing or wrong CSRF token", peer);
	api_error(id, 403, "csrf", "a request made with the session cookie "
	    "must carry the session's X-CSRF-Token header");
	return 0;
}

/*
 * No bearer token: the user whose session the cookie names, if live.
 * Sessions are opened with API keys; where keys are not accepted (a
 * reload took them away) neither are the sessions.
 */
static const struct store_user *
cookie_user(uint64_t id, const char *peer, struct web_req *wr,
    struct store_user *su)
{
	const struct auth_conf *au = &controller_conf()->c_auth;

	switch (au->au_api_keys ? session_lookup(wr->wr_cookie, au, su,
	    &wr->wr_ws) : 1) {
	case 0:
		break;
	case 1:
		api_reply_session(id, 401, error_body("unauthorized", "the "
		    "session has ended; log in again"), cookie_clear());
		return NULL;
	default:
		api_error(id, 500, "internal", "the session store failed");
		return NULL;
	}
	if (!csrf_ok(id, wr, su, peer))
		return NULL;
	wr->wr_session = 1;
	return su;
}

/*
 * Who is calling.  With `auth { api-keys }` that is the owner of the key
 * the request carries, with `auth { jwt }` the user a token names that
 * the configured key set verifies, and nobody without either; without an
 * auth block the broker is a single-user development install: everyone is
 * "dev".
 */
/*
 * Refused keys and tokens, counted per client address: a bucket of
 * FAIL_BURST that refills one every FAIL_REFILL_MS.  An empty bucket turns
 * 401 into 429 (and stops one audit row per attempt); a valid credential
 * still works, since checking one costs a hash or a signature check, and
 * the address may be shared (NAT, proxy).
 */
#define FAIL_BURST	10
#define FAIL_REFILL_MS	6000
#define FAIL_ADDRS	1024

static struct fail_bucket {
	char		fb_addr[64];
	double		fb_tokens;
	uint64_t	fb_last_ms;
} fails[FAIL_ADDRS];

static struct fail_bucket *
fail_bucket(const char *addr)
{
	struct fail_bucket	*fb, *oldest = &fails[0];
	uint64_t		 now = monotonic_ms();
	size_t			 i;

	for (i = 0; i < FAIL_ADDRS; i++) {
		fb = &fails[i];
		if (strcmp(fb->fb_addr, addr) == 0)
			break;
		if (fb->fb_last_ms < oldest->fb_last_ms)
			oldest = fb;
	}
	if (i == FAIL_ADDRS) {
		fb = oldest;
		snprintf(fb->fb_addr, sizeof(fb->fb_addr), "%s", addr);
		fb->fb_tokens = FAIL_BURST;
		fb->fb_last_ms = now;
	}
	fb->fb_tokens += (double)(now - fb->fb_last_ms) / FAIL_REFILL_MS;
	if (fb->fb_tokens > FAIL_BURST)
		fb->fb_tokens = FAIL_BURST;
	fb->fb_last_ms = now;
	return fb;
}

static void
credential_refused(uint64_t id, const char *peer, const char *reason,
    const char *message)
{
	struct fail_bucket	*fb = fail_bucket(peer != NULL ? peer : "?");
	struct json_object	*d;

	if (fb->fb_tokens < 1) {
		api_error(id, 429, "too_many_failures", "too many refused "
		    "credentials from this address; wait a minute");
		return;
	}
	fb->fb_tokens -= 1;
	log_info("api: refused credential from %s: %s",
	    peer != NULL ? peer : "?", reason);
	d = json_object_new_object();
	json_object_object_add(d, "result", json_object_new_string("failure"));
	json_object_object_add(d, "reason", json_object_new_string(reason));
	if (peer != NULL)
		json_object_object_add(d, "address", json_object_new_string(
		    peer));
	(void)audit_append(AUDIT_KIND_AUTH, NULL, NULL, d);
	json_object_put(d);
	api_error(id, 401, "unauthorized", "%s", message);
}

static void
auth_refused(uint64_t id, const char *peer)
{
	credential_refused(id, peer, "unknown API key",
	    "the API key is not valid");
}

/*
 * A JWT from the identity provider: its claims are the identity.  The
 * reason jwt_verify gives never quotes the token, so the caller, the log
 * and the trail may all have it.
 */
static const struct store_user *
token_user(uint64_t id, const char *token, const char *peer,
    struct store_user *su)
{
	char	why[256], reason[300];

	if (jwt_verify(controller_jwt_keys(),
	    &controller_conf()->c_auth.au_jwt_conf, token, time(NULL), su,
	    why, sizeof(why)) == 0)
		return su;
	snprintf(reason, sizeof(reason), "invalid token: %s", why);
	credential_refused(id, peer, reason, reason);
	return NULL;
}

static const struct store_user *
authenticate(uint64_t id, const char *credential, const char *peer,
    struct web_req *wr, struct store_user *su)
{
	static const struct store_user dev = { DEV_USER, "default", "" };
	const struct auth_conf	*au = &controller_conf()->c_auth;

	if (!au->au_api_keys && !au->au_jwt)
		return &dev;
	/* A bearer token, when there is one, decides alone. */
	if (credential == NULL && wr->wr_cookie != NULL)
		return cookie_user(id, peer, wr, su);
	if (credential == NULL) {
		api_error(id, 401, "unauthorized", "send your %s as "
		    "Authorization: Bearer %s", !au->au_jwt ? "API key" :
		    au->au_api_keys ? "API key or token" : "token",
		    !au->au_jwt ? "KEY" : "TOKEN");
		return NULL;
	}
	/* Our keys say what they are; anything else can only be a token. */
	if (au->au_jwt && strncmp(credential, KEY_PREFIX,
	    strlen(KEY_PREFIX)) != 0)
		return token_user(id, credential, peer, su);
	if (!au->au_api_keys) {
		credential_refused(id, peer, "API key not accepted", "API keys "
		    "are not accepted here; send a token from the identity "
		    "provider");
		return NULL;
	}
	if (store_authenticate(credential, su) == -1) {
		auth_refused(id, peer);
		return NULL;
	}
	return su;
}

/* ---- /auth: web sessions ---- */

/* Logins need keys to log in with; a development install has none. */
static int
sessions_on(uint64_t id)
{
	const struct auth_conf *au = &controller_conf()->c_auth;

	if (au->au_api_keys)
		return 1;
	api_error(id, 404, "not_found", "there are no logins without auth { "
	    "api-keys }%s", au->au_jwt ? "; send your token as "
	    "Authorization: Bearer TOKEN" : ": every request is the user "
	    DEV_USER);
	return 0;
}

/* {user, tenant, roles} */
static struct json_object *
who(const struct store_user *u)
{
	struct json_object	*o = json_object_new_object(), *roles;
	char			 buf[sizeof(u->su_roles)], *save, *r;

	roles = json_object_new_array();
	snprintf(buf, sizeof(buf), "%s", u->su_roles);
	for (r = strtok_r(buf, ",", &save); r != NULL;
	    r = strtok_r(NULL, ",", &save))
		json_object_array_add(roles, json_object_new_string(r));
	json_object_object_add(o, "user", json_object_new_string(
	    u->su_name));
	json_object_object_add(o, "tenant", json_object_new_string(
	    u->su_tenant));
	json_object_object_add(o, "roles", roles);
	return o;
}

/* What a page needs to go on with its session. */
static void
add_session(struct json_object *o, const struct web_session *ws)
{
	json_object_object_add(o, "csrf_token", json_object_new_string(
	    ws->ws_csrf));
	json_object_object_add(o, "expires_at", json_object_new_int64(
	    ws->ws_expires_ms));
	json_object_object_add(o, "idle_timeout_ms", json_object_new_int64(
	    (int64_t)controller_conf()->c_auth.au_session_idle_ms));
}

/* The session and its audit row: one transaction, or neither. */
static int
login_record(const struct store_user *u, const char *peer,
    char sid[WEB_TOKEN_LEN + 1], struct web_session *ws)
{
	int ok;

	if (audit_begin() == -1)
		return -1;
	ok = session_create(u->su_name, &controller_conf()->c_auth, sid,
	    ws) == 0 && audit_auth(u, 1, "login", peer) != -1;
	if (audit_end(ok) == -1 || !ok) {
		explicit_bzero(sid, WEB_TOKEN_LEN + 1);
		return -1;
	}
	return 0;
}

/*
 * POST /auth/login {"api_key": KEY} (or Authorization: Bearer KEY): a
 * new session, whose id goes only into the cookie.  A refused key counts
 * against the address like any other.
 */
static void
auth_login(uint64_t id, const char *credential, const char *peer,
    const struct web_req *wr, struct json_object *body)
{
	struct json_object	*r, *s;
	struct web_session	 ws;
	struct store_user	 su;
	const char		*key = NULL;
	char			 sid[WEB_TOKEN_LEN + 1];

	if (!sessions_on(id))
		return;
	if (body != NULL && json_get_str(body, "api_key", KEY_MAX - 1, 1,
	    &key) == -1) {
		api_error(id, 422, "invalid_field", "api_key: expected a "
		    "string of at most %d bytes", KEY_MAX - 1);
		return;
	}
	if (key == NULL && (key = credential) == NULL) {
		api_error(id, 401, "unauthorized", "send your API key as "
		    "{\"api_key\": KEY} or Authorization: Bearer KEY");
		return;
	}
	if (store_authenticate(key, &su) == -1) {
		auth_refused(id, peer);
		return;
	}
	session_purge(&controller_conf()->c_auth);
	/* A login starts afresh: the browser's previous session ends. */
	if (wr->wr_cookie != NULL)
		(void)session_delete_id(wr->wr_cookie);
	if (login_record(&su, peer, sid, &ws) == -1) {
		api_error(id, 500, "internal", "the session could not be "
		    "stored");
		return;
	}
	log_info("api: %s logged in from %s", su.su_name, peer != NULL ?
	    peer : "?");
	r = who(&su);
	add_session(r, &ws);
	s = json_object_new_object();
	json_object_object_add(s, "id", json_object_new_string(sid));
	json_object_object_add(s, "max_age", json_object_new_int64(
	    session_max_age(&ws)));
	explicit_bzero(sid, sizeof(sid));
	api_reply_session(id, 200, r, s);
}

/*
 * POST /auth/logout: the cookie's session ends (with its CSRF token, like
 * any change) and the cookie goes.  Without a live session there is
 * nothing to end, and the answer is the same.
 */
static void
auth_logout(uint64_t id, const char *peer, struct web_req *wr)
{
	struct json_object	*r;
	struct store_user	 su;
	int			 rc = 1;

	if (!sessions_on(id))
		return;
	if (wr->wr_cookie != NULL && (rc = session_lookup(wr->wr_cookie,
	    &controller_conf()->c_auth, &su, &wr->wr_ws)) == -1) {
		api_error(id, 500, "internal", "the session store failed");
		return;
	}
	if (rc == 0) {
		if (!csrf_ok(id, wr, &su, peer))
			return;
		if (session_delete(&wr->wr_ws) == -1) {
			api_error(id, 500, "internal", "the session store "
			    "failed");
			return;
		}
		(void)audit_auth(&su, 1, "logout", peer);
		log_info("api: %s logged out", su.su_name);
	}
	r = json_object_new_object();
	json_object_object_add(r, "logged_out", json_object_new_boolean(1));
	api_reply_session(id, 200, r, cookie_clear());
}

/*
 * GET /auth/session: who the caller is and, for a cookie session, its
 * CSRF token again (a reloaded page has lost it).
 */
static void
auth_session(uint64_t id, const char *credential, const char *peer,
    struct web_req *wr)
{
	const struct store_user	*u;
	struct store_user	 su;
	struct json_object	*r;

	if ((u = authenticate(id, credential, peer, wr, &su)) == NULL)
		return;
	r = who(u);
	if (wr->wr_session)
		add_session(r, &wr->wr_ws);
	api_reply(id, 200, r);
}

static void
auth_route(uint64_t id, const char *path, const char *credential,
    const char *peer, struct web_req *wr, struct json_object *body)
{
	static const struct {
		const char	*method;
		const char	*path;
	} known[] = {
		{ "POST", "/auth/login" }, { "POST", "/auth/logout" },
		{ "GET", "/auth/session" },
	};
	size_t i;

	for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(path, known[i].path) == 0)
			break;
	if (i == sizeof(known) / sizeof(known[0]))
		api_error(id, 404, "not_found", "no such endpoint");
	else if (strcmp(wr->wr_method, known[i].method) != 0)
		api_error(id, 405, "method_not_allowed", "%s is not allowed "
		    "on %s", wr->wr_method, path);
	else if (i == 0)
		auth_login(id, credential, peer, wr, body);
	else if (i == 1)
		auth_logout(id, peer, wr);
	else
		auth_session(id, credential, peer, wr);
}

/*
 * The path matches; rest is what follows a prefix route, or the one
 * non-empty segment a "*" in the pattern stands for.
 */
static int
path_matches(const char *pattern, const char *path, const char **rest)
{
	static char	 seg[PATH_MAX_LEN + 1];
	const char	*star = strchr(pattern, '*'), *end;
	size_t		 len = strlen(pattern);

	if (star != NULL) {
		len = (size_t)(star - pattern);
		if (strncmp(path, pattern, len) != 0)
			return 0;
		end = path + len + strcspn(path + len, "/");
		if (end == path + len || strcmp(end, star + 1) != 0)
			return 0;
		snprintf(seg, sizeof(seg), "%.*s", (int)(end - path - len),
		    path + len);
		*rest = seg;
		return 1;
	}
	if (pattern[len - 1] == '/') {
		if (strncmp(path, pattern, len) != 0 || path[len] == '\0' ||
		    strchr(path + len, '/') != NULL)
			return 0;
		*rest = path + len;
		return 1;
	}
	*rest = "";
	return strcmp(path, pattern) == 0;
}

void
api_request(uint64_t id, struct json_object *req)
{
	const struct api_route	*r;
	struct json_object	*body = NULL;
	const char		*method, *path, *rest;
	const struct store_user	*user;
	const char		*credential = NULL, *peer = NULL;
	struct store_user	 su;
	struct web_req		 wr;
	int			 path_known = 0;

	if (json_get_str(req, "method", 8, 0, &method) == -1 ||
	    json_get_str(req, "path", PATH_MAX_LEN, 0, &path) == -1 ||
	    json_get_str(req, "credential", CREDENTIAL_MAX, 1,
	    &credential) == -1 ||
	    (json_object_object_get_ex(req, "body", &body) &&
	    !json_object_is_type(body, json_type_object))) {
		api_error(id, 400, "bad_request", "malformed request");
		return;
	}
	if (json_get_str(req, "peer", 63, 1, &peer) == -1)
		peer = NULL;
	if (web_fields(req, method, &wr) == -1) {
		api_error(id, 400, "bad_request", "malformed request");
		return;
	}
	if (strncmp(path, "/mcp/", 5) == 0) {
		/* MCP clients send tokens; our cookie is for our pages. */
		wr.wr_cookie = NULL;
		if (!mcp_origin_ok(id, &wr))
			return;
	} else if (!origin_ok(id, &wr))
		return;
	if (strncmp(path, "/.well-known/", 13) == 0) {
		mcp_resource_metadata(id, path, wr.wr_host, wr.wr_tls);
		return;
	}
	if (strncmp(path, "/auth/", 6) == 0) {
		auth_route(id, path, credential, peer, &wr, body);
		return;
	}
	if ((user = authenticate(id, credential, peer, &wr, &su)) == NULL)
		return;
	if (strncmp(path, "/mcp/", 5) == 0) {
		mcp_http(id, user, path + 5, req);
		return;
	}
	if (json_get_str(req, "query", 2048, 1, &api_query) == -1)
		api_query = NULL;
	for (r = api_routes; r->ar_method != NULL; r++) {
		if (!path_matches(r->ar_path, path, &rest))
			continue;
		path_known = 1;
		if (strcmp(r->ar_method, method) == 0) {
			r->ar_fn(id, user, rest, body);
			return;
		}
	}
	if (path_known)
		api_error(id, 405, "method_not_allowed", "%s is not allowed "
		    "on %s", method, path);
	else
		api_error(id, 404, "not_found", "no such endpoint");
}

void
api_cancel(uint64_t id)
{
	chat_request_gone(id);
	mcp_request_gone(id);
}
