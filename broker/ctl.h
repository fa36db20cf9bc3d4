/* mcpbrokerctl's commands that live in their own files. */
#ifndef MCPBROKER_CTL_H
#define MCPBROKER_CTL_H

struct event_base;
struct json_object;

int	ctl_mcp(int argc, char *argv[]);

#endif
