/* train-resume.c: what a recorded run resumes from (em-train-job.h).
 *
 * A resume continues the run's newest valid checkpoint with the spec and
 * the settings it recorded, corrected by what the checkpoint says the
 * trainer had reached (its batch, lr and clipping), so the continuation
 * is the run an uninterrupted one would have been. */
#include "em-train-job.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "em-device.h"
#include "store-private.h"

void em_job_say(const em_job_hooks *h, const char *fmt, ...) {
  if (!h || !h->warn) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  h->warn(h->user, line);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* The checkpoint's "config" metadata as JSON text (malloc'd), NULL when
 * the file does not say. */
static char *checkpoint_config_text(const char *path) {
  enum { CAP = 1 << 16 };
  char *text = malloc(CAP);
  if (text && em_checkpoint_read_meta(path, "config", text, CAP, NULL) == EM_OK) return text;
  free(text);
  return NULL;
}

/* The batch size the checkpoint was written with (its trainer's config):
 * the recorded one unless --auto-batch halved it; 0 when the file does
 * not say (loading it then reports what is wrong). */
static int checkpoint_batch_size(const char *path) {
  char *text = checkpoint_config_text(path);
  int batch = 0;
  json_t *o = text ? json_loads(text, 0, NULL) : NULL;
  json_t *b = json_object_get(o, "batch_size");
  if (json_is_integer(b) && json_integer_value(b) > 0 && json_integer_value(b) <= INT_MAX)
    batch = (int)json_integer_value(b);
  json_decref(o);
  free(text);
  return batch;
}

/* The settings the trainer had when it wrote the checkpoint: false when
 * the file does not say. */
static bool checkpoint_config(const char *path, em_train_config *out) {
  char *text = checkpoint_config_text(path);
  bool ok = false;
  if (text) {
    em_train_config_defaults(out);
    ok = em_train_config_from_json(out, text, NULL) == EM_OK;
  }
  free(text);
  return ok;
}

/* The checkpoint's lr scale (a pause's lr change or a divergence rollback
 * left it): 1 when the file does not say (loading it reports that). */
static double checkpoint_lr_scale(const char *path) {
  char text[64];
  double v = 1;
  if (em_checkpoint_read_meta(path, "lr_scale", text, sizeof text, NULL) == EM_OK) {
    char *end;
    v = strtod(text, &end);
    if (end == text || !(v > 0) || !isfinite(v)) v = 1;
  }
  return v;
}

/* A stopped run's "final" checkpoint is where it resumes, but not what a
 * divergence after the resume rolls back to: the run that never stopped
 * wrote no checkpoint there, and rolled back to the one before (with the
 * stop's own, one step back, the resumed run gave up where it went on).
 * That one is the newest checkpoint other than a "final" at or before
 * the resume's step, of the run or else of the runs it continued. */
static void rollback_point(em_store *s, em_resume *r) {
  if (!r->ckpt.kind || strcmp(r->ckpt.kind, "final") != 0)
    return; /* a periodic checkpoint: itself, as the trainer takes it */
  r->set_rollback = true;
  em_error err = {0};
  for (int64_t run = r->parent, hops = 0; run > 0 && hops < 1000; hops++) {
    em_checkpoint_row *rows = NULL;
    int n = 0;
    if (em_store_checkpoints_list(s, run, &rows, &n, &err) != EM_OK) break;
    const em_checkpoint_row *best = NULL;
    for (int i = 0; i < n; i++)
      if (strcmp(rows[i].kind, "final") != 0 && rows[i].step <= r->ckpt.step &&
          access(rows[i].path, R_OK) == 0 &&
          (!best || rows[i].step > best->step ||
           (rows[i].step == best->step && rows[i].id > best->id)))
        best = &rows[i];
    if (best) {
      r->rollback_path = strdup(best->path);
      r->rollback_step = best->step;
    }
    em_checkpoint_rows_free(rows, n);
    em_run up;
    memset(&up, 0, sizeof up);
    if (best || em_store_run_get(s, run, &up, NULL) != EM_OK) break;
    run = up.parent_run;
    em_run_clear(&up);
  }
  em_error_clear(&err);
}

