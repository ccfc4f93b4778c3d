/* ops-common.c: what the ops share: broadcasting, the strided iterator
 * behind the element-wise kernels, copies and adds into views, gradient
 * helpers and vectorised sums.
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

/* ---- shapes ----------------------------------------------------------------- */

int em_broadcast_shape(const em_tensor *a, const em_tensor *b, int64_t *out) {
  int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int d = 0; d < nd; d++) {
    int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
    int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    if (sa != sb && sa != 1 && sb != 1) return -1;
    out[d] = sa == 1 ? sb : sa;
  }
  return nd;
}

int em_dim_norm(int dim, int ndim) {
  int d = dim < 0 ? dim + ndim : dim;
  EM_ASSERT(d >= 0 && d < ndim && "dim out of range");
  return d;
}

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

/* ---- copies and adds ------------------------------------------------------------ */

#define COPY_ROW(NAME, T)                                                        \
  static void NAME(void *ctx, int64_t n, char *const *p, const int64_t *s) {     \
    (void)ctx;                                                                   \
    T *d = (T *)p[0];                                                            \
    const T *x = (const T *)p[1];                                                \
    if (s[0] == 1 && s[1] == 1) {                                                \
      memmove(d, x, sizeof(T) * (size_t)n);                                      \
    } else if (s[0] == 1 && s[1] == 0) {                                         \
      const T v = *x;                                                            \
      for (int64_t i = 0; i < n; i++) d[i] = v;                                  \
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) d[i * s[0]] = x[i * s[1]];                 \
    }                                                                            \
  }
COPY_ROW(copy_row_1, uint8_t)
COPY_ROW(copy_row_4, uint32_t)
COPY_ROW(copy_row_8, uint64_t)

#define ADD_ROW(NAME, T)                                                         \
  static void NAME(void *ctx, int64_t n, char *const *p, const int64_t *s) {     \
    (void)ctx;                                                                   \
    T *d = (T *)p[0];                                                            \
    const T *x = (const T *)p[1];                                                \
    if (s[0] == 1 && s[1] == 1) {                                                \
      for (int64_t i = 0; i < n; i++) d[i] += x[i];                              \
    } else if (s[0] == 1 && s[1] == 0) {                                         \
      const T v = *x;                                                            \
      for (int64_t i = 0; i < n; i++) d[i] += v;                                 \
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) d[i * s[0]] += x[i * s[1]];                \
    }                                                                            \
  }
ADD_ROW(add_row_f32, float)
ADD_ROW(add_row_f64, double)

void em_copy_into(em_tensor *dst, const em_tensor *src) {
  if (EM_ON_DEVICE(dst, (em_tensor *)src)) {
    em_dev_copy_into(dst, src);
    return;
  }
  EM_ASSERT(dst->dtype == src->dtype);
  em_tensor *ops[2] = {dst, (em_tensor *)src};
  em_iter it;
  em_iter_init(&it, dst->ndim, dst->shape, 2, ops);
  size_t es = em_dtype_size(dst->dtype);
  em_row_fn fn = es == 1 ? copy_row_1 : es == 4 ? copy_row_4 : copy_row_8;
  EM_ASSERT(es == 1 || es == 4 || es == 8);
  em_iter_parallel(&it, fn, NULL);
}

void em_add_into(em_tensor *dst, const em_tensor *src) {
  if (EM_ON_DEVICE(dst, (em_tensor *)src)) {
    em_dev_add_into(dst, src);
    return;
  }
  EM_ASSERT(dst->dtype == src->dtype && EM_IS_FLOAT(dst));
  em_tensor *ops[2] = {dst, (em_tensor *)src};
  em_iter it;
  em_iter_init(&it, dst->ndim, dst->shape, 2, ops);
  em_iter_parallel(&it, dst->dtype == EM_DTYPE_F32 ? add_row_f32 : add_row_f64, NULL);
}

void em_grad_add(em_tensor *x, const em_tensor *g) {
  bool fresh;
  em_tensor *gx = em_grad_acquire(x, &fresh);
  if (!gx) return;
  EM_ASSERT(em_tensor_same_shape(gx, g));
  if (fresh) em_copy_into(gx, g);
  else em_add_into(gx, g);
}

