/* cpu-binary.c: the CPU backend's broadcasting binary kernel (the binary
 * entry of em-backend.h) for f32 and f64: add, sub, mul, div, written or
 * accumulated. The op front-end is elementwise.c.
 *
 * The strided iterator turns every broadcast into rows, and each row
 * function has vectorised loops for the three shapes that matter (both
 * operands contiguous; one of them constant along the row, as in a bias
 * or channel broadcast) and the plain strided loop for the rest; all of
 * them compute the same expression, so results do not depend on the
 * layout. y must not overlap a or b (the rows are restrict). */
#include "ops-private.h"

/* Rows of (y, a, b): y = EXPR(u = a, w = b), or y += EXPR when ACC. */
#define BIN_ROW(FN, T, ACC, EXPR)                                                \
  static void FN(void *ctx, int64_t n, char *const *pp, const int64_t *s) {      \
    (void)ctx;                                                                   \
    T *restrict y = (T *)pp[0];                                                  \
    const T *restrict A = (const T *)pp[1];                                      \
    const T *restrict B = (const T *)pp[2];                                      \
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {                                   \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T u = A[i], w = B[i];                                              \
        const T r = (EXPR);                                                      \
        y[i] = ACC ? y[i] + r : r;                                               \
      }                                                                          \
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {                            \
      const T w = *B;                                                            \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T u = A[i];                                                        \
        const T r = (EXPR);                                                      \
        y[i] = ACC ? y[i] + r : r;                                               \
      }                                                                          \
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {                            \
      const T u = *A;                                                            \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T w = B[i];                                                        \
        const T r = (EXPR);                                                      \
        y[i] = ACC ? y[i] + r : r;                                               \
      }                                                                          \
    } else {                                                                     \
      for (int64_t i = 0; i < n; i++) {                                          \
        const T u = A[i * s[1]], w = B[i * s[2]];                                \
        const T r = (EXPR);                                                      \
        y[i * s[0]] = ACC ? y[i * s[0]] + r : r;                                 \
      }                                                                          \
    }                                                                            \
  }

#define BIN_ROWS(NAME, EXPR)                                                     \
  BIN_ROW(NAME##_f32, float, 0, EXPR)                                            \
  BIN_ROW(NAME##_acc_f32, float, 1, EXPR)                                        \
  BIN_ROW(NAME##_f64, double, 0, EXPR)                                           \
  BIN_ROW(NAME##_acc_f64, double, 1, EXPR)

BIN_ROWS(add, u + w)
BIN_ROWS(sub, u - w)
BIN_ROWS(mul, u * w)
BIN_ROWS(div, u / w)

/* [op][f64][acc], indexed by the em_kbin codes. */
#define ROWS(NAME) {{NAME##_f32, NAME##_acc_f32}, {NAME##_f64, NAME##_acc_f64}}
static const em_row_fn bin_rows[EM_KB_COUNT][2][2] = {
    [EM_KB_ADD] = ROWS(add), [EM_KB_SUB] = ROWS(sub), [EM_KB_MUL] = ROWS(mul),
    [EM_KB_DIV] = ROWS(div)};

em_status em_cpu_binary(em_kbin op, bool acc, em_tensor *y, const em_tensor *a,
                        const em_tensor *b) {
  EM_ASSERT(op >= 0 && op < EM_KB_COUNT);
  EM_ASSERT(EM_IS_FLOAT(y) && a->dtype == y->dtype && b->dtype == y->dtype);
  em_tensor *ops[3] = {y, (em_tensor *)a, (em_tensor *)b};
  em_iter it;
  em_iter_init(&it, y->ndim, y->shape, 3, ops);
  em_iter_parallel(&it, bin_rows[op][y->dtype == EM_DTYPE_F64][acc], NULL);
  return EM_OK;
}
