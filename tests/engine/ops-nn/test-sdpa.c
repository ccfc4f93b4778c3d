/* test-sdpa.c: em_sdpa, the fused attention (engine/ops/sdpa.c over the
 * CPU's cpu-sdpa.c), on the CPU:
 *  - against attention composed of the plain ops (matmul, masked_fill,
 *    softmax, dropout, matmul: the stand-in the fused op replaced), in
 *    f64 and f32, forward and the three gradients, with causal masks
 *    (L = S, L < S as in a KV-cache step, L > S with rows that see no
 *    key), key padding masks (a batch entry with every key padded), both,
 *    strided q, k, v (the heads of a packed projection), Ev != E, a given
 *    scale, sizes over several tiles, and dropout: the same rng state must
 *    give em_dropout's mask, so the composed and fused results agree;
 *  - finite-difference gradients (f64) of q, k and v for causal, padding,
 *    both, L != S and dropout at a fixed seed (the mask regenerated in
 *    backward from its counter);
 *  - rows with every key hidden: zeros out, zero (finite) gradients;
 *  - dropout: one seed, one output; another seed, another; p = 1 gives
 *    zeros; eval leaves the rng untouched;
 *  - the threaded heads against one thread, bit for bit, and the
 *    accumulate path of backward;
 *  - em_sdpa_packed (the heads read out of a packed (N, L, 3 H E)
 *    projection, the output written merged) against em_sdpa over the
 *    views of em_slice, em_reshape and em_transpose merged back by
 *    em_contiguous: the same kernels on the same values, so the output
 *    and qkv's gradient agree bit for bit (f32 and f64; causal, padding,
 *    dropout, tiles, two threads), and its finite-difference gradient.
 * PyTorch parity is test-sdpa-torch.c, the devices tests/device/
 * test-device-sdpa.c. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-pool.h"
#include "nn-check.h"

typedef struct {
  int64_t N, H, L, S, E, Ev;
  bool causal;
  int pad;        /* 0: none; 1: some keys; 2: also every key of batch entry 1 */
  double dropout; /* in training, at a fixed seed */
  bool strided;   /* q, k, v stored (N, rows, H, features) and transposed */
  double scale;
  bool composed;  /* the reference instead of em_sdpa */
  em_tensor *kpm; /* (N, S) u8 or NULL */
} sd_case;

/* The key padding mask of a case (persistent; NULL for pad 0). */
static em_tensor *make_kpm(const sd_case *c) {
  if (!c->pad) return NULL;
  int64_t s[2] = {c->N, c->S};
  em_tensor *m = em_tensor_new(EM_DTYPE_U8, 2, s, NULL);
  uint8_t *v = em_tensor_ptr(m);
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t j = 0; j < c->S; j++)
      v[n * c->S + j] = (c->pad == 2 && n == 1) || (j * 5 + n * 3) % 4 == 1;
  return m;
}

/* The attention of em-ops.h composed of the plain ops (the stand-in the
 * fused op replaced). */
static em_tensor *sdpa_composed(em_tensor *q, em_tensor *k, em_tensor *v, const em_sdpa_params *p) {
  int64_t N = q->shape[0], L = q->shape[2], S = k->shape[2], E = q->shape[3];
  double scale = p->scale > 0 ? p->scale : 1.0 / sqrt((double)E);
  em_tensor *s = em_mul_scalar(em_matmul(q, em_transpose(k, 2, 3)), scale); /* (N, H, L, S) */
  em_tensor *mask = NULL;
  if (p->causal || p->key_padding_mask) {
    int64_t ms[4] = {N, 1, L, S};
    mask = em_zeros(EM_DTYPE_U8, 4, ms);
    uint8_t *m = em_tensor_ptr(mask);
    const em_tensor *kp = p->key_padding_mask;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < S; j++)
          m[(n * L + i) * S + j] = (p->causal && j > i + S - L) ||
                                   (kp && ((const uint8_t *)em_tensor_ptr(kp))[n * S + j]);
    s = em_masked_fill(s, mask, -INFINITY);
  }
  em_tensor *a = em_softmax(s, 3);
  if (mask) a = em_masked_fill(a, mask, 0.0); /* a fully masked row: NaN -> 0 */
  if (p->training && p->dropout_p > 0) a = em_dropout(a, p->dropout_p, true, p->rng);
  return em_matmul(a, v);
}

