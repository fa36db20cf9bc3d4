/*
 * The audit trail.  Row n's hash covers its own contents and row n-1's
 * hash, so changing, removing or moving a row breaks the chain from there
 * on; audit_checkpoint holds the head (last id and hash), written in the
 * same transaction as each row, so that a missing tail shows too.
 *
 * This is tamper-evidence, not tamper-proofing: the hash has no key, so
 * whoever can write the database can rewrite the chain from any row on
 * and the checkpoint with it.  What defeats that is a copy held elsewhere:
 * the export to a SIEM, or a signed checkpoint (`audit checkpoint`, with
 * the Ed25519 key the parent reads) kept off the box.
 *
 * Rows a caller must have on record before it acts (a tool call's intent)
 * are group-committed: queued, written together once per pass of the
 * event loop, then each caller continues.  Durability is real (WAL,
 * synchronous FULL); it costs one fsync per batch, not per row.
 */
#include <sys/queue.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <json-c/json.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sqlite3.h>

#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_metrics.h"
#include "broker/controller_store.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/util.h"

#define AUDIT_DOMAIN		"mcpbroker-audit-v1"
#define AUDIT_SHOW_DEFAULT	50
#define AUDIT_SHOW_MAX		10000
#define AUDIT_EXPORT_ROWS	5000
/* Stay well under MSG_MAX_PAYLOAD, JSON escaping included. */
#define AUDIT_REPLY_BYTES	(4u * 1024 * 1024)

static int
exec(const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(store_db(), sql, NULL, NULL, &err) != SQLITE_OK) {
		log_warnx("audit: %s", err != NULL ? err : "database error");
		sqlite3_free(err);
		return -1;
	}
	return 0;
}

/* ---- the hash ---- */

static void
put_u64(EVP_MD_CTX *md, uint64_t v)
{
	unsigned char	b[8];
	int		i;

	for (i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (56 - 8 * i));
	EVP_DigestUpdate(md, b, sizeof(b));
}

/*
 * A presence byte, then the length: NULL and "", or "a","b" and "ab","",
 * never encode alike.
 */
static void
put_text(EVP_MD_CTX *md, const struct audit_text *t)
{
	unsigned char present = t->p != NULL;

	EVP_DigestUpdate(md, &present, 1);
	put_u64(md, present ? t->len : 0);
	if (present && t->len > 0)
		EVP_DigestUpdate(md, t->p, t->len);
}

