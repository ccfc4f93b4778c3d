/* test-resume-data.c: what resuming needs from the data side. A loader
 * started at (epoch, batch) yields exactly the batches the loader would
 * have yielded after skipping that many (with and without workers, on
 * one rank and on two); the files a named dataset reads, for lineage; a
 * CSV file opened by name (its training and held-out splits); a plugin's
 * dataset kind that fails without a message. */
#include <sys/stat.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

#include "../plugin/plugin-host.h" /* em_dataset_type_add, found through engine/train */
#include "train-helpers.h"

/* The remaining batches of epoch e after `skip`, compared between a loader
 * that reads and drops them and one started past them. */
static void compare_start_at(const em_dataset *ds, const em_loader_config *c, int64_t epoch,
                             int64_t skip) {
  em_error err = {0};
  em_loader *a = em_loader_new(ds, c, &err), *b = em_loader_new(ds, c, &err);
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  int64_t numel = em_dataset_sample_numel(ds);
  /* b first runs part of another epoch, as a trainer rolling back would */
  em_loader_start_epoch(b, epoch + 1);
  em_batch x, y;
  g_assert_true(em_loader_next(b, &y, &err));
  em_loader_start_epoch(a, epoch);
  for (int64_t i = 0; i < skip; i++) g_assert_true(em_loader_next(a, &x, &err));
  em_loader_start_epoch_at(b, epoch, skip);
  int64_t seen = 0;
  for (;;) {
    bool ha = em_loader_next(a, &x, &err), hb = em_loader_next(b, &y, &err);
    g_assert_cmpint(err.status, ==, EM_OK);
    g_assert_cmpint(ha, ==, hb);
    if (!ha) break;
    g_assert_cmpint(x.n, ==, y.n);
    g_assert_cmpmem(x.y, sizeof(int64_t) * (size_t)x.n, y.y, sizeof(int64_t) * (size_t)y.n);
    g_assert_cmpmem(x.x, sizeof(float) * (size_t)(x.n * numel), y.x,
                    sizeof(float) * (size_t)(y.n * numel));
    seen++;
  }
  g_assert_cmpint(seen, ==, em_loader_batches_per_epoch(a) - skip);
  em_loader_free(a);
  em_loader_free(b);
}

static void test_start_epoch_at(void) {
  em_error err = {0};
  int64_t shape[2] = {3, 4};
  em_dataset *ds = em_dataset_synthetic(95, 2, shape, 4, 0.5, 3, &err);
  g_assert_nonnull(ds);
  for (int workers = 0; workers <= 2; workers += 2)
    for (int world = 1; world <= 2; world++) {
      em_loader_config c;
      em_loader_config_defaults(&c);
      c.batch_size = 10;
      c.workers = workers;
      c.prefetch = 1; /* a small ring: skipping must not confuse its slots */
      c.seed = 11;
      c.world = world;
      c.rank = world - 1;
      em_loader *l = em_loader_new(ds, &c, &err);
      int64_t bpe = em_loader_batches_per_epoch(l);
      em_loader_free(l);
      g_assert_cmpint(bpe, ==, world == 1 ? 10 : 5);
      int64_t skips[] = {0, 1, 3, bpe - 1, bpe};
      for (size_t k = 0; k < G_N_ELEMENTS(skips); k++) compare_start_at(ds, &c, 2, skips[k]);
    }
  em_dataset_free(ds);
}

static void touch(const char *dir, const char *name) {
  char *p = g_build_filename(dir, name, NULL);
  g_assert_true(g_file_set_contents(p, "x", 1, NULL));
  g_free(p);
}

