/*
 * mcpbroker.conf parser, printer and secret loading.
 *
 * Error cases are data: the input and the exact "FILE:LINE: message" line
 * it must produce.  Files the parser must open (includes) live under
 * $MCPBROKER_TEST_DATA/config; everything else is parsed from buffers.
 */

#include <sys/stat.h>

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "broker/config.h"
#include "broker/jwt.h"

static char	 data_dir[512];

static const char *
data_path(const char *name, char *buf, size_t sz)
{
	snprintf(buf, sz, "%s/config/%s", data_dir, name);
	return buf;
}

/* Parse text as "t.conf"; *errs gets whatever was reported. */
static struct mcpbroker_conf *
parse_text(const char *text, char **errs)
{
	struct mcpbroker_conf	*conf;
	size_t			 len;
	FILE			*fp;

	assert_non_null(fp = open_memstream(errs, &len));
	conf = config_parse_buffer("t.conf", text, strlen(text), fp);
	fclose(fp);
	return conf;
}

static struct mcpbroker_conf *
parse_path(const char *path, char *const *defines, char **errs)
{
	struct mcpbroker_conf	*conf;
	size_t			 len;
	FILE			*fp;

	assert_non_null(fp = open_memstream(errs, &len));
	conf = config_parse_file(path, defines, fp);
	fclose(fp);
	return conf;
}

static char *
print_conf(const struct mcpbroker_conf *conf, const char *only)
{
	char	*buf;
	size_t	 len;
	FILE	*fp;

	assert_non_null(fp = open_memstream(&buf, &len));
	config_print(fp, conf, only);
	fclose(fp);
	return buf;
}

static size_t
count_lines(const char *s)
{
	size_t	n = 0;

	for (; *s != '\0'; s++)
		if (*s == '\n')
			n++;
	return n;
}

/* text must fail with want among its error lines. */
static void
check_error(const char *text, const char *want)
{
	struct mcpbroker_conf	*conf;
	char			*errs, line[1024];

	conf = parse_text(text, &errs);
	snprintf(line, sizeof(line), "%s\n", want);
	if (conf != NULL || strstr(errs, line) == NULL) {
		print_error("input:\n%s\nwant: %s\ngot:\n%s\n", text, want,
		    errs);
		config_free(conf);
		free(errs);
		fail();
	}
	free(errs);
}

static struct mcpbroker_conf *
must_parse(const char *text)
{
	struct mcpbroker_conf	*conf;
	char			*errs;

	conf = parse_text(text, &errs);
	if (conf == NULL || *errs != '\0') {
		print_error("input:\n%s\nerrors:\n%s\n", text, errs);
		free(errs);
		fail();
	}
	free(errs);
	return conf;
}

static struct mcpbroker_conf *
load_full(void)
{
	struct mcpbroker_conf	*conf;
	char			 path[600], *errs;

	conf = parse_path(data_path("full.conf", path, sizeof(path)), NULL,
	    &errs);
	if (conf == NULL) {
		print_error("%s", errs);
		free(errs);
		fail();
	}
	assert_string_equal(errs, "");
	free(errs);
	return conf;
}

/* Defaults and the tiny configurations */

static void
test_defaults(void **state)
{
	struct mcpbroker_conf	*conf;

	(void)state;
	conf = must_parse("");
	assert_string_equal(conf->c_user, CONF_DEFAULT_USER);
	assert_string_equal(conf->c_state_dir, CONF_DEFAULT_STATE_DIR);
	assert_string_equal(conf->c_control_path, CONF_DEFAULT_CONTROL);
	assert_int_equal(conf->c_limits.lm_tool_rounds, 10);
	assert_int_equal(conf->c_limits.lm_tool_timeout_ms, 30000);
	assert_int_equal(conf->c_limits.lm_history_messages, 50);
	assert_int_equal(conf->c_limits.lm_max_body, 1024 * 1024);
	assert_int_equal(conf->c_limits.lm_header_timeout_ms, 10000);
	assert_true(TAILQ_EMPTY(&conf->c_listens));
	assert_true(TAILQ_EMPTY(&conf->c_rules));
	assert_int_equal(config_server_count(conf), 0);
	assert_false(conf->c_auth.au_api_keys || conf->c_auth.au_jwt);
	config_free(conf);

	/* comments, continuation lines and CRLF are all whitespace */
	conf = must_parse("# only a comment\r\nuser \\\r\n \"x\" # and more\n");
	assert_string_equal(conf->c_user, "x");
	config_free(conf);
	config_free(NULL);
}

static void
test_server_defaults(void **state)
{
	struct mcpbroker_conf	*conf;
	struct server_conf	*srv;

	(void)state;
	conf = must_parse("server \"a\" { command \"/bin/a\" }\n"
	    "server \"b\" { url \"https://b/mcp\" }\n");
	assert_int_equal(config_server_count(conf), 2);
	assert_non_null(srv = config_find_server(conf, "a"));
	assert_int_equal(srv->srv_transport, TRANSPORT_STDIO);
	assert_int_equal(srv->srv_argc, 1);
	assert_string_equal(srv->srv_argv[0], "/bin/a");
	assert_null(srv->srv_argv[1]);
	assert_int_equal(srv->srv_isolation, ISOLATION_SHARED);
	assert_int_equal(srv->srv_call_timeout_ms, 30000);
	assert_int_equal(srv->srv_connect_timeout_ms, 10000);
	assert_int_equal(srv->srv_idle_timeout_ms, 600000);
	assert_int_equal(srv->srv_max_instances, 32);
	assert_int_equal(srv->srv_pin_policy, PIN_BLOCK);
	assert_int_equal(srv->srv_bearer.sr_kind, SECRET_NONE);
	assert_non_null(srv = config_find_server(conf, "b"));
	assert_int_equal(srv->srv_transport, TRANSPORT_STREAMABLE_HTTP);
	assert_null(srv->srv_argv);
	assert_null(config_find_server(conf, "c"));
	assert_null(config_find_provider(conf, "a"));
	config_free(conf);
}

/* full.conf: every statement */

static void
test_full_globals(void **state)
{
	struct mcpbroker_conf	*conf;
	struct listen_conf	*ls;
	struct jwt_conf		*jw;
	struct limits_conf	*lm;

	(void)state;
	conf = load_full();
	ls = TAILQ_FIRST(&conf->c_listens);
	assert_string_equal(ls->ls_addr, "127.0.0.1");
	assert_int_equal(ls->ls_port, 8080);
	assert_false(ls->ls_tls);
	assert_int_equal(ls->ls_line, 13);
	ls = TAILQ_NEXT(ls, ls_entry);
	assert_string_equal(ls->ls_addr, "::1");
	assert_int_equal(ls->ls_port, 8443);	/* $ext_port */
	assert_true(ls->ls_tls);
	assert_string_equal(ls->ls_cert, "/etc/mcpbroker/tls.crt");
	assert_string_equal(ls->ls_key, "/etc/mcpbroker/tls.key");
	ls = TAILQ_NEXT(ls, ls_entry);
	assert_string_equal(ls->ls_addr, "localhost");
	assert_null(TAILQ_NEXT(ls, ls_entry));

	assert_true(conf->c_auth.au_api_keys);
	assert_true(conf->c_auth.au_jwt);
	jw = &conf->c_auth.au_jwt_conf;
	assert_string_equal(jw->jw_issuer, "https://idp.example.com");
	assert_string_equal(jw->jw_audience, "mcpbroker");
	assert_string_equal(jw->jw_jwks.sr_ref, "/etc/mcpbroker/jwks.json");
	assert_string_equal(jw->jw_roles_claim, "groups");
	assert_string_equal(jw->jw_tenant_claim, "org");
	assert_string_equal(jw->jw_user_claim, "sub");	/* the default */
	assert_int_equal(jw->jw_jwks.sr_kind, SECRET_FILE);
	assert_int_equal(jw->jw_jwks.sr_line, 21);
	assert_null(jw->jw_jwks.sr_value);

	lm = &conf->c_limits;
	assert_int_equal(lm->lm_tool_rounds, 12);
	assert_int_equal(lm->lm_tool_timeout_ms, 45000);
	assert_int_equal(lm->lm_history_messages, 80);
	assert_int_equal(lm->lm_max_body, 16 * 1024 * 1024);
	assert_int_equal(lm->lm_header_timeout_ms, 5000);
	config_free(conf);
}

static void
test_full_providers(void **state)
{
	struct mcpbroker_conf	*conf;
	struct provider_conf	*pv;

	(void)state;
	conf = load_full();
	assert_non_null(pv = config_find_provider(conf, "openai"));
	assert_int_equal(pv->pv_type, PROVIDER_OPENAI);
	assert_string_equal(pv->pv_base_url, "https://api.openai.com/v1");
	assert_int_equal(pv->pv_api_key.sr_kind, SECRET_ENV);
	assert_string_equal(pv->pv_api_key.sr_ref, "OPENAI_API_KEY");
	assert_null(pv->pv_api_key.sr_value);
	assert_non_null(strstr(pv->pv_api_key.sr_file, "full-providers.conf"));
	assert_int_equal(pv->pv_api_key.sr_line, 5);
	assert_true(pv->pv_has_price);
	assert_true(pv->pv_price_input == 0.15);
	assert_true(pv->pv_price_output == 0.60);
	assert_non_null(strstr(pv->pv_file, "full-providers.conf"));
	assert_int_equal(pv->pv_line, 2);

	assert_non_null(pv = config_find_provider(conf, "azure"));
	assert_int_equal(pv->pv_type, PROVIDER_AZURE_OPENAI);
	assert_string_equal(pv->pv_deployment, "gpt-4o");
	assert_string_equal(pv->pv_api_version, "2024-10-21");
	assert_int_equal(pv->pv_api_key.sr_kind, SECRET_FILE);
	assert_string_equal(pv->pv_api_key.sr_ref, "/etc/mcpbroker/azure.key");
	assert_false(pv->pv_has_price);

	assert_non_null(pv = config_find_provider(conf, "compat"));
	assert_int_equal(pv->pv_type, PROVIDER_OPENAI_COMPATIBLE);
	assert_int_equal(pv->pv_api_key.sr_kind, SECRET_NONE);
	assert_int_equal(pv->pv_nallow_addr, 1);
	assert_non_null(pv = config_find_provider(conf, "claude"));
	assert_int_equal(pv->pv_type, PROVIDER_ANTHROPIC);
	assert_true(pv->pv_price_input == 3 && pv->pv_price_output == 15);
	assert_non_null(pv = config_find_provider(conf, "local"));
	assert_int_equal(pv->pv_type, PROVIDER_OLLAMA);
	assert_string_equal(pv->pv_model, "llama3.1");
	assert_non_null(pv = config_find_provider(conf, "gemini"));
	assert_int_equal(pv->pv_type, PROVIDER_GEMINI);
	config_free(conf);
}

