/*
 * Stored conversations on a real database: titles, LIKE patterns that
 * find exactly what was typed, Markdown that cannot be steered by what a
 * message says, histories loaded back in a shape providers accept,
 * erasure, retention with a clock the test sets, who may see what, the
 * list's cursor, and a database of schema version 3 upgraded in place.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <json-c/json.h>
#include <sqlite3.h>

#include "broker/chat.h"
#include "broker/config.h"
#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_conv.h"
#include "broker/controller_store.h"
#include "broker/controller_usage.h"
#include "broker/providers/provider.h"
#include "tests/unit/controller_stub.h"

/* ---- what chat.c provides ---- */

static int			 forgotten;

void
chat_forget_conversation(const char *conversation)
{
	(void)conversation;
	forgotten++;
}

void
chat_forget_user(const char *user, const char *tenant)
{
	(void)user;
	(void)tenant;
}

void
chat_forget_tenant(const char *tenant)
{
	(void)tenant;
	forgotten++;
}

/* ---- fixtures ---- */

static char dir[64];

#define CONF_TEXT \
	"retention 30d\n" \
	"retention tenant \"keep\" forever\n" \
	"retention tenant \"short\" 1d\n"

static void
remove_db(void)
{
	const char *const files[] = { "mcpbroker.db", "mcpbroker.db-wal",
	    "mcpbroker.db-shm", "mcpbroker.db.bak-v3" };
	char	path[128];
	size_t	i;

	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		(void)unlink(path);
	}
}

static int
setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_conv.XXXXXX");
	if (mkdtemp(dir) == NULL || store_open(dir) == -1)
		return -1;
	stub_conf = config_parse_buffer("t.conf", CONF_TEXT, strlen(CONF_TEXT),
	    stderr);
	forgotten = 0;
	return stub_conf != NULL ? 0 : -1;
}

static int
teardown(void **state)
{
	(void)state;
	store_close();
	remove_db();
	config_free(stub_conf);
	stub_conf = NULL;
	stub_forget_reply();
	return rmdir(dir);
}

