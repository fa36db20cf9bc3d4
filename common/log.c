#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

static int		 log_foreground = 1;
static int		 log_verbose;
static const char	*log_proc = "mcpbroker";
static log_sink_fn	 log_sink;

void
log_init(int foreground, int verbose, int facility)
{
	log_foreground = foreground;
	log_verbose = verbose;
	if (!foreground)
		openlog("mcpbroker", LOG_PID | LOG_NDELAY, facility);
	tzset();
}

void
log_procinit(const char *procname)
{
	if (procname != NULL)
		log_proc = procname;
}

const char *
log_procname(void)
{
	return log_proc;
}

void
log_setverbose(int v)
{
	log_verbose = v;
}

int
log_getverbose(void)
{
	return log_verbose;
}

void
log_set_sink(log_sink_fn fn)
{
	log_sink = fn;
}

void
log_line(int priority, const char *line)
{
	int saved_errno = errno;

	if (log_foreground) {
		fprintf(stderr, "%s\n", line);
		fflush(stderr);
	} else if (log_sink != NULL)
		log_sink(priority, line);
	else
		syslog(priority, "%s", line);
	errno = saved_errno;
}

/* Format "proc: message[: strerror]" and emit it; long lines are cut. */
static void
vlog(int priority, int with_errno, const char *fmt, va_list ap)
{
	char	 line[LOG_LINE_MAX];
	int	 saved_errno = errno, n;
	size_t	 len;

	n = snprintf(line, sizeof(line), "%s: ", log_proc);
	len = n < 0 ? 0 : (size_t)n < sizeof(line) ? (size_t)n :
	    sizeof(line) - 1;
	vsnprintf(line + len, sizeof(line) - len, fmt, ap);
	if (with_errno) {
		len = strlen(line);
		snprintf(line + len, sizeof(line) - len, ": %s",
		    strerror(saved_errno));
	}
	log_line(priority, line);
	errno = saved_errno;
}

void
log_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_ERR, 1, fmt, ap);
	va_end(ap);
}

void
log_warnx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_ERR, 0, fmt, ap);
	va_end(ap);
}

void
log_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_INFO, 0, fmt, ap);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list ap;

	if (log_verbose < 1)
		return;
	va_start(ap, fmt);
	vlog(LOG_DEBUG, 0, fmt, ap);
	va_end(ap);
}

void
fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, 1, fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(LOG_CRIT, 0, fmt, ap);
	va_end(ap);
	exit(1);
}
