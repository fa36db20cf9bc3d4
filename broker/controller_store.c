/*
 * API keys are 256 random bits (getrandom), shown once, stored only as a
 * SHA-256 hash: a key is as hard to guess as the hash is to invert, so no
 * slow KDF is needed and a wrong key costs the server one hash.  The first
 * KEY_ID_LEN characters name the key for lookup; the hash is compared in
 * constant time.
 */
#include <sys/fsuid.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <sqlite3.h>

#include "broker/controller_store.h"
#include "common/log.h"
#include "common/util.h"

static sqlite3 *db;

/*
 * Keys that authenticated, by their SHA-256, with the user each names:
 * every /mcp request authenticates, and the SELECT was a tenth of the
 * controller's time per call.  Any change to the users table
 * on our connection, the only one that writes it, empties the cache
 * through SQLite's update hook (adding, rotating or revoking a key, with
 * its user or tenant), and so does any rollback, which may undo a row the
 * cache was filled from: a revoked key is refused at its next request.
 * Only successes are kept; a slot is picked by the hash, a newcomer
 * evicting the one there.
 */
#define KEYS_KEPT	256
static struct key_kept {
	int			kk_used;
	unsigned char		kk_hash[SHA256_DIGEST_LENGTH];
	struct store_user	kk_user;
} keys_kept[KEYS_KEPT];
/* Where an online backup is made before it goes to its file. */
static char staging[4096 + 16];

