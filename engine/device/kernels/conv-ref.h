/* conv-ref.h: the plain loop references of conv2d and of the 2-D pools,
 * forward and backward (conv-ref.c, pool-ref.c): PyTorch's definitions
 * written to be obviously right rather than fast, one loop nest per
 * output element, summed in double, reading tensors of any strides, f32
 * or f64.
 *
 * The bodies the reference device and the CPU share: the reference
 * device's convolution (engine/device/ref-linalg.c) runs them on its host
 * memory; the CPU's backend (engine/ops/cpu-conv.c, cpu-pool.c) runs them
 * for f64 (gradient checks) and for em_conv2d_ref / em_*_pool2d_ref, the
 * oracles its fast paths are tested against. Host C (they read em_tensor
 * structs), not for CUDA. */
#pragma once

#include "conv-geom.h"

/* y (N, K, OH, OW) contiguous = conv(x, w) + b; b may be NULL. */
void em_conv2d_ref_forward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                           const em_tensor *b, em_tensor *y);
/* Gradients from gy (N, K, OH, OW) contiguous. gx, gw, gb are contiguous
 * buffers of their input's shape or NULL when not wanted; *_fresh says
 * whether to overwrite (true) or accumulate. (The CPU's fast backward,
 * cpu-kernels.h, takes the same.) */
typedef struct {
  em_tensor *gx, *gw, *gb;
  bool gx_fresh, gw_fresh, gb_fresh;
} em_conv_grads;
void em_conv2d_ref_backward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                            const em_tensor *gy, const em_conv_grads *out);

/* x (N, C, H, W) any strides -> y (N, C, OH, OW) contiguous; gy contiguous,
 * gx contiguous (overwritten when fresh, else accumulated). Max takes the
 * first largest element of a window in row-major order, or the last NaN,
 * like PyTorch; backward finds it again from x and routes the gradient
 * there. */
void em_max_pool2d_ref_forward(const em_pool_geom *g, const em_tensor *x, em_tensor *y);
void em_max_pool2d_ref_backward(const em_pool_geom *g, const em_tensor *x, const em_tensor *gy,
                                em_tensor *gx, bool fresh);
void em_avg_pool2d_ref_forward(const em_pool_geom *g, const em_tensor *x, em_tensor *y);
void em_avg_pool2d_ref_backward(const em_pool_geom *g, const em_tensor *gy, em_tensor *gx,
                                bool fresh);
