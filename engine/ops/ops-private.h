/* ops-private.h: what the files of engine/ops share. */
#pragma once

#include "em-ops.h"

#define EM_IS_FLOAT(t) ((t)->dtype == EM_DTYPE_F32 || (t)->dtype == EM_DTYPE_F64)

/* Sums g over the dimensions that broadcasting expanded, giving a tensor
 * of `shape` (used by backward of broadcasting ops). Returns g itself
 * when the shapes already agree. */
em_tensor *em_reduce_to_shape(em_tensor *g, int ndim, const int64_t *shape);
/* The broadcast shape of a and b into out (returns its ndim), or -1 when
 * they do not broadcast. */
int em_broadcast_shape(const em_tensor *a, const em_tensor *b, int64_t *out);

/* How a 2-D operand is handed to BLAS: row-major with leading dimension
 * ld, transposed or not. Returns false when neither stride is 1 (the
 * caller makes it contiguous first). */
typedef struct {
  const void *ptr;
  bool trans;
  int64_t ld;
} em_blas_operand;
bool em_blas_operand_of(const em_tensor *t, int d0, int d1, int64_t offset_elems,
                        em_blas_operand *out);
/* C (m, n, ldc) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C, in t's dtype. */
void em_gemm(em_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
             const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
             int64_t ldc);
