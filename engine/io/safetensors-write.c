/* safetensors-write.c: atomic safetensors saving (temporary file in the
 * same folder, fsync, rename, fsync of the folder). */
#include "io-private.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : n;
    ssize_t w = write(fd, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= (size_t)w;
  }
  return true;
}

/* Writes t's elements row-major: straight from memory when contiguous,
 * else through a contiguous copy. */
static em_status write_tensor(int fd, const char *tmp, const char *name, const em_tensor *t,
                              em_error *err) {
  size_t nbytes = em_tensor_nbytes(t);
  if (nbytes == 0) return EM_OK;
  if (em_tensor_is_contiguous(t)) {
    if (!write_all(fd, em_tensor_ptr(t), nbytes))
      return em_error_set(err, EM_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    return EM_OK;
  }
  em_tensor c = {.dtype = t->dtype, .ndim = t->ndim};
  memcpy(c.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    c.stride[i] = s;
    s *= t->shape[i];
  }
  c.data = malloc(nbytes);
  if (!c.data)
    return em_error_set(err, EM_ERR_NOMEM, "out of memory copying tensor '%s' (%zu bytes)", name,
                        nbytes);
  em_tensor_copy_(&c, t);
  bool ok = write_all(fd, c.data, nbytes);
  int e = errno;
  free(c.data);
  if (!ok) return em_error_set(err, EM_ERR_IO, "cannot write '%s': %s", tmp, strerror(e));
  return EM_OK;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Names present, unique, and not the metadata key. */
static em_status check_names(const char *path, int n, const char *const *names, const char *what,
                             bool tensors, em_error *err) {
  if (n == 0) return EM_OK;
  const char **sorted = malloc(sizeof(char *) * (size_t)n);
  if (!sorted) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  em_status st = EM_OK;
  for (int i = 0; i < n && st == EM_OK; i++) {
    if (!names[i])
      st = em_error_set(err, EM_ERR_INVALID, "saving '%s': %s %d has no name", path, what, i);
    else if (tensors && strcmp(names[i], "__metadata__") == 0)
      st = em_error_set(err, EM_ERR_INVALID, "saving '%s': a tensor may not be named "
                        "'__metadata__'", path);
    sorted[i] = names[i];
  }
  if (st == EM_OK) {
    qsort(sorted, (size_t)n, sizeof(char *), cmp_str);
    for (int i = 1; i < n && st == EM_OK; i++)
      if (strcmp(sorted[i - 1], sorted[i]) == 0)
        st = em_error_set(err, EM_ERR_INVALID, "saving '%s': two %ss are named '%.200s'", path,
                          what, sorted[i]);
  }
  free(sorted);
  return st;
}

/* The JSON header, padded with spaces so that the data starts 8-aligned. */
static em_status build_header(const char *path, int n, const em_named_tensor *ts, int n_meta,
                              const char *const *keys, const char *const *values, char **out,
                              size_t *out_len, em_error *err) {
  json_t *root = json_object();
  em_status st = root ? EM_OK : em_error_set(err, EM_ERR_NOMEM, "out of memory");
  if (st == EM_OK && n_meta > 0) {
    json_t *meta = json_object();
    for (int i = 0; meta && i < n_meta && st == EM_OK; i++) {
      if (!values[i])
        st = em_error_set(err, EM_ERR_INVALID, "saving '%s': metadata '%.200s' has no value",
                          path, keys[i]);
      else if (json_object_set_new(meta, keys[i], json_string(values[i])) != 0)
        st = em_error_set(err, EM_ERR_INVALID, "saving '%s': metadata '%.200s' is not valid "
                          "UTF-8", path, keys[i]);
    }
    if (!meta) st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
    else json_object_set_new(root, "__metadata__", meta);
  }
  uint64_t off = 0;
  for (int i = 0; i < n && st == EM_OK; i++) {
    const em_tensor *t = ts[i].t;
    if (!t) {
      st = em_error_set(err, EM_ERR_INVALID, "saving '%s': tensor '%.200s' is NULL", path,
                        ts[i].name);
      break;
    }
    const char *dn = em_st_dtype_name(t->dtype);
    EM_ASSERT(dn);
    json_t *shape = json_array();
    for (int d = 0; shape && d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    uint64_t nb = em_tensor_nbytes(t);
    json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", dn, "shape", shape, "data_offsets",
                          (json_int_t)off, (json_int_t)(off + nb));
    if (!e || json_object_set_new(root, ts[i].name, e) != 0)
      st = em_error_set(err, EM_ERR_INVALID, "saving '%s': tensor name '%.200s' is not valid "
                        "UTF-8", path, ts[i].name);
    off += nb;
  }
  char *text = NULL;
  if (st == EM_OK) {
    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
  }
  json_decref(root);
  if (st != EM_OK) return st;
  size_t len = strlen(text), padded = (len + 7) / 8 * 8;
  char *buf = malloc(padded);
  if (!buf) {
    free(text);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  }
  memcpy(buf, text, len);
  memset(buf + len, ' ', padded - len);
  free(text);
  *out = buf;
  *out_len = padded;
  return EM_OK;
}

em_status em_safetensors_save(const char *path, int n, const em_named_tensor *ts, int n_meta,
                              const char *const *meta_keys, const char *const *meta_values,
                              em_error *err) {
  if (!path) return em_error_set(err, EM_ERR_INVALID, "safetensors: no file name given");
  if (n < 0 || n_meta < 0 || (n > 0 && !ts) || (n_meta > 0 && (!meta_keys || !meta_values)))
    return em_error_set(err, EM_ERR_INVALID, "saving '%s': bad tensor or metadata list", path);
  const char **names = n ? malloc(sizeof(char *) * (size_t)n) : NULL;
  if (n && !names) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  for (int i = 0; i < n; i++) names[i] = ts[i].name;
  em_status st = check_names(path, n, names, "tensor", true, err);
  free(names);
  if (st == EM_OK) st = check_names(path, n_meta, meta_keys, "metadata key", false, err);
  if (st != EM_OK) return st;

  char *header = NULL;
  size_t hlen = 0;
  st = build_header(path, n, ts, n_meta, meta_keys, meta_values, &header, &hlen, err);
  if (st != EM_OK) return st;

  em_atomic_file f;
  if ((st = em_atomic_begin(path, &f, err)) != EM_OK) {
    free(header);
    return st;
  }
  uint8_t len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  if (!write_all(f.fd, len8, 8) || !write_all(f.fd, header, hlen))
    st = em_error_set(err, EM_ERR_IO, "cannot write '%s': %s", f.tmp, strerror(errno));
  free(header);
  for (int i = 0; i < n && st == EM_OK; i++) st = write_tensor(f.fd, f.tmp, ts[i].name, ts[i].t, err);
  return em_atomic_end(&f, st, err);
}
