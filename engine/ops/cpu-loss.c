/* cpu-loss.c: the CPU backend's loss kernels: cross_entropy_forward and
 * cross_entropy_backward (PyTorch's label smoothing, mean over the rows),
 * and sumsq (em_mse_loss's sum of squares), f32 and f64 (em-backend.h).
 * The op front-end is loss.c.
 *
 * Cross entropy with smoothing eps over K classes, as PyTorch defines it:
 *   loss_i = (1 - eps) * -logp[i, t_i] + eps / K * sum_k -logp[i, k]
 *          = ls_i - (1 - eps) * (x[i, t_i] - c_i) - eps / K * sum_k (x[i, k] - c_i)
 * with ls_i = log sum_k exp(x[i, k] - c_i) for a shift c_i: every term is
 * taken relative to c_i, so large logits keep their precision. c_i is the
 * row maximum, or (f32, short rows) the maximum of a block of rows, so
 * that the block's exponentials run as one flat vectorised loop instead
 * of many short ones (a row far below the block's maximum is redone with
 * its own). Forward makes one pass and keeps lse_i = c_i + ls_i per row
 * (the entry's form, shared with the reference device and CUDA);
 * backward makes one pass writing
 *   gx[i, k] = g / N * (exp(x[i, k] - lse_i) - eps / K - (1 - eps) [k == t_i]).
 *
 * f32 runs the fast kernels, compiled for x86-64-v4, v3 and the baseline
 * (EM_CPU_CLONES: em_expf's float arithmetic and the sums' fixed lanes
 * give every clone the same bits); f64 runs the plain loop reference
 * that the tests hold them to. */
#include "ops-private.h"
#include "em-cpu.h"
#include "em-pool.h"

#include <math.h>

#define PARALLEL_MIN (1 << 16)   /* elements before threads are worth waking */
#define PARALLEL_GRAIN (1 << 14) /* elements per thread chunk, at least */
#define SUMSQ_PARTS 64           /* fixed split, so sums do not depend on threads */
#define CE_BLOCK 1024            /* logits per exp buffer */
#define MIN_SHARED_SUM 1e-26f    /* ~exp(-60): far above f32's smallest normal */

/* Class index of row i (target may be a strided view). */
static inline int64_t target_at(const em_tensor *target, int64_t i) {
  return em_i64(target)[i * target->stride[0]];
}

/* ---- cross entropy: plain loop reference (f64) --------------------------------- */

static double row_lse_ref(const double *x, int64_t K) {
  double m = -INFINITY, s = 0;
  for (int64_t k = 0; k < K; k++) m = fmax(m, x[k]);
  for (int64_t k = 0; k < K; k++) s += exp(x[k] - m);
  return m + log(s);
}

static double cross_entropy_forward_ref(const double *x, const em_tensor *target, double *lses,
                                        int64_t N, int64_t K, double eps) {
  double total = 0;
  for (int64_t i = 0; i < N; i++) {
    const double *xr = x + i * K; /* (K) */
    double lse = row_lse_ref(xr, K);
    lses[i] = lse;
    int64_t t = target_at(target, i);
    double smooth = 0;
    for (int64_t k = 0; k < K; k++) smooth += -(xr[k] - lse);
    total += (1 - eps) * -(xr[t] - lse) + eps / (double)K * smooth;
  }
  return total / (double)N;
}

static void cross_entropy_backward_ref(const double *x, const em_tensor *target,
                                       const double *lses, double *gx, int64_t N, int64_t K,
                                       double eps, double g) {
  for (int64_t i = 0; i < N; i++) {
    const double *xr = x + i * K; /* (K) */
    double lse = lses[i];
    int64_t t = target_at(target, i);
    for (int64_t k = 0; k < K; k++) {
      double v = g / (double)N * (exp(xr[k] - lse) - eps / (double)K - (k == t ? 1 - eps : 0));
      gx[i * K + k] = v;
    }
  }
}

/* ---- cross entropy: fast kernels (f32) ------------------------------------------- */

typedef struct {
  const float *x;  /* (N, K) */
  const em_tensor *target;
  float *lse;      /* (N): c_i + ls_i, ls_i = log sum_k exp(x[i, k] - c_i) */
  double *loss;    /* (N), per row */
  float *gx;       /* (N, K) */
  int64_t N, K;
  float eps, g;    /* g: upstream gradient / N */
} ce_job;

