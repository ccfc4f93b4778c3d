/* cpu-norm.c: the CPU backend's batch norm and layer norm kernels (the
 * batch_norm_* and layer_norm_* entries of em-backend.h), f32 and f64.
 * The op front-end is norm.c.
 *
 * Batch norm sees x as (N, C, S), S the product of the dims after the
 * channel dim (1 for (N, C) input). In training it normalises with the
 * batch mean and biased variance over N and S, and updates the running
 * stats in place with the unbiased variance, as PyTorch does:
 *   running = (1 - momentum) * running + momentum * batch_stat.
 * In eval it normalises with the running stats. With xhat the normalised
 * input, a = weight * invstd, M = N * S and per-channel sums
 * gb = sum gy, gw = sum gy * xhat, backward is
 *   train: gx = a * (gy - gb / M - xhat * gw / M)
 *   eval:  gx = a * gy
 * Layer norm sees x as (R, D), D the product of the last nd dims; with
 * gxh = gy * weight:
 *   gx = invstd * (gxh - mean_d(gxh) - xhat * mean_d(gxh * xhat)).
 *
 * The statistics (mean, invstd) are kept in double: the front-end gives
 * the CPU F64 tensors for them (its backend takes f64), and weight, bias
 * and running stats (any float dtype, any stride) are read as doubles.
 * f32 runs the fast kernels: one work item per block of channels (or
 * rows) does statistics and normalisation, or both backward passes,
 * while the data is in cache; sums run in 16 float lanes (flushed into
 * doubles) so that they vectorise, and shift by a sample value so that
 * the one-pass variance does not cancel. Layer norm's row kernels are
 * compiled for x86-64-v4, v3 and the baseline (EM_CPU_CLONES; the
 * baseline's SSE2 took 6 cycles an element of backward): the sums' fixed
 * lanes and no FMA contraction give every clone the same bits. Its
 * backward is one pass: each fixed block of rows writes its gx rows and
 * its own sums for gw and gb, added in block order after. f64 runs the plain loop
 * reference that the tests hold the fast kernels to. */
#include "ops-private.h"
#include "em-cpu.h"
#include "em-pool.h"

#include <math.h>
#include <string.h>

#define PARALLEL_MIN (1 << 16)   /* elements before threads are worth waking */
#define PARALLEL_GRAIN (1 << 15) /* elements per thread chunk, at least */
#define LANE_FLUSH 4096          /* float lanes are flushed to doubles this often */

/* Element c of a 1-D float tensor of any stride, as a double. */
static double load_1d(const em_tensor *t, int64_t c) {
  int64_t at = c * t->stride[0];
  return t->dtype == EM_DTYPE_F32 ? (double)em_f32(t)[at] : em_f64(t)[at];
}

static void store_1d(em_tensor *t, int64_t c, double v) {
  int64_t at = c * t->stride[0];
  if (t->dtype == EM_DTYPE_F32) em_f32(t)[at] = (float)v;
  else em_f64(t)[at] = v;
}

/* A 1-D float tensor's values as doubles in scope memory (NULL for NULL). */
static double *doubles_of(const em_tensor *t, int64_t C) {
  if (!t) return NULL;
  EM_ASSERT(t->ndim == 1 && t->shape[0] == C);
  double *v = em_scratch(sizeof(double) * (size_t)C);
  for (int64_t c = 0; c < C; c++) v[c] = load_1d(t, c);
  return v;
}

/* ---- vectorised sums (f32) ------------------------------------------------------ */

/* s1 += sum (x - c), s2 += sum (x - c)^2 over x[0..n). */
static inline void sums_shifted_f32(const float *x, int64_t n, float c, double *s1, double *s2) {
  for (int64_t b = 0; b < n; b += LANE_FLUSH) {
    int64_t e = b + LANE_FLUSH < n ? b + LANE_FLUSH : n, k = b;
    float l1[16] = {0}, l2[16] = {0};
    for (; k + 16 <= e; k += 16)
      for (int q = 0; q < 16; q++) {
        float d = x[k + q] - c;
        l1[q] += d;
        l2[q] += d * d;
      }
    for (; k < e; k++) {
      float d = x[k] - c;
      l1[0] += d;
      l2[0] += d * d;
    }
    double a1 = 0, a2 = 0;
    for (int q = 0; q < 16; q++) {
      a1 += l1[q];
      a2 += l2[q];
    }
    *s1 += a1;
    *s2 += a2;
  }
}

