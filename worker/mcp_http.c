#include <sys/queue.h>

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <json-c/json.h>
#include <openssl/evp.h>

#include "common/http_client.h"
#include "common/log.h"
#include "common/sse.h"
#include "common/util.h"
#include "worker/mcp.h"
#include "worker/mcp_http.h"
#include "worker/mcp_params.h"

#define MAX_HEADERS		24
#define SSE_LINE_MAX		MCP_MAX_MESSAGE
#define RESUME_MAX		5
#define RESUME_DEFAULT_MS	1000
#define STREAM_IDLE_MS		(24 * 3600 * 1000)	/* GET streams */
#define QUEUE_MAX		64	/* messages before the SSE endpoint */

/* One HTTP request of ours and what its response has told us so far. */
struct hreq {
	TAILQ_ENTRY(hreq)	 hr_entry;
	struct mcp_http		*hr_t;
	struct http_request	*hr_req;
	int64_t			 hr_id;		/* the JSON-RPC request, or -1 */
	int			 hr_get;	/* a GET event stream */
	int			 hr_status;
	int			 hr_sse;	/* text/event-stream response */
	int			 hr_answered;	/* response to hr_id seen */
	struct evbuffer		*hr_body;	/* JSON response */
	struct sse_parser	*hr_parser;
	unsigned int		 hr_resumes;
	struct event		*hr_timer;	/* resume after `retry` */
	int			 hr_close;	/* resumed and answered: end it */
};
TAILQ_HEAD(hreq_list, hreq);

struct queued {
	TAILQ_ENTRY(queued)	 q_entry;
	char			*q_json;
	size_t			 q_len;
	int64_t			 q_id;
};
TAILQ_HEAD(queued_list, queued);

struct mcp_http {
	struct event_base	*t_base;
	struct http_client	*t_client;
	struct mcp_session	*t_session;
	char			*t_name;
	char			*t_url;
	char			*t_origin;	/* scheme://host:port, for messages:
						   a path may hold a secret */
	char			*t_endpoint;	/* SSE: where to POST */
	enum mcp_http_kind	 t_kind;
	struct http_field	 t_headers[MAX_HEADERS];
	size_t			 t_nheaders;
	uint64_t		 t_connect_ms;
	uint64_t		 t_call_ms;
	enum mcp_era		 t_era;
	char			 t_version[16];
	char			*t_session_id;	/* Mcp-Session-Id (2025) */
	int			 t_get_refused;	/* 405: no GET stream */
	struct hreq		*t_get;
	struct hreq_list	 t_reqs;
	struct queued_list	 t_queue;
	size_t			 t_nqueued;
	char			 t_last_id[256];	/* SSE event id */
	int64_t			 t_retry_ms;
};

static unsigned int	busy;	/* requests alive in any transport */

static void	hreq_free(struct hreq *);
static int	open_get(struct mcp_http *, int64_t resume_for,
		    unsigned int resumes);

unsigned int
mcp_http_busy(void)
{
	return busy;
}

/* ---- delivering what arrives ---- */

/* Whether a message is the response to `id` (to know a stream is done). */
static int
is_response_to(const char *buf, size_t len, int64_t id)
{
	struct json_object	*o, *v;
	int			 yes = 0;

	if (id < 0 || (o = json_parse_object(buf, len)) == NULL)
		return 0;
	if (!json_object_object_get_ex(o, "method", &v) &&
	    json_object_object_get_ex(o, "id", &v) &&
	    json_object_is_type(v, json_type_int) &&
	    json_object_get_int64(v) == id)
		yes = 1;
	json_object_put(o);
	return yes;
}

static void
deliver(struct hreq *hr, const char *buf, size_t len)
{
	struct mcp_http *t = hr->hr_t;

	if (is_response_to(buf, len, hr->hr_id)) {
		hr->hr_answered = 1;
		/* A resumed stream has served its purpose. */
		if (hr->hr_get)
			hr->hr_close = 1;
	}
	if (t->t_session != NULL)
		mcp_session_input(t->t_session, buf, len);
}

