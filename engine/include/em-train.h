/* em-train.h: the trainer loop shared by the CLI, the GUI and the tests.
 *
 * forward -> loss -> backward -> clip -> optimiser step -> schedule, with
 * periodic evaluation, in whatever thread calls em_trainer_run. Progress
 * goes out through a callback; a stop request comes in through an atomic
 * flag checked between steps. A run trains on the config's device (the
 * CPU, a CUDA GPU, or the reference device: em-device.h). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-amp.h"
#include "em-data.h"
#include "em-dist.h"
#include "em-nn.h"
#include "em-optim.h"

typedef enum { EM_LOSS_CROSS_ENTROPY, EM_LOSS_MSE } em_loss_kind;

typedef enum {
  EM_DIVERGENCE_AUTO,     /* rollback when a checkpoint exists, else stop */
  EM_DIVERGENCE_ROLLBACK, /* restore the last checkpoint, lower the lr, go on */
  EM_DIVERGENCE_STOP,     /* stop with an error that says what happened */
} em_divergence_policy;

typedef struct {
  /* data */
  char dataset[64];   /* "fashion-mnist", "cifar10", "csv", "synthetic", a plugin's */
  char data_dir[512]; /* empty: the dataset's default folder; csv: the file */
  int batch_size;
  int epochs;
  int64_t limit;      /* use only the first N training samples; 0 = all */
  bool shuffle;
  bool drop_last;
  int workers;        /* data-loader threads; 0 = the training thread */
  /* optimisation */
  em_optim_config optim;
  em_schedule schedule; /* lr schedule; total steps filled in at run time */
  double clip_grad_norm; /* 0 = off */
  int accumulate;        /* micro-batches per optimiser step */
  /* loss */
  em_loss_kind loss;
  double label_smoothing;
  /* run */
  uint64_t seed;
  int threads;
  int eval_every; /* epochs between evaluations; 0 = only at the end */
  /* "test_loss:3" or "test_accuracy:5": stop (a completed run) when that
   * evaluation metric has not improved for N evaluations; "" = off */
  char early_stop[48];
  /* checkpoints (see em_trainer_save_checkpoint) */
  int64_t checkpoint_every;  /* optimiser steps between checkpoints; 0 = none on a timer */
  char checkpoint_dir[512];  /* where the trainer writes them; empty = no checkpoints */
  /* divergence watchdog: the loss becomes NaN/Inf, or the gradient norm
   * exceeds spike_factor times the largest of the last 50 steps' norms
   * (after 20 steps) */
  em_divergence_policy on_divergence;
  double divergence_lr_factor; /* rollback multiplies the lr by this; default 0.5 */
  double divergence_spike_factor; /* default 10 */
  int max_rollbacks;           /* then stop with an error; default 5 */
  /* mixed precision (em-amp.h): bf16 autocasts forward and loss; f16 is
   * a GPU mode, refused on the CPU; off (the default) changes nothing */
  em_amp_mode amp;
  /* dynamic loss scaling with GradScaler's rules: off by default for bf16,
   * as in PyTorch; its state goes into checkpoints */
  bool amp_scaler;
  /* the scaler's first scale (GradScaler's init_scale); default 65536 */
  double amp_init_scale;
  /* where the model trains (em-device.h): the CPU (zero, the default), a
   * CUDA GPU or the reference device; the trainer moves the model there */
  em_device device;
  /* out of device memory in a step: halve the batch size and go on
   * (instead of stopping the run with the allocator's message) */
  bool auto_batch;
} em_train_config;

void em_train_config_defaults(em_train_config *c);
/* Reads c->early_stop: false when off; the metric's name, whether larger
 * is better and the patience (validate refuses what does not parse). */
bool em_train_early_stop(const em_train_config *c, char *metric, size_t cap, bool *maximize,
                         int *patience);
/* Reads the spec's "training" and "loss" sections over c; unknown keys
 * and wrong types are errors that name the key. */
em_status em_train_config_from_spec(em_train_config *c, const em_spec *spec, em_error *err);
/* The whole config as a JSON object (malloc'd string, free(); NULL when a
 * number is not finite, which JSON cannot hold), and back:
 * from_json(to_json(c)) == c field for field. from_json starts from the
 * defaults (a key that is absent keeps its default), and leaves c as it
 * was on an error; unknown keys and wrong types are errors naming the key.
 * The registry stores this, and --resume rebuilds the run from it. */
