/* test-optimizer.c: SGD, Adam and AdamW against PyTorch 1.13 for ten
 * steps of fixed, step-dependent gradients (with skipped parameters and
 * a changing lr and momentum), state export and import, gradient
 * accumulation, thread-count independence and config errors. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-optim.h"
#include "em-pool.h"
#include "em-rng.h"
#include "gradcheck.h"
#include "torch-ref.h"

#define N_PARAMS 3
#define N_STEPS 10

typedef struct {
  int ndim;
  int64_t shape[3];
} shape3;

static const shape3 param_shapes[N_PARAMS] = {{2, {4, 3}}, {1, {5}}, {3, {2, 2, 3}}};
static const char *const param_names[N_PARAMS] = {"fc.weight", "fc.bias", "conv.weight"};
static const double grad_scale[N_PARAMS] = {1.0, 0.1, 10.0};

static int64_t numel_of(int p) {
  int64_t n = 1;
  for (int d = 0; d < param_shapes[p].ndim; d++) n *= param_shapes[p].shape[d];
  return n;
}

static int64_t total_numel(void) {
  int64_t n = 0;
  for (int p = 0; p < N_PARAMS; p++) n += numel_of(p);
  return n;
}

/* Whether param p has a gradient at step s: fc.bias skips steps 2 and 5,
 * conv.weight has none at step 0 (its .grad is still NULL) and step 7. */
static bool has_grad(int s, int p) {
  if (p == 1) return s != 2 && s != 5;
  if (p == 2) return s != 0 && s != 7;
  return true;
}

typedef enum { MOM_FIXED, MOM_VARY, MOM_LATE } mom_plan;

typedef struct {
  const char *path;
  em_optim_kind kind;
  em_dtype dt;
  double lr, momentum, dampening, weight_decay;
  bool nesterov, amsgrad;
  double beta2, eps; /* 0: the default */
  mom_plan mom;      /* the momentum (SGD) or beta1 (Adam) each step */
} optim_case;

static const optim_case cases[] = {
  {"/engine/optim/sgd/plain", EM_OPTIM_SGD, EM_DTYPE_F64, 0.1, 0, 0, 0, false, false, 0, 0, MOM_FIXED},
  {"/engine/optim/sgd/momentum", EM_OPTIM_SGD, EM_DTYPE_F64, 0.05, 0.9, 0, 0, false, false, 0, 0, MOM_FIXED},
  {"/engine/optim/sgd/nesterov", EM_OPTIM_SGD, EM_DTYPE_F64, 0.05, 0.9, 0, 0.01, true, false, 0, 0, MOM_FIXED},
  {"/engine/optim/sgd/weight-decay", EM_OPTIM_SGD, EM_DTYPE_F64, 0.1, 0.8, 0, 0.1, false, false, 0, 0, MOM_FIXED},
  {"/engine/optim/sgd/dampening", EM_OPTIM_SGD, EM_DTYPE_F64, 0.1, 0.9, 0.3, 0, false, false, 0, 0, MOM_FIXED},
  {"/engine/optim/sgd/momentum-varying", EM_OPTIM_SGD, EM_DTYPE_F64, 0.1, 0.95, 0.1, 0.01, false, false, 0, 0, MOM_VARY},
  {"/engine/optim/sgd/momentum-switched-on", EM_OPTIM_SGD, EM_DTYPE_F64, 0.1, 0, 0.2, 0, false, false, 0, 0, MOM_LATE},
  {"/engine/optim/sgd/f32", EM_OPTIM_SGD, EM_DTYPE_F32, 0.05, 0.9, 0, 1e-3, true, false, 0, 0, MOM_FIXED},
  {"/engine/optim/adam/plain", EM_OPTIM_ADAM, EM_DTYPE_F64, 1e-2, 0, 0, 0, false, false, 0, 0, MOM_FIXED},
  {"/engine/optim/adam/weight-decay", EM_OPTIM_ADAM, EM_DTYPE_F64, 1e-2, 0, 0, 0.05, false, false, 0.99, 1e-6, MOM_FIXED},
  {"/engine/optim/adam/amsgrad", EM_OPTIM_ADAM, EM_DTYPE_F64, 1e-2, 0, 0, 0.01, false, true, 0, 0, MOM_FIXED},
  {"/engine/optim/adam/beta1-varying", EM_OPTIM_ADAM, EM_DTYPE_F64, 3e-2, 0, 0, 0, false, false, 0, 0, MOM_VARY},
  {"/engine/optim/adam/f32", EM_OPTIM_ADAM, EM_DTYPE_F32, 1e-2, 0, 0, 0.01, false, true, 0, 0, MOM_FIXED},
  {"/engine/optim/adamw/plain", EM_OPTIM_ADAMW, EM_DTYPE_F64, 1e-2, 0, 0, 0.01, false, false, 0, 0, MOM_FIXED},
  {"/engine/optim/adamw/amsgrad", EM_OPTIM_ADAMW, EM_DTYPE_F64, 1e-2, 0, 0, 0.1, false, true, 0.95, 1e-7, MOM_FIXED},
  {"/engine/optim/adamw/f32", EM_OPTIM_ADAMW, EM_DTYPE_F32, 2e-2, 0, 0, 0.05, false, false, 0, 0, MOM_VARY},
};
#define N_CASES ((int)G_N_ELEMENTS(cases))

