/*
 * Stored conversations over HTTP (/api/v1/conversations), as Markdown,
 * and `mcpbrokerctl tenant del`.  The storage itself is controller_conv.c.
 *
 * Anyone who may not see a conversation gets 404 for it, never 403, so
 * that ids cannot be probed.  Reading or exporting someone else's
 * conversation, and every erasure, is audited (without any of its text).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>
#include <sqlite3.h>

#include "broker/chat.h"
#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_conv.h"
#include "broker/controller_store.h"
#include "broker/controller_usage.h"
#include "common/log.h"
#include "common/util.h"

#define LIST_DEFAULT		20
#define LIST_MAX		100
#define QUERY_MAX		200	/* bytes searched for */
#define REPLY_TEXT_MAX		(2u * 1024 * 1024)	/* ×6 escaped < 16 MiB */

static const char *
json_str(struct json_object *o, const char *key)
{
	struct json_object	*v;

	return json_object_object_get_ex(o, key, &v) &&
	    json_object_is_type(v, json_type_string) ?
	    json_object_get_string(v) : "";
}

/* ---- Markdown ---- */

/*
 * The export is a document a person reads, so message text stays
 * Markdown; it must not be able to pass for the document's own structure
 * or carry live HTML.  Message text goes in a block quote (a "## User"
 * line inside it is quoted, not a heading of ours), every "<" outside
 * code becomes "&lt;", and code blocks get fences longer than any run of
 * backticks inside them.
 */

/* One line of title or name: no line breaks, Markdown punctuation inert. */
static void
md_inline(FILE *f, const char *s)
{
	for (; *s != '\0'; s++) {
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			fputc(' ', f);
		else {
			if (strchr("\\`*_[]<>!|~&#", *s) != NULL)
				fputc('\\', f);
			fputc(*s, f);
		}
	}
}

static size_t
backtick_run(const char *s)
{
	size_t	n = 0;

	while (s[n] == '`')
		n++;
	return n;
}

/* A fence longer than any run of backticks in text (at least three). */
static size_t
fence_len(const char *text)
{
	size_t	n, max = 2;

	for (; *text != '\0'; text += n > 0 ? n : 1)
		if ((n = backtick_run(text)) > max)
			max = n;
	return max + 1;
}

static void
md_fenced(FILE *f, const char *info, const char *text)
{
	size_t	n = fence_len(text), i;

	for (i = 0; i < n; i++)
		fputc('`', f);
	fprintf(f, "%s\n%s%s", info, text, *text != '\0' &&
	    text[strlen(text) - 1] != '\n' ? "\n" : "");
	for (i = 0; i < n; i++)
		fputc('`', f);
	fputs("\n\n", f);
}

/*
 * Text outside code: "<" escaped.  A run of n backticks with a closing
 * run of exactly n later on the line is a code span, copied as it is.
 */
static void
md_line_text(FILE *f, const char *s, size_t len)
{
	const char	*end = s + len, *c;
	size_t		 n, m;

	while (s < end) {
		if (*s != '`') {
			if (*s == '<')
				fputs("&lt;", f);
			else
				fputc(*s, f);
			s++;
			continue;
		}
		n = backtick_run(s);
		for (c = s + n; c < end; c += m > 0 ? m : 1)
			if ((m = backtick_run(c)) == n)
				break;
		if (c >= end) {
			fwrite(s, 1, n, f);	/* no closer: plain backticks */
			s += n;
		} else {
			fwrite(s, 1, (size_t)(c + n - s), f);
			s = c + n;
		}
	}
}

/* A fence line (``` or ~~~, up to three spaces in): its char and length. */
static size_t
fence_open(const char *line, size_t len, char *ch)
{
	size_t	i = 0, n = 0;

	while (i < len && i < 3 && line[i] == ' ')
		i++;
	if (i < len && (line[i] == '`' || line[i] == '~')) {
		*ch = line[i];
		while (i + n < len && line[i + n] == *ch)
			n++;
	}
	return n >= 3 ? n : 0;
}

