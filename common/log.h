/*
 * Logging in the OpenBSD daemon idiom.  Every line carries the process
 * name.  In the foreground (-d) lines go to stderr; otherwise the parent
 * writes to syslog and sandboxed children hand their lines to a sink (the
 * channel to the parent), since they cannot reach syslog themselves.
 */
#ifndef MCPBROKER_LOG_H
#define MCPBROKER_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <syslog.h>

#define LOG_LINE_MAX	2048	/* longer lines are truncated */

typedef void (*log_sink_fn)(int priority, const char *line);

void	log_init(int foreground, int verbose, int facility);
void	log_procinit(const char *procname);
void	log_setverbose(int);
int	log_getverbose(void);
void	log_set_sink(log_sink_fn);
/*
 * Lines as text ("proc: message") or, for log shippers, one JSON object
 * each: {"time", "level", "proc", "msg"}.  Applied where a line is
 * written (stderr or syslog), never where it is made: children hand the
 * parent text either way.
 */
void	log_set_json(int);
const char *log_procname(void);
/* A line already formatted elsewhere (a child's, relayed by the parent). */
void	log_line(int priority, const char *line);
/* src with control characters and non-UTF-8 bytes escaped (\n, \x1b). */
void	log_escape(const char *src, char *dst, size_t dstlen);
/* A child's line as the parent logs it: escaped, under the child's name. */
void	log_child_line(const char *name, const char *line, char *dst,
	    size_t dstlen);

void	log_warn(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_warnx(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_info(const char *, ...) __attribute__((format(printf, 1, 2)));
void	log_debug(const char *, ...) __attribute__((format(printf, 1, 2)));
void	fatal(const char *, ...) __attribute__((format(printf, 1, 2), noreturn));
void	fatalx(const char *, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
