#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "common/msg.h"
#include "common/proto.h"

#define MSG_READ_CHUNK	(64 * 1024)
#define MSG_WRITE_IOV	32

struct msgout {
	TAILQ_ENTRY(msgout)	 mo_entry;
	char			*mo_buf;	/* header + payload */
	size_t			 mo_len;
	size_t			 mo_off;
	int			 mo_fd;
};
TAILQ_HEAD(msgout_list, msgout);

struct msgchan {
	int			 mc_fd;
	struct event		*mc_rev;
	struct event		*mc_wev;
	struct evbuffer		*mc_in;
	int			 mc_fds[MSG_MAX_PENDING_FDS];
	size_t			 mc_nfds;
	struct msgout_list	 mc_out;
	size_t			 mc_queued;
	msgchan_msg_fn		 mc_on_msg;
	msgchan_err_fn		 mc_on_err;
	void			*mc_arg;
	int			 mc_busy;	/* inside a callback */
	int			 mc_freed;	/* free once the callback returns */
	int			 mc_failed;	/* error reported, no more callbacks */
	char			 mc_why[128];	/* pending write failure */
};

static void	msgchan_read_cb(int, short, void *);
static void	msgchan_write_cb(int, short, void *);

struct msgchan *
msgchan_new(struct event_base *base, int fd, msgchan_msg_fn on_msg,
    msgchan_err_fn on_err, void *arg)
{
	struct msgchan *mc;

	if ((mc = calloc(1, sizeof(*mc))) == NULL)
		return NULL;
	mc->mc_fd = fd;
	mc->mc_on_msg = on_msg;
	mc->mc_on_err = on_err;
	mc->mc_arg = arg;
	TAILQ_INIT(&mc->mc_out);
	if (evutil_make_socket_nonblocking(fd) == -1 ||
	    (mc->mc_in = evbuffer_new()) == NULL ||
	    (mc->mc_rev = event_new(base, fd, EV_READ | EV_PERSIST,
	    msgchan_read_cb, mc)) == NULL ||
	    (mc->mc_wev = event_new(base, fd, EV_WRITE, msgchan_write_cb,
	    mc)) == NULL || event_add(mc->mc_rev, NULL) == -1) {
		mc->mc_fd = -1;		/* the caller still owns fd */
		msgchan_free(mc);
		return NULL;
	}
	return mc;
}

static void
msgchan_release(struct msgchan *mc)
{
	struct msgout	*mo;
	size_t		 i;

	if (mc->mc_rev != NULL)
		event_free(mc->mc_rev);
	if (mc->mc_wev != NULL)
		event_free(mc->mc_wev);
	if (mc->mc_in != NULL)
		evbuffer_free(mc->mc_in);
	for (i = 0; i < mc->mc_nfds; i++)
		close(mc->mc_fds[i]);
	while ((mo = TAILQ_FIRST(&mc->mc_out)) != NULL) {
		TAILQ_REMOVE(&mc->mc_out, mo, mo_entry);
		if (mo->mo_fd != -1)
			close(mo->mo_fd);
		free(mo->mo_buf);
		free(mo);
	}
	if (mc->mc_fd != -1)
		close(mc->mc_fd);
	free(mc);
}

void
msgchan_free(struct msgchan *mc)
{
	if (mc == NULL)
		return;
	if (mc->mc_busy) {
		mc->mc_freed = 1;
		event_del(mc->mc_rev);
		event_del(mc->mc_wev);
		return;
	}
	msgchan_release(mc);
}

int
msgchan_fd(const struct msgchan *mc)
{
	return mc->mc_fd;
}

size_t
msgchan_queued(const struct msgchan *mc)
{
	return mc->mc_queued;
}

/* Report a failure once; the owner frees the channel. */
static void
msgchan_fail(struct msgchan *mc, const char *why)
{
	if (mc->mc_failed)
		return;
	mc->mc_failed = 1;
	event_del(mc->mc_rev);
	event_del(mc->mc_wev);
	mc->mc_busy++;
	mc->mc_on_err(mc, why, mc->mc_arg);
	mc->mc_busy--;
	if (mc->mc_freed && mc->mc_busy == 0)
		msgchan_release(mc);
}

/* Checks that need only the header, before any payload is buffered. */
static const char *
msg_hdr_check(const struct msg_hdr *h)
{
	if (h->mh_version != PROTO_VERSION)
		return "protocol version mismatch";
	if (h->mh_type == MSG_NONE || h->mh_type >= MSG_TYPE_MAX)
		return "unknown message type";
	if (h->mh_len > MSG_MAX_PAYLOAD)
		return "message too large";
	if (h->mh_flags & ~MSG_F_FD)
		return "unknown header flags";
	return NULL;
}

/*
 * Take the descriptors out of a received control message.  Anything but
 * SCM_RIGHTS, or more descriptors than we are willing to hold, is a
 * violation; every descriptor received is either queued or closed.
 */
