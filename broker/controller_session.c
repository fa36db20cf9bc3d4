/*
 * A session id is 256 random bits; the table keeps only its SHA-256, so a
 * copy of the database (or of a backup) logs nobody in.  As with API keys
 * no slow hash is needed: the id is as hard to guess as the hash is to
 * invert.  Lookups are by hash, so timing tells nothing about the id.
 *
 * Times are ms since the epoch.  A session ends at `expires` (set at login
 * from `session lifetime`), or `session lifetime` after `created` if that
 * was shortened by a reload since, or `session idle` after `last_seen`.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sqlite3.h>

#include "broker/config.h"
#include "broker/controller_session.h"
#include "broker/controller_store.h"
#include "common/log.h"
#include "common/util.h"

/* A user's sessions beyond this many lose their oldest at login. */
#define SESSIONS_PER_USER	64
/* last_seen is rewritten at most this often (and every idle / 8). */
#define TOUCH_MAX_MS		60000

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
id_hash(const char *id, unsigned char out[SHA256_DIGEST_LENGTH])
{
	sha256(id, strlen(id), out);
}

/* Keep the user's newest sessions only, leaving room for one more. */
static int
trim_user(const char *user)
{
	sqlite3_stmt *st;

	if ((st = store_prepare("DELETE FROM sessions WHERE user = ?1 AND id_hash "
	    "NOT IN (SELECT id_hash FROM sessions WHERE user = ?1 ORDER BY "
	    "created DESC LIMIT ?2)")) == NULL)
		return -1;
	sqlite3_bind_text(st, 1, user, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 2, SESSIONS_PER_USER - 1);
	return store_step_done(st);
}

int
session_create(const char *user, const struct auth_conf *au,
    char id[WEB_TOKEN_LEN + 1], struct web_session *ws)
{
	sqlite3_stmt	*st;
	int64_t		 now = now_ms();

	memset(ws, 0, sizeof(*ws));
	if (websec_token_new(id) == -1 || websec_token_new(ws->ws_csrf) ==
	    -1) {
		log_warn("sessions: getrandom");
		return -1;
	}
	id_hash(id, ws->ws_id_hash);
	ws->ws_expires_ms = now + (int64_t)au->au_session_lifetime_ms;
	if (trim_user(user) == -1 || (st = store_prepare("INSERT INTO sessions "
	    "(id_hash, user, csrf, created, last_seen, expires) VALUES "
	    "(?, ?, ?, ?, ?, ?)")) == NULL)
		goto fail;
	sqlite3_bind_blob(st, 1, ws->ws_id_hash, sizeof(ws->ws_id_hash),
	    SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, user, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, ws->ws_csrf, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 4, now);
	sqlite3_bind_int64(st, 5, now);
	sqlite3_bind_int64(st, 6, ws->ws_expires_ms);
	if (store_step_done(st) == -1)
		goto fail;
	return 0;
 fail:
	explicit_bzero(id, WEB_TOKEN_LEN + 1);
	return -1;
}

static int
delete_hash(const unsigned char hash[SHA256_DIGEST_LENGTH])
{
	sqlite3_stmt *st;

	if ((st = store_prepare("DELETE FROM sessions WHERE id_hash = ?")) == NULL)
		return -1;
	sqlite3_bind_blob(st, 1, hash, SHA256_DIGEST_LENGTH, SQLITE_TRANSIENT);
	return store_step_done(st);
}

int
session_delete(const struct web_session *ws)
{
	return delete_hash(ws->ws_id_hash);
}

int
session_delete_id(const char *id)
{
	unsigned char hash[SHA256_DIGEST_LENGTH];

	id_hash(id, hash);
	return delete_hash(hash);
}

static int
live(const struct auth_conf *au, int64_t now, int64_t created,
    int64_t last_seen, int64_t expires)
{
	return now < expires &&
	    now - created < (int64_t)au->au_session_lifetime_ms &&
	    now - last_seen < (int64_t)au->au_session_idle_ms;
}

/*
 * Writing last_seen on every request would cost a commit each; a session
 * seen less than a touch interval ago keeps its older time and may end
 * that much before its idle time is up, never after.
 */
