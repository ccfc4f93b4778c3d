/* test-pool.c: em_max_pool2d and em_avg_pool2d against finite
 * differences (f64, the loop reference), the f32 fast path against the
 * reference (ties, -inf and NaN included), and PyTorch. */
#include <glib.h>
#include <math.h>
#include <stdio.h>

#include "conv-check.h"
#include "conv-private.h"

typedef struct {
  const char *name;
  bool max;
  int64_t N, C, H, W;
  int kh, kw, sh, sw, ph, pw;
  bool include_pad;
} pool_case;

static em_pool2d_params params_of(const pool_case *c) {
  em_pool2d_params p = {{c->kh, c->kw}, {c->sh, c->sw}, {c->ph, c->pw}, c->include_pad};
  return p;
}

static em_tensor *pool(const pool_case *c, bool ref, em_tensor *x) {
  em_pool2d_params p = params_of(c);
  if (c->max) return ref ? em_max_pool2d_ref(x, &p) : em_max_pool2d(x, &p);
  return ref ? em_avg_pool2d_ref(x, &p) : em_avg_pool2d(x, &p);
}

static void out_shape(const pool_case *c, int64_t *s) {
  s[0] = c->N;
  s[1] = c->C;
  s[2] = (c->H + 2 * c->ph - c->kh) / c->sh + 1;
  s[3] = (c->W + 2 * c->pw - c->kw) / c->sw + 1;
}

static em_tensor *keep(const em_tensor *t) {
  em_tensor *k = em_tensor_new(t->dtype, t->ndim, t->shape, NULL);
  em_tensor_copy_(k, t);
  return k;
}

/* ---- gradient checks (f64) ---------------------------------------------------- */

static em_tensor *f_pool(em_tensor **in, void *ctx) { return pool(ctx, false, in[0]); }

static const pool_case grad_cases[] = {
    {"max-2x2", true, 2, 2, 6, 5, 2, 2, 2, 2, 0, 0, true},
    {"max-3x3-s2-p1", true, 2, 2, 7, 6, 3, 3, 2, 2, 1, 1, true},
    {"max-nonsquare", true, 1, 3, 6, 7, 3, 2, 1, 2, 1, 1, true},
    {"avg-2x2", false, 2, 2, 6, 5, 2, 2, 2, 2, 0, 0, true},
    {"avg-3x3-s2-p1", false, 2, 2, 7, 6, 3, 3, 2, 2, 1, 1, true},
    {"avg-3x3-s2-p1-exclude-pad", false, 2, 2, 7, 6, 3, 3, 2, 2, 1, 1, false},
    {"avg-nonsquare", false, 1, 3, 6, 7, 3, 2, 1, 2, 1, 1, true},
};

static void test_gradcheck(gconstpointer data) {
  const pool_case *c = data;
  int64_t xs[4] = {c->N, c->C, c->H, c->W};
  em_tensor *x = gc_rand(EM_DTYPE_F64, 4, xs, -1, 1, 7, true);
  g_assert_true(gradcheck(c->name, f_pool, 1, &x, (void *)c, NULL));
  em_tensor_free(x);
}

/* ---- fast path against the reference (f32) ------------------------------------- */

/* y and gx of one implementation, seeded with gy; x persistent. */
static void run(const pool_case *c, bool ref, em_tensor *x, const em_tensor *gy, em_tensor **y,
                em_tensor **gx) {
  em_tensor_zero_grad(x);
  em_scope *s = em_scope_begin();
  em_tensor *out = pool(c, ref, x);
  *y = keep(out);
  em_backward_grad(out, gy);
  em_scope_end(s);
  *gx = keep(x->grad);
}

/* Exact equality, NaN equal to NaN. */
static bool same(const char *what, const em_tensor *a, const em_tensor *b) {
  for (int64_t k = 0; k < em_tensor_numel(a); k++) {
    float u = em_f32(a)[k], v = em_f32(b)[k];
    if (u == v || (isnan(u) && isnan(v))) continue;
    fprintf(stderr, "%s: element %lld: %.9g vs %.9g\n", what, (long long)k, u, v);
    return false;
  }
  return true;
}

