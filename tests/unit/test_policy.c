/*
 * Policy evaluation: first match, subjects, tool globs, argument
 * conditions (paths above all), listing, rate limits and explain.
 *
 * Rules come from config text through the real parser; the servers they
 * name are defined after them so that rule N is on line N of "t.conf".
 */

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "broker/config.h"
#include "policy/policy.h"

#define T0	1000000		/* an arbitrary monotonic now, ms */

static const char servers[] =
    "server \"files\" { command \"/bin/files\" }\n"
    "server \"filesystem\" { command \"/bin/fs\" }\n"
    "server \"jira\" { url \"https://jira/mcp\" }\n"
    "server \"shell\" { command \"/bin/sh\" }\n"
    "server \"a\" { command \"/bin/a\" }\n";

static const char *const analyst_roles[] = { "staff", "analyst", "ops" };
static const struct policy_caller alice = { "alice", "acme", analyst_roles,
    3 };
static const struct policy_caller bob = { "bob", "globex", NULL, 0 };
static const struct policy_caller nobody = { NULL, NULL, NULL, 0 };
/* another tenant's user of alice's name */
static const struct policy_caller alice_beta = { "alice", "beta", NULL, 0 };

static struct mcpbroker_conf *
conf_of(const char *rules)
{
	struct mcpbroker_conf	*conf;
	char			*text, *errs = NULL;
	size_t			 len;
	FILE			*fp;

	assert_true(asprintf(&text, "%s%s", rules, servers) != -1);
	assert_non_null(fp = open_memstream(&errs, &len));
	conf = config_parse_buffer("t.conf", text, strlen(text), fp);
	fclose(fp);
	if (conf == NULL)
		fail_msg("config errors: %s", errs);
	free(errs);
	free(text);
	return conf;
}

/* args is JSON text or NULL (listing). */
static enum policy_action
decide_at(struct mcpbroker_conf *conf, const struct policy_caller *c,
    const char *tool, const char *args, uint64_t now,
    struct policy_decision *d)
{
	struct json_object	*a = NULL;

	if (args != NULL)
		assert_non_null(a = json_tokener_parse(args));
	policy_decide(&conf->c_rules, c, tool, a, now, d);
	json_object_put(a);
	return d->pd_action;
}

static enum policy_action
decide(struct mcpbroker_conf *conf, const struct policy_caller *c,
    const char *tool, const char *args)
{
	struct policy_decision	d;

	return decide_at(conf, c, tool, args, T0, &d);
}

/* The line of the rule that decided, 0 for none. */
static int
decided_by(struct mcpbroker_conf *conf, const struct policy_caller *c,
    const char *tool, const char *args)
{
	struct policy_decision	d;

	decide_at(conf, c, tool, args, T0, &d);
	return d.pd_rule != NULL ? d.pd_rule->pr_line : 0;
}

static void
test_first_match_deny_before_allow(void **state)
{
	struct mcpbroker_conf	*conf;
	struct policy_decision	 d;

	(void)state;
	conf = conf_of("deny tool \"files.write_*\" \"files.move_*\"\n"
	    "allow tool \"files.*\"\n");
	assert_int_equal(decide_at(conf, &alice, "files.write_file", "{}", T0,
	    &d), POLICY_DENY);
	assert_int_equal(d.pd_rule->pr_line, 1);
	assert_string_equal(d.pd_reason, "denied by rule at t.conf:1");
	assert_int_equal(decide(conf, &alice, "files.move_file", "{}"),
	    POLICY_DENY);
	assert_int_equal(decide_at(conf, &alice, "files.read_file", "{}", T0,
	    &d), POLICY_ALLOW);
	assert_int_equal(d.pd_rule->pr_line, 2);
	assert_string_equal(d.pd_reason, "allowed by rule at t.conf:2");
	config_free(conf);
}

static void
test_first_match_allow_before_deny(void **state)
{
	struct mcpbroker_conf	*conf;
	struct policy_decision	 d;

	(void)state;
	conf = conf_of("allow user \"alice\" tool \"files.write_file\"\n"
	    "deny tool \"files.*\"\n"
	    "allow tool \"*\"\n"
	    "confirm tool \"shell.*\"\n");
	assert_int_equal(decide(conf, &alice, "files.write_file", "{}"),
	    POLICY_ALLOW);
	assert_int_equal(decided_by(conf, &bob, "files.write_file", "{}"), 2);
	assert_int_equal(decide(conf, &bob, "files.write_file", "{}"),
	    POLICY_DENY);
	/* A later, narrower rule never gets a say. */
	assert_int_equal(decided_by(conf, &bob, "shell.run", "{}"), 3);
	assert_int_equal(decide_at(conf, &bob, "shell.run", "{}", T0, &d),
	    POLICY_ALLOW);
	config_free(conf);

	conf = conf_of("confirm role \"ops\" tool \"shell.*\"\n");
	assert_int_equal(decide_at(conf, &alice, "shell.run", "{}", T0, &d),
	    POLICY_CONFIRM);
	assert_string_equal(d.pd_reason,
	    "confirmation required by rule at t.conf:1");
	config_free(conf);
}

