/*
 * The parent: the only process that keeps privileges.  It parses the
 * configuration, reads secrets, binds the listeners and the control socket,
 * spawns the children, hands each the part of the configuration and the
 * descriptors it needs, and supervises them.  A worker that dies is
 * restarted with backoff; a dead frontend or controller stops everything
 * (fail closed: the service manager restarts the whole daemon).
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <json-c/json.h>
#include <seccomp.h>

#include "broker/parent.h"
#include "common/log.h"
#include "common/sandbox.h"
#include "common/util.h"
#include "worker/instance.h"

#define SHUTDOWN_GRACE_MS	5000
#define MAX_LISTENERS		32

#define TLS_FILE_MAX		(1024 * 1024)

struct listener {
	int	 l_fd;
	char	 l_addr[64];
	int	 l_port;
	int	 l_tls;
	char	*l_cert;	/* PEM, read by us: the frontend opens nothing */
	char	*l_key;
};

static struct {
	struct opts		*opts;
	struct event_base	*base;
	struct mcpbroker_conf	*conf;
	uid_t			 uid;
	gid_t			 gid;
	/* stdio server instances' */
	uid_t			 inst_uid;
	gid_t			 inst_gid;
	struct child_list	 children;
	struct listener		 listeners[MAX_LISTENERS];
	size_t			 nlisteners;
	int			 control_fd;
	int			 shutting_down;
	int			 exit_code;
	struct event		*shutdown_timer;
	struct event		*sig_term, *sig_int, *sig_hup, *sig_chld;
} parent;

static int	parent_recv_ack(struct peer *, struct msg *, struct json_object *);
static int	parent_recv_log(struct peer *, struct msg *, struct json_object *);
static void	parent_child_lost(struct peer *, const char *);
static void	parent_spawn(struct child_proc *);
static void	child_err_close(struct child_proc *);
static void	worker_backoff(struct child_proc *);
static void	parent_shutdown(int);

/* What the parent accepts from the frontend and the controller. */
static const struct dispatch parent_dispatch_child[] = {
	{ MSG_CONF_ACK, parent_recv_ack, 0 },
	{ MSG_LOG, parent_recv_log, 0 },
	DISPATCH_END
};

/* The controller also answers administrators' requests. */
static const struct dispatch parent_dispatch_controller[] = {
	{ MSG_CONF_ACK, parent_recv_ack, 0 },
	{ MSG_LOG, parent_recv_log, 0 },
	{ MSG_ADMIN_REP, control_recv_admin_rep, 0 },
	{ MSG_CONNECT, parent_recv_connect, 0 },
	DISPATCH_END
};

/* Workers may also ask for their stdio server instances. */
static const struct dispatch parent_dispatch_worker[] = {
	{ MSG_CONF_ACK, parent_recv_ack, 0 },
	{ MSG_LOG, parent_recv_log, 0 },
	{ MSG_INSTANCE_SPAWN, parent_recv_instance_spawn, 0 },
	{ MSG_INSTANCE_STOP, parent_recv_instance_stop, 0 },
	{ MSG_CONNECT, parent_recv_connect, 0 },
	DISPATCH_END
};

static const char *const child_states[] = {
	[CS_STARTING] = "starting",
	[CS_RUNNING] = "running",
	[CS_BACKOFF] = "restarting",
	[CS_STOPPING] = "stopping",
};

const char *
child_state_str(enum child_state s)
{
	return child_states[s];
}

struct child_list *
parent_children(void)
{
	return &parent.children;
}

static struct child_proc *
child_find(enum proc_kind kind, const char *name)
{
	struct child_proc *cp;

	TAILQ_FOREACH(cp, &parent.children, cp_entry)
		if (cp->cp_kind == kind &&
		    (name == NULL || strcmp(cp->cp_name, name) == 0))
			return cp;
	return NULL;
}

static struct child_proc *
child_new(enum proc_kind kind, const char *name)
{
	struct child_proc	*cp;
	char			 pname[NAME_MAX_LEN + 8];

	if ((cp = calloc(1, sizeof(*cp))) == NULL)
		fatal("calloc");
	cp->cp_note = -1;
	cp->cp_kind = kind;
	snprintf(cp->cp_name, sizeof(cp->cp_name), "%s", name);
	if (kind == PROC_WORKER)
		snprintf(pname, sizeof(pname), "worker %s", name);
	else
		snprintf(pname, sizeof(pname), "%s", name);
	peer_init(&cp->cp_peer, kind, pname, kind == PROC_WORKER ?
	    parent_dispatch_worker : kind == PROC_CONTROLLER ?
	    parent_dispatch_controller : parent_dispatch_child,
	    parent_child_lost, cp);
	TAILQ_INSERT_TAIL(&parent.children, cp, cp_entry);
	return cp;
}

static void
child_free(struct child_proc *cp)
{
	TAILQ_REMOVE(&parent.children, cp, cp_entry);
	peer_detach(&cp->cp_peer);
	if (cp->cp_note != -1)
		close(cp->cp_note);
	child_err_close(cp);
	if (cp->cp_timer != NULL)
		event_free(cp->cp_timer);
	free(cp);
}

/* ---- configuration to children ---- */

