/* idx.c: IDX files (MNIST, Fashion-MNIST), gzip or plain, validated on
 * load. Pixels stay bytes in memory and become floats per sample.
 *
 * An IDX file is a 4-byte magic (0, 0, dtype, ndim), ndim big-endian
 * u32 sizes, then the values row-major. */
#include "data-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

typedef struct {
  int64_t n;
  int ndim;
  int64_t shape[EM_MAX_DIMS]; /* of one sample */
  int64_t numel;              /* of one sample */
  int num_classes;
  uint8_t *pixels;            /* (N, ...sample) */
  uint8_t *labels;            /* (N) */
} idx_set;

static const char *idx_type_name(int code) {
  switch (code) {
  case 0x08: return "unsigned byte";
  case 0x09: return "signed byte";
  case 0x0B: return "short";
  case 0x0C: return "int";
  case 0x0D: return "float";
  case 0x0E: return "double";
  default: return NULL;
  }
}

/* Reads and checks the header; dims gets the ndim sizes. */
static em_status idx_header(gzFile f, const char *path, int min_dims, int max_dims, int *ndim,
                            int64_t *dims, em_error *err) {
  uint8_t magic[4];
  em_status st = em_gz_read_exact(f, path, magic, 4, "the IDX header", err);
  if (st != EM_OK) return st;
  if (magic[0] != 0 || magic[1] != 0)
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is not an IDX file (bad magic number "
                        "0x%02x%02x%02x%02x)", path, magic[0], magic[1], magic[2], magic[3]);
  const char *tn = idx_type_name(magic[2]);
  if (!tn)
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is not an IDX file (bad magic number "
                        "0x%02x%02x%02x%02x: unknown value type 0x%02x)", path, magic[0],
                        magic[1], magic[2], magic[3], magic[2]);
  if (magic[2] != 0x08)
    return em_error_set(err, EM_ERR_UNSUPPORTED, "'%s' holds %s values (type 0x%02x); only "
                        "unsigned bytes (0x08) are supported", path, tn, magic[2]);
  if (magic[3] < min_dims || magic[3] > max_dims) {
    if (min_dims == max_dims)
      return em_error_set(err, EM_ERR_FORMAT, "'%s' has %d dimensions; expected %d", path,
                          magic[3], min_dims);
    return em_error_set(err, EM_ERR_FORMAT, "'%s' has %d dimensions; expected %d to %d", path,
                        magic[3], min_dims, max_dims);
  }
  *ndim = magic[3];
  uint8_t be[4 * EM_MAX_DIMS];
  char what[64]; /* the counts in the message are of the bytes after the 4 read */
  snprintf(what, sizeof what, "the rest of the IDX header (%d dimension sizes)", *ndim);
  st = em_gz_read_exact(f, path, be, 4 * (size_t)*ndim, what, err);
  if (st != EM_OK) return st;
  for (int i = 0; i < *ndim; i++) {
    const uint8_t *p = be + 4 * i;
    dims[i] = ((int64_t)p[0] << 24) | ((int64_t)p[1] << 16) | ((int64_t)p[2] << 8) | p[3];
  }
  return EM_OK;
}

static int64_t idx_len(const void *impl) { return ((const idx_set *)impl)->n; }

static int idx_sample_shape(const void *impl, int64_t *shape) {
  const idx_set *s = impl;
  memcpy(shape, s->shape, sizeof(int64_t) * (size_t)s->ndim);
  return s->ndim;
}

static int idx_num_classes(const void *impl) { return ((const idx_set *)impl)->num_classes; }

static em_status idx_get(const void *impl, int64_t i, float *x /* (...sample) */, int64_t *y,
                         em_error *err) {
  const idx_set *s = impl;
  const uint8_t *p = s->pixels + i * s->numel;
  em_pixels_to_unit(p, x, s->numel);
  *y = s->labels[i];
  return EM_OK;
}

static void idx_prefetch(const void *impl, int64_t i) {
  const idx_set *s = impl;
  em_prefetch_bytes(s->pixels + i * s->numel, s->numel);
}

static void idx_free(void *impl) {
  idx_set *s = impl;
  if (!s) return;
  free(s->pixels);
  free(s->labels);
  free(s);
}

static const em_dataset_vtable idx_vtable = {
  .kind = "idx",
  .len = idx_len,
  .sample_shape = idx_sample_shape,
  .num_classes = idx_num_classes,
  .get = idx_get,
  .free = idx_free,
  .prefetch = idx_prefetch,
};

