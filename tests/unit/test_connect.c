/*
 * Connections for sandboxed workers: which (host, port) a worker may ask
 * for given its server's url (http_url_matches), and the round trip
 * child_connector -> CONNECT -> parent_connect.c -> CONNECTED or
 * CONNECT_FAILED -> the connector's callback, over a real socketpair in
 * one process, with the parent and child hooks they need stubbed here.
 */
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
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
#include <event2/event.h>
#include <json-c/json.h>

#include "broker/config.h"
#include "broker/mcpbroker.h"
#include "broker/parent.h"
#include "common/addrcheck.h"
#include "common/http_client.h"
#include "common/proc.h"
#include "broker/child_connect.h"

/*
 * Host and port matching.
 */
struct match_case {
	const char	*url;
	const char	*host;
	uint16_t	 port;
	int		 want;
};

static const struct match_case match_cases[] = {
	/* exact, and the ports a scheme implies */
	{ "https://api.example.com:8443/mcp", "api.example.com", 8443, 1 },
	{ "https://api.example.com/mcp", "api.example.com", 443, 1 },
	{ "http://api.example.com/mcp", "api.example.com", 80, 1 },
	{ "HTTPS://api.example.com", "api.example.com", 443, 1 },
	{ "http://api.example.com?x=1", "api.example.com", 80, 1 },
	/* case does not matter in names */
	{ "https://API.Example.COM/", "api.example.com", 443, 1 },
	{ "https://api.example.com/", "API.EXAMPLE.COM", 443, 1 },
	/* IP literals, IPv6 with or without brackets, by address */
	{ "http://127.0.0.1:8080/", "127.0.0.1", 8080, 1 },
	{ "http://[::1]:8080/", "::1", 8080, 1 },
	{ "http://[::1]:8080/", "[::1]", 8080, 1 },
	{ "http://[::1]:8080/", "0:0::1", 8080, 1 },
	{ "http://[2001:DB8::1]/", "2001:db8::1", 80, 1 },
	{ "http://[::1]:8080/", "::2", 8080, 0 },
	{ "http://[::1]:8080/", "[::1", 8080, 0 },
	{ "http://127.0.0.1/", "[127.0.0.1]", 80, 0 },
	{ "http://127.0.0.1/", "127.1", 80, 0 },
	{ "http://127.0.0.1/", "::ffff:127.0.0.1", 80, 0 },
	/* another port */
	{ "https://api.example.com/", "api.example.com", 80, 0 },
	{ "http://api.example.com/", "api.example.com", 443, 0 },
	{ "https://api.example.com:8443/", "api.example.com", 443, 0 },
	/* another host */
	{ "https://api.example.com/", "evil.example.com", 443, 0 },
	{ "https://api.example.com/", "api.example.com.evil.example", 443, 0 },
	{ "https://api.example.com/", "", 443, 0 },
	{ "https://api.example.com/", "[]", 443, 0 },
	{ "https://api.example.com/", "[api.example.com]", 443, 0 },
	/* user information is refused outright, whichever side asks */
	{ "https://good.example@evil.example/", "evil.example", 443, 0 },
	{ "https://good.example@evil.example/", "good.example", 443, 0 },
	{ "https://u:p@good.example/", "good.example", 443, 0 },
	/* a trailing dot names the same zone but is another request */
	{ "https://api.example.com/", "api.example.com.", 443, 0 },
	{ "https://api.example.com./", "api.example.com", 443, 0 },
	{ "https://api.example.com./", "api.example.com.", 443, 1 },
	/* not http(s), or not a URL the client would use */
	{ "ftp://api.example.com/", "api.example.com", 21, 0 },
	{ "unix:///run/x.sock", "localhost", 80, 0 },
	{ "api.example.com", "api.example.com", 80, 0 },
	{ "https://api.example.com:0/", "api.example.com", 0, 0 },
	{ "https://api.example.com:99999/", "api.example.com", 34463, 0 },
	{ "https://1.2.3/", "1.2.3", 443, 0 },
};

static void
test_url_matches(void **state)
{
	const struct match_case	*c;
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof(match_cases) / sizeof(match_cases[0]); i++) {
		c = &match_cases[i];
		if (http_url_matches(c->url, c->host, c->port) != c->want)
			fail_msg("%s vs \"%s\" port %u: want %d", c->url,
			    c->host, c->port, c->want);
	}
}