/* Message text as a block quote; fenced code inside it kept as it is. */
static void
md_quote(FILE *f, const char *text)
{
	const char	*line = text, *nl;
	size_t		 len, open = 0, n;
	char		 ch = 0, c;

	if (*text == '\0') {
		fputs("> \n\n", f);
		return;
	}
	for (; *line != '\0'; line = nl != NULL ? nl + 1 : line + len) {
		nl = strchr(line, '\n');
		len = nl != NULL ? (size_t)(nl - line) : strlen(line);
		if (len > 0 && line[len - 1] == '\r')
			len--;
		fputs("> ", f);
		n = fence_open(line, len, &c);
		if (open == 0 && n > 0) {
			open = n;
			ch = c;
			fwrite(line, 1, len, f);
		} else if (open > 0) {
			if (n >= open && c == ch)
				open = 0;
			fwrite(line, 1, len, f);
		} else
			md_line_text(f, line, len);
		fputc('\n', f);
		if (nl == NULL)
			break;
	}
	fputc('\n', f);
}

static void
md_time(FILE *f, const char *label, int64_t ms)
{
	time_t		t = (time_t)(ms / 1000);
	struct tm	tm;
	char		buf[32];

	gmtime_r(&t, &tm);
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	fprintf(f, "- %s: %s\n", label, buf);
}

static void
md_calls(FILE *f, struct json_object *calls)
{
	struct json_object	*c, *args;
	const char		*text;
	size_t			 i;

	for (i = 0; i < json_object_array_length(calls); i++) {
		c = json_object_array_get_idx(calls, i);
		fputs("Tool call ", f);
		md_inline(f, json_str(c, "name"));
		fputs(" (", f);
		md_inline(f, json_str(c, "id"));
		fputs("):\n\n", f);
		text = json_str(c, "arguments");
		/* Pretty when it is JSON, else as the model wrote it. */
		if ((args = json_parse_object(text, strlen(text))) != NULL)
			text = json_object_to_json_string_ext(args,
			    JSON_C_TO_STRING_PRETTY |
			    JSON_C_TO_STRING_NOSLASHESCAPE);
		md_fenced(f, "json", text);
		json_object_put(args);
	}
}

static void
md_message(FILE *f, struct json_object *m)
{
	struct json_object	*calls, *err;
	const char		*role = json_str(m, "role");

	if (strcmp(role, "tool") == 0) {
		fputs("### Tool result: ", f);
		md_inline(f, json_str(m, "call_name"));
		fprintf(f, " (%s)\n\n", json_object_object_get_ex(m,
		    "is_error", &err) && json_object_get_boolean(err) ?
		    "error" : "ok");
		md_fenced(f, "", json_str(m, "content"));
		return;
	}
	fprintf(f, "### %s\n\n", strcmp(role, "user") == 0 ? "User" :
	    strcmp(role, "assistant") == 0 ? "Assistant" : "System");
	if (*json_str(m, "content") != '\0' || !json_object_object_get_ex(m,
	    "tool_calls", &calls))
		md_quote(f, json_str(m, "content"));
	if (json_object_object_get_ex(m, "tool_calls", &calls) &&
	    json_object_is_type(calls, json_type_array))
		md_calls(f, calls);
}

