/* test-loader.c: the data loader: every sample once per epoch, the same
 * order whatever the number of workers, a new order per epoch and the
 * same one again for the same (seed, epoch), drop_last and limit, the
 * distributed sampler, errors, recycled buffers and clean shutdown. */
#include <time.h>
#include <unistd.h>

#include "data-test-util.h"
#include "em-data.h"

/* A dataset whose sample i is (i, -i, 0.5) with label i % 7; it can be
 * slowed down or made to fail at one index. */
typedef struct {
  int64_t n;
  int64_t fail_at; /* -1: never */
  int sleep_us;
} id_set;

static int64_t id_len(const void *impl) { return ((const id_set *)impl)->n; }
static int id_shape(const void *impl, int64_t *shape) {
  shape[0] = 3;
  return 1;
}
static int id_classes(const void *impl) { return 7; }
static em_status id_get(const void *impl, int64_t i, float *x /* (3) */, int64_t *y,
                        em_error *err) {
  const id_set *s = impl;
  if (s->sleep_us) g_usleep(s->sleep_us);
  if (i == s->fail_at) return em_error_set(err, EM_ERR_FORMAT, "id: sample %lld is corrupt",
                                           (long long)i);
  x[0] = (float)i;
  x[1] = -(float)i;
  x[2] = 0.5f;
  *y = i % 7;
  return EM_OK;
}
static void id_free(void *impl) { g_free(impl); }
static const em_dataset_vtable id_vt = {
    .kind = "id", .len = id_len, .sample_shape = id_shape, .num_classes = id_classes,
    .get = id_get, .free = id_free};

static em_dataset *id_dataset(int64_t n, int64_t fail_at, int sleep_us) {
  id_set *s = g_new0(id_set, 1);
  s->n = n;
  s->fail_at = fail_at;
  s->sleep_us = sleep_us;
  em_error err = {0};
  em_dataset *ds = em_dataset_new(&id_vt, s, &err);
  g_assert_nonnull(ds);
  return ds;
}

/* Runs one epoch and returns the sample ids in delivery order (g_free). */
static int64_t *run_epoch(em_loader *l, int64_t epoch, int64_t *count) {
  em_loader_start_epoch(l, epoch);
  int64_t cap = em_loader_samples_per_epoch(l), n = 0, batches = 0;
  int64_t *ids = g_new(int64_t, cap + 1);
  em_batch b;
  em_error err = {0};
  while (em_loader_next(l, &b, &err)) {
    g_assert_cmpint(b.n, >, 0);
    for (int64_t j = 0; j < b.n; j++) {
      g_assert_cmpint(n, <, cap);
      int64_t id = (int64_t)b.x[j * 3];
      g_assert_cmpfloat(b.x[j * 3 + 1], ==, -(float)id);
      g_assert_cmpfloat(b.x[j * 3 + 2], ==, 0.5f);
      g_assert_cmpint(b.y[j], ==, id % 7);
      ids[n++] = id;
    }
    batches++;
  }
  g_assert_cmpint(err.status, ==, EM_OK);
  g_assert_cmpint(batches, ==, em_loader_batches_per_epoch(l));
  g_assert_cmpint(n, ==, em_loader_samples_per_epoch(l));
  /* The end is sticky until the next epoch. */
  g_assert_false(em_loader_next(l, &b, &err));
  g_assert_cmpint(err.status, ==, EM_OK);
  *count = n;
  return ids;
}

static em_loader *loader(const em_dataset *ds, int bs, int workers, bool shuffle,
                         bool drop_last, int64_t limit, int rank, int world) {
  em_loader_config c;
  em_loader_config_defaults(&c);
  c.batch_size = bs;
  c.workers = workers;
  c.shuffle = shuffle;
  c.drop_last = drop_last;
  c.limit = limit;
  c.rank = rank;
  c.world = world;
  c.seed = 1234;
  em_error err = {0};
  em_loader *l = em_loader_new(ds, &c, &err);
  g_assert_nonnull(l);
  return l;
}

static void assert_permutation(const int64_t *ids, int64_t n, int64_t of) {
  g_assert_cmpint(n, ==, of);
  guint8 *seen = g_new0(guint8, of);
  for (int64_t i = 0; i < n; i++) {
    g_assert_cmpint(ids[i], >=, 0);
    g_assert_cmpint(ids[i], <, of);
    g_assert_cmpint(seen[ids[i]], ==, 0);
    seen[ids[i]] = 1;
  }
  g_free(seen);
}

