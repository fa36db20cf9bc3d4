/*
 * The audit trail.  Row n's hash covers its own contents and row n-1's
 * hash, so changing, removing or moving a row breaks the chain from there
 * on; audit_checkpoint holds the head (last id and hash), written in the
 * same transaction as each row, so that a missing tail shows too.
 *
 * This is tamper-evidence, not tamper-proofing: the hash has no key, so
 * whoever can write the database can rewrite the chain from any row on
 * and the checkpoint with it.  What defeats that is a copy held elsewhere:
 * the export to a SIEM, or the head hash `audit verify` prints, noted down.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <openssl/evp.h>
#include <sqlite3.h>

#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_store.h"
#include "common/log.h"
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

static void
hex(const unsigned char *h, size_t len, char *out)
{
	size_t i;

	for (i = 0; i < len; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
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

	if (sqlite3_prepare_v2(store_db(), "SELECT last_id, last_hash FROM "
	    "audit_checkpoint WHERE id = 1", -1, &st, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(st) == SQLITE_ROW &&
	    sqlite3_column_bytes(st, 1) == AUDIT_HASH_LEN) {
		*last_id = sqlite3_column_int64(st, 0);
		memcpy(last_hash, sqlite3_column_blob(st, 1), AUDIT_HASH_LEN);
		ok = 1;
	}
	sqlite3_finalize(st);
	if (!ok)
		log_warnx("audit: the checkpoint is missing or damaged; "
		    "run `mcpbrokerctl audit verify`");
	return ok ? 0 : -1;
}

static int
step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

static int
row_insert(const struct audit_row *r, const unsigned char *hash)
{
	sqlite3_stmt	*st;
	int		 i;
	const struct audit_text *f[] = { &r->ar_kind, &r->ar_user,
	    &r->ar_tenant, &r->ar_detail };

	if (sqlite3_prepare_v2(store_db(), "INSERT INTO audit (id, ts, kind, "
	    "user, tenant, detail, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, "
	    "?, ?)", -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_int64(st, 1, r->ar_id);
	sqlite3_bind_int64(st, 2, r->ar_ts);
	for (i = 0; i < 4; i++)
		if (f[i]->p != NULL)
			sqlite3_bind_text(st, 3 + i, f[i]->p, (int)f[i]->len,
			    SQLITE_STATIC);
	sqlite3_bind_blob(st, 7, r->ar_prev_hash, AUDIT_HASH_LEN,
	    SQLITE_STATIC);
	sqlite3_bind_blob(st, 8, hash, AUDIT_HASH_LEN, SQLITE_STATIC);
	return step_done(st);
}

static int
head_set(int64_t id, const unsigned char *hash)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(store_db(), "UPDATE audit_checkpoint SET "
	    "last_id = ?, last_hash = ? WHERE id = 1", -1, &st, NULL) !=
	    SQLITE_OK)
		return -1;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_blob(st, 2, hash, AUDIT_HASH_LEN, SQLITE_STATIC);
	if (step_done(st) == -1 || sqlite3_changes(store_db()) != 1)
		return -1;
	return 0;
}

/* Inside a transaction: link the row to the head, store it, move the head. */
static int64_t
append_locked(const char *kind, const char *user, const char *tenant,
    const char *detail)
{
	unsigned char		prev[AUDIT_HASH_LEN], hash[AUDIT_HASH_LEN];
	struct audit_row	r;

	if (head_get(&r.ar_id, prev) == -1)
		return -1;
	r.ar_id++;
	r.ar_ts = now_ms();
	r.ar_kind = text_of(kind);
	r.ar_user = text_of(user);
	r.ar_tenant = text_of(tenant);
	r.ar_detail = text_of(detail);
	r.ar_prev_hash = prev;
	audit_hash(&r, hash);
	if (row_insert(&r, hash) == -1 || head_set(r.ar_id, hash) == -1) {
		log_warnx("audit: cannot append: %s",
		    sqlite3_errmsg(store_db()));
		return -1;
	}
	return r.ar_id;
}

int64_t
audit_append(const char *kind, const char *user, const char *tenant,
    struct json_object *detail)
{
	const char	*text = "{}";
	int64_t		 id;
	int		 outer;

