#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "broker/providers/provider.h"
#include "broker/providers/provider_util.h"

#define KEY	"sk-test-0123456789SECRET"

/*
 * Request building.
 */

static char	 key_value[] = KEY;

static void
conf_init(struct provider_conf *pv, enum provider_type type,
    const char *base, int with_key)
{
	memset(pv, 0, sizeof(*pv));
	pv->pv_name = (char *)"p";
	pv->pv_type = type;
	pv->pv_type_set = 1;
	pv->pv_base_url = (char *)base;
	pv->pv_model = (char *)"conf-model";
	if (with_key) {
		pv->pv_api_key.sr_kind = SECRET_ENV;
		pv->pv_api_key.sr_value = key_value;
	}
}

static const char *
hdr(const struct provider_http *ph, const char *name)
{
	size_t	 i;

	for (i = 0; i < ph->ph_nheaders; i++)
		if (strcasecmp(ph->ph_headers[i].hf_name, name) == 0)
			return ph->ph_headers[i].hf_value;
	return NULL;
}

/* o at a dotted path; numbers index arrays.  NULL if absent. */
static struct json_object *
jget(struct json_object *o, const char *path)
{
	char	 buf[256], *p, *part;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf; o != NULL && (part = strsep(&p, ".")) != NULL; ) {
		if (json_object_is_type(o, json_type_array))
			o = json_object_array_get_idx(o,
			    (size_t)strtoul(part, NULL, 10));
		else if (!json_object_object_get_ex(o, part, &o))
			return NULL;
	}
	return o;
}

static int
jhas(struct json_object *o, const char *path)
{
	char	 buf[256], *dot;

	/* Present, even as null. */
	snprintf(buf, sizeof(buf), "%s", path);
	if ((dot = strrchr(buf, '.')) == NULL)
		return json_object_object_get_ex(o, buf, NULL);
	*dot = '\0';
	return json_object_object_get_ex(jget(o, buf), dot + 1, NULL);
}

static const char *
jstr(struct json_object *o, const char *path)
{
	struct json_object *v = jget(o, path);

	assert_non_null(v);
	assert_true(json_object_is_type(v, json_type_string));
	return json_object_get_string(v);
}

static int64_t
jint(struct json_object *o, const char *path)
{
	struct json_object *v = jget(o, path);

	assert_non_null(v);
	assert_true(json_object_is_type(v, json_type_int));
	return json_object_get_int64(v);
}

struct fixture {
	struct chat_message	 msgs[6];
	struct chat_tool_call	 calls[2];
	struct chat_tool_def	 tools[2];
	struct json_object	*schemas[2];
	struct chat_request	 rq;
};

static void
fixture_init(struct fixture *f, const struct provider_conf *pv)
{
	memset(f, 0, sizeof(*f));
	f->msgs[0].cm_role = ROLE_SYSTEM;
	f->msgs[0].cm_content = (char *)"Be brief.";
	f->msgs[1].cm_role = ROLE_USER;
	f->msgs[1].cm_content = (char *)"Weather in Paris, and the time?";
	f->calls[0].tc_id = (char *)"call_a";
	f->calls[0].tc_name = (char *)"get_weather";
	f->calls[0].tc_arguments = (char *)"{\"city\":\"Paris\"}";
	f->calls[1].tc_id = (char *)"call_b";
	f->calls[1].tc_name = (char *)"get_time";
	f->calls[1].tc_arguments = (char *)"";
	f->msgs[2].cm_role = ROLE_ASSISTANT;
	f->msgs[2].cm_calls = f->calls;
	f->msgs[2].cm_ncalls = 2;
	f->msgs[3].cm_role = ROLE_TOOL;
	f->msgs[3].cm_content = (char *)"11 degrees";
	f->msgs[3].cm_call_id = (char *)"call_a";
	f->msgs[3].cm_call_name = (char *)"get_weather";
	f->msgs[4].cm_role = ROLE_TOOL;
	f->msgs[4].cm_content = (char *)"timed out";
	f->msgs[4].cm_call_id = (char *)"call_b";
	f->msgs[4].cm_call_name = (char *)"get_time";
	f->msgs[4].cm_is_error = 1;
	f->msgs[5].cm_role = ROLE_ASSISTANT;
	f->msgs[5].cm_content = (char *)"11 degrees; time unknown.";
	f->schemas[0] = json_tokener_parse("{\"type\":\"object\","
	    "\"properties\":{\"city\":{\"type\":\"string\"}},"
	    "\"required\":[\"city\"]}");
	f->schemas[1] = json_tokener_parse("{\"type\":\"object\"}");
	f->tools[0].td_name = "get_weather";
	f->tools[0].td_description = "Weather in a city";
	f->tools[0].td_schema = f->schemas[0];
	f->tools[1].td_name = "get_time";
	f->tools[1].td_schema = f->schemas[1];
	f->rq.rq_provider = pv;
	f->rq.rq_messages = f->msgs;
	f->rq.rq_nmessages = 6;
	f->rq.rq_tools = f->tools;
	f->rq.rq_ntools = 2;
}

static void
fixture_free(struct fixture *f)
{
	/* The body took references of its own, now dropped: one left. */
	assert_int_equal(json_object_put(f->schemas[0]), 1);
	assert_int_equal(json_object_put(f->schemas[1]), 1);
}

/* Build, check what every request must be, return the parsed body. */
static struct json_object *
build(const struct provider_ops *ops, const struct chat_request *rq,
    struct provider_http *ph)
{
	struct json_object	*body;
	char			 why[256] = "";

