/*
 * The HTTP client against a scripted server in the same event loop: the
 * server reads whole requests and answers each with the next canned byte
 * string, optionally in two parts, closing after or holding forever.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/ssl.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "common/http_client.h"
#include "common/util.h"

#define TSRV_MAXCONN	32
#define TSRV_MAXREQ	256
#define TSRV_KEEPREQ	4	/* requests whose text is kept */

struct tresp {
	const char	*tr_data;
	size_t		 tr_len;	/* 0: strlen */
	size_t		 tr_split;	/* > 0: the rest 2 ms later */
	int		 tr_close;	/* close once sent */
	int		 tr_hold;	/* send nothing, stay open; or: */
#define TR_RAW	2			/* send past TLS, onto the socket */
};

struct tsrv;

struct tconn {
	struct tsrv		*tc_srv;
	struct bufferevent	*tc_bev;
	struct event		*tc_timer;
	const struct tresp	*tc_resp;	/* second part pending */
	int			 tc_id;
	int			 tc_asked;	/* a request came */
	int			 tc_closing;
	int			 tc_gone;
};

struct tsrv {
	struct event_base	*ts_base;
	struct evconnlistener	*ts_lis;
	SSL_CTX			*ts_ssl;
	uint16_t		 ts_port;
	const struct tresp	*ts_script;
	size_t			 ts_nscript;
	size_t			 ts_next;
	struct tconn		*ts_conns[TSRV_MAXCONN];
	int			 ts_naccepted;
	int			 ts_nresumed;	/* TLS sessions resumed */
	int			 ts_nclosed;
	int			 ts_nreq;
	int			 ts_req_conn[TSRV_MAXREQ];
	char			 ts_req[TSRV_KEEPREQ][512];
};

struct tctx {
	struct event_base	*c_base;
	struct event		*c_tick;	/* wakes run_until() */
	struct tsrv		 c_srv;
	struct http_client	*c_hc;
	struct http_direct	 c_direct;
	char			 c_url[128];
	char			 c_host_asked[256];
	http_connected_fn	 c_held_done;	/* hold_connect()'s */
	void			*c_held_arg;
};

struct tres {
	struct tctx		*r_ctx;
	struct http_request	*r_req;
	int			 r_status;
	int			 r_nresponse;
	int			 r_nbody;
	int			 r_ndone;
	int			 r_err;
	char			 r_why[512];
	char			 r_body[8192];
	size_t			 r_bodylen;
	char			 r_ctype[64];
	/* what to do from the callbacks */
	int			 r_cancel_in_body;
	const char		*r_stream_rest;	/* server sends it on body */
	const struct http_request_opts *r_next_opts;	/* from on_done */
	struct tres		*r_next;
};

static char	tls_dir[] = "/tmp/test_http_client.XXXXXX";
static char	tls_cert[256], tls_key[256];

/*
 * The scripted server.
 */
static void
tconn_close(struct tconn *tc)
{
	if (tc->tc_gone)
		return;
	bufferevent_free(tc->tc_bev);
	event_free(tc->tc_timer);
	tc->tc_gone = 1;
	tc->tc_srv->ts_nclosed++;
}

static void
tconn_rest_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tconn		*tc = arg;
	const struct tresp	*r = tc->tc_resp;
	size_t			 len;

	(void)fd;
	(void)what;
	len = r->tr_len ? r->tr_len : strlen(r->tr_data);
	bufferevent_write(tc->tc_bev, r->tr_data + r->tr_split,
	    len - r->tr_split);
	tc->tc_closing = r->tr_close;
}

static void
tconn_respond(struct tconn *tc)
{
	struct tsrv		*ts = tc->tc_srv;
	const struct tresp	*r;
	struct timeval		 tv = { 0, 2000 };
	size_t			 len;

	if (ts->ts_next >= ts->ts_nscript)
		return;
	r = &ts->ts_script[ts->ts_next++];
	if (r->tr_hold == 1)
		return;
	len = r->tr_len ? r->tr_len : strlen(r->tr_data);
	if (r->tr_hold == TR_RAW) {
		assert_int_equal(write(bufferevent_getfd(tc->tc_bev),
		    r->tr_data, len), (ssize_t)len);
		return;
	}
	bufferevent_write(tc->tc_bev, r->tr_data, r->tr_split ? r->tr_split :
	    len);
	if (r->tr_split) {
		tc->tc_resp = r;
		evtimer_add(tc->tc_timer, &tv);
	} else
		tc->tc_closing = r->tr_close;
}

