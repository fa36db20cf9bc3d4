/*
 * The seccomp policy of each process kind, as a table: for every system
 * call below, whether the frontend, the controller and a worker may make
 * it (WORKS), get EACCES/EPERM (REFUSED), or die of SIGSYS (KILLED).  Each
 * cell runs in a forked child under the real filter (sandbox_seccomp), so
 * an entry added to or dropped from an allow-list by mistake fails here.
 *
 * The table is written out independently of common/sandbox.c on purpose:
 * it is the promise, the filter is the implementation.  "Works" means the
 * filter let the call through; the kernel may still fail it (EBADF on the
 * -1 descriptors used to keep calls harmless).  A killed call must also
 * have left its number on PROC_NOTE_FD, where the parent reads it.
 */
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/futex.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/proc.h"
#include "common/sandbox.h"

enum outcome { WORKS, REFUSED, KILLED };

#define EXIT_WORKS	0
#define EXIT_REFUSED	3
#define NO_NOTE		(-2)	/* killed without a word: another ABI */

struct row {
	const char	*r_name;
	long		 r_nr;		/* expected in the note; NO_NOTE */
	long		(*r_call)(void);
	enum outcome	 r_frontend, r_controller, r_worker;
	int		 r_sanitizer;	/* allowed in sanitizer builds */
};

static char	 buf[64];
static int	 word;

static long c_getpid(void) { return syscall(SYS_getpid); }
static long c_read(void) { return syscall(SYS_read, -1, buf, 1); }
static long c_write(void) { return syscall(SYS_write, -1, buf, 1); }
static long c_close(void) { return syscall(SYS_close, -1); }
static long c_clock(void)
{
	struct timespec ts;

	return syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
}
static long c_futex(void)
{
	return syscall(SYS_futex, &word, FUTEX_WAKE, 1, NULL, NULL, 0);
}
static long c_getrandom(void) { return syscall(SYS_getrandom, buf, 16, 0); }
static long c_mmap_rw(void)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE |
	    MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? -1 : munmap(p, 4096);
}
static long c_mmap_exec(void)
{
	return (long)syscall(SYS_mmap, NULL, 4096, PROT_READ | PROT_EXEC,
	    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == -1 ? -1 : 0;
}
static long c_mprotect_exec(void)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE |
	    MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return -1;
	return syscall(SYS_mprotect, p, 4096, PROT_READ | PROT_EXEC);
}
static long c_epoll_wait(void)
{
	return syscall(SYS_epoll_wait, -1, buf, 1, 0);
}
static long c_recvmsg(void) { return syscall(SYS_recvmsg, -1, NULL, 0); }
static long c_sendmsg(void) { return syscall(SYS_sendmsg, -1, NULL, 0); }
static long c_fcntl(void) { return syscall(SYS_fcntl, -1, F_GETFL); }
static long c_fionread(void) { return syscall(SYS_ioctl, -1, FIONREAD, &word); }
static long c_tiocsti(void) { return syscall(SYS_ioctl, -1, TIOCSTI, buf); }
static long c_accept4(void) { return syscall(SYS_accept4, -1, NULL, NULL, 0); }
static long c_setsockopt(void)
{
	return syscall(SYS_setsockopt, -1, SOL_SOCKET, SO_KEEPALIVE, &word,
	    sizeof(word));
}
static long c_shutdown(void) { return syscall(SYS_shutdown, -1, SHUT_RDWR); }
static long c_openat(void)
{
	return syscall(SYS_openat, AT_FDCWD, "/dev/null", O_RDONLY);
}
static long c_fsync(void) { return syscall(SYS_fsync, -1); }
static long c_unlink(void) { return syscall(SYS_unlink, "/nonexistent/x"); }
static long c_socket(void) { return syscall(SYS_socket, AF_INET, SOCK_STREAM, 0); }
static long c_connect(void) { return syscall(SYS_connect, -1, NULL, 0); }
static long c_bind(void) { return syscall(SYS_bind, -1, NULL, 0); }
static long c_listen(void) { return syscall(SYS_listen, -1, 1); }
static long c_socketpair(void)
{
	int sv[2];

	return syscall(SYS_socketpair, AF_UNIX, SOCK_STREAM, 0, sv);
}
static long c_execve(void)
{
	char *argv[] = { "/nonexistent", NULL };

	return syscall(SYS_execve, argv[0], argv, argv + 1);
}
static long c_fork(void)
{
	long pid = syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0);

	if (pid == 0)
		_exit(EXIT_WORKS);
	return pid;
}
static long c_ptrace(void) { return syscall(SYS_ptrace, 0 /* TRACEME */, 0, 0, 0); }
static long c_kill(void) { return syscall(SYS_kill, getpid(), 0); }
static long c_tgkill_self(void)
{
	return syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), 0);
}
static long c_tgkill_other(void)
{
	return syscall(SYS_tgkill, 1, 1, 0);	/* init, signal 0 */
}
static long c_sysinfo(void) { return syscall(SYS_sysinfo, NULL); }
static long c_unshare(void) { return syscall(SYS_unshare, 0); }
static long c_setns(void) { return syscall(SYS_setns, -1, 0); }
static long c_mount(void) { return syscall(SYS_mount, "none", "/", "tmpfs", 0, NULL); }
static long c_chroot(void) { return syscall(SYS_chroot, "/"); }
static long c_setuid(void) { return syscall(SYS_setuid, 65534); }
static long c_setgroups(void) { return syscall(SYS_setgroups, 0, NULL); }
static long c_prctl(void) { return syscall(SYS_prctl, PR_GET_DUMPABLE, 0, 0, 0, 0); }
static long c_personality(void) { return syscall(SYS_personality, 0xffffffff); }
static long c_bpf(void) { return syscall(SYS_bpf, 0, NULL, 0); }
static long c_perf(void) { return syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0); }
static long c_keyctl(void) { return syscall(SYS_keyctl, 0, 0, 0, 0, 0); }
static long c_pvread(void) { return syscall(SYS_process_vm_readv, 1, NULL, 0, NULL, 0, 0); }
static long c_io_uring(void) { return syscall(SYS_io_uring_setup, 1, NULL); }
static long c_userfaultfd(void) { return syscall(SYS_userfaultfd, 0); }
static long c_memfd(void) { return syscall(SYS_memfd_create, "x", 0); }
static long c_uname(void) { return syscall(SYS_uname, buf); }
static long c_x32_getpid(void)
{
	return syscall(0x40000000 /* __X32_SYSCALL_BIT */ | SYS_getpid);
}
/* getpid through the i386 entry point: another architecture. */
static long c_i386_getpid(void)
{
#if defined(__x86_64__)
	long ret;

	__asm__ volatile ("int $0x80" : "=a"(ret) : "a"(20) : "memory");
	return ret;
#else
	return -1;
#endif
}

