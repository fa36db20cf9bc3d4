/*
 * Conversations and their messages in the controller's database.
 *
 * The chat loop writes each message as it joins a session's history, so
 * the stored conversation is the history, minus what the model was given
 * of tool results: those are kept as a summary (tool, status, size) unless
 * the configuration says `store-tool-results yes`.  A summary is still a
 * valid tool result, so a resumed conversation is one any provider takes.
 * The HTTP side is controller_conv_api.c.
 */
#include <sys/random.h>

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <json-c/json.h>
#include <sqlite3.h>

#include "broker/chat.h"
#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_conv.h"
#include "broker/controller_store.h"
#include "broker/controller_usage.h"
#include "broker/providers/provider.h"
#include "common/log.h"
#include "common/util.h"

#define RETENTION_EVERY_SEC	(24 * 3600)
#define CANCELLED_RESULT	"the call was cancelled"

static struct event	*retention_timer;
static struct event	*retention_more;	/* the rest of a backlog */
#define PURGE_BATCH	1000

/* ---- helpers ---- */

static int64_t
now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
column_copy(sqlite3_stmt *st, int col, char *dst, size_t len)
{
	const unsigned char *s = sqlite3_column_text(st, col);

	snprintf(dst, len, "%s", s != NULL ? (const char *)s : "");
}

static char *
column_dup(sqlite3_stmt *st, int col)
{
	const unsigned char	*s = sqlite3_column_text(st, col);
	char			*d;

	if (s == NULL)
		return NULL;
	if ((d = strdup((const char *)s)) == NULL)
		fatal("strdup");
	return d;
}

static char *
xstrdup(const char *s)
{
	char	*d;

	if (s == NULL)
		return NULL;
	if ((d = strdup(s)) == NULL)
		fatal("strdup");
	return d;
}

static const char *
role_name(enum chat_role r)
{
	switch (r) {
	case ROLE_USER:
		return "user";
	case ROLE_ASSISTANT:
		return "assistant";
	case ROLE_TOOL:
		return "tool";
	default:
		return "system";
	}
}

static enum chat_role
role_of(const char *s)
{
	if (strcmp(s, "user") == 0)
		return ROLE_USER;
	if (strcmp(s, "assistant") == 0)
		return ROLE_ASSISTANT;
	if (strcmp(s, "tool") == 0)
		return ROLE_TOOL;
	return ROLE_SYSTEM;
}

/* ---- ids and titles ---- */

void
conv_id_new(char id[CONV_ID_LEN + 1])
{
	unsigned char	raw[CONV_ID_LEN / 2];
	size_t		i;

	arc4random_buf(raw, sizeof(raw));
	for (i = 0; i < sizeof(raw); i++)
		snprintf(id + 2 * i, 3, "%02x", raw[i]);
}

int
conv_id_valid(const char *s)
{
	size_t	i;

	for (i = 0; s[i] != '\0'; i++)
		if (!isdigit((unsigned char)s[i]) && (s[i] < 'a' || s[i] > 'f'))
			return 0;
	return i == CONV_ID_LEN;
}

/*
 * The first user message as a title: one line, whitespace runs and
 * control characters made single spaces, at most CONV_TITLE_AUTO bytes
 * cut on a character boundary, "…" when cut.
 */
void
conv_title(const char *text, char *out, size_t outlen)
{
	const unsigned char	*p = (const unsigned char *)text;
	size_t			 n = 0, max = CONV_TITLE_AUTO;
	int			 space = 0, cut = 0;

	if (outlen < max + 4)
		max = outlen > 4 ? outlen - 4 : 0;
	for (; *p != '\0'; p++) {
		if (*p < 0x20 || *p == 0x7f || *p == ' ') {
			space = n > 0;
			continue;
		}
		if (n + space + 1 > max) {
			cut = 1;
			break;
		}
		if (space)
			out[n++] = ' ';
		space = 0;
		out[n++] = (char)*p;
	}
	/* Cut inside a character: drop the part of it already copied. */
	if (cut && (*p & 0xc0) == 0x80) {
		while (n > 0 && ((unsigned char)out[n - 1] & 0xc0) == 0x80)
			n--;
		if (n > 0)
			n--;
	}
	while (cut && n > 0 && out[n - 1] == ' ')
		n--;
	out[n] = '\0';
	if (cut && outlen >= n + 4)
		memcpy(out + n, "\xe2\x80\xa6", 4);		/* … */
}