static void config_of(const optim_case *c, em_optim_config *cfg) {
  em_optim_config_defaults(cfg, c->kind);
  cfg->lr = c->lr;
  cfg->momentum = c->momentum;
  cfg->dampening = c->dampening;
  cfg->weight_decay = c->weight_decay;
  cfg->nesterov = c->nesterov;
  cfg->amsgrad = c->amsgrad;
  if (c->beta2 != 0) cfg->beta2 = c->beta2;
  if (c->eps != 0) cfg->eps = c->eps;
}

/* The values both sides use; f32 cases hold values already rounded to
 * float so that both start from the same numbers. */
typedef struct {
  double *init[N_PARAMS];          /* (D) per param */
  double *grad[N_STEPS][N_PARAMS]; /* (D) per param, NULL when absent */
  double lr[N_STEPS], mom[N_STEPS];
} case_inputs;

static double rounded(em_dtype dt, double v) { return dt == EM_DTYPE_F32 ? (double)(float)v : v; }

static void inputs_make(const optim_case *c, int ci, case_inputs *in) {
  em_optim_config cfg;
  config_of(c, &cfg);
  for (int p = 0; p < N_PARAMS; p++) {
    em_rng r;
    em_rng_seed(&r, 100 + (uint64_t)p);
    in->init[p] = g_new(double, numel_of(p));
    for (int64_t k = 0; k < numel_of(p); k++)
      in->init[p][k] = rounded(c->dt, 2 * em_rng_uniform(&r) - 1);
  }
  for (int s = 0; s < N_STEPS; s++) {
    in->lr[s] = c->lr * (1 - 0.05 * s);
    double fixed = c->kind == EM_OPTIM_SGD ? cfg.momentum : cfg.beta1;
    in->mom[s] = c->mom == MOM_FIXED ? fixed : c->mom == MOM_VARY ? 0.95 - 0.01 * s : s < 3 ? 0 : 0.9;
    for (int p = 0; p < N_PARAMS; p++) {
      in->grad[s][p] = NULL;
      if (!has_grad(s, p)) continue;
      em_rng r;
      em_rng_seed(&r, 1000 * (uint64_t)ci + 10 * (uint64_t)s + (uint64_t)p);
      in->grad[s][p] = g_new(double, numel_of(p));
      for (int64_t k = 0; k < numel_of(p); k++)
        in->grad[s][p][k] = rounded(c->dt, grad_scale[p] * (2 * em_rng_uniform(&r) - 1));
    }
  }
}

