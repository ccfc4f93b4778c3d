/* test-dist-unit.c: the data-parallel pieces that need no MPI.
 *
 * - The loader's distributed sampler: PyTorch's DistributedSampler index
 *   pattern (the tables below were printed by torch 1.13,
 *   `list(DistributedSampler(range(n), num_replicas=w, rank=r,
 *   shuffle=False))`), and, with shuffling, every sample exactly once per
 *   epoch plus the wrap-around padding, over one permutation shared with
 *   the single-process loader.
 * - The gradient bucketer over a fake in-process communicator (a table
 *   of em_comm_vtable like any other implementation): bucket layout,
 *   launch order, launches during backward (overlap) or after it, and
 *   the averaged gradients it writes back; the same with the model on
 *   the reference device (device buckets, device copies and kernels),
 *   reduced in place or through host copies (the path of MPI with CUDA
 *   gradients); gradients that never came (zeros reduced); parameters
 *   on two devices refused. */
#include <glib.h>
#include <string.h>

#include "em-data.h"
#include "em-device.h"
#include "em-dist.h"
#include "em-nn.h"
#include "em-ops.h"

/* ---- a dataset whose sample i is the number i ----------------------------- */
static int64_t id_len(const void *impl) { return *(const int64_t *)impl; }
static int id_shape(const void *impl, int64_t *shape) {
  shape[0] = 1;
  return 1;
}
static int id_classes(const void *impl) { return 2; }
static em_status id_get(const void *impl, int64_t i, float *x, int64_t *y, em_error *err) {
  x[0] = (float)i;
  *y = i % 2;
  return EM_OK;
}
static const em_dataset_vtable id_vtable = {
    .kind = "index", .len = id_len, .sample_shape = id_shape, .num_classes = id_classes,
    .get = id_get, .free = g_free};

static em_dataset *index_dataset(int64_t n) {
  int64_t *impl = g_new(int64_t, 1);
  *impl = n;
  em_error err = {0};
  em_dataset *ds = em_dataset_new(&id_vtable, impl, &err);
  g_assert_nonnull(ds);
  return ds;
}

/* This rank's indices of epoch `epoch`, in order; *count gets how many. */
static int64_t *rank_indices(const em_dataset *ds, int rank, int world, bool shuffle,
                             int64_t epoch, int64_t *count) {
  em_loader_config c;
  em_loader_config_defaults(&c);
  c.batch_size = 3;
  c.workers = 0;
  c.shuffle = shuffle;
  c.seed = 42;
  c.rank = rank;
  c.world = world;
  em_error err = {0};
  em_loader *l = em_loader_new(ds, &c, &err);
  g_assert_nonnull(l);
  int64_t cap = em_loader_samples_per_epoch(l), n = 0;
  int64_t *out = g_new(int64_t, cap + 1);
  em_loader_start_epoch(l, epoch);
  em_batch b;
  while (em_loader_next(l, &b, &err))
    for (int64_t i = 0; i < b.n; i++) {
      g_assert_cmpint(n, <, cap);
      out[n++] = (int64_t)b.x[i];
    }
  g_assert_cmpint(err.status, ==, EM_OK);
  g_assert_cmpint(n, ==, cap);
  em_loader_free(l);
  *count = n;
  return out;
}

static void test_sampler_torch_pattern(void) {
  static const struct {
    int n, world;
    int64_t idx[4][4]; /* per rank */
    int per_rank;
  } cases[] = {
      {7, 2, {{0, 2, 4, 6}, {1, 3, 5, 0}}, 4},
      {7, 3, {{0, 3, 6}, {1, 4, 0}, {2, 5, 1}}, 3},
      {5, 3, {{0, 3}, {1, 4}, {2, 0}}, 2},
      {2, 3, {{0}, {1}, {0}}, 1},
      {1, 3, {{0}, {0}, {0}}, 1},
      {10, 4, {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}}, 3},
  };
  for (size_t k = 0; k < G_N_ELEMENTS(cases); k++) {
    em_dataset *ds = index_dataset(cases[k].n);
    for (int r = 0; r < cases[k].world; r++) {
      int64_t n;
      int64_t *got = rank_indices(ds, r, cases[k].world, false, 0, &n);
      g_assert_cmpint(n, ==, cases[k].per_rank);
      for (int j = 0; j < n; j++) g_assert_cmpint(got[j], ==, cases[k].idx[r][j]);
      g_free(got);
    }
    em_dataset_free(ds);
  }
}

