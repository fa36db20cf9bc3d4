/*
 * Framed messages over a stream socketpair, in the manner of OpenBSD's imsg:
 * a fixed header, a payload of at most MSG_MAX_PAYLOAD bytes and at most one
 * descriptor passed with SCM_RIGHTS.  A msgchan drives one socket from a
 * libevent loop: it reassembles frames across partial reads, validates the
 * header before buffering a payload, and queues output up to a hard cap so
 * that a slow reader cannot make the sender buffer without bound.
 */
#ifndef MCPBROKER_MSG_H
#define MCPBROKER_MSG_H

#include <stddef.h>
#include <stdint.h>

#define MSG_MAX_PAYLOAD		(16u * 1024 * 1024)
#define MSG_MAX_QUEUED		(64u * 1024 * 1024)	/* per channel, output */
#define MSG_MAX_PENDING_FDS	8

#define MSG_F_FD		0x0001	/* a descriptor rides with the frame */

struct msg_hdr {
	uint16_t	mh_type;
	uint16_t	mh_version;	/* PROTO_VERSION */
	uint32_t	mh_len;		/* payload bytes */
	uint64_t	mh_id;		/* request/stream correlation */
	uint32_t	mh_peer;	/* sub-addressing within a channel */
	uint32_t	mh_flags;
};
#define MSG_HDR_SIZE	sizeof(struct msg_hdr)

struct msg {
	struct msg_hdr	 m_hdr;
	char		*m_data;	/* NUL-terminated for convenience */
	size_t		 m_len;
	int		 m_fd;		/* -1 if none; the handler owns it */
};

struct event_base;
struct msgchan;

/* A complete frame.  The callee owns m->m_fd; msgchan frees m_data. */
typedef void	(*msgchan_msg_fn)(struct msgchan *, struct msg *, void *);
/*
 * The channel is unusable: EOF, I/O error or a framing violation.  The
 * callee must msgchan_free() it (possibly later); no further callbacks come.
 */
typedef void	(*msgchan_err_fn)(struct msgchan *, const char *why, void *);

struct msgchan	*msgchan_new(struct event_base *, int fd, msgchan_msg_fn,
		    msgchan_err_fn, void *arg);
void		 msgchan_free(struct msgchan *);
/*
 * Queue a frame.  fd (or -1) is owned by the channel from here on and closed
 * once sent or when the channel goes.  Returns -1 with errno EMSGSIZE for an
 * oversized payload, ENOBUFS when the output cap is reached, EPIPE on a dead
 * channel.
 */
int		 msgchan_compose(struct msgchan *, uint16_t type, uint64_t id,
		    uint32_t peer, int fd, const void *data, size_t len);
size_t		 msgchan_queued(const struct msgchan *);
/* Write everything queued, blocking; for short-lived clients. */
int		 msgchan_flush(struct msgchan *);
int		 msgchan_fd(const struct msgchan *);

#endif
