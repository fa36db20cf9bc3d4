/*
 * Outbound TCP connections for workers.  A sandboxed worker may neither
 * resolve names nor call socket() or connect(), so it asks the parent
 * (CONNECT {host, port}) and gets a connected socket back (CONNECTED,
 * +fd), on which it runs TLS and HTTP itself.  A worker may reach only the
 * host and port of its own server's url: a request for anything else means
 * it no longer runs our code, and it is treated as compromised.
 *
 * Names are resolved with evdns, so a slow DNS server never stalls the
 * parent; an IP literal never reaches DNS.  Then each address is tried in
 * turn, all within the server's connect-timeout.  An address the broker
 * does not connect to by default (link-local, cloud metadata, ...; see
 * common/addrcheck.h) is skipped unless the block's allow-address names
 * it: the check is on what the name resolved to, now, so that a name
 * pointing at 169.254.169.254 meets it as the literal does in the config.
 *
 * Lifetime.  A request is freed once it is answered or abandoned, except
 * while an evdns lookup is outstanding: evdns_getaddrinfo_cancel() still
 * calls back (with EVUTIL_EAI_CANCEL, later, from the loop), so the record
 * waits for that call with nobody to answer (cr_worker NULL).
 */
#include <sys/socket.h>
#include <sys/types.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <json-c/json.h>

#include "broker/parent.h"

#define PROVIDER_CONNECT_TIMEOUT_MS	10000
#include "common/addrcheck.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/util.h"

#define CONNECT_MAX_PENDING	32	/* per worker */
/* The controller opens one per LLM request: as many as chats at once. */
#define CONNECT_MAX_PENDING_CONTROLLER	4096
#define CONNECT_WHY_MAX		512

struct connect_req {
	TAILQ_ENTRY(connect_req) cr_entry;
	struct child_proc	*cr_worker;	/* NULL: nobody to answer */
	uint64_t		 cr_id;		/* the worker's number */
	char			 cr_host[HTTP_HOST_MAX + 1];
	char			 cr_name[HTTP_HOST_MAX + 9];	/* [host]:port */
	uint16_t		 cr_port;
	uint64_t		 cr_timeout_ms;
	struct evdns_getaddrinfo_request *cr_dns;	/* lookup under way */
	int			 cr_dns_cancelled;
	struct evutil_addrinfo	*cr_res;
	struct evutil_addrinfo	*cr_ai;		/* the address being tried */
	int			 cr_fd;
	struct event		*cr_wev;	/* cr_fd writable: connected */
	struct event		*cr_timer;	/* for the whole request */
	char			 cr_err[CONNECT_WHY_MAX];	/* last failure */
	struct addr_allow	 cr_allow;	/* the block's allow-address */
};
TAILQ_HEAD(connect_list, connect_req);

static struct connect_list	 connects = TAILQ_HEAD_INITIALIZER(connects);
static struct evdns_base	*dns;		/* made on first need */

static void	cr_connected_cb(evutil_socket_t, short, void *);

/* The worker's request with this id, if any; *n: how many it has open. */
static struct connect_req *
connect_lookup(const struct child_proc *worker, uint64_t id, unsigned int *n)
{
	struct connect_req	*cr, *found = NULL;

	*n = 0;
	TAILQ_FOREACH(cr, &connects, cr_entry) {
		if (cr->cr_worker != worker)
			continue;
		(*n)++;
		if (cr->cr_id == id)
			found = cr;
	}
	return found;
}

static void
send_failed(struct child_proc *worker, uint64_t id, const char *why)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "error", json_object_new_string(why));
	(void)peer_send(&worker->cp_peer, MSG_CONNECT_FAILED, id, -1, o);
	json_object_put(o);
}

static void
cr_close_socket(struct connect_req *cr)
{
	if (cr->cr_wev != NULL) {
		event_free(cr->cr_wev);
		cr->cr_wev = NULL;
	}
	if (cr->cr_fd != -1) {
		close(cr->cr_fd);
		cr->cr_fd = -1;
	}
}

static void
cr_free(struct connect_req *cr)
{
	cr_close_socket(cr);
	if (cr->cr_timer != NULL)
		event_free(cr->cr_timer);
	if (cr->cr_res != NULL)
		evutil_freeaddrinfo(cr->cr_res);
	TAILQ_REMOVE(&connects, cr, cr_entry);
	free(cr);
}

