/* test-masked-fill.c: em_masked_fill on the CPU: values against a plain
 * loop (exact: the op only selects), masks broadcast over x (a row, a
 * column, the causal (T, T) mask over (B, H, T, T) scores), strided x,
 * f32 and f64, the threaded rows of a large tensor against one thread
 * (bit for bit), a -inf fill followed by softmax (zero probability and a
 * finite, zero gradient at the filled places), and finite-difference
 * gradients (f64) with the accumulate path. PyTorch parity is in
 * test-torch.c, the devices' kernels in tests/device/test-device-ops.c. */
#include "ops-test.h"
#include "em-pool.h"

/* A persistent u8 mask: k set when (k * 7 + seed) % 3 == 0, or the causal
 * mask ((i, j) set when j > i over the last two dims) when causal. */
static em_tensor *make_mask(int ndim, const int64_t *shape, unsigned seed, bool causal) {
  em_tensor *m = em_tensor_new(EM_DTYPE_U8, ndim, shape, NULL);
  uint8_t *v = em_tensor_ptr(m);
  int64_t n = em_tensor_numel(m), cols = ndim ? shape[ndim - 1] : 1;
  for (int64_t k = 0; k < n; k++)
    v[k] = causal ? (k % cols > (k / cols) % shape[ndim - 2]) : ((k * 7 + seed) % 3 == 0);
  return m;
}

/* The mask element that broadcasts to element k (row-major) of shape. */
static bool mask_at(const em_tensor *m, int ndim, const int64_t *shape, int64_t k) {
  int64_t idx[EM_MAX_DIMS], r = k;
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = r % shape[d];
    r /= shape[d];
  }
  int64_t midx[EM_MAX_DIMS];
  for (int d = 0; d < m->ndim; d++) {
    int xd = d + ndim - m->ndim;
    midx[d] = m->shape[d] == 1 ? 0 : idx[xd];
  }
  return em_tensor_get(m, midx) != 0;
}

typedef struct {
  int nx, nm;
  int64_t sx[4], sm[4];
  bool causal;
} shape_case;

static const shape_case cases[] = {
    {2, 2, {3, 4}, {3, 4}, false},          /* same shape */
    {2, 1, {3, 4}, {4}, false},             /* a mask row over every row */
    {3, 2, {2, 3, 4}, {3, 1}, false},       /* a mask column */
    {4, 2, {2, 3, 5, 5}, {5, 5}, true},     /* causal over (B, H, T, T) */
    {2, 0, {3, 4}, {0}, false},             /* a 0-dim mask (unset: seed 1) */
};

static void test_values(void) {
  for (size_t c = 0; c < G_N_ELEMENTS(cases); c++)
    for (int f64 = 0; f64 < 2; f64++)
      for (int strided = 0; strided < 2; strided++) {
        const shape_case *sc = &cases[c];
        em_scope *s = em_scope_begin();
        em_tensor *x0 = gc_rand(f64 ? EM_DTYPE_F64 : EM_DTYPE_F32, sc->nx, sc->sx, -3, 3,
                                40 + (unsigned)c, false);
        em_tensor *m = make_mask(sc->nm, sc->sm, sc->nm == 0 ? 1 : (unsigned)c, sc->causal);
        em_tensor *x = strided ? ot_strided_copy(x0) : x0;
        em_tensor *y = em_masked_fill(x, m, -0.25);
        g_assert_true(ot_shape_is(y, sc->nx, sc->sx));
        for (int64_t k = 0; k < em_tensor_numel(y); k++) {
          double want = mask_at(m, sc->nx, sc->sx, k) ? -0.25 : ot_elem(x0, k);
          if (ot_elem(y, k) != want)
            g_error("case %zu f64 %d strided %d: element %lld: %.9g, want %.9g", c, f64, strided,
                    (long long)k, ot_elem(y, k), want);
        }
        em_scope_end(s);
        em_tensor_free(x0);
        em_tensor_free(m);
      }
}

