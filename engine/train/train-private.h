/* train-private.h: what the files of engine/train share: the trainer's
 * state (trainer.c runs it, checkpoint-*.c save and restore it), the
 * divergence watchdog, typed JSON fields for the config readers, and
 * SHA-256 for the spec fingerprint. */
#pragma once

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "em-dist.h"
#include "em-rng.h"
#include "em-train.h"
#include "../plugin/plugin-host.h"

/* ---- the divergence watchdog (watchdog.c) ------------------------------- */
#define EM_WATCHDOG_WINDOW 50 /* norms remembered */
#define EM_WATCHDOG_WARMUP 20 /* norms seen before spikes count */

typedef enum {
  EM_WATCH_OK,
  EM_WATCH_LOSS_NONFINITE,
  EM_WATCH_NORM_NONFINITE,
  EM_WATCH_NORM_SPIKE,
} em_watch_verdict;

typedef struct {
  double spike_factor;            /* 0: spikes are not checked */
  double norms[EM_WATCHDOG_WINDOW]; /* ring of the last norms */
  int n;                          /* how many of norms hold values */
  int head;                       /* where the next norm goes */
  int64_t seen;                   /* norms accepted since the last reset */
} em_watchdog;

void em_watchdog_init(em_watchdog *w, double spike_factor);
void em_watchdog_reset(em_watchdog *w);
/* A micro-batch's loss: EM_WATCH_LOSS_NONFINITE when NaN or infinite. */
em_watch_verdict em_watchdog_check_loss(const em_watchdog *w, double loss);
/* An optimiser step's global gradient norm: non-finite, or above
 * spike_factor x the largest of the remembered norms once WARMUP norms
 * were seen. A norm that passes is remembered; one that fails is not. */
em_watch_verdict em_watchdog_check_norm(em_watchdog *w, double norm);
/* The largest remembered norm (0 when none). */
double em_watchdog_max(const em_watchdog *w);

/* ---- the trainer's state -------------------------------------------------- */
/* Where the run stands, between optimiser steps: epoch `epoch`, whose
 * first `batch` batches are done (batch == batches per epoch: all done,
 * the epoch's end not yet handled), `step` optimiser steps so far, and
 * the epoch's running loss sum over those batches. */
typedef struct {
  int64_t epoch, batch, step;
  double loss_sum;
} em_train_position;

struct em_trainer {
  em_model *model;
  em_train_config cfg;
  const em_dataset *train, *test;
  em_loader *loader;
  em_optimizer *opt;
  int n_params;
  em_tensor **params;
  em_tensor **grads; /* (n_params) scratch: the current gradients */
  em_rng rng; /* dropout and other training-time randomness */
  atomic_bool stop;
  /* the stop as last agreed (em_trainer_ddp_agree_stop): what the loop
   * decides by, since the flag itself may turn true on one rank just
   * after the ranks agreed it was false */
  bool stop_agreed;
  /* every stop request counts: an evaluation ends early when one comes
   * after it began (one asked before it, during training, lets it run) */
  atomic_uint stop_requests;
  em_train_summary summary;
  int64_t sample_shape[EM_MAX_DIMS + 1];
  int sample_ndim;

  em_train_position pos;
  int micro;        /* micro-batches accumulated since the last step */
  double lr_scale;  /* product of the rollbacks' lr factors */
  int rollbacks;    /* divergence rollbacks so far */
  /* early_stop: the metric's best so far and the evaluations since it
   * (checkpointed, so a resumed run stops where the whole one would) */
  double es_best;
  int64_t es_since;
  bool es_seen, early_stopped;
  em_watchdog watch;
  em_grad_scaler scaler; /* cfg.amp_scaler: dynamic loss scaling (em-amp.h) */
  bool jumped;      /* a checkpoint was loaded: the loop restarts at pos */
  bool running;     /* inside em_trainer_run */
  char last_ckpt[4096]; /* the checkpoint last written or loaded; "" none */
  int64_t last_ckpt_step; /* the step it holds the state after */
  char *last_ckpt_meta; /* the metadata this trainer last wrote there; NULL after a load */
  char ckpt_dir[4096];  /* cfg.checkpoint_dir made absolute at run start */
  char ckpt_path[4096]; /* the file of the CHECKPOINT event being sent */
  em_train_diagnostics diag;
  em_comm *comm;    /* data-parallel: the ranks (borrowed), or NULL */
  em_ddp *ddp;      /* its gradient bucketer */
};

/* A loader over t->train as t->cfg asks, at batch_size; with comm (NULL:
 * none), comm's rank's share of every epoch (trainer.c). */