static void
test_full_servers(void **state)
{
	struct mcpbroker_conf	*conf;
	struct server_conf	*srv;
	struct header_conf	*hd;
	struct fs_rule		*fs;

	(void)state;
	conf = load_full();
	assert_int_equal(config_server_count(conf), 4);

	assert_non_null(srv = config_find_server(conf, "files"));
	assert_int_equal(srv->srv_argc, 4);
	assert_string_equal(srv->srv_argv[3], "/srv/share");	/* $share */
	assert_null(srv->srv_argv[4]);
	assert_int_equal(srv->srv_isolation, ISOLATION_PER_USER);
	assert_true(srv->srv_network_none);
	fs = TAILQ_FIRST(&srv->srv_fs);
	assert_int_equal(fs->fs_access, FS_READ);
	assert_string_equal(fs->fs_path, "/srv/share");
	fs = TAILQ_NEXT(fs, fs_entry);
	assert_int_equal(fs->fs_access, FS_WRITE);
	assert_string_equal(fs->fs_path, "/srv/share/tmp");
	assert_int_equal(srv->srv_nenv, 2);
	assert_string_equal(srv->srv_env[0], "HOME");
	assert_string_equal(srv->srv_env[1], "LANG");
	assert_null(srv->srv_env[2]);
	assert_int_equal(srv->srv_call_timeout_ms, 60000);
	assert_int_equal(srv->srv_connect_timeout_ms, 500);
	assert_int_equal(srv->srv_idle_timeout_ms, 2 * 3600 * 1000);
	assert_int_equal(srv->srv_max_instances, 8);
	assert_int_equal(srv->srv_pin_policy, PIN_WARN);

	assert_non_null(srv = config_find_server(conf, "jira"));
	assert_string_equal(srv->srv_url, "https://jira.example.com/mcp");
	assert_int_equal(srv->srv_transport, TRANSPORT_STREAMABLE_HTTP);
	assert_int_equal(srv->srv_bearer.sr_kind, SECRET_FILE);
	hd = TAILQ_FIRST(&srv->srv_headers);
	assert_string_equal(hd->hd_name, "X-Tenant");
	assert_string_equal(hd->hd_value, "acme \"quoted\" \\ tab\there");
	assert_string_equal(TAILQ_NEXT(hd, hd_entry)->hd_name,
	    "Accept-Language");
	assert_string_equal(srv->srv_ca_file, "/etc/ssl/jira-ca.pem");
	assert_int_equal(srv->srv_call_timeout_ms, 90000);
	assert_int_equal(srv->srv_nallow_addr, 2);
	assert_string_equal(srv->srv_allow_addr[1], "fd00:ec2::254");
	assert_int_equal(srv->srv_pin_policy, PIN_BLOCK);

	assert_non_null(srv = config_find_server(conf, "legacy"));
	assert_int_equal(srv->srv_transport, TRANSPORT_SSE);
	assert_int_equal(srv->srv_bearer.sr_kind, SECRET_ENV);
	assert_string_equal(srv->srv_bearer.sr_ref, "LEGACY_TOKEN");
	assert_int_equal(srv->srv_isolation, ISOLATION_PER_CONVERSATION);
	assert_int_equal(srv->srv_idle_timeout_ms, 86400000);
	assert_int_equal(srv->srv_connect_timeout_ms, 1500);
	assert_int_equal(srv->srv_pin_policy, PIN_OFF);
	assert_non_null(config_find_server(conf, "shell_2"));
	config_free(conf);
}

static void
test_full_toolsets_budgets(void **state)
{
	struct mcpbroker_conf	*conf;
	struct toolset_conf	*ts;
	struct budget_conf	*bg;

	(void)state;
	conf = load_full();
	ts = TAILQ_FIRST(&conf->c_toolsets);
	assert_string_equal(ts->ts_name, "support");
	assert_int_equal(ts->ts_ntools, 3);
	assert_string_equal(ts->ts_tools[2], "jira.*");
	assert_null(ts->ts_tools[3]);
	ts = TAILQ_NEXT(ts, ts_entry);
	assert_string_equal(ts->ts_name, "everything");
	assert_int_equal(ts->ts_ntools, 2);

	bg = TAILQ_FIRST(&conf->c_budgets);
	assert_int_equal(bg->bg_scope, BUDGET_TENANT);
	assert_string_equal(bg->bg_subject, "acme");
	assert_int_equal(bg->bg_metric, BUDGET_MONTHLY_USD);
	assert_true(bg->bg_limit == 500);
	bg = TAILQ_NEXT(bg, bg_entry);
	assert_int_equal(bg->bg_metric, BUDGET_MONTHLY_TOKENS);
	bg = TAILQ_NEXT(bg, bg_entry);
	assert_int_equal(bg->bg_scope, BUDGET_ROLE);
	assert_int_equal(bg->bg_metric, BUDGET_DAILY_TOKENS);
	assert_true(bg->bg_limit == 200000);
	bg = TAILQ_NEXT(bg, bg_entry);
	assert_int_equal(bg->bg_scope, BUDGET_USER);
	assert_int_equal(bg->bg_metric, BUDGET_DAILY_USD);
	assert_true(bg->bg_limit == 2.5);
	assert_null(bg->bg_tenant);
	/* the same name and metric within one tenant: another budget */
	bg = TAILQ_NEXT(bg, bg_entry);
	assert_string_equal(bg->bg_subject, "alice");
	assert_string_equal(bg->bg_tenant, "acme");
	assert_true(bg->bg_limit == 1);
	config_free(conf);
}

static void
test_full_rules(void **state)
{
	struct mcpbroker_conf	*conf;
	struct policy_rule	*r;
	struct policy_cond	*pc;

	(void)state;
	conf = load_full();
	r = TAILQ_FIRST(&conf->c_rules);
	assert_int_equal(r->pr_action, POLICY_DENY);
	assert_int_equal(r->pr_subject, SUBJECT_ANY);
	assert_null(r->pr_subject_name);
	assert_int_equal(r->pr_ntools, 2);
	assert_string_equal(r->pr_tools[1], "files.move_*");
	assert_null(r->pr_tools[2]);
	assert_true(TAILQ_EMPTY(&r->pr_conds));
	assert_int_equal(r->pr_rate_count, 0);

	r = TAILQ_NEXT(r, pr_entry);
	assert_int_equal(r->pr_action, POLICY_CONFIRM);
	assert_int_equal(r->pr_subject, SUBJECT_ROLE);
	assert_string_equal(r->pr_subject_name, "ops");
	assert_int_equal(r->pr_rate_count, 10);
	assert_int_equal(r->pr_rate_period, 60);

	r = TAILQ_NEXT(r, pr_entry);
	assert_int_equal(r->pr_action, POLICY_ALLOW);
	pc = TAILQ_FIRST(&r->pr_conds);
	assert_string_equal(pc->pc_arg, "path");
	assert_int_equal(pc->pc_op, COND_PREFIX);
	assert_string_equal(pc->pc_value, "/srv/share/public/");
	pc = TAILQ_NEXT(pc, pc_entry);
	assert_string_equal(pc->pc_arg, "path");
	assert_int_equal(pc->pc_op, COND_MAX_LENGTH);
	assert_int_equal(pc->pc_num, 4096);
	assert_null(pc->pc_value);

	r = TAILQ_NEXT(r, pr_entry);
	assert_int_equal(r->pr_subject, SUBJECT_TENANT);
	pc = TAILQ_FIRST(&r->pr_conds);
	assert_int_equal(pc->pc_op, COND_MATCHES);
	assert_string_equal(pc->pc_value, "project = *");
	assert_int_equal(r->pr_rate_period, 3600);

	r = TAILQ_NEXT(r, pr_entry);
	assert_int_equal(r->pr_subject, SUBJECT_USER);
	assert_null(r->pr_subject_tenant);
	assert_int_equal(TAILQ_FIRST(&r->pr_conds)->pc_op, COND_EQUALS);
	assert_int_equal(r->pr_rate_count, 1);
	assert_int_equal(r->pr_rate_period, 1);

	r = TAILQ_NEXT(r, pr_entry);
	assert_int_equal(r->pr_action, POLICY_DENY);
	assert_string_equal(r->pr_subject_name, "bob");
	assert_string_equal(r->pr_subject_tenant, "acme");

	r = TAILQ_NEXT(r, pr_entry);
	assert_string_equal(r->pr_tools[0], "*");
	assert_int_equal(r->pr_rate_period, 86400);
	assert_null(TAILQ_NEXT(r, pr_entry));
	config_free(conf);
}

/* auth { session ... allowed-origin ... }: web sessions */
static void
test_auth_web(void **state)
{
	struct mcpbroker_conf	*conf, *again;
	struct auth_conf	*au;
	char			*one, *two, *errs;

	(void)state;
	conf = must_parse("");
	au = &conf->c_auth;
	assert_int_equal(au->au_session_idle_ms, 30 * 60 * 1000);
	assert_int_equal(au->au_session_lifetime_ms, 12 * 3600 * 1000);
	assert_int_equal(au->au_norigins, 0);
	one = print_conf(conf, NULL);
	assert_null(strstr(one, "auth"));	/* defaults: no block */
	free(one);
	config_free(conf);

	conf = must_parse("auth {\n api-keys\n session lifetime 8h idle 2s\n"
	    " allowed-origin \"HTTPS://Chat.Example.com:443\"\n"
	    " allowed-origin \"http://127.0.0.1:3000\"\n}\n");
	au = &conf->c_auth;
	assert_int_equal(au->au_session_idle_ms, 2000);
	assert_int_equal(au->au_session_lifetime_ms, 8 * 3600 * 1000);
	assert_int_equal(au->au_norigins, 2);
	assert_string_equal(au->au_origins[0], "https://chat.example.com");
	assert_string_equal(au->au_origins[1], "http://127.0.0.1:3000");
	one = print_conf(conf, NULL);
	assert_non_null(strstr(one, "auth {\n\tapi-keys\n\tsession idle 2s "
	    "lifetime 8h\n\tallowed-origin \"https://chat.example.com\"\n"
	    "\tallowed-origin \"http://127.0.0.1:3000\"\n}\n"));
	/* the children's copy is the same */
	again = parse_text(one, &errs);
	assert_string_equal(errs, "");
	assert_non_null(again);
	two = print_conf(again, NULL);
	assert_string_equal(one, two);
	assert_int_equal(again->c_auth.au_session_idle_ms, 2000);
	free(one);
	free(two);
	free(errs);
	config_free(again);
	config_free(conf);

	/* settings alone still make a block, or children would lose them */
	conf = must_parse("auth { session idle 5m }\n");
	assert_false(conf->c_auth.au_api_keys);
	assert_int_equal(conf->c_auth.au_session_lifetime_ms,
	    12 * 3600 * 1000);
	one = print_conf(conf, NULL);
	assert_non_null(strstr(one, "auth {\n\tsession idle 5m lifetime "
	    "12h\n}\n"));
	free(one);
	config_free(conf);

	check_error("auth { session }\n", "t.conf:1: session: expected idle "
	    "or lifetime");
	check_error("auth { session idle 1m idle 2m }\n", "t.conf:1: "
	    "session: duplicate \"idle\"");
	check_error("auth { session idle 0s }\n", "t.conf:1: session idle: "
	    "bad duration \"0s\": must be greater than zero");
	check_error("auth { session lifetime 12 }\n", "t.conf:1: session "
	    "lifetime: bad duration \"12\": missing unit (ms, s, m, h, d)");
	check_error("auth {\n session idle 1m\n session lifetime 1h }\n",
	    "t.conf:3: duplicate \"session\" in auth (first at line 2)");
	check_error("auth { allowed-origin \"https://x/\" }\n", "t.conf:1: "
	    "allowed-origin \"https://x/\": expected http:// or https:// and "
	    "a host with an optional port, nothing more");
	check_error("auth { allowed-origin \"null\" }\n", "t.conf:1: "
	    "allowed-origin \"null\": expected http:// or https:// and a "
	    "host with an optional port, nothing more");
	check_error("auth { allowed-origin \"*\" }\n", "t.conf:1: "
	    "allowed-origin \"*\": expected http:// or https:// and a host "
	    "with an optional port, nothing more");
	check_error("auth { allowed-origin \"http://a\"\n allowed-origin "
	    "\"HTTP://A:80\" }\n", "t.conf:2: allowed-origin \"http://a\": "
	    "listed twice");
	check_error("auth { allowed-origin https://x }\n", "t.conf:1: "
	    "expected a quoted string after \"allowed-origin\", got "
	    "https://x");
}

