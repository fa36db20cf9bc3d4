/*
 * The frontend: the only process that faces the network.  It parses HTTP
 * (libevent evhttp), enforces size and time limits, and answers from what
 * the controller tells it.  It never opens a file, a database or an
 * outbound connection; its listening sockets come from the parent.
 */
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "broker/frontend_web.h"
#include "broker/mcpbroker.h"
#include "broker/websec.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/util.h"

#define FRONTEND_MAX_LISTENERS	32
#define FRONTEND_MAX_HEADERS	(32 * 1024)
#define FRONTEND_MAX_PENDING	4096
#define READY_TIMEOUT_MS	5000
#define API_TIMEOUT_MS		(15 * 60 * 1000)	/* controller silent */
#define STREAM_OUTPUT_MAX	(8 * 1024 * 1024)	/* slow client cap */
#define BODY_CEILING_MAX	((ev_ssize_t)1 << 40)	/* evhttp's, at most */

/* A request waiting for the controller's answer. */
struct pending {
	TAILQ_ENTRY(pending)	 pd_entry;
	uint64_t		 pd_id;
	struct evhttp_request	*pd_req;
	struct evhttp_connection *pd_evcon;	/* the client's */
	struct event		*pd_timer;
	uint64_t		 pd_timeout_ms;
	int			 pd_relay;	/* an API request */
	int			 pd_streaming;	/* SSE reply under way */
	int			 pd_tls;	/* came in on a TLS listener */
	int			 pd_login;	/* POST /auth/login */
	int			 pd_mcp;	/* /mcp/TOOLSET */
	int			 pd_metrics;	/* GET /metrics */
};
TAILQ_HEAD(pending_list, pending);

/*
 * A client connection, from accept until evhttp frees it.  evhttp's own
 * timeout (header-timeout) is an idle timeout, which a client trickling a
 * byte now and then never meets; the deadline here bounds the whole
 * request instead: line, headers and body must be in within header-timeout
 * of the connection's start or of the end of the previous answer.
 *
 * evhttp tells nobody about a new connection, only about a request once
 * it is complete.  So the bufferevent we make for it (tls_bevcb/plain_bevcb)
 * carries a reference of ours until the next turn of the loop, when evhttp
 * has set itself as the bufferevent's callback argument: that is the
 * evhttp_connection, whose close callback then ends our record.
 */
struct fe_conn {
	TAILQ_ENTRY(fe_conn)	  fc_entry;
	struct bufferevent	 *fc_bev;
	struct evhttp_connection *fc_evcon;	/* NULL until attached */
	struct event		 *fc_ev;	/* attach, then the deadline */
};
TAILQ_HEAD(fe_conn_list, fe_conn);

/*
 * One evhttp per TLS listener (each may have its own certificate) and one
 * shared by every plain listener.
 */
struct fe_listener {
	int		 fl_fd;
	SSL_CTX		*fl_ctx;	/* NULL: plain HTTP */
	struct evhttp	*fl_http;
	char		 fl_name[80];
};

static struct {
	struct mcpbroker_conf	*conf;
	struct evhttp		*http;		/* the plain listeners' */
	struct peer		 controller;
	struct fe_listener	 listeners[FRONTEND_MAX_LISTENERS];
	size_t			 nlisten;
	struct pending_list	 pending;
	size_t			 npending;
	uint64_t		 next_id;
	struct fe_conn_list	 conns;
	struct metric		*m_requests;
	struct metric		*m_streams;
} fe;

static int	frontend_recv_peer(struct peer *, struct msg *,
		    struct json_object *);
static int	frontend_recv_listen(struct peer *, struct msg *,
		    struct json_object *);
static int	frontend_recv_ready(struct peer *, struct msg *,
		    struct json_object *);
static int	frontend_recv_http_rep(struct peer *, struct msg *,
		    struct json_object *);
static int	frontend_recv_http_event(struct peer *, struct msg *,
		    struct json_object *);
static int	frontend_recv_http_end(struct peer *, struct msg *,
		    struct json_object *);

static const struct dispatch frontend_dispatch_parent[] = {
	{ MSG_CONF_TEXT, child_recv_conf_text, 0 },
	{ MSG_CONF_PEER, frontend_recv_peer, DISPATCH_FD | DISPATCH_ONCE },
	{ MSG_CONF_LISTEN, frontend_recv_listen, DISPATCH_FD },
	{ MSG_CONF_DONE, child_recv_done, 0 },
	{ MSG_START, child_recv_start, 0 },
	DISPATCH_END
};

static const struct dispatch frontend_dispatch_controller[] = {
	{ MSG_READY_REP, frontend_recv_ready, 0 },
	{ MSG_HTTP_REP, frontend_recv_http_rep, 0 },
	{ MSG_HTTP_EVENT, frontend_recv_http_event, 0 },
	{ MSG_HTTP_END, frontend_recv_http_end, 0 },
	DISPATCH_END
};

/* ---- responses ---- */

static void
reply_json(struct evhttp_request *req, int code, const char *reason,
    struct json_object *body)
{
	struct evbuffer	*buf = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	const char	*s;
	size_t		 len;