/* One whole request (headers and Content-Length body) at a time. */
static void
tconn_read_cb(struct bufferevent *bev, void *arg)
{
	struct tconn		*tc = arg;
	struct tsrv		*ts = tc->tc_srv;
	struct evbuffer		*in = bufferevent_get_input(bev);
	struct evbuffer_ptr	 p;
	const char		*h, *cl;
	size_t			 hlen, blen = 0, n;

	for (;;) {
		p = evbuffer_search(in, "\r\n\r\n", 4, NULL);
		if (p.pos < 0)
			return;
		hlen = p.pos + 4;
		h = (const char *)evbuffer_pullup(in, hlen);
		cl = memmem(h, hlen, "Content-Length: ", 16);
		if (cl != NULL)
			blen = strtoul(cl + 16, NULL, 10);
		if (evbuffer_get_length(in) < hlen + blen)
			return;
		assert_true(ts->ts_nreq < TSRV_MAXREQ);
		if (ts->ts_nreq < TSRV_KEEPREQ) {
			n = hlen + blen < 511 ? hlen + blen : 511;
			evbuffer_copyout(in, ts->ts_req[ts->ts_nreq], n);
			ts->ts_req[ts->ts_nreq][n] = '\0';
		}
		ts->ts_req_conn[ts->ts_nreq++] = tc->tc_id;
		if (!tc->tc_asked++ && ts->ts_ssl != NULL &&
		    SSL_session_reused(bufferevent_openssl_get_ssl(bev)))
			ts->ts_nresumed++;
		evbuffer_drain(in, hlen + blen);
		tconn_respond(tc);
	}
}

static void
tconn_write_cb(struct bufferevent *bev, void *arg)
{
	struct tconn	*tc = arg;

	(void)bev;
	if (tc->tc_closing)
		tconn_close(tc);
}

static void
tconn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		tconn_close(arg);
}

