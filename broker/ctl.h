/* mcpbrokerctl's commands that live in their own files. */
#ifndef MCPBROKER_CTL_H
#define MCPBROKER_CTL_H

struct event_base;
struct json_object;

int	ctl_mcp(int argc, char *argv[]);
/* An http(s) target; args (for call) is consumed. */
int	ctl_mcp_http(struct event_base *, const char *url, int sse,
	    const char *op, const char *tool, struct json_object *args);

#endif