/*
 * Answered or abandoned: release everything, unless a lookup is under
 * way, whose callback frees the record (see the top of the file).
 * Nothing may touch cr after this.
 */
static void
cr_end(struct connect_req *cr)
{
	cr->cr_worker = NULL;
	if (cr->cr_dns == NULL) {
		cr_free(cr);
		return;
	}
	cr_close_socket(cr);
	if (cr->cr_timer != NULL) {
		event_free(cr->cr_timer);
		cr->cr_timer = NULL;
	}
	if (!cr->cr_dns_cancelled) {
		cr->cr_dns_cancelled = 1;
		evdns_getaddrinfo_cancel(cr->cr_dns);
	}
}

static void __attribute__((format(printf, 2, 3)))
cr_fail(struct connect_req *cr, const char *fmt, ...)
{
	char	why[CONNECT_WHY_MAX];
	char	msg[sizeof("connect to : ") + sizeof(cr->cr_name) +
		    CONNECT_WHY_MAX];
	va_list	ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(msg, sizeof(msg), "connect to %s: %s", cr->cr_name, why);
	log_debug("worker %s: %s", cr->cr_worker->cp_name, msg);
	send_failed(cr->cr_worker, cr->cr_id, msg);
	cr_end(cr);
}

static void
cr_succeed(struct connect_req *cr)
{
	int fd = cr->cr_fd;

	cr->cr_fd = -1;		/* peer_send gives it away */
	log_debug("worker %s: connected to %s", cr->cr_worker->cp_name,
	    cr->cr_name);
	(void)peer_send(&cr->cr_worker->cp_peer, MSG_CONNECTED, cr->cr_id, fd,
	    NULL);
	cr_end(cr);
}

/* Start a connect to one address; -1 (and why in cr_err) if it failed. */
static int
cr_start(struct connect_req *cr, const struct evutil_addrinfo *ai)
{
	int	fd, saved;

	if ((fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, IPPROTO_TCP)) == -1) {
		snprintf(cr->cr_err, sizeof(cr->cr_err), "%s",
		    strerror(errno));
		return -1;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == -1 &&
	    errno != EINPROGRESS) {
		saved = errno;
		close(fd);
		snprintf(cr->cr_err, sizeof(cr->cr_err), "%s",
		    strerror(saved));
		return -1;
	}
	/* Writable means connected or failed; the timer bounds the wait. */
	if ((cr->cr_wev = event_new(parent_base(), fd, EV_WRITE,
	    cr_connected_cb, cr)) == NULL || event_add(cr->cr_wev, NULL) == -1)
		fatalx("event_new");
	cr->cr_fd = fd;
	return 0;
}

/* An address we do not connect to: -1, and why in cr_err. */
static int
cr_refused(struct connect_req *cr, const struct evutil_addrinfo *ai)
{
	char		 addr[INET6_ADDRSTRLEN];
	const char	*why;
	const void	*a;

	if ((why = addr_refused(ai->ai_addr, &cr->cr_allow)) == NULL)
		return 0;
	a = ai->ai_family == AF_INET6 ?
	    (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr :
	    (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
	if (inet_ntop(ai->ai_family, a, addr, sizeof(addr)) == NULL)
		snprintf(addr, sizeof(addr), "the address");
	snprintf(cr->cr_err, sizeof(cr->cr_err), "%s is %s; not connecting "
	    "without allow-address \"%s\"", addr, why, addr);
	return -1;
}

/* Try cr_ai, then each later address; 0 once one is under way. */
static int
cr_try(struct connect_req *cr)
{
	for (; cr->cr_ai != NULL; cr->cr_ai = cr->cr_ai->ai_next)
		if (cr_refused(cr, cr->cr_ai) == 0 &&
		    cr_start(cr, cr->cr_ai) == 0)
			return 0;
	return -1;
}

static void
cr_connected_cb(evutil_socket_t fd, short what, void *arg)
{
	struct connect_req	*cr = arg;
	socklen_t		 len = sizeof(int);
	int			 err = 0;

	(void)what;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
		err = errno;
	if (err == 0) {
		cr_succeed(cr);
		return;
	}
	snprintf(cr->cr_err, sizeof(cr->cr_err), "%s", strerror(err));
	cr_close_socket(cr);
	cr->cr_ai = cr->cr_ai->ai_next;
	if (cr_try(cr) == -1)
		cr_fail(cr, "%s", cr->cr_err);
}

static void
cr_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct connect_req *cr = arg;

	(void)fd;
	(void)what;
	cr_fail(cr, "timed out after %" PRIu64 " ms", cr->cr_timeout_ms);
}

/* Called exactly once per lookup, possibly from inside cr_resolve. */
static void
cr_resolved_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct connect_req *cr = arg;

	cr->cr_dns = NULL;
	if (cr->cr_worker == NULL) {	/* abandoned while resolving */
		if (res != NULL)
			evutil_freeaddrinfo(res);
		cr_free(cr);
		return;
	}
	if (result != 0) {
		cr_fail(cr, "cannot resolve %s: %s", cr->cr_host,
		    evutil_gai_strerror(result));
		return;
	}
	cr->cr_res = cr->cr_ai = res;
	if (cr_try(cr) == -1)
		cr_fail(cr, "%s", cr->cr_err);
}

