/* cpu-copy.c: the CPU backend's copy and fill kernels (the copy and fill
 * entries of em-backend.h). fill is core's em_tensor_fill_. copy: y = x,
 * x broadcastable to y's shape, any strides, any dtype. Same-dtype copies are rows of the strided iterator (one memmove
 * per contiguous row, split over the pool when large); converting copies
 * take core's plain loop (em_tensor_copy_), except the contiguous f32 <->
 * f64 casts of gradient checks, which are flat vectorised loops. */
#include "ops-private.h"

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

/* x seen in y's shape (stride 0 where it is broadcast). */
static em_tensor *broadcast_to(const em_tensor *x, const em_tensor *y) {
  int64_t stride[EM_MAX_DIMS];
  const int lead = y->ndim - x->ndim;
  EM_ASSERT(lead >= 0);
  for (int d = 0; d < y->ndim; d++) {
    const int xd = d - lead;
    stride[d] = xd < 0 || x->shape[xd] == 1 ? 0 : x->stride[xd];
    EM_ASSERT(xd < 0 || x->shape[xd] == 1 || x->shape[xd] == y->shape[d]);
  }
  return em_view_raw(x, y->ndim, y->shape, stride, x->offset);
}

em_status em_cpu_fill(em_tensor *y, double v) {
  em_tensor_fill_(y, v);
  return EM_OK;
}

em_status em_cpu_copy(em_tensor *y, const em_tensor *x) {
  const bool flat = em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y) &&
                    em_tensor_same_shape(x, y);
  const int64_t n = em_tensor_numel(y);
  if (flat && x->dtype == EM_DTYPE_F32 && y->dtype == EM_DTYPE_F64) { /* vectorised casts */
    const float *s = em_tensor_ptr(x);
    double *o = em_tensor_ptr(y);
    for (int64_t i = 0; i < n; i++) o[i] = s[i];
    return EM_OK;
  }
  if (flat && x->dtype == EM_DTYPE_F64 && y->dtype == EM_DTYPE_F32) {
    const double *s = em_tensor_ptr(x);
    float *o = em_tensor_ptr(y);
    for (int64_t i = 0; i < n; i++) o[i] = (float)s[i];
    return EM_OK;
  }
  if (x->dtype != y->dtype) {
    em_tensor_copy_(y, em_tensor_same_shape(x, y) ? x : broadcast_to(x, y));
    return EM_OK;
  }
  em_tensor *ops[2] = {y, (em_tensor *)x};
  em_iter it;
  em_iter_init(&it, y->ndim, y->shape, 2, ops);
  size_t es = em_dtype_size(y->dtype);
  EM_ASSERT(es == 1 || es == 4 || es == 8);
  em_iter_parallel(&it, es == 1 ? copy_row_1 : es == 4 ? copy_row_4 : copy_row_8, NULL);
  return EM_OK;
}