static const pool_case fast_cases[] = {
    {"max-fmnist-pool1", true, 3, 32, 28, 28, 2, 2, 2, 2, 0, 0, true},
    {"max-2x2-odd", true, 2, 3, 7, 9, 2, 2, 2, 2, 0, 0, true},
    {"max-3x3-s2-p1", true, 2, 3, 9, 8, 3, 3, 2, 2, 1, 1, true},
    {"max-3x3-s1-p1", true, 2, 3, 6, 6, 3, 3, 1, 1, 1, 1, true},
    {"max-4x3-s3x2", true, 2, 2, 11, 10, 4, 3, 3, 2, 2, 1, true},
    {"avg-2x2-odd", false, 2, 3, 7, 9, 2, 2, 2, 2, 0, 0, true},
    {"avg-3x3-s2-p1", false, 2, 3, 9, 8, 3, 3, 2, 2, 1, 1, true},
    {"avg-3x3-s2-p1-exclude-pad", false, 2, 3, 9, 8, 3, 3, 2, 2, 1, 1, false},
    {"avg-4x3-s3x2", false, 2, 2, 11, 10, 4, 3, 3, 2, 2, 1, false},
};

/* Inputs with many ties (small integers), a few -inf and NaN. */
static em_tensor *tied_input(const pool_case *c, unsigned seed, bool specials) {
  int64_t xs[4] = {c->N, c->C, c->H, c->W};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 4, xs, 0, 4, seed, true);
  for (int64_t k = 0; k < em_tensor_numel(x); k++) {
    float *v = &em_f32(x)[k];
    *v = floorf(*v);
    if (specials && k % 37 == 5) *v = -INFINITY;
    if (specials && k % 101 == 7) *v = NAN;
  }
  return x;
}

static void test_fast_vs_ref(gconstpointer data) {
  const pool_case *c = data;
  int64_t ys[4];
  out_shape(c, ys);
  em_tensor *gy = gc_rand(EM_DTYPE_F32, 4, ys, -1, 1, 3, false);
  for (int variant = 0; variant < 3; variant++) {
    /* 0: random values; 1: ties; 2: ties, -inf and NaN (max only) */
    if (variant == 2 && !c->max) break;
    int64_t xs[4] = {c->N, c->C, c->H, c->W};
    em_tensor *x = variant == 0 ? gc_rand(EM_DTYPE_F32, 4, xs, -1, 1, 5, true)
                                : tied_input(c, 9, variant == 2);
    em_tensor *fy, *fgx, *ry, *rgx;
    run(c, false, x, gy, &fy, &fgx);
    run(c, true, x, gy, &ry, &rgx);
    char what[128];
    snprintf(what, sizeof what, "%s/%d: y", c->name, variant);
    if (c->max) {
      g_assert_true(same(what, fy, ry));
      snprintf(what, sizeof what, "%s/%d: gx", c->name, variant);
      g_assert_true(same(what, fgx, rgx));
    } else {
      g_assert_true(cc_close(what, fy, ry, 1e-6));
      snprintf(what, sizeof what, "%s/%d: gx", c->name, variant);
      g_assert_true(cc_close(what, fgx, rgx, 1e-6));
    }
    em_tensor_free(fy);
    em_tensor_free(fgx);
    em_tensor_free(ry);
    em_tensor_free(rgx);
    em_tensor_free(x);
  }
  em_tensor_free(gy);
}

/* A second backward without zero_grad accumulates. */
static void test_accumulate(void) {
  const pool_case *c = &fast_cases[1];
  int64_t xs[4] = {c->N, c->C, c->H, c->W}, ys[4];
  out_shape(c, ys);
  em_tensor *x = gc_rand(EM_DTYPE_F32, 4, xs, -1, 1, 13, true);
  em_tensor *gy = gc_rand(EM_DTYPE_F32, 4, ys, -1, 1, 14, false);
  em_tensor *y, *once;
  run(c, false, x, gy, &y, &once);
  em_scope *s = em_scope_begin();
  em_backward_grad(pool(c, false, x), gy);
  em_scope_end(s);
  for (int64_t k = 0; k < em_tensor_numel(once); k++)
    g_assert_cmpfloat(em_f32(x->grad)[k], ==, 2 * em_f32(once)[k]);
  em_tensor_free(y);
  em_tensor_free(once);
  em_tensor_free(x);
  em_tensor_free(gy);
}

