/*
 * mcpbroker.conf: a hand-written lexer and recursive-descent parser.
 *
 * Newlines are plain whitespace, so a statement is recognised by its leading
 * keyword and ends where the next keyword begins.  After an error the parser
 * skips to the next keyword of the enclosing level (or the closing brace) and
 * carries on, so that one run reports several mistakes.  Every loop consumes
 * at least one token per round and the lexer turns into an endless end of
 * file once MAX_ERRORS is reached, so garbage input always terminates.
 */

#include <sys/stat.h>
#include <sys/un.h>

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "broker/config.h"
#include "broker/websec.h"
#include "common/addrcheck.h"
#include "common/http_client.h"
#include "common/log.h"

#define MAX_TOKEN	4096		/* bytes in one word or string */
#define MAX_ERRORS	50		/* then give up */
#define MAX_INCLUDE	16		/* include nesting */
#define MAX_FILE	(4 * 1024 * 1024)
#define MAX_NAME	32		/* server names: part of tool ids */
#define MAX_OTHER_NAME	64		/* provider and toolset names */
#define MAX_DURATION_MS	(365ULL * 24 * 3600 * 1000)
#define MAX_PRICE	1e12
#define MAX_DECIMALS	12
#define DESC_LEN	160		/* "server \"files\"" and friends */

enum tok_type {
	T_EOF,
	T_WORD,
	T_STRING,
	T_LBRACE,
	T_RBRACE,
	T_EQUALS,
};

struct token {
	enum tok_type	 tk_type;
	char		*tk_val;	/* WORD and STRING only */
	int		 tk_line;
	int		 tk_bad;	/* undefined macro: already reported */
};

/* One open file or buffer; includes stack up. */
struct frame {
	char		*fr_name;
	char		*fr_buf;	/* owned copy read from a file */
	const char	*fr_data;
	size_t		 fr_len;
	size_t		 fr_pos;
	int		 fr_line;
	dev_t		 fr_dev;
	ino_t		 fr_ino;
};

struct macro {
	struct macro	*m_next;
	char		*m_name;
	char		*m_value;
	int		 m_cmdline;	/* -D wins over the file */
};

/* A server named by a tool glob, checked once every server is known. */
struct ref {
	struct ref	*rf_next;
	char		*rf_owner;
	char		*rf_server;
	char		*rf_file;
	int		 rf_line;
};

/* Where a setting that may appear only once was first seen. */
struct where {
	char		*wh_file;
	int		 wh_line;
};

struct parser {
	struct mcpbroker_conf	*p_conf;
	FILE			*p_errs;
	int			 p_nerrors;
	int			 p_stop;
	int			 p_allow_include;
	struct where		 p_audit_at;
	struct frame		*p_frames[MAX_INCLUDE + 1];
	int			 p_nframes;
	struct token		 p_la;		/* one token of lookahead */
	int			 p_have_la;
	struct macro		*p_macros;
	struct ref		*p_refs;
	struct mcpbroker_conf	*p_trash;	/* dropped objects, freed last */
	struct where		 p_user_at;
	struct where		 p_state_at;
	struct where		 p_instance_user_at;
	struct where		 p_control_at;
	struct where		 p_auth_at;
	struct where		 p_limits_at;
	struct where		 p_retention_at;
	struct where		 p_store_results_at;
	struct where		 p_log_format_at;
};

struct blk;
struct kw {
	const char	*kw_name;
	int		(*kw_fn)(struct parser *, struct blk *);
	int		 kw_repeat;	/* may appear more than once */
};

#define BLK_MAXKW	32
/* The block (or top level) being parsed, for handlers and messages. */
struct blk {
	const struct kw	*b_tab;
	const char	*b_desc;	/* "server \"files\"" */
	void		*b_obj;
	int		 b_line;	/* line of the current keyword */
	int		 b_seen[BLK_MAXKW];	/* first line of each keyword */
};

static void	 parse_top(struct parser *);

/* Memory: running out while parsing the configuration is not recoverable. */

static void *
xcalloc(size_t n, size_t sz)
{
	void	*p;

	if ((p = calloc(n, sz)) == NULL)
		fatal("calloc");
	return p;
}

static char *
xstrdup(const char *s)
{
	char	*p;

	if ((p = strdup(s)) == NULL)
		fatal("strdup");
	return p;
}

static char *
xstrndup(const char *s, size_t n)
{
	char	*p;

	if ((p = strndup(s, n)) == NULL)
		fatal("strndup");
	return p;
}

/* Append s to the NULL-terminated vector *v of *n entries; takes s. */
static void
strv_push(char ***v, size_t *n, char *s)
{
	char	**nv;

	if ((nv = reallocarray(*v, *n + 2, sizeof(*nv))) == NULL)
		fatal("reallocarray");
	nv[(*n)++] = s;
	nv[*n] = NULL;
	*v = nv;
}

static void
set_str(char **dst, char *v)
{
	free(*dst);
	*dst = v;
}

/* Errors */

static struct frame *
cur(struct parser *p)
{
	return p->p_frames[p->p_nframes - 1];
}

static void perr_at(struct parser *, const char *, int, const char *, ...)
	    __attribute__((format(printf, 4, 5)));
static void perr(struct parser *, int, const char *, ...)
	    __attribute__((format(printf, 3, 4)));
static void vperr_at(struct parser *, const char *, int, const char *,
	    va_list) __attribute__((format(printf, 4, 0)));

static void
vperr_at(struct parser *p, const char *file, int line, const char *fmt,
    va_list ap)
{
	if (p->p_stop)
		return;
	if (p->p_nerrors >= MAX_ERRORS) {
		fprintf(p->p_errs, "%s:%d: too many errors, giving up\n",
		    file, line);
		p->p_stop = 1;
		return;
	}
	p->p_nerrors++;
	fprintf(p->p_errs, "%s:%d: ", file, line);
	vfprintf(p->p_errs, fmt, ap);
	fputc('\n', p->p_errs);
}

static void
perr_at(struct parser *p, const char *file, int line, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vperr_at(p, file, line, fmt, ap);
	va_end(ap);
}

static void
perr(struct parser *p, int line, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	vperr_at(p, cur(p)->fr_name, line, fmt, ap);
	va_end(ap);
}

/*
 * Quote s for a message, escaping what the lexer would, and cut it short:
 * messages must stay one line and readable whatever the input was.
 */
static const char *
quote(const char *s, char *buf, size_t sz)
{
	size_t	n = 0;
	const unsigned char *u = (const unsigned char *)s;
	char	esc[8];
	size_t	i, el;

	buf[n++] = '"';
	for (i = 0; u[i] != '\0'; i++) {
		if (u[i] == '"' || u[i] == '\\')
			snprintf(esc, sizeof(esc), "\\%c", u[i]);
		else if (u[i] == '\n')
			snprintf(esc, sizeof(esc), "\\n");
		else if (u[i] == '\t')
			snprintf(esc, sizeof(esc), "\\t");
		else if (u[i] < 0x20 || u[i] == 0x7f)
			snprintf(esc, sizeof(esc), "\\x%02x", u[i]);
		else
			snprintf(esc, sizeof(esc), "%c", u[i]);
		el = strlen(esc);
		if (n + el + 5 > sz) {
			memcpy(buf + n, "...", 3);
			n += 3;
			break;
		}
		memcpy(buf + n, esc, el);
		n += el;
	}
	buf[n++] = '"';
	buf[n] = '\0';
	return buf;
}

#define QBUF	96

static const char *
tok_desc(const struct token *t, char *buf, size_t sz)
{
	switch (t->tk_type) {
	case T_EOF:
		return "end of file";
	case T_LBRACE:
		return "\"{\"";
	case T_RBRACE:
		return "\"}\"";
	case T_EQUALS:
		return "\"=\"";
	case T_STRING:
		return quote(t->tk_val, buf, sz);
	case T_WORD:
		/* a word is printable by construction; cut it short */
		if (strlen(t->tk_val) + 4 > sz)
			snprintf(buf, sz, "%.*s...", (int)(sz - 4), t->tk_val);
		else
			snprintf(buf, sz, "%s", t->tk_val);
		return buf;
	}
	return "?";
}

/* Lexer */

static int
is_word_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '/' ||
	    c == ':' || c == '*' || c == '-';
}

static int
is_ident_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '_';
}

static int
fr_peekc(const struct frame *f, size_t ahead)
{
	if (f->fr_pos + ahead >= f->fr_len)
		return EOF;
	return (unsigned char)f->fr_data[f->fr_pos + ahead];
}

/* The last line with text on it, not the empty one after the last newline. */
static int
eof_line(const struct frame *f)
{
	if (f->fr_len > 0 && f->fr_data[f->fr_len - 1] == '\n' &&
	    f->fr_line > 1)
		return f->fr_line - 1;
	return f->fr_line;
}

static void
lex_string(struct parser *p, struct frame *f, struct token *t)
{
	char	buf[MAX_TOKEN + 1];
	size_t	n = 0;
	int	c, e, toolong = 0, start = f->fr_line;

	f->fr_pos++;
	for (;;) {
		if ((c = fr_peekc(f, 0)) == EOF) {
			perr(p, start, "unterminated string");
			break;
		}
		f->fr_pos++;
		if (c == '"')
			break;
		if (c == '\n') {
			perr(p, start, "unterminated string (newline before "
			    "the closing quote)");
			f->fr_line++;
			break;
		}
		if (c == '\\') {
			if ((e = fr_peekc(f, 0)) == EOF || e == '\n')
				continue;	/* reported as unterminated */
			f->fr_pos++;
			if (e == 'n')
				c = '\n';
			else if (e == 't')
				c = '\t';
			else if (e == '"' || e == '\\')
				c = e;
			else {
				if (e > 0x20 && e < 0x7f)
					perr(p, f->fr_line, "unknown escape "
					    "\"\\%c\" in string", e);
				else
					perr(p, f->fr_line, "unknown escape "
					    "\"\\\\x%02x\" in string", e);
				c = e;
			}
		} else if (c == '\0') {
			perr(p, f->fr_line, "NUL byte in string");
			continue;
		} else if ((c < 0x20 && c != '\t') || c == 0x7f) {
			perr(p, f->fr_line, "control character 0x%02x in string",
			    c);
			continue;
		}
		if (n < MAX_TOKEN)
			buf[n++] = c;
		else
			toolong = 1;
	}
	if (toolong)
		perr(p, start, "string too long (max %d bytes)", MAX_TOKEN);
	buf[n] = '\0';
	t->tk_type = T_STRING;
	t->tk_val = xstrdup(buf);
}

static void
lex_word(struct parser *p, struct frame *f, struct token *t)
{
	size_t	start = f->fr_pos, n;

	while (f->fr_pos < f->fr_len &&
	    is_word_char((unsigned char)f->fr_data[f->fr_pos]))
		f->fr_pos++;
	n = f->fr_pos - start;
	if (n > MAX_TOKEN) {
		perr(p, f->fr_line, "word too long (max %d bytes)", MAX_TOKEN);
		n = MAX_TOKEN;
	}
	t->tk_type = T_WORD;
	t->tk_val = xstrndup(f->fr_data + start, n);
}

static const char *
macro_get(struct parser *p, const char *name)
{
	struct macro	*m;

	for (m = p->p_macros; m != NULL; m = m->m_next)
		if (strcmp(m->m_name, name) == 0)
			return m->m_value;
	return NULL;
}

/* Append n bytes of s to a token being built; 1 once it is too long. */
static int
tok_append(char *buf, size_t *len, const char *s, size_t n)
{
	if (n > MAX_TOKEN - *len) {
		memcpy(buf + *len, s, MAX_TOKEN - *len);
		*len = MAX_TOKEN;
		return 1;
	}
	memcpy(buf + *len, s, n);
	*len += n;
	return 0;
}

/*
 * $NAME: one string token holding the value.  Word characters and further
 * macros written right after it, with no space between, belong to the same
 * token: `$credentials/openai` is the value of credentials followed by
 * "/openai".  -1: nothing to return.
 */
static int
lex_macro(struct parser *p, struct frame *f, struct token *t)
{
	char		 buf[MAX_TOKEN + 1];
	size_t		 start, n, len = 0;
	char		*name;
	const char	*v;
	int		 c, toolong = 0, first = 1;

	t->tk_type = T_STRING;
	for (;; first = 0) {
		c = fr_peekc(f, 0);
		if (c != '$' && (c == EOF || !is_word_char(c)))
			break;
		if (c != '$') {
			start = f->fr_pos;
			while (f->fr_pos < f->fr_len && is_word_char(
			    (unsigned char)f->fr_data[f->fr_pos]))
				f->fr_pos++;
			toolong |= tok_append(buf, &len, f->fr_data + start,
			    f->fr_pos - start);
			continue;
		}
		/* A "$" with no name after a first macro: the next token's. */
		if (!first && !is_ident_char(fr_peekc(f, 1)))
			break;
		start = ++f->fr_pos;
		while (f->fr_pos < f->fr_len &&
		    is_ident_char((unsigned char)f->fr_data[f->fr_pos]))
			f->fr_pos++;
		if ((n = f->fr_pos - start) == 0) {
			perr(p, f->fr_line, "\"$\" must be followed by a macro "
			    "name");
			return -1;
		}
		if (n > MAX_TOKEN)
			n = MAX_TOKEN;
		name = xstrndup(f->fr_data + start, n);
		if ((v = macro_get(p, name)) == NULL) {
			perr(p, f->fr_line, "undefined macro \"$%s\"", name);
			t->tk_bad = 1;
			v = "";
		}
		free(name);
		toolong |= tok_append(buf, &len, v, strlen(v));
	}
	if (toolong)
		perr(p, f->fr_line, "word too long (max %d bytes)", MAX_TOKEN);
	buf[len] = '\0';
	t->tk_val = xstrdup(buf);
	return 0;
}