static char *
conf_text(const char *only_server)
{
	char	*buf = NULL;
	size_t	 len = 0;
	FILE	*f;

	if ((f = open_memstream(&buf, &len)) == NULL)
		fatal("open_memstream");
	config_print(f, parent.conf, only_server);
	if (fclose(f) != 0)
		fatal("config_print");
	return buf;
}

static void
send_json(struct child_proc *cp, uint16_t type, int fd, struct json_object *o)
{
	(void)peer_send(&cp->cp_peer, type, 0, fd, o);
	json_object_put(o);
}

static void
send_secret(struct child_proc *cp, const char *kind, const char *name,
    const struct secret_ref *ref)
{
	struct json_object *o;

	if (ref->sr_kind == SECRET_NONE || ref->sr_value == NULL)
		return;
	o = json_object_new_object();
	json_object_object_add(o, "kind", json_object_new_string(kind));
	json_object_object_add(o, "name", json_object_new_string(name));
	json_object_object_add(o, "value", json_object_new_string(
	    ref->sr_value));
	send_json(cp, MSG_CONF_SECRET, -1, o);
}

/* Each child gets the secrets of its own job only. */
static void
send_secrets(struct child_proc *cp)
{
	struct provider_conf	*pv;
	struct server_conf	*srv;

	if (cp->cp_kind == PROC_CONTROLLER) {
		TAILQ_FOREACH(pv, &parent.conf->c_providers, pv_entry)
			send_secret(cp, "provider", pv->pv_name,
			    &pv->pv_api_key);
		/* the key that signs audit checkpoints */
		send_secret(cp, "audit-signing-key", "audit",
		    &parent.conf->c_audit.ac_signing_key);
		/* the key set bearer tokens are checked against */
		if (parent.conf->c_auth.au_jwt)
			send_secret(cp, "jwks", "jwt",
			    &parent.conf->c_auth.au_jwt_conf.jw_jwks);
	} else if (cp->cp_kind == PROC_WORKER &&
	    (srv = config_find_server(parent.conf, cp->cp_name)) != NULL)
		send_secret(cp, "server", srv->srv_name, &srv->srv_bearer);
}

static void
send_config(struct child_proc *cp)
{
	struct json_object	*o;
	char			*text;

	text = conf_text(cp->cp_kind == PROC_WORKER ? cp->cp_name : NULL);
	o = json_object_new_object();
	json_object_object_add(o, "text", json_object_new_string(text));
	send_json(cp, MSG_CONF_TEXT, -1, o);
	free(text);
	send_secrets(cp);
}

static void
send_done(struct child_proc *cp, int reload)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "uid", json_object_new_int64(parent.uid));
	json_object_object_add(o, "gid", json_object_new_int64(parent.gid));
	json_object_object_add(o, "reload", json_object_new_boolean(reload));
	send_json(cp, MSG_CONF_DONE, -1, o);
}

static void
send_peer(struct child_proc *to, const char *peer, const char *name, int fd)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "peer", json_object_new_string(peer));
	if (name != NULL)
		json_object_object_add(o, "name", json_object_new_string(name));
	send_json(to, MSG_CONF_PEER, fd, o);
}

static void
make_pair(int sv[2])
{
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0,
	    sv) == -1)
		fatal("socketpair");
}

/* A fresh channel between the controller and one worker. */
static void
connect_worker(struct child_proc *worker)
{
	struct child_proc	*ctl = child_find(PROC_CONTROLLER, NULL);
	int			 sv[2];

	make_pair(sv);
	send_peer(ctl, "worker", worker->cp_name, sv[0]);
	send_peer(worker, "controller", NULL, sv[1]);
}

static void
send_listeners(struct child_proc *fe)
{
	struct json_object	*o;
	size_t			 i;
	int			 fd;

	for (i = 0; i < parent.nlisteners; i++) {
		if ((fd = fcntl(parent.listeners[i].l_fd, F_DUPFD_CLOEXEC, 0))
		    == -1)
			fatal("dup listener");
		o = json_object_new_object();
		json_object_object_add(o, "addr",
		    json_object_new_string(parent.listeners[i].l_addr));
		json_object_object_add(o, "port",
		    json_object_new_int(parent.listeners[i].l_port));
		json_object_object_add(o, "tls",
		    json_object_new_boolean(parent.listeners[i].l_tls));
		if (parent.listeners[i].l_tls) {
			json_object_object_add(o, "cert",
			    json_object_new_string(parent.listeners[i].l_cert));
			json_object_object_add(o, "key",
			    json_object_new_string(parent.listeners[i].l_key));
		}
		send_json(fe, MSG_CONF_LISTEN, fd, o);
	}
}

/* ---- messages from children ---- */

static int
parent_recv_ack(struct peer *p, struct msg *m, struct json_object *o)
{
	struct child_proc *cp = p->p_arg;

	(void)m;
	(void)o;
	if (cp->cp_state == CS_STARTING) {
		cp->cp_state = CS_RUNNING;
		log_info("%s ready (pid %d)", p->p_name, (int)cp->cp_pid);
	}
	return peer_send(p, MSG_START, 0, -1, NULL);
}

/*
 * A child's log line.  The child may be compromised: the line must start
 * with the child's own name, and control characters are defanged so it
 * cannot forge further lines.
 */
