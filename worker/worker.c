/*
 * A worker: one per configured MCP server, the process that meets
 * third-party code.  It owns that server's MCP sessions and speaks the
 * framed protocol to the controller.  It runs with no capabilities under a
 * seccomp allow-list of its own and never executes anything: stdio server
 * instances are spawned by the parent, which hands over their pipes.
 *
 * Instances are keyed by isolation: one shared instance, or one per user
 * or per conversation.  The catalog instance (key "") always exists: it
 * lists the tools and, with shared isolation, serves every call.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/mcpbroker.h"
#include "common/log.h"
#include "common/util.h"
#include "common/http_client.h"
#include "worker/mcp.h"
#include "worker/mcp_http.h"
#include "worker/mcp_stdio.h"
#include "broker/child_connect.h"

#define EXIT_WAIT_MS		1000	/* for the parent's exit status */
#define REAP_INTERVAL_MS	5000
#define PING_INTERVAL_MS	30000	/* 2025-era liveness check */
#define INSTANCE_KEY_MAX	160

enum inst_state {
	IS_SPAWNING,		/* asked the parent, fds not all here */
	IS_CONNECTING,		/* MCP handshake */
	IS_READY,
	IS_DOWN,
};

struct wcall;
TAILQ_HEAD(wcall_list, wcall);

struct inst {
	TAILQ_ENTRY(inst)	 in_entry;
	uint64_t		 in_id;
	char			 in_key[INSTANCE_KEY_MAX];
	enum inst_state		 in_state;
	int			 in_fds[3];	/* stdin, stdout, stderr */
	pid_t			 in_pid;
	struct mcp_session	*in_session;
	struct event		*in_exit_timer;
	char			 in_eof[160];	/* why the stream ended */
	uint64_t		 in_last_used;
	struct wcall_list	 in_waiting;	/* calls until ready */
	unsigned int		 in_active;	/* calls in flight */
};
TAILQ_HEAD(inst_list, inst);

struct wcall {
	TAILQ_ENTRY(wcall)	 wc_entry;
	uint64_t		 wc_id;		/* the controller's */
	char			*wc_tool;	/* tools/call's name, or */
	char			*wc_method;	/* another request's method */
	struct json_object	*wc_args;	/* arguments, or params */
	uint64_t		 wc_timeout_ms;
	struct inst		*wc_inst;
	int64_t			 wc_rpc;	/* MCP request id, or -1 */
};

static struct {
	const char		*name;		/* our server */
	struct mcpbroker_conf	*conf;
	struct server_conf	*srv;
	struct peer		 controller;
	struct inst_list	 insts;
	struct wcall_list	 calls;		/* every call we hold */
	uint64_t		 next_inst;
	enum mcp_era		 era;		/* learned once, reused */
	unsigned int		 attempt;	/* catalog restart backoff */
	struct event		*respawn;
	struct event		*reaper;
	struct event		*pinger;
	int			 ready_sent;
	struct http_client	*http;		/* url servers */
	struct http_field	 headers[33];	/* Authorization, header lines */
	size_t			 nheaders;
	char			*authorization;
} wk;

static int	worker_recv_peer(struct peer *, struct msg *,
		    struct json_object *);
static int	worker_recv_instance_fd(struct peer *, struct msg *,
		    struct json_object *);
static int	worker_recv_instance_started(struct peer *, struct msg *,
		    struct json_object *);
static int	worker_recv_instance_exit(struct peer *, struct msg *,
		    struct json_object *);
static int	worker_recv_call(struct peer *, struct msg *,
		    struct json_object *);
static int	worker_recv_request(struct peer *, struct msg *,
		    struct json_object *);
static int	worker_recv_cancel(struct peer *, struct msg *,
		    struct json_object *);
static int	worker_recv_release(struct peer *, struct msg *,
		    struct json_object *);
static void	inst_spawn(const char *key);
static void	inst_down(struct inst *, const char *why);
static void	call_dispatch(struct wcall *);

static const struct dispatch worker_dispatch_parent[] = {
	{ MSG_CONF_TEXT, child_recv_conf_text, 0 },
	{ MSG_CONF_SECRET, child_recv_secret, 0 },
	{ MSG_CONF_PEER, worker_recv_peer, DISPATCH_FD | DISPATCH_ONCE },
	{ MSG_CONF_DONE, child_recv_done, 0 },
	{ MSG_START, child_recv_start, 0 },
	{ MSG_INSTANCE_FD, worker_recv_instance_fd, DISPATCH_FD },
	{ MSG_INSTANCE_STARTED, worker_recv_instance_started, 0 },
	{ MSG_INSTANCE_EXIT, worker_recv_instance_exit, 0 },
	{ MSG_CONNECTED, child_recv_connected, DISPATCH_FD },
	{ MSG_CONNECT_FAILED, child_recv_connect_failed, 0 },
	DISPATCH_END
};