/* Past this many values a header is surely corrupt (a terabyte of pixels).
 * Values are read as they arrive, so a smaller false claim costs only a
 * truncated-file message, never the allocation it claims. */
#define IDX_MAX_VALUES ((int64_t)1 << 40)

em_status em_idx_read(const char *path, const char *items, int min_dims, int max_dims,
                      int *ndim, int64_t *dims, uint8_t **data, em_error *err) {
  *data = NULL;
  if (min_dims < 1 || max_dims > EM_MAX_DIMS || min_dims > max_dims)
    return em_error_set(err, EM_ERR_INVALID, "IDX '%s': bad dimension bounds %d to %d", path,
                        min_dims, max_dims);
  gzFile f;
  em_status st = em_gz_open(path, &f, err);
  if (st != EM_OK) return st;
  st = idx_header(f, path, min_dims, max_dims, ndim, dims, err);
  if (st != EM_OK) goto out;
  /* one item's values first (bounded even when there are no items, so
   * that a caller may multiply them), then the items' */
  int64_t item = 1, total;
  bool absurd = false;
  for (int i = 1; i < *ndim && !absurd; i++) {
    if (dims[i] == 0) {
      st = em_error_set(err, EM_ERR_FORMAT, "'%s' has a dimension of size 0 (dimension %d of "
                        "its header)", path, i + 1);
      goto out;
    }
    if (item > IDX_MAX_VALUES / dims[i]) absurd = true;
    else item *= dims[i];
  }
  if (absurd || (dims[0] > 0 && item > IDX_MAX_VALUES / dims[0])) {
    st = em_error_set(err, EM_ERR_FORMAT, "'%s' claims an absurd amount of data (its header "
                      "promises more than %lld values)", path, (long long)IDX_MAX_VALUES);
    goto out;
  }
  total = item * dims[0];
  /* No file holds more than its size, or deflate's 1032:1 of it: a larger
   * claim is a truncated or corrupt file, said before anything is
   * allocated or inflated for it (a small gzip bomb could otherwise
   * fill the memory). */
  struct stat sb;
  size_t head = 4 + 4 * (size_t)*ndim;
  if (stat(path, &sb) == 0) {
    double room = (double)sb.st_size * (gzdirect(f) ? 1 : EM_DEFLATE_MAX_RATIO);
    if ((double)total + (double)head > room) {
      st = em_error_set(err, EM_ERR_FORMAT, "'%s' is truncated or corrupt: its header promises "
                        "%lld %s (%lld values), more than a %s file of %lld bytes can hold", path,
                        (long long)dims[0], items ? items : "items", (long long)total,
                        gzdirect(f) ? "plain" : "gzip", (long long)sb.st_size);
      goto out;
    }
  }
  /* a gzip file of exactly the size the header says: all at once */
  uint8_t *whole = em_gz_whole(path, head + (size_t)total);
  if (whole) {
    memmove(whole, whole + head, (size_t)total);
    *data = whole;
    goto out;
  }
  char what[96];
  snprintf(what, sizeof what, "%lld %s", (long long)dims[0], items ? items : "items");
  st = em_gz_read_alloc(f, path, (size_t)total, what, data, err);
  if (st != EM_OK) goto out;
  st = em_gz_expect_end(f, path, what, err);
  if (st == EM_OK && !gzdirect(f)) st = em_gz_check_trailing(path, err);
out:
  gzclose(f);
  if (st != EM_OK) {
    free(*data);
    *data = NULL;
  }
  return st;
}

static em_status idx_load_images(idx_set *s, const char *path, em_error *err) {
  int ndim;
  int64_t dims[EM_MAX_DIMS];
  em_status st = em_idx_read(path, "images", 2, EM_MAX_DIMS - 1, &ndim, dims, &s->pixels, err);
  if (st != EM_OK) return st;
  s->n = dims[0];
  if (s->n == 0) return em_error_set(err, EM_ERR_FORMAT, "'%s' holds no images", path);
  if (ndim == 3) { /* (N, H, W): one channel */
    s->ndim = 3;
    s->shape[0] = 1;
    s->shape[1] = dims[1];
    s->shape[2] = dims[2];
  } else {
    s->ndim = ndim - 1;
    memcpy(s->shape, dims + 1, sizeof(int64_t) * (size_t)s->ndim);
  }
  s->numel = 1;
  for (int i = 0; i < s->ndim; i++) s->numel *= s->shape[i];
  return EM_OK;
}

