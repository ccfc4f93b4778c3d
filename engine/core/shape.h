/* shape.h: shape arithmetic the op front-end and the device layer share:
 * broadcasting, reduced shapes, negative dims, and a contiguous tensor
 * viewed with another shape. No data is touched. */
#pragma once

#include "em-tensor.h"

#include <stdbool.h>

/* The broadcast shape of a and b into out (returns its ndim), or -1 when
 * they do not broadcast. */
int em_broadcast_shape(const em_tensor *a, const em_tensor *b, int64_t *out);
/* The result shape of reducing x's dim d (size 1 there with keepdim, else
 * dropped) into shape; returns its ndim. */
int em_reduced_shape(const em_tensor *x, int d, bool keepdim, int64_t *shape);
/* A dim index counted from the end when negative (asserts range). */
int em_dim_norm(int dim, int ndim);
/* A view of contiguous t with another shape of the same numel (metadata
 * only, no tape node). */
em_tensor *em_view_as(em_tensor *t, int ndim, const int64_t *shape);