/* How long url's scheme://host:port is; 0 if it has no scheme. */
static size_t
origin_len(const char *url)
{
	const char *p;

	if ((p = strstr(url, "://")) == NULL)
		return 0;
	return (size_t)(p - url) + 3 + strcspn(p + 3, "/?#");
}

/* Same scheme, host and port: a server may not send us elsewhere. */
static int
same_origin(const char *a, const char *b)
{
	size_t na = origin_len(a), nb = origin_len(b);

	return na > 0 && na == nb && strncasecmp(a, b, na) == 0;
}

/* The 2024-11-05 `endpoint` event: a URI, usually relative. */
static void
take_endpoint(struct mcp_http *t, const char *data)
{
	char *url;

	if (data[0] == '/') {
		if (asprintf(&url, "%s%s", t->t_origin, data) == -1)
			fatal("asprintf");
	} else if ((url = strdup(data)) == NULL)
		fatal("strdup");
	if (!same_origin(url, t->t_url) || strpbrk(url, " \r\n") != NULL) {
		log_warnx("server %s: refusing SSE endpoint %.200s (not the "
		    "server's own origin)", t->t_name, url);
		free(url);
		return;
	}
	free(t->t_endpoint);
	t->t_endpoint = url;
}

static void flush_queue(struct mcp_http *);

static void
on_sse_event(const struct sse_event *ev, void *arg)
{
	struct hreq	*hr = arg;
	struct mcp_http	*t = hr->hr_t;

	if (ev->ev_id[0] != '\0')
		snprintf(t->t_last_id, sizeof(t->t_last_id), "%s", ev->ev_id);
	if (ev->ev_retry_ms >= 0)
		t->t_retry_ms = ev->ev_retry_ms;
	if (t->t_kind == MCP_HTTP_SSE && strcmp(ev->ev_type, "endpoint") ==
	    0) {
		take_endpoint(t, ev->ev_data);
		flush_queue(t);
		return;
	}
	/* Priming events carry an id and no data. */
	if (strcmp(ev->ev_type, "message") != 0 || ev->ev_data_len == 0)
		return;
	deliver(hr, ev->ev_data, ev->ev_data_len);
}

/* An Mcp-Session-Id goes back in our headers: visible ASCII only. */
static int
session_id_ok(const char *s)
{
	size_t n;

	for (n = 0; s[n] != '\0'; n++)
		if ((unsigned char)s[n] < 0x21 || (unsigned char)s[n] > 0x7e)
			return 0;
	return n > 0 && n < 256;
}

static void
on_response(struct http_request *req, int status,
    const struct http_headers *h, void *arg)
{
	struct hreq	*hr = arg;
	struct mcp_http	*t = hr->hr_t;
	const char	*ct, *sid;

	(void)req;
	hr->hr_status = status;
	ct = http_headers_get(h, "content-type");
	log_debug("server %s: %s %d %s", t->t_name, hr->hr_get ? "GET" :
	    "POST", status, ct != NULL ? ct : "(no content type)");
	hr->hr_sse = ct != NULL && strncasecmp(ct, "text/event-stream", 17) ==
	    0;
	if (hr->hr_sse && (hr->hr_parser = sse_parser_new(SSE_LINE_MAX,
	    MCP_MAX_MESSAGE, on_sse_event, hr)) == NULL)
		fatal("sse_parser_new");
	/* A session is assigned by the answer to initialize (2025). */
	if ((sid = http_headers_get(h, "mcp-session-id")) != NULL &&
	    t->t_session_id == NULL && session_id_ok(sid))
		t->t_session_id = strdup(sid);
	else if (sid != NULL && t->t_session_id == NULL)
		log_warnx("server %s: ignoring a malformed Mcp-Session-Id",
		    t->t_name);
}