/* Loss of row i from its shift c, ls and sx = sum_k (x[i, k] - c). */
static inline void ce_row_done(const ce_job *j, int64_t i, float c, float s, float sx) {
  const float *x = j->x + i * j->K; /* (K) */
  float ls = logf(s);
  int64_t t = target_at(j->target, i);
  j->lse[i] = c + ls;
  j->loss[i] = (double)ls - (double)(1 - j->eps) * (x[t] - c) -
               (double)(j->eps / (float)j->K) * sx;
}

/* Rows [i0, i1), each shifted by its own maximum; the exponentials go
 * through a buffer so that their loop vectorises. */
static inline void ce_rows_f32(const ce_job *j, int64_t i0, int64_t i1) {
  int64_t K = j->K;
  for (int64_t i = i0; i < i1; i++) {
    const float *x = j->x + i * K; /* (K) */
    float m = em_lane_max_f32(x, K);
    float s = 0, sx = 0;
    for (int64_t k0 = 0; k0 < K; k0 += CE_BLOCK) {
      int64_t len = K - k0 < CE_BLOCK ? K - k0 : CE_BLOCK;
      float e[CE_BLOCK], d[CE_BLOCK];
      for (int64_t k = 0; k < len; k++) {
        d[k] = x[k0 + k] - m;
        e[k] = em_expf(d[k]);
      }
      s += em_lane_sum_f32(e, len);
      sx += em_lane_sum_f32(d, len);
    }
    ce_row_done(j, i, m, s, sx);
  }
}

/* Rows [i0, i1) shifted by one c, the maximum over all of them, so that
 * the exponentials run as one flat loop over the block. A row whose sum
 * comes out below MIN_SHARED_SUM lies so far below c that its own terms
 * may underflow: it is redone with its own maximum. Above that bound
 * every term a row loses to underflow is below e^-27 of its sum. */
static inline void ce_block_f32(const ce_job *j, int64_t i0, int64_t i1) {
  int64_t K = j->K, n = (i1 - i0) * K;
  const float *x = j->x + i0 * K; /* (i1 - i0, K) */
  float c = em_lane_max_f32(x, n);
  float e[CE_BLOCK], d[CE_BLOCK];
  for (int64_t k = 0; k < n; k++) {
    d[k] = x[k] - c;
    e[k] = em_expf(d[k]);
  }
  for (int64_t i = i0; i < i1; i++) {
    int64_t at = (i - i0) * K;
    float s = em_lane_sum_f32(e + at, K);
    if (s >= MIN_SHARED_SUM) ce_row_done(j, i, c, s, em_lane_sum_f32(d + at, K));
    else ce_rows_f32(j, i, i + 1);
  }
}

/* Rows per forward work item: long rows one by one (per-row work is
 * amortised), short rows in blocks. Items, not threads, fix the blocks,
 * so the result does not depend on the thread count. */
static int64_t ce_rows_per_item(int64_t K) { return K > CE_BLOCK / 4 ? 1 : CE_BLOCK / K; }

EM_CPU_CLONES static void ce_forward_f32(void *ctx, int64_t begin, int64_t end) {
  const ce_job *j = ctx;
  int64_t rows = ce_rows_per_item(j->K), N = j->N;
  for (int64_t w = begin; w < end; w++) {
    int64_t i0 = w * rows, i1 = i0 + rows < N ? i0 + rows : N;
    if (rows == 1) ce_rows_f32(j, i0, i1);
    else ce_block_f32(j, i0, i1);
  }
}

EM_CPU_CLONES static void ce_backward_f32(void *ctx, int64_t begin, int64_t end) {
  const ce_job *j = ctx;
  int64_t K = j->K;
  float g = j->g, off = j->g * j->eps / (float)K, hit = j->g * (1 - j->eps);
  for (int64_t i = begin; i < end; i++) {
    const float *x = j->x + i * K; /* (K) */
    float *gx = j->gx + i * K;     /* (K) */
    float lse = j->lse[i];
    int64_t t = target_at(j->target, i);
    for (int64_t k = 0; k < K; k++) gx[k] = g * em_expf(x[k] - lse) - off;
    gx[t] -= hit;
  }
}

/* fn over items [0, items) of per_item logits each, on threads when big. */
static void run_items(int64_t items, int64_t per_item, em_range_fn fn, void *ctx) {
  if (items * per_item >= PARALLEL_MIN) em_parallel_for(items, PARALLEL_GRAIN / per_item + 1, fn, ctx);
  else fn(ctx, 0, items);
}

