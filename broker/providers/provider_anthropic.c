/*
 * The Anthropic Messages API, streamed (POST /v1/messages, "stream": true).
 *
 * References: the Messages API and streaming pages of the Anthropic
 * documentation and the official Python SDK (anthropics/anthropic-sdk-python:
 * types/raw_*_event.py, tool_use_block_param.py, tool_result_block_param.py,
 * lib/streaming/_messages.py, which this parser follows).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "broker/providers/provider.h"
#include "broker/providers/provider_util.h"
#include "common/sse.h"
#include "common/util.h"

#define ANT_VERSION		"2023-06-01"
#define ANT_DEFAULT_MAX_TOKENS	4096	/* the API has no default */
#define ANT_MAX_EVENT		PROVIDER_MAX_LINE
#define ANT_MAX_BLOCKS		1024	/* blocks in one message */
#define ANT_MAX_SYSTEM		(4 * 1024 * 1024)

enum ant_block_type {
	BLOCK_NONE,		/* not started, or a kind we do not use */
	BLOCK_TEXT,
	BLOCK_TOOL_USE,
};

struct ant_block {
	enum ant_block_type	 bl_type;
	char			*bl_id;
	char			*bl_name;
	struct provider_buf	 bl_input;	/* partial_json, joined */
	int			 bl_done;
};

struct provider_stream {
	const struct provider_events	*st_ev;
	void				*st_arg;
	struct sse_parser		*st_sse;
	struct ant_block		*st_blocks;
	size_t				 st_nblocks;
	uint64_t			 st_in;
	uint64_t			 st_out;
	int				 st_started;	/* got message_start */
	int				 st_stopped;	/* got message_stop */
	int				 st_failed;
	char				 st_err[PROVIDER_MAX_ERROR];
};

/* Request */

static struct json_object *
ant_text_block(const char *text)
{
	struct json_object	*b;

	if ((b = json_object_new_object()) == NULL)
		return NULL;
	json_object_object_add(b, "type", json_object_new_string("text"));
	json_object_object_add(b, "text", json_object_new_string(text));
	return b;
}

/*
 * The arguments as the model wrote them, as an object.  Anything else
 * becomes {}: the chat loop has already refused the call, and the text
 * would only make the API refuse the whole conversation.
 */
static struct json_object *
ant_input(const char *arguments)
{
	struct json_object	*o = NULL;

	if (arguments != NULL)
		o = json_parse_object(arguments, strlen(arguments));
	return o != NULL ? o : json_object_new_object();
}

static struct json_object *
ant_tool_use(const struct chat_tool_call *tc)
{
	struct json_object	*b;

	if ((b = json_object_new_object()) == NULL)
		return NULL;
	json_object_object_add(b, "type", json_object_new_string("tool_use"));
	json_object_object_add(b, "id", json_object_new_string(tc->tc_id));
	json_object_object_add(b, "name", json_object_new_string(tc->tc_name));
	json_object_object_add(b, "input", ant_input(tc->tc_arguments));
	return b;
}

static struct json_object *
ant_tool_result(const struct chat_message *m)
{
	struct json_object	*b;

	if ((b = json_object_new_object()) == NULL)
		return NULL;
	json_object_object_add(b, "type",
	    json_object_new_string("tool_result"));
	json_object_object_add(b, "tool_use_id",
	    json_object_new_string(m->cm_call_id));
	json_object_object_add(b, "content",
	    json_object_new_string(m->cm_content ? m->cm_content : ""));
	json_object_object_add(b, "is_error",
	    json_object_new_boolean(m->cm_is_error != 0));
	return b;
}

/*
 * One turn being put together.  The API wants user and assistant turns to
 * alternate, so consecutive messages of one role become one turn; in a
 * user turn the tool_result blocks must come before any text, so they are
 * kept apart until the turn is closed.
 */
struct ant_turn {
	const char		*tu_role;	/* NULL: none open */
	struct json_object	*tu_results;
	struct json_object	*tu_other;
};

