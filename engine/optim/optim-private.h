/* optim-private.h: what the files of engine/optim share. */
#pragma once

#include "em-optim.h"
#include "em-pool.h"

/* An update streams four or five arrays at a few flops per element, so
 * one step updates every parameter in one pass over the pool, each
 * parameter cut into one share of rows per thread (pieces.c). Below this
 * many elements in all, the step (and the gradient norm, clip.c) runs in
 * the calling thread. */
#define EM_OPTIM_PARALLEL_MIN ((int64_t)1 << 15)

/* The update of one parameter, element-wise over [begin, end). */
typedef struct {
  em_range_fn fn;
  void *ctx;
  int64_t n; /* elements */
} em_optim_piece;

/* Runs pieces[0..n) over their whole ranges, shared over the pool as
 * above. Every element is independent, so the numbers do not depend on
 * the split. */
void em_optim_pieces_run(const em_optim_piece *pieces, int n);

typedef struct {
  void *p, *buf;  /* (D) */
  const void *g;  /* (D) */
  double lr, wd, mom, damp;
  bool first, nesterov;
} em_sgd_args;

typedef struct {
  void *p, *m, *v, *vmax; /* (D); vmax NULL without amsgrad */
  const void *g;          /* (D) */
  double l2;              /* Adam's weight decay (0 for AdamW) */
  double shrink;          /* AdamW's 1 - lr * wd (1 for Adam) */
  double beta1, beta2, eps;
  double step_size;       /* lr / (1 - beta1^t) */
  double bc2_sqrt;        /* sqrt(1 - beta2^t) */
} em_adam_args;

/* One parameter and its state. */
typedef struct {
  em_tensor *param; /* any shape, contiguous, f32 or f64 */
  char *name;
  /* SGD: [0] momentum_buffer. Adam/AdamW: [0] exp_avg, [1] exp_avg_sq,
   * [2] max_exp_avg_sq (amsgrad). Same shape and dtype as param. */
  em_tensor *buf[3];
  em_tensor *step; /* i64 []: updates applied (SGD: through the buffer) */
  union {           /* this step's update, for its piece */
    em_sgd_args sgd;
    em_adam_args adam;
  } args;
} em_optim_slot;

struct em_optimizer {
  em_optim_config cfg;
  int n;
  em_optim_slot *slots;
  em_tensor *step; /* i64 [] "optimizer.step" */
  int n_state;
  em_tensor **state; /* the state list, names in each tensor's .name */
  em_optim_piece *pieces; /* (n): a step's updates on the CPU */
};

/* One update of slot s from its parameter's gradient g (contiguous, the
 * parameter's shape and dtype), counted in the slot's step: a parameter
 * on a device is updated there at once (false); on the CPU *piece is set
 * to the update, for em_optim_pieces_run (true). */
bool em_sgd_prepare(const em_optim_config *c, em_optim_slot *s, const em_tensor *g,
                    em_optim_piece *piece);
bool em_adam_prepare(const em_optim_config *c, em_optim_slot *s, const em_tensor *g,
                     em_optim_piece *piece);
