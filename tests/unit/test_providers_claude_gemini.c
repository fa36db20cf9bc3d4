#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "broker/providers/provider.h"
#include "common/util.h"

#define KEY	"sk-secret-KEY-123"
#define ERRLEN	512

/*
 * Events are rendered into one string, so that a whole stream's outcome
 * is one comparison: "T<text>|" for text, "C<name>(<args>)|" for a call,
 * "U<in>/<out>|" for usage, "F<reason>|" for the finish.  Call ids are
 * kept apart: Gemini's are random.
 */
struct rec {
	char	 r_log[8192];
	size_t	 r_len;
	char	 r_ids[8][80];
	size_t	 r_nids;
};

static void
rec_add(struct rec *r, const char *s, size_t n)
{
	assert_true(r->r_len + n < sizeof(r->r_log));
	memcpy(r->r_log + r->r_len, s, n);
	r->r_len += n;
	r->r_log[r->r_len] = '\0';
}

static void
on_text(void *arg, const char *text, size_t len)
{
	rec_add(arg, "T", 1);
	rec_add(arg, text, len);
	rec_add(arg, "|", 1);
}

static void
on_call(void *arg, const char *id, const char *name, const char *args)
{
	struct rec	*r = arg;

	assert_true(r->r_nids < 8);
	snprintf(r->r_ids[r->r_nids++], sizeof(r->r_ids[0]), "%s", id);
	rec_add(r, "C", 1);
	rec_add(r, name, strlen(name));
	rec_add(r, "(", 1);
	rec_add(r, args, strlen(args));
	rec_add(r, ")|", 2);
}

static void
on_usage(void *arg, uint64_t in, uint64_t out)
{
	char	 buf[64];

	snprintf(buf, sizeof(buf), "U%llu/%llu|", (unsigned long long)in,
	    (unsigned long long)out);
	rec_add(arg, buf, strlen(buf));
}

static void
on_finish(void *arg, const char *reason)
{
	rec_add(arg, "F", 1);
	rec_add(arg, reason, strlen(reason));
	rec_add(arg, "|", 1);
}

static const struct provider_events events = {
	on_text, on_call, on_usage, on_finish
};

/*
 * Feed s in pieces cut at the given offsets, then end it.  Returns -1 if
 * a feed failed, else what po_stream_end said; err gets the stream error.
 */
static int
run_cuts(const struct provider_ops *ops, const char *s, const size_t *cuts,
    size_t ncuts, struct rec *r, char *err, size_t errlen)
{
	struct provider_stream	*st;
	size_t			 i, from = 0, to, len = strlen(s);
	int			 rc = 0;

	memset(r, 0, sizeof(*r));
	assert_non_null(st = ops->po_stream_new(&events, r));
	for (i = 0; i <= ncuts && rc == 0; i++) {
		to = i < ncuts ? cuts[i] : len;
		rc = ops->po_stream_feed(st, s + from, to - from);
		from = to;
	}
	if (rc == 0)
		rc = ops->po_stream_end(st);
	if (err != NULL)
		snprintf(err, errlen, "%s", ops->po_stream_error(st) ?
		    ops->po_stream_error(st) : "");
	if (rc == 0)
		assert_null(ops->po_stream_error(st));
	else
		assert_non_null(ops->po_stream_error(st));
	ops->po_stream_free(st);
	return rc;
}

static int
run(const struct provider_ops *ops, const char *s, struct rec *r, char *err,
    size_t errlen)
{
	return run_cuts(ops, s, NULL, 0, r, err, errlen);
}

/* Whole, cut in two at every byte, and a byte at a time: all the same. */
static void
check_stream(const struct provider_ops *ops, const char *s, const char *want)
{
	struct rec	 r;
	size_t		 i, len = strlen(s), *cuts;

	assert_int_equal(run(ops, s, &r, NULL, 0), 0);
	assert_string_equal(r.r_log, want);
	for (i = 0; i <= len; i++) {
		assert_int_equal(run_cuts(ops, s, &i, 1, &r, NULL, 0), 0);
		assert_string_equal(r.r_log, want);
	}
	assert_non_null(cuts = calloc(len, sizeof(*cuts)));
	for (i = 0; i < len; i++)
		cuts[i] = i;
	assert_int_equal(run_cuts(ops, s, cuts, len, &r, NULL, 0), 0);
	assert_string_equal(r.r_log, want);
	free(cuts);
}

/* o at a path like "messages.1.content.0.type" (numbers index arrays). */
static struct json_object *
jget(struct json_object *o, const char *path)
{
	char	 buf[256], *p, *tok, *end;
	long	 idx;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf; o != NULL && (tok = strsep(&p, ".")) != NULL;) {
		if (json_object_is_type(o, json_type_array)) {
			idx = strtol(tok, &end, 10);
			o = *end == '\0' ? json_object_array_get_idx(o, idx) :
			    NULL;
		} else if (!json_object_is_type(o, json_type_object) ||
		    !json_object_object_get_ex(o, tok, &o))
			o = NULL;
	}
	return o;
}

static const char *
jstr(struct json_object *o, const char *path)
{
	struct json_object	*v = jget(o, path);

	return v != NULL && json_object_is_type(v, json_type_string) ?
	    json_object_get_string(v) : NULL;
}

