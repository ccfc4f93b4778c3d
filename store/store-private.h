/* store-private.h: what the files of libember-store share: the connection
 * struct, the SQLite check macros, the per-connection statement cache,
 * transactions, and helpers for paths, time and the host. */
#pragma once

#include <glib.h>
#include <limits.h>
#include <sqlite3.h>

#include "em-store.h"

/* PRAGMA application_id of an Ember registry: "Embr" in ASCII. Set by
 * migration 1; a database with tables and another id is not ours. */
#define EM_STORE_APPLICATION_ID 0x456d6272

/* Every connection waits this long for a lock before SQLITE_BUSY. */
#define EM_STORE_BUSY_TIMEOUT_MS 10000

/* The writer commits at least every this many rows. */
#define EM_STORE_WRITER_BATCH 4096
/* Rows waiting in the writer's queue beyond which callers wait for the
 * writer thread (about 40 MB of metric rows). */
#define EM_STORE_WRITER_MAX_QUEUE (1 << 20)

struct em_store {
  sqlite3 *db;
  bool read_only;
  char dir[PATH_MAX];     /* absolute */
  char art_dir[PATH_MAX + 16]; /* dir/artifacts */
  char db_path[PATH_MAX + 16]; /* dir/registry.db */
  GHashTable *stmts;      /* SQL text -> sqlite3_stmt*, prepared once per connection */
};

/* ---- the SQLite check macros (house style 10) ----------------------------
 * Each records the call, the function and the line in err with SQLite's
 * message and a hint a person can act on. */

/* em_store_run_tag without its refusal of "plugin." keys: for the trainer's
 * own record of its plugins (run-plugins.c). */
em_status em_store_run_tag_any(em_store *s, int64_t run, const char *key, const char *value,
                               em_error *err);
em_status em_sql_fail(em_store *s, int rc, const char *call, const char *func, int line,
                      em_error *err);

static inline em_status em_sql_check(em_store *s, int rc, const char *call, const char *func,
                                     int line, em_error *err) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return EM_OK;
  return em_sql_fail(s, rc, call, func, line, err);
}

/* A call returning an SQLite result code: EM_OK for OK, ROW and DONE. */
#define EM_SQL_CHECK(s, call, err) em_sql_check((s), (call), #call, __func__, __LINE__, (err))

/* A cached prepared statement for sql (a string literal), reset and with
 * its bindings cleared. */
#define EM_SQL_PREPARE(s, sql, q, err) em_db_prepare((s), (sql), (q), __func__, __LINE__, (err))
em_status em_db_prepare(em_store *s, const char *sql, sqlite3_stmt **q, const char *func,
                        int line, em_error *err);

/* Binds parameters 1.. by a format: 'i' int64_t, 'n' int, 'z' int64_t with
 * 0 bound as NULL, 'd' double (NaN bound as NULL), 't' text (NULL bound as
 * NULL). */
#define EM_SQL_BIND(s, q, err, ...) em_db_bind((s), (q), __func__, __LINE__, (err), __VA_ARGS__)
em_status em_db_bind(em_store *s, sqlite3_stmt *q, const char *func, int line, em_error *err,
                     const char *fmt, ...);

/* Steps q: *row is true when a row is ready. On an error q is reset. */
#define EM_SQL_STEP(s, q, row, err) em_db_step((s), (q), (row), __func__, __LINE__, (err))
em_status em_db_step(em_store *s, sqlite3_stmt *q, bool *row, const char *func, int line,
                     em_error *err);

/* Steps q to its end, turning each row into one element of elem_size bytes
 * (read_row fills it from the row; s for paths), and resets q. *rows gets
 * the g_malloc'd array and *n its length even on an error, so that the
 * caller frees what was read with its own *_free. */
typedef void (*em_sql_row_fn)(em_store *s, sqlite3_stmt *q, void *elem);
#define EM_SQL_COLLECT(s, q, size, read_row, rows, n, err) \
  em_db_collect((s), (q), (size), (read_row), (void **)(rows), (n), __func__, __LINE__, (err))
em_status em_db_collect(em_store *s, sqlite3_stmt *q, size_t elem_size, em_sql_row_fn read_row,
                        void **rows, int *n, const char *func, int line, em_error *err);

/* Prepares (cached), binds by fmt (NULL: none), steps to the end and
 * resets: for statements without results. */
#define EM_SQL_RUN(s, err, sql, ...) em_db_run((s), __func__, __LINE__, (err), (sql), __VA_ARGS__)
em_status em_db_run(em_store *s, const char *func, int line, em_error *err, const char *sql,
                    const char *fmt, ...);

/* Writers open with BEGIN IMMEDIATE: the write lock is taken at the start,
 * so no read-to-write upgrade can fail with SQLITE_BUSY halfway through. */
#define EM_SQL_BEGIN(s, err) em_db_run((s), __func__, __LINE__, (err), "BEGIN IMMEDIATE", NULL)
#define EM_SQL_COMMIT(s, err) em_db_run((s), __func__, __LINE__, (err), "COMMIT", NULL)
/* Rolls back when a transaction is open; never fails. */
void em_db_rollback(em_store *s);

/* Column readers: a copy (g_free) or NULL; NULL reads as NaN. */
char *em_col_text(sqlite3_stmt *q, int i);
double em_col_double(sqlite3_stmt *q, int i);

/* Refuses writes on a read-only connection with a message naming what. */
em_status em_store_require_writable(em_store *s, const char *what, em_error *err);