static const char *
msgchan_take_fds(struct msgchan *mc, struct msghdr *mh)
{
	struct cmsghdr	*cm;
	const char	*err = NULL;
	int		*fds;
	size_t		 i, n;

	if (mh->msg_flags & MSG_CTRUNC)
		err = "control message truncated";
	for (cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET ||
		    cm->cmsg_type != SCM_RIGHTS) {
			err = "unexpected control message";
			continue;
		}
		fds = (int *)CMSG_DATA(cm);
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			if (err == NULL && mc->mc_nfds < MSG_MAX_PENDING_FDS)
				mc->mc_fds[mc->mc_nfds++] = fds[i];
			else {
				if (err == NULL)
					err = "too many descriptors";
				close(fds[i]);
			}
		}
	}
	return err;
}

static int
msgchan_pop_fd(struct msgchan *mc)
{
	int fd;

	if (mc->mc_nfds == 0)
		return -1;
	fd = mc->mc_fds[0];
	memmove(mc->mc_fds, mc->mc_fds + 1, --mc->mc_nfds * sizeof(int));
	return fd;
}

/*
 * Hand every complete frame in the input buffer to the owner.  A stream
 * socket may return the descriptor of the next frame together with the tail
 * of this one, so descriptors wait in a small queue and a flagged frame takes
 * the oldest; a peer that sends descriptors nobody asks for fills the queue
 * and is cut off.
 */
static const char *
msgchan_deliver(struct msgchan *mc)
{
	struct msg	 m;
	const char	*err;

	while (!mc->mc_freed && !mc->mc_failed &&
	    evbuffer_get_length(mc->mc_in) >= MSG_HDR_SIZE) {
		evbuffer_copyout(mc->mc_in, &m.m_hdr, MSG_HDR_SIZE);
		if ((err = msg_hdr_check(&m.m_hdr)) != NULL)
			return err;
		if (evbuffer_get_length(mc->mc_in) <
		    MSG_HDR_SIZE + m.m_hdr.mh_len)
			break;
		m.m_fd = -1;
		if (m.m_hdr.mh_flags & MSG_F_FD) {
			if ((m.m_fd = msgchan_pop_fd(mc)) == -1)
				return "descriptor missing";
		}
		if ((m.m_data = malloc(m.m_hdr.mh_len + 1)) == NULL) {
			if (m.m_fd != -1)
				close(m.m_fd);
			return "out of memory";
		}
		evbuffer_drain(mc->mc_in, MSG_HDR_SIZE);
		evbuffer_remove(mc->mc_in, m.m_data, m.m_hdr.mh_len);
		m.m_data[m.m_hdr.mh_len] = '\0';
		m.m_len = m.m_hdr.mh_len;
		mc->mc_busy++;
		mc->mc_on_msg(mc, &m, mc->mc_arg);
		mc->mc_busy--;
		free(m.m_data);
	}
	return NULL;
}

static void
msgchan_read_cb(int fd, short ev, void *arg)
{
	struct msgchan	*mc = arg;
	char		 buf[MSG_READ_CHUNK];
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int) *
				    MSG_MAX_PENDING_FDS)];
	} cmsgbuf;
	struct iovec	 iov = { buf, sizeof(buf) };
	struct msghdr	 mh;
	const char	*err;
	ssize_t		 n;

	(void)ev;
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = &cmsgbuf.buf;
	mh.msg_controllen = sizeof(cmsgbuf.buf);
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n == -1) {
		if (errno == EAGAIN || errno == EINTR)
			return;
		msgchan_fail(mc, strerror(errno));
		return;
	}
	if ((err = msgchan_take_fds(mc, &mh)) != NULL) {
		msgchan_fail(mc, err);
		return;
	}
	if (n > 0 && evbuffer_add(mc->mc_in, buf, n) == -1) {
		msgchan_fail(mc, "out of memory");
		return;
	}
	mc->mc_busy++;
	err = msgchan_deliver(mc);
	mc->mc_busy--;
	if (mc->mc_freed) {
		if (mc->mc_busy == 0)
			msgchan_release(mc);
		return;
	}
	if (err != NULL)
		msgchan_fail(mc, err);
	else if (n == 0)
		msgchan_fail(mc, evbuffer_get_length(mc->mc_in) > 0 ?
		    "truncated message" : "connection closed");
}

/*
 * Send as much of the queue as the socket takes.  Frames without a
 * descriptor are gathered into one sendmsg; a descriptor goes with the first
 * byte of its own frame, so it can never overtake or trail its frame.
 */
