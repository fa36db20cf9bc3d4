/*
 * A scripted HTTP server for the targets that drive the HTTP client: the
 * client's connector is handed one end of a socketpair per connection, and
 * the other end serves the next response of the script, in two writes cut
 * where the input says, then closes its side.  Connections beyond the
 * script are refused.  Every connection must be to the expected host and
 * port: nothing a server sends may point the client anywhere else.
 */
#include <sys/socket.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/http_client.h"
#include "tests/fuzz/fuzz.h"

struct server {
	int			 fd;
	struct event		*ev;
	const uint8_t		*data;
	size_t			 len;
	size_t			 off;
	int			 writes;
	int			 shut;
};

struct pending_connect {
	http_connected_fn	 done;
	void			*arg;
};

static struct event_base	*base;
static const struct fuzz_script	*script;
static const char		*want_host;
static uint16_t			 want_port;
static struct server		 servers[FUZZ_MAX_CONNS];
static size_t			 nservers;
static unsigned long		 activity;

static void
server_cb(evutil_socket_t fd, short what, void *arg)
{
	struct server	*sv = arg;
	char		 buf[4096];
	size_t		 end;
	ssize_t		 n;

	if (what & EV_READ) {
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			activity++;
		/* The client is gone: nothing more to read or write. */
		if (n == 0 || (n == -1 && errno != EAGAIN)) {
			activity++;
			event_del(sv->ev);
			return;
		}
	}
	if (!(what & EV_WRITE) || sv->shut)
		return;
	activity++;
	/* The first write stops at the cut, so the client reads twice. */
	end = sv->writes++ == 0 && script->cut < sv->len ? script->cut :
	    sv->len;
	if (sv->off < end) {
		n = send(fd, sv->data + sv->off, end - sv->off, MSG_NOSIGNAL);
		if (n > 0)
			sv->off += n;
		else if (n == -1 && errno != EAGAIN)
			sv->off = sv->len;
	}
	if (sv->off >= sv->len) {
		shutdown(fd, SHUT_WR);
		sv->shut = 1;
		event_del(sv->ev);
		event_assign(sv->ev, base, fd, EV_READ | EV_PERSIST,
		    server_cb, sv);
		event_add(sv->ev, NULL);
	}
}

/* Answered from the loop, as a real connector does. */
static void
connect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pending_connect	*pc = arg;
	struct server		*sv;
	int			 sp[2];

	(void)fd;
	(void)what;
	activity++;
	if (nservers >= script->n || nservers >= FUZZ_MAX_CONNS ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
	    sp) == -1) {
		pc->done(-1, "connection refused", pc->arg);
		free(pc);
		return;
	}
	sv = &servers[nservers];
	memset(sv, 0, sizeof(*sv));
	sv->fd = sp[1];
	sv->data = script->data[nservers];
	sv->len = script->len[nservers];
	nservers++;
	if ((sv->ev = event_new(base, sv->fd, EV_READ | EV_WRITE | EV_PERSIST,
	    server_cb, sv)) == NULL || event_add(sv->ev, NULL) == -1)
		abort();
	pc->done(sp[0], NULL, pc->arg);
	free(pc);
}

void
fuzz_connect(const char *host, uint16_t port, http_connected_fn done,
    void *done_arg, void *connector_arg)
{
	struct pending_connect	*pc;
	struct timeval		 now = { 0, 0 };

	(void)connector_arg;
	if (want_host != NULL && (strcmp(host, want_host) != 0 ||
	    port != want_port)) {
		fprintf(stderr, "connect to %s:%u, not %s:%u\n", host, port,
		    want_host, want_port);
		abort();
	}
	if ((pc = malloc(sizeof(*pc))) == NULL)
		abort();
	pc->done = done;
	pc->arg = done_arg;
	if (event_base_once(base, -1, EV_TIMEOUT, connect_cb, pc, &now) == -1)
		abort();
}

void
fuzz_server_start(struct event_base *b, const struct fuzz_script *s,
    const char *host, uint16_t port)
{
	base = b;
	script = s;
	want_host = host;
	want_port = port;
	nservers = 0;
}

unsigned long
fuzz_server_activity(void)
{
	return activity;
}

size_t
fuzz_server_connections(void)
{
	return nservers;
}

void
fuzz_server_stop(void)
{
	size_t i;

	for (i = 0; i < nservers; i++) {
		event_free(servers[i].ev);
		close(servers[i].fd);
	}
	nservers = 0;
}

struct event_base *
fuzz_http_init(void)
{
	struct event_base *b;

	fuzz_log_quiet();
	signal(SIGPIPE, SIG_IGN);
	setenv("SSL_CERT_FILE", "/nonexistent", 1);
	if ((b = event_base_new()) == NULL)
		abort();
	return b;
}
