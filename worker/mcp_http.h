/*
 * The HTTP transports: streamable HTTP (each message its own POST, answered
 * with JSON or an SSE stream; sessions, the GET stream and resumption in the
 * 2025 era) and the legacy HTTP+SSE transport of 2024-11-05 (one GET event
 * stream, messages POSTed to the endpoint it names).
 */
#ifndef MCPBROKER_MCP_HTTP_H
#define MCPBROKER_MCP_HTTP_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct http_client;
struct http_field;
struct mcp_session;
struct mcp_http;

enum mcp_http_kind {
	MCP_HTTP_STREAMABLE,
	MCP_HTTP_SSE,
};

struct mcp_http_opts {
	const char		*ho_name;	/* server name, for logs */
	const char		*ho_url;
	enum mcp_http_kind	 ho_kind;
	const struct http_field	*ho_headers;	/* Authorization and the like */
	size_t			 ho_nheaders;
	uint64_t		 ho_connect_timeout_ms;
	uint64_t		 ho_call_timeout_ms;	/* idle limit per request */
};

extern const struct mcp_transport_ops mcp_http_ops;

struct mcp_http	*mcp_http_new(struct event_base *, struct http_client *,
		    const struct mcp_http_opts *);
void		 mcp_http_attach(struct mcp_http *, struct mcp_session *);
/* Requests still on the wire (a closing DELETE among them). */
unsigned int	 mcp_http_busy(void);

#endif
