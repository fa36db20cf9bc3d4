/*
 * Policy decisions per second with a large rule set.
 *
 * The rules come from config text through the real parser: RULES rules,
 * each for its own role and server, with a path condition on every third.
 * The caller holds one role, so every rule before its own is examined and
 * passed over: the position of the deciding rule is the cost.  Cases:
 * the deciding rule first, in the middle, last (with a path condition to
 * normalise), no rule at all (every rule examined, then deny), and the
 * listing question (no arguments).  Side by side, in the same run, the
 * cost of parsing the call's arguments as JSON, which every tool call pays
 * anyway, as a yardstick.
 *
 *	policy_bench [RULES [SECONDS]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "broker/config.h"
#include "policy/policy.h"

#define ARGS_TEXT	"{\"path\": \"/srv/share/public/reports/2026/q3.md\"," \
			" \"encoding\": \"utf-8\"}"

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Rule i: role "rI" may use server sI's tools (every third: a path). */
static struct mcpbroker_conf *
conf_with_rules(int nrules)
{
	struct mcpbroker_conf	*conf;
	char			*text = NULL;
	size_t			 len = 0;
	FILE			*fp;
	int			 i;

	if ((fp = open_memstream(&text, &len)) == NULL)
		return NULL;
	for (i = 0; i < nrules; i++) {
		if (i % 3 == 2)
			fprintf(fp, "allow role \"r%d\" tool \"s%d.read_*\" "
			    "where path prefix \"/srv/share/public/\"\n", i, i);
		else
			fprintf(fp, "allow role \"r%d\" tool \"s%d.*\"\n", i, i);
	}
	for (i = 0; i < nrules; i++)
		fprintf(fp, "server \"s%d\" { command \"/bin/true\" }\n", i);
	fclose(fp);
	conf = config_parse_buffer("bench.conf", text, len, stderr);
	free(text);
	return conf;
}

struct bench_case {
	const char	*bc_name;
	int		 bc_rule;	/* the caller's role; -1: none matches */
	int		 bc_list;	/* listing: no arguments */
};

/* Decisions per second for one case, and a check of the decision. */
static double
run_case(struct mcpbroker_conf *conf, const struct bench_case *bc,
    struct json_object *args, double seconds, const char **verdict)
{
	struct policy_decision	 pd;
	struct policy_caller	 pc;
	const char		*roles[1];
	char			 role[32], tool[64];
	double			 start, elapsed;
	unsigned long		 n = 0, i;
	int			 rule = bc->bc_rule < 0 ? 0 : bc->bc_rule;

	snprintf(role, sizeof(role), bc->bc_rule < 0 ? "nobody" : "r%d", rule);
	snprintf(tool, sizeof(tool), "s%d.read_file", rule);
	roles[0] = role;
	memset(&pc, 0, sizeof(pc));
	pc.ps_user = "alice";
	pc.ps_tenant = "acme";
	pc.ps_roles = roles;
	pc.ps_nroles = 1;
	start = now_s();
	do {
		for (i = 0; i < 1000; i++)
			policy_decide(&conf->c_rules, &pc, tool,
			    bc->bc_list ? NULL : args, 1000000, &pd);
		n += 1000;
		elapsed = now_s() - start;
	} while (elapsed < seconds);
	*verdict = policy_action_str(pd.pd_action);
	return (double)n / elapsed;
}

/* The yardstick: parsing the arguments' JSON text. */
static double
run_json_parse(double seconds)
{
	struct json_object	*o;
	double			 start, elapsed;
	unsigned long		 n = 0, i;

	start = now_s();
	do {
		for (i = 0; i < 1000; i++) {
			o = json_tokener_parse(ARGS_TEXT);
			json_object_put(o);
		}
		n += 1000;
		elapsed = now_s() - start;
	} while (elapsed < seconds);
	return (double)n / elapsed;
}

int
main(int argc, char *argv[])
{
	struct mcpbroker_conf	*conf;
	struct json_object	*args;
	const char		*verdict;
	int			 nrules = argc > 1 ? atoi(argv[1]) : 1000;
	double			 seconds = argc > 2 ? atof(argv[2]) : 1.0, rate;
	size_t			 i;

	if (nrules < 3 || seconds <= 0) {
		fprintf(stderr, "usage: policy_bench [RULES>=3 [SECONDS]]\n");
		return 2;
	}
	if ((conf = conf_with_rules(nrules)) == NULL)
		return 1;
	const struct bench_case cases[] = {
		{ "first rule decides (call)", 0, 0 },
		{ "middle rule decides (call)", nrules / 2, 0 },
		{ "last rule decides (call, path prefix)",
		    (nrules - 1) - (nrules - 3) % 3, 0 },
		{ "no rule matches: deny (call)", -1, 0 },
		{ "last rule decides (listing)", nrules - 1, 1 },
	};
	args = json_tokener_parse(ARGS_TEXT);
	printf("%d rules, %.1f s per case\n\n", nrules, seconds);
	printf("| case | decisions/s | µs each | decision |\n");
	printf("|---|---:|---:|---|\n");
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		rate = run_case(conf, &cases[i], args, seconds, &verdict);
		printf("| %s | %.0f | %.2f | %s |\n", cases[i].bc_name, rate,
		    1e6 / rate, verdict);
	}
	rate = run_json_parse(seconds);
	printf("| yardstick: json_tokener_parse of the arguments | %.0f | "
	    "%.2f | - |\n", rate, 1e6 / rate);
	json_object_put(args);
	config_free(conf);
	return 0;
}