	if (ops->po_build(rq, ph, why, sizeof(why)) != 0)
		fail_msg("build: %s", why);
	assert_non_null(ph->ph_url);
	assert_non_null(ph->ph_body);
	assert_int_equal(strlen(ph->ph_body), ph->ph_body_len);
	assert_string_equal(hdr(ph, "Content-Type"), "application/json");
	/* The key goes in a header, never in the body or the URL. */
	assert_null(memmem(ph->ph_body, ph->ph_body_len, "SECRET", 6));
	assert_null(strstr(ph->ph_url, "SECRET"));
	body = json_tokener_parse(ph->ph_body);
	assert_non_null(body);
	return body;
}

static void
check_openai_messages(struct json_object *b)
{
	assert_string_equal(jstr(b, "messages.0.role"), "system");
	assert_string_equal(jstr(b, "messages.0.content"), "Be brief.");
	assert_string_equal(jstr(b, "messages.1.role"), "user");
	assert_string_equal(jstr(b, "messages.2.role"), "assistant");
	/* No text with the calls: content null. */
	assert_true(jhas(b, "messages.2.content"));
	assert_null(jget(b, "messages.2.content"));
	assert_string_equal(jstr(b, "messages.2.tool_calls.0.id"), "call_a");
	assert_string_equal(jstr(b, "messages.2.tool_calls.0.type"),
	    "function");
	assert_string_equal(jstr(b, "messages.2.tool_calls.0.function.name"),
	    "get_weather");
	assert_string_equal(jstr(b,
	    "messages.2.tool_calls.0.function.arguments"),
	    "{\"city\":\"Paris\"}");
	/* Empty arguments go out as an empty object's text. */
	assert_string_equal(jstr(b,
	    "messages.2.tool_calls.1.function.arguments"), "{}");
	assert_string_equal(jstr(b, "messages.3.role"), "tool");
	assert_string_equal(jstr(b, "messages.3.tool_call_id"), "call_a");
	assert_string_equal(jstr(b, "messages.3.content"), "11 degrees");
	assert_string_equal(jstr(b, "messages.4.tool_call_id"), "call_b");
	assert_string_equal(jstr(b, "messages.5.content"),
	    "11 degrees; time unknown.");
	assert_null(jget(b, "messages.5.tool_calls"));
	assert_null(jget(b, "messages.6"));
}

static void
check_function_tools(struct json_object *b)
{
	assert_string_equal(jstr(b, "tools.0.type"), "function");
	assert_string_equal(jstr(b, "tools.0.function.name"), "get_weather");
	assert_string_equal(jstr(b, "tools.0.function.description"),
	    "Weather in a city");
	assert_string_equal(jstr(b,
	    "tools.0.function.parameters.properties.city.type"), "string");
	assert_string_equal(jstr(b, "tools.1.function.name"), "get_time");
	assert_false(jhas(b, "tools.1.function.description"));
	assert_string_equal(jstr(b, "tools.1.function.parameters.type"),
	    "object");
	assert_null(jget(b, "tools.2"));
}

static void
test_build_openai(void **state)
{
	struct provider_conf	 pv;
	struct provider_http	 ph;
	struct fixture		 f;
	struct json_object	*b;

	(void)state;
	conf_init(&pv, PROVIDER_OPENAI, NULL, 1);
	fixture_init(&f, &pv);
	f.rq.rq_model = "gpt-4o";
	f.rq.rq_has_temperature = 1;
	f.rq.rq_temperature = 0.7;
	f.rq.rq_max_tokens = 100;
	b = build(&openai_ops, &f.rq, &ph);
	/* No base-url: the public endpoint. */
	assert_string_equal(ph.ph_url,
	    "https://api.openai.com/v1/chat/completions");
	assert_string_equal(hdr(&ph, "Authorization"), "Bearer " KEY);
	assert_null(hdr(&ph, "api-key"));
	assert_string_equal(hdr(&ph, "Accept"), "text/event-stream");
	assert_string_equal(jstr(b, "model"), "gpt-4o");
	assert_true(json_object_get_boolean(jget(b, "stream")));
	assert_true(json_object_get_boolean(jget(b,
	    "stream_options.include_usage")));
	/* The shortest decimal, not 0.69999999999999996. */
	assert_true(fabs(json_object_get_double(jget(b, "temperature")) -
	    0.7) < 1e-12);
	assert_non_null(strstr(ph.ph_body, "\"temperature\":0.7"));
	assert_null(strstr(ph.ph_body, "0.6999"));
	assert_int_equal(jint(b, "max_completion_tokens"), 100);
	assert_false(jhas(b, "max_tokens"));
	check_openai_messages(b);
	check_function_tools(b);
	json_object_put(b);
	provider_http_free(&ph);
	assert_null(ph.ph_url);
	fixture_free(&f);
}

static void
test_build_openai_minimal(void **state)
{
	struct provider_conf	 pv;
	struct provider_http	 ph;
	struct fixture		 f;
	struct json_object	*b;

	(void)state;
	/* Trailing slashes on base-url do not double up. */
	conf_init(&pv, PROVIDER_OPENAI, "https://gw.example/v1//", 1);
	fixture_init(&f, &pv);
	f.rq.rq_nmessages = 2;
	f.rq.rq_ntools = 0;
	b = build(&openai_ops, &f.rq, &ph);
	assert_string_equal(ph.ph_url,
	    "https://gw.example/v1/chat/completions");
	/* The configured model; no tools member at all, no options. */
	assert_string_equal(jstr(b, "model"), "conf-model");
	assert_false(jhas(b, "tools"));
	assert_false(jhas(b, "temperature"));
	assert_false(jhas(b, "max_completion_tokens"));
	assert_false(jhas(b, "max_tokens"));
	json_object_put(b);
	provider_http_free(&ph);
	fixture_free(&f);
}

