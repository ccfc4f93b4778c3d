/* loss.c: em_cross_entropy (log-softmax fused with the negative log
 * likelihood, optional label smoothing) and em_mse_loss, both with mean
 * reduction and backward.
 *
 * Cross entropy with smoothing eps over K classes, as PyTorch defines it:
 *   loss_i = (1 - eps) * -logp[i, t_i] + eps / K * sum_k -logp[i, k]
 *          = ls_i - (1 - eps) * (x[i, t_i] - c_i) - eps / K * sum_k (x[i, k] - c_i)
 * with ls_i = log sum_k exp(x[i, k] - c_i) for a shift c_i: every term is
 * taken relative to c_i, so large logits keep their precision. c_i is the
 * row maximum, or (f32, short rows) the maximum of a block of rows, so
 * that the block's exponentials run as one flat vectorised loop instead
 * of many short ones (a row far below the block's maximum is redone with
 * its own). Forward makes one pass and keeps (c_i, ls_i) per row;
 * backward makes one pass writing
 *   gx[i, k] = g / N * (exp(x[i, k] - c_i - ls_i) - eps / K - (1 - eps) [k == t_i]).
 *
 * f32 runs the fast kernels; f64 runs the plain loop reference that the
 * tests hold them to. */
#include "ops-private.h"
#include "em-pool.h"

#include <math.h>

#define PARALLEL_MIN (1 << 16)   /* elements before threads are worth waking */
#define PARALLEL_GRAIN (1 << 14) /* elements per thread chunk, at least */
#define MSE_PARTS 64             /* fixed split, so sums do not depend on threads */
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

static double cross_entropy_forward_ref(const double *x, const em_tensor *target, int64_t N,
                                        int64_t K, double eps) {
  double total = 0;
  for (int64_t i = 0; i < N; i++) {
    const double *xr = x + i * K; /* (K) */
    double lse = row_lse_ref(xr, K);
    int64_t t = target_at(target, i);
    double smooth = 0;
    for (int64_t k = 0; k < K; k++) smooth += -(xr[k] - lse);
    total += (1 - eps) * -(xr[t] - lse) + eps / (double)K * smooth;
  }
  return total / (double)N;
}

static void cross_entropy_backward_ref(const double *x, const em_tensor *target, double *gx,
                                       bool fresh, int64_t N, int64_t K, double eps, double g) {
  for (int64_t i = 0; i < N; i++) {
    const double *xr = x + i * K; /* (K) */
    double lse = row_lse_ref(xr, K);
    int64_t t = target_at(target, i);
    for (int64_t k = 0; k < K; k++) {
      double v = g / (double)N * (exp(xr[k] - lse) - eps / (double)K - (k == t ? 1 - eps : 0));
      gx[i * K + k] = fresh ? v : gx[i * K + k] + v;
    }
  }
}

/* ---- cross entropy: fast kernels (f32) ------------------------------------------- */

typedef struct {
  const float *x;  /* (N, K) */
  const em_tensor *target;
  float *stats;    /* (N, 2): shift c_i, ls_i = log sum_k exp(x[i, k] - c_i) */
  double *loss;    /* (N), per row */
  float *gx;       /* (N, K) */
  int64_t N, K;
  float eps, g;    /* g: upstream gradient / N */
  bool fresh;
} ce_job;

/* Loss of row i from its shift c, ls and sx = sum_k (x[i, k] - c). */
static void ce_row_done(const ce_job *j, int64_t i, float c, float s, float sx) {
  const float *x = j->x + i * j->K; /* (K) */
  float ls = logf(s);
  int64_t t = target_at(j->target, i);
  j->stats[2 * i] = c;
  j->stats[2 * i + 1] = ls;
  j->loss[i] = (double)ls - (double)(1 - j->eps) * (x[t] - c) -
               (double)(j->eps / (float)j->K) * sx;
}

/* Rows [i0, i1), each shifted by its own maximum; the exponentials go
 * through a buffer so that their loop vectorises. */
