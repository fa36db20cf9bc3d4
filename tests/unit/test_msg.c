/*
 * Framing and dispatch: frames split across reads, oversized and truncated
 * frames, bad versions and types, descriptor passing, the output cap, and
 * the peer layer's validation (table, descriptors, JSON, once).
 */
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <json-c/json.h>

#include "common/log.h"
#include "common/msg.h"
#include "common/proc.h"
#include "common/proto.h"

struct rx {
	int		 nmsg;
	uint16_t	 type[64];
	uint64_t	 id[64];
	char		 data[64][64];
	int		 fd[64];
	int		 nerr;
	char		 why[128];
};

static struct event_base	*base;
static struct rx		 rx;

static void
on_msg(struct msgchan *mc, struct msg *m, void *arg)
{
	(void)mc;
	(void)arg;
	if (rx.nmsg < 64) {
		rx.type[rx.nmsg] = m->m_hdr.mh_type;
		rx.id[rx.nmsg] = m->m_hdr.mh_id;
		snprintf(rx.data[rx.nmsg], sizeof(rx.data[0]), "%s", m->m_data);
		rx.fd[rx.nmsg] = m->m_fd;
		rx.nmsg++;
	} else if (m->m_fd != -1)
		close(m->m_fd);
}

static void
on_err(struct msgchan *mc, const char *why, void *arg)
{
	(void)mc;
	(void)arg;
	rx.nerr++;
	snprintf(rx.why, sizeof(rx.why), "%s", why);
}