static void
test_no_match_denies(void **state)
{
	struct mcpbroker_conf	*conf;
	struct policy_decision	 d;

	(void)state;
	conf = conf_of("");
	assert_int_equal(decide_at(conf, &alice, "files.read_file", "{}", T0,
	    &d), POLICY_DENY);
	assert_null(d.pd_rule);
	assert_string_equal(d.pd_reason, "no rule allows files.read_file");
	config_free(conf);

	conf = conf_of("allow tool \"jira.*\"\n");
	assert_int_equal(decide_at(conf, &alice, "files.read_file", NULL, T0,
	    &d), POLICY_DENY);
	assert_null(d.pd_rule);
	assert_string_equal(d.pd_reason, "no rule allows files.read_file");
	/* A hostile id is not copied into the reason verbatim. */
	decide_at(conf, &alice, "files.x\n\033[2J", "{}", T0, &d);
	assert_string_equal(d.pd_reason, "no rule allows files.x??[2J");
	decide_at(conf, &alice, NULL, "{}", T0, &d);
	assert_int_equal(d.pd_action, POLICY_DENY);
	config_free(conf);

	policy_decide(NULL, &alice, "jira.search", NULL, T0, &d);
	assert_int_equal(d.pd_action, POLICY_DENY);
	assert_null(d.pd_rule);
}

static void
test_subjects(void **state)
{
	static const char *const ops_only[] = { "ops" };
	static const char *const other_roles[] = { "Analyst", "analysts",
	    "analys" };
	const struct policy_caller ops = { "carol", "acme", ops_only, 1 };
	const struct policy_caller near = { "Alice", "Acme", other_roles, 3 };
	struct mcpbroker_conf	*conf;

	(void)state;
	conf = conf_of("allow user \"alice\" tool \"files.a\"\n"
	    "allow role \"analyst\" tool \"files.b\"\n"
	    "allow tenant \"acme\" tool \"files.c\"\n"
	    "allow tool \"files.d\"\n"
	    "allow user \"alice\" tenant \"acme\" tool \"files.e\"\n");
	/* user: the name in any tenant, or within the one named */
	assert_int_equal(decide(conf, &alice, "files.a", "{}"), POLICY_ALLOW);
	assert_int_equal(decide(conf, &alice_beta, "files.a", "{}"),
	    POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "files.a", "{}"), POLICY_DENY);
	assert_int_equal(decide(conf, &near, "files.a", "{}"), POLICY_DENY);
	assert_int_equal(decide(conf, &nobody, "files.a", "{}"), POLICY_DENY);
	assert_int_equal(decide(conf, &alice, "files.e", "{}"), POLICY_ALLOW);
	assert_int_equal(decide(conf, &alice_beta, "files.e", "{}"),
	    POLICY_DENY);
	assert_int_equal(decide(conf, &near, "files.e", "{}"), POLICY_DENY);
	/* role: the second of three */
	assert_int_equal(decide(conf, &alice, "files.b", "{}"), POLICY_ALLOW);
	assert_int_equal(decide(conf, &ops, "files.b", "{}"), POLICY_DENY);
	assert_int_equal(decide(conf, &near, "files.b", "{}"), POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "files.b", "{}"), POLICY_DENY);
	/* tenant */
	assert_int_equal(decide(conf, &alice, "files.c", "{}"), POLICY_ALLOW);
	assert_int_equal(decide(conf, &ops, "files.c", "{}"), POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "files.c", "{}"), POLICY_DENY);
	assert_int_equal(decide(conf, &near, "files.c", "{}"), POLICY_DENY);
	/* any: even a caller with nothing, or none at all */
	assert_int_equal(decide(conf, &nobody, "files.d", "{}"),
	    POLICY_ALLOW);
	assert_int_equal(decide(conf, NULL, "files.d", "{}"), POLICY_ALLOW);
	assert_int_equal(decide(conf, NULL, "files.a", "{}"), POLICY_DENY);
	config_free(conf);
}

static void
test_tool_globs(void **state)
{
	static const struct {
		const char	*glob, *id;
		int		 match;
	} cases[] = {
		{ "files.*", "files.read_file", 1 },
		{ "files.*", "files.", 1 },
		{ "files.*", "files.a.b", 1 },		/* dots in tool names */
		{ "files.*", "filesystem.read_file", 0 },
		{ "files.*", "files", 0 },
		{ "files.*", "Files.read_file", 0 },	/* case matters */
		{ "files.read_*", "files.read_file", 1 },
		{ "files.read_*", "files.read_", 1 },
		{ "files.read_*", "files.write_file", 0 },
		{ "files.read_file", "files.read_file", 1 },
		{ "files.read_file", "files.read_file2", 0 },
		{ "files.read_file", "files.read_fil", 0 },
		{ "files.read_file", "files.READ_FILE", 0 },
		{ "files.rea?_file", "files.read_file", 1 },
		{ "files.rea?_file", "files.rea_file", 0 },
		{ "files.rea?_file", "files.reaad_file", 0 },
		{ "files.a.*", "files.a.b", 1 },
		{ "files.a.*", "files.ab", 0 },
		{ "*.read_file", "files.read_file", 1 },
		{ "*.read_file", "jira.read_file", 1 },
		/* `*` never crosses the server/tool dot */
		{ "*.read_file", "a.b.read_file", 0 },
		{ "f*.x", "files.x", 1 },
		{ "f*.x", "files.y.x", 0 },
		{ "fil?s.*", "files.x", 1 },
		{ "fil?s.*", "filesystem.x", 0 },
		{ "*", "files.read_file", 1 },
		{ "*", "a.b.c", 1 },
		{ "*", "x", 1 },
		/* dotless: the whole id, dots included */
		{ "*write*", "files.write_file", 1 },
		{ "*write*", "jira.rewrite", 1 },
		{ "*write*", "files.read_file", 0 },
		{ "files*", "files.read_file", 1 },
		{ "files*", "filesystem.x", 1 },
		{ "files*", "jira.files", 0 },
		/* literal specials of other globs */
		{ "jira.[ab]", "jira.a", 0 },
		{ "jira.[ab]", "jira.[ab]", 1 },
		{ "jira.a\\\\*", "jira.a\\x", 1 },	/* config "a\\*" */
		{ "jira.a\\\\*", "jira.ax", 0 },
	};
	struct mcpbroker_conf	*conf;
	char			 rule[256];
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(rule, sizeof(rule), "allow tool \"%s\"\n",
		    cases[i].glob);
		conf = conf_of(rule);
		if ((decide(conf, &alice, cases[i].id, "{}") == POLICY_ALLOW) !=
		    cases[i].match)
			fail_msg("glob %s, id %s: expected %s", cases[i].glob,
			    cases[i].id, cases[i].match ? "match" : "none");
		config_free(conf);
	}
}

