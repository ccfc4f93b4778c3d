/* optimizer.c: the optimiser object: configuration, parameters and their
 * state tensors, the step count, and the state list that checkpoints
 * read and write. The updates themselves are in sgd.c and adam.c.
 *
 * A parameter's buffers (momentum, moments) live on the parameter's
 * device; the step counts (i64 scalars the host reads at every update)
 * always live on the CPU. */
#include "optim-private.h"

#include "em-device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {"sgd", "adam", "adamw"};

const char *em_optim_kind_name(em_optim_kind kind) {
  return (unsigned)kind <= EM_OPTIM_ADAMW ? kind_names[kind] : "?";
}

em_status em_optim_parse_kind(const char *name, em_optim_kind *out, em_error *err) {
  for (int k = 0; k <= EM_OPTIM_ADAMW; k++)
    if (name && strcmp(name, kind_names[k]) == 0) {
      *out = (em_optim_kind)k;
      return EM_OK;
    }
  return em_error_set(err, EM_ERR_INVALID,
                      "unknown optimizer '%s' (expected sgd, adam or adamw)",
                      name ? name : "(null)");
}

void em_optim_config_defaults(em_optim_config *c, em_optim_kind kind) {
  *c = (em_optim_config){
    .kind = kind,
    .lr = kind == EM_OPTIM_SGD ? 0.01 : 1e-3,
    .weight_decay = kind == EM_OPTIM_ADAMW ? 1e-2 : 0.0,
    .beta1 = 0.9,
    .beta2 = 0.999,
    .eps = 1e-8,
  };
}

static bool in_range(double v, double lo, double hi) { return v >= lo && v <= hi; }

em_status em_optim_config_check(const em_optim_config *c, em_error *err) {
  if ((unsigned)c->kind > EM_OPTIM_ADAMW)
    return em_error_set(err, EM_ERR_INVALID, "unknown optimizer kind %d", (int)c->kind);
  const char *what = em_optim_kind_name(c->kind);
  if (!in_range(c->lr, 0, INFINITY) || isinf(c->lr))
    return em_error_set(err, EM_ERR_INVALID, "%s: lr must be a finite number >= 0, got %g", what,
                        c->lr);
  if (!in_range(c->weight_decay, 0, INFINITY) || isinf(c->weight_decay))
    return em_error_set(err, EM_ERR_INVALID,
                        "%s: weight_decay must be a finite number >= 0, got %g", what,
                        c->weight_decay);
  if (c->kind == EM_OPTIM_SGD) {
    if (!in_range(c->momentum, 0, 1))
      return em_error_set(err, EM_ERR_INVALID, "sgd: momentum must be in [0, 1], got %g",
                          c->momentum);
    if (!in_range(c->dampening, 0, 1))
      return em_error_set(err, EM_ERR_INVALID, "sgd: dampening must be in [0, 1], got %g",
                          c->dampening);
    if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
      return em_error_set(err, EM_ERR_INVALID,
                          "sgd: nesterov needs momentum > 0 and dampening 0 (got momentum %g, "
                          "dampening %g)", c->momentum, c->dampening);
    return EM_OK;
  }
  if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
    return em_error_set(err, EM_ERR_INVALID, "%s: betas must be in [0, 1), got (%g, %g)", what,
                        c->beta1, c->beta2);
  if (!in_range(c->eps, 0, INFINITY) || isinf(c->eps))
    return em_error_set(err, EM_ERR_INVALID, "%s: eps must be a finite number >= 0, got %g",
                        what, c->eps);
  return EM_OK;
}

/* The shape of a 0-dimensional tensor (a step count). */
static const int64_t no_dims[1] = {0};

/* A persistent, zeroed state tensor named "<prefix>.<suffix>" on d. */
static em_tensor *state_new(em_device d, em_dtype dt, int ndim, const int64_t *shape,
                            const char *prefix, const char *suffix, em_error *err) {
  size_t len = strlen(prefix) + strlen(suffix) + 2;
  char *name = malloc(len);
  em_tensor *t = name ? em_tensor_new_on(d, dt, ndim, shape, err) : NULL;
  if (!t) {
    free(name);
    if (!name) em_error_set(err, EM_ERR_NOMEM, "out of memory for optimizer state");
    return NULL;
  }
  snprintf(name, len, "%s.%s", prefix, suffix);
  t->name = name;
  return t;
}

static void state_free(em_tensor *t) {
  if (!t) return;
  free((char *)t->name);
  em_tensor_free(t);
}

static int cmp_names(const void *a, const void *b) {
  return strcmp((*(em_tensor *const *)a)->name, (*(em_tensor *const *)b)->name);
}

/* Rebuilds o->state from the slots: the step count, then each
 * parameter's buffers and step. Fails on two tensors with one name. */
