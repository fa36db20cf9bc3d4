/*
 * Process sandboxes, one function per process kind, applied in a fixed
 * order once a child has its configuration and descriptors: drop uid and
 * capabilities, set no_new_privs, then load the seccomp allow-list.  Any
 * failure is fatal: a child never runs with a sandbox half applied.
 */
#ifndef MCPBROKER_SANDBOX_H
#define MCPBROKER_SANDBOX_H

#include <sys/types.h>

#include "common/proc.h"

/* Every process, first thing: no core dumps holding secrets. */
void	sandbox_early(void);
/* uid/gid switch when root, then empty capability sets and no_new_privs. */
void	sandbox_drop_privileges(uid_t, gid_t);
/* The seccomp allow-list of one process kind. */
void	sandbox_seccomp(enum proc_kind);
/* Both of the above, in order. */
void	sandbox_apply(enum proc_kind, uid_t, gid_t);

#endif