void
audit_hash(const struct audit_row *r, unsigned char out[AUDIT_HASH_LEN])
{
	EVP_MD_CTX	*md;
	unsigned int	 len = AUDIT_HASH_LEN;

	if ((md = EVP_MD_CTX_new()) == NULL ||
	    EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
		fatalx("audit: no SHA-256");
	EVP_DigestUpdate(md, AUDIT_DOMAIN, strlen(AUDIT_DOMAIN));
	put_u64(md, (uint64_t)r->ar_id);
	put_u64(md, (uint64_t)r->ar_ts);
	put_text(md, &r->ar_kind);
	put_text(md, &r->ar_user);
	put_text(md, &r->ar_tenant);
	put_text(md, &r->ar_detail);
	EVP_DigestUpdate(md, r->ar_prev_hash, AUDIT_HASH_LEN);
	if (EVP_DigestFinal_ex(md, out, &len) != 1)
		fatalx("audit: SHA-256 failed");
	EVP_MD_CTX_free(md);
}

static struct audit_text
text_of(const char *s)
{
	struct audit_text t = { s, s != NULL ? strlen(s) : 0 };

	return t;
}

/* Column i as the hash sees it: bytes as stored, NULL kept apart. */
static struct audit_text
column_text(sqlite3_stmt *st, int i)
{
	struct audit_text t = { NULL, 0 };

	if (sqlite3_column_type(st, i) != SQLITE_NULL) {
		t.p = sqlite3_column_text(st, i);
		t.len = (size_t)sqlite3_column_bytes(st, i);
	}
	return t;
}

/* ---- appending ---- */

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The head comes from the checkpoint, not from the last row: were the
 * tail deleted, new rows would otherwise reuse its ids and the
 * checkpoint would forget the gap.  No checkpoint: refuse (fail closed).
 */
static int
head_get(int64_t *last_id, unsigned char last_hash[AUDIT_HASH_LEN])
{
	sqlite3_stmt	*st;
	int		 ok = 0;

	if ((st = store_cached("SELECT last_id, last_hash FROM "
	    "audit_checkpoint WHERE id = 1")) == NULL)
		return -1;
	if (sqlite3_step(st) == SQLITE_ROW &&
	    sqlite3_column_bytes(st, 1) == AUDIT_HASH_LEN) {
		*last_id = sqlite3_column_int64(st, 0);
		memcpy(last_hash, sqlite3_column_blob(st, 1), AUDIT_HASH_LEN);
		ok = 1;
	}
	store_release(st);
	if (!ok)
		log_warnx("audit: the checkpoint is missing or damaged; "
		    "run `mcpbrokerctl audit verify`");
	return ok ? 0 : -1;
}

/* One row through the chain's prepared INSERT. */
static int
row_insert(sqlite3_stmt *st, const struct audit_row *r,
    const unsigned char *hash)
{
	int		 i, rc;
	const struct audit_text *f[] = { &r->ar_kind, &r->ar_user,
	    &r->ar_tenant, &r->ar_detail };

	sqlite3_bind_int64(st, 1, r->ar_id);
	sqlite3_bind_int64(st, 2, r->ar_ts);
	for (i = 0; i < 4; i++)
		if (f[i]->p != NULL)
			sqlite3_bind_text(st, 3 + i, f[i]->p, (int)f[i]->len,
			    SQLITE_STATIC);
		else
			sqlite3_bind_null(st, 3 + i);
	sqlite3_bind_blob(st, 7, r->ar_prev_hash, AUDIT_HASH_LEN,
	    SQLITE_STATIC);
	sqlite3_bind_blob(st, 8, hash, AUDIT_HASH_LEN, SQLITE_STATIC);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

static int
head_set(int64_t id, const unsigned char *hash)
{
	sqlite3_stmt	*st;
	int		 rc;

	if ((st = store_cached("UPDATE audit_checkpoint SET last_id = ?, "
	    "last_hash = ? WHERE id = 1")) == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_blob(st, 2, hash, AUDIT_HASH_LEN, SQLITE_STATIC);
	rc = sqlite3_step(st);
	store_release(st);
	if (rc != SQLITE_DONE || sqlite3_changes(store_db()) != 1)
		return -1;
	return 0;
}

/*
 * Appending, inside a transaction: the head is read once, each row is
 * linked to the one before it and inserted, and the head moves once, at
 * the end.  A batch of group commit is one chain; so is a single row.
 */
struct chain {
	sqlite3_stmt	*ch_insert;
	int64_t		 ch_first;	/* the head's id when opened */
	int64_t		 ch_id;		/* the last row's */
	unsigned char	 ch_hash[AUDIT_HASH_LEN];
};

static int
chain_open(struct chain *c)
{
	memset(c, 0, sizeof(*c));
	if (head_get(&c->ch_id, c->ch_hash) == -1)
		return -1;
	c->ch_first = c->ch_id;
	if ((c->ch_insert = store_cached("INSERT INTO audit (id, ts, kind, "
	    "user, tenant, detail, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, "
	    "?, ?)")) == NULL)
		return -1;
	return 0;
}

static int64_t
chain_add(struct chain *c, const char *kind, const char *user,
    const char *tenant, const char *detail)
{
	unsigned char		hash[AUDIT_HASH_LEN];
	struct audit_row	r;

	r.ar_id = c->ch_id + 1;
	r.ar_ts = now_ms();
	r.ar_kind = text_of(kind);
	r.ar_user = text_of(user);
	r.ar_tenant = text_of(tenant);
	r.ar_detail = text_of(detail);
	r.ar_prev_hash = c->ch_hash;
	audit_hash(&r, hash);
	if (row_insert(c->ch_insert, &r, hash) == -1) {
		log_warnx("audit: cannot append: %s",
		    sqlite3_errmsg(store_db()));
		return -1;
	}
	c->ch_id = r.ar_id;
	memcpy(c->ch_hash, hash, sizeof(hash));
	cmetrics_audit_row(kind);
	return r.ar_id;
}

/* ok: move the head to the last row added; -1 if that fails or !ok. */
static int
chain_close(struct chain *c, int ok)
{
	if (c->ch_insert != NULL)
		store_release(c->ch_insert);
	c->ch_insert = NULL;
	if (ok && c->ch_id != c->ch_first && head_set(c->ch_id,
	    c->ch_hash) == -1) {
		log_warnx("audit: cannot append: %s",
		    sqlite3_errmsg(store_db()));
		return -1;
	}
	return ok ? 0 : -1;
}

static int64_t
append_locked(const char *kind, const char *user, const char *tenant,
    const char *detail)
{
	struct chain	c;
	int64_t		id = -1;

	if (chain_open(&c) == 0)
		id = chain_add(&c, kind, user, tenant, detail);
	if (chain_close(&c, id != -1) == -1)
		return -1;
	return id;
}

/* ---- group commit ---- */

struct audit_async {
	TAILQ_ENTRY(audit_async) aa_entry;
	char			*aa_kind, *aa_user, *aa_tenant, *aa_detail;
	int			 aa_written;
	int64_t			 aa_id;		/* once written: row or -1 */
	audit_done_fn		 aa_done;	/* NULL: nobody waits */
	void			*aa_arg;
};
TAILQ_HEAD(audit_queue, audit_async);

static struct {
	struct event		*ev;		/* writes and runs the queue */
	struct audit_queue	 queue;		/* in the order asked for */
} aq = { NULL, TAILQ_HEAD_INITIALIZER(aq.queue) };

static char *
dup_or_null(const char *s)
{
	char *d;

	if (s == NULL)
		return NULL;
	if ((d = strdup(s)) == NULL)
		fatal("strdup");
	return d;
}

static void
entry_free(struct audit_async *e)
{
	free(e->aa_kind);
	free(e->aa_user);
	free(e->aa_tenant);
	free(e->aa_detail);
	free(e);
}

/* The row's detail as stored; NULL for a detail that is not an object. */
static const char *
detail_str(const char *kind, struct json_object *detail)
{
	if (store_db() == NULL || kind == NULL || (detail != NULL &&
	    !json_object_is_type(detail, json_type_object))) {
		log_warnx("audit: bad append (%s)", kind != NULL ? kind : "?");
		return NULL;
	}
	if (detail == NULL)
		return "{}";
	return json_object_to_json_string_ext(detail, JSON_C_TO_STRING_PLAIN |
	    JSON_C_TO_STRING_NOSLASHESCAPE);
}

static struct audit_async *
enqueue(const char *kind, const char *user, const char *tenant,
    const char *detail)
{
	struct audit_async *e;

	if ((e = calloc(1, sizeof(*e))) == NULL)
		fatal("calloc");
	e->aa_kind = dup_or_null(kind);
	e->aa_user = dup_or_null(user);
	e->aa_tenant = dup_or_null(tenant);
	e->aa_detail = dup_or_null(detail);
	TAILQ_INSERT_TAIL(&aq.queue, e, aa_entry);
	return e;
}

/*
 * Every queued row not yet written, in order, in one transaction: one
 * commit, one fsync, however many rows.  If any fails none is written and
 * all get -1, so that nothing runs whose intent is not on record.  Never
 * inside a caller's transaction (audit_begin writes the queue first).
 */
static void
queue_write(int schedule)
{
	struct audit_async	*e, *first;
	struct chain		 c;
	double			 began = metrics_now();
	int			 ok, waiting = 0;

	TAILQ_FOREACH(first, &aq.queue, aa_entry)
		if (!first->aa_written)
			break;
	if (first == NULL)
		return;
	ok = store_db() != NULL && sqlite3_get_autocommit(store_db()) &&
	    exec("BEGIN IMMEDIATE;") == 0;
	if (ok) {
		ok = chain_open(&c) == 0;
		for (e = first; ok && e != NULL; e = TAILQ_NEXT(e, aa_entry))
			if (!e->aa_written && (e->aa_id = chain_add(&c,
			    e->aa_kind, e->aa_user, e->aa_tenant,
			    e->aa_detail)) == -1)
				ok = 0;
		ok = chain_close(&c, ok) == 0;
	}
	if (ok && exec("COMMIT;") == -1)
		ok = 0;
	if (ok)
		cmetrics_audit_commit(metrics_now() - began);
	if (!ok && store_db() != NULL && !sqlite3_get_autocommit(store_db()))
		(void)exec("ROLLBACK;");
	for (e = first; e != NULL; e = TAILQ_NEXT(e, aa_entry)) {
		if (e->aa_written)	/* refused when it was asked for */
			continue;
		if (!ok)
			e->aa_id = -1;
		e->aa_written = 1;
		waiting |= e->aa_done != NULL;
	}
	if (waiting && schedule && aq.ev != NULL)
		event_active(aq.ev, EV_TIMEOUT, 0);
}

/*
 * Write what is queued, then tell each waiting caller, oldest first.  A
 * callback may queue more (they go at the end and are written on the
 * next run, which queueing schedules) or settle others (they leave the
 * queue): so take the head afresh each time.
 */
static void
queue_run(int fd, short events, void *arg)
{
	struct audit_async	*e;
	audit_done_fn		 done;
	void			*done_arg;
	int64_t			 id;

	(void)fd;
	(void)events;
	(void)arg;
	queue_write(0);
	while ((e = TAILQ_FIRST(&aq.queue)) != NULL && e->aa_written) {
		TAILQ_REMOVE(&aq.queue, e, aa_entry);
		done = e->aa_done;
		done_arg = e->aa_arg;
		id = e->aa_id;
		entry_free(e);
		if (done != NULL)
			done(id, done_arg);
	}
}

static void	jobs_init(struct event_base *);

void
audit_init(struct event_base *base)
{
	if (aq.ev != NULL) {
		if (event_get_base(aq.ev) == base)
			return;
		event_free(aq.ev);
	}
	if ((aq.ev = event_new(base, -1, 0, queue_run, NULL)) == NULL)
		fatalx("audit: event_new");
	jobs_init(base);
}

struct audit_async *
audit_append_async(const char *kind, const char *user, const char *tenant,
    struct json_object *detail, audit_done_fn done, void *arg)
{
	struct audit_async	*e;
	const char		*text;

	if (aq.ev == NULL)
		fatalx("audit: no event loop for group commit");
	text = detail_str(kind, detail);
	e = enqueue(kind, user, tenant, text);
	e->aa_done = done;
	e->aa_arg = arg;
	if (text == NULL) {		/* refused now, answered later */
		e->aa_written = 1;
		e->aa_id = -1;
	}
	/* Once per pass: an active event stays active until it runs. */
	event_active(aq.ev, EV_TIMEOUT, 0);
	return e;
}

int64_t
audit_settle(struct audit_async *e)
{
	int64_t id;

	if (!e->aa_written)
		queue_write(1);
	id = e->aa_id;
	TAILQ_REMOVE(&aq.queue, e, aa_entry);
	entry_free(e);
	return id;
}

int64_t
audit_append(const char *kind, const char *user, const char *tenant,
    struct json_object *detail)
{
	struct audit_async	*e;
	const char		*text;
	int64_t			 id;

	if ((text = detail_str(kind, detail)) == NULL)
		return -1;
	/* Nested in the caller's transaction: a savepoint of its own. */
	if (!sqlite3_get_autocommit(store_db())) {
		if (exec("SAVEPOINT audit_append;") == -1)
			return -1;
		if ((id = append_locked(kind, user, tenant, text)) == -1 ||
		    exec("RELEASE audit_append;") == -1) {
			(void)exec("ROLLBACK TO audit_append; RELEASE "
			    "audit_append;");
			return -1;
		}
		return id;
	}
	/* Else with whatever is queued, after it: ids in the order asked. */
	e = enqueue(kind, user, tenant, text);
	queue_write(1);
	id = e->aa_id;
	TAILQ_REMOVE(&aq.queue, e, aa_entry);
	entry_free(e);
	return id;
}

/* Queued rows first: they were asked for before this change. */
int
audit_begin(void)
{
	if (store_db() == NULL)
		return -1;
	queue_write(1);
	return exec("BEGIN IMMEDIATE;");
}

int
audit_end(int ok)
{
	if (ok && exec("COMMIT;") == 0)
		return 0;
	(void)exec("ROLLBACK;");
	return ok ? -1 : 0;
}

/* ---- calls the broker stopped in the middle of ---- */

/*
 * Intents that should have an outcome row and have none: allowed calls,
 * and confirmed ones the user approved.  A refused call, or a confirm
 * nobody answered, never ran and never gets one.  NOT IN builds its set
 * once, so this is one pass over the table, not one per intent.
 */
#define OPEN_INTENTS_SQL						\
	"SELECT c.id, c.user, c.tenant FROM audit c "			\
	"WHERE c.kind = 'tool_call' AND json_valid(c.detail) AND ("	\
	" json_extract(c.detail, '$.decision') = 'allow' OR"		\
	" (json_extract(c.detail, '$.decision') = 'confirm' AND c.id IN"\
	"  (SELECT json_extract(a.detail, '$.intent') FROM audit a"	\
	"   WHERE a.kind = 'approval' AND json_valid(a.detail) AND"	\
	"   json_extract(a.detail, '$.answer') = 'approved'))) "	\
	"AND c.id NOT IN (SELECT json_extract(r.detail, '$.intent') "	\
	" FROM audit r WHERE r.kind = 'tool_result' AND"		\
	" json_valid(r.detail) AND"					\
	" json_extract(r.detail, '$.intent') IS NOT NULL) "		\
	"ORDER BY c.id"

static int
close_intent(sqlite3_stmt *st)
{
	struct json_object	*d = json_object_new_object();
	const char		*user, *tenant;
	int64_t			 id;

	id = sqlite3_column_int64(st, 0);
	user = (const char *)sqlite3_column_text(st, 1);
	tenant = (const char *)sqlite3_column_text(st, 2);
	json_object_object_add(d, "intent", json_object_new_int64(id));
	json_object_object_add(d, "outcome", json_object_new_string(
	    "unknown"));
	json_object_object_add(d, "reason", json_object_new_string(
	    "the broker stopped while the call was running"));
	id = audit_append(AUDIT_KIND_RESULT, user, tenant, d);
	json_object_put(d);
	return id == -1 ? -1 : 0;
}

/*
 * A crash (SIGKILL, the power) leaves the calls then running with an
 * intent and no outcome.  Whether the server did the work nobody can say
 * now; the trail says so rather than leave the reader to guess from a
 * missing row.  Run once at start, before any call, in one transaction.
 */
int
audit_close_open_intents(void)
{
	sqlite3_stmt	*st;
	unsigned int	 n = 0;
	int		 rc, ok = 1;

	if (audit_begin() == -1)
		return -1;
	/* Rows appended while stepping are outcomes: the set does not move. */
	if (sqlite3_prepare_v2(store_db(), OPEN_INTENTS_SQL, -1, &st,
	    NULL) != SQLITE_OK) {
		log_warnx("audit: %s", sqlite3_errmsg(store_db()));
		(void)audit_end(0);
		return -1;
	}
	while (ok && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (close_intent(st) == -1)
			ok = 0;
		else
			n++;
	}
	if (ok && rc != SQLITE_DONE) {
		log_warnx("audit: %s", sqlite3_errmsg(store_db()));
		ok = 0;
	}
	sqlite3_finalize(st);
	if (audit_end(ok) == -1 || !ok)
		return -1;
	if (n > 0)
		log_warnx("audit: %u tool call(s) were running when the broker "
		    "stopped; their outcome is recorded as unknown", n);
	return (int)n;
}

/* ---- verifying ---- */

/*
 * The walk goes VERIFY_ROWS rows at a time, so that the admin's verify
 * and checkpoint, which read every row, take turns with the loop (some
 * 20 ms a step at 2 us a row) instead of holding up every chat and call
 * for the whole trail.  It reads the rows up to the last one there when
 * it began, against the checkpoint read in that same moment; rows
 * appended meanwhile come after it and are the next walk's.  We never
 * change a row, so the steps read what one read would have.
 */
#define VERIFY_ROWS	10000

struct verify {
	int64_t		 prev_id;
	unsigned char	 prev_hash[AUDIT_HASH_LEN];
	uint64_t	 count;
	int64_t		 end_id;	/* the last row when it began */
	int		 head_ok;	/* the checkpoint then, if readable */
	int64_t		 head_id;
	unsigned char	 head_hash[AUDIT_HASH_LEN];
	char		*why;
	size_t		 whylen;
};

static int
blob_is(sqlite3_stmt *st, int i, const unsigned char *h)
{
	return sqlite3_column_bytes(st, i) == AUDIT_HASH_LEN &&
	    memcmp(sqlite3_column_blob(st, i), h, AUDIT_HASH_LEN) == 0;
}

static int
database_error(struct verify *v)
{
	snprintf(v->why, v->whylen, "database: %s", sqlite3_errmsg(
	    store_db()));
	return -1;
}

/* Another row whose predecessor is v->prev_hash: the chain goes on there. */
static int64_t
successor_elsewhere(struct verify *v, int64_t not_id)
{
	sqlite3_stmt	*st;
	int64_t		 id = 0;

	if (sqlite3_prepare_v2(store_db(), "SELECT id FROM audit WHERE "
	    "prev_hash = ? AND id != ? ORDER BY id LIMIT 1", -1, &st, NULL) !=
	    SQLITE_OK)
		return 0;
	sqlite3_bind_blob(st, 1, v->prev_hash, AUDIT_HASH_LEN, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, not_id);
	if (sqlite3_step(st) == SQLITE_ROW)
		id = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return id;
}

static int
hash_matches(sqlite3_stmt *st, int64_t id)
{
	unsigned char		h[AUDIT_HASH_LEN];
	struct audit_row	r;

	if (sqlite3_column_bytes(st, 5) != AUDIT_HASH_LEN)
		return 0;
	r.ar_id = id;
	r.ar_ts = sqlite3_column_int64(st, 1);
	r.ar_kind = column_text(st, 2);
	r.ar_user = column_text(st, 3);
	r.ar_tenant = column_text(st, 4);
	r.ar_detail = column_text(st, 7);
	r.ar_prev_hash = sqlite3_column_blob(st, 5);
	audit_hash(&r, h);
	return blob_is(st, 6, h);
}

static void
missing(struct verify *v, int64_t id)
{
	if (id == v->prev_id + 2)
		snprintf(v->why, v->whylen, "row %lld: missing (ids jump from "
		    "%lld to %lld)", (long long)(v->prev_id + 1),
		    (long long)v->prev_id, (long long)id);
	else
		snprintf(v->why, v->whylen, "rows %lld-%lld: missing (ids "
		    "jump from %lld to %lld)", (long long)(v->prev_id + 1),
		    (long long)(id - 1), (long long)v->prev_id, (long long)id);
}

/*
 * One row, given the one before it.  The link is checked before the
 * contents so that a row moved whole reads as moved, not as changed.
 */
static int
verify_row(struct verify *v, sqlite3_stmt *st)
{
	int64_t id = sqlite3_column_int64(st, 0), other;

	if (id != v->prev_id + 1) {
		missing(v, id);
		return -1;
	}
	if (!blob_is(st, 5, v->prev_hash)) {
		if ((other = successor_elsewhere(v, id)) != 0)
			snprintf(v->why, v->whylen, "row %lld: out of order "
			    "(row %lld is the one that follows row %lld)",
			    (long long)id, (long long)other,
			    (long long)v->prev_id);
		else if (hash_matches(st, id))
			snprintf(v->why, v->whylen, "row %lld: chain broken "
			    "(its prev_hash is not row %lld's hash: one of "
			    "them was rewritten)", (long long)id,
			    (long long)v->prev_id);
		else
			snprintf(v->why, v->whylen, "row %lld: contents "
			    "changed", (long long)id);
		return -1;
	}
	if (!hash_matches(st, id)) {
		snprintf(v->why, v->whylen, "row %lld: contents changed",
		    (long long)id);
		return -1;
	}
	v->prev_id = id;
	memcpy(v->prev_hash, sqlite3_column_blob(st, 6), AUDIT_HASH_LEN);
	v->count++;
	return 0;
}

/* The checkpoint and the last row, in the caller's read transaction. */
static int
verify_begin(struct verify *v, char *why, size_t whylen)
{
	sqlite3_stmt	*st;
	int		 rc;

	memset(v, 0, sizeof(*v));
	v->why = why;
	v->whylen = whylen;
	why[0] = '\0';
	v->head_ok = head_get(&v->head_id, v->head_hash) == 0;
	if (sqlite3_prepare_v2(store_db(), "SELECT max(id) FROM audit", -1,
	    &st, NULL) != SQLITE_OK)
		return database_error(v);
	if ((rc = sqlite3_step(st)) == SQLITE_ROW)
		v->end_id = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return rc == SQLITE_ROW ? 0 : database_error(v);
}

/*
 * Up to VERIFY_ROWS more rows: 1 if there are more to read, 0 once the
 * last is read, -1 with why at the first problem.  The first step starts
 * below any id, so that a row slipped in under the first is seen.
 */
static int
verify_step(struct verify *v)
{
	sqlite3_stmt	*st;
	int		 rc, n = 0;

	if (sqlite3_prepare_v2(store_db(), "SELECT id, ts, kind, user, "
	    "tenant, prev_hash, hash, detail FROM audit WHERE id > ? AND "
	    "id <= ? ORDER BY id LIMIT ?", -1, &st, NULL) != SQLITE_OK)
		return database_error(v);
	sqlite3_bind_int64(st, 1, v->count == 0 ? INT64_MIN : v->prev_id);
	sqlite3_bind_int64(st, 2, v->end_id);
	sqlite3_bind_int(st, 3, VERIFY_ROWS);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && verify_row(v, st) == 0)
		n++;
	sqlite3_finalize(st);
	if (rc == SQLITE_ROW)
		return -1;
	if (rc != SQLITE_DONE)
		return database_error(v);
	return n == VERIFY_ROWS && v->prev_id < v->end_id ? 1 : 0;
}

/* The last row read against the checkpoint: a cut tail shows here. */
static int
verify_head(struct verify *v)
{
	int64_t		last = v->head_id;
	long long	n = (long long)v->prev_id;

	if (!v->head_ok) {
		snprintf(v->why, v->whylen, "the checkpoint is missing or "
		    "damaged (last row %lld)", n);
		return -1;
	}
	if (last > v->prev_id && n == 0)
		snprintf(v->why, v->whylen, "all rows missing (checkpoint "
		    "says %lld)", (long long)last);
	else if (last > v->prev_id)
		snprintf(v->why, v->whylen, "rows after %lld missing "
		    "(checkpoint says %lld)", n, (long long)last);
	else if (last < v->prev_id)
		snprintf(v->why, v->whylen, "rows after %lld are not in the "
		    "checkpoint (last row %lld): added behind mcpbroker's "
		    "back", (long long)last, n);
	else if (memcmp(v->head_hash, v->prev_hash, AUDIT_HASH_LEN) != 0)
		snprintf(v->why, v->whylen, "row %lld: differs from the "
		    "checkpoint", n);
	else
		return 0;
	return -1;
}

/* rc of the last step; 0 if the whole trail holds.  rows and head out. */
static int
verify_end(struct verify *v, int rc, uint64_t *rows,
    unsigned char head[AUDIT_HASH_LEN])
{
	if (rc == 0)
		rc = verify_head(v);
	*rows = v->count;
	memcpy(head, v->prev_hash, AUDIT_HASH_LEN);
	return rc;
}

int
audit_verify(char *why, size_t whylen, uint64_t *rows,
    unsigned char head[AUDIT_HASH_LEN])
{
	struct verify	v;
	int		rc;

	*rows = 0;
	memset(head, 0, AUDIT_HASH_LEN);
	snprintf(why, whylen, "database not open");
	/* One read transaction: the rows and the checkpoint of one moment. */
	if (store_db() == NULL || exec("BEGIN;") == -1)
		return -1;
	if ((rc = verify_begin(&v, why, whylen)) == 0)
		while ((rc = verify_step(&v)) == 1)
			;
	(void)exec("COMMIT;");
	return verify_end(&v, rc, rows, head);
}

/* ---- reading ---- */

/* A row as JSON; detail as an object, or as text if it no longer parses. */
static struct json_object *
row_json(sqlite3_stmt *st)
{
	struct json_object	*o = json_object_new_object(), *d;
	const char		*text;
	int			 i;
	static const char *const names[] = { "kind", "user", "tenant" };

	json_object_object_add(o, "id", json_object_new_int64(
	    sqlite3_column_int64(st, 0)));
	json_object_object_add(o, "ts", json_object_new_int64(
	    sqlite3_column_int64(st, 1)));
	for (i = 0; i < 3; i++)
		json_object_object_add(o, names[i], sqlite3_column_type(st,
		    2 + i) == SQLITE_NULL ? NULL : json_object_new_string(
		    (const char *)sqlite3_column_text(st, 2 + i)));
	text = (const char *)sqlite3_column_text(st, 5);
	if (text == NULL)
		text = "";
	if ((d = json_parse_object(text, strlen(text))) == NULL)
		d = json_object_new_string(text);
	json_object_object_add(o, "detail", d);
	return o;
}

/* ---- filters: small SQL functions over a row's detail ---- */

static struct json_object *
sql_detail_object(sqlite3_value *v)
{
	const char *text = (const char *)sqlite3_value_text(v);

	return text != NULL ? json_parse_object(text, strlen(text)) : NULL;
}

static void
sql_result_str(sqlite3_context *cx, struct json_object *o, const char *key)
{
	struct json_object *v;

	if (o != NULL && json_object_object_get_ex(o, key, &v) &&
	    (json_object_is_type(v, json_type_string) ||
	    json_object_is_type(v, json_type_int)))
		sqlite3_result_text(cx, json_object_get_string(v), -1,
		    SQLITE_TRANSIENT);
	else
		sqlite3_result_null(cx);
}

/* audit_detail(detail, key): a top-level string or integer, else NULL. */
static void
sql_detail(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
	struct json_object	*o = sql_detail_object(argv[0]);
	const char		*key;

	key = (const char *)sqlite3_value_text(argv[1]);
	(void)argc;
	sql_result_str(cx, key != NULL ? o : NULL, key != NULL ? key : "");
	json_object_put(o);
}

/* audit_tool(detail): SERVER.TOOL, or the name a forged call used. */
static void
sql_tool(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
	struct json_object	*o = sql_detail_object(argv[0]), *server, *tool;
	char			*id;

	(void)argc;
	if (o != NULL && json_object_object_get_ex(o, "server", &server) &&
	    json_object_object_get_ex(o, "tool", &tool)) {
		if (asprintf(&id, "%s.%s", json_object_get_string(server),
		    json_object_get_string(tool)) == -1)
			fatal("asprintf");
		sqlite3_result_text(cx, id, -1, free);
	} else
		sql_result_str(cx, o, "name");
	json_object_put(o);
}

/* audit_glob(pattern, text): the policy's globs, `*` and `?`. */
static void
sql_glob(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
	const char *p = (const char *)sqlite3_value_text(argv[0]);
	const char *t = (const char *)sqlite3_value_text(argv[1]);

	(void)argc;
	sqlite3_result_int(cx, p != NULL && t != NULL && audit_glob(p, t, 0));
}

static int
sql_functions(void)
{
	static const struct {
		const char	*name;
		int		 argc;
		void		(*fn)(sqlite3_context *, int, sqlite3_value **);
	} fns[] = {
		{ "audit_detail", 2, sql_detail },
		{ "audit_tool", 1, sql_tool },
		{ "audit_glob", 2, sql_glob },
	};
	size_t i;

	for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
		if (sqlite3_create_function(store_db(), fns[i].name,
		    fns[i].argc, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
		    fns[i].fn, NULL, NULL) != SQLITE_OK)
			return -1;
	return 0;
}

/* A tool's calls, and the outcomes and approvals that name them. */
#define TOOL_FILTER \
	" AND ((kind = 'tool_call' AND audit_glob(?7, audit_tool(detail)))" \
	" OR (kind IN ('tool_result', 'approval') AND" \
	" CAST(audit_detail(detail, 'intent') AS INTEGER) IN (SELECT id FROM" \
	" audit WHERE kind = 'tool_call' AND" \
	" audit_glob(?7, audit_tool(detail)))))"
#define DECISION_FILTER \
	" AND kind = 'tool_call' AND audit_detail(detail, 'decision') = ?8"

/*
 * Only the conditions asked for: with a time bound the ts index is the
 * way in; without one, a walk back from the newest id that stops at the
 * limit is (a ts index scan would read every row).
 */
static sqlite3_stmt *
list_prepare(const struct audit_filter *f)
{
	sqlite3_stmt	*st;
	char		 q[1200];

	if (sql_functions() == -1)
		return NULL;
	snprintf(q, sizeof(q), "SELECT id, ts, kind, user, tenant, detail "
	    "FROM audit WHERE 1%s%s%s%s%s%s%s ORDER BY id DESC LIMIT ?5",
	    f->af_since_ms > 0 ? " AND ts >= ?1" : "",
	    f->af_until_ms > 0 ? " AND ts <= ?2" : "",
	    f->af_user != NULL ? " AND user = ?3" : "",
	    f->af_kind != NULL ? " AND kind = ?4" : "",
	    f->af_tenant != NULL ? " AND tenant = ?6" : "",
	    f->af_tool != NULL ? TOOL_FILTER : "",
	    f->af_decision != NULL ? DECISION_FILTER : "");
	if (sqlite3_prepare_v2(store_db(), q, -1, &st, NULL) != SQLITE_OK) {
		log_warnx("audit: %s", sqlite3_errmsg(store_db()));
		return NULL;
	}
	sqlite3_bind_int64(st, 1, f->af_since_ms);
	sqlite3_bind_int64(st, 2, f->af_until_ms);
	if (f->af_user != NULL)
		sqlite3_bind_text(st, 3, f->af_user, -1, SQLITE_STATIC);
	if (f->af_kind != NULL)
		sqlite3_bind_text(st, 4, f->af_kind, -1, SQLITE_STATIC);
	if (f->af_tenant != NULL)
		sqlite3_bind_text(st, 6, f->af_tenant, -1, SQLITE_STATIC);
	if (f->af_tool != NULL)
		sqlite3_bind_text(st, 7, f->af_tool, -1, SQLITE_STATIC);
	if (f->af_decision != NULL)
		sqlite3_bind_text(st, 8, f->af_decision, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 5, f->af_limit > 0 ? (int)f->af_limit :
	    AUDIT_SHOW_DEFAULT);
	return st;
}

/* Newest first from the database, so the limit keeps the latest rows. */
struct json_object *
audit_list(const struct audit_filter *f, int *truncated)
{
	struct json_object	*rows = json_object_new_array(), *out;
	sqlite3_stmt		*st;
	size_t			 bytes = 0, i, n;

	*truncated = 0;
	if (store_db() == NULL || (st = list_prepare(f)) == NULL)
		return rows;
	while (sqlite3_step(st) == SQLITE_ROW) {
		bytes += 2 * (size_t)sqlite3_column_bytes(st, 5) + 256;
		if (bytes > AUDIT_REPLY_BYTES) {
			*truncated = 1;
			break;
		}
		json_object_array_add(rows, row_json(st));
	}
	sqlite3_finalize(st);
	out = json_object_new_array();
	n = json_object_array_length(rows);
	for (i = n; i > 0; i--)
		json_object_array_add(out, json_object_get(
		    json_object_array_get_idx(rows, i - 1)));
	json_object_put(rows);
	return out;
}

static void
add_hex(struct json_object *o, const char *key, sqlite3_stmt *st, int i)
{
	char	h[2 * AUDIT_HASH_LEN + 1] = "";
	int	len = sqlite3_column_bytes(st, i);

	if (len > AUDIT_HASH_LEN)
		len = AUDIT_HASH_LEN;
	if (len > 0)
		hex_encode(sqlite3_column_blob(st, i), (size_t)len, h);
	json_object_object_add(o, key, json_object_new_string(h));
}

int64_t
audit_export(int64_t after_id, unsigned int max_rows, enum audit_format fmt,
    const char *host, audit_line_fn fn, void *arg)
{
	struct json_object	*o;
	sqlite3_stmt		*st;
	int64_t			 last = after_id, id;
	char			*line;
	int			 stop = 0;

	if (store_db() == NULL || sqlite3_prepare_v2(store_db(),
	    "SELECT id, ts, kind, user, tenant, detail, prev_hash, hash FROM "
	    "audit WHERE id > ? ORDER BY id LIMIT ?", -1, &st, NULL) !=
	    SQLITE_OK)
		return -1;
	sqlite3_bind_int64(st, 1, after_id);
	sqlite3_bind_int(st, 2, (int)max_rows);
	while (!stop && sqlite3_step(st) == SQLITE_ROW) {
		id = sqlite3_column_int64(st, 0);
		o = row_json(st);
		add_hex(o, "prev_hash", st, 6);
		add_hex(o, "hash", st, 7);
		line = audit_format_row(fmt, o, host);
		stop = fn(id, line, arg);
		free(line);
		json_object_put(o);
		last = id;
	}
	sqlite3_finalize(st);
	return last;
}

/* ---- signed checkpoints ---- */

#define ED25519_SIG_LEN		64
#define B64_MAX			256

static EVP_PKEY *signing_key;

/* An encrypted key file is refused, never prompted for. */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return 0;
}

int
audit_set_signing_key(const char *pem)
{
	EVP_PKEY	*k = NULL;
	BIO		*bio;

	if (pem != NULL) {
		if ((bio = BIO_new_mem_buf(pem, -1)) == NULL)
			return -1;
		k = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
		BIO_free(bio);
		ERR_clear_error();
		if (k == NULL || EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) {
			EVP_PKEY_free(k);
			return -1;
		}
	}
	EVP_PKEY_free(signing_key);
	signing_key = k;
	return 0;
}

/* The public half as base64 DER (SubjectPublicKeyInfo): a PEM's body. */
static int
public_key_b64(char *out, size_t outlen)
{
	unsigned char	*der = NULL;
	int		 len;

	if ((len = i2d_PUBKEY(signing_key, &der)) <= 0 ||
	    (size_t)(len + 2) / 3 * 4 + 1 > outlen) {
		OPENSSL_free(der);
		return -1;
	}
	EVP_EncodeBlock((unsigned char *)out, der, len);
	OPENSSL_free(der);
	return 0;
}

static int
sig_op(int sign, const char *msg, size_t len, unsigned char *sig,
    size_t *siglen)
{
	EVP_MD_CTX	*md;
	int		 ok;

	if ((md = EVP_MD_CTX_new()) == NULL)
		return -1;
	/* Ed25519 hashes by itself: no digest, one shot. */
	if (sign)
		ok = EVP_DigestSignInit(md, NULL, NULL, NULL, signing_key) ==
		    1 && EVP_DigestSign(md, sig, siglen,
		    (const unsigned char *)msg, len) == 1;
	else
		ok = EVP_DigestVerifyInit(md, NULL, NULL, NULL,
		    signing_key) == 1 && EVP_DigestVerify(md, sig, *siglen,
		    (const unsigned char *)msg, len) == 1;
	EVP_MD_CTX_free(md);
	ERR_clear_error();
	return ok ? 0 : -1;
}

static int
no_signing_key(char *why, size_t whylen)
{
	if (signing_key != NULL)
		return 0;
	snprintf(why, whylen, "no signing key is configured: add audit { "
	    "signing-key-file \"PATH\" } (openssl genpkey -algorithm "
	    "ed25519) and reload");
	return 1;
}

/* The signed checkpoint of a trail that verified: ids 1..rows, head. */
static struct json_object *
checkpoint_sign(uint64_t rows, const unsigned char head[AUDIT_HASH_LEN],
    char *why, size_t whylen)
{
	unsigned char		 sig[ED25519_SIG_LEN];
	char			 hhex[2 * AUDIT_HASH_LEN + 1];
	char			 when[AUDIT_TIME_LEN];
	char			 text[512], pub[B64_MAX], sig64[B64_MAX];
	struct json_object	*cp;
	size_t			 siglen = sizeof(sig);
	int			 len;

	if (no_signing_key(why, whylen))
		return NULL;
	hex_encode(head, AUDIT_HASH_LEN, hhex);
	audit_time_str(now_ms(), when, sizeof(when));
	if ((len = audit_checkpoint_text(text, sizeof(text), (int64_t)rows,
	    hhex, (int64_t)rows, when)) == -1 ||
	    sig_op(1, text, (size_t)len, sig, &siglen) == -1 ||
	    siglen != sizeof(sig) || public_key_b64(pub, sizeof(pub)) == -1) {
		snprintf(why, whylen, "signing failed");
		return NULL;
	}
	EVP_EncodeBlock((unsigned char *)sig64, sig, sizeof(sig));
	cp = json_object_new_object();
	json_object_object_add(cp, "version", json_object_new_int(
	    AUDIT_CHECKPOINT_VERSION));
	json_object_object_add(cp, "last_id", json_object_new_int64(
	    (int64_t)rows));
	json_object_object_add(cp, "head", json_object_new_string(hhex));
	json_object_object_add(cp, "rows", json_object_new_int64(
	    (int64_t)rows));
	json_object_object_add(cp, "time", json_object_new_string(when));
	json_object_object_add(cp, "public_key", json_object_new_string(pub));
	json_object_object_add(cp, "signature", json_object_new_string(sig64));
	return cp;
}

/* Exactly 64 bytes of padded base64, or -1. */
static int
sig_decode(const char *b64, unsigned char sig[ED25519_SIG_LEN])
{
	unsigned char	buf[B64_MAX];
	size_t		len = strlen(b64);

	if (len != 88 || strcmp(b64 + 86, "==") != 0 ||
	    EVP_DecodeBlock(buf, (const unsigned char *)b64, (int)len) != 66)
		return -1;
	memcpy(sig, buf, ED25519_SIG_LEN);
	return 0;
}

/* The trail must still hold row last_id, with the hash vouched for. */
static int
checkpoint_row(int64_t last_id, const char *head_hex, char *why,
    size_t whylen)
{
	sqlite3_stmt	*st;
	char		 h[2 * AUDIT_HASH_LEN + 1] = "";
	int64_t		 max = 0;
	int		 found = 0;

	if (last_id == 0)
		return 0;
	if (sqlite3_prepare_v2(store_db(), "SELECT hash FROM audit WHERE id "
	    "= ?", -1, &st, NULL) != SQLITE_OK) {
		snprintf(why, whylen, "database: %s", sqlite3_errmsg(
		    store_db()));
		return -1;
	}
	sqlite3_bind_int64(st, 1, last_id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		found = 1;
		if (sqlite3_column_bytes(st, 0) == AUDIT_HASH_LEN)
			hex_encode(sqlite3_column_blob(st, 0), AUDIT_HASH_LEN, h);
	}
	sqlite3_finalize(st);
	if (!found && sqlite3_prepare_v2(store_db(), "SELECT max(id) FROM "
	    "audit", -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW)
			max = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	if (!found && max < last_id)
		snprintf(why, whylen, "the trail was truncated: the "
		    "checkpoint vouches for row %lld, the trail ends at row "
		    "%lld", (long long)last_id, (long long)max);
	else if (!found)
		snprintf(why, whylen, "row %lld, which the checkpoint vouches "
		    "for, is missing", (long long)last_id);
	else if (strcmp(h, head_hex) != 0)
		snprintf(why, whylen, "row %lld is not the row the checkpoint "
		    "vouches for: the trail was rewritten", (long long)last_id);
	else
		return 0;
	return -1;
}

int
audit_checkpoint_check(struct json_object *cp, char *why, size_t whylen)
{
	unsigned char	 sig[ED25519_SIG_LEN];
	const char	*head, *when, *pub, *sig64;
	char		 text[512], ours[B64_MAX];
	int64_t		 version, last_id, rows;
	size_t		 siglen = sizeof(sig);
	int		 len;

	if (json_get_int(cp, "version", 1, 1, 0, &version) == -1 ||
	    json_get_int(cp, "last_id", 0, INT64_MAX, 0, &last_id) == -1 ||
	    json_get_int(cp, "rows", 0, INT64_MAX, 0, &rows) == -1 ||
	    json_get_str(cp, "head", 64, 0, &head) == -1 ||
	    json_get_str(cp, "time", 64, 0, &when) == -1 ||
	    json_get_str(cp, "public_key", B64_MAX - 1, 0, &pub) == -1 ||
	    json_get_str(cp, "signature", B64_MAX - 1, 0, &sig64) == -1 ||
	    (len = audit_checkpoint_text(text, sizeof(text), last_id, head,
	    rows, when)) == -1) {
		snprintf(why, whylen, "not a checkpoint of version %d",
		    AUDIT_CHECKPOINT_VERSION);
		return -1;
	}
	if (signing_key == NULL) {
		snprintf(why, whylen, "no signing key is configured, so the "
		    "checkpoint's signature cannot be checked");
		return -1;
	}
	if (public_key_b64(ours, sizeof(ours)) == -1 || strcmp(ours, pub) !=
	    0) {
		snprintf(why, whylen, "signed by another key than the "
		    "configured signing-key-file");
		return -1;
	}
	if (sig_decode(sig64, sig) == -1 ||
	    sig_op(0, text, (size_t)len, sig, &siglen) == -1) {
		snprintf(why, whylen, "the signature does not verify: the "
		    "checkpoint was altered");
		return -1;
	}
	return checkpoint_row(last_id, head, why, whylen);
}

/* ---- mcpbrokerctl audit ... ---- */

static struct json_object *
reply_ok(void)
{
	struct json_object *r = json_object_new_object();

	json_object_object_add(r, "ok", json_object_new_boolean(1));
	return r;
}

void
audit_filter_who(struct audit_filter *f, char who[OWNER_MAX])
{
	const char *tenant, *name;

	/* Too long for a tenant and a name: as it is, it matches nothing. */
	if (f->af_user != NULL && owner_split(f->af_user, who,
	    &tenant, &name) == 0) {
		f->af_tenant = tenant;
		f->af_user = name;
	}
}

static void
admin_show(uint64_t id, struct json_object *o)
{
	struct audit_filter	 f;
	struct json_object	*r;
	int64_t			 limit = AUDIT_SHOW_DEFAULT;
	int			 truncated;
	char			 who[OWNER_MAX];

	memset(&f, 0, sizeof(f));
	if (json_get_int(o, "limit", 1, AUDIT_SHOW_MAX, 1, &limit) == -1 ||
	    json_get_int(o, "since", 0, INT64_MAX, 1, &f.af_since_ms) == -1 ||
	    json_get_int(o, "until", 0, INT64_MAX, 1, &f.af_until_ms) == -1 ||
	    json_get_str(o, "user", sizeof(who) - 1, 1, &f.af_user) == -1 ||
	    json_get_str(o, "kind", 64, 1, &f.af_kind) == -1 ||
	    json_get_str(o, "tool", 256, 1, &f.af_tool) == -1 ||
	    json_get_str(o, "decision", 16, 1, &f.af_decision) == -1) {
		admin_error(id, "audit show: limit 1-10000, user and kind of "
		    "64 characters at most, tool of 256");
		return;
	}
	audit_filter_who(&f, who);
	f.af_limit = (unsigned int)limit;
	r = reply_ok();
	json_object_object_add(r, "rows", audit_list(&f, &truncated));
	if (truncated)
		json_object_object_add(r, "truncated",
		    json_object_new_boolean(1));
	admin_reply(id, r);
}

/* A checkpoint held elsewhere, against the trail as it is now. */
static struct json_object *
verify_checkpoint(struct json_object *cp)
{
	struct json_object	*r = json_object_new_object(), *v;
	char			 why[256];
	int			 ok;

	ok = audit_checkpoint_check(cp, why, sizeof(why)) == 0;
	json_object_object_add(r, "ok", json_object_new_boolean(ok));
	if (json_object_object_get_ex(cp, "last_id", &v))
		json_object_object_add(r, "last_id", json_object_get(v));
	if (json_object_object_get_ex(cp, "time", &v))
		json_object_object_add(r, "time", json_object_get(v));
	if (!ok) {
		json_object_object_add(r, "problem",
		    json_object_new_string(why));
		log_warnx("audit verify: checkpoint: %s", why);
	}
	return r;
}

/*
 * The admin's verify and checkpoint walk the trail as jobs, a step each
 * pass of the loop (a zero timer, so that what is ready is served in
 * between); one job walks at a time, the others wait their turn.
 */
#define VERIFY_JOBS	4

struct verify_job {
	TAILQ_ENTRY(verify_job)	 vj_entry;
	uint64_t		 vj_admin;	/* the request it answers */
	int			 vj_sign;	/* a checkpoint: sign the head */
	struct json_object	*vj_checkpoint;	/* to check as well, or NULL */
	int			 vj_begun;
	struct verify		 vj_v;
	char			 vj_why[256];
};
static struct {
	struct event			*ev;
	TAILQ_HEAD(, verify_job)	 queue;
	int				 n;
} jobs = { NULL, TAILQ_HEAD_INITIALIZER(jobs.queue), 0 };

static void
jobs_schedule(void)
{
	struct timeval tv = { 0, 0 };

	if (!TAILQ_EMPTY(&jobs.queue))
		evtimer_add(jobs.ev, &tv);
}

/* A broken trail is an answer, not a failed request: ok, intact false. */
static void
verify_answer(struct verify_job *j, int intact, uint64_t rows,
    const unsigned char head[AUDIT_HASH_LEN])
{
	char			 h[2 * AUDIT_HASH_LEN + 1];
	struct json_object	*r = reply_ok();

	hex_encode(head, AUDIT_HASH_LEN, h);
	json_object_object_add(r, "intact", json_object_new_boolean(intact));
	json_object_object_add(r, "rows", json_object_new_int64(
	    (int64_t)rows));
	json_object_object_add(r, "head", json_object_new_string(h));
	if (!intact) {
		json_object_object_add(r, "problem",
		    json_object_new_string(j->vj_why));
		log_warnx("audit verify: %s", j->vj_why);
	}
	if (j->vj_checkpoint != NULL)
		json_object_object_add(r, "checkpoint",
		    verify_checkpoint(j->vj_checkpoint));
	admin_reply(j->vj_admin, r);
}

static void
checkpoint_answer(struct verify_job *j, int intact, uint64_t rows,
    const unsigned char head[AUDIT_HASH_LEN])
{
	struct json_object	*r, *cp = NULL;
	char			 why[300];

	/* A checkpoint vouches for the chain: never for a broken one. */
	if (!intact)
		snprintf(why, sizeof(why), "the trail is broken (%s): not "
		    "signing it", j->vj_why);
	else
		cp = checkpoint_sign(rows, head, why, sizeof(why));
	if (cp == NULL) {
		admin_error(j->vj_admin, why);
		return;
	}
	log_info("audit checkpoint: row %lld signed", (long long)rows);
	r = reply_ok();
	json_object_object_add(r, "checkpoint", cp);
	admin_reply(j->vj_admin, r);
}

/* One step of the first job: 1 while it has more to walk. */
static int
job_step(struct verify_job *j)
{
	int rc;

	if (!j->vj_begun) {
		j->vj_begun = 1;
		if (store_db() == NULL || exec("BEGIN;") == -1) {
			snprintf(j->vj_why, sizeof(j->vj_why),
			    "database not open");
			return -1;
		}
		rc = verify_begin(&j->vj_v, j->vj_why, sizeof(j->vj_why));
		(void)exec("COMMIT;");
		if (rc == -1)
			return -1;
	}
	return verify_step(&j->vj_v);
}

static void
jobs_run(int fd, short events, void *arg)
{
	struct verify_job	*j = TAILQ_FIRST(&jobs.queue);
	unsigned char		 head[AUDIT_HASH_LEN];
	uint64_t		 rows;
	int			 rc, intact;

	(void)fd;
	(void)events;
	(void)arg;
	if (j == NULL)
		return;
	if ((rc = job_step(j)) != 1) {
		TAILQ_REMOVE(&jobs.queue, j, vj_entry);
		jobs.n--;
		intact = verify_end(&j->vj_v, rc, &rows, head) == 0;
		if (j->vj_sign)
			checkpoint_answer(j, intact, rows, head);
		else
			verify_answer(j, intact, rows, head);
		json_object_put(j->vj_checkpoint);
		free(j);
	}
	jobs_schedule();
}

static void
job_start(uint64_t id, int sign, struct json_object *checkpoint)
{
	struct verify_job *j;

	if (jobs.n == VERIFY_JOBS) {
		admin_error(id, "audit: 4 walks of the trail (verify, "
		    "checkpoint) are running or waiting; try again when one "
		    "ends");
		return;
	}
	if ((j = calloc(1, sizeof(*j))) == NULL)
		fatal("calloc");
	j->vj_admin = id;
	j->vj_sign = sign;
	j->vj_checkpoint = json_object_get(checkpoint);
	TAILQ_INSERT_TAIL(&jobs.queue, j, vj_entry);
	jobs.n++;
	jobs_schedule();
}

static void
jobs_init(struct event_base *base)
{
	if (jobs.ev != NULL)
		event_free(jobs.ev);
	if ((jobs.ev = evtimer_new(base, jobs_run, NULL)) == NULL)
		fatalx("audit: evtimer_new");
	jobs_schedule();
}

static void
admin_verify(uint64_t id, struct json_object *o)
{
	struct json_object *cp = NULL;

	(void)json_object_object_get_ex(o, "checkpoint", &cp);
	job_start(id, 0, cp);
}

static void
admin_checkpoint(uint64_t id)
{
	char why[300];

	if (no_signing_key(why, sizeof(why)))
		admin_error(id, why);
	else
		job_start(id, 1, NULL);
}

struct export_buf {
	char	*buf;
	size_t	 len, cap;
};

static int
export_line(int64_t id, const char *line, void *arg)
{
	struct export_buf	*b = arg;
	size_t			 n = strlen(line);
	char			*p;

	(void)id;
	if (b->len + n + 2 > b->cap) {
		b->cap = (b->len + n + 2) * 2;
		if ((p = realloc(b->buf, b->cap)) == NULL)
			fatal("audit export");
		b->buf = p;
	}
	memcpy(b->buf + b->len, line, n);
	b->len += n;
	b->buf[b->len++] = '\n';
	b->buf[b->len] = '\0';
	return b->len >= AUDIT_REPLY_BYTES;
}

/* One page of JSON Lines; mcpbrokerctl asks again with after = last. */
static void
admin_export(uint64_t id, struct json_object *o)
{
	struct export_buf	 b = { NULL, 0, 0 };
	struct json_object	*r;
	enum audit_format	 fmt = AUDIT_JSONL;
	const char		*format = NULL, *host = NULL;
	int64_t			 after = 0, last;

	if (json_get_int(o, "after", 0, INT64_MAX, 1, &after) == -1 ||
	    json_get_str(o, "format", 16, 1, &format) == -1 ||
	    json_get_str(o, "host", 255, 1, &host) == -1 ||
	    (format != NULL && audit_format_parse(format, &fmt) == -1)) {
		admin_error(id, "audit export: after must be a row id, format "
		    "jsonl, syslog or cef");
		return;
	}
	if ((last = audit_export(after, AUDIT_EXPORT_ROWS, fmt, host,
	    export_line, &b)) == -1) {
		free(b.buf);
		admin_error(id, "audit export: database error");
		return;
	}
	r = reply_ok();
	json_object_object_add(r, "lines", json_object_new_string(
	    b.buf != NULL ? b.buf : ""));
	json_object_object_add(r, "last", json_object_new_int64(last));
	json_object_object_add(r, "more", json_object_new_boolean(last !=
	    after));
	free(b.buf);
	admin_reply(id, r);
}

void
audit_admin(uint64_t id, const char *op, struct json_object *o)
{
	if (strcmp(op, "audit_show") == 0)
		admin_show(id, o);
	else if (strcmp(op, "audit_verify") == 0)
		admin_verify(id, o);
	else if (strcmp(op, "audit_export") == 0)
		admin_export(id, o);
	else if (strcmp(op, "audit_checkpoint") == 0)
		admin_checkpoint(id);
	else
		admin_error(id, "unknown op");
}
