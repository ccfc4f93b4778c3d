/* reduce.c: em_sum, em_mean (over a dim), em_sum_all, em_mean_all, em_max
 * (with positions) and em_argmax, with backward.
 *
 * A reduction over dim d sees a contiguous x as (O, R, I): O the product
 * of the dims before d, R the size of d, I the product of the dims after.
 * With I == 1 each output is the sum of R contiguous values (em_sum_f32:
 * float lanes flushed into a double, vectorised); with I > 1 each output
 * row of I values accumulates R input rows (vectorised along I). Work is
 * split over outputs (and blocks of I), so results do not depend on the
 * thread count. sum_all sums fixed blocks into doubles and adds the block
 * sums in order, so it is deterministic too. Strided inputs take the plain
 * per-output loop (double accumulator), the reference the tests hold the
 * fast path to.
 *
 * max keeps the first maximum (so backward goes to the first max, like
 * PyTorch) and propagates NaN (the first NaN wins). */
#include "ops-private.h"
#include "em-pool.h"

#define I_BLOCK 2048 /* inner positions per work item when I > 1 */

/* (O, R, I) of x around dim d. */
static void split_dims(const em_tensor *x, int d, int64_t *O, int64_t *R, int64_t *I) {
  *O = 1;
  *I = 1;
  for (int k = 0; k < d; k++) *O *= x->shape[k];
  for (int k = d + 1; k < x->ndim; k++) *I *= x->shape[k];
  *R = x->shape[d];
}

/* Byte offset of output element k (row-major over the dims other than d)
 * in a strided x. */
static int64_t outer_offset(const em_tensor *x, int d, int64_t k) {
  int64_t off = 0;
  for (int dd = x->ndim - 1; dd >= 0; dd--) {
    if (dd == d) continue;
    off += (k % x->shape[dd]) * x->stride[dd];
    k /= x->shape[dd];
  }
  return off;
}

/* ---- sum / mean over a dim ------------------------------------------------------------ */

typedef struct {
  const void *x; /* (O, R, I) contiguous */
  void *y;       /* (O, I) */
  int64_t O, R, I, nblk;
  double scale; /* 1, or 1/R for mean */
} sum_job;

#define SUM_CHUNK(NAME, T, HSUM)                                                 \
  static void NAME(void *ctx, int64_t begin, int64_t end) {                      \
    const sum_job *j = ctx;                                                      \
    const T *x = j->x;                                                           \
    T *y = j->y;                                                                 \
    const int64_t R = j->R, I = j->I;                                            \
    if (I == 1) {                                                                \
      for (int64_t o = begin; o < end; o++) y[o] = (T)(HSUM(x + o * R, R) * j->scale); \
      return;                                                                    \
    }                                                                            \
    for (int64_t job = begin; job < end; job++) {                                \
      int64_t o = job / j->nblk, i0 = job % j->nblk * I_BLOCK;                   \
      int64_t m = I - i0 < I_BLOCK ? I - i0 : I_BLOCK;                           \
      T *restrict yo = y + o * I + i0;                                           \
      const T *xo = x + o * R * I + i0;                                          \
      if (R == 0) {                                                              \
        for (int64_t i = 0; i < m; i++) yo[i] = 0;                               \
        continue;                                                                \
      }                                                                          \
      for (int64_t i = 0; i < m; i++) yo[i] = xo[i];                             \
      for (int64_t r = 1; r < R; r++) {                                          \
        const T *restrict xr = xo + r * I;                                       \
        for (int64_t i = 0; i < m; i++) yo[i] += xr[i];                          \
      }                                                                          \
      if (j->scale != 1.0) {                                                     \
        const T sc = (T)j->scale;                                                \
        for (int64_t i = 0; i < m; i++) yo[i] *= sc;                             \
      }                                                                          \
    }                                                                            \
  }
SUM_CHUNK(sum_chunk_f32, float, em_sum_f32)
SUM_CHUNK(sum_chunk_f64, double, em_sum_f64)

/* Plain loop reference: any strides, double accumulator. */
static void sum_reference(const em_tensor *x, int d, em_tensor *y, double scale) {
  int64_t O, R, I;
  split_dims(x, d, &O, &R, &I);
  for (int64_t k = 0; k < O * I; k++) {
    int64_t off = x->offset + outer_offset(x, d, k);
    double acc = 0;
    for (int64_t r = 0; r < R; r++) {
      int64_t e = off + r * x->stride[d];
      acc += x->dtype == EM_DTYPE_F32 ? ((const float *)x->data)[e] : ((const double *)x->data)[e];
    }
    if (y->dtype == EM_DTYPE_F32) em_f32(y)[k] = (float)(acc * scale);
    else em_f64(y)[k] = acc * scale;
  }
}

