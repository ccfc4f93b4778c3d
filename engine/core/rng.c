/* rng.c: xoshiro256** seeded through splitmix64. */
#include "em-rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void em_rng_seed(em_rng *r, uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t em_rng_next(em_rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double em_rng_uniform(em_rng *r) { return (double)(em_rng_next(r) >> 11) * 0x1.0p-53; }

double em_rng_normal(em_rng *r) {
  /* Box-Muller; u1 in (0, 1] so the log is finite. */
  double u1 = 1.0 - em_rng_uniform(r);
  double u2 = em_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t em_rng_below(em_rng *r, uint64_t n) {
  if (n <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = em_rng_next(r);
  while (x >= limit);
  return x % n;
}

em_rng em_rng_split(em_rng *r) {
  em_rng out;
  em_rng_seed(&out, em_rng_next(r) ^ 0xD1B54A32D192ED03ull);
  return out;
}
