/*
 * Ollama's native chat API, streamed: POST {base}/api/chat.  Reference:
 * ollama/ollama docs/api.md ("Generate a chat completion", "Chat request
 * (Streaming with tools)", "(With history, with tools)"), docs/api/
 * errors.mdx and streaming.mdx, and api/types.go for the field types.
 *
 * Differences from OpenAI's format that matter here: tool call arguments
 * are JSON objects, not text; a tool result names its tool (tool_name)
 * rather than a call id; the response is NDJSON, one object per line,
 * with tool calls arriving whole and the last object carrying done,
 * done_reason and the token counts.  A local server needs no key; one
 * behind a proxy, or ollama.com, takes a Bearer token.
 */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "common/util.h"
#include "broker/providers/provider_util.h"

#define OL_WHO		"Ollama"
#define OL_REASON_MAX	32

#define add	provider_json_add
#define push	provider_json_push

static struct json_object *
str_or_empty(const char *s)
{
	return json_object_new_string(s != NULL ? s : "");
}

/*
 * A call's arguments as the object Ollama wants.  The text came from a
 * model, maybe another provider's, and may not be an object: then {} goes
 * out rather than a request that can never succeed again, since the
 * history is resent every turn.
 */
static struct json_object *
ol_arguments(const char *text)
{
	struct json_object	*o = NULL;

	if (text != NULL && text[0] != '\0')
		o = json_parse_object(text, strlen(text));
	return o != NULL ? o : json_object_new_object();
}

/* {function: {name, arguments: OBJECT}} */
static struct json_object *
ol_call(const struct chat_tool_call *tc)
{
	struct json_object	*call, *fn;

	if (tc->tc_name == NULL || (fn = json_object_new_object()) == NULL)
		return NULL;
	if (add(fn, "name", json_object_new_string(tc->tc_name)) ||
	    add(fn, "arguments", ol_arguments(tc->tc_arguments)) ||
	    (call = json_object_new_object()) == NULL) {
		json_object_put(fn);
		return NULL;
	}
	if (add(call, "function", fn)) {
		json_object_put(call);
		return NULL;
	}
	return call;
}

static struct json_object *
ol_tool_calls(const struct chat_message *m)
{
	struct json_object	*calls;
	size_t			 i;

	if ((calls = json_object_new_array()) == NULL)
		return NULL;
	for (i = 0; i < m->cm_ncalls; i++)
		if (push(calls, ol_call(&m->cm_calls[i])) == -1) {
			json_object_put(calls);
			return NULL;
		}
	return calls;
}

static struct json_object *
ol_message(const struct chat_message *m)
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
	r = add(o, "role", json_object_new_string(roles[m->cm_role])) ||
	    add(o, "content", str_or_empty(m->cm_content));
	if (m->cm_role == ROLE_ASSISTANT && m->cm_ncalls > 0)
		r = r || add(o, "tool_calls", ol_tool_calls(m));
	/*
	 * No error flag and no call id in docs/api.md's tool message: the
	 * text says what happened, tool_name which tool it was.
	 */
	if (m->cm_role == ROLE_TOOL && m->cm_call_name != NULL)
		r = r || add(o, "tool_name",
		    json_object_new_string(m->cm_call_name));
	if (r != 0) {
		json_object_put(o);
		return NULL;
	}
	return o;
}

/* options: the Modelfile parameters; num_predict caps the output. */
static int
ol_options(const struct chat_request *rq, struct json_object *body,
    char *why, size_t whylen)
{
	struct json_object	*opts;

	if (rq->rq_max_tokens < 0) {
		snprintf(why, whylen, "negative max-tokens");
		return -1;
	}
	if (!rq->rq_has_temperature && rq->rq_max_tokens == 0)
		return 0;
	if ((opts = json_object_new_object()) == NULL)
		goto nomem;
	if (rq->rq_has_temperature && add(opts, "temperature",
	    provider_json_double(rq->rq_temperature)) == -1) {
		json_object_put(opts);
		snprintf(why, whylen, "temperature is not a number");
		return -1;
	}
	if ((rq->rq_max_tokens > 0 && add(opts, "num_predict",
	    json_object_new_int64(rq->rq_max_tokens)) == -1)) {
		json_object_put(opts);
		goto nomem;
	}
	if (add(body, "options", opts) == -1)
		goto nomem;
	return 0;
 nomem:
	snprintf(why, whylen, "out of memory");
	return -1;
}