/* Batches in page-locked memory (for a GPU; plain aligned memory where no
 * GPU backend is present) hold what plain ones do, in the same order. */
static void test_pinned(void) {
  em_dataset *ds = id_dataset(300, -1, 0);
  em_loader_config c;
  em_loader_config_defaults(&c);
  c.batch_size = 32;
  c.workers = 2;
  c.seed = 1234;
  em_error err = {0};
  em_loader *plain = em_loader_new(ds, &c, &err);
  c.pinned = true;
  em_loader *pinned = em_loader_new(ds, &c, &err);
  g_assert_nonnull(plain);
  g_assert_nonnull(pinned);
  for (int64_t epoch = 0; epoch < 2; epoch++) {
    int64_t n, m;
    int64_t *a = run_epoch(plain, epoch, &n), *b = run_epoch(pinned, epoch, &m);
    g_assert_cmpmem(a, (size_t)n * sizeof(int64_t), b, (size_t)m * sizeof(int64_t));
    g_free(a);
    g_free(b);
  }
  em_loader_free(plain);
  em_loader_free(pinned);
  em_dataset_free(ds);
}

static void test_order(void) {
  em_dataset *ds = id_dataset(1000, -1, 0);
  int64_t *ref[3] = {NULL};
  const int workers[3] = {0, 1, 3};
  for (int w = 0; w < 3; w++) {
    em_loader *l = loader(ds, 32, workers[w], true, false, 0, 0, 1);
    g_assert_cmpint(em_loader_batches_per_epoch(l), ==, 32);
    int64_t n;
    int64_t *e0 = run_epoch(l, 0, &n);
    assert_permutation(e0, n, 1000);
    int64_t *e1 = run_epoch(l, 1, &n);
    assert_permutation(e1, n, 1000);
    g_assert_true(memcmp(e0, e1, sizeof(int64_t) * 1000) != 0); /* a new order per epoch */
    int64_t *again = run_epoch(l, 0, &n);                        /* resume at epoch 0 */
    g_assert_cmpmem(e0, 1000 * sizeof(int64_t), again, (size_t)n * sizeof(int64_t));
    bool sorted = true;
    for (int i = 1; i < 1000; i++) sorted &= e0[i] > e0[i - 1];
    g_assert_false(sorted);
    if (w == 0) ref[0] = e0;
    else {
      g_assert_cmpmem(ref[0], 1000 * sizeof(int64_t), e0, 1000 * sizeof(int64_t));
      g_free(e0);
    }
    g_free(e1);
    g_free(again);
    em_loader_free(l);
  }
  /* A fresh loader resuming straight at epoch 1 gets epoch 1's order. */
  em_loader *l = loader(ds, 32, 3, true, false, 0, 0, 1);
  em_loader *k = loader(ds, 32, 0, true, false, 0, 0, 1);
  int64_t n;
  int64_t *a = run_epoch(l, 1, &n), *b = run_epoch(k, 1, &n);
  g_assert_cmpmem(a, 1000 * sizeof(int64_t), b, 1000 * sizeof(int64_t));
  g_free(a);
  g_free(b);
  em_loader_free(l);
  em_loader_free(k);
  /* Without shuffle: 0, 1, 2, ... */
  l = loader(ds, 64, 2, false, false, 0, 0, 1);
  a = run_epoch(l, 5, &n);
  for (int64_t i = 0; i < n; i++) g_assert_cmpint(a[i], ==, i);
  g_free(a);
  em_loader_free(l);
  g_free(ref[0]);
  em_dataset_free(ds);
}

static void test_first_next_starts_epoch0(void) {
  em_dataset *ds = id_dataset(50, -1, 0);
  em_loader *l = loader(ds, 8, 2, true, false, 0, 0, 1);
  em_batch b;
  em_error err = {0};
  int64_t first[8];
  g_assert_true(em_loader_next(l, &b, &err));
  for (int j = 0; j < 8; j++) first[j] = (int64_t)b.x[j * 3];
  int64_t n;
  int64_t *e0 = run_epoch(l, 0, &n);
  g_assert_cmpmem(first, sizeof first, e0, sizeof first);
  g_free(e0);
  em_loader_free(l);
  em_dataset_free(ds);
}

