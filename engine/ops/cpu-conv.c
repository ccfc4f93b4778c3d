/* cpu-conv.c: the CPU backend's convolution kernels (the conv2d_forward
 * and conv2d_backward entries of em-backend.h), f32 and f64. The op
 * front-end is conv2d.c.
 *
 * f32 runs the fast path of the CPU kernel table (cpu-kernels.h:
 * conv-fast.c, which hands 3x3 stride-1 convolutions to conv-winograd.c,
 * in the processor's instruction set), f64 the loop reference
 * (engine/device/kernels/conv-ref.c). The _ref kernels run the reference
 * for either dtype: em_conv2d_ref, the oracle the tests hold the fast path
 * to. The CPU's autocast leaves convolution in f32 (em-amp.h), so amp is
 * not read. */
#include "cpu-kernels.h"

static void conv_check(const em_tensor *y, const em_tensor *x, const em_tensor *w) {
  EM_ASSERT(EM_IS_FLOAT(x) && w->dtype == x->dtype && y->dtype == x->dtype);
  EM_ASSERT(em_tensor_is_contiguous(x) && em_tensor_is_contiguous(y));
}

/* The fast path for f32 unless ref, the loop reference otherwise. */
static void conv_forward(bool ref, em_tensor *y, const em_tensor *x, const em_tensor *w,
                         const em_tensor *b, const em_conv2d_params *p) {
  conv_check(y, x, w);
  em_conv_geom g;
  em_conv_geom_init(&g, x, w, p);
  if (!ref && x->dtype == EM_DTYPE_F32) em_cpu_kernels_get()->conv2d_forward(&g, x, w, b, y);
  else em_conv2d_ref_forward(&g, x, w, b, y);
}

static void conv_backward(bool ref, em_tensor *gx, em_tensor *gw, em_tensor *gb,
                          const em_tensor *g, const em_tensor *x, const em_tensor *w,
                          const em_conv2d_params *p) {
  conv_check(g, x, w);
  em_conv_geom q;
  em_conv_geom_init(&q, x, w, p);
  em_conv_grads out = {gx, gw, gb, true, true, true};
  if (!ref && x->dtype == EM_DTYPE_F32) em_cpu_kernels_get()->conv2d_backward(&q, x, w, g, &out);
  else em_conv2d_ref_backward(&q, x, w, g, &out);
}

em_status em_cpu_conv2d_forward(int amp, em_tensor *y, const em_tensor *x, const em_tensor *w,
                                const em_tensor *b, const em_conv2d_params *p) {
  (void)amp;
  conv_forward(false, y, x, w, b, p);
  return EM_OK;
}

em_status em_cpu_conv2d_backward(int amp, em_tensor *gx, em_tensor *gw, em_tensor *gb,
                                 const em_tensor *g, const em_tensor *x, const em_tensor *w,
                                 const em_conv2d_params *p) {
  (void)amp;
  conv_backward(false, gx, gw, gb, g, x, w, p);
  return EM_OK;
}

em_status em_cpu_conv2d_ref_forward(int amp, em_tensor *y, const em_tensor *x, const em_tensor *w,
                                    const em_tensor *b, const em_conv2d_params *p) {
  (void)amp;
  conv_forward(true, y, x, w, b, p);
  return EM_OK;
}

em_status em_cpu_conv2d_ref_backward(int amp, em_tensor *gx, em_tensor *gw, em_tensor *gb,
                                     const em_tensor *g, const em_tensor *x, const em_tensor *w,
                                     const em_conv2d_params *p) {
  (void)amp;
  conv_backward(true, gx, gw, gb, g, x, w, p);
  return EM_OK;
}