/* ---- cross entropy: the kernel entries ------------------------------------------ */

em_status em_cpu_cross_entropy_forward(em_tensor *loss, em_tensor *lse, const em_tensor *logits,
                                       const em_tensor *target, double smoothing) {
  EM_ASSERT(logits->ndim == 2 && em_tensor_is_contiguous(logits) && em_tensor_is_contiguous(lse));
  int64_t N = logits->shape[0], K = logits->shape[1];
  if (logits->dtype == EM_DTYPE_F32) {
    double *rows = em_scratch(sizeof(double) * (size_t)N); /* (N) per-row losses */
    ce_job j = {.x = em_f32(logits), .target = target, .lse = em_f32(lse), .loss = rows, .N = N,
                .K = K, .eps = (float)smoothing};
    int64_t per = ce_rows_per_item(K);
    run_items((N + per - 1) / per, per * K, ce_forward_f32, &j);
    double total = 0;
    for (int64_t i = 0; i < N; i++) total += rows[i];
    em_f32(loss)[0] = (float)(total / (double)N);
  } else {
    em_f64(loss)[0] = cross_entropy_forward_ref(em_f64(logits), target, em_f64(lse), N, K, smoothing);
  }
  return EM_OK;
}

em_status em_cpu_cross_entropy_backward(em_tensor *gx, const em_tensor *gscale,
                                        const em_tensor *logits, const em_tensor *target,
                                        const em_tensor *lse, double smoothing) {
  EM_ASSERT(em_tensor_is_contiguous(logits) && em_tensor_is_contiguous(gx));
  int64_t N = logits->shape[0], K = logits->shape[1];
  if (logits->dtype == EM_DTYPE_F32) {
    double g = (double)em_f32(gscale)[0];
    ce_job j = {.x = em_f32(logits), .target = target, .lse = em_f32(lse), .gx = em_f32(gx),
                .N = N, .K = K, .eps = (float)smoothing, .g = (float)(g / (double)N)};
    run_items(N, K, ce_backward_f32, &j);
  } else {
    cross_entropy_backward_ref(em_f64(logits), target, em_f64(lse), em_f64(gx), N, K, smoothing,
                               em_f64(gscale)[0]);
  }
  return EM_OK;
}

/* ---- sumsq ------------------------------------------------------------------------- */

/* Sums of squares of x over SUMSQ_PARTS fixed parts, each in double (f32:
 * of the f32 squares, 8 lanes), then added in order. */
typedef struct {
  const void *x; /* (n) */
  double *part;  /* (SUMSQ_PARTS) */
  int64_t n;
  bool f64;
} sumsq_job;

static void sumsq_parts(void *ctx, int64_t begin, int64_t end) {
  const sumsq_job *j = ctx;
  for (int64_t p = begin; p < end; p++) {
    int64_t b = j->n * p / SUMSQ_PARTS, e = j->n * (p + 1) / SUMSQ_PARTS;
    double s = 0;
    if (j->f64) {
      const double *x = j->x;
      for (int64_t k = b; k < e; k++) s += x[k] * x[k];
    } else {
      const float *x = j->x;
      double lane[8] = {0};
      int64_t k = b;
      for (; k + 8 <= e; k += 8)
        for (int q = 0; q < 8; q++) lane[q] += (double)(x[k + q] * x[k + q]);
      for (; k < e; k++) s += (double)(x[k] * x[k]);
      for (int q = 0; q < 8; q++) s += lane[q];
    }
    j->part[p] = s;
  }
}

em_status em_cpu_sumsq(bool acc, em_tensor *out, const em_tensor *x) {
  EM_ASSERT(em_tensor_is_contiguous(x));
  double part[SUMSQ_PARTS];
  sumsq_job j = {.x = em_tensor_ptr(x), .part = part, .n = em_tensor_numel(x),
                 .f64 = x->dtype == EM_DTYPE_F64};
  if (j.n >= PARALLEL_MIN) em_parallel_for(SUMSQ_PARTS, 1, sumsq_parts, &j);
  else sumsq_parts(&j, 0, SUMSQ_PARTS);
  double s = 0;
  for (int p = 0; p < SUMSQ_PARTS; p++) s += part[p];
  if (out->dtype == EM_DTYPE_F64) em_f64(out)[0] = acc ? em_f64(out)[0] + s : s;
  else em_f32(out)[0] = acc ? (float)((double)em_f32(out)[0] + s) : (float)s;
  return EM_OK;
}
