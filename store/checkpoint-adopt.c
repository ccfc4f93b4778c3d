/* checkpoint-adopt.c: the checkpoint a killed run wrote that its registry
 * writer had not recorded yet.
 *
 * The writer records checkpoints behind the trainer (it hashes each file
 * and commits it in a transaction of its own, writer.c), so a process
 * ended by SIGKILL or a power loss can leave checkpoint files newer than
 * the run's newest row: fmnist-mlp with --checkpoint-every 2, killed 3 s
 * in, had files up to step 634 and rows up to step 322. When the registry
 * finds the run's process gone (stale-runs.c), and again before a resume,
 * the newest of those files that is whole (format, version and checksum:
 * em_checkpoint_verify) is recorded as the run's checkpoint, with a run
 * event saying so, so that --resume continues from it and gc keeps it.
 * Older unrecorded files stay orphans that gc removes, as pruning would
 * have; a damaged one is passed over with a warning that names it. */
#include "store-private.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "em-train.h"

typedef struct {
  char kind[16];
  int64_t step;
  char *path;
} found_file;

/* At one step the trainer may have written several kinds of the same
 * state (an eval checkpoint, then the final one): prefer the final. */
static int kind_rank(const char *kind) {
  static const char *const order[] = {"final", "eval", "rollback", "step"};
  for (int i = 0; i < 4; i++)
    if (strcmp(kind, order[i]) == 0) return i;
  return 4;
}

static gint newest_first(gconstpointer a, gconstpointer b) {
  const found_file *x = a, *y = b;
  if (x->step != y->step) return x->step > y->step ? -1 : 1;
  return kind_rank(x->kind) - kind_rank(y->kind);
}

