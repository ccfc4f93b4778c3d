/* cifar10.c: CIFAR-10 binary batches (1 label byte + 3072 pixel bytes per
 * record, the pixels (3, 32, 32) row-major), gzip or plain. Pixels stay
 * bytes in memory and become pixel/255 floats per sample. */
#include "data-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CIFAR_PIXELS = 3 * 32 * 32, CIFAR_RECORD = 1 + CIFAR_PIXELS, CIFAR_CLASSES = 10 };

typedef struct {
  int64_t n;
  uint8_t *pixels; /* (N, 3, 32, 32) */
  uint8_t *labels; /* (N) */
} cifar_set;

static int64_t cifar_len(const void *impl) { return ((const cifar_set *)impl)->n; }

static int cifar_sample_shape(const void *impl, int64_t *shape) {
  shape[0] = 3;
  shape[1] = 32;
  shape[2] = 32;
  return 3;
}

static int cifar_num_classes(const void *impl) { return CIFAR_CLASSES; }

static em_status cifar_get(const void *impl, int64_t i, float *x /* (3, 32, 32) */, int64_t *y,
                           em_error *err) {
  const cifar_set *s = impl;
  const uint8_t *p = s->pixels + i * CIFAR_PIXELS;
  em_pixels_to_unit(p, x, CIFAR_PIXELS);
  *y = s->labels[i];
  return EM_OK;
}

static void cifar_prefetch(const void *impl, int64_t i) {
  const cifar_set *s = impl;
  em_prefetch_bytes(s->pixels + i * CIFAR_PIXELS, CIFAR_PIXELS);
}

static void cifar_free(void *impl) {
  cifar_set *s = impl;
  if (!s) return;
  free(s->pixels);
  free(s->labels);
  free(s);
}

static const em_dataset_vtable cifar_vtable = {
  .kind = "cifar10",
  .len = cifar_len,
  .sample_shape = cifar_sample_shape,
  .num_classes = cifar_num_classes,
  .get = cifar_get,
  .free = cifar_free,
  .prefetch = cifar_prefetch,
};

/* Appends one file's records to s. */
static em_status cifar_append(cifar_set *s, const char *path, em_error *err) {
  gzFile f;
  em_status st = em_gz_open(path, &f, err);
  if (st != EM_OK) return st;
  /* Its size first, read through without keeping it: a file of the wrong
   * size is refused before it is loaded (a gzip of 1.5 MB held 1.5 GB). */
  uint64_t size;
  if ((st = em_gz_measure(f, path, &size, err)) != EM_OK) {
    gzclose(f);
    return st;
  }
  if (size == 0 || size % CIFAR_RECORD != 0) {
    gzclose(f);
    if (size == 0) return em_error_set(err, EM_ERR_FORMAT, "'%s' is empty", path);
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is %llu bytes, not a whole number of %d-byte "
                        "CIFAR-10 records (truncated or not a CIFAR-10 batch)", path,
                        (unsigned long long)size, CIFAR_RECORD);
  }
  uint8_t *data;
  size_t n = (size_t)size;
  st = em_gz_read_alloc(f, path, n, "its records", &data, err); /* that size, no more */
  bool plain = gzdirect(f);
  gzclose(f);
  if (st == EM_OK && !plain && (st = em_gz_check_trailing(path, err)) != EM_OK) free(data);
  if (st != EM_OK) return st;
  int64_t m = (int64_t)(n / CIFAR_RECORD);
  for (int64_t r = 0; r < m; r++) {
    uint8_t label = data[r * CIFAR_RECORD];
    if (label >= CIFAR_CLASSES) {
      free(data);
      return em_error_set(err, EM_ERR_FORMAT, "'%s': label %d of record %lld is out of range "
                          "(CIFAR-10 has %d classes)", path, label, (long long)r,
                          CIFAR_CLASSES);
    }
  }
  /* Labels out and pixels packed within the file's own buffer (each
   * record's pixels move left, never over a record not yet moved), so
   * the file is never held twice. */
  uint8_t *lb = realloc(s->labels, (size_t)(s->n + m));
  if (!lb) {
    free(data);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory loading '%s'", path);
  }
  s->labels = lb;
  for (int64_t r = 0; r < m; r++) {
    s->labels[s->n + r] = data[r * CIFAR_RECORD];
    memmove(data + r * CIFAR_PIXELS, data + r * CIFAR_RECORD + 1, CIFAR_PIXELS);
  }
  size_t bytes = (size_t)m * CIFAR_PIXELS;
  uint8_t *packed = realloc(data, bytes);
  if (packed) data = packed;
  if (s->n == 0) {
    free(s->pixels);
    s->pixels = data;
  } else {
    uint8_t *px = realloc(s->pixels, (size_t)s->n * CIFAR_PIXELS + bytes);
    if (!px) {
      free(data);
      return em_error_set(err, EM_ERR_NOMEM, "out of memory loading '%s'", path);
    }
    s->pixels = px;
    memcpy(px + (size_t)s->n * CIFAR_PIXELS, data, bytes);
    free(data);
  }
  s->n += m;
  return EM_OK;
}

