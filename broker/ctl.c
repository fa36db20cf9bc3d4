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
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

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
	    "  audit show [-n N] [-u USER] [-k KIND]\n"
	    "            the last N (50) rows of the audit trail, oldest "
	    "first\n"
	    "  audit verify     check the trail's hash chain; prints its "
	    "head\n"
	    "  audit export [--format jsonl]\n"
	    "            the whole trail as JSON Lines on stdout\n"
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

static struct json_object *
ctl_request_payload(const char *path, uint16_t type, struct json_object *body)
{
	struct timeval	 tv = { type == MSG_CTL_ADMIN ? CTL_CALL_TIMEOUT_SEC :
	    CTL_TIMEOUT_SEC, 0 };
	struct msgchan	*mc;
	int		 fd;

	fd = ctl_connect(path);
	if ((ctl.base = event_base_new()) == NULL ||
	    (mc = msgchan_new(ctl.base, fd, ctl_on_msg, ctl_on_err, NULL)) ==
	    NULL)
		fatalx("event setup");
	const char *payload = body != NULL ? json_object_to_json_string_ext(body,
	    JSON_C_TO_STRING_PLAIN) : "{}";

	if (msgchan_compose(mc, type, 1, 0, -1, payload, strlen(payload)) ==
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
	char			 when[32];
	int64_t			 ts = jint(row, "ts");
	time_t			 t = (time_t)(ts / 1000);
	struct tm		 tm;

	if (gmtime_r(&t, &tm) == NULL ||
	    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		snprintf(when, sizeof(when), "%lld", (long long)ts);
	d = json_object_object_get(row, "detail");
	printf("%-6lld %s.%03dZ %-10s %-16s %-12s %s\n",
	    (long long)jint(row, "id"), when, (int)(ts % 1000),
	    jstr(row, "kind"), *jstr(row, "user") != '\0' ? jstr(row, "user") :
	    "-", *jstr(row, "tenant") != '\0' ? jstr(row, "tenant") : "-",
	    json_object_to_json_string_ext(d, JSON_C_TO_STRING_PLAIN |
	    JSON_C_TO_STRING_NOSLASHESCAPE));
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

static int
audit_verify(const char *path, struct json_object *req)
{
	struct json_object	*r;
	int			 intact = 0;

	r = audit_request(path, req);
	(void)json_get_bool(r, "intact", 0, &intact);
	if (intact)
		printf("audit trail OK: %lld rows, head %s\n",
		    (long long)jint(r, "rows"), jstr(r, "head"));
	else
		printf("audit trail BROKEN: %s\n(%lld rows verified before "
		    "it, up to head %s)\n", jstr(r, "problem"),
		    (long long)jint(r, "rows"), jstr(r, "head"));
	json_object_put(r);
	return intact ? 0 : 1;
}

/* Page by page (each answer must fit in one message), until one is empty. */
static int
audit_export(const char *path)
{
	struct json_object	*req, *r;
	int64_t			 after = 0;
	int			 more = 1;

	while (more) {
		req = json_object_new_object();
		json_object_object_add(req, "op",
		    json_object_new_string("audit_export"));
		json_object_object_add(req, "after",
		    json_object_new_int64(after));
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

/* audit show [-n N] [-u USER] [-k KIND] | audit verify | audit export */
static int
cmd_audit(const char *path, int argc, char *argv[])
{
	struct json_object	*req = json_object_new_object();
	char			 op[16], *end;
	long			 n;
	int			 ch;

	if (argc < 1)
		usage();
	snprintf(op, sizeof(op), "audit_%s", argv[0]);
	json_object_object_add(req, "op", json_object_new_string(op));
	if (strcmp(argv[0], "verify") == 0 && argc == 1)
		return audit_verify(path, req);
	if (strcmp(argv[0], "export") == 0) {
		json_object_put(req);
		if (argc == 1 || (argc == 3 && strcmp(argv[1], "--format") ==
		    0 && strcmp(argv[2], "jsonl") == 0))
			return audit_export(path);
		usage();
	}
	if (strcmp(argv[0], "show") != 0)
		usage();
	optind = 1;
	while ((ch = getopt(argc, argv, "n:u:k:")) != -1) {
		switch (ch) {
		case 'n':
			n = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || n < 1 ||
			    n > 10000)
				fatalx("-n %s: a number of rows, 1-10000",
				    optarg);
			json_object_object_add(req, "limit",
			    json_object_new_int64(n));
			break;
		case 'u':
			json_object_object_add(req, "user",
			    json_object_new_string(optarg));
			break;
		case 'k':
			json_object_object_add(req, "kind",
			    json_object_new_string(optarg));
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	return audit_show(path, req);
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
	if (strcmp(argv[0], "mcp") == 0)
		return ctl_mcp(argc - 1, argv + 1);
	usage();
}