static void
pump(void)
{
	int i;

	for (i = 0; i < 20; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

static int
setup(void **state)
{
	(void)state;
	memset(&rx, 0, sizeof(rx));
	log_init(1, 0, 0);
	base = event_base_new();
	return base == NULL ? -1 : 0;
}

static int
teardown(void **state)
{
	(void)state;
	event_base_free(base);
	return 0;
}

static void
pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

static size_t
frame(char *buf, uint16_t type, uint16_t version, uint32_t len, uint32_t flags,
    const char *payload)
{
	struct msg_hdr h;

	memset(&h, 0, sizeof(h));
	h.mh_type = type;
	h.mh_version = version;
	h.mh_len = len;
	h.mh_id = 42;
	h.mh_flags = flags;
	memcpy(buf, &h, sizeof(h));
	if (payload != NULL)
		memcpy(buf + sizeof(h), payload, strlen(payload));
	return sizeof(h) + (payload ? strlen(payload) : 0);
}

static void
test_round_trip_in_order(void **state)
{
	struct msgchan	*a, *b;
	char		 payload[32];
	int		 sv[2], i;

	(void)state;
	pair(sv);
	a = msgchan_new(base, sv[0], on_msg, on_err, NULL);
	b = msgchan_new(base, sv[1], on_msg, on_err, NULL);
	for (i = 0; i < 50; i++) {
		snprintf(payload, sizeof(payload), "{\"n\":%d}", i);
		assert_int_equal(msgchan_compose(a, MSG_LOG, i, 0, -1, payload,
		    strlen(payload)), 0);
	}
	pump();
	assert_int_equal(rx.nmsg, 50);
	for (i = 0; i < 50; i++) {
		snprintf(payload, sizeof(payload), "{\"n\":%d}", i);
		assert_int_equal(rx.type[i], MSG_LOG);
		assert_int_equal(rx.id[i], (uint64_t)i);
		assert_string_equal(rx.data[i], payload);
		assert_int_equal(rx.fd[i], -1);
	}
	assert_int_equal(rx.nerr, 0);
	msgchan_free(a);
	msgchan_free(b);
}

static void
test_partial_reads_reassemble(void **state)
{
	struct msgchan	*b;
	char		 buf[256];
	size_t		 len, i;
	int		 sv[2];

	(void)state;
	pair(sv);
	b = msgchan_new(base, sv[1], on_msg, on_err, NULL);
	len = frame(buf, MSG_LOG, PROTO_VERSION, 9, 0, "{\"a\":123}");
	for (i = 0; i < len; i++) {
		assert_int_equal(write(sv[0], buf + i, 1), 1);
		pump();
		assert_int_equal(rx.nmsg, i + 1 == len ? 1 : 0);
	}
	assert_string_equal(rx.data[0], "{\"a\":123}");
	assert_int_equal(rx.id[0], 42);
	close(sv[0]);
	pump();
	assert_int_equal(rx.nerr, 1);
	assert_string_equal(rx.why, "connection closed");
	msgchan_free(b);
}

static void
expect_violation(const char *bytes, size_t len, const char *why)
{
	struct msgchan	*b;
	int		 sv[2];

	memset(&rx, 0, sizeof(rx));
	pair(sv);
	b = msgchan_new(base, sv[1], on_msg, on_err, NULL);
	assert_int_equal(write(sv[0], bytes, len), (ssize_t)len);
	pump();
	assert_int_equal(rx.nmsg, 0);
	assert_int_equal(rx.nerr, 1);
	assert_string_equal(rx.why, why);
	msgchan_free(b);
	close(sv[0]);
}

static void
test_oversize_rejected_from_header(void **state)
{
	char buf[64];

	(void)state;
	/* Rejected on the header alone: no 16 MiB payload is ever buffered. */
	expect_violation(buf, frame(buf, MSG_LOG, PROTO_VERSION,
	    MSG_MAX_PAYLOAD + 1, 0, NULL), "message too large");
}

static void
test_bad_header_fields(void **state)
{
	char buf[64];

	(void)state;
	expect_violation(buf, frame(buf, MSG_LOG, PROTO_VERSION + 1, 2, 0,
	    "{}"), "protocol version mismatch");
	expect_violation(buf, frame(buf, MSG_TYPE_MAX, PROTO_VERSION, 2, 0,
	    "{}"), "unknown message type");
	expect_violation(buf, frame(buf, MSG_NONE, PROTO_VERSION, 2, 0,
	    "{}"), "unknown message type");
	expect_violation(buf, frame(buf, MSG_LOG, PROTO_VERSION, 2, 0x80,
	    "{}"), "unknown header flags");
	expect_violation(buf, frame(buf, MSG_LOG, PROTO_VERSION, 2, MSG_F_FD,
	    "{}"), "descriptor missing");
}

static void
test_truncated_header_then_eof(void **state)
{
	struct msgchan	*b;
	char		 buf[64];
	int		 sv[2];

	(void)state;
	pair(sv);
	b = msgchan_new(base, sv[1], on_msg, on_err, NULL);
	frame(buf, MSG_LOG, PROTO_VERSION, 2, 0, "{}");
	assert_int_equal(write(sv[0], buf, 10), 10);
	close(sv[0]);
	pump();
	assert_int_equal(rx.nmsg, 0);
	assert_int_equal(rx.nerr, 1);
	assert_string_equal(rx.why, "truncated message");
	msgchan_free(b);
}

static void
test_descriptor_passing(void **state)
{
	struct msgchan	*a, *b;
	int		 sv[2], p[2];
	char		 c = 0;

	(void)state;
	pair(sv);
	assert_int_equal(pipe(p), 0);
	a = msgchan_new(base, sv[0], on_msg, on_err, NULL);
	b = msgchan_new(base, sv[1], on_msg, on_err, NULL);
	assert_int_equal(msgchan_compose(a, MSG_LOG, 1, 0, -1, "{}", 2), 0);
	assert_int_equal(msgchan_compose(a, MSG_CONF_PEER, 2, 0, p[1], "{}",
	    2), 0);
	assert_int_equal(msgchan_compose(a, MSG_LOG, 3, 0, -1, "{}", 2), 0);
	pump();
	assert_int_equal(rx.nmsg, 3);
	assert_int_equal(rx.fd[0], -1);
	assert_true(rx.fd[1] >= 0);
	assert_int_equal(rx.fd[2], -1);
	/* The received descriptor is the pipe's write end, close-on-exec. */
	assert_true(fcntl(rx.fd[1], F_GETFD) & FD_CLOEXEC);
	assert_int_equal(write(rx.fd[1], "x", 1), 1);
	assert_int_equal(read(p[0], &c, 1), 1);
	assert_int_equal(c, 'x');
	close(rx.fd[1]);
	close(p[0]);
	msgchan_free(a);
	msgchan_free(b);
}

static void
test_output_is_capped(void **state)
{
	struct msgchan	*a;
	char		*big;
	size_t		 n = 0;
	int		 sv[2];

	(void)state;
	pair(sv);
	big = calloc(1, MSG_MAX_PAYLOAD);
	assert_non_null(big);
	a = msgchan_new(base, sv[0], on_msg, on_err, NULL);
	/* Nobody reads sv[1]: the sender must refuse, not grow. */
	while (msgchan_compose(a, MSG_LOG, 0, 0, -1, big, MSG_MAX_PAYLOAD) ==
	    0)
		assert_true(++n < 100);
	assert_int_equal(errno, ENOBUFS);
	assert_true(msgchan_queued(a) <= MSG_MAX_QUEUED);
	assert_int_equal(msgchan_compose(a, MSG_LOG, 0, 0, -1, big,
	    MSG_MAX_PAYLOAD + 1), -1);
	assert_int_equal(errno, EMSGSIZE);
	msgchan_free(a);
	close(sv[1]);
	free(big);
}

/* ---- the peer layer ---- */

static int	handled;
static int	lost;
static char	lost_why[128];

static int
h_ok(struct peer *p, struct msg *m, struct json_object *o)
{
	(void)p;
	(void)o;
	if (m->m_fd != -1)
		close(m->m_fd);
	handled++;
	return 0;
}

static int
h_reject(struct peer *p, struct msg *m, struct json_object *o)
{
	(void)p;
	(void)m;
	(void)o;
	return -1;
}

static void
p_lost(struct peer *p, const char *why)
{
	(void)p;
	lost++;
	snprintf(lost_why, sizeof(lost_why), "%s", why);
}

static const struct dispatch table[] = {
	{ MSG_LOG, h_ok, 0 },
	{ MSG_CONF_PEER, h_ok, DISPATCH_FD },
	{ MSG_CONF_ACK, h_ok, DISPATCH_ONCE },
	{ MSG_CONF_DONE, h_reject, 0 },
	DISPATCH_END
};

static void
peer_case(uint16_t type, int with_fd, const char *payload, int times,
    int want_handled, const char *want_why)
{
	struct peer	 p;
	struct msgchan	*a;
	int		 sv[2], i;

	handled = lost = 0;
	lost_why[0] = '\0';
	pair(sv);
	peer_init(&p, PROC_WORKER, "worker t", table, p_lost, NULL);
	assert_int_equal(peer_attach(&p, base, sv[1]), 0);
	a = msgchan_new(base, sv[0], on_msg, on_err, NULL);
	for (i = 0; i < times; i++)
		assert_int_equal(msgchan_compose(a, type, 0, 0,
		    with_fd ? dup(STDERR_FILENO) : -1, payload,
		    strlen(payload)), 0);
	pump();
	assert_int_equal(handled, want_handled);
	if (want_why == NULL) {
		assert_int_equal(lost, 0);
		assert_true(peer_connected(&p));
		peer_detach(&p);
	} else {
		assert_int_equal(lost, 1);
		assert_string_equal(lost_why, want_why);
		assert_false(peer_connected(&p));
	}
	msgchan_free(a);
}

static void
test_peer_validation(void **state)
{
	(void)state;
	peer_case(MSG_LOG, 0, "{\"x\":1}", 1, 1, NULL);
	peer_case(MSG_LOG, 0, "not json", 1, 0,
	    "payload is not a JSON object");
	peer_case(MSG_LOG, 0, "[1,2]", 1, 0, "payload is not a JSON object");
	peer_case(MSG_START, 0, "{}", 1, 0,
	    "message not permitted from this peer");
	peer_case(MSG_LOG, 1, "{}", 1, 0, "descriptor not permitted");
	peer_case(MSG_CONF_PEER, 0, "{}", 1, 0, "descriptor missing");
	peer_case(MSG_CONF_PEER, 1, "{}", 1, 1, NULL);
	peer_case(MSG_CONF_ACK, 0, "{}", 2, 1, "message permitted only once");
	peer_case(MSG_CONF_DONE, 0, "{}", 1, 0, "invalid payload");
}

/* A violation stops delivery: nothing after it reaches a handler. */
static void
test_peer_stops_after_violation(void **state)
{
	struct peer	 p;
	struct msgchan	*a;
	int		 sv[2];

	(void)state;
	handled = lost = 0;
	pair(sv);
	peer_init(&p, PROC_WORKER, "worker t", table, p_lost, NULL);
	assert_int_equal(peer_attach(&p, base, sv[1]), 0);
	a = msgchan_new(base, sv[0], on_msg, on_err, NULL);
	msgchan_compose(a, MSG_LOG, 0, 0, -1, "{}", 2);
	msgchan_compose(a, MSG_LOG, 0, 0, -1, "{", 1);
	msgchan_compose(a, MSG_LOG, 0, 0, -1, "{}", 2);
	pump();
	assert_int_equal(handled, 1);
	assert_int_equal(lost, 1);
	msgchan_free(a);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip_in_order,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_reads_reassemble,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_oversize_rejected_from_header, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_header_fields,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated_header_then_eof,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_descriptor_passing,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_output_is_capped,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_validation,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_peer_stops_after_violation, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
