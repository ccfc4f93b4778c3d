/* run-recorder.c: trainer events -> store writer rows (see em-store.h). */
#include "em-store.h"
#include "em-plugin.h"

#include <math.h>
#include <string.h>

#include <glib.h>

void em_run_recorder_init(em_run_recorder *r, em_store_writer *w, int64_t run,
                         int keep_checkpoints) {
  *r = (em_run_recorder){.writer = w, .run = run, .keep_checkpoints = keep_checkpoints,
                         .last_eval_loss = NAN, .last_eval_step = -1};
}

void em_run_recorder_event(em_run_recorder *r, const em_train_event *ev) {
  em_store_writer *w = r->writer;
  if (!w) return;
  double wall = (double)g_get_real_time() / 1e6;
  switch (ev->kind) {
  case EM_EVENT_STEP:
    if (!ev->step_end) break; /* mid-accumulation: the step is recorded when it ends */
    em_store_writer_metric(w, r->run, ev->step, "loss", ev->loss, wall);
    em_store_writer_metric(w, r->run, ev->step, "lr", ev->lr, wall);
    em_store_writer_metric(w, r->run, ev->step, "grad_norm", ev->grad_norm, wall);
    em_store_writer_metric(w, r->run, ev->step, "mem_allocated_mb", ev->mem_allocated / 1048576.0,
                           wall);
    em_store_writer_metric(w, r->run, ev->step, "mem_reserved_mb", ev->mem_reserved / 1048576.0,
                           wall);
    em_store_writer_metric(w, r->run, ev->step, "mem_peak_mb", ev->mem_peak / 1048576.0, wall);
    break;
  case EM_EVENT_EPOCH_END:
    em_store_writer_metric(w, r->run, ev->step, "train_loss", ev->loss, wall);
    em_store_writer_metric(w, r->run, ev->step, "samples_per_sec", ev->samples_per_sec, wall);
    break;
  case EM_EVENT_EVAL:
    em_store_writer_metric(w, r->run, ev->step, "test_loss", ev->test_loss, wall);
    em_store_writer_metric(w, r->run, ev->step, "test_accuracy", ev->test_accuracy, wall);
    { /* plugin metrics (em-plugin.h) of this evaluation, when a spec or --metric asked */
      em_metric_value mv[EM_EVAL_MAX_METRICS];
      int nm = em_metrics_last(mv, EM_EVAL_MAX_METRICS, NULL);
      for (int i = 0; i < nm; i++)
        em_store_writer_metric(w, r->run, ev->step, mv[i].name, mv[i].value, wall);
    }
    r->last_eval_loss = ev->test_loss;
    r->last_eval_step = ev->step;
    /* an evaluation is committed at once, not at the writer's next tick:
     * a sweep's pruner decides on it while the run trains on (a few ms
     * against the evaluation's own cost) */
    em_store_writer_flush(w, NULL);
    break;
  case EM_EVENT_CHECKPOINT: {
    const char *kind = ev->checkpoint_kind ? ev->checkpoint_kind : "step";
    double metric = NAN;
    if (strcmp(kind, "eval") == 0) metric = ev->test_loss;
    else if (strcmp(kind, "final") == 0 && r->last_eval_step == ev->step)
      metric = r->last_eval_loss;
    if (ev->path)
      em_store_writer_checkpoint(w, r->run, ev->step, ev->epoch, ev->path, kind, metric, true,
                                 r->keep_checkpoints);
    r->checkpoints++;
    break;
  }
  case EM_EVENT_DIVERGENCE:
    em_store_writer_event(w, r->run, ev->step, "divergence",
                          ev->message ? ev->message : "the loss diverged");
    r->divergences++;
    break;
  case EM_EVENT_WARNING:
    em_store_writer_event(w, r->run, ev->step, "warning", ev->message ? ev->message : "");
    break;
  case EM_EVENT_PROFILE:
    em_store_writer_event(w, r->run, ev->step, "profile", ev->path ? ev->path : "");
    break;
  case EM_EVENT_START:
  case EM_EVENT_DONE: break;
  }
}
