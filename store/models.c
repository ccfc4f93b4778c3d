/* models.c: registering a run's checkpoint as a new version of a model,
 * and listing models and versions. A version keeps its run, checkpoint,
 * spec, weights (the checkpoint's artifact and its SHA-256 at registration)
 * and the run's metrics at the checkpoint's step; pruning and run deletion
 * leave them alone. */
#include "store-private.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

em_status em_store_check_name(const char *what, const char *name, em_error *err) {
  size_t n = name ? strlen(name) : 0;
  bool ok = n > 0 && n <= 100 && name[0] != '.' && name[0] != '-';
  for (size_t i = 0; ok && i < n; i++)
    ok = g_ascii_isalnum(name[i]) || name[i] == '.' || name[i] == '_' || name[i] == '-';
  if (!ok)
    return em_error_set(err, EM_ERR_INVALID,
                        "%s name '%s' is not valid: use 1 to 100 letters, digits, '.', '_' or "
                        "'-', not starting with '.' or '-'",
                        what, name ? name : "");
  return EM_OK;
}

typedef struct {
  int64_t id, artifact, step;
  double metric;
  char kind[16];
  char path[PATH_MAX];
  char sha[65];
  int64_t size;
} picked;

#define PICK_COLUMNS                                                                   \
  "SELECT c.id, c.artifact, c.step, c.metric, c.kind, a.rel_path, a.sha256, a.size " \
  "FROM checkpoints c JOIN artifacts a ON a.id = c.artifact WHERE c.run = ?1 "

static em_status steps_available(em_store *s, int64_t run, GString *out, em_error *err) {
  sqlite3_stmt *q;
  bool row = false;
  em_status st = EM_SQL_PREPARE(s,
                                "SELECT DISTINCT step FROM checkpoints WHERE run = ? ORDER BY step",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", run);
  while (!st && !(st = EM_SQL_STEP(s, q, &row, err)) && row)
    g_string_append_printf(out, "%s%lld", out->len ? ", " : "",
                           (long long)sqlite3_column_int64(q, 0));
  if (q) sqlite3_reset(q);
  return st;
}

/* The pick's candidates in order, best first: the first is the pick, the
 * next ones are the fallbacks at the same step (an eval and a final
 * checkpoint of one step hold the same weights). */
static em_status pick_checkpoint(em_store *s, int64_t run, em_checkpoint_pick pick, int64_t step,
                                 int skip, picked *p, em_error *err) {
  sqlite3_stmt *q;
  em_status st;
  switch (pick) {
  case EM_PICK_BEST:
    /* each checkpoint ranks by its own lower_is_better (one run records
     * one kind of metric, so they agree); ties go to the later step */
    st = EM_SQL_PREPARE(s,
                        PICK_COLUMNS "AND c.kind IN ('eval', 'final') AND c.metric IS NOT NULL "
                                     "ORDER BY CASE WHEN c.lower_is_better THEN c.metric "
                                     "ELSE -c.metric END, c.step DESC, c.id DESC "
                                     "LIMIT 1 OFFSET ?3",
                        &q, err);
    break;
  case EM_PICK_LAST:
    st = EM_SQL_PREPARE(s, PICK_COLUMNS "ORDER BY c.step DESC, c.id DESC LIMIT 1 OFFSET ?3", &q,
                        err);
    break;
  case EM_PICK_STEP:
    st = EM_SQL_PREPARE(s, PICK_COLUMNS "AND c.step = ?2 ORDER BY c.id DESC LIMIT 1 OFFSET ?3",
                        &q, err);
    if (!st) st = EM_SQL_CHECK(s, sqlite3_bind_int64(q, 2, step), err);
    break;
  default: return em_error_set(err, EM_ERR_INVALID, "unknown checkpoint pick %d", (int)pick);
  }
  bool row = false;
  if (!st) st = EM_SQL_CHECK(s, sqlite3_bind_int64(q, 1, run), err);
  if (!st) st = EM_SQL_CHECK(s, sqlite3_bind_int64(q, 3, skip), err);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row) {
    p->id = sqlite3_column_int64(q, 0);
    p->artifact = sqlite3_column_int64(q, 1);
    p->step = sqlite3_column_int64(q, 2);
    p->metric = em_col_double(q, 3);
    g_strlcpy(p->kind, (const char *)sqlite3_column_text(q, 4), sizeof p->kind);
    em_store_path_from_row(s, (const char *)sqlite3_column_text(q, 5), p->path, sizeof p->path);
    g_strlcpy(p->sha, (const char *)sqlite3_column_text(q, 6), sizeof p->sha);
    p->size = sqlite3_column_int64(q, 7);
  }
  if (q) sqlite3_reset(q);
  if (st || row || skip > 0) return st; /* no fallback left: EM_OK with p->id 0 */

  GString *steps = g_string_new(NULL);
  st = steps_available(s, run, steps, err);
  if (!st) {
    if (!steps->len)
      st = em_error_set(err, EM_ERR_INVALID,
                        "run %lld has no checkpoints to register; train it with checkpoints on",
                        (long long)run);
    else if (pick == EM_PICK_BEST)
      st = em_error_set(err, EM_ERR_INVALID,
                        "run %lld has no evaluated checkpoint (kind eval or final with a metric) "
                        "to pick the best from; pick last, or a step (%s)",
                        (long long)run, steps->str);
    else
      st = em_error_set(err, EM_ERR_INVALID,
                        "run %lld has no checkpoint at step %lld; its checkpoints are at steps %s",
                        (long long)run, (long long)step, steps->str);
  }
  g_string_free(steps, TRUE);
  return st;
}