static int
ant_turn_close(struct ant_turn *tu, struct json_object *messages)
{
	struct json_object	*msg, *content;
	size_t			 i, n;

	if (tu->tu_role == NULL)
		return 0;
	if ((msg = json_object_new_object()) == NULL)
		return -1;
	content = tu->tu_results;
	n = json_object_array_length(tu->tu_other);
	for (i = 0; i < n; i++)
		json_object_array_add(content, json_object_get(
		    json_object_array_get_idx(tu->tu_other, i)));
	json_object_put(tu->tu_other);
	json_object_object_add(msg, "role",
	    json_object_new_string(tu->tu_role));
	json_object_object_add(msg, "content", content);
	json_object_array_add(messages, msg);
	tu->tu_role = NULL;
	tu->tu_results = tu->tu_other = NULL;
	return 0;
}

static int
ant_turn_open(struct ant_turn *tu, const char *role,
    struct json_object *messages)
{
	if (tu->tu_role != NULL && strcmp(tu->tu_role, role) == 0)
		return 0;
	if (ant_turn_close(tu, messages) == -1)
		return -1;
	tu->tu_results = json_object_new_array();
	tu->tu_other = json_object_new_array();
	if (tu->tu_results == NULL || tu->tu_other == NULL)
		return -1;
	tu->tu_role = role;
	return 0;
}

static int
ant_add_message(struct ant_turn *tu, const struct chat_message *m,
    struct json_object *messages, char *why, size_t whylen)
{
	size_t	 i;
	int	 has_text;

	has_text = m->cm_content != NULL && m->cm_content[0] != '\0';

	switch (m->cm_role) {
	case ROLE_USER:
		/* Empty text blocks are refused, and say nothing. */
		if (!has_text)
			return 0;
		if (ant_turn_open(tu, "user", messages) == -1)
			return -1;
		return json_object_array_add(tu->tu_other,
		    ant_text_block(m->cm_content));
	case ROLE_ASSISTANT:
		if (!has_text && m->cm_ncalls == 0)
			return 0;
		if (ant_turn_open(tu, "assistant", messages) == -1)
			return -1;
		if (has_text)
			json_object_array_add(tu->tu_other,
			    ant_text_block(m->cm_content));
		for (i = 0; i < m->cm_ncalls; i++) {
			if (m->cm_calls[i].tc_id == NULL ||
			    m->cm_calls[i].tc_name == NULL) {
				snprintf(why, whylen, "tool call without id "
				    "or name");
				return -1;
			}
			json_object_array_add(tu->tu_other,
			    ant_tool_use(&m->cm_calls[i]));
		}
		return 0;
	case ROLE_TOOL:
		if (m->cm_call_id == NULL) {
			snprintf(why, whylen, "tool result without call id");
			return -1;
		}
		if (ant_turn_open(tu, "user", messages) == -1)
			return -1;
		return json_object_array_add(tu->tu_results,
		    ant_tool_result(m));
	default:
		return 0;	/* ROLE_SYSTEM: gathered apart */
	}
}

/* Every system message, in order, as the top-level system string. */
static int
ant_system(const struct chat_request *rq, struct json_object *body)
{
	struct provider_buf	 sys;
	size_t			 i;
	const char		*c;
	int			 rc = 0;

	provider_buf_init(&sys, ANT_MAX_SYSTEM);
	for (i = 0; i < rq->rq_nmessages && rc == 0; i++) {
		c = rq->rq_messages[i].cm_content;
		if (rq->rq_messages[i].cm_role != ROLE_SYSTEM || c == NULL ||
		    c[0] == '\0')
			continue;
		if (sys.pb_len > 0)
			rc = provider_buf_add(&sys, "\n\n", 2);
		if (rc == 0)
			rc = provider_buf_add(&sys, c, strlen(c));
	}
	if (rc == 0 && sys.pb_len > 0)
		json_object_object_add(body, "system",
		    json_object_new_string_len(sys.pb_data, (int)sys.pb_len));
	provider_buf_free(&sys);
	return rc;
}

static int
ant_messages(const struct chat_request *rq, struct json_object *body,
    char *why, size_t whylen)
{
	struct json_object	*messages;
	struct ant_turn		 tu = { 0 };
	size_t			 i;
	int			 rc = 0;

	if ((messages = json_object_new_array()) == NULL)
		return -1;
	for (i = 0; i < rq->rq_nmessages && rc == 0; i++)
		rc = ant_add_message(&tu, &rq->rq_messages[i], messages, why,
		    whylen);
	if (rc == 0)
		rc = ant_turn_close(&tu, messages);
	json_object_put(tu.tu_results);
	json_object_put(tu.tu_other);
	json_object_object_add(body, "messages", messages);
	return rc;
}

