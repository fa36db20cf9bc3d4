#ifndef MCPBROKER_MCP_STDIO_H
#define MCPBROKER_MCP_STDIO_H

struct event_base;
struct mcp_session;
struct stdio_transport;

extern const struct mcp_transport_ops stdio_transport_ops;

/*
 * The pipes of one server instance: in_fd is its stdin (we write), out_fd
 * its stdout, err_fd its stderr or -1; all are owned from here on.  on_eof
 * runs once when the stream ends or breaks; the owner decides what the
 * session is told (it may know the process's exit status).
 */
struct stdio_transport	*stdio_transport_new(struct event_base *,
			    const char *name, int in_fd, int out_fd, int err_fd,
			    void (*on_eof)(void *, const char *), void *arg);
void			 stdio_transport_attach(struct stdio_transport *,
			    struct mcp_session *);

#endif