char *
conv_markdown(struct json_object *c)
{
	struct json_object	*msgs, *v;
	char			*out = NULL;
	size_t			 len = 0, i;
	FILE			*f;

	if ((f = open_memstream(&out, &len)) == NULL)
		fatal("open_memstream");
	fputs("# ", f);
	md_inline(f, *json_str(c, "title") != '\0' ? json_str(c, "title") :
	    "Conversation");
	fputs("\n\n- Conversation: ", f);
	md_inline(f, json_str(c, "id"));
	fputs("\n- User: ", f);
	md_inline(f, json_str(c, "user"));
	fputs(" (tenant ", f);
	md_inline(f, json_str(c, "tenant"));
	fputs(")\n- Provider: ", f);
	md_inline(f, json_str(c, "provider"));
	fputs(", model ", f);
	md_inline(f, json_str(c, "model"));
	fputc('\n', f);
	if (json_object_object_get_ex(c, "created", &v))
		md_time(f, "Started", json_object_get_int64(v));
	if (json_object_object_get_ex(c, "updated", &v))
		md_time(f, "Last message", json_object_get_int64(v));
	fputs("\n---\n\n", f);
	if (json_object_object_get_ex(c, "messages", &msgs))
		for (i = 0; i < json_object_array_length(msgs); i++)
			md_message(f, json_object_array_get_idx(msgs, i));
	if (json_object_object_get_ex(c, "truncated", &v) &&
	    json_object_get_boolean(v))
		fputs("*The conversation goes on; this export holds what fits "
		    "in one answer.*\n", f);
	if (fclose(f) != 0)
		fatal("open_memstream");
	return out;
}

/* ---- the API ---- */

/* A name is a user within a tenant: one of another tenant is another. */
static int
owns(const struct store_user *u, const struct conv_meta *cv)
{
	return store_user_is(u, cv->cv_user, cv->cv_tenant);
}

static int
may_see(const struct store_user *u, const struct conv_meta *cv)
{
	return owns(u, cv) ||
	    user_has_role(u, "admin") || (user_has_role(u, "tenant-admin") &&
	    strcmp(u->su_tenant, cv->cv_tenant) == 0);
}

/* The conversation if u may see it (owner_only: if u owns it); else 404. */
static int
conv_for(uint64_t id, const struct store_user *u, const char *conv,
    int owner_only, struct conv_meta *cv)
{
	if (conv_id_valid(conv) && conv_get(conv, cv) == 0 &&
	    (owner_only ? owns(u, cv) :
	    may_see(u, cv)))
		return 0;
	api_error(id, 404, "not_found", "no such conversation");
	return -1;
}

/* Who touched someone else's conversation, or erased one, on record. */
static int
audit_access(const struct store_user *u, const struct conv_meta *cv,
    const char *event)
{
	struct json_object	*d = json_object_new_object();
	int64_t			 rc;

	json_object_object_add(d, "event", json_object_new_string(event));
	json_object_object_add(d, "conversation",
	    json_object_new_string(cv->cv_id));
	json_object_object_add(d, "owner", json_object_new_string(
	    cv->cv_user));
	json_object_object_add(d, "owner_tenant",
	    json_object_new_string(cv->cv_tenant));
	rc = audit_append(AUDIT_KIND_CONVERSATION, u->su_name, u->su_tenant,
	    d);
	json_object_put(d);
	return rc == -1 ? -1 : 0;
}

static struct json_object *
meta_json(const struct conv_meta *cv)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "id", json_object_new_string(cv->cv_id));
	json_object_object_add(o, "title", json_object_new_string(
	    cv->cv_title));
	json_object_object_add(o, "user", json_object_new_string(cv->cv_user));
	json_object_object_add(o, "tenant", json_object_new_string(
	    cv->cv_tenant));
	json_object_object_add(o, "provider", json_object_new_string(
	    cv->cv_provider));
	json_object_object_add(o, "model", json_object_new_string(
	    cv->cv_model));
	json_object_object_add(o, "toolset", json_object_new_string(
	    cv->cv_toolset));
	json_object_object_add(o, "created", json_object_new_int64(
	    cv->cv_created));
	json_object_object_add(o, "updated", json_object_new_int64(
	    cv->cv_updated));
	return o;
}

