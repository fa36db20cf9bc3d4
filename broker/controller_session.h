/*
 * Web sessions in the controller's database: made by POST /auth/login,
 * found by the cookie's value, ended by logout, expiry, a new key for the
 * user or the user's deletion.
 */
#ifndef MCPBROKER_CONTROLLER_SESSION_H
#define MCPBROKER_CONTROLLER_SESSION_H

#include <stdint.h>

#include "broker/websec.h"

struct auth_conf;
struct store_user;

struct web_session {
	unsigned char	ws_id_hash[32];		/* SHA-256 of the cookie */
	char		ws_csrf[WEB_TOKEN_LEN + 1];
	int64_t		ws_expires_ms;		/* the end, ms since epoch */
};

/*
 * A new session for user: id gets the cookie's value, which is stored
 * only hashed.  Part of the caller's transaction when there is one.
 */
int	session_create(const char *user, const struct auth_conf *,
	    char id[WEB_TOKEN_LEN + 1], struct web_session *);
/*
 * The live session whose cookie value is id, and its user: 0; 1 when
 * there is none (an expired one is deleted on the way); -1 on a database
 * error.
 */
int	session_lookup(const char *id, const struct auth_conf *,
	    struct store_user *, struct web_session *);
int	session_delete(const struct web_session *);
/* The session this cookie value names, live or not. */
int	session_delete_id(const char *id);
/* Does the X-CSRF-Token header match?  Constant time. */
int	session_csrf_ok(const struct web_session *, const char *token);
/* Drop every session past its idle or absolute end. */
void	session_purge(const struct auth_conf *);
/* Seconds a cookie for it should live: its absolute end, rounded up. */
int64_t	session_max_age(const struct web_session *);

#endif
