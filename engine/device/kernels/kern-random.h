/* kern-random.h: the counter-based generator of the device kernels
 * (Philox-4x32-10, Salmon et al. 2011, as in Random123 and cuRAND), and
 * the dropout keep decision built on it.
 *
 * A draw is a pure function of (seed, counter, i), so element i of a
 * dropout mask is the same on every device kind and under any launch
 * geometry: element i uses 32-bit word i % 4 of Philox(key = seed,
 * ctr = (i / 4 as 64 bits, counter as 64 bits)), low words first. A mask
 * of n elements uses the blocks [0, ceil(n / 4)) of its counter, so two
 * masks with different counters never share a draw.
 *
 * The keep rule: drop when the 32-bit draw is below p * 2^32 (2^32 for
 * p = 1: drops all). Every backend's dropout_mask kernel, the CPU's
 * (engine/ops/cpu-random.c) included, is built on these, so one (seed,
 * counter) gives one mask everywhere. */
#pragma once

#include "kern-common.h"

EM_HD uint32_t em_kmulhi32(uint32_t a, uint32_t b) {
  return (uint32_t)(((uint64_t)a * (uint64_t)b) >> 32);
}

/* out = Philox-4x32-10(ctr, key). */
EM_HD void em_kphilox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    uint32_t hi0 = em_kmulhi32(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    uint32_t hi1 = em_kmulhi32(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* The four 32-bit draws of block b = i / 4 of stream (seed, counter). */
EM_HD void em_krandom_block(uint64_t seed, uint64_t counter, uint64_t b, uint32_t out[4]) {
  uint32_t ctr[4], key[2];
  ctr[0] = (uint32_t)b;
  ctr[1] = (uint32_t)(b >> 32);
  ctr[2] = (uint32_t)counter;
  ctr[3] = (uint32_t)(counter >> 32);
  key[0] = (uint32_t)seed;
  key[1] = (uint32_t)(seed >> 32);
  em_kphilox(ctr, key, out);
}

/* The 32-bit draw of element i of stream (seed, counter). */
EM_HD uint32_t em_krandom_u32(uint64_t seed, uint64_t counter, uint64_t i) {
  uint32_t out[4];
  em_krandom_block(seed, counter, i >> 2, out);
  return out[i & 3];
}

/* The drop threshold of probability p: p * 2^32 (exact for p in [0, 1]). */
EM_HD uint64_t em_kdropout_threshold(double p) { return (uint64_t)(p * 4294967296.0); }

/* Whether element i survives: its draw is at or above the threshold. */
EM_HD int em_kdropout_keep(uint64_t threshold, uint64_t seed, uint64_t counter, uint64_t i) {
  return (uint64_t)em_krandom_u32(seed, counter, i) >= threshold;
}

/* The survivors' value 1 / (1 - p) in float (0 when p = 1). */
EM_HD float em_kdropout_scale(double p) { return p < 1 ? (float)(1.0 / (1.0 - p)) : 0.f; }
