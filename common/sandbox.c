#include <sys/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/resource.h>

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <seccomp.h>

#include "common/log.h"
#include "common/sandbox.h"

/* si_code of a seccomp SIGSYS; glibc's headers do not name it. */
#ifndef SYS_SECCOMP
#define SYS_SECCOMP	1
#endif

void
sandbox_early(void)
{
	struct rlimit rl = { 0, 0 };

	if (prctl(PR_SET_DUMPABLE, 0) == -1)
		fatal("prctl(PR_SET_DUMPABLE)");
	if (setrlimit(RLIMIT_CORE, &rl) == -1)
		fatal("setrlimit(RLIMIT_CORE)");
}

/* Root only: the bounding set goes while we still hold CAP_SETPCAP. */
static void
sandbox_drop_bounding_set(void)
{
	int cap;

	for (cap = 0; cap <= CAP_LAST_CAP; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == -1 &&
		    errno != EINVAL)
			fatal("prctl(PR_CAPBSET_DROP, %d)", cap);
}

static void
sandbox_clear_caps(void)
{
	cap_t caps;

	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == -1 &&
	    errno != EINVAL)
		fatal("prctl(PR_CAP_AMBIENT_CLEAR_ALL)");
	if ((caps = cap_init()) == NULL)
		fatal("cap_init");
	if (cap_set_proc(caps) == -1)
		fatal("cap_set_proc");
	cap_free(caps);
}

void
sandbox_drop_privileges(uid_t uid, gid_t gid)
{
	/* 1 when the daemon is a container's pid 1 */
	pid_t parent = getppid();

	if (geteuid() == 0) {
		sandbox_drop_bounding_set();
		if (uid != 0) {
			if (setgroups(1, &gid) == -1)
				fatal("setgroups");
			if (setresgid(gid, gid, gid) == -1)
				fatal("setresgid %u", (unsigned int)gid);
			if (setresuid(uid, uid, uid) == -1)
				fatal("setresuid %u", (unsigned int)uid);
			/* Must not be able to get root back. */
			if (setuid(0) != -1 || seteuid(0) != -1)
				fatalx("privileges could be regained");
			/* The uid change cleared it: die with the parent. */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) == -1 ||
			    getppid() != parent)
				fatal("prctl(PR_SET_PDEATHSIG)");
		}
	}
	sandbox_clear_caps();
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1)
		fatal("prctl(PR_SET_NO_NEW_PRIVS)");
}

/* Calls every process makes while serving its event loop. */
static const int sc_base[] = {
	SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
	SCMP_SYS(close), SCMP_SYS(recvmsg), SCMP_SYS(sendmsg),
	SCMP_SYS(recvfrom), SCMP_SYS(sendto),
	SCMP_SYS(epoll_wait), SCMP_SYS(epoll_pwait), SCMP_SYS(epoll_ctl),
	SCMP_SYS(poll), SCMP_SYS(ppoll),
	SCMP_SYS(clock_gettime), SCMP_SYS(clock_nanosleep),
	SCMP_SYS(nanosleep), SCMP_SYS(gettimeofday), SCMP_SYS(time),
	SCMP_SYS(exit), SCMP_SYS(exit_group), SCMP_SYS(restart_syscall),
	SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigprocmask),
	SCMP_SYS(rt_sigaction), SCMP_SYS(getpid),
	SCMP_SYS(gettid), SCMP_SYS(brk), SCMP_SYS(munmap), SCMP_SYS(mremap),
	SCMP_SYS(madvise), SCMP_SYS(futex), SCMP_SYS(fcntl),
	SCMP_SYS(getrandom), SCMP_SYS(fstat), SCMP_SYS(newfstatat),
	SCMP_SYS(lseek), SCMP_SYS(sched_yield), SCMP_SYS(pipe2),
	SCMP_SYS(eventfd2),
	/* glibc's qsort asks once how much memory there is, on a big sort. */
	SCMP_SYS(sysinfo),
	-1
};

static const int sc_frontend[] = {
	SCMP_SYS(accept4), SCMP_SYS(accept), SCMP_SYS(setsockopt),
	SCMP_SYS(getsockopt), SCMP_SYS(getsockname), SCMP_SYS(getpeername),
	SCMP_SYS(shutdown),
	-1
};

