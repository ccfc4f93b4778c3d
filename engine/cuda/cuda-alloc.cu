/* cuda-alloc.cu: the caching allocator of each CUDA device, after
 * PyTorch's CUDACachingAllocator.
 *
 * Requests are rounded up to 512 bytes. Small ones (<= 1 MiB) are cut from
 * 2 MiB segments, large ones from 20 MiB segments (below 10 MiB) or from a
 * segment of their own rounded up to 2 MiB. A freed block goes back to its
 * pool (small or large) and merges with free neighbours of its segment;
 * a request takes the smallest cached block that fits (best fit) and splits
 * off the rest (small pool: when at least 512 bytes remain; large pool:
 * when more than 1 MiB remains). cudaMalloc only happens when no cached
 * block fits; when it fails, the whole-segment cached blocks go back to
 * the driver and it is tried once more; then the request returns NULL (the
 * core records the out-of-memory error with these statistics).
 *
 * All work runs on the device's one stream, so a freed block can be handed
 * out again at once: later kernels that use it are queued after the ones
 * that used it before. Segments are released (cudaFree) only after that
 * stream has finished. Thread-safe: one mutex per device. Segments come
 * from a driver (cuda-alloc.h): cudaMalloc / cudaFree, or host memory in
 * the allocator's host test. */
#include "cuda-private.h"

#include <atomic>
#include <mutex>
#include <set>
#include <stdint.h>
#include <string.h>
#include <unordered_map>

namespace {

const size_t kMinBlock = 512;               /* rounding of every request */
const size_t kSmallSize = 1u << 20;         /* largest small request */
const size_t kSmallBuffer = 2u << 20;       /* segment of the small pool */
const size_t kLargeBuffer = 20u << 20;      /* segment for requests < kMinLargeAlloc */
const size_t kMinLargeAlloc = 10u << 20;
const size_t kRoundLarge = 2u << 20;        /* rounding of bigger segments */
const size_t kMaxRequest = (size_t)1 << 56; /* beyond any device: refused */

struct Block {
  char *ptr;
  size_t size;
  bool allocated;
  bool small; /* which pool */
  Block *prev, *next; /* neighbours within the segment */
};

struct BlockLess {
  bool operator()(const Block *a, const Block *b) const {
    if (a->size != b->size) return a->size < b->size;
    return (uintptr_t)a->ptr < (uintptr_t)b->ptr;
  }
};

typedef std::set<Block *, BlockLess> Pool;

struct Allocator {
  int index;
  std::mutex m;
  Pool small_free, large_free;
  std::unordered_map<void *, Block *> active;
  em_memory_stats s;
};

/* Made on a device's first use and kept for the process; every alloc and
 * free looks its device's up without taking allocators_lock. */
std::mutex allocators_lock;
std::atomic<Allocator *> allocators[256];

Allocator *allocator_of(int index) {
  EM_ASSERT(index >= 0 && index < 256);
  Allocator *a = allocators[index].load(std::memory_order_acquire);
  if (a) return a;
  std::lock_guard<std::mutex> g(allocators_lock);
  a = allocators[index].load(std::memory_order_relaxed);
  if (!a) {
    a = new Allocator();
    a->index = index;
    memset(&a->s, 0, sizeof a->s);
    allocators[index].store(a, std::memory_order_release);
  }
  return a;
}

size_t round_size(size_t n) {
  if (n < kMinBlock) return kMinBlock;
  return (n + kMinBlock - 1) / kMinBlock * kMinBlock;
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void bump_peaks(em_memory_stats *s) {
  if (s->allocated_bytes > s->peak_allocated_bytes) s->peak_allocated_bytes = s->allocated_bytes;
  if (s->reserved_bytes > s->peak_reserved_bytes) s->peak_reserved_bytes = s->reserved_bytes;
}

/* ---- the driver: segments from cudaMalloc (or a test's host memory) ---- */

void *cuda_malloc(int index, size_t n) {
  em_cuda_enter(index);
  void *p = NULL;
  if (EM_CUDA_CHECK(cudaMalloc(&p, n)) != EM_OK) {
    (void)cudaGetLastError(); /* out of memory is not sticky: clear it */
    return NULL;
  }
  return p;
}

void cuda_free(int index, void *p) {
  em_cuda_enter(index);
  EM_CUDA_RAISE(cudaFree(p));
}

void cuda_sync(int index) {
  em_cuda_ctx *c = em_cuda_enter(index);
  EM_CUDA_RAISE(cudaStreamSynchronize(em_cuda_stream(c)));
}

const em_cuda_alloc_driver cuda_driver = {cuda_malloc, cuda_free, cuda_sync};
const em_cuda_alloc_driver *driver = &cuda_driver;

/* Frees every cached block that is a whole segment. Caller holds a->m. */
void release_locked(Allocator *a) {
  bool synced = false;
  Pool *pools[2] = {&a->small_free, &a->large_free};
  for (Pool *pool : pools) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block *b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      if (!synced) {
        /* Kernels still queued may use memory about to go back. */
        driver->sync(a->index);
        synced = true;
      }
      driver->free(a->index, b->ptr);
      a->s.reserved_bytes -= (int64_t)b->size;
      it = pool->erase(it);
      delete b;
    }
  }
}