/* One prefix rule against many paths.  path may hold a NUL (len). */
struct path_case {
	const char	*path;
	size_t		 len;		/* 0: strlen */
	int		 match;
};

static void
check_paths(const char *prefix, const struct path_case *cases, size_t n)
{
	struct mcpbroker_conf	*conf;
	struct json_object	*args;
	struct policy_decision	 d;
	char			 rule[256];
	size_t			 i, len;

	snprintf(rule, sizeof(rule), "allow tool \"files.read_file\" "
	    "where path prefix \"%s\"\n", prefix);
	conf = conf_of(rule);
	for (i = 0; i < n; i++) {
		len = cases[i].len != 0 ? cases[i].len : strlen(cases[i].path);
		args = json_object_new_object();
		json_object_object_add(args, "path",
		    json_object_new_string_len(cases[i].path, (int)len));
		policy_decide(&conf->c_rules, &alice, "files.read_file", args,
		    T0, &d);
		json_object_put(args);
		if ((d.pd_action == POLICY_ALLOW) != cases[i].match)
			fail_msg("prefix %s, path %s: expected %s", prefix,
			    cases[i].path, cases[i].match ? "allow" : "deny");
	}
	config_free(conf);
}

static void
test_prefix_traversal(void **state)
{
	static const struct path_case cases[] = {
		{ "/srv/share/public/a.txt", 0, 1 },
		{ "/srv/share/public/sub/dir/a.txt", 0, 1 },
		{ "/srv/share/public", 0, 1 },		/* the directory */
		{ "/srv/share/public/", 0, 1 },
		{ "/srv/share/public/../private/x", 0, 0 },
		{ "/srv/share/public/./../../etc", 0, 0 },
		{ "/srv/share/public/a/../../private", 0, 0 },
		{ "/srv/share/public/a/../b", 0, 1 },
		{ "/srv/share/public/a/../../public/b", 0, 1 },
		{ "//srv/share/public/a", 0, 1 },
		{ "/srv//share///public/./a", 0, 1 },
		{ "/srv/share/publicity/x", 0, 0 },
		{ "/srv/share/public2", 0, 0 },
		{ "/srv/share/publi", 0, 0 },
		{ "/srv/share", 0, 0 },
		{ "srv/share/public/x", 0, 0 },	/* relative */
		{ "./srv/share/public/x", 0, 0 },
		{ "/srv/share/public/%2e%2e/x", 0, 1 },	/* literal name */
		{ "/srv/share/public%2f..%2f..%2fetc", 0, 0 },
		{ "/srv/share/public/...", 0, 1 },
		{ "/srv/share/public\\..\\private", 0, 0 },
		{ "/../srv/share/public/a", 0, 0 },	/* above the root */
		{ "/srv/share/public/../../../../x", 0, 0 },
		{ "/srv/share/public/a\0/../../private", 34, 0 },
		{ "/srv/share/public/a\0", 20, 0 },
		{ "", 0, 0 },
		{ "/", 0, 0 },
		{ "~/srv/share/public/x", 0, 0 },
		{ "file:///srv/share/public/x", 0, 0 },
	};

	(void)state;
	check_paths("/srv/share/public/", cases, sizeof(cases) /
	    sizeof(cases[0]));
	/* The trailing slash changes nothing. */
	check_paths("/srv/share/public", cases, sizeof(cases) /
	    sizeof(cases[0]));
	check_paths("/srv//share/./public/", cases, sizeof(cases) /
	    sizeof(cases[0]));
}

static void
test_prefix_other_roots(void **state)
{
	static const struct path_case root[] = {
		{ "/", 0, 1 },
		{ "/etc/passwd", 0, 1 },
		{ "//x/../y", 0, 1 },
		{ "/..", 0, 0 },
		{ "etc/passwd", 0, 0 },
	};
	static const struct path_case relative[] = {
		{ "docs", 0, 1 },
		{ "docs/a", 0, 1 },
		{ "./docs/a", 0, 1 },
		{ "x/../docs/a", 0, 1 },
		{ "docs2/a", 0, 0 },
		{ "/docs/a", 0, 0 },
		{ "../docs/a", 0, 0 },
		{ "docs/../../docs/a", 0, 0 },
		{ "", 0, 0 },
	};
	static const struct path_case nothing[] = {
		{ "", 0, 0 },
		{ ".", 0, 0 },
		{ "a", 0, 0 },
		{ "/a", 0, 0 },
	};

	(void)state;
	check_paths("/", root, sizeof(root) / sizeof(root[0]));
	check_paths("docs/", relative, sizeof(relative) /
	    sizeof(relative[0]));
	check_paths("./docs", relative, sizeof(relative) /
	    sizeof(relative[0]));
	check_paths("", nothing, sizeof(nothing) / sizeof(nothing[0]));
	check_paths(".", nothing, sizeof(nothing) / sizeof(nothing[0]));
	check_paths("/../a", nothing, sizeof(nothing) / sizeof(nothing[0]));
}

