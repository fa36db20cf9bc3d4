#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <libgen.h>
#include <linux/landlock.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proc.h"
#include "worker/instance.h"

#define ENV_MAX		64
#define NOFILE_MAX	4096

/* What every server needs to read to run at all (its runtime, libraries). */
static const char *const system_read_paths[] = {
	"/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt",
	"/proc", "/sys", NULL
};

#define LL_READ		(LANDLOCK_ACCESS_FS_EXECUTE | \
			 LANDLOCK_ACCESS_FS_READ_FILE | \
			 LANDLOCK_ACCESS_FS_READ_DIR)
#define LL_ALL		((LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1)	/* ABI 1 */
#define LL_DEV		(LL_READ | LANDLOCK_ACCESS_FS_WRITE_FILE)

int
instance_landlock_available(void)
{
	return syscall(SYS_landlock_create_ruleset, NULL, 0,
	    LANDLOCK_CREATE_RULESET_VERSION) >= 1;
}

void
instance_signal(pid_t pid, int sig)
{
	if (pid > 0 && kill(-pid, sig) == -1 && errno == ESRCH)
		(void)kill(pid, sig);
}

/* ---- in the child, between fork and exec ---- */

/* Report why the child could not start, then die; the parent reads it. */
static void __attribute__((noreturn, format(printf, 2, 3)))
child_fail(int status_fd, const char *fmt, ...)
{
	char	buf[256];
	va_list	ap;
	int	n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0 && write(status_fd, buf, (size_t)n < sizeof(buf) ?
	    (size_t)n : sizeof(buf) - 1) == -1)
		_exit(126);
	_exit(127);
}

static int
landlock_allow(int ruleset, const char *path, uint64_t access)
{
	struct landlock_path_beneath_attr	attr;
	struct stat				st;
	int					rc;

	if ((attr.parent_fd = open(path, O_PATH | O_CLOEXEC)) == -1)
		return -1;
	/* Directory rights on a file are refused by the kernel. */
	if (fstat(attr.parent_fd, &st) == 0 && !S_ISDIR(st.st_mode))
		access &= ~(uint64_t)(LANDLOCK_ACCESS_FS_READ_DIR |
		    LANDLOCK_ACCESS_FS_REMOVE_DIR |
		    LANDLOCK_ACCESS_FS_REMOVE_FILE |
		    LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
		    LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK |
		    LANDLOCK_ACCESS_FS_MAKE_FIFO |
		    LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM);
	attr.allowed_access = access;
	rc = syscall(SYS_landlock_add_rule, ruleset,
	    LANDLOCK_RULE_PATH_BENEATH, &attr, 0);
	close(attr.parent_fd);
	return rc;
}

/*
 * The file-system allow-list: the configured paths, the system's runtime
 * directories, and the directory of every absolute path to a regular file
 * on the command line (the server's own code).  Directories on the command
 * line are data the server is to serve: only `filesystem` lines open them.
 */
static void
child_landlock(const struct server_conf *srv, int status_fd)
{
	struct landlock_ruleset_attr	 ra = { .handled_access_fs = LL_ALL };
	const struct fs_rule		*fr;
	struct stat			 st;
	char				 dir[4096];
	size_t				 i;
	int				 rs;

	if ((rs = syscall(SYS_landlock_create_ruleset, &ra, sizeof(ra), 0)) ==
	    -1)
		child_fail(status_fd, "filesystem rules need Landlock, which "
		    "this kernel does not provide: %s", strerror(errno));
	TAILQ_FOREACH(fr, &srv->srv_fs, fs_entry)
		if (landlock_allow(rs, fr->fs_path, fr->fs_access == FS_WRITE ?
		    LL_ALL : LL_READ) == -1)
			child_fail(status_fd, "filesystem %s \"%s\": %s",
			    fr->fs_access == FS_WRITE ? "write" : "read",
			    fr->fs_path, strerror(errno));
	for (i = 0; system_read_paths[i] != NULL; i++)
		(void)landlock_allow(rs, system_read_paths[i], LL_READ);
	(void)landlock_allow(rs, "/dev", LL_DEV);
	for (i = 0; i < srv->srv_argc; i++) {
		if (srv->srv_argv[i][0] != '/' || stat(srv->srv_argv[i], &st) ==
		    -1 || !S_ISREG(st.st_mode))
			continue;
		snprintf(dir, sizeof(dir), "%s", srv->srv_argv[i]);
		(void)landlock_allow(rs, dirname(dir), LL_READ);
	}
	if (syscall(SYS_landlock_restrict_self, rs, 0) == -1)
		child_fail(status_fd, "landlock_restrict_self: %s",
		    strerror(errno));
	close(rs);
}