/* in: q, k, v as stored (transposed inside when strided). */
static em_tensor *f_sdpa(em_tensor **in, void *ctx) {
  const sd_case *c = ctx;
  em_tensor *x[3];
  for (int i = 0; i < 3; i++) x[i] = c->strided ? em_transpose(in[i], 1, 2) : in[i];
  em_rng rng;
  em_rng_seed(&rng, 1234); /* the same dropout mask at every call */
  em_sdpa_params p = {.causal = c->causal, .key_padding_mask = c->kpm, .dropout_p = c->dropout,
                      .training = c->dropout > 0, .rng = &rng, .scale = c->scale};
  return c->composed ? sdpa_composed(x[0], x[1], x[2], &p) : em_sdpa(x[0], x[1], x[2], &p);
}

/* Persistent q, k, v of a case in dt, requiring grad. */
static void make_inputs(const sd_case *c, em_dtype dt, unsigned seed, em_tensor **in) {
  int64_t rows[3] = {c->L, c->S, c->S}, feats[3] = {c->E, c->E, c->Ev};
  for (int i = 0; i < 3; i++) {
    int64_t s[4] = {c->N, c->H, rows[i], feats[i]};
    if (c->strided) {
      s[1] = rows[i];
      s[2] = c->H;
    }
    in[i] = gc_rand(dt, 4, s, -1, 1, seed + (unsigned)i, true);
  }
}

static const sd_case cases[] = {
    {2, 2, 5, 5, 4, 3, false, 0, 0, false, 0, false, NULL},   /* plain */
    {2, 2, 6, 6, 4, 4, true, 0, 0, false, 0, false, NULL},    /* causal */
    {2, 2, 4, 7, 3, 4, false, 1, 0, false, 0, false, NULL},   /* padding */
    {3, 2, 5, 5, 4, 4, true, 2, 0, false, 0, false, NULL},    /* both, one entry all padded */
    {2, 2, 3, 8, 4, 3, true, 0, 0, false, 0, false, NULL},    /* L < S: a KV-cache step */
    {2, 1, 7, 4, 4, 4, true, 1, 0, false, 0, false, NULL},    /* L > S: rows that see no key */
    {2, 2, 6, 6, 4, 4, true, 0, 0.3, true, 0, false, NULL},   /* dropout, strided */
    {2, 3, 5, 6, 4, 5, false, 1, 0, true, 0.7, false, NULL},  /* scale given, Ev != E */
    /* 8 queries or more: the forward's tiles (fewer: its rows, cpu-sdpa.c) */
    {1, 2, 9, 11, 3, 5, true, 1, 0.2, false, 0, false, NULL},
};

/* Fused against composed: the same values in f64 (rounding only), and
 * the gradients. */
static void compare_composed(const char *what, sd_case c, em_dtype dt, double tol) {
  c.kpm = make_kpm(&c);
  em_tensor *in[3];
  make_inputs(&c, dt, 40, in);
  em_tensor *ref_in[3], *y[2], *gr[2][3];
  for (int i = 0; i < 3; i++) ref_in[i] = nc_convert(in[i], dt);
  for (int pass = 0; pass < 2; pass++) {
    em_tensor **x = pass ? ref_in : in;
    c.composed = pass == 1;
    for (int i = 0; i < 3; i++) em_tensor_zero_grad(x[i]);
    em_scope *s = em_scope_begin();
    em_tensor *out = f_sdpa(x, &c);
    y[pass] = nc_keep(out);
    em_backward_grad(out, em_full(out->dtype, out->ndim, out->shape, 0.5));
    em_scope_end(s);
    for (int i = 0; i < 3; i++) gr[pass][i] = nc_keep(x[i]->grad);
  }
  double d = nc_rel_diff(y[0], y[1]), worst = d;
  if (!(d <= tol)) g_error("%s: output differs from the composed ops by %g", what, d);
  for (int i = 0; i < 3; i++) {
    d = nc_rel_diff(gr[0][i], gr[1][i]);
    worst = d > worst ? d : worst;
    if (!(d <= tol)) g_error("%s: gradient %d differs from the composed ops by %g", what, i, d);
    em_tensor_free(gr[0][i]);
    em_tensor_free(gr[1][i]);
    em_tensor_free(in[i]);
    em_tensor_free(ref_in[i]);
  }
  g_test_message("%s: worst relative difference %.3g (bound %.3g)", what, worst, tol);
  em_tensor_free(y[0]);
  em_tensor_free(y[1]);
  em_tensor_free(c.kpm);
}

