/*
 * HTTP/1.1 client: see http_client.h.  One request at a time per
 * connection (no pipelining); finished connections wait in a per-client
 * pool keyed by scheme, host and port.
 *
 * Lifetime rules.  A request is freed by rq_end() after on_done, or by
 * http_request_cancel(); while a user callback runs (rq_busy) freeing is
 * deferred, and every caller of a callback checks rq_alive() afterwards
 * and touches nothing if the request has gone.  A connector call may
 * outlive its request: it holds a struct http_pending, which the request
 * orphans when it goes, so that a late answer only closes the socket.
 */
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

#include "common/http_client.h"
#include "common/log.h"
#include "common/util.h"

#define HTTP_URL_MAX	8192
#define HTTP_METHOD_MAX	32
#define HTTP_WHY_MAX	512
#define HTTP_NAME_MAX	(HTTP_HOST_MAX + 8)	/* "[host]:port" */

struct http_url {
	int		 u_tls;
	int		 u_ip;		/* host is an IP literal */
	uint16_t	 u_port;
	char		 u_host[HTTP_HOST_MAX + 1];	/* no brackets */
	char		 u_name[HTTP_NAME_MAX + 1];	/* host:port */
	char		 u_key[HTTP_NAME_MAX + 10];	/* pool key */
	const char	*u_path;	/* into the caller's URL */
	size_t		 u_pathlen;
};

struct http_conn {
	TAILQ_ENTRY(http_conn)	 cn_entry;	/* in hc_idle while pooled */
	struct http_client	*cn_client;
	struct http_request	*cn_req;	/* NULL while pooled */
	struct bufferevent	*cn_bev;
	char			 cn_key[HTTP_NAME_MAX + 10];
	int			 cn_tls;
	int			 cn_ready;	/* TLS handshake done */
	int			 cn_pooled;
	unsigned int		 cn_served;	/* responses completed */
};
TAILQ_HEAD(http_conn_list, http_conn);

/* An outstanding connector call; see the comment at the top. */
struct http_pending {
	struct http_request	*pd_req;	/* NULL once orphaned */
	struct http_direct	 pd_direct;	/* the default connector's */
};

struct http_headers {
	char		**hh_fields;	/* "name\0value\0" each */
	size_t		  hh_n;
	size_t		  hh_cap;
};

enum rq_state {
	RQ_CONNECTING,		/* connector, then TLS handshake */
	RQ_STATUS,
	RQ_HEADERS,
	RQ_BODY_LENGTH,
	RQ_BODY_CLOSE,
	RQ_CHUNK_SIZE,
	RQ_CHUNK_DATA,
	RQ_CHUNK_END,
	RQ_TRAILERS,
	RQ_NSTATES
};

struct http_request {
	TAILQ_ENTRY(http_request) rq_entry;
	struct http_client	*rq_client;
	struct http_conn	*rq_conn;
	struct http_pending	*rq_pending;
	struct http_callbacks	 rq_cb;
	void			*rq_arg;
	struct http_url		 rq_url;
	struct evbuffer		*rq_out;	/* request, kept for a retry */
	struct event		*rq_conn_ev;
	struct event		*rq_total_ev;
	struct event		*rq_defer_ev;	/* failures while starting */
	uint64_t		 rq_conn_deadline;
	int			 rq_connect_ms;
	int			 rq_idle_ms;
	int			 rq_total_ms;
	size_t			 rq_max_hdr_bytes;
	size_t			 rq_max_headers;
	size_t			 rq_budget;	/* header/trailer bytes left */
	enum rq_state		 rq_state;
	struct http_headers	 rq_hdrs;
	int			 rq_status;
	int			 rq_minor;	/* HTTP/1.x */
	uint64_t		 rq_left;	/* body/chunk bytes to come */
	uint64_t		 rq_length;	/* Content-Length */
	int			 rq_head;	/* HEAD: never a body */
	int			 rq_idempotent;
	int			 rq_close;	/* we sent Connection: close */
	int			 rq_keepalive;
	int			 rq_got_bytes;	/* on this connection */
	int			 rq_retried;
	int			 rq_starting;	/* in http_request_start() */
	int			 rq_busy;	/* inside a user callback */
	int			 rq_dead;
	int			 rq_err;
	char			 rq_why[HTTP_WHY_MAX];
};
TAILQ_HEAD(http_request_list, http_request);

/*
 * The last TLS session a host gave us (its ticket), offered when we next
 * connect to the same scheme, host and port: an abbreviated handshake
 * instead of a full one with the certificate chain and its verification.
 * Kept per client (each has its own CA certificates), for TLS_KEPT hosts.
 */
#define TLS_KEPT	16

struct tls_kept {
	char			 tk_key[HTTP_NAME_MAX + 10];
	SSL_SESSION		*tk_session;
};

struct http_client {
	struct event_base	*hc_base;
	SSL_CTX			*hc_ssl;	/* NULL: no CA bundle */
	struct tls_kept		 hc_kept[TLS_KEPT];
	size_t			 hc_kept_next;	/* the slot to reuse next */
	char			 hc_ssl_err[HTTP_WHY_MAX];
	http_connect_fn		 hc_connect;	/* NULL: direct */
	void			*hc_connect_arg;
	int			 hc_max_idle;
	int			 hc_pool_idle_ms;
	struct http_conn_list	 hc_idle;
	struct http_request_list hc_reqs;
	char			 hc_err[HTTP_WHY_MAX];
};

static void	conn_read_cb(struct bufferevent *, void *);
static void	conn_event_cb(struct bufferevent *, short, void *);
static void	rq_connect(struct http_request *);
static void	rq_input(struct http_request *, struct evbuffer *);

/*
 * Character classes, by hand: the <ctype.h> ones follow the locale.
 */
static int
is_digit(int c)
{
	return c >= '0' && c <= '9';
}

static int
is_tchar(int c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c))
		return 1;
	return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int
is_token(const char *s, size_t n)
{
	size_t	 i;

	if (n == 0)
		return 0;
	for (i = 0; i < n; i++)
		if (!is_tchar((unsigned char)s[i]))
			return 0;
	return 1;
}

/* field-value: VCHAR, obs-text, SP and HTAB; no other control. */
static int
is_field_value(const char *s, size_t n)
{
	size_t		 i;
	unsigned char	 c;

	for (i = 0; i < n; i++) {
		c = (unsigned char)s[i];
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return 0;
	}
	return 1;
}

static void
ms_to_tv(int ms, struct timeval *tv)
{
	tv->tv_sec = ms / 1000;
	tv->tv_usec = (ms % 1000) * 1000;
}

const char *
http_err_str(int err)
{
	static const char *const names[] = {
		"ok", "connect", "tls", "timeout", "protocol", "closed",
		"cancelled",
	};

	if (err < 0 || (size_t)err >= sizeof(names) / sizeof(names[0]))
		return "unknown";
	return names[err];
}

/*
 * Headers.
 */
static void
headers_clear(struct http_headers *h)
{
	size_t	 i;

	for (i = 0; i < h->hh_n; i++)
		free(h->hh_fields[i]);
	free(h->hh_fields);
	memset(h, 0, sizeof(*h));
}

