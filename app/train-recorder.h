/* train-recorder.h: the sink that turns trainer events into registry rows
 * through an em_store_writer. It runs in the trainer's thread, so it only
 * enqueues (a mutex and a copy): SQLite is the writer thread's business.
 *
 *   STEP        loss, lr, grad_norm             at the optimiser step
 *   EPOCH_END   train_loss, samples_per_sec     at the step the epoch ended
 *   EVAL        test_loss, test_accuracy        at the step it evaluated
 *   CHECKPOINT  a checkpoint row (metric: the test loss of an "eval" or
 *               of a "final" that follows an evaluation; lower is better)
 *   DIVERGENCE  a run event "divergence" with the trainer's message */
#pragma once

#include <stdint.h>

#include "em-store.h"
#include "em-train.h"

typedef struct {
  em_store_writer *writer;
  int64_t run;
  int keep_checkpoints;
  double last_eval_loss;
  int64_t last_eval_step; /* -1: none yet */
  int64_t checkpoints, divergences;
} train_recorder;

void train_recorder_init(train_recorder *r, em_store_writer *w, int64_t run,
                         int keep_checkpoints);
void train_recorder_event(train_recorder *r, const em_train_event *ev);