/* With shuffling: put the ranks' shares back at positions r + j * world;
 * the first n must be the single-process loader's permutation (every
 * sample once) and the rest the wrap-around padding. */
static void test_sampler_covers_epoch(void) {
  const int64_t lens[] = {7, 11, 13, 101, 1000};
  const int worlds[] = {2, 3};
  for (size_t a = 0; a < G_N_ELEMENTS(lens); a++)
    for (size_t w = 0; w < G_N_ELEMENTS(worlds); w++)
      for (int64_t epoch = 0; epoch < 2; epoch++) {
        int64_t n = lens[a];
        int world = worlds[w];
        em_dataset *ds = index_dataset(n);
        int64_t n1;
        int64_t *single = rank_indices(ds, 0, 1, true, epoch, &n1);
        g_assert_cmpint(n1, ==, n);
        int64_t per = (n + world - 1) / world, total = per * world;
        int64_t *padded = g_new(int64_t, total);
        for (int r = 0; r < world; r++) {
          int64_t m;
          int64_t *got = rank_indices(ds, r, world, true, epoch, &m);
          g_assert_cmpint(m, ==, per);
          for (int64_t j = 0; j < m; j++) padded[r + j * world] = got[j];
          g_free(got);
        }
        int *seen = g_new0(int, n);
        for (int64_t i = 0; i < n; i++) {
          g_assert_cmpint(padded[i], ==, single[i]); /* the same permutation */
          seen[padded[i]]++;
        }
        for (int64_t i = 0; i < n; i++) g_assert_cmpint(seen[i], ==, 1); /* exactly once */
        for (int64_t i = n; i < total; i++) g_assert_cmpint(padded[i], ==, padded[i - n]);
        g_free(seen);
        g_free(padded);
        g_free(single);
        em_dataset_free(ds);
      }
}

/* ---- a fake communicator: world 2, the other rank's gradients all `peer` */
typedef struct {
  float peer;
  int launches;
  int launch_order[16];     /* bucket sizes, in launch order */
  int tests_at_launch[16];  /* test calls made before each launch */
  int tests;                /* test calls so far */
  int pending[16];          /* tests left before a request completes */
} fake_comm;

static em_status fake_iallreduce(void *ctx, float *buf, int64_t n, em_comm_req *req,
                                 em_error *err) {
  fake_comm *f = ctx;
  g_assert_cmpint(f->launches, <, 16);
  for (int64_t i = 0; i < n; i++) buf[i] += f->peer;
  f->launch_order[f->launches] = (int)n;
  f->tests_at_launch[f->launches] = f->tests;
  f->pending[f->launches] = 2; /* done at the second test */
  *req = f->launches++;
  return EM_OK;
}
static em_status fake_test(void *ctx, em_comm_req req, bool *done, em_error *err) {
  fake_comm *f = ctx;
  f->tests++;
  *done = --f->pending[req] <= 0;
  return EM_OK;
}
static em_status fake_ibcast(void *ctx, void *buf, int64_t bytes, int root, em_comm_req *req,
                             em_error *err) {
  return em_error_set(err, EM_ERR_UNSUPPORTED, "fake: no broadcast");
}
static em_status fake_ibarrier(void *ctx, em_comm_req *req, em_error *err) {
  return em_error_set(err, EM_ERR_UNSUPPORTED, "fake: no barrier");
}
static const em_comm_vtable fake_vtable = {"fake", fake_iallreduce, fake_test, fake_ibcast,
                                           fake_ibarrier, NULL, NULL, NULL, NULL, NULL};

