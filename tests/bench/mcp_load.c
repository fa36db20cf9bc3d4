/*
 * A load generator for MCP tools/call, fast enough that the thing measured,
 * not the client, is the limit.  One thread, one epoll loop, plain sockets.
 *
 *	mcp_load http [OPTIONS] http://HOST:PORT/PATH
 *	mcp_load stdio [OPTIONS] -- COMMAND [ARG...]
 *	mcp_load respond PORT
 *	mcp_load relay PORT -- COMMAND [ARG...]
 *
 * http: C connections (HTTP/1.1 keep-alive), each its own MCP client.  With
 * -e 2025 (the default) a connection opens a 2025-06-18 session
 * (initialize, notifications/initialized; Mcp-Session-Id and
 * MCP-Protocol-Version on every later request) and then sends one
 * tools/call after another, the next as soon as the last is answered.
 * With -e 2026 there is no session: every call carries the 2026-07-28
 * _meta, MCP-Protocol-Version, Mcp-Method and Mcp-Name.  Requests accept
 * application/json and text/event-stream, as a client must; answers in
 * either form, with Content-Length, chunked or up to the close, are read
 * whole.  A call counts when its answer is a 200 whose body has a
 * "result" without "isError": true; anything else (a status, a JSON-RPC
 * error, a reset, a call unanswered for 10 s) is an error.  -k FILE gives
 * Bearer keys, one a line, connection i using line i modulo their number.
 * Sessions are ended with DELETE at the end.
 *
 * stdio: COMMAND is the MCP server itself, on pipes: initialize, then C
 * calls in flight at all times on the one pipe (pipelined: each answer
 * read is replaced by a new call, the replacements of one read written
 * together).  This is the floor: what a client pays with no HTTP and no
 * gateway at all.
 *
 * respond: a trivial HTTP responder (one thread, epoll) that answers every
 * request with a canned tools/call result and a session id, for measuring
 * a load generator's own ceiling.
 *
 * relay: a null gateway (one thread, epoll) in front of COMMAND, an MCP
 * server on stdio that answers in order: each POSTed call goes to the
 * server as it came and the server's next line is its answer; initialize,
 * notifications and DELETE are answered at once.  No parsing, policy or
 * audit: the least that a stdio-to-HTTP gateway on this machine must
 * spend, and so the most calls per second any could answer.
 *
 * Every mode but respond warms up for -w seconds (default 1), then measures
 * for -d seconds (default 5): the calls answered in that window, and the
 * latency of each (from writing the request to having the whole answer),
 * printed as one JSON object (errors likewise counted in the window):
 *
 *	{"calls":N,"errors":N,"seconds":S,"calls_per_s":R,"p50_ms":..,
 *	 "p90_ms":..,"p99_ms":..,"max_ms":..,"sent_total":N,"ok_total":N,
 *	 "first_error":"..."}
 *
 * sent_total counts every call sent, warm-up and those still unanswered
 * at the end included (what an audit trail should hold), ok_total every
 * good answer, errors_total every error, warm-up included.
 *
 * http -r RATE paces the calls: RATE calls a second over all connections
 * together, each connection sending its next call 1/(RATE/C) seconds after
 * its last was sent (or at once if its answer came later than that; no
 * catching up), the connections' schedules spread evenly over that
 * interval.  Without -r each connection calls flat out.  -p SECONDS prints
 * a progress line to stderr every SECONDS, from the start:
 *
 *	{"t":S,"sent_total":N,"ok_total":N,"errors_total":N,"in_flight":N}
 *
 * Options: -c N connections or calls in flight (1); -d SECONDS; -w
 * SECONDS; -e 2025|2026; -t TOOL (echo); -s BYTES of message (16); -k FILE;
 * -r CALLS/S (http); -p SECONDS (http).
 */
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define CALL_TIMEOUT 10.0	/* seconds an answer may take */
#define MAX_CONNS 4096

static int conns_n = 1;
static double duration = 5, warmup = 1;
static int era = 2025;
static const char *tool = "echo";
static char *message;		/* the echo argument */
static char **keys;
static int keys_n;
static double rate;		/* calls/s over all connections; 0: flat out */
static double progress;		/* seconds between progress lines; 0: none */

/* ---- time and results ---------------------------------------------- */

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double t_measure, t_end;	/* the window */
static double *lat;		/* latencies in the window, seconds */
static size_t lat_n, lat_cap;
static long errors;
static long sent_total, ok_total, errors_total;	/* warm-up and all */
static char first_error[200];

static void
fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static void *
xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (p == NULL)
		fail("out of memory");
	return p;
}

static void
record_error(double t, const char *fmt, ...)
{
	va_list ap;

	errors_total++;
	if (t < t_measure || t > t_end)
		return;
	errors++;
	if (first_error[0] == '\0') {
		va_start(ap, fmt);
		vsnprintf(first_error, sizeof first_error, fmt, ap);
		va_end(ap);
	}
}

