/*
 * The MCP client session (worker/mcp.c) on what a server sends: each line
 * of the input after the first byte is one JSON text handed over as a
 * transport would (mcp_session_input).  The session starts as a worker's
 * does, and once ready lists the tools and calls one, so that answers to
 * the handshake, tools/list pages, call results, progress, the server's
 * own requests and notifications all reach the code that reads them.
 * Request ids are deterministic (1, 2, ...), so the corpus can answer them.
 *
 * What must hold: every request the session accepted ends in exactly one
 * callback (or a cancel), including when the session is freed from inside
 * a callback (which mcp.c defers; the real transports do not allow it,
 * mcp.h says, but this one does); everything the session sends is one
 * JSON text.
 *
 * Flags byte: 1 legacy era hint, 2 x-mcp-header checks (streamable HTTP),
 * 4 cancel by notification, 8 cancel the call on its first progress,
 * 16 free the session from the call's result, 32 sends fail, 64 our
 * tools/list and tools/call time out at once (the loop runs their timers
 * between lines, so late answers meet requests already gone).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "worker/mcp.h"
#include "tests/fuzz/fuzz.h"

#define F_LEGACY	0x01
#define F_HEADERS	0x02
#define F_NOTIFY	0x04
#define F_CANCEL	0x08
#define F_FREE		0x10
#define F_SENDFAIL	0x20
#define F_TIMEOUT	0x40

#define MAX_LISTS	4	/* tools/list walks started per input */

struct harness {
	struct mcp_session	*s;
	uint8_t			 flags;
	int			 outstanding;	/* callbacks still owed */
	int			 lists;
	int			 closed;
	int64_t			 call_id;
	unsigned int		 sends;
};

static struct event_base	*base;

static int
to_send(void *arg, const struct mcp_out *out, char *why, size_t whylen)
{
	struct harness		*h = arg;
	struct json_object	*o;

	if ((o = json_tokener_parse(out->mo_json)) == NULL ||
	    strlen(out->mo_json) != out->mo_len)
		abort();
	json_object_put(o);
	if ((h->flags & F_SENDFAIL) && ++h->sends % 3 == 0) {
		snprintf(why, whylen, "send refused");
		return -1;
	}
	return 0;
}

static const struct mcp_transport_ops transport = {
	.to_send = to_send,
};

static void
on_result(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct harness *h = arg;

	(void)s;
	if ((res == NULL) == (err == NULL) || h->outstanding <= 0)
		abort();
	if (err != NULL)
		(void)strnlen(err->me_message, sizeof(err->me_message));
	else
		(void)json_object_to_json_string(res);
	h->outstanding--;
}

static void
on_call_result(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct harness *h = arg;

	h->call_id = -1;
	on_result(s, res, err, arg);
	if ((h->flags & F_FREE) && h->s != NULL) {
		mcp_session_free(h->s);
		h->s = NULL;
	}
}

static void
on_progress(struct mcp_session *s, struct json_object *params, void *arg)
{
	struct harness *h = arg;

	(void)json_object_to_json_string(params);
	if ((h->flags & F_CANCEL) && h->call_id != -1) {
		mcp_cancel(s, h->call_id, "fuzz");
		h->call_id = -1;
		h->outstanding--;
	}
}

static uint64_t
timeout(const struct harness *h)
{
	return h->flags & F_TIMEOUT ? 0 : 60000;
}

static void
list_tools(struct mcp_session *s, struct harness *h)
{
	if (h->lists++ >= MAX_LISTS)
		return;
	h->outstanding++;
	mcp_list_tools(s, timeout(h), on_result, h);
}

static void
on_ready(struct mcp_session *s, void *arg)
{
	struct harness		*h = arg;
	struct json_object	*args;

	(void)mcp_session_server_info(s);
	(void)mcp_session_version(s);
	list_tools(s, h);
	args = json_object_new_object();
	json_object_object_add(args, "text", json_object_new_string("hi"));
	h->outstanding++;
	h->call_id = mcp_call_tool(s, "echo", args, timeout(h), on_call_result,
	    on_progress, h);
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
	(void)mcp_session_tool_schema(s, "echo");
	list_tools(s, arg);
}

static void
on_notify(struct mcp_session *s, const char *method,
    struct json_object *params, void *arg)
{
	(void)s;
	(void)arg;
	if (method == NULL)
		abort();
	if (params != NULL)
		(void)json_object_to_json_string(params);
}

static const struct mcp_session_cbs cbs = {
	.on_ready = on_ready,
	.on_closed = on_closed,
	.on_tools_changed = on_tools_changed,
};

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_quiet();
	if ((base = event_base_new()) == NULL)
		abort();
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcp_session_opts	 opts;
	struct harness		 h;
	struct mcp_session	*s;
	const uint8_t		*nl;
	size_t			 len, n;
	char			*line;

	memset(&h, 0, sizeof(h));
	h.flags = fuzz_take(&data, &size);
	h.call_id = -1;
	memset(&opts, 0, sizeof(opts));
	opts.so_name = "fuzz";
	opts.so_era_hint = h.flags & F_LEGACY ? MCP_ERA_LEGACY :
	    MCP_ERA_UNKNOWN;
	opts.so_param_headers = (h.flags & F_HEADERS) != 0;
	opts.so_can_cancel_by_notification = (h.flags & F_NOTIFY) != 0;
	if ((h.s = mcp_session_new(base, &opts, &transport, &h, &cbs,
	    &h)) == NULL)
		abort();
	mcp_session_on_notify(h.s, on_notify);
	mcp_session_start(h.s);
	while (size > 0 && h.s != NULL && !h.closed) {
		nl = memchr(data, '\n', size);
		len = nl != NULL ? (size_t)(nl - data) : size;
		/* As the stdio transport: a line without its CR, never empty. */
		line = fuzz_strndup(data, len);
		n = len;
		if (n > 0 && line[n - 1] == '\r')
			line[--n] = '\0';
		if (n > 0)
			mcp_session_input(h.s, line, n);
		free(line);
		if (h.flags & F_TIMEOUT)
			event_base_loop(base, EVLOOP_NONBLOCK);
		data += len + (nl != NULL);
		size -= len + (nl != NULL);
	}
	if ((s = h.s) != NULL) {
		(void)mcp_session_state(s);
		(void)mcp_session_era(s);
		h.s = NULL;	/* the callbacks it runs must not free it again */
		mcp_session_free(s);
	}
	if (h.outstanding != 0)
		abort();
	return 0;
}