static void inputs_clear(case_inputs *in) {
  for (int p = 0; p < N_PARAMS; p++) g_free(in->init[p]);
  for (int s = 0; s < N_STEPS; s++)
    for (int p = 0; p < N_PARAMS; p++) g_free(in->grad[s][p]);
}

/* ---- the engine side ------------------------------------------------------ */
typedef struct {
  em_tensor *params[N_PARAMS];
  em_tensor *staging[N_PARAMS]; /* a gradient before it reaches .grad */
} rig;

static void store(em_tensor *t, const double *v) {
  for (int64_t k = 0; k < em_tensor_numel(t); k++) {
    if (t->dtype == EM_DTYPE_F32) em_f32(t)[k] = (float)v[k];
    else em_f64(t)[k] = v[k];
  }
}

static double load(const em_tensor *t, int64_t k) {
  return t->dtype == EM_DTYPE_F32 ? em_f32(t)[k] : em_f64(t)[k];
}

static void rig_init(rig *r, em_dtype dt, const case_inputs *in) {
  for (int p = 0; p < N_PARAMS; p++) {
    r->params[p] = em_tensor_new(dt, param_shapes[p].ndim, param_shapes[p].shape, NULL);
    r->staging[p] = em_tensor_new(dt, param_shapes[p].ndim, param_shapes[p].shape, NULL);
    store(r->params[p], in->init[p]);
    em_tensor_set_requires_grad(r->params[p], true);
  }
}

static void rig_clear(rig *r) {
  for (int p = 0; p < N_PARAMS; p++) {
    em_tensor_free(r->params[p]);
    em_tensor_free(r->staging[p]);
  }
}

/* Steps [from, to) the way a trainer does: zero_grad, backward writes
 * the gradients that exist, set lr and momentum, step. out (optional)
 * receives every param after every step: (S, total numel). */
static void run_steps(em_optimizer *o, rig *r, const case_inputs *in, int from, int to,
                      double *out) {
  for (int s = from; s < to; s++) {
    em_optimizer_zero_grad(o);
    for (int p = 0; p < N_PARAMS; p++) {
      if (!in->grad[s][p]) continue;
      store(r->staging[p], in->grad[s][p]);
      em_grad_accumulate(r->params[p], r->staging[p]);
    }
    em_optimizer_set_lr(o, in->lr[s]);
    em_optimizer_set_momentum(o, in->mom[s]);
    em_optimizer_step(o);
    if (!out) continue;
    double *row = out + (int64_t)s * total_numel();
    for (int p = 0; p < N_PARAMS; p++)
      for (int64_t k = 0; k < numel_of(p); k++) *row++ = load(r->params[p], k);
  }
}

static em_optimizer *optimizer_for(const optim_case *c, rig *r) {
  em_optim_config cfg;
  config_of(c, &cfg);
  em_error err;
  em_optimizer *o = em_optimizer_new(&cfg, N_PARAMS, r->params, param_names, &err);
  if (!o) g_error("em_optimizer_new: %s", err.msg);
  return o;
}

/* ---- the PyTorch side ---------------------------------------------------------- */
static void write_case(tref_batch *b, const optim_case *c, const case_inputs *in) {
  em_optim_config cfg;
  config_of(c, &cfg);
  tref_case(b, "optim");
  tref_word(b, em_optim_kind_name(c->kind));
  tref_word(b, em_dtype_name(c->dt));
  tref_num(b, cfg.lr);
  tref_num(b, cfg.momentum);
  tref_num(b, cfg.dampening);
  tref_num(b, cfg.weight_decay);
  tref_int(b, cfg.nesterov);
  tref_num(b, cfg.beta1);
  tref_num(b, cfg.beta2);
  tref_num(b, cfg.eps);
  tref_int(b, cfg.amsgrad);
  tref_int(b, N_PARAMS);
  for (int p = 0; p < N_PARAMS; p++) {
    tref_int(b, numel_of(p));
    for (int64_t k = 0; k < numel_of(p); k++) tref_num(b, in->init[p][k]);
  }
  tref_int(b, N_STEPS);
  for (int s = 0; s < N_STEPS; s++) {
    tref_num(b, in->lr[s]);
    tref_num(b, in->mom[s]);
    for (int p = 0; p < N_PARAMS; p++) {
      tref_int(b, in->grad[s][p] != NULL);
      if (in->grad[s][p])
        for (int64_t k = 0; k < numel_of(p); k++) tref_num(b, in->grad[s][p][k]);
    }
  }
}