static const char *spec_json =
    "{\"name\": \"tiny\", \"input\": {\"shape\": [4]}, \"nodes\": ["
    "{\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 8},"
    "{\"name\": \"relu\", \"type\": \"ReLU\"},"
    "{\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 3}]}";

/* One backward of the tiny MLP on dev with the bucketer's hooks; the
 * gradients without them into ref (same order as params). */
static void run_step(em_device dev, bool overlap, bool staging, fake_comm *f,
                     em_ddp_stats *stats, float **grads_out, float **ref_out) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(spec_json, "tiny", &err);
  g_assert_nonnull(spec);
  em_model *m = em_model_new(spec, 7, &err);
  g_assert_nonnull(m);
  g_assert_cmpint(em_model_to_device(m, dev, &err), ==, EM_OK);
  int np = em_model_param_count(m);
  g_assert_cmpint(np, ==, 4);
  em_tensor *params[4];
  for (int i = 0; i < np; i++) params[i] = em_model_param(m, i, NULL);
  float xs[5 * 4];
  int64_t ys[5] = {0, 1, 2, 1, 0};
  for (int i = 0; i < 20; i++) xs[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  int64_t xshape[2] = {5, 4}, n = 5;
  for (int pass = 0; pass < 2; pass++) { /* 0: reference, 1: with the bucketer */
    em_comm *c = NULL;
    em_ddp *d = NULL;
    if (pass == 1) {
      c = em_comm_new(&fake_vtable, f, 0, 2, &err);
      g_assert_nonnull(c);
      em_ddp_options o = {.bucket_mb = 100.0 / (1024 * 1024), .overlap = overlap,
                          .progress = true, .staging = staging};
      d = em_ddp_new(c, np, params, &o, &err);
      g_assert_nonnull(d);
    }
    em_model_zero_grad(m);
    em_scope *s = em_scope_begin();
    em_tensor *x = em_to_device(em_tensor_wrap(EM_DTYPE_F32, 2, xshape, xs), dev);
    em_tensor *y = em_to_device(em_tensor_wrap(EM_DTYPE_I64, 1, &n, ys), dev);
    em_tensor *out = em_model_forward(m, x, true, NULL, &err);
    g_assert_nonnull(out);
    em_tensor *l = em_cross_entropy(out, y, 0.0);
    if (d) em_ddp_backward_begin(d);
    em_backward(l);
    if (d) {
      em_ddp_backward_end(d);
      g_assert_cmpint(em_ddp_finish(d, &err), ==, EM_OK);
      em_ddp_get_stats(d, stats);
    }
    em_scope_end(s);
    int64_t total = 0;
    for (int i = 0; i < np; i++) total += em_tensor_numel(params[i]);
    float *g = g_new(float, total), *p = g;
    for (int i = 0; i < np; i++) {
      g_assert_true(em_device_eq(params[i]->grad->device, dev));
      em_tensor_download(params[i]->grad, p);
      p += em_tensor_numel(params[i]);
    }
    if (pass == 0) *ref_out = g;
    else *grads_out = g;
    em_ddp_free(d);
    em_comm_free(c);
  }
  em_model_free(m);
  em_spec_free(spec);
}

static void check_bucketer_on(em_device dev, bool overlap, bool staging) {
  fake_comm f = {.peer = 0.5f};
  em_ddp_stats st;
  float *grads = NULL, *ref = NULL;
  run_step(dev, overlap, staging, &f, &st, &grads, &ref);
  g_assert_true(em_device_eq(st.device, dev));
  g_assert_cmpstr(st.comm, ==, "fake");
  g_assert_true(st.staged == staging); /* the fake comm reads host (and ref) memory */
  /* buckets of at most 25 floats, parameters in reverse: fc2.bias (3),
   * fc2.weight (24), fc1.bias (8), fc1.weight (32, alone) */
  g_assert_cmpint(st.n_buckets, ==, 4);
  g_assert_cmpint(st.bytes_per_step, ==, (32 + 8 + 24 + 3) * 4);
  g_assert_cmpint(f.launches, ==, 4);
  const int sizes[4] = {3, 24, 8, 32};
  for (int k = 0; k < 4; k++) g_assert_cmpint(f.launch_order[k], ==, sizes[k]);
  if (overlap) {
    /* the first buckets start while backward still has nodes to run:
     * tests (one round per node) follow their launch; fc1 (weight and
     * bias in one node, the walk's last) comes last */
    g_assert_cmpint(f.tests_at_launch[0], <, f.tests_at_launch[3]);
    g_assert_cmpint(f.tests_at_launch[1], <, f.tests_at_launch[2]);
  } else {
    /* all after backward: no test in between */
    g_assert_cmpint(f.tests_at_launch[0], ==, 0);
    g_assert_cmpint(f.tests_at_launch[3], ==, 0);
  }
  /* the average of this rank's gradient and the peer's */
  for (int i = 0; i < 67; i++) g_assert_cmpfloat_with_epsilon(grads[i], (ref[i] + 0.5f) / 2, 1e-6);
  g_free(grads);
  g_free(ref);
}