static struct json_object *
message_json(sqlite3_stmt *st, size_t *bytes)
{
	struct json_object	*o = json_object_new_object(), *calls;
	const char		*s;

	json_object_object_add(o, "seq", json_object_new_int64(
	    sqlite3_column_int64(st, 0)));
	json_object_object_add(o, "ts", json_object_new_int64(
	    sqlite3_column_int64(st, 1)));
	json_object_object_add(o, "role", json_object_new_string(
	    (const char *)sqlite3_column_text(st, 2)));
	s = (const char *)sqlite3_column_text(st, 3);
	json_object_object_add(o, "content", json_object_new_string(
	    s != NULL ? s : ""));
	*bytes += s != NULL ? strlen(s) : 0;
	if ((s = (const char *)sqlite3_column_text(st, 4)) != NULL &&
	    (calls = json_tokener_parse(s)) != NULL) {
		json_object_object_add(o, "tool_calls", calls);
		*bytes += strlen(s);
	}
	if ((s = (const char *)sqlite3_column_text(st, 5)) != NULL) {
		json_object_object_add(o, "call_id", json_object_new_string(s));
		json_object_object_add(o, "call_name", json_object_new_string(
		    (const char *)sqlite3_column_text(st, 6) != NULL ?
		    (const char *)sqlite3_column_text(st, 6) : ""));
		json_object_object_add(o, "is_error", json_object_new_boolean(
		    sqlite3_column_int(st, 7)));
	}
	return o;
}

/*
 * The conversation with its messages after seq `after`, as many as fit
 * one answer; "truncated" says when more follow (ask again with ?after=).
 */
static struct json_object *
conv_document(const struct conv_meta *cv, int64_t after)
{
	struct json_object	*o = meta_json(cv), *arr;
	sqlite3_stmt		*st;
	size_t			 bytes = 0;
	int			 truncated = 0;

	arr = json_object_new_array();
	if ((st = store_prepare("SELECT seq, ts, role, content, tool_calls, call_id, "
	    "call_name, is_error FROM messages WHERE conversation = ? AND "
	    "seq > ? ORDER BY seq")) != NULL) {
		store_bind_str(st, 1, cv->cv_id);
		sqlite3_bind_int64(st, 2, after);
		while (sqlite3_step(st) == SQLITE_ROW) {
			if (bytes > REPLY_TEXT_MAX) {
				truncated = 1;
				break;
			}
			json_object_array_add(arr, message_json(st, &bytes));
		}
		sqlite3_finalize(st);
	}
	json_object_object_add(o, "messages", arr);
	json_object_object_add(o, "truncated", json_object_new_boolean(
	    truncated));
	return o;
}

static int
parse_query(uint64_t id, const char *query, struct evkeyvalq *q)
{
	TAILQ_INIT(q);
	if (query != NULL && evhttp_parse_query_str(query, q) == -1) {
		api_error(id, 400, "bad_request", "the query string could not "
		    "be parsed");
		return -1;
	}
	return 0;
}

/* A number parameter within [min, max]; dflt when absent. */
static int
query_int(uint64_t id, struct evkeyvalq *q, const char *key, long long min,
    long long max, long long dflt, long long *out)
{
	const char	*v = evhttp_find_header(q, key);
	char		*end;

	*out = dflt;
	if (v == NULL)
		return 0;
	*out = strtoll(v, &end, 10);
	if (*v == '\0' || *end != '\0' || *out < min || *out > max) {
		api_error(id, 422, "invalid_field", "\"%s\": expected a number "
		    "from %lld to %lld", key, min, max);
		return -1;
	}
	return 0;
}

/* "UPDATED-ID" of the last row of a page: where the next one starts. */
static int
cursor_parse(const char *s, int64_t *updated, char *conv)
{
	char		*end;
	long long	 v;

	v = strtoll(s, &end, 10);
	if (end == s || *end != '-' || v < 0 || !conv_id_valid(end + 1))
		return -1;
	*updated = v;
	snprintf(conv, CONV_ID_LEN + 1, "%s", end + 1);
	return 0;
}