/* Refuses what cannot be resumed and warns of what will not go as hoped. */
static em_status check_status(em_store *s, const em_run *run, const em_job_hooks *h,
                              em_error *err) {
  long long id = (long long)run->id;
  if (run->status == EM_RUN_RUNNING)
    return em_error_set(err, EM_ERR_INVALID,
                        "run %lld is still running (pid %lld on %s): stop it first (Ctrl-C where "
                        "it runs, or kill -INT %lld), then resume it",
                        id, (long long)run->pid, run->host ? run->host : "?", (long long)run->pid);
  if (run->status == EM_RUN_COMPLETED)
    return em_error_set(err, EM_ERR_INVALID,
                        "run %lld completed: there is nothing left to train; register it ('ember "
                        "model register %lld --name NAME') or start a new run",
                        id, id);
  if (run->status == EM_RUN_FAILED && run->message) { /* by divergence: it comes back */
    em_run_annotation *ann = NULL;
    int n = 0;
    bool diverged = false; /* the run's error is one of its divergence events */
    if (em_store_run_annotations(s, run->id, &ann, &n, NULL) == EM_OK)
      for (int i = 0; i < n; i++)
        diverged |= strcmp(ann[i].kind, "divergence") == 0 && strcmp(ann[i].text, run->message) == 0;
    if (diverged)
      em_job_say(h, "run %lld stopped on a divergence (%s); a resumed run keeps its settings, so it "
             "will most likely diverge the same way: a new run with a lower --lr (or "
             "--clip-grad-norm) is the way on", id, run->message);
    em_run_annotations_free(ann, n);
  }
  int64_t child = 0; /* resumed before: this is a second continuation of the same point */
  if (em_store_run_first_child(s, run->id, &child, NULL) == EM_OK && child)
    em_job_say(h, "run %lld was resumed before, as run %lld: this is another continuation of it, "
           "from its last checkpoint (resume run %lld to go on from where that one got to)",
        id, (long long)child, (long long)child);
  return EM_OK;
}

/* The spec and the settings the run recorded. */
static em_status read_recorded(em_store *s, const em_run *run, const em_job_hooks *h,
                               em_resume *r, em_error *err) {
  if (h && h->restore_plugins && h->restore_plugins(h->user, s, run->id, err) != EM_OK)
    return err->status;
  char src[64];
  snprintf(src, sizeof src, "the spec recorded with run %lld", (long long)run->id);
  if (!(r->spec = em_spec_parse(run->spec_json ? run->spec_json : "", src, err)))
    return err->status;
  em_train_config_defaults(&r->cfg);
  char *config = em_job_config_without_world(run->config_json ? run->config_json : "",
                                             &r->world);
  if (!config) return em_error_set(err, EM_ERR_NOMEM, "out of memory reading run %lld",
                                   (long long)run->id);
  em_status st = em_train_config_from_json(&r->cfg, config, err);
  free(config);
  if (st != EM_OK) return em_error_prefix(err, "the recorded config");
  r->threads = run->threads;
  if (run->threads > 0) r->cfg.threads = run->threads;
  r->device = r->cfg.device;
  r->cfg.checkpoint_dir[0] = '\0';
  r->spec_text = dup_or_null(run->spec_json);
  snprintf(r->model, sizeof r->model, "%s", run->model ? run->model : em_spec_name(r->spec));
  return EM_OK;
}

/* The newest valid checkpoint, saying so when newer ones were passed
 * over as damaged. */