/* Printing */

static void
test_round_trip(void **state)
{
	struct mcpbroker_conf	*conf, *again;
	char			*one, *two, *errs;

	(void)state;
	conf = load_full();
	one = print_conf(conf, NULL);
	again = parse_text(one, &errs);
	if (again == NULL) {
		print_error("%s\n%s", one, errs);
		fail();
	}
	assert_string_equal(errs, "");
	two = print_conf(again, NULL);
	assert_string_equal(one, two);

	/* canonical forms and secrets as references */
	assert_non_null(strstr(one, "\tcall-timeout 1m\n"));
	assert_non_null(strstr(one, "\tconnect-timeout 1500ms\n"));
	assert_non_null(strstr(one, "\tidle-timeout 1d\n"));
	assert_non_null(strstr(one, "\tpin-policy warn\n"));
	assert_non_null(strstr(one, "\tpin-policy off\n"));
	assert_non_null(strstr(one, "\tpin-policy block\n"));
	assert_non_null(strstr(one, "\tmax-body 16M\n"));
	assert_non_null(strstr(one, "\tprice input 0.15 output 0.6\n"));
	assert_non_null(strstr(one, "budget user \"alice\" daily-usd 2.5\n"));
	assert_non_null(strstr(one, "\tapi-key-env \"OPENAI_API_KEY\"\t"
	    "# secret: (env OPENAI_API_KEY)\n"));
	assert_non_null(strstr(one, "\tbearer-token-file "
	    "\"/etc/mcpbroker/jira.token\"\t# secret: (file "
	    "/etc/mcpbroker/jira.token)\n"));
	assert_non_null(strstr(one, "\theader \"X-Tenant\" "
	    "\"acme \\\"quoted\\\" \\\\ tab\\there\"\n"));
	assert_non_null(strstr(one, "confirm role \"ops\" tool \"shell_2.*\" "
	    "rate 10/minute\n"));
	assert_non_null(strstr(one, "\tjwt issuer \"https://idp.example.com\" "
	    "audience \"mcpbroker\" jwks-file \"/etc/mcpbroker/jwks.json\" "
	    "roles-claim \"groups\" tenant-claim \"org\" user-claim \"sub\"\n"));
	assert_null(strstr(one, "$"));
	assert_null(strstr(one, "include"));
	free(one);
	free(two);
	free(errs);
	config_free(again);
	config_free(conf);
}

/* Escapes survive printing; a comment can never swallow or add a line. */
static void
test_print_hostile(void **state)
{
	struct mcpbroker_conf	*conf, *again;
	char			*one, *two, *errs;

	(void)state;
	conf = must_parse("provider \"p\" { type openai\n"
	    "api-key-file \"/a\\nuser \\\"root\\\"\" model \"#\\t\\\\\" }\n"
	    "allow tool \"*\" where \"a b\" equals \"}\\\"{\"\n");
	one = print_conf(conf, NULL);
	assert_non_null(strstr(one, "\tapi-key-file \"/a\\nuser \\\"root\\\"\"\t"
	    "# secret: (file /a?user \"root\")\n"));
	assert_non_null(strstr(one, "\tmodel \"#\\t\\\\\"\n"));
	assert_non_null(strstr(one, "where \"a b\" equals \"}\\\"{\"\n"));
	again = parse_text(one, &errs);
	assert_string_equal(errs, "");
	assert_non_null(again);
	assert_string_equal(again->c_user, CONF_DEFAULT_USER);
	assert_string_equal(config_find_provider(again,
	    "p")->pv_api_key.sr_ref, "/a\nuser \"root\"");
	two = print_conf(again, NULL);
	assert_string_equal(one, two);
	free(one);
	free(two);
	free(errs);
	config_free(again);
	config_free(conf);
}

static void
test_print_only_server(void **state)
{
	struct mcpbroker_conf	*conf, *worker;
	char			*out, *errs;

	(void)state;
	conf = load_full();
	out = print_conf(conf, "legacy");
	assert_non_null(strstr(out, "user \"_mcpbroker\"\n"));
	assert_non_null(strstr(out, "state-dir "));
	assert_non_null(strstr(out, "control socket "));
	assert_non_null(strstr(out, "limits {\n\ttool-rounds 12\n"));
	assert_non_null(strstr(out, "server \"legacy\" {\n"));
	assert_null(strstr(out, "server \"files\""));
	assert_null(strstr(out, "provider"));
	assert_null(strstr(out, "listen"));
	assert_null(strstr(out, "allow"));
	/* the controller's alone: changing it restarts no worker */
	assert_null(strstr(out, "pin-policy"));
	/* what a worker gets must parse on its own */
	worker = parse_text(out, &errs);
	assert_string_equal(errs, "");
	assert_non_null(worker);
	assert_int_equal(config_server_count(worker), 1);
	assert_int_equal(config_find_server(worker, "legacy")->srv_transport,
	    TRANSPORT_SSE);
	config_free(worker);
	free(errs);
	free(out);
	config_free(conf);
}

static void
test_print_canonical(void **state)
{
	struct mcpbroker_conf	*conf;
	char			*out;

	(void)state;
	conf = must_parse("limits { tool-timeout 120000ms header-timeout 48h "
	    "max-body 1048576 }\n"
	    "server \"s\" { command \"x\" call-timeout 3600s "
	    "connect-timeout 61s idle-timeout 1440m }\n"
	    "limits2 = \"x\"\n");
	out = print_conf(conf, NULL);
	assert_non_null(strstr(out, "\ttool-timeout 2m\n"));
	assert_non_null(strstr(out, "\theader-timeout 2d\n"));
	assert_non_null(strstr(out, "\tmax-body 1M\n"));
	assert_non_null(strstr(out, "\tcall-timeout 1h\n"));
	assert_non_null(strstr(out, "\tconnect-timeout 61s\n"));
	assert_non_null(strstr(out, "\tidle-timeout 1d\n"));
	free(out);
	config_free(conf);

	conf = must_parse("limits { max-body 1536K }\n");
	out = print_conf(conf, NULL);
	assert_non_null(strstr(out, "\tmax-body 1536K\n"));
	free(out);
	config_free(conf);

	conf = must_parse("limits { max-body 1000 }\n");
	out = print_conf(conf, NULL);
	assert_non_null(strstr(out, "\tmax-body 1000\n"));
	free(out);
	config_free(conf);
}

/* Macros and -D */

static void
test_macros(void **state)
{
	struct mcpbroker_conf	*conf;

	(void)state;
	conf = must_parse("who = \"alice\"\nport=8080\nuser $who\n"
	    "listen on 127.0.0.1 port $port\n"
	    "who = \"bob\"\nbudget user $who daily-usd 1\n");
	assert_string_equal(conf->c_user, "alice");
	assert_int_equal(TAILQ_FIRST(&conf->c_listens)->ls_port, 8080);
	assert_string_equal(TAILQ_FIRST(&conf->c_budgets)->bg_subject, "bob");
	config_free(conf);
	conf = must_parse("instance-user \"mcp\"\n");
	assert_string_equal(conf->c_instance_user, "mcp");
	config_free(conf);
	conf = must_parse("user \"x\"\n");
	assert_null(conf->c_instance_user);	/* instances run as user */
	config_free(conf);
	check_error("instance-user \"a\"\ninstance-user \"b\"\n", "t.conf:2: "
	    "duplicate instance-user (first at t.conf:1)");
	check_error("instance-user \"\"\n", "t.conf:1: instance-user: empty "
	    "name");
	check_error("user $nobody\n", "t.conf:1: undefined macro \"$nobody\"");
	check_error("user $\n", "t.conf:1: \"$\" must be followed by a "
	    "macro name");
	check_error("bad-name = \"x\"\n", "t.conf:1: bad macro name "
	    "\"bad-name\": use A-Z a-z 0-9 _");
}

static void
test_defines(void **state)
{
	struct mcpbroker_conf	*conf;
	char			 path[600], *errs;
	char			*defs[] = { "port=9090", NULL };
	char			*bad[] = { "noequals", NULL };

	(void)state;
	data_path("defines.conf", path, sizeof(path));
	conf = parse_path(path, NULL, &errs);
	assert_non_null(conf);
	assert_int_equal(TAILQ_FIRST(&conf->c_listens)->ls_port, 8080);
	config_free(conf);
	free(errs);

	/* -D wins over the file's own definition */
	conf = parse_path(path, defs, &errs);
	assert_non_null(conf);
	assert_string_equal(errs, "");
	assert_int_equal(TAILQ_FIRST(&conf->c_listens)->ls_port, 9090);
	config_free(conf);
	free(errs);

	conf = parse_path(path, bad, &errs);
	assert_null(conf);
	assert_non_null(strstr(errs, ":0: bad -D \"noequals\": expected "
	    "name=value\n"));
	free(errs);
}

static int	load_secrets(struct mcpbroker_conf *, char **);

/*
 * A macro and the word characters or macros right after it are one string:
 * how a unit's -D credentials=%d reaches `api-key-file $credentials/openai`.
 */