static int
msgchan_write(struct msgchan *mc)
{
	struct iovec	 iov[MSG_WRITE_IOV];
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int))];
	} cmsgbuf;
	struct msghdr	 mh;
	struct cmsghdr	*cm;
	struct msgout	*mo, *next;
	ssize_t		 n;
	int		 iovcnt;

	while ((mo = TAILQ_FIRST(&mc->mc_out)) != NULL) {
		memset(&mh, 0, sizeof(mh));
		iovcnt = 0;
		for (next = mo; next != NULL && iovcnt < MSG_WRITE_IOV;
		    next = TAILQ_NEXT(next, mo_entry)) {
			if (iovcnt > 0 && next->mo_fd != -1)
				break;
			iov[iovcnt].iov_base = next->mo_buf + next->mo_off;
			iov[iovcnt++].iov_len = next->mo_len - next->mo_off;
		}
		mh.msg_iov = iov;
		mh.msg_iovlen = iovcnt;
		if (mo->mo_fd != -1 && mo->mo_off == 0) {
			memset(&cmsgbuf, 0, sizeof(cmsgbuf));
			mh.msg_control = &cmsgbuf.buf;
			mh.msg_controllen = sizeof(cmsgbuf.buf);
			cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_len = CMSG_LEN(sizeof(int));
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			memcpy(CMSG_DATA(cm), &mo->mo_fd, sizeof(int));
		}
		n = sendmsg(mc->mc_fd, &mh, MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			return -1;
		}
		mc->mc_queued -= n;
		while (n > 0 && (mo = TAILQ_FIRST(&mc->mc_out)) != NULL) {
			size_t take = mo->mo_len - mo->mo_off;

			if (mo->mo_fd != -1) {
				close(mo->mo_fd);	/* the peer has it now */
				mo->mo_fd = -1;
			}
			if ((size_t)n < take) {
				mo->mo_off += n;
				break;
			}
			n -= take;
			TAILQ_REMOVE(&mc->mc_out, mo, mo_entry);
			free(mo->mo_buf);
			free(mo);
		}
	}
	return 0;
}

static void
msgchan_write_cb(int fd, short ev, void *arg)
{
	struct msgchan *mc = arg;

	(void)fd;
	(void)ev;
	if (mc->mc_why[0] != '\0') {
		msgchan_fail(mc, mc->mc_why);
		return;
	}
	if (msgchan_write(mc) == -1) {
		msgchan_fail(mc, strerror(errno));
		return;
	}
	if (!TAILQ_EMPTY(&mc->mc_out))
		event_add(mc->mc_wev, NULL);
}

int
msgchan_compose(struct msgchan *mc, uint16_t type, uint64_t id, uint32_t peer,
    int fd, const void *data, size_t len)
{
	struct msg_hdr	 h;
	struct msgout	*mo;

	if (mc->mc_failed || mc->mc_freed || mc->mc_why[0] != '\0') {
		errno = EPIPE;
		goto fail;
	}
	if (len > MSG_MAX_PAYLOAD) {
		errno = EMSGSIZE;
		goto fail;
	}
	if (mc->mc_queued + MSG_HDR_SIZE + len > MSG_MAX_QUEUED) {
		errno = ENOBUFS;
		goto fail;
	}
	if ((mo = calloc(1, sizeof(*mo))) == NULL ||
	    (mo->mo_buf = malloc(MSG_HDR_SIZE + len)) == NULL) {
		free(mo);
		goto fail;
	}
	memset(&h, 0, sizeof(h));
	h.mh_type = type;
	h.mh_version = PROTO_VERSION;
	h.mh_len = len;
	h.mh_id = id;
	h.mh_peer = peer;
	h.mh_flags = fd == -1 ? 0 : MSG_F_FD;
	memcpy(mo->mo_buf, &h, MSG_HDR_SIZE);
	if (len > 0)
		memcpy(mo->mo_buf + MSG_HDR_SIZE, data, len);
	mo->mo_len = MSG_HDR_SIZE + len;
	mo->mo_fd = fd;
	TAILQ_INSERT_TAIL(&mc->mc_out, mo, mo_entry);
	mc->mc_queued += mo->mo_len;
	/* Try at once: most frames go out without a trip through the loop. */
	if (msgchan_write(mc) == -1)
		snprintf(mc->mc_why, sizeof(mc->mc_why), "%s",
		    strerror(errno));
	if (mc->mc_why[0] != '\0')
		event_active(mc->mc_wev, EV_WRITE, 0);
	else if (!TAILQ_EMPTY(&mc->mc_out))
		event_add(mc->mc_wev, NULL);
	return 0;
 fail:
	if (fd != -1)
		close(fd);
	return -1;
}

int
msgchan_flush(struct msgchan *mc)
{
	struct pollfd pfd = { .fd = mc->mc_fd, .events = POLLOUT };

	while (!TAILQ_EMPTY(&mc->mc_out)) {
		if (mc->mc_why[0] != '\0') {
			errno = EPIPE;
			return -1;
		}
		if (poll(&pfd, 1, -1) == -1 && errno != EINTR)
			return -1;
		if (msgchan_write(mc) == -1)
			return -1;
	}
	return 0;
}