static int64_t
count(const char *sql)
{
	sqlite3_stmt	*st;
	int64_t		 n = -1;

	assert_int_equal(sqlite3_prepare_v2(store_db(), sql, -1, &st, NULL),
	    SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

static void
sql(const char *q)
{
	char *err = NULL;

	if (sqlite3_exec(store_db(), q, NULL, NULL, &err) != SQLITE_OK)
		fail_msg("%s: %s", q, err);
}

/* A stored conversation of user in tenant; its id in id. */
static void
make_conv(const char *user, const char *tenant, char id[CONV_ID_LEN + 1])
{
	struct conv_meta cv;

	memset(&cv, 0, sizeof(cv));
	conv_id_new(cv.cv_id);
	snprintf(cv.cv_user, sizeof(cv.cv_user), "%s", user);
	snprintf(cv.cv_tenant, sizeof(cv.cv_tenant), "%s", tenant);
	snprintf(cv.cv_provider, sizeof(cv.cv_provider), "p");
	snprintf(cv.cv_model, sizeof(cv.cv_model), "m");
	assert_int_equal(conv_create(&cv), 0);
	memcpy(id, cv.cv_id, CONV_ID_LEN + 1);
}

static void
say(const char *id, enum chat_role role, const char *text)
{
	struct chat_message m;

	memset(&m, 0, sizeof(m));
	m.cm_role = role;
	m.cm_content = (char *)text;
	assert_int_equal(conv_append(id, &m, 0), 0);
}

/* An assistant message calling tools c1..cN (named files__read_file). */
static void
call_tools(const char *id, size_t n)
{
	struct chat_tool_call	calls[4];
	struct chat_message	m;
	char			cid[4][24];
	size_t			i;

	assert_true(n <= 4);
	memset(&m, 0, sizeof(m));
	m.cm_role = ROLE_ASSISTANT;
	for (i = 0; i < n; i++) {
		snprintf(cid[i], sizeof(cid[i]), "c%zu", i + 1);
		calls[i].tc_id = cid[i];
		calls[i].tc_name = "files__read_file";
		calls[i].tc_arguments = "{\"path\":\"/srv/x\"}";
	}
	m.cm_calls = calls;
	m.cm_ncalls = n;
	assert_int_equal(conv_append(id, &m, 0), 0);
}

static void
tool_result(const char *id, const char *call, const char *text, int whole)
{
	struct chat_message m;

	memset(&m, 0, sizeof(m));
	m.cm_role = ROLE_TOOL;
	m.cm_content = (char *)text;
	m.cm_call_id = (char *)call;
	m.cm_call_name = "files__read_file";
	assert_int_equal(conv_append(id, &m, whole), 0);
}

/* ---- titles and patterns ---- */

static void
test_title(void **state)
{
	char	out[CONV_TITLE_AUTO + 4], in[300];
	size_t	i;

	(void)state;
	conv_title("  What is\tthe\n\nvault   code?  ", out, sizeof(out));
	assert_string_equal(out, "What is the vault code?");
	conv_title("", out, sizeof(out));
	assert_string_equal(out, "");
	conv_title("a\x01" "b\x7f" "c", out, sizeof(out));
	assert_string_equal(out, "a b c");
	/* Long: 80 bytes at most, then an ellipsis. */
	memset(in, 'x', 200);
	in[200] = '\0';
	conv_title(in, out, sizeof(out));
	assert_int_equal(strlen(out), 80 + 3);
	assert_string_equal(out + 80, "\xe2\x80\xa6");
	/* Cut inside a two-byte character: the whole character goes. */
	memset(in, 'x', 79);
	for (i = 79; i < 79 + 20; i += 2)
		memcpy(in + i, "\xc3\xa9", 2);		/* é */
	in[99] = '\0';
	conv_title(in, out, sizeof(out));
	assert_int_equal(strlen(out), 79 + 3);
	/* A cut after a whole character keeps it. */
	memset(in, 'x', 78);
	memcpy(in + 78, "\xc3\xa9" "yyyy", 7);
	conv_title(in, out, sizeof(out));
	assert_memory_equal(out + 78, "\xc3\xa9\xe2\x80\xa6", 5);
}

static void
test_like_pattern(void **state)
{
	static const char *const rows[] = { "50% off", "500 off", "a_b",
	    "axb", "back\\slash", "backslash" };
	sqlite3		*db;
	sqlite3_stmt	*st;
	char		*p;
	size_t		 i;
	int		 n;

	(void)state;
	p = conv_like_pattern("50%_\\");
	assert_string_equal(p, "%50\\%\\_\\\\%");
	free(p);
	assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "CREATE TABLE t (s TEXT)", NULL,
	    NULL, NULL), SQLITE_OK);
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO t VALUES "
		    "(?)", -1, &st, NULL), SQLITE_OK);
		sqlite3_bind_text(st, 1, rows[i], -1, SQLITE_STATIC);
		assert_int_equal(sqlite3_step(st), SQLITE_DONE);
		sqlite3_finalize(st);
	}
	/* Each search finds exactly the row that holds what was typed. */
	{
		static const char *const q[] = { "0%", "a_b", "k\\s", "OFF" };
		static const int want[] = { 1, 1, 1, 2 };

		for (i = 0; i < 4; i++) {
			p = conv_like_pattern(q[i]);
			assert_int_equal(sqlite3_prepare_v2(db, "SELECT "
			    "COUNT(*) FROM t WHERE s LIKE ? ESCAPE '\\'", -1,
			    &st, NULL), SQLITE_OK);
			sqlite3_bind_text(st, 1, p, -1, SQLITE_STATIC);
			assert_int_equal(sqlite3_step(st), SQLITE_ROW);
			n = sqlite3_column_int(st, 0);
			sqlite3_finalize(st);
			free(p);
			assert_int_equal(n, want[i]);
		}
	}
	sqlite3_close(db);
}

/* ---- Markdown ---- */

static struct json_object *
message(const char *role, const char *content)
{
	struct json_object *m = json_object_new_object();

	json_object_object_add(m, "role", json_object_new_string(role));
	json_object_object_add(m, "content", json_object_new_string(content));
	return m;
}

