/*
 * The HTTP API, on the controller's side: the frontend relays each request
 * (MSG_HTTP_REQ) with the caller's identity; here it is routed, every field
 * is checked, and the answer goes back as MSG_HTTP_REP (and, for streams,
 * MSG_HTTP_EVENTs and an MSG_HTTP_END).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>

#include "broker/chat.h"
#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_store.h"
#include "common/log.h"
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
	chat_send(id, u->su_name, body);
}

static void
r_stop(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	chat_stop(id, u->su_name);
}

static void
r_approve(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	chat_approve(id, u->su_name, body);
}

static void
r_disconnect(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	chat_disconnect(id, u->su_name);
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
		chat_status(id, u->su_name);
}

static void
r_config(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)body;
	if (own(id, u->su_name, rest))
		chat_config(id, u->su_name);
}

static void
r_history(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	chat_history(id, u->su_name, 0);
}

static void
r_history_clear(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	(void)rest;
	(void)body;
	chat_history(id, u->su_name, 1);
}

/* The server's tools the caller's policy may let it use. */
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
		if (!json_object_object_get_ex(t, "name", &name))
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

static int
has_role(const struct store_user *u, const char *role)
{
	char		 buf[sizeof(u->su_roles)], *save, *r;

	snprintf(buf, sizeof(buf), "%s", u->su_roles);
	for (r = strtok_r(buf, ",", &save); r != NULL;
	    r = strtok_r(NULL, ",", &save))
		if (strcmp(r, role) == 0)
			return 1;
	return 0;
}

/* One query parameter, decoded; NULL when absent. */
static char *
query_param(struct evkeyvalq *q, const char *key)
{
	const char *v = evhttp_find_header(q, key);

	return v != NULL && strlen(v) <= 64 ? strdup(v) : NULL;
}

/*
 * The audit trail for administrators: an `admin` sees every tenant, a
 * `tenant-admin` only their own; filters user, kind, since, until (ms),
 * limit.
 */
static void
r_audit(uint64_t id, const struct store_user *u, const char *rest,
    struct json_object *body)
{
	struct audit_filter	 f;
	struct evkeyvalq	 q;
	struct json_object	*r, *rows;
	char			*user, *kind, *since, *until, *limit;
	int			 truncated = 0;

	(void)rest;
	(void)body;
	if (!has_role(u, "admin") && !has_role(u, "tenant-admin")) {
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
	memset(&f, 0, sizeof(f));
	f.af_user = user = query_param(&q, "user");
	f.af_kind = kind = query_param(&q, "kind");
	since = query_param(&q, "since");
	until = query_param(&q, "until");
	limit = query_param(&q, "limit");
	f.af_since_ms = since != NULL ? strtoll(since, NULL, 10) : 0;
	f.af_until_ms = until != NULL ? strtoll(until, NULL, 10) : 0;
	f.af_limit = limit != NULL ? (unsigned int)strtoul(limit, NULL, 10) : 0;
	if (f.af_limit > 10000)
		f.af_limit = 10000;
	if (!has_role(u, "admin"))
		f.af_tenant = u->su_tenant;
	rows = audit_list(&f, &truncated);
	free(user);
	free(kind);
	free(since);
	free(until);
	free(limit);
	evhttp_clear_headers(&q);
	r = json_object_new_object();
	json_object_object_add(r, "rows", rows);
	json_object_object_add(r, "truncated", json_object_new_boolean(
	    truncated));
	api_reply(id, 200, r);
}

static const struct api_route api_routes[] = {
	{ "GET", "/api/v1/audit", r_audit },
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
	{ NULL, NULL, NULL }
};

/*
 * Who is calling.  With `auth { api-keys }` that is the owner of the key
 * the request carries, and nobody without one; without an auth block the
 * broker is a single-user development install: everyone is "dev".
 */
/*
 * Refused keys, counted per client address: a bucket of FAIL_BURST that
 * refills one every FAIL_REFILL_MS.  An empty bucket turns 401 into 429
 * (and stops one audit row per attempt); a valid key still works, since
 * checking one costs a hash, and the address may be shared (NAT, proxy).
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
auth_refused(uint64_t id, const char *peer)
{
	struct fail_bucket	*fb = fail_bucket(peer != NULL ? peer : "?");
	struct json_object	*d;

	if (fb->fb_tokens < 1) {
		api_error(id, 429, "too_many_failures", "too many refused API "
		    "keys from this address; wait a minute");
		return;
	}
	fb->fb_tokens -= 1;
	log_info("api: a request with an unknown API key from %s",
	    peer != NULL ? peer : "?");
	d = json_object_new_object();
	json_object_object_add(d, "result", json_object_new_string("failure"));
	json_object_object_add(d, "reason", json_object_new_string(
	    "unknown API key"));
	if (peer != NULL)
		json_object_object_add(d, "address", json_object_new_string(
		    peer));
	(void)audit_append(AUDIT_KIND_AUTH, NULL, NULL, d);
	json_object_put(d);
	api_error(id, 401, "unauthorized", "the API key is not valid");
}

static const struct store_user *
authenticate(uint64_t id, const char *credential, const char *peer,
    struct store_user *su)
{
	static const struct store_user dev = { DEV_USER, "default", "" };

	if (controller_conf()->c_auth.au_jwt &&
	    !controller_conf()->c_auth.au_api_keys) {
		/* Configured, but not available here: nobody gets in. */
		api_error(id, 401, "unauthorized", "JWT authentication is not "
		    "available in this version; configure auth { api-keys }");
		return NULL;
	}
	if (!controller_conf()->c_auth.au_api_keys)
		return &dev;
	if (credential == NULL) {
		api_error(id, 401, "unauthorized", "send your API key as "
		    "Authorization: Bearer KEY");
		return NULL;
	}
	if (store_authenticate(credential, su) == -1) {
		auth_refused(id, peer);
		return NULL;
	}
	return su;
}

/* The path matches; rest is what follows a prefix route. */
static int
path_matches(const char *pattern, const char *path, const char **rest)
{
	size_t len = strlen(pattern);

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
	int			 path_known = 0;

	if (json_get_str(req, "method", 8, 0, &method) == -1 ||
	    json_get_str(req, "path", PATH_MAX_LEN, 0, &path) == -1 ||
	    json_get_str(req, "credential", 255, 1, &credential) == -1 ||
	    (json_object_object_get_ex(req, "body", &body) &&
	    !json_object_is_type(body, json_type_object))) {
		api_error(id, 400, "bad_request", "malformed request");
		return;
	}
	if (json_get_str(req, "peer", 63, 1, &peer) == -1)
		peer = NULL;
	if ((user = authenticate(id, credential, peer, &su)) == NULL)
		return;
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
}
