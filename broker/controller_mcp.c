/*
 * The broker as an MCP server: /mcp/TOOLSET, streamable HTTP.
 *
 * One endpoint serves both protocol eras, each request classified by its
 * own content.  A request whose params carry
 * _meta["io.modelcontextprotocol/protocolVersion"] is a 2026-07-28 one and
 * is served statelessly: nothing of it outlives its answer, so any broker
 * could take the next.  Anything else belongs to the initialize era
 * (2025-11-25, 2025-06-18, 2025-03-26): initialize opens a session
 * (Mcp-Session-Id, bound to the authenticated user), whose server-to-client
 * stream is a GET, whose event streams resume with Last-Event-ID, and which
 * DELETE ends.  The frontend has checked the HTTP side (one JSON object,
 * header syntax), the caller is authenticated and its Origin checked
 * before a request reaches us.
 *
 * What a client sees is the toolset: the tools its globs select that the
 * caller's policy lets it see, named PREFIX + TOOL by the toolset's `names`,
 * and the resources and prompts of its servers under resource and prompt
 * rules.  Every call is decided again with its arguments, on the trail
 * before it runs, and run by the server's worker with the caller's
 * identity.  There is no approval over MCP: a call a confirm rule decides
 * is refused, saying so.
 */
#include <sys/random.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <json-c/json.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "broker/config.h"
#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_mcp.h"
#include "broker/controller_metrics.h"
#include "broker/controller_store.h"
#include "broker/mcpbroker.h"
#include "broker/websec.h"
#include "common/log.h"
#include "common/util.h"
#include "policy/policy.h"

#define MODERN_VERSION		"2026-07-28"
#define META_VERSION		"io.modelcontextprotocol/protocolVersion"
#define META_SERVER_INFO	"io.modelcontextprotocol/serverInfo"
#define META_SUBSCRIPTION	"io.modelcontextprotocol/subscriptionId"
#define URI_SCHEME		"mcpbroker://"

#define SID_BYTES		24	/* 192 random bits */
#define SID_LEN			32	/* their base64url */
#define SESSIONS_MAX		4096
#define SESSIONS_PER_USER	32
#define SESSION_IDLE_MS		(30 * 60 * 1000)
#define TICK_MS			25000	/* keep-alives and expiry */
#define RING_EVENTS		256	/* replayable events per session */
#define RING_BYTES		(1024 * 1024)
#define RING_TOTAL		(64 * 1024 * 1024)	/* every session's */
#define REQS_PER_SESSION	64	/* in flight */
#define REQS_MAX		4096
#define PAGE_SIZE		100	/* tools per tools/list page */
#define PAGE_HOPS		8	/* empty backend pages skipped per list */
#define LIST_TTL_MS		60000	/* 2026-07-28 list freshness */
#define LISTEN_URIS_MAX		64
/* subscriptions/listen streams a user may hold open */
#define LISTENS_PER_USER	32
#define TOOL_NAME_MAX		128	/* MCP's limit on a tool's name */
#define URI_MAX			8192
#define CURSOR_MAX		4096

/* JSON-RPC's and MCP's error codes. */
#define RPC_PARSE		-32700
#define RPC_INVALID		-32600
#define RPC_NO_METHOD		-32601
#define RPC_PARAMS		-32602
#define RPC_INTERNAL		-32603
#define RPC_NO_SESSION		-32001
#define RPC_NO_RESOURCE		-32002
#define RPC_HEADER_MISMATCH	-32020
#define RPC_VERSION		-32022

#define AUDIT_KIND_READ		"resource_read"	/* a resource read, decided */
#define AUDIT_KIND_PROMPT	"prompt_get"	/* a prompt got, decided */

/* Initialize-era versions we speak, newest first. */
static const char *const legacy_versions[] = {
	"2025-11-25", "2025-06-18", "2025-03-26", NULL
};

/* One event of a session's stream, kept for Last-Event-ID. */
struct mcp_event {
	uint64_t		 ev_stream;
	uint64_t		 ev_seq;
	char			*ev_text;	/* the message, as sent */
	size_t			 ev_len;
};

/*
 * An event stream of a session: number 0 is the GET stream, the others
 * answer a POST.  Whoever receives it may change (resumption) or be
 * nobody for a while (the client reconnects).
 */
struct mcp_stream {
	TAILQ_ENTRY(mcp_stream)	 st_entry;
	uint64_t		 st_no;
	uint64_t		 st_http;	/* the HTTP request; 0: none */
	uint64_t		 st_seq;	/* events sent */
};
TAILQ_HEAD(mcp_stream_list, mcp_stream);

struct mcp_sess {
	TAILQ_ENTRY(mcp_sess)	 ms_entry;
	char			 ms_id[SID_LEN + 1];	/* secret */
	char			 ms_label[24];	/* not secret: logs, audit */
	char			 ms_user[65];
	char			 ms_tenant[65];
	char			 ms_toolset[NAME_MAX_LEN];
	char			 ms_version[16];
	uint64_t		 ms_used_ms;
	struct mcp_stream_list	 ms_streams;	/* the GET stream first */
	uint64_t		 ms_next_stream;
	struct mcp_event	 ms_ring[RING_EVENTS];
	size_t			 ms_ring_start;
	size_t			 ms_ring_n;
	size_t			 ms_ring_bytes;
};
TAILQ_HEAD(mcp_sess_list, mcp_sess);

struct mcp_req;
struct mcp_method {
	const char	*mm_name;
	int		 mm_eras;
	const char	*mm_name_param;	/* what Mcp-Name mirrors */
	void		(*mm_fn)(struct mcp_req *);
};
#define ERA_LEGACY	1
#define ERA_MODERN	2
#define ERA_BOTH	(ERA_LEGACY | ERA_MODERN)

/* A request in flight (or a subscriptions/listen stream). */
struct mcp_req {
	TAILQ_ENTRY(mcp_req)	 mr_entry;
	uint64_t		 mr_http;	/* the POST; 0: its client left */
	struct mcp_sess		*mr_sess;	/* NULL: stateless (2026) */
	struct mcp_stream	*mr_stream;	/* answering in a session */
	int			 mr_sse;	/* answering with events */
	int			 mr_streaming;	/* ... and they started */
	int			 mr_accept_sse;
	int			 mr_modern;
	int			 mr_listen;	/* subscriptions/listen */
	int			 mr_starting;	/* inside a start: no free */
	int			 mr_done;	/* answered while starting */
	const struct mcp_method	*mr_m;
	struct json_object	*mr_id;
	struct json_object	*mr_params;
	struct json_object	*mr_token;	/* progressToken */
	struct store_user	 mr_user;
	char			 mr_peer[64];
	char			 mr_toolset[NAME_MAX_LEN];
	/* the isolation keys */
	char			 mr_conv[40];
	char			 mr_owner[OWNER_MAX];
	char			 mr_server[NAME_MAX_LEN];
	char			*mr_name;	/* tool, URI or prompt, the
						 * server's own */
	uint64_t		 mr_call;	/* in flight on a worker */
	struct audit_async	*mr_intent;	/* being committed */
	int64_t			 mr_audit;	/* the intent row */
	struct audit_async	*mr_outcome;	/* being committed */
	struct json_object	*mr_held;	/* the answer, meanwhile */
	int			 mr_refused;
	char			*mr_why;
	uint64_t		 mr_start_ms;
	/* a list walked server by server */
	const char		*mr_key;	/* "resources", "prompts", ... */
	int			 mr_hops;
	struct json_object	*mr_items;
	/* subscriptions/listen: what it wants */
	int			 mr_tools_changed;
	int			 mr_prompts_changed;
	int			 mr_resources_changed;
};
TAILQ_HEAD(mcp_req_list, mcp_req);

/* Who wants updates of a resource: a session or a listen stream. */
struct mcp_sub {
	TAILQ_ENTRY(mcp_sub)	 sb_entry;
	struct mcp_sess		*sb_sess;
	struct mcp_req		*sb_listen;
	char			 sb_server[NAME_MAX_LEN];
	char			*sb_uri;	/* the server's */
	char			 sb_owner[OWNER_MAX];
	char			 sb_conv[40];
};
TAILQ_HEAD(mcp_sub_list, mcp_sub);

/* A toolset's tools as clients see them, sorted by name. */
struct mcp_tool {
	char			 mt_name[TOOL_NAME_MAX + 1];
	char			 mt_server[NAME_MAX_LEN];
	char			*mt_tool;
	struct json_object	*mt_def;	/* renamed, for tools/list */
};

struct tool_cache {
	TAILQ_ENTRY(tool_cache)	 tk_entry;
	char			 tk_toolset[NAME_MAX_LEN];
	uint64_t		 tk_gen;
	struct mcp_tool		*tk_tools;
	size_t			 tk_n;
};
TAILQ_HEAD(tool_cache_list, tool_cache);

static struct mcp_sess_list	sessions = TAILQ_HEAD_INITIALIZER(sessions);
static struct mcp_req_list	reqs = TAILQ_HEAD_INITIALIZER(reqs);
static struct mcp_sub_list	subs = TAILQ_HEAD_INITIALIZER(subs);
static struct tool_cache_list	caches = TAILQ_HEAD_INITIALIZER(caches);
static size_t			nsessions;
static size_t			nreqs;
static size_t			ring_total;	/* bytes kept, all sessions */
static uint64_t			tools_gen = 1;
static struct event		*ticker;

static const struct mcp_method *method_find(const char *);
static void	req_free(struct mcp_req *);
static void	sess_end(struct mcp_sess *, const char *why);

/* ---- small things ---- */

static void
caller_of(const struct store_user *u, struct policy_caller *pc,
    const char *roles[16], char buf[256])
{
	char *save, *r;

	snprintf(buf, 256, "%s", u->su_roles);
	memset(pc, 0, sizeof(*pc));
	pc->ps_user = u->su_name;
	pc->ps_tenant = u->su_tenant;
	pc->ps_roles = roles;
	for (r = strtok_r(buf, ",", &save); r != NULL && pc->ps_nroles < 16;
	    r = strtok_r(NULL, ",", &save))
		roles[pc->ps_nroles++] = r;
}

static int
decide(const struct mcp_req *mr, enum policy_kind kind, const char *id,
    struct json_object *args, struct policy_decision *pd)
{
	struct policy_caller	 pc;
	const char		*roles[16];
	char			 buf[256];

	caller_of(&mr->mr_user, &pc, roles, buf);
	policy_decide_kind(&controller_conf()->c_rules, kind, &pc, id, args,
	    monotonic_ms(), pd);
	return pd->pd_action;
}

static int
legacy_version(const char *v)
{
	size_t i;

	for (i = 0; legacy_versions[i] != NULL; i++)
		if (strcmp(v, legacy_versions[i]) == 0)
			return 1;
	return 0;
}

static char *
xstrdup(const char *s)
{
	char *d;

	if ((d = strdup(s)) == NULL)
		fatal("strdup");
	return d;
}

static const char *
obj_str(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (o == NULL || !json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

/* Standard base64 without newlines; out holds 4 * ((len + 2) / 3) + 1. */
static void
b64_encode(const void *in, size_t len, char *out)
{
	EVP_EncodeBlock((unsigned char *)out, in, (int)len);
}

/* -1 unless in is base64 whose bytes (NUL-terminated) fit in out. */
static int
b64_decode(const char *in, char *out, size_t outlen)
{
	size_t	len = strlen(in), pad = 0;
	int	n;

	if (len == 0 || len % 4 != 0 || len / 4 * 3 + 1 > outlen)
		return -1;
	if ((n = EVP_DecodeBlock((unsigned char *)out,
	    (const unsigned char *)in, (int)len)) < 0)
		return -1;
	while (pad < 2 && in[len - 1 - pad] == '=')
		pad++;
	out[n - (int)pad] = '\0';
	return memchr(out, '\0', (size_t)n - pad) == NULL ? 0 : -1;
}

/*
 * A cursor is ours to read back, theirs to hand over unopened: a JSON
 * object in base64.
 */
static char *
cursor_make(struct json_object *o)
{
	const char	*s = json_object_to_json_string_ext(o,
			    JSON_C_TO_STRING_PLAIN);
	size_t		 len = strlen(s);
	char		*out;

	if ((out = malloc(4 * ((len + 2) / 3) + 1)) == NULL)
		fatal("malloc");
	b64_encode(s, len, out);
	json_object_put(o);
	return out;
}

static void
add_cursor(struct json_object *r, struct json_object *o)
{
	char *c = cursor_make(o);

	json_object_object_add(r, "nextCursor", json_object_new_string(c));
	free(c);
}

static struct json_object *
cursor_read(const char *c)
{
	char buf[CURSOR_MAX];

	if (strlen(c) >= CURSOR_MAX || b64_decode(c, buf, sizeof(buf)) == -1)
		return NULL;
	return json_parse_object(buf, strlen(buf));
}

/* ---- JSON-RPC messages ---- */

static struct json_object *
rpc_msg(struct json_object *id)
{
	struct json_object *m = json_object_new_object();

	json_object_object_add(m, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(m, "id", id != NULL ? json_object_get(id) :
	    NULL);
	return m;
}

static struct json_object *
rpc_error(struct json_object *id, int code, struct json_object *data,
    const char *fmt, va_list ap)
{
	struct json_object	*m = rpc_msg(id), *e;
	char			 msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	e = json_object_new_object();
	json_object_object_add(e, "code", json_object_new_int(code));
	json_object_object_add(e, "message", json_object_new_string(msg));
	if (data != NULL)
		json_object_object_add(e, "data", data);
	json_object_object_add(m, "error", e);
	return m;
}

static struct json_object *
notification(const char *method, struct json_object *params)
{
	struct json_object *m = json_object_new_object();

	json_object_object_add(m, "jsonrpc", json_object_new_string("2.0"));
	json_object_object_add(m, "method", json_object_new_string(method));
	json_object_object_add(m, "params", params != NULL ? params :
	    json_object_new_object());
	return m;
}

/* ---- to the frontend ---- */

static void
http_reply(uint64_t http, int status, struct json_object *body,
    const char *session)
{
	struct json_object *o = json_object_new_object(), *x;

	json_object_object_add(o, "status", json_object_new_int(status));
	if (body != NULL)
		json_object_object_add(o, "body", body);
	x = json_object_new_object();
	if (session != NULL)
		json_object_object_add(x, "session",
		    json_object_new_string(session));
	json_object_object_add(o, "mcp", x);
	api_send(MSG_HTTP_REP, http, o);
}

static void
http_stream_start(uint64_t http)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "status", json_object_new_int(200));
	json_object_object_add(o, "stream", json_object_new_boolean(1));
	json_object_object_add(o, "mcp", json_object_new_object());
	api_send(MSG_HTTP_REP, http, o);
}

/*
 * A message already serialised (a session's events are, for the ring):
 * it goes to the frontend as that text, not serialised a second time.
 */
static struct json_object *
json_text(const char *text)
{
	struct json_object	*o = json_object_new_string("");
	char			*copy;

	if ((copy = strdup(text)) == NULL)
		fatal("strdup");
	json_object_set_serializer(o, json_object_userdata_to_json_string,
	    copy, json_object_free_userdata);
	return o;
}

/* data: a message, or its text (msg NULL); neither: a keepalive. */
static void
http_event(uint64_t http, struct json_object *msg, const char *text,
    const char *evid)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "event", json_object_new_string(
	    msg != NULL || text != NULL ? "message" : "keepalive"));
	if (msg != NULL)
		json_object_object_add(o, "data", json_object_get(msg));
	else if (text != NULL)
		json_object_object_add(o, "data", json_text(text));
	if (evid != NULL)
		json_object_object_add(o, "id", json_object_new_string(evid));
	api_send(MSG_HTTP_EVENT, http, o);
}

