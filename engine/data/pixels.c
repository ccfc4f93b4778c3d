/* pixels.c: bytes to floats in [0, 1], the images' per-sample step, and
 * the prefetch that brings a sample's bytes in before it.
 *
 * The loader's worker converts every sample of every batch, beside the
 * training step, on the same cores: the restrict-qualified loop lets the
 * compiler convert and divide 16 pixels per instruction, where the
 * per-dataset loops it replaces compiled to one scalar division a pixel
 * (the uint8_t source may alias the floats). The division stays a
 * division, so every value is the correctly rounded p / 255 as before. */
#include "data-private.h"
#include "em-cpu.h"

EM_CPU_CLONES void em_pixels_to_unit(const uint8_t *restrict p, float *restrict x, int64_t n) {
  for (int64_t k = 0; k < n; k++) x[k] = (float)p[k] / 255.0f;
}

void em_prefetch_bytes(const void *p, int64_t n) {
  const char *c = p;
  for (int64_t off = 0; off < n; off += 64) __builtin_prefetch(c + off);
  if (n > 0) __builtin_prefetch(c + n - 1);
}
