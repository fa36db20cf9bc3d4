/*
 * Request building for every provider type (po_build): what an MCP server
 * says about its tools (the inputSchema, which Gemini converts to its own
 * schema dialect, $refs and all) and what a model and a tool wrote into
 * the conversation (call arguments, results) become a request body.
 *
 * What must hold: a request that builds has a body that is one JSON
 * object of exactly ph_body_len bytes, a URL and header values without
 * control bytes, and the key only in the header meant for it; a refusal
 * says why.
 *
 * Input: [provider type] then lines: the tool's inputSchema (JSON, read
 * as a worker's report is), the call's arguments as the model wrote them,
 * the tool's result, the user's message.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "broker/providers/provider.h"
#include "common/util.h"
#include "tests/fuzz/fuzz.h"

#define KEY	"sk-fuzz-0123456789KEY"

static const enum provider_type types[] = {
	PROVIDER_OPENAI, PROVIDER_AZURE_OPENAI, PROVIDER_OPENAI_COMPATIBLE,
	PROVIDER_ANTHROPIC, PROVIDER_OLLAMA, PROVIDER_GEMINI,
};
#define NTYPES	(sizeof(types) / sizeof(types[0]))

static char	key[] = KEY;

/* The next line of the input, NUL-terminated; "" once it runs out. */
static char *
next_line(const uint8_t **data, size_t *size)
{
	const uint8_t	*nl;
	size_t		 len;
	char		*s;

	nl = memchr(*data, '\n', *size);
	len = nl != NULL ? (size_t)(nl - *data) : *size;
	s = fuzz_strndup(*data, len);
	*data += len + (nl != NULL);
	*size -= len + (nl != NULL);
	return s;
}

/*
 * Text reaches po_build only as well-formed UTF-8: results and messages
 * come through json_parse_object, which checks it, results are cut on a
 * character boundary, and the stream parsers refuse anything else.
 */
static int
utf8_ok(const char *str)
{
	const unsigned char	*s = (const unsigned char *)str;
	unsigned int		 cp, min;
	int			 n, i;

	while (*s != '\0') {
		if (*s < 0x80) {
			s++;
			continue;
		}
		if (*s >= 0xc2 && *s <= 0xdf) {
			n = 1;
			cp = *s & 0x1f;
			min = 0x80;
		} else if (*s >= 0xe0 && *s <= 0xef) {
			n = 2;
			cp = *s & 0x0f;
			min = 0x800;
		} else if (*s >= 0xf0 && *s <= 0xf4) {
			n = 3;
			cp = *s & 0x07;
			min = 0x10000;
		} else
			return 0;
		for (i = 1; i <= n; i++) {
			if ((s[i] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		s += n + 1;
	}
	return 1;
}

static void
no_control(const char *s)
{
	for (; *s != '\0'; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			abort();
}

/* The key may be in the body only if the conversation itself has it. */
static void
check(const struct provider_http *ph, int key_in_input)
{
	struct json_object	*body;
	size_t			 i;

	if (ph->ph_url == NULL || ph->ph_body == NULL ||
	    strlen(ph->ph_body) != ph->ph_body_len)
		abort();
	if ((body = json_parse_object(ph->ph_body, ph->ph_body_len)) == NULL) {
		fprintf(stderr, "body is not a JSON object: %s\n", ph->ph_body);
		abort();
	}
	json_object_put(body);
	no_control(ph->ph_url);
	if (strstr(ph->ph_url, KEY) != NULL ||
	    (!key_in_input && strstr(ph->ph_body, KEY) != NULL))
		abort();
	for (i = 0; i < ph->ph_nheaders; i++) {
		no_control(ph->ph_headers[i].hf_name);
		no_control(ph->ph_headers[i].hf_value);
	}
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_quiet();
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct provider_conf	 pv;
	struct chat_tool_call	 call;
	struct chat_message	 msgs[6];
	struct chat_tool_def	 td;
	struct chat_request	 rq;
	struct provider_http	 ph;
	struct json_object	*schema;
	char			*schema_text, *args, *result, *user, why[256];
	uint8_t			 b;
	int			 key_in_input;

	key_in_input = memmem(data, size, KEY, strlen(KEY)) != NULL;
	b = fuzz_take(&data, &size);
	schema_text = next_line(&data, &size);
	args = next_line(&data, &size);
	result = next_line(&data, &size);
	user = next_line(&data, &size);
	if (!utf8_ok(args) || !utf8_ok(result) || !utf8_ok(user))
		goto out;
	/* Workers report schemas that are objects; others never get here. */
	schema = json_parse_object(schema_text, strlen(schema_text));

	memset(&pv, 0, sizeof(pv));
	pv.pv_name = "fuzz";
	pv.pv_type = types[b % NTYPES];
	pv.pv_type_set = 1;
	pv.pv_base_url = "https://llm.example/v1/";
	pv.pv_model = "model-1";
	pv.pv_deployment = "deploy";
	pv.pv_api_version = "2024-10-21";
	pv.pv_api_key.sr_kind = SECRET_ENV;
	pv.pv_api_key.sr_value = key;

	call.tc_id = "call_1";
	call.tc_name = "tool_a";
	call.tc_arguments = args;
	memset(msgs, 0, sizeof(msgs));
	msgs[0].cm_role = ROLE_SYSTEM;
	msgs[0].cm_content = "Be brief.";
	msgs[1].cm_role = ROLE_USER;
	msgs[1].cm_content = user;
	msgs[2].cm_role = ROLE_ASSISTANT;
	msgs[2].cm_content = b & 0x80 ? NULL : "Calling.";
	msgs[2].cm_calls = &call;
	msgs[2].cm_ncalls = 1;
	msgs[3].cm_role = ROLE_TOOL;
	msgs[3].cm_content = result;
	msgs[3].cm_call_id = "call_1";
	msgs[3].cm_call_name = "tool_a";
	msgs[3].cm_is_error = (b & 0x40) != 0;
	msgs[4].cm_role = ROLE_USER;
	msgs[4].cm_content = user;

	memset(&td, 0, sizeof(td));
	td.td_name = "tool_a";
	td.td_description = result;
	td.td_schema = schema;
	memset(&rq, 0, sizeof(rq));
	rq.rq_provider = &pv;
	rq.rq_has_temperature = (b & 0x20) != 0;
	rq.rq_temperature = 0.5;
	rq.rq_max_tokens = b & 0x10 ? 1000 : 0;
	rq.rq_messages = msgs;
	rq.rq_nmessages = 5;
	rq.rq_tools = schema != NULL ? &td : NULL;
	rq.rq_ntools = schema != NULL;

	memset(&ph, 0, sizeof(ph));
	why[0] = '\0';
	if (provider_ops(pv.pv_type)->po_build(&rq, &ph, why,
	    sizeof(why)) == 0)
		check(&ph, key_in_input);
	else if (why[0] == '\0')
		abort();
	provider_http_free(&ph);
	json_object_put(schema);
 out:
	free(schema_text);
	free(args);
	free(result);
	free(user);
	return 0;
}