static void
http_end(uint64_t http)
{
	api_send(MSG_HTTP_END, http, json_object_new_object());
}

static void
http_rpc_error(uint64_t http, int status, struct json_object *id, int code,
    struct json_object *data, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* An error before any request of ours exists. */
static void
http_rpc_error(uint64_t http, int status, struct json_object *id, int code,
    struct json_object *data, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	http_reply(http, status, rpc_error(id, code, data, fmt, ap), NULL);
	va_end(ap);
}

/* ---- sessions: streams and their replay ring ---- */

static void
ring_drop(struct mcp_sess *ms)
{
	struct mcp_event *ev = &ms->ms_ring[ms->ms_ring_start];

	free(ev->ev_text);
	ev->ev_text = NULL;
	ms->ms_ring_bytes -= ev->ev_len;
	ring_total -= ev->ev_len;
	ms->ms_ring_start = (ms->ms_ring_start + 1) % RING_EVENTS;
	ms->ms_ring_n--;
}

/*
 * Kept for a client that lost its stream; the oldest go first.  Memory
 * is bounded per session and for all: past that, an event is not kept and
 * a client that resumes will miss it.
 */
static void
ring_add(struct mcp_sess *ms, uint64_t stream, uint64_t seq,
    const char *text, size_t len)
{
	struct mcp_event	*ev;

	if (len > RING_BYTES)
		return;
	while (ms->ms_ring_n > 0 && (ms->ms_ring_n == RING_EVENTS ||
	    ms->ms_ring_bytes + len > RING_BYTES ||
	    ring_total + len > RING_TOTAL))
		ring_drop(ms);
	if (ring_total + len > RING_TOTAL)
		return;
	ev = &ms->ms_ring[(ms->ms_ring_start + ms->ms_ring_n) % RING_EVENTS];
	ev->ev_stream = stream;
	ev->ev_seq = seq;
	if ((ev->ev_text = strdup(text)) == NULL)
		fatal("strdup");
	ev->ev_len = len;
	ms->ms_ring_n++;
	ms->ms_ring_bytes += len;
	ring_total += len;
}

static void
event_id(uint64_t stream, uint64_t seq, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRIu64 "-%" PRIu64, stream, seq);
}

/* One event on a session's stream: numbered, kept, sent if anyone hears. */
static void
stream_send(struct mcp_sess *ms, struct mcp_stream *st,
    struct json_object *msg)
{
	const char	*text;
	size_t		 len;
	char		 evid[48];

	text = json_object_to_json_string_length(msg, JSON_C_TO_STRING_PLAIN,
	    &len);
	st->st_seq++;
	event_id(st->st_no, st->st_seq, evid, sizeof(evid));
	ring_add(ms, st->st_no, st->st_seq, text, len);
	if (st->st_http != 0)
		http_event(st->st_http, NULL, text, evid);
}

static struct mcp_stream *
stream_new(struct mcp_sess *ms, uint64_t http)
{
	struct mcp_stream *st;

	if ((st = calloc(1, sizeof(*st))) == NULL)
		fatal("calloc");
	st->st_no = ms->ms_next_stream++;
	st->st_http = http;
	TAILQ_INSERT_TAIL(&ms->ms_streams, st, st_entry);
	return st;
}

static void
stream_free(struct mcp_sess *ms, struct mcp_stream *st)
{
	TAILQ_REMOVE(&ms->ms_streams, st, st_entry);
	free(st);
}

static struct mcp_stream *
stream_find(struct mcp_sess *ms, uint64_t no)
{
	struct mcp_stream *st;

	TAILQ_FOREACH(st, &ms->ms_streams, st_entry)
		if (st->st_no == no)
			return st;
	return NULL;
}

/* What a client missed on stream no after event seq, from the ring. */
static void
stream_replay(struct mcp_sess *ms, uint64_t no, uint64_t seq, uint64_t http)
{
	struct mcp_event	*ev;
	char			 evid[48];
	size_t			 i;

	for (i = 0; i < ms->ms_ring_n; i++) {
		ev = &ms->ms_ring[(ms->ms_ring_start + i) % RING_EVENTS];
		if (ev->ev_stream != no || ev->ev_seq <= seq)
			continue;
		event_id(ev->ev_stream, ev->ev_seq, evid, sizeof(evid));
		http_event(http, NULL, ev->ev_text, evid);
	}
}

/* 192 random bits as base64url: the secret that names a session. */
static int
sid_new(char out[SID_LEN + 1])
{
	unsigned char	r[SID_BYTES];
	char		b[SID_LEN + 1];
	size_t		i;

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -1;
	b64_encode(r, sizeof(r), b);
	for (i = 0; i < SID_LEN; i++)
		out[i] = b[i] == '+' ? '-' : b[i] == '/' ? '_' : b[i];
	out[SID_LEN] = '\0';
	explicit_bzero(r, sizeof(r));
	explicit_bzero(b, sizeof(b));
	return 0;
}

static void
sess_touch(struct mcp_sess *ms)
{
	ms->ms_used_ms = monotonic_ms();
	/* Most recently used last: the eviction order. */
	TAILQ_REMOVE(&sessions, ms, ms_entry);
	TAILQ_INSERT_TAIL(&sessions, ms, ms_entry);
}

static void	tick(int, short, void *);

static void
ticker_start(void)
{
	struct timeval tv = { TICK_MS / 1000, (TICK_MS % 1000) * 1000 };

	if (ticker != NULL)
		return;
	if ((ticker = event_new(child_base(), -1, EV_PERSIST, tick, NULL)) ==
	    NULL)
		fatalx("event_new");
	evtimer_add(ticker, &tv);
}

/* A user is a name within a tenant. */
static int
sess_of(const struct mcp_sess *ms, const struct store_user *u)
{
	return store_user_is(u, ms->ms_user, ms->ms_tenant);
}

/*
 * A user keeps at most SESSIONS_PER_USER sessions and everyone together
 * SESSIONS_MAX: the least recently used goes to make room (an IDE that
 * restarts leaves its old sessions behind).
 */
static void
sess_make_room(const struct store_user *u)
{
	struct mcp_sess	*ms, *lru = NULL;
	size_t		 n = 0;

	TAILQ_FOREACH(ms, &sessions, ms_entry)
		if (sess_of(ms, u)) {
			if (lru == NULL)
				lru = ms;
			n++;
		}
	if (n >= SESSIONS_PER_USER)
		sess_end(lru, "the user opened too many sessions");
	if (nsessions >= SESSIONS_MAX)
		sess_end(TAILQ_FIRST(&sessions), "too many sessions");
}

static struct mcp_sess *
sess_new(const struct store_user *u, const char *toolset,
    const char *version)
{
	struct mcp_sess	*ms;
	unsigned char	 r[8];

	sess_make_room(u);
	if ((ms = calloc(1, sizeof(*ms))) == NULL)
		fatal("calloc");
	if (sid_new(ms->ms_id) == -1 || getrandom(r, sizeof(r), 0) !=
	    (ssize_t)sizeof(r)) {
		free(ms);
		return NULL;
	}
	snprintf(ms->ms_label, sizeof(ms->ms_label), "mcp-%02x%02x%02x%02x"
	    "%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4], r[5], r[6],
	    r[7]);
	snprintf(ms->ms_user, sizeof(ms->ms_user), "%s", u->su_name);
	snprintf(ms->ms_tenant, sizeof(ms->ms_tenant), "%s", u->su_tenant);
	snprintf(ms->ms_toolset, sizeof(ms->ms_toolset), "%s", toolset);
	snprintf(ms->ms_version, sizeof(ms->ms_version), "%s", version);
	TAILQ_INIT(&ms->ms_streams);
	(void)stream_new(ms, 0);	/* the GET stream, nobody on it yet */
	ms->ms_used_ms = monotonic_ms();
	TAILQ_INSERT_TAIL(&sessions, ms, ms_entry);
	nsessions++;
	ticker_start();
	log_info("mcp: session %s for %s on toolset %s (%s)", ms->ms_label,
	    u->su_name, toolset, version);
	return ms;
}

/* The session named by sid, if the caller's; NULL otherwise. */
static struct mcp_sess *
sess_find(const char *sid, const struct store_user *u)
{
	struct mcp_sess *ms;

	if (strlen(sid) != SID_LEN)
		return NULL;
	TAILQ_FOREACH(ms, &sessions, ms_entry)
		if (CRYPTO_memcmp(ms->ms_id, sid, SID_LEN) == 0)
			return sess_of(ms, u) ? ms : NULL;
	return NULL;
}

/* Someone else's session id: a leak or a guess; on the trail either way. */
static int
sess_foreign(const char *sid, const struct store_user *u, const char *peer)
{
	struct json_object	*d;
	struct mcp_sess		*ms;

	if (strlen(sid) != SID_LEN)
		return 0;
	TAILQ_FOREACH(ms, &sessions, ms_entry)
		if (CRYPTO_memcmp(ms->ms_id, sid, SID_LEN) == 0)
			break;
	if (ms == NULL || sess_of(ms, u))
		return 0;
	log_warnx("mcp: %s of %s presented session %s of %s of %s; refused",
	    u->su_name, u->su_tenant, ms->ms_label, ms->ms_user,
	    ms->ms_tenant);
	d = json_object_new_object();
	json_object_object_add(d, "result", json_object_new_string("failure"));
	json_object_object_add(d, "reason", json_object_new_string(
	    "MCP session of another user"));
	json_object_object_add(d, "session", json_object_new_string(
	    ms->ms_label));
	if (peer != NULL && *peer != '\0')
		json_object_object_add(d, "address", json_object_new_string(
		    peer));
	(void)audit_append(AUDIT_KIND_AUTH, u->su_name, u->su_tenant, d);
	json_object_put(d);
	return 1;
}

static void	sub_drop(struct mcp_sub *);
static void	req_cancel(struct mcp_req *);

/*
 * The session ends: its streams close, its calls are cancelled, its
 * subscriptions go.
 */
static void
sess_end(struct mcp_sess *ms, const char *why)
{
	struct mcp_stream	*st;
	struct mcp_req		*mr, *rnext;
	struct mcp_sub		*sb, *snext;

	log_info("mcp: session %s of %s ended: %s", ms->ms_label, ms->ms_user,
	    why);
	TAILQ_FOREACH_SAFE(mr, &reqs, mr_entry, rnext)
		if (mr->mr_sess == ms) {
			if (mr->mr_http != 0 && !mr->mr_streaming) {
				http_rpc_error(mr->mr_http, 404, mr->mr_id,
				    RPC_NO_SESSION, NULL, "the session ended");
				mr->mr_http = 0;
			}
			req_cancel(mr);
		}
	TAILQ_FOREACH_SAFE(sb, &subs, sb_entry, snext)
		if (sb->sb_sess == ms)
			sub_drop(sb);
	while ((st = TAILQ_FIRST(&ms->ms_streams)) != NULL) {
		if (st->st_http != 0)
			http_end(st->st_http);
		stream_free(ms, st);
	}
	while (ms->ms_ring_n > 0)
		ring_drop(ms);
	TAILQ_REMOVE(&sessions, ms, ms_entry);
	nsessions--;
	explicit_bzero(ms->ms_id, sizeof(ms->ms_id));
	free(ms);
}

static int
sess_busy(const struct mcp_sess *ms)
{
	const struct mcp_stream	*st;
	const struct mcp_req	*mr;

	TAILQ_FOREACH(st, &ms->ms_streams, st_entry)
		if (st->st_http != 0)
			return 1;
	TAILQ_FOREACH(mr, &reqs, mr_entry)
		if (mr->mr_sess == ms)
			return 1;
	return 0;
}

/*
 * Idle sessions expire; streams that wait for news get a comment now and
 * then, so that neither a proxy nor the frontend's timer ends them.
 */
static void
tick(int fd, short ev, void *arg)
{
	struct mcp_sess		*ms, *next;
	struct mcp_stream	*st;
	struct mcp_req		*mr;
	uint64_t		 now = monotonic_ms();

	(void)fd;
	(void)ev;
	(void)arg;
	TAILQ_FOREACH_SAFE(ms, &sessions, ms_entry, next) {
		if (sess_busy(ms))
			ms->ms_used_ms = now;
		else if (now - ms->ms_used_ms >= SESSION_IDLE_MS) {
			sess_end(ms, "idle");
			continue;
		}
		st = TAILQ_FIRST(&ms->ms_streams);
		if (st != NULL && st->st_no == 0 && st->st_http != 0)
			http_event(st->st_http, NULL, NULL, NULL);
	}
	TAILQ_FOREACH(mr, &reqs, mr_entry)
		if (mr->mr_listen && mr->mr_http != 0)
			http_event(mr->mr_http, NULL, NULL, NULL);
}

