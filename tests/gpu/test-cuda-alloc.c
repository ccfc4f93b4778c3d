/* test-cuda-alloc.c: the CUDA backend's caching allocator
 * (engine/cuda/cuda-alloc.cu), its statistics and copies.
 *
 * On cuda:0, through em_device_alloc / em_device_free and the device
 * statistics (suite gpu; exits 77, skip, where no CUDA device is present):
 *  - a small request is rounded to 512 bytes and cut from a 2 MiB segment
 *    whose rest stays cached; freeing merges it back; the same request
 *    again reuses the segment (no new cudaMalloc);
 *  - a 5 MiB request is cut from a 20 MiB segment, a 50 MiB one gets a
 *    segment of its own; peaks, counts, cached blocks and the largest
 *    free block move as expected; reset_peak and release_cached;
 *  - out of memory: an absurd request and one larger than the device give
 *    NULL and a sticky error that names cuda:0 and the allocator's state;
 *  - threads allocating and freeing at once leave every count balanced;
 *  - copies host -> device -> host, from pageable and pinned memory.
 * With EMBER_TEST_CUDA_ALLOC=host (test-cuda-alloc-host, suite device:
 * every build with the CUDA backend, no GPU needed) the same checks run on
 * the allocator itself with host memory behind it (em_cuda_alloc_set_driver),
 * the out-of-memory ones against a 128 MiB cap: a segment that does not fit
 * releases the cached segments and succeeds on the retry, or fails; and a
 * CUDA call that fails outside a kernel (context, copies, frees) becomes
 * the thread's device error naming the call, without aborting. */
#include <glib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-device.h"
#include "em-tensor.h"

#include "../../engine/device/device-private.h"
#ifdef EM_TEST_CUDA_BUILT
#include "../../engine/cuda/cuda-alloc.h"
#include "../../engine/cuda/cuda-check.h"
#endif

#define MiB ((size_t)1 << 20)

static em_device cuda0(void) { return (em_device){EM_DEVICE_CUDA, 0}; }

/* Host mode: the allocator of cuda-alloc.cu on host memory. */
static bool host_mode;

#ifdef EM_TEST_CUDA_BUILT
#define HOST_CAP (128 * MiB)
static GMutex host_lock;
static size_t host_live;        /* bytes of segments held */
static GHashTable *host_sizes;  /* segment -> its size */
static int host_mallocs, host_frees;

static void *host_malloc(int index, size_t n) {
  g_assert_cmpint(index, ==, 0);
  g_mutex_lock(&host_lock);
  void *p = NULL;
  if (host_live + n <= HOST_CAP && (p = aligned_alloc(256, n))) {
    host_live += n;
    host_mallocs++;
    g_hash_table_insert(host_sizes, p, GSIZE_TO_POINTER(n));
  }
  g_mutex_unlock(&host_lock);
  return p;
}
static void host_free(int index, void *p) {
  g_mutex_lock(&host_lock);
  g_assert_true(g_hash_table_contains(host_sizes, p));
  host_live -= GPOINTER_TO_SIZE(g_hash_table_lookup(host_sizes, p));
  g_hash_table_remove(host_sizes, p);
  host_frees++;
  g_mutex_unlock(&host_lock);
  free(p);
}
static void host_sync(int index) {}
static const em_cuda_alloc_driver host_driver = {host_malloc, host_free, host_sync};
#endif

static em_memory_stats stats(void) {
  em_memory_stats s;
#ifdef EM_TEST_CUDA_BUILT
  if (host_mode) {
    em_cuda_stats(0, &s);
    return s;
  }
#endif
  em_device_memory_stats(cuda0(), &s);
  return s;
}

static void *alloc(size_t n) {
#ifdef EM_TEST_CUDA_BUILT
  if (host_mode) return em_cuda_alloc(0, n);
#endif
  return em_device_alloc(cuda0(), n, "test-cuda-alloc");
}
static void dfree(void *p, size_t n) {
#ifdef EM_TEST_CUDA_BUILT
  if (host_mode) {
    em_cuda_free(0, p, n);
    return;
  }
#endif
  em_device_free(cuda0(), p, n);
}