static void
test_build_azure(void **state)
{
	struct provider_conf	 pv;
	struct provider_http	 ph;
	struct fixture		 f;
	struct json_object	*b;

	(void)state;
	conf_init(&pv, PROVIDER_AZURE_OPENAI, "https://res.openai.azure.com/",
	    1);
	pv.pv_deployment = (char *)"gpt 4o/prod?x";
	pv.pv_api_version = (char *)"2024-10-21";
	fixture_init(&f, &pv);
	f.rq.rq_max_tokens = 50;
	b = build(&openai_ops, &f.rq, &ph);
	/* The deployment cannot add path segments or parameters. */
	assert_string_equal(ph.ph_url, "https://res.openai.azure.com/openai/"
	    "deployments/gpt%204o%2Fprod%3Fx/chat/completions"
	    "?api-version=2024-10-21");
	assert_string_equal(hdr(&ph, "api-key"), KEY);
	assert_null(hdr(&ph, "Authorization"));
	assert_false(jhas(b, "model"));
	assert_int_equal(jint(b, "max_tokens"), 50);
	assert_false(jhas(b, "max_completion_tokens"));
	assert_true(json_object_get_boolean(jget(b,
	    "stream_options.include_usage")));
	check_openai_messages(b);
	check_function_tools(b);
	json_object_put(b);
	provider_http_free(&ph);
	fixture_free(&f);
}

static void
test_build_compatible(void **state)
{
	struct provider_conf	 pv;
	struct provider_http	 ph;
	struct fixture		 f;
	struct json_object	*b;

	(void)state;
	conf_init(&pv, PROVIDER_OPENAI_COMPATIBLE, "http://127.0.0.1:8000/v1",
	    0);
	fixture_init(&f, &pv);
	f.rq.rq_max_tokens = 10;
	b = build(&openai_ops, &f.rq, &ph);
	assert_string_equal(ph.ph_url,
	    "http://127.0.0.1:8000/v1/chat/completions");
	/* No key, no Authorization. */
	assert_null(hdr(&ph, "Authorization"));
	assert_null(hdr(&ph, "api-key"));
	assert_int_equal(jint(b, "max_tokens"), 10);
	json_object_put(b);
	provider_http_free(&ph);

	conf_init(&pv, PROVIDER_OPENAI_COMPATIBLE, "http://127.0.0.1:8000/v1",
	    1);
	b = build(&openai_ops, &f.rq, &ph);
	assert_string_equal(hdr(&ph, "Authorization"), "Bearer " KEY);
	json_object_put(b);
	provider_http_free(&ph);
	fixture_free(&f);
}

static void
expect_build_failure(const struct provider_ops *ops,
    const struct chat_request *rq, const char *want)
{
	struct provider_http	 ph;
	char			 why[256] = "";

	memset(&ph, 0xa5, sizeof(ph));
	assert_int_equal(ops->po_build(rq, &ph, why, sizeof(why)), -1);
	if (strstr(why, want) == NULL)
		fail_msg("why \"%s\", wanted \"%s\"", why, want);
	/* Nothing left to free, and freeing again is harmless. */
	assert_null(ph.ph_url);
	assert_null(ph.ph_body);
	assert_int_equal(ph.ph_nheaders, 0);
	provider_http_free(&ph);
}

static void
test_build_errors(void **state)
{
	static char		 badkey[] = "sk-abc\r\nX-Evil: 1";
	struct provider_conf	 pv;
	struct fixture		 f;

	(void)state;
	conf_init(&pv, PROVIDER_OPENAI, NULL, 0);
	fixture_init(&f, &pv);
	expect_build_failure(&openai_ops, &f.rq, "no API key");
	conf_init(&pv, PROVIDER_AZURE_OPENAI, "https://r.example", 1);
	expect_build_failure(&openai_ops, &f.rq, "deployment");
	conf_init(&pv, PROVIDER_OPENAI_COMPATIBLE, NULL, 1);
	expect_build_failure(&openai_ops, &f.rq, "base-url");
	conf_init(&pv, PROVIDER_OPENAI, NULL, 1);
	pv.pv_api_key.sr_value = badkey;
	expect_build_failure(&openai_ops, &f.rq, "header");
	expect_build_failure(&ollama_ops, &f.rq, "header");
	conf_init(&pv, PROVIDER_OPENAI, NULL, 1);
	pv.pv_model = NULL;
	expect_build_failure(&openai_ops, &f.rq, "model");
	expect_build_failure(&ollama_ops, &f.rq, "model");
	pv.pv_model = (char *)"m";
	f.rq.rq_has_temperature = 1;
	f.rq.rq_temperature = NAN;
	expect_build_failure(&openai_ops, &f.rq, "temperature");
	expect_build_failure(&ollama_ops, &f.rq, "temperature");
	f.rq.rq_has_temperature = 0;
	f.rq.rq_max_tokens = -1;
	expect_build_failure(&openai_ops, &f.rq, "max-tokens");
	f.rq.rq_max_tokens = 0;
	f.msgs[3].cm_call_id = NULL;
	expect_build_failure(&openai_ops, &f.rq, "message 3");
	f.msgs[3].cm_call_id = (char *)"call_a";
	f.calls[1].tc_name = NULL;
	expect_build_failure(&openai_ops, &f.rq, "message 2");
	expect_build_failure(&ollama_ops, &f.rq, "message 2");
	f.calls[1].tc_name = (char *)"get_time";
	f.tools[1].td_name = NULL;
	expect_build_failure(&openai_ops, &f.rq, "tool");
	fixture_free(&f);
}