static int
parent_recv_log(struct peer *p, struct msg *m, struct json_object *o)
{
	const char	*line;
	char		 buf[LOG_LINE_MAX];
	int64_t		 pri;

	(void)m;
	if (json_get_int(o, "priority", 0, LOG_DEBUG, 0, &pri) == -1 ||
	    json_get_str(o, "line", LOG_LINE_MAX, 0, &line) == -1)
		return -1;
	log_child_line(p->p_name, line, buf, sizeof(buf));
	log_line((int)pri, buf);
	return 0;
}

/* The channel broke or the child misbehaved: it cannot be trusted now. */
static void
parent_child_lost(struct peer *p, const char *why)
{
	struct child_proc *cp = p->p_arg;

	if (cp->cp_pid > 0 && !parent.shutting_down) {
		log_debug("%s: channel lost (%s), killing pid %d", p->p_name,
		    why, (int)cp->cp_pid);
		kill(cp->cp_pid, SIGKILL);
	}
}

/* ---- supervision ---- */

/*
 * What a child writes to stderr rather than through its channel: a
 * sanitizer's report, a library's complaint, its words before the channel
 * was up or after it broke.  Each line is logged as the child's, escaped
 * and under its name (log_child_line), never written straight to where
 * the parent's lines go: a compromised child cannot forge another's.
 * A piece of a line leaves room for the name in front and \xHH escapes.
 */
#define ERR_PIECE	((LOG_LINE_MAX - NAME_MAX_LEN - 16) / 4)
/* What is read of a child's stderr when it goes, at most. */
#define ERR_LAST_WORDS	(1024 * 1024)

static void
child_err_line(struct child_proc *cp, const char *text, size_t len)
{
	char	piece[ERR_PIECE + 1], buf[LOG_LINE_MAX];
	size_t	n;

	do {
		n = len < ERR_PIECE ? len : ERR_PIECE;
		memcpy(piece, text, n);
		piece[n] = '\0';
		log_child_line(cp->cp_peer.p_name, piece, buf, sizeof(buf));
		/* A fatal() among them: not quieter than the child meant. */
		log_line(LOG_ERR, buf);
		text += n;
		len -= n;
	} while (len > 0);
}

/* Whole lines; what does not end in ERR_PIECE bytes goes in pieces. */
static void
child_err_read(struct bufferevent *bev, void *arg)
{
	struct evbuffer	*in = bufferevent_get_input(bev);
	char		*line, piece[ERR_PIECE];
	size_t		 n;
	int		 got;

	while ((line = evbuffer_readln(in, &n, EVBUFFER_EOL_LF)) != NULL) {
		child_err_line(arg, line, n);
		free(line);
	}
	while (evbuffer_get_length(in) >= sizeof(piece) &&
	    (got = evbuffer_remove(in, piece, sizeof(piece))) > 0)
		child_err_line(arg, piece, (size_t)got);
}

/*
 * The child is gone, or its record is going: what it wrote last (a
 * sanitizer's report, fatal's words) is read to the end and logged.
 */
static void
child_err_close(struct child_proc *cp)
{
	struct evbuffer	*in;
	char		 rest[ERR_PIECE];
	size_t		 total = 0;
	int		 got;

	if (cp->cp_err == NULL)
		return;
	in = bufferevent_get_input(cp->cp_err);
	while (total < ERR_LAST_WORDS && (got = evbuffer_read(in,
	    bufferevent_getfd(cp->cp_err), ERR_PIECE)) > 0) {
		total += (size_t)got;
		child_err_read(cp->cp_err, cp);
	}
	if ((got = evbuffer_remove(in, rest, sizeof(rest))) > 0)
		child_err_line(cp, rest, (size_t)got);
	bufferevent_free(cp->cp_err);
	cp->cp_err = NULL;
}

static void
child_err_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	child_err_close(arg);
}

static void
child_err_attach(struct child_proc *cp, int fd)
{
	child_err_close(cp);	/* the previous run's */
	if ((cp->cp_err = bufferevent_socket_new(parent.base, fd,
	    BEV_OPT_CLOSE_ON_FREE)) == NULL)
		fatalx("bufferevent_socket_new");
	bufferevent_setcb(cp->cp_err, child_err_read, NULL, child_err_event,
	    cp);
	bufferevent_enable(cp->cp_err, EV_READ);
}