	s = json_object_to_json_string_length(body, JSON_C_TO_STRING_PLAIN |
	    JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	if (buf == NULL || evbuffer_add(buf, s, len) == -1 ||
	    evbuffer_add(buf, "\n", 1) == -1) {
		evhttp_send_error(req, 500, NULL);
		evbuffer_free(buf);
		return;
	}
	evhttp_add_header(h, "Content-Type", "application/json");
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_send_reply(req, code, reason, buf);
	evbuffer_free(buf);
}

static void
reply_error(struct evhttp_request *req, int code, const char *reason,
    const char *errcode, const char *message)
{
	struct json_object *o = json_object_new_object(), *e;

	e = json_object_new_object();
	json_object_object_add(e, "code", json_object_new_string(errcode));
	json_object_object_add(e, "message", json_object_new_string(message));
	json_object_object_add(o, "error", e);
	reply_json(req, code, reason, o);
	json_object_put(o);
}

/* ---- pending requests ---- */

static void
pending_free(struct pending *pd)
{
	if (pd->pd_streaming)
		metric_add(fe.m_streams, -1);
	TAILQ_REMOVE(&fe.pending, pd, pd_entry);
	fe.npending--;
	event_free(pd->pd_timer);
	free(pd);
}

static struct pending *
pending_find(uint64_t id)
{
	struct pending *pd;

	TAILQ_FOREACH(pd, &fe.pending, pd_entry)
		if (pd->pd_id == id)
			return pd;
	return NULL;
}

/* An API request the controller still works on is called off. */
static void
pending_cancel(struct pending *pd)
{
	if (pd->pd_relay)
		(void)peer_send(&fe.controller, MSG_HTTP_CANCEL, pd->pd_id, -1,
		    NULL);
	pending_free(pd);
}

/*
 * A stream's end.  An HTTP/1.0 stream has no chunked coding, so when its
 * output is all written evhttp frees the request and closes the connection
 * inside evhttp_send_reply_end, and the close callback looks for the
 * connection's requests: pd must be gone from the list by then.
 */
static void
pending_end_stream(struct pending *pd, int cancel)
{
	struct evhttp_request *req = pd->pd_req;

	if (cancel)
		pending_cancel(pd);
	else
		pending_free(pd);
	evhttp_send_reply_end(req);
}

static void
pending_timeout(int fd, short ev, void *arg)
{
	struct pending *pd = arg;

	(void)fd;
	(void)ev;
	if (pd->pd_streaming) {
		pending_end_stream(pd, 1);
		return;
	}
	reply_error(pd->pd_req, 504, "Gateway Timeout", "timeout",
	    "the controller did not answer in time");
	pending_cancel(pd);
}

static void
pending_touch(struct pending *pd)
{
	struct timeval tv = { pd->pd_timeout_ms / 1000,
	    (pd->pd_timeout_ms % 1000) * 1000 };

	evtimer_add(pd->pd_timer, &tv);
}

/*
 * The client went away.  When the connection ends under a request that
 * was not finished (the client hung up on a stream), evhttp first lets go
 * of the request, which is then ours to free; when we end the connection
 * it frees the request itself, after this.
 */
static void
pending_conn_closed(struct evhttp_connection *evcon, void *arg)
{
	struct pending *pd, *next;

	(void)arg;
	TAILQ_FOREACH_SAFE(pd, &fe.pending, pd_entry, next) {
		if (pd->pd_evcon != evcon)
			continue;
		if (evhttp_request_get_connection(pd->pd_req) == NULL)
			evhttp_request_free(pd->pd_req);
		pending_cancel(pd);
	}
}

/* ---- connections ---- */

static struct fe_conn *
conn_find(struct evhttp_connection *evcon)
{
	struct fe_conn *fc;

	TAILQ_FOREACH(fc, &fe.conns, fc_entry)
		if (fc->fc_evcon == evcon)
			return fc;
	return NULL;
}

static void
conn_free(struct fe_conn *fc)
{
	TAILQ_REMOVE(&fe.conns, fc, fc_entry);
	event_free(fc->fc_ev);
	free(fc);
}

/* The next request must be in, body and all, within header-timeout. */
static void
conn_arm(struct fe_conn *fc)
{
	uint64_t	ms = fe.conf->c_limits.lm_header_timeout_ms;
	struct timeval	tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(fc->fc_ev, &tv);
}

static void
conn_closed(struct evhttp_connection *evcon, void *arg)
{
	pending_conn_closed(evcon, NULL);
	conn_free(arg);
}

/*
 * First call: attach to evhttp's connection (see struct fe_conn).  Later
 * ones: the deadline passed.  Shutting the socket down makes evhttp see
 * the end of it and free the connection its own way.
 */
static void
conn_event(evutil_socket_t fd, short ev, void *arg)
{
	struct fe_conn		*fc = arg;
	bufferevent_data_cb	 readcb;
	void			*cbarg;
	int			 one = 1;

	(void)ev;
	if (fc->fc_evcon != NULL) {
		log_debug("closing a connection whose request did not arrive "
		    "within header-timeout");
		if ((fd = bufferevent_getfd(fc->fc_bev)) != -1)
			(void)shutdown(fd, SHUT_RDWR);
		return;
	}
	bufferevent_getcb(fc->fc_bev, &readcb, NULL, NULL, &cbarg);
	bufferevent_decref(fc->fc_bev);
	if (readcb == NULL) {	/* evhttp let go of it already */
		conn_free(fc);
		return;
	}
	fc->fc_evcon = cbarg;
	evhttp_connection_set_closecb(fc->fc_evcon, conn_closed, fc);
	/*
	 * An answer may leave in more than one write (an event stream: the
	 * head and an event, later its end).  With Nagle's algorithm the
	 * second waits for the client to acknowledge the first, and a
	 * client with nothing to send delays that by some 40 ms.
	 */
	if ((fd = bufferevent_getfd(fc->fc_bev)) != -1)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
		    sizeof(one));
	conn_arm(fc);
}

/* A connection's bufferevent is being made: watch it (fatal if we cannot). */
static struct bufferevent *
conn_new(struct bufferevent *bev)
{
	struct fe_conn *fc;

	if (bev == NULL || (fc = calloc(1, sizeof(*fc))) == NULL ||
	    (fc->fc_ev = event_new(child_base(), -1, 0, conn_event, fc)) ==
	    NULL)
		fatalx("cannot accept a connection: out of memory");
	fc->fc_bev = bev;
	bufferevent_incref(bev);
	TAILQ_INSERT_TAIL(&fe.conns, fc, fc_entry);
	event_active(fc->fc_ev, EV_TIMEOUT, 0);
	return bev;
}

/*
 * The answer is out: the connection may carry the next request.  arg is
 * the route's pattern (a bounded set of labels), NULL before routing.
 */
static void
request_done(struct evhttp_request *req, void *arg)
{
	struct fe_conn	*fc;
	char		 status[16];

	snprintf(status, sizeof(status), "%d",
	    evhttp_request_get_response_code(req));
	metric_add(fe.m_requests, 1, arg != NULL ? (const char *)arg : "none",
	    status);
	if ((fc = conn_find(evhttp_request_get_connection(req))) != NULL)
		conn_arm(fc);
}

/*
 * Ask the controller; the answer arrives in a frontend_recv_* handler.
 * NULL when the request has been answered already (with an error).
 */
static struct pending *
ask_controller(struct evhttp_request *req, uint16_t type,
    struct json_object *payload, uint64_t timeout_ms)
{
	struct evhttp_connection	*evcon;
	struct pending			*pd;

	if (!peer_connected(&fe.controller) ||
	    fe.npending >= FRONTEND_MAX_PENDING) {
		reply_error(req, 503, "Service Unavailable", "unavailable",
		    "the broker is not ready; try again shortly");
		return NULL;
	}
	if ((pd = calloc(1, sizeof(*pd))) == NULL ||
	    (pd->pd_timer = evtimer_new(child_base(), pending_timeout, pd)) ==
	    NULL) {
		free(pd);
		reply_error(req, 500, "Internal Server Error", "internal",
		    "out of memory");
		return NULL;
	}
	pd->pd_id = ++fe.next_id;
	pd->pd_req = req;
	pd->pd_timeout_ms = timeout_ms;
	pd->pd_relay = type == MSG_HTTP_REQ;
	pd->pd_evcon = evhttp_request_get_connection(req);
	if (peer_send(&fe.controller, type, pd->pd_id, -1, payload) == -1) {
		event_free(pd->pd_timer);
		free(pd);
		reply_error(req, 503, "Service Unavailable", "unavailable",
		    "the controller is not reachable");
		return NULL;
	}
	TAILQ_INSERT_TAIL(&fe.pending, pd, pd_entry);
	fe.npending++;
	pending_touch(pd);
	/* conn_closed cancels it; without a record, nothing else would. */
	evcon = evhttp_request_get_connection(req);
	if (conn_find(evcon) == NULL)
		evhttp_connection_set_closecb(evcon, pending_conn_closed, NULL);
	return pd;
}

