/*
 * Inside the controller: what controller.c (workers, calls, channels)
 * offers to controller_api.c (the HTTP API) and chat.c (conversations).
 */
#ifndef MCPBROKER_CONTROLLER_H
#define MCPBROKER_CONTROLLER_H

#include <stdint.h>

#include "broker/config.h"

struct json_object;
struct http_client;
struct jwt_keys;
struct worker_link;

/* done runs once: with a CallToolResult, or with an error {code, message}. */
typedef void	(*tool_call_fn)(struct json_object *result,
		    struct json_object *error, void *arg);
/* {progress?, total?, message?} of a call in flight; arg is done's. */
typedef void	(*tool_progress_fn)(struct json_object *progress, void *arg);

struct mcpbroker_conf	*controller_conf(void);
/* The key set of auth { jwt }, or NULL without one. */
const struct jwt_keys	*controller_jwt_keys(void);
struct http_client	*controller_http(void);

struct worker_link	*controller_worker(const char *server);
const char		*controller_worker_name(const struct worker_link *);
/* The server's tools as its worker last listed them, or NULL. */
struct json_object	*controller_worker_tools(const struct worker_link *);
/* The server's capabilities as it last stated them, or NULL. */
struct json_object	*controller_worker_caps(const struct worker_link *);
/* "ready", "down", ...; *error gets the last error or NULL. */
const char		*controller_worker_state(const struct worker_link *,
			    const char **error);

/*
 * The tool is not withheld by its pin (controller_pins.c): it may be
 * listed and called.  Every list (chat, /api/v1/tools, /mcp) and every
 * call asks.
 */
int		controller_tool_usable(const char *server, const char *tool);
/* A withheld tool's refusal, in the shape of a policy decision (deny). */
void		controller_tool_withheld(struct policy_decision *);
/* The pins of server (NULL: of every server) changed: apply them again. */
void		controller_pins_changed(const char *server);


/*
 * A withheld tool's call is refused at once (code 4, done runs now).
 * owner: owner_key's TENANT/NAME, or NULL (no per-user instance).
 */
uint64_t	controller_call_tool(struct worker_link *, const char *tool,
		    struct json_object *args, const char *owner,
		    const char *conversation, uint64_t timeout_ms,
		    tool_call_fn, void *arg);
/* Another MCP request (resources, prompts) on the server, like a call. */
uint64_t	controller_server_request(struct worker_link *,
		    const char *method, struct json_object *params,
		    const char *owner, const char *conversation,
		    uint64_t timeout_ms, tool_call_fn, void *arg);
/* Progress of call (a non-zero id from the above) goes to fn too. */
void		controller_call_progress(uint64_t call, tool_progress_fn);
/* No callback after this; the worker cancels the MCP request. */
void		controller_cancel_call(uint64_t call);
/* A chat session is over: workers stop the instances kept for it. */
void		controller_release(const char *owner,
		    const char *conversation);

/* Answers to the frontend for API request `id` (MSG_HTTP_*). */
void	api_reply(uint64_t id, int status, struct json_object *body);
/*
 * As api_reply, with session {id, max_age} for the frontend to set as the
 * session cookie, or {clear:true}; takes session like body.
 */
void	api_reply_session(uint64_t id, int status, struct json_object *body,
	    struct json_object *session);
void	api_error(uint64_t id, int status, const char *code,
	    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void	api_stream_start(uint64_t id);
void	api_event(uint64_t id, const char *event, struct json_object *data);
void	api_stream_end(uint64_t id);
/* An MSG_HTTP_REP, _EVENT or _END as built by the caller (MCP); takes o. */
void	api_send(uint16_t type, uint64_t id, struct json_object *o);

/* Answers to mcpbrokerctl for ADMIN_REQ `id` (MSG_ADMIN_REP); take reply. */
void	admin_reply(uint64_t id, struct json_object *reply);
void	admin_error(uint64_t id, const char *message);

/* controller_api.c */
void	api_request(uint64_t id, struct json_object *req);
void	api_cancel(uint64_t id);
struct store_user;

/*
 * controller.c: users and keys for the console (/api/v1/admin/users), as
 * `mcpbrokerctl user ...` with the caller on the audit row.
 */
void	users_api_list(uint64_t id, const struct store_user *,
	    const char *query);
void	users_api_add(uint64_t id, const struct store_user *,
	    struct json_object *body);
void	users_api_key(uint64_t id, const struct store_user *,
	    const char *name);
void	users_api_del(uint64_t id, const struct store_user *,
	    const char *name);
/* The restarts the parent reported for the worker (MSG_WORKER_DOWN). */
unsigned int	controller_worker_restarts(const struct worker_link *);

#endif