static void
parent_spawn(struct child_proc *cp)
{
	int sv[2], note[2], err[2];

	make_pair(sv);
	/* The child writes its stderr blocking; the parent reads it not. */
	if (pipe2(note, O_CLOEXEC | O_NONBLOCK) == -1 ||
	    pipe2(err, O_CLOEXEC) == -1 ||
	    fcntl(err[0], F_SETFL, O_NONBLOCK) == -1)
		fatal("pipe2");
	if (cp->cp_note != -1)
		close(cp->cp_note);
	cp->cp_note = note[0];
	cp->cp_pid = proc_spawn(parent.opts->o_self, cp->cp_kind,
	    cp->cp_kind == PROC_WORKER ? cp->cp_name : NULL, sv[1], note[1],
	    err[1], parent.opts->o_foreground, parent.opts->o_verbose);
	close(sv[1]);
	close(note[1]);
	close(err[1]);
	if (cp->cp_pid == -1) {
		close(err[0]);
		close(sv[0]);
		if (cp->cp_kind != PROC_WORKER)
			fatalx("cannot start %s", cp->cp_name);
		snprintf(cp->cp_last_exit, sizeof(cp->cp_last_exit),
		    "could not be started");
		cp->cp_started_ms = monotonic_ms();
		worker_backoff(cp);
		return;
	}
	child_err_attach(cp, err[0]);
	cp->cp_state = CS_STARTING;
	cp->cp_started_ms = monotonic_ms();
	if (peer_attach(&cp->cp_peer, parent.base, sv[0]) == -1)
		fatalx("channel to %s", cp->cp_name);
	send_config(cp);
	if (cp->cp_kind == PROC_WORKER) {
		connect_worker(cp);
		send_done(cp, 0);
	}
	log_debug("spawned %s (pid %d)", cp->cp_peer.p_name, (int)cp->cp_pid);
}

/* Restart a worker whose backoff is over, or kill one that would not stop. */
static void
child_timer_cb(int fd, short ev, void *arg)
{
	struct child_proc *cp = arg;

	(void)fd;
	(void)ev;
	if (cp->cp_state == CS_STOPPING && cp->cp_pid > 0) {
		log_warnx("%s (pid %d) did not stop, killing", cp->cp_peer.p_name,
		    (int)cp->cp_pid);
		kill(cp->cp_pid, SIGKILL);
		return;
	}
	if (parent.shutting_down || cp->cp_state != CS_BACKOFF)
		return;
	cp->cp_restarts++;
	log_info("restarting worker %s (restart %u)", cp->cp_name,
	    cp->cp_restarts);
	parent_spawn(cp);
}

static void
child_timer_set(struct child_proc *cp, uint64_t ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (cp->cp_timer == NULL &&
	    (cp->cp_timer = evtimer_new(parent.base, child_timer_cb, cp)) ==
	    NULL)
		fatalx("evtimer_new");
	evtimer_add(cp->cp_timer, &tv);
}

/* SIGTERM now, SIGKILL if it is still there after the grace period. */
static void
child_stop(struct child_proc *cp)
{
	cp->cp_state = CS_STOPPING;
	kill(cp->cp_pid, SIGTERM);
	child_timer_set(cp, SHUTDOWN_GRACE_MS);
}

static void
worker_backoff(struct child_proc *cp)
{
	uint64_t delay;

	if (monotonic_ms() - cp->cp_started_ms >= BACKOFF_STABLE_MS)
		cp->cp_attempt = 0;
	delay = backoff_delay_ms(cp->cp_attempt++);
	log_warnx("worker %s (pid %d) %s; restarting in %llu ms", cp->cp_name,
	    (int)cp->cp_pid, cp->cp_last_exit, (unsigned long long)delay);
	cp->cp_pid = 0;
	cp->cp_state = CS_BACKOFF;
	child_timer_set(cp, delay);
}

struct peer *
parent_controller(void)
{
	struct child_proc *cp = child_find(PROC_CONTROLLER, NULL);

	return cp != NULL ? &cp->cp_peer : NULL;
}

struct mcpbroker_conf *
parent_conf(void)
{
	return parent.conf;
}

struct event_base *
parent_base(void)
{
	return parent.base;
}

void
parent_instance_ids(uid_t *uid, gid_t *gid)
{
	*uid = parent.inst_uid;
	*gid = parent.inst_gid;
}

void
describe_status(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exited with status %d",
		    WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status),
		    strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "stopped (status %#x)", status);
}

static void
tell_controller_down(struct child_proc *worker)
{
	struct child_proc	*ctl = child_find(PROC_CONTROLLER, NULL);
	struct json_object	*o;

	if (ctl == NULL || !peer_connected(&ctl->cp_peer))
		return;
	o = json_object_new_object();
	json_object_object_add(o, "name",
	    json_object_new_string(worker->cp_name));
	json_object_object_add(o, "status",
	    json_object_new_string(worker->cp_last_exit));
	json_object_object_add(o, "restarts",
	    json_object_new_int(worker->cp_restarts));
	send_json(ctl, MSG_WORKER_DOWN, -1, o);
}

static void
worker_exited(struct child_proc *cp)
{
	parent_instances_orphaned(cp);
	parent_connects_orphaned(cp);
	if (cp->cp_timer != NULL)
		evtimer_del(cp->cp_timer);
	if (cp->cp_retired) {
		log_info("worker %s stopped", cp->cp_name);
		child_free(cp);
		return;
	}
	tell_controller_down(cp);
	if (cp->cp_respawn_now) {
		cp->cp_respawn_now = 0;
		parent_spawn(cp);
		return;
	}
	worker_backoff(cp);
}

/*
 * SIGSYS from the seccomp trap: the child's last words name the call.  A
 * compromised child could lie about the number, never about the signal.
 */
static void
describe_exit(struct child_proc *cp, int status)
{
	char	*name;
	int	 nr;

	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSYS ||
	    cp->cp_note == -1 || read(cp->cp_note, &nr, sizeof(nr)) !=
	    (ssize_t)sizeof(nr)) {
		describe_status(status, cp->cp_last_exit,
		    sizeof(cp->cp_last_exit));
		return;
	}
	name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
	snprintf(cp->cp_last_exit, sizeof(cp->cp_last_exit), "killed by "
	    "seccomp: forbidden system call %d (%s)", nr,
	    name != NULL ? name : "unknown");
	free(name);
}