static void test_drop_last_limit(void) {
  em_dataset *ds = id_dataset(103, -1, 0);
  for (int w = 0; w < 3; w += 2) {
    em_loader *l = loader(ds, 10, w, true, false, 0, 0, 1);
    g_assert_cmpint(em_loader_batches_per_epoch(l), ==, 11);
    g_assert_cmpint(em_loader_samples_per_epoch(l), ==, 103);
    int64_t n;
    int64_t *a = run_epoch(l, 0, &n);
    assert_permutation(a, n, 103);
    g_free(a);
    em_loader_free(l);

    l = loader(ds, 10, w, true, true, 0, 0, 1);
    g_assert_cmpint(em_loader_batches_per_epoch(l), ==, 10);
    g_assert_cmpint(em_loader_samples_per_epoch(l), ==, 100);
    a = run_epoch(l, 0, &n);
    g_assert_cmpint(n, ==, 100);
    g_free(a);
    em_loader_free(l);

    l = loader(ds, 16, w, true, false, 50, 0, 1);
    g_assert_cmpint(em_loader_samples_per_epoch(l), ==, 50);
    g_assert_cmpint(em_loader_batches_per_epoch(l), ==, 4);
    a = run_epoch(l, 3, &n);
    assert_permutation(a, n, 50); /* only the first 50 samples */
    g_free(a);
    em_loader_free(l);

    l = loader(ds, 16, w, false, true, 1000, 0, 1); /* limit beyond the dataset: all */
    g_assert_cmpint(em_loader_samples_per_epoch(l), ==, 96);
    em_loader_free(l);
  }
  em_dataset_free(ds);
}

static void test_distributed(void) {
  const int64_t sizes[2] = {100, 103};
  for (int si = 0; si < 2; si++) {
    int64_t len = sizes[si];
    em_dataset *ds = id_dataset(len, -1, 0);
    const int world = 4;
    int64_t per = (len + world - 1) / world;
    int *seen = g_new0(int, len);
    int64_t total = 0;
    for (int rank = 0; rank < world; rank++) {
      em_loader *l = loader(ds, 8, rank % 2 ? 2 : 0, true, false, 0, rank, world);
      g_assert_cmpint(em_loader_samples_per_epoch(l), ==, per);
      int64_t n;
      int64_t *a = run_epoch(l, 2, &n);
      g_assert_cmpint(n, ==, per);
      for (int64_t i = 0; i < n; i++) seen[a[i]]++;
      total += n;
      g_free(a);
      em_loader_free(l);
    }
    /* Every sample is somewhere; only the padding repeats any. */
    g_assert_cmpint(total, ==, per * world);
    int64_t repeats = 0;
    for (int64_t i = 0; i < len; i++) {
      g_assert_cmpint(seen[i], >=, 1);
      repeats += seen[i] - 1;
    }
    g_assert_cmpint(repeats, ==, per * world - len);
    g_free(seen);
    em_dataset_free(ds);
  }
  /* The shares are the strided slices of the single-process order. */
  em_dataset *ds = id_dataset(100, -1, 0);
  em_loader *one = loader(ds, 100, 0, true, false, 0, 0, 1);
  em_loader *r1 = loader(ds, 100, 1, true, false, 0, 1, 3);
  int64_t n1, n3;
  int64_t *all = run_epoch(one, 7, &n1), *part = run_epoch(r1, 7, &n3);
  g_assert_cmpint(n3, ==, 34);
  for (int64_t j = 0; j < n3; j++) g_assert_cmpint(part[j], ==, all[(1 + 3 * j) % 100]);
  g_free(all);
  g_free(part);
  em_loader_free(one);
  em_loader_free(r1);
  em_dataset_free(ds);
}