static void sum_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  int d = (int)n->i[0];
  double scale = n->f[0];
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (!gx) return;
  if (scale != 1.0) g = em_mul_scalar(g, scale);
  /* g seen with x's dims, stride 0 along d */
  int64_t shape[EM_MAX_DIMS], stride[EM_MAX_DIMS], s = 1;
  for (int k = x->ndim - 1; k >= 0; k--) {
    shape[k] = k == d ? 1 : x->shape[k];
    stride[k] = k == d ? 0 : s;
    s *= shape[k];
  }
  em_tensor *gv = em_view_raw(g, x->ndim, shape, stride, g->offset);
  if (fresh) em_copy_into(gx, gv);
  else em_add_into(gx, gv);
}

static em_tensor *sum_dim(em_tensor *x, int dim, bool keepdim, bool mean) {
  EM_ASSERT(EM_IS_FLOAT(x) && x->ndim > 0);
  EM_OP_BEGIN(mean ? "mean" : "sum", 1, x);
  int d = em_dim_norm(dim, x->ndim);
  int64_t shape[EM_MAX_DIMS], O, R, I;
  int nd = em_reduced_shape(x, d, keepdim, shape);
  split_dims(x, d, &O, &R, &I);
  em_tensor *y = em_empty(x->dtype, nd, shape);
  double scale = mean ? 1.0 / (double)R : 1.0;
  if (em_tensor_is_contiguous(x)) {
    sum_job j = {em_tensor_ptr(x), em_tensor_ptr(y), O, R, I, (I + I_BLOCK - 1) / I_BLOCK, scale};
    int64_t jobs = I == 1 ? O : O * j.nblk;
    int64_t per_job = (R > 0 ? R : 1) * (I == 1 ? 1 : (I < I_BLOCK ? I : I_BLOCK));
    em_range_fn fn = x->dtype == EM_DTYPE_F32 ? sum_chunk_f32 : sum_chunk_f64;
    if (O * R * I >= EM_PAR_MIN)
      em_parallel_for(jobs, (EM_PAR_GRAIN + per_job - 1) / per_job, fn, &j);
    else
      fn(&j, 0, jobs);
  } else {
    sum_reference(x, d, y, scale);
  }
  if (em_needs_grad(1, &x)) {
    em_node *nd_ = em_record(mean ? "mean" : "sum", sum_backward, y, 1, &x);
    nd_->i[0] = d;
    nd_->f[0] = scale;
  }
  return EM_OP_END(y);
}

em_tensor *em_sum(em_tensor *x, int dim, bool keepdim) {
  if (em_on_device(x)) return em_dev_sum(x, dim, keepdim);
  return sum_dim(x, dim, keepdim, false);
}
em_tensor *em_mean(em_tensor *x, int dim, bool keepdim) {
  if (em_on_device(x)) return em_dev_mean(x, dim, keepdim);
  return sum_dim(x, dim, keepdim, true);
}

/* ---- sum_all / mean_all ------------------------------------------------------------------ */

#define ALL_BLOCK (1 << 14)

typedef struct {
  const void *x; /* (n) contiguous */
  int64_t n;
  double *part; /* (n / ALL_BLOCK) one sum per block */
  bool f64;
} all_job;

static void all_chunk(void *ctx, int64_t begin, int64_t end) {
  const all_job *j = ctx;
  for (int64_t b = begin; b < end; b++) {
    int64_t i0 = b * ALL_BLOCK, m = j->n - i0 < ALL_BLOCK ? j->n - i0 : ALL_BLOCK;
    j->part[b] = j->f64 ? em_sum_f64((const double *)j->x + i0, m)
                        : em_sum_f32((const float *)j->x + i0, m);
  }
}

static void all_backward(em_node *n) {
  em_tensor *x = n->in[0];
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (!gx) return;
  em_tensor *g = em_scalar(x->dtype, em_tensor_item(n->out->grad) * n->f[0]);
  if (fresh) em_copy_into(gx, g);
  else em_add_into(gx, g);
}

