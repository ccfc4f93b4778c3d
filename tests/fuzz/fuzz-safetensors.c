/* fuzz-safetensors.c: the bytes as a safetensors file: em_safetensors_open,
 * then every tensor's info and, when small enough, its data read into a
 * tensor of its dtype and shape, and the metadata walked. */
#include "fuzz-file.h"

#include "em-io.h"
#include "em-tensor.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  em_error err;
  em_safetensors *f = em_safetensors_open(fuzz_file(data, size), &err);
  if (!f) return 0;
  for (int i = 0; i < em_safetensors_meta_count(f); i++) {
    const char *k = em_safetensors_meta_key(f, i);
    if (k) (void)strlen(em_safetensors_meta(f, k));
  }
  for (int i = 0; i < em_safetensors_count(f); i++) {
    const char *name = em_safetensors_name(f, i);
    em_dtype dt;
    int ndim;
    int64_t shape[EM_MAX_DIMS];
    if (em_safetensors_info(f, name, &dt, &ndim, shape, &err) != EM_OK) continue;
    int64_t numel = 1;
    for (int d = 0; d < ndim && numel <= (1 << 16); d++) numel *= shape[d];
    if (numel > (1 << 16)) continue; /* bytes in bounds were checked by open */
    em_tensor *t = em_tensor_new(dt, ndim, shape, &err);
    if (!t) continue;
    (void)em_safetensors_read(f, name, t, &err);
    em_tensor_free(t);
  }
  (void)em_safetensors_name(f, -1);
  (void)em_safetensors_meta_key(f, em_safetensors_meta_count(f));
  em_safetensors_close(f);
  return 0;
}
