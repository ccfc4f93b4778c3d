/* em-train-session.c: the training worker (see the header). */
#include "em-cpu.h"
#include "em-train-session.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#ifdef __linux__
#include <sys/resource.h>
#include <unistd.h>
#endif

#include "em-device.h"
#include "em-store.h"
#include "em-train-job.h"

struct em_train_session {
  GThread *thread;
  em_train_session_options o; /* strings below are owned copies */
  char *spec_json, *model, *registry_dir, *trace_path;

  GMutex lock; /* guards everything below */
  GCond cond;
  em_train_drain buf;
  gboolean dirty;
  gboolean pause_req, stop_req;
  double new_lr, new_clip; /* < 0: unchanged */
  em_trainer *trainer;     /* set while em_trainer_run runs */

  /* worker-thread only */
  em_store_writer *writer;
  int64_t run, last_step;
  em_run_recorder rec; /* trainer events -> registry rows */
  double base_lr, clip;
};

static void drain_init(em_train_drain *d) {
  memset(d, 0, sizeof *d);
  d->step = g_array_new(FALSE, FALSE, sizeof(int64_t));
  d->loss = g_array_new(FALSE, FALSE, sizeof(double));
  d->lr = g_array_new(FALSE, FALSE, sizeof(double));
  d->grad_norm = g_array_new(FALSE, FALSE, sizeof(double));
  d->mem_allocated = g_array_new(FALSE, FALSE, sizeof(int64_t));
  d->mem_reserved = g_array_new(FALSE, FALSE, sizeof(int64_t));
  d->mem_peak = g_array_new(FALSE, FALSE, sizeof(int64_t));
  d->eval_step = g_array_new(FALSE, FALSE, sizeof(int64_t));
  d->test_loss = g_array_new(FALSE, FALSE, sizeof(double));
  d->test_accuracy = g_array_new(FALSE, FALSE, sizeof(double));
  d->profiles = g_ptr_array_new_with_free_func(g_free);
  d->warnings = g_ptr_array_new_with_free_func(g_free);
}

void em_train_drain_clear(em_train_drain *d) {
  GArray **arrays[] = {&d->step, &d->loss, &d->lr, &d->grad_norm, &d->mem_allocated,
                       &d->mem_reserved, &d->mem_peak, &d->eval_step, &d->test_loss,
                       &d->test_accuracy};
  for (size_t i = 0; i < G_N_ELEMENTS(arrays); i++)
    if (*arrays[i]) g_array_unref(g_steal_pointer(arrays[i]));
  g_clear_pointer(&d->profiles, g_ptr_array_unref);
  g_clear_pointer(&d->warnings, g_ptr_array_unref);
  g_clear_pointer(&d->message, g_free);
}

/* ---- the event callback (worker thread) ------------------------------------ */

static void buffer_event(em_train_session *s, const em_train_event *ev) {
  em_train_drain *b = &s->buf;
  b->epoch = ev->epoch;
  b->epochs = ev->epochs;
  b->total_steps = ev->total_steps;
  b->elapsed_s = ev->elapsed_s;
  if (ev->kind == EM_EVENT_STEP) {
    g_array_append_val(b->step, ev->step);
    g_array_append_val(b->loss, ev->loss);
    g_array_append_val(b->lr, ev->lr);
    g_array_append_val(b->grad_norm, ev->grad_norm);
    g_array_append_val(b->mem_allocated, ev->mem_allocated);
    g_array_append_val(b->mem_reserved, ev->mem_reserved);
    g_array_append_val(b->mem_peak, ev->mem_peak);
    b->last_step = ev->step;
    b->samples_per_sec = ev->samples_per_sec;
    b->eta_s = ev->eta_s;
  } else if (ev->kind == EM_EVENT_EVAL) {
    g_array_append_val(b->eval_step, ev->step);
    g_array_append_val(b->test_loss, ev->test_loss);
    g_array_append_val(b->test_accuracy, ev->test_accuracy);
  } else if (ev->kind == EM_EVENT_PROFILE && ev->path) {
    g_ptr_array_add(b->profiles, g_strdup(ev->path));
  } else if ((ev->kind == EM_EVENT_DIVERGENCE || ev->kind == EM_EVENT_WARNING) && ev->message) {
    g_ptr_array_add(b->warnings, g_strdup(ev->message));
  }
  s->dirty = TRUE;
}