static void test_composed(void) {
  char what[64];
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    g_snprintf(what, sizeof what, "case %zu f64", k);
    compare_composed(what, cases[k], EM_DTYPE_F64, 1e-12); /* both exact to rounding */
    g_snprintf(what, sizeof what, "case %zu f32", k);
    /* f32 on both sides, summed in other orders: scores over E <= 4
     * terms, outputs over S <= 11, each within a few float ulps */
    compare_composed(what, cases[k], EM_DTYPE_F32, 2e-6);
  }
  /* several tiles (64 queries by 64 keys) with partial edges */
  sd_case big[] = {
      {2, 2, 70, 130, 20, 24, true, 1, 0, true, 0, false, NULL},
      {1, 3, 130, 70, 17, 9, false, 2, 0.2, false, 0, false, NULL},
  };
  for (size_t k = 0; k < G_N_ELEMENTS(big); k++) {
    g_snprintf(what, sizeof what, "tiles %zu f64", k);
    compare_composed(what, big[k], EM_DTYPE_F64, 1e-12);
    g_snprintf(what, sizeof what, "tiles %zu f32", k);
    /* float sums over E = 20 products per score (20 u ~ 1.2e-6 of |q||k|
     * <= 20 at worst), over S = 130 weights per output and L = 130 rows
     * per key gradient (130 u ~ 8e-6 worst case, random signs ~ 1e-6):
     * relative to the largest value, 2e-5 holds with margin */
    compare_composed(what, big[k], EM_DTYPE_F32, 2e-5);
  }
}

static void test_gradcheck(void) {
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    sd_case c = cases[k];
    c.kpm = make_kpm(&c);
    em_tensor *in[3];
    make_inputs(&c, EM_DTYPE_F64, 60 + (unsigned)k * 3, in);
    char what[64];
    g_snprintf(what, sizeof what, "sdpa case %zu", k);
    g_assert_true(gradcheck(what, f_sdpa, 3, in, &c, NULL));
    for (int i = 0; i < 3; i++) em_tensor_free(in[i]);
    em_tensor_free(c.kpm);
  }
}

/* Every key of batch entry 1 padded (and causal rows that see nothing):
 * zeros out, and exactly zero gradients from those rows. */
static void test_masked_rows(void) {
  sd_case c = {3, 2, 5, 5, 4, 4, false, 2, 0, false, 0, false, NULL};
  c.kpm = make_kpm(&c);
  for (int f64 = 0; f64 < 2; f64++) {
    em_tensor *in[3];
    make_inputs(&c, f64 ? EM_DTYPE_F64 : EM_DTYPE_F32, 80, in);
    em_scope *s = em_scope_begin();
    em_tensor *y = f_sdpa(in, &c);
    em_backward_grad(y, em_full(y->dtype, 4, y->shape, 1.0));
    const int64_t per = c.H * c.L * c.Ev, perq = c.H * c.L * c.E, perk = c.H * c.S * c.E;
    for (int64_t e = 0; e < em_tensor_numel(y); e++) {
      g_assert_true(isfinite(nc_at(y, e)));
      if (e / per == 1) g_assert_cmpfloat(nc_at(y, e), ==, 0.0);
    }
    for (int i = 0; i < 3; i++)
      for (int64_t e = 0; e < em_tensor_numel(in[i]); e++) {
        double gv = nc_at(in[i]->grad, e);
        g_assert_true(isfinite(gv));
        if (e / (i == 0 ? perq : i == 1 ? perk : c.H * c.S * c.Ev) == 1) g_assert_cmpfloat(gv, ==, 0.0);
      }
    em_scope_end(s);
    for (int i = 0; i < 3; i++) em_tensor_free(in[i]);
  }
  em_tensor_free(c.kpm);
}