static void
record_call(double sent, double done)
{
	ok_total++;
	if (done < t_measure || done > t_end)
		return;
	if (lat_n == lat_cap) {
		lat_cap = lat_cap ? lat_cap * 2 : 65536;
		lat = xrealloc(lat, lat_cap * sizeof *lat);
	}
	lat[lat_n++] = done - sent;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double
pct(double p)
{
	size_t i;

	if (lat_n == 0)
		return 0;
	i = (size_t)(p / 100 * lat_n);
	if (i >= lat_n)
		i = lat_n - 1;
	return lat[i] * 1000;
}

static void
report(void)
{
	const char *s;

	qsort(lat, lat_n, sizeof *lat, cmp_double);
	printf("{\"calls\":%zu,\"errors\":%ld,\"seconds\":%.3f,"
	    "\"calls_per_s\":%.1f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,"
	    "\"p99_ms\":%.3f,\"max_ms\":%.3f,\"sent_total\":%ld,"
	    "\"ok_total\":%ld,\"errors_total\":%ld,\"first_error\":\"",
	    lat_n, errors, duration, lat_n / duration, pct(50), pct(90),
	    pct(99), lat_n ? lat[lat_n - 1] * 1000 : 0.0, sent_total,
	    ok_total, errors_total);
	for (s = first_error; *s; s++)
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f)
			putchar(*s);
	printf("\"}\n");
	fflush(stdout);
}

/* ---- JSON, just enough ------------------------------------------------ */

/* The value after "KEY": in TEXT (LEN bytes), or NULL. */
static const char *
json_value(const char *text, size_t len, const char *key)
{
	size_t kl = strlen(key);
	const char *p = text, *end = text + len;

	while ((p = memmem(p, end - p, key, kl)) != NULL) {
		const char *q = p + kl;

		if (p > text && p[-1] == '"' && q < end && *q == '"') {
			for (q++; q < end && (*q == ' ' || *q == '\t'); q++)
				;
			if (q < end && *q == ':') {
				for (q++; q < end && isspace((unsigned char)*q);
				    q++)
					;
				return q;
			}
		}
		p += kl;
	}
	return NULL;
}

/* 1 when BODY is the answer to call ID, 0 with WHY set otherwise. */
static int
good_answer(const char *body, size_t len, long id, const char **why)
{
	const char *v, *end = body + len;

	if (json_value(body, len, "result") == NULL) {
		*why = json_value(body, len, "error") ? "JSON-RPC error" :
		    "no result";
		return 0;
	}
	v = json_value(body, len, "isError");
	if (v != NULL && end - v >= 4 && memcmp(v, "true", 4) == 0) {
		*why = "isError result";
		return 0;
	}
	if (id >= 0) {
		v = json_value(body, len, "id");
		if (v == NULL || strtol(v, NULL, 10) != id) {
			*why = "answer to another id";
			return 0;
		}
	}
	return 1;
}

/* ---- request bodies ------------------------------------------------ */

static char *
call_body(long id, size_t *len)
{
	static char buf[65536 + 1024];
	int n;

	if (era == 2026)
		n = snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%ld,"
		    "\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
		    "\"arguments\":{\"message\":\"%s\"},\"_meta\":{"
		    "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
		    "\"io.modelcontextprotocol/clientInfo\":{\"name\":"
		    "\"mcp_load\",\"version\":\"1\"},"
		    "\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
		    id, tool, message);
	else
		n = snprintf(buf, sizeof buf, "{\"jsonrpc\":\"2.0\",\"id\":%ld,"
		    "\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
		    "\"arguments\":{\"message\":\"%s\"}}}", id, tool, message);
	*len = n;
	return buf;
}

static const char INIT_BODY[] = "{\"jsonrpc\":\"2.0\",\"id\":0,"
    "\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
    "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":"
    "\"mcp_load\",\"version\":\"1\"}}}";
static const char INITIALIZED_BODY[] = "{\"jsonrpc\":\"2.0\","
    "\"method\":\"notifications/initialized\"}";

/* ---- HTTP client ----------------------------------------------------- */

enum cstate { C_INIT, C_INITIALIZED, C_CALL };

struct conn {
	int fd, index;
	enum cstate state;
	char session[256];
	char *out;		/* request being written */
	size_t out_len, out_off;
	char *in;		/* answer being read */
	size_t in_len, in_cap;
	long id;		/* of the call in flight */
	double sent;		/* when its request was written, 0 if none */
	int busy;
	double next_at;		/* -r: when its next call is due */
	int waiting;		/* -r: in its session, its next call not due */
};

static struct sockaddr_storage addr;
static socklen_t addr_len;
static char host_hdr[300], path[2048];
static int ep;
static struct conn *conns;

static void
set_nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int
dial(void)
{
	int fd, one = 1;

	fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		fail("socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&addr, addr_len) < 0) {
		close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	set_nonblock(fd);
	return fd;
}

static void
conn_open(struct conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN };

	while ((c->fd = dial()) < 0) {
		record_error(now(), "connect: %s", strerror(errno));
		usleep(10000);
	}
	ev.data.ptr = c;
	epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
}

static void
conn_close(struct conn *c)
{
	if (c->fd >= 0) {
		epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
	}
	c->fd = -1;
	c->in_len = 0;
	c->busy = 0;
}

