/*
 * mcpbroker.conf in memory.  The parent parses the file once
 * (config_parse_file); children receive the effective configuration as
 * text printed by config_print and parse it with config_parse_buffer, which
 * never touches the file system.  Secret values are filled in by the parent
 * only (config_load_secrets) and are never printed.
 */
#ifndef MCPBROKER_CONFIG_H
#define MCPBROKER_CONFIG_H

#include <sys/queue.h>
#include <stdint.h>
#include <stdio.h>

#include "policy/policy.h"

#define CONF_DEFAULT_PATH	"/etc/mcpbroker/mcpbroker.conf"
#define CONF_DEFAULT_USER	"_mcpbroker"
#define CONF_DEFAULT_STATE_DIR	"/var/lib/mcpbroker"
#define CONF_DEFAULT_CONTROL	"/run/mcpbroker/control.sock"
#define CONF_DEFAULT_SESSION_IDLE_MS	(30 * 60 * 1000ULL)
#define CONF_DEFAULT_SESSION_LIFE_MS	(12 * 3600 * 1000ULL)

enum secret_kind {
	SECRET_NONE,
	SECRET_FILE,		/* *-file "PATH" */
	SECRET_ENV,		/* *-env "NAME" */
};

struct secret_ref {
	enum secret_kind	 sr_kind;
	char			*sr_ref;	/* the path or variable name */
	char			*sr_value;	/* filled by config_load_secrets */
	int			 sr_line;
	char			*sr_file;
};

struct listen_conf {
	TAILQ_ENTRY(listen_conf) ls_entry;
	char			*ls_addr;	/* numeric IPv4/IPv6 or "localhost" */
	uint16_t		 ls_port;
	int			 ls_tls;
	char			*ls_cert;	/* with tls */
	char			*ls_key;
	int			 ls_line;
	char			*ls_file;
};
TAILQ_HEAD(listen_list, listen_conf);

/*
 * The JWKS travels like a secret: the parent reads jwks-file (sr_ref) into
 * sr_value and sends it to the controller, which never opens files.  An
 * "oct" key in it is a shared secret.
 */
struct jwt_conf {
	char			*jw_issuer;
	char			*jw_audience;
	struct secret_ref	 jw_jwks;		/* jwks-file "PATH" */
	char			*jw_roles_claim;	/* default "roles" */
	char			*jw_tenant_claim;	/* default "tenant" */
	char			*jw_user_claim;		/* default "sub" */
};

struct auth_conf {
	int			 au_api_keys;
	int			 au_jwt;		/* jwt line present */
	struct jwt_conf		 au_jwt_conf;
	uint64_t		 au_session_idle_ms;	/* default 30 min */
	uint64_t		 au_session_lifetime_ms; /* default 12 h */
	char		       **au_origins;	/* allowed-origin, canonical */
	size_t			 au_norigins;
};

enum provider_type {
	PROVIDER_OPENAI,
	PROVIDER_AZURE_OPENAI,
	PROVIDER_OPENAI_COMPATIBLE,
	PROVIDER_ANTHROPIC,
	PROVIDER_OLLAMA,
	PROVIDER_GEMINI,
};

struct provider_conf {
	TAILQ_ENTRY(provider_conf) pv_entry;
	char			*pv_name;
	enum provider_type	 pv_type;
	int			 pv_type_set;
	char			*pv_base_url;
	struct secret_ref	 pv_api_key;
	char			*pv_model;
	char			*pv_deployment;		/* azure-openai */
	char			*pv_api_version;	/* azure-openai */
	char			*pv_system_prompt;	/* first message */
	int			 pv_has_price;
	double			 pv_price_input;	/* USD per million tokens */
	double			 pv_price_output;
	char		       **pv_allow_addr;	/* allow-address literals */
	size_t			 pv_nallow_addr;
	int			 pv_line;
	char			*pv_file;
};
TAILQ_HEAD(provider_list, provider_conf);

enum server_transport {
	TRANSPORT_STDIO,		/* command ... */
	TRANSPORT_STREAMABLE_HTTP,	/* url ..., the default for url */
	TRANSPORT_SSE,			/* url ... transport sse (2024-11-05) */
};