/* Every case's PyTorch trajectory, computed once; NULL (and the test
 * marked skipped) without PyTorch. */
static tref_batch *reference(void) {
  static tref_batch *ref;
  static char *why;
  static bool tried;
  if (!tried) {
    tried = true;
    ref = tref_batch_new();
    for (int ci = 0; ci < N_CASES; ci++) {
      case_inputs in;
      inputs_make(&cases[ci], ci, &in);
      write_case(ref, &cases[ci], &in);
      inputs_clear(&in);
    }
    tref_batch_run_or_skip(&ref, &why);
  } else if (!ref) {
    g_test_skip(why);
  }
  return ref;
}

static void test_against_torch(gconstpointer data) {
  const optim_case *c = data;
  int ci = (int)(c - cases);
  tref_batch *ref = reference();
  if (!ref) return;
  case_inputs in;
  inputs_make(c, ci, &in);
  rig r;
  rig_init(&r, c->dt, &in);
  em_optimizer *o = optimizer_for(c, &r);
  int64_t row = total_numel();
  double *got = g_new(double, N_STEPS * row);
  run_steps(o, &r, &in, 0, N_STEPS, got);
  int64_t n;
  const double *want = tref_result(ref, ci, &n);
  g_assert_cmpint(n, ==, N_STEPS * row);
  double tol = c->dt == EM_DTYPE_F32 ? 1e-5 : 1e-6, worst = 0;
  for (int s = 0; s < N_STEPS; s++) {
    g_autofree char *what = g_strdup_printf("%s step %d", c->path, s);
    g_assert_true(tref_close(what, got + s * row, want + s * row, row, tol, &worst));
  }
  g_test_message("%s: worst error %.3g", c->path, worst);
  g_assert_cmpint(em_optimizer_steps(o), ==, N_STEPS);
  em_optimizer_free(o);
  g_free(got);
  rig_clear(&r);
  inputs_clear(&in);
}

/* ---- state export and import ------------------------------------------------------ */
/* Runs 4 steps, saves params and state, builds a new optimiser on copies,
 * loads the state, and checks that the next steps match the original
 * run bit for bit. */
