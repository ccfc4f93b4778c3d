/* datasets.c: opening a dataset by the name a spec or a flag gives. */
#include "em-train.h"

#include <string.h>

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
  if (strcmp(name, "synthetic") == 0)
    return em_dataset_synthetic_split(train ? 4096 : 1024, sample_ndim, sample_shape, classes,
                                      0.5, 1, train, err);
  em_error_set(err, EM_ERR_INVALID,
               "unknown dataset '%s'; known: fashion-mnist, cifar10, synthetic", name);
  return NULL;
}