static em_status state_list_build(em_optimizer *o, em_error *err) {
  int count = 1;
  for (int i = 0; i < o->n; i++) {
    for (int b = 0; b < 3; b++) count += o->slots[i].buf[b] != NULL;
    count += o->slots[i].step != NULL;
  }
  em_tensor **list = malloc(sizeof *list * (size_t)count);
  em_tensor **sorted = malloc(sizeof *sorted * (size_t)count);
  if (!list || !sorted) {
    free(list);
    free(sorted);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory for optimizer state");
  }
  int k = 0;
  list[k++] = o->step;
  for (int i = 0; i < o->n; i++) {
    for (int b = 0; b < 3; b++)
      if (o->slots[i].buf[b]) list[k++] = o->slots[i].buf[b];
    if (o->slots[i].step) list[k++] = o->slots[i].step;
  }
  memcpy(sorted, list, sizeof *list * (size_t)count);
  qsort(sorted, (size_t)count, sizeof *sorted, cmp_names);
  for (int j = 1; j < count; j++)
    if (strcmp(sorted[j - 1]->name, sorted[j]->name) == 0) {
      em_error_set(err, EM_ERR_INVALID, "two optimizer state tensors are named '%s'",
                   sorted[j]->name);
      free(list);
      free(sorted);
      return EM_ERR_INVALID;
    }
  free(sorted);
  free(o->state);
  o->state = list;
  o->n_state = count;
  return EM_OK;
}

/* Allocates slot s's state for the optimiser's kind and config. */
static em_status slot_alloc(const em_optim_config *c, em_optim_slot *s, em_error *err) {
  const em_tensor *p = s->param;
  static const char *const adam_names[3] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  int nbuf = c->kind == EM_OPTIM_SGD ? (c->momentum != 0) : (c->amsgrad ? 3 : 2);
  for (int b = 0; b < nbuf; b++) {
    if (s->buf[b]) continue;
    const char *suffix = c->kind == EM_OPTIM_SGD ? "momentum_buffer" : adam_names[b];
    s->buf[b] = state_new(p->device, p->dtype, p->ndim, p->shape, s->name, suffix, err);
    if (!s->buf[b]) return em_error_prefix(err, "parameter '%s'", s->name);
  }
  if (nbuf > 0 && !s->step) {
    s->step = state_new(em_device_cpu(), EM_DTYPE_I64, 0, no_dims, s->name, "step", err);
    if (!s->step) return em_error_prefix(err, "parameter '%s'", s->name);
  }
  return EM_OK;
}

em_optimizer *em_optimizer_new(const em_optim_config *c, int n, em_tensor *const *params,
                               const char *const *names, em_error *err) {
  if (em_optim_config_check(c, err) != EM_OK) return NULL;
  if (n <= 0) {
    em_error_set(err, EM_ERR_INVALID, "the optimizer got no parameters");
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    const em_tensor *p = params[i];
    char fallback[32];
    snprintf(fallback, sizeof fallback, "param.%d", i);
    const char *nm = names && names[i] ? names[i] : fallback;
    if (!p) {
      em_error_set(err, EM_ERR_INVALID, "parameter %d ('%s') is NULL", i, nm);
      return NULL;
    }
    if (p->dtype != EM_DTYPE_F32 && p->dtype != EM_DTYPE_F64) {
      em_error_set(err, EM_ERR_UNSUPPORTED, "parameter '%s' is %s; optimizers update f32 or f64",
                   nm, em_dtype_name(p->dtype));
      return NULL;
    }
    if (!em_tensor_is_contiguous(p)) {
      em_error_set(err, EM_ERR_UNSUPPORTED, "parameter '%s' is not contiguous", nm);
      return NULL;
    }
    if (em_on_device(p) && p->dtype != EM_DTYPE_F32) {
      char dn[32];
      em_error_set(err, EM_ERR_UNSUPPORTED, "parameter '%s' is %s on %s; device optimizers "
                   "update f32", nm, em_dtype_name(p->dtype), em_device_str(p->device, dn,
                   sizeof dn));
      return NULL;
    }
    if (em_on_device(p) && c->kind != EM_OPTIM_SGD && c->amsgrad) {
      char dn[32];
      em_error_set(err, EM_ERR_UNSUPPORTED, "parameter '%s' is on %s: AMSGrad runs on the CPU "
                   "only (turn amsgrad off, or train on the CPU)", nm,
                   em_device_str(p->device, dn, sizeof dn));
      return NULL;
    }
    for (int j = 0; j < i; j++)
      if (params[j] == p) {
        em_error_set(err, EM_ERR_INVALID, "parameter '%s' is given twice", nm);
        return NULL;
      }
  }
  em_optimizer *o = calloc(1, sizeof *o);
  em_optim_slot *slots = calloc((size_t)n, sizeof *slots);
  em_optim_piece *pieces = calloc((size_t)n, sizeof *pieces);
  if (!o || !slots || !pieces) {
    free(o);
    free(slots);
    free(pieces);
    em_error_set(err, EM_ERR_NOMEM, "out of memory for an optimizer");
    return NULL;
  }
  o->cfg = *c;
  o->n = n;
  o->slots = slots;
  o->pieces = pieces;
  o->step = state_new(em_device_cpu(), EM_DTYPE_I64, 0, no_dims, "optimizer", "step", err);
  if (!o->step) goto fail;
  for (int i = 0; i < n; i++) {
    em_optim_slot *s = &o->slots[i];
    s->param = params[i];
    char fallback[32];
    snprintf(fallback, sizeof fallback, "param.%d", i);
    s->name = strdup(names && names[i] ? names[i] : fallback);
    if (!s->name) {
      em_error_set(err, EM_ERR_NOMEM, "out of memory for an optimizer");
      goto fail;
    }
    for (int j = 0; j < i; j++)
      if (strcmp(o->slots[j].name, s->name) == 0) {
        em_error_set(err, EM_ERR_INVALID, "two parameters are named '%s'", s->name);
        goto fail;
      }
    if (slot_alloc(&o->cfg, s, err) != EM_OK) goto fail;
  }
  if (state_list_build(o, err) != EM_OK) goto fail;
  return o;
fail:
  em_optimizer_free(o);
  return NULL;
}

