/*
 * The controller: the broker's brain.  It knows every MCP server's state
 * from its worker, answers the frontend, and (in later layers) runs
 * conversations, policy, budgets and the audit trail.  Trust goes one way:
 * a worker is less trusted than the controller, so anything a worker says is
 * checked against what the controller expects of that worker.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/audit_format.h"
#include "broker/chat.h"
#include "broker/child_connect.h"
#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_conv.h"
#include "broker/controller_mcp.h"
#include "broker/controller_metrics.h"
#include "broker/controller_pins.h"
#include "broker/controller_session.h"
#include "broker/controller_store.h"
#include "broker/controller_usage.h"
#include "broker/jwt.h"
#include "broker/mcpbroker.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/util.h"
#include "policy/policy.h"

enum server_state {
	SS_STARTING,
	SS_READY,
	SS_DEGRADED,
	SS_DOWN,
};

static const char *const server_states[] = {
	[SS_STARTING] = "starting",
	[SS_READY] = "ready",
	[SS_DEGRADED] = "degraded",
	[SS_DOWN] = "down",
};

/*
 * A worker that keeps dying is restarted with backoff all the same, and
 * between deaths it may look ready.  CRASH_LOOP_EXITS exits within
 * CRASH_LOOP_WINDOW_MS make a crash loop: the server shows as degraded
 * (so /readyz fails), and the log and the audit trail say so once.  With
 * the parent's backoff (1 s doubling) a worker that dies as it starts gets
 * there in about 15 s; one that dies now and then, never.  The episode
 * ends once the worker has stayed up and ready for CRASH_LOOP_CALM_MS.
 */
#define CRASH_LOOP_EXITS	5
#define CRASH_LOOP_WINDOW_MS	(60 * 1000)
#define CRASH_LOOP_CALM_MS	(30 * 1000)

/* One per configured server: its worker's channel and what we know. */
struct worker_link {
	TAILQ_ENTRY(worker_link) wl_entry;
	char			 wl_name[NAME_MAX_LEN];
	struct peer		 wl_peer;
	enum server_state	 wl_state;
	char			 wl_error[256];
	unsigned int		 wl_restarts;
	struct json_object	*wl_tools;	/* the worker's last list */
	struct json_object	*wl_caps;	/* the server's capabilities */
	struct json_object	*wl_withheld;	/* {TOOL: true}: by pins */
	uint64_t		 wl_exits[CRASH_LOOP_EXITS]; /* ms, a ring */
	unsigned int		 wl_nexits;
	int			 wl_looping;
	char			 wl_loop_why[256];
	struct event		*wl_calm;	/* ends a crash loop */
};
TAILQ_HEAD(worker_link_list, worker_link);

/*
 * A tool call we sent to a worker.  The worker may answer only calls we
 * issued to it (the monitor's permission table): anything else is a
 * protocol violation and costs it its channel.
 */
struct tool_call {
	TAILQ_ENTRY(tool_call)	 tc_entry;
	uint64_t		 tc_id;
	struct worker_link	*tc_worker;
	tool_call_fn		 tc_done;
	tool_progress_fn	 tc_progress;	/* or NULL */
	void			*tc_arg;
};
TAILQ_HEAD(tool_call_list, tool_call);

static struct {
	struct mcpbroker_conf	*conf;
	struct peer		 frontend;
	struct worker_link_list	 workers;
	struct tool_call_list	 calls;
	uint64_t		 next_call;
	struct http_client	*http;		/* to the LLM providers */
	int			 store_open;
	struct jwt_keys		*jwt;		/* auth { jwt }: its JWKS */
} ctl;