/* The run's newest recorded checkpoint step, -1 when it has none. */
static em_status newest_recorded(em_store *s, int64_t run, int64_t *step, em_error *err) {
  sqlite3_stmt *q;
  bool row = false;
  *step = -1;
  em_status st = EM_SQL_PREPARE(s, "SELECT max(step) FROM checkpoints WHERE run = ?", &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", run);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row && sqlite3_column_type(q, 0) != SQLITE_NULL) *step = sqlite3_column_int64(q, 0);
  if (q) sqlite3_reset(q);
  return st;
}

/* When the run started (seconds since the epoch), 0 when unknown. */
static double run_started(em_store *s, int64_t run) {
  sqlite3_stmt *q;
  bool row = false;
  double t = 0;
  em_status st = EM_SQL_PREPARE(s, "SELECT started FROM runs WHERE id = ?", &q, NULL);
  if (!st) st = EM_SQL_BIND(s, q, NULL, "i", run);
  if (!st) st = EM_SQL_STEP(s, q, &row, NULL);
  if (!st && row) t = sqlite3_column_double(q, 0);
  if (q) sqlite3_reset(q);
  return t;
}

/* The checkpoint files in dir newer than `after`, newest first. A file
 * last written before the run started is another run's: one of a deleted
 * run whose id this run was given (registries made before a run's
 * deletion emptied its folder). */
static GArray *newer_files(const char *dir, int64_t after, double started) {
  GArray *files = g_array_new(FALSE, TRUE, sizeof(found_file));
  GDir *d = g_dir_open(dir, 0, NULL);
  if (!d) return files; /* no folder: the run wrote no checkpoint */
  const char *name;
  while ((name = g_dir_read_name(d))) {
    found_file f = {0};
    if (!em_checkpoint_name_parse(name, f.kind, sizeof f.kind, &f.step) || f.step <= after)
      continue;
    f.path = g_build_filename(dir, name, NULL);
    struct stat sb;
    if (stat(f.path, &sb) == 0 && (double)sb.st_mtime < started - 2.0) { /* 2 s: clock steps */
      /* (a registry on another machine's disk, whose clock is behind, too) */
      em_log_msg(EM_LOG_WARNING, "registry: %s is not taken as the run's: it was last written "
                 "before the run started", f.path);
      g_free(f.path);
      continue;
    }
    g_array_append_val(files, f);
  }
  g_dir_close(d);
  g_array_sort(files, newest_first);
  return files;
}

/* Records f (verified) as run's checkpoint at epoch, with a run event. */
static em_status record(em_store *s, int64_t run, const found_file *f, int64_t epoch,
                        em_error *err) {
  char hex[65];
  int64_t size = 0;
  em_status st = em_store_file_sha256(f->path, hex, &size, err);
  if (st) return st;
  char detail[PATH_MAX + 256];
  snprintf(detail, sizeof detail,
           "checkpoint %s (%s, step %lld) was written before the process ended but not yet "
           "recorded; recorded when the run was found ended",
           f->path, f->kind, (long long)f->step);
  st = EM_SQL_BEGIN(s, err);
  if (!st)
    st = em_store_checkpoint_insert(s, run, f->step, epoch, f->path, hex, size, f->kind, NAN,
                                    true, NULL, err);
  if (!st)
    st = EM_SQL_RUN(s, err,
                    "INSERT INTO run_events (run, step, kind, detail, time) "
                    "VALUES (?, ?, 'recovered', ?, ?)",
                    "iitd", run, f->step, detail, em_store_now());
  if (!st) st = EM_SQL_COMMIT(s, err);
  if (st) em_db_rollback(s);
  return st;
}

/* The newest whole file among files (newest first), or NULL; a damaged one
 * is passed over with a warning naming it when warn. */
static const found_file *newest_whole(em_store *s, int64_t run, GArray *files, bool warn,
                                      int64_t *epoch) {
  for (guint i = 0; i < files->len; i++) {
    const found_file *f = &g_array_index(files, found_file, i);
    int64_t step = -1;
    em_error e = {0};
    if (em_checkpoint_verify(f->path, &step, epoch, &e) == EM_OK && step == f->step) return f;
    if (warn)
      em_log_msg(EM_LOG_WARNING, "registry: run %lld's checkpoint %s is not recorded: %s",
                 (long long)run, f->path, e.status ? e.msg : "its step differs from its file name");
  }
  return NULL;
}

static void free_files(GArray *files) {
  for (guint i = 0; i < files->len; i++) g_free(g_array_index(files, found_file, i).path);
  g_array_free(files, TRUE);
}

/* The run's checkpoint files newer than its newest row, newest first
 * (NULL on a registry error). */
static GArray *unrecorded_files(em_store *s, int64_t run, em_error *err) {
  int64_t newest = -1;
  if (newest_recorded(s, run, &newest, err) != EM_OK) return NULL;
  char dir[PATH_MAX + 64];
  em_store_run_checkpoint_dir(s, run, dir, sizeof dir);
  return newer_files(dir, newest, run_started(s, run));
}

char *em_store_adoptable_checkpoint(em_store *s, int64_t run) {
  em_error e = {0};
  int64_t epoch = 0;
  GArray *files = unrecorded_files(s, run, &e);
  if (!files) return NULL;
  const found_file *f = newest_whole(s, run, files, false, &epoch);
  char *path = f ? g_strdup(f->path) : NULL;
  free_files(files);
  return path;
}

em_status em_store_adopt_checkpoints(em_store *s, int64_t run, int64_t *adopted, em_error *err) {
  *adopted = -1;
  em_status st = em_store_require_writable(s, "recording a killed run's last checkpoint", err);
  GArray *files = NULL;
  if (!st && !(files = unrecorded_files(s, run, err))) st = err ? err->status : EM_ERR_IO;
  if (st) return st;
  int64_t epoch = 0;
  const found_file *f = newest_whole(s, run, files, true, &epoch);
  if (f && !(st = record(s, run, f, epoch, err))) *adopted = f->step;
  free_files(files);
  if (st) em_error_prefix(err, "recording run %lld's last checkpoint", (long long)run);
  return st;
}