static void test_bucketer_overlap(void) { check_bucketer_on(em_device_cpu(), true, false); }
static void test_bucketer_after_backward(void) {
  check_bucketer_on(em_device_cpu(), false, false);
}

static const em_device ref_dev = {EM_DEVICE_REF, 0};
static void test_bucketer_ref(void) { check_bucketer_on(ref_dev, true, false); }
static void test_bucketer_ref_after_backward(void) { check_bucketer_on(ref_dev, false, false); }
static void test_bucketer_ref_staged(void) { check_bucketer_on(ref_dev, true, true); }

/* No backward with the hooks (every micro-batch skipped): finish reduces
 * the gradients as they are, zeros for one that never came. */
static void test_bucketer_ref_no_backward(void) {
  for (int staging = 0; staging < 2; staging++) {
    em_error err = {0};
    int64_t shape[2][2] = {{3, 2}, {5, 1}};
    em_tensor *p[2];
    for (int i = 0; i < 2; i++) {
      p[i] = em_tensor_new_on(ref_dev, EM_DTYPE_F32, 2, shape[i], &err);
      g_assert_nonnull(p[i]);
      em_tensor_set_requires_grad(p[i], true);
    }
    bool fresh;
    em_tensor *g0 = em_grad_acquire(p[0], &fresh);
    g_assert_true(em_device_eq(g0->device, ref_dev));
    float v[6] = {1, 2, 3, 4, 5, 6};
    em_tensor_upload(g0, v);
    fake_comm f = {.peer = 1.0f};
    em_comm *c = em_comm_new(&fake_vtable, &f, 0, 2, &err);
    em_ddp_options o = {.bucket_mb = 1, .overlap = true, .progress = true,
                        .staging = staging != 0};
    em_ddp *d = em_ddp_new(c, 2, p, &o, &err);
    g_assert_nonnull(d);
    g_assert_cmpint(em_ddp_finish(d, &err), ==, EM_OK);
    em_ddp_stats st;
    em_ddp_get_stats(d, &st);
    g_assert_cmpint(st.n_buckets, ==, 1);
    g_assert_true(st.staged == (staging != 0));
    float got[6];
    em_tensor_download(p[0]->grad, got);
    for (int i = 0; i < 6; i++) g_assert_cmpfloat_with_epsilon(got[i], (v[i] + 1) / 2, 1e-6);
    g_assert_nonnull(p[1]->grad); /* made by the write-back, on the device */
    g_assert_true(em_device_eq(p[1]->grad->device, ref_dev));
    em_tensor_download(p[1]->grad, got);
    for (int i = 0; i < 5; i++) g_assert_cmpfloat_with_epsilon(got[i], 0.5, 1e-6);
    em_ddp_free(d);
    em_comm_free(c);
    for (int i = 0; i < 2; i++) em_tensor_free(p[i]);
  }
}