/* Each migration takes the schema from its index to the next version. */
static const char *const migrations[] = {
	/* 0 -> 1 */
	"CREATE TABLE users ("
	"  id INTEGER PRIMARY KEY,"
	"  name TEXT NOT NULL UNIQUE,"
	"  tenant TEXT NOT NULL,"
	"  roles TEXT NOT NULL,"
	"  key_id TEXT UNIQUE,"
	"  key_hash BLOB,"
	"  created INTEGER NOT NULL,"
	"  key_created INTEGER);",
	/*
	 * 1 -> 2: the audit trail (controller_audit.c).  The triggers stop
	 * our own code from editing it; anyone who can write the file can
	 * drop them, which is what the hash chain is for.
	 */
	"CREATE TABLE audit ("
	"  id INTEGER PRIMARY KEY,"
	"  ts INTEGER NOT NULL,"		/* ms since the epoch */
	"  kind TEXT NOT NULL,"
	"  user TEXT,"
	"  tenant TEXT,"
	"  detail TEXT NOT NULL,"		/* a JSON object */
	"  prev_hash BLOB NOT NULL,"
	"  hash BLOB NOT NULL);"
	"CREATE INDEX audit_ts ON audit (ts);"
	"CREATE TABLE audit_checkpoint ("
	"  id INTEGER PRIMARY KEY CHECK (id = 1),"
	"  last_id INTEGER,"
	"  last_hash BLOB);"
	"INSERT INTO audit_checkpoint VALUES (1, 0, zeroblob(32));"
	"CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN"
	"  SELECT RAISE(ABORT, 'the audit trail is append-only'); END;"
	"CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN"
	"  SELECT RAISE(ABORT, 'the audit trail is append-only'); END;",
	/*
	 * 2 -> 3: web sessions (controller_session.c), keyed by the SHA-256
	 * of the cookie's value, which itself is never stored.
	 */
	"CREATE TABLE sessions ("
	"  id_hash BLOB PRIMARY KEY,"
	"  user TEXT NOT NULL REFERENCES users (name) ON DELETE CASCADE,"
	"  csrf TEXT NOT NULL,"
	"  created INTEGER NOT NULL,"		/* ms since the epoch */
	"  last_seen INTEGER NOT NULL,"
	"  expires INTEGER NOT NULL) WITHOUT ROWID;"
	"CREATE INDEX sessions_user ON sessions (user);"
	"CREATE INDEX sessions_expires ON sessions (expires);",
	/*
	 * 3 -> 4: stored conversations (controller_conv.c), metering and
	 * budgets (controller_usage.c).  usage holds one row per LLM call and
	 * goes with its conversation; usage_daily is the bill, which stays.
	 * Times are ms since the epoch, days "YYYY-MM-DD" in UTC, costs
	 * integers of 1e-9 USD.
	 */
	"CREATE TABLE conversations ("
	"  id TEXT PRIMARY KEY,"
	"  user TEXT NOT NULL,"
	"  tenant TEXT NOT NULL,"
	"  title TEXT NOT NULL DEFAULT '',"
	"  provider TEXT NOT NULL,"
	"  model TEXT NOT NULL,"
	"  toolset TEXT NOT NULL DEFAULT '',"
	"  created INTEGER NOT NULL,"
	"  updated INTEGER NOT NULL);"
	"CREATE INDEX conversations_user ON conversations (user, updated);"
	"CREATE INDEX conversations_tenant ON conversations (tenant);"
	"CREATE INDEX conversations_updated ON conversations (updated);"
	"CREATE TABLE messages ("
	"  id INTEGER PRIMARY KEY,"
	"  conversation TEXT NOT NULL REFERENCES conversations (id)"
	"    ON DELETE CASCADE,"
	"  seq INTEGER NOT NULL,"
	"  ts INTEGER NOT NULL,"
	"  role TEXT NOT NULL,"
	"  content TEXT,"
	"  tool_calls TEXT,"			/* [{id, name, arguments}] */
	"  call_id TEXT,"
	"  call_name TEXT,"
	"  is_error INTEGER NOT NULL DEFAULT 0,"
	"  UNIQUE (conversation, seq));"
	"CREATE TABLE usage ("
	"  id INTEGER PRIMARY KEY,"
	"  ts INTEGER NOT NULL,"
	"  user TEXT NOT NULL,"
	"  tenant TEXT NOT NULL,"
	"  conversation TEXT,"
	"  provider TEXT NOT NULL,"
	"  model TEXT NOT NULL,"
	"  input_tokens INTEGER NOT NULL,"
	"  output_tokens INTEGER NOT NULL,"
	"  estimated INTEGER NOT NULL,"		/* no count from the provider */
	"  tool_calls INTEGER NOT NULL,"
	"  cost_nusd INTEGER NOT NULL);"
	"CREATE INDEX usage_conversation ON usage (conversation);"
	"CREATE INDEX usage_user ON usage (user);"
	"CREATE INDEX usage_tenant ON usage (tenant);"
	"CREATE TABLE usage_daily ("
	"  day TEXT NOT NULL,"
	"  tenant TEXT NOT NULL,"
	"  user TEXT NOT NULL,"			/* '': a deleted user */
	"  provider TEXT NOT NULL,"
	"  model TEXT NOT NULL,"
	"  calls INTEGER NOT NULL,"
	"  input_tokens INTEGER NOT NULL,"
	"  output_tokens INTEGER NOT NULL,"
	"  estimated_calls INTEGER NOT NULL,"
	"  tool_calls INTEGER NOT NULL,"
	"  cost_nusd INTEGER NOT NULL,"
	"  PRIMARY KEY (day, tenant, user, provider, model)) WITHOUT ROWID;"
	"CREATE INDEX usage_daily_tenant ON usage_daily (tenant, day);"
	"CREATE INDEX usage_daily_user ON usage_daily (user, day);"
	"CREATE TABLE budget_alerts ("		/* marks passed, once a period */
	"  scope TEXT NOT NULL,"
	"  name TEXT NOT NULL,"
	"  metric TEXT NOT NULL,"
	"  holder TEXT NOT NULL,"		/* the tenant, or the user */
	"  tenant TEXT NOT NULL,"
	"  period TEXT NOT NULL,"		/* its first day */
	"  percent INTEGER NOT NULL,"
	"  ts INTEGER NOT NULL,"
	"  PRIMARY KEY (scope, name, metric, holder, period, percent))"
	"  WITHOUT ROWID;",
	/*
	 * 4 -> 5: tool-definition pins (controller_pins.c).  definition is
	 * the canonical JSON whose SHA-256 (hex) is sha256: the approved
	 * one, or the one first seen; a server that changes it leaves the
	 * new one in pending_* until an administrator approves it.
	 */
	"CREATE TABLE tool_pins ("
	"  server TEXT NOT NULL,"
	"  tool TEXT NOT NULL,"
	"  sha256 TEXT NOT NULL,"
	"  definition TEXT NOT NULL,"
	"  first_seen INTEGER NOT NULL,"	/* ms since the epoch */
	"  approved_at INTEGER,"		/* NULL: as first seen */
	"  approved_by TEXT,"
	"  pending_sha256 TEXT,"
	"  pending_definition TEXT,"
	"  pending_since INTEGER,"
	"  PRIMARY KEY (server, tool)) WITHOUT ROWID;",
	/*
	 * 5 -> 6: a user is a name within a tenant.  A budget mark is its
	 * holder's in that tenant, and a `budget user "NAME" tenant "T"`
	 * (name_tenant T; '' for none) is another budget than NAME's in any
	 * tenant.
	 */
	"CREATE TABLE budget_alerts_6 ("
	"  scope TEXT NOT NULL,"
	"  name TEXT NOT NULL,"
	"  name_tenant TEXT NOT NULL,"
	"  metric TEXT NOT NULL,"
	"  holder TEXT NOT NULL,"		/* the tenant, or the user */
	"  tenant TEXT NOT NULL,"
	"  period TEXT NOT NULL,"
	"  percent INTEGER NOT NULL,"
	"  ts INTEGER NOT NULL,"
	"  PRIMARY KEY (scope, name, name_tenant, metric, holder, tenant,"
	"  period, percent)) WITHOUT ROWID;"
	"INSERT INTO budget_alerts_6 SELECT scope, name, '', metric, holder,"
	"  tenant, period, percent, ts FROM budget_alerts;"
	"DROP TABLE budget_alerts;"
	"ALTER TABLE budget_alerts_6 RENAME TO budget_alerts;",
};
/* The array is the history: its length is the schema's version. */
#define SCHEMA_VERSION	((int)(sizeof(migrations) / sizeof(migrations[0])))