static void
test_macro_words(void **state)
{
	struct mcpbroker_conf	*conf;
	struct provider_conf	*pv;
	char			 dir[] = "/tmp/test_config.XXXXXX";
	char			 path[600], def[600], text[1024], *errs;
	char			*defs[] = { def, NULL };
	FILE			*fp;

	(void)state;
	conf = must_parse("d = \"/run/credentials/x\"\nn = \"open\"\n"
	    "state-dir $d/state.d-1:2*\n"
	    "control socket $d/$n$n.sock\n"
	    "provider \"o\" { type openai api-key-file $d/$n.key }\n");
	assert_string_equal(conf->c_state_dir, "/run/credentials/x/state.d-1:2*");
	assert_string_equal(conf->c_control_path,
	    "/run/credentials/x/openopen.sock");
	assert_string_equal(config_find_provider(conf, "o")->pv_api_key.sr_ref,
	    "/run/credentials/x/open.key");
	config_free(conf);
	/* whitespace still separates, and a quoted string is not glued on */
	conf = must_parse("d = \"/x\"\nstate-dir $d\ncontrol socket \"/y\"\n");
	assert_string_equal(conf->c_state_dir, "/x");
	config_free(conf);
	check_error("d = \"/x\"\nstate-dir $d/$nope\n",
	    "t.conf:2: undefined macro \"$nope\"");
	check_error("d = \"/x\"\nstate-dir $d$\n",
	    "t.conf:2: \"$\" must be followed by a macro name");

	/* -D credentials=DIR and a secret file in it, read as the parent does */
	assert_non_null(mkdtemp(dir));
	snprintf(def, sizeof(def), "credentials=%s", dir);
	snprintf(path, sizeof(path), "%s/openai", dir);
	assert_non_null(fp = fopen(path, "w"));
	fputs("sk-from-credentials\n", fp);
	fclose(fp);
	snprintf(path, sizeof(path), "%s/mcpbroker.conf", dir);
	snprintf(text, sizeof(text), "credentials = \"/nonexistent\"\n"
	    "listen on 127.0.0.1 port 8080\n"
	    "provider \"openai\" { type openai model \"m\"\n"
	    "\tapi-key-file $credentials/openai }\n");
	assert_non_null(fp = fopen(path, "w"));
	fputs(text, fp);
	fclose(fp);
	conf = parse_path(path, defs, &errs);
	assert_string_equal(errs, "");
	free(errs);
	assert_non_null(conf);
	pv = config_find_provider(conf, "openai");
	snprintf(text, sizeof(text), "%s/openai", dir);
	assert_string_equal(pv->pv_api_key.sr_ref, text);
	assert_int_equal(load_secrets(conf, &errs), 0);
	assert_string_equal(errs, "");
	free(errs);
	assert_string_equal(pv->pv_api_key.sr_value, "sk-from-credentials");
	config_free(conf);
	unlink(path);
	snprintf(path, sizeof(path), "%s/openai", dir);
	unlink(path);
	rmdir(dir);
}

/* Includes */

static void
test_include_loop(void **state)
{
	char	path[600], want[4096], *errs, dir[600];

	(void)state;
	assert_null(parse_path(data_path("loop-a.conf", path, sizeof(path)),
	    NULL, &errs));
	snprintf(dir, sizeof(dir), "%s/config", data_dir);
	snprintf(want, sizeof(want), "%s/loop-b.conf:2: include loop: "
	    "\"%s/loop-a.conf\" -> \"%s/loop-b.conf\" -> \"%s/loop-a.conf\"\n",
	    dir, dir, dir, dir);
	if (strstr(errs, want) == NULL) {
		print_error("want %s\ngot %s\n", want, errs);
		fail();
	}
	assert_int_equal(count_lines(errs), 1);
	free(errs);
}

static void
test_include_missing(void **state)
{
	char	path[600], want[4096], *errs;

	(void)state;
	assert_null(parse_path(data_path("include-missing.conf", path,
	    sizeof(path)), NULL, &errs));
	snprintf(want, sizeof(want), "%s:3: cannot open \"%s/config/"
	    "does-not-exist.conf\": No such file or directory\n", path,
	    data_dir);
	assert_string_equal(errs, want);
	free(errs);

	assert_null(parse_path("/nonexistent/x.conf", NULL, &errs));
	assert_string_equal(errs, "/nonexistent/x.conf:0: cannot open "
	    "\"/nonexistent/x.conf\": No such file or directory\n");
	free(errs);

	check_error("include \"x.conf\"\n",
	    "t.conf:1: include is not allowed here");
}

/* A chain of 18 files, each including the next: 16 levels are allowed. */
static void
test_include_depth(void **state)
{
	char	 dir[] = "/tmp/test_config.XXXXXX", path[256], *errs;
	FILE	*fp;
	int	 i;

	(void)state;
	assert_non_null(mkdtemp(dir));
	for (i = 0; i < 18; i++) {
		snprintf(path, sizeof(path), "%s/%d.conf", dir, i);
		assert_non_null(fp = fopen(path, "w"));
		if (i < 17)
			fprintf(fp, "include \"%d.conf\"\n", i + 1);
		else
			fprintf(fp, "user \"deep\"\n");
		fclose(fp);
	}
	snprintf(path, sizeof(path), "%s/1.conf", dir);
	{
		struct mcpbroker_conf *conf = parse_path(path, NULL, &errs);

		assert_string_equal(errs, "");
		assert_non_null(conf);
		assert_string_equal(conf->c_user, "deep");
		config_free(conf);
		free(errs);
	}
	snprintf(path, sizeof(path), "%s/0.conf", dir);
	assert_null(parse_path(path, NULL, &errs));
	assert_non_null(strstr(errs, "/16.conf:1: include nested too deeply "
	    "(max 16)\n"));
	free(errs);
	for (i = 0; i < 18; i++) {
		snprintf(path, sizeof(path), "%s/%d.conf", dir, i);
		unlink(path);
	}
	rmdir(dir);
}

/* Errors: each must name the thing and its line */

struct err_case {
	const char	*in;
	const char	*want;
};

static const struct err_case lexical_errors[] = {
	{ "foo\n", "t.conf:1: unknown keyword \"foo\"" },
	{ "\n\nuser \"x", "t.conf:3: unterminated string" },
	{ "user \"x\ny\"\n", "t.conf:1: unterminated string (newline before "
	    "the closing quote)" },
	{ "user \"a\\qb\"\n", "t.conf:1: unknown escape \"\\q\" in string" },
	{ "user \"a\x01\"\n", "t.conf:1: control character 0x01 in string" },
	{ "user foo\n", "t.conf:1: expected a quoted string after \"user\", "
	    "got foo" },
	{ "user\n", "t.conf:1: expected a quoted string after \"user\", got "
	    "end of file" },
	{ "user { }\n", "t.conf:1: expected a quoted string after \"user\", "
	    "got \"{\"" },
	{ "\"x\"\n", "t.conf:1: expected a keyword, got \"x\"" },
	{ "user \"x\" }\n", "t.conf:1: unexpected \"}\"" },
	{ "user \"x\" ; \n", "t.conf:1: unexpected character \";\"" },
	{ "user \"x\" \\ y\n", "t.conf:1: unexpected \"\\\" (only allowed at "
	    "the end of a line)" },
	{ "\xe2\x80\x9cuser\n", "t.conf:1: unexpected non-ASCII character "
	    "(outside quotes)" },
	{ "server \"files\" {\n\tcommand \"x\"\n\tfoo 1\n}\n",
	    "t.conf:3: unknown keyword \"foo\" in server \"files\"" },
	{ "provider \"p\" { type ollama\nserver \"s\" { command \"x\" } }\n",
	    "t.conf:2: unknown keyword \"server\" in provider \"p\" "
	    "(missing \"}\"?)" },
	{ "server \"files\" {\n\tcommand \"x\"\n\n",
	    "t.conf:3: unterminated block: server \"files\" opened at line 1" },
	{ "limits {\n", "t.conf:1: unterminated block: limits opened at "
	    "line 1" },
	{ "server \"s\" command \"x\"\n", "t.conf:1: expected \"{\" after "
	    "server \"s\", got command" },
	{ "x y = 1\n", "t.conf:1: unknown keyword \"x\"" },
	{ NULL, NULL },
};

static const struct err_case value_errors[] = {
	{ "limits { tool-timeout 30 }", "t.conf:1: tool-timeout: bad "
	    "duration \"30\": missing unit (ms, s, m, h, d)" },
	{ "limits { tool-timeout 30x }", "t.conf:1: tool-timeout: bad "
	    "duration \"30x\": unknown unit \"x\" (use ms, s, m, h or d)" },
	{ "limits { tool-timeout 0s }", "t.conf:1: tool-timeout: bad "
	    "duration \"0s\": must be greater than zero" },
	{ "limits { tool-timeout s }", "t.conf:1: tool-timeout: bad "
	    "duration \"s\": expected a number followed by ms, s, m, h or d" },
	{ "limits { tool-timeout 366d }", "t.conf:1: tool-timeout: bad "
	    "duration \"366d\": too large (max 365d)" },
	{ "limits { tool-timeout 99999999999999999999999s }", "t.conf:1: "
	    "tool-timeout: bad duration \"99999999999999999999999s\": too "
	    "large (max 365d)" },
	{ "limits { max-body 16m }", "t.conf:1: max-body: bad size \"16m\": "
	    "unknown unit \"m\" (use K, M or G)" },
	{ "limits { max-body 0K }", "t.conf:1: max-body: bad size \"0K\": "
	    "must be greater than zero" },
	{ "limits { max-body K }", "t.conf:1: max-body: bad size \"K\": "
	    "expected a number optionally followed by K, M or G" },
	{ "limits { max-body 17179869184G }", "t.conf:1: max-body: bad size "
	    "\"17179869184G\": too large" },
	{ "limits { tool-rounds 0 }", "t.conf:1: tool-rounds: bad number "
	    "\"0\": expected 1 to 1000" },
	{ "limits { history-messages 5x }", "t.conf:1: history-messages: "
	    "bad number \"5x\": expected 1 to 100000" },
	{ "limits { tool-rounds 1 tool-rounds 2 }", "t.conf:1: duplicate "
	    "\"tool-rounds\" in limits (first at line 1)" },
	{ "limits { }\nlimits { }\n", "t.conf:2: duplicate limits block "
	    "(first at t.conf:1)" },
	{ "user \"a\"\nuser \"b\"\n", "t.conf:2: duplicate user (first at "
	    "t.conf:1)" },
	{ "user \"\"\n", "t.conf:1: user: empty name" },
	{ "state-dir \"var\"\n", "t.conf:1: state-dir \"var\": must be an "
	    "absolute path" },
	{ "control sock \"/x\"\n", "t.conf:1: expected \"socket\" after "
	    "\"control\", got sock" },
	{ "control socket \"/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "\"\n", "t.conf:1: control socket \"/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\": "
	    "path too long (max 107 bytes)" },
	{ "listen on 1.2.3.4 port 0\n", "t.conf:1: port: bad number \"0\": "
	    "expected 1 to 65535" },
	{ "listen on 1.2.3.4 port 65536\n", "t.conf:1: port: bad number "
	    "\"65536\": expected 1 to 65535" },
	{ "listen on example.com port 80\n", "t.conf:1: listen on "
	    "\"example.com\": expected an IPv4 or IPv6 address or localhost" },
	{ "listen 1.2.3.4 port 80\n", "t.conf:1: expected \"on\" after "
	    "\"listen\", got 1.2.3.4" },
	{ "listen on ::1 port 80\nlisten on 0:0::1 port 80\n", "t.conf:2: "
	    "duplicate listen on ::1 port 80 (first at t.conf:1)" },
	{ "listen on ::1 port 443 tls certificate \"/c\"\n", "t.conf:1: "
	    "listen on ::1 port 443: tls requires certificate and key" },
	{ "budget team \"x\" daily-usd 1\n", "t.conf:1: budget: bad scope "
	    "\"team\": expected tenant, role or user" },
	{ "budget role \"x\" weekly-usd 1\n", "t.conf:1: budget: bad limit "
	    "\"weekly-usd\": expected monthly-usd, daily-usd, daily-tokens or "
	    "monthly-tokens" },
	{ "budget role \"x\" daily-usd -1\n", "t.conf:1: budget: bad number "
	    "\"-1\": expected a non-negative decimal number" },
	{ "budget role \"x\" daily-usd 1.\n", "t.conf:1: budget: bad number "
	    "\"1.\": expected a non-negative decimal number" },
	{ "budget role \"x\" daily-usd 1e5\n", "t.conf:1: budget: bad number "
	    "\"1e5\": expected a non-negative decimal number" },
	{ "budget role \"x\" daily-usd 0.0000000000001\n", "t.conf:1: "
	    "budget: bad number \"0.0000000000001\": at most 12 decimal "
	    "places" },
	{ "budget role \"x\" daily-usd 1\nbudget role \"x\" daily-usd 2\n",
	    "t.conf:2: duplicate budget role \"x\" daily-usd (first at "
	    "t.conf:1)" },
	{ "budget role x daily-usd 1\n", "t.conf:1: expected a quoted string "
	    "after \"role\", got x" },
	/* a tenant no user can be in: the budget or rule would never apply */
	{ "budget user \"a\" tenant \"\" daily-usd 1\n", "t.conf:1: tenant "
	    "\"\": letters, digits and . _ @ -, 64 at most" },
	{ "deny user \"a\" tenant \"b c\" tool \"*\"\n", "t.conf:1: tenant "
	    "\"b c\": letters, digits and . _ @ -, 64 at most" },
	{ NULL, NULL },
};