/*
 * input_schema must be an object schema, and the API refuses oneOf, allOf
 * or anyOf at its top ("input_schema does not support oneOf, allOf, or
 * anyOf at the top level"): one such MCP tool would fail every request.
 * Those top-level keywords are left out (the tool still checks its
 * arguments); everything else goes as the server wrote it.
 */
static struct json_object *
ant_input_schema(struct json_object *schema)
{
	static const char *const top[] = { "anyOf", "oneOf", "allOf" };
	struct json_object_iterator	 it, end;
	struct json_object		*out;
	const char			*k;
	size_t				 i;
	int				 ok;

	if (json_object_is_type(schema, json_type_object)) {
		ok = (k = provider_json_str(schema, "type")) != NULL &&
		    strcmp(k, "object") == 0;
		for (i = 0; ok && i < sizeof(top) / sizeof(top[0]); i++)
			ok = !json_object_object_get_ex(schema, top[i], NULL);
		if (ok)
			return json_object_get(schema);
	}
	if ((out = json_object_new_object()) == NULL)
		return NULL;
	json_object_object_add(out, "type", json_object_new_string("object"));
	if (!json_object_is_type(schema, json_type_object))
		return out;
	it = json_object_iter_begin(schema);
	end = json_object_iter_end(schema);
	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		k = json_object_iter_peek_name(&it);
		for (i = 0; i < sizeof(top) / sizeof(top[0]); i++)
			if (strcmp(k, top[i]) == 0)
				break;
		if (i == sizeof(top) / sizeof(top[0]) &&
		    strcmp(k, "type") != 0)
			json_object_object_add(out, k,
			    json_object_get(json_object_iter_peek_value(&it)));
	}
	return out;
}

static int
ant_tools(const struct chat_request *rq, struct json_object *body,
    char *why, size_t whylen)
{
	struct json_object	*tools, *t;
	const struct chat_tool_def *td;
	size_t			 i;

	if (rq->rq_ntools == 0)
		return 0;
	if ((tools = json_object_new_array()) == NULL)
		return -1;
	for (i = 0; i < rq->rq_ntools; i++) {
		td = &rq->rq_tools[i];
		if (td->td_name == NULL)
			snprintf(why, whylen, "tool without a name");
		if (td->td_name == NULL ||
		    (t = json_object_new_object()) == NULL) {
			json_object_put(tools);
			return -1;
		}
		json_object_object_add(t, "name",
		    json_object_new_string(td->td_name));
		if (td->td_description != NULL)
			json_object_object_add(t, "description",
			    json_object_new_string(td->td_description));
		json_object_object_add(t, "input_schema",
		    ant_input_schema(td->td_schema));
		json_object_array_add(tools, t);
	}
	json_object_object_add(body, "tools", tools);
	return 0;
}

static struct json_object *
ant_body(const struct chat_request *rq, const char *model, char *why,
    size_t whylen)
{
	struct json_object	*body;
	int			 max = rq->rq_max_tokens > 0 ?
				    rq->rq_max_tokens : ANT_DEFAULT_MAX_TOKENS;

	if ((body = json_object_new_object()) == NULL)
		return NULL;
	json_object_object_add(body, "model", json_object_new_string(model));
	json_object_object_add(body, "max_tokens", json_object_new_int(max));
	if (ant_system(rq, body) == -1 ||
	    ant_messages(rq, body, why, whylen) == -1 ||
	    ant_tools(rq, body, why, whylen) == -1) {
		json_object_put(body);
		return NULL;
	}
	if (rq->rq_has_temperature)
		json_object_object_add(body, "temperature",
		    provider_json_double(rq->rq_temperature));
	json_object_object_add(body, "stream", json_object_new_boolean(1));
	return body;
}

