/* ref-backend.c: the reference device's backend: memory, copies, info and
 * allocator statistics (its kernels are in ref-kernels.c and the other
 * ref-*.c files).
 *
 * The reference device runs the device code path on the host, so its
 * memory is host memory, but it goes through a real caching allocator
 * with the statistics of em_memory_stats, kept per device index, so that
 * the device layer's memory behaviour (caching, peaks, out-of-memory) is
 * tested on machines without a GPU:
 *  - requests are rounded up to 512 bytes (PyTorch's granularity); each
 *    block is 256-byte aligned and carries a 256-byte header (its size
 *    and device) just below the address handed out;
 *  - a freed block is cached; a request takes the smallest cached block
 *    of its device that fits and wastes at most half of it (best fit, no
 *    splitting), else a new block from the system;
 *  - with EMBER_REF_DEVICE_MEMORY=bytes in the environment (read once), a
 *    device's reserved bytes never exceed that cap: a request that would
 *    pass it first releases the device's cache, then fails (NULL), so
 *    out-of-memory can be tested; the statistics stay as they were.
 * EMBER_REF_DEVICES (0 to 16, default 1) sets how many devices there are.
 * One mutex guards every device's lists and counters. Copies are memcpy;
 * nothing is asynchronous, so synchronize does nothing. */
#include "ref-private.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REF_MAX_DEVICES 16
#define REF_ALIGN 256   /* alignment of every block handed out */
#define REF_HEADER 256  /* bytes below each block: its header */
#define REF_ROUND 512   /* requests are rounded up to this */
#define REF_MAGIC 0x52454642u /* "REFB" */

typedef struct ref_block {
  uint32_t magic;
  int device;
  size_t size;            /* usable bytes (a multiple of REF_ROUND) */
  struct ref_block *next; /* the device's cache, sorted by size */
} ref_block;

typedef struct {
  ref_block *cache; /* free blocks, smallest first */
  em_memory_stats st;
} ref_device;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static ref_device devices[REF_MAX_DEVICES];
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int n_devices = 1;
static int64_t cap_bytes; /* 0: no cap */

/* A non-negative integer from the environment, or -1 when unset or not
 * one. */
static int64_t env_int(const char *name) {
  const char *s = getenv(name);
  if (!s || !*s) return -1;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end || v < 0) return -1;
  return (int64_t)v;
}

static void read_env(void) {
  int64_t n = env_int("EMBER_REF_DEVICES");
  if (n >= 0) n_devices = n > REF_MAX_DEVICES ? REF_MAX_DEVICES : (int)n;
  int64_t cap = env_int("EMBER_REF_DEVICE_MEMORY");
  if (cap > 0) cap_bytes = cap;
}

static int ref_count(void) {
  pthread_once(&env_once, read_env);
  return n_devices;
}

static void ref_why_none(em_error *err) {
  em_error_set(err, EM_ERR_UNSUPPORTED,
               "no reference device: EMBER_REF_DEVICES is 0 in the environment (unset it, or "
               "set it to 1 or more)");
}


static ref_device *device_at(int index) {
  pthread_once(&env_once, read_env);
  EM_ASSERT(index >= 0 && index < REF_MAX_DEVICES);
  return &devices[index];
}

/* Frees dev's cached blocks (under lock). */
static void release_locked(ref_device *dev) {
  while (dev->cache) {
    ref_block *b = dev->cache;
    dev->cache = b->next;
    dev->st.reserved_bytes -= (int64_t)b->size;
    dev->st.cached_blocks--;
    free(b);
  }
}

