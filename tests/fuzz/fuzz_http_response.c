/*
 * The HTTP client's response parsing (common/http_client.c): status line,
 * headers, Content-Length, chunked bodies, trailers, interim responses,
 * keep-alive and the retry of a request on a reused connection.  Each
 * connection gets the input as the server's bytes (fuzz_server.c), in two
 * writes, then the server closes its side, so every request must end
 * without waiting for a timer.
 *
 * What must hold: each request ends in exactly one on_done unless it is
 * cancelled; on_response comes at most once and before any body; a body
 * that a Content-Length framed is exactly that long.
 *
 * Input: [flags] [cut, 2 bytes] server bytes.  Flags: 0-1 method (GET,
 * POST, HEAD, DELETE), 4 a second request from the first's on_done,
 * 8 cancel in the first body callback, 16 cancel in on_response.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/http_client.h"
#include "common/util.h"
#include "tests/fuzz/fuzz.h"

#define MAX_CONNS	3	/* a retry, and a second request */
#define DEADLINE_MS	3000	/* far below the client's own timeouts */

#define F_METHOD	0x03
#define F_SECOND	0x04
#define F_CANCEL_BODY	0x08
#define F_CANCEL_RESP	0x10

struct req {
	struct http_request	*rq;
	int			 head;
	int			 responses;
	int			 done;
	int			 cancelled;
	int			 status;
	int64_t			 length;	/* Content-Length, or -1 */
	uint64_t		 body;
};

static struct event_base	*base;
static struct http_client	*client;
static struct fuzz_script	 script;
static uint8_t			 flags;
static struct req		 reqs[2];
static int			 outstanding;

static void	start(int);

static void
cancel(struct req *r)
{
	http_request_cancel(r->rq);
	r->cancelled = 1;
	outstanding--;
}

static int64_t
content_length(const struct http_headers *h)
{
	const char	*v;
	size_t		 i;

	if (http_headers_get(h, "transfer-encoding") != NULL ||
	    (v = http_headers_get(h, "content-length")) == NULL ||
	    *v == '\0' || strlen(v) > 18)
		return -1;
	for (i = 0; v[i] != '\0'; i++)
		if (v[i] < '0' || v[i] > '9')
			return -1;
	return strtoll(v, NULL, 10);
}

static void
on_response(struct http_request *rq, int status,
    const struct http_headers *h, void *arg)
{
	struct req	*r = arg;
	const char	*name, *value;
	size_t		 i;

	(void)rq;
	if (r->responses++ > 0 || r->body > 0 || r->done || status < 200 ||
	    status > 999)
		abort();
	r->status = status;
	for (i = 0; i < http_headers_count(h); i++)
		if (http_headers_at(h, i, &name, &value) == -1 ||
		    name == NULL || value == NULL)
			abort();
	r->length = status == 204 || status == 304 || r->head ? -1 :
	    content_length(h);
	if (r == &reqs[0] && (flags & F_CANCEL_RESP))
		cancel(r);
}

static void
on_body(struct http_request *rq, const char *buf, size_t len, void *arg)
{
	struct req *r = arg;

	(void)rq;
	(void)buf;
	if (r->responses != 1 || r->done || r->cancelled || len == 0)
		abort();
	r->body += len;
	if (r == &reqs[0] && (flags & F_CANCEL_BODY))
		cancel(r);
}

static void
on_done(struct http_request *rq, int err, const char *why, void *arg)
{
	struct req *r = arg;

	(void)rq;
	if (r->done++ > 0 || r->cancelled || why == NULL)
		abort();
	if (err == HTTP_OK && (r->responses != 1 ||
	    (r->length >= 0 && r->body != (uint64_t)r->length)))
		abort();
	outstanding--;
	if (r == &reqs[0] && (flags & F_SECOND))
		start(1);
}

static void
start(int i)
{
	static const char *const methods[] = { "GET", "POST", "HEAD",
	    "DELETE" };
	static const struct http_field hdrs[] = {
		{ "Accept", "text/event-stream" },
	};
	static const struct http_callbacks cbs = {
		on_response, on_body, on_done
	};
	struct http_request_opts	 o;
	struct req			*r = &reqs[i];

	memset(&o, 0, sizeof(o));
	o.ro_method = methods[flags & F_METHOD];
	o.ro_url = "http://mcp.example:8080/mcp";
	o.ro_headers = hdrs;
	o.ro_nheaders = 1;
	if (flags & 1) {
		o.ro_body = "{}";
		o.ro_body_len = 2;
	}
	o.ro_max_header_bytes = 4096;
	o.ro_max_headers = 16;
	memset(r, 0, sizeof(*r));
	r->head = (flags & F_METHOD) == 2;
	r->length = -1;
	outstanding++;
	if ((r->rq = http_request_start(client, &o, &cbs, r)) == NULL)
		abort();
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
	struct http_client_opts	 co;
	uint64_t		 deadline;
	size_t			 cut, i;

	flags = fuzz_take(&data, &size);
	cut = fuzz_take(&data, &size);
	cut = cut << 8 | fuzz_take(&data, &size);
	/* The same response on every connection. */
	memset(&script, 0, sizeof(script));
	for (i = 0; i < MAX_CONNS; i++) {
		script.data[i] = data;
		script.len[i] = size;
	}
	script.n = MAX_CONNS;
	script.cut = size > 0 ? cut % (size + 1) : 0;
	fuzz_server_start(base, &script, "mcp.example", 8080);
	outstanding = 0;

	memset(&co, 0, sizeof(co));
	co.co_connect = fuzz_connect;
	if ((client = http_client_new(base, &co)) == NULL)
		abort();
	start(0);
	deadline = monotonic_ms() + DEADLINE_MS;
	while (outstanding > 0) {
		event_base_loop(base, EVLOOP_ONCE);
		if (monotonic_ms() > deadline)
			abort();	/* the client waits though the server left */
	}
	http_client_free(client);
	fuzz_server_stop();
	return 0;
}
