/*
 * The Gemini API (generativelanguage.googleapis.com), streamed:
 * POST /v1beta/models/MODEL:streamGenerateContent?alt=sse, each SSE data
 * line a whole GenerateContentResponse.
 *
 * References: the Gemini API reference (models.streamGenerateContent,
 * Content, Part, FunctionDeclaration, Schema, GenerateContentResponse),
 * the "Thought signatures" page, and the official SDK
 * (googleapis/python-genai: types.py, _transformers.py process_schema,
 * which this file's schema conversion follows).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "broker/providers/provider.h"
#include "broker/providers/provider_util.h"
#include "common/sse.h"
#include "common/util.h"

#define GEM_MAX_EVENT		(PROVIDER_MAX_ARGUMENTS + 64 * 1024)
#define GEM_MAX_SYSTEM		(4 * 1024 * 1024)
#define GEM_ID_MAX		64	/* a call id Gemini gives us */
#define GEM_NAME_MAX		128	/* FunctionDeclaration.name */
#define GEM_SCHEMA_NODES	4096	/* $ref expansion is not free */
#define GEM_SCHEMA_DEPTH	JSON_MAX_DEPTH
#define GEM_REF_DEPTH		16
#define GEM_SIG_SLOTS		64
#define GEM_SIG_MAX		(32 * 1024)

/*
 * Thought signatures.  Gemini 3 refuses (400) a history whose function
 * calls in the current turn lack the signature that came with them, and
 * chat_tool_call has no field to carry one.  So the signatures of recent
 * calls are remembered here, by call id (ids we make are random, so they
 * do not collide across conversations).  A call not found (older than the
 * table, from before a restart, or made by another provider) gets the
 * validator-skipping value Google documents for histories it did not
 * sign, which costs reasoning quality but not the request.  The table is
 * per process; the controller runs one event loop, so no locking.
 */
#define GEM_SIG_SKIP		"skip_thought_signature_validator"

struct gem_sig {
	char	 gs_id[GEM_ID_MAX + 8];
	char	*gs_sig;
};
static struct gem_sig	 gem_sigs[GEM_SIG_SLOTS];
static size_t		 gem_sig_next;

struct provider_stream {
	const struct provider_events	*st_ev;
	void				*st_arg;
	struct sse_parser		*st_sse;
	size_t				 st_ncalls;
	int				 st_finished;	/* got finishReason */
	int				 st_failed;
	char				 st_err[PROVIDER_MAX_ERROR];
};

static void
gem_sig_remember(const char *id, const char *sig)
{
	struct gem_sig	*gs;
	size_t		 len = strlen(sig);
	char		*copy;

	if (len == 0 || len > GEM_SIG_MAX || strlen(id) >= sizeof(gs->gs_id) ||
	    (copy = strdup(sig)) == NULL)
		return;
	gs = &gem_sigs[gem_sig_next++ % GEM_SIG_SLOTS];
	free(gs->gs_sig);
	gs->gs_sig = copy;
	snprintf(gs->gs_id, sizeof(gs->gs_id), "%s", id);
}

static const char *
gem_sig_find(const char *id)
{
	size_t	 i;

	if (id == NULL)
		return NULL;
	for (i = 0; i < GEM_SIG_SLOTS; i++)
		if (gem_sigs[i].gs_sig != NULL &&
		    strcmp(gem_sigs[i].gs_id, id) == 0)
			return gem_sigs[i].gs_sig;
	return NULL;
}

/* Schema: JSON Schema in, Gemini's OpenAPI 3.0 subset out. */

struct gem_walk {
	struct json_object	*gw_root;	/* for "#/$defs/NAME" */
	const char		*gw_refs[GEM_REF_DEPTH]; /* being expanded */
	size_t			 gw_nrefs;
	size_t			 gw_nodes;
};

static struct json_object *gem_schema(struct gem_walk *,
		    struct json_object *, int depth);

static struct json_object *
gem_get(struct json_object *o, const char *key, enum json_type type)
{
	struct json_object	*v;

	if (o == NULL || !json_object_object_get_ex(o, key, &v) || v == NULL ||
	    !json_object_is_type(v, type))
		return NULL;
	return v;
}

static const char *
gem_type_name(const char *t)
{
	static const char *const names[][2] = {
		{ "string", "STRING" }, { "number", "NUMBER" },
		{ "integer", "INTEGER" }, { "boolean", "BOOLEAN" },
		{ "array", "ARRAY" }, { "object", "OBJECT" },
	};
	size_t	 i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(t, names[i][0]) == 0)
			return names[i][1];
	return NULL;
}

/*
 * "type": one name, or (JSON Schema) a list of them.  "null" becomes
 * nullable, as the SDK's handle_null_fields does; several other types
 * become an anyOf, Gemini's only union.
 */