char *em_train_config_to_json(const em_train_config *c);
em_status em_train_config_from_json(em_train_config *c, const char *json, em_error *err);
/* Checks ranges (the settings table's, and the rules between fields:
 * nesterov needs momentum, checkpoint_every a folder, ...) before a run. */
em_status em_train_config_validate(const em_train_config *c, em_error *err);
/* The schedule a run follows: c->schedule with the one learning rate,
 * c->optim.lr, as its base (the config's schedule.lr is not read). */
em_schedule em_train_config_schedule(const em_train_config *c);

/* ---- the training settings: one table -----------------------------------
 * Every setting of em_train_config is one row of one table (settings.c):
 * its config-JSON key, its key in the spec, its type and range, its
 * default, its command-line flag and help. The spec reader, the JSON
 * round trip, validate, `ember train`'s flags and --help, the workbench
 * form's bounds and every "unknown key; known: ..." list are derived from
 * it, so a new setting is one row (plus its field in em_train_config). */
typedef enum {
  EM_SETTING_INT,     /* int or int64_t (by size), a whole number in [min, max] */
  EM_SETTING_NUM,     /* a finite double in [lo, hi] */
  EM_SETTING_BOOL,
  EM_SETTING_STR,     /* char[size] */
  EM_SETTING_CHOICE,  /* an enum: one of n_choices names, choice_name(i) */
  EM_SETTING_SEED,    /* uint64_t; [min, max] in the spec and the CLI; the
                         config JSON holds any, above 2^63 - 1 as a string */
  EM_SETTING_DEVICE,  /* em_device: "cpu", "cuda", "cuda:N", "ref" */
  EM_SETTING_PAIR,    /* the spec's "betas": two doubles from offset on */
  EM_SETTING_METRICS, /* the spec's "metrics": plugins' metrics, checked, not kept */
} em_setting_type;

enum {
  EM_SETTING_SPEC = 1 << 0,      /* read from the spec (spec_section.spec_key) */
  EM_SETTING_JSON = 1 << 1,      /* a key of the config JSON (group.key) */
  EM_SETTING_SPARSE = 1 << 2,    /* written to the JSON only away from the default,
                                    so that a run without it is stored as before */
  EM_SETTING_RESUMABLE = 1 << 3, /* --resume may change it: where a run runs,
                                    not what it computes */
  EM_SETTING_EVAL = 1 << 4,      /* `ember eval` reads it */
  EM_SETTING_FIRST = 1 << 5,     /* read before the others: choosing it resets
                                    the settings it owns (the optimiser) */
  EM_SETTING_OWN_DEFAULT = 1 << 6, /* its default is its owner's (the optimiser's
                                      or the schedule's), not def */
};

typedef struct {
  const char *key;          /* in the config JSON, inside group */
  const char *group;        /* NULL: the JSON's top level; "optim", "schedule" */
  const char *spec_section; /* "training", "schedule" (the spec's training.schedule
                               object) or "loss" */
  const char *spec_key;
  em_setting_type type;
  unsigned flags;
  size_t offset, size;      /* in em_train_config */
  int64_t min, max;         /* INT, SEED */
  double lo, hi;            /* NUM, PAIR */
  double def;               /* INT, NUM, BOOL, CHOICE */
  const char *def_str;      /* STR */
  const char *(*choice_name)(int i); /* CHOICE; NULL past the last. STR: the names it
                                        knows, for the help (any other is the
                                        reader's to refuse: the dataset) */
  void (*choose)(em_train_config *c, int v); /* CHOICE: sets the field itself (NULL:
                                                stored as it is) */
  const char *flag;         /* `ember train --flag`; NULL: none */
  const char *metavar;      /* "N", "X", "NAME"; NULL: a switch that sets flag_sets */
  bool flag_sets;
  const char *help;         /* the flag's help (lines after the first start "\n");
                               NULL on a CHOICE row: its names, "a | b | c"; a
                               STR row with names: the names, then " | " this */
} em_setting;

/* The table, in the config JSON's order. */
const em_setting *em_settings(int *n);
/* The row of a config-JSON key (group NULL: the top level), of a spec
 * key, of a flag ("lr" for --lr); NULL when there is none. */
const em_setting *em_setting_by_key(const char *group, const char *key);
const em_setting *em_setting_by_spec(const char *section, const char *key);
const em_setting *em_setting_by_flag(const char *flag);

