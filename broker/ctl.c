/*
 * mcpbrokerctl: the administrator's command line.  It talks to the running
 * daemon over the control socket with the framed protocol the processes
 * use among themselves.
 */
#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/audit_format.h"
#include "broker/config.h"
#include "common/log.h"
#include "common/msg.h"
#include "common/proto.h"
#include "common/util.h"
#include "broker/ctl.h"

#define CTL_TIMEOUT_SEC		30
#define CTL_CALL_TIMEOUT_SEC	3600	/* a tool call has its own limit */

static struct {
	struct event_base	*base;
	struct json_object	*reply;
	const char		*error;
} ctl;

static void __attribute__((noreturn))
usage(void)
{
	fprintf(stderr,
	    "usage: mcpbrokerctl [-v] [-s socket] command\n"
	    "commands:\n"
	    "  status    each process with its pid, state and restart count\n"
	    "  reload    re-read the configuration (like SIGHUP)\n"
	    "  user add [-r role]... [-t tenant] NAME\n"
	    "            a new user; prints its API key (once) on the last "
	    "line\n"
	    "  user key NAME    a new API key for NAME; the old one stops "
	    "working\n"
	    "  user del NAME | user list\n"
	    "  tenant del NAME\n"
	    "            erase a tenant: its users, conversations and usage\n"
	    "  policy explain -u USER -t SERVER.TOOL\n"
	    "            which rule decides whether USER may call the tool\n"
	    "  audit show [-n N] [-u USER] [-k KIND] [--tool GLOB]\n"
	    "            [--decision allow|deny|confirm] [--since T] "
	    "[--until T]\n"
	    "            the last N (50) matching rows of the audit trail, "
	    "oldest\n"
	    "            first; T is ISO 8601 UTC or a duration ago (1h, "
	    "7d)\n"
	    "  audit verify [--checkpoint FILE]\n"
	    "            check the trail's hash chain (and that it still "
	    "holds\n"
	    "            what a signed checkpoint vouches for); prints its "
	    "head\n"
	    "  audit checkpoint the trail's head, signed with the audit "
	    "signing key\n"
	    "  audit export [--format jsonl|syslog|cef]\n"
	    "            the whole trail on stdout, one record per line\n"
	    "  tools pending [SERVER]\n"
	    "            tool definitions changed since they were pinned, "
	    "with the\n"
	    "            old and new text of what changed\n"
	    "  tools approve SERVER TOOL [SHA256] | tools approve --all "
	    "SERVER\n"
	    "            make the pending definition the pinned one "
	    "(SHA256: only\n"
	    "            if it is still the one pending)\n"
	    "  tools pins [SERVER]\n"
	    "            every pinned tool definition\n"
	    "  backup FILE\n"
	    "            a consistent copy of the database, taken while the\n"
	    "            daemon runs, written to FILE (mode 0600)\n"
	    "  server tools NAME\n"
	    "            the tools the running daemon has from server NAME\n"
	    "  server call [-u user] [-c conversation] NAME TOOL [JSON]\n"
	    "            call a tool through the daemon's worker for NAME\n"
	    "  mcp tools [--sse] [-T ms] URL | [-e NAME]... -- COMMAND [ARG...]\n"
	    "  mcp call [--sse] [-T ms] URL TOOL [JSON]\n"
	    "  mcp call [-T ms] [-e NAME]... -- COMMAND [ARG...] TOOL JSON\n"
	    "  mcp conformance URL   (client for the MCP conformance suite)\n"
	    "            talk to one MCP server directly, with the worker's\n"
	    "            client, and print what it answers as JSON\n");
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

/* Send one request (with fd, if not -1, which goes) and wait for the reply. */
static struct json_object *
ctl_request_fd(const char *path, uint16_t type, struct json_object *body,
    int sendfd)
{
	struct timeval	 tv = { type == MSG_CTL_ADMIN || type == MSG_CTL_BACKUP ?
	    CTL_CALL_TIMEOUT_SEC : CTL_TIMEOUT_SEC, 0 };
	struct msgchan	*mc;
	int		 fd;

	fd = ctl_connect(path);
	if ((ctl.base = event_base_new()) == NULL ||
	    (mc = msgchan_new(ctl.base, fd, ctl_on_msg, ctl_on_err, NULL)) ==
	    NULL)
		fatalx("event setup");
	const char *payload = body != NULL ? json_object_to_json_string_ext(body,
	    JSON_C_TO_STRING_PLAIN) : "{}";

	if (msgchan_compose(mc, type, 1, 0, sendfd, payload, strlen(payload)) ==
	    -1 || msgchan_flush(mc) == -1)
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

static struct json_object *
ctl_request_payload(const char *path, uint16_t type, struct json_object *body)
{
	return ctl_request_fd(path, type, body, -1);
}

static struct json_object *
ctl_request(const char *path, uint16_t type)
{
	return ctl_request_payload(path, type, NULL);
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

static void
print_json(struct json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o,
	    JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
}

/* `server tools NAME` and `server call [-u U] [-c C] NAME TOOL [JSON]`. */
static int
cmd_server(const char *path, int argc, char *argv[])
{
	struct json_object	*req, *r, *v, *args;
	const char		*user = NULL, *conv = NULL;
	int			 ch, ok = 0;

	if (argc < 1)
		usage();
	req = json_object_new_object();
	json_object_object_add(req, "op", json_object_new_string(argv[0]));
	optind = 1;
	while ((ch = getopt(argc, argv, "u:c:")) != -1) {
		switch (ch) {
		case 'u':
			user = optarg;
			break;
		case 'c':
			conv = optarg;
			break;
		default:
			usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (strcmp(json_object_get_string(json_object_object_get(req, "op")),
	    "tools") == 0 && argc == 1)
		;
	else if (strcmp(json_object_get_string(json_object_object_get(req,
	    "op")), "call") == 0 && (argc == 2 || argc == 3)) {
		args = json_parse_object(argc == 3 ? argv[2] : "{}",
		    strlen(argc == 3 ? argv[2] : "{}"));
		if (args == NULL)
			fatalx("arguments must be a JSON object: %s", argv[2]);
		json_object_object_add(req, "tool",
		    json_object_new_string(argv[1]));
		json_object_object_add(req, "arguments", args);
	} else
		usage();
	json_object_object_add(req, "server", json_object_new_string(argv[0]));
	if (user != NULL)
		json_object_object_add(req, "user", json_object_new_string(user));
	if (conv != NULL)
		json_object_object_add(req, "conversation",
		    json_object_new_string(conv));
	r = ctl_request_payload(path, MSG_CTL_ADMIN, req);
	json_object_put(req);
	(void)json_get_bool(r, "ok", 0, &ok);
	if (!ok) {
		v = json_object_object_get(r, "error");
		fprintf(stderr, "mcpbrokerctl: %s\n", json_object_is_type(v,
		    json_type_object) ? jstr(v, "message") :
		    json_object_get_string(v));
	} else if (json_object_object_get_ex(r, "result", &v) ||
	    json_object_object_get_ex(r, "tools", &v))
		print_json(v);
	json_object_put(r);
	return ok ? 0 : 1;
}

static void
add_roles(struct json_object *req, char *roles)
{
	json_object_object_add(req, "roles", json_object_new_string(roles));
}

/* Ask the controller, print what it says: the key alone on the last line. */
static int
admin_print(const char *path, struct json_object *req)
{
	struct json_object	*r, *v;
	int			 ok = 0;
	size_t			 i;

	r = ctl_request_payload(path, MSG_CTL_ADMIN, req);
	json_object_put(req);
	(void)json_get_bool(r, "ok", 0, &ok);
	if (!ok)
		fprintf(stderr, "mcpbrokerctl: %s\n", jstr(r, "error"));
	else if (json_object_object_get_ex(r, "users", &v)) {
		printf("%-24s %-16s %s\n", "USER", "TENANT", "ROLES");
		for (i = 0; i < json_object_array_length(v); i++) {
			struct json_object *u = json_object_array_get_idx(v, i);

			printf("%-24s %-16s %s\n", jstr(u, "name"),
			    jstr(u, "tenant"), jstr(u, "roles"));
		}
	} else if (json_object_object_get_ex(r, "key", &v))
		printf("%s\n", json_object_get_string(v));
	json_object_put(r);
	return ok ? 0 : 1;
}

/* policy explain -u USER -t SERVER.TOOL: which rule decides, and why. */
static int
cmd_policy(const char *path, int argc, char *argv[])
{
	struct json_object	*req, *r;
	const char		*user = NULL, *tool = NULL;
	int			 ch, ok = 0;

	if (argc < 1 || strcmp(argv[0], "explain") != 0)
		usage();
	optind = 1;
	while ((ch = getopt(argc, argv, "u:t:")) != -1) {
		switch (ch) {
		case 'u':
			user = optarg;
			break;
		case 't':
			tool = optarg;
			break;
		default:
			usage();
		}
	}
	if (user == NULL || tool == NULL || optind != argc)
		usage();
	req = json_object_new_object();
	json_object_object_add(req, "op", json_object_new_string(
	    "policy_explain"));
	json_object_object_add(req, "user", json_object_new_string(user));
	json_object_object_add(req, "tool", json_object_new_string(tool));
	r = ctl_request_payload(path, MSG_CTL_ADMIN, req);
	json_object_put(req);
	(void)json_get_bool(r, "ok", 0, &ok);
	if (ok)
		fputs(jstr(r, "text"), stdout);
	else
		fprintf(stderr, "mcpbrokerctl: %s\n", jstr(r, "error"));
	json_object_put(r);
	return ok ? 0 : 1;
}

/*
 * user add NAME [-r ROLE]... [-t TENANT] | user key NAME | user del NAME |
 * user list
 */
static int
cmd_user(const char *path, int argc, char *argv[])
{
	struct json_object	*req = json_object_new_object();
	char			 roles[256] = "", op[16];
	int			 ch;

	if (argc < 1)
		usage();
	snprintf(op, sizeof(op), "user_%s", argv[0]);
	json_object_object_add(req, "op", json_object_new_string(op));
	if (strcmp(argv[0], "list") == 0)
		return admin_print(path, req);
	optind = 1;
	while ((ch = getopt(argc, argv, "r:t:")) != -1) {
		switch (ch) {
		case 'r':
			if (strlen(roles) + strlen(optarg) + 2 > sizeof(roles))
				usage();
			if (roles[0] != '\0')
				strcat(roles, ",");
			strcat(roles, optarg);
			break;
		case 't':
			json_object_object_add(req, "tenant",
			    json_object_new_string(optarg));
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1 || (strcmp(argv[0], "add") != 0 &&
	    strcmp(argv[0], "key") != 0 && strcmp(argv[0], "del") != 0))
		usage();
	json_object_object_add(req, "name", json_object_new_string(
	    argv[optind]));
	add_roles(req, roles);
	return admin_print(path, req);
}

/* tenant del NAME: everything of the tenant goes, for good. */
static int
cmd_tenant(const char *path, int argc, char *argv[])
{
	struct json_object	*req, *r;
	int			 ok = 0;

	if (argc != 2 || strcmp(argv[0], "del") != 0)
		usage();
	req = json_object_new_object();
	json_object_object_add(req, "op", json_object_new_string(
	    "tenant_del"));
	json_object_object_add(req, "name", json_object_new_string(argv[1]));
	r = ctl_request_payload(path, MSG_CTL_ADMIN, req);
	json_object_put(req);
	(void)json_get_bool(r, "ok", 0, &ok);
	if (ok)
		printf("tenant %s deleted: %lld user(s), %lld "
		    "conversation(s)\n", argv[1], (long long)jint(r, "users"),
		    (long long)jint(r, "conversations"));
	else
		fprintf(stderr, "mcpbrokerctl: %s\n", jstr(r, "error"));
	json_object_put(r);
	return ok ? 0 : 1;
}

/* "2025-01-31T12:00:00.123Z" */
static void
print_audit_row(struct json_object *row)
{
	struct json_object	*d;
	char			 when[32], *text;
	int64_t			 ts = jint(row, "ts");
	time_t			 t = (time_t)(ts / 1000);
	struct tm		 tm;

	if (gmtime_r(&t, &tm) == NULL ||
	    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		snprintf(when, sizeof(when), "%lld", (long long)ts);
	d = json_object_object_get(row, "detail");
	/* One row, one line: no line separator from a tool's arguments. */
	text = audit_json_text(d);
	printf("%-6lld %s.%03dZ %-10s %-16s %-12s %s\n",
	    (long long)jint(row, "id"), when, (int)(ts % 1000),
	    jstr(row, "kind"), *jstr(row, "user") != '\0' ? jstr(row, "user") :
	    "-", *jstr(row, "tenant") != '\0' ? jstr(row, "tenant") : "-",
	    text);
	free(text);
}

/* Ask the controller; a refusal is printed and is exit status 1. */
static struct json_object *
audit_request(const char *path, struct json_object *req)
{
	struct json_object	*r;
	int			 ok = 0;

	r = ctl_request_payload(path, MSG_CTL_ADMIN, req);
	json_object_put(req);
	(void)json_get_bool(r, "ok", 0, &ok);
	if (!ok) {
		fprintf(stderr, "mcpbrokerctl: %s\n", jstr(r, "error"));
		exit(1);
	}
	return r;
}

static int
audit_show(const char *path, struct json_object *req)
{
	struct json_object	*r, *rows;
	int			 truncated = 0;
	size_t			 i;

	r = audit_request(path, req);
	if (!json_object_object_get_ex(r, "rows", &rows) ||
	    !json_object_is_type(rows, json_type_array))
		fatalx("malformed audit reply");
	printf("%-6s %-24s %-10s %-16s %-12s %s\n", "ID", "TIME (UTC)", "KIND",
	    "USER", "TENANT", "DETAIL");
	for (i = 0; i < json_object_array_length(rows); i++)
		print_audit_row(json_object_array_get_idx(rows, i));
	(void)json_get_bool(r, "truncated", 1, &truncated);
	if (truncated)
		fprintf(stderr, "mcpbrokerctl: only the newest rows fit in "
		    "one answer; use a smaller -n or audit export\n");
	json_object_put(r);
	return 0;
}

/* A checkpoint's verdict, after the chain's; 1 if it failed. */
static int
print_checkpoint(struct json_object *r)
{
	struct json_object	*cp;
	int			 ok = 0;

	if (!json_object_object_get_ex(r, "checkpoint", &cp))
		return 0;
	(void)json_get_bool(cp, "ok", 0, &ok);
	if (ok)
		printf("checkpoint OK: row %lld of %s is in the trail as "
		    "signed\n", (long long)jint(cp, "last_id"),
		    jstr(cp, "time"));
	else
		printf("checkpoint FAILED: %s\n", jstr(cp, "problem"));
	return !ok;
}

static int
audit_verify(const char *path, struct json_object *req)
{
	struct json_object	*r;
	int			 intact = 0, failed;

	r = audit_request(path, req);
	(void)json_get_bool(r, "intact", 0, &intact);
	if (intact)
		printf("audit trail OK: %lld rows, head %s\n",
		    (long long)jint(r, "rows"), jstr(r, "head"));
	else
		printf("audit trail BROKEN: %s\n(%lld rows verified before "
		    "it, up to head %s)\n", jstr(r, "problem"),
		    (long long)jint(r, "rows"), jstr(r, "head"));
	failed = print_checkpoint(r);
	json_object_put(r);
	return intact && !failed ? 0 : 1;
}

/* The file `audit checkpoint` wrote, kept somewhere else meanwhile. */
static struct json_object *
read_checkpoint(const char *file)
{
	struct json_object	*cp;
	char			 buf[8192];
	size_t			 n;
	FILE			*fp;

	if ((fp = fopen(file, "re")) == NULL)
		fatal("%s", file);
	n = fread(buf, 1, sizeof(buf), fp);
	fclose(fp);
	if (n == sizeof(buf) || (cp = json_parse_object(buf, n)) == NULL)
		fatalx("%s: not a checkpoint (one JSON object, as `audit "
		    "checkpoint` prints it)", file);
	return cp;
}

static int
audit_checkpoint(const char *path, struct json_object *req)
{
	struct json_object *r, *cp;

	r = audit_request(path, req);
	if (!json_object_object_get_ex(r, "checkpoint", &cp))
		fatalx("malformed audit reply");
	printf("%s\n", json_object_to_json_string_ext(cp,
	    JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
	    JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(r);
	return fflush(stdout) == 0 ? 0 : 1;
}

/* Page by page (each answer must fit in one message), until one is empty. */
static int
audit_export(const char *path, const char *format)
{
	struct json_object	*req, *r;
	char			 host[256];
	int64_t			 after = 0;
	int			 more = 1;

	/* The syslog HOSTNAME: this machine, where the daemon runs. */
	if (gethostname(host, sizeof(host)) == -1)
		snprintf(host, sizeof(host), "-");
	host[sizeof(host) - 1] = '\0';
	while (more) {
		req = json_object_new_object();
		json_object_object_add(req, "op",
		    json_object_new_string("audit_export"));
		json_object_object_add(req, "after",
		    json_object_new_int64(after));
		json_object_object_add(req, "format",
		    json_object_new_string(format));
		json_object_object_add(req, "host",
		    json_object_new_string(host));
		r = audit_request(path, req);
		/* Not jstr: a page is megabytes. */
		if (!json_object_is_type(json_object_object_get(r, "lines"),
		    json_type_string))
			fatalx("malformed audit reply");
		fputs(json_object_get_string(json_object_object_get(r,
		    "lines")), stdout);
		(void)json_get_bool(r, "more", 0, &more);
		after = jint(r, "last");
		json_object_put(r);
	}
	return fflush(stdout) == 0 ? 0 : 1;
}

static void
add_time(struct json_object *req, const char *key, const char *arg)
{
	int64_t ms, now = (int64_t)time(NULL) * 1000;

	if (audit_time_parse(arg, now, &ms) == -1)
		fatalx("--%s %s: expected ISO 8601 in UTC (2026-01-31, "
		    "2026-01-31T12:00:00Z) or a duration ago (90s, 30m, 1h, "
		    "7d)", key, arg);
	json_object_object_add(req, key, json_object_new_int64(ms));
}

enum {
	OPT_TOOL = 256,
	OPT_DECISION,
	OPT_SINCE,
	OPT_UNTIL,
	OPT_FORMAT,
	OPT_CHECKPOINT,
};

static const struct option audit_options[] = {
	{ "tool", required_argument, NULL, OPT_TOOL },
	{ "decision", required_argument, NULL, OPT_DECISION },
	{ "since", required_argument, NULL, OPT_SINCE },
	{ "until", required_argument, NULL, OPT_UNTIL },
	{ "format", required_argument, NULL, OPT_FORMAT },
	{ "checkpoint", required_argument, NULL, OPT_CHECKPOINT },
	{ NULL, 0, NULL, 0 },
};

static void
add_str(struct json_object *req, const char *key, const char *v)
{
	json_object_object_add(req, key, json_object_new_string(v));
}

static void
show_option(struct json_object *req, int ch, const char *arg)
{
	char	*end;
	long	 n;

	switch (ch) {
	case 'n':
		n = strtol(arg, &end, 10);
		if (*arg == '\0' || *end != '\0' || n < 1 || n > 10000)
			fatalx("-n %s: a number of rows, 1-10000", arg);
		json_object_object_add(req, "limit", json_object_new_int64(n));
		break;
	case 'u':
		add_str(req, "user", arg);
		break;
	case 'k':
		add_str(req, "kind", arg);
		break;
	case OPT_TOOL:
		add_str(req, "tool", arg);
		break;
	case OPT_DECISION:
		if (strcmp(arg, "allow") != 0 && strcmp(arg, "deny") != 0 &&
		    strcmp(arg, "confirm") != 0)
			fatalx("--decision %s: allow, deny or confirm", arg);
		add_str(req, "decision", arg);
		break;
	case OPT_SINCE:
		add_time(req, "since", arg);
		break;
	case OPT_UNTIL:
		add_time(req, "until", arg);
		break;
	default:
		usage();
	}
}

/*
 * audit show [-n N] [-u USER] [-k KIND] [--tool GLOB] [--decision D]
 * [--since T] [--until T] | audit verify [--checkpoint FILE] |
 * audit checkpoint | audit export [--format jsonl|syslog|cef]
 */
static int
cmd_audit(const char *path, int argc, char *argv[])
{
	struct json_object	*req = json_object_new_object();
	enum audit_format	 fmt;
	const char		*format = "jsonl", *checkpoint = NULL;
	char			 op[32];
	int			 ch, show;

	if (argc < 1)
		usage();
	snprintf(op, sizeof(op), "audit_%s", argv[0]);
	add_str(req, "op", op);
	show = strcmp(argv[0], "show") == 0;
	optind = 1;
	while ((ch = getopt_long(argc, argv, show ? "n:u:k:" : "",
	    audit_options, NULL)) != -1) {
		if (show)
			show_option(req, ch, optarg);
		else if (ch == OPT_FORMAT && strcmp(argv[0], "export") == 0)
			format = optarg;
		else if (ch == OPT_CHECKPOINT && strcmp(argv[0], "verify") == 0)
			checkpoint = optarg;
		else
			usage();
	}
	if (optind != argc)
		usage();
	if (show)
		return audit_show(path, req);
	if (strcmp(argv[0], "verify") == 0) {
		if (checkpoint != NULL)
			json_object_object_add(req, "checkpoint",
			    read_checkpoint(checkpoint));
		return audit_verify(path, req);
	}
	if (strcmp(argv[0], "checkpoint") == 0)
		return audit_checkpoint(path, req);
	json_object_put(req);
	if (strcmp(argv[0], "export") != 0 ||
	    audit_format_parse(format, &fmt) == -1)
		usage();
	return audit_export(path, format);
}

/*
 * Text a server wrote (tool names, descriptions, schemas) reaches a
 * terminal: control characters, DEL and C1 controls become '?', so that
 * it cannot move the cursor or rewrite what is shown above it.  Each line
 * gets the prefix.
 */
static void
print_safe(const char *prefix, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	fputs(prefix, stdout);
	for (; *p != '\0'; p++) {
		if (*p == '\n') {
			putchar('\n');
			fputs(prefix, stdout);
		} else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			putchar('?');
			p++;
		} else if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
			putchar('?');
		else
			putchar(*p);
	}
	putchar('\n');
}

static void
print_when(const char *label, int64_t ms)
{
	char		when[32];
	time_t		t = (time_t)(ms / 1000);
	struct tm	tm;

	if (gmtime_r(&t, &tm) == NULL ||
	    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(when, sizeof(when), "%lld", (long long)ms);
	printf("%s%s", label, when);
}

/* One side of a changed member: text as lines, anything else as JSON. */
static void
print_member(const char *prefix, struct json_object *side, const char *m)
{
	struct json_object *v;

	if (!json_object_object_get_ex(side, m, &v))
		print_safe(prefix, "(none)");
	else if (json_object_is_type(v, json_type_string))
		print_safe(prefix, json_object_get_string(v));
	else
		print_safe(prefix, json_object_to_json_string_ext(v,
		    JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
		    JSON_C_TO_STRING_NOSLASHESCAPE));
}

static void
print_pending(struct json_object *p)
{
	struct json_object	*changed, *old, *new;
	const char		*m;
	char			 head[512];
	size_t			 i;
	int			 withheld = 0;

	(void)json_get_bool(p, "withheld", 1, &withheld);
	snprintf(head, sizeof(head), "%s.%s", jstr(p, "server"),
	    jstr(p, "tool"));
	print_safe("", head);
	print_when("  pending since ", jint(p, "pending_since"));
	printf(" (pin-policy %s: %s)\n", *jstr(p, "policy") != '\0' ?
	    jstr(p, "policy") : "none",
	    withheld ? "withheld" : "still offered");
	printf("  pinned  sha256 %s\n  pending sha256 %s\n",
	    jstr(p, "sha256"), jstr(p, "pending_sha256"));
	changed = json_object_object_get(p, "changed");
	old = json_object_object_get(p, "old");
	new = json_object_object_get(p, "new");
	for (i = 0; i < json_object_array_length(changed); i++) {
		m = json_object_get_string(json_object_array_get_idx(changed,
		    i));
		printf("  %s changed:\n", m);
		print_member("    - ", old, m);
		print_member("    + ", new, m);
	}
	snprintf(head, sizeof(head), "  approve: mcpbrokerctl tools approve "
	    "%s %s %s", jstr(p, "server"), jstr(p, "tool"),
	    jstr(p, "pending_sha256"));
	print_safe("", head);
}

static void
print_pin(struct json_object *p)
{
	char line[512];

	snprintf(line, sizeof(line), "%-16s %-32s %.12s", jstr(p, "server"),
	    jstr(p, "tool"), jstr(p, "sha256"));
	print_safe("", line);
	print_when("    first seen ", jint(p, "first_seen"));
	if (json_object_object_get(p, "approved_at") != NULL) {
		print_when(", approved ", jint(p, "approved_at"));
		snprintf(line, sizeof(line), " by %s", jstr(p, "approved_by"));
		print_safe("", line);
	} else
		putchar('\n');
	if (*jstr(p, "pending_sha256") != '\0')
		printf("    a new definition is pending: %.12s\n",
		    jstr(p, "pending_sha256"));
}

/*
 * tools pending [SERVER] | tools pins [SERVER] |
 * tools approve SERVER TOOL [SHA256] | tools approve --all SERVER
 */
static int
cmd_tools(const char *path, int argc, char *argv[])
{
	struct json_object	*req = json_object_new_object(), *r, *arr;
	char			 op[32];
	size_t			 i;
	int			 all = 0, truncated = 0;

	if (argc < 1)
		usage();
	snprintf(op, sizeof(op), "tools_%s", argv[0]);
	add_str(req, "op", op);
	if (strcmp(argv[0], "approve") == 0 && argc > 1)
		all = strcmp(argv[1], "--all") == 0;
	if (strcmp(argv[0], "approve") == 0 && all && argc == 3) {
		add_str(req, "server", argv[2]);
		json_object_object_add(req, "all", json_object_new_boolean(1));
	} else if (strcmp(argv[0], "approve") == 0 && !all &&
	    (argc == 3 || argc == 4)) {
		add_str(req, "server", argv[1]);
		add_str(req, "tool", argv[2]);
		if (argc == 4)
			add_str(req, "sha256", argv[3]);
	} else if ((strcmp(argv[0], "pending") == 0 ||
	    strcmp(argv[0], "pins") == 0) && argc <= 2) {
		if (argc == 2)
			add_str(req, "server", argv[1]);
	} else
		usage();
	r = audit_request(path, req);
	(void)json_get_bool(r, "truncated", 1, &truncated);
	if (json_object_object_get_ex(r, "approved", &arr))
		for (i = 0; i < json_object_array_length(arr); i++) {
			snprintf(op, sizeof(op), "approved: ");
			print_safe(op, json_object_to_json_string_ext(
			    json_object_array_get_idx(arr, i),
			    JSON_C_TO_STRING_PLAIN |
			    JSON_C_TO_STRING_NOSLASHESCAPE));
		}
	else if (json_object_object_get_ex(r, "pending", &arr)) {
		if (json_object_array_length(arr) == 0)
			printf("no tool definition awaits approval\n");
		for (i = 0; i < json_object_array_length(arr); i++)
			print_pending(json_object_array_get_idx(arr, i));
	} else if (json_object_object_get_ex(r, "pins", &arr))
		for (i = 0; i < json_object_array_length(arr); i++)
			print_pin(json_object_array_get_idx(arr, i));
	if (truncated)
		fprintf(stderr, "mcpbrokerctl: not everything fits in one "
		    "answer; name a server\n");
	json_object_put(r);
	return 0;
}

/*
 * backup FILE: a consistent copy of the daemon's database.  The file is
 * made here, beside FILE and with mode 0600 (it holds every conversation
 * and key hash), and its descriptor goes to the daemon, whose controller
 * writes the copy into it; once the daemon says the copy is whole and
 * synced, the file takes FILE's name.  The daemon opens no path of ours.
 */
static char backup_tmp[4096];

/* However we leave (no daemon, no answer), no half-made file stays. */
static void
backup_cleanup(void)
{
	if (backup_tmp[0] != '\0')
		(void)unlink(backup_tmp);
}

static int
cmd_backup(const char *path, int argc, char *argv[])
{
	struct json_object	*r;
	char			 dir[4096], *slash;
	int			 fd, dfd, ok = 0;

	if (argc != 1 || *argv[0] == '\0')
		usage();
	if ((size_t)snprintf(backup_tmp, sizeof(backup_tmp), "%s.XXXXXX",
	    argv[0]) >= sizeof(backup_tmp))
		fatalx("%s: path too long", argv[0]);
	if ((fd = mkostemp(backup_tmp, O_CLOEXEC)) == -1) {
		backup_tmp[0] = '\0';
		fatal("cannot create a file beside %s", argv[0]);
	}
	atexit(backup_cleanup);
	r = ctl_request_fd(path, MSG_CTL_BACKUP, NULL, fd);
	(void)json_get_bool(r, "ok", 0, &ok);
	if (!ok || rename(backup_tmp, argv[0]) == -1) {
		if (ok)
			fprintf(stderr, "mcpbrokerctl: %s: %s\n", argv[0],
			    strerror(errno));
		else
			fprintf(stderr, "mcpbrokerctl: backup failed: %s\n",
			    jstr(r, "error"));
		json_object_put(r);
		return 1;
	}
	backup_tmp[0] = '\0';
	/* The new name on disk too. */
	snprintf(dir, sizeof(dir), "%s", argv[0]);
	if ((slash = strrchr(dir, '/')) != NULL)
		slash[slash == dir ? 1 : 0] = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) != -1) {
		(void)fsync(dfd);
		close(dfd);
	}
	printf("backup written to %s: %lld pages, %lld bytes\n", argv[0],
	    (long long)jint(r, "pages"), (long long)jint(r, "bytes"));
	json_object_put(r);
	return 0;
}

int
main(int argc, char *argv[])
{
	const char	*path = CONF_DEFAULT_CONTROL;
	int		 ch;

	log_init(1, 0, LOG_USER);
	log_procinit("mcpbrokerctl");
	while ((ch = getopt(argc, argv, "+s:v")) != -1) {
		switch (ch) {
		case 's':
			path = optarg;
			break;
		case 'v':
			log_setverbose(log_getverbose() + 1);
			break;
		default:
			usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		usage();
	if (strcmp(argv[0], "status") == 0)
		return cmd_status(path);
	if (strcmp(argv[0], "reload") == 0)
		return cmd_reload(path);
	if (strcmp(argv[0], "server") == 0)
		return cmd_server(path, argc - 1, argv + 1);
	if (strcmp(argv[0], "user") == 0)
		return cmd_user(path, argc - 1, argv + 1);
	if (strcmp(argv[0], "tenant") == 0)
		return cmd_tenant(path, argc - 1, argv + 1);
	if (strcmp(argv[0], "policy") == 0)
		return cmd_policy(path, argc - 1, argv + 1);
	if (strcmp(argv[0], "audit") == 0)
		return cmd_audit(path, argc - 1, argv + 1);
	if (strcmp(argv[0], "tools") == 0)
		return cmd_tools(path, argc - 1, argv + 1);
	if (strcmp(argv[0], "backup") == 0)
		return cmd_backup(path, argc - 1, argv + 1);
	if (strcmp(argv[0], "mcp") == 0)
		return ctl_mcp(argc - 1, argv + 1);
	usage();
}