static int
ant_build(const struct chat_request *rq, struct provider_http *ph,
    char *why, size_t whylen)
{
	struct json_object	*body;
	const char		*model, *key;
	int			 rc;

	memset(ph, 0, sizeof(*ph));
	if ((model = provider_model(rq)) == NULL) {
		snprintf(why, whylen, "no model");
		return -1;
	}
	if ((key = provider_api_key(rq->rq_provider)) == NULL) {
		snprintf(why, whylen, "no API key");
		return -1;
	}
	snprintf(why, whylen, "out of memory");
	if ((body = ant_body(rq, model, why, whylen)) == NULL)
		return -1;
	rc = provider_http_set_body(ph, body);
	json_object_put(body);
	if (rc == -1 ||
	    (ph->ph_url = provider_url(provider_base_url(rq->rq_provider),
	    "/v1/messages")) == NULL ||
	    provider_http_add_header(ph, "x-api-key", "%s", key) == -1 ||
	    provider_http_add_header(ph, "anthropic-version", "%s",
	    ANT_VERSION) == -1 ||
	    provider_http_add_header(ph, "content-type",
	    "application/json") == -1 ||
	    provider_http_add_header(ph, "accept", "text/event-stream") == -1) {
		/* The key may be the reason: never say more than this. */
		snprintf(why, whylen, "cannot build the request (base-url, "
		    "API key or memory)");
		provider_http_free(ph);
		memset(ph, 0, sizeof(*ph));
		return -1;
	}
	return 0;
}

/* Stream */

static void
ant_fail(struct provider_stream *st, const char *what, const char *arg)
{
	char	 buf[PROVIDER_MAX_ERROR];

	if (st->st_failed)
		return;
	st->st_failed = 1;
	snprintf(buf, sizeof(buf), "%s%s", what, arg != NULL ? arg : "");
	provider_text_clean(st->st_err, sizeof(st->st_err), buf, strlen(buf));
}

/*
 * Usage is cumulative.  Input is what the request cost in all: fresh input
 * plus what was written to and read from the prompt cache (the SDK's
 * Usage: "Total input tokens in a request is the summation of
 * input_tokens, cache_creation_input_tokens, and cache_read_input_tokens").
 * message_delta may leave the input counts out: then the start's stand.
 */
static void
ant_usage(struct provider_stream *st, struct json_object *usage)
{
	uint64_t	 in = 0, cw = 0, cr = 0, out = 0;

	if (usage == NULL || !json_object_is_type(usage, json_type_object))
		return;
	if (provider_json_u64(usage, "input_tokens", &in) == 0) {
		if (provider_json_u64(usage, "cache_creation_input_tokens",
		    &cw) == -1)
			cw = 0;
		if (provider_json_u64(usage, "cache_read_input_tokens",
		    &cr) == -1)
			cr = 0;
		st->st_in = in + cw + cr;
	}
	if (provider_json_u64(usage, "output_tokens", &out) == 0)
		st->st_out = out;
	if (st->st_ev->pe_usage != NULL)
		st->st_ev->pe_usage(st->st_arg, st->st_in, st->st_out);
}

static struct json_object *
ant_member(struct json_object *o, const char *key, enum json_type type)
{
	struct json_object	*v;

	if (!json_object_object_get_ex(o, key, &v) || v == NULL ||
	    !json_object_is_type(v, type))
		return NULL;
	return v;
}

static struct ant_block *
ant_block_at(struct provider_stream *st, struct json_object *ev, int grow)
{
	struct ant_block	*nb;
	int64_t			 idx;

	if (json_get_int(ev, "index", 0, ANT_MAX_BLOCKS - 1, 0, &idx) == -1)
		return NULL;
	if ((size_t)idx >= st->st_nblocks) {
		if (!grow)
			return NULL;
		nb = reallocarray(st->st_blocks, idx + 1, sizeof(*nb));
		if (nb == NULL)
			return NULL;
		memset(nb + st->st_nblocks, 0,
		    (idx + 1 - st->st_nblocks) * sizeof(*nb));
		st->st_blocks = nb;
		st->st_nblocks = idx + 1;
	}
	return &st->st_blocks[idx];
}