static void
lex(struct parser *p, struct token *t)
{
	struct frame	*f = cur(p);
	int		 c, c1;

	memset(t, 0, sizeof(*t));
	for (;;) {
		t->tk_line = f->fr_line;
		if (p->p_stop || (c = fr_peekc(f, 0)) == EOF) {
			t->tk_type = T_EOF;
			t->tk_line = eof_line(f);
			return;
		}
		if (c == '\n') {
			f->fr_line++;
			f->fr_pos++;
			continue;
		}
		if (c == ' ' || c == '\t' || c == '\r' || c == '\f' ||
		    c == '\v') {
			f->fr_pos++;
			continue;
		}
		if (c == '#') {
			while ((c1 = fr_peekc(f, 0)) != EOF && c1 != '\n')
				f->fr_pos++;
			continue;
		}
		if (c == '\\') {
			c1 = fr_peekc(f, 1);
			if (c1 == '\r' && fr_peekc(f, 2) == '\n') {
				f->fr_pos++;
				c1 = '\n';
			}
			if (c1 == '\n') {
				f->fr_pos += 2;
				f->fr_line++;
				continue;
			}
			perr(p, f->fr_line, "unexpected \"\\\" (only allowed "
			    "at the end of a line)");
			f->fr_pos++;
			continue;
		}
		switch (c) {
		case '{':
			t->tk_type = T_LBRACE;
			f->fr_pos++;
			return;
		case '}':
			t->tk_type = T_RBRACE;
			f->fr_pos++;
			return;
		case '=':
			t->tk_type = T_EQUALS;
			f->fr_pos++;
			return;
		case '"':
			lex_string(p, f, t);
			return;
		case '$':
			if (lex_macro(p, f, t) == 0)
				return;
			continue;
		}
		if (is_word_char(c)) {
			lex_word(p, f, t);
			return;
		}
		if (c >= 0x80) {
			/* one message for a whole UTF-8 sequence */
			while ((c1 = fr_peekc(f, 0)) != EOF && c1 >= 0x80)
				f->fr_pos++;
			perr(p, f->fr_line, "unexpected non-ASCII character "
			    "(outside quotes)");
			continue;
		}
		if (c > 0x20 && c < 0x7f)
			perr(p, f->fr_line, "unexpected character \"%c\"", c);
		else
			perr(p, f->fr_line, "unexpected byte 0x%02x", c);
		f->fr_pos++;
	}
}

static void
tok_free(struct token *t)
{
	free(t->tk_val);
	t->tk_val = NULL;
}

static struct token *
peek(struct parser *p)
{
	if (!p->p_have_la) {
		lex(p, &p->p_la);
		p->p_have_la = 1;
	}
	return &p->p_la;
}

static void
consume(struct parser *p)
{
	tok_free(&p->p_la);
	p->p_have_la = 0;
}

/* Consume the lookahead and hand its value to the caller. */
static char *
take(struct parser *p)
{
	char	*v = p->p_la.tk_val;

	p->p_la.tk_val = NULL;
	p->p_have_la = 0;
	return v;
}

static int
is_kw(const struct token *t, const char *kw)
{
	return t->tk_type == T_WORD && strcmp(t->tk_val, kw) == 0;
}

/*
 * Value getters.  On error they report and leave the offending token in
 * place: it may be the next statement's keyword, which recovery needs.
 */

/* A quoted string (or a macro) after keyword kw. */
static int
get_string(struct parser *p, const char *kw, char **out, int *line)
{
	struct token	*t = peek(p);
	char		 b[QBUF];

	if (t->tk_type == T_STRING && !t->tk_bad) {
		if (line != NULL)
			*line = t->tk_line;
		*out = take(p);
		return 0;
	}
	if (!t->tk_bad)
		perr(p, t->tk_line, "expected a quoted string after \"%s\", "
		    "got %s", kw, tok_desc(t, b, sizeof(b)));
	return -1;
}

/* A bare word or a quoted string after keyword kw. */
static int
get_value(struct parser *p, const char *kw, char **out, int *line)
{
	struct token	*t = peek(p);
	char		 b[QBUF];

	if ((t->tk_type == T_STRING || t->tk_type == T_WORD) && !t->tk_bad) {
		if (line != NULL)
			*line = t->tk_line;
		*out = take(p);
		return 0;
	}
	if (!t->tk_bad)
		perr(p, t->tk_line, "expected a value after \"%s\", got %s",
		    kw, tok_desc(t, b, sizeof(b)));
	return -1;
}

/* The bare keyword want after kw. */
static int
expect_kw(struct parser *p, const char *kw, const char *want)
{
	struct token	*t = peek(p);
	char		 b[QBUF];

	if (is_kw(t, want)) {
		consume(p);
		return 0;
	}
	if (!t->tk_bad)
		perr(p, t->tk_line, "expected \"%s\" after \"%s\", got %s",
		    want, kw, tok_desc(t, b, sizeof(b)));
	return -1;
}

/* Strings after a first one that is required: command "a" "b" ... */
static int
get_string_list(struct parser *p, const char *kw, char ***v, size_t *n)
{
	char	*s;

	if (get_string(p, kw, &s, NULL) == -1)
		return -1;
	for (;;) {
		strv_push(v, n, s);
		if (peek(p)->tk_type != T_STRING || peek(p)->tk_bad)
			return 0;
		s = take(p);
	}
}

/* Numbers, durations, sizes */

