/* tensor-device.c: persistent tensors on devices, moving tensors between
 * devices (em_to_device with its backward, em_tensor_move_), host
 * uploads and downloads, and copies that involve a device. */
#include "core-private.h"
#include "em-backend.h"

#include <stdlib.h>
#include <string.h>

em_tensor *em_tensor_new_on(em_device d, em_dtype dt, int ndim, const int64_t *shape,
                            em_error *err) {
  if (d.kind == EM_DEVICE_CPU) return em_tensor_new(dt, ndim, shape, err);
  if (em_device_check(d, err)) return NULL;
  size_t nbytes;
  if (!em_checked_nbytes(dt, ndim, shape, &nbytes, err)) return NULL;
  em_tensor *t = calloc(1, sizeof *t);
  if (!t) {
    em_error_set(err, EM_ERR_NOMEM, "out of host memory for a tensor struct");
    return NULL;
  }
  t->dtype = dt;
  t->ndim = ndim;
  if (ndim > 0) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  em_set_contiguous_strides(t);
  t->device = d;
  t->data = em_device_alloc(d, nbytes, "a persistent tensor");
  if (!t->data) {
    free(t);
    /* Reported through err: a persistent allocation is not part of a step. */
    em_device_error_take(err);
    return NULL;
  }
  if (nbytes) EM_KCALL(em_backend_of(t)->k, fill, t, 0.0);
  t->flags = EM_TENSOR_PERSISTENT | EM_TENSOR_OWNS_DATA;
  return t;
}

void em_tensor_upload(em_tensor *dst, const void *host) {
  EM_ASSERT(em_tensor_is_contiguous(dst));
  size_t n = em_tensor_nbytes(dst);
  if (!n) return;
  if (!em_on_device(dst)) memcpy(em_tensor_ptr(dst), host, n);
  else if (dst->data) em_backend_of(dst)->memcpy_h2d(dst->device.index, em_tensor_ptr(dst), host, n);
}

void em_tensor_download(const em_tensor *src, void *host) {
  EM_ASSERT(em_tensor_is_contiguous(src));
  size_t n = em_tensor_nbytes(src);
  if (!n) return;
  if (!em_on_device(src)) memcpy(host, em_tensor_ptr(src), n);
  else if (src->data) em_backend_of(src)->memcpy_d2h(src->device.index, host, em_tensor_ptr(src), n);
  else memset(host, 0, n); /* no data after an out-of-memory error */
}

/* A contiguous struct of t's dtype and shape over data on device d. */
static em_tensor contiguous_over(const em_tensor *t, em_device d, void *data) {
  em_tensor c = *t;
  c.offset = 0;
  c.data = data;
  c.device = d;
  c.grad = NULL;
  c.grad_fn = NULL;
  c.flags = 0;
  em_set_contiguous_strides(&c);
  return c;
}

/* t with the geometry of shape (same numel; t contiguous). */
static em_tensor reshaped(const em_tensor *t, int ndim, const int64_t *shape) {
  em_tensor v = *t;
  v.ndim = ndim;
  if (ndim) memcpy(v.shape, shape, sizeof(int64_t) * (size_t)ndim);
  em_set_contiguous_strides(&v);
  return v;
}

/* dst = src on one device: the kernels' copy takes a src broadcastable to
 * dst, so a src of another shape (same numel) goes through a contiguous
 * temporary. */
static void same_device_copy(em_tensor *dst, const em_tensor *src) {
  if (!dst->data || !src->data) return;
  const em_kernels *k = em_kernels_of(dst);
  if (em_tensor_same_shape(dst, src)) {
    EM_KCALL(k, copy, dst, src);
    return;
  }
  if (em_tensor_is_contiguous(src)) {
    em_tensor v = reshaped(src, dst->ndim, dst->shape);
    EM_KCALL(k, copy, dst, &v);
    return;
  }
  size_t nbytes = em_tensor_nbytes(src);
  void *tmp = em_device_alloc(src->device, nbytes, "a copy");
  if (!tmp) return; /* the sticky error reports it */
  em_tensor c = contiguous_over(src, src->device, tmp);
  EM_KCALL(k, copy, &c, src);
  em_tensor v = reshaped(&c, dst->ndim, dst->shape);
  EM_KCALL(k, copy, dst, &v);
  em_device_free(src->device, tmp, nbytes);
}