/* sg += sum g * w, sgx += sum g * w * (x - c) over [0..n); w may be NULL (1). */
static inline void sums_grad_f32(const float *g, const float *w, const float *x, int64_t n, float c,
                          double *sg, double *sgx) {
  for (int64_t b = 0; b < n; b += LANE_FLUSH) {
    int64_t e = b + LANE_FLUSH < n ? b + LANE_FLUSH : n, k = b;
    float l1[16] = {0}, l2[16] = {0};
    if (w) {
      for (; k + 16 <= e; k += 16)
        for (int q = 0; q < 16; q++) {
          float gw = g[k + q] * w[k + q];
          l1[q] += gw;
          l2[q] += gw * (x[k + q] - c);
        }
    } else {
      for (; k + 16 <= e; k += 16)
        for (int q = 0; q < 16; q++) {
          l1[q] += g[k + q];
          l2[q] += g[k + q] * (x[k + q] - c);
        }
    }
    for (; k < e; k++) {
      float gw = w ? g[k] * w[k] : g[k];
      l1[0] += gw;
      l2[0] += gw * (x[k] - c);
    }
    double a1 = 0, a2 = 0;
    for (int q = 0; q < 16; q++) {
      a1 += l1[q];
      a2 += l2[q];
    }
    *sg += a1;
    *sgx += a2;
  }
}

/* ---- batch norm: plain loop reference (f64) ------------------------------------------ */

typedef struct {
  int64_t N, C, S;
  const double *w, *b;  /* (C) or NULL */
  double *mean, *invstd; /* (C) */
  double *var;          /* (C) biased batch variance (train) */
  double eps;
  bool training;
} bn_geom;

static void batch_norm_forward_ref(const double *x, double *y, const bn_geom *p) {
  int64_t N = p->N, C = p->C, S = p->S;
  double M = (double)(N * S);
  for (int64_t c = 0; c < C; c++) {
    if (p->training) {
      double s = 0, v = 0;
      for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < S; k++) s += x[(n * C + c) * S + k];
      double m = s / M;
      for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < S; k++) v += (x[(n * C + c) * S + k] - m) * (x[(n * C + c) * S + k] - m);
      p->mean[c] = m;
      p->var[c] = v / M;
      p->invstd[c] = 1.0 / sqrt(v / M + p->eps);
    }
    double w = p->w ? p->w[c] : 1.0, b = p->b ? p->b[c] : 0.0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) {
        int64_t at = (n * C + c) * S + k;
        y[at] = (x[at] - p->mean[c]) * p->invstd[c] * w + b;
      }
  }
}

/* gw, gb (C) receive the weight and bias gradients; gx may be NULL. */
static void batch_norm_backward_ref(const double *x, const double *gy, double *gx, bool fresh,
                                    double *gw, double *gb, const bn_geom *p) {
  int64_t N = p->N, C = p->C, S = p->S;
  double M = (double)(N * S);
  for (int64_t c = 0; c < C; c++) {
    double sg = 0, sgxh = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) {
        int64_t at = (n * C + c) * S + k;
        sg += gy[at];
        sgxh += gy[at] * (x[at] - p->mean[c]) * p->invstd[c];
      }
    gw[c] = sgxh;
    gb[c] = sg;
    if (!gx) continue;
    double a = (p->w ? p->w[c] : 1.0) * p->invstd[c];
    for (int64_t n = 0; n < N; n++)
      for (int64_t k = 0; k < S; k++) {
        int64_t at = (n * C + c) * S + k;
        double xhat = (x[at] - p->mean[c]) * p->invstd[c];
        double v = p->training ? a * (gy[at] - sg / M - xhat * sgxh / M) : a * gy[at];
        gx[at] = fresh ? v : gx[at] + v;
      }
  }
}

/* ---- batch norm: fast kernels (f32) ----------------------------------------------------- */

typedef struct {
  bn_geom p;
  const float *x, *gy; /* (N, C, S) */
  float *y, *gx;       /* (N, C, S); gx NULL when x needs no grad */
  float *k1, *k2, *k3; /* (C) scratch: per-channel coefficients */
  double *gw, *gb;     /* (C) backward sums */
  bool fresh;
} bn_job;