static void
test_build_ollama(void **state)
{
	struct provider_conf	 pv;
	struct provider_http	 ph;
	struct fixture		 f;
	struct json_object	*b;

	(void)state;
	conf_init(&pv, PROVIDER_OLLAMA, NULL, 0);
	fixture_init(&f, &pv);
	f.rq.rq_has_temperature = 1;
	f.rq.rq_temperature = 0.2;
	f.rq.rq_max_tokens = 256;
	/* Not an object: {} goes out. */
	f.calls[1].tc_arguments = (char *)"[1,";
	b = build(&ollama_ops, &f.rq, &ph);
	assert_string_equal(ph.ph_url, "http://127.0.0.1:11434/api/chat");
	assert_null(hdr(&ph, "Authorization"));
	assert_string_equal(jstr(b, "model"), "conf-model");
	assert_true(json_object_get_boolean(jget(b, "stream")));
	assert_int_equal(jint(b, "options.num_predict"), 256);
	assert_true(fabs(json_object_get_double(jget(b,
	    "options.temperature")) - 0.2) < 1e-12);
	assert_non_null(strstr(ph.ph_body, "\"temperature\":0.2"));
	assert_false(jhas(b, "temperature"));
	assert_string_equal(jstr(b, "messages.0.role"), "system");
	assert_string_equal(jstr(b, "messages.2.role"), "assistant");
	assert_string_equal(jstr(b, "messages.2.content"), "");
	/* Arguments as objects, not text. */
	assert_true(json_object_is_type(jget(b,
	    "messages.2.tool_calls.0.function.arguments"), json_type_object));
	assert_string_equal(jstr(b,
	    "messages.2.tool_calls.0.function.arguments.city"), "Paris");
	assert_string_equal(jstr(b,
	    "messages.2.tool_calls.0.function.name"), "get_weather");
	assert_int_equal(json_object_object_length(jget(b,
	    "messages.2.tool_calls.1.function.arguments")), 0);
	assert_string_equal(jstr(b, "messages.3.role"), "tool");
	assert_string_equal(jstr(b, "messages.3.tool_name"), "get_weather");
	assert_string_equal(jstr(b, "messages.3.content"), "11 degrees");
	assert_false(jhas(b, "messages.3.tool_call_id"));
	check_function_tools(b);
	json_object_put(b);
	provider_http_free(&ph);

	/* A key (ollama.com, a proxy): Bearer. */
	conf_init(&pv, PROVIDER_OLLAMA, "https://ollama.example/", 1);
	f.rq.rq_has_temperature = 0;
	f.rq.rq_max_tokens = 0;
	f.rq.rq_ntools = 0;
	b = build(&ollama_ops, &f.rq, &ph);
	assert_string_equal(ph.ph_url, "https://ollama.example/api/chat");
	assert_string_equal(hdr(&ph, "Authorization"), "Bearer " KEY);
	assert_false(jhas(b, "options"));
	assert_false(jhas(b, "tools"));
	json_object_put(b);
	provider_http_free(&ph);
	fixture_free(&f);
}

/*
 * Streams.  Events are rendered one a line, so that a whole response's
 * outcome is one string to compare.
 */

struct rec {
	char	 r_buf[8192];
	size_t	 r_len;
};

static void
rec_add(struct rec *r, const char *fmt, ...)
{
	va_list	 ap;
	int	 n;

	va_start(ap, fmt);
	n = vsnprintf(r->r_buf + r->r_len, sizeof(r->r_buf) - r->r_len, fmt,
	    ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < sizeof(r->r_buf) - r->r_len);
	r->r_len += (size_t)n;
}

static void
on_text(void *arg, const char *text, size_t len)
{
	assert_int_equal(strlen(text), len);
	rec_add(arg, "text:%.*s\n", (int)len, text);
}

static void
on_call(void *arg, const char *id, const char *name, const char *args)
{
	rec_add(arg, "call:%s|%s|%s\n", id, name, args);
}

static void
on_usage(void *arg, uint64_t in, uint64_t out)
{
	rec_add(arg, "usage:%llu/%llu\n", (unsigned long long)in,
	    (unsigned long long)out);
}

static void
on_finish(void *arg, const char *reason)
{
	rec_add(arg, "finish:%s\n", reason);
}

static const struct provider_events events = {
	on_text, on_call, on_usage, on_finish,
};

enum outcome { OK, FEED_FAILED, END_FAILED };

/* Feed s in pieces ending at cuts[], then end it. */
static enum outcome
run(const struct provider_ops *ops, const char *s, size_t len,
    const size_t *cuts, size_t ncuts, struct rec *r, char *err,
    size_t errlen)
{
	struct provider_stream	*st;
	enum outcome		 out = OK;
	size_t			 i, from = 0, to;

	memset(r, 0, sizeof(*r));
	st = ops->po_stream_new(&events, r);
	assert_non_null(st);
	assert_null(ops->po_stream_error(st));
	for (i = 0; i <= ncuts && out == OK; i++) {
		to = i < ncuts ? cuts[i] : len;
		if (ops->po_stream_feed(st, s + from, to - from) == -1)
			out = FEED_FAILED;
		from = to;
	}
	if (out == OK && ops->po_stream_end(st) == -1)
		out = END_FAILED;
	if (out != OK)
		assert_non_null(ops->po_stream_error(st));
	snprintf(err, errlen, "%s", out != OK ? ops->po_stream_error(st) : "");
	ops->po_stream_free(st);
	return out;
}

/* Cuts for feeding byte by byte (i == len + 1 in check()). */
static size_t *
bytes_cuts(size_t *cuts, size_t len)
{
	size_t	 i;

	for (i = 0; i < len; i++)
		cuts[i] = i + 1;
	return cuts;
}