static int
exec(const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		log_warnx("database: %s", err != NULL ? err : "error");
		sqlite3_free(err);
		return -1;
	}
	return 0;
}

static int
schema_version(void)
{
	sqlite3_stmt	*st;
	int		 v = -1;

	if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) ==
	    SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return v;
}

/*
 * Copy the whole database to path with SQLite's backup API (which copies
 * what the WAL holds too): written under a temporary name, synced, then
 * renamed, so that a file at path is always a whole copy.
 */
static int
copy_database(const char *path)
{
	char		 tmp[4096 + 8];
	sqlite3		*dst = NULL;
	sqlite3_backup	*bk;
	int		 rc;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	(void)unlink(tmp);
	if (sqlite3_open_v2(tmp, &dst, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
	    (bk = sqlite3_backup_init(dst, "main", db, "main")) == NULL) {
		log_warnx("database copy %s: %s", tmp, dst != NULL ?
		    sqlite3_errmsg(dst) : "cannot open");
		goto fail;
	}
	rc = sqlite3_backup_step(bk, -1);
	(void)sqlite3_backup_finish(bk);
	/* The copy says WAL, as ours does: one file is a better copy. */
	if (rc == SQLITE_DONE)
		rc = sqlite3_exec(dst, "PRAGMA journal_mode = DELETE;", NULL,
		    NULL, NULL) == SQLITE_OK ? SQLITE_DONE : SQLITE_ERROR;
	if (rc != SQLITE_DONE) {
		log_warnx("database copy %s: %s", tmp, sqlite3_errstr(rc));
		goto fail;
	}
	if (sqlite3_close(dst) != SQLITE_OK) {
		dst = NULL;
		goto fail;
	}
	if (rename(tmp, path) == -1) {
		log_warn("database copy %s", path);
		(void)unlink(tmp);
		return -1;
	}
	return 0;
 fail:
	sqlite3_close(dst);
	(void)unlink(tmp);
	return -1;
}

/* Bring an older database up to date, one step per transaction. */
static int
migrate(void)
{
	char	pragma[64], copy[4096];
	int	v;

	if ((v = schema_version()) < 0)
		return -1;
	if (v > SCHEMA_VERSION) {
		log_warnx("database schema %d is newer than this mcpbroker "
		    "(%d)", v, SCHEMA_VERSION);
		return -1;
	}
	/*
	 * A database with data in it is copied as it is before the first
	 * step changes it (mcpbroker.db.bak-vN, N its version): the way
	 * back if the new version has to go.  No copy, no migration.
	 */
	if (v > 0 && v < SCHEMA_VERSION) {
		snprintf(copy, sizeof(copy), "%s.bak-v%d",
		    sqlite3_db_filename(db, "main"), v);
		if (copy_database(copy) == -1) {
			log_warnx("database: no copy of schema version %d, so "
			    "no migration", v);
			return -1;
		}
		log_info("database: schema version %d copied to %s before "
		    "migrating", v, copy);
	}
	for (; v < SCHEMA_VERSION; v++) {
		snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d;",
		    v + 1);
		if (exec("BEGIN IMMEDIATE;") == -1 || exec(migrations[v]) ==
		    -1 || exec(pragma) == -1 || exec("COMMIT;") == -1) {
			(void)exec("ROLLBACK;");
			return -1;
		}
		log_info("database schema migrated to version %d", v + 1);
	}
	return 0;
}

/*
 * Started as root, the controller opens its database before it gives up
 * root.  It does so with the file-system identity of the state directory's
 * owner (the configured user: the parent gave the directory to it), so
 * that the files it makes are that user's, and root needs no right over
 * another user's directory: the systemd unit grants no CAP_DAC_OVERRIDE.
 * The database files an older version made as root are handed over first
 * (that needs no more than CAP_CHOWN).  0: nothing to change.
 */
static int
owner_identity(const char *state_dir, uid_t *uid, gid_t *gid)
{
	static const char *const files[] = { STORE_FILE, STORE_FILE "-wal",
	    STORE_FILE "-shm" };
	struct stat	st;
	size_t		i;
	int		dfd;

	if (geteuid() != 0 || stat(state_dir, &st) == -1 || st.st_uid == 0)
		return 0;
	*uid = st.st_uid;
	*gid = st.st_gid;
	if ((dfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) != -1) {
		for (i = 0; i < sizeof(files) / sizeof(files[0]); i++)
			if (fstatat(dfd, files[i], &st, AT_SYMLINK_NOFOLLOW) ==
			    0 && S_ISREG(st.st_mode) && st.st_uid != *uid &&
			    fchownat(dfd, files[i], *uid, *gid,
			    AT_SYMLINK_NOFOLLOW) == -1)
				log_warn("database: chown %s", files[i]);
		close(dfd);
	}
	return 1;
}

