/*
 * Tool-definition pins on the controller's database (table tool_pins).
 *
 * A tool is what its server says it is: a model reads its description and
 * schema and acts on them.  A server trusted today can change both
 * tomorrow (new text that tells the model to send files elsewhere), and
 * nothing on the wire says so.  So the first definition seen of each tool
 * is pinned by the SHA-256 of a canonical form of it; a later list that
 * differs leaves the new definition pending until an administrator
 * approves it, and with pin-policy block (the default) the tool is
 * withheld from every list and call until then.  The controller asks
 * pins_check on every list a worker reports and keeps the answer in
 * memory; only changes touch the database.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <json-c/json.h>
#include <sqlite3.h>

#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_pins.h"
#include "broker/controller_store.h"
#include "broker/mcpbroker.h"
#include "common/log.h"
#include "common/util.h"

#define PINNED_NAMES_MAX	200	/* tool names in one tools_pinned row */
#define ANSWER_MAX_BYTES	(8u * 1024 * 1024)	/* of definitions */
#define PINS_MAX_ROWS		100000

/* What is pinned of a Tool, in canonical (byte) order. */
static const char *const pinned_members[] = {
	"annotations", "description", "inputSchema", "name", "outputSchema",
	"title", NULL
};

/* ---- the canonical form ---- */

static void	canon_value(FILE *, struct json_object *);

static void
canon_string(FILE *f, const char *s, size_t len)
{
	unsigned char	c;
	size_t		i;

	fputc('"', f);
	for (i = 0; i < len; i++) {
		c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static int
key_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void
canon_object(FILE *f, struct json_object *o)
{
	const char	**keys;
	size_t		  n = 0, i;

	if ((keys = calloc(json_object_object_length(o) + 1,
	    sizeof(*keys))) == NULL)
		fatal("calloc");
	json_object_object_foreach(o, key, val) {
		(void)val;
		keys[n++] = key;
	}
	qsort(keys, n, sizeof(*keys), key_cmp);
	fputc('{', f);
	for (i = 0; i < n; i++) {
		if (i > 0)
			fputc(',', f);
		canon_string(f, keys[i], strlen(keys[i]));
		fputc(':', f);
		canon_value(f, json_object_object_get(o, keys[i]));
	}
	fputc('}', f);
	free(keys);
}

/*
 * Numbers by value, not by how the server wrote them (1.0, 1e0 and 1 are
 * one number), so that a re-encoding on the way is no change.
 */
static void
canon_value(FILE *f, struct json_object *v)
{
	double	d;
	size_t	i;

	switch (json_object_get_type(v)) {
	case json_type_null:
		fputs("null", f);
		break;
	case json_type_boolean:
		fputs(json_object_get_boolean(v) ? "true" : "false", f);
		break;
	case json_type_int:
		fputs(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN),
		    f);
		break;
	case json_type_double:
		d = json_object_get_double(v);
		if (isfinite(d) && fabs(d) < 9007199254740992.0 &&
		    d == (double)(long long)d)
			fprintf(f, "%lld", (long long)d);
		else if (isfinite(d))
			fprintf(f, "%.17g", d);
		else
			fputs("null", f);
		break;
	case json_type_string:
		canon_string(f, json_object_get_string(v),
		    (size_t)json_object_get_string_len(v));
		break;
	case json_type_array:
		fputc('[', f);
		for (i = 0; i < json_object_array_length(v); i++) {
			if (i > 0)
				fputc(',', f);
			canon_value(f, json_object_array_get_idx(v, i));
		}
		fputc(']', f);
		break;
	case json_type_object:
		canon_object(f, v);
		break;
	}
}

static char *
canon_text(struct json_object *v)
{
	char	*text = NULL;
	size_t	 len = 0;
	FILE	*f;

	if ((f = open_memstream(&text, &len)) == NULL)
		fatal("open_memstream");
	canon_value(f, v);
	if (fclose(f) != 0)
		fatal("open_memstream");
	return text;
}

char *
pin_canonical(struct json_object *tool)
{
	struct json_object	*o = json_object_new_object(), *v;
	char			*text;
	size_t			 i;

	for (i = 0; pinned_members[i] != NULL; i++)
		if (json_object_object_get_ex(tool, pinned_members[i], &v))
			json_object_object_add(o, pinned_members[i],
			    json_object_get(v));
	text = canon_text(o);
	json_object_put(o);
	return text;
}

static void
hash_text(const char *text, char hex[PIN_HEX_LEN + 1])
{
	sha256_hex(text, strlen(text), hex);
}

void
pin_hash(struct json_object *tool, char hex[PIN_HEX_LEN + 1])
{
	char *text = pin_canonical(tool);

	hash_text(text, hex);
	free(text);
}

/* Whether a and b (members present or not: has_*) are the same. */
static int
same_member(int has_a, struct json_object *a, int has_b,
    struct json_object *b)
{
	char	*ta, *tb;
	int	 same;

	if (has_a != has_b)
		return 0;
	if (!has_a)
		return 1;
	ta = canon_text(a);
	tb = canon_text(b);
	same = strcmp(ta, tb) == 0;
	free(ta);
	free(tb);
	return same;
}

struct json_object *
pin_changed(const char *old_canon, const char *new_canon)
{
	struct json_object	*a, *b, *va = NULL, *vb = NULL, *out;
	size_t			 i;
	int			 ha, hb;

	a = json_parse_object(old_canon, strlen(old_canon));
	b = json_parse_object(new_canon, strlen(new_canon));
	out = json_object_new_array();
	for (i = 0; pinned_members[i] != NULL; i++) {
		ha = a != NULL && json_object_object_get_ex(a,
		    pinned_members[i], &va);
		hb = b != NULL && json_object_object_get_ex(b,
		    pinned_members[i], &vb);
		if (!same_member(ha, va, hb, vb))
			json_object_array_add(out, json_object_new_string(
			    pinned_members[i]));
	}
	json_object_put(a);
	json_object_put(b);
	return out;
}

/* ---- the database ---- */

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *
col_str(sqlite3_stmt *st, int i)
{
	return (const char *)sqlite3_column_text(st, i);
}

static struct json_object *
col_json(sqlite3_stmt *st, int i)
{
	const char *s = col_str(st, i);

	return s != NULL ? json_object_new_string(s) : NULL;
}

/* The server's pins: {TOOL: [sha256, pending_sha256 or null]}, or NULL. */
static struct json_object *
pins_load(const char *server)
{
	struct json_object	*map, *e;
	sqlite3_stmt		*st;
	int			 rc;

	if ((st = store_prepare("SELECT tool, sha256, pending_sha256 FROM tool_pins "
	    "WHERE server = ?1")) == NULL)
		return NULL;
	store_bind_str(st, 1, server);
	map = json_object_new_object();
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		e = json_object_new_array();
		json_object_array_add(e, col_json(st, 1));
		json_object_array_add(e, col_json(st, 2));
		json_object_object_add(map, col_str(st, 0), e);
	}
	if (rc != SQLITE_DONE) {
		log_warnx("pins: %s", sqlite3_errmsg(store_db()));
		json_object_put(map);
		map = NULL;
	}
	sqlite3_finalize(st);
	return map;
}

