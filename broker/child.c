#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>

#include "broker/jwt.h"
#include "broker/mcpbroker.h"
#include "common/log.h"
#include "common/sandbox.h"
#include "common/util.h"

struct secret_rec {
	char	*sr_kind;
	char	*sr_name;
	char	*sr_value;
};

static struct {
	enum proc_kind		 kind;
	const char		*name;
	struct event_base	*base;
	struct peer		 parent;
	const struct child_hooks *hooks;
	char			*text;		/* config text being received */
	struct secret_rec	 secrets[64];
	size_t			 nsecrets;
	int			 sandboxed;
	int			 started;
	struct event		*sigterm, *sigint;
} ch;

struct event_base *
child_base(void)
{
	return ch.base;
}

struct peer *
child_parent(void)
{
	return &ch.parent;
}

static void
child_secrets_clear(void)
{
	size_t i;

	for (i = 0; i < ch.nsecrets; i++) {
		free(ch.secrets[i].sr_kind);
		free(ch.secrets[i].sr_name);
		explicit_bzero(ch.secrets[i].sr_value,
		    strlen(ch.secrets[i].sr_value));
		free(ch.secrets[i].sr_value);
	}
	ch.nsecrets = 0;
}

int
child_recv_conf_text(struct peer *p, struct msg *m, struct json_object *o)
{
	const char *text;

	(void)p;
	(void)m;
	if (json_get_str(o, "text", CONF_TEXT_MAX, 0, &text) == -1)
		return -1;
	free(ch.text);
	if ((ch.text = strdup(text)) == NULL)
		fatal("strdup");
	child_secrets_clear();
	return 0;
}

int
child_recv_secret(struct peer *p, struct msg *m, struct json_object *o)
{
	const char		*kind, *name, *value;
	struct secret_rec	*s;

	(void)p;
	(void)m;
	if (json_get_str(o, "kind", 32, 0, &kind) == -1 ||
	    json_get_str(o, "name", NAME_MAX_LEN, 0, &name) == -1 ||
	    json_get_str(o, "value", strcmp(kind, "jwks") == 0 ? JWKS_MAX :
	    65536, 0, &value) == -1 ||
	    ch.nsecrets == sizeof(ch.secrets) / sizeof(ch.secrets[0]))
		return -1;
	s = &ch.secrets[ch.nsecrets++];
	if ((s->sr_kind = strdup(kind)) == NULL ||
	    (s->sr_name = strdup(name)) == NULL ||
	    (s->sr_value = strdup(value)) == NULL)
		fatal("strdup");
	return 0;
}

/* Put each received secret where the configuration references it. */
static int
child_secrets_apply(struct mcpbroker_conf *conf)
{
	struct secret_ref	*ref;
	struct provider_conf	*pv;
	struct server_conf	*srv;
	size_t			 i;

	for (i = 0; i < ch.nsecrets; i++) {
		ref = NULL;
		if (strcmp(ch.secrets[i].sr_kind, "provider") == 0 &&
		    (pv = config_find_provider(conf, ch.secrets[i].sr_name)))
			ref = &pv->pv_api_key;
		else if (strcmp(ch.secrets[i].sr_kind, "server") == 0 &&
		    (srv = config_find_server(conf, ch.secrets[i].sr_name)))
			ref = &srv->srv_bearer;
		else if (strcmp(ch.secrets[i].sr_kind, "jwks") == 0 &&
		    conf->c_auth.au_jwt)
			ref = &conf->c_auth.au_jwt_conf.jw_jwks;
		else if (strcmp(ch.secrets[i].sr_kind, "audit-signing-key") ==
		    0)
			ref = &conf->c_audit.ac_signing_key;
		if (ref == NULL || ref->sr_kind == SECRET_NONE)
			return -1;
		free(ref->sr_value);
		ref->sr_value = ch.secrets[i].sr_value;
		ch.secrets[i].sr_value = strdup("");
	}
	child_secrets_clear();
	return 0;
}

/* Log a configuration that does not parse, line by line. */
static struct mcpbroker_conf *
child_parse(void)
{
	struct mcpbroker_conf	*conf;
	char			*errs = NULL, *line, *save;
	size_t			 errslen = 0;
	FILE			*f;

	if (ch.text == NULL || (f = open_memstream(&errs, &errslen)) == NULL)
		return NULL;
	conf = config_parse_buffer("(from parent)", ch.text, strlen(ch.text),
	    f);
	fclose(f);
	for (line = strtok_r(errs, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save))
		log_warnx("%s", line);
	free(errs);
	free(ch.text);
	ch.text = NULL;
	return conf;
}

