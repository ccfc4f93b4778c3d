/* alloc.c: the caching allocator behind every tensor.
 *
 * Blocks are 64-byte aligned and rounded up to a size class (powers of two
 * and the halfway points between them up to 1 MiB, so at most 1/3 is
 * wasted; 16 classes per power of two above, at most 1/16). A freed
 * block goes on its class's free list and is handed out again, so once a
 * training step has run, the next one reaches the system allocator zero
 * times. One mutex guards the lists: tensors are allocated a few hundred
 * times a step, so contention is negligible.
 *
 * While the profiler tracks memory, each block handed out is tagged with
 * its site (the op and layer that asked for it: profile-memory.c) in a
 * hash map under the same mutex, and every site's live bytes are kept, so
 * a leak report can say which sites own a growth. Off, an allocation pays
 * one branch on a global flag and a free one on the map's count. */
#include "profile-private.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* size classes (below) */
#define FINE_FROM 21 /* 2^(FINE_FROM - 1) = 1 MiB: the finer classes begin above it */
#define FINE_STEPS 16
#define COARSE_LAST 28 /* the 1 MiB class */
#define N_CLASSES (COARSE_LAST + 1 + (64 - FINE_FROM) * FINE_STEPS) /* every n < 2^63 */

typedef struct block {
  struct block *next;
} block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block *free_lists[N_CLASSES];
static em_memory_stats stats;

/* ---- site tags (under lock) ------------------------------------------------- */
typedef struct {
  void *ptr; /* NULL: empty slot */
  int64_t bytes;
  int32_t site;
} tag;

static bool tagging;
static tag *tags;
static int64_t tag_cap, tag_count; /* cap a power of two */
static int64_t site_live[EM_PROF_MAX_SITES];

static int64_t tag_slot(const void *p) {
  uint64_t h = (uint64_t)(uintptr_t)p >> 6; /* blocks are 64-byte aligned */
  h *= 0x9E3779B97F4A7C15ull;
  return (int64_t)(h >> 20) & (tag_cap - 1);
}

static void tag_insert(void *p, int64_t bytes, int32_t site);

static bool tags_grow(void) {
  int64_t old_cap = tag_cap;
  tag *old = tags;
  int64_t cap = old_cap ? 2 * old_cap : 4096;
  tag *fresh = calloc((size_t)cap, sizeof *fresh);
  if (!fresh) return false;
  tags = fresh;
  tag_cap = cap;
  tag_count = 0;
  for (int64_t i = 0; i < old_cap; i++)
    if (old[i].ptr) tag_insert(old[i].ptr, old[i].bytes, old[i].site);
  free(old);
  return true;
}

static void tag_insert(void *p, int64_t bytes, int32_t site) {
  if (2 * (tag_count + 1) > tag_cap && !tags_grow()) return; /* no memory: left untagged */
  int64_t i = tag_slot(p);
  while (tags[i].ptr && tags[i].ptr != p) i = (i + 1) & (tag_cap - 1);
  if (!tags[i].ptr) tag_count++;
  tags[i] = (tag){p, bytes, site};
}

/* Removes p's tag (linear probing with backward-shift deletion) and takes
 * its bytes off its site. */
static void tag_remove(const void *p) {
  int64_t i = tag_slot(p);
  while (tags[i].ptr != p) {
    if (!tags[i].ptr) return; /* allocated before tagging started */
    i = (i + 1) & (tag_cap - 1);
  }
  site_live[tags[i].site] -= tags[i].bytes;
  tag_count--;
  for (int64_t j = (i + 1) & (tag_cap - 1); tags[j].ptr; j = (j + 1) & (tag_cap - 1)) {
    int64_t home = tag_slot(tags[j].ptr);
    /* move j into the hole at i unless its home lies cyclically in (i, j] */
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    tags[i] = tags[j];
    i = j;
  }
  tags[i].ptr = NULL;
}

void em_alloc_tagging(bool on) {
  pthread_mutex_lock(&lock);
  tagging = on;
  free(tags);
  tags = NULL;
  tag_cap = tag_count = 0;
  memset(site_live, 0, sizeof site_live);
  pthread_mutex_unlock(&lock);
}

int em_alloc_site_live(int64_t *out, int n) {
  pthread_mutex_lock(&lock);
  int m = 0;
  if (tagging) {
    m = em_prof_site_count();
    if (m > n) m = n;
    memcpy(out, site_live, sizeof(int64_t) * (size_t)m);
  }
  pthread_mutex_unlock(&lock);
  return m;
}

/* ---- size classes -------------------------------------------------------------
 * Up to 1 MiB: powers of two and the halfway points between them (3/4 of
 * the next power), so at most a third of a block is padding. Above: 16
 * classes per power of two, so a large tensor (a layer's weights, its
 * gradient and optimiser state) wastes at most 1/16 of its size. */

/* Class index and its size for a request of n bytes; N_CLASSES or above
 * when n has none. */
