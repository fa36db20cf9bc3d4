/*
 * The MCP client: one session with one MCP server over some transport.
 * It speaks both protocol eras: the stateless 2026-07-28 revision (every
 * request carries its version and client identity in _meta, discovered with
 * server/discover) and the initialize-handshake revisions from 2024-11-05 to
 * 2025-11-25.  The era is probed once per session, or taken from a hint when
 * the caller already knows what the server speaks.
 *
 * Transports (stdio, streamable HTTP, legacy HTTP+SSE) deliver each JSON
 * text they receive with mcp_session_input and send what the session hands
 * them; they know nothing of JSON-RPC beyond what routing needs.
 */
#ifndef MCPBROKER_MCP_H
#define MCPBROKER_MCP_H

#include <stddef.h>
#include <stdint.h>

#define MCP_MODERN_VERSION	"2026-07-28"
#define MCP_MAX_MESSAGE		(16u * 1024 * 1024)
#define MCP_MAX_PENDING		256	/* requests in flight per session */
#define MCP_MAX_WAITING		4096	/* and waiting for one of those */
#define MCP_MAX_TOOLS		10000
#define MCP_MAX_PAGES		100

/* JSON-RPC and MCP error codes, and our local ones (not on the wire). */
#define MCP_PARSE_ERROR			-32700
#define MCP_INVALID_REQUEST		-32600
#define MCP_METHOD_NOT_FOUND		-32601
#define MCP_INVALID_PARAMS		-32602
#define MCP_INTERNAL_ERROR		-32603
#define MCP_HEADER_MISMATCH		-32020
#define MCP_MISSING_CAPABILITY		-32021
#define MCP_UNSUPPORTED_VERSION		-32022
#define MCP_ERR_TIMEOUT			1	/* no answer in time */
#define MCP_ERR_TRANSPORT		2	/* connection or process gone */
#define MCP_ERR_PROTOCOL		3	/* the server broke the protocol */
#define MCP_ERR_LOCAL			4	/* refused before sending */

enum mcp_era {
	MCP_ERA_UNKNOWN,
	MCP_ERA_MODERN,		/* 2026-07-28: stateless, _meta per request */
	MCP_ERA_LEGACY,		/* initialize handshake: 2024-11-05..2025-11-25 */
};

enum mcp_state {
	MCP_CONNECTING,
	MCP_READY,
	MCP_CLOSED,
};

struct json_object;
struct event_base;
struct mcp_session;

struct mcp_error {
	int			 me_code;
	char			 me_message[512];
};

/* One message for the transport to deliver. */
struct mcp_out {
	const char	*mo_json;
	size_t		 mo_len;
	int64_t		 mo_id;		/* our request id, or -1 */
	const char	*mo_method;	/* NULL for responses */
	const char	*mo_name;	/* tools/call name etc., for Mcp-Name */
	int		 mo_stream;	/* long-lived: no idle limit */
	struct json_object *mo_params;	/* the request's params, or NULL */
};

struct mcp_transport_ops {
	/* Queue one message; -1 with a reason when it cannot be sent. */
	int	(*to_send)(void *, const struct mcp_out *, char *why,
		    size_t whylen);
	/* Stop waiting for request id (HTTP closes its stream); may be NULL. */
	void	(*to_cancel)(void *, int64_t id);
	/* The era and version in force, for headers and sessions; may be NULL. */
	void	(*to_era)(void *, enum mcp_era, const char *version);
	void	(*to_free)(void *);
};

struct mcp_session_cbs {
	void	(*on_ready)(struct mcp_session *, void *);
	/* The session is over; it must be freed (not from inside the call). */
	void	(*on_closed)(struct mcp_session *, const char *why, void *);
	void	(*on_tools_changed)(struct mcp_session *, void *);
};

/*
 * The server says its resources or prompts changed (list_changed,
 * resources/updated); params may be NULL.
 */
typedef void	(*mcp_notify_fn)(struct mcp_session *, const char *method,
		    struct json_object *params, void *);

struct mcp_session_opts {
	const char	*so_name;		/* server name, for logs */
	uint64_t	 so_connect_timeout_ms;	/* whole handshake */
	enum mcp_era	 so_era_hint;		/* known from an earlier run */
	int		 so_can_cancel_by_notification;	/* stdio, legacy */
	int		 so_param_headers;	/* streamable HTTP: x-mcp-header */
};

typedef void	(*mcp_result_fn)(struct mcp_session *, struct json_object *,
		    const struct mcp_error *, void *);
typedef void	(*mcp_progress_fn)(struct mcp_session *, struct json_object *,
		    void *);

struct mcp_session *mcp_session_new(struct event_base *,
		    const struct mcp_session_opts *,
		    const struct mcp_transport_ops *, void *transport,
		    const struct mcp_session_cbs *, void *arg);
void		 mcp_session_start(struct mcp_session *);
/* Hear of resource and prompt changes (none by default); arg as the cbs'. */
void		 mcp_session_on_notify(struct mcp_session *, mcp_notify_fn);
/*
 * Frees the transport too, so not from inside a callback of the session:
 * the transport may be delivering input (its read callback, a parser's
 * loop) when the callback runs.  Defer it, as the worker does.
 */
void		 mcp_session_free(struct mcp_session *);

enum mcp_state	 mcp_session_state(const struct mcp_session *);
enum mcp_era	 mcp_session_era(const struct mcp_session *);
const char	*mcp_session_version(const struct mcp_session *);
struct json_object *mcp_session_server_info(const struct mcp_session *);
/* What the server said it can do (initialize or server/discover), or NULL. */
struct json_object *mcp_session_capabilities(const struct mcp_session *);
/* A listed tool's inputSchema, from the cache; NULL if unknown. */
struct json_object *mcp_session_tool_schema(const struct mcp_session *,
		    const char *tool);
const char	*mcp_era_str(enum mcp_era);

/*
 * Send a request.  params is consumed (NULL for none).  The callback runs
 * exactly once, with the result or an error, unless mcp_cancel is called
 * first.  Returns the request id, or -1 (the callback has then already run).
 */
int64_t		 mcp_request(struct mcp_session *, const char *method,
		    struct json_object *params, uint64_t timeout_ms,
		    mcp_result_fn, mcp_progress_fn, void *arg);
/* Give up on a request: no callback; the server is told where it can be. */
void		 mcp_cancel(struct mcp_session *, int64_t id, const char *why);

/* tools/list, every page, cached as long as the server allows. */
void		 mcp_list_tools(struct mcp_session *, uint64_t timeout_ms,
		    mcp_result_fn, void *arg);
/* tools/call: the CallToolResult; isError results are results, not errors. */
int64_t		 mcp_call_tool(struct mcp_session *, const char *tool,
		    struct json_object *arguments, uint64_t timeout_ms,
		    mcp_result_fn, mcp_progress_fn, void *arg);

/* From transports. */
void		 mcp_session_input(struct mcp_session *, const char *, size_t);
void		 mcp_session_request_failed(struct mcp_session *, int64_t id,
		    int code, const char *why);
void		 mcp_session_transport_down(struct mcp_session *,
		    const char *why);

#endif
