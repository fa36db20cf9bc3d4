/*
 * The channel between processes as a receiver sees it: the bytes (and
 * descriptors) a hostile peer could write, through msgchan's reassembly
 * (common/msg.c) and the peer layer's checks (common/proc.c) into handlers
 * that read fields the way the real ones do.  The bytes are written into
 * a real socketpair in pieces, each possibly with a descriptor, and the
 * loop runs without blocking between writes; then the writer closes.
 *
 * What must hold: the receiver never hangs (EOF always ends the channel),
 * and every descriptor received is closed by someone, whatever happens.
 *
 * Input: [piece size shift] [descriptor mask] stream.  Piece i is
 * 1 << (shift % 17) bytes and carries a descriptor if bit i % 8 of the
 * mask is set.
 */
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "common/msg.h"
#include "common/proc.h"
#include "common/proto.h"
#include "common/util.h"
#include "tests/fuzz/fuzz.h"

#define MAX_PUMPS	10000

static int	lost;

/* Reads like a config-stage handler: strings, numbers, booleans. */
static int
on_conf(struct peer *p, struct msg *m, struct json_object *o)
{
	const char	*s;
	int64_t		 n;
	int		 b;

	(void)p;
	if (m->m_fd != -1)
		close(m->m_fd);
	if (json_get_str(o, "text", 4 * 1024 * 1024, 1, &s) == -1 ||
	    json_get_str(o, "name", 64, 1, &s) == -1 ||
	    json_get_int(o, "uid", 0, UINT32_MAX, 1, &n) == -1 ||
	    json_get_bool(o, "reload", 1, &b) == -1)
		return -1;
	return 0;
}

/* Refuses whatever lacks a required field, as most handlers do. */
static int
on_strict(struct peer *p, struct msg *m, struct json_object *o)
{
	const char	*s;
	int64_t		 n;

	(void)p;
	if (m->m_fd != -1)
		close(m->m_fd);
	if (json_get_str(o, "name", 128, 0, &s) == -1 ||
	    json_get_int(o, "port", 1, 65535, 1, &n) == -1)
		return -1;
	return 0;
}

static const struct dispatch table[] = {
	{ MSG_CONF_TEXT, on_conf, 0 },
	{ MSG_CONF_PEER, on_conf, DISPATCH_FD | DISPATCH_ONCE },
	{ MSG_CONF_LISTEN, on_conf, DISPATCH_FD },
	{ MSG_CONF_DONE, on_conf, DISPATCH_ONCE },
	{ MSG_START, on_conf, 0 },
	{ MSG_LOG, on_strict, 0 },
	{ MSG_CONNECT, on_strict, 0 },
	{ MSG_CONNECTED, on_strict, DISPATCH_FD },
	{ MSG_TOOL_CALL, on_strict, 0 },
	{ MSG_CTL_REPLY, on_conf, 0 },
	DISPATCH_END
};

static void
on_lost(struct peer *p, const char *why)
{
	(void)p;
	(void)why;
	lost = 1;
}

/* Write one piece, with a descriptor if asked; -1 once the peer is gone. */
static ssize_t
put(int fd, const uint8_t *buf, size_t len, int with_fd)
{
	union {
		struct cmsghdr	hdr;
		char		buf[CMSG_SPACE(sizeof(int))];
	} cmsgbuf;
	struct iovec	 iov = { (void *)buf, len };
	struct msghdr	 mh;
	struct cmsghdr	*cm;
	ssize_t		 n;
	int		 pass = -1;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (with_fd && (pass = open("/dev/null", O_RDONLY | O_CLOEXEC)) != -1) {
		memset(&cmsgbuf, 0, sizeof(cmsgbuf));
		mh.msg_control = cmsgbuf.buf;
		mh.msg_controllen = sizeof(cmsgbuf.buf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		memcpy(CMSG_DATA(cm), &pass, sizeof(int));
	}
	n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (pass != -1)
		close(pass);
	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return 0;
	return n;
}

static void
feed(struct event_base *base, int fd, const uint8_t *data, size_t size,
    size_t piece, uint8_t mask)
{
	size_t	 off = 0, n, i = 0, pumps = 0;
	ssize_t	 w;

	while (off < size && !lost) {
		n = size - off < piece ? size - off : piece;
		if ((w = put(fd, data + off, n, mask & (1u << (i % 8)))) == -1)
			break;
		if (w > 0) {
			off += w;
			i++;
		}
		event_base_loop(base, EVLOOP_NONBLOCK);
		if (++pumps > MAX_PUMPS * 16)
			abort();	/* the reader stopped reading */
	}
}

/* The lowest free descriptor number: a leak raises it. */
static int
lowest_free_fd(void)
{
	int fd;

	if ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) == -1)
		abort();
	close(fd);
	return fd;
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_quiet();
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct event_base	*base;
	struct peer		 p;
	int			 sv[2], i, before;
	uint8_t			 shift, mask;

	shift = fuzz_take(&data, &size);
	mask = fuzz_take(&data, &size);
	before = lowest_free_fd();
	if ((base = event_base_new()) == NULL ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == -1)
		abort();
	lost = 0;
	peer_init(&p, PROC_PARENT, "fuzz", table, on_lost, NULL);
	if (peer_attach(&p, base, sv[0]) == -1)
		abort();
	feed(base, sv[1], data, size, (size_t)1 << (shift % 17), mask);
	close(sv[1]);
	/* End of stream: the channel must end, and soon. */
	for (i = 0; !lost && i < MAX_PUMPS; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	if (!lost)
		abort();
	peer_detach(&p);
	event_base_free(base);
	if (lowest_free_fd() != before)
		abort();
	return 0;
}