static int	controller_recv_peer(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_worker_down(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_ready_req(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_worker_ready(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_worker_state(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_worker_tools(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_tool_result(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_tool_progress(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_server_notify(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_admin(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_backup(struct peer *, struct msg *,
		    struct json_object *);
static void	audit_system(const char *, const char *, const char *,
		    const char *);
static int	controller_recv_http_req(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_http_cancel(struct peer *, struct msg *,
		    struct json_object *);

static const struct dispatch controller_dispatch_parent[] = {
	{ MSG_CONF_TEXT, child_recv_conf_text, 0 },
	{ MSG_CONF_SECRET, child_recv_secret, 0 },
	{ MSG_CONF_PEER, controller_recv_peer, DISPATCH_FD },
	{ MSG_CONF_DONE, child_recv_done, 0 },
	{ MSG_START, child_recv_start, 0 },
	{ MSG_WORKER_DOWN, controller_recv_worker_down, 0 },
	{ MSG_ADMIN_REQ, controller_recv_admin, 0 },
	{ MSG_ADMIN_BACKUP, controller_recv_backup, DISPATCH_FD },
	{ MSG_CONNECTED, child_recv_connected, DISPATCH_FD },
	{ MSG_CONNECT_FAILED, child_recv_connect_failed, 0 },
	DISPATCH_END
};

static const struct dispatch controller_dispatch_frontend[] = {
	{ MSG_READY_REQ, controller_recv_ready_req, 0 },
	{ MSG_HTTP_REQ, controller_recv_http_req, 0 },
	{ MSG_HTTP_CANCEL, controller_recv_http_cancel, 0 },
	DISPATCH_END
};

static const struct dispatch controller_dispatch_worker[] = {
	{ MSG_WORKER_READY, controller_recv_worker_ready, DISPATCH_ONCE },
	{ MSG_WORKER_STATE, controller_recv_worker_state, 0 },
	{ MSG_WORKER_TOOLS, controller_recv_worker_tools, 0 },
	{ MSG_TOOL_RESULT, controller_recv_tool_result, 0 },
	{ MSG_TOOL_PROGRESS, controller_recv_tool_progress, 0 },
	{ MSG_SERVER_NOTIFY, controller_recv_server_notify, 0 },
	DISPATCH_END
};

static struct worker_link *
worker_find(const char *name)
{
	struct worker_link *wl;

	TAILQ_FOREACH(wl, &ctl.workers, wl_entry)
		if (strcmp(wl->wl_name, name) == 0)
			return wl;
	return NULL;
}

/* A crash loop shows on a worker that is up; one that is down is down. */
static enum server_state
worker_shown_state(const struct worker_link *wl)
{
	if (wl->wl_looping && wl->wl_state != SS_DOWN)
		return SS_DEGRADED;
	return wl->wl_state;
}

static const char *
worker_shown_error(const struct worker_link *wl)
{
	if (wl->wl_looping)
		return wl->wl_loop_why;
	return wl->wl_error[0] != '\0' ? wl->wl_error : NULL;
}

static void
worker_calm(int fd, short ev, void *arg)
{
	struct worker_link *wl = arg;

	(void)fd;
	(void)ev;
	wl->wl_looping = 0;
	log_info("server %s: no longer crash-looping: up for %d s",
	    wl->wl_name, CRASH_LOOP_CALM_MS / 1000);
}

/* Only an unbroken stretch of readiness ends a crash loop. */
static void
worker_calm_watch(struct worker_link *wl)
{
	struct timeval tv = { CRASH_LOOP_CALM_MS / 1000, 0 };

	if (!wl->wl_looping)
		return;
	if (wl->wl_calm == NULL &&
	    (wl->wl_calm = evtimer_new(child_base(), worker_calm, wl)) == NULL)
		fatal("evtimer_new");
	if (wl->wl_state != SS_READY)
		evtimer_del(wl->wl_calm);
	else if (!evtimer_pending(wl->wl_calm, NULL))
		evtimer_add(wl->wl_calm, &tv);
}

static void
worker_set_state(struct worker_link *wl, enum server_state st,
    const char *error)
{
	if (wl->wl_state != st)
		log_info("server %s: %s%s%s", wl->wl_name, server_states[st],
		    error != NULL ? ": " : "", error != NULL ? error : "");
	wl->wl_state = st;
	cmetrics_server_state(wl->wl_name, server_states[st]);
	snprintf(wl->wl_error, sizeof(wl->wl_error), "%s",
	    error != NULL ? error : "");
	worker_calm_watch(wl);
}

/* Once per episode: the log at warning level, and the audit trail. */
static void
worker_exit_note(struct worker_link *wl, const char *status)
{
	uint64_t	now = monotonic_ms(), oldest;
	int		was = wl->wl_looping;

	wl->wl_exits[wl->wl_nexits++ % CRASH_LOOP_EXITS] = now;
	oldest = wl->wl_exits[wl->wl_nexits % CRASH_LOOP_EXITS];
	if (!was && (wl->wl_nexits < CRASH_LOOP_EXITS ||
	    now - oldest > CRASH_LOOP_WINDOW_MS))
		return;
	wl->wl_looping = 1;
	snprintf(wl->wl_loop_why, sizeof(wl->wl_loop_why), "crash-looping: "
	    "%d exits in %d s; last: %.200s", CRASH_LOOP_EXITS,
	    CRASH_LOOP_WINDOW_MS / 1000, status);
	if (was)
		return;
	log_warnx("server %s is %s", wl->wl_name, wl->wl_loop_why);
	audit_system("crash_loop", "server", wl->wl_name, wl->wl_loop_why);
}

static void
error_json_done(struct tool_call *tc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Finish a call with an error of ours (code 2: transport). */
static void
error_json_done(struct tool_call *tc, const char *fmt, ...)
{
	struct json_object	*e = json_object_new_object();
	char			 msg[512];
	va_list			 ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_object_object_add(e, "code", json_object_new_int(2));
	json_object_object_add(e, "message", json_object_new_string(msg));
	tc->tc_done(NULL, e, tc->tc_arg);
	json_object_put(e);
}

/* Calls in flight on a worker that is gone fail at once, never hang. */
static void
worker_fail_calls(struct worker_link *wl, const char *why)
{
	struct tool_call *tc, *next;

	TAILQ_FOREACH_SAFE(tc, &ctl.calls, tc_entry, next)
		if (tc->tc_worker == wl) {
			TAILQ_REMOVE(&ctl.calls, tc, tc_entry);
			if (tc->tc_done != NULL)
				error_json_done(tc, "server %s: %s", wl->wl_name,
				    why);
			free(tc);
		}
}

static void
worker_lost(struct peer *p, const char *why)
{
	struct worker_link *wl = p->p_arg;

	/* The parent restarts it; until then calls fail fast. */
	worker_set_state(wl, SS_DOWN, why);
	worker_fail_calls(wl, why);
}

static struct worker_link *
worker_link_new(const char *name)
{
	struct worker_link	*wl;
	char			 pname[NAME_MAX_LEN + 8];

	if ((wl = calloc(1, sizeof(*wl))) == NULL)
		fatal("calloc");
	snprintf(wl->wl_name, sizeof(wl->wl_name), "%s", name);
	snprintf(pname, sizeof(pname), "worker %s", name);
	peer_init(&wl->wl_peer, PROC_WORKER, pname, controller_dispatch_worker,
	    worker_lost, wl);
	wl->wl_state = SS_DOWN;
	snprintf(wl->wl_error, sizeof(wl->wl_error), "not started");
	TAILQ_INSERT_TAIL(&ctl.workers, wl, wl_entry);
	return wl;
}

static void
worker_link_free(struct worker_link *wl)
{
	worker_fail_calls(wl, "removed from the configuration");
	TAILQ_REMOVE(&ctl.workers, wl, wl_entry);
	peer_detach(&wl->wl_peer);
	json_object_put(wl->wl_tools);
	json_object_put(wl->wl_caps);
	json_object_put(wl->wl_withheld);
	if (wl->wl_calm != NULL)
		event_free(wl->wl_calm);
	free(wl);
}

/* ---- from the parent ---- */

static int
controller_recv_peer(struct peer *p, struct msg *m, struct json_object *o)
{
	struct worker_link	*wl;
	const char		*peer, *name;

	(void)p;
	if (json_get_str(o, "peer", 16, 0, &peer) == -1)
		goto bad;
	if (strcmp(peer, "frontend") == 0)
		return child_attach_sibling(&ctl.frontend, m, o, "frontend",
		    PROC_FRONTEND, controller_dispatch_frontend);
	if (strcmp(peer, "worker") != 0 ||
	    json_get_str(o, "name", NAME_MAX_LEN - 1, 0, &name) == -1)
		goto bad;
	if ((wl = worker_find(name)) == NULL)
		wl = worker_link_new(name);
	/* A new channel means a new worker process: forget the old one. */
	worker_fail_calls(wl, "the worker was restarted");
	if (peer_attach(&wl->wl_peer, child_base(), m->m_fd) == -1)
		fatalx("channel to worker %s", name);
	worker_set_state(wl, SS_STARTING, NULL);
	return 0;
 bad:
	close(m->m_fd);
	return -1;
}

static int
controller_recv_worker_down(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct worker_link	*wl;
	const char		*name, *status;
	int64_t			 restarts;
	char			 why[256];

	(void)p;
	(void)m;
	if (json_get_str(o, "name", NAME_MAX_LEN - 1, 0, &name) == -1 ||
	    json_get_str(o, "status", 128, 0, &status) == -1 ||
	    json_get_int(o, "restarts", 0, INT32_MAX, 0, &restarts) == -1)
		return -1;
	if ((wl = worker_find(name)) == NULL)
		return 0;
	peer_detach(&wl->wl_peer);
	wl->wl_restarts = restarts;
	snprintf(why, sizeof(why), "worker %s", status);
	worker_set_state(wl, SS_DOWN, why);
	worker_fail_calls(wl, why);
	audit_system("worker_down", "server", name, status);
	worker_exit_note(wl, why);
	cmetrics_worker_restarts(name, wl->wl_restarts);
	return 0;
}

/* ---- from the frontend ---- */

static int
controller_recv_ready_req(struct peer *p, struct msg *m, struct json_object *o)
{
	struct json_object	*reply, *servers, *s;
	struct worker_link	*wl;
	int			 ready = 1;

	(void)o;
	reply = json_object_new_object();
	servers = json_object_new_array();
	TAILQ_FOREACH(wl, &ctl.workers, wl_entry) {
		if (worker_shown_state(wl) != SS_READY)
			ready = 0;
		s = json_object_new_object();
		json_object_object_add(s, "name",
		    json_object_new_string(wl->wl_name));
		json_object_object_add(s, "state", json_object_new_string(
		    server_states[worker_shown_state(wl)]));
		if (worker_shown_error(wl) != NULL)
			json_object_object_add(s, "error",
			    json_object_new_string(worker_shown_error(wl)));
		if (wl->wl_looping)
			json_object_object_add(s, "crash_loop",
			    json_object_new_boolean(1));
		if (wl->wl_tools != NULL)
			json_object_object_add(s, "tools", json_object_new_int(
			    json_object_array_length(wl->wl_tools)));
		json_object_array_add(servers, s);
	}
	json_object_object_add(reply, "ready", json_object_new_boolean(ready));
	json_object_object_add(reply, "servers", servers);
	(void)peer_send(p, MSG_READY_REP, m->m_hdr.mh_id, -1, reply);
	json_object_put(reply);
	return 0;
}

/* ---- from workers ---- */

static int
controller_recv_worker_ready(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct worker_link	*wl = p->p_arg;
	const char		*name;

	(void)m;
	/* A worker speaks for its own server only. */
	if (json_get_str(o, "name", NAME_MAX_LEN - 1, 0, &name) == -1 ||
	    strcmp(name, wl->wl_name) != 0)
		return -1;
	worker_set_state(wl, SS_READY, NULL);
	return 0;
}

static int
controller_recv_worker_state(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct worker_link	*wl = p->p_arg;
	const char		*name, *state, *error;
	enum server_state	 st;

	(void)m;
	if (json_get_str(o, "name", NAME_MAX_LEN - 1, 0, &name) == -1 ||
	    strcmp(name, wl->wl_name) != 0 ||
	    json_get_str(o, "state", 16, 0, &state) == -1 ||
	    json_get_str(o, "error", 200, 1, &error) == -1)
		return -1;
	for (st = SS_STARTING; st <= SS_DOWN; st++)
		if (strcmp(state, server_states[st]) == 0)
			break;
	if (st > SS_DOWN)
		return -1;
	worker_set_state(wl, st, error);
	return 0;
}

/*
 * The pins decide again which of the worker's tools are withheld; 1 if
 * that changed.  A worker's list and its pins are checked on every list
 * it sends (start, restart, list_changed) and on every reload.
 */
static int
worker_pins(struct worker_link *wl)
{
	const struct server_conf	*srv;
	struct json_object		*w = NULL;
	int				 changed;

	/* A worker's list may come before our first configuration. */
	srv = ctl.conf != NULL ? config_find_server(ctl.conf, wl->wl_name) :
	    NULL;
	if (wl->wl_tools != NULL && srv != NULL)
		w = pins_check(wl->wl_name, srv->srv_pin_policy, wl->wl_tools);
	changed = !json_object_equal(w, wl->wl_withheld);
	json_object_put(wl->wl_withheld);
	wl->wl_withheld = w;
	return changed;
}

static int
controller_recv_worker_tools(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct worker_link	*wl = p->p_arg;
	struct json_object	*tools, *t, *caps = NULL;
	const char		*name;
	size_t			 i;
	int			 changed;

	(void)m;
	if (json_get_str(o, "name", NAME_MAX_LEN - 1, 0, &name) == -1 ||
	    strcmp(name, wl->wl_name) != 0 ||
	    !json_object_object_get_ex(o, "tools", &tools) ||
	    !json_object_is_type(tools, json_type_array) ||
	    json_object_array_length(tools) > 10000 ||
	    (json_object_object_get_ex(o, "capabilities", &caps) &&
	    !json_object_is_type(caps, json_type_object)))
		return -1;
	for (i = 0; i < json_object_array_length(tools); i++) {
		t = json_object_array_get_idx(tools, i);
		if (!json_object_is_type(t, json_type_object) ||
		    json_get_str(t, "name", 128, 0, &name) == -1)
			return -1;
	}
	changed = wl->wl_tools != NULL && !json_object_equal(wl->wl_tools,
	    tools);
	json_object_put(wl->wl_tools);
	wl->wl_tools = json_object_get(tools);
	json_object_put(wl->wl_caps);
	wl->wl_caps = caps != NULL ? json_object_get(caps) : NULL;
	if (worker_pins(wl))
		changed = 1;
	/* MCP clients of ours hear of it; the first list is no change. */
	mcp_worker_tools(wl->wl_name, changed);
	return 0;
}

static struct tool_call *
call_of(struct worker_link *wl, uint64_t id)
{
	struct tool_call *tc;

	TAILQ_FOREACH(tc, &ctl.calls, tc_entry)
		if (tc->tc_id == id && tc->tc_worker == wl)
			return tc;
	return NULL;
}

static int
controller_recv_tool_result(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct json_object	*result = NULL, *error = NULL;
	struct tool_call	*tc;
	int			 has_result, has_error;

	if ((tc = call_of(p->p_arg, m->m_hdr.mh_id)) == NULL)
		return -1;	/* not a call we gave this worker */
	has_result = json_object_object_get_ex(o, "result", &result);
	has_error = json_object_object_get_ex(o, "error", &error);
	if (has_result == has_error || (has_result &&
	    !json_object_is_type(result, json_type_object)) || (has_error &&
	    !json_object_is_type(error, json_type_object)))
		return -1;
	TAILQ_REMOVE(&ctl.calls, tc, tc_entry);
	if (tc->tc_done != NULL)
		tc->tc_done(result, error, tc->tc_arg);
	free(tc);
	return 0;
}

static int
controller_recv_tool_progress(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct tool_call *tc;

	/* Progress may trail a call just finished; a never-issued id lies. */
	if ((tc = call_of(p->p_arg, m->m_hdr.mh_id)) == NULL &&
	    m->m_hdr.mh_id >= ctl.next_call + 1)
		return -1;
	if (tc != NULL && tc->tc_done != NULL && tc->tc_progress != NULL)
		tc->tc_progress(o, tc->tc_arg);
	return 0;
}

/* A server's resources or prompts changed: for our MCP clients. */
static int
controller_recv_server_notify(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct worker_link	*wl = p->p_arg;
	struct json_object	*params = NULL;
	const char		*method, *owner = NULL, *conv = NULL;

	(void)m;
	if (json_get_str(o, "method", 64, 0, &method) == -1 ||
	    json_get_str(o, "owner", OWNER_MAX - 1, 1, &owner) == -1 ||
	    json_get_str(o, "conversation", 64, 1, &conv) == -1 ||
	    (json_object_object_get_ex(o, "params", &params) &&
	    !json_object_is_type(params, json_type_object)))
		return -1;
	mcp_server_notify(wl->wl_name, method, params, owner, conv);
	return 0;
}

/*
 * Send a call (o: a TOOL_CALL or SERVER_REQ payload, taken) to a server's
 * worker.  done runs exactly once: with the result, or with an error
 * object {code, message}.
 */
static uint64_t
call_send(struct worker_link *wl, uint16_t type, struct json_object *o,
    const char *owner, const char *conversation, uint64_t timeout_ms,
    tool_call_fn done, void *arg)
{
	struct tool_call	*tc;

	if ((tc = calloc(1, sizeof(*tc))) == NULL)
		fatal("calloc");
	tc->tc_id = ++ctl.next_call;
	tc->tc_worker = wl;
	tc->tc_done = done;
	tc->tc_arg = arg;
	TAILQ_INSERT_TAIL(&ctl.calls, tc, tc_entry);
	if (!peer_connected(&wl->wl_peer)) {
		TAILQ_REMOVE(&ctl.calls, tc, tc_entry);
		error_json_done(tc, "server %s is %s%s%s", wl->wl_name,
		    server_states[wl->wl_state], wl->wl_error[0] ? ": " : "",
		    wl->wl_error);
		free(tc);
		json_object_put(o);
		return 0;
	}
	if (owner != NULL)
		json_object_object_add(o, "owner",
		    json_object_new_string(owner));
	if (conversation != NULL)
		json_object_object_add(o, "conversation",
		    json_object_new_string(conversation));
	if (timeout_ms > 0)	/* the worker takes at most a day */
		json_object_object_add(o, "timeout_ms", json_object_new_int64(
		    timeout_ms < 86400000 ? timeout_ms : 86400000));
	if (peer_send(&wl->wl_peer, type, tc->tc_id, -1, o) == -1) {
		TAILQ_REMOVE(&ctl.calls, tc, tc_entry);
		error_json_done(tc, "server %s: cannot reach its worker",
		    wl->wl_name);
		free(tc);
		json_object_put(o);
		return 0;
	}
	json_object_put(o);
	return tc->tc_id;
}

#define WITHHELD_REASON	"its definition changed since it was approved, and " \
	"the new one awaits an administrator's approval"

int
controller_tool_usable(const char *server, const char *tool)
{
	struct worker_link *wl = worker_find(server);

	return wl == NULL || wl->wl_withheld == NULL ||
	    !json_object_object_get_ex(wl->wl_withheld, tool, NULL);
}

void
controller_tool_withheld(struct policy_decision *pd)
{
	memset(pd, 0, sizeof(*pd));
	pd->pd_action = POLICY_DENY;
	snprintf(pd->pd_reason, sizeof(pd->pd_reason), "%s", WITHHELD_REASON);
}

void
controller_pins_changed(const char *server)
{
	struct worker_link *wl;

	TAILQ_FOREACH(wl, &ctl.workers, wl_entry)
		if ((server == NULL || strcmp(server, wl->wl_name) == 0) &&
		    worker_pins(wl))
			mcp_worker_tools(wl->wl_name, 1);
}

/*
 * The last gate: a call decided before its tool was withheld (its intent
 * waited for the group commit) does not reach the new definition either.
 */
static int
call_withheld(struct worker_link *wl, const char *tool, tool_call_fn done,
    void *arg)
{
	struct json_object	*e;
	char			 msg[512];

	if (controller_tool_usable(wl->wl_name, tool))
		return 0;
	snprintf(msg, sizeof(msg), "%.64s.%.128s is withheld: %s", wl->wl_name,
	    tool, WITHHELD_REASON);
	e = json_object_new_object();
	json_object_object_add(e, "code", json_object_new_int(4));
	json_object_object_add(e, "message", json_object_new_string(msg));
	done(NULL, e, arg);
	json_object_put(e);
	return 1;
}

uint64_t
controller_call_tool(struct worker_link *wl, const char *tool,
    struct json_object *args, const char *owner, const char *conversation,
    uint64_t timeout_ms, tool_call_fn done, void *arg)
{
	struct json_object *o;

	if (call_withheld(wl, tool, done, arg))
		return 0;
	o = json_object_new_object();

	json_object_object_add(o, "tool", json_object_new_string(tool));
	json_object_object_add(o, "arguments", json_object_get(args));
	return call_send(wl, MSG_TOOL_CALL, o, owner, conversation, timeout_ms,
	    done, arg);
}

/* One of the server's other requests, answered and cancelled alike. */
uint64_t
controller_server_request(struct worker_link *wl, const char *method,
    struct json_object *params, const char *owner, const char *conversation,
    uint64_t timeout_ms, tool_call_fn done, void *arg)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "method", json_object_new_string(method));
	json_object_object_add(o, "params", json_object_get(params));
	return call_send(wl, MSG_SERVER_REQ, o, owner, conversation, timeout_ms,
	    done, arg);
}

void
controller_call_progress(uint64_t call, tool_progress_fn fn)
{
	struct tool_call *tc;

	TAILQ_FOREACH(tc, &ctl.calls, tc_entry)
		if (tc->tc_id == call && tc->tc_done != NULL) {
			tc->tc_progress = fn;
			return;
		}
}

/*
 * The caller hears no more of the call; the entry stays until the worker's
 * one result for it arrives (a cancelled call is answered too), so that a
 * result already on its way is not taken for a lie.
 */
void
controller_cancel_call(uint64_t call)
{
	struct tool_call *tc;

	TAILQ_FOREACH(tc, &ctl.calls, tc_entry)
		if (tc->tc_id == call && tc->tc_done != NULL) {
			tc->tc_done = NULL;
			(void)peer_send(&tc->tc_worker->wl_peer,
			    MSG_TOOL_CANCEL, call, -1, NULL);
			return;
		}
}

void
controller_release(const char *owner, const char *conversation)
{
	struct worker_link	*wl;
	struct json_object	*o = json_object_new_object();

	json_object_object_add(o, "owner", json_object_new_string(owner));
	json_object_object_add(o, "conversation",
	    json_object_new_string(conversation));
	TAILQ_FOREACH(wl, &ctl.workers, wl_entry)
		if (peer_connected(&wl->wl_peer))
			(void)peer_send(&wl->wl_peer, MSG_RELEASE, 0, -1, o);
	json_object_put(o);
}

struct worker_link *
controller_worker(const char *server)
{
	return worker_find(server);
}

const char *
controller_worker_name(const struct worker_link *wl)
{
	return wl->wl_name;
}

struct json_object *
controller_worker_tools(const struct worker_link *wl)
{
	return wl->wl_tools;
}

struct json_object *
controller_worker_caps(const struct worker_link *wl)
{
	return wl->wl_caps;
}

unsigned int
controller_worker_restarts(const struct worker_link *wl)
{
	return wl->wl_restarts;
}

const char *
controller_worker_state(const struct worker_link *wl, const char **error)
{
	*error = worker_shown_error(wl);
	return server_states[worker_shown_state(wl)];
}

struct mcpbroker_conf *
controller_conf(void)
{
	return ctl.conf;
}

const struct jwt_keys *
controller_jwt_keys(void)
{
	return ctl.jwt;
}

struct http_client *
controller_http(void)
{
	return ctl.http;
}

/* ---- administrators (mcpbrokerctl server ..., through the parent) ---- */

void
admin_reply(uint64_t id, struct json_object *reply)
{
	(void)peer_send(child_parent(), MSG_ADMIN_REP, id, -1, reply);
	json_object_put(reply);
}

void
admin_error(uint64_t id, const char *message)
{
	struct json_object *r = json_object_new_object();

	json_object_object_add(r, "ok", json_object_new_boolean(0));
	json_object_object_add(r, "error", json_object_new_string(message));
	admin_reply(id, r);
}

static void
admin_call_done(struct json_object *result, struct json_object *error,
    void *arg)
{
	uint64_t		 id = (uint64_t)(uintptr_t)arg;
	struct json_object	*r = json_object_new_object();

	json_object_object_add(r, "ok", json_object_new_boolean(error ==
	    NULL));
	if (error != NULL)
		json_object_object_add(r, "error", json_object_get(error));
	else
		json_object_object_add(r, "result", json_object_get(result));
	admin_reply(id, r);
}

/*
 * An operator's call on the control socket bypasses policy (it is for
 * testing a server), so it is on record before it runs, or it does not.
 */
static int
audit_admin_call(const char *server, const char *tool, const char *user,
    const char *conv, struct json_object *args)
{
	const struct audit_conf	*ac = &controller_conf()->c_audit;
	struct json_object	*d = json_object_new_object();
	int64_t			 id;

	json_object_object_add(d, "op", json_object_new_string("server_call"));
	json_object_object_add(d, "server", json_object_new_string(server));
	json_object_object_add(d, "tool", json_object_new_string(tool));
	if (user != NULL)
		json_object_object_add(d, "as_user",
		    json_object_new_string(user));
	if (conv != NULL)
		json_object_object_add(d, "conversation",
		    json_object_new_string(conv));
	json_object_object_add(d, "arguments", audit_mask(args, ac->ac_mask,
	    ac->ac_nmask, NULL));
	id = audit_append(AUDIT_KIND_ADMIN, NULL, NULL, d);
	json_object_put(d);
	return id == -1 ? -1 : 0;
}

/* A user or tenant name: letters, digits, and . _ @ - */
static int
valid_name(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++)
		if (!isalnum((unsigned char)*s) && strchr("._@-", *s) == NULL)
			return 0;
	return 1;
}

/*
 * The user an administrator's call is made for, as a per-user instance
 * key: TENANT/NAME as given, or NAME in its tenant (a local user's, else
 * "default", the tenant of users made without one).
 */
static int
admin_owner(const char *user, char owner[OWNER_MAX])
{
	struct store_user	 su;
	const char		*tenant, *name;

	if (owner_split(user, owner, &tenant, &name) == 0) {
		if (strlen(tenant) > 64 || !valid_name(tenant) ||
		    strlen(name) > 64 || !valid_name(name))
			return -1;
		snprintf(owner, OWNER_MAX, "%s", user);
		return 0;
	}
	if (strchr(user, '/') != NULL || strlen(user) > 64 || !valid_name(user))
		return -1;
	(void)owner_key(user, store_user_get(user, &su) == 0 ?
	    su.su_tenant : "default", owner);
	return 0;
}

/* `mcpbrokerctl server tools|call`: through a worker. */
static void
admin_server(uint64_t id, const char *op, struct json_object *o)
{
	struct json_object	*args = NULL, *r;
	struct worker_link	*wl;
	const char		*server, *tool = NULL, *user = NULL;
	const char		*conv = NULL;
	char			 why[128], owner[OWNER_MAX];

	if (json_get_str(o, "server", NAME_MAX_LEN - 1, 0, &server) == -1 ||
	    json_get_str(o, "tool", 128, 1, &tool) == -1 ||
	    json_get_str(o, "user", OWNER_MAX - 1, 1, &user) == -1 ||
	    json_get_str(o, "conversation", 64, 1, &conv) == -1) {
		admin_error(id, "malformed request");
		return;
	}
	if ((wl = worker_find(server)) == NULL) {
		snprintf(why, sizeof(why), "no server \"%s\"", server);
		admin_error(id, why);
		return;
	}
	if (strcmp(op, "tools") == 0) {
		r = json_object_new_object();
		json_object_object_add(r, "ok", json_object_new_boolean(1));
		json_object_object_add(r, "state", json_object_new_string(
		    server_states[worker_shown_state(wl)]));
		json_object_object_add(r, "tools", wl->wl_tools != NULL ?
		    json_object_get(wl->wl_tools) : json_object_new_array());
		admin_reply(id, r);
		return;
	}
	if (tool == NULL || !json_object_object_get_ex(o, "arguments",
	    &args) || !json_object_is_type(args, json_type_object)) {
		admin_error(id, "a call needs a tool and JSON object arguments");
		return;
	}
	if (user != NULL && admin_owner(user, owner) == -1) {
		admin_error(id, "a user is NAME or TENANT/NAME");
		return;
	}
	if (audit_admin_call(server, tool, user != NULL ? owner : NULL, conv,
	    args) == -1) {
		admin_error(id, "the audit trail cannot be written; nothing was "
		    "called");
		return;
	}
	(void)controller_call_tool(wl, tool, args, user != NULL ? owner : NULL,
	    conv, 0, admin_call_done, (void *)(uintptr_t)id);
}

/*
 * A deleted user's conversations go with them, and their usage detail;
 * their share of the daily aggregates stays in the tenant's bill without
 * their name.
 */
static int
user_erase(const char *name, const char *tenant, char *why, size_t whylen)
{
	int64_t	n;

	if (conv_erase_user(name, tenant, &n) == 0 &&
	    usage_erase_user(name, tenant) == 0)
		return 0;
	snprintf(why, whylen, "database: the user's conversations could not "
	    "be erased; nothing changed");
	return -1;
}

/*
 * user_add, user_key or user_del, and its audit row, in one transaction:
 * a change the trail cannot record is not made.
 */
static int
user_change(const char *op, const char *name, const char *tenant,
    const char *roles, const struct store_user *by, char *key, char *why,
    size_t whylen)
{
	struct json_object	*d;
	struct store_user	 gone;
	int			 rc;

	if (audit_begin() == -1) {
		snprintf(why, whylen, "database: cannot begin; nothing "
		    "changed");
		return -1;
	}
	if (strcmp(op, "user_add") == 0)
		rc = store_user_add(name, tenant, roles, key, why, whylen);
	else if (strcmp(op, "user_key") == 0)
		rc = store_user_key(name, key, why, whylen);
	else if (store_user_get(name, &gone) == 0) {
		/* Only this tenant's: a token user may have the same name. */
		tenant = gone.su_tenant;
		if ((rc = store_user_del(name, why, whylen)) == 0)
			rc = user_erase(name, tenant, why, whylen);
	} else {
		/* Unknown, or unreadable: nothing is deleted unerased. */
		snprintf(why, whylen, "no user \"%s\"", name);
		rc = -1;
	}
	if (rc == 0) {
		d = json_object_new_object();
		json_object_object_add(d, "op", json_object_new_string(op));
		json_object_object_add(d, "name", json_object_new_string(name));
		if (strcmp(op, "user_key") != 0)
			json_object_object_add(d, "tenant",
			    json_object_new_string(tenant));
		if (strcmp(op, "user_add") == 0)
			json_object_object_add(d, "roles",
			    json_object_new_string(roles));
		if (by != NULL)
			json_object_object_add(d, "by",
			    json_object_new_string(by->su_name));
		if (audit_append(AUDIT_KIND_ADMIN, by != NULL ? by->su_name :
		    NULL, by != NULL ? by->su_tenant : NULL, d) == -1) {
			snprintf(why, whylen, "cannot write the audit trail; "
			    "nothing changed");
			rc = -1;
		}
		json_object_put(d);
	}
	if (audit_end(rc == 0) == -1 && rc == 0) {
		snprintf(why, whylen, "database: cannot commit; nothing "
		    "changed");
		rc = -1;
	}
	if (rc == -1)
		explicit_bzero(key, KEY_MAX);
	return rc;
}

/* `mcpbrokerctl user add|key|del|list`. */
static void
admin_user(uint64_t id, const char *op, struct json_object *o)
{
	struct json_object	*r;
	struct store_user	 gone;
	const char		*name = NULL, *tenant = NULL, *roles = NULL;
	char			 key[KEY_MAX], why[256];
	int			 rc = 0;

	if (json_get_str(o, "name", 64, 1, &name) == -1 ||
	    json_get_str(o, "tenant", 64, 1, &tenant) == -1 ||
	    json_get_str(o, "roles", 255, 1, &roles) == -1 ||
	    (strcmp(op, "user_list") != 0 && (name == NULL ||
	    !valid_name(name))) || (tenant != NULL && !valid_name(tenant))) {
		admin_error(id, "a user needs a name of letters, digits and "
		    ". _ @ - (64 at most)");
		return;
	}
	/* The session ends first, so that what its turn writes goes too. */
	if (strcmp(op, "user_del") == 0 && store_user_get(name, &gone) == 0)
		chat_forget_user(gone.su_name, gone.su_tenant);
	else
		gone.su_name[0] = '\0';
	r = json_object_new_object();
	key[0] = '\0';
	if (strcmp(op, "user_list") == 0)
		json_object_object_add(r, "users", store_user_list());
	else
		rc = user_change(op, name, tenant != NULL ? tenant : "default",
		    roles != NULL ? roles : "", NULL, key, why, sizeof(why));
	if (rc == -1) {
		json_object_put(r);
		admin_error(id, why);
		return;
	}
	json_object_object_add(r, "ok", json_object_new_boolean(1));
	if (key[0] != '\0') {
		json_object_object_add(r, "key", json_object_new_string(key));
		explicit_bzero(key, sizeof(key));
		log_info("admin: %s for user %s", op, name);
	} else if (strcmp(op, "user_del") == 0) {
		if (gone.su_name[0] != '\0')
			mcp_forget_user(gone.su_name, gone.su_tenant);
		log_info("admin: user %s deleted", name);
	}
	admin_reply(id, r);
}

/* ---- users and keys over HTTP, for the console ---- */

static int
roles_have(const char *roles, const char *role)
{
	char	 buf[256], *save, *r;

	snprintf(buf, sizeof(buf), "%s", roles);
	for (r = strtok_r(buf, ",", &save); r != NULL;
	    r = strtok_r(NULL, ",", &save))
		if (strcmp(r, role) == 0)
			return 1;
	return 0;
}

/*
 * May caller u manage target (a user of tenant with roles)?  An admin may
 * manage anyone; a tenant-admin only the users of their own tenant who
 * hold neither admin nor tenant-admin, so that no tenant-admin can take
 * over an account with as much power as theirs or more.  0, or an HTTP
 * status with why.
 */
static int
user_manage_check(const struct store_user *u, const char *tenant,
    const char *roles, char *why, size_t whylen)
{
	if (user_has_role(u, "admin"))
		return 0;
	if (!user_has_role(u, "tenant-admin")) {
		snprintf(why, whylen, "users are managed by the admin and "
		    "tenant-admin roles");
		return 403;
	}
	if (strcmp(tenant, u->su_tenant) != 0) {
		snprintf(why, whylen, "a tenant-admin manages the users of "
		    "tenant \"%s\" only", u->su_tenant);
		return 403;
	}
	if (roles_have(roles, "admin") || roles_have(roles, "tenant-admin")) {
		snprintf(why, whylen, "the admin and tenant-admin roles are "
		    "granted, and their holders managed, by an admin only");
		return 403;
	}
	return 0;
}

/* The named user (rest of the path), if the caller may manage them. */
static int
user_target(uint64_t id, const struct store_user *u, const char *name,
    struct store_user *su)
{
	char	 why[160];
	int	 st;

	if (!user_has_role(u, "admin") && !user_has_role(u, "tenant-admin")) {
		api_error(id, 403, "forbidden", "users are managed by the "
		    "admin and tenant-admin roles");
		return -1;
	}
	if (strlen(name) > 64 || !valid_name(name) ||
	    store_user_get(name, su) == -1 || (!user_has_role(u, "admin") &&
	    strcmp(su->su_tenant, u->su_tenant) != 0)) {
		/* Another tenant's users are not even named to a tenant-admin. */
		api_error(id, 404, "not_found", "no such user");
		return -1;
	}
	if ((st = user_manage_check(u, su->su_tenant, su->su_roles, why,
	    sizeof(why))) != 0) {
		api_error(id, st, "forbidden", "%s", why);
		return -1;
	}
	return 0;
}

/* GET /api/v1/admin/users: every user (admin), or the tenant's. */
void
users_api_list(uint64_t id, const struct store_user *u, const char *query)
{
	struct json_object	*all, *out, *e, *t;
	size_t			 i;
	int			 admin = user_has_role(u, "admin");

	if (!admin && !user_has_role(u, "tenant-admin")) {
		api_error(id, 403, "forbidden", "users are managed by the "
		    "admin and tenant-admin roles");
		return;
	}
	if (query != NULL && *query != '\0') {
		api_error(id, 400, "bad_request", "no query parameters here");
		return;
	}
	all = store_user_list();
	out = json_object_new_array();
	for (i = 0; i < json_object_array_length(all); i++) {
		e = json_object_array_get_idx(all, i);
		if (!admin && (!json_object_object_get_ex(e, "tenant", &t) ||
		    strcmp(json_object_get_string(t), u->su_tenant) != 0))
			continue;
		json_object_array_add(out, json_object_get(e));
	}
	json_object_put(all);
	e = json_object_new_object();
	json_object_object_add(e, "users", out);
	api_reply(id, 200, e);
}

/* POST /api/v1/admin/users {name, roles[], tenant?} -> {name, key}. */
void
users_api_add(uint64_t id, const struct store_user *u,
    struct json_object *body)
{
	struct json_object	*arr = NULL, *r, *v;
	struct store_user	 su;
	const char		*name, *tenant = NULL, *role;
	char			 roles[256], key[KEY_MAX], why[256];
	size_t			 i, len = 0;
	int			 st;

	if (!user_has_role(u, "admin") && !user_has_role(u, "tenant-admin")) {
		api_error(id, 403, "forbidden", "users are managed by the "
		    "admin and tenant-admin roles");
		return;
	}
	if (body == NULL || json_get_str(body, "name", 64, 0, &name) == -1 ||
	    !valid_name(name)) {
		api_error(id, 422, "invalid_field", "name: letters, digits "
		    "and . _ @ - (64 at most)");
		return;
	}
	if (json_get_str(body, "tenant", 64, 1, &tenant) == -1 ||
	    (tenant != NULL && !valid_name(tenant))) {
		api_error(id, 422, "invalid_field", "tenant: letters, digits "
		    "and . _ @ - (64 at most)");
		return;
	}
	if (tenant == NULL)
		tenant = u->su_tenant;
	roles[0] = '\0';
	if (json_object_object_get_ex(body, "roles", &arr) &&
	    !json_object_is_type(arr, json_type_array)) {
		arr = NULL;
		len = sizeof(roles);
	}
	for (i = 0; arr != NULL && i < json_object_array_length(arr); i++) {
		v = json_object_array_get_idx(arr, i);
		if (!json_object_is_type(v, json_type_string) ||
		    strlen(role = json_object_get_string(v)) > 64 ||
		    !valid_name(role) || len + strlen(role) + 2 >
		    sizeof(roles)) {
			len = sizeof(roles);
			break;
		}
		if (roles_have(roles, role))
			continue;
		len += (size_t)snprintf(roles + len, sizeof(roles) - len,
		    "%s%s", len > 0 ? "," : "", role);
	}
	if (len >= sizeof(roles)) {
		api_error(id, 422, "invalid_field", "roles: an array of names "
		    "of letters, digits and . _ @ - (255 bytes in all)");
		return;
	}
	if ((st = user_manage_check(u, tenant, roles, why,
	    sizeof(why))) != 0) {
		api_error(id, st, "forbidden", "%s", why);
		return;
	}
	if (store_user_get(name, &su) == 0) {
		api_error(id, 409, "exists", "user \"%s\" exists already", name);
		return;
	}
	if (user_change("user_add", name, tenant, roles, u, key, why,
	    sizeof(why)) == -1) {
		api_error(id, 503, "unavailable", "%s", why);
		return;
	}
	log_info("admin: user_add for user %s by %s", name, u->su_name);
	r = json_object_new_object();
	json_object_object_add(r, "name", json_object_new_string(name));
	json_object_object_add(r, "tenant", json_object_new_string(tenant));
	json_object_object_add(r, "roles", json_object_new_string(roles));
	json_object_object_add(r, "key", json_object_new_string(key));
	explicit_bzero(key, sizeof(key));
	api_reply(id, 200, r);
}

/* POST /api/v1/admin/users/NAME/key -> {name, key}: the old key ends. */
void
users_api_key(uint64_t id, const struct store_user *u, const char *name)
{
	struct json_object	*r;
	struct store_user	 su;
	char			 key[KEY_MAX], why[256];

	if (user_target(id, u, name, &su) == -1)
		return;
	if (user_change("user_key", su.su_name, NULL, NULL, u, key, why,
	    sizeof(why)) == -1) {
		api_error(id, 503, "unavailable", "%s", why);
		return;
	}
	log_info("admin: user_key for user %s by %s", su.su_name, u->su_name);
	r = json_object_new_object();
	json_object_object_add(r, "name", json_object_new_string(su.su_name));
	json_object_object_add(r, "key", json_object_new_string(key));
	explicit_bzero(key, sizeof(key));
	api_reply(id, 200, r);
}

/* DELETE /api/v1/admin/users/NAME: not oneself. */
void
users_api_del(uint64_t id, const struct store_user *u, const char *name)
{
	struct json_object	*r;
	struct store_user	 su;
	char			 key[KEY_MAX], why[256];

	if ((user_has_role(u, "admin") || user_has_role(u, "tenant-admin")) &&
	    strcmp(name, u->su_name) == 0) {
		api_error(id, 409, "self", "you cannot delete yourself here; "
		    "another administrator or `mcpbrokerctl user del` can");
		return;
	}
	if (user_target(id, u, name, &su) == -1)
		return;
	chat_forget_user(su.su_name, su.su_tenant);
	if (user_change("user_del", su.su_name, NULL, NULL, u, key, why,
	    sizeof(why)) == -1) {
		api_error(id, 503, "unavailable", "%s", why);
		return;
	}
	mcp_forget_user(su.su_name, su.su_tenant);
	log_info("admin: user %s deleted by %s", su.su_name, u->su_name);
	r = json_object_new_object();
	json_object_object_add(r, "deleted", json_object_new_string(
	    su.su_name));
	api_reply(id, 200, r);
}

/* `mcpbrokerctl policy explain -u USER -t SERVER.TOOL`. */
static void
admin_explain(uint64_t id, struct json_object *o)
{
	struct policy_caller	 pc;
	struct store_user	 su;
	struct json_object	*r;
	const char		*user, *tool, *roles[16];
	char			*text = NULL, buf[256], *save, *role;
	size_t			 len = 0;
	FILE			*f;

	if (json_get_str(o, "user", 64, 0, &user) == -1 ||
	    json_get_str(o, "tool", 200, 0, &tool) == -1) {
		admin_error(id, "explain needs a user and a SERVER.TOOL");
		return;
	}
	if (store_user_get(user, &su) == -1) {
		admin_error(id, "no such user");
		return;
	}
	memset(&pc, 0, sizeof(pc));
	pc.ps_user = su.su_name;
	pc.ps_tenant = su.su_tenant;
	pc.ps_roles = roles;
	snprintf(buf, sizeof(buf), "%s", su.su_roles);
	for (role = strtok_r(buf, ",", &save); role != NULL &&
	    pc.ps_nroles < 16; role = strtok_r(NULL, ",", &save))
		roles[pc.ps_nroles++] = role;
	if ((f = open_memstream(&text, &len)) == NULL)
		fatal("open_memstream");
	policy_explain(&ctl.conf->c_rules, &pc, tool, f);
	fclose(f);
	r = json_object_new_object();
	json_object_object_add(r, "ok", json_object_new_boolean(1));
	json_object_object_add(r, "text", json_object_new_string(text));
	free(text);
	admin_reply(id, r);
}

/* From the parent, but shaped by an administrator: errors are answers. */
static int
controller_recv_admin(struct peer *p, struct msg *m, struct json_object *o)
{
	const char *op;

	(void)p;
	if (json_get_str(o, "op", 16, 0, &op) == -1)
		admin_error(m->m_hdr.mh_id, "no op");
	else if (strcmp(op, "tools") == 0 || strcmp(op, "call") == 0)
		admin_server(m->m_hdr.mh_id, op, o);
	else if (strcmp(op, "policy_explain") == 0)
		admin_explain(m->m_hdr.mh_id, o);
	else if (strncmp(op, "user_", 5) == 0 && (strcmp(op, "user_add") == 0 ||
	    strcmp(op, "user_key") == 0 || strcmp(op, "user_del") == 0 ||
	    strcmp(op, "user_list") == 0))
		admin_user(m->m_hdr.mh_id, op, o);
	else if (strncmp(op, "audit_", 6) == 0)
		audit_admin(m->m_hdr.mh_id, op, o);
	else if (strcmp(op, "tenant_del") == 0)
		conv_admin_tenant_del(m->m_hdr.mh_id, o);
	else if (strncmp(op, "tools_", 6) == 0)
		pins_admin(m->m_hdr.mh_id, op, o);
	else
		admin_error(m->m_hdr.mh_id, "unknown op");
	return 0;
}

/* ---- the HTTP API, relayed by the frontend ---- */

static int
controller_recv_http_req(struct peer *p, struct msg *m, struct json_object *o)
{
	(void)p;
	api_request(m->m_hdr.mh_id, o);
	return 0;
}

static int
controller_recv_http_cancel(struct peer *p, struct msg *m,
    struct json_object *o)
{
	(void)p;
	(void)o;
	api_cancel(m->m_hdr.mh_id);
	return 0;
}

void
api_send(uint16_t type, uint64_t id, struct json_object *o)
{
	(void)peer_send(&ctl.frontend, type, id, -1, o);
	json_object_put(o);
}

void
api_reply(uint64_t id, int status, struct json_object *body)
{
	api_reply_session(id, status, body, NULL);
}

void
api_reply_session(uint64_t id, int status, struct json_object *body,
    struct json_object *session)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "status", json_object_new_int(status));
	if (body != NULL)
		json_object_object_add(o, "body", body);
	if (session != NULL)
		json_object_object_add(o, "session", session);
	api_send(MSG_HTTP_REP, id, o);
}

void
api_error(uint64_t id, int status, const char *code, const char *fmt, ...)
{
	struct json_object	*body = json_object_new_object(), *e;
	char			 msg[1024];
	va_list			 ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	e = json_object_new_object();
	json_object_object_add(e, "code", json_object_new_string(code));
	json_object_object_add(e, "message", json_object_new_string(msg));
	json_object_object_add(body, "error", e);
	api_reply(id, status, body);
}

void
api_stream_start(uint64_t id)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "status", json_object_new_int(200));
	json_object_object_add(o, "stream", json_object_new_boolean(1));
	api_send(MSG_HTTP_REP, id, o);
}

void
api_event(uint64_t id, const char *event, struct json_object *data)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "event", json_object_new_string(event));
	json_object_object_add(o, "data", data);
	api_send(MSG_HTTP_EVENT, id, o);
}

void
api_stream_end(uint64_t id)
{
	api_send(MSG_HTTP_END, id, json_object_new_object());
}

/* Servers gone from the configuration are gone from readiness too. */
static int
controller_configure(struct mcpbroker_conf *conf, int reload)
{
	struct worker_link	*wl, *next;
	struct server_conf	*srv;
	struct jwt_keys		*jwt = NULL;
	char			 why[256];

	/* The parent checked the key set; failing here changes nothing. */
	if (conf->c_auth.au_jwt && (jwt = jwt_keys_parse(
	    conf->c_auth.au_jwt_conf.jw_jwks.sr_value != NULL ?
	    conf->c_auth.au_jwt_conf.jw_jwks.sr_value : "", why,
	    sizeof(why))) == NULL) {
		log_warnx("jwks-file: %s", why);
		return -1;
	}
	jwt_keys_free(ctl.jwt);
	ctl.jwt = jwt;
	TAILQ_FOREACH_SAFE(wl, &ctl.workers, wl_entry, next)
		if (config_find_server(conf, wl->wl_name) == NULL)
			worker_link_free(wl);
	TAILQ_FOREACH(srv, &conf->c_servers, srv_entry)
		if (worker_find(srv->srv_name) == NULL)
			(void)worker_link_new(srv->srv_name);
	config_free(ctl.conf);
	ctl.conf = conf;
	/* Rate counters are keyed by rule: new rules, new counts. */
	policy_rates_reset();
	/* The database is opened before the sandbox, and for good. */
	if (!ctl.store_open) {
		if (store_open(conf->c_state_dir) == -1)
			fatalx("cannot open the database in %s",
			    conf->c_state_dir);
		ctl.store_open = 1;
	}
	/* Sessions that ended while we were down, or by shorter limits. */
	session_purge(&conf->c_auth);
	/* Made before the sandbox: it reads the CA store now. */
	if (ctl.http == NULL) {
		struct http_client_opts co;

		memset(&co, 0, sizeof(co));
		co.co_connect = child_connector;
		if ((ctl.http = http_client_new(child_base(), &co)) == NULL)
			fatalx("cannot set up the HTTP client for providers");
	}
	/* Intents are group-committed on our loop. */
	audit_init(child_base());
	/* What a crash left running is closed before anything new runs. */
	if (!reload && audit_close_open_intents() == -1)
		log_warnx("audit: calls left running by a crash could not be "
		    "closed");
	/* The parent checked the key: one that fails here signs nothing. */
	if (audit_set_signing_key(conf->c_audit.ac_signing_key.sr_value) ==
	    -1) {
		log_warnx("audit: signing-key-file is not an Ed25519 key; "
		    "checkpoints cannot be signed");
		(void)audit_set_signing_key(NULL);
	}
	/* pin-policy may have changed: what is withheld, before anyone lists. */
	TAILQ_FOREACH(wl, &ctl.workers, wl_entry)
		(void)worker_pins(wl);
	mcp_reconfigure();
	if (reload)
		audit_system("config_reloaded", "servers", NULL, NULL);
	/* After the reload's row: what it refuses refers to it. */
	chat_reconfigure();
	/* Conversations past their retention go now, then every day. */
	conv_retention_start(child_base());
	return 0;
}

static void
backup_done(const char *error, int64_t pages, int64_t bytes, void *arg)
{
	uint64_t		 id = (uint64_t)(uintptr_t)arg;
	struct json_object	*r;

	if (error != NULL) {
		admin_error(id, error);
		return;
	}
	r = json_object_new_object();
	json_object_object_add(r, "ok", json_object_new_boolean(1));
	json_object_object_add(r, "pages", json_object_new_int64(pages));
	json_object_object_add(r, "bytes", json_object_new_int64(bytes));
	admin_reply(id, r);
}

/*
 * `mcpbrokerctl backup FILE`: the database copied into the file it opened.
 * Recorded first, so the copy holds the row that says it was made; no
 * row, no copy.
 */
static int
controller_recv_backup(struct peer *p, struct msg *m, struct json_object *o)
{
	struct json_object	*d;
	char			 why[256];
	int64_t			 row;

	(void)p;
	(void)o;
	d = json_object_new_object();
	json_object_object_add(d, "op", json_object_new_string("backup"));
	row = audit_append(AUDIT_KIND_ADMIN, NULL, NULL, d);
	json_object_put(d);
	if (row == -1) {
		close(m->m_fd);
		admin_error(m->m_hdr.mh_id, "the audit trail cannot be written; "
		    "no backup");
	} else if (store_backup(child_base(), m->m_fd, backup_done,
	    (void *)(uintptr_t)m->m_hdr.mh_id, why, sizeof(why)) == -1)
		admin_error(m->m_hdr.mh_id, why);
	return 0;
}

/* What happened to the broker itself, on the trail beside who did what. */
static void
audit_system(const char *event, const char *key, const char *value,
    const char *status)
{
	struct json_object *d = json_object_new_object();

	json_object_object_add(d, "event", json_object_new_string(event));
	if (value != NULL)
		json_object_object_add(d, key, json_object_new_string(value));
	else
		json_object_object_add(d, key, json_object_new_int(
		    (int)config_server_count(ctl.conf)));
	if (status != NULL)
		json_object_object_add(d, "status", json_object_new_string(
		    status));
	if (audit_append(AUDIT_KIND_SYSTEM, NULL, NULL, d) == -1)
		log_warnx("audit: %s not recorded", event);
	json_object_put(d);
}

static void
controller_start(void)
{
	log_info("controller started with %u server(s)",
	    config_server_count(ctl.conf));
}

int
controller_main(void)
{
	static const struct child_hooks hooks = {
		controller_configure, controller_start
	};

	TAILQ_INIT(&ctl.workers);
	TAILQ_INIT(&ctl.calls);
	cmetrics_init();
	return child_main(PROC_CONTROLLER, "controller",
	    controller_dispatch_parent, &hooks);
}