static void
on_body(struct http_request *req, const char *buf, size_t len, void *arg)
{
	struct hreq *hr = arg;

	if (hr->hr_sse) {
		if (sse_parser_feed(hr->hr_parser, buf, len) == 0) {
			if (hr->hr_close)
				hreq_free(hr);
		} else {
			log_warnx("server %s: event stream: %s", hr->hr_t->t_name,
			    sse_parser_error(hr->hr_parser));
			http_request_cancel(req);
			hr->hr_req = NULL;
			if (hr->hr_id >= 0 && hr->hr_t->t_session != NULL)
				mcp_session_request_failed(hr->hr_t->t_session,
				    hr->hr_id, MCP_ERR_PROTOCOL,
				    sse_parser_error(hr->hr_parser));
			hreq_free(hr);
		}
		return;
	}
	if (evbuffer_get_length(hr->hr_body) + len > MCP_MAX_MESSAGE) {
		http_request_cancel(req);
		hr->hr_req = NULL;
		if (hr->hr_id >= 0 && hr->hr_t->t_session != NULL)
			mcp_session_request_failed(hr->hr_t->t_session,
			    hr->hr_id, MCP_ERR_PROTOCOL, "the response is larger "
			    "than 16 MiB");
		hreq_free(hr);
		return;
	}
	evbuffer_add(hr->hr_body, buf, len);
}

/* ---- request completion ---- */

