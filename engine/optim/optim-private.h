/* optim-private.h: what the files of engine/optim share. */
#pragma once

#include "em-optim.h"
#include "em-pool.h"

#include <stddef.h>

/* An update streams four or five arrays at a few flops per element, so
 * one step updates every parameter in one pass over the pool, each
 * parameter cut into one share of rows per thread (pieces.c). Below this
 * many elements in all, the step (and the gradient norm, clip.c) runs in
 * the calling thread. */
#define EM_OPTIM_PARALLEL_MIN ((int64_t)1 << 15)

/* Per-parameter state tensors an optimiser may keep (Adam with AMSGrad
 * keeps three), and the room for one update's arguments in a slot. */
#define EM_OPTIM_MAX_BUFFERS 3
#define EM_OPTIM_ARGS_BYTES 128

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

/* One parameter and its state. */
typedef struct {
  em_tensor *param; /* any shape, contiguous, f32 or f64 */
  char *name;
  /* The optimiser's per-parameter state, named by its type's
   * buffer_names; same shape and dtype as param. */
  em_tensor *buf[EM_OPTIM_MAX_BUFFERS];
  em_tensor *step; /* i64 []: updates applied (SGD: through the buffer) */
  /* This step's update's arguments, for its piece: each optimiser's own
   * struct (checked to fit where it is defined), so a new optimiser adds
   * nothing here. */
  _Alignas(max_align_t) unsigned char args[EM_OPTIM_ARGS_BYTES];
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

/* An optimiser: one file (sgd.c, adam.c) defines its type, and one line
 * of optimizers.c's table lists it; its index there is its
 * em_optim_kind. Everything the rest of the engine asks of an optimiser
 * (its name, defaults, checks, state, update) is read off this. */
typedef struct {
  const char *name;           /* "sgd": the spec's, the JSON's and --optimizer's */
  em_optim_config defaults;   /* PyTorch's (kind is filled in from the table) */
  /* Its own hyperparameters' ranges (lr and weight_decay are checked for
   * every kind); messages start with the name. */
  em_status (*check)(const em_optim_config *c, em_error *err);
  /* A parameter it cannot update where it lives (NULL: any the optimiser
   * object accepts). */
  em_status (*check_param)(const em_optim_config *c, const em_tensor *p, const char *name,
                           em_error *err);
  /* State tensors per parameter under c (at most EM_OPTIM_MAX_BUFFERS),
   * named "<param>.<buffer_names[b]>"; any state comes with the
   * parameter's i64 "<param>.step". The memory estimate counts these. */
  int (*buffers)(const em_optim_config *c);
  const char *buffer_names[EM_OPTIM_MAX_BUFFERS];
  /* What one-cycle cycles (SGD's momentum, Adam's beta1): set asserts the
   * value is in range. */
  double (*get_momentum)(const em_optim_config *c);
  void (*set_momentum)(em_optim_config *c, double m);
  /* One update of slot s from its parameter's gradient g (contiguous, the
   * parameter's shape and dtype), counted in the slot's step: a parameter
   * on a device is updated there at once (false); on the CPU *piece is
   * set to the update, for em_optim_pieces_run (true). */
  bool (*prepare)(const em_optim_config *c, em_optim_slot *s, const em_tensor *g,
                  em_optim_piece *piece);
} em_optim_type;

/* The type of kind (asserted to be one of the table's). */
const em_optim_type *em_optim_type_of(em_optim_kind kind);
