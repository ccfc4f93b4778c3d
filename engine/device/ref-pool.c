/* ref-pool.c: the reference device's 2-D max and average pools, one
 * output element (forward) or one input element (backward, a gather over
 * the windows that cover it) at a time, through kernels/kern-pool.h. */
#include "ref-private.h"

#include "kernels/kern-pool.h"

static em_kpool_geom geom_of(const em_tensor *x, const em_pool2d_params *p) {
  em_kpool_geom g;
  em_kpool_geom_init(&g, x->shape[0], x->shape[1], x->shape[2], x->shape[3], p->kernel[0],
                     p->kernel[1], p->stride[0], p->stride[1], p->padding[0], p->padding[1],
                     p->count_include_pad);
  return g;
}

em_status em_ref_pool2d_forward(bool max, em_tensor *y, em_tensor *idx, const em_tensor *x,
                                const em_pool2d_params *p) {
  (void)idx; /* backward finds each maximum again from x */
  EM_ASSERT(x->ndim == 4 && em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y));
  em_kpool_geom g = geom_of(x, p);
  EM_ASSERT(y->shape[2] == g.OH && y->shape[3] == g.OW);
  const float *xs = em_f32(x); /* (N, C, H, W) */
  float *ys = em_f32(y);       /* (N, C, OH, OW) */
  int64_t n = g.N * g.C * g.OH * g.OW;
  for (int64_t o = 0; o < n; o++) ys[o] = em_kpool_forward(max, &g, xs, o);
  return EM_OK;
}

em_status em_ref_pool2d_backward(bool max, em_tensor *gx, const em_tensor *g, const em_tensor *x,
                                 const em_tensor *y, const em_tensor *idx,
                                 const em_pool2d_params *p) {
  (void)y; /* max pool finds each window's maximum again from x */
  (void)idx;
  EM_ASSERT(em_tensor_is_contiguous(gx) && em_tensor_is_contiguous(g) &&
            em_tensor_is_contiguous(x));
  em_kpool_geom q = geom_of(x, p);
  const float *gs = em_f32(g); /* (N, C, OH, OW) */
  const float *xs = em_f32(x); /* (N, C, H, W) */
  float *gxs = em_f32(gx);     /* (N, C, H, W) */
  int64_t n = q.N * q.C * q.H * q.W;
  for (int64_t i = 0; i < n; i++) gxs[i] = em_kpool_backward(max, &q, gs, xs, i);
  return EM_OK;
}