static int
ant_block_start(struct provider_stream *st, struct json_object *ev)
{
	struct ant_block	*bl;
	struct json_object	*cb;
	const char		*type, *id, *name;

	if ((bl = ant_block_at(st, ev, 1)) == NULL || bl->bl_type !=
	    BLOCK_NONE || bl->bl_done ||
	    (cb = ant_member(ev, "content_block", json_type_object)) == NULL ||
	    json_get_str(cb, "type", 64, 0, &type) == -1)
		return -1;
	if (strcmp(type, "text") == 0) {
		bl->bl_type = BLOCK_TEXT;
		return 0;
	}
	if (strcmp(type, "tool_use") != 0)
		return 0;	/* thinking, server tools: not ours to show */
	if (json_get_str(cb, "id", 256, 0, &id) == -1 ||
	    json_get_str(cb, "name", 256, 0, &name) == -1 ||
	    (bl->bl_id = strdup(id)) == NULL ||
	    (bl->bl_name = strdup(name)) == NULL)
		return -1;
	provider_buf_init(&bl->bl_input, PROVIDER_MAX_ARGUMENTS);
	bl->bl_type = BLOCK_TOOL_USE;
	return 0;
}

static int
ant_block_delta(struct provider_stream *st, struct json_object *ev)
{
	struct ant_block	*bl;
	struct json_object	*d, *v;
	const char		*type;

	if ((bl = ant_block_at(st, ev, 0)) == NULL || bl->bl_done ||
	    (d = ant_member(ev, "delta", json_type_object)) == NULL ||
	    json_get_str(d, "type", 64, 0, &type) == -1)
		return -1;
	/* Like the SDK, a delta of another kind than its block is ignored. */
	if (strcmp(type, "text_delta") == 0 && bl->bl_type == BLOCK_TEXT) {
		if ((v = ant_member(d, "text", json_type_string)) == NULL)
			return -1;
		if (st->st_ev->pe_text != NULL &&
		    json_object_get_string_len(v) > 0)
			st->st_ev->pe_text(st->st_arg,
			    json_object_get_string(v),
			    json_object_get_string_len(v));
	} else if (strcmp(type, "input_json_delta") == 0 &&
	    bl->bl_type == BLOCK_TOOL_USE) {
		if ((v = ant_member(d, "partial_json", json_type_string)) ==
		    NULL)
			return -1;
		if (provider_buf_add(&bl->bl_input, json_object_get_string(v),
		    json_object_get_string_len(v)) == -1) {
			ant_fail(st, "tool call arguments too long", NULL);
			return -1;
		}
	}
	return 0;
}

static int
ant_block_stop(struct provider_stream *st, struct json_object *ev)
{
	struct ant_block	*bl;

	if ((bl = ant_block_at(st, ev, 0)) == NULL || bl->bl_done)
		return -1;
	bl->bl_done = 1;
	if (bl->bl_type == BLOCK_TOOL_USE && st->st_ev->pe_tool_call != NULL)
		st->st_ev->pe_tool_call(st->st_arg, bl->bl_id, bl->bl_name,
		    bl->bl_input.pb_len > 0 ? provider_buf_str(&bl->bl_input) :
		    "{}");
	return 0;
}

static int
ant_message_delta(struct provider_stream *st, struct json_object *ev)
{
	struct json_object	*d, *usage = NULL;
	const char		*reason;

	if ((d = ant_member(ev, "delta", json_type_object)) == NULL)
		return -1;
	/* stop_reason may be null: only a string ends the message. */
	if (ant_member(d, "stop_reason", json_type_string) != NULL) {
		if (json_get_str(d, "stop_reason", 64, 0, &reason) == -1)
			return -1;
		if (st->st_ev->pe_finish != NULL)
			st->st_ev->pe_finish(st->st_arg, reason);
	}
	json_object_object_get_ex(ev, "usage", &usage);
	ant_usage(st, usage);
	return 0;
}

static int
ant_message_start(struct provider_stream *st, struct json_object *ev)
{
	struct json_object	*msg, *usage = NULL;

	if (st->st_started ||
	    (msg = ant_member(ev, "message", json_type_object)) == NULL)
		return -1;
	st->st_started = 1;
	json_object_object_get_ex(msg, "usage", &usage);
	ant_usage(st, usage);
	return 0;
}

static void
ant_error_event(struct provider_stream *st, struct json_object *ev)
{
	char	 buf[PROVIDER_MAX_ERROR];

	/* {"type":"error","error":{"type":"overloaded_error",...}} */
	if (provider_error_json("anthropic", ev, buf, sizeof(buf)) == -1)
		snprintf(buf, sizeof(buf), "anthropic said: error");
	ant_fail(st, buf, NULL);
}