static void
gem_type(struct json_object *in, struct json_object *out)
{
	struct json_object	*t, *any, *alt;
	const char		*names[8], *n;
	size_t			 i, len, k = 0;

	if (!json_object_object_get_ex(in, "type", &t) || t == NULL)
		return;
	if (json_object_is_type(t, json_type_string)) {
		n = json_object_get_string(t);
		if (strcmp(n, "null") == 0)
			json_object_object_add(out, "nullable",
			    json_object_new_boolean(1));
		else if ((n = gem_type_name(n)) != NULL)
			json_object_object_add(out, "type",
			    json_object_new_string(n));
		return;
	}
	if (!json_object_is_type(t, json_type_array))
		return;
	len = json_object_array_length(t);
	for (i = 0; i < len && k < sizeof(names) / sizeof(names[0]); i++) {
		alt = json_object_array_get_idx(t, i);
		if (!json_object_is_type(alt, json_type_string))
			continue;
		if (strcmp(json_object_get_string(alt), "null") == 0)
			json_object_object_add(out, "nullable",
			    json_object_new_boolean(1));
		else if ((n = gem_type_name(json_object_get_string(alt))) !=
		    NULL)
			names[k++] = n;
	}
	if (k == 1)
		json_object_object_add(out, "type",
		    json_object_new_string(names[0]));
	else if (k > 1 && (any = json_object_new_array()) != NULL) {
		for (i = 0; i < k; i++) {
			alt = json_object_new_object();
			json_object_object_add(alt, "type",
			    json_object_new_string(names[i]));
			json_object_array_add(any, alt);
		}
		json_object_object_add(out, "anyOf", any);
	}
}

/*
 * Schema.format: "enum" and "date-time" for STRING, float/double for
 * NUMBER, int32/int64 for INTEGER.  Gemini refuses the request for any
 * other (uri, email, uuid... which MCP servers use freely).
 */
static void
gem_format(struct json_object *in, struct json_object *out)
{
	static const char *const ok[][2] = {
		{ "STRING", "enum" }, { "STRING", "date-time" },
		{ "NUMBER", "float" }, { "NUMBER", "double" },
		{ "INTEGER", "int32" }, { "INTEGER", "int64" },
	};
	const char	*f, *t;
	size_t		 i;

	if ((f = provider_json_str(in, "format")) == NULL ||
	    (t = provider_json_str(out, "type")) == NULL)
		return;
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (strcmp(t, ok[i][0]) == 0 && strcmp(f, ok[i][1]) == 0) {
			json_object_object_add(out, "format",
			    json_object_new_string(f));
			return;
		}
}

/* Schema.enum is a list of strings; const is JSON Schema's one-value enum. */
static void
gem_enum(struct json_object *in, struct json_object *out)
{
	struct json_object	*e, *c;
	size_t			 i, len;

	if ((e = gem_get(in, "enum", json_type_array)) != NULL) {
		len = json_object_array_length(e);
		for (i = 0; i < len; i++)
			if (!json_object_is_type(json_object_array_get_idx(e,
			    i), json_type_string))
				return;	/* numbers: no faithful form */
		if (len > 0)
			json_object_object_add(out, "enum",
			    json_object_get(e));
	} else if ((c = gem_get(in, "const", json_type_string)) != NULL) {
		e = json_object_new_array();
		json_object_array_add(e, json_object_get(c));
		json_object_object_add(out, "enum", e);
	}
}

/* Keywords Gemini takes as they are, when of the right JSON type. */
static void
gem_scalars(struct json_object *in, struct json_object *out)
{
	static const char *const strs[] = { "description", "title",
	    "pattern" };
	static const char *const counts[] = { "minLength", "maxLength",
	    "minItems", "maxItems", "minProperties", "maxProperties" };
	static const char *const bounds[] = { "minimum", "maximum" };
	struct json_object	*v;
	uint64_t		 n;
	size_t			 i;

	for (i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
		if ((v = gem_get(in, strs[i], json_type_string)) != NULL)
			json_object_object_add(out, strs[i],
			    json_object_get(v));
	for (i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		if (provider_json_u64(in, counts[i], &n) == 0)
			json_object_object_add(out, counts[i],
			    json_object_new_int64(n > INT64_MAX ? INT64_MAX :
			    (int64_t)n));
	for (i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++)
		if ((v = gem_get(in, bounds[i], json_type_int)) != NULL ||
		    (v = gem_get(in, bounds[i], json_type_double)) != NULL)
			json_object_object_add(out, bounds[i],
			    json_object_get(v));
	if ((v = gem_get(in, "nullable", json_type_boolean)) != NULL &&
	    json_object_get_boolean(v))
		json_object_object_add(out, "nullable", json_object_get(v));
}

static void
gem_properties(struct gem_walk *gw, struct json_object *in,
    struct json_object *out, int depth)
{
	struct json_object_iterator	 it, end;
	struct json_object		*props, *np, *sub;

	if ((props = gem_get(in, "properties", json_type_object)) == NULL ||
	    (np = json_object_new_object()) == NULL)
		return;
	it = json_object_iter_begin(props);
	end = json_object_iter_end(props);
	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		sub = gem_schema(gw, json_object_iter_peek_value(&it),
		    depth + 1);
		if (sub != NULL)
			json_object_object_add(np,
			    json_object_iter_peek_name(&it), sub);
	}
	json_object_object_add(out, "properties", np);
}

static void
gem_items(struct gem_walk *gw, struct json_object *in,
    struct json_object *out, int depth)
{
	struct json_object	*items, *sub = NULL;

	if (json_object_object_get_ex(in, "items", &items) && items != NULL) {
		/* An old-style tuple: Gemini has one item schema. */
		if (json_object_is_type(items, json_type_array))
			items = json_object_array_get_idx(items, 0);
		sub = gem_schema(gw, items, depth + 1);
	}
	/*
	 * Gemini refuses an ARRAY without items ("items: missing field");
	 * an empty schema says "anything", as JSON Schema meant.
	 */
	if (sub == NULL && (provider_json_str(out, "type") == NULL ||
	    strcmp(provider_json_str(out, "type"), "ARRAY") != 0))
		return;
	if (sub == NULL && (sub = json_object_new_object()) == NULL)
		return;
	json_object_object_add(out, "items", sub);
}

/* A schema with only "type": "null" in it: it says "or null". */
static int
gem_is_null(struct json_object *s)
{
	const char	*t = provider_json_str(s, "type");

	return t != NULL && strcmp(t, "null") == 0;
}

/*
 * Fold sub into out: keys out lacks are added; properties and required
 * are unions.  For allOf, and for an anyOf that lost all but one branch.
 */
static void
gem_merge(struct json_object *out, struct json_object *sub)
{
	struct json_object_iterator	 it, end;
	struct json_object		*v, *mine;
	const char			*k;

	it = json_object_iter_begin(sub);
	end = json_object_iter_end(sub);
	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		k = json_object_iter_peek_name(&it);
		v = json_object_iter_peek_value(&it);
		if (!json_object_object_get_ex(out, k, &mine))
			json_object_object_add(out, k, json_object_get(v));
		else if (strcmp(k, "properties") == 0 &&
		    json_object_is_type(mine, json_type_object))
			gem_merge(mine, v);
		else if (strcmp(k, "required") == 0 &&
		    json_object_is_type(mine, json_type_array) &&
		    json_object_is_type(v, json_type_array)) {
			size_t	 i, n = json_object_array_length(v);

			for (i = 0; i < n; i++)
				json_object_array_add(mine, json_object_get(
				    json_object_array_get_idx(v, i)));
		}
	}
}