static const struct err_case block_errors[] = {
	{ "provider \"p\" { type ollama }\nprovider \"p\" { type ollama }\n",
	    "t.conf:2: duplicate provider \"p\" (first defined at t.conf:1)" },
	{ "server \"files\" { command \"a\" }\n"
	    "server \"files\" { command \"b\" }\n",
	    "t.conf:2: duplicate server \"files\" (first defined at "
	    "t.conf:1)" },
	{ "toolset \"t\" { tools \"*\" }\ntoolset \"t\" { tools \"*\" }\n",
	    "t.conf:2: duplicate toolset \"t\" (first defined at t.conf:1)" },
	{ "provider \"p\" { model \"m\" }\n",
	    "t.conf:1: provider \"p\": missing type" },
	{ "provider \"p\" { type nope }\n", "t.conf:1: provider \"p\": "
	    "unknown type \"nope\" (expected openai, azure-openai, "
	    "openai-compatible, anthropic, ollama or gemini)" },
	{ "provider \"p\" {\n type azure-openai api-key-env \"K\"\n"
	    " api-version \"1\" }\n", "t.conf:1: provider \"p\": type "
	    "azure-openai requires deployment" },
	{ "provider \"p\" { type azure-openai api-key-env \"K\" "
	    "deployment \"d\" }\n", "t.conf:1: provider \"p\": type "
	    "azure-openai requires api-version" },
	{ "provider \"p\" { type openai }\n", "t.conf:1: provider \"p\": type "
	    "openai requires api-key-file or api-key-env" },
	{ "provider \"p\" { type gemini }\n", "t.conf:1: provider \"p\": type "
	    "gemini requires api-key-file or api-key-env" },
	{ "provider \"p\" { type ollama base-url \"ftp://x\" }\n",
	    "t.conf:1: base-url \"ftp://x\": must start with http:// or "
	    "https://" },
	{ "provider \"p\" {\n type openai\n api-key \"sk-123\" }\n",
	    "t.conf:3: api-key: secrets are not allowed inline; use "
	    "api-key-file \"PATH\" or api-key-env \"NAME\"" },
	{ "provider \"p\" { type openai api-key-env \"A\" "
	    "api-key-file \"/f\" }\n", "t.conf:1: provider \"p\": use only "
	    "one of api-key-file and api-key-env" },
	{ "provider \"p\" { type openai api-key-env \"1X\" }\n", "t.conf:1: "
	    "api-key-env: bad environment variable name \"1X\"" },
	{ "provider \"p\" { type openai price input 1 }\n", "t.conf:1: price: "
	    "expected input NUMBER output NUMBER, got \"}\"" },
	{ "provider \"a b\" { type ollama }\n", "t.conf:1: bad provider name "
	    "\"a b\": use 1-64 of A-Z a-z 0-9 _ - ." },
	{ "server \"a.b\" { command \"x\" }\n", "t.conf:1: bad server name "
	    "\"a.b\": use 1-32 of A-Z a-z 0-9 _ -" },
	{ "server \"s\" { isolation shared }\n", "t.conf:1: server \"s\": "
	    "needs command or url" },
	{ "server \"s\" {\n command \"x\"\n url \"http://y\" }\n",
	    "t.conf:3: server \"s\": command and url are mutually exclusive" },
	{ "server \"s\" {\n command \"x\"\n transport sse }\n",
	    "t.conf:3: server \"s\": transport is only valid with url" },
	{ "server \"s\" {\n command \"x\"\n bearer-token-env \"T\" }\n",
	    "t.conf:3: server \"s\": bearer-token-env is only valid with url" },
	{ "server \"s\" {\n command \"x\"\n header \"A\" \"b\" }\n",
	    "t.conf:3: server \"s\": header is only valid with url" },
	{ "server \"s\" {\n command \"x\"\n ca-file \"/ca\" }\n",
	    "t.conf:3: server \"s\": ca-file is only valid with url" },
	{ "server \"s\" {\n url \"http://x\"\n network none }\n",
	    "t.conf:3: server \"s\": network is only valid with command" },
	{ "server \"s\" {\n url \"http://x\"\n env \"HOME\" }\n",
	    "t.conf:3: server \"s\": env is only valid with command" },
	{ "server \"s\" {\n url \"http://x\"\n filesystem read \"/x\" }\n",
	    "t.conf:3: server \"s\": filesystem is only valid with command" },
	{ "server \"s\" { url \"http://x\" transport ws }\n", "t.conf:1: "
	    "server \"s\": unknown transport \"ws\" (expected "
	    "streamable-http or sse)" },
	{ "server \"s\" { url \"http://x\" bearer-token \"t\" }\n",
	    "t.conf:1: bearer-token: secrets are not allowed inline; use "
	    "bearer-token-file \"PATH\" or bearer-token-env \"NAME\"" },
	{ "server \"s\" { url \"http://x\" header \"authorization\" \"B x\" }",
	    "t.conf:1: header \"authorization\": secrets are not allowed "
	    "inline; use bearer-token-file \"PATH\" or bearer-token-env "
	    "\"NAME\"" },
	{ "server \"s\" { url \"http://x\" header \"X\" \"a\\nb\" }",
	    "t.conf:1: header \"X\": value contains a control character" },
	{ "server \"s\" { url \"http://x\" header \"X Y\" \"a\" }",
	    "t.conf:1: header \"X Y\": not a valid HTTP header name" },
	{ "server \"s\" { command \"x\" isolation global }\n", "t.conf:1: "
	    "server \"s\": unknown isolation \"global\" (expected shared, "
	    "per-user or per-conversation)" },
	{ "server \"s\" { command \"x\" pin-policy strict }\n", "t.conf:1: "
	    "server \"s\": unknown pin-policy \"strict\" (expected block, "
	    "warn or off)" },
	{ "server \"s\" { command \"x\" pin-policy off pin-policy warn }\n",
	    "t.conf:1: duplicate \"pin-policy\" in server \"s\" (first at "
	    "line 1)" },
	{ "server \"s\" { command \"x\" network host }\n", "t.conf:1: "
	    "server \"s\": network \"host\": expected none" },
	{ "server \"s\" { command \"x\" filesystem exec \"/x\" }\n",
	    "t.conf:1: server \"s\": filesystem \"exec\": expected read or "
	    "write" },
	{ "server \"s\" { command \"x\" filesystem read \"x\" }\n",
	    "t.conf:1: filesystem \"x\": must be an absolute path" },
	{ "server \"s\" { command \"x\" max-instances 2000 }\n", "t.conf:1: "
	    "max-instances: bad number \"2000\": expected 1 to 1024" },
	{ "server \"s\" { command x }\n", "t.conf:1: expected a quoted "
	    "string after \"command\", got x" },
	{ "toolset \"t\" { }\n", "t.conf:1: toolset \"t\": no tools" },
	{ "auth {\n jwt issuer \"i\" audience \"a\" }\n",
	    "t.conf:2: jwt: missing jwks-file" },
	{ "auth { jwt audience \"a\" jwks-file \"/j\" }\n",
	    "t.conf:1: jwt: missing issuer" },
	{ "auth { jwt issuer \"\" audience \"a\" jwks-file \"/j\" }\n",
	    "t.conf:1: jwt: issuer is empty" },
	{ "auth { jwt issuer \"i\" audience \"a\" jwks-file \"/j\"\n"
	    " tenant-claim \"\" }\n",
	    "t.conf:2: jwt: bad tenant-claim \"\": use 1-64 printable "
	    "characters" },
	{ "auth { jwt issuer \"i\" audience \"a\" jwks-file \"/j\" "
	    "user-claim \"a\\nb\" }\n",
	    "t.conf:1: jwt: bad user-claim \"a\\nb\": use 1-64 printable "
	    "characters" },
	{ "auth { jwt issuer \"i\" audience \"a\" jwks-file \"/j\" "
	    "user-claim \"u\" user-claim \"v\" }\n",
	    "t.conf:1: jwt: duplicate \"user-claim\"" },
	{ "auth { }\nauth { }\n", "t.conf:2: duplicate auth block (first at "
	    "t.conf:1)" },
	{ NULL, NULL },
};

static const struct err_case reference_errors[] = {
	{ "server \"files\" { command \"x\" }\n"
	    "toolset \"support\" {\n tools \"files.*\"\n \"jira.search\" }\n",
	    "t.conf:4: toolset \"support\": unknown server \"jira\"" },
	{ "allow role \"r\" tool \"files.*\"\n", "t.conf:1: allow rule, tool "
	    "\"files.*\": unknown server \"files\"" },
	{ "deny tool \"*\" \"nope.x\"\n", "t.conf:1: deny rule, tool "
	    "\"nope.x\": unknown server \"nope\"" },
	{ "deny tool \"files\"\n", "t.conf:1: deny rule, tool \"files\": "
	    "tool \"files\" is not SERVER.TOOL" },
	{ "deny tool \".x\"\n", "t.conf:1: deny rule, tool \".x\": tool "
	    "\".x\" has no server part" },
	{ "allow tool\n", "t.conf:1: expected a quoted string after \"tool\", "
	    "got end of file" },
	{ "allow role \"r\" tools \"*\"\n", "t.conf:1: expected \"tool\", "
	    "\"resource\" or \"prompt\" after \"role\", got tools" },
	{ "allow tool \"*\" where path starts \"/x\"\n", "t.conf:1: where "
	    "path: bad condition \"starts\": expected prefix, equals, matches "
	    "or max-length" },
	{ "allow tool \"*\" where path prefix /x\n", "t.conf:1: expected a "
	    "quoted string after \"prefix\", got /x" },
	{ "allow tool \"*\" rate 5/week\n", "t.conf:1: rate \"5/week\": "
	    "expected N/second, N/minute, N/hour or N/day" },
	{ "allow tool \"*\" rate 0/day\n", "t.conf:1: rate: bad number "
	    "\"0\": expected 1 to 1000000" },
	{ "allow tool \"*\" rate 1/day rate 2/day\n", "t.conf:1: rule: "
	    "duplicate rate" },
	{ NULL, NULL },
};