static void
child_drop_privileges(uid_t uid, gid_t gid, int status_fd)
{
	cap_t	caps;
	int	cap;

	if (geteuid() == 0) {
		for (cap = 0; cap <= CAP_LAST_CAP; cap++)
			(void)prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
		if (setgroups(1, &gid) == -1 || setresgid(gid, gid, gid) == -1 ||
		    setresuid(uid, uid, uid) == -1)
			child_fail(status_fd, "cannot switch to uid %u: %s",
			    (unsigned int)uid, strerror(errno));
		/* The uid change cleared it. */
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	}
	(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if ((caps = cap_init()) == NULL || cap_set_proc(caps) == -1)
		child_fail(status_fd, "cannot drop capabilities");
	cap_free(caps);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1)
		child_fail(status_fd, "no_new_privs: %s", strerror(errno));
}

/* Without root, a user namespace lets us make the network namespace. */
static void
child_no_network(int status_fd)
{
	int flags = CLONE_NEWNET;

	if (geteuid() != 0)
		flags |= CLONE_NEWUSER;
	if (unshare(flags) == -1)
		child_fail(status_fd, "network none: cannot create a network "
		    "namespace: %s", strerror(errno));
}

static void
env_add(char **env, size_t *n, const char *name, const char *value)
{
	if (value == NULL || *n >= ENV_MAX - 1)
		return;
	if (asprintf(&env[*n], "%s=%s", name, value) != -1)
		(*n)++;
}

/* HOME LOGNAME PATH SHELL TERM USER, plus what the config passes on. */
static void
child_environment(const struct server_conf *srv, uid_t uid, char **env)
{
	struct passwd	*pw = getpwuid(geteuid() == 0 ? uid : getuid());
	const char	*path = getenv("PATH");
	size_t		 n = 0, i;

	env_add(env, &n, "HOME", pw != NULL ? pw->pw_dir : "/");
	env_add(env, &n, "LOGNAME", pw != NULL ? pw->pw_name : "nobody");
	env_add(env, &n, "USER", pw != NULL ? pw->pw_name : "nobody");
	env_add(env, &n, "PATH", path != NULL ? path :
	    "/usr/local/bin:/usr/bin:/bin");
	env_add(env, &n, "SHELL", "/bin/sh");
	env_add(env, &n, "TERM", "dumb");
	for (i = 0; i < srv->srv_nenv; i++) {
		/* The six above are ours; the config passes others on. */
		if (strcmp(srv->srv_env[i], "HOME") == 0 ||
		    strcmp(srv->srv_env[i], "LOGNAME") == 0 ||
		    strcmp(srv->srv_env[i], "USER") == 0 ||
		    strcmp(srv->srv_env[i], "PATH") == 0 ||
		    strcmp(srv->srv_env[i], "SHELL") == 0 ||
		    strcmp(srv->srv_env[i], "TERM") == 0)
			continue;
		env_add(env, &n, srv->srv_env[i], getenv(srv->srv_env[i]));
	}
	env[n] = NULL;
}

