/* schedule.c: learning-rate (and one-cycle momentum) schedules as pure
 * functions of the optimiser step, in the closed forms of PyTorch 1.13's
 * StepLR, CosineAnnealingLR, LinearLR, SequentialLR(LinearLR,
 * CosineAnnealingLR) and OneCycleLR (PyTorch computes some of them
 * recursively; the two agree to rounding). */
#include "optim-private.h"

#include <math.h>
#include <string.h>

static const char *const sched_names[EM_SCHED_COUNT] = {
  "constant", "step", "cosine", "warmup", "warmup-cosine", "onecycle",
};

const char *em_schedule_kind_name(em_sched_kind kind) {
  return (unsigned)kind < EM_SCHED_COUNT ? sched_names[kind] : "?";
}

em_status em_schedule_parse_name(const char *name, em_sched_kind *out, em_error *err) {
  for (int k = 0; k < EM_SCHED_COUNT; k++)
    if (name && strcmp(name, sched_names[k]) == 0) {
      *out = (em_sched_kind)k;
      return EM_OK;
    }
  return em_error_set(err, EM_ERR_INVALID,
                      "unknown schedule '%s' (expected constant, step, cosine, warmup, "
                      "warmup-cosine or onecycle)", name ? name : "(null)");
}

void em_schedule_init(em_schedule *s, em_sched_kind kind, double lr) {
  *s = (em_schedule){
    .kind = kind,
    .lr = lr,
    .gamma = 0.1,
    .eta_min = 0.0,
    .warmup_start_factor = 1.0 / 3.0,
    .pct_start = 0.3,
    .div_factor = 25.0,
    .final_div_factor = 1e4,
    .cycle_momentum = true,
    .base_momentum = 0.85,
    .max_momentum = 0.95,
  };
}

static bool finite_nonneg(double v) { return v >= 0 && !isinf(v); }

static em_status check_cosine(const em_schedule *s, em_error *err) {
  const char *what = sched_names[s->kind];
  if (s->total_steps <= 0)
    return em_error_set(err, EM_ERR_INVALID, "schedule %s: total_steps must be > 0, got %lld",
                        what, (long long)s->total_steps);
  if (!finite_nonneg(s->eta_min))
    return em_error_set(err, EM_ERR_INVALID, "schedule %s: eta_min must be >= 0, got %g", what,
                        s->eta_min);
  return EM_OK;
}

em_status em_schedule_check(const em_schedule *s, em_error *err) {
  if ((unsigned)s->kind >= EM_SCHED_COUNT)
    return em_error_set(err, EM_ERR_INVALID, "unknown schedule kind %d", (int)s->kind);
  const char *what = sched_names[s->kind];
  if (!finite_nonneg(s->lr))
    return em_error_set(err, EM_ERR_INVALID, "schedule %s: lr must be a finite number >= 0, got %g",
                        what, s->lr);
  switch (s->kind) {
  case EM_SCHED_CONSTANT:
    break;
  case EM_SCHED_STEP:
    if (s->step_size <= 0)
      return em_error_set(err, EM_ERR_INVALID,
                          "schedule step: step_size must be > 0, got %lld (set it in the spec: "
                          "\"schedule\": {\"type\": \"step\", \"step_size\": N, \"gamma\": G})",
                          (long long)s->step_size);
    if (!finite_nonneg(s->gamma))
      return em_error_set(err, EM_ERR_INVALID, "schedule step: gamma must be >= 0, got %g",
                          s->gamma);
    break;
  case EM_SCHED_WARMUP:
  case EM_SCHED_WARMUP_COSINE:
    if (s->warmup_steps <= 0)
      return em_error_set(err, EM_ERR_INVALID,
                          "schedule %s: warmup_steps must be > 0, got %lld (--warmup-steps N, or "
                          "\"warmup_steps\" in the spec's \"schedule\" object)",
                          what, (long long)s->warmup_steps);
    if (!(s->warmup_start_factor > 0 && s->warmup_start_factor <= 1))
      return em_error_set(err, EM_ERR_INVALID,
                          "schedule %s: warmup_start_factor must be in (0, 1], got %g", what,
                          s->warmup_start_factor);
    if (s->kind == EM_SCHED_WARMUP) break;
    if (s->total_steps <= s->warmup_steps)
      return em_error_set(err, EM_ERR_INVALID,
                          "schedule warmup-cosine: total_steps (%lld) must exceed warmup_steps "
                          "(%lld)", (long long)s->total_steps, (long long)s->warmup_steps);
    return check_cosine(s, err);
  case EM_SCHED_COSINE:
    return check_cosine(s, err);
  case EM_SCHED_ONECYCLE:
    if (s->total_steps <= 0)
      return em_error_set(err, EM_ERR_INVALID, "schedule onecycle: total_steps must be > 0, got %lld",
                          (long long)s->total_steps);
    if (!(s->pct_start >= 0 && s->pct_start <= 1))
      return em_error_set(err, EM_ERR_INVALID, "schedule onecycle: pct_start must be in [0, 1], got %g",
                          s->pct_start);
    if (!(s->div_factor > 0) || isinf(s->div_factor) || !(s->final_div_factor > 0) ||
        isinf(s->final_div_factor))
      return em_error_set(err, EM_ERR_INVALID,
                          "schedule onecycle: div_factor and final_div_factor must be > 0, got %g "
                          "and %g", s->div_factor, s->final_div_factor);
    if (s->cycle_momentum && !(s->base_momentum >= 0 && s->base_momentum < 1 &&
                               s->max_momentum >= 0 && s->max_momentum < 1))
      return em_error_set(err, EM_ERR_INVALID,
                          "schedule onecycle: base_momentum and max_momentum must be in [0, 1), "
                          "got %g and %g", s->base_momentum, s->max_momentum);
    break;
  default:
    break;
  }
  return EM_OK;
}