/*
 * anyOf and oneOf (Gemini knows only anyOf, which is the looser of the
 * two) and allOf.  Null branches make the schema nullable; a single
 * branch left is merged in, as the SDK's handle_null_fields does.
 */
static void
gem_combinators(struct gem_walk *gw, struct json_object *in,
    struct json_object *out, int depth)
{
	static const char *const unions[] = { "anyOf", "oneOf" };
	struct json_object	*arr, *any, *sub, *alt;
	size_t			 i, j, n;

	if ((arr = gem_get(in, "allOf", json_type_array)) != NULL) {
		n = json_object_array_length(arr);
		for (i = 0; i < n; i++)
			if ((sub = gem_schema(gw, json_object_array_get_idx(arr,
			    i), depth + 1)) != NULL) {
				gem_merge(out, sub);
				json_object_put(sub);
			}
	}
	if ((any = json_object_new_array()) == NULL)
		return;
	for (j = 0; j < 2; j++) {
		if ((arr = gem_get(in, unions[j], json_type_array)) == NULL)
			continue;
		n = json_object_array_length(arr);
		for (i = 0; i < n; i++) {
			alt = json_object_array_get_idx(arr, i);
			if (gem_is_null(alt))
				json_object_object_add(out, "nullable",
				    json_object_new_boolean(1));
			else if ((sub = gem_schema(gw, alt, depth + 1)) !=
			    NULL)
				json_object_array_add(any, sub);
		}
	}
	if (json_object_array_length(any) == 1)
		gem_merge(out, json_object_array_get_idx(any, 0));
	else if (json_object_array_length(any) > 1 &&
	    !json_object_object_get_ex(out, "anyOf", NULL)) {
		json_object_object_add(out, "anyOf", any);
		return;
	}
	json_object_put(any);
}

static void
gem_required_add(struct json_object *nr, struct json_object *props,
    struct json_object *req)
{
	struct json_object	*v;
	const char		*name;
	size_t			 i, j, n, have;

	n = req != NULL ? json_object_array_length(req) : 0;
	for (i = 0; i < n; i++) {
		v = json_object_array_get_idx(req, i);
		if (!json_object_is_type(v, json_type_string))
			continue;
		name = json_object_get_string(v);
		if (!json_object_object_get_ex(props, name, NULL))
			continue;
		have = json_object_array_length(nr);
		for (j = 0; j < have; j++)
			if (strcmp(json_object_get_string(
			    json_object_array_get_idx(nr, j)), name) == 0)
				break;
		if (j == have)
			json_object_array_add(nr, json_object_get(v));
	}
}

/*
 * required: the schema's own and those merged in from allOf, each once,
 * and only names that are properties (Gemini checks).  An empty
 * properties goes: Gemini refuses it.
 */
static void
gem_required(struct json_object *in, struct json_object *out)
{
	struct json_object	*props, *nr;

	props = gem_get(out, "properties", json_type_object);
	if (props != NULL && json_object_object_length(props) == 0) {
		json_object_object_del(out, "properties");
		props = NULL;
	}
	if (props == NULL || (nr = json_object_new_array()) == NULL) {
		json_object_object_del(out, "required");
		return;
	}
	gem_required_add(nr, props, gem_get(in, "required",
	    json_type_array));
	gem_required_add(nr, props, gem_get(out, "required",
	    json_type_array));
	if (json_object_array_length(nr) > 0)
		json_object_object_add(out, "required", nr);
	else {
		json_object_object_del(out, "required");
		json_object_put(nr);
	}
}

