/* em-train-session.h: one training run on a worker thread (house style
 * 11). The worker parses the spec, checks that a batch fits the training
 * device (em_train_preflight: refused before anything is recorded, or a
 * smaller starting batch with auto_batch, reported as a warning), opens
 * the data, records the run (with its device) in the registry through
 * its own em_store_writer and runs the trainer; its event
 * callback only appends to a mutex-protected buffer, which the main thread
 * drains (em_train_session_drain) from one timer at display rate. The main
 * loop never waits on the worker: every call here takes the mutex for a
 * copy at most, except em_train_session_free, which joins the thread.
 *
 * Pause: the worker's callback blocks on a condition variable at the next
 * optimiser step; resume wakes it, and lr / clipping changes made while
 * paused are applied there (em_trainer_set_lr_scale, _set_clip_grad_norm)
 * and recorded as a "settings" run event. Stop wakes a paused worker too. */
#pragma once

#include <glib.h>

#include "em-train.h"

G_BEGIN_DECLS

typedef struct em_train_session em_train_session;

typedef struct {
  const char *spec_json;    /* the model */
  const char *model;        /* its name for the registry (NULL: the spec's) */
  const char *registry_dir; /* NULL: do not record */
  const char *trace_path;   /* NULL: no profiled window */
  em_train_config cfg;      /* dataset, optimiser, ... (checkpoint_dir: the run's) */
} em_train_session_options;

/* What accumulated since the last drain. Arrays are owned by the drain
 * (em_train_drain_clear). */
typedef struct {
  GArray *step, *loss, *lr, *grad_norm, *mem_allocated, *mem_reserved, *mem_peak; /* per STEP */
  GArray *eval_step, *test_loss, *test_accuracy;                                  /* per EVAL */
  int64_t epoch, epochs, total_steps, last_step;
  double samples_per_sec, eta_s, elapsed_s;
  gboolean paused;
  int64_t run_id;        /* 0 until recorded */
  gboolean started;      /* the run row was created since the last drain */
  gboolean finished;     /* the worker ended: status, message */
  int status;            /* em_run_status */
  char *message;         /* NULL or why it failed */
  GPtrArray *profiles;   /* trace paths of profiled windows that ended */
  GPtrArray *warnings;   /* divergence and warning messages */
} em_train_drain;

em_train_session *em_train_session_start(const em_train_session_options *o);
/* Copies what accumulated into *out (initialised here). FALSE when nothing
 * changed since the last call. */
gboolean em_train_session_drain(em_train_session *s, em_train_drain *out);
void em_train_drain_clear(em_train_drain *d);

void em_train_session_pause(em_train_session *s);
/* lr: the new base lr (the schedule is scaled by lr / the configured lr);
 * clip: the gradient clipping norm (0 off). Negative: unchanged. */
void em_train_session_resume(em_train_session *s, double lr, double clip);
void em_train_session_stop(em_train_session *s);
gboolean em_train_session_is_paused(em_train_session *s);
/* Stops the run if it is still going and joins the worker. NULL is fine. */
void em_train_session_free(em_train_session *s);

G_END_DECLS