static void
run_cases(const struct err_case *c)
{
	for (; c->in != NULL; c++)
		check_error(c->in, c->want);
}

static void
test_lexical_errors(void **state)
{
	(void)state;
	run_cases(lexical_errors);
}

static void
test_value_errors(void **state)
{
	(void)state;
	run_cases(value_errors);
}

static void
test_block_errors(void **state)
{
	(void)state;
	run_cases(block_errors);
}

static void
test_reference_errors(void **state)
{
	(void)state;
	run_cases(reference_errors);
}

/* retention and store-tool-results: values, printing, mistakes */
static const struct err_case storage_errors[] = {
	{ "retention 0d\n", "t.conf:1: retention: bad duration \"0d\": "
	    "must be greater than zero" },
	{ "retention soon\n", "t.conf:1: retention: bad duration \"soon\": "
	    "expected a number followed by ms, s, m, h or d" },
	{ "retention 90d\nretention forever\n", "t.conf:2: duplicate "
	    "retention (first at t.conf:1)" },
	{ "retention tenant acme 1d\n", "t.conf:1: expected a quoted string "
	    "after \"tenant\", got acme" },
	{ "retention tenant \"a\" 1d\nretention tenant \"a\" 2d\n",
	    "t.conf:2: duplicate retention tenant \"a\" (first at t.conf:1)" },
	{ "store-tool-results maybe\n", "t.conf:1: store-tool-results: "
	    "expected yes or no, got \"maybe\"" },
	{ "store-tool-results no\nstore-tool-results yes\n", "t.conf:2: "
	    "duplicate store-tool-results (first at t.conf:1)" },
	{ NULL, NULL },
};

/* What /mcp/TOOLSET needs: naming styles and resource and prompt rules. */
static const struct err_case mcp_errors[] = {
	{ "toolset \"t\" { tools \"*\" names short }\n", "t.conf:1: toolset "
	    "\"t\": names \"short\": expected dotted, underscore or bare" },
	{ "toolset \"t\" { tools \"*\" names bare names dotted }\n",
	    "t.conf:1: duplicate \"names\" in toolset \"t\" (first at line 1)" },
	{ "allow resource \"files\"\nserver \"files\" { command \"x\" }\n",
	    "t.conf:1: allow rule, resource \"files\": resource \"files\" is not "
	    "SERVER.URI" },
	{ "deny prompt \"nope.*\"\n", "t.conf:1: deny rule, prompt \"nope.*\": "
	    "unknown server \"nope\"" },
	{ "allow resource \"*\" where uri prefix \"/x\"\n", "t.conf:1: allow "
	    "rule: a resource has no arguments to put a where on; write the URI "
	    "in the glob" },
	{ "allow role \"r\" \"*\"\n", "t.conf:1: expected \"tool\", "
	    "\"resource\" or \"prompt\" after \"role\", got \"*\"" },
	{ "server \"a\" { command \"x\" }\nserver \"b\" { command \"x\" }\n"
	    "toolset \"t\" {\n tools \"a.*\" \"b.x\"\n names bare\n}\n",
	    "t.conf:3: toolset \"t\": servers \"a\" and \"b\" may offer tools "
	    "of the same name with names bare; give the toolset one of them, or "
	    "names dotted" },
	{ "server \"a\" { command \"x\" }\nserver \"a__b\" { command \"x\" }\n"
	    "toolset \"t\" { tools \"*.x\" names underscore }\n",
	    "t.conf:3: toolset \"t\": servers \"a\" and \"a__b\" may offer "
	    "tools of the same name with names underscore; give the toolset one "
	    "of them, or names dotted" },
	{ "server \"a\" { command \"x\" }\nserver \"b\" { command \"x\" }\n"
	    "toolset \"t\" { tools \"*write*\" names bare }\n",
	    "t.conf:3: toolset \"t\": servers \"a\" and \"b\" may offer tools "
	    "of the same name with names bare; give the toolset one of them, or "
	    "names dotted" },
	{ NULL, NULL },
};

static void
test_mcp_settings(void **state)
{
	struct mcpbroker_conf	*conf, *again;
	struct toolset_conf	*ts;
	struct policy_rule	*r;
	char			*one, *two, *errs;

	(void)state;
	conf = must_parse("server \"files\" { command \"x\" }\n"
	    "server \"files2\" { command \"x\" }\n"
	    "toolset \"plain\" { tools \"files.*\" }\n"
	    "toolset \"ide\" { tools \"files.*\" names bare }\n"
	    "toolset \"llm\" { tools \"files.*\" \"files2.*\" names "
	    "underscore }\n"
	    "deny resource \"files.file:///srv/secret/*\"\n"
	    "allow role \"r\" resource \"files.*\" rate 5/minute\n"
	    "allow prompt \"files.*\" where style equals \"short\"\n"
	    "allow tool \"*\"\n");
	ts = config_find_toolset(conf, "plain");
	assert_int_equal(ts->ts_names, NAMES_DOTTED);
	assert_int_equal(config_find_toolset(conf, "ide")->ts_names,
	    NAMES_BARE);
	/* files__ starts no files2__ */
	assert_int_equal(config_find_toolset(conf, "llm")->ts_names,
	    NAMES_UNDERSCORE);
	r = TAILQ_FIRST(&conf->c_rules);
	assert_int_equal(r->pr_kind, POLICY_RESOURCE);
	assert_string_equal(r->pr_tools[0], "files.file:///srv/secret/*");
	r = TAILQ_NEXT(r, pr_entry);
	assert_int_equal(r->pr_kind, POLICY_RESOURCE);
	assert_int_equal(r->pr_rate_count, 5);
	r = TAILQ_NEXT(r, pr_entry);
	assert_int_equal(r->pr_kind, POLICY_PROMPT);
	assert_false(TAILQ_EMPTY(&r->pr_conds));
	assert_int_equal(TAILQ_NEXT(r, pr_entry)->pr_kind, POLICY_TOOL);
	one = print_conf(conf, NULL);
	assert_non_null(strstr(one, "toolset \"plain\" {\n\ttools "
	    "\"files.*\"\n\tnames dotted\n}\n"));
	assert_non_null(strstr(one, "\tnames bare\n"));
	assert_non_null(strstr(one, "\tnames underscore\n"));
	assert_non_null(strstr(one, "deny resource "
	    "\"files.file:///srv/secret/*\"\n"));
	assert_non_null(strstr(one, "allow role \"r\" resource \"files.*\" "
	    "rate 5/minute\n"));
	assert_non_null(strstr(one, "allow prompt \"files.*\" where \"style\" "
	    "equals \"short\"\n"));
	again = parse_text(one, &errs);
	assert_string_equal(errs, "");
	two = print_conf(again, NULL);
	assert_string_equal(one, two);
	/* the names a toolset gives, and which servers it names */
	{
		char p[64];

		toolset_prefix(ts, "files", p, sizeof(p));
		assert_string_equal(p, "files.");
		toolset_prefix(config_find_toolset(conf, "llm"), "files", p,
		    sizeof(p));
		assert_string_equal(p, "files__");
		toolset_prefix(config_find_toolset(conf, "ide"), "files", p,
		    sizeof(p));
		assert_string_equal(p, "");
	}
	assert_true(toolset_has_server(ts, "files"));
	assert_false(toolset_has_server(ts, "files2"));
	free(one);
	free(two);
	free(errs);
	config_free(again);
	config_free(conf);
	run_cases(mcp_errors);
}

static void
test_log_format(void **state)
{
	struct mcpbroker_conf	*conf;
	char			*one;

	(void)state;
	conf = must_parse("");
	assert_false(conf->c_log_json);
	one = print_conf(conf, "nothing");
	assert_non_null(strstr(one, "\nlog-format text\n"));
	free(one);
	config_free(conf);
	conf = must_parse("log-format json\n");
	assert_true(conf->c_log_json);
	one = print_conf(conf, "nothing");	/* workers too */
	assert_non_null(strstr(one, "\nlog-format json\n"));
	free(one);
	config_free(conf);
	check_error("log-format xml\n", "t.conf:1: log-format: expected text "
	    "or json, got \"xml\"");
	check_error("log-format json log-format text\n", "t.conf:1: duplicate "
	    "log-format (first at t.conf:1)");
}

static void
test_storage_settings(void **state)
{
	struct mcpbroker_conf	*conf;
	char			*one;

	(void)state;
	/* Defaults: kept forever, tool results as a summary. */
	conf = must_parse("");
	assert_int_equal(conf->c_retention_ms, 0);
	assert_true(TAILQ_EMPTY(&conf->c_retentions));
	assert_false(conf->c_store_tool_results);
	one = print_conf(conf, NULL);
	assert_non_null(strstr(one, "\nstore-tool-results no\nretention "
	    "forever\n"));
	free(one);
	config_free(conf);

	conf = must_parse("retention 90d retention tenant \"acme\" 720h\n"
	    "retention tenant \"archive\" forever store-tool-results yes\n");
	assert_int_equal(conf->c_retention_ms, 90ULL * 86400000);
	assert_int_equal(config_retention(conf, "acme"), 30ULL * 86400000);
	assert_int_equal(config_retention(conf, "archive"), 0);
	assert_int_equal(config_retention(conf, "other"), 90ULL * 86400000);
	assert_true(conf->c_store_tool_results);
	one = print_conf(conf, NULL);
	assert_non_null(strstr(one, "\nretention 90d\nretention tenant "
	    "\"acme\" 30d\nretention tenant \"archive\" forever\n"));
	assert_non_null(strstr(one, "\nstore-tool-results yes\n"));
	free(one);
	/* Workers do not get them: changing one restarts no worker. */
	one = print_conf(conf, "nothing");
	assert_null(strstr(one, "retention"));
	assert_null(strstr(one, "store-tool-results"));
	free(one);
	config_free(conf);
	run_cases(storage_errors);
}

static void
test_long_tokens(void **state)
{
	char	*text;

	(void)state;
	assert_non_null(text = malloc(5000 + 32));
	memcpy(text, "user \"", 6);
	memset(text + 6, 'a', 5000);
	memcpy(text + 5006, "\"\n", 3);
	check_error(text, "t.conf:1: string too long (max 4096 bytes)");
	memset(text, 'w', 5000);
	text[5000] = '\0';
	check_error(text, "t.conf:1: word too long (max 4096 bytes)");
	free(text);
}