static struct json_object *
ol_body(const struct chat_request *rq, char *why, size_t whylen)
{
	struct json_object	*body, *msgs;
	const char		*model = provider_model(rq);
	size_t			 i;

	if (model == NULL) {
		snprintf(why, whylen, "no model configured");
		return NULL;
	}
	if ((body = json_object_new_object()) == NULL ||
	    add(body, "model", json_object_new_string(model)) ||
	    (msgs = json_object_new_array()) == NULL ||
	    add(body, "messages", msgs))
		goto nomem;
	for (i = 0; i < rq->rq_nmessages; i++)
		if (push(msgs, ol_message(&rq->rq_messages[i])) == -1) {
			snprintf(why, whylen, "message %zu: a tool call "
			    "without its name, or out of memory", i);
			goto fail;
		}
	if (rq->rq_ntools > 0 &&
	    add(body, "tools", provider_function_tools(rq)) == -1) {
		snprintf(why, whylen, "a tool without a name, or out of "
		    "memory");
		goto fail;
	}
	/* Streaming is the default, but say so. */
	if (add(body, "stream", json_object_new_boolean(1)) == -1)
		goto nomem;
	if (ol_options(rq, body, why, whylen) == -1)
		goto fail;
	return body;
 nomem:
	snprintf(why, whylen, "out of memory");
 fail:
	json_object_put(body);
	return NULL;
}

static int
ol_build(const struct chat_request *rq, struct provider_http *ph, char *why,
    size_t whylen)
{
	const struct provider_conf	*pv = rq->rq_provider;
	struct json_object		*body;
	const char			*key = provider_api_key(pv);
	int				 r;

	memset(ph, 0, sizeof(*ph));
	if ((body = ol_body(rq, why, whylen)) == NULL)
		return -1;
	r = provider_http_set_body(ph, body);
	json_object_put(body);
	if (r == -1 ||
	    (ph->ph_url = provider_url(provider_base_url(pv), "/api/chat")) ==
	    NULL ||
	    provider_http_add_header(ph, "Content-Type", "application/json") ||
	    provider_http_add_header(ph, "Accept", "application/x-ndjson")) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	if (key != NULL &&
	    provider_http_add_header(ph, "Authorization", "Bearer %s", key)) {
		snprintf(why, whylen, "the API key cannot go in a header "
		    "(a line break in it?), or out of memory");
		goto fail;
	}
	return 0;
 fail:
	provider_http_free(ph);
	return -1;
}

/*
 * The stream.
 */

struct provider_stream {
	const struct provider_events	*st_ev;
	void				*st_arg;
	struct provider_buf		 st_line;
	unsigned int			 st_ncalls;	/* handed out */
	int				 st_done;	/* done: true seen */
	int				 st_ending;	/* in po_stream_end */
	int				 st_failed;
	char				 st_err[PROVIDER_MAX_ERROR];
};

static int	 ol_fail(struct provider_stream *, const char *, ...)
		    __attribute__((format(printf, 2, 3)));

static int
ol_fail(struct provider_stream *st, const char *fmt, ...)
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
 * One whole call: {function: {name, arguments: OBJECT}}, and in newer
 * servers an id (api/types.go ToolCall.ID).  Without one, "call_N", N
 * counting this response's calls from 0: stable, and unique where it
 * matters, among the results of one turn.
 */
static int
ol_tool_call(struct provider_stream *st, struct json_object *call)
{
	struct json_object	*fn = NULL, *args = NULL;
	const char		*id, *name, *text;
	char			 made[32];
	size_t			 len = 0;

	if (st->st_ncalls == PROVIDER_MAX_CALLS)
		return ol_fail(st, "more than %d tool calls",
		    PROVIDER_MAX_CALLS);
	json_object_object_get_ex(call, "function", &fn);
	if ((name = provider_json_str(fn, "name")) == NULL || name[0] == '\0')
		return ol_fail(st, "a tool call without a name");
	if (json_object_object_get_ex(fn, "arguments", &args) &&
	    json_object_is_type(args, json_type_string))
		text = provider_json_str(fn, "arguments");   /* as text */
	else if (args == NULL)
		text = "{}";
	else
		text = json_object_to_json_string_length(args,
		    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
		    &len);
	if (text == NULL || strlen(text) > PROVIDER_MAX_ARGUMENTS)
		return ol_fail(st, "tool call arguments that are not JSON "
		    "or longer than %d bytes", PROVIDER_MAX_ARGUMENTS);
	if ((id = provider_json_str(call, "id")) == NULL || id[0] == '\0') {
		snprintf(made, sizeof(made), "call_%u", st->st_ncalls);
		id = made;
	}
	st->st_ncalls++;
	if (st->st_ev->pe_tool_call != NULL)
		st->st_ev->pe_tool_call(st->st_arg, id, name, text);
	return 0;
}

static int
ol_message_part(struct provider_stream *st, struct json_object *msg)
{
	struct json_object	*calls;
	const char		*s;
	size_t			 i, n;

	/* "thinking" is the model's scratch pad: not part of the answer. */
	if ((s = provider_json_str(msg, "content")) != NULL && s[0] != '\0' &&
	    st->st_ev->pe_text != NULL)
		st->st_ev->pe_text(st->st_arg, s, strlen(s));
	if (json_object_object_get_ex(msg, "tool_calls", &calls) &&
	    json_object_is_type(calls, json_type_array)) {
		n = json_object_array_length(calls);
		for (i = 0; i < n; i++)
			if (ol_tool_call(st, json_object_array_get_idx(calls,
			    i)) == -1)
				return -1;
	}
	return 0;
}