static void	staging_remove(void);

static void
keys_forget(void)
{
	explicit_bzero(keys_kept, sizeof(keys_kept));
}

static void
row_changed(void *arg, int op, const char *dbname, const char *table,
    sqlite3_int64 rowid)
{
	(void)arg;
	(void)op;
	(void)dbname;
	(void)rowid;
	if (strcmp(table, "users") == 0)
		keys_forget();
}

static void
rolled_back(void *arg)
{
	(void)arg;
	keys_forget();
}

static int
open_database(const char *path)
{
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		log_warnx("database %s: %s", path, db != NULL ?
		    sqlite3_errmsg(db) : "cannot open");
		return -1;
	}
	sqlite3_busy_timeout(db, 5000);
	(void)sqlite3_update_hook(db, row_changed, NULL);
	(void)sqlite3_rollback_hook(db, rolled_back, NULL);
	/*
	 * FULL whatever the library's default: a committed audit row (a
	 * call's intent) survives a power cut.  Group commit pays for it.
	 */
	if (exec("PRAGMA journal_mode = WAL;") == -1 ||
	    exec("PRAGMA synchronous = FULL;") == -1 ||
	    exec("PRAGMA foreign_keys = ON;") == -1 || migrate() == -1)
		return -1;
	/* What a backup that did not finish left behind. */
	snprintf(staging, sizeof(staging), "%s.backup-tmp", path);
	staging_remove();
	return 0;
}

int
store_open(const char *state_dir)
{
	char	path[4096];
	uid_t	uid;
	gid_t	gid;
	int	rv, as_owner;

	snprintf(path, sizeof(path), "%s/" STORE_FILE, state_dir);
	if ((as_owner = owner_identity(state_dir, &uid, &gid))) {
		(void)setfsgid(gid);
		(void)setfsuid(uid);
	}
	rv = open_database(path);
	if (as_owner) {
		(void)setfsuid(geteuid());
		(void)setfsgid(getegid());
	}
	return rv;
}

/*
 * Online backup (mcpbrokerctl backup).  SQLite's backup API copies the
 * database into a staging file beside it, BACKUP_PAGES pages per pass of
 * the event loop so that conversations go on meanwhile: a change made
 * through our connection (the only one) between two steps is carried into
 * the copy, which is therefore the database as it was when the last step
 * ran.  The staging file is then copied into the file mcpbrokerctl opened
 * and sent us, BACKUP_CHUNK bytes a pass, synced, and removed.
 */
#define BACKUP_PAGES	256		/* 1 MiB of 4 KiB pages */
#define BACKUP_CHUNK	(1024 * 1024)

struct backup {
	struct event	*b_ev;
	sqlite3		*b_dst;
	sqlite3_backup	*b_bk;
	int		 b_fd;		/* the file to fill */
	int		 b_src;		/* the finished staging file */
	int64_t		 b_pages;
	int64_t		 b_bytes;
	store_backup_fn	 b_done;
	void		*b_arg;
};
static struct backup *backup;

static void
staging_remove(void)
{
	char journal[sizeof(staging) + 8];

	snprintf(journal, sizeof(journal), "%s-journal", staging);
	(void)unlink(staging);
	(void)unlink(journal);
}

static void
backup_end(struct backup *b, const char *error)
{
	if (b->b_bk != NULL)
		(void)sqlite3_backup_finish(b->b_bk);
	sqlite3_close(b->b_dst);
	if (b->b_src != -1)
		close(b->b_src);
	close(b->b_fd);
	staging_remove();
	event_free(b->b_ev);
	backup = NULL;
	if (error != NULL)
		log_warnx("backup: %s", error);
	else
		log_info("backup: %lld pages, %lld bytes", (long long)b->b_pages,
		    (long long)b->b_bytes);
	b->b_done(error, b->b_pages, b->b_bytes, b->b_arg);
	free(b);
}

static void
backup_again(struct backup *b, int ms)
{
	struct timeval tv = { 0, ms * 1000 };

	evtimer_add(b->b_ev, &tv);
}