/* Several errors in one run, reported in order; no error is lost. */
static void
test_keeps_going(void **state)
{
	char	*errs;

	(void)state;
	assert_null(parse_text("user foo\n"
	    "server \"s\" {\n command \"x\"\n bogus 1 2 3\n"
	    " call-timeout 5\n}\n"
	    "listen on 127.0.0.1 port 99999\n"
	    "allow tool \"*\"\n"
	    "toolset \"t\" { tools \"missing.*\" }\n", &errs));
	assert_string_equal(errs,
	    "t.conf:1: expected a quoted string after \"user\", got foo\n"
	    "t.conf:4: unknown keyword \"bogus\" in server \"s\"\n"
	    "t.conf:5: call-timeout: bad duration \"5\": missing unit (ms, s, "
	    "m, h, d)\n"
	    "t.conf:7: port: bad number \"99999\": expected 1 to 65535\n"
	    "t.conf:9: toolset \"t\": unknown server \"missing\"\n");
	free(errs);
}

static void
test_error_cap(void **state)
{
	char	*text, *errs;
	size_t	 i;

	(void)state;
	assert_non_null(text = malloc(200 * 8 + 1));
	for (i = 0; i < 200; i++)
		memcpy(text + i * 8, "bogus;\n\n", 8);
	text[200 * 8] = '\0';
	assert_null(parse_text(text, &errs));
	assert_int_equal(count_lines(errs), 51);
	assert_non_null(strstr(errs, "too many errors, giving up\n"));
	free(errs);
	free(text);
}

/* Garbage must never crash, hang or leak (run under ASan/valgrind). */
static void
test_garbage(void **state)
{
	static const char *const vocab[] = { "server", "provider", "toolset",
	    "{", "}", "\"s\"", "command", "url", "\"http://x\"", "tools",
	    "\"s.*\"", "allow", "tool", "where", "rate", "1/day", "limits",
	    "max-body", "1M", "listen", "on", "::1", "port", "80", "tls",
	    "x", "=", "$x", "\"", "\\\n", "#", "\n", "include", "auth",
	    "jwt", "budget", "user", "role", "price", "input", "30s", "\\",
	    "api-key", "header", "\"A\"", "env", "filesystem", "read" };
	struct mcpbroker_conf	*conf;
	char			 buf[512], *errs;
	unsigned int		 seed = 12345, i, j, n;
	size_t			 len;

	(void)state;
	for (i = 0; i < 3000; i++) {
		len = 0;
		n = (unsigned int)rand_r(&seed) % 60;
		for (j = 0; j < n; j++) {
			const char *w;

			if (i % 3 == 0) {
				buf[len++] = (char)(rand_r(&seed) & 0xff);
				continue;
			}
			w = vocab[(unsigned int)rand_r(&seed) %
			    (sizeof(vocab) / sizeof(vocab[0]))];
			if (len + strlen(w) + 2 >= sizeof(buf))
				break;
			memcpy(buf + len, w, strlen(w));
			len += strlen(w);
			buf[len++] = ' ';
		}
		{
			FILE	*fp;
			size_t	 elen;

			assert_non_null(fp = open_memstream(&errs, &elen));
			conf = config_parse_buffer("g.conf", buf, len, fp);
			fclose(fp);
		}
		assert_true(count_lines(errs) <= 51);
		config_free(conf);
		free(errs);
	}
}

/* Every prefix of a valid printed configuration parses or fails cleanly. */
static void
test_truncated(void **state)
{
	struct mcpbroker_conf	*conf, *part;
	char			*text, *errs;
	size_t			 len, i, elen;
	FILE			*fp;

	(void)state;
	conf = load_full();
	text = print_conf(conf, NULL);
	len = strlen(text);
	for (i = 0; i < len; i += 7) {
		assert_non_null(fp = open_memstream(&errs, &elen));
		part = config_parse_buffer("p.conf", text, i, fp);
		fclose(fp);
		assert_true(part != NULL || *errs != '\0');
		config_free(part);
		free(errs);
	}
	free(text);
	config_free(conf);
}

/* Secrets */

static void
write_file(const char *path, const char *data, size_t len)
{
	FILE	*fp;

	assert_non_null(fp = fopen(path, "w"));
	assert_int_equal(fwrite(data, 1, len, fp), len);
	fclose(fp);
}

static int
load_secrets(struct mcpbroker_conf *conf, char **errs)
{
	size_t	 len;
	FILE	*fp;
	int	 rv;

	assert_non_null(fp = open_memstream(errs, &len));
	rv = config_load_secrets(conf, fp);
	fclose(fp);
	return rv;
}

static void
test_secrets(void **state)
{
	struct mcpbroker_conf	*conf;
	char			 dir[] = "/tmp/test_config.XXXXXX";
	char			 key[256], tok[256], text[1024], *errs, *out;
	struct provider_conf	*pv;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(key, sizeof(key), "%s/key", dir);
	snprintf(tok, sizeof(tok), "%s/token", dir);
	write_file(key, "sk-file-secret\n", 15);
	write_file(tok, "tok\r\n", 5);
	setenv("MCPB_TEST_KEY", "sk-env-secret", 1);
	snprintf(text, sizeof(text),
	    "provider \"a\" { type openai api-key-file \"%s\" }\n"
	    "provider \"b\" { type openai api-key-env \"MCPB_TEST_KEY\" }\n"
	    "provider \"c\" { type ollama }\n"
	    "server \"s\" { url \"https://x\" bearer-token-file \"%s\" }\n",
	    key, tok);
	conf = must_parse(text);
	assert_int_equal(load_secrets(conf, &errs), 0);
	assert_string_equal(errs, "");
	free(errs);
	pv = config_find_provider(conf, "a");
	assert_string_equal(pv->pv_api_key.sr_value, "sk-file-secret");
	pv = config_find_provider(conf, "b");
	assert_string_equal(pv->pv_api_key.sr_value, "sk-env-secret");
	assert_null(config_find_provider(conf, "c")->pv_api_key.sr_value);
	assert_string_equal(config_find_server(conf, "s")->srv_bearer.sr_value,
	    "tok");
	/* printing never shows a value, only the reference */
	out = print_conf(conf, NULL);
	assert_null(strstr(out, "sk-file-secret"));
	assert_null(strstr(out, "sk-env-secret"));
	assert_null(strstr(out, "\"tok\""));
	snprintf(text, sizeof(text), "\tapi-key-file \"%s\"\t# secret: "
	    "(file %s)\n", key, key);
	assert_non_null(strstr(out, text));
	free(out);
	/* loading twice replaces, without leaking */
	assert_int_equal(load_secrets(conf, &errs), 0);
	free(errs);
	config_free(conf);

	/* failures: each reported, and the value never printed */
	write_file(key, "", 0);
	snprintf(text, sizeof(text),
	    "provider \"a\" { type openai api-key-file \"/nonexistent/k\" }\n"
	    "provider \"b\" { type openai api-key-env \"MCPB_TEST_UNSET\" }\n"
	    "provider \"c\" { type openai api-key-file \"%s\" }\n"
	    "server \"s\" { url \"https://x\" bearer-token-env "
	    "\"MCPB_TEST_BAD\" }\n"
	    "server \"t\" { url \"https://x\" bearer-token-file \"%s\" }\n",
	    key, dir);
	unsetenv("MCPB_TEST_UNSET");
	setenv("MCPB_TEST_BAD", "evil\r\nX-Injected: 1", 1);
	conf = must_parse(text);
	assert_int_equal(load_secrets(conf, &errs), -1);
	snprintf(text, sizeof(text),
	    "t.conf:1: api-key-file \"/nonexistent/k\": No such file or "
	    "directory\n"
	    "t.conf:2: api-key-env \"MCPB_TEST_UNSET\" is not set\n"
	    "t.conf:3: api-key-file \"%s\": is empty\n"
	    "t.conf:4: bearer-token-env \"MCPB_TEST_BAD\": contains a control "
	    "character\n"
	    "t.conf:5: bearer-token-file \"%s\": not a regular file\n",
	    key, dir);
	assert_string_equal(errs, text);
	assert_null(strstr(errs, "evil"));
	free(errs);
	config_free(conf);

	/* 64 KiB is the cap, after the line ending is stripped */
	{
		char	*big = malloc(65536 + 2);

		assert_non_null(big);
		memset(big, 'k', 65536);
		big[65536] = '\n';
		write_file(key, big, 65537);
		snprintf(text, sizeof(text), "provider \"a\" { type openai "
		    "api-key-file \"%s\" }\n", key);
		conf = must_parse(text);
		assert_int_equal(load_secrets(conf, &errs), 0);
		assert_int_equal(strlen(config_find_provider(conf,
		    "a")->pv_api_key.sr_value), 65536);
		free(errs);
		config_free(conf);
		big[65536] = 'k';
		write_file(key, big, 65537);
		conf = must_parse(text);
		assert_int_equal(load_secrets(conf, &errs), -1);
		snprintf(text, sizeof(text), "t.conf:1: api-key-file \"%s\": "
		    "larger than 64 KiB\n", key);
		assert_string_equal(errs, text);
		free(errs);
		config_free(conf);
		free(big);
	}
	unsetenv("MCPB_TEST_KEY");
	unsetenv("MCPB_TEST_BAD");
	unlink(key);
	unlink(tok);
	rmdir(dir);
}

/* The JWKS is read by the parent and checked as a key set. */
static void
test_jwks_file(void **state)
{
	static const char *const bad[][2] = {
		{ "{\"keys\": [", "not a JSON object" },
		{ "{\"keys\": []}", "no usable key (\"oct\" for HS256, "
		    "\"RSA\" for RS256, \"EC\" P-256 for ES256)" },
		{ "{\"keys\": [{\"kty\": \"oct\", \"k\": \"AAAA\"}]}",
		    "keys[0]: an HS256 key needs 32 to 1024 bytes, not 3" },
		{ "[]", "not a JSON object" },
	};
	struct mcpbroker_conf	*conf;
	char			 dir[] = "/tmp/test_config.XXXXXX";
	char			 path[256], text[1024], want[1024], *errs;
	char			*out, *big;
	const char		*good = "{\"keys\": [{\"kty\": \"oct\", \"kid\": "
				    "\"h\",\n \"k\": \"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
				    "AAAAAAA\"}]}\n";
	size_t			 i;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/jwks.json", dir);
	snprintf(text, sizeof(text), "auth {\n jwt issuer \"i\" audience \"a\"\n"
	    " jwks-file \"%s\" }\n", path);
	write_file(path, good, strlen(good));
	conf = must_parse(text);
	assert_int_equal(load_secrets(conf, &errs), 0);
	assert_string_equal(errs, "");
	free(errs);
	/* the text as it is, line endings and all: it is JSON, not a header */
	assert_string_equal(conf->c_auth.au_jwt_conf.jw_jwks.sr_value, good);
	out = print_conf(conf, NULL);
	assert_null(strstr(out, "AAAAAAAA"));
	free(out);
	config_free(conf);

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(path, bad[i][0], strlen(bad[i][0]));
		conf = must_parse(text);
		assert_int_equal(load_secrets(conf, &errs), -1);
		snprintf(want, sizeof(want), "t.conf:3: jwks-file \"%s\": %s\n",
		    path, bad[i][1]);
		assert_string_equal(errs, want);
		assert_null(conf->c_auth.au_jwt_conf.jw_jwks.sr_value);
		free(errs);
		config_free(conf);
	}

	/* 1 MiB is the cap */
	assert_non_null(big = malloc(JWKS_MAX + 2));
	memset(big, ' ', JWKS_MAX + 2);
	write_file(path, big, JWKS_MAX + 2);
	free(big);
	conf = must_parse(text);
	assert_int_equal(load_secrets(conf, &errs), -1);
	snprintf(want, sizeof(want), "t.conf:3: jwks-file \"%s\": larger than "
	    "1 MiB\n", path);
	assert_string_equal(errs, want);
	free(errs);
	config_free(conf);

	unlink(path);
	conf = must_parse(text);
	assert_int_equal(load_secrets(conf, &errs), -1);
	snprintf(want, sizeof(want), "t.conf:3: jwks-file \"%s\": No such "
	    "file or directory\n", path);
	assert_string_equal(errs, want);
	free(errs);
	config_free(conf);
	rmdir(dir);
}