/* Parameters on two devices: refused with both named. */
static void test_bucketer_mixed_devices(void) {
  em_error err = {0};
  int64_t n = 4;
  em_tensor *p[2] = {em_tensor_new(EM_DTYPE_F32, 1, &n, &err),
                     em_tensor_new_on(ref_dev, EM_DTYPE_F32, 1, &n, &err)};
  g_assert_nonnull(p[0]);
  g_assert_nonnull(p[1]);
  fake_comm f = {.peer = 0};
  em_comm *c = em_comm_new(&fake_vtable, &f, 0, 2, &err);
  em_ddp_options o;
  em_ddp_options_defaults(&o);
  g_assert_null(em_ddp_new(c, 2, p, &o, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "parameter 1 lives on ref:0, parameter 0 on cpu"));
  em_comm_free(c);
  em_tensor_free(p[0]);
  em_tensor_free(p[1]);
}

/* A communicator without a double sum sums doubles through floats. */
static void test_allreduce_f64_fallback(void) {
  em_error err = {0};
  fake_comm f = {.peer = 0.5f};
  em_comm *c = em_comm_new(&fake_vtable, &f, 0, 2, &err);
  double v[3] = {1.0, 2.25, 1e9};
  g_assert_cmpint(em_comm_allreduce_sum_f64(c, v, 3, &err), ==, EM_OK);
  g_assert_cmpfloat(v[0], ==, 1.5);
  g_assert_cmpfloat(v[1], ==, 2.75);
  g_assert_cmpfloat(v[2], ==, (double)(1e9f + 0.5f)); /* a float's precision */
  em_comm_free(c);
}

/* EMBER_DDP_TIMEOUT: a fraction is kept and said as given (it read
 * "within 0 s"); a value that is not a number > 0 is refused, not
 * silently replaced by 30 s. */
static em_status never_test(void *ctx, em_comm_req req, bool *done, em_error *err) {
  *done = false;
  return EM_OK;
}
static void test_timeout_setting(void) {
  static const em_comm_vtable never = {.name = "never", .iallreduce_sum_f32 = fake_iallreduce,
                                       .test = never_test};
  em_error err = {0};
  fake_comm f = {.peer = 0};
  g_setenv("EMBER_DDP_TIMEOUT", "0.2", TRUE);
  em_comm *c = em_comm_new(&never, &f, 0, 2, &err);
  g_assert_nonnull(c);
  float x = 1;
  g_assert_cmpint(em_comm_allreduce_sum_f32(c, &x, 1, &err), ==, EM_ERR_IO);
  g_assert_nonnull(strstr(err.msg, "did not complete within 0.2 s"));
  em_comm_free(c);
  for (int i = 0; i < 3; i++) {
    const char *bad[] = {"abc", "0", "5s"};
    g_setenv("EMBER_DDP_TIMEOUT", bad[i], TRUE);
    err = (em_error){0};
    g_assert_null(em_comm_new(&never, &f, 0, 2, &err));
    g_assert_cmpint(err.status, ==, EM_ERR_INVALID);
    g_assert_nonnull(strstr(err.msg, "EMBER_DDP_TIMEOUT is"));
  }
  g_unsetenv("EMBER_DDP_TIMEOUT");
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/dist/sampler/torch-pattern", test_sampler_torch_pattern);
  g_test_add_func("/dist/sampler/covers-epoch", test_sampler_covers_epoch);
  g_test_add_func("/dist/bucketer/overlap", test_bucketer_overlap);
  g_test_add_func("/dist/bucketer/after-backward", test_bucketer_after_backward);
  g_test_add_func("/dist/bucketer/ref-device", test_bucketer_ref);
  g_test_add_func("/dist/bucketer/ref-device-after-backward", test_bucketer_ref_after_backward);
  g_test_add_func("/dist/bucketer/ref-device-staged", test_bucketer_ref_staged);
  g_test_add_func("/dist/bucketer/ref-device-no-backward", test_bucketer_ref_no_backward);
  g_test_add_func("/dist/bucketer/mixed-devices", test_bucketer_mixed_devices);
  g_test_add_func("/dist/comm/allreduce-f64-fallback", test_allreduce_f64_fallback);
  g_test_add_func("/dist/comm/timeout-setting", test_timeout_setting);
  return g_test_run();
}