enum server_isolation {
	ISOLATION_SHARED,
	ISOLATION_PER_USER,
	ISOLATION_PER_CONVERSATION,
};

/*
 * What the controller does when a server changes a tool's definition
 * after first sight (controller_pins.c): withhold it until an admin
 * approves (block), only say so (warn), or keep no pins at all (off).
 */
enum pin_policy {
	PIN_BLOCK,
	PIN_WARN,
	PIN_OFF,
};

struct header_conf {
	TAILQ_ENTRY(header_conf) hd_entry;
	char			*hd_name;
	char			*hd_value;
};
TAILQ_HEAD(header_list, header_conf);

enum fs_access {
	FS_READ,
	FS_WRITE,
};

struct fs_rule {
	TAILQ_ENTRY(fs_rule)	 fs_entry;
	enum fs_access		 fs_access;
	char			*fs_path;
};
TAILQ_HEAD(fs_rule_list, fs_rule);

struct server_conf {
	TAILQ_ENTRY(server_conf) srv_entry;
	char			*srv_name;
	char		       **srv_argv;	/* NULL-terminated; stdio only */
	size_t			 srv_argc;
	char			*srv_url;	/* http(s) transports only */
	enum server_transport	 srv_transport;
	struct secret_ref	 srv_bearer;	/* bearer-token-file / -env */
	struct header_list	 srv_headers;	/* header "NAME" "VALUE" */
	char			*srv_ca_file;
	char		       **srv_env;	/* env "NAME": passed to instances */
	size_t			 srv_nenv;
	enum server_isolation	 srv_isolation;
	enum pin_policy		 srv_pin_policy;	/* default block */
	int			 srv_network_none;
	struct fs_rule_list	 srv_fs;
	uint64_t		 srv_call_timeout_ms;	/* default 30 s */
	uint64_t		 srv_connect_timeout_ms; /* default 10 s */
	uint64_t		 srv_idle_timeout_ms;	/* default 10 min */
	unsigned int		 srv_max_instances;	/* default 32 */
	char		       **srv_allow_addr;	/* allow-address literals */
	size_t			 srv_nallow_addr;
	int			 srv_line;
	char			*srv_file;
};
TAILQ_HEAD(server_list, server_conf);

/*
 * What an MCP client of /mcp/TOOLSET sees a server's tool (and prompt) as:
 * SERVER.TOOL, SERVER__TOOL, or the server's own name.
 */
enum toolset_names {
	NAMES_DOTTED,
	NAMES_UNDERSCORE,
	NAMES_BARE,
};

struct toolset_conf {
	TAILQ_ENTRY(toolset_conf) ts_entry;
	char			*ts_name;
	char		       **ts_tools;	/* NULL-terminated globs */
	size_t			 ts_ntools;
	enum toolset_names	 ts_names;	/* default dotted */
	int			 ts_line;
	char			*ts_file;
};
TAILQ_HEAD(toolset_list, toolset_conf);

struct limits_conf {
	unsigned int		 lm_tool_rounds;	/* default 10 */
	uint64_t		 lm_tool_timeout_ms;	/* default 30 s */
	unsigned int		 lm_history_messages;	/* default 50 */
	uint64_t		 lm_max_body;		/* default 1M */
	uint64_t		 lm_header_timeout_ms;	/* default 10 s */
	uint64_t		 lm_approval_timeout_ms; /* a confirm call waits;
							 * default 5 min */
	uint64_t		 lm_llm_timeout_ms;	/* no byte from the LLM;
							 * default 2 min */
	uint64_t		 lm_max_result_bytes;	/* a tool result the LLM
							 * sees; default 64K */
};

/*
 * audit { mask "GLOB"... | mask none; signing-key-file "PATH" }.  The mask
 * starts as the default list (audit_default_mask in parse.c); a mask line
 * replaces it.  The signing key (Ed25519, PEM) is read by the parent and
 * sent to the controller like any secret.
 */
struct audit_conf {
	char		       **ac_mask;	/* globs over argument keys */
	size_t			 ac_nmask;	/* 0: nothing is masked */
	int			 ac_mask_set;	/* a mask line replaced them */
	struct secret_ref	 ac_signing_key;
};

