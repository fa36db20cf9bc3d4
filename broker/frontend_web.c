/*
 * The web UI, served by the frontend from the table web/embed.py compiles
 * in: no file is opened (the frontend's sandbox refuses open), so a path
 * is looked up in the table and nothing else.  Pages are revalidated by
 * ETag; the scripts and styles they name have content-hashed names and are
 * cached for good, so a page never meets an asset of another build.
 */
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "broker/frontend_web.h"

/* Script and style only from our own files; nothing inline, no eval. */
#define WEB_CSP	"default-src 'none'; script-src 'self'; style-src 'self'; " \
	"img-src 'self' data:; connect-src 'self'; base-uri 'none'; " \
	"form-action 'self'; frame-ancestors 'none'"

const struct web_asset *
web_asset_find(const char *path)
{
	const struct web_asset *wa;

	for (wa = web_assets; wa->wa_path != NULL; wa++)
		if (strcmp(wa->wa_path, path) == 0)
			return wa;
	return NULL;
}

static void
security_headers(struct evkeyvalq *h)
{
	evhttp_add_header(h, "Content-Security-Policy", WEB_CSP);
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	evhttp_add_header(h, "X-Frame-Options", "DENY");
	evhttp_add_header(h, "Referrer-Policy", "no-referrer");
	evhttp_add_header(h, "Cross-Origin-Opener-Policy", "same-origin");
	evhttp_add_header(h, "Cross-Origin-Resource-Policy", "same-origin");
}

/* If-None-Match names our tag (or is *): a list of entity tags, W/ or not. */
static int
etag_matches(const char *inm, const char *etag)
{
	size_t		 n = strlen(etag);
	const char	*p = inm;

	while (*p != '\0') {
		p += strspn(p, " \t,");
		if (*p == '*')
			return 1;
		if (strncmp(p, "W/", 2) == 0)
			p += 2;
		if (strncmp(p, etag, n) == 0 && (p[n] == '\0' || p[n] == ',' ||
		    p[n] == ' ' || p[n] == '\t'))
			return 1;
		p += strcspn(p, ",");
	}
	return 0;
}

static void
not_found(struct evhttp_request *req)
{
	static const char	 msg[] = "{\"error\":{\"code\":\"not_found\","
				    "\"message\":\"no such file\"}}\n";
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	struct evbuffer		*buf = evbuffer_new();

	security_headers(h);
	evhttp_add_header(h, "Content-Type", "application/json");
	evhttp_add_header(h, "Cache-Control", "no-store");
	if (buf == NULL || evbuffer_add(buf, msg, sizeof(msg) - 1) == -1) {
		evhttp_send_error(req, 500, NULL);
		if (buf != NULL)
			evbuffer_free(buf);
		return;
	}
	evhttp_send_reply(req, 404, "Not Found", buf);
	evbuffer_free(buf);
}

void
web_route(struct evhttp_request *req, int tls)
{
	const struct evhttp_uri	*uri = evhttp_request_get_evhttp_uri(req);
	const struct web_asset	*wa;
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	struct evbuffer		*buf;
	const char		*path, *inm;

	(void)tls;
	path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
	if (path == NULL || (wa = web_asset_find(path)) == NULL) {
		not_found(req);
		return;
	}
	security_headers(h);
	evhttp_add_header(h, "ETag", wa->wa_etag);
	evhttp_add_header(h, "Cache-Control", wa->wa_immutable ?
	    "public, max-age=31536000, immutable" : "no-cache");
	inm = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "If-None-Match");
	if (inm != NULL && etag_matches(inm, wa->wa_etag)) {
		evhttp_send_reply(req, 304, "Not Modified", NULL);
		return;
	}
	evhttp_add_header(h, "Content-Type", wa->wa_type);
	if ((buf = evbuffer_new()) == NULL || evbuffer_add_reference(buf,
	    wa->wa_data, wa->wa_len, NULL, NULL) == -1) {
		evhttp_send_error(req, 500, NULL);
		if (buf != NULL)
			evbuffer_free(buf);
		return;
	}
	evhttp_send_reply(req, 200, "OK", buf);
	evbuffer_free(buf);
}
