/* optim-private.h: what the files of engine/optim share. */
#pragma once

#include "em-optim.h"
#include "em-pool.h"

/* Elements per parallel chunk of an update: an update streams four or
 * five arrays at a few flops per element, so it only pays to wake a
 * worker for big tensors. Measured with `ember profile` on fmnist-mlp
 * (2 threads, a VM where a wake costs 50-250 us): optimizer.step took
 * 0.157 ms with fc1.weight (200,704 values) split over the pool and
 * 0.123 ms in one thread; so tensors under a million values stay in one. */
#define EM_OPTIM_GRAIN ((int64_t)1 << 19)

/* One parameter and its state. */
typedef struct {
  em_tensor *param; /* any shape, contiguous, f32 or f64 */
  char *name;
  /* SGD: [0] momentum_buffer. Adam/AdamW: [0] exp_avg, [1] exp_avg_sq,
   * [2] max_exp_avg_sq (amsgrad). Same shape and dtype as param. */
  em_tensor *buf[3];
  em_tensor *step; /* i64 []: updates applied (SGD: through the buffer) */
} em_optim_slot;

struct em_optimizer {
  em_optim_config cfg;
  int n;
  em_optim_slot *slots;
  em_tensor *step; /* i64 [] "optimizer.step" */
  int n_state;
  em_tensor **state; /* the state list, names in each tensor's .name */
};

/* One update of slot s from its parameter's gradient g (contiguous, the
 * parameter's shape and dtype). */
void em_sgd_update(const em_optim_config *c, em_optim_slot *s, const em_tensor *g);
void em_adam_update(const em_optim_config *c, em_optim_slot *s, const em_tensor *g);