static int size_class(size_t n, size_t *class_bytes) {
  if (n <= 64) {
    *class_bytes = 64;
    return 0;
  }
  int p = 64 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^p >= n */
  if (p >= 64) {
    *class_bytes = 0;
    return N_CLASSES;
  }
  if (p >= FINE_FROM) {
    size_t base = (size_t)1 << (p - 1), step = base / FINE_STEPS;
    size_t k = (n - base + step - 1) / step; /* 1 .. FINE_STEPS */
    *class_bytes = base + k * step;
    return COARSE_LAST + (p - FINE_FROM) * FINE_STEPS + (int)k;
  }
  size_t full = (size_t)1 << p, half = full - (full >> 2); /* 0.75 * 2^p */
  int idx = 2 * (p - 6);
  if (n <= half) {
    *class_bytes = half;
    return idx - 1;
  }
  *class_bytes = full;
  return idx;
}

/* The size of class c (the inverse of size_class). */
static size_t class_size(int c) {
  if (c == 0) return 64;
  if (c > COARSE_LAST) {
    int f = c - COARSE_LAST - 1, p = FINE_FROM + f / FINE_STEPS;
    size_t base = (size_t)1 << (p - 1);
    return base + (size_t)(f % FINE_STEPS + 1) * (base / FINE_STEPS);
  }
  int p = c / 2 + 6 + (c & 1);
  return (c & 1) ? ((size_t)1 << p) - ((size_t)1 << (p - 2)) : (size_t)1 << p;
}

/* ---- allocate and free -------------------------------------------------------------- */

void *em_alloc(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  size_t bytes;
  int c = size_class(nbytes, &bytes);
  if (c >= N_CLASSES) return NULL;
  int32_t site = -1;
  if (__builtin_expect(atomic_load_explicit(&em_prof_track_memory_, memory_order_relaxed), 0))
    site = em_prof_alloc_site((int64_t)bytes);
  pthread_mutex_lock(&lock);
  block *b = free_lists[c];
  if (b) {
    free_lists[c] = b->next;
    stats.cached_blocks--;
  }
  stats.alloc_count++;
  stats.allocated_bytes += (int64_t)bytes;
  if (stats.allocated_bytes > stats.peak_allocated_bytes)
    stats.peak_allocated_bytes = stats.allocated_bytes;
  if (!b) {
    stats.system_alloc_count++;
    stats.reserved_bytes += (int64_t)bytes;
    if (stats.reserved_bytes > stats.peak_reserved_bytes)
      stats.peak_reserved_bytes = stats.reserved_bytes;
  } else if (site >= 0 && tagging) {
    tag_insert(b, (int64_t)bytes, site);
    site_live[site] += (int64_t)bytes;
  }
  pthread_mutex_unlock(&lock);
  if (!b) {
    b = aligned_alloc(64, (bytes + 63) & ~(size_t)63); /* C11: a multiple of the alignment */
    pthread_mutex_lock(&lock);
    if (!b) {
      stats.allocated_bytes -= (int64_t)bytes;
      stats.reserved_bytes -= (int64_t)bytes;
      stats.alloc_count--;
      stats.system_alloc_count--;
    } else if (site >= 0 && tagging) {
      tag_insert(b, (int64_t)bytes, site);
      site_live[site] += (int64_t)bytes;
    }
    pthread_mutex_unlock(&lock);
  }
  return b;
}

void em_free(void *p, size_t nbytes) {
  if (!p) return;
  if (nbytes == 0) nbytes = 1;
  size_t bytes;
  int c = size_class(nbytes, &bytes);
  block *b = p;
  pthread_mutex_lock(&lock);
  if (tag_count) tag_remove(p);
  b->next = free_lists[c];
  free_lists[c] = b;
  stats.allocated_bytes -= (int64_t)bytes;
  stats.free_count++;
  stats.cached_blocks++;
  pthread_mutex_unlock(&lock);
}

void em_memory_stats_get(em_memory_stats *out) {
  pthread_mutex_lock(&lock);
  *out = stats;
  out->largest_free_block = 0;
  for (int c = N_CLASSES - 1; c >= 0; c--)
    if (free_lists[c]) {
      out->largest_free_block = (int64_t)class_size(c);
      break;
    }
  pthread_mutex_unlock(&lock);
}

void em_memory_reset_peak(void) {
  pthread_mutex_lock(&lock);
  stats.peak_allocated_bytes = stats.allocated_bytes;
  stats.peak_reserved_bytes = stats.reserved_bytes;
  pthread_mutex_unlock(&lock);
}

void em_memory_release_cached(void) {
  pthread_mutex_lock(&lock);
  for (int c = 0; c < N_CLASSES; c++) {
    if (!free_lists[c]) continue;
    size_t bytes = class_size(c);
    while (free_lists[c]) {
      block *b = free_lists[c];
      free_lists[c] = b->next;
      stats.reserved_bytes -= (int64_t)bytes;
      stats.cached_blocks--;
      free(b);
    }
  }
  pthread_mutex_unlock(&lock);
}
