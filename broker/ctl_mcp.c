/*
 * mcpbrokerctl mcp: the worker's MCP client, run directly against one
 * server, for troubleshooting and for the MCP conformance suite.
 *
 *   mcp tools [-T ms] TARGET             list every tool (all pages)
 *   mcp call [-T ms] TARGET TOOL [JSON]  call one tool, print its result
 *
 * -T is the time each request may take (default 30 s); -e NAME passes
 * that environment variable to a stdio server (the rest is scrubbed).
 * TARGET is `-- COMMAND [ARG...]` for a stdio server (with `call`, TOOL and
 * JSON are then the last two arguments) or an http(s) URL.
 */
#include <sys/types.h>
#include <sys/wait.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/ctl.h"
#include "common/log.h"
#include "common/util.h"
#include "worker/instance.h"
#include "worker/mcp.h"
#include "worker/mcp_http.h"
#include "worker/mcp_stdio.h"
#include "common/http_client.h"

#define CTL_MCP_TIMEOUT_MS	30000
#define CTL_MCP_MAX_ENV		16
#define STDIN_CLOSE_GRACE_MS	500	/* then SIGTERM */

static struct {
	struct event_base	*base;
	struct mcp_session	*session;
	const char		*op;
	const char		*tool;
	struct json_object	*args;
	pid_t			 pid;
	int			 status;	/* exit code of the command */
	int			 finished;
	uint64_t		 timeout_ms;	/* each request; -T */
	const char		*scenario;	/* conformance */
	char			*env[CTL_MCP_MAX_ENV];	/* -e NAME */
	size_t			 nenv;
	char			 eof[256];
} cm;

static void
finish(int status)
{
	cm.finished = 1;
	cm.status = status;
	event_base_loopbreak(cm.base);
}