static void
test_prefix_long_paths(void **state)
{
	struct path_case	 c[3];
	char			*at, *over, *dots;
	size_t			 n;

	(void)state;
	/* POLICY_PATH_MAX bytes in all is the longest accepted. */
	at = malloc(POLICY_PATH_MAX + 2);
	over = malloc(POLICY_PATH_MAX + 2);
	assert_non_null(at);
	assert_non_null(over);
	n = strlen("/srv/share/public/");
	memcpy(at, "/srv/share/public/", n);
	memset(at + n, 'a', POLICY_PATH_MAX - n);
	at[POLICY_PATH_MAX] = '\0';
	memcpy(over, at, POLICY_PATH_MAX);
	strcpy(over + POLICY_PATH_MAX, "a");
	/* Many ".." in a long path: each pops one of the "x/" before it. */
	dots = malloc(POLICY_PATH_MAX);
	assert_non_null(dots);
	strcpy(dots, "/srv/share/public");
	for (n = 0; n < 500; n++)
		strcat(dots, "/x");
	for (n = 0; n < 500; n++)
		strcat(dots, "/..");
	strcat(dots, "/y");
	c[0] = (struct path_case){ at, 0, 1 };
	c[1] = (struct path_case){ over, 0, 0 };
	c[2] = (struct path_case){ dots, 0, 1 };
	check_paths("/srv/share/public/", c, 3);
	strcat(dots, "/../..");
	c[0] = (struct path_case){ dots, 0, 0 };
	check_paths("/srv/share/public/", c, 1);
	free(at);
	free(over);
	free(dots);
}

static void
test_equals_matches_max_length(void **state)
{
	struct mcpbroker_conf	*conf;
	struct json_object	*args;
	struct policy_decision	 d;
	char			*big;

	(void)state;
	conf = conf_of("allow tool \"jira.get\" where key equals \"ABC-1\"\n"
	    "allow tool \"jira.search\" where jql matches \"project = *\"\n"
	    "allow tool \"jira.note\" where text max-length 5\n"
	    "allow tool \"jira.both\" where key matches \"ABC-?\" "
	    "where key max-length 5\n");
	assert_int_equal(decide(conf, &bob, "jira.get", "{\"key\":\"ABC-1\"}"),
	    POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "jira.get",
	    "{\"key\":\"ABC-12\"}"), POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "jira.get",
	    "{\"key\":\"abc-1\"}"), POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "jira.get",
	    "{\"key\":\"ABC-1\\u0000x\"}"), POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "jira.get",
	    "{\"Key\":\"ABC-1\"}"), POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "jira.get",
	    "{\"key\":[\"ABC-1\"]}"), POLICY_DENY);

	assert_int_equal(decide(conf, &bob, "jira.search",
	    "{\"jql\":\"project = X and a/b\"}"), POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "jira.search",
	    "{\"jql\":\"project = \"}"), POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "jira.search",
	    "{\"jql\":\" project = X\"}"), POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "jira.search",
	    "{\"jql\":\"project = X\\u0000\"}"), POLICY_DENY);

	/* max-length: bytes of a string, the compact JSON of anything else */
	assert_int_equal(decide(conf, &bob, "jira.note", "{\"text\":\"12345\"}"),
	    POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "jira.note",
	    "{\"text\":\"123456\"}"), POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "jira.note", "{\"text\":\"\"}"),
	    POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "jira.note",
	    "{\"text\":\"\u00e9\u00e9\u00e9\"}"), POLICY_DENY);	/* 6 bytes */
	assert_int_equal(decide(conf, &bob, "jira.note", "{\"text\":12345}"),
	    POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "jira.note", "{\"text\":123456}"),
	    POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "jira.note",
	    "{\"text\":[1, 2]}"), POLICY_ALLOW);		/* [1,2] */
	assert_int_equal(decide(conf, &bob, "jira.note",
	    "{\"text\":[1,2,3]}"), POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "jira.note", "{\"text\":null}"),
	    POLICY_ALLOW);					/* null */
	assert_int_equal(decide(conf, &bob, "jira.note", "{}"), POLICY_DENY);

	/* Every condition must hold. */
	assert_int_equal(decide(conf, &bob, "jira.both", "{\"key\":\"ABC-7\"}"),
	    POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "jira.both", "{\"key\":\"ABD-7\"}"),
	    POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "jira.both", "{\"key\":\"ABC-77\"}"),
	    POLICY_DENY);

	/* A huge value against a glob that makes naive matchers explode. */
	config_free(conf);
	conf = conf_of("allow tool \"jira.q\" where q matches "
	    "\"*a*a*a*a*a*a*a*a*b\"\n");
	big = malloc(1 << 20);
	assert_non_null(big);
	memset(big, 'a', (1 << 20) - 1);
	big[(1 << 20) - 1] = '\0';
	args = json_object_new_object();
	json_object_object_add(args, "q", json_object_new_string(big));
	policy_decide(&conf->c_rules, &bob, "jira.q", args, T0, &d);
	assert_int_equal(d.pd_action, POLICY_DENY);
	json_object_put(args);
	free(big);
	config_free(conf);
}

