/* em-sweeps.h: a sweep's state in the registry (schema 8): the sweep (its
 * description, status and the runner that holds it) and its trials (the
 * sampled settings, the run that trains it, its status, metric and the
 * pruner's decision). The runner (app/sweep-runner.c) writes it; `ember
 * sweep status` and the workbench read it. A trial row is written before
 * its process starts, with the run name it will have, so a runner that
 * is killed and started again finds every trial it had begun. */
#pragma once

#include <stdint.h>

#include "em-store.h"

typedef enum {
  EM_SWEEP_RUNNING,   /* a runner holds it, or held it and died (see runner_pid) */
  EM_SWEEP_PAUSED,    /* no new trials start; running ones go on */
  EM_SWEEP_COMPLETED, /* every trial ended */
  EM_SWEEP_CANCELLED, /* stopped by a person; running trials were stopped */
} em_sweep_status;

typedef enum {
  EM_TRIAL_PENDING,   /* its row exists; its process may not have started */
  EM_TRIAL_RUNNING,
  EM_TRIAL_COMPLETED,
  EM_TRIAL_FAILED,
  EM_TRIAL_PRUNED,
  EM_TRIAL_CANCELLED,
} em_trial_status;

const char *em_sweep_status_name(em_sweep_status s);
const char *em_trial_status_name(em_trial_status s);

typedef struct {
  int64_t id;
  char *name, *description_json;
  em_sweep_status status;
  int64_t runner_pid;
  char *runner_host;
  double created, ended;
} em_sweep_row;

typedef struct {
  int64_t id, sweep;
  int number;
  char *params_json, *run_name, *decision;
  int64_t run;         /* the run that trains it (its latest continuation); 0: none yet */
  int64_t pid;         /* its process (on the runner's host), once started */
  em_trial_status status;
  double metric;       /* its last value of the sweep's metric; NAN: none */
  int epochs;          /* evaluations it reached */
  int64_t steps;       /* optimiser steps it trained, continuations included */
  double created, ended;
} em_trial_row;

em_status em_store_sweep_create(em_store *s, const char *name, const char *description_json,
                                int64_t *id, em_error *err);
em_status em_store_sweep_get(em_store *s, int64_t id, em_sweep_row *out, em_error *err);
em_status em_store_sweeps_list(em_store *s, em_sweep_row **out, int *n, em_error *err);
void em_sweep_row_clear(em_sweep_row *r);
void em_sweep_rows_free(em_sweep_row *r, int n);
em_status em_store_sweep_set_status(em_store *s, int64_t id, em_sweep_status st, em_error *err);
/* The runner holding it (pid 0: none). */
em_status em_store_sweep_set_runner(em_store *s, int64_t id, int64_t pid, em_error *err);

/* Adds trial number with its settings and run name (pending). */
em_status em_store_trial_add(em_store *s, int64_t sweep, int number, const char *params_json,
                             const char *run_name, em_error *err);
em_status em_store_trials_list(em_store *s, int64_t sweep, em_trial_row **out, int *n,
                               em_error *err);
void em_trial_rows_free(em_trial_row *t, int n);
/* Updates what the runner learnt of a trial (decision NULL: unchanged). */
em_status em_store_trial_update(em_store *s, int64_t sweep, int number, em_trial_status st,
                                int64_t run, double metric, int epochs, int64_t steps,
                                const char *decision, em_error *err);
/* The process a trial was started in (before its run row exists). */
em_status em_store_trial_set_pid(em_store *s, int64_t sweep, int number, int64_t pid,
                                 em_error *err);
/* The newest run of that name (0: none). */
em_status em_store_run_by_name(em_store *s, const char *name, int64_t *run, em_error *err);
/* A run's values of a metric key at each evaluation, in step order
 * (malloc'd; *n 0 when none), with the step of the last one. */
em_status em_store_run_metric_series(em_store *s, int64_t run, const char *key, double **values,
                                     int *n, int64_t *last_step, em_error *err);
/* Marks runs whose process on this host is gone "killed" (what opening
 * the registry for writing does), for a runner that watches for them. */
em_status em_store_mark_dead_runs(em_store *s, em_error *err);
/* This machine's name, as runs and sweeps record their host. */
const char *em_store_this_host(void);