/* A tensor above the pool's split size, threaded against one thread. */
static void test_threads(void) {
  int64_t sx[3] = {8, 130, 130}, sm[2] = {130, 130};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 3, sx, -1, 1, 7, false);
  em_tensor *m = make_mask(2, sm, 0, true);
  em_scope *s = em_scope_begin();
  em_set_num_threads(1);
  em_tensor *one = em_masked_fill(x, m, 3.0);
  em_set_num_threads(2);
  em_tensor *two = em_masked_fill(x, m, 3.0);
  ot_assert_equal("threads", one, two);
  em_scope_end(s);
  em_tensor_free(x);
  em_tensor_free(m);
}

/* Causal attention's pattern: scores masked with -inf, softmax over the
 * keys. A filled place has probability 0 and gradient 0 (not NaN). */
static void test_causal_softmax(void) {
  int64_t sx[3] = {2, 4, 4}, sm[2] = {4, 4};
  em_tensor *x = gc_rand(EM_DTYPE_F32, 3, sx, -2, 2, 9, true);
  em_tensor *m = make_mask(2, sm, 0, true);
  em_scope *s = em_scope_begin();
  em_tensor *p = em_softmax(em_masked_fill(x, m, -INFINITY), -1);
  em_tensor *g = gc_rand(EM_DTYPE_F32, 3, sx, -1, 1, 10, false);
  em_tensor_zero_grad(x);
  em_backward_grad(p, g);
  for (int64_t k = 0; k < em_tensor_numel(p); k++) {
    bool set = mask_at(m, 3, sx, k);
    if (set) g_assert_cmpfloat(ot_elem(p, k), ==, 0.0);
    else g_assert_cmpfloat(ot_elem(p, k), >, 0.0);
    double gk = ot_elem(x->grad, k);
    g_assert_true(isfinite(gk));
    if (set) g_assert_cmpfloat(gk, ==, 0.0);
  }
  /* row 0 sees only key 0: probability 1 */
  g_assert_cmpfloat(ot_elem(p, 0), ==, 1.0);
  em_scope_end(s);
  em_tensor_free(g);
  em_tensor_free(x);
  em_tensor_free(m);
}

typedef struct {
  em_tensor *mask;
  bool strided;
} fill_ctx;

static em_tensor *f_fill(em_tensor **in, void *ctx) {
  const fill_ctx *c = ctx;
  em_tensor *x = c->strided ? em_transpose(in[0], 0, 1) : in[0];
  /* times 2 after the fill, so a gradient that leaked through a filled
   * place would show */
  return em_mul_scalar(em_masked_fill(x, c->mask, 0.75), 2.0);
}

static void test_gradcheck(void) {
  for (size_t c = 0; c < G_N_ELEMENTS(cases); c++)
    for (int strided = 0; strided < 2; strided++) {
      const shape_case *sc = &cases[c];
      if (strided && sc->nx != 2) continue;
      int64_t sx[4];
      memcpy(sx, sc->sx, sizeof sx);
      if (strided) { /* x is fed transposed: store it (cols, rows) */
        sx[0] = sc->sx[1];
        sx[1] = sc->sx[0];
      }
      fill_ctx ctx = {make_mask(sc->nm, sc->sm, sc->nm == 0 ? 1 : (unsigned)c, sc->causal),
                      strided};
      em_tensor *in[1] = {gc_rand(EM_DTYPE_F64, sc->nx, sx, -2, 2, 60 + (unsigned)c, true)};
      char what[64];
      g_snprintf(what, sizeof what, "masked_fill case %zu%s", c, strided ? " strided" : "");
      ot_check_accumulates(what, f_fill, 1, in, &ctx);
      ot_gradcheck(what, f_fill, 1, in, &ctx, NULL);
      em_tensor_free(ctx.mask);
    }
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/ops/masked-fill/values", test_values);
  g_test_add_func("/engine/ops/masked-fill/threads", test_threads);
  g_test_add_func("/engine/ops/masked-fill/causal-softmax", test_causal_softmax);
  g_test_add_func("/engine/ops/masked-fill/gradcheck", test_gradcheck);
  return g_test_run();
}