/* Each metric's value at the checkpoint (its last point at or before the
 * checkpoint's step: the weights registered were trained that far; the
 * run's last values belonged to later weights), and the checkpoint's own
 * step, kind and metric. A metric first recorded after the step is left
 * out. */
static em_status version_metrics(em_store *s, int64_t run, const picked *p, char **json,
                                 em_error *err) {
  em_metric_summary *m;
  int n;
  em_status st = em_store_metrics_summary(s, run, &m, &n, err);
  if (st) return st;
  json_t *o = json_object();
  for (int i = 0; i < n && !st; i++) {
    em_metric_point *pts = NULL;
    int64_t np = 0;
    st = em_store_metrics_get(s, run, m[i].key, &pts, &np, err);
    int64_t lo = 0, hi = np; /* the first point past the step */
    while (!st && lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (pts[mid].step <= p->step) lo = mid + 1;
      else hi = mid;
    }
    if (!st && lo > 0)
      json_object_set_new(o, m[i].key, isfinite(pts[lo - 1].value) ? json_real(pts[lo - 1].value)
                                                                   : json_null());
    free(pts);
  }
  json_object_set_new(o, "checkpoint",
                      json_pack("{s:I, s:s, s:o}", "step", (json_int_t)p->step, "kind", p->kind,
                                "metric", isfinite(p->metric) ? json_real(p->metric) : json_null()));
  char *txt = st ? NULL : json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(o);
  em_metric_summaries_free(m, n);
  if (st) return st;
  if (!txt) return em_error_set(err, EM_ERR_NOMEM, "version metrics: out of memory");
  *json = g_strdup(txt);
  free(txt);
  return EM_OK;
}

/* The pick, its file hashed against what was recorded; where the file is
 * gone or changed, another checkpoint of the same step whose file is
 * whole (an eval and a final checkpoint of one step hold the same
 * weights). Hashing happens outside the write lock. */
