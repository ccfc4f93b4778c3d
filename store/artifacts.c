/* artifacts.c: files the registry keeps under artifacts/ (checkpoints,
 * exports), each recorded with its size and SHA-256, and gc, which removes
 * files there that no row refers to. */
#include "store-private.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* gc leaves files younger than this: a run may have written a checkpoint
 * that its writer has not recorded yet. */
#define GC_MIN_AGE_S 300.0

em_status em_store_artifact_add(em_store *s, const char *abs_path, const char *kind, int64_t run,
                                int64_t *artifact_id, em_error *err) {
  em_status st = em_store_require_writable(s, "recording an artifact", err);
  if (st) return st;
  if (!abs_path || !kind || !kind[0])
    return em_error_set(err, EM_ERR_INVALID, "recording an artifact: a path and a kind are needed");
  char hex[65], rel[PATH_MAX];
  int64_t size = 0;
  st = em_store_file_sha256(abs_path, hex, &size, err);
  if (st) return st;
  if (run) st = em_store_run_require(s, run, err);
  if (st) return st;
  em_store_path_to_row(s, abs_path, rel, sizeof rel);
  sqlite3_stmt *q = NULL;
  bool row = false;
  st = EM_SQL_BEGIN(s, err);
  if (!st)
    st = EM_SQL_PREPARE(s,
                        "INSERT INTO artifacts (rel_path, kind, sha256, size, run, created) "
                        "VALUES (?, ?, ?, ?, ?, ?) "
                        "ON CONFLICT (rel_path) DO UPDATE SET kind = excluded.kind, "
                        "sha256 = excluded.sha256, size = excluded.size, run = excluded.run, "
                        "created = excluded.created RETURNING id",
                        &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "tttizd", rel, kind, hex, size, run, em_store_now());
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row && artifact_id) *artifact_id = sqlite3_column_int64(q, 0);
  if (!st && row) st = EM_SQL_STEP(s, q, &row, err);
  if (q) sqlite3_reset(q);
  if (!st) st = EM_SQL_COMMIT(s, err);
  if (st) em_db_rollback(s);
  return st;
}

static void read_artifact(em_store *s, sqlite3_stmt *q, void *elem) {
  em_artifact *a = elem;
  char path[PATH_MAX];
  em_store_path_from_row(s, (const char *)sqlite3_column_text(q, 1), path, sizeof path);
  *a = (em_artifact){
      .id = sqlite3_column_int64(q, 0),
      .path = g_strdup(path),
      .kind = em_col_text(q, 2),
      .sha256 = em_col_text(q, 3),
      .size = sqlite3_column_int64(q, 4),
      .run = sqlite3_column_int64(q, 5),
      .created = sqlite3_column_double(q, 6),
  };
}

em_status em_store_artifacts_list(em_store *s, int64_t run, em_artifact **out, int *n,
                                  em_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *q;
  em_status st = EM_SQL_PREPARE(s,
                                "SELECT id, rel_path, kind, sha256, size, run, created "
                                "FROM artifacts WHERE ?1 = 0 OR run = ?1 ORDER BY id",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", run);
  if (st) return st;
  em_artifact *res = NULL;
  int count = 0;
  st = EM_SQL_COLLECT(s, q, sizeof *res, read_artifact, &res, &count, err);
  if (st) {
    em_artifacts_free(res, count);
    return st;
  }
  *out = res;
  *n = count;
  return EM_OK;
}

void em_artifacts_free(em_artifact *a, int n) {
  for (int i = 0; a && i < n; i++) {
    g_free(a[i].path);
    g_free(a[i].kind);
    g_free(a[i].sha256);
  }
  g_free(a);
}

typedef struct {
  GHashTable *known; /* rel paths with a row */
  bool dry_run;
  double now;
  em_gc_report *rep;
} gc_walk;

static void gc_dir(gc_walk *w, const char *abs, const char *rel) {
  DIR *d = opendir(abs);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *child = g_build_filename(abs, e->d_name, NULL);
    char *child_rel = rel[0] ? g_build_filename(rel, e->d_name, NULL) : g_strdup(e->d_name);
    struct stat sb;
    if (lstat(child, &sb) == 0) {
      if (S_ISDIR(sb.st_mode)) gc_dir(w, child, child_rel);
      else if (S_ISREG(sb.st_mode) && !g_hash_table_contains(w->known, child_rel)) {
        double mtime = (double)sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec * 1e-9;
        if (w->now - mtime < GC_MIN_AGE_S) w->rep->files_too_new++;
        else if (w->dry_run || unlink(child) == 0) {
          w->rep->files_removed++;
          w->rep->bytes_removed += sb.st_size;
        } else {
          em_log_msg(EM_LOG_WARNING, "registry gc: cannot remove %s: %s", child, strerror(errno));
        }
      }
    }
    g_free(child);
    g_free(child_rel);
  }
  closedir(d);
}

em_status em_store_gc(em_store *s, bool dry_run, em_gc_report *out, em_error *err) {
  memset(out, 0, sizeof *out);
  if (!dry_run) {
    em_status st = em_store_require_writable(s, "gc", err);
    if (st) return st;
  }
  GHashTable *known = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  sqlite3_stmt *q;
  bool row = false;
  /* A read transaction over the listing and the walk would not stop a
   * writer recording a new file meanwhile; the age rule covers that. */
  em_status st = EM_SQL_PREPARE(s, "SELECT rel_path FROM artifacts", &q, err);
  while (!st && !(st = EM_SQL_STEP(s, q, &row, err)) && row) {
    const char *rel = (const char *)sqlite3_column_text(q, 0);
    char path[PATH_MAX];
    em_store_path_from_row(s, rel, path, sizeof path);
    if (access(path, F_OK) != 0 && out->rows_missing_file++ == 0)
      g_strlcpy(out->first_missing, path, sizeof out->first_missing);
    g_hash_table_add(known, g_strdup(rel));
  }
  if (q) sqlite3_reset(q);
  /* A dry run reads the registry without writing (it works on a read-only
   * copy too), so runs whose process ended are not swept yet: the real gc
   * records such a run's newest whole checkpoint first (checkpoint-adopt.c),
   * and that one is counted apart, not as removable. */
  GArray *ended = NULL;
  if (!st && s->read_only) st = em_store_ended_runs(s, &ended, err);
  for (guint i = 0; !st && ended && i < ended->len; i++) {
    char *path = em_store_adoptable_checkpoint(s, g_array_index(ended, em_ended_run, i).id);
    char rel[PATH_MAX];
    if (path) {
      em_store_path_to_row(s, path, rel, sizeof rel);
      if (!g_hash_table_contains(known, rel)) out->files_to_record++;
      g_hash_table_add(known, g_strdup(rel));
    }
    g_free(path);
  }
  if (ended) g_array_free(ended, TRUE);
  if (!st) {
    gc_walk w = {known, dry_run, em_store_now(), out};
    gc_dir(&w, s->art_dir, "");
  }
  g_hash_table_destroy(known);
  return st;
}
