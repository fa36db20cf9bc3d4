/*
 * The conversation engine.  A session belongs to one user and holds the
 * chosen provider, model, tools and history.  A turn sends the history to
 * the LLM (streaming), relays its text as `token` events, runs the tool
 * calls it asks for in parallel through the workers, feeds the results
 * back, and repeats until the model answers or tool-rounds is reached.
 * Stop, or the client going away, cancels the LLM request and every tool
 * call in flight.
 */
#include <sys/queue.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <json-c/json.h>

#include "broker/chat.h"
#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_conv.h"
#include "broker/controller_metrics.h"
#include "broker/controller_store.h"
#include "broker/controller_usage.h"
#include "broker/mcpbroker.h"
#include "broker/providers/provider.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/util.h"
#include "policy/policy.h"

#define MAX_CALLS_PER_ROUND	16
#define MAX_ERROR_BODY		(64 * 1024)
#define MAX_TEXT		(1024 * 1024)	/* an answer */
#define LLM_CONNECT_MS		10000
/* Unless the provider block sets system-prompt. */
#define SYSTEM_PROMPT		"You are a helpful assistant. Use the tools " \
				"you are given when they help answer the user."
#define TRUNCATED_MARKER	"\n[... truncated by mcpbroker]"

/* A tool as the LLM sees it, and where it really lives. */
struct tool_map {
	char			*tm_name;	/* provider-facing */
	char			*tm_server;
	char			*tm_tool;
	char			*tm_description;
	struct json_object	*tm_schema;
};

enum verdict {
	V_RUN,
	V_ASK,		/* a confirm rule: the user approves first */
	V_REFUSE,
};

struct call {
	char			 c_id[64];	/* the provider's call id */
	struct tool_map		*c_map;		/* NULL: unknown tool */
	char			*c_name;
	char			*c_args;	/* JSON text from the model */
	uint64_t		 c_call;	/* controller call, or 0 */
	uint64_t		 c_start_ms;
	void			*c_ref;		/* our callback's argument */
	struct json_object	*c_pending;	/* args awaiting approval */
	struct event		*c_timer;	/* approval deadline */
	int64_t			 c_audit;	/* the intent row, or 0 */
	struct audit_async	*c_intent;	/* intent row being committed */
	struct audit_async	*c_outcome;	/* outcome row being committed */
	struct json_object	*c_decided;	/* its arguments, meanwhile */
	enum verdict		 c_verdict;	/* what follows the commit */
	int			 c_reloaded;	/* under old rules */
	char			*c_why;		/* a refusal, for the model */
	char			*c_output;	/* the result, for the model */
	int			 c_error;
	int			 c_done;
};

struct turn;

#define CALL_TOOL_ID_MAX	256	/* SERVER.TOOL */
#define MAX_ROLES	16

struct session {
	TAILQ_ENTRY(session)	 s_entry;
	char			 s_user[65];
	char			 s_tenant[65];
	char			 s_roles_buf[256];
	const char		*s_roles[MAX_ROLES];	/* into s_roles_buf */
	size_t			 s_nroles;
	char			 s_provider[64];
	char			 s_model[128];
	char			 s_toolset[64];
	int			 s_has_temperature;
	double			 s_temperature;
	int			 s_max_tokens;
	int			 s_streaming;
	struct tool_map		*s_tools;
	size_t			 s_ntools;
	struct chat_message	*s_history;
	size_t			 s_nhistory;
	char			 s_conversation[CONV_ID_LEN + 1];
	int			 s_stored;	/* the conversation has a row */
	struct turn		*s_turn;
};
TAILQ_HEAD(session_list, session);

struct turn {
	struct session		*t_s;
	uint64_t		 t_req;		/* the API request */
	int			 t_stream;
	unsigned int		 t_round;
	uint64_t		 t_start_ms;
	const struct provider_ops *t_ops;
	struct http_request	*t_http;
	struct provider_stream	*t_ps;
	int			 t_status;
	struct evbuffer		*t_text;	/* this round's answer */
	struct evbuffer		*t_errbody;
	struct call		 t_calls[MAX_CALLS_PER_ROUND];
	size_t			 t_ncalls;
	size_t			 t_pending;
	int			 t_too_many_calls;
	struct json_object	*t_used;	/* tools_used */
	struct json_object	*t_invocations;	/* tool_invocations */
	uint64_t		 t_in_tokens;	/* the turn's, all rounds */
	uint64_t		 t_out_tokens;
	uint64_t		 t_round_in;	/* this round's last report */
	uint64_t		 t_round_out;
	int			 t_recorded;	/* calls in history, no results */
	int			 t_round_reported; /* the provider counted */
	int			 t_round_metered;
	size_t			 t_round_sent;	/* request body bytes */
	double			 t_round_began;	/* metrics_now() */
};

static struct session_list	sessions = TAILQ_HEAD_INITIALIZER(sessions);

static void	round_start(struct turn *);
static void	round_results(struct turn *);
static struct audit_async *audit_outcome(struct turn *, struct call *,
	    const char *, audit_done_fn, void *);
static void	audit_forged(struct turn *, struct call *);
static int	audit_approval(struct turn *, struct call *, const char *,
		    const char *);
static void	approval_clear(struct call *);
static void	intent_abandon(struct turn *, struct call *);

/* ---- sessions ---- */

/* A user's session: a user is a name within a tenant. */
static struct session *
session_find(const char *user, const char *tenant)
{
	struct session *s;

	TAILQ_FOREACH(s, &sessions, s_entry)
		if (strcmp(s->s_user, user) == 0 &&
		    strcmp(s->s_tenant, tenant) == 0)
			return s;
	return NULL;
}

static void
message_clear(struct chat_message *m)
{
	size_t i;

	free(m->cm_content);
	for (i = 0; i < m->cm_ncalls; i++) {
		free(m->cm_calls[i].tc_id);
		free(m->cm_calls[i].tc_name);
		free(m->cm_calls[i].tc_arguments);
	}
	free(m->cm_calls);
	free(m->cm_call_id);
	free(m->cm_call_name);
	memset(m, 0, sizeof(*m));
}

static void
history_clear(struct session *s)
{
	size_t i;

	for (i = 0; i < s->s_nhistory; i++)
		message_clear(&s->s_history[i]);
	free(s->s_history);
	s->s_history = NULL;
	s->s_nhistory = 0;
}

static void
tools_clear(struct session *s)
{
	size_t i;

	for (i = 0; i < s->s_ntools; i++) {
		free(s->s_tools[i].tm_name);
		free(s->s_tools[i].tm_server);
		free(s->s_tools[i].tm_tool);
		free(s->s_tools[i].tm_description);
		json_object_put(s->s_tools[i].tm_schema);
	}
	free(s->s_tools);
	s->s_tools = NULL;
	s->s_ntools = 0;
}

static char *
xstrdup(const char *s)
{
	char *d;

	if (s == NULL)
		return NULL;
	if ((d = strdup(s)) == NULL)
		fatal("strdup");
	return d;
}

static struct chat_message *
history_add(struct session *s, enum chat_role role, const char *content)
{
	struct chat_message *m;

	s->s_history = reallocarray(s->s_history, s->s_nhistory + 1,
	    sizeof(*s->s_history));
	if (s->s_history == NULL)
		fatal("reallocarray");
	m = &s->s_history[s->s_nhistory++];
	memset(m, 0, sizeof(*m));
	m->cm_role = role;
	m->cm_content = xstrdup(content);
	return m;
}

/*
 * Keep the last history-messages messages, cut at a user message so that
 * no tool result is left without the call it answers.
 */
static void
history_trim(struct session *s)
{
	unsigned int	max = controller_conf()->c_limits.lm_history_messages;
	size_t		cut, i;

	if (s->s_nhistory <= max)
		return;
	for (cut = s->s_nhistory - max; cut < s->s_nhistory &&
	    s->s_history[cut].cm_role != ROLE_USER; cut++)
		;
	for (i = 0; i < cut; i++)
		message_clear(&s->s_history[i]);
	memmove(s->s_history, s->s_history + cut,
	    (s->s_nhistory - cut) * sizeof(*s->s_history));
	s->s_nhistory -= cut;
	log_debug("chat %s: history trimmed to %zu messages", s->s_user,
	    s->s_nhistory);
}

/* ---- stored conversations ---- */

/* The conversation's row, made with its first message. */
static int
session_store(struct session *s)
{
	struct conv_meta	cv;

	memset(&cv, 0, sizeof(cv));
	snprintf(cv.cv_id, sizeof(cv.cv_id), "%s", s->s_conversation);
	snprintf(cv.cv_user, sizeof(cv.cv_user), "%s", s->s_user);
	snprintf(cv.cv_tenant, sizeof(cv.cv_tenant), "%s", s->s_tenant);
	snprintf(cv.cv_provider, sizeof(cv.cv_provider), "%s", s->s_provider);
	snprintf(cv.cv_model, sizeof(cv.cv_model), "%s", s->s_model);
	snprintf(cv.cv_toolset, sizeof(cv.cv_toolset), "%s", s->s_toolset);
	if (conv_create(&cv) == -1) {
		log_warnx("chat %s: conversation %s could not be stored",
		    s->s_user, s->s_conversation);
		return -1;
	}
	s->s_stored = 1;
	return 0;
}

/*
 * Every message is stored as it joins the history.  A database that
 * fails loses the stored copy, not the chat: it is logged and goes on.
 */
static void
history_store(struct session *s, const struct chat_message *m)
{
	if (s->s_stored || session_store(s) == 0)
		(void)conv_append(s->s_conversation, m,
		    controller_conf()->c_store_tool_results);
}

/* Go on with a stored conversation: its last history-messages messages. */
static void
session_resume(struct session *s, const char *id)
{
	snprintf(s->s_conversation, sizeof(s->s_conversation), "%s", id);
	s->s_stored = 1;
	if (conv_load(id, controller_conf()->c_limits.lm_history_messages,
	    &s->s_history, &s->s_nhistory) == -1)
		log_warnx("chat %s: conversation %s could not be read; it goes "
		    "on without its history", s->s_user, id);
	(void)conv_resume(id, s->s_provider, s->s_model, s->s_toolset);
}