static void
test_url_endpoint(void **state)
{
	char		 host[HTTP_HOST_MAX + 1];
	uint16_t	 port;

	(void)state;
	assert_null(http_url_endpoint("https://[::1]/x", host, &port));
	assert_string_equal(host, "::1");
	assert_int_equal(port, 443);
	assert_null(http_url_endpoint("http://Files.Example:81", host, &port));
	assert_string_equal(host, "files.example");
	assert_int_equal(port, 81);
	assert_non_null(http_url_endpoint("https://a@b/", host, &port));
	assert_non_null(http_url_endpoint("gopher://b/", host, &port));
}

/*
 * The round trip.  parent_connect.c and child_connect.c are linked in;
 * what they take from parent.c and child.c is stubbed.
 */
static struct event_base	*base;
static struct mcpbroker_conf	*conf;
static struct child_proc	 worker;	/* the parent's view */
static struct peer		 to_parent;	/* the worker's channel */
static int			 parent_lost, worker_lost;

struct mcpbroker_conf *
parent_conf(void)
{
	return conf;
}

struct event_base *
parent_base(void)
{
	return base;
}

struct peer *
child_parent(void)
{
	return &to_parent;
}

struct event_base *
child_base(void)
{
	return base;
}

static const struct dispatch parent_dispatch_worker[] = {
	{ MSG_CONNECT, parent_recv_connect, 0 },
	DISPATCH_END
};

static const struct dispatch worker_dispatch_parent[] = {
	{ MSG_CONNECTED, child_recv_connected, DISPATCH_FD },
	{ MSG_CONNECT_FAILED, child_recv_connect_failed, 0 },
	DISPATCH_END
};

static void
lost(struct peer *p, const char *why)
{
	(void)why;
	if (p == &worker.cp_peer)
		parent_lost = 1;
	else
		worker_lost = 1;
}

struct answer {
	int	 called;
	int	 fd;
	char	 error[512];
	int	 in_connector;	/* set around the connector call */
};

static int	in_connector;

static void
answered(int fd, const char *error, void *arg)
{
	struct answer *a = arg;

	a->called++;
	a->fd = fd;
	a->in_connector = in_connector;
	snprintf(a->error, sizeof(a->error), "%s", error != NULL ? error : "");
}

static void
ask(const char *host, uint16_t port, struct answer *a)
{
	memset(a, 0, sizeof(*a));
	a->fd = -2;
	in_connector = 1;
	child_connector(host, port, answered, a, NULL);
	in_connector = 0;
}

static void
guard_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	*(int *)arg = 1;
	event_base_loopbreak(base);
}

/* Run the loop until every answer is in (or 5 s have passed). */
static void
run_until(struct answer *a, size_t n)
{
	struct timeval	 tv = { 5, 0 };
	struct event	*guard;
	int		 expired = 0;
	size_t		 i;

	assert_non_null(guard = evtimer_new(base, guard_cb, &expired));
	evtimer_add(guard, &tv);
	for (;;) {
		for (i = 0; i < n && a[i].called; i++)
			;
		if (i == n || expired || parent_lost || worker_lost)
			break;
		event_base_loop(base, EVLOOP_ONCE);
	}
	event_free(guard);
	for (i = 0; i < n; i++)
		assert_int_equal(a[i].called, 1);
}

static void
use_url(const char *url_fmt, ...)
{
	char	 url[256], text[512];
	va_list	 ap;

	va_start(ap, url_fmt);
	vsnprintf(url, sizeof(url), url_fmt, ap);
	va_end(ap);
	snprintf(text, sizeof(text), "server \"files\" { url \"%s\" "
	    "connect-timeout 300ms }\n", url);
	config_free(conf);
	assert_non_null(conf = config_parse_buffer("t.conf", text,
	    strlen(text), stderr));
}

static int
setup(void **state)
{
	int sv[2];

	(void)state;
	assert_non_null(base = event_base_new());
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
	    sv), 0);
	memset(&worker, 0, sizeof(worker));
	worker.cp_kind = PROC_WORKER;
	snprintf(worker.cp_name, sizeof(worker.cp_name), "files");
	peer_init(&worker.cp_peer, PROC_WORKER, "worker files",
	    parent_dispatch_worker, lost, &worker);
	peer_init(&to_parent, PROC_PARENT, "parent", worker_dispatch_parent,
	    lost, NULL);
	assert_int_equal(peer_attach(&worker.cp_peer, base, sv[0]), 0);
	assert_int_equal(peer_attach(&to_parent, base, sv[1]), 0);
	parent_lost = worker_lost = 0;
	conf = NULL;
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	parent_connects_orphaned(&worker);
	parent_connects_free_all();
	peer_detach(&worker.cp_peer);
	peer_detach(&to_parent);
	config_free(conf);
	conf = NULL;
	event_base_free(base);
	return 0;
}

