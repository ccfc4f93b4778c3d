/* ops-common.c: broadcasting helpers shared by the ops. */
#include "ops-private.h"

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

em_tensor *em_reduce_to_shape(em_tensor *g, int ndim, const int64_t *shape) {
  bool same = g->ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = g->shape[d] == shape[d];
  if (same) return g;
  /* Sum leading extra dims, then dims that were 1. */
  em_tensor *r = g;
  while (r->ndim > ndim) r = em_sum(r, 0, false);
  for (int d = 0; d < ndim; d++)
    if (shape[d] == 1 && r->shape[d] != 1) r = em_sum(r, d, true);
  return r;
}
