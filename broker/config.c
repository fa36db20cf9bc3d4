/*
 * The configuration in memory: printing it back in the config grammar (for
 * `mcpbroker -n -v` and for shipping it to children), loading secrets,
 * lookups and freeing.  The parser is in parse.c.
 */

#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "broker/config.h"
#include "broker/jwt.h"

#define SECRET_MAX	(64 * 1024)

const char *
provider_type_str(enum provider_type t)
{
	switch (t) {
	case PROVIDER_OPENAI:
		return "openai";
	case PROVIDER_AZURE_OPENAI:
		return "azure-openai";
	case PROVIDER_OPENAI_COMPATIBLE:
		return "openai-compatible";
	case PROVIDER_ANTHROPIC:
		return "anthropic";
	case PROVIDER_OLLAMA:
		return "ollama";
	case PROVIDER_GEMINI:
		return "gemini";
	}
	return "unknown";
}

const char *
transport_str(enum server_transport t)
{
	switch (t) {
	case TRANSPORT_STDIO:
		return "stdio";
	case TRANSPORT_STREAMABLE_HTTP:
		return "streamable-http";
	case TRANSPORT_SSE:
		return "sse";
	}
	return "unknown";
}

const char *
isolation_str(enum server_isolation i)
{
	switch (i) {
	case ISOLATION_SHARED:
		return "shared";
	case ISOLATION_PER_USER:
		return "per-user";
	case ISOLATION_PER_CONVERSATION:
		return "per-conversation";
	}
	return "unknown";
}

const char *
pin_policy_str(enum pin_policy pp)
{
	switch (pp) {
	case PIN_BLOCK:
		return "block";
	case PIN_WARN:
		return "warn";
	case PIN_OFF:
		return "off";
	}
	return "unknown";
}

const char *
budget_scope_str(enum budget_scope s)
{
	switch (s) {
	case BUDGET_TENANT:
		return "tenant";
	case BUDGET_ROLE:
		return "role";
	case BUDGET_USER:
		return "user";
	}
	return "unknown";
}

const char *
budget_metric_str(enum budget_metric m)
{
	switch (m) {
	case BUDGET_MONTHLY_USD:
		return "monthly-usd";
	case BUDGET_DAILY_USD:
		return "daily-usd";
	case BUDGET_DAILY_TOKENS:
		return "daily-tokens";
	case BUDGET_MONTHLY_TOKENS:
		return "monthly-tokens";
	}
	return "unknown";
}

/* Lookups */

struct server_conf *
config_find_server(const struct mcpbroker_conf *conf, const char *name)
{
	struct server_conf	*srv;

	TAILQ_FOREACH(srv, &conf->c_servers, srv_entry)
		if (strcmp(srv->srv_name, name) == 0)
			return srv;
	return NULL;
}

struct provider_conf *
config_find_provider(const struct mcpbroker_conf *conf, const char *name)
{
	struct provider_conf	*pv;

	TAILQ_FOREACH(pv, &conf->c_providers, pv_entry)
		if (strcmp(pv->pv_name, name) == 0)
			return pv;
	return NULL;
}

uint64_t
config_retention(const struct mcpbroker_conf *conf, const char *tenant)
{
	const struct retention_conf	*rt;

	TAILQ_FOREACH(rt, &conf->c_retentions, rt_entry)
		if (strcmp(rt->rt_tenant, tenant) == 0)
			return rt->rt_ms;
	return conf->c_retention_ms;
}

unsigned int
config_server_count(const struct mcpbroker_conf *conf)
{
	struct server_conf	*srv;
	unsigned int		 n = 0;

	TAILQ_FOREACH(srv, &conf->c_servers, srv_entry)
		n++;
	return n;
}

/* Printing */

/* A quoted string the lexer reads back as the same bytes. */
static void
print_str(FILE *fp, const char *s)
{
	fputc('"', fp);
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(fp, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", fp);
		else if (*s == '\t')
			fputs("\\t", fp);
		else
			fputc(*s, fp);
	}
	fputc('"', fp);
}

/* kw "value" on a line of its own, indented when in a block */
static void
print_kv(FILE *fp, const char *indent, const char *kw, const char *v)
{
	if (v == NULL)
		return;
	fprintf(fp, "%s%s ", indent, kw);
	print_str(fp, v);
	fputc('\n', fp);
}

