#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sse.h"

/* A NUL-terminated byte string that grows up to a caller-given bound. */
struct sse_buf {
	char	*sb_buf;
	size_t	 sb_len;
	size_t	 sb_cap;
};

struct sse_parser {
	size_t		 ps_max_line;
	size_t		 ps_max_event;
	sse_event_fn	 ps_cb;
	void		*ps_arg;
	struct sse_buf	 ps_line;	/* the line being assembled */
	struct sse_buf	 ps_data;	/* data buffer, each line + LF */
	struct sse_buf	 ps_type;	/* event type buffer */
	struct sse_buf	 ps_idbuf;	/* last event ID buffer */
	struct sse_buf	 ps_lastid;	/* its value at the last dispatch */
	int64_t		 ps_retry;	/* retry seen in this event, or -1 */
	int64_t		 ps_reconnect;	/* latest retry seen, or -1 */
	unsigned int	 ps_bom;	/* BOM bytes matched so far */
	int		 ps_started;	/* past the BOM check */
	int		 ps_cr;		/* a CR ended the last line */
	int		 ps_busy;	/* inside sse_parser_feed() */
	int		 ps_freed;	/* freed by the callback */
	int		 ps_failed;
	char		 ps_err[96];
};

static const char sse_bom_bytes[] = "\xEF\xBB\xBF";

static int
sse_buf_add(struct sse_buf *b, const char *p, size_t n, size_t max)
{
	size_t	 cap;
	char	*nb;

	if (n > max || b->sb_len > max - n)
		return -1;
	if (b->sb_len + n + 1 > b->sb_cap) {
		cap = b->sb_cap ? b->sb_cap : 64;
		while (cap < b->sb_len + n + 1)
			cap *= 2;
		if ((nb = realloc(b->sb_buf, cap)) == NULL)
			return -1;
		b->sb_buf = nb;
		b->sb_cap = cap;
	}
	memcpy(b->sb_buf + b->sb_len, p, n);
	b->sb_len += n;
	b->sb_buf[b->sb_len] = '\0';
	return 0;
}

static int
sse_buf_set(struct sse_buf *b, const char *p, size_t n, size_t max)
{
	b->sb_len = 0;
	if (b->sb_buf != NULL)
		b->sb_buf[0] = '\0';
	return sse_buf_add(b, p, n, max);
}

static const char *
sse_buf_str(const struct sse_buf *b)
{
	return b->sb_buf != NULL ? b->sb_buf : "";
}

static int
sse_fail(struct sse_parser *ps, const char *what, size_t limit)
{
	ps->ps_failed = 1;
	snprintf(ps->ps_err, sizeof(ps->ps_err), "%s larger than %zu bytes",
	    what, limit);
	return -1;
}

struct sse_parser *
sse_parser_new(size_t max_line, size_t max_event, sse_event_fn cb,
    void *arg)
{
	struct sse_parser *ps;

	if (max_line == 0 || max_event == 0 || max_event >= SIZE_MAX / 2 ||
	    cb == NULL) {
		errno = EINVAL;
		return NULL;
	}
	if ((ps = calloc(1, sizeof(*ps))) == NULL)
		return NULL;
	ps->ps_max_line = max_line;
	ps->ps_max_event = max_event;
	ps->ps_cb = cb;
	ps->ps_arg = arg;
	ps->ps_retry = -1;
	ps->ps_reconnect = -1;
	return ps;
}

static void
sse_release(struct sse_parser *ps)
{
	free(ps->ps_line.sb_buf);
	free(ps->ps_data.sb_buf);
	free(ps->ps_type.sb_buf);
	free(ps->ps_idbuf.sb_buf);
	free(ps->ps_lastid.sb_buf);
	free(ps);
}

void
sse_parser_free(struct sse_parser *ps)
{
	if (ps == NULL)
		return;
	if (ps->ps_busy) {
		ps->ps_freed = 1;
		return;
	}
	sse_release(ps);
}

const char *
sse_parser_error(const struct sse_parser *ps)
{
	return ps->ps_failed ? ps->ps_err : NULL;
}

const char *
sse_parser_last_id(const struct sse_parser *ps)
{
	return sse_buf_str(&ps->ps_lastid);
}

int64_t
sse_parser_retry_ms(const struct sse_parser *ps)
{
	return ps->ps_reconnect;
}

/* Returns -1 on failure, 1 when the callback freed the parser, else 0. */
static int
sse_dispatch(struct sse_parser *ps)
{
	struct sse_event	 ev;

	/* The ID sticks even for an empty event: the spec commits it first. */
	if (sse_buf_set(&ps->ps_lastid, sse_buf_str(&ps->ps_idbuf),
	    ps->ps_idbuf.sb_len, ps->ps_max_line) == -1)
		return sse_fail(ps, "event id", ps->ps_max_line);
	ev.ev_retry_ms = ps->ps_retry;
	ps->ps_retry = -1;
	if (ps->ps_data.sb_len == 0) {
		ps->ps_type.sb_len = 0;
		return 0;
	}
	ps->ps_data.sb_buf[--ps->ps_data.sb_len] = '\0';	/* last LF */
	ev.ev_type = ps->ps_type.sb_len ? ps->ps_type.sb_buf : "message";
	ev.ev_data = ps->ps_data.sb_buf;
	ev.ev_data_len = ps->ps_data.sb_len;
	ev.ev_id = sse_buf_str(&ps->ps_lastid);
	ps->ps_cb(&ev, ps->ps_arg);
	if (ps->ps_freed)
		return 1;
	ps->ps_data.sb_len = 0;
	ps->ps_type.sb_len = 0;
	return 0;
}