/* Parse "name: value"; -1 on anything RFC 9112 says to reject. */
static int
headers_add(struct http_headers *h, const char *line, size_t len)
{
	const char	*colon, *v, *e;
	size_t		 nlen, cap;
	char		*f, **nv;

	if ((colon = memchr(line, ':', len)) == NULL)
		return -1;
	nlen = colon - line;
	if (!is_token(line, nlen))	/* also rejects obs-fold */
		return -1;
	v = colon + 1;
	e = line + len;
	while (v < e && (*v == ' ' || *v == '\t'))
		v++;
	while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	if (!is_field_value(v, e - v))
		return -1;
	if (h->hh_n == h->hh_cap) {
		cap = h->hh_cap ? h->hh_cap * 2 : 16;
		if ((nv = reallocarray(h->hh_fields, cap, sizeof(*nv))) == NULL)
			return -1;
		h->hh_fields = nv;
		h->hh_cap = cap;
	}
	if ((f = malloc(nlen + (e - v) + 2)) == NULL)
		return -1;
	memcpy(f, line, nlen);
	f[nlen] = '\0';
	memcpy(f + nlen + 1, v, e - v);
	f[nlen + 1 + (e - v)] = '\0';
	h->hh_fields[h->hh_n++] = f;
	return 0;
}

const char *
http_headers_get(const struct http_headers *h, const char *name)
{
	size_t	 i;

	for (i = 0; i < h->hh_n; i++)
		if (strcasecmp(h->hh_fields[i], name) == 0)
			return h->hh_fields[i] + strlen(h->hh_fields[i]) + 1;
	return NULL;
}

size_t
http_headers_count(const struct http_headers *h)
{
	return h->hh_n;
}

int
http_headers_at(const struct http_headers *h, size_t i, const char **name,
    const char **value)
{
	if (i >= h->hh_n)
		return -1;
	*name = h->hh_fields[i];
	*value = h->hh_fields[i] + strlen(h->hh_fields[i]) + 1;
	return 0;
}

static size_t
headers_count_name(const struct http_headers *h, const char *name)
{
	size_t	 i, n = 0;

	for (i = 0; i < h->hh_n; i++)
		if (strcasecmp(h->hh_fields[i], name) == 0)
			n++;
	return n;
}

/* Does any Connection field list the token? */
static int
headers_connection_has(const struct http_headers *h, const char *token)
{
	const char	*v, *p;
	size_t		 i, n, tlen = strlen(token);

	for (i = 0; i < h->hh_n; i++) {
		if (strcasecmp(h->hh_fields[i], "connection") != 0)
			continue;
		v = h->hh_fields[i] + strlen(h->hh_fields[i]) + 1;
		for (p = v; *p != '\0'; p += n) {
			p += strspn(p, " \t,");
			n = strcspn(p, " \t,");
			if (n == tlen && strncasecmp(p, token, n) == 0)
				return 1;
		}
	}
	return 0;
}

/*
 * URLs.
 */
static int
url_host(struct http_url *u, const char *p, const char *end,
    const char **rest)
{
	const char	*h, *he;
	unsigned char	 buf[sizeof(struct in6_addr)];
	size_t		 i, n;
	int		 dotted = 1;

	if (*p == '[') {
		if ((he = memchr(p, ']', end - p)) == NULL)
			return -1;
		h = p + 1;
		*rest = he + 1;
	} else {
		h = p;
		if ((he = memchr(p, ':', end - p)) == NULL)
			he = end;
		*rest = he;
	}
	if ((n = he - h) == 0 || n > HTTP_HOST_MAX)
		return -1;
	memcpy(u->u_host, h, n);
	u->u_host[n] = '\0';
	if (*p == '[') {
		u->u_ip = 1;
		return inet_pton(AF_INET6, u->u_host, buf) == 1 ? 0 : -1;
	}
	for (i = 0; i < n; i++) {
		if (u->u_host[i] >= 'A' && u->u_host[i] <= 'Z')
			u->u_host[i] += 'a' - 'A';
		if (!is_digit(u->u_host[i]) && u->u_host[i] != '.')
			dotted = 0;
		if (!is_tchar((unsigned char)u->u_host[i]) ||
		    strchr("!#$%&'*+^`|~", u->u_host[i]) != NULL)
			return -1;
	}
	/* All digits and dots: an IPv4 address, or a mistake. */
	u->u_ip = inet_pton(AF_INET, u->u_host, buf) == 1;
	return dotted && !u->u_ip ? -1 : 0;
}

static int
url_port(struct http_url *u, const char *p, const char *end)
{
	long	 port = 0;

	if (p == end)
		return 0;
	if (*p++ != ':' || p == end || end - p > 5)
		return -1;
	for (; p < end; p++) {
		if (!is_digit(*p))
			return -1;
		port = port * 10 + (*p - '0');
	}
	if (port < 1 || port > 65535)
		return -1;
	u->u_port = port;
	return 0;
}

static const char *
url_parse(const char *url, struct http_url *u)
{
	const char	*p, *end, *rest;
	size_t		 i;

	memset(u, 0, sizeof(*u));
	if (strlen(url) > HTTP_URL_MAX)
		return "URL too long";
	if (strncasecmp(url, "http://", 7) == 0) {
		p = url + 7;
		u->u_port = 80;
	} else if (strncasecmp(url, "https://", 8) == 0) {
		p = url + 8;
		u->u_port = 443;
		u->u_tls = 1;
	} else
		return "URL must start with http:// or https://";
	end = p + strcspn(p, "/?#");
	if (memchr(p, '@', end - p) != NULL)
		return "user information in URL not supported";
	if (url_host(u, p, end, &rest) == -1)
		return "bad host in URL";
	if (url_port(u, rest, end) == -1)
		return "bad port in URL";
	u->u_path = end;
	u->u_pathlen = strcspn(end, "#");	/* never sent */
	for (i = 0; i < u->u_pathlen; i++)
		if ((unsigned char)end[i] <= 0x20 ||
		    (unsigned char)end[i] >= 0x7f)
			return "URL path must be percent-encoded";
	snprintf(u->u_name, sizeof(u->u_name), "%s%s%s:%u", u->u_ip &&
	    strchr(u->u_host, ':') ? "[" : "", u->u_host, u->u_ip &&
	    strchr(u->u_host, ':') ? "]" : "", u->u_port);
	snprintf(u->u_key, sizeof(u->u_key), "%s://%s",
	    u->u_tls ? "https" : "http", u->u_name);
	return NULL;
}

const char *
http_url_endpoint(const char *url, char *host, uint16_t *port)
{
	struct http_url	 u;
	const char	*why;

	if ((why = url_parse(url, &u)) != NULL)
		return why;
	memcpy(host, u.u_host, sizeof(u.u_host));
	*port = u.u_port;
	return NULL;
}

/*
 * Strict on purpose: the caller grants a connection to exactly this
 * endpoint, so anything that merely resolves alike (a trailing dot, an
 * IPv4-mapped address) is a different request.
 */
int
http_url_matches(const char *url, const char *host, uint16_t port)
{
	char		 want[HTTP_HOST_MAX + 1], got[HTTP_HOST_MAX + 1];
	unsigned char	 a[sizeof(struct in6_addr)], b[sizeof(struct in6_addr)];
	uint16_t	 want_port;
	size_t		 n = strlen(host);
	int		 bracketed = 0;

	if (http_url_endpoint(url, want, &want_port) != NULL ||
	    port != want_port)
		return 0;
	if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
		bracketed = 1;
		host++;
		n -= 2;
	}
	if (n == 0 || n > HTTP_HOST_MAX)
		return 0;
	memcpy(got, host, n);
	got[n] = '\0';
	if (inet_pton(AF_INET6, got, a) == 1)
		return inet_pton(AF_INET6, want, b) == 1 &&
		    memcmp(a, b, sizeof(a)) == 0;
	return !bracketed && strcasecmp(got, want) == 0;
}

/*
 * The client.
 */
static int	conn_index = -1;	/* the SSL's http_conn, for tls_keep */

static struct tls_kept *
tls_kept_find(struct http_client *hc, const char *key)
{
	size_t i;

	for (i = 0; i < TLS_KEPT; i++)
		if (hc->hc_kept[i].tk_session != NULL &&
		    strcmp(hc->hc_kept[i].tk_key, key) == 0)
			return &hc->hc_kept[i];
	return NULL;
}

