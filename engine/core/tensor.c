/* tensor.c: dtypes, shapes, persistent tensors and element access. */
#include "core-private.h"
#include "em-backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const size_t em_dtype_sizes_[EM_DTYPE_COUNT] = {4, 8, 4, 8, 1};
static const char *const dtype_names[EM_DTYPE_COUNT] = {"f32", "f64", "i32", "i64", "u8"};

size_t em_dtype_size(em_dtype dt) { return em_dtype_sizes_[dt]; }
const char *em_dtype_name(em_dtype dt) {
  return (unsigned)dt < EM_DTYPE_COUNT ? dtype_names[dt] : "?";
}
bool em_dtype_is_float(em_dtype dt) { return dt == EM_DTYPE_F32 || dt == EM_DTYPE_F64; }

int64_t em_tensor_numel(const em_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

size_t em_tensor_nbytes(const em_tensor *t) {
  return (size_t)em_tensor_numel(t) * em_dtype_size(t->dtype);
}

bool em_tensor_is_contiguous(const em_tensor *t) {
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != expect) return false;
    expect *= t->shape[i];
  }
  return true;
}

bool em_tensor_same_shape(const em_tensor *a, const em_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

const char *em_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
  size_t used = 0;
  used += (size_t)snprintf(buf + used, n - used, "[");
  for (int i = 0; i < ndim && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

const char *em_format_bytes(int64_t bytes, char *buf, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while ((v >= 1024 || v <= -1024) && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0) snprintf(buf, n, "%lld B", (long long)bytes);
  else snprintf(buf, n, "%.1f %s", v, units[u]);
  return buf;
}

void em_set_contiguous_strides(em_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    t->stride[i] = s;
    s *= t->shape[i];
  }
}

/* Rejects negative dims and sizes whose byte count overflows or exceeds
 * what any machine this runs on could hold (1 TiB). */
bool em_checked_nbytes(em_dtype dt, int ndim, const int64_t *shape, size_t *out,
                       em_error *err) {
  if (ndim < 0 || ndim > EM_MAX_DIMS) {
    em_error_set(err, EM_ERR_INVALID, "a tensor has %d dimensions; at most %d are supported",
                 ndim, EM_MAX_DIMS);
    return false;
  }
  const int64_t limit = (int64_t)1 << 40;
  int64_t n = (int64_t)em_dtype_size(dt);
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      em_error_set(err, EM_ERR_INVALID, "dimension %d has negative size %lld", i,
                   (long long)shape[i]);
      return false;
    }
    if (shape[i] > 0 && n > limit / shape[i]) {
      char buf[160];
      em_error_set(err, EM_ERR_NOMEM, "a tensor of shape %s is too large to allocate",
                   em_shape_str(ndim, shape, buf, sizeof buf));
      return false;
    }
    n *= shape[i];
  }
  *out = (size_t)n;
  return true;
}

em_tensor *em_tensor_new(em_dtype dt, int ndim, const int64_t *shape, em_error *err) {
  size_t nbytes;
  if (!em_checked_nbytes(dt, ndim, shape, &nbytes, err)) return NULL;
  em_tensor *t = calloc(1, sizeof *t);
  void *data = em_alloc(nbytes); /* counted in em_memory_stats, like PyTorch's */
  if (!t || !data) {
    free(t);
    em_free(data, nbytes);
    em_error_set(err, EM_ERR_NOMEM, "out of memory allocating %zu bytes", nbytes);
    return NULL;
  }
  t->dtype = dt;
  t->ndim = ndim;
  if (ndim > 0) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  em_set_contiguous_strides(t);
  memset(data, 0, nbytes);
  t->data = data;
  t->flags = EM_TENSOR_PERSISTENT | EM_TENSOR_OWNS_DATA;
  return t;
}

void em_tensor_free(em_tensor *t) {
  if (!t) return;
  EM_ASSERT(t->flags & EM_TENSOR_PERSISTENT);
  if (t->grad) em_tensor_free(t->grad);
  if (t->flags & EM_TENSOR_OWNS_DATA) em_device_free(t->device, t->data, em_tensor_nbytes(t));
  free(t);
}

void em_tensor_set_requires_grad(em_tensor *t, bool on) {
  if (on) t->flags |= EM_TENSOR_REQUIRES_GRAD;
  else t->flags &= ~(uint32_t)EM_TENSOR_REQUIRES_GRAD;
}

static double load_as_double(const void *p, em_dtype dt) {
  switch (dt) {
  case EM_DTYPE_F32: return *(const float *)p;
  case EM_DTYPE_F64: return *(const double *)p;
  case EM_DTYPE_I32: return *(const int32_t *)p;
  case EM_DTYPE_I64: return (double)*(const int64_t *)p;
  case EM_DTYPE_U8: return *(const uint8_t *)p;
  default: EM_ASSERT(!"bad dtype");
  }
}