static void
tsrv_accept_cb(struct evconnlistener *lis, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct tsrv	*ts = arg;
	struct tconn	*tc;
	int		 one = 1;

	(void)lis;
	(void)sa;
	(void)salen;
	/* Split responses must not wait for a delayed ACK. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	assert_true(ts->ts_naccepted < TSRV_MAXCONN);
	tc = calloc(1, sizeof(*tc));
	assert_non_null(tc);
	tc->tc_srv = ts;
	tc->tc_id = ts->ts_naccepted;
	ts->ts_conns[ts->ts_naccepted++] = tc;
	if (ts->ts_ssl != NULL)
		tc->tc_bev = bufferevent_openssl_socket_new(ts->ts_base, fd,
		    SSL_new(ts->ts_ssl), BUFFEREVENT_SSL_ACCEPTING,
		    BEV_OPT_CLOSE_ON_FREE);
	else
		tc->tc_bev = bufferevent_socket_new(ts->ts_base, fd,
		    BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(tc->tc_bev);
	tc->tc_timer = evtimer_new(ts->ts_base, tconn_rest_cb, tc);
	bufferevent_setcb(tc->tc_bev, tconn_read_cb, tconn_write_cb,
	    tconn_event_cb, tc);
	bufferevent_enable(tc->tc_bev, EV_READ | EV_WRITE);
}

static void
tsrv_init(struct tsrv *ts, struct event_base *base, int tls)
{
	struct sockaddr_in	 sin;
	socklen_t		 len = sizeof(sin);

	memset(ts, 0, sizeof(*ts));
	ts->ts_base = base;
	if (tls) {
		ts->ts_ssl = SSL_CTX_new(TLS_server_method());
		assert_non_null(ts->ts_ssl);
		assert_int_equal(SSL_CTX_use_certificate_chain_file(
		    ts->ts_ssl, tls_cert), 1);
		assert_int_equal(SSL_CTX_use_PrivateKey_file(ts->ts_ssl,
		    tls_key, SSL_FILETYPE_PEM), 1);
	}
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ts->ts_lis = evconnlistener_new_bind(base, tsrv_accept_cb, ts,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
	    (struct sockaddr *)&sin, sizeof(sin));
	assert_non_null(ts->ts_lis);
	assert_int_equal(getsockname(evconnlistener_get_fd(ts->ts_lis),
	    (struct sockaddr *)&sin, &len), 0);
	ts->ts_port = ntohs(sin.sin_port);
}

static void
tsrv_free(struct tsrv *ts)
{
	int	 i;

	evconnlistener_free(ts->ts_lis);
	for (i = 0; i < ts->ts_naccepted; i++) {
		tconn_close(ts->ts_conns[i]);
		free(ts->ts_conns[i]);
	}
	SSL_CTX_free(ts->ts_ssl);
}

#define SCRIPT(ts, s)	do {						\
	(ts)->ts_script = (s);						\
	(ts)->ts_nscript = sizeof(s) / sizeof((s)[0]);			\
	(ts)->ts_next = 0;						\
} while (0)

/*
 * Client side.
 */
static void
on_response(struct http_request *rq, int status,
    const struct http_headers *h, void *arg)
{
	struct tres	*r = arg;
	const char	*v;

	assert_ptr_equal(rq, r->r_req);
	r->r_status = status;
	r->r_nresponse++;
	if ((v = http_headers_get(h, "content-type")) != NULL)
		snprintf(r->r_ctype, sizeof(r->r_ctype), "%s", v);
}

static void
on_body(struct http_request *rq, const char *buf, size_t len, void *arg)
{
	struct tres	*r = arg;
	struct tsrv	*ts = &r->r_ctx->c_srv;

	assert_int_equal(r->r_ndone, 0);
	assert_true(r->r_bodylen + len < sizeof(r->r_body));
	memcpy(r->r_body + r->r_bodylen, buf, len);
	r->r_bodylen += len;
	r->r_nbody++;
	if (r->r_stream_rest != NULL) {
		/* The response is not over: only now does the rest go out. */
		bufferevent_write(ts->ts_conns[ts->ts_naccepted - 1]->tc_bev,
		    r->r_stream_rest, strlen(r->r_stream_rest));
		r->r_stream_rest = NULL;
	}
	if (r->r_cancel_in_body)
		http_request_cancel(rq);
}

static void	start(struct tctx *, const struct http_request_opts *,
		    struct tres *);

static void
on_done(struct http_request *rq, int err, const char *why, void *arg)
{
	struct tres	*r = arg;

	assert_ptr_equal(rq, r->r_req);
	assert_non_null(why);
	r->r_ndone++;
	r->r_err = err;
	snprintf(r->r_why, sizeof(r->r_why), "%s", why);
	if (r->r_next_opts != NULL)
		start(r->r_ctx, r->r_next_opts, r->r_next);
}

static const struct http_callbacks cbs = { on_response, on_body, on_done };

static void
start(struct tctx *c, const struct http_request_opts *o, struct tres *r)
{
	r->r_ctx = c;
	r->r_req = http_request_start(c->c_hc, o, &cbs, r);
	if (r->r_req == NULL)
		fail_msg("start: %s", http_client_error(c->c_hc));
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

static void
run_until(struct tctx *c, const int *counter, int want)
{
	uint64_t	 deadline = monotonic_ms() + 5000;

	while (*counter < want) {
		if (monotonic_ms() > deadline)
			fail_msg("timed out waiting for %d (have %d)", want,
			    *counter);
		event_base_loop(c->c_base, EVLOOP_ONCE);
	}
}

static void
run_for(struct tctx *c, int ms)
{
	uint64_t	 deadline = monotonic_ms() + ms;

	while (monotonic_ms() < deadline)
		event_base_loop(c->c_base, EVLOOP_ONCE);
}

static struct http_request_opts
opts(struct tctx *c, const char *method, const char *path)
{
	struct http_request_opts o;

	memset(&o, 0, sizeof(o));
	o.ro_method = method;
	snprintf(c->c_url, sizeof(c->c_url), "http://127.0.0.1:%u%s",
	    c->c_srv.ts_port, path);
	o.ro_url = c->c_url;
	o.ro_idle_timeout_ms = 3000;
	return o;
}

static int
setup(void **state)
{
	struct tctx	*c;
	struct timeval	 tv = { 0, 10000 };

	c = calloc(1, sizeof(*c));
	assert_non_null(c);
	c->c_base = event_base_new();
	assert_non_null(c->c_base);
	c->c_tick = event_new(c->c_base, -1, EV_PERSIST, tick_cb, NULL);
	event_add(c->c_tick, &tv);
	tsrv_init(&c->c_srv, c->c_base, 0);
	c->c_hc = http_client_new(c->c_base, NULL);
	assert_non_null(c->c_hc);
	*state = c;
	return 0;
}

static int
teardown(void **state)
{
	struct tctx	*c = *state;

	http_client_free(c->c_hc);
	tsrv_free(&c->c_srv);
	event_free(c->c_tick);
	event_base_free(c->c_base);
	free(c);
	return 0;
}

static void
expect_ok(struct tres *r, int status, const char *body)
{
	if (r->r_err != HTTP_OK)
		fail_msg("err %d: %s", r->r_err, r->r_why);
	assert_int_equal(r->r_ndone, 1);
	assert_int_equal(r->r_nresponse, 1);
	assert_int_equal(r->r_status, status);
	assert_int_equal(r->r_bodylen, strlen(body));
	assert_memory_equal(r->r_body, body, r->r_bodylen);
}

static void
expect_err(struct tres *r, int err, const char *why)
{
	assert_int_equal(r->r_ndone, 1);
	assert_string_equal(r->r_why, why);
	assert_int_equal(r->r_err, err);
}

/*
 * Tests.
 */
static void
test_content_length(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 100 Continue\r\n\r\n"
		  "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
		  "content-length: 5\r\n\r\nhello", 0, 0, 0, 0 },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "POST", "?q=1#frag");
	struct http_field		 f[] = { { "X-Test", "a b" } };
	struct tres			 r;
	char				 want[256];

	SCRIPT(&c->c_srv, s);
	o.ro_headers = f;
	o.ro_nheaders = 1;
	o.ro_body = "{}";
	o.ro_body_len = 2;
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	assert_int_equal(r.r_ndone, 0);	/* never from inside start */
	run_until(c, &r.r_ndone, 1);
	expect_ok(&r, 200, "hello");
	assert_string_equal(r.r_ctype, "text/plain");
	snprintf(want, sizeof(want), "POST /?q=1 HTTP/1.1\r\nHost: "
	    "127.0.0.1:%u\r\nX-Test: a b\r\nContent-Length: 2\r\n\r\n{}",
	    c->c_srv.ts_port);
	assert_string_equal(c->c_srv.ts_req[0], want);
}