em_dataset *em_dataset_cifar10_files(int n_files, const char *const *paths, em_error *err) {
  if (n_files < 1) {
    em_error_set(err, EM_ERR_INVALID, "CIFAR-10: no files given");
    return NULL;
  }
  cifar_set *s = calloc(1, sizeof *s);
  if (!s) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  for (int i = 0; i < n_files; i++) {
    if (cifar_append(s, paths[i], err) != EM_OK) {
      cifar_free(s);
      return NULL;
    }
  }
  return em_dataset_new(&cifar_vtable, s, err);
}

int em_dataset_cifar10_dir_files(const char *dir, bool train, char (*paths)[4096]) {
  int n = train ? 5 : 1;
  for (int i = 0; i < n; i++) {
    int w = train ? snprintf(paths[i], sizeof paths[i], "%s/data_batch_%d.bin", dir, i + 1)
                  : snprintf(paths[i], sizeof paths[i], "%s/test_batch.bin", dir);
    if (w < 0 || (size_t)w >= sizeof paths[i]) return -1;
  }
  return n;
}

em_dataset *em_dataset_cifar10(const char *dir, bool train, em_error *err) {
  if (!dir) {
    em_error_set(err, EM_ERR_INVALID, "CIFAR-10: no folder given");
    return NULL;
  }
  char names[5][4096];
  const char *paths[5];
  int n = em_dataset_cifar10_dir_files(dir, train, names);
  if (n < 0) {
    em_error_set(err, EM_ERR_INVALID, "folder name too long: '%.200s...'", dir);
    return NULL;
  }
  for (int i = 0; i < n; i++) paths[i] = names[i];
  return em_dataset_cifar10_files(n, paths, err);
}

/* The built-in kind "cifar10": the folder of the binary version. */
static em_dataset *cifar_open(const char *dir, bool train, const void *want, em_error *err) {
  (void)want;
  return em_dataset_cifar10(dir, train, err);
}

static em_status cifar_files(const char *dir, bool train, char (*found)[4096], int room,
                             int *n, em_error *err) {
  (void)room; /* at least 5 */
  *n = em_dataset_cifar10_dir_files(dir, train, found);
  if (*n < 0) return em_error_set(err, EM_ERR_INVALID, "folder name too long: '%.200s...'", dir);
  return EM_OK;
}

const em_dataset_builtin em_dataset_kind_cifar10 = {
  .type = {.name = "cifar10", .help = "CIFAR-10's binary version: data_batch_1.bin ... "
           "test_batch.bin", .open = cifar_open},
  .needs_dir = true,
  .dir_hint = "the folder with data_batch_1.bin ... test_batch.bin",
  .files = cifar_files,
};
