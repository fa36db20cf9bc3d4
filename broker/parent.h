/* Shared between parent.c and parent_control.c only. */
#ifndef MCPBROKER_PARENT_H
#define MCPBROKER_PARENT_H

#include <sys/queue.h>
#include <sys/types.h>
#include <stdint.h>

#include "broker/mcpbroker.h"

enum child_state {
	CS_STARTING,		/* spawned, configuration not yet acked */
	CS_RUNNING,
	CS_BACKOFF,		/* exited, restart scheduled */
	CS_STOPPING,		/* asked to exit */
};

struct child_proc {
	TAILQ_ENTRY(child_proc)	 cp_entry;
	enum proc_kind		 cp_kind;
	char			 cp_name[NAME_MAX_LEN];	/* server, or kind */
	pid_t			 cp_pid;		/* 0 when not running */
	enum child_state	 cp_state;
	struct peer		 cp_peer;
	unsigned int		 cp_restarts;
	unsigned int		 cp_attempt;		/* backoff step */
	uint64_t		 cp_started_ms;
	struct event		*cp_timer;		/* restart */
	int			 cp_retired;		/* removed by reload */
	int			 cp_respawn_now;	/* changed by reload */
	int			 cp_note;	/* PROC_NOTE_FD's other end */
	struct bufferevent	*cp_err;	/* its stderr, relayed */
	char			 cp_last_exit[96];
};
TAILQ_HEAD(child_list, child_proc);

const char		*child_state_str(enum child_state);
struct child_list	*parent_children(void);
/* Re-read the configuration; NULL on success, else why (static). */
const char		*parent_reload(void);

struct mcpbroker_conf	*parent_conf(void);
struct peer		*parent_controller(void);
struct event_base	*parent_base(void);
/* Whom stdio server instances run as: instance-user, else the children. */
void			 parent_instance_ids(uid_t *, gid_t *);
void			 describe_status(int status, char *buf, size_t len);

/* parent_instance.c: stdio server instances for workers */
int	parent_recv_instance_spawn(struct peer *, struct msg *,
	    struct json_object *);
int	parent_recv_instance_stop(struct peer *, struct msg *,
	    struct json_object *);
int	parent_instance_reaped(pid_t, int status);
void	parent_instances_orphaned(const struct child_proc *);
void	parent_instances_kill_all(void);

/* parent_connect.c: outbound TCP connections for workers */
int	parent_recv_connect(struct peer *, struct msg *,
	    struct json_object *);
/* Before the worker's channel is reused: drop its requests. */
void	parent_connects_orphaned(const struct child_proc *);
/* At exit, after the event loop, before the event base is freed. */
void	parent_connects_free_all(void);

int	control_listen(const char *path);
int	control_recv_admin_rep(struct peer *, struct msg *,
	    struct json_object *);
void	control_start(struct event_base *, int fd);
void	control_stop(void);

#endif