em_loader *em_trainer_loader_new(const em_trainer *t, const em_comm *comm, int batch_size,
                                 em_error *err);

/* ---- data-parallel (trainer-ddp.c); each is EM_OK without a communicator */
/* At the start of a run: rank 0's weights and buffers everywhere, and
 * the same position on every rank. */
em_status em_trainer_ddp_begin_run(em_trainer *t, em_error *err);
/* Between optimiser steps: a stop asked on any rank stops all. Sets
 * t->stop_agreed (without a communicator: the flag as it is now), which
 * callers decide by, never the flag read again. */
em_status em_trainer_ddp_agree_stop(em_trainer *t, em_error *err);
/* The micro-batch's loss averaged over the ranks. */
em_status em_trainer_ddp_mean_loss(em_trainer *t, double *loss, em_error *err);
/* The test set's loss and accuracy (sharded over the ranks). Alone (no
 * ranks), a stop request made while it runs ends it between batches:
 * *cut_short is then true and loss and accuracy are not set. With ranks
 * the evaluation is a collective and runs to its end. */
em_status em_trainer_evaluate(em_trainer *t, double *loss, double *accuracy, bool *cut_short,
                              em_error *err);
/* em_evaluate, with gather (NULL: none) exchanging the outputs kept for
 * the plugins' metrics before they are computed (a data-parallel
 * evaluation of one shard; plugin/plugin-host.h). */
em_status em_evaluate_gathered(em_model *m, const em_dataset *ds, int batch_size,
                               em_loss_kind loss, double label_smoothing,
                               em_eval_gather_fn gather, void *gather_user, double *mean_loss,
                               double *accuracy, em_error *err);
/* em_evaluate that asks go_on(go_user) before each batch: false ends it
 * there, with *cut_short true (mean_loss and accuracy untouched). */
em_status em_evaluate_until(em_model *m, const em_dataset *ds, int batch_size, em_loss_kind loss,
                            double label_smoothing, bool (*go_on)(void *go_user), void *go_user,
                            bool *cut_short, double *mean_loss, double *accuracy, em_error *err);

/* ---- tensors between the training device and the host (device-copy.c) --- */
/* A persistent CPU copy of a device tensor, *owned set: free it with
 * em_tensor_free; t itself when it is on the CPU. NULL when host memory
 * runs out. (The other way, em_tensor_copy_ uploads.) */
em_tensor *em_train_host_copy(const em_tensor *t, bool *owned, em_error *err);

/* ---- checkpoints (checkpoint-*.c) ------------------------------------------ */
#define EM_CKPT_FORMAT "ember-checkpoint"
#define EM_CKPT_VERSION "1"

/* The spec as JSON with sorted keys (malloc'd; NULL when out of memory),
 * and the model part of such a text (without "name", "training", "loss"
 * and "description"), which loading compares with the model's. */
char *em_checkpoint_spec_text(const em_spec *spec);
char *em_checkpoint_model_text(const char *spec_text);

typedef struct {
  const char *name;
  const em_tensor *t;
} em_ckpt_tensor;

typedef struct {
  const char *key, *value;
} em_ckpt_meta;

int em_ckpt_tensor_cmp(const void *a, const void *b); /* by name, for qsort and bsearch */
/* Sorts both lists in place and returns the CRC-32 of their contents
 * (each tensor's name, dtype, shape and data; each metadata key and value
 * but "checksum"). */
uint32_t em_checkpoint_checksum(em_ckpt_tensor *ts, int n, em_ckpt_meta *meta, int n_meta);
/* The same checksum in parts, for a file read one tensor at a time:
 * start, each tensor in name order (strcmp), then the metadata (sorted in
 * place). */
uint32_t em_checkpoint_crc_start(void);
uint32_t em_checkpoint_crc_tensor(uint32_t crc, const char *name, const em_tensor *t);
uint32_t em_checkpoint_crc_meta(uint32_t crc, em_ckpt_meta *meta, int n_meta);

/* em_checkpoint_verify, handing each tensor to take as it is read (in
 * name order; t is the file's, freed after the call): a checkpoint loaded
 * as weights is checked and taken in one pass over the file. An error
 * from take ends the check with it. */
typedef em_status (*em_ckpt_take_fn)(const char *name, const em_tensor *t, void *ctx,
                                     em_error *err);
em_status em_checkpoint_verify_each(const char *path, em_ckpt_take_fn take, void *ctx,
                                    int64_t *step, int64_t *epoch, em_error *err);

/* Makes dir (and its parents) when missing and puts its absolute path in
 * abs. */
