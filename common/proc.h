/*
 * Processes and the channels between them: fork + re-exec of children,
 * and the peer abstraction every process uses to talk.  A peer pairs a
 * msgchan with the receiving process's dispatch table for that sender;
 * process files never touch message buffers, they see validated JSON.
 */
#ifndef MCPBROKER_PROC_H
#define MCPBROKER_PROC_H

#include <sys/types.h>
#include <stdint.h>

#include "common/msg.h"
#include "common/proto.h"

#define PROC_CHAN_FD	3	/* a child's channel to the parent */
/*
 * A child's last words: the write end of a pipe to the parent, where the
 * seccomp trap handler puts the number of the system call it refused
 * before the child dies of SIGSYS, so that the parent can name it.
 */
#define PROC_NOTE_FD	4

enum proc_kind {
	PROC_PARENT,
	PROC_FRONTEND,
	PROC_CONTROLLER,
	PROC_WORKER,
	PROC_CTL,		/* mcpbrokerctl on the control socket */
};

struct peer;
struct json_object;

/* Returns 0, or -1 when the message is invalid: the peer is then dropped. */
typedef int	(*peer_handler)(struct peer *, struct msg *,
		    struct json_object *);

#define DISPATCH_FD	0x01	/* the message carries a descriptor */
#define DISPATCH_ONCE	0x02	/* accepted once per channel */

struct dispatch {
	uint16_t	 d_type;
	peer_handler	 d_fn;
	unsigned int	 d_flags;
};
#define DISPATCH_END	{ MSG_NONE, NULL, 0 }

struct peer {
	char			 p_name[64];	/* for logs: "worker files" */
	enum proc_kind		 p_kind;
	const struct dispatch	*p_dispatch;	/* what we accept from it */
	struct msgchan		*p_chan;
	/* The channel is gone (EOF, error or violation); already detached. */
	void			(*p_lost)(struct peer *, const char *why);
	void			*p_arg;
	unsigned char		 p_seen[(MSG_TYPE_MAX + 7) / 8];
};

struct event_base;

void	 peer_init(struct peer *, enum proc_kind, const char *name,
	    const struct dispatch *, void (*lost)(struct peer *, const char *),
	    void *arg);
int	 peer_attach(struct peer *, struct event_base *, int fd);
void	 peer_detach(struct peer *);
int	 peer_connected(const struct peer *);
/* payload may be NULL for {}; it is not consumed.  fd is given away. */
int	 peer_send(struct peer *, uint16_t type, uint64_t id, int fd,
	    struct json_object *payload);

const char *proc_kind_str(enum proc_kind);
int	 proc_kind_parse(const char *, enum proc_kind *);

/*
 * Fork and re-exec `self` as a child of the given kind with `chan` as its
 * channel (fd PROC_CHAN_FD in the child), `note` as fd PROC_NOTE_FD and
 * `err` as its stderr (stdin and stdout are /dev/null); every other
 * descriptor is closed.
 */
pid_t	 proc_spawn(const char *self, enum proc_kind, const char *name,
	    int chan, int note, int err, int foreground, int verbose);
/* Close every descriptor from `lowfd` up. */
void	 proc_closefrom(int lowfd);

#endif
