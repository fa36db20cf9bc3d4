/*
 * LLM providers behind one small interface.  The chat loop keeps the
 * conversation in a provider-neutral form (chat_message); each wire format
 * (one file per format in broker/providers/) turns it into an HTTP request
 * and turns the streamed response back into neutral events.  Providers do
 * no I/O: the controller's HTTP client carries the bytes.
 */
#ifndef MCPBROKER_PROVIDER_H
#define MCPBROKER_PROVIDER_H

#include <stddef.h>
#include <stdint.h>

#include "broker/config.h"
#include "common/http_client.h"

struct json_object;

enum chat_role {
	ROLE_SYSTEM,
	ROLE_USER,
	ROLE_ASSISTANT,
	ROLE_TOOL,		/* the result of one tool call */
};

struct chat_tool_call {
	char		*tc_id;		/* the provider's id, or one we made */
	char		*tc_name;	/* provider-facing tool name */
	char		*tc_arguments;	/* JSON text, as the model wrote it */
};

struct chat_message {
	enum chat_role		 cm_role;
	char			*cm_content;	/* text; NULL for none */
	struct chat_tool_call	*cm_calls;	/* assistant: tool calls */
	size_t			 cm_ncalls;
	char			*cm_call_id;	/* tool: which call it answers */
	char			*cm_call_name;	/* tool: that call's name */
	int			 cm_is_error;	/* tool: the call failed */
};

struct chat_tool_def {
	const char		*td_name;	/* [A-Za-z0-9_-]{1,64} */
	const char		*td_description;
	struct json_object	*td_schema;	/* MCP inputSchema, as is */
};

struct chat_request {
	const struct provider_conf	*rq_provider;	/* type, url, key... */
	const char			*rq_model;	/* overrides pv_model */
	int				 rq_has_temperature;
	double				 rq_temperature;
	int				 rq_max_tokens;	/* 0: provider default */
	const struct chat_message	*rq_messages;
	size_t				 rq_nmessages;
	const struct chat_tool_def	*rq_tools;
	size_t				 rq_ntools;
};

#define PROVIDER_MAX_HEADERS	8

/* What to send: a POST of a JSON body to a URL with these headers. */
struct provider_http {
	char			*ph_url;
	struct http_field	 ph_headers[PROVIDER_MAX_HEADERS];
	size_t			 ph_nheaders;
	char			*ph_header_values[PROVIDER_MAX_HEADERS];
	char			*ph_body;
	size_t			 ph_body_len;
};
void	provider_http_free(struct provider_http *);

/* Neutral events from a response stream, in order. */
struct provider_events {
	/* A piece of the answer's text. */
	void	(*pe_text)(void *, const char *text, size_t len);
	/* One complete tool call (deltas already put together). */
	void	(*pe_tool_call)(void *, const char *id, const char *name,
		    const char *arguments);
	/* Token counts as the provider reports them (may come more than once:
	 * the last report wins). */
	void	(*pe_usage)(void *, uint64_t input_tokens,
		    uint64_t output_tokens);
	/* The model is done: "stop", "tool_calls", "length", ... */
	void	(*pe_finish)(void *, const char *reason);
};

struct provider_stream;

struct provider_ops {
	const char	*po_name;
	/* Build the streaming request.  -1 with a reason on bad input. */
	int		 (*po_build)(const struct chat_request *,
			    struct provider_http *, char *why, size_t whylen);
	struct provider_stream *(*po_stream_new)(
			    const struct provider_events *, void *arg);
	/* Response body bytes as they arrive; -1 on a malformed stream. */
	int		 (*po_stream_feed)(struct provider_stream *,
			    const char *buf, size_t len);
	/* The body ended; -1 if the stream was cut short or malformed. */
	int		 (*po_stream_end)(struct provider_stream *);
	const char	*(*po_stream_error)(const struct provider_stream *);
	void		 (*po_stream_free)(struct provider_stream *);
	/*
	 * A non-2xx response: the provider's own error message, for logs and
	 * for the user.  Never contains the key (providers do not echo it,
	 * and the result is scrubbed by the caller as well).
	 */
	void		 (*po_error_message)(int status, const char *body,
			    size_t len, char *out, size_t outlen);
};

/* One per wire format (provider_<format>.c). */
extern const struct provider_ops openai_ops;	/* also azure-openai and
						 * openai-compatible */
extern const struct provider_ops anthropic_ops;
extern const struct provider_ops ollama_ops;
extern const struct provider_ops gemini_ops;

/* The ops for a configured provider type (broker/providers/provider.c). */
const struct provider_ops *provider_ops(enum provider_type);

#endif
