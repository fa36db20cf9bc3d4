/*
 * The audit trail's text.  Export formats are for collectors that split
 * on newlines and on their own delimiters; everything a row holds came
 * from somewhere (a model's tool arguments, an edited database), so every
 * value is escaped for the place it goes, and no record ever contains a
 * raw control character or a Unicode line separator.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "broker/audit_format.h"
#include "common/log.h"

/* ---- masking ---- */

int
audit_glob(const char *p, const char *s, int icase)
{
	const char	*star = NULL, *resume = NULL;

	/* Iterative, backtracking to the last star only: linear enough. */
	while (*s != '\0') {
		if (*p == '*') {
			star = p++;
			resume = s;
		} else if (*p != '\0' && (*p == '?' || *p == *s || (icase &&
		    tolower((unsigned char)*p) ==
		    tolower((unsigned char)*s)))) {
			p++;
			s++;
		} else if (star != NULL) {
			p = star + 1;
			s = ++resume;
		} else
			return 0;
	}
	while (*p == '*')
		p++;
	return *p == '\0';
}

static int
key_masked(const char *key, char *const *globs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (audit_glob(globs[i], key, 1))
			return 1;
	return 0;
}

static struct json_object *
mask_value(struct json_object *v, char *const *globs, size_t n,
    unsigned int *count)
{
	struct json_object	*out;
	size_t			 i, len;

	if (json_object_is_type(v, json_type_array)) {
		len = json_object_array_length(v);
		out = json_object_new_array_ext((int)len);
		for (i = 0; i < len; i++)
			json_object_array_add(out, mask_value(
			    json_object_array_get_idx(v, i), globs, n, count));
		return out;
	}
	if (!json_object_is_type(v, json_type_object))
		return json_object_get(v);	/* scalars are shared */
	out = json_object_new_object();
	json_object_object_foreach(v, k, member) {
		if (key_masked(k, globs, n)) {
			json_object_object_add(out, k,
			    json_object_new_string(AUDIT_MASKED));
			(*count)++;
		} else
			json_object_object_add(out, k, mask_value(member,
			    globs, n, count));
	}
	return out;
}

struct json_object *
audit_mask(struct json_object *args, char *const *globs, size_t nglobs,
    unsigned int *masked)
{
	unsigned int count = 0;
	struct json_object *out;

	out = mask_value(args, globs, nglobs, &count);
	if (masked != NULL)
		*masked = count;
	return out;
}

/* ---- time ---- */

static int
all_digits(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!isdigit((unsigned char)s[i]))
			return 0;
	return n > 0;
}

/* "YYYY-MM-DD[(T| )HH:MM[:SS[.fff]]][Z]", UTC. */
static int
iso_parse(const char *s, int64_t *ms)
{
	struct tm	tm, chk;
	int		y, mo, d, h = 0, mi = 0, sec = 0;
	int		frac = 0, fd = 0, n = 0;
	time_t		t;

	if (strlen(s) < 10 || !all_digits(s, 4) || s[4] != '-' ||
	    !all_digits(s + 5, 2) || s[7] != '-' || !all_digits(s + 8, 2))
		return -1;
	y = atoi(s);
	mo = atoi(s + 5);
	d = atoi(s + 8);
	s += 10;
	if ((*s == 'T' || *s == ' ') && all_digits(s + 1, 2) && s[3] == ':' &&
	    all_digits(s + 4, 2)) {
		h = atoi(s + 1);
		mi = atoi(s + 4);
		s += 6;
		if (*s == ':' && all_digits(s + 1, 2)) {
			sec = atoi(s + 1);
			s += 3;
			if (*s == '.') {
				for (s++; isdigit((unsigned char)*s); s++, n++)
					if (n < 3) {
						frac = frac * 10 + (*s - '0');
						fd++;
					}
				if (n == 0)
					return -1;
				for (; fd < 3; fd++)
					frac *= 10;
			}
		}
	}
	if (*s == 'Z')
		s++;
	if (*s != '\0' || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 ||
	    h > 23 || mi > 59 || sec > 59)
		return -1;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	/* timegm normalises 31 April into May: refuse what moved. */
	if ((t = timegm(&tm)) == (time_t)-1 || gmtime_r(&t, &chk) == NULL ||
	    chk.tm_mday != d || chk.tm_mon != mo - 1)
		return -1;
	*ms = (int64_t)t * 1000 + frac;
	return 0;
}

