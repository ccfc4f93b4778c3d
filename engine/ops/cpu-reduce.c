/* cpu-reduce.c: the CPU backend's reduction kernels (em-backend.h), f32
 * and f64: sum_to, x summed down to the shape y broadcasts to (the
 * gradient of a broadcast). The op front-end is reduce.c.
 *
 * One pass of the strided iterator over x's shape with y broadcast
 * (stride 0 on the summed dims): a row along a summed dim folds into one
 * element with the vectorised sums of ops-common.c, any other row adds
 * element by element. Rows share outputs, so the pass is serial, except
 * when nothing is summed (y += x of one shape: a gradient accumulated),
 * which splits over the pool. */
#include "ops-private.h"

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
