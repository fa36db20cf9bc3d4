/*
 * The configuration parser as the children use it (config_parse_buffer:
 * no includes, no file system).  Beyond not crashing, what the daemon
 * relies on is checked: a refused text always says why; an accepted one
 * prints as canonical text that parses again and prints the same (the
 * parent sends that text to every child); each worker's excerpt parses
 * too; and each URL the config names is one the parent's connect check
 * agrees with itself about.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/config.h"
#include "common/http_client.h"
#include "tests/fuzz/fuzz.h"

#define MAX_WORKERS	4	/* excerpts checked per input */

static struct mcpbroker_conf *
parse(const char *text, size_t len, char **errs)
{
	struct mcpbroker_conf	*conf;
	size_t			 elen;
	FILE			*fp;

	if ((fp = open_memstream(errs, &elen)) == NULL)
		abort();
	conf = config_parse_buffer("fuzz.conf", text, len, fp);
	fclose(fp);
	if (conf == NULL && **errs == '\0')
		abort();
	return conf;
}

static char *
print(const struct mcpbroker_conf *conf, const char *only)
{
	char	*text;
	size_t	 len;
	FILE	*fp;

	if ((fp = open_memstream(&text, &len)) == NULL)
		abort();
	config_print(fp, conf, only);
	fclose(fp);
	return text;
}

/* The printed text must be accepted as is. */
static struct mcpbroker_conf *
reparse(const char *text)
{
	struct mcpbroker_conf	*conf;
	char			*errs;

	conf = parse(text, strlen(text), &errs);
	if (conf == NULL) {
		fprintf(stderr, "canonical text refused:\n%s\nwith:\n%s",
		    text, errs);
		abort();
	}
	free(errs);
	return conf;
}

static void
check_url(const char *url)
{
	char		 host[HTTP_HOST_MAX + 1];
	uint16_t	 port;

	if (url == NULL || http_url_endpoint(url, host, &port) != NULL)
		return;
	if (!http_url_matches(url, host, port))
		abort();
}

static void
check_round_trip(const struct mcpbroker_conf *conf)
{
	struct mcpbroker_conf		*again, *worker;
	const struct server_conf	*srv;
	const struct provider_conf	*pv;
	char				*one, *two, *part;
	int				 n = 0;

	one = print(conf, NULL);
	again = reparse(one);
	two = print(again, NULL);
	if (strcmp(one, two) != 0) {
		fprintf(stderr, "printed:\n%s\nprinted again:\n%s", one, two);
		abort();
	}
	TAILQ_FOREACH(srv, &conf->c_servers, srv_entry) {
		check_url(srv->srv_url);
		if (n++ >= MAX_WORKERS)
			continue;
		part = print(conf, srv->srv_name);
		worker = reparse(part);
		if (config_find_server(worker, srv->srv_name) == NULL)
			abort();
		config_free(worker);
		free(part);
	}
	TAILQ_FOREACH(pv, &conf->c_providers, pv_entry)
		check_url(pv->pv_base_url);
	config_free(again);
	free(one);
	free(two);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_log_quiet();
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcpbroker_conf	*conf;
	char			*errs;

	conf = parse((const char *)data, size, &errs);
	free(errs);
	if (conf != NULL)
		check_round_trip(conf);
	config_free(conf);
	return 0;
}