/* A listener on 127.0.0.1 with an ephemeral port. */
static int
listener(int backlog, uint16_t *port)
{
	struct sockaddr_in	 sin;
	socklen_t		 len = sizeof(sin);
	int			 fd;

	assert_int_not_equal(fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC,
	    0), -1);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(fd, backlog), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	*port = ntohs(sin.sin_port);
	return fd;
}

static void
test_connected(void **state)
{
	struct sockaddr_in	 sin;
	socklen_t		 len = sizeof(sin);
	struct answer		 a;
	uint16_t		 port;
	int			 lfd, afd;

	(void)state;
	lfd = listener(16, &port);
	use_url("http://127.0.0.1:%u/mcp", port);
	ask("127.0.0.1", port, &a);
	assert_int_equal(a.called, 0);		/* never from inside */
	run_until(&a, 1);
	assert_int_equal(a.in_connector, 0);
	assert_true(a.fd >= 0);
	assert_string_equal(a.error, "");
	assert_int_equal(getpeername(a.fd, (struct sockaddr *)&sin, &len), 0);
	assert_int_equal(ntohs(sin.sin_port), port);
	assert_int_not_equal(afd = accept(lfd, NULL, NULL), -1);
	close(afd);
	close(a.fd);
	close(lfd);
	assert_false(parent_lost || worker_lost);
}

static void
test_refused(void **state)
{
	struct answer	a;
	char		want[128];
	uint16_t	port;

	(void)state;
	close(listener(1, &port));	/* nobody there now */
	use_url("http://127.0.0.1:%u/", port);
	ask("127.0.0.1", port, &a);
	run_until(&a, 1);
	assert_int_equal(a.fd, -1);
	snprintf(want, sizeof(want), "connect to 127.0.0.1:%u: "
	    "Connection refused", port);
	assert_string_equal(a.error, want);
	assert_false(parent_lost || worker_lost);
}

static void
test_timed_out(void **state)
{
	struct answer	a;
	char		want[128];
	uint16_t	port;
	int		lfd, fill[3], i;
	struct sockaddr_in sin;

	(void)state;
	/* A full accept queue drops SYNs: connects hang. */
	lfd = listener(0, &port);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons(port);
	for (i = 0; i < 3; i++) {
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		(void)connect(fill[i], (struct sockaddr *)&sin, sizeof(sin));
	}
	usleep(50 * 1000);
	use_url("http://127.0.0.1:%u/", port);
	ask("127.0.0.1", port, &a);
	run_until(&a, 1);
	snprintf(want, sizeof(want), "connect to 127.0.0.1:%u: "
	    "timed out after 300 ms", port);
	assert_int_equal(a.fd, -1);
	assert_string_equal(a.error, want);
	for (i = 0; i < 3; i++)
		close(fill[i]);
	close(lfd);
}

static void
test_other_endpoint_is_violation(void **state)
{
	struct answer	a;
	uint16_t	port;
	int		lfd;

	(void)state;
	lfd = listener(16, &port);
	use_url("http://127.0.0.1:%u/", port);
	ask("127.0.0.2", port, &a);
	while (!parent_lost)
		assert_int_not_equal(event_base_loop(base, EVLOOP_ONCE), -1);
	assert_int_equal(a.called, 0);
	close(lfd);
}

static void
test_too_many(void **state)
{
	struct answer	a[33];
	uint16_t	port;
	int		lfd, i, failed = 0;

	(void)state;
	lfd = listener(64, &port);
	use_url("http://localhost:%u/", port);
	/* All 33 frames reach the parent before any connect completes. */
	for (i = 0; i < 33; i++)
		ask("localhost", port, &a[i]);
	run_until(a, 33);
	for (i = 0; i < 33; i++) {
		if (a[i].fd >= 0) {
			close(a[i].fd);
			continue;
		}
		failed++;
		assert_string_equal(a[i].error,
		    "too many connections in progress");
	}
	assert_int_equal(failed, 1);
	close(lfd);
}

static struct msg *
connect_msg(uint64_t id)
{
	static struct msg m;

	memset(&m, 0, sizeof(m));
	m.m_hdr.mh_type = MSG_CONNECT;
	m.m_hdr.mh_id = id;
	m.m_fd = -1;
	return &m;
}

static struct json_object *
connect_body(const char *host, int port)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "host", json_object_new_string(host));
	json_object_object_add(o, "port", json_object_new_int(port));
	return o;
}