static void
test_chunked_every_split(void **state)
{
	static const char resp[] = "HTTP/1.1 200 OK\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n"
	    "6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n";
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/");
	struct tresp			 s[sizeof(resp)];
	struct tres			 r;
	size_t				 i, n = sizeof(resp) - 2;

	memset(s, 0, sizeof(s));
	for (i = 0; i < n; i++) {
		s[i].tr_data = resp;
		s[i].tr_split = i + 1;
	}
	c->c_srv.ts_script = s;
	c->c_srv.ts_nscript = n;
	for (i = 0; i < n; i++) {
		memset(&r, 0, sizeof(r));
		start(c, &o, &r);
		run_until(c, &r.r_ndone, 1);
		expect_ok(&r, 200, "hello world");
	}
	/* All of them on one kept-alive connection. */
	assert_int_equal(c->c_srv.ts_naccepted, 1);
	assert_int_equal(c->c_srv.ts_nreq, (int)n);
}

static void
test_read_until_close(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 200 OK\r\n\r\nuntil ", 0, 13, 1, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		  0, 0, 0, 0 },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/");
	struct tres			 r;

	SCRIPT(&c->c_srv, s);
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_ok(&r, 200, "until ");
	/* Such a connection is not reusable. */
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_ok(&r, 200, "ok");
	assert_int_equal(c->c_srv.ts_naccepted, 2);
}

static void
test_streaming(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "4\r\nabcd\r\n", 0, 0, 0, 0 },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/events");
	struct tres			 r;

	SCRIPT(&c->c_srv, s);
	memset(&r, 0, sizeof(r));
	r.r_stream_rest = "3\r\nefg\r\n0\r\n\r\n";
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_ok(&r, 200, "abcdefg");
	assert_true(r.r_nbody >= 2);
	assert_null(r.r_stream_rest);
}

static void
test_protocol_errors(void **state)
{
	static const struct {
		const char	*resp;
		const char	*why;
	} cases[] = {
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "zz\r\n", "bad chunk size" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "11111111111111111\r\n", "bad chunk size" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "2\r\nabc\r\n", "bad chunk: no CRLF after chunk data" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
		  "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		  "response has both Content-Length and Transfer-Encoding" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
		  "Content-Length: 6\r\n\r\nhello",
		  "bad Content-Length \"6\"" },
		{ "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		  "bad Content-Length \"-1\"" },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		  "unsupported Transfer-Encoding \"gzip\"" },
		{ "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
		  "malformed response header field" },
		{ "HTTP/1.1 200 OK\r\nX: 1\r\n folded\r\n\r\n",
		  "malformed response header field" },
		{ "HTTP/1.1 101 Switching Protocols\r\n\r\n",
		  "unexpected 101 Switching Protocols" },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/");
	struct tresp			 s[1];
	struct tres			 r;
	size_t				 i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(s, 0, sizeof(s));
		s[0].tr_data = cases[i].resp;
		SCRIPT(&c->c_srv, s);
		memset(&r, 0, sizeof(r));
		start(c, &o, &r);
		run_until(c, &r.r_ndone, 1);
		expect_err(&r, HTTP_ERR_PROTOCOL, cases[i].why);
	}
}

static void
test_bad_status_line(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 2x0 OK\r\n\r\n", 0, 0, 0, 0 },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/");
	struct tres			 r;
	char				 want[128];

	SCRIPT(&c->c_srv, s);
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	snprintf(want, sizeof(want), "malformed status line from "
	    "127.0.0.1:%u", c->c_srv.ts_port);
	expect_err(&r, HTTP_ERR_PROTOCOL, want);
}

static void
test_header_limits(void **state)
{
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/");
	struct tresp			 s[1];
	struct tres			 r;
	char				*big;
	size_t				 i, n = 70000;

	big = malloc(n + 64);
	assert_non_null(big);
	strcpy(big, "HTTP/1.1 200 OK\r\nX-Big: ");
	memset(big + strlen(big), 'a', n);
	strcpy(big + 24 + n, "\r\n\r\n");
	memset(s, 0, sizeof(s));
	s[0].tr_data = big;
	SCRIPT(&c->c_srv, s);
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_err(&r, HTTP_ERR_PROTOCOL,
	    "response header larger than 65536 bytes");
	assert_int_equal(r.r_nresponse, 0);

	strcpy(big, "HTTP/1.1 200 OK\r\n");
	for (i = 0; i < 101; i++)
		strcat(big, "X-N: 1\r\n");
	strcat(big, "\r\n");
	SCRIPT(&c->c_srv, s);
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_err(&r, HTTP_ERR_PROTOCOL,
	    "more than 100 response header fields");
	free(big);
}