/* Any device: c is on t's, and em_copy_into hands off to the kernels. */
em_tensor *em_contiguous_nograd(em_tensor *t) {
  if (em_tensor_is_contiguous(t)) return t;
  em_tensor *c = em_empty_like(t);
  em_copy_into(c, t);
  return c;
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

/* out (broadcast over the iteration, so stride 0 on summed dims) += g. */
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
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) d[i * s[0]] += x[i * s[1]];                \
    }                                                                            \
  }
SUM_INTO_ROW(sum_into_row_f32, float, em_sum_f32)
SUM_INTO_ROW(sum_into_row_f64, double, em_sum_f64)

void em_sum_into_broadcast(em_tensor *out, const em_tensor *g) {
  if (EM_ON_DEVICE(out, (em_tensor *)g)) {
    em_dev_sum_into_broadcast(out, g);
    return;
  }
  EM_ASSERT(out->dtype == g->dtype && EM_IS_FLOAT(g));
  em_tensor *ops[2] = {out, (em_tensor *)g};
  em_iter it;
  em_iter_init(&it, g->ndim, g->shape, 2, ops);
  em_iter_run(&it, 0, it.numel, g->dtype == EM_DTYPE_F32 ? sum_into_row_f32 : sum_into_row_f64,
              NULL);
}

em_tensor *em_reduce_to_shape(em_tensor *g, int ndim, const int64_t *shape) {
  bool same = g->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = g->shape[d] == shape[d];
  if (same) return g;
  if (em_needs_grad(1, &g)) {
    /* On the tape (double backward, or a caller in grad mode): use ops.
     * Sum leading extra dims, then dims that were 1. */
    em_tensor *r = g;
    while (r->ndim > ndim) r = em_sum(r, 0, false);
    for (int d = 0; d < ndim; d++)
      if (shape[d] == 1 && r->shape[d] != 1) r = em_sum(r, d, true);
    return r;
  }
  if (em_on_device(g)) return em_dev_reduce_to_shape(g, ndim, shape);
  /* One pass over g, adding into the zeroed result broadcast over g. */
  em_tensor *r = em_zeros(g->dtype, ndim, shape);
  em_sum_into_broadcast(r, g);
  return r;
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

void em_conv2d_params_save(em_node *nd, const em_conv2d_params *p) {
  nd->i[0] = p->stride[0];
  nd->i[1] = p->stride[1];
  nd->i[2] = p->padding[0];
  nd->i[3] = p->padding[1];
  nd->i[4] = p->dilation[0];
  nd->i[5] = p->dilation[1];
  nd->i[6] = p->groups;
}

em_conv2d_params em_conv2d_params_load(const em_node *nd) {
  em_conv2d_params p = {
      .stride = {(int)nd->i[0], (int)nd->i[1]},
      .padding = {(int)nd->i[2], (int)nd->i[3]},
      .dilation = {(int)nd->i[4], (int)nd->i[5]},
      .groups = (int)nd->i[6],
  };
  return p;
}

void em_pool2d_params_save(em_node *nd, const em_pool2d_params *p) {
  nd->i[0] = p->kernel[0];
  nd->i[1] = p->kernel[1];
  nd->i[2] = p->stride[0];
  nd->i[3] = p->stride[1];
  nd->i[4] = p->padding[0];
  nd->i[5] = p->padding[1];
  nd->i[6] = p->count_include_pad;
}

em_pool2d_params em_pool2d_params_load(const em_node *nd) {
  em_pool2d_params p = {
      .kernel = {(int)nd->i[0], (int)nd->i[1]},
      .stride = {(int)nd->i[2], (int)nd->i[3]},
      .padding = {(int)nd->i[4], (int)nd->i[5]},
      .count_include_pad = nd->i[6] != 0,
  };
  return p;
}

int em_reduced_shape(const em_tensor *x, int d, bool keepdim, int64_t *shape) {
  int nd = 0;
  for (int k = 0; k < x->ndim; k++) {
    if (k != d) shape[nd++] = x->shape[k];
    else if (keepdim) shape[nd++] = 1;
  }
  return nd;
}
