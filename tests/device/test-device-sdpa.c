/* test-device-sdpa.c: em_sdpa, the fused attention, on a device against
 * the CPU: forward values and the gradients of q, k and v (inputs reach
 * the device through em_to_device, so the gradients come back through
 * its backward), with causal masks (L = S, L < S, L > S with rows that
 * see no key), a key padding mask (on the host, moved by the op, and on
 * the device; a batch entry with every key padded), strided heads,
 * Ev != E, a given scale, and dropout: the device must draw the CPU's
 * mask from the same rng state (kern-random.h), forward and backward.
 * em_sdpa_packed (the heads read from and written to packed tensors
 * through strided views) likewise: its output and qkv's gradient.
 * A file of its own beside test-device-ops.c (which holds every other op
 * and is long enough). The device is EMBER_TEST_DEVICE ("ref" when unset;
 * the 'gpu' suite sets "cuda"); exits 77 (skip) when it is unavailable. */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "em-device.h"
#include "gradcheck.h"

static em_device dev;
static const em_device cpu = {EM_DEVICE_CPU, 0};

typedef struct {
  int64_t N, H, L, S, E, Ev;
  bool causal;
  int pad; /* 0 none; 1 some keys (mask on the host); 2 also all of entry 1, mask on the device */
  double dropout;
  bool strided;
  double scale;
} sd_case;

/* Element k of t (any device, strides) as doubles; needs a scope. */
static double *values_of(em_tensor *t, int64_t *n) {
  em_tensor *h = em_on_device(t) ? em_to_device(t, cpu) : t;
  *n = em_tensor_numel(h);
  double *v = g_new(double, *n > 0 ? *n : 1);
  for (int64_t k = 0; k < *n; k++) {
    int64_t idx[EM_MAX_DIMS], r = k;
    for (int d = h->ndim - 1; d >= 0; d--) {
      idx[d] = r % h->shape[d];
      r /= h->shape[d];
    }
    v[k] = em_tensor_get(h, idx);
  }
  return v;
}

/* Scores summed over E <= 8 float products and outputs over S <= 9
 * weights, in another order on each side (the CPU's tiles, the device's
 * rows), with expf within an ulp or two of em_expf: a few float ulps of
 * the values (at most about 2) */
static void assert_close(const char *what, const char *part, const double *a, const double *b,
                         int64_t n) {
  for (int64_t k = 0; k < n; k++)
    if (!(fabs(a[k] - b[k]) <= 2e-6 + 1e-5 * fabs(b[k])))
      g_error("%s, %s: element %lld: device %.9g vs cpu %.9g", what, part, (long long)k, a[k],
              b[k]);
}

static em_tensor *make_kpm(const sd_case *c) {
  int64_t s[2] = {c->N, c->S};
  em_tensor *m = em_tensor_new(EM_DTYPE_U8, 2, s, NULL);
  uint8_t *v = em_tensor_ptr(m);
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t j = 0; j < c->S; j++)
      v[n * c->S + j] = (c->pad == 2 && n == 1) || (j * 5 + n * 3) % 4 == 1;
  return m;
}

/* The output and persistent copies of the gradients of q, k, v (as
 * stored) on device d. */
static double *run_on(em_device d, const sd_case *c, em_tensor *const *host, const em_tensor *kpm,
                      int64_t *ny, double **grads, int64_t *ng) {
  em_tensor *x[3];
  for (int i = 0; i < 3; i++) {
    em_error err;
    x[i] = em_tensor_new(EM_DTYPE_F32, host[i]->ndim, host[i]->shape, &err);
    em_tensor_copy_(x[i], host[i]);
    em_tensor_set_requires_grad(x[i], true);
    g_assert_cmpint(em_tensor_move_(x[i], d, &err), ==, EM_OK);
  }
  em_scope *s = em_scope_begin();
  em_tensor *v[3];
  for (int i = 0; i < 3; i++) v[i] = c->strided ? em_transpose(x[i], 1, 2) : x[i];
  const em_tensor *m = kpm && c->pad == 2 ? em_to_device((em_tensor *)kpm, d) : kpm;
  em_rng rng;
  em_rng_seed(&rng, 77);
  em_sdpa_params p = {.causal = c->causal, .key_padding_mask = m, .dropout_p = c->dropout,
                      .training = c->dropout > 0, .rng = &rng, .scale = c->scale};
  em_tensor *y = em_sdpa(v[0], v[1], v[2], &p);
  g_assert_true(em_device_eq(y->device, d));
  double *vy = values_of(y, ny);
  em_tensor *R = gc_rand(EM_DTYPE_F32, y->ndim, y->shape, -1, 1, 97, false);
  em_backward_grad(y, em_on_device(y) ? em_to_device(R, d) : R);
  g_assert_false(em_device_error_pending());
  for (int i = 0; i < 3; i++) grads[i] = values_of(x[i]->grad, &ng[i]);
  em_scope_end(s);
  em_tensor_free(R);
  for (int i = 0; i < 3; i++) em_tensor_free(x[i]);
  return vy;
}