/* Work item: channels [c0, c1). Statistics (train), then y = x * k1 + k2. */
static void bn_forward_f32(void *ctx, int64_t c0, int64_t c1) {
  bn_job *j = ctx;
  bn_geom *p = &j->p;
  int64_t N = p->N, C = p->C, S = p->S;
  double M = (double)(N * S);
  const float *x = j->x;
  float *y = j->y;
  if (p->training) {
    for (int64_t c = c0; c < c1; c++) {
      p->mean[c] = 0; /* sums of (x - shift) until finalised */
      p->var[c] = 0;
    }
    if (S == 1) {
      for (int64_t n = 0; n < N; n++)
        for (int64_t c = c0; c < c1; c++) {
          double d = (double)(x[n * C + c] - x[c]);
          p->mean[c] += d;
          p->var[c] += d * d;
        }
    } else {
      for (int64_t c = c0; c < c1; c++)
        for (int64_t n = 0; n < N; n++)
          sums_shifted_f32(x + (n * C + c) * S, S, x[c * S], &p->mean[c], &p->var[c]);
    }
    for (int64_t c = c0; c < c1; c++) {
      double shift = S == 1 ? x[c] : x[c * S];
      double m1 = p->mean[c] / M, v = p->var[c] / M - m1 * m1;
      if (v < 0) v = 0;
      p->mean[c] = shift + m1;
      p->var[c] = v;
      p->invstd[c] = 1.0 / sqrt(v + p->eps);
    }
  }
  for (int64_t c = c0; c < c1; c++) {
    double a = (p->w ? p->w[c] : 1.0) * p->invstd[c];
    j->k1[c] = (float)a;
    j->k2[c] = (float)((p->b ? p->b[c] : 0.0) - p->mean[c] * a);
  }
  const float *k1 = j->k1, *k2 = j->k2;
  if (S == 1) {
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = c0; c < c1; c++) y[n * C + c] = x[n * C + c] * k1[c] + k2[c];
  } else {
    for (int64_t c = c0; c < c1; c++)
      for (int64_t n = 0; n < N; n++) {
        const float *xr = x + (n * C + c) * S; /* (S) */
        float *yr = y + (n * C + c) * S;
        float a = k1[c], b = k2[c];
        for (int64_t k = 0; k < S; k++) yr[k] = xr[k] * a + b;
      }
  }
}

/* Work item: channels [c0, c1). Sums, then gx = k1 * gy + k2 * x + k3. */
static void bn_backward_f32(void *ctx, int64_t c0, int64_t c1) {
  bn_job *j = ctx;
  const bn_geom *p = &j->p;
  int64_t N = p->N, C = p->C, S = p->S;
  double M = (double)(N * S);
  const float *x = j->x, *gy = j->gy;
  for (int64_t c = c0; c < c1; c++) j->gb[c] = j->gw[c] = 0;
  if (S == 1) {
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = c0; c < c1; c++) {
        double g = gy[n * C + c];
        j->gb[c] += g;
        j->gw[c] += g * ((double)x[n * C + c] - p->mean[c]);
      }
  } else {
    for (int64_t c = c0; c < c1; c++)
      for (int64_t n = 0; n < N; n++)
        sums_grad_f32(gy + (n * C + c) * S, NULL, x + (n * C + c) * S, S, (float)p->mean[c],
                      &j->gb[c], &j->gw[c]);
  }
  for (int64_t c = c0; c < c1; c++) {
    j->gw[c] *= p->invstd[c]; /* sum gy * xhat */
    double a = (p->w ? p->w[c] : 1.0) * p->invstd[c];
    double k2 = p->training ? -a * p->invstd[c] * j->gw[c] / M : 0.0;
    double k3 = p->training ? -a * j->gb[c] / M - k2 * p->mean[c] : 0.0;
    j->k1[c] = (float)a;
    j->k2[c] = (float)k2;
    j->k3[c] = (float)k3;
  }
  float *gx = j->gx;
  if (!gx) return;
  const float *k1 = j->k1, *k2 = j->k2, *k3 = j->k3;
  if (S == 1) {
    for (int64_t n = 0; n < N; n++) {
      const float *xr = x + n * C, *gr = gy + n * C; /* (C) */
      float *o = gx + n * C;
      if (j->fresh) for (int64_t c = c0; c < c1; c++) o[c] = k1[c] * gr[c] + k2[c] * xr[c] + k3[c];
      else for (int64_t c = c0; c < c1; c++) o[c] += k1[c] * gr[c] + k2[c] * xr[c] + k3[c];
    }
  } else {
    for (int64_t c = c0; c < c1; c++)
      for (int64_t n = 0; n < N; n++) {
        const float *xr = x + (n * C + c) * S, *gr = gy + (n * C + c) * S; /* (S) */
        float *o = gx + (n * C + c) * S;
        float a = k1[c], b = k2[c], d = k3[c];
        if (j->fresh) for (int64_t k = 0; k < S; k++) o[k] = a * gr[k] + b * xr[k] + d;
        else for (int64_t k = 0; k < S; k++) o[k] += a * gr[k] + b * xr[k] + d;
      }
  }
}

