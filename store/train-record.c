/* train-record.c: a job's new run and its continuation of a checkpoint
 * (em-train-job.h). */
#include "em-train-job.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "store-private.h"

char *em_job_config_json(const em_train_config *cfg, double lr_scale, int world) {
  em_train_config recorded = *cfg;
  if (lr_scale > 0) recorded.optim.lr *= lr_scale;
  char *text = em_train_config_to_json(&recorded);
  if (!text || world <= 1) return text;
  json_t *o = json_loads(text, 0, NULL);
  if (!o) return text;
  json_object_set_new(o, "ddp_world", json_integer(world));
  char *with = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!with) return text;
  free(text);
  return with;
}

/* A resumed run reads its dataset's files again: when their SHA-256 is
 * not the one the run it continues recorded, say so (the result will not
 * be the uninterrupted run's). Datasets without files ("unknown") are
 * not compared. */
static void warn_if_data_changed(em_store *s, int64_t parent, int64_t run, const em_run_start *o) {
  em_run a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  if (o->warn && em_store_run_get(s, parent, &a, NULL) == EM_OK &&
      em_store_run_get(s, run, &b, NULL) == EM_OK && em_dataset_sha_known(a.dataset_sha256) &&
      b.dataset_sha256 && strcmp(a.dataset_sha256, b.dataset_sha256)) {
    char line[512];
    snprintf(line, sizeof line,
             "the dataset's files changed since run %lld read them (SHA-256 %.12s... then, "
             "%.12s... now): the resumed run trains on other data than an uninterrupted run "
             "would", (long long)parent, a.dataset_sha256, b.dataset_sha256);
    o->warn(o->user, line);
  }
  em_run_clear(&a);
  em_run_clear(&b);
}

em_status em_store_job_record(em_store *s, const em_run_start *o, em_train_config *cfg,
                              double lr_scale, int world, int64_t parent, int64_t *run,
                              em_error *err) {
  *run = 0;
  char *config_json = em_job_config_json(cfg, lr_scale, world); /* checkpoint_dir still empty */
  em_run_start rs = *o;
  rs.config_json = config_json ? config_json : "{}";
  rs.parent_run = parent;
  em_status st = em_store_run_start(s, &rs, cfg, run, err);
  free(config_json);
  if (st == EM_OK && parent) warn_if_data_changed(s, parent, *run, o);
  return st;
}

em_status em_store_job_resume_trainer(em_store *s, int64_t run, const em_resume *r, int world,
                                      em_trainer *tr, const em_job_hooks *h, em_error *err) {
  if (em_trainer_load_checkpoint(tr, r->ckpt.path, err) != EM_OK) {
    if (r->world > 0 && r->world != world) /* the likely cause: say it */
      em_error_prefix(err, "run %lld trained on %d rank%s and this part runs on %d, so the "
                      "batches of an epoch are not those its checkpoint counted (resume a "
                      "checkpoint from the middle of an epoch on %d rank%s: mpirun -np %d "
                      "... --ddp)", (long long)r->parent, r->world, r->world == 1 ? "" : "s",
                      world, r->world, r->world == 1 ? "" : "s", r->world);
    return err->status;
  }
  if (r->set_rollback) em_trainer_set_rollback_point(tr, r->rollback_path, r->rollback_step);
  if (!s || !run) return EM_OK; /* not recorded (--no-record, or a rank other than 0) */
  char detail[160];
  snprintf(detail, sizeof detail, "resumed from run %lld step %lld", (long long)r->parent,
           (long long)r->ckpt.step);
  em_error e = {0};
  if (em_store_run_event(s, run, r->ckpt.step, "resumed", detail, &e) != EM_OK ||
      (snprintf(detail, sizeof detail, "resumed from run %lld step %lld as run %lld",
                (long long)r->parent, (long long)r->ckpt.step, (long long)run),
       em_store_run_event(s, r->parent, r->ckpt.step, "resumed", detail, &e)) != EM_OK)
    em_job_say(h, "the resume is not recorded as a run event: %s", e.msg);
  return EM_OK;
}