/* JSON Schema may leave "type" out where the keywords make it plain. */
static void
gem_infer_type(struct json_object *out)
{
	if (json_object_object_get_ex(out, "type", NULL) ||
	    json_object_object_get_ex(out, "anyOf", NULL))
		return;
	if (json_object_object_get_ex(out, "properties", NULL))
		json_object_object_add(out, "type",
		    json_object_new_string("OBJECT"));
	else if (json_object_object_get_ex(out, "items", NULL))
		json_object_object_add(out, "type",
		    json_object_new_string("ARRAY"));
}

/*
 * "$ref": "#/$defs/NAME" (or "#/definitions/NAME") is replaced by that
 * definition, as the SDK's process_schema does: Gemini's API-key endpoint
 * takes neither $ref nor $defs.  A definition that refers to itself,
 * directly or not, ends in an empty schema where it recurs.
 */
static struct json_object *
gem_ref(struct gem_walk *gw, const char *ref, int depth)
{
	struct json_object	*defs = NULL, *def, *out;
	const char		*name = NULL;
	size_t			 i;

	if (strncmp(ref, "#/$defs/", 8) == 0) {
		name = ref + 8;
		defs = gem_get(gw->gw_root, "$defs", json_type_object);
	} else if (strncmp(ref, "#/definitions/", 14) == 0) {
		name = ref + 14;
		defs = gem_get(gw->gw_root, "definitions", json_type_object);
	}
	if (defs == NULL || (def = gem_get(defs, name, json_type_object)) ==
	    NULL || gw->gw_nrefs >= GEM_REF_DEPTH)
		return json_object_new_object();
	for (i = 0; i < gw->gw_nrefs; i++)
		if (strcmp(gw->gw_refs[i], ref) == 0)
			return json_object_new_object();
	gw->gw_refs[gw->gw_nrefs++] = ref;
	out = gem_schema(gw, def, depth);
	gw->gw_nrefs--;
	return out;
}

/*
 * One schema, converted: a new object, or NULL for a schema that allows
 * nothing (false) or when memory runs out.  What is not understood is
 * left out ($schema, additionalProperties, default, examples, exclusive
 * bounds, multipleOf, not, if/then/else, ...): Gemini refuses a request
 * with a field its Schema does not have, while a missing constraint only
 * makes the model's arguments less checked, and the tool checks them.
 */
static struct json_object *
gem_schema(struct gem_walk *gw, struct json_object *in, int depth)
{
	struct json_object	*out;
	const char		*ref;

	if (json_object_is_type(in, json_type_boolean) &&
	    !json_object_get_boolean(in))
		return NULL;
	if (!json_object_is_type(in, json_type_object) ||
	    depth > GEM_SCHEMA_DEPTH || ++gw->gw_nodes > GEM_SCHEMA_NODES)
		return json_object_new_object();
	if ((ref = provider_json_str(in, "$ref")) != NULL) {
		out = gem_ref(gw, ref, depth + 1);
		/* A description next to the $ref is the more specific. */
		if (out != NULL && gem_get(in, "description",
		    json_type_string) != NULL)
			json_object_object_add(out, "description",
			    json_object_get(gem_get(in, "description",
			    json_type_string)));
		return out;
	}
	if ((out = json_object_new_object()) == NULL)
		return NULL;
	gem_type(in, out);
	gem_format(in, out);
	gem_enum(in, out);
	gem_scalars(in, out);
	gem_properties(gw, in, out, depth);
	gem_items(gw, in, out, depth);
	gem_combinators(gw, in, out, depth);
	gem_required(in, out);
	gem_infer_type(out);
	return out;
}

/*
 * FunctionDeclaration.parameters, or NULL for none: an OBJECT must have
 * properties ("properties: should be non-empty for OBJECT type"), and a
 * function without parameters is declared without them.
 */
static struct json_object *
gem_parameters(struct json_object *schema)
{
	struct gem_walk		 gw;
	struct json_object	*p;

	if (schema == NULL)
		return NULL;
	memset(&gw, 0, sizeof(gw));
	gw.gw_root = schema;
	if ((p = gem_schema(&gw, schema, 0)) == NULL)
		return NULL;
	if (gem_get(p, "properties", json_type_object) == NULL) {
		json_object_put(p);
		return NULL;
	}
	json_object_object_add(p, "type", json_object_new_string("OBJECT"));
	return p;
}

/* Request */

static struct json_object *
gem_text_part(const char *text)
{
	struct json_object	*p;

	if ((p = json_object_new_object()) != NULL)
		json_object_object_add(p, "text", json_object_new_string(text));
	return p;
}

/*
 * A functionCall part.  args is an object: anything else the model wrote
 * becomes {} (the chat loop has refused that call already).  The first
 * call of a model turn carries its thought signature (see gem_sigs).
 */