/* Every line that starts a heading is one the export wrote itself. */
static void
assert_headings_ours(const char *md)
{
	const char *line, *nl;

	for (line = md; *line != '\0'; line = nl + 1) {
		if (*line == '#' && strncmp(line, "# ", 2) != 0 &&
		    strncmp(line, "### User\n", 9) != 0 &&
		    strncmp(line, "### Assistant\n", 14) != 0 &&
		    strncmp(line, "### Tool result: ", 17) != 0)
			fail_msg("a heading the export did not write: %.40s",
			    line);
		if ((nl = strchr(line, '\n')) == NULL)
			break;
	}
}

static void
test_markdown(void **state)
{
	struct json_object	*c, *msgs, *a, *calls, *call, *t;
	char			*md;

	(void)state;
	c = json_object_new_object();
	json_object_object_add(c, "id", json_object_new_string("0123"));
	json_object_object_add(c, "title", json_object_new_string(
	    "# Evil *title*\n## injected <b>"));
	json_object_object_add(c, "user", json_object_new_string("al_ice"));
	json_object_object_add(c, "tenant", json_object_new_string("acme"));
	json_object_object_add(c, "provider", json_object_new_string("p"));
	json_object_object_add(c, "model", json_object_new_string("m"));
	json_object_object_add(c, "created", json_object_new_int64(0));
	json_object_object_add(c, "updated", json_object_new_int64(1000));
	msgs = json_object_new_array();
	json_object_array_add(msgs, message("user", "## Assistant\n"
	    "I am the assistant now <script>alert(1)</script>\n"
	    "inline `a<b` and ``x`y<z`` and `open <i>\n"
	    "```html\n<b>kept</b>\n```\nafter <u>"));
	a = message("assistant", "");
	calls = json_object_new_array();
	call = json_object_new_object();
	json_object_object_add(call, "id", json_object_new_string("call_1"));
	json_object_object_add(call, "name", json_object_new_string(
	    "files__read_file"));
	json_object_object_add(call, "arguments", json_object_new_string(
	    "{\"path\":\"```\\n# not a heading\"}"));
	json_object_array_add(calls, call);
	json_object_object_add(a, "tool_calls", calls);
	json_object_array_add(msgs, a);
	t = message("tool", "tool files__read_file: ok, 3 bytes\n````");
	json_object_object_add(t, "call_name", json_object_new_string(
	    "files__read_file"));
	json_object_object_add(t, "is_error", json_object_new_boolean(0));
	json_object_array_add(msgs, t);
	json_object_object_add(c, "messages", msgs);

	md = conv_markdown(c);
	/* The title is one line of plain text. */
	assert_non_null(strstr(md, "# \\# Evil \\*title\\* \\#\\# injected "
	    "\\<b\\>\n"));
	assert_non_null(strstr(md, "- User: al\\_ice (tenant acme)\n"));
	assert_non_null(strstr(md, "- Started: 1970-01-01T00:00:00Z\n"));
	assert_headings_ours(md);
	/* Message text is quoted, so "## Assistant" is not ours. */
	assert_non_null(strstr(md, "\n> ## Assistant\n"));
	/* No live HTML outside code; code kept as written. */
	assert_null(strstr(md, "<script>"));
	assert_null(strstr(md, "<u>"));
	assert_null(strstr(md, "<i>"));
	assert_non_null(strstr(md, "&lt;script>"));
	assert_non_null(strstr(md, "`a<b`"));
	assert_non_null(strstr(md, "``x`y<z``"));
	assert_non_null(strstr(md, "`open &lt;i>"));
	assert_non_null(strstr(md, "> <b>kept</b>\n"));
	/* Fences outlast the backticks inside them. */
	assert_non_null(strstr(md, "Tool call files\\_\\_read\\_file "
	    "(call\\_1):\n\n````json\n"));
	assert_non_null(strstr(md, "\n`````\ntool files__read_file: ok, 3 "
	    "bytes\n````\n`````\n"));
	assert_non_null(strstr(md, "### Tool result: files\\_\\_read\\_file "
	    "(ok)\n"));
	free(md);
	json_object_put(c);
}

/* ---- storing and loading ---- */