static void
test_bad_requests(void **state)
{
	struct json_object	*o;
	uint16_t		 port;
	int			 lfd;

	(void)state;
	lfd = listener(16, &port);
	use_url("http://127.0.0.1:%u/", port);
	o = connect_body("127.0.0.1", port);
	assert_int_equal(parent_recv_connect(&worker.cp_peer, connect_msg(7),
	    o), 0);
	/* the same number again while it is open */
	assert_int_equal(parent_recv_connect(&worker.cp_peer, connect_msg(7),
	    o), -1);
	json_object_put(o);
	o = connect_body("127.0.0.1", 0);
	assert_int_equal(parent_recv_connect(&worker.cp_peer, connect_msg(8),
	    o), -1);
	json_object_put(o);
	o = connect_body("127.0.0.1\n", port);
	assert_int_equal(parent_recv_connect(&worker.cp_peer, connect_msg(9),
	    o), -1);
	json_object_put(o);
	o = json_object_new_object();
	assert_int_equal(parent_recv_connect(&worker.cp_peer, connect_msg(10),
	    o), -1);
	json_object_put(o);
	/* a stdio server has no url to connect to */
	config_free(conf);
	assert_non_null(conf = config_parse_buffer("t.conf",
	    "server \"files\" { command \"/bin/true\" }\n",
	    strlen("server \"files\" { command \"/bin/true\" }\n"), stderr));
	o = connect_body("127.0.0.1", port);
	assert_int_equal(parent_recv_connect(&worker.cp_peer, connect_msg(11),
	    o), -1);
	json_object_put(o);
	/* The worker goes; request 7 must not answer anyone. */
	parent_connects_orphaned(&worker);
	usleep(20 * 1000);
	event_base_loop(base, EVLOOP_NONBLOCK);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_false(worker_lost);
	close(lfd);
}

/*
 * A worker that goes while its name is being looked up: the lookup is
 * cancelled, and its callback (which evdns still makes, from the loop)
 * frees the record; teardown's parent_connects_free_all() finds nothing
 * left, and LeakSanitizer checks that nothing was lost.
 */