static void
conn_flush(struct conn *c)
{
	struct epoll_event ev;

	while (c->out_off < c->out_len) {
		ssize_t n = write(c->fd, c->out + c->out_off,
		    c->out_len - c->out_off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			ev.events = EPOLLIN | EPOLLOUT;
			ev.data.ptr = c;
			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
			return;
		}
		if (n < 0)
			return;		/* the read side will see it */
		c->out_off += n;
	}
	ev.events = EPOLLIN;
	ev.data.ptr = c;
	epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void
conn_send(struct conn *c, const char *method, const char *body, size_t len,
    const char *mcp_method)
{
	static char head[4096];
	size_t hl;
	int n;

	n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: %s\r\n"
	    "Content-Type: application/json\r\n"
	    "Accept: application/json, text/event-stream\r\n"
	    "Content-Length: %zu\r\n", method, path, host_hdr, len);
	if (keys_n)
		n += snprintf(head + n, sizeof head - n,
		    "Authorization: Bearer %s\r\n",
		    keys[c->index % keys_n]);
	if (era == 2025 && c->session[0])
		n += snprintf(head + n, sizeof head - n, "Mcp-Session-Id: %s\r\n"
		    "MCP-Protocol-Version: 2025-06-18\r\n", c->session);
	if (era == 2026 && mcp_method)
		n += snprintf(head + n, sizeof head - n,
		    "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: %s\r\n"
		    "Mcp-Name: %s\r\n", mcp_method, tool);
	n += snprintf(head + n, sizeof head - n, "\r\n");
	hl = n;
	c->out = xrealloc(c->out, hl + len);
	memcpy(c->out, head, hl);
	memcpy(c->out + hl, body, len);
	c->out_len = hl + len;
	c->out_off = 0;
	c->in_len = 0;
	c->busy = 1;
	c->sent = now();
	conn_flush(c);
}

static void
send_call(struct conn *c)
{
	size_t len;
	char *body;

	c->id++;
	sent_total++;
	c->waiting = 0;
	body = call_body(c->id, &len);
	conn_send(c, "POST", body, len, "tools/call");
}

/* Send C's next call now or, with -r, once it is due. */
static void
next_call(struct conn *c, double t)
{
	if (rate > 0) {
		if (c->next_at == 0)	/* the first: spread the schedules */
			c->next_at = t + c->index / rate;
		else
			c->next_at += conns_n / rate;
		if (c->next_at < t)
			c->next_at = t;
		if (c->next_at > t) {
			c->waiting = 1;
			return;
		}
	}
	send_call(c);
}

static void
start(struct conn *c)
{
	if (era == 2025 && c->session[0] == '\0') {
		c->state = C_INIT;
		conn_send(c, "POST", INIT_BODY, sizeof INIT_BODY - 1, NULL);
	} else {
		c->state = C_CALL;
		next_call(c, now());
	}
}

/*
 * Parse C's answer so far.  Returns 0 while incomplete, 1 when whole (the
 * status, the body decoded, whether the server will close), -1 on a
 * framing error.  EOF says the peer has closed.
 */
struct answer {
	int status, close;
	char *body;
	size_t body_len;
};

static int
parse_answer(struct conn *c, int eof, struct answer *a)
{
	char *p = c->in, *end, *line, *hend;
	long clen = -1;
	int chunked = 0;

	hend = memmem(p, c->in_len, "\r\n\r\n", 4);
	if (hend == NULL)
		return eof ? -1 : 0;
	memset(a, 0, sizeof *a);
	if (sscanf(p, "HTTP/1.%*d %d", &a->status) != 1)
		return -1;
	end = hend + 4;
	for (line = (char *)memchr(p, '\n', hend - p) + 1; line < hend;) {
		char *nl = memchr(line, '\n', hend + 2 - line);
		size_t ll = nl - line;

		if (ll > 15 && strncasecmp(line, "Content-Length:", 15) == 0)
			clen = strtol(line + 15, NULL, 10);
		else if (ll > 18 &&
		    strncasecmp(line, "Transfer-Encoding:", 18) == 0 &&
		    memmem(line, ll, "chunked", 7))
			chunked = 1;
		else if (ll > 11 && strncasecmp(line, "Connection:", 11) == 0 &&
		    memmem(line, ll, "close", 5))
			a->close = 1;
		else if (ll > 15 && strncasecmp(line, "Mcp-Session-Id:", 15) == 0) {
			char *v = line + 15;
			size_t vl;

			while (*v == ' ')
				v++;
			vl = nl - v;
			while (vl && (v[vl - 1] == '\r' || v[vl - 1] == ' '))
				vl--;
			if (vl < sizeof c->session) {
				memcpy(c->session, v, vl);
				c->session[vl] = '\0';
			}
		}
		line = nl + 1;
	}
	if (chunked) {
		/* decode in place into a copy; bodies are small */
		char *q = end, *stop = c->in + c->in_len, *out;
		size_t ol = 0;

		out = xrealloc(NULL, stop - q + 1);
		for (;;) {
			char *nl = memmem(q, stop - q, "\r\n", 2);
			long n;

			if (nl == NULL) {
				free(out);
				return eof ? -1 : 0;
			}
			n = strtol(q, NULL, 16);
			q = nl + 2;
			if (n == 0) {
				/* trailers, then an empty line */
				while ((nl = memmem(q, stop - q, "\r\n", 2)) &&
				    nl != q)
					q = nl + 2;
				if (nl == NULL) {
					free(out);
					return eof ? -1 : 0;
				}
				break;
			}
			if (stop - q < n + 2) {
				free(out);
				return eof ? -1 : 0;
			}
			memcpy(out + ol, q, n);
			ol += n;
			q += n + 2;
		}
		a->body = out;
		a->body_len = ol;
		return 1;
	}
	if (clen < 0 && (a->status == 204 || a->status == 304 ||
	    a->status / 100 == 1))
		clen = 0;
	if (clen < 0) {		/* up to the close */
		if (!eof)
			return 0;
		clen = c->in + c->in_len - end;
		a->close = 1;
	}
	if (c->in + c->in_len - end < clen)
		return eof ? -1 : 0;
	a->body = xrealloc(NULL, clen + 1);
	memcpy(a->body, end, clen);
	a->body_len = clen;
	return 1;
}