/* A new conversation in the same session (not stored until it is used). */
static void
session_new_conversation(struct session *s)
{
	char owner[OWNER_MAX];

	if (s->s_conversation[0] != '\0')
		controller_release(owner_key(s->s_user, s->s_tenant,
		    owner), s->s_conversation);
	conv_id_new(s->s_conversation);
	s->s_stored = 0;
}

/* ---- tools ---- */

/* SERVER.TOOL as [A-Za-z0-9_-]{1,64}: SERVER__TOOL, unique. */
static char *
provider_name(struct session *s, const char *server, const char *tool)
{
	char	name[65], *c;
	size_t	i, n;
	int	k;

	snprintf(name, sizeof(name), "%s__%s", server, tool);
	for (c = name; *c != '\0'; c++)
		if (!isalnum((unsigned char)*c) && *c != '_' && *c != '-')
			*c = '_';
	n = strlen(name);
	for (k = 2; k < 100; k++) {
		for (i = 0; i < s->s_ntools; i++)
			if (strcmp(s->s_tools[i].tm_name, name) == 0)
				break;
		if (i == s->s_ntools)
			return xstrdup(name);
		snprintf(name + (n > 60 ? 60 : n), 5, "_%d", k);
	}
	return NULL;
}

static int
glob_match(const char *pat, const char *s)
{
	if (*pat == '\0')
		return *s == '\0';
	if (*pat == '*')
		return glob_match(pat + 1, s) || (*s != '\0' &&
		    glob_match(pat, s + 1));
	return *s != '\0' && (*pat == '?' || *pat == *s) &&
	    glob_match(pat + 1, s + 1);
}

static int
in_toolset(const struct toolset_conf *ts, const char *id)
{
	size_t i;

	if (ts == NULL)
		return 1;
	for (i = 0; i < ts->ts_ntools; i++)
		if (glob_match(ts->ts_tools[i], id))
			return 1;
	return 0;
}

static void
add_tool(struct session *s, const char *server, struct json_object *t)
{
	struct json_object	*name, *desc, *schema;
	struct tool_map		*tm;

	if (!json_object_object_get_ex(t, "name", &name) ||
	    !json_object_object_get_ex(t, "inputSchema", &schema))
		return;
	s->s_tools = reallocarray(s->s_tools, s->s_ntools + 1,
	    sizeof(*s->s_tools));
	if (s->s_tools == NULL)
		fatal("reallocarray");
	tm = &s->s_tools[s->s_ntools];
	if ((tm->tm_name = provider_name(s, server,
	    json_object_get_string(name))) == NULL)
		return;
	tm->tm_server = xstrdup(server);
	tm->tm_tool = xstrdup(json_object_get_string(name));
	tm->tm_description = xstrdup(json_object_object_get_ex(t,
	    "description", &desc) ? json_object_get_string(desc) : "");
	tm->tm_schema = json_object_get(schema);
	s->s_ntools++;
}

static void
session_caller(const struct session *s, struct policy_caller *pc)
{
	pc->ps_user = s->s_user;
	pc->ps_tenant = s->s_tenant;
	pc->ps_roles = s->s_roles;
	pc->ps_nroles = s->s_nroles;
}

/* Listing: the tool is shown if some call of it may be allowed. */
static int
policy_shows(const struct session *s, const char *id)
{
	struct policy_caller	pc;
	struct policy_decision	pd;

	session_caller(s, &pc);
	policy_decide(&controller_conf()->c_rules, &pc, id, NULL,
	    monotonic_ms(), &pd);
	return pd.pd_action != POLICY_DENY;
}

/* The tools of the session's toolset (all tools without one) that the
 * policy lets this caller see, less those withheld by their pins. */
static void
tools_collect(struct session *s)
{
	const struct toolset_conf	*ts;
	const struct server_conf	*srv;
	struct worker_link		*wl;
	struct json_object		*tools, *tool, *name;
	char				 id[256];
	size_t				 i;

	tools_clear(s);
	ts = config_find_toolset(controller_conf(), s->s_toolset);
	TAILQ_FOREACH(srv, &controller_conf()->c_servers, srv_entry) {
		if ((wl = controller_worker(srv->srv_name)) == NULL ||
		    (tools = controller_worker_tools(wl)) == NULL)
			continue;
		for (i = 0; i < json_object_array_length(tools); i++) {
			tool = json_object_array_get_idx(tools, i);
			if (!json_object_object_get_ex(tool, "name", &name))
				continue;
			snprintf(id, sizeof(id), "%s.%s", srv->srv_name,
			    json_object_get_string(name));
			if (in_toolset(ts, id) && policy_shows(s, id) &&
			    controller_tool_usable(srv->srv_name,
			    json_object_get_string(name)))
				add_tool(s, srv->srv_name, tool);
		}
	}
}

static struct tool_map *
tool_lookup(struct session *s, const char *name)
{
	size_t i;

	for (i = 0; i < s->s_ntools; i++)
		if (strcmp(s->s_tools[i].tm_name, name) == 0)
			return &s->s_tools[i];
	return NULL;
}

static struct json_object *
tools_json(struct session *s)
{
	struct json_object	*arr = json_object_new_array(), *t;
	size_t			 i;

	for (i = 0; i < s->s_ntools; i++) {
		t = json_object_new_object();
		json_object_object_add(t, "name", json_object_new_string(
		    s->s_tools[i].tm_name));
		json_object_object_add(t, "server", json_object_new_string(
		    s->s_tools[i].tm_server));
		json_object_object_add(t, "tool", json_object_new_string(
		    s->s_tools[i].tm_tool));
		json_object_object_add(t, "description",
		    json_object_new_string(s->s_tools[i].tm_description));
		json_object_object_add(t, "input_schema",
		    json_object_get(s->s_tools[i].tm_schema));
		json_object_array_add(arr, t);
	}
	return arr;
}

/* ---- turns ---- */

static void
turn_event(struct turn *t, const char *event, struct json_object *data)
{
	if (t->t_stream)
		api_event(t->t_req, event, data);
	else
		json_object_put(data);
}

/* ---- metering and budgets ---- */

/* The model the session's requests name. */
static const char *
session_model(const struct session *s)
{
	const struct provider_conf *pv;

	if (s->s_model[0] != '\0')
		return s->s_model;
	pv = config_find_provider(controller_conf(), s->s_provider);
	return pv != NULL && pv->pv_model != NULL ? pv->pv_model : "";
}

static void
session_who(const struct session *s, struct usage_who *w)
{
	w->uw_user = s->s_user;
	w->uw_tenant = s->s_tenant;
	w->uw_roles = s->s_roles;
	w->uw_nroles = s->s_nroles;
}

/* What the model sent back this round, in bytes: for an estimate. */
static size_t
answer_bytes(const struct turn *t)
{
	size_t	n = evbuffer_get_length(t->t_text), i;

	for (i = 0; i < t->t_ncalls; i++) {
		if (t->t_calls[i].c_name != NULL)
			n += strlen(t->t_calls[i].c_name);
		if (t->t_calls[i].c_args != NULL)
			n += strlen(t->t_calls[i].c_args);
	}
	return n;
}

static void
budget_crossed(const struct budget_status *bs, void *arg)
{
	turn_event(arg, "budget_warning", budget_status_json(bs));
}

/*
 * The round's LLM call, metered once: the provider's count, or when it
 * gave none an estimate from the bytes each way, marked as such.  A call
 * cut short is metered too (providers bill what they streamed).  live:
 * the client can still be told of budgets the call took past a mark.
 */
static void
round_meter(struct turn *t, int live)
{
	struct session		*s = t->t_s;
	struct usage_who	 w;
	struct usage_call	 uc;

	if (t->t_round_metered)
		return;
	t->t_round_metered = 1;
	if (!t->t_round_reported) {
		t->t_round_in = usage_estimate(t->t_round_sent);
		t->t_round_out = usage_estimate(answer_bytes(t));
	}
	session_who(s, &w);
	memset(&uc, 0, sizeof(uc));
	uc.uc_conversation = s->s_stored ? s->s_conversation : NULL;
	uc.uc_provider = s->s_provider;
	uc.uc_model = s->s_model;
	uc.uc_input = t->t_round_in;
	uc.uc_output = t->t_round_out;
	uc.uc_estimated = !t->t_round_reported;
	uc.uc_tool_calls = (unsigned int)t->t_ncalls;
	uc.uc_cost_nusd = usage_cost_nusd(config_find_provider(
	    controller_conf(), s->s_provider), uc.uc_input, uc.uc_output);
	uc.uc_when = time(NULL);
	cmetrics_llm_tokens(s->s_provider, session_model(s), uc.uc_input,
	    uc.uc_output);
	(void)usage_record(controller_conf(), &w, &uc, live ? budget_crossed :
	    NULL, t);
}

/* 0: room; BUDGET_OVER (*bs says which) or BUDGET_UNKNOWN. */
static int
budget_over(const struct session *s, struct budget_status *bs)
{
	struct usage_who	w;

	int			r;

	session_who(s, &w);
	if ((r = budget_check(controller_conf(), &w, time(NULL), bs)) ==
	    BUDGET_OVER)
		cmetrics_budget_rejection(budget_scope_str(
		    bs->bs_budget->bg_scope));
	return r;
}

#define BUDGET_UNKNOWN_MSG	"usage could not be read to check the " \
				"budget, so nothing was sent; try again"

/* {code: "budget_exceeded", message, scope, name, metric, used, limit,
 * resets_at} */
static struct json_object *
budget_error(const struct session *s, const struct budget_status *bs)
{
	struct json_object	*e = budget_status_json(bs);
	char			 msg[256];

	snprintf(msg, sizeof(msg), "the %s budget of %s \"%s\" is used up; "
	    "the conversation is kept for when it resets",
	    budget_metric_str(bs->bs_budget->bg_metric),
	    budget_scope_str(bs->bs_budget->bg_scope),
	    bs->bs_budget->bg_subject);
	json_object_object_add(e, "code", json_object_new_string(
	    "budget_exceeded"));
	json_object_object_add(e, "message", json_object_new_string(msg));
	log_info("chat %s: %s", s->s_user, msg);
	return e;
}