/*
 * Whole (cut at 0 or len), cut in two at every byte, and byte by byte:
 * always the same outcome.
 */
static void
check(const struct provider_ops *ops, const char *s, enum outcome want,
    const char *wantlog, const char *wanterr)
{
	struct rec	 r;
	size_t		 len = strlen(s), i, *cuts;
	char		 err[PROVIDER_MAX_ERROR];
	enum outcome	 out;

	cuts = calloc(len + 1, sizeof(*cuts));
	assert_non_null(cuts);
	for (i = 0; i <= len + 1; i++) {
		if (i <= len) {
			cuts[0] = i;
			out = run(ops, s, len, cuts, 1, &r, err, sizeof(err));
		} else
			out = run(ops, s, len, bytes_cuts(cuts, len), len, &r,
			    err, sizeof(err));
		if (out != want || strcmp(r.r_buf, wantlog) != 0)
			fail_msg("cut %zu: outcome %d, events:\n%s", i, out,
			    r.r_buf);
		if (wanterr != NULL && strstr(err, wanterr) == NULL)
			fail_msg("cut %zu: error \"%s\", wanted \"%s\"", i,
			    err, wanterr);
	}
	free(cuts);
}

#define SSE(json)	"data: " json "\n\n"
#define CHUNK(choice)	SSE("{\"id\":\"chatcmpl-1\",\"object\":" \
	"\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o\"," \
	"\"choices\":[" choice "],\"usage\":null}")
#define DELTA(d)	CHUNK("{\"index\":0,\"delta\":" d \
	",\"logprobs\":null,\"finish_reason\":null}")
#define FINISH(r)	CHUNK("{\"index\":0,\"delta\":{},\"finish_reason\":\"" \
	r "\"}")
#define TC(frag)	DELTA("{\"tool_calls\":[" frag "]}")
#define USAGE(in, out)	SSE("{\"id\":\"chatcmpl-1\",\"choices\":[]," \
	"\"usage\":{\"prompt_tokens\":" #in ",\"completion_tokens\":" #out \
	",\"total_tokens\":1}}")
#define DONE		"data: [DONE]\n\n"

static const char openai_tools_stream[] =
	DELTA("{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}")
	DELTA("{\"content\":\"Let me \"}")
	DELTA("{\"content\":\"check.\"}")
	TC("{\"index\":0,\"id\":\"call_a\",\"type\":\"function\","
	    "\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}")
	TC("{\"index\":0,\"function\":{\"arguments\":\"{\\\"ci\"}}")
	TC("{\"index\":1,\"id\":\"call_b\",\"type\":\"function\","
	    "\"function\":{\"name\":\"get_time\",\"arguments\":\"\"}}")
	TC("{\"index\":0,\"function\":{\"arguments\":\"ty\\\":\\\"Pa\"}}")
	TC("{\"index\":1,\"function\":{\"arguments\":\"{\\\"tz\\\":\"}}")
	TC("{\"index\":0,\"function\":{\"arguments\":\"ris\\\"}\"}}")
	TC("{\"index\":1,\"function\":{\"arguments\":\"\\\"CET\\\"}\"}}")
	": a comment line\n\n"
	FINISH("tool_calls")
	USAGE(50, 20)
	DONE;

static void
test_stream_openai(void **state)
{
	(void)state;
	check(&openai_ops, openai_tools_stream, OK,
	    "text:Let me \n"
	    "text:check.\n"
	    "call:call_a|get_weather|{\"city\":\"Paris\"}\n"
	    "call:call_b|get_time|{\"tz\":\"CET\"}\n"
	    "usage:50/20\n"
	    "finish:tool_calls\n", NULL);
	/* Plain text, CRLF line ends, a refusal shown as text. */
	check(&openai_ops,
	    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}"
	    ",\"finish_reason\":null}]}\r\n\r\n"
	    "data: {\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"No.\"}"
	    ",\"finish_reason\":\"stop\"}]}\r\n\r\n"
	    "data: [DONE]\r\n\r\n", OK,
	    "text:Hi\ntext:No.\nfinish:stop\n", NULL);
	/* A tool call without arguments: {} rather than "". */
	check(&openai_ops,
	    TC("{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"now\","
	    "\"arguments\":\"\"}}") FINISH("tool_calls") DONE, OK,
	    "call:c|now|{}\nfinish:tool_calls\n", NULL);
}

static void
test_stream_azure(void **state)
{
	(void)state;
	check(&openai_ops,
	    /* Prompt filter results first, with no choices. */
	    SSE("{\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\","
	    "\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,"
	    "\"content_filter_results\":{\"hate\":{\"filtered\":false,"
	    "\"severity\":\"safe\"}}}]}")
	    CHUNK("{\"content_filter_results\":{},\"delta\":{\"content\":"
	    "\"\",\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0}")
	    CHUNK("{\"content_filter_results\":{\"hate\":{\"filtered\":false,"
	    "\"severity\":\"safe\"}},\"delta\":{\"content\":\"Bonjour\"},"
	    "\"finish_reason\":null,\"index\":0}")
	    /* An annotation without a delta (asynchronous filter). */
	    CHUNK("{\"index\":0,\"finish_reason\":null,"
	    "\"content_filter_results\":{},\"content_filter_offsets\":"
	    "{\"check_offset\":4,\"start_offset\":4,\"end_offset\":9}}")
	    FINISH("stop")
	    USAGE(9, 2)
	    DONE, OK,
	    "text:Bonjour\nusage:9/2\nfinish:stop\n", NULL);
}