static int phase_done;

static void
answered(struct conn *c, struct answer *a)
{
	double t = now();
	const char *why;

	c->busy = 0;
	if (a->close && !phase_done) {
		conn_close(c);
		conn_open(c);
	}
	switch (c->state) {
	case C_INIT:
		if (a->status != 200 || c->session[0] == '\0')
			fail("initialize: HTTP %d, %s: %.*s", a->status,
			    c->session[0] ? "session" : "no session id",
			    (int)(a->body_len > 300 ? 300 : a->body_len),
			    a->body);
		c->state = C_INITIALIZED;
		conn_send(c, "POST", INITIALIZED_BODY,
		    sizeof INITIALIZED_BODY - 1, NULL);
		return;
	case C_INITIALIZED:
		if (a->status / 100 != 2)
			fail("notifications/initialized: HTTP %d", a->status);
		c->state = C_CALL;
		break;
	case C_CALL:
		if (a->status != 200)
			record_error(t, "HTTP %d: %.*s", a->status,
			    (int)(a->body_len > 120 ? 120 : a->body_len),
			    a->body);
		else if (!good_answer(a->body, a->body_len, c->id, &why))
			record_error(t, "%s: %.*s", why,
			    (int)(a->body_len > 120 ? 120 : a->body_len),
			    a->body);
		else
			record_call(c->sent, t);
		break;
	}
	if (!phase_done)
		next_call(c, t);
}

static void
conn_read(struct conn *c)
{
	struct answer a;
	int eof = 0, r;

	for (;;) {
		ssize_t n;

		if (c->in_cap - c->in_len < 16384) {
			c->in_cap = c->in_cap ? c->in_cap * 2 : 65536;
			c->in = xrealloc(c->in, c->in_cap);
		}
		n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1);
		if (n > 0) {
			c->in_len += n;
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EINTR))
			eof = 1;
		if (n < 0 && errno == EINTR)
			continue;
		break;
	}
	c->in[c->in_len] = '\0';
	if (!c->busy) {
		c->in_len = 0;
		if (eof) {	/* an idle connection closed by the server */
			conn_close(c);
			conn_open(c);
			if (!phase_done && !c->waiting)
				start(c);
		}
		return;
	}
	r = parse_answer(c, eof, &a);
	if (r == 0)
		return;
	if (r < 0) {
		if (c->state != C_CALL)
			fail("connection closed during the handshake");
		record_error(now(), "connection closed or bad framing");
		conn_close(c);
		conn_open(c);
		if (!phase_done)
			start(c);
		return;
	}
	if (eof)
		a.close = 1;
	answered(c, &a);
	free(a.body);
}

static void
parse_url(const char *url)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	char host[256], port[16] = "80";
	const char *p, *slash, *colon;
	int e;

	if (strncmp(url, "http://", 7) != 0)
		fail("%s: only http:// URLs", url);
	p = url + 7;
	slash = strchr(p, '/');
	if (slash == NULL)
		slash = p + strlen(p);
	snprintf(host_hdr, sizeof host_hdr, "%.*s", (int)(slash - p), p);
	snprintf(path, sizeof path, "%s", *slash ? slash : "/");
	colon = memchr(p, ':', slash - p);
	if (colon) {
		snprintf(host, sizeof host, "%.*s", (int)(colon - p), p);
		snprintf(port, sizeof port, "%.*s", (int)(slash - colon - 1),
		    colon + 1);
	} else
		snprintf(host, sizeof host, "%.*s", (int)(slash - p), p);
	if ((e = getaddrinfo(host, port, &hints, &res)) != 0)
		fail("%s: %s", host, gai_strerror(e));
	memcpy(&addr, res->ai_addr, res->ai_addrlen);
	addr_len = res->ai_addrlen;
	freeaddrinfo(res);
}

/* DELETE each session: best effort, on a new connection each. */
static void
end_sessions(void)
{
	struct timeval tv = { .tv_sec = 2 };
	char req[4096], buf[4096];
	int i, fd, n;

	if (era != 2025)
		return;
	for (i = 0; i < conns_n; i++) {
		if (conns[i].session[0] == '\0' || (fd = dial()) < 0)
			continue;
		n = snprintf(req, sizeof req, "DELETE %s HTTP/1.1\r\nHost: %s\r\n"
		    "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-06-18\r\n"
		    "%s%s%sConnection: close\r\nContent-Length: 0\r\n\r\n", path,
		    host_hdr, conns[i].session, keys_n ? "Authorization: Bearer " :
		    "", keys_n ? keys[i % keys_n] : "", keys_n ? "\r\n" : "");
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		if (write(fd, req, n) == n)
			while (read(fd, buf, sizeof buf) > 0)
				;
		close(fd);
	}
}

static void
check_timeouts(double t)
{
	int i;

	for (i = 0; i < conns_n; i++) {
		struct conn *c = &conns[i];

		if (c->busy && t - c->sent > CALL_TIMEOUT) {
			if (c->state != C_CALL)
				fail("no answer to the handshake in %.0f s",
				    CALL_TIMEOUT);
			record_error(t, "no answer in %.0f s", CALL_TIMEOUT);
			conn_close(c);
			conn_open(c);
			start(c);
		}
	}
}

