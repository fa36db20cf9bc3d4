#include <sys/prctl.h>
#include <sys/syscall.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "common/log.h"
#include "common/proc.h"
#include "common/util.h"

static const char *const proc_kinds[] = {
	[PROC_PARENT] = "parent",
	[PROC_FRONTEND] = "frontend",
	[PROC_CONTROLLER] = "controller",
	[PROC_WORKER] = "worker",
	[PROC_CTL] = "mcpbrokerctl",
};

const char *
proc_kind_str(enum proc_kind k)
{
	return proc_kinds[k];
}

int
proc_kind_parse(const char *s, enum proc_kind *k)
{
	enum proc_kind i;

	for (i = PROC_FRONTEND; i <= PROC_WORKER; i++)
		if (strcmp(s, proc_kinds[i]) == 0) {
			*k = i;
			return 0;
		}
	return -1;
}

void
peer_init(struct peer *p, enum proc_kind kind, const char *name,
    const struct dispatch *table, void (*lost)(struct peer *, const char *),
    void *arg)
{
	memset(p, 0, sizeof(*p));
	snprintf(p->p_name, sizeof(p->p_name), "%s", name);
	p->p_kind = kind;
	p->p_dispatch = table;
	p->p_lost = lost;
	p->p_arg = arg;
}

static void
peer_drop(struct peer *p, const char *why)
{
	peer_detach(p);
	if (p->p_lost != NULL)
		p->p_lost(p, why);
}

static const struct dispatch *
peer_lookup(const struct peer *p, uint16_t type)
{
	const struct dispatch *d;

	for (d = p->p_dispatch; d->d_type != MSG_NONE; d++)
		if (d->d_type == type)
			return d;
	return NULL;
}

/* Everything a message must satisfy before its handler sees it. */
static const char *
peer_check(struct peer *p, const struct dispatch *d, const struct msg *m)
{
	uint16_t type = m->m_hdr.mh_type;

	if (d == NULL)
		return "message not permitted from this peer";
	if (((d->d_flags & DISPATCH_FD) != 0) != (m->m_fd != -1))
		return (m->m_fd == -1) ? "descriptor missing" :
		    "descriptor not permitted";
	if (d->d_flags & DISPATCH_ONCE) {
		if (p->p_seen[type / 8] & (1 << (type % 8)))
			return "message permitted only once";
		p->p_seen[type / 8] |= 1 << (type % 8);
	}
	return NULL;
}

/*
 * Validate and dispatch one frame.  A handler owns the frame's descriptor
 * from the moment it is called; before that it is ours to close.
 */
static void
peer_on_msg(struct msgchan *mc, struct msg *m, void *arg)
{
	struct peer		*p = arg;
	const struct dispatch	*d;
	struct json_object	*obj = NULL;
	const char		*why;
	int			 rv = -1, handed = 0;

	(void)mc;
	d = peer_lookup(p, m->m_hdr.mh_type);
	if ((why = peer_check(p, d, m)) == NULL) {
		if ((obj = json_parse_object(m->m_data, m->m_len)) == NULL)
			why = "payload is not a JSON object";
		else {
			handed = 1;
			if ((rv = d->d_fn(p, m, obj)) == -1)
				why = "invalid payload";
		}
	}
	json_object_put(obj);
	if (!handed && m->m_fd != -1)
		close(m->m_fd);
	if (rv == -1) {
		log_warnx("protocol violation by %s: %s: %s", p->p_name,
		    msg_type_str(m->m_hdr.mh_type), why);
		peer_drop(p, why);
	}
}

static void
peer_on_err(struct msgchan *mc, const char *why, void *arg)
{
	struct peer *p = arg;

	(void)mc;
	if (strcmp(why, "connection closed") != 0)
		log_warnx("channel to %s: %s", p->p_name, why);
	else
		log_debug("channel to %s closed", p->p_name);
	peer_drop(p, why);
}

int
peer_attach(struct peer *p, struct event_base *base, int fd)
{
	if (p->p_chan != NULL)
		peer_detach(p);
	memset(p->p_seen, 0, sizeof(p->p_seen));
	p->p_chan = msgchan_new(base, fd, peer_on_msg, peer_on_err, p);
	return p->p_chan == NULL ? -1 : 0;
}

void
peer_detach(struct peer *p)
{
	msgchan_free(p->p_chan);
	p->p_chan = NULL;
}