/*
 * OpenSSL's new-session callback.  A copy is kept: OpenSSL marks the
 * connection's own session unusable when the connection ends without
 * close_notify, as many HTTP servers end theirs.  A TLS error, during a
 * handshake or after it, forgets the host's (tls_forget).
 */
static int
tls_keep(SSL *ssl, SSL_SESSION *session)
{
	struct http_conn	*cn = SSL_get_ex_data(ssl, conn_index);
	struct http_client	*hc;
	struct tls_kept		*tk;
	SSL_SESSION		*copy;

	if (cn == NULL || (hc = cn->cn_client) == NULL ||
	    !SSL_SESSION_is_resumable(session) ||
	    (copy = SSL_SESSION_dup(session)) == NULL)
		return 0;
	if ((tk = tls_kept_find(hc, cn->cn_key)) == NULL) {
		tk = &hc->hc_kept[hc->hc_kept_next++ % TLS_KEPT];
		snprintf(tk->tk_key, sizeof(tk->tk_key), "%s", cn->cn_key);
	}
	SSL_SESSION_free(tk->tk_session);
	tk->tk_session = copy;
	return 0;
}

static void
tls_forget(struct http_conn *cn)
{
	struct tls_kept *tk;

	if ((tk = tls_kept_find(cn->cn_client, cn->cn_key)) != NULL) {
		SSL_SESSION_free(tk->tk_session);
		tk->tk_session = NULL;
	}
}

static SSL_CTX *
tls_ctx_new(const char *ca_file, char *err, size_t errlen)
{
	SSL_CTX		*ctx;
	const char	*file = ca_file;
	char		 ebuf[128];

	if (file == NULL && (file = secure_getenv(
	    X509_get_default_cert_file_env())) == NULL)
		file = X509_get_default_cert_file();
	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL ||
	    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
		goto ssl_fail;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION |
	    SSL_OP_NO_RENEGOTIATION);
	if (conn_index == -1 && (conn_index = SSL_get_ex_new_index(0, NULL,
	    NULL, NULL, NULL)) == -1)
		goto ssl_fail;
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
	    SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, tls_keep);
	/*
	 * One file, read whole now.  A hashed directory (the other default)
	 * is read lazily during verification, after the sandbox is up.
	 */
	if (access(file, R_OK) == -1) {
		snprintf(ebuf, sizeof(ebuf), "%s", strerror(errno));
		goto fail;
	}
	if (SSL_CTX_load_verify_locations(ctx, file, NULL) != 1)
		goto ssl_fail;
	return ctx;
 ssl_fail:
	ERR_error_string_n(ERR_peek_last_error(), ebuf, sizeof(ebuf));
 fail:
	ERR_clear_error();
	snprintf(err, errlen, "cannot load CA certificates from %s: %s",
	    file, ebuf);
	SSL_CTX_free(ctx);
	return NULL;
}

struct http_client *
http_client_new(struct event_base *base, const struct http_client_opts *o)
{
	static const struct http_client_opts	 defaults;
	struct http_client			*hc;

	if (o == NULL)
		o = &defaults;
	if ((hc = calloc(1, sizeof(*hc))) == NULL)
		return NULL;
	hc->hc_base = base;
	hc->hc_connect = o->co_connect;
	hc->hc_connect_arg = o->co_connect_arg;
	hc->hc_max_idle = o->co_max_idle ? o->co_max_idle :
	    HTTP_DEFAULT_MAX_IDLE;
	hc->hc_pool_idle_ms = o->co_idle_timeout_ms > 0 ?
	    o->co_idle_timeout_ms : HTTP_DEFAULT_POOL_IDLE_MS;
	TAILQ_INIT(&hc->hc_idle);
	TAILQ_INIT(&hc->hc_reqs);
	hc->hc_ssl = tls_ctx_new(o->co_ca_file, hc->hc_ssl_err,
	    sizeof(hc->hc_ssl_err));
	/* A named CA file must load; no system bundle fails only https. */
	if (hc->hc_ssl == NULL && o->co_ca_file != NULL) {
		log_warnx("http client: %s", hc->hc_ssl_err);
		free(hc);
		return NULL;
	}
	return hc;
}

const char *
http_client_error(const struct http_client *hc)
{
	return hc->hc_err;
}

/*
 * Connections.
 */
static void
conn_free(struct http_conn *cn)
{
	if (cn->cn_pooled)
		TAILQ_REMOVE(&cn->cn_client->hc_idle, cn, cn_entry);
	/* libevent defers the free if we are inside this bev's callback. */
	bufferevent_free(cn->cn_bev);
	free(cn);
}

static SSL *
tls_new(struct http_client *hc, const struct http_url *u,
    struct http_conn *cn)
{
	X509_VERIFY_PARAM	*param;
	struct tls_kept		*tk;
	SSL			*ssl;