static void *ref_alloc(int index, size_t nbytes) {
  ref_device *dev = device_at(index);
  if (nbytes > (size_t)INT64_MAX / 2) return NULL;
  size_t size = nbytes == 0 ? REF_ROUND : (nbytes + REF_ROUND - 1) / REF_ROUND * REF_ROUND;
  pthread_mutex_lock(&lock);
  /* Best fit: the cache is sorted, so the first that fits is the smallest. */
  ref_block **at = &dev->cache;
  while (*at && (*at)->size < size) at = &(*at)->next;
  ref_block *b = NULL;
  if (*at && (*at)->size / 2 <= size) {
    b = *at;
    *at = b->next;
    dev->st.cached_blocks--;
  } else {
    if (cap_bytes && dev->st.reserved_bytes + (int64_t)size > cap_bytes) {
      release_locked(dev);
      if (dev->st.reserved_bytes + (int64_t)size > cap_bytes) {
        pthread_mutex_unlock(&lock);
        return NULL;
      }
    }
    b = aligned_alloc(REF_ALIGN, REF_HEADER + size);
    if (!b) { /* the system is out of memory: drop the cache and retry once */
      release_locked(dev);
      b = aligned_alloc(REF_ALIGN, REF_HEADER + size);
    }
    if (!b) {
      pthread_mutex_unlock(&lock);
      return NULL;
    }
    b->magic = REF_MAGIC;
    b->device = index;
    b->size = size;
    dev->st.system_alloc_count++;
    dev->st.reserved_bytes += (int64_t)size;
    if (dev->st.reserved_bytes > dev->st.peak_reserved_bytes)
      dev->st.peak_reserved_bytes = dev->st.reserved_bytes;
  }
  b->next = NULL;
  dev->st.alloc_count++;
  dev->st.allocated_bytes += (int64_t)b->size;
  if (dev->st.allocated_bytes > dev->st.peak_allocated_bytes)
    dev->st.peak_allocated_bytes = dev->st.allocated_bytes;
  pthread_mutex_unlock(&lock);
  return (char *)b + REF_HEADER;
}

static void ref_free(int index, void *p, size_t nbytes) {
  (void)nbytes; /* the header knows the block's size */
  if (!p) return;
  ref_block *b = (ref_block *)(void *)((char *)p - REF_HEADER);
  EM_ASSERT(b->magic == REF_MAGIC && "ref device: freeing memory it did not allocate");
  EM_ASSERT(b->device == index && "ref device: block freed on another device");
  ref_device *dev = device_at(index);
  pthread_mutex_lock(&lock);
  ref_block **at = &dev->cache;
  while (*at && (*at)->size < b->size) at = &(*at)->next;
  b->next = *at;
  *at = b;
  dev->st.allocated_bytes -= (int64_t)b->size;
  dev->st.free_count++;
  dev->st.cached_blocks++;
  pthread_mutex_unlock(&lock);
}

static void ref_stats(int index, em_memory_stats *out) {
  ref_device *dev = device_at(index);
  pthread_mutex_lock(&lock);
  *out = dev->st;
  out->largest_free_block = 0;
  for (ref_block *b = dev->cache; b; b = b->next) out->largest_free_block = (int64_t)b->size;
  pthread_mutex_unlock(&lock);
}

static void ref_reset_peak(int index) {
  ref_device *dev = device_at(index);
  pthread_mutex_lock(&lock);
  dev->st.peak_allocated_bytes = dev->st.allocated_bytes;
  dev->st.peak_reserved_bytes = dev->st.reserved_bytes;
  pthread_mutex_unlock(&lock);
}

static void ref_release_cached(int index) {
  ref_device *dev = device_at(index);
  pthread_mutex_lock(&lock);
  release_locked(dev);
  pthread_mutex_unlock(&lock);
}

static em_status ref_info(int index, em_device_info *out, em_error *err) {
  if (index < 0 || index >= ref_count())
    return em_error_set(err, EM_ERR_INVALID, "ref:%d does not exist: %d reference device(s)",
                        index, ref_count());
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "reference device (host memory)");
  em_memory_stats st;
  ref_stats(index, &st);
  em_device_info host; /* its memory is the host's */
  em_device_info_get(em_device_cpu(), &host, NULL);
  out->total_bytes = cap_bytes ? cap_bytes : host.total_bytes;
  out->free_bytes = out->total_bytes - st.reserved_bytes;
  if (out->free_bytes < 0) out->free_bytes = 0;
  out->multiprocessors = host.multiprocessors;
  return EM_OK;
}

static void ref_memcpy(int index, void *dst, const void *src, size_t n) {
  (void)index;
  if (n) memcpy(dst, src, n);
}

static void ref_synchronize(int index) { (void)index; }

const em_backend *em_ref_backend(void) {
  static const em_backend backend = {
    .name = "ref",
    .count = ref_count,
    .why_none = ref_why_none,
    .info = ref_info,
    .alloc = ref_alloc,
    .free = ref_free,
    .stats = ref_stats,
    .reset_peak = ref_reset_peak,
    .release_cached = ref_release_cached,
    .memcpy_h2d = ref_memcpy,
    .memcpy_d2h = ref_memcpy,
    .memcpy_d2d = ref_memcpy,
    .synchronize = ref_synchronize,
    .host_alloc = NULL, /* plain host memory */
    .host_free = NULL,
    .k = &em_ref_kernels,
  };
  return &backend;
}