/* Typed access to a row's field of c. set_choice on the optimiser's row
 * (its choose) resets the optimiser's settings to the new kind's defaults
 * when the kind changes (the spec's lr was chosen for its own optimiser). */
int64_t em_setting_get_int(const em_setting *s, const em_train_config *c);
void em_setting_set_int(const em_setting *s, em_train_config *c, int64_t v);
double em_setting_get_num(const em_setting *s, const em_train_config *c);
void em_setting_set_num(const em_setting *s, em_train_config *c, double v);
bool em_setting_get_bool(const em_setting *s, const em_train_config *c);
void em_setting_set_bool(const em_setting *s, em_train_config *c, bool v);
int em_setting_get_choice(const em_setting *s, const em_train_config *c);
void em_setting_set_choice(const em_setting *s, em_train_config *c, int v);
/* Text into a row's field (STR: too long is an error; CHOICE: one of the
 * names; DEVICE: em_device_parse). Messages start with what: "--amp". */
em_status em_setting_set_text(const em_setting *s, em_train_config *c, const char *what,
                              const char *text, em_error *err);
/* The names of a CHOICE row, joined with sep ("sgd, adam, adamw"). */
void em_setting_choices(const em_setting *s, const char *sep, char *buf, size_t n);
/* The keys of a spec section, or of a JSON group (NULL: the top level),
 * comma-separated: what "unknown key" messages list. */
void em_settings_spec_keys(const char *section, char *buf, size_t n);
void em_settings_json_keys(const char *group, char *buf, size_t n);
/* The range of a number row as doubles (INT, SEED: min, max), for a form. */
void em_setting_bounds(const em_setting *s, double *lo, double *hi);

typedef enum {
  EM_EVENT_START,
  EM_EVENT_STEP,
  EM_EVENT_EVAL,
  EM_EVENT_EPOCH_END,
  EM_EVENT_DONE,
  EM_EVENT_CHECKPOINT, /* a checkpoint file was written: path, checkpoint_kind */
  EM_EVENT_DIVERGENCE, /* the watchdog fired: message; rolled back or stopping */
  EM_EVENT_WARNING,    /* message: e.g. a probable memory leak */
  EM_EVENT_PROFILE,    /* the profiled window ended: path (the trace), message (op table) */
} em_event_kind;

typedef struct {
  em_event_kind kind;
  int64_t epoch;          /* 0-based */
  int64_t epochs;
  int64_t step;           /* optimiser steps so far */
  int64_t batch;          /* batch within the epoch, 1-based */
  int64_t batches_per_epoch;
  int64_t total_steps;
  double loss;            /* STEP: the optimiser step's (the mean of its
                             micro-batches' with accumulation), or mid-
                             accumulation this batch's; EPOCH_END: mean
                             over the epoch */
  bool step_end;          /* STEP: this batch ended an optimiser step (with
                             accumulate N, N - 1 of N do not: they carry the
                             steps so far; recorders and step timers skip them) */
  double lr;
  double grad_norm;       /* STEP ending an optimiser step: the global
                             gradient norm (before clipping); else 0 */
  double samples_per_sec; /* training throughput so far (evaluation excluded) */
  double elapsed_s;
  double eta_s;
  double test_loss, test_accuracy; /* EVAL */
  int64_t test_samples;
  /* CHECKPOINT: the file, and "step" (every checkpoint_every steps),
   * "eval" (after an evaluation; test_loss/test_accuracy are its metrics)
   * or "final" (end of the run). DIVERGENCE: what happened and what the
   * trainer does about it. */
  const char *path;
  const char *checkpoint_kind;
  const char *message;
  double lr_scale; /* product of the rollbacks' lr factors so far (1 = none) */
  /* STEP: the allocator's figures after the step (em_memory_stats; those
   * of the training device when it is not the CPU) */
  int64_t mem_allocated, mem_reserved, mem_peak;
  /* WARNING after an out-of-memory with auto_batch: the new batch size */
  int64_t batch_size;
} em_train_event;

/* Return false to ask the trainer to stop after this event. */
typedef bool (*em_train_callback)(const em_train_event *ev, void *user);

typedef struct em_trainer em_trainer;

typedef struct {
  int epochs;
  int64_t steps;
  double train_seconds;
  double train_samples_per_sec;
  double final_train_loss;
  double test_loss, test_accuracy;
  bool evaluated;
  bool stopped; /* ended by a stop request */
  bool early_stopped; /* ended by early_stop (a completed run, before its last epoch) */
  /* labels per training sample: 0 for a class label; T for a label per
   * position (a language model's: the losses and accuracy are per token,
   * and a sample is T tokens) */
  int64_t target_len;
} em_train_summary;