/* ---- routes ---- */

static void
route_healthz(struct evhttp_request *req, int tls)
{
	struct json_object *o = json_object_new_object();

	(void)tls;
	json_object_object_add(o, "status", json_object_new_string("ok"));
	reply_json(req, 200, "OK", o);
	json_object_put(o);
}

static void
route_readyz(struct evhttp_request *req, int tls)
{
	(void)tls;
	(void)ask_controller(req, MSG_READY_REQ, NULL, READY_TIMEOUT_MS);
}

static const char *
method_str(enum evhttp_cmd_type m)
{
	switch (m) {
	case EVHTTP_REQ_GET:
		return "GET";
	case EVHTTP_REQ_POST:
		return "POST";
	case EVHTTP_REQ_PATCH:
		return "PATCH";
	case EVHTTP_REQ_DELETE:
		return "DELETE";
	case EVHTTP_REQ_PUT:
		return "PUT";
	default:
		return "OTHER";
	}
}

/* What a browser's request carries besides a bearer key. */
struct web_hdrs {
	const char	*wh_origin;
	const char	*wh_host;
	const char	*wh_csrf;
	char		 wh_cookie[WEB_TOKEN_LEN + 1];	/* "" when none */
};

/*
 * A header that may appear once: 0 with *out (NULL when absent), or -1 when
 * it is repeated or longer than max.  Ambiguity is refused, not resolved.
 */
static int
header_once(struct evkeyvalq *h, const char *name, size_t max,
    const char **out)
{
	struct evkeyval *kv;

	*out = NULL;
	TAILQ_FOREACH(kv, h, next) {
		if (strcasecmp(kv->key, name) != 0)
			continue;
		if (*out != NULL || strlen(kv->value) > max)
			return -1;
		*out = kv->value;
	}
	return 0;
}

/*
 * The session cookie's value from every Cookie header ("" when absent), or
 * -1 when it is repeated or malformed: on plain HTTP another host of the
 * same site can plant a second cookie of our name to shadow ours.
 */
static int
session_cookie(struct evkeyvalq *h, int tls, char out[WEB_TOKEN_LEN + 1])
{
	struct evkeyval	*kv;
	char		 v[WEB_TOKEN_LEN + 1];
	int		 n, total = 0;

	out[0] = '\0';
	TAILQ_FOREACH(kv, h, next) {
		if (strcasecmp(kv->key, "Cookie") != 0)
			continue;
		if ((n = websec_cookie_find(kv->value, websec_cookie_name(tls),
		    v, sizeof(v))) == -1)
			return -1;
		if (n > 0 && total == 0)
			memcpy(out, v, sizeof(v));
		total += n;
	}
	explicit_bzero(v, sizeof(v));
	if (total > 1 || (total == 1 && !websec_token_valid(out)))
		return -1;
	return 0;
}

/* Read them strictly; a request with a bad one is answered 400 here. */
static int
web_headers(struct evhttp_request *req, int tls, struct web_hdrs *wh)
{
	struct evkeyvalq	*h = evhttp_request_get_input_headers(req);
	char			 clear[SET_COOKIE_MAX];

	if (header_once(h, "Origin", ORIGIN_MAX - 1, &wh->wh_origin) == -1 ||
	    header_once(h, "Host", HOST_MAX, &wh->wh_host) == -1 ||
	    header_once(h, "X-CSRF-Token", CSRF_HEADER_MAX, &wh->wh_csrf) ==
	    -1) {
		reply_error(req, 400, "Bad Request", "bad_request", "a "
		    "repeated or overlong Origin, Host or X-CSRF-Token header");
		return -1;
	}
	if (session_cookie(h, tls, wh->wh_cookie) == -1) {
		/* Clear ours, so that the next login starts afresh. */
		if (websec_set_cookie(clear, sizeof(clear), tls, NULL, 0) == 0)
			evhttp_add_header(evhttp_request_get_output_headers(
			    req), "Set-Cookie", clear);
		reply_error(req, 400, "Bad Request", "bad_cookie", "the "
		    "session cookie is malformed or repeated; log in again");
		return -1;
	}
	return 0;
}

static void
add_str(struct json_object *o, const char *key, const char *v)
{
	if (v != NULL)
		json_object_object_add(o, key, json_object_new_string(v));
}

/*
 * A request body as one JSON object, held to stricter rules than json-c's:
 * valid UTF-8 (json-c lets overlong forms and surrogates through) and
 * finite numbers within 64 bits.  NULL with why.  Strings are taken as
 * JSON has them: an escaped NUL stays in the string, and every reader
 * checks for it (json_get_str).
 */
static struct json_object *
json_body_parse(const char *buf, size_t len, char *why, size_t whylen)
{
	struct json_object	*o;
	size_t			 good;

	if ((good = utf8_valid_len(buf, len)) < len) {
		snprintf(why, whylen, "invalid UTF-8 at byte %zu", good);
		return NULL;
	}
	if ((o = json_parse_object_why(buf, len, why, whylen)) == NULL)
		return NULL;
	if (!json_numbers_ok(o, 0)) {
		json_object_put(o);
		snprintf(why, whylen, "a number that is not finite, not "
		    "written as JSON, or beyond 64 bits");
		return NULL;
	}
	return o;
}

/* The body, one JSON object, in *body; 0 when the client has been told. */
static int
json_body(struct evhttp_request *req, struct evbuffer *in, size_t len,
    struct json_object **body)
{
	char	why[96], msg[160];

	if ((*body = json_body_parse((const char *)evbuffer_pullup(in, len),
	    len, why, sizeof(why))) != NULL)
		return 1;
	snprintf(msg, sizeof(msg), "the request body must be one JSON object "
	    "(%s)", why);
	reply_error(req, 400, "Bad Request", "invalid_json", msg);
	return 0;
}

/*
 * The API is the controller's: the frontend checks the body is one JSON
 * object and relays it with the caller's credential (a bearer token, or
 * the session cookie's value) and what the controller needs to judge a
 * browser's request (Origin, Host, X-CSRF-Token, TLS or not).  The
 * controller, which holds the users and sessions, decides who the caller
 * is and whether to serve it.
 */
