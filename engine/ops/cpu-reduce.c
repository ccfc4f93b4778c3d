/* cpu-reduce.c: the CPU backend's reduction kernels (em-backend.h), f32
 * and f64: reduce (sum or max over a dim, with the max's positions) and
 * sum_to (x summed down to the shape y broadcasts to: the gradient of a
 * broadcast). The op front-end is reduce.c.
 *
 * reduce sees a contiguous x as (O, R, I): O the product of the dims
 * before d, R the size of d, I the product of the dims after. With
 * I == 1 each output is the sum of R contiguous values (em_sum_f32: float
 * lanes flushed into a double, vectorised); with I > 1 each output row of
 * I values accumulates R input rows (vectorised along I). Work is split
 * over outputs (and blocks of I), so results do not depend on the thread
 * count; a single output (a sum of everything) sums fixed blocks into
 * doubles on the pool and adds the block sums in order, deterministic
 * too. Strided inputs or outputs take the plain per-output loop (double
 * accumulator), the reference the tests hold the fast path to. max keeps
 * the first maximum (so backward goes to the first max, like PyTorch) and
 * propagates NaN (the first NaN wins).
 *
 * sum_to: one pass of the strided iterator over x's shape with y broadcast
 * (stride 0 on the summed dims): a row along a summed dim folds into one
 * element with the vectorised sums of ops-common.c, any other row adds
 * element by element. Rows share outputs, so the pass is serial, except
 * when nothing is summed (y += x of one shape: a gradient accumulated),
 * which splits over the pool. */
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

/* ---- reduce: sum ----------------------------------------------------------------- */

typedef struct {
  const void *x; /* (O, R, I) contiguous */
  void *y;       /* (O, I) */
  int64_t O, R, I, nblk;
} sum_job;

#define SUM_CHUNK(NAME, T, HSUM)                                                 \
  static void NAME(void *ctx, int64_t begin, int64_t end) {                      \
    const sum_job *j = ctx;                                                      \
    const T *x = j->x;                                                           \
    T *y = j->y;                                                                 \
    const int64_t R = j->R, I = j->I;                                            \
    if (I == 1) {                                                                \
      for (int64_t o = begin; o < end; o++) y[o] = (T)HSUM(x + o * R, R);        \
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
    }                                                                            \
  }
SUM_CHUNK(sum_chunk_f32, float, em_sum_f32)
SUM_CHUNK(sum_chunk_f64, double, em_sum_f64)

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

/* ---- reduce: max ----------------------------------------------------------------- */

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


/* ---- reduce: the entry ------------------------------------------------------------ */

/* Plain loop reference: any strides of x, y and idx (y and idx have x's
 * shape with size 1 at d), double accumulator for sums. */
static void reduce_reference(em_kred op, em_tensor *y, em_tensor *idx, const em_tensor *x, int d) {
  int64_t O, R, I;
  split_dims(x, d, &O, &R, &I);
  const bool f32 = x->dtype == EM_DTYPE_F32;
  for (int64_t k = 0; k < O * I; k++) {
    const int64_t off = x->offset + outer_offset(x, d, k);
    double acc = 0, best = 0;
    int64_t bi = 0;
    for (int64_t r = 0; r < R; r++) {
      const int64_t e = off + r * x->stride[d];
      const double v = f32 ? ((const float *)x->data)[e] : ((const double *)x->data)[e];
      acc += v;
      if (r == 0 || MAX_TAKES(v, best)) {
        best = v;
        bi = r;
      }
    }
    const double out = op == EM_KR_SUM ? acc : best;
    const int64_t ye = y->offset + outer_offset(y, d, k);
    if (f32) ((float *)y->data)[ye] = (float)out;
    else ((double *)y->data)[ye] = out;
    if (idx) ((int64_t *)idx->data)[idx->offset + outer_offset(idx, d, k)] = bi;
  }
}

/* The sum of every element of contiguous x into y[0]. */
static void sum_everything(em_tensor *y, const em_tensor *x) {
  const int64_t n = em_tensor_numel(x), nb = (n + ALL_BLOCK - 1) / ALL_BLOCK;
  all_job j = {em_tensor_ptr(x), n, em_scratch(sizeof(double) * (size_t)(nb ? nb : 1)),
               x->dtype == EM_DTYPE_F64};
  if (n >= EM_PAR_MIN) em_parallel_for(nb, 1, all_chunk, &j);
  else all_chunk(&j, 0, nb);
  double total = 0;
  for (int64_t b = 0; b < nb; b++) total += j.part[b];
  if (j.f64) *(double *)em_tensor_ptr(y) = total;
  else *(float *)em_tensor_ptr(y) = (float)total;
}