int
peer_connected(const struct peer *p)
{
	return p->p_chan != NULL;
}

int
peer_send(struct peer *p, uint16_t type, uint64_t id, int fd,
    struct json_object *payload)
{
	const char	*s = "{}";
	size_t		 len = 2;

	if (p->p_chan == NULL) {
		if (fd != -1)
			close(fd);
		errno = EPIPE;
		return -1;
	}
	if (payload != NULL)
		s = json_object_to_json_string_length(payload,
		    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
		    &len);
	if (msgchan_compose(p->p_chan, type, id, 0, fd, s, len) == -1) {
		log_warn("send %s to %s", msg_type_str(type), p->p_name);
		return -1;
	}
	return 0;
}

void
proc_closefrom(int lowfd)
{
	if (syscall(SYS_close_range, (unsigned int)lowfd, ~0U, 0) == 0)
		return;
	for (int fd = lowfd; fd < 65536; fd++)
		(void)close(fd);
}

/*
 * What a child's environment keeps of the parent's: the CA file OpenSSL
 * would read, and the sanitizers' options.  Nothing else: a key given
 * with api-key-env or bearer-token-env reaches its process through the
 * configuration, and the frontend and the workers never see the others.
 */
static const char *const env_kept[] = {
	"SSL_CERT_FILE", "SSL_CERT_DIR", "ASAN_OPTIONS", "UBSAN_OPTIONS",
	"LSAN_OPTIONS",
};
#define ENV_KEPT	(sizeof(env_kept) / sizeof(env_kept[0]))

static void
child_env(char *env[ENV_KEPT + 1])
{
	extern char	**environ;
	char		**e;
	size_t		  i, n = 0, len;

	for (i = 0; i < ENV_KEPT; i++) {
		len = strlen(env_kept[i]);
		for (e = environ; *e != NULL; e++)
			if (strncmp(*e, env_kept[i], len) == 0 &&
			    (*e)[len] == '=') {
				env[n++] = *e;
				break;
			}
	}
	env[n] = NULL;
}

/* In the new child: a clean descriptor table, then exec ourselves. */
static void __attribute__((noreturn))
proc_exec_child(const char *self, enum proc_kind kind, const char *name,
    int chan, int note, int err, int foreground, int verbose)
{
	char		*argv[12], *env[ENV_KEPT + 1];
	char		 vflags[8] = "-";
	int		 argc = 0, i, devnull;
	sigset_t	 all;

	/* Die with the parent, whatever happens to the channel. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1)
		_exit(127);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	/* All moved up first: none may land on another's number. */
	if ((chan = fcntl(chan, F_DUPFD, 64)) == -1 ||
	    (note = fcntl(note, F_DUPFD, 64)) == -1 ||
	    (err = fcntl(err, F_DUPFD, 64)) == -1 ||
	    dup2(chan, PROC_CHAN_FD) == -1 || dup2(note, PROC_NOTE_FD) == -1 ||
	    dup2(err, STDERR_FILENO) == -1)
		_exit(127);
	proc_closefrom(PROC_NOTE_FD + 1);
	if ((devnull = open("/dev/null", O_RDWR)) != -1) {
		dup2(devnull, STDIN_FILENO);
		dup2(devnull, STDOUT_FILENO);
		if (devnull > STDERR_FILENO)
			close(devnull);
	}
	argv[argc++] = "mcpbroker";
	argv[argc++] = "-P";
	argv[argc++] = (char *)proc_kind_str(kind);
	if (name != NULL) {
		argv[argc++] = "-S";
		argv[argc++] = (char *)name;
	}
	if (foreground)
		argv[argc++] = "-d";
	for (i = 1; i <= verbose && i < (int)sizeof(vflags) - 1; i++)
		vflags[i] = 'v';
	if (verbose > 0)
		argv[argc++] = vflags;
	argv[argc] = NULL;
	child_env(env);
	execve(self, argv, env);
	_exit(127);
}

pid_t
proc_spawn(const char *self, enum proc_kind kind, const char *name, int chan,
    int note, int err, int foreground, int verbose)
{
	pid_t pid;

	switch (pid = fork()) {
	case -1:
		log_warn("fork %s", proc_kind_str(kind));
		return -1;
	case 0:
		proc_exec_child(self, kind, name, chan, note, err, foreground,
		    verbose);
	default:
		return pid;
	}
}
