/*
 * The audit trail: an append-only table in the controller's database in
 * which each row carries the SHA-256 of its predecessor, so that an edit,
 * a deletion or a reordering shows up in audit_verify.  Only the controller
 * writes it, through audit_append.
 */
#ifndef MCPBROKER_CONTROLLER_AUDIT_H
#define MCPBROKER_CONTROLLER_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "broker/audit_format.h"
#include "common/util.h"

struct event_base;
struct json_object;

#define AUDIT_HASH_LEN		32	/* SHA-256 */

/* Kinds in use; a kind is free text, these keep the spelling in one place. */
#define AUDIT_KIND_ADMIN	"admin"		/* mcpbrokerctl changed something */
#define AUDIT_KIND_CALL		"tool_call"	/* a decision, before the call */
#define AUDIT_KIND_RESULT	"tool_result"	/* how a call we ran ended */
#define AUDIT_KIND_AUTH		"auth"		/* a refused key; a session */
#define AUDIT_KIND_SYSTEM	"system"	/* reloads, worker crashes */
#define AUDIT_KIND_APPROVAL	"approval"	/* a user's answer to confirm */

/*
 * One row as stored.  A text field with p == NULL is SQL NULL, which the
 * hash tells apart from "".
 */
struct audit_text {
	const void	*p;
	size_t		 len;
};

struct audit_row {
	int64_t			 ar_id;
	int64_t			 ar_ts;		/* ms since the epoch, UTC */
	struct audit_text	 ar_kind;
	struct audit_text	 ar_user;
	struct audit_text	 ar_tenant;
	struct audit_text	 ar_detail;	/* JSON object text */
	const unsigned char	*ar_prev_hash;	/* AUDIT_HASH_LEN bytes */
};

struct audit_filter {
	int64_t		 af_since_ms;	/* 0: no bound */
	int64_t		 af_until_ms;	/* 0: no bound; inclusive */
	const char	*af_user;	/* NULL: any */
	const char	*af_kind;	/* NULL: any */
	const char	*af_tenant;	/* NULL: any */
	const char	*af_tool;	/* a glob over SERVER.TOOL; NULL: any */
	const char	*af_decision;	/* allow, deny, confirm; NULL: any */
	unsigned int	 af_limit;	/* the newest af_limit rows; 0: 50 */
};

/*
 * af_user given as TENANT/NAME (a user is a name within a tenant): split
 * into af_tenant and af_user, held in who.  A bare name stays a name in
 * every tenant.
 */
void	audit_filter_who(struct audit_filter *, char who[OWNER_MAX]);

/*
 * Record one event: kind (e.g. "tool_call", "auth", "admin"), who did it
 * and for which tenant (either may be NULL), and a JSON object with the
 * rest (NULL: {}).  Returns the new row's id, or -1 if it was not recorded:
 * a caller about to act on the user's behalf must then not act.  It is one
 * transaction, or part of the caller's if audit_begin started one.
 */
int64_t	audit_append(const char *kind, const char *user, const char *tenant,
	    struct json_object *detail);

/*
 * Make a change in the database and its audit row one transaction:
 * audit_begin(), the change, audit_append(), audit_end(ok).  audit_end
 * commits when ok is non-zero and rolls back otherwise; either returns -1
 * when the database failed (then nothing was written).
 */
int	audit_begin(void);
int	audit_end(int ok);
int	audit_close_open_intents(void);

/*
 * Group commit.  audit_append_async queues a row; every row queued during
 * one pass of the event loop is written in one transaction (one fsync) by
 * an event on base, and then each done(id, arg) runs in order, id being
 * the row's or -1 if it could not be written.  A caller that acts on
 * someone's behalf acts in done, not before.  audit_append (synchronous)
 * writes the queued rows first, in the same transaction, so ids follow the
 * order in which rows were asked for.
 */
typedef void	(*audit_done_fn)(int64_t id, void *arg);
struct audit_async;

void	audit_init(struct event_base *base);
struct audit_async *audit_append_async(const char *kind, const char *user,
	    const char *tenant, struct json_object *detail, audit_done_fn done,
	    void *arg);
/*
 * The caller goes away: its row is written now if it was not yet, done
 * will not run, and the handle is gone.  Returns the row's id, or -1.
 */
int64_t	audit_settle(struct audit_async *);

/*
 * Walk the whole trail: 0 if intact, else -1 with the first problem in
 * why ("row 17: contents changed").  rows gets the number of rows read,
 * head the hash of the last row (all zeros for an empty trail): an
 * operator records it elsewhere to detect a rewrite of the whole chain.
 * This walks it at once, in one read transaction, for the unit tests;
 * the admin's audit_verify and audit_checkpoint walk it as jobs, a step
 * a pass of the loop (audit_admin).
 */
int	audit_verify(char *why, size_t whylen, uint64_t *rows,
	    unsigned char head[AUDIT_HASH_LEN]);

/*
 * The filtered rows, oldest first: [{id, ts, kind, user, tenant, detail}].
 * af_tool selects tool_call rows of matching tools and the tool_result and
 * approval rows that refer to them; af_decision tool_call rows.
 */
struct json_object *audit_list(const struct audit_filter *,
	    int *truncated);

/*
 * For a SIEM: fn gets each row after after_id, in order, as one line
 * without its newline in the format (JSON Lines: {id, ts, kind, user,
 * tenant, detail, prev_hash, hash}, hashes in hex; see audit_format.h),
 * until max_rows rows or fn returns non-zero.  host names the machine in
 * syslog lines.  Returns the last id given to fn (after_id if none), or -1.
 */
typedef int	(*audit_line_fn)(int64_t id, const char *line, void *arg);
int64_t	audit_export(int64_t after_id, unsigned int max_rows,
	    enum audit_format, const char *host, audit_line_fn, void *arg);

/*
 * Signed checkpoints.  The key is an Ed25519 private key in PEM (NULL: no
 * key); -1 if it is not one.  The admin's audit_checkpoint verifies the
 * trail and signs its head: {version, last_id, head, rows, time,
 * public_key, signature}.  audit_checkpoint_check: 0 if cp carries our
 * signature and the trail still holds row last_id with that hash, else
 * -1 with why (a truncation, a rewrite, another key, a forgery).
 */
int	audit_set_signing_key(const char *pem);
int	audit_checkpoint_check(struct json_object *cp, char *why,
	    size_t whylen);

/* The row's hash: SHA-256 over the encoding in docs/ARCHITECTURE.md. */
void	audit_hash(const struct audit_row *, unsigned char out[AUDIT_HASH_LEN]);

/* `mcpbrokerctl audit show|verify|export|checkpoint`: op "audit_...". */
void	audit_admin(uint64_t id, const char *op, struct json_object *o);

#endif