static em_status idx_load_labels(idx_set *s, const char *path, const char *images_path,
                                 int num_classes, em_error *err) {
  int ndim;
  int64_t n;
  em_status st = em_idx_read(path, "labels", 1, 1, &ndim, &n, &s->labels, err);
  if (st != EM_OK) return st;
  if (n != s->n)
    return em_error_set(err, EM_ERR_FORMAT, "labels file '%s' holds %lld labels but images file "
                        "'%s' holds %lld images", path, (long long)n, images_path,
                        (long long)s->n);
  int max_label = 0;
  for (int64_t i = 0; i < n; i++) {
    if (num_classes > 0 && s->labels[i] >= num_classes)
      return em_error_set(err, EM_ERR_FORMAT, "'%s': label %d of sample %lld is out of range "
                          "for %d classes", path, s->labels[i], (long long)i, num_classes);
    if (s->labels[i] > max_label) max_label = s->labels[i];
  }
  s->num_classes = num_classes > 0 ? num_classes : max_label + 1;
  return EM_OK;
}

em_dataset *em_dataset_idx(const char *images_path, const char *labels_path, int num_classes,
                           em_error *err) {
  idx_set *s = calloc(1, sizeof *s);
  if (!s) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  if (idx_load_images(s, images_path, err) != EM_OK ||
      idx_load_labels(s, labels_path, images_path, num_classes, err) != EM_OK) {
    idx_free(s);
    return NULL;
  }
  return em_dataset_new(&idx_vtable, s, err);
}

/* The two files of a split in dir, as the openers below name them: the
 * .gz names, or the names without .gz where only those are there (a
 * folder of decompressed files, as many downloads leave them). */
static int idx_dir_files(const char *dir, bool train, char (*paths)[4096]) {
  const char *split = train ? "train" : "t10k";
  int a = snprintf(paths[0], sizeof paths[0], "%s/%s-images-idx3-ubyte.gz", dir, split);
  int b = snprintf(paths[1], sizeof paths[1], "%s/%s-labels-idx1-ubyte.gz", dir, split);
  if (a < 0 || b < 0 || (size_t)a >= sizeof paths[0] || (size_t)b >= sizeof paths[1]) return -1;
  for (int i = 0; i < 2; i++) {
    char plain[4096];
    size_t n = strlen(paths[i]) - 3; /* without ".gz" */
    memcpy(plain, paths[i], n);
    plain[n] = '\0';
    if (access(paths[i], F_OK) != 0 && access(plain, F_OK) == 0) memcpy(paths[i], plain, n + 1);
  }
  return 2;
}

static em_dataset *idx_from_dir(const char *dir, bool train, int num_classes, em_error *err) {
  char paths[2][4096];
  if (idx_dir_files(dir, train, paths) < 0) {
    em_error_set(err, EM_ERR_INVALID, "folder name too long: '%.200s...'", dir);
    return NULL;
  }
  return em_dataset_idx(paths[0], paths[1], num_classes, err);
}

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

int em_dataset_fashion_mnist_files(const char *dir, bool train, char (*paths)[4096]) {
  return idx_dir_files(dir ? dir : FASHION_MNIST_DIR, train, paths);
}

em_dataset *em_dataset_fashion_mnist(const char *dir, bool train, em_error *err) {
  return idx_from_dir(dir ? dir : FASHION_MNIST_DIR, train, 10, err);
}

em_dataset *em_dataset_mnist(const char *dir, bool train, em_error *err) {
  if (!dir) {
    em_error_set(err, EM_ERR_INVALID, "MNIST: no folder given");
    return NULL;
  }
  return idx_from_dir(dir, train, 10, err);
}

/* The built-in kind "fashion-mnist": its folder, or FASHION_MNIST_DIR. */
static em_dataset *fmnist_open(const char *dir, bool train, const void *want, em_error *err) {
  (void)want;
  return em_dataset_fashion_mnist(dir, train, err);
}

static em_status fmnist_files(const char *dir, bool train, char (*found)[4096], int room,
                              int *n, em_error *err) {
  (void)room; /* at least 5 */
  *n = em_dataset_fashion_mnist_files(dir, train, found);
  if (*n < 0) return em_error_set(err, EM_ERR_INVALID, "folder name too long: '%.200s...'", dir);
  return EM_OK;
}

const em_dataset_builtin em_dataset_kind_fashion_mnist = {
  .type = {.name = "fashion-mnist", .help = "Fashion-MNIST's IDX files (gzip or plain), "
           "by default from " FASHION_MNIST_DIR, .open = fmnist_open},
  .files = fmnist_files,
};
