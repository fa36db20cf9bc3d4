/*
 * Policy rules: evaluation (first match wins, no match = deny), argument
 * conditions, rate limits and `policy explain`.  The config parser
 * (broker/parse.c) builds the rules.
 *
 * Tool globs.  Ids are "SERVER.TOOL"; server names have no dots, tool names
 * may (MCP allows them), so an id splits at its first dot.  A glob with a
 * dot splits the same way and each half matches its half of the id: `*`
 * never crosses the dot between server and tool, so "files.*" matches
 * "files.read_file" but not "filesystem.read_file", and "*.read_file" does
 * not match "a.b.read_file".  A glob without a dot ("*", "*write*") is
 * matched against the whole id, dots included: "*" matches every tool.
 * (So "files*" matches "filesystem.x" too; write "files.*".)  `*` matches
 * any run of bytes, `?` exactly one byte; nothing else is special; case
 * matters.  `matches` conditions use the same glob over the whole value.
 * Resource and prompt rules glob the same way over "SERVER.URI" (the URI
 * as the server gives it) and "SERVER.PROMPT"; a rule answers only
 * questions about its own kind, so a tool "*" rule says nothing of
 * resources.
 *
 * Argument conditions look at top-level arguments only.  The argument must
 * be present; prefix, equals and matches need a string without NUL bytes;
 * max-length takes any JSON (a string's length in bytes, else the length
 * of its compact serialisation).  A condition holds, fails, or cannot be
 * checked: arguments that are not an object, a value of another type, a
 * NUL, or a path that cannot be compared (below).  Allow rules need every
 * condition to hold; deny and confirm rules also apply when one cannot be
 * checked.
 *
 * prefix compares normalised paths component by component.  Both the
 * argument and the configured prefix are normalised lexically: duplicate
 * slashes collapse, "." goes, ".." removes the previous component.  A ".."
 * with nothing left to remove (above "/" or above the start of a relative
 * path), a NUL, or a path longer than POLICY_PATH_MAX cannot be checked.
 * The argument matches when it is the prefix's directory itself or lies
 * beneath it, so "/srv/share/public2" never matches prefix
 * "/srv/share/public"; a trailing slash on the prefix changes nothing.
 * An absolute argument against a relative prefix, or the reverse, cannot be
 * checked (a relative prefix is under the server's directory, which the
 * broker does not know), nor can anything against a prefix that
 * normalises to nothing ("", ".") or not at all ("/../a").  Nothing is
 * decoded: "%2e%2e" and "\" are ordinary characters, "~" is not expanded;
 * symbolic links are the server's business (isolation, not policy).
 *
 * Rate limits count per rule and per user, a name within its tenant (the
 * same counter for every caller without either), in a fixed window that
 * opens at the first call counted: `rate 30/minute` allows 30 calls, then
 * denies until a minute after the first; the next call opens a new
 * window.  So up to twice the rate may pass around a window's end.  Only allow and confirm rules count
 * (a confirm call counts when decided, whatever the human then says).  At
 * most POLICY_RATE_MAX_PAIRS counters are kept; past that the least
 * recently used is forgotten, which can only let that user in earlier.
 * Counters are keyed by rule address: call policy_rates_reset() when the
 * rules are replaced.  Not thread-safe, like the rest of the daemon.
 */

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "policy/policy.h"

#define RATE_BUCKETS	4096		/* power of two */
#define RATE_USER_MAX	256	/* TENANT/NAME; longer ones share */

struct rate_entry {
	LIST_ENTRY(rate_entry)	 re_hash;
	TAILQ_ENTRY(rate_entry)	 re_lru;
	const void		*re_rule;	/* compared, never followed */
	uint64_t		 re_start;	/* window opened, ms */
	unsigned int		 re_count;
	size_t			 re_userlen;
	char			 re_user[];
};
LIST_HEAD(rate_bucket, rate_entry);
TAILQ_HEAD(rate_queue, rate_entry);

static struct rate_bucket	rate_hash[RATE_BUCKETS];
static struct rate_queue	rate_lru = TAILQ_HEAD_INITIALIZER(rate_lru);
static size_t			rate_n;

/* What one rule says about one question. */
enum verdict {
	V_SUBJECT,		/* subject does not match */
	V_TOOL,			/* tool does not match */
	V_COND,			/* a condition does not hold */
	V_MAYBE,		/* listing: conditions wait for the call */
	V_UNSURE,		/* a deny or confirm whose conditions could not
				   be checked */
	V_MATCH,
};