static void store_double(void *p, em_dtype dt, double v) {
  switch (dt) {
  case EM_DTYPE_F32: *(float *)p = (float)v; break;
  case EM_DTYPE_F64: *(double *)p = v; break;
  case EM_DTYPE_I32: *(int32_t *)p = (int32_t)v; break;
  case EM_DTYPE_I64: *(int64_t *)p = (int64_t)v; break;
  case EM_DTYPE_U8: *(uint8_t *)p = (uint8_t)v; break;
  default: EM_ASSERT(!"bad dtype");
  }
}

/* One element of a device tensor, copied to the host (NaN when an
 * out-of-memory error left it without data). */
static double device_load(const em_tensor *t, int64_t off) {
  if (!t->data) return NAN;
  char one[8];
  size_t es = em_dtype_size(t->dtype);
  em_backend_of(t)->memcpy_d2h(t->device.index, one, (const char *)t->data + off * (int64_t)es, es);
  return load_as_double(one, t->dtype);
}

double em_tensor_get(const em_tensor *t, const int64_t *index) {
  int64_t off = t->offset;
  for (int i = 0; i < t->ndim; i++) off += index[i] * t->stride[i];
  if (em_on_device(t)) return device_load(t, off);
  return load_as_double((const char *)t->data + off * (int64_t)em_dtype_size(t->dtype), t->dtype);
}

double em_tensor_item(const em_tensor *t) {
  EM_ASSERT(em_tensor_numel(t) == 1);
  if (em_on_device(t)) return device_load(t, t->offset);
  return load_as_double(em_tensor_ptr(t), t->dtype);
}

/* Walks every element of t in row-major order, calling back with the
 * element offset. Shared by copy and fill. */
void em_strided_copy(em_tensor *dst, const em_tensor *src) {
  int64_t n = em_tensor_numel(dst);
  EM_ASSERT(n == em_tensor_numel(src));
  if (n == 0) return;
  if (em_on_device(dst) || em_on_device(src)) {
    em_device_copy(dst, src);
    return;
  }
  size_t ds = em_dtype_size(dst->dtype), ss = em_dtype_size(src->dtype);
  if (dst->dtype == src->dtype && em_tensor_is_contiguous(dst) && em_tensor_is_contiguous(src)) {
    memmove(em_tensor_ptr(dst), em_tensor_ptr(src), (size_t)n * ds);
    return;
  }
  int64_t di[EM_MAX_DIMS] = {0}, si[EM_MAX_DIMS] = {0};
  int64_t doff = dst->offset, soff = src->offset;
  char *dd = dst->data;
  const char *sd = src->data;
  bool same = dst->dtype == src->dtype;
  for (int64_t k = 0; k < n; k++) {
    if (same) memcpy(dd + doff * (int64_t)ds, sd + soff * (int64_t)ss, ds);
    else store_double(dd + doff * (int64_t)ds, dst->dtype,
                      load_as_double(sd + soff * (int64_t)ss, src->dtype));
    for (int d = dst->ndim - 1; d >= 0; d--) {
      if (++di[d] < dst->shape[d]) { doff += dst->stride[d]; break; }
      doff -= dst->stride[d] * (dst->shape[d] - 1);
      di[d] = 0;
    }
    for (int d = src->ndim - 1; d >= 0; d--) {
      if (++si[d] < src->shape[d]) { soff += src->stride[d]; break; }
      soff -= src->stride[d] * (src->shape[d] - 1);
      si[d] = 0;
    }
  }
}

void em_tensor_copy_(em_tensor *dst, const em_tensor *src) { em_strided_copy(dst, src); }

void em_tensor_fill_(em_tensor *t, double v) {
  int64_t n = em_tensor_numel(t);
  if (n == 0) return;
  if (em_on_device(t)) {
    if (t->data) EM_KCALL(em_kernels_of(t), fill, t, v);
    return;
  }
  size_t es = em_dtype_size(t->dtype);
  char one[8];
  store_double(one, t->dtype, v);
  if (em_tensor_is_contiguous(t)) { /* fast paths for the common dtypes */
    if (t->dtype == EM_DTYPE_F32) {
      float *p = em_f32(t), x = (float)v;
      for (int64_t k = 0; k < n; k++) p[k] = x;
      return;
    }
    if (t->dtype == EM_DTYPE_F64) {
      double *p = em_f64(t);
      for (int64_t k = 0; k < n; k++) p[k] = v;
      return;
    }
  }
  int64_t idx[EM_MAX_DIMS] = {0}, off = t->offset;
  char *d = t->data;
  for (int64_t k = 0; k < n; k++) {
    memcpy(d + off * (int64_t)es, one, es);
    for (int i = t->ndim - 1; i >= 0; i--) {
      if (++idx[i] < t->shape[i]) { off += t->stride[i]; break; }
      off -= t->stride[i] * (t->shape[i] - 1);
      idx[i] = 0;
    }
  }
}
