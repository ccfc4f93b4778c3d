/* cpu-softmax.c: the CPU backend's softmax kernels (the softmax_forward
 * and softmax_backward entries of em-backend.h), softmax and log_softmax
 * along any dim, f32 and f64. The op front-end is softmax.c.
 *
 * The input is seen as (outer, K, inner) with K the size of `dim`. Both
 * subtract the maximum before exponentiating, so large logits do not
 * overflow. Backward uses the saved output y:
 *   softmax:     gx = y * (gy - sum_k gy * y)
 *   log_softmax: gx = gy - exp(y) * sum_k gy
 *
 * f32 runs the fast kernels, built on an exp that vectorises: along the
 * last dim, long rows one at a time and short rows (the (N, K) logits of
 * a classifier) in blocks that share one shift, so that their
 * exponentials run as one flat loop; along an inner dim, blocks of up to
 * 64 inner positions whose loops over the block vectorise; threads for
 * big tensors. f64 runs the plain loop reference, which the tests hold
 * the fast kernels to. */
#include "ops-private.h"
#include "em-pool.h"

#include <math.h>

#define BLOCK 64                  /* inner positions per fast-path work item */
#define PARALLEL_MIN (1 << 16)    /* elements before threads are worth waking */
#define PARALLEL_GRAIN (1 << 15)  /* elements per thread chunk, at least */
#define ROW_BLOCK 1024            /* values per block of short rows */
#define MIN_SHARED_SUM 1e-26f     /* ~exp(-60): far above f32's smallest normal */

typedef struct {
  int64_t outer, K, inner;
} geometry;

static geometry geometry_of(const em_tensor *x, int dim) {
  geometry g = {1, 1, 1};
  for (int d = 0; d < dim; d++) g.outer *= x->shape[d];
  if (x->ndim > 0) g.K = x->shape[dim];
  for (int d = dim + 1; d < x->ndim; d++) g.inner *= x->shape[d];
  return g;
}

/* ---- plain loop reference (f64) --------------------------------------------- */

static void softmax_forward_ref(const double *x, double *y, geometry g, bool log_out) {
  for (int64_t o = 0; o < g.outer; o++)
    for (int64_t i = 0; i < g.inner; i++) {
      const double *xr = x + o * g.K * g.inner + i; /* (K) with stride inner */
      double *yr = y + o * g.K * g.inner + i;
      double m = -INFINITY;
      for (int64_t k = 0; k < g.K; k++) m = fmax(m, xr[k * g.inner]);
      double s = 0;
      for (int64_t k = 0; k < g.K; k++) s += exp(xr[k * g.inner] - m);
      for (int64_t k = 0; k < g.K; k++)
        yr[k * g.inner] = log_out ? (xr[k * g.inner] - m) - log(s) : exp(xr[k * g.inner] - m) / s;
    }
}

static void softmax_backward_ref(const double *y, const double *gy, double *gx,
                                 geometry g, bool log_out) {
  for (int64_t o = 0; o < g.outer; o++)
    for (int64_t i = 0; i < g.inner; i++) {
      int64_t base = o * g.K * g.inner + i;
      double acc = 0;
      for (int64_t k = 0; k < g.K; k++) {
        int64_t at = base + k * g.inner;
        acc += log_out ? gy[at] : gy[at] * y[at];
      }
      for (int64_t k = 0; k < g.K; k++) {
        int64_t at = base + k * g.inner;
        double v = log_out ? gy[at] - exp(y[at]) * acc : y[at] * (gy[at] - acc);
        gx[at] = v;
      }
    }
}

/* ---- fast kernels (f32) --------------------------------------------------------- */

/* Dot product over [0, n) (n >= 1); 16 lanes, so that it vectorises once
 * n is long enough to pay (max and sum: em_lane_max_f32/em_lane_sum_f32). */
static float dot_f32(const float *a, const float *b, int64_t n) {
  float s = 0;
  int64_t k = 0;
  if (n >= 64) {
    float lane[16] = {0};
    for (; k + 16 <= n; k += 16)
      for (int j = 0; j < 16; j++) lane[j] += a[k + j] * b[k + j];
    for (int j = 0; j < 16; j++) s += lane[j];
  }
  for (; k < n; k++) s += a[k] * b[k];
  return s;
}

typedef struct {
  const float *x, *gy; /* (outer, K, inner) */
  float *y, *gx;       /* (outer, K, inner) */
  geometry g;
  bool log_out;
} sm_job;

