/* alloc.c: the caching allocator behind every tensor.
 *
 * Blocks are 64-byte aligned and rounded up to a size class (powers of two
 * and the halfway points between them, so at most 1/3 is wasted). A freed
 * block goes on its class's free list and is handed out again, so once a
 * training step has run, the next one reaches the system allocator zero
 * times. One mutex guards the lists: tensors are allocated a few hundred
 * times a step, so contention is negligible. */
#include "em-tensor.h"

#include <pthread.h>
#include <stdlib.h>

#define N_CLASSES 128

typedef struct block {
  struct block *next;
} block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static block *free_lists[N_CLASSES];
static em_memory_stats stats;

/* Class index and its size for a request of n bytes. */
static int size_class(size_t n, size_t *class_bytes) {
  if (n <= 64) {
    *class_bytes = 64;
    return 0;
  }
  int p = 64 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^p >= n */
  size_t full = (size_t)1 << p, half = full - (full >> 2);       /* 0.75 * 2^p */
  int idx = 2 * (p - 6);
  if (n <= half) {
    *class_bytes = half;
    return idx - 1;
  }
  *class_bytes = full;
  return idx;
}

void *em_alloc(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  size_t bytes;
  int c = size_class(nbytes, &bytes);
  if (c >= N_CLASSES) return NULL;
  pthread_mutex_lock(&lock);
  block *b = free_lists[c];
  if (b) free_lists[c] = b->next;
  stats.alloc_count++;
  stats.allocated_bytes += (int64_t)bytes;
  if (stats.allocated_bytes > stats.peak_allocated_bytes)
    stats.peak_allocated_bytes = stats.allocated_bytes;
  if (!b) {
    stats.system_alloc_count++;
    stats.reserved_bytes += (int64_t)bytes;
  }
  pthread_mutex_unlock(&lock);
  if (!b) {
    b = aligned_alloc(64, (bytes + 63) & ~(size_t)63); /* C11: a multiple of the alignment */
    if (!b) {
      pthread_mutex_lock(&lock);
      stats.allocated_bytes -= (int64_t)bytes;
      stats.reserved_bytes -= (int64_t)bytes;
      pthread_mutex_unlock(&lock);
      return NULL;
    }
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
  b->next = free_lists[c];
  free_lists[c] = b;
  stats.allocated_bytes -= (int64_t)bytes;
  pthread_mutex_unlock(&lock);
}

void em_memory_stats_get(em_memory_stats *out) {
  pthread_mutex_lock(&lock);
  *out = stats;
  pthread_mutex_unlock(&lock);
}

void em_memory_reset_peak(void) {
  pthread_mutex_lock(&lock);
  stats.peak_allocated_bytes = stats.allocated_bytes;
  pthread_mutex_unlock(&lock);
}

void em_memory_release_cached(void) {
  pthread_mutex_lock(&lock);
  for (int c = 0; c < N_CLASSES; c++) {
    while (free_lists[c]) {
      block *b = free_lists[c];
      free_lists[c] = b->next;
      size_t bytes;
      /* recover the class size from the index */
      if (c == 0) bytes = 64;
      else {
        int p = c / 2 + 6 + (c & 1);
        bytes = (c & 1) ? ((size_t)1 << p) - ((size_t)1 << (p - 2)) : (size_t)1 << p;
      }
      stats.reserved_bytes -= (int64_t)bytes;
      free(b);
    }
  }
  pthread_mutex_unlock(&lock);
}