static em_tensor *sum_all(em_tensor *x, bool mean) {
  EM_ASSERT(EM_IS_FLOAT(x));
  EM_OP_BEGIN(mean ? "mean_all" : "sum_all", 1, x);
  em_tensor *c = em_contiguous_nograd(x);
  int64_t n = em_tensor_numel(c), nb = (n + ALL_BLOCK - 1) / ALL_BLOCK;
  all_job j = {em_tensor_ptr(c), n, em_scratch(sizeof(double) * (size_t)(nb ? nb : 1)),
               c->dtype == EM_DTYPE_F64};
  if (n >= EM_PAR_MIN) em_parallel_for(nb, 1, all_chunk, &j);
  else all_chunk(&j, 0, nb);
  double total = 0;
  for (int64_t b = 0; b < nb; b++) total += j.part[b];
  double scale = mean ? 1.0 / (double)n : 1.0;
  em_tensor *y = em_scalar(x->dtype, total * scale);
  if (em_needs_grad(1, &x)) {
    em_node *nd = em_record(mean ? "mean_all" : "sum_all", all_backward, y, 1, &x);
    nd->f[0] = scale;
  }
  return EM_OP_END(y);
}

em_tensor *em_sum_all(em_tensor *x) {
  if (em_on_device(x)) return em_dev_sum_all(x);
  return sum_all(x, false);
}
em_tensor *em_mean_all(em_tensor *x) {
  if (em_on_device(x)) return em_dev_mean_all(x);
  return sum_all(x, true);
}

/* ---- max / argmax --------------------------------------------------------------------------- */

typedef struct {
  const void *x; /* (O, R, I) contiguous */
  void *y;       /* values (O, I) */
  int64_t *idx;  /* positions (O, I) */
  int64_t O, R, I, nblk;
} max_job;

/* v replaces the best b when larger, or when v is the first NaN. */
#define MAX_TAKES(v, b) ((v) > (b) || ((v) != (v) && (b) == (b)))

#define MAX_CHUNK(NAME, T)                                                       \
  static void NAME(void *ctx, int64_t begin, int64_t end) {                      \
    const max_job *j = ctx;                                                      \
    const T *x = j->x;                                                           \
    T *y = j->y;                                                                 \
    const int64_t R = j->R, I = j->I;                                            \
    if (I == 1) {                                                                \
      for (int64_t o = begin; o < end; o++) {                                    \
        const T *xo = x + o * R;                                                 \
        T best = xo[0];                                                          \
        int64_t bi = 0;                                                          \
        for (int64_t r = 1; r < R; r++)                                          \
          if (MAX_TAKES(xo[r], best)) {                                          \
            best = xo[r];                                                        \
            bi = r;                                                              \
          }                                                                      \
        y[o] = best;                                                             \
        j->idx[o] = bi;                                                          \
      }                                                                          \
      return;                                                                    \
    }                                                                            \
    for (int64_t job = begin; job < end; job++) {                                \
      int64_t o = job / j->nblk, i0 = job % j->nblk * I_BLOCK;                   \
      int64_t m = I - i0 < I_BLOCK ? I - i0 : I_BLOCK;                           \
      T *restrict yo = y + o * I + i0;                                           \
      int64_t *restrict io = j->idx + o * I + i0;                                \
      const T *xo = x + o * R * I + i0;                                          \
      for (int64_t i = 0; i < m; i++) {                                          \
        yo[i] = xo[i];                                                           \
        io[i] = 0;                                                               \
      }                                                                          \
      for (int64_t r = 1; r < R; r++) {                                          \
        const T *restrict xr = xo + r * I;                                       \
        for (int64_t i = 0; i < m; i++) {                                        \
          const T v = xr[i];                                                     \
          const bool take = MAX_TAKES(v, yo[i]);                                 \
          yo[i] = take ? v : yo[i];                                              \
          io[i] = take ? r : io[i];                                              \
        }                                                                        \
      }                                                                          \
    }                                                                            \
  }
MAX_CHUNK(max_chunk_f32, float)
MAX_CHUNK(max_chunk_f64, double)

/* Plain loop reference: any strides, any real dtype (values through
 * doubles, which hold every f32/i32/u8 value exactly). */
