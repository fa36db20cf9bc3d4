/*
 * The controller's database (SQLite, WAL, in state-dir): users and their
 * API keys for now.  The schema is versioned; migrations run at open.
 */
#ifndef MCPBROKER_CONTROLLER_STORE_H
#define MCPBROKER_CONTROLLER_STORE_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct json_object;
struct sqlite3;

#define STORE_FILE		"mcpbroker.db"	/* in the state directory */

#define KEY_PREFIX		"mcpb_"
#define KEY_ID_LEN		12	/* public part, for lookup */
#define KEY_MAX			128

/* What a policy caller carries, as a token's (JWT_ROLES_MAX). */
#define USER_ROLES_MAX	16

struct store_user {
	char	su_name[65];
	char	su_tenant[65];
	char	su_roles[256];		/* comma-separated */
};

/* Is u the user name in tenant?  A user is a name within a tenant. */
int	store_user_is(const struct store_user *u, const char *name,
	    const char *tenant);

int	store_open(const char *state_dir);
void	store_close(void);
/* The open database, for controller_audit.c; NULL before store_open. */
struct sqlite3	*store_db(void);
/*
 * A unit of work that nests: its own transaction, or a savepoint inside
 * the caller's.  store_end(sp, ok) commits when ok, else rolls back; -1
 * when the database failed (then nothing was written).
 */
int	store_begin(const char *sp);
int	store_end(const char *sp, int ok);
/*
 * The same for a copy that may wait for the next fsync (the conversation
 * history): at the top level it commits without one of its own, durable
 * with the next commit that syncs, at the latest the audit trail's next.
 */
int	store_begin_lazy(const char *sp);

/*
 * An online backup into fd, a regular file opened for writing (taken
 * over, closed when done), made between the loop's other work; done runs
 * once, when it is over (error NULL: written and synced).  -1 with why if
 * it cannot start (one is already running, fd is not a writable file).
 */
typedef void	(*store_backup_fn)(const char *error, int64_t pages,
		    int64_t bytes, void *arg);
int	store_backup(struct event_base *, int fd, store_backup_fn done,
	    void *arg, char *why, size_t whylen);

/* A new user with a new key (written to key, KEY_MAX bytes). */
int	store_user_add(const char *name, const char *tenant, const char *roles,
	    char *key, char *why, size_t whylen);
/* A new key for the user; the old one stops working at once. */
int	store_user_key(const char *name, char *key, char *why, size_t whylen);
int	store_user_del(const char *name, char *why, size_t whylen);
/* Every user of the tenant; *n gets how many. */
int	store_tenant_del(const char *tenant, int64_t *n);
struct json_object *store_user_list(void);
/* The user of that name: 0, or -1 if there is none. */
int	store_user_get(const char *name, struct store_user *);
/* The user this API key belongs to: 0, or -1 for no such key. */
int	store_authenticate(const char *key, struct store_user *);
/* The user holds the role ("admin", "tenant-admin", ...). */
int	user_has_role(const struct store_user *, const char *role);

/*
 * Statements on the one connection, for the other tables' modules; a
 * failure is logged with SQLite's message.  store_step_done runs a
 * statement that returns no rows and finalizes it: 0, or -1.
 */
struct sqlite3_stmt *store_prepare(const char *sql);
int	store_step_done(struct sqlite3_stmt *);
/*
 * A statement run on every request, prepared once for the life of the
 * connection: sql must be a string literal (it is the key).  Give it back
 * with store_release (reset, bindings cleared), never finalize it.
 */
struct sqlite3_stmt *store_cached(const char *sql);
void	store_release(struct sqlite3_stmt *);
/* Text, or NULL for SQL NULL. */
void	store_bind_str(struct sqlite3_stmt *, int i, const char *s);
/* One statement with one text parameter. */
int	store_exec_one(const char *sql, const char *arg);
/* The same with ?1 and ?2 (a statement may use only ?2). */
int	store_exec_two(const char *sql, const char *arg1, const char *arg2);

#endif