/* SQLite in the state directory. */
static const int sc_controller[] = {
	SCMP_SYS(openat), SCMP_SYS(pread64), SCMP_SYS(pwrite64),
	SCMP_SYS(fsync), SCMP_SYS(fdatasync), SCMP_SYS(ftruncate),
	SCMP_SYS(unlink), SCMP_SYS(unlinkat), SCMP_SYS(getcwd),
	SCMP_SYS(fchown), SCMP_SYS(fchmod), SCMP_SYS(geteuid),
	SCMP_SYS(getuid), SCMP_SYS(flock), SCMP_SYS(access),
	SCMP_SYS(faccessat), SCMP_SYS(faccessat2), SCMP_SYS(stat),
	SCMP_SYS(lstat), SCMP_SYS(readlink),
	/* The HTTP client to the providers, on sockets the parent opened. */
	SCMP_SYS(setsockopt), SCMP_SYS(getsockopt), SCMP_SYS(getsockname),
	SCMP_SYS(getpeername), SCMP_SYS(shutdown),
	-1
};

static const int sc_worker[] = {
	SCMP_SYS(shutdown), SCMP_SYS(getsockopt), SCMP_SYS(setsockopt),
	-1
};

#ifdef MCPBROKER_SANITIZE
/*
 * LeakSanitizer's exit-time check stops the world with ptrace from a
 * cloned thread, which a non-dumpable, seccomp-confined process cannot do:
 * it would hang at exit.  Leak checks cover the parent, mcpbrokerctl and
 * the unit tests; in sandboxed children it is off.
 */
static int sandbox_active;

int __lsan_is_turned_off(void);

int
__lsan_is_turned_off(void)
{
	return sandbox_active;
}

/* What the ASan/UBSan runtimes need while a sandboxed process runs. */
static const int sc_sanitizer[] = {
	SCMP_SYS(openat), SCMP_SYS(readlink), SCMP_SYS(clone),
	SCMP_SYS(clone3), SCMP_SYS(ptrace), SCMP_SYS(prctl),
	SCMP_SYS(sched_getaffinity), SCMP_SYS(getdents64),
	SCMP_SYS(sigaltstack), SCMP_SYS(wait4), SCMP_SYS(uname),
	SCMP_SYS(prlimit64), SCMP_SYS(getrlimit), SCMP_SYS(getppid),
	SCMP_SYS(mprotect), SCMP_SYS(mmap), SCMP_SYS(rt_sigtimedwait),
	SCMP_SYS(kill), SCMP_SYS(getuid), SCMP_SYS(geteuid),
	SCMP_SYS(setrlimit), SCMP_SYS(pipe2), SCMP_SYS(dup2),
	-1
};
#endif

/* Whether the sanitizer runtimes need this call (then it is allowed). */
static int
sandbox_sanitizer_allows(int nr)
{
#ifdef MCPBROKER_SANITIZE
	const int *sc;

	for (sc = sc_sanitizer; *sc != -1; sc++)
		if (*sc == nr)
			return 1;
#else
	(void)nr;
#endif
	return 0;
}

/*
 * Calls a library may try on its own (reading a file, opening a socket):
 * they fail with EACCES instead of killing, because nothing is lost by
 * refusing them and a crash would be.  Everything a process needs comes
 * from the parent; everything else kills.
 */
static const int sc_refuse_all[] = {
	SCMP_SYS(socket),
	-1
};

/* The controller's openat is allowed (SQLite); the others may not open. */
static const int sc_refuse_files[] = {
	SCMP_SYS(openat), SCMP_SYS(open),
	-1
};

/*
 * A forbidden call: tell the parent its number on PROC_NOTE_FD, then die
 * of SIGSYS (SA_RESETHAND has made that the default again).  Only write(2)
 * and the signal calls, all async-signal-safe and all allowed.  A debug
 * build (SECCOMP_TRAP) names it on stderr and carries on, the call having
 * failed, so that one run finds every missing entry.
 */
static void
sandbox_sigsys(int sig, siginfo_t *si, void *ctx)
{
	int nr = si->si_syscall;

	(void)ctx;
	if (si->si_code != SYS_SECCOMP)
		nr = -1;
#ifdef MCPBROKER_SECCOMP_TRAP
	char buf[96];
	int n;

	n = snprintf(buf, sizeof(buf), "%s: seccomp: forbidden syscall %d\n",
	    log_procname(), nr);
	if (n > 0)
		(void)!write(STDERR_FILENO, buf, (size_t)n);
	(void)sig;
	return;
#else
	(void)!write(PROC_NOTE_FD, &nr, sizeof(nr));
	raise(sig);
#endif
}

