/*
 * The control socket: mcpbrokerctl talks to the parent over a Unix socket
 * of mode 0600, with the same framing as between processes.  Only root and
 * the daemon's own uid may connect (checked with SO_PEERCRED, not just the
 * file mode, so a socket moved or chmod'ed by mistake stays closed).
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/parent.h"
#include "common/log.h"
#include "common/util.h"

#define CONTROL_MAX_CLIENTS	16

struct ctl_client {
	TAILQ_ENTRY(ctl_client)	 cc_entry;
	struct peer		 cc_peer;
	uint64_t		 cc_admin_id;	/* request at the controller */
	uint64_t		 cc_request_id;	/* the client's own id */
	uid_t			 cc_uid;	/* who is at the other end */
};
TAILQ_HEAD(ctl_client_list, ctl_client);

static struct {
	struct event_base	*base;
	struct event		*ev;
	struct ctl_client_list	 clients;
	size_t			 nclients;
	uint64_t		 next_admin;
} control;

static int	parent_recv_ctl_status(struct peer *, struct msg *,
		    struct json_object *);
static int	parent_recv_ctl_reload(struct peer *, struct msg *,
		    struct json_object *);
static int	parent_recv_ctl_admin(struct peer *, struct msg *,
		    struct json_object *);
static int	parent_recv_ctl_backup(struct peer *, struct msg *,
		    struct json_object *);

static const struct dispatch parent_dispatch_ctl[] = {
	{ MSG_CTL_STATUS, parent_recv_ctl_status, 0 },
	{ MSG_CTL_RELOAD, parent_recv_ctl_reload, 0 },
	{ MSG_CTL_ADMIN, parent_recv_ctl_admin, 0 },
	{ MSG_CTL_BACKUP, parent_recv_ctl_backup, DISPATCH_FD },
	DISPATCH_END
};

/* Refuse to take over a socket that a running daemon still answers on. */
static int
control_in_use(const struct sockaddr_un *sun)
{
	int fd, rc;

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return 0;
	rc = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
	close(fd);
	return rc == 0;
}

int
control_listen(const char *path)
{
	struct sockaddr_un	 sun;
	char			 dir[sizeof(sun.sun_path)];
	mode_t			 old;
	int			 fd;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if ((size_t)snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path) >=
	    sizeof(sun.sun_path)) {
		log_warnx("control socket \"%s\": path too long", path);
		return -1;
	}
	snprintf(dir, sizeof(dir), "%s", path);
	if (mkdir(dirname(dir), 0755) == -1 && errno != EEXIST) {
		log_warn("control socket directory for \"%s\"", path);
		return -1;
	}
	if (control_in_use(&sun)) {
		log_warnx("control socket \"%s\" is in use: is mcpbroker "
		    "already running?", path);
		return -1;
	}
	(void)unlink(path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
	    0)) == -1) {
		log_warn("control socket");
		return -1;
	}
	old = umask(0177);
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		umask(old);
		log_warn("control socket \"%s\"", path);
		close(fd);
		return -1;
	}
	umask(old);
	if (chmod(path, 0600) == -1 || listen(fd, 16) == -1) {
		log_warn("control socket \"%s\"", path);
		close(fd);
		unlink(path);
		return -1;
	}
	return fd;
}

static void
client_free(struct ctl_client *cc)
{
	TAILQ_REMOVE(&control.clients, cc, cc_entry);
	control.nclients--;
	peer_detach(&cc->cc_peer);
	free(cc);
}

static void
client_lost(struct peer *p, const char *why)
{
	(void)why;
	client_free(p->p_arg);
}

static int
peer_is_admin(int fd, uid_t *uid)
{
	struct ucred	cred;
	socklen_t	len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == -1)
		return 0;
	*uid = cred.uid;
	return cred.uid == 0 || cred.uid == geteuid();
}

static void
control_accept(int lfd, short ev, void *arg)
{
	struct ctl_client	*cc;
	uid_t			 uid = 0;
	int			 fd;

	(void)ev;
	(void)arg;
	if ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) ==
	    -1) {
		if (errno != EAGAIN && errno != EINTR)
			log_warn("control accept");
		return;
	}
	if (!peer_is_admin(fd, &uid) ||
	    control.nclients >= CONTROL_MAX_CLIENTS) {
		log_warnx("control connection refused");
		close(fd);
		return;
	}
	if ((cc = calloc(1, sizeof(*cc))) == NULL) {
		close(fd);
		return;
	}
	cc->cc_uid = uid;
	peer_init(&cc->cc_peer, PROC_CTL, "mcpbrokerctl", parent_dispatch_ctl,
	    client_lost, cc);
	if (peer_attach(&cc->cc_peer, control.base, fd) == -1) {
		close(fd);
		free(cc);
		return;
	}
	TAILQ_INSERT_TAIL(&control.clients, cc, cc_entry);
	control.nclients++;
}