/* The trainer borrows model, datasets and config for its lifetime. test
 * may be NULL (no evaluation). It moves the model to c->device (which the
 * caller checked with em_device_check, and sized with em_train_preflight
 * if it wanted to); out of that device's memory during the run, see
 * auto_batch. */
em_trainer *em_trainer_new(em_model *m, const em_train_config *c, const em_dataset *train,
                           const em_dataset *test, em_error *err);
/* Runs from the trainer's position (the start, or a loaded checkpoint) to
 * the configured epochs. With checkpoint_dir set (created if missing):
 * "step-<step>.safetensors" every checkpoint_every optimiser steps,
 * "eval-e<epoch>-step-<step>.safetensors" after each evaluation at an
 * epoch's end, and "final-step-<step>.safetensors" when the run ends or is
 * stopped, each followed by a CHECKPOINT event (absolute path). A
 * divergence the policy does not roll back is EM_ERR_NUMERIC. */
em_status em_trainer_run(em_trainer *t, em_train_callback cb, void *user, em_error *err);
/* Thread-safe; honoured at the next optimiser step (an accumulation in
 * progress is finished), so that the "final" checkpoint can resume. */
void em_trainer_request_stop(em_trainer *t);
/* Changes between steps, from the trainer's thread (the event callback;
 * a GUI pauses a run by blocking in its callback, and changes these
 * there): the lr actually used is the schedule's lr times this scale
 * (which divergence rollbacks also lower, and checkpoints keep); and the
 * gradient clipping norm (0 = off). */
void em_trainer_set_lr_scale(em_trainer *t, double scale);
double em_trainer_lr_scale(const em_trainer *t);
void em_trainer_set_clip_grad_norm(em_trainer *t, double max_norm);
/* The batch size the trainer uses now: the config's, unless the device
 * pre-flight or an out-of-memory with auto_batch lowered it. */
int em_trainer_batch_size(const em_trainer *t);
void em_trainer_summary(const em_trainer *t, em_train_summary *out);
/* Data-parallel training (before em_trainer_run; c borrowed, NULL or a
 * world of 1: single process). Every rank makes its trainer from the same
 * spec, config and datasets and calls this; the config's batch_size is
 * per rank, as in PyTorch. The trainer then reads only its rank's share
 * of each epoch, starts from rank 0's weights, averages the gradients
 * over the ranks (bucketed all-reduces overlapping backward) before
 * clipping and stepping, agrees with the other ranks on stops, evaluates
 * its shard of the test set and reduces the metrics. Divergence stops
 * the run (no rollback). Events carry global figures (loss averaged over
 * the ranks, samples/s of all ranks together). Checkpoints are written by
 * the ranks whose config has a checkpoint_dir (rank 0 alone, normally);
 * every rank resumes by loading the same checkpoint before the run. */
em_status em_trainer_set_comm(em_trainer *t, em_comm *c, em_error *err);
/* The number of ranks (1 without a communicator). */
int em_trainer_world(const em_trainer *t);
/* The bucketer's figures; false without a communicator. */
bool em_trainer_ddp_stats(const em_trainer *t, em_ddp_stats *out);
void em_trainer_free(em_trainer *t);

/* Diagnostics of a run. They are not part of the config: they never change
 * the numbers, and a resumed run need not repeat them. */
typedef struct {
  char trace_path[512]; /* a Chrome trace of the profiled window; "": none */
  bool profile;         /* profile the window even without a trace file */
  int64_t start_batch;  /* batches of this run before the window; default 5 */
  int64_t batches;      /* batches in the window; default 20 */
  bool detect_anomaly;  /* stop at the first op that makes NaN/Inf, naming it */
  int leak_every;       /* batches between leak checks; default 50, 0 = off */
} em_train_diagnostics;
void em_train_diagnostics_defaults(em_train_diagnostics *d);
/* Before em_trainer_run. */
void em_trainer_set_diagnostics(em_trainer *t, const em_train_diagnostics *d);

/* Profiles a window of real training steps of m on train (the trainer's
 * loop: data loading, forward, loss, backward, optimiser step): `warmup`
 * batches, then `steps` profiled ones, then stops. The records stay for
 * em_op_table_build and em_profile_write_trace; `ember profile` and the
 * workbench's "Profile now" share it. The model's weights move. */
