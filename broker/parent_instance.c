/*
 * Stdio server instances, spawned by the parent on a worker's request
 * (a sandboxed worker cannot exec).  A worker may start and stop only its
 * own instances, at most max-instances of them; the parent reaps them and
 * tells the worker how each ended.
 */
#include <sys/types.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/parent.h"
#include "common/log.h"
#include "common/util.h"
#include "worker/instance.h"

struct instance_rec {
	TAILQ_ENTRY(instance_rec) ir_entry;
	struct child_proc	*ir_worker;	/* NULL once the worker is gone */
	uint64_t		 ir_id;		/* the worker's number for it */
	pid_t			 ir_pid;
	struct event		*ir_kill;	/* SIGKILL after the grace time */
};
TAILQ_HEAD(instance_list, instance_rec);

static struct instance_list instances = TAILQ_HEAD_INITIALIZER(instances);

static struct instance_rec *
instance_find(const struct child_proc *worker, uint64_t id)
{
	struct instance_rec *ir;

	TAILQ_FOREACH(ir, &instances, ir_entry)
		if (ir->ir_worker == worker && ir->ir_id == id)
			return ir;
	return NULL;
}

static unsigned int
instance_count(const struct child_proc *worker)
{
	struct instance_rec	*ir;
	unsigned int		 n = 0;

	TAILQ_FOREACH(ir, &instances, ir_entry)
		if (ir->ir_worker == worker)
			n++;
	return n;
}

static void
send_exit(struct child_proc *worker, uint64_t id, const char *status)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "status", json_object_new_string(status));
	(void)peer_send(&worker->cp_peer, MSG_INSTANCE_EXIT, id, -1, o);
	json_object_put(o);
}

static void
send_fd(struct child_proc *worker, uint64_t id, const char *which, int fd)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "which", json_object_new_string(which));
	(void)peer_send(&worker->cp_peer, MSG_INSTANCE_FD, id, fd, o);
	json_object_put(o);
}

int
parent_recv_instance_spawn(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct child_proc	*worker = p->p_arg;
	const struct server_conf *srv;
	struct instance_fds	 fds;
	struct instance_rec	*ir;
	struct json_object	*started;
	uid_t			 uid;
	gid_t			 gid;
	char			 why[256];
	pid_t			 pid;

	(void)o;
	srv = config_find_server(parent_conf(), worker->cp_name);
	/* Only a stdio server's worker has anything to spawn. */
	if (srv == NULL || srv->srv_transport != TRANSPORT_STDIO ||
	    instance_find(worker, m->m_hdr.mh_id) != NULL)
		return -1;
	if (instance_count(worker) > srv->srv_max_instances) {
		send_exit(worker, m->m_hdr.mh_id, "too many instances");
		return 0;
	}
	parent_instance_ids(&uid, &gid);
	if ((pid = instance_spawn(srv, uid, gid, &fds, why, sizeof(why))) ==
	    -1) {
		log_warnx("server %s: %s", srv->srv_name, why);
		send_exit(worker, m->m_hdr.mh_id, why);
		return 0;
	}
	if ((ir = calloc(1, sizeof(*ir))) == NULL)
		fatal("calloc");
	ir->ir_worker = worker;
	ir->ir_id = m->m_hdr.mh_id;
	ir->ir_pid = pid;
	TAILQ_INSERT_TAIL(&instances, ir, ir_entry);
	send_fd(worker, ir->ir_id, "stdin", fds.if_stdin);
	send_fd(worker, ir->ir_id, "stdout", fds.if_stdout);
	send_fd(worker, ir->ir_id, "stderr", fds.if_stderr);
	started = json_object_new_object();
	json_object_object_add(started, "pid", json_object_new_int(pid));
	(void)peer_send(p, MSG_INSTANCE_STARTED, ir->ir_id, -1, started);
	json_object_put(started);
	log_debug("server %s: instance %llu started (pid %d)", srv->srv_name,
	    (unsigned long long)ir->ir_id, (int)pid);
	return 0;
}

static void
kill_timer_cb(int fd, short ev, void *arg)
{
	struct instance_rec *ir = arg;

	(void)fd;
	(void)ev;
	instance_signal(ir->ir_pid, SIGKILL);
}

/* SIGTERM to the whole process group now, SIGKILL if it lingers. */
static void
instance_stop(struct instance_rec *ir)
{
	struct timeval tv = { INSTANCE_KILL_GRACE_MS / 1000,
	    (INSTANCE_KILL_GRACE_MS % 1000) * 1000 };

	if (ir->ir_kill != NULL)
		return;
	instance_signal(ir->ir_pid, SIGTERM);
	if ((ir->ir_kill = evtimer_new(parent_base(), kill_timer_cb, ir)) ==
	    NULL)
		fatalx("evtimer_new");
	evtimer_add(ir->ir_kill, &tv);
}

int
parent_recv_instance_stop(struct peer *p, struct msg *m,
    struct json_object *o)
{
	struct instance_rec *ir;

	(void)o;
	/* It may have exited already; that is not the worker's fault. */
	if ((ir = instance_find(p->p_arg, m->m_hdr.mh_id)) != NULL)
		instance_stop(ir);
	return 0;
}

int
parent_instance_reaped(pid_t pid, int status)
{
	struct instance_rec	*ir;
	char			 desc[64];

	TAILQ_FOREACH(ir, &instances, ir_entry)
		if (ir->ir_pid == pid)
			break;
	if (ir == NULL)
		return 0;
	describe_status(status, desc, sizeof(desc));
	if (ir->ir_worker != NULL && peer_connected(&ir->ir_worker->cp_peer))
		send_exit(ir->ir_worker, ir->ir_id, desc);
	/*
	 * The group may live on (daemonised grandchildren): end it.  Only
	 * the group: the pid itself is reaped and may be anyone's by now,
	 * while a group's id is not given out again as long as it has a
	 * member.
	 */
	(void)kill(-pid, SIGKILL);
	TAILQ_REMOVE(&instances, ir, ir_entry);
	if (ir->ir_kill != NULL)
		event_free(ir->ir_kill);
	free(ir);
	return 1;
}

void
parent_instances_orphaned(const struct child_proc *worker)
{
	struct instance_rec *ir;

	TAILQ_FOREACH(ir, &instances, ir_entry)
		if (ir->ir_worker == worker) {
			ir->ir_worker = NULL;
			instance_stop(ir);
		}
}

void
parent_instances_kill_all(void)
{
	struct instance_rec *ir;

	while ((ir = TAILQ_FIRST(&instances)) != NULL) {
		instance_signal(ir->ir_pid, SIGKILL);
		TAILQ_REMOVE(&instances, ir, ir_entry);
		if (ir->ir_kill != NULL)
			event_free(ir->ir_kill);
		free(ir);
	}
}