static struct json_object *
process_json(const char *name, const char *kind, pid_t pid, const char *state,
    unsigned int restarts, const char *last_exit)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "name", json_object_new_string(name));
	json_object_object_add(o, "kind", json_object_new_string(kind));
	json_object_object_add(o, "pid", json_object_new_int(pid));
	json_object_object_add(o, "state", json_object_new_string(state));
	json_object_object_add(o, "restarts", json_object_new_int(restarts));
	if (last_exit != NULL && *last_exit != '\0')
		json_object_object_add(o, "last_exit",
		    json_object_new_string(last_exit));
	return o;
}

static int
parent_recv_ctl_status(struct peer *p, struct msg *m, struct json_object *o)
{
	struct json_object	*reply, *procs;
	struct child_proc	*cp;

	(void)o;
	reply = json_object_new_object();
	procs = json_object_new_array();
	json_object_array_add(procs, process_json("parent", "parent", getpid(),
	    "running", 0, NULL));
	TAILQ_FOREACH(cp, parent_children(), cp_entry)
		json_object_array_add(procs, process_json(cp->cp_peer.p_name,
		    proc_kind_str(cp->cp_kind), cp->cp_pid,
		    child_state_str(cp->cp_state), cp->cp_restarts,
		    cp->cp_last_exit));
	json_object_object_add(reply, "ok", json_object_new_boolean(1));
	json_object_object_add(reply, "processes", procs);
	(void)peer_send(p, MSG_CTL_REPLY, m->m_hdr.mh_id, -1, reply);
	json_object_put(reply);
	return 0;
}

static int
parent_recv_ctl_reload(struct peer *p, struct msg *m, struct json_object *o)
{
	struct json_object	*reply;
	const char		*err;

	(void)o;
	err = parent_reload();
	reply = json_object_new_object();
	json_object_object_add(reply, "ok", json_object_new_boolean(err ==
	    NULL));
	if (err != NULL)
		json_object_object_add(reply, "error",
		    json_object_new_string(err));
	(void)peer_send(p, MSG_CTL_REPLY, m->m_hdr.mh_id, -1, reply);
	json_object_put(reply);
	return 0;
}

/*
 * Server requests go to the controller, which knows the workers; one at a
 * time per client.  The payload is checked there, field by field.  fd (or
 * -1) rides along; it is ours to close if it goes nowhere.
 */
static int
forward_admin(struct peer *p, struct msg *m, struct json_object *o,
    uint16_t type, int fd)
{
	struct ctl_client	*cc = p->p_arg;
	struct peer		*ctlr = parent_controller();
	struct json_object	*r;

	if (cc->cc_admin_id != 0) {
		if (fd != -1)
			close(fd);
		return -1;
	}
	if (ctlr == NULL || !peer_connected(ctlr)) {
		if (fd != -1)
			close(fd);
		r = json_object_new_object();
		json_object_object_add(r, "ok", json_object_new_boolean(0));
		json_object_object_add(r, "error",
		    json_object_new_string("the controller is not running"));
		(void)peer_send(p, MSG_CTL_REPLY, m->m_hdr.mh_id, -1, r);
		json_object_put(r);
		return 0;
	}
	cc->cc_admin_id = ++control.next_admin;
	cc->cc_request_id = m->m_hdr.mh_id;
	/* Ours, not the client's word: the trail says who approved what. */
	json_object_object_add(o, "ctl_uid", json_object_new_int64(
	    cc->cc_uid));
	return peer_send(ctlr, type, cc->cc_admin_id, fd, o);
}

static int
parent_recv_ctl_admin(struct peer *p, struct msg *m, struct json_object *o)
{
	return forward_admin(p, m, o, MSG_ADMIN_REQ, -1);
}

/*
 * mcpbrokerctl backup: the file it opened goes to the controller, which
 * holds the database and writes the copy into it; nobody opens a path
 * the other chose.
 */
static int
parent_recv_ctl_backup(struct peer *p, struct msg *m, struct json_object *o)
{
	return forward_admin(p, m, o, MSG_ADMIN_BACKUP, m->m_fd);
}

int
control_recv_admin_rep(struct peer *p, struct msg *m, struct json_object *o)
{
	struct ctl_client *cc;

	(void)p;
	TAILQ_FOREACH(cc, &control.clients, cc_entry)
		if (cc->cc_admin_id == m->m_hdr.mh_id) {
			cc->cc_admin_id = 0;
			(void)peer_send(&cc->cc_peer, MSG_CTL_REPLY,
			    cc->cc_request_id, -1, o);
			break;
		}
	return 0;	/* the client may have gone */
}

void
control_start(struct event_base *base, int fd)
{
	control.base = base;
	TAILQ_INIT(&control.clients);
	if ((control.ev = event_new(base, fd, EV_READ | EV_PERSIST,
	    control_accept, NULL)) == NULL || event_add(control.ev, NULL) == -1)
		fatalx("control socket event");
}

void
control_stop(void)
{
	struct ctl_client *cc;

	if (control.ev == NULL)
		return;
	event_free(control.ev);
	control.ev = NULL;
	while ((cc = TAILQ_FIRST(&control.clients)) != NULL)
		client_free(cc);
}