/* Leading decimal digits of s as *n; -1 on overflow, else how many. */
static int
digits(const char *s, uint64_t *n, size_t *len)
{
	uint64_t	v = 0;
	size_t		i;

	for (i = 0; s[i] >= '0' && s[i] <= '9'; i++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*n = v;
	*len = i;
	return 0;
}

static int
parse_uint(struct parser *p, int line, const char *kw, const char *s,
    uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t	v;
	size_t		len;
	char		b[QBUF];

	if (digits(s, &v, &len) == -1 || len == 0 || s[len] != '\0' ||
	    v < min || v > max) {
		perr(p, line, "%s: bad number %s: expected %llu to %llu", kw,
		    quote(s, b, sizeof(b)), (unsigned long long)min,
		    (unsigned long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

static const struct {
	const char	*u_name;
	uint64_t	 u_ms;
} duration_units[] = {
	{ "ms", 1 },
	{ "s", 1000 },
	{ "m", 60 * 1000 },
	{ "h", 3600 * 1000 },
	{ "d", 24 * 3600 * 1000 },
};

static int
parse_duration(struct parser *p, int line, const char *kw, const char *s,
    uint64_t *out)
{
	uint64_t	v, mul = 0;
	size_t		len, i;
	char		b[QBUF];

	quote(s, b, sizeof(b));
	if (digits(s, &v, &len) == -1) {
		perr(p, line, "%s: bad duration %s: too large (max 365d)",
		    kw, b);
		return -1;
	}
	if (len == 0) {
		perr(p, line, "%s: bad duration %s: expected a number followed "
		    "by ms, s, m, h or d", kw, b);
		return -1;
	}
	if (s[len] == '\0') {
		perr(p, line, "%s: bad duration %s: missing unit (ms, s, m, h, "
		    "d)", kw, b);
		return -1;
	}
	for (i = 0; i < sizeof(duration_units) / sizeof(duration_units[0]);
	    i++)
		if (strcmp(s + len, duration_units[i].u_name) == 0)
			mul = duration_units[i].u_ms;
	if (mul == 0) {
		perr(p, line, "%s: bad duration %s: unknown unit \"%.8s\" "
		    "(use ms, s, m, h or d)", kw, b, s + len);
		return -1;
	}
	if (v == 0) {
		perr(p, line, "%s: bad duration %s: must be greater than zero",
		    kw, b);
		return -1;
	}
	if (v > MAX_DURATION_MS / mul) {
		perr(p, line, "%s: bad duration %s: too large (max 365d)",
		    kw, b);
		return -1;
	}
	*out = v * mul;
	return 0;
}

static int
parse_size(struct parser *p, int line, const char *kw, const char *s,
    uint64_t *out)
{
	uint64_t	v, mul;
	size_t		len;
	char		b[QBUF];

	quote(s, b, sizeof(b));
	if (digits(s, &v, &len) == -1) {
		perr(p, line, "%s: bad size %s: too large", kw, b);
		return -1;
	}
	if (len == 0) {
		perr(p, line, "%s: bad size %s: expected a number optionally "
		    "followed by K, M or G", kw, b);
		return -1;
	}
	if (strcmp(s + len, "") == 0)
		mul = 1;
	else if (strcmp(s + len, "K") == 0)
		mul = 1024;
	else if (strcmp(s + len, "M") == 0)
		mul = 1024 * 1024;
	else if (strcmp(s + len, "G") == 0)
		mul = 1024 * 1024 * 1024;
	else {
		perr(p, line, "%s: bad size %s: unknown unit \"%.8s\" (use K, "
		    "M or G)", kw, b, s + len);
		return -1;
	}
	if (v == 0) {
		perr(p, line, "%s: bad size %s: must be greater than zero",
		    kw, b);
		return -1;
	}
	if (v > UINT64_MAX / mul) {
		perr(p, line, "%s: bad size %s: too large", kw, b);
		return -1;
	}
	*out = v * mul;
	return 0;
}

/*
 * Prices and budgets: DIGITS[.DIGITS], no sign, no exponent, a bounded
 * number of decimals so that config_print finds an exact short form.
 */
static int
parse_decimal(struct parser *p, int line, const char *kw, const char *s,
    double *out)
{
	const char	*c = s, *dot = NULL;
	char		 b[QBUF];
	double		 d;

	while ((*c >= '0' && *c <= '9') || (*c == '.' && dot == NULL)) {
		if (*c == '.')
			dot = c;
		c++;
	}
	if (*c != '\0' || c == s || *s == '.' || (dot != NULL &&
	    dot[1] == '\0')) {
		perr(p, line, "%s: bad number %s: expected a non-negative "
		    "decimal number", kw, quote(s, b, sizeof(b)));
		return -1;
	}
	if (dot != NULL && strlen(dot + 1) > MAX_DECIMALS) {
		perr(p, line, "%s: bad number %s: at most %d decimal places",
		    kw, quote(s, b, sizeof(b)), MAX_DECIMALS);
		return -1;
	}
	d = strtod(s, NULL);
	if (!isfinite(d) || d > MAX_PRICE) {
		perr(p, line, "%s: bad number %s: too large", kw,
		    quote(s, b, sizeof(b)));
		return -1;
	}
	*out = d;
	return 0;
}

/* Names and other values */

static int
valid_name(const char *s, size_t max, int dots)
{
	size_t	i;

	for (i = 0; s[i] != '\0'; i++)
		if (!is_ident_char((unsigned char)s[i]) && s[i] != '-' &&
		    !(dots && s[i] == '.'))
			return 0;
	return i > 0 && i <= max;
}

static int
check_env_name(struct parser *p, int line, const char *kw, const char *s)
{
	char	b[QBUF];

	if (valid_name(s, MAX_TOKEN, 0) && strchr(s, '-') == NULL &&
	    !(s[0] >= '0' && s[0] <= '9'))
		return 0;
	perr(p, line, "%s: bad environment variable name %s", kw,
	    quote(s, b, sizeof(b)));
	return -1;
}

static int
check_url(struct parser *p, int line, const char *kw, const char *s)
{
	char	b[QBUF];

	if (strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0)
		return 0;
	perr(p, line, "%s %s: must start with http:// or https://", kw,
	    quote(s, b, sizeof(b)));
	return -1;
}

/* allow-address "ADDR"...: IP literals to connect to though refused */
static int
get_allow_addr(struct parser *p, char ***v, size_t *n)
{
	struct addr_allow	 aa;
	char			*s, q[QBUF];
	int			 line;

	if (get_value(p, "allow-address", &s, &line) == -1)
		return -1;
	for (;;) {
		aa.aa_n = 0;
		if (addr_allow_add(&aa, s) == -1) {
			perr(p, line, "allow-address %s: not an IP address",
			    quote(s, q, sizeof(q)));
			free(s);
		} else if (*n == ADDR_ALLOW_MAX) {
			perr(p, line, "allow-address: at most %d addresses",
			    ADDR_ALLOW_MAX);
			free(s);
		} else
			strv_push(v, n, s);
		if (peek(p)->tk_type != T_STRING || peek(p)->tk_bad)
			return 0;
		line = peek(p)->tk_line;
		s = take(p);
	}
}

/*
 * A url naming an address the broker does not connect to by default
 * (common/addrcheck.h) needs allow-address for it.  A name is checked
 * once resolved, at every connect (broker/parent_connect.c).
 */
static void
check_url_addr(struct parser *p, int line, const char *desc, const char *kw,
    const char *url, char *const *allow, size_t nallow)
{
	struct addr_allow	 aa;
	char			 host[HTTP_HOST_MAX + 1], q[QBUF];
	const char		*why;
	uint16_t		 port;
	size_t			 i;

	if (url == NULL || http_url_endpoint(url, host, &port) != NULL)
		return;
	aa.aa_n = 0;
	for (i = 0; i < nallow; i++)
		(void)addr_allow_add(&aa, allow[i]);
	if ((why = addr_literal_refused(host, &aa)) != NULL)
		perr(p, line, "%s: %s %s: %s is %s; add allow-address \"%s\" "
		    "if it is meant", desc, kw, quote(url, q, sizeof(q)), host,
		    why, host);
}

static int
check_abs_path(struct parser *p, int line, const char *kw, const char *s)
{
	char	b[QBUF];

	if (s[0] == '/')
		return 0;
	perr(p, line, "%s %s: must be an absolute path", kw,
	    quote(s, b, sizeof(b)));
	return -1;
}

static int
has_glob_char(const char *s)
{
	return strpbrk(s, "*?[") != NULL;
}

static void
add_ref(struct parser *p, const char *owner, const char *server, int line)
{
	struct ref	*r = xcalloc(1, sizeof(*r));

	r->rf_owner = xstrdup(owner);
	r->rf_server = xstrdup(server);
	r->rf_file = xstrdup(cur(p)->fr_name);
	r->rf_line = line;
	r->rf_next = p->p_refs;
	p->p_refs = r;
}

/*
 * A tool glob is SERVER.TOOL-pattern (a resource's SERVER.URI, a prompt's
 * SERVER.PROMPT: noun says which).  A literal server part must name a
 * configured server; servers may be defined later, so remember it.
 */
static void
check_tool_glob(struct parser *p, const char *owner, const char *noun,
    const char *g, int line)
{
	const char	*dot = strchr(g, '.');
	char		*server, q[QBUF];

	if (dot == NULL) {
		if (!has_glob_char(g))
			perr(p, line, "%s: %s %s is not SERVER.%s", owner, noun,
			    quote(g, q, sizeof(q)), strcmp(noun, "resource") ==
			    0 ? "URI" : strcmp(noun, "prompt") == 0 ? "PROMPT" :
			    "TOOL");
		return;
	}
	server = xstrndup(g, (size_t)(dot - g));
	if (*server == '\0')
		perr(p, line, "%s: %s %s has no server part", owner, noun,
		    quote(g, q, sizeof(q)));
	else if (!has_glob_char(server))
		add_ref(p, owner, server, line);
	free(server);
}

/*
 * tools "GLOB"... in a toolset (desc names it) or a rule (action names it,
 * and each message names the glob too; kw is the rule's kind: tool,
 * resource or prompt).
 */
static int
get_glob_list(struct parser *p, const char *kw, const char *desc,
    const char *action, char ***v, size_t *n)
{
	const char	*noun = action != NULL ? kw : "tool";
	char		*s, owner[DESC_LEN], q[QBUF];
	int		 line;

	if (get_string(p, kw, &s, &line) == -1)
		return -1;
	for (;;) {
		if (action != NULL)
			snprintf(owner, sizeof(owner), "%s rule, %s %s",
			    action, noun, quote(s, q, sizeof(q)));
		check_tool_glob(p, action != NULL ? owner : desc, noun, s,
		    line);
		strv_push(v, n, s);
		if (peek(p)->tk_type != T_STRING || peek(p)->tk_bad)
			return 0;
		line = peek(p)->tk_line;
		s = take(p);
	}
}

/* Blocks */

static int
kw_lookup(const struct kw *tab, const struct token *t)
{
	int	i;

	if (t->tk_type != T_WORD)
		return -1;
	for (i = 0; tab[i].kw_name != NULL; i++)
		if (strcmp(tab[i].kw_name, t->tk_val) == 0)
			return i;
	return -1;
}

static int
seen_line(const struct blk *b, const char *name)
{
	int	i;

	for (i = 0; b->b_tab[i].kw_name != NULL; i++)
		if (strcmp(b->b_tab[i].kw_name, name) == 0)
			return b->b_seen[i];
	return 0;
}

/* Recovery: skip to the next keyword of tab, a closing brace or the end. */
static void
skip_statement(struct parser *p, const struct kw *tab)
{
	struct token	*t;
	int		 depth = 0;

	for (;;) {
		t = peek(p);
		if (t->tk_type == T_EOF)
			return;
		if (depth == 0 && (t->tk_type == T_RBRACE ||
		    kw_lookup(tab, t) >= 0))
			return;
		if (t->tk_type == T_LBRACE)
			depth++;
		else if (t->tk_type == T_RBRACE)
			depth--;
		consume(p);
	}
}

static const struct kw top_kw[];

static void
parse_block(struct parser *p, struct blk *b, int open_line)
{
	struct token	*t;
	char		 q[QBUF];
	int		 i;

	t = peek(p);
	if (t->tk_type != T_LBRACE) {
		perr(p, t->tk_line, "expected \"{\" after %s, got %s",
		    b->b_desc, tok_desc(t, q, sizeof(q)));
		return;
	}
	consume(p);
	for (;;) {
		t = peek(p);
		if (t->tk_type == T_RBRACE) {
			consume(p);
			return;
		}
		if (t->tk_type == T_EOF) {
			perr(p, t->tk_line, "unterminated block: %s opened at "
			    "line %d", b->b_desc, open_line);
			return;
		}
		if ((i = kw_lookup(b->b_tab, t)) == -1) {
			if (t->tk_type == T_WORD)
				perr(p, t->tk_line, "unknown keyword \"%s\" in "
				    "%s%s", tok_desc(t, q, sizeof(q)),
				    b->b_desc, kw_lookup(top_kw, t) >= 0 ?
				    " (missing \"}\"?)" : "");
			else if (!t->tk_bad)
				perr(p, t->tk_line, "expected a keyword in %s, "
				    "got %s", b->b_desc,
				    tok_desc(t, q, sizeof(q)));
			if (t->tk_type != T_LBRACE)
				consume(p);
			skip_statement(p, b->b_tab);
			continue;
		}
		if (b->b_seen[i] != 0 && !b->b_tab[i].kw_repeat) {
			perr(p, t->tk_line, "duplicate \"%s\" in %s (first at "
			    "line %d)", t->tk_val, b->b_desc, b->b_seen[i]);
			consume(p);
			skip_statement(p, b->b_tab);
			continue;
		}
		if (b->b_seen[i] == 0)
			b->b_seen[i] = t->tk_line;
		b->b_line = t->tk_line;
		consume(p);
		if (b->b_tab[i].kw_fn(p, b) == -1)
			skip_statement(p, b->b_tab);
	}
}

/* Remember where a once-only setting was seen; complain the second time. */
static int
once(struct parser *p, struct where *w, int line, const char *what)
{
	if (w->wh_file != NULL) {
		perr(p, line, "duplicate %s (first at %s:%d)", what,
		    w->wh_file, w->wh_line);
		return -1;
	}
	w->wh_file = xstrdup(cur(p)->fr_name);
	w->wh_line = line;
	return 0;
}

/* A secret must never be written into the file itself. */
static int
inline_secret(struct parser *p, int line, const char *kw)
{
	perr(p, line, "%s: secrets are not allowed inline; use %s-file \"PATH\" "
	    "or %s-env \"NAME\"", kw, kw, kw);
	if (peek(p)->tk_type == T_STRING)
		consume(p);
	return 0;
}

static int
set_secret(struct parser *p, struct blk *b, struct secret_ref *sr,
    enum secret_kind kind, const char *kw, const char *base)
{
	char	*v;
	int	 line;

	if (kind == SECRET_ENV) {
		if (get_value(p, kw, &v, &line) == -1)
			return -1;
		if (check_env_name(p, line, kw, v) == -1) {
			free(v);
			return 0;
		}
	} else if (get_string(p, kw, &v, &line) == -1)
		return -1;
	if (sr->sr_kind != SECRET_NONE) {
		perr(p, b->b_line, "%s: use only one of %s-file and %s-env",
		    b->b_desc, base, base);
		free(v);
		return 0;
	}
	sr->sr_kind = kind;
	sr->sr_ref = v;
	sr->sr_line = b->b_line;
	sr->sr_file = xstrdup(cur(p)->fr_name);
	return 0;
}

/* Provider block */

static const char *provider_types[] = {
	[PROVIDER_OPENAI] = "openai",
	[PROVIDER_AZURE_OPENAI] = "azure-openai",
	[PROVIDER_OPENAI_COMPATIBLE] = "openai-compatible",
	[PROVIDER_ANTHROPIC] = "anthropic",
	[PROVIDER_OLLAMA] = "ollama",
	[PROVIDER_GEMINI] = "gemini",
};

static int
pv_type(struct parser *p, struct blk *b)
{
	struct provider_conf	*pv = b->b_obj;
	char			*v, q[QBUF];
	size_t			 i;
	int			 line;

	if (get_value(p, "type", &v, &line) == -1)
		return -1;
	for (i = 0; i < sizeof(provider_types) / sizeof(provider_types[0]);
	    i++)
		if (strcmp(v, provider_types[i]) == 0) {
			pv->pv_type = (enum provider_type)i;
			pv->pv_type_set = 1;
			free(v);
			return 0;
		}
	perr(p, line, "%s: unknown type %s (expected openai, azure-openai, "
	    "openai-compatible, anthropic, ollama or gemini)", b->b_desc,
	    quote(v, q, sizeof(q)));
	free(v);
	pv->pv_type_set = -1;		/* reported: not "missing type" too */
	return 0;
}

static int
pv_base_url(struct parser *p, struct blk *b)
{
	struct provider_conf	*pv = b->b_obj;
	char			*v;
	int			 line;

	if (get_string(p, "base-url", &v, &line) == -1)
		return -1;
	check_url(p, line, "base-url", v);
	set_str(&pv->pv_base_url, v);
	return 0;
}

static int
pv_key_env(struct parser *p, struct blk *b)
{
	return set_secret(p, b, &((struct provider_conf *)b->b_obj)->pv_api_key,
	    SECRET_ENV, "api-key-env", "api-key");
}

static int
pv_key_file(struct parser *p, struct blk *b)
{
	return set_secret(p, b, &((struct provider_conf *)b->b_obj)->pv_api_key,
	    SECRET_FILE, "api-key-file", "api-key");
}

static int
pv_key_inline(struct parser *p, struct blk *b)
{
	return inline_secret(p, b->b_line, "api-key");
}

static int
pv_model(struct parser *p, struct blk *b)
{
	char	*v;

	if (get_string(p, "model", &v, NULL) == -1)
		return -1;
	set_str(&((struct provider_conf *)b->b_obj)->pv_model, v);
	return 0;
}

static int
pv_deployment(struct parser *p, struct blk *b)
{
	char	*v;

	if (get_string(p, "deployment", &v, NULL) == -1)
		return -1;
	set_str(&((struct provider_conf *)b->b_obj)->pv_deployment, v);
	return 0;
}

static int
pv_api_version(struct parser *p, struct blk *b)
{
	char	*v;

	if (get_string(p, "api-version", &v, NULL) == -1)
		return -1;
	set_str(&((struct provider_conf *)b->b_obj)->pv_api_version, v);
	return 0;
}

static int
pv_system_prompt(struct parser *p, struct blk *b)
{
	char	*v;

	if (get_string(p, "system-prompt", &v, NULL) == -1)
		return -1;
	set_str(&((struct provider_conf *)b->b_obj)->pv_system_prompt, v);
	return 0;
}

/* price input NUM output NUM, in either order */
static int
pv_price(struct parser *p, struct blk *b)
{
	struct provider_conf	*pv = b->b_obj;
	struct token		*t;
	char			*v, q[QBUF];
	double			*dst;
	int			 line, have_in = 0, have_out = 0, *have;

	for (;;) {
		t = peek(p);
		if (is_kw(t, "input")) {
			dst = &pv->pv_price_input;
			have = &have_in;
		} else if (is_kw(t, "output")) {
			dst = &pv->pv_price_output;
			have = &have_out;
		} else
			break;
		if (*have) {
			perr(p, t->tk_line, "price: duplicate \"%s\"",
			    t->tk_val);
			return -1;
		}
		*have = 1;
		consume(p);
		if (get_value(p, have == &have_in ? "input" : "output", &v,
		    &line) == -1)
			return -1;
		parse_decimal(p, line, "price", v, dst);
		free(v);
	}
	if (!have_in || !have_out) {
		t = peek(p);
		perr(p, t->tk_line, "price: expected input NUMBER output NUMBER,"
		    " got %s", tok_desc(t, q, sizeof(q)));
		return -1;
	}
	pv->pv_has_price = 1;
	return 0;
}

static int
pv_allow_addr(struct parser *p, struct blk *b)
{
	struct provider_conf *pv = b->b_obj;

	return get_allow_addr(p, &pv->pv_allow_addr, &pv->pv_nallow_addr);
}

static const struct kw provider_kw[] = {
	{ "type", pv_type, 0 },
	{ "base-url", pv_base_url, 0 },
	{ "api-key-env", pv_key_env, 0 },
	{ "api-key-file", pv_key_file, 0 },
	{ "api-key", pv_key_inline, 1 },
	{ "model", pv_model, 0 },
	{ "deployment", pv_deployment, 0 },
	{ "api-version", pv_api_version, 0 },
	{ "system-prompt", pv_system_prompt, 0 },
	{ "price", pv_price, 0 },
	{ "allow-address", pv_allow_addr, 1 },
	{ NULL, NULL, 0 },
};
_Static_assert(sizeof(provider_kw) / sizeof(provider_kw[0]) <= BLK_MAXKW,
    "b_seen too small");

static void
provider_check(struct parser *p, struct provider_conf *pv, const char *desc)
{
	if (pv->pv_type_set != 1) {
		if (pv->pv_type_set == 0)
			perr(p, pv->pv_line, "%s: missing type", desc);
		return;
	}
	if (pv->pv_type == PROVIDER_AZURE_OPENAI) {
		if (pv->pv_deployment == NULL)
			perr(p, pv->pv_line, "%s: type azure-openai requires "
			    "deployment", desc);
		if (pv->pv_api_version == NULL)
			perr(p, pv->pv_line, "%s: type azure-openai requires "
			    "api-version", desc);
	}
	/* No public endpoint to default to: the resource or server's own. */
	if ((pv->pv_type == PROVIDER_AZURE_OPENAI ||
	    pv->pv_type == PROVIDER_OPENAI_COMPATIBLE) &&
	    pv->pv_base_url == NULL)
		perr(p, pv->pv_line, "%s: type %s requires base-url", desc,
		    provider_types[pv->pv_type]);
	switch (pv->pv_type) {
	case PROVIDER_OPENAI:
	case PROVIDER_AZURE_OPENAI:
	case PROVIDER_ANTHROPIC:
	case PROVIDER_GEMINI:
		if (pv->pv_api_key.sr_kind == SECRET_NONE)
			perr(p, pv->pv_line, "%s: type %s requires api-key-file "
			    "or api-key-env", desc,
			    provider_types[pv->pv_type]);
		break;
	case PROVIDER_OPENAI_COMPATIBLE:
	case PROVIDER_OLLAMA:
		break;
	}
}

/* Server block */

#define SRV(b)	((struct server_conf *)(b)->b_obj)

static int
srv_command(struct parser *p, struct blk *b)
{
	return get_string_list(p, "command", &SRV(b)->srv_argv,
	    &SRV(b)->srv_argc);
}

static int
srv_url(struct parser *p, struct blk *b)
{
	char	*v;
	int	 line;

	if (get_string(p, "url", &v, &line) == -1)
		return -1;
	check_url(p, line, "url", v);
	set_str(&SRV(b)->srv_url, v);
	if (SRV(b)->srv_transport == TRANSPORT_STDIO)
		SRV(b)->srv_transport = TRANSPORT_STREAMABLE_HTTP;
	return 0;
}

static int
srv_transport(struct parser *p, struct blk *b)
{
	char	*v, q[QBUF];
	int	 line;

	if (get_value(p, "transport", &v, &line) == -1)
		return -1;
	if (strcmp(v, "streamable-http") == 0)
		SRV(b)->srv_transport = TRANSPORT_STREAMABLE_HTTP;
	else if (strcmp(v, "sse") == 0)
		SRV(b)->srv_transport = TRANSPORT_SSE;
	else
		perr(p, line, "%s: unknown transport %s (expected "
		    "streamable-http or sse)", b->b_desc,
		    quote(v, q, sizeof(q)));
	free(v);
	return 0;
}

static int
srv_bearer_file(struct parser *p, struct blk *b)
{
	return set_secret(p, b, &SRV(b)->srv_bearer, SECRET_FILE,
	    "bearer-token-file", "bearer-token");
}

static int
srv_bearer_env(struct parser *p, struct blk *b)
{
	return set_secret(p, b, &SRV(b)->srv_bearer, SECRET_ENV,
	    "bearer-token-env", "bearer-token");
}

static int
srv_bearer_inline(struct parser *p, struct blk *b)
{
	return inline_secret(p, b->b_line, "bearer-token");
}

static int
valid_header_name(const char *s)
{
	/* RFC 9110 token */
	return *s != '\0' && strspn(s, "abcdefghijklmnopqrstuvwxyz"
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~") ==
	    strlen(s);
}

static int
srv_header(struct parser *p, struct blk *b)
{
	struct header_conf	*hd;
	char			*name, *value, q[QBUF];
	const char		*c;
	int			 line, bad = 0;

	if (get_string(p, "header", &name, &line) == -1)
		return -1;
	if (get_string(p, name, &value, NULL) == -1) {
		free(name);
		return -1;
	}
	quote(name, q, sizeof(q));
	if (!valid_header_name(name)) {
		perr(p, line, "header %s: not a valid HTTP header name", q);
		bad = 1;
	} else if (strcasecmp(name, "Authorization") == 0 ||
	    strcasecmp(name, "Proxy-Authorization") == 0) {
		perr(p, line, "header %s: secrets are not allowed inline; use "
		    "bearer-token-file \"PATH\" or bearer-token-env \"NAME\"",
		    q);
		bad = 1;
	}
	for (c = value; *c != '\0' && !bad; c++)
		if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f) {
			/* a line break would inject headers */
			perr(p, line, "header %s: value contains a control "
			    "character", q);
			bad = 1;
		}
	if (bad) {
		free(name);
		free(value);
		return 0;
	}
	hd = xcalloc(1, sizeof(*hd));
	hd->hd_name = name;
	hd->hd_value = value;
	TAILQ_INSERT_TAIL(&SRV(b)->srv_headers, hd, hd_entry);
	return 0;
}

static int
srv_ca_file(struct parser *p, struct blk *b)
{
	char	*v;

	if (get_string(p, "ca-file", &v, NULL) == -1)
		return -1;
	set_str(&SRV(b)->srv_ca_file, v);
	return 0;
}

/* env "A" "B": variables passed through to instances */
static int
srv_env(struct parser *p, struct blk *b)
{
	char	*v;
	int	 line;

	if (get_value(p, "env", &v, &line) == -1)
		return -1;
	for (;;) {
		if (check_env_name(p, line, "env", v) == 0)
			strv_push(&SRV(b)->srv_env, &SRV(b)->srv_nenv, v);
		else
			free(v);
		if (peek(p)->tk_type != T_STRING || peek(p)->tk_bad)
			return 0;
		line = peek(p)->tk_line;
		v = take(p);
	}
}

static int
srv_isolation(struct parser *p, struct blk *b)
{
	char	*v, q[QBUF];
	int	 line;

	if (get_value(p, "isolation", &v, &line) == -1)
		return -1;
	if (strcmp(v, "shared") == 0)
		SRV(b)->srv_isolation = ISOLATION_SHARED;
	else if (strcmp(v, "per-user") == 0)
		SRV(b)->srv_isolation = ISOLATION_PER_USER;
	else if (strcmp(v, "per-conversation") == 0)
		SRV(b)->srv_isolation = ISOLATION_PER_CONVERSATION;
	else
		perr(p, line, "%s: unknown isolation %s (expected shared, "
		    "per-user or per-conversation)", b->b_desc,
		    quote(v, q, sizeof(q)));
	free(v);
	return 0;
}

/* A changed tool definition: withheld (block), reported (warn), ignored. */
static int
srv_pin_policy(struct parser *p, struct blk *b)
{
	char	*v, q[QBUF];
	int	 line;

	if (get_value(p, "pin-policy", &v, &line) == -1)
		return -1;
	if (strcmp(v, "block") == 0)
		SRV(b)->srv_pin_policy = PIN_BLOCK;
	else if (strcmp(v, "warn") == 0)
		SRV(b)->srv_pin_policy = PIN_WARN;
	else if (strcmp(v, "off") == 0)
		SRV(b)->srv_pin_policy = PIN_OFF;
	else
		perr(p, line, "%s: unknown pin-policy %s (expected block, warn "
		    "or off)", b->b_desc, quote(v, q, sizeof(q)));
	free(v);
	return 0;
}

static int
srv_network(struct parser *p, struct blk *b)
{
	char	*v, q[QBUF];
	int	 line;

	if (get_value(p, "network", &v, &line) == -1)
		return -1;
	if (strcmp(v, "none") == 0)
		SRV(b)->srv_network_none = 1;
	else
		perr(p, line, "%s: network %s: expected none", b->b_desc,
		    quote(v, q, sizeof(q)));
	free(v);
	return 0;
}

static int
srv_filesystem(struct parser *p, struct blk *b)
{
	struct fs_rule	*fs;
	char		*v, *path, q[QBUF];
	int		 line;
	enum fs_access	 acc;

	if (get_value(p, "filesystem", &v, &line) == -1)
		return -1;
	if (strcmp(v, "read") == 0)
		acc = FS_READ;
	else if (strcmp(v, "write") == 0)
		acc = FS_WRITE;
	else {
		perr(p, line, "%s: filesystem %s: expected read or write",
		    b->b_desc, quote(v, q, sizeof(q)));
		free(v);
		return -1;
	}
	if (get_string(p, v, &path, &line) == -1) {
		free(v);
		return -1;
	}
	free(v);
	if (check_abs_path(p, line, "filesystem", path) == -1) {
		free(path);
		return 0;
	}
	fs = xcalloc(1, sizeof(*fs));
	fs->fs_access = acc;
	fs->fs_path = path;
	TAILQ_INSERT_TAIL(&SRV(b)->srv_fs, fs, fs_entry);
	return 0;
}

static int
blk_duration(struct parser *p, const char *kw, uint64_t *dst)
{
	char	*v;
	int	 line;

	if (get_value(p, kw, &v, &line) == -1)
		return -1;
	parse_duration(p, line, kw, v, dst);
	free(v);
	return 0;
}

static int
blk_uint(struct parser *p, const char *kw, uint64_t min, uint64_t max,
    unsigned int *dst)
{
	char		*v;
	int		 line;
	uint64_t	 n;

	if (get_value(p, kw, &v, &line) == -1)
		return -1;
	if (parse_uint(p, line, kw, v, min, max, &n) == 0)
		*dst = (unsigned int)n;
	free(v);
	return 0;
}

static int
srv_call_timeout(struct parser *p, struct blk *b)
{
	return blk_duration(p, "call-timeout", &SRV(b)->srv_call_timeout_ms);
}

static int
srv_connect_timeout(struct parser *p, struct blk *b)
{
	return blk_duration(p, "connect-timeout",
	    &SRV(b)->srv_connect_timeout_ms);
}

static int
srv_idle_timeout(struct parser *p, struct blk *b)
{
	return blk_duration(p, "idle-timeout", &SRV(b)->srv_idle_timeout_ms);
}

static int
srv_max_instances(struct parser *p, struct blk *b)
{
	return blk_uint(p, "max-instances", 1, 1024,
	    &SRV(b)->srv_max_instances);
}

static int
srv_allow_addr(struct parser *p, struct blk *b)
{
	return get_allow_addr(p, &SRV(b)->srv_allow_addr,
	    &SRV(b)->srv_nallow_addr);
}

static const struct kw server_kw[] = {
	{ "command", srv_command, 0 },
	{ "url", srv_url, 0 },
	{ "transport", srv_transport, 0 },
	{ "bearer-token-file", srv_bearer_file, 0 },
	{ "bearer-token-env", srv_bearer_env, 0 },
	{ "bearer-token", srv_bearer_inline, 1 },
	{ "header", srv_header, 1 },
	{ "ca-file", srv_ca_file, 0 },
	{ "env", srv_env, 1 },
	{ "isolation", srv_isolation, 0 },
	{ "pin-policy", srv_pin_policy, 0 },
	{ "network", srv_network, 0 },
	{ "filesystem", srv_filesystem, 1 },
	{ "call-timeout", srv_call_timeout, 0 },
	{ "connect-timeout", srv_connect_timeout, 0 },
	{ "idle-timeout", srv_idle_timeout, 0 },
	{ "max-instances", srv_max_instances, 0 },
	{ "allow-address", srv_allow_addr, 1 },
	{ NULL, NULL, 0 },
};
_Static_assert(sizeof(server_kw) / sizeof(server_kw[0]) <= BLK_MAXKW,
    "b_seen too small");

static void
server_check(struct parser *p, struct server_conf *srv, struct blk *b)
{
	static const char *url_only[] = { "transport", "bearer-token-file",
	    "bearer-token-env", "header", "ca-file", "allow-address", NULL };
	static const char *cmd_only[] = { "network", "filesystem", "env",
	    NULL };
	const char	**kw;
	int		  line;

	if (srv->srv_argv == NULL && srv->srv_url == NULL) {
		perr(p, srv->srv_line, "%s: needs command or url", b->b_desc);
		return;
	}
	if (srv->srv_argv != NULL && srv->srv_url != NULL) {
		perr(p, seen_line(b, "url"), "%s: command and url are mutually "
		    "exclusive", b->b_desc);
		return;
	}
	for (kw = srv->srv_url == NULL ? url_only : cmd_only; *kw != NULL;
	    kw++)
		if ((line = seen_line(b, *kw)) != 0)
			perr(p, line, "%s: %s is only valid with %s", b->b_desc,
			    *kw, srv->srv_url == NULL ? "url" : "command");
	check_url_addr(p, seen_line(b, "url"), b->b_desc, "url", srv->srv_url,
	    srv->srv_allow_addr, srv->srv_nallow_addr);
}

/* Toolset block */

static int
ts_tools(struct parser *p, struct blk *b)
{
	struct toolset_conf	*ts = b->b_obj;

	return get_glob_list(p, "tools", b->b_desc, NULL, &ts->ts_tools,
	    &ts->ts_ntools);
}

static int	word_index(const char *, const char *const *);

/* names dotted|underscore|bare: how /mcp/TOOLSET names tools and prompts */
static int
ts_names(struct parser *p, struct blk *b)
{
	static const char *const names[] = { "dotted", "underscore", "bare",
	    NULL };
	struct toolset_conf	*ts = b->b_obj;
	char			*v, q[QBUF];
	int			 line, i;

	if (get_value(p, "names", &v, &line) == -1)
		return -1;
	if ((i = word_index(v, names)) == -1)
		perr(p, line, "%s: names %s: expected dotted, underscore or "
		    "bare", b->b_desc, quote(v, q, sizeof(q)));
	else
		ts->ts_names = (enum toolset_names)i;
	free(v);
	return i == -1 ? -1 : 0;
}

static const struct kw toolset_kw[] = {
	{ "tools", ts_tools, 1 },
	{ "names", ts_names, 0 },
	{ NULL, NULL, 0 },
};
_Static_assert(sizeof(toolset_kw) / sizeof(toolset_kw[0]) <= BLK_MAXKW,
    "b_seen too small");

/* Limits block */

#define LIM(p)	(&(p)->p_conf->c_limits)

static int
lm_tool_rounds(struct parser *p, struct blk *b)
{
	(void)b;
	return blk_uint(p, "tool-rounds", 1, 1000, &LIM(p)->lm_tool_rounds);
}

static int
lm_tool_timeout(struct parser *p, struct blk *b)
{
	(void)b;
	return blk_duration(p, "tool-timeout", &LIM(p)->lm_tool_timeout_ms);
}

static int
lm_history(struct parser *p, struct blk *b)
{
	(void)b;
	return blk_uint(p, "history-messages", 1, 100000,
	    &LIM(p)->lm_history_messages);
}

static int
lm_max_body(struct parser *p, struct blk *b)
{
	char	*v;
	int	 line;

	(void)b;
	if (get_value(p, "max-body", &v, &line) == -1)
		return -1;
	parse_size(p, line, "max-body", v, &LIM(p)->lm_max_body);
	free(v);
	return 0;
}

static int
lm_header_timeout(struct parser *p, struct blk *b)
{
	(void)b;
	return blk_duration(p, "header-timeout",
	    &LIM(p)->lm_header_timeout_ms);
}

static int
lm_llm_timeout(struct parser *p, struct blk *b)
{
	(void)b;
	return blk_duration(p, "llm-timeout", &LIM(p)->lm_llm_timeout_ms);
}

static int
lm_result_bytes(struct parser *p, struct blk *b)
{
	char	*v;
	int	 line;

	(void)b;
	if (get_value(p, "max-result-bytes", &v, &line) == -1)
		return -1;
	parse_size(p, line, "max-result-bytes", v,
	    &LIM(p)->lm_max_result_bytes);
	free(v);
	return 0;
}

static int
lm_approval_timeout(struct parser *p, struct blk *b)
{
	(void)b;
	return blk_duration(p, "approval-timeout",
	    &LIM(p)->lm_approval_timeout_ms);
}

static const struct kw limits_kw[] = {
	{ "tool-rounds", lm_tool_rounds, 0 },
	{ "approval-timeout", lm_approval_timeout, 0 },
	{ "llm-timeout", lm_llm_timeout, 0 },
	{ "max-result-bytes", lm_result_bytes, 0 },
	{ "tool-timeout", lm_tool_timeout, 0 },
	{ "history-messages", lm_history, 0 },
	{ "max-body", lm_max_body, 0 },
	{ "header-timeout", lm_header_timeout, 0 },
	{ NULL, NULL, 0 },
};
_Static_assert(sizeof(limits_kw) / sizeof(limits_kw[0]) <= BLK_MAXKW,
    "b_seen too small");

/* Auth block */

static int
au_api_keys(struct parser *p, struct blk *b)
{
	(void)b;
	p->p_conf->c_auth.au_api_keys = 1;
	return 0;
}

/* A claim name: printable, and short enough to be a name. */
static int
valid_claim(const char *s)
{
	size_t	i;

	for (i = 0; s[i] != '\0'; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return i > 0 && i <= 64;
}

/*
 * jwt issuer "X" audience "Y" jwks-file "F" [roles-claim "C"]
 *     [tenant-claim "C"] [user-claim "C"]
 */
static int
au_jwt(struct parser *p, struct blk *b)
{
	static const char *opt[] = { "issuer", "audience", "jwks-file",
	    "roles-claim", "tenant-claim", "user-claim" };
	static const char *dflt[] = { NULL, NULL, NULL, "roles", "tenant",
	    "sub" };
	struct jwt_conf	*jw = &p->p_conf->c_auth.au_jwt_conf;
	char		**dst[6] = { &jw->jw_issuer, &jw->jw_audience,
			    &jw->jw_jwks.sr_ref, &jw->jw_roles_claim,
			    &jw->jw_tenant_claim, &jw->jw_user_claim };
	struct token	*t;
	char		*v, q[QBUF];
	int		 i, line, have[6] = { 0, 0, 0, 0, 0, 0 };

	p->p_conf->c_auth.au_jwt = 1;
	for (;;) {
		t = peek(p);
		for (i = 0; i < 6 && !is_kw(t, opt[i]); i++)
			;
		if (i == 6)
			break;
		if (have[i]) {
			perr(p, t->tk_line, "jwt: duplicate \"%s\"", opt[i]);
			return -1;
		}
		have[i] = 1;
		consume(p);
		if (get_string(p, opt[i], &v, &line) == -1)
			return -1;
		if (i >= 3 && !valid_claim(v))
			perr(p, line, "jwt: bad %s %s: use 1-64 printable "
			    "characters", opt[i], quote(v, q, sizeof(q)));
		else if (i < 3 && *v == '\0')
			perr(p, line, "jwt: %s is empty", opt[i]);
		if (i == 2) {
			jw->jw_jwks.sr_kind = SECRET_FILE;
			jw->jw_jwks.sr_line = line;
			set_str(&jw->jw_jwks.sr_file, xstrdup(cur(p)->fr_name));
		}
		set_str(dst[i], v);
	}
	for (i = 0; i < 6; i++) {
		if (!have[i] && dflt[i] == NULL)
			perr(p, b->b_line, "jwt: missing %s", opt[i]);
		else if (*dst[i] == NULL && dflt[i] != NULL)
			*dst[i] = xstrdup(dflt[i]);
	}
	return 0;
}

/* session [idle DURATION] [lifetime DURATION], at least one of them */
static int
au_session(struct parser *p, struct blk *b)
{
	struct auth_conf	*au = &p->p_conf->c_auth;
	struct token		*t;
	uint64_t		*dst;
	const char		*kw;
	int			 seen[2] = { 0, 0 }, i;

	for (;;) {
		t = peek(p);
		if (is_kw(t, "idle")) {
			i = 0;
			kw = "session idle";
			dst = &au->au_session_idle_ms;
		} else if (is_kw(t, "lifetime")) {
			i = 1;
			kw = "session lifetime";
			dst = &au->au_session_lifetime_ms;
		} else
			break;
		if (seen[i]++) {
			perr(p, t->tk_line, "session: duplicate \"%s\"",
			    t->tk_val);
			return -1;
		}
		consume(p);
		if (blk_duration(p, kw, dst) == -1)
			return -1;
	}
	if (!seen[0] && !seen[1]) {
		perr(p, b->b_line, "session: expected idle or lifetime");
		return -1;
	}
	return 0;
}

/* allowed-origin "https://chat.example.com": besides the request's own */
static int
au_allowed_origin(struct parser *p, struct blk *b)
{
	struct auth_conf	*au = &p->p_conf->c_auth;
	char			*v, canon[ORIGIN_MAX], q[QBUF];
	size_t			 i;
	int			 line;

	(void)b;
	if (get_string(p, "allowed-origin", &v, &line) == -1)
		return -1;
	if (strlen(v) >= ORIGIN_MAX ||
	    websec_origin_canon(v, canon, sizeof(canon)) == -1) {
		perr(p, line, "allowed-origin %s: expected http:// or https:// "
		    "and a host with an optional port, nothing more",
		    quote(v, q, sizeof(q)));
		free(v);
		return 0;
	}
	free(v);
	for (i = 0; i < au->au_norigins; i++)
		if (strcmp(au->au_origins[i], canon) == 0) {
			perr(p, line, "allowed-origin \"%s\": listed twice",
			    canon);
			return 0;
		}
	strv_push(&au->au_origins, &au->au_norigins, xstrdup(canon));
	return 0;
}

static const struct kw auth_kw[] = {
	{ "api-keys", au_api_keys, 0 },
	{ "jwt", au_jwt, 0 },
	{ "session", au_session, 0 },
	{ "allowed-origin", au_allowed_origin, 1 },
	{ NULL, NULL, 0 },
};
_Static_assert(sizeof(auth_kw) / sizeof(auth_kw[0]) <= BLK_MAXKW,
    "b_seen too small");

/* Top-level statements */

/* A user's name, given once: user, instance-user. */
static int
user_name(struct parser *p, struct blk *b, const char *kw, struct where *w,
    char **dst)
{
	char	*v;

	if (get_string(p, kw, &v, NULL) == -1)
		return -1;
	if (*v == '\0')
		perr(p, b->b_line, "%s: empty name", kw);
	if (once(p, w, b->b_line, kw) == -1) {
		free(v);
		return 0;
	}
	set_str(dst, v);
	return 0;
}

static int
top_user(struct parser *p, struct blk *b)
{
	return user_name(p, b, "user", &p->p_user_at, &p->p_conf->c_user);
}

static int
top_instance_user(struct parser *p, struct blk *b)
{
	return user_name(p, b, "instance-user", &p->p_instance_user_at,
	    &p->p_conf->c_instance_user);
}

static int
top_state_dir(struct parser *p, struct blk *b)
{
	char	*v;
	int	 line;

	if (get_string(p, "state-dir", &v, &line) == -1)
		return -1;
	check_abs_path(p, line, "state-dir", v);
	if (once(p, &p->p_state_at, b->b_line, "state-dir") == -1) {
		free(v);
		return 0;
	}
	set_str(&p->p_conf->c_state_dir, v);
	return 0;
}

static int
top_control(struct parser *p, struct blk *b)
{
	struct sockaddr_un	 sun;
	char			*v, q[QBUF];
	int			 line;

	if (expect_kw(p, "control", "socket") == -1)
		return -1;
	if (get_string(p, "socket", &v, &line) == -1)
		return -1;
	if (check_abs_path(p, line, "control socket", v) == 0 &&
	    strlen(v) >= sizeof(sun.sun_path))
		perr(p, line, "control socket %s: path too long (max %zu "
		    "bytes)", quote(v, q, sizeof(q)), sizeof(sun.sun_path) - 1);
	if (once(p, &p->p_control_at, b->b_line, "control socket") == -1) {
		free(v);
		return 0;
	}
	set_str(&p->p_conf->c_control_path, v);
	return 0;
}

/* Numeric addresses are stored in canonical form so duplicates show. */
static int
listen_addr(struct parser *p, int line, char **addr)
{
	unsigned char	 bin[sizeof(struct in6_addr)];
	char		 canon[INET6_ADDRSTRLEN], q[QBUF];
	int		 af;

	if (strcmp(*addr, "localhost") == 0)
		return 0;
	af = strchr(*addr, ':') != NULL ? AF_INET6 : AF_INET;
	if (inet_pton(af, *addr, bin) != 1 ||
	    inet_ntop(af, bin, canon, sizeof(canon)) == NULL) {
		perr(p, line, "listen on %s: expected an IPv4 or IPv6 address "
		    "or localhost", quote(*addr, q, sizeof(q)));
		return -1;
	}
	set_str(addr, xstrdup(canon));
	return 0;
}

static int
listen_tls(struct parser *p, struct listen_conf *ls)
{
	struct token	*t;
	char		**dst, *v;

	ls->ls_tls = 1;
	for (;;) {
		t = peek(p);
		if (is_kw(t, "certificate"))
			dst = &ls->ls_cert;
		else if (is_kw(t, "key"))
			dst = &ls->ls_key;
		else
			break;
		if (*dst != NULL) {
			perr(p, t->tk_line, "listen: duplicate \"%s\"",
			    t->tk_val);
			return -1;
		}
		consume(p);
		if (get_string(p, dst == &ls->ls_cert ? "certificate" : "key",
		    &v, NULL) == -1)
			return -1;
		*dst = v;
	}
	if (ls->ls_cert == NULL || ls->ls_key == NULL) {
		perr(p, ls->ls_line, "listen on %s port %u: tls requires "
		    "certificate and key", ls->ls_addr, ls->ls_port);
		return -1;
	}
	return 0;
}

static int
top_listen(struct parser *p, struct blk *b)
{
	struct listen_conf	*ls, *o;
	char			*v;
	int			 line, rv = -1, bad = 0;
	uint64_t		 port = 0;

	if (expect_kw(p, "listen", "on") == -1)
		return -1;
	ls = xcalloc(1, sizeof(*ls));
	ls->ls_line = b->b_line;
	ls->ls_file = xstrdup(cur(p)->fr_name);
	if (get_value(p, "on", &ls->ls_addr, &line) == -1)
		goto out;
	bad |= listen_addr(p, line, &ls->ls_addr);
	if (expect_kw(p, ls->ls_addr, "port") == -1 ||
	    get_value(p, "port", &v, &line) == -1)
		goto out;
	bad |= parse_uint(p, line, "port", v, 1, 65535, &port);
	free(v);
	ls->ls_port = (uint16_t)port;
	if (is_kw(peek(p), "tls")) {
		consume(p);
		if (listen_tls(p, ls) == -1)
			goto out;
	}
	rv = 0;
	if (bad)
		goto out;
	TAILQ_FOREACH(o, &p->p_conf->c_listens, ls_entry)
		if (strcmp(o->ls_addr, ls->ls_addr) == 0 &&
		    o->ls_port == ls->ls_port) {
			perr(p, ls->ls_line, "duplicate listen on %s port %u "
			    "(first at %s:%d)", ls->ls_addr, ls->ls_port,
			    o->ls_file, o->ls_line);
			goto out;
		}
	TAILQ_INSERT_TAIL(&p->p_conf->c_listens, ls, ls_entry);
	return 0;
 out:
	TAILQ_INSERT_TAIL(&p->p_trash->c_listens, ls, ls_entry);
	return rv;
}

static int
top_auth(struct parser *p, struct blk *b)
{
	struct blk	ab;

	once(p, &p->p_auth_at, b->b_line, "auth block");
	memset(&ab, 0, sizeof(ab));
	ab.b_tab = auth_kw;
	ab.b_desc = "auth";
	parse_block(p, &ab, b->b_line);
	return 0;
}

static int
top_limits(struct parser *p, struct blk *b)
{
	struct blk	lb;

	once(p, &p->p_limits_at, b->b_line, "limits block");
	memset(&lb, 0, sizeof(lb));
	lb.b_tab = limits_kw;
	lb.b_desc = "limits";
	parse_block(p, &lb, b->b_line);
	return 0;
}

/* Audit block */

/*
 * Argument keys masked in the trail unless a mask line says otherwise:
 * what credentials are usually called.  "*token" but not "*token*": a
 * max_tokens is not a secret.
 */
static const char *const audit_default_mask[] = {
	"*password*", "*passwd*", "*passphrase*", "*secret*", "*token",
	"*api?key*", "*apikey*", "*private?key*", "*privatekey*",
	"*credential*", "authorization", "cookie",
};

static void
mask_clear(struct audit_conf *ac)
{
	size_t i;

	for (i = 0; i < ac->ac_nmask; i++)
		free(ac->ac_mask[i]);
	free(ac->ac_mask);
	ac->ac_mask = NULL;
	ac->ac_nmask = 0;
}

static void
mask_defaults(struct audit_conf *ac)
{
	size_t i;

	for (i = 0; i < sizeof(audit_default_mask) /
	    sizeof(audit_default_mask[0]); i++)
		strv_push(&ac->ac_mask, &ac->ac_nmask,
		    xstrdup(audit_default_mask[i]));
}

static int
valid_mask(const char *s)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return 0;
	return i > 0 && i <= 128;
}

/* mask "GLOB"... (lines add up; the first replaces the defaults) | none */
static int
ad_mask(struct parser *p, struct blk *b)
{
	struct audit_conf	*ac = &p->p_conf->c_audit;
	char			*v, q[QBUF];
	int			 line, first = !ac->ac_mask_set;

	if (first) {
		mask_clear(ac);
		ac->ac_mask_set = 1;
	}
	if (is_kw(peek(p), "none")) {
		consume(p);
		if (!first)
			perr(p, b->b_line, "mask none: cannot be combined "
			    "with other mask lines");
		return 0;
	}
	if (get_string(p, "mask", &v, &line) == -1)
		return -1;
	if (!first && ac->ac_nmask == 0)
		perr(p, b->b_line, "mask: cannot follow mask none");
	for (;;) {
		if (!valid_mask(v)) {
			perr(p, line, "mask %s: expected 1-128 printable "
			    "characters", quote(v, q, sizeof(q)));
			free(v);
		} else
			strv_push(&ac->ac_mask, &ac->ac_nmask, v);
		if (peek(p)->tk_type != T_STRING || peek(p)->tk_bad)
			return 0;
		line = peek(p)->tk_line;
		v = take(p);
	}
}

static int
ad_signing_key(struct parser *p, struct blk *b)
{
	return set_secret(p, b, &p->p_conf->c_audit.ac_signing_key,
	    SECRET_FILE, "signing-key-file", "signing-key");
}

static const struct kw audit_kw[] = {
	{ "mask", ad_mask, 1 },
	{ "signing-key-file", ad_signing_key, 0 },
	{ NULL, NULL, 0 },
};

static int
top_audit(struct parser *p, struct blk *b)
{
	struct blk	ab;

	once(p, &p->p_audit_at, b->b_line, "audit block");
	memset(&ab, 0, sizeof(ab));
	ab.b_tab = audit_kw;
	ab.b_desc = "audit";
	parse_block(p, &ab, b->b_line);
	return 0;
}

/*
 * The name of a provider, server or toolset.  Writes the description used
 * in messages ("server \"files\"") to desc.
 */
static int
block_name(struct parser *p, const char *kw, size_t max, int dots,
    char **name, char *desc, size_t sz)
{
	char	q[QBUF];
	int	line;

	if (get_string(p, kw, name, &line) == -1)
		return -1;
	snprintf(desc, sz, "%s %s", kw, quote(*name, q, sizeof(q)));
	if (!valid_name(*name, max, dots))
		perr(p, line, "bad %s name %s: use 1-%zu of A-Z a-z 0-9 _ -%s",
		    kw, q, max, dots ? " ." : "");
	return 0;
}

static int
top_provider(struct parser *p, struct blk *b)
{
	struct provider_conf	*pv, *o;
	struct blk		 pb;
	char			 desc[DESC_LEN];

	pv = xcalloc(1, sizeof(*pv));
	if (block_name(p, "provider", MAX_OTHER_NAME, 1, &pv->pv_name, desc,
	    sizeof(desc)) == -1) {
		TAILQ_INSERT_TAIL(&p->p_trash->c_providers, pv, pv_entry);
		return -1;
	}
	pv->pv_line = b->b_line;
	pv->pv_file = xstrdup(cur(p)->fr_name);
	if ((o = config_find_provider(p->p_conf, pv->pv_name)) != NULL)
		perr(p, b->b_line, "duplicate %s (first defined at %s:%d)",
		    desc, o->pv_file, o->pv_line);
	memset(&pb, 0, sizeof(pb));
	pb.b_tab = provider_kw;
	pb.b_desc = desc;
	pb.b_obj = pv;
	parse_block(p, &pb, b->b_line);
	provider_check(p, pv, desc);
	check_url_addr(p, seen_line(&pb, "base-url"), desc, "base-url",
	    pv->pv_base_url, pv->pv_allow_addr, pv->pv_nallow_addr);
	TAILQ_INSERT_TAIL(o != NULL ? &p->p_trash->c_providers :
	    &p->p_conf->c_providers, pv, pv_entry);
	return 0;
}

static struct server_conf *
server_new(void)
{
	struct server_conf	*srv = xcalloc(1, sizeof(*srv));

	TAILQ_INIT(&srv->srv_headers);
	TAILQ_INIT(&srv->srv_fs);
	srv->srv_transport = TRANSPORT_STDIO;
	srv->srv_isolation = ISOLATION_SHARED;
	srv->srv_pin_policy = PIN_BLOCK;
	srv->srv_call_timeout_ms = 30 * 1000;
	srv->srv_connect_timeout_ms = 10 * 1000;
	srv->srv_idle_timeout_ms = 10 * 60 * 1000;
	srv->srv_max_instances = 32;
	return srv;
}

static int
top_server(struct parser *p, struct blk *b)
{
	struct server_conf	*srv, *o;
	struct blk		 sb;
	char			 desc[DESC_LEN];

	srv = server_new();
	if (block_name(p, "server", MAX_NAME, 0, &srv->srv_name, desc,
	    sizeof(desc)) == -1) {
		TAILQ_INSERT_TAIL(&p->p_trash->c_servers, srv, srv_entry);
		return -1;
	}
	srv->srv_line = b->b_line;
	srv->srv_file = xstrdup(cur(p)->fr_name);
	if ((o = config_find_server(p->p_conf, srv->srv_name)) != NULL)
		perr(p, b->b_line, "duplicate %s (first defined at %s:%d)",
		    desc, o->srv_file, o->srv_line);
	memset(&sb, 0, sizeof(sb));
	sb.b_tab = server_kw;
	sb.b_desc = desc;
	sb.b_obj = srv;
	parse_block(p, &sb, b->b_line);
	server_check(p, srv, &sb);
	TAILQ_INSERT_TAIL(o != NULL ? &p->p_trash->c_servers :
	    &p->p_conf->c_servers, srv, srv_entry);
	return 0;
}

static struct toolset_conf *
find_toolset(struct mcpbroker_conf *conf, const char *name)
{
	struct toolset_conf	*ts;

	TAILQ_FOREACH(ts, &conf->c_toolsets, ts_entry)
		if (strcmp(ts->ts_name, name) == 0)
			return ts;
	return NULL;
}

static int
top_toolset(struct parser *p, struct blk *b)
{
	struct toolset_conf	*ts, *o;
	struct blk		 tb;
	char			 desc[DESC_LEN];

	ts = xcalloc(1, sizeof(*ts));
	if (block_name(p, "toolset", MAX_OTHER_NAME, 1, &ts->ts_name, desc,
	    sizeof(desc)) == -1) {
		TAILQ_INSERT_TAIL(&p->p_trash->c_toolsets, ts, ts_entry);
		return -1;
	}
	ts->ts_line = b->b_line;
	ts->ts_file = xstrdup(cur(p)->fr_name);
	if ((o = find_toolset(p->p_conf, ts->ts_name)) != NULL)
		perr(p, b->b_line, "duplicate %s (first defined at %s:%d)",
		    desc, o->ts_file, o->ts_line);
	memset(&tb, 0, sizeof(tb));
	tb.b_tab = toolset_kw;
	tb.b_desc = desc;
	tb.b_obj = ts;
	parse_block(p, &tb, b->b_line);
	if (ts->ts_ntools == 0)
		perr(p, ts->ts_line, "%s: no tools", desc);
	TAILQ_INSERT_TAIL(o != NULL ? &p->p_trash->c_toolsets :
	    &p->p_conf->c_toolsets, ts, ts_entry);
	return 0;
}

/* Words of an enum, for budget and rule parsing. */
static int
word_index(const char *v, const char *const *words)
{
	int	i;

	for (i = 0; words[i] != NULL; i++)
		if (strcmp(v, words[i]) == 0)
			return i;
	return -1;
}

/*
 * After user "NAME": an optional tenant "T".  A user is a name within a
 * tenant; without one the name is matched in every tenant.
 */
static int
user_tenant(struct parser *p, char **tenant)
{
	const char	*s;
	char		 q[QBUF];
	int		 line;

	if (!is_kw(peek(p), "tenant"))
		return 0;
	consume(p);
	if (get_string(p, "tenant", tenant, &line) == -1)
		return -1;
	/* As `user add -t` takes them: a tenant no user can be in is a typo. */
	for (s = *tenant; *s != '\0'; s++)
		if (!isalnum((unsigned char)*s) && strchr("._@-", *s) == NULL)
			break;
	if (**tenant == '\0' || *s != '\0' || strlen(*tenant) > 64) {
		perr(p, line, "tenant %s: letters, digits and . _ @ -, 64 at "
		    "most", quote(*tenant, q, sizeof(q)));
		return -1;
	}
	return 0;
}

/* budget tenant|role|user "NAME" [tenant "T"] METRIC NUMBER */
static int
top_budget(struct parser *p, struct blk *b)
{
	static const char *const scopes[] = { "tenant", "role", "user", NULL };
	static const char *const metrics[] = { "monthly-usd", "daily-usd",
	    "daily-tokens", "monthly-tokens", NULL };
	struct budget_conf	*bg, *o;
	char			*v = NULL, q[QBUF];
	int			 line, i, rv = -1;

	bg = xcalloc(1, sizeof(*bg));
	bg->bg_line = b->b_line;
	bg->bg_file = xstrdup(cur(p)->fr_name);
	if (get_value(p, "budget", &v, &line) == -1)
		goto drop;
	if ((i = word_index(v, scopes)) == -1) {
		perr(p, line, "budget: bad scope %s: expected tenant, role or "
		    "user", quote(v, q, sizeof(q)));
		goto drop;
	}
	bg->bg_scope = (enum budget_scope)i;
	if (get_string(p, scopes[i], &bg->bg_subject, NULL) == -1 ||
	    (bg->bg_scope == BUDGET_USER && user_tenant(p, &bg->bg_tenant) ==
	    -1))
		goto drop;
	free(v);
	v = NULL;
	if (get_value(p, bg->bg_tenant != NULL ? bg->bg_tenant :
	    bg->bg_subject, &v, &line) == -1)
		goto drop;
	if ((i = word_index(v, metrics)) == -1) {
		perr(p, line, "budget: bad limit %s: expected monthly-usd, "
		    "daily-usd, daily-tokens or monthly-tokens",
		    quote(v, q, sizeof(q)));
		goto drop;
	}
	bg->bg_metric = (enum budget_metric)i;
	free(v);
	v = NULL;
	if (get_value(p, metrics[i], &v, &line) == -1)
		goto drop;
	rv = 0;
	if (parse_decimal(p, line, "budget", v, &bg->bg_limit) == -1)
		goto drop;
	TAILQ_FOREACH(o, &p->p_conf->c_budgets, bg_entry)
		if (o->bg_scope == bg->bg_scope && o->bg_metric ==
		    bg->bg_metric && strcmp(o->bg_subject, bg->bg_subject) ==
		    0 && strcmp(o->bg_tenant != NULL ? o->bg_tenant : "",
		    bg->bg_tenant != NULL ? bg->bg_tenant : "") == 0) {
			perr(p, bg->bg_line, "duplicate budget %s %s %s (first "
			    "at %s:%d)", scopes[bg->bg_scope],
			    quote(bg->bg_subject, q, sizeof(q)),
			    metrics[bg->bg_metric], o->bg_file, o->bg_line);
			goto drop;
		}
	free(v);
	TAILQ_INSERT_TAIL(&p->p_conf->c_budgets, bg, bg_entry);
	return 0;
 drop:
	free(v);
	TAILQ_INSERT_TAIL(&p->p_trash->c_budgets, bg, bg_entry);
	return rv;
}

/* A retention period: a duration, or forever (0). */
static int
retention_value(struct parser *p, const char *kw, uint64_t *ms)
{
	char	*v;
	int	 line, rv = 0;

	if (get_value(p, kw, &v, &line) == -1)
		return -1;
	if (strcmp(v, "forever") == 0)
		*ms = 0;
	else
		rv = parse_duration(p, line, "retention", v, ms);
	free(v);
	return rv;
}

/* retention tenant "NAME" DURATION|forever */
static int
retention_tenant(struct parser *p, struct blk *b)
{
	struct retention_conf	*rt, *o;
	char			 q[QBUF];

	rt = xcalloc(1, sizeof(*rt));
	rt->rt_line = b->b_line;
	rt->rt_file = xstrdup(cur(p)->fr_name);
	if (get_string(p, "tenant", &rt->rt_tenant, NULL) == -1 ||
	    retention_value(p, rt->rt_tenant, &rt->rt_ms) == -1) {
		TAILQ_INSERT_TAIL(&p->p_trash->c_retentions, rt, rt_entry);
		return -1;
	}
	TAILQ_FOREACH(o, &p->p_conf->c_retentions, rt_entry)
		if (strcmp(o->rt_tenant, rt->rt_tenant) == 0) {
			perr(p, rt->rt_line, "duplicate retention tenant %s "
			    "(first at %s:%d)", quote(rt->rt_tenant, q,
			    sizeof(q)), o->rt_file, o->rt_line);
			TAILQ_INSERT_TAIL(&p->p_trash->c_retentions, rt,
			    rt_entry);
			return 0;
		}
	TAILQ_INSERT_TAIL(&p->p_conf->c_retentions, rt, rt_entry);
	return 0;
}

/*
 * retention DURATION|forever: how long a conversation is kept after its
 * last message; retention tenant "NAME" ... for one tenant.
 */
static int
top_retention(struct parser *p, struct blk *b)
{
	uint64_t	ms;

	if (is_kw(peek(p), "tenant")) {
		consume(p);
		return retention_tenant(p, b);
	}
	if (retention_value(p, "retention", &ms) == -1)
		return -1;
	if (once(p, &p->p_retention_at, b->b_line, "retention") == 0)
		p->p_conf->c_retention_ms = ms;
	return 0;
}

/* store-tool-results yes|no: whole results in stored conversations. */
static int
top_store_results(struct parser *p, struct blk *b)
{
	char	*v, q[QBUF];
	int	 line;

	if (get_value(p, "store-tool-results", &v, &line) == -1)
		return -1;
	if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0)
		perr(p, line, "store-tool-results: expected yes or no, got %s",
		    quote(v, q, sizeof(q)));
	else if (once(p, &p->p_store_results_at, b->b_line,
	    "store-tool-results") == 0)
		p->p_conf->c_store_tool_results = strcmp(v, "yes") == 0;
	free(v);
	return 0;
}

/* log-format text|json: how the daemon's lines are written. */
static int
top_log_format(struct parser *p, struct blk *b)
{
	char	*v, q[QBUF];
	int	 line;

	if (get_value(p, "log-format", &v, &line) == -1)
		return -1;
	if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0)
		perr(p, line, "log-format: expected text or json, got %s",
		    quote(v, q, sizeof(q)));
	else if (once(p, &p->p_log_format_at, b->b_line, "log-format") == 0)
		p->p_conf->c_log_json = strcmp(v, "json") == 0;
	free(v);
	return 0;
}

/* Policy rules */

/* where ARG prefix|equals|matches "VALUE" | where ARG max-length N */
static int
rule_where(struct parser *p, struct policy_rule *r)
{
	static const char *const ops[] = { "prefix", "equals", "matches",
	    "max-length", NULL };
	struct policy_cond	*pc;
	char			*arg, *op, q[QBUF];
	int			 line, i;
	uint64_t		 n;

	if (get_value(p, "where", &arg, &line) == -1)
		return -1;
	if (*arg == '\0') {
		perr(p, line, "where: empty argument name");
		free(arg);
		return -1;
	}
	if (get_value(p, arg, &op, &line) == -1) {
		free(arg);
		return -1;
	}
	if ((i = word_index(op, ops)) == -1) {
		perr(p, line, "where %s: bad condition %s: expected prefix, "
		    "equals, matches or max-length", arg,
		    quote(op, q, sizeof(q)));
		free(op);
		free(arg);
		return -1;
	}
	pc = xcalloc(1, sizeof(*pc));
	pc->pc_arg = arg;
	pc->pc_op = (enum policy_op)i;
	TAILQ_INSERT_TAIL(&r->pr_conds, pc, pc_entry);
	if (pc->pc_op != COND_MAX_LENGTH) {
		free(op);
		return get_string(p, ops[i], &pc->pc_value, NULL);
	}
	free(op);
	if (get_value(p, "max-length", &op, &line) == -1)
		return -1;
	i = parse_uint(p, line, "max-length", op, 1, 1 << 30, &n);
	pc->pc_num = (long long)n;
	free(op);
	return i;
}

static const struct {
	const char	*rp_name;
	unsigned int	 rp_secs;
} rate_periods[] = {
	{ "second", 1 },
	{ "minute", 60 },
	{ "hour", 3600 },
	{ "day", 86400 },
};

/* rate N/second|minute|hour|day */
static int
rule_rate(struct parser *p, struct policy_rule *r, int kwline)
{
	char		*v, *slash, q[QBUF];
	int		 line, rv = -1;
	size_t		 i;
	uint64_t	 n;

	if (r->pr_rate_count != 0) {
		perr(p, kwline, "rule: duplicate rate");
		return -1;
	}
	if (get_value(p, "rate", &v, &line) == -1)
		return -1;
	if ((slash = strchr(v, '/')) != NULL) {
		*slash = '\0';
		for (i = 0; i < sizeof(rate_periods) / sizeof(rate_periods[0]);
		    i++)
			if (strcmp(slash + 1, rate_periods[i].rp_name) == 0)
				r->pr_rate_period = rate_periods[i].rp_secs;
	}
	if (slash == NULL || r->pr_rate_period == 0) {
		if (slash != NULL)
			*slash = '/';
		perr(p, line, "rate %s: expected N/second, N/minute, N/hour or "
		    "N/day", quote(v, q, sizeof(q)));
	} else if (parse_uint(p, line, "rate", v, 1, 1000000, &n) == 0) {
		r->pr_rate_count = (unsigned int)n;
		rv = 0;
	}
	free(v);
	return rv;
}

static int
rule_body(struct parser *p, struct policy_rule *r, const char *action)
{
	static const char *const subjects[] = { "user", "role", "tenant",
	    NULL };
	static const char *const kinds[] = { "tool", "resource", "prompt",
	    NULL };
	struct token	*t;
	char		 b[QBUF];
	int		 i, line, subject = 0;

	t = peek(p);
	if (t->tk_type == T_WORD && (i = word_index(t->tk_val, subjects)) >= 0) {
		r->pr_subject = (enum policy_subject)(SUBJECT_USER + i);
		consume(p);
		if (get_string(p, subjects[i], &r->pr_subject_name, NULL) ==
		    -1 || (r->pr_subject == SUBJECT_USER && user_tenant(p,
		    &r->pr_subject_tenant) == -1))
			return -1;
		subject = 1;
	}
	t = peek(p);
	if (t->tk_type != T_WORD || (i = word_index(t->tk_val, kinds)) < 0) {
		if (!t->tk_bad)
			perr(p, t->tk_line, "expected \"tool\", \"resource\" or "
			    "\"prompt\" after \"%s\", got %s", subject ?
			    subjects[r->pr_subject - SUBJECT_USER] : action,
			    tok_desc(t, b, sizeof(b)));
		return -1;
	}
	r->pr_kind = (enum policy_kind)i;
	consume(p);
	if (get_glob_list(p, kinds[i], NULL, action, &r->pr_tools,
	    &r->pr_ntools) == -1)
		return -1;
	for (;;) {
		t = peek(p);
		line = t->tk_line;
		if (is_kw(t, "where") && r->pr_kind == POLICY_RESOURCE) {
			perr(p, line, "%s rule: a resource has no arguments to "
			    "put a where on; write the URI in the glob", action);
			return -1;
		} else if (is_kw(t, "where")) {
			consume(p);
			if (rule_where(p, r) == -1)
				return -1;
		} else if (is_kw(t, "rate")) {
			consume(p);
			if (rule_rate(p, r, line) == -1)
				return -1;
		} else
			return 0;
	}
}

static int
top_rule(struct parser *p, struct blk *b, enum policy_action a)
{
	static const char *const actions[] = { "allow", "deny", "confirm" };
	struct policy_rule	*r;

	r = xcalloc(1, sizeof(*r));
	TAILQ_INIT(&r->pr_conds);
	r->pr_action = a;
	r->pr_subject = SUBJECT_ANY;
	r->pr_line = b->b_line;
	r->pr_file = xstrdup(cur(p)->fr_name);
	if (rule_body(p, r, actions[a]) == -1) {
		TAILQ_INSERT_TAIL(&p->p_trash->c_rules, r, pr_entry);
		return -1;
	}
	TAILQ_INSERT_TAIL(&p->p_conf->c_rules, r, pr_entry);
	return 0;
}

static int
top_allow(struct parser *p, struct blk *b)
{
	return top_rule(p, b, POLICY_ALLOW);
}

static int
top_deny(struct parser *p, struct blk *b)
{
	return top_rule(p, b, POLICY_DENY);
}

static int
top_confirm(struct parser *p, struct blk *b)
{
	return top_rule(p, b, POLICY_CONFIRM);
}

/* Files and include */

static void
frame_free(struct frame *f)
{
	if (f == NULL)
		return;
	free(f->fr_name);
	free(f->fr_buf);
	free(f);
}

/* Read path whole; errno on failure. */
static int
read_file(const char *path, struct frame *f)
{
	struct stat	 st;
	ssize_t		 n;
	size_t		 len = 0;
	int		 fd, e;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
		return errno;
	if (fstat(fd, &st) == -1)
		goto fail;
	if (!S_ISREG(st.st_mode)) {
		errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		goto fail;
	}
	if (st.st_size > MAX_FILE) {
		errno = EFBIG;
		goto fail;
	}
	f->fr_buf = xcalloc(1, (size_t)st.st_size + 1);
	/* the size was checked; a file that grows meanwhile is cut */
	while (len < (size_t)st.st_size) {
		n = read(fd, f->fr_buf + len, (size_t)st.st_size - len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			goto fail;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	f->fr_data = f->fr_buf;
	f->fr_len = len;
	f->fr_dev = st.st_dev;
	f->fr_ino = st.st_ino;
	return 0;
 fail:
	e = errno;
	close(fd);
	return e;
}

static struct frame *
frame_open(struct parser *p, const char *path, const char *errfile,
    int errline)
{
	struct frame	*f = xcalloc(1, sizeof(*f));
	char		 q[QBUF];
	int		 e;

	f->fr_name = xstrdup(path);
	f->fr_line = 1;
	if ((e = read_file(path, f)) != 0) {
		perr_at(p, errfile, errline, "cannot open %s: %s",
		    quote(path, q, sizeof(q)), e == EFBIG ?
		    "file too large (max 4 MiB)" : strerror(e));
		frame_free(f);
		return NULL;
	}
	return f;
}

/* Relative includes are relative to the including file's directory. */
static char *
include_path(const char *from, const char *path)
{
	const char	*slash;
	char		*res;

	if (path[0] == '/' || (slash = strrchr(from, '/')) == NULL)
		return xstrdup(path);
	if (asprintf(&res, "%.*s/%s", (int)(slash - from), from, path) == -1)
		fatal("asprintf");
	return res;
}

static void
include_loop(struct parser *p, int line, int first, const char *path)
{
	char	chain[1024], q[QBUF];
	size_t	len = 0;
	int	i;

	chain[0] = '\0';
	for (i = first; i < p->p_nframes && len < sizeof(chain); i++)
		len += (size_t)snprintf(chain + len, sizeof(chain) - len,
		    "%s -> ", quote(p->p_frames[i]->fr_name, q, sizeof(q)));
	if (len < sizeof(chain))
		snprintf(chain + len, sizeof(chain) - len, "%s",
		    quote(path, q, sizeof(q)));
	perr(p, line, "include loop: %s", chain);
}

static int
top_include(struct parser *p, struct blk *b)
{
	struct frame	*f;
	char		*v, *path;
	int		 i;

	if (!p->p_allow_include) {
		perr(p, b->b_line, "include is not allowed here");
		if (peek(p)->tk_type == T_STRING)
			consume(p);
		return 0;
	}
	if (get_string(p, "include", &v, NULL) == -1)
		return -1;
	path = include_path(cur(p)->fr_name, v);
	free(v);
	if (p->p_nframes > MAX_INCLUDE) {
		perr(p, b->b_line, "include nested too deeply (max %d)",
		    MAX_INCLUDE);
		free(path);
		return 0;
	}
	if ((f = frame_open(p, path, cur(p)->fr_name, b->b_line)) == NULL) {
		free(path);
		return 0;
	}
	for (i = 0; i < p->p_nframes; i++)
		if (p->p_frames[i]->fr_dev == f->fr_dev &&
		    p->p_frames[i]->fr_ino == f->fr_ino) {
			include_loop(p, b->b_line, i, path);
			frame_free(f);
			free(path);
			return 0;
		}
	free(path);
	p->p_frames[p->p_nframes++] = f;
	parse_top(p);
	p->p_nframes--;
	frame_free(f);
	return 0;
}

static const struct kw top_kw[] = {
	{ "audit", top_audit, 1 },
	{ "user", top_user, 1 },
	{ "instance-user", top_instance_user, 1 },
	{ "state-dir", top_state_dir, 1 },
	{ "control", top_control, 1 },
	{ "listen", top_listen, 1 },
	{ "auth", top_auth, 1 },
	{ "provider", top_provider, 1 },
	{ "server", top_server, 1 },
	{ "toolset", top_toolset, 1 },
	{ "limits", top_limits, 1 },
	{ "budget", top_budget, 1 },
	{ "retention", top_retention, 1 },
	{ "store-tool-results", top_store_results, 1 },
	{ "log-format", top_log_format, 1 },
	{ "allow", top_allow, 1 },
	{ "deny", top_deny, 1 },
	{ "confirm", top_confirm, 1 },
	{ "include", top_include, 1 },
	{ NULL, NULL, 0 },
};
_Static_assert(sizeof(top_kw) / sizeof(top_kw[0]) <= BLK_MAXKW,
    "b_seen too small");

/* Macros */

static void
macro_set(struct parser *p, const char *name, const char *value, int cmdline)
{
	struct macro	*m;

	for (m = p->p_macros; m != NULL; m = m->m_next)
		if (strcmp(m->m_name, name) == 0)
			break;
	if (m != NULL) {
		if (m->m_cmdline && !cmdline)
			return;		/* -D overrides the file */
		set_str(&m->m_value, xstrdup(value));
		m->m_cmdline = cmdline;
		return;
	}
	m = xcalloc(1, sizeof(*m));
	m->m_name = xstrdup(name);
	m->m_value = xstrdup(value);
	m->m_cmdline = cmdline;
	m->m_next = p->p_macros;
	p->p_macros = m;
}

static int
valid_macro_name(const char *s)
{
	return valid_name(s, MAX_OTHER_NAME, 0) && strchr(s, '-') == NULL;
}

/* NAME = VALUE; the name was taken already. */
static void
macro_define(struct parser *p, char *name, int line)
{
	char	*v, q[QBUF];

	consume(p);		/* = */
	if (get_value(p, "=", &v, NULL) == -1) {
		skip_statement(p, top_kw);
		return;
	}
	if (!valid_macro_name(name))
		perr(p, line, "bad macro name %s: use A-Z a-z 0-9 _",
		    quote(name, q, sizeof(q)));
	else
		macro_set(p, name, v, 0);
	free(v);
}

static int
add_defines(struct parser *p, const char *file, char *const *defines)
{
	const char	*eq, *c;
	char		*name, q[QBUF];

	for (; defines != NULL && *defines != NULL; defines++) {
		eq = strchr(*defines, '=');
		name = eq == NULL ? NULL :
		    xstrndup(*defines, (size_t)(eq - *defines));
		for (c = eq == NULL ? "" : eq + 1; *c != '\0'; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				break;
		if (name == NULL || !valid_macro_name(name) || *c != '\0' ||
		    strlen(eq + 1) > MAX_TOKEN)
			perr_at(p, file, 0, "bad -D %s: expected name=value",
			    quote(*defines, q, sizeof(q)));
		else
			macro_set(p, name, eq + 1, 1);
		free(name);
	}
	return 0;
}

/* Top level */

static void
parse_top(struct parser *p)
{
	struct token	*t;
	struct blk	 b;
	char		*name, q[QBUF];
	int		 i, line;

	for (;;) {
		t = peek(p);
		if (t->tk_type == T_EOF) {
			consume(p);
			return;
		}
		if (t->tk_type == T_RBRACE) {
			perr(p, t->tk_line, "unexpected \"}\"");
			consume(p);
			continue;
		}
		if (t->tk_type != T_WORD) {
			if (!t->tk_bad)
				perr(p, t->tk_line, "expected a keyword, got %s",
				    tok_desc(t, q, sizeof(q)));
			if (t->tk_type != T_LBRACE)
				consume(p);
			skip_statement(p, top_kw);
			continue;
		}
		line = t->tk_line;
		if ((i = kw_lookup(top_kw, t)) >= 0) {
			memset(&b, 0, sizeof(b));
			b.b_tab = top_kw;
			b.b_line = line;
			consume(p);
			if (top_kw[i].kw_fn(p, &b) == -1)
				skip_statement(p, top_kw);
			continue;
		}
		name = take(p);
		if (peek(p)->tk_type == T_EQUALS)
			macro_define(p, name, line);
		else {
			perr(p, line, "unknown keyword \"%s\"",
			    tok_desc(&(struct token){ .tk_type = T_WORD,
			    .tk_val = name }, q, sizeof(q)));
			skip_statement(p, top_kw);
		}
		free(name);
	}
}

static struct mcpbroker_conf *
conf_new(void)
{
	struct mcpbroker_conf	*conf = xcalloc(1, sizeof(*conf));

	mask_defaults(&conf->c_audit);
	conf->c_user = xstrdup(CONF_DEFAULT_USER);
	conf->c_state_dir = xstrdup(CONF_DEFAULT_STATE_DIR);
	conf->c_control_path = xstrdup(CONF_DEFAULT_CONTROL);
	TAILQ_INIT(&conf->c_listens);
	TAILQ_INIT(&conf->c_providers);
	TAILQ_INIT(&conf->c_servers);
	TAILQ_INIT(&conf->c_toolsets);
	TAILQ_INIT(&conf->c_budgets);
	TAILQ_INIT(&conf->c_retentions);
	TAILQ_INIT(&conf->c_rules);
	conf->c_limits.lm_tool_rounds = 10;
	conf->c_limits.lm_tool_timeout_ms = 30 * 1000;
	conf->c_limits.lm_history_messages = 50;
	conf->c_limits.lm_max_body = 1024 * 1024;
	conf->c_limits.lm_header_timeout_ms = 10 * 1000;
	conf->c_limits.lm_llm_timeout_ms = 120 * 1000;
	conf->c_limits.lm_approval_timeout_ms = 5 * 60 * 1000;
	conf->c_limits.lm_max_result_bytes = 64 * 1024;
	conf->c_auth.au_session_idle_ms = CONF_DEFAULT_SESSION_IDLE_MS;
	conf->c_auth.au_session_lifetime_ms = CONF_DEFAULT_SESSION_LIFE_MS;
	return conf;
}

static void
parser_init(struct parser *p, FILE *errs, int allow_include)
{
	memset(p, 0, sizeof(*p));
	p->p_conf = conf_new();
	p->p_trash = conf_new();
	p->p_errs = errs;
	p->p_allow_include = allow_include;
}

/*
 * Two servers of one toolset whose tool names start alike could offer an
 * MCP client the same name: one would shadow the other.  Names are
 * PREFIX + TOOL, so that cannot happen when no server's prefix starts
 * another's (SERVER. never does; SERVER__ and bare names can).
 */
static void
check_toolset_names(struct parser *p, const struct toolset_conf *ts)
{
	const struct server_conf	*a, *b;
	char				 pa[MAX_NAME + 3], pb[MAX_NAME + 3];

	TAILQ_FOREACH(a, &p->p_conf->c_servers, srv_entry) {
		if (!toolset_has_server(ts, a->srv_name))
			continue;
		toolset_prefix(ts, a->srv_name, pa, sizeof(pa));
		for (b = TAILQ_NEXT(a, srv_entry); b != NULL;
		    b = TAILQ_NEXT(b, srv_entry)) {
			if (!toolset_has_server(ts, b->srv_name))
				continue;
			toolset_prefix(ts, b->srv_name, pb, sizeof(pb));
			if (strncmp(pa, pb, strlen(pa)) != 0 &&
			    strncmp(pa, pb, strlen(pb)) != 0)
				continue;
			perr_at(p, ts->ts_file, ts->ts_line, "toolset \"%s\": "
			    "servers \"%s\" and \"%s\" may offer tools of the "
			    "same name with names %s; give the toolset one of "
			    "them, or names dotted", ts->ts_name, a->srv_name,
			    b->srv_name, toolset_names_str(ts->ts_names));
			return;
		}
	}
}

/*
 * References are resolved in reverse order of appearance (the list is a
 * stack); reverse it first so that messages come out in file order.
 */
static void
check_refs(struct parser *p)
{
	struct ref	*r, *next, *rev = NULL;
	char		 q[QBUF];

	for (r = p->p_refs; r != NULL; r = next) {
		next = r->rf_next;
		r->rf_next = rev;
		rev = r;
	}
	for (r = rev; r != NULL; r = next) {
		next = r->rf_next;
		if (config_find_server(p->p_conf, r->rf_server) == NULL)
			perr_at(p, r->rf_file, r->rf_line, "%s: unknown server "
			    "%s", r->rf_owner, quote(r->rf_server, q,
			    sizeof(q)));
		free(r->rf_owner);
		free(r->rf_server);
		free(r->rf_file);
		free(r);
	}
	p->p_refs = NULL;
}

static struct mcpbroker_conf *
parser_finish(struct parser *p)
{
	struct mcpbroker_conf	*conf = p->p_conf;
	struct macro		*m;
	struct where		*w[] = { &p->p_user_at, &p->p_state_at,
				    &p->p_instance_user_at,
				    &p->p_control_at, &p->p_auth_at,
				    &p->p_limits_at, &p->p_retention_at,
				    &p->p_store_results_at, &p->p_log_format_at };
	const struct toolset_conf *ts;
	size_t			 i;

	check_refs(p);
	TAILQ_FOREACH(ts, &conf->c_toolsets, ts_entry)
		check_toolset_names(p, ts);
	tok_free(&p->p_la);
	while ((m = p->p_macros) != NULL) {
		p->p_macros = m->m_next;
		free(m->m_name);
		free(m->m_value);
		free(m);
	}
	for (i = 0; i < sizeof(w) / sizeof(w[0]); i++)
		free(w[i]->wh_file);
	free(p->p_audit_at.wh_file);
	config_free(p->p_trash);
	if (p->p_nerrors > 0 || p->p_stop) {
		config_free(conf);
		return NULL;
	}
	return conf;
}

struct mcpbroker_conf *
config_parse_file(const char *path, char *const *defines, FILE *errs)
{
	struct parser	 p;
	struct frame	*f;

	parser_init(&p, errs, 1);
	add_defines(&p, path, defines);
	if ((f = frame_open(&p, path, path, 0)) != NULL) {
		p.p_frames[p.p_nframes++] = f;
		parse_top(&p);
		p.p_nframes = 0;
		frame_free(f);
	}
	/* check_refs reports with its own file names: no frame needed */
	return parser_finish(&p);
}

struct mcpbroker_conf *
config_parse_buffer(const char *name, const char *buf, size_t len,
    FILE *errs)
{
	struct parser	p;
	struct frame	f;

	parser_init(&p, errs, 0);
	memset(&f, 0, sizeof(f));
	f.fr_name = (char *)name;
	f.fr_data = buf;
	f.fr_len = len;
	f.fr_line = 1;
	p.p_frames[p.p_nframes++] = &f;
	parse_top(&p);
	p.p_nframes = 0;
	return parser_finish(&p);
}