static void check_case(const char *what, const sd_case *c) {
  int64_t rows[3] = {c->L, c->S, c->S}, feats[3] = {c->E, c->E, c->Ev};
  em_tensor *in[3];
  for (int i = 0; i < 3; i++) {
    int64_t s[4] = {c->N, c->strided ? rows[i] : c->H, c->strided ? c->H : rows[i], feats[i]};
    in[i] = gc_rand(EM_DTYPE_F32, 4, s, -1.5, 1.5, 30 + (unsigned)i, false);
  }
  em_tensor *kpm = c->pad ? make_kpm(c) : NULL;
  int64_t nc, nd, gc[3], gd[3];
  double *gcpu[3], *gdev[3];
  double *yc = run_on(cpu, c, in, kpm, &nc, gcpu, gc);
  double *yd = run_on(dev, c, in, kpm, &nd, gdev, gd);
  g_assert_cmpint(nc, ==, nd);
  assert_close(what, "forward", yd, yc, nc);
  for (int i = 0; i < 3; i++) {
    char part[32];
    snprintf(part, sizeof part, "gradient of input %d", i);
    g_assert_cmpint(gc[i], ==, gd[i]);
    assert_close(what, part, gdev[i], gcpu[i], gc[i]);
    g_free(gcpu[i]);
    g_free(gdev[i]);
    em_tensor_free(in[i]);
  }
  g_free(yc);
  g_free(yd);
  em_tensor_free(kpm);
}

static void test_sdpa(void) {
  static const sd_case cases[] = {
      {2, 2, 5, 5, 4, 3, false, 0, 0, false, 0},  /* plain */
      {2, 2, 6, 6, 8, 8, true, 0, 0, false, 0},   /* causal */
      {2, 2, 4, 7, 3, 4, false, 1, 0, false, 0},  /* padding, mask on the host */
      {3, 2, 5, 5, 4, 4, true, 2, 0, false, 0},   /* both, entry 1 all padded, on the device */
      {2, 2, 1, 9, 4, 4, true, 0, 0, false, 0},   /* a KV-cache step */
      {2, 1, 7, 4, 4, 4, true, 1, 0, false, 0},   /* L > S */
      {2, 2, 6, 6, 4, 4, true, 0, 0.3, true, 0},  /* dropout, strided heads */
      {2, 3, 5, 6, 4, 5, false, 1, 0, true, 0.7}, /* scale, Ev != E */
  };
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    char what[48];
    snprintf(what, sizeof what, "sdpa case %zu", k);
    check_case(what, &cases[k]);
  }
}

/* em_sdpa_packed of qkv (N, L, 3 H E) on device d: its output, and qkv's
 * gradient into *grad (n values). */
static double *run_packed_on(em_device d, const em_tensor *host, int heads, const sd_case *c,
                             const em_tensor *kpm, int64_t *ny, double **grad, int64_t *ng) {
  em_error err;
  em_tensor *x = em_tensor_new(EM_DTYPE_F32, 3, host->shape, &err);
  em_tensor_copy_(x, host);
  em_tensor_set_requires_grad(x, true);
  g_assert_cmpint(em_tensor_move_(x, d, &err), ==, EM_OK);
  em_scope *s = em_scope_begin();
  em_rng rng;
  em_rng_seed(&rng, 78);
  em_sdpa_params p = {.causal = c->causal, .key_padding_mask = kpm, .dropout_p = c->dropout,
                      .training = c->dropout > 0, .rng = &rng};
  em_tensor *y = em_sdpa_packed(x, heads, &p);
  g_assert_true(em_device_eq(y->device, d));
  double *vy = values_of(y, ny);
  em_tensor *R = gc_rand(EM_DTYPE_F32, y->ndim, y->shape, -1, 1, 98, false);
  em_backward_grad(y, em_on_device(y) ? em_to_device(R, d) : R);
  g_assert_false(em_device_error_pending());
  *grad = values_of(x->grad, ng);
  em_scope_end(s);
  em_tensor_free(R);
  em_tensor_free(x);
  return vy;
}

static void test_packed(void) {
  static const sd_case cases[] = {
      {2, 2, 6, 6, 4, 4, true, 0, 0, false, 0},   /* causal */
      {3, 2, 5, 5, 4, 4, false, 1, 0, false, 0},  /* padding */
      {2, 3, 7, 7, 4, 4, true, 1, 0.3, false, 0}, /* both, dropout */
  };
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    const sd_case *c = &cases[k];
    int64_t shape[3] = {c->N, c->L, 3 * c->H * c->E};
    em_tensor *qkv = gc_rand(EM_DTYPE_F32, 3, shape, -1.5, 1.5, 50 + (unsigned)k, false);
    em_tensor *kpm = c->pad ? make_kpm(c) : NULL;
    int64_t nc, nd, gc, gd;
    double *gcpu, *gdev;
    double *yc = run_packed_on(cpu, qkv, (int)c->H, c, kpm, &nc, &gcpu, &gc);
    double *yd = run_packed_on(dev, qkv, (int)c->H, c, kpm, &nd, &gdev, &gd);
    char what[48];
    snprintf(what, sizeof what, "sdpa_packed case %zu", k);
    g_assert_cmpint(nc, ==, nd);
    g_assert_cmpint(gc, ==, gd);
    assert_close(what, "forward", yd, yc, nc);
    assert_close(what, "gradient of qkv", gdev, gcpu, gc);
    g_free(yc);
    g_free(yd);
    g_free(gcpu);
    g_free(gdev);
    em_tensor_free(qkv);
    em_tensor_free(kpm);
  }
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  const char *name = g_getenv("EMBER_TEST_DEVICE");
  em_error err;
  if (em_device_parse(name && *name ? name : "ref", &dev, &err) != EM_OK ||
      em_device_check(dev, &err) != EM_OK) {
    printf("skipped: %s\n", err.msg);
    return 77;
  }
  g_test_add_func("/device/ops/sdpa", test_sdpa);
  g_test_add_func("/device/ops/sdpa-packed", test_packed);
  return g_test_run();
}
