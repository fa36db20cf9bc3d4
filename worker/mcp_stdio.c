/*
 * The stdio transport: newline-delimited JSON-RPC over a server process's
 * stdin and stdout, its stderr read as log lines.  The process itself is
 * someone else's (the parent spawned it); this only owns the pipes.  A line
 * longer than MCP_MAX_MESSAGE ends the transport: there is no way to
 * resynchronise a broken stream.  A server that stops reading its input
 * fails the requests we cannot queue for it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "common/log.h"
#include "common/util.h"
#include "worker/mcp.h"
#include "worker/mcp_stdio.h"

#define STDERR_LINE_MAX		1024
#define STDERR_BURST		50	/* lines per window, then suppressed */
#define STDERR_WINDOW_MS	10000
#define OUTPUT_MAX		(2 * MCP_MAX_MESSAGE)

struct stdio_transport {
	char			 st_name[64];
	struct bufferevent	*st_in;		/* server's stdin */
	struct bufferevent	*st_out;	/* server's stdout */
	struct bufferevent	*st_err;	/* server's stderr, or NULL */
	struct mcp_session	*st_session;
	void			(*st_on_eof)(void *, const char *);
	void			*st_arg;
	int			 st_eof;
	uint64_t		 st_err_window;
	unsigned int		 st_err_lines;
	unsigned int		 st_err_dropped;
};

static void
stdio_eof(struct stdio_transport *st, const char *why)
{
	if (st->st_eof)
		return;
	st->st_eof = 1;
	bufferevent_disable(st->st_out, EV_READ);
	st->st_on_eof(st->st_arg, why);
}

static void
line_too_long(struct stdio_transport *st)
{
	char why[96];

	snprintf(why, sizeof(why), "the server sent a line longer than %u "
	    "bytes", MCP_MAX_MESSAGE);
	stdio_eof(st, why);
}

static void
stdio_read_cb(struct bufferevent *bev, void *arg)
{
	struct stdio_transport	*st = arg;
	struct evbuffer		*in = bufferevent_get_input(bev);
	char			*line;
	size_t			 len;

	while (!st->st_eof && (line = evbuffer_readln(in, &len,
	    EVBUFFER_EOL_LF)) != NULL) {
		if (len > 0 && line[len - 1] == '\r')
			line[--len] = '\0';
		if (len > MCP_MAX_MESSAGE) {
			free(line);
			line_too_long(st);
			return;
		}
		if (len > 0 && st->st_session != NULL)
			mcp_session_input(st->st_session, line, len);
		free(line);
	}
	if (!st->st_eof && evbuffer_get_length(in) > MCP_MAX_MESSAGE)
		line_too_long(st);
}

static void
stdio_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct stdio_transport	*st = arg;
	char			 why[128];

	(void)bev;
	if (what & BEV_EVENT_EOF)
		snprintf(why, sizeof(why), "the server closed its output");
	else
		snprintf(why, sizeof(why), "reading from the server: %s",
		    strerror(errno));
	stdio_eof(st, why);
}

/* stdin's reader went away: the server is gone or not listening. */
static void
stdin_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	stdio_eof(arg, "the server closed its input");
}

/* Server stderr goes to the log, a burst at a time. */
static void
stderr_line(struct stdio_transport *st, const char *line)
{
	uint64_t now = monotonic_ms();

	if (now - st->st_err_window >= STDERR_WINDOW_MS) {
		if (st->st_err_dropped > 0)
			log_info("server %s: %u stderr lines not logged",
			    st->st_name, st->st_err_dropped);
		st->st_err_window = now;
		st->st_err_lines = st->st_err_dropped = 0;
	}
	if (st->st_err_lines++ < STDERR_BURST)
		log_info("server %s: stderr: %s", st->st_name, line);
	else
		st->st_err_dropped++;
}