/* Largest unit that divides the value exactly: 90s, not 1m30s or 90000ms. */
static const char *
fmt_duration(uint64_t ms, char *buf, size_t sz)
{
	static const struct {
		const char	*name;
		uint64_t	 ms;
	} units[] = {
		{ "d", 86400000ULL }, { "h", 3600000ULL }, { "m", 60000ULL },
		{ "s", 1000ULL },
	};
	size_t	i;

	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (ms != 0 && ms % units[i].ms == 0) {
			snprintf(buf, sz, "%llu%s",
			    (unsigned long long)(ms / units[i].ms),
			    units[i].name);
			return buf;
		}
	snprintf(buf, sz, "%llums", (unsigned long long)ms);
	return buf;
}

static const char *
fmt_size(uint64_t n, char *buf, size_t sz)
{
	static const char	units[] = "GMK";
	uint64_t		mul = 1024ULL * 1024 * 1024;
	size_t			i;

	for (i = 0; i < 3; i++, mul /= 1024)
		if (n != 0 && n % mul == 0) {
			snprintf(buf, sz, "%llu%c",
			    (unsigned long long)(n / mul), units[i]);
			return buf;
		}
	snprintf(buf, sz, "%llu", (unsigned long long)n);
	return buf;
}

/*
 * The shortest fixed-point form that reads back as the same double: the
 * parser takes no exponents and at most 12 decimals, so 0.6, not 0.59999...
 */
static const char *
fmt_decimal(double d, char *buf, size_t sz)
{
	int	prec;

	for (prec = 0; prec <= 12; prec++) {
		snprintf(buf, sz, "%.*f", prec, d);
		if (strtod(buf, NULL) == d)
			return buf;
	}
	return buf;
}