static void
test_closed_early(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, 0, 1,
		  0 },
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		  "5\r\nab", 0, 0, 1, 0 },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/");
	struct tres			 r;
	char				 want[128];

	SCRIPT(&c->c_srv, s);
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	snprintf(want, sizeof(want), "connection closed by 127.0.0.1:%u "
	    "after 3 of 10 body bytes", c->c_srv.ts_port);
	expect_err(&r, HTTP_ERR_CLOSED, want);
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	snprintf(want, sizeof(want), "connection closed by 127.0.0.1:%u "
	    "in chunked body", c->c_srv.ts_port);
	expect_err(&r, HTTP_ERR_CLOSED, want);
	assert_memory_equal(r.r_body, "ab", 2);
}

static void
test_connection_refused(void **state)
{
	struct tctx			*c = *state;
	struct http_request_opts	 o;
	struct sockaddr_in		 sin;
	socklen_t			 len = sizeof(sin);
	struct tres			 r;
	char				 url[64], want[128];
	int				 fd;

	/* A port that was just free: nobody listens there. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	close(fd);
	memset(&o, 0, sizeof(o));
	o.ro_method = "GET";
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/",
	    ntohs(sin.sin_port));
	o.ro_url = url;
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	snprintf(want, sizeof(want), "connect to 127.0.0.1:%u: "
	    "Connection refused", ntohs(sin.sin_port));
	expect_err(&r, HTTP_ERR_CONNECT, want);
}

/* A connector that never answers until the test says so. */
static void
hold_connect(const char *host, uint16_t port, http_connected_fn done,
    void *done_arg, void *arg)
{
	struct tctx	*c = arg;

	(void)port;
	snprintf(c->c_host_asked, sizeof(c->c_host_asked), "%s", host);
	c->c_held_done = done;
	c->c_held_arg = done_arg;
}

static void
test_connect_timeout(void **state)
{
	struct tctx			*c = *state;
	struct http_client_opts		 co;
	struct http_request_opts	 o;
	struct tres			 r;

	memset(&co, 0, sizeof(co));
	co.co_connect = hold_connect;
	co.co_connect_arg = c;
	http_client_free(c->c_hc);
	c->c_hc = http_client_new(c->c_base, &co);
	assert_non_null(c->c_hc);
	memset(&o, 0, sizeof(o));
	o.ro_method = "GET";
	o.ro_url = "http://[::1]:9/";
	o.ro_connect_timeout_ms = 100;
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_err(&r, HTTP_ERR_TIMEOUT,
	    "timed out after 100 ms connecting to [::1]:9");
	assert_string_equal(c->c_host_asked, "::1");
	/* The late answer goes nowhere, and its socket is closed. */
	assert_non_null(c->c_held_done);
	c->c_held_done(dup(0), NULL, c->c_held_arg);
	assert_int_equal(r.r_ndone, 1);
}

static void
test_read_timeouts(void **state)
{
	static const struct tresp s[] = {
		{ NULL, 0, 0, 0, 1 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 0, 0, 0,
		  0 },
		{ NULL, 0, 0, 0, 1 },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/");
	struct tres			 r;

	SCRIPT(&c->c_srv, s);
	o.ro_idle_timeout_ms = 100;
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_err(&r, HTTP_ERR_TIMEOUT,
	    "timed out after 100 ms waiting for response");
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_err(&r, HTTP_ERR_TIMEOUT,
	    "timed out after 100 ms waiting for response body");
	o.ro_idle_timeout_ms = 5000;
	o.ro_total_timeout_ms = 150;
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_err(&r, HTTP_ERR_TIMEOUT,
	    "timed out after 150 ms (total request timeout)");
}

static void
test_cancel(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789",
		  0, 42, 0, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		  0, 0, 0, 0 },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/");
	struct tres			 r, r2;

	SCRIPT(&c->c_srv, s);
	/* Cancelled while the connector is still at work. */
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	http_request_cancel(r.r_req);
	run_until(c, &c->c_srv.ts_nclosed, 1);
	run_for(c, 30);
	assert_int_equal(r.r_ndone + r.r_nresponse, 0);
	assert_int_equal(c->c_srv.ts_naccepted, 1);
	assert_int_equal(c->c_srv.ts_nreq, 0);

	/* Cancelled from on_body. */
	memset(&r, 0, sizeof(r));
	r.r_cancel_in_body = 1;
	start(c, &o, &r);
	run_until(c, &r.r_nbody, 1);
	/* The server sees the connection go; no callback follows. */
	run_until(c, &c->c_srv.ts_nclosed, 2);
	run_for(c, 30);
	assert_int_equal(r.r_ndone, 0);
	assert_int_equal(r.r_nbody, 1);
	assert_memory_equal(r.r_body, "012", 3);
	/* Cancelled connections are not pooled. */
	memset(&r2, 0, sizeof(r2));
	start(c, &o, &r2);
	run_until(c, &r2.r_ndone, 1);
	expect_ok(&r2, 200, "ok");
	assert_int_equal(c->c_srv.ts_naccepted, 3);
	assert_int_equal(c->c_srv.ts_nreq, 2);
}

static void
test_keepalive_reuse(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", 0, 0, 0, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", 0, 0, 0, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", 0, 0, 0, 0 },
		{ "HTTP/1.1 204 No Content\r\n\r\n", 0, 0, 0, 0 },
		{ "HTTP/1.1 200 OK\r\nConnection: close\r\n"
		  "Content-Length: 1\r\n\r\nc", 0, 0, 0, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nd", 0, 0, 0, 0 },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/"), head;
	struct tres			 r1, r2, r3;
	int				 i;

	SCRIPT(&c->c_srv, s);
	head = o;
	head.ro_method = "HEAD";
	memset(&r1, 0, sizeof(r1));
	memset(&r2, 0, sizeof(r2));
	r1.r_next_opts = &o;	/* the second starts from on_done */
	r1.r_next = &r2;
	start(c, &o, &r1);
	run_until(c, &r2.r_ndone, 1);
	expect_ok(&r1, 200, "a");
	expect_ok(&r2, 200, "b");
	memset(&r3, 0, sizeof(r3));
	start(c, &head, &r3);		/* HEAD: no body despite the length */
	run_until(c, &r3.r_ndone, 1);
	expect_ok(&r3, 200, "");
	memset(&r3, 0, sizeof(r3));
	start(c, &o, &r3);
	run_until(c, &r3.r_ndone, 1);
	expect_ok(&r3, 204, "");
	for (i = 0; i < 4; i++)
		assert_int_equal(c->c_srv.ts_req_conn[i], 0);
	assert_int_equal(c->c_srv.ts_naccepted, 1);
	/* Connection: close from the server ends the reuse. */
	memset(&r3, 0, sizeof(r3));
	start(c, &o, &r3);
	run_until(c, &r3.r_ndone, 1);
	expect_ok(&r3, 200, "c");
	memset(&r3, 0, sizeof(r3));
	start(c, &o, &r3);
	run_until(c, &r3.r_ndone, 1);
	expect_ok(&r3, 200, "d");
	assert_int_equal(c->c_srv.ts_naccepted, 2);
}

/*
 * The server answers and closes; the next request, started from on_done,
 * takes the pooled connection before the client has seen the close.
 */
static void
test_retry_idempotent_only(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", 0, 0, 1, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", 0, 0, 1, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nc", 0, 0, 0, 0 },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/"), post;
	struct tres			 r1, r2;
	char				 want[128];

	SCRIPT(&c->c_srv, s);
	post = o;
	post.ro_method = "POST";
	post.ro_body = "x";
	post.ro_body_len = 1;
	memset(&r1, 0, sizeof(r1));
	memset(&r2, 0, sizeof(r2));
	r1.r_next_opts = &post;
	r1.r_next = &r2;
	start(c, &o, &r1);
	run_until(c, &r2.r_ndone, 1);
	expect_ok(&r1, 200, "a");
	assert_int_equal(r2.r_err, HTTP_ERR_CLOSED);
	snprintf(want, sizeof(want), "connection closed by 127.0.0.1:%u "
	    "before response (reused connection, request not retried)",
	    c->c_srv.ts_port);
	if (strcmp(r2.r_why, want) != 0 &&
	    strstr(r2.r_why, "Connection reset by peer") == NULL)
		fail_msg("why: %s", r2.r_why);
	assert_int_equal(c->c_srv.ts_naccepted, 1);
	assert_int_equal(c->c_srv.ts_nreq, 1);

	/* The same for a GET: retried once on a fresh connection. */
	memset(&r1, 0, sizeof(r1));
	memset(&r2, 0, sizeof(r2));
	r1.r_next_opts = &o;
	r1.r_next = &r2;
	start(c, &o, &r1);
	run_until(c, &r2.r_ndone, 1);
	expect_ok(&r1, 200, "b");
	expect_ok(&r2, 200, "c");
	assert_int_equal(c->c_srv.ts_naccepted, 3);
}

