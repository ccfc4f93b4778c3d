/* metric-chunks.c: how metric points are stored. One row per run, key and
 * run of up to EM_METRIC_CHUNK_POINTS consecutive points, whose points
 * are a blob of (step int64, value f64, wall f64) little-endian triples in
 * ascending step order; chunks of one (run, key) never overlap. Each row
 * also keeps its point count, first and last step, min and max value and
 * last value, so lists and summaries never open a blob.
 *
 * Why: one row per point costs SQLite ~200 ns per row to read back on the
 * reference machine (1,000,000 points: 200-280 ms); a chunk is one row and
 * a memcpy, so the same load takes a few milliseconds, and writes touch a
 * few rows per commit instead of thousands.
 *
 * Writes merge: points recorded again for steps already stored (a
 * divergence rollback re-running steps) replace the stored ones, as
 * INSERT OR REPLACE on a per-point key would: the last write wins. Only
 * the chunks overlapping the new steps (and a partly filled chunk just
 * before them) are rewritten. */
#include "store-private.h"

#include <limits.h>

#include <math.h>
#include <string.h>

enum { POINT_BYTES = 24 };

static void put_u64(guchar *p, uint64_t v) {
  v = GUINT64_TO_LE(v);
  memcpy(p, &v, 8);
}

static uint64_t get_u64(const guchar *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return GUINT64_FROM_LE(v);
}

static void put_f64(guchar *p, double d) {
  uint64_t v;
  memcpy(&v, &d, 8);
  put_u64(p, v);
}

static double get_f64(const guchar *p) {
  uint64_t v = get_u64(p);
  double d;
  memcpy(&d, &v, 8);
  return d;
}

static void decode(const guchar *blob, int64_t n, em_metric_point *out) {
  for (int64_t i = 0; i < n; i++, blob += POINT_BYTES) {
    out[i].step = (int64_t)get_u64(blob);
    out[i].value = get_f64(blob + 8);
    out[i].wall = get_f64(blob + 16);
  }
}

