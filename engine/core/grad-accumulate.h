/* grad-accumulate.h: moving gradients into gradients, on every device:
 * copies and adds into views, sums down to a broadcast shape, contiguous
 * copies. Backward functions (the op front-end's and the device layer's)
 * are made of these and of kernels.
 *
 * Each goes through the kernels of its tensors' device (the backend
 * table, em-backend.h: copy, sum_to, binary), so it serves the CPU and
 * every device alike; all tensors of one call live on one device (a
 * mismatch is a broken invariant). After a device error (em-device.h)
 * they skip their kernels like the ops do. None records a tape node:
 * backward runs with autograd off. */
#pragma once

#include "em-tensor.h"

/* dst = src and dst += src, src broadcastable to dst's shape, any strides
 * (dst not broadcast). Copy takes any dtype (same for both); add takes
 * the device's float types. */
void em_copy_into(em_tensor *dst, const em_tensor *src);
void em_add_into(em_tensor *dst, const em_tensor *src);
/* Adds g (x's shape, any strides) into x's gradient, or copies it there
 * when the gradient is fresh. Does nothing when x needs no grad. */
void em_grad_add(em_tensor *x, const em_tensor *g);
/* em_grad_add for a gradient g that is dead after the caller (the
 * node's output gradient, or a view of it, seen in x's shape): when x has
 * no gradient yet, x takes g itself instead of a copy (a reshape, a
 * contiguous, an add's first input: autograd.c's walk). */
void em_grad_pass(em_tensor *x, em_tensor *g);
/* out += g summed over the dims where out (which g broadcasts from, e.g.
 * keepdim sizes 1) is broadcast. */
void em_sum_into_broadcast(em_tensor *out, const em_tensor *g);
/* g summed over the dimensions that broadcasting expanded, giving a
 * tensor of `shape` (for backward of broadcasting ops); g itself when the
 * shapes already agree. g must not need grad (backward runs without the
 * tape). */
em_tensor *em_reduce_to_shape(em_tensor *g, int ndim, const int64_t *shape);
/* t itself when contiguous, else a contiguous copy (no tape node). */
em_tensor *em_contiguous_nograd(em_tensor *t);

/* Gradient buffers for kernels that write (not accumulate) a gradient:
 * em_grad_buffer_begin gives the gradient buffer of x itself when it is
 * fresh, else a temporary of x's shape that em_grad_buffer_end adds into
 * it. NULL when x needs no gradient. */
typedef struct {
  em_tensor *x, *grad, *buf;
} em_grad_buffer;
em_tensor *em_grad_buffer_begin(em_tensor *x, em_grad_buffer *g);
void em_grad_buffer_end(em_grad_buffer *g);
