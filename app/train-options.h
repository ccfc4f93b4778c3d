/* train-options.h: the flags of `ember train` and `ember eval`.
 *
 * Flags are collected first and applied over the configuration later,
 * in the order given, because the defaults they override come from the
 * spec (or, for --resume, from the registry). Training settings are kept
 * as a list so that --resume can name the first one it must refuse. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-train.h"

typedef struct {
  int code;
  const char *arg;
  const char *flag; /* "--lr", for messages */
} cli_setting;

#define CLI_MAX_SETTINGS 128

typedef struct {
  const char *spec_path; /* the positional SPEC; NULL when absent */
  const char *init, *save, *weights;
  const char *registry, *name, *checkpoint_dir, *resume;
  bool quiet, no_record, threads_given;
  bool device_given;        /* --device or --auto-batch (both allowed with --resume) */
  const char *device;       /* --device's text, for messages; NULL when absent */
  bool no_preflight;        /* --no-preflight: skip the device memory estimate */
  const char *quantize;     /* --quantize MODE (eval only); NULL when absent */
  bool report;              /* --report (eval only): the evaluation report */
  int keep_checkpoints;     /* --keep-checkpoints; default 3 */
  bool keep_given;          /* --keep-checkpoints was given */
  int64_t stop_after_steps; /* --stop-after-steps (for tests); 0: off */
  const char *profile;      /* --profile FILE: a Chrome trace of a window of batches */
  int64_t profile_steps;    /* --profile-steps; 0: the default window (20) */
  bool detect_anomaly;      /* --detect-anomaly */
  bool ddp;                 /* --ddp: data-parallel over the MPI job's ranks */
  int world;                /* --ddp: the number of ranks (set by the command); else 1 */
  /* every flag that changes the configuration, in order */
  cli_setting settings[CLI_MAX_SETTINGS];
  int n_settings;
} cli_train_opts;

/* With --no-record: warns of the flags that then do nothing (--name,
 * --registry, --keep-checkpoints; rollback without --checkpoint-dir). */
void cli_train_opts_warn_unrecorded(const cli_train_opts *o);
/* Parses argv[2..] (cmd: "train" or "eval", for messages). Bad flags and
 * values are usage errors (exit 2); --help prints the usage (exit 0). */
void cli_train_opts_parse(int argc, char **argv, const char *cmd, cli_train_opts *o);
/* Applies the settings over cfg in order (values were checked when
 * parsed; an unknown schedule name or optimiser exits with 2). */
void cli_train_opts_apply(const cli_train_opts *o, em_train_config *cfg);
/* The first setting that --resume must refuse (everything that changes
 * what is computed: all but --threads, --device and --auto-batch), or
 * NULL. */
const char *cli_train_opts_resume_conflict(const cli_train_opts *o);
/* The first flag `ember eval` would not use (everything but --batch,
 * --threads, --dataset, --data-dir, --device and --label-smoothing among
 * the settings, and the training-only flags), or NULL: eval refuses it
 * rather than ignore it (--amp bf16 or --limit 5 evaluated in f32 on the
 * whole test set, silently). */
const char *cli_train_opts_eval_conflict(const cli_train_opts *o);
/* Exits with 2 when --amp-init-scale was given without the loss scaler
 * (it would be ignored). */
void cli_train_opts_check_amp(const cli_train_opts *o, const em_train_config *cfg);
/* Exits with 2 and the reason when cfg's device cannot be used here (no
 * CUDA backend in this build, no GPU, cuda:N out of range). */
void cli_train_opts_check_device(const cli_train_opts *o, const em_train_config *cfg);