/* The pinned (approved) definition of a tool, malloc'd, or NULL. */
static char *
pin_definition(const char *server, const char *tool)
{
	sqlite3_stmt	*st;
	char		*def = NULL;

	if ((st = store_prepare("SELECT definition FROM tool_pins WHERE server = ?1 "
	    "AND tool = ?2")) == NULL)
		return NULL;
	store_bind_str(st, 1, server);
	store_bind_str(st, 2, tool);
	if (sqlite3_step(st) == SQLITE_ROW && col_str(st, 0) != NULL &&
	    (def = strdup(col_str(st, 0))) == NULL)
		fatal("strdup");
	sqlite3_finalize(st);
	return def;
}

/* ---- checking a list ---- */

enum pin_seen {
	SEEN_SAME,	/* the pinned definition */
	SEEN_NEW,	/* no pin yet: pinned now */
	SEEN_BACK,	/* the pinned one again after a change: forget that */
	SEEN_CHANGED,	/* another definition, not seen before */
	SEEN_PENDING,	/* the definition already awaiting approval */
};

struct pin_item {
	const char		*pi_tool;
	enum pin_seen		 pi_seen;
	char			 pi_hash[PIN_HEX_LEN + 1];
	char			 pi_pinned[PIN_HEX_LEN + 1];
	char			*pi_canon;	/* NEW and CHANGED */
	struct json_object	*pi_changed;	/* CHANGED: which members */
};

static void
map_set(struct json_object *map, const char *tool, const char *pinned,
    const char *pending)
{
	struct json_object *e = json_object_new_array();

	json_object_array_add(e, json_object_new_string(pinned));
	json_object_array_add(e, pending != NULL ?
	    json_object_new_string(pending) : NULL);
	json_object_object_add(map, tool, e);
}

/*
 * What this definition is to its pin.  The map is updated as if it were
 * written, so that a tool listed twice is compared with what the first
 * made of it.
 */
static void
classify(struct pin_item *pi, struct json_object *tool,
    struct json_object *map)
{
	struct json_object	*e;
	const char		*pinned, *pending;
	char			*canon;