/* Pooled connections die on the idle timeout or when the server closes. */
static void
test_pool_lifecycle(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", 0, 0, 0, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", 0, 0, 1, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nc", 0, 0, 0, 0 },
	};
	struct tctx			*c = *state;
	struct http_client_opts		 co;
	struct http_request_opts	 o = opts(c, "POST", "/");
	struct tres			 r;

	memset(&co, 0, sizeof(co));
	co.co_idle_timeout_ms = 50;
	http_client_free(c->c_hc);
	c->c_hc = http_client_new(c->c_base, &co);
	assert_non_null(c->c_hc);
	SCRIPT(&c->c_srv, s);
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_ok(&r, 200, "a");
	run_until(c, &c->c_srv.ts_nclosed, 1);	/* idle timeout */
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);
	run_until(c, &r.r_ndone, 1);
	expect_ok(&r, 200, "b");
	run_for(c, 20);		/* the server's close reaches the pool */
	memset(&r, 0, sizeof(r));
	start(c, &o, &r);	/* a POST: it must not meet a dead one */
	run_until(c, &r.r_ndone, 1);
	expect_ok(&r, 200, "c");
	assert_int_equal(c->c_srv.ts_naccepted, 3);
}

/*
 * Twelve requests at once, then twelve more: the second twelve go over
 * the first twelve's connections (a pool of four kept four).
 */