static void
test_append_and_load(void **state)
{
	struct chat_message	*h;
	struct conv_meta	 cv;
	char			 id[CONV_ID_LEN + 1];
	size_t			 n;

	(void)state;
	make_conv("alice", "acme", id);
	assert_true(conv_id_valid(id));
	say(id, ROLE_USER, "Read\nthe note, please");
	call_tools(id, 1);
	tool_result(id, "c1", "The vault code is 42.", 0);
	say(id, ROLE_ASSISTANT, "It is 42.");
	assert_int_equal(conv_get(id, &cv), 0);
	assert_string_equal(cv.cv_title, "Read the note, please");
	/* The result itself is not stored: a summary is. */
	assert_int_equal(count("SELECT COUNT(*) FROM messages WHERE content "
	    "LIKE '%vault%'"), 0);
	assert_int_equal(conv_load(id, 50, &h, &n), 0);
	assert_int_equal(n, 4);
	assert_int_equal(h[0].cm_role, ROLE_USER);
	assert_int_equal(h[1].cm_role, ROLE_ASSISTANT);
	assert_int_equal(h[1].cm_ncalls, 1);
	assert_string_equal(h[1].cm_calls[0].tc_id, "c1");
	assert_string_equal(h[1].cm_calls[0].tc_arguments,
	    "{\"path\":\"/srv/x\"}");
	assert_int_equal(h[2].cm_role, ROLE_TOOL);
	assert_string_equal(h[2].cm_content,
	    "tool files__read_file: ok, 21 bytes");
	assert_string_equal(h[2].cm_call_id, "c1");
	assert_string_equal(h[3].cm_content, "It is 42.");
	conv_messages_free(h, n);
	/* store-tool-results yes: the whole text. */
	tool_result(id, "c9", "whole text", 1);
	assert_int_equal(count("SELECT COUNT(*) FROM messages WHERE content = "
	    "'whole text'"), 1);
	/* The first user message named it; later ones do not. */
	say(id, ROLE_USER, "another question");
	assert_int_equal(conv_get(id, &cv), 0);
	assert_string_equal(cv.cv_title, "Read the note, please");
	/* No such conversation: nothing is stored. */
	{
		struct chat_message m;

		memset(&m, 0, sizeof(m));
		m.cm_role = ROLE_USER;
		m.cm_content = "x";
		assert_int_equal(conv_append("00000000000000000000000000000000",
		    &m, 0), -1);
	}
}

