/*
 * A worker may not resolve names or call connect(): its seccomp filter has
 * no socket() or connect().  So its HTTP client's connector asks the
 * parent (CONNECT {host, port}), which checks the request against the
 * server's url, connects, and answers with the socket (CONNECTED +fd) or
 * why not (CONNECT_FAILED {error}).  Every request gets exactly one answer
 * while the parent channel lives; without that channel the worker exits.
 */
#include <stdlib.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/mcpbroker.h"
#include "common/log.h"
#include "common/util.h"
#include "broker/child_connect.h"

#define CONNECT_ERROR_MAX	1024

struct conn_wait {
	TAILQ_ENTRY(conn_wait)	 cw_entry;
	uint64_t		 cw_id;
	http_connected_fn	 cw_done;
	void			*cw_arg;
};
TAILQ_HEAD(conn_wait_list, conn_wait);

static struct conn_wait_list	waits = TAILQ_HEAD_INITIALIZER(waits);
static uint64_t			last_id;

static void
unreachable_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn_wait *cw = arg;

	(void)fd;
	(void)what;
	cw->cw_done(-1, "cannot reach the parent", cw->cw_arg);
	free(cw);
}

void
child_connector(const char *host, uint16_t port, http_connected_fn done,
    void *done_arg, void *connector_arg)
{
	static const struct timeval	 now;
	struct conn_wait		*cw;
	struct json_object		*o;
	int				 rv;

	(void)connector_arg;
	if ((cw = calloc(1, sizeof(*cw))) == NULL)
		fatal("calloc");
	cw->cw_id = ++last_id;
	cw->cw_done = done;
	cw->cw_arg = done_arg;
	o = json_object_new_object();
	json_object_object_add(o, "host", json_object_new_string(host));
	json_object_object_add(o, "port", json_object_new_int(port));
	rv = peer_send(child_parent(), MSG_CONNECT, cw->cw_id, -1, o);
	json_object_put(o);
	if (rv == 0) {
		TAILQ_INSERT_TAIL(&waits, cw, cw_entry);
		return;
	}
	/* The connector must never answer from inside its own call. */
	if (event_base_once(child_base(), -1, EV_TIMEOUT, unreachable_cb, cw,
	    &now) == -1)
		fatalx("event_base_once");
}

/* The request this answer is for, no longer waiting; NULL if none. */
static struct conn_wait *
wait_take(uint64_t id)
{
	struct conn_wait *cw;

	TAILQ_FOREACH(cw, &waits, cw_entry)
		if (cw->cw_id == id) {
			TAILQ_REMOVE(&waits, cw, cw_entry);
			return cw;
		}
	return NULL;
}

int
child_recv_connected(struct peer *p, struct msg *m, struct json_object *o)
{
	struct conn_wait *cw;

	(void)p;
	(void)o;
	if ((cw = wait_take(m->m_hdr.mh_id)) == NULL) {
		close(m->m_fd);
		return -1;
	}
	cw->cw_done(m->m_fd, NULL, cw->cw_arg);
	free(cw);
	return 0;
}

int
child_recv_connect_failed(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct conn_wait	*cw;
	const char		*error;

	(void)p;
	if (json_get_str(o, "error", CONNECT_ERROR_MAX, 0, &error) == -1 ||
	    (cw = wait_take(m->m_hdr.mh_id)) == NULL)
		return -1;
	cw->cw_done(-1, error, cw->cw_arg);
	free(cw);
	return 0;
}