static void
test_pool_keeps_a_burst(void **state)
{
#define BURST	12
	static const struct tresp one = {
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", 0, 0, 0, 0 };
	static struct tresp	 s[2 * BURST];
	struct tctx		*c = *state;
	struct http_request_opts o = opts(c, "GET", "/");
	struct tres		 r[BURST];
	int			 i, round;

	for (i = 0; i < 2 * BURST; i++)
		s[i] = one;
	SCRIPT(&c->c_srv, s);
	for (round = 0; round < 2; round++) {
		memset(r, 0, sizeof(r));
		for (i = 0; i < BURST; i++)
			start(c, &o, &r[i]);
		for (i = 0; i < BURST; i++) {
			run_until(c, &r[i].r_ndone, 1);
			expect_ok(&r[i], 200, "x");
		}
	}
	assert_int_equal(c->c_srv.ts_nreq, 2 * BURST);
	assert_int_equal(c->c_srv.ts_naccepted, BURST);
#undef BURST
}

static void
test_bad_options(void **state)
{
	static const char *const urls[] = {
		"ftp://h/", "http://", "http:///x", "http://a b/",
		"http://h:0/", "http://h:70000/", "http://h:/",
		"http://u@h/", "http://[::1/", "http://[zz]/", "http://1.2.3/",
		"http://h/a b", "http://h/\x7f", "h/x",
	};
	static const struct http_field bad_fields[] = {
		{ "X", "a\r\nInjected: 1" }, { "Bad Name", "x" }, { "", "x" },
		{ "Host", "evil" }, { "content-length", "1" },
		{ "X", "a\nb" },
	};
	struct tctx			*c = *state;
	struct http_request_opts	 o = opts(c, "GET", "/");
	struct tres			 r;
	size_t				 i;

	memset(&r, 0, sizeof(r));
	for (i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
		o.ro_url = urls[i];
		if (http_request_start(c->c_hc, &o, &cbs, &r) != NULL)
			fail_msg("accepted %s", urls[i]);
		assert_true(strlen(http_client_error(c->c_hc)) > 0);
	}
	o = opts(c, "GET", "/");
	for (i = 0; i < sizeof(bad_fields) / sizeof(bad_fields[0]); i++) {
		o.ro_headers = &bad_fields[i];
		o.ro_nheaders = 1;
		assert_null(http_request_start(c->c_hc, &o, &cbs, &r));
	}
	o = opts(c, "GE T", "/");
	assert_null(http_request_start(c->c_hc, &o, &cbs, &r));
	assert_string_equal(http_client_error(c->c_hc), "bad request method");
	o = opts(c, "GET", "/");
	o.ro_idle_timeout_ms = -1;
	assert_null(http_request_start(c->c_hc, &o, &cbs, &r));
	run_for(c, 20);
	assert_int_equal(r.r_ndone, 0);
	assert_int_equal(c->c_srv.ts_naccepted, 0);
}

/*
 * TLS, against a certificate made for this run.
 */
static int
tls_group_setup(void **state)
{
	char	 cmd[1024];

	(void)state;
	if (mkdtemp(tls_dir) == NULL)
		return -1;
	snprintf(tls_cert, sizeof(tls_cert), "%s/cert.pem", tls_dir);
	snprintf(tls_key, sizeof(tls_key), "%s/key.pem", tls_dir);
	snprintf(cmd, sizeof(cmd), "openssl req -x509 -newkey ec -pkeyopt "
	    "ec_paramgen_curve:prime256v1 -nodes -keyout %s -out %s -days 2 "
	    "-subj /CN=localhost -addext "
	    "subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null",
	    tls_key, tls_cert);
	return system(cmd) == 0 ? 0 : -1;
}

static int
tls_group_teardown(void **state)
{
	(void)state;
	unlink(tls_cert);
	unlink(tls_key);
	rmdir(tls_dir);
	return 0;
}

/* Whatever the name, connect to the test server. */
static void
loopback_connect(const char *host, uint16_t port, http_connected_fn done,
    void *done_arg, void *arg)
{
	struct tctx	*c = arg;

	snprintf(c->c_host_asked, sizeof(c->c_host_asked), "%s", host);
	c->c_direct.hd_base = c->c_base;
	c->c_direct.hd_timeout_ms = 2000;
	http_connect_direct("127.0.0.1", port, done, done_arg, &c->c_direct);
}

/* A fresh TLS server answering with script s, and a client for it. */
static void
tls_setup(struct tctx *c, const char *ca_file, const struct tresp *s,
    size_t n)
{
	struct http_client_opts co;

	tsrv_free(&c->c_srv);
	tsrv_init(&c->c_srv, c->c_base, 1);
	c->c_srv.ts_script = s;
	c->c_srv.ts_nscript = n;
	memset(&co, 0, sizeof(co));
	co.co_ca_file = ca_file;
	co.co_connect = loopback_connect;
	co.co_connect_arg = c;
	http_client_free(c->c_hc);
	c->c_hc = http_client_new(c->c_base, &co);
	assert_non_null(c->c_hc);
}

/* GET / from the TLS server, by the name host. */
static void
tls_get(struct tctx *c, const char *host, struct tres *r)
{
	struct http_request_opts	 o;
	char				 url[128];

	memset(&o, 0, sizeof(o));
	o.ro_method = "GET";
	snprintf(url, sizeof(url), "https://%s:%u/", host, c->c_srv.ts_port);
	o.ro_url = url;
	memset(r, 0, sizeof(*r));
	start(c, &o, r);
	run_until(c, &r->r_ndone, 1);
}

static void
tls_request(struct tctx *c, const char *ca_file, const char *host,
    struct tres *r)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecret", 0, 0,
		  0, 0 },
	};

	tls_setup(c, ca_file, s, sizeof(s) / sizeof(s[0]));
	tls_get(c, host, r);
}

