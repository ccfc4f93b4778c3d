/* diagnostics.c: what a run can observe about itself without changing its
 * numbers: a profiled window of batches written as a Chrome trace, anomaly
 * mode (the first op that makes NaN/Inf stops the run, named), memory
 * figures for every step and a periodic leak check. */
#include "train-private.h"

#include <stdio.h>
#include <stdlib.h>

#include "em-device.h"
#include "em-profile.h"

void em_train_diagnostics_defaults(em_train_diagnostics *d) {
  *d = (em_train_diagnostics){.start_batch = 5, .batches = 20, .leak_every = 50};
}

void em_trainer_set_diagnostics(em_trainer *t, const em_train_diagnostics *d) { t->diag = *d; }

void em_diag_begin(em_trainer *t, em_diag_state *d) {
  *d = (em_diag_state){0};
  if (t->diag.detect_anomaly) em_anomaly_set(true);
  em_leak_reset();
}

void em_diag_batch_begin(em_trainer *t, em_diag_state *d, em_error *err) {
  const em_train_diagnostics *g = &t->diag;
  if ((g->trace_path[0] || g->profile) && !d->profiled && !em_profile_running() && d->batches >= g->start_batch) {
    em_error e = {0};
    if (em_profile_start(NULL, &e) == EM_OK) d->profiling = true;
    else d->profiled = true; /* another session owns the profiler: give up quietly */
  }
  em_profile_step_begin();
  (void)err;
}

/* Ends the profiled window: writes the trace and formats the op table. */
static em_status finish_profile(em_trainer *t, em_diag_state *d, char **table, em_error *err) {
  em_profile_stop();
  d->profiling = false;
  d->profiled = true;
  /* A trace that cannot be written costs the trace, not the training
   * (the CLI checks the path before it starts; a disk can still fill). */
  em_error terr = {0};
  if (t->diag.trace_path[0] && em_profile_write_trace(t->diag.trace_path, &terr) != EM_OK) {
    em_log_msg(EM_LOG_WARNING, "%s; training goes on", terr.msg);
    t->diag.trace_path[0] = '\0'; /* the PROFILE event names no file */
  }
  (void)err;
  em_op_table tab;
  if (em_op_table_build(&tab, EM_OP_TABLE_BY_OP, err) == EM_OK) {
    em_op_table_sort(&tab, EM_OP_COL_SELF, true);
    *table = em_op_table_format(&tab, 15);
    em_op_table_free(&tab);
  }
  return EM_OK;
}

em_status em_diag_batch_end(em_trainer *t, em_diag_state *d, em_train_event *ev, char **table,
                            char *warning, size_t cap, em_error *err) {
  em_profile_step_end();
  d->batches++;
  em_memory_stats ms; /* the training device's allocator (the host's on the CPU) */
  em_device_memory_stats(t->cfg.device, &ms);
  ev->mem_allocated = ms.allocated_bytes;
  ev->mem_reserved = ms.reserved_bytes;
  ev->mem_peak = ms.peak_allocated_bytes;
  warning[0] = '\0';
  *table = NULL;
  if (d->profiling && d->batches >= t->diag.start_batch + t->diag.batches)
    EM_TRY(finish_profile(t, d, table, err));
  if (t->diag.leak_every > 0 && d->batches % t->diag.leak_every == 0) {
    em_leak_report lr;
    if (em_leak_check(0, &lr) && !d->leak_reported) {
      snprintf(warning, cap, "%s", lr.message);
      d->leak_reported = true;
    }
  }
  return EM_OK;
}

em_status em_diag_window_end(em_trainer *t, em_diag_state *d, char **table, em_error *err) {
  *table = NULL;
  return d->profiling ? finish_profile(t, d, table, err) : EM_OK;
}

em_status em_diag_end(em_trainer *t, em_diag_state *d, char **table, em_error *err) {
  if (t->diag.detect_anomaly) em_anomaly_set(false);
  const em_train_diagnostics *g = &t->diag;
  if ((g->trace_path[0] || g->profile) && !d->profiled && !d->profiling && d->batches > 0 &&
      d->batches <= g->start_batch) /* (not when another session held the profiler) */
    em_log_msg(EM_LOG_WARNING,
               "profile: the run had %lld batches, and the profiled window starts after %lld "
               "warm-up batches: nothing was profiled%s",
               (long long)d->batches, (long long)g->start_batch,
               g->trace_path[0] ? " or written" : "");
  /* A run shorter than the window still gets its trace. */
  return em_diag_window_end(t, d, table, err);
}