em_status em_checkpoint_dir_prepare(const char *dir, char *abs, size_t cap, em_error *err);
/* A checkpoint's file name inside dir: "step-<step>", "eval-e<epoch>-step-
 * <step>" (epoch: the one just finished, from 1), "<kind>-step-<step>". */
em_status em_checkpoint_path(char *out, size_t cap, const char *dir, const char *kind,
                             int64_t epoch, int64_t step, em_error *err);
/* Restores t from path. keep_scale: leave lr_scale and the rollback count
 * as they are (a rollback) instead of taking the file's. */
em_status em_trainer_restore(em_trainer *t, const char *path, bool keep_scale, em_error *err);

/* The divergence policy (watchdog.c), when the watchdog fired on value
 * (the loss or the gradient norm) at the step being made. Rolling back:
 * restores the last checkpoint, lowers the lr scale, resets the watchdog
 * and returns EM_OK. Stopping (policy, no checkpoint, max_rollbacks, or
 * the rollback failed): returns the error. msg says what happened and
 * what was done about it, in both cases. */
em_status em_trainer_diverged(em_trainer *t, em_watch_verdict v, double value, char *msg,
                              size_t cap, em_error *err);

/* ---- typed JSON fields (json-fields.c) ----------------------------------
 * Each fills *out or returns EM_ERR_INVALID with a message naming
 * "<sec>"."<key>" and what was expected. */
const char *em_json_kind(const json_t *v); /* "a string", "an integer", ... */
em_status em_json_want_num(const char *sec, const char *key, const json_t *v, double *out,
                           em_error *err);
em_status em_json_want_int(const char *sec, const char *key, const json_t *v, int64_t lo,
                           int64_t hi, int64_t *out, em_error *err);
em_status em_json_want_bool(const char *sec, const char *key, const json_t *v, bool *out,
                            em_error *err);
em_status em_json_want_str(const char *sec, const char *key, const json_t *v, char *out,
                           size_t n, em_error *err);

/* ---- the settings table's private half (settings.c, setting-json.c) -- */
/* The table's defaults, for the rows whose default is not their owner's. */
void em_settings_apply_defaults(em_train_config *c);
/* Every row's range (INT, NUM) and enum (CHOICE); the message names the
 * key, the range and the value. */
em_status em_settings_check_ranges(const em_train_config *c, em_error *err);
/* One row's value from v into c. ranged: the spec's reading (the row's
 * range, and a seed as a whole number); else the config JSON's, which
 * keeps any config, valid or not (the type's limits only; a seed may be a
 * decimal string). Messages name "<sec>"."<key>". */
em_status em_setting_from_json(const em_setting *s, const char *sec, const char *key,
                               const json_t *v, bool ranged, em_train_config *c, em_error *err);
/* A new JSON value of one row of c; NULL when it has none (a number that
 * is not finite, an enum out of range). */
json_t *em_setting_to_json(const em_setting *s, const em_train_config *c);

/* ---- a batch as tensors (batch.c) ------------------------------------------ */
/* The samples of b in the current scope: (N, ...sample) f32 over the
 * loader's memory, or a copy as i64 ids for a dataset of token samples. */
em_tensor *em_train_batch_x(const em_dataset *ds, const em_batch *b);
/* Its labels over the loader's memory, on the host: (N), or (N, T) for a
 * dataset of T labels per sample. */
em_tensor *em_train_batch_y(const em_dataset *ds, const em_batch *b);

#define EM_TRY(x)                  \
  do {                             \
    em_status st_ = (x);           \
    if (st_ != EM_OK) return st_;  \
  } while (0)

/* ---- diagnostics (diagnostics.c) ------------------------------------------ */
typedef struct {
  int64_t batches;     /* micro-batches trained in this run */
  bool profiling, profiled, leak_reported;
} em_diag_state;
void em_diag_begin(em_trainer *t, em_diag_state *d);
void em_diag_batch_begin(em_trainer *t, em_diag_state *d, em_error *err);
/* Fills ev's memory figures; *table (malloc'd op table) when the profiled
 * window just ended and its trace is written; warning (a leak report) or "". */
em_status em_diag_batch_end(em_trainer *t, em_diag_state *d, em_train_event *ev, char **table,
                            char *warning, size_t cap, em_error *err);
/* Ends the profiled window now if it is open (before an evaluation: the
 * window holds training steps only); *table as for em_diag_batch_end. */
em_status em_diag_window_end(em_trainer *t, em_diag_state *d, char **table, em_error *err);
em_status em_diag_end(em_trainer *t, em_diag_state *d, char **table, em_error *err);