/* Row r of K contiguous values shifted by its own maximum. */
static void forward_row_f32(const sm_job *j, int64_t r) {
  int64_t K = j->g.K;
  const float *x = j->x + r * K; /* (K) */
  float *y = j->y + r * K;       /* (K) */
  float m = em_lane_max_f32(x, K);
  for (int64_t k = 0; k < K; k++) y[k] = em_expf(x[k] - m);
  float s = em_lane_sum_f32(y, K);
  if (j->log_out) { /* (x - m) is exact, so large logits keep their precision */
    float ls = logf(s);
    for (int64_t k = 0; k < K; k++) y[k] = (x[k] - m) - ls;
  } else {
    float inv = 1.0f / s;
    for (int64_t k = 0; k < K; k++) y[k] *= inv;
  }
}

/* Rows per forward work item (inner == 1): long rows one by one, short
 * rows in blocks of about ROW_BLOCK values shifted by the block's maximum
 * c, so that the exponentials run as one flat loop. Items, not threads,
 * fix the blocks, so the result does not depend on the thread count. */
static int64_t rows_per_item(int64_t K) { return K > ROW_BLOCK / 4 ? 1 : ROW_BLOCK / K; }

/* Items [begin, end) of rows_per_item rows. A row whose sum comes out
 * below MIN_SHARED_SUM lies so far below its block's shift that its terms
 * may underflow, and is redone with its own maximum (above that bound,
 * every term a row loses to underflow is below e^-27 of its sum). */
static void forward_rows_f32(void *ctx, int64_t begin, int64_t end) {
  const sm_job *j = ctx;
  int64_t K = j->g.K, rows = rows_per_item(K), R = j->g.outer;
  for (int64_t w = begin; w < end; w++) {
    int64_t r0 = w * rows, r1 = r0 + rows < R ? r0 + rows : R;
    if (rows == 1) {
      forward_row_f32(j, r0);
      continue;
    }
    int64_t n = (r1 - r0) * K;
    const float *x = j->x + r0 * K; /* (r1 - r0, K) */
    float *y = j->y + r0 * K;
    float c = em_lane_max_f32(x, n);
    for (int64_t k = 0; k < n; k++) y[k] = em_expf(x[k] - c);
    for (int64_t r = r0; r < r1; r++) {
      const float *xr = j->x + r * K; /* (K) */
      float *yr = j->y + r * K;
      float s = em_lane_sum_f32(yr, K);
      if (!(s >= MIN_SHARED_SUM)) forward_row_f32(j, r);
      else if (j->log_out) {
        float ls = logf(s);
        for (int64_t k = 0; k < K; k++) yr[k] = (xr[k] - c) - ls;
      } else {
        float inv = 1.0f / s;
        for (int64_t k = 0; k < K; k++) yr[k] *= inv;
      }
    }
  }
}

static void backward_rows_f32(void *ctx, int64_t begin, int64_t end) {
  const sm_job *j = ctx;
  int64_t K = j->g.K;
  for (int64_t r = begin; r < end; r++) {
    const float *y = j->y + r * K, *gy = j->gy + r * K; /* (K) */
    float *gx = j->gx + r * K;                          /* (K) */
    if (j->log_out) {
      float s = em_lane_sum_f32(gy, K);
      for (int64_t k = 0; k < K; k++) gx[k] = gy[k] - em_expf(y[k]) * s;
    } else {
      float d = dot_f32(gy, y, K);
      for (int64_t k = 0; k < K; k++) gx[k] = y[k] * (gy[k] - d);
    }
  }
}

/* Work item w covers inner positions [i0, i0 + B) of one outer index;
 * loops over the block are contiguous and vectorise. */
static void block_of(const sm_job *j, int64_t w, int64_t *base, int64_t *B) {
  int64_t nblk = (j->g.inner + BLOCK - 1) / BLOCK;
  int64_t o = w / nblk, i0 = (w % nblk) * BLOCK;
  *base = o * j->g.K * j->g.inner + i0;
  *B = j->g.inner - i0 < BLOCK ? j->g.inner - i0 : BLOCK;
}

static void forward_blocks_f32(void *ctx, int64_t begin, int64_t end) {
  const sm_job *j = ctx;
  int64_t K = j->g.K, inner = j->g.inner;
  for (int64_t w = begin; w < end; w++) {
    int64_t base, B;
    block_of(j, w, &base, &B);
    const float *x = j->x + base; /* (K, B) with row stride inner */
    float *y = j->y + base;
    float m[BLOCK], s[BLOCK];
    for (int64_t i = 0; i < B; i++) m[i] = x[i];
    for (int64_t k = 1; k < K; k++)
      for (int64_t i = 0; i < B; i++) m[i] = x[k * inner + i] > m[i] ? x[k * inner + i] : m[i];
    for (int64_t i = 0; i < B; i++) s[i] = 0;
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < B; i++) {
        float v = em_expf(x[k * inner + i] - m[i]);
        y[k * inner + i] = v;
        s[i] += v;
      }
    if (j->log_out) {
      for (int64_t i = 0; i < B; i++) s[i] = logf(s[i]);
      for (int64_t k = 0; k < K; k++)
        for (int64_t i = 0; i < B; i++) y[k * inner + i] = (x[k * inner + i] - m[i]) - s[i];
    } else {
      for (int64_t i = 0; i < B; i++) s[i] = 1.0f / s[i];
      for (int64_t k = 0; k < K; k++)
        for (int64_t i = 0; i < B; i++) y[k * inner + i] *= s[i];
    }
  }
}

