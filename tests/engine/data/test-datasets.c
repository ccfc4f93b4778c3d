/* test-datasets.c: CIFAR-10 binary and CSV datasets on small generated
 * files, and the synthetic set. */
#include <math.h>
#include <sys/resource.h>
#include <zlib.h>

#include "data-test-util.h"
#include "em-data.h"

enum { REC = 3073 };

/* n CIFAR records: label (first + r) % 10, pixel k of record r = (r * 7 + k) % 256. */
static GByteArray *cifar_bytes(int n, int first) {
  GByteArray *b = g_byte_array_sized_new((guint)(n * REC));
  for (int r = 0; r < n; r++) {
    guint8 rec[REC];
    rec[0] = (guint8)((first + r) % 10);
    for (int k = 0; k < 3072; k++) rec[1 + k] = (guint8)((r * 7 + k) % 256);
    g_byte_array_append(b, rec, REC);
  }
  return b;
}

static void test_cifar(void) {
  char *dir = dt_tmpdir();
  /* Five training batches of 3 records each, one test batch of 2. */
  for (int i = 1; i <= 5; i++) {
    GByteArray *b = cifar_bytes(3, i);
    char name[32];
    g_snprintf(name, sizeof name, "data_batch_%d.bin", i);
    g_free(dt_write(dir, name, b->data, b->len, false));
    g_byte_array_unref(b);
  }
  GByteArray *t = cifar_bytes(2, 0);
  g_free(dt_write(dir, "test_batch.bin", t->data, t->len, false));
  g_byte_array_unref(t);

  em_error err = {0};
  em_dataset *ds = em_dataset_cifar10(dir, true, &err);
  g_assert_nonnull(ds);
  g_assert_cmpint(em_dataset_len(ds), ==, 15);
  g_assert_cmpint(em_dataset_num_classes(ds), ==, 10);
  int64_t shape[EM_MAX_DIMS];
  g_assert_cmpint(em_dataset_sample_shape(ds, shape), ==, 3);
  g_assert_cmpint(shape[0] * 100 + shape[1] * 10 + shape[2], ==, 3 * 100 + 320 + 32);
  float x[3072];
  int64_t y;
  /* Sample 7 is record 1 of data_batch_3. */
  g_assert_cmpint(em_dataset_get(ds, 7, x, &y, &err), ==, EM_OK);
  g_assert_cmpint(y, ==, 4);
  for (int k = 0; k < 3072; k += 97) g_assert_cmpfloat(x[k], ==, (float)((7 + k) % 256) / 255.0f);
  /* Per-channel normalisation. */
  float mean[3] = {0.5f, 0.25f, 0.0f}, std[3] = {0.5f, 2.0f, 1.0f};
  g_assert_cmpint(em_dataset_set_normalize(ds, 3, mean, std, &err), ==, EM_OK);
  g_assert_cmpint(em_dataset_get(ds, 7, x, &y, &err), ==, EM_OK);
  for (int c = 0; c < 3; c++) {
    int k = c * 1024 + 5;
    g_assert_cmpfloat(x[k], ==, ((float)((7 + k) % 256) / 255.0f - mean[c]) / std[c]);
  }
  em_dataset_free(ds);

  ds = em_dataset_cifar10(dir, false, &err);
  g_assert_nonnull(ds);
  g_assert_cmpint(em_dataset_len(ds), ==, 2);
  em_dataset_free(ds);

  /* A gzip of 92 MB of zeros and one byte more, 90 KB on disk: refused
   * without loading it (a 1.5 MB one took 1.5 GB before its error). */
  {
    char *gzp = g_build_filename(dir, "data_batch_2.bin", NULL);
    gzFile gz = gzopen(gzp, "wb9");
    g_assert_nonnull(gz);
    char *zeros = g_malloc0(REC * 1000);
    for (int i = 0; i < 30; i++) g_assert_cmpint(gzwrite(gz, zeros, REC * 1000), ==, REC * 1000);
    g_assert_cmpint(gzwrite(gz, zeros, 1), ==, 1);
    g_free(zeros);
    gzclose(gz);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    g_assert_null(em_dataset_cifar10(dir, true, &err));
    getrusage(RUSAGE_SELF, &ru1);
    dt_assert_msg(err.msg, gzp, "92190001 bytes", "not a whole number of 3073-byte", NULL);
    g_assert_cmpint(ru1.ru_maxrss - ru0.ru_maxrss, <, 32 * 1024); /* KiB */
    GByteArray *ok = cifar_bytes(3, 2);
    g_free(dt_write(dir, "data_batch_2.bin", ok->data, ok->len, false));
    g_byte_array_unref(ok);
    g_free(gzp);
  }
  /* A truncated batch, a bad label, a missing file. */
  GByteArray *b = cifar_bytes(3, 0);
  char *p = dt_write(dir, "data_batch_4.bin", b->data, b->len - 100, false);
  g_assert_null(em_dataset_cifar10(dir, true, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, p, "not a whole number of 3073-byte", "truncated", NULL);
  b->data[REC * 2] = 11;
  g_free(dt_write(dir, "data_batch_4.bin", b->data, b->len, false));
  g_assert_null(em_dataset_cifar10(dir, true, &err));
  dt_assert_msg(err.msg, p, "label 11 of record 2", "out of range", NULL);
  g_remove(p);
  g_assert_null(em_dataset_cifar10(dir, true, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_IO);
  dt_assert_msg(err.msg, p, "cannot open", NULL);
  g_free(dt_write(dir, "empty.bin", "", 0, false));
  const char *files[1] = {NULL};
  char *ep = g_build_filename(dir, "empty.bin", NULL);
  files[0] = ep;
  g_assert_null(em_dataset_cifar10_files(1, files, &err));
  dt_assert_msg(err.msg, ep, "empty", NULL);
  /* gzip-compressed batches read too. */
  char *gp = dt_write(dir, "b.bin.gz", b->data, REC, true);
  b->data[REC * 2] = 1;
  files[0] = gp;
  ds = em_dataset_cifar10_files(1, files, &err);
  g_assert_nonnull(ds);
  g_assert_cmpint(em_dataset_len(ds), ==, 1);
  em_dataset_free(ds);
  g_free(gp);
  g_free(ep);
  g_free(p);
  g_byte_array_unref(b);
  dt_tmpdir_free(dir);
}

static em_dataset *csv_try(const char *dir, const char *text, const em_csv_options *o,
                           em_error *err, char **path) {
  char *p = dt_write(dir, "d.csv", text, strlen(text), false);
  em_dataset *ds = em_dataset_csv(p, o, err);
  if (path) *path = p;
  else g_free(p);
  return ds;
}

static void test_csv(void) {
  char *dir = dt_tmpdir();
  em_error err = {0};
  em_dataset *ds = csv_try(dir, "1.5,2,0\n-3e2, 4 ,2\r\n\n0.25,0,1\n", NULL, &err, NULL);
  g_assert_nonnull(ds);
  g_assert_cmpint(em_dataset_len(ds), ==, 3);
  g_assert_cmpint(em_dataset_num_classes(ds), ==, 3);
  int64_t shape[EM_MAX_DIMS];
  g_assert_cmpint(em_dataset_sample_shape(ds, shape), ==, 1);
  g_assert_cmpint(shape[0], ==, 2);
  float x[2];
  int64_t y;
  g_assert_cmpint(em_dataset_get(ds, 1, x, &y, &err), ==, EM_OK);
  g_assert_cmpfloat(x[0], ==, -300.0f);
  g_assert_cmpfloat(x[1], ==, 4.0f);
  g_assert_cmpint(y, ==, 2);
  em_dataset_free(ds);

  /* Header line, label in the first column, semicolons, fixed classes. */
  em_csv_options o;
  em_csv_options_defaults(&o);
  o.header = EM_CSV_HEADER_YES;
  o.label_column = 0;
  o.delimiter = ';';
  o.num_classes = 5;
  ds = csv_try(dir, "label;a;b;c\n4;1;2;3\n0;4;5;6\n", &o, &err, NULL);
  g_assert_nonnull(ds);
  g_assert_cmpint(em_dataset_num_classes(ds), ==, 5);
  float x3[3];
  g_assert_cmpint(em_dataset_get(ds, 0, x3, &y, &err), ==, EM_OK);
  g_assert_cmpint(y, ==, 4);
  g_assert_cmpfloat(x3[0], ==, 1.0f);
  g_assert_cmpfloat(x3[2], ==, 3.0f);
  em_dataset_free(ds);

  /* Errors name the file, the line and the column. */
  char *p;
  g_assert_null(csv_try(dir, "1,2,0\n3,abc,1\n", NULL, &err, &p));
  g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, p, "line 2, column 2", "'abc' is not a number", NULL);
  g_free(p);
  g_assert_null(csv_try(dir, "1,2,0\n3,4\n", NULL, &err, NULL));
  dt_assert_msg(err.msg, "line 2", "2 columns, expected 3", NULL);
  g_assert_null(csv_try(dir, "1,2,0\n3,4,1.5\n", NULL, &err, NULL));
  dt_assert_msg(err.msg, "line 2, column 3", "'1.5' is not an integer", NULL);
  g_assert_null(csv_try(dir, "1,2,-1\n", NULL, &err, NULL));
  dt_assert_msg(err.msg, "line 1, column 3", "label -1", NULL);
  g_assert_null(csv_try(dir, "1,,0\n", NULL, &err, NULL));
  dt_assert_msg(err.msg, "line 1, column 2", "empty value", NULL);
  g_assert_null(csv_try(dir, "1,nan,0\n", NULL, &err, NULL));
  dt_assert_msg(err.msg, "line 1, column 2", "not a finite", NULL);
  o.header = EM_CSV_HEADER_NO;
  o.delimiter = ',';
  o.label_column = -1;
  o.num_classes = 3;
  g_assert_null(csv_try(dir, "1,2,0\n1,2,3\n", &o, &err, NULL));
  dt_assert_msg(err.msg, "line 2, column 3", "label 3 is out of range for 3 classes", NULL);
  o.label_column = 7;
  g_assert_null(csv_try(dir, "1,2,0\n", &o, &err, NULL));
  g_assert_cmpint(err.status, ==, EM_ERR_INVALID);
  dt_assert_msg(err.msg, "label column 8 does not exist", NULL);
  g_assert_null(csv_try(dir, "\n\n", NULL, &err, NULL));
  dt_assert_msg(err.msg, "no data lines", NULL);
  g_assert_null(csv_try(dir, "1\n", NULL, &err, NULL));
  dt_assert_msg(err.msg, "one column", NULL);
  g_assert_null(em_dataset_csv("/nonexistent-ember/x.csv", NULL, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_IO);
  dt_assert_msg(err.msg, "/nonexistent-ember/x.csv", NULL);
  dt_tmpdir_free(dir);
}

static void test_synthetic(void) {
  em_error err = {0};
  int64_t shape[3] = {2, 3, 4};
  em_dataset *a = em_dataset_synthetic(100, 3, shape, 4, 0.1, 42, &err);
  em_dataset *b = em_dataset_synthetic(100, 3, shape, 4, 0.1, 42, &err);
  em_dataset *c = em_dataset_synthetic(100, 3, shape, 4, 0.1, 43, &err);
  g_assert_nonnull(a);
  g_assert_nonnull(c);
  g_assert_cmpint(em_dataset_len(a), ==, 100);
  g_assert_cmpint(em_dataset_sample_numel(a), ==, 24);
  g_assert_cmpint(em_dataset_num_classes(a), ==, 4);
  float xa[24], xb[24], xc[24], x0[24];
  int64_t ya, yb, yc;
  int counts[4] = {0};
  g_assert_cmpint(em_dataset_get(a, 0, x0, &ya, &err), ==, EM_OK);
  for (int64_t i = 0; i < 100; i++) {
    g_assert_cmpint(em_dataset_get(a, i, xa, &ya, &err), ==, EM_OK);
    g_assert_cmpint(em_dataset_get(b, i, xb, &yb, &err), ==, EM_OK);
    g_assert_cmpint(em_dataset_get(c, i, xc, &yc, &err), ==, EM_OK);
    g_assert_cmpmem(xa, sizeof xa, xb, sizeof xb);
    g_assert_cmpint(ya, ==, yb);
    g_assert_true(memcmp(xa, xc, sizeof xa) != 0);
    counts[ya]++;
    /* Same class as sample 0: close (noise 0.1); another class: far. */
    double d = 0;
    for (int k = 0; k < 24; k++) d += (xa[k] - x0[k]) * (xa[k] - x0[k]);
    if (i > 0 && ya == 0) g_assert_cmpfloat(sqrt(d), <, 1.5);
    if (ya != 0) g_assert_cmpfloat(sqrt(d), >, 1.5);
  }
  for (int k = 0; k < 4; k++) g_assert_cmpint(counts[k], ==, 25);
  em_dataset_free(a);
  em_dataset_free(b);
  em_dataset_free(c);
  g_assert_null(em_dataset_synthetic(0, 3, shape, 4, 0.1, 1, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_INVALID);
  g_assert_null(em_dataset_synthetic(10, 1, (int64_t[]){0}, 4, 0.1, 1, &err));
  dt_assert_msg(err.msg, "[0]", NULL);
  g_assert_null(em_dataset_synthetic(10, 3, shape, 4, -1.0, 1, &err));
  dt_assert_msg(err.msg, "noise", NULL);
}

/* A plugin-style dataset through the public vtable. */
static int64_t tiny_len(const void *impl) { return 3; }
static int tiny_shape(const void *impl, int64_t *shape) {
  shape[0] = 2;
  return 1;
}
static int tiny_classes(const void *impl) { return 2; }
static em_status tiny_get(const void *impl, int64_t i, float *x, int64_t *y, em_error *err) {
  if (i == 2) return em_error_set(err, EM_ERR_IO, "tiny: sample 2 is unreadable");
  x[0] = x[1] = (float)i;
  *y = i == 1 ? 5 : 0; /* a label outside [0, 2) for sample 1 */
  return EM_OK;
}
static int tiny_freed;
static void tiny_free(void *impl) { tiny_freed++; }
static const em_dataset_vtable tiny_vt = {
    .kind = "tiny", .len = tiny_len, .sample_shape = tiny_shape, .num_classes = tiny_classes,
    .get = tiny_get, .free = tiny_free};

static void test_vtable(void) {
  em_error err = {0};
  em_dataset *ds = em_dataset_new(&tiny_vt, NULL, &err);
  g_assert_nonnull(ds);
  g_assert_cmpstr(em_dataset_kind(ds), ==, "tiny");
  float x[2];
  int64_t y;
  g_assert_cmpint(em_dataset_get(ds, 0, x, &y, &err), ==, EM_OK);
  g_assert_cmpint(em_dataset_get(ds, 1, x, &y, &err), ==, EM_ERR_FORMAT);
  dt_assert_msg(err.msg, "tiny", "label 5", NULL);
  g_assert_cmpint(em_dataset_get(ds, 2, x, &y, &err), ==, EM_ERR_IO);
  dt_assert_msg(err.msg, "unreadable", NULL);
  em_dataset_free(ds);
  g_assert_cmpint(tiny_freed, ==, 1);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/data/cifar10", test_cifar);
  g_test_add_func("/engine/data/csv", test_csv);
  g_test_add_func("/engine/data/synthetic", test_synthetic);
  g_test_add_func("/engine/data/vtable", test_vtable);
  return g_test_run();
}
