/*
 * Tool-definition pinning, against a server that changes a tool after it
 * was trusted (a "rug pull"): the first definition seen of each tool is
 * pinned by the SHA-256 of its canonical form; a different one later is
 * kept pending until an administrator approves it, and under pin-policy
 * block the tool is withheld from every list and call meanwhile.
 */
#ifndef MCPBROKER_CONTROLLER_PINS_H
#define MCPBROKER_CONTROLLER_PINS_H

#include <stdint.h>

#include "broker/config.h"

struct json_object;
struct store_user;

#define PIN_HEX_LEN	64	/* SHA-256 in hex */

/*
 * The canonical form of what is pinned of a Tool: the members name,
 * title, description, inputSchema, outputSchema and annotations that it
 * has (others, such as icons and _meta, are not pinned), as JSON with
 * object keys sorted by their UTF-8 bytes at every depth, no whitespace,
 * strings escaping only '"', '\' and control characters (\u00XX), and
 * numbers by value: integers (and integral doubles below 2^53) in decimal,
 * other numbers as %.17g.  Returns malloc'd text.
 */
char	*pin_canonical(struct json_object *tool);
/* SHA-256 of the canonical form, lowercase hex. */
void	 pin_hash(struct json_object *tool, char hex[PIN_HEX_LEN + 1]);
/*
 * Which pinned members differ between two canonical forms, as a JSON array
 * of their names in canonical order (["description", "inputSchema"]).
 */
struct json_object *pin_changed(const char *old_canon, const char *new_canon);

/*
 * A server's tool list, as its worker reported it: pins each tool seen for
 * the first time, records a changed definition as pending (with an audit
 * row and a warning, once per new definition) and forgets a pending one
 * the server went back on.  Returns the names of the tools to withhold,
 * as an object {NAME: true}, or NULL for none.  Pins that cannot be read
 * or written withhold every tool of a block server (fail closed).
 */
struct json_object *pins_check(const char *server, enum pin_policy,
	    struct json_object *tools);

/* `mcpbrokerctl tools pending|approve|pins`: op "tools_...". */
void	pins_admin(uint64_t id, const char *op, struct json_object *o);

/*
 * The admin API (role admin only: pins are global): GET
 * /api/v1/admin/tools/pending and /pins (query: server), POST
 * /api/v1/admin/tools/approve {server, tool?, all?, sha256?}.
 */
void	pins_api_pending(uint64_t id, const struct store_user *,
	    const char *query);
void	pins_api_pins(uint64_t id, const struct store_user *,
	    const char *query);
void	pins_api_approve(uint64_t id, const struct store_user *,
	    struct json_object *body);

#endif
