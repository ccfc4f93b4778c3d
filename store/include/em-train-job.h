/* em-train-job.h: a training job's record, the part `ember train` and the
 * workbench share beyond a run's row (em-store.h's em_store_run_start):
 * what a recorded run resumes from, the settings a new run records, and
 * a trainer set going again from the run's checkpoint.
 *
 * The command keeps its flags (what --threads or --device change in a
 * resume, and the warnings about them), its sinks (progress, the JSON
 * summary) and the processes of a data-parallel job; everything that
 * reads or writes the registry for a job is here. Warnings go through a
 * callback; errors come back as an em_error whose text names the run. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-store.h"
#include "em-train.h"

typedef struct {
  void (*warn)(void *user, const char *msg); /* may be NULL: warnings are dropped */
  /* Called before the recorded spec is parsed, which may name a plugin's
   * layers: loads the plugins the run recorded (NULL: none are). */
  em_status (*restore_plugins)(void *user, em_store *s, int64_t run, em_error *err);
  void *user;
} em_job_hooks;

/* What a recorded run resumes from. */
typedef struct {
  int64_t parent;         /* the run continued */
  em_spec *spec;          /* as recorded */
  char *spec_text;
  char model[256];
  /* The recorded settings (checkpoint_dir empty, threads the run's),
   * with what its checkpoint says it had reached: the batch --auto-batch
   * halved to, the lr and gradient clipping a pause changed. */
  em_train_config cfg;
  em_device device;       /* the device it trained on */
  int threads;            /* the threads it recorded (0: none) */
  int world;              /* the ranks it trained on (1 without --ddp) */
  em_checkpoint_row ckpt; /* the newest valid checkpoint */
  double lr_scale;        /* the checkpoint's lr scale (1 when it says none) */
  /* Resuming from a "final" checkpoint: what a divergence rolls back to
   * (rollback_path NULL: nothing), see train-resume.c. */
  bool set_rollback;
  char *rollback_path;
  int64_t rollback_step;
} em_resume;

/* Prepares the resume of run `run` (id > 0): refuses a running or a
 * completed run, warns of a divergence the same settings will repeat,
 * of a second continuation of the same point and of newer checkpoints
 * passed over as damaged, adopts a killed run's unrecorded checkpoint,
 * and fills r (cleared first; em_resume_clear frees it, also after an
 * error). */
em_status em_store_resume_prepare(em_store *s, int64_t run, const em_job_hooks *h, em_resume *r,
                                  em_error *err);
void em_resume_clear(em_resume *r);

/* The settings a run records (malloc'd JSON): cfg's, with a resumed run's
 * effective lr (the base lr times the checkpoint's scale, which the
 * trainer applies) and, for world > 1, "ddp_world". */
char *em_job_config_json(const em_train_config *cfg, double lr_scale, int world);
/* A recorded config without "ddp_world" (malloc'd; NULL out of memory);
 * *world gets it (1 when absent). */
char *em_job_config_without_world(const char *config_json, int *world);

/* Records a new run (em_store_run_start with the settings above) and,
 * for a resume (parent > 0), warns when the dataset's files changed
 * since the parent read them. */
em_status em_store_job_record(em_store *s, const em_run_start *o, em_train_config *cfg,
                              double lr_scale, int world, int64_t parent, int64_t *run,
                              em_error *err);

/* Sets a new trainer going from the resume's checkpoint: its weights,
 * optimiser, schedule and data position, the rollback point, and (run >
 * 0, s not NULL) a "resumed" event on the new run and on the parent.
 * world is the ranks this part runs on, named in the error when the
 * checkpoint's data position does not fit them. */
em_status em_store_job_resume_trainer(em_store *s, int64_t run, const em_resume *r, int world,
                                      em_trainer *tr, const em_job_hooks *h, em_error *err);