static struct pending *
relay_api(struct evhttp_request *req, int tls)
{
	struct evbuffer		*in = evhttp_request_get_input_buffer(req);
	const struct evhttp_uri	*uri = evhttp_request_get_evhttp_uri(req);
	struct json_object	*payload, *body = NULL;
	struct pending		*pd;
	struct web_hdrs		 wh;
	size_t			 len = evbuffer_get_length(in);
	const char		*query, *auth;
	char			*addr = NULL;
	ev_uint16_t		 port = 0;

	if (web_headers(req, tls, &wh) == -1)
		return NULL;
	auth = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Authorization");
	if (auth != NULL && strlen(auth) > CREDENTIAL_MAX + 7) {
		reply_error(req, 401, "Unauthorized", "unauthorized", "the "
		    "Authorization header is too long (the limit is 8 KiB)");
		return NULL;
	}
	if (len > 0 && !json_body(req, in, len, &body))
		return NULL;
	payload = json_object_new_object();
	json_object_object_add(payload, "method", json_object_new_string(
	    method_str(evhttp_request_get_command(req))));
	json_object_object_add(payload, "path",
	    json_object_new_string(evhttp_uri_get_path(uri)));
	if ((query = evhttp_uri_get_query(uri)) != NULL)
		json_object_object_add(payload, "query",
		    json_object_new_string(query));
	if (body != NULL)
		json_object_object_add(payload, "body", body);
	evhttp_connection_get_peer(evhttp_request_get_connection(req), &addr,
	    &port);
	if (addr != NULL)
		json_object_object_add(payload, "peer",
		    json_object_new_string(addr));
	if (auth != NULL && strncasecmp(auth, "Bearer ", 7) == 0)
		json_object_object_add(payload, "credential",
		    json_object_new_string(auth + 7));
	if (wh.wh_cookie[0] != '\0')
		add_str(payload, "cookie", wh.wh_cookie);
	explicit_bzero(wh.wh_cookie, sizeof(wh.wh_cookie));
	add_str(payload, "csrf", wh.wh_csrf);
	add_str(payload, "origin", wh.wh_origin);
	add_str(payload, "host", wh.wh_host);
	json_object_object_add(payload, "tls", json_object_new_boolean(tls));
	if ((pd = ask_controller(req, MSG_HTTP_REQ, payload,
	    API_TIMEOUT_MS)) != NULL) {
		pd->pd_tls = tls;
		pd->pd_login = strcmp(evhttp_uri_get_path(uri),
		    "/auth/login") == 0;
	}
	json_object_put(payload);
	return pd;
}

static void
route_api(struct evhttp_request *req, int tls)
{
	(void)relay_api(req, tls);
}

/*
 * Who may see the metrics is the controller's question, as for the API:
 * it answers with its own text, and ours goes first.
 */
static void
route_metrics(struct evhttp_request *req, int tls)
{
	struct pending *pd;

	if ((pd = relay_api(req, tls)) != NULL)
		pd->pd_metrics = 1;
}

static void
reply_metrics(struct evhttp_request *req, const char *theirs)
{
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	struct evbuffer		*buf;
	char			*ours = metrics_render();

	if ((buf = evbuffer_new()) == NULL || evbuffer_add(buf, ours,
	    strlen(ours)) == -1 || evbuffer_add(buf, theirs,
	    strlen(theirs)) == -1) {
		free(ours);
		evbuffer_free(buf);
		evhttp_send_error(req, 500, NULL);
		return;
	}
	free(ours);
	evhttp_add_header(h, "Content-Type",
	    "text/plain; version=0.0.4; charset=utf-8");
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_send_reply(req, 200, "OK", buf);
	evbuffer_free(buf);
}

/* ---- /mcp/TOOLSET: the broker as an MCP server ---- */

static const char	*status_reason(int);

/*
 * A 401's challenge.  An MCP client is told where the resource's metadata
 * is (RFC 9728), on our own origin, when Host and path are plain enough
 * to put in a header.
 */
static void
www_authenticate(struct evhttp_request *req, int tls, int mcp)
{
	const char	*host, *path = evhttp_uri_get_path(
			    evhttp_request_get_evhttp_uri(req));
	char		 v[512];

	host = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Host");
	if (!mcp || host == NULL || path == NULL || strlen(host) > HOST_MAX ||
	    strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789.-:[]") != strlen(host) || strlen(path) > 5 + 64 ||
	    strspn(path + 5, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW"
	    "XYZ0123456789._-") != strlen(path + 5))
		snprintf(v, sizeof(v), "Bearer");
	else
		snprintf(v, sizeof(v), "Bearer resource_metadata=\"%s://%s/"
		    ".well-known/oauth-protected-resource%s\"", tls ? "https" :
		    "http", host, path);
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "WWW-Authenticate", v);
}

/* An MCP answer of our own: a JSON-RPC error without an id. */
static void
reply_rpc_error(struct evhttp_request *req, int status, int code,
    const char *message)
{
	struct json_object *o = json_object_new_object(), *e;

	json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(o, "id", NULL);
	e = json_object_new_object();
	json_object_object_add(e, "code", json_object_new_int(code));
	json_object_object_add(e, "message", json_object_new_string(message));
	json_object_object_add(o, "error", e);
	reply_json(req, status, status == 401 ? "Unauthorized" : "Bad Request",
	    o);
	json_object_put(o);
}

/*
 * The MCP request headers the controller reads, relayed as "mcp": each at
 * most once, bounded, printable ASCII (Mcp-Name may hold spaces).
 */
static const struct {
	const char	*mh_name;
	const char	*mh_key;
	size_t		 mh_max;
	int		 mh_space;
} mcp_headers[] = {
	{ "Mcp-Session-Id", "session", 128, 0 },
	{ "MCP-Protocol-Version", "version", 32, 0 },
	{ "Mcp-Method", "method", 128, 0 },
	{ "Mcp-Name", "name", 8192, 1 },
	{ "Last-Event-ID", "last_event", 128, 0 },
};

static int
mcp_header_ok(const char *v, int space)
{
	for (; *v != '\0'; v++)
		if ((unsigned char)*v > 0x7e ||
		    (unsigned char)*v < (space ? 0x20 : 0x21))
			return 0;
	return 1;
}

static struct json_object *
mcp_fields(struct evhttp_request *req)
{
	struct evkeyvalq	*h = evhttp_request_get_input_headers(req);
	struct json_object	*o = json_object_new_object();
	const char		*v;
	char			 msg[96];
	size_t			 i;

	for (i = 0; i < sizeof(mcp_headers) / sizeof(mcp_headers[0]); i++) {
		if (header_once(h, mcp_headers[i].mh_name,
		    mcp_headers[i].mh_max, &v) == -1 || (v != NULL &&
		    (*v == '\0' || !mcp_header_ok(v, mcp_headers[i].mh_space)))) {
			snprintf(msg, sizeof(msg), "Bad Request: a repeated, "
			    "overlong or malformed %s header",
			    mcp_headers[i].mh_name);
			reply_rpc_error(req, 400, -32600, msg);
			json_object_put(o);
			return NULL;
		}
		add_str(o, mcp_headers[i].mh_key, v);
	}
	v = evhttp_find_header(h, "Accept");
	json_object_object_add(o, "sse", json_object_new_boolean(v != NULL &&
	    strcasestr(v, "text/event-stream") != NULL));
	return o;
}

/*
 * A POST carries one JSON-RPC message.  Batches (2025-03-26 only; later
 * revisions dropped them) are refused whole.
 */