static em_status pick_checkpoint(em_store *s, const em_run *run, const em_job_hooks *h,
                                 em_resume *r, em_error *err) {
  long long id = (long long)run->id;
  /* a killed run's newest checkpoint may be a file its writer never
   * recorded (the registry records it when it finds the run killed; this
   * covers runs found killed before that) */
  if (run->status == EM_RUN_KILLED) {
    int64_t adopted;
    em_error e = {0};
    if (em_store_adopt_checkpoints(s, run->id, &adopted, &e) != EM_OK) em_job_say(h, "%s", e.msg);
  }
  if (em_store_checkpoint_latest_valid(s, run->id, &r->ckpt, err) != EM_OK)
    return em_error_prefix(err, "run %lld cannot be resumed", id);
  em_checkpoint_row *rows = NULL;
  int n = 0;
  if (em_store_checkpoints_list(s, run->id, &rows, &n, NULL) == EM_OK) {
    int newer = 0;
    for (int i = 0; i < n; i++)
      if (rows[i].step > r->ckpt.step || (rows[i].step == r->ckpt.step && rows[i].id > r->ckpt.id))
        newer++;
    if (newer)
      em_job_say(h, "%d newer checkpoint%s of run %lld %s damaged or missing; resuming from step %lld",
          newer, newer == 1 ? "" : "s", id, newer == 1 ? "is" : "are", (long long)r->ckpt.step);
    em_checkpoint_rows_free(rows, n);
  }
  return EM_OK;
}

/* What the checkpoint says the trainer had reached. */
static void apply_checkpoint(const em_job_hooks *h, em_resume *r) {
  long long id = (long long)r->parent;
  /* A run that halved its batch goes on at the halved batch: its position
   * (batches done in the epoch) counts in that size, and an uninterrupted
   * run would have kept it. */
  int reached = checkpoint_batch_size(r->ckpt.path);
  if (reached > 0 && reached != r->cfg.batch_size) {
    em_job_say(h, "run %lld had halved its batch from %d to %d (--auto-batch): going on at %d", id,
        r->cfg.batch_size, reached, reached);
    r->cfg.batch_size = reached;
  }
  /* What a pause changed (the workbench's lr and gradient clipping, kept
   * in the checkpoint: the trainer's config and its lr scale) goes on, and
   * the new run records the settings it trains with, not the parent's
   * recorded ones. The trainer keeps the base lr and the scale, as an
   * uninterrupted run would. */
  em_train_config at;
  if (checkpoint_config(r->ckpt.path, &at)) {
    if (at.clip_grad_norm != r->cfg.clip_grad_norm)
      em_job_say(h, "run %lld's gradient clipping was changed while it trained (%g -> %g): going on "
             "at %g", id, r->cfg.clip_grad_norm, at.clip_grad_norm, at.clip_grad_norm);
    r->cfg.optim.lr = at.optim.lr;
    r->cfg.clip_grad_norm = at.clip_grad_norm;
  }
  r->lr_scale = checkpoint_lr_scale(r->ckpt.path);
}

em_status em_store_resume_prepare(em_store *s, int64_t id, const em_job_hooks *h, em_resume *r,
                                  em_error *err) {
  memset(r, 0, sizeof *r);
  r->world = 1;
  r->lr_scale = 1;
  em_run run;
  memset(&run, 0, sizeof run);
  em_status st = em_store_run_get(s, id, &run, err);
  if (st == EM_OK) st = check_status(s, &run, h, err);
  if (st == EM_OK) st = read_recorded(s, &run, h, r, err);
  if (st == EM_OK) {
    r->parent = id;
    st = pick_checkpoint(s, &run, h, r, err);
  }
  if (st == EM_OK) {
    rollback_point(s, r);
    apply_checkpoint(h, r);
  }
  em_run_clear(&run);
  return st;
}

void em_resume_clear(em_resume *r) {
  em_spec_free(r->spec);
  free(r->spec_text);
  free(r->rollback_path);
  em_checkpoint_row_clear(&r->ckpt);
  memset(r, 0, sizeof *r);
}

char *em_job_config_without_world(const char *config_json, int *world) {
  *world = 1;
  json_t *o = json_loads(config_json, 0, NULL);
  if (!o) return strdup(config_json);
  json_t *w = json_object_get(o, "ddp_world");
  if (json_is_integer(w)) *world = (int)json_integer_value(w);
  json_object_del(o, "ddp_world");
  char *txt = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return txt ? txt : strdup(config_json);
}