static void
test_stream_compatible_quirks(void **state)
{
	(void)state;
	/* Every call of a batch numbered 0, told apart by id. */
	check(&openai_ops,
	    TC("{\"index\":0,\"id\":\"x1\",\"function\":{\"name\":\"a\","
	    "\"arguments\":\"{\\\"n\\\":1}\"}}")
	    TC("{\"index\":0,\"id\":\"x2\",\"function\":{\"name\":\"b\","
	    "\"arguments\":\"{\\\"n\\\":\"}}")
	    TC("{\"index\":0,\"function\":{\"arguments\":\"2}\"}}")
	    FINISH("tool_calls") DONE, OK,
	    "call:x1|a|{\"n\":1}\ncall:x2|b|{\"n\":2}\nfinish:tool_calls\n",
	    NULL);
	/* "stop" after tool calls. */
	check(&openai_ops,
	    TC("{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"now\","
	    "\"arguments\":\"{}\"}}") FINISH("stop") DONE, OK,
	    "call:c|now|{}\nfinish:tool_calls\n", NULL);
	/* No index and no id; [DONE] without a finish_reason. */
	check(&openai_ops,
	    TC("{\"function\":{\"name\":\"a\",\"arguments\":\"{}\"}}") DONE,
	    OK, "call:call_0|a|{}\nfinish:tool_calls\n", NULL);
	/* A finish_reason and then the end of the body, no [DONE]. */
	check(&openai_ops, DELTA("{\"content\":\"ok\"}") FINISH("length"),
	    OK, "text:ok\nfinish:length\n", NULL);
	/* ...or a usage chunk cut short after it: the answer stands. */
	check(&openai_ops, FINISH("stop") "data: {\"choices\":[],\"usa",
	    OK, "finish:stop\n", NULL);
	/* [DONE] without the blank line that closes the event. */
	check(&openai_ops, FINISH("stop") "data: [DONE]\n", OK,
	    "finish:stop\n", NULL);
}

static void
test_stream_openai_errors(void **state)
{
	(void)state;
	check(&openai_ops, DELTA("{\"content\":\"a\"}")
	    "data: {\"choices\":[\n\n"
	    DONE, FEED_FAILED, "text:a\n", "malformed chunk");
	check(&openai_ops, "data: [1,2]\n\n" DONE, FEED_FAILED, "",
	    "malformed chunk");
	/* Cut short: no finish_reason, no [DONE]. */
	check(&openai_ops, DELTA("{\"content\":\"a\"}") TC("{\"index\":0,"
	    "\"id\":\"c\",\"function\":{\"name\":\"n\",\"arguments\":\"\"}}"),
	    END_FAILED, "text:a\n", "ended before the model finished");
	check(&openai_ops, "", END_FAILED, "",
	    "ended before the model finished");
	check(&openai_ops, DELTA("{\"content\":\"a\"}") "data: {\"choi",
	    END_FAILED, "text:a\n", "ended before the model finished");
	/* An error object in the stream. */
	check(&openai_ops, DELTA("{\"content\":\"a\"}")
	    SSE("{\"error\":{\"message\":\"The server had an error\","
	    "\"type\":\"server_error\",\"param\":null,\"code\":null}}") DONE,
	    FEED_FAILED, "text:a\n",
	    "OpenAI API said: The server had an error (server_error)");
	check(&openai_ops, "event: error\ndata: {\"message\":\"overloaded\","
	    "\"type\":\"x\",\"code\":\"busy\"}\n\n", FEED_FAILED, "",
	    "OpenAI API said: overloaded (busy)");
	/* Bad index; a call that never got a name. */
	check(&openai_ops, TC("{\"index\":-1,\"id\":\"c\"}") DONE,
	    FEED_FAILED, "", "bad index");
	check(&openai_ops, TC("{\"index\":7,\"function\":{\"arguments\":"
	    "\"{}\"}}") FINISH("tool_calls") DONE, FEED_FAILED, "",
	    "no name");
}

static void
test_stream_openai_limits(void **state)
{
	struct provider_stream	*st;
	struct rec		 r;
	char			*chunk;
	size_t			 i, n = 64 * 1024;
	int			 rc = 0, off;

	(void)state;
	memset(&r, 0, sizeof(r));
	st = openai_ops.po_stream_new(&events, &r);
	assert_non_null(st);
	/* 17 chunks of 64 KiB of arguments: past the 1 MiB a call may have. */
	chunk = malloc(n + 512);
	assert_non_null(chunk);
	for (i = 0; i < 17 && rc == 0; i++) {
		off = snprintf(chunk, 256, "data: {\"choices\":[{\"index\":0,"
		    "\"delta\":{\"tool_calls\":[{\"index\":0,%s\"function\":"
		    "{\"name\":\"f\",\"arguments\":\"", i == 0 ?
		    "\"id\":\"c\"," : "");
		memset(chunk + off, 'x', n);
		snprintf(chunk + off + n, 256,
		    "\"}}]},\"finish_reason\":null}]}\n\n");
		rc = openai_ops.po_stream_feed(st, chunk, strlen(chunk));
	}
	assert_int_equal(rc, -1);
	assert_int_equal(i, 17);
	assert_non_null(strstr(openai_ops.po_stream_error(st),
	    "longer than"));
	/* Failed streams stay failed. */
	assert_int_equal(openai_ops.po_stream_feed(st, DONE, strlen(DONE)),
	    -1);
	assert_int_equal(openai_ops.po_stream_end(st), -1);
	openai_ops.po_stream_free(st);
	free(chunk);
	assert_int_equal(r.r_len, 0);
}

