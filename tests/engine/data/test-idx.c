/* test-idx.c: IDX datasets: the real Fashion-MNIST (values checked with
 * /usr/bin/python3, gzip and numpy), and bad files made in a temporary
 * folder: each one an error naming the file, none a crash. */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "data-test-util.h"
#include "em-data.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Sums of pixel values (as bytes), of image 0, of the last image, and
 * sum over i of i * (sum of image i) mod 2^61, plus the first labels,
 * as read by gzip + numpy. */
typedef struct {
  bool train;
  int64_t n;
  int64_t sum, sum0, sum_last, weighted;
  int pixel_14_14;
  int labels[12];
} fmnist_ref;

static const fmnist_ref fmnist_refs[2] = {
  {true, 60000, 3431114169, 76247, 16684, 103052018522002, 217,
   {9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9}},
  {false, 10000, 573469082, 33456, 24390, 2866805934443, 110,
   {9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5}},
};

static void check_fmnist(const fmnist_ref *r) {
  em_error err = {0};
  em_dataset *ds = em_dataset_fashion_mnist(NULL, r->train, &err);
  g_assert_nonnull(ds);
  g_assert_cmpint(em_dataset_len(ds), ==, r->n);
  int64_t shape[EM_MAX_DIMS];
  g_assert_cmpint(em_dataset_sample_shape(ds, shape), ==, 3);
  g_assert_cmpint(shape[0], ==, 1);
  g_assert_cmpint(shape[1], ==, 28);
  g_assert_cmpint(shape[2], ==, 28);
  g_assert_cmpint(em_dataset_num_classes(ds), ==, 10);
  g_assert_cmpstr(em_dataset_kind(ds), ==, "idx");
  float x[784];
  int64_t y, sum = 0, counts[10] = {0};
  uint64_t weighted = 0;
  for (int64_t i = 0; i < r->n; i++) {
    g_assert_cmpint(em_dataset_get(ds, i, x, &y, &err), ==, EM_OK);
    int64_t s = 0;
    for (int k = 0; k < 784; k++) {
      g_assert_true(x[k] >= 0.0f && x[k] <= 1.0f);
      s += lrintf(x[k] * 255.0f);
    }
    if (i < 12) g_assert_cmpint(y, ==, r->labels[i]);
    if (i == 0) {
      g_assert_cmpint(s, ==, r->sum0);
      g_assert_cmpfloat(x[14 * 28 + 14], ==, (float)r->pixel_14_14 / 255.0f);
    }
    if (i == r->n - 1) g_assert_cmpint(s, ==, r->sum_last);
    sum += s;
    weighted = (weighted + (uint64_t)i * (uint64_t)s) % (UINT64_C(1) << 61);
    counts[y]++;
  }
  g_assert_cmpint(sum, ==, r->sum);
  g_assert_cmpint((int64_t)weighted, ==, r->weighted);
  for (int k = 0; k < 10; k++) g_assert_cmpint(counts[k], ==, r->n / 10);

  /* Normalisation: (p/255 - mean) / std. */
  float mean = 0.2860f, std = 0.3530f;
  g_assert_cmpint(em_dataset_set_normalize(ds, 1, &mean, &std, &err), ==, EM_OK);
  g_assert_cmpint(em_dataset_get(ds, 0, x, &y, &err), ==, EM_OK);
  g_assert_cmpfloat(x[14 * 28 + 14], ==, ((float)r->pixel_14_14 / 255.0f - mean) / std);
  float bad = 0.0f;
  g_assert_cmpint(em_dataset_set_normalize(ds, 1, &mean, &bad, &err), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_dataset_set_normalize(ds, 3, (float[]){0, 0, 0}, (float[]){1, 1, 1}, &err),
                  ==, EM_ERR_INVALID);
  dt_assert_msg(err.msg, "1 channels", NULL);
  em_dataset_free(ds);
}

static bool have_fmnist(void) {
  if (g_file_test(FMNIST_DIR "/train-images-idx3-ubyte.gz", G_FILE_TEST_EXISTS)) return true;
  g_test_skip("Fashion-MNIST is not installed in " FMNIST_DIR);
  return false;
}

static void test_fmnist_train(void) {
  if (have_fmnist()) check_fmnist(&fmnist_refs[0]);
}