/* A clean start: nothing allocated, nothing cached, peaks at zero. */
static void clean(void) {
#ifdef EM_TEST_CUDA_BUILT
  if (host_mode) {
    em_cuda_release_cached(0);
    em_cuda_reset_peak(0);
  }
#endif
  if (!host_mode) {
    em_device_release_cached(cuda0());
    em_device_memory_reset_peak(cuda0());
  }
  em_memory_stats s = stats();
  g_assert_cmpint(s.allocated_bytes, ==, 0);
  g_assert_cmpint(s.reserved_bytes, ==, 0);
  g_assert_cmpint(s.cached_blocks, ==, 0);
  g_assert_cmpint(s.peak_allocated_bytes, ==, 0);
}

static void reset_peak(void) {
#ifdef EM_TEST_CUDA_BUILT
  if (host_mode) {
    em_cuda_reset_peak(0);
    return;
  }
#endif
  em_device_memory_reset_peak(cuda0());
}

static void release_cached(void) {
#ifdef EM_TEST_CUDA_BUILT
  if (host_mode) {
    em_cuda_release_cached(0);
    return;
  }
#endif
  em_device_release_cached(cuda0());
}

static void test_small(void) {
  clean();
  em_memory_stats s0 = stats();
  void *p = alloc(1000);
  g_assert_nonnull(p);
  g_assert_cmpuint((uintptr_t)p % 256, ==, 0);
  em_memory_stats s = stats();
  g_assert_cmpint(s.allocated_bytes, ==, 1024);
  g_assert_cmpint(s.reserved_bytes, ==, 2 * MiB);
  g_assert_cmpint(s.alloc_count - s0.alloc_count, ==, 1);
  g_assert_cmpint(s.system_alloc_count - s0.system_alloc_count, ==, 1);
  g_assert_cmpint(s.cached_blocks, ==, 1); /* the rest of the segment */
  g_assert_cmpint(s.largest_free_block, ==, 2 * MiB - 1024);

  void *q = alloc(1); /* rounded to 512, from the same segment */
  g_assert_nonnull(q);
  s = stats();
  g_assert_cmpint(s.allocated_bytes, ==, 1024 + 512);
  g_assert_cmpint(s.system_alloc_count - s0.system_alloc_count, ==, 1);
  g_assert_cmpint((char *)q - (char *)p, ==, 1024);

  dfree(p, 1000);
  dfree(q, 1);
  s = stats();
  g_assert_cmpint(s.allocated_bytes, ==, 0);
  g_assert_cmpint(s.free_count - s0.free_count, ==, 2);
  g_assert_cmpint(s.cached_blocks, ==, 1); /* merged back into one */
  g_assert_cmpint(s.largest_free_block, ==, 2 * MiB);
  g_assert_cmpint(s.peak_allocated_bytes, ==, 1536);

  void *r = alloc(1000);
  s = stats();
  g_assert_true(r == p); /* best fit: the same memory again */
  g_assert_cmpint(s.system_alloc_count - s0.system_alloc_count, ==, 1);
  dfree(r, 1000);
  clean();
}

static void test_large(void) {
  clean();
  em_memory_stats s0 = stats();
  void *a = alloc(5 * MiB);
  void *b = alloc(50 * MiB + 100);
  g_assert_nonnull(a);
  g_assert_nonnull(b);
  em_memory_stats s = stats();
  g_assert_cmpint(s.allocated_bytes, ==, 5 * MiB + 50 * MiB + 512);
  g_assert_cmpint(s.reserved_bytes, ==, 20 * MiB + 52 * MiB); /* 50 MiB + 612 -> 52 MiB */
  g_assert_cmpint(s.system_alloc_count - s0.system_alloc_count, ==, 2);
  /* The 20 MiB segment's rest (15 MiB) and the 52 MiB one's (2 MiB - 512,
   * more than 1 MiB) are cached. */
  g_assert_cmpint(s.cached_blocks, ==, 2);
  g_assert_cmpint(s.largest_free_block, ==, 15 * MiB);

  void *c = alloc(3 * MiB); /* fits the 15 MiB rest: no cudaMalloc */
  s = stats();
  g_assert_cmpint(s.system_alloc_count - s0.system_alloc_count, ==, 2);
  g_assert_cmpint(s.largest_free_block, ==, 12 * MiB);
  int64_t peak = s.allocated_bytes;

  dfree(b, 50 * MiB + 100);
  s = stats();
  g_assert_cmpint(s.peak_allocated_bytes, ==, peak);
  g_assert_cmpint(s.largest_free_block, ==, 52 * MiB);
  reset_peak();
  s = stats();
  g_assert_cmpint(s.peak_allocated_bytes, ==, 8 * MiB);
  g_assert_cmpint(s.peak_reserved_bytes, ==, 72 * MiB);

  /* Only whole free segments go back: the 52 MiB one. */
  release_cached();
  s = stats();
  g_assert_cmpint(s.reserved_bytes, ==, 20 * MiB);
  g_assert_cmpint(s.cached_blocks, ==, 1);
  dfree(a, 5 * MiB);
  dfree(c, 3 * MiB);
  s = stats();
  g_assert_cmpint(s.cached_blocks, ==, 1);
  g_assert_cmpint(s.largest_free_block, ==, 20 * MiB);
  clean();
}