	pi->pi_tool = json_object_get_string(json_object_object_get(tool,
	    "name"));
	canon = pin_canonical(tool);
	hash_text(canon, pi->pi_hash);
	if (!json_object_object_get_ex(map, pi->pi_tool, &e)) {
		pi->pi_seen = SEEN_NEW;
		pi->pi_canon = canon;
		map_set(map, pi->pi_tool, pi->pi_hash, NULL);
		return;
	}
	pinned = json_object_get_string(json_object_array_get_idx(e, 0));
	pending = json_object_get_string(json_object_array_get_idx(e, 1));
	snprintf(pi->pi_pinned, sizeof(pi->pi_pinned), "%s", pinned);
	if (strcmp(pinned, pi->pi_hash) == 0) {
		pi->pi_seen = pending != NULL ? SEEN_BACK : SEEN_SAME;
		if (pending != NULL)
			map_set(map, pi->pi_tool, pi->pi_pinned, NULL);
	} else if (pending != NULL && strcmp(pending, pi->pi_hash) == 0)
		pi->pi_seen = SEEN_PENDING;
	else {
		pi->pi_seen = SEEN_CHANGED;
		pi->pi_canon = canon;
		map_set(map, pi->pi_tool, pi->pi_pinned, pi->pi_hash);
		return;
	}
	free(canon);
}

/* sql takes server, tool, hash, definition and time as ?1 to ?5. */
static int
pin_write(const char *sql, const char *server, const struct pin_item *pi,
    int64_t now)
{
	sqlite3_stmt *st;

	if ((st = store_prepare(sql)) == NULL)
		return -1;
	store_bind_str(st, 1, server);
	store_bind_str(st, 2, pi->pi_tool);
	store_bind_str(st, 3, pi->pi_hash);
	store_bind_str(st, 4, pi->pi_canon);
	sqlite3_bind_int64(st, 5, now);
	return store_step_done(st);
}

static int
pin_insert(const char *server, const struct pin_item *pi, int64_t now)
{
	return pin_write("INSERT INTO tool_pins (server, tool, sha256, "
	    "definition, first_seen) VALUES (?1, ?2, ?3, ?4, ?5)", server, pi,
	    now);
}

static int
pin_set_pending(const char *server, const struct pin_item *pi, int64_t now)
{
	return pin_write("UPDATE tool_pins SET pending_sha256 = ?3, "
	    "pending_definition = ?4, pending_since = ?5 WHERE server = ?1 "
	    "AND tool = ?2", server, pi, now);
}

static int
pin_clear_pending(const char *server, const char *tool)
{
	sqlite3_stmt *st;

	if ((st = store_prepare("UPDATE tool_pins SET pending_sha256 = NULL, "
	    "pending_definition = NULL, pending_since = NULL WHERE "
	    "server = ?1 AND tool = ?2")) == NULL)
		return -1;
	store_bind_str(st, 1, server);
	store_bind_str(st, 2, tool);
	return store_step_done(st);
}

static struct json_object *
system_row(const char *event, const char *server)
{
	struct json_object *d = json_object_new_object();

	json_object_object_add(d, "event", json_object_new_string(event));
	json_object_object_add(d, "server", json_object_new_string(server));
	return d;
}

static int
audit_system_row(struct json_object *d)
{
	int64_t id = audit_append(AUDIT_KIND_SYSTEM, NULL, NULL, d);

	json_object_put(d);
	return id == -1 ? -1 : 0;
}

/* One row per list that brought new tools, naming (the first 200 of) them. */
static int
audit_pinned(const char *server, struct json_object *names, size_t n)
{
	struct json_object *d = system_row("tools_pinned", server);

	json_object_object_add(d, "count", json_object_new_int64((int64_t)n));
	json_object_object_add(d, "tools", json_object_get(names));
	return audit_system_row(d);
}

static int
changed_record(const char *server, enum pin_policy pp, struct pin_item *pi,
    int64_t now)
{
	struct json_object	*d;
	char			*old;

	if (pin_set_pending(server, pi, now) == -1)
		return -1;
	old = pin_definition(server, pi->pi_tool);
	pi->pi_changed = pin_changed(old != NULL ? old : "{}", pi->pi_canon);
	free(old);
	d = system_row("tool_changed", server);
	json_object_object_add(d, "tool", json_object_new_string(pi->pi_tool));
	json_object_object_add(d, "policy", json_object_new_string(
	    pin_policy_str(pp)));
	json_object_object_add(d, "sha256", json_object_new_string(
	    pi->pi_pinned));
	json_object_object_add(d, "new_sha256", json_object_new_string(
	    pi->pi_hash));
	json_object_object_add(d, "changed", json_object_get(pi->pi_changed));
	return audit_system_row(d);
}

