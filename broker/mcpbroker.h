/*
 * What the mcpbroker processes share: their entry points and the child
 * bootstrap (broker/child.c) that receives configuration, applies the
 * sandbox and starts the process once the parent says so.
 */
#ifndef MCPBROKER_MCPBROKER_H
#define MCPBROKER_MCPBROKER_H

#include "broker/config.h"
#include "common/proc.h"

struct event_base;

struct opts {
	const char	*o_conffile;
	char	       **o_defines;	/* -D name=value */
	int		 o_foreground;	/* -d */
	int		 o_verbose;	/* -v */
	int		 o_check;	/* -n */
	const char	*o_self;	/* our executable, for re-exec */
};

int	parent_main(struct opts *);
int	frontend_main(void);
int	controller_main(void);
int	worker_main(const char *server);

/*
 * The child side of configuration.  A process hands child_main its dispatch
 * table for parent messages (built from the child_recv_* handlers plus its
 * own) and two hooks: configure takes the new configuration (returning -1
 * rejects it, which the child treats as a protocol failure: it exits and
 * the parent's supervision takes over), start runs once after the sandbox
 * is in place.
 */
struct child_hooks {
	int	(*ch_configure)(struct mcpbroker_conf *, int reload);
	void	(*ch_start)(void);
};

int			 child_main(enum proc_kind, const char *name,
			    const struct dispatch *parent_table,
			    const struct child_hooks *);
struct event_base	*child_base(void);
struct peer		*child_parent(void);
/* Stop the event loop: the process exits. */
void			 child_shutdown(void);
/* The lost() of a sibling channel the process cannot do without. */
void			 child_sibling_lost(struct peer *, const char *why);
/*
 * CONF_PEER: attach the descriptor as the channel to sibling `want`
 * (checked against the payload; once), whose loss ends the process.
 */
int			 child_attach_sibling(struct peer *, struct msg *,
			    struct json_object *, const char *want,
			    enum proc_kind, const struct dispatch *);

int	child_recv_conf_text(struct peer *, struct msg *, struct json_object *);
int	child_recv_secret(struct peer *, struct msg *, struct json_object *);
int	child_recv_done(struct peer *, struct msg *, struct json_object *);
int	child_recv_start(struct peer *, struct msg *, struct json_object *);

#define CONF_TEXT_MAX	(4u * 1024 * 1024)
#define NAME_MAX_LEN	64
/* A bearer credential: an API key, or a JWT (JWT_TOKEN_MAX in jwt.h). */
#define CREDENTIAL_MAX	8192

#endif