static void
turn_free(struct turn *t)
{
	size_t i;

	/*
	 * A call cut short costs too, and so does one stopped before its
	 * answer began: the provider has the prompt and bills what it read.
	 */
	if (t->t_status / 100 == 2 || (t->t_status == 0 &&
	    http_request_sent(t->t_http)))
		round_meter(t, 0);
	http_request_cancel(t->t_http);
	if (t->t_ps != NULL)
		t->t_ops->po_stream_free(t->t_ps);
	round_results(t);
	for (i = 0; i < t->t_ncalls; i++) {
		if (t->t_calls[i].c_call != 0 && !t->t_calls[i].c_done) {
			controller_cancel_call(t->t_calls[i].c_call);
			free(t->t_calls[i].c_ref);
			(void)audit_outcome(t, &t->t_calls[i], "cancelled", NULL,
			    NULL);
		}
		if (t->t_calls[i].c_pending != NULL)	/* still asking */
			approval_clear(&t->t_calls[i]);
		if (t->t_calls[i].c_intent != NULL)	/* not sent yet */
			intent_abandon(t, &t->t_calls[i]);
		if (t->t_calls[i].c_outcome != NULL) {	/* not told yet */
			(void)audit_settle(t->t_calls[i].c_outcome);
			free(t->t_calls[i].c_ref);
		}
		free(t->t_calls[i].c_why);
		free(t->t_calls[i].c_name);
		free(t->t_calls[i].c_args);
		free(t->t_calls[i].c_output);
	}
	evbuffer_free(t->t_text);
	evbuffer_free(t->t_errbody);
	json_object_put(t->t_used);
	json_object_put(t->t_invocations);
	if (t->t_s->s_turn == t)
		t->t_s->s_turn = NULL;
	free(t);
}

/*
 * The turn ends in an error.  A stream that has started gets an `error`
 * event; otherwise the request gets the HTTP status that says what failed.
 */