static void
child_exited(struct child_proc *cp, int status)
{
	describe_exit(cp, status);
	peer_detach(&cp->cp_peer);
	if (parent.shutting_down) {
		log_debug("%s (pid %d) %s", cp->cp_peer.p_name,
		    (int)cp->cp_pid, cp->cp_last_exit);
		cp->cp_pid = 0;
		return;
	}
	if (cp->cp_kind == PROC_WORKER) {
		worker_exited(cp);
		return;
	}
	log_warnx("%s (pid %d) %s; shutting down", cp->cp_name,
	    (int)cp->cp_pid, cp->cp_last_exit);
	cp->cp_pid = 0;
	parent_shutdown(1);
}

static int
children_alive(void)
{
	struct child_proc	*cp;
	int			 n = 0;

	TAILQ_FOREACH(cp, &parent.children, cp_entry)
		if (cp->cp_pid > 0)
			n++;
	return n;
}

static void
sigchld_cb(int sig, short ev, void *arg)
{
	struct child_proc	*cp, *next;
	pid_t			 pid;
	int			 status;

	(void)sig;
	(void)ev;
	(void)arg;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		if (parent_instance_reaped(pid, status))
			continue;
		TAILQ_FOREACH_SAFE(cp, &parent.children, cp_entry, next)
			if (cp->cp_pid == pid) {
				child_exited(cp, status);
				break;
			}
	}
	if (parent.shutting_down && children_alive() == 0)
		event_base_loopexit(parent.base, NULL);
}

static void
shutdown_timer_cb(int fd, short ev, void *arg)
{
	struct child_proc *cp;

	(void)fd;
	(void)ev;
	(void)arg;
	TAILQ_FOREACH(cp, &parent.children, cp_entry)
		if (cp->cp_pid > 0) {
			log_warnx("%s (pid %d) did not exit, killing",
			    cp->cp_peer.p_name, (int)cp->cp_pid);
			kill(cp->cp_pid, SIGKILL);
		}
}

static void
parent_shutdown(int code)
{
	struct timeval		 tv = { SHUTDOWN_GRACE_MS / 1000, 0 };
	struct child_proc	*cp;

	if (code > parent.exit_code)
		parent.exit_code = code;
	if (parent.shutting_down)
		return;
	parent.shutting_down = 1;
	log_info("shutting down");
	control_stop();
	TAILQ_FOREACH(cp, &parent.children, cp_entry) {
		if (cp->cp_kind == PROC_WORKER) {
			parent_instances_orphaned(cp);
			parent_connects_orphaned(cp);
		}
		if (cp->cp_timer != NULL)
			evtimer_del(cp->cp_timer);
		if (cp->cp_pid > 0) {
			cp->cp_state = CS_STOPPING;
			kill(cp->cp_pid, SIGTERM);
		}
	}
	if (children_alive() == 0) {
		event_base_loopexit(parent.base, NULL);
		return;
	}
	parent.shutdown_timer = evtimer_new(parent.base, shutdown_timer_cb,
	    NULL);
	evtimer_add(parent.shutdown_timer, &tv);
}

/* ---- reload ---- */

static int
same_text(struct mcpbroker_conf *a, struct mcpbroker_conf *b,
    const char *server)
{
	struct mcpbroker_conf	*saved = parent.conf;
	char			*ta, *tb;
	int			 same;

	parent.conf = a;
	ta = conf_text(server);
	parent.conf = b;
	tb = conf_text(server);
	parent.conf = saved;
	same = strcmp(ta, tb) == 0;
	free(ta);
	free(tb);
	return same;
}

/* Same server block and same secret value: the worker can stay. */
static int
same_server(struct mcpbroker_conf *a, struct mcpbroker_conf *b,
    const char *server)
{
	const struct secret_ref *sa, *sb;

	if (!same_text(a, b, server))
		return 0;
	sa = &config_find_server(a, server)->srv_bearer;
	sb = &config_find_server(b, server)->srv_bearer;
	if (sa->sr_value == NULL || sb->sr_value == NULL)
		return sa->sr_value == sb->sr_value;
	return strcmp(sa->sr_value, sb->sr_value) == 0;
}

/* What a running daemon cannot change without a restart. */
static const char *
reload_blocked(const struct mcpbroker_conf *old,
    const struct mcpbroker_conf *new)
{
	const struct listen_conf *a, *b;

	if (strcmp(old->c_user, new->c_user) != 0)
		return "\"user\" changed";
	if ((old->c_instance_user == NULL) != (new->c_instance_user == NULL) ||
	    (old->c_instance_user != NULL && strcmp(old->c_instance_user,
	    new->c_instance_user) != 0))
		return "\"instance-user\" changed";
	if (strcmp(old->c_state_dir, new->c_state_dir) != 0)
		return "\"state-dir\" changed";
	if (strcmp(old->c_control_path, new->c_control_path) != 0)
		return "\"control socket\" changed";
	for (a = TAILQ_FIRST(&old->c_listens), b = TAILQ_FIRST(&new->c_listens);
	    a != NULL && b != NULL; a = TAILQ_NEXT(a, ls_entry),
	    b = TAILQ_NEXT(b, ls_entry))
		if (strcmp(a->ls_addr, b->ls_addr) != 0 ||
		    a->ls_port != b->ls_port || a->ls_tls != b->ls_tls)
			break;
	if (a != NULL || b != NULL)
		return "\"listen\" statements changed";
	return NULL;
}