static int
is_ip_literal(const char *host)
{
	unsigned char addr[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, addr) == 1 ||
	    inet_pton(AF_INET6, host, addr) == 1;
}

/* cr may be gone when this returns: the answer can come at once. */
static void
cr_resolve(struct connect_req *cr)
{
	struct evdns_getaddrinfo_request	*r;
	struct evutil_addrinfo			 hints, *res = NULL;
	char					 serv[8];
	int					 err;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	hints.ai_flags = EVUTIL_AI_NUMERICSERV;
	snprintf(serv, sizeof(serv), "%u", cr->cr_port);
	if (is_ip_literal(cr->cr_host)) {
		hints.ai_flags |= EVUTIL_AI_NUMERICHOST;
		err = evutil_getaddrinfo(cr->cr_host, serv, &hints, &res);
		cr_resolved_cb(err, res, cr);
		return;
	}
	if (dns == NULL && (dns = evdns_base_new(parent_base(),
	    EVDNS_BASE_INITIALIZE_NAMESERVERS |
	    EVDNS_BASE_DISABLE_WHEN_INACTIVE)) == NULL) {
		cr_fail(cr, "cannot resolve %s: no DNS resolver configured",
		    cr->cr_host);
		return;
	}
	/* NULL: answered already (hosts file, error), cr may be freed. */
	if ((r = evdns_getaddrinfo(dns, cr->cr_host, serv, &hints,
	    cr_resolved_cb, cr)) != NULL)
		cr->cr_dns = r;
}

/*
 * Where the request may go: the url, its connect timeout and what its
 * block allows (the configuration may be reloaded before the answer).
 */
struct connect_to {
	const char	 *ct_url;
	uint64_t	  ct_timeout_ms;
	char *const	 *ct_allow;
	size_t		  ct_nallow;
};

static struct connect_req *
cr_new(struct child_proc *worker, uint64_t id, const struct connect_to *ct)
{
	struct connect_req	*cr;
	struct timeval		 tv;
	const char		*why, *url = ct->ct_url;
	size_t			 i;

	if ((cr = calloc(1, sizeof(*cr))) == NULL)
		fatal("calloc");
	cr->cr_worker = worker;
	cr->cr_id = id;
	cr->cr_fd = -1;
	cr->cr_timeout_ms = ct->ct_timeout_ms;
	for (i = 0; i < ct->ct_nallow; i++)
		(void)addr_allow_add(&cr->cr_allow, ct->ct_allow[i]);
	/* Checked by http_url_matches() already. */
	if ((why = http_url_endpoint(url, cr->cr_host, &cr->cr_port)) != NULL)
		fatalx("%s: %s", url, why);
	snprintf(cr->cr_name, sizeof(cr->cr_name), "%s%s%s:%u",
	    strchr(cr->cr_host, ':') != NULL ? "[" : "", cr->cr_host,
	    strchr(cr->cr_host, ':') != NULL ? "]" : "", cr->cr_port);
	snprintf(cr->cr_err, sizeof(cr->cr_err), "no address");
	tv.tv_sec = cr->cr_timeout_ms / 1000;
	tv.tv_usec = (cr->cr_timeout_ms % 1000) * 1000;
	if ((cr->cr_timer = evtimer_new(parent_base(), cr_timeout_cb, cr)) ==
	    NULL || evtimer_add(cr->cr_timer, &tv) == -1)
		fatalx("evtimer_new");
	TAILQ_INSERT_TAIL(&connects, cr, cr_entry);
	return cr;
}

