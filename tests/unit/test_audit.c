/*
 * The audit trail on a real database in a temporary directory: rows
 * appended and verified, then tampered with in raw SQL the way someone
 * with write access to the file would (triggers dropped first), and
 * audit_verify must name the row.  The hash encoding is re-implemented
 * here, independently, so that a change to it cannot pass unnoticed.
 */
#include <sys/stat.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <sqlite3.h>

#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_store.h"
#include "tests/unit/controller_stub.h"

/* SHA-256 of the encoding of test_hash_known_answer's row, in Python. */
#define AUDIT_KAT \
	"952501ff12214d5817d50e893d4e2d0ca6306ba57ed315307bb8d2917864de8a"

static char dir[64];
static struct event_base *base;		/* for group commit */
static int commits;

/* Each COMMIT of the database: a batch costs one, whatever its size. */
static int
count_commit(void *arg)
{
	(void)arg;
	commits++;
	return 0;
}

static int
setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_audit.XXXXXX");
	if (mkdtemp(dir) == NULL || store_open(dir) == -1)
		return -1;
	audit_init(base);
	(void)sqlite3_commit_hook(store_db(), count_commit, NULL);
	commits = 0;
	return 0;
}

static int
teardown(void **state)
{
	const char *const files[] = { "mcpbroker.db", "mcpbroker.db-wal",
	    "mcpbroker.db-shm", "mcpbroker.db.bak-v1" };
	char	path[128];
	size_t	i;

	(void)state;
	/* Nothing may be left waiting from one test for the next. */
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE |
	    EVLOOP_NONBLOCK), 1);
	(void)audit_set_signing_key(NULL);
	store_close();
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		(void)unlink(path);
	}
	stub_forget_reply();
	return rmdir(dir);
}