static void
log_errors(char *errs)
{
	char *line, *save;

	for (line = strtok_r(errs, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save))
		log_warnx("%s", line);
}

/* filesystem rules are enforced with Landlock or not at all: fail closed. */
static int
landlock_missing(const struct mcpbroker_conf *conf, FILE *errs)
{
	const struct server_conf	*srv;
	int				 missing = 0;

	TAILQ_FOREACH(srv, &conf->c_servers, srv_entry)
		if (!TAILQ_EMPTY(&srv->srv_fs) &&
		    !instance_landlock_available()) {
			fprintf(errs, "%s:%d: server \"%s\": filesystem rules "
			    "need Landlock, which this kernel does not provide\n",
			    srv->srv_file, srv->srv_line, srv->srv_name);
			missing = 1;
		}
	return missing;
}

static struct mcpbroker_conf *
load_config(FILE *errs)
{
	struct mcpbroker_conf *conf;

	conf = config_parse_file(parent.opts->o_conffile,
	    parent.opts->o_defines, errs);
	if (conf != NULL && config_load_secrets(conf, errs) == -1) {
		config_free(conf);
		conf = NULL;
	}
	if (conf != NULL && landlock_missing(conf, errs)) {
		config_free(conf);
		conf = NULL;
	}
	if (conf != NULL && TAILQ_EMPTY(&conf->c_listens)) {
		fprintf(errs, "%s: no \"listen on\" statement\n",
		    parent.opts->o_conffile);
		config_free(conf);
		conf = NULL;
	}
	return conf;
}

/* A server the broker starts itself (command): its instances run here. */
static int
runs_instances(const struct mcpbroker_conf *conf)
{
	const struct server_conf *srv;

	TAILQ_FOREACH(srv, &conf->c_servers, srv_entry)
		if (srv->srv_transport == TRANSPORT_STDIO)
			return 1;
	return 0;
}

/* As root without instance-user: said once there is an instance to run. */
static void
warn_shared_instances(const struct mcpbroker_conf *old)
{
	if (geteuid() == 0 && parent.conf->c_instance_user == NULL &&
	    runs_instances(parent.conf) && (old == NULL ||
	    !runs_instances(old)))
		log_warnx("server instances run as \"%s\", the owner of the "
		    "state directory: a server could read and change the "
		    "database; set instance-user", parent.conf->c_user);
}

/* Workers follow the new server list: retire, restart or add. */
static void
reload_workers(struct mcpbroker_conf *old)
{
	struct child_proc	*cp, *next;
	struct server_conf	*srv;

	TAILQ_FOREACH_SAFE(cp, &parent.children, cp_entry, next) {
		if (cp->cp_kind != PROC_WORKER)
			continue;
		if (config_find_server(parent.conf, cp->cp_name) == NULL)
			cp->cp_retired = 1;
		else if (!same_server(old, parent.conf, cp->cp_name))
			cp->cp_respawn_now = 1;
		else
			continue;
		if (cp->cp_pid > 0)
			child_stop(cp);
		else if (cp->cp_retired)
			child_free(cp);
		else {
			cp->cp_respawn_now = 0;
			parent_spawn(cp);
		}
	}
	TAILQ_FOREACH(srv, &parent.conf->c_servers, srv_entry)
		if (child_find(PROC_WORKER, srv->srv_name) == NULL)
			parent_spawn(child_new(PROC_WORKER, srv->srv_name));
}

const char *
parent_reload(void)
{
	static char		 why[256];
	struct mcpbroker_conf	*conf, *old;
	struct child_proc	*cp;
	const char		*blocked;
	char			*errs = NULL;
	size_t			 errslen = 0;
	FILE			*f;

	log_info("reloading configuration from %s", parent.opts->o_conffile);
	if ((f = open_memstream(&errs, &errslen)) == NULL)
		fatal("open_memstream");
	conf = load_config(f);
	fclose(f);
	if (conf == NULL) {
		snprintf(why, sizeof(why), "%s", errs);
		why[strcspn(why, "\n")] = '\0';
		log_errors(errs);
		free(errs);
		log_warnx("reload failed; keeping the running configuration");
		return why;
	}
	free(errs);
	if ((blocked = reload_blocked(parent.conf, conf)) != NULL) {
		snprintf(why, sizeof(why), "%s: restart mcpbroker to apply it",
		    blocked);
		log_warnx("reload rejected: %s", why);
		config_free(conf);
		return why;
	}
	old = parent.conf;
	parent.conf = conf;
	log_set_json(conf->c_log_json);
	TAILQ_FOREACH(cp, &parent.children, cp_entry)
		if (cp->cp_kind != PROC_WORKER && cp->cp_pid > 0) {
			send_config(cp);
			send_done(cp, 1);
		}
	reload_workers(old);
	warn_shared_instances(old);
	config_free(old);
	log_info("configuration reloaded");
	return NULL;
}

