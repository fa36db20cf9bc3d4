/*
 * The controller's metrics.  Names and label sets are the interface a
 * monitoring system depends on: change them only with the docs.
 */
#include <stddef.h>

#include "broker/controller_metrics.h"
#include "common/metrics.h"

/* A group commit is one fsync or a few: well under a second. */
static const double	commit_buckets[] = { 0.0005, 0.001, 0.0025, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5 };

static const char *const states[] = { "starting", "ready", "degraded",
    "down" };

static struct {
	struct metric	*llm_calls, *llm_tokens, *llm_duration;
	struct metric	*tool_calls, *tool_duration;
	struct metric	*denials, *budget;
	struct metric	*restarts, *state;
	struct metric	*audit_rows, *audit_commit;
} cm;

void
cmetrics_init(void)
{
	if (cm.llm_calls != NULL)
		return;
	cm.llm_calls = metric_new(METRIC_COUNTER, "mcpbroker_llm_calls_total",
	    "LLM requests by provider, model and how they ended.",
	    "provider,model,outcome", NULL, 0);
	cm.llm_tokens = metric_new(METRIC_COUNTER,
	    "mcpbroker_llm_tokens_total", "Tokens metered, as the provider "
	    "counted them or estimated, by direction (input or output).",
	    "provider,model,direction", NULL, 0);
	cm.llm_duration = metric_new(METRIC_HISTOGRAM,
	    "mcpbroker_llm_call_duration_seconds", "LLM requests from start "
	    "to the end of the answer.", "provider,model",
	    metric_latency_buckets, metric_latency_nbuckets);
	cm.tool_calls = metric_new(METRIC_COUNTER,
	    "mcpbroker_tool_calls_total", "Tool calls that ran, by server, "
	    "tool and outcome (ok, error, cancelled).", "server,tool,outcome",
	    NULL, 0);
	cm.tool_duration = metric_new(METRIC_HISTOGRAM,
	    "mcpbroker_tool_call_duration_seconds", "Tool calls that ran, "
	    "from sending to the result.", "server", metric_latency_buckets,
	    metric_latency_nbuckets);
	cm.denials = metric_new(METRIC_COUNTER,
	    "mcpbroker_policy_denials_total", "Requests refused by policy, "
	    "by what was asked for (tool, resource, prompt).", "kind", NULL,
	    0);
	cm.budget = metric_new(METRIC_COUNTER,
	    "mcpbroker_budget_rejections_total", "LLM calls refused because "
	    "a budget was used up, by the budget's scope.", "scope", NULL, 0);
	cm.restarts = metric_new(METRIC_COUNTER,
	    "mcpbroker_worker_restarts_total", "Restarts of each server's "
	    "worker, as the parent counts them.", "server", NULL, 0);
	cm.state = metric_new(METRIC_GAUGE, "mcpbroker_server_state",
	    "1 for the state each MCP server is in, 0 for the others.",
	    "server,state", NULL, 0);
	cm.audit_rows = metric_new(METRIC_COUNTER,
	    "mcpbroker_audit_rows_total", "Audit trail rows appended, by "
	    "kind.", "kind", NULL, 0);
	cm.audit_commit = metric_new(METRIC_HISTOGRAM,
	    "mcpbroker_audit_commit_duration_seconds", "Group commits of "
	    "queued audit rows, BEGIN to COMMIT.", "", commit_buckets,
	    sizeof(commit_buckets) / sizeof(commit_buckets[0]));
}

void
cmetrics_llm_call(const char *provider, const char *model,
    const char *outcome, double seconds)
{
	metric_add(cm.llm_calls, 1, provider, model, outcome);
	metric_observe(cm.llm_duration, seconds, provider, model);
}

void
cmetrics_llm_tokens(const char *provider, const char *model, uint64_t in,
    uint64_t out)
{
	metric_add(cm.llm_tokens, (double)in, provider, model, "input");
	metric_add(cm.llm_tokens, (double)out, provider, model, "output");
}

void
cmetrics_tool_call(const char *server, const char *tool,
    const char *outcome, uint64_t elapsed_ms)
{
	metric_add(cm.tool_calls, 1, server, tool, outcome);
	metric_observe(cm.tool_duration, (double)elapsed_ms / 1000, server);
}

void
cmetrics_policy_denial(const char *kind)
{
	metric_add(cm.denials, 1, kind);
}

void
cmetrics_budget_rejection(const char *scope)
{
	metric_add(cm.budget, 1, scope);
}

/* The parent's count is the truth; it only grows while we run. */
void
cmetrics_worker_restarts(const char *server, unsigned int restarts)
{
	metric_set(cm.restarts, restarts, server);
}

void
cmetrics_server_state(const char *server, const char *state)
{
	size_t i;

	for (i = 0; i < sizeof(states) / sizeof(states[0]); i++)
		metric_set(cm.state, 0, server, states[i]);
	metric_set(cm.state, 1, server, state);
}

void
cmetrics_audit_row(const char *kind)
{
	metric_add(cm.audit_rows, 1, kind);
}

void
cmetrics_audit_commit(double seconds)
{
	metric_observe(cm.audit_commit, seconds);
}