/* Inside a transaction: writes pts[0..n) (ascending steps) as new chunks. */
static em_status write_chunks(em_store *s, int64_t run, int64_t key_id, const em_metric_point *pts,
                              size_t n, em_error *err) {
  guchar *blob = g_malloc(POINT_BYTES * EM_METRIC_CHUNK_POINTS);
  em_status st = EM_OK;
  for (size_t at = 0; !st && at < n; at += EM_METRIC_CHUNK_POINTS) {
    size_t m = MIN((size_t)EM_METRIC_CHUNK_POINTS, n - at);
    const em_metric_point *c = pts + at;
    double mn = NAN, mx = NAN;
    for (size_t i = 0; i < m; i++) {
      put_u64(blob + i * POINT_BYTES, (uint64_t)c[i].step);
      put_f64(blob + i * POINT_BYTES + 8, c[i].value);
      put_f64(blob + i * POINT_BYTES + 16, c[i].wall);
      if (!isnan(c[i].value)) {
        mn = isnan(mn) || c[i].value < mn ? c[i].value : mn;
        mx = isnan(mx) || c[i].value > mx ? c[i].value : mx;
      }
    }
    sqlite3_stmt *q;
    st = EM_SQL_PREPARE(s,
                        "INSERT INTO metric_chunks (run, key_id, first_step, last_step, n, "
                        "min_value, max_value, last_value, last_wall, points) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        &q, err);
    if (!st)
      st = EM_SQL_BIND(s, q, err, "iiiiidddd", run, key_id, c[0].step, c[m - 1].step, (int64_t)m, mn,
                       mx, c[m - 1].value, c[m - 1].wall);
    if (!st)
      st = EM_SQL_CHECK(s, sqlite3_bind_blob(q, 10, blob, (int)(m * POINT_BYTES), SQLITE_STATIC),
                        err);
    bool row;
    if (!st) st = EM_SQL_STEP(s, q, &row, err);
    if (q) sqlite3_reset(q);
  }
  g_free(blob);
  return st;
}

em_status em_metric_chunks_write_new(em_store *s, int64_t run, int64_t key_id,
                                     const em_metric_point *pts, size_t n, em_error *err) {
  return write_chunks(s, run, key_id, pts, n, err);
}

em_status em_metric_chunks_merge(em_store *s, int64_t run, int64_t key_id,
                                 const em_metric_point *pts, size_t n, em_error *err) {
  if (n == 0) return EM_OK;
  /* the chunks overlapping [first, last] of the new points, and the chunk
   * just before them when it has room to take some */
  sqlite3_stmt *q;
  em_status st = EM_SQL_PREPARE(
      s,
      "SELECT id, last_step, n, points FROM metric_chunks "
      "WHERE run = ?1 AND key_id = ?2 AND first_step <= ?4 AND first_step >= "
      "  coalesce((SELECT max(first_step) FROM metric_chunks "
      "            WHERE run = ?1 AND key_id = ?2 AND first_step <= ?3), ?3) "
      "ORDER BY first_step",
      &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "iiii", run, key_id, pts[0].step, pts[n - 1].step);
  if (st) return st;
  GArray *old = g_array_new(FALSE, FALSE, sizeof(em_metric_point));
  GArray *ids = g_array_new(FALSE, FALSE, sizeof(int64_t));
  bool row = false, first = true;
  while (!(st = EM_SQL_STEP(s, q, &row, err)) && row) {
    int64_t id = sqlite3_column_int64(q, 0), last = sqlite3_column_int64(q, 1);
    int64_t cn = sqlite3_column_int64(q, 2);
    bool before = first && last < pts[0].step;
    first = false;
    if (before && cn >= EM_METRIC_CHUNK_POINTS) continue; /* full and untouched */
    const guchar *blob = sqlite3_column_blob(q, 3);
    if (sqlite3_column_bytes(q, 3) != cn * POINT_BYTES || !blob) {
      st = em_error_set(err, EM_ERR_FORMAT,
                        "registry %s: a metric chunk of run %lld is damaged (%d bytes for %lld "
                        "points); restore a backup",
                        s->db_path, (long long)run, sqlite3_column_bytes(q, 3), (long long)cn);
      break;
    }
    guint at = old->len;
    g_array_set_size(old, at + (guint)cn);
    decode(blob, cn, &g_array_index(old, em_metric_point, at));
    g_array_append_val(ids, id);
  }
  sqlite3_reset(q);
  for (guint i = 0; !st && i < ids->len; i++)
    st = EM_SQL_RUN(s, err, "DELETE FROM metric_chunks WHERE id = ?", "i",
                    g_array_index(ids, int64_t, i));
  if (!st) {
    /* merge by step; the new point wins a tie */
    const em_metric_point *o = (const em_metric_point *)old->data;
    size_t no = old->len, i = 0, j = 0, k = 0;
    em_metric_point *m = g_new(em_metric_point, no + n);
    while (i < no || j < n) {
      if (j < n && (i >= no || pts[j].step <= o[i].step)) {
        if (i < no && o[i].step == pts[j].step) i++;
        m[k++] = pts[j++];
      } else {
        m[k++] = o[i++];
      }
    }
    st = write_chunks(s, run, key_id, m, k, err);
    g_free(m);
  }
  g_array_free(old, TRUE);
  g_array_free(ids, TRUE);
  return st;
}

em_status em_metric_chunks_read(em_store *s, int64_t run, int64_t key_id, em_metric_point **pts,
                                int64_t *n, em_error *err) {
  *pts = NULL;
  *n = 0;
  sqlite3_stmt *q;
  em_status st = EM_SQL_PREPARE(s,
                                "SELECT n, points FROM metric_chunks "
                                "WHERE run = ? AND key_id = ? ORDER BY first_step",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "ii", run, key_id);
  if (st) return st;
  int64_t cap = 0, count = 0;
  em_metric_point *p = NULL;
  bool row = false;
  while (!(st = EM_SQL_STEP(s, q, &row, err)) && row) {
    int64_t cn = sqlite3_column_int64(q, 0);
    const guchar *blob = sqlite3_column_blob(q, 1);
    if (cn < 0 || cn > INT_MAX / POINT_BYTES ||
        sqlite3_column_bytes(q, 1) != cn * POINT_BYTES || (cn && !blob)) {
      st = em_error_set(err, EM_ERR_FORMAT,
                        "registry %s: a metric chunk of run %lld is damaged (%d bytes for %lld "
                        "points); restore a backup",
                        s->db_path, (long long)run, sqlite3_column_bytes(q, 1), (long long)cn);
      break;
    }
    if (count + cn > cap) {
      cap = MAX(cap * 2, count + cn + 4 * EM_METRIC_CHUNK_POINTS);
      em_metric_point *np = g_try_renew(em_metric_point, p, cap);
      if (!np) {
        st = em_error_set(err, EM_ERR_NOMEM, "metrics of run %lld: out of memory for %lld points",
                          (long long)run, (long long)cap);
        break;
      }
      p = np;
    }
    decode(blob, cn, p + count);
    count += cn;
  }
  sqlite3_reset(q);
  if (st) {
    g_free(p);
    return st;
  }
  *pts = p;
  *n = count;
  return EM_OK;
}