static void
sse_retry(struct sse_parser *ps, const char *v, size_t n)
{
	int64_t	 ms = 0;
	size_t	 i;

	if (n == 0)
		return;
	for (i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return;
		if (ms > (INT64_MAX - (v[i] - '0')) / 10)
			return;		/* absurd; ignore like garbage */
		ms = ms * 10 + (v[i] - '0');
	}
	ps->ps_retry = ps->ps_reconnect = ms;
}

#define SSE_FIELD(name, len, lit)					\
	((len) == sizeof(lit) - 1 && memcmp((name), (lit), (len)) == 0)

static int
sse_field(struct sse_parser *ps, const char *name, size_t nlen,
    const char *v, size_t vlen)
{
	if (SSE_FIELD(name, nlen, "event")) {
		if (sse_buf_set(&ps->ps_type, v, vlen, ps->ps_max_line) == -1)
			return sse_fail(ps, "line", ps->ps_max_line);
	} else if (SSE_FIELD(name, nlen, "data")) {
		if (ps->ps_data.sb_len + vlen > ps->ps_max_event ||
		    sse_buf_add(&ps->ps_data, v, vlen,
		    ps->ps_max_event + 1) == -1 ||
		    sse_buf_add(&ps->ps_data, "\n", 1,
		    ps->ps_max_event + 1) == -1)
			return sse_fail(ps, "event data", ps->ps_max_event);
	} else if (SSE_FIELD(name, nlen, "id")) {
		/* An ID with a NUL could never be sent back in a header. */
		if (memchr(v, '\0', vlen) == NULL &&
		    sse_buf_set(&ps->ps_idbuf, v, vlen, ps->ps_max_line) == -1)
			return sse_fail(ps, "line", ps->ps_max_line);
	} else if (SSE_FIELD(name, nlen, "retry"))
		sse_retry(ps, v, vlen);
	return 0;
}

/* One complete line, without its terminator, is in ps_line. */
static int
sse_line(struct sse_parser *ps)
{
	const char	*line = sse_buf_str(&ps->ps_line), *colon, *v;
	size_t		 len = ps->ps_line.sb_len, nlen, vlen;

	ps->ps_line.sb_len = 0;
	if (len == 0)
		return sse_dispatch(ps);
	if (line[0] == ':')
		return 0;
	if ((colon = memchr(line, ':', len)) != NULL) {
		nlen = colon - line;
		v = colon + 1;
		vlen = len - nlen - 1;
		if (vlen > 0 && v[0] == ' ') {
			v++;
			vlen--;
		}
	} else {
		nlen = len;
		v = "";
		vlen = 0;
	}
	return sse_field(ps, line, nlen, v, vlen);
}

static int
sse_scan(struct sse_parser *ps, const char *buf, size_t len)
{
	size_t	 i, start = 0;
	int	 r;

	for (i = 0; i < len; i++) {
		if (ps->ps_cr) {
			ps->ps_cr = 0;
			if (buf[i] == '\n') {	/* the rest of a CRLF */
				start = i + 1;
				continue;
			}
		}
		if (buf[i] != '\r' && buf[i] != '\n')
			continue;
		if (sse_buf_add(&ps->ps_line, buf + start, i - start,
		    ps->ps_max_line) == -1)
			return sse_fail(ps, "line", ps->ps_max_line);
		ps->ps_cr = buf[i] == '\r';
		start = i + 1;
		if ((r = sse_line(ps)) != 0)
			return r;
	}
	if (sse_buf_add(&ps->ps_line, buf + start, len - start,
	    ps->ps_max_line) == -1)
		return sse_fail(ps, "line", ps->ps_max_line);
	return 0;
}

/*
 * Skip a UTF-8 BOM at the very start of the stream, which may arrive a
 * byte at a time.  Bytes that began to look like one but were not are
 * ordinary line content.
 */
static int
sse_bom(struct sse_parser *ps, const char **buf, size_t *len)
{
	while (*len > 0 && ps->ps_bom < 3) {
		if ((*buf)[0] != sse_bom_bytes[ps->ps_bom]) {
			ps->ps_started = 1;
			return sse_scan(ps, sse_bom_bytes, ps->ps_bom);
		}
		ps->ps_bom++;
		(*buf)++;
		(*len)--;
	}
	if (ps->ps_bom == 3)
		ps->ps_started = 1;
	return 0;
}

int
sse_parser_feed(struct sse_parser *ps, const char *buf, size_t len)
{
	int	 r = 0;

	if (ps->ps_failed)
		return -1;
	ps->ps_busy++;
	if (!ps->ps_started)
		r = sse_bom(ps, &buf, &len);
	if (r == 0 && ps->ps_started)
		r = sse_scan(ps, buf, len);
	ps->ps_busy--;
	if (ps->ps_freed) {
		sse_release(ps);
		return 0;
	}
	return r == -1 ? -1 : 0;
}