static void backward_blocks_f32(void *ctx, int64_t begin, int64_t end) {
  const sm_job *j = ctx;
  int64_t K = j->g.K, inner = j->g.inner;
  for (int64_t w = begin; w < end; w++) {
    int64_t base, B;
    block_of(j, w, &base, &B);
    const float *y = j->y + base, *gy = j->gy + base; /* (K, B), row stride inner */
    float *gx = j->gx + base;
    float s[BLOCK];
    for (int64_t i = 0; i < B; i++) s[i] = 0;
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < B; i++)
        s[i] += j->log_out ? gy[k * inner + i] : gy[k * inner + i] * y[k * inner + i];
    for (int64_t k = 0; k < K; k++)
      for (int64_t i = 0; i < B; i++) {
        int64_t at = k * inner + i;
        float v = j->log_out ? gy[at] - em_expf(y[at]) * s[i] : y[at] * (gy[at] - s[i]);
        gx[at] = v;
      }
  }
}

/* Runs a row or block kernel over the whole tensor, on threads when big;
 * a row kernel's items hold rows_per_row_item rows. */
static void run_f32(sm_job *j, em_range_fn rows, em_range_fn blocks, int64_t rows_per_row_item) {
  int64_t numel = j->g.outer * j->g.K * j->g.inner;
  bool by_rows = j->g.inner == 1;
  int64_t items = by_rows ? (j->g.outer + rows_per_row_item - 1) / rows_per_row_item
                          : j->g.outer * ((j->g.inner + BLOCK - 1) / BLOCK);
  int64_t per_item = items ? numel / items : 1;
  if (per_item < 1) per_item = 1;
  em_range_fn fn = by_rows ? rows : blocks;
  if (numel >= PARALLEL_MIN) em_parallel_for(items, PARALLEL_GRAIN / per_item + 1, fn, j);
  else fn(j, 0, items);
}

/* ---- the kernel entries ------------------------------------------------------------ */

em_status em_cpu_softmax_forward(bool log_out, em_tensor *y, const em_tensor *x, int dim) {
  EM_ASSERT(EM_IS_FLOAT(x) && y->dtype == x->dtype && em_tensor_is_contiguous(x) &&
            em_tensor_is_contiguous(y) && dim >= 0 && (x->ndim == 0 || dim < x->ndim));
  geometry g = geometry_of(x, dim);
  if (em_tensor_numel(x) == 0) return EM_OK;
  if (x->dtype == EM_DTYPE_F32) {
    sm_job j = {.x = em_tensor_ptr(x), .y = em_tensor_ptr(y), .g = g, .log_out = log_out};
    run_f32(&j, forward_rows_f32, forward_blocks_f32, rows_per_item(g.K));
  } else {
    softmax_forward_ref(em_tensor_ptr(x), em_tensor_ptr(y), g, log_out);
  }
  return EM_OK;
}

em_status em_cpu_softmax_backward(bool log_out, em_tensor *gx, const em_tensor *g,
                                  const em_tensor *y, int dim) {
  EM_ASSERT(EM_IS_FLOAT(y) && gx->dtype == y->dtype && g->dtype == y->dtype);
  EM_ASSERT(em_tensor_is_contiguous(gx) && em_tensor_is_contiguous(g) &&
            em_tensor_is_contiguous(y));
  geometry geo = geometry_of(y, dim);
  if (em_tensor_numel(y) == 0) return EM_OK;
  if (y->dtype == EM_DTYPE_F32) {
    sm_job j = {.y = em_tensor_ptr(y), .gy = em_tensor_ptr(g), .gx = em_tensor_ptr(gx), .g = geo,
                .log_out = log_out};
    run_f32(&j, backward_rows_f32, backward_blocks_f32, 1);
  } else {
    softmax_backward_ref(em_tensor_ptr(y), em_tensor_ptr(g), em_tensor_ptr(gx), geo, log_out);
  }
  return EM_OK;
}