static void
stderr_read_cb(struct bufferevent *bev, void *arg)
{
	struct stdio_transport	*st = arg;
	struct evbuffer		*in = bufferevent_get_input(bev);
	char			 buf[STDERR_LINE_MAX + 1], *c;
	struct evbuffer_ptr	 eol;
	size_t			 n;

	for (;;) {
		eol = evbuffer_search_eol(in, NULL, NULL, EVBUFFER_EOL_LF);
		if (eol.pos == -1 && evbuffer_get_length(in) < STDERR_LINE_MAX)
			break;
		n = eol.pos == -1 || (size_t)eol.pos > STDERR_LINE_MAX ?
		    STDERR_LINE_MAX : (size_t)eol.pos;
		evbuffer_remove(in, buf, n);
		buf[n] = '\0';
		if (eol.pos != -1 && (size_t)eol.pos <= STDERR_LINE_MAX)
			evbuffer_drain(in, 1);
		for (c = buf; *c != '\0'; c++)
			if ((unsigned char)*c < 0x20 && *c != '\t')
				*c = '?';
		stderr_line(st, buf);
	}
}

static void
stderr_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)what;
	(void)arg;
	bufferevent_disable(bev, EV_READ);
}

static int
stdio_send(void *arg, const struct mcp_out *out, char *why, size_t whylen)
{
	struct stdio_transport	*st = arg;
	struct evbuffer		*buf = bufferevent_get_output(st->st_in);

	if (st->st_eof) {
		snprintf(why, whylen, "the server is gone");
		return -1;
	}
	if (evbuffer_get_length(buf) + out->mo_len > OUTPUT_MAX) {
		snprintf(why, whylen, "the server is not reading its input");
		return -1;
	}
	if (evbuffer_add(buf, out->mo_json, out->mo_len) == -1 ||
	    evbuffer_add(buf, "\n", 1) == -1) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	return 0;
}

static void
stdio_free(void *arg)
{
	struct stdio_transport *st = arg;

	bufferevent_free(st->st_in);
	bufferevent_free(st->st_out);
	if (st->st_err != NULL)
		bufferevent_free(st->st_err);
	free(st);
}

const struct mcp_transport_ops stdio_transport_ops = {
	.to_send = stdio_send,
	.to_cancel = NULL,
	.to_era = NULL,
	.to_free = stdio_free,
};

static struct bufferevent *
pipe_bev(struct event_base *base, int fd)
{
	struct bufferevent *bev;

	if (evutil_make_socket_nonblocking(fd) == -1 ||
	    (bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE)) ==
	    NULL)
		return NULL;
	return bev;
}

struct stdio_transport *
stdio_transport_new(struct event_base *base, const char *name, int in_fd,
    int out_fd, int err_fd, void (*on_eof)(void *, const char *), void *arg)
{
	struct stdio_transport *st;

	if ((st = calloc(1, sizeof(*st))) == NULL)
		return NULL;
	snprintf(st->st_name, sizeof(st->st_name), "%s", name);
	st->st_on_eof = on_eof;
	st->st_arg = arg;
	if ((st->st_in = pipe_bev(base, in_fd)) == NULL ||
	    (st->st_out = pipe_bev(base, out_fd)) == NULL ||
	    (err_fd != -1 && (st->st_err = pipe_bev(base, err_fd)) == NULL))
		fatalx("stdio transport for %s", name);
	bufferevent_setcb(st->st_in, NULL, NULL, stdin_event_cb, st);
	bufferevent_setcb(st->st_out, stdio_read_cb, NULL, stdio_event_cb, st);
	bufferevent_enable(st->st_in, EV_WRITE);
	bufferevent_enable(st->st_out, EV_READ);
	if (st->st_err != NULL) {
		bufferevent_setcb(st->st_err, stderr_read_cb, NULL,
		    stderr_event_cb, st);
		bufferevent_enable(st->st_err, EV_READ);
	}
	return st;
}

void
stdio_transport_attach(struct stdio_transport *st, struct mcp_session *s)
{
	st->st_session = s;
}