static void check_resume(const optim_case *c, const char *const *expect_names, int n_expect) {
  int ci = (int)(c - cases);
  case_inputs in;
  inputs_make(c, ci, &in);
  rig a, b;
  rig_init(&a, c->dt, &in);
  rig_init(&b, c->dt, &in);
  em_optimizer *oa = optimizer_for(c, &a);
  run_steps(oa, &a, &in, 0, 4, NULL);

  /* The checkpoint: copies of the params and named state tensors. */
  int n_state = em_optimizer_state_count(oa);
  g_assert_cmpint(n_state, ==, n_expect);
  em_tensor **saved = g_new0(em_tensor *, n_state);
  const char **saved_names = g_new0(const char *, n_state);
  for (int i = 0; i < n_state; i++) {
    em_tensor *t = em_optimizer_state(oa, i, &saved_names[i]);
    g_assert_cmpstr(saved_names[i], ==, expect_names[i]);
    saved[i] = em_tensor_new(t->dtype, t->ndim, t->shape, NULL);
    em_tensor_copy_(saved[i], t);
  }
  for (int p = 0; p < N_PARAMS; p++) em_tensor_copy_(b.params[p], a.params[p]);
  em_tensor *step = em_optimizer_state_find(oa, "optimizer.step");
  g_assert_nonnull(step);
  g_assert_cmpint(step->dtype, ==, EM_DTYPE_I64);
  g_assert_cmpint(em_tensor_item(step), ==, 4);

  /* Resume: a fresh optimiser (its config's lr and momentum are reset by
   * the loop anyway), state loaded by name. */
  em_optimizer *ob = optimizer_for(c, &b);
  g_assert_cmpint(em_optimizer_steps(ob), ==, 0);
  g_assert_cmpint(em_optimizer_state_count(ob), ==, n_state);
  for (int i = 0; i < n_state; i++) {
    const char *name;
    em_tensor *t = em_optimizer_state(ob, i, &name);
    int j = 0;
    while (j < n_state && strcmp(saved_names[j], name) != 0) j++;
    g_assert_cmpint(j, <, n_state);
    em_tensor_copy_(t, saved[j]);
  }
  g_assert_cmpint(em_optimizer_steps(ob), ==, 4);

  int64_t row = total_numel();
  double *ga = g_new(double, N_STEPS * row), *gb = g_new(double, N_STEPS * row);
  run_steps(oa, &a, &in, 4, N_STEPS, ga);
  run_steps(ob, &b, &in, 4, N_STEPS, gb);
  g_assert_cmpmem(ga + 4 * row, (N_STEPS - 4) * row * sizeof(double), gb + 4 * row,
                  (N_STEPS - 4) * row * sizeof(double));
  for (int i = 0; i < n_state; i++) em_tensor_free(saved[i]);
  g_free(saved);
  g_free(saved_names);
  g_free(ga);
  g_free(gb);
  em_optimizer_free(oa);
  em_optimizer_free(ob);
  rig_clear(&a);
  rig_clear(&b);
  inputs_clear(&in);
}

static const optim_case *case_named(const char *path) {
  for (int ci = 0; ci < N_CASES; ci++)
    if (strcmp(cases[ci].path, path) == 0) return &cases[ci];
  g_error("no case %s", path);
}

static void test_resume_sgd(void) {
  static const char *const names[] = {
    "optimizer.step",
    "fc.weight.momentum_buffer", "fc.weight.step",
    "fc.bias.momentum_buffer", "fc.bias.step",
    "conv.weight.momentum_buffer", "conv.weight.step",
  };
  check_resume(case_named("/engine/optim/sgd/f32"), names, G_N_ELEMENTS(names));
  check_resume(case_named("/engine/optim/sgd/dampening"), names, G_N_ELEMENTS(names));
  /* Plain SGD has nothing but the step count. */
  static const char *const plain[] = {"optimizer.step"};
  check_resume(case_named("/engine/optim/sgd/plain"), plain, 1);
}

static void test_resume_adam(void) {
  static const char *const names[] = {
    "optimizer.step",
    "fc.weight.exp_avg", "fc.weight.exp_avg_sq", "fc.weight.max_exp_avg_sq", "fc.weight.step",
    "fc.bias.exp_avg", "fc.bias.exp_avg_sq", "fc.bias.max_exp_avg_sq", "fc.bias.step",
    "conv.weight.exp_avg", "conv.weight.exp_avg_sq", "conv.weight.max_exp_avg_sq",
    "conv.weight.step",
  };
  check_resume(case_named("/engine/optim/adam/f32"), names, G_N_ELEMENTS(names));
  check_resume(case_named("/engine/optim/adamw/amsgrad"), names, G_N_ELEMENTS(names));
  static const char *const plain[] = {
    "optimizer.step",
    "fc.weight.exp_avg", "fc.weight.exp_avg_sq", "fc.weight.step",
    "fc.bias.exp_avg", "fc.bias.exp_avg_sq", "fc.bias.step",
    "conv.weight.exp_avg", "conv.weight.exp_avg_sq", "conv.weight.step",
  };
  check_resume(case_named("/engine/optim/adamw/f32"), plain, G_N_ELEMENTS(plain));
}

