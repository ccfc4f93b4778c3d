/* shape.h: shape arithmetic the op front-end and the device layer share:
 * broadcasting, reduced shapes, negative dims, and a contiguous tensor
 * viewed with another shape, and how a strided matrix is handed to a GEMM.
 * No data is touched. */
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

/* How the 2-D matrix of t's dims (d0, d1), starting offset_elems elements
 * past t's first, is handed to a GEMM: row-major with leading dimension
 * ld, transposed or not. Returns false when neither stride is 1 (the
 * caller makes it contiguous first). */
typedef struct {
  const void *ptr;
  bool trans;
  int64_t ld;
} em_blas_operand;
bool em_blas_operand_of(const em_tensor *t, int d0, int d1, int64_t offset_elems,
                        em_blas_operand *out);