struct list_query {
	const char	*lq_user;
	const char	*lq_tenant;
	char		*lq_like;		/* NULL: no search */
	int64_t		 lq_updated;		/* cursor, or -1 */
	char		 lq_id[CONV_ID_LEN + 1];
	long long	 lq_limit;
};

static sqlite3_stmt *
list_statement(const struct list_query *lq)
{
	sqlite3_stmt	*st;

	if ((st = store_prepare("SELECT c.id, c.user, c.tenant, c.provider, "
	    "c.model, c.toolset, c.title, c.created, c.updated, (SELECT "
	    "COUNT(*) FROM messages m WHERE m.conversation = c.id) FROM "
	    "conversations c WHERE c.user = ?1 AND c.tenant = ?6 AND (?2 < 0 "
	    "OR c.updated < ?2 "
	    "OR (c.updated = ?2 AND c.id < ?3)) AND (?4 IS NULL OR c.title "
	    "LIKE ?4 ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m WHERE "
	    "m.conversation = c.id AND m.content LIKE ?4 ESCAPE '\\')) "
	    "ORDER BY c.updated DESC, c.id DESC LIMIT ?5")) == NULL)
		return NULL;
	store_bind_str(st, 1, lq->lq_user);
	sqlite3_bind_int64(st, 2, lq->lq_updated);
	store_bind_str(st, 3, lq->lq_id);
	store_bind_str(st, 4, lq->lq_like);
	sqlite3_bind_int64(st, 5, lq->lq_limit + 1);
	store_bind_str(st, 6, lq->lq_tenant);
	return st;
}

static void
list_reply(uint64_t id, const struct list_query *lq)
{
	struct json_object	*r, *arr, *o;
	struct conv_meta	 cv;
	sqlite3_stmt		*st;
	char			 cursor[64];
	long long		 n = 0;

	if ((st = list_statement(lq)) == NULL) {
		api_error(id, 500, "storage", "the conversations could not be "
		    "read");
		return;
	}
	arr = json_object_new_array();
	cursor[0] = '\0';
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (n++ == lq->lq_limit)
			break;		/* one more than asked: a next page */
		conv_meta_from_row(st, &cv);
		o = meta_json(&cv);
		json_object_object_add(o, "messages", json_object_new_int64(
		    sqlite3_column_int64(st, 9)));
		json_object_array_add(arr, o);
		snprintf(cursor, sizeof(cursor), "%lld-%s",
		    (long long)cv.cv_updated, cv.cv_id);
	}
	sqlite3_finalize(st);
	r = json_object_new_object();
	json_object_object_add(r, "conversations", arr);
	json_object_object_add(r, "next_cursor", n > lq->lq_limit ?
	    json_object_new_string(cursor) : NULL);
	api_reply(id, 200, r);
}

/* GET /api/v1/conversations?limit=&cursor=&q=: the caller's, newest first. */
void
conv_api_list(uint64_t id, const struct store_user *u, const char *query)
{
	struct evkeyvalq	 q;
	struct list_query	 lq;
	const char		*cursor, *text;

	if (parse_query(id, query, &q) == -1)
		return;
	memset(&lq, 0, sizeof(lq));
	lq.lq_user = u->su_name;
	lq.lq_tenant = u->su_tenant;
	lq.lq_updated = -1;
	if (query_int(id, &q, "limit", 1, LIST_MAX, LIST_DEFAULT,
	    &lq.lq_limit) == -1)
		goto out;
	if ((cursor = evhttp_find_header(&q, "cursor")) != NULL &&
	    cursor_parse(cursor, &lq.lq_updated, lq.lq_id) == -1) {
		api_error(id, 422, "invalid_field", "\"cursor\": not one this "
		    "server gave out");
		goto out;
	}
	if ((text = evhttp_find_header(&q, "q")) != NULL) {
		if (strlen(text) > QUERY_MAX) {
			api_error(id, 422, "invalid_field", "\"q\": at most %d "
			    "bytes", QUERY_MAX);
			goto out;
		}
		if (*text != '\0')
			lq.lq_like = conv_like_pattern(text);
	}
	list_reply(id, &lq);
 out:
	free(lq.lq_like);
	evhttp_clear_headers(&q);
}