/* ---- requests ---- */

static struct mcp_req *
req_new(uint64_t http, const struct store_user *u, const char *toolset,
    const char *peer)
{
	struct mcp_req *mr;

	if ((mr = calloc(1, sizeof(*mr))) == NULL)
		fatal("calloc");
	mr->mr_http = http;
	mr->mr_user = *u;
	snprintf(mr->mr_toolset, sizeof(mr->mr_toolset), "%s", toolset);
	snprintf(mr->mr_peer, sizeof(mr->mr_peer), "%s", peer != NULL ? peer :
	    "");
	mr->mr_start_ms = monotonic_ms();
	TAILQ_INSERT_TAIL(&reqs, mr, mr_entry);
	nreqs++;
	return mr;
}

/* Room for another request of this session (NULL: stateless)? */
static int
req_room(const struct mcp_sess *ms)
{
	const struct mcp_req	*mr;
	size_t			 n = 0;

	if (nreqs >= REQS_MAX)
		return 0;
	if (ms == NULL)
		return 1;
	TAILQ_FOREACH(mr, &reqs, mr_entry)
		if (mr->mr_sess == ms)
			n++;
	return n < REQS_PER_SESSION;
}

static void
req_free(struct mcp_req *mr)
{
	struct mcp_sub *sb, *next;

	if (mr->mr_starting) {
		mr->mr_done = 1;
		return;
	}
	if (mr->mr_call != 0)
		controller_cancel_call(mr->mr_call);
	if (mr->mr_intent != NULL)
		(void)audit_settle(mr->mr_intent);
	if (mr->mr_outcome != NULL)
		(void)audit_settle(mr->mr_outcome);
	json_object_put(mr->mr_held);
	TAILQ_FOREACH_SAFE(sb, &subs, sb_entry, next)
		if (sb->sb_listen == mr)
			sub_drop(sb);
	if (mr->mr_stream != NULL)
		stream_free(mr->mr_sess, mr->mr_stream);
	TAILQ_REMOVE(&reqs, mr, mr_entry);
	nreqs--;
	json_object_put(mr->mr_id);
	json_object_put(mr->mr_params);
	json_object_put(mr->mr_token);
	json_object_put(mr->mr_items);
	free(mr->mr_name);
	free(mr->mr_why);
	free(mr);
}

/*
 * Answers and notifications of a request go out as events when it
 * answers with a stream (made on the first one); a 2025-era session keeps
 * them for a client that reconnects.
 */
static void
req_event(struct mcp_req *mr, struct json_object *msg)
{
	if (!mr->mr_sse)
		return;
	if (!mr->mr_streaming) {
		if (mr->mr_http != 0)
			http_stream_start(mr->mr_http);
		mr->mr_streaming = 1;
		if (mr->mr_sess != NULL)
			mr->mr_stream = stream_new(mr->mr_sess, mr->mr_http);
	}
	if (mr->mr_stream != NULL)
		stream_send(mr->mr_sess, mr->mr_stream, msg);
	else if (mr->mr_http != 0)
		http_event(mr->mr_http, msg, NULL, NULL);
}

/*
 * The one answer of a request, which then is done.  While the outcome of
 * the call it answers waits for its commit, the answer waits with it.  A
 * stream is only for what comes before the answer: an answer that is the
 * first thing to send goes as JSON, one message instead of three.
 */
static void
req_answer(struct mcp_req *mr, struct json_object *msg)
{
	if (mr->mr_outcome != NULL) {
		json_object_put(mr->mr_held);
		mr->mr_held = msg;
		return;
	}
	if (mr->mr_sse && mr->mr_streaming) {
		req_event(mr, msg);
		if (mr->mr_stream != NULL && mr->mr_stream->st_http != 0)
			http_end(mr->mr_stream->st_http);
		else if (mr->mr_stream == NULL && mr->mr_http != 0)
			http_end(mr->mr_http);
		json_object_put(msg);
	} else if (mr->mr_http != 0)
		http_reply(mr->mr_http, 200, msg, NULL);
	else
		json_object_put(msg);
	mr->mr_http = 0;
	req_free(mr);
}

/* 2026-07-28 results say they are complete (no input needed). */
static void
req_result(struct mcp_req *mr, struct json_object *result)
{
	struct json_object *m = rpc_msg(mr->mr_id);

	if (mr->mr_modern)
		json_object_object_add(result, "resultType",
		    json_object_new_string("complete"));
	else
		json_object_object_del(result, "resultType");
	json_object_object_add(m, "result", result);
	req_answer(mr, m);
}