typedef struct {
  int warmup;             /* batches before the window (>= 0; ember profile uses 2) */
  int steps;              /* profiled batches; <= 0: 10 */
  bool detect_anomaly;
  const _Atomic int *cancel; /* NULL, or nonzero to stop between batches */
  /* out */
  int steps_done;         /* profiled steps run */
  double step_ms_median, step_ms_mean, last_loss;
  em_memory_stats memory; /* at the end of the window (peak: over it) */
} em_profile_training_options;
em_status em_profile_training(em_model *m, const em_train_config *c, const em_dataset *train,
                              em_profile_training_options *o, em_error *err);

/* ---- checkpoints ----------------------------------------------------------
 * A checkpoint is one safetensors file holding the model's weights and
 * buffers (PyTorch names), the optimiser state ("optim/<name>"), and in
 * its metadata: format "ember-checkpoint" and version, epoch, batch within
 * the epoch and optimiser step (the loader's position: its order is a
 * function of (seed, epoch)), the dropout RNG state, the lr scale left by
 * divergence rollbacks, the running epoch-loss sum, and the spec and config
 * as JSON, and a CRC-32 over all of it. It is written to a temporary file
 * beside path, fsynced, renamed over path and the folder fsynced, so a
 * crash leaves either the old file or the new.
 *
 * Written between steps only (never mid-accumulation). Resuming a trainer
 * made from the same spec, config and datasets from a checkpoint gives
 * weights bit-identical to a run that never stopped (same thread count). */
em_status em_trainer_save_checkpoint(em_trainer *t, const char *path, em_error *err);
/* Before em_trainer_run (or from its callback): the run continues from
 * the checkpoint. Checks the format, the version, the checksum, that every
 * tensor is present with the right shape and dtype, that the position fits
 * this config's batches, and that the checkpoint's spec matches the
 * model's (all of it but "training", "loss" and "description"). A
 * truncated or corrupted file is an EM_ERR_FORMAT error, a mismatch
 * EM_ERR_INVALID; both name the file, and the trainer is left unchanged. */
em_status em_trainer_load_checkpoint(em_trainer *t, const char *path, em_error *err);
/* After loading a "final" checkpoint (the one a stopped run wrote as it
 * stopped), the checkpoint a divergence rolls back to: the one the run
 * had written before it, at `step` (path NULL: none), as the run that
 * never stopped would have it. Without this, the stop's own checkpoint,
 * which an uninterrupted run never wrote, became the rollback target. */
void em_trainer_set_rollback_point(em_trainer *t, const char *path, int64_t step);
/* Reads only a checkpoint's metadata value (NULL-terminated copy into out);
 * EM_ERR_FORMAT when the file is not an Ember checkpoint. */
em_status em_checkpoint_read_meta(const char *path, const char *key, char *out, size_t cap,
                                  em_error *err);

/* Checks a checkpoint file whole, without a trainer: format, version and
 * the checksum over every tensor and metadata entry. On success *step is
 * its optimiser step and *epoch the epoch of the last batch it trained
 * (0-based, as the CHECKPOINT event reports it). EM_ERR_FORMAT (naming
 * the file) for a damaged or foreign file. */
em_status em_checkpoint_verify(const char *path, int64_t *step, int64_t *epoch, em_error *err);
/* The inverse of the names the trainer gives checkpoint files in its
 * folder ("step-<step>", "eval-e<epoch>-step-<step>", "final-step-<step>",
 * "rollback-step-<step>", each ".safetensors"): true with the kind (one
 * of step, eval, final, rollback) and the step for such a name, false
 * for any other (a temporary file, a file of the user's). */
bool em_checkpoint_name_parse(const char *name, char *kind, size_t cap, int64_t *step);

/* Mean loss and accuracy of m over ds in inference mode, on the model's
 * device (em_model_device); out of that device's memory is EM_ERR_NOMEM
 * with the allocator's message. */
em_status em_evaluate(em_model *m, const em_dataset *ds, int batch_size, em_loss_kind loss,
                      double label_smoothing, double *mean_loss, double *accuracy,
                      em_error *err);

/* The loss of a batch: out (N, K) against integer labels y (N); or, with
 * a label per position, out (N, T, K) against y (N, T): cross-entropy's
 * mean over all N T positions. */
