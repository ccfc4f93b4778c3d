/* test-core.c: scopes, the caching allocator (its size classes), views over persistent
 * tensors, the rng and the thread pool. */
#include <glib.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "em-pool.h"
#include "em-tensor.h"
#include "em-rng.h"

static void test_scope_steady_state(void) {
  int64_t shape[2] = {128, 256};
  /* First step warms the cache; later steps reach the system allocator
   * zero times. */
  em_memory_stats before, after;
  for (int step = 0; step < 5; step++) {
    if (step == 2) em_memory_stats_get(&before);
    em_scope *s = em_scope_begin();
    for (int k = 0; k < 50; k++) {
      em_tensor *t = em_zeros(EM_DTYPE_F32, 2, shape);
      g_assert_nonnull(t->data);
      em_tensor *u = em_empty(EM_DTYPE_F64, 1, &shape[1]);
      (void)u;
    }
    em_scope_end(s);
  }
  em_memory_stats_get(&after);
  g_assert_cmpint(after.system_alloc_count, ==, before.system_alloc_count);
  g_assert_cmpint(after.alloc_count, >, before.alloc_count);
  g_assert_cmpint(after.allocated_bytes, ==, before.allocated_bytes);
}

/* A block's padding: at most a third of it up to 1 MiB, at most 1/16 of
 * the request above (a large layer's weights, gradient and optimiser
 * state); a freed block of the same request is reused. */
static void test_alloc_classes(void) {
  const size_t ns[] = {1, 64, 65, 1000, 100000, 786433, 1048576, 1048577, 1114113,
                       1605632, 12845056, 100000000};
  for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
    em_memory_stats a, b, c;
    em_memory_stats_get(&a);
    void *p = em_alloc(ns[i]);
    g_assert_nonnull(p);
    g_assert_cmpuint((uintptr_t)p % 64, ==, 0);
    em_memory_stats_get(&b);
    int64_t got = b.allocated_bytes - a.allocated_bytes;
    g_assert_cmpint(got, >=, (int64_t)ns[i]);
    if (ns[i] > 64 && ns[i] <= (1u << 20)) g_assert_cmpint(3 * (got - (int64_t)ns[i]), <=, got);
    if (ns[i] > (1u << 20)) g_assert_cmpint(16 * (got - (int64_t)ns[i]), <=, (int64_t)ns[i]);
    memset(p, 1, ns[i]);
    em_free(p, ns[i]);
    em_memory_stats_get(&c);
    g_assert_cmpint(c.allocated_bytes, ==, a.allocated_bytes);
    void *q = em_alloc(ns[i]);
    g_assert_true(q == p);
    em_free(q, ns[i]);
  }
  em_memory_release_cached();
}

static void test_nested_scopes(void) {
  em_scope *outer = em_scope_begin();
  int64_t n = 4;
  em_tensor *a = em_full(EM_DTYPE_F32, 1, &n, 2.0);
  em_scope *inner = em_scope_begin();
  em_tensor *b = em_full(EM_DTYPE_F32, 1, &n, 3.0);
  g_assert_true(em_scope_current() == inner);
  g_assert_cmpfloat(em_f32(b)[3], ==, 3.0f);
  em_scope_end(inner);
  g_assert_true(em_scope_current() == outer);
  g_assert_cmpfloat(em_f32(a)[3], ==, 2.0f);
  em_scope_end(outer);
  g_assert_null(em_scope_current());
}