static int
back_record(const char *server, const struct pin_item *pi)
{
	struct json_object *d;

	if (pin_clear_pending(server, pi->pi_tool) == -1)
		return -1;
	d = system_row("tool_reverted", server);
	json_object_object_add(d, "tool", json_object_new_string(pi->pi_tool));
	json_object_object_add(d, "sha256", json_object_new_string(
	    pi->pi_pinned));
	return audit_system_row(d);
}

static int
item_write(const char *server, enum pin_policy pp, struct pin_item *pi,
    int64_t now, struct json_object *names, size_t *nnew)
{
	switch (pi->pi_seen) {
	case SEEN_NEW:
		if ((*nnew)++ < PINNED_NAMES_MAX)
			json_object_array_add(names, json_object_new_string(
			    pi->pi_tool));
		return pin_insert(server, pi, now);
	case SEEN_CHANGED:
		return changed_record(server, pp, pi, now);
	case SEEN_BACK:
		return back_record(server, pi);
	default:
		return 0;
	}
}

/* The list's changes to the pins and their audit rows: one transaction. */
static int
pins_write(const char *server, enum pin_policy pp, struct pin_item *items,
    size_t n)
{
	struct json_object	*names = json_object_new_array();
	int64_t			 now = now_ms();
	size_t			 i, nnew = 0;
	int			 ok = 1;

	if (audit_begin() == -1) {
		json_object_put(names);
		return -1;
	}
	for (i = 0; ok && i < n; i++)
		ok = item_write(server, pp, &items[i], now, names, &nnew) == 0;
	if (ok && nnew > 0)
		ok = audit_pinned(server, names, nnew) == 0;
	json_object_put(names);
	if (audit_end(ok) == -1 || !ok)
		return -1;
	if (nnew > 0)
		log_info("server %s: %zu new tool(s) pinned", server, nnew);
	return 0;
}

/* Said once per new definition, after it is on record. */
static void
log_changes(const char *server, enum pin_policy pp,
    const struct pin_item *items, size_t n)
{
	const char	*what;
	size_t		 i;

	for (i = 0; i < n; i++) {
		if (items[i].pi_seen == SEEN_BACK)
			log_info("server %s: tool %s is back to its pinned "
			    "definition", server, items[i].pi_tool);
		if (items[i].pi_seen != SEEN_CHANGED)
			continue;
		what = json_object_to_json_string_ext(items[i].pi_changed,
		    JSON_C_TO_STRING_PLAIN);
		log_warnx("server %s: tool %s changed its definition %s since "
		    "it was pinned; %s", server, items[i].pi_tool, what,
		    pp == PIN_BLOCK ? "withheld until an administrator "
		    "approves it (mcpbrokerctl tools pending)" :
		    "still offered (pin-policy warn)");
	}
}

static void
withhold(struct json_object **w, const char *tool)
{
	if (*w == NULL)
		*w = json_object_new_object();
	json_object_object_add(*w, tool, json_object_new_boolean(1));
}

/* Pins that cannot be read or written decide nothing: block withholds. */
static struct json_object *
fail_closed(const char *server, enum pin_policy pp, struct json_object *tools,
    const char *what)
{
	struct json_object	*w = NULL;
	size_t			 i;

	log_warnx("server %s: its tool pins %s%s", server, what,
	    pp == PIN_BLOCK ? "; all its tools are withheld" : "");
	if (pp != PIN_BLOCK)
		return NULL;
	for (i = 0; i < json_object_array_length(tools); i++)
		withhold(&w, json_object_get_string(json_object_object_get(
		    json_object_array_get_idx(tools, i), "name")));
	return w;
}

static void
items_free(struct pin_item *items, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(items[i].pi_canon);
		json_object_put(items[i].pi_changed);
	}
	free(items);
}

struct json_object *
pins_check(const char *server, enum pin_policy pp, struct json_object *tools)
{
	struct json_object	*map, *w = NULL;
	struct pin_item		*items;
	size_t			 n, i, writes = 0;

	if (pp == PIN_OFF)
		return NULL;
	if ((map = pins_load(server)) == NULL)
		return fail_closed(server, pp, tools, "cannot be read");
	n = json_object_array_length(tools);
	if ((items = calloc(n + 1, sizeof(*items))) == NULL)
		fatal("calloc");
	for (i = 0; i < n; i++) {
		classify(&items[i], json_object_array_get_idx(tools, i), map);
		if (items[i].pi_seen != SEEN_SAME &&
		    items[i].pi_seen != SEEN_PENDING)
			writes++;
	}
	json_object_put(map);
	if (writes > 0 && pins_write(server, pp, items, n) == -1) {
		items_free(items, n);
		return fail_closed(server, pp, tools, "cannot be written");
	}
	log_changes(server, pp, items, n);
	for (i = 0; pp == PIN_BLOCK && i < n; i++)
		if (items[i].pi_seen == SEEN_CHANGED ||
		    items[i].pi_seen == SEEN_PENDING)
			withhold(&w, items[i].pi_tool);
	items_free(items, n);
	if (w != NULL)
		log_info("server %s: %d tool(s) withheld until an "
		    "administrator approves their new definition", server,
		    json_object_object_length(w));
	return w;
}

