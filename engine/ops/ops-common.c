/* ops-common.c: what the CPU's kernels share: the strided iterator
 * behind the element-wise kernels and vectorised sums. (Shapes and
 * broadcasting are in engine/core/shape.c, the gradient copies and adds
 * in engine/core/grad-accumulate.c.)
 *
 * The iterator drops size-1 dims and merges neighbouring dims wherever
 * every operand's strides allow, so the kernels only ever see rows: a
 * contiguous tensor is one row (split over threads when large), a bias
 * add (N, K) + (K) is N rows with a shared second operand, a channel
 * broadcast (N, C, H, W) * (1, C, 1, 1) is N * C rows with a constant
 * second operand. Each kernel has a vectorised loop for unit strides and
 * the plain strided loop for everything else. */
#include "ops-private.h"
#include "em-pool.h"

/* ---- iterator ---------------------------------------------------------------- */

void em_iter_init(em_iter *it, int ndim, const int64_t *shape, int nops, em_tensor *const *ops) {
  EM_ASSERT(nops >= 1 && nops <= EM_ITER_MAX_OPS && ndim >= 0 && ndim <= EM_MAX_DIMS);
  it->nops = nops;
  it->numel = 1;
  for (int d = 0; d < ndim; d++) it->numel *= shape[d];
  for (int k = 0; k < nops; k++) {
    EM_ASSERT(ops[k]->ndim <= ndim);
    it->base[k] = em_tensor_ptr(ops[k]);
    it->esize[k] = (int64_t)em_dtype_size(ops[k]->dtype);
  }
  int nd = 0;
  for (int d = 0; d < ndim; d++) {
    int64_t st[EM_ITER_MAX_OPS];
    for (int k = 0; k < nops; k++) {
      const em_tensor *t = ops[k];
      int td = d - (ndim - t->ndim);
      if (td < 0 || t->shape[td] == 1) {
        st[k] = 0;
      } else {
        EM_ASSERT(t->shape[td] == shape[d] && "operand does not broadcast to the shape");
        st[k] = t->stride[td];
      }
    }
    if (shape[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; merge && k < nops; k++) merge = it->stride[k][nd - 1] == st[k] * shape[d];
    if (merge) {
      it->shape[nd - 1] *= shape[d];
      for (int k = 0; k < nops; k++) it->stride[k][nd - 1] = st[k];
      continue;
    }
    it->shape[nd] = shape[d];
    for (int k = 0; k < nops; k++) it->stride[k][nd] = st[k];
    nd++;
  }
  if (nd == 0) { /* one element */
    it->shape[0] = 1;
    for (int k = 0; k < nops; k++) it->stride[k][0] = 0;
    nd = 1;
  }
  it->ndim = nd;
}

void em_iter_run(const em_iter *it, int64_t begin, int64_t end, em_row_fn fn, void *ctx) {
  if (begin >= end) return;
  const int nd = it->ndim, nops = it->nops, last = nd - 1;
  int64_t idx[EM_MAX_DIMS], s[EM_ITER_MAX_OPS];
  char *p[EM_ITER_MAX_OPS];
  int64_t r = begin;
  for (int d = last; d >= 0; d--) {
    idx[d] = r % it->shape[d];
    r /= it->shape[d];
  }
  for (int k = 0; k < nops; k++) {
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off += idx[d] * it->stride[k][d];
    p[k] = it->base[k] + off * it->esize[k];
    s[k] = it->stride[k][last];
  }
  const int64_t inner = it->shape[last];
  for (int64_t pos = begin; pos < end;) {
    int64_t n = inner - idx[last];
    if (n > end - pos) n = end - pos;
    fn(ctx, n, p, s);
    pos += n;
    if (pos >= end) break;
    /* next row: back to the row start, then carry through the outer dims */
    for (int k = 0; k < nops; k++) p[k] -= idx[last] * s[k] * it->esize[k];
    idx[last] = 0;
    for (int d = last - 1; d >= 0; d--) {
      if (++idx[d] < it->shape[d]) {
        for (int k = 0; k < nops; k++) p[k] += it->stride[k][d] * it->esize[k];
        break;
      }
      for (int k = 0; k < nops; k++) p[k] -= (it->shape[d] - 1) * it->stride[k][d] * it->esize[k];
      idx[d] = 0;
    }
  }
}

typedef struct {
  const em_iter *it;
  em_row_fn fn;
  void *ctx;
} iter_job;

static void iter_chunk(void *ctx, int64_t begin, int64_t end) {
  const iter_job *j = ctx;
  em_iter_run(j->it, begin, end, j->fn, j->ctx);
}

void em_iter_parallel(const em_iter *it, em_row_fn fn, void *ctx) {
  if (it->numel >= EM_PAR_MIN) {
    iter_job j = {it, fn, ctx};
    em_parallel_for(it->numel, EM_PAR_GRAIN, iter_chunk, &j);
  } else {
    em_iter_run(it, 0, it->numel, fn, ctx);
  }
}

/* ---- sums --------------------------------------------------------------------------- */

#define SUM_LANES 32
#define SUM_BLOCK 4096

double em_sum_f32(const float *x, int64_t n) {
  double total = 0;
  for (int64_t b = 0; b < n; b += SUM_BLOCK) {
    int64_t m = n - b < SUM_BLOCK ? n - b : SUM_BLOCK, i = 0;
    const float *xb = x + b;
    float acc[SUM_LANES] = {0};
    for (; i + SUM_LANES <= m; i += SUM_LANES)
      for (int j = 0; j < SUM_LANES; j++) acc[j] += xb[i + j];
    /* fold the lanes pairwise (vector adds, a fixed order) */
    for (int w = SUM_LANES / 2; w >= 1; w /= 2)
      for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    double part = acc[0];
    for (; i < m; i++) part += xb[i];
    total += part;
  }
  return total;
}

double em_sum_f64(const double *x, int64_t n) {
  double acc[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++) acc[j] += x[i + j];
  double total = 0;
  for (int j = 0; j < 8; j++) total += acc[j];
  for (; i < n; i++) total += x[i];
  return total;
}

float em_lane_max_f32(const float *x, int64_t n) {
  float m = x[0];
  int64_t k = 0;
  if (n >= 64) {
    float lane[16];
    for (int q = 0; q < 16; q++) lane[q] = x[0];
    for (; k + 16 <= n; k += 16)
      for (int q = 0; q < 16; q++) lane[q] = x[k + q] > lane[q] ? x[k + q] : lane[q];
    for (int q = 0; q < 16; q++) m = lane[q] > m ? lane[q] : m;
  }
  for (; k < n; k++) m = x[k] > m ? x[k] : m;
  return m;
}

float em_lane_sum_f32(const float *x, int64_t n) {
  float s = 0;
  int64_t k = 0;
  if (n >= 64) {
    float lane[16] = {0};
    for (; k + 16 <= n; k += 16)
      for (int q = 0; q < 16; q++) lane[q] += x[k + q];
    for (int q = 0; q < 16; q++) s += lane[q];
  }
  for (; k < n; k++) s += x[k];
  return s;
}