/* Milliseconds epoll may sleep: 10, or less when a paced call is due. */
static int
wait_ms(double t)
{
	double due = t + 0.010;
	int i;

	if (rate > 0)
		for (i = 0; i < conns_n; i++)
			if (conns[i].waiting && conns[i].next_at < due)
				due = conns[i].next_at;
	return due <= t ? 0 : (int)((due - t) * 1000 + 0.999);
}

static void
send_due(double t)
{
	int i;

	for (i = 0; i < conns_n; i++)
		if (conns[i].waiting && conns[i].next_at <= t &&
		    conns[i].fd >= 0)
			send_call(&conns[i]);
}

static void
print_progress(double t, double t0)
{
	int i, busy = 0;

	for (i = 0; i < conns_n; i++)
		busy += conns[i].busy && conns[i].state == C_CALL;
	fprintf(stderr, "{\"t\":%.1f,\"sent_total\":%ld,\"ok_total\":%ld,"
	    "\"errors_total\":%ld,\"in_flight\":%d}\n", t - t0, sent_total,
	    ok_total, errors_total, busy);
	fflush(stderr);
}

static int
run_http(const char *url)
{
	struct epoll_event evs[256];
	double t, t0, last_check = 0, next_progress;
	int i, n, ready;

	parse_url(url);
	ep = epoll_create1(EPOLL_CLOEXEC);
	conns = calloc(conns_n, sizeof *conns);
	if (conns == NULL)
		fail("out of memory");
	/* nothing counts until every connection is in its session */
	t_measure = t_end = 1e300;
	t0 = now();
	next_progress = t0 + progress;
	for (i = 0; i < conns_n; i++) {
		conns[i].index = i;
		conns[i].fd = -1;
		conn_open(&conns[i]);
		start(&conns[i]);
	}
	for (;;) {
		n = epoll_wait(ep, evs, 256, wait_ms(now()));
		for (i = 0; i < n; i++)
			conn_read(evs[i].data.ptr);
		for (i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if ((evs[i].events & EPOLLOUT) && c->fd >= 0)
				conn_flush(c);
		}
		t = now();
		if (rate > 0)
			send_due(t);
		if (progress > 0 && t >= next_progress) {
			print_progress(t, t0);
			next_progress += progress;
		}
		if (t_measure > 1e299) {
			for (ready = 0, i = 0; i < conns_n; i++)
				ready += conns[i].state == C_CALL;
			if (ready == conns_n) {
				t_measure = t + warmup;
				t_end = t_measure + duration;
			}
		}
		if (t >= t_end)
			break;
		if (t - last_check > 0.5) {
			check_timeouts(t);
			last_check = t;
		}
	}
	phase_done = 1;
	for (i = 0; i < conns_n; i++)
		conn_close(&conns[i]);
	report();
	end_sessions();
	return 0;
}

/* ---- stdio: the floor ------------------------------------------------- */

/* COMMAND on pipes: we write to[1], read from[0]. */
static pid_t
spawn_backend(char **argv, int to[2], int from[2])
{
	pid_t pid;

	if (pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0)
		fail("pipe: %s", strerror(errno));
	if ((pid = fork()) < 0)
		fail("fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(to[0], 0);
		dup2(from[1], 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(to[0]);
	close(from[1]);
	return pid;
}

static int
run_stdio(char **argv)
{
	int to[2], from[2];
	pid_t pid;
	char *in = NULL, *out = NULL;
	size_t in_len = 0, in_cap = 0, out_len, out_cap = 0;
	double *sent;
	long next_id = 1;
	int handshake = 1, i;

	pid = spawn_backend(argv, to, from);
	/* calls in flight have ids next_id - conns_n .. next_id - 1 */
	sent = calloc(conns_n, sizeof *sent);
	if (dprintf(to[1], "%s\n", INIT_BODY) < 0)
		fail("write: %s", strerror(errno));
	t_measure = t_end = 1e300;
	for (;;) {
		ssize_t n;
		char *p, *nl;
		double t;

		if (in_cap - in_len < 65536) {
			in_cap = in_cap ? in_cap * 2 : 1 << 20;
			in = xrealloc(in, in_cap);
		}
		n = read(from[0], in + in_len, in_cap - in_len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail("the server closed its output");
		in_len += n;
		t = now();
		out_len = 0;
		p = in;
		while ((nl = memchr(p, '\n', in + in_len - p)) != NULL) {
			size_t need;

			if (handshake) {
				handshake = 0;
				if (!json_value(p, nl - p, "result"))
					fail("initialize: %.*s", (int)(nl - p), p);
				need = 0;
				out_len = snprintf(NULL, 0, "%s\n",
				    INITIALIZED_BODY);
				if (out_cap < out_len + 1)
					out = xrealloc(out, out_cap = 1 << 16);
				snprintf(out, out_cap, "%s\n", INITIALIZED_BODY);
				for (i = 0; i < conns_n; i++) {
					size_t bl;
					char *b = call_body(next_id, &bl);

					need = out_len + bl + 1;
					if (need > out_cap)
						out = xrealloc(out, out_cap =
						    need * 2);
					memcpy(out + out_len, b, bl);
					out[out_len + bl] = '\n';
					out_len = need;
					sent[next_id % conns_n] = t;
					next_id++;
				}
				t_measure = t + warmup;
				t_end = t_measure + duration;
			} else {
				const char *v = json_value(p, nl - p, "id");
				long id = v ? strtol(v, NULL, 10) : -1;
				const char *why;
				size_t bl;
				char *b;

				if (id < next_id - conns_n || id >= next_id)
					record_error(t, "unexpected id %ld", id);
				else if (!good_answer(p, nl - p, id, &why))
					record_error(t, "%s: %.*s", why,
					    (int)(nl - p > 120 ? 120 : nl - p), p);
				else
					record_call(sent[id % conns_n], t);
				b = call_body(next_id, &bl);
				need = out_len + bl + 1;
				if (need > out_cap)
					out = xrealloc(out, out_cap = need * 2);
				memcpy(out + out_len, b, bl);
				out[out_len + bl] = '\n';
				out_len = need;
				sent[next_id % conns_n] = now();
				next_id++;
			}
			p = nl + 1;
		}
		memmove(in, p, in + in_len - p);
		in_len = in + in_len - p;
		if (t >= t_end)
			break;
		sent_total = next_id - 1;
		for (size_t off = 0; off < out_len;) {
			n = write(to[1], out + off, out_len - off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				fail("write: %s", strerror(errno));
			off += n;
		}
	}
	report();
	close(to[1]);
	close(from[0]);
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	return 0;
}

/* ---- servers: the trivial responder and the null relay ---------------- */

/*
 * A client of ours.  closing: its last request asked for Connection:
 * close; waiting: the relay owes it an answer; gone: closed, to be freed
 * once nothing refers to it (no answer owed, no event of this batch).
 */
struct rconn {
	int fd;
	char *in;
	size_t len, cap;
	int waiting, closing, gone;
	struct rconn *next_gone;
};

static struct rconn *graveyard;

static int
serve_listen(const char *port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct epoll_event ev;
	int lfd, one = 1;

	sin.sin_port = htons(atoi(port));
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(lfd, (struct sockaddr *)&sin, sizeof sin) < 0 ||
	    listen(lfd, 1024) < 0)
		fail("listen on %s: %s", port, strerror(errno));
	ep = epoll_create1(EPOLL_CLOEXEC);
	ev.events = EPOLLIN;
	ev.data.ptr = NULL;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	return lfd;
}

static void
serve_accept(int lfd)
{
	struct epoll_event ev;
	struct rconn *r;
	int fd, one = 1;

	while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK |
	    SOCK_CLOEXEC)) >= 0) {
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		r = calloc(1, sizeof *r);
		r->fd = fd;
		ev.events = EPOLLIN;
		ev.data.ptr = r;
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	}
}

