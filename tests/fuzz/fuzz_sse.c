/*
 * The SSE parser (common/sse.c), which reads LLM providers' streams and
 * MCP servers' event streams.  The input is parsed twice: fed whole, and
 * fed in pieces whose sizes come from the input.  Both must give the same
 * events and the same outcome, as the parser promises for any split; a
 * callback may also free the parser in the middle of a feed.
 *
 * Input: [flags] [piece sizes...] 0x00 stream.  Without a 0x00 after the
 * flags byte, the whole rest is the stream, fed a byte at a time.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sse.h"
#include "tests/fuzz/fuzz.h"

struct run {
	uint64_t		 hash;	/* over every event, in order */
	unsigned int		 nevents;
	unsigned int		 free_after;	/* 0: never free from the cb */
	struct sse_parser	*ps;
	int			 freed;
};

static uint64_t
mix(uint64_t h, const void *p, size_t len)
{
	const unsigned char	*b = p;
	size_t			 i;

	for (i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return (h ^ 0xff) * 0x100000001b3ULL;	/* a field separator */
}

static void
on_event(const struct sse_event *ev, void *arg)
{
	struct run *r = arg;

	if (ev->ev_data[ev->ev_data_len] != '\0')
		abort();
	r->hash = mix(r->hash, ev->ev_type, strlen(ev->ev_type));
	r->hash = mix(r->hash, ev->ev_data, ev->ev_data_len);
	r->hash = mix(r->hash, ev->ev_id, strlen(ev->ev_id));
	r->hash = mix(r->hash, &ev->ev_retry_ms, sizeof(ev->ev_retry_ms));
	if (++r->nevents == r->free_after) {
		sse_parser_free(r->ps);
		r->freed = 1;
	}
}

/* Feed the stream in the given pieces; returns the feed outcome. */
static int
run(struct run *r, size_t max_line, size_t max_event, const char *buf,
    size_t len, const uint8_t *sizes, size_t nsizes)
{
	size_t	off = 0, n, i = 0;
	int	rv = 0;

	if ((r->ps = sse_parser_new(max_line, max_event, on_event, r)) == NULL)
		abort();
	while (rv == 0 && !r->freed && off < len) {
		n = sizes == NULL ? len : nsizes == 0 ? 1 :
		    (size_t)sizes[i++ % nsizes] + 1;
		if (n > len - off)
			n = len - off;
		rv = sse_parser_feed(r->ps, buf + off, n);
		off += n;
	}
	/* Once failed, it stays failed. */
	if (rv == -1 && (sse_parser_feed(r->ps, "\n\n", 2) != -1 ||
	    sse_parser_error(r->ps) == NULL))
		abort();
	if (!r->freed) {
		(void)sse_parser_last_id(r->ps);
		(void)sse_parser_retry_ms(r->ps);
		sse_parser_free(r->ps);
	}
	return rv;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run	 whole, split;
	const uint8_t	*sizes, *nul;
	size_t		 nsizes, max_line, max_event;
	uint8_t		 flags;
	char		*buf;
	int		 rv1, rv2;

	flags = fuzz_take(&data, &size);
	sizes = data;
	if ((nul = memchr(data, 0, size)) != NULL) {
		nsizes = nul - data;
		size -= nsizes + 1;
		data = nul + 1;
	} else
		nsizes = 0;
	/* Small limits half the time, so that they are reached. */
	max_line = flags & 1 ? 64 + (flags >> 4) * 16 : 64 * 1024;
	max_event = flags & 2 ? 128 + (flags >> 4) * 64 : 1024 * 1024;
	buf = fuzz_strndup(data, size);

	memset(&whole, 0, sizeof(whole));
	memset(&split, 0, sizeof(split));
	whole.free_after = split.free_after = (flags >> 2) & 3;
	rv1 = run(&whole, max_line, max_event, buf, size, NULL, 0);
	rv2 = run(&split, max_line, max_event, buf, size, sizes, nsizes);
	if (whole.hash != split.hash || whole.nevents != split.nevents ||
	    (!whole.freed && rv1 != rv2))
		abort();
	free(buf);
	return 0;
}