/* ---- start-up ---- */

static void
signal_cb(int sig, short ev, void *arg)
{
	(void)ev;
	(void)arg;
	if (sig == SIGHUP) {
		(void)parent_reload();
		return;
	}
	log_info("received signal %d", sig);
	parent_shutdown(0);
}

/* A certificate or key file, whole, for the frontend's TLS context. */
static char *
read_pem(const char *what, const char *path)
{
	char	*buf;
	size_t	 n;
	FILE	*f;

	if ((f = fopen(path, "re")) == NULL) {
		log_warn("tls %s \"%s\"", what, path);
		return NULL;
	}
	if ((buf = calloc(1, TLS_FILE_MAX + 1)) == NULL)
		fatal("calloc");
	n = fread(buf, 1, TLS_FILE_MAX + 1, f);
	fclose(f);
	if (n == 0 || n > TLS_FILE_MAX || strlen(buf) != n) {
		log_warnx("tls %s \"%s\": empty, binary or larger than %d "
		    "bytes", what, path, TLS_FILE_MAX);
		free(buf);
		return NULL;
	}
	return buf;
}

static int
bind_one(const struct listen_conf *ls, struct listener *l)
{
	struct addrinfo	 hints, *res = NULL;
	char		 port[8];
	int		 fd = -1, on = 1, rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(port, sizeof(port), "%u", ls->ls_port);
	if ((rc = getaddrinfo(ls->ls_addr, port, &hints, &res)) != 0) {
		log_warnx("listen on %s port %s: %s", ls->ls_addr, port,
		    gai_strerror(rc));
		return -1;
	}
	if ((fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC |
	    SOCK_NONBLOCK, 0)) == -1 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) == -1 ||
	    (res->ai_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6,
	    IPV6_V6ONLY, &on, sizeof(on)) == -1) ||
	    bind(fd, res->ai_addr, res->ai_addrlen) == -1 ||
	    listen(fd, 512) == -1) {
		log_warn("listen on %s port %s", ls->ls_addr, port);
		if (fd != -1)
			close(fd);
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);
	if (ls->ls_tls && ((l->l_cert = read_pem("certificate", ls->ls_cert))
	    == NULL || (l->l_key = read_pem("key", ls->ls_key)) == NULL)) {
		free(l->l_cert);
		close(fd);
		return -1;
	}
	l->l_fd = fd;
	snprintf(l->l_addr, sizeof(l->l_addr), "%s", ls->ls_addr);
	l->l_port = ls->ls_port;
	l->l_tls = ls->ls_tls;
	return 0;
}

static int
bind_listeners(void)
{
	struct listen_conf *ls;

	TAILQ_FOREACH(ls, &parent.conf->c_listens, ls_entry) {
		if (parent.nlisteners == MAX_LISTENERS) {
			log_warnx("too many listen statements (max %d)",
			    MAX_LISTENERS);
			return -1;
		}
		if (bind_one(ls, &parent.listeners[parent.nlisteners]) == -1)
			return -1;
		parent.nlisteners++;
	}
	return 0;
}

/*
 * Server instances are programs the broker does not vouch for: as the
 * children's user they could open the database in the state directory
 * and signal the children.  instance-user gives them a uid of their own.
 */
static int
resolve_instance_user(void)
{
	const char	*name = parent.conf->c_instance_user;
	struct passwd	*pw;

	if (name == NULL) {
		warn_shared_instances(NULL);
		return 0;
	}
	if ((pw = getpwnam(name)) == NULL) {
		log_warnx("instance-user \"%s\" does not exist; create it or "
		    "change \"instance-user\" in %s", name,
		    parent.opts->o_conffile);
		return -1;
	}
	/* The state directory is the children's group's to read too. */
	if (pw->pw_uid == 0 || pw->pw_uid == parent.uid ||
	    pw->pw_gid == parent.gid) {
		log_warnx("instance-user \"%s\" is %s; server instances need "
		    "a user and group of their own", name, pw->pw_uid == 0 ?
		    "root" : pw->pw_uid == parent.uid ? "the children's user" :
		    "in the children's group");
		return -1;
	}
	parent.inst_uid = pw->pw_uid;
	parent.inst_gid = pw->pw_gid;
	return 0;
}

static int
resolve_user(void)
{
	struct passwd *pw;

	if (geteuid() != 0) {
		/* Unprivileged: children keep our uid, still sandboxed. */
		parent.uid = parent.inst_uid = getuid();
		parent.gid = parent.inst_gid = getgid();
		return 0;
	}
	if ((pw = getpwnam(parent.conf->c_user)) == NULL) {
		log_warnx("user \"%s\" does not exist; create it or change "
		    "\"user\" in %s", parent.conf->c_user,
		    parent.opts->o_conffile);
		return -1;
	}
	if (pw->pw_uid == 0) {
		log_warnx("user \"%s\" is root; children must not run as root",
		    parent.conf->c_user);
		return -1;
	}
	parent.uid = parent.inst_uid = pw->pw_uid;
	parent.gid = parent.inst_gid = pw->pw_gid;
	return resolve_instance_user();
}

