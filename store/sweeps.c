/* sweeps.c: sweeps and their trials in the registry (em-sweeps.h). */
#include "em-sweeps.h"
#include "store-private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const sweep_names[] = {"running", "paused", "completed", "cancelled"};
static const char *const trial_names[] = {"pending", "running", "completed", "failed", "pruned",
                                          "cancelled"};

const char *em_sweep_status_name(em_sweep_status s) {
  return (unsigned)s < 4 ? sweep_names[s] : "?";
}
const char *em_trial_status_name(em_trial_status s) {
  return (unsigned)s < 6 ? trial_names[s] : "?";
}

static int index_of(const char *const *names, int n, const char *s) {
  for (int i = 0; s && i < n; i++)
    if (!strcmp(names[i], s)) return i;
  return 0;
}

em_status em_store_sweep_create(em_store *s, const char *name, const char *description_json,
                                int64_t *id, em_error *err) {
  em_status st = em_store_require_writable(s, "starting a sweep", err);
  if (!st)
    st = EM_SQL_RUN(s, err, "INSERT INTO sweeps (name, description_json, status, runner_pid, "
                    "runner_host, created) VALUES (?, ?, 'running', ?, ?, ?)", "ttitd",
                    name ? name : "", description_json, (int64_t)getpid(), em_store_host(),
                    em_store_now());
  if (!st) *id = sqlite3_last_insert_rowid(s->db);
  return st;
}

static void read_sweep(em_store *s, sqlite3_stmt *q, void *elem) {
  (void)s;
  em_sweep_row *r = elem;
  *r = (em_sweep_row){
      .id = sqlite3_column_int64(q, 0),
      .name = em_col_text(q, 1),
      .description_json = em_col_text(q, 2),
      .status = index_of(sweep_names, 4, (const char *)sqlite3_column_text(q, 3)),
      .runner_pid = sqlite3_column_int64(q, 4),
      .runner_host = em_col_text(q, 5),
      .created = sqlite3_column_double(q, 6),
      .ended = sqlite3_column_double(q, 7),
  };
}

#define SWEEP_COLS "id, name, description_json, status, runner_pid, runner_host, created, ended"

em_status em_store_sweeps_list(em_store *s, em_sweep_row **out, int *n, em_error *err) {
  sqlite3_stmt *q;
  *out = NULL;
  *n = 0;
  em_status st = EM_SQL_PREPARE(s, "SELECT " SWEEP_COLS " FROM sweeps ORDER BY id", &q, err);
  if (!st) st = EM_SQL_COLLECT(s, q, sizeof **out, read_sweep, out, n, err);
  return st;
}

em_status em_store_sweep_get(em_store *s, int64_t id, em_sweep_row *out, em_error *err) {
  memset(out, 0, sizeof *out);
  sqlite3_stmt *q;
  em_sweep_row *rows = NULL;
  int n = 0;
  em_status st = EM_SQL_PREPARE(s, "SELECT " SWEEP_COLS " FROM sweeps WHERE id = ?", &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", id);
  if (!st) st = EM_SQL_COLLECT(s, q, sizeof *rows, read_sweep, &rows, &n, err);
  if (!st && n == 0)
    st = em_error_set(err, EM_ERR_INVALID, "no sweep %lld in the registry ('ember sweep list' "
                      "shows them)", (long long)id);
  if (!st) {
    *out = rows[0];
    memset(&rows[0], 0, sizeof rows[0]);
  }
  em_sweep_rows_free(rows, n);
  return st;
}

void em_sweep_row_clear(em_sweep_row *r) {
  g_free(r->name);
  g_free(r->description_json);
  g_free(r->runner_host);
  memset(r, 0, sizeof *r);
}

void em_sweep_rows_free(em_sweep_row *r, int n) {
  for (int i = 0; r && i < n; i++) em_sweep_row_clear(&r[i]);
  g_free(r);
}

em_status em_store_sweep_set_status(em_store *s, int64_t id, em_sweep_status st_, em_error *err) {
  bool done = st_ == EM_SWEEP_COMPLETED || st_ == EM_SWEEP_CANCELLED;
  return EM_SQL_RUN(s, err, "UPDATE sweeps SET status = ?, ended = ? WHERE id = ?", "tdi",
                    sweep_names[st_], done ? em_store_now() : NAN, id);
}

em_status em_store_sweep_set_runner(em_store *s, int64_t id, int64_t pid, em_error *err) {
  return EM_SQL_RUN(s, err, "UPDATE sweeps SET runner_pid = ?, runner_host = ? WHERE id = ?",
                    "iti", pid, em_store_host(), id);
}

em_status em_store_trial_add(em_store *s, int64_t sweep, int number, const char *params_json,
                             const char *run_name, em_error *err) {
  return EM_SQL_RUN(s, err, "INSERT INTO sweep_trials (sweep, number, params_json, run_name, "
                    "status, created) VALUES (?, ?, ?, ?, 'pending', ?)", "inttd", sweep, number,
                    params_json, run_name, em_store_now());
}

static void read_trial(em_store *s, sqlite3_stmt *q, void *elem) {
  (void)s;
  em_trial_row *t = elem;
  *t = (em_trial_row){
      .id = sqlite3_column_int64(q, 0),
      .sweep = sqlite3_column_int64(q, 1),
      .number = sqlite3_column_int(q, 2),
      .params_json = em_col_text(q, 3),
      .run_name = em_col_text(q, 4),
      .run = sqlite3_column_int64(q, 5),
      .status = index_of(trial_names, 6, (const char *)sqlite3_column_text(q, 6)),
      .metric = sqlite3_column_type(q, 7) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 7),
      .epochs = sqlite3_column_int(q, 8),
      .steps = sqlite3_column_int64(q, 9),
      .decision = em_col_text(q, 10),
      .created = sqlite3_column_double(q, 11),
      .ended = sqlite3_column_double(q, 12),
      .pid = sqlite3_column_int64(q, 13),
  };
}

