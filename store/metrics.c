/* metrics.c: metric keys, and reading a run's metrics: all points of a
 * key (from its chunks, see metric-chunks.c), and per-key summaries from
 * the chunks' counts, minima, maxima and last values. */
#include "store-private.h"

#include <math.h>
#include <string.h>

em_status em_store_metric_key_id(em_store *s, const char *key, bool create, int64_t *id,
                                 em_error *err) {
  sqlite3_stmt *q;
  bool row = false;
  em_status st = EM_SQL_PREPARE(s, "SELECT id FROM metric_keys WHERE key = ?", &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "t", key);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  *id = !st && row ? sqlite3_column_int64(q, 0) : 0;
  if (q) sqlite3_reset(q);
  if (st || row || !create) return st;
  st = EM_SQL_RUN(s, err, "INSERT INTO metric_keys (key) VALUES (?)", "t", key);
  if (!st) *id = sqlite3_last_insert_rowid(s->db);
  return st;
}

em_status em_store_metrics_get(em_store *s, int64_t run, const char *key, em_metric_point **pts,
                               int64_t *n, em_error *err) {
  *pts = NULL;
  *n = 0;
  if (!key || !key[0]) return em_error_set(err, EM_ERR_INVALID, "metrics: no key given");
  int64_t key_id = 0;
  em_status st = em_store_run_require(s, run, err);
  if (!st) st = em_store_metric_key_id(s, key, false, &key_id, err);
  if (st || !key_id) return st;
  return em_metric_chunks_read(s, run, key_id, pts, n, err);
}

static void read_metric_summary(em_store *s, sqlite3_stmt *q, void *elem) {
  (void)s;
  em_metric_summary *m = elem;
  *m = (em_metric_summary){
      .key = em_col_text(q, 0),
      .count = sqlite3_column_int64(q, 1),
      .min = em_col_double(q, 2),
      .max = em_col_double(q, 3),
      .last_step = sqlite3_column_int64(q, 4),
      .last = em_col_double(q, 5),
  };
}

em_status em_store_metrics_summary(em_store *s, int64_t run, em_metric_summary **out, int *n,
                                   em_error *err) {
  *out = NULL;
  *n = 0;
  em_status st = em_store_run_require(s, run, err);
  if (st) return st;
  sqlite3_stmt *q;
  st = EM_SQL_PREPARE(s,
                      "SELECT k.key, g.cnt, g.mn, g.mx, g.last_step, "
                      "  (SELECT last_value FROM metric_chunks WHERE run = ?1 "
                      "   AND key_id = g.key_id ORDER BY first_step DESC LIMIT 1) "
                      "FROM (SELECT key_id, sum(n) AS cnt, min(min_value) AS mn, "
                      "        max(max_value) AS mx, max(last_step) AS last_step "
                      "      FROM metric_chunks WHERE run = ?1 GROUP BY key_id) g "
                      "JOIN metric_keys k ON k.id = g.key_id ORDER BY k.key",
                      &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", run);
  if (st) return st;
  em_metric_summary *res = NULL;
  int count = 0;
  st = EM_SQL_COLLECT(s, q, sizeof *res, read_metric_summary, &res, &count, err);
  if (st) {
    em_metric_summaries_free(res, count);
    return st;
  }
  *out = res;
  *n = count;
  return EM_OK;
}

void em_metric_summaries_free(em_metric_summary *m, int n) {
  for (int i = 0; m && i < n; i++) g_free(m[i].key);
  g_free(m);
}
