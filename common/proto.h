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
	MSG_INSTANCE_FD,	/* to worker, +fd {which:"stdin"|"stdout"|
				 *  "stderr"}; id: the worker's instance */
	MSG_INSTANCE_STARTED,	/* to worker {pid}; id: instance; after its
				 *  three INSTANCE_FDs */
	MSG_INSTANCE_EXIT,	/* to worker {status}; id: instance; it exited
				 *  or could not be started (status says why) */
	MSG_ADMIN_REQ,		/* to controller {op, ...}: "tools"|"call"
				 *  {server, tool?, arguments?, user?,
				 *  conversation?}, "user_add" {name, tenant?,
				 *  roles?}, "user_key"|"user_del" {name},
				 *  "user_list" {}: from mcpbrokerctl; id: the
				 *  parent's */
	MSG_CONNECTED,		/* to worker, +fd {}: a connected, non-blocking
				 *  TCP socket; id: the CONNECT's */
	MSG_CONNECT_FAILED,	/* to worker {error}; id: the CONNECT's */
	MSG_ADMIN_BACKUP,	/* to controller, +fd {}: copy the database
				 *  into this file (mcpbrokerctl backup);
				 *  answered by ADMIN_REP; id: the parent's */

	/* any child -> parent, 100..199 */
	MSG_CONF_ACK = 100,	/* {}: config applied, sandbox in place */
	MSG_LOG,		/* {priority, line}: a log line to write */
	MSG_INSTANCE_SPAWN,	/* worker -> parent {}; id: a new instance
				 *  number: start one of our stdio server */
	MSG_INSTANCE_STOP,	/* worker -> parent {}; id: instance: stop it
				 *  (process group SIGTERM, SIGKILL after 2 s) */
	MSG_ADMIN_REP,		/* controller -> parent {ok, error?, tools?,
				 *  result?}; id: the ADMIN_REQ's */
	MSG_CONNECT,		/* worker or controller -> parent {host,
				 *  port}; id: the child's request number:
				 *  open a TCP connection for me (a worker:
				 *  only to its server's url; the controller:
				 *  only to its providers' endpoints) */

	/* frontend <-> controller, 200..299 */
	MSG_READY_REQ = 200,	/* frontend -> controller {} */
	MSG_READY_REP,		/* controller -> frontend
				 *  {ready, servers:[{name, state, error?}]} */
	MSG_HTTP_REQ,		/* frontend -> controller {method, path,
				 *  query?, body?, peer?, credential?,
				 *  cookie?, csrf?, origin?, host?, tls}: an
				 *  API request (/llmchat/..., /api/v1/...,
				 *  /auth/...) with the caller's API key or
				 *  session cookie when it sent one and the
				 *  headers a browser's request is judged by;
				 *  id: ours */
	MSG_HTTP_REP,		/* controller -> frontend {status, body?,
				 *  stream?, session?}: the answer, or with
				 *  stream the start of an event stream;
				 *  session {id, max_age} or {clear} for the
				 *  cookie; id: the REQ's */
	MSG_HTTP_EVENT,		/* controller -> frontend {event, data}: one
				 *  SSE event of a stream; id: the REQ's */
	MSG_HTTP_END,		/* controller -> frontend {}: the stream is
				 *  over; id: the REQ's */
	MSG_HTTP_CANCEL,	/* frontend -> controller {}: the client went
				 *  away; id: the REQ's */

	/* controller <-> worker, 300..399 */
	MSG_WORKER_READY = 300,	/* worker -> controller {name} */
	MSG_WORKER_STATE,	/* worker -> controller {name, state, error?} */
	MSG_WORKER_TOOLS,	/* worker -> controller {name, tools:[Tool],
				 *  capabilities?}: the server's tools (and
				 *  what it said it can do), after every
				 *  change */
	MSG_TOOL_CALL,		/* controller -> worker {tool, arguments,
				 *  owner?, conversation?, timeout_ms?}; id:
				 *  the call; owner: TENANT/NAME (owner_key) */
	MSG_TOOL_RESULT,	/* worker -> controller {result} or
				 *  {error:{code, message}}; id: the call */
	MSG_TOOL_PROGRESS,	/* worker -> controller {progress, total?,
				 *  message?}; id: the call */
	MSG_TOOL_CANCEL,	/* controller -> worker {reason?}; id: the call */
	MSG_RELEASE,		/* controller -> worker {owner?,
				 *  conversation?}: that chat session ended;
				 *  stop the instances kept for it */
	MSG_SERVER_REQ,		/* controller -> worker {method, params,
				 *  owner?, conversation?, timeout_ms?}: a
				 *  resources or prompts request of an MCP
				 *  client of ours; id: a call, answered by
				 *  TOOL_RESULT and cancelled by TOOL_CANCEL */
	MSG_SERVER_NOTIFY,	/* worker -> controller {method, params?,
				 *  owner?, conversation?}: the server says
				 *  its resources or prompts changed; owner or
				 *  conversation name the instance's key */

	/* mcpbrokerctl <-> parent over the control socket, 400..499 */
	MSG_CTL_STATUS = 400,	/* ctl -> parent {} */
	MSG_CTL_RELOAD,		/* ctl -> parent {} */
	MSG_CTL_ADMIN,		/* ctl -> parent {op, ...}: an administrator's
				 *  request for the controller (server tools
				 *  and calls, users and keys), passed on as
				 *  ADMIN_REQ */
	MSG_CTL_REPLY,		/* parent -> ctl {ok, error?, ...} */
	MSG_CTL_BACKUP,		/* ctl -> parent, +fd {}: a file opened for
				 *  writing, passed on as ADMIN_BACKUP */

	MSG_TYPE_MAX
};

const char	*msg_type_str(uint16_t);

#endif