static void test_fmnist_test(void) {
  if (!have_fmnist()) return;
  check_fmnist(&fmnist_refs[1]);
  /* A folder without the files names the file it looked for. */
  em_error err = {0};
  g_assert_null(em_dataset_fashion_mnist("/nonexistent-ember", false, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_IO);
  dt_assert_msg(err.msg, "/nonexistent-ember/t10k-images-idx3-ubyte.gz", "cannot open", NULL);
}

/* ---- small generated IDX files ------------------------------------------ */

/* An IDX file: magic (0, 0, type, ndim), big-endian dims, then data. */
static GByteArray *idx_bytes(int type, int ndim, const uint32_t *dims, const uint8_t *data,
                             size_t n) {
  GByteArray *b = g_byte_array_new();
  uint8_t head[4] = {0, 0, (uint8_t)type, (uint8_t)ndim};
  g_byte_array_append(b, head, 4);
  for (int i = 0; i < ndim; i++) {
    uint8_t be[4] = {dims[i] >> 24, dims[i] >> 16, dims[i] >> 8, dims[i]};
    g_byte_array_append(b, be, 4);
  }
  if (n) g_byte_array_append(b, data, (guint)n);
  return b;
}

typedef struct {
  char *dir;
  GByteArray *images, *labels; /* 5 images of 2 x 3, labels 0..4 */
} idx_fixture;

static void idx_setup(idx_fixture *f, gconstpointer data) {
  f->dir = dt_tmpdir();
  uint8_t px[30], lb[5] = {0, 1, 2, 3, 4};
  for (int i = 0; i < 30; i++) px[i] = (uint8_t)(i * 8);
  f->images = idx_bytes(0x08, 3, (uint32_t[]){5, 2, 3}, px, 30);
  f->labels = idx_bytes(0x08, 1, (uint32_t[]){5}, lb, 5);
}

static void idx_teardown(idx_fixture *f, gconstpointer data) {
  g_byte_array_unref(f->images);
  g_byte_array_unref(f->labels);
  dt_tmpdir_free(f->dir);
}

/* Loads (images, labels) written as given; returns the dataset or NULL. */
static em_dataset *idx_try(idx_fixture *f, const GByteArray *im, size_t im_len, bool gz,
                           const GByteArray *lb, int classes, em_error *err, char **im_path) {
  char *ip = dt_write(f->dir, gz ? "img.gz" : "img", im->data, im_len, gz);
  char *lp = dt_write(f->dir, "lab.gz", lb->data, lb->len, true);
  em_dataset *ds = em_dataset_idx(ip, lp, classes, err);
  g_free(lp);
  if (im_path) *im_path = ip;
  else g_free(ip);
  return ds;
}

static void test_idx_small(idx_fixture *f, gconstpointer data) {
  for (int gz = 0; gz < 2; gz++) {
    em_error err = {0};
    em_dataset *ds = idx_try(f, f->images, f->images->len, gz, f->labels, 0, &err, NULL);
    g_assert_nonnull(ds);
    g_assert_cmpint(em_dataset_len(ds), ==, 5);
    g_assert_cmpint(em_dataset_num_classes(ds), ==, 5);
    g_assert_cmpint(em_dataset_sample_numel(ds), ==, 6);
    float x[6];
    int64_t y;
    g_assert_cmpint(em_dataset_get(ds, 3, x, &y, &err), ==, EM_OK);
    g_assert_cmpint(y, ==, 3);
    for (int k = 0; k < 6; k++) g_assert_cmpfloat(x[k], ==, (float)((18 + k) * 8) / 255.0f);
    g_assert_cmpint(em_dataset_get(ds, 5, x, &y, &err), ==, EM_ERR_INVALID);
    dt_assert_msg(err.msg, "out of range", NULL);
    em_dataset_free(ds);
  }
  /* (N, D) images give samples of shape (D). */
  GByteArray *flat = idx_bytes(0x08, 2, (uint32_t[]){5, 6}, f->images->data + 16, 30);
  em_error err = {0};
  em_dataset *ds = idx_try(f, flat, flat->len, true, f->labels, 10, &err, NULL);
  g_assert_nonnull(ds);
  int64_t shape[EM_MAX_DIMS];
  g_assert_cmpint(em_dataset_sample_shape(ds, shape), ==, 1);
  g_assert_cmpint(shape[0], ==, 6);
  g_assert_cmpint(em_dataset_num_classes(ds), ==, 10);
  em_dataset_free(ds);
  g_byte_array_unref(flat);
}

/* A Fashion-MNIST folder of decompressed files (the names without .gz)
 * reads as the .gz one does (it was "cannot open ...gz"). */
static void test_idx_plain_folder(idx_fixture *f, gconstpointer data) {
  g_free(dt_write(f->dir, "t10k-images-idx3-ubyte", f->images->data, f->images->len, false));
  g_free(dt_write(f->dir, "t10k-labels-idx1-ubyte", f->labels->data, f->labels->len, false));
  em_error err = {0};
  em_dataset *ds = em_dataset_fashion_mnist(f->dir, false, &err);
  g_assert_nonnull(ds);
  g_assert_cmpint(em_dataset_len(ds), ==, 5);
  em_dataset_free(ds);
  char paths[2][4096];
  g_assert_cmpint(em_dataset_fashion_mnist_files(f->dir, false, paths), ==, 2);
  g_assert_true(g_str_has_suffix(paths[0], "/t10k-images-idx3-ubyte"));
  /* the training split is not there: its .gz name is the one said */
  g_assert_null(em_dataset_fashion_mnist(f->dir, true, &err));
  dt_assert_msg(err.msg, "train-images-idx3-ubyte.gz", NULL);
}

static void test_idx_truncated(idx_fixture *f, gconstpointer data) {
  for (int gz = 0; gz < 2; gz++) {
    em_error err = {0};
    char *ip;
    g_assert_null(idx_try(f, f->images, f->images->len - 7, gz, f->labels, 10, &err, &ip));
    g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
    dt_assert_msg(err.msg, ip, "truncated", "5 images", NULL);
    g_free(ip);
    /* Cut inside the header. */
    g_assert_null(idx_try(f, f->images, 10, gz, f->labels, 10, &err, &ip));
    dt_assert_msg(err.msg, ip, "truncated", "header", NULL);
    g_free(ip);
  }
  /* A gzip stream cut short. */
  char *p = dt_write(f->dir, "img.gz", f->images->data, f->images->len, true);
  size_t n;
  guint8 *gzb = dt_read(p, &n);
  char *cut = dt_write(f->dir, "cut.gz", gzb, n - 12, false);
  char *lp = dt_write(f->dir, "lab.gz", f->labels->data, f->labels->len, true);
  em_error err = {0};
  g_assert_null(em_dataset_idx(cut, lp, 10, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, cut, NULL);
  g_assert_true(strstr(err.msg, "truncated") || strstr(err.msg, "corrupt"));
  g_free(gzb);
  g_free(cut);
  g_free(lp);
  g_free(p);
}

static void test_idx_bad_header(idx_fixture *f, gconstpointer data) {
  em_error err = {0};
  char *ip;
  GByteArray *bad = g_byte_array_new();
  g_byte_array_append(bad, f->images->data, f->images->len);
  bad->data[0] = 0x12;
  bad->data[1] = 0x34;
  g_assert_null(idx_try(f, bad, bad->len, true, f->labels, 10, &err, &ip));
  g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, ip, "bad magic number 0x12340803", NULL);
  g_free(ip);
  bad->data[0] = bad->data[1] = 0;
  bad->data[2] = 0x0D; /* floats */
  g_assert_null(idx_try(f, bad, bad->len, true, f->labels, 10, &err, &ip));
  g_assert_cmpint(err.status, ==, EM_ERR_UNSUPPORTED);
  dt_assert_msg(err.msg, ip, "float", "only unsigned bytes", NULL);
  g_free(ip);
  bad->data[2] = 0x42;
  g_assert_null(idx_try(f, bad, bad->len, true, f->labels, 10, &err, NULL));
  dt_assert_msg(err.msg, "unknown value type 0x42", NULL);
  bad->data[2] = 0x08;
  bad->data[3] = 1; /* images with one dimension */
  g_assert_null(idx_try(f, bad, bad->len, true, f->labels, 10, &err, NULL));
  dt_assert_msg(err.msg, "1 dimensions", NULL);
  g_byte_array_unref(bad);

  /* A header that claims far more than the file holds: a truncated file,
   * not a huge allocation. */
  GByteArray *huge = idx_bytes(0x08, 3, (uint32_t[]){0x7fffffff, 4096, 4096}, NULL, 0);
  g_assert_null(idx_try(f, huge, huge->len, true, f->labels, 10, &err, NULL));
  g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "absurd", NULL);
  g_byte_array_unref(huge);
  huge = idx_bytes(0x08, 3, (uint32_t[]){1000000, 100, 100}, f->images->data + 16, 30);
  g_assert_null(idx_try(f, huge, huge->len, true, f->labels, 10, &err, NULL));
  dt_assert_msg(err.msg, "truncated", "1000000 images", NULL);
  g_byte_array_unref(huge);

  /* No items but absurd items: the item size is bounded all the same
   * (callers multiply it). */
  huge = idx_bytes(0x08, 3, (uint32_t[]){0, 0xffffffffu, 0xffffffffu}, NULL, 0);
  g_assert_null(idx_try(f, huge, huge->len, false, f->labels, 10, &err, NULL));
  dt_assert_msg(err.msg, "absurd", NULL);
  g_byte_array_unref(huge);
  /* A gzip file promising more than deflate can make of its size (a bomb
   * or a lie) is refused before anything is inflated or allocated. */
  {
    int nd;
    int64_t dims[EM_MAX_DIMS];
    uint8_t *v = NULL;
    huge = idx_bytes(0x08, 3, (uint32_t[]){4000000, 28, 28}, NULL, 0);
    char *hp = dt_write(f->dir, "bomb.gz", huge->data, huge->len, true);
    double t0 = g_get_monotonic_time();
    g_assert_cmpint(em_idx_read(hp, "images", 1, 3, &nd, dims, &v, &err), ==, EM_ERR_FORMAT);
    g_assert_cmpfloat(g_get_monotonic_time() - t0, <, 2e6);
    dt_assert_msg(err.msg, hp, "truncated or corrupt", "4000000 images", "gzip file", NULL);
    g_assert_null(v);
    g_free(hp);
    g_byte_array_unref(huge);
  }

  /* Extra bytes after the data. */
  GByteArray *extra = g_byte_array_new();
  g_byte_array_append(extra, f->images->data, f->images->len);
  g_byte_array_append(extra, (const guint8 *)"xyz", 3);
  g_assert_null(idx_try(f, extra, extra->len, false, f->labels, 10, &err, &ip));
  dt_assert_msg(err.msg, ip, "extra bytes", NULL);
  g_free(ip);
  g_byte_array_unref(extra);
}