em_tensor *em_train_loss(em_loss_kind kind, em_tensor *out, em_tensor *y, double label_smoothing);

/* Weights (parameters and buffers) as safetensors, PyTorch names. Load
 * also reads the model's part of a training checkpoint. */
em_status em_model_save(const em_model *m, const char *path, em_error *err);
em_status em_model_load(em_model *m, const char *path, em_error *err);

/* ---- pre-flight memory estimate (memory-estimate.c) --------------------------
 * Peak training memory from the spec alone: fixed (weights and buffers,
 * gradients, optimiser state) plus per sample (every node's output and
 * its gradient, and what Conv2d / MaxPool2d keep), f32. */
typedef struct {
  int64_t batch;
  int64_t weights_bytes, grads_bytes, optim_bytes;
  int64_t act_bytes;       /* activations and their gradients, x batch */
  int64_t workspace_bytes; /* what ops keep, x batch */
  int64_t fixed_bytes, per_sample_bytes, total_bytes;
  int optim_states; /* tensors of state per parameter: Adam 2, SGD+momentum 1 */
} em_train_memory_estimate;
/* One sample's costs at spec node i: its output's bytes, its FLOPs (an
 * estimate: 2 per weight use for Linear and Conv2d, 0 for Embedding, one
 * per output value otherwise) and the workspace its op keeps till the
 * step ends (Conv2d's unfolded input, MaxPool2d's indices). One table of
 * layer types, engine/train/layer-costs.c; the estimate below and the
 * builder's costs read it. */
typedef struct {
  int64_t act_bytes;
  double flops;
  int64_t workspace_bytes;
} em_node_costs;
void em_spec_node_costs(const em_spec *spec, int i, em_node_costs *out);
void em_train_estimate_memory(const em_spec *spec, const em_train_config *c, int64_t batch,
                              em_train_memory_estimate *out);
/* Before a run on a device (EM_OK at once on the CPU): the estimate at
 * c->batch_size against the device's free memory. *batch gets the batch
 * to start with: c->batch_size when it fits; with auto_batch, the first
 * of its halvings that fits (and note says so); otherwise an EM_ERR_NOMEM
 * refusal that gives the figures and the largest batch that fits. */
em_status em_train_preflight(const em_spec *spec, const em_train_config *c, int *batch,
                             char *note, size_t cap, em_error *err);

/* A classifier's evaluation report over a dataset (eval-report.c): the
 * confusion matrix (row: the true class, column: the predicted one),
 * accuracy and top-k accuracy, calibration in EM_EVAL_BINS bins of
 * confidence (the largest softmax probability) with the expected
 * calibration error, and the EM_EVAL_WORST most confident mistakes. */
#define EM_EVAL_BINS 15
#define EM_EVAL_WORST 32
typedef struct {
  int64_t index; /* the sample's index in the dataset */
  int truth, pred;
  double confidence;
} em_eval_mistake;
typedef struct {
  int classes, top_k;
  int64_t n;
  int64_t *confusion; /* (classes, classes) */
  int64_t top_k_correct;
  double accuracy, top_k_accuracy, ece;
  int64_t bin_n[EM_EVAL_BINS], bin_correct[EM_EVAL_BINS];
  double bin_conf[EM_EVAL_BINS]; /* sums of confidence */
  int n_worst;
  em_eval_mistake worst[EM_EVAL_WORST];
} em_eval_report;
em_status em_eval_report_run(em_model *m, const em_dataset *ds, int batch_size, int top_k,
                             em_eval_report *r, em_error *err);
/* Class c's precision, recall, F1 (0 where undefined) and support. */
void em_eval_report_class(const em_eval_report *r, int c, double *precision, double *recall,
                          double *f1, int64_t *support);
void em_eval_report_clear(em_eval_report *r);

/* The spec's input must be the dataset's sample shape and its output
 * must cover the dataset's classes (exactly, for MSE on one-hot targets).
 * The dataset itself checks each label against its classes. */
em_status em_train_check_fit(const em_spec *spec, const em_dataset *ds, const char *dsname,
                             em_loss_kind loss, em_error *err);

/* Opens the dataset c names (c->dataset from c->data_dir, the training
 * or the test split) for spec's model, and checks that the model fits it
 * (em_train_check_fit). What `ember train`, `eval`, `profile` and the
 * workbench's runs open their data with. */
em_dataset *em_train_open_dataset(const em_spec *spec, const em_train_config *c, bool train,
                                  em_error *err);