	if ((ssl = SSL_new(hc->hc_ssl)) == NULL)
		return NULL;
	if (SSL_set_ex_data(ssl, conn_index, cn) != 1 ||
	    ((tk = tls_kept_find(hc, u->u_key)) != NULL &&
	    SSL_set_session(ssl, tk->tk_session) != 1))
		goto fail;
	param = SSL_get0_param(ssl);
	X509_VERIFY_PARAM_set_hostflags(param,
	    X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	if (u->u_ip) {
		if (X509_VERIFY_PARAM_set1_ip_asc(param, u->u_host) != 1)
			goto fail;
	} else if (SSL_set_tlsext_host_name(ssl, u->u_host) != 1 ||
	    X509_VERIFY_PARAM_set1_host(param, u->u_host, 0) != 1)
		goto fail;
	if (SSL_set_alpn_protos(ssl, (const unsigned char *)"\x08http/1.1",
	    9) != 0)
		goto fail;
	return ssl;
 fail:
	SSL_free(ssl);
	return NULL;
}

static struct http_conn *
conn_new(struct http_client *hc, const struct http_url *u, int fd)
{
	struct http_conn	*cn;
	SSL			*ssl = NULL;
	int			 one = 1;

	/* Fails harmlessly on a connector's AF_UNIX socketpair. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if ((cn = calloc(1, sizeof(*cn))) == NULL)
		goto fail;
	cn->cn_client = hc;
	snprintf(cn->cn_key, sizeof(cn->cn_key), "%s", u->u_key);
	if (u->u_tls && (ssl = tls_new(hc, u, cn)) == NULL)
		goto fail;
	if (u->u_tls)
		cn->cn_bev = bufferevent_openssl_socket_new(hc->hc_base, fd,
		    ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
	else
		cn->cn_bev = bufferevent_socket_new(hc->hc_base, fd,
		    BEV_OPT_CLOSE_ON_FREE);
	if (cn->cn_bev == NULL)
		goto fail;
	if (u->u_tls)	/* we check close_notify ourselves: rq_eof() */
		bufferevent_openssl_set_allow_dirty_shutdown(cn->cn_bev, 1);
	cn->cn_tls = u->u_tls;
	cn->cn_ready = !u->u_tls;
	return cn;
 fail:
	SSL_free(ssl);
	free(cn);
	close(fd);
	return NULL;
}

static size_t
pool_count(struct http_client *hc, const char *key)
{
	struct http_conn	*cn;
	size_t			 n = 0;

	TAILQ_FOREACH(cn, &hc->hc_idle, cn_entry)
		if (strcmp(cn->cn_key, key) == 0)
			n++;
	return n;
}

/* Park a connection; it dies on any byte, EOF or the idle timeout. */
static void
pool_put(struct http_client *hc, struct http_conn *cn)
{
	struct timeval	 tv;

	cn->cn_served++;
	if (hc->hc_max_idle <= 0 ||
	    pool_count(hc, cn->cn_key) >= (size_t)hc->hc_max_idle) {
		conn_free(cn);
		return;
	}
	ms_to_tv(hc->hc_pool_idle_ms, &tv);
	bufferevent_set_timeouts(cn->cn_bev, &tv, NULL);
	bufferevent_setcb(cn->cn_bev, conn_read_cb, NULL, conn_event_cb, cn);
	bufferevent_enable(cn->cn_bev, EV_READ);
	TAILQ_INSERT_HEAD(&hc->hc_idle, cn, cn_entry);
	cn->cn_pooled = 1;
}

static struct http_conn *
pool_take(struct http_client *hc, const char *key)
{
	struct http_conn	*cn;

	TAILQ_FOREACH(cn, &hc->hc_idle, cn_entry)
		if (strcmp(cn->cn_key, key) == 0) {
			TAILQ_REMOVE(&hc->hc_idle, cn, cn_entry);
			cn->cn_pooled = 0;
			return cn;
		}
	return NULL;
}

/*
 * Request lifetime.
 */

/* Let go of everything that could call us back. */
static void
rq_detach(struct http_request *rq)
{
	if (rq->rq_conn_ev != NULL)
		evtimer_del(rq->rq_conn_ev);
	if (rq->rq_total_ev != NULL)
		evtimer_del(rq->rq_total_ev);
	if (rq->rq_defer_ev != NULL)
		event_del(rq->rq_defer_ev);
	if (rq->rq_pending != NULL) {
		rq->rq_pending->pd_req = NULL;
		rq->rq_pending = NULL;
	}
	if (rq->rq_conn != NULL) {
		rq->rq_conn->cn_req = NULL;
		conn_free(rq->rq_conn);
		rq->rq_conn = NULL;
	}
}

static void
rq_free(struct http_request *rq)
{
	rq_detach(rq);
	if (rq->rq_conn_ev != NULL)
		event_free(rq->rq_conn_ev);
	if (rq->rq_total_ev != NULL)
		event_free(rq->rq_total_ev);
	if (rq->rq_defer_ev != NULL)
		event_free(rq->rq_defer_ev);
	if (rq->rq_out != NULL)
		evbuffer_free(rq->rq_out);
	headers_clear(&rq->rq_hdrs);
	TAILQ_REMOVE(&rq->rq_client->hc_reqs, rq, rq_entry);
	free(rq);
}

/* After a user callback: -1 (and the request is gone) if it was cancelled. */
static int
rq_alive(struct http_request *rq)
{
	if (!rq->rq_dead)
		return 0;
	if (rq->rq_busy == 0)
		rq_free(rq);
	return -1;
}

static void
rq_end(struct http_request *rq, int err, const char *why)
{
	rq_detach(rq);
	rq->rq_dead = 1;	/* a cancel from on_done is a no-op */
	if (rq->rq_cb.cb_done != NULL) {
		rq->rq_busy++;
		rq->rq_cb.cb_done(rq, err, why, rq->rq_arg);
		rq->rq_busy--;
	}
	if (rq->rq_busy == 0)
		rq_free(rq);
}

/* Always -1, for the parsing steps' convenience. */
static int __attribute__((format(printf, 3, 4)))
rq_fail(struct http_request *rq, int err, const char *fmt, ...)
{
	va_list	 ap;

	va_start(ap, fmt);
	vsnprintf(rq->rq_why, sizeof(rq->rq_why), fmt, ap);
	va_end(ap);
	rq->rq_err = err;
	if (rq->rq_starting)	/* never call back from inside start */
		event_active(rq->rq_defer_ev, EV_TIMEOUT, 1);
	else
		rq_end(rq, err, rq->rq_why);
	return -1;
}

static void
rq_defer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_request	*rq = arg;

	(void)fd;
	(void)what;
	rq_end(rq, rq->rq_err, rq->rq_why);
}

/* The response is complete: pool the connection if both sides allow. */
static int
rq_finish(struct http_request *rq)
{
	struct http_conn	*cn = rq->rq_conn;
	struct bufferevent	*bev = cn->cn_bev;

	rq->rq_conn = NULL;
	cn->cn_req = NULL;
	if (rq->rq_keepalive &&
	    evbuffer_get_length(bufferevent_get_input(bev)) == 0 &&
	    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		pool_put(rq->rq_client, cn);
	else
		conn_free(cn);
	rq_end(rq, HTTP_OK, "ok");
	return -1;
}

static void
rq_conn_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_request	*rq = arg;

	(void)fd;
	(void)what;
	rq_fail(rq, HTTP_ERR_TIMEOUT, "timed out after %d ms connecting to %s",
	    rq->rq_connect_ms, rq->rq_url.u_name);
}

static void
rq_total_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct http_request	*rq = arg;

	(void)fd;
	(void)what;
	rq_fail(rq, HTTP_ERR_TIMEOUT, "timed out after %d ms (total request "
	    "timeout)", rq->rq_total_ms);
}

int
http_request_sent(const struct http_request *rq)
{
	return rq != NULL && rq->rq_state != RQ_CONNECTING;
}

/* Connected (and TLS done): the request is on its way. */
static void
rq_ready(struct http_request *rq)
{
	struct timeval	 tv;

	evtimer_del(rq->rq_conn_ev);
	rq->rq_state = RQ_STATUS;
	ms_to_tv(rq->rq_idle_ms, &tv);
	bufferevent_set_timeouts(rq->rq_conn->cn_bev, &tv, NULL);
}

static void
rq_attach(struct http_request *rq, struct http_conn *cn)
{
	struct bufferevent	*bev = cn->cn_bev;

	cn->cn_req = rq;
	rq->rq_conn = cn;
	rq->rq_got_bytes = 0;
	rq->rq_state = RQ_CONNECTING;
	rq->rq_budget = rq->rq_max_hdr_bytes;
	bufferevent_setcb(bev, conn_read_cb, NULL, conn_event_cb, cn);
	bufferevent_set_timeouts(bev, NULL, NULL);
	if (bufferevent_write(bev, evbuffer_pullup(rq->rq_out, -1),
	    evbuffer_get_length(rq->rq_out)) == -1 ||
	    bufferevent_enable(bev, EV_READ | EV_WRITE) == -1) {
		rq_fail(rq, HTTP_ERR_CONNECT, "cannot write to %s",
		    rq->rq_url.u_name);
		return;
	}
	if (cn->cn_ready)
		rq_ready(rq);
}

static void
rq_connected(int fd, const char *error, void *arg)
{
	struct http_pending	*pd = arg;
	struct http_request	*rq = pd->pd_req;
	struct http_conn	*cn;

	free(pd);
	if (rq == NULL) {		/* orphaned: cancelled or timed out */
		if (fd != -1)
			close(fd);
		return;
	}
	rq->rq_pending = NULL;
	if (fd == -1) {
		if (monotonic_ms() >= rq->rq_conn_deadline)
			rq_fail(rq, HTTP_ERR_TIMEOUT, "timed out after %d ms "
			    "connecting to %s", rq->rq_connect_ms,
			    rq->rq_url.u_name);
		else
			rq_fail(rq, HTTP_ERR_CONNECT, "%s", error != NULL ?
			    error : "connect failed");
		return;
	}
	if ((cn = conn_new(rq->rq_client, &rq->rq_url, fd)) == NULL) {
		rq_fail(rq, HTTP_ERR_CONNECT, "cannot set up connection to %s",
		    rq->rq_url.u_name);
		return;
	}
	rq_attach(rq, cn);
}