static void test_idx_labels(idx_fixture *f, gconstpointer data) {
  em_error err = {0};
  char *ip = dt_write(f->dir, "img.gz", f->images->data, f->images->len, true);
  /* Counts that disagree. */
  GByteArray *four = idx_bytes(0x08, 1, (uint32_t[]){4}, (uint8_t[]){0, 1, 2, 3}, 4);
  char *lp = dt_write(f->dir, "four.gz", four->data, four->len, true);
  g_assert_null(em_dataset_idx(ip, lp, 10, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, lp, ip, "4 labels", "5 images", NULL);
  g_free(lp);
  g_byte_array_unref(four);
  /* A label out of range. */
  GByteArray *big = idx_bytes(0x08, 1, (uint32_t[]){5}, (uint8_t[]){0, 1, 12, 3, 4}, 5);
  lp = dt_write(f->dir, "big.gz", big->data, big->len, true);
  g_assert_null(em_dataset_idx(ip, lp, 10, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, lp, "label 12 of sample 2", "out of range", NULL);
  /* ... which is fine when the classes are counted from the labels. */
  em_dataset *ds = em_dataset_idx(ip, lp, 0, &err);
  g_assert_nonnull(ds);
  g_assert_cmpint(em_dataset_num_classes(ds), ==, 13);
  em_dataset_free(ds);
  g_free(lp);
  g_byte_array_unref(big);
  /* A labels file with two dimensions. */
  GByteArray *two = idx_bytes(0x08, 2, (uint32_t[]){5, 1}, (uint8_t[]){0, 1, 2, 3, 4}, 5);
  lp = dt_write(f->dir, "two.gz", two->data, two->len, true);
  g_assert_null(em_dataset_idx(ip, lp, 10, &err));
  dt_assert_msg(err.msg, lp, "2 dimensions; expected 1", NULL);
  g_free(lp);
  g_byte_array_unref(two);
  /* Missing files and folders. */
  g_assert_null(em_dataset_idx(ip, "/nonexistent-ember/labels.gz", 10, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_IO);
  dt_assert_msg(err.msg, "/nonexistent-ember/labels.gz", "No such file", NULL);
  g_assert_null(em_dataset_idx(f->dir, ip, 10, &err));
  dt_assert_msg(err.msg, f->dir, "not a regular file", NULL);
  g_free(ip);
}

/* em_idx_read, the reader under the dataset and `ember predict`: the
 * dimension bounds, empty and zero-sized files, and its messages. */
static void test_idx_read(idx_fixture *f, gconstpointer data) {
  em_error err = {0};
  int nd;
  int64_t dims[EM_MAX_DIMS];
  uint8_t *v;
  char *ip = dt_write(f->dir, "img.gz", f->images->data, f->images->len, true);
  g_assert_cmpint(em_idx_read(ip, "images", 1, 3, &nd, dims, &v, &err), ==, EM_OK);
  g_assert_cmpint(nd, ==, 3);
  g_assert_cmpint(dims[0], ==, 5);
  g_assert_cmpint(dims[1], ==, 2);
  g_assert_cmpint(dims[2], ==, 3);
  g_assert_cmpint(v[29], ==, 29 * 8);
  free(v);
  /* Bounds: a count outside them names both. */
  g_assert_cmpint(em_idx_read(ip, "images", 1, 2, &nd, dims, &v, &err), ==, EM_ERR_FORMAT);
  g_assert_null(v);
  dt_assert_msg(err.msg, ip, "3 dimensions; expected 1 to 2", NULL);
  g_assert_cmpint(em_idx_read(ip, "labels", 1, 1, &nd, dims, &v, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "3 dimensions; expected 1", NULL);
  g_assert_cmpint(em_idx_read(ip, "images", 4, EM_MAX_DIMS, &nd, dims, &v, &err), ==,
                  EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "expected 4 to 8", NULL);
  /* Unusable bounds are the caller's error. */
  g_assert_cmpint(em_idx_read(ip, "images", 0, 3, &nd, dims, &v, &err), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_idx_read(ip, "images", 3, 2, &nd, dims, &v, &err), ==, EM_ERR_INVALID);
  g_assert_cmpint(em_idx_read(ip, "images", 1, EM_MAX_DIMS + 1, &nd, dims, &v, &err), ==,
                  EM_ERR_INVALID);
  g_free(ip);
  /* No items is a file (the dataset refuses it, predict takes it). */
  GByteArray *empty = idx_bytes(0x08, 3, (uint32_t[]){0, 28, 28}, NULL, 0);
  ip = dt_write(f->dir, "empty", empty->data, empty->len, false);
  g_assert_cmpint(em_idx_read(ip, "images", 1, 3, &nd, dims, &v, &err), ==, EM_OK);
  g_assert_cmpint(dims[0], ==, 0);
  free(v);
  char *lp = dt_write(f->dir, "lab.gz", f->labels->data, f->labels->len, true);
  g_assert_null(em_dataset_idx(ip, lp, 10, &err));
  dt_assert_msg(err.msg, ip, "holds no images", NULL);
  g_free(lp);
  g_free(ip);
  g_byte_array_unref(empty);
  /* A size of 0 past the first dimension is not. */
  GByteArray *zero = idx_bytes(0x08, 3, (uint32_t[]){5, 0, 3}, NULL, 0);
  ip = dt_write(f->dir, "zero", zero->data, zero->len, false);
  g_assert_cmpint(em_idx_read(ip, "images", 1, 3, &nd, dims, &v, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, ip, "dimension of size 0", "dimension 2", NULL);
  g_free(ip);
  g_byte_array_unref(zero);
  /* Truncated and extra-bytes messages count the items by their name. */
  ip = dt_write(f->dir, "cut", f->labels->data, f->labels->len - 1, false);
  g_assert_cmpint(em_idx_read(ip, "labels", 1, 1, &nd, dims, &v, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, ip, "truncated", "5 labels", NULL);
  g_free(ip);
  ip = dt_write(f->dir, "cut", f->labels->data, f->labels->len - 1, false);
  g_assert_cmpint(em_idx_read(ip, NULL, 1, 1, &nd, dims, &v, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "5 items", NULL);
  g_free(ip);
  g_assert_cmpint(em_idx_read("/nonexistent-ember/x", "labels", 1, 1, &nd, dims, &v, &err), ==,
                  EM_ERR_IO);
  dt_assert_msg(err.msg, "/nonexistent-ember/x", NULL);
}

/* gzip in its forms: one member (read at once by libdeflate), two members
 * and a plain file (read through zlib) give the same values; trailing
 * zeros after the member (zlib ignores them) too, or an error. */
static void test_idx_gzip_forms(idx_fixture *f, gconstpointer data) {
  enum { N = 100, H = 28, W = 28 };
  GRand *r = g_rand_new_with_seed(11);
  uint8_t *px = g_malloc(N * H * W);
  for (int i = 0; i < N * H * W; i++) px[i] = (uint8_t)(g_rand_int_range(r, 0, 16) * 17);
  GByteArray *im = idx_bytes(0x08, 3, (uint32_t[]){N, H, W}, px, N * H * W);
  char *one = dt_write(f->dir, "one.gz", im->data, im->len, true);
  char *plain = dt_write(f->dir, "plain", im->data, im->len, false);
  char *a = dt_write(f->dir, "a.gz", im->data, 1000, true);
  char *b = dt_write(f->dir, "b.gz", im->data + 1000, im->len - 1000, true);
  size_t na, nb, none;
  guint8 *ga = dt_read(a, &na), *gb = dt_read(b, &nb), *g1 = dt_read(one, &none);
  GByteArray *cat = g_byte_array_new();
  g_byte_array_append(cat, ga, (guint)na);
  g_byte_array_append(cat, gb, (guint)nb);
  char *two = dt_write(f->dir, "two.gz", cat->data, cat->len, false);
  GByteArray *pad = g_byte_array_new();
  g_byte_array_append(pad, g1, (guint)none);
  static const guint8 zeros[64];
  g_byte_array_append(pad, zeros, sizeof zeros);
  char *tail = dt_write(f->dir, "tail.gz", pad->data, pad->len, false);
  g_byte_array_set_size(pad, (guint)none);
  g_byte_array_append(pad, (const guint8 *)"appended text\n", 14);
  char *text = dt_write(f->dir, "text.gz", pad->data, pad->len, false);
  GByteArray *twotail = g_byte_array_new(); /* two members, then one stray byte */
  g_byte_array_append(twotail, cat->data, cat->len);
  g_byte_array_append(twotail, (const guint8 *)"x", 1);
  char *two_x = dt_write(f->dir, "two-x.gz", twotail->data, twotail->len, false);
  g_byte_array_unref(twotail);
  const char *paths[] = {one, plain, two, tail, text, two_x};
  for (unsigned i = 0; i < G_N_ELEMENTS(paths); i++) {
    em_error err = {0};
    int nd;
    int64_t dims[EM_MAX_DIMS];
    uint8_t *v = NULL;
    em_status st = em_idx_read(paths[i], "images", 1, 3, &nd, dims, &v, &err);
    if (i >= 3) { /* bytes after the last member: refused, not dropped without a word */
      g_assert_cmpint(st, ==, EM_ERR_FORMAT);
      dt_assert_msg(err.msg, paths[i], "trailing data after the gzip stream", NULL);
      g_assert_null(v);
      continue;
    }
    if (st != EM_OK) g_error("%s: %s", paths[i], err.msg);
    g_assert_cmpint(nd, ==, 3);
    g_assert_cmpint(dims[0] * dims[1] * dims[2], ==, N * H * W);
    g_assert_cmpint(memcmp(v, px, N * H * W), ==, 0);
    free(v);
  }
  for (unsigned i = 0; i < G_N_ELEMENTS(paths); i++) g_free((char *)paths[i]);
  g_free(a);
  g_free(b);
  g_free(ga);
  g_free(gb);
  g_free(g1);
  g_byte_array_unref(cat);
  g_byte_array_unref(pad);
  g_byte_array_unref(im);
  g_free(px);
  g_rand_free(r);
}

/* A named pipe nobody writes to, given as a data file: an error at once,
 * not a reader blocked forever in open(). */
static void test_idx_fifo(idx_fixture *f, gconstpointer data) {
  char *fifo = g_build_filename(f->dir, "fifo", NULL);
  g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
  em_error err = {0};
  int nd;
  int64_t dims[EM_MAX_DIMS];
  uint8_t *v = NULL;
  g_assert_cmpint(em_idx_read(fifo, "images", 1, 3, &nd, dims, &v, &err), ==, EM_ERR_IO);
  dt_assert_msg(err.msg, fifo, "not a regular file", NULL);
  char *lp = dt_write(f->dir, "lab.gz", f->labels->data, f->labels->len, true);
  g_assert_null(em_dataset_idx(fifo, lp, 10, &err));
  dt_assert_msg(err.msg, fifo, NULL);
  g_free(lp);
  g_free(fifo);
}

/* Random corruption of valid files: an error or a dataset, never a crash
 * (run under AddressSanitizer too). */
static void test_idx_fuzz(idx_fixture *f, gconstpointer data) {
  char *p = dt_write(f->dir, "img.gz", f->images->data, f->images->len, true);
  size_t gz_n;
  guint8 *gzb = dt_read(p, &gz_n);
  g_free(p);
  char *lp = dt_write(f->dir, "lab.gz", f->labels->data, f->labels->len, true);
  GRand *r = g_rand_new_with_seed(7);
  int failed = 0;
  for (int it = 0; it < 300; it++) {
    bool gz = it % 2;
    const guint8 *src = gz ? gzb : f->images->data;
    size_t n = gz ? gz_n : f->images->len;
    guint8 *b = g_memdup2(src, n);
    int flips = g_rand_int_range(r, 1, 4);
    for (int k = 0; k < flips; k++) b[g_rand_int_range(r, 0, (gint32)n)] ^= (guint8)g_rand_int_range(r, 1, 256);
    size_t len = g_rand_boolean(r) ? n : (size_t)g_rand_int_range(r, 0, (gint32)n + 1);
    char *ip = dt_write(f->dir, "fuzz", b, len, false);
    em_error err = {0};
    em_dataset *ds = em_dataset_idx(ip, lp, 0, &err);
    if (ds) {
      float x[64];
      int64_t y;
      if (em_dataset_sample_numel(ds) <= 64)
        for (int64_t i = 0; i < em_dataset_len(ds); i++) em_dataset_get(ds, i, x, &y, &err);
      em_dataset_free(ds);
    } else {
      g_assert_cmpint(err.status, !=, EM_OK);
      g_assert_cmpuint(strlen(err.msg), >, 0);
      failed++;
    }
    g_free(ip);
    g_free(b);
  }
  g_assert_cmpint(failed, >, 50);
  g_rand_free(r);
  g_free(gzb);
  g_free(lp);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/data/idx/fashion-mnist-train", test_fmnist_train);
  g_test_add_func("/engine/data/idx/fashion-mnist-test", test_fmnist_test);
  g_test_add("/engine/data/idx/small", idx_fixture, NULL, idx_setup, test_idx_small, idx_teardown);
  g_test_add("/engine/data/idx/plain-folder", idx_fixture, NULL, idx_setup, test_idx_plain_folder,
             idx_teardown);
  g_test_add("/engine/data/idx/truncated", idx_fixture, NULL, idx_setup, test_idx_truncated,
             idx_teardown);
  g_test_add("/engine/data/idx/bad-header", idx_fixture, NULL, idx_setup, test_idx_bad_header,
             idx_teardown);
  g_test_add("/engine/data/idx/labels", idx_fixture, NULL, idx_setup, test_idx_labels,
             idx_teardown);
  g_test_add("/engine/data/idx/read", idx_fixture, NULL, idx_setup, test_idx_read, idx_teardown);
  g_test_add("/engine/data/idx/gzip-forms", idx_fixture, NULL, idx_setup, test_idx_gzip_forms,
             idx_teardown);
  g_test_add("/engine/data/idx/fifo", idx_fixture, NULL, idx_setup, test_idx_fifo, idx_teardown);
  g_test_add("/engine/data/idx/fuzz", idx_fixture, NULL, idx_setup, test_idx_fuzz, idx_teardown);
  return g_test_run();
}