static void
touch(const unsigned char hash[SHA256_DIGEST_LENGTH],
    const struct auth_conf *au, int64_t now, int64_t last_seen)
{
	sqlite3_stmt	*st;
	int64_t		 every = (int64_t)au->au_session_idle_ms / 8;

	if (every > TOUCH_MAX_MS)
		every = TOUCH_MAX_MS;
	if (now - last_seen < every || (st = store_prepare("UPDATE sessions SET "
	    "last_seen = ? WHERE id_hash = ?")) == NULL)
		return;
	sqlite3_bind_int64(st, 1, now);
	sqlite3_bind_blob(st, 2, hash, SHA256_DIGEST_LENGTH, SQLITE_TRANSIENT);
	(void)store_step_done(st);
}

static void
copy_col(sqlite3_stmt *st, int i, char *dst, size_t len)
{
	const unsigned char *s = sqlite3_column_text(st, i);

	snprintf(dst, len, "%s", s != NULL ? (const char *)s : "");
}

int
session_lookup(const char *id, const struct auth_conf *au,
    struct store_user *u, struct web_session *ws)
{
	sqlite3_stmt	*st;
	int64_t		 now = now_ms(), created, last_seen;
	int		 rc;

	memset(ws, 0, sizeof(*ws));
	if (!websec_token_valid(id))
		return 1;
	id_hash(id, ws->ws_id_hash);
	if ((st = store_prepare("SELECT s.user, u.tenant, u.roles, s.csrf, "
	    "s.created, s.last_seen, s.expires FROM sessions s JOIN users u "
	    "ON u.name = s.user WHERE s.id_hash = ?")) == NULL)
		return -1;
	sqlite3_bind_blob(st, 1, ws->ws_id_hash, sizeof(ws->ws_id_hash),
	    SQLITE_TRANSIENT);
	if ((rc = sqlite3_step(st)) != SQLITE_ROW) {
		sqlite3_finalize(st);
		return rc == SQLITE_DONE ? 1 : -1;
	}
	copy_col(st, 0, u->su_name, sizeof(u->su_name));
	copy_col(st, 1, u->su_tenant, sizeof(u->su_tenant));
	copy_col(st, 2, u->su_roles, sizeof(u->su_roles));
	copy_col(st, 3, ws->ws_csrf, sizeof(ws->ws_csrf));
	created = sqlite3_column_int64(st, 4);
	last_seen = sqlite3_column_int64(st, 5);
	ws->ws_expires_ms = sqlite3_column_int64(st, 6);
	sqlite3_finalize(st);
	if (!live(au, now, created, last_seen, ws->ws_expires_ms)) {
		(void)delete_hash(ws->ws_id_hash);
		return 1;
	}
	touch(ws->ws_id_hash, au, now, last_seen);
	return 0;
}

int
session_csrf_ok(const struct web_session *ws, const char *token)
{
	return token != NULL && strlen(token) == WEB_TOKEN_LEN &&
	    strlen(ws->ws_csrf) == WEB_TOKEN_LEN &&
	    CRYPTO_memcmp(token, ws->ws_csrf, WEB_TOKEN_LEN) == 0;
}

void
session_purge(const struct auth_conf *au)
{
	sqlite3_stmt	*st;
	int64_t		 now = now_ms();

	if ((st = store_prepare("DELETE FROM sessions WHERE expires <= ?1 OR "
	    "created <= ?1 - ?2 OR last_seen <= ?1 - ?3")) == NULL)
		return;
	sqlite3_bind_int64(st, 1, now);
	sqlite3_bind_int64(st, 2, (int64_t)au->au_session_lifetime_ms);
	sqlite3_bind_int64(st, 3, (int64_t)au->au_session_idle_ms);
	if (store_step_done(st) == 0 && sqlite3_changes(store_db()) > 0)
		log_debug("sessions: %d expired ones purged",
		    sqlite3_changes(store_db()));
}

int64_t
session_max_age(const struct web_session *ws)
{
	int64_t left = ws->ws_expires_ms - now_ms();

	if (left < 1000)
		return 1;
	return (left + 999) / 1000;
}
