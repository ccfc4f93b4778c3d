/* clip.c: gradient clipping by total L2 norm, like
 * torch.nn.utils.clip_grad_norm_ (norm_type 2), except that a non-finite
 * total is returned without touching the gradients. Gradients on a device
 * are summed there (the backend's sumsq kernel, one f32 partial per
 * gradient, read back together and added in double) and scaled there. */
#include "optim-private.h"

#include <math.h>
#include <stdlib.h>

#include "em-backend.h"

/* Sums of squares of contiguous gradients. f32: blocks of 512 values are
 * summed in 16 f32 lanes (one AVX-512 register's worth, which the
 * compiler keeps in vector registers), the blocks' sums and the values
 * after the last whole block in double: as fast as the f32 sum PyTorch
 * does, and more accurate. A square that overflows f32 (a gradient above
 * ~1e19) makes the norm infinite, as in PyTorch, which the divergence
 * watchdog treats as divergence. The blocks of all gradients are summed
 * over the thread pool, each into its own slot, and the slots are added
 * in order afterwards: the same total whatever the thread count. */
enum { LANES = 16, BLOCK = 512 };

/* The current gradient of p (contiguous f32 or f64), or NULL. */
static em_tensor *current_grad(const em_tensor *p) {
  em_tensor *g = em_tensor_current_grad(p);
  if (!g) return NULL;
  EM_ASSERT(em_tensor_is_contiguous(g));
  EM_ASSERT(g->dtype == EM_DTYPE_F32 || g->dtype == EM_DTYPE_F64);
  return g;
}

static float block_sum_squares(const float *x /* (BLOCK) */) {
  float acc[LANES] = {0};
  for (int b = 0; b < BLOCK; b += LANES)
    for (int j = 0; j < LANES; j++) acc[j] += x[b + j] * x[b + j];
  float s = 0;
  for (int j = 0; j < LANES; j++) s += acc[j];
  return s;
}

