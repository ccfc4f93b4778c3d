/* checkpoints.c: checkpoint rows (each with its artifact row: file, size,
 * SHA-256), pruning, and finding the newest intact one to resume from.
 *
 * Pruning keeps the newest keep_last, the best by metric among the "eval"
 * and "final" checkpoints, and every checkpoint a model version refers to.
 * Whether lower is better is stored per checkpoint (the trainer knows what
 * its metric is: a loss or an accuracy); pruning and "register best" rank
 * by it. Rows are deleted and committed before their files are unlinked,
 * so a crash leaves at worst an orphan file, which gc removes. */
#include "store-private.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool kind_known(const char *kind) {
  static const char *const kinds[] = {"step", "eval", "final", "rollback"};
  for (unsigned i = 0; kind && i < G_N_ELEMENTS(kinds); i++)
    if (strcmp(kind, kinds[i]) == 0) return true;
  return false;
}

em_status em_store_checkpoint_insert(em_store *s, int64_t run, int64_t step, int64_t epoch,
                                     const char *abs_path, const char *sha256, int64_t size,
                                     const char *kind, double metric, bool lower_is_better,
                                     int64_t *id, em_error *err) {
  if (!kind_known(kind))
    return em_error_set(err, EM_ERR_INVALID,
                        "checkpoint %s: unknown kind '%s'; use step, eval, final or rollback",
                        abs_path, kind ? kind : "(null)");
  char rel[PATH_MAX];
  em_store_path_to_row(s, abs_path, rel, sizeof rel);
  sqlite3_stmt *q;
  bool row = false;
  /* A path recorded before was overwritten: the row follows the file. */
  em_status st = EM_SQL_PREPARE(s,
                                "INSERT INTO artifacts (rel_path, kind, sha256, size, run, created) "
                                "VALUES (?, 'checkpoint', ?, ?, ?, ?) "
                                "ON CONFLICT (rel_path) DO UPDATE SET kind = excluded.kind, "
                                "sha256 = excluded.sha256, size = excluded.size, "
                                "run = excluded.run, created = excluded.created "
                                "RETURNING id",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "ttiid", rel, sha256, size, run, em_store_now());
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  int64_t art = !st && row ? sqlite3_column_int64(q, 0) : 0;
  if (!st && row) st = EM_SQL_STEP(s, q, &row, err);
  if (q) sqlite3_reset(q);
  if (st) return st;
  /* checkpoint rows that described the old content of that file go,
   * unless a version refers to them */
  st = EM_SQL_RUN(s, err,
                  "DELETE FROM checkpoints WHERE artifact = ?1 AND NOT EXISTS "
                  "(SELECT 1 FROM model_versions v WHERE v.checkpoint = checkpoints.id)",
                  "i", art);
  if (!st)
    st = EM_SQL_RUN(s, err,
                    "INSERT INTO checkpoints (run, artifact, step, epoch, kind, metric, "
                    "lower_is_better, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    "iiiitdnd", run, art, step, epoch, kind, metric, (int)lower_is_better,
                    em_store_now());
  if (!st && id) *id = sqlite3_last_insert_rowid(s->db);
  return st;
}

em_status em_store_artifact_drop_if_unused(em_store *s, int64_t a, GPtrArray *unlink,
                                           em_error *err) {
  sqlite3_stmt *q;
  bool row = false;
  em_status st = EM_SQL_PREPARE(s,
                                "DELETE FROM artifacts WHERE id = ?1 "
                                "AND NOT EXISTS (SELECT 1 FROM checkpoints WHERE artifact = ?1) "
                                "AND NOT EXISTS (SELECT 1 FROM model_versions WHERE weights = ?1) "
                                "RETURNING rel_path",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", a);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row) {
    const char *rel = (const char *)sqlite3_column_text(q, 0);
    char path[PATH_MAX];
    em_store_path_from_row(s, rel ? rel : "", path, sizeof path);
    /* Ember records its checkpoints under artifacts/: a row that points
     * elsewhere (absolute, or up through "..") was not written by it, and
     * the file is not the registry's to remove. */
    if (rel && em_store_row_path_inside(rel)) g_ptr_array_add(unlink, g_strdup(path));
    else
      em_log_msg(EM_LOG_WARNING, "registry: %s is not removed with its row: it lies outside "
                 "the registry's artifacts folder", path);
    st = EM_SQL_STEP(s, q, &row, err);
  }
  if (q) sqlite3_reset(q);
  return st;
}

