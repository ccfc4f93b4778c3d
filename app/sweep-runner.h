/* sweep-runner.h: the runner of `ember sweep start|resume`: a sweep's
 * trials as `ember train` processes, up to `parallel` at a time with
 * `threads` each (parallel x threads <= the cores), pruned by the sweep's
 * pruner, its state in the registry (em-sweeps.h) so that a runner killed
 * and started again runs no trial twice. See sweep-runner.c. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-store.h"
#include "em-sweeps.h"
#include "em-tune.h"

typedef struct {
  int64_t sweep;
  const char *ember;    /* this program (the trials' `ember train`) */
  const char *registry; /* absolute: the trials record there */
  int parallel, threads;
  bool quiet;
} sweep_runner_options;

/* Runs until the sweep's trials are done, it is cancelled or paused (and
 * its running trials ended), or a signal stops the runner (its trials
 * stop with checkpoints; 128 + the signal is returned). */
int sweep_runner_run(const sweep_runner_options *o, em_store *s);
