/*
 * One LLM provider's response stream parser, chosen at build time
 * (FUZZ_PROVIDER_OPS: openai_ops, anthropic_ops, ollama_ops, gemini_ops),
 * through the provider_ops interface the chat loop uses.  The body is
 * parsed twice, whole and cut in two at a byte the input chooses; both
 * must give the same events and the same outcome.  The same bytes are
 * also read as an error body, whose message must come back clean.
 *
 * Input: two bytes of cut position, then the response body.
 *
 * With FUZZ_RANDOM_IDS (Gemini, which makes random ids for calls that
 * come without one) call ids are left out of the comparison.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/providers/provider.h"
#include "tests/fuzz/fuzz.h"

#ifndef FUZZ_PROVIDER_OPS
#error "FUZZ_PROVIDER_OPS names the provider_ops under test"
#endif

static const struct provider_ops *const ops = &FUZZ_PROVIDER_OPS;

struct transcript {
	uint64_t	hash;
	unsigned int	nevents;
};

static void
mix(struct transcript *t, const void *p, size_t len)
{
	const unsigned char	*b = p;
	size_t			 i;

	for (i = 0; i < len; i++)
		t->hash = (t->hash ^ b[i]) * 0x100000001b3ULL;
}

/* Text may come in any number of pieces; only its bytes count. */
static void
on_text(void *arg, const char *text, size_t len)
{
	mix(arg, text, len);
}

static void
mark(struct transcript *t, char kind)
{
	t->nevents++;
	mix(t, "\xff", 1);
	mix(t, &kind, 1);
}

static void
on_tool_call(void *arg, const char *id, const char *name, const char *args)
{
	struct transcript *t = arg;

	mark(t, 'c');
	if (id[0] == '\0')
		abort();
#ifndef FUZZ_RANDOM_IDS
	mix(t, id, strlen(id) + 1);
#endif
	mix(t, name, strlen(name) + 1);
	mix(t, args, strlen(args) + 1);
}

static void
on_usage(void *arg, uint64_t in, uint64_t out)
{
	struct transcript *t = arg;

	mark(t, 'u');
	mix(t, &in, sizeof(in));
	mix(t, &out, sizeof(out));
}

static void
on_finish(void *arg, const char *reason)
{
	struct transcript *t = arg;

	mark(t, 'f');
	mix(t, reason, strlen(reason) + 1);
}

static const struct provider_events events = {
	.pe_text = on_text,
	.pe_tool_call = on_tool_call,
	.pe_usage = on_usage,
	.pe_finish = on_finish,
};

/* Returns -1 if a feed or the end failed, else 0. */
static int
parse(struct transcript *t, const char *body, size_t len, size_t cut)
{
	struct provider_stream	*ps;
	int			 rv;

	memset(t, 0, sizeof(*t));
	if ((ps = ops->po_stream_new(&events, t)) == NULL)
		abort();
	rv = ops->po_stream_feed(ps, body, cut);
	if (rv == 0)
		rv = ops->po_stream_feed(ps, body + cut, len - cut);
	if (rv == 0)
		rv = ops->po_stream_end(ps);
	/* A failed stream says why, and stays failed. */
	if (rv == -1 && (ops->po_stream_error(ps) == NULL ||
	    ops->po_stream_feed(ps, "\n", 1) != -1))
		abort();
	if (rv == 0 && ops->po_stream_error(ps) != NULL)
		abort();
	ops->po_stream_free(ps);
	return rv;
}

/* What reaches users and logs: bounded, terminated, no control bytes. */
static void
error_body(const char *body, size_t len, int status)
{
	char	out[256];
	size_t	i, n;

	memset(out, 'x', sizeof(out));
	ops->po_error_message(status, body, len, out, sizeof(out));
	if ((n = strnlen(out, sizeof(out))) == sizeof(out))
		abort();
	for (i = 0; i < n; i++)
		if ((unsigned char)out[i] < 0x20 || out[i] == 0x7f)
			abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct transcript	 whole, cut;
	size_t			 at;
	char			*body;
	int			 rv1, rv2;

	at = fuzz_take(&data, &size);
	at = at << 8 | fuzz_take(&data, &size);
	at = size > 0 ? at % (size + 1) : 0;
	/* Exactly size bytes: the parsers get no terminator to lean on. */
	if ((body = malloc(size > 0 ? size : 1)) == NULL)
		abort();
	memcpy(body, data, size);
	rv1 = parse(&whole, body, size, 0);
	rv2 = parse(&cut, body, size, at);
	if (rv1 != rv2 || whole.hash != cut.hash ||
	    whole.nevents != cut.nevents)
		abort();
	error_body(body, size, 400 + (int)(at % 200));
	free(body);
	return 0;
}
