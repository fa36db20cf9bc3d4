/*
 * Audited tool-call intents per second: the rows that must be committed
 * before a call may go to its worker.
 *
 * Each case gets a new database in its own directory under DIR (a real
 * file system: on tmpfs an fsync costs nothing and the comparison says
 * nothing), opened by the controller's own code (WAL, synchronous FULL),
 * and writes ROWS intent rows shaped like the chat's.  "one per call"
 * is audit_append: one transaction, one fsync, per row, which is what the
 * controller did before group commit.  "batch N" queues N rows with
 * audit_append_async, as N calls decided in one pass of the event loop
 * would, and runs the loop once: one transaction for the N.
 *
 * Each case runs REPEAT times, each time on a new database, the cases
 * taking turns (one run of each, then the next round) so that a disk
 * whose fsync is slow for a while slows every case alike; the median is
 * reported with the slowest and fastest run.
 *
 *	audit_bench [-d DIR] [-n ROWS] [-r REPEAT] [BATCH...]
 *	(defaults: /tmp or $TMPDIR, 2000 rows, 5 runs, batches 1 8 32 128)
 */
#include <sys/stat.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <json-c/json.h>
#include <sqlite3.h>

#include "broker/controller.h"
#include "broker/controller_audit.h"
#include "broker/controller_store.h"
#include "common/log.h"

/* controller_audit.c answers mcpbrokerctl through these; unused here. */
void
admin_reply(uint64_t id, struct json_object *reply)
{
	(void)id;
	json_object_put(reply);
}

void
admin_error(uint64_t id, const char *message)
{
	(void)id;
	(void)message;
}

#define MAX_REPEAT	99

static struct event_base	*base;
static int			 commits;
static long			 failed;
static int			 repeat = 5;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
count_commit(void *arg)
{
	(void)arg;
	commits++;
	return 0;
}

/* What chat.c records for an allowed call, give or take the values. */
static struct json_object *
intent_detail(long n)
{
	struct json_object	*d = json_object_new_object(), *a;
	char			 path[64];

	snprintf(path, sizeof(path), "/srv/share/public/report-%ld.md", n);
	a = json_object_new_object();
	json_object_object_add(a, "path", json_object_new_string(path));
	json_object_object_add(d, "conversation",
	    json_object_new_string("8f2a61c0d94e3b17"));
	json_object_object_add(d, "server", json_object_new_string("files"));
	json_object_object_add(d, "tool", json_object_new_string(
	    "read_file"));
	json_object_object_add(d, "decision", json_object_new_string(
	    "allow"));
	json_object_object_add(d, "rule", json_object_new_string(
	    "/etc/mcpbroker/mcpbroker.conf:42"));
	json_object_object_add(d, "reason", json_object_new_string(
	    "allow role \"analyst\" tool \"files.read_file\""));
	json_object_object_add(d, "arguments_sha256", json_object_new_string(
	    "3b1f0c6a9e2d4f5b8a7c6d5e4f3a2b1c"
	    "0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a"));
	json_object_object_add(d, "arguments", a);
	return d;
}

static void
done(int64_t id, void *arg)
{
	(void)arg;
	if (id == -1)
		failed++;
}

static int
open_fresh(const char *dir, const char *name, char *path, size_t len)
{
	snprintf(path, len, "%s/%s", dir, name);
	if (mkdir(path, 0700) == -1 || store_open(path) == -1)
		return -1;
	audit_init(base);
	(void)sqlite3_commit_hook(store_db(), count_commit, NULL);
	commits = 0;
	failed = 0;
	return 0;
}

static void
close_and_remove(const char *path)
{
	const char *const files[] = { "mcpbroker.db", "mcpbroker.db-wal",
	    "mcpbroker.db-shm" };
	char	f[4200];
	size_t	i;

	store_close();
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(f, sizeof(f), "%s/%s", path, files[i]);
		(void)unlink(f);
	}
	(void)rmdir(path);
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void
report(const char *name, long rows, double *rates, int n)
{
	qsort(rates, (size_t)n, sizeof(*rates), cmp_double);
	printf("%-13s %6ld rows %6d commits %9.0f rows/s (%.0f-%.0f) "
	    "%7.3f ms/commit%s\n", name, rows, commits, rates[n / 2],
	    rates[0], rates[n - 1], 1000.0 * rows / commits / rates[n / 2],
	    failed ? "  FAILED ROWS" : "");
}