static void test_oom(void) {
  clean();
  em_error err;
  g_assert_false(em_device_error_pending());
  g_assert_null(alloc((size_t)1 << 60));
  g_assert_true(em_device_error_pending());
  g_assert_cmpint(em_device_error_take(&err), ==, EM_ERR_NOMEM);
  g_assert_nonnull(strstr(err.msg, "out of memory on cuda:0"));
  g_assert_nonnull(strstr(err.msg, "test-cuda-alloc"));
  g_assert_false(em_device_error_pending());

  /* Larger than the device: cudaMalloc fails, the cache goes back, the
   * retry fails too. */
  em_device_info info;
  g_assert_cmpint(em_device_info_get(cuda0(), &info, &err), ==, EM_OK);
  void *keep = alloc(1000); /* a cached rest that cannot go back */
  void *gone = alloc(1000);
  dfree(gone, 1000);
  void *big = alloc(30 * MiB);
  dfree(big, 30 * MiB); /* a whole cached segment: released by the retry */
  g_assert_null(alloc((size_t)info.total_bytes * 2));
  g_assert_cmpint(em_device_error_take(&err), ==, EM_ERR_NOMEM);
  g_test_message("%s", err.msg);
  em_memory_stats s = stats();
  g_assert_cmpint(s.reserved_bytes, ==, 2 * MiB);
  g_assert_cmpint(s.allocated_bytes, ==, 1024);
  /* Still usable after. */
  void *p = alloc(4096);
  g_assert_nonnull(p);
  dfree(p, 4096);
  dfree(keep, 1000);
  clean();
}

#ifdef EM_TEST_CUDA_BUILT
/* Out of memory against the host driver's 128 MiB cap. */
static void test_oom_host(void) {
  clean();
  g_assert_null(alloc((size_t)1 << 60)); /* absurd: refused at once */
  int mallocs = host_mallocs, frees = host_frees;
  void *keep = alloc(1000);             /* a 2 MiB segment that stays */
  void *big = alloc(30 * MiB);
  dfree(big, 30 * MiB);                 /* a whole cached segment */
  g_assert_cmpint(stats().reserved_bytes, ==, 32 * MiB);
  /* 100 MiB does not fit beside 32: the cache goes back, the retry fits. */
  void *p = alloc(100 * MiB);
  g_assert_nonnull(p);
  em_memory_stats s = stats();
  g_assert_cmpint(s.reserved_bytes, ==, 102 * MiB);
  g_assert_cmpint(host_mallocs - mallocs, ==, 3);
  g_assert_cmpint(host_frees - frees, ==, 1);
  /* 30 MiB cannot fit even then: NULL, nothing changed. */
  g_assert_null(alloc(30 * MiB));
  s = stats();
  g_assert_cmpint(s.reserved_bytes, ==, 102 * MiB);
  g_assert_cmpint(s.allocated_bytes, ==, 100 * MiB + 1024);
  dfree(p, 100 * MiB);
  dfree(keep, 1000);
  clean();
  g_assert_cmpint(host_live, ==, 0);
}
#endif

static void *churn(void *arg) {
  guint32 seed = GPOINTER_TO_UINT(arg);
  void *held[16] = {0};
  size_t sizes[16] = {0};
  for (int i = 0; i < 2000; i++) {
    seed = seed * 1664525u + 1013904223u;
    int slot = (int)(seed >> 28);
    if (held[slot]) {
      dfree(held[slot], sizes[slot]);
      held[slot] = NULL;
    } else {
      sizes[slot] = (size_t)(seed >> 8) % (3 * MiB) + 1;
      held[slot] = alloc(sizes[slot]);
      g_assert_nonnull(held[slot]);
    }
  }
  for (int k = 0; k < 16; k++)
    if (held[k]) dfree(held[k], sizes[k]);
  return NULL;
}