static const struct dispatch worker_dispatch_controller[] = {
	{ MSG_TOOL_CALL, worker_recv_call, 0 },
	{ MSG_SERVER_REQ, worker_recv_request, 0 },
	{ MSG_TOOL_CANCEL, worker_recv_cancel, 0 },
	{ MSG_RELEASE, worker_recv_release, 0 },
	DISPATCH_END
};

/* ---- telling the controller ---- */

/*
 * Text of ours, at most max bytes.  It may hold a server's words, cut by
 * snprintf inside a character; the controller takes UTF-8 only, so a
 * partial character at the end goes.
 */
static struct json_object *
text_json(const char *s, size_t max)
{
	return json_object_new_string_len(s, (int)utf8_valid_len(s,
	    strnlen(s, max)));
}

static void
send_state(const char *state, const char *error)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "name", json_object_new_string(wk.name));
	json_object_object_add(o, "state", json_object_new_string(state));
	if (error != NULL)	/* the controller takes at most 200 bytes */
		json_object_object_add(o, "error", text_json(error, 200));
	(void)peer_send(&wk.controller, MSG_WORKER_STATE, 0, -1, o);
	json_object_put(o);
}

static void
send_tools(struct json_object *tools, struct json_object *caps)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "name", json_object_new_string(wk.name));
	json_object_object_add(o, "tools", json_object_get(tools));
	if (json_object_is_type(caps, json_type_object))
		json_object_object_add(o, "capabilities", json_object_get(caps));
	(void)peer_send(&wk.controller, MSG_WORKER_TOOLS, 0, -1, o);
	json_object_put(o);
}

static void
call_reply(struct wcall *wc, struct json_object *result,
    const struct mcp_error *err)
{
	struct json_object *o = json_object_new_object(), *e;

	if (err != NULL) {
		e = json_object_new_object();
		json_object_object_add(e, "code",
		    json_object_new_int(err->me_code));
		json_object_object_add(e, "message", text_json(err->me_message,
		    sizeof(err->me_message)));
		json_object_object_add(o, "error", e);
	} else
		json_object_object_add(o, "result", json_object_get(result));
	if (peer_send(&wk.controller, MSG_TOOL_RESULT, wc->wc_id, -1, o) ==
	    -1 && err == NULL) {
		/* Too large for a frame: say so instead of saying nothing. */
		json_object_put(o);
		o = json_object_new_object();
		e = json_object_new_object();
		json_object_object_add(e, "code",
		    json_object_new_int(MCP_ERR_PROTOCOL));
		json_object_object_add(e, "message", json_object_new_string(
		    "the tool's result is too large"));
		json_object_object_add(o, "error", e);
		(void)peer_send(&wk.controller, MSG_TOOL_RESULT, wc->wc_id, -1,
		    o);
	}
	json_object_put(o);
}

static void
call_free(struct wcall *wc)
{
	TAILQ_REMOVE(&wk.calls, wc, wc_entry);
	free(wc->wc_tool);
	free(wc->wc_method);
	json_object_put(wc->wc_args);
	free(wc);
}