static void
sql(const char *q)
{
	char *err = NULL;

	if (sqlite3_exec(store_db(), q, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("%s: %s", q, err);
}

/* What an attacker does first: the triggers only stop honest code. */
static void
tamper(const char *q)
{
	sql("DROP TRIGGER IF EXISTS audit_no_update;"
	    "DROP TRIGGER IF EXISTS audit_no_delete;");
	sql(q);
}

/* Rows with every shape of field: NULLs, "", tenants, nested detail. */
static void
append_rows(int n)
{
	struct json_object	*d;
	char			 user[16];
	int			 i;

	for (i = 1; i <= n; i++) {
		d = json_object_new_object();
		json_object_object_add(d, "n", json_object_new_int(i));
		json_object_object_add(d, "tool",
		    json_object_new_string("files.read_file"));
		snprintf(user, sizeof(user), "user%d", i % 3);
		assert_int_equal(audit_append(i % 2 ? "tool_call" : "auth",
		    i % 5 == 0 ? NULL : user, i % 4 == 0 ? "" : "acme", d), i);
		json_object_put(d);
	}
}

static const char *
verify_problem(void)
{
	static char	why[256];
	unsigned char	head[AUDIT_HASH_LEN];
	uint64_t	rows;

	if (audit_verify(why, sizeof(why), &rows, head) == 0)
		return NULL;
	return why;
}

static void
assert_problem(const char *want)
{
	const char *why = verify_problem();

	if (why == NULL)
		fail_msg("verify passed; wanted \"%s\"", want);
	if (strncmp(why, want, strlen(want)) != 0)
		fail_msg("verify said \"%s\"; wanted \"%s\"", why, want);
}

static void
test_empty_and_intact(void **state)
{
	unsigned char	head[AUDIT_HASH_LEN], zero[AUDIT_HASH_LEN] = { 0 };
	char		why[256];
	uint64_t	rows;
	sqlite3_stmt	*st;

	(void)state;
	assert_int_equal(audit_verify(why, sizeof(why), &rows, head), 0);
	assert_int_equal(rows, 0);
	assert_memory_equal(head, zero, sizeof(zero));
	append_rows(30);
	assert_int_equal(audit_verify(why, sizeof(why), &rows, head), 0);
	assert_int_equal(rows, 30);
	/* The head is the last row's hash, and the checkpoint's. */
	assert_int_equal(sqlite3_prepare_v2(store_db(), "SELECT a.hash, "
	    "c.last_id, c.last_hash FROM audit a, audit_checkpoint c WHERE "
	    "a.id = 30", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_memory_equal(sqlite3_column_blob(st, 0), head, AUDIT_HASH_LEN);
	assert_int_equal(sqlite3_column_int64(st, 1), 30);
	assert_memory_equal(sqlite3_column_blob(st, 2), head, AUDIT_HASH_LEN);
	sqlite3_finalize(st);
}

static void
test_append_only_triggers(void **state)
{
	(void)state;
	append_rows(3);
	assert_int_not_equal(sqlite3_exec(store_db(), "UPDATE audit SET "
	    "kind = 'x' WHERE id = 2", NULL, NULL, NULL), SQLITE_OK);
	assert_int_not_equal(sqlite3_exec(store_db(), "DELETE FROM audit "
	    "WHERE id = 3", NULL, NULL, NULL), SQLITE_OK);
	assert_null(verify_problem());
}

static void
test_edited_row(void **state)
{
	(void)state;
	append_rows(20);
	tamper("UPDATE audit SET detail = '{\"n\":170}' WHERE id = 17");
	assert_problem("row 17: contents changed");
}

/* Every column counts, and NULL is not "". */
static void
test_edited_fields(void **state)
{
	const char *const edits[] = {
		"UPDATE audit SET ts = ts + 1 WHERE id = 7",
		"UPDATE audit SET kind = 'auth' WHERE id = 7",
		"UPDATE audit SET user = NULL WHERE id = 7",
		"UPDATE audit SET user = '' WHERE id = 5",
		"UPDATE audit SET tenant = NULL WHERE id = 8",
		"UPDATE audit SET hash = zeroblob(32) WHERE id = 7",
		"UPDATE audit SET hash = x'00' WHERE id = 7",
	};
	const char *const wants[] = { "row 7: contents changed",
	    "row 7: contents changed", "row 7: contents changed",
	    "row 5: contents changed", "row 8: contents changed",
	    "row 7: contents changed", "row 7: contents changed" };
	size_t i;

	(void)state;
	append_rows(10);
	sql("DROP TRIGGER audit_no_update; DROP TRIGGER audit_no_delete;");
	for (i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
		sql("SAVEPOINT edit;");
		sql(edits[i]);
		sql("RELEASE edit;");
		assert_problem(wants[i]);
		/* Undo by rebuilding: simplest is a fresh trail per edit. */
		sql("DELETE FROM audit; UPDATE audit_checkpoint SET "
		    "last_id = 0, last_hash = zeroblob(32);");
		append_rows(10);
		assert_null(verify_problem());
	}
}

static void
test_deleted_middle_row(void **state)
{
	(void)state;
	append_rows(20);
	tamper("DELETE FROM audit WHERE id = 17");
	assert_problem("row 17: missing (ids jump from 16 to 18)");
	tamper("DELETE FROM audit WHERE id IN (15, 16)");
	assert_problem("rows 15-17: missing (ids jump from 14 to 18)");
}

static void
test_deleted_first_row(void **state)
{
	(void)state;
	append_rows(5);
	tamper("DELETE FROM audit WHERE id = 1");
	assert_problem("row 1: missing (ids jump from 0 to 2)");
}

static void
test_reordered_rows(void **state)
{
	(void)state;
	append_rows(12);
	tamper("UPDATE audit SET id = -6 WHERE id = 6;"
	    "UPDATE audit SET id = 6 WHERE id = 5;"
	    "UPDATE audit SET id = 5 WHERE id = -6;");
	assert_problem("row 5: out of order (row 6 is the one that follows "
	    "row 4)");
}

/* A row renumbered into a gap left by a deletion is not the row it was. */
static void
test_renumbered_row(void **state)
{
	(void)state;
	append_rows(12);
	tamper("DELETE FROM audit WHERE id = 9;"
	    "UPDATE audit SET id = 9 WHERE id = 10;");
	assert_problem("row 9: contents changed");
}

/* A row rewritten with a correct hash of its own breaks the next link. */
static void
test_rehashed_row(void **state)
{
	unsigned char		 h[AUDIT_HASH_LEN], prev[AUDIT_HASH_LEN];
	struct audit_row	 r;
	sqlite3_stmt		*st;
	const char		*detail = "{\"n\":999}";

	(void)state;
	append_rows(8);
	assert_int_equal(sqlite3_prepare_v2(store_db(), "SELECT ts, "
	    "prev_hash FROM audit WHERE id = 4", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	memset(&r, 0, sizeof(r));
	r.ar_id = 4;
	r.ar_ts = sqlite3_column_int64(st, 0);
	memcpy(prev, sqlite3_column_blob(st, 1), sizeof(prev));
	sqlite3_finalize(st);
	r.ar_kind.p = "auth";
	r.ar_kind.len = 4;
	r.ar_detail.p = detail;
	r.ar_detail.len = strlen(detail);
	r.ar_prev_hash = prev;
	audit_hash(&r, h);
	tamper("DROP TRIGGER IF EXISTS audit_no_update;");
	assert_int_equal(sqlite3_prepare_v2(store_db(), "UPDATE audit SET "
	    "kind = 'auth', user = NULL, tenant = NULL, detail = ?, hash = ? "
	    "WHERE id = 4", -1, &st, NULL), SQLITE_OK);
	sqlite3_bind_text(st, 1, detail, -1, SQLITE_STATIC);
	sqlite3_bind_blob(st, 2, h, sizeof(h), SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_DONE);
	sqlite3_finalize(st);
	assert_problem("row 5: chain broken");
}

static void
test_deleted_tail(void **state)
{
	(void)state;
	append_rows(45);
	tamper("DELETE FROM audit WHERE id > 41");
	assert_problem("rows after 41 missing (checkpoint says 45)");
	/* New rows go on from the checkpoint: the gap stays visible. */
	assert_int_equal(audit_append("auth", "x", NULL, NULL), 46);
	assert_problem("rows 42-45: missing (ids jump from 41 to 46)");
	tamper("DELETE FROM audit");
	assert_problem("all rows missing (checkpoint says 46)");
}

static void
test_checkpoint_tampered(void **state)
{
	(void)state;
	append_rows(5);
	tamper("UPDATE audit_checkpoint SET last_hash = zeroblob(32)");
	assert_problem("row 5: differs from the checkpoint");
	tamper("UPDATE audit_checkpoint SET last_id = 3");
	assert_problem("rows after 3 are not in the checkpoint");
	tamper("DELETE FROM audit_checkpoint");
	assert_problem("the checkpoint is missing");
	/* No head, no append: a caller must not go ahead unrecorded. */
	assert_int_equal(audit_append("auth", "x", NULL, NULL), -1);
}

/* The encoding, written again from its description, into one buffer. */
struct enc {
	unsigned char	buf[4096];
	size_t		len;
};

static void
enc_bytes(struct enc *e, const void *p, size_t len)
{
	assert_true(e->len + len <= sizeof(e->buf));
	memcpy(e->buf + e->len, p, len);
	e->len += len;
}

static void
enc_u64(struct enc *e, uint64_t v)
{
	unsigned char	b[8];
	int		i;

	for (i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (56 - 8 * i));
	enc_bytes(e, b, 8);
}

static void
enc_col(struct enc *e, sqlite3_stmt *st, int i)
{
	unsigned char	present = sqlite3_column_type(st, i) != SQLITE_NULL;
	const void	*p = sqlite3_column_text(st, i);
	int		len = sqlite3_column_bytes(st, i);

	enc_bytes(e, &present, 1);
	enc_u64(e, present ? (uint64_t)len : 0);
	if (present)
		enc_bytes(e, p, (size_t)len);
}

static void
test_hash_chain_stable(void **state)
{
	unsigned char	 h[SHA256_DIGEST_LENGTH], prev[SHA256_DIGEST_LENGTH];
	struct enc	 e;
	sqlite3_stmt	*st;
	int		 i, n = 0;

	(void)state;
	append_rows(25);
	memset(prev, 0, sizeof(prev));
	assert_int_equal(sqlite3_prepare_v2(store_db(), "SELECT id, ts, kind, "
	    "user, tenant, detail, prev_hash, hash FROM audit ORDER BY id",
	    -1, &st, NULL), SQLITE_OK);
	while (sqlite3_step(st) == SQLITE_ROW) {
		e.len = 0;
		enc_bytes(&e, "mcpbroker-audit-v1", 18);
		enc_u64(&e, (uint64_t)sqlite3_column_int64(st, 0));
		enc_u64(&e, (uint64_t)sqlite3_column_int64(st, 1));
		for (i = 2; i <= 5; i++)
			enc_col(&e, st, i);
		assert_memory_equal(sqlite3_column_blob(st, 6), prev, 32);
		enc_bytes(&e, prev, sizeof(prev));
		SHA256(e.buf, e.len, h);
		assert_memory_equal(sqlite3_column_blob(st, 7), h, 32);
		memcpy(prev, h, sizeof(prev));
		n++;
	}
	sqlite3_finalize(st);
	assert_int_equal(n, 25);
}

/* A known answer: this must never change, or old trails stop verifying. */
static void
test_hash_known_answer(void **state)
{
	static const unsigned char zero[AUDIT_HASH_LEN];
	unsigned char		h[AUDIT_HASH_LEN];
	char			hexs[2 * AUDIT_HASH_LEN + 1];
	struct audit_row	r;
	int			i;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.ar_id = 1;
	r.ar_ts = 1700000000000LL;
	r.ar_kind.p = "admin";
	r.ar_kind.len = 5;
	r.ar_tenant.p = "";
	r.ar_detail.p = "{\"op\":\"user_add\",\"name\":\"alice\"}";
	r.ar_detail.len = strlen(r.ar_detail.p);
	r.ar_prev_hash = zero;
	audit_hash(&r, h);
	for (i = 0; i < AUDIT_HASH_LEN; i++)
		snprintf(hexs + 2 * i, 3, "%02x", h[i]);
	assert_string_equal(hexs, AUDIT_KAT);
}

static void
test_nested_transaction(void **state)
{
	(void)state;
	append_rows(2);
	assert_int_equal(audit_begin(), 0);
	assert_int_equal(audit_append("admin", NULL, NULL, NULL), 3);
	assert_int_equal(audit_end(0), 0);
	assert_null(verify_problem());
	assert_int_equal(audit_begin(), 0);
	assert_int_equal(audit_append("admin", NULL, NULL, NULL), 3);
	assert_int_equal(audit_end(1), 0);
	assert_null(verify_problem());
	assert_int_equal(audit_append("admin", NULL, NULL, NULL), 4);
}

/*
 * An append that fails inside a caller's transaction takes the change
 * down with it: nothing unrecorded is left behind.
 */
static void
test_nested_failure(void **state)
{
	sqlite3_stmt *st;

	(void)state;
	append_rows(2);
	tamper("DELETE FROM audit_checkpoint");
	assert_int_equal(audit_begin(), 0);
	sql("INSERT INTO users (name, tenant, roles, created) VALUES "
	    "('eve', 'acme', '', 0)");
	assert_int_equal(audit_append("admin", NULL, NULL, NULL), -1);
	assert_int_equal(audit_end(0), 0);
	assert_int_equal(sqlite3_get_autocommit(store_db()), 1);
	assert_int_equal(sqlite3_prepare_v2(store_db(), "SELECT count(*) "
	    "FROM users", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), 0);
	sqlite3_finalize(st);
}

static void
test_bad_append(void **state)
{
	struct json_object *a = json_object_new_array();

	(void)state;
	assert_int_equal(audit_append("x", NULL, NULL, a), -1);
	assert_int_equal(audit_append(NULL, NULL, NULL, NULL), -1);
	json_object_put(a);
	assert_int_equal(audit_append("x", NULL, NULL, NULL), 1);
}

static void
test_list_filters(void **state)
{
	struct audit_filter	 f;
	struct json_object	*rows, *row;
	int			 truncated;

	(void)state;
	append_rows(30);
	memset(&f, 0, sizeof(f));
	f.af_limit = 5;
	rows = audit_list(&f, &truncated);
	assert_int_equal(json_object_array_length(rows), 5);
	/* The newest five, oldest first. */
	row = json_object_array_get_idx(rows, 0);
	assert_int_equal(json_object_get_int(json_object_object_get(row,
	    "id")), 26);
	row = json_object_array_get_idx(rows, 4);
	assert_int_equal(json_object_get_int(json_object_object_get(row,
	    "id")), 30);
	assert_int_equal(json_object_get_int(json_object_object_get(
	    json_object_object_get(row, "detail"), "n")), 30);
	assert_null(json_object_object_get(row, "user"));	/* 30 % 5 */
	json_object_put(rows);
	f.af_limit = 100;
	f.af_user = "user1";
	f.af_kind = "auth";
	rows = audit_list(&f, &truncated);
	/* even i, i % 3 == 1, i % 5 != 0: 4, 16, 22, 28 */
	assert_int_equal(json_object_array_length(rows), 4);
	json_object_put(rows);
	f.af_user = NULL;
	f.af_kind = NULL;
	f.af_since_ms = INT64_MAX - 1;
	rows = audit_list(&f, &truncated);
	assert_int_equal(json_object_array_length(rows), 0);
	assert_int_equal(truncated, 0);
	json_object_put(rows);
}

static int
count_line(int64_t id, const char *line, void *arg)
{
	struct json_object	*o = json_tokener_parse(line);
	int64_t			*last = arg;

	assert_non_null(o);
	assert_int_equal(json_object_get_int64(json_object_object_get(o,
	    "id")), id);
	assert_int_equal(id, *last + 1);
	assert_int_equal(strlen(json_object_get_string(
	    json_object_object_get(o, "hash"))), 64);
	assert_true(json_object_is_type(json_object_object_get(o, "detail"),
	    json_type_object));
	assert_null(strchr(line, '\n'));
	*last = id;
	json_object_put(o);
	return 0;
}

static void
test_export_pages(void **state)
{
	int64_t last = 0;

	(void)state;
	append_rows(12);
	assert_int_equal(audit_export(0, 5, AUDIT_JSONL, NULL, count_line,
	    &last), 5);
	assert_int_equal(audit_export(5, 5, AUDIT_JSONL, NULL, count_line,
	    &last), 10);
	assert_int_equal(audit_export(10, 5, AUDIT_JSONL, NULL, count_line,
	    &last), 12);
	assert_int_equal(audit_export(12, 5, AUDIT_JSONL, NULL, count_line,
	    &last), 12);
	assert_int_equal(last, 12);
}

static struct json_object *
admin(const char *json)
{
	struct json_object	*o = json_tokener_parse(json);
	const char		*op;

	op = json_object_get_string(json_object_object_get(o, "op"));
	stub_forget_reply();
	audit_admin(1, op, o);
	json_object_put(o);
	while (last_body == NULL)	/* a walk of the trail takes passes */
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE |
		    EVLOOP_NONBLOCK), 0);
	return last_body;
}

static void
test_admin_ops(void **state)
{
	struct json_object	*r;
	const char		*lines;

	(void)state;
	append_rows(4);
	r = admin("{\"op\":\"audit_verify\"}");
	assert_true(json_object_get_boolean(json_object_object_get(r,
	    "intact")));
	assert_int_equal(json_object_get_int(json_object_object_get(r,
	    "rows")), 4);
	r = admin("{\"op\":\"audit_show\",\"limit\":2,\"kind\":\"auth\"}");
	assert_int_equal(json_object_array_length(json_object_object_get(r,
	    "rows")), 2);
	r = admin("{\"op\":\"audit_show\",\"limit\":0}");
	assert_false(json_object_get_boolean(json_object_object_get(r,
	    "ok")));
	r = admin("{\"op\":\"audit_export\",\"after\":1}");
	lines = json_object_get_string(json_object_object_get(r, "lines"));
	assert_int_equal(json_object_get_int(json_object_object_get(r,
	    "last")), 4);
	assert_non_null(strstr(lines, "\"id\":2,"));
	assert_null(strstr(lines, "\"id\":1,"));
	r = admin("{\"op\":\"audit_nonsense\"}");
	assert_false(json_object_get_boolean(json_object_object_get(r,
	    "ok")));
	tamper("DELETE FROM audit WHERE id = 2");
	r = admin("{\"op\":\"audit_verify\"}");
	assert_false(json_object_get_boolean(json_object_object_get(r,
	    "intact")));
	assert_string_equal(json_object_get_string(json_object_object_get(r,
	    "problem")), "row 2: missing (ids jump from 1 to 3)");
}

/* A version 1 database (users only) gains the trail on open. */
static void
test_migration_from_v1(void **state)
{
	(void)state;
	store_close();
	{
		char path[128];
		sqlite3 *db;

		snprintf(path, sizeof(path), "%s/mcpbroker.db", dir);
		(void)unlink(path);
		assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
		assert_int_equal(sqlite3_exec(db, "CREATE TABLE users (id "
		    "INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, tenant "
		    "TEXT NOT NULL, roles TEXT NOT NULL, key_id TEXT UNIQUE, "
		    "key_hash BLOB, created INTEGER NOT NULL, key_created "
		    "INTEGER); PRAGMA user_version = 1;", NULL, NULL, NULL),
		    SQLITE_OK);
		sqlite3_close(db);
	}
	assert_int_equal(store_open(dir), 0);
	assert_int_equal(audit_append("admin", NULL, NULL, NULL), 1);
	assert_null(verify_problem());
}

/* ---- masking, globs, times ---- */

static void
test_glob(void **state)
{
	(void)state;
	assert_true(audit_glob("*token", "access_token", 0));
	assert_true(audit_glob("*token", "Refresh_TOKEN", 1));
	assert_false(audit_glob("*token", "Refresh_TOKEN", 0));
	assert_false(audit_glob("*token", "max_tokens", 1));
	assert_true(audit_glob("api?key", "API-Key", 1));
	assert_true(audit_glob("files.*", "files.read_file", 0));
	assert_false(audit_glob("files.*", "filesystem.x", 0));
	assert_true(audit_glob("*", "", 0));
	assert_false(audit_glob("?", "", 0));
	assert_true(audit_glob("a*b*c", "a-b-b-c", 0));
	/* no exponential backtracking on a hostile name */
	assert_false(audit_glob("*a*a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0));
}

static void
test_mask(void **state)
{
	char *const		 globs[] = { "*password*", "*token",
				    "api?key" };
	struct json_object	*args, *m;
	const char		*in;
	unsigned int		 count;

	(void)state;
	in = "{\"user\":\"bob\",\"Password\":\"hunter2\",\"auth\":{"
	    "\"access_token\":{\"v\":1},\"max_tokens\":5,\"list\":[{"
	    "\"API_KEY\":\"k\"},\"api_key\",{\"db_password_2\":null}]},"
	    "\"n\":1.50}";
	args = json_tokener_parse(in);
	m = audit_mask(args, globs, 3, &count);
	assert_int_equal(count, 4);
	assert_string_equal(json_object_to_json_string_ext(m,
	    JSON_C_TO_STRING_PLAIN), "{\"user\":\"bob\",\"Password\":\"***\","
	    "\"auth\":{\"access_token\":\"***\",\"max_tokens\":5,\"list\":[{"
	    "\"API_KEY\":\"***\"},\"api_key\",{\"db_password_2\":\"***\"}]},"
	    "\"n\":1.50}");
	/* the original is untouched: the digest is of it */
	assert_string_equal(json_object_to_json_string_ext(args,
	    JSON_C_TO_STRING_PLAIN), in);
	json_object_put(m);
	/* no globs: an equal copy */
	m = audit_mask(args, NULL, 0, &count);
	assert_int_equal(count, 0);
	assert_string_equal(json_object_to_json_string_ext(m,
	    JSON_C_TO_STRING_PLAIN), in);
	json_object_put(m);
	json_object_put(args);
}

static void
test_time_parse(void **state)
{
	const int64_t	now = 1767225600000LL;	/* 2026-01-01T00:00:00Z */
	int64_t		ms;
	char		buf[AUDIT_TIME_LEN];

	(void)state;
	assert_int_equal(audit_time_parse("2026-01-01", now, &ms), 0);
	assert_int_equal(ms, now);
	assert_int_equal(audit_time_parse("2026-01-01T12:30Z", now, &ms), 0);
	assert_int_equal(ms, now + 45000000);
	assert_int_equal(audit_time_parse("2026-01-01T00:00:01.5Z", now,
	    &ms), 0);
	assert_int_equal(ms, now + 1500);
	assert_int_equal(audit_time_parse("2025-12-31 23:59:59", now, &ms), 0);
	assert_int_equal(ms, now - 1000);
	assert_int_equal(audit_time_parse("1h", now, &ms), 0);
	assert_int_equal(ms, now - 3600000);
	assert_int_equal(audit_time_parse("7d", now, &ms), 0);
	assert_int_equal(ms, now - 7 * 86400000LL);
	assert_int_equal(audit_time_parse("90s", now, &ms), 0);
	assert_int_equal(ms, now - 90000);
	assert_int_equal(audit_time_parse("1767225600000", now, &ms), 0);
	assert_int_equal(ms, now);
	assert_int_equal(audit_time_parse("2026-02-30", now, &ms), -1);
	assert_int_equal(audit_time_parse("2026-01-01T25:00Z", now, &ms), -1);
	assert_int_equal(audit_time_parse("2026-01-01T10:00+02:00", now, &ms),
	    -1);
	assert_int_equal(audit_time_parse("yesterday", now, &ms), -1);
	assert_int_equal(audit_time_parse("1w", now, &ms), -1);
	assert_int_equal(audit_time_parse("", now, &ms), -1);
	assert_int_equal(audit_time_parse("h", now, &ms), -1);
	audit_time_str(now + 123, buf, sizeof(buf));
	assert_string_equal(buf, "2026-01-01T00:00:00.123Z");
}

/* ---- export formats ---- */

/* A denied call whose arguments try every delimiter there is. */
static struct json_object *
hostile_row(void)
{
	return json_tokener_parse("{\"id\":7,\"ts\":1767225600123,\"kind\":"
	    "\"tool_call\",\"user\":\"alice\",\"tenant\":\"acme\",\"detail\":{"
	    "\"conversation\":\"c1\",\"server\":\"files\",\"tool\":"
	    "\"read_file\",\"decision\":\"deny\",\"arguments\":{\"path\":"
	    "\"a\\\"]\\\\b|c=d\\ne\"}},\"prev_hash\":\"p0\",\"hash\":\"h1\"}");
}

static void
test_format_syslog(void **state)
{
	struct json_object	*row = hostile_row();
	char			*line;

	(void)state;
	line = audit_format_row(AUDIT_SYSLOG, row, "box1");
	/* RFC 5424: facility 13, warning (a refusal); SD values escaped */
	assert_string_equal(line, "<108>1 2026-01-01T00:00:00.123Z box1 "
	    "mcpbroker - tool_call [mcpbroker@32473 id=\"7\" user=\"alice\" "
	    "tenant=\"acme\" prev_hash=\"p0\" hash=\"h1\"][detail@32473 "
	    "conversation=\"c1\" server=\"files\" tool=\"read_file\" "
	    "decision=\"deny\"] {\"conversation\":\"c1\",\"server\":\"files\","
	    "\"tool\":\"read_file\",\"decision\":\"deny\",\"arguments\":{"
	    "\"path\":\"a\\\"]\\\\b|c=d\\ne\"}}");
	free(line);
	/* an unusable host name is the NILVALUE */
	line = audit_format_row(AUDIT_SYSLOG, row, "two words");
	assert_non_null(strstr(line, ".123Z - mcpbroker - tool_call ["));
	free(line);
	json_object_put(row);
}

static void
test_format_cef(void **state)
{
	struct json_object	*row = hostile_row();
	char			*line;

	(void)state;
	line = audit_format_row(AUDIT_CEF, row, NULL);
	/* extension values escape \ and =; the detail's \n stays two bytes */
	assert_string_equal(line, "CEF:0|mcpbroker|mcpbroker|"
	    MCPBROKER_VERSION "|tool_call|tool_call deny|7|rt=1767225600123 "
	    "externalId=7 suser=alice cs1Label=tenant cs1=acme cs2Label=tool "
	    "cs2=files.read_file act=deny cs3Label=conversation cs3=c1 "
	    "cs4Label=prev_hash cs4=p0 cs5Label=hash cs5=h1 msg={"
	    "\"conversation\":\"c1\",\"server\":\"files\",\"tool\":"
	    "\"read_file\",\"decision\":\"deny\",\"arguments\":{\"path\":"
	    "\"a\\\\\"]\\\\\\\\b|c\\=d\\\\ne\"}}");
	free(line);
	json_object_put(row);
}

static int
has_raw_break(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	for (; *p != '\0'; p++)
		if (*p < 0x20 || *p == 0x7f || (p[0] == 0xe2 && p[1] == 0x80 &&
		    (p[2] == 0xa8 || p[2] == 0xa9)) || (p[0] == 0xc2 &&
		    p[1] == 0x85))
			return 1;
	return 0;
}

/* Whatever an edited database holds, no record spans two lines. */
static void
test_format_hostile(void **state)
{
	struct json_object	*row = json_object_new_object(), *d;
	const enum audit_format	 fmts[] = { AUDIT_JSONL, AUDIT_SYSLOG,
				    AUDIT_CEF };
	char			*line;
	size_t			 i;

	(void)state;
	d = json_object_new_object();
	json_object_object_add(d, "decision", json_object_new_string(
	    "deny\r\nCEF:0|forged"));
	json_object_object_add(d, "ta\"b=", json_object_new_string("x"));
	json_object_object_add(row, "id", json_object_new_int(1));
	json_object_object_add(row, "ts", json_object_new_int(0));
	json_object_object_add(row, "kind", json_object_new_string(
	    "tool|call\n<13>1 forged"));
	json_object_object_add(row, "user", json_object_new_string(
	    "eve\u2028\xc2\x85\x7f\x01\xff]\""));
	json_object_object_add(row, "detail", d);
	for (i = 0; i < 3; i++) {
		line = audit_format_row(fmts[i], row, "h\nx");
		assert_false(has_raw_break(line));
		free(line);
	}
	line = audit_format_row(AUDIT_CEF, row, NULL);
	/*
	 * header: | escaped; CEF has no \u, so controls are a literal
	 * backslash and uXXXX; bad UTF-8 likewise as \xff
	 */
	assert_non_null(strstr(line, "|tool\\|call\\\\u000a<13>1 forged|"));
	assert_non_null(strstr(line, "suser=eve\\\\u2028\\\\u0085\\\\u007f"
	    "\\\\u0001\\\\xff]\""));
	assert_non_null(strstr(line, "forged deny\\\\u000d\\\\u000aCEF:0\\|"
	    "forged|3|"));
	/* in the JSON message, json-c's escapes, themselves escaped */
	assert_non_null(strstr(line, " msg={\"decision\":\"deny\\\\r\\\\n"
	    "CEF:0|forged\",\"ta\\\\\"b\\=\":\"x\"}"));
	free(line);
	line = audit_format_row(AUDIT_SYSLOG, row, NULL);
	assert_non_null(strstr(line, " - mcpbroker - - [mcpbroker@"));
	assert_non_null(strstr(line, "user=\"eve\\u2028\\u0085\\u007f\\u0001"
	    "\\xff\\]\\\"\""));
	/* a key that is no SD-NAME is left to the JSON message */
	assert_non_null(strstr(line, "[detail@32473 decision=\"deny\\u000d"
	    "\\u000aCEF:0|forged\"] {"));
	free(line);
	json_object_put(row);
}

/* ---- group commit ---- */

struct done_log {
	int64_t	ids[64];
	int	n;
};

static void
log_done(int64_t id, void *arg)
{
	struct done_log *l = arg;

	assert_true(l->n < 64);
	l->ids[l->n++] = id;
}

static int64_t
row_count(void)
{
	sqlite3_stmt	*st;
	int64_t		 n;

	assert_int_equal(sqlite3_prepare_v2(store_db(), "SELECT count(*) "
	    "FROM audit", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

static struct audit_async *
intent(int n, struct done_log *l)
{
	struct json_object	*d = json_object_new_object();
	struct audit_async	*a;

	json_object_object_add(d, "n", json_object_new_int(n));
	a = audit_append_async("tool_call", "alice", "acme", d, log_done, l);
	json_object_put(d);
	return a;
}

/* One pass of the loop, which must have had something to do. */
static void
run_loop(void)
{
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE |
	    EVLOOP_NONBLOCK), 0);
}

/*
 * The admin's walk of the trail takes turns with the loop: 25,000 rows
 * are three steps, one a pass, and rows asked for once it has begun are
 * written in the same passes; they come after the walk's last row, and
 * the next walk has them.
 */
static void
test_verify_takes_turns(void **state)
{
	struct json_object	*o = json_tokener_parse("{}"), *r;
	int			 i, passes;

	(void)state;
	for (i = 0; i < 25000; i++)
		(void)audit_append_async("tool_call", "alice", "acme", o,
		    NULL, NULL);
	run_loop();
	assert_int_equal(row_count(), 25000);
	stub_forget_reply();
	audit_admin(1, "audit_verify", o);
	for (passes = 0; last_body == NULL && passes < 10; passes++) {
		if (passes > 0)		/* the walk has begun */
			(void)audit_append_async("auth", "bob", "acme", o,
			    NULL, NULL);
		run_loop();
		assert_int_equal(row_count(), 25000 + passes);
	}
	assert_int_equal(passes, 3);
	assert_true(json_object_get_boolean(json_object_object_get(last_body,
	    "intact")));
	assert_int_equal(json_object_get_int(json_object_object_get(
	    last_body, "rows")), 25000);
	json_object_put(o);
	r = admin("{\"op\":\"audit_verify\"}");
	assert_true(json_object_get_boolean(json_object_object_get(r,
	    "intact")));
	assert_int_equal(json_object_get_int(json_object_object_get(r,
	    "rows")), 25002);
}

/* Four walks wait their turn and are answered in order; a fifth is not. */
static void
test_walks_wait_their_turn(void **state)
{
	struct json_object	*o = json_tokener_parse("{}");
	const char		*error;
	uint64_t		 id;

	(void)state;
	append_rows(4);
	replies = 0;
	for (id = 1; id <= 5; id++)
		audit_admin(id, "audit_verify", o);
	json_object_put(o);
	assert_int_equal(replies, 1);
	assert_int_equal(last_id, 5);
	error = json_object_get_string(json_object_object_get(last_body,
	    "error"));
	assert_non_null(error);
	assert_non_null(strstr(error, "try again when one ends"));
	for (id = 1; id <= 4; id++) {
		run_loop();
		assert_int_equal(replies, (int)id + 1);
		assert_int_equal(last_id, id);
		assert_true(json_object_get_boolean(json_object_object_get(
		    last_body, "intact")));
	}
}

/* Rows asked for in one pass: one commit, callbacks in order, after. */
static void
test_group_commit_one_transaction(void **state)
{
	struct done_log	l = { .n = 0 };
	int		i;

	(void)state;
	for (i = 0; i < 32; i++)
		(void)intent(i, &l);
	/* nothing is written, and nobody goes on, before the commit */
	assert_int_equal(row_count(), 0);
	assert_int_equal(l.n, 0);
	run_loop();
	assert_int_equal(commits, 1);
	assert_int_equal(l.n, 32);
	for (i = 0; i < 32; i++)
		assert_int_equal(l.ids[i], i + 1);
	assert_int_equal(row_count(), 32);
	assert_null(verify_problem());
	/* the next pass is a batch of its own */
	(void)intent(32, &l);
	run_loop();
	assert_int_equal(commits, 2);
	assert_int_equal(l.ids[32], 33);
}

/* A synchronous row joins the batch, after what was asked before it. */
static void
test_group_commit_order(void **state)
{
	struct done_log	l = { .n = 0 };

	(void)state;
	(void)intent(1, &l);
	(void)intent(2, &l);
	assert_int_equal(audit_append("admin", NULL, NULL, NULL), 3);
	assert_int_equal(commits, 1);
	assert_int_equal(row_count(), 3);
	/* written, but the callers hear of it from the loop, not from here */
	assert_int_equal(l.n, 0);
	run_loop();
	assert_int_equal(l.n, 2);
	assert_int_equal(l.ids[0], 1);
	assert_int_equal(l.ids[1], 2);
	assert_int_equal(commits, 1);
	assert_null(verify_problem());
}

/*
 * A caller that goes away (a turn freed, a session closed) settles its
 * row: written now, never called back, so its memory can go.
 */
static void
test_group_commit_settle(void **state)
{
	struct done_log		 l = { .n = 0 }, gone = { .n = 0 };
	struct audit_async	*b, *d;

	(void)state;
	(void)intent(1, &l);
	b = intent(2, &gone);
	(void)intent(3, &l);
	assert_int_equal(audit_settle(b), 2);
	assert_int_equal(commits, 1);
	assert_int_equal(row_count(), 3);
	/* settled after its commit, before its callback */
	d = intent(4, &gone);
	(void)intent(5, &l);
	assert_int_equal(audit_append("admin", NULL, NULL, NULL), 6);
	assert_int_equal(audit_settle(d), 4);
	run_loop();
	assert_int_equal(gone.n, 0);
	assert_int_equal(l.n, 3);
	assert_int_equal(l.ids[0], 1);
	assert_int_equal(l.ids[1], 3);
	assert_int_equal(l.ids[2], 5);
	assert_int_equal(commits, 2);
	assert_null(verify_problem());
}

/* Callbacks that settle another caller's row or ask for new ones. */
struct reentry {
	struct audit_async	*victim;
	struct done_log		*log;
	int64_t			 first, second;
};

static void
reentry_done(int64_t id, void *arg)
{
	struct reentry *r = arg;

	r->first = id;
	/* the victim is written and queued behind us: it just goes */
	r->second = audit_settle(r->victim);
	/* a row asked for now is written in a later batch */
	(void)intent(99, r->log);
}

static void
test_group_commit_reentry(void **state)
{
	struct done_log		 l = { .n = 0 }, gone = { .n = 0 };
	struct reentry		 r;

	(void)state;
	memset(&r, 0, sizeof(r));
	r.log = &l;
	(void)audit_append_async("tool_call", NULL, NULL, NULL, reentry_done,
	    &r);
	r.victim = intent(2, &gone);
	(void)intent(3, &l);
	run_loop();
	assert_int_equal(r.first, 1);
	assert_int_equal(r.second, 2);
	assert_int_equal(gone.n, 0);
	/* row 3's callback, then the one asked for from the callback */
	assert_int_equal(l.n, 2);
	assert_int_equal(l.ids[0], 3);
	assert_int_equal(l.ids[1], 4);
	assert_int_equal(commits, 2);
	assert_null(verify_problem());
}

/* A batch that cannot be written fails as a whole: nobody goes on. */
static void
test_group_commit_failure(void **state)
{
	struct done_log		 l = { .n = 0 };
	struct json_object	*a;

	(void)state;
	tamper("DELETE FROM audit_checkpoint");
	(void)intent(1, &l);
	(void)intent(2, &l);
	run_loop();
	assert_int_equal(l.n, 2);
	assert_int_equal(l.ids[0], -1);
	assert_int_equal(l.ids[1], -1);
	assert_int_equal(row_count(), 0);
	/* a malformed request is answered in order too, with -1 */
	a = json_object_new_array();
	(void)audit_append_async("tool_call", NULL, NULL, a, log_done, &l);
	json_object_put(a);
	run_loop();
	assert_int_equal(l.n, 3);
	assert_int_equal(l.ids[2], -1);
}

/* A change and its audit row in one transaction: queued rows go first. */
static void
test_group_commit_and_transactions(void **state)
{
	struct done_log l = { .n = 0 };

	(void)state;
	(void)intent(1, &l);
	assert_int_equal(audit_begin(), 0);
	assert_int_equal(audit_append("admin", NULL, NULL, NULL), 2);
	assert_int_equal(audit_end(0), 0);	/* rolled back */
	(void)intent(3, &l);
	assert_int_equal(audit_begin(), 0);
	assert_int_equal(audit_append("admin", NULL, NULL, NULL), 3);
	assert_int_equal(audit_end(1), 0);
	run_loop();
	assert_int_equal(l.n, 2);
	assert_int_equal(l.ids[0], 1);	/* kept, though row 2 was not */
	assert_int_equal(l.ids[1], 2);
	assert_int_equal(row_count(), 3);
	assert_null(verify_problem());
}

/* ---- filters ---- */

static int64_t
call_row(const char *server, const char *tool, const char *decision)
{
	struct json_object	*d = json_object_new_object();
	int64_t			 id;

	json_object_object_add(d, "server", json_object_new_string(server));
	json_object_object_add(d, "tool", json_object_new_string(tool));
	json_object_object_add(d, "decision", json_object_new_string(
	    decision));
	id = audit_append("tool_call", "alice", "acme", d);
	json_object_put(d);
	return id;
}

static void
outcome_row(const char *kind, int64_t intent_id)
{
	struct json_object *d = json_object_new_object();

	json_object_object_add(d, "intent", json_object_new_int64(intent_id));
	assert_true(audit_append(kind, "alice", "acme", d) > 0);
	json_object_put(d);
}

static void
assert_ids(const struct audit_filter *f, const char *want)
{
	struct json_object	*rows;
	char			 got[256] = "";
	size_t			 i, len = 0;
	int			 truncated;

	rows = audit_list(f, &truncated);
	for (i = 0; i < json_object_array_length(rows); i++)
		len += (size_t)snprintf(got + len, sizeof(got) - len, "%s%d",
		    i ? " " : "", json_object_get_int(json_object_object_get(
		    json_object_array_get_idx(rows, i), "id")));
	json_object_put(rows);
	assert_string_equal(got, want);
}

static void
test_list_tool_and_decision(void **state)
{
	struct audit_filter	f;
	struct json_object	*forged;

	(void)state;
	call_row("files", "read_file", "allow");		/* 1 */
	outcome_row("tool_result", 1);				/* 2 */
	call_row("files", "write_file", "deny");		/* 3 */
	call_row("filesystem", "read_file", "confirm");		/* 4 */
	outcome_row("approval", 4);				/* 5 */
	outcome_row("tool_result", 4);				/* 6 */
	forged = json_tokener_parse("{\"name\":\"files__secret\","
	    "\"decision\":\"deny\"}");
	assert_int_equal(audit_append("tool_call", "alice", "acme", forged),
	    7);
	json_object_put(forged);
	tamper("INSERT INTO audit VALUES (8, 1, 'tool_call', NULL, NULL, "
	    "'not json', zeroblob(32), zeroblob(32))");
	memset(&f, 0, sizeof(f));
	f.af_limit = 100;
	f.af_tool = "files.*";
	assert_ids(&f, "1 2 3");
	f.af_tool = "*read_file";
	assert_ids(&f, "1 2 4 5 6");
	f.af_tool = "files.read_file";
	assert_ids(&f, "1 2");
	f.af_tool = "files__*";
	assert_ids(&f, "7");
	f.af_tool = NULL;
	f.af_decision = "deny";
	assert_ids(&f, "3 7");
	f.af_tool = "files.*";
	assert_ids(&f, "3");
	f.af_tool = NULL;
	f.af_decision = "confirm";
	f.af_limit = 1;
	assert_ids(&f, "4");
}

static int
collect_line(int64_t id, const char *line, void *arg)
{
	struct json_object *lines = arg;

	(void)id;
	json_object_array_add(lines, json_object_new_string(line));
	return 0;
}

static void
test_export_formats(void **state)
{
	struct json_object	*lines = json_object_new_array(), *d;
	const char		*l;

	(void)state;
	d = json_tokener_parse("{\"decision\":\"allow\",\"arguments\":{"
	    "\"q\":\"x\\ny|z=]\"}}");
	assert_int_equal(audit_append("tool_call", "bob", NULL, d), 1);
	json_object_put(d);
	assert_int_equal(audit_export(0, 10, AUDIT_SYSLOG, "box1",
	    collect_line, lines), 1);
	assert_int_equal(audit_export(0, 10, AUDIT_CEF, NULL, collect_line,
	    lines), 1);
	l = json_object_get_string(json_object_array_get_idx(lines, 0));
	assert_non_null(strstr(l, "<109>1 "));
	assert_non_null(strstr(l, " box1 mcpbroker - tool_call "
	    "[mcpbroker@32473 id=\"1\" user=\"bob\" prev_hash=\"0000"));
	assert_null(strchr(l, '\n'));
	l = json_object_get_string(json_object_array_get_idx(lines, 1));
	assert_non_null(strstr(l, "|tool_call|tool_call allow|3|rt="));
	assert_non_null(strstr(l, " externalId=1 suser=bob act=allow "
	    "cs4Label=prev_hash cs4=0000"));
	assert_non_null(strstr(l, "\\\\ny|z\\=]"));
	json_object_put(lines);
}

/* ---- signed checkpoints ---- */

/* Rows after whatever is there already. */
static void
more_rows(int n)
{
	while (n-- > 0)
		assert_true(audit_append("auth", "mallory", NULL, NULL) > 0);
}

static char *
key_pem(const char *type)
{
	EVP_PKEY	*k;
	BIO		*bio;
	char		*p, *pem;
	long		 len;

	if (strcmp(type, "ED25519") == 0)
		k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	else
		k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	assert_non_null(k);
	assert_non_null(bio = BIO_new(BIO_s_mem()));
	assert_int_equal(PEM_write_bio_PrivateKey(bio, k, NULL, NULL, 0, NULL,
	    NULL), 1);
	len = BIO_get_mem_data(bio, &p);
	assert_non_null(pem = strndup(p, (size_t)len));
	BIO_free(bio);
	EVP_PKEY_free(k);
	return pem;
}

static const char *
cp_str(struct json_object *cp, const char *key)
{
	return json_object_get_string(json_object_object_get(cp, key));
}

/* The signature checked here as the documentation says, not as the C. */
static void
check_signature_by_hand(struct json_object *cp)
{
	unsigned char		 der[128], sig[128];
	const unsigned char	*p = der;
	char			 text[512];
	EVP_PKEY		*pub;
	EVP_MD_CTX		*md;
	int			 derlen, siglen;

	derlen = EVP_DecodeBlock(der, (const unsigned char *)cp_str(cp,
	    "public_key"), (int)strlen(cp_str(cp, "public_key")));
	assert_true(derlen >= 44);
	assert_non_null(pub = d2i_PUBKEY(NULL, &p, 44));
	siglen = EVP_DecodeBlock(sig, (const unsigned char *)cp_str(cp,
	    "signature"), (int)strlen(cp_str(cp, "signature")));
	assert_int_equal(siglen, 66);	/* 64 and the padding's two */
	snprintf(text, sizeof(text), "mcpbroker-audit-checkpoint-v1\n"
	    "last_id=%s\nhead=%s\nrows=%s\ntime=%s\n", cp_str(cp, "last_id"),
	    cp_str(cp, "head"), cp_str(cp, "rows"), cp_str(cp, "time"));
	assert_non_null(md = EVP_MD_CTX_new());
	assert_int_equal(EVP_DigestVerifyInit(md, NULL, NULL, NULL, pub), 1);
	assert_int_equal(EVP_DigestVerify(md, sig, 64,
	    (const unsigned char *)text, strlen(text)), 1);
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(pub);
}

/* mcpbrokerctl audit checkpoint: the signed checkpoint, or NULL and why. */
static struct json_object *
checkpoint(char *why, size_t whylen)
{
	struct json_object *r = admin("{\"op\":\"audit_checkpoint\"}"), *cp;

	if (json_object_object_get_ex(r, "checkpoint", &cp))
		return json_object_get(cp);
	snprintf(why, whylen, "%s", json_object_get_string(
	    json_object_object_get(r, "error")));
	return NULL;
}

static void
test_checkpoint_sign_and_check(void **state)
{
	struct json_object	*cp;
	unsigned char		 head[AUDIT_HASH_LEN];
	char			 why[300], hhex[65], *pem;
	uint64_t		 rows;
	int			 i;

	(void)state;
	append_rows(5);
	assert_null(checkpoint(why, sizeof(why)));
	assert_non_null(strstr(why, "no signing key is configured"));
	pem = key_pem("ED25519");
	assert_int_equal(audit_set_signing_key(pem), 0);
	assert_non_null(cp = checkpoint(why, sizeof(why)));
	assert_int_equal(json_object_get_int(json_object_object_get(cp,
	    "version")), 1);
	assert_int_equal(json_object_get_int(json_object_object_get(cp,
	    "last_id")), 5);
	assert_int_equal(json_object_get_int(json_object_object_get(cp,
	    "rows")), 5);
	assert_int_equal(audit_verify(why, sizeof(why), &rows, head), 0);
	for (i = 0; i < AUDIT_HASH_LEN; i++)
		snprintf(hhex + 2 * i, 3, "%02x", head[i]);
	assert_string_equal(cp_str(cp, "head"), hhex);
	assert_int_equal(strlen(cp_str(cp, "time")), 24);
	check_signature_by_hand(cp);
	assert_int_equal(audit_checkpoint_check(cp, why, sizeof(why)), 0);
	/* rows added since: the checkpoint still holds */
	more_rows(1);
	assert_int_equal(audit_checkpoint_check(cp, why, sizeof(why)), 0);
	/* any field changed: the signature no longer covers it */
	json_object_object_add(cp, "time", json_object_new_string(
	    "2020-01-01T00:00:00.000Z"));
	assert_int_equal(audit_checkpoint_check(cp, why, sizeof(why)), -1);
	assert_string_equal(why, "the signature does not verify: the "
	    "checkpoint was altered");
	json_object_put(cp);
	/* the key is replaced (a reload): its checkpoints are not ours */
	assert_non_null(cp = checkpoint(why, sizeof(why)));
	free(pem);
	pem = key_pem("ED25519");
	assert_int_equal(audit_set_signing_key(pem), 0);
	assert_int_equal(audit_checkpoint_check(cp, why, sizeof(why)), -1);
	assert_string_equal(why, "signed by another key than the configured "
	    "signing-key-file");
	assert_int_equal(audit_set_signing_key(NULL), 0);
	assert_int_equal(audit_checkpoint_check(cp, why, sizeof(why)), -1);
	assert_string_equal(why, "no signing key is configured, so the "
	    "checkpoint's signature cannot be checked");
	json_object_put(cp);
	cp = json_tokener_parse("{\"version\":2}");
	assert_int_equal(audit_checkpoint_check(cp, why, sizeof(why)), -1);
	assert_string_equal(why, "not a checkpoint of version 1");
	json_object_put(cp);
	free(pem);
}

/* What an attacker with the database, but not the key, cannot hide. */
static void
test_checkpoint_detects(void **state)
{
	struct json_object	*cp;
	char			 why[300], *pem;

	(void)state;
	pem = key_pem("ED25519");
	assert_int_equal(audit_set_signing_key(pem), 0);
	free(pem);
	append_rows(8);
	assert_non_null(cp = checkpoint(why, sizeof(why)));
	/* the tail cut and the internal checkpoint moved back with it */
	tamper("DELETE FROM audit WHERE id > 5;"
	    "UPDATE audit_checkpoint SET last_id = 5, last_hash = (SELECT "
	    "hash FROM audit WHERE id = 5)");
	assert_null(verify_problem());		/* the chain alone: fine */
	assert_int_equal(audit_checkpoint_check(cp, why, sizeof(why)), -1);
	assert_string_equal(why, "the trail was truncated: the checkpoint "
	    "vouches for row 8, the trail ends at row 5");
	/* rows made up to refill the gap are not the rows signed */
	more_rows(3);
	assert_null(verify_problem());
	assert_int_equal(audit_checkpoint_check(cp, why, sizeof(why)), -1);
	assert_string_equal(why, "row 8 is not the row the checkpoint vouches "
	    "for: the trail was rewritten");
	more_rows(1);
	tamper("DELETE FROM audit WHERE id = 8");
	assert_int_equal(audit_checkpoint_check(cp, why, sizeof(why)), -1);
	assert_string_equal(why, "row 8, which the checkpoint vouches for, "
	    "is missing");
	/* and a broken chain is never signed */
	assert_null(checkpoint(why, sizeof(why)));
	assert_string_equal(why, "the trail is broken (row 8: missing (ids "
	    "jump from 7 to 9)): not signing it");
	json_object_put(cp);
}

static void
test_signing_key_refused(void **state)
{
	char *pem;

	(void)state;
	pem = key_pem("EC");
	assert_int_equal(audit_set_signing_key(pem), -1);
	free(pem);
	assert_int_equal(audit_set_signing_key("-----BEGIN PRIVATE KEY-----\n"
	    "AAAA\n-----END PRIVATE KEY-----\n"), -1);
	assert_int_equal(audit_set_signing_key(""), -1);
}

#define T(f)	cmocka_unit_test_setup_teardown(f, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_glob),
		cmocka_unit_test(test_mask),
		cmocka_unit_test(test_time_parse),
		cmocka_unit_test(test_format_syslog),
		cmocka_unit_test(test_format_cef),
		cmocka_unit_test(test_format_hostile),
		T(test_empty_and_intact),
		T(test_append_only_triggers),
		T(test_edited_row),
		T(test_edited_fields),
		T(test_deleted_middle_row),
		T(test_deleted_first_row),
		T(test_reordered_rows),
		T(test_renumbered_row),
		T(test_rehashed_row),
		T(test_deleted_tail),
		T(test_checkpoint_tampered),
		T(test_hash_chain_stable),
		T(test_hash_known_answer),
		T(test_nested_transaction),
		T(test_nested_failure),
		T(test_bad_append),
		T(test_list_filters),
		T(test_export_pages),
		T(test_admin_ops),
		T(test_migration_from_v1),
		T(test_group_commit_one_transaction),
		T(test_verify_takes_turns),
		T(test_walks_wait_their_turn),
		T(test_group_commit_order),
		T(test_group_commit_settle),
		T(test_group_commit_reentry),
		T(test_group_commit_failure),
		T(test_group_commit_and_transactions),
		T(test_list_tool_and_decision),
		T(test_export_formats),
		T(test_checkpoint_sign_and_check),
		T(test_checkpoint_detects),
		T(test_signing_key_refused),
	};
	int rc;

	if ((base = event_base_new()) == NULL)
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	event_base_free(base);
	return rc;
}