/* One run: batch 0 is audit_append, one transaction per row. */
static int
run(const char *dir, long rows, long batch, double *rate)
{
	struct json_object	*d;
	char			 path[4096], name[32];
	double			 t0;
	long			 i, j;

	snprintf(name, sizeof(name), "batch-%ld", batch);
	if (open_fresh(dir, name, path, sizeof(path)) == -1)
		return -1;
	t0 = now_s();
	for (i = 0; batch == 0 && i < rows; i++) {
		d = intent_detail(i);
		if (audit_append("tool_call", "alice", "acme", d) == -1)
			failed++;
		json_object_put(d);
	}
	for (i = 0; batch > 0 && i < rows; i += batch) {
		for (j = i; j < i + batch && j < rows; j++) {
			d = intent_detail(j);
			(void)audit_append_async("tool_call", "alice", "acme",
			    d, done, NULL);
			json_object_put(d);
		}
		/* one pass: the commit, then the calls would be sent */
		(void)event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	}
	*rate = rows / (now_s() - t0);
	close_and_remove(path);
	return 0;
}

#define MAX_CASES	16

static int
bench(const char *dir, long rows, const long *batches, int ncases)
{
	double	rates[MAX_CASES][MAX_REPEAT];
	int	commits_of[MAX_CASES];
	char	name[32];
	int	i, r;

	for (r = 0; r < repeat; r++)
		for (i = 0; i < ncases; i++) {
			if (run(dir, rows, batches[i], &rates[i][r]) == -1)
				return -1;
			commits_of[i] = commits;
		}
	for (i = 0; i < ncases; i++) {
		if (batches[i] == 0)
			snprintf(name, sizeof(name), "one per call");
		else
			snprintf(name, sizeof(name), "batch %ld", batches[i]);
		commits = commits_of[i];
		report(name, rows, rates[i], repeat);
	}
	return 0;
}

static void
pragmas(const char *dir)
{
	sqlite3_stmt	*st;
	char		 path[4096];

	if (open_fresh(dir, "pragmas", path, sizeof(path)) == -1)
		return;
	if (sqlite3_prepare_v2(store_db(), "SELECT * FROM pragma_journal_mode,"
	    " pragma_synchronous", -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		printf("# journal_mode %s, synchronous %d (2 = FULL), sqlite "
		    "%s\n", sqlite3_column_text(st, 0),
		    sqlite3_column_int(st, 1), sqlite3_libversion());
	sqlite3_finalize(st);
	close_and_remove(path);
}

int
main(int argc, char *argv[])
{
	const char	*tmp = getenv("TMPDIR") != NULL ? getenv("TMPDIR") :
			    "/tmp";
	char		 dir[4096];
	long		 rows = 2000, batch, batches[MAX_CASES];
	int		 ch, i, ncases = 0;

	log_init(1, 0, 0);
	while ((ch = getopt(argc, argv, "d:n:r:")) != -1) {
		switch (ch) {
		case 'd':
			tmp = optarg;
			break;
		case 'n':
			rows = strtol(optarg, NULL, 10);
			break;
		case 'r':
			repeat = (int)strtol(optarg, NULL, 10);
			break;
		default:
			fprintf(stderr, "usage: audit_bench [-d DIR] [-n ROWS] "
			    "[-r REPEAT] [BATCH...]\n");
			return 2;
		}
	}
	snprintf(dir, sizeof(dir), "%s/audit_bench.XXXXXX", tmp);
	if (rows < 1 || repeat < 1 || repeat > MAX_REPEAT ||
	    mkdtemp(dir) == NULL ||
	    (base = event_base_new()) == NULL) {
		perror("audit_bench");
		return 1;
	}
	printf("# %ld intent rows per run, median of %d runs (slowest-"
	    "fastest), under %s\n", rows, repeat, dir);
	pragmas(dir);
	/* Case 0 is one transaction per row. */
	batches[ncases++] = 0;
	if (optind == argc)
		for (batch = 1; batch <= 128; batch *= batch == 1 ? 8 : 4)
			batches[ncases++] = batch;
	for (i = optind; i < argc && ncases < MAX_CASES; i++)
		if ((batches[ncases++] = strtol(argv[i], NULL, 10)) < 1)
			return 2;
	if (bench(dir, rows, batches, ncases) == -1)
		return 1;
	(void)rmdir(dir);
	return 0;
}