static struct json_object *
gem_call_part(const struct chat_tool_call *tc, int first)
{
	struct json_object	*p, *fc, *args = NULL;
	const char		*sig;

	if ((p = json_object_new_object()) == NULL ||
	    (fc = json_object_new_object()) == NULL) {
		json_object_put(p);
		return NULL;
	}
	if (tc->tc_arguments != NULL)
		args = json_parse_object(tc->tc_arguments,
		    strlen(tc->tc_arguments));
	json_object_object_add(fc, "name", json_object_new_string(tc->tc_name));
	json_object_object_add(fc, "args", args != NULL ? args :
	    json_object_new_object());
	json_object_object_add(p, "functionCall", fc);
	if ((sig = gem_sig_find(tc->tc_id)) == NULL && first)
		sig = GEM_SIG_SKIP;
	if (sig != NULL)
		json_object_object_add(p, "thoughtSignature",
		    json_object_new_string(sig));
	return p;
}

/*
 * functionResponse.response is an object: the reference says to put the
 * output under "output" and a failure under "error".
 */
static struct json_object *
gem_response_part(const struct chat_message *m)
{
	struct json_object	*p, *fr, *resp;

	p = json_object_new_object();
	fr = json_object_new_object();
	resp = json_object_new_object();
	if (p == NULL || fr == NULL || resp == NULL) {
		json_object_put(p);
		json_object_put(fr);
		json_object_put(resp);
		return NULL;
	}
	json_object_object_add(resp, m->cm_is_error ? "error" : "output",
	    json_object_new_string(m->cm_content ? m->cm_content : ""));
	json_object_object_add(fr, "name",
	    json_object_new_string(m->cm_call_name));
	json_object_object_add(fr, "response", resp);
	json_object_object_add(p, "functionResponse", fr);
	return p;
}

/*
 * One Content being put together: consecutive messages of one role make
 * one (parallel calls' responses must come together, in one user turn),
 * function responses first.
 */
struct gem_turn {
	const char		*tu_role;	/* NULL: none open */
	struct json_object	*tu_responses;
	struct json_object	*tu_other;
	int			 tu_calls;	/* functionCall parts */
};

static int
gem_turn_close(struct gem_turn *tu, struct json_object *contents)
{
	struct json_object	*c, *parts;
	size_t			 i, n;

	if (tu->tu_role == NULL)
		return 0;
	if ((c = json_object_new_object()) == NULL)
		return -1;
	parts = tu->tu_responses;
	n = json_object_array_length(tu->tu_other);
	for (i = 0; i < n; i++)
		json_object_array_add(parts, json_object_get(
		    json_object_array_get_idx(tu->tu_other, i)));
	json_object_put(tu->tu_other);
	json_object_object_add(c, "role", json_object_new_string(tu->tu_role));
	json_object_object_add(c, "parts", parts);
	json_object_array_add(contents, c);
	memset(tu, 0, sizeof(*tu));
	return 0;
}

static int
gem_turn_open(struct gem_turn *tu, const char *role,
    struct json_object *contents)
{
	if (tu->tu_role != NULL && strcmp(tu->tu_role, role) == 0)
		return 0;
	if (gem_turn_close(tu, contents) == -1)
		return -1;
	tu->tu_responses = json_object_new_array();
	tu->tu_other = json_object_new_array();
	if (tu->tu_responses == NULL || tu->tu_other == NULL)
		return -1;
	tu->tu_role = role;
	return 0;
}

static int
gem_add_model(struct gem_turn *tu, const struct chat_message *m,
    struct json_object *contents, char *why, size_t whylen)
{
	size_t	 i;

	if ((m->cm_content == NULL || m->cm_content[0] == '\0') &&
	    m->cm_ncalls == 0)
		return 0;
	if (gem_turn_open(tu, "model", contents) == -1)
		return -1;
	if (m->cm_content != NULL && m->cm_content[0] != '\0')
		json_object_array_add(tu->tu_other,
		    gem_text_part(m->cm_content));
	for (i = 0; i < m->cm_ncalls; i++) {
		if (m->cm_calls[i].tc_name == NULL) {
			snprintf(why, whylen, "tool call without a name");
			return -1;
		}
		json_object_array_add(tu->tu_other,
		    gem_call_part(&m->cm_calls[i], tu->tu_calls++ == 0));
	}
	return 0;
}

static int
gem_add_message(struct gem_turn *tu, const struct chat_message *m,
    struct json_object *contents, char *why, size_t whylen)
{
	switch (m->cm_role) {
	case ROLE_USER:
		if (m->cm_content == NULL || m->cm_content[0] == '\0')
			return 0;
		if (gem_turn_open(tu, "user", contents) == -1)
			return -1;
		return json_object_array_add(tu->tu_other,
		    gem_text_part(m->cm_content));
	case ROLE_ASSISTANT:
		return gem_add_model(tu, m, contents, why, whylen);
	case ROLE_TOOL:
		/* Gemini matches a response to its call by name. */
		if (m->cm_call_name == NULL) {
			snprintf(why, whylen, "tool result without the "
			    "call's name");
			return -1;
		}
		if (gem_turn_open(tu, "user", contents) == -1)
			return -1;
		return json_object_array_add(tu->tu_responses,
		    gem_response_part(m));
	default:
		return 0;	/* ROLE_SYSTEM: systemInstruction */
	}
}