static int
mcp_body(struct evhttp_request *req, struct json_object **body)
{
	struct evbuffer	*in = evhttp_request_get_input_buffer(req);
	size_t		 len = evbuffer_get_length(in), i;
	const char	*b;
	char		 why[96], msg[160];

	*body = NULL;
	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST || len == 0)
		return 1;
	b = (const char *)evbuffer_pullup(in, len);
	for (i = 0; i < len && strchr(" \t\r\n", b[i]) != NULL; i++)
		;
	if (i < len && b[i] == '[') {
		reply_rpc_error(req, 400, -32600, "Invalid Request: JSON-RPC "
		    "batches are not supported; send one message per POST");
		return 0;
	}
	if ((*body = json_body_parse(b, len, why, sizeof(why))) == NULL) {
		snprintf(msg, sizeof(msg), "Parse error: the body must be one "
		    "JSON-RPC message (%s)", why);
		reply_rpc_error(req, 400, -32700, msg);
		return 0;
	}
	return 1;
}

/*
 * As route_api, with the MCP headers and a JSON-RPC body; no cookie:
 * MCP clients authenticate with bearer tokens.
 */
static void
route_mcp(struct evhttp_request *req, int tls)
{
	const struct evhttp_uri	*uri = evhttp_request_get_evhttp_uri(req);
	struct json_object	*payload, *mcp, *body;
	struct pending		*pd;
	struct web_hdrs		 wh;
	const char		*auth;
	char			*addr = NULL;
	ev_uint16_t		 port = 0;

	if (web_headers(req, tls, &wh) == -1)
		return;
	explicit_bzero(wh.wh_cookie, sizeof(wh.wh_cookie));
	auth = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "Authorization");
	if (auth != NULL && strlen(auth) > CREDENTIAL_MAX + 7) {
		www_authenticate(req, tls, 1);
		reply_rpc_error(req, 401, -32600, "the Authorization header is "
		    "too long (the limit is 8 KiB)");
		return;
	}
	if ((mcp = mcp_fields(req)) == NULL)
		return;
	if (!mcp_body(req, &body)) {
		json_object_put(mcp);
		return;
	}
	payload = json_object_new_object();
	json_object_object_add(payload, "method", json_object_new_string(
	    method_str(evhttp_request_get_command(req))));
	json_object_object_add(payload, "path",
	    json_object_new_string(evhttp_uri_get_path(uri)));
	if (body != NULL)
		json_object_object_add(payload, "body", body);
	evhttp_connection_get_peer(evhttp_request_get_connection(req), &addr,
	    &port);
	if (addr != NULL)
		json_object_object_add(payload, "peer",
		    json_object_new_string(addr));
	if (auth != NULL && strncasecmp(auth, "Bearer ", 7) == 0)
		json_object_object_add(payload, "credential",
		    json_object_new_string(auth + 7));
	add_str(payload, "origin", wh.wh_origin);
	add_str(payload, "host", wh.wh_host);
	json_object_object_add(payload, "tls", json_object_new_boolean(tls));
	json_object_object_add(payload, "mcp", mcp);
	if ((pd = ask_controller(req, MSG_HTTP_REQ, payload,
	    API_TIMEOUT_MS)) != NULL) {
		pd->pd_tls = tls;
		pd->pd_mcp = 1;
	}
	json_object_put(payload);
}

/* An MCP answer's headers: the session a client is to send back. */
static int
mcp_rep_headers(struct pending *pd, struct json_object *mcp)
{
	const char *sid = NULL;

	if (!pd->pd_mcp || !json_object_is_type(mcp, json_type_object) ||
	    json_get_str(mcp, "session", 128, 1, &sid) == -1 ||
	    (sid != NULL && (*sid == '\0' || !mcp_header_ok(sid, 0))))
		return -1;
	if (sid != NULL)
		evhttp_add_header(evhttp_request_get_output_headers(pd->pd_req),
		    "Mcp-Session-Id", sid);
	return 0;
}

/* 202 Accepted and the like: a status and nothing else. */
static void
reply_empty(struct evhttp_request *req, int status)
{
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Cache-Control", "no-store");
	evhttp_send_reply(req, status, status_reason(status), NULL);
}

struct route {
	const char	*rt_path;	/* exact, or a prefix ending in '/' */
	int		 rt_methods;	/* evhttp_cmd_type bits */
	void		(*rt_fn)(struct evhttp_request *, int tls);
};

#define API_METHODS	(EVHTTP_REQ_GET | EVHTTP_REQ_POST | \
			 EVHTTP_REQ_PATCH | EVHTTP_REQ_DELETE)

static const struct route routes[] = {
	{ "/healthz", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, route_healthz },
	{ "/readyz", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, route_readyz },
	{ "/metrics", EVHTTP_REQ_GET, route_metrics },
	{ "/llmchat/", API_METHODS, route_api },
	{ "/api/v1/", API_METHODS, route_api },
	{ "/auth/login", EVHTTP_REQ_POST, route_api },
	{ "/auth/logout", EVHTTP_REQ_POST, route_api },
	{ "/auth/session", EVHTTP_REQ_GET, route_api },
	{ "/mcp/", EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE,
	    route_mcp },
	{ "/.well-known/oauth-protected-resource/", EVHTTP_REQ_GET,
	    route_api },
	{ "/", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, web_route },
	{ "/admin", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, web_route },
	{ "/assets/", EVHTTP_REQ_GET | EVHTTP_REQ_HEAD, web_route },
	{ NULL, 0, NULL }
};

/* The Allow header of a 405: the route's methods. */
static void
allow_header(struct evhttp_request *req, int methods)
{
	static const struct {
		int		 m;
		const char	*name;
	} names[] = {
		{ EVHTTP_REQ_GET, "GET" }, { EVHTTP_REQ_HEAD, "HEAD" },
		{ EVHTTP_REQ_POST, "POST" }, { EVHTTP_REQ_PATCH, "PATCH" },
		{ EVHTTP_REQ_DELETE, "DELETE" },
	};
	char	buf[64];
	size_t	i, len = 0;

	buf[0] = '\0';
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (methods & names[i].m)
			len += (size_t)snprintf(buf + len, sizeof(buf) - len,
			    "%s%s", len > 0 ? ", " : "", names[i].name);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
	    buf);
}

static int
route_matches(const struct route *rt, const char *path)
{
	size_t len = strlen(rt->rt_path);

	if (len > 1 && rt->rt_path[len - 1] == '/')
		return strncmp(path, rt->rt_path, len) == 0 && path[len] != '\0';
	return strcmp(path, rt->rt_path) == 0;
}