static void run_channels(const bn_geom *p, em_range_fn fn, void *ctx) {
  int64_t per_channel = p->N * p->S, numel = per_channel * p->C;
  if (numel >= PARALLEL_MIN && p->C > 1)
    em_parallel_for(p->C, PARALLEL_GRAIN / (per_channel ? per_channel : 1) + 1, fn, ctx);
  else fn(ctx, 0, p->C);
}

/* ---- layer norm: plain loop reference (f64) -------------------------------------------- */

typedef struct {
  int64_t R, D;
  double eps;
  double *mean, *invstd; /* (R) */
} ln_geom;

static void layer_norm_forward_ref(const double *x, const double *w, const double *b, double *y,
                                   const ln_geom *p) {
  for (int64_t r = 0; r < p->R; r++) {
    const double *xr = x + r * p->D; /* (D) */
    double s = 0, v = 0;
    for (int64_t d = 0; d < p->D; d++) s += xr[d];
    double m = s / (double)p->D;
    for (int64_t d = 0; d < p->D; d++) v += (xr[d] - m) * (xr[d] - m);
    p->mean[r] = m;
    p->invstd[r] = 1.0 / sqrt(v / (double)p->D + p->eps);
    for (int64_t d = 0; d < p->D; d++)
      y[r * p->D + d] = (xr[d] - m) * p->invstd[r] * (w ? w[d] : 1.0) + (b ? b[d] : 0.0);
  }
}

/* gx, gw, gb may each be NULL; gw, gb (D) are overwritten. */
static void layer_norm_backward_ref(const double *x, const double *w, const double *gy,
                                    double *gx, bool fresh, double *gw, double *gb,
                                    const ln_geom *p) {
  int64_t D = p->D;
  if (gw) memset(gw, 0, sizeof(double) * (size_t)D);
  if (gb) memset(gb, 0, sizeof(double) * (size_t)D);
  for (int64_t r = 0; r < p->R; r++) {
    double m = p->mean[r], is = p->invstd[r];
    double s1 = 0, s2 = 0;
    for (int64_t d = 0; d < D; d++) {
      double xhat = (x[r * D + d] - m) * is, g = gy[r * D + d];
      double gxh = g * (w ? w[d] : 1.0);
      s1 += gxh;
      s2 += gxh * xhat;
      if (gw) gw[d] += g * xhat;
      if (gb) gb[d] += g;
    }
    if (!gx) continue;
    for (int64_t d = 0; d < D; d++) {
      double xhat = (x[r * D + d] - m) * is;
      double gxh = gy[r * D + d] * (w ? w[d] : 1.0);
      double v = is * (gxh - s1 / (double)D - xhat * s2 / (double)D);
      gx[r * D + d] = fresh ? v : gx[r * D + d] + v;
    }
  }
}

/* ---- layer norm: fast kernels (f32) ---------------------------------------------------- */

typedef struct {
  ln_geom p;
  const float *x, *gy, *w, *b; /* (R, D), (R, D), (D), (D); w, b may be NULL */
  float *y, *gx;               /* (R, D); gx may be NULL (backward: w, b only) */
  double *cols;                /* backward: (blocks, 2, D) per-block sums, or NULL */
  int64_t block;               /* backward: rows per block */
} ln_job;