static void
rq_connect(struct http_request *rq)
{
	struct http_client	*hc = rq->rq_client;
	struct http_pending	*pd;
	struct timeval		 tv;
	http_connect_fn		 fn = hc->hc_connect;
	void			*arg = hc->hc_connect_arg;

	rq->rq_state = RQ_CONNECTING;
	if ((pd = calloc(1, sizeof(*pd))) == NULL) {
		rq_fail(rq, HTTP_ERR_CONNECT, "out of memory");
		return;
	}
	pd->pd_req = rq;
	rq->rq_pending = pd;
	rq->rq_conn_deadline = monotonic_ms() + rq->rq_connect_ms;
	ms_to_tv(rq->rq_connect_ms, &tv);
	evtimer_add(rq->rq_conn_ev, &tv);
	if (fn == NULL) {
		pd->pd_direct.hd_base = hc->hc_base;
		pd->pd_direct.hd_timeout_ms = rq->rq_connect_ms;
		fn = http_connect_direct;
		arg = &pd->pd_direct;
	}
	fn(rq->rq_url.u_host, rq->rq_url.u_port, rq_connected, pd, arg);
}

/*
 * A reused connection may have been closed by the server just as we
 * picked it; that is no fault of the request, so an idempotent one gets
 * one more go on a fresh connection.
 */
static int
rq_retry(struct http_request *rq)
{
	if (rq->rq_got_bytes || rq->rq_conn->cn_served == 0 ||
	    rq->rq_retried || !rq->rq_idempotent)
		return 0;
	rq->rq_retried = 1;
	rq->rq_conn->cn_req = NULL;
	conn_free(rq->rq_conn);
	rq->rq_conn = NULL;
	rq_connect(rq);
	return 1;
}

/*
 * Response parsing.  Each step returns 1 to go on, 0 for more input, or
 * -1 when the request has ended (it is gone: touch nothing).
 */

/* A line (CRLF or LF) charged to *budget: 1, 0 for more, -1 too long. */
static int
take_line(struct evbuffer *in, size_t *budget, char **line, size_t *len)
{
	struct evbuffer_ptr	 p;
	size_t			 eol;

	p = evbuffer_search_eol(in, NULL, &eol, EVBUFFER_EOL_CRLF);
	if (p.pos == -1)
		return evbuffer_get_length(in) > *budget ? -1 : 0;
	if ((size_t)p.pos + eol > *budget)
		return -1;
	*budget -= p.pos + eol;
	if ((*line = evbuffer_readln(in, len, EVBUFFER_EOL_CRLF)) == NULL)
		return -1;
	return 1;
}

static int
parse_status(const char *s, size_t len, int *minor, int *status)
{
	if (len < 12 || memcmp(s, "HTTP/1.", 7) != 0 || !is_digit(s[7]) ||
	    s[8] != ' ' || !is_digit(s[9]) || !is_digit(s[10]) ||
	    !is_digit(s[11]) || (len > 12 && s[12] != ' ') ||
	    !is_field_value(s, len))
		return -1;
	*minor = s[7] - '0';
	*status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
	return *status >= 100 ? 0 : -1;
}

static int
rq_header_line(struct http_request *rq, struct evbuffer *in, char **line,
    size_t *len)
{
	int	 r;

	if ((r = take_line(in, &rq->rq_budget, line, len)) == -1)
		return rq_fail(rq, HTTP_ERR_PROTOCOL, "response header larger "
		    "than %zu bytes", rq->rq_max_hdr_bytes);
	return r;
}

static int
step_connecting(struct http_request *rq, struct evbuffer *in)
{
	(void)rq;
	(void)in;
	return 0;	/* TLS hands us nothing before the handshake ends */
}

static int
step_status(struct http_request *rq, struct evbuffer *in)
{
	char	*line;
	size_t	 len;
	int	 r;

	if ((r = rq_header_line(rq, in, &line, &len)) != 1)
		return r;
	r = parse_status(line, len, &rq->rq_minor, &rq->rq_status);
	free(line);
	if (r == -1)
		return rq_fail(rq, HTTP_ERR_PROTOCOL, "malformed status line "
		    "from %s", rq->rq_url.u_name);
	rq->rq_state = RQ_HEADERS;
	return 1;
}

static int
parse_length(const char *s, uint64_t *out)
{
	uint64_t	 v = 0;

	if (*s == '\0' || strlen(s) > 18)	/* < 10^18: no overflow */
		return -1;
	for (; *s != '\0'; s++) {
		if (!is_digit(*s))
			return -1;
		v = v * 10 + (*s - '0');
	}
	*out = v;
	return 0;
}

/* Every Content-Length field must agree (RFC 9112 6.3). */
static int
rq_content_length(struct http_request *rq)
{
	const struct http_headers	*h = &rq->rq_hdrs;
	const char			*name, *v;
	uint64_t			 n;
	size_t				 i;
	int				 seen = 0;

	for (i = 0; http_headers_at(h, i, &name, &v) == 0; i++) {
		if (strcasecmp(name, "content-length") != 0)
			continue;
		if (parse_length(v, &n) == -1 || (seen && n != rq->rq_length))
			return rq_fail(rq, HTTP_ERR_PROTOCOL,
			    "bad Content-Length \"%.32s\"", v);
		rq->rq_length = n;
		seen = 1;
	}
	return 0;
}

/* How the body is delimited (RFC 9112 6.3); 1 if there is none. */
static int
rq_framing(struct http_request *rq)
{
	const struct http_headers	*h = &rq->rq_hdrs;
	const char			*te;

	if (rq->rq_head || rq->rq_status == 204 || rq->rq_status == 304)
		return 1;
	te = http_headers_get(h, "transfer-encoding");
	if (te != NULL && http_headers_get(h, "content-length") != NULL)
		return rq_fail(rq, HTTP_ERR_PROTOCOL, "response has both "
		    "Content-Length and Transfer-Encoding");
	if (te != NULL) {
		if (headers_count_name(h, "transfer-encoding") != 1 ||
		    strcasecmp(te, "chunked") != 0)
			return rq_fail(rq, HTTP_ERR_PROTOCOL, "unsupported "
			    "Transfer-Encoding \"%.32s\"", te);
		rq->rq_state = RQ_CHUNK_SIZE;
		return 0;
	}
	if (http_headers_get(h, "content-length") != NULL) {
		if (rq_content_length(rq) == -1)
			return -1;
		rq->rq_left = rq->rq_length;
		rq->rq_state = RQ_BODY_LENGTH;
		return rq->rq_left == 0;
	}
	rq->rq_state = RQ_BODY_CLOSE;
	return 0;
}

static int
rq_headers_done(struct http_request *rq)
{
	int	 nobody;

	if (rq->rq_status < 200) {
		if (rq->rq_status == 101)
			return rq_fail(rq, HTTP_ERR_PROTOCOL, "unexpected "
			    "101 Switching Protocols");
		headers_clear(&rq->rq_hdrs);	/* interim: wait for more */
		rq->rq_state = RQ_STATUS;
		return 1;
	}
	if ((nobody = rq_framing(rq)) == -1)
		return -1;
	rq->rq_keepalive = rq->rq_minor == 1 && !rq->rq_close &&
	    rq->rq_state != RQ_BODY_CLOSE &&
	    !headers_connection_has(&rq->rq_hdrs, "close");
	if (rq->rq_cb.cb_response != NULL) {
		rq->rq_busy++;
		rq->rq_cb.cb_response(rq, rq->rq_status, &rq->rq_hdrs,
		    rq->rq_arg);
		rq->rq_busy--;
		if (rq_alive(rq) == -1)
			return -1;
	}
	return nobody ? rq_finish(rq) : 1;
}

static int
step_headers(struct http_request *rq, struct evbuffer *in)
{
	char	*line;
	size_t	 len;
	int	 r;

	if ((r = rq_header_line(rq, in, &line, &len)) != 1)
		return r;
	if (len == 0) {
		free(line);
		return rq_headers_done(rq);
	}
	if (rq->rq_hdrs.hh_n >= rq->rq_max_headers) {
		free(line);
		return rq_fail(rq, HTTP_ERR_PROTOCOL, "more than %zu response "
		    "header fields", rq->rq_max_headers);
	}
	r = headers_add(&rq->rq_hdrs, line, len);
	free(line);
	if (r == -1)
		return rq_fail(rq, HTTP_ERR_PROTOCOL, "malformed response "
		    "header field");
	return 1;
}