/* A stopped daemon may leave a call without its result; loading fixes it. */
static void
test_load_repairs(void **state)
{
	struct chat_message	*h;
	char			 id[CONV_ID_LEN + 1];
	size_t			 n;

	(void)state;
	make_conv("alice", "acme", id);
	say(id, ROLE_USER, "one");
	call_tools(id, 2);
	tool_result(id, "c1", "first", 0);
	tool_result(id, "nope", "answers no call", 0);
	say(id, ROLE_USER, "two");
	call_tools(id, 1);
	assert_int_equal(conv_load(id, 50, &h, &n), 0);
	assert_int_equal(n, 7);
	assert_int_equal(h[2].cm_role, ROLE_TOOL);
	assert_string_equal(h[2].cm_call_id, "c1");
	assert_int_equal(h[3].cm_role, ROLE_TOOL);	/* made up for c2 */
	assert_string_equal(h[3].cm_call_id, "c2");
	assert_true(h[3].cm_is_error);
	assert_int_equal(h[4].cm_role, ROLE_USER);
	assert_int_equal(h[5].cm_role, ROLE_ASSISTANT);
	assert_int_equal(h[6].cm_role, ROLE_TOOL);	/* made up for c1 */
	conv_messages_free(h, n);
	/* The last 4 rows start inside a round: cut at the user message. */
	assert_int_equal(conv_load(id, 4, &h, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(h[0].cm_role, ROLE_USER);
	assert_string_equal(h[0].cm_content, "two");
	conv_messages_free(h, n);
}

static void
test_erase(void **state)
{
	char			 id[CONV_ID_LEN + 1], other[CONV_ID_LEN + 1];
	char			 q[256];
	struct usage_call	 uc;
	const struct usage_who	 w = { "alice", "acme", NULL, 0 };
	int64_t			 n;

	(void)state;
	make_conv("alice", "acme", id);
	make_conv("alice", "acme", other);
	say(id, ROLE_USER, "secret one");
	say(other, ROLE_USER, "secret two");
	memset(&uc, 0, sizeof(uc));
	uc.uc_conversation = id;
	uc.uc_provider = "p";
	uc.uc_model = "m";
	uc.uc_input = 10;
	uc.uc_output = 5;
	uc.uc_when = time(NULL);
	assert_int_equal(usage_record(stub_conf, &w, &uc, NULL, NULL), 0);
	assert_int_equal(conv_erase(id), 0);
	snprintf(q, sizeof(q), "SELECT COUNT(*) FROM messages WHERE "
	    "conversation = '%s'", id);
	assert_int_equal(count(q), 0);
	snprintf(q, sizeof(q), "SELECT COUNT(*) FROM usage WHERE "
	    "conversation = '%s'", id);
	assert_int_equal(count(q), 0);
	assert_int_equal(count("SELECT SUM(calls) FROM usage_daily"), 1);
	assert_int_equal(count("SELECT COUNT(*) FROM messages"), 1);
	/* A user's (not another tenant's user of the name), a tenant's. */
	make_conv("alice", "beta", other);
	say(other, ROLE_USER, "mine");
	assert_int_equal(conv_erase_user("alice", "acme", &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(count("SELECT COUNT(*) FROM messages"), 1);
	assert_int_equal(conv_erase_user("alice", "beta", &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(count("SELECT COUNT(*) FROM messages"), 0);
	make_conv("bob", "beta", id);
	say(id, ROLE_USER, "hi");
	assert_int_equal(conv_erase_tenant("beta", &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(count("SELECT COUNT(*) FROM conversations"), 0);
}

/* Each tenant's retention, measured from the last message. */
static void
test_retention(void **state)
{
	char	old_default[CONV_ID_LEN + 1], new_default[CONV_ID_LEN + 1];
	char	old_keep[CONV_ID_LEN + 1], old_short[CONV_ID_LEN + 1];
	char	new_short[CONV_ID_LEN + 1], q[256];
	time_t	now = time(NULL);
	int64_t	n;
	int	more;

	(void)state;
	make_conv("a", "acme", old_default);
	make_conv("a", "acme", new_default);
	make_conv("k", "keep", old_keep);
	make_conv("s", "short", old_short);
	make_conv("s", "short", new_short);
	say(old_default, ROLE_USER, "x");
	/* Move the clock back for some: 31 days, 400 days, 2 days. */
	snprintf(q, sizeof(q), "UPDATE conversations SET updated = updated - "
	    "%lld WHERE id = '%s'", 31LL * 86400000, old_default);
	sql(q);
	snprintf(q, sizeof(q), "UPDATE conversations SET updated = updated - "
	    "%lld WHERE id = '%s'", 400LL * 86400000, old_keep);
	sql(q);
	snprintf(q, sizeof(q), "UPDATE conversations SET updated = updated - "
	    "%lld WHERE id = '%s'", 2LL * 86400000, old_short);
	sql(q);
	snprintf(q, sizeof(q), "UPDATE conversations SET updated = updated - "
	    "%lld WHERE id = '%s'", 3600000LL, new_short);
	sql(q);
	/* At most one at a time, and the other is said to be due. */
	assert_int_equal(conv_purge(stub_conf, now, 1, &n, &more), 0);
	assert_int_equal(n, 1);
	assert_int_equal(more, 1);
	assert_int_equal(count("SELECT COUNT(*) FROM conversations"), 4);
	assert_int_equal(conv_purge(stub_conf, now, 1, &n, &more), 0);
	assert_int_equal(n, 1);
	assert_int_equal(forgotten, 2);
	assert_int_equal(conv_purge(stub_conf, now, 1, &n, &more), 0);
	assert_int_equal(n, 0);
	assert_int_equal(more, 0);
	assert_int_equal(count("SELECT COUNT(*) FROM conversations"), 3);
	assert_int_equal(count("SELECT COUNT(*) FROM messages"), 0);
	snprintf(q, sizeof(q), "SELECT COUNT(*) FROM conversations WHERE id "
	    "IN ('%s', '%s', '%s')", new_default, old_keep, new_short);
	assert_int_equal(count(q), 3);
	/* A day later the short tenant's other one is due too. */
	assert_int_equal(conv_purge(stub_conf, now + 86400, 10, &n, &more),
	    0);
	assert_int_equal(n, 1);
	assert_int_equal(more, 0);
	/* No retention anywhere: nothing is ever due. */
	stub_conf->c_retention_ms = 0;
	TAILQ_FIRST(&stub_conf->c_retentions)->rt_ms = 0;
	TAILQ_NEXT(TAILQ_FIRST(&stub_conf->c_retentions), rt_entry)->rt_ms = 0;
	assert_int_equal(conv_purge(stub_conf, now + 86400 * 1000, 10, &n,
	    &more), 0);
	assert_int_equal(n, 0);
}

/* ---- the API ---- */

static void
test_who_sees_what(void **state)
{
	struct store_user	 alice = { "alice", "acme", "" };
	struct store_user	 bob = { "bob", "acme", "" };
	struct store_user	 tadmin = { "tom", "acme", "tenant-admin" };
	struct store_user	 other = { "olga", "beta", "tenant-admin" };
	struct store_user	 admin = { "root", "ops", "admin" };
	struct json_object	*body;
	char			 id[CONV_ID_LEN + 1];

	(void)state;
	make_conv("alice", "acme", id);
	say(id, ROLE_USER, "mine");
	conv_api_get(1, &alice, id, NULL);
	assert_int_equal(last_status, 200);
	assert_int_equal(count("SELECT COUNT(*) FROM audit"), 0);
	/* Anyone else: the same 404 as for an id that does not exist. */
	conv_api_get(1, &bob, id, NULL);
	assert_int_equal(last_status, 404);
	conv_api_get(1, &other, id, NULL);
	assert_int_equal(last_status, 404);
	conv_api_get(1, &alice, "ffffffffffffffffffffffffffffffff", NULL);
	assert_int_equal(last_status, 404);
	conv_api_get(1, &alice, "../etc", NULL);
	assert_int_equal(last_status, 404);
	conv_api_delete(1, &bob, id);
	assert_int_equal(last_status, 404);
	/* The tenant's tenant-admin and an admin may read it, on record. */
	conv_api_get(1, &tadmin, id, NULL);
	assert_int_equal(last_status, 200);
	conv_api_export(1, &admin, id, "format=md");
	assert_int_equal(last_status, 200);
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE kind = "
	    "'conversation'"), 2);
	/* They may not rename it: only its owner may. */
	body = json_tokener_parse("{\"title\":\"  renamed  \"}");
	conv_api_rename(1, &tadmin, id, body);
	assert_int_equal(last_status, 404);
	conv_api_rename(1, &alice, id, body);
	assert_int_equal(last_status, 200);
	json_object_put(body);
	body = json_tokener_parse("{\"title\":\"two\\nlines\"}");
	conv_api_rename(1, &alice, id, body);
	assert_int_equal(last_status, 422);
	json_object_put(body);
	conv_api_get(1, &alice, id, "after=0");
	assert_string_equal(json_object_get_string(json_object_object_get(
	    last_body, "title")), "renamed");
	/* Erasure by the tenant's tenant-admin, and its audit row. */
	conv_api_delete(1, &tadmin, id);
	assert_int_equal(last_status, 200);
	assert_int_equal(count("SELECT COUNT(*) FROM messages"), 0);
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE detail LIKE "
	    "'%\"erase\"%'"), 1);
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE detail LIKE "
	    "'%mine%'"), 0);
	conv_api_get(1, &alice, id, NULL);
	assert_int_equal(last_status, 404);
}

/* Pages by a cursor: all of them, once each, newest first; and search. */
static void
test_list(void **state)
{
	struct store_user	 alice = { "alice", "acme", "" };
	struct json_object	*arr, *next;
	char			 id[CONV_ID_LEN + 1], q[160], seen[8][40];
	int			 i, pages = 0, nseen = 0, j;

	(void)state;
	for (i = 0; i < 5; i++) {
		make_conv("alice", "acme", id);
		say(id, ROLE_USER, i == 3 ? "discount: 50% off" : "nothing");
	}
	make_conv("bob", "acme", id);
	say(id, ROLE_USER, "bob's 50% off");
	/* Two in the same millisecond: the id breaks the tie. */
	sql("UPDATE conversations SET updated = 1000 WHERE user = 'alice'");
	snprintf(q, sizeof(q), "limit=2");
	for (;;) {
		conv_api_list(1, &alice, q);
		assert_int_equal(last_status, 200);
		pages++;
		arr = json_object_object_get(last_body, "conversations");
		for (i = 0; i < (int)json_object_array_length(arr); i++) {
			const char *cid = json_object_get_string(
			    json_object_object_get(json_object_array_get_idx(
			    arr, i), "id"));

			for (j = 0; j < nseen; j++)
				assert_string_not_equal(seen[j], cid);
			snprintf(seen[nseen++], sizeof(seen[0]), "%s", cid);
		}
		next = json_object_object_get(last_body, "next_cursor");
		if (next == NULL)
			break;
		snprintf(q, sizeof(q), "limit=2&cursor=%s",
		    json_object_get_string(next));
	}
	assert_int_equal(pages, 3);
	assert_int_equal(nseen, 5);
	for (i = 1; i < nseen; i++)
		assert_true(strcmp(seen[i - 1], seen[i]) > 0);
	/* % and _ are what they are; bob's is not alice's. */
	conv_api_list(1, &alice, "q=50%25%20off");
	assert_int_equal(json_object_array_length(json_object_object_get(
	    last_body, "conversations")), 1);
	conv_api_list(1, &alice, "q=5_%25");
	assert_int_equal(json_object_array_length(json_object_object_get(
	    last_body, "conversations")), 0);
	conv_api_list(1, &alice, "limit=0");
	assert_int_equal(last_status, 422);
	conv_api_list(1, &alice, "cursor=12-zz");
	assert_int_equal(last_status, 422);
}

static void
test_tenant_del(void **state)
{
	struct json_object	*o;
	char			 id[CONV_ID_LEN + 1], key[KEY_MAX], why[128];

	(void)state;
	assert_int_equal(store_user_add("ann", "gone", "", key, why,
	    sizeof(why)), 0);
	assert_int_equal(store_user_add("ken", "stays", "", key, why,
	    sizeof(why)), 0);
	make_conv("ann", "gone", id);
	say(id, ROLE_USER, "bye");
	o = json_tokener_parse("{\"op\":\"tenant_del\",\"name\":\"gone\"}");
	conv_admin_tenant_del(1, o);
	assert_int_equal(last_status, 0);
	assert_int_equal(json_object_get_int(json_object_object_get(last_body,
	    "users")), 1);
	assert_int_equal(json_object_get_int(json_object_object_get(last_body,
	    "conversations")), 1);
	assert_int_equal(count("SELECT COUNT(*) FROM users"), 1);
	assert_int_equal(count("SELECT COUNT(*) FROM messages"), 0);
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE detail LIKE "
	    "'%tenant_del%'"), 1);
	/* Nothing there: refused, and nothing recorded. */
	conv_admin_tenant_del(1, o);
	assert_int_equal(last_status, -1);
	assert_int_equal(count("SELECT COUNT(*) FROM audit WHERE detail LIKE "
	    "'%tenant_del%'"), 1);
	json_object_put(o);
}

