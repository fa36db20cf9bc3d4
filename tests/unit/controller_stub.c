/*
 * The controller's answers and configuration, stubbed for unit tests
 * (controller_stub.h).
 */
#include <stdint.h>

#include <json-c/json.h>

#include "broker/config.h"
#include "broker/controller.h"
#include "broker/controller_store.h"
#include "tests/unit/controller_stub.h"

struct mcpbroker_conf	*stub_conf;
struct json_object	*last_body;
int			 last_status;
uint64_t		 last_id;
int			 replies;

struct mcpbroker_conf *
controller_conf(void)
{
	return stub_conf;
}

void
api_reply(uint64_t id, int status, struct json_object *body)
{
	json_object_put(last_body);
	last_body = body;
	last_status = status;
	last_id = id;
	replies++;
}

void
api_error(uint64_t id, int status, const char *code, const char *fmt, ...)
{
	struct json_object *o = json_object_new_object();

	(void)fmt;
	json_object_object_add(o, "code", json_object_new_string(code));
	api_reply(id, status, o);
}

void
admin_reply(uint64_t id, struct json_object *reply)
{
	api_reply(id, 0, reply);
}

void
admin_error(uint64_t id, const char *message)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "ok", json_object_new_boolean(0));
	json_object_object_add(o, "error", json_object_new_string(message));
	api_reply(id, -1, o);
}

void
stub_forget_reply(void)
{
	json_object_put(last_body);
	last_body = NULL;
	last_status = 0;
}
