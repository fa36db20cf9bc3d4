/*
 * OpenAI Chat Completions, streamed, for the three provider types that
 * speak it:
 *
 *	openai			POST {base}/chat/completions,
 *				Authorization: Bearer KEY
 *	azure-openai		POST {base}/openai/deployments/{deployment}
 *				/chat/completions?api-version={version},
 *				api-key: KEY; the deployment picks the model
 *	openai-compatible	as openai (vLLM, llama.cpp, LM Studio, ...);
 *				Authorization only when a key is configured
 *
 * References: openai/openai-openapi openapi.yaml
 * (CreateChatCompletionRequest, CreateChatCompletionStreamResponse,
 * ChatCompletionMessageToolCallChunk, ChatCompletionStreamOptions,
 * ErrorResponse); Azure/azure-rest-api-specs AzureOpenAI inference
 * stable/2024-10-21; Microsoft's "Azure OpenAI reasoning models" guide.
 *
 * The response is SSE: each event's data is one JSON chunk, and a last
 * "data: [DONE]" ends it.  Tool calls come in fragments keyed by "index":
 * the first carries id and function.name, the rest pieces of
 * function.arguments to concatenate.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "common/sse.h"
#include "common/util.h"
#include "broker/providers/provider_util.h"

#define OA_WHO		"OpenAI API"	/* also Azure and compatible servers */
#define OA_REASON_MAX	32

#define add	provider_json_add
#define push	provider_json_push

static struct json_object *
str_or_empty(const char *s)
{
	return json_object_new_string(s != NULL ? s : "");
}

/* {id, type: "function", function: {name, arguments}} */
static struct json_object *
oa_call(const struct chat_tool_call *tc)
{
	struct json_object	*call, *fn;
	const char		*args = tc->tc_arguments;

	/* Arguments travel as JSON text; "" is not JSON, {} is. */
	if (args == NULL || args[0] == '\0')
		args = "{}";
	if (tc->tc_id == NULL || tc->tc_name == NULL ||
	    (fn = json_object_new_object()) == NULL)
		return NULL;
	if (add(fn, "name", json_object_new_string(tc->tc_name)) ||
	    add(fn, "arguments", json_object_new_string(args)) ||
	    (call = json_object_new_object()) == NULL) {
		json_object_put(fn);
		return NULL;
	}
	/* add() takes fn, or releases it. */
	if (add(call, "function", fn) ||
	    add(call, "id", json_object_new_string(tc->tc_id)) ||
	    add(call, "type", json_object_new_string("function"))) {
		json_object_put(call);
		return NULL;
	}
	return call;
}

static struct json_object *
oa_tool_calls(const struct chat_message *m)
{
	struct json_object	*calls;
	size_t			 i;

	if ((calls = json_object_new_array()) == NULL)
		return NULL;
	for (i = 0; i < m->cm_ncalls; i++)
		if (push(calls, oa_call(&m->cm_calls[i])) == -1) {
			json_object_put(calls);
			return NULL;
		}
	return calls;
}