char *
conv_like_pattern(const char *text)
{
	char	*out, *o;

	if ((out = malloc(2 * strlen(text) + 3)) == NULL)
		fatal("malloc");
	o = out;
	*o++ = '%';
	for (; *text != '\0'; text++) {
		if (*text == '\\' || *text == '%' || *text == '_')
			*o++ = '\\';
		*o++ = *text;
	}
	*o++ = '%';
	*o = '\0';
	return out;
}

/* ---- conversations ---- */

void
conv_meta_from_row(struct sqlite3_stmt *st, struct conv_meta *cv)
{
	memset(cv, 0, sizeof(*cv));
	column_copy(st, 0, cv->cv_id, sizeof(cv->cv_id));
	column_copy(st, 1, cv->cv_user, sizeof(cv->cv_user));
	column_copy(st, 2, cv->cv_tenant, sizeof(cv->cv_tenant));
	column_copy(st, 3, cv->cv_provider, sizeof(cv->cv_provider));
	column_copy(st, 4, cv->cv_model, sizeof(cv->cv_model));
	column_copy(st, 5, cv->cv_toolset, sizeof(cv->cv_toolset));
	column_copy(st, 6, cv->cv_title, sizeof(cv->cv_title));
	cv->cv_created = sqlite3_column_int64(st, 7);
	cv->cv_updated = sqlite3_column_int64(st, 8);
}

/*
 * The history is a copy (a chat goes on without it): its writes wait for
 * the next fsync instead of each making one (store_begin_lazy).
 */
static int
history_write(const char *sp, sqlite3_stmt *st)
{
	int rc;

	if (store_begin_lazy(sp) == -1) {
		sqlite3_finalize(st);
		return -1;
	}
	rc = store_step_done(st);
	return store_end(sp, rc == 0) == 0 && rc == 0 ? 0 : -1;
}

int
conv_create(struct conv_meta *cv)
{
	sqlite3_stmt	*st;

	cv->cv_created = cv->cv_updated = now_ms();
	if ((st = store_prepare("INSERT INTO conversations (id, user, tenant, "
	    "title, provider, model, toolset, created, updated) VALUES (?, ?, "
	    "?, ?, ?, ?, ?, ?, ?)")) == NULL)
		return -1;
	store_bind_str(st, 1, cv->cv_id);
	store_bind_str(st, 2, cv->cv_user);
	store_bind_str(st, 3, cv->cv_tenant);
	store_bind_str(st, 4, cv->cv_title);
	store_bind_str(st, 5, cv->cv_provider);
	store_bind_str(st, 6, cv->cv_model);
	store_bind_str(st, 7, cv->cv_toolset);
	sqlite3_bind_int64(st, 8, cv->cv_created);
	sqlite3_bind_int64(st, 9, cv->cv_updated);
	return history_write("conv_create", st);
}

int
conv_get(const char *id, struct conv_meta *cv)
{
	sqlite3_stmt	*st;
	int		 found;

	if ((st = store_prepare("SELECT id, user, tenant, provider, model, toolset, "
	    "title, created, updated FROM conversations WHERE id = ?")) ==
	    NULL)
		return -1;
	store_bind_str(st, 1, id);
	if ((found = sqlite3_step(st) == SQLITE_ROW))
		conv_meta_from_row(st, cv);
	sqlite3_finalize(st);
	return found ? 0 : -1;
}

int
conv_resume(const char *id, const char *provider, const char *model,
    const char *toolset)
{
	sqlite3_stmt	*st;

	if ((st = store_prepare("UPDATE conversations SET provider = ?, model = ?, "
	    "toolset = ? WHERE id = ?")) == NULL)
		return -1;
	store_bind_str(st, 1, provider);
	store_bind_str(st, 2, model);
	store_bind_str(st, 3, toolset);
	store_bind_str(st, 4, id);
	return history_write("conv_resume", st);
}