/* Up to BACKUP_CHUNK bytes of the staging file into the destination. */
static void
backup_copy(struct backup *b)
{
	static char	 buf[65536];
	char		 why[128];
	ssize_t		 n, w;
	size_t		 done, off;

	for (done = 0; done < BACKUP_CHUNK; done += (size_t)n) {
		if ((n = read(b->b_src, buf, sizeof(buf))) == -1 &&
		    errno == EINTR) {
			n = 0;
			continue;
		}
		if (n == -1) {
			snprintf(why, sizeof(why), "reading the copy: %s",
			    strerror(errno));
			backup_end(b, why);
			return;
		}
		if (n == 0) {
			if (fsync(b->b_fd) == -1) {
				snprintf(why, sizeof(why), "fsync: %s",
				    strerror(errno));
				backup_end(b, why);
			} else
				backup_end(b, NULL);
			return;
		}
		for (off = 0; off < (size_t)n; off += (size_t)w)
			if ((w = write(b->b_fd, buf + off, (size_t)n - off)) ==
			    -1) {
				if (errno == EINTR) {
					w = 0;
					continue;
				}
				snprintf(why, sizeof(why), "writing the backup: "
				    "%s", strerror(errno));
				backup_end(b, why);
				return;
			}
		b->b_bytes += n;
	}
	backup_again(b, 0);
}

static void
backup_run(int fd, short ev, void *arg)
{
	struct backup	*b = arg;
	char		 why[256];
	int		 rc;

	(void)fd;
	(void)ev;
	if (b->b_bk == NULL) {
		backup_copy(b);
		return;
	}
	rc = sqlite3_backup_step(b->b_bk, BACKUP_PAGES);
	if (rc == SQLITE_OK || rc == SQLITE_BUSY || rc == SQLITE_LOCKED) {
		backup_again(b, rc == SQLITE_OK ? 0 : 10);
		return;
	}
	b->b_pages = sqlite3_backup_pagecount(b->b_bk);
	(void)sqlite3_backup_finish(b->b_bk);
	b->b_bk = NULL;
	if (rc != SQLITE_DONE) {
		snprintf(why, sizeof(why), "copying the database: %s",
		    sqlite3_errstr(rc));
		backup_end(b, why);
		return;
	}
	/* The copy says WAL, as ours does: one file is a better copy. */
	rc = sqlite3_exec(b->b_dst, "PRAGMA journal_mode = DELETE;", NULL, NULL,
	    NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_close(b->b_dst);
	else
		sqlite3_close(b->b_dst);
	b->b_dst = NULL;
	if (rc != SQLITE_OK || (b->b_src = open(staging, O_RDONLY |
	    O_CLOEXEC)) == -1) {
		snprintf(why, sizeof(why), "reading the copy: %s",
		    rc != SQLITE_OK ? sqlite3_errstr(rc) : strerror(errno));
		backup_end(b, why);
		return;
	}
	backup_again(b, 0);
}

int
store_backup(struct event_base *base, int fd, store_backup_fn done,
    void *arg, char *why, size_t whylen)
{
	struct backup	*b;
	struct stat	 st;
	int		 fl;

	if (db == NULL || backup != NULL) {
		snprintf(why, whylen, "%s", db == NULL ? "the database is not "
		    "open" : "a backup is already running");
		close(fd);
		return -1;
	}
	if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) ||
	    (fl = fcntl(fd, F_GETFL)) == -1 || (fl & O_ACCMODE) == O_RDONLY ||
	    (fl & O_APPEND) != 0) {
		snprintf(why, whylen, "the backup must go to a regular file "
		    "opened for writing");
		close(fd);
		return -1;
	}
	if ((b = calloc(1, sizeof(*b))) == NULL ||
	    (b->b_ev = evtimer_new(base, backup_run, b)) == NULL) {
		free(b);
		snprintf(why, whylen, "out of memory");
		close(fd);
		return -1;
	}
	b->b_fd = fd;
	b->b_src = -1;
	b->b_done = done;
	b->b_arg = arg;
	staging_remove();
	if (sqlite3_open_v2(staging, &b->b_dst, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
	    (b->b_bk = sqlite3_backup_init(b->b_dst, "main", db, "main")) ==
	    NULL) {
		snprintf(why, whylen, "the copy of the database: %s",
		    b->b_dst != NULL ? sqlite3_errmsg(b->b_dst) : "cannot open");
		sqlite3_close(b->b_dst);
		event_free(b->b_ev);
		close(fd);
		free(b);
		staging_remove();
		return -1;
	}
	backup = b;
	log_info("backup: started");
	backup_again(b, 0);
	return 0;
}

/*
 * One unit of work that nests: a transaction of its own, or a savepoint
 * within the caller's.  sp names it (a plain identifier).
 */
int
store_begin(const char *sp)
{
	char	sql[80];

	if (db == NULL)
		return -1;
	snprintf(sql, sizeof(sql), "SAVEPOINT %s;", sp);
	return exec(sql);
}

/*
 * The unit of work that lowered synchronous to NORMAL, if one did.  In WAL
 * mode that commit writes the WAL without syncing it; the next FULL commit
 * syncs the WAL, and with it every frame written before, so an audit row
 * on disk has the history before it on disk too.  A crash of the process
 * loses nothing (the frames are written); a power cut may lose what came
 * after the last sync.  Everything else, the audit trail first, commits
 * with FULL: a failure to go back to it ends the process.
 */
