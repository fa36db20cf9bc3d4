/*
 * mcpbrokerctl: the administrator's command line.  It talks to the running
 * daemon over the control socket with the framed protocol the processes
 * use among themselves.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/config.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/proto.h"
#include "common/util.h"

#define CTL_TIMEOUT_SEC	30

static struct {
	struct event_base	*base;
	struct json_object	*reply;
	const char		*error;
} ctl;

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr,
	    "usage: mcpbrokerctl [-s socket] command\n"
	    "commands:\n"
	    "  status    each process with its pid, state and restart count\n"
	    "  reload    re-read the configuration (like SIGHUP)\n");
	exit(2);
}

static void
ctl_on_msg(struct msgchan *mc, struct msg *m, void *arg)
{
	(void)mc;
	(void)arg;
	if (m->m_hdr.mh_type != MSG_CTL_REPLY ||
	    (ctl.reply = json_parse_object(m->m_data, m->m_len)) == NULL)
		ctl.error = "malformed reply from the daemon";
	event_base_loopbreak(ctl.base);
}

static void
ctl_on_err(struct msgchan *mc, const char *why, void *arg)
{
	(void)mc;
	(void)arg;
	ctl.error = why;
	event_base_loopbreak(ctl.base);
}

static int
ctl_connect(const char *path)
{
	struct sockaddr_un	sun;
	int			fd;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if ((size_t)snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path) >=
	    sizeof(sun.sun_path))
		fatalx("%s: path too long", path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		fatal("socket");
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		fprintf(stderr, "mcpbrokerctl: cannot connect to %s: %s\n"
		    "Is mcpbroker running, and are you root or its user?\n",
		    path, strerror(errno));
		exit(1);
	}
	return fd;
}

static struct json_object *
ctl_request(const char *path, uint16_t type)
{
	struct timeval	 tv = { CTL_TIMEOUT_SEC, 0 };
	struct msgchan	*mc;
	int		 fd;

	fd = ctl_connect(path);
	if ((ctl.base = event_base_new()) == NULL ||
	    (mc = msgchan_new(ctl.base, fd, ctl_on_msg, ctl_on_err, NULL)) ==
	    NULL)
		fatalx("event setup");
	if (msgchan_compose(mc, type, 1, 0, -1, "{}", 2) == -1 ||
	    msgchan_flush(mc) == -1)
		fatal("send request");
	event_base_loopexit(ctl.base, &tv);
	event_base_dispatch(ctl.base);
	msgchan_free(mc);
	event_base_free(ctl.base);
	if (ctl.reply == NULL)
		fatalx("no answer from the daemon: %s",
		    ctl.error != NULL ? ctl.error : "timed out");
	return ctl.reply;
}

static const char *
jstr(struct json_object *o, const char *key)
{
	const char *s;

	return json_get_str(o, key, 4096, 1, &s) == 0 && s != NULL ? s : "";
}

static int64_t
jint(struct json_object *o, const char *key)
{
	int64_t n = 0;

	(void)json_get_int(o, key, INT64_MIN, INT64_MAX, 1, &n);
	return n;
}

static int
cmd_status(const char *path)
{
	struct json_object	*r, *procs, *p;
	size_t			 i;

	r = ctl_request(path, MSG_CTL_STATUS);
	if (!json_object_object_get_ex(r, "processes", &procs) ||
	    !json_object_is_type(procs, json_type_array))
		fatalx("malformed status reply");
	printf("%-24s %-8s %-11s %-8s %s\n", "PROCESS", "PID", "STATE",
	    "RESTARTS", "LAST EXIT");
	for (i = 0; i < json_object_array_length(procs); i++) {
		p = json_object_array_get_idx(procs, i);
		printf("%-24s %-8lld %-11s %-8lld %s\n", jstr(p, "name"),
		    (long long)jint(p, "pid"), jstr(p, "state"),
		    (long long)jint(p, "restarts"), jstr(p, "last_exit"));
	}
	json_object_put(r);
	return 0;
}

static int
cmd_reload(const char *path)
{
	struct json_object	*r;
	int			 ok = 0;

	r = ctl_request(path, MSG_CTL_RELOAD);
	(void)json_get_bool(r, "ok", 0, &ok);
	if (ok)
		printf("configuration reloaded\n");
	else
		fprintf(stderr, "mcpbrokerctl: reload failed: %s\n",
		    jstr(r, "error"));
	json_object_put(r);
	return ok ? 0 : 1;
}

int
main(int argc, char *argv[])
{
	const char	*path = CONF_DEFAULT_CONTROL;
	int		 ch;

	log_init(1, 0, LOG_USER);
	log_procinit("mcpbrokerctl");
	while ((ch = getopt(argc, argv, "s:")) != -1) {
		switch (ch) {
		case 's':
			path = optarg;
			break;
		default:
			usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc != 1)
		usage();
	if (strcmp(argv[0], "status") == 0)
		return cmd_status(path);
	if (strcmp(argv[0], "reload") == 0)
		return cmd_reload(path);
	usage();
}