static int
is_token(const char *s)
{
	return *s != '\0' && strspn(s, "abcdefghijklmnopqrstuvwxyz"
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~") ==
	    strlen(s);
}

/*
 * How the body was framed, checked before anything else, for what
 * libevent lets through.  Upstream 2.1.12 reads a chunked body when
 * Transfer-Encoding is exactly "chunked" and then ignores Content-Length;
 * any other coding it ignores, reading the body by Content-Length or not
 * at all, so that the rest passes for the next request; of repeated
 * Content-Length headers it takes the first, and "+5" is a length to it;
 * a header name is whatever came before the colon, so "Content-Length : 5"
 * is no Content-Length.  (Debian's build refuses some of these itself.)
 * A proxy in front may read such a request otherwise: each is refused and
 * the connection closed (RFC 9112, 6.1 and 6.3).  A good chunked body is
 * refused too: libevent merges trailer fields into the headers, where a
 * trailer could pose as a header that a proxy vetted.  Returns what is
 * wrong, or NULL; *status is 400 or 411.
 */
static const char *
framing_problem(struct evhttp_request *req, int *status)
{
	struct evkeyval	*kv;
	const char	*te = NULL, *cl = NULL;
	int		 nte = 0, ncl = 0;

	*status = 400;
	TAILQ_FOREACH(kv, evhttp_request_get_input_headers(req), next) {
		if (!is_token(kv->key))
			return "a header field name with a character that is "
			    "not allowed there (RFC 9110, 5.1)";
		if (strcasecmp(kv->key, "Transfer-Encoding") == 0) {
			te = kv->value;
			nte++;
		} else if (strcasecmp(kv->key, "Content-Length") == 0) {
			cl = kv->value;
			ncl++;
		}
	}
	if (te != NULL && cl != NULL)
		return "a request may not have both Content-Length and "
		    "Transfer-Encoding";
	if (nte > 1 || (te != NULL && strcasecmp(te, "chunked") != 0))
		return "unsupported Transfer-Encoding; send the body with "
		    "Content-Length";
	if (te != NULL) {
		*status = 411;
		return "chunked request bodies are not accepted; send the "
		    "body with Content-Length";
	}
	if (ncl > 1 || (cl != NULL && (cl[0] == '\0' ||
	    strspn(cl, "0123456789") != strlen(cl))))
		return "a repeated or malformed Content-Length";
	return NULL;
}

static int
framing_ok(struct evhttp_request *req)
{
	const char	*msg;
	int		 status;

	if ((msg = framing_problem(req, &status)) == NULL)
		return 1;
	evhttp_add_header(evhttp_request_get_output_headers(req), "Connection",
	    "close");
	reply_error(req, status, status == 411 ? "Length Required" :
	    "Bad Request", status == 411 ? "length_required" : "bad_framing",
	    msg);
	return 0;
}

static int
body_ok(struct evhttp_request *req)
{
	char msg[128];

	if (evbuffer_get_length(evhttp_request_get_input_buffer(req)) <=
	    fe.conf->c_limits.lm_max_body)
		return 1;
	snprintf(msg, sizeof(msg), "the request body is larger than the "
	    "limit of %llu bytes (max-body)",
	    (unsigned long long)fe.conf->c_limits.lm_max_body);
	reply_error(req, 413, "Payload Too Large", "payload_too_large", msg);
	return 0;
}

/* A "." or ".." segment, its dots raw or percent-encoded. */
static int
dot_segment(const char *seg, size_t len)
{
	size_t	i = 0, dots = 0;

	while (i < len && dots < 3) {
		if (seg[i] == '.')
			i++;
		else if (len - i >= 3 && strncasecmp(seg + i, "%2e", 3) == 0)
			i += 3;
		else
			return 0;
		dots++;
	}
	return dots > 0 && dots < 3 && i == len;
}

/*
 * Nothing we serve has a dot segment, an empty one, or an encoded slash,
 * backslash or NUL; a proxy in front, or a file system once files are
 * served, may make of such a path something else than we do.
 */
static int
path_ok(const char *raw, const char *path)
{
	const char	*seg, *end;

	if (raw[0] != '/' || raw[1] == '/' || path[0] != '/' ||
	    strchr(path, '\\') != NULL || strcasestr(path, "%2f") != NULL ||
	    strcasestr(path, "%5c") != NULL || strcasestr(path, "%00") != NULL)
		return 0;
	for (seg = path + 1;; seg = end + 1) {
		end = seg + strcspn(seg, "/");
		if ((end == seg && *end == '/') || dot_segment(seg, end - seg))
			return 0;
		if (*end == '\0')
			return 1;
	}
}

/* arg is non-NULL on a TLS listener's server. */
static void
frontend_request(struct evhttp_request *req, void *arg)
{
	const struct route	*rt;
	const char		*path, *raw = evhttp_request_get_uri(req);
	struct evhttp_uri	*uri;
	struct fe_conn		*fc;

	if ((fc = conn_find(evhttp_request_get_connection(req))) != NULL)
		evtimer_del(fc->fc_ev);		/* it is in: no deadline */
	evhttp_request_set_on_complete_cb(req, request_done, NULL);
	if (!framing_ok(req) || !body_ok(req))
		return;
	/* evhttp_uri_free(NULL) dereferences it. */
	if ((uri = evhttp_uri_parse_with_flags(raw, 0)) == NULL ||
	    (path = evhttp_uri_get_path(uri)) == NULL) {
		if (uri != NULL)
			evhttp_uri_free(uri);
		reply_error(req, 400, "Bad Request", "bad_request",
		    "the request URI could not be parsed");
		return;
	}
	if (!path_ok(raw, path)) {
		evhttp_uri_free(uri);
		reply_error(req, 400, "Bad Request", "bad_path", "the request "
		    "path has a dot or empty segment, or an encoded slash, "
		    "backslash or NUL");
		return;
	}
	for (rt = routes; rt->rt_path != NULL; rt++)
		if (route_matches(rt, path))
			break;
	evhttp_uri_free(uri);
	if (rt->rt_path != NULL)
		evhttp_request_set_on_complete_cb(req, request_done,
		    (void *)(uintptr_t)rt->rt_path);
	if (rt->rt_path == NULL) {
		reply_error(req, 404, "Not Found", "not_found",
		    "no such endpoint");
		return;
	}
	if ((evhttp_request_get_command(req) & rt->rt_methods) == 0) {
		allow_header(req, rt->rt_methods);
		reply_error(req, 405, "Method Not Allowed",
		    "method_not_allowed", "this endpoint does not accept that "
		    "method");
		return;
	}
	rt->rt_fn(req, arg != NULL);
}

/* ---- controller answers ---- */

static int
frontend_recv_ready(struct peer *p, struct msg *m, struct json_object *o)
{
	struct pending		*pd;
	struct json_object	*servers, *reply;
	int			 ready;

	(void)p;
	if (json_get_bool(o, "ready", 0, &ready) == -1 ||
	    !json_object_object_get_ex(o, "servers", &servers) ||
	    !json_object_is_type(servers, json_type_array))
		return -1;
	if ((pd = pending_find(m->m_hdr.mh_id)) == NULL)
		return 0;	/* timed out or client gone */
	reply = json_object_new_object();
	json_object_object_add(reply, "status", json_object_new_string(ready ?
	    "ready" : "not ready"));
	json_object_object_add(reply, "servers", json_object_get(servers));
	if (ready)
		reply_json(pd->pd_req, 200, "OK", reply);
	else
		reply_json(pd->pd_req, 503, "Service Unavailable", reply);
	json_object_put(reply);
	pending_free(pd);
	return 0;
}

static const char *
status_reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 202:
		return "Accepted";
	case 204:
		return "No Content";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 406:
		return "Not Acceptable";
	case 409:
		return "Conflict";
	case 413:
		return "Payload Too Large";
	case 422:
		return "Unprocessable Content";
	case 429:
		return "Too Many Requests";
	case 500:
		return "Internal Server Error";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	default:
		return "Error";
	}
}