static int
ant_dispatch(struct provider_stream *st, const char *type,
    struct json_object *ev)
{
	if (strcmp(type, "error") == 0) {
		ant_error_event(st, ev);
		return -1;
	}
	if (strcmp(type, "ping") == 0)
		return 0;
	/* Nothing may precede message_start; what follows the stop is moot. */
	if (strcmp(type, "message_start") == 0)
		return ant_message_start(st, ev);
	if (!st->st_started)
		return -1;
	if (st->st_stopped)
		return 0;
	if (strcmp(type, "content_block_start") == 0)
		return ant_block_start(st, ev);
	if (strcmp(type, "content_block_delta") == 0)
		return ant_block_delta(st, ev);
	if (strcmp(type, "content_block_stop") == 0)
		return ant_block_stop(st, ev);
	if (strcmp(type, "message_delta") == 0)
		return ant_message_delta(st, ev);
	if (strcmp(type, "message_stop") == 0)
		st->st_stopped = 1;
	/* Event types added later are to be ignored, says the API. */
	return 0;
}

static void
ant_on_event(const struct sse_event *sev, void *arg)
{
	struct provider_stream	*st = arg;
	struct json_object	*ev;
	const char		*type;

	if (st->st_failed)
		return;
	if ((ev = json_parse_object(sev->ev_data, sev->ev_data_len)) == NULL) {
		ant_fail(st, "malformed event: ", sev->ev_type);
		return;
	}
	/* The data names its type; the SSE event line says the same. */
	if (json_get_str(ev, "type", 64, 1, &type) == -1 || type == NULL)
		type = sev->ev_type;
	if (ant_dispatch(st, type, ev) == -1)
		ant_fail(st, "malformed event: ", type);
	json_object_put(ev);
}

static struct provider_stream *
ant_stream_new(const struct provider_events *ev, void *arg)
{
	struct provider_stream	*st;

	if ((st = calloc(1, sizeof(*st))) == NULL)
		return NULL;
	st->st_ev = ev;
	st->st_arg = arg;
	if ((st->st_sse = sse_parser_new(PROVIDER_MAX_LINE, ANT_MAX_EVENT,
	    ant_on_event, st)) == NULL) {
		free(st);
		return NULL;
	}
	return st;
}

static int
ant_stream_feed(struct provider_stream *st, const char *buf, size_t len)
{
	if (st->st_failed)
		return -1;
	if (sse_parser_feed(st->st_sse, buf, len) == -1)
		ant_fail(st, "", sse_parser_error(st->st_sse));
	return st->st_failed ? -1 : 0;
}

static int
ant_stream_end(struct provider_stream *st)
{
	if (st->st_failed)
		return -1;
	/* A last event with no blank line after it still counts. */
	if (!st->st_stopped && sse_parser_feed(st->st_sse, "\n\n", 2) == -1)
		ant_fail(st, "", sse_parser_error(st->st_sse));
	if (!st->st_failed && !st->st_stopped)
		ant_fail(st, "the stream ended before message_stop", NULL);
	return st->st_failed ? -1 : 0;
}

static const char *
ant_stream_error(const struct provider_stream *st)
{
	return st->st_failed ? st->st_err : NULL;
}

static void
ant_stream_free(struct provider_stream *st)
{
	size_t	 i;

	if (st == NULL)
		return;
	for (i = 0; i < st->st_nblocks; i++) {
		free(st->st_blocks[i].bl_id);
		free(st->st_blocks[i].bl_name);
		provider_buf_free(&st->st_blocks[i].bl_input);
	}
	free(st->st_blocks);
	sse_parser_free(st->st_sse);
	free(st);
}

/* {"type":"error","error":{"type":"...","message":"..."}} */
static void
ant_error_message(int status, const char *body, size_t len, char *out,
    size_t outlen)
{
	provider_error_format("anthropic", status, body, len, out, outlen);
}

const struct provider_ops anthropic_ops = {
	.po_name = "anthropic",
	.po_build = ant_build,
	.po_stream_new = ant_stream_new,
	.po_stream_feed = ant_stream_feed,
	.po_stream_end = ant_stream_end,
	.po_stream_error = ant_stream_error,
	.po_stream_free = ant_stream_free,
	.po_error_message = ant_error_message,
};