static size_t
jlen(struct json_object *o, const char *path)
{
	struct json_object	*v = jget(o, path);

	if (v == NULL)
		return (size_t)-1;
	if (json_object_is_type(v, json_type_array))
		return json_object_array_length(v);
	return json_object_object_length(v);
}

/* The compact JSON text of o at path, for whole-value comparisons. */
static const char *
jtext(struct json_object *o, const char *path)
{
	struct json_object	*v = jget(o, path);

	return v != NULL ? json_object_to_json_string_ext(v,
	    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE) : "(none)";
}

static const char *
header(const struct provider_http *ph, const char *name)
{
	size_t	 i;

	for (i = 0; i < ph->ph_nheaders; i++)
		if (strcasecmp(ph->ph_headers[i].hf_name, name) == 0)
			return ph->ph_headers[i].hf_value;
	return NULL;
}

static struct provider_conf	 pv;	/* the request's provider */

static struct provider_conf *
conf(enum provider_type type, const char *base)
{
	static char			 key[] = KEY;

	memset(&pv, 0, sizeof(pv));
	pv.pv_type = type;
	pv.pv_type_set = 1;
	pv.pv_base_url = (char *)base;
	pv.pv_api_key.sr_kind = SECRET_ENV;
	pv.pv_api_key.sr_value = key;
	pv.pv_model = "the-model";
	return &pv;
}

/*
 * A conversation exercising every shape: two system messages, a user
 * turn, an assistant turn with text and two calls (one with arguments
 * that are not an object), a user interjection between the calls and
 * their results, two results (one failed), two user messages in a row.
 */
static struct chat_tool_call calls[] = {
	{ "toolu_1", "get_weather", "{\"city\":\"Paris\"}" },
	{ "toolu_2", "get_time", "not json" },
};

static const struct chat_message convo[] = {
	{ .cm_role = ROLE_SYSTEM, .cm_content = "Be brief." },
	{ .cm_role = ROLE_USER, .cm_content = "Weather and time?" },
	{ .cm_role = ROLE_SYSTEM, .cm_content = "Use tools." },
	{ .cm_role = ROLE_ASSISTANT, .cm_content = "Checking.",
	    .cm_calls = calls, .cm_ncalls = 2 },
	{ .cm_role = ROLE_USER, .cm_content = "hurry" },
	{ .cm_role = ROLE_TOOL, .cm_content = "18C", .cm_call_id = "toolu_1",
	    .cm_call_name = "get_weather" },
	{ .cm_role = ROLE_TOOL, .cm_content = "clock broke",
	    .cm_call_id = "toolu_2", .cm_call_name = "get_time",
	    .cm_is_error = 1 },
	{ .cm_role = ROLE_ASSISTANT, .cm_content = "" },	/* nothing */
	{ .cm_role = ROLE_USER, .cm_content = "thanks" },
	{ .cm_role = ROLE_USER, .cm_content = "and tomorrow?" },
};

static const char weather_schema[] =
    "{\"$schema\":\"http://json-schema.org/draft-07/schema#\","
    "\"type\":\"object\",\"additionalProperties\":false,"
    "\"properties\":{\"city\":{\"type\":\"string\",\"format\":\"uri\","
    "\"default\":\"Paris\",\"examples\":[\"Rome\"]}},"
    "\"required\":[\"city\",\"nope\"]}";

static struct json_object *
build(const struct provider_ops *ops, struct chat_request *rq,
    struct provider_http *ph)
{
	char			 why[128];
	struct json_object	*body;

	assert_int_equal(ops->po_build(rq, ph, why, sizeof(why)), 0);
	assert_non_null(ph->ph_body);
	assert_int_equal(strlen(ph->ph_body), ph->ph_body_len);
	assert_null(strstr(ph->ph_body, KEY));
	assert_null(strstr(ph->ph_url, KEY));
	assert_non_null(body = json_parse_object(ph->ph_body,
	    ph->ph_body_len));
	return body;
}

static void
request(struct chat_request *rq, struct chat_tool_def *td,
    struct json_object *schema, enum provider_type type, const char *base)
{
	memset(rq, 0, sizeof(*rq));
	memset(td, 0, sizeof(*td));
	td->td_name = "get_weather";
	td->td_description = "Weather now";
	td->td_schema = schema;
	rq->rq_provider = conf(type, base);
	rq->rq_messages = convo;
	rq->rq_nmessages = sizeof(convo) / sizeof(convo[0]);
	rq->rq_tools = td;
	rq->rq_ntools = 1;
}

/* Anthropic */

