/*
 * The one list of messages exchanged between mcpbroker processes and with
 * mcpbrokerctl.  Numbered in ranges by direction; each entry says who sends
 * it to whom and what the payload is.  Payloads are JSON objects unless an
 * entry says otherwise.  "+fd" means exactly one descriptor rides along
 * (SCM_RIGHTS); any other message carrying one is a protocol violation.
 */
#ifndef MCPBROKER_PROTO_H
#define MCPBROKER_PROTO_H

#include <stdint.h>

/* Bumped on any incompatible change; checked on every message. */
#define PROTO_VERSION		1

enum msg_type {
	MSG_NONE = 0,

	/* parent -> any child: configuration and start-up, 1..99 */
	MSG_CONF_TEXT = 1,	/* {text}: effective config, config grammar */
	MSG_CONF_SECRET,	/* {kind:"provider"|"server", name, value} */
	MSG_CONF_PEER,		/* +fd {peer:"controller"|"frontend"|"worker",
				 *  name?}: a channel to a sibling */
	MSG_CONF_LISTEN,	/* +fd {addr, port, tls, cert?, key?}: to the
				 *  frontend only; PEM text with tls */
	MSG_CONF_DONE,		/* {uid, gid, reload}: config complete; the
				 *  child applies it (and its sandbox) */
	MSG_START,		/* {}: begin serving */
	MSG_WORKER_DOWN,	/* to controller {name, status, restarts} */

	/* any child -> parent, 100..199 */
	MSG_CONF_ACK = 100,	/* {}: config applied, sandbox in place */
	MSG_LOG,		/* {priority, line}: a log line to write */

	/* frontend <-> controller, 200..299 */
	MSG_READY_REQ = 200,	/* frontend -> controller {} */
	MSG_READY_REP,		/* controller -> frontend
				 *  {ready, servers:[{name, state, error?}]} */

	/* controller <-> worker, 300..399 */
	MSG_WORKER_READY = 300,	/* worker -> controller {name} */
	MSG_WORKER_STATE,	/* worker -> controller {name, state, error?} */

	/* mcpbrokerctl <-> parent over the control socket, 400..499 */
	MSG_CTL_STATUS = 400,	/* ctl -> parent {} */
	MSG_CTL_RELOAD,		/* ctl -> parent {} */
	MSG_CTL_REPLY,		/* parent -> ctl {ok, error?, ...} */

	MSG_TYPE_MAX
};

const char	*msg_type_str(uint16_t);

#endif