EM_CPU_CLONES static void ln_forward_f32(void *ctx, int64_t r0, int64_t r1) {
  const ln_job *j = ctx;
  int64_t D = j->p.D;
  for (int64_t r = r0; r < r1; r++) {
    const float *x = j->x + r * D; /* (D) */
    float *y = j->y + r * D;
    double s1 = 0, s2 = 0;
    sums_shifted_f32(x, D, x[0], &s1, &s2);
    double m1 = s1 / (double)D, v = s2 / (double)D - m1 * m1;
    if (v < 0) v = 0;
    double mean = x[0] + m1, is = 1.0 / sqrt(v + j->p.eps);
    j->p.mean[r] = mean;
    j->p.invstd[r] = is;
    float a = (float)is, c = (float)(-mean * is);
    const float *w = j->w, *b = j->b;
    if (w && b) for (int64_t d = 0; d < D; d++) y[d] = (x[d] * a + c) * w[d] + b[d];
    else if (w) for (int64_t d = 0; d < D; d++) y[d] = (x[d] * a + c) * w[d];
    else if (b) for (int64_t d = 0; d < D; d++) y[d] = x[d] * a + c + b[d];
    else for (int64_t d = 0; d < D; d++) y[d] = x[d] * a + c;
  }
}

/* Row r's gx = invstd * w * gy + k2 * x + k3 (written), and its terms of
 * the w, b sums added into sw, sb (D; NULL: not wanted). */
static inline void ln_backward_row_f32(const ln_job *j, int64_t r, double *sw, double *sb) {
  int64_t D = j->p.D;
  const float *x = j->x + r * D, *gy = j->gy + r * D; /* (D) */
  double mean = j->p.mean[r], is = j->p.invstd[r];
  if (sw) {
    float m = (float)mean, isf = (float)is;
    for (int64_t d = 0; d < D; d++) {
      sw[d] += (double)(gy[d] * ((x[d] - m) * isf));
      sb[d] += (double)gy[d];
    }
  }
  if (!j->gx) return;
  float *gx = j->gx + r * D;
  double s1 = 0, s2 = 0; /* sum gxh, sum gxh * (x - mean) */
  sums_grad_f32(gy, j->w, x, D, (float)mean, &s1, &s2);
  double k2d = -is * is * is * s2 / (double)D;
  float a = (float)is, k2 = (float)k2d, k3 = (float)(-is * s1 / (double)D - k2d * mean);
  const float *w = j->w;
  if (w) for (int64_t d = 0; d < D; d++) gx[d] = a * w[d] * gy[d] + k2 * x[d] + k3;
  else for (int64_t d = 0; d < D; d++) gx[d] = a * gy[d] + k2 * x[d] + k3;
}

/* Blocks [b0, b1) of rows: their gx rows, and each block's w and b sums
 * (rows in order) in its slot of j->cols. One pass over x and gy, the
 * row in cache for both; the blocks are a fixed split of the rows (not
 * of the threads), so the numbers do not depend on the thread count. */
EM_CPU_CLONES static void ln_backward_blocks_f32(void *ctx, int64_t b0, int64_t b1) {
  const ln_job *j = ctx;
  int64_t D = j->p.D;
  for (int64_t b = b0; b < b1; b++) {
    double *sw = j->cols ? j->cols + 2 * b * D : NULL, *sb = sw ? sw + D : NULL;
    if (sw) memset(sw, 0, sizeof(double) * 2 * (size_t)D);
    int64_t r1 = (b + 1) * j->block < j->p.R ? (b + 1) * j->block : j->p.R;
    for (int64_t r = b * j->block; r < r1; r++) ln_backward_row_f32(j, r, sw, sb);
  }
}

/* ---- the kernel entries ------------------------------------------------------------ */

/* x (N, C, S) contiguous: the geometry, with w (C) as doubles. */
static bn_geom bn_geom_of(const em_tensor *x, const em_tensor *w, bool training) {
  EM_ASSERT(EM_IS_FLOAT(x) && x->ndim >= 2 && em_tensor_is_contiguous(x));
  bn_geom p = {.N = x->shape[0], .C = x->shape[1], .S = 1, .training = training};
  for (int d = 2; d < x->ndim; d++) p.S *= x->shape[d];
  p.w = doubles_of(w, p.C);
  return p;
}

