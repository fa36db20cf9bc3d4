/*
 * Policy rules as the config parser builds them.  Evaluation (first match
 * wins, no match = deny), argument constraints and `policy explain` live
 * beside this header; the structures are shared with broker/parse.c.
 */
#ifndef MCPBROKER_POLICY_H
#define MCPBROKER_POLICY_H

#include <sys/queue.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct json_object;

enum policy_action {
	POLICY_ALLOW,
	POLICY_DENY,
	POLICY_CONFIRM,
};

/*
 * What a rule is about.  Ids are "SERVER.NAME" for each: a tool's name, a
 * resource's URI as its server gives it, a prompt's name.
 */
enum policy_kind {
	POLICY_TOOL,
	POLICY_RESOURCE,
	POLICY_PROMPT,
};

enum policy_subject {
	SUBJECT_ANY,		/* no subject: everyone */
	SUBJECT_USER,
	SUBJECT_ROLE,
	SUBJECT_TENANT,
};

enum policy_op {
	COND_PREFIX,		/* path prefix, after normalisation */
	COND_EQUALS,
	COND_MATCHES,		/* glob */
	COND_MAX_LENGTH,
};

struct policy_cond {
	TAILQ_ENTRY(policy_cond) pc_entry;
	char			*pc_arg;	/* argument name */
	enum policy_op		 pc_op;
	char			*pc_value;	/* string operand */
	long long		 pc_num;	/* max-length operand */
};
TAILQ_HEAD(policy_cond_list, policy_cond);

struct policy_rule {
	TAILQ_ENTRY(policy_rule) pr_entry;
	enum policy_action	 pr_action;
	enum policy_kind	 pr_kind;
	enum policy_subject	 pr_subject;
	char			*pr_subject_name;	/* NULL for SUBJECT_ANY */
	char			*pr_subject_tenant;	/* NULL: any */
	char		       **pr_tools;	/* NULL-terminated globs over the ids */
	size_t			 pr_ntools;
	struct policy_cond_list	 pr_conds;
	unsigned int		 pr_rate_count;	/* 0: no rate limit */
	unsigned int		 pr_rate_period;	/* seconds */
	int			 pr_line;
	char			*pr_file;
};
TAILQ_HEAD(policy_rule_list, policy_rule);

const char	*policy_action_str(enum policy_action);
const char	*policy_kind_str(enum policy_kind);
/* glob (`*` and `?`, nothing else special) matches all of s. */
int		 policy_glob_match(const char *glob, const char *s);
const char	*policy_subject_str(enum policy_subject);
const char	*policy_op_str(enum policy_op);

/*
 * Who is calling.  (Named policy_caller, not policy_subject: C puts struct
 * and enum tags in one name space and enum policy_subject is taken.)  Any
 * field may be NULL / empty; such a caller matches only rules whose subject
 * it has.  Names compare exactly (case-sensitive).
 */
struct policy_caller {
	const char		*ps_user;
	const char		*ps_tenant;
	const char *const	*ps_roles;
	size_t			 ps_nroles;
};

struct policy_decision {
	enum policy_action		 pd_action;
	const struct policy_rule	*pd_rule;	/* NULL: no rule matched */
	char				 pd_reason[256];
};

/* Rate counters kept for at most this many (rule, user) pairs. */
#define POLICY_RATE_MAX_PAIRS	10000
/* Longer path arguments fail a prefix condition. */
#define POLICY_PATH_MAX		4096

/*
 * Decide whether caller may call tool_id ("SERVER.TOOL") with args (a JSON
 * object of the call's arguments).  Rules are evaluated top to bottom; the
 * first whose subject, tool glob and every argument condition match decides.
 * No match is a deny.
 *
 * args NULL asks whether to list the tool: argument conditions cannot be
 * checked yet, so an allow or confirm rule with conditions decides as if
 * they held (the call itself is decided again with its arguments), and a
 * deny rule with conditions is passed over (it may not apply).  Listing
 * shows a tool exactly when some call of it could be allowed.  Rate limits
 * apply only when args is not NULL; a call that an allow or confirm rule
 * with a rate decides uses up one of that rule's calls for ps_user, or is
 * denied once they are used up.  now_ms is a monotonic clock.
 */
void	policy_decide(const struct policy_rule_list *,
	    const struct policy_caller *, const char *tool_id,
	    struct json_object *args, uint64_t now_ms,
	    struct policy_decision *);

/* The same for a resource ("SERVER.URI") or prompt ("SERVER.NAME"). */
void	policy_decide_kind(const struct policy_rule_list *, enum policy_kind,
	    const struct policy_caller *, const char *id,
	    struct json_object *args, uint64_t now_ms,
	    struct policy_decision *);

/* Forget every rate counter (tests; a reload that replaces the rules). */
void	policy_rates_reset(void);

/*
 * For `mcpbrokerctl policy explain`: one line per rule, in order, saying
 * whether its subject and tool match and which rule decides the listing
 * question (args NULL above), then a line with the decision.
 */
void	policy_explain(const struct policy_rule_list *,
	    const struct policy_caller *, const char *tool_id, FILE *out);

#endif
