/*
 * x-mcp-header (2026-07-28, streamable HTTP): tool parameters that the
 * client mirrors into Mcp-Param-{Name} request headers.  A tool whose
 * annotations break the rules is left out of the tool list.
 */
#ifndef MCPBROKER_MCP_PARAMS_H
#define MCPBROKER_MCP_PARAMS_H

#include <stddef.h>

#define MCP_PARAM_HEADERS_MAX	16
#define MCP_PARAM_NAME_MAX	64
#define MCP_PARAM_VALUE_MAX	1024

struct json_object;

struct mcp_param_header {
	char	ph_name[MCP_PARAM_NAME_MAX + 11];	/* "Mcp-Param-" NAME */
	char	ph_value[MCP_PARAM_VALUE_MAX];		/* encoded */
};

/* 0 if every x-mcp-header in the schema is valid, else -1 and why. */
int	mcp_param_headers_check(struct json_object *schema, char *why,
	    size_t whylen);
/* The headers for one call's arguments; returns how many were filled. */
size_t	mcp_param_headers(struct json_object *schema,
	    struct json_object *args, struct mcp_param_header *, size_t max);
/*
 * A header value as is when safe, else the =?base64?...?= form; -1 (and
 * out empty) when that does not fit in outlen.
 */
int	mcp_header_value(const char *v, size_t len, char *out, size_t outlen);

#endif
