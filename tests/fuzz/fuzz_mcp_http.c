/*
 * A remote MCP server as the worker meets it: the MCP client session over
 * the HTTP transports (worker/mcp_http.c) and the HTTP client, against a
 * server whose every answer comes from the input: JSON or event-stream
 * bodies, status codes, Mcp-Session-Id, the legacy transport's endpoint
 * event, stream resumption.  Connection i gets response i
 * (fuzz_server.c); further connections are refused.  The session starts
 * as a worker's does and, once ready, lists the tools and calls one.
 *
 * What must hold: the client never connects anywhere but the server's
 * own host and port, whatever the server says (an endpoint event, a
 * redirect); every request ends in one callback; nothing leaks.
 *
 * Input: [flags] [cut] then the responses, separated by NUL bytes.
 * Flags: 1 the legacy HTTP+SSE transport, 2 the initialize era hint.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "common/http_client.h"
#include "worker/mcp.h"
#include "worker/mcp_http.h"
#include "tests/fuzz/fuzz.h"

#define F_SSE		0x01
#define F_LEGACY	0x02

#define IDLE_PASSES	8	/* loop passes with nothing happening: done */
#define MAX_PASSES	100000

struct harness {
	int	outstanding;
	int	closed;
	int	lists;
};

static struct event_base	*base;

static void
on_result(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct harness *h = arg;

	(void)s;
	if ((res == NULL) == (err == NULL) || h->outstanding <= 0)
		abort();
	h->outstanding--;
}

static void
on_ready(struct mcp_session *s, void *arg)
{
	struct harness		*h = arg;
	struct json_object	*args;

	h->outstanding += 2;
	h->lists++;
	mcp_list_tools(s, 60000, on_result, h);
	args = json_object_new_object();
	json_object_object_add(args, "region", json_object_new_string("eu"));
	(void)mcp_call_tool(s, "q", args, 60000, on_result, NULL, h);
}

static void
on_closed(struct mcp_session *s, const char *why, void *arg)
{
	struct harness *h = arg;

	(void)s;
	(void)why;
	h->closed = 1;
}

static void
on_tools_changed(struct mcp_session *s, void *arg)
{
	struct harness *h = arg;

	if (h->lists++ < 3) {
		h->outstanding++;
		mcp_list_tools(s, 60000, on_result, h);
	}
}

static const struct mcp_session_cbs cbs = {
	.on_ready = on_ready,
	.on_closed = on_closed,
	.on_tools_changed = on_tools_changed,
};

/* Run the loop until nothing happens for a while, or the session ends. */
static void
pump(const struct harness *h)
{
	unsigned long	last = fuzz_server_activity();
	int		idle = 0, passes = 0;

	while (idle < IDLE_PASSES && (h == NULL || !h->closed)) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		if (fuzz_server_activity() != last) {
			last = fuzz_server_activity();
			idle = 0;
		} else
			idle++;
		if (++passes > MAX_PASSES)
			abort();	/* busy without end */
	}
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	base = fuzz_http_init();
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct http_field	 hdr = { "X-Api-Key", "secret" };
	struct fuzz_script		 script;
	struct http_client_opts		 co;
	struct mcp_session_opts		 so;
	struct mcp_http_opts		 ho;
	struct http_client		*client;
	struct mcp_session		*s;
	struct mcp_http			*t;
	struct harness			 h;
	const uint8_t			*nul;
	uint8_t				 flags;
	size_t				 len;

	flags = fuzz_take(&data, &size);
	memset(&script, 0, sizeof(script));
	script.cut = fuzz_take(&data, &size);
	while (size > 0 && script.n < FUZZ_MAX_CONNS) {
		nul = memchr(data, '\0', size);
		len = nul != NULL ? (size_t)(nul - data) : size;
		script.data[script.n] = data;
		script.len[script.n++] = len;
		data += len + (nul != NULL);
		size -= len + (nul != NULL);
	}
	fuzz_server_start(base, &script, "mcp.example", 8080);

	memset(&co, 0, sizeof(co));
	co.co_connect = fuzz_connect;
	co.co_max_idle = -1;	/* a connection per request: per response */
	if ((client = http_client_new(base, &co)) == NULL)
		abort();
	memset(&ho, 0, sizeof(ho));
	ho.ho_name = "fuzz";
	ho.ho_url = flags & F_SSE ? "http://mcp.example:8080/sse" :
	    "http://mcp.example:8080/mcp";
	ho.ho_kind = flags & F_SSE ? MCP_HTTP_SSE : MCP_HTTP_STREAMABLE;
	ho.ho_headers = &hdr;
	ho.ho_nheaders = 1;
	ho.ho_connect_timeout_ms = 10000;
	ho.ho_call_timeout_ms = 60000;
	if ((t = mcp_http_new(base, client, &ho)) == NULL)
		abort();
	memset(&so, 0, sizeof(so));
	so.so_name = "fuzz";
	so.so_era_hint = flags & (F_SSE | F_LEGACY) ? MCP_ERA_LEGACY :
	    MCP_ERA_UNKNOWN;
	so.so_can_cancel_by_notification = (flags & F_SSE) != 0;
	so.so_param_headers = !(flags & F_SSE);
	memset(&h, 0, sizeof(h));
	if ((s = mcp_session_new(base, &so, &mcp_http_ops, t, &cbs,
	    &h)) == NULL)
		abort();
	mcp_http_attach(t, s);
	mcp_session_start(s);
	pump(&h);
	mcp_session_free(s);
	if (h.outstanding != 0)
		abort();
	pump(NULL);		/* a closing DELETE */
	http_client_free(client);
	event_base_loop(base, EVLOOP_NONBLOCK);
	fuzz_server_stop();
	return 0;
}
