/*
 * Policy rules.  The config parser (broker/parse.c) builds them; evaluation
 * (first match wins, no match = deny) comes here later.
 */

#include "policy/policy.h"

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