/* ---- what an administrator sees ---- */

/* old and new values of the changed members (a side without one: none). */
static void
pending_diff(struct json_object *item, const char *old_canon,
    const char *new_canon)
{
	struct json_object	*changed, *a, *b, *old, *new, *v;
	const char		*m;
	size_t			 i;

	changed = pin_changed(old_canon, new_canon);
	a = json_parse_object(old_canon, strlen(old_canon));
	b = json_parse_object(new_canon, strlen(new_canon));
	old = json_object_new_object();
	new = json_object_new_object();
	for (i = 0; i < json_object_array_length(changed); i++) {
		m = json_object_get_string(json_object_array_get_idx(changed,
		    i));
		if (a != NULL && json_object_object_get_ex(a, m, &v))
			json_object_object_add(old, m, json_object_get(v));
		if (b != NULL && json_object_object_get_ex(b, m, &v))
			json_object_object_add(new, m, json_object_get(v));
	}
	json_object_object_add(item, "changed", changed);
	json_object_object_add(item, "old", old);
	json_object_object_add(item, "new", new);
	json_object_put(a);
	json_object_put(b);
}

/* SELECT server, tool, sha256, definition, pending_sha256, */
/* pending_definition, pending_since: one pending change. */
static struct json_object *
pending_item(sqlite3_stmt *st)
{
	const struct server_conf	*srv;
	struct json_object		*o = json_object_new_object();
	const char			*server = col_str(st, 0);
	const char			*tool = col_str(st, 1);

	json_object_object_add(o, "server", col_json(st, 0));
	json_object_object_add(o, "tool", col_json(st, 1));
	json_object_object_add(o, "sha256", col_json(st, 2));
	json_object_object_add(o, "pending_sha256", col_json(st, 4));
	json_object_object_add(o, "pending_since", json_object_new_int64(
	    sqlite3_column_int64(st, 6)));
	if ((srv = config_find_server(controller_conf(), server)) != NULL)
		json_object_object_add(o, "policy", json_object_new_string(
		    pin_policy_str(srv->srv_pin_policy)));
	json_object_object_add(o, "withheld", json_object_new_boolean(
	    !controller_tool_usable(server, tool)));
	pending_diff(o, col_str(st, 3) != NULL ? col_str(st, 3) : "{}",
	    col_str(st, 5) != NULL ? col_str(st, 5) : "{}");
	return o;
}

/* Every change awaiting approval (of server, or all), within 8 MiB. */
static struct json_object *
pending_list(const char *server, int *truncated)
{
	struct json_object	*arr;
	sqlite3_stmt		*st;
	size_t			 bytes = 0;
	int			 rc;

	*truncated = 0;
	if ((st = store_prepare("SELECT server, tool, sha256, definition, "
	    "pending_sha256, pending_definition, pending_since FROM tool_pins "
	    "WHERE pending_sha256 IS NOT NULL AND (?1 IS NULL OR server = ?1) "
	    "ORDER BY server, tool")) == NULL)
		return NULL;
	store_bind_str(st, 1, server);
	arr = json_object_new_array();
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		bytes += (size_t)sqlite3_column_bytes(st, 3) +
		    (size_t)sqlite3_column_bytes(st, 5);
		if (bytes > ANSWER_MAX_BYTES &&
		    json_object_array_length(arr) > 0) {
			*truncated = 1;
			rc = SQLITE_DONE;
			break;
		}
		json_object_array_add(arr, pending_item(st));
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		json_object_put(arr);
		return NULL;
	}
	return arr;
}

static struct json_object *
pin_item_json(sqlite3_stmt *st)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "server", col_json(st, 0));
	json_object_object_add(o, "tool", col_json(st, 1));
	json_object_object_add(o, "sha256", col_json(st, 2));
	json_object_object_add(o, "first_seen", json_object_new_int64(
	    sqlite3_column_int64(st, 3)));
	if (sqlite3_column_type(st, 4) != SQLITE_NULL)
		json_object_object_add(o, "approved_at", json_object_new_int64(
		    sqlite3_column_int64(st, 4)));
	if (col_str(st, 5) != NULL)
		json_object_object_add(o, "approved_by", col_json(st, 5));
	if (col_str(st, 6) != NULL)
		json_object_object_add(o, "pending_sha256", col_json(st, 6));
	return o;
}

