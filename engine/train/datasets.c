/* datasets.c: opening a dataset by the name a spec or a flag gives, and
 * checking that a model fits it. */
#include "em-train.h"

#include "../plugin/plugin-host.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* "unknown dataset 'x'; known: ..., the plugins' kinds; where plugins were
 * looked for". */
static em_status unknown_dataset(const char *name, em_error *err) {
  char kinds[512] = "", search[1024];
  size_t len = 0;
  for (int i = 0; i < em_dataset_type_count() && len < sizeof kinds; i++) {
    int w = snprintf(kinds + len, sizeof kinds - len, ", %s", em_dataset_type_at(i)->name);
    if (w > 0) len += (size_t)w;
  }
  em_plugin_search_summary(search, sizeof search);
  return em_error_set(err, EM_ERR_INVALID,
                      "unknown dataset '%s'; known: fashion-mnist, cifar10, csv, synthetic%s; %s", name,
                      kinds, search);
}

em_dataset *em_dataset_open_named(const char *name, const char *dir, bool train,
                                  const int64_t *sample_shape, int sample_ndim, int classes,
                                  em_error *err) {
  const char *d = dir && dir[0] ? dir : NULL;
  if (strcmp(name, "fashion-mnist") == 0) return em_dataset_fashion_mnist(d, train, err);
  if (strcmp(name, "cifar10") == 0) {
    if (!d) {
      em_error_set(err, EM_ERR_INVALID,
                   "the cifar10 dataset needs its folder: give --data-dir DIR (the folder with "
                   "data_batch_1.bin ... test_batch.bin)");
      return NULL;
    }
    return em_dataset_cifar10(d, train, err);
  }
  if (strcmp(name, "csv") == 0) {
    if (!d) {
      em_error_set(err, EM_ERR_INVALID,
                   "the csv dataset needs its file: give --data-dir FILE.csv (numeric columns, "
                   "the label last)");
      return NULL;
    }
    /* read twice (the training rows, then the held-out ones): a pipe
     * would give its rows to the first reading only */
    struct stat sb;
    if (stat(d, &sb) == 0 && !S_ISREG(sb.st_mode)) {
      if (S_ISDIR(sb.st_mode))
        em_error_set(err, EM_ERR_INVALID, "'%s' is a folder: the csv dataset's --data-dir is "
                     "the CSV file itself", d);
      else
        em_error_set(err, EM_ERR_INVALID,
                     "'%s' is not a regular file: training reads a CSV twice (its training and "
                     "its held-out rows), so save it to a file first", d);
      return NULL;
    }
    /* a first line with no number in it is a header, as `ember predict`
     * reads CSV (the Data page opens it here too) */
    em_csv_options o;
    em_csv_options_defaults(&o);
    o.header = EM_CSV_HEADER_AUTO;
    /* a label past the model's outputs is named by its line (it read as a
     * model that needs more outputs, a typo's 7 making 8 classes) */
    if (classes > 0) o.num_classes = classes;
    return em_dataset_csv_split(d, &o, train, err);
  }
  if (strcmp(name, "synthetic") == 0)
    return em_dataset_synthetic_split(train ? 4096 : 1024, sample_ndim, sample_shape, classes,
                                      0.5, 1, train, err);
  const em_dataset_type *kind = em_dataset_type_find(name);
  if (kind) {
    if (!d) {
      em_error_set(err, EM_ERR_INVALID, "the %s dataset needs its folder: give --data-dir DIR",
                   name);
      return NULL;
    }
    em_dataset *ds = kind->open(d, train, NULL, err);
    /* A plugin that fails without a word must not leave "ok" (or nothing)
     * as the reason: say which kind failed, and its status if it set one. */
    if (!ds && err && (err->status == EM_OK || !err->msg[0]))
      em_error_set(err, err->status == EM_OK ? EM_ERR_INVALID : err->status,
                   "the %s dataset (a plugin's kind) could not open '%s' and gave no reason "
                   "(status: %s)",
                   name, d, err->status == EM_OK ? "none" : em_status_name(err->status));
    return ds;
  }
  unknown_dataset(name, err);
  return NULL;
}

bool em_dataset_name_is_builtin(const char *name) {
  return !strcmp(name, "fashion-mnist") || !strcmp(name, "cifar10") || !strcmp(name, "csv") ||
         !strcmp(name, "synthetic");
}

static int cmp_path(const void *a, const void *b) { return strcmp(a, b); }

