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
#include <json-c/json.h>
#include <openssl/sha.h>
#include <sqlite3.h>

#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_store.h"

/* controller.c's answers to mcpbrokerctl, kept for the test to read. */
static struct json_object *last_reply;

void
admin_reply(uint64_t id, struct json_object *reply)
{
	(void)id;
	json_object_put(last_reply);
	last_reply = reply;
}

void
admin_error(uint64_t id, const char *message)
{
	struct json_object *r = json_object_new_object();

	json_object_object_add(r, "ok", json_object_new_boolean(0));
	json_object_object_add(r, "error", json_object_new_string(message));
	admin_reply(id, r);
}

/* SHA-256 of the encoding of test_hash_known_answer's row, in Python. */
#define AUDIT_KAT \
	"952501ff12214d5817d50e893d4e2d0ca6306ba57ed315307bb8d2917864de8a"

static char dir[64];

static int
setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_audit.XXXXXX");
	if (mkdtemp(dir) == NULL || store_open(dir) == -1)
		return -1;
	return 0;
}

static int
teardown(void **state)
{
	const char *const files[] = { "mcpbroker.db", "mcpbroker.db-wal",
	    "mcpbroker.db-shm" };
	char	path[128];
	size_t	i;

	(void)state;
	store_close();
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		(void)unlink(path);
	}
	json_object_put(last_reply);
	last_reply = NULL;
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
	assert_int_equal(audit_export(0, 5, count_line, &last), 5);
	assert_int_equal(audit_export(5, 5, count_line, &last), 10);
	assert_int_equal(audit_export(10, 5, count_line, &last), 12);
	assert_int_equal(audit_export(12, 5, count_line, &last), 12);
	assert_int_equal(last, 12);
}

static struct json_object *
admin(const char *json)
{
	struct json_object	*o = json_tokener_parse(json);
	const char		*op;

	op = json_object_get_string(json_object_object_get(o, "op"));
	audit_admin(1, op, o);
	json_object_put(o);
	assert_non_null(last_reply);
	return last_reply;
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

#define T(f)	cmocka_unit_test_setup_teardown(f, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
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
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