/* The client is gone, or done: closed now, freed by serve_bury. */
static void
rconn_end(struct rconn *r)
{
	if (r->gone)
		return;
	close(r->fd);
	r->fd = -1;
	r->gone = 1;
	r->next_gone = graveyard;
	graveyard = r;
}

/* After a batch of events: free the closed that are owed nothing. */
static void
serve_bury(void)
{
	struct rconn **pp = &graveyard, *r;

	while ((r = *pp) != NULL) {
		if (r->waiting) {
			pp = &r->next_gone;
			continue;
		}
		*pp = r->next_gone;
		free(r->in);
		free(r);
	}
}

/* Read what there is: 0, or -1 when the client went. */
static int
rconn_fill(struct rconn *r)
{
	ssize_t got;

	if (r->gone)
		return -1;
	for (;;) {
		if (r->cap - r->len < 16384)
			r->in = xrealloc(r->in, r->cap = r->cap ? r->cap * 2 :
			    65536);
		got = read(r->fd, r->in + r->len, r->cap - r->len - 1);
		if (got > 0) {
			r->len += got;
			continue;
		}
		if (got < 0 && errno == EAGAIN)
			return 0;
		rconn_end(r);
		return -1;
	}
}

/*
 * The first whole request in r's buffer: its length (0: none yet), its
 * method's first letter and its body.
 */
static size_t
rconn_request(struct rconn *r, char *method, const char **body, long *blen)
{
	char *hend, *cl;
	long clen = 0;
	size_t whole;

	if (r->gone || r->len == 0 || (hend = memmem(r->in, r->len,
	    "\r\n\r\n", 4)) == NULL)
		return 0;
	r->in[r->len] = '\0';	/* room kept by rconn_fill */
	/* the headers alone, as one string: not the body, nor what follows */
	hend[2] = '\0';
	if ((cl = strcasestr(r->in, "\r\nContent-Length:")) != NULL)
		clen = strtol(cl + 17, NULL, 10);
	r->closing = strcasestr(r->in, "\r\nConnection: close\r\n") != NULL;
	hend[2] = '\r';
	if (clen < 0 || clen > 16 * 1024 * 1024) {
		rconn_end(r);		/* not a request we can frame */
		return 0;
	}
	whole = hend + 4 - r->in + clen;
	if (r->len < whole)
		return 0;
	*method = r->in[0];
	*body = hend + 4;
	*blen = clen;
	return whole;
}

static void
rconn_consume(struct rconn *r, size_t whole)
{
	memmove(r->in, r->in + whole, r->len - whole);
	r->len -= whole;
}

/* Write all of iov, waiting for room when the socket or pipe is full. */
static int
write_all(int fd, struct iovec *iov, int n)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	ssize_t w;

	while (n > 0) {
		if ((w = writev(fd, iov, n)) < 0) {
			if (errno != EAGAIN && errno != EINTR)
				return -1;
			(void)poll(&pfd, 1, 1000);
			continue;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= w;
		}
	}
	return 0;
}