em_status em_dataset_files_named(const char *name, const char *dir, bool train,
                                 char (*paths)[1024], int cap, int *n, em_error *err) {
  const char *d = dir && dir[0] ? dir : NULL;
  char found[5][4096];
  int k;
  *n = 0;
  if (strcmp(name, "synthetic") == 0) return EM_OK;
  if (strcmp(name, "fashion-mnist") == 0) k = em_dataset_fashion_mnist_files(d, train, found);
  else if (strcmp(name, "csv") == 0) {
    if (!d)
      return em_error_set(err, EM_ERR_INVALID, "the csv dataset needs its file: give --data-dir FILE.csv");
    if (strlen(d) >= sizeof found[0])
      return em_error_set(err, EM_ERR_INVALID, "file name too long: '%.200s...'", d);
    /* one file for both splits: named once, for the training split */
    k = train ? 1 : 0;
    if (k) memcpy(found[0], d, strlen(d) + 1);
  }
  else if (strcmp(name, "cifar10") == 0) {
    if (!d)
      return em_error_set(err, EM_ERR_INVALID,
                          "the cifar10 dataset needs its folder: give --data-dir DIR (the folder "
                          "with data_batch_1.bin ... test_batch.bin)");
    k = em_dataset_cifar10_dir_files(d, train, found);
  } else if (em_dataset_type_find(name))
    return EM_OK; /* a plugin's kind: its files are its own business */
  else
    return unknown_dataset(name, err);
  if (k < 0) return em_error_set(err, EM_ERR_INVALID, "folder name too long: '%.200s...'", d);
  if (k > cap)
    return em_error_set(err, EM_ERR_INVALID, "the %s dataset reads %d files; room was given for %d",
                        name, k, cap);
  for (int i = 0; i < k; i++) {
    char *abs = realpath(found[i], NULL);
    if (!abs)
      return em_error_set(err, EM_ERR_IO, "cannot find '%s', a file of the %s dataset: %s",
                          found[i], name, strerror(errno));
    size_t len = strlen(abs);
    if (len < sizeof paths[i]) memcpy(paths[i], abs, len + 1);
    free(abs);
    if (len >= sizeof paths[i])
      return em_error_set(err, EM_ERR_INVALID, "the path of '%s' is longer than %zu bytes",
                          found[i], sizeof paths[i] - 1);
  }
  qsort(paths, (size_t)k, sizeof paths[0], cmp_path);
  *n = k;
  return EM_OK;
}

/* The spec's input and output must fit the dataset's samples and classes. */
em_status em_train_check_fit(const em_spec *spec, const em_dataset *ds, const char *dsname,
                             em_loss_kind loss, em_error *err) {
  int64_t ss[EM_MAX_DIMS], ds_shape[EM_MAX_DIMS], out[EM_MAX_DIMS];
  if (em_spec_input_dtype(spec) != EM_DTYPE_F32) /* the loader's batches are f32 */
    return em_error_set(err, EM_ERR_INVALID,
                        "the spec's input is %s indices (for an Embedding) but the %s dataset "
                        "gives f32 samples; the built-in datasets (IDX, CIFAR-10, CSV, synthetic) "
                        "hold images and feature rows, not indices",
                        em_dtype_name(em_spec_input_dtype(spec)), dsname);
  int sn = em_spec_input_shape(spec, ss), dn = em_dataset_sample_shape(ds, ds_shape);
  int64_t sp = 1, dp = 1;
  for (int i = 0; i < sn; i++) sp *= ss[i];
  for (int i = 0; i < dn; i++) dp *= ds_shape[i];
  bool same = sn == dn;
  for (int i = 0; same && i < sn; i++) same = ss[i] == ds_shape[i];
  if (!same) {
    char a[96], b[96];
    return em_error_set(err, EM_ERR_SHAPE,
                        "the spec's input shape %s does not match the %s samples' shape %s%s",
                        em_shape_str(sn, ss, a, sizeof a), dsname,
                        em_shape_str(dn, ds_shape, b, sizeof b),
                        sp == dp ? " (same size: change \"input\" in the spec)" : "");
  }
  int on = em_spec_output_shape(spec, out);
  int classes = em_dataset_num_classes(ds);
  if (on != 1 || (loss == EM_LOSS_CROSS_ENTROPY && out[0] < classes) ||
      (loss == EM_LOSS_MSE && out[0] != classes)) {
    char a[96];
    return em_error_set(err, EM_ERR_SHAPE,
                        "the model outputs %s per sample but the %s dataset has %d classes: "
                        "the last layer needs %d outputs",
                        em_shape_str(on, out, a, sizeof a), dsname, classes, classes);
  }
  return EM_OK;
}