static em_status pick_whole_checkpoint(em_store *s, int64_t run, em_checkpoint_pick pick,
                                       int64_t step, picked *out, em_error *err) {
  picked head = {0};
  em_error first = {0};
  for (int skip = 0;; skip++) {
    picked c = {0};
    em_status st = pick_checkpoint(s, run, pick, step, skip, &c, err);
    if (st) return st;
    if (skip == 0) head = c;
    else if (c.id == 0 || c.step != head.step) break;
    char hex[65];
    int64_t size = 0;
    em_error e = {0};
    if (em_store_file_sha256(c.path, hex, &size, &e) == EM_OK) {
      if (size == c.size && strcmp(hex, c.sha) == 0) {
        *out = c;
        return EM_OK;
      }
      em_error_set(&e, EM_ERR_FORMAT,
                   "checkpoint %s (run %lld, step %lld) changed since it was recorded "
                   "(%lld bytes, SHA-256 %.12s...; recorded %lld bytes, %.12s...)",
                   c.path, (long long)run, (long long)c.step, (long long)size, hex,
                   (long long)c.size, c.sha);
    } else {
      em_error_prefix(&e, "checkpoint of run %lld at step %lld", (long long)run,
                      (long long)c.step);
    }
    if (skip == 0) first = e;
  }
  return em_error_set(err, first.status, "%s; no other checkpoint of step %lld is whole: "
                      "register another step", first.msg, (long long)head.step);
}

/* Whether the checkpoint row is still there; a query that fails counts as
 * there (the caller then reports its own error, not a prune). */
static bool checkpoint_exists(em_store *s, int64_t id) {
  sqlite3_stmt *q;
  bool row = false;
  em_error e = {0};
  if (EM_SQL_PREPARE(s, "SELECT 1 FROM checkpoints WHERE id = ?", &q, &e)) return true;
  if (!EM_SQL_BIND(s, q, &e, "i", id)) EM_SQL_STEP(s, q, &row, &e);
  sqlite3_reset(q);
  return row || e.status;
}

/* One try: the version row, in one transaction with its model's row. The
 * run may have been deleted since it was checked (INSERT ... SELECT then
 * inserts nothing: refused, not committed as a model with no version),
 * and the checkpoint pruned since it was picked (the foreign key refuses
 * the row; *pruned says so and the caller picks again). */
static em_status insert_version(em_store *s, int64_t run, const char *name, const picked *p,
                                const char *metrics, int *version, bool *pruned, em_error *err) {
  sqlite3_stmt *q = NULL;
  bool row = false;
  int64_t model = 0;
  int v = 0;
  double now = em_store_now();
  *pruned = false;
  em_status st = EM_SQL_BEGIN(s, err);
  if (!st)
    st = EM_SQL_RUN(s, err, "INSERT INTO models (name, created) VALUES (?, ?) "
                            "ON CONFLICT (name) DO NOTHING", "td", name, now);
  if (!st)
    st = EM_SQL_PREPARE(s,
                        "SELECT m.id, coalesce(max(v.version), 0) + 1 FROM models m "
                        "LEFT JOIN model_versions v ON v.model = m.id WHERE m.name = ?",
                        &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "t", name);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row) {
    model = sqlite3_column_int64(q, 0);
    v = sqlite3_column_int(q, 1);
  }
  if (q) sqlite3_reset(q);
  if (!st)
    st = EM_SQL_RUN(s, err,
                    "INSERT INTO model_versions (model, version, spec_json, weights, "
                    "weights_sha256, run, checkpoint, metrics_json, created) "
                    "SELECT ?1, ?2, spec_json, ?3, ?4, id, ?5, ?6, ?7 FROM runs WHERE id = ?8",
                    "inititdi", model, v, p->artifact, p->sha, p->id, metrics, now, run);
  bool run_gone = !st && sqlite3_changes(s->db) == 0;
  if (run_gone)
    st = em_error_set(err, EM_ERR_INVALID, "run %lld was deleted while it was being registered",
                      (long long)run);
  if (!st) st = EM_SQL_COMMIT(s, err);
  if (st) {
    em_db_rollback(s);
    *pruned = !run_gone && !checkpoint_exists(s, p->id);
  } else if (version) {
    *version = v;
  }
  return st;
}