#define OL(msg, rest)	"{\"model\":\"llama3.2\",\"created_at\":" \
	"\"2025-07-07T20:22:19.184789Z\",\"message\":{\"role\":\"assistant\"," \
	msg "}," rest "}\n"
#define OL_DONE(reason)	OL("\"content\":\"\"", "\"done_reason\":\"" reason \
	"\",\"done\":true,\"total_duration\":182242375,\"load_duration\":1," \
	"\"prompt_eval_count\":169,\"prompt_eval_duration\":2,\"eval_count\":" \
	"15,\"eval_duration\":3")

static const char ollama_tools_stream[] =
	OL("\"content\":\"Checking\"", "\"done\":false")
	OL("\"content\":\" now.\",\"thinking\":\"hmm\"", "\"done\":false")
	OL("\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":"
	    "\"get_weather\",\"arguments\":{\"city\":\"Tokyo\",\"days\":2}}},"
	    "{\"function\":{\"index\":1,\"name\":\"get_time\",\"arguments\":"
	    "{}}}]", "\"done\":false")
	"\n"
	OL("\"content\":\"\",\"tool_calls\":[{\"id\":\"srv-7\",\"function\":"
	    "{\"name\":\"ping\",\"arguments\":{\"host\":\"a/b\"}}}]",
	    "\"done\":false")
	OL_DONE("stop");

static void
test_stream_ollama(void **state)
{
	static const char want[] =
	    "text:Checking\n"
	    "text: now.\n"
	    "call:call_0|get_weather|{\"city\":\"Tokyo\",\"days\":2}\n"
	    "call:call_1|get_time|{}\n"
	    "call:srv-7|ping|{\"host\":\"a/b\"}\n"
	    "usage:169/15\n"
	    "finish:tool_calls\n";
	char	 buf[sizeof(ollama_tools_stream)];

	(void)state;
	check(&ollama_ops, ollama_tools_stream, OK, want, NULL);
	/* The last line without its newline. */
	snprintf(buf, sizeof(buf), "%s", ollama_tools_stream);
	buf[strlen(buf) - 1] = '\0';
	check(&ollama_ops, buf, OK, want, NULL);
	/* Text only, CRLF, "length". */
	check(&ollama_ops,
	    "{\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},"
	    "\"done\":false}\r\n"
	    "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},"
	    "\"done\":true,\"done_reason\":\"length\",\"eval_count\":1}\r\n",
	    OK, "text:Hi\nusage:0/1\nfinish:length\n", NULL);
}

static void
test_stream_ollama_errors(void **state)
{
	struct provider_stream	*st;
	char			*big;
	size_t			 n = PROVIDER_MAX_LINE + 1;

	(void)state;
	check(&ollama_ops, OL("\"content\":\"Yes\"", "\"done\":false")
	    "{\"error\":\"an error was encountered while running the model\"}"
	    "\n", FEED_FAILED, "text:Yes\n",
	    "Ollama said: an error was encountered while running the model");
	check(&ollama_ops, OL("\"content\":\"Yes\"", "\"done\":false")
	    "{\"message\": nope}\n" OL_DONE("stop"), FEED_FAILED,
	    "text:Yes\n", "malformed line");
	check(&ollama_ops, OL("\"content\":\"Yes\"", "\"done\":false"),
	    END_FAILED, "text:Yes\n", "ended before the model finished");
	check(&ollama_ops, OL("\"content\":\"Yes\"", "\"done\":false")
	    "{\"model\":\"llama3.2\",\"mess", END_FAILED, "text:Yes\n",
	    "ended before the model finished");
	check(&ollama_ops, OL("\"content\":\"\",\"tool_calls\":[{\"function\":"
	    "{\"arguments\":{}}}]", "\"done\":false") OL_DONE("stop"),
	    FEED_FAILED, "", "without a name");

	/* A line over 1 MiB. */
	big = malloc(n);
	assert_non_null(big);
	memset(big, ' ', n);
	st = ollama_ops.po_stream_new(&events, NULL);
	assert_non_null(st);
	assert_int_equal(ollama_ops.po_stream_feed(st, big, n - 1), 0);
	assert_int_equal(ollama_ops.po_stream_feed(st, big, 1), -1);
	assert_non_null(strstr(ollama_ops.po_stream_error(st), "longer"));
	ollama_ops.po_stream_free(st);
	free(big);
}

/*
 * Error bodies.
 */

static void
check_error(const struct provider_ops *ops, int status, const char *body,
    const char *want)
{
	char	 out[PROVIDER_MAX_ERROR];

	ops->po_error_message(status, body, body != NULL ? strlen(body) : 0,
	    out, sizeof(out));
	assert_string_equal(out, want);
}