static void
test_missing_and_mistyped_arguments(void **state)
{
	static const char *const bad[] = {
		"{}",
		"{\"other\":\"/srv/share/public/a\"}",
		"{\"path\":null}",
		"{\"path\":1}",
		"{\"path\":true}",
		"{\"path\":[\"/srv/share/public/a\"]}",
		"{\"path\":{\"path\":\"/srv/share/public/a\"}}",
		"[\"/srv/share/public/a\"]",
		"\"/srv/share/public/a\"",
	};
	struct mcpbroker_conf	*conf;
	size_t			 i;

	(void)state;
	conf = conf_of("allow tool \"files.read_file\" where path prefix "
	    "\"/srv/share/public/\"\n"
	    "allow tool \"files.read_file\" where path equals \"x\"\n"
	    "allow tool \"files.read_file\" where path matches \"*\"\n"
	    "allow tool \"files.stat\" where path max-length 100\n"
	    "allow tool \"files.list\"\n");
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (decide(conf, &alice, "files.read_file", bad[i]) !=
		    POLICY_DENY)
			fail_msg("arguments %s were allowed", bad[i]);
	assert_int_equal(decide(conf, &alice, "files.stat", "{}"),
	    POLICY_DENY);
	assert_int_equal(decide(conf, &alice, "files.stat", "[1]"),
	    POLICY_DENY);
	/* Without conditions, arguments do not matter. */
	assert_int_equal(decide(conf, &alice, "files.list", "[1]"),
	    POLICY_ALLOW);
	/* A condition that fails passes on to the next rule. */
	assert_int_equal(decided_by(conf, &alice, "files.read_file",
	    "{\"path\":\"x\"}"), 2);
	assert_int_equal(decided_by(conf, &alice, "files.read_file",
	    "{\"path\":\"y\"}"), 3);
	config_free(conf);
}

/*
 * A deny or confirm rule applies to a call it cannot check: a path that
 * does not normalise, is relative against an absolute prefix or absolute
 * against a relative one, a value of another type, a NUL.  Without that,
 * the allow rule below it let such a call through.  An allow rule still
 * needs its conditions to hold.
 */
#define DENY_ETC	"deny tool \"files.*\" where path prefix \"/etc\"\n" \
			"allow tool \"files.*\"\n"
#define DENY_REL	"deny tool \"files.*\" where path prefix \"rel/dir\"\n" \
			"allow tool \"files.*\"\n"
/* A prefix that names no directory: nothing is known to be outside it. */
#define DENY_NOWHERE	"deny tool \"files.*\" where path prefix " \
			"\"/../etc\"\n" \
			"allow tool \"files.*\"\n"
#define CONFIRM_ETC	"confirm tool \"files.*\" where path prefix \"/etc\"\n" \
			"allow tool \"files.*\"\n"
#define ALLOW_SRV	"allow tool \"files.*\" where path prefix \"/srv\"\n"

static void
test_deny_what_cannot_be_checked(void **state)
{
	static const struct {
		const char		*rules, *args;
		enum policy_action	 want;
	} cases[] = {
		{ DENY_ETC, "{\"path\":\"/etc/shadow\"}", POLICY_DENY },
		{ DENY_ETC, "{\"path\":\"/../etc/shadow\"}", POLICY_DENY },
		{ DENY_ETC, "{\"path\":\"etc/shadow\"}", POLICY_DENY },
		{ DENY_ETC, "{\"path\":\"./etc/shadow\"}", POLICY_DENY },
		{ DENY_ETC, "{\"path\":[\"/etc/shadow\"]}", POLICY_DENY },
		{ DENY_ETC, "{\"path\":{\"p\":\"/etc/shadow\"}}", POLICY_DENY },
		{ DENY_ETC, "{\"path\":7}", POLICY_DENY },
		{ DENY_ETC, "{\"path\":\"/etc/shadow\\u0000x\"}", POLICY_DENY },
		{ DENY_ETC, "[\"/etc/shadow\"]", POLICY_DENY },
		{ DENY_ETC, "{\"path\":\"/srv/a\"}", POLICY_ALLOW },
		{ DENY_ETC, "{\"path\":\"/etc2/a\"}", POLICY_ALLOW },
		{ DENY_ETC, "{\"path\":\"/srv/../srv/a\"}", POLICY_ALLOW },
		{ DENY_ETC, "{}", POLICY_ALLOW },	/* no path to check */
		{ DENY_ETC, "{\"other\":\"/etc/shadow\"}", POLICY_ALLOW },
		/* The server's directory, under a relative prefix, is unknown. */
		{ DENY_REL, "{\"path\":\"/rel/dir/a\"}", POLICY_DENY },
		{ DENY_REL, "{\"path\":\"rel/dir/a\"}", POLICY_DENY },
		{ DENY_REL, "{\"path\":\"../x\"}", POLICY_DENY },
		{ DENY_REL, "{\"path\":\"other/a\"}", POLICY_ALLOW },
		{ DENY_NOWHERE, "{\"path\":\"/etc/shadow\"}", POLICY_DENY },
		{ DENY_NOWHERE, "{\"path\":\"/srv/a\"}", POLICY_DENY },
		/* What a confirm rule cannot check, a person sees. */
		{ CONFIRM_ETC, "{\"path\":\"/../etc/shadow\"}", POLICY_CONFIRM },
		{ CONFIRM_ETC, "{\"path\":\"etc/shadow\"}", POLICY_CONFIRM },
		{ CONFIRM_ETC, "{\"path\":\"/srv/a\"}", POLICY_ALLOW },
		{ ALLOW_SRV, "{\"path\":\"/../srv/a\"}", POLICY_DENY },
	};
	struct mcpbroker_conf	*conf;
	struct json_object	*args;
	struct policy_decision	 d;
	char			*big;
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		conf = conf_of(cases[i].rules);
		if (decide(conf, &alice, "files.read_file", cases[i].args) !=
		    cases[i].want)
			fail_msg("%s%s: not %s", cases[i].rules, cases[i].args,
			    policy_action_str(cases[i].want));
		config_free(conf);
	}
	/* Too long to normalise: the deny rule says why it applied. */
	big = malloc(POLICY_PATH_MAX + 64);
	assert_non_null(big);
	memset(big, 'a', POLICY_PATH_MAX + 63);
	big[0] = '/';
	big[POLICY_PATH_MAX + 63] = '\0';
	args = json_object_new_object();
	json_object_object_add(args, "path", json_object_new_string(big));
	conf = conf_of(DENY_ETC);
	policy_decide(&conf->c_rules, &alice, "files.read_file", args, T0, &d);
	assert_int_equal(d.pd_action, POLICY_DENY);
	assert_non_null(strstr(d.pd_reason, "could not be checked"));
	json_object_put(args);
	free(big);
	config_free(conf);
}