static void test_set_steps(void) {
  const optim_case *c = case_named("/engine/optim/adam/plain");
  case_inputs in;
  inputs_make(c, 0, &in);
  rig r;
  rig_init(&r, c->dt, &in);
  em_optimizer *o = optimizer_for(c, &r);
  g_assert_cmpint(em_optimizer_set_steps(o, 123), ==, EM_OK);
  g_assert_cmpint(em_optimizer_steps(o), ==, 123);
  g_assert_cmpint(em_optimizer_set_steps(o, -1), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_optimizer_steps(o), ==, 123);
  /* Per-parameter counts are their own (Adam's bias correction). */
  run_steps(o, &r, &in, 0, 3, NULL);
  g_assert_cmpint(em_optimizer_steps(o), ==, 126);
  g_assert_cmpint(em_tensor_item(em_optimizer_state_find(o, "fc.weight.step")), ==, 3);
  g_assert_cmpint(em_tensor_item(em_optimizer_state_find(o, "fc.bias.step")), ==, 2);
  g_assert_cmpint(em_tensor_item(em_optimizer_state_find(o, "conv.weight.step")), ==, 2);
  g_assert_null(em_optimizer_state_find(o, "fc.weight.momentum_buffer"));
  em_optimizer_free(o);
  rig_clear(&r);
  inputs_clear(&in);
}

/* ---- gradient accumulation ----------------------------------------------------------- */
/* zero_grad, two backwards, step == one step on the summed gradient. */
static void test_accumulation(void) {
  int64_t shape[1] = {7};
  em_tensor *p1 = gc_rand(EM_DTYPE_F64, 1, shape, -1, 1, 1, true);
  em_tensor *p2 = gc_rand(EM_DTYPE_F64, 1, shape, -1, 1, 1, true);
  em_tensor *g1 = gc_rand(EM_DTYPE_F64, 1, shape, -1, 1, 2, false);
  em_tensor *g2 = gc_rand(EM_DTYPE_F64, 1, shape, -1, 1, 3, false);
  em_tensor *sum = em_tensor_new(EM_DTYPE_F64, 1, shape, NULL);
  for (int k = 0; k < 7; k++) em_f64(sum)[k] = em_f64(g1)[k] + em_f64(g2)[k];
  em_optim_config cfg;
  em_optim_config_defaults(&cfg, EM_OPTIM_SGD);
  cfg.momentum = 0.9;
  em_optimizer *o1 = em_optimizer_new(&cfg, 1, &p1, NULL, NULL);
  em_optimizer *o2 = em_optimizer_new(&cfg, 1, &p2, NULL, NULL);
  for (int s = 0; s < 3; s++) {
    em_optimizer_zero_grad(o1);
    em_grad_accumulate(p1, g1); /* micro-batch 1 overwrites the stale gradient */
    em_grad_accumulate(p1, g2); /* micro-batch 2 adds */
    em_optimizer_step(o1);
    em_optimizer_zero_grad(o2);
    em_grad_accumulate(p2, sum);
    em_optimizer_step(o2);
    g_assert_cmpmem(em_f64(p1), 7 * sizeof(double), em_f64(p2), 7 * sizeof(double));
  }
  /* A step after zero_grad with no backward changes nothing. */
  em_optimizer_zero_grad(o1);
  em_tensor *before = em_tensor_new(EM_DTYPE_F64, 1, shape, NULL);
  em_tensor_copy_(before, p1);
  em_optimizer_step(o1);
  g_assert_cmpmem(em_f64(p1), 7 * sizeof(double), em_f64(before), 7 * sizeof(double));
  g_assert_cmpint(em_optimizer_steps(o1), ==, 4);
  const char *name;
  em_optimizer_state(o1, 1, &name);
  g_assert_cmpstr(name, ==, "param.0.momentum_buffer");
  em_optimizer_free(o1);
  em_optimizer_free(o2);
  em_tensor *all[] = {p1, p2, g1, g2, sum, before};
  for (int i = 0; i < 6; i++) em_tensor_free(all[i]);
}

