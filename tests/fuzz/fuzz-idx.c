/* fuzz-idx.c: the bytes as an IDX file, gzip-compressed or plain (zlib
 * tells them apart): em_idx_read as the MNIST images (3 dimensions) and
 * labels (1) readers call it, then as any IDX file (1 to EM_MAX_DIMS). */
#include "fuzz-file.h"

#include "em-data.h"
#include "em-tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_file(data, size);
  static const int range[3][2] = {{3, 3}, {1, 1}, {1, EM_MAX_DIMS}};
  for (int r = 0; r < 3; r++) {
    int ndim = 0;
    int64_t dims[EM_MAX_DIMS];
    uint8_t *values = NULL;
    em_error err;
    em_status st = em_idx_read(path, r == 1 ? "labels" : "images", range[r][0], range[r][1],
                               &ndim, dims, &values, &err);
    if (st == EM_OK) {
      int64_t n = 1;
      for (int d = 0; d < ndim; d++) n *= dims[d];
      volatile uint8_t sum = 0; /* touch every value: within the allocation? */
      for (int64_t i = 0; i < n; i++) sum += values[i];
      (void)sum;
    }
    free(values);
  }
  return 0;
}