int
audit_time_parse(const char *s, int64_t now_ms, int64_t *ms)
{
	static const struct {
		char	 unit;
		int64_t	 ms;
	} units[] = {
		{ 's', 1000 }, { 'm', 60000 }, { 'h', 3600000 },
		{ 'd', 86400000 },
	};
	size_t	len = strlen(s), i;
	int64_t	n;

	if (len == 0 || len > 40)
		return -1;
	if (all_digits(s, len)) {
		if (len > 15)
			return -1;
		*ms = strtoll(s, NULL, 10);
		return 0;
	}
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (s[len - 1] == units[i].unit && all_digits(s, len - 1)) {
			if (len - 1 > 9)
				return -1;
			n = strtoll(s, NULL, 10) * units[i].ms;
			*ms = n < now_ms ? now_ms - n : 0;
			return 0;
		}
	return iso_parse(s, ms);
}

void
audit_time_str(int64_t ms, char *buf, size_t len)
{
	time_t		t = (time_t)(ms / 1000);
	struct tm	tm;
	char		b[24];

	if (ms < 0 || gmtime_r(&t, &tm) == NULL ||
	    strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		snprintf(buf, len, "%lld", (long long)ms);
	else
		snprintf(buf, len, "%s.%03dZ", b, (int)(ms % 1000));
}

/* ---- export formats ---- */

int
audit_format_parse(const char *name, enum audit_format *f)
{
	if (strcmp(name, "jsonl") == 0)
		*f = AUDIT_JSONL;
	else if (strcmp(name, "syslog") == 0)
		*f = AUDIT_SYSLOG;
	else if (strcmp(name, "cef") == 0)
		*f = AUDIT_CEF;
	else
		return -1;
	return 0;
}

enum esc {
	ESC_JSON,	/* already JSON: only what json-c lets through */
	ESC_SD,		/* RFC 5424 PARAM-VALUE: " \ ] */
	ESC_CEF_HEAD,	/* CEF header field: \ | */
	ESC_CEF_EXT,	/* CEF extension value: \ = and \n \r */
};

/* Length of the valid UTF-8 sequence at p, or 0. */
static size_t
utf8_len(const unsigned char *p)
{
	size_t	n, i;

	if (*p >= 0xc2 && *p <= 0xdf)
		n = 2;
	else if (*p >= 0xe0 && *p <= 0xef)
		n = 3;
	else if (*p >= 0xf0 && *p <= 0xf4)
		n = 4;
	else
		return 0;
	for (i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((n == 3 && ((*p == 0xe0 && p[1] < 0xa0) || (*p == 0xed &&
	    p[1] > 0x9f))) || (n == 4 && ((*p == 0xf0 && p[1] < 0x90) ||
	    (*p == 0xf4 && p[1] > 0x8f))))
		return 0;	/* overlong, surrogate, beyond U+10FFFF */
	return n;
}

/* C1 controls, NEL and the Unicode line and paragraph separators. */
static unsigned int
line_breaking(const unsigned char *p, size_t n)
{
	if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)
		return p[1];
	if (n == 3 && p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 ||
	    p[2] == 0xa9))
		return 0x2000 | (p[2] - 0x80);
	return 0;
}

static int
needs_backslash(unsigned char c, enum esc mode)
{
	switch (mode) {
	case ESC_SD:
		return c == '\\' || c == '"' || c == ']';
	case ESC_CEF_HEAD:
		return c == '\\' || c == '|';
	case ESC_CEF_EXT:
		return c == '\\' || c == '=';
	default:
		return 0;
	}
}

/*
 * Controls and line separators become \uXXXX (and \n \r in CEF
 * extensions, as the spec says).  In JSON that is JSON's own escape; in
 * syslog a backslash the data had is itself escaped, so the sequence
 * cannot be forged; CEF defines no \u, so there it is a literal
 * backslash (\\uXXXX).  A byte that is not UTF-8 becomes U+FFFD in JSON
 * and \xHH elsewhere.
 */
static void
put_escaped(FILE *fp, const char *s, enum esc mode)
{
	const unsigned char	*p = (const unsigned char *)s;
	const char		*bs;
	unsigned int		 u;
	size_t			 n;

	bs = mode == ESC_CEF_HEAD || mode == ESC_CEF_EXT ? "\\\\" : "\\";
	while (*p != '\0') {
		if (needs_backslash(*p, mode)) {
			fputc('\\', fp);
			fputc(*p++, fp);
		} else if (mode == ESC_CEF_EXT && (*p == '\n' || *p == '\r')) {
			fputs(*p++ == '\n' ? "\\n" : "\\r", fp);
		} else if (*p < 0x20 || *p == 0x7f) {
			fprintf(fp, "%su%04x", bs, *p++);
		} else if (*p < 0x80) {
			fputc(*p++, fp);
		} else if ((n = utf8_len(p)) == 0) {
			if (mode == ESC_JSON)
				fputs("\\ufffd", fp);
			else
				fprintf(fp, "%sx%02x", bs, *p);
			p++;
		} else if ((u = line_breaking(p, n)) != 0) {
			fprintf(fp, "%su%04x", bs, u);
			p += n;
		} else {
			fwrite(p, 1, n, fp);
			p += n;
		}
	}
}

