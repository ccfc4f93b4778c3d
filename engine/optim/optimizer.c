/* optimizer.c: the optimiser object: configuration, parameters and their
 * state tensors, the step count, and the state list that checkpoints
 * read and write, for any optimiser type (optimizers.c's table). The
 * updates themselves are in each type's file (sgd.c, adam.c).
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

static bool in_range(double v, double lo, double hi) { return v >= lo && v <= hi; }

em_status em_optim_config_check(const em_optim_config *c, em_error *err) {
  if ((unsigned)c->kind >= (unsigned)em_optim_kind_count())
    return em_error_set(err, EM_ERR_INVALID, "unknown optimizer kind %d", (int)c->kind);
  const em_optim_type *type = em_optim_type_of(c->kind);
  if (!in_range(c->lr, 0, INFINITY) || isinf(c->lr))
    return em_error_set(err, EM_ERR_INVALID, "%s: lr must be a finite number >= 0, got %g",
                        type->name, c->lr);
  if (!in_range(c->weight_decay, 0, INFINITY) || isinf(c->weight_decay))
    return em_error_set(err, EM_ERR_INVALID,
                        "%s: weight_decay must be a finite number >= 0, got %g", type->name,
                        c->weight_decay);
  return type->check ? type->check(c, err) : EM_OK;
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
    for (int b = 0; b < EM_OPTIM_MAX_BUFFERS; b++) count += o->slots[i].buf[b] != NULL;
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
    for (int b = 0; b < EM_OPTIM_MAX_BUFFERS; b++)
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

/* Allocates what slot s's state lacks for the optimiser's kind and
 * config. */
static em_status slot_alloc(const em_optim_config *c, em_optim_slot *s, em_error *err) {
  const em_tensor *p = s->param;
  const em_optim_type *type = em_optim_type_of(c->kind);
  int nbuf = type->buffers(c);
  EM_ASSERT(nbuf >= 0 && nbuf <= EM_OPTIM_MAX_BUFFERS);
  for (int b = 0; b < nbuf; b++) {
    if (s->buf[b]) continue;
    s->buf[b] = state_new(p->device, p->dtype, p->ndim, p->shape, s->name,
                          type->buffer_names[b], err);
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
    const em_optim_type *type = em_optim_type_of(c->kind);
    if (type->check_param && type->check_param(c, p, nm, err) != EM_OK) return NULL;
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
    for (int b = 0; b < EM_OPTIM_MAX_BUFFERS; b++) state_free(s->buf[b]);
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
  const em_optim_type *type = em_optim_type_of(o->cfg.kind);
  int n_pieces = 0;
  for (int i = 0; i < o->n; i++) {
    em_optim_slot *s = &o->slots[i];
    const em_tensor *p = s->param, *g = em_tensor_current_grad(p);
    if (!g) continue;
    EM_ASSERT(g->dtype == p->dtype && em_tensor_numel(g) == em_tensor_numel(p));
    EM_ASSERT(em_tensor_is_contiguous(g));
    em_optim_piece *piece = &o->pieces[n_pieces];
    if (type->prepare(&o->cfg, s, g, piece)) n_pieces++;
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
  em_optim_type_of(o->cfg.kind)->set_momentum(&o->cfg, m);
  if (em_optim_state_per_param(&o->cfg) == 0 || o->slots[0].buf[0]) return;
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
  return em_optim_type_of(o->cfg.kind)->get_momentum(&o->cfg);
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