em_status em_cpu_reduce(em_kred op, em_tensor *y, em_tensor *idx, const em_tensor *x, int d) {
  EM_ASSERT(EM_IS_FLOAT(x) && y->dtype == x->dtype && y->ndim == x->ndim);
  EM_ASSERT(d >= 0 && d < x->ndim && y->shape[d] == 1 && (!idx || idx->dtype == EM_DTYPE_I64));
  EM_ASSERT(op == EM_KR_SUM || op == EM_KR_MAX);
  int64_t O, R, I;
  split_dims(x, d, &O, &R, &I);
  if (op == EM_KR_MAX) EM_ASSERT(R > 0 && "max over an empty dim");
  if (!em_tensor_is_contiguous(x) || !em_tensor_is_contiguous(y) ||
      (idx && !em_tensor_is_contiguous(idx))) {
    reduce_reference(op, y, idx, x, d);
    return EM_OK;
  }
  const bool f64 = x->dtype == EM_DTYPE_F64;
  const int64_t nblk = (I + I_BLOCK - 1) / I_BLOCK, jobs = I == 1 ? O : O * nblk;
  if (op == EM_KR_SUM) {
    if (O * I == 1) {
      sum_everything(y, x);
      return EM_OK;
    }
    sum_job j = {em_tensor_ptr(x), em_tensor_ptr(y), O, R, I, nblk};
    const int64_t per_job = (R > 0 ? R : 1) * (I == 1 ? 1 : (I < I_BLOCK ? I : I_BLOCK));
    em_range_fn fn = f64 ? sum_chunk_f64 : sum_chunk_f32;
    if (O * R * I >= EM_PAR_MIN) em_parallel_for(jobs, (EM_PAR_GRAIN + per_job - 1) / per_job, fn, &j);
    else fn(&j, 0, jobs);
    return EM_OK;
  }
  int64_t *pos = idx ? em_tensor_ptr(idx) : em_scratch(sizeof(int64_t) * (size_t)(O * I));
  max_job j = {em_tensor_ptr(x), em_tensor_ptr(y), pos, O, R, I, nblk};
  const int64_t per_job = R * (I == 1 ? 1 : (I < I_BLOCK ? I : I_BLOCK));
  em_range_fn fn = f64 ? max_chunk_f64 : max_chunk_f32;
  if (O * R * I >= EM_PAR_MIN) em_parallel_for(jobs, (EM_PAR_GRAIN + per_job - 1) / per_job, fn, &j);
  else fn(&j, 0, jobs);
  return EM_OK;
}

/* ---- sum_to --------------------------------------------------------------------- */

/* y (broadcast over the iteration, so stride 0 on summed dims) += x. */
#define SUM_INTO_ROW(NAME, T, HSUM)                                              \
  static void NAME(void *ctx, int64_t n, char *const *p, const int64_t *s) {     \
    (void)ctx;                                                                   \
    T *d = (T *)p[0];                                                            \
    const T *x = (const T *)p[1];                                                \
    if (s[0] == 0 && s[1] == 1) {                                                \
      *d += (T)HSUM(x, n);                                                       \
    } else if (s[0] == 0) {                                                      \
      double acc = 0;                                                            \
      for (int64_t i = 0; i < n; i++) acc += x[i * s[1]];                        \
      *d += (T)acc;                                                              \
    } else if (s[0] == 1 && s[1] == 1) {                                         \
      for (int64_t i = 0; i < n; i++) d[i] += x[i];                              \
    } else if (s[0] == 1 && s[1] == 0) {                                         \
      const T v = *x;                                                            \
      for (int64_t i = 0; i < n; i++) d[i] += v;                                 \
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) d[i * s[0]] += x[i * s[1]];                \
    }                                                                            \
  }
SUM_INTO_ROW(sum_into_row_f32, float, em_sum_f32)
SUM_INTO_ROW(sum_into_row_f64, double, em_sum_f64)

em_status em_cpu_sum_to(bool acc, em_tensor *y, const em_tensor *x) {
  EM_ASSERT(EM_IS_FLOAT(x) && y->dtype == x->dtype && y->ndim == x->ndim);
  if (!acc) em_tensor_fill_(y, 0.0);
  em_tensor *ops[2] = {y, (em_tensor *)x};
  em_iter it;
  em_iter_init(&it, x->ndim, x->shape, 2, ops);
  em_row_fn fn = x->dtype == EM_DTYPE_F32 ? sum_into_row_f32 : sum_into_row_f64;
  if (em_tensor_same_shape(y, x)) em_iter_parallel(&it, fn, NULL);
  else em_iter_run(&it, 0, it.numel, fn, NULL);
  return EM_OK;
}