static const char *lazy_sp;

static void	sync_full_again(const char *);

int
store_begin_lazy(const char *sp)
{
	if (db == NULL)
		return -1;
	if (lazy_sp == NULL && sqlite3_get_autocommit(db)) {
		if (exec("PRAGMA synchronous = NORMAL;") == -1)
			return -1;
		lazy_sp = sp;
	}
	if (store_begin(sp) == 0)
		return 0;
	sync_full_again(sp);
	return -1;
}

static void
sync_full_again(const char *sp)
{
	if (lazy_sp == NULL || strcmp(sp, lazy_sp) != 0)
		return;
	lazy_sp = NULL;
	if (exec("PRAGMA synchronous = FULL;") == -1)
		fatalx("database: cannot make commits synchronous again");
}

int
store_end(const char *sp, int ok)
{
	char	sql[160];
	int	rv = 0;

	snprintf(sql, sizeof(sql), "RELEASE %s;", sp);
	if (!ok || exec(sql) == -1) {
		snprintf(sql, sizeof(sql), "ROLLBACK TO %s; RELEASE %s;", sp,
		    sp);
		(void)exec(sql);
		rv = ok ? -1 : 0;
	}
	sync_full_again(sp);
	return rv;
}

/* For the other tables' modules (controller_audit.c): one connection. */
sqlite3 *
store_db(void)
{
	return db;
}

/* Statements kept prepared (store_cached): preparing is parsing SQL. */
#define CACHED_MAX	16
static struct {
	const char	*sql;
	sqlite3_stmt	*st;
} cached[CACHED_MAX];

void
store_close(void)
{
	size_t i;

	for (i = 0; i < CACHED_MAX; i++) {
		sqlite3_finalize(cached[i].st);
		cached[i].sql = NULL;
		cached[i].st = NULL;
	}
	sqlite3_close(db);
	db = NULL;
	keys_forget();
}

/* mcpb_ + 43 characters of base64url: 256 bits. */
static int
key_new(char *key)
{
	unsigned char	raw[32];
	char		b64[64], *c;

	if (getrandom(raw, sizeof(raw), 0) != sizeof(raw))
		return -1;
	EVP_EncodeBlock((unsigned char *)b64, raw, sizeof(raw));
	explicit_bzero(raw, sizeof(raw));
	b64[43] = '\0';				/* drop the '=' padding */
	for (c = b64; *c != '\0'; c++)
		if (*c == '+')
			*c = '-';
		else if (*c == '/')
			*c = '_';
	snprintf(key, KEY_MAX, KEY_PREFIX "%s", b64);
	explicit_bzero(b64, sizeof(b64));
	return 0;
}

static void
key_hash(const char *key, unsigned char out[SHA256_DIGEST_LENGTH])
{
	sha256(key, strlen(key), out);
}

static void
key_id(const char *key, char id[KEY_ID_LEN + 1])
{
	snprintf(id, KEY_ID_LEN + 1, "%s", key + strlen(KEY_PREFIX));
}

/* Store a fresh key for `name`; used by add and rotate. */
static int
set_key(const char *name, char *key, char *why, size_t whylen)
{
	unsigned char	 hash[SHA256_DIGEST_LENGTH];
	char		 id[KEY_ID_LEN + 1];
	sqlite3_stmt	*st;
	int		 rc;

	if (key_new(key) == -1) {
		snprintf(why, whylen, "no randomness: %s", strerror(errno));
		return -1;
	}
	key_hash(key, hash);
	key_id(key, id);
	if (sqlite3_prepare_v2(db, "UPDATE users SET key_id = ?, key_hash = "
	    "?, key_created = ? WHERE name = ?", -1, &st, NULL) != SQLITE_OK)
		goto fail;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_blob(st, 2, hash, sizeof(hash), SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)time(NULL));
	sqlite3_bind_text(st, 4, name, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		goto fail;
	if (sqlite3_changes(db) == 0) {
		snprintf(why, whylen, "no user \"%s\"", name);
		return -1;
	}
	return 0;
 fail:
	snprintf(why, whylen, "database: %s", sqlite3_errmsg(db));
	return -1;
}

