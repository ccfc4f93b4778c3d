/* em-rng.h: the seeded random number generator (xoshiro256**), whose
 * whole state fits in a checkpoint. */
#pragma once

#include <stdint.h>

typedef struct em_rng {
  uint64_t s[4];
} em_rng;

void em_rng_seed(em_rng *r, uint64_t seed); /* splitmix64 expansion */
uint64_t em_rng_next(em_rng *r);
double em_rng_uniform(em_rng *r);           /* [0, 1) */
double em_rng_normal(em_rng *r);            /* mean 0, std 1 */
uint64_t em_rng_below(em_rng *r, uint64_t n); /* [0, n), unbiased */
/* Derives an independent stream (for a worker, a layer...). */
em_rng em_rng_split(em_rng *r);
