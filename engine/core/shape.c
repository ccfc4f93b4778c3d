/* shape.c: broadcasting, reduced shapes, negative dims, reshaped views
 * and GEMM operands (shape.h). */
#include "shape.h"

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

int em_reduced_shape(const em_tensor *x, int d, bool keepdim, int64_t *shape) {
  int nd = 0;
  for (int k = 0; k < x->ndim; k++) {
    if (k != d) shape[nd++] = x->shape[k];
    else if (keepdim) shape[nd++] = 1;
  }
  return nd;
}

int em_dim_norm(int dim, int ndim) {
  int d = dim < 0 ? dim + ndim : dim;
  EM_ASSERT(d >= 0 && d < ndim && "dim out of range");
  return d;
}

em_tensor *em_view_as(em_tensor *t, int ndim, const int64_t *shape) {
  EM_ASSERT(em_tensor_is_contiguous(t));
  int64_t stride[EM_MAX_DIMS], s = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    stride[d] = s;
    s *= shape[d] > 0 ? shape[d] : 1;
  }
  return em_view_raw(t, ndim, shape, stride, t->offset);
}

bool em_blas_operand_of(const em_tensor *t, int d0, int d1, int64_t offset_elems,
                        em_blas_operand *out) {
  int64_t rows = t->shape[d0], cols = t->shape[d1];
  int64_t s0 = t->stride[d0], s1 = t->stride[d1];
  const char *base = (const char *)t->data + (t->offset + offset_elems) * (int64_t)em_dtype_size(t->dtype);
  out->ptr = base;
  if ((s1 == 1 || cols == 1) && s0 >= (cols > 1 ? cols : 1)) {
    out->trans = false;
    out->ld = s0 > 0 ? s0 : 1;
    if (rows == 1) out->ld = cols > 1 ? cols : 1;
    return true;
  }
  if ((s0 == 1 || rows == 1) && s1 >= (rows > 1 ? rows : 1)) {
    out->trans = true;
    out->ld = s1 > 0 ? s1 : 1;
    if (cols == 1) out->ld = rows > 1 ? rows : 1;
    return true;
  }
  return false;
}