static double f64_sum_squares(const double *x, int64_t n) {
  double acc[8] = {0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; j++) acc[j] += x[k + j] * x[k + j];
  for (; k < n; k++) acc[0] += x[k] * x[k];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

typedef struct {
  const float *const *x; /* (n_grads): f32 gradients */
  const int64_t *first;  /* (n_grads + 1): block index each one starts at */
  int n_grads, parts;
  float *sums; /* (first[n_grads]) */
} blocks_job;

/* Share s of every gradient's blocks: its s-th block of rows, as in the
 * optimiser's step (engine/optim/pieces.c), so each core reads the part
 * of the gradients its own cache holds. */
static void sum_share(void *ctx, int64_t s, int64_t end) {
  const blocks_job *j = ctx;
  (void)end;
  for (int i = 0; i < j->n_grads; i++) {
    int64_t nb = j->first[i + 1] - j->first[i];
    for (int64_t b = nb * s / j->parts; b < nb * (s + 1) / j->parts; b++)
      j->sums[j->first[i] + b] = block_sum_squares(j->x[i] + b * BLOCK);
  }
}

/* Sum of squares of the current CPU gradients among params[0..n): each
 * one's whole blocks (summed over the pool) and then its tail, in order. */
static double host_sum_squares(int n, em_tensor *const *params) {
  /* from the caching allocator: no malloc in a steady training step */
  size_t x_bytes = sizeof(float *) * (size_t)(n + 1);
  size_t first_bytes = sizeof(int64_t) * (size_t)(n + 1);
  const float **x = em_alloc(x_bytes);
  int64_t *first = em_alloc(first_bytes), *numel = em_alloc(first_bytes);
  EM_ASSERT(x && first && numel && "out of memory for the gradient norm");
  double total = 0; /* f64 gradients: summed here, whole */
  int n_grads = 0;
  first[0] = 0;
  for (int i = 0; i < n; i++) {
    const em_tensor *g = current_grad(params[i]);
    if (!g || em_on_device(g)) continue;
    if (g->dtype != EM_DTYPE_F32) {
      total += f64_sum_squares(em_f64(g), em_tensor_numel(g));
      continue;
    }
    x[n_grads] = em_f32(g);
    numel[n_grads] = em_tensor_numel(g);
    first[n_grads + 1] = first[n_grads] + numel[n_grads] / BLOCK;
    n_grads++;
  }
  size_t sums_bytes = sizeof(float) * (size_t)(first[n_grads] + 1);
  float *sums = em_alloc(sums_bytes);
  EM_ASSERT(sums && "out of memory for the gradient norm");
  blocks_job j = {.x = x, .first = first, .n_grads = n_grads, .sums = sums, .parts = 1};
  if (first[n_grads] * BLOCK < EM_OPTIM_PARALLEL_MIN) {
    sum_share(&j, 0, 1);
  } else {
    j.parts = em_parallel_threads();
    em_parallel_shares(sum_share, &j);
  }
  for (int k = 0; k < n_grads; k++) {
    for (int64_t b = first[k]; b < first[k + 1]; b++) total += sums[b];
    for (int64_t e = (first[k + 1] - first[k]) * BLOCK; e < numel[k]; e++)
      total += (double)x[k][e] * (double)x[k][e];
  }
  em_free(sums, sums_bytes);
  em_free(numel, first_bytes);
  em_free(first, first_bytes);
  em_free((void *)x, x_bytes);
  return total;
}

static void scale(em_tensor *g, double coef) {
  int64_t n = em_tensor_numel(g);
  if (g->dtype == EM_DTYPE_F32) {
    float *x = em_f32(g); /* (D) */
    const float c = (float)coef;
    for (int64_t k = 0; k < n; k++) x[k] *= c;
  } else {
    double *x = em_f64(g); /* (D) */
    for (int64_t k = 0; k < n; k++) x[k] *= coef;
  }
}


/* Sum of squares of the n_dev current gradients among params that live
 * on device d (all of them: a model lives on one device). NaN when the
 * device ran out of memory for the partial sums (the trainer collects
 * that error: em_device_error_take). */
static double device_sum_squares(int n, em_tensor *const *params, em_device d, int n_dev) {
  em_scope *sc = em_scope_begin();
  const int64_t shape[1] = {n_dev};
  em_tensor *part = em_empty_on(d, EM_DTYPE_F32, 1, shape); /* (n_dev) */
  float *host = malloc(sizeof *host * (size_t)n_dev);      /* (n_dev) */
  double total = NAN;
  if (part && part->data && host) {
    const em_kernels *k = em_kernels_of(part);
    const int64_t one[1] = {1}, unit[1] = {1};
    int j = 0;
    for (int i = 0; i < n; i++) {
      const em_tensor *g = current_grad(params[i]);
      if (!g || !em_on_device(g)) continue;
      EM_ASSERT(em_device_eq(g->device, d) && "gradients on two devices");
      em_tensor *slot = em_view_raw(part, 1, one, unit, j++); /* (1) */
      slot->device = d;
      EM_KCALL(k, sumsq, false, slot, g);
    }
    em_tensor_download(part, host);
    total = 0;
    for (j = 0; j < n_dev; j++) total += (double)host[j];
  }
  free(host);
  em_scope_end(sc);
  return total;
}

double em_clip_grad_norm(int n, em_tensor *const *params, double max_norm) {
  int n_dev = 0;
  em_device dev = em_device_cpu();
  for (int i = 0; i < n; i++) {
    const em_tensor *g = current_grad(params[i]);
    if (g && em_on_device(g)) {
      dev = g->device;
      n_dev++;
    }
  }
  double total = host_sum_squares(n, params);
  if (n_dev) total += device_sum_squares(n, params, dev, n_dev);
  total = sqrt(total);
  if (!isfinite(total)) return total;
  double coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (int i = 0; i < n; i++) {
      em_tensor *g = current_grad(params[i]);
      if (!g) continue;
      if (em_on_device(g)) EM_KCALL(em_kernels_of(g), unary, EM_KU_MULS, g, g, (double)(float)coef, 0);
      else scale(g, coef);
    }
  return total;
}
