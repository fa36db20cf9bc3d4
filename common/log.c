#include <errno.h>
#include <stdint.h>
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
static int		 log_json;

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
log_set_json(int on)
{
	log_json = on;
}

static const char *
level_str(int priority)
{
	switch (priority & LOG_PRIMASK) {
	case LOG_EMERG:
	case LOG_ALERT:
	case LOG_CRIT:
		return "critical";
	case LOG_ERR:
		return "error";
	case LOG_WARNING:
		return "warning";
	case LOG_NOTICE:
		return "notice";
	case LOG_INFO:
		return "info";
	default:
		return "debug";
	}
}

/* s as the inside of a JSON string; cut short rather than overflow. */
static size_t
json_escape(const char *s, size_t n, char *dst, size_t dstlen)
{
	size_t	o = 0, i;
	char	esc[8];
	int	len;

	for (i = 0; i < n && s[i] != '\0'; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			len = snprintf(esc, sizeof(esc), "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			len = snprintf(esc, sizeof(esc), "\\u%04x", c);
		else {
			esc[0] = (char)c;
			len = 1;
		}
		if (o + (size_t)len >= dstlen)
			break;
		memcpy(dst + o, esc, (size_t)len);
		o += (size_t)len;
	}
	dst[o] = '\0';
	return o;
}

/* "proc: message" as {"time","level","proc","msg"}. */
static void
json_line(int priority, const char *line, char *out, size_t outlen)
{
	char		 proc[128], msg[LOG_LINE_MAX * 2], when[40];
	const char	*colon = strstr(line, ": ");
	struct timespec	 ts;
	struct tm	 tm;
	size_t		 plen = colon != NULL ? (size_t)(colon - line) : 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	json_escape(line, plen, proc, sizeof(proc));
	json_escape(colon != NULL ? colon + 2 : line, SIZE_MAX, msg,
	    sizeof(msg));
	snprintf(out, outlen, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\","
	    "\"proc\":\"%s\",\"msg\":\"%s\"}", when, ts.tv_nsec / 1000000,
	    level_str(priority), proc, msg);
}

/* Where a line is finally written: stderr or syslog, in the set format. */
static void
log_emit(int priority, const char *line)
{
	char	 json[LOG_LINE_MAX * 2 + 256];

	if (log_json) {
		json_line(priority, line, json, sizeof(json));
		line = json;
	}
	if (log_foreground) {
		fprintf(stderr, "%s\n", line);
		fflush(stderr);
	} else
		syslog(priority, "%s", line);
}

/* In fatal(): a child's last words, which its channel may not carry. */
static int		 log_dying;

void
log_line(int priority, const char *line)
{
	int saved_errno = errno;

	/*
	 * A child's lines are the parent's to write, in -d mode too; its
	 * last words go to its stderr, which the parent reads to the end.
	 */
	if (log_sink != NULL && log_dying)
		fprintf(stderr, "%s\n", line);
	else if (log_sink != NULL)
		log_sink(priority, line);
	else
		log_emit(priority, line);
	errno = saved_errno;
}

static void	vlog(int, int, const char *, va_list)
		    __attribute__((format(printf, 3, 0)));

/*
 * Length of the UTF-8 sequence at s if it is a well-formed one for a
 * character that is not a C1 control, else 0.  A terminal may act on a C1
 * control (U+009B is CSI) as on ESC, and on a stray byte of 0x80 and up as
 * one in an 8-bit character set.
 */
static size_t
utf8_len(const unsigned char *s)
{
	unsigned int	cp;
	size_t		n, i;

	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07;
	} else
		return 0;
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)	/* also stops at the NUL */
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp <= 0x9f || (n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 ||
	    cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/*
 * Copy src to dst, escaping what could end a line or drive a terminal: a
 * newline in a tool's argument or a user's name must not make a log line
 * of its own.  \n, \r and \t keep their C names, other control bytes and
 * bytes that are not UTF-8 become \xHH.  Cut at a character boundary.
 */
void
log_escape(const char *src, char *dst, size_t dstlen)
{
	const unsigned char	*s = (const unsigned char *)src;
	const char		*from;
	char			 esc[5];
	size_t			 o = 0, n, step;

	if (dstlen == 0)
		return;
	while (*s != '\0') {
		if ((step = utf8_len(s)) == 0 && *s >= 0x20 && *s < 0x7f)
			step = 1;
		if (step > 0) {
			from = (const char *)s;
			n = step;
		} else {
			if (*s == '\n' || *s == '\r' || *s == '\t')
				snprintf(esc, sizeof(esc), "\\%c", *s == '\n' ?
				    'n' : *s == '\r' ? 'r' : 't');
			else
				snprintf(esc, sizeof(esc), "\\x%02x", *s);
			from = esc;
			n = strlen(esc);
			step = 1;
		}
		if (o + n >= dstlen)
			break;
		memcpy(dst + o, from, n);
		o += n;
		s += step;
	}
	dst[o] = '\0';
}

/*
 * A compromised child may send raw control bytes, or another process's
 * name: its line is escaped as our own are, and one that does not begin
 * with "NAME: " gets that put in front, so that no child speaks for
 * another ("worker a" writing "worker ab: ..." included).
 */
void
log_child_line(const char *name, const char *line, char *dst, size_t dstlen)
{
	size_t n = strlen(name), o = 0;

	if (dstlen == 0)
		return;
	if (strncmp(line, name, n) != 0 || strncmp(line + n, ": ", 2) != 0)
		o = (size_t)snprintf(dst, dstlen, "%s: ", name);
	if (o < dstlen)
		log_escape(line, dst + o, dstlen - o);
}

/* Format "proc: message[: strerror]" and emit it; long lines are cut. */
static void
vlog(int priority, int with_errno, const char *fmt, va_list ap)
{
	char	 msg[LOG_LINE_MAX], line[LOG_LINE_MAX];
	int	 saved_errno = errno, n;
	size_t	 len;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (with_errno) {
		len = strlen(msg);
		snprintf(msg + len, sizeof(msg) - len, ": %s",
		    strerror(saved_errno));
	}
	n = snprintf(line, sizeof(line), "%s: ", log_proc);
	len = n < 0 ? 0 : (size_t)n < sizeof(line) ? (size_t)n :
	    sizeof(line) - 1;
	log_escape(msg, line + len, sizeof(line) - len);
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

	log_dying = 1;
	va_start(ap, fmt);
	vlog(LOG_CRIT, 1, fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	log_dying = 1;
	va_start(ap, fmt);
	vlog(LOG_CRIT, 0, fmt, ap);
	va_end(ap);
	exit(1);
}