/*
 * An answer: status line, a session id, BODY as JSON (none when blen 0);
 * then the connection ends if the request asked for that.
 */
static void
reply(struct rconn *r, const char *status, const char *body, size_t blen)
{
	char head[256];
	struct iovec iov[2];

	iov[0].iov_len = snprintf(head, sizeof head, "HTTP/1.1 %s\r\n"
	    "Content-Type: application/json\r\nMcp-Session-Id: s\r\n"
	    "Content-Length: %zu\r\n\r\n", status, blen);
	iov[0].iov_base = head;
	iov[1].iov_base = (void *)body;
	iov[1].iov_len = blen;
	/* a client that cannot take it is gone: its read sees the close */
	if (write_all(r->fd, iov, 2) == -1 || r->closing)
		rconn_end(r);
}

static int
run_respond(const char *port)
{
	struct epoll_event evs[256];
	int lfd = serve_listen(port), i, n;

	for (;;) {
		n = epoll_wait(ep, evs, 256, -1);
		for (i = 0; i < n; i++) {
			struct rconn *r = evs[i].data.ptr;
			const char *b, *v;
			char body[256], m;
			size_t whole;
			long bl;
			int len;

			if (r == NULL) {
				serve_accept(lfd);
				continue;
			}
			if (rconn_fill(r) == -1)
				continue;
			/* answer every whole request in the buffer */
			while ((whole = rconn_request(r, &m, &b, &bl)) > 0) {
				v = json_value(b, bl, "id");
				len = v == NULL ? 0 : snprintf(body, sizeof body,
				    "{\"jsonrpc\":\"2.0\",\"id\":%ld,"
				    "\"result\":{\"content\":[{\"type\":"
				    "\"text\",\"text\":\"hello\"}]}}",
				    strtol(v, NULL, 10));
				rconn_consume(r, whole);
				reply(r, v ? "200 OK" : "202 Accepted", body,
				    len);
			}
		}
		serve_bury();
	}
	return 0;
}

/*
 * The relay: the least any HTTP-to-stdio gateway must do, as a yardstick
 * for the gateways measured.  Each POSTed call is written to the backend
 * as it came, one line, and the backend's next line is its answer (the
 * echo servers answer in order; an answer with another id stops the
 * relay).  initialize, notifications and DELETE are answered here.  For
 * small messages: a backend that fills its output pipe while the relay
 * waits to write a large call to its input would block both.
 */
#define RELAY_QUEUE (MAX_CONNS * 2)

static struct {
	struct rconn *r;
	char id[32];			/* the call's id, as written */
} relay_q[RELAY_QUEUE];
static size_t relay_head, relay_n;

/* The id's JSON text at v: a number or a simple string. */
static size_t
id_text(const char *v, const char *end, char *out, size_t outlen)
{
	size_t n = 0;

	while (v + n < end && n + 1 < outlen && v[n] != ',' && v[n] != '}' &&
	    !isspace((unsigned char)v[n]))
		n++;
	memcpy(out, v, n);
	out[n] = '\0';
	return n;
}

static void
relay_call(struct rconn *r, int to, const char *b, long bl)
{
	static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":"
	    "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"tools\":"
	    "{}},\"serverInfo\":{\"name\":\"relay\",\"version\":\"1\"}}}";
	struct iovec iov[2];
	const char *v, *m;
	size_t slot;

	if ((v = json_value(b, bl, "id")) == NULL) {
		reply(r, "202 Accepted", "", 0);
		return;
	}
	if ((m = json_value(b, bl, "method")) != NULL && b + bl - m >= 12 &&
	    strncmp(m, "\"initialize\"", 12) == 0) {
		reply(r, "200 OK", init, sizeof init - 1);
		return;
	}
	if (relay_n == RELAY_QUEUE)
		fail("relay: too many calls in flight");
	iov[0].iov_base = (void *)b;
	iov[0].iov_len = bl;
	iov[1].iov_base = "\n";
	iov[1].iov_len = 1;
	if (write_all(to, iov, 2) == -1)
		fail("relay: write to the backend: %s", strerror(errno));
	slot = (relay_head + relay_n++) % RELAY_QUEUE;
	relay_q[slot].r = r;
	id_text(v, b + bl, relay_q[slot].id, sizeof relay_q[slot].id);
	r->waiting = 1;
}

static void
relay_requests(struct rconn *r, int to)
{
	const char *b;
	size_t whole;
	long bl;
	char m;

	while (!r->waiting && (whole = rconn_request(r, &m, &b, &bl)) > 0) {
		if (m == 'P')
			relay_call(r, to, b, bl);
		else
			reply(r, m == 'D' ? "200 OK" : "405 Method Not "
			    "Allowed", "", 0);
		rconn_consume(r, whole);
	}
}