/* GET /api/v1/conversations/ID[?after=SEQ] */
void
conv_api_get(uint64_t id, const struct store_user *u, const char *conv,
    const char *query)
{
	struct conv_meta	 cv;
	struct evkeyvalq	 q;
	long long		 after;

	if (conv_for(id, u, conv, 0, &cv) == -1 ||
	    parse_query(id, query, &q) == -1)
		return;
	if (query_int(id, &q, "after", 0, INT64_MAX, 0, &after) == 0) {
		if (!owns(u, &cv) &&
		    audit_access(u, &cv, "read") == -1)
			api_error(id, 503, "audit", "the access could not be "
			    "recorded; nothing was read");
		else
			api_reply(id, 200, conv_document(&cv, after));
	}
	evhttp_clear_headers(&q);
}

/* PATCH /api/v1/conversations/ID {title}: the owner only. */
void
conv_api_rename(uint64_t id, const struct store_user *u, const char *conv,
    struct json_object *body)
{
	struct conv_meta	 cv;
	sqlite3_stmt		*st;
	const char		*title, *p;
	size_t			 len;

	if (conv_for(id, u, conv, 1, &cv) == -1)
		return;
	if (body == NULL || json_get_str(body, "title", 4 * CONV_TITLE_MAX, 0,
	    &title) == -1) {
		api_error(id, 422, "invalid_field", "\"title\": expected a "
		    "string");
		return;
	}
	while (*title == ' ')
		title++;
	for (len = strlen(title); len > 0 && title[len - 1] == ' '; len--)
		;
	for (p = title; p < title + len; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			break;
	if (len == 0 || len > CONV_TITLE_MAX || p < title + len) {
		api_error(id, 422, "invalid_field", "\"title\": 1 to %d bytes "
		    "of text on one line", CONV_TITLE_MAX);
		return;
	}
	snprintf(cv.cv_title, sizeof(cv.cv_title), "%.*s", (int)len, title);
	if ((st = store_prepare("UPDATE conversations SET title = ? WHERE id = ?"))
	    == NULL)
		goto fail;
	store_bind_str(st, 1, cv.cv_title);
	store_bind_str(st, 2, cv.cv_id);
	if (store_step_done(st) == -1)
		goto fail;
	api_reply(id, 200, meta_json(&cv));
	return;
 fail:
	api_error(id, 500, "storage", "the title could not be stored");
}

/*
 * DELETE /api/v1/conversations/ID: the owner, an admin, or the tenant's
 * tenant-admin.  A session holding it forgets it first (its running turn
 * ends, and writes what it has); then messages, usage detail and the
 * conversation go in one transaction with the audit row that says so.
 */
void
conv_api_delete(uint64_t id, const struct store_user *u, const char *conv)
{
	struct conv_meta	 cv;
	struct json_object	*r;
	int			 ok;

	if (conv_for(id, u, conv, 0, &cv) == -1)
		return;
	/* First: what a running turn of it still writes is erased too. */
	chat_forget_conversation(cv.cv_id);
	if (store_begin("conv_delete") == -1) {
		api_error(id, 500, "storage", "nothing was erased");
		return;
	}
	ok = conv_erase(cv.cv_id) == 0 && audit_access(u, &cv, "erase") == 0;
	if (store_end("conv_delete", ok) == -1 || !ok) {
		api_error(id, 500, "storage", "nothing was erased");
		return;
	}
	log_info("conversation %s of %s erased by %s", cv.cv_id, cv.cv_user,
	    u->su_name);
	r = json_object_new_object();
	json_object_object_add(r, "id", json_object_new_string(cv.cv_id));
	json_object_object_add(r, "erased", json_object_new_boolean(1));
	api_reply(id, 200, r);
}

/* GET /api/v1/conversations/ID/export?format=json|md */
void
conv_api_export(uint64_t id, const struct store_user *u, const char *conv,
    const char *query)
{
	struct conv_meta	 cv;
	struct evkeyvalq	 q;
	struct json_object	*doc, *r;
	const char		*format;
	char			*md;

	if (conv_for(id, u, conv, 0, &cv) == -1 ||
	    parse_query(id, query, &q) == -1)
		return;
	if ((format = evhttp_find_header(&q, "format")) == NULL)
		format = "json";
	if (strcmp(format, "json") != 0 && strcmp(format, "md") != 0)
		api_error(id, 422, "invalid_field", "\"format\": json or md");
	else if (!owns(u, &cv) &&
	    audit_access(u, &cv, "export") == -1)
		api_error(id, 503, "audit", "the access could not be recorded; "
		    "nothing was exported");
	else {
		doc = conv_document(&cv, 0);
		r = json_object_new_object();
		json_object_object_add(r, "format", json_object_new_string(
		    format));
		if (strcmp(format, "md") == 0) {
			md = conv_markdown(doc);
			json_object_object_add(r, "content",
			    json_object_new_string(md));
			free(md);
			json_object_put(doc);
		} else
			json_object_object_add(r, "conversation", doc);
		api_reply(id, 200, r);
	}
	evhttp_clear_headers(&q);
}

/* ---- mcpbrokerctl tenant del ---- */

/*
 * A tenant and everything of it: users (and their web sessions, by the
 * foreign key), conversations, usage detail and aggregates, budget marks.
 * One transaction with its audit row.  Its chat sessions end before it.
 */
void
conv_admin_tenant_del(uint64_t id, struct json_object *o)
{
	struct json_object	*d, *r;
	const char		*name;
	int64_t			 users = 0, convs = 0, days = 0;
	int			 ok, any;

	if (json_get_str(o, "name", 64, 0, &name) == -1 || *name == '\0') {
		admin_error(id, "tenant del needs a tenant name");
		return;
	}
	/* Sessions end first, so that nothing they write outlives this. */
	chat_forget_tenant(name);
	if (store_begin("tenant_del") == -1) {
		admin_error(id, "database: cannot begin; nothing changed");
		return;
	}
	ok = conv_erase_tenant(name, &convs) == 0 &&
	    usage_erase_tenant(name, &days) == 0 &&
	    store_tenant_del(name, &users) == 0;
	/* Nothing to erase: a typo, most likely; nothing is recorded. */
	any = users + convs + days > 0;
	if (ok && any) {
		d = json_object_new_object();
		json_object_object_add(d, "op", json_object_new_string(
		    "tenant_del"));
		json_object_object_add(d, "name", json_object_new_string(name));
		json_object_object_add(d, "users", json_object_new_int64(users));
		json_object_object_add(d, "conversations",
		    json_object_new_int64(convs));
		ok = audit_append(AUDIT_KIND_ADMIN, NULL, NULL, d) != -1;
		json_object_put(d);
	}
	if (store_end("tenant_del", ok && any) == -1 || !ok) {
		admin_error(id, "database: nothing changed");
		return;
	}
	if (!any) {
		admin_error(id, "no tenant of that name has users, "
		    "conversations or usage");
		return;
	}
	log_info("admin: tenant %s deleted (%lld users, %lld conversations)",
	    name, (long long)users, (long long)convs);
	r = json_object_new_object();
	json_object_object_add(r, "ok", json_object_new_boolean(1));
	json_object_object_add(r, "users", json_object_new_int64(users));
	json_object_object_add(r, "conversations", json_object_new_int64(
	    convs));
	admin_reply(id, r);
}