static int
gem_contents(const struct chat_request *rq, struct json_object *body,
    char *why, size_t whylen)
{
	struct json_object	*contents;
	struct gem_turn		 tu;
	size_t			 i;
	int			 rc = 0;

	memset(&tu, 0, sizeof(tu));
	if ((contents = json_object_new_array()) == NULL)
		return -1;
	for (i = 0; i < rq->rq_nmessages && rc == 0; i++)
		rc = gem_add_message(&tu, &rq->rq_messages[i], contents, why,
		    whylen);
	if (rc == 0)
		rc = gem_turn_close(&tu, contents);
	json_object_put(tu.tu_responses);
	json_object_put(tu.tu_other);
	json_object_object_add(body, "contents", contents);
	return rc;
}

/* Every system message, in order, as systemInstruction. */
static int
gem_system(const struct chat_request *rq, struct json_object *body)
{
	struct provider_buf	 sys;
	struct json_object	*si, *parts;
	size_t			 i;
	const char		*c;
	int			 rc = 0;

	provider_buf_init(&sys, GEM_MAX_SYSTEM);
	for (i = 0; i < rq->rq_nmessages && rc == 0; i++) {
		c = rq->rq_messages[i].cm_content;
		if (rq->rq_messages[i].cm_role != ROLE_SYSTEM || c == NULL ||
		    c[0] == '\0')
			continue;
		if (sys.pb_len > 0)
			rc = provider_buf_add(&sys, "\n\n", 2);
		if (rc == 0)
			rc = provider_buf_add(&sys, c, strlen(c));
	}
	if (rc == 0 && sys.pb_len > 0) {
		si = json_object_new_object();
		parts = json_object_new_array();
		json_object_array_add(parts, gem_text_part(sys.pb_data));
		json_object_object_add(si, "parts", parts);
		json_object_object_add(body, "systemInstruction", si);
	}
	provider_buf_free(&sys);
	return rc;
}

static int
gem_tools(const struct chat_request *rq, struct json_object *body,
    char *why, size_t whylen)
{
	struct json_object	*tools, *tool, *decls, *d, *params;
	const struct chat_tool_def *td;
	size_t			 i;

	if (rq->rq_ntools == 0)
		return 0;
	if ((decls = json_object_new_array()) == NULL)
		return -1;
	for (i = 0; i < rq->rq_ntools; i++) {
		td = &rq->rq_tools[i];
		if (td->td_name == NULL)
			snprintf(why, whylen, "tool without a name");
		if (td->td_name == NULL ||
		    (d = json_object_new_object()) == NULL) {
			json_object_put(decls);
			return -1;
		}
		json_object_object_add(d, "name",
		    json_object_new_string(td->td_name));
		if (td->td_description != NULL)
			json_object_object_add(d, "description",
			    json_object_new_string(td->td_description));
		if ((params = gem_parameters(td->td_schema)) != NULL)
			json_object_object_add(d, "parameters", params);
		json_object_array_add(decls, d);
	}
	tools = json_object_new_array();
	tool = json_object_new_object();
	json_object_object_add(tool, "functionDeclarations", decls);
	json_object_array_add(tools, tool);
	json_object_object_add(body, "tools", tools);
	return 0;
}

static void
gem_generation(const struct chat_request *rq, struct json_object *body)
{
	struct json_object	*gc, *t;

	if ((gc = json_object_new_object()) == NULL)
		return;
	if (rq->rq_has_temperature &&
	    (t = provider_json_double(rq->rq_temperature)) != NULL)
		json_object_object_add(gc, "temperature", t);
	if (rq->rq_max_tokens > 0)
		json_object_object_add(gc, "maxOutputTokens",
		    json_object_new_int(rq->rq_max_tokens));
	if (json_object_object_length(gc) > 0)
		json_object_object_add(body, "generationConfig", gc);
	else
		json_object_put(gc);
}

static struct json_object *
gem_body(const struct chat_request *rq, char *why, size_t whylen)
{
	struct json_object	*body;

	if ((body = json_object_new_object()) == NULL)
		return NULL;
	if (gem_contents(rq, body, why, whylen) == -1 ||
	    gem_system(rq, body) == -1 ||
	    gem_tools(rq, body, why, whylen) == -1) {
		json_object_put(body);
		return NULL;
	}
	gem_generation(rq, body);
	return body;
}

/* The model's id goes into the path: "models/x" and "x" are one model. */
static char *
gem_path(const char *model)
{
	char	*esc, *path;

	if (strncmp(model, "models/", 7) == 0)
		model += 7;
	if (model[0] == '\0' || (esc = provider_url_escape(model)) == NULL)
		return NULL;
	if (asprintf(&path, "/v1beta/models/%s:streamGenerateContent?alt=sse",
	    esc) == -1)
		path = NULL;
	free(esc);
	return path;
}

/*
 * The key goes in x-goog-api-key, not in ?key=: URLs end up in logs and
 * error messages, headers do not.
 */