em_status em_cpu_batch_norm_forward(bool training, em_tensor *y, em_tensor *save_mean,
                                    em_tensor *save_invstd, const em_tensor *x, const em_tensor *w,
                                    const em_tensor *b, em_tensor *running_mean,
                                    em_tensor *running_var, double momentum, double eps) {
  EM_ASSERT(em_tensor_is_contiguous(y) && y->dtype == x->dtype);
  bn_geom p = bn_geom_of(x, w, training);
  int64_t C = p.C;
  p.eps = eps;
  p.b = doubles_of(b, C);
  p.mean = em_scratch(sizeof(double) * 3 * (size_t)C);
  p.invstd = p.mean + C;
  p.var = p.invstd + C;
  if (!training) {
    EM_ASSERT(running_mean && running_var && "batch norm in eval needs running statistics");
    for (int64_t c = 0; c < C; c++) {
      p.mean[c] = load_1d(running_mean, c);
      p.invstd[c] = 1.0 / sqrt(load_1d(running_var, c) + eps);
    }
  }
  if (x->dtype == EM_DTYPE_F32) {
    bn_job j = {.p = p, .x = em_f32(x), .y = em_f32(y)};
    j.k1 = em_scratch(sizeof(float) * 2 * (size_t)C);
    j.k2 = j.k1 + C;
    run_channels(&p, bn_forward_f32, &j);
  } else {
    batch_norm_forward_ref(em_f64(x), em_f64(y), &p);
  }
  if (training) {
    double M = (double)(p.N * p.S);
    for (int64_t c = 0; c < C; c++) {
      if (running_mean)
        store_1d(running_mean, c, (1 - momentum) * load_1d(running_mean, c) + momentum * p.mean[c]);
      if (running_var)
        store_1d(running_var, c,
                 (1 - momentum) * load_1d(running_var, c) + momentum * p.var[c] * M / (M - 1));
      if (save_mean) store_1d(save_mean, c, p.mean[c]);
      if (save_invstd) store_1d(save_invstd, c, p.invstd[c]);
    }
  }
  return EM_OK;
}

/* Backward of either mode with p's statistics: gx (may be NULL) written,
 * gw, gb (may be NULL) written from the per-channel sums. */
static em_status bn_backward(const bn_geom *p, em_tensor *gx, em_tensor *gw, em_tensor *gb,
                             const em_tensor *g, const em_tensor *x) {
  EM_ASSERT(em_tensor_is_contiguous(g) && (!gx || em_tensor_is_contiguous(gx)));
  double *sw = em_scratch(sizeof(double) * (size_t)p->C);
  double *sb = em_scratch(sizeof(double) * (size_t)p->C);
  if (x->dtype == EM_DTYPE_F32) {
    bn_job j = {.p = *p, .x = em_f32(x), .gy = em_f32(g), .gx = gx ? em_f32(gx) : NULL,
                .gw = sw, .gb = sb, .fresh = true};
    j.k1 = em_scratch(sizeof(float) * 3 * (size_t)p->C);
    j.k2 = j.k1 + p->C;
    j.k3 = j.k2 + p->C;
    run_channels(p, bn_backward_f32, &j);
  } else {
    batch_norm_backward_ref(em_f64(x), em_f64(g), gx ? em_f64(gx) : NULL, true, sw, sb, p);
  }
  for (int64_t c = 0; c < p->C; c++) {
    if (gw) store_1d(gw, c, sw[c]);
    if (gb) store_1d(gb, c, sb[c]);
  }
  return EM_OK;
}

em_status em_cpu_batch_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb,
                                     const em_tensor *g, const em_tensor *x, const em_tensor *w,
                                     const em_tensor *save_mean, const em_tensor *save_invstd) {
  bn_geom p = bn_geom_of(x, w, true);
  p.mean = doubles_of(save_mean, p.C);
  p.invstd = doubles_of(save_invstd, p.C);
  return bn_backward(&p, gx, gw, gb, g, x);
}

em_status em_cpu_batch_norm_backward_eval(em_tensor *gx, em_tensor *gw, em_tensor *gb,
                                          const em_tensor *g, const em_tensor *x,
                                          const em_tensor *w, const em_tensor *running_mean,
                                          const em_tensor *running_var, double eps) {
  bn_geom p = bn_geom_of(x, w, false);
  p.eps = eps;
  p.mean = doubles_of(running_mean, p.C);
  p.invstd = doubles_of(running_var, p.C);
  for (int64_t c = 0; c < p.C; c++) p.invstd[c] = 1.0 / sqrt(p.invstd[c] + eps);
  return bn_backward(&p, gx, gw, gb, g, x);
}

