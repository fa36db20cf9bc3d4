/*
 * Tool policy (policy/policy.c): rules parsed once from a fixed config,
 * a fuzzed caller, tool id and arguments.  Input: [caller] [clock] TOOL
 * "\n" ARGUMENTS, the arguments parsed as the controller parses a
 * message (json_parse_object); anything else is decided as a listing.
 *
 * What must hold, beyond not crashing:
 * - listing shows a tool whenever a call of it is allowed or confirmed;
 * - anything but a deny names the rule that decided;
 * - path prefixes: for files.read_file, a second, independent reading of
 *   the documented semantics (lexical normalisation, components compared
 *   whole, ".." above the top refused) agrees with every decision rules 3
 *   and 4 make, and predicts them.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "broker/config.h"
#include "common/util.h"
#include "policy/policy.h"
#include "tests/fuzz/fuzz.h"

/* Rule N is on line N. */
static const char rules_text[] =
    "deny user \"mallory\" tool \"*\"\n"
    "deny tool \"files.write_*\" \"files.move_*\"\n"
    "deny tool \"files.read_file\" where path prefix \"/srv/secret\"\n"
    "allow role \"analyst\" tool \"files.read_file\" where path prefix "
    "\"/srv/share/public/\"\n"
    "allow tool \"jira.get\" where key equals \"ABC-1\"\n"
    "allow tool \"jira.search\" where jql matches \"project = *\" "
    "where jql max-length 64\n"
    "confirm tool \"shell.*\" where cmd matches \"ls *\" rate 5/minute\n"
    "allow tenant \"acme\" tool \"files.*\" rate 2/second\n"
    "allow tool \"a?c*.*\" where n max-length 3\n"
    "deny tool \"*.*\" where path prefix \"relative/dir\"\n"
    "allow role \"ops\" tool \"*\"\n"
    "server \"files\" { command \"/bin/files\" }\n"
    "server \"jira\" { url \"https://jira/mcp\" }\n"
    "server \"shell\" { command \"/bin/sh\" }\n"
    "server \"abc\" { command \"/bin/abc\" }\n";

#define RULE_SECRET	3
#define RULE_PUBLIC	4

static const char *const analyst_roles[] = { "staff", "analyst" };
static const char *const ops_roles[] = { "ops" };
static const struct policy_caller callers[] = {
	{ "alice", "acme", analyst_roles, 2 },	/* reaches rule 4 */
	{ "bob", "globex", NULL, 0 },
	{ NULL, NULL, NULL, 0 },
	{ "mallory", "acme", ops_roles, 1 },
	{ "olga", NULL, ops_roles, 1 },
};
#define NCALLERS	(sizeof(callers) / sizeof(callers[0]))

static struct mcpbroker_conf	*conf;
static FILE			*devnull;

/*
 * The documented prefix semantics, written from the description rather
 * than from the code: split into components, drop "" and ".", let ".."
 * pop (refusing when there is nothing to pop), compare whole components.
 */
struct comps {
	int		 absolute;
	size_t		 n;
	const char	*c[POLICY_PATH_MAX];
	size_t		 len[POLICY_PATH_MAX];
};

static int
split(const char *s, size_t len, struct comps *out)
{
	size_t i = 0, start;

	if (len > POLICY_PATH_MAX || memchr(s, '\0', len) != NULL)
		return -1;
	out->absolute = len > 0 && s[0] == '/';
	out->n = 0;
	while (i < len) {
		start = i;
		while (i < len && s[i] != '/')
			i++;
		if (i - start == 2 && memcmp(s + start, "..", 2) == 0) {
			if (out->n == 0)
				return -1;
			out->n--;
		} else if (i - start > 0 && !(i - start == 1 &&
		    s[start] == '.')) {
			out->c[out->n] = s + start;
			out->len[out->n++] = i - start;
		}
		i++;
	}
	return 0;
}

