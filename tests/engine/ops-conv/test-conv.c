/* test-conv.c: em_conv2d against finite differences (f64, which runs the
 * loop reference), the f32 fast path against the reference, and both
 * directions against PyTorch; em_conv2d_relu against finite differences
 * and against em_relu(em_conv2d(.)), bit for bit. */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "conv-check.h"
#include "conv-private.h"
#include "em-pool.h"

#if defined(__x86_64__)
#include <xmmintrin.h> /* MXCSR */
#endif

typedef struct {
  const char *name;
  int64_t N, C, H, W, K, kh, kw;
  int sh, sw, ph, pw, dh, dw, G;
  bool bias;
} conv_case;

static em_conv2d_params params_of(const conv_case *c) {
  em_conv2d_params p = {{c->sh, c->sw}, {c->ph, c->pw}, {c->dh, c->dw}, c->G};
  return p;
}

static int64_t out_size(int64_t n, int64_t k, int s, int p, int d) {
  return (n + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* x, w, b (NULL without bias) for a case, persistent, requiring grad. */
static void make_inputs(const conv_case *c, em_dtype dt, unsigned seed, em_tensor **in) {
  int64_t xs[4] = {c->N, c->C, c->H, c->W}, ws[4] = {c->K, c->C / c->G, c->kh, c->kw};
  int64_t bs[1] = {c->K};
  in[0] = gc_rand(dt, 4, xs, -1, 1, seed, true);
  in[1] = gc_rand(dt, 4, ws, -1, 1, seed + 1, true);
  in[2] = c->bias ? gc_rand(dt, 1, bs, -1, 1, seed + 2, true) : NULL;
}

static em_tensor *make_gy(const conv_case *c, unsigned seed) {
  int64_t ys[4] = {c->N, c->K, out_size(c->H, c->kh, c->sh, c->ph, c->dh),
                   out_size(c->W, c->kw, c->sw, c->pw, c->dw)};
  return gc_rand(EM_DTYPE_F32, 4, ys, -1, 1, seed, false);
}

static void free_inputs(em_tensor **in) {
  for (int i = 0; i < 3; i++) em_tensor_free(in[i]);
}

/* A persistent copy of t. */
static em_tensor *keep(const em_tensor *t) {
  em_tensor *k = em_tensor_new(t->dtype, t->ndim, t->shape, NULL);
  em_tensor_copy_(k, t);
  return k;
}

/* A persistent f32 copy of t times two. */
static em_tensor *doubled(const em_tensor *t) {
  em_tensor *d = keep(t);
  for (int64_t k = 0; k < em_tensor_numel(d); k++) em_f32(d)[k] *= 2.f;
  return d;
}

/* ---- gradient checks (f64) ---------------------------------------------------- */

static em_tensor *f_conv(em_tensor **in, void *ctx) {
  em_conv2d_params p = params_of(ctx);
  return em_conv2d(in[0], in[1], in[2], &p);
}

static const conv_case grad_cases[] = {
    {"basic", 2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"stride2-pad", 2, 2, 7, 6, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, true},
    {"dilation2", 1, 2, 7, 7, 3, 3, 3, 1, 1, 2, 2, 2, 2, 1, true},
    {"groups2", 2, 4, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2, true},
    {"nobias", 2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, false},
    {"nonsquare", 2, 2, 6, 7, 3, 2, 3, 1, 2, 1, 0, 2, 1, 1, true},
};

static void test_gradcheck(gconstpointer data) {
  const conv_case *c = data;
  em_tensor *in[3];
  make_inputs(c, EM_DTYPE_F64, 11, in);
  g_assert_true(gradcheck(c->name, f_conv, 3, in, (void *)c, NULL));
  free_inputs(in);
}

static em_tensor *f_conv_relu(em_tensor **in, void *ctx) {
  em_conv2d_params p = params_of(ctx);
  return em_conv2d_relu(in[0], in[1], in[2], &p);
}

static void test_gradcheck_relu(gconstpointer data) {
  const conv_case *c = data;
  em_tensor *in[3];
  make_inputs(c, EM_DTYPE_F64, 17, in);
  g_assert_true(gradcheck(c->name, f_conv_relu, 3, in, (void *)c, NULL));
  free_inputs(in);
}

static void assert_same_bits(const em_tensor *a, const em_tensor *b) {
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  g_assert_cmpint(em_tensor_numel(a), ==, em_tensor_numel(b));
  g_assert_true(memcmp(em_tensor_ptr((em_tensor *)a), em_tensor_ptr((em_tensor *)b),
                       em_dtype_size(a->dtype) * (size_t)em_tensor_numel(a)) == 0);
}

/* em_conv2d_relu gives em_relu(em_conv2d(.)) bit for bit: the output and
 * each input's gradient, fresh and then accumulated by a second backward;
 * a NaN in x (its outputs NaN, which pass the ReLU and its gradient)
 * passes both alike. */
static void check_conv_relu_same(const conv_case *c, em_dtype dt, int threads) {
  em_set_num_threads(threads);
  em_tensor *in[2][3];
  for (int v = 0; v < 2; v++) {
    make_inputs(c, dt, 31, in[v]);
    if (dt == EM_DTYPE_F32) em_f32(in[v][0])[c->W + 1] = NAN;
    else em_f64(in[v][0])[c->W + 1] = NAN;
  }
  em_tensor *r = make_gy(c, 32);
  if (dt != EM_DTYPE_F32) {
    em_tensor *r64 = em_tensor_new(dt, r->ndim, r->shape, NULL);
    em_tensor_copy_(r64, r);
    em_tensor_free(r);
    r = r64;
  }
  em_conv2d_params p = params_of(c);
  for (int rep = 0; rep < 2; rep++) {
    em_scope *s = em_scope_begin();
    em_tensor *y0 = em_relu(em_conv2d(in[0][0], in[0][1], in[0][2], &p));
    em_scope *s1 = em_scope_begin(); /* a tape of its own */
    em_tensor *y1 = em_conv2d_relu(in[1][0], in[1][1], in[1][2], &p);
    assert_same_bits(y0, y1);
    em_backward_grad(y1, r);
    em_scope_end(s1);
    em_backward_grad(y0, r);
    em_scope_end(s);
    for (int i = 0; i < 3; i++)
      if (in[0][i]) assert_same_bits(in[0][i]->grad, in[1][i]->grad);
  }
  em_tensor_free(r);
  for (int v = 0; v < 2; v++) free_inputs(in[v]);
  em_set_num_threads(1);
}

static void test_conv_relu_same(void) {
  /* 3x3 stride 1 (Winograd on the fast path), its ReLU pass split over
   * 2 threads; a strided case (the direct kernels); f64 (the reference) */
  const conv_case wino = {"wino", 4, 8, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, true};
  const conv_case strided = {"strided", 2, 3, 9, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, false};
  check_conv_relu_same(&wino, EM_DTYPE_F32, 2);
  check_conv_relu_same(&wino, EM_DTYPE_F32, 1);
  check_conv_relu_same(&strided, EM_DTYPE_F32, 1);
  check_conv_relu_same(&strided, EM_DTYPE_F64, 2);
}

/* ---- fast path against the reference (f32) ------------------------------------- */

typedef struct {
  em_tensor *y, *gx, *gw, *gb;
} conv_result;

static void result_free(conv_result *r) {
  em_tensor_free(r->y);
  em_tensor_free(r->gx);
  em_tensor_free(r->gw);
  em_tensor_free(r->gb);
}

/* Forward and backward (seeded with gy) of one implementation; x, w, b
 * must be persistent. Gradients of inputs that need none stay NULL. */
static conv_result run(const conv_case *c, bool ref, em_tensor **in, const em_tensor *gy) {
  em_conv2d_params p = params_of(c);
  for (int i = 0; i < 3; i++)
    if (in[i]) em_tensor_zero_grad(in[i]);
  em_scope *s = em_scope_begin();
  em_tensor *y = ref ? em_conv2d_ref(in[0], in[1], in[2], &p) : em_conv2d(in[0], in[1], in[2], &p);
  conv_result r = {keep(y), NULL, NULL, NULL};
  em_backward_grad(y, gy);
  em_scope_end(s);
  em_tensor *g[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; i++)
    if (in[i] && em_tensor_requires_grad(in[i]) && in[i]->grad) g[i] = keep(in[i]->grad);
  r.gx = g[0];
  r.gw = g[1];
  r.gb = g[2];
  return r;
}

static const conv_case fast_cases[] = {
    {"fmnist-conv1", 3, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"fmnist-conv2", 3, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"odd-sizes", 2, 5, 9, 11, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"stride2", 2, 3, 9, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, true},
    {"stride23-dil21-nonsquare", 2, 3, 11, 10, 4, 3, 2, 2, 3, 2, 1, 2, 1, 1, true},
    {"dilation2", 2, 3, 10, 9, 5, 3, 3, 1, 1, 2, 2, 2, 2, 1, false},
    {"groups2", 2, 4, 8, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2, true},
    {"groups3-stride2", 2, 6, 9, 9, 9, 3, 3, 2, 2, 1, 1, 1, 1, 3, true},
    {"depthwise", 2, 4, 7, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 4, true},
    {"pad-beyond-kernel", 2, 3, 6, 5, 4, 3, 3, 1, 1, 3, 2, 1, 1, 1, true},
    {"1x1-pad1", 2, 5, 6, 6, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true},
    {"1x1", 2, 9, 5, 6, 10, 1, 1, 1, 1, 0, 0, 1, 1, 1, false},
    {"5x5", 2, 16, 12, 12, 20, 5, 5, 1, 1, 2, 2, 1, 1, 1, true},
    {"wide", 1, 2, 3, 40, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"no-pad", 2, 3, 8, 8, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, true},
    {"batch17", 17, 4, 6, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    /* 3x3 stride 1 with >= 8 channels runs Winograd F(2x2, 3x3) on AVX-512 */
    {"wino-odd-batch5", 5, 10, 9, 11, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"wino-pad0", 3, 8, 10, 7, 9, 3, 3, 1, 1, 0, 0, 1, 1, 1, true},
    {"wino-pad2", 2, 9, 6, 6, 17, 3, 3, 1, 1, 2, 2, 1, 1, 1, true},
    {"wino-pad21-nobias", 2, 8, 7, 9, 8, 3, 3, 1, 1, 2, 1, 1, 1, 1, false},
    {"wino-groups2", 3, 16, 8, 8, 40, 3, 3, 1, 1, 1, 1, 1, 1, 2, true},
    {"wino-wide", 2, 8, 5, 70, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
};

#define FAST_TOL 1e-5

static void check_fast(const conv_case *c, conv_result *f, conv_result *r) {
  char what[128];
  snprintf(what, sizeof what, "%s: y", c->name);
  g_assert_true(cc_close(what, f->y, r->y, FAST_TOL));
  em_tensor *fg[3] = {f->gx, f->gw, f->gb}, *rg[3] = {r->gx, r->gw, r->gb};
  const char *names[3] = {"gx", "gw", "gb"};
  for (int i = 0; i < 3; i++) {
    g_assert_true((fg[i] == NULL) == (rg[i] == NULL));
    if (!fg[i]) continue;
    snprintf(what, sizeof what, "%s: %s", c->name, names[i]);
    g_assert_true(cc_close(what, fg[i], rg[i], FAST_TOL));
  }
}

static void test_fast_vs_ref(gconstpointer data) {
  const conv_case *c = data;
  em_tensor *in[3];
  make_inputs(c, EM_DTYPE_F32, 21, in);
  em_tensor *gy = make_gy(c, 29);
  conv_result f = run(c, false, in, gy), r = run(c, true, in, gy);
  check_fast(c, &f, &r);
  result_free(&f);
  result_free(&r);
  em_tensor_free(gy);
  free_inputs(in);
}

/* The first layer of a network: x needs no grad, so no dX is computed,
 * and weight grads still match. */
static void test_first_layer(void) {
  const conv_case *c = &fast_cases[0];
  em_tensor *in[3];
  make_inputs(c, EM_DTYPE_F32, 31, in);
  em_tensor_set_requires_grad(in[0], false);
  em_tensor *gy = make_gy(c, 37);
  conv_result f = run(c, false, in, gy), r = run(c, true, in, gy);
  g_assert_null(in[0]->grad);
  g_assert_null(f.gx);
  check_fast(c, &f, &r);
  result_free(&f);
  result_free(&r);
  em_tensor_free(gy);
  free_inputs(in);
}

/* A second backward without zero_grad accumulates; x may be a view. */
static const conv_case accumulate_cases[] = {
    {"direct", 2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"one-channel", 2, 1, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"winograd", 5, 8, 7, 6, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"im2col", 2, 3, 7, 6, 4, 3, 3, 2, 1, 1, 1, 1, 1, 1, true},
};

static void test_accumulate_and_views(gconstpointer data) {
  const conv_case c = *(const conv_case *)data;
  /* x is stored (N, C, W, H) and viewed as (N, C, H, W) */
  int64_t xs[4] = {c.N, c.C, c.W, c.H}, ws[4] = {c.K, c.C / c.G, c.kh, c.kw}, bs[1] = {c.K};
  em_tensor *xt = gc_rand(EM_DTYPE_F32, 4, xs, -1, 1, 41, true);
  em_tensor *w = gc_rand(EM_DTYPE_F32, 4, ws, -1, 1, 42, true);
  em_tensor *b = gc_rand(EM_DTYPE_F32, 1, bs, -1, 1, 43, true);
  em_tensor *gy = make_gy(&c, 44);
  em_conv2d_params p = params_of(&c);
  conv_result res[2];
  for (int ref = 0; ref < 2; ref++) {
    em_tensor_zero_grad(xt);
    em_tensor_zero_grad(w);
    em_tensor_zero_grad(b);
    for (int rep = 0; rep < 2; rep++) {
      em_scope *s = em_scope_begin();
      int64_t vshape[4] = {c.N, c.C, c.H, c.W};
      int64_t vstride[4] = {xt->stride[0], xt->stride[1], xt->stride[3], xt->stride[2]};
      em_tensor *x = em_view_raw(xt, 4, vshape, vstride, 0);
      x->flags |= EM_TENSOR_REQUIRES_GRAD;
      em_tensor *y = ref ? em_conv2d_ref(x, w, b, &p) : em_conv2d(x, w, b, &p);
      if (rep == 0) res[ref].y = keep(y);
      em_backward_grad(y, gy);
      /* the view's gradient flows to nobody here; check it directly */
      if (rep == 1) res[ref].gx = keep(x->grad);
      em_scope_end(s);
    }
    res[ref].gw = keep(w->grad);
    res[ref].gb = keep(b->grad);
  }
  check_fast(&c, &res[0], &res[1]);
  /* accumulation: w's gradient after two passes is twice one pass */
  em_tensor *in[3] = {xt, w, b};
  em_tensor *xc = gc_rand(EM_DTYPE_F32, 4, (int64_t[]){c.N, c.C, c.H, c.W}, -1, 1, 45, true);
  in[0] = xc;
  conv_result once = run(&c, false, in, gy);
  em_scope *s = em_scope_begin();
  em_tensor *y = em_conv2d(xc, w, b, &p);
  em_backward_grad(y, gy);
  em_scope_end(s);
  em_tensor *twice_w = doubled(once.gw), *twice_x = doubled(once.gx), *twice_b = doubled(once.gb);
  g_assert_true(cc_close("accumulated gw", w->grad, twice_w, 1e-6));
  g_assert_true(cc_close("accumulated gx", xc->grad, twice_x, 1e-6));
  g_assert_true(cc_close("accumulated gb", b->grad, twice_b, 1e-6));
  em_tensor_free(twice_w);
  em_tensor_free(twice_x);
  em_tensor_free(twice_b);
  result_free(&once);
  result_free(&res[0]);
  result_free(&res[1]);
  em_tensor_free(xc);
  em_tensor_free(xt);
  em_tensor_free(w);
  em_tensor_free(b);
  em_tensor_free(gy);
}

/* Once a step has run, the next allocates nothing from the system: every
 * temporary comes from the caching allocator (Winograd, the one-channel
 * dW path and im2col). */
static void test_steady_state_allocations(void) {
  const conv_case *cases[3] = {&fast_cases[1], &fast_cases[0], &fast_cases[3]};
  for (int i = 0; i < 3; i++) {
    const conv_case *c = cases[i];
    em_tensor *in[3];
    make_inputs(c, EM_DTYPE_F32, 61, in);
    em_tensor *gy = make_gy(c, 62);
    em_memory_stats before, after;
    for (int rep = 0; rep < 3; rep++) {
      if (rep == 2) em_memory_stats_get(&before);
      conv_result r = run(c, false, in, gy);
      result_free(&r);
    }
    em_memory_stats_get(&after);
    /* (run() copies results into persistent tensors, which are calloc-ed) */
    g_assert_cmpint(after.system_alloc_count, ==, before.system_alloc_count);
    em_tensor_free(gy);
    free_inputs(in);
  }
}

/* No product reads scratch memory left as it was: the caching
 * allocator's free blocks are filled with the smallest denormal, and a
 * forward and backward of the fast paths on one thread (MXCSR's flags are
 * per thread) must not raise the denormal-operand flag. Winograd's last
 * panel read lanes past its tiles that no transform wrote: products that
 * were dropped, but a denormal among them made every FMA of the panel
 * take a microcode assist (8 times as long). */
#if defined(__x86_64__)
static void test_no_stale_scratch(void) {
  int threads = em_get_num_threads();
  em_set_num_threads(1);
  const conv_case *cases[3] = {&fast_cases[0], &fast_cases[1], &fast_cases[2]};
  for (int i = 0; i < 3; i++) {
    const conv_case *c = cases[i];
    em_tensor *in[3];
    make_inputs(c, EM_DTYPE_F32, 71, in);
    em_tensor *gy = make_gy(c, 72);
    conv_result r = run(c, false, in, gy); /* the allocator now holds the blocks the conv takes */
    result_free(&r);
    em_scope *s = em_scope_begin();
    for (size_t n = 64; n <= ((size_t)4 << 20); n += n / 32 > 64 ? n / 32 : 64) {
      uint32_t *b = em_scratch(n);
      for (size_t k = 0; k < n / 4; k++) b[k] = 1; /* 1.4e-45 */
    }
    em_scope_end(s); /* every class's free list starts with a poisoned block */
    _mm_setcsr(_mm_getcsr() & ~0x3Fu);
    r = run(c, false, in, gy);
    unsigned flags = _mm_getcsr();
    result_free(&r);
    if (flags & 0x2) g_test_message("%s: a denormal operand", c->name);
    g_assert_cmpuint(flags & 0x2, ==, 0);
    em_tensor_free(gy);
    free_inputs(in);
  }
  em_set_num_threads(threads);
}
#endif

/* ---- against PyTorch -------------------------------------------------------------- */

static const conv_case torch_cases[] = {
    {"fmnist-conv2", 2, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {"stride2-dil2-groups2", 2, 4, 11, 9, 6, 3, 3, 2, 2, 2, 1, 2, 2, 2, true},
    {"nonsquare-nobias", 3, 3, 8, 10, 5, 2, 4, 1, 2, 1, 2, 1, 1, 1, false},
};

static void test_torch(void) {
  enum { NC = sizeof torch_cases / sizeof torch_cases[0] };
  cc_torch *t = cc_torch_new();
  em_tensor *in[NC][3], *gy[NC];
  int id[NC];
  for (int i = 0; i < NC; i++) {
    const conv_case *c = &torch_cases[i];
    make_inputs(c, EM_DTYPE_F32, 50 + 3 * (unsigned)i, in[i]);
    gy[i] = make_gy(c, 90 + (unsigned)i);
    char json[256];
    snprintf(json, sizeof json,
             "{\"stride\": [%d, %d], \"padding\": [%d, %d], \"dilation\": [%d, %d], "
             "\"groups\": %d, \"bias\": %s}",
             c->sh, c->sw, c->ph, c->pw, c->dh, c->dw, c->G, c->bias ? "true" : "false");
    em_tensor *ts[4] = {in[i][0], in[i][1], in[i][2] ? in[i][2] : gy[i], gy[i]};
    id[i] = cc_torch_case(t, "conv2d", json, c->bias ? 4 : 3, ts);
  }
  char *why = NULL;
  if (!cc_torch_run(t, &why)) {
    g_test_skip(why);
    g_free(why);
  } else {
    for (int i = 0; i < NC; i++) {
      const conv_case *c = &torch_cases[i];
      conv_result f = run(c, false, in[i], gy[i]);
      char what[128];
      em_tensor *mine[4] = {f.y, f.gx, f.gw, f.gb};
      const char *names[4] = {"y", "gx", "gw", "gb"};
      for (int k = 0; k < (c->bias ? 4 : 3); k++) {
        snprintf(what, sizeof what, "torch %s: %s", c->name, names[k]);
        g_assert_true(cc_close(what, mine[k], cc_torch_out(t, id[i], k), FAST_TOL));
      }
      result_free(&f);
    }
  }
  for (int i = 0; i < NC; i++) {
    free_inputs(in[i]);
    em_tensor_free(gy[i]);
  }
  cc_torch_free(t);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  char path[128];
  for (size_t i = 0; i < sizeof grad_cases / sizeof grad_cases[0]; i++) {
    snprintf(path, sizeof path, "/engine/conv2d/backward/%s", grad_cases[i].name);
    g_test_add_data_func(path, &grad_cases[i], test_gradcheck);
  }
  for (size_t i = 0; i < sizeof grad_cases / sizeof grad_cases[0]; i++) {
    snprintf(path, sizeof path, "/engine/conv2d_relu/backward/%s", grad_cases[i].name);
    g_test_add_data_func(path, &grad_cases[i], test_gradcheck_relu);
  }
  g_test_add_func("/engine/conv2d_relu/same-as-two-ops", test_conv_relu_same);
  for (size_t i = 0; i < sizeof fast_cases / sizeof fast_cases[0]; i++) {
    snprintf(path, sizeof path, "/engine/conv2d/fast-vs-ref/%s", fast_cases[i].name);
    g_test_add_data_func(path, &fast_cases[i], test_fast_vs_ref);
  }
  g_test_add_func("/engine/conv2d/first-layer", test_first_layer);
  for (size_t i = 0; i < sizeof accumulate_cases / sizeof accumulate_cases[0]; i++) {
    snprintf(path, sizeof path, "/engine/conv2d/accumulate-and-views/%s", accumulate_cases[i].name);
    g_test_add_data_func(path, &accumulate_cases[i], test_accumulate_and_views);
  }
  g_test_add_func("/engine/conv2d/steady-state-allocations", test_steady_state_allocations);
#if defined(__x86_64__)
  g_test_add_func("/engine/conv2d/no-stale-scratch", test_no_stale_scratch);
#endif
  g_test_add_func("/engine/conv2d/torch", test_torch);
  return g_test_run();
}