em_status em_cpu_layer_norm_forward(em_tensor *y, em_tensor *mean, em_tensor *rstd,
                                    const em_tensor *x, const em_tensor *w, const em_tensor *b,
                                    int64_t rows, int64_t cols, double eps) {
  EM_ASSERT(EM_IS_FLOAT(x) && y->dtype == x->dtype && em_tensor_is_contiguous(x) &&
            em_tensor_is_contiguous(y) && (!w || em_tensor_is_contiguous(w)) &&
            (!b || em_tensor_is_contiguous(b)) && cols > 0);
  ln_geom p = {.R = rows, .D = cols, .eps = eps};
  p.mean = em_scratch(sizeof(double) * 2 * (size_t)(p.R ? p.R : 1));
  p.invstd = p.mean + p.R;
  if (x->dtype == EM_DTYPE_F32) {
    ln_job j = {.p = p, .x = em_f32(x), .w = w ? em_f32(w) : NULL, .b = b ? em_f32(b) : NULL,
                .y = em_f32(y)};
    if (p.R * p.D >= PARALLEL_MIN) em_parallel_for(p.R, PARALLEL_GRAIN / p.D + 1, ln_forward_f32, &j);
    else ln_forward_f32(&j, 0, p.R);
  } else {
    layer_norm_forward_ref(em_f64(x), w ? em_f64(w) : NULL, b ? em_f64(b) : NULL, em_f64(y), &p);
  }
  for (int64_t r = 0; r < rows; r++) {
    if (mean) store_1d(mean, r, p.mean[r]);
    if (rstd) store_1d(rstd, r, p.invstd[r]);
  }
  return EM_OK;
}

em_status em_cpu_layer_norm_backward(em_tensor *gx, em_tensor *gw, em_tensor *gb,
                                     const em_tensor *g, const em_tensor *x, const em_tensor *w,
                                     const em_tensor *mean, const em_tensor *rstd, int64_t rows,
                                     int64_t cols) {
  EM_ASSERT(em_tensor_is_contiguous(x) && em_tensor_is_contiguous(g) &&
            (!w || em_tensor_is_contiguous(w)) && (!gx || em_tensor_is_contiguous(gx)) &&
            (!gw || em_tensor_is_contiguous(gw)) && (!gb || em_tensor_is_contiguous(gb)));
  ln_geom p = {.R = rows, .D = cols};
  p.mean = doubles_of(mean, rows);
  p.invstd = doubles_of(rstd, rows);
  bool need_w = gw != NULL, need_b = gb != NULL;
  double *sw = em_scratch(sizeof(double) * 2 * (size_t)p.D), *sb = sw + p.D;
  if (x->dtype == EM_DTYPE_F32) {
    /* blocks of at least 32 rows, at most 256 of them (their sums: 2 D
     * doubles each), added in block order */
    ln_job j = {.p = p, .x = em_f32(x), .gy = em_f32(g), .w = w ? em_f32(w) : NULL,
                .gx = gx ? em_f32(gx) : NULL, .block = p.R > 32 * 256 ? (p.R + 255) / 256 : 32};
    int64_t blocks = (p.R + j.block - 1) / j.block;
    if (need_w || need_b) j.cols = em_scratch(sizeof(double) * 2 * (size_t)(blocks * p.D));
    if (p.R * p.D >= PARALLEL_MIN)
      em_parallel_for(blocks, PARALLEL_GRAIN / (j.block * p.D) + 1, ln_backward_blocks_f32, &j);
    else
      ln_backward_blocks_f32(&j, 0, blocks);
    memset(sw, 0, sizeof(double) * 2 * (size_t)p.D);
    for (int64_t b = 0; j.cols && b < blocks; b++)
      for (int64_t d = 0; d < 2 * p.D; d++) sw[d] += j.cols[2 * b * p.D + d];
    if (j.cols) em_scratch_done(j.cols);
  } else {
    layer_norm_backward_ref(em_f64(x), w ? em_f64(w) : NULL, em_f64(g), gx ? em_f64(gx) : NULL,
                            true, need_w ? sw : NULL, need_b ? sb : NULL, &p);
  }
  for (int k = 0; k < 2; k++) {
    em_tensor *t = k == 0 ? gw : gb;
    const double *src = k == 0 ? sw : sb;
    if (!t) continue;
    for (int64_t d = 0; d < p.D; d++) {
      if (t->dtype == EM_DTYPE_F32) em_f32(t)[d] = (float)src[d];
      else em_f64(t)[d] = src[d];
    }
  }
  return EM_OK;
}