/* For logs: what a possibly hostile worker sent, defanged. */
static const char *
defang(const char *s, char *buf, size_t len)
{
	char *c;

	snprintf(buf, len, "%s", s);
	for (c = buf; *c != '\0'; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	return buf;
}

/*
 * Where a child may connect: a worker to its server's url, the controller
 * to its providers' base URLs.  -1 for anywhere else.
 */
static int
allowed_url(const struct child_proc *cp, const char *host, uint16_t port,
    struct connect_to *ct)
{
	const struct server_conf	*srv;
	const struct provider_conf	*pv;
	const char			*url;

	if (cp->cp_kind == PROC_WORKER) {
		srv = config_find_server(parent_conf(), cp->cp_name);
		if (srv == NULL || srv->srv_url == NULL ||
		    !http_url_matches(srv->srv_url, host, port))
			return -1;
		ct->ct_url = srv->srv_url;
		ct->ct_timeout_ms = srv->srv_connect_timeout_ms;
		ct->ct_allow = srv->srv_allow_addr;
		ct->ct_nallow = srv->srv_nallow_addr;
		return 0;
	}
	if (cp->cp_kind != PROC_CONTROLLER)
		return -1;
	TAILQ_FOREACH(pv, &parent_conf()->c_providers, pv_entry)
		if ((url = provider_base_url(pv)) != NULL &&
		    http_url_matches(url, host, port)) {
			ct->ct_url = url;
			ct->ct_timeout_ms = PROVIDER_CONNECT_TIMEOUT_MS;
			ct->ct_allow = pv->pv_allow_addr;
			ct->ct_nallow = pv->pv_nallow_addr;
			return 0;
		}
	return -1;
}

int
parent_recv_connect(struct peer *p, struct msg *m, struct json_object *o)
{
	struct child_proc	*worker = p->p_arg;
	struct connect_to	 ct;
	const char		*host;
	char			 buf[HTTP_HOST_MAX + 3];
	int64_t			 port;
	unsigned int		 n;

	/* Room for the brackets of an IPv6 literal. */
	if (json_get_str(o, "host", HTTP_HOST_MAX + 2, 0, &host) == -1 ||
	    json_get_int(o, "port", 1, UINT16_MAX, 0, &port) == -1)
		return -1;
	if (allowed_url(worker, host, (uint16_t)port, &ct) == -1) {
		log_warnx("%s asked to connect to \"%s\" port %" PRId64
		    ", which is not a url of its configuration",
		    worker->cp_peer.p_name, defang(host, buf, sizeof(buf)),
		    port);
		return -1;
	}
	/* The worker numbers its requests: a number in use is a lie. */
	if (connect_lookup(worker, m->m_hdr.mh_id, &n) != NULL)
		return -1;
	if (n >= (worker->cp_kind == PROC_CONTROLLER ?
	    CONNECT_MAX_PENDING_CONTROLLER : CONNECT_MAX_PENDING)) {
		send_failed(worker, m->m_hdr.mh_id,
		    "too many connections in progress");
		return 0;
	}
	cr_resolve(cr_new(worker, m->m_hdr.mh_id, &ct));
	return 0;
}

void
parent_connects_orphaned(const struct child_proc *worker)
{
	struct connect_req *cr, *next;

	TAILQ_FOREACH_SAFE(cr, &connects, cr_entry, next)
		if (cr->cr_worker == worker)
			cr_end(cr);
}

/*
 * At exit, after the event loop has stopped and before the event base is
 * freed: no callback can run any more, so even records waiting for a
 * cancelled lookup's answer can go.  libevent releases a cancelled lookup
 * only in that callback, so one still in flight here leaves a few hundred
 * bytes of libevent's behind; parent_connects_orphaned() at shutdown,
 * while the loop still runs, avoids that.  Running the loop from here
 * instead would dispatch unrelated events in the middle of clean-up.
 */
void
parent_connects_free_all(void)
{
	struct connect_req *cr;

	while ((cr = TAILQ_FIRST(&connects)) != NULL) {
		if (cr->cr_dns != NULL && !cr->cr_dns_cancelled)
			evdns_getaddrinfo_cancel(cr->cr_dns);
		cr_free(cr);
	}
	if (dns != NULL) {
		evdns_base_free(dns, 0);
		dns = NULL;
	}
}
