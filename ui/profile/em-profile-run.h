/* em-profile-run.h: "Profile now": a few training steps of a spec under
 * the op profiler, like `ember profile` (warm-up steps, then profiled
 * steps: data loading, forward, loss, backward and the optimiser step,
 * each a span), leaving the records for em_op_table_build and writing a
 * Chrome trace. Plain C, runs in whatever thread calls it (the Profiler
 * page calls it from a worker); no GTK. */
#pragma once

#include <stdatomic.h>

#include "em-error.h"

typedef struct {
  const char *spec_json;  /* required */
  const char *dataset;    /* NULL: the spec's training dataset */
  const char *data_dir;   /* NULL: the dataset's default folder */
  int steps;              /* profiled steps (default 10) */
  int warmup;             /* steps before profiling (default 2) */
  int batch;              /* 0: the spec's */
  const char *trace_path; /* required: where the trace goes */
  atomic_int *cancel;     /* may be NULL: set nonzero to stop between steps */
  double step_ms;         /* out: median step time */
} em_profile_run_options;

em_status em_profile_run(em_profile_run_options *o, em_error *err);
