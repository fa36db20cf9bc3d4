/*
 * The controller's metrics: one call where each event happens.  GET
 * /metrics shows them after the frontend's own.
 */
#ifndef MCPBROKER_CONTROLLER_METRICS_H
#define MCPBROKER_CONTROLLER_METRICS_H

#include <stdint.h>

void	cmetrics_init(void);
void	cmetrics_llm_call(const char *provider, const char *model,
	    const char *outcome, double seconds);
void	cmetrics_llm_tokens(const char *provider, const char *model,
	    uint64_t in, uint64_t out);
void	cmetrics_tool_call(const char *server, const char *tool,
	    const char *outcome, uint64_t elapsed_ms);
void	cmetrics_policy_denial(const char *kind);
void	cmetrics_budget_rejection(const char *scope);
void	cmetrics_worker_restarts(const char *server, unsigned int restarts);
void	cmetrics_server_state(const char *server, const char *state);
void	cmetrics_audit_row(const char *kind);
void	cmetrics_audit_commit(double seconds);

#endif