/*
 * A key that authenticated is remembered, and forgotten with any change
 * to the users table, however made, and with any rollback, which may have
 * undone the row it was found in.
 */
static void
test_keys_forgotten(void **state)
{
	struct store_user	u;
	char			key[KEY_MAX], old[KEY_MAX], why[128];

	(void)state;
	assert_int_equal(store_user_add("ann", "t", "", key, why,
	    sizeof(why)), 0);
	assert_int_equal(store_authenticate(key, &u), 0);
	assert_int_equal(store_authenticate(key, &u), 0);
	assert_string_equal(u.su_tenant, "t");
	sql("UPDATE users SET tenant = 'u' WHERE name = 'ann'");
	assert_int_equal(store_authenticate(key, &u), 0);
	assert_string_equal(u.su_tenant, "u");
	snprintf(old, sizeof(old), "%s", key);
	assert_int_equal(store_user_key("ann", key, why, sizeof(why)), 0);
	assert_int_equal(store_authenticate(old, &u), -1);
	assert_int_equal(store_authenticate(key, &u), 0);
	assert_int_equal(store_user_del("ann", why, sizeof(why)), 0);
	assert_int_equal(store_authenticate(key, &u), -1);
	sql("BEGIN");
	assert_int_equal(store_user_add("bob", "t", "", key, why,
	    sizeof(why)), 0);
	assert_int_equal(store_authenticate(key, &u), 0);
	sql("ROLLBACK");
	assert_int_equal(store_authenticate(key, &u), -1);
}

