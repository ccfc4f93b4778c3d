/* datasets.c: a run's dataset identity (name, folder, total size, and the
 * SHA-256 of its files' SHA-256s in path order, "unknown" for a kind
 * without files), with a cache of
 * (path, size, mtime) -> SHA-256 so an unchanged dataset is hashed once. */
#include "store-private.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
  char *path;
  int64_t size, mtime_ns;
  char sha[65];
  bool hashed_now; /* not in the cache: recorded with the dataset */
} file_hash;

struct em_dataset_hashes {
  char *name, *path;
  file_hash *files;
  int n;
  int64_t size;
  char sha[65];
  char *files_json;
};

void em_dataset_hashes_free(em_dataset_hashes *h) {
  if (!h) return;
  for (int i = 0; i < h->n; i++) g_free(h->files[i].path);
  g_free(h->files);
  g_free(h->name);
  g_free(h->path);
  free(h->files_json); /* jansson's json_dumps: malloc */
  g_free(h);
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const file_hash *)a)->path, ((const file_hash *)b)->path);
}

static em_status cached_sha(em_store *s, file_hash *f, bool *hit, em_error *err) {
  sqlite3_stmt *q;
  bool row = false;
  em_status st = EM_SQL_PREPARE(s,
                                "SELECT sha256 FROM file_hashes "
                                "WHERE path = ? AND size = ? AND mtime_ns = ?",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "tii", f->path, f->size, f->mtime_ns);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row && sqlite3_column_bytes(q, 0) == 64)
    memcpy(f->sha, sqlite3_column_text(q, 0), 65);
  else row = false;
  if (q) sqlite3_reset(q);
  *hit = row;
  return st;
}

em_status em_dataset_hashes_compute(em_store *s, const em_dataset_identity *d,
                                    em_dataset_hashes **out, em_error *err) {
  *out = NULL;
  if (!d->name || !d->name[0] || d->n_files < 0 || (d->n_files > 0 && !d->files))
    return em_error_set(err, EM_ERR_INVALID, "dataset identity: a name and a file list are needed");
  em_dataset_hashes *h = g_new0(em_dataset_hashes, 1);
  h->name = g_strdup(d->name);
  h->path = g_strdup(d->path ? d->path : "");
  h->files = g_new0(file_hash, d->n_files > 0 ? d->n_files : 1);
  em_status st = EM_OK;
  for (int i = 0; !st && i < d->n_files; i++) {
    file_hash *f = &h->files[h->n++];
    f->path = g_strdup(d->files[i]);
    struct stat sb;
    if (stat(f->path, &sb) != 0) {
      st = em_error_set(err, EM_ERR_IO, "dataset '%s': cannot read %s: %s", d->name, f->path,
                        strerror(errno));
      break;
    }
    f->size = sb.st_size;
    f->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    bool hit = false;
    st = cached_sha(s, f, &hit, err);
    if (!st && !hit) {
      int64_t size = 0;
      st = em_store_file_sha256(f->path, f->sha, &size, err);
      f->size = size;
      f->hashed_now = true;
    }
  }
  if (!st) {
    qsort(h->files, h->n, sizeof *h->files, by_path);
    GChecksum *sum = g_checksum_new(G_CHECKSUM_SHA256);
    json_t *arr = json_array();
    for (int i = 0; i < h->n; i++) {
      g_checksum_update(sum, (const guchar *)h->files[i].sha, 64);
      h->size += h->files[i].size;
      json_array_append_new(arr, json_pack("{s:s, s:I, s:s}", "path", h->files[i].path, "size",
                                           (json_int_t)h->files[i].size, "sha256",
                                           h->files[i].sha));
    }
    /* no files (a synthetic set, a plugin's kind): nothing identifies the
     * contents, and the SHA-256 of nothing would match every such run */
    g_strlcpy(h->sha, h->n ? g_checksum_get_string(sum) : EM_DATASET_SHA_UNKNOWN,
              sizeof h->sha);
    g_checksum_free(sum);
    h->files_json = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    if (!h->files_json) st = em_error_set(err, EM_ERR_NOMEM, "dataset '%s': file list", d->name);
  }
  if (st) {
    em_dataset_hashes_free(h);
    return st;
  }
  *out = h;
  return EM_OK;
}

em_status em_dataset_hashes_record(em_store *s, const em_dataset_hashes *h, int64_t *dataset_id,
                                   em_error *err) {
  em_status st = EM_OK;
  for (int i = 0; !st && i < h->n; i++) {
    const file_hash *f = &h->files[i];
    if (f->hashed_now)
      st = EM_SQL_RUN(s, err,
                      "INSERT OR REPLACE INTO file_hashes (path, size, mtime_ns, sha256) "
                      "VALUES (?, ?, ?, ?)",
                      "tiit", f->path, f->size, f->mtime_ns, f->sha);
  }
  if (!st)
    st = EM_SQL_RUN(s, err,
                    "INSERT INTO datasets (name, path, size, sha256, files_json, created) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name, path, sha256) DO NOTHING",
                    "ttittd", h->name, h->path, h->size, h->sha, h->files_json, em_store_now());
  sqlite3_stmt *q = NULL;
  bool row = false;
  if (!st)
    st = EM_SQL_PREPARE(s, "SELECT id FROM datasets WHERE name = ? AND path = ? AND sha256 = ?",
                        &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "ttt", h->name, h->path, h->sha);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st) *dataset_id = row ? sqlite3_column_int64(q, 0) : 0;
  if (q) sqlite3_reset(q);
  return st;
}