static void max_reference(const em_tensor *x, int d, em_tensor *y, int64_t *idx) {
  int64_t O, R, I;
  split_dims(x, d, &O, &R, &I);
  size_t es = em_dtype_size(x->dtype);
  for (int64_t k = 0; k < O * I; k++) {
    int64_t off = x->offset + outer_offset(x, d, k);
    double best = 0;
    int64_t bi = 0;
    for (int64_t r = 0; r < R; r++) {
      const char *p = (const char *)x->data + (off + r * x->stride[d]) * (int64_t)es;
      double v;
      switch (x->dtype) {
      case EM_DTYPE_F32: v = *(const float *)p; break;
      case EM_DTYPE_F64: v = *(const double *)p; break;
      case EM_DTYPE_I32: v = *(const int32_t *)p; break;
      case EM_DTYPE_I64: v = (double)*(const int64_t *)p; break;
      default: v = *(const uint8_t *)p; break;
      }
      if (r == 0 || MAX_TAKES(v, best)) {
        best = v;
        bi = r;
      }
    }
    if (y) {
      if (y->dtype == EM_DTYPE_F32) em_f32(y)[k] = (float)best;
      else em_f64(y)[k] = best;
    }
    idx[k] = bi;
  }
}

static void max_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  const int64_t *idx = em_i64(n->saved[0]);
  int64_t O, R, I;
  split_dims(x, (int)n->i[0], &O, &R, &I);
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (!gx) return;
  if (fresh) memset(em_tensor_ptr(gx), 0, em_tensor_nbytes(gx));
  for (int64_t o = 0; o < O; o++)
    for (int64_t i = 0; i < I; i++) {
      int64_t k = o * I + i, e = (o * R + idx[k]) * I + i;
      if (x->dtype == EM_DTYPE_F32) em_f32(gx)[e] += em_f32(g)[k];
      else em_f64(gx)[e] += em_f64(g)[k];
    }
}

/* Values (when want_values) and positions of the maximum along d. */
static void max_impl(em_tensor *x, int d, bool keepdim, bool want_values, em_tensor **values,
                     em_tensor **pos) {
  int64_t shape[EM_MAX_DIMS], O, R, I;
  int nd = em_reduced_shape(x, d, keepdim, shape);
  split_dims(x, d, &O, &R, &I);
  EM_ASSERT(R > 0 && "max over an empty dim");
  em_tensor *y = want_values ? em_empty(x->dtype, nd, shape) : NULL;
  em_tensor *idx = em_empty(EM_DTYPE_I64, nd, shape);
  if (y && em_tensor_is_contiguous(x)) {
    max_job j = {em_tensor_ptr(x), em_tensor_ptr(y), em_i64(idx), O, R, I,
                 (I + I_BLOCK - 1) / I_BLOCK};
    int64_t jobs = I == 1 ? O : O * j.nblk;
    int64_t per_job = R * (I == 1 ? 1 : (I < I_BLOCK ? I : I_BLOCK));
    em_range_fn fn = x->dtype == EM_DTYPE_F32 ? max_chunk_f32 : max_chunk_f64;
    if (O * R * I >= EM_PAR_MIN)
      em_parallel_for(jobs, (EM_PAR_GRAIN + per_job - 1) / per_job, fn, &j);
    else
      fn(&j, 0, jobs);
  } else {
    max_reference(x, d, y, em_i64(idx));
  }
  *values = y;
  *pos = idx;
}

em_tensor *em_max(em_tensor *x, int dim, bool keepdim, em_tensor **argmax) {
  if (em_on_device(x)) return em_dev_max(x, dim, keepdim, argmax);
  EM_ASSERT(EM_IS_FLOAT(x) && x->ndim > 0);
  EM_OP_BEGIN("max", 1, x);
  int d = em_dim_norm(dim, x->ndim);
  em_tensor *y, *idx;
  max_impl(x, d, keepdim, true, &y, &idx);
  if (em_needs_grad(1, &x)) {
    em_node *nd = em_record("max", max_backward, y, 1, &x);
    nd->saved[0] = idx;
    nd->i[0] = d;
  }
  if (argmax) *argmax = idx;
  return EM_OP_END(y);
}

em_tensor *em_argmax(em_tensor *x, int dim, bool keepdim) {
  if (em_on_device(x)) return em_dev_argmax(x, dim, keepdim);
  EM_ASSERT(x->ndim > 0);
  EM_OP_BEGIN("argmax", 1, x);
  int d = em_dim_norm(dim, x->ndim);
  em_tensor *y, *idx;
  /* floats take the fast kernel; integer inputs the reference loop */
  max_impl(x, d, keepdim, EM_IS_FLOAT(x), &y, &idx);
  return EM_OP_END(idx);
}
