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
/* Memory released during backward (autograd.c's walk): the count of
 * allocations the current scope holds, a mark; em_scope_release_since
 * frees those made after mark whose pointers are not in keep[0, n_keep)
 * (a backward function's temporaries, not the gradients it made);
 * em_scope_release frees the scope's allocation p (false, touching
 * nothing, when the scope has none at p). */
int64_t em_scope_alloc_mark(void);
void em_scope_release_since(int64_t mark, void *const *keep, int n_keep);
bool em_scope_release(void *p);
/* During the backward walk: x's gradient becomes g itself (a view of g,
 * no copy), and g's memory is x's from then on (autograd.c keeps it when
 * it frees the node's). Only where x has no gradient yet, is not
 * persistent, and g is contiguous in x's shape, dtype and device; false,
 * touching nothing, otherwise (and outside a walk). */
bool em_grad_adopt(em_tensor *x, em_tensor *g);
/* Forgets the current scope's tape (after backward consumed it). */
void em_scope_tape_clear(void);
/* The byte count of a tensor of that shape, or false (err filled) when a
 * size is negative or absurd (over 1 TiB). */
bool em_checked_nbytes(em_dtype dt, int ndim, const int64_t *shape, size_t *out, em_error *err);
/* em_strided_copy when either tensor lives on a device (tensor-device.c):
 * same device through the kernels, across devices through the backend's
 * copies (staging non-contiguous or converting copies on the host). */
void em_device_copy(em_tensor *dst, const em_tensor *src);