static void
print_result(struct json_object *o)
{
	printf("%s\n", json_object_to_json_string_ext(o,
	    JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
}

static void
done_cb(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	(void)s;
	(void)arg;
	if (err != NULL) {
		fprintf(stderr, "mcpbrokerctl: %s\n", err->me_message);
		finish(1);
		return;
	}
	print_result(res);
	finish(0);
}

/* Arguments for a tool we know only by its schema: 1s and "test"s. */
static struct json_object *
sample_arguments(struct json_object *tool)
{
	struct json_object	*args = json_object_new_object(), *schema;
	struct json_object	*props, *type;

	if (!json_object_object_get_ex(tool, "inputSchema", &schema) ||
	    !json_object_object_get_ex(schema, "properties", &props) ||
	    !json_object_is_type(props, json_type_object))
		return args;
	json_object_object_foreach(props, key, prop) {
		if (!json_object_object_get_ex(prop, "type", &type))
			continue;
		if (strcmp(json_object_get_string(type), "number") == 0 ||
		    strcmp(json_object_get_string(type), "integer") == 0)
			json_object_object_add(args, key,
			    json_object_new_int(1));
		else if (strcmp(json_object_get_string(type), "string") == 0)
			json_object_object_add(args, key,
			    json_object_new_string("test"));
		else if (strcmp(json_object_get_string(type), "boolean") == 0)
			json_object_object_add(args, key,
			    json_object_new_boolean(1));
	}
	return args;
}

/*
 * The conformance suite's client scenarios: list the tools, then call the
 * one the scenario checks for (add_numbers), or the first one.
 */
static void
conformance_listed(struct mcp_session *s, struct json_object *res,
    const struct mcp_error *err, void *arg)
{
	struct json_object	*tools, *t, *pick = NULL, *name;
	size_t			 i;

	(void)arg;
	if (err != NULL) {
		done_cb(s, NULL, err, NULL);
		return;
	}
	if (!json_object_object_get_ex(res, "tools", &tools) ||
	    json_object_array_length(tools) == 0) {
		finish(0);
		return;
	}
	for (i = 0; i < json_object_array_length(tools); i++) {
		t = json_object_array_get_idx(tools, i);
		if (json_object_object_get_ex(t, "name", &name) &&
		    strcmp(json_object_get_string(name), "add_numbers") == 0)
			pick = t;
	}
	if (pick == NULL)
		pick = json_object_array_get_idx(tools, 0);
	json_object_object_get_ex(pick, "name", &name);
	(void)mcp_call_tool(s, json_object_get_string(name),
	    sample_arguments(pick), cm.timeout_ms, done_cb, NULL, NULL);
}

/* Progress goes to stderr as it comes, so stdout stays the result. */
static void
progress_cb(struct mcp_session *s, struct json_object *params, void *arg)
{
	struct json_object	*v;
	const char		*msg = NULL;
	double			 progress = 0, total = 0;

	(void)s;
	(void)arg;
	if (json_object_object_get_ex(params, "progress", &v))
		progress = json_object_get_double(v);
	if (json_object_object_get_ex(params, "total", &v))
		total = json_object_get_double(v);
	(void)json_get_str(params, "message", 200, 1, &msg);
	fprintf(stderr, "mcpbrokerctl: progress %g", progress);
	if (total > 0)
		fprintf(stderr, "/%g", total);
	fprintf(stderr, "%s%s\n", msg != NULL ? " " : "", msg != NULL ? msg :
	    "");
}

static void
on_ready(struct mcp_session *s, void *arg)
{
	(void)arg;
	fprintf(stderr, "mcpbrokerctl: connected (%s era, protocol %s)\n",
	    mcp_era_str(mcp_session_era(s)), mcp_session_version(s));
	if (strcmp(cm.op, "conformance") == 0) {
		if (cm.scenario != NULL && strcmp(cm.scenario, "initialize") ==
		    0)
			finish(0);
		else
			mcp_list_tools(s, cm.timeout_ms, conformance_listed,
			    NULL);
	} else if (strcmp(cm.op, "tools") == 0)
		mcp_list_tools(s, cm.timeout_ms, done_cb, NULL);
	else {
		(void)mcp_call_tool(s, cm.tool, cm.args, cm.timeout_ms,
		    done_cb, progress_cb, NULL);
		cm.args = NULL;
	}
}

static void
on_closed(struct mcp_session *s, const char *why, void *arg)
{
	(void)s;
	(void)arg;
	if (cm.finished)
		return;		/* the request's own error said it all */
	fprintf(stderr, "mcpbrokerctl: %s\n", why);
	finish(1);
}

static void
on_tools_changed(struct mcp_session *s, void *arg)
{
	(void)s;
	(void)arg;
}

static const struct mcp_session_cbs cbs = {
	on_ready, on_closed, on_tools_changed
};

/* The command's output ended: say how the process ended, if it did. */
static void
stdio_eof(void *arg, const char *why)
{
	int	status, ms;
	char	desc[300];
	pid_t	rc = 0;

	(void)arg;
	/* The pipe closes a moment before the process is reapable. */
	for (ms = 0; ms < 1000 && (rc = waitpid(cm.pid, &status, WNOHANG)) ==
	    0; ms += 10)
		usleep(10 * 1000);
	if (rc == cm.pid) {
		cm.pid = 0;
		if (WIFEXITED(status))
			snprintf(desc, sizeof(desc), "the server exited with "
			    "status %d", WEXITSTATUS(status));
		else if (WIFSIGNALED(status))
			snprintf(desc, sizeof(desc), "the server was killed by "
			    "signal %d", WTERMSIG(status));
		else
			snprintf(desc, sizeof(desc), "%s", why);
	} else
		snprintf(desc, sizeof(desc), "%s", why);
	mcp_session_transport_down(cm.session, desc);
}

static int
exited_within(pid_t pid, int ms)
{
	for (; ms > 0; ms -= 50) {
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return 1;
		usleep(50 * 1000);
	}
	return 0;
}

/*
 * The stdio shutdown the MCP specification describes: its input is closed
 * (the session is gone), then SIGTERM, then SIGKILL, each after a grace.
 */
static void
stop_server(void)
{
	if (cm.pid <= 0 || exited_within(cm.pid, STDIN_CLOSE_GRACE_MS))
		return;
	instance_signal(cm.pid, SIGTERM);
	if (exited_within(cm.pid, INSTANCE_KILL_GRACE_MS))
		return;
	instance_signal(cm.pid, SIGKILL);
	(void)waitpid(cm.pid, NULL, 0);
}

static int
run_stdio(char **cmd, int ncmd)
{
	struct mcp_session_opts	 so;
	struct server_conf	 srv;
	struct instance_fds	 fds;
	struct stdio_transport	*st;
	char			 why[256];

	memset(&srv, 0, sizeof(srv));
	srv.srv_name = "cli";
	srv.srv_argv = cmd;
	srv.srv_argc = ncmd;
	srv.srv_env = cm.env;
	srv.srv_nenv = cm.nenv;
	TAILQ_INIT(&srv.srv_fs);
	TAILQ_INIT(&srv.srv_headers);
	if ((cm.pid = instance_spawn(&srv, getuid(), getgid(), &fds, why,
	    sizeof(why))) == -1) {
		fprintf(stderr, "mcpbrokerctl: %s\n", why);
		return 1;
	}
	st = stdio_transport_new(cm.base, "cli", fds.if_stdin, fds.if_stdout,
	    fds.if_stderr, stdio_eof, NULL);
	memset(&so, 0, sizeof(so));
	so.so_name = "cli";
	so.so_connect_timeout_ms = cm.timeout_ms;
	so.so_can_cancel_by_notification = 1;
	if ((cm.session = mcp_session_new(cm.base, &so, &stdio_transport_ops,
	    st, &cbs, NULL)) == NULL)
		fatalx("mcp_session_new");
	stdio_transport_attach(st, cm.session);
	mcp_session_start(cm.session);
	event_base_dispatch(cm.base);
	/* What we still owe the server (a cancellation) goes out first. */
	(void)event_base_loop(cm.base, EVLOOP_NONBLOCK);
	mcp_session_free(cm.session);
	stop_server();
	return cm.status;
}

/* An http(s) server, streamable HTTP or (--sse) the 2024-11-05 transport. */
static int
run_http(const char *url, int sse)
{
	struct http_client_opts	 co;
	struct mcp_http_opts	 ho;
	struct mcp_session_opts	 so;
	struct http_client	*client;
	struct mcp_http		*t;
	struct timeval		 tv = { 3, 0 };

	memset(&co, 0, sizeof(co));
	if ((client = http_client_new(cm.base, &co)) == NULL)
		return 1;
	memset(&ho, 0, sizeof(ho));
	ho.ho_name = "cli";
	ho.ho_url = url;
	ho.ho_kind = sse ? MCP_HTTP_SSE : MCP_HTTP_STREAMABLE;
	ho.ho_connect_timeout_ms = 10000;
	ho.ho_call_timeout_ms = cm.timeout_ms;
	t = mcp_http_new(cm.base, client, &ho);
	memset(&so, 0, sizeof(so));
	so.so_name = "cli";
	so.so_connect_timeout_ms = cm.timeout_ms;
	so.so_era_hint = sse ? MCP_ERA_LEGACY : MCP_ERA_UNKNOWN;
	so.so_can_cancel_by_notification = sse;
	so.so_param_headers = !sse;
	if ((cm.session = mcp_session_new(cm.base, &so, &mcp_http_ops, t, &cbs,
	    NULL)) == NULL)
		fatalx("mcp_session_new");
	mcp_http_attach(t, cm.session);
	mcp_session_start(cm.session);
	event_base_dispatch(cm.base);
	mcp_session_free(cm.session);
	/* Let a closing DELETE reach the server, briefly. */
	event_base_loopexit(cm.base, &tv);
	while (mcp_http_busy() > 0 &&
	    event_base_loop(cm.base, EVLOOP_ONCE) == 0 &&
	    !event_base_got_exit(cm.base))
		;
	http_client_free(client);
	return cm.status;
}

static void __attribute__((noreturn))
mcp_usage(void)
{
	fprintf(stderr, "usage: mcpbrokerctl mcp tools [--sse] [-T ms] URL | "
	    "[-e NAME]... -- COMMAND [ARG...]\n"
	    "       mcpbrokerctl mcp call [--sse] [-T ms] URL TOOL [JSON]\n"
	    "       mcpbrokerctl mcp call [-T ms] [-e NAME]... -- COMMAND "
	    "[ARG...] TOOL JSON\n"
	    "       mcpbrokerctl mcp conformance URL   (for the MCP "
	    "conformance suite)\n");
	exit(2);
}

static void
take_call_args(const char *tool, const char *json)
{
	cm.tool = tool;
	cm.args = json_parse_object(json, strlen(json));
	if (cm.args == NULL) {
		fprintf(stderr, "mcpbrokerctl: arguments must be a JSON "
		    "object: %s\n", json);
		exit(2);
	}
}

int
ctl_mcp(int argc, char *argv[])
{
	int i, sse = 0, call, status;

	if (argc < 2)
		mcp_usage();
	cm.op = argv[0];
	cm.timeout_ms = CTL_MCP_TIMEOUT_MS;
	call = strcmp(cm.op, "call") == 0;
	if (!call && strcmp(cm.op, "tools") != 0 &&
	    strcmp(cm.op, "conformance") != 0)
		mcp_usage();
	cm.scenario = getenv("MCP_CONFORMANCE_SCENARIO");
	for (i = 1; i < argc && argv[i][0] == '-' &&
	    strcmp(argv[i], "--") != 0; i++) {
		if (strcmp(argv[i], "--sse") == 0)
			sse = 1;
		else if (strcmp(argv[i], "-e") == 0 && i + 1 < argc &&
		    cm.nenv < CTL_MCP_MAX_ENV)
			cm.env[cm.nenv++] = argv[++i];
		else if (strcmp(argv[i], "-T") == 0 && i + 1 < argc &&
		    (cm.timeout_ms = strtoull(argv[i + 1], NULL, 10)) > 0)
			i++;
		else
			mcp_usage();
	}
	signal(SIGPIPE, SIG_IGN);
	if ((cm.base = event_base_new()) == NULL)
		fatalx("event_base_new");
	if (i < argc && strcmp(argv[i], "--") == 0) {
		i++;
		if (call) {
			if (argc - i < 3)
				mcp_usage();
			take_call_args(argv[argc - 2], argv[argc - 1]);
			argc -= 2;
		}
		if (i >= argc)
			mcp_usage();
		argv[argc] = NULL;
		status = run_stdio(argv + i, argc - i);
	} else {
		if (i >= argc)
			mcp_usage();
		if (call) {
			if (argc - i < 2)
				mcp_usage();
			take_call_args(argv[i + 1], i + 2 < argc ?
			    argv[i + 2] : "{}");
		}
		status = run_http(argv[i], sse);
	}
	json_object_put(cm.args);
	event_base_free(cm.base);
	return status;
}