static void test_files_named(void) {
  char *dir = th_tmpdir();
  char paths[8][1024];
  int n = -1;
  em_error err = {0};
  g_assert_cmpint(em_dataset_files_named("synthetic", NULL, true, paths, 8, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 0);
  /* missing files are an error naming the file */
  g_assert_cmpint(em_dataset_files_named("fashion-mnist", dir, true, paths, 8, &n, &err), ==,
                  EM_ERR_IO);
  g_assert_nonnull(strstr(err.msg, "train-images-idx3-ubyte.gz"));
  touch(dir, "train-images-idx3-ubyte.gz");
  touch(dir, "train-labels-idx1-ubyte.gz");
  touch(dir, "t10k-images-idx3-ubyte.gz");
  touch(dir, "t10k-labels-idx1-ubyte.gz");
  g_assert_cmpint(em_dataset_files_named("fashion-mnist", dir, true, paths, 8, &n, &err), ==,
                  EM_OK);
  g_assert_cmpint(n, ==, 2);
  char *want = g_build_filename(dir, "train-images-idx3-ubyte.gz", NULL);
  g_assert_cmpstr(paths[0], ==, want);
  g_free(want);
  g_assert_true(g_str_has_suffix(paths[1], "/train-labels-idx1-ubyte.gz"));
  g_assert_cmpint(em_dataset_files_named("fashion-mnist", dir, false, paths, 8, &n, &err), ==,
                  EM_OK);
  g_assert_true(g_str_has_suffix(paths[0], "/t10k-images-idx3-ubyte.gz"));
  /* CIFAR-10: five training batches, sorted; one test batch */
  for (int i = 5; i >= 1; i--) {
    char name[64];
    g_snprintf(name, sizeof name, "data_batch_%d.bin", i);
    touch(dir, name);
  }
  touch(dir, "test_batch.bin");
  g_assert_cmpint(em_dataset_files_named("cifar10", dir, true, paths, 8, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 5);
  for (int i = 0; i < 5; i++) {
    char name[64];
    g_snprintf(name, sizeof name, "/data_batch_%d.bin", i + 1);
    g_assert_true(g_str_has_suffix(paths[i], name));
    g_assert_true(g_path_is_absolute(paths[i]));
  }
  g_assert_cmpint(em_dataset_files_named("cifar10", dir, true, paths, 3, &n, &err), ==,
                  EM_ERR_INVALID);
  g_assert_cmpint(em_dataset_files_named("cifar10", dir, false, paths, 8, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 1);
  g_assert_cmpint(em_dataset_files_named("cifar10", NULL, false, paths, 8, &n, &err), ==,
                  EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "--data-dir"));
  g_assert_cmpint(em_dataset_files_named("imagenet", dir, true, paths, 8, &n, &err), ==,
                  EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "unknown dataset 'imagenet'"));
  th_rm_rf(dir);
  g_free(dir);
}

/* "csv" by name (what the workbench's Train page opens): the file's rows
 * less every 5th for training, every 5th for testing, both with the
 * classes of the whole file; the file is its lineage, named once. */
static void test_csv_named(void) {
  char *dir = th_tmpdir();
  char *csv = g_build_filename(dir, "rows.csv", NULL);
  GString *text = g_string_new(NULL);
  for (int i = 0; i < 12; i++) g_string_append_printf(text, "%d,%d,%d\n", i, -i, i % 3);
  g_assert_true(g_file_set_contents(csv, text->str, -1, NULL));
  g_string_free(text, TRUE);
  em_error err = {0};
  int64_t shape[1] = {2};
  em_dataset *train = em_dataset_open_named("csv", csv, true, shape, 1, 3, &err);
  em_dataset *test = em_dataset_open_named("csv", csv, false, shape, 1, 3, &err);
  g_assert_nonnull(train);
  g_assert_nonnull(test);
  g_assert_cmpint(em_dataset_len(train), ==, 10);
  g_assert_cmpint(em_dataset_len(test), ==, 2);
  g_assert_cmpint(em_dataset_num_classes(train), ==, 3);
  g_assert_cmpint(em_dataset_num_classes(test), ==, 3);
  float x[2];
  int64_t y;
  g_assert_cmpint(em_dataset_get(test, 1, x, &y, &err), ==, EM_OK);
  g_assert_cmpfloat(x[0], ==, 9); /* rows 4 and 9 are held out */
  g_assert_cmpint(y, ==, 0);
  g_assert_cmpint(em_dataset_get(train, 4, x, &y, &err), ==, EM_OK);
  g_assert_cmpfloat(x[0], ==, 5);
  em_dataset_free(train);
  em_dataset_free(test);
  char paths[4][1024];
  int n = -1;
  g_assert_cmpint(em_dataset_files_named("csv", csv, true, paths, 4, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 1);
  g_assert_true(g_str_has_suffix(paths[0], "/rows.csv"));
  g_assert_cmpint(em_dataset_files_named("csv", csv, false, paths, 4, &n, &err), ==, EM_OK);
  g_assert_cmpint(n, ==, 0);
  /* a header line (no number in it) is skipped, as predict skips it */
  g_assert_true(g_file_set_contents(csv, "a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n9,10,0\n",
                                    -1, NULL));
  train = em_dataset_open_named("csv", csv, true, shape, 1, 2, &err);
  g_assert_nonnull(train);
  g_assert_cmpint(em_dataset_len(train), ==, 4);
  em_dataset_free(train);
  /* a folder, and a pipe (read twice, it would give its rows to one split) */
  g_assert_null(em_dataset_open_named("csv", dir, true, shape, 1, 2, &err));
  g_assert_nonnull(strstr(err.msg, "is a folder"));
  char *fifo = g_build_filename(dir, "rows.fifo", NULL);
  g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
  g_assert_null(em_dataset_open_named("csv", fifo, true, shape, 1, 2, &err));
  g_assert_nonnull(strstr(err.msg, "not a regular file"));
  g_unlink(fifo);
  g_free(fifo);
  /* too few rows to hold one out; no file given */
  g_assert_true(g_file_set_contents(csv, "1,0\n2,1\n", -1, NULL));
  g_assert_null(em_dataset_open_named("csv", csv, true, shape, 1, 2, &err));
  g_assert_nonnull(strstr(err.msg, "at least 5"));
  g_assert_null(em_dataset_open_named("csv", NULL, true, shape, 1, 2, &err));
  g_assert_nonnull(strstr(err.msg, "--data-dir FILE.csv"));
  g_unlink(csv);
  g_free(csv);
  th_rm_rf(dir);
  g_free(dir);
}

static em_dataset *silent_open(const char *dir, bool train, const void *options, em_error *err) {
  (void)dir, (void)train, (void)options, (void)err;
  return NULL; /* no message, no status */
}

/* A plugin's kind whose open fails without a word gets a message that
 * names it (the CLI printed "ember: fz-data: ok"). */
static void test_plugin_silent_failure(void) {
  static const em_dataset_type kind = {.name = "silent-data", .help = "test", .open = silent_open};
  em_error err = {0};
  g_assert_cmpint(em_dataset_type_add(&kind, &err), ==, EM_OK);
  int64_t shape[1] = {2};
  g_assert_null(em_dataset_open_named("silent-data", "/tmp", true, shape, 1, 2, &err));
  g_assert_cmpint(err.status, !=, EM_OK);
  g_assert_nonnull(strstr(err.msg, "silent-data"));
  g_assert_nonnull(strstr(err.msg, "gave no reason"));
  em_dataset_type_remove(&kind);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/train/loader/start-epoch-at", test_start_epoch_at);
  g_test_add_func("/train/datasets/files-named", test_files_named);
  g_test_add_func("/train/datasets/csv-named", test_csv_named);
  g_test_add_func("/train/datasets/plugin-silent-failure", test_plugin_silent_failure);
  return g_test_run();
}