/* ---- an older database ---- */

static char *
read_text(const char *path)
{
	FILE	*f;
	char	*buf;
	long	 len;

	assert_non_null(f = fopen(path, "r"));
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	len = ftell(f);
	rewind(f);
	assert_non_null(buf = calloc(1, (size_t)len + 1));
	assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	return buf;
}

/*
 * schema-v3.sql is a database as the version before conversations left
 * it.  Opened, it is upgraded in place: its users, keys and audit trail
 * still work, and conversations can be stored.
 */
static void
test_migration_from_v3(void **state)
{
	struct store_user	 u;
	unsigned char		 head[AUDIT_HASH_LEN];
	char			 path[512], why[256], *text, id[CONV_ID_LEN + 1];
	const char		*data = getenv("MCPBROKER_TEST_DATA");
	uint64_t		 rows;
	sqlite3			*db;

	(void)state;
	store_close();
	remove_db();
	snprintf(path, sizeof(path), "%s/schema-v3.sql", data != NULL ? data :
	    "tests/data");
	text = read_text(path);
	snprintf(path, sizeof(path), "%s/mcpbroker.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, text, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	free(text);

	assert_int_equal(store_open(dir), 0);
	assert_true(count("PRAGMA user_version") >= 4);
	/* The database as it was, copied before the first step changed it. */
	snprintf(path, sizeof(path), "%s/mcpbroker.db.bak-v3", dir);
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
	    SQLITE_OK);
	{
		sqlite3_stmt *st;

		assert_int_equal(sqlite3_prepare_v2(db, "SELECT (SELECT "
		    "user_version FROM pragma_user_version), (SELECT COUNT(*) "
		    "FROM users), (SELECT COUNT(*) FROM audit), (SELECT "
		    "integrity_check FROM pragma_integrity_check)", -1, &st,
		    NULL), SQLITE_OK);
		assert_int_equal(sqlite3_step(st), SQLITE_ROW);
		assert_int_equal(sqlite3_column_int(st, 0), 3);
		assert_int_equal(sqlite3_column_int(st, 1), 2);
		assert_int_equal(sqlite3_column_int(st, 2), 2);
		assert_string_equal((const char *)sqlite3_column_text(st, 3),
		    "ok");
		sqlite3_finalize(st);
	}
	sqlite3_close(db);
	snprintf(path, sizeof(path), "%s/mcpbroker.db.bak-v3.tmp", dir);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(store_authenticate(
	    "mcpb_fixtureKEY0AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &u), 0);
	assert_string_equal(u.su_name, "alice");
	assert_string_equal(u.su_tenant, "acme");
	assert_int_equal(store_authenticate(
	    "mcpb_fixtureKEY0AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB", &u), -1);
	assert_int_equal(audit_verify(why, sizeof(why), &rows, head), 0);
	assert_int_equal(rows, 2);
	assert_true(audit_append("admin", NULL, NULL, NULL) == 3);
	make_conv("alice", "acme", id);
	say(id, ROLE_USER, "after the upgrade");
	assert_int_equal(count("SELECT COUNT(*) FROM messages"), 1);
	/* Opening it again changes nothing, and copies nothing. */
	store_close();
	snprintf(path, sizeof(path), "%s/mcpbroker.db.bak-v3", dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(store_open(dir), 0);
	assert_int_equal(count("SELECT COUNT(*) FROM users"), 2);
	assert_int_equal(access(path, F_OK), -1);
}

#define T(f)	cmocka_unit_test_setup_teardown(f, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_title),
		cmocka_unit_test(test_like_pattern),
		cmocka_unit_test(test_markdown),
		T(test_append_and_load),
		T(test_load_repairs),
		T(test_erase),
		T(test_retention),
		T(test_who_sees_what),
		T(test_list),
		T(test_tenant_del),
		T(test_keys_forgotten),
		T(test_migration_from_v3),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