/* audit { mask ... signing-key-file ... }: defaults, lines, printing */
static void
test_audit_block(void **state)
{
	struct mcpbroker_conf	*conf, *again;
	struct audit_conf	*ac;
	char			*one, *two, *errs;

	(void)state;
	/* Without a block, credentials' usual names are masked. */
	conf = must_parse("");
	ac = &conf->c_audit;
	assert_false(ac->ac_mask_set);
	assert_true(ac->ac_nmask > 5);
	assert_string_equal(ac->ac_mask[0], "*password*");
	assert_int_equal(ac->ac_signing_key.sr_kind, SECRET_NONE);
	one = print_conf(conf, NULL);
	assert_null(strstr(one, "audit"));	/* defaults: no block */
	free(one);
	config_free(conf);

	/* The first mask line replaces the defaults; later ones add. */
	conf = must_parse("audit {\n mask \"pin\" \"*Token*\"\n"
	    " mask \"otp\"\n signing-key-file \"/etc/mcpbroker/audit.key\"\n"
	    "}\n");
	ac = &conf->c_audit;
	assert_true(ac->ac_mask_set);
	assert_int_equal(ac->ac_nmask, 3);
	assert_string_equal(ac->ac_mask[1], "*Token*");
	assert_string_equal(ac->ac_mask[2], "otp");
	assert_int_equal(ac->ac_signing_key.sr_kind, SECRET_FILE);
	assert_string_equal(ac->ac_signing_key.sr_ref,
	    "/etc/mcpbroker/audit.key");
	assert_int_equal(ac->ac_signing_key.sr_line, 4);
	one = print_conf(conf, NULL);
	assert_non_null(strstr(one, "audit {\n\tmask \"pin\" \"*Token*\" "
	    "\"otp\"\n\tsigning-key-file \"/etc/mcpbroker/audit.key\"\t# "
	    "secret: (file /etc/mcpbroker/audit.key)\n}\n"));
	/* a worker gets no audit block: only the controller records */
	two = print_conf(conf, "nonexistent");
	assert_null(strstr(two, "audit"));
	free(two);
	again = parse_text(one, &errs);
	assert_string_equal(errs, "");
	two = print_conf(again, NULL);
	assert_string_equal(one, two);
	free(one);
	free(two);
	free(errs);
	config_free(again);
	config_free(conf);

	/* mask none: everything recorded as the model sent it */
	conf = must_parse("audit { mask none }\n");
	assert_true(conf->c_audit.ac_mask_set);
	assert_int_equal(conf->c_audit.ac_nmask, 0);
	one = print_conf(conf, NULL);
	assert_non_null(strstr(one, "audit {\n\tmask none\n}\n"));
	again = parse_text(one, &errs);
	assert_string_equal(errs, "");
	assert_int_equal(again->c_audit.ac_nmask, 0);
	free(one);
	free(errs);
	config_free(again);
	config_free(conf);

	check_error("audit { mask none\n mask \"x\" }\n", "t.conf:2: mask: "
	    "cannot follow mask none");
	check_error("audit { mask \"x\"\n mask none }\n", "t.conf:2: mask "
	    "none: cannot be combined with other mask lines");
	check_error("audit { mask \"\" }\n", "t.conf:1: mask \"\": expected "
	    "1-128 printable characters");
	check_error("audit { mask }\n", "t.conf:1: expected a quoted string "
	    "after \"mask\", got \"}\"");
	check_error("audit { signing-key-file \"a\"\n signing-key-file \"b\" "
	    "}\n", "t.conf:2: duplicate \"signing-key-file\" in audit (first "
	    "at line 1)");
	check_error("audit { }\naudit { }\n", "t.conf:2: duplicate audit "
	    "block (first at t.conf:1)");
	check_error("audit { masks \"x\" }\n", "t.conf:1: unknown keyword "
	    "\"masks\" in audit");
}

static void
write_key(const char *path, const char *type)
{
	EVP_PKEY	*k;
	FILE		*fp;

	if (strcmp(type, "ED25519") == 0)
		k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	else
		k = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	assert_non_null(k);
	assert_non_null(fp = fopen(path, "w"));
	assert_int_equal(PEM_write_PrivateKey(fp, k, NULL, NULL, 0, NULL,
	    NULL), 1);
	fclose(fp);
	EVP_PKEY_free(k);
}

/* The parent reads the key, PEM lines and all, and checks what it is. */
static void
test_signing_key_file(void **state)
{
	struct mcpbroker_conf	*conf;
	char			 dir[] = "/tmp/test_config.XXXXXX";
	char			 path[256], text[512], want[1024], *errs, *out;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/audit.key", dir);
	snprintf(text, sizeof(text), "audit {\n signing-key-file \"%s\"\n}\n",
	    path);
	write_key(path, "ED25519");
	conf = must_parse(text);
	assert_int_equal(load_secrets(conf, &errs), 0);
	assert_string_equal(errs, "");
	free(errs);
	assert_non_null(strstr(conf->c_audit.ac_signing_key.sr_value,
	    "-----BEGIN PRIVATE KEY-----\n"));
	out = print_conf(conf, NULL);
	assert_null(strstr(out, "BEGIN"));
	free(out);
	config_free(conf);

	/* Another kind of key, or no key at all, stops the daemon. */
	write_key(path, "EC");
	conf = must_parse(text);
	assert_int_equal(load_secrets(conf, &errs), -1);
	snprintf(want, sizeof(want), "t.conf:2: signing-key-file \"%s\": not "
	    "an unencrypted Ed25519 private key in PEM (openssl genpkey "
	    "-algorithm ed25519)\n", path);
	assert_string_equal(errs, want);
	assert_null(conf->c_audit.ac_signing_key.sr_value);
	free(errs);
	config_free(conf);
	write_file(path, "not a key\n", 10);
	conf = must_parse(text);
	assert_int_equal(load_secrets(conf, &errs), -1);
	assert_string_equal(errs, want);
	free(errs);
	config_free(conf);
	unlink(path);
	conf = must_parse(text);
	assert_int_equal(load_secrets(conf, &errs), -1);
	snprintf(want, sizeof(want), "t.conf:2: signing-key-file \"%s\": No "
	    "such file or directory\n", path);
	assert_string_equal(errs, want);
	free(errs);
	config_free(conf);
	rmdir(dir);
}

static void
test_strings(void **state)
{
	(void)state;
	assert_string_equal(provider_type_str(PROVIDER_OPENAI), "openai");
	assert_string_equal(provider_type_str(PROVIDER_AZURE_OPENAI),
	    "azure-openai");
	assert_string_equal(provider_type_str(PROVIDER_OPENAI_COMPATIBLE),
	    "openai-compatible");
	assert_string_equal(provider_type_str(PROVIDER_ANTHROPIC), "anthropic");
	assert_string_equal(provider_type_str(PROVIDER_OLLAMA), "ollama");
	assert_string_equal(provider_type_str(PROVIDER_GEMINI), "gemini");
	assert_string_equal(transport_str(TRANSPORT_STDIO), "stdio");
	assert_string_equal(transport_str(TRANSPORT_STREAMABLE_HTTP),
	    "streamable-http");
	assert_string_equal(transport_str(TRANSPORT_SSE), "sse");
	assert_string_equal(isolation_str(ISOLATION_SHARED), "shared");
	assert_string_equal(isolation_str(ISOLATION_PER_USER), "per-user");
	assert_string_equal(isolation_str(ISOLATION_PER_CONVERSATION),
	    "per-conversation");
	assert_string_equal(pin_policy_str(PIN_BLOCK), "block");
	assert_string_equal(pin_policy_str(PIN_WARN), "warn");
	assert_string_equal(pin_policy_str(PIN_OFF), "off");
	assert_string_equal(policy_action_str(POLICY_ALLOW), "allow");
	assert_string_equal(policy_action_str(POLICY_DENY), "deny");
	assert_string_equal(policy_action_str(POLICY_CONFIRM), "confirm");
	assert_string_equal(policy_subject_str(SUBJECT_ANY), "any");
	assert_string_equal(policy_subject_str(SUBJECT_USER), "user");
	assert_string_equal(policy_subject_str(SUBJECT_ROLE), "role");
	assert_string_equal(policy_subject_str(SUBJECT_TENANT), "tenant");
	assert_string_equal(policy_op_str(COND_PREFIX), "prefix");
	assert_string_equal(policy_op_str(COND_EQUALS), "equals");
	assert_string_equal(policy_op_str(COND_MATCHES), "matches");
	assert_string_equal(policy_op_str(COND_MAX_LENGTH), "max-length");
	assert_string_equal(provider_type_str((enum provider_type)99),
	    "unknown");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_server_defaults),
		cmocka_unit_test(test_full_globals),
		cmocka_unit_test(test_full_providers),
		cmocka_unit_test(test_full_servers),
		cmocka_unit_test(test_full_toolsets_budgets),
		cmocka_unit_test(test_log_format),
		cmocka_unit_test(test_storage_settings),
		cmocka_unit_test(test_mcp_settings),
		cmocka_unit_test(test_full_rules),
		cmocka_unit_test(test_auth_web),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_print_hostile),
		cmocka_unit_test(test_print_only_server),
		cmocka_unit_test(test_print_canonical),
		cmocka_unit_test(test_macros),
		cmocka_unit_test(test_macro_words),
		cmocka_unit_test(test_defines),
		cmocka_unit_test(test_include_loop),
		cmocka_unit_test(test_include_missing),
		cmocka_unit_test(test_include_depth),
		cmocka_unit_test(test_lexical_errors),
		cmocka_unit_test(test_value_errors),
		cmocka_unit_test(test_block_errors),
		cmocka_unit_test(test_reference_errors),
		cmocka_unit_test(test_long_tokens),
		cmocka_unit_test(test_keeps_going),
		cmocka_unit_test(test_error_cap),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_secrets),
		cmocka_unit_test(test_jwks_file),
		cmocka_unit_test(test_audit_block),
		cmocka_unit_test(test_signing_key_file),
		cmocka_unit_test(test_strings),
	};
	const char	*d;

	if ((d = getenv("MCPBROKER_TEST_DATA")) == NULL)
		d = "tests/data";
	snprintf(data_dir, sizeof(data_dir), "%s", d);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