static const char *
str_of(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static int
is_str(struct json_object *o, const char *key, const char *want)
{
	const char *v = str_of(o, key);

	return v != NULL && strcmp(v, want) == 0;
}

/* Refusals and failures stand out in a SIEM. */
static int
alarming(struct json_object *detail)
{
	return is_str(detail, "decision", "deny") ||
	    is_str(detail, "result", "failure") ||
	    is_str(detail, "outcome", "error") ||
	    is_str(detail, "event", "worker_down");
}

/* RFC 5424 PRINTUSASCII, 1..max, minus the SD-NAME specials if sdname. */
static int
printusascii(const char *s, size_t max, int sdname)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++)
		if (i == max || (unsigned char)s[i] < 0x21 ||
		    (unsigned char)s[i] > 0x7e || (sdname && (s[i] == '=' ||
		    s[i] == ']' || s[i] == '"')))
			return 0;
	return i > 0;
}

static void
sd_param(FILE *fp, const char *name, const char *value)
{
	if (value == NULL)
		return;
	fprintf(fp, " %s=\"", name);
	put_escaped(fp, value, ESC_SD);
	fputc('"', fp);
}

/* detail's top-level scalars, for collectors that index SD-PARAMs. */
static void
sd_detail(FILE *fp, struct json_object *detail)
{
	if (!json_object_is_type(detail, json_type_object))
		return;
	fputs("[detail@" AUDIT_SYSLOG_PEN, fp);
	json_object_object_foreach(detail, k, v) {
		if (!printusascii(k, 32, 1))
			continue;
		if (json_object_is_type(v, json_type_string) ||
		    json_object_is_type(v, json_type_int) ||
		    json_object_is_type(v, json_type_double) ||
		    json_object_is_type(v, json_type_boolean))
			sd_param(fp, k, json_object_get_string(v));
	}
	fputc(']', fp);
}

char *
audit_json_text(struct json_object *o)
{
	char	*buf = NULL;
	size_t	 len = 0;
	FILE	*fp;

	if ((fp = open_memstream(&buf, &len)) == NULL)
		fatal("open_memstream");
	put_escaped(fp, json_object_to_json_string_ext(o,
	    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE), ESC_JSON);
	if (fclose(fp) != 0)
		fatal("audit_json_text");
	return buf;
}

/*
 * <PRI>1 TIMESTAMP HOSTNAME mcpbroker - KIND [mcpbroker@32473 id= user=
 * tenant= prev_hash= hash=][detail@32473 ...] DETAIL-JSON.  Facility 13
 * (log audit); notice, or warning for a refusal or failure.
 */
static void
format_syslog(FILE *fp, struct json_object *row, const char *host)
{
	struct json_object	*detail = json_object_object_get(row, "detail");
	const char		*kind = str_of(row, "kind");
	char			 ts[AUDIT_TIME_LEN], *text;

	audit_time_str(json_object_get_int64(json_object_object_get(row,
	    "ts")), ts, sizeof(ts));
	fprintf(fp, "<%d>1 %s %s mcpbroker - %s [mcpbroker@" AUDIT_SYSLOG_PEN,
	    13 * 8 + (alarming(detail) ? 4 : 5), ts, host != NULL &&
	    printusascii(host, 255, 0) ? host : "-", kind != NULL &&
	    printusascii(kind, 32, 0) ? kind : "-");
	sd_param(fp, "id", json_object_get_string(json_object_object_get(row,
	    "id")));
	sd_param(fp, "user", str_of(row, "user"));
	sd_param(fp, "tenant", str_of(row, "tenant"));
	sd_param(fp, "prev_hash", str_of(row, "prev_hash"));
	sd_param(fp, "hash", str_of(row, "hash"));
	fputc(']', fp);
	sd_detail(fp, detail);
	fputc(' ', fp);
	text = audit_json_text(detail);
	fputs(text, fp);
	free(text);
}

static void
cef_ext(FILE *fp, const char *key, const char *value)
{
	if (value == NULL)
		return;
	fprintf(fp, " %s=", key);
	put_escaped(fp, value, ESC_CEF_EXT);
}

static void
cef_custom(FILE *fp, int n, const char *label, const char *value)
{
	char key[16];

	if (value == NULL)
		return;
	snprintf(key, sizeof(key), "cs%dLabel", n);
	cef_ext(fp, key, label);
	snprintf(key, sizeof(key), "cs%d", n);
	cef_ext(fp, key, value);
}