/* The state directory belongs to the children's user, and only to it. */
static int
prepare_state_dir(void)
{
	const char	*dir = parent.conf->c_state_dir;
	struct stat	 st;

	if (mkdir(dir, 0750) == -1 && errno != EEXIST) {
		log_warn("state-dir \"%s\"", dir);
		return -1;
	}
	if (stat(dir, &st) == -1 || !S_ISDIR(st.st_mode)) {
		log_warnx("state-dir \"%s\" is not a directory", dir);
		return -1;
	}
	if (geteuid() == 0 && (st.st_uid != parent.uid ||
	    st.st_gid != parent.gid) && chown(dir, parent.uid, parent.gid) ==
	    -1) {
		log_warn("chown state-dir \"%s\"", dir);
		return -1;
	}
	if ((st.st_mode & 027) != 0) {
		if (chmod(dir, st.st_mode & 0750) == -1) {
			log_warn("chmod state-dir \"%s\"", dir);
			return -1;
		}
		log_info("state-dir \"%s\": mode %04o made %04o: others may "
		    "not read it, nor the group write", dir,
		    (unsigned int)(st.st_mode & 07777),
		    (unsigned int)(st.st_mode & 0750));
	}
	return 0;
}

/* Once the frontend has them, the parent has no use for TLS keys. */
static void
forget_tls_keys(void)
{
	size_t i;

	for (i = 0; i < parent.nlisteners; i++) {
		if (parent.listeners[i].l_key != NULL)
			explicit_bzero(parent.listeners[i].l_key,
			    strlen(parent.listeners[i].l_key));
		free(parent.listeners[i].l_key);
		free(parent.listeners[i].l_cert);
		parent.listeners[i].l_key = parent.listeners[i].l_cert = NULL;
	}
}

static void
start_children(void)
{
	struct server_conf	*srv;
	struct child_proc	*ctl, *fe, *cp;
	int			 sv[2];

	ctl = child_new(PROC_CONTROLLER, "controller");
	fe = child_new(PROC_FRONTEND, "frontend");
	parent_spawn(ctl);
	parent_spawn(fe);
	make_pair(sv);
	send_peer(fe, "controller", NULL, sv[0]);
	send_peer(ctl, "frontend", NULL, sv[1]);
	send_listeners(fe);
	forget_tls_keys();
	TAILQ_FOREACH(srv, &parent.conf->c_servers, srv_entry)
		parent_spawn(child_new(PROC_WORKER, srv->srv_name));
	TAILQ_FOREACH(cp, &parent.children, cp_entry)
		if (cp->cp_kind != PROC_WORKER)
			send_done(cp, 0);
}

static void
add_signal(struct event **ev, int sig, event_callback_fn cb)
{
	if ((*ev = evsignal_new(parent.base, sig, cb, NULL)) == NULL ||
	    evsignal_add(*ev, NULL) == -1)
		fatalx("signal %d", sig);
}

static void
parent_cleanup(void)
{
	struct child_proc	*cp;
	size_t			 i;

	parent_instances_kill_all();
	parent_connects_free_all();
	while ((cp = TAILQ_FIRST(&parent.children)) != NULL)
		child_free(cp);
	for (i = 0; i < parent.nlisteners; i++)
		close(parent.listeners[i].l_fd);
	if (parent.control_fd != -1)
		unlink(parent.conf->c_control_path);
	event_free(parent.sig_term);
	event_free(parent.sig_int);
	event_free(parent.sig_hup);
	event_free(parent.sig_chld);
	if (parent.shutdown_timer != NULL)
		event_free(parent.shutdown_timer);
	event_base_free(parent.base);
	config_free(parent.conf);
}

int
parent_main(struct opts *o)
{
	parent.opts = o;
	parent.control_fd = -1;
	TAILQ_INIT(&parent.children);
	log_procinit("parent");
	sandbox_early();
	if ((parent.conf = load_config(stderr)) == NULL)
		return 1;
	log_set_json(parent.conf->c_log_json);
	if (o->o_check) {
		if (o->o_verbose)
			config_print(stdout, parent.conf, NULL);
		fprintf(stderr, "configuration OK\n");
		config_free(parent.conf);
		return 0;
	}
	if (resolve_user() == -1 || prepare_state_dir() == -1 ||
	    bind_listeners() == -1 ||
	    (parent.control_fd = control_listen(parent.conf->c_control_path))
	    == -1)
		return 1;
	if (!o->o_foreground && daemon(0, 0) == -1)
		fatal("daemon");
	signal(SIGPIPE, SIG_IGN);
	if ((parent.base = event_base_new()) == NULL)
		fatalx("event_base_new");
	add_signal(&parent.sig_term, SIGTERM, signal_cb);
	add_signal(&parent.sig_int, SIGINT, signal_cb);
	add_signal(&parent.sig_hup, SIGHUP, signal_cb);
	add_signal(&parent.sig_chld, SIGCHLD, sigchld_cb);
	control_start(parent.base, parent.control_fd);
	start_children();
	log_info("started, pid %d", (int)getpid());
	event_base_dispatch(parent.base);
	log_info("exiting with status %d", parent.exit_code);
	parent_cleanup();
	return parent.exit_code;
}