static struct json_object *
oa_message(const struct chat_message *m)
{
	static const char *const roles[] = {
		[ROLE_SYSTEM] = "system", [ROLE_USER] = "user",
		[ROLE_ASSISTANT] = "assistant", [ROLE_TOOL] = "tool",
	};
	struct json_object	*o;
	int			 r;

	if ((unsigned int)m->cm_role >= sizeof(roles) / sizeof(roles[0]) ||
	    (o = json_object_new_object()) == NULL)
		return NULL;
	r = add(o, "role", json_object_new_string(roles[m->cm_role]));
	switch (m->cm_role) {
	case ROLE_ASSISTANT:
		if (m->cm_ncalls == 0) {
			r = r || add(o, "content", str_or_empty(m->cm_content));
			break;
		}
		/* content may be null when tool_calls is there. */
		if (m->cm_content != NULL)
			r = r || add(o, "content",
			    json_object_new_string(m->cm_content));
		else
			r = r || json_object_object_add(o, "content", NULL);
		r = r || add(o, "tool_calls", oa_tool_calls(m));
		break;
	case ROLE_TOOL:
		/*
		 * No error flag in this format (cm_is_error): the result's
		 * text has to say that the call failed.
		 */
		r = r || m->cm_call_id == NULL ||
		    add(o, "tool_call_id", json_object_new_string(
		    m->cm_call_id)) ||
		    add(o, "content", str_or_empty(m->cm_content));
		break;
	case ROLE_SYSTEM:
	case ROLE_USER:
		r = r || add(o, "content", str_or_empty(m->cm_content));
		break;
	}
	if (r != 0) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/*
 * The output cap's name.  OpenAI deprecated max_tokens for
 * max_completion_tokens, and its reasoning (o-series, gpt-5) models
 * refuse max_tokens (openapi.yaml, CreateChatCompletionRequest).  Azure's
 * GA inference spec (2024-10-21) still only has max_tokens, the name
 * Azure's older api-versions accept, and compatible servers (vLLM,
 * llama.cpp, Ollama's /v1) have always taken max_tokens; some know no
 * other.  So the new name goes to OpenAI only.  An Azure deployment of a
 * reasoning model refuses max_tokens: leave max-tokens unset there.
 */
static const char *
oa_max_tokens_key(enum provider_type type)
{
	return type == PROVIDER_OPENAI ? "max_completion_tokens" :
	    "max_tokens";
}

static int
oa_options(const struct chat_request *rq, struct json_object *body,
    char *why, size_t whylen)
{
	struct json_object	*so;

	if (add(body, "stream", json_object_new_boolean(1)) == -1)
		goto nomem;
	/*
	 * Usage comes in a last chunk (empty choices) only when asked for.
	 * Older Azure api-versions refuse the member ("Unknown parameter:
	 * 'stream_options'"; 2024-10-21 and later take it).  Without usage
	 * budgets cannot be kept, so those versions are not supported.
	 */
	if ((so = json_object_new_object()) == NULL ||
	    add(so, "include_usage", json_object_new_boolean(1))) {
		json_object_put(so);
		goto nomem;
	}
	if (add(body, "stream_options", so) == -1)
		goto nomem;
	if (rq->rq_has_temperature &&
	    add(body, "temperature", provider_json_double(
	    rq->rq_temperature)) == -1) {
		snprintf(why, whylen, "temperature is not a number");
		return -1;
	}
	if (rq->rq_max_tokens < 0) {
		snprintf(why, whylen, "negative max-tokens");
		return -1;
	}
	if (rq->rq_max_tokens > 0 && add(body, oa_max_tokens_key(
	    rq->rq_provider->pv_type),
	    json_object_new_int64(rq->rq_max_tokens)) == -1)
		goto nomem;
	return 0;
 nomem:
	snprintf(why, whylen, "out of memory");
	return -1;
}

static struct json_object *
oa_body(const struct chat_request *rq, char *why, size_t whylen)
{
	struct json_object	*body, *msgs;
	const char		*model = provider_model(rq);
	int			 azure;
	size_t			 i;

	azure = rq->rq_provider->pv_type == PROVIDER_AZURE_OPENAI;
	if (!azure && model == NULL) {
		snprintf(why, whylen, "no model configured");
		return NULL;
	}
	if ((body = json_object_new_object()) == NULL ||
	    /* Azure: the deployment in the URL is the model. */
	    (!azure && add(body, "model", json_object_new_string(model))) ||
	    (msgs = json_object_new_array()) == NULL ||
	    add(body, "messages", msgs))
		goto nomem;
	for (i = 0; i < rq->rq_nmessages; i++)
		if (push(msgs, oa_message(&rq->rq_messages[i])) == -1) {
			snprintf(why, whylen, "message %zu: a tool call or "
			    "result without its id or name, or out of "
			    "memory", i);
			goto fail;
		}
	/* An empty tools array is refused by some servers: leave it out. */
	if (rq->rq_ntools > 0 &&
	    add(body, "tools", provider_function_tools(rq)) == -1) {
		snprintf(why, whylen, "a tool without a name, or out of "
		    "memory");
		goto fail;
	}
	if (oa_options(rq, body, why, whylen) == -1)
		goto fail;
	return body;
 nomem:
	snprintf(why, whylen, "out of memory");
 fail:
	json_object_put(body);
	return NULL;
}

static char *
oa_url(const struct provider_conf *pv, char *why, size_t whylen)
{
	const char	*base = provider_base_url(pv);
	char		*dep, *ver, *path = NULL, *url = NULL;

	if (base == NULL) {
		snprintf(why, whylen, "no base-url");
		return NULL;
	}
	if (pv->pv_type != PROVIDER_AZURE_OPENAI)
		url = provider_url(base, "/chat/completions");
	else if (pv->pv_deployment == NULL || pv->pv_api_version == NULL) {
		snprintf(why, whylen, "azure-openai needs deployment and "
		    "api-version");
		return NULL;
	} else {
		dep = provider_url_escape(pv->pv_deployment);
		ver = provider_url_escape(pv->pv_api_version);
		if (dep != NULL && ver != NULL && asprintf(&path,
		    "/openai/deployments/%s/chat/completions?api-version=%s",
		    dep, ver) != -1) {
			url = provider_url(base, path);
			free(path);
		}
		free(dep);
		free(ver);
	}
	if (url == NULL)
		snprintf(why, whylen, "out of memory");
	return url;
}

static int
oa_headers(const struct provider_conf *pv, struct provider_http *ph,
    char *why, size_t whylen)
{
	const char	*key = provider_api_key(pv);
	int		 r;

	r = provider_http_add_header(ph, "Content-Type", "application/json") ||
	    provider_http_add_header(ph, "Accept", "text/event-stream");
	switch (pv->pv_type) {
	case PROVIDER_AZURE_OPENAI:
	case PROVIDER_OPENAI:
		if (key == NULL) {
			snprintf(why, whylen, "no API key loaded");
			return -1;
		}
		if (pv->pv_type == PROVIDER_AZURE_OPENAI)
			r = r || provider_http_add_header(ph, "api-key", "%s",
			    key);
		else
			r = r || provider_http_add_header(ph, "Authorization",
			    "Bearer %s", key);
		break;
	default:
		if (key != NULL)
			r = r || provider_http_add_header(ph, "Authorization",
			    "Bearer %s", key);
		break;
	}
	if (r != 0)
		snprintf(why, whylen, "the API key cannot go in a header "
		    "(a line break in it?), or out of memory");
	return r ? -1 : 0;
}

static int
oa_build(const struct chat_request *rq, struct provider_http *ph, char *why,
    size_t whylen)
{
	struct json_object	*body;
	int			 r;

	memset(ph, 0, sizeof(*ph));
	if ((body = oa_body(rq, why, whylen)) == NULL)
		return -1;
	r = provider_http_set_body(ph, body);
	json_object_put(body);
	if (r == -1) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	if ((ph->ph_url = oa_url(rq->rq_provider, why, whylen)) == NULL ||
	    oa_headers(rq->rq_provider, ph, why, whylen) == -1)
		goto fail;
	return 0;
 fail:
	provider_http_free(ph);
	return -1;
}

/*
 * The stream.
 */

struct oa_call {
	int			 oc_index;	/* the fragments' index */
	char			*oc_id;
	char			*oc_name;
	struct provider_buf	 oc_args;
};

struct provider_stream {
	const struct provider_events	*st_ev;
	void				*st_arg;
	struct sse_parser		*st_sse;
	struct oa_call			 st_calls[PROVIDER_MAX_CALLS];
	size_t				 st_ncalls;
	int				 st_done;	/* [DONE] seen */
	int				 st_finished;	/* finish_reason seen */
	int				 st_emitted;	/* calls handed out */
	int				 st_reported;	/* pe_finish called */
	int				 st_ending;	/* in po_stream_end */
	char				 st_reason[OA_REASON_MAX];
	int				 st_failed;
	char				 st_err[PROVIDER_MAX_ERROR];
};

static int	 oa_fail(struct provider_stream *, const char *, ...)
		    __attribute__((format(printf, 2, 3)));

static int
oa_fail(struct provider_stream *st, const char *fmt, ...)
{
	va_list	 ap;

	if (!st->st_failed) {
		va_start(ap, fmt);
		vsnprintf(st->st_err, sizeof(st->st_err), fmt, ap);
		va_end(ap);
		st->st_failed = 1;
	}
	return -1;
}

/*
 * The call a fragment belongs to: the latest one with its index, unless
 * the fragment brings a different id.  Some compatible servers number
 * every call of a parallel batch 0 and tell them apart by id alone; and
 * some leave index out, sending whole calls (index < 0 here): then an id
 * starts a call and a fragment without one continues the last.
 */
static struct oa_call *
oa_slot(struct provider_stream *st, int index, const char *id)
{
	struct oa_call	*c = NULL;
	size_t		 i;

	for (i = st->st_ncalls; i > 0; i--)
		if (index < 0 || st->st_calls[i - 1].oc_index == index) {
			c = &st->st_calls[i - 1];
			break;
		}
	if (c != NULL && (id == NULL || id[0] == '\0' || c->oc_id == NULL ||
	    strcmp(c->oc_id, id) == 0))
		return c;
	if (st->st_ncalls == PROVIDER_MAX_CALLS)
		return NULL;
	c = &st->st_calls[st->st_ncalls++];
	c->oc_index = index >= 0 ? index : (int)st->st_ncalls - 1;
	provider_buf_init(&c->oc_args, PROVIDER_MAX_ARGUMENTS);
	return c;
}

static int
oa_fragment(struct provider_stream *st, struct json_object *frag)
{
	struct json_object	*fn = NULL, *v;
	const char		*id, *name = NULL, *args = NULL;
	struct oa_call		*c;
	uint64_t		 index;
	int			 ix = -1;

	if (json_object_object_get_ex(frag, "index", &v) && v != NULL) {
		if (provider_json_u64(frag, "index", &index) == -1 ||
		    index >= PROVIDER_MAX_CALLS)
			return oa_fail(st, "a tool call with a bad index");
		ix = (int)index;
	}
	id = provider_json_str(frag, "id");
	if (json_object_object_get_ex(frag, "function", &fn)) {
		name = provider_json_str(fn, "name");
		args = provider_json_str(fn, "arguments");
	}
	if ((c = oa_slot(st, ix, id)) == NULL)
		return oa_fail(st, "more than %d tool calls",
		    PROVIDER_MAX_CALLS);
	if (c->oc_id == NULL && id != NULL && id[0] != '\0' &&
	    (c->oc_id = strdup(id)) == NULL)
		return oa_fail(st, "out of memory");
	/* Sent once; a server that repeats it is not appending to it. */
	if (c->oc_name == NULL && name != NULL && name[0] != '\0' &&
	    (c->oc_name = strdup(name)) == NULL)
		return oa_fail(st, "out of memory");
	if (args != NULL &&
	    provider_buf_add(&c->oc_args, args, strlen(args)) == -1)
		return oa_fail(st, "tool call arguments longer than %d bytes",
		    PROVIDER_MAX_ARGUMENTS);
	return 0;
}

/* Hand the assembled calls out once, by index (then by arrival). */
static int
oa_emit_calls(struct provider_stream *st)
{
	struct oa_call	*order[PROVIDER_MAX_CALLS], *c;
	char		 made[32];
	size_t		 i, j;

	if (st->st_emitted)
		return 0;
	st->st_emitted = 1;
	for (i = 0; i < st->st_ncalls; i++) {
		c = &st->st_calls[i];
		if (c->oc_name == NULL)
			return oa_fail(st, "tool call %d has no name",
			    c->oc_index);
		for (j = i; j > 0 && order[j - 1]->oc_index > c->oc_index; j--)
			order[j] = order[j - 1];
		order[j] = c;
	}
	for (i = 0; i < st->st_ncalls && st->st_ev->pe_tool_call != NULL;
	    i++) {
		c = order[i];
		/* OpenAI always sends ids; a compatible server may not. */
		snprintf(made, sizeof(made), "call_%zu", i);
		st->st_ev->pe_tool_call(st->st_arg,
		    c->oc_id != NULL ? c->oc_id : made, c->oc_name,
		    c->oc_args.pb_len > 0 ? provider_buf_str(&c->oc_args) :
		    "{}");
	}
	return 0;
}

static void
oa_report_finish(struct provider_stream *st)
{
	if (st->st_reported)
		return;
	st->st_reported = 1;
	/*
	 * Some compatible servers (and Ollama's own API) say "stop" after
	 * tool calls; OpenAI says "tool_calls".  Say it the one way.
	 */
	if (st->st_ncalls > 0 && strcmp(st->st_reason, "stop") == 0)
		snprintf(st->st_reason, sizeof(st->st_reason), "tool_calls");
	if (st->st_ev->pe_finish != NULL)
		st->st_ev->pe_finish(st->st_arg, st->st_reason);
}

static int
oa_choice(struct provider_stream *st, struct json_object *choice)
{
	struct json_object	*delta, *calls;
	const char		*s;
	size_t			 i, n;

	/* Nothing may follow the finish (n is 1); usage chunks have no
	 * choices. */
	if (st->st_finished)
		return 0;
	/* Azure's content-filter annotations come without a delta. */
	if (json_object_object_get_ex(choice, "delta", &delta) &&
	    json_object_is_type(delta, json_type_object)) {
		if ((s = provider_json_str(delta, "content")) != NULL &&
		    s[0] != '\0' && st->st_ev->pe_text != NULL)
			st->st_ev->pe_text(st->st_arg, s, strlen(s));
		/* A refusal is the answer the user gets: show it as text. */
		if ((s = provider_json_str(delta, "refusal")) != NULL &&
		    s[0] != '\0' && st->st_ev->pe_text != NULL)
			st->st_ev->pe_text(st->st_arg, s, strlen(s));
		if (json_object_object_get_ex(delta, "tool_calls", &calls) &&
		    json_object_is_type(calls, json_type_array)) {
			n = json_object_array_length(calls);
			for (i = 0; i < n; i++)
				if (oa_fragment(st, json_object_array_get_idx(
				    calls, i)) == -1)
					return -1;
		}
	}
	if ((s = provider_json_str(choice, "finish_reason")) != NULL) {
		st->st_finished = 1;
		provider_text_clean(st->st_reason, sizeof(st->st_reason), s,
		    strlen(s));
		return oa_emit_calls(st);
	}
	return 0;
}

static int
oa_chunk(struct provider_stream *st, struct json_object *o)
{
	struct json_object	*v, *usage;
	uint64_t		 in, out;

	if (json_object_object_get_ex(o, "error", &v) && v != NULL) {
		if (provider_error_json(OA_WHO, o, st->st_err,
		    sizeof(st->st_err)) == -1)
			snprintf(st->st_err, sizeof(st->st_err),
			    "%s sent an error in the stream", OA_WHO);
		st->st_failed = 1;
		return -1;
	}
	/* Null except in the last chunk (stream_options.include_usage). */
	if (json_object_object_get_ex(o, "usage", &usage) &&
	    provider_json_u64(usage, "prompt_tokens", &in) == 0 &&
	    provider_json_u64(usage, "completion_tokens", &out) == 0 &&
	    st->st_ev->pe_usage != NULL)
		st->st_ev->pe_usage(st->st_arg, in, out);
	/* Empty: Azure's prompt filter results first, the usage chunk last. */
	if (json_object_object_get_ex(o, "choices", &v) &&
	    json_object_is_type(v, json_type_array) &&
	    json_object_array_length(v) > 0)
		return oa_choice(st, json_object_array_get_idx(v, 0));
	return 0;
}

/*
 * The end of the model's turn: [DONE], or the body's end after a
 * finish_reason.  The finish is reported last, after the usage chunk
 * that follows the finish_reason, so that it closes the turn.
 */
static int
oa_complete(struct provider_stream *st)
{
	if (!st->st_finished) {
		/* [DONE] with no finish_reason: some servers do that. */
		snprintf(st->st_reason, sizeof(st->st_reason), "%s",
		    st->st_ncalls > 0 ? "tool_calls" : "stop");
		st->st_finished = 1;
	}
	if (oa_emit_calls(st) == -1)
		return -1;
	oa_report_finish(st);
	return 0;
}

static void
oa_on_event(const struct sse_event *ev, void *arg)
{
	struct provider_stream	*st = arg;
	struct json_object	*o;

	if (st->st_failed || st->st_done)
		return;
	if (strcmp(ev->ev_data, "[DONE]") == 0) {
		st->st_done = 1;
		oa_complete(st);
		return;
	}
	if (strlen(ev->ev_data) != ev->ev_data_len ||
	    (o = json_parse_object(ev->ev_data, ev->ev_data_len)) == NULL) {
		/* A chunk the end of the body cut in half (see end()). */
		if (st->st_ending && st->st_finished)
			return;
		if (st->st_ending)
			oa_fail(st, "the stream ended before the model "
			    "finished (in the middle of a chunk)");
		else
			oa_fail(st, "a malformed chunk in the stream");
		return;
	}
	/* OpenAI's ErrorEvent: the error object is the data itself. */
	if (strcmp(ev->ev_type, "error") == 0) {
		if (provider_error_json(OA_WHO, o, st->st_err,
		    sizeof(st->st_err)) == -1)
			snprintf(st->st_err, sizeof(st->st_err),
			    "%s sent an error event", OA_WHO);
		st->st_failed = 1;
	} else
		oa_chunk(st, o);
	json_object_put(o);
}

static struct provider_stream *
oa_stream_new(const struct provider_events *ev, void *arg)
{
	struct provider_stream	*st;

	if ((st = calloc(1, sizeof(*st))) == NULL)
		return NULL;
	st->st_ev = ev;
	st->st_arg = arg;
	if ((st->st_sse = sse_parser_new(PROVIDER_MAX_LINE, PROVIDER_MAX_LINE,
	    oa_on_event, st)) == NULL) {
		free(st);
		return NULL;
	}
	return st;
}

static int
oa_stream_feed(struct provider_stream *st, const char *buf, size_t len)
{
	if (st->st_failed)
		return -1;
	if (sse_parser_feed(st->st_sse, buf, len) == -1)
		return oa_fail(st, "bad event stream: %s",
		    sse_parser_error(st->st_sse));
	return st->st_failed ? -1 : 0;
}

static int
oa_stream_end(struct provider_stream *st)
{
	if (st->st_failed)
		return -1;
	/*
	 * An event not closed by a blank line is dropped at the end of an
	 * SSE stream; close it, so that a server that ends on "data:
	 * [DONE]\n" still counts as done.  A chunk cut in half fails to
	 * parse here instead of passing unseen.
	 */
	st->st_ending = 1;
	if (!st->st_done && oa_stream_feed(st, "\n\n", 2) == -1)
		return -1;
	if (!st->st_done && !st->st_finished)
		return oa_fail(st, "the stream ended before the model "
		    "finished");
	if (oa_complete(st) == -1)
		return -1;
	return 0;
}

static const char *
oa_stream_error(const struct provider_stream *st)
{
	return st->st_failed ? st->st_err : NULL;
}

static void
oa_stream_free(struct provider_stream *st)
{
	size_t	 i;

	if (st == NULL)
		return;
	for (i = 0; i < st->st_ncalls; i++) {
		free(st->st_calls[i].oc_id);
		free(st->st_calls[i].oc_name);
		provider_buf_free(&st->st_calls[i].oc_args);
	}
	sse_parser_free(st->st_sse);
	free(st);
}

static void
oa_error_message(int status, const char *body, size_t len, char *out,
    size_t outlen)
{
	provider_error_format(OA_WHO, status, body, len, out, outlen);
}

const struct provider_ops openai_ops = {
	.po_name = "openai",
	.po_build = oa_build,
	.po_stream_new = oa_stream_new,
	.po_stream_feed = oa_stream_feed,
	.po_stream_end = oa_stream_end,
	.po_stream_error = oa_stream_error,
	.po_stream_free = oa_stream_free,
	.po_error_message = oa_error_message,
};