static void
test_tls(void **state)
{
	struct tctx	*c = *state;
	struct tres	 r;

	tls_request(c, NULL, "localhost", &r);
	expect_err(&r, HTTP_ERR_TLS, "certificate verify failed: "
	    "self-signed certificate (host localhost)");
	tls_request(c, tls_cert, "wrong.example", &r);
	expect_err(&r, HTTP_ERR_TLS, "certificate verify failed: "
	    "hostname mismatch (host wrong.example)");
	assert_string_equal(c->c_host_asked, "wrong.example");
	tls_request(c, tls_cert, "localhost", &r);
	expect_ok(&r, 200, "secret");
	tls_request(c, tls_cert, "127.0.0.1", &r);
	expect_ok(&r, 200, "secret");
	/* Not a CA file at all: refused when the client is made. */
	assert_null(http_client_new(c->c_base, &(struct http_client_opts){
	    .co_ca_file = "/nonexistent/ca.pem" }));
}

/*
 * A server that closes after each answer: the next connection to the
 * same host resumes the session it gave, one to another name for the
 * same server does not; after a TLS error from the host, its session is
 * not offered again.
 */
static void
test_tls_resumption(void **state)
{
	static const struct tresp s[] = {
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", 0, 0, 1, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", 0, 0, 1, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nc", 0, 0, 1, 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nd", 0, 0, 1, 0 },
		{ "not a TLS record\r\n", 0, 0, 0, TR_RAW },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nf", 0, 0, 1, 0 },
	};
	static const char *const hosts[] = { "localhost", "localhost",
	    "127.0.0.1", "localhost", "localhost", "localhost" };
	static const int resumed[] = { 0, 1, 1, 2, 3, 3 };
	struct tctx	*c = *state;
	struct tres	 r;
	char		 body[2];
	size_t		 i;

	tls_setup(c, tls_cert, s, sizeof(s) / sizeof(s[0]));
	for (i = 0; i < 6; i++) {
		tls_get(c, hosts[i], &r);
		snprintf(body, sizeof(body), "%c", 'a' + (int)i);
		if (i == 4)
			assert_int_equal(r.r_err, HTTP_ERR_TLS);
		else
			expect_ok(&r, 200, body);
		run_until(c, &c->c_srv.ts_nclosed, (int)i + 1);
		assert_int_equal(c->c_srv.ts_naccepted, (int)i + 1);
		assert_int_equal(c->c_srv.ts_nresumed, resumed[i]);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_content_length, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_chunked_every_split,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_until_close, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_streaming, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_protocol_errors, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_bad_status_line, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_header_limits, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_closed_early, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_connection_refused,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_timeout, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_read_timeouts, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keepalive_reuse, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_retry_idempotent_only,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_keeps_a_burst, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_pool_lifecycle, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_bad_options, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_tls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tls_resumption, setup,
		    teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, tls_group_setup,
	    tls_group_teardown);
}