static void test_persistent_and_absurd(void) {
  em_error err = {0};
  int64_t big[3] = {1 << 20, 1 << 20, 1 << 20};
  g_assert_null(em_tensor_new(EM_DTYPE_F32, 3, big, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_NOMEM);
  g_assert_nonnull(strstr(err.msg, "too large"));
  int64_t neg[1] = {-3};
  g_assert_null(em_tensor_new(EM_DTYPE_F32, 1, neg, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_INVALID);

  int64_t shape[2] = {2, 3};
  em_tensor *p = em_tensor_new(EM_DTYPE_F64, 2, shape, &err);
  g_assert_nonnull(p);
  em_tensor_fill_(p, 1.5);
  em_scope *s = em_scope_begin();
  int64_t vshape[2] = {3, 2}, vstride[2] = {1, 3};
  em_tensor *v = em_view_raw(p, 2, vshape, vstride, 0); /* transpose view */
  g_assert_false(em_tensor_is_contiguous(v));
  int64_t idx[2] = {2, 1};
  g_assert_cmpfloat(em_tensor_get(v, idx), ==, 1.5);
  em_tensor *c = em_empty(EM_DTYPE_F32, 2, vshape);
  em_tensor_copy_(c, v);
  g_assert_cmpfloat(em_f32(c)[5], ==, 1.5f);
  em_scope_end(s);
  em_tensor_free(p); /* the view's scope did not free p's data */
}

static void test_rng(void) {
  em_rng a, b;
  em_rng_seed(&a, 42);
  em_rng_seed(&b, 42);
  for (int k = 0; k < 100; k++) g_assert_cmpuint(em_rng_next(&a), ==, em_rng_next(&b));
  double sum = 0, sq = 0;
  for (int k = 0; k < 20000; k++) {
    double x = em_rng_normal(&a);
    sum += x;
    sq += x * x;
  }
  g_assert_cmpfloat(fabs(sum / 20000), <, 0.05);
  g_assert_cmpfloat(fabs(sq / 20000 - 1), <, 0.05);
  for (int k = 0; k < 1000; k++) g_assert_cmpuint(em_rng_below(&a, 7), <, 7);
}

static void add_range(void *ctx, int64_t b, int64_t e) {
  int64_t *v = ctx;
  for (int64_t k = b; k < e; k++) v[k] = k * 2;
}

static void test_pool(void) {
  em_set_num_threads(2);
  int64_t n = 100000;
  int64_t *v = g_new0(int64_t, n);
  for (int rep = 0; rep < 50; rep++) em_parallel_for(n, 1000, add_range, v);
  for (int64_t k = 0; k < n; k++) g_assert_cmpint(v[k], ==, 2 * k);
  g_free(v);
  em_set_num_threads(1);
}

/* em_parallel_each: each thread index once per call, always on the same
 * thread; nested calls run inline as thread 0. */
typedef struct {
  pthread_t who[4];
  int calls[4];
  int nested_threads[4];
  int nested_t[4];
} each_log;

static void nested_each(void *ctx, int64_t t, int64_t end) {
  int *seen = ctx;
  (void)end;
  *seen = (int)t;
}

static void log_each(void *ctx, int64_t t, int64_t end) {
  each_log *l = ctx;
  g_assert_cmpint(end, ==, t + 1);
  g_assert_cmpint(t, >=, 0);
  g_assert_cmpint(t, <, 3);
  l->calls[t]++;
  l->who[t] = pthread_self();
  l->nested_threads[t] = em_parallel_threads();
  em_parallel_each(nested_each, &l->nested_t[t]);
}

static void count_share(void *ctx, int64_t s, int64_t end) {
  int *calls = ctx;
  g_assert_cmpint(end, ==, s + 1);
  __atomic_add_fetch(&calls[s], 1, __ATOMIC_RELAXED);
}

/* em_parallel_shares: every share exactly once, whoever runs it. */
static void test_pool_shares(void) {
  em_set_num_threads(3);
  for (int rep = 0; rep < 100; rep++) {
    int calls[4] = {0};
    if (rep % 25 == 24) g_usleep(2000); /* sleeping workers: the caller may take their shares */
    g_assert_cmpint(em_parallel_shares(count_share, calls), ==, 3);
    g_assert_cmpint(calls[0], ==, 1);
    g_assert_cmpint(calls[1], ==, 1);
    g_assert_cmpint(calls[2], ==, 1);
    g_assert_cmpint(calls[3], ==, 0);
  }
  em_set_num_threads(1);
  int one[2] = {0};
  g_assert_cmpint(em_parallel_shares(count_share, one), ==, 1);
  g_assert_cmpint(one[0], ==, 1);
}

static void test_pool_each(void) {
  em_set_num_threads(3);
  g_assert_cmpint(em_parallel_threads(), ==, 3);
  each_log first = {0};
  em_parallel_each(log_each, &first);
  g_assert_true(pthread_equal(first.who[0], pthread_self()));
  for (int rep = 0; rep < 200; rep++) {
    each_log l = {0};
    for (int t = 0; t < 3; t++) l.nested_t[t] = -1;
    if (rep % 50 == 49) g_usleep(2000);   /* the workers go to sleep: they must wake */
    if (rep % 50 == 25) em_pool_park();
    em_parallel_each(log_each, &l);
    for (int t = 0; t < 3; t++) {
      g_assert_cmpint(l.calls[t], ==, 1);
      g_assert_true(pthread_equal(l.who[t], first.who[t]));
      g_assert_cmpint(l.nested_threads[t], ==, 1);
      g_assert_cmpint(l.nested_t[t], ==, 0);
    }
  }
  em_set_num_threads(1);
  each_log one = {0};
  em_parallel_each(log_each, &one);
  g_assert_cmpint(one.calls[0], ==, 1);
  g_assert_true(pthread_equal(one.who[0], pthread_self()));
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/core/scope-steady-state", test_scope_steady_state);
  g_test_add_func("/engine/core/alloc-classes", test_alloc_classes);
  g_test_add_func("/engine/core/nested-scopes", test_nested_scopes);
  g_test_add_func("/engine/core/persistent-and-absurd", test_persistent_and_absurd);
  g_test_add_func("/engine/core/rng", test_rng);
  g_test_add_func("/engine/core/pool", test_pool);
  g_test_add_func("/engine/core/pool-each", test_pool_each);
  g_test_add_func("/engine/core/pool-shares", test_pool_shares);
  return g_test_run();
}
