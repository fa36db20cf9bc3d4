/*
 * A small HTTP/1.1 client on libevent bufferevents, plain or TLS, written
 * for processes that stream responses (SSE, chunked LLM output) and that
 * may be sandboxed: certificates are loaded when the client is made, and
 * the TCP connection comes from a pluggable connector, so that a process
 * which may not resolve names or connect itself can ask someone who may.
 *
 * Every request ends with exactly one on_done, unless it is cancelled,
 * which suppresses all further callbacks.  Callbacks may cancel any
 * request and start new ones.  Nothing is called back from inside
 * http_request_start().  Writes to a peer that has gone raise SIGPIPE:
 * the process must ignore it, as mcpbroker's processes do.
 */
#ifndef MCPBROKER_HTTP_CLIENT_H
#define MCPBROKER_HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct http_client;
struct http_request;
struct http_headers;

enum http_err {
	HTTP_OK = 0,
	HTTP_ERR_CONNECT,	/* resolving or connecting failed */
	HTTP_ERR_TLS,		/* handshake or certificate verification */
	HTTP_ERR_TIMEOUT,
	HTTP_ERR_PROTOCOL,	/* the peer broke HTTP/1.1 or our limits */
	HTTP_ERR_CLOSED,	/* the peer closed or reset too early */
	HTTP_ERR_CANCELLED	/* never reported: cancel is silent */
};

/*
 * The connector's answer: a connected, non-blocking stream socket that the
 * client owns from here on, or -1 and a message.  It may come later, from
 * the event loop, but must come exactly once.
 */
typedef void	(*http_connected_fn)(int fd, const char *error,
		    void *done_arg);
typedef void	(*http_connect_fn)(const char *host, uint16_t port,
		    http_connected_fn done, void *done_arg,
		    void *connector_arg);

/* connector_arg of http_connect_direct(). */
struct http_direct {
	struct event_base	*hd_base;
	int			 hd_timeout_ms;	/* per address; 0: 30 s */
};

/*
 * getaddrinfo() (blocking) and a non-blocking connect to each address in
 * turn; done is always called from the event loop.  Not for sandboxes.
 */
void		 http_connect_direct(const char *host, uint16_t port,
		    http_connected_fn done, void *done_arg,
		    void *connector_arg);

struct http_client_opts {
	const char	*co_ca_file;	/* NULL: the system's CA bundle */
	http_connect_fn	 co_connect;	/* NULL: http_connect_direct */
	void		*co_connect_arg;
	int		 co_max_idle;	/* per scheme+host+port; 0: 4, <0: 0 */
	int		 co_idle_timeout_ms;	/* in the pool; 0: 30 s */
};

struct http_field {
	const char	*hf_name;
	const char	*hf_value;
};

struct http_request_opts {
	const char		*ro_method;	/* "GET", "POST", ... */
	const char		*ro_url;	/* http:// or https:// */
	const struct http_field	*ro_headers;	/* not Host, Content-Length */
	size_t			 ro_nheaders;
	const void		*ro_body;	/* copied */
	size_t			 ro_body_len;
	int			 ro_connect_timeout_ms;	/* 0: 30 s, incl. TLS */
	int			 ro_idle_timeout_ms;	/* no byte; 0: 60 s */
	int			 ro_total_timeout_ms;	/* 0: none */
	size_t			 ro_max_header_bytes;	/* 0: 64 KiB */
	size_t			 ro_max_headers;	/* 0: 100 */
};

/*
 * on_response: once, when the final (non-1xx) status and headers are in;
 *	the headers stay valid until on_done returns.
 * on_body: decoded body bytes as they arrive.
 * on_done: exactly once; err is an enum http_err, why says what happened
 *	("ok" when err is 0).  The request is freed when it returns.
 * Any of them may be NULL.
 */
struct http_callbacks {
	void	(*cb_response)(struct http_request *, int status,
		    const struct http_headers *, void *arg);
	void	(*cb_body)(struct http_request *, const char *buf,
		    size_t len, void *arg);
	void	(*cb_done)(struct http_request *, int err, const char *why,
		    void *arg);
};

/*
 * Idle connections kept per host: enough for the bursts of many chats on
 * one provider, each of which would otherwise be a new connection and,
 * to an https provider, a TLS handshake.
 */
#define HTTP_DEFAULT_MAX_IDLE		64
#define HTTP_DEFAULT_POOL_IDLE_MS	30000
#define HTTP_DEFAULT_CONNECT_MS		30000
#define HTTP_DEFAULT_IDLE_MS		60000
#define HTTP_DEFAULT_HEADER_BYTES	(64 * 1024)
#define HTTP_DEFAULT_MAX_HEADERS	100
#define HTTP_CHUNK_LINE_MAX		4096	/* chunk size + extensions */

/* Loads the CA certificates now, before any sandbox.  NULL on error. */
struct http_client *http_client_new(struct event_base *,
		    const struct http_client_opts *);
/* Cancels every request (silently) and closes every connection. */
void		 http_client_free(struct http_client *);
/* Why the last http_request_start() failed (http_client_new() logs). */
const char	*http_client_error(const struct http_client *);

/*
 * NULL, with http_client_error() set, when the options are invalid (bad
 * URL, method or header) or memory runs out; every later failure comes
 * through on_done.
 */
struct http_request *http_request_start(struct http_client *,
		    const struct http_request_opts *,
		    const struct http_callbacks *, void *arg);
/* No more callbacks; the connection is closed, not pooled.  NULL is ok. */
void		 http_request_cancel(struct http_request *);
/* Whether the request has gone out (connected): the server may act on it. */
int		 http_request_sent(const struct http_request *);

/* Case-insensitive; the first field of that name, or NULL. */
const char	*http_headers_get(const struct http_headers *,
		    const char *name);
size_t		 http_headers_count(const struct http_headers *);
int		 http_headers_at(const struct http_headers *, size_t i,
		    const char **name, const char **value);

const char	*http_err_str(int err);

#define HTTP_HOST_MAX	255	/* a host name or IP literal, no brackets */

/*
 * URLs as the client reads them: http:// or https://, no user
 * information, the port defaulting to 80 or 443.
 *
 * http_url_endpoint: the host (lower case, an IPv6 literal without
 * brackets; host must have room for HTTP_HOST_MAX + 1 bytes) and port a
 * request to url connects to; NULL, or why the URL is refused.
 *
 * http_url_matches: 1 if a connector's (host, port) is url's endpoint:
 * the same name regardless of case, or the same IP address, an IPv6
 * literal with or without brackets; 0 otherwise, and for a refused URL.
 */
const char	*http_url_endpoint(const char *url, char *host,
		    uint16_t *port);
int		 http_url_matches(const char *url, const char *host,
		    uint16_t port);

#endif
