/*
 * Conversations: one chat session per user, and the turn loop that runs
 * the LLM, its tool calls through the workers, and the stream of events
 * back to the client.
 */
#ifndef MCPBROKER_CHAT_H
#define MCPBROKER_CHAT_H

#include <stdint.h>

struct json_object;

/* Each takes the API request id and answers it (api_reply/api_event). */
struct store_user;

/* connect takes the whole caller: tenant and roles decide its tools. */
void	chat_connect(uint64_t id, const struct store_user *,
	    struct json_object *body);
void	chat_send(uint64_t id, const struct store_user *,
	    struct json_object *body);
void	chat_stop(uint64_t id, const struct store_user *);
void	chat_approve(uint64_t id, const struct store_user *,
	    struct json_object *body);
void	chat_disconnect(uint64_t id, const struct store_user *);
void	chat_status(uint64_t id, const struct store_user *);
void	chat_config(uint64_t id, const struct store_user *);
void	chat_history(uint64_t id, const struct store_user *, int clear);
/* The client of request id went away: stop its turn, if it has one. */
void	chat_request_gone(uint64_t id);
/*
 * Stored conversations were erased: a session holding one forgets its
 * history (a running turn ends) and goes on in a new conversation; a
 * deleted user's or tenant's sessions end.
 */
void	chat_forget_conversation(const char *conversation);
/*
 * A configuration was loaded: calls waiting for approval are decided
 * again, and those the new rules deny are refused.
 */
void	chat_reconfigure(void);
/* A deleted user's session ends: the name within that tenant only. */
void	chat_forget_user(const char *user, const char *tenant);
void	chat_forget_tenant(const char *tenant);

#endif