em_status em_store_checkpoints_prune(em_store *s, int64_t run, int keep_last,
                                     bool lower_is_better, GPtrArray *unlink, em_error *err) {
  if (keep_last < 1) keep_last = 1;
  sqlite3_stmt *q;
  bool row = false;
  int64_t best = 0;
  em_status st = EM_SQL_PREPARE(s,
                                "SELECT id FROM checkpoints WHERE run = ?1 "
                                "AND kind IN ('eval', 'final') AND metric IS NOT NULL "
                                "ORDER BY CASE WHEN ?2 THEN metric ELSE -metric END, "
                                "step DESC, id DESC LIMIT 1",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "in", run, (int)lower_is_better);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row) best = sqlite3_column_int64(q, 0);
  if (q) sqlite3_reset(q);
  if (st) return st;

  /* past the newest keep_last: not the best, not referred to by a version */
  typedef struct {
    int64_t id, artifact;
  } victim;
  GArray *victims = g_array_new(FALSE, FALSE, sizeof(victim));
  st = EM_SQL_PREPARE(s,
                      "SELECT c.id, c.artifact FROM checkpoints c WHERE c.run = ?1 "
                      "AND c.id IN (SELECT id FROM checkpoints WHERE run = ?1 "
                      "             ORDER BY step DESC, id DESC LIMIT -1 OFFSET ?2) "
                      "AND c.id != ?3 "
                      "AND NOT EXISTS (SELECT 1 FROM model_versions v WHERE v.checkpoint = c.id)",
                      &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "ini", run, keep_last, best);
  while (!st && !(st = EM_SQL_STEP(s, q, &row, err)) && row) {
    victim v = {sqlite3_column_int64(q, 0), sqlite3_column_int64(q, 1)};
    g_array_append_val(victims, v);
  }
  if (q) sqlite3_reset(q);
  for (guint i = 0; !st && i < victims->len; i++) {
    victim *v = &g_array_index(victims, victim, i);
    st = EM_SQL_RUN(s, err, "DELETE FROM checkpoints WHERE id = ?", "i", v->id);
    if (!st) st = em_store_artifact_drop_if_unused(s, v->artifact, unlink, err);
  }
  g_array_free(victims, TRUE);
  return st;
}

void em_store_unlink_files(GPtrArray *paths) {
  for (guint i = 0; paths && i < paths->len; i++) {
    const char *p = g_ptr_array_index(paths, i);
    if (unlink(p) != 0 && errno != ENOENT)
      em_log_msg(EM_LOG_WARNING, "registry: cannot remove %s: %s (ember gc will retry)", p,
                 strerror(errno));
  }
}

static void read_checkpoint_row(em_store *s, sqlite3_stmt *q, void *elem) {
  em_checkpoint_row *c = elem;
  char path[PATH_MAX];
  em_store_path_from_row(s, (const char *)sqlite3_column_text(q, 4), path, sizeof path);
  *c = (em_checkpoint_row){
      .id = sqlite3_column_int64(q, 0),
      .run = sqlite3_column_int64(q, 1),
      .step = sqlite3_column_int64(q, 2),
      .epoch = sqlite3_column_int64(q, 3),
      .path = g_strdup(path),
      .sha256 = em_col_text(q, 5),
      .size = sqlite3_column_int64(q, 6),
      .kind = em_col_text(q, 7),
      .metric = em_col_double(q, 8),
      .created = sqlite3_column_double(q, 9),
  };
}