static int
gem_build(const struct chat_request *rq, struct provider_http *ph,
    char *why, size_t whylen)
{
	struct json_object	*body;
	const char		*model, *key;
	char			*path = NULL;
	int			 rc;

	memset(ph, 0, sizeof(*ph));
	if ((model = provider_model(rq)) == NULL) {
		snprintf(why, whylen, "no model");
		return -1;
	}
	if ((key = provider_api_key(rq->rq_provider)) == NULL) {
		snprintf(why, whylen, "no API key");
		return -1;
	}
	snprintf(why, whylen, "out of memory");
	if ((body = gem_body(rq, why, whylen)) == NULL)
		return -1;
	rc = provider_http_set_body(ph, body);
	json_object_put(body);
	if (rc == -1 || (path = gem_path(model)) == NULL ||
	    (ph->ph_url = provider_url(provider_base_url(rq->rq_provider),
	    path)) == NULL ||
	    provider_http_add_header(ph, "x-goog-api-key", "%s", key) == -1 ||
	    provider_http_add_header(ph, "content-type",
	    "application/json") == -1 ||
	    provider_http_add_header(ph, "accept", "text/event-stream") == -1) {
		/* The key may be the reason: never say more than this. */
		snprintf(why, whylen, "cannot build the request (model, "
		    "base-url, API key or memory)");
		free(path);
		provider_http_free(ph);
		memset(ph, 0, sizeof(*ph));
		return -1;
	}
	free(path);
	return 0;
}

/* Stream */

static void
gem_fail(struct provider_stream *st, const char *what, const char *arg)
{
	char	 buf[PROVIDER_MAX_ERROR];

	if (st->st_failed)
		return;
	st->st_failed = 1;
	snprintf(buf, sizeof(buf), "%s%s", what, arg != NULL ? arg : "");
	provider_text_clean(st->st_err, sizeof(st->st_err), buf, strlen(buf));
}