static bool on_event(const em_train_event *ev, void *user) {
  em_train_session *s = user;
  if (ev->kind == EM_EVENT_STEP && ev->step == s->last_step) return true; /* mid-accumulation */
  em_run_recorder_event(&s->rec, ev);
  if (ev->kind == EM_EVENT_STEP) s->last_step = ev->step;

  char change[256] = "";
  g_mutex_lock(&s->lock);
  buffer_event(s, ev);
  if (ev->kind == EM_EVENT_STEP && s->pause_req && !s->stop_req) {
    s->buf.paused = TRUE;
    s->dirty = TRUE;
    while (s->pause_req && !s->stop_req) g_cond_wait(&s->cond, &s->lock);
    s->buf.paused = FALSE;
    s->dirty = TRUE;
    size_t k = 0;
    if (s->new_lr > 0 && s->o.cfg.optim.lr > 0) {
      double old = s->o.cfg.optim.lr * em_trainer_lr_scale(s->trainer);
      if (fabs(s->new_lr - old) > 1e-12 * fmax(1.0, old)) {
        em_trainer_set_lr_scale(s->trainer, s->new_lr / s->o.cfg.optim.lr);
        k += (size_t)g_snprintf(change + k, sizeof change - k, "lr %g -> %g", old, s->new_lr);
      }
    }
    if (s->new_clip >= 0 && s->new_clip != s->clip) {
      em_trainer_set_clip_grad_norm(s->trainer, s->new_clip);
      k += (size_t)g_snprintf(change + k, sizeof change - k, "%sclip-grad-norm %g -> %g",
                              k ? ", " : "", s->clip, s->new_clip);
      s->clip = s->new_clip;
    }
    s->new_lr = s->new_clip = -1;
  }
  bool go_on = !s->stop_req;
  g_mutex_unlock(&s->lock);
  if (change[0] && s->writer) {
    char detail[320];
    g_snprintf(detail, sizeof detail, "%s at step %lld", change, (long long)ev->step);
    em_store_writer_event(s->writer, s->run, ev->step, "settings", detail);
  }
  return go_on;
}

/* ---- the worker ---------------------------------------------------------------- */

/* Creates the run row and its checkpoint folder (into cfg); 0 on error. */
static int64_t create_run(em_train_session *s, em_train_config *cfg, const em_spec *spec,
                          em_error *err) {
  em_store *st = em_store_open(s->registry_dir, false, err);
  if (!st) return 0;
  em_run_start rs = {
      .model = s->model ? s->model : em_spec_name(spec),
      .spec_json = s->spec_json,
      .engine_version = "workbench",
      .shorter_registry = "choose a shorter registry folder in Preferences",
  };
  int64_t run = 0;
  em_store_job_record(st, &rs, cfg, 1, 1, 0, &run, err);
  em_store_close(st);
  return run;
}

static void finish_run(em_train_session *s, em_run_status status, const char *msg) {
  em_error err = {0}; /* the worker has nothing to tell it to */
  em_store_run_end(s->registry_dir, s->run, status, msg, &err);
}