/* Hand n bytes of body to the caller, straight from the buffer. */
static int
rq_deliver(struct http_request *rq, struct evbuffer *in, size_t n)
{
	struct evbuffer_iovec	 v;
	size_t			 take;

	while (n > 0) {
		if (evbuffer_peek(in, n, NULL, &v, 1) < 1)
			break;
		take = v.iov_len < n ? v.iov_len : n;
		if (rq->rq_cb.cb_body != NULL) {
			rq->rq_busy++;
			rq->rq_cb.cb_body(rq, v.iov_base, take, rq->rq_arg);
			rq->rq_busy--;
			if (rq_alive(rq) == -1)
				return -1;
		}
		evbuffer_drain(in, take);
		n -= take;
	}
	return 0;
}

static int
step_body_length(struct http_request *rq, struct evbuffer *in)
{
	size_t	 n = evbuffer_get_length(in);

	if (n == 0)
		return 0;
	if (n > rq->rq_left)
		n = rq->rq_left;
	rq->rq_left -= n;
	if (rq_deliver(rq, in, n) == -1)
		return -1;
	return rq->rq_left == 0 ? rq_finish(rq) : 0;
}

static int
step_body_close(struct http_request *rq, struct evbuffer *in)
{
	if (rq_deliver(rq, in, evbuffer_get_length(in)) == -1)
		return -1;
	return 0;
}

/* chunk-size [ BWS ";" chunk-ext ]; at most 16 hex digits. */
static int
parse_chunk_size(const char *s, size_t len, uint64_t *out)
{
	uint64_t	 v = 0;
	size_t		 i;
	int		 c, d;

	for (i = 0; i < len; i++) {
		c = (unsigned char)s[i];
		if (is_digit(c))
			d = c - '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			d = (c | 0x20) - 'a' + 10;
		else
			break;
		if (i == 16)
			return -1;
		v = v << 4 | d;
	}
	if (i == 0)
		return -1;
	while (i < len && (s[i] == ' ' || s[i] == '\t'))
		i++;
	if (i < len && (s[i] != ';' || !is_field_value(s + i, len - i)))
		return -1;
	*out = v;
	return 0;
}

static int
step_chunk_size(struct http_request *rq, struct evbuffer *in)
{
	size_t	 budget = HTTP_CHUNK_LINE_MAX, len;
	char	*line;
	int	 r;

	if ((r = take_line(in, &budget, &line, &len)) == 0)
		return 0;
	if (r == -1)
		return rq_fail(rq, HTTP_ERR_PROTOCOL, "chunk size line longer "
		    "than %d bytes", HTTP_CHUNK_LINE_MAX);
	r = parse_chunk_size(line, len, &rq->rq_left);
	free(line);
	if (r == -1)
		return rq_fail(rq, HTTP_ERR_PROTOCOL, "bad chunk size");
	if (rq->rq_left == 0) {
		rq->rq_budget = rq->rq_max_hdr_bytes;
		rq->rq_state = RQ_TRAILERS;
	} else
		rq->rq_state = RQ_CHUNK_DATA;
	return 1;
}

static int
step_chunk_data(struct http_request *rq, struct evbuffer *in)
{
	size_t	 n = evbuffer_get_length(in);

	if (n == 0)
		return 0;
	if (n > rq->rq_left)
		n = rq->rq_left;
	rq->rq_left -= n;
	if (rq->rq_left == 0)
		rq->rq_state = RQ_CHUNK_END;
	if (rq_deliver(rq, in, n) == -1)
		return -1;
	return 1;
}

static int
step_chunk_end(struct http_request *rq, struct evbuffer *in)
{
	size_t	 budget = 2, len;
	char	*line;
	int	 r;

	if ((r = take_line(in, &budget, &line, &len)) == 0)
		return 0;
	if (r == 1)
		free(line);
	if (r == -1 || len != 0)
		return rq_fail(rq, HTTP_ERR_PROTOCOL, "bad chunk: no CRLF "
		    "after chunk data");
	rq->rq_state = RQ_CHUNK_SIZE;
	return 1;
}

static int
step_trailers(struct http_request *rq, struct evbuffer *in)
{
	char	*line;
	size_t	 len;
	int	 r;

	if ((r = take_line(in, &rq->rq_budget, &line, &len)) == 0)
		return 0;
	if (r == -1)
		return rq_fail(rq, HTTP_ERR_PROTOCOL, "response trailer "
		    "larger than %zu bytes", rq->rq_max_hdr_bytes);
	free(line);		/* trailers are read and dropped */
	return len == 0 ? rq_finish(rq) : 1;
}

static int (*const rq_steps[RQ_NSTATES])(struct http_request *,
    struct evbuffer *) = {
	[RQ_CONNECTING] = step_connecting,
	[RQ_STATUS] = step_status,
	[RQ_HEADERS] = step_headers,
	[RQ_BODY_LENGTH] = step_body_length,
	[RQ_BODY_CLOSE] = step_body_close,
	[RQ_CHUNK_SIZE] = step_chunk_size,
	[RQ_CHUNK_DATA] = step_chunk_data,
	[RQ_CHUNK_END] = step_chunk_end,
	[RQ_TRAILERS] = step_trailers,
};

static void
rq_input(struct http_request *rq, struct evbuffer *in)
{
	while (rq_steps[rq->rq_state](rq, in) == 1)
		;
}

/*
 * Connection events.
 */
static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct http_conn	*cn = arg;
	struct evbuffer		*in = bufferevent_get_input(bev);

	if (cn->cn_req == NULL) {	/* pooled: the server must be quiet */
		conn_free(cn);
		return;
	}
	if (evbuffer_get_length(in) > 0)
		cn->cn_req->rq_got_bytes = 1;
	rq_input(cn->cn_req, in);
}

/* Drain libevent's copy of the OpenSSL error queue; keep the first. */
static unsigned long
conn_tls_error(struct http_conn *cn)
{
	unsigned long	 e, first = 0;

	if (!cn->cn_tls)
		return 0;
	while ((e = bufferevent_get_openssl_error(cn->cn_bev)) != 0)
		if (first == 0)
			first = e;
	ERR_clear_error();
	return first;
}

static void
rq_tls_failed(struct http_request *rq, short what, int saved_errno)
{
	struct http_conn	*cn = rq->rq_conn;
	SSL			*ssl = bufferevent_openssl_get_ssl(cn->cn_bev);
	unsigned long		 e = conn_tls_error(cn);
	long			 vr = SSL_get_verify_result(ssl);
	char			 ebuf[128];

	tls_forget(cn);
	if (vr != X509_V_OK)
		rq_fail(rq, HTTP_ERR_TLS, "certificate verify failed: %s "
		    "(host %s)", X509_verify_cert_error_string(vr),
		    rq->rq_url.u_host);
	else if (e != 0) {
		ERR_error_string_n(e, ebuf, sizeof(ebuf));
		rq_fail(rq, HTTP_ERR_TLS, "TLS handshake with %s failed: %s",
		    rq->rq_url.u_name, ERR_reason_error_string(e) != NULL ?
		    ERR_reason_error_string(e) : ebuf);
	} else if (what & BEV_EVENT_EOF || saved_errno == 0)
		rq_fail(rq, HTTP_ERR_TLS, "connection closed during TLS "
		    "handshake with %s", rq->rq_url.u_name);
	else
		rq_fail(rq, HTTP_ERR_TLS, "TLS handshake with %s failed: %s",
		    rq->rq_url.u_name, strerror(saved_errno));
}