static void
test_anthropic_request(void **state)
{
	struct chat_request	 rq;
	struct chat_tool_def	 td;
	struct provider_http	 ph;
	struct json_object	*schema, *body;

	(void)state;
	schema = json_tokener_parse(weather_schema);
	request(&rq, &td, schema, PROVIDER_ANTHROPIC, "https://a.test/");
	body = build(&anthropic_ops, &rq, &ph);
	assert_string_equal(ph.ph_url, "https://a.test/v1/messages");
	assert_string_equal(header(&ph, "x-api-key"), KEY);
	assert_string_equal(header(&ph, "anthropic-version"), "2023-06-01");
	assert_string_equal(header(&ph, "content-type"), "application/json");
	assert_string_equal(jstr(body, "model"), "the-model");
	assert_string_equal(jtext(body, "max_tokens"), "4096");
	assert_string_equal(jtext(body, "stream"), "true");
	assert_null(jget(body, "temperature"));
	assert_string_equal(jstr(body, "system"), "Be brief.\n\nUse tools.");
	/* user, assistant, then every user message merged, results first. */
	assert_int_equal(jlen(body, "messages"), 3);
	assert_string_equal(jtext(body, "messages.0"),
	    "{\"role\":\"user\",\"content\":[{\"type\":\"text\","
	    "\"text\":\"Weather and time?\"}]}");
	assert_string_equal(jtext(body, "messages.1"),
	    "{\"role\":\"assistant\",\"content\":["
	    "{\"type\":\"text\",\"text\":\"Checking.\"},"
	    "{\"type\":\"tool_use\",\"id\":\"toolu_1\","
	    "\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}},"
	    "{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"get_time\","
	    "\"input\":{}}]}");
	assert_string_equal(jtext(body, "messages.2"),
	    "{\"role\":\"user\",\"content\":["
	    "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\","
	    "\"content\":\"18C\",\"is_error\":false},"
	    "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\","
	    "\"content\":\"clock broke\",\"is_error\":true},"
	    "{\"type\":\"text\",\"text\":\"hurry\"},"
	    "{\"type\":\"text\",\"text\":\"thanks\"},"
	    "{\"type\":\"text\",\"text\":\"and tomorrow?\"}]}");
	assert_null(strstr(ph.ph_body, "not json"));
	assert_int_equal(jlen(body, "tools"), 1);
	assert_string_equal(jstr(body, "tools.0.name"), "get_weather");
	assert_string_equal(jstr(body, "tools.0.description"), "Weather now");
	/* Anthropic takes JSON Schema as it is. */
	assert_string_equal(jtext(body, "tools.0.input_schema"),
	    json_object_to_json_string_ext(schema, JSON_C_TO_STRING_PLAIN |
	    JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(body);
	provider_http_free(&ph);

	rq.rq_max_tokens = 100;
	rq.rq_has_temperature = 1;
	rq.rq_temperature = 0.7;
	rq.rq_model = "override";
	rq.rq_ntools = 0;
	body = build(&anthropic_ops, &rq, &ph);
	assert_string_equal(jtext(body, "max_tokens"), "100");
	assert_string_equal(jtext(body, "temperature"), "0.7");
	assert_string_equal(jstr(body, "model"), "override");
	assert_null(jget(body, "tools"));
	json_object_put(body);
	provider_http_free(&ph);
	json_object_put(schema);
}

static void
test_anthropic_request_refused(void **state)
{
	struct chat_request	 rq;
	struct chat_tool_def	 td;
	struct provider_http	 ph;
	char			 why[128];

	(void)state;
	request(&rq, &td, NULL, PROVIDER_ANTHROPIC, NULL);
	pv.pv_model = NULL;
	assert_int_equal(anthropic_ops.po_build(&rq, &ph, why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "model"));
	pv.pv_model = "m";
	pv.pv_api_key.sr_value = NULL;
	assert_int_equal(anthropic_ops.po_build(&rq, &ph, why, sizeof(why)),
	    -1);
	assert_non_null(strstr(why, "key"));
}

static void
test_anthropic_defaults(void **state)
{
	static const struct chat_message one[] = {
		{ .cm_role = ROLE_USER, .cm_content = "hi" },
	};
	struct chat_request	 rq;
	struct chat_tool_def	 td;
	struct provider_http	 ph;
	struct json_object	*body;

	(void)state;
	request(&rq, &td, NULL, PROVIDER_ANTHROPIC, NULL);
	rq.rq_messages = one;
	rq.rq_nmessages = 1;
	body = build(&anthropic_ops, &rq, &ph);
	/* The public endpoint; no system; a tool without a schema. */
	assert_string_equal(ph.ph_url, "https://api.anthropic.com/v1/messages");
	assert_null(jget(body, "system"));
	assert_string_equal(jtext(body, "tools.0.input_schema"),
	    "{\"type\":\"object\"}");
	json_object_put(body);
	provider_http_free(&ph);

	/* Top-level combinators would fail the whole request: left out. */
	td.td_schema = json_tokener_parse("{\"properties\":{\"a\":"
	    "{\"anyOf\":[{\"type\":\"string\"}]}},\"anyOf\":[{\"required\":"
	    "[\"a\"]}],\"oneOf\":[],\"required\":[\"a\"]}");
	body = build(&anthropic_ops, &rq, &ph);
	assert_string_equal(jtext(body, "tools.0.input_schema"),
	    "{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":"
	    "[{\"type\":\"string\"}]}},\"required\":[\"a\"]}");
	json_object_put(body);
	provider_http_free(&ph);
	json_object_put(td.td_schema);
}

static const char ant_stream[] =
    "event: message_start\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\","
    "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"
    "\"model\":\"claude\",\"stop_reason\":null,\"usage\":"
    "{\"input_tokens\":10,\"cache_read_input_tokens\":5,"
    "\"output_tokens\":1}}}\n"
    "\n"
    "event: ping\n"
    "data: {\"type\": \"ping\"}\n"
    "\n"
    "event: content_block_start\r\n"
    "data: {\"type\":\"content_block_start\",\"index\":0,"
    "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n"
    "\r\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,"
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n"
    "\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,"
    "\"delta\":{\"type\":\"text_delta\",\"text\":\"lo \\u00e9\"}}\n"
    "\n"
    "event: content_block_stop\n"
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n"
    "\n"
    "event: content_block_start\n"
    "data: {\"type\":\"content_block_start\",\"index\":1,"
    "\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_9\","
    "\"name\":\"get_weather\",\"input\":{}}}\n"
    "\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":1,"
    "\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n"
    "\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":1,"
    "\"delta\":{\"type\":\"input_json_delta\","
    "\"partial_json\":\"{\\\"city\\\": \\\"Pa\"}}\n"
    "\n"
    "event: content_block_delta\n"
    "data: {\"type\":\"content_block_delta\",\"index\":1,"
    "\"delta\":{\"type\":\"input_json_delta\","
    "\"partial_json\":\"ris\\\"}\"}}\n"
    "\n"
    "event: content_block_stop\n"
    "data: {\"type\":\"content_block_stop\",\"index\":1}\n"
    "\n"
    "event: content_block_start\n"
    "data: {\"type\":\"content_block_start\",\"index\":2,"
    "\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_10\","
    "\"name\":\"get_time\",\"input\":{}}}\n"
    "\n"
    "event: content_block_stop\n"
    "data: {\"type\":\"content_block_stop\",\"index\":2}\n"
    "\n"
    "event: message_delta\n"
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
    "\"tool_use\",\"stop_sequence\":null},\"usage\":"
    "{\"output_tokens\":42}}\n"
    "\n"
    "event: message_stop\n"
    "data: {\"type\":\"message_stop\"}\n"
    "\n";

static void
test_anthropic_stream(void **state)
{
	struct rec	 r;

	(void)state;
	check_stream(&anthropic_ops, ant_stream,
	    "U15/1|THel|Tlo \xc3\xa9|"
	    "Cget_weather({\"city\": \"Paris\"})|Cget_time({})|"
	    "Ftool_use|U15/42|");
	assert_int_equal(run(&anthropic_ops, ant_stream, &r, NULL, 0), 0);
	assert_int_equal(r.r_nids, 2);
	assert_string_equal(r.r_ids[0], "toolu_9");
	assert_string_equal(r.r_ids[1], "toolu_10");
}

/*
 * Counts near 2^64 would wrap the sum of input and cached input to a small
 * number, or a negative one in the database: each counts as 2^40 at most.
 */
static void
test_anthropic_usage_does_not_wrap(void **state)
{
	static const char huge[] =
	    "event: message_start\n"
	    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"m\","
	    "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],"
	    "\"model\":\"claude\",\"usage\":{\"input_tokens\":"
	    "9223372036854775807,\"cache_creation_input_tokens\":"
	    "9223372036854775807,\"cache_read_input_tokens\":2,"
	    "\"output_tokens\":9223372036854775807}}}\n\n"
	    "event: message_delta\n"
	    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
	    "\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n"
	    "event: message_stop\n"
	    "data: {\"type\":\"message_stop\"}\n\n";

	(void)state;
	check_stream(&anthropic_ops, huge,
	    "U2199023255554/1099511627776|Fend_turn|U2199023255554/3|");
}

static void
test_anthropic_stream_bad(void **state)
{
	static const char *const bad[] = {
		/* not JSON */
		"event: message_start\ndata: {\"type\":\"message_start\"\n\n",
		/* content before message_start */
		"event: content_block_start\ndata: {\"type\":"
		"\"content_block_start\",\"index\":0,\"content_block\":"
		"{\"type\":\"text\",\"text\":\"\"}}\n\n",
		/* a delta for a block never started */
		"event: message_start\ndata: {\"type\":\"message_start\","
		"\"message\":{}}\n\nevent: content_block_delta\ndata: "
		"{\"type\":\"content_block_delta\",\"index\":3,\"delta\":"
		"{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n",
		/* a tool_use without its id */
		"event: message_start\ndata: {\"type\":\"message_start\","
		"\"message\":{}}\n\nevent: content_block_start\ndata: "
		"{\"type\":\"content_block_start\",\"index\":0,"
		"\"content_block\":{\"type\":\"tool_use\",\"name\":\"x\"}}\n\n",
		/* a negative index */
		"event: message_start\ndata: {\"type\":\"message_start\","
		"\"message\":{}}\n\nevent: content_block_stop\ndata: "
		"{\"type\":\"content_block_stop\",\"index\":-1}\n\n",
	};
	struct rec	 r;
	char		 err[ERRLEN];
	size_t		 i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(run(&anthropic_ops, bad[i], &r, err,
		    sizeof(err)), -1);
}

static void
test_anthropic_stream_cut_and_error(void **state)
{
	static const char overloaded[] =
	    "event: message_start\n"
	    "data: {\"type\":\"message_start\",\"message\":{}}\n\n"
	    "event: error\n"
	    "data: {\"type\": \"error\", \"error\": {\"type\": "
	    "\"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
	char		*cut;
	struct rec	 r;
	char		 err[ERRLEN];
	size_t		 n;

	(void)state;
	/* Everything but message_stop. */
	n = strstr(ant_stream, "event: message_stop") - ant_stream;
	assert_non_null(cut = strndup(ant_stream, n));
	assert_int_equal(run(&anthropic_ops, cut, &r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "message_stop"));
	free(cut);
	/* Cut in the middle of an event. */
	assert_non_null(cut = strndup(ant_stream, sizeof(ant_stream) - 8));
	assert_int_equal(run(&anthropic_ops, cut, &r, err, sizeof(err)), -1);
	free(cut);
	/* The last event without its blank line still ends the message. */
	assert_non_null(cut = strndup(ant_stream, sizeof(ant_stream) - 2));
	assert_int_equal(run(&anthropic_ops, cut, &r, err, sizeof(err)), 0);
	free(cut);
	assert_int_equal(run(&anthropic_ops, overloaded, &r, err, sizeof(err)),
	    -1);
	assert_non_null(strstr(err, "Overloaded"));
	assert_non_null(strstr(err, "overloaded_error"));
}

static void
test_anthropic_error_message(void **state)
{
	static const char body[] = "{\"type\":\"error\",\"error\":{\"type\":"
	    "\"invalid_request_error\",\"message\":\"max_tokens: \\n too "
	    "big\"}}";
	char	 out[ERRLEN];

	(void)state;
	anthropic_ops.po_error_message(400, body, strlen(body), out,
	    sizeof(out));
	assert_non_null(strstr(out, "max_tokens:"));
	assert_non_null(strstr(out, "invalid_request_error"));
	assert_null(strchr(out, '\n'));
	anthropic_ops.po_error_message(502, "<html>bad gateway</html>", 24,
	    out, sizeof(out));
	assert_non_null(strstr(out, "502"));
	anthropic_ops.po_error_message(500, NULL, 0, out, sizeof(out));
	assert_non_null(strstr(out, "500"));
}

/* Gemini */

static void
test_gemini_request(void **state)
{
	struct chat_request	 rq;
	struct chat_tool_def	 td;
	struct provider_http	 ph;
	struct json_object	*schema, *body;

	(void)state;
	schema = json_tokener_parse(weather_schema);
	request(&rq, &td, schema, PROVIDER_GEMINI, "https://g.test/");
	rq.rq_model = "models/gemini-2.5-flash";
	rq.rq_has_temperature = 1;
	rq.rq_temperature = 0.2;
	rq.rq_max_tokens = 512;
	body = build(&gemini_ops, &rq, &ph);
	assert_string_equal(ph.ph_url, "https://g.test/v1beta/models/"
	    "gemini-2.5-flash:streamGenerateContent?alt=sse");
	assert_string_equal(header(&ph, "x-goog-api-key"), KEY);
	assert_string_equal(header(&ph, "content-type"), "application/json");
	assert_null(jget(body, "model"));
	assert_string_equal(jtext(body, "systemInstruction"),
	    "{\"parts\":[{\"text\":\"Be brief.\\n\\nUse tools.\"}]}");
	assert_string_equal(jtext(body, "generationConfig"),
	    "{\"temperature\":0.2,\"maxOutputTokens\":512}");
	assert_int_equal(jlen(body, "contents"), 3);
	assert_string_equal(jtext(body, "contents.0"),
	    "{\"role\":\"user\",\"parts\":[{\"text\":\"Weather and time?\"}]}");
	/* The first call carries a signature; unknown here: the skip value. */
	assert_string_equal(jtext(body, "contents.1"),
	    "{\"role\":\"model\",\"parts\":[{\"text\":\"Checking.\"},"
	    "{\"functionCall\":{\"name\":\"get_weather\",\"args\":"
	    "{\"city\":\"Paris\"}},\"thoughtSignature\":"
	    "\"skip_thought_signature_validator\"},"
	    "{\"functionCall\":{\"name\":\"get_time\",\"args\":{}}}]}");
	assert_string_equal(jtext(body, "contents.2"),
	    "{\"role\":\"user\",\"parts\":["
	    "{\"functionResponse\":{\"name\":\"get_weather\",\"response\":"
	    "{\"output\":\"18C\"}}},"
	    "{\"functionResponse\":{\"name\":\"get_time\",\"response\":"
	    "{\"error\":\"clock broke\"}}},"
	    "{\"text\":\"hurry\"},{\"text\":\"thanks\"},"
	    "{\"text\":\"and tomorrow?\"}]}");
	assert_null(strstr(ph.ph_body, "not json"));
	assert_string_equal(jtext(body, "tools"),
	    "[{\"functionDeclarations\":[{\"name\":\"get_weather\","
	    "\"description\":\"Weather now\",\"parameters\":{"
	    "\"type\":\"OBJECT\",\"properties\":{\"city\":"
	    "{\"type\":\"STRING\"}},\"required\":[\"city\"]}}]}]");
	json_object_put(body);
	provider_http_free(&ph);

	/* A model id cannot add path segments or a query. */
	rq.rq_model = "x/../y?key=z";
	body = build(&gemini_ops, &rq, &ph);
	assert_string_equal(ph.ph_url, "https://g.test/v1beta/models/"
	    "x%2F..%2Fy%3Fkey%3Dz:streamGenerateContent?alt=sse");
	json_object_put(body);
	provider_http_free(&ph);
	json_object_put(schema);
}

static void
test_gemini_request_defaults(void **state)
{
	static const struct chat_message one[] = {
		{ .cm_role = ROLE_USER, .cm_content = "hi" },
	};
	struct chat_request	 rq;
	struct chat_tool_def	 td;
	struct provider_http	 ph;
	struct json_object	*schema, *body;
	char			 why[128];

	(void)state;
	schema = json_tokener_parse("{\"type\":\"object\",\"properties\":{}}");
	request(&rq, &td, schema, PROVIDER_GEMINI, NULL);
	rq.rq_messages = one;
	rq.rq_nmessages = 1;
	body = build(&gemini_ops, &rq, &ph);
	assert_string_equal(ph.ph_url, "https://generativelanguage."
	    "googleapis.com/v1beta/models/the-model:streamGenerateContent"
	    "?alt=sse");
	assert_null(jget(body, "systemInstruction"));
	assert_null(jget(body, "generationConfig"));
	/* No parameters: none declared (Gemini refuses empty properties). */
	assert_string_equal(jtext(body, "tools.0.functionDeclarations.0"),
	    "{\"name\":\"get_weather\",\"description\":\"Weather now\"}");
	json_object_put(body);
	provider_http_free(&ph);
	json_object_put(schema);

	rq.rq_tools = NULL;
	rq.rq_ntools = 0;
	pv.pv_api_key.sr_value = NULL;
	assert_int_equal(gemini_ops.po_build(&rq, &ph, why, sizeof(why)), -1);
	pv.pv_api_key.sr_value = (char *)"a\r\nb";
	assert_int_equal(gemini_ops.po_build(&rq, &ph, why, sizeof(why)), -1);
}

/* The declared parameters for schema text s, as compact JSON. */
static void
check_schema(const char *s, const char *want)
{
	struct chat_request	 rq;
	struct chat_tool_def	 td;
	struct provider_http	 ph;
	struct json_object	*schema, *body;

	assert_non_null(schema = json_tokener_parse(s));
	request(&rq, &td, schema, PROVIDER_GEMINI, NULL);
	body = build(&gemini_ops, &rq, &ph);
	assert_string_equal(jtext(body,
	    "tools.0.functionDeclarations.0.parameters"), want);
	json_object_put(body);
	provider_http_free(&ph);
	json_object_put(schema);
}

static void
test_gemini_schema(void **state)
{
	(void)state;
	/* Dropped keywords, kept formats, type lists, null unions, const. */
	check_schema("{\"type\":\"object\",\"$schema\":\"x\","
	    "\"additionalProperties\":{\"type\":\"string\"},"
	    "\"properties\":{"
	    "\"when\":{\"type\":\"string\",\"format\":\"date-time\","
	    "\"default\":\"now\",\"examples\":[\"x\"]},"
	    "\"n\":{\"type\":[\"integer\",\"null\"],\"exclusiveMinimum\":0,"
	    "\"minimum\":1,\"maximum\":9.5,\"format\":\"int64\","
	    "\"multipleOf\":2},"
	    "\"mode\":{\"const\":\"fast\",\"type\":\"string\"},"
	    "\"level\":{\"type\":\"integer\",\"enum\":[1,2]},"
	    "\"color\":{\"enum\":[\"red\",\"blue\"],\"type\":\"string\","
	    "\"format\":\"enum\"},"
	    "\"opt\":{\"anyOf\":[{\"type\":\"string\",\"minLength\":2},"
	    "{\"type\":\"null\"}],\"description\":\"maybe\"},"
	    "\"either\":{\"oneOf\":[{\"type\":\"string\"},"
	    "{\"type\":\"number\"}]},"
	    "\"tags\":{\"type\":\"array\",\"maxItems\":3},"
	    "\"meta\":{\"type\":\"object\",\"properties\":{},"
	    "\"required\":[\"a\"]},"
	    "\"never\":false,"
	    "\"anything\":true},"
	    "\"required\":[\"when\",\"ghost\",\"never\"]}",
	    "{\"type\":\"OBJECT\",\"properties\":{"
	    "\"when\":{\"type\":\"STRING\",\"format\":\"date-time\"},"
	    "\"n\":{\"nullable\":true,\"type\":\"INTEGER\",\"format\":"
	    "\"int64\",\"minimum\":1,\"maximum\":9.5},"
	    "\"mode\":{\"type\":\"STRING\",\"enum\":[\"fast\"]},"
	    "\"level\":{\"type\":\"INTEGER\"},"
	    "\"color\":{\"type\":\"STRING\",\"format\":\"enum\",\"enum\":"
	    "[\"red\",\"blue\"]},"
	    "\"opt\":{\"description\":\"maybe\",\"nullable\":true,"
	    "\"type\":\"STRING\",\"minLength\":2},"
	    "\"either\":{\"anyOf\":[{\"type\":\"STRING\"},"
	    "{\"type\":\"NUMBER\"}]},"
	    "\"tags\":{\"type\":\"ARRAY\",\"maxItems\":3,\"items\":{}},"
	    "\"meta\":{\"type\":\"OBJECT\"},"
	    "\"anything\":{}},"
	    "\"required\":[\"when\"]}");
	/* $ref into $defs and definitions, inlined; uri format dropped. */
	check_schema("{\"type\":\"object\",\"properties\":{"
	    "\"home\":{\"$ref\":\"#/$defs/Addr\",\"description\":\"mine\"},"
	    "\"work\":{\"$ref\":\"#/definitions/Addr\"},"
	    "\"lost\":{\"$ref\":\"https://x.test/s.json\"}},"
	    "\"$defs\":{\"Addr\":{\"type\":\"object\",\"properties\":"
	    "{\"url\":{\"type\":\"string\",\"format\":\"uri\"}}}},"
	    "\"definitions\":{\"Addr\":{\"properties\":{\"zip\":"
	    "{\"type\":\"string\"}},\"required\":[\"zip\"]}}}",
	    "{\"type\":\"OBJECT\",\"properties\":{"
	    "\"home\":{\"type\":\"OBJECT\",\"properties\":{\"url\":"
	    "{\"type\":\"STRING\"}},\"description\":\"mine\"},"
	    "\"work\":{\"properties\":{\"zip\":{\"type\":\"STRING\"}},"
	    "\"required\":[\"zip\"],\"type\":\"OBJECT\"},"
	    "\"lost\":{}}}");
	/* A recursive definition ends; allOf is merged. */
	check_schema("{\"properties\":{\"tree\":{\"$ref\":\"#/$defs/N\"},"
	    "\"both\":{\"allOf\":[{\"properties\":{\"a\":{\"type\":"
	    "\"string\"}},\"required\":[\"a\"]},{\"properties\":{\"b\":"
	    "{\"type\":\"string\"}},\"required\":[\"b\",\"a\"]}]}},"
	    "\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{"
	    "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":"
	    "\"#/$defs/N\"}}}}}}",
	    "{\"properties\":{\"tree\":{\"type\":\"OBJECT\",\"properties\":"
	    "{\"kids\":{\"type\":\"ARRAY\",\"items\":{}}}},"
	    "\"both\":{\"properties\":{\"a\":{\"type\":\"STRING\"},"
	    "\"b\":{\"type\":\"STRING\"}},\"required\":[\"a\",\"b\"],"
	    "\"type\":\"OBJECT\"}},\"type\":\"OBJECT\"}");
}

static const char gem_stream[] =
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": "
    "\"Hel\"}],\"role\": \"model\"},\"index\": 0}],"
    "\"usageMetadata\": {\"promptTokenCount\": 12,"
    "\"candidatesTokenCount\": 1},\"modelVersion\": \"gemini\"}\r\n"
    "\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": ["
    "{\"text\": \"thinking...\", \"thought\": true},"
    "{\"text\": \"lo\"},"
    "{\"functionCall\": {\"name\": \"get_weather\",\"args\": "
    "{\"city\": \"Paris\", \"days\": 2}},"
    "\"thoughtSignature\": \"c2lnMQ==\"},"
    "{\"functionCall\": {\"name\": \"get_time\"}}],"
    "\"role\": \"model\"},\"index\": 0}]}\r\n"
    "\r\n"
    "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],"
    "\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],"
    "\"usageMetadata\": {\"promptTokenCount\": 12,"
    "\"candidatesTokenCount\": 7,\"thoughtsTokenCount\": 3,"
    "\"totalTokenCount\": 22}}\r\n"
    "\r\n";

static void
test_gemini_stream(void **state)
{
	struct chat_tool_call	 tc[2];
	struct chat_message	 m[3];
	struct chat_request	 rq;
	struct chat_tool_def	 td;
	struct provider_http	 ph;
	struct json_object	*body;
	struct rec		 r;

	(void)state;
	check_stream(&gemini_ops, gem_stream,
	    "THel|U12/1|Tlo|"
	    "Cget_weather({\"city\":\"Paris\",\"days\":2})|Cget_time({})|"
	    "U12/10|FSTOP|");
	assert_int_equal(run(&gemini_ops, gem_stream, &r, NULL, 0), 0);
	assert_int_equal(r.r_nids, 2);
	assert_memory_equal(r.r_ids[0], "call_", 5);
	assert_memory_equal(r.r_ids[1], "call_", 5);
	assert_string_not_equal(r.r_ids[0], r.r_ids[1]);

	/* The signature goes back with the call it came with. */
	memset(m, 0, sizeof(m));
	tc[0].tc_id = r.r_ids[0];
	tc[0].tc_name = "get_weather";
	tc[0].tc_arguments = "{\"city\":\"Paris\",\"days\":2}";
	tc[1].tc_id = r.r_ids[1];
	tc[1].tc_name = "get_time";
	tc[1].tc_arguments = "{}";
	m[0].cm_role = ROLE_USER;
	m[0].cm_content = "go";
	m[1].cm_role = ROLE_ASSISTANT;
	m[1].cm_calls = tc;
	m[1].cm_ncalls = 2;
	m[2].cm_role = ROLE_TOOL;
	m[2].cm_call_id = r.r_ids[0];
	m[2].cm_call_name = "get_weather";
	m[2].cm_content = "sunny";
	request(&rq, &td, NULL, PROVIDER_GEMINI, NULL);
	rq.rq_messages = m;
	rq.rq_nmessages = 3;
	body = build(&gemini_ops, &rq, &ph);
	assert_string_equal(jstr(body, "contents.1.parts.0.thoughtSignature"),
	    "c2lnMQ==");
	assert_null(jget(body, "contents.1.parts.1.thoughtSignature"));
	json_object_put(body);
	provider_http_free(&ph);

	/* Gemini's own ids are kept. */
	assert_int_equal(run(&gemini_ops, "data: {\"candidates\":[{\"content\":"
	    "{\"parts\":[{\"functionCall\":{\"id\":\"abc-1\",\"name\":\"f\","
	    "\"args\":{}}}]},\"finishReason\":\"STOP\"}]}\n\n", &r, NULL, 0),
	    0);
	assert_string_equal(r.r_log, "Cf({})|FSTOP|");
	assert_string_equal(r.r_ids[0], "abc-1");
}

static void
test_gemini_stream_bad(void **state)
{
	static const char *const bad[] = {
		"data: {\"candidates\": [\n\n",
		"data: [1]\n\n",
		"data: {\"candidates\":[{\"content\":{\"parts\":"
		"[{\"functionCall\":{\"args\":{}}}]}}]}\n\n",
		"data: {\"candidates\":[{\"content\":{\"parts\":"
		"[{\"functionCall\":{\"name\":\"f\",\"args\":[1]}}]}}]}\n\n",
		"data: {\"candidates\":[{\"content\":{\"parts\":[7]}}]}\n\n",
		"data: {\"candidates\":[\"x\"]}\n\n",
	};
	struct rec	 r;
	char		 err[ERRLEN];
	size_t		 i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(run(&gemini_ops, bad[i], &r, err,
		    sizeof(err)), -1);
}

static void
test_gemini_stream_cut_and_error(void **state)
{
	static const char error[] =
	    "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":"
	    "\"a\"}]}}]}\n\n"
	    "data: {\"error\": {\"code\": 503, \"message\": \"The model is "
	    "overloaded.\", \"status\": \"UNAVAILABLE\"}}\n\n";
	static const char blocked[] =
	    "data: {\"promptFeedback\": {\"blockReason\": \"SAFETY\"},"
	    "\"usageMetadata\": {\"promptTokenCount\": 5}}\n\n";
	struct rec	 r;
	char		 err[ERRLEN], *cut;
	size_t		 n;

	(void)state;
	/* Everything but the chunk with the finishReason. */
	n = strstr(gem_stream, "\r\n\r\n") - gem_stream + 4;
	assert_non_null(cut = strndup(gem_stream, n));
	assert_int_equal(run(&gemini_ops, cut, &r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "finishReason"));
	free(cut);
	/* Cut inside the last chunk's JSON. */
	assert_non_null(cut = strndup(gem_stream, sizeof(gem_stream) - 20));
	assert_int_equal(run(&gemini_ops, cut, &r, err, sizeof(err)), -1);
	free(cut);
	/* Without the last blank line: still whole. */
	assert_non_null(cut = strndup(gem_stream, sizeof(gem_stream) - 3));
	assert_int_equal(run(&gemini_ops, cut, &r, err, sizeof(err)), 0);
	free(cut);
	assert_int_equal(run(&gemini_ops, error, &r, err, sizeof(err)), -1);
	assert_string_equal(r.r_log, "Ta|");
	assert_non_null(strstr(err, "The model is overloaded."));
	assert_int_equal(run(&gemini_ops, blocked, &r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "SAFETY"));
	assert_int_equal(run(&gemini_ops, "", &r, err, sizeof(err)), -1);
}

static void
test_gemini_error_message(void **state)
{
	static const char obj[] = "{\"error\": {\"code\": 400, \"message\": "
	    "\"API key not valid. Please pass a valid API key.\", "
	    "\"status\": \"INVALID_ARGUMENT\"}}";
	static const char arr[] = "[{\"error\": {\"code\": 429, \"message\": "
	    "\"Resource exhausted\", \"status\": \"RESOURCE_EXHAUSTED\"}}]";
	char	 out[ERRLEN];

	(void)state;
	gemini_ops.po_error_message(400, obj, strlen(obj), out, sizeof(out));
	assert_non_null(strstr(out, "API key not valid"));
	gemini_ops.po_error_message(429, arr, strlen(arr), out, sizeof(out));
	assert_non_null(strstr(out, "Resource exhausted"));
	gemini_ops.po_error_message(404, "Not Found", 9, out, sizeof(out));
	assert_non_null(strstr(out, "404"));
	gemini_ops.po_error_message(404, "[", 1, out, sizeof(out));
	assert_non_null(strstr(out, "404"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_anthropic_request),
		cmocka_unit_test(test_anthropic_request_refused),
		cmocka_unit_test(test_anthropic_defaults),
		cmocka_unit_test(test_anthropic_stream),
		cmocka_unit_test(test_anthropic_usage_does_not_wrap),
		cmocka_unit_test(test_anthropic_stream_bad),
		cmocka_unit_test(test_anthropic_stream_cut_and_error),
		cmocka_unit_test(test_anthropic_error_message),
		cmocka_unit_test(test_gemini_request),
		cmocka_unit_test(test_gemini_request_defaults),
		cmocka_unit_test(test_gemini_schema),
		cmocka_unit_test(test_gemini_stream),
		cmocka_unit_test(test_gemini_stream_bad),
		cmocka_unit_test(test_gemini_stream_cut_and_error),
		cmocka_unit_test(test_gemini_error_message),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
