/* em-optim.h: optimisers (SGD, Adam, AdamW), learning-rate schedules and
 * gradient clipping of libember.
 *
 * Optimisers update persistent parameter tensors (f32, or f64 for tests)
 * in place from their .grad, with exactly PyTorch 1.13's formulas. A
 * parameter whose .grad is NULL, or stale after zero_grad and not written
 * by a backward since, is skipped, like a PyTorch parameter whose grad is
 * None: its state and its own step count do not move.
 *
 * Gradient accumulation: backward overwrites a stale gradient and adds to
 * a fresh one, so a trainer that calls zero_grad, then k backwards, then
 * step, updates with the sum of the k micro-batch gradients.
 *
 * All state is allocated by em_optimizer_new (and once more if SGD's
 * momentum is switched on later); a step allocates nothing.
 *
 * State for checkpoints: em_optimizer_state lists the optimiser's own
 * persistent tensors by name. Saving copies them out; loading copies the
 * saved values into them (same names, shapes, dtypes), after which the
 * next steps give the same numbers as if training had not stopped.
 * Names:
 *   optimizer.step                 i64 [], number of em_optimizer_step calls
 *   <param>.momentum_buffer        SGD with momentum
 *   <param>.exp_avg, .exp_avg_sq   Adam, AdamW
 *   <param>.max_exp_avg_sq         Adam, AdamW with amsgrad
 *   <param>.step                   i64 [], updates applied to this param
 *                                  (Adam's bias correction; SGD: whether
 *                                  its momentum buffer holds a value)
 *
 * Schedules are pure functions of the optimiser step (the number of
 * em_optimizer_step calls made so far), so resuming needs no scheduler
 * state: before each step the trainer sets
 *   lr = em_schedule_lr(&s, em_optimizer_steps(o)),
 * which gives the lr PyTorch's scheduler gives after that many
 * scheduler.step() calls. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-error.h"
#include "em-tensor.h"

/* ---- optimisers ------------------------------------------------------------ */
/* An optimiser is its position in engine/optim/optimizers.c's table;
 * these name the built-ins' (a new optimiser needs no value here: it is
 * found by name, em_optim_parse_kind). */
typedef enum { EM_OPTIM_SGD, EM_OPTIM_ADAM, EM_OPTIM_ADAMW } em_optim_kind;

typedef struct {
  em_optim_kind kind;
  double lr;
  double momentum;     /* SGD */
  double dampening;    /* SGD */
  double weight_decay; /* SGD, Adam: L2 added to the gradient; AdamW: decoupled */
  bool nesterov;       /* SGD: needs momentum > 0 and dampening 0 */
  double beta1, beta2, eps; /* Adam, AdamW */
  bool amsgrad;             /* Adam, AdamW */
} em_optim_config;

/* PyTorch's defaults: SGD momentum 0, dampening 0, weight decay 0 and
 * lr 0.01 (PyTorch 1.13 has no default SGD lr); Adam lr 1e-3, betas
 * (0.9, 0.999), eps 1e-8, weight decay 0; AdamW the same with weight
 * decay 1e-2. */
void em_optim_config_defaults(em_optim_config *c, em_optim_kind kind);
/* Checks the values a person may have typed (lr >= 0, betas in [0, 1),
 * Nesterov with momentum and no dampening, ...). */
em_status em_optim_config_check(const em_optim_config *c, em_error *err);
/* The optimisers: kinds 0 .. em_optim_kind_count() - 1. A kind's name
 * ("sgd", "adam", "adamw"), NULL past the last. */
int em_optim_kind_count(void);
const char *em_optim_kind_name(em_optim_kind kind);
em_status em_optim_parse_kind(const char *name, em_optim_kind *out, em_error *err);
/* State tensors the optimiser c keeps per parameter (SGD with momentum 1,
 * Adam 2, with AMSGrad 3), each the parameter's size. */
int em_optim_state_per_param(const em_optim_config *c);

typedef struct em_optimizer em_optimizer;

/* params: n contiguous f32/f64 tensors (the optimiser keeps the pointers;
 * they must outlive it); names: their unique names for the state (NULL
 * names them "param.<i>"). Returns NULL and fills err on a bad config,
 * a parameter that cannot be optimised, a repeated parameter or name, or
 * out of memory. */
em_optimizer *em_optimizer_new(const em_optim_config *c, int n, em_tensor *const *params,
                               const char *const *names, em_error *err);
void em_optimizer_free(em_optimizer *o); /* frees its state; NULL is fine */