static void
fail(struct hreq *hr, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
fail(struct hreq *hr, int code, const char *fmt, ...)
{
	char	why[512];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (hr->hr_id >= 0 && hr->hr_t->t_session != NULL)
		mcp_session_request_failed(hr->hr_t->t_session, hr->hr_id, code,
		    why);
}

/* A JSON body, or a JSON-RPC error explaining an HTTP error status. */
static void
finish_json(struct hreq *hr)
{
	size_t	 len = evbuffer_get_length(hr->hr_body);
	char	*buf;

	if (len == 0)
		return;
	buf = (char *)evbuffer_pullup(hr->hr_body, len);
	if (hr->hr_status >= 400 && !is_response_to(buf, len, hr->hr_id))
		return;
	deliver(hr, buf, len);
}

static const char *
status_hint(int status)
{
	switch (status) {
	case 401:
		return "check its bearer-token or header lines";
	case 403:
		return "the server refused our credentials";
	case 404:
		return "check the url";
	default:
		return "";
	}
}

static void
after_status(struct hreq *hr)
{
	struct mcp_http *t = hr->hr_t;

	/* 2025: a 404 for our session means the server forgot it. */
	if (hr->hr_status == 404 && t->t_session_id != NULL &&
	    t->t_session != NULL) {
		mcp_session_transport_down(t->t_session, "the server ended the "
		    "MCP session (HTTP 404)");
		return;
	}
	if (!hr->hr_answered && hr->hr_id >= 0)
		fail(hr, hr->hr_status == 400 ? MCP_ERR_PROTOCOL :
		    MCP_ERR_TRANSPORT, "HTTP %d from %s%s%s", hr->hr_status,
		    t->t_origin, *status_hint(hr->hr_status) ? "; " : "",
		    status_hint(hr->hr_status));
}

static void
resume_cb(int fd, short ev, void *arg)
{
	struct mcp_http	*t;
	struct hreq	*hr = arg;

	(void)fd;
	(void)ev;
	t = hr->hr_t;
	hr->hr_resumes++;
	if (open_get(t, hr->hr_id, hr->hr_resumes) == -1)
		fail(hr, MCP_ERR_TRANSPORT, "the response stream broke and "
		    "could not be resumed");
	hreq_free(hr);
}

/*
 * A stream that ended before our answer: in the 2025 era we resume it with
 * GET and Last-Event-ID after the server's retry delay; from 2026-07-28 on,
 * streams are not resumable and the request has failed.
 */
static void
stream_ended_early(struct hreq *hr, const char *why)
{
	struct mcp_http	*t = hr->hr_t;
	struct timeval	 tv;
	int64_t		 ms;

	if (t->t_era == MCP_ERA_MODERN || t->t_last_id[0] == '\0' ||
	    hr->hr_resumes >= RESUME_MAX) {
		fail(hr, MCP_ERR_TRANSPORT, "the response stream ended before "
		    "the answer (%s)", why);
		hreq_free(hr);
		return;
	}
	ms = t->t_retry_ms >= 0 ? t->t_retry_ms : RESUME_DEFAULT_MS;
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	hr->hr_req = NULL;
	if ((hr->hr_timer = evtimer_new(t->t_base, resume_cb, hr)) == NULL)
		fatalx("evtimer_new");
	evtimer_add(hr->hr_timer, &tv);
}

static void
get_ended(struct hreq *hr, int err, const char *why)
{
	struct mcp_http *t = hr->hr_t;

	if (t->t_get == hr)
		t->t_get = NULL;
	if (hr->hr_status == 405 || hr->hr_status == 404 ||
	    hr->hr_status == 400)
		t->t_get_refused = 1;
	/* The legacy SSE transport lives and dies with its stream. */
	if (t->t_kind == MCP_HTTP_SSE && t->t_session != NULL) {
		char msg[300];

		snprintf(msg, sizeof(msg), "the SSE stream from %s ended: %s",
		    t->t_origin, err != 0 ? why : hr->hr_status >= 300 ?
		    "bad status" : "closed by the server");
		if (hr->hr_status >= 300)
			snprintf(msg, sizeof(msg), "GET from %s: HTTP %d%s%s",
			    t->t_origin, hr->hr_status,
			    *status_hint(hr->hr_status) ? "; " : "",
			    status_hint(hr->hr_status));
		hreq_free(hr);
		mcp_session_transport_down(t->t_session, msg);
		return;
	}
	if (hr->hr_id >= 0 && !hr->hr_answered) {
		stream_ended_early(hr, err != 0 ? why : "closed");
		return;
	}
	hreq_free(hr);
}

static void
on_done(struct http_request *req, int err, const char *why, void *arg)
{
	struct hreq *hr = arg;

	(void)req;
	hr->hr_req = NULL;
	if (hr->hr_get) {
		get_ended(hr, err, why);
		return;
	}
	if (err != 0) {
		if (hr->hr_sse && !hr->hr_answered && hr->hr_status == 200) {
			stream_ended_early(hr, why);
			return;
		}
		fail(hr, err == HTTP_ERR_TIMEOUT ? MCP_ERR_TIMEOUT :
		    MCP_ERR_TRANSPORT, "%s", why);
		hreq_free(hr);
		return;
	}
	if (!hr->hr_sse)
		finish_json(hr);
	if (hr->hr_status >= 300)
		after_status(hr);
	else if (hr->hr_sse && !hr->hr_answered && hr->hr_id >= 0) {
		stream_ended_early(hr, "closed");
		return;
	} else if (!hr->hr_answered && hr->hr_id >= 0 && hr->hr_status != 202)
		fail(hr, MCP_ERR_PROTOCOL, "HTTP %d without an answer",
		    hr->hr_status);
	hreq_free(hr);
}

static const struct http_callbacks callbacks = {
	on_response, on_body, on_done
};

/* ---- sending ---- */

static struct hreq *
hreq_new(struct mcp_http *t, int64_t id)
{
	struct hreq *hr;

	if ((hr = calloc(1, sizeof(*hr))) == NULL ||
	    (hr->hr_body = evbuffer_new()) == NULL)
		fatal("calloc");
	hr->hr_t = t;
	hr->hr_id = id;
	TAILQ_INSERT_TAIL(&t->t_reqs, hr, hr_entry);
	busy++;
	return hr;
}

static void
hreq_free(struct hreq *hr)
{
	TAILQ_REMOVE(&hr->hr_t->t_reqs, hr, hr_entry);
	if (hr->hr_t->t_get == hr)
		hr->hr_t->t_get = NULL;
	http_request_cancel(hr->hr_req);
	if (hr->hr_timer != NULL)
		event_free(hr->hr_timer);
	evbuffer_free(hr->hr_body);
	sse_parser_free(hr->hr_parser);
	free(hr);
	busy--;
}

static void
add_header(struct http_field *h, size_t *n, const char *name,
    const char *value)
{
	if (*n < MAX_HEADERS && value != NULL) {
		h[*n].hf_name = name;
		h[*n].hf_value = value;
		(*n)++;
	}
}

/* x-mcp-header: the call's annotated arguments, mirrored into headers. */
static void
add_param_headers(struct mcp_http *t, const struct mcp_out *out,
    struct mcp_param_header *ph, struct http_field *h, size_t *n)
{
	struct json_object	*schema, *args;
	size_t			 i, count;

	if (out->mo_params == NULL || out->mo_name == NULL ||
	    t->t_session == NULL || (schema = mcp_session_tool_schema(
	    t->t_session, out->mo_name)) == NULL ||
	    !json_object_object_get_ex(out->mo_params, "arguments", &args))
		return;
	count = mcp_param_headers(schema, args, ph, MCP_PARAM_HEADERS_MAX);
	for (i = 0; i < count; i++)
		add_header(h, n, ph[i].ph_name, ph[i].ph_value);
}

static int
post(struct mcp_http *t, const struct mcp_out *out, char *why, size_t whylen)
{
	struct http_request_opts	 ro;
	struct http_field		 h[MAX_HEADERS * 2];
	struct mcp_param_header		 ph[MCP_PARAM_HEADERS_MAX];
	char				 namebuf[512];
	const char			*method = out->mo_method;
	struct hreq			*hr;
	size_t				 n = 0, i;
	int				 initialize = method != NULL &&
					    strcmp(method, "initialize") == 0;

	add_header(h, &n, "Content-Type", "application/json");
	add_header(h, &n, "Accept", "application/json, text/event-stream");
	if (t->t_version[0] != '\0' && !initialize)
		add_header(h, &n, "MCP-Protocol-Version", t->t_version);
	if (t->t_session_id != NULL && !initialize)
		add_header(h, &n, "Mcp-Session-Id", t->t_session_id);
	if (t->t_era == MCP_ERA_MODERN && method != NULL) {
		add_header(h, &n, "Mcp-Method", method);
		if (out->mo_name != NULL) {
			(void)mcp_header_value(out->mo_name,
			    strlen(out->mo_name), namebuf, sizeof(namebuf));
			add_header(h, &n, "Mcp-Name", namebuf);
			add_param_headers(t, out, ph, h, &n);
		}
	}
	for (i = 0; i < t->t_nheaders; i++)
		add_header(h, &n, t->t_headers[i].hf_name,
		    t->t_headers[i].hf_value);
	memset(&ro, 0, sizeof(ro));
	ro.ro_method = "POST";
	ro.ro_url = t->t_kind == MCP_HTTP_SSE ? t->t_endpoint : t->t_url;
	ro.ro_headers = h;
	ro.ro_nheaders = n;
	ro.ro_body = out->mo_json;
	ro.ro_body_len = out->mo_len;
	ro.ro_connect_timeout_ms = t->t_connect_ms;
	ro.ro_idle_timeout_ms = out->mo_stream ? STREAM_IDLE_MS : t->t_call_ms;
	hr = hreq_new(t, out->mo_id);
	if ((hr->hr_req = http_request_start(t->t_client, &ro, &callbacks,
	    hr)) == NULL) {
		snprintf(why, whylen, "%s", http_client_error(t->t_client));
		hreq_free(hr);
		return -1;
	}
	return 0;
}

/* GET an event stream: the 2025 standalone one, a resume, or SSE's. */
static int
open_get(struct mcp_http *t, int64_t resume_for, unsigned int resumes)
{
	struct http_request_opts	 ro;
	struct http_field		 h[MAX_HEADERS * 2];
	struct hreq			*hr;
	size_t				 n = 0, i;

	add_header(h, &n, "Accept", "text/event-stream");
	if (t->t_version[0] != '\0' && t->t_kind == MCP_HTTP_STREAMABLE)
		add_header(h, &n, "MCP-Protocol-Version", t->t_version);
	if (t->t_session_id != NULL)
		add_header(h, &n, "Mcp-Session-Id", t->t_session_id);
	if (resume_for >= 0 && t->t_last_id[0] != '\0')
		add_header(h, &n, "Last-Event-ID", t->t_last_id);
	for (i = 0; i < t->t_nheaders; i++)
		add_header(h, &n, t->t_headers[i].hf_name,
		    t->t_headers[i].hf_value);
	memset(&ro, 0, sizeof(ro));
	ro.ro_method = "GET";
	ro.ro_url = t->t_url;
	ro.ro_headers = h;
	ro.ro_nheaders = n;
	ro.ro_connect_timeout_ms = t->t_connect_ms;
	ro.ro_idle_timeout_ms = STREAM_IDLE_MS;
	hr = hreq_new(t, resume_for);
	hr->hr_get = 1;
	hr->hr_resumes = resumes;
	if ((hr->hr_req = http_request_start(t->t_client, &ro, &callbacks,
	    hr)) == NULL) {
		hreq_free(hr);
		return -1;
	}
	if (resume_for < 0 && t->t_get == NULL)
		t->t_get = hr;
	return 0;
}

static void
flush_queue(struct mcp_http *t)
{
	struct queued	*q;
	char		 why[256];

	struct mcp_out	 out;

	while (t->t_endpoint != NULL && (q = TAILQ_FIRST(&t->t_queue)) !=
	    NULL) {
		TAILQ_REMOVE(&t->t_queue, q, q_entry);
		t->t_nqueued--;
		memset(&out, 0, sizeof(out));
		out.mo_json = q->q_json;
		out.mo_len = q->q_len;
		out.mo_id = q->q_id;
		if (post(t, &out, why, sizeof(why)) == -1 && q->q_id >= 0 &&
		    t->t_session != NULL)
			mcp_session_request_failed(t->t_session, q->q_id,
			    MCP_ERR_TRANSPORT, why);
		free(q->q_json);
		free(q);
	}
}

static int
http_send(void *arg, const struct mcp_out *out, char *why, size_t whylen)
{
	struct mcp_http	*t = arg;
	struct queued	*q;

	if (t->t_kind == MCP_HTTP_SSE && t->t_endpoint == NULL) {
		/* Until the stream names the endpoint, messages wait. */
		if (t->t_nqueued >= QUEUE_MAX || (q = calloc(1, sizeof(*q))) ==
		    NULL || (q->q_json = malloc(out->mo_len)) == NULL) {
			snprintf(why, whylen, "no SSE endpoint from the server "
			    "yet");
			return -1;
		}
		memcpy(q->q_json, out->mo_json, out->mo_len);
		q->q_len = out->mo_len;
		q->q_id = out->mo_id;
		TAILQ_INSERT_TAIL(&t->t_queue, q, q_entry);
		t->t_nqueued++;
		return 0;
	}
	return post(t, out, why, whylen);
}

static void
http_cancel(void *arg, int64_t id)
{
	struct mcp_http	*t = arg;
	struct hreq	*hr, *next;

	/* Closing the stream is the cancellation from 2026-07-28 on. */
	TAILQ_FOREACH_SAFE(hr, &t->t_reqs, hr_entry, next)
		if (hr->hr_id == id)
			hreq_free(hr);
}

static void
http_era(void *arg, enum mcp_era era, const char *version)
{
	struct mcp_http *t = arg;

	t->t_era = era;
	snprintf(t->t_version, sizeof(t->t_version), "%s", version);
	/* A 2025 server may push messages on a standalone GET stream. */
	if (era == MCP_ERA_LEGACY && t->t_kind == MCP_HTTP_STREAMABLE &&
	    t->t_session_id != NULL && t->t_get == NULL && !t->t_get_refused &&
	    mcp_session_state(t->t_session) == MCP_READY)
		(void)open_get(t, -1, 0);
}

static void
delete_done(struct http_request *req, int err, const char *why, void *arg)
{
	(void)req;
	(void)err;
	(void)why;
	(void)arg;
	busy--;
}

static const struct http_callbacks delete_callbacks = {
	NULL, NULL, delete_done
};

/* The session ends: a 2025 session is ended with DELETE, best effort. */
static void
http_free(void *arg)
{
	struct http_request_opts	 ro;
	struct http_field		 h[MAX_HEADERS * 2];
	struct mcp_http			*t = arg;
	struct queued			*q;
	size_t				 n = 0, i;

	t->t_session = NULL;
	while (!TAILQ_EMPTY(&t->t_reqs))
		hreq_free(TAILQ_FIRST(&t->t_reqs));
	while ((q = TAILQ_FIRST(&t->t_queue)) != NULL) {
		TAILQ_REMOVE(&t->t_queue, q, q_entry);
		free(q->q_json);
		free(q);
	}
	if (t->t_session_id != NULL && t->t_kind == MCP_HTTP_STREAMABLE) {
		add_header(h, &n, "Mcp-Session-Id", t->t_session_id);
		if (t->t_version[0] != '\0')
			add_header(h, &n, "MCP-Protocol-Version", t->t_version);
		for (i = 0; i < t->t_nheaders; i++)
			add_header(h, &n, t->t_headers[i].hf_name,
			    t->t_headers[i].hf_value);
		memset(&ro, 0, sizeof(ro));
		ro.ro_method = "DELETE";
		ro.ro_url = t->t_url;
		ro.ro_headers = h;
		ro.ro_nheaders = n;
		ro.ro_connect_timeout_ms = t->t_connect_ms;
		ro.ro_total_timeout_ms = 5000;
		if (http_request_start(t->t_client, &ro, &delete_callbacks,
		    NULL) != NULL)
			busy++;
	}
	for (i = 0; i < t->t_nheaders; i++) {
		free((char *)t->t_headers[i].hf_name);
		free((char *)t->t_headers[i].hf_value);
	}
	free(t->t_session_id);
	free(t->t_endpoint);
	free(t->t_url);
	free(t->t_origin);
	free(t->t_name);
	free(t);
}

const struct mcp_transport_ops mcp_http_ops = {
	.to_send = http_send,
	.to_cancel = http_cancel,
	.to_era = http_era,
	.to_free = http_free,
};

struct mcp_http *
mcp_http_new(struct event_base *base, struct http_client *client,
    const struct mcp_http_opts *o)
{
	struct mcp_http	*t;
	size_t		 i;

	if ((t = calloc(1, sizeof(*t))) == NULL ||
	    (t->t_name = strdup(o->ho_name)) == NULL ||
	    (t->t_url = strdup(o->ho_url)) == NULL ||
	    (t->t_origin = strndup(o->ho_url, origin_len(o->ho_url))) == NULL)
		fatal("calloc");
	t->t_base = base;
	t->t_client = client;
	t->t_kind = o->ho_kind;
	t->t_connect_ms = o->ho_connect_timeout_ms;
	t->t_call_ms = o->ho_call_timeout_ms;
	t->t_retry_ms = -1;
	TAILQ_INIT(&t->t_reqs);
	TAILQ_INIT(&t->t_queue);
	for (i = 0; i < o->ho_nheaders && i < MAX_HEADERS; i++) {
		t->t_headers[i].hf_name = strdup(o->ho_headers[i].hf_name);
		t->t_headers[i].hf_value = strdup(o->ho_headers[i].hf_value);
		if (t->t_headers[i].hf_name == NULL ||
		    t->t_headers[i].hf_value == NULL)
			fatal("strdup");
		t->t_nheaders++;
	}
	return t;
}

void
mcp_http_attach(struct mcp_http *t, struct mcp_session *s)
{
	t->t_session = s;
	if (t->t_kind == MCP_HTTP_SSE && open_get(t, -1, 0) == -1)
		log_warnx("server %s: cannot open the SSE stream: %s", t->t_name,
		    http_client_error(t->t_client));
}
