/*
 * The web UI's files, compiled into the daemon (web/embed.py makes the
 * table from web/) and served from memory by the frontend.
 */
#ifndef MCPBROKER_FRONTEND_WEB_H
#define MCPBROKER_FRONTEND_WEB_H

#include <stddef.h>

struct evhttp_request;

struct web_asset {
	const char		*wa_path;	/* "/", "/admin", "/assets/…" */
	const char		*wa_type;	/* Content-Type */
	const unsigned char	*wa_data;
	size_t			 wa_len;
	const char		*wa_etag;	/* quoted, from its SHA-256 */
	int			 wa_immutable;	/* a content-hashed name */
};

/* Ends with a row whose wa_path is NULL. */
extern const struct web_asset web_assets[];

const struct web_asset	*web_asset_find(const char *path);
/* GET or HEAD of "/", "/admin" or "/assets/NAME". */
void			 web_route(struct evhttp_request *, int tls);

#endif