/*
 * A condition on a call's arguments holds, does not, or cannot be told:
 * a value of the wrong type, a NUL, a path that does not normalise (".."
 * above its root, too long) or that is relative where the rule's is
 * absolute.  An allow rule needs every condition to hold; a deny or a
 * confirm rule also applies when one cannot be told, so that a path the
 * policy cannot read is not let through to a rule further down.
 */
enum cond_result {
	COND_FALSE,
	COND_TRUE,
	COND_UNKNOWN,
};

const char *
policy_action_str(enum policy_action a)
{
	switch (a) {
	case POLICY_ALLOW:
		return "allow";
	case POLICY_DENY:
		return "deny";
	case POLICY_CONFIRM:
		return "confirm";
	}
	return "unknown";
}

const char *
policy_kind_str(enum policy_kind k)
{
	switch (k) {
	case POLICY_TOOL:
		return "tool";
	case POLICY_RESOURCE:
		return "resource";
	case POLICY_PROMPT:
		return "prompt";
	}
	return "unknown";
}

const char *
policy_subject_str(enum policy_subject s)
{
	switch (s) {
	case SUBJECT_ANY:
		return "any";
	case SUBJECT_USER:
		return "user";
	case SUBJECT_ROLE:
		return "role";
	case SUBJECT_TENANT:
		return "tenant";
	}
	return "unknown";
}

const char *
policy_op_str(enum policy_op op)
{
	switch (op) {
	case COND_PREFIX:
		return "prefix";
	case COND_EQUALS:
		return "equals";
	case COND_MATCHES:
		return "matches";
	case COND_MAX_LENGTH:
		return "max-length";
	}
	return "unknown";
}

/* Globs */

/*
 * p[0..plen) against s[0..slen).  Backtracking only to the last `*` keeps
 * this O(plen * slen) on any input: no exponential blow-up on hostile
 * values.
 */
static int
glob_match(const char *p, size_t plen, const char *s, size_t slen)
{
	size_t	pi = 0, si = 0, star = SIZE_MAX, mark = 0;

	while (si < slen) {
		if (pi < plen && p[pi] == '*') {
			star = pi++;
			mark = si;
		} else if (pi < plen && (p[pi] == '?' || p[pi] == s[si])) {
			pi++;
			si++;
		} else if (star != SIZE_MAX) {
			pi = star + 1;
			si = ++mark;
		} else
			return 0;
	}
	while (pi < plen && p[pi] == '*')
		pi++;
	return pi == plen;
}

int
policy_glob_match(const char *glob, const char *s)
{
	return glob_match(glob, strlen(glob), s, strlen(s));
}

static int
tool_glob_match(const char *glob, const char *id)
{
	const char	*gdot, *idot;

	if ((gdot = strchr(glob, '.')) == NULL)
		return glob_match(glob, strlen(glob), id, strlen(id));
	if ((idot = strchr(id, '.')) == NULL)
		return 0;
	return glob_match(glob, (size_t)(gdot - glob), id,
	    (size_t)(idot - id)) &&
	    glob_match(gdot + 1, strlen(gdot + 1), idot + 1, strlen(idot + 1));
}

static int
tool_matches(const struct policy_rule *r, const char *id)
{
	size_t	i;

	for (i = 0; r->pr_tools != NULL && i < r->pr_ntools &&
	    r->pr_tools[i] != NULL; i++)
		if (tool_glob_match(r->pr_tools[i], id))
			return 1;
	return 0;
}

/* Subjects */

