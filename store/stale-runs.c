/* stale-runs.c: a run still marked "running" whose process on this host
 * is gone (crash, kill -9, power loss) is marked "killed" when the
 * registry is next opened for writing. A pid reused by another process is
 * told apart by the process start time recorded with the run. Its newest
 * checkpoint that the run's writer had not recorded yet is recorded then
 * (checkpoint-adopt.c). */
#include "store-private.h"

#include <stdio.h>
#include <unistd.h>

em_status em_store_ended_runs(em_store *s, GArray **out, em_error *err) {
  GArray *ended = g_array_new(FALSE, FALSE, sizeof(em_ended_run));
  sqlite3_stmt *q;
  em_status st = EM_SQL_PREPARE(s,
                                "SELECT id, pid, pid_start FROM runs "
                                "WHERE status = 'running' AND host = ?",
                                &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "t", em_store_host());
  bool row = false;
  while (!st && !(st = EM_SQL_STEP(s, q, &row, err)) && row) {
    em_ended_run r = {sqlite3_column_int64(q, 0), sqlite3_column_int64(q, 1)};
    int64_t start = sqlite3_column_type(q, 2) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 2);
    if (!em_process_alive(r.pid, start)) g_array_append_val(ended, r);
  }
  if (q) sqlite3_reset(q);
  *out = ended;
  return st;
}

em_status em_store_sweep_stale_runs(em_store *s, em_error *err) {
  /* read first, without the write lock: usually nothing is stale */
  GArray *stale;
  em_status st = em_store_ended_runs(s, &stale, err);
  if (!st && stale->len) {
    st = EM_SQL_BEGIN(s, err);
    for (guint i = 0; !st && i < stale->len; i++) {
      em_ended_run *r = &g_array_index(stale, em_ended_run, i);
      char msg[512];
      snprintf(msg, sizeof msg,
               "the process that ran it (pid %lld on %s) ended without finishing the run "
               "(crash, kill or power loss); its metrics and checkpoints up to then are kept",
               (long long)r->pid, em_store_host());
      /* ended: the last time it recorded a metric, else now */
      st = EM_SQL_RUN(s, err,
                      "UPDATE runs SET status = 'killed', message = ?2, "
                      "ended = coalesce((SELECT max(last_wall) FROM metric_chunks WHERE run = ?1), ?3) "
                      "WHERE id = ?1 AND status = 'running'",
                      "itd", r->id, msg, em_store_now());
    }
    if (!st) st = EM_SQL_COMMIT(s, err);
    if (st) em_db_rollback(s);
    /* their checkpoints the writer had not recorded yet: not a reason to
     * refuse the registry, so only said */
    for (guint i = 0; !st && i < stale->len; i++) {
      em_error e = {0};
      int64_t step;
      int64_t id = g_array_index(stale, em_ended_run, i).id;
      if (em_store_adopt_checkpoints(s, id, &step, &e) != EM_OK)
        em_log_msg(EM_LOG_WARNING, "registry: %s", e.msg);
    }
  }
  g_array_free(stale, TRUE);
  if (st) em_error_prefix(err, "marking runs of vanished processes as killed");
  return st;
}
