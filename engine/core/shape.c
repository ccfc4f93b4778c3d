/* shape.c: broadcasting, reduced shapes, negative dims and reshaped views
 * (shape.h). */
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