/* ---- threads -------------------------------------------------------------------------- */
/* Big tensors are split over the pool; the result must not depend on it. */
static void run_big(em_optim_kind kind, int threads, em_tensor *p, em_tensor *g) {
  int prev = em_get_num_threads();
  em_set_num_threads(threads);
  em_optim_config cfg;
  em_optim_config_defaults(&cfg, kind);
  cfg.momentum = 0.9;
  cfg.nesterov = true;
  cfg.amsgrad = true;
  em_optimizer *o = em_optimizer_new(&cfg, 1, &p, NULL, NULL);
  for (int s = 0; s < 3; s++) {
    em_optimizer_zero_grad(o);
    em_grad_accumulate(p, g);
    em_optimizer_step(o);
  }
  em_optimizer_free(o);
  em_set_num_threads(prev);
}

static void test_threads(void) {
  int64_t shape[2] = {3, 100003}; /* about 300k elements: several chunks */
  for (int kind = EM_OPTIM_SGD; kind <= EM_OPTIM_ADAMW; kind++) {
    em_tensor *p1 = gc_rand(EM_DTYPE_F32, 2, shape, -1, 1, 5, true);
    em_tensor *p2 = gc_rand(EM_DTYPE_F32, 2, shape, -1, 1, 5, true);
    em_tensor *g = gc_rand(EM_DTYPE_F32, 2, shape, -1, 1, 6, false);
    run_big((em_optim_kind)kind, 1, p1, g);
    run_big((em_optim_kind)kind, 2, p2, g);
    g_assert_cmpmem(em_f32(p1), em_tensor_nbytes(p1), em_f32(p2), em_tensor_nbytes(p2));
    em_tensor_free(p1);
    em_tensor_free(p2);
    em_tensor_free(g);
  }
}

/* ---- errors --------------------------------------------------------------------------- */
static void expect_invalid(const em_optim_config *cfg, int n, em_tensor **params,
                           const char *const *names, em_status st, const char *fragment) {
  em_error err;
  em_error_clear(&err);
  em_optimizer *o = em_optimizer_new(cfg, n, params, names, &err);
  g_assert_null(o);
  g_assert_cmpint(err.status, ==, st);
  if (!strstr(err.msg, fragment)) g_error("message '%s' lacks '%s'", err.msg, fragment);
}

static void test_errors(void) {
  int64_t shape[1] = {3};
  em_tensor *p[2] = {gc_rand(EM_DTYPE_F32, 1, shape, -1, 1, 1, true),
                     gc_rand(EM_DTYPE_F32, 1, shape, -1, 1, 2, true)};
  em_tensor *ints = em_tensor_new(EM_DTYPE_I64, 1, shape, NULL);
  em_optim_config c;
  em_optim_config_defaults(&c, EM_OPTIM_SGD);
  c.nesterov = true;
  expect_invalid(&c, 2, p, NULL, EM_ERR_INVALID, "nesterov");
  em_optim_config_defaults(&c, EM_OPTIM_SGD);
  c.lr = -1;
  expect_invalid(&c, 2, p, NULL, EM_ERR_INVALID, "lr");
  c.lr = NAN;
  expect_invalid(&c, 2, p, NULL, EM_ERR_INVALID, "lr");
  em_optim_config_defaults(&c, EM_OPTIM_ADAM);
  c.beta2 = 1.0;
  expect_invalid(&c, 2, p, NULL, EM_ERR_INVALID, "betas");
  em_optim_config_defaults(&c, EM_OPTIM_ADAMW);
  expect_invalid(&c, 0, p, NULL, EM_ERR_INVALID, "no parameters");
  em_tensor *twice[2] = {p[0], p[0]};
  expect_invalid(&c, 2, twice, NULL, EM_ERR_INVALID, "twice");
  static const char *const same[2] = {"w", "w"};
  expect_invalid(&c, 2, p, same, EM_ERR_INVALID, "two parameters are named 'w'");
  static const char *const clash[2] = {"optimizer", "x"};
  expect_invalid(&c, 2, p, clash, EM_ERR_INVALID, "optimizer.step");
  em_tensor *bad[2] = {p[0], ints};
  expect_invalid(&c, 2, bad, NULL, EM_ERR_UNSUPPORTED, "i64");

  em_optim_kind k;
  g_assert_cmpint(em_optim_parse_kind("adamw", &k, NULL), ==, EM_OK);
  g_assert_cmpint(k, ==, EM_OPTIM_ADAMW);
  em_error err;
  g_assert_cmpint(em_optim_parse_kind("adamx", &k, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "adamx"));

  /* Defaults are PyTorch's. */
  em_optim_config_defaults(&c, EM_OPTIM_ADAMW);
  g_assert_cmpfloat(c.lr, ==, 1e-3);
  g_assert_cmpfloat(c.beta1, ==, 0.9);
  g_assert_cmpfloat(c.beta2, ==, 0.999);
  g_assert_cmpfloat(c.eps, ==, 1e-8);
  g_assert_cmpfloat(c.weight_decay, ==, 1e-2);
  g_assert_false(c.amsgrad);
  em_tensor_free(p[0]);
  em_tensor_free(p[1]);
  em_tensor_free(ints);
}

