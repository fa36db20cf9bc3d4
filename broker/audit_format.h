/*
 * The audit trail's text: masking arguments before they are recorded,
 * the export formats (JSON Lines, RFC 5424 syslog, ArcSight CEF), time
 * arguments for filters, and the canonical text a checkpoint signs.  No
 * database and no event loop here, so that mcpbrokerctl, the controller
 * and the tests share one definition.
 */
#ifndef MCPBROKER_AUDIT_FORMAT_H
#define MCPBROKER_AUDIT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

struct json_object;

#define AUDIT_MASKED		"***"
#define AUDIT_TIME_LEN		32	/* "2026-01-31T12:00:00.123Z" */
#define AUDIT_CHECKPOINT_VERSION 1
#define AUDIT_CHECKPOINT_DOMAIN	"mcpbroker-audit-checkpoint-v1"
/* RFC 5612's documentation number: mcpbroker has no enterprise number. */
#define AUDIT_SYSLOG_PEN	"32473"

enum audit_format {
	AUDIT_JSONL,
	AUDIT_SYSLOG,
	AUDIT_CEF,
};

/*
 * A copy of args in which the value of every member, at any depth, whose
 * key matches one of the globs (`*`, `?`, case-insensitive, the whole
 * key) is "***".  *masked counts them (may be NULL).
 */
struct json_object *audit_mask(struct json_object *args,
	    char *const *globs, size_t nglobs, unsigned int *masked);

/* `*` any run, `?` one byte; icase folds ASCII letters. */
int	audit_glob(const char *pattern, const char *s, int icase);

/*
 * A filter's time: milliseconds since the epoch ("1767225600000"), ISO 8601
 * in UTC ("2026-01-01", "2026-01-01T12:00", "2026-01-01T12:00:00.5Z"), or a
 * duration meaning that long before now_ms ("90s", "30m", "1h", "7d").
 * 0, or -1 for anything else.
 */
int	audit_time_parse(const char *s, int64_t now_ms, int64_t *ms);
/* "2026-01-31T12:00:00.123Z" */
void	audit_time_str(int64_t ms, char *buf, size_t len);

int	audit_format_parse(const char *name, enum audit_format *);

/*
 * Compact JSON with the line breaks json-c lets through (U+0085, U+2028,
 * U+2029, DEL) escaped too, and bad UTF-8 as U+FFFD: safe on one line of
 * a terminal or a log.  malloc'd.
 */
char	*audit_json_text(struct json_object *);

/*
 * One exported row ({id, ts, kind, user, tenant, detail, prev_hash, hash},
 * as audit_export builds it) as one line without its newline, in the
 * format; host is the syslog HOSTNAME ("-" if NULL or unusable).  Never a
 * raw control character, whatever the row holds.  malloc'd.
 */
char	*audit_format_row(enum audit_format, struct json_object *row,
	    const char *host);

/*
 * The bytes a checkpoint's signature covers (docs/ARCHITECTURE.md):
 * "mcpbroker-audit-checkpoint-v1\nlast_id=N\nhead=HEX\nrows=N\ntime=T\n".
 * Returns its length, or -1 if it does not fit or a field is unusable.
 */
int	audit_checkpoint_text(char *buf, size_t len, int64_t last_id,
	    const char *head_hex, int64_t rows, const char *time);

#endif