static void test_dropout(void) {
  int64_t sh[4] = {2, 2, 9, 8};
  em_tensor *q = gc_rand(EM_DTYPE_F32, 4, sh, -1, 1, 5, false);
  em_scope *s = em_scope_begin();
  em_rng r1, r2, r3;
  em_rng_seed(&r1, 7);
  em_rng_seed(&r2, 7);
  em_rng_seed(&r3, 8);
  em_sdpa_params p = {.causal = true, .dropout_p = 0.4, .training = true, .rng = &r1};
  em_tensor *a = em_sdpa(q, q, q, &p);
  p.rng = &r2;
  em_tensor *b = em_sdpa(q, q, q, &p);
  p.rng = &r3;
  em_tensor *c = em_sdpa(q, q, q, &p);
  g_assert_cmpfloat(gc_max_abs_diff(a, b), ==, 0.0); /* same seed, same mask */
  g_assert_cmpfloat(gc_max_abs_diff(a, c), >, 0.0);
  p.dropout_p = 1.0; /* every weight dropped */
  em_tensor *z = em_sdpa(q, q, q, &p);
  for (int64_t e = 0; e < em_tensor_numel(z); e++) g_assert_cmpfloat(nc_at(z, e), ==, 0.0);
  /* eval: no dropout, and the rng is not drawn from */
  em_rng before = r1;
  p.rng = &r1;
  p.dropout_p = 0.4;
  p.training = false;
  em_tensor *e1 = em_sdpa(q, q, q, &p);
  g_assert_cmpmem(&before, sizeof before, &r1, sizeof r1);
  p.dropout_p = 0;
  g_assert_cmpfloat(gc_max_abs_diff(e1, em_sdpa(q, q, q, &p)), ==, 0.0);
  em_scope_end(s);
  em_tensor_free(q);
}

/* Heads split over two threads give the one thread's bits. */
static void test_threads(void) {
  sd_case c = {2, 3, 70, 90, 20, 16, true, 1, 0.1, true, 0, false, NULL};
  c.kpm = make_kpm(&c);
  em_tensor *in[3], *y[2], *g[2][3];
  make_inputs(&c, EM_DTYPE_F32, 90, in);
  for (int t = 0; t < 2; t++) {
    em_set_num_threads(t + 1);
    for (int i = 0; i < 3; i++) em_tensor_zero_grad(in[i]);
    em_scope *s = em_scope_begin();
    em_tensor *out = f_sdpa(in, &c);
    y[t] = nc_keep(out);
    em_backward_grad(out, em_full(EM_DTYPE_F32, 4, out->shape, 0.25));
    em_scope_end(s);
    for (int i = 0; i < 3; i++) g[t][i] = nc_keep(in[i]->grad);
  }
  g_assert_cmpfloat(gc_max_abs_diff(y[0], y[1]), ==, 0.0);
  for (int i = 0; i < 3; i++) {
    g_assert_cmpfloat(gc_max_abs_diff(g[0][i], g[1][i]), ==, 0.0);
    em_tensor_free(g[0][i]);
    em_tensor_free(g[1][i]);
    em_tensor_free(in[i]);
  }
  em_tensor_free(y[0]);
  em_tensor_free(y[1]);
  em_tensor_free(c.kpm);
}

/* Backward twice without zero_grad adds up (the gradient buffers). */
static void test_accumulate(void) {
  sd_case c = cases[3];
  c.kpm = make_kpm(&c);
  em_tensor *in[3];
  make_inputs(&c, EM_DTYPE_F64, 100, in);
  em_tensor *first[3];
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0)
      for (int i = 0; i < 3; i++) em_tensor_zero_grad(in[i]);
    em_scope *s = em_scope_begin();
    em_tensor *y = f_sdpa(in, &c);
    em_backward_grad(y, em_full(y->dtype, 4, y->shape, 1.0));
    em_scope_end(s);
    for (int i = 0; pass == 0 && i < 3; i++) first[i] = nc_keep(in[i]->grad);
  }
  for (int i = 0; i < 3; i++) {
    for (int64_t e = 0; e < em_tensor_numel(first[i]); e++)
      g_assert_cmpfloat(fabs(nc_at(in[i]->grad, e) - 2 * nc_at(first[i], e)), <=, 1e-12);
    em_tensor_free(first[i]);
    em_tensor_free(in[i]);
  }
  em_tensor_free(c.kpm);
}

/* ---- em_sdpa_packed ---------------------------------------------------------------- */

typedef struct {
  int64_t N, L, H, E;
  bool causal;
  int pad;
  double dropout;
  bool composed; /* em_sdpa over views, merged back, instead of em_sdpa_packed */
  em_tensor *kpm;
} pk_case;

