/*
 * Shared by the libFuzzer targets in this directory.  Each target is one
 * LLVMFuzzerTestOneInput over the real parsing code of libmcpcore; a crash,
 * a sanitizer report, a leak or an abort() from a target's own consistency
 * checks is a finding.
 */
#ifndef MCPBROKER_FUZZ_H
#define MCPBROKER_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);
int	LLVMFuzzerInitialize(int *, char ***);

/*
 * Debug logging on, so that every log line's formatting runs on fuzzed
 * text, and every line dropped, so that the fuzzer stays fast and quiet.
 */
void	fuzz_log_quiet(void);

/* A NUL-terminated copy, as callers that read lines hand them over. */
char	*fuzz_strndup(const uint8_t *, size_t);

/*
 * Take one byte off the front of the input (0 when there is none): targets
 * use it to choose modes and split points, so that the corpus drives them.
 */
uint8_t	 fuzz_take(const uint8_t **, size_t *);

/* The scripted HTTP server of fuzz_server.c. */
#define FUZZ_MAX_CONNS	16

struct fuzz_script {
	const uint8_t	*data[FUZZ_MAX_CONNS];	/* response of connection i */
	size_t		 len[FUZZ_MAX_CONNS];
	size_t		 n;
	size_t		 cut;		/* where each first write stops */
};

struct event_base;

/*
 * The set-up of a target driving the HTTP client against this server:
 * quiet logs, SIGPIPE ignored, plain http only (no CA bundle read for
 * every client), and the event base they share.
 */
struct event_base *fuzz_http_init(void);
/* Serve s (which must stay valid) to connections to host:port only. */
void		fuzz_server_start(struct event_base *,
		    const struct fuzz_script *, const char *host,
		    uint16_t port);
/* An http_connect_fn for the client under test. */
void		fuzz_connect(const char *host, uint16_t port,
		    void (*done)(int, const char *, void *), void *done_arg,
		    void *connector_arg);
/* Grows with every connection made and every server-side event. */
unsigned long	fuzz_server_activity(void);
size_t		fuzz_server_connections(void);
/* Close every server end. */
void		fuzz_server_stop(void);

#endif
