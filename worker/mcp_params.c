#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>
#include <openssl/evp.h>

#include "worker/mcp_params.h"

#define SCHEMA_DEPTH_MAX	32
#define JS_SAFE_INT		9007199254740991LL	/* 2^53 - 1 */

struct walk {
	const char	*w_names[MCP_PARAM_HEADERS_MAX];
	size_t		 w_n;
	char		*w_why;
	size_t		 w_whylen;
};

/* RFC 9110 token characters. */
static int
is_token(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++)
		if (!isalnum((unsigned char)*s) &&
		    strchr("!#$%&'*+-.^_`|~", *s) == NULL)
			return 0;
	return 1;
}

static int
bad(struct walk *w, const char *why)
{
	snprintf(w->w_why, w->w_whylen, "%s", why);
	return -1;
}

static int	walk_node(struct walk *, struct json_object *, int reachable,
		    int depth);

/* An annotated property: a token name, unique, on a primitive type. */
static int
check_annotation(struct walk *w, struct json_object *node)
{
	struct json_object	*h, *type;
	const char		*name, *t;
	size_t			 i;

	json_object_object_get_ex(node, "x-mcp-header", &h);
	if (!json_object_is_type(h, json_type_string) ||
	    !is_token(name = json_object_get_string(h)) ||
	    strlen(name) > MCP_PARAM_NAME_MAX)
		return bad(w, "x-mcp-header is not a valid header name");
	if (!json_object_object_get_ex(node, "type", &type) ||
	    !json_object_is_type(type, json_type_string) ||
	    (strcmp(t = json_object_get_string(type), "string") != 0 &&
	    strcmp(t, "integer") != 0 && strcmp(t, "boolean") != 0))
		return bad(w, "x-mcp-header on a parameter that is not a "
		    "string, integer or boolean");
	for (i = 0; i < w->w_n; i++)
		if (strcasecmp(w->w_names[i], name) == 0)
			return bad(w, "x-mcp-header names are not unique");
	if (w->w_n == MCP_PARAM_HEADERS_MAX)
		return bad(w, "too many x-mcp-header parameters");
	w->w_names[w->w_n++] = name;
	return 0;
}

/*
 * Annotations count only where reachable from the root through
 * "properties" alone; one anywhere else makes the tool invalid.
 */
static int
walk_node(struct walk *w, struct json_object *node, int reachable, int depth)
{
	size_t i;

	if (depth > SCHEMA_DEPTH_MAX)
		return bad(w, "input schema nested too deeply");
	if (json_object_is_type(node, json_type_array)) {
		for (i = 0; i < json_object_array_length(node); i++)
			if (walk_node(w, json_object_array_get_idx(node, i), 0,
			    depth + 1) == -1)
				return -1;
		return 0;
	}
	if (!json_object_is_type(node, json_type_object))
		return 0;
	if (json_object_object_get_ex(node, "x-mcp-header", NULL)) {
		if (!reachable)
			return bad(w, "x-mcp-header where it cannot apply");
		if (check_annotation(w, node) == -1)
			return -1;
	}
	json_object_object_foreach(node, key, val) {
		if (strcmp(key, "properties") == 0 &&
		    json_object_is_type(val, json_type_object)) {
			json_object_object_foreach(val, pkey, pval) {
				(void)pkey;
				if (walk_node(w, pval, reachable, depth + 1) ==
				    -1)
					return -1;
			}
		} else if (walk_node(w, val, 0, depth + 1) == -1)
			return -1;
	}
	return 0;
}

int
mcp_param_headers_check(struct json_object *schema, char *why, size_t whylen)
{
	struct walk w = { .w_why = why, .w_whylen = whylen };

	return walk_node(&w, schema, 1, 0);
}

int
mcp_header_value(const char *v, size_t len, char *out, size_t outlen)
{
	size_t	i;
	int	safe = len > 0 && v[0] != ' ' && v[0] != '\t' &&
		    v[len - 1] != ' ' && v[len - 1] != '\t';

	for (i = 0; i < len && safe; i++)
		if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
			safe = v[i] == '\t';
	if (safe && len >= 11 && strncmp(v, "=?base64?", 9) == 0 &&
	    strncmp(v + len - 2, "?=", 2) == 0)
		safe = 0;
	/* Cut, a value would say something else than the argument. */
	if (safe ? len >= outlen : (len + 2) / 3 * 4 + 12 > outlen) {
		if (outlen > 0)
			out[0] = '\0';
		return -1;
	}
	if (safe) {
		memcpy(out, v, len);
		out[len] = '\0';
		return 0;
	}
	memcpy(out, "=?base64?", 9);
	i = EVP_EncodeBlock((unsigned char *)out + 9, (const unsigned char *)v,
	    len);
	memcpy(out + 9 + i, "?=", 3);
	return 0;
}

/* The value at an annotated property, if the arguments have one. */
static int
add_value(struct json_object *node, struct json_object *arg,
    struct mcp_param_header *h)
{
	struct json_object	*name;
	char			 num[32];
	const char		*v;
	size_t			 len;
	int64_t			 n;

	json_object_object_get_ex(node, "x-mcp-header", &name);
	if (json_object_is_type(arg, json_type_string)) {
		v = json_object_get_string(arg);
		len = json_object_get_string_len(arg);
	} else if (json_object_is_type(arg, json_type_boolean)) {
		v = json_object_get_boolean(arg) ? "true" : "false";
		len = strlen(v);
	} else if (json_object_is_type(arg, json_type_int) &&
	    (n = json_object_get_int64(arg)) >= -JS_SAFE_INT &&
	    n <= JS_SAFE_INT) {
		snprintf(num, sizeof(num), "%" PRId64, n);
		v = num;
		len = strlen(v);
	} else
		return 0;
	snprintf(h->ph_name, sizeof(h->ph_name), "Mcp-Param-%s",
	    json_object_get_string(name));
	/* Too long even encoded: left out, the body still has it. */
	return mcp_header_value(v, len, h->ph_value, sizeof(h->ph_value)) ==
	    0;
}

static size_t
collect(struct json_object *node, struct json_object *args,
    struct mcp_param_header *h, size_t max, int depth)
{
	struct json_object	*props, *arg;
	size_t			 n = 0;

	if (depth > SCHEMA_DEPTH_MAX || !json_object_is_type(node,
	    json_type_object) || !json_object_object_get_ex(node, "properties",
	    &props) || !json_object_is_type(props, json_type_object) ||
	    !json_object_is_type(args, json_type_object))
		return 0;
	json_object_object_foreach(props, key, prop) {
		if (n == max || !json_object_object_get_ex(args, key, &arg))
			continue;
		if (json_object_object_get_ex(prop, "x-mcp-header", NULL))
			n += add_value(prop, arg, &h[n]);
		else
			n += collect(prop, arg, h + n, max - n, depth + 1);
	}
	return n;
}

size_t
mcp_param_headers(struct json_object *schema, struct json_object *args,
    struct mcp_param_header *h, size_t max)
{
	return collect(schema, args, h, max, 0);
}
