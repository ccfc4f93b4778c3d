/* conv-geom.h: the geometry of a 2-D convolution and of a 2-D pool
 * (output sizes, per-group sizes, pooling windows) from the tensors' shapes
 * and the op's parameters, with the checks of those parameters.
 *
 * A header of its own, not a folder's private one: the op front-end
 * (engine/ops/conv2d.c, pool2d.c), the CPU's kernels (fast and reference)
 * and the reference device (engine/device/ref-linalg.c) all size
 * convolutions and pools with it. Host C over em_tensor shapes (not a
 * C11/CUDA body like kern-*.h: CUDA's pools use kern-pool.h's
 * em_kpool_geom, which follows the same rules). Defined in conv-ref.c and
 * pool-ref.c beside the reference loops. */
#pragma once

#include "em-ops.h"

/* Output geometry and per-group sizes, from x (N, C, H, W) and
 * w (K, C/G, kh, kw); asserts the parameters (stride, dilation >= 1,
 * padding >= 0, groups dividing C and K, a kernel within the padded
 * input). */
typedef struct {
  int64_t N, C, H, W, K, kh, kw, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, G, Cg, Kg;
} em_conv_geom;
void em_conv_geom_init(em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                       const em_conv2d_params *p);

/* x (N, C, H, W) under a pool's kernel, stride and padding (no dilation,
 * no ceil mode); asserts the parameters as PyTorch does. */
typedef struct {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, OH, OW;
  bool include_pad; /* avg: padded positions count in the divisor */
} em_pool_geom;
void em_pool_geom_init(em_pool_geom *g, const em_tensor *x, const em_pool2d_params *p);
/* Window of output (oy, ox) clipped to the input: rows [*h0, *h1),
 * columns [*w0, *w1); returns the divisor avg pool uses (PyTorch's rule:
 * the window clipped to the padded input, or to the input itself when
 * padding does not count). */
int64_t em_pool_window(const em_pool_geom *g, int64_t oy, int64_t ox, int64_t *h0, int64_t *h1,
                       int64_t *w0, int64_t *w1);