void em_device_copy(em_tensor *dst, const em_tensor *src) {
  if (em_device_eq(dst->device, src->device)) {
    same_device_copy(dst, src);
    return;
  }
  if (em_on_device(dst) && !dst->data) return;
  if (em_on_device(src) && !src->data) return;
  if (dst->dtype == src->dtype && em_tensor_is_contiguous(dst) && em_tensor_is_contiguous(src) &&
      (!em_on_device(dst) || !em_on_device(src))) {
    /* host <-> device straight (a batch from the loader's pinned memory
     * goes up asynchronously) */
    if (em_on_device(dst)) em_tensor_upload(dst, em_tensor_ptr(src));
    else em_tensor_download(src, em_tensor_ptr(dst));
    return;
  }
  /* Across devices, through a contiguous host buffer of src's dtype. */
  size_t nbytes = em_tensor_nbytes(src);
  void *host = malloc(nbytes ? nbytes : 1);
  EM_ASSERT(host && "out of host memory staging a device copy");
  em_tensor h = contiguous_over(src, em_device_cpu(), host);
  if (!em_on_device(src)) {
    em_strided_copy(&h, src);
  } else if (em_tensor_is_contiguous(src)) {
    em_tensor_download(src, host);
  } else {
    void *tmp = em_device_alloc(src->device, nbytes, "a copy");
    if (!tmp) {
      free(host);
      return;
    }
    em_tensor c = contiguous_over(src, src->device, tmp);
    EM_KCALL(em_kernels_of(src), copy, &c, src);
    em_tensor_download(&c, host);
    em_device_free(src->device, tmp, nbytes);
  }
  em_tensor hv = reshaped(&h, dst->ndim, dst->shape);
  if (!em_on_device(dst)) {
    em_strided_copy(dst, &hv);
  } else if (em_tensor_is_contiguous(dst) && dst->dtype == src->dtype) {
    em_tensor_upload(dst, host);
  } else {
    /* Upload as src's dtype, then convert / scatter on the device. */
    void *tmp = em_device_alloc(dst->device, nbytes, "a copy");
    if (tmp) {
      em_tensor c = contiguous_over(&hv, dst->device, tmp);
      em_tensor_upload(&c, host);
      EM_KCALL(em_kernels_of(dst), copy, dst, &c);
      em_device_free(dst->device, tmp, nbytes);
    }
  }
  free(host);
}

em_status em_tensor_move_(em_tensor *t, em_device d, em_error *err) {
  EM_ASSERT(t->flags & EM_TENSOR_PERSISTENT);
  if (em_device_eq(t->device, d)) return EM_OK;
  em_status st = em_device_check(d, err);
  if (st) return st;
  size_t nbytes = em_tensor_nbytes(t);
  void *data = d.kind == EM_DEVICE_CPU ? em_alloc(nbytes)
                                       : em_device_alloc(d, nbytes, "moving a tensor");
  if (!data) {
    if (d.kind == EM_DEVICE_CPU)
      return em_error_set(err, EM_ERR_NOMEM, "out of memory moving %zu bytes to the CPU", nbytes);
    return em_device_error_take(err);
  }
  if (t->grad) {
    st = em_tensor_move_(t->grad, d, err);
    if (st) {
      em_device_free(d, data, nbytes);
      return st;
    }
  }
  em_tensor fresh = contiguous_over(t, d, data);
  em_device_copy(&fresh, t);
  if (t->flags & EM_TENSOR_OWNS_DATA) em_device_free(t->device, t->data, nbytes);
  t->data = data;
  t->device = d;
  t->offset = 0;
  em_set_contiguous_strides(t);
  t->flags |= EM_TENSOR_OWNS_DATA;
  return EM_OK;
}

/* Backward of em_to_device: the gradient goes back to x's device. */
static void to_device_backward(em_node *n) {
  em_tensor *x = n->in[0], *g = n->out->grad;
  em_tensor *gx = em_empty_on(x->device, g->dtype, g->ndim, g->shape);
  em_device_copy(gx, g);
  em_grad_accumulate(x, gx);
}

em_tensor *em_to_device(em_tensor *x, em_device d) {
  if (em_device_eq(x->device, d)) return x;
  em_tensor *y = em_empty_on(d, x->dtype, x->ndim, x->shape);
  em_device_copy(y, x);
  if (em_needs_grad(1, &x)) em_record("to_device", to_device_backward, y, 1, &x);
  return y;
}
