/*
 * A sandboxed child's TCP connections (a worker's, the controller's),
 * opened by the parent: the connector for its HTTP client, and the
 * handlers for the parent's answers (CONNECTED +fd, CONNECT_FAILED).
 */
#ifndef MCPBROKER_CHILD_CONNECT_H
#define MCPBROKER_CHILD_CONNECT_H

#include <stdint.h>

#include "common/http_client.h"

struct json_object;
struct msg;
struct peer;

/* An http_connect_fn; connector_arg is unused. */
void	child_connector(const char *host, uint16_t port,
	    http_connected_fn done, void *done_arg, void *connector_arg);

int	child_recv_connected(struct peer *, struct msg *,
	    struct json_object *);
int	child_recv_connect_failed(struct peer *, struct msg *,
	    struct json_object *);

#endif