/*
 * The session part of an answer: {id, max_age} to set the cookie or
 * {clear:true} to drop it, and nothing else.  id NULL means clear.
 */
static int
session_field(struct json_object *s, const char **id, int64_t *max_age)
{
	struct json_object_iterator	 it, end;
	const char			*key;
	int				 clear = 0;

	if (!json_object_is_type(s, json_type_object))
		return -1;
	it = json_object_iter_begin(s);
	end = json_object_iter_end(s);
	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		key = json_object_iter_peek_name(&it);
		if (strcmp(key, "id") != 0 && strcmp(key, "max_age") != 0 &&
		    strcmp(key, "clear") != 0)
			return -1;
	}
	*max_age = 0;
	if (json_get_bool(s, "clear", 1, &clear) == -1 ||
	    json_get_str(s, "id", WEB_TOKEN_LEN, 1, id) == -1 ||
	    json_get_int(s, "max_age", 1, SESSION_MAX_AGE_MAX, 1, max_age) ==
	    -1)
		return -1;
	if (clear)
		return *id == NULL && *max_age == 0 ? 0 : -1;
	return *id != NULL && *max_age > 0 && websec_token_valid(*id) ? 0 :
	    -1;
}

/*
 * The cookie is made here, where the listener is known: the controller
 * may set one only in a successful login's answer, clear one in any.
 */
static int
session_cookie_set(struct pending *pd, int64_t status, const char *id,
    int64_t max_age)
{
	char hdr[SET_COOKIE_MAX];

	if (id != NULL && (!pd->pd_login || status != 200))
		return -1;
	if (websec_set_cookie(hdr, sizeof(hdr), pd->pd_tls, id, max_age) == -1)
		return -1;
	evhttp_add_header(evhttp_request_get_output_headers(pd->pd_req),
	    "Set-Cookie", hdr);
	explicit_bzero(hdr, sizeof(hdr));
	return 0;
}

static int
frontend_recv_http_rep(struct peer *p, struct msg *m, struct json_object *o)
{
	struct evkeyvalq	*h;
	struct json_object	*body = NULL, *session = NULL, *mcp = NULL;
	struct pending		*pd;
	const char		*sid = NULL;
	int64_t			 status, max_age = 0;
	int			 stream = 0;

	(void)p;
	if (json_get_int(o, "status", 200, 599, 0, &status) == -1 ||
	    json_get_bool(o, "stream", 1, &stream) == -1 ||
	    (json_object_object_get_ex(o, "body", &body) &&
	    !json_object_is_type(body, json_type_object)) ||
	    (json_object_object_get_ex(o, "session", &session) &&
	    (stream || session_field(session, &sid, &max_age) == -1)))
		return -1;
	if ((pd = pending_find(m->m_hdr.mh_id)) == NULL || pd->pd_streaming)
		return pd == NULL ? 0 : -1;
	if (session != NULL && session_cookie_set(pd, status, sid, max_age) ==
	    -1)
		return -1;
	if (json_object_object_get_ex(o, "mcp", &mcp) &&
	    mcp_rep_headers(pd, mcp) == -1)
		return -1;
	if (!stream && pd->pd_metrics && status == 200 && body != NULL &&
	    json_object_is_type(json_object_object_get(body, "text"),
	    json_type_string)) {
		reply_metrics(pd->pd_req, json_object_get_string(
		    json_object_object_get(body, "text")));
		pending_free(pd);
		return 0;
	}
	if (!stream) {
		if (status == 401)
			www_authenticate(pd->pd_req, pd->pd_tls, pd->pd_mcp);
		if (body == NULL && pd->pd_mcp) {
			reply_empty(pd->pd_req, (int)status);
			pending_free(pd);
			return 0;
		}
		if (body == NULL)
			body = json_object_new_object();
		else
			json_object_get(body);
		reply_json(pd->pd_req, (int)status, status_reason(status), body);
		json_object_put(body);
		pending_free(pd);
		return 0;
	}
	h = evhttp_request_get_output_headers(pd->pd_req);
	evhttp_add_header(h, "Content-Type", "text/event-stream");
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_add_header(h, "X-Accel-Buffering", "no");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_send_reply_start(pd->pd_req, (int)status,
	    status_reason(status));
	pd->pd_streaming = 1;
	metric_add(fe.m_streams, 1);
	pending_touch(pd);
	return 0;
}

/* A client that does not read its stream is dropped, not buffered for. */
static int
client_too_slow(struct pending *pd)
{
	struct evhttp_connection	*evcon;
	struct bufferevent		*bev;

	evcon = evhttp_request_get_connection(pd->pd_req);
	bev = evhttp_connection_get_bufferevent(evcon);
	return bev != NULL && evbuffer_get_length(bufferevent_get_output(bev)) >
	    STREAM_OUTPUT_MAX;
}