static void test_errors(void) {
  em_dataset *ds = id_dataset(100, 37, 0);
  for (int w = 0; w < 3; w += 2) {
    em_loader *l = loader(ds, 10, w, false, false, 0, 0, 1);
    em_batch b;
    em_error err = {0};
    int batches = 0;
    while (em_loader_next(l, &b, &err)) batches++;
    g_assert_cmpint(batches, ==, 3);
    g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
    dt_assert_msg(err.msg, "sample 37 is corrupt", "batch 3", NULL);
    em_error again = {0};
    g_assert_false(em_loader_next(l, &b, &again));
    g_assert_cmpint(again.status, ==, EM_ERR_FORMAT);
    em_loader_start_epoch(l, 1); /* a new epoch starts clean */
    g_assert_true(em_loader_next(l, &b, &err));
    em_loader_free(l);
  }
  em_loader_config c;
  em_loader_config_defaults(&c);
  em_error err = {0};
  c.batch_size = 0;
  g_assert_null(em_loader_new(ds, &c, &err));
  dt_assert_msg(err.msg, "batch_size", NULL);
  em_loader_config_defaults(&c);
  c.rank = 2;
  c.world = 2;
  g_assert_null(em_loader_new(ds, &c, &err));
  dt_assert_msg(err.msg, "rank 2 of world 2", NULL);
  em_loader_config_defaults(&c);
  c.limit = -1;
  g_assert_null(em_loader_new(ds, &c, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_INVALID);
  em_dataset_free(ds);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Buffers are recycled (a fixed set of slots), and freeing or restarting
 * mid-epoch with busy workers neither hangs nor leaks. */
static void test_recycle_and_shutdown(void) {
  em_dataset *ds = id_dataset(2000, -1, 0);
  em_loader_config c;
  em_loader_config_defaults(&c);
  c.batch_size = 10;
  c.workers = 3;
  c.prefetch = 4;
  em_error err = {0};
  em_loader *l = em_loader_new(ds, &c, &err);
  const float *ptrs[16];
  int n_ptrs = 0;
  for (int e = 0; e < 3; e++) {
    em_loader_start_epoch(l, e);
    em_batch b;
    while (em_loader_next(l, &b, &err)) {
      int k = 0;
      while (k < n_ptrs && ptrs[k] != b.x) k++;
      if (k == n_ptrs) {
        g_assert_cmpint(n_ptrs, <, 16);
        ptrs[n_ptrs++] = b.x;
      }
    }
  }
  g_assert_cmpint(n_ptrs, <=, c.prefetch + 1);
  em_loader_free(l);
  em_dataset_free(ds);

  /* A slow dataset (2 ms a sample, 64 ms a batch): stop mid-epoch. */
  ds = id_dataset(100000, -1, 2000);
  c.batch_size = 32;
  for (int round = 0; round < 3; round++) {
    l = em_loader_new(ds, &c, &err);
    em_loader_start_epoch(l, 0);
    em_batch b;
    for (int k = 0; k < round; k++) g_assert_true(em_loader_next(l, &b, &err));
    double t0 = now_s();
    if (round == 2) {
      em_loader_start_epoch(l, 1); /* drop the rest of epoch 0 */
      g_assert_true(em_loader_next(l, &b, &err));
      g_assert_cmpint(b.n, ==, 32);
      t0 = now_s();
    }
    em_loader_free(l);
    double dt = now_s() - t0;
    g_test_message("free mid-epoch took %.1f ms", dt * 1e3);
    g_assert_cmpfloat(dt, <, 0.5); /* fills stop between samples */
  }
  em_dataset_free(ds);
}

/* A real epoch of Fashion-MNIST, timed for 0 and 2 workers. */
static void test_fmnist_epoch(void) {
  em_error err = {0};
  em_dataset *ds = em_dataset_fashion_mnist(NULL, true, &err);
  if (!ds) {
    g_test_skip(err.msg);
    return;
  }
  const int workers[2] = {0, 2};
  for (int w = 0; w < 2; w++) {
    em_loader_config c;
    em_loader_config_defaults(&c);
    c.batch_size = 128;
    c.workers = workers[w];
    em_loader *l = em_loader_new(ds, &c, &err);
    g_assert_nonnull(l);
    double t0 = now_s();
    em_loader_start_epoch(l, 0);
    em_batch b;
    int64_t seen = 0, counts[10] = {0};
    while (em_loader_next(l, &b, &err)) {
      for (int64_t j = 0; j < b.n; j++) counts[b.y[j]]++;
      seen += b.n;
    }
    double dt = now_s() - t0;
    g_assert_cmpint(err.status, ==, EM_OK);
    g_assert_cmpint(seen, ==, 60000);
    for (int k = 0; k < 10; k++) g_assert_cmpint(counts[k], ==, 6000);
    g_test_message("Fashion-MNIST epoch (batch 128, %d workers): %.1f ms", workers[w], dt * 1e3);
    em_loader_free(l);
  }
  em_dataset_free(ds);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/data/loader/order", test_order);
  g_test_add_func("/engine/data/loader/pinned", test_pinned);
  g_test_add_func("/engine/data/loader/first-next", test_first_next_starts_epoch0);
  g_test_add_func("/engine/data/loader/drop-last-limit", test_drop_last_limit);
  g_test_add_func("/engine/data/loader/distributed", test_distributed);
  g_test_add_func("/engine/data/loader/errors", test_errors);
  g_test_add_func("/engine/data/loader/recycle-shutdown", test_recycle_and_shutdown);
  g_test_add_func("/engine/data/loader/fashion-mnist-epoch", test_fmnist_epoch);
  return g_test_run();
}
