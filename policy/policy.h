/*
 * Policy rules as the config parser builds them.  Evaluation (first match
 * wins, no match = deny), argument constraints and `policy explain` live
 * beside this header; the structures are shared with broker/parse.c.
 */
#ifndef MCPBROKER_POLICY_H
#define MCPBROKER_POLICY_H

#include <sys/queue.h>
#include <stddef.h>

enum policy_action {
	POLICY_ALLOW,
	POLICY_DENY,
	POLICY_CONFIRM,
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
	enum policy_subject	 pr_subject;
	char			*pr_subject_name;	/* NULL for SUBJECT_ANY */
	char		       **pr_tools;	/* NULL-terminated globs over SERVER.TOOL */
	size_t			 pr_ntools;
	struct policy_cond_list	 pr_conds;
	unsigned int		 pr_rate_count;	/* 0: no rate limit */
	unsigned int		 pr_rate_period;	/* seconds */
	int			 pr_line;
	char			*pr_file;
};
TAILQ_HEAD(policy_rule_list, policy_rule);

const char	*policy_action_str(enum policy_action);
const char	*policy_subject_str(enum policy_subject);
const char	*policy_op_str(enum policy_op);

#endif