/* ---- connection --------------------------------------------------------- */

/* Opens db_path and applies the per-connection settings (busy timeout,
 * foreign keys, synchronous, cache); statement cache made. Does not look
 * at the schema. */
em_store *em_store_connect(const char *db_path, bool read_only, em_error *err);
/* Migrates to version target (each step one transaction with its
 * user_version bump). */
em_status em_store_migrate(em_store *s, int target, em_error *err);
/* Marks "running" runs of this host whose process is gone as "killed". */
em_status em_store_sweep_stale_runs(em_store *s, em_error *err);

/* ---- paths -------------------------------------------------------------- */

/* The form stored in artifacts.rel_path: relative to artifacts/ when the
 * file lies under it (so the registry folder can move), else absolute. */
void em_store_path_to_row(const em_store *s, const char *abs_path, char *out, size_t cap);
void em_store_path_from_row(const em_store *s, const char *row_path, char *out, size_t cap);
/* True when row_path names a file under artifacts/: relative, with no
 * ".." among its parts. */
bool em_store_row_path_inside(const char *row_path);

/* ---- shared pieces ------------------------------------------------------ */

double em_store_now(void);
const char *em_store_host(void);
/* Start time of process pid in clock ticks since boot (/proc/<pid>/stat
 * field 22); -1 when unknown. */
int64_t em_process_start_time(int64_t pid);
/* false when pid is gone, or is another process that reused the number
 * (start time differs from recorded_start; -1 skips that check). */
bool em_process_alive(int64_t pid, int64_t recorded_start);

/* Points per metric chunk (see metric-chunks.c). */
#define EM_METRIC_CHUNK_POINTS 256
/* Inside a transaction: merges pts[0..n) of one run and key (ascending,
 * distinct steps) into the stored chunks; on equal steps they win. */
em_status em_metric_chunks_merge(em_store *s, int64_t run, int64_t key_id,
                                 const em_metric_point *pts, size_t n, em_error *err);
/* Inside a transaction: writes points no chunk holds yet (migrations). */
em_status em_metric_chunks_write_new(em_store *s, int64_t run, int64_t key_id,
                                     const em_metric_point *pts, size_t n, em_error *err);
/* All points of one run and key, by step. */
em_status em_metric_chunks_read(em_store *s, int64_t run, int64_t key_id, em_metric_point **pts,
                                int64_t *n, em_error *err);

/* metric key -> id in metric_keys; 0 when absent and !create. */
em_status em_store_metric_key_id(em_store *s, const char *key, bool create, int64_t *id,
                                 em_error *err);
/* EM_ERR_INVALID "no run N" when absent. */
em_status em_store_run_require(em_store *s, int64_t run, em_error *err);

/* Dataset identity: files hashed outside any transaction (cached per
 * path/size/mtime), then recorded inside the caller's transaction. */
typedef struct em_dataset_hashes em_dataset_hashes;
em_status em_dataset_hashes_compute(em_store *s, const em_dataset_identity *d,
                                    em_dataset_hashes **out, em_error *err);
em_status em_dataset_hashes_record(em_store *s, const em_dataset_hashes *h, int64_t *dataset_id,
                                   em_error *err);
void em_dataset_hashes_free(em_dataset_hashes *h);

/* Inside a transaction: records the artifact (replacing a row at the same
 * path) and the checkpoint rows. */
em_status em_store_checkpoint_insert(em_store *s, int64_t run, int64_t step, int64_t epoch,
                                     const char *abs_path, const char *sha256, int64_t size,
                                     const char *kind, double metric, bool lower_is_better,
                                     int64_t *id, em_error *err);
/* Inside a transaction: deletes the run's checkpoint rows that are not
 * among the newest keep_last, not the best by metric and not referred to
 * by a model version, with their artifact rows; the files to unlink after
 * the commit are appended to unlink (g_free'd strings). */
em_status em_store_checkpoints_prune(em_store *s, int64_t run, int keep_last,
                                     bool lower_is_better, GPtrArray *unlink, em_error *err);
/* True when the selector of NAME@SELECTOR reads as a version number (a
 * whole number above 0; *number gets it, number may be NULL), else it
 * names an alias (version-ref.c). */
bool em_store_selector_is_version(const char *sel, long *number);
/* The model's id; EM_ERR_INVALID naming the registered models otherwise. */
em_status em_store_model_id(em_store *s, const char *name, int64_t *id, em_error *err);

/* Inside a transaction: deletes artifact row a unless a checkpoint or a
 * model version still refers to it; its file is then appended to unlink. */
em_status em_store_artifact_drop_if_unused(em_store *s, int64_t a, GPtrArray *unlink,
                                           em_error *err);
/* Unlinks the files (after the commit that deleted their rows). */
void em_store_unlink_files(GPtrArray *paths);
/* The runs recorded as running on this host whose process is gone (in
 * *out, em_ended_run; g_array_free it), read without writing: what the
 * next writing open marks killed (stale-runs.c). */
typedef struct {
  int64_t id, pid;
} em_ended_run;
em_status em_store_ended_runs(em_store *s, GArray **out, em_error *err);
/* The checkpoint file em_store_adopt_checkpoints would record for a killed
 * run (its newest whole unrecorded one), found without writing; NULL when
 * none. g_free it. */
char *em_store_adoptable_checkpoint(em_store *s, int64_t run);

/* A training job's warning through its hooks (train-resume.c). */
#include "em-train-job.h"
void em_job_say(const em_job_hooks *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