static int
beneath(const char *path, size_t len, const char *prefix)
{
	static struct comps	a, p;
	size_t			i;

	if (split(path, len, &a) == -1 ||
	    split(prefix, strlen(prefix), &p) == -1 ||
	    a.absolute != p.absolute || (!p.absolute && p.n == 0) ||
	    p.n > a.n)
		return 0;
	for (i = 0; i < p.n; i++)
		if (p.len[i] != a.len[i] || memcmp(p.c[i], a.c[i],
		    p.len[i]) != 0)
			return 0;
	return 1;
}

/*
 * What the documentation says a condition cannot check: a path that does
 * not normalise, or a relative one against an absolute prefix (rule 3's).
 * A deny rule applies to it.
 */
static int
unreadable(const char *path, size_t len)
{
	static struct comps a;

	return split(path, len, &a) == -1 || !a.absolute;
}

static void
check_prefix(const struct policy_caller *c, const char *tool,
    struct json_object *args, const struct policy_decision *d)
{
	struct json_object	*v;
	const char		*path;
	size_t			 len;
	int			 secret, public, line;

	if (strcmp(tool, "files.read_file") != 0 ||
	    !json_object_object_get_ex(args, "path", &v) ||
	    !json_object_is_type(v, json_type_string))
		return;
	path = json_object_get_string(v);
	len = (size_t)json_object_get_string_len(v);
	secret = beneath(path, len, "/srv/secret") || unreadable(path, len);
	public = beneath(path, len, "/srv/share/public/");
	line = d->pd_rule != NULL ? d->pd_rule->pr_line : 0;
	if ((line == RULE_SECRET) != (secret && c != &callers[3]))
		abort();
	if (line == RULE_PUBLIC && (!public || secret))
		abort();
	if (c == &callers[0] && public && !secret && line != RULE_PUBLIC)
		abort();
}

static void
check_reason(const struct policy_decision *d)
{
	if (strnlen(d->pd_reason, sizeof(d->pd_reason)) ==
	    sizeof(d->pd_reason))
		abort();
	if (d->pd_action != POLICY_DENY && d->pd_rule == NULL)
		abort();
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char	*errs = NULL;
	size_t	 len;
	FILE	*fp;

	(void)argc;
	(void)argv;
	fuzz_log_quiet();
	if ((fp = open_memstream(&errs, &len)) == NULL)
		abort();
	conf = config_parse_buffer("rules.conf", rules_text,
	    strlen(rules_text), fp);
	fclose(fp);
	if (conf == NULL) {
		fprintf(stderr, "%s", errs);
		abort();
	}
	free(errs);
	if ((devnull = fopen("/dev/null", "w")) == NULL)
		abort();
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct policy_caller	*c;
	struct policy_decision		 call, list;
	struct json_object		*args;
	const uint8_t			*nl;
	uint64_t			 now;
	size_t				 tlen;
	char				*tool;
	int				 i;

	c = &callers[fuzz_take(&data, &size) % NCALLERS];
	now = 1000000 + (uint64_t)fuzz_take(&data, &size) * 250;
	nl = memchr(data, '\n', size);
	tlen = nl != NULL ? (size_t)(nl - data) : size;
	tool = fuzz_strndup(data, tlen);
	args = nl != NULL ? json_parse_object((const char *)nl + 1,
	    size - tlen - 1) : NULL;

	policy_rates_reset();
	policy_decide(&conf->c_rules, c, tool, NULL, now, &list);
	check_reason(&list);
	/* Twice: the second call may find a rate used up. */
	for (i = 0; i < 2 && args != NULL; i++) {
		policy_decide(&conf->c_rules, c, tool, args, now, &call);
		check_reason(&call);
		if (call.pd_action != POLICY_DENY &&
		    list.pd_action == POLICY_DENY)
			abort();
		if (i == 0)
			check_prefix(c, tool, args, &call);
	}
	policy_explain(&conf->c_rules, c, tool, devnull);
	json_object_put(args);
	free(tool);
	return 0;
}
