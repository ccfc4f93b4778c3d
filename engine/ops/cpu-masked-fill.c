/* cpu-masked-fill.c: the CPU backend's masked_fill kernel (em-backend.h)
 * for f32 and f64: y (=|+=) mask ? v : x, x and the u8 mask broadcast
 * over y's shape through the strided iterator. The op front-end is
 * masked-fill.c.
 *
 * Each row has a contiguous loop (the mask row contiguous or constant
 * along it, as for a causal mask's rows) and the plain strided loop; the
 * select is branch-free so the compiler vectorises it. y must not overlap
 * x or the mask. */
#include "ops-private.h"

/* Rows of (y, x, mask): y = m ? v : x, or y += (m ? v : x) when ACC. */
#define FILL_ROW(FN, T, ACC)                                                     \
  static void FN(void *ctx, int64_t n, char *const *pp, const int64_t *s) {      \
    const T v = *(const T *)ctx;                                                 \
    T *restrict y = (T *)pp[0];                                                  \
    const T *restrict x = (const T *)pp[1];                                      \
    const uint8_t *restrict m = (const uint8_t *)pp[2];                          \
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {                                   \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T r = m[i] ? v : x[i];                                             \
        y[i] = ACC ? y[i] + r : r;                                               \
      }                                                                          \
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {                            \
      const bool set = *m != 0;                                                  \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T r = set ? v : x[i];                                              \
        y[i] = ACC ? y[i] + r : r;                                               \
      }                                                                          \
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T r = m[i * s[2]] ? v : x[i * s[1]];                               \
        y[i * s[0]] = ACC ? y[i * s[0]] + r : r;                                 \
      }                                                                          \
    }                                                                            \
  }

FILL_ROW(fill_f32, float, 0)
FILL_ROW(fill_acc_f32, float, 1)
FILL_ROW(fill_f64, double, 0)
FILL_ROW(fill_acc_f64, double, 1)

/* [f64][acc] */
static const em_row_fn fill_rows[2][2] = {{fill_f32, fill_acc_f32}, {fill_f64, fill_acc_f64}};

em_status em_cpu_masked_fill(bool acc, em_tensor *y, const em_tensor *x, const em_tensor *mask,
                             double v) {
  EM_ASSERT(EM_IS_FLOAT(y) && x->dtype == y->dtype && mask->dtype == EM_DTYPE_U8);
  em_tensor *ops[3] = {y, (em_tensor *)x, (em_tensor *)mask};
  em_iter it;
  em_iter_init(&it, y->ndim, y->shape, 3, ops);
  const bool f64 = y->dtype == EM_DTYPE_F64;
  float vf = (float)v; /* rounded once, as every f32 kernel takes its scalars */
  double vd = v;
  em_iter_parallel(&it, fill_rows[f64][acc], f64 ? (void *)&vd : (void *)&vf);
  return EM_OK;
}
