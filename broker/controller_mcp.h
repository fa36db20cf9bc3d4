/*
 * The broker as an MCP server: each toolset is served at /mcp/TOOLSET
 * (streamable HTTP) to MCP clients of both protocol eras, with the tools,
 * resources and prompts of its servers under the caller's policy.
 */
#ifndef MCPBROKER_CONTROLLER_MCP_H
#define MCPBROKER_CONTROLLER_MCP_H

#include <stdint.h>

struct json_object;
struct store_user;

/*
 * An HTTP_REQ for /mcp/TOOLSET from an authenticated caller: req is the
 * whole request (method, body, peer, the relayed MCP headers in "mcp").
 */
void	mcp_http(uint64_t id, const struct store_user *, const char *toolset,
	    struct json_object *req);
/* GET /.well-known/oauth-protected-resource/mcp/TOOLSET (RFC 9728). */
void	mcp_resource_metadata(uint64_t id, const char *path, const char *host,
	    int tls);
/* The client of HTTP request id went away. */
void	mcp_request_gone(uint64_t id);

/* A worker sent its tool list; changed: it differs from the last one. */
void	mcp_worker_tools(const char *server, int changed);
/* A server's resources or prompts changed (MSG_SERVER_NOTIFY). */
void	mcp_server_notify(const char *server, const char *method,
	    struct json_object *params, const char *owner,
	    const char *conversation);
/* A configuration was loaded: sessions of toolsets gone end. */
void	mcp_reconfigure(void);
/* A deleted user's sessions and requests end: the name in that tenant. */
void	mcp_forget_user(const char *user, const char *tenant);

#endif