static void
test_listing(void **state)
{
	struct mcpbroker_conf	*conf;
	struct policy_decision	 d;
	int			 i;

	(void)state;
	policy_rates_reset();
	conf = conf_of("deny tool \"files.read_file\" where path prefix "
	    "\"/srv/secret\"\n"
	    "allow role \"analyst\" tool \"files.read_file\" where path "
	    "prefix \"/srv/share/public/\"\n"
	    "deny tool \"files.write_file\"\n"
	    "allow tool \"files.*\" rate 2/minute\n"
	    "confirm tool \"shell.*\" where cmd matches \"ls *\"\n");
	/* The conditional deny may not apply; the conditional allow may. */
	assert_int_equal(decide_at(conf, &alice, "files.read_file", NULL, T0,
	    &d), POLICY_ALLOW);
	assert_int_equal(d.pd_rule->pr_line, 2);
	assert_string_equal(d.pd_reason, "allowed by rule at t.conf:2 if its "
	    "argument conditions hold");
	/* The call itself is decided on its arguments. */
	assert_int_equal(decided_by(conf, &alice, "files.read_file",
	    "{\"path\":\"/srv/secret/x\"}"), 1);
	assert_int_equal(decide(conf, &alice, "files.read_file",
	    "{\"path\":\"/srv/secret/x\"}"), POLICY_DENY);
	/* bob's role misses rule 2: rule 4 lists it. */
	assert_int_equal(decided_by(conf, &bob, "files.read_file", NULL), 4);
	assert_int_equal(decide(conf, &bob, "files.write_file", NULL),
	    POLICY_DENY);
	assert_int_equal(decide(conf, &bob, "shell.run", NULL),
	    POLICY_CONFIRM);
	assert_int_equal(decide(conf, &bob, "jira.search", NULL),
	    POLICY_DENY);
	/* Listing never spends the rate... */
	for (i = 0; i < 100; i++)
		assert_int_equal(decide(conf, &bob, "files.list", NULL),
		    POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "files.list", "{}"),
	    POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "files.list", "{}"),
	    POLICY_ALLOW);
	assert_int_equal(decide(conf, &bob, "files.list", "{}"),
	    POLICY_DENY);
	/* ...nor is refused by it. */
	assert_int_equal(decide_at(conf, &bob, "files.list", NULL, T0, &d),
	    POLICY_ALLOW);
	assert_string_equal(d.pd_reason, "allowed by rule at t.conf:4 (rate "
	    "limit applies per call)");
	config_free(conf);
	policy_rates_reset();
}

static void
test_rate_limits(void **state)
{
	struct mcpbroker_conf	*conf;
	struct policy_decision	 d;
	int			 i;

	(void)state;
	policy_rates_reset();
	conf = conf_of("allow tool \"jira.search\" where q max-length 10 "
	    "rate 3/minute\n"
	    "confirm tool \"shell.*\" rate 1/hour\n"
	    "deny tool \"files.*\" rate 1/second\n"
	    "allow tool \"jira.*\" rate 2/second\n");
	for (i = 0; i < 3; i++)
		assert_int_equal(decide_at(conf, &alice, "jira.search",
		    "{\"q\":\"x\"}", T0 + i, &d), POLICY_ALLOW);
	assert_int_equal(decide_at(conf, &alice, "jira.search", "{\"q\":\"x\"}",
	    T0 + 10, &d), POLICY_DENY);
	assert_ptr_equal(d.pd_rule, TAILQ_FIRST(&conf->c_rules));
	assert_string_equal(d.pd_reason,
	    "rate limit of rule at t.conf:1: 3 per minute");
	/* Per user: a name within a tenant. */
	assert_int_equal(decide_at(conf, &bob, "jira.search", "{\"q\":\"x\"}",
	    T0 + 10, &d), POLICY_ALLOW);
	assert_int_equal(decide_at(conf, &alice_beta, "jira.search",
	    "{\"q\":\"x\"}", T0 + 10, &d), POLICY_ALLOW);
	/* A call its conditions refuse does not count, nor match. */
	assert_int_equal(decide_at(conf, &bob, "jira.search",
	    "{\"q\":\"01234567890\"}", T0 + 10, &d), POLICY_ALLOW);
	assert_int_equal(d.pd_rule->pr_line, 4);
	assert_int_equal(decide_at(conf, &bob, "jira.search", "{\"q\":\"x\"}",
	    T0 + 11, &d), POLICY_ALLOW);
	assert_int_equal(decide_at(conf, &bob, "jira.search", "{\"q\":\"x\"}",
	    T0 + 12, &d), POLICY_ALLOW);
	assert_int_equal(decide_at(conf, &bob, "jira.search", "{\"q\":\"x\"}",
	    T0 + 13, &d), POLICY_DENY);
	/* Still in alice's window, then a new one. */
	assert_int_equal(decide_at(conf, &alice, "jira.search", "{\"q\":\"x\"}",
	    T0 + 59999, &d), POLICY_DENY);
	for (i = 0; i < 3; i++)
		assert_int_equal(decide_at(conf, &alice, "jira.search",
		    "{\"q\":\"x\"}", T0 + 60000 + i, &d), POLICY_ALLOW);
	assert_int_equal(decide_at(conf, &alice, "jira.search", "{\"q\":\"x\"}",
	    T0 + 60003, &d), POLICY_DENY);
	/* A clock that goes back stays in the window. */
	assert_int_equal(decide_at(conf, &alice, "jira.search", "{\"q\":\"x\"}",
	    T0, &d), POLICY_DENY);

	/* confirm counts; deny ignores its rate. */
	assert_int_equal(decide_at(conf, &alice, "shell.run", "{}", T0, &d),
	    POLICY_CONFIRM);
	assert_int_equal(decide_at(conf, &alice, "shell.run", "{}", T0 + 1, &d),
	    POLICY_DENY);
	assert_string_equal(d.pd_reason,
	    "rate limit of rule at t.conf:2: 1 per hour");
	assert_int_equal(decide_at(conf, &alice, "shell.run", "{}",
	    T0 + 3600 * 1000, &d), POLICY_CONFIRM);
	for (i = 0; i < 3; i++) {
		assert_int_equal(decide_at(conf, &alice, "files.x", "{}", T0,
		    &d), POLICY_DENY);
		assert_string_equal(d.pd_reason, "denied by rule at t.conf:3");
	}

	/* Counters are per rule; a caller without a user has one too. */
	assert_int_equal(decide_at(conf, &nobody, "jira.other", "{}", T0, &d),
	    POLICY_ALLOW);
	assert_int_equal(decide_at(conf, NULL, "jira.other", "{}", T0, &d),
	    POLICY_ALLOW);
	assert_int_equal(decide_at(conf, &nobody, "jira.other", "{}", T0, &d),
	    POLICY_DENY);
	assert_string_equal(d.pd_reason,
	    "rate limit of rule at t.conf:4: 2 per second");

	policy_rates_reset();
	assert_int_equal(decide_at(conf, &alice, "jira.search", "{\"q\":\"x\"}",
	    T0 + 60004, &d), POLICY_ALLOW);
	assert_int_equal(decide_at(conf, &nobody, "jira.other", "{}", T0, &d),
	    POLICY_ALLOW);
	config_free(conf);
	policy_rates_reset();
}