/* Merges block r into l, its left neighbour in the segment, and deletes
 * r. Neither may be in a pool (the pool's order is by size). */
void absorb(Block *l, Block *r) {
  l->size += r->size;
  l->next = r->next;
  if (r->next) r->next->prev = l;
  delete r;
}

/* A new segment of `seg` bytes from the driver, or NULL. Caller holds a->m. */
Block *new_segment(Allocator *a, size_t seg, bool small) {
  void *p = driver->malloc(a->index, seg);
  if (!p) {
    release_locked(a);
    p = driver->malloc(a->index, seg);
    if (!p) return NULL;
  }
  a->s.system_alloc_count++;
  a->s.reserved_bytes += (int64_t)seg;
  bump_peaks(&a->s);
  Block *b = new Block();
  b->ptr = (char *)p;
  b->size = seg;
  b->allocated = false;
  b->small = small;
  b->prev = b->next = NULL;
  return b;
}

} /* namespace */

void em_cuda_alloc_set_driver(const em_cuda_alloc_driver *d) { driver = d ? d : &cuda_driver; }

void *em_cuda_alloc(int index, size_t nbytes) {
  if (nbytes > kMaxRequest) return NULL;
  Allocator *a = allocator_of(index);
  std::lock_guard<std::mutex> g(a->m);
  size_t size = round_size(nbytes);
  bool small = size <= kSmallSize;
  Pool &pool = small ? a->small_free : a->large_free;

  Block key;
  key.ptr = NULL;
  key.size = size;
  Block *b = NULL;
  auto it = pool.lower_bound(&key);
  if (it != pool.end()) {
    b = *it;
    pool.erase(it);
  } else {
    b = new_segment(a, segment_size(size), small);
    if (!b) return NULL;
  }

  size_t rest = b->size - size;
  if (small ? rest >= kMinBlock : rest > kSmallSize) {
    Block *r = new Block();
    r->ptr = b->ptr + size;
    r->size = rest;
    r->allocated = false;
    r->small = small;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool.insert(r);
  }
  b->allocated = true;
  a->active[b->ptr] = b;
  a->s.allocated_bytes += (int64_t)b->size;
  a->s.alloc_count++;
  bump_peaks(&a->s);
  return b->ptr;
}

void em_cuda_free(int index, void *p, size_t nbytes) {
  (void)nbytes;
  if (!p) return;
  Allocator *a = allocator_of(index);
  std::lock_guard<std::mutex> g(a->m);
  auto it = a->active.find(p);
  EM_ASSERT(it != a->active.end() && "em_cuda_free of a pointer this allocator did not give");
  Block *b = it->second;
  a->active.erase(it);
  a->s.allocated_bytes -= (int64_t)b->size;
  a->s.free_count++;
  b->allocated = false;
  Pool &pool = b->small ? a->small_free : a->large_free;
  /* Merge with free neighbours of the same segment (out of the pool
   * first: its order is by size). */
  if (b->prev && !b->prev->allocated) {
    Block *q = b->prev;
    pool.erase(q);
    absorb(q, b);
    b = q;
  }
  if (b->next && !b->next->allocated) {
    pool.erase(b->next);
    absorb(b, b->next);
  }
  pool.insert(b);
}

void em_cuda_stats(int index, em_memory_stats *out) {
  Allocator *a = allocator_of(index);
  std::lock_guard<std::mutex> g(a->m);
  *out = a->s;
  out->cached_blocks = (int64_t)(a->small_free.size() + a->large_free.size());
  size_t largest = 0;
  if (!a->small_free.empty()) largest = (*a->small_free.rbegin())->size;
  if (!a->large_free.empty() && (*a->large_free.rbegin())->size > largest)
    largest = (*a->large_free.rbegin())->size;
  out->largest_free_block = (int64_t)largest;
}

void em_cuda_reset_peak(int index) {
  Allocator *a = allocator_of(index);
  std::lock_guard<std::mutex> g(a->m);
  a->s.peak_allocated_bytes = a->s.allocated_bytes;
  a->s.peak_reserved_bytes = a->s.reserved_bytes;
}

void em_cuda_release_cached(int index) {
  Allocator *a = allocator_of(index);
  std::lock_guard<std::mutex> g(a->m);
  release_locked(a);
}
