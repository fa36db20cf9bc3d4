/*
 * Stored conversations: every chat session writes its messages here as
 * they join its history, so that a conversation outlives the daemon, can
 * be resumed, listed, searched, exported and erased, and is purged when
 * its tenant's retention is over.  Storage in controller_conv.c; the API,
 * Markdown and `tenant del` in controller_conv_api.c.
 */
#ifndef MCPBROKER_CONTROLLER_CONV_H
#define MCPBROKER_CONTROLLER_CONV_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "broker/config.h"

struct chat_message;
struct event_base;
struct json_object;
struct store_user;

#define AUDIT_KIND_CONVERSATION	"conversation"	/* erased, or read by
						 * someone else */

#define CONV_ID_LEN		32	/* hex of 128 random bits */
#define CONV_TITLE_AUTO		80	/* bytes taken from the first message */
#define CONV_TITLE_MAX		200	/* bytes in a title */

struct conv_meta {
	char	cv_id[CONV_ID_LEN + 1];
	char	cv_user[65];
	char	cv_tenant[65];
	char	cv_provider[64];
	char	cv_model[128];
	char	cv_toolset[64];
	char	cv_title[CONV_TITLE_MAX + 1];
	int64_t	cv_created;		/* ms since the epoch */
	int64_t	cv_updated;		/* the last message */
};

void	conv_id_new(char id[CONV_ID_LEN + 1]);
int	conv_id_valid(const char *);

/* A new conversation (no messages yet); cv_created/updated are set. */
int	conv_create(struct conv_meta *);
/* The conversation's record: 0, or -1 when there is none. */
int	conv_get(const char *id, struct conv_meta *);
/* Columns id, user, tenant, provider, model, toolset, title, created,
 * updated of a row, in that order. */
struct sqlite3_stmt;
void	conv_meta_from_row(struct sqlite3_stmt *, struct conv_meta *);
/* A resumed conversation goes on with this provider, model and toolset. */
int	conv_resume(const char *id, const char *provider, const char *model,
	    const char *toolset);
/*
 * Append one message.  A tool result's text is replaced by a summary
 * ("tool NAME: ok, 1234 bytes") unless whole is set; the first user
 * message becomes the title.
 */
int	conv_append(const char *id, const struct chat_message *, int whole);
/*
 * The last max messages, cut so that they start with a user message, with
 * a result made up for any tool call that has none (the daemon stopped
 * in between): what a provider accepts as history.
 */
int	conv_load(const char *id, unsigned int max, struct chat_message **,
	    size_t *n);
void	conv_messages_free(struct chat_message *, size_t n);

/*
 * Erase a conversation: its messages, its usage detail and the row, in
 * the caller's transaction or one of its own.  The day's aggregates stay.
 */
int	conv_erase(const char *id);
/* Every conversation of a user, of a tenant; *n gets how many. */
int	conv_erase_user(const char *user, const char *tenant, int64_t *n);
int	conv_erase_tenant(const char *tenant, int64_t *n);

/*
 * Retention: erase conversations whose last message is older than their
 * tenant's retention, now and every day from then on.  conv_purge erases
 * at most max of them: *n says how many, *more whether others are due.
 */
int	conv_purge(const struct mcpbroker_conf *, time_t now, size_t max,
	    int64_t *n, int *more);
void	conv_retention_start(struct event_base *);
void	conv_retention_run(void);

/* Pieces with rules of their own, for the tests. */
void	conv_title(const char *text, char *out, size_t outlen);
/* "%TEXT%" with \, % and _ escaped by \, for LIKE ... ESCAPE '\'. */
char	*conv_like_pattern(const char *text);
/* A conversation as GET /api/v1/conversations/ID returns it, in Markdown. */
char	*conv_markdown(struct json_object *conversation);

/* The API. */
void	conv_api_list(uint64_t id, const struct store_user *,
	    const char *query);
void	conv_api_get(uint64_t id, const struct store_user *, const char *conv,
	    const char *query);
void	conv_api_rename(uint64_t id, const struct store_user *,
	    const char *conv, struct json_object *body);
void	conv_api_delete(uint64_t id, const struct store_user *,
	    const char *conv);
void	conv_api_export(uint64_t id, const struct store_user *,
	    const char *conv, const char *query);

/* `mcpbrokerctl tenant del NAME`. */
void	conv_admin_tenant_del(uint64_t id, struct json_object *);

#endif