static struct json_object *
pins_list(const char *server, int *truncated)
{
	struct json_object	*arr;
	sqlite3_stmt		*st;
	int			 rc;

	*truncated = 0;
	if ((st = store_prepare("SELECT server, tool, sha256, first_seen, "
	    "approved_at, approved_by, pending_sha256 FROM tool_pins WHERE "
	    "(?1 IS NULL OR server = ?1) ORDER BY server, tool")) == NULL)
		return NULL;
	store_bind_str(st, 1, server);
	arr = json_object_new_array();
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (json_object_array_length(arr) == PINS_MAX_ROWS) {
			*truncated = 1;
			rc = SQLITE_DONE;
			break;
		}
		json_object_array_add(arr, pin_item_json(st));
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		json_object_put(arr);
		return NULL;
	}
	return arr;
}

/* ---- approving ---- */

/* Who approves: an API caller, or the control socket's operator. */
struct approver {
	const char	*ap_user;	/* NULL: the control socket */
	const char	*ap_tenant;
	const char	*ap_by;		/* approved_by: the user, or "uid N" */
};

/* The changes to approve, read in the approving transaction. */
static struct json_object *
to_approve(const char *server, const char *tool)
{
	struct json_object	*arr, *e;
	sqlite3_stmt		*st;
	int			 rc;

	if ((st = store_prepare("SELECT tool, sha256, pending_sha256 FROM tool_pins "
	    "WHERE server = ?1 AND pending_sha256 IS NOT NULL AND "
	    "(?2 IS NULL OR tool = ?2) ORDER BY tool")) == NULL)
		return NULL;
	store_bind_str(st, 1, server);
	store_bind_str(st, 2, tool);
	arr = json_object_new_array();
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		e = json_object_new_object();
		json_object_object_add(e, "tool", col_json(st, 0));
		json_object_object_add(e, "sha256", col_json(st, 1));
		json_object_object_add(e, "pending_sha256", col_json(st, 2));
		json_object_array_add(arr, e);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		json_object_put(arr);
		return NULL;
	}
	return arr;
}

static const char *
field(struct json_object *o, const char *key)
{
	return json_object_get_string(json_object_object_get(o, key));
}

/* The pending definition becomes the pin, and the trail says by whom. */
static int
approve_one(const char *server, struct json_object *e,
    const struct approver *ap, int64_t now)
{
	struct json_object	*d;
	sqlite3_stmt		*st;
	int64_t			 id;

	if ((st = store_prepare("UPDATE tool_pins SET sha256 = pending_sha256, "
	    "definition = pending_definition, approved_at = ?4, "
	    "approved_by = ?5, pending_sha256 = NULL, pending_definition = "
	    "NULL, pending_since = NULL WHERE server = ?1 AND tool = ?2 AND "
	    "pending_sha256 = ?3")) == NULL)
		return -1;
	store_bind_str(st, 1, server);
	store_bind_str(st, 2, field(e, "tool"));
	store_bind_str(st, 3, field(e, "pending_sha256"));
	sqlite3_bind_int64(st, 4, now);
	store_bind_str(st, 5, ap->ap_by);
	if (store_step_done(st) == -1)
		return -1;
	d = json_object_new_object();
	json_object_object_add(d, "op", json_object_new_string(
	    "tool_approve"));
	json_object_object_add(d, "server", json_object_new_string(server));
	json_object_object_add(d, "tool", json_object_new_string(field(e,
	    "tool")));
	json_object_object_add(d, "sha256", json_object_new_string(field(e,
	    "pending_sha256")));
	json_object_object_add(d, "previous_sha256", json_object_new_string(
	    field(e, "sha256")));
	json_object_object_add(d, "by", json_object_new_string(ap->ap_by));
	id = audit_append(AUDIT_KIND_ADMIN, ap->ap_user, ap->ap_tenant, d);
	json_object_put(d);
	return id == -1 ? -1 : 0;
}

/*
 * Approve the pending definition of server's tool (NULL: of all its
 * tools); with expect, only if that is still the pending one, so that an
 * administrator approves what they reviewed and not a later change.
 * Returns an HTTP status (200 with *out the approved [{server, tool,
 * sha256}], 404, 409, 503) and why.
 */