/* in[0]: qkv (N, L, 3 H E). */
static em_tensor *f_packed(em_tensor **in, void *ctx) {
  const pk_case *c = ctx;
  em_rng rng;
  em_rng_seed(&rng, 4321);
  em_sdpa_params p = {.causal = c->causal, .key_padding_mask = c->kpm, .dropout_p = c->dropout,
                      .training = c->dropout > 0, .rng = &rng};
  if (!c->composed) return em_sdpa_packed(in[0], (int)c->H, &p);
  const int64_t D = c->H * c->E, split[4] = {c->N, c->L, c->H, c->E}, merged[3] = {c->N, c->L, D};
  em_tensor *x[3];
  for (int i = 0; i < 3; i++)
    x[i] = em_transpose(em_reshape(em_slice(in[0], 2, i * D, (i + 1) * D, 1), 4, split), 1, 2);
  em_tensor *o = em_sdpa(x[0], x[1], x[2], &p); /* (N, H, L, E) */
  return em_reshape(em_contiguous(em_transpose(o, 1, 2)), 3, merged);
}

static const pk_case pk_cases[] = {
    {2, 6, 2, 4, false, 0, 0, false, NULL}, {2, 7, 3, 4, true, 1, 0, false, NULL},
    {3, 5, 2, 3, true, 2, 0.3, false, NULL}, {2, 70, 2, 20, true, 1, 0.1, false, NULL},
};

static void test_packed(void) {
  const int prev_threads = em_get_num_threads();
  for (size_t k = 0; k < G_N_ELEMENTS(pk_cases); k++)
    for (int f64 = 0; f64 < 2; f64++)
      for (int threads = 1; threads <= 2; threads++) {
        pk_case c = pk_cases[k];
        sd_case sc = {.N = c.N, .S = c.L, .pad = c.pad};
        c.kpm = make_kpm(&sc);
        em_set_num_threads(threads);
        int64_t shape[3] = {c.N, c.L, 3 * c.H * c.E};
        em_tensor *qkv = gc_rand(f64 ? EM_DTYPE_F64 : EM_DTYPE_F32, 3, shape, -1, 1,
                                 110 + (unsigned)k, true);
        em_tensor *y[2], *g[2];
        for (int pass = 0; pass < 2; pass++) {
          c.composed = pass == 1;
          em_tensor_zero_grad(qkv);
          em_scope *s = em_scope_begin();
          em_tensor *out = f_packed(&qkv, &c);
          y[pass] = nc_keep(out);
          em_tensor *up = gc_rand(qkv->dtype, 3, out->shape, -1, 1, 7, false);
          em_backward_grad(out, up);
          em_tensor_free(up);
          em_scope_end(s);
          g[pass] = nc_keep(qkv->grad);
        }
        if (gc_max_abs_diff(y[0], y[1]) != 0 || gc_max_abs_diff(g[0], g[1]) != 0)
          g_error("packed case %zu (%s, %d threads): output or gradient differs from the views "
                  "by %g, %g", k, f64 ? "f64" : "f32", threads, gc_max_abs_diff(y[0], y[1]),
                  gc_max_abs_diff(g[0], g[1]));
        for (int pass = 0; pass < 2; pass++) {
          em_tensor_free(y[pass]);
          em_tensor_free(g[pass]);
        }
        if (f64 && threads == 1 && c.L < 16) {
          c.composed = false;
          char what[64];
          g_snprintf(what, sizeof what, "sdpa_packed case %zu", k);
          g_assert_true(gradcheck(what, f_packed, 1, &qkv, &c, NULL));
        }
        em_tensor_free(qkv);
        em_tensor_free(c.kpm);
      }
  em_set_num_threads(prev_threads);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/ops/sdpa/composed", test_composed);
  g_test_add_func("/engine/ops/sdpa/gradcheck", test_gradcheck);
  g_test_add_func("/engine/ops/sdpa/masked-rows", test_masked_rows);
  g_test_add_func("/engine/ops/sdpa/dropout", test_dropout);
  g_test_add_func("/engine/ops/sdpa/threads", test_threads);
  g_test_add_func("/engine/ops/sdpa/accumulate", test_accumulate);
  g_test_add_func("/engine/ops/sdpa/packed", test_packed);
  return g_test_run();
}
