#include <stddef.h>

#include "common/proto.h"

/* Names for logs; indexed by type, NULL for unused numbers. */
static const char *const msg_names[MSG_TYPE_MAX] = {
	[MSG_CONF_TEXT] = "CONF_TEXT",
	[MSG_CONF_SECRET] = "CONF_SECRET",
	[MSG_CONF_PEER] = "CONF_PEER",
	[MSG_CONF_LISTEN] = "CONF_LISTEN",
	[MSG_CONF_DONE] = "CONF_DONE",
	[MSG_START] = "START",
	[MSG_WORKER_DOWN] = "WORKER_DOWN",
	[MSG_CONF_ACK] = "CONF_ACK",
	[MSG_LOG] = "LOG",
	[MSG_READY_REQ] = "READY_REQ",
	[MSG_READY_REP] = "READY_REP",
	[MSG_WORKER_READY] = "WORKER_READY",
	[MSG_WORKER_STATE] = "WORKER_STATE",
	[MSG_CTL_STATUS] = "CTL_STATUS",
	[MSG_CTL_RELOAD] = "CTL_RELOAD",
	[MSG_CTL_REPLY] = "CTL_REPLY",
};

const char *
msg_type_str(uint16_t type)
{
	if (type < MSG_TYPE_MAX && msg_names[type] != NULL)
		return msg_names[type];
	return "UNKNOWN";
}