static void
test_rate_table_is_bounded(void **state)
{
	struct mcpbroker_conf	*conf;
	struct policy_caller	 c = { NULL, NULL, NULL, 0 };
	char			 name[32], *longname;
	int			 i;

	(void)state;
	policy_rates_reset();
	conf = conf_of("allow tool \"jira.*\" rate 1/day\n");
	assert_int_equal(decide(conf, &alice, "jira.a", "{}"), POLICY_ALLOW);
	assert_int_equal(decide(conf, &alice, "jira.a", "{}"), POLICY_DENY);
	/* As many other users as the table holds push alice out... */
	for (i = 0; i < POLICY_RATE_MAX_PAIRS; i++) {
		snprintf(name, sizeof(name), "user%d", i);
		c.ps_user = name;
		assert_int_equal(decide(conf, &c, "jira.a", "{}"),
		    POLICY_ALLOW);
	}
	assert_int_equal(decide(conf, &alice, "jira.a", "{}"), POLICY_ALLOW);
	/* ...while the most recent ones are still counted. */
	c.ps_user = name;
	assert_int_equal(decide(conf, &c, "jira.a", "{}"), POLICY_DENY);

	/* Very long user names are bounded (and only ever share more). */
	longname = malloc(100000);
	assert_non_null(longname);
	memset(longname, 'u', 99999);
	longname[99999] = '\0';
	c.ps_user = longname;
	assert_int_equal(decide(conf, &c, "jira.a", "{}"), POLICY_ALLOW);
	longname[99998] = 'v';
	assert_int_equal(decide(conf, &c, "jira.a", "{}"), POLICY_DENY);
	free(longname);
	config_free(conf);
	policy_rates_reset();
}

static char *
explain(struct mcpbroker_conf *conf, const struct policy_caller *c,
    const char *tool)
{
	char	*buf;
	size_t	 len;
	FILE	*fp;

	assert_non_null(fp = open_memstream(&buf, &len));
	policy_explain(&conf->c_rules, c, tool, fp);
	fclose(fp);
	return buf;
}

static void
test_explain(void **state)
{
	struct mcpbroker_conf	*conf;
	char			*out;

	(void)state;
	conf = conf_of("deny tool \"files.write_*\" \"files.move_*\"\n"
	    "deny user \"mallory\" tool \"*\"\n"
	    "deny tool \"files.read_file\" where path prefix \"/srv/secret\"\n"
	    "allow role \"analyst\" tool \"files.read_file\" where path "
	    "prefix \"/srv/share/public/\" rate 30/minute\n"
	    "allow role \"admin\" tool \"*\"\n"
	    "allow tool \"files.read_file\"\n");
	out = explain(conf, &alice, "files.read_file");
	assert_string_equal(out,
	    "explain user \"alice\" tenant \"acme\" roles \"staff\" "
	    "\"analyst\" \"ops\" tool \"files.read_file\"\n"
	    "t.conf:1: deny tool \"files.write_*\" \"files.move_*\": subject "
	    "matches, tool does not match\n"
	    "t.conf:2: deny user \"mallory\" tool \"*\": subject does not "
	    "match\n"
	    "t.conf:3: deny tool \"files.read_file\" where \"path\" prefix "
	    "\"/srv/secret\": subject matches, tool matches, argument "
	    "conditions checked at call time (denies calls they match, or "
	    "that cannot be checked against them; evaluation goes on)\n"
	    "t.conf:4: allow role \"analyst\" tool \"files.read_file\" where "
	    "\"path\" prefix \"/srv/share/public/\" rate 30/minute: subject "
	    "matches, tool matches, argument conditions checked at call time "
	    "-> decides: allow (rate limit applies per call)\n"
	    "t.conf:5: allow role \"admin\" tool \"*\": subject does not "
	    "match (not reached)\n"
	    "t.conf:6: allow tool \"files.read_file\": subject matches, tool "
	    "matches (not reached)\n"
	    "decision: allow: allowed by rule at t.conf:4 if its argument "
	    "conditions hold\n");
	free(out);

	out = explain(conf, &bob, "files.write_file");
	assert_non_null(strstr(out, "\nt.conf:1: deny tool \"files.write_*\" "
	    "\"files.move_*\": subject matches, tool matches -> decides: "
	    "deny\n"));
	assert_non_null(strstr(out, "\ndecision: deny: denied by rule at "
	    "t.conf:1\n"));
	free(out);

	out = explain(conf, &nobody, "jira.x\n");
	assert_non_null(strstr(out, "explain user \"\" tenant \"\" roles "
	    "tool \"jira.x\\x0a\"\n"));
	assert_non_null(strstr(out, "\nt.conf:6: allow tool "
	    "\"files.read_file\": subject matches, tool does not match\n"
	    "decision: deny: no rule allows jira.x?\n"));
	free(out);
	config_free(conf);
}