/* Every optimiser of the table: its name parses back to it, its defaults
 * pass the check, and the state it says it keeps per parameter (what the
 * memory estimate counts) is the state it makes, with and without the
 * options that add state, each tensor the parameter's size. */
static void test_every_kind(void) {
  int64_t shape[1] = {5};
  em_tensor *p[2] = {gc_rand(EM_DTYPE_F32, 1, shape, -1, 1, 1, true),
                     gc_rand(EM_DTYPE_F32, 1, shape, -1, 1, 2, true)};
  int n = em_optim_kind_count();
  g_assert_cmpint(n, >=, 3);
  g_assert_null(em_optim_kind_name((em_optim_kind)n));
  for (int k = 0; k < n; k++) {
    const char *name = em_optim_kind_name((em_optim_kind)k);
    g_assert_nonnull(name);
    em_optim_kind back;
    g_assert_cmpint(em_optim_parse_kind(name, &back, NULL), ==, EM_OK);
    g_assert_cmpint(back, ==, k);
    for (int more = 0; more < 2; more++) {
      em_optim_config c;
      em_optim_config_defaults(&c, (em_optim_kind)k);
      g_assert_cmpint(c.kind, ==, k);
      if (more) {
        c.momentum = 0.9;
        c.amsgrad = true;
      }
      em_error err;
      if (em_optim_config_check(&c, &err) != EM_OK) g_error("%s: %s", name, err.msg);
      em_optimizer *o = em_optimizer_new(&c, 2, p, NULL, &err);
      g_assert_nonnull(o);
      int per = em_optim_state_per_param(&c);
      /* optimizer.step; per parameter its buffers and, with any, its step */
      g_assert_cmpint(em_optimizer_state_count(o), ==, 1 + 2 * (per + (per > 0)));
      for (int i = 0; i < em_optimizer_state_count(o); i++) {
        const char *sn;
        em_tensor *t = em_optimizer_state(o, i, &sn);
        if (t->dtype != EM_DTYPE_I64) g_assert_cmpint(em_tensor_numel(t), ==, 5);
      }
      em_optimizer_free(o);
    }
  }
  em_tensor_free(p[0]);
  em_tensor_free(p[1]);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  for (int ci = 0; ci < N_CASES; ci++)
    g_test_add_data_func(cases[ci].path, &cases[ci], test_against_torch);
  g_test_add_func("/engine/optim/resume/sgd", test_resume_sgd);
  g_test_add_func("/engine/optim/resume/adam", test_resume_adam);
  g_test_add_func("/engine/optim/steps", test_set_steps);
  g_test_add_func("/engine/optim/accumulation", test_accumulation);
  g_test_add_func("/engine/optim/threads", test_threads);
  g_test_add_func("/engine/optim/errors", test_errors);
  g_test_add_func("/engine/optim/every-kind", test_every_kind);
  return g_test_run();
}
