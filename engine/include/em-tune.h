/* em-tune.h: hyperparameter sweeps, the part with no processes or
 * registry in it: a sweep's description, its samplers and its pruning
 * rules. The runner (app/sweep-runner.c) and the workbench use them; the
 * registry keeps the state (em-store.h's sweeps).
 *
 * A description (JSON):
 *   {"spec": "data/models/fmnist-mlp.json",      the base spec (a path)
 *    "parameters": {"training.lr": {"low": 1e-4, "high": 0.3, "log": true},
 *                   "training.batch_size": [64, 128],          a grid list
 *                   "nodes.fc1.out_features": {"choice": [128, 256]},
 *                   "training.momentum": {"low": 0.5, "high": 0.99}},
 *    "sampler": "grid" | "random" | "tpe",
 *    "metric": "test_accuracy", "direction": "maximize",
 *    "trials": 8, "time_budget_s": 600, "seed": 0,
 *    "pruner": {"type": "asha", "min_epochs": 1, "reduction": 3}
 *              | {"type": "median", "startup": 3} | "none",
 *    "training": {"limit": 2000, "epochs": 9}}   every trial's overrides
 * A recorded sweep keeps its base spec in "spec_json" (the spec as it
 * was when the sweep started): a later resume does not read the file. 
 * The grid sampler takes the grid's combinations in a seeded random order.
 * A parameter's path names where it goes in the spec: "training.X" (the
 * spec's "training" section; "schedule.X", "loss.X" likewise), or
 * "nodes.NAME.ATTR" (the attribute of the node called NAME). A list is a
 * grid axis (the grid sampler takes every combination; the others draw
 * from it as a choice); {"low", "high"} a range (uniform, or log-uniform
 * with "log"; "int": whole numbers); {"choice": [...]} a choice. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "em-error.h"

#define EM_TUNE_MAX_PARAMS 16
#define EM_TUNE_MAX_VALUES 64
#define EM_TUNE_MAX_QUEUE 256

typedef enum { EM_TUNE_LIST, EM_TUNE_RANGE, EM_TUNE_CHOICE } em_tune_kind;
typedef enum { EM_TUNE_GRID, EM_TUNE_RANDOM, EM_TUNE_TPE, EM_TUNE_QUEUE } em_tune_sampler;
typedef enum { EM_PRUNE_NONE, EM_PRUNE_ASHA, EM_PRUNE_MEDIAN } em_prune_kind;

typedef struct {
  char path[128];
  em_tune_kind kind;
  int n_values;                        /* LIST and CHOICE */
  char *values[EM_TUNE_MAX_VALUES];    /* JSON text of each value */
  double low, high;                    /* RANGE */
  bool log, integer;
} em_tune_param;

typedef struct {
  char *spec_path;                     /* as given (relative to the description's folder) */
  char *spec_text;                     /* the base spec's JSON, read when parsed */
  int n_params;
  em_tune_param p[EM_TUNE_MAX_PARAMS];
  em_tune_sampler sampler;
  char metric[64];
  bool maximize;
  int trials;                          /* the budget (grid: at most the grid's size) */
  double time_budget_s;                /* 0: none */
  uint64_t seed;
  em_prune_kind pruner;
  int min_epochs, reduction, startup;  /* ASHA's first rung and eta; the median rule's startup */
  char *training_json;                 /* the "training" overrides, "{}" when none */
  /* a queue ({"queue": [{"spec": PATH}, ...], "training": {...}}): single
   * runs, one trial each, in order, run and resumed as a sweep's trials */
  int n_queue;
  char *queue_path[EM_TUNE_MAX_QUEUE], *queue_text[EM_TUNE_MAX_QUEUE];
} em_tune_desc;

/* Parses a description; base_dir resolves a relative "spec" path (NULL:
 * the working folder). Every error names the key at fault. */
/* The description with the base spec kept in it ("spec_json"), as the
 * registry records it (malloc'd). */
char *em_tune_desc_recorded(const char *json, const em_tune_desc *d);
em_status em_tune_desc_parse(em_tune_desc *d, const char *json, const char *base_dir,
                             em_error *err);
void em_tune_desc_clear(em_tune_desc *d);
/* The grid's size (the product of the list axes; ranges and choices are
 * refused by the grid sampler at parse time). */
int64_t em_tune_grid_size(const em_tune_desc *d);

/* A finished trial, for TPE: its parameters (JSON object text, path ->
 * value) and its metric (NAN: failed or pruned before any value). */
typedef struct {
  const char *params_json;
  double value;
} em_tune_history;

/* The parameters of trial number (0, 1, ...) as a JSON object (malloc'd):
 * the grid's number-th combination (NULL past its end), a seeded random
 * draw, or TPE's choice given the trials so far. */
char *em_tune_sample(const em_tune_desc *d, int number, const em_tune_history *hist, int n_hist,
                     em_error *err);

/* The spec of a trial (malloc'd JSON): the base spec (a queue: its
 * entry's) with the "training" overrides and the trial's parameters set
 * at their paths. */
char *em_tune_trial_spec(const em_tune_desc *d, const char *params_json, em_error *err);
/* The file name a trial's spec is written under (its run's model is the
 * stem): the base spec's, or the queue entry's. */
const char *em_tune_trial_spec_name(const em_tune_desc *d, const char *params_json);

/* Pruning, at a trial's evaluation number e (1-based: its e-th test
 * metric) with value v. others: every other trial's metric at its e-th
 * evaluation (the trials that reached it). Returns true to stop it, with
 * the decision's figures in why. Better is d->maximize's sense. */
bool em_tune_should_prune(const em_tune_desc *d, int e, double v, const double *others,
                          int n_others, char *why, size_t cap);
/* Whether evaluation e is one where the pruner decides (ASHA: its rungs,
 * min_epochs x reduction^k; median: every one after the first). */
bool em_tune_is_rung(const em_tune_desc *d, int e);
