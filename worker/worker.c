/*
 * A worker: one per configured MCP server, the process that meets
 * third-party code.  It owns that server's MCP connection(s) and speaks the
 * framed protocol to the controller.  It runs with no capabilities under a
 * seccomp allow-list of its own and never executes anything: stdio server
 * instances are spawned by the parent, which hands over their pipes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "broker/mcpbroker.h"
#include "common/log.h"
#include "common/util.h"

static struct {
	const char		*name;		/* our server */
	struct mcpbroker_conf	*conf;
	struct server_conf	*srv;
	struct peer		 controller;
} wk;

static int	worker_recv_peer(struct peer *, struct msg *,
		    struct json_object *);

static const struct dispatch worker_dispatch_parent[] = {
	{ MSG_CONF_TEXT, child_recv_conf_text, 0 },
	{ MSG_CONF_SECRET, child_recv_secret, 0 },
	{ MSG_CONF_PEER, worker_recv_peer, DISPATCH_FD | DISPATCH_ONCE },
	{ MSG_CONF_DONE, child_recv_done, 0 },
	{ MSG_START, child_recv_start, 0 },
	DISPATCH_END
};

/* Nothing yet: calls arrive here once the MCP client is in place. */
static const struct dispatch worker_dispatch_controller[] = {
	DISPATCH_END
};

static void
worker_controller_lost(struct peer *p, const char *why)
{
	(void)p;
	log_warnx("lost the controller (%s), exiting", why);
	child_shutdown();
}

static int
worker_recv_peer(struct peer *p, struct msg *m, struct json_object *o)
{
	const char *peer;

	(void)p;
	if (json_get_str(o, "peer", 16, 0, &peer) == -1 ||
	    strcmp(peer, "controller") != 0) {
		close(m->m_fd);
		return -1;
	}
	peer_init(&wk.controller, PROC_CONTROLLER, "controller",
	    worker_dispatch_controller, worker_controller_lost, NULL);
	if (peer_attach(&wk.controller, child_base(), m->m_fd) == -1)
		fatalx("channel to the controller");
	return 0;
}

static int
worker_configure(struct mcpbroker_conf *conf, int reload)
{
	struct server_conf *srv;

	(void)reload;
	if ((srv = config_find_server(conf, wk.name)) == NULL) {
		log_warnx("configuration has no server \"%s\"", wk.name);
		return -1;
	}
	config_free(wk.conf);
	wk.conf = conf;
	wk.srv = srv;
	return 0;
}

static void
worker_start(void)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "name", json_object_new_string(wk.name));
	(void)peer_send(&wk.controller, MSG_WORKER_READY, 0, -1, o);
	json_object_put(o);
	log_info("serving %s (%s)", wk.name, transport_str(wk.srv->srv_transport));
}

int
worker_main(const char *server)
{
	static const struct child_hooks hooks = {
		worker_configure, worker_start
	};
	static char procname[NAME_MAX_LEN + 8];

	snprintf(procname, sizeof(procname), "worker %s", server);
	wk.name = server;
	return child_main(PROC_WORKER, procname, worker_dispatch_parent,
	    &hooks);
}
