/*
 * An incremental Server-Sent Events parser, after the WHATWG "event stream
 * interpretation" algorithm.  Bytes go in as they arrive, split anywhere
 * (even inside a CRLF or the BOM); whole events come out through a
 * callback.  Every buffer is bounded: a line longer than max_line or an
 * event whose data exceeds max_event makes the stream fail, and the caller
 * drops it rather than buffer without end.
 */
#ifndef MCPBROKER_SSE_H
#define MCPBROKER_SSE_H

#include <stddef.h>
#include <stdint.h>

struct sse_event {
	const char	*ev_type;	/* "message" unless "event" set it */
	const char	*ev_data;	/* lines joined with \n, NUL-ended */
	size_t		 ev_data_len;	/* may hold NULs: not strlen */
	const char	*ev_id;		/* last event ID, "" if none yet */
	int64_t		 ev_retry_ms;	/* retry field of this event, or -1 */
};

/* The event and its strings live only until the callback returns. */
typedef void	(*sse_event_fn)(const struct sse_event *, void *arg);

struct sse_parser;

struct sse_parser *sse_parser_new(size_t max_line, size_t max_event,
		    sse_event_fn cb, void *arg);
void		 sse_parser_free(struct sse_parser *);
/*
 * Returns 0, or -1 once the stream has failed (this time or before); then
 * sse_parser_error() says why and every later feed fails too.  The callback
 * may call sse_parser_free(): feed then returns 0 without touching it again.
 */
int		 sse_parser_feed(struct sse_parser *, const char *buf,
		    size_t len);
const char	*sse_parser_error(const struct sse_parser *);
/* The last event ID as of the last dispatch (for Last-Event-ID), or "". */
const char	*sse_parser_last_id(const struct sse_parser *);
/* The latest reconnection time a retry field set, or -1. */
int64_t		 sse_parser_retry_ms(const struct sse_parser *);

#endif