static void
turn_fail(struct turn *t, int status, const char *code, int recoverable,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void
turn_fail(struct turn *t, int status, const char *code, int recoverable,
    const char *fmt, ...)
{
	struct json_object	*e;
	char			 msg[1024];
	va_list			 ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_info("chat %s: %s", t->t_s->s_user, msg);
	if (t->t_stream) {
		e = json_object_new_object();
		json_object_object_add(e, "message", json_object_new_string(msg));
		json_object_object_add(e, "code", json_object_new_string(code));
		json_object_object_add(e, "recoverable",
		    json_object_new_boolean(recoverable));
		api_event(t->t_req, "error", e);
		api_stream_end(t->t_req);
	} else
		api_error(t->t_req, status, code, "%s", msg);
	turn_free(t);
}

/*
 * A budget used up between two rounds: the turn ends as any failed turn
 * does, its history whole, the conversation kept; 429 when the answer
 * does not stream.
 */
static void
turn_budget_fail(struct turn *t, const struct budget_status *bs)
{
	struct json_object *e = budget_error(t->t_s, bs), *body;

	if (t->t_stream) {
		json_object_object_add(e, "recoverable",
		    json_object_new_boolean(0));
		api_event(t->t_req, "error", e);
		api_stream_end(t->t_req);
	} else {
		body = json_object_new_object();
		json_object_object_add(body, "error", e);
		api_reply(t->t_req, 429, body);
	}
	turn_free(t);
}

static struct json_object *
usage_json(struct turn *t)
{
	struct json_object *u = json_object_new_object();

	json_object_object_add(u, "input_tokens",
	    json_object_new_int64(t->t_in_tokens));
	json_object_object_add(u, "output_tokens",
	    json_object_new_int64(t->t_out_tokens));
	return u;
}

static void
turn_final(struct turn *t)
{
	struct json_object	*f = json_object_new_object();
	size_t			 len = evbuffer_get_length(t->t_text);

	json_object_object_add(f, "content", json_object_new_string_len(
	    (const char *)evbuffer_pullup(t->t_text, len), len));
	json_object_object_add(f, "tools_used", json_object_get(t->t_used));
	json_object_object_add(f, "tool_invocations",
	    json_object_get(t->t_invocations));
	json_object_object_add(f, "elapsed_ms", json_object_new_int64(
	    monotonic_ms() - t->t_start_ms));
	json_object_object_add(f, "usage", usage_json(t));
	json_object_object_add(f, "conversation_id",
	    json_object_new_string(t->t_s->s_conversation));
	if (t->t_stream) {
		api_event(t->t_req, "final", f);
		api_stream_end(t->t_req);
	} else
		api_reply(t->t_req, 200, f);
	turn_free(t);
}

/* ---- the model's output ---- */

static void
ev_text(void *arg, const char *text, size_t len)
{
	struct turn		*t = arg;
	struct json_object	*o;

	if (evbuffer_get_length(t->t_text) + len > MAX_TEXT)
		return;
	evbuffer_add(t->t_text, text, len);
	if (t->t_stream && len > 0) {
		o = json_object_new_object();
		json_object_object_add(o, "content",
		    json_object_new_string_len(text, len));
		api_event(t->t_req, "token", o);
	}
}

static void
ev_tool_call(void *arg, const char *id, const char *name, const char *args)
{
	struct turn	*t = arg;
	struct call	*c;

	if (t->t_ncalls == MAX_CALLS_PER_ROUND) {
		t->t_too_many_calls = 1;
		return;
	}
	c = &t->t_calls[t->t_ncalls++];
	memset(c, 0, sizeof(*c));
	if (id != NULL && *id != '\0')
		snprintf(c->c_id, sizeof(c->c_id), "%s", id);
	else
		snprintf(c->c_id, sizeof(c->c_id), "call_%u_%zu", t->t_round,
		    t->t_ncalls);
	c->c_name = xstrdup(name);
	c->c_args = xstrdup(args != NULL && *args != '\0' ? args : "{}");
	c->c_map = tool_lookup(t->t_s, name);
}

static void
ev_usage(void *arg, uint64_t in, uint64_t out)
{
	struct turn *t = arg;

	/* Reports within a round are running totals: the last one counts. */
	t->t_round_in = in;
	t->t_round_out = out;
	t->t_round_reported = 1;
}

static void
ev_finish(void *arg, const char *reason)
{
	(void)arg;
	(void)reason;
}

static const struct provider_events events = {
	ev_text, ev_tool_call, ev_usage, ev_finish
};

/* ---- tool calls ---- */

static void	round_after_tools(struct turn *);

/*
 * What the model gets back from a tool: its text parts (other parts named
 * by type), cut at max-result-bytes with a marker that says so.
 */
static char *
result_text(struct json_object *result)
{
	struct json_object	*content, *c, *type, *text;
	struct evbuffer		*b = evbuffer_new();
	uint64_t		 max = controller_conf()->c_limits.
				    lm_max_result_bytes;
	unsigned char		*p;
	char			*out;
	size_t			 i, len;
	int			 truncated;

	if (b == NULL)
		fatal("evbuffer_new");
	/* The worker checks the shape; a compromised one is not trusted to. */
	if (json_object_object_get_ex(result, "content", &content) &&
	    json_object_is_type(content, json_type_array))
		for (i = 0; i < json_object_array_length(content) &&
		    evbuffer_get_length(b) <= max; i++) {
			c = json_object_array_get_idx(content, i);
			if (!json_object_object_get_ex(c, "type", &type))
				continue;
			if (json_object_object_get_ex(c, "text", &text))
				evbuffer_add_printf(b, "%s%s", i ? "\n" : "",
				    json_object_get_string(text));
			else
				evbuffer_add_printf(b, "%s[%s content]",
				    i ? "\n" : "", json_object_get_string(type));
		}
	len = evbuffer_get_length(b);
	p = evbuffer_pullup(b, -1);
	truncated = len > max;
	if (truncated) {
		/* Cut before a UTF-8 continuation byte, not inside a character. */
		for (len = max; len > 0 && (p[len] & 0xc0) == 0x80; len--)
			;
	}
	if ((out = malloc(len + sizeof(TRUNCATED_MARKER))) == NULL)
		fatal("malloc");
	if (len > 0)
		memcpy(out, p, len);
	if (truncated)
		memcpy(out + len, TRUNCATED_MARKER, sizeof(TRUNCATED_MARKER));
	else
		out[len] = '\0';
	evbuffer_free(b);
	return out;
}

static void
invocation_add(struct turn *t, struct call *c)
{
	struct json_object *inv = json_object_new_object();

	json_object_object_add(inv, "id", json_object_new_string(c->c_id));
	json_object_object_add(inv, "tool", json_object_new_string(c->c_map ?
	    c->c_map->tm_tool : c->c_name));
	json_object_object_add(inv, "server", json_object_new_string(
	    c->c_map ? c->c_map->tm_server : ""));
	json_object_object_add(inv, "input", json_object_new_string(
	    c->c_args));
	json_object_object_add(inv, "output", json_object_new_string(
	    c->c_output));
	json_object_object_add(inv, "is_error",
	    json_object_new_boolean(c->c_error));
	json_object_object_add(inv, "elapsed_ms", json_object_new_int64(
	    monotonic_ms() - c->c_start_ms));
	json_object_array_add(t->t_invocations, inv);
}

struct call_ref {
	struct turn	*cr_turn;
	size_t		 cr_index;
};

/* The call's end, on record: now the user and the model may know it. */
static void
call_report(struct turn *t, struct call *c)
{
	struct json_object	*o = json_object_new_object();
	const char		*output = c->c_output;
	int			 error = c->c_error;

	json_object_object_add(o, "id", json_object_new_string(c->c_id));
	json_object_object_add(o, "tool", json_object_new_string(c->c_map ?
	    c->c_map->tm_tool : c->c_name));
	if (error) {
		json_object_object_add(o, "error",
		    json_object_new_string(output));
		json_object_object_add(o, "timestamp",
		    json_object_new_int64((int64_t)time(NULL)));
		turn_event(t, "tool_error", o);
	} else {
		json_object_object_add(o, "output",
		    json_object_new_string(output));
		json_object_object_add(o, "elapsed_ms", json_object_new_int64(
		    monotonic_ms() - c->c_start_ms));
		turn_event(t, "tool_end", o);
	}
	invocation_add(t, c);
	if (--t->t_pending == 0)
		round_after_tools(t);
}

static void
outcome_recorded(int64_t id, void *arg)
{
	struct call_ref	 cr = *(struct call_ref *)arg;
	struct call	*c = &cr.cr_turn->t_calls[cr.cr_index];

	free(arg);
	c->c_ref = NULL;
	c->c_outcome = NULL;
	if (id == -1)
		log_warnx("chat %s: the outcome of a call was not recorded",
		    cr.cr_turn->t_s->s_user);
	call_report(cr.cr_turn, c);
}

/*
 * A call that ran has its outcome row go to the next group commit, and
 * nobody hears its result before the row is written (outcome_recorded);
 * one refused before it ran has no outcome row and is reported at once.
 */
static void
call_finish(struct turn *t, struct call *c, const char *output, int error)
{
	struct call_ref *cr;

	c->c_done = 1;
	c->c_output = xstrdup(output);
	c->c_error = error;
	if (c->c_audit <= 0) {
		call_report(t, c);
		return;
	}
	if ((cr = malloc(sizeof(*cr))) == NULL)
		fatal("malloc");
	cr->cr_turn = t;
	cr->cr_index = (size_t)(c - t->t_calls);
	c->c_ref = cr;
	c->c_outcome = audit_outcome(t, c, error ? "error" : "ok",
	    outcome_recorded, cr);
}

static void
call_done(struct json_object *result, struct json_object *error, void *arg)
{
	struct call_ref		 cr = *(struct call_ref *)arg;
	struct call		*c = &cr.cr_turn->t_calls[cr.cr_index];
	struct json_object	*v;
	char			*text;
	int			 is_error = 0;

	free(arg);
	c->c_ref = NULL;
	if (error != NULL) {
		call_finish(cr.cr_turn, c, json_object_object_get_ex(error,
		    "message", &v) ? json_object_get_string(v) :
		    "the tool call failed", 1);
		return;
	}
	if (json_object_object_get_ex(result, "isError", &v))
		is_error = json_object_get_boolean(v);
	text = result_text(result);
	call_finish(cr.cr_turn, c, text, is_error);
	free(text);
}

static const char *
action_str(enum policy_action a)
{
	return a == POLICY_ALLOW ? "allow" : a == POLICY_CONFIRM ? "confirm" :
	    "deny";
}

/*
 * Hex SHA-256 of the arguments in the compact form the row's "arguments"
 * has before masking: whoever holds a masked value can put it back in and
 * show that it is the one the call carried.
 */
static void
args_digest(const char *text, char out[SHA256_HEX_LEN + 1])
{
	sha256_hex(text, strlen(text), out);
}

static void	intent_recorded(int64_t, void *);

/*
 * The decision, on record before anything runs: queued for the next
 * group commit, and the call goes on in intent_recorded.  Arguments whose
 * keys the audit block masks are "***" in the row, not in the digest.
 */
static struct audit_async *
audit_intent(struct turn *t, struct call *c, struct json_object *args,
    const struct policy_decision *pd, void *ref)
{
	const struct audit_conf	*ac = &controller_conf()->c_audit;
	struct json_object	*d = json_object_new_object();
	struct audit_async	*a;
	char			 digest[65], rule[300];

	args_digest(json_object_to_json_string_ext(args,
	    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE), digest);
	json_object_object_add(d, "conversation",
	    json_object_new_string(t->t_s->s_conversation));
	json_object_object_add(d, "server",
	    json_object_new_string(c->c_map->tm_server));
	json_object_object_add(d, "tool",
	    json_object_new_string(c->c_map->tm_tool));
	json_object_object_add(d, "decision",
	    json_object_new_string(action_str(pd->pd_action)));
	if (pd->pd_rule != NULL) {
		snprintf(rule, sizeof(rule), "%s:%d", pd->pd_rule->pr_file,
		    pd->pd_rule->pr_line);
		json_object_object_add(d, "rule", json_object_new_string(rule));
	}
	json_object_object_add(d, "reason",
	    json_object_new_string(pd->pd_reason));
	json_object_object_add(d, "arguments_sha256",
	    json_object_new_string(digest));
	json_object_object_add(d, "arguments", audit_mask(args, ac->ac_mask,
	    ac->ac_nmask, NULL));
	a = audit_append_async(AUDIT_KIND_CALL, t->t_s->s_user,
	    t->t_s->s_tenant, d, intent_recorded, ref);
	json_object_put(d);
	return a;
}

/* The model asked for a tool this session was never offered. */
static void
audit_forged(struct turn *t, struct call *c)
{
	struct json_object *d = json_object_new_object();

	json_object_object_add(d, "conversation",
	    json_object_new_string(t->t_s->s_conversation));
	json_object_object_add(d, "name", json_object_new_string(c->c_name));
	json_object_object_add(d, "decision", json_object_new_string("deny"));
	json_object_object_add(d, "reason", json_object_new_string(
	    "not a tool offered to this session"));
	if (audit_append(AUDIT_KIND_CALL, t->t_s->s_user, t->t_s->s_tenant,
	    d) == -1)
		log_warnx("chat %s: a refused call was not recorded",
		    t->t_s->s_user);
	json_object_put(d);
}

/*
 * The user's answer to an approval request, tied to the intent row; -1
 * when it could not be written (then an approved call does not run).
 */
static int
audit_approval(struct turn *t, struct call *c, const char *answer,
    const char *reason)
{
	struct json_object	*d = json_object_new_object();
	int64_t			 rc;

	json_object_object_add(d, "intent", json_object_new_int64(c->c_audit));
	json_object_object_add(d, "answer", json_object_new_string(answer));
	if (reason != NULL)
		json_object_object_add(d, "reason", json_object_new_string(
		    reason));
	if ((rc = audit_append(AUDIT_KIND_APPROVAL, t->t_s->s_user,
	    t->t_s->s_tenant, d)) == -1)
		log_warnx("chat %s: an approval was not recorded",
		    t->t_s->s_user);
	json_object_put(d);
	return rc == -1 ? -1 : 0;
}

/*
 * How a call that ran ended, tied to its intent row: with done, queued for
 * the group commit (done runs once it is written); without, written now.
 */
static struct audit_async *
audit_outcome(struct turn *t, struct call *c, const char *outcome,
    audit_done_fn done, void *arg)
{
	struct audit_async	*a = NULL;
	struct json_object	*d;

	if (c->c_audit <= 0)
		return NULL;
	d = json_object_new_object();
	json_object_object_add(d, "intent", json_object_new_int64(c->c_audit));
	json_object_object_add(d, "outcome", json_object_new_string(outcome));
	cmetrics_tool_call(c->c_map->tm_server, c->c_map->tm_tool, outcome,
	    monotonic_ms() - c->c_start_ms);
	json_object_object_add(d, "elapsed_ms", json_object_new_int64(
	    monotonic_ms() - c->c_start_ms));
	json_object_object_add(d, "result_bytes", json_object_new_int64(
	    c->c_output != NULL ? (int64_t)strlen(c->c_output) : 0));
	if (done != NULL)
		a = audit_append_async(AUDIT_KIND_RESULT, t->t_s->s_user,
		    t->t_s->s_tenant, d, done, arg);
	else if (audit_append(AUDIT_KIND_RESULT, t->t_s->s_user,
	    t->t_s->s_tenant, d) == -1)
		log_warnx("chat %s: the outcome of audit row %" PRId64 " was not "
		    "recorded", t->t_s->s_user, c->c_audit);
	json_object_put(d);
	c->c_audit = 0;
	return a;
}

/*
 * What the rules in force say of this call, with its arguments (rates
 * counted): its SERVER.TOOL in id, the decision in pd.  A tool offered at
 * connect and withheld since is denied (the new definition waits): 1.
 */
static int
call_policy(struct turn *t, struct call *c, struct json_object *args,
    char id[CALL_TOOL_ID_MAX], struct policy_decision *pd)
{
	struct policy_caller	pc;

	snprintf(id, CALL_TOOL_ID_MAX, "%s.%s", c->c_map->tm_server,
	    c->c_map->tm_tool);
	if (!controller_tool_usable(c->c_map->tm_server, c->c_map->tm_tool)) {
		controller_tool_withheld(pd);
		return 1;
	}
	session_caller(t->t_s, &pc);
	policy_decide(&controller_conf()->c_rules, &pc, id, args,
	    monotonic_ms(), pd);
	return 0;
}

/*
 * The decision for this very call (arguments, rate limits).  A confirm
 * rule holds the call for the user's approval on a stream; a JSON answer
 * has no way to ask, so there the call is refused.  Nothing happens until
 * the intent row is committed (intent_recorded).
 */
static void
call_decide(struct turn *t, size_t i, struct json_object *args)
{
	struct call		*c = &t->t_calls[i];
	struct policy_decision	 pd;
	struct call_ref		*cr;
	char			 id[CALL_TOOL_ID_MAX], why[512];
	int			 withheld;

	withheld = call_policy(t, c, args, id, &pd);
	if (pd.pd_action == POLICY_ALLOW)
		c->c_verdict = V_RUN;
	else if (pd.pd_action == POLICY_CONFIRM && t->t_stream)
		c->c_verdict = V_ASK;
	else {
		c->c_verdict = V_REFUSE;
		if (pd.pd_action == POLICY_CONFIRM)
			snprintf(why, sizeof(why), "%.160s needs the user's "
			    "approval (%.200s), which only a streaming chat "
			    "can ask for", id, pd.pd_reason);
		else if (withheld)
			snprintf(why, sizeof(why), "%.160s is withheld: %.200s",
			    id, pd.pd_reason);
		else
			snprintf(why, sizeof(why), "%.160s was refused by "
			    "policy: %.200s", id, pd.pd_reason);
		if (!withheld)
			cmetrics_policy_denial("tool");
		log_info("chat %s: %s", t->t_s->s_user, why);
		c->c_why = xstrdup(why);
	}
	if ((cr = malloc(sizeof(*cr))) == NULL)
		fatal("malloc");
	cr->cr_turn = t;
	cr->cr_index = i;
	c->c_ref = cr;
	c->c_decided = json_object_get(args);
	c->c_intent = audit_intent(t, c, args, &pd, cr);
}

static void	call_run(struct turn *, size_t, struct json_object *);
static void	approval_ask(struct turn *, size_t, struct json_object *);
static void	call_redecide(struct turn *, struct call *,
		    struct json_object *);

/*
 * The intent row is committed (id), or could not be written (-1): only
 * now does the call go on, and a call whose intent is not on record does
 * not run.
 */
static void
intent_recorded(int64_t id, void *arg)
{
	struct call_ref		 cr = *(struct call_ref *)arg;
	struct turn		*t = cr.cr_turn;
	struct call		*c = &t->t_calls[cr.cr_index];
	struct json_object	*args = c->c_decided;
	char			 why[512];

	free(arg);
	c->c_ref = NULL;
	c->c_intent = NULL;
	c->c_decided = NULL;
	if (id == -1) {
		snprintf(why, sizeof(why), "%.100s.%.100s was not run: the "
		    "audit trail cannot be written", c->c_map->tm_server,
		    c->c_map->tm_tool);
		log_warnx("chat %s: %s", t->t_s->s_user, why);
		call_finish(t, c, why, 1);
	} else if (c->c_verdict == V_REFUSE) {
		/* The intent row says it all: no outcome row. */
		snprintf(why, sizeof(why), "%s", c->c_why);
		call_finish(t, c, why, 1);
	} else {
		c->c_audit = id;
		if (c->c_reloaded)
			call_redecide(t, c, args);
		if (c->c_done)
			;	/* refused by the rules loaded since */
		else if (c->c_verdict == V_ASK)
			approval_ask(t, cr.cr_index, args);
		else
			call_run(t, cr.cr_index, args);
	}
	json_object_put(args);
}

/*
 * The turn ends while the intent row waits for its commit: it is written
 * now, and an outcome row says the call never ran.
 */
static void
intent_abandon(struct turn *t, struct call *c)
{
	int64_t id = audit_settle(c->c_intent);

	c->c_intent = NULL;
	free(c->c_ref);
	c->c_ref = NULL;
	json_object_put(c->c_decided);
	c->c_decided = NULL;
	if (id > 0 && c->c_verdict != V_REFUSE) {
		c->c_audit = id;
		(void)audit_outcome(t, c, "cancelled", NULL, NULL);
	}
}

/* The call no longer waits for an answer. */
static void
approval_clear(struct call *c)
{
	event_free(c->c_timer);
	c->c_timer = NULL;
	json_object_put(c->c_pending);
	c->c_pending = NULL;
	free(c->c_ref);
	c->c_ref = NULL;
}

static void
approval_expired(int fd, short ev, void *arg)
{
	struct call_ref	*cr = arg;
	struct turn	*t = cr->cr_turn;
	struct call	*c = &t->t_calls[cr->cr_index];

	(void)fd;
	(void)ev;
	approval_clear(c);
	(void)audit_approval(t, c, "expired", NULL);
	call_finish(t, c, "no approval came in time (limits "
	    "approval-timeout)", 1);
}

/*
 * A configuration was loaded since the call was decided (while its
 * intent was being committed, or while it waited for approval): it is
 * decided again under the rules now in force, its rate counted anew as a
 * reload resets the counters.  One they deny, or whose tool is withheld,
 * is refused at once; one that now needs approval is asked for it.
 */
static void
call_redecide(struct turn *t, struct call *c, struct json_object *args)
{
	struct policy_decision	 pd;
	char			 id[CALL_TOOL_ID_MAX], why[512];
	int			 withheld;

	c->c_reloaded = 0;
	withheld = call_policy(t, c, args, id, &pd);
	if (pd.pd_action == POLICY_CONFIRM && t->t_stream)
		c->c_verdict = V_ASK;
	else if (pd.pd_action != POLICY_ALLOW) {
		snprintf(why, sizeof(why), "%.160s was refused%s, by the "
		    "configuration loaded since it was decided: %.200s", id,
		    c->c_pending != NULL ? " while it waited for approval" :
		    "", pd.pd_action == POLICY_CONFIRM ? "it needs an "
		    "approval, which only a streaming chat can ask for" :
		    pd.pd_reason);
		if (!withheld)
			cmetrics_policy_denial("tool");
		log_info("chat %s: %s", t->t_s->s_user, why);
		if (c->c_pending != NULL) {
			approval_clear(c);
			(void)audit_approval(t, c, "refused", pd.pd_reason);
		}
		call_finish(t, c, why, 1);
	}
}

/*
 * Calls decided under the rules just replaced: those waiting for
 * approval are decided again now, those whose intent is still being
 * committed once it is (intent_recorded).  call_finish writes through
 * the group commit, so no turn or call goes away during this walk.
 */
void
chat_reconfigure(void)
{
	struct session	*s;
	struct call	*c;
	size_t		 i;

	TAILQ_FOREACH(s, &sessions, s_entry)
		for (i = 0; s->s_turn != NULL && i < s->s_turn->t_ncalls; i++) {
			c = &s->s_turn->t_calls[i];
			if (c->c_intent != NULL && c->c_verdict != V_REFUSE)
				c->c_reloaded = 1;
			else if (c->c_pending != NULL)
				call_redecide(s->s_turn, c, c->c_pending);
		}
}

/* Hold the call and ask: the answer comes to POST /llmchat/approve. */
static void
approval_ask(struct turn *t, size_t i, struct json_object *args)
{
	struct call		*c = &t->t_calls[i];
	struct json_object	*o = json_object_new_object();
	struct call_ref		*cr;
	uint64_t		 ms = controller_conf()->c_limits.
				    lm_approval_timeout_ms;
	struct timeval		 tv = { ms / 1000, (ms % 1000) * 1000 };

	if ((cr = malloc(sizeof(*cr))) == NULL)
		fatal("malloc");
	cr->cr_turn = t;
	cr->cr_index = i;
	c->c_ref = cr;
	c->c_pending = json_object_get(args);
	if ((c->c_timer = evtimer_new(child_base(), approval_expired, cr)) ==
	    NULL)
		fatalx("evtimer_new");
	evtimer_add(c->c_timer, &tv);
	json_object_object_add(o, "id", json_object_new_string(c->c_id));
	json_object_object_add(o, "tool", json_object_new_string(
	    c->c_map->tm_tool));
	json_object_object_add(o, "server", json_object_new_string(
	    c->c_map->tm_server));
	json_object_object_add(o, "input", json_object_get(args));
	json_object_object_add(o, "timeout_ms", json_object_new_int64(ms));
	turn_event(t, "approval_required", o);
}

static void
call_start(struct turn *t, size_t i)
{
	struct call		*c = &t->t_calls[i];
	struct json_object	*args, *o;
	char			 why[512];

	c->c_start_ms = monotonic_ms();
	args = json_parse_object(c->c_args, strlen(c->c_args));
	/* NaN, 1e999, 2^64: not JSON, or not what the model wrote. */
	if (args != NULL && !json_numbers_ok(args, 0)) {
		json_object_put(args);
		args = NULL;
	}
	o = json_object_new_object();
	json_object_object_add(o, "id", json_object_new_string(c->c_id));
	json_object_object_add(o, "tool", json_object_new_string(c->c_map ?
	    c->c_map->tm_tool : c->c_name));
	json_object_object_add(o, "server", json_object_new_string(c->c_map ?
	    c->c_map->tm_server : ""));
	json_object_object_add(o, "input", args != NULL ?
	    json_object_get(args) : json_object_new_string(c->c_args));
	turn_event(t, "tool_start", o);
	/* Mistakes of the model go back to it, to correct. */
	if (c->c_map == NULL) {
		snprintf(why, sizeof(why), "there is no tool named \"%.100s\"",
		    c->c_name);
		audit_forged(t, c);
		call_finish(t, c, why, 1);
	} else if (args == NULL) {
		call_finish(t, c, "the arguments are not a valid JSON object; "
		    "call the tool again with a JSON object", 1);
	} else
		call_decide(t, i, args);
	json_object_put(args);
}

/* Through the server's worker, with the session's identity. */
static void
call_run(struct turn *t, size_t i, struct json_object *args)
{
	struct call		*c = &t->t_calls[i];
	struct worker_link	*wl;
	struct call_ref		*cr;
	char			 owner[OWNER_MAX];

	if ((wl = controller_worker(c->c_map->tm_server)) == NULL) {
		call_finish(t, c, "the tool's server is gone", 1);
		return;
	}
	if ((cr = malloc(sizeof(*cr))) == NULL)
		fatal("malloc");
	cr->cr_turn = t;
	cr->cr_index = i;
	c->c_ref = cr;
	c->c_call = controller_call_tool(wl, c->c_map->tm_tool, args,
	    owner_key(t->t_s->s_user, t->t_s->s_tenant, owner),
	    t->t_s->s_conversation,
	    controller_conf()->c_limits.lm_tool_timeout_ms, call_done, cr);
}

/* The assistant's message of this round, then one result per call. */
static void
round_record(struct turn *t)
{
	struct chat_message	*m;
	size_t			 len = evbuffer_get_length(t->t_text), i;
	char			*text;

	if ((text = malloc(len + 1)) == NULL)
		fatal("malloc");
	evbuffer_copyout(t->t_text, text, len);
	text[len] = '\0';
	m = history_add(t->t_s, ROLE_ASSISTANT, len > 0 ? text : NULL);
	free(text);
	if (t->t_ncalls == 0) {
		history_store(t->t_s, m);
		return;
	}
	if ((m->cm_calls = calloc(t->t_ncalls, sizeof(*m->cm_calls))) == NULL)
		fatal("calloc");
	m->cm_ncalls = t->t_ncalls;
	t->t_recorded = 1;
	for (i = 0; i < t->t_ncalls; i++) {
		m->cm_calls[i].tc_id = xstrdup(t->t_calls[i].c_id);
		m->cm_calls[i].tc_name = xstrdup(t->t_calls[i].c_name);
		m->cm_calls[i].tc_arguments = xstrdup(t->t_calls[i].c_args);
	}
	history_store(t->t_s, m);
}

/* One result per call in history: providers refuse calls left open. */
static void
round_results(struct turn *t)
{
	struct chat_message	*m;
	struct call		*c;
	size_t			 i;

	for (i = 0; i < t->t_ncalls && t->t_recorded; i++) {
		c = &t->t_calls[i];
		m = history_add(t->t_s, ROLE_TOOL, c->c_done ? c->c_output :
		    "the call was cancelled");
		m->cm_call_id = xstrdup(c->c_id);
		m->cm_call_name = xstrdup(c->c_name);
		m->cm_is_error = c->c_done ? c->c_error : 1;
		history_store(t->t_s, m);
	}
	t->t_recorded = 0;
}

static void
round_after_tools(struct turn *t)
{
	struct call		*c;
	size_t			 i;

	round_results(t);
	for (i = 0; i < t->t_ncalls; i++) {
		c = &t->t_calls[i];
		if (c->c_map != NULL && !c->c_error) {
			char id[256];

			snprintf(id, sizeof(id), "%s.%s", c->c_map->tm_server,
			    c->c_map->tm_tool);
			json_object_array_add(t->t_used,
			    json_object_new_string(id));
		}
		free(c->c_why);
		free(c->c_name);
		free(c->c_args);
		free(c->c_output);
		memset(c, 0, sizeof(*c));
	}
	t->t_ncalls = 0;
	if (t->t_round >= controller_conf()->c_limits.lm_tool_rounds) {
		turn_fail(t, 422, "tool_rounds", 1, "the model was still "
		    "calling tools after %u rounds (limits tool-rounds); ask "
		    "again or narrow the question", t->t_round);
		return;
	}
	evbuffer_drain(t->t_text, evbuffer_get_length(t->t_text));
	round_start(t);
}

/* ---- the LLM request ---- */

static void
llm_response(struct http_request *req, int status,
    const struct http_headers *h, void *arg)
{
	struct turn *t = arg;

	(void)req;
	(void)h;
	t->t_status = status;
	if (status / 100 == 2 && (t->t_ps = t->t_ops->po_stream_new(&events,
	    t)) == NULL)
		fatalx("provider stream");
}

static void
llm_body(struct http_request *req, const char *buf, size_t len, void *arg)
{
	struct turn *t = arg;

	(void)req;
	if (t->t_status / 100 != 2) {
		if (evbuffer_get_length(t->t_errbody) + len <= MAX_ERROR_BODY)
			evbuffer_add(t->t_errbody, buf, len);
		return;
	}
	if (t->t_ops->po_stream_feed(t->t_ps, buf, len) == -1) {
		http_request_cancel(t->t_http);
		t->t_http = NULL;
		turn_fail(t, 502, "provider_error", 1, "provider %s sent a "
		    "malformed stream: %s", t->t_s->s_provider,
		    t->t_ops->po_stream_error(t->t_ps));
	}
}

/* A provider's refusal, in terms the user can act on. */
static void
llm_refused(struct turn *t)
{
	char	 msg[512];
	size_t	 len = evbuffer_get_length(t->t_errbody);
	int	 status = t->t_status;

	t->t_ops->po_error_message(status, (const char *)evbuffer_pullup(
	    t->t_errbody, len), len, msg, sizeof(msg));
	if (status == 401 || status == 403)
		turn_fail(t, 400, "provider_credentials", 1, "provider %s "
		    "refused the credentials (HTTP %d): %s; check its api-key",
		    t->t_s->s_provider, status, msg);
	else if (status == 429)
		turn_fail(t, 429, "provider_rate_limited", 1, "provider %s "
		    "is rate limiting: %s", t->t_s->s_provider, msg);
	else if (status == 400 || status == 404 || status == 422)
		turn_fail(t, 502, "provider_rejected", 1, "provider %s "
		    "rejected the request (HTTP %d): %s", t->t_s->s_provider,
		    status, msg);
	else
		turn_fail(t, 503, "provider_unavailable", 1, "provider %s "
		    "answered HTTP %d: %s", t->t_s->s_provider, status, msg);
}

/* How an LLM request ended, for its metric. */
static const char *
llm_outcome(const struct turn *t, int err)
{
	if (err == HTTP_ERR_TIMEOUT)
		return "timeout";
	if (err != 0 && t->t_status == 0)
		return "unreachable";
	if (t->t_status / 100 != 2)
		return "refused";
	return err != 0 ? "error" : "ok";
}

static void
llm_done(struct http_request *req, int err, const char *why, void *arg)
{
	struct turn	*t = arg;
	size_t		 i;

	t->t_http = NULL;
	cmetrics_llm_call(t->t_s->s_provider, session_model(t->t_s),
	    llm_outcome(t, err), metrics_now() - t->t_round_began);
	/* Timed out or cut off after it went out: the prompt was read. */
	if (err != 0 && t->t_status == 0 && http_request_sent(req))
		round_meter(t, 0);
	if (err == HTTP_ERR_TIMEOUT) {
		turn_fail(t, 504, "provider_timeout", 1, "provider %s did not "
		    "answer in time: %s", t->t_s->s_provider, why);
		return;
	}
	if (err != 0 && t->t_status == 0) {
		turn_fail(t, 503, "provider_unreachable", 1, "provider %s is "
		    "unreachable: %s; check its base-url and that it is up",
		    t->t_s->s_provider, why);
		return;
	}
	if (t->t_status / 100 != 2) {
		llm_refused(t);
		return;
	}
	if (err != 0 || t->t_ops->po_stream_end(t->t_ps) == -1) {
		turn_fail(t, 502, "provider_error", 1, "provider %s: %s",
		    t->t_s->s_provider, err != 0 ? why :
		    t->t_ops->po_stream_error(t->t_ps));
		return;
	}
	t->t_ops->po_stream_free(t->t_ps);
	t->t_ps = NULL;
	round_meter(t, 1);
	t->t_in_tokens += t->t_round_in;
	t->t_out_tokens += t->t_round_out;
	t->t_round_in = t->t_round_out = 0;
	if (t->t_too_many_calls)
		log_warnx("chat %s: more than %d tool calls in one round; the "
		    "rest were dropped", t->t_s->s_user, MAX_CALLS_PER_ROUND);
	round_record(t);
	if (t->t_ncalls == 0) {
		turn_final(t);
		return;
	}
	t->t_round++;
	/* Held open by one while starting: calls may finish at once. */
	t->t_pending = t->t_ncalls + 1;
	for (i = 0; i < t->t_ncalls; i++)
		call_start(t, i);
	if (--t->t_pending == 0)
		round_after_tools(t);	/* may end (and free) the turn */
}

static const struct http_callbacks llm_callbacks = {
	llm_response, llm_body, llm_done
};

static const struct provider_conf *
provider_find(const char *name)
{
	return config_find_provider(controller_conf(), name);
}

static void
round_start(struct turn *t)
{
	struct session			*s = t->t_s;
	const struct provider_conf	*pv;
	struct chat_message		*msgs;
	struct chat_tool_def		*defs;
	struct chat_request		 rq;
	struct provider_http		 ph;
	struct http_request_opts	 ro;
	struct budget_status		 bs;
	char				 why[256];
	size_t				 i;

	t->t_status = 0;
	t->t_round_metered = t->t_round_reported = 0;
	t->t_round_in = t->t_round_out = 0;
	if ((pv = provider_find(s->s_provider)) == NULL) {
		turn_fail(t, 503, "provider_gone", 0, "provider %s is no "
		    "longer configured; connect again", s->s_provider);
		return;
	}
	/* Checked before each call; calls already running may overshoot. */
	switch (budget_over(s, &bs)) {
	case BUDGET_OVER:
		turn_budget_fail(t, &bs);
		return;
	case BUDGET_UNKNOWN:
		turn_fail(t, 503, "budget_unavailable", 0, BUDGET_UNKNOWN_MSG);
		return;
	}
	t->t_ops = provider_ops(pv->pv_type);
	/* The system prompt first, then the history. */
	if ((msgs = calloc(s->s_nhistory + 1, sizeof(*msgs))) == NULL ||
	    (defs = calloc(s->s_ntools + 1, sizeof(*defs))) == NULL)
		fatal("calloc");
	msgs[0].cm_role = ROLE_SYSTEM;
	msgs[0].cm_content = pv->pv_system_prompt != NULL ?
	    pv->pv_system_prompt : SYSTEM_PROMPT;
	memcpy(msgs + 1, s->s_history, s->s_nhistory * sizeof(*msgs));
	for (i = 0; i < s->s_ntools; i++) {
		defs[i].td_name = s->s_tools[i].tm_name;
		defs[i].td_description = s->s_tools[i].tm_description;
		defs[i].td_schema = s->s_tools[i].tm_schema;
	}
	memset(&rq, 0, sizeof(rq));
	rq.rq_provider = pv;
	rq.rq_model = s->s_model[0] != '\0' ? s->s_model : pv->pv_model;
	rq.rq_has_temperature = s->s_has_temperature;
	rq.rq_temperature = s->s_temperature;
	rq.rq_max_tokens = s->s_max_tokens;
	rq.rq_messages = msgs;
	rq.rq_nmessages = s->s_nhistory + 1;
	rq.rq_tools = defs;
	rq.rq_ntools = s->s_ntools;
	memset(&ph, 0, sizeof(ph));
	if (t->t_ops->po_build(&rq, &ph, why, sizeof(why)) == -1) {
		free(msgs);
		free(defs);
		provider_http_free(&ph);
		turn_fail(t, 422, "request", 0, "%s", why);
		return;
	}
	free(msgs);
	free(defs);
	memset(&ro, 0, sizeof(ro));
	ro.ro_method = "POST";
	ro.ro_url = ph.ph_url;
	ro.ro_headers = ph.ph_headers;
	ro.ro_nheaders = ph.ph_nheaders;
	ro.ro_body = ph.ph_body;
	ro.ro_body_len = ph.ph_body_len;
	ro.ro_connect_timeout_ms = LLM_CONNECT_MS;
	ro.ro_idle_timeout_ms = controller_conf()->c_limits.lm_llm_timeout_ms;
	t->t_status = 0;
	t->t_round_sent = ph.ph_body_len;
	t->t_round_began = metrics_now();
	t->t_http = http_request_start(controller_http(), &ro, &llm_callbacks,
	    t);
	provider_http_free(&ph);
	if (t->t_http == NULL)
		turn_fail(t, 503, "provider_unreachable", 1, "provider %s: %s",
		    s->s_provider, http_client_error(controller_http()));
}

/* ---- the API ---- */

static int
body_str(uint64_t id, struct json_object *body, const char *key, size_t max,
    int optional, const char **out)
{
	if (json_get_str(body, key, max, optional, out) == 0)
		return 0;
	api_error(id, 422, "invalid_field", "\"%s\": expected a string of at "
	    "most %zu characters, without NUL%s", key, max, optional ? "" :
	    " (required)");
	return -1;
}

static int
connect_options(uint64_t id, struct session *s, struct json_object *body)
{
	struct json_object	*cfg, *v;
	int64_t			 mt = 0;	/* absent: the provider's default */

	s->s_has_temperature = 0;
	s->s_max_tokens = 0;
	if (!json_object_object_get_ex(body, "config", &cfg))
		return 0;
	if (!json_object_is_type(cfg, json_type_object)) {
		api_error(id, 422, "invalid_field", "\"config\": expected an "
		    "object");
		return -1;
	}
	if (json_object_object_get_ex(cfg, "temperature", &v)) {
		if ((!json_object_is_type(v, json_type_double) &&
		    !json_object_is_type(v, json_type_int)) ||
		    json_object_get_double(v) < 0 ||
		    json_object_get_double(v) > 2) {
			api_error(id, 422, "invalid_field", "\"config."
			    "temperature\": expected a number from 0 to 2");
			return -1;
		}
		s->s_has_temperature = 1;
		s->s_temperature = json_object_get_double(v);
	}
	if (json_get_int(cfg, "max_tokens", 1, 1000000, 1, &mt) == -1) {
		api_error(id, 422, "invalid_field", "\"config.max_tokens\": "
		    "expected an integer from 1 to 1000000");
		return -1;
	}
	s->s_max_tokens = (int)mt;
	return 0;
}

static struct session *
session_new(const char *user)
{
	struct session *s;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		fatal("calloc");
	snprintf(s->s_user, sizeof(s->s_user), "%s", user);
	TAILQ_INSERT_TAIL(&sessions, s, s_entry);
	return s;
}

static void
session_free(struct session *s)
{
	char owner[OWNER_MAX];

	if (s->s_turn != NULL)
		turn_fail(s->s_turn, 409, "disconnected", 0, "the session was "
		    "closed");
	TAILQ_REMOVE(&sessions, s, s_entry);
	controller_release(owner_key(s->s_user, s->s_tenant, owner),
	    s->s_conversation);
	history_clear(s);
	tools_clear(s);
	free(s);
}

/*
 * Connect (or reconnect: the same session, new settings, new history).
 * Everything is checked before anything changes.
 */
static void
session_identity(struct session *s, const struct store_user *u)
{
	char *save, *r;

	snprintf(s->s_tenant, sizeof(s->s_tenant), "%s", u->su_tenant);
	snprintf(s->s_roles_buf, sizeof(s->s_roles_buf), "%s", u->su_roles);
	s->s_nroles = 0;
	for (r = strtok_r(s->s_roles_buf, ",", &save); r != NULL &&
	    s->s_nroles < MAX_ROLES; r = strtok_r(NULL, ",", &save))
		s->s_roles[s->s_nroles++] = r;
}

/*
 * The caller's session: the one of their name, begun under their tenant
 * (a name from another tenant, or from the identity provider for one
 * made locally, is not the same user).  Its roles become the caller's
 * now, not those they had at connect: a token or a user whose roles were
 * taken away does not keep them for the life of a session.
 */
static struct session *
session_of(const struct store_user *u)
{
	struct session *s;

	if ((s = session_find(u->su_name, u->su_tenant)) == NULL)
		return NULL;
	session_identity(s, u);
	return s;
}

/* A user authenticated and started a session. */
static void
audit_session(struct session *s)
{
	struct json_object *d = json_object_new_object();

	json_object_object_add(d, "result", json_object_new_string("success"));
	json_object_object_add(d, "event", json_object_new_string("connect"));
	json_object_object_add(d, "conversation",
	    json_object_new_string(s->s_conversation));
	json_object_object_add(d, "provider",
	    json_object_new_string(s->s_provider));
	json_object_object_add(d, "tools", json_object_new_int(
	    (int)s->s_ntools));
	if (audit_append(AUDIT_KIND_AUTH, s->s_user, s->s_tenant, d) == -1)
		log_warnx("chat %s: the session start was not recorded",
		    s->s_user);
	json_object_put(d);
}

void
chat_connect(uint64_t id, const struct store_user *u,
    struct json_object *body)
{
	const char			*user = u->su_name;
	const struct provider_conf	*pv;
	struct session			 tmp, *s;
	const char			*provider, *model = NULL, *toolset = NULL;
	const char			*resume = NULL;
	struct conv_meta		 cv;
	struct json_object		*r;
	int				 streaming = 1;

	if (body == NULL) {
		api_error(id, 422, "invalid_field", "a JSON body with "
		    "\"provider\" is required");
		return;
	}
	if (body_str(id, body, "provider", 63, 0, &provider) ==
	    -1 || body_str(id, body, "model", 127, 1, &model) == -1 ||
	    body_str(id, body, "toolset", 63, 1, &toolset) == -1 ||
	    body_str(id, body, "conversation_id", 64, 1, &resume) == -1)
		return;
	if (json_get_bool(body, "streaming", 1, &streaming) == -1) {
		api_error(id, 422, "invalid_field", "\"streaming\": expected "
		    "true or false");
		return;
	}
	/* Someone else's conversation or none: the same answer. */
	if (resume != NULL && (!conv_id_valid(resume) || conv_get(resume,
	    &cv) == -1 || !store_user_is(u, cv.cv_user, cv.cv_tenant))) {
		api_error(id, 404, "not_found", "no such conversation");
		return;
	}
	if ((pv = provider_find(provider)) == NULL) {
		api_error(id, 422, "invalid_field", "\"provider\": no provider "
		    "\"%s\" is configured", provider);
		return;
	}
	/* A price is the configured model's: another's cost is not known. */
	if (model != NULL && pv->pv_has_price && (pv->pv_model == NULL ||
	    strcmp(model, pv->pv_model) != 0)) {
		api_error(id, 422, "invalid_field", "\"model\": provider "
		    "\"%s\" is priced for its model \"%s\" only: the cost of "
		    "another could not be counted against budgets", provider,
		    pv->pv_model != NULL ? pv->pv_model : "");
		return;
	}
	if (toolset != NULL && config_find_toolset(controller_conf(),
	    toolset) == NULL) {
		api_error(id, 422, "invalid_field", "\"toolset\": no toolset "
		    "\"%s\" is configured", toolset);
		return;
	}
	memset(&tmp, 0, sizeof(tmp));
	if (connect_options(id, &tmp, body) == -1)
		return;
	if ((s = session_find(user, u->su_tenant)) != NULL)
		session_free(s);
	s = session_new(user);
	session_identity(s, u);
	s->s_has_temperature = tmp.s_has_temperature;
	s->s_temperature = tmp.s_temperature;
	s->s_max_tokens = tmp.s_max_tokens;
	s->s_streaming = streaming;
	snprintf(s->s_provider, sizeof(s->s_provider), "%s", provider);
	snprintf(s->s_model, sizeof(s->s_model), "%s", model != NULL ? model :
	    pv->pv_model != NULL ? pv->pv_model : "");
	snprintf(s->s_toolset, sizeof(s->s_toolset), "%s", toolset != NULL ?
	    toolset : "");
	if (resume != NULL)
		session_resume(s, resume);
	else
		session_new_conversation(s);
	tools_collect(s);
	audit_session(s);
	r = json_object_new_object();
	json_object_object_add(r, "status", json_object_new_string(
	    "connected"));
	json_object_object_add(r, "user_id", json_object_new_string(user));
	json_object_object_add(r, "provider", json_object_new_string(
	    provider));
	json_object_object_add(r, "model", json_object_new_string(
	    s->s_model));
	json_object_object_add(r, "tool_count", json_object_new_int(
	    (int)s->s_ntools));
	json_object_object_add(r, "tools", tools_json(s));
	json_object_object_add(r, "conversation_id", json_object_new_string(
	    s->s_conversation));
	json_object_object_add(r, "resumed", json_object_new_boolean(
	    resume != NULL));
	api_reply(id, 200, r);
}

void
chat_send(uint64_t id, const struct store_user *u, struct json_object *body)
{
	struct session		*s;
	struct turn		*t;
	struct budget_status	 bs;
	struct json_object	*e;
	const char		*message;
	int			 streaming;

	if ((s = session_of(u)) == NULL) {
		api_error(id, 409, "not_connected", "connect first: POST "
		    "/llmchat/connect");
		return;
	}
	if (body == NULL) {
		api_error(id, 422, "invalid_field", "a JSON body with "
		    "\"message\" is required");
		return;
	}
	if (body_str(id, body, "message", 100000, 0, &message) == -1)
		return;
	if (*message == '\0') {
		api_error(id, 422, "invalid_field", "\"message\": must not be "
		    "empty");
		return;
	}
	streaming = s->s_streaming;
	if (json_get_bool(body, "streaming", 1, &streaming) == -1) {
		api_error(id, 422, "invalid_field", "\"streaming\": expected "
		    "true or false");
		return;
	}
	if (s->s_turn != NULL) {
		api_error(id, 409, "busy", "a message is still being answered; "
		    "wait for it or POST /llmchat/stop");
		return;
	}
	/* Refused before anything is said: nothing joins the history. */
	switch (budget_over(s, &bs)) {
	case BUDGET_OVER:
		e = json_object_new_object();
		json_object_object_add(e, "error", budget_error(s, &bs));
		api_reply(id, 429, e);
		return;
	case BUDGET_UNKNOWN:
		api_error(id, 503, "budget_unavailable", BUDGET_UNKNOWN_MSG);
		return;
	}
	if ((t = calloc(1, sizeof(*t))) == NULL ||
	    (t->t_text = evbuffer_new()) == NULL ||
	    (t->t_errbody = evbuffer_new()) == NULL)
		fatal("calloc");
	t->t_s = s;
	t->t_req = id;
	t->t_stream = streaming;
	t->t_start_ms = monotonic_ms();
	t->t_used = json_object_new_array();
	t->t_invocations = json_object_new_array();
	s->s_turn = t;
	history_store(s, history_add(s, ROLE_USER, message));
	history_trim(s);
	if (streaming)
		api_stream_start(id);
	round_start(t);
}

void
chat_stop(uint64_t id, const struct store_user *u)
{
	struct session		*s = session_of(u);
	struct json_object	*r = json_object_new_object();

	json_object_object_add(r, "stopped", json_object_new_boolean(s !=
	    NULL && s->s_turn != NULL));
	if (s != NULL && s->s_turn != NULL)
		turn_fail(s->s_turn, 409, "stopped", 1, "stopped at the user's "
		    "request");
	api_reply(id, 200, r);
}

void
chat_request_gone(uint64_t id)
{
	struct session *s;

	TAILQ_FOREACH(s, &sessions, s_entry)
		if (s->s_turn != NULL && s->s_turn->t_req == id) {
			log_info("chat %s: the client went away; stopping",
			    s->s_user);
			turn_free(s->s_turn);
			return;
		}
}

/*
 * The waiting call an approval names, in *c: 0 when none has that id, 1
 * when one does (*c NULL if its input is not the one given), -1 when the
 * id does not single one out.  Ids are the provider's (and cut at 63
 * bytes): two waiting calls may share one, and then only the input and
 * the tool say which is approved.
 */
static int
approval_target(struct turn *t, const char *call_id, struct json_object *input,
    struct call **c)
{
	struct call	*k;
	size_t		 i;
	int		 named = 0;

	*c = NULL;
	for (i = 0; t != NULL && i < t->t_ncalls; i++) {
		k = &t->t_calls[i];
		if (k->c_pending == NULL || strcmp(k->c_id, call_id) != 0)
			continue;
		named = 1;
		if (input != NULL && !json_object_equal(input, k->c_pending))
			continue;
		/* The same tool and input twice: either is the one. */
		if (*c != NULL && (input == NULL || (*c)->c_map != k->c_map))
			return -1;
		*c = k;
	}
	return named;
}

/*
 * POST /llmchat/approve {id, approve, input?}: the user's answer to an
 * approval_required event of their own running turn.  With `input`, the
 * answer holds only for exactly those arguments: anything else refuses.
 */
void
chat_approve(uint64_t id, const struct store_user *u, struct json_object *body)
{
	struct session		*s = session_of(u);
	struct json_object	*input = NULL, *r, *args;
	struct turn		*t;
	struct call		*c;
	const char		*call_id;
	int			 approve;

	if (body == NULL || body_str(id, body, "id", 63, 0, &call_id) == -1)
		return;
	if (json_get_bool(body, "approve", 0, &approve) == -1) {
		api_error(id, 422, "invalid_field", "\"approve\": expected true "
		    "or false");
		return;
	}
	(void)json_object_object_get_ex(body, "input", &input);
	t = s != NULL ? s->s_turn : NULL;
	switch (approval_target(t, call_id, input, &c)) {
	case -1:
		api_error(id, 409, "ambiguous_call", "more than one call %s "
		    "waits: send the \"input\" you approve", call_id);
		return;
	case 0:
		api_error(id, 404, "not_found", "no call %s is waiting for "
		    "your approval", call_id);
		return;
	}
	if (c == NULL) {
		api_error(id, 409, "arguments_changed", "these are not the "
		    "arguments that asked for approval; nothing was run");
		return;
	}
	args = json_object_get(c->c_pending);
	approval_clear(c);
	if (audit_approval(t, c, approve ? "approved" : "declined", NULL) ==
	    -1 &&
	    approve) {
		api_error(id, 503, "audit", "the approval could not be "
		    "recorded; nothing was run");
		call_finish(t, c, "not run: its approval could not be "
		    "recorded in the audit trail", 1);
		json_object_put(args);
		return;
	}
	r = json_object_new_object();
	json_object_object_add(r, "id", json_object_new_string(call_id));
	json_object_object_add(r, "approved", json_object_new_boolean(approve));
	api_reply(id, 200, r);
	if (approve)
		call_run(t, (size_t)(c - t->t_calls), args);
	else
		call_finish(t, c, "the user declined this call", 1);
	json_object_put(args);
}

void
chat_disconnect(uint64_t id, const struct store_user *u)
{
	struct session		*s = session_of(u);
	struct json_object	*r = json_object_new_object();

	if (s != NULL)
		session_free(s);
	json_object_object_add(r, "status", json_object_new_string(
	    "disconnected"));
	api_reply(id, 200, r);
}

void
chat_status(uint64_t id, const struct store_user *u)
{
	struct json_object *r = json_object_new_object();

	json_object_object_add(r, "user_id", json_object_new_string(
	    u->su_name));
	json_object_object_add(r, "connected", json_object_new_boolean(
	    session_of(u) != NULL));
	api_reply(id, 200, r);
}

void
chat_config(uint64_t id, const struct store_user *u)
{
	struct session		*s = session_of(u);
	struct json_object	*r, *cfg;

	if (s == NULL) {
		api_error(id, 404, "not_connected", "no session for %s",
		    u->su_name);
		return;
	}
	r = json_object_new_object();
	cfg = json_object_new_object();
	json_object_object_add(r, "user_id", json_object_new_string(
	    u->su_name));
	json_object_object_add(r, "provider", json_object_new_string(
	    s->s_provider));
	json_object_object_add(r, "model", json_object_new_string(
	    s->s_model));
	json_object_object_add(r, "toolset", json_object_new_string(
	    s->s_toolset));
	json_object_object_add(r, "streaming", json_object_new_boolean(
	    s->s_streaming));
	if (s->s_has_temperature)
		json_object_object_add(cfg, "temperature",
		    json_object_new_double(s->s_temperature));
	if (s->s_max_tokens > 0)
		json_object_object_add(cfg, "max_tokens",
		    json_object_new_int(s->s_max_tokens));
	json_object_object_add(r, "config", cfg);
	api_reply(id, 200, r);
}

static const char *
role_str(enum chat_role r)
{
	switch (r) {
	case ROLE_USER:
		return "user";
	case ROLE_ASSISTANT:
		return "assistant";
	case ROLE_TOOL:
		return "tool";
	default:
		return "system";
	}
}

void
chat_history(uint64_t id, const struct store_user *u, int clear)
{
	struct session		*s = session_of(u);
	struct json_object	*r, *arr, *m;
	size_t			 i;

	if (s == NULL) {
		api_error(id, 404, "not_connected", "no session for %s",
		    u->su_name);
		return;
	}
	r = json_object_new_object();
	if (clear) {
		if (s->s_turn != NULL) {
			json_object_put(r);
			api_error(id, 409, "busy", "a message is still being "
			    "answered");
			return;
		}
		/* The stored conversation stays; the session starts anew. */
		history_clear(s);
		session_new_conversation(s);
		json_object_object_add(r, "cleared",
		    json_object_new_boolean(1));
		json_object_object_add(r, "conversation_id",
		    json_object_new_string(s->s_conversation));
		api_reply(id, 200, r);
		return;
	}
	arr = json_object_new_array();
	for (i = 0; i < s->s_nhistory; i++) {
		m = json_object_new_object();
		json_object_object_add(m, "role", json_object_new_string(
		    role_str(s->s_history[i].cm_role)));
		json_object_object_add(m, "content", json_object_new_string(
		    s->s_history[i].cm_content != NULL ?
		    s->s_history[i].cm_content : ""));
		json_object_array_add(arr, m);
	}
	json_object_object_add(r, "messages", arr);
	api_reply(id, 200, r);
}

/*
 * The stored conversation was erased (DELETE, retention): the session
 * that holds it keeps nothing of it, not even in memory, and goes on in
 * a new one.
 */
void
chat_forget_conversation(const char *conversation)
{
	struct session *s;

	TAILQ_FOREACH(s, &sessions, s_entry) {
		if (strcmp(s->s_conversation, conversation) != 0)
			continue;
		if (s->s_turn != NULL)
			turn_fail(s->s_turn, 409, "erased", 0, "the "
			    "conversation was erased");
		history_clear(s);
		session_new_conversation(s);
		return;
	}
}

void
chat_forget_user(const char *user, const char *tenant)
{
	struct session *s;

	if ((s = session_find(user, tenant)) != NULL)
		session_free(s);
}

void
chat_forget_tenant(const char *tenant)
{
	struct session *s, *next;

	TAILQ_FOREACH_SAFE(s, &sessions, s_entry, next)
		if (strcmp(s->s_tenant, tenant) == 0)
			session_free(s);
}
