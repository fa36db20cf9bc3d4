/*
 * Spawning a stdio MCP server instance: untrusted third-party code, started
 * by the parent (a sandboxed worker cannot exec) or by mcpbrokerctl, always
 * the same way.  The instance gets its own session and process group, a
 * scrubbed environment, the configured unprivileged user, no capabilities,
 * no_new_privs, resource limits, and on request no network (a new network
 * namespace) and a Landlock file-system allow-list.
 */
#ifndef MCPBROKER_INSTANCE_H
#define MCPBROKER_INSTANCE_H

#include <sys/types.h>

#include "broker/config.h"

#define INSTANCE_KILL_GRACE_MS	2000	/* SIGTERM, then SIGKILL */

struct instance_fds {
	int	if_stdin;	/* we write */
	int	if_stdout;	/* we read */
	int	if_stderr;	/* we read */
};

/*
 * Start one instance of a stdio server.  uid/gid apply when we are root.
 * Returns the pid (also the process group id), or -1 with a message such as
 * `cannot execute "npx": No such file or directory`.
 */
pid_t	instance_spawn(const struct server_conf *, uid_t, gid_t,
	    struct instance_fds *, char *why, size_t whylen);
/* Signal the instance's whole process group. */
void	instance_signal(pid_t, int sig);
/* Whether the kernel can enforce `filesystem` rules (Landlock). */
int	instance_landlock_available(void);

#endif