static void
req_error(struct mcp_req *mr, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
req_error(struct mcp_req *mr, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	req_answer(mr, rpc_error(mr->mr_id, code, NULL, fmt, ap));
	va_end(ap);
}

/* A failed call as the model behind the client should see it. */
static void
req_tool_error(struct mcp_req *mr, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
req_tool_error(struct mcp_req *mr, const char *fmt, ...)
{
	struct json_object	*r = json_object_new_object(), *c, *t;
	char			 msg[1024];
	va_list			 ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c = json_object_new_array();
	t = json_object_new_object();
	json_object_object_add(t, "type", json_object_new_string("text"));
	json_object_object_add(t, "text", json_object_new_string(msg));
	json_object_array_add(c, t);
	json_object_object_add(r, "content", c);
	json_object_object_add(r, "isError", json_object_new_boolean(1));
	req_result(mr, r);
}

/* A list result for 2026-07-28 clients: how long it stays fresh, for whom. */
static void
list_result(struct mcp_req *mr, struct json_object *r)
{
	if (mr->mr_modern) {
		json_object_object_add(r, "ttlMs",
		    json_object_new_int(LIST_TTL_MS));
		/* Filtered by the caller's policy: not for another's cache. */
		json_object_object_add(r, "cacheScope",
		    json_object_new_string("private"));
	}
	req_result(mr, r);
}

static const char *
req_conv(struct mcp_req *mr)
{
	return mr->mr_conv;
}

/*
 * A call's isolation keys: its user within the tenant, and a session's
 * label, or for a stateless caller a label of its user (each request its
 * own instance would be absurd).
 */
static void
req_set_conv(struct mcp_req *mr)
{
	unsigned char	h[SHA256_DIGEST_LENGTH];
	const char	*u = owner_key(mr->mr_user.su_name,
			    mr->mr_user.su_tenant, mr->mr_owner);

	if (mr->mr_sess != NULL) {
		snprintf(mr->mr_conv, sizeof(mr->mr_conv), "%s",
		    mr->mr_sess->ms_label);
		return;
	}
	sha256(u, strlen(u), h);
	snprintf(mr->mr_conv, sizeof(mr->mr_conv), "mcp-%02x%02x%02x%02x"
	    "%02x%02x%02x%02x", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
}

/* ---- the toolset's tools, as clients see them ---- */

static int
tool_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

/*
 * PREFIX + TOOL, with each character MCP does not allow in a tool name
 * (SEP-986: A-Z a-z 0-9 _ - .) made "_".  -1 when it is too long.
 */
static int
tool_name(const struct toolset_conf *ts, const char *server,
    const char *tool, char out[TOOL_NAME_MAX + 1])
{
	size_t i, n;

	toolset_prefix(ts, server, out, TOOL_NAME_MAX + 1);
	n = strlen(out);
	if (n + strlen(tool) > TOOL_NAME_MAX || *tool == '\0')
		return -1;
	for (i = 0; tool[i] != '\0'; i++)
		out[n + i] = tool_char(tool[i]) ? tool[i] : '_';
	out[n + i] = '\0';
	return 0;
}

/* x-mcp-header asks clients for headers we would then have to check. */
static void
strip_param_headers(struct json_object *o)
{
	struct json_object_iterator	 it, end;
	struct json_object		*v;
	size_t				 i;

	if (json_object_is_type(o, json_type_array)) {
		for (i = 0; i < json_object_array_length(o); i++)
			strip_param_headers(json_object_array_get_idx(o, i));
		return;
	}
	if (!json_object_is_type(o, json_type_object))
		return;
	json_object_object_del(o, "x-mcp-header");
	it = json_object_iter_begin(o);
	end = json_object_iter_end(o);
	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		v = json_object_iter_peek_value(&it);
		strip_param_headers(v);
	}
}

/* The toolset's globs select SERVER.TOOL (as the chat's do). */
static int
in_toolset_id(const struct toolset_conf *ts, const char *id)
{
	size_t i;

	for (i = 0; i < ts->ts_ntools; i++)
		if (policy_glob_match(ts->ts_tools[i], id))
			return 1;
	return 0;
}

static int
mcp_tool_cmp(const void *a, const void *b)
{
	return strcmp(((const struct mcp_tool *)a)->mt_name,
	    ((const struct mcp_tool *)b)->mt_name);
}

static void
cache_clear(struct tool_cache *tk)
{
	size_t i;

	for (i = 0; i < tk->tk_n; i++) {
		free(tk->tk_tools[i].mt_tool);
		json_object_put(tk->tk_tools[i].mt_def);
	}
	free(tk->tk_tools);
	tk->tk_tools = NULL;
	tk->tk_n = 0;
}

static void
cache_add(struct tool_cache *tk, const struct toolset_conf *ts,
    const char *server, struct json_object *t, size_t *cap)
{
	struct json_object	*schema, *def;
	struct mcp_tool		*mt;
	const char		*name = obj_str(t, "name");
	char			 id[512];

	if (name == NULL || !json_object_object_get_ex(t, "inputSchema",
	    &schema))
		return;
	snprintf(id, sizeof(id), "%s.%s", server, name);
	if (!in_toolset_id(ts, id))
		return;
	if (tk->tk_n == *cap) {
		*cap = *cap == 0 ? 32 : *cap * 2;
		if ((tk->tk_tools = reallocarray(tk->tk_tools, *cap,
		    sizeof(*tk->tk_tools))) == NULL)
			fatal("reallocarray");
	}
	mt = &tk->tk_tools[tk->tk_n];
	if (tool_name(ts, server, name, mt->mt_name) == -1) {
		log_warnx("mcp: toolset %s: %s is left out: its name is too "
		    "long for MCP", ts->ts_name, id);
		return;
	}
	def = NULL;
	if (json_object_deep_copy(t, &def, NULL) != 0)
		fatalx("json_object_deep_copy");
	json_object_object_add(def, "name", json_object_new_string(
	    mt->mt_name));
	strip_param_headers(json_object_object_get(def, "inputSchema"));
	snprintf(mt->mt_server, sizeof(mt->mt_server), "%s", server);
	mt->mt_tool = xstrdup(name);
	mt->mt_def = def;
	tk->tk_n++;
}

/*
 * Two tools that came out with one name (only characters made "_" can do
 * that: the prefixes are checked at configuration) are both left out:
 * neither may shadow the other.
 */
static void
cache_dedup(struct tool_cache *tk, const char *toolset)
{
	size_t i, j, o = 0;

	qsort(tk->tk_tools, tk->tk_n, sizeof(*tk->tk_tools), mcp_tool_cmp);
	for (i = 0; i < tk->tk_n; i = j) {
		for (j = i + 1; j < tk->tk_n && strcmp(tk->tk_tools[i].mt_name,
		    tk->tk_tools[j].mt_name) == 0; j++)
			;
		if (j - i == 1) {
			tk->tk_tools[o++] = tk->tk_tools[i];
			continue;
		}
		log_warnx("mcp: toolset %s: %zu tools would be called %s; none "
		    "is offered", toolset, j - i, tk->tk_tools[i].mt_name);
		for (; i < j; i++) {
			free(tk->tk_tools[i].mt_tool);
			json_object_put(tk->tk_tools[i].mt_def);
		}
	}
	tk->tk_n = o;
}

static struct tool_cache *
toolset_tools(const struct toolset_conf *ts)
{
	const struct server_conf	*srv;
	struct worker_link		*wl;
	struct json_object		*tools;
	struct tool_cache		*tk;
	size_t				 i, cap = 0;

	TAILQ_FOREACH(tk, &caches, tk_entry)
		if (strcmp(tk->tk_toolset, ts->ts_name) == 0)
			break;
	if (tk != NULL && tk->tk_gen == tools_gen)
		return tk;
	if (tk == NULL) {
		if ((tk = calloc(1, sizeof(*tk))) == NULL)
			fatal("calloc");
		snprintf(tk->tk_toolset, sizeof(tk->tk_toolset), "%s",
		    ts->ts_name);
		TAILQ_INSERT_TAIL(&caches, tk, tk_entry);
	}
	cache_clear(tk);
	TAILQ_FOREACH(srv, &controller_conf()->c_servers, srv_entry) {
		if ((wl = controller_worker(srv->srv_name)) == NULL ||
		    (tools = controller_worker_tools(wl)) == NULL)
			continue;
		for (i = 0; i < json_object_array_length(tools); i++)
			cache_add(tk, ts, srv->srv_name,
			    json_object_array_get_idx(tools, i), &cap);
	}
	cache_dedup(tk, ts->ts_name);
	tk->tk_gen = tools_gen;
	return tk;
}

static const struct mcp_tool *
tool_find(const struct toolset_conf *ts, const char *name)
{
	struct tool_cache	*tk = toolset_tools(ts);
	struct mcp_tool		 key;

	if (strlen(name) > TOOL_NAME_MAX)
		return NULL;
	snprintf(key.mt_name, sizeof(key.mt_name), "%s", name);
	return bsearch(&key, tk->tk_tools, tk->tk_n, sizeof(*tk->tk_tools),
	    mcp_tool_cmp);
}

/* ---- resources and prompts: whose, and under which name ---- */

static int
server_has(const char *server, const char *cap)
{
	struct worker_link	*wl = controller_worker(server);
	struct json_object	*caps;

	return wl != NULL && (caps = controller_worker_caps(wl)) != NULL &&
	    json_object_object_get_ex(caps, cap, NULL);
}

/* The toolset's next server after `after` (NULL: the first) offering cap. */
static const char *
next_server(const struct toolset_conf *ts, const char *cap, const char *after)
{
	const struct server_conf	*srv;
	int				 past = after == NULL;

	TAILQ_FOREACH(srv, &controller_conf()->c_servers, srv_entry) {
		if (!past) {
			past = strcmp(srv->srv_name, after) == 0;
			continue;
		}
		if (toolset_has_server(ts, srv->srv_name) &&
		    server_has(srv->srv_name, cap))
			return srv->srv_name;
	}
	return NULL;
}

/*
 * A resource URI as our clients see it: mcpbroker://SERVER/ and the
 * server's URI as it is (a template stays a template); a toolset with
 * names bare has one server and leaves URIs alone.
 */
static char *
uri_wrap(const struct toolset_conf *ts, const char *server, const char *uri)
{
	char *out;

	if (ts->ts_names == NAMES_BARE)
		return xstrdup(uri);
	if (asprintf(&out, URI_SCHEME "%s/%s", server, uri) == -1)
		fatal("asprintf");
	return out;
}

/*
 * Which server a client's URI is for, and the server's own URI.  A URI we
 * did not make (a resource link in a tool's result names the server's) is
 * the one server's of the toolset that has resources, if there is one.
 */
static int
uri_unwrap(const struct toolset_conf *ts, const char *uri, char *server,
    size_t len, const char **orig)
{
	const char	*s, *slash, *only;
	size_t		 n;

	if (strncmp(uri, URI_SCHEME, strlen(URI_SCHEME)) == 0 &&
	    ts->ts_names != NAMES_BARE) {
		s = uri + strlen(URI_SCHEME);
		if ((slash = strchr(s, '/')) == NULL || (n = (size_t)(slash -
		    s)) == 0 || n >= len)
			return -1;
		snprintf(server, len, "%.*s", (int)n, s);
		*orig = slash + 1;
		return config_find_server(controller_conf(), server) != NULL &&
		    toolset_has_server(ts, server) && **orig != '\0' ? 0 : -1;
	}
	if ((only = next_server(ts, "resources", NULL)) == NULL ||
	    next_server(ts, "resources", only) != NULL)
		return -1;
	snprintf(server, len, "%s", only);
	*orig = uri;
	return 0;
}

/* A prompt's server by its name's prefix (the prefixes start no other). */
static int
prompt_unwrap(const struct toolset_conf *ts, const char *name, char *server,
    size_t len, const char **orig)
{
	const struct server_conf	*srv;
	char				 prefix[NAME_MAX_LEN + 3];

	TAILQ_FOREACH(srv, &controller_conf()->c_servers, srv_entry) {
		if (!toolset_has_server(ts, srv->srv_name))
			continue;
		toolset_prefix(ts, srv->srv_name, prefix, sizeof(prefix));
		if (strncmp(name, prefix, strlen(prefix)) == 0 &&
		    name[strlen(prefix)] != '\0') {
			snprintf(server, len, "%s", srv->srv_name);
			*orig = name + strlen(prefix);
			return 0;
		}
	}
	return -1;
}

static const struct toolset_conf *
req_toolset(const struct mcp_req *mr)
{
	return config_find_toolset(controller_conf(), mr->mr_toolset);
}

/* ---- the audit trail ---- */

static struct json_object *
audit_base(const struct mcp_req *mr)
{
	struct json_object *d = json_object_new_object();

	json_object_object_add(d, "via", json_object_new_string("mcp"));
	json_object_object_add(d, "toolset", json_object_new_string(
	    mr->mr_toolset));
	if (mr->mr_sess != NULL)
		json_object_object_add(d, "session", json_object_new_string(
		    mr->mr_sess->ms_label));
	return d;
}

static void
audit_decision(struct json_object *d, const struct policy_decision *pd)
{
	char rule[300];

	json_object_object_add(d, "decision", json_object_new_string(
	    policy_action_str(pd->pd_action)));
	if (pd->pd_rule != NULL) {
		snprintf(rule, sizeof(rule), "%s:%d", pd->pd_rule->pr_file,
		    pd->pd_rule->pr_line);
		json_object_object_add(d, "rule", json_object_new_string(rule));
	}
	json_object_object_add(d, "reason", json_object_new_string(
	    pd->pd_reason));
}

/* Hex SHA-256 of the arguments as the row's "arguments" has them unmasked. */
static struct json_object *
args_digest(struct json_object *args)
{
	const char	*text;
	size_t		 len;
	char		 hex[SHA256_HEX_LEN + 1];

	text = json_object_to_json_string_length(args, JSON_C_TO_STRING_PLAIN |
	    JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	sha256_hex(text, len, hex);
	return json_object_new_string(hex);
}

/* A call of a tool the toolset does not have: nothing ran, but it asked. */
static void
audit_forged(struct mcp_req *mr, const char *name)
{
	struct json_object *d = audit_base(mr);

	json_object_object_add(d, "name", json_object_new_string(name));
	json_object_object_add(d, "decision", json_object_new_string("deny"));
	json_object_object_add(d, "reason", json_object_new_string(
	    "not a tool of this toolset"));
	if (audit_append(AUDIT_KIND_CALL, mr->mr_user.su_name,
	    mr->mr_user.su_tenant, d) == -1)
		log_warnx("mcp %s: a refused call was not recorded",
		    mr->mr_user.su_name);
	json_object_put(d);
}

/* The outcome is on record (or could not be): the answer goes out. */
static void
outcome_recorded(int64_t row, void *arg)
{
	struct mcp_req		*mr = arg;
	struct json_object	*msg = mr->mr_held;

	mr->mr_outcome = NULL;
	mr->mr_held = NULL;
	if (row == -1)
		log_warnx("mcp %s: the outcome of a call was not recorded",
		    mr->mr_user.su_name);
	if (msg != NULL)
		req_answer(mr, msg);
}

/*
 * How a call that ran ended, tied to its intent row.  A call that ended
 * (ok, error) has its row go to the next group commit and its answer wait
 * for it there (req_answer holds it): no client learns a result the trail
 * does not yet hold.  A cancelled one has nobody waiting: written now.
 */
static void
audit_outcome(struct mcp_req *mr, const char *outcome, size_t bytes)
{
	struct json_object *d;

	if (mr->mr_audit <= 0)
		return;
	d = json_object_new_object();
	json_object_object_add(d, "intent", json_object_new_int64(
	    mr->mr_audit));
	json_object_object_add(d, "outcome", json_object_new_string(outcome));
	cmetrics_tool_call(mr->mr_server, mr->mr_name, outcome,
	    monotonic_ms() - mr->mr_start_ms);
	json_object_object_add(d, "elapsed_ms", json_object_new_int64(
	    (int64_t)(monotonic_ms() - mr->mr_start_ms)));
	json_object_object_add(d, "result_bytes", json_object_new_int64(
	    (int64_t)bytes));
	if (strcmp(outcome, "cancelled") != 0)
		mr->mr_outcome = audit_append_async(AUDIT_KIND_RESULT,
		    mr->mr_user.su_name, mr->mr_user.su_tenant, d,
		    outcome_recorded, mr);
	else if (audit_append(AUDIT_KIND_RESULT, mr->mr_user.su_name,
	    mr->mr_user.su_tenant, d) == -1)
		log_warnx("mcp %s: the outcome of audit row %" PRId64 " was not "
		    "recorded", mr->mr_user.su_name, mr->mr_audit);
	json_object_put(d);
	mr->mr_audit = 0;
}

/*
 * A refusal or an allowed call, decided for the caller: the row goes to
 * the next group commit, and the request goes on in intent_done.
 */
static void
audit_intent(struct mcp_req *mr, const char *kind, struct json_object *d,
    const struct policy_decision *pd, audit_done_fn done)
{
	audit_decision(d, pd);
	mr->mr_intent = audit_append_async(kind, mr->mr_user.su_name,
	    mr->mr_user.su_tenant, d, done, mr);
	json_object_put(d);
}

/* ---- methods: lifecycle ---- */

static struct json_object *
server_info(const struct mcp_req *mr)
{
	struct json_object	*i = json_object_new_object();
	char			 name[NAME_MAX_LEN + 16];

	snprintf(name, sizeof(name), "mcpbroker/%s", mr->mr_toolset);
	json_object_object_add(i, "name", json_object_new_string(name));
	json_object_object_add(i, "version", json_object_new_string(
	    MCPBROKER_VERSION));
	return i;
}

/*
 * What the toolset can do: tools always, resources and prompts only when
 * one of its servers has them.
 */
static struct json_object *
capabilities(const struct mcp_req *mr)
{
	const struct toolset_conf	*ts = req_toolset(mr);
	struct json_object		*c = json_object_new_object(), *o, *rc;
	const char			*srv;
	int				 subscribe = 0;

	o = json_object_new_object();
	json_object_object_add(o, "listChanged", json_object_new_boolean(1));
	json_object_object_add(c, "tools", o);
	for (srv = next_server(ts, "resources", NULL); srv != NULL;
	    srv = next_server(ts, "resources", srv))
		if ((rc = json_object_object_get(controller_worker_caps(
		    controller_worker(srv)), "resources")) != NULL &&
		    json_object_get_boolean(json_object_object_get(rc,
		    "subscribe")))
			subscribe = 1;
	if (next_server(ts, "resources", NULL) != NULL) {
		o = json_object_new_object();
		json_object_object_add(o, "listChanged",
		    json_object_new_boolean(1));
		/* Subscriptions are the session's; 2026 clients listen. */
		if (subscribe && !mr->mr_modern)
			json_object_object_add(o, "subscribe",
			    json_object_new_boolean(1));
		json_object_object_add(c, "resources", o);
	}
	if (next_server(ts, "prompts", NULL) != NULL) {
		o = json_object_new_object();
		json_object_object_add(o, "listChanged",
		    json_object_new_boolean(1));
		json_object_object_add(c, "prompts", o);
	}
	return c;
}


/* initialize: a 2025-era session, in the version the client asked for. */
static void
m_initialize(struct mcp_req *mr)
{
	struct json_object	*r, *m;
	struct mcp_sess		*ms;
	const char		*want, *v;

	want = obj_str(mr->mr_params, "protocolVersion");
	v = want != NULL && legacy_version(want) ? want : legacy_versions[0];
	if ((ms = sess_new(&mr->mr_user, mr->mr_toolset, v)) == NULL) {
		req_error(mr, RPC_INTERNAL, "no session could be made");
		return;
	}
	r = json_object_new_object();
	json_object_object_add(r, "protocolVersion", json_object_new_string(v));
	json_object_object_add(r, "capabilities", capabilities(mr));
	json_object_object_add(r, "serverInfo", server_info(mr));
	m = rpc_msg(mr->mr_id);
	json_object_object_add(m, "result", r);
	http_reply(mr->mr_http, 200, m, ms->ms_id);
	mr->mr_http = 0;
	req_free(mr);
}

static void
m_ping(struct mcp_req *mr)
{
	req_result(mr, json_object_new_object());
}

/* server/discover: versions, what the toolset can do, who we are. */
static void
m_discover(struct mcp_req *mr)
{
	struct json_object	*r = json_object_new_object(), *v, *meta;
	size_t			 i;

	v = json_object_new_array();
	json_object_array_add(v, json_object_new_string(MODERN_VERSION));
	for (i = 0; legacy_versions[i] != NULL; i++)
		json_object_array_add(v, json_object_new_string(
		    legacy_versions[i]));
	json_object_object_add(r, "supportedVersions", v);
	json_object_object_add(r, "capabilities", capabilities(mr));
	meta = json_object_new_object();
	json_object_object_add(meta, META_SERVER_INFO, server_info(mr));
	json_object_object_add(r, "_meta", meta);
	list_result(mr, r);
}

/* Log levels are accepted; the servers' log messages are not relayed. */
static void
m_set_level(struct mcp_req *mr)
{
	if (obj_str(mr->mr_params, "level") == NULL) {
		req_error(mr, RPC_PARAMS, "logging/setLevel needs a level");
		return;
	}
	req_result(mr, json_object_new_object());
}

/* ---- methods: tools ---- */

/* One page of the tools the caller may use, from a name on (the cursor). */
static void
m_tools_list(struct mcp_req *mr)
{
	const struct toolset_conf	*ts = req_toolset(mr);
	struct tool_cache		*tk = toolset_tools(ts);
	struct policy_decision		 pd;
	struct json_object		*r, *arr, *c, *nc;
	const char			*cursor, *after = NULL, *last = NULL;
	char				 id[512];
	size_t				 i, n = 0;

	c = (cursor = obj_str(mr->mr_params, "cursor")) != NULL ?
	    cursor_read(cursor) : NULL;
	if (cursor != NULL && (c == NULL || (after = obj_str(c, "t")) ==
	    NULL)) {
		json_object_put(c);
		req_error(mr, RPC_PARAMS, "invalid cursor");
		return;
	}
	arr = json_object_new_array();
	r = json_object_new_object();
	for (i = 0; i < tk->tk_n; i++) {
		if (after != NULL && strcmp(tk->tk_tools[i].mt_name, after) <= 0)
			continue;
		snprintf(id, sizeof(id), "%s.%s", tk->tk_tools[i].mt_server,
		    tk->tk_tools[i].mt_tool);
		if (!controller_tool_usable(tk->tk_tools[i].mt_server,
		    tk->tk_tools[i].mt_tool) ||
		    decide(mr, POLICY_TOOL, id, NULL, &pd) == POLICY_DENY)
			continue;
		if (n == PAGE_SIZE) {
			nc = json_object_new_object();
			json_object_object_add(nc, "t", json_object_new_string(
			    last));
			add_cursor(r, nc);
			break;
		}
		json_object_array_add(arr, json_object_get(
		    tk->tk_tools[i].mt_def));
		last = tk->tk_tools[i].mt_name;
		n++;
	}
	json_object_put(c);
	json_object_object_add(r, "tools", arr);
	list_result(mr, r);
}

/*
 * Backend progress for a client that asked for it (a progressToken); a
 * JSON answer has nowhere to put it.
 */
static void
call_progress(struct json_object *p, void *arg)
{
	struct mcp_req		*mr = arg;
	struct json_object	*params, *v, *msg;

	if (mr->mr_token == NULL || !json_object_object_get_ex(p, "progress",
	    &v))
		return;
	params = json_object_new_object();
	json_object_object_add(params, "progressToken",
	    json_object_get(mr->mr_token));
	json_object_object_add(params, "progress", json_object_get(v));
	if (json_object_object_get_ex(p, "total", &v))
		json_object_object_add(params, "total", json_object_get(v));
	if (json_object_object_get_ex(p, "message", &v))
		json_object_object_add(params, "message", json_object_get(v));
	msg = notification("notifications/progress", params);
	req_event(mr, msg);
	json_object_put(msg);
}

/*
 * The server's answer.  Its JSON-RPC errors stay errors; ours (timeouts,
 * a server down) are results with isError, which a model can read.
 */
static void
call_done(struct json_object *result, struct json_object *error, void *arg)
{
	struct mcp_req		*mr = arg;
	struct json_object	*v;
	const char		*msg;
	int64_t			 code = 0;
	int			 is_error = 0;

	mr->mr_call = 0;
	if (error != NULL) {
		msg = obj_str(error, "message");
		(void)json_get_int(error, "code", INT32_MIN, INT32_MAX, 1, &code);
		audit_outcome(mr, "error", 0);
		if (code < 0)
			req_error(mr, (int)code, "%s", msg != NULL ? msg :
			    "the server failed");
		else
			req_tool_error(mr, "%s", msg != NULL ? msg :
			    "the tool call failed");
		return;
	}
	if (json_object_object_get_ex(result, "isError", &v))
		is_error = json_object_get_boolean(v);
	audit_outcome(mr, is_error ? "error" : "ok", strlen(
	    json_object_to_json_string_ext(result, JSON_C_TO_STRING_PLAIN)));
	req_result(mr, json_object_get(result));
}

/*
 * Only now, with the intent on record, does anything run; a call whose
 * intent could not be written does not.
 */
static void
call_intent_done(int64_t row, void *arg)
{
	struct mcp_req		*mr = arg;
	struct worker_link	*wl;
	struct json_object	*args;
	uint64_t		 call;

	mr->mr_intent = NULL;
	if (row == -1) {
		log_warnx("mcp %s: %s.%s not run: the audit trail cannot be "
		    "written", mr->mr_user.su_name, mr->mr_server, mr->mr_name);
		req_tool_error(mr, "%s was not run: the audit trail cannot be "
		    "written", mr->mr_name);
		return;
	}
	if (mr->mr_refused) {
		req_tool_error(mr, "%s", mr->mr_why);
		return;
	}
	mr->mr_audit = row;
	if ((wl = controller_worker(mr->mr_server)) == NULL) {
		audit_outcome(mr, "error", 0);
		req_tool_error(mr, "the tool's server is gone");
		return;
	}
	args = json_object_object_get(mr->mr_params, "arguments");
	mr->mr_starting = 1;
	call = controller_call_tool(wl, mr->mr_name, args, mr->mr_owner,
	    req_conv(mr),
	    controller_conf()->c_limits.lm_tool_timeout_ms, call_done, mr);
	mr->mr_starting = 0;
	if (mr->mr_done) {	/* answered at once: the server is down */
		req_free(mr);
		return;
	}
	mr->mr_call = call;
	if (call != 0 && mr->mr_token != NULL)
		controller_call_progress(call, call_progress);
}

static void
refuse(struct mcp_req *mr, enum policy_kind kind, const char *what,
    const struct policy_decision *pd)
{
	char why[512];

	mr->mr_refused = 1;
	cmetrics_policy_denial(policy_kind_str(kind));
	if (pd->pd_action == POLICY_CONFIRM)
		snprintf(why, sizeof(why), "%.200s needs a person's approval "
		    "(%.200s), which cannot be given over MCP", what,
		    pd->pd_reason);
	else
		snprintf(why, sizeof(why), "%.200s was refused by policy: "
		    "%.200s", what, pd->pd_reason);
	log_info("mcp %s: %s", mr->mr_user.su_name, why);
	mr->mr_why = xstrdup(why);
}

/* A tool whose definition changed and awaits approval (its pin). */
static void
withheld(struct mcp_req *mr, const char *what,
    const struct policy_decision *pd)
{
	char why[512];

	mr->mr_refused = 1;
	snprintf(why, sizeof(why), "%.200s is withheld: %.200s", what,
	    pd->pd_reason);
	log_info("mcp %s: %s", mr->mr_user.su_name, why);
	mr->mr_why = xstrdup(why);
}

static void
m_tools_call(struct mcp_req *mr)
{
	const struct mcp_tool	*mt;
	struct json_object	*args = NULL, *d, *meta, *masked;
	struct policy_decision	 pd;
	const char		*name;
	char			 id[512];

	if ((name = obj_str(mr->mr_params, "name")) == NULL ||
	    strlen(name) > 256 || (json_object_object_get_ex(mr->mr_params,
	    "arguments", &args) && args != NULL &&
	    !json_object_is_type(args, json_type_object))) {
		req_error(mr, RPC_PARAMS, "tools/call needs a name and object "
		    "arguments");
		return;
	}
	if (json_object_object_get_ex(mr->mr_params, "_meta", &meta) &&
	    json_object_object_get_ex(meta, "progressToken", &mr->mr_token) &&
	    (json_object_is_type(mr->mr_token, json_type_string) ||
	    json_object_is_type(mr->mr_token, json_type_int)))
		json_object_get(mr->mr_token);
	else
		mr->mr_token = NULL;
	if ((mt = tool_find(req_toolset(mr), name)) == NULL) {
		audit_forged(mr, name);
		log_info("mcp %s: call of %s, which toolset %s does not have",
		    mr->mr_user.su_name, name, mr->mr_toolset);
		req_tool_error(mr, "Unknown tool: %s", name);
		return;
	}
	if (args == NULL) {
		args = json_object_new_object();
		json_object_object_add(mr->mr_params, "arguments", args);
	}
	snprintf(mr->mr_server, sizeof(mr->mr_server), "%s", mt->mt_server);
	mr->mr_name = xstrdup(mt->mt_tool);
	snprintf(id, sizeof(id), "%s.%s", mt->mt_server, mt->mt_tool);
	/* Listed to this client once, perhaps: not the new definition. */
	if (!controller_tool_usable(mt->mt_server, mt->mt_tool)) {
		controller_tool_withheld(&pd);
		withheld(mr, id, &pd);
	} else if (decide(mr, POLICY_TOOL, id, args, &pd) != POLICY_ALLOW)
		refuse(mr, POLICY_TOOL, id, &pd);
	d = audit_base(mr);
	json_object_object_add(d, "server", json_object_new_string(
	    mr->mr_server));
	json_object_object_add(d, "tool", json_object_new_string(mr->mr_name));
	json_object_object_add(d, "arguments_sha256", args_digest(args));
	masked = audit_mask(args, controller_conf()->c_audit.ac_mask,
	    controller_conf()->c_audit.ac_nmask, NULL);
	json_object_object_add(d, "arguments", masked);
	audit_intent(mr, AUDIT_KIND_CALL, d, &pd, call_intent_done);
}

/* ---- methods: resources and prompts ---- */

/*
 * Lists are walked server by server: a page is one page of one server's
 * list, and the cursor says whose and where ({s, c?}).  What the caller's
 * policy hides is left out, so a page may come out empty.
 */
struct list_kind {
	const char	*lk_method;
	const char	*lk_key;	/* the result's array */
	const char	*lk_cap;	/* the capability it needs */
	const char	*lk_field;	/* what names an item */
	enum policy_kind lk_kind;
};

static const struct list_kind list_kinds[] = {
	{ "resources/list", "resources", "resources", "uri", POLICY_RESOURCE },
	{ "resources/templates/list", "resourceTemplates", "resources",
	    "uriTemplate", POLICY_RESOURCE },
	{ "prompts/list", "prompts", "prompts", "name", POLICY_PROMPT },
};

static const struct list_kind *
list_kind_of(const char *method)
{
	size_t i;

	for (i = 0; i < sizeof(list_kinds) / sizeof(list_kinds[0]); i++)
		if (strcmp(list_kinds[i].lk_method, method) == 0)
			return &list_kinds[i];
	return NULL;
}

static void	list_page(struct mcp_req *, const char *server,
		    const char *cursor);

/* An item of server's page, named for our clients, if the caller may see it. */
static struct json_object *
list_item(struct mcp_req *mr, const struct list_kind *lk, const char *server,
    struct json_object *item)
{
	const struct toolset_conf	*ts = req_toolset(mr);
	struct policy_decision		 pd;
	struct json_object		*copy;
	const char			*name = obj_str(item, lk->lk_field);
	char				*id, *ours, prefix[NAME_MAX_LEN + 3];

	if (name == NULL || !json_object_is_type(item, json_type_object))
		return NULL;
	if (asprintf(&id, "%s.%s", server, name) == -1)
		fatal("asprintf");
	if (decide(mr, lk->lk_kind, id, NULL, &pd) == POLICY_DENY) {
		free(id);
		return NULL;
	}
	free(id);
	if (lk->lk_kind == POLICY_PROMPT) {
		toolset_prefix(ts, server, prefix, sizeof(prefix));
		if (asprintf(&ours, "%s%s", prefix, name) == -1)
			fatal("asprintf");
	} else
		ours = uri_wrap(ts, server, name);
	copy = NULL;
	if (json_object_deep_copy(item, &copy, NULL) != 0)
		fatalx("json_object_deep_copy");
	json_object_object_add(copy, lk->lk_field, json_object_new_string(
	    ours));
	free(ours);
	return copy;
}

static void
list_done(struct json_object *result, struct json_object *error, void *arg)
{
	struct mcp_req		*mr = arg;
	const struct list_kind	*lk = list_kind_of(mr->mr_m->mm_name);
	struct json_object	*items, *it, *r, *c;
	const char		*next = NULL, *srv;
	size_t			 i;

	mr->mr_call = 0;
	if (error != NULL)
		log_info("mcp: %s on %s: %s", lk->lk_method, mr->mr_server,
		    obj_str(error, "message") != NULL ? obj_str(error,
		    "message") : "failed");
	else if (json_object_object_get_ex(result, lk->lk_key, &items) &&
	    json_object_is_type(items, json_type_array)) {
		for (i = 0; i < json_object_array_length(items); i++)
			if ((it = list_item(mr, lk, mr->mr_server,
			    json_object_array_get_idx(items, i))) != NULL)
				json_object_array_add(mr->mr_items, it);
		next = obj_str(result, "nextCursor");
	}
	srv = next != NULL ? mr->mr_server : next_server(req_toolset(mr),
	    lk->lk_cap, mr->mr_server);
	/* Empty pages are walked past, a few at a time. */
	if (srv != NULL && json_object_array_length(mr->mr_items) == 0 &&
	    ++mr->mr_hops < PAGE_HOPS) {
		if (srv != mr->mr_server)
			snprintf(mr->mr_server, sizeof(mr->mr_server), "%s",
			    srv);
		list_page(mr, mr->mr_server, next);
		return;
	}
	r = json_object_new_object();
	json_object_object_add(r, lk->lk_key, json_object_get(mr->mr_items));
	if (srv != NULL) {
		c = json_object_new_object();
		json_object_object_add(c, "s", json_object_new_string(srv));
		if (next != NULL)
			json_object_object_add(c, "c", json_object_new_string(
			    next));
		add_cursor(r, c);
	}
	list_result(mr, r);
}

static void
list_page(struct mcp_req *mr, const char *server, const char *cursor)
{
	struct worker_link	*wl = controller_worker(server);
	struct json_object	*params, *e;
	uint64_t		 call;

	if (wl == NULL) {	/* gone with a reload: a page of nothing */
		e = json_object_new_object();
		json_object_object_add(e, "message", json_object_new_string(
		    "the server is gone"));
		list_done(NULL, e, mr);
		json_object_put(e);
		return;
	}
	params = json_object_new_object();
	if (cursor != NULL)
		json_object_object_add(params, "cursor", json_object_new_string(
		    cursor));
	mr->mr_starting = 1;
	call = controller_server_request(wl, mr->mr_m->mm_name, params,
	    mr->mr_owner, req_conv(mr),
	    controller_conf()->c_limits.lm_tool_timeout_ms, list_done, mr);
	mr->mr_starting = 0;
	json_object_put(params);
	if (mr->mr_done)
		req_free(mr);
	else
		mr->mr_call = call;
}

static void
m_list(struct mcp_req *mr)
{
	const struct list_kind	*lk = list_kind_of(mr->mr_m->mm_name);
	const struct toolset_conf *ts = req_toolset(mr);
	struct json_object	*c = NULL, *r;
	const char		*cursor, *srv, *bc = NULL;

	if ((cursor = obj_str(mr->mr_params, "cursor")) != NULL &&
	    ((c = cursor_read(cursor)) == NULL || (srv = obj_str(c, "s")) ==
	    NULL || !toolset_has_server(ts, srv) || controller_worker(srv) ==
	    NULL)) {
		json_object_put(c);
		req_error(mr, RPC_PARAMS, "invalid cursor");
		return;
	}
	if (cursor != NULL)
		bc = obj_str(c, "c");
	else
		srv = next_server(ts, lk->lk_cap, NULL);
	mr->mr_items = json_object_new_array();
	if (srv == NULL) {
		r = json_object_new_object();
		json_object_object_add(r, lk->lk_key, json_object_new_array());
		list_result(mr, r);
		return;
	}
	snprintf(mr->mr_server, sizeof(mr->mr_server), "%s", srv);
	list_page(mr, srv, bc);
	json_object_put(c);
}

/* The server's resources/read answer, its URIs made ours. */
static void
read_done(struct json_object *result, struct json_object *error, void *arg)
{
	struct mcp_req		*mr = arg;
	struct json_object	*contents, *c, *r;
	const char		*uri;
	char			*ours;
	size_t			 i;

	mr->mr_call = 0;
	if (error != NULL) {
		int64_t code = RPC_INTERNAL;

		(void)json_get_int(error, "code", INT32_MIN, INT32_MAX, 1,
		    &code);
		req_error(mr, code < 0 ? (int)code : RPC_INTERNAL, "%s",
		    obj_str(error, "message") != NULL ? obj_str(error,
		    "message") : "the server failed");
		return;
	}
	r = NULL;
	if (json_object_deep_copy(result, &r, NULL) != 0)
		fatalx("json_object_deep_copy");
	if (strcmp(mr->mr_m->mm_name, "resources/read") == 0 &&
	    json_object_object_get_ex(r, "contents", &contents) &&
	    json_object_is_type(contents, json_type_array))
		for (i = 0; i < json_object_array_length(contents); i++) {
			c = json_object_array_get_idx(contents, i);
			if ((uri = obj_str(c, "uri")) == NULL)
				continue;
			ours = uri_wrap(req_toolset(mr), mr->mr_server, uri);
			json_object_object_add(c, "uri",
			    json_object_new_string(ours));
			free(ours);
		}
	/* Our caching hints, not the server's: the answer is per caller. */
	json_object_object_del(r, "ttlMs");
	json_object_object_del(r, "cacheScope");
	if (mr->mr_modern && strcmp(mr->mr_m->mm_name, "resources/read") == 0) {
		json_object_object_add(r, "ttlMs", json_object_new_int(0));
		json_object_object_add(r, "cacheScope",
		    json_object_new_string("private"));
	}
	req_result(mr, r);
}

/* Decided and on record: now the server is asked (params are its own). */
static void
access_intent_done(int64_t row, void *arg)
{
	struct mcp_req		*mr = arg;
	struct worker_link	*wl;
	struct json_object	*params;
	uint64_t		 call;
	int			 read = strcmp(mr->mr_m->mm_name,
				    "resources/read") == 0;

	mr->mr_intent = NULL;
	if (row == -1 || mr->mr_refused) {
		req_error(mr, read ? RPC_NO_RESOURCE : RPC_PARAMS, "%s",
		    row == -1 ? "not served: the audit trail cannot be "
		    "written" : mr->mr_why);
		return;
	}
	if ((wl = controller_worker(mr->mr_server)) == NULL) {
		req_error(mr, RPC_INTERNAL, "the server is gone");
		return;
	}
	params = json_object_new_object();
	json_object_object_add(params, read ? "uri" : "name",
	    json_object_new_string(mr->mr_name));
	if (!read && json_object_object_get(mr->mr_params, "arguments") !=
	    NULL)
		json_object_object_add(params, "arguments", json_object_get(
		    json_object_object_get(mr->mr_params, "arguments")));
	mr->mr_starting = 1;
	call = controller_server_request(wl, mr->mr_m->mm_name, params,
	    mr->mr_owner, req_conv(mr),
	    controller_conf()->c_limits.lm_tool_timeout_ms, read_done, mr);
	mr->mr_starting = 0;
	json_object_put(params);
	if (mr->mr_done)
		req_free(mr);
	else
		mr->mr_call = call;
}

/*
 * Resource rules are globs over the URI as the client gives it, so a rule
 * for everything under file:///srv/share/ would also match
 * "file:///srv/share/../../etc/passwd",
 * which a file server resolves elsewhere.  A URI with a "." or ".."
 * segment, or a dot, slash or backslash percent-encoded, is refused
 * whatever the rules say: a server lists its resources by plain URIs.
 */
static int
uri_dotted(const char *uri)
{
	const char	*p, *path = strstr(uri, "://");
	size_t		 n;

	path = path != NULL ? path + 3 : uri;
	for (p = path; *p != '\0'; p++) {
		if (*p == '%' && (strncasecmp(p, "%2e", 3) == 0 ||
		    strncasecmp(p, "%2f", 3) == 0 ||
		    strncasecmp(p, "%5c", 3) == 0))
			return 1;
		if (*p != '.' || (p != path && p[-1] != '/' && p[-1] != '\\'))
			continue;
		n = p[1] == '.' ? 2 : 1;
		if (strchr("/\\?#", p[n]) != NULL)	/* the NUL too */
			return 1;
	}
	return 0;
}

/* resources/read and prompts/get: which server, may the caller, record. */
static void
m_access(struct mcp_req *mr)
{
	const struct toolset_conf	*ts = req_toolset(mr);
	struct policy_decision		 pd;
	struct json_object		*d, *args, *none;
	const char			*key, *v, *orig;
	char				 id[URI_MAX + NAME_MAX_LEN + 2];
	int				 read;

	read = strcmp(mr->mr_m->mm_name, "resources/read") == 0;
	key = read ? "uri" : "name";
	if ((v = obj_str(mr->mr_params, key)) == NULL || strlen(v) > URI_MAX ||
	    ((args = json_object_object_get(mr->mr_params, "arguments")) !=
	    NULL && !json_object_is_type(args, json_type_object))) {
		req_error(mr, RPC_PARAMS, "%s needs a %s", mr->mr_m->mm_name,
		    key);
		return;
	}
	if ((read ? uri_unwrap(ts, v, mr->mr_server, sizeof(mr->mr_server),
	    &orig) : prompt_unwrap(ts, v, mr->mr_server,
	    sizeof(mr->mr_server), &orig)) == -1 || !server_has(mr->mr_server,
	    read ? "resources" : "prompts")) {
		if (read)
			req_error(mr, RPC_NO_RESOURCE, "Resource not found: %s",
			    v);
		else
			req_error(mr, RPC_PARAMS, "Unknown prompt: %s", v);
		return;
	}
	mr->mr_name = xstrdup(orig);
	snprintf(id, sizeof(id), "%s.%s", mr->mr_server, orig);
	/* Arguments, even none, make it a use: rate limits count it. */
	none = json_object_new_object();
	if (read && uri_dotted(orig)) {
		memset(&pd, 0, sizeof(pd));
		pd.pd_action = POLICY_DENY;
		snprintf(pd.pd_reason, sizeof(pd.pd_reason),
		    "the URI has a dot segment, or a dot or slash "
		    "percent-encoded");
		refuse(mr, POLICY_RESOURCE, id, &pd);
	} else if (decide(mr, read ? POLICY_RESOURCE : POLICY_PROMPT, id,
	    args != NULL ? args : none, &pd) != POLICY_ALLOW)
		refuse(mr, read ? POLICY_RESOURCE : POLICY_PROMPT, id, &pd);
	json_object_put(none);
	d = audit_base(mr);
	json_object_object_add(d, "server", json_object_new_string(
	    mr->mr_server));
	json_object_object_add(d, key, json_object_new_string(orig));
	audit_intent(mr, read ? AUDIT_KIND_READ : AUDIT_KIND_PROMPT, d, &pd,
	    access_intent_done);
}

/* ---- subscriptions ---- */

static void
ignore_done(struct json_object *result, struct json_object *error,
    void *arg)
{
	(void)result;
	(void)arg;
	if (error != NULL)
		log_debug("mcp: %s", obj_str(error, "message") != NULL ?
		    obj_str(error, "message") : "a subscription change failed");
}

/*
 * The subscriptions to uri that reach the same instance of server as the
 * caller's (owner, conv): isolation decides which that is, and each
 * instance is told of its own first and last.
 */
static int
sub_count(const char *server, const char *uri, const char *owner,
    const char *conv)
{
	const struct server_conf	*sc;
	const struct mcp_sub		*sb;
	enum server_isolation		 iso = ISOLATION_SHARED;
	int				 n = 0;

	if ((sc = config_find_server(controller_conf(), server)) != NULL)
		iso = sc->srv_isolation;
	TAILQ_FOREACH(sb, &subs, sb_entry)
		if (strcmp(sb->sb_server, server) == 0 &&
		    strcmp(sb->sb_uri, uri) == 0 &&
		    (iso != ISOLATION_PER_USER ||
		    strcmp(sb->sb_owner, owner) == 0) &&
		    (iso != ISOLATION_PER_CONVERSATION ||
		    strcmp(sb->sb_conv, conv) == 0))
			n++;
	return n;
}

/* Ask the server, without waiting: updates come or they do not. */
static void
sub_tell(const char *method, const char *server, const char *uri,
    const char *owner, const char *conv)
{
	struct worker_link	*wl = controller_worker(server);
	struct json_object	*params;

	if (wl == NULL)
		return;
	params = json_object_new_object();
	json_object_object_add(params, "uri", json_object_new_string(uri));
	(void)controller_server_request(wl, method, params, owner, conv,
	    controller_conf()->c_limits.lm_tool_timeout_ms, ignore_done, NULL);
	json_object_put(params);
}

static void
sub_add(struct mcp_req *mr, struct mcp_sess *ms, struct mcp_req *listen,
    const char *server, const char *uri)
{
	struct mcp_sub *sb;

	if ((sb = calloc(1, sizeof(*sb))) == NULL)
		fatal("calloc");
	sb->sb_sess = ms;
	sb->sb_listen = listen;
	snprintf(sb->sb_server, sizeof(sb->sb_server), "%s", server);
	sb->sb_uri = xstrdup(uri);
	snprintf(sb->sb_owner, sizeof(sb->sb_owner), "%s", mr->mr_owner);
	snprintf(sb->sb_conv, sizeof(sb->sb_conv), "%s", mr->mr_conv);
	TAILQ_INSERT_TAIL(&subs, sb, sb_entry);
}

/* The last one out tells the server. */
static void
sub_drop(struct mcp_sub *sb)
{
	TAILQ_REMOVE(&subs, sb, sb_entry);
	if (sub_count(sb->sb_server, sb->sb_uri, sb->sb_owner, sb->sb_conv) ==
	    0)
		sub_tell("resources/unsubscribe", sb->sb_server, sb->sb_uri,
		    sb->sb_owner, sb->sb_conv);
	free(sb->sb_uri);
	free(sb);
}

static struct mcp_sub *
sub_find(const struct mcp_sess *ms, const char *server, const char *uri)
{
	struct mcp_sub *sb;

	TAILQ_FOREACH(sb, &subs, sb_entry)
		if (sb->sb_sess == ms && strcmp(sb->sb_server, server) == 0 &&
		    strcmp(sb->sb_uri, uri) == 0)
			return sb;
	return NULL;
}

/* A resource the caller may see and subscribe to: its server and URI. */
static int
sub_target(struct mcp_req *mr, const char *uri, char *server, size_t len,
    const char **orig)
{
	struct policy_decision	 pd;
	struct json_object	*rc;
	char			*id;
	int			 action;

	if (uri_unwrap(req_toolset(mr), uri, server, len, orig) == -1 ||
	    (rc = json_object_object_get(controller_worker_caps(
	    controller_worker(server)), "resources")) == NULL ||
	    !json_object_get_boolean(json_object_object_get(rc, "subscribe")) ||
	    uri_dotted(*orig))
		return -1;
	if (asprintf(&id, "%s.%s", server, *orig) == -1)
		fatal("asprintf");
	action = decide(mr, POLICY_RESOURCE, id, NULL, &pd);
	free(id);
	return action == POLICY_DENY ? -1 : 0;
}

static void
subscribe_done(struct json_object *result, struct json_object *error,
    void *arg)
{
	struct mcp_req *mr = arg;

	(void)result;
	mr->mr_call = 0;
	if (error != NULL) {
		req_error(mr, RPC_INTERNAL, "%s", obj_str(error, "message") !=
		    NULL ? obj_str(error, "message") : "the server refused");
		return;
	}
	if (mr->mr_sess != NULL && sub_find(mr->mr_sess, mr->mr_server,
	    mr->mr_name) == NULL)
		sub_add(mr, mr->mr_sess, NULL, mr->mr_server, mr->mr_name);
	req_result(mr, json_object_new_object());
}

/* resources/subscribe (a session's): updates come on its GET stream. */
static void
m_subscribe(struct mcp_req *mr)
{
	struct json_object	*params;
	const char		*uri, *orig;
	uint64_t		 call;

	if ((uri = obj_str(mr->mr_params, "uri")) == NULL ||
	    strlen(uri) > URI_MAX) {
		req_error(mr, RPC_PARAMS, "resources/subscribe needs a uri");
		return;
	}
	if (sub_target(mr, uri, mr->mr_server, sizeof(mr->mr_server), &orig) ==
	    -1) {
		req_error(mr, RPC_NO_RESOURCE, "Resource not found: %s", uri);
		return;
	}
	mr->mr_name = xstrdup(orig);
	if (sub_find(mr->mr_sess, mr->mr_server, orig) != NULL) {
		req_result(mr, json_object_new_object());
		return;
	}
	params = json_object_new_object();
	json_object_object_add(params, "uri", json_object_new_string(orig));
	mr->mr_starting = 1;
	call = controller_server_request(controller_worker(mr->mr_server),
	    "resources/subscribe", params, mr->mr_owner, req_conv(mr),
	    controller_conf()->c_limits.lm_tool_timeout_ms, subscribe_done,
	    mr);
	mr->mr_starting = 0;
	json_object_put(params);
	if (mr->mr_done)
		req_free(mr);
	else
		mr->mr_call = call;
}

static void
m_unsubscribe(struct mcp_req *mr)
{
	struct mcp_sub	*sb;
	const char	*uri, *orig;
	char		 server[NAME_MAX_LEN];

	if ((uri = obj_str(mr->mr_params, "uri")) == NULL) {
		req_error(mr, RPC_PARAMS, "resources/unsubscribe needs a uri");
		return;
	}
	if (uri_unwrap(req_toolset(mr), uri, server, sizeof(server), &orig) ==
	    0 && (sb = sub_find(mr->mr_sess, server, orig)) != NULL)
		sub_drop(sb);
	req_result(mr, json_object_new_object());
}

static int
want(struct json_object *filter, const char *key)
{
	return json_object_get_boolean(json_object_object_get(filter, key));
}

/* The listen streams a user (a name within a tenant) holds open. */
static size_t
listens_of(const struct store_user *u)
{
	const struct mcp_req	*mr;
	size_t			 n = 0;

	TAILQ_FOREACH(mr, &reqs, mr_entry)
		if (mr->mr_listen && store_user_is(u, mr->mr_user.su_name,
		    mr->mr_user.su_tenant))
			n++;
	return n;
}

/*
 * subscriptions/listen (2026-07-28): a stream that stays open with the
 * changes the client opted in to, acknowledged first with what we honour.
 */
static void
m_listen(struct mcp_req *mr)
{
	const struct toolset_conf	*ts = req_toolset(mr);
	struct json_object		*f, *ack, *uris, *ok, *p, *meta, *msg;
	const char			*uri, *orig;
	char				 server[NAME_MAX_LEN];
	size_t				 i;

	if (!mr->mr_accept_sse) {
		req_error(mr, RPC_INVALID, "subscriptions/listen answers with "
		    "an event stream: accept text/event-stream");
		return;
	}
	/* Streams stay open: one user's may not take every place in flight. */
	if (listens_of(&mr->mr_user) >= LISTENS_PER_USER) {
		req_error(mr, RPC_INVALID, "too many open subscriptions/listen "
		    "streams (%d): close one first", LISTENS_PER_USER);
		return;
	}
	f = json_object_object_get(mr->mr_params, "notifications");
	ack = json_object_new_object();
	mr->mr_tools_changed = want(f, "toolsListChanged");
	mr->mr_prompts_changed = want(f, "promptsListChanged") &&
	    next_server(ts, "prompts", NULL) != NULL;
	mr->mr_resources_changed = want(f, "resourcesListChanged") &&
	    next_server(ts, "resources", NULL) != NULL;
	if (mr->mr_tools_changed)
		json_object_object_add(ack, "toolsListChanged",
		    json_object_new_boolean(1));
	if (mr->mr_prompts_changed)
		json_object_object_add(ack, "promptsListChanged",
		    json_object_new_boolean(1));
	if (mr->mr_resources_changed)
		json_object_object_add(ack, "resourcesListChanged",
		    json_object_new_boolean(1));
	uris = json_object_object_get(f, "resourceSubscriptions");
	ok = json_object_new_array();
	for (i = 0; json_object_is_type(uris, json_type_array) &&
	    i < json_object_array_length(uris) && i < LISTEN_URIS_MAX; i++) {
		uri = json_object_get_string(json_object_array_get_idx(uris,
		    i));
		if (!json_object_is_type(json_object_array_get_idx(uris, i),
		    json_type_string) || strlen(uri) > URI_MAX ||
		    sub_target(mr, uri, server, sizeof(server), &orig) == -1)
			continue;
		if (sub_count(server, orig, mr->mr_owner, mr->mr_conv) == 0)
			sub_tell("resources/subscribe", server, orig,
			    mr->mr_owner, mr->mr_conv);
		sub_add(mr, NULL, mr, server, orig);
		json_object_array_add(ok, json_object_new_string(uri));
	}
	if (json_object_array_length(ok) > 0)
		json_object_object_add(ack, "resourceSubscriptions", ok);
	else
		json_object_put(ok);
	mr->mr_listen = 1;
	mr->mr_sse = 1;
	p = json_object_new_object();
	meta = json_object_new_object();
	json_object_object_add(meta, META_SUBSCRIPTION, json_object_get(
	    mr->mr_id));
	json_object_object_add(p, "_meta", meta);
	json_object_object_add(p, "notifications", ack);
	msg = notification("notifications/subscriptions/acknowledged", p);
	req_event(mr, msg);
	json_object_put(msg);
	ticker_start();
}

/* ---- changes, to whoever listens ---- */

static void
tell_session(struct mcp_sess *ms, const char *method,
    struct json_object *params)
{
	struct json_object	*msg;
	struct mcp_stream	*st = stream_find(ms, 0);

	if (st == NULL)
		return;
	msg = notification(method, params != NULL ? json_object_get(params) :
	    NULL);
	stream_send(ms, st, msg);
	json_object_put(msg);
}

static void
tell_listener(struct mcp_req *mr, const char *method,
    struct json_object *params)
{
	struct json_object *p, *meta, *msg;

	p = NULL;
	if (params == NULL || json_object_deep_copy(params, &p, NULL) != 0)
		p = json_object_new_object();
	meta = json_object_new_object();
	json_object_object_add(meta, META_SUBSCRIPTION, json_object_get(
	    mr->mr_id));
	json_object_object_add(p, "_meta", meta);
	msg = notification(method, p);
	req_event(mr, msg);
	json_object_put(msg);
}

/* A list changed on server: every session and listener it concerns hears. */
static void
tell_list_changed(const char *server, const char *method)
{
	const struct toolset_conf	*ts;
	struct mcp_sess			*ms;
	struct mcp_req			*mr;
	int				 flag;

	TAILQ_FOREACH(ms, &sessions, ms_entry)
		if ((ts = config_find_toolset(controller_conf(),
		    ms->ms_toolset)) != NULL && (server == NULL ||
		    toolset_has_server(ts, server)))
			tell_session(ms, method, NULL);
	TAILQ_FOREACH(mr, &reqs, mr_entry) {
		if (!mr->mr_listen || (ts = req_toolset(mr)) == NULL ||
		    (server != NULL && !toolset_has_server(ts, server)))
			continue;
		flag = strstr(method, "/tools/") != NULL ?
		    mr->mr_tools_changed : strstr(method, "/prompts/") != NULL ?
		    mr->mr_prompts_changed : mr->mr_resources_changed;
		if (flag)
			tell_listener(mr, method, NULL);
	}
}

void
mcp_worker_tools(const char *server, int changed)
{
	tools_gen++;
	if (changed)
		tell_list_changed(server, "notifications/tools/list_changed");
}

/* resources/updated for the subscribers of that resource (and user). */
static void
tell_updated(const char *server, const char *uri, const char *owner,
    const char *conv)
{
	const struct toolset_conf	*ts;
	struct json_object		*p;
	struct mcp_sub			*sb;
	struct mcp_req			*mr;
	char				*ours;

	TAILQ_FOREACH(sb, &subs, sb_entry) {
		if (strcmp(sb->sb_server, server) != 0 ||
		    strcmp(sb->sb_uri, uri) != 0 || (owner != NULL &&
		    strcmp(owner, sb->sb_owner) != 0) || (conv != NULL &&
		    strcmp(conv, sb->sb_conv) != 0))
			continue;
		mr = sb->sb_listen;
		if ((ts = config_find_toolset(controller_conf(), mr != NULL ?
		    mr->mr_toolset : sb->sb_sess->ms_toolset)) == NULL)
			continue;
		ours = uri_wrap(ts, server, uri);
		p = json_object_new_object();
		json_object_object_add(p, "uri", json_object_new_string(ours));
		free(ours);
		if (mr != NULL)
			tell_listener(mr, "notifications/resources/updated", p);
		else
			tell_session(sb->sb_sess,
			    "notifications/resources/updated", p);
		json_object_put(p);
	}
}

void
mcp_server_notify(const char *server, const char *method,
    struct json_object *params, const char *owner, const char *conversation)
{
	const char *uri;

	if (strcmp(method, "notifications/resources/updated") == 0) {
		if ((uri = obj_str(params, "uri")) != NULL)
			tell_updated(server, uri, owner, conversation);
	} else if (strcmp(method, "notifications/resources/list_changed") ==
	    0 || strcmp(method, "notifications/prompts/list_changed") == 0)
		tell_list_changed(server, method);
}

/* ---- what clients send ---- */

/*
 * A request called off: nothing more is sent for it (a stream just ends)
 * and the server's work stops; a call that had run is "cancelled" on the
 * trail.
 */
static void
req_cancel(struct mcp_req *mr)
{
	int64_t row;

	if (mr->mr_intent != NULL) {
		row = audit_settle(mr->mr_intent);
		mr->mr_intent = NULL;
		if (row > 0 && !mr->mr_refused &&
		    mr->mr_m->mm_fn == m_tools_call)
			mr->mr_audit = row;
	}
	audit_outcome(mr, "cancelled", 0);	/* a call that ran, only */
	if (mr->mr_stream != NULL && mr->mr_stream->st_http != 0)
		http_end(mr->mr_stream->st_http);
	else if (mr->mr_http != 0 && mr->mr_streaming)
		http_end(mr->mr_http);
	else if (mr->mr_http != 0)
		http_reply(mr->mr_http, 202, NULL, NULL);
	mr->mr_http = 0;
	req_free(mr);
}

/* notifications/cancelled {requestId}: a request of the same session. */
static void
n_cancelled(struct mcp_sess *ms, struct json_object *params)
{
	struct json_object	*rid;
	struct mcp_req		*mr;

	if (!json_object_object_get_ex(params, "requestId", &rid))
		return;
	TAILQ_FOREACH(mr, &reqs, mr_entry)
		if (mr->mr_sess == ms && !mr->mr_listen &&
		    json_object_equal(mr->mr_id, rid)) {
			log_debug("mcp: session %s cancelled a %s",
			    ms->ms_label, mr->mr_m->mm_name);
			req_cancel(mr);
			return;
		}
}

/* The methods we serve, and in which era. */
static const struct mcp_method mcp_methods[] = {
	{ "initialize", ERA_LEGACY, NULL, m_initialize },
	{ "ping", ERA_BOTH, NULL, m_ping },
	{ "server/discover", ERA_BOTH, NULL, m_discover },
	{ "logging/setLevel", ERA_LEGACY, NULL, m_set_level },
	{ "tools/list", ERA_BOTH, NULL, m_tools_list },
	{ "tools/call", ERA_BOTH, "name", m_tools_call },
	{ "resources/list", ERA_BOTH, NULL, m_list },
	{ "resources/templates/list", ERA_BOTH, NULL, m_list },
	{ "resources/read", ERA_BOTH, "uri", m_access },
	{ "resources/subscribe", ERA_LEGACY, NULL, m_subscribe },
	{ "resources/unsubscribe", ERA_LEGACY, NULL, m_unsubscribe },
	{ "prompts/list", ERA_BOTH, NULL, m_list },
	{ "prompts/get", ERA_BOTH, "name", m_access },
	{ "subscriptions/listen", ERA_MODERN, NULL, m_listen },
	{ NULL, 0, NULL, NULL }
};

static const struct mcp_method *
method_find(const char *name)
{
	const struct mcp_method *mm;

	for (mm = mcp_methods; mm->mm_name != NULL; mm++)
		if (strcmp(mm->mm_name, name) == 0)
			return mm;
	return NULL;
}

/* What the frontend relayed of the HTTP request. */
struct mcp_in {
	const char		*in_sid;	/* Mcp-Session-Id */
	const char		*in_version;	/* MCP-Protocol-Version */
	const char		*in_method;	/* Mcp-Method */
	const char		*in_name;	/* Mcp-Name */
	const char		*in_last;	/* Last-Event-ID */
	int			 in_sse;	/* Accept: text/event-stream */
	const char		*in_peer;
	struct json_object	*in_body;
};

static int
in_read(struct json_object *req, struct mcp_in *in)
{
	struct json_object *m = NULL;

	memset(in, 0, sizeof(*in));
	if (json_get_str(req, "peer", 63, 1, &in->in_peer) == -1)
		in->in_peer = NULL;
	(void)json_object_object_get_ex(req, "body", &in->in_body);
	if (json_object_object_get_ex(req, "mcp", &m) &&
	    !json_object_is_type(m, json_type_object))
		return -1;
	if (m == NULL)
		return 0;
	return json_get_str(m, "session", 128, 1, &in->in_sid) == -1 ||
	    json_get_str(m, "version", 32, 1, &in->in_version) == -1 ||
	    json_get_str(m, "method", 128, 1, &in->in_method) == -1 ||
	    json_get_str(m, "name", 8192, 1, &in->in_name) == -1 ||
	    json_get_str(m, "last_event", 128, 1, &in->in_last) == -1 ||
	    json_get_bool(m, "sse", 1, &in->in_sse) == -1 ? -1 : 0;
}

/* Mcp-Name as the client meant it: =?base64?...?= is decoded. */
static int
name_header(const char *h, char *out, size_t len)
{
	size_t	 n = strlen(h);
	char	 b[URI_MAX + 64];

	if (n >= 12 && strncmp(h, "=?base64?", 9) == 0 &&
	    strcmp(h + n - 2, "?=") == 0) {
		if (n - 11 >= sizeof(b))
			return -1;
		snprintf(b, sizeof(b), "%.*s", (int)(n - 11), h + 9);
		return b64_decode(b, out, len);
	}
	if (n >= len)
		return -1;
	snprintf(out, len, "%s", h);
	return 0;
}

/*
 * Mcp-Method and Mcp-Name say what the body says, or the request is
 * refused: whatever routed on the headers must have seen the truth.  A
 * 2026-07-28 request must carry them.
 */
static int
headers_match(uint64_t http, struct json_object *rid, const char *method,
    const struct mcp_method *mm, struct json_object *params,
    const struct mcp_in *in, int required)
{
	const char	*src = NULL;
	char		 name[URI_MAX + 1];

	if (in->in_method == NULL ? required :
	    strcmp(in->in_method, method) != 0) {
		http_rpc_error(http, 400, rid, RPC_HEADER_MISMATCH, NULL,
		    "Header mismatch: Mcp-Method %s%s%s does not match the "
		    "body's method %s", in->in_method != NULL ? "'" : "(none)",
		    in->in_method != NULL ? in->in_method : "",
		    in->in_method != NULL ? "'" : "", method);
		return 0;
	}
	if (mm != NULL && mm->mm_name_param != NULL)
		src = obj_str(params, mm->mm_name_param);
	if (in->in_name == NULL ? (required && src != NULL) : (src == NULL ||
	    name_header(in->in_name, name, sizeof(name)) == -1 ||
	    strcmp(name, src) != 0)) {
		http_rpc_error(http, 400, rid, RPC_HEADER_MISMATCH, NULL,
		    "Header mismatch: Mcp-Name does not match the body's %s",
		    mm != NULL && mm->mm_name_param != NULL ?
		    mm->mm_name_param : "method (it has no name)");
		return 0;
	}
	return 1;
}

static void
req_start(struct mcp_req *mr, const struct mcp_method *mm,
    struct json_object *rid, struct json_object *params,
    const struct mcp_in *in)
{
	mr->mr_m = mm;
	mr->mr_id = json_object_get(rid);
	mr->mr_params = params != NULL ? json_object_get(params) :
	    json_object_new_object();
	mr->mr_accept_sse = in->in_sse;
	/* Streams where something may come before the answer. */
	mr->mr_sse = in->in_sse && mm->mm_fn == m_tools_call;
	req_set_conv(mr);
	mm->mm_fn(mr);
}

static void
post_modern(uint64_t http, const struct store_user *u,
    const char *toolset, const struct mcp_in *in, const char *method,
    struct json_object *rid, struct json_object *params, const char *mv)
{
	const struct mcp_method	*mm = method_find(method);
	struct json_object	*data, *v;
	struct mcp_req		*mr;
	size_t			 i;

	if (in->in_version == NULL || mv == NULL || strcmp(in->in_version,
	    mv) != 0) {
		http_rpc_error(http, 400, rid, RPC_HEADER_MISMATCH, NULL,
		    "Header mismatch: MCP-Protocol-Version must be sent and "
		    "equal params._meta[\"" META_VERSION "\"]");
		return;
	}
	if (strcmp(mv, MODERN_VERSION) != 0) {
		data = json_object_new_object();
		v = json_object_new_array();
		json_object_array_add(v, json_object_new_string(
		    MODERN_VERSION));
		for (i = 0; legacy_versions[i] != NULL; i++)
			json_object_array_add(v, json_object_new_string(
			    legacy_versions[i]));
		json_object_object_add(data, "supported", v);
		json_object_object_add(data, "requested",
		    json_object_new_string(mv));
		http_rpc_error(http, 400, rid, RPC_VERSION, data,
		    "Unsupported protocol version");
		return;
	}
	if (!headers_match(http, rid, method, mm, params, in, 1))
		return;
	if (rid == NULL) {	/* nothing to answer; cancelling is hanging up */
		http_reply(http, 202, NULL, NULL);
		return;
	}
	if (mm == NULL || (mm->mm_eras & ERA_MODERN) == 0) {
		http_rpc_error(http, 404, rid, RPC_NO_METHOD, NULL,
		    "Method not found: %s", method);
		return;
	}
	if (!req_room(NULL)) {
		http_rpc_error(http, 503, rid, RPC_INTERNAL, NULL,
		    "too many requests in flight; try again later");
		return;
	}
	mr = req_new(http, u, toolset, in->in_peer);
	mr->mr_modern = 1;
	req_start(mr, mm, rid, params, in);
}

/* The caller's session, or an answer saying why there is none. */
static struct mcp_sess *
session_of(uint64_t http, const struct store_user *u, const char *toolset,
    const struct mcp_in *in, struct json_object *rid)
{
	struct mcp_sess *ms;

	if (in->in_sid == NULL) {
		http_rpc_error(http, 400, rid, RPC_INVALID, NULL, "Bad Request: "
		    "Mcp-Session-Id header is required (initialize first)");
		return NULL;
	}
	/* Another user's session is as unknown to this one as any. */
	if ((ms = sess_find(in->in_sid, u)) == NULL ||
	    strcmp(ms->ms_toolset, toolset) != 0) {
		(void)sess_foreign(in->in_sid, u, in->in_peer);
		http_rpc_error(http, 404, rid, RPC_NO_SESSION, NULL,
		    "Session not found");
		return NULL;
	}
	if (in->in_version != NULL && !legacy_version(in->in_version)) {
		http_rpc_error(http, 400, rid, RPC_INVALID, NULL, "Bad Request: "
		    "unsupported MCP-Protocol-Version %s", in->in_version);
		return NULL;
	}
	sess_touch(ms);
	return ms;
}

static void
post_legacy(uint64_t http, const struct store_user *u,
    const char *toolset, const struct mcp_in *in, const char *method,
    struct json_object *rid, struct json_object *params)
{
	const struct mcp_method	*mm = method != NULL ? method_find(method) :
				    NULL;
	struct mcp_sess		*ms = NULL;
	struct mcp_req		*mr;

	if (method != NULL && !headers_match(http, rid, method, mm, params,
	    in, 0))
		return;
	if (method == NULL || strcmp(method, "initialize") != 0 || rid == NULL)
		if ((ms = session_of(http, u, toolset, in, rid)) == NULL)
			return;
	if (method == NULL || rid == NULL) {
		/* A response to us (we ask nothing) or a notification. */
		if (method != NULL && strcmp(method,
		    "notifications/cancelled") == 0)
			n_cancelled(ms, params);
		http_reply(http, 202, NULL, NULL);
		return;
	}
	if (mm == NULL || (mm->mm_eras & ERA_LEGACY) == 0) {
		http_rpc_error(http, 200, rid, RPC_NO_METHOD, NULL,
		    "Method not found: %s", method);
		return;
	}
	if (!req_room(ms)) {
		http_rpc_error(http, 200, rid, RPC_INTERNAL, NULL,
		    "too many requests of this session in flight");
		return;
	}
	mr = req_new(http, u, toolset, in->in_peer);
	mr->mr_sess = ms;
	req_start(mr, mm, rid, params, in);
}

/*
 * A POST is one JSON-RPC message.  Its era is its own: the protocol
 * version in params._meta (or a modern MCP-Protocol-Version header) makes
 * it a 2026-07-28 request, anything else an initialize-era one.
 */
static void
mcp_post(uint64_t http, const struct store_user *u, const char *toolset,
    const struct mcp_in *in)
{
	struct json_object	*body = in->in_body, *rid = NULL;
	struct json_object	*params = NULL, *meta;
	const char		*v, *method, *mv = NULL;

	if (body == NULL) {
		http_rpc_error(http, 400, NULL, RPC_PARSE, NULL, "Parse error: "
		    "the body must be one JSON-RPC message");
		return;
	}
	if ((v = obj_str(body, "jsonrpc")) == NULL || strcmp(v, "2.0") != 0 ||
	    json_get_str(body, "method", 128, 1, &method) == -1 ||
	    (json_object_object_get_ex(body, "params", &params) &&
	    !json_object_is_type(params, json_type_object)) ||
	    (json_object_object_get_ex(body, "id", &rid) &&
	    !json_object_is_type(rid, json_type_string) &&
	    !json_object_is_type(rid, json_type_int)) ||
	    (method == NULL && rid == NULL)) {
		http_rpc_error(http, 400, NULL, RPC_INVALID, NULL, "Invalid "
		    "Request: not a JSON-RPC 2.0 request, notification or "
		    "response");
		return;
	}
	if (json_object_object_get_ex(params, "_meta", &meta))
		mv = obj_str(meta, META_VERSION);
	if (mv != NULL || (in->in_version != NULL &&
	    strcmp(in->in_version, MODERN_VERSION) == 0)) {
		if (method == NULL)
			http_rpc_error(http, 400, NULL, RPC_INVALID, NULL,
			    "Invalid Request: a client sends no responses");
		else
			post_modern(http, u, toolset, in, method, rid, params,
			    mv);
		return;
	}
	post_legacy(http, u, toolset, in, method, rid, params);
}

/* GET: a session's stream, or the rest of one after Last-Event-ID. */
static void
mcp_get(uint64_t http, const struct store_user *u, const char *toolset,
    const struct mcp_in *in)
{
	struct mcp_sess		*ms;
	struct mcp_stream	*st;
	struct mcp_req		*mr;
	unsigned long long	 no = 0, seq = 0;
	int			 n = 0;

	if (in->in_sid == NULL) {
		http_rpc_error(http, 405, NULL, RPC_INVALID, NULL, "GET is the "
		    "stream of a 2025-era session: send its Mcp-Session-Id "
		    "(2026-07-28 clients use subscriptions/listen)");
		return;
	}
	if ((ms = session_of(http, u, toolset, in, NULL)) == NULL)
		return;
	if (!in->in_sse) {
		http_rpc_error(http, 406, NULL, RPC_INVALID, NULL, "Not "
		    "Acceptable: the stream is text/event-stream");
		return;
	}
	if (in->in_last != NULL && (sscanf(in->in_last, "%llu-%llu%n", &no,
	    &seq, &n) != 2 || (size_t)n != strlen(in->in_last))) {
		http_rpc_error(http, 400, NULL, RPC_INVALID, NULL, "Bad Request: "
		    "Last-Event-ID is not one of this session's event ids");
		return;
	}
	http_stream_start(http);
	if (in->in_last != NULL)
		stream_replay(ms, no, seq, http);
	if ((st = stream_find(ms, no)) == NULL) {
		http_end(http);		/* that answer is complete */
		return;
	}
	if (st->st_http != 0)
		http_end(st->st_http);
	TAILQ_FOREACH(mr, &reqs, mr_entry)
		if (mr->mr_stream == st)
			mr->mr_http = 0;
	st->st_http = http;
}

static void
mcp_delete(uint64_t http, const struct store_user *u, const char *toolset,
    const struct mcp_in *in)
{
	struct mcp_sess *ms;

	if (in->in_sid == NULL) {
		http_rpc_error(http, 405, NULL, RPC_INVALID, NULL, "DELETE ends "
		    "a 2025-era session: send its Mcp-Session-Id");
		return;
	}
	if ((ms = session_of(http, u, toolset, in, NULL)) == NULL)
		return;
	sess_end(ms, "the client ended it");
	http_reply(http, 200, NULL, NULL);
}

void
mcp_http(uint64_t http, const struct store_user *u, const char *toolset,
    struct json_object *req)
{
	struct mcp_in	 in;
	const char	*method;

	if (json_get_str(req, "method", 8, 0, &method) == -1 ||
	    in_read(req, &in) == -1) {
		http_rpc_error(http, 400, NULL, RPC_INVALID, NULL,
		    "malformed request");
		return;
	}
	if (strchr(toolset, '/') != NULL || config_find_toolset(
	    controller_conf(), toolset) == NULL) {
		http_rpc_error(http, 404, NULL, RPC_INVALID, NULL, "no toolset "
		    "\"%.64s\" on this broker", toolset);
		return;
	}
	if (strcmp(method, "POST") == 0)
		mcp_post(http, u, toolset, &in);
	else if (strcmp(method, "GET") == 0)
		mcp_get(http, u, toolset, &in);
	else if (strcmp(method, "DELETE") == 0)
		mcp_delete(http, u, toolset, &in);
	else
		http_rpc_error(http, 405, NULL, RPC_INVALID, NULL,
		    "Method Not Allowed");
}

/*
 * The client hung up.  A 2025-era stream may be taken up again with
 * Last-Event-ID, so its request goes on; anything else is cancelled
 * (2026-07-28: hanging up is how one cancels).
 */
void
mcp_request_gone(uint64_t http)
{
	struct mcp_req		*mr, *next;
	struct mcp_sess		*ms;
	struct mcp_stream	*st;

	TAILQ_FOREACH_SAFE(mr, &reqs, mr_entry, next) {
		if (mr->mr_stream != NULL && mr->mr_stream->st_http == http)
			mr->mr_stream->st_http = 0;
		if (mr->mr_http != http)
			continue;
		mr->mr_http = 0;
		if (mr->mr_sess == NULL || !mr->mr_sse)
			req_cancel(mr);
	}
	TAILQ_FOREACH(ms, &sessions, ms_entry)
		TAILQ_FOREACH(st, &ms->ms_streams, st_entry)
			if (st->st_http == http)
				st->st_http = 0;
}

/* Toolsets gone take their sessions; lists may differ for everyone. */
void
mcp_reconfigure(void)
{
	struct mcp_sess		*ms, *next;
	struct tool_cache	*tk;

	tools_gen++;
	TAILQ_FOREACH_SAFE(ms, &sessions, ms_entry, next)
		if (config_find_toolset(controller_conf(), ms->ms_toolset) ==
		    NULL)
			sess_end(ms, "its toolset is gone");
	while ((tk = TAILQ_FIRST(&caches)) != NULL) {
		TAILQ_REMOVE(&caches, tk, tk_entry);
		cache_clear(tk);
		free(tk);
	}
	tell_list_changed(NULL, "notifications/tools/list_changed");
}

void
mcp_forget_user(const char *user, const char *tenant)
{
	struct mcp_sess	*ms, *snext;
	struct mcp_req	*mr, *rnext;

	TAILQ_FOREACH_SAFE(ms, &sessions, ms_entry, snext)
		if (strcmp(ms->ms_user, user) == 0 && strcmp(ms->ms_tenant,
		    tenant) == 0)
			sess_end(ms, "the user was deleted");
	TAILQ_FOREACH_SAFE(mr, &reqs, mr_entry, rnext)
		if (store_user_is(&mr->mr_user, user, tenant))
			req_cancel(mr);
}

/*
 * RFC 9728: what protects /mcp/TOOLSET, for clients that were told 401.
 * With auth { jwt } the authorization server is the token issuer; API
 * keys have none to name.
 */
void
mcp_resource_metadata(uint64_t id, const char *path, const char *host,
    int tls)
{
	static const char	 prefix[] =
				    "/.well-known/oauth-protected-resource/mcp/";
	const struct auth_conf	*au = &controller_conf()->c_auth;
	struct json_object	*r, *a;
	const char		*toolset;
	char			 origin[ORIGIN_MAX], res[ORIGIN_MAX + 80];
	char			 name[NAME_MAX_LEN + 24];

	if (strncmp(path, prefix, sizeof(prefix) - 1) != 0 ||
	    strchr(toolset = path + sizeof(prefix) - 1, '/') != NULL ||
	    config_find_toolset(controller_conf(), toolset) == NULL) {
		api_error(id, 404, "not_found", "no such resource");
		return;
	}
	if (host == NULL || websec_host_origin(tls, host, origin,
	    sizeof(origin)) == -1) {
		api_error(id, 400, "bad_request", "a Host header is needed");
		return;
	}
	snprintf(res, sizeof(res), "%s/mcp/%s", origin, toolset);
	snprintf(name, sizeof(name), "mcpbroker toolset %s", toolset);
	r = json_object_new_object();
	json_object_object_add(r, "resource", json_object_new_string(res));
	json_object_object_add(r, "resource_name", json_object_new_string(
	    name));
	a = json_object_new_array();
	json_object_array_add(a, json_object_new_string("header"));
	json_object_object_add(r, "bearer_methods_supported", a);
	if (au->au_jwt && au->au_jwt_conf.jw_issuer != NULL) {
		a = json_object_new_array();
		json_object_array_add(a, json_object_new_string(
		    au->au_jwt_conf.jw_issuer));
		json_object_object_add(r, "authorization_servers", a);
	}
	api_reply(id, 200, r);
}
