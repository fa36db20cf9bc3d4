/*
 * Metering and budgets.  Every LLM call is one row of detail (who, which
 * conversation, provider, model, tokens, tool calls, cost) and is added to
 * a per-day aggregate (day, tenant, user, provider, model) that outlives
 * the detail: erasing a conversation removes what it said and which calls
 * it made, not the bill.  Budgets and /api/v1/usage read the aggregates.
 */
#ifndef MCPBROKER_CONTROLLER_USAGE_H
#define MCPBROKER_CONTROLLER_USAGE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "broker/config.h"

struct json_object;
struct store_user;

#define AUDIT_KIND_BUDGET	"budget"	/* a budget crossed 80%/100% */

#define BUDGET_WARN_PERCENT	80
#define NUSD_PER_USD		1000000000LL	/* costs are kept in 1e-9 USD */

/* Whose usage it is: a budget applies by tenant, user or role. */
struct usage_who {
	const char		*uw_user;
	const char		*uw_tenant;
	const char *const	*uw_roles;
	size_t			 uw_nroles;
};

/* One LLM call (a round of a turn). */
struct usage_call {
	const char	*uc_conversation;	/* NULL: none */
	const char	*uc_provider;
	const char	*uc_model;
	uint64_t	 uc_input;		/* tokens */
	uint64_t	 uc_output;
	int		 uc_estimated;		/* the provider reported none */
	unsigned int	 uc_tool_calls;
	int64_t		 uc_cost_nusd;
	time_t		 uc_when;
};

/* Where a budget stands in its current period. */
struct budget_status {
	const struct budget_conf *bs_budget;
	const char		*bs_holder;	/* the tenant, or the user */
	double			 bs_used;	/* tokens, or USD */
	double			 bs_before;	/* before the last call */
	time_t			 bs_start;
	time_t			 bs_reset;
};

/*
 * The UTC calendar period of a budget metric that holds `now`: the day or
 * the month, [*start, *reset).  Every budget reads the clock through the
 * caller, so that tests can move it.
 */
void		 budget_period(enum budget_metric, time_t now, time_t *start,
		    time_t *reset);
/* "2026-02-17" for the UTC day of t; buf has at least 11 bytes. */
const char	*usage_day(time_t t, char *buf, size_t len);
/* The call's cost from the provider's price (USD per million tokens). */
int64_t		 usage_cost_nusd(const struct provider_conf *,
		    uint64_t input, uint64_t output);
/* Tokens for text the provider did not count: one per four bytes. */
uint64_t	 usage_estimate(size_t bytes);

#define BUDGET_OVER	(-1)	/* *over is the first one used up */
#define BUDGET_UNKNOWN	(-2)	/* the usage could not be read */

/*
 * Before a call: 0 if every budget that applies has room, else
 * BUDGET_OVER or BUDGET_UNKNOWN.
 */
int	budget_check(const struct mcpbroker_conf *, const struct usage_who *,
	    time_t now, struct budget_status *over);

/*
 * After a call: record it and add it to the day's aggregate, in one
 * transaction.  Then, for each budget that applies and that this call
 * took past 80% or 100% of its limit, crossed() is told (the chat's
 * budget_warning event); the first time in a period a budget passes each
 * mark it is also audited, once, remembered across restarts.
 */
typedef void	(*budget_crossed_fn)(const struct budget_status *, void *);
int	usage_record(const struct mcpbroker_conf *, const struct usage_who *,
	    const struct usage_call *, budget_crossed_fn crossed, void *arg);

/* {scope, name, metric, used, limit, resets_at}. */
struct json_object *budget_status_json(const struct budget_status *);

/* Erasure: a conversation's detail; a user's (aggregates kept without a
 * name); a tenant's, aggregates included (*days: how many rows of them).
 * Inside the caller's transaction when there is one; -1 when the database
 * failed. */
int	usage_erase_conversation(const char *conversation);
int	usage_erase_user(const char *user, const char *tenant);
int	usage_erase_tenant(const char *tenant, int64_t *days);
/* Forget which budgets warned in periods long over. */
void	usage_prune_alerts(time_t now);

/* GET /api/v1/usage and /api/v1/usage/tenant; query is the raw string. */
void	usage_api_user(uint64_t id, const struct store_user *,
	    const char *query);
void	usage_api_tenant(uint64_t id, const struct store_user *,
	    const char *query);

#endif