static void
test_orphaned_while_resolving(void **state)
{
	struct json_object	*o;
	int			 i;

	(void)state;
	use_url("http://connect-test.invalid:8080/");
	o = connect_body("connect-test.invalid", 8080);
	assert_int_equal(parent_recv_connect(&worker.cp_peer, connect_msg(1),
	    o), 0);
	json_object_put(o);
	parent_connects_orphaned(&worker);
	for (i = 0; i < 5; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	assert_false(worker_lost);
}

/*
 * A name that does not resolve: either DNS says so, or (no DNS reachable
 * here) the connect-timeout ends the lookup.  Either way one answer.
 */
static void
test_unresolvable(void **state)
{
	static const char	 prefix[] =
	    "connect to connect-test.invalid:8080: ";
	static const char	 nxdomain[] =
	    "cannot resolve connect-test.invalid: ";
	struct answer		 a;
	const char		*why;
	int			 i;

	(void)state;
	use_url("http://connect-test.invalid:8080/");
	ask("connect-test.invalid", 8080, &a);
	run_until(&a, 1);
	assert_int_equal(a.fd, -1);
	assert_memory_equal(a.error, prefix, strlen(prefix));
	why = a.error + strlen(prefix);
	if (strncmp(why, nxdomain, strlen(nxdomain)) != 0)
		assert_string_equal(why, "timed out after 300 ms");
	/* A timed-out lookup is released by its cancel callback. */
	for (i = 0; i < 5; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	assert_false(parent_lost || worker_lost);
}

static void
test_unknown_answer_is_violation(void **state)
{
	struct msg		 m;
	struct json_object	*o = json_object_new_object();
	int			 sv[2];

	(void)state;
	memset(&m, 0, sizeof(m));
	m.m_hdr.mh_id = 12345;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	m.m_fd = sv[0];
	assert_int_equal(child_recv_connected(&to_parent, &m, o), -1);
	assert_int_equal(close(sv[0]), -1);	/* it was closed for us */
	assert_int_equal(errno, EBADF);
	close(sv[1]);
	json_object_object_add(o, "error", json_object_new_string("x"));
	m.m_fd = -1;
	assert_int_equal(child_recv_connect_failed(&to_parent, &m, o), -1);
	json_object_put(o);
}

static void
test_parent_unreachable(void **state)
{
	struct answer a;

	(void)state;
	peer_detach(&to_parent);
	ask("127.0.0.1", 80, &a);
	assert_int_equal(a.called, 0);
	run_until(&a, 1);
	assert_int_equal(a.in_connector, 0);
	assert_int_equal(a.fd, -1);
	assert_string_equal(a.error, "cannot reach the parent");
}

/*
 * Where the broker does not connect without allow-address, the address
 * family and the forms that carry an IPv4 address in IPv6 included.
 */
static void
test_address_policy(void **state)
{
	static const struct {
		const char	*addr;
		const char	*why;	/* NULL: allowed */
	} cases[] = {
		{ "127.0.0.1", NULL }, { "::1", NULL }, { "10.1.2.3", NULL },
		{ "172.16.0.1", NULL }, { "192.168.1.1", NULL },
		{ "fd12::1", NULL }, { "8.8.8.8", NULL },
		{ "2001:db8::1", NULL }, { "100.64.0.1", NULL },
		{ "169.254.169.254", "the cloud metadata address" },
		{ "169.254.0.1", "a link-local address" },
		{ "fe80::1", "a link-local address" },
		{ "febf::1", "a link-local address" },
		{ "fd00:ec2::254", "the cloud metadata address" },
		{ "100.100.100.200", "a cloud metadata address" },
		{ "0.0.0.0", "an unspecified address" },
		{ "0.1.2.3", "an unspecified address" },
		{ "::", "an unspecified address" },
		{ "224.0.0.1", "a multicast or reserved address" },
		{ "255.255.255.255", "a multicast or reserved address" },
		{ "ff02::1", "a multicast address" },
		{ "::ffff:169.254.169.254", "the cloud metadata address" },
		{ "64:ff9b::a9fe:a9fe", "the cloud metadata address" },
		{ "::169.254.169.254", "the cloud metadata address" },
		{ "::ffff:127.0.0.1", NULL },
	};
	struct addr_allow	 aa;
	const char		*why;
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		why = addr_literal_refused(cases[i].addr, NULL);
		if (cases[i].why == NULL)
			assert_null(why);
		else {
			assert_non_null(why);
			assert_string_equal(why, cases[i].why);
		}
	}
	assert_null(addr_literal_refused("metadata.example", NULL));
	/* An allowed address, in whichever form it comes. */
	memset(&aa, 0, sizeof(aa));
	assert_int_equal(addr_allow_add(&aa, "169.254.169.254"), 0);
	assert_int_equal(addr_allow_add(&aa, "not an address"), -1);
	assert_null(addr_literal_refused("169.254.169.254", &aa));
	assert_null(addr_literal_refused("::ffff:169.254.169.254", &aa));
	assert_non_null(addr_literal_refused("169.254.169.253", &aa));
	while (aa.aa_n < ADDR_ALLOW_MAX)
		assert_int_equal(addr_allow_add(&aa, "fe80::1"), 0);
	assert_int_equal(addr_allow_add(&aa, "fe80::2"), -1);
}

/*
 * The check is on the address the request resolved to, at connect time:
 * the configuration allowed it when it was read, not any more now.
 */
static void
test_refused_address(void **state)
{
	struct server_conf	*srv;
	struct answer		 a;

	(void)state;
	use_url("http://169.254.169.254:9/mcp\" allow-address "
	    "\"169.254.169.254");
	srv = TAILQ_FIRST(&conf->c_servers);
	assert_int_equal(srv->srv_nallow_addr, 1);
	ask("169.254.169.254", 9, &a);
	run_until(&a, 1);
	assert_null(strstr(a.error, "allow-address"));
	if (a.fd >= 0)
		close(a.fd);
	free(srv->srv_allow_addr[0]);	/* as if reloaded without it */
	assert_non_null(srv->srv_allow_addr[0] = strdup("169.254.169.253"));
	ask("169.254.169.254", 9, &a);
	run_until(&a, 1);
	assert_int_equal(a.fd, -1);
	assert_string_equal(a.error, "connect to 169.254.169.254:9: "
	    "169.254.169.254 is the cloud metadata address; not connecting "
	    "without allow-address \"169.254.169.254\"");
	assert_false(parent_lost || worker_lost);
}

#define T(f)	cmocka_unit_test_setup_teardown(f, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_url_matches),
		cmocka_unit_test(test_url_endpoint),
		cmocka_unit_test(test_address_policy),
		T(test_connected),
		T(test_refused_address),
		T(test_refused),
		T(test_timed_out),
		T(test_other_endpoint_is_violation),
		T(test_too_many),
		T(test_bad_requests),
		T(test_orphaned_while_resolving),
		T(test_unresolvable),
		T(test_unknown_answer_is_violation),
		T(test_parent_unreachable),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