static int
eq(const char *a, const char *b)
{
	return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static int
subject_matches(const struct policy_rule *r, const struct policy_caller *c)
{
	size_t	i;

	switch (r->pr_subject) {
	case SUBJECT_ANY:
		return 1;
	case SUBJECT_USER:	/* a name within a tenant, or in any */
		return c != NULL && eq(c->ps_user, r->pr_subject_name) &&
		    (r->pr_subject_tenant == NULL ||
		    eq(c->ps_tenant, r->pr_subject_tenant));
	case SUBJECT_TENANT:
		return c != NULL && eq(c->ps_tenant, r->pr_subject_name);
	case SUBJECT_ROLE:
		if (c == NULL || c->ps_roles == NULL)
			return 0;
		for (i = 0; i < c->ps_nroles; i++)
			if (eq(c->ps_roles[i], r->pr_subject_name))
				return 1;
		return 0;
	}
	return 0;
}

/* Paths */

/*
 * Lexical normalisation into out (outsz > len): "/a/b" or "/" when
 * absolute, "a/b" or "" when relative.  -1 on NUL, overlong input or a ".."
 * with nothing to remove.  The output is never longer than the input.
 */
static int
path_normalise(const char *in, size_t len, char *out, size_t outsz)
{
	size_t	i = 0, o = 0, base, start, n;

	if (len >= outsz || memchr(in, '\0', len) != NULL)
		return -1;
	if (len > 0 && in[0] == '/')
		out[o++] = '/';
	base = o;
	while (i < len) {
		while (i < len && in[i] == '/')
			i++;
		start = i;
		while (i < len && in[i] != '/')
			i++;
		n = i - start;
		if (n == 0 || (n == 1 && in[start] == '.'))
			continue;
		if (n == 2 && in[start] == '.' && in[start + 1] == '.') {
			if (o == base)
				return -1;
			while (o > base && out[o - 1] != '/')
				o--;
			if (o > base)
				o--;		/* the separator before it */
			continue;
		}
		if (o > base)
			out[o++] = '/';
		memcpy(out + o, in + start, n);
		o += n;
	}
	out[o] = '\0';
	return 0;
}

static enum cond_result
path_has_prefix(const char *arg, size_t len, const char *prefix)
{
	char	a[POLICY_PATH_MAX + 1], p[POLICY_PATH_MAX + 1];
	size_t	n;

	/* A prefix that names no directory: nothing can be checked against
	 * it, so an allow rule never holds and a deny or confirm applies. */
	if (path_normalise(prefix, strlen(prefix), p, sizeof(p)) == -1 ||
	    p[0] == '\0')
		return COND_UNKNOWN;
	/* Relative is under the server's directory, wherever that is. */
	if (path_normalise(arg, len, a, sizeof(a)) == -1 ||
	    (a[0] == '/') != (p[0] == '/'))
		return COND_UNKNOWN;
	if (strcmp(p, "/") == 0)
		return COND_TRUE;
	n = strlen(p);
	return strncmp(a, p, n) == 0 && (a[n] == '\0' || a[n] == '/') ?
	    COND_TRUE : COND_FALSE;
}

static enum cond_result
cond_bool(int holds)
{
	return holds ? COND_TRUE : COND_FALSE;
}

/* Conditions */

/* An argument the call does not have is one no condition holds for. */
static enum cond_result
cond_eval(const struct policy_cond *pc, struct json_object *args)
{
	struct json_object	*v;
	const char		*s;
	size_t			 len;

	if (!json_object_is_type(args, json_type_object))
		return COND_UNKNOWN;
	if (!json_object_object_get_ex(args, pc->pc_arg, &v))
		return COND_FALSE;
	if (pc->pc_op == COND_MAX_LENGTH) {
		if (json_object_is_type(v, json_type_string))
			len = (size_t)json_object_get_string_len(v);
		else if (json_object_to_json_string_length(v,
		    JSON_C_TO_STRING_PLAIN, &len) == NULL)
			return COND_UNKNOWN;
		return cond_bool(pc->pc_num >= 0 &&
		    len <= (unsigned long long)pc->pc_num);
	}
	if (!json_object_is_type(v, json_type_string) || pc->pc_value == NULL)
		return COND_UNKNOWN;
	s = json_object_get_string(v);
	len = (size_t)json_object_get_string_len(v);
	if (memchr(s, '\0', len) != NULL)
		return COND_UNKNOWN;
	switch (pc->pc_op) {
	case COND_PREFIX:
		return path_has_prefix(s, len, pc->pc_value);
	case COND_EQUALS:
		return cond_bool(len == strlen(pc->pc_value) &&
		    memcmp(s, pc->pc_value, len) == 0);
	case COND_MATCHES:
		return cond_bool(glob_match(pc->pc_value, strlen(pc->pc_value),
		    s, len));
	case COND_MAX_LENGTH:
		break;
	}
	return COND_UNKNOWN;
}

static enum verdict
rule_verdict(const struct policy_rule *r, enum policy_kind kind,
    const struct policy_caller *c, const char *tool_id,
    struct json_object *args)
{
	const struct policy_cond	*pc;
	enum verdict			 v = V_MATCH;

	if (!subject_matches(r, c))
		return V_SUBJECT;
	if (r->pr_kind != kind || !tool_matches(r, tool_id))
		return V_TOOL;
	if (TAILQ_EMPTY(&r->pr_conds))
		return V_MATCH;
	if (args == NULL)
		return V_MAYBE;
	TAILQ_FOREACH(pc, &r->pr_conds, pc_entry)
		switch (cond_eval(pc, args)) {
		case COND_FALSE:
			return V_COND;
		case COND_UNKNOWN:
			if (r->pr_action == POLICY_ALLOW)
				return V_COND;
			v = V_UNSURE;
			break;
		case COND_TRUE:
			break;
		}
	return v;
}

/* Rate limits */

static size_t
rate_hash_of(const void *rule, const char *user, size_t len)
{
	uintptr_t	 u = (uintptr_t)rule;
	uint64_t	 h = 14695981039346656037ULL;	/* FNV-1a */
	size_t		 i;

	for (i = 0; i < sizeof(u); i++, u >>= 8)
		h = (h ^ (u & 0xff)) * 1099511628211ULL;
	for (i = 0; i < len; i++)
		h = (h ^ (unsigned char)user[i]) * 1099511628211ULL;
	return (size_t)(h & (RATE_BUCKETS - 1));
}

static void
rate_drop(struct rate_entry *re)
{
	LIST_REMOVE(re, re_hash);
	TAILQ_REMOVE(&rate_lru, re, re_lru);
	rate_n--;
	free(re);
}

/* The counter of (rule, user), made when missing; NULL when out of memory. */
static struct rate_entry *
rate_lookup(const struct policy_rule *r, const char *user, uint64_t now_ms)
{
	struct rate_bucket	*b;
	struct rate_entry	*re;
	size_t			 len;

	len = strnlen(user, RATE_USER_MAX);
	b = &rate_hash[rate_hash_of(r, user, len)];
	LIST_FOREACH(re, b, re_hash)
		if (re->re_rule == r && re->re_userlen == len &&
		    memcmp(re->re_user, user, len) == 0) {
			TAILQ_REMOVE(&rate_lru, re, re_lru);
			TAILQ_INSERT_TAIL(&rate_lru, re, re_lru);
			return re;
		}
	if (rate_n >= POLICY_RATE_MAX_PAIRS)
		rate_drop(TAILQ_FIRST(&rate_lru));
	if ((re = malloc(sizeof(*re) + len + 1)) == NULL)
		return NULL;
	re->re_rule = r;
	re->re_start = now_ms;
	re->re_count = 0;
	re->re_userlen = len;
	memcpy(re->re_user, user, len);
	re->re_user[len] = '\0';
	LIST_INSERT_HEAD(b, re, re_hash);
	TAILQ_INSERT_TAIL(&rate_lru, re, re_lru);
	rate_n++;
	return re;
}

/*
 * Use up one call of r for the caller: 0 if one was left, -1 if not.  A
 * user is a name within a tenant, so the counter is TENANT/NAME's.
 */
static int
rate_take(const struct policy_rule *r, const struct policy_caller *c,
    uint64_t now_ms)
{
	struct rate_entry	*re;
	uint64_t		 period_ms;
	char			 who[RATE_USER_MAX];

	snprintf(who, sizeof(who), "%s/%s", c != NULL && c->ps_tenant != NULL ?
	    c->ps_tenant : "", c != NULL && c->ps_user != NULL ? c->ps_user :
	    "");
	if ((re = rate_lookup(r, who, now_ms)) == NULL)
		return -1;	/* cannot count: refuse rather than not count */
	period_ms = (uint64_t)r->pr_rate_period * 1000;
	if (now_ms >= re->re_start && now_ms - re->re_start >= period_ms) {
		re->re_start = now_ms;
		re->re_count = 0;
	}
	if (re->re_count >= r->pr_rate_count)
		return -1;
	re->re_count++;
	return 0;
}

void
policy_rates_reset(void)
{
	while (!TAILQ_EMPTY(&rate_lru))
		rate_drop(TAILQ_FIRST(&rate_lru));
}

/* Decisions */

static const char *
period_str(unsigned int secs, char *buf, size_t sz)
{
	switch (secs) {
	case 1:
		return "second";
	case 60:
		return "minute";
	case 3600:
		return "hour";
	case 86400:
		return "day";
	}
	snprintf(buf, sz, "%u seconds", secs);
	return buf;
}

/* A tool id from a model, safe to put in a message: printable ASCII. */
static const char *
printable(const char *s, char *buf, size_t sz)
{
	size_t	i;

	for (i = 0; s[i] != '\0' && i + 1 < sz; i++)
		buf[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
	buf[i] = '\0';
	return buf;
}

static const char *
action_done_str(enum policy_action a)
{
	switch (a) {
	case POLICY_ALLOW:
		return "allowed";
	case POLICY_DENY:
		break;
	case POLICY_CONFIRM:
		return "confirmation required";
	}
	return "denied";
}

static void
decide_rule(const struct policy_rule *r, enum verdict v, int listing,
    struct policy_decision *d)
{
	d->pd_action = r->pr_action;
	d->pd_rule = r;
	snprintf(d->pd_reason, sizeof(d->pd_reason), "%s by rule at %s:%d%s",
	    action_done_str(r->pr_action),
	    r->pr_file != NULL ? r->pr_file : "?", r->pr_line,
	    v == V_MAYBE ? " if its argument conditions hold" :
	    v == V_UNSURE ? ": an argument could not be checked against its "
	    "conditions" :
	    listing && r->pr_rate_count != 0 ?
	    " (rate limit applies per call)" : "");
}

static void
decide_rate_exhausted(const struct policy_rule *r,
    struct policy_decision *d)
{
	char	b[32];

	d->pd_action = POLICY_DENY;
	d->pd_rule = r;
	snprintf(d->pd_reason, sizeof(d->pd_reason),
	    "rate limit of rule at %s:%d: %u per %s",
	    r->pr_file != NULL ? r->pr_file : "?", r->pr_line,
	    r->pr_rate_count, period_str(r->pr_rate_period, b, sizeof(b)));
}

/*
 * The first rule that decides, with its verdict; NULL when none does.  When
 * listing (args NULL) a deny rule with conditions is passed over: it may
 * not apply to the call.
 */
static const struct policy_rule *
first_rule(const struct policy_rule_list *rules, enum policy_kind kind,
    const struct policy_caller *c, const char *tool_id,
    struct json_object *args, enum verdict *vp)
{
	const struct policy_rule	*r;
	enum verdict			 v;

	if (rules == NULL)
		return NULL;
	TAILQ_FOREACH(r, rules, pr_entry) {
		v = rule_verdict(r, kind, c, tool_id, args);
		if (v == V_MATCH || v == V_UNSURE || (v == V_MAYBE &&
		    r->pr_action != POLICY_DENY)) {
			*vp = v;
			return r;
		}
	}
	return NULL;
}

void
policy_decide(const struct policy_rule_list *rules,
    const struct policy_caller *c, const char *tool_id,
    struct json_object *args, uint64_t now_ms, struct policy_decision *d)
{
	policy_decide_kind(rules, POLICY_TOOL, c, tool_id, args, now_ms, d);
}

void
policy_decide_kind(const struct policy_rule_list *rules,
    enum policy_kind kind, const struct policy_caller *c, const char *tool_id,
    struct json_object *args, uint64_t now_ms, struct policy_decision *d)
{
	const struct policy_rule	*r;
	enum verdict			 v = V_MATCH;
	char				 b[160];

	memset(d, 0, sizeof(*d));
	d->pd_action = POLICY_DENY;
	if (tool_id == NULL)
		tool_id = "";
	if ((r = first_rule(rules, kind, c, tool_id, args, &v)) == NULL)
		snprintf(d->pd_reason, sizeof(d->pd_reason),
		    "no rule allows %s%s%s", kind == POLICY_TOOL ? "" :
		    policy_kind_str(kind), kind == POLICY_TOOL ? "" : " ",
		    printable(tool_id, b, sizeof(b)));
	else if (args != NULL && r->pr_action != POLICY_DENY &&
	    r->pr_rate_count != 0 &&
	    rate_take(r, c, now_ms) == -1)
		decide_rate_exhausted(r, d);
	else
		decide_rule(r, v, args == NULL, d);
}

/* Explain */

/* Quoted as in the config, with anything unprintable as \xHH. */
static void
put_str(FILE *out, const char *s)
{
	fputc('"', out);
	for (; s != NULL && *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(out, "\\%c", *s);
		else if (isprint((unsigned char)*s))
			fputc(*s, out);
		else
			fprintf(out, "\\x%02x", (unsigned char)*s);
	}
	fputc('"', out);
}

static void
put_rule(FILE *out, const struct policy_rule *r)
{
	const struct policy_cond	*pc;
	size_t				 i;
	char				 b[32];

	fprintf(out, "%s:%d: %s", r->pr_file != NULL ? r->pr_file : "?",
	    r->pr_line, policy_action_str(r->pr_action));
	if (r->pr_subject != SUBJECT_ANY) {
		fprintf(out, " %s ", policy_subject_str(r->pr_subject));
		put_str(out, r->pr_subject_name);
	}
	if (r->pr_subject_tenant != NULL) {
		fputs(" tenant ", out);
		put_str(out, r->pr_subject_tenant);
	}
	fprintf(out, " %s", policy_kind_str(r->pr_kind));
	for (i = 0; r->pr_tools != NULL && i < r->pr_ntools &&
	    r->pr_tools[i] != NULL; i++) {
		fputc(' ', out);
		put_str(out, r->pr_tools[i]);
	}
	TAILQ_FOREACH(pc, &r->pr_conds, pc_entry) {
		fputs(" where ", out);
		put_str(out, pc->pc_arg);
		fprintf(out, " %s ", policy_op_str(pc->pc_op));
		if (pc->pc_op == COND_MAX_LENGTH)
			fprintf(out, "%lld", pc->pc_num);
		else
			put_str(out, pc->pc_value);
	}
	if (r->pr_rate_count != 0)
		fprintf(out, " rate %u/%s", r->pr_rate_count,
		    period_str(r->pr_rate_period, b, sizeof(b)));
}

static void
put_caller(FILE *out, const struct policy_caller *c, const char *tool_id)
{
	size_t	i;

	fputs("explain user ", out);
	put_str(out, c != NULL ? c->ps_user : NULL);
	fputs(" tenant ", out);
	put_str(out, c != NULL ? c->ps_tenant : NULL);
	fputs(" roles", out);
	for (i = 0; c != NULL && c->ps_roles != NULL && i < c->ps_nroles; i++) {
		fputc(' ', out);
		put_str(out, c->ps_roles[i]);
	}
	fputs(" tool ", out);
	put_str(out, tool_id);
	fputc('\n', out);
}

/*
 * What rule r says to the listing question, given whether an earlier rule
 * already decided.  Returns 1 when r decides.
 */
static int
explain_rule(FILE *out, const struct policy_rule *r,
    const struct policy_caller *c, const char *tool_id, int decided)
{
	enum verdict	v;
	int		decides = 0;

	v = rule_verdict(r, POLICY_TOOL, c, tool_id, NULL);
	put_rule(out, r);
	if (r->pr_kind != POLICY_TOOL) {
		fprintf(out, ": a %s rule, not about tools\n",
		    policy_kind_str(r->pr_kind));
		return 0;
	}
	fprintf(out, ": subject %s", v == V_SUBJECT ? "does not match" :
	    "matches");
	if (v != V_SUBJECT)
		fprintf(out, ", tool %s", v == V_TOOL ? "does not match" :
		    "matches");
	if (v == V_MAYBE)
		fputs(", argument conditions checked at call time", out);
	if (v == V_MAYBE && r->pr_action == POLICY_DENY) {
		if (!decided)
			fputs(" (denies calls they match, or that cannot be "
			    "checked against them; evaluation goes on)", out);
	} else if ((v == V_MAYBE || v == V_MATCH) && !decided) {
		fprintf(out, " -> decides: %s", policy_action_str(r->pr_action));
		if (r->pr_rate_count != 0)
			fputs(" (rate limit applies per call)", out);
		decides = 1;
	}
	if (decided)
		fputs(" (not reached)", out);
	fputc('\n', out);
	return decides;
}

void
policy_explain(const struct policy_rule_list *rules,
    const struct policy_caller *c, const char *tool_id, FILE *out)
{
	const struct policy_rule	*r;
	struct policy_decision		 d;
	int				 decided = 0;

	if (tool_id == NULL)
		tool_id = "";
	put_caller(out, c, tool_id);
	if (rules != NULL)
		TAILQ_FOREACH(r, rules, pr_entry)
			decided |= explain_rule(out, r, c, tool_id, decided);
	policy_decide(rules, c, tool_id, NULL, 0, &d);
	fprintf(out, "decision: %s: %s\n", policy_action_str(d.pd_action),
	    d.pd_reason);
}