static int
frontend_recv_http_event(struct peer *p, struct msg *m, struct json_object *o)
{
	struct json_object	*data = NULL;
	struct pending		*pd;
	struct evbuffer		*buf;
	const char		*event, *c, *evid = NULL;

	(void)p;
	if (json_get_str(o, "event", 32, 0, &event) == -1 ||
	    json_get_str(o, "id", 64, 1, &evid) == -1 ||
	    (evid != NULL && strspn(evid, "0123456789-") != strlen(evid)))
		return -1;
	for (c = event; *c != '\0'; c++)
		if ((*c < 'a' || *c > 'z') && *c != '_')
			return -1;
	if ((pd = pending_find(m->m_hdr.mh_id)) == NULL)
		return 0;
	/* MCP streams have event ids, and keep-alives without data. */
	if (!pd->pd_streaming || (!json_object_object_get_ex(o, "data",
	    &data) && (!pd->pd_mcp || strcmp(event, "keepalive") != 0)) ||
	    (evid != NULL && !pd->pd_mcp))
		return -1;
	if (client_too_slow(pd)) {
		log_warnx("dropping a client that does not read its stream");
		evhttp_connection_free(evhttp_request_get_connection(
		    pd->pd_req));	/* closecb cancels the turn */
		return 0;
	}
	if ((buf = evbuffer_new()) == NULL)
		fatal("evbuffer_new");
	/* JSON from json-c holds no raw newline: one data line is enough. */
	if (data == NULL)
		evbuffer_add_printf(buf, ":\n\n");
	else
		evbuffer_add_printf(buf, "%s%s%sevent: %s\ndata: %s\n\n",
		    evid != NULL ? "id: " : "", evid != NULL ? evid : "",
		    evid != NULL ? "\n" : "", event,
		    json_object_to_json_string_ext(data,
		    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	evhttp_send_reply_chunk(pd->pd_req, buf);
	evbuffer_free(buf);
	pending_touch(pd);
	return 0;
}

static int
frontend_recv_http_end(struct peer *p, struct msg *m, struct json_object *o)
{
	struct pending *pd;

	(void)p;
	(void)o;
	if ((pd = pending_find(m->m_hdr.mh_id)) == NULL)
		return 0;
	if (!pd->pd_streaming)
		return -1;
	pending_end_stream(pd, 0);
	return 0;
}

/* ---- from the parent ---- */

static int
frontend_recv_peer(struct peer *p, struct msg *m, struct json_object *o)
{
	(void)p;
	return child_attach_sibling(&fe.controller, m, o, "controller",
	    PROC_CONTROLLER, frontend_dispatch_controller);
}

/* A TLS context from PEM text: leaf first, then any chain. */
static SSL_CTX *
tls_context(const char *cert, const char *key)
{
	SSL_CTX		*ctx;
	BIO		*bio = NULL;
	X509		*x = NULL;
	EVP_PKEY	*pk = NULL;
	int		 ok = 0;

	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL ||
	    !SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION))
		goto done;
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION |
	    SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
	if ((bio = BIO_new_mem_buf(cert, -1)) == NULL ||
	    (x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) == NULL ||
	    SSL_CTX_use_certificate(ctx, x) != 1)
		goto done;
	X509_free(x);
	while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL)
		if (SSL_CTX_add0_chain_cert(ctx, x) != 1)
			goto done;
	ERR_clear_error();	/* the end of the chain reads as an error */
	BIO_free(bio);
	if ((bio = BIO_new_mem_buf(key, -1)) == NULL ||
	    (pk = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL)) == NULL ||
	    SSL_CTX_use_PrivateKey(ctx, pk) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1)
		goto done;
	ok = 1;
 done:
	EVP_PKEY_free(pk);
	BIO_free(bio);
	if (!ok) {
		log_warnx("tls: %s", ERR_reason_error_string(ERR_get_error()));
		SSL_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

/*
 * NULL would make evhttp build a plain bufferevent of its own, and serve
 * plain HTTP on a TLS listener: conn_new ends the process instead.
 */
static struct bufferevent *
tls_bevcb(struct event_base *base, void *arg)
{
	struct bufferevent	*bev = NULL;
	SSL			*ssl;

	if ((ssl = SSL_new(arg)) != NULL && (bev =
	    bufferevent_openssl_socket_new(base, -1, ssl,
	    BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE)) == NULL)
		SSL_free(ssl);
	return conn_new(bev);
}

/* What evhttp makes itself: it closes the socket. */
static struct bufferevent *
plain_bevcb(struct event_base *base, void *arg)
{
	(void)arg;
	return conn_new(bufferevent_socket_new(base, -1, 0));
}

static int
frontend_recv_listen(struct peer *p, struct msg *m, struct json_object *o)
{
	struct fe_listener	*fl;
	const char		*addr, *cert = NULL, *key = NULL;
	int64_t			 port;
	int			 tls = 0;

	(void)p;
	if (fe.nlisten == FRONTEND_MAX_LISTENERS ||
	    json_get_str(o, "addr", 63, 0, &addr) == -1 ||
	    json_get_int(o, "port", 1, 65535, 0, &port) == -1 ||
	    json_get_bool(o, "tls", 0, &tls) == -1 ||
	    (tls && (json_get_str(o, "cert", 1024 * 1024, 0, &cert) == -1 ||
	    json_get_str(o, "key", 1024 * 1024, 0, &key) == -1))) {
		close(m->m_fd);
		return -1;
	}
	fl = &fe.listeners[fe.nlisten++];
	fl->fl_fd = m->m_fd;
	snprintf(fl->fl_name, sizeof(fl->fl_name), "%s port %d%s", addr,
	    (int)port, tls ? " tls" : "");
	/* A TLS listener that cannot do TLS must not serve plain HTTP. */
	if (tls && (fl->fl_ctx = tls_context(cert, key)) == NULL)
		fatalx("listen on %s: cannot set up TLS", fl->fl_name);
	return 0;
}

static void
apply_limits(struct evhttp *http, const struct limits_conf *lm)
{
	struct timeval tv;

	tv.tv_sec = lm->lm_header_timeout_ms / 1000;
	tv.tv_usec = (lm->lm_header_timeout_ms % 1000) * 1000;
	/*
	 * evhttp refuses a longer body itself, before any handler runs, with
	 * an HTML page.  Above max-body it is ours to refuse, with JSON
	 * (body_ok); libevent's page is left for bodies over twice that.
	 */
	evhttp_set_max_body_size(http, lm->lm_max_body > BODY_CEILING_MAX / 2 ?
	    BODY_CEILING_MAX : (ev_ssize_t)(lm->lm_max_body * 2));
	evhttp_set_max_headers_size(http, FRONTEND_MAX_HEADERS);
	evhttp_set_timeout_tv(http, &tv);
}

static struct evhttp *
http_new(int tls)
{
	static int	 tls_mark;
	struct evhttp	*http;

	if ((http = evhttp_new(child_base())) == NULL)
		fatalx("evhttp_new");
	evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD |
	    EVHTTP_REQ_POST | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
	    EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
	evhttp_set_gencb(http, frontend_request, tls ? &tls_mark : NULL);
	if (!tls)
		evhttp_set_bevcb(http, plain_bevcb, NULL);
	return http;
}

/* Listeners arrive before the first configuration: build their servers. */
static int
frontend_configure(struct mcpbroker_conf *conf, int reload)
{
	struct fe_listener	*fl;
	size_t			 i;

	(void)reload;
	for (i = 0; i < fe.nlisten; i++) {
		fl = &fe.listeners[i];
		if (fl->fl_http == NULL && fl->fl_ctx == NULL) {
			if (fe.http == NULL)
				fe.http = http_new(0);
			fl->fl_http = fe.http;
		} else if (fl->fl_http == NULL) {
			fl->fl_http = http_new(1);
			evhttp_set_bevcb(fl->fl_http, tls_bevcb, fl->fl_ctx);
		}
		apply_limits(fl->fl_http, &conf->c_limits);
	}
	config_free(fe.conf);
	fe.conf = conf;
	return 0;
}

static void
frontend_start(void)
{
	size_t i;

	for (i = 0; i < fe.nlisten; i++) {
		if (evhttp_accept_socket_with_handle(fe.listeners[i].fl_http,
		    fe.listeners[i].fl_fd) == NULL)
			fatalx("cannot accept on %s", fe.listeners[i].fl_name);
		log_info("listening on %s", fe.listeners[i].fl_name);
	}
}

int
frontend_main(void)
{
	static const struct child_hooks hooks = {
		frontend_configure, frontend_start
	};

	TAILQ_INIT(&fe.pending);
	TAILQ_INIT(&fe.conns);
	fe.m_requests = metric_new(METRIC_COUNTER,
	    "mcpbroker_http_requests_total", "HTTP requests answered, by the "
	    "route they matched (none: no route, or refused before routing) "
	    "and status.", "route,status", NULL, 0);
	fe.m_streams = metric_new(METRIC_GAUGE, "mcpbroker_sse_streams_open",
	    "Event streams being sent to clients.", "", NULL, 0);
	return child_main(PROC_FRONTEND, "frontend", frontend_dispatch_parent,
	    &hooks);
}