static void
child_limits(void)
{
	struct rlimit core = { 0, 0 }, nofile = { NOFILE_MAX, NOFILE_MAX };

	(void)setrlimit(RLIMIT_CORE, &core);
	(void)setrlimit(RLIMIT_NOFILE, &nofile);
}

static void __attribute__((noreturn))
child_exec(const struct server_conf *srv, uid_t uid, gid_t gid, int fds[3],
    int status_fd)
{
	char		*env[ENV_MAX];
	sigset_t	 none;
	int		 i;

	if (setsid() == -1)
		child_fail(status_fd, "setsid: %s", strerror(errno));
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Ignored dispositions survive exec: give the server the defaults. */
	signal(SIGPIPE, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	for (i = 0; i < 3; i++)
		if (dup2(fds[i], i) == -1)
			child_fail(status_fd, "dup2: %s", strerror(errno));
	if (status_fd != 3 && dup2(status_fd, 3) == -1)
		_exit(127);
	status_fd = 3;
	if (fcntl(status_fd, F_SETFD, FD_CLOEXEC) == -1)
		_exit(127);
	proc_closefrom(4);
	child_limits();
	child_environment(srv, uid, env);
	if (srv->srv_network_none)
		child_no_network(status_fd);
	child_drop_privileges(uid, gid, status_fd);
	if (!TAILQ_EMPTY(&srv->srv_fs))
		child_landlock(srv, status_fd);
	execvpe(srv->srv_argv[0], srv->srv_argv, env);
	child_fail(status_fd, "cannot execute \"%s\": %s", srv->srv_argv[0],
	    strerror(errno));
}

/* ---- in the spawner ---- */

static void
close_pair(int p[2])
{
	if (p[0] != -1)
		close(p[0]);
	if (p[1] != -1)
		close(p[1]);
}

/* Wait for exec to succeed (the status pipe closes) or for its reason. */
static int
spawn_status(pid_t pid, int status_fd, char *why, size_t whylen)
{
	ssize_t	n;
	int	status;

	do
		n = read(status_fd, why, whylen - 1);
	while (n == -1 && errno == EINTR);
	close(status_fd);
	if (n <= 0)
		return 0;
	why[n] = '\0';
	(void)waitpid(pid, &status, 0);
	return -1;
}

pid_t
instance_spawn(const struct server_conf *srv, uid_t uid, gid_t gid,
    struct instance_fds *out, char *why, size_t whylen)
{
	int	in[2] = { -1, -1 }, o[2] = { -1, -1 }, e[2] = { -1, -1 };
	int	st[2] = { -1, -1 }, fds[3];
	pid_t	pid;

	if (srv->srv_argv == NULL || srv->srv_argc == 0) {
		snprintf(why, whylen, "server \"%s\" has no command",
		    srv->srv_name);
		return -1;
	}
	if (pipe2(in, O_CLOEXEC) == -1 || pipe2(o, O_CLOEXEC) == -1 ||
	    pipe2(e, O_CLOEXEC) == -1 || pipe2(st, O_CLOEXEC) == -1) {
		snprintf(why, whylen, "pipe: %s", strerror(errno));
		goto fail;
	}
	fds[0] = in[0];
	fds[1] = o[1];
	fds[2] = e[1];
	if ((pid = fork()) == -1) {
		snprintf(why, whylen, "fork: %s", strerror(errno));
		goto fail;
	}
	if (pid == 0)
		child_exec(srv, uid, gid, fds, st[1]);
	close(in[0]);
	close(o[1]);
	close(e[1]);
	close(st[1]);
	if (spawn_status(pid, st[0], why, whylen) == -1) {
		close(in[1]);
		close(o[0]);
		close(e[0]);
		return -1;
	}
	out->if_stdin = in[1];
	out->if_stdout = o[0];
	out->if_stderr = e[0];
	return pid;
 fail:
	close_pair(in);
	close_pair(o);
	close_pair(e);
	close_pair(st);
	return -1;
}
