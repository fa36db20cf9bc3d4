/*
 * MCP client session: JSON-RPC 2.0 bookkeeping (ids, timeouts,
 * cancellation, progress), era detection and the handshake, tools/list
 * pagination and caching, and the server's own requests and notifications.
 * Everything the server sends is validated; nothing it sends can grow
 * memory without bound or make a call wait past its timeout.
 */
#include <sys/queue.h>

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "common/log.h"
#include "common/util.h"
#include "worker/mcp.h"
#include "worker/mcp_params.h"

#define PROBE_TIMEOUT_MS	5000	/* server/discover before falling back */
#define LISTEN_TIMEOUT_MS	(365ull * 24 * 3600 * 1000)
#define LISTEN_RETRY_MAX_MS	30000
#define MAX_BATCH		100

/* Versions of the initialize era we accept, newest first. */
static const char *const legacy_versions[] = {
	"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", NULL
};

struct pending {
	TAILQ_ENTRY(pending)	 pd_entry;
	int64_t			 pd_id;
	char			 pd_method[48];
	struct mcp_session	*pd_session;
	struct event		*pd_timer;
	uint64_t		 pd_timeout_ms;
	mcp_result_fn		 pd_done;
	int			(*pd_filter)(struct json_object *,
				    struct mcp_error *);
	mcp_progress_fn		 pd_progress;
	void			*pd_arg;
	/* While it waits for a place in flight: what goes out then. */
	struct json_object	*pd_msg;
	char			*pd_name;
	int			 pd_stream;
};
TAILQ_HEAD(pending_list, pending);

/* A tools/list walk over pages, on behalf of one or more waiters. */
struct tools_walk {
	struct json_object	*tw_tools;	/* collected so far */
	unsigned int		 tw_pages;
	uint64_t		 tw_timeout_ms;
	mcp_result_fn		 tw_done;
	void			*tw_arg;
};

struct mcp_session {
	struct event_base		*s_base;
	struct mcp_session_opts		 s_opts;
	char				 s_name[64];
	const struct mcp_transport_ops	*s_ops;
	void				*s_transport;
	const struct mcp_session_cbs	*s_cbs;
	mcp_notify_fn			 s_notify;
	void				*s_arg;
	enum mcp_state			 s_state;
	enum mcp_era			 s_era;
	char				 s_version[16];
	struct json_object		*s_server_info;
	struct json_object		*s_capabilities;
	int64_t				 s_next_id;
	struct pending_list		 s_pending;	/* sent */
	unsigned int			 s_npending;
	struct pending_list		 s_waiting;	/* not yet, in order */
	unsigned int			 s_nwaiting;
	struct event			*s_dispatch;	/* sends the waiting */
	struct event			*s_connect_timer;
	struct json_object		*s_tools;	/* cache, or NULL */
	uint64_t			 s_tools_expiry;	/* 0: until changed */
	unsigned int			 s_bad_messages;
	int64_t				 s_listen_id;	/* subscriptions/listen */
	struct event			*s_listen_timer;
	uint64_t			 s_listen_delay;
	int				 s_busy;
	int				 s_freed;
};

static void	session_close(struct mcp_session *, const char *);
static void	session_initialize(struct mcp_session *);
static void	waiting_send(int, short, void *);

const char *
mcp_era_str(enum mcp_era era)
{
	switch (era) {
	case MCP_ERA_MODERN:
		return "modern";
	case MCP_ERA_LEGACY:
		return "legacy";
	default:
		return "unknown";
	}
}