em_status em_store_model_register(em_store *s, int64_t run, const char *name,
                                  em_checkpoint_pick pick, int64_t step, int *version,
                                  em_error *err) {
  em_status st = em_store_require_writable(s, "registering a model", err);
  if (!st) st = em_store_check_name("model", name, err);
  if (st) return st;
  /* a run still training prunes old checkpoints: one picked may be gone
   * by the time its row is written; pick again, a few times */
  enum { TRIES = 5 };
  for (int attempt = 1;; attempt++) {
    picked p = {0};
    char *metrics = NULL;
    bool pruned = false;
    st = em_store_run_require(s, run, err); /* (again: it may be deleted meanwhile) */
    if (!st) st = pick_whole_checkpoint(s, run, pick, step, &p, err);
    if (!st) st = version_metrics(s, run, &p, &metrics, err);
    if (!st) st = insert_version(s, run, name, &p, metrics, version, &pruned, err);
    g_free(metrics);
    if (!st) return EM_OK;
    if (pruned && attempt < TRIES) continue;
    if (pruned)
      em_error_set(err, EM_ERR_IO,
                   "the checkpoint picked (step %lld) was removed while it was being registered, "
                   "%d times: the run is training and keeps few checkpoints "
                   "(--keep-checkpoints); register it again, or once it has ended",
                   (long long)p.step, TRIES);
    return em_error_prefix(err, "registering run %lld as model '%s'", (long long)run, name);
  }
}

em_status em_store_model_id(em_store *s, const char *name, int64_t *id, em_error *err) {
  sqlite3_stmt *q;
  bool row = false;
  em_status st = EM_SQL_PREPARE(s, "SELECT id FROM models WHERE name = ?", &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "t", name);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row) *id = sqlite3_column_int64(q, 0);
  if (q) sqlite3_reset(q);
  if (st || row) return st;
  GString *names = g_string_new(NULL);
  st = EM_SQL_PREPARE(s, "SELECT name FROM models ORDER BY name LIMIT 20", &q, err);
  while (!st && !(st = EM_SQL_STEP(s, q, &row, err)) && row)
    g_string_append_printf(names, "%s%s", names->len ? ", " : "", sqlite3_column_text(q, 0));
  if (q) sqlite3_reset(q);
  if (!st)
    st = em_error_set(err, EM_ERR_INVALID, "no model '%s' in the registry (models: %s)",
                      name ? name : "", names->len ? names->str : "none yet; register a run first");
  g_string_free(names, TRUE);
  return st;
}

static void read_model_row(em_store *s, sqlite3_stmt *q, void *elem) {
  (void)s;
  em_model_row *m = elem;
  *m = (em_model_row){
      .name = em_col_text(q, 0),
      .versions = sqlite3_column_int(q, 1),
      .latest = sqlite3_column_int(q, 2),
      .aliases = em_col_text(q, 3),
      .created = sqlite3_column_double(q, 4),
  };
}

em_status em_store_models_list(em_store *s, em_model_row **out, int *n, em_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *q;
  em_status st = EM_SQL_PREPARE(
      s,
      "SELECT m.name, (SELECT count(*) FROM model_versions WHERE model = m.id), "
      "  (SELECT coalesce(max(version), 0) FROM model_versions WHERE model = m.id), "
      "  coalesce((SELECT group_concat(alias || '=' || version, ', ') FROM "
      "    (SELECT alias, version FROM aliases WHERE model = m.id ORDER BY alias)), ''), "
      "  m.created "
      "FROM models m ORDER BY m.name",
      &q, err);
  if (st) return st;
  em_model_row *rows = NULL;
  int count = 0;
  st = EM_SQL_COLLECT(s, q, sizeof *rows, read_model_row, &rows, &count, err);
  if (st) {
    em_model_rows_free(rows, count);
    return st;
  }
  *out = rows;
  *n = count;
  return EM_OK;
}

void em_model_rows_free(em_model_row *m, int n) {
  for (int i = 0; m && i < n; i++) {
    g_free(m[i].name);
    g_free(m[i].aliases);
  }
  g_free(m);
}