/* [{id, name, arguments}]: arguments as the model wrote them. */
static char *
calls_text(const struct chat_message *m)
{
	struct json_object	*arr = json_object_new_array(), *c;
	char			*text;
	size_t			 i;

	for (i = 0; i < m->cm_ncalls; i++) {
		c = json_object_new_object();
		json_object_object_add(c, "id", json_object_new_string(
		    m->cm_calls[i].tc_id != NULL ? m->cm_calls[i].tc_id : ""));
		json_object_object_add(c, "name", json_object_new_string(
		    m->cm_calls[i].tc_name != NULL ? m->cm_calls[i].tc_name :
		    ""));
		json_object_object_add(c, "arguments", json_object_new_string(
		    m->cm_calls[i].tc_arguments != NULL ?
		    m->cm_calls[i].tc_arguments : "{}"));
		json_object_array_add(arr, c);
	}
	text = xstrdup(json_object_to_json_string_ext(arr,
	    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(arr);
	return text;
}

static int
message_insert(const char *id, const struct chat_message *m,
    const char *content, const char *calls, int64_t ts)
{
	sqlite3_stmt	*st;

	if ((st = store_prepare("INSERT INTO messages (conversation, seq, ts, role, "
	    "content, tool_calls, call_id, call_name, is_error) SELECT ?1, "
	    "COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7, ?8 FROM "
	    "messages WHERE conversation = ?1")) == NULL)
		return -1;
	store_bind_str(st, 1, id);
	sqlite3_bind_int64(st, 2, ts);
	store_bind_str(st, 3, role_name(m->cm_role));
	store_bind_str(st, 4, content);
	store_bind_str(st, 5, calls);
	store_bind_str(st, 6, m->cm_call_id);
	store_bind_str(st, 7, m->cm_call_name);
	sqlite3_bind_int(st, 8, m->cm_is_error != 0);
	return store_step_done(st);
}

/* The conversation moves to the top; its first user message names it. */
static int
conversation_touch(const char *id, const struct chat_message *m, int64_t ts)
{
	sqlite3_stmt	*st;
	char		 title[CONV_TITLE_AUTO + 4];

	title[0] = '\0';
	if (m->cm_role == ROLE_USER && m->cm_content != NULL)
		conv_title(m->cm_content, title, sizeof(title));
	if ((st = store_prepare("UPDATE conversations SET updated = ?1, title = "
	    "CASE WHEN title = '' THEN ?2 ELSE title END WHERE id = ?3")) ==
	    NULL)
		return -1;
	sqlite3_bind_int64(st, 1, ts);
	store_bind_str(st, 2, title);
	store_bind_str(st, 3, id);
	if (store_step_done(st) == -1)
		return -1;
	return sqlite3_changes(store_db()) == 1 ? 0 : -1;
}

int
conv_append(const char *id, const struct chat_message *m, int whole)
{
	const char	*content = m->cm_content;
	char		 summary[256], *calls = NULL;
	int64_t		 ts = now_ms();
	int		 ok;

	if (m->cm_role == ROLE_TOOL && !whole) {
		snprintf(summary, sizeof(summary), "tool %.128s: %s, %zu bytes",
		    m->cm_call_name != NULL ? m->cm_call_name : "?",
		    m->cm_is_error ? "error" : "ok", content != NULL ?
		    strlen(content) : 0);
		content = summary;
	}
	if (m->cm_ncalls > 0)
		calls = calls_text(m);
	if (store_begin_lazy("conv_append") == -1) {
		free(calls);
		return -1;
	}
	ok = conversation_touch(id, m, ts) == 0 &&
	    message_insert(id, m, content, calls, ts) == 0;
	free(calls);
	if (store_end("conv_append", ok) == -1 || !ok) {
		log_warnx("conversation %s: a message was not stored", id);
		return -1;
	}
	return 0;
}

/* ---- loading a conversation back into a session ---- */

struct msgvec {
	struct chat_message	*mv_m;
	size_t			 mv_n;
};

static struct chat_message *
msgvec_add(struct msgvec *v)
{
	struct chat_message *m;

	v->mv_m = reallocarray(v->mv_m, v->mv_n + 1, sizeof(*v->mv_m));
	if (v->mv_m == NULL)
		fatal("reallocarray");
	m = &v->mv_m[v->mv_n++];
	memset(m, 0, sizeof(*m));
	return m;
}

void
conv_messages_free(struct chat_message *msgs, size_t n)
{
	size_t	i, j;

	for (i = 0; i < n; i++) {
		free(msgs[i].cm_content);
		for (j = 0; j < msgs[i].cm_ncalls; j++) {
			free(msgs[i].cm_calls[j].tc_id);
			free(msgs[i].cm_calls[j].tc_name);
			free(msgs[i].cm_calls[j].tc_arguments);
		}
		free(msgs[i].cm_calls);
		free(msgs[i].cm_call_id);
		free(msgs[i].cm_call_name);
	}
	free(msgs);
}

static const char *
json_str(struct json_object *o, const char *key)
{
	struct json_object	*v;

	return json_object_object_get_ex(o, key, &v) &&
	    json_object_is_type(v, json_type_string) ?
	    json_object_get_string(v) : "";
}

static void
calls_parse(struct chat_message *m, const char *text)
{
	struct json_object	*arr, *c;
	size_t			 i, n;

	if (text == NULL || (arr = json_tokener_parse(text)) == NULL)
		return;
	if (json_object_is_type(arr, json_type_array) &&
	    (n = json_object_array_length(arr)) > 0) {
		if ((m->cm_calls = calloc(n, sizeof(*m->cm_calls))) == NULL)
			fatal("calloc");
		for (i = 0; i < n; i++) {
			c = json_object_array_get_idx(arr, i);
			m->cm_calls[i].tc_id = xstrdup(json_str(c, "id"));
			m->cm_calls[i].tc_name = xstrdup(json_str(c, "name"));
			m->cm_calls[i].tc_arguments = xstrdup(json_str(c,
			    "arguments"));
		}
		m->cm_ncalls = n;
	}
	json_object_put(arr);
}

#define ANSWERED_MAX	64	/* a round has at most 16 calls */

static size_t
call_index(const struct chat_message *a, const char *call_id)
{
	size_t	i;

	for (i = 0; call_id != NULL && i < a->cm_ncalls; i++)
		if (a->cm_calls[i].tc_id != NULL &&
		    strcmp(a->cm_calls[i].tc_id, call_id) == 0)
			return i;
	return SIZE_MAX;
}

/* A result for each call of message `at` that the rows did not answer. */
static void
answer_open_calls(struct msgvec *v, size_t at, const int *answered)
{
	struct chat_message	*r;
	size_t			 i, n = v->mv_m[at].cm_ncalls;

	for (i = 0; i < n; i++) {
		if (i < ANSWERED_MAX && answered[i])
			continue;
		r = msgvec_add(v);	/* moves v->mv_m: index, not pointer */
		r->cm_role = ROLE_TOOL;
		r->cm_content = xstrdup(CANCELLED_RESULT);
		r->cm_call_id = xstrdup(v->mv_m[at].cm_calls[i].tc_id);
		r->cm_call_name = xstrdup(v->mv_m[at].cm_calls[i].tc_name);
		r->cm_is_error = 1;
	}
}

static void
message_from_row(sqlite3_stmt *st, struct chat_message *m, enum chat_role r)
{
	m->cm_role = r;
	m->cm_content = column_dup(st, 1);
	m->cm_call_id = column_dup(st, 3);
	m->cm_call_name = column_dup(st, 4);
	m->cm_is_error = sqlite3_column_int(st, 5);
	if (r == ROLE_ASSISTANT)
		calls_parse(m, (const char *)sqlite3_column_text(st, 2));
}

/*
 * The rows, from the first user message on, as a history a provider
 * takes: a tool result answers a call of the assistant message before
 * it, or it is left out; a call without a result gets one.
 */
static void
history_from_rows(sqlite3_stmt *st, struct msgvec *v)
{
	enum chat_role	 r;
	size_t		 open_at = 0, i;
	int		 answered[ANSWERED_MAX], open = 0, started = 0;

	while (sqlite3_step(st) == SQLITE_ROW) {
		r = role_of((const char *)sqlite3_column_text(st, 0));
		if ((!started && r != ROLE_USER) || r == ROLE_SYSTEM)
			continue;
		started = 1;
		if (r == ROLE_TOOL) {
			i = open ? call_index(&v->mv_m[open_at], (const char *)
			    sqlite3_column_text(st, 3)) : SIZE_MAX;
			if (i >= ANSWERED_MAX || answered[i])
				continue;	/* answers nothing: left out */
			answered[i] = 1;
		} else if (open) {
			answer_open_calls(v, open_at, answered);
			open = 0;
		}
		message_from_row(st, msgvec_add(v), r);
		if (r == ROLE_ASSISTANT && v->mv_m[v->mv_n - 1].cm_ncalls > 0) {
			open = 1;
			open_at = v->mv_n - 1;
			memset(answered, 0, sizeof(answered));
		}
	}
	if (open)
		answer_open_calls(v, open_at, answered);
}

int
conv_load(const char *id, unsigned int max, struct chat_message **msgs,
    size_t *n)
{
	struct msgvec	 v = { NULL, 0 };
	sqlite3_stmt	*st;

	*msgs = NULL;
	*n = 0;
	if ((st = store_prepare("SELECT role, content, tool_calls, call_id, "
	    "call_name, is_error FROM (SELECT * FROM messages WHERE "
	    "conversation = ? ORDER BY seq DESC LIMIT ?) ORDER BY seq")) ==
	    NULL)
		return -1;
	store_bind_str(st, 1, id);
	sqlite3_bind_int(st, 2, (int)max);
	history_from_rows(st, &v);
	sqlite3_finalize(st);
	*msgs = v.mv_m;
	*n = v.mv_n;
	return 0;
}

/* ---- erasure and retention ---- */

/* Messages, usage detail, the row: no statement is left to chance. */
static int
erase_rows(const char *id)
{
	return store_exec_one("DELETE FROM messages WHERE conversation = ?", id) ==
	    0 && usage_erase_conversation(id) == 0 &&
	    store_exec_one("DELETE FROM conversations WHERE id = ?", id) == 0 ? 0 :
	    -1;
}

int
conv_erase(const char *id)
{
	int	ok;

	if (store_begin("conv_erase") == -1)
		return -1;
	ok = erase_rows(id) == 0;
	return store_end("conv_erase", ok) == 0 && ok ? 0 : -1;
}

/*
 * Every conversation of a user (a name within the tenant), or of the
 * whole tenant (user NULL), erased.
 */
static int
erase_where(const char *user, const char *tenant, int64_t *n)
{
	const char	*who = user != NULL ? "user = ?1 AND tenant = ?2" :
			    "tenant = ?2";
	char		 sql[160];
	int		 ok;

	*n = 0;
	snprintf(sql, sizeof(sql), "DELETE FROM messages WHERE conversation "
	    "IN (SELECT id FROM conversations WHERE %s)", who);
	if (store_begin("conv_erase_where") == -1)
		return -1;
	ok = store_exec_two(sql, user, tenant) == 0;
	snprintf(sql, sizeof(sql), "DELETE FROM usage WHERE conversation IN "
	    "(SELECT id FROM conversations WHERE %s)", who);
	ok = ok && store_exec_two(sql, user, tenant) == 0;
	snprintf(sql, sizeof(sql), "DELETE FROM conversations WHERE %s", who);
	ok = ok && store_exec_two(sql, user, tenant) == 0;
	if (ok)
		*n = sqlite3_changes(store_db());
	return store_end("conv_erase_where", ok) == 0 && ok ? 0 : -1;
}

int
conv_erase_user(const char *user, const char *tenant, int64_t *n)
{
	return erase_where(user, tenant, n);
}

int
conv_erase_tenant(const char *tenant, int64_t *n)
{
	return erase_where(NULL, tenant, n);
}

/* The shortest retention anywhere: nothing younger can be due. */
static uint64_t
retention_min(const struct mcpbroker_conf *conf)
{
	const struct retention_conf	*rt;
	uint64_t			 min = conf->c_retention_ms;

	TAILQ_FOREACH(rt, &conf->c_retentions, rt_entry)
		if (rt->rt_ms != 0 && (min == 0 || rt->rt_ms < min))
			min = rt->rt_ms;
	return min;
}

struct idvec {
	char	(*iv_id)[CONV_ID_LEN + 1];
	size_t	  iv_n;
};

/* Conversations whose tenant's retention is over: max, and *more. */
static int
purge_due(const struct mcpbroker_conf *conf, int64_t now, size_t max,
    struct idvec *v, int *more)
{
	sqlite3_stmt	*st;
	uint64_t	 min = retention_min(conf), keep;
	const char	*tenant;
	int		 rc;

	if (min == 0)
		return 0;
	if ((st = store_prepare("SELECT id, tenant, updated FROM conversations "
	    "WHERE updated < ?")) == NULL)
		return -1;
	sqlite3_bind_int64(st, 1, now - (int64_t)min);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		tenant = (const char *)sqlite3_column_text(st, 1);
		keep = config_retention(conf, tenant != NULL ? tenant : "");
		if (keep == 0 || sqlite3_column_int64(st, 2) >= now -
		    (int64_t)keep)
			continue;
		if (v->iv_n == max) {
			*more = 1;
			break;
		}
		v->iv_id = reallocarray(v->iv_id, v->iv_n + 1,
		    sizeof(*v->iv_id));
		if (v->iv_id == NULL)
			fatal("reallocarray");
		column_copy(st, 0, v->iv_id[v->iv_n++], CONV_ID_LEN + 1);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE || *more ? 0 : -1;
}

int
conv_purge(const struct mcpbroker_conf *conf, time_t now, size_t max,
    int64_t *n, int *more)
{
	struct idvec	v = { NULL, 0 };
	size_t		i;
	int		ok;

	*n = 0;
	*more = 0;
	if (purge_due(conf, (int64_t)now * 1000, max, &v, more) == -1) {
		free(v.iv_id);
		return -1;
	}
	if (v.iv_n == 0)
		return 0;
	/* Sessions first: a turn that ends writes its last rows now. */
	for (i = 0; i < v.iv_n; i++)
		chat_forget_conversation(v.iv_id[i]);
	if (store_begin("conv_purge") == -1) {
		free(v.iv_id);
		return -1;
	}
	for (ok = 1, i = 0; ok && i < v.iv_n; i++)
		ok = erase_rows(v.iv_id[i]) == 0;
	if (store_end("conv_purge", ok) == -1 || !ok) {
		free(v.iv_id);
		return -1;
	}
	*n = (int64_t)v.iv_n;
	free(v.iv_id);
	return 0;
}

/*
 * PURGE_BATCH conversations a pass of the loop, each batch its own
 * transaction and audit row: a backlog (retention set on a large
 * database) is erased in turns with everything else, not in one
 * transaction that holds every chat up.
 */
void
conv_retention_run(void)
{
	struct json_object	*d;
	struct timeval		 now = { 0, 0 };
	int64_t			 n;
	int			 more;

	usage_prune_alerts(time(NULL));
	if (conv_purge(controller_conf(), time(NULL), PURGE_BATCH, &n,
	    &more) == -1) {
		log_warnx("retention: the purge failed; trying again "
		    "tomorrow");
		return;
	}
	if (more)
		evtimer_add(retention_more, &now);
	if (n == 0)
		return;
	log_info("retention: %lld conversation(s) erased", (long long)n);
	d = json_object_new_object();
	json_object_object_add(d, "event", json_object_new_string(
	    "retention_purge"));
	json_object_object_add(d, "conversations", json_object_new_int64(n));
	if (audit_append(AUDIT_KIND_SYSTEM, NULL, NULL, d) == -1)
		log_warnx("audit: retention_purge not recorded");
	json_object_put(d);
}

static void
retention_tick(int fd, short ev, void *arg)
{
	(void)fd;
	(void)ev;
	(void)arg;
	conv_retention_run();
}

void
conv_retention_start(struct event_base *base)
{
	struct timeval	tv = { RETENTION_EVERY_SEC, 0 };

	if (retention_timer == NULL && ((retention_timer = event_new(base, -1,
	    EV_PERSIST, retention_tick, NULL)) == NULL ||
	    (retention_more = evtimer_new(base, retention_tick, NULL)) == NULL))
		fatalx("event_new");
	evtimer_add(retention_timer, &tv);
	conv_retention_run();
}