int
child_recv_done(struct peer *p, struct msg *m, struct json_object *o)
{
	struct mcpbroker_conf	*conf;
	int64_t			 uid, gid;
	int			 reload = 0;

	(void)m;
	if (json_get_int(o, "uid", 0, UINT32_MAX - 1, 0, &uid) == -1 ||
	    json_get_int(o, "gid", 0, UINT32_MAX - 1, 0, &gid) == -1 ||
	    json_get_bool(o, "reload", 1, &reload) == -1)
		return -1;
	if ((conf = child_parse()) == NULL || child_secrets_apply(conf) == -1) {
		config_free(conf);
		return -1;
	}
	if (ch.hooks->ch_configure(conf, reload) == -1) {
		config_free(conf);
		return -1;
	}
	if (!ch.sandboxed) {
		sandbox_apply(ch.kind, (uid_t)uid, (gid_t)gid);
		ch.sandboxed = 1;
	}
	return peer_send(p, MSG_CONF_ACK, m->m_hdr.mh_id, -1, NULL);
}

int
child_recv_start(struct peer *p, struct msg *m, struct json_object *o)
{
	(void)p;
	(void)m;
	(void)o;
	if (!ch.sandboxed)
		return -1;
	if (!ch.started) {
		ch.started = 1;
		log_debug("started");
		ch.hooks->ch_start();
	}
	return 0;
}

static void
child_parent_lost(struct peer *p, const char *why)
{
	(void)p;
	log_debug("parent channel: %s, exiting", why);
	event_base_loopbreak(ch.base);
}

/* Sandboxed children cannot reach syslog: their lines go to the parent. */
static void
child_log_sink(int priority, const char *line)
{
	static int		 busy;
	struct json_object	*o;

	if (busy || !peer_connected(&ch.parent)) {
		fprintf(stderr, "%s\n", line);
		return;
	}
	busy = 1;
	o = json_object_new_object();
	json_object_object_add(o, "priority", json_object_new_int(priority));
	json_object_object_add(o, "line", json_object_new_string(line));
	if (peer_send(&ch.parent, MSG_LOG, 0, -1, o) == -1)
		fprintf(stderr, "%s\n", line);	/* relayed all the same */
	json_object_put(o);
	busy = 0;
}

static void
child_signal(int sig, short ev, void *arg)
{
	(void)ev;
	(void)arg;
	log_debug("signal %d, exiting", sig);
	event_base_loopbreak(ch.base);
}

void
child_shutdown(void)
{
	event_base_loopbreak(ch.base);
}

/* A sibling we cannot work without is gone: fail closed. */
void
child_sibling_lost(struct peer *p, const char *why)
{
	log_warnx("lost the %s (%s), exiting", p->p_name, why);
	child_shutdown();
}

int
child_attach_sibling(struct peer *dst, struct msg *m, struct json_object *o,
    const char *want, enum proc_kind kind, const struct dispatch *table)
{
	const char *peer;

	if (json_get_str(o, "peer", 16, 0, &peer) == -1 ||
	    strcmp(peer, want) != 0 || peer_connected(dst)) {
		close(m->m_fd);
		return -1;
	}
	peer_init(dst, kind, want, table, child_sibling_lost, NULL);
	if (peer_attach(dst, ch.base, m->m_fd) == -1)
		fatalx("channel to the %s", want);
	return 0;
}

int
child_main(enum proc_kind kind, const char *name,
    const struct dispatch *parent_table, const struct child_hooks *hooks)
{
	sandbox_early();
	ch.kind = kind;
	ch.name = name;
	ch.hooks = hooks;
	log_procinit(name);
	log_set_sink(child_log_sink);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	if ((ch.base = event_base_new()) == NULL)
		fatalx("event_base_new");
	ch.sigterm = evsignal_new(ch.base, SIGTERM, child_signal, NULL);
	ch.sigint = evsignal_new(ch.base, SIGINT, child_signal, NULL);
	if (ch.sigterm == NULL || ch.sigint == NULL ||
	    evsignal_add(ch.sigterm, NULL) == -1 ||
	    evsignal_add(ch.sigint, NULL) == -1)
		fatalx("signal events");
	peer_init(&ch.parent, PROC_PARENT, "parent", parent_table,
	    child_parent_lost, NULL);
	if (peer_attach(&ch.parent, ch.base, PROC_CHAN_FD) == -1)
		fatalx("no channel to the parent on fd %d", PROC_CHAN_FD);
	event_base_dispatch(ch.base);
	return 0;
}