	if (store_db() == NULL || kind == NULL || (detail != NULL &&
	    !json_object_is_type(detail, json_type_object))) {
		log_warnx("audit: bad append (%s)", kind != NULL ? kind : "?");
		return -1;
	}
	if (detail != NULL)
		text = json_object_to_json_string_ext(detail,
		    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	/* Nested in the caller's transaction, a savepoint; else our own. */
	outer = !sqlite3_get_autocommit(store_db());
	if (exec(outer ? "SAVEPOINT audit_append;" : "BEGIN IMMEDIATE;") ==
	    -1)
		return -1;
	if ((id = append_locked(kind, user, tenant, text)) == -1 ||
	    exec(outer ? "RELEASE audit_append;" : "COMMIT;") == -1) {
		(void)exec(outer ? "ROLLBACK TO audit_append; RELEASE "
		    "audit_append;" : "ROLLBACK;");
		return -1;
	}
	return id;
}

int
audit_begin(void)
{
	return store_db() != NULL ? exec("BEGIN IMMEDIATE;") : -1;
}

int
audit_end(int ok)
{
	if (ok && exec("COMMIT;") == 0)
		return 0;
	(void)exec("ROLLBACK;");
	return ok ? -1 : 0;
}

/* ---- verifying ---- */

struct verify {
	sqlite3_stmt	*rows;
	int64_t		 prev_id;
	unsigned char	 prev_hash[AUDIT_HASH_LEN];
	uint64_t	 count;
	char		*why;
	size_t		 whylen;
};

static int
blob_is(sqlite3_stmt *st, int i, const unsigned char *h)
{
	return sqlite3_column_bytes(st, i) == AUDIT_HASH_LEN &&
	    memcmp(sqlite3_column_blob(st, i), h, AUDIT_HASH_LEN) == 0;
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
verify_row(struct verify *v)
{
	sqlite3_stmt	*st = v->rows;
	int64_t		 id = sqlite3_column_int64(st, 0), other;

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

/* The last row read against the checkpoint: a cut tail shows here. */
static int
verify_head(struct verify *v)
{
	unsigned char	h[AUDIT_HASH_LEN];
	int64_t		last;
	long long	n = (long long)v->prev_id;

	if (head_get(&last, h) == -1) {
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
	else if (memcmp(h, v->prev_hash, AUDIT_HASH_LEN) != 0)
		snprintf(v->why, v->whylen, "row %lld: differs from the "
		    "checkpoint", n);
	else
		return 0;
	return -1;
}

static int
verify_walk(struct verify *v)
{
	int rc;

	if (sqlite3_prepare_v2(store_db(), "SELECT id, ts, kind, user, "
	    "tenant, prev_hash, hash, detail FROM audit ORDER BY id", -1,
	    &v->rows, NULL) != SQLITE_OK) {
		snprintf(v->why, v->whylen, "database: %s",
		    sqlite3_errmsg(store_db()));
		return -1;
	}
	while ((rc = sqlite3_step(v->rows)) == SQLITE_ROW)
		if (verify_row(v) == -1)
			break;
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		snprintf(v->why, v->whylen, "database: %s",
		    sqlite3_errmsg(store_db()));
	sqlite3_finalize(v->rows);
	if (rc != SQLITE_DONE)
		return -1;
	return verify_head(v);
}

int
audit_verify(char *why, size_t whylen, uint64_t *rows,
    unsigned char head[AUDIT_HASH_LEN])
{
	struct verify	v;
	int		rc;

	memset(&v, 0, sizeof(v));
	v.why = why;
	v.whylen = whylen;
	snprintf(why, whylen, "database not open");
	/* One read transaction: the rows and the checkpoint of one moment. */
	if (store_db() == NULL || exec("BEGIN;") == -1)
		return -1;
	why[0] = '\0';
	rc = verify_walk(&v);
	(void)exec("COMMIT;");
	*rows = v.count;
	memcpy(head, v.prev_hash, AUDIT_HASH_LEN);
	return rc;
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

/*
 * Only the conditions asked for: with a time bound the ts index is the
 * way in; without one, a walk back from the newest id that stops at the
 * limit is (a ts index scan would read every row).
 */
static sqlite3_stmt *
list_prepare(const struct audit_filter *f)
{
	sqlite3_stmt	*st;
	char		 q[600];

	snprintf(q, sizeof(q), "SELECT id, ts, kind, user, tenant, detail "
	    "FROM audit WHERE 1%s%s%s%s%s ORDER BY id DESC LIMIT ?5",
	    f->af_since_ms > 0 ? " AND ts >= ?1" : "",
	    f->af_until_ms > 0 ? " AND ts <= ?2" : "",
	    f->af_user != NULL ? " AND user = ?3" : "",
	    f->af_kind != NULL ? " AND kind = ?4" : "",
	    f->af_tenant != NULL ? " AND tenant = ?6" : "");
	if (sqlite3_prepare_v2(store_db(), q, -1, &st, NULL) != SQLITE_OK)
		return NULL;
	sqlite3_bind_int64(st, 1, f->af_since_ms);
	sqlite3_bind_int64(st, 2, f->af_until_ms);
	if (f->af_user != NULL)
		sqlite3_bind_text(st, 3, f->af_user, -1, SQLITE_STATIC);
	if (f->af_kind != NULL)
		sqlite3_bind_text(st, 4, f->af_kind, -1, SQLITE_STATIC);
	if (f->af_tenant != NULL)
		sqlite3_bind_text(st, 6, f->af_tenant, -1, SQLITE_STATIC);
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
		hex(sqlite3_column_blob(st, i), (size_t)len, h);
	json_object_object_add(o, key, json_object_new_string(h));
}

int64_t
audit_export(int64_t after_id, unsigned int max_rows, audit_line_fn fn,
    void *arg)
{
	struct json_object	*o;
	sqlite3_stmt		*st;
	int64_t			 last = after_id, id;
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
		stop = fn(id, json_object_to_json_string_ext(o,
		    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
		    arg);
		json_object_put(o);
		last = id;
	}
	sqlite3_finalize(st);
	return last;
}

/* ---- mcpbrokerctl audit ... ---- */

static struct json_object *
reply_ok(void)
{
	struct json_object *r = json_object_new_object();

	json_object_object_add(r, "ok", json_object_new_boolean(1));
	return r;
}

static void
admin_show(uint64_t id, struct json_object *o)
{
	struct audit_filter	 f;
	struct json_object	*r;
	int64_t			 limit = AUDIT_SHOW_DEFAULT;
	int			 truncated;

	memset(&f, 0, sizeof(f));
	if (json_get_int(o, "limit", 1, AUDIT_SHOW_MAX, 1, &limit) == -1 ||
	    json_get_int(o, "since", 0, INT64_MAX, 1, &f.af_since_ms) == -1 ||
	    json_get_int(o, "until", 0, INT64_MAX, 1, &f.af_until_ms) == -1 ||
	    json_get_str(o, "user", 64, 1, &f.af_user) == -1 ||
	    json_get_str(o, "kind", 64, 1, &f.af_kind) == -1) {
		admin_error(id, "audit show: limit 1-10000, user and kind of "
		    "64 characters at most");
		return;
	}
	f.af_limit = (unsigned int)limit;
	r = reply_ok();
	json_object_object_add(r, "rows", audit_list(&f, &truncated));
	if (truncated)
		json_object_object_add(r, "truncated",
		    json_object_new_boolean(1));
	admin_reply(id, r);
}

/* A broken trail is an answer, not a failed request: ok, intact false. */
static void
admin_verify(uint64_t id)
{
	unsigned char		 head[AUDIT_HASH_LEN];
	char			 why[256], h[2 * AUDIT_HASH_LEN + 1];
	struct json_object	*r = reply_ok();
	uint64_t		 rows;
	int			 intact;

	intact = audit_verify(why, sizeof(why), &rows, head) == 0;
	hex(head, sizeof(head), h);
	json_object_object_add(r, "intact", json_object_new_boolean(intact));
	json_object_object_add(r, "rows", json_object_new_int64(
	    (int64_t)rows));
	json_object_object_add(r, "head", json_object_new_string(h));
	if (!intact) {
		json_object_object_add(r, "problem",
		    json_object_new_string(why));
		log_warnx("audit verify: %s", why);
	}
	admin_reply(id, r);
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
	int64_t			 after = 0, last;

	if (json_get_int(o, "after", 0, INT64_MAX, 1, &after) == -1) {
		admin_error(id, "audit export: after must be a row id");
		return;
	}
	if ((last = audit_export(after, AUDIT_EXPORT_ROWS, export_line,
	    &b)) == -1) {
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
		admin_verify(id);
	else if (strcmp(op, "audit_export") == 0)
		admin_export(id, o);
	else
		admin_error(id, "unknown op");
}