void em_optimizer_free(em_optimizer *o) {
  if (!o) return;
  for (int i = 0; i < o->n; i++) {
    em_optim_slot *s = &o->slots[i];
    for (int b = 0; b < 3; b++) state_free(s->buf[b]);
    state_free(s->step);
    free(s->name);
  }
  state_free(o->step);
  free(o->slots);
  free(o->pieces);
  free(o->state);
  free(o);
}

void em_optimizer_step(em_optimizer *o) {
  int n_pieces = 0;
  for (int i = 0; i < o->n; i++) {
    em_optim_slot *s = &o->slots[i];
    const em_tensor *p = s->param, *g = em_tensor_current_grad(p);
    if (!g) continue;
    EM_ASSERT(g->dtype == p->dtype && em_tensor_numel(g) == em_tensor_numel(p));
    EM_ASSERT(em_tensor_is_contiguous(g));
    em_optim_piece *piece = &o->pieces[n_pieces];
    if (o->cfg.kind == EM_OPTIM_SGD ? em_sgd_prepare(&o->cfg, s, g, piece)
                                    : em_adam_prepare(&o->cfg, s, g, piece))
      n_pieces++;
  }
  em_optim_pieces_run(o->pieces, n_pieces);
  *em_i64(o->step) += 1;
}

void em_optimizer_zero_grad(em_optimizer *o) {
  for (int i = 0; i < o->n; i++) em_tensor_zero_grad(o->slots[i].param);
}

void em_optimizer_set_lr(em_optimizer *o, double lr) {
  EM_ASSERT(lr >= 0 && !isinf(lr));
  o->cfg.lr = lr;
}

double em_optimizer_get_lr(const em_optimizer *o) { return o->cfg.lr; }

void em_optimizer_set_momentum(em_optimizer *o, double m) {
  if (o->cfg.kind != EM_OPTIM_SGD) {
    EM_ASSERT(m >= 0 && m < 1);
    o->cfg.beta1 = m;
    return;
  }
  EM_ASSERT(m >= 0 && m <= 1);
  o->cfg.momentum = m;
  if (m == 0 || o->slots[0].buf[0]) return;
  /* Momentum switched on for an SGD made without it: allocate the buffers
   * now, once. Running out of memory here is as fatal as it is for a
   * gradient (em_grad_acquire). */
  em_error err;
  em_status st = EM_OK;
  for (int i = 0; i < o->n && st == EM_OK; i++) st = slot_alloc(&o->cfg, &o->slots[i], &err);
  if (st == EM_OK) st = state_list_build(o, &err);
  EM_ASSERT(st == EM_OK && "out of memory for momentum buffers");
}

double em_optimizer_get_momentum(const em_optimizer *o) {
  return o->cfg.kind == EM_OPTIM_SGD ? o->cfg.momentum : o->cfg.beta1;
}

const em_optim_config *em_optimizer_config(const em_optimizer *o) { return &o->cfg; }

int64_t em_optimizer_steps(const em_optimizer *o) { return *em_i64(o->step); }

em_status em_optimizer_set_steps(em_optimizer *o, int64_t steps) {
  if (steps < 0) return EM_ERR_INVALID;
  *em_i64(o->step) = steps;
  return EM_OK;
}

int em_optimizer_state_count(const em_optimizer *o) { return o->n_state; }

em_tensor *em_optimizer_state(const em_optimizer *o, int i, const char **name) {
  EM_ASSERT(i >= 0 && i < o->n_state);
  if (name) *name = o->state[i]->name;
  return o->state[i];
}

em_tensor *em_optimizer_state_find(const em_optimizer *o, const char *name) {
  for (int i = 0; i < o->n_state; i++)
    if (strcmp(o->state[i]->name, name) == 0) return o->state[i];
  return NULL;
}