static void
call_fail(struct wcall *wc, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
call_fail(struct wcall *wc, int code, const char *fmt, ...)
{
	struct mcp_error	err;
	va_list			ap;

	err.me_code = code;
	va_start(ap, fmt);
	vsnprintf(err.me_message, sizeof(err.me_message), fmt, ap);
	va_end(ap);
	call_reply(wc, NULL, &err);
	call_free(wc);
}

/* ---- instances ---- */

static struct inst *
inst_find_key(const char *key)
{
	struct inst *in;

	TAILQ_FOREACH(in, &wk.insts, in_entry)
		if (strcmp(in->in_key, key) == 0)
			return in;
	return NULL;
}

static struct inst *
inst_find_id(uint64_t id)
{
	struct inst *in;

	TAILQ_FOREACH(in, &wk.insts, in_entry)
		if (in->in_id == id)
			return in;
	return NULL;
}

static int
inst_is_catalog(const struct inst *in)
{
	return in->in_key[0] == '\0';
}

static unsigned int
inst_count(void)
{
	struct inst	*in;
	unsigned int	 n = 0;

	TAILQ_FOREACH(in, &wk.insts, in_entry)
		n++;
	return n;
}

static void
inst_free(struct inst *in)
{
	struct wcall	*wc, *next;
	int		 i;

	TAILQ_REMOVE(&wk.insts, in, in_entry);
	TAILQ_FOREACH_SAFE(wc, &in->in_waiting, wc_entry, next) {
		TAILQ_REMOVE(&in->in_waiting, wc, wc_entry);
		TAILQ_INSERT_TAIL(&wk.calls, wc, wc_entry);
		call_fail(wc, MCP_ERR_TRANSPORT, "server %s: %s", wk.name,
		    in->in_eof[0] ? in->in_eof : "instance stopped");
	}
	for (i = 0; i < 3; i++)
		if (in->in_fds[i] != -1)
			close(in->in_fds[i]);
	if (in->in_exit_timer != NULL)
		event_free(in->in_exit_timer);
	mcp_session_free(in->in_session);
	free(in);
}

static void
respawn_cb(int fd, short ev, void *arg)
{
	(void)fd;
	(void)ev;
	(void)arg;
	if (inst_find_key("") == NULL)
		inst_spawn("");
}

/* The catalog instance died: the server is down until it is back. */
static void
catalog_lost(const char *why)
{
	struct timeval	tv;
	uint64_t	delay;

	delay = backoff_delay_ms(wk.attempt++);
	delay += arc4random_uniform(delay / 4 + 1);	/* jitter */
	log_warnx("server %s: %s; retrying in %" PRIu64 " ms", wk.name, why,
	    delay);
	send_state("down", why);
	tv.tv_sec = delay / 1000;
	tv.tv_usec = (delay % 1000) * 1000;
	evtimer_add(wk.respawn, &tv);
}

static void
inst_down(struct inst *in, const char *why)
{
	char	 reason[200];
	int	 catalog = inst_is_catalog(in);
	int	 spawning = in->in_state == IS_SPAWNING;

	if (in->in_state == IS_DOWN)
		return;
	in->in_state = IS_DOWN;
	snprintf(reason, sizeof(reason), "%s", why);
	snprintf(in->in_eof, sizeof(in->in_eof), "%s", why);
	/* Calls in flight fail now, with the real reason. */
	if (in->in_session != NULL &&
	    mcp_session_state(in->in_session) != MCP_CLOSED)
		mcp_session_transport_down(in->in_session, reason);
	/* One still spawning may be running already: its pid is on the way. */
	if (in->in_pid > 0 || spawning) {
		(void)peer_send(child_parent(), MSG_INSTANCE_STOP, in->in_id,
		    -1, NULL);
	}
	inst_free(in);
	if (catalog)
		catalog_lost(reason);
}

static void
session_ready(struct mcp_session *s, void *arg);
static void
session_closed(struct mcp_session *s, const char *why, void *arg);
static void
session_tools_changed(struct mcp_session *s, void *arg);
static void
session_notify(struct mcp_session *s, const char *method,
    struct json_object *params, void *arg);

static const struct mcp_session_cbs session_cbs = {
	session_ready, session_closed, session_tools_changed
};

static void
tools_listed(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct json_object *tools;

	(void)arg;
	if (err != NULL) {
		log_warnx("server %s: tools/list: %s", wk.name, err->me_message);
		send_state("degraded", err->me_message);
		return;
	}
	if (!json_object_object_get_ex(res, "tools", &tools))
		return;
	log_info("server %s: %zu tool(s)", wk.name,
	    json_object_array_length(tools));
	send_tools(tools, mcp_session_capabilities(s));
	if (!wk.ready_sent) {
		struct json_object *o = json_object_new_object();

		json_object_object_add(o, "name",
		    json_object_new_string(wk.name));
		(void)peer_send(&wk.controller, MSG_WORKER_READY, 0, -1, o);
		json_object_put(o);
		wk.ready_sent = 1;
	} else
		send_state("ready", NULL);
}

static void
session_ready(struct mcp_session *s, void *arg)
{
	struct inst	*in = arg;
	struct wcall	*wc;

	in->in_state = IS_READY;
	wk.era = mcp_session_era(s);
	if (inst_is_catalog(in)) {
		wk.attempt = 0;
		mcp_list_tools(s, wk.srv->srv_call_timeout_ms, tools_listed,
		    NULL);
	}
	while ((wc = TAILQ_FIRST(&in->in_waiting)) != NULL) {
		TAILQ_REMOVE(&in->in_waiting, wc, wc_entry);
		TAILQ_INSERT_TAIL(&wk.calls, wc, wc_entry);
		call_dispatch(wc);
	}
}

/* Runs from inside the session: tear the instance down from the loop. */
static void
session_closed(struct mcp_session *s, const char *why, void *arg)
{
	struct inst *in = arg;

	(void)s;
	if (in->in_state == IS_DOWN)
		return;
	snprintf(in->in_eof, sizeof(in->in_eof), "%s", why);
	event_active(in->in_exit_timer, EV_TIMEOUT, 0);
}

static void
session_tools_changed(struct mcp_session *s, void *arg)
{
	struct inst *in = arg;

	if (inst_is_catalog(in))
		mcp_list_tools(s, wk.srv->srv_call_timeout_ms, tools_listed,
		    NULL);
}

/*
 * Resource and prompt changes are for the controller's MCP clients.  A
 * list is the catalog instance's; an update names the instance's key, so
 * that only its own user (or conversation) hears of it.
 */
static void
session_notify(struct mcp_session *s, const char *method,
    struct json_object *params, void *arg)
{
	struct inst		*in = arg;
	struct json_object	*o;
	int			 update;

	(void)s;
	update = strcmp(method, "notifications/resources/updated") == 0;
	if (!update && !inst_is_catalog(in))
		return;
	o = json_object_new_object();
	json_object_object_add(o, "method", json_object_new_string(method));
	if (params != NULL)
		json_object_object_add(o, "params", json_object_get(params));
	if (strncmp(in->in_key, "user:", 5) == 0)
		json_object_object_add(o, "owner", json_object_new_string(
		    in->in_key + 5));
	else if (strncmp(in->in_key, "conversation:", 13) == 0)
		json_object_object_add(o, "conversation",
		    json_object_new_string(in->in_key + 13));
	(void)peer_send(&wk.controller, MSG_SERVER_NOTIFY, 0, -1, o);
	json_object_put(o);
}

/* The exit status did not come (or the session closed): finish now. */
static void
inst_exit_timer_cb(int fd, short ev, void *arg)
{
	struct inst *in = arg;

	(void)fd;
	(void)ev;
	inst_down(in, in->in_eof[0] ? in->in_eof : "the server went away");
}

/* The stream ended; wait a moment for the exit status, which says more. */
static void
inst_eof(void *arg, const char *why)
{
	struct inst	*in = arg;
	struct timeval	 tv = { EXIT_WAIT_MS / 1000, 0 };

	if (in->in_eof[0] == '\0')
		snprintf(in->in_eof, sizeof(in->in_eof), "%s", why);
	evtimer_add(in->in_exit_timer, &tv);
}

/* An HTTP server's "instance" is an MCP session of its own. */
static void
inst_connect_http(struct inst *in)
{
	struct mcp_session_opts	 so;
	struct mcp_http_opts	 ho;
	struct mcp_http		*t;

	memset(&ho, 0, sizeof(ho));
	ho.ho_name = wk.name;
	ho.ho_url = wk.srv->srv_url;
	ho.ho_kind = wk.srv->srv_transport == TRANSPORT_SSE ? MCP_HTTP_SSE :
	    MCP_HTTP_STREAMABLE;
	ho.ho_headers = wk.headers;
	ho.ho_nheaders = wk.nheaders;
	ho.ho_connect_timeout_ms = wk.srv->srv_connect_timeout_ms;
	ho.ho_call_timeout_ms = wk.srv->srv_call_timeout_ms;
	t = mcp_http_new(child_base(), wk.http, &ho);
	memset(&so, 0, sizeof(so));
	so.so_name = wk.name;
	so.so_connect_timeout_ms = wk.srv->srv_connect_timeout_ms;
	so.so_era_hint = ho.ho_kind == MCP_HTTP_SSE ? MCP_ERA_LEGACY : wk.era;
	so.so_can_cancel_by_notification = ho.ho_kind == MCP_HTTP_SSE;
	so.so_param_headers = ho.ho_kind == MCP_HTTP_STREAMABLE;
	if ((in->in_session = mcp_session_new(child_base(), &so, &mcp_http_ops,
	    t, &session_cbs, in)) == NULL)
		fatalx("mcp_session_new");
	mcp_session_on_notify(in->in_session, session_notify);
	mcp_http_attach(t, in->in_session);
	in->in_state = IS_CONNECTING;
	mcp_session_start(in->in_session);
}

static void
inst_spawn(const char *key)
{
	struct inst *in;

	if ((in = calloc(1, sizeof(*in))) == NULL)
		fatal("calloc");
	in->in_id = ++wk.next_inst;
	snprintf(in->in_key, sizeof(in->in_key), "%s", key);
	in->in_state = IS_SPAWNING;
	in->in_fds[0] = in->in_fds[1] = in->in_fds[2] = -1;
	in->in_last_used = monotonic_ms();
	TAILQ_INIT(&in->in_waiting);
	if ((in->in_exit_timer = evtimer_new(child_base(), inst_exit_timer_cb,
	    in)) == NULL)
		fatalx("evtimer_new");
	TAILQ_INSERT_TAIL(&wk.insts, in, in_entry);
	if (key[0] == '\0')
		send_state("starting", NULL);
	if (wk.srv->srv_transport != TRANSPORT_STDIO)
		inst_connect_http(in);
	else if (peer_send(child_parent(), MSG_INSTANCE_SPAWN, in->in_id, -1,
	    NULL) == -1)
		inst_down(in, "cannot reach the parent");
}

/*
 * An instance we asked for and have since let go (a chat session that
 * ended while it was being spawned): what the parent still sends about it
 * is expected, not a violation.
 */
static int
inst_let_go(uint64_t id)
{
	return id > 0 && id <= wk.next_inst && inst_find_id(id) == NULL;
}

static int
worker_recv_instance_fd(struct peer *p, struct msg *m, struct json_object *o)
{
	static const char *const which[] = { "stdin", "stdout", "stderr" };
	struct inst	*in;
	const char	*w;
	int		 i;

	(void)p;
	if (inst_let_go(m->m_hdr.mh_id)) {
		close(m->m_fd);
		return 0;
	}
	if ((in = inst_find_id(m->m_hdr.mh_id)) == NULL ||
	    in->in_state != IS_SPAWNING ||
	    json_get_str(o, "which", 8, 0, &w) == -1)
		goto bad;
	for (i = 0; i < 3; i++)
		if (strcmp(w, which[i]) == 0 && in->in_fds[i] == -1) {
			in->in_fds[i] = m->m_fd;
			return 0;
		}
 bad:
	close(m->m_fd);
	return -1;
}

static int
worker_recv_instance_started(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct mcp_session_opts	 so;
	struct stdio_transport	*st;
	struct inst		*in;
	int64_t			 pid;

	(void)p;
	if (inst_let_go(m->m_hdr.mh_id))
		return 0;	/* inst_down asked the parent to stop it */
	if ((in = inst_find_id(m->m_hdr.mh_id)) == NULL ||
	    in->in_state != IS_SPAWNING || in->in_fds[0] == -1 ||
	    in->in_fds[1] == -1 || in->in_fds[2] == -1 ||
	    json_get_int(o, "pid", 1, INT32_MAX, 0, &pid) == -1)
		return -1;
	in->in_pid = (pid_t)pid;
	st = stdio_transport_new(child_base(), wk.name, in->in_fds[0],
	    in->in_fds[1], in->in_fds[2], inst_eof, in);
	in->in_fds[0] = in->in_fds[1] = in->in_fds[2] = -1;
	memset(&so, 0, sizeof(so));
	so.so_name = wk.name;
	so.so_connect_timeout_ms = wk.srv->srv_connect_timeout_ms;
	so.so_era_hint = wk.era;
	so.so_can_cancel_by_notification = 1;
	if ((in->in_session = mcp_session_new(child_base(), &so,
	    &stdio_transport_ops, st, &session_cbs, in)) == NULL)
		fatalx("mcp_session_new");
	mcp_session_on_notify(in->in_session, session_notify);
	stdio_transport_attach(st, in->in_session);
	in->in_state = IS_CONNECTING;
	mcp_session_start(in->in_session);
	return 0;
}

static int
worker_recv_instance_exit(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct inst	*in;
	const char	*status;
	char		 why[300];

	(void)p;
	if (json_get_str(o, "status", 255, 0, &status) == -1)
		return -1;
	if ((in = inst_find_id(m->m_hdr.mh_id)) == NULL)
		return 0;	/* we had already let it go */
	if (in->in_state == IS_SPAWNING)
		snprintf(why, sizeof(why), "server \"%s\" could not be "
		    "started: %s", wk.name, status);
	else
		snprintf(why, sizeof(why), "server \"%s\" %s", wk.name,
		    status);
	in->in_pid = 0;		/* nothing left to stop */
	inst_down(in, why);
	return 0;
}

/* Idle per-user and per-conversation instances go after idle-timeout. */
static void
reaper_cb(int fd, short ev, void *arg)
{
	struct timeval	 tv = { REAP_INTERVAL_MS / 1000, 0 };
	struct inst	*in, *next;
	uint64_t	 now = monotonic_ms();

	(void)fd;
	(void)ev;
	(void)arg;
	TAILQ_FOREACH_SAFE(in, &wk.insts, in_entry, next)
		if (!inst_is_catalog(in) && in->in_active == 0 &&
		    TAILQ_EMPTY(&in->in_waiting) &&
		    now - in->in_last_used >= wk.srv->srv_idle_timeout_ms) {
			log_debug("server %s: instance %s idle, stopping",
			    wk.name, in->in_key);
			inst_down(in, "idle");
		}
	evtimer_add(wk.reaper, &tv);
}

/*
 * A server that stops answering is as bad as one that exits: the catalog
 * instance is pinged (2025 era; 2026-07-28 has no ping) and restarted when
 * it does not answer within the connect timeout.
 */
static void
ping_done(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct inst	*in;
	char		 why[600];

	(void)s;
	(void)res;
	(void)arg;
	if (err == NULL || err->me_code != MCP_ERR_TIMEOUT ||
	    (in = inst_find_key("")) == NULL || in->in_session != s)
		return;
	snprintf(why, sizeof(why), "server \"%s\" did not answer ping: %s",
	    wk.name, err->me_message);
	inst_down(in, why);
}

static void
pinger_cb(int fd, short ev, void *arg)
{
	struct timeval	 tv = { PING_INTERVAL_MS / 1000, 0 };
	struct inst	*in;

	(void)fd;
	(void)ev;
	(void)arg;
	if ((in = inst_find_key("")) != NULL && in->in_state == IS_READY &&
	    mcp_session_era(in->in_session) == MCP_ERA_LEGACY)
		(void)mcp_request(in->in_session, "ping", NULL,
		    wk.srv->srv_connect_timeout_ms, ping_done, NULL, NULL);
	evtimer_add(wk.pinger, &tv);
}

/* ---- calls ---- */

static void
call_progress(struct mcp_session *s, struct json_object *params, void *arg)
{
	struct wcall		*wc = arg;
	struct json_object	*o = json_object_new_object(), *v;
	static const char *const keys[] = { "progress", "total", "message" };
	size_t			 i;

	(void)s;
	for (i = 0; i < 3; i++)
		if (json_object_object_get_ex(params, keys[i], &v) &&
		    (json_object_is_type(v, json_type_int) ||
		    json_object_is_type(v, json_type_double) ||
		    (i == 2 && json_object_is_type(v, json_type_string))))
			json_object_object_add(o, keys[i], json_object_get(v));
	(void)peer_send(&wk.controller, MSG_TOOL_PROGRESS, wc->wc_id, -1, o);
	json_object_put(o);
}

static void
call_done(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct wcall *wc = arg;

	(void)s;
	wc->wc_inst->in_active--;
	wc->wc_inst->in_last_used = monotonic_ms();
	call_reply(wc, res, err);
	call_free(wc);
}

static void
call_dispatch(struct wcall *wc)
{
	struct json_object	*args = wc->wc_args;
	int64_t			 rpc;

	wc->wc_args = NULL;
	wc->wc_inst->in_active++;
	if (wc->wc_method != NULL)
		rpc = mcp_request(wc->wc_inst->in_session, wc->wc_method, args,
		    wc->wc_timeout_ms, call_done, NULL, wc);
	else
		rpc = mcp_call_tool(wc->wc_inst->in_session, wc->wc_tool,
		    args, wc->wc_timeout_ms, call_done, call_progress, wc);
	/* -1: it could not be sent, and call_done has answered and freed wc */
	if (rpc != -1)
		wc->wc_rpc = rpc;
}

/* Which instance serves a call: isolation decides. */
static int
call_key(struct json_object *o, char *key, size_t len)
{
	const char *owner = NULL, *conv = NULL;

	if (json_get_str(o, "owner", OWNER_MAX - 1, 1, &owner) == -1 ||
	    json_get_str(o, "conversation", 64, 1, &conv) == -1)
		return -1;
	switch (wk.srv->srv_isolation) {
	case ISOLATION_PER_USER:
		if (owner == NULL || *owner == '\0')
			return -1;
		snprintf(key, len, "user:%s", owner);
		break;
	case ISOLATION_PER_CONVERSATION:
		if (conv == NULL || *conv == '\0')
			return -1;
		snprintf(key, len, "conversation:%s", conv);
		break;
	default:
		key[0] = '\0';
	}
	return 0;
}

/*
 * A call (tools/call, or method with params) is queued on the instance
 * isolation picks, started when it is ready; exactly one TOOL_RESULT
 * answers it.
 */
static void
call_start(uint64_t id, struct json_object *o, const char *tool,
    const char *method, struct json_object *args, int64_t timeout)
{
	struct wcall	*wc;
	struct inst	*in;
	char		 key[INSTANCE_KEY_MAX];

	if ((wc = calloc(1, sizeof(*wc))) == NULL)
		fatal("calloc");
	wc->wc_id = id;
	if ((tool != NULL && (wc->wc_tool = strdup(tool)) == NULL) ||
	    (method != NULL && (wc->wc_method = strdup(method)) == NULL))
		fatal("strdup");
	wc->wc_args = json_object_get(args);
	wc->wc_timeout_ms = (uint64_t)timeout;
	wc->wc_rpc = -1;
	TAILQ_INSERT_TAIL(&wk.calls, wc, wc_entry);
	if (call_key(o, key, sizeof(key)) == -1) {
		call_fail(wc, MCP_ERR_LOCAL, "server %s keeps an instance per "
		    "%s: the call must name one", wk.name,
		    wk.srv->srv_isolation == ISOLATION_PER_USER ? "user" :
		    "conversation");
		return;
	}
	if ((in = inst_find_key(key)) == NULL) {
		if (inst_count() > wk.srv->srv_max_instances) {
			call_fail(wc, MCP_ERR_LOCAL, "server %s: instance limit "
			    "(%u) reached", wk.name, wk.srv->srv_max_instances);
			return;
		}
		inst_spawn(key);
		if ((in = inst_find_key(key)) == NULL) {
			call_fail(wc, MCP_ERR_TRANSPORT, "server %s: could not "
			    "start an instance", wk.name);
			return;
		}
	}
	wc->wc_inst = in;
	in->in_last_used = monotonic_ms();
	if (in->in_state == IS_READY)
		call_dispatch(wc);
	else {
		TAILQ_REMOVE(&wk.calls, wc, wc_entry);
		TAILQ_INSERT_TAIL(&in->in_waiting, wc, wc_entry);
	}
}

static int
worker_recv_call(struct peer *p, struct msg *m, struct json_object *o)
{
	struct json_object	*args;
	const char		*tool;
	int64_t			 timeout = wk.srv->srv_call_timeout_ms;

	(void)p;
	if (json_get_str(o, "tool", 128, 0, &tool) == -1 ||
	    !json_object_object_get_ex(o, "arguments", &args) ||
	    !json_object_is_type(args, json_type_object) ||
	    json_get_int(o, "timeout_ms", 1, 24 * 3600 * 1000, 1, &timeout) ==
	    -1)
		return -1;
	call_start(m->m_hdr.mh_id, o, tool, NULL, args, timeout);
	return 0;
}

/*
 * What the controller may ask of a server for its MCP clients besides
 * tools: reading, never changing anything the server itself would not
 * let a client change.
 */
static int
request_allowed(const char *method)
{
	static const char *const methods[] = {
		"resources/list", "resources/templates/list", "resources/read",
		"resources/subscribe", "resources/unsubscribe", "prompts/list",
		"prompts/get", "completion/complete", NULL
	};
	size_t i;

	for (i = 0; methods[i] != NULL; i++)
		if (strcmp(method, methods[i]) == 0)
			return 1;
	return 0;
}

static int
worker_recv_request(struct peer *p, struct msg *m, struct json_object *o)
{
	struct json_object	*params;
	const char		*method;
	int64_t			 timeout = wk.srv->srv_call_timeout_ms;

	(void)p;
	if (json_get_str(o, "method", 64, 0, &method) == -1 ||
	    !request_allowed(method) ||
	    !json_object_object_get_ex(o, "params", &params) ||
	    !json_object_is_type(params, json_type_object) ||
	    json_get_int(o, "timeout_ms", 1, 24 * 3600 * 1000, 1, &timeout) ==
	    -1)
		return -1;
	call_start(m->m_hdr.mh_id, o, NULL, method, params, timeout);
	return 0;
}

static int
worker_recv_cancel(struct peer *p, struct msg *m, struct json_object *o)
{
	struct wcall	*wc;
	struct inst	*in;

	(void)p;
	(void)o;
	TAILQ_FOREACH(wc, &wk.calls, wc_entry)
		if (wc->wc_id == m->m_hdr.mh_id)
			break;
	/* Every call gets exactly one TOOL_RESULT, a cancelled one too. */
	if (wc != NULL && wc->wc_rpc != -1) {
		mcp_cancel(wc->wc_inst->in_session, wc->wc_rpc, "cancelled");
		wc->wc_inst->in_active--;
		call_fail(wc, MCP_ERR_LOCAL, "cancelled");
		return 0;
	}
	TAILQ_FOREACH(in, &wk.insts, in_entry)
		TAILQ_FOREACH(wc, &in->in_waiting, wc_entry)
			if (wc->wc_id == m->m_hdr.mh_id) {
				TAILQ_REMOVE(&in->in_waiting, wc, wc_entry);
				TAILQ_INSERT_TAIL(&wk.calls, wc, wc_entry);
				call_fail(wc, MCP_ERR_LOCAL, "cancelled");
				return 0;
			}
	return 0;	/* finished already: its result is on the way */
}

/* A chat session ended: its user's or conversation's instance goes. */
static int
worker_recv_release(struct peer *p, struct msg *m, struct json_object *o)
{
	struct inst	*in;
	char		 key[INSTANCE_KEY_MAX];

	(void)p;
	(void)m;
	if (wk.srv->srv_isolation == ISOLATION_SHARED)
		return 0;
	if (call_key(o, key, sizeof(key)) == -1)
		return 0;	/* nothing of ours to release */
	if ((in = inst_find_key(key)) != NULL && in->in_state != IS_DOWN) {
		log_debug("server %s: releasing instance %s", wk.name, key);
		inst_down(in, "its chat session ended");
	}
	return 0;
}

/* ---- set-up ---- */

static int
worker_recv_peer(struct peer *p, struct msg *m, struct json_object *o)
{
	(void)p;
	return child_attach_sibling(&wk.controller, m, o, "controller",
	    PROC_CONTROLLER, worker_dispatch_controller);
}

/*
 * The HTTP client, made before the sandbox: it reads the CA store now.
 * Connections are opened by the parent (child_connector): the worker has
 * no socket() and no DNS.
 */
static void
http_setup(struct server_conf *srv)
{
	struct http_client_opts	 co;
	struct header_conf	*hd;

	memset(&co, 0, sizeof(co));
	co.co_ca_file = srv->srv_ca_file;
	co.co_connect = child_connector;
	if ((wk.http = http_client_new(child_base(), &co)) == NULL)
		fatalx("server %s: cannot set up HTTPS (ca-file?)", wk.name);
	if (srv->srv_bearer.sr_value != NULL) {
		if (asprintf(&wk.authorization, "Bearer %s",
		    srv->srv_bearer.sr_value) == -1)
			fatal("asprintf");
		wk.headers[wk.nheaders].hf_name = "Authorization";
		wk.headers[wk.nheaders++].hf_value = wk.authorization;
	}
	TAILQ_FOREACH(hd, &srv->srv_headers, hd_entry) {
		if (wk.nheaders == sizeof(wk.headers) / sizeof(wk.headers[0]))
			break;
		wk.headers[wk.nheaders].hf_name = hd->hd_name;
		wk.headers[wk.nheaders++].hf_value = hd->hd_value;
	}
}

static int
worker_configure(struct mcpbroker_conf *conf, int reload)
{
	struct server_conf *srv;

	/* A changed server restarts its worker: configured once. */
	if (reload || wk.conf != NULL)
		return -1;
	if ((srv = config_find_server(conf, wk.name)) == NULL) {
		log_warnx("configuration has no server \"%s\"", wk.name);
		return -1;
	}
	wk.conf = conf;
	wk.srv = srv;
	if (srv->srv_transport != TRANSPORT_STDIO)
		http_setup(srv);
	return 0;
}

static void
worker_start(void)
{
	struct timeval tv = { REAP_INTERVAL_MS / 1000, 0 };

	struct timeval ping = { PING_INTERVAL_MS / 1000, 0 };

	if ((wk.respawn = evtimer_new(child_base(), respawn_cb, NULL)) ==
	    NULL || (wk.reaper = evtimer_new(child_base(), reaper_cb, NULL)) ==
	    NULL || (wk.pinger = evtimer_new(child_base(), pinger_cb, NULL)) ==
	    NULL)
		fatalx("evtimer_new");
	evtimer_add(wk.reaper, &tv);
	evtimer_add(wk.pinger, &ping);
	log_info("serving %s (%s, isolation %s)", wk.name,
	    transport_str(wk.srv->srv_transport),
	    isolation_str(wk.srv->srv_isolation));
	inst_spawn("");
}

int
worker_main(const char *server)
{
	static const struct child_hooks hooks = {
		worker_configure, worker_start
	};
	static char procname[NAME_MAX_LEN + 8];

	snprintf(procname, sizeof(procname), "worker %s", server);
	wk.name = server;
	TAILQ_INIT(&wk.insts);
	TAILQ_INIT(&wk.calls);
	return child_main(PROC_WORKER, procname, worker_dispatch_parent,
	    &hooks);
}