static gpointer worker_main(gpointer data) {
  em_train_session *s = data;
#ifdef __linux__
  /* Below the main thread: on a machine with few cores the window keeps
   * its frame rate (the trainer's pool threads, made from here, inherit
   * this). Best effort: a failure only costs smoothness. */
  (void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
#endif
  em_train_config cfg = s->o.cfg;
  em_error err = {0};
  em_spec *spec = NULL;
  em_dataset *train = NULL, *test = NULL;
  em_model *model = NULL;
  em_trainer *tr = NULL;
  em_run_status status = EM_RUN_FAILED;
  em_train_summary sum;
  memset(&sum, 0, sizeof sum);
  em_run_recorder_init(&s->rec, NULL, 0, 3); /* records nothing until the writer opens */

  if (!(spec = em_spec_parse(s->spec_json, "the workbench's model", &err))) goto out;
  if (em_train_config_validate(&cfg, &err) != EM_OK) goto out;
  /* On a device, as `ember train`: the pre-flight memory estimate refuses a
   * batch that will not fit before anything is recorded; with auto_batch
   * the run starts at a batch that fits, and the status line says so. */
  int batch = cfg.batch_size;
  char note[512] = "";
  if (em_train_preflight(spec, &cfg, &batch, note, sizeof note, &err) != EM_OK) goto out;
  cfg.batch_size = batch;
  if (note[0]) {
    g_mutex_lock(&s->lock);
    g_ptr_array_add(s->buf.warnings, g_strdup(note));
    s->dirty = TRUE;
    g_mutex_unlock(&s->lock);
  }
  if (!(train = em_train_open_dataset(spec, &cfg, true, &err)) ||
      !(test = em_train_open_dataset(spec, &cfg, false, &err)))
    goto out;
  if (!(model = em_model_new(spec, cfg.seed, &err))) goto out;
  if (s->registry_dir) {
    if (!(s->run = create_run(s, &cfg, spec, &err))) goto out;
    g_mutex_lock(&s->lock);
    s->buf.run_id = s->run;
    s->buf.started = TRUE;
    s->dirty = TRUE;
    g_mutex_unlock(&s->lock);
    if (!(s->writer = em_store_writer_new(s->registry_dir, 200, &err))) goto out;
    em_run_recorder_init(&s->rec, s->writer, s->run, 3);
  }
  if (!(tr = em_trainer_new(model, &cfg, train, test, &err))) goto out;
  s->base_lr = cfg.optim.lr;
  s->clip = cfg.clip_grad_norm;
  if (s->trace_path) {
    em_train_diagnostics diag;
    em_train_diagnostics_defaults(&diag);
    g_strlcpy(diag.trace_path, s->trace_path, sizeof diag.trace_path);
    em_trainer_set_diagnostics(tr, &diag);
  }
  g_mutex_lock(&s->lock);
  s->trainer = tr;
  gboolean stop_first = s->stop_req;
  g_mutex_unlock(&s->lock);
  if (stop_first) em_trainer_request_stop(tr);
  em_status rc = em_trainer_run(tr, on_event, s, &err);
  g_mutex_lock(&s->lock);
  s->trainer = NULL;
  g_mutex_unlock(&s->lock);
  em_trainer_summary(tr, &sum);
  if (rc == EM_OK) status = sum.stopped ? EM_RUN_STOPPED : EM_RUN_COMPLETED;

out:
  if (s->writer) {
    em_error werr = {0};
    if (em_store_writer_free(s->writer, &werr) != EM_OK && err.status == EM_OK) {
      g_mutex_lock(&s->lock);
      g_ptr_array_add(s->buf.warnings,
                      g_strdup_printf("some rows of the run were not recorded: %s", werr.msg));
      g_mutex_unlock(&s->lock);
    }
    s->writer = NULL;
  }
  if (s->run) finish_run(s, status, status == EM_RUN_FAILED ? err.msg : NULL);
  em_trainer_free(tr);
  em_model_free(model);
  em_dataset_free(train);
  em_dataset_free(test);
  em_spec_free(spec);
  g_mutex_lock(&s->lock);
  s->buf.finished = TRUE;
  s->buf.status = status;
  s->buf.message = status == EM_RUN_FAILED ? g_strdup(err.msg[0] ? err.msg : "training failed")
                                            : NULL;
  s->dirty = TRUE;
  g_mutex_unlock(&s->lock);
  return NULL;
}

/* ---- the main thread's side ------------------------------------------------------ */

em_train_session *em_train_session_start(const em_train_session_options *o) {
  em_train_session *s = g_new0(em_train_session, 1);
  s->o = *o; /* the config; the strings are copied below */
  s->o.spec_json = s->o.model = s->o.registry_dir = s->o.trace_path = NULL;
  s->spec_json = g_strdup(o->spec_json);
  s->model = g_strdup(o->model);
  s->registry_dir = g_strdup(o->registry_dir);
  s->trace_path = g_strdup(o->trace_path);
  s->new_lr = s->new_clip = -1;
  g_mutex_init(&s->lock);
  g_cond_init(&s->cond);
  drain_init(&s->buf);
  s->thread = g_thread_new("ember-train", worker_main, s);
  return s;
}

gboolean em_train_session_drain(em_train_session *s, em_train_drain *out) {
  g_mutex_lock(&s->lock);
  if (!s->dirty) {
    g_mutex_unlock(&s->lock);
    return FALSE;
  }
  *out = s->buf;
  drain_init(&s->buf);
  /* the latest figures stay; the one-shot flags and arrays move out */
  s->buf.epoch = out->epoch;
  s->buf.epochs = out->epochs;
  s->buf.total_steps = out->total_steps;
  s->buf.last_step = out->last_step;
  s->buf.samples_per_sec = out->samples_per_sec;
  s->buf.eta_s = out->eta_s;
  s->buf.elapsed_s = out->elapsed_s;
  s->buf.paused = out->paused;
  s->buf.run_id = out->run_id;
  s->buf.finished = out->finished;
  s->buf.status = out->status;
  s->dirty = FALSE;
  g_mutex_unlock(&s->lock);
  return TRUE;
}

void em_train_session_pause(em_train_session *s) {
  g_mutex_lock(&s->lock);
  s->pause_req = TRUE;
  g_mutex_unlock(&s->lock);
}

void em_train_session_resume(em_train_session *s, double lr, double clip) {
  g_mutex_lock(&s->lock);
  s->pause_req = FALSE;
  s->new_lr = lr;
  s->new_clip = clip;
  g_cond_broadcast(&s->cond);
  g_mutex_unlock(&s->lock);
}

void em_train_session_stop(em_train_session *s) {
  g_mutex_lock(&s->lock);
  s->stop_req = TRUE;
  if (s->trainer) em_trainer_request_stop(s->trainer);
  g_cond_broadcast(&s->cond);
  g_mutex_unlock(&s->lock);
}

gboolean em_train_session_is_paused(em_train_session *s) {
  g_mutex_lock(&s->lock);
  gboolean p = s->buf.paused;
  g_mutex_unlock(&s->lock);
  return p;
}

void em_train_session_free(em_train_session *s) {
  if (!s) return;
  em_train_session_stop(s);
  g_thread_join(s->thread);
  em_train_drain_clear(&s->buf);
  g_mutex_clear(&s->lock);
  g_cond_clear(&s->cond);
  g_free(s->spec_json);
  g_free(s->model);
  g_free(s->registry_dir);
  g_free(s->trace_path);
  g_free(s);
}