static void
rq_eof(struct http_request *rq)
{
	SSL	*ssl;

	switch (rq->rq_state) {
	case RQ_BODY_CLOSE:
		/* Without close_notify a truncated body looks complete. */
		ssl = rq->rq_conn->cn_tls ?
		    bufferevent_openssl_get_ssl(rq->rq_conn->cn_bev) : NULL;
		if (ssl != NULL &&
		    !(SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN))
			rq_fail(rq, HTTP_ERR_CLOSED, "TLS connection closed "
			    "without close_notify: body may be truncated");
		else
			rq_finish(rq);
		break;
	case RQ_STATUS:
		if (!rq->rq_got_bytes) {
			rq_fail(rq, HTTP_ERR_CLOSED, "connection closed by %s "
			    "before response%s", rq->rq_url.u_name,
			    rq->rq_conn->cn_served ? " (reused connection, "
			    "request not retried)" : "");
			break;
		}
		/* FALLTHROUGH */
	case RQ_HEADERS:
		rq_fail(rq, HTTP_ERR_CLOSED, "connection closed by %s in "
		    "response header", rq->rq_url.u_name);
		break;
	case RQ_BODY_LENGTH:
		rq_fail(rq, HTTP_ERR_CLOSED, "connection closed by %s after "
		    "%ju of %ju body bytes", rq->rq_url.u_name,
		    (uintmax_t)(rq->rq_length - rq->rq_left),
		    (uintmax_t)rq->rq_length);
		break;
	default:
		rq_fail(rq, HTTP_ERR_CLOSED, "connection closed by %s in "
		    "chunked body", rq->rq_url.u_name);
		break;
	}
}

static void
rq_conn_event(struct http_request *rq, short what, int saved_errno)
{
	struct http_conn	*cn = rq->rq_conn;
	unsigned long		 e;

	if (what & BEV_EVENT_CONNECTED) {
		cn->cn_ready = 1;
		if (rq->rq_state == RQ_CONNECTING)
			rq_ready(rq);
		return;
	}
	if (rq->rq_state == RQ_CONNECTING) {
		rq_tls_failed(rq, what, saved_errno);
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		rq_fail(rq, HTTP_ERR_TIMEOUT, "timed out after %d ms waiting "
		    "for response%s", rq->rq_idle_ms, rq->rq_state >=
		    RQ_BODY_LENGTH ? " body" : "");
		return;
	}
	if (rq_retry(rq))
		return;
	e = conn_tls_error(cn);
	/* OpenSSL 3 reports a missing close_notify as an error. */
	if (what & BEV_EVENT_EOF ||
	    (e != 0 && ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING))
		rq_eof(rq);
	else if (e != 0) {
		tls_forget(cn);
		rq_fail(rq, HTTP_ERR_TLS, "TLS error from %s: %s",
		    rq->rq_url.u_name, ERR_reason_error_string(e) != NULL ?
		    ERR_reason_error_string(e) : "unknown");
	} else
		rq_fail(rq, HTTP_ERR_CLOSED, "connection to %s failed: %s",
		    rq->rq_url.u_name, saved_errno ? strerror(saved_errno) :
		    "unknown error");
}

static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct http_conn	*cn = arg;
	int			 saved_errno = EVUTIL_SOCKET_ERROR();

	(void)bev;
	if (cn->cn_req == NULL)		/* pooled: EOF, error or idle */
		conn_free(cn);
	else
		rq_conn_event(cn->cn_req, what, saved_errno);
}

/*
 * Starting a request.
 */
static int
method_is(const char *m, const char *const *list)
{
	for (; *list != NULL; list++)
		if (strcmp(m, *list) == 0)
			return 1;
	return 0;
}

static const char *
rq_add_headers(struct http_request *rq, const struct http_request_opts *o)
{
	static const char *const reserved[] = {
		"host", "content-length", "transfer-encoding",
	};
	const struct http_field	*f;
	size_t			 i, j;

	for (i = 0; i < o->ro_nheaders; i++) {
		f = &o->ro_headers[i];
		if (f->hf_name == NULL || f->hf_value == NULL ||
		    !is_token(f->hf_name, strlen(f->hf_name)) ||
		    !is_field_value(f->hf_value, strlen(f->hf_value)))
			return "bad request header field";
		for (j = 0; j < sizeof(reserved) / sizeof(reserved[0]); j++)
			if (strcasecmp(f->hf_name, reserved[j]) == 0)
				return "request header field set by the client";
		if (strcasecmp(f->hf_name, "connection") == 0 &&
		    strcasestr(f->hf_value, "close") != NULL)
			rq->rq_close = 1;
		evbuffer_add_printf(rq->rq_out, "%s: %s\r\n", f->hf_name,
		    f->hf_value);
	}
	return NULL;
}

static const char *
rq_serialize(struct http_request *rq, const char *method,
    const struct http_request_opts *o)
{
	static const char *const with_body[] = { "POST", "PUT", "PATCH", NULL };
	const struct http_url	*u = &rq->rq_url;
	const char		*err;
	int			 dflt = u->u_port == (u->u_tls ? 443 : 80);
	int			 v6 = strchr(u->u_host, ':') != NULL;

	if ((rq->rq_out = evbuffer_new()) == NULL)
		return "out of memory";
	evbuffer_add_printf(rq->rq_out, "%s %s%.*s HTTP/1.1\r\n"
	    "Host: %s%s%s", method, u->u_path[0] == '/' ? "" : "/",
	    (int)u->u_pathlen, u->u_path, v6 ? "[" : "", u->u_host,
	    v6 ? "]" : "");
	if (!dflt)
		evbuffer_add_printf(rq->rq_out, ":%u", u->u_port);
	evbuffer_add(rq->rq_out, "\r\n", 2);
	if ((err = rq_add_headers(rq, o)) != NULL)
		return err;
	if (o->ro_body_len > 0 || method_is(method, with_body))
		evbuffer_add_printf(rq->rq_out, "Content-Length: %zu\r\n",
		    o->ro_body_len);
	evbuffer_add(rq->rq_out, "\r\n", 2);
	if (o->ro_body_len > 0 &&
	    evbuffer_add(rq->rq_out, o->ro_body, o->ro_body_len) == -1)
		return "out of memory";
	return NULL;
}

static const char *
rq_setup(struct http_request *rq, const struct http_request_opts *o)
{
	static const char *const idempotent[] = {
		"GET", "HEAD", "DELETE", NULL
	};
	struct http_client	*hc = rq->rq_client;
	const char		*err, *m = o->ro_method;

	if (m == NULL || strlen(m) > HTTP_METHOD_MAX || !is_token(m, strlen(m)))
		return "bad request method";
	if (o->ro_url == NULL)
		return "no URL";
	if ((err = url_parse(o->ro_url, &rq->rq_url)) != NULL)
		return err;
	if (rq->rq_url.u_tls && hc->hc_ssl == NULL)
		return hc->hc_ssl_err;
	if (o->ro_connect_timeout_ms < 0 || o->ro_idle_timeout_ms < 0 ||
	    o->ro_total_timeout_ms < 0 || (o->ro_body_len > 0 &&
	    o->ro_body == NULL))
		return "bad request options";
	rq->rq_connect_ms = o->ro_connect_timeout_ms ?
	    o->ro_connect_timeout_ms : HTTP_DEFAULT_CONNECT_MS;
	rq->rq_idle_ms = o->ro_idle_timeout_ms ? o->ro_idle_timeout_ms :
	    HTTP_DEFAULT_IDLE_MS;
	rq->rq_total_ms = o->ro_total_timeout_ms;
	rq->rq_max_hdr_bytes = o->ro_max_header_bytes ?
	    o->ro_max_header_bytes : HTTP_DEFAULT_HEADER_BYTES;
	rq->rq_max_headers = o->ro_max_headers ? o->ro_max_headers :
	    HTTP_DEFAULT_MAX_HEADERS;
	rq->rq_head = strcmp(m, "HEAD") == 0;
	rq->rq_idempotent = method_is(m, idempotent);
	if ((err = rq_serialize(rq, m, o)) != NULL)
		return err;
	if ((rq->rq_conn_ev = evtimer_new(hc->hc_base, rq_conn_timeout_cb,
	    rq)) == NULL || (rq->rq_total_ev = evtimer_new(hc->hc_base,
	    rq_total_timeout_cb, rq)) == NULL || (rq->rq_defer_ev =
	    event_new(hc->hc_base, -1, 0, rq_defer_cb, rq)) == NULL)
		return "out of memory";
	return NULL;
}