/* Once a step has run, the next allocates nothing from the system. */
static void test_steady_state_allocations(void) {
  for (int i = 0; i < 2; i++) {
    const pool_case *c = &fast_cases[i == 0 ? 0 : 6];
    int64_t xs[4] = {c->N, c->C, c->H, c->W}, ys[4];
    out_shape(c, ys);
    em_tensor *x = gc_rand(EM_DTYPE_F32, 4, xs, -1, 1, 15, true);
    em_tensor *gy = gc_rand(EM_DTYPE_F32, 4, ys, -1, 1, 16, false);
    em_memory_stats before, after;
    for (int rep = 0; rep < 3; rep++) {
      if (rep == 2) em_memory_stats_get(&before);
      em_tensor *y, *gx;
      run(c, false, x, gy, &y, &gx);
      em_tensor_free(y);
      em_tensor_free(gx);
    }
    em_memory_stats_get(&after);
    g_assert_cmpint(after.system_alloc_count, ==, before.system_alloc_count);
    em_tensor_free(x);
    em_tensor_free(gy);
  }
}

/* ---- against PyTorch -------------------------------------------------------------- */

static const pool_case torch_cases[] = {
    {"max-2x2-ties", true, 2, 3, 8, 7, 2, 2, 2, 2, 0, 0, true},
    {"max-3x3-s2-p1-ties", true, 2, 3, 9, 8, 3, 3, 2, 2, 1, 1, true},
    {"avg-3x3-s2-p1", false, 2, 3, 9, 8, 3, 3, 2, 2, 1, 1, true},
    {"avg-3x2-s2x1-p1-exclude-pad", false, 2, 2, 7, 6, 3, 2, 2, 1, 1, 1, false},
};

static void test_torch(void) {
  enum { NC = sizeof torch_cases / sizeof torch_cases[0] };
  cc_torch *t = cc_torch_new();
  em_tensor *x[NC], *gy[NC];
  int id[NC];
  for (int i = 0; i < NC; i++) {
    const pool_case *c = &torch_cases[i];
    int64_t ys[4];
    out_shape(c, ys);
    x[i] = tied_input(c, 60 + (unsigned)i, false); /* ties pick the first max */
    gy[i] = gc_rand(EM_DTYPE_F32, 4, ys, -1, 1, 70 + (unsigned)i, false);
    char json[256];
    snprintf(json, sizeof json,
             "{\"kernel\": [%d, %d], \"stride\": [%d, %d], \"padding\": [%d, %d], "
             "\"count_include_pad\": %s}",
             c->kh, c->kw, c->sh, c->sw, c->ph, c->pw, c->include_pad ? "true" : "false");
    em_tensor *ts[2] = {x[i], gy[i]};
    id[i] = cc_torch_case(t, c->max ? "max_pool2d" : "avg_pool2d", json, 2, ts);
  }
  char *why = NULL;
  if (!cc_torch_run(t, &why)) {
    g_test_skip(why);
    g_free(why);
  } else {
    for (int i = 0; i < NC; i++) {
      const pool_case *c = &torch_cases[i];
      em_tensor *y, *gx;
      run(c, false, x[i], gy[i], &y, &gx);
      char what[128];
      snprintf(what, sizeof what, "torch %s: y", c->name);
      g_assert_true(cc_close(what, y, cc_torch_out(t, id[i], 0), 1e-6));
      snprintf(what, sizeof what, "torch %s: gx", c->name);
      g_assert_true(cc_close(what, gx, cc_torch_out(t, id[i], 1), 1e-6));
      em_tensor_free(y);
      em_tensor_free(gx);
    }
  }
  for (int i = 0; i < NC; i++) {
    em_tensor_free(x[i]);
    em_tensor_free(gy[i]);
  }
  cc_torch_free(t);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  char path[128];
  for (size_t i = 0; i < sizeof grad_cases / sizeof grad_cases[0]; i++) {
    snprintf(path, sizeof path, "/engine/%s/backward/%s",
             grad_cases[i].max ? "max_pool2d" : "avg_pool2d", grad_cases[i].name);
    g_test_add_data_func(path, &grad_cases[i], test_gradcheck);
  }
  for (size_t i = 0; i < sizeof fast_cases / sizeof fast_cases[0]; i++) {
    snprintf(path, sizeof path, "/engine/pool2d/fast-vs-ref/%s", fast_cases[i].name);
    g_test_add_data_func(path, &fast_cases[i], test_fast_vs_ref);
  }
  g_test_add_func("/engine/pool2d/accumulate", test_accumulate);
  g_test_add_func("/engine/pool2d/steady-state-allocations", test_steady_state_allocations);
  g_test_add_func("/engine/pool2d/torch", test_torch);
  return g_test_run();
}