static int
approve(const char *server, const char *tool, const char *expect,
    const struct approver *ap, struct json_object **out, char *why,
    size_t whylen)
{
	struct json_object	*list, *e, *done;
	int64_t			 now = now_ms();
	size_t			 i;
	int			 ok = 1;

	*out = NULL;
	if (audit_begin() == -1) {
		snprintf(why, whylen, "the database cannot be written; "
		    "nothing was approved");
		return 503;
	}
	if ((list = to_approve(server, tool)) == NULL) {
		(void)audit_end(0);
		snprintf(why, whylen, "the database cannot be read; nothing "
		    "was approved");
		return 503;
	}
	if (json_object_array_length(list) == 0) {
		(void)audit_end(0);
		json_object_put(list);
		if (tool != NULL)
			snprintf(why, whylen, "no change of %.64s.%.128s "
			    "awaits approval", server, tool);
		else
			snprintf(why, whylen, "no tool of server %.64s awaits "
			    "approval", server);
		return 404;
	}
	e = json_object_array_get_idx(list, 0);
	if (expect != NULL && strcmp(field(e, "pending_sha256"), expect) != 0) {
		(void)audit_end(0);
		snprintf(why, whylen, "the pending definition of %.64s.%.128s "
		    "is now %s, not %.64s: the server changed it again; review "
		    "it again", server, tool, field(e, "pending_sha256"),
		    expect);
		json_object_put(list);
		return 409;
	}
	done = json_object_new_array();
	for (i = 0; ok && i < json_object_array_length(list); i++) {
		e = json_object_array_get_idx(list, i);
		ok = approve_one(server, e, ap, now) == 0;
		json_object_array_add(done, json_object_new_object());
		e = json_object_array_get_idx(done, i);
		json_object_object_add(e, "server", json_object_new_string(
		    server));
		json_object_object_add(e, "tool", json_object_new_string(
		    field(json_object_array_get_idx(list, i), "tool")));
		json_object_object_add(e, "sha256", json_object_new_string(
		    field(json_object_array_get_idx(list, i),
		    "pending_sha256")));
	}
	json_object_put(list);
	if (audit_end(ok) == -1 || !ok) {
		json_object_put(done);
		snprintf(why, whylen, "the approval cannot be written or "
		    "audited; nothing was approved");
		return 503;
	}
	log_info("server %s: %zu tool definition(s) approved by %s", server,
	    json_object_array_length(done), ap->ap_by);
	/* Withheld tools come back, and clients are told. */
	controller_pins_changed(server);
	*out = done;
	return 200;
}

static int
valid_hex(const char *s)
{
	size_t i;

	if (strlen(s) != PIN_HEX_LEN)
		return 0;
	for (i = 0; i < PIN_HEX_LEN; i++)
		if (strchr("0123456789abcdef", s[i]) == NULL)
			return 0;
	return 1;
}

/* A request names a server and one tool, or all of its tools. */
static const char *
approve_check(const char *server, const char *tool, int all,
    const char *expect)
{
	if (server == NULL)
		return "an approval names a server";
	if ((tool == NULL) == !all)
		return "an approval names one tool, or all of the server's";
	if (expect != NULL && (tool == NULL || !valid_hex(expect)))
		return "sha256 is the 64 lowercase hex digits of one tool's "
		    "pending definition";
	return NULL;
}

/* ---- mcpbrokerctl ---- */

static void
admin_list(uint64_t id, const char *key, struct json_object *arr,
    int truncated)
{
	struct json_object *r;

	if (arr == NULL) {
		admin_error(id, "the database cannot be read");
		return;
	}
	r = json_object_new_object();
	json_object_object_add(r, "ok", json_object_new_boolean(1));
	json_object_object_add(r, key, arr);
	if (truncated)
		json_object_object_add(r, "truncated",
		    json_object_new_boolean(1));
	admin_reply(id, r);
}

static void
admin_approve(uint64_t id, const char *server, const char *tool, int all,
    const char *expect, int64_t uid)
{
	struct approver		 ap;
	struct json_object	*done, *r;
	const char		*bad;
	char			 by[32], why[512];

	if ((bad = approve_check(server, tool, all, expect)) != NULL) {
		admin_error(id, bad);
		return;
	}
	/* The parent says who is at the socket; -1: an older parent. */
	if (uid >= 0)
		snprintf(by, sizeof(by), "uid %lld", (long long)uid);
	else
		snprintf(by, sizeof(by), "control socket");
	ap.ap_user = NULL;
	ap.ap_tenant = NULL;
	ap.ap_by = by;
	if (approve(server, tool, expect, &ap, &done, why, sizeof(why)) !=
	    200) {
		admin_error(id, why);
		return;
	}
	r = json_object_new_object();
	json_object_object_add(r, "ok", json_object_new_boolean(1));
	json_object_object_add(r, "approved", done);
	admin_reply(id, r);
}