static void
test_error_messages(void **state)
{
	const char	*body;
	char		 small[23];

	(void)state;
	check_error(&openai_ops, 401, "{\n  \"error\": {\n    \"message\": "
	    "\"Incorrect API key provided: sk-abc***xyz.\",\n    \"type\": "
	    "\"invalid_request_error\",\n    \"param\": null,\n    \"code\": "
	    "\"invalid_api_key\"\n  }\n}\n",
	    "OpenAI API said: Incorrect API key provided: sk-abc***xyz. "
	    "(invalid_api_key)");
	/* code null: the type stands in. */
	check_error(&openai_ops, 429, "{\"error\":{\"message\":\"Rate limit "
	    "reached\",\"type\":\"requests\",\"param\":null,\"code\":null}}",
	    "OpenAI API said: Rate limit reached (requests)");
	/* Azure's shapes. */
	check_error(&openai_ops, 404, "{\"error\":{\"code\":"
	    "\"DeploymentNotFound\",\"message\":\"The API deployment for "
	    "this resource does not exist.\"}}",
	    "OpenAI API said: The API deployment for this resource does not "
	    "exist. (DeploymentNotFound)");
	check_error(&openai_ops, 401, "{\"statusCode\":401,\"message\":"
	    "\"Unauthorized. Access token is missing.\"}",
	    "OpenAI API said: Unauthorized. Access token is missing.");
	check_error(&openai_ops, 400, "{\"error\":{\"message\":\"bad\","
	    "\"code\":400}}", "OpenAI API said: bad (400)");
	/* Not JSON, not an error, nothing. */
	check_error(&openai_ops, 502, "<html><body>Bad Gateway</body></html>",
	    "HTTP 502");
	check_error(&openai_ops, 500, "{\"error\":{}}", "HTTP 500");
	check_error(&openai_ops, 503, "", "HTTP 503");
	check_error(&openai_ops, 503, NULL, "HTTP 503");
	/* Control characters cannot forge log lines. */
	check_error(&openai_ops, 400, "{\"error\":{\"message\":\"a\\nb\\u001b"
	    "[31mc\\u009bd\"}}", "OpenAI API said: a b [31mc d");
	check_error(&ollama_ops, 404, "{\"error\":\"model \\\"llama9\\\" not "
	    "found, try pulling it first\"}",
	    "Ollama said: model \"llama9\" not found, try pulling it first");
	check_error(&ollama_ops, 500, "oops", "HTTP 500");
	/* Truncated to fit, not inside a UTF-8 sequence. */
	body = "{\"error\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"}";
	openai_ops.po_error_message(400, body, strlen(body), small,
	    sizeof(small));
	assert_string_equal(small, "OpenAI API said: \xc3\xa9\xc3\xa9");
}

/*
 * Helpers.
 */

static void
test_util(void **state)
{
	struct provider_http	 ph;
	struct provider_buf	 b;
	struct json_object	*o;
	char			*s;

	(void)state;
	s = provider_url("https://h.example///", "/x?y=1");
	assert_string_equal(s, "https://h.example/x?y=1");
	free(s);
	assert_null(provider_url(NULL, "/x"));
	assert_null(provider_url("", "/x"));
	s = provider_url_escape("a-Z_0.~ /?&=%\xc3\xa9");
	assert_string_equal(s, "a-Z_0.~%20%2F%3F%26%3D%25%C3%A9");
	free(s);

	memset(&ph, 0, sizeof(ph));
	assert_int_equal(provider_http_add_header(&ph, "A", "%s", "x\ny"), -1);
	assert_int_equal(provider_http_add_header(&ph, "A", "%s", "x\r"), -1);
	while (ph.ph_nheaders < PROVIDER_MAX_HEADERS)
		assert_int_equal(provider_http_add_header(&ph, "A", "v%zu",
		    ph.ph_nheaders), 0);
	assert_int_equal(provider_http_add_header(&ph, "A", "more"), -1);
	assert_string_equal(ph.ph_headers[7].hf_value, "v7");
	provider_http_free(&ph);
	provider_http_free(&ph);
	provider_http_free(NULL);

	o = provider_json_double(0.1 + 0.2);
	assert_string_equal(json_object_to_json_string(o),
	    "0.30000000000000004");
	json_object_put(o);
	o = provider_json_double(1);
	assert_string_equal(json_object_to_json_string(o), "1");
	json_object_put(o);
	assert_null(provider_json_double(INFINITY));

	provider_buf_init(&b, 4);
	assert_string_equal(provider_buf_str(&b), "");
	assert_int_equal(provider_buf_add(&b, "ab", 2), 0);
	assert_int_equal(provider_buf_add(&b, "cde", 3), -1);
	assert_int_equal(provider_buf_add(&b, "cd", 2), 0);
	assert_string_equal(provider_buf_str(&b), "abcd");
	provider_buf_reset(&b);
	assert_string_equal(provider_buf_str(&b), "");
	provider_buf_free(&b);
	provider_buf_free(&b);
}

static void
test_provider_ops(void **state)
{
	(void)state;
	assert_ptr_equal(provider_ops(PROVIDER_OPENAI), &openai_ops);
	assert_ptr_equal(provider_ops(PROVIDER_AZURE_OPENAI), &openai_ops);
	assert_ptr_equal(provider_ops(PROVIDER_OPENAI_COMPATIBLE),
	    &openai_ops);
	assert_ptr_equal(provider_ops(PROVIDER_OLLAMA), &ollama_ops);
	assert_ptr_equal(provider_ops(PROVIDER_ANTHROPIC), &anthropic_ops);
	assert_ptr_equal(provider_ops(PROVIDER_GEMINI), &gemini_ops);
	assert_string_equal(openai_ops.po_name, "openai");
	assert_string_equal(ollama_ops.po_name, "ollama");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_provider_ops),
		cmocka_unit_test(test_build_openai),
		cmocka_unit_test(test_build_openai_minimal),
		cmocka_unit_test(test_build_azure),
		cmocka_unit_test(test_build_compatible),
		cmocka_unit_test(test_build_errors),
		cmocka_unit_test(test_build_ollama),
		cmocka_unit_test(test_stream_openai),
		cmocka_unit_test(test_stream_azure),
		cmocka_unit_test(test_stream_compatible_quirks),
		cmocka_unit_test(test_stream_openai_errors),
		cmocka_unit_test(test_stream_openai_limits),
		cmocka_unit_test(test_stream_ollama),
		cmocka_unit_test(test_stream_ollama_errors),
		cmocka_unit_test(test_error_messages),
		cmocka_unit_test(test_util),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
