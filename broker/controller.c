/*
 * The controller: the broker's brain.  It knows every MCP server's state
 * from its worker, answers the frontend, and (in later layers) runs
 * conversations, policy, budgets and the audit trail.  Trust goes one way:
 * a worker is less trusted than the controller, so anything a worker says is
 * checked against what the controller expects of that worker.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/mcpbroker.h"
#include "common/log.h"
#include "common/util.h"

enum server_state {
	SS_STARTING,
	SS_READY,
	SS_DEGRADED,
	SS_DOWN,
};

static const char *const server_states[] = {
	[SS_STARTING] = "starting",
	[SS_READY] = "ready",
	[SS_DEGRADED] = "degraded",
	[SS_DOWN] = "down",
};

/* One per configured server: its worker's channel and what we know. */
struct worker_link {
	TAILQ_ENTRY(worker_link) wl_entry;
	char			 wl_name[NAME_MAX_LEN];
	struct peer		 wl_peer;
	enum server_state	 wl_state;
	char			 wl_error[256];
	unsigned int		 wl_restarts;
};
TAILQ_HEAD(worker_link_list, worker_link);

static struct {
	struct mcpbroker_conf	*conf;
	struct peer		 frontend;
	struct worker_link_list	 workers;
} ctl;

static int	controller_recv_peer(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_worker_down(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_ready_req(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_worker_ready(struct peer *, struct msg *,
		    struct json_object *);
static int	controller_recv_worker_state(struct peer *, struct msg *,
		    struct json_object *);

static const struct dispatch controller_dispatch_parent[] = {
	{ MSG_CONF_TEXT, child_recv_conf_text, 0 },
	{ MSG_CONF_SECRET, child_recv_secret, 0 },
	{ MSG_CONF_PEER, controller_recv_peer, DISPATCH_FD },
	{ MSG_CONF_DONE, child_recv_done, 0 },
	{ MSG_START, child_recv_start, 0 },
	{ MSG_WORKER_DOWN, controller_recv_worker_down, 0 },
	DISPATCH_END
};

static const struct dispatch controller_dispatch_frontend[] = {
	{ MSG_READY_REQ, controller_recv_ready_req, 0 },
	DISPATCH_END
};

static const struct dispatch controller_dispatch_worker[] = {
	{ MSG_WORKER_READY, controller_recv_worker_ready, DISPATCH_ONCE },
	{ MSG_WORKER_STATE, controller_recv_worker_state, 0 },
	DISPATCH_END
};

static struct worker_link *
worker_find(const char *name)
{
	struct worker_link *wl;

	TAILQ_FOREACH(wl, &ctl.workers, wl_entry)
		if (strcmp(wl->wl_name, name) == 0)
			return wl;
	return NULL;
}

static void
worker_set_state(struct worker_link *wl, enum server_state st,
    const char *error)
{
	if (wl->wl_state != st)
		log_info("server %s: %s%s%s", wl->wl_name, server_states[st],
		    error != NULL ? ": " : "", error != NULL ? error : "");
	wl->wl_state = st;
	snprintf(wl->wl_error, sizeof(wl->wl_error), "%s",
	    error != NULL ? error : "");
}

static void
worker_lost(struct peer *p, const char *why)
{
	struct worker_link *wl = p->p_arg;

	/* The parent restarts it; until then calls fail fast. */
	worker_set_state(wl, SS_DOWN, why);
}

static struct worker_link *
worker_link_new(const char *name)
{
	struct worker_link	*wl;
	char			 pname[NAME_MAX_LEN + 8];

	if ((wl = calloc(1, sizeof(*wl))) == NULL)
		fatal("calloc");
	snprintf(wl->wl_name, sizeof(wl->wl_name), "%s", name);
	snprintf(pname, sizeof(pname), "worker %s", name);
	peer_init(&wl->wl_peer, PROC_WORKER, pname, controller_dispatch_worker,
	    worker_lost, wl);
	wl->wl_state = SS_DOWN;
	snprintf(wl->wl_error, sizeof(wl->wl_error), "not started");
	TAILQ_INSERT_TAIL(&ctl.workers, wl, wl_entry);
	return wl;
}

static void
worker_link_free(struct worker_link *wl)
{
	TAILQ_REMOVE(&ctl.workers, wl, wl_entry);
	peer_detach(&wl->wl_peer);
	free(wl);
}

/* ---- from the parent ---- */

static void
controller_frontend_lost(struct peer *p, const char *why)
{
	(void)p;
	log_warnx("lost the frontend (%s), exiting", why);
	child_shutdown();
}

static int
controller_recv_peer(struct peer *p, struct msg *m, struct json_object *o)
{
	struct worker_link	*wl;
	const char		*peer, *name;

	(void)p;
	if (json_get_str(o, "peer", 16, 0, &peer) == -1)
		goto bad;
	if (strcmp(peer, "frontend") == 0) {
		if (peer_connected(&ctl.frontend))
			goto bad;
		peer_init(&ctl.frontend, PROC_FRONTEND, "frontend",
		    controller_dispatch_frontend, controller_frontend_lost,
		    NULL);
		if (peer_attach(&ctl.frontend, child_base(), m->m_fd) == -1)
			fatalx("channel to the frontend");
		return 0;
	}
	if (strcmp(peer, "worker") != 0 ||
	    json_get_str(o, "name", NAME_MAX_LEN - 1, 0, &name) == -1)
		goto bad;
	if ((wl = worker_find(name)) == NULL)
		wl = worker_link_new(name);
	/* A new channel means a new worker process: forget the old one. */
	if (peer_attach(&wl->wl_peer, child_base(), m->m_fd) == -1)
		fatalx("channel to worker %s", name);
	worker_set_state(wl, SS_STARTING, NULL);
	return 0;
 bad:
	close(m->m_fd);
	return -1;
}

static int
controller_recv_worker_down(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct worker_link	*wl;
	const char		*name, *status;
	int64_t			 restarts;
	char			 why[256];

	(void)p;
	(void)m;
	if (json_get_str(o, "name", NAME_MAX_LEN - 1, 0, &name) == -1 ||
	    json_get_str(o, "status", 128, 0, &status) == -1 ||
	    json_get_int(o, "restarts", 0, INT32_MAX, 0, &restarts) == -1)
		return -1;
	if ((wl = worker_find(name)) == NULL)
		return 0;
	peer_detach(&wl->wl_peer);
	wl->wl_restarts = restarts;
	snprintf(why, sizeof(why), "worker %s", status);
	worker_set_state(wl, SS_DOWN, why);
	return 0;
}

/* ---- from the frontend ---- */

static int
controller_recv_ready_req(struct peer *p, struct msg *m, struct json_object *o)
{
	struct json_object	*reply, *servers, *s;
	struct worker_link	*wl;
	int			 ready = 1;

	(void)o;
	reply = json_object_new_object();
	servers = json_object_new_array();
	TAILQ_FOREACH(wl, &ctl.workers, wl_entry) {
		if (wl->wl_state != SS_READY)
			ready = 0;
		s = json_object_new_object();
		json_object_object_add(s, "name",
		    json_object_new_string(wl->wl_name));
		json_object_object_add(s, "state",
		    json_object_new_string(server_states[wl->wl_state]));
		if (wl->wl_error[0] != '\0')
			json_object_object_add(s, "error",
			    json_object_new_string(wl->wl_error));
		json_object_array_add(servers, s);
	}
	json_object_object_add(reply, "ready", json_object_new_boolean(ready));
	json_object_object_add(reply, "servers", servers);
	(void)peer_send(p, MSG_READY_REP, m->m_hdr.mh_id, -1, reply);
	json_object_put(reply);
	return 0;
}

/* ---- from workers ---- */

static int
controller_recv_worker_ready(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct worker_link	*wl = p->p_arg;
	const char		*name;

	(void)m;
	/* A worker speaks for its own server only. */
	if (json_get_str(o, "name", NAME_MAX_LEN - 1, 0, &name) == -1 ||
	    strcmp(name, wl->wl_name) != 0)
		return -1;
	worker_set_state(wl, SS_READY, NULL);
	return 0;
}

static int
controller_recv_worker_state(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct worker_link	*wl = p->p_arg;
	const char		*name, *state, *error;
	enum server_state	 st;

	(void)m;
	if (json_get_str(o, "name", NAME_MAX_LEN - 1, 0, &name) == -1 ||
	    strcmp(name, wl->wl_name) != 0 ||
	    json_get_str(o, "state", 16, 0, &state) == -1 ||
	    json_get_str(o, "error", 200, 1, &error) == -1)
		return -1;
	for (st = SS_STARTING; st <= SS_DOWN; st++)
		if (strcmp(state, server_states[st]) == 0)
			break;
	if (st > SS_DOWN)
		return -1;
	worker_set_state(wl, st, error);
	return 0;
}

/* Servers gone from the configuration are gone from readiness too. */
static int
controller_configure(struct mcpbroker_conf *conf, int reload)
{
	struct worker_link	*wl, *next;
	struct server_conf	*srv;

	(void)reload;
	TAILQ_FOREACH_SAFE(wl, &ctl.workers, wl_entry, next)
		if (config_find_server(conf, wl->wl_name) == NULL)
			worker_link_free(wl);
	TAILQ_FOREACH(srv, &conf->c_servers, srv_entry)
		if (worker_find(srv->srv_name) == NULL)
			(void)worker_link_new(srv->srv_name);
	config_free(ctl.conf);
	ctl.conf = conf;
	return 0;
}

static void
controller_start(void)
{
	log_info("controller started with %u server(s)",
	    config_server_count(ctl.conf));
}

int
controller_main(void)
{
	static const struct child_hooks hooks = {
		controller_configure, controller_start
	};

	TAILQ_INIT(&ctl.workers);
	return child_main(PROC_CONTROLLER, "controller",
	    controller_dispatch_parent, &hooks);
}