int
store_user_add(const char *name, const char *tenant, const char *roles,
    char *key, char *why, size_t whylen)
{
	sqlite3_stmt	*st;
	const char	*p;
	size_t		 nroles = 0;
	int		 rc;

	/* Policy sees no more; a deny for the 17th would silently not hold. */
	for (p = roles; *p != '\0'; p += strcspn(p, ","), p += *p == ',')
		nroles += p[0] != ',';
	if (nroles > USER_ROLES_MAX) {
		snprintf(why, whylen, "at most %d roles", USER_ROLES_MAX);
		return -1;
	}
	if (sqlite3_prepare_v2(db, "INSERT INTO users (name, tenant, roles, "
	    "created) VALUES (?, ?, ?, ?)", -1, &st, NULL) != SQLITE_OK) {
		snprintf(why, whylen, "database: %s", sqlite3_errmsg(db));
		return -1;
	}
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, tenant, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, roles, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(st, 4, (sqlite3_int64)time(NULL));
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc == SQLITE_CONSTRAINT) {
		snprintf(why, whylen, "user \"%s\" exists already; use "
		    "`user key %s` for a new key", name, name);
		return -1;
	}
	if (rc != SQLITE_DONE) {
		snprintf(why, whylen, "database: %s", sqlite3_errmsg(db));
		return -1;
	}
	return set_key(name, key, why, whylen);
}

/*
 * A user's web sessions end with the key that opened them and with the
 * user.  The foreign key would do the latter; being explicit keeps both
 * in the caller's transaction and visible here.
 */
static int
end_sessions(const char *name, char *why, size_t whylen)
{
	sqlite3_stmt	*st;
	int		 rc;

	if (sqlite3_prepare_v2(db, "DELETE FROM sessions WHERE user = ?", -1,
	    &st, NULL) != SQLITE_OK) {
		snprintf(why, whylen, "database: %s", sqlite3_errmsg(db));
		return -1;
	}
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		snprintf(why, whylen, "database: %s", sqlite3_errmsg(db));
		return -1;
	}
	return 0;
}

int
store_user_key(const char *name, char *key, char *why, size_t whylen)
{
	if (set_key(name, key, why, whylen) == -1)
		return -1;
	return end_sessions(name, why, whylen);
}

int
store_user_del(const char *name, char *why, size_t whylen)
{
	sqlite3_stmt	*st;
	int		 rc;

	if (end_sessions(name, why, whylen) == -1)
		return -1;
	if (sqlite3_prepare_v2(db, "DELETE FROM users WHERE name = ?", -1,
	    &st, NULL) != SQLITE_OK) {
		snprintf(why, whylen, "database: %s", sqlite3_errmsg(db));
		return -1;
	}
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE || sqlite3_changes(db) == 0) {
		snprintf(why, whylen, "no user \"%s\"", name);
		return -1;
	}
	return 0;
}

struct json_object *
store_user_list(void)
{
	struct json_object	*arr = json_object_new_array(), *u;
	sqlite3_stmt		*st;

	if (sqlite3_prepare_v2(db, "SELECT name, tenant, roles, created, "
	    "key_created FROM users ORDER BY name", -1, &st, NULL) !=
	    SQLITE_OK)
		return arr;
	while (sqlite3_step(st) == SQLITE_ROW) {
		u = json_object_new_object();
		json_object_object_add(u, "name", json_object_new_string(
		    (const char *)sqlite3_column_text(st, 0)));
		json_object_object_add(u, "tenant", json_object_new_string(
		    (const char *)sqlite3_column_text(st, 1)));
		json_object_object_add(u, "roles", json_object_new_string(
		    (const char *)sqlite3_column_text(st, 2)));
		json_object_object_add(u, "created", json_object_new_int64(
		    sqlite3_column_int64(st, 3)));
		json_object_object_add(u, "key_created", json_object_new_int64(
		    sqlite3_column_int64(st, 4)));
		json_object_array_add(arr, u);
	}
	sqlite3_finalize(st);
	return arr;
}

int
store_authenticate(const char *key, struct store_user *u)
{
	unsigned char	 hash[SHA256_DIGEST_LENGTH];
	char		 id[KEY_ID_LEN + 1];
	struct key_kept	*kk;
	sqlite3_stmt	*st;
	const void	*stored;
	int		 ok = 0;

	if (strncmp(key, KEY_PREFIX, strlen(KEY_PREFIX)) != 0 ||
	    strlen(key) < strlen(KEY_PREFIX) + KEY_ID_LEN ||
	    strlen(key) >= KEY_MAX)
		return -1;
	key_hash(key, hash);
	kk = &keys_kept[(hash[0] | hash[1] << 8) % KEYS_KEPT];
	if (kk->kk_used && CRYPTO_memcmp(kk->kk_hash, hash, sizeof(hash)) == 0) {
		*u = kk->kk_user;
		return 0;
	}
	key_id(key, id);
	if ((st = store_cached("SELECT name, tenant, roles, key_hash FROM "
	    "users WHERE key_id = ?")) == NULL)
		return -1;
	sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW &&
	    sqlite3_column_bytes(st, 3) == SHA256_DIGEST_LENGTH &&
	    (stored = sqlite3_column_blob(st, 3)) != NULL &&
	    CRYPTO_memcmp(stored, hash, sizeof(hash)) == 0) {
		snprintf(u->su_name, sizeof(u->su_name), "%s",
		    (const char *)sqlite3_column_text(st, 0));
		snprintf(u->su_tenant, sizeof(u->su_tenant), "%s",
		    (const char *)sqlite3_column_text(st, 1));
		snprintf(u->su_roles, sizeof(u->su_roles), "%s",
		    (const char *)sqlite3_column_text(st, 2));
		ok = 1;
	}
	store_release(st);
	if (ok) {
		kk->kk_used = 1;
		memcpy(kk->kk_hash, hash, sizeof(hash));
		kk->kk_user = *u;
	}
	return ok ? 0 : -1;
}