static enum policy_action
decide_kind(struct mcpbroker_conf *conf, enum policy_kind kind,
    const struct policy_caller *c, const char *id, const char *args,
    struct policy_decision *d)
{
	struct json_object *a = NULL;

	if (args != NULL)
		assert_non_null(a = json_tokener_parse(args));
	policy_decide_kind(&conf->c_rules, kind, c, id, a, T0, d);
	json_object_put(a);
	return d->pd_action;
}

/* A rule is about tools, resources or prompts, and answers only that. */
static void
test_kinds(void **state)
{
	struct mcpbroker_conf	*conf;
	struct policy_decision	 d;
	char			*out;

	(void)state;
	conf = conf_of("deny resource \"files.file:///srv/secret/*\"\n"
	    "allow role \"analyst\" resource \"files.*\"\n"
	    "allow prompt \"jira.summarize\" where style equals \"short\" "
	    "rate 1/minute\n"
	    "allow tool \"*\"\n");
	/* tool rules say nothing of resources and prompts, nor the reverse */
	assert_int_equal(decide_kind(conf, POLICY_RESOURCE, &bob,
	    "jira.doc://x", NULL, &d), POLICY_DENY);
	assert_null(d.pd_rule);
	assert_string_equal(d.pd_reason, "no rule allows resource "
	    "jira.doc://x");
	assert_int_equal(decide(conf, &bob, "files.file:///srv/a", "{}"),
	    POLICY_ALLOW);
	assert_int_equal(decided_by(conf, &bob, "files.file:///srv/a", "{}"),
	    4);
	/* globs split at the first dot, the URI keeps its own */
	assert_int_equal(decide_kind(conf, POLICY_RESOURCE, &alice,
	    "files.file:///srv/share/a.txt", NULL, &d), POLICY_ALLOW);
	assert_int_equal(d.pd_rule->pr_line, 2);
	assert_int_equal(decide_kind(conf, POLICY_RESOURCE, &alice,
	    "files.file:///srv/secret/k", NULL, &d), POLICY_DENY);
	assert_int_equal(d.pd_rule->pr_line, 1);
	assert_int_equal(decide_kind(conf, POLICY_RESOURCE, &alice,
	    "filesystem.file:///x", NULL, &d), POLICY_DENY);
	/* prompts: arguments and rates as for tools */
	assert_int_equal(decide_kind(conf, POLICY_PROMPT, &bob,
	    "jira.summarize", NULL, &d), POLICY_ALLOW);
	assert_int_equal(decide_kind(conf, POLICY_PROMPT, &bob,
	    "jira.summarize", "{\"style\": \"long\"}", &d), POLICY_DENY);
	assert_int_equal(decide_kind(conf, POLICY_PROMPT, &bob,
	    "jira.summarize", "{\"style\": \"short\"}", &d), POLICY_ALLOW);
	assert_int_equal(decide_kind(conf, POLICY_PROMPT, &bob,
	    "jira.summarize", "{\"style\": \"short\"}", &d), POLICY_DENY);
	assert_non_null(strstr(d.pd_reason, "rate limit"));
	assert_int_equal(decide_kind(conf, POLICY_TOOL, &bob,
	    "jira.summarize", "{}", &d), POLICY_ALLOW);
	/* explain is about tools; the other rules say what they are */
	out = explain(conf, &alice, "files.read");
	assert_non_null(strstr(out, "t.conf:1: deny resource "
	    "\"files.file:///srv/secret/*\": a resource rule, not about "
	    "tools\n"));
	assert_non_null(strstr(out, "t.conf:3: allow prompt "
	    "\"jira.summarize\" where \"style\" equals \"short\" rate "
	    "1/minute: a prompt rule, not about tools\n"));
	assert_non_null(strstr(out, "decision: allow: allowed by rule at "
	    "t.conf:4\n"));
	free(out);
	config_free(conf);
	policy_rates_reset();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_match_deny_before_allow),
		cmocka_unit_test(test_first_match_allow_before_deny),
		cmocka_unit_test(test_no_match_denies),
		cmocka_unit_test(test_subjects),
		cmocka_unit_test(test_tool_globs),
		cmocka_unit_test(test_deny_what_cannot_be_checked),
		cmocka_unit_test(test_prefix_traversal),
		cmocka_unit_test(test_prefix_other_roots),
		cmocka_unit_test(test_prefix_long_paths),
		cmocka_unit_test(test_equals_matches_max_length),
		cmocka_unit_test(test_missing_and_mistyped_arguments),
		cmocka_unit_test(test_listing),
		cmocka_unit_test(test_rate_limits),
		cmocka_unit_test(test_rate_table_is_bounded),
		cmocka_unit_test(test_explain),
		cmocka_unit_test(test_kinds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