em_status em_store_checkpoints_list(em_store *s, int64_t run, em_checkpoint_row **out, int *n,
                                    em_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *q;
  em_status st = EM_SQL_PREPARE(s,
                                "SELECT c.id, c.run, c.step, c.epoch, a.rel_path, a.sha256, "
                                "a.size, c.kind, c.metric, c.created "
                                "FROM checkpoints c JOIN artifacts a ON a.id = c.artifact "
                                "WHERE c.run = ? ORDER BY c.step, c.id",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", run);
  if (st) return st;
  em_checkpoint_row *rows = NULL;
  int count = 0;
  st = EM_SQL_COLLECT(s, q, sizeof *rows, read_checkpoint_row, &rows, &count, err);
  if (st) {
    em_checkpoint_rows_free(rows, count);
    return st;
  }
  *out = rows;
  *n = count;
  return EM_OK;
}

void em_checkpoint_row_clear(em_checkpoint_row *c) {
  if (!c) return;
  g_free(c->path);
  g_free(c->sha256);
  g_free(c->kind);
  memset(c, 0, sizeof *c);
}

void em_checkpoint_rows_free(em_checkpoint_row *c, int n) {
  for (int i = 0; c && i < n; i++) em_checkpoint_row_clear(&c[i]);
  g_free(c);
}

/* The file exists, and its size and SHA-256 are the recorded ones. */
static bool checkpoint_intact(const em_checkpoint_row *c, char *why, size_t cap) {
  struct stat sb;
  if (stat(c->path, &sb) != 0) {
    g_snprintf(why, cap, "missing (%s)", strerror(errno));
    return false;
  }
  if ((int64_t)sb.st_size != c->size) {
    g_snprintf(why, cap, "%lld bytes, recorded %lld", (long long)sb.st_size, (long long)c->size);
    return false;
  }
  char hex[65];
  em_error e = {0};
  if (em_store_file_sha256(c->path, hex, NULL, &e)) {
    g_snprintf(why, cap, "%s", e.msg);
    return false;
  }
  if (!c->sha256 || strcmp(hex, c->sha256) != 0) {
    g_snprintf(why, cap, "SHA-256 %.12s..., recorded %.12s...", hex, c->sha256 ? c->sha256 : "");
    return false;
  }
  return true;
}

em_status em_store_checkpoint_latest_valid(em_store *s, int64_t run, em_checkpoint_row *out,
                                           em_error *err) {
  memset(out, 0, sizeof *out);
  em_checkpoint_row *rows;
  int n;
  em_status st = em_store_run_require(s, run, err);
  if (!st) st = em_store_checkpoints_list(s, run, &rows, &n, err);
  if (st) return st;
  int found = -1;
  for (int i = n - 1; i >= 0 && found < 0; i--) {
    char why[512];
    if (checkpoint_intact(&rows[i], why, sizeof why)) found = i;
    else
      em_log_msg(EM_LOG_WARNING,
                 "registry: checkpoint %s (run %lld, step %lld) is damaged: %s; trying an older one",
                 rows[i].path, (long long)run, (long long)rows[i].step, why);
  }
  if (found >= 0) {
    *out = rows[found];
    memset(&rows[found], 0, sizeof rows[found]);
  } else if (n == 0) {
    st = em_error_set(err, EM_ERR_INVALID,
                      "run %lld has no checkpoints; it cannot be resumed (train with checkpoints on)",
                      (long long)run);
  } else {
    st = em_error_set(err, EM_ERR_FORMAT,
                      "run %lld: none of its %d checkpoints is intact (all missing or changed "
                      "since they were recorded); it cannot be resumed",
                      (long long)run, n);
  }
  em_checkpoint_rows_free(rows, n);
  return st;
}