int
user_has_role(const struct store_user *u, const char *role)
{
	char	buf[sizeof(u->su_roles)], *save, *r;

	snprintf(buf, sizeof(buf), "%s", u->su_roles);
	for (r = strtok_r(buf, ",", &save); r != NULL;
	    r = strtok_r(NULL, ",", &save))
		if (strcmp(r, role) == 0)
			return 1;
	return 0;
}

int
store_user_is(const struct store_user *u, const char *name,
    const char *tenant)
{
	return strcmp(u->su_name, name) == 0 &&
	    strcmp(u->su_tenant, tenant) == 0;
}

int
store_user_get(const char *name, struct store_user *u)
{
	sqlite3_stmt	*st;
	int		 ok = 0;

	if (sqlite3_prepare_v2(db, "SELECT name, tenant, roles FROM users "
	    "WHERE name = ?", -1, &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) == SQLITE_ROW) {
		snprintf(u->su_name, sizeof(u->su_name), "%s",
		    (const char *)sqlite3_column_text(st, 0));
		snprintf(u->su_tenant, sizeof(u->su_tenant), "%s",
		    (const char *)sqlite3_column_text(st, 1));
		snprintf(u->su_roles, sizeof(u->su_roles), "%s",
		    (const char *)sqlite3_column_text(st, 2));
		ok = 1;
	}
	sqlite3_finalize(st);
	return ok ? 0 : -1;
}

/* Every user of the tenant; their web sessions go by the foreign key. */
int
store_tenant_del(const char *tenant, int64_t *n)
{
	sqlite3_stmt	*st;
	int		 rc;

	*n = 0;
	if (sqlite3_prepare_v2(db, "DELETE FROM users WHERE tenant = ?", -1,
	    &st, NULL) != SQLITE_OK)
		return -1;
	sqlite3_bind_text(st, 1, tenant, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		log_warnx("database: %s", sqlite3_errmsg(db));
		return -1;
	}
	*n = sqlite3_changes(db);
	return 0;
}

/* ---- statements, for the other tables' modules ---- */

sqlite3_stmt *
store_prepare(const char *sql)
{
	sqlite3_stmt	*st;

	if (db == NULL || sqlite3_prepare_v2(db, sql, -1, &st, NULL) !=
	    SQLITE_OK) {
		log_warnx("database: %s", db != NULL ? sqlite3_errmsg(db) :
		    "not open");
		return NULL;
	}
	return st;
}

sqlite3_stmt *
store_cached(const char *sql)
{
	size_t i;

	for (i = 0; i < CACHED_MAX && cached[i].sql != NULL; i++)
		if (cached[i].sql == sql)
			return cached[i].st;
	if (i == CACHED_MAX)
		fatalx("database: more than %d cached statements", CACHED_MAX);
	if (db == NULL || sqlite3_prepare_v3(db, sql, -1,
	    SQLITE_PREPARE_PERSISTENT, &cached[i].st, NULL) != SQLITE_OK) {
		log_warnx("database: %s", db != NULL ? sqlite3_errmsg(db) :
		    "not open");
		cached[i].st = NULL;
		return NULL;
	}
	cached[i].sql = sql;
	return cached[i].st;
}

void
store_release(sqlite3_stmt *st)
{
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
}

int
store_step_done(sqlite3_stmt *st)
{
	int	rc = sqlite3_step(st);

	/* The message before finalizing, which may clear it. */
	if (rc != SQLITE_DONE)
		log_warnx("database: %s", sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? 0 : -1;
}

void
store_bind_str(sqlite3_stmt *st, int i, const char *s)
{
	if (s != NULL)
		sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, i);
}

int
store_exec_one(const char *sql, const char *arg)
{
	sqlite3_stmt	*st;

	if ((st = store_prepare(sql)) == NULL)
		return -1;
	store_bind_str(st, 1, arg);
	return store_step_done(st);
}

int
store_exec_two(const char *sql, const char *arg1, const char *arg2)
{
	sqlite3_stmt	*st;

	if ((st = store_prepare(sql)) == NULL)
		return -1;
	store_bind_str(st, 1, arg1);
	store_bind_str(st, 2, arg2);
	return store_step_done(st);
}