static void
set_error(struct mcp_error *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
set_error(struct mcp_error *e, int code, const char *fmt, ...)
{
	va_list ap;

	e->me_code = code;
	va_start(ap, fmt);
	vsnprintf(e->me_message, sizeof(e->me_message), fmt, ap);
	va_end(ap);
}

/* ---- lifetime ---- */

struct mcp_session *
mcp_session_new(struct event_base *base, const struct mcp_session_opts *opts,
    const struct mcp_transport_ops *ops, void *transport,
    const struct mcp_session_cbs *cbs, void *arg)
{
	struct mcp_session *s;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return NULL;
	s->s_base = base;
	s->s_opts = *opts;
	snprintf(s->s_name, sizeof(s->s_name), "%s", opts->so_name);
	s->s_opts.so_name = s->s_name;
	if (s->s_opts.so_connect_timeout_ms == 0)
		s->s_opts.so_connect_timeout_ms = 10000;
	s->s_ops = ops;
	s->s_transport = transport;
	s->s_cbs = cbs;
	s->s_arg = arg;
	s->s_state = MCP_CONNECTING;
	s->s_next_id = 1;
	s->s_listen_id = -1;
	TAILQ_INIT(&s->s_pending);
	TAILQ_INIT(&s->s_waiting);
	if ((s->s_dispatch = event_new(base, -1, 0, waiting_send, s)) ==
	    NULL) {
		free(s);
		return NULL;
	}
	return s;
}

/* A place in flight came free: the first waiting request takes it. */
static void
pending_free(struct mcp_session *s, struct pending *pd)
{
	if (pd->pd_msg != NULL) {
		TAILQ_REMOVE(&s->s_waiting, pd, pd_entry);
		s->s_nwaiting--;
		json_object_put(pd->pd_msg);
	} else {
		TAILQ_REMOVE(&s->s_pending, pd, pd_entry);
		s->s_npending--;
		if (s->s_nwaiting > 0)
			event_active(s->s_dispatch, EV_TIMEOUT, 0);
	}
	free(pd->pd_name);
	event_free(pd->pd_timer);
	free(pd);
}

/*
 * Run a request's callback once; the request is gone afterwards.  A filter
 * may turn a result that is well-formed JSON-RPC but not what the method
 * promises into an error.
 */
static void
pending_finish(struct mcp_session *s, struct pending *pd,
    struct json_object *result, const struct mcp_error *err)
{
	mcp_result_fn	 fn = pd->pd_done;
	void		*arg = pd->pd_arg;
	struct mcp_error fe;

	if (err == NULL && pd->pd_filter != NULL &&
	    pd->pd_filter(result, &fe) == -1) {
		result = NULL;
		err = &fe;
	}
	pending_free(s, pd);
	s->s_busy++;
	fn(s, result, err, arg);
	s->s_busy--;
}

static void
session_release(struct mcp_session *s)
{
	if (s->s_ops != NULL && s->s_ops->to_free != NULL)
		s->s_ops->to_free(s->s_transport);
	if (s->s_connect_timer != NULL)
		event_free(s->s_connect_timer);
	if (s->s_listen_timer != NULL)
		event_free(s->s_listen_timer);
	event_free(s->s_dispatch);
	json_object_put(s->s_server_info);
	json_object_put(s->s_capabilities);
	json_object_put(s->s_tools);
	free(s);
}

/* Fail everything in flight; used when the session ends. */
static void
fail_all(struct mcp_session *s, int code, const char *why)
{
	struct mcp_error	 err;
	struct pending		*pd;

	set_error(&err, code, "%s", why);
	while ((pd = TAILQ_FIRST(&s->s_waiting)) != NULL)
		pending_finish(s, pd, NULL, &err);
	while ((pd = TAILQ_FIRST(&s->s_pending)) != NULL)
		pending_finish(s, pd, NULL, &err);
}

/*
 * Every request still in flight gets its callback (with "session closed")
 * before the session goes, so that no caller waits forever and nothing a
 * callback owns leaks.
 */
void
mcp_session_free(struct mcp_session *s)
{
	if (s == NULL)
		return;
	s->s_state = MCP_CLOSED;
	if (s->s_busy) {
		s->s_freed = 1;
		return;
	}
	s->s_busy++;
	fail_all(s, MCP_ERR_TRANSPORT, "session closed");
	s->s_busy--;
	session_release(s);
}

/* After a callback: free a session that was freed from inside it. */
static int
session_gone(struct mcp_session *s)
{
	if (s->s_freed && s->s_busy == 0) {
		s->s_freed = 0;
		mcp_session_free(s);
		return 1;
	}
	return s->s_freed;
}

enum mcp_state
mcp_session_state(const struct mcp_session *s)
{
	return s->s_state;
}

enum mcp_era
mcp_session_era(const struct mcp_session *s)
{
	return s->s_era;
}

const char *
mcp_session_version(const struct mcp_session *s)
{
	return s->s_version;
}

struct json_object *
mcp_session_server_info(const struct mcp_session *s)
{
	return s->s_server_info;
}

struct json_object *
mcp_session_capabilities(const struct mcp_session *s)
{
	return s->s_capabilities;
}

struct json_object *
mcp_session_tool_schema(const struct mcp_session *s, const char *tool)
{
	struct json_object	*t, *name, *schema;
	size_t			 i;

	if (s->s_tools == NULL)
		return NULL;
	for (i = 0; i < json_object_array_length(s->s_tools); i++) {
		t = json_object_array_get_idx(s->s_tools, i);
		if (json_object_object_get_ex(t, "name", &name) &&
		    strcmp(json_object_get_string(name), tool) == 0 &&
		    json_object_object_get_ex(t, "inputSchema", &schema))
			return schema;
	}
	return NULL;
}

static void
session_close(struct mcp_session *s, const char *why)
{
	if (s->s_state == MCP_CLOSED)
		return;
	s->s_state = MCP_CLOSED;
	if (s->s_connect_timer != NULL)
		event_del(s->s_connect_timer);
	s->s_busy++;
	fail_all(s, MCP_ERR_TRANSPORT, why);
	if (!s->s_freed)
		s->s_cbs->on_closed(s, why, s->s_arg);
	s->s_busy--;
	(void)session_gone(s);
}

/* ---- sending ---- */

/* Modern requests carry the protocol version and our identity. */
static void
add_meta(struct mcp_session *s, struct json_object *params)
{
	struct json_object *meta, *info;

	if (!json_object_object_get_ex(params, "_meta", &meta)) {
		meta = json_object_new_object();
		json_object_object_add(params, "_meta", meta);
	}
	if (s->s_era != MCP_ERA_MODERN)
		return;
	info = json_object_new_object();
	json_object_object_add(info, "name", json_object_new_string(
	    "mcpbroker"));
	json_object_object_add(info, "version", json_object_new_string(
	    MCPBROKER_VERSION));
	json_object_object_add(meta, "io.modelcontextprotocol/protocolVersion",
	    json_object_new_string(MCP_MODERN_VERSION));
	json_object_object_add(meta, "io.modelcontextprotocol/clientInfo",
	    info);
	json_object_object_add(meta,
	    "io.modelcontextprotocol/clientCapabilities",
	    json_object_new_object());
}

static int
send_message(struct mcp_session *s, struct json_object *msg, int64_t id,
    const char *method, const char *name, int stream, struct mcp_error *err)
{
	struct mcp_out	 out;
	char		 why[256];
	size_t		 len;

	out.mo_json = json_object_to_json_string_length(msg,
	    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	out.mo_len = len;
	out.mo_id = id;
	out.mo_method = method;
	out.mo_name = name;
	out.mo_stream = stream;
	if (!json_object_object_get_ex(msg, "params", &out.mo_params))
		out.mo_params = NULL;
	if (len > MCP_MAX_MESSAGE) {
		set_error(err, MCP_ERR_LOCAL, "request larger than %u bytes",
		    MCP_MAX_MESSAGE);
		return -1;
	}
	if (s->s_ops->to_send(s->s_transport, &out, why, sizeof(why)) == -1) {
		set_error(err, MCP_ERR_TRANSPORT, "%s", why);
		return -1;
	}
	return 0;
}

static void
send_notification(struct mcp_session *s, const char *method,
    struct json_object *params)
{
	struct json_object	*msg = json_object_new_object();
	struct mcp_error	 err;

	json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(msg, "method", json_object_new_string(method));
	if (params != NULL)
		json_object_object_add(msg, "params", params);
	if (send_message(s, msg, -1, method, NULL, 0, &err) == -1)
		log_debug("server %s: %s not sent: %s", s->s_name, method,
		    err.me_message);
	json_object_put(msg);
}

/* No answer in time: the server is told to stop, the caller is told why. */
static void
request_timeout(int fd, short ev, void *arg)
{
	struct pending		*pd = arg;
	struct mcp_session	*s = pd->pd_session;
	mcp_result_fn		 fn = pd->pd_done;
	void			*cbarg = pd->pd_arg;
	struct mcp_error	 err;

	(void)fd;
	(void)ev;
	set_error(&err, MCP_ERR_TIMEOUT, "%s timed out after %" PRIu64 " ms",
	    pd->pd_method, pd->pd_timeout_ms);
	s->s_busy++;
	mcp_cancel(s, pd->pd_id, "timed out");
	fn(s, NULL, &err, cbarg);
	s->s_busy--;
	(void)session_gone(s);
}

static struct pending *
pending_find(struct mcp_session *s, int64_t id)
{
	struct pending *pd;

	TAILQ_FOREACH(pd, &s->s_pending, pd_entry)
		if (pd->pd_id == id)
			return pd;
	return NULL;
}

/* Requests go out in any state: the handshake itself uses this path. */
static int64_t
request_send(struct mcp_session *s, const char *method,
    struct json_object *params, const char *name, uint64_t timeout_ms,
    mcp_result_fn done, int (*filter)(struct json_object *,
    struct mcp_error *), mcp_progress_fn progress, void *arg)
{
	struct json_object	*msg, *meta;
	struct pending		*pd;
	struct mcp_error	 err;
	struct timeval		 tv;
	int64_t			 id;

	if (params == NULL)
		params = json_object_new_object();
	if (s->s_nwaiting >= MCP_MAX_WAITING) {
		json_object_put(params);
		set_error(&err, MCP_ERR_LOCAL, "server %s: too many requests "
		    "(%d in flight, %d waiting)", s->s_name, MCP_MAX_PENDING,
		    MCP_MAX_WAITING);
		done(s, NULL, &err, arg);
		return -1;
	}
	id = s->s_next_id++;
	add_meta(s, params);
	if (progress != NULL && json_object_object_get_ex(params, "_meta",
	    &meta))
		json_object_object_add(meta, "progressToken",
		    json_object_new_int64(id));
	msg = json_object_new_object();
	json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(msg, "id", json_object_new_int64(id));
	json_object_object_add(msg, "method", json_object_new_string(method));
	json_object_object_add(msg, "params", params);

	if ((pd = calloc(1, sizeof(*pd))) == NULL)
		fatal("calloc");
	pd->pd_id = id;
	snprintf(pd->pd_method, sizeof(pd->pd_method), "%s", method);
	pd->pd_session = s;
	pd->pd_timeout_ms = timeout_ms;
	pd->pd_done = done;
	pd->pd_filter = filter;
	pd->pd_progress = progress;
	pd->pd_arg = arg;
	if ((pd->pd_timer = evtimer_new(s->s_base, request_timeout, pd)) ==
	    NULL)
		fatalx("evtimer_new");
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	evtimer_add(pd->pd_timer, &tv);	/* the wait counts too */
	/*
	 * A server gets at most MCP_MAX_PENDING at once; the rest wait, in
	 * order, for answers to make room, rather than fail because the
	 * server was slow for a moment.
	 */
	if (s->s_npending >= MCP_MAX_PENDING || s->s_nwaiting > 0) {
		pd->pd_msg = msg;
		if (name != NULL && (pd->pd_name = strdup(name)) == NULL)
			fatal("strdup");
		pd->pd_stream = strcmp(method, "subscriptions/listen") == 0;
		TAILQ_INSERT_TAIL(&s->s_waiting, pd, pd_entry);
		s->s_nwaiting++;
		return id;
	}
	TAILQ_INSERT_TAIL(&s->s_pending, pd, pd_entry);
	s->s_npending++;
	if (send_message(s, msg, id, method, name,
	    strcmp(method, "subscriptions/listen") == 0, &err) == -1) {
		json_object_put(msg);
		pending_finish(s, pd, NULL, &err);
		return -1;
	}
	json_object_put(msg);
	return id;
}

/* Waiting requests go out as places in flight come free, oldest first. */
static void
waiting_send(int fd, short ev, void *arg)
{
	struct mcp_session	*s = arg;
	struct pending		*pd;
	struct json_object	*msg;
	struct mcp_error	 err;
	int			 failed;

	(void)fd;
	(void)ev;
	s->s_busy++;
	while (!s->s_freed && s->s_npending < MCP_MAX_PENDING &&
	    (pd = TAILQ_FIRST(&s->s_waiting)) != NULL) {
		TAILQ_REMOVE(&s->s_waiting, pd, pd_entry);
		s->s_nwaiting--;
		TAILQ_INSERT_TAIL(&s->s_pending, pd, pd_entry);
		s->s_npending++;
		msg = pd->pd_msg;
		pd->pd_msg = NULL;
		failed = send_message(s, msg, pd->pd_id, pd->pd_method,
		    pd->pd_name, pd->pd_stream, &err) == -1;
		json_object_put(msg);
		if (failed)
			pending_finish(s, pd, NULL, &err);
	}
	s->s_busy--;
	(void)session_gone(s);
}

int64_t
mcp_request(struct mcp_session *s, const char *method,
    struct json_object *params, uint64_t timeout_ms, mcp_result_fn done,
    mcp_progress_fn progress, void *arg)
{
	struct mcp_error err;

	if (s->s_state != MCP_READY) {
		json_object_put(params);
		set_error(&err, MCP_ERR_TRANSPORT, "server %s is not ready",
		    s->s_name);
		done(s, NULL, &err, arg);
		return -1;
	}
	return request_send(s, method, params, NULL, timeout_ms, done, NULL,
	    progress, arg);
}

void
mcp_cancel(struct mcp_session *s, int64_t id, const char *why)
{
	struct json_object	*params;
	struct pending		*pd;

	if ((pd = pending_find(s, id)) == NULL) {
		/* Never sent: the server has nothing to stop. */
		TAILQ_FOREACH(pd, &s->s_waiting, pd_entry)
			if (pd->pd_id == id) {
				pending_free(s, pd);
				break;
			}
		return;
	}
	pending_free(s, pd);
	if (s->s_ops->to_cancel != NULL)
		s->s_ops->to_cancel(s->s_transport, id);
	/* Streamable HTTP (2026) cancels by closing the stream alone. */
	if (!s->s_opts.so_can_cancel_by_notification &&
	    s->s_era == MCP_ERA_MODERN)
		return;
	params = json_object_new_object();
	json_object_object_add(params, "requestId", json_object_new_int64(id));
	json_object_object_add(params, "reason", json_object_new_string(why));
	send_notification(s, "notifications/cancelled", params);
}

/* ---- handshake ---- */

static void	listen_start(struct mcp_session *);

static void
listen_timer_cb(int fd, short ev, void *arg)
{
	(void)fd;
	(void)ev;
	listen_start(arg);
}

/*
 * From 2026-07-28 on, list changes come only on a subscriptions/listen
 * stream.  It may end (the server's graceful close, an idle proxy); we open
 * it again, backing off, unless the server says it has no such method.
 */
static void
listen_done(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct timeval tv;

	(void)res;
	(void)arg;
	s->s_listen_id = -1;
	if (s->s_state != MCP_READY || (err != NULL &&
	    (err->me_code == MCP_METHOD_NOT_FOUND ||
	    err->me_code == MCP_ERR_LOCAL)))
		return;
	s->s_listen_delay = s->s_listen_delay == 0 ? 1000 :
	    s->s_listen_delay * 2 > LISTEN_RETRY_MAX_MS ? LISTEN_RETRY_MAX_MS :
	    s->s_listen_delay * 2;
	tv.tv_sec = s->s_listen_delay / 1000;
	tv.tv_usec = (s->s_listen_delay % 1000) * 1000;
	if (s->s_listen_timer == NULL && (s->s_listen_timer = evtimer_new(
	    s->s_base, listen_timer_cb, s)) == NULL)
		fatalx("evtimer_new");
	evtimer_add(s->s_listen_timer, &tv);
}

static void
listen_start(struct mcp_session *s)
{
	struct json_object *params, *filter;

	if (s->s_state != MCP_READY || s->s_listen_id != -1)
		return;
	params = json_object_new_object();
	filter = json_object_new_object();
	json_object_object_add(filter, "toolsListChanged",
	    json_object_new_boolean(1));
	/* Our own MCP clients may want these; a server drops what it lacks. */
	json_object_object_add(filter, "promptsListChanged",
	    json_object_new_boolean(1));
	json_object_object_add(filter, "resourcesListChanged",
	    json_object_new_boolean(1));
	json_object_object_add(params, "notifications", filter);
	s->s_listen_id = request_send(s, "subscriptions/listen", params, NULL,
	    LISTEN_TIMEOUT_MS, listen_done, NULL, NULL, NULL);
}

static void
session_ready(struct mcp_session *s)
{
	if (s->s_connect_timer != NULL)
		event_del(s->s_connect_timer);
	s->s_state = MCP_READY;
	if (s->s_ops->to_era != NULL)
		s->s_ops->to_era(s->s_transport, s->s_era, s->s_version);
	log_debug("server %s: ready (%s, %s)", s->s_name,
	    mcp_era_str(s->s_era), s->s_version);
	if (s->s_era == MCP_ERA_MODERN)
		listen_start(s);
	s->s_busy++;
	s->s_cbs->on_ready(s, s->s_arg);
	s->s_busy--;
	(void)session_gone(s);
}

static void
keep_identity(struct mcp_session *s, struct json_object *info,
    struct json_object *caps)
{
	json_object_put(s->s_server_info);
	json_object_put(s->s_capabilities);
	s->s_server_info = info != NULL ? json_object_get(info) : NULL;
	s->s_capabilities = caps != NULL ? json_object_get(caps) : NULL;
}

static int
legacy_supported(const char *v)
{
	int i;

	for (i = 0; legacy_versions[i] != NULL; i++)
		if (strcmp(v, legacy_versions[i]) == 0)
			return 1;
	return 0;
}

static void
initialize_done(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct json_object	*caps = NULL, *info = NULL;
	const char		*version;
	char			 why[600];

	(void)arg;
	if (err != NULL) {
		snprintf(why, sizeof(why), "initialize failed: %s",
		    err->me_message);
		session_close(s, why);
		return;
	}
	if (json_get_str(res, "protocolVersion", 15, 0, &version) == -1 ||
	    !legacy_supported(version)) {
		snprintf(why, sizeof(why), "initialize: the server answered "
		    "with protocol version %s; this client speaks %s and "
		    "2025-11-25 down to 2024-11-05", version != NULL ?
		    version : "(none)", MCP_MODERN_VERSION);
		session_close(s, why);
		return;
	}
	(void)json_object_object_get_ex(res, "capabilities", &caps);
	(void)json_object_object_get_ex(res, "serverInfo", &info);
	keep_identity(s, info, caps);
	snprintf(s->s_version, sizeof(s->s_version), "%s", version);
	/* The transport needs the version (and session) before we notify. */
	if (s->s_ops->to_era != NULL)
		s->s_ops->to_era(s->s_transport, s->s_era, s->s_version);
	send_notification(s, "notifications/initialized", NULL);
	session_ready(s);
}

static void
session_initialize(struct mcp_session *s)
{
	struct json_object *params, *info;

	s->s_era = MCP_ERA_LEGACY;
	s->s_version[0] = '\0';	/* not negotiated yet */
	if (s->s_ops->to_era != NULL)
		s->s_ops->to_era(s->s_transport, s->s_era, s->s_version);
	params = json_object_new_object();
	info = json_object_new_object();
	json_object_object_add(info, "name", json_object_new_string(
	    "mcpbroker"));
	json_object_object_add(info, "version", json_object_new_string(
	    MCPBROKER_VERSION));
	json_object_object_add(params, "protocolVersion",
	    json_object_new_string(legacy_versions[0]));
	json_object_object_add(params, "capabilities",
	    json_object_new_object());
	json_object_object_add(params, "clientInfo", info);
	(void)request_send(s, "initialize", params, NULL,
	    s->s_opts.so_connect_timeout_ms, initialize_done, NULL, NULL, NULL);
}

/* A recognised modern error: the server is modern, whatever it supports. */
static int
modern_error(const struct mcp_error *err)
{
	return err->me_code == MCP_UNSUPPORTED_VERSION ||
	    err->me_code == MCP_HEADER_MISMATCH ||
	    err->me_code == MCP_MISSING_CAPABILITY;
}

static int
version_listed(struct json_object *res, const char *key, const char *want)
{
	struct json_object	*list, *v;
	size_t			 i;

	if (!json_object_object_get_ex(res, key, &list) ||
	    !json_object_is_type(list, json_type_array))
		return 0;
	for (i = 0; i < json_object_array_length(list) && i < 64; i++) {
		v = json_object_array_get_idx(list, i);
		if (json_object_is_type(v, json_type_string) &&
		    strcmp(json_object_get_string(v), want) == 0)
			return 1;
	}
	return 0;
}

static void
discover_done(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct json_object	*caps = NULL, *meta, *info = NULL;
	char			 why[700];

	(void)arg;
	if (err != NULL && err->me_code == MCP_ERR_TRANSPORT) {
		session_close(s, err->me_message);
		return;
	}
	if (err != NULL && modern_error(err)) {
		snprintf(why, sizeof(why), "the server speaks a newer MCP "
		    "revision than %s and refused it: %s", MCP_MODERN_VERSION,
		    err->me_message);
		session_close(s, why);
		return;
	}
	if (err != NULL || !version_listed(res, "supportedVersions",
	    MCP_MODERN_VERSION)) {
		/* Any other answer, or silence: an initialize-era server. */
		log_debug("server %s: server/discover %s; using initialize",
		    s->s_name, err != NULL ? err->me_message :
		    "without our version");
		session_initialize(s);
		return;
	}
	(void)json_object_object_get_ex(res, "capabilities", &caps);
	if (json_object_object_get_ex(res, "_meta", &meta))
		(void)json_object_object_get_ex(meta,
		    "io.modelcontextprotocol/serverInfo", &info);
	keep_identity(s, info, caps);
	session_ready(s);
}

static void
connect_timeout(int fd, short ev, void *arg)
{
	struct mcp_session	*s = arg;
	char			 why[128];

	(void)fd;
	(void)ev;
	snprintf(why, sizeof(why), "no MCP handshake within %" PRIu64 " ms",
	    s->s_opts.so_connect_timeout_ms);
	session_close(s, why);
}

void
mcp_session_on_notify(struct mcp_session *s, mcp_notify_fn fn)
{
	s->s_notify = fn;
}

void
mcp_session_start(struct mcp_session *s)
{
	struct timeval	tv;
	uint64_t	ms = s->s_opts.so_connect_timeout_ms;

	if ((s->s_connect_timer = evtimer_new(s->s_base, connect_timeout, s))
	    == NULL)
		fatalx("evtimer_new");
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(s->s_connect_timer, &tv);
	if (s->s_opts.so_era_hint == MCP_ERA_LEGACY) {
		session_initialize(s);
		return;
	}
	s->s_era = MCP_ERA_MODERN;
	snprintf(s->s_version, sizeof(s->s_version), "%s", MCP_MODERN_VERSION);
	if (s->s_ops->to_era != NULL)
		s->s_ops->to_era(s->s_transport, s->s_era, s->s_version);
	(void)request_send(s, "server/discover", NULL, NULL,
	    ms < PROBE_TIMEOUT_MS ? ms : PROBE_TIMEOUT_MS, discover_done, NULL,
	    NULL, NULL);
}

/* ---- tools ---- */

static void tools_page(struct mcp_session *, struct tools_walk *,
		    const char *cursor);

static void
tools_walk_end(struct mcp_session *s, struct tools_walk *tw,
    const struct mcp_error *err)
{
	struct json_object *res = NULL;

	if (err == NULL) {
		res = json_object_new_object();
		json_object_object_add(res, "tools",
		    json_object_get(tw->tw_tools));
	}
	tw->tw_done(s, res, err, tw->tw_arg);
	json_object_put(res);
	json_object_put(tw->tw_tools);
	free(tw);
}

/*
 * A tool definition must at least have a name and an object schema; over
 * streamable HTTP its x-mcp-header annotations must follow the rules.
 */
static int
tool_valid(struct json_object *t, int param_headers, char *why,
    size_t whylen)
{
	struct json_object	*schema;
	const char		*name;
	char			 reason[160];

	if (!json_object_is_type(t, json_type_object) ||
	    json_get_str(t, "name", 128, 0, &name) == -1 || *name == '\0' ||
	    !json_object_object_get_ex(t, "inputSchema", &schema) ||
	    !json_object_is_type(schema, json_type_object)) {
		snprintf(why, whylen, "malformed tool definition");
		return 0;
	}
	if (param_headers && mcp_param_headers_check(schema, reason,
	    sizeof(reason)) == -1) {
		snprintf(why, whylen, "\"%s\": %s", name, reason);
		return 0;
	}
	return 1;
}

static void
cache_tools(struct mcp_session *s, struct json_object *res,
    struct json_object *tools)
{
	int64_t ttl = 0;

	json_object_put(s->s_tools);
	s->s_tools = json_object_get(tools);
	s->s_tools_expiry = 0;
	if (s->s_era == MCP_ERA_MODERN &&
	    json_get_int(res, "ttlMs", 0, INT64_MAX / 2, 1, &ttl) == 0)
		s->s_tools_expiry = monotonic_ms() + (ttl > 0 ? ttl : 0) + 1;
}

static void
tools_page_done(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct tools_walk	*tw = arg;
	struct json_object	*tools, *t;
	struct mcp_error	 e;
	const char		*cursor = NULL;
	char			 why[200];
	size_t			 i;

	if (err != NULL) {
		tools_walk_end(s, tw, err);
		return;
	}
	if (!json_object_object_get_ex(res, "tools", &tools) ||
	    !json_object_is_type(tools, json_type_array) ||
	    json_get_str(res, "nextCursor", 4096, 1, &cursor) == -1) {
		set_error(&e, MCP_ERR_PROTOCOL, "tools/list: malformed result");
		tools_walk_end(s, tw, &e);
		return;
	}
	for (i = 0; i < json_object_array_length(tools); i++) {
		t = json_object_array_get_idx(tools, i);
		if (!tool_valid(t, s->s_opts.so_param_headers, why,
		    sizeof(why))) {
			log_warnx("server %s: ignoring a tool: %s", s->s_name,
			    why);
			continue;
		}
		if (json_object_array_length(tw->tw_tools) >= MCP_MAX_TOOLS)
			break;
		json_object_array_add(tw->tw_tools, json_object_get(t));
	}
	if (cursor != NULL && *cursor != '\0') {
		if (++tw->tw_pages >= MCP_MAX_PAGES) {
			set_error(&e, MCP_ERR_PROTOCOL, "tools/list: more than "
			    "%d pages", MCP_MAX_PAGES);
			tools_walk_end(s, tw, &e);
			return;
		}
		tools_page(s, tw, cursor);
		return;
	}
	cache_tools(s, res, tw->tw_tools);
	tools_walk_end(s, tw, NULL);
}

static void
tools_page(struct mcp_session *s, struct tools_walk *tw, const char *cursor)
{
	struct json_object *params = json_object_new_object();

	if (cursor != NULL)
		json_object_object_add(params, "cursor",
		    json_object_new_string(cursor));
	(void)mcp_request(s, "tools/list", params, tw->tw_timeout_ms,
	    tools_page_done, NULL, tw);
}

void
mcp_list_tools(struct mcp_session *s, uint64_t timeout_ms, mcp_result_fn done,
    void *arg)
{
	struct tools_walk	*tw;
	struct json_object	*res;

	if (s->s_tools != NULL && (s->s_tools_expiry == 0 ||
	    monotonic_ms() < s->s_tools_expiry)) {
		res = json_object_new_object();
		json_object_object_add(res, "tools",
		    json_object_get(s->s_tools));
		done(s, res, NULL, arg);
		json_object_put(res);
		return;
	}
	if ((tw = calloc(1, sizeof(*tw))) == NULL)
		fatal("calloc");
	tw->tw_tools = json_object_new_array();
	tw->tw_timeout_ms = timeout_ms;
	tw->tw_done = done;
	tw->tw_arg = arg;
	tools_page(s, tw, NULL);
}

/*
 * A CallToolResult or an error.  An input-required result (2026-07-28)
 * needs elicitation or sampling, which the broker does not provide.
 */
static int
call_filter(struct json_object *res, struct mcp_error *e)
{
	struct json_object	*content;
	const char		*rt = NULL;

	if (json_get_str(res, "resultType", 32, 1, &rt) == 0 && rt != NULL &&
	    strcmp(rt, "complete") != 0) {
		set_error(e, MCP_ERR_PROTOCOL, "the tool asked for more input "
		    "(%s: elicitation or sampling), which this broker does not "
		    "provide", rt);
		return -1;
	}
	if (!json_object_object_get_ex(res, "content", &content) ||
	    !json_object_is_type(content, json_type_array)) {
		set_error(e, MCP_ERR_PROTOCOL, "tools/call: result has no "
		    "content array");
		return -1;
	}
	return 0;
}

int64_t
mcp_call_tool(struct mcp_session *s, const char *tool,
    struct json_object *arguments, uint64_t timeout_ms, mcp_result_fn done,
    mcp_progress_fn progress, void *arg)
{
	struct json_object	*params = json_object_new_object();
	struct mcp_error	 err;

	json_object_object_add(params, "name", json_object_new_string(tool));
	json_object_object_add(params, "arguments", arguments != NULL ?
	    arguments : json_object_new_object());
	if (s->s_state != MCP_READY) {
		json_object_put(params);
		set_error(&err, MCP_ERR_TRANSPORT, "server %s is not ready",
		    s->s_name);
		done(s, NULL, &err, arg);
		return -1;
	}
	return request_send(s, "tools/call", params, tool, timeout_ms, done,
	    call_filter, progress, arg);
}

/* ---- input ---- */

static void
bad_message(struct mcp_session *s, const char *what)
{
	/* Say it, but not once per line of a flood. */
	if (s->s_bad_messages++ < 10)
		log_warnx("server %s: %s", s->s_name, what);
	else if (s->s_bad_messages == 11)
		log_warnx("server %s: more invalid messages; no longer "
		    "logging them", s->s_name);
}

/* Our answer to a server's request: {"result": ...} or {"error": ...}. */
static void
send_reply(struct mcp_session *s, struct json_object *id, const char *key,
    struct json_object *value)
{
	struct json_object	*msg = json_object_new_object();
	struct mcp_error	 err;

	json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(msg, "id", json_object_get(id));
	json_object_object_add(msg, key, value);
	if (send_message(s, msg, -1, NULL, NULL, 0, &err) == -1)
		log_debug("server %s: reply not sent: %s", s->s_name,
		    err.me_message);
	json_object_put(msg);
}

static void
send_error_reply(struct mcp_session *s, struct json_object *id, int code,
    const char *message)
{
	struct json_object *e = json_object_new_object();

	json_object_object_add(e, "code", json_object_new_int(code));
	json_object_object_add(e, "message", json_object_new_string(message));
	send_reply(s, id, "error", e);
}

/* The server asks something of us: ping is answered, the rest refused. */
static void
handle_server_request(struct mcp_session *s, struct json_object *id,
    const char *method)
{
	char msg[160];

	if (strcmp(method, "ping") == 0) {
		send_reply(s, id, "result", json_object_new_object());
		return;
	}
	if (strcmp(method, "elicitation/create") == 0 ||
	    strcmp(method, "sampling/createMessage") == 0 ||
	    strcmp(method, "roots/list") == 0) {
		snprintf(msg, sizeof(msg), "%s is not supported by this client",
		    method);
		send_error_reply(s, id, MCP_METHOD_NOT_FOUND, msg);
		return;
	}
	send_error_reply(s, id, MCP_METHOD_NOT_FOUND, "method not found");
}

static void
handle_progress(struct mcp_session *s, struct json_object *params)
{
	struct json_object	*tok;
	struct pending		*pd;

	if (params == NULL || !json_object_object_get_ex(params,
	    "progressToken", &tok) || !json_object_is_type(tok, json_type_int))
		return;
	if ((pd = pending_find(s, json_object_get_int64(tok))) == NULL ||
	    pd->pd_progress == NULL)
		return;
	s->s_busy++;
	pd->pd_progress(s, params, pd->pd_arg);
	s->s_busy--;
}

static void
handle_log(struct mcp_session *s, struct json_object *params)
{
	struct json_object	*data;
	const char		*level = NULL;

	if (params == NULL || json_get_str(params, "level", 16, 1, &level) ==
	    -1 || !json_object_object_get_ex(params, "data", &data))
		return;
	log_debug("server %s: [%s] %.400s", s->s_name, level ? level : "?",
	    json_object_to_json_string_ext(data, JSON_C_TO_STRING_PLAIN));
}

static void
handle_notification(struct mcp_session *s, const char *method,
    struct json_object *params)
{
	if (strcmp(method, "notifications/subscriptions/acknowledged") == 0)
		s->s_listen_delay = 0;		/* the stream works */
	else if (strcmp(method, "notifications/tools/list_changed") == 0) {
		json_object_put(s->s_tools);
		s->s_tools = NULL;
		if (s->s_state == MCP_READY) {
			s->s_busy++;
			s->s_cbs->on_tools_changed(s, s->s_arg);
			s->s_busy--;
		}
	} else if (strcmp(method, "notifications/progress") == 0)
		handle_progress(s, params);
	else if (strcmp(method, "notifications/message") == 0)
		handle_log(s, params);
	else if (s->s_state == MCP_READY && s->s_notify != NULL &&
	    (strcmp(method, "notifications/resources/updated") == 0 ||
	    strcmp(method, "notifications/resources/list_changed") == 0 ||
	    strcmp(method, "notifications/prompts/list_changed") == 0)) {
		s->s_busy++;
		s->s_notify(s, method, params, s->s_arg);
		s->s_busy--;
	}
	/* Others (cancelled, ...) need nothing from us. */
}

static void
error_from_reply(struct json_object *eobj, struct mcp_error *err)
{
	const char	*m = NULL;
	int64_t		 code = MCP_ERR_PROTOCOL;

	if (!json_object_is_type(eobj, json_type_object) ||
	    json_get_int(eobj, "code", INT32_MIN, INT32_MAX, 0, &code) == -1 ||
	    json_get_str(eobj, "message", 400, 1, &m) == -1) {
		set_error(err, MCP_ERR_PROTOCOL, "malformed error response");
		return;
	}
	set_error(err, (int)code, "%s (%d)", m != NULL ? m : "error",
	    (int)code);
}

static void
handle_response(struct mcp_session *s, struct json_object *msg,
    struct json_object *id)
{
	struct json_object	*result = NULL, *eobj = NULL;
	struct pending		*pd;
	struct mcp_error	 err;
	int			 has_result, has_error;

	has_result = json_object_object_get_ex(msg, "result", &result);
	has_error = json_object_object_get_ex(msg, "error", &eobj);
	if (has_result == has_error || !json_object_is_type(id,
	    json_type_int)) {
		bad_message(s, "invalid JSON-RPC response");
		return;
	}
	if ((pd = pending_find(s, json_object_get_int64(id))) == NULL) {
		bad_message(s, "response to an unknown request id");
		return;
	}
	if (has_error) {
		error_from_reply(eobj, &err);
		pending_finish(s, pd, NULL, &err);
	} else if (!json_object_is_type(result, json_type_object)) {
		set_error(&err, MCP_ERR_PROTOCOL, "%s: result is not an object",
		    pd->pd_method);
		pending_finish(s, pd, NULL, &err);
	} else
		pending_finish(s, pd, result, NULL);
}

static void
handle_message(struct mcp_session *s, struct json_object *msg)
{
	struct json_object	*id = NULL, *params = NULL;
	const char		*version, *method;
	int			 has_id;

	if (!json_object_is_type(msg, json_type_object) ||
	    json_get_str(msg, "jsonrpc", 3, 0, &version) == -1 ||
	    strcmp(version, "2.0") != 0) {
		bad_message(s, "message is not JSON-RPC 2.0");
		return;
	}
	has_id = json_object_object_get_ex(msg, "id", &id) && id != NULL;
	if (json_get_str(msg, "method", 128, 1, &method) == -1) {
		bad_message(s, "invalid method");
		return;
	}
	/*
	 * json-c reads NaN and Infinity and would write them out again: not
	 * JSON to whoever reads next.  An answer with one fails its request,
	 * a request with one is answered with an error, a notification with
	 * one is dropped.
	 */
	if (!json_numbers_ok(msg, 0)) {
		if (method == NULL && has_id && json_object_is_type(id,
		    json_type_int))
			mcp_session_request_failed(s, json_object_get_int64(id),
			    MCP_ERR_PROTOCOL, "the answer holds a number JSON "
			    "does not have (NaN, Infinity) or one beyond 64 bits");
		else if (method != NULL && has_id && json_numbers_ok(id, 0))
			send_error_reply(s, id, MCP_INVALID_PARAMS, "a number "
			    "JSON does not have (NaN, Infinity) or one beyond "
			    "64 bits");
		else
			bad_message(s, "a message holds a number JSON does not "
			    "have; dropped");
		return;
	}
	if (method == NULL) {
		if (has_id)
			handle_response(s, msg, id);
		else
			bad_message(s, "message has neither method nor id");
		return;
	}
	if (json_object_object_get_ex(msg, "params", &params) &&
	    !json_object_is_type(params, json_type_object))
		params = NULL;
	if (has_id)
		handle_server_request(s, id, method);
	else
		handle_notification(s, method, params);
}

void
mcp_session_input(struct mcp_session *s, const char *buf, size_t len)
{
	/* One for the process, reset per message (json_parse_object's why). */
	static struct json_tokener	*tok;
	struct json_object	*o;
	char			*repaired;
	size_t			 i, n;

	if (s->s_state == MCP_CLOSED)
		return;
	/*
	 * What goes on to the controller must be UTF-8, or the channel is
	 * taken for a compromised worker's: a server's stray byte is read as
	 * U+FFFD instead, and its message kept.
	 */
	if ((repaired = utf8_repaired(buf, len, &len)) != NULL) {
		bad_message(s, "output is not UTF-8; its bad bytes are read as "
		    "U+FFFD");
		buf = repaired;
	}
	if (tok == NULL && (tok = json_tokener_new_ex(JSON_MAX_DEPTH)) == NULL)
		fatal("json_tokener_new_ex");
	json_tokener_reset(tok);
	o = len > INT32_MAX ? NULL : json_tokener_parse_ex(tok, buf, len);
	if (o == NULL || json_tokener_get_parse_end(tok) != len) {
		json_object_put(o);
		bad_message(s, "output is not valid JSON");
		log_debug("server %s: not JSON: %.*s", s->s_name,
		    (int)(len < 80 ? len : 80), buf);
		free(repaired);
		return;
	}
	free(repaired);
	s->s_busy++;
	if (json_object_is_type(o, json_type_array)) {
		/* A batch (2025-03-26): bounded, each message on its own. */
		n = json_object_array_length(o);
		for (i = 0; i < n && i < MAX_BATCH && !s->s_freed; i++)
			handle_message(s, json_object_array_get_idx(o, i));
	} else
		handle_message(s, o);
	s->s_busy--;
	json_object_put(o);
	(void)session_gone(s);
}

void
mcp_session_request_failed(struct mcp_session *s, int64_t id, int code,
    const char *why)
{
	struct pending		*pd;
	struct mcp_error	 err;

	if ((pd = pending_find(s, id)) == NULL)
		return;
	set_error(&err, code, "%s", why);
	pending_finish(s, pd, NULL, &err);
}

void
mcp_session_transport_down(struct mcp_session *s, const char *why)
{
	session_close(s, why);
}