static void read_version_row(em_store *s, sqlite3_stmt *q, void *elem) {
  em_version_row *v = elem;
  char path[PATH_MAX];
  em_store_path_from_row(s, (const char *)sqlite3_column_text(q, 3), path, sizeof path);
  *v = (em_version_row){
      .version = sqlite3_column_int(q, 0),
      .run = sqlite3_column_int64(q, 1),
      .checkpoint = sqlite3_column_int64(q, 2),
      .weights_path = g_strdup(path),
      .sha256 = em_col_text(q, 4),
      .metrics_json = em_col_text(q, 5),
      .aliases = em_col_text(q, 6),
      .created = sqlite3_column_double(q, 7),
  };
}

em_status em_store_model_versions(em_store *s, const char *name, em_version_row **out, int *n,
                                  em_error *err) {
  *out = NULL;
  *n = 0;
  int64_t model = 0;
  em_status st = em_store_model_id(s, name, &model, err);
  if (st) return st;
  sqlite3_stmt *q;
  st = EM_SQL_PREPARE(s,
                      "SELECT v.version, v.run, v.checkpoint, a.rel_path, v.weights_sha256, "
                      "  v.metrics_json, "
                      "  coalesce((SELECT group_concat(alias, ', ') FROM (SELECT alias FROM "
                      "    aliases WHERE model = v.model AND version = v.version "
                      "    ORDER BY alias)), ''), "
                      "  v.created "
                      "FROM model_versions v JOIN artifacts a ON a.id = v.weights "
                      "WHERE v.model = ? ORDER BY v.version",
                      &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", model);
  if (st) return st;
  em_version_row *rows = NULL;
  int count = 0;
  st = EM_SQL_COLLECT(s, q, sizeof *rows, read_version_row, &rows, &count, err);
  if (st) {
    em_version_rows_free(rows, count);
    return st;
  }
  *out = rows;
  *n = count;
  return EM_OK;
}

void em_version_rows_free(em_version_row *v, int n) {
  for (int i = 0; v && i < n; i++) {
    g_free(v[i].weights_path);
    g_free(v[i].sha256);
    g_free(v[i].metrics_json);
    g_free(v[i].aliases);
  }
  g_free(v);
}

/* ---- a different architecture under the same name ------------------------- */

/* The parameter count of a recorded spec, -1 when it does not parse. */
static int64_t spec_params(const char *json) {
  em_error err = {0};
  em_spec *sp = json ? em_spec_parse(json, "<recorded spec>", &err) : NULL;
  int64_t n = sp ? em_spec_param_count(sp) : -1;
  em_spec_free(sp);
  return n;
}

/* Same input and nodes: the same architecture (names, types, attributes). */
static bool same_arch(const char *a, const char *b) {
  json_t *ja = a ? json_loads(a, 0, NULL) : NULL, *jb = b ? json_loads(b, 0, NULL) : NULL;
  bool same = ja && jb && json_equal(json_object_get(ja, "input"), json_object_get(jb, "input")) &&
              json_equal(json_object_get(ja, "nodes"), json_object_get(jb, "nodes"));
  json_decref(ja);
  json_decref(jb);
  return same;
}

em_status em_store_model_arch_diff(em_store *s, const char *name, int64_t run, em_arch_diff *d,
                                   em_error *err) {
  memset(d, 0, sizeof *d);
  d->run_params = d->latest_params = -1;
  em_run r = {0}, l = {0};
  em_status rs = em_store_run_get(s, run, &r, err);
  if (rs != EM_OK) return rs;
  d->run_params = spec_params(r.spec_json);
  em_version_row *v = NULL;
  int n = 0;
  em_error verr = {0};
  em_status st = EM_OK;
  if (em_store_model_versions(s, name, &v, &n, &verr) == EM_OK && n > 0) {
    const em_version_row *latest = &v[0];
    for (int i = 1; i < n; i++)
      if (v[i].version > latest->version) latest = &v[i];
    d->latest_version = latest->version;
    if ((st = em_store_run_get(s, latest->run, &l, err)) == EM_OK) {
      d->latest_params = spec_params(l.spec_json);
      d->differs = !same_arch(r.spec_json, l.spec_json);
    }
  }
  em_version_rows_free(v, n);
  em_run_clear(&r);
  em_run_clear(&l);
  return st;
}
