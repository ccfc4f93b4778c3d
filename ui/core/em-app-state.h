/* em-app-state.h: what the workbench's pages share, on the main thread
 * only (house style 11): the registry folder, the model being built (spec
 * JSON), the chosen dataset, and the training session's coalesced
 * progress. Pages hold a reference and connect to its signals with
 * g_signal_connect_object; the train page is the only one that drives a
 * session (em_app_state_run_*), the others watch.
 *
 * Signals:
 *   "spec-changed"      ()                 the builder set a new spec
 *   "dataset-changed"   ()
 *   "device-changed"    ()                 the device chosen for training
 *   "run-started"       (gint64 run_id)    0 when not recorded
 *   "run-progress"      (gpointer update)  const EmTrainUpdate *, at most
 *                                          at display rate, never per step
 *   "run-finished"      (gint64 run_id, gint status, const char *message)
 *                                          status: em_run_status
 *   "profile-ready"     (const char *trace_path)  a profiled window ended:
 *                                          em_op_table_build reads it
 *   "registry-changed"  ()                 runs/models changed: reload lists
 *   "layer-selected"    (const char *layer) builder <-> profiler link */
#pragma once

#include <glib-object.h>
#include <stdint.h>

#include "em-tensor.h" /* em_device */

G_BEGIN_DECLS

/* One coalesced batch of training progress: the STEP events since the
 * last update (arrays of n), the evaluations since then (n_eval), and the
 * latest figures. Valid during the signal emission only. */
typedef struct {
  int n;
  const int64_t *step;          /* optimiser step of each point */
  const double *loss;           /* the batch's training loss */
  const double *lr;
  const double *grad_norm;
  const int64_t *mem_allocated; /* bytes, the allocator's figures after the step */
  const int64_t *mem_reserved;
  const int64_t *mem_peak;
  int n_eval;
  const int64_t *eval_step;
  const double *test_loss;
  const double *test_accuracy;
  int64_t epoch, epochs, total_steps;
  double samples_per_sec, eta_s, elapsed_s;
  gboolean paused;
} EmTrainUpdate;

#define EM_TYPE_APP_STATE (em_app_state_get_type())
G_DECLARE_FINAL_TYPE(EmAppState, em_app_state, EM, APP_STATE, GObject)

/* registry_dir NULL: em_store_default_dir. */
EmAppState *em_app_state_new(const char *registry_dir);
const char *em_app_state_get_registry_dir(EmAppState *self);

/* The model being built. path: the file it came from or was saved to
 * (NULL: none). Emits "spec-changed". */
void em_app_state_set_spec(EmAppState *self, const char *spec_json, const char *path);
const char *em_app_state_get_spec_json(EmAppState *self); /* NULL: none yet */
const char *em_app_state_get_spec_path(EmAppState *self);

/* The dataset ("fashion-mnist", "cifar10", "csv", "synthetic") and its
 * folder or file (NULL: the default). Emits "dataset-changed". */
void em_app_state_set_dataset(EmAppState *self, const char *name, const char *dir);
const char *em_app_state_get_dataset_name(EmAppState *self);
const char *em_app_state_get_dataset_dir(EmAppState *self);

/* The device the next run trains on (the Train page's selector, or
 * ember-workbench --device; default the CPU). Emits "device-changed"
 * when it changes. */
void em_app_state_set_device(EmAppState *self, em_device device);
em_device em_app_state_get_device(EmAppState *self);
/* The device of the running (or last) run: the chosen device when
 * em_app_state_run_started was called. */
em_device em_app_state_get_run_device(EmAppState *self);

/* The session's emitters, for the train page. */
void em_app_state_run_started(EmAppState *self, gint64 run_id);
void em_app_state_run_progress(EmAppState *self, const EmTrainUpdate *u);
void em_app_state_run_finished(EmAppState *self, gint64 run_id, int status, const char *message);
void em_app_state_profile_ready(EmAppState *self, const char *trace_path);
gboolean em_app_state_is_training(EmAppState *self);

void em_app_state_registry_changed(EmAppState *self);
void em_app_state_select_layer(EmAppState *self, const char *layer);

G_END_DECLS
