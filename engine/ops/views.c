/* views.c: placeholder until its owner lands the real op. */
#include "ops-private.h"

em_tensor *em_reshape(em_tensor *x, int ndim, const int64_t *shape) {
  (void)x;
  (void)ndim;
  (void)shape;
  EM_ASSERT(!"op pending");
}

em_tensor *em_flatten(em_tensor *x, int start_dim) {
  (void)x;
  (void)start_dim;
  EM_ASSERT(!"op pending");
}

em_tensor *em_transpose(em_tensor *x, int d0, int d1) {
  (void)x;
  (void)d0;
  (void)d1;
  EM_ASSERT(!"op pending");
}

em_tensor *em_permute(em_tensor *x, const int *perm) {
  (void)x;
  (void)perm;
  EM_ASSERT(!"op pending");
}

em_tensor *em_slice(em_tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
  (void)x;
  (void)dim;
  (void)start;
  (void)end;
  (void)step;
  EM_ASSERT(!"op pending");
}

em_tensor *em_expand(em_tensor *x, int ndim, const int64_t *shape) {
  (void)x;
  (void)ndim;
  (void)shape;
  EM_ASSERT(!"op pending");
}

em_tensor *em_contiguous(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_concat(int n, em_tensor *const *xs, int dim) {
  (void)n;
  (void)xs;
  (void)dim;
  EM_ASSERT(!"op pending");
}

em_tensor *em_cast(em_tensor *x, em_dtype dt) {
  (void)x;
  (void)dt;
  EM_ASSERT(!"op pending");
}