/* CosineAnnealingLR's closed form at step t of t_max, held at eta_min
 * past the end (PyTorch's would rise again). */
static double cosine(double base, double eta_min, int64_t t, int64_t t_max) {
  if (t >= t_max) return eta_min;
  return eta_min + (base - eta_min) * (1 + cos(M_PI * (double)t / (double)t_max)) / 2;
}

/* LinearLR's closed form, end factor 1. */
static double warmup(const em_schedule *s, int64_t t) {
  int64_t w = s->warmup_steps > 0 ? s->warmup_steps : 1;
  double f = s->warmup_start_factor;
  return s->lr * (f + (1.0 - f) * (double)(t < w ? t : w) / (double)w);
}

/* OneCycleLR's two cos phases: from `first` to `peak` over steps
 * [0, pct_start * total - 1], then from `peak` to `last` up to total - 1.
 * Past the end it holds the last value (PyTorch raises). */
static double one_cycle(const em_schedule *s, int64_t t, double first, double peak, double last) {
  int64_t total = s->total_steps > 0 ? s->total_steps : 1;
  if (t > total - 1) t = total - 1;
  double step = (double)t;
  double end1 = s->pct_start * (double)total - 1, end2 = (double)(total - 1);
  double start, end, from, to;
  if (step <= end1) {
    start = 0, end = end1, from = first, to = peak;
  } else {
    start = end1, end = end2, from = peak, to = last;
  }
  double pct = end > start ? (step - start) / (end - start) : 1.0;
  return to + (from - to) / 2.0 * (cos(M_PI * pct) + 1);
}

double em_schedule_lr(const em_schedule *s, int64_t step) {
  int64_t t = step > 0 ? step : 0;
  switch (s->kind) {
  case EM_SCHED_CONSTANT:
    return s->lr;
  case EM_SCHED_STEP: {
    int64_t size = s->step_size > 0 ? s->step_size : 1;
    return s->lr * pow(s->gamma, (double)(t / size));
  }
  case EM_SCHED_COSINE:
    return cosine(s->lr, s->eta_min, t, s->total_steps > 0 ? s->total_steps : 1);
  case EM_SCHED_WARMUP:
    return warmup(s, t);
  case EM_SCHED_WARMUP_COSINE:
    if (t < s->warmup_steps) return warmup(s, t);
    return cosine(s->lr, s->eta_min, t - s->warmup_steps,
                  s->total_steps > s->warmup_steps ? s->total_steps - s->warmup_steps : 1);
  case EM_SCHED_ONECYCLE: {
    double initial = s->lr / s->div_factor;
    return one_cycle(s, t, initial, s->lr, initial / s->final_div_factor);
  }
  default:
    EM_ASSERT(!"unknown schedule kind");
  }
}

double em_schedule_momentum(const em_schedule *s, int64_t step, double base) {
  if (s->kind != EM_SCHED_ONECYCLE || !s->cycle_momentum) return base;
  return one_cycle(s, step > 0 ? step : 0, s->max_momentum, s->base_momentum, s->max_momentum);
}