#define ROW(name, nr, fe, ctl, wk, san) \
	{ #name, nr, c_##name, fe, ctl, wk, san }

static const struct row rows[] = {
	/* The event loop's calls: everyone. */
	ROW(getpid, SYS_getpid, WORKS, WORKS, WORKS, 0),
	ROW(read, SYS_read, WORKS, WORKS, WORKS, 0),
	ROW(write, SYS_write, WORKS, WORKS, WORKS, 0),
	ROW(close, SYS_close, WORKS, WORKS, WORKS, 0),
	ROW(clock, SYS_clock_gettime, WORKS, WORKS, WORKS, 0),
	ROW(futex, SYS_futex, WORKS, WORKS, WORKS, 0),
	ROW(getrandom, SYS_getrandom, WORKS, WORKS, WORKS, 0),
	ROW(mmap_rw, SYS_mmap, WORKS, WORKS, WORKS, 0),
	ROW(epoll_wait, SYS_epoll_wait, WORKS, WORKS, WORKS, 0),
	ROW(recvmsg, SYS_recvmsg, WORKS, WORKS, WORKS, 0),
	ROW(sendmsg, SYS_sendmsg, WORKS, WORKS, WORKS, 0),
	ROW(fcntl, SYS_fcntl, WORKS, WORKS, WORKS, 0),
	ROW(fionread, SYS_ioctl, WORKS, WORKS, WORKS, 0),
	ROW(tgkill_self, SYS_tgkill, WORKS, WORKS, WORKS, 0),
	ROW(sysinfo, SYS_sysinfo, WORKS, WORKS, WORKS, 0),
	/* Per kind. */
	ROW(accept4, SYS_accept4, WORKS, KILLED, KILLED, 0),
	ROW(setsockopt, SYS_setsockopt, WORKS, WORKS, WORKS, 0),
	ROW(shutdown, SYS_shutdown, WORKS, WORKS, WORKS, 0),
	ROW(openat, SYS_openat, REFUSED, WORKS, REFUSED, 1),
	ROW(fsync, SYS_fsync, KILLED, WORKS, KILLED, 0),
	ROW(unlink, SYS_unlink, KILLED, WORKS, KILLED, 0),
	/* Nobody opens a connection: the parent does. */
	ROW(socket, SYS_socket, REFUSED, REFUSED, REFUSED, 0),
	ROW(connect, SYS_connect, KILLED, KILLED, KILLED, 0),
	ROW(bind, SYS_bind, KILLED, KILLED, KILLED, 0),
	ROW(listen, SYS_listen, KILLED, KILLED, KILLED, 0),
	ROW(socketpair, SYS_socketpair, KILLED, KILLED, KILLED, 0),
	/* No new programs, processes, privileges or namespaces. */
	ROW(execve, SYS_execve, KILLED, KILLED, KILLED, 0),
	ROW(fork, SYS_clone, KILLED, KILLED, KILLED, 1),
	ROW(ptrace, SYS_ptrace, KILLED, KILLED, KILLED, 1),
	ROW(kill, SYS_kill, KILLED, KILLED, KILLED, 1),
	ROW(tgkill_other, SYS_tgkill, KILLED, KILLED, KILLED, 0),
	ROW(unshare, SYS_unshare, KILLED, KILLED, KILLED, 0),
	ROW(setns, SYS_setns, KILLED, KILLED, KILLED, 0),
	ROW(mount, SYS_mount, KILLED, KILLED, KILLED, 0),
	ROW(chroot, SYS_chroot, KILLED, KILLED, KILLED, 0),
	ROW(setuid, SYS_setuid, KILLED, KILLED, KILLED, 0),
	ROW(setgroups, SYS_setgroups, KILLED, KILLED, KILLED, 0),
	ROW(prctl, SYS_prctl, KILLED, KILLED, KILLED, 1),
	ROW(personality, SYS_personality, KILLED, KILLED, KILLED, 0),
	ROW(uname, SYS_uname, KILLED, KILLED, KILLED, 1),
	/* Kernel attack surface nobody needs. */
	ROW(tiocsti, SYS_ioctl, KILLED, KILLED, KILLED, 0),
	ROW(bpf, SYS_bpf, KILLED, KILLED, KILLED, 0),
	ROW(perf, SYS_perf_event_open, KILLED, KILLED, KILLED, 0),
	ROW(keyctl, SYS_keyctl, KILLED, KILLED, KILLED, 0),
	ROW(pvread, SYS_process_vm_readv, KILLED, KILLED, KILLED, 0),
	ROW(io_uring, SYS_io_uring_setup, KILLED, KILLED, KILLED, 0),
	ROW(userfaultfd, SYS_userfaultfd, KILLED, KILLED, KILLED, 0),
	ROW(memfd, SYS_memfd_create, KILLED, KILLED, KILLED, 0),
	/* No executable memory. */
	ROW(mmap_exec, SYS_mmap, KILLED, KILLED, KILLED, 1),
	ROW(mprotect_exec, SYS_mprotect, KILLED, KILLED, KILLED, 1),
	/* Other ABIs die without a word: the filter checks the arch. */
	ROW(x32_getpid, NO_NOTE, KILLED, KILLED, KILLED, 0),
	ROW(i386_getpid, NO_NOTE, KILLED, KILLED, KILLED, 0),
};

static const char *
outcome_str(enum outcome o)
{
	return o == WORKS ? "works" : o == REFUSED ? "refused" : "killed";
}

static void __attribute__((noreturn))
run_in_child(enum proc_kind kind, const struct row *r, int note)
{
	long ret;

	if (dup2(note, PROC_NOTE_FD) == -1)
		_exit(100);
	sandbox_seccomp(kind);
	errno = 0;
	ret = r->r_call();
	if (ret == -1 && (errno == EPERM || errno == EACCES))
		_exit(EXIT_REFUSED);
	_exit(EXIT_WORKS);
}

/* What happened to the call in a child of this kind; the note read too. */
static enum outcome
try_call(enum proc_kind kind, const struct row *r, long *noted)
{
	int	 note[2], status, nr;
	pid_t	 pid;

	assert_int_equal(pipe2(note, O_CLOEXEC | O_NONBLOCK), 0);
	assert_true((pid = fork()) != -1);
	if (pid == 0)
		run_in_child(kind, r, note[1]);
	close(note[1]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	*noted = read(note[0], &nr, sizeof(nr)) == (ssize_t)sizeof(nr) ?
	    nr : NO_NOTE;
	close(note[0]);
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS)
		return KILLED;
	if (!WIFEXITED(status) || (WEXITSTATUS(status) != EXIT_WORKS &&
	    WEXITSTATUS(status) != EXIT_REFUSED))
		fail_msg("%s: the child ended oddly (status %#x)", r->r_name,
		    status);
	return WEXITSTATUS(status) == EXIT_WORKS ? WORKS : REFUSED;
}

static void
check_kind(enum proc_kind kind)
{
	const struct row	*r;
	enum outcome		 want, got;
	long			 noted;
	size_t			 i;
	int			 wrong = 0;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		r = &rows[i];
#ifdef MCPBROKER_SANITIZE
		if (r->r_sanitizer)
			continue;
#endif
		want = kind == PROC_FRONTEND ? r->r_frontend :
		    kind == PROC_CONTROLLER ? r->r_controller : r->r_worker;
		got = try_call(kind, r, &noted);
		if (got != want) {
			print_error("%s: %s %s, expected %s\n",
			    proc_kind_str(kind), r->r_name, outcome_str(got),
			    outcome_str(want));
			wrong++;
		} else if (got == KILLED && noted != r->r_nr) {
			print_error("%s: %s killed, but the note says %ld, "
			    "not %ld\n", proc_kind_str(kind), r->r_name, noted,
			    r->r_nr);
			wrong++;
		}
	}
	assert_int_equal(wrong, 0);
}

static void
test_frontend(void **state)
{
	(void)state;
	check_kind(PROC_FRONTEND);
}

static void
test_controller(void **state)
{
	(void)state;
	check_kind(PROC_CONTROLLER);
}

static void
test_worker(void **state)
{
	(void)state;
	check_kind(PROC_WORKER);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frontend),
		cmocka_unit_test(test_controller),
		cmocka_unit_test(test_worker),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