/* One update of every parameter that has a current gradient. */
void em_optimizer_step(em_optimizer *o);
/* Marks every parameter's gradient stale (no memory is touched). */
void em_optimizer_zero_grad(em_optimizer *o);

void em_optimizer_set_lr(em_optimizer *o, double lr);
double em_optimizer_get_lr(const em_optimizer *o);
/* SGD's momentum or Adam's beta1 (what one-cycle cycles). Switching on
 * momentum for an SGD made without it allocates the buffers then (and
 * adds them to the state list), so do it before loading state. */
void em_optimizer_set_momentum(em_optimizer *o, double m);
double em_optimizer_get_momentum(const em_optimizer *o);
const em_optim_config *em_optimizer_config(const em_optimizer *o);

/* Number of em_optimizer_step calls so far (the schedules' step). */
int64_t em_optimizer_steps(const em_optimizer *o);
/* Sets that count (a negative count is EM_ERR_INVALID). The per-parameter
 * counts are state tensors and are loaded with them. */
em_status em_optimizer_set_steps(em_optimizer *o, int64_t steps);

/* The state tensors, 0 <= i < em_optimizer_state_count(o); *name (may be
 * NULL) receives the tensor's name, owned by the optimiser. The tensors
 * are live: writing into them is loading state. */
int em_optimizer_state_count(const em_optimizer *o);
em_tensor *em_optimizer_state(const em_optimizer *o, int i, const char **name);
/* The state tensor called name, or NULL. */
em_tensor *em_optimizer_state_find(const em_optimizer *o, const char *name);

/* ---- learning-rate schedules ------------------------------------------------ */
typedef enum {
  EM_SCHED_CONSTANT,
  EM_SCHED_STEP,           /* lr * gamma^(step / step_size), like StepLR */
  EM_SCHED_COSINE,         /* lr -> eta_min over total_steps, like CosineAnnealingLR */
  EM_SCHED_WARMUP,         /* LinearLR from lr * warmup_start_factor, then constant */
  EM_SCHED_WARMUP_COSINE,  /* that warm-up, then cosine over the remaining steps */
  EM_SCHED_ONECYCLE,       /* OneCycleLR (cos, two phases) with peak lr */
  EM_SCHED_COUNT
} em_sched_kind;

typedef struct {
  em_sched_kind kind;
  double lr;               /* base lr; one-cycle: the peak (PyTorch's max_lr) */
  int64_t step_size;       /* STEP */
  double gamma;            /* STEP, default 0.1 */
  int64_t total_steps;     /* COSINE, WARMUP_COSINE (warm-up included), ONECYCLE */
  double eta_min;          /* COSINE, WARMUP_COSINE, default 0 */
  int64_t warmup_steps;    /* WARMUP, WARMUP_COSINE */
  double warmup_start_factor; /* default 1/3, LinearLR's */
  double pct_start;        /* ONECYCLE, default 0.3 */
  double div_factor;       /* ONECYCLE: initial lr = lr / div_factor, default 25 */
  double final_div_factor; /* ONECYCLE: min lr = initial lr / this, default 1e4 */
  bool cycle_momentum;     /* ONECYCLE, default true */
  double base_momentum;    /* ONECYCLE, default 0.85 */
  double max_momentum;     /* ONECYCLE, default 0.95 */
} em_schedule;

/* The defaults above; step_size, total_steps and warmup_steps are left 0
 * and must be set for the kinds that use them. */
void em_schedule_init(em_schedule *s, em_sched_kind kind, double lr);
em_status em_schedule_check(const em_schedule *s, em_error *err);
/* The lr for the optimiser step `step` (0 for the first). Past the end,
 * cosine stays at eta_min and one-cycle at its last value. */
double em_schedule_lr(const em_schedule *s, int64_t step);
/* One-cycle with cycle_momentum: the momentum (or Adam beta1) for that
 * step; every other schedule returns base. */
double em_schedule_momentum(const em_schedule *s, int64_t step, double base);
/* "constant", "step", "cosine", "warmup", "warmup-cosine", "onecycle". */
em_status em_schedule_parse_name(const char *name, em_sched_kind *out, em_error *err);
const char *em_schedule_kind_name(em_sched_kind kind);

/* ---- gradient clipping -------------------------------------------------------- */
/* Total L2 norm of the current gradients of params (NULL or stale ones
 * are skipped), like torch.nn.utils.clip_grad_norm_; when it is finite
 * and max_norm / (total + 1e-6) < 1, every gradient is scaled by that
 * coefficient. A non-finite total is returned and nothing is scaled, so
 * the caller can skip the step and report it. */
double em_clip_grad_norm(int n, em_tensor *const *params, double max_norm);
