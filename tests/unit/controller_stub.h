/*
 * What controller.c and controller_api.c give the controller's other
 * modules, for the unit tests that link those modules without them: the
 * configuration a test sets, and the last answer kept for it to read.  An
 * API answer keeps its status; an admin answer has status 0, an admin
 * error -1 and the body {ok: false, error}.
 */
#ifndef TESTS_UNIT_CONTROLLER_STUB_H
#define TESTS_UNIT_CONTROLLER_STUB_H

#include <stdint.h>

struct json_object;
struct mcpbroker_conf;

extern struct mcpbroker_conf	*stub_conf;
extern struct json_object	*last_body;
extern int			 last_status;
extern uint64_t			 last_id;	/* the request it answered */
extern int			 replies;	/* how many so far */

/* Forget the last answer (between tests). */
void	stub_forget_reply(void);

#endif