static void ce_rows_f32(const ce_job *j, int64_t i0, int64_t i1) {
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
static void ce_block_f32(const ce_job *j, int64_t i0, int64_t i1) {
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

static void ce_forward_f32(void *ctx, int64_t begin, int64_t end) {
  const ce_job *j = ctx;
  int64_t rows = ce_rows_per_item(j->K), N = j->N;
  for (int64_t w = begin; w < end; w++) {
    int64_t i0 = w * rows, i1 = i0 + rows < N ? i0 + rows : N;
    if (rows == 1) ce_rows_f32(j, i0, i1);
    else ce_block_f32(j, i0, i1);
  }
}

static void ce_backward_f32(void *ctx, int64_t begin, int64_t end) {
  const ce_job *j = ctx;
  int64_t K = j->K;
  float g = j->g, off = j->g * j->eps / (float)K, hit = j->g * (1 - j->eps);
  for (int64_t i = begin; i < end; i++) {
    const float *x = j->x + i * K; /* (K) */
    float *gx = j->gx + i * K;     /* (K) */
    float c = j->stats[2 * i], ls = j->stats[2 * i + 1];
    int64_t t = target_at(j->target, i);
    if (j->fresh) {
      for (int64_t k = 0; k < K; k++) gx[k] = g * em_expf((x[k] - c) - ls) - off;
      gx[t] -= hit;
    } else {
      for (int64_t k = 0; k < K; k++) gx[k] += g * em_expf((x[k] - c) - ls) - off;
      gx[t] -= hit;
    }
  }
}

/* fn over items [0, items) of per_item logits each, on threads when big. */
static void run_items(int64_t items, int64_t per_item, em_range_fn fn, void *ctx) {
  if (items * per_item >= PARALLEL_MIN) em_parallel_for(items, PARALLEL_GRAIN / per_item + 1, fn, ctx);
  else fn(ctx, 0, items);
}

/* ---- cross entropy ----------------------------------------------------------------- */

static void cross_entropy_backward(em_node *n) {
  bool fresh;
  em_tensor *gx = em_grad_acquire(n->in[0], &fresh);
  if (!gx) return;
  em_tensor *x = n->saved[0], *target = n->saved[1]; /* (N, K) contiguous, (N) */
  int64_t N = x->shape[0], K = x->shape[1];
  double g = em_tensor_item(n->out->grad), eps = n->f[0];
  if (x->dtype == EM_DTYPE_F32) {
    ce_job j = {.x = em_f32(x), .target = target, .stats = n->ctx, .gx = em_f32(gx), .N = N, .K = K,
                .eps = (float)eps, .g = (float)(g / (double)N), .fresh = fresh};
    run_items(N, K, ce_backward_f32, &j);
  } else {
    cross_entropy_backward_ref(em_f64(x), target, em_f64(gx), fresh, N, K, eps, g);
  }
}

em_tensor *em_cross_entropy(em_tensor *logits, em_tensor *target, double label_smoothing) {
  if (EM_ON_DEVICE(logits, target)) return em_dev_cross_entropy(logits, target, label_smoothing);
  EM_ASSERT(EM_IS_FLOAT(logits) && logits->ndim == 2);
  EM_OP_BEGIN("cross_entropy", 2, logits, target);
  EM_ASSERT(target->dtype == EM_DTYPE_I64 && target->ndim == 1);
  EM_ASSERT(target->shape[0] == logits->shape[0]);
  EM_ASSERT(label_smoothing >= 0 && label_smoothing <= 1);
  int64_t N = logits->shape[0], K = logits->shape[1];
  EM_ASSERT(N > 0 && K > 0);
  for (int64_t i = 0; i < N; i++) {
    int64_t t = target_at(target, i);
    EM_ASSERT(t >= 0 && t < K && "class index out of range");
  }
  em_tensor *x = em_contiguous_nograd(logits);
  em_tensor *out = em_empty(logits->dtype, 0, NULL);
  float *stats = NULL;
  if (logits->dtype == EM_DTYPE_F32) {
    stats = em_scratch(sizeof(float) * 2 * (size_t)N);
    double *loss = em_scratch(sizeof(double) * (size_t)N);
    ce_job j = {.x = em_f32(x), .target = target, .stats = stats, .loss = loss, .N = N, .K = K,
                .eps = (float)label_smoothing};
    int64_t rows = ce_rows_per_item(K);
    run_items((N + rows - 1) / rows, rows * K, ce_forward_f32, &j);
    double total = 0;
    for (int64_t i = 0; i < N; i++) total += loss[i];
    em_f32(out)[0] = (float)(total / (double)N);
  } else {
    em_f64(out)[0] = cross_entropy_forward_ref(em_f64(x), target, N, K, label_smoothing);
  }
  if (em_needs_grad(1, &logits)) {
    em_node *nd = em_record("cross_entropy", cross_entropy_backward, out, 1, &logits);
    nd->saved[0] = x;
    nd->saved[1] = target;
    nd->f[0] = label_smoothing;
    nd->ctx = stats;
  }
  return EM_OP_END(out);
}

/* ---- mse ------------------------------------------------------------------------------ */

typedef struct {
  const float *a, *b; /* (numel) */
  float *ga, *gb;     /* (numel), either may be NULL */
  double *part;       /* (MSE_PARTS) */
  int64_t n;
  float scale;        /* 2 * g / n */
  bool fresh_a, fresh_b;
} mse_job;

static void part_range(int64_t n, int64_t p, int64_t *b, int64_t *e) {
  *b = n * p / MSE_PARTS;
  *e = n * (p + 1) / MSE_PARTS;
}

static void mse_forward_f32(void *ctx, int64_t begin, int64_t end) {
  const mse_job *j = ctx;
  for (int64_t p = begin; p < end; p++) {
    int64_t b, e;
    part_range(j->n, p, &b, &e);
    double lane[8] = {0};
    int64_t k = b;
    for (; k + 8 <= e; k += 8)
      for (int q = 0; q < 8; q++) {
        float d = j->a[k + q] - j->b[k + q];
        lane[q] += (double)(d * d);
      }
    double s = 0;
    for (; k < e; k++) {
      float d = j->a[k] - j->b[k];
      s += (double)(d * d);
    }
    for (int q = 0; q < 8; q++) s += lane[q];
    j->part[p] = s;
  }
}

static void mse_backward_f32(void *ctx, int64_t begin, int64_t end) {
  const mse_job *j = ctx;
  for (int64_t p = begin; p < end; p++) {
    int64_t b, e;
    part_range(j->n, p, &b, &e);
    if (j->ga) {
      float *g = j->ga;
      if (j->fresh_a) for (int64_t k = b; k < e; k++) g[k] = j->scale * (j->a[k] - j->b[k]);
      else for (int64_t k = b; k < e; k++) g[k] += j->scale * (j->a[k] - j->b[k]);
    }
    if (j->gb) {
      float *g = j->gb;
      if (j->fresh_b) for (int64_t k = b; k < e; k++) g[k] = j->scale * (j->b[k] - j->a[k]);
      else for (int64_t k = b; k < e; k++) g[k] += j->scale * (j->b[k] - j->a[k]);
    }
  }
}

static void run_parts(int64_t n, em_range_fn fn, void *ctx) {
  if (n >= PARALLEL_MIN) em_parallel_for(MSE_PARTS, 1, fn, ctx);
  else fn(ctx, 0, MSE_PARTS);
}

static void mse_backward(em_node *n) {
  em_tensor *a = n->saved[0], *b = n->saved[1]; /* contiguous, same shape */
  int64_t numel = em_tensor_numel(a);
  double scale = 2.0 * em_tensor_item(n->out->grad) / (double)numel;
  bool fresh_a = false, fresh_b = false;
  em_tensor *ga = em_grad_acquire(n->in[0], &fresh_a);
  em_tensor *gb = em_grad_acquire(n->in[1], &fresh_b);
  if (a->dtype == EM_DTYPE_F32) {
    mse_job j = {.a = em_f32(a), .b = em_f32(b), .ga = ga ? em_f32(ga) : NULL,
                 .gb = gb ? em_f32(gb) : NULL, .n = numel, .scale = (float)scale,
                 .fresh_a = fresh_a, .fresh_b = fresh_b};
    run_parts(numel, mse_backward_f32, &j);
    return;
  }
  const double *av = em_f64(a), *bv = em_f64(b);
  for (int64_t k = 0; k < numel; k++) {
    double v = scale * (av[k] - bv[k]);
    if (ga) em_f64(ga)[k] = fresh_a ? v : em_f64(ga)[k] + v;
    if (gb) em_f64(gb)[k] = fresh_b ? -v : em_f64(gb)[k] - v;
  }
}

em_tensor *em_mse_loss(em_tensor *a, em_tensor *b) {
  if (EM_ON_DEVICE(a, b)) return em_dev_mse_loss(a, b);
  EM_ASSERT(EM_IS_FLOAT(a) && a->dtype == b->dtype && em_tensor_same_shape(a, b));
  EM_OP_BEGIN("mse_loss", 2, a, b);
  int64_t numel = em_tensor_numel(a);
  EM_ASSERT(numel > 0);
  em_tensor *ac = em_contiguous_nograd(a), *bc = em_contiguous_nograd(b);
  em_tensor *out = em_empty(a->dtype, 0, NULL);
  if (a->dtype == EM_DTYPE_F32) {
    double part[MSE_PARTS];
    mse_job j = {.a = em_f32(ac), .b = em_f32(bc), .part = part, .n = numel};
    run_parts(numel, mse_forward_f32, &j);
    double s = 0;
    for (int p = 0; p < MSE_PARTS; p++) s += part[p];
    em_f32(out)[0] = (float)(s / (double)numel);
  } else {
    const double *av = em_f64(ac), *bv = em_f64(bc);
    double s = 0;
    for (int64_t k = 0; k < numel; k++) s += (av[k] - bv[k]) * (av[k] - bv[k]);
    em_f64(out)[0] = s / (double)numel;
  }
  em_tensor *ins[2] = {a, b};
  if (em_needs_grad(2, ins)) {
    em_node *nd = em_record("mse_loss", mse_backward, out, 2, ins);
    nd->saved[0] = ac;
    nd->saved[1] = bc;
  }
  return EM_OP_END(out);
}