em_status em_store_trials_list(em_store *s, int64_t sweep, em_trial_row **out, int *n,
                               em_error *err) {
  sqlite3_stmt *q;
  *out = NULL;
  *n = 0;
  em_status st = EM_SQL_PREPARE(s, "SELECT id, sweep, number, params_json, run_name, run, status, "
                                "metric, epochs, steps, decision, created, ended, pid FROM "
                                "sweep_trials WHERE sweep = ? ORDER BY number", &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "i", sweep);
  if (!st) st = EM_SQL_COLLECT(s, q, sizeof **out, read_trial, out, n, err);
  return st;
}

void em_trial_rows_free(em_trial_row *t, int n) {
  for (int i = 0; t && i < n; i++) {
    g_free(t[i].params_json);
    g_free(t[i].run_name);
    g_free(t[i].decision);
  }
  g_free(t);
}

em_status em_store_trial_update(em_store *s, int64_t sweep, int number, em_trial_status st_,
                                int64_t run, double metric, int epochs, int64_t steps,
                                const char *decision, em_error *err) {
  bool done = st_ >= EM_TRIAL_COMPLETED;
  em_status st = EM_SQL_RUN(s, err, "UPDATE sweep_trials SET status = ?, run = ?, metric = ?, "
                            "epochs = ?, steps = ?, ended = ? WHERE sweep = ? AND number = ?",
                            "tzdnidin", trial_names[st_], run, metric, epochs, steps,
                            done ? em_store_now() : NAN, sweep, number);
  if (!st && decision)
    st = EM_SQL_RUN(s, err, "UPDATE sweep_trials SET decision = ? WHERE sweep = ? AND number = ?",
                    "tin", decision, sweep, number);
  return st;
}

em_status em_store_trial_set_pid(em_store *s, int64_t sweep, int number, int64_t pid,
                                 em_error *err) {
  return EM_SQL_RUN(s, err, "UPDATE sweep_trials SET pid = ? WHERE sweep = ? AND number = ?",
                    "iin", pid, sweep, number);
}

em_status em_store_run_by_name(em_store *s, const char *name, int64_t *run, em_error *err) {
  *run = 0;
  sqlite3_stmt *q;
  bool row = false;
  em_status st = EM_SQL_PREPARE(s, "SELECT id FROM runs WHERE name = ? ORDER BY id DESC LIMIT 1",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "t", name);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row) *run = sqlite3_column_int64(q, 0);
  if (q) sqlite3_reset(q);
  return st;
}

em_status em_store_run_metric_series(em_store *s, int64_t run, const char *key, double **values,
                                     int *n, int64_t *last_step, em_error *err) {
  em_metric_point *pts = NULL;
  int64_t np = 0;
  *values = NULL;
  *n = 0;
  *last_step = 0;
  em_status st = em_store_metrics_get(s, run, key, &pts, &np, err);
  if (st == EM_OK && np > 0) {
    *values = malloc(sizeof(double) * (size_t)np);
    if (!*values) st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; *values && i < np; i++) (*values)[i] = pts[i].value;
    *n = *values ? (int)np : 0;
    *last_step = pts[np - 1].step;
  }
  free(pts);
  return st;
}

em_status em_store_mark_dead_runs(em_store *s, em_error *err) {
  return em_store_sweep_stale_runs(s, err);
}

const char *em_store_this_host(void) { return em_store_host(); }