/* What a secret comment may show: the reference, on one line. */
static void
print_secret(FILE *fp, const char *kwbase, const struct secret_ref *sr)
{
	const char	*kind, *c;

	if (sr->sr_kind == SECRET_NONE)
		return;
	kind = sr->sr_kind == SECRET_FILE ? "file" : "env";
	fprintf(fp, "\t%s-%s ", kwbase, kind);
	print_str(fp, sr->sr_ref);
	fprintf(fp, "\t# secret: (%s ", kind);
	/* the comment ends at a newline: never let the path contain one */
	for (c = sr->sr_ref; *c != '\0'; c++)
		fputc((unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c, fp);
	fputs(")\n", fp);
}

static void
print_globals(FILE *fp, const struct mcpbroker_conf *conf)
{
	const struct limits_conf	*lm = &conf->c_limits;
	char				 b[32];

	print_kv(fp, "", "user", conf->c_user);
	if (conf->c_instance_user != NULL)
		print_kv(fp, "", "instance-user", conf->c_instance_user);
	print_kv(fp, "", "state-dir", conf->c_state_dir);
	print_kv(fp, "", "control socket", conf->c_control_path);
	fprintf(fp, "log-format %s\n", conf->c_log_json ? "json" : "text");
	fputs("limits {\n", fp);
	fprintf(fp, "\ttool-rounds %u\n", lm->lm_tool_rounds);
	fprintf(fp, "\ttool-timeout %s\n",
	    fmt_duration(lm->lm_tool_timeout_ms, b, sizeof(b)));
	fprintf(fp, "\thistory-messages %u\n", lm->lm_history_messages);
	fprintf(fp, "\tmax-body %s\n", fmt_size(lm->lm_max_body, b,
	    sizeof(b)));
	fprintf(fp, "\theader-timeout %s\n",
	    fmt_duration(lm->lm_header_timeout_ms, b, sizeof(b)));
	fprintf(fp, "\tllm-timeout %s\n",
	    fmt_duration(lm->lm_llm_timeout_ms, b, sizeof(b)));
	fprintf(fp, "\tapproval-timeout %s\n",
	    fmt_duration(lm->lm_approval_timeout_ms, b, sizeof(b)));
	fprintf(fp, "\tmax-result-bytes %s\n",
	    fmt_size(lm->lm_max_result_bytes, b, sizeof(b)));
	fputs("}\n", fp);
}

static void
print_listens(FILE *fp, const struct mcpbroker_conf *conf)
{
	const struct listen_conf	*ls;

	/* addresses are canonical numeric forms or "localhost": bare words */
	TAILQ_FOREACH(ls, &conf->c_listens, ls_entry) {
		fprintf(fp, "listen on %s port %u", ls->ls_addr, ls->ls_port);
		if (ls->ls_tls) {
			fputs(" tls certificate ", fp);
			print_str(fp, ls->ls_cert);
			fputs(" key ", fp);
			print_str(fp, ls->ls_key);
		}
		fputc('\n', fp);
	}
}

/* Web session settings other than the defaults. */
static int
auth_web_set(const struct auth_conf *au)
{
	return au->au_norigins > 0 ||
	    au->au_session_idle_ms != CONF_DEFAULT_SESSION_IDLE_MS ||
	    au->au_session_lifetime_ms != CONF_DEFAULT_SESSION_LIFE_MS;
}

static void
print_auth_web(FILE *fp, const struct auth_conf *au)
{
	char	b1[32], b2[32];
	size_t	i;

	fprintf(fp, "\tsession idle %s lifetime %s\n",
	    fmt_duration(au->au_session_idle_ms, b1, sizeof(b1)),
	    fmt_duration(au->au_session_lifetime_ms, b2, sizeof(b2)));
	for (i = 0; i < au->au_norigins; i++)
		print_kv(fp, "\t", "allowed-origin", au->au_origins[i]);
}

static void
print_auth(FILE *fp, const struct auth_conf *au)
{
	const struct jwt_conf	*jw = &au->au_jwt_conf;

	if (!au->au_api_keys && !au->au_jwt && !auth_web_set(au))
		return;
	fputs("auth {\n", fp);
	if (au->au_api_keys)
		fputs("\tapi-keys\n", fp);
	if (au->au_jwt) {
		fputs("\tjwt issuer ", fp);
		print_str(fp, jw->jw_issuer);
		fputs(" audience ", fp);
		print_str(fp, jw->jw_audience);
		fputs(" jwks-file ", fp);
		print_str(fp, jw->jw_jwks.sr_ref);
		fputs(" roles-claim ", fp);
		print_str(fp, jw->jw_roles_claim != NULL ?
		    jw->jw_roles_claim : "roles");
		fputs(" tenant-claim ", fp);
		print_str(fp, jw->jw_tenant_claim != NULL ?
		    jw->jw_tenant_claim : "tenant");
		fputs(" user-claim ", fp);
		print_str(fp, jw->jw_user_claim != NULL ?
		    jw->jw_user_claim : "sub");
		fputc('\n', fp);
	}
	print_auth_web(fp, au);
	fputs("}\n", fp);
}

static void	print_strv(FILE *, const char *, char *const *, size_t);

static void
print_provider(FILE *fp, const struct provider_conf *pv)
{
	char	b1[64], b2[64];

	fputs("provider ", fp);
	print_str(fp, pv->pv_name);
	fputs(" {\n", fp);
	fprintf(fp, "\ttype %s\n", provider_type_str(pv->pv_type));
	print_kv(fp, "\t", "base-url", pv->pv_base_url);
	print_secret(fp, "api-key", &pv->pv_api_key);
	print_kv(fp, "\t", "model", pv->pv_model);
	print_kv(fp, "\t", "deployment", pv->pv_deployment);
	print_kv(fp, "\t", "api-version", pv->pv_api_version);
	print_kv(fp, "\t", "system-prompt", pv->pv_system_prompt);
	print_strv(fp, "allow-address", pv->pv_allow_addr, pv->pv_nallow_addr);
	if (pv->pv_has_price)
		fprintf(fp, "\tprice input %s output %s\n",
		    fmt_decimal(pv->pv_price_input, b1, sizeof(b1)),
		    fmt_decimal(pv->pv_price_output, b2, sizeof(b2)));
	fputs("}\n", fp);
}

static void
print_strv(FILE *fp, const char *kw, char *const *v, size_t n)
{
	size_t	i;

	if (n == 0)
		return;
	fprintf(fp, "\t%s", kw);
	for (i = 0; i < n; i++) {
		fputc(' ', fp);
		print_str(fp, v[i]);
	}
	fputc('\n', fp);
}

/*
 * whole: for the controller and frontend.  A worker's text leaves out
 * what only the controller acts on (pin-policy), so that changing it
 * restarts no worker.
 */
static void
print_server(FILE *fp, const struct server_conf *srv, int whole)
{
	const struct header_conf	*hd;
	const struct fs_rule		*fs;
	char				 b[32];

	fputs("server ", fp);
	print_str(fp, srv->srv_name);
	fputs(" {\n", fp);
	if (srv->srv_url != NULL) {
		print_kv(fp, "\t", "url", srv->srv_url);
		fprintf(fp, "\ttransport %s\n",
		    transport_str(srv->srv_transport));
		print_secret(fp, "bearer-token", &srv->srv_bearer);
		TAILQ_FOREACH(hd, &srv->srv_headers, hd_entry) {
			fputs("\theader ", fp);
			print_str(fp, hd->hd_name);
			fputc(' ', fp);
			print_str(fp, hd->hd_value);
			fputc('\n', fp);
		}
		print_kv(fp, "\t", "ca-file", srv->srv_ca_file);
		print_strv(fp, "allow-address", srv->srv_allow_addr,
		    srv->srv_nallow_addr);
	} else {
		print_strv(fp, "command", srv->srv_argv, srv->srv_argc);
		print_strv(fp, "env", srv->srv_env, srv->srv_nenv);
		if (srv->srv_network_none)
			fputs("\tnetwork none\n", fp);
		TAILQ_FOREACH(fs, &srv->srv_fs, fs_entry) {
			fprintf(fp, "\tfilesystem %s ",
			    fs->fs_access == FS_WRITE ? "write" : "read");
			print_str(fp, fs->fs_path);
			fputc('\n', fp);
		}
	}
	fprintf(fp, "\tisolation %s\n", isolation_str(srv->srv_isolation));
	if (whole)
		fprintf(fp, "\tpin-policy %s\n",
		    pin_policy_str(srv->srv_pin_policy));
	fprintf(fp, "\tcall-timeout %s\n",
	    fmt_duration(srv->srv_call_timeout_ms, b, sizeof(b)));
	fprintf(fp, "\tconnect-timeout %s\n",
	    fmt_duration(srv->srv_connect_timeout_ms, b, sizeof(b)));
	fprintf(fp, "\tidle-timeout %s\n",
	    fmt_duration(srv->srv_idle_timeout_ms, b, sizeof(b)));
	fprintf(fp, "\tmax-instances %u\n", srv->srv_max_instances);
	fputs("}\n", fp);
}

static void
print_toolset(FILE *fp, const struct toolset_conf *ts)
{
	fputs("toolset ", fp);
	print_str(fp, ts->ts_name);
	fputs(" {\n", fp);
	print_strv(fp, "tools", ts->ts_tools, ts->ts_ntools);
	fprintf(fp, "\tnames %s\n", toolset_names_str(ts->ts_names));
	fputs("}\n", fp);
}

static void
print_budget(FILE *fp, const struct budget_conf *bg)
{
	char	b[64];

	fprintf(fp, "budget %s ", budget_scope_str(bg->bg_scope));
	print_str(fp, bg->bg_subject);
	if (bg->bg_tenant != NULL) {
		fputs(" tenant ", fp);
		print_str(fp, bg->bg_tenant);
	}
	fprintf(fp, " %s %s\n", budget_metric_str(bg->bg_metric),
	    fmt_decimal(bg->bg_limit, b, sizeof(b)));
}

static const char *
fmt_retention(uint64_t ms, char *b, size_t sz)
{
	return ms == 0 ? "forever" : fmt_duration(ms, b, sz);
}

/*
 * Stored conversations: not in print_globals, so that a change reaches
 * the controller on reload without restarting every worker.
 */
static void
print_storage(FILE *fp, const struct mcpbroker_conf *conf)
{
	const struct retention_conf	*rt;
	char				 b[32];

	fprintf(fp, "store-tool-results %s\n", conf->c_store_tool_results ?
	    "yes" : "no");
	fprintf(fp, "retention %s\n", fmt_retention(conf->c_retention_ms, b,
	    sizeof(b)));
	TAILQ_FOREACH(rt, &conf->c_retentions, rt_entry) {
		fputs("retention tenant ", fp);
		print_str(fp, rt->rt_tenant);
		fprintf(fp, " %s\n", fmt_retention(rt->rt_ms, b, sizeof(b)));
	}
}

static const char *
rate_period_str(unsigned int secs)
{
	switch (secs) {
	case 1:
		return "second";
	case 60:
		return "minute";
	case 3600:
		return "hour";
	default:
		return "day";
	}
}

static void
print_rule(FILE *fp, const struct policy_rule *r)
{
	const struct policy_cond	*pc;
	size_t				 i;

	fputs(policy_action_str(r->pr_action), fp);
	if (r->pr_subject != SUBJECT_ANY) {
		fprintf(fp, " %s ", policy_subject_str(r->pr_subject));
		print_str(fp, r->pr_subject_name);
	}
	if (r->pr_subject_tenant != NULL) {
		fputs(" tenant ", fp);
		print_str(fp, r->pr_subject_tenant);
	}
	fprintf(fp, " %s", policy_kind_str(r->pr_kind));
	for (i = 0; i < r->pr_ntools; i++) {
		fputc(' ', fp);
		print_str(fp, r->pr_tools[i]);
	}
	TAILQ_FOREACH(pc, &r->pr_conds, pc_entry) {
		fputs(" where ", fp);
		print_str(fp, pc->pc_arg);
		fprintf(fp, " %s ", policy_op_str(pc->pc_op));
		if (pc->pc_op == COND_MAX_LENGTH)
			fprintf(fp, "%lld", pc->pc_num);
		else
			print_str(fp, pc->pc_value);
	}
	if (r->pr_rate_count != 0)
		fprintf(fp, " rate %u/%s", r->pr_rate_count,
		    rate_period_str(r->pr_rate_period));
	fputc('\n', fp);
}

/* Only what differs from the defaults, which the reader has too. */
static void
print_audit(FILE *fp, const struct audit_conf *ac)
{
	if (!ac->ac_mask_set && ac->ac_signing_key.sr_kind == SECRET_NONE)
		return;
	fputs("audit {\n", fp);
	if (ac->ac_mask_set && ac->ac_nmask == 0)
		fputs("\tmask none\n", fp);
	else if (ac->ac_mask_set)
		print_strv(fp, "mask", ac->ac_mask, ac->ac_nmask);
	print_secret(fp, "signing-key", &ac->ac_signing_key);
	fputs("}\n", fp);
}

void
config_print(FILE *fp, const struct mcpbroker_conf *conf,
    const char *only_server)
{
	const struct provider_conf	*pv;
	const struct server_conf	*srv;
	const struct toolset_conf	*ts;
	const struct budget_conf	*bg;
	const struct policy_rule	*r;

	print_globals(fp, conf);
	if (only_server != NULL) {
		if ((srv = config_find_server(conf, only_server)) != NULL)
			print_server(fp, srv, 0);
		return;
	}
	print_listens(fp, conf);
	print_auth(fp, &conf->c_auth);
	print_audit(fp, &conf->c_audit);
	TAILQ_FOREACH(pv, &conf->c_providers, pv_entry)
		print_provider(fp, pv);
	TAILQ_FOREACH(srv, &conf->c_servers, srv_entry)
		print_server(fp, srv, 1);
	TAILQ_FOREACH(ts, &conf->c_toolsets, ts_entry)
		print_toolset(fp, ts);
	TAILQ_FOREACH(bg, &conf->c_budgets, bg_entry)
		print_budget(fp, bg);
	print_storage(fp, conf);
	/* rule order is meaningful: first match wins */
	TAILQ_FOREACH(r, &conf->c_rules, pr_entry)
		print_rule(fp, r);
}

/* Secrets */

static void
secret_clear(struct secret_ref *sr)
{
	if (sr->sr_value != NULL) {
		explicit_bzero(sr->sr_value, strlen(sr->sr_value));
		free(sr->sr_value);
		sr->sr_value = NULL;
	}
}

/* Read a secret file (bounded: max and a little) into a string. */
static int
secret_read_file(const char *path, size_t max, char **out, size_t *outlen,
    const char **why)
{
	struct stat	 st;
	char		*buf;
	size_t		 len = 0;
	ssize_t		 n = 0;
	int		 fd;

	*why = NULL;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return -1;
	if (fstat(fd, &st) == -1) {
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		*why = "not a regular file";
		return -1;
	}
	if ((buf = malloc(max + 3)) == NULL) {
		close(fd);
		return -1;
	}
	/* room for a line ending, and one byte more to spot a large file */
	while (len < max + 2) {
		n = read(fd, buf + len, max + 2 - len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	if (n == -1) {
		explicit_bzero(buf, len);
		free(buf);
		return -1;
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}

/*
 * Check a secret and strip one line ending.  Secrets go into HTTP headers,
 * so control characters (header injection) and NULs are refused.
 */
static const char *
secret_check(char *v, size_t len)
{
	size_t	i;

	if (len > 0 && v[len - 1] == '\n')
		v[--len] = '\0';
	if (len > 0 && v[len - 1] == '\r')
		v[--len] = '\0';
	if (len > SECRET_MAX)
		return "larger than 64 KiB";
	if (len == 0)
		return "is empty";
	for (i = 0; i < len; i++) {
		if (v[i] == '\0')
			return "contains a NUL byte";
		if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
			return "contains a control character";
	}
	return NULL;
}

static int
secret_load(struct secret_ref *sr, const char *kwbase, FILE *errs)
{
	const char	*why = NULL, *env;
	char		*v = NULL;
	size_t		 len;
	int		 e;

	secret_clear(sr);
	if (sr->sr_kind == SECRET_NONE)
		return 0;
	if (sr->sr_kind == SECRET_ENV) {
		if ((env = getenv(sr->sr_ref)) == NULL) {
			fprintf(errs, "%s:%d: %s-env \"%s\" is not set\n",
			    sr->sr_file, sr->sr_line, kwbase, sr->sr_ref);
			return -1;
		}
		len = strnlen(env, SECRET_MAX + 2);
		if ((v = strndup(env, len)) == NULL) {
			fprintf(errs, "%s:%d: %s-env \"%s\": %s\n", sr->sr_file,
			    sr->sr_line, kwbase, sr->sr_ref, strerror(errno));
			return -1;
		}
	} else if (secret_read_file(sr->sr_ref, SECRET_MAX, &v, &len,
	    &why) == -1) {
		e = errno;
		fprintf(errs, "%s:%d: %s-file \"%s\": %s\n", sr->sr_file,
		    sr->sr_line, kwbase, sr->sr_ref, why != NULL ? why :
		    strerror(e));
		return -1;
	}
	if ((why = secret_check(v, len)) != NULL) {
		fprintf(errs, "%s:%d: %s-%s \"%s\": %s\n", sr->sr_file,
		    sr->sr_line, kwbase, sr->sr_kind == SECRET_FILE ? "file" :
		    "env", sr->sr_ref, why);
		explicit_bzero(v, len);
		free(v);
		return -1;
	}
	sr->sr_value = v;
	return 0;
}

/*
 * The JWKS is JSON, lines and all, so it is checked as a JWKS rather than
 * as a header value: here, so that `mcpbroker -n` and a reload refuse a key
 * set the controller could not use.
 */
static int
jwks_load(struct secret_ref *sr, FILE *errs)
{
	struct jwt_keys	*keys;
	const char	*why = NULL;
	char		*v = NULL, reason[256];
	size_t		 len;
	int		 e;

	secret_clear(sr);
	if (secret_read_file(sr->sr_ref, JWKS_MAX, &v, &len, &why) == -1) {
		e = errno;
		fprintf(errs, "%s:%d: jwks-file \"%s\": %s\n", sr->sr_file,
		    sr->sr_line, sr->sr_ref, why != NULL ? why : strerror(e));
		return -1;
	}
	reason[0] = '\0';
	if (len > JWKS_MAX)
		snprintf(reason, sizeof(reason), "larger than 1 MiB");
	else if (strlen(v) != len)
		snprintf(reason, sizeof(reason), "contains a NUL byte");
	else if ((keys = jwt_keys_parse(v, reason, sizeof(reason))) != NULL)
		jwt_keys_free(keys);
	if (reason[0] != '\0') {
		fprintf(errs, "%s:%d: jwks-file \"%s\": %s\n", sr->sr_file,
		    sr->sr_line, sr->sr_ref, reason);
		explicit_bzero(v, len);
		free(v);
		return -1;
	}
	sr->sr_value = v;
	return 0;
}

/* An encrypted key is refused, never prompted for. */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return 0;
}

/*
 * The audit signing key is PEM, lines and all, so it is checked as an
 * Ed25519 private key rather than as a header value: here, so that
 * `mcpbroker -n` and a reload refuse a key the controller could not use.
 */
static int
signing_key_load(struct secret_ref *sr, FILE *errs)
{
	const char	*why = NULL;
	char		*v = NULL;
	size_t		 len;
	EVP_PKEY	*k = NULL;
	BIO		*bio;
	int		 e;

	secret_clear(sr);
	if (secret_read_file(sr->sr_ref, SECRET_MAX, &v, &len, &why) == -1) {
		e = errno;
		fprintf(errs, "%s:%d: signing-key-file \"%s\": %s\n",
		    sr->sr_file, sr->sr_line, sr->sr_ref, why != NULL ? why :
		    strerror(e));
		return -1;
	}
	if (len > SECRET_MAX)
		why = "larger than 64 KiB";
	else if (strlen(v) != len)
		why = "contains a NUL byte";
	else if ((bio = BIO_new_mem_buf(v, (int)len)) != NULL) {
		k = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase, NULL);
		BIO_free(bio);
		ERR_clear_error();
	}
	if (why == NULL && (k == NULL || EVP_PKEY_get_id(k) !=
	    EVP_PKEY_ED25519))
		why = "not an unencrypted Ed25519 private key in PEM "
		    "(openssl genpkey -algorithm ed25519)";
	EVP_PKEY_free(k);
	if (why != NULL) {
		fprintf(errs, "%s:%d: signing-key-file \"%s\": %s\n",
		    sr->sr_file, sr->sr_line, sr->sr_ref, why);
		explicit_bzero(v, len);
		free(v);
		return -1;
	}
	sr->sr_value = v;
	return 0;
}

int
config_load_secrets(struct mcpbroker_conf *conf, FILE *errs)
{
	struct provider_conf	*pv;
	struct server_conf	*srv;
	int			 rv = 0;

	TAILQ_FOREACH(pv, &conf->c_providers, pv_entry)
		if (secret_load(&pv->pv_api_key, "api-key", errs) == -1)
			rv = -1;
	TAILQ_FOREACH(srv, &conf->c_servers, srv_entry)
		if (secret_load(&srv->srv_bearer, "bearer-token", errs) == -1)
			rv = -1;
	if (conf->c_audit.ac_signing_key.sr_kind == SECRET_FILE &&
	    signing_key_load(&conf->c_audit.ac_signing_key, errs) == -1)
		rv = -1;
	if (conf->c_auth.au_jwt &&
	    jwks_load(&conf->c_auth.au_jwt_conf.jw_jwks, errs) == -1)
		rv = -1;
	return rv;
}

/* Freeing */

static void
secret_free(struct secret_ref *sr)
{
	secret_clear(sr);
	free(sr->sr_ref);
	free(sr->sr_file);
}

static void
strv_free(char **v, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void
provider_free(struct provider_conf *pv)
{
	free(pv->pv_name);
	free(pv->pv_base_url);
	secret_free(&pv->pv_api_key);
	free(pv->pv_model);
	free(pv->pv_deployment);
	free(pv->pv_api_version);
	free(pv->pv_system_prompt);
	strv_free(pv->pv_allow_addr, pv->pv_nallow_addr);
	free(pv->pv_file);
	free(pv);
}

static void
server_free(struct server_conf *srv)
{
	struct header_conf	*hd;
	struct fs_rule		*fs;

	free(srv->srv_name);
	strv_free(srv->srv_argv, srv->srv_argc);
	free(srv->srv_url);
	secret_free(&srv->srv_bearer);
	while ((hd = TAILQ_FIRST(&srv->srv_headers)) != NULL) {
		TAILQ_REMOVE(&srv->srv_headers, hd, hd_entry);
		free(hd->hd_name);
		free(hd->hd_value);
		free(hd);
	}
	free(srv->srv_ca_file);
	strv_free(srv->srv_env, srv->srv_nenv);
	strv_free(srv->srv_allow_addr, srv->srv_nallow_addr);
	while ((fs = TAILQ_FIRST(&srv->srv_fs)) != NULL) {
		TAILQ_REMOVE(&srv->srv_fs, fs, fs_entry);
		free(fs->fs_path);
		free(fs);
	}
	free(srv->srv_file);
	free(srv);
}

static void
rule_free(struct policy_rule *r)
{
	struct policy_cond	*pc;

	free(r->pr_subject_name);
	free(r->pr_subject_tenant);
	strv_free(r->pr_tools, r->pr_ntools);
	while ((pc = TAILQ_FIRST(&r->pr_conds)) != NULL) {
		TAILQ_REMOVE(&r->pr_conds, pc, pc_entry);
		free(pc->pc_arg);
		free(pc->pc_value);
		free(pc);
	}
	free(r->pr_file);
	free(r);
}

void
config_free(struct mcpbroker_conf *conf)
{
	struct listen_conf	*ls;
	struct provider_conf	*pv;
	struct server_conf	*srv;
	struct toolset_conf	*ts;
	struct budget_conf	*bg;
	struct retention_conf	*rt;
	struct policy_rule	*r;
	struct jwt_conf		*jw;

	if (conf == NULL)
		return;
	strv_free(conf->c_audit.ac_mask, conf->c_audit.ac_nmask);
	secret_free(&conf->c_audit.ac_signing_key);
	while ((ls = TAILQ_FIRST(&conf->c_listens)) != NULL) {
		TAILQ_REMOVE(&conf->c_listens, ls, ls_entry);
		free(ls->ls_addr);
		free(ls->ls_cert);
		free(ls->ls_key);
		free(ls->ls_file);
		free(ls);
	}
	while ((pv = TAILQ_FIRST(&conf->c_providers)) != NULL) {
		TAILQ_REMOVE(&conf->c_providers, pv, pv_entry);
		provider_free(pv);
	}
	while ((srv = TAILQ_FIRST(&conf->c_servers)) != NULL) {
		TAILQ_REMOVE(&conf->c_servers, srv, srv_entry);
		server_free(srv);
	}
	while ((ts = TAILQ_FIRST(&conf->c_toolsets)) != NULL) {
		TAILQ_REMOVE(&conf->c_toolsets, ts, ts_entry);
		free(ts->ts_name);
		strv_free(ts->ts_tools, ts->ts_ntools);
		free(ts->ts_file);
		free(ts);
	}
	while ((bg = TAILQ_FIRST(&conf->c_budgets)) != NULL) {
		TAILQ_REMOVE(&conf->c_budgets, bg, bg_entry);
		free(bg->bg_subject);
		free(bg->bg_tenant);
		free(bg->bg_file);
		free(bg);
	}
	while ((rt = TAILQ_FIRST(&conf->c_retentions)) != NULL) {
		TAILQ_REMOVE(&conf->c_retentions, rt, rt_entry);
		free(rt->rt_tenant);
		free(rt->rt_file);
		free(rt);
	}
	while ((r = TAILQ_FIRST(&conf->c_rules)) != NULL) {
		TAILQ_REMOVE(&conf->c_rules, r, pr_entry);
		rule_free(r);
	}
	jw = &conf->c_auth.au_jwt_conf;
	free(jw->jw_issuer);
	free(jw->jw_audience);
	secret_free(&jw->jw_jwks);
	free(jw->jw_roles_claim);
	free(jw->jw_tenant_claim);
	free(jw->jw_user_claim);
	strv_free(conf->c_auth.au_origins, conf->c_auth.au_norigins);
	free(conf->c_user);
	free(conf->c_instance_user);
	free(conf->c_state_dir);
	free(conf->c_control_path);
	free(conf);
}

const char *
provider_base_url(const struct provider_conf *pv)
{
	if (pv->pv_base_url != NULL)
		return pv->pv_base_url;
	switch (pv->pv_type) {
	case PROVIDER_OPENAI:
		return "https://api.openai.com/v1";
	case PROVIDER_ANTHROPIC:
		return "https://api.anthropic.com";
	case PROVIDER_GEMINI:
		return "https://generativelanguage.googleapis.com";
	case PROVIDER_OLLAMA:
		return "http://127.0.0.1:11434";
	default:
		return NULL;	/* azure and compatible servers must say */
	}
}

const char *
toolset_names_str(enum toolset_names n)
{
	switch (n) {
	case NAMES_DOTTED:
		return "dotted";
	case NAMES_UNDERSCORE:
		return "underscore";
	case NAMES_BARE:
		return "bare";
	}
	return "dotted";
}

int
toolset_has_server(const struct toolset_conf *ts, const char *server)
{
	const char	*g, *dot;
	char		 half[256];
	size_t		 i;

	for (i = 0; i < ts->ts_ntools; i++) {
		g = ts->ts_tools[i];
		if ((dot = strchr(g, '.')) == NULL)
			return 1;
		snprintf(half, sizeof(half), "%.*s", (int)(dot - g), g);
		if (policy_glob_match(half, server))
			return 1;
	}
	return 0;
}

void
toolset_prefix(const struct toolset_conf *ts, const char *server, char *buf,
    size_t len)
{
	switch (ts->ts_names) {
	case NAMES_DOTTED:
		snprintf(buf, len, "%s.", server);
		break;
	case NAMES_UNDERSCORE:
		snprintf(buf, len, "%s__", server);
		break;
	case NAMES_BARE:
		snprintf(buf, len, "%s", "");
		break;
	}
}

struct toolset_conf *
config_find_toolset(const struct mcpbroker_conf *conf, const char *name)
{
	struct toolset_conf *ts;

	TAILQ_FOREACH(ts, &conf->c_toolsets, ts_entry)
		if (strcmp(ts->ts_name, name) == 0)
			return ts;
	return NULL;
}
