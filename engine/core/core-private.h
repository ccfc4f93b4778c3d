/* core-private.h: what the files of engine/core share. */
#pragma once

#include "em-tensor.h"

/* Allocates n bytes from the current scope's arena (8-byte aligned,
 * released with the scope). */
void *em_scope_arena_alloc(size_t n);
/* Appends a node to the current scope's tape. */
em_node *em_scope_new_node(void);
/* The current scope's tape, oldest first. */
em_node **em_scope_tape(int64_t *count);
/* A scoped tensor struct with contiguous strides and no data. */
em_tensor *em_scope_tensor_struct(em_dtype dt, int ndim, const int64_t *shape);
void em_set_contiguous_strides(em_tensor *t);
/* Copies (with dtype conversion) src into dst; same numel, any strides. */
void em_strided_copy(em_tensor *dst, const em_tensor *src);
/* Forgets the current scope's tape (after backward consumed it). */
void em_scope_tape_clear(void);
/* The byte count of a tensor of that shape, or false (err filled) when a
 * size is negative or absurd (over 1 TiB). */
bool em_checked_nbytes(em_dtype dt, int ndim, const int64_t *shape, size_t *out, em_error *err);
/* em_strided_copy when either tensor lives on a device (tensor-device.c):
 * same device through the kernels, across devices through the backend's
 * copies (staging non-contiguous or converting copies on the host). */
void em_device_copy(em_tensor *dst, const em_tensor *src);