static void
sandbox_sigsys_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = sandbox_sigsys;
	sa.sa_flags = SA_SIGINFO;
#ifndef MCPBROKER_SECCOMP_TRAP
	sa.sa_flags |= SA_RESETHAND | SA_NODEFER;
#endif
	if (sigaction(SIGSYS, &sa, NULL) == -1)
		fatal("sigaction(SIGSYS)");
}

static void
sandbox_rules(scmp_filter_ctx ctx, uint32_t action, const int *list)
{
	int rc;

	for (; *list != -1; list++)
		if ((rc = seccomp_rule_add(ctx, action, *list, 0)) < 0 &&
		    rc != -EEXIST)
			fatalx("seccomp_rule_add(%d): %s", *list, strerror(-rc));
}

static void
sandbox_allow(scmp_filter_ctx ctx, const int *list)
{
	sandbox_rules(ctx, SCMP_ACT_ALLOW, list);
}

/*
 * tgkill only to signal ourselves (raise, abort): the children share one
 * uid, so any other target would be a sibling.
 */
static void
sandbox_allow_own_tgkill(scmp_filter_ctx ctx)
{
	if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
	    SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)getpid(), 0)) < 0)
		fatalx("seccomp_rule_add(tgkill)");
}

/* ioctl only to ask how many bytes wait on a descriptor (libevent). */
static void
sandbox_allow_fionread(scmp_filter_ctx ctx)
{
	if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
	    SCMP_A1(SCMP_CMP_EQ, FIONREAD, 0)) < 0)
		fatalx("seccomp_rule_add(ioctl)");
}

#ifndef MCPBROKER_SANITIZE
/* Memory may be mapped and protected, never executable. */
static void
sandbox_allow_noexec_mappings(scmp_filter_ctx ctx)
{
	if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
	    SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)) < 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
	    SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)) < 0)
		fatalx("seccomp_rule_add(mmap)");
}
#endif

/* Sanitizer builds allow openat (their runtimes read /proc). */
static void
sandbox_refuse_files(scmp_filter_ctx ctx)
{
	const int *sc;

	for (sc = sc_refuse_files; *sc != -1; sc++)
		if (!sandbox_sanitizer_allows(*sc))
			sandbox_rules(ctx, SCMP_ACT_ERRNO(EACCES), (const int[])
			    { *sc, -1 });
}

void
sandbox_seccomp(enum proc_kind kind)
{
	scmp_filter_ctx	 ctx;
	int		 rc;

	sandbox_sigsys_handler();
	if ((ctx = seccomp_init(SCMP_ACT_TRAP)) == NULL)
		fatalx("seccomp_init failed");
	/* A call of another ABI (i386 int 0x80, x32) dies at once. */
	if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH,
	    SCMP_ACT_KILL_PROCESS) < 0)
		fatalx("seccomp_attr_set(BADARCH)");
	sandbox_allow(ctx, sc_base);
	sandbox_allow_own_tgkill(ctx);
	sandbox_allow_fionread(ctx);
#ifdef MCPBROKER_SANITIZE
	sandbox_allow(ctx, sc_sanitizer);
#else
	sandbox_allow_noexec_mappings(ctx);
#endif
	sandbox_rules(ctx, SCMP_ACT_ERRNO(EACCES), sc_refuse_all);
	switch (kind) {
	case PROC_FRONTEND:
		sandbox_allow(ctx, sc_frontend);
		sandbox_refuse_files(ctx);
		break;
	case PROC_CONTROLLER:
		sandbox_allow(ctx, sc_controller);
		break;
	case PROC_WORKER:
		sandbox_allow(ctx, sc_worker);
		sandbox_refuse_files(ctx);
		break;
	default:
		fatalx("no seccomp policy for %s", proc_kind_str(kind));
	}
	if ((rc = seccomp_load(ctx)) < 0)
		fatalx("seccomp_load: %s", strerror(-rc));
#ifdef MCPBROKER_SANITIZE
	sandbox_active = 1;
#endif
	seccomp_release(ctx);
}

void
sandbox_apply(enum proc_kind kind, uid_t uid, gid_t gid)
{
	sandbox_drop_privileges(uid, gid);
	sandbox_seccomp(kind);
	log_debug("sandbox applied (uid %u, seccomp %s)", (unsigned int)uid,
	    proc_kind_str(kind));
}