struct http_request *
http_request_start(struct http_client *hc, const struct http_request_opts *o,
    const struct http_callbacks *cb, void *arg)
{
	struct http_request	*rq;
	struct http_conn	*cn;
	struct timeval		 tv;
	const char		*err;

	if ((rq = calloc(1, sizeof(*rq))) == NULL) {
		snprintf(hc->hc_err, sizeof(hc->hc_err), "out of memory");
		return NULL;
	}
	rq->rq_client = hc;
	TAILQ_INSERT_TAIL(&hc->hc_reqs, rq, rq_entry);
	if ((err = rq_setup(rq, o)) != NULL) {
		snprintf(hc->hc_err, sizeof(hc->hc_err), "%s", err);
		rq_free(rq);
		return NULL;
	}
	if (cb != NULL)
		rq->rq_cb = *cb;
	rq->rq_arg = arg;
	rq->rq_starting = 1;
	if (rq->rq_total_ms > 0) {
		ms_to_tv(rq->rq_total_ms, &tv);
		evtimer_add(rq->rq_total_ev, &tv);
	}
	if ((cn = pool_take(hc, rq->rq_url.u_key)) != NULL)
		rq_attach(rq, cn);
	else
		rq_connect(rq);
	rq->rq_starting = 0;
	return rq;
}

void
http_request_cancel(struct http_request *rq)
{
	if (rq == NULL || rq->rq_dead)
		return;
	rq->rq_dead = 1;
	rq_detach(rq);
	if (rq->rq_busy == 0)
		rq_free(rq);
}

void
http_client_free(struct http_client *hc)
{
	struct http_request	*rq;
	struct http_conn	*cn;
	size_t			 i;

	if (hc == NULL)
		return;
	while ((rq = TAILQ_FIRST(&hc->hc_reqs)) != NULL) {
		rq->rq_dead = 1;
		rq_free(rq);
	}
	while ((cn = TAILQ_FIRST(&hc->hc_idle)) != NULL)
		conn_free(cn);
	for (i = 0; i < TLS_KEPT; i++)
		SSL_SESSION_free(hc->hc_kept[i].tk_session);
	SSL_CTX_free(hc->hc_ssl);
	free(hc);
}

/*
 * The direct connector.
 */
struct direct_conn {
	struct addrinfo		*dc_res;
	struct addrinfo		*dc_ai;		/* being tried */
	struct event_base	*dc_base;
	struct event		*dc_ev;
	int			 dc_fd;
	int			 dc_timeout_ms;
	http_connected_fn	 dc_done;
	void			*dc_arg;
	char			 dc_name[HTTP_NAME_MAX + 1];
	char			 dc_err[HTTP_WHY_MAX];
};

static void
dc_free(struct direct_conn *dc)
{
	if (dc->dc_ev != NULL)
		event_free(dc->dc_ev);
	if (dc->dc_fd != -1)
		close(dc->dc_fd);
	if (dc->dc_res != NULL)
		freeaddrinfo(dc->dc_res);
	free(dc);
}

static void
dc_report(struct direct_conn *dc)
{
	dc->dc_done(-1, dc->dc_err, dc->dc_arg);
	dc_free(dc);
}

static void
dc_report_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	dc_report(arg);
}

/* Report a failure from the loop, not from inside the connector call. */
static void
dc_report_later(struct direct_conn *dc)
{
	if ((dc->dc_ev = event_new(dc->dc_base, -1, 0, dc_report_cb,
	    dc)) == NULL) {
		dc_report(dc);
		return;
	}
	event_active(dc->dc_ev, EV_TIMEOUT, 1);
}

static void	dc_connect_cb(evutil_socket_t, short, void *);

/* Try addresses from dc_ai on; 0 while one is in progress, else -1. */
static int
dc_next(struct direct_conn *dc)
{
	struct addrinfo	*ai;
	struct timeval	 tv;
	int		 fd;

	for (; (ai = dc->dc_ai) != NULL; dc->dc_ai = ai->ai_next) {
		if ((fd = socket(ai->ai_family, ai->ai_socktype |
		    SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol)) == -1) {
			snprintf(dc->dc_err, sizeof(dc->dc_err),
			    "connect to %s: %s", dc->dc_name, strerror(errno));
			continue;
		}
		if ((connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
		    errno == EINPROGRESS) && (dc->dc_ev = event_new(
		    dc->dc_base, fd, EV_WRITE, dc_connect_cb, dc)) != NULL) {
			dc->dc_fd = fd;
			ms_to_tv(dc->dc_timeout_ms, &tv);
			event_add(dc->dc_ev, &tv);
			return 0;
		}
		snprintf(dc->dc_err, sizeof(dc->dc_err), "connect to %s: %s",
		    dc->dc_name, strerror(errno));
		close(fd);
	}
	return -1;
}

static void
dc_connect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct direct_conn	*dc = arg;
	socklen_t		 len = sizeof(int);
	int			 err = 0;

	event_free(dc->dc_ev);
	dc->dc_ev = NULL;
	if (what & EV_TIMEOUT)
		snprintf(dc->dc_err, sizeof(dc->dc_err), "connect to %s: "
		    "timed out after %d ms", dc->dc_name, dc->dc_timeout_ms);
	else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1 ||
	    err != 0)
		snprintf(dc->dc_err, sizeof(dc->dc_err), "connect to %s: %s",
		    dc->dc_name, strerror(err ? err : errno));
	else {
		dc->dc_fd = -1;
		dc->dc_done(fd, NULL, dc->dc_arg);
		dc_free(dc);
		return;
	}
	close(fd);
	dc->dc_fd = -1;
	dc->dc_ai = dc->dc_ai->ai_next;
	if (dc_next(dc) == -1)
		dc_report(dc);
}

void
http_connect_direct(const char *host, uint16_t port, http_connected_fn done,
    void *done_arg, void *connector_arg)
{
	const struct http_direct	*hd = connector_arg;
	struct direct_conn		*dc;
	struct addrinfo			 hints;
	char				 serv[8];
	int				 r;

	if ((dc = calloc(1, sizeof(*dc))) == NULL) {
		done(-1, "out of memory", done_arg);
		return;
	}
	dc->dc_fd = -1;
	dc->dc_base = hd->hd_base;
	dc->dc_timeout_ms = hd->hd_timeout_ms > 0 ? hd->hd_timeout_ms :
	    HTTP_DEFAULT_CONNECT_MS;
	dc->dc_done = done;
	dc->dc_arg = done_arg;
	snprintf(dc->dc_name, sizeof(dc->dc_name), "%s%s%s:%u",
	    strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
	    port);
	snprintf(serv, sizeof(serv), "%u", port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	if ((r = getaddrinfo(host, serv, &hints, &dc->dc_res)) != 0) {
		snprintf(dc->dc_err, sizeof(dc->dc_err), "resolve %s: %s",
		    host, gai_strerror(r));
		dc_report_later(dc);
		return;
	}
	dc->dc_ai = dc->dc_res;
	if (dc_next(dc) == -1)
		dc_report_later(dc);
}