enum budget_scope {
	BUDGET_TENANT,
	BUDGET_ROLE,
	BUDGET_USER,
};

enum budget_metric {
	BUDGET_MONTHLY_USD,
	BUDGET_DAILY_USD,
	BUDGET_DAILY_TOKENS,
	BUDGET_MONTHLY_TOKENS,
};

struct budget_conf {
	TAILQ_ENTRY(budget_conf) bg_entry;
	enum budget_scope	 bg_scope;
	char			*bg_subject;
	char			*bg_tenant;	/* a user's; NULL: any */
	enum budget_metric	 bg_metric;
	double			 bg_limit;
	int			 bg_line;
	char			*bg_file;
};
TAILQ_HEAD(budget_list, budget_conf);

/* retention tenant "NAME" DURATION|forever: overrides the default. */
struct retention_conf {
	TAILQ_ENTRY(retention_conf) rt_entry;
	char			*rt_tenant;
	uint64_t		 rt_ms;		/* 0: kept forever */
	int			 rt_line;
	char			*rt_file;
};
TAILQ_HEAD(retention_list, retention_conf);

struct mcpbroker_conf {
	char			*c_user;
	char			*c_instance_user;	/* NULL: c_user */
	char			*c_state_dir;
	char			*c_control_path;
	struct listen_list	 c_listens;
	struct auth_conf	 c_auth;
	struct audit_conf	 c_audit;
	struct provider_list	 c_providers;
	struct server_list	 c_servers;
	struct toolset_list	 c_toolsets;
	struct limits_conf	 c_limits;
	struct budget_list	 c_budgets;
	uint64_t		 c_retention_ms;	/* 0: kept forever */
	struct retention_list	 c_retentions;		/* per tenant */
	int			 c_store_tool_results;	/* else a summary */
	int			 c_log_json;		/* log-format json */
	struct policy_rule_list	 c_rules;
};

/*
 * Parse PATH (following include "FILE").  defines are "name=value" strings
 * from -D, or NULL.  Every error is written to errs as "FILE:LINE: message\n";
 * NULL is returned when there was any.
 */
struct mcpbroker_conf	*config_parse_file(const char *path,
			    char *const *defines, FILE *errs);
/* Parse text printed by config_print; include is refused. */
struct mcpbroker_conf	*config_parse_buffer(const char *name,
			    const char *buf, size_t len, FILE *errs);
/*
 * Print the effective configuration in the config grammar.  Secrets appear
 * as references only.  only_server, if not NULL, prints that server block and
 * the global settings alone (what a worker needs).
 */
void			 config_print(FILE *, const struct mcpbroker_conf *,
			    const char *only_server);
/* Read every referenced secret file and variable; errors as above. */
int			 config_load_secrets(struct mcpbroker_conf *, FILE *errs);
void			 config_free(struct mcpbroker_conf *);

struct server_conf	*config_find_server(const struct mcpbroker_conf *,
			    const char *);
struct provider_conf	*config_find_provider(const struct mcpbroker_conf *,
			    const char *);
struct toolset_conf	*config_find_toolset(const struct mcpbroker_conf *,
			    const char *);
unsigned int		 config_server_count(const struct mcpbroker_conf *);
/*
 * The toolset's globs name the server (a glob without a dot names every
 * server): its tools may be in the toolset, its resources and prompts are.
 */
int			 toolset_has_server(const struct toolset_conf *,
			    const char *server);
/* What ts's names of server's tools start with ("files.", "files__", ""). */
void			 toolset_prefix(const struct toolset_conf *,
			    const char *server, char *buf, size_t len);
const char		*toolset_names_str(enum toolset_names);

/* base-url, or the vendor's public endpoint when the config names none. */
const char		*provider_base_url(const struct provider_conf *);
const char		*provider_type_str(enum provider_type);
const char		*transport_str(enum server_transport);
const char		*isolation_str(enum server_isolation);
const char		*pin_policy_str(enum pin_policy);
const char		*budget_scope_str(enum budget_scope);
const char		*budget_metric_str(enum budget_metric);
/* A tenant's conversations are kept this long (ms); 0: forever. */
uint64_t		 config_retention(const struct mcpbroker_conf *,
			    const char *tenant);

#endif