static void test_threads(void) {
  clean();
  em_memory_stats s0 = stats();
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, churn, GUINT_TO_POINTER(i * 77 + 1));
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  em_memory_stats s = stats();
  g_assert_cmpint(s.allocated_bytes, ==, 0);
  g_assert_cmpint(s.alloc_count - s0.alloc_count, ==, s.free_count - s0.free_count);
  g_assert_cmpint(s.alloc_count - s0.alloc_count, >, 0);
  clean();
#ifdef EM_TEST_CUDA_BUILT
  if (host_mode) g_assert_cmpint(host_live, ==, 0); /* every segment went back */
#endif
}

static void test_copies(void) {
  em_error err;
  int64_t shape[1] = {100000};
  em_tensor *t = em_tensor_new_on(cuda0(), EM_DTYPE_F32, 1, shape, &err);
  g_assert_nonnull(t);
  float *src = g_new(float, shape[0]), *dst = g_new0(float, shape[0]);
  float *pin = em_host_pinned_alloc((size_t)shape[0] * sizeof(float));
  g_assert_nonnull(pin);
  for (int64_t i = 0; i < shape[0]; i++) src[i] = (float)i * 0.5f - 7.f;
  em_tensor_upload(t, src);
  em_tensor_download(t, dst);
  g_assert_cmpmem(src, shape[0] * sizeof(float), dst, shape[0] * sizeof(float));
  for (int64_t i = 0; i < shape[0]; i++) pin[i] = (float)-i;
  em_tensor_upload(t, pin);
  em_tensor_download(t, dst);
  g_assert_cmpmem(pin, shape[0] * sizeof(float), dst, shape[0] * sizeof(float));
  em_host_pinned_free(pin);
  g_free(src);
  g_free(dst);
  em_tensor_free(t);
}

#ifdef EM_TEST_CUDA_BUILT
/* What a failed copy or synchronize does (EM_CUDA_RAISE, cuda-private.h):
 * the recorded message becomes the pending device error, the caller goes
 * on, and a second failure keeps the first message. */
static void test_failed_call_raises(void) {
  g_assert_false(em_device_error_pending());
  EM_CUDA_RAISE(cudaErrorIllegalAddress);
  g_assert_true(em_device_error_pending());
  EM_CUDA_RAISE(cudaErrorInvalidValue); /* a later failure on a failed stream */
  em_error err;
  g_assert_cmpint(em_device_error_take(&err), !=, EM_OK);
  g_assert_nonnull(strstr(err.msg, "CUDA call failed in test_failed_call_raises"));
  g_assert_nonnull(strstr(err.msg, "cudaErrorIllegalAddress"));
  g_assert_null(strstr(err.msg, "cudaErrorInvalidValue"));
  g_assert_false(em_device_error_pending());
}
#endif

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  const char *mode = g_getenv("EMBER_TEST_CUDA_ALLOC");
  host_mode = mode && strcmp(mode, "host") == 0;
  if (host_mode) {
#ifdef EM_TEST_CUDA_BUILT
    host_sizes = g_hash_table_new(NULL, NULL);
    em_cuda_alloc_set_driver(&host_driver);
    g_test_add_func("/device/cuda-alloc-host/small", test_small);
    g_test_add_func("/device/cuda-alloc-host/large", test_large);
    g_test_add_func("/device/cuda-alloc-host/oom", test_oom_host);
    g_test_add_func("/device/cuda-alloc-host/threads", test_threads);
    g_test_add_func("/device/cuda-alloc-host/failed-call-raises", test_failed_call_raises);
    return g_test_run();
#else
    printf("skipped: this build has no CUDA backend\n");
    return 77;
#endif
  }
  if (em_device_count(EM_DEVICE_CUDA) == 0) {
    em_error err;
    em_device_check(cuda0(), &err);
    printf("skipped: %s\n", err.msg);
    return 77;
  }
  g_test_add_func("/gpu/cuda-alloc/small", test_small);
  g_test_add_func("/gpu/cuda-alloc/large", test_large);
  g_test_add_func("/gpu/cuda-alloc/oom", test_oom);
  g_test_add_func("/gpu/cuda-alloc/threads", test_threads);
  g_test_add_func("/gpu/cuda-alloc/copies", test_copies);
  return g_test_run();
}
