/* train-helpers.h: what the trainer tests share: scratch folders, runs
 * that record their checkpoint events, and bit-for-bit comparison of two
 * checkpoints. */
#pragma once

#include <glib.h>

#include "em-train.h"

/* A fresh folder under the system's temporary folder; th_rm_rf removes it
 * with everything in it. */
char *th_tmpdir(void);
void th_rm_rf(const char *dir);

/* A training setup: spec, config and synthetic datasets. */
typedef struct {
  em_spec *spec;
  em_train_config cfg;
  em_dataset *train, *test;
} th_setup;

void th_setup_init(th_setup *s, const char *spec_json, int64_t n_train, int ndim,
                   const int64_t *shape, int classes);
void th_setup_free(th_setup *s);

/* What a run reported. */
typedef struct {
  GPtrArray *ckpt_paths;   /* char *, in the order written */
  GPtrArray *ckpt_kinds;   /* char * */
  GArray *ckpt_accuracy;   /* double: each CHECKPOINT event's test_accuracy */
  GArray *epoch_losses;    /* double, one per EPOCH_END */
  GArray *epoch_indices;   /* int64_t, the epoch of each EPOCH_END */
  GPtrArray *divergences;  /* char *, each DIVERGENCE message */
  int steps;
  double last_lr_scale;
  /* Test hooks, called on every event when set. */
  bool (*hook)(em_trainer *t, const em_train_event *ev, void *user);
  void *hook_user;
  em_trainer *trainer;
} th_record;

void th_record_init(th_record *r);
void th_record_clear(th_record *r);

/* Runs s's config (checkpoints into dir when dir is not NULL), from the
 * checkpoint `resume` when not NULL, on a model initialised with
 * model_seed. Returns the run's status (err filled). */
em_status th_run(th_setup *s, const char *dir, const char *resume, uint64_t model_seed,
                 th_record *rec, em_error *err);

/* The path of the checkpoint of kind (and, for "step", step) that the run
 * wrote, or NULL. */
const char *th_find(const th_record *r, const char *kind, int64_t step);

/* Every tensor (bytes) and the run-state metadata of a and b are equal. */
void th_assert_same_checkpoint(const char *a, const char *b);