void
pins_admin(uint64_t id, const char *op, struct json_object *o)
{
	struct json_object	*arr;
	const char		*server, *tool, *expect;
	int64_t			 uid = -1;
	int			 all = 0, truncated;

	if (json_get_str(o, "server", NAME_MAX_LEN - 1, 1, &server) == -1 ||
	    json_get_str(o, "tool", 128, 1, &tool) == -1 ||
	    json_get_str(o, "sha256", PIN_HEX_LEN, 1, &expect) == -1 ||
	    json_get_bool(o, "all", 1, &all) == -1 ||
	    json_get_int(o, "ctl_uid", 0, UINT32_MAX, 1, &uid) == -1) {
		admin_error(id, "malformed request");
		return;
	}
	if (strcmp(op, "tools_pending") == 0) {
		arr = pending_list(server, &truncated);
		admin_list(id, "pending", arr, truncated);
	} else if (strcmp(op, "tools_pins") == 0) {
		arr = pins_list(server, &truncated);
		admin_list(id, "pins", arr, truncated);
	} else if (strcmp(op, "tools_approve") == 0)
		admin_approve(id, server, tool, all, expect, uid);
	else
		admin_error(id, "unknown op");
}

/* ---- the admin API ---- */

static int
admin_only(uint64_t id, const struct store_user *u)
{
	if (user_has_role(u, "admin"))
		return 1;
	api_error(id, 403, "forbidden", "tool pins are global: they are for "
	    "the admin role");
	return 0;
}

/* ?server=NAME, the only parameter: 0, or -1 answered. */
static int
query_server(uint64_t id, const char *query, char *server, size_t len)
{
	struct evkeyvalq	 q;
	struct evkeyval		*kv;
	int			 rc = 0;

	server[0] = '\0';
	TAILQ_INIT(&q);
	if (query != NULL && evhttp_parse_query_str(query, &q) == -1) {
		api_error(id, 400, "bad_request", "the query string could not "
		    "be parsed");
		return -1;
	}
	TAILQ_FOREACH(kv, &q, next) {
		if (strcmp(kv->key, "server") != 0 ||
		    strlen(kv->value) >= len) {
			api_error(id, 400, "bad_request", "unknown query "
			    "parameter \"%.64s\", or a server name too long",
			    kv->key);
			rc = -1;
			break;
		}
		snprintf(server, len, "%s", kv->value);
	}
	evhttp_clear_headers(&q);
	return rc;
}

static void
api_list(uint64_t id, const struct store_user *u, const char *query,
    int pending)
{
	struct json_object	*arr, *r;
	char			 server[NAME_MAX_LEN];
	int			 truncated;

	if (!admin_only(id, u) || query_server(id, query, server,
	    sizeof(server)) == -1)
		return;
	arr = pending ? pending_list(server[0] ? server : NULL, &truncated) :
	    pins_list(server[0] ? server : NULL, &truncated);
	if (arr == NULL) {
		api_error(id, 503, "unavailable", "the database cannot be "
		    "read");
		return;
	}
	r = json_object_new_object();
	json_object_object_add(r, pending ? "pending" : "pins", arr);
	json_object_object_add(r, "truncated", json_object_new_boolean(
	    truncated));
	api_reply(id, 200, r);
}

void
pins_api_pending(uint64_t id, const struct store_user *u, const char *query)
{
	api_list(id, u, query, 1);
}

void
pins_api_pins(uint64_t id, const struct store_user *u, const char *query)
{
	api_list(id, u, query, 0);
}

void
pins_api_approve(uint64_t id, const struct store_user *u,
    struct json_object *body)
{
	struct approver		 ap;
	struct json_object	*done, *r;
	const char		*server = NULL, *tool = NULL, *expect = NULL;
	const char		*bad = NULL;
	char			 why[512];
	int			 all = 0, status;

	if (!admin_only(id, u))
		return;
	if (body == NULL ||
	    json_get_str(body, "server", NAME_MAX_LEN - 1, 0, &server) == -1 ||
	    json_get_str(body, "tool", 128, 1, &tool) == -1 ||
	    json_get_str(body, "sha256", PIN_HEX_LEN, 1, &expect) == -1 ||
	    json_get_bool(body, "all", 1, &all) == -1)
		bad = "server (a string), and tool (a string) or all (true); "
		    "sha256 optional";
	else
		bad = approve_check(server, tool, all, expect);
	if (bad != NULL) {
		api_error(id, 422, "invalid_field", "%s", bad);
		return;
	}
	ap.ap_user = u->su_name;
	ap.ap_tenant = u->su_tenant;
	ap.ap_by = u->su_name;
	status = approve(server, tool, expect, &ap, &done, why, sizeof(why));
	if (status != 200) {
		api_error(id, status, status == 404 ? "not_found" :
		    status == 409 ? "changed_again" : "unavailable", "%s", why);
		return;
	}
	r = json_object_new_object();
	json_object_object_add(r, "approved", done);
	api_reply(id, 200, r);
}