/* Gemini's own id when it gives a sane one, else one of ours. */
static void
gem_call_id(struct json_object *fc, char *id, size_t idlen)
{
	const char	*g = provider_json_str(fc, "id");
	unsigned char	 r[10];
	size_t		 i;

	if (g != NULL && g[0] != '\0' && strlen(g) <= GEM_ID_MAX &&
	    strspn(g, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789_-") == strlen(g)) {
		snprintf(id, idlen, "%s", g);
		return;
	}
	/* Random, not a count: ids must not repeat across rounds. */
	arc4random_buf(r, sizeof(r));
	snprintf(id, idlen, "call_");
	for (i = 0; i < sizeof(r) && strlen(id) + 2 < idlen; i++)
		snprintf(id + strlen(id), idlen - strlen(id), "%02x", r[i]);
}

static int
gem_function_call(struct provider_stream *st, struct json_object *part,
    struct json_object *fc)
{
	struct json_object	*args;
	const char		*name, *text, *sig;
	char			 id[GEM_ID_MAX + 8];
	size_t			 len;

	if ((name = provider_json_str(fc, "name")) == NULL ||
	    name[0] == '\0' || strlen(name) > GEM_NAME_MAX ||
	    ++st->st_ncalls > PROVIDER_MAX_CALLS)
		return -1;
	if (!json_object_object_get_ex(fc, "args", &args) || args == NULL)
		text = "{}";
	else if (!json_object_is_type(args, json_type_object))
		return -1;
	else if ((text = json_object_to_json_string_length(args,
	    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
	    &len)) == NULL || len > PROVIDER_MAX_ARGUMENTS)
		return -1;
	gem_call_id(fc, id, sizeof(id));
	if ((sig = provider_json_str(part, "thoughtSignature")) != NULL)
		gem_sig_remember(id, sig);
	if (st->st_ev->pe_tool_call != NULL)
		st->st_ev->pe_tool_call(st->st_arg, id, name, text);
	return 0;
}

static int
gem_parts(struct provider_stream *st, struct json_object *cand)
{
	struct json_object	*parts, *part, *v;
	size_t			 i, n;

	if ((parts = gem_get(gem_get(cand, "content", json_type_object),
	    "parts", json_type_array)) == NULL)
		return 0;
	n = json_object_array_length(parts);
	for (i = 0; i < n; i++) {
		part = json_object_array_get_idx(parts, i);
		if (!json_object_is_type(part, json_type_object))
			return -1;
		/* A thought summary, if asked for, is not the answer. */
		if ((v = gem_get(part, "thought", json_type_boolean)) != NULL &&
		    json_object_get_boolean(v))
			continue;
		if ((v = gem_get(part, "text", json_type_string)) != NULL &&
		    json_object_get_string_len(v) > 0 &&
		    st->st_ev->pe_text != NULL)
			st->st_ev->pe_text(st->st_arg,
			    json_object_get_string(v),
			    json_object_get_string_len(v));
		if ((v = gem_get(part, "functionCall", json_type_object)) !=
		    NULL && gem_function_call(st, part, v) == -1)
			return -1;
	}
	return 0;
}

/*
 * Counts are for the whole response so far.  Thinking is billed as output
 * ("output price (including thinking tokens)"), so thoughtsTokenCount is
 * added to candidatesTokenCount; promptTokenCount already includes any
 * cached content.
 */
static void
gem_usage(struct provider_stream *st, struct json_object *o)
{
	struct json_object	*u;
	uint64_t		 in = 0, out = 0, thoughts = 0;

	if ((u = gem_get(o, "usageMetadata", json_type_object)) == NULL)
		return;
	if (provider_json_u64(u, "promptTokenCount", &in) == -1)
		in = 0;
	if (provider_json_u64(u, "candidatesTokenCount", &out) == -1)
		out = 0;
	if (provider_json_u64(u, "thoughtsTokenCount", &thoughts) == -1)
		thoughts = 0;
	if (st->st_ev->pe_usage != NULL)
		st->st_ev->pe_usage(st->st_arg, in, out + thoughts);
}

static int
gem_chunk(struct provider_stream *st, struct json_object *o)
{
	struct json_object	*cands, *cand = NULL;
	const char		*reason = NULL, *block;
	char			 buf[PROVIDER_MAX_ERROR];

	if (json_object_object_get_ex(o, "error", NULL)) {
		if (provider_error_json("gemini", o, buf, sizeof(buf)) == -1)
			snprintf(buf, sizeof(buf), "gemini said: error");
		gem_fail(st, buf, NULL);
		return -1;
	}
	if ((cands = gem_get(o, "candidates", json_type_array)) != NULL &&
	    json_object_array_length(cands) > 0) {
		/* One candidate asked for (candidateCount defaults to 1). */
		cand = json_object_array_get_idx(cands, 0);
		if (!json_object_is_type(cand, json_type_object) ||
		    gem_parts(st, cand) == -1)
			return -1;
		reason = provider_json_str(cand, "finishReason");
	} else if ((block = provider_json_str(gem_get(o, "promptFeedback",
	    json_type_object), "blockReason")) != NULL) {
		/* No candidate at all: the prompt itself was refused. */
		gem_fail(st, "gemini blocked the prompt: ", block);
		return -1;
	}
	gem_usage(st, o);
	if (reason != NULL && !st->st_finished) {
		st->st_finished = 1;
		if (st->st_ev->pe_finish != NULL)
			st->st_ev->pe_finish(st->st_arg, reason);
	}
	return 0;
}

static void
gem_on_event(const struct sse_event *sev, void *arg)
{
	struct provider_stream	*st = arg;
	struct json_object	*o;

	if (st->st_failed)
		return;
	if ((o = json_parse_object(sev->ev_data, sev->ev_data_len)) == NULL) {
		gem_fail(st, "malformed response chunk", NULL);
		return;
	}
	if (gem_chunk(st, o) == -1)
		gem_fail(st, "malformed response chunk", NULL);
	json_object_put(o);
}

static struct provider_stream *
gem_stream_new(const struct provider_events *ev, void *arg)
{
	struct provider_stream	*st;

	if ((st = calloc(1, sizeof(*st))) == NULL)
		return NULL;
	st->st_ev = ev;
	st->st_arg = arg;
	if ((st->st_sse = sse_parser_new(GEM_MAX_EVENT, GEM_MAX_EVENT,
	    gem_on_event, st)) == NULL) {
		free(st);
		return NULL;
	}
	return st;
}

static int
gem_stream_feed(struct provider_stream *st, const char *buf, size_t len)
{
	if (st->st_failed)
		return -1;
	if (sse_parser_feed(st->st_sse, buf, len) == -1)
		gem_fail(st, "", sse_parser_error(st->st_sse));
	return st->st_failed ? -1 : 0;
}

/* There is no [DONE]: the end of the body is the end, after a finish. */
static int
gem_stream_end(struct provider_stream *st)
{
	if (st->st_failed)
		return -1;
	/* A last event with no blank line after it still counts. */
	if (sse_parser_feed(st->st_sse, "\n\n", 2) == -1)
		gem_fail(st, "", sse_parser_error(st->st_sse));
	if (!st->st_failed && !st->st_finished)
		gem_fail(st, "the stream ended without a finishReason", NULL);
	return st->st_failed ? -1 : 0;
}

static const char *
gem_stream_error(const struct provider_stream *st)
{
	return st->st_failed ? st->st_err : NULL;
}

static void
gem_stream_free(struct provider_stream *st)
{
	if (st == NULL)
		return;
	sse_parser_free(st->st_sse);
	free(st);
}

/*
 * {"error":{"code":400,"message":"...","status":"INVALID_ARGUMENT"}}, or
 * the same in a one-element array, as the streaming method without
 * alt=sse answers.
 */
static void
gem_error_message(int status, const char *body, size_t len, char *out,
    size_t outlen)
{
	struct json_tokener	*tok;
	struct json_object	*o = NULL, *first;

	if (outlen == 0)
		return;
	if (body != NULL && len > 0 && len <= INT32_MAX && body[0] == '[' &&
	    (tok = json_tokener_new_ex(JSON_MAX_DEPTH)) != NULL) {
		o = json_tokener_parse_ex(tok, body, (int)len);
		json_tokener_free(tok);
	}
	if (o != NULL && json_object_is_type(o, json_type_array) &&
	    (first = json_object_array_get_idx(o, 0)) != NULL &&
	    json_object_is_type(first, json_type_object) &&
	    provider_error_json("gemini", first, out, outlen) == 0) {
		json_object_put(o);
		return;
	}
	json_object_put(o);
	provider_error_format("gemini", status, body, len, out, outlen);
}

const struct provider_ops gemini_ops = {
	.po_name = "gemini",
	.po_build = gem_build,
	.po_stream_new = gem_stream_new,
	.po_stream_feed = gem_stream_feed,
	.po_stream_end = gem_stream_end,
	.po_stream_error = gem_stream_error,
	.po_stream_free = gem_stream_free,
	.po_error_message = gem_error_message,
};