/* What happened, in a word: the first of these the detail has. */
static const char *
cef_verb(struct json_object *detail)
{
	static const char *const keys[] = { "decision", "outcome", "result",
	    "answer", "op", "event" };
	const char	*v;
	size_t		 i;

	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if ((v = str_of(detail, keys[i])) != NULL)
			return v;
	return NULL;
}

static void
cef_tool(FILE *fp, struct json_object *detail)
{
	const char	*server = str_of(detail, "server");
	const char	*tool = str_of(detail, "tool");
	char		*id;

	if (server == NULL || tool == NULL) {
		cef_custom(fp, 2, "tool", str_of(detail, "name"));
		return;
	}
	if (asprintf(&id, "%s.%s", server, tool) == -1)
		fatal("asprintf");
	cef_custom(fp, 2, "tool", id);
	free(id);
}

/*
 * CEF:0|mcpbroker|mcpbroker|VERSION|KIND|KIND VERB|SEVERITY|rt= externalId=
 * suser= cs1=tenant cs2=tool act= outcome= cs3=conversation cn1=intent
 * cs4=prev_hash cs5=hash msg=DETAIL-JSON
 */
static void
format_cef(FILE *fp, struct json_object *row)
{
	struct json_object	*detail = json_object_object_get(row, "detail");
	struct json_object	*intent;
	const char		*kind = str_of(row, "kind"), *verb;
	char			*text;

	if (kind == NULL)
		kind = "";
	verb = cef_verb(detail);
	fputs("CEF:0|mcpbroker|mcpbroker|" MCPBROKER_VERSION "|", fp);
	put_escaped(fp, kind, ESC_CEF_HEAD);
	fputc('|', fp);
	put_escaped(fp, kind, ESC_CEF_HEAD);
	if (verb != NULL) {
		fputc(' ', fp);
		put_escaped(fp, verb, ESC_CEF_HEAD);
	}
	fprintf(fp, "|%d|rt=%lld", alarming(detail) ? 7 : 3, (long long)
	    json_object_get_int64(json_object_object_get(row, "ts")));
	cef_ext(fp, "externalId", json_object_get_string(
	    json_object_object_get(row, "id")));
	cef_ext(fp, "suser", str_of(row, "user"));
	cef_custom(fp, 1, "tenant", str_of(row, "tenant"));
	if (strcmp(kind, "tool_call") == 0) {
		cef_tool(fp, detail);
		cef_ext(fp, "act", str_of(detail, "decision"));
	}
	cef_ext(fp, "outcome", str_of(detail, "outcome") != NULL ?
	    str_of(detail, "outcome") : str_of(detail, "result") != NULL ?
	    str_of(detail, "result") : str_of(detail, "answer"));
	cef_custom(fp, 3, "conversation", str_of(detail, "conversation"));
	if (json_object_object_get_ex(detail, "intent", &intent) &&
	    json_object_is_type(intent, json_type_int)) {
		cef_ext(fp, "cn1Label", "intent");
		cef_ext(fp, "cn1", json_object_get_string(intent));
	}
	cef_custom(fp, 4, "prev_hash", str_of(row, "prev_hash"));
	cef_custom(fp, 5, "hash", str_of(row, "hash"));
	/* JSON's escapes first: the CEF ones then only double them */
	text = audit_json_text(detail);
	cef_ext(fp, "msg", text);
	free(text);
}

char *
audit_format_row(enum audit_format f, struct json_object *row,
    const char *host)
{
	char	*buf = NULL;
	size_t	 len = 0;
	FILE	*fp;

	if (f == AUDIT_JSONL)
		return audit_json_text(row);
	if ((fp = open_memstream(&buf, &len)) == NULL)
		fatal("open_memstream");
	if (f == AUDIT_SYSLOG)
		format_syslog(fp, row, host);
	else
		format_cef(fp, row);
	if (fclose(fp) != 0)
		fatal("audit_format_row");
	return buf;
}

/* ---- checkpoints ---- */

int
audit_checkpoint_text(char *buf, size_t len, int64_t last_id,
    const char *head_hex, int64_t rows, const char *time)
{
	size_t	i;
	int	n;

	if (last_id < 0 || rows < 0 || strlen(head_hex) != 64 ||
	    !printusascii(time, 64, 0))
		return -1;
	for (i = 0; i < 64; i++)
		if (!isdigit((unsigned char)head_hex[i]) &&
		    (head_hex[i] < 'a' || head_hex[i] > 'f'))
			return -1;
	n = snprintf(buf, len, "%s\nlast_id=%lld\nhead=%s\nrows=%lld\n"
	    "time=%s\n", AUDIT_CHECKPOINT_DOMAIN, (long long)last_id,
	    head_hex, (long long)rows, time);
	return n > 0 && (size_t)n < len ? n : -1;
}