/* Each line from the backend answers the oldest call waiting. */
static void
relay_answers(int from, int to, char **buf, size_t *len, size_t *cap)
{
	struct rconn *r;
	const char *v;
	char *nl, *p, id[32];
	ssize_t got;

	if (*cap - *len < 65536)
		*buf = xrealloc(*buf, *cap = *cap ? *cap * 2 : 1 << 20);
	if ((got = read(from, *buf + *len, *cap - *len)) <= 0)
		fail("relay: the backend closed its output");
	*len += got;
	for (p = *buf; (nl = memchr(p, '\n', *buf + *len - p)) != NULL;
	    p = nl + 1) {
		/* an answer says result or error early; else a notice or a
		 * request of the backend's own */
		if ((v = json_value(p, nl - p, "id")) == NULL ||
		    (json_value(p, nl - p, "result") == NULL &&
		    json_value(p, nl - p, "error") == NULL))
			continue;
		id_text(v, nl, id, sizeof id);
		if (relay_n == 0 || strcmp(id, relay_q[relay_head].id) != 0)
			fail("relay: the backend answered out of order: %.*s",
			    (int)(nl - p), p);
		r = relay_q[relay_head].r;
		relay_head = (relay_head + 1) % RELAY_QUEUE;
		relay_n--;
		r->waiting = 0;
		if (r->gone)
			continue;	/* serve_bury frees it */
		reply(r, "200 OK", p, nl - p);
		relay_requests(r, to);
	}
	memmove(*buf, p, *buf + *len - p);
	*len = *buf + *len - p;
}

/* Our own session with the backend, before any client's. */
static void
relay_handshake(int from, int to)
{
	char line[65536];
	size_t len = 0;
	ssize_t got;

	if (dprintf(to, "%s\n", INIT_BODY) < 0)
		fail("relay: write to the backend: %s", strerror(errno));
	while (memchr(line, '\n', len) == NULL) {
		if (len == sizeof line ||
		    (got = read(from, line + len, sizeof line - len)) <= 0)
			fail("relay: the backend did not initialize");
		len += got;
	}
	if (json_value(line, len, "result") == NULL ||
	    (char *)memchr(line, '\n', len) != line + len - 1)
		fail("relay: the backend did not initialize: %.*s", (int)len,
		    line);
	dprintf(to, "%s\n", INITIALIZED_BODY);
}

static int
run_relay(const char *port, char **argv)
{
	static int backend_tag;
	struct epoll_event ev, evs[256];
	int to[2], from[2], lfd, i, n;
	char *buf = NULL;
	size_t len = 0, cap = 0;

	(void)spawn_backend(argv, to, from);
	relay_handshake(from[0], to[1]);
	lfd = serve_listen(port);
	ev.events = EPOLLIN;
	ev.data.ptr = &backend_tag;
	epoll_ctl(ep, EPOLL_CTL_ADD, from[0], &ev);
	for (;;) {
		n = epoll_wait(ep, evs, 256, -1);
		for (i = 0; i < n; i++) {
			struct rconn *r = evs[i].data.ptr;

			if (r == NULL)
				serve_accept(lfd);
			else if (evs[i].data.ptr == &backend_tag)
				relay_answers(from[0], to[1], &buf, &len, &cap);
			else if (rconn_fill(r) == 0)
				relay_requests(r, to[1]);
		}
		serve_bury();
	}
	return 0;
}

/* ---- main ------------------------------------------------------------ */

static void
read_keys(const char *file)
{
	char line[1024];
	FILE *f = fopen(file, "r");

	if (f == NULL)
		fail("%s: %s", file, strerror(errno));
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '\0')
			continue;
		keys = xrealloc(keys, (keys_n + 1) * sizeof *keys);
		keys[keys_n++] = strdup(line);
	}
	fclose(f);
}

static void
usage(void)
{
	fprintf(stderr, "usage: mcp_load http [-c N] [-d S] [-w S] [-e 2025|2026] "
	    "[-t TOOL] [-s BYTES] [-k KEYFILE]\n"
	    "                     [-r CALLS/S] [-p SECONDS] URL\n"
	    "       mcp_load stdio [-c N] [-d S] [-w S] [-t TOOL] [-s BYTES] "
	    "-- COMMAND [ARG...]\n"
	    "       mcp_load respond PORT\n"
	    "       mcp_load relay PORT -- COMMAND [ARG...]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	const char *mode;
	size_t size = 16;
	int ch;

	if (argc < 2)
		usage();
	mode = argv[1];
	signal(SIGPIPE, SIG_IGN);
	if (strcmp(mode, "respond") == 0) {
		if (argc != 3)
			usage();
		return run_respond(argv[2]);
	}
	if (strcmp(mode, "relay") == 0) {
		if (argc < 5 || strcmp(argv[3], "--") != 0)
			usage();
		return run_relay(argv[2], argv + 4);
	}
	argc--;
	argv++;
	while ((ch = getopt(argc, argv, "c:d:w:e:t:s:k:r:p:")) != -1) {
		switch (ch) {
		case 'c':
			conns_n = atoi(optarg);
			break;
		case 'd':
			duration = atof(optarg);
			break;
		case 'w':
			warmup = atof(optarg);
			break;
		case 'e':
			era = atoi(optarg);
			break;
		case 't':
			tool = optarg;
			break;
		case 's':
			size = strtoul(optarg, NULL, 10);
			break;
		case 'k':
			read_keys(optarg);
			break;
		case 'r':
			rate = atof(optarg);
			break;
		case 'p':
			progress = atof(optarg);
			break;
		default:
			usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (conns_n < 1 || conns_n > MAX_CONNS || duration <= 0 ||
	    (era != 2025 && era != 2026) || size > 65536 || argc < 1 ||
	    rate < 0 || progress < 0)
		usage();
	message = xrealloc(NULL, size + 1);
	memset(message, 'x', size);
	message[size] = '\0';
	if (strcmp(mode, "http") == 0 && argc == 1)
		return run_http(argv[0]);
	if (strcmp(mode, "stdio") == 0)
		return run_stdio(argv);
	usage();
	return 2;
}