/*
 * done: true.  done_reason is "stop" even when the turn ended in tool
 * calls (docs/api.md's streaming-with-tools example): say "tool_calls"
 * then, as the other formats do.
 */
static void
ol_done(struct provider_stream *st, struct json_object *o)
{
	char		 reason[OL_REASON_MAX];
	const char	*s;
	uint64_t	 in = 0, out = 0;
	int		 have_in, have_out;

	st->st_done = 1;
	have_in = provider_json_u64(o, "prompt_eval_count", &in) == 0;
	have_out = provider_json_u64(o, "eval_count", &out) == 0;
	if ((have_in || have_out) && st->st_ev->pe_usage != NULL)
		st->st_ev->pe_usage(st->st_arg, in, out);
	if ((s = provider_json_str(o, "done_reason")) == NULL || s[0] == '\0')
		s = "stop";
	if (st->st_ncalls > 0 && strcmp(s, "stop") == 0)
		s = "tool_calls";
	provider_text_clean(reason, sizeof(reason), s, strlen(s));
	if (st->st_ev->pe_finish != NULL)
		st->st_ev->pe_finish(st->st_arg, reason);
}

static int
ol_line(const char *line, size_t len, void *arg)
{
	struct provider_stream	*st = arg;
	struct json_object	*o, *v;
	int			 done = 0, r = 0;

	/* Nothing is expected after the last object; blank lines are no
	 * objects. */
	if (st->st_done || strspn(line, " \t") == len)
		return 0;
	if (strlen(line) != len || (o = json_parse_object(line, len)) == NULL)
		return ol_fail(st, st->st_ending ? "the stream ended before "
		    "the model finished (in the middle of a line)" :
		    "a malformed line in the stream");
	/* docs/api/errors.mdx: {"error": "..."} mid-stream, status kept. */
	if (json_object_object_get_ex(o, "error", &v) && v != NULL) {
		if (provider_error_json(OL_WHO, o, st->st_err,
		    sizeof(st->st_err)) == -1)
			snprintf(st->st_err, sizeof(st->st_err),
			    "%s sent an error in the stream", OL_WHO);
		st->st_failed = 1;
		json_object_put(o);
		return -1;
	}
	if (json_object_object_get_ex(o, "message", &v) &&
	    json_object_is_type(v, json_type_object))
		r = ol_message_part(st, v);
	if (r == 0 && json_object_object_get_ex(o, "done", &v) &&
	    json_object_is_type(v, json_type_boolean))
		done = json_object_get_boolean(v);
	if (r == 0 && done)
		ol_done(st, o);
	json_object_put(o);
	return r;
}

static struct provider_stream *
ol_stream_new(const struct provider_events *ev, void *arg)
{
	struct provider_stream	*st;

	if ((st = calloc(1, sizeof(*st))) == NULL)
		return NULL;
	st->st_ev = ev;
	st->st_arg = arg;
	provider_buf_init(&st->st_line, PROVIDER_MAX_LINE);
	return st;
}

static int
ol_stream_feed(struct provider_stream *st, const char *buf, size_t len)
{
	if (st->st_failed)
		return -1;
	if (provider_lines_feed(&st->st_line, buf, len, ol_line, st) == -1)
		return ol_fail(st, "a line longer than %d bytes in the stream",
		    PROVIDER_MAX_LINE);
	return 0;
}

static int
ol_stream_end(struct provider_stream *st)
{
	if (st->st_failed)
		return -1;
	/* Each object ends with a newline; accept a last one without. */
	st->st_ending = 1;
	if (st->st_line.pb_len > 0) {
		if (ol_line(provider_buf_str(&st->st_line), st->st_line.pb_len,
		    st) == -1)
			return -1;
		provider_buf_reset(&st->st_line);
	}
	if (!st->st_done)
		return ol_fail(st, "the stream ended before the model "
		    "finished");
	return 0;
}

static const char *
ol_stream_error(const struct provider_stream *st)
{
	return st->st_failed ? st->st_err : NULL;
}

static void
ol_stream_free(struct provider_stream *st)
{
	if (st == NULL)
		return;
	provider_buf_free(&st->st_line);
	free(st);
}

static void
ol_error_message(int status, const char *body, size_t len, char *out,
    size_t outlen)
{
	provider_error_format(OL_WHO, status, body, len, out, outlen);
}

const struct provider_ops ollama_ops = {
	.po_name = "ollama",
	.po_build = ol_build,
	.po_stream_new = ol_stream_new,
	.po_stream_feed = ol_stream_feed,
	.po_stream_end = ol_stream_end,
	.po_stream_error = ol_stream_error,
	.po_stream_free = ol_stream_free,
	.po_error_message = ol_error_message,
};
