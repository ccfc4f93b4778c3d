/* test-train-device-api.c: the training pieces on a device through the
 * engine's API, against the same pieces on the CPU:
 *  - em_model_to_device moves every tensor (values kept, pointers kept)
 *    and back; an f64 model is refused off the CPU; forward with the input
 *    on another device is an em_error naming both devices, not an abort;
 *  - optimiser state lives on the parameter's device (step counts on the
 *    host); SGD with momentum and Nesterov, Adam and AdamW: five steps on
 *    the device give the CPU's parameters (1e-5); AMSGrad on a device is
 *    refused with a message;
 *  - em_clip_grad_norm on device gradients: the CPU's norm and clipped
 *    gradients; a non-finite gradient gives a non-finite norm and leaves
 *    the gradients alone;
 *  - the gradient scaler unscales device gradients and finds an Inf;
 *  - the pre-flight estimate: its parts add up, it grows with the batch,
 *    and em_train_preflight refuses a batch over the device's free memory
 *    (naming the largest that fits) and, with auto_batch, halves to one
 *    that fits;
 *  - out of device memory in the middle of a run (ref, capped at 64 MiB
 *    by EMBER_REF_DEVICE_MEMORY: after step 3 another tenant takes all but
 *    48 KiB): the run stops at step 4 with the allocator's message, the
 *    steps before reported; with auto_batch the batch halves until a step
 *    fits and the run ends having seen every sample once.
 * The device is EMBER_TEST_DEVICE ("ref" when unset); exits 77 (skip) when
 * it is unavailable. */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-amp.h"
#include "em-device.h"
#include "em-nn.h"
#include "em-ops.h"
#include "em-optim.h"
#include "em-train.h"

static em_device dev;
static const em_device cpu = {EM_DEVICE_CPU, 0};

static const char *mlp_spec =
    "{\"name\": \"t\", \"input\": {\"shape\": [6]}, \"nodes\": ["
    "{\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 5},"
    "{\"name\": \"relu\", \"type\": \"ReLU\"},"
    "{\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 3}]}";

/* The values of a (persistent or scoped) f32 tensor on any device. */
static float *host_values(const em_tensor *t) {
  int64_t n = em_tensor_numel(t);
  float *v = g_new(float, n);
  if (em_on_device(t)) em_tensor_download(t, v);
  else memcpy(v, em_f32(t), sizeof *v * (size_t)n);
  return v;
}

static void assert_close(const float *a, const float *b, int64_t n, double tol, const char *what) {
  for (int64_t k = 0; k < n; k++)
    if (!(fabs((double)a[k] - (double)b[k]) <= tol * (1 + fabs((double)a[k]))))
      g_error("%s: element %lld: cpu %.9g, device %.9g", what, (long long)k, a[k], b[k]);
}

static em_model *new_model(const em_model_options *o) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(mlp_spec, "<test>", &err);
  g_assert_nonnull(spec);
  em_model *m = em_model_new_with(spec, 7, o, &err);
  g_assert_nonnull(m);
  em_spec_free(spec);
  return m;
}

static void test_model_move(void) {
  em_model *m = new_model(NULL);
  em_error err = {0};
  int n = em_model_tensor_count(m);
  em_tensor *w = em_model_tensor(m, 0, NULL);
  float *before = host_values(w);
  g_assert_cmpint(em_model_to_device(m, dev, &err), ==, EM_OK);
  g_assert_true(em_device_eq(em_model_device(m), dev));
  for (int i = 0; i < n; i++) g_assert_true(em_device_eq(em_model_tensor(m, i, NULL)->device, dev));
  g_assert_true(em_model_tensor(m, 0, NULL) == w); /* the struct stays */
  float *on = host_values(w);
  assert_close(before, on, em_tensor_numel(w), 0, "moved weights");

  /* forward with the input on the CPU: an error naming both, no abort */
  em_scope *s = em_scope_begin();
  const int64_t xs[2] = {4, 6};
  em_tensor *x = em_full(EM_DTYPE_F32, 2, xs, 0.5);
  g_assert_null(em_model_forward(m, x, false, NULL, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "is on cpu"));
  g_assert_nonnull(strstr(err.msg, "the model is on"));
  em_error_clear(&err);
  em_tensor *y = em_model_forward(m, em_to_device(x, dev), false, NULL, &err);
  g_assert_nonnull(y);
  g_assert_true(em_device_eq(y->device, dev));
  em_scope_end(s);

  g_assert_cmpint(em_model_to_device(m, cpu, &err), ==, EM_OK);
  g_assert_false(em_on_device(w));
  assert_close(before, em_f32(w), em_tensor_numel(w), 0, "weights back on the CPU");
  g_free(before);
  g_free(on);
  em_model_free(m);

  em_model_options o = {EM_DTYPE_F64, EM_WEIGHT_INIT_DEFAULT};
  m = new_model(&o);
  g_assert_cmpint(em_model_to_device(m, dev, &err), ==, EM_ERR_UNSUPPORTED);
  g_assert_nonnull(strstr(err.msg, "f64"));
  g_assert_false(em_on_device(em_model_tensor(m, 0, NULL))); /* nothing moved */
  em_model_free(m);
}

/* Two identical parameter sets, one on the CPU, one on the device, with
 * the same gradients. */
typedef struct {
  em_tensor *p[2][2]; /* [cpu, device][param] */
} pair;

static void pair_init(pair *pr) {
  const int64_t shapes[2][2] = {{7, 5}, {5, 0}};
  const int nd[2] = {2, 1};
  em_error err = {0};
  for (int i = 0; i < 2; i++) {
    em_tensor *c = em_tensor_new(EM_DTYPE_F32, nd[i], shapes[i], &err);
    for (int64_t k = 0; k < em_tensor_numel(c); k++) em_f32(c)[k] = (float)sin(1.0 + k * 0.7 + i);
    em_tensor *d = em_tensor_new(EM_DTYPE_F32, nd[i], shapes[i], &err);
    em_tensor_copy_(d, c);
    g_assert_cmpint(em_tensor_move_(d, dev, &err), ==, EM_OK);
    em_tensor_set_requires_grad(c, true);
    em_tensor_set_requires_grad(d, true);
    pr->p[0][i] = c;
    pr->p[1][i] = d;
  }
}

/* Gives both sides the same gradient (scaled by s, seeded by step). */
static void pair_grads(pair *pr, int step, double s) {
  for (int i = 0; i < 2; i++) {
    em_tensor *c = pr->p[0][i], *d = pr->p[1][i];
    em_scope *sc = em_scope_begin();
    em_tensor *g = em_empty(EM_DTYPE_F32, c->ndim, c->shape);
    for (int64_t k = 0; k < em_tensor_numel(g); k++)
      em_f32(g)[k] = (float)(s * cos(0.3 * k + step + i));
    em_backward_grad(em_mul_scalar(c, 1.0), g);
    em_backward_grad(em_mul_scalar(em_to_device(d, dev), 1.0), em_to_device(g, dev));
    em_scope_end(sc);
  }
}

static void pair_check(pair *pr, double tol, const char *what) {
  for (int i = 0; i < 2; i++) {
    float *a = host_values(pr->p[0][i]), *b = host_values(pr->p[1][i]);
    assert_close(a, b, em_tensor_numel(pr->p[0][i]), tol, what);
    g_free(a);
    g_free(b);
  }
}

static void pair_free(pair *pr) {
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < 2; i++) em_tensor_free(pr->p[s][i]);
}

static void check_optimizer(const em_optim_config *c, const char *what) {
  pair pr;
  pair_init(&pr);
  em_error err = {0};
  em_optimizer *o[2];
  for (int s = 0; s < 2; s++) {
    o[s] = em_optimizer_new(c, 2, pr.p[s], NULL, &err);
    g_assert_nonnull(o[s]);
  }
  for (int i = 0; i < em_optimizer_state_count(o[1]); i++) { /* state placement */
    const char *name;
    em_tensor *st = em_optimizer_state(o[1], i, &name);
    bool counter = st->dtype == EM_DTYPE_I64;
    g_assert_true(counter ? !em_on_device(st) : em_device_eq(st->device, dev));
  }
  for (int step = 0; step < 5; step++) {
    pair_grads(&pr, step, 1.0);
    for (int s = 0; s < 2; s++) {
      em_optimizer_step(o[s]);
      em_optimizer_zero_grad(o[s]);
    }
  }
  pair_check(&pr, 1e-5, what);
  em_optimizer_free(o[0]);
  em_optimizer_free(o[1]);
  pair_free(&pr);
}

static void test_optimizers(void) {
  em_optim_config c;
  em_optim_config_defaults(&c, EM_OPTIM_SGD);
  c.lr = 0.1;
  c.momentum = 0.9;
  c.weight_decay = 0.01;
  check_optimizer(&c, "sgd momentum");
  c.nesterov = true;
  check_optimizer(&c, "sgd nesterov");
  em_optim_config_defaults(&c, EM_OPTIM_ADAM);
  c.weight_decay = 0.01;
  check_optimizer(&c, "adam");
  em_optim_config_defaults(&c, EM_OPTIM_ADAMW);
  check_optimizer(&c, "adamw");

  c.amsgrad = true; /* refused on a device, with the reason */
  pair pr;
  pair_init(&pr);
  em_error err = {0};
  g_assert_null(em_optimizer_new(&c, 2, pr.p[1], NULL, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_UNSUPPORTED);
  g_assert_nonnull(strstr(err.msg, "AMSGrad"));
  pair_free(&pr);
}

static void test_clip_and_scaler(void) {
  pair pr;
  pair_init(&pr);
  pair_grads(&pr, 0, 3.0);
  double n0 = em_clip_grad_norm(2, pr.p[0], 1.0), n1 = em_clip_grad_norm(2, pr.p[1], 1.0);
  g_assert_cmpfloat(fabs(n0 - n1), <=, 1e-5 * n0);
  g_assert_cmpfloat(n0, >, 1.0); /* it clipped */
  for (int i = 0; i < 2; i++) {
    float *a = host_values(pr.p[0][i]->grad), *b = host_values(pr.p[1][i]->grad);
    assert_close(a, b, em_tensor_numel(pr.p[0][i]), 1e-6, "clipped gradients");
    g_free(a);
    g_free(b);
  }
  /* unscale: x (1/4), and an Inf is found */
  em_grad_scaler sc;
  em_grad_scaler_init(&sc, true);
  sc.scale = 4.f;
  em_tensor *g[2] = {pr.p[1][0]->grad, pr.p[1][1]->grad};
  float *before = host_values(g[0]);
  g_assert_false(em_grad_scaler_unscale(&sc, 2, g));
  float *after = host_values(g[0]);
  for (int64_t k = 0; k < em_tensor_numel(g[0]); k++)
    g_assert_cmpfloat(after[k], ==, before[k] * 0.25f);
  float *with_inf = host_values(g[1]);
  with_inf[2] = INFINITY;
  em_tensor_upload(g[1], with_inf);
  g_assert_true(em_grad_scaler_unscale(&sc, 2, g));
  /* a non-finite gradient: the norm says so and nothing is scaled */
  float *keep = host_values(g[0]);
  g_assert_false(isfinite(em_clip_grad_norm(2, pr.p[1], 1.0)));
  float *kept = host_values(g[0]);
  assert_close(keep, kept, em_tensor_numel(g[0]), 0, "gradients with an Inf beside them");
  g_free(before);
  g_free(after);
  g_free(keep);
  g_free(kept);
  g_free(with_inf);
  pair_free(&pr);
}

static void test_preflight(void) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(mlp_spec, "<test>", &err);
  em_train_config c;
  em_train_config_defaults(&c);
  c.optim.momentum = 0.9;
  em_train_memory_estimate e1, e2;
  em_train_estimate_memory(spec, &c, 1, &e1);
  em_train_estimate_memory(spec, &c, 100, &e2);
  int64_t params = 6 * 5 + 5 + 5 * 3 + 3;
  g_assert_cmpint(e1.weights_bytes, ==, 4 * params);
  g_assert_cmpint(e1.grads_bytes, ==, 4 * params);
  g_assert_cmpint(e1.optim_bytes, ==, 4 * params); /* momentum */
  g_assert_cmpint(e2.total_bytes, ==, e2.fixed_bytes + 100 * e2.per_sample_bytes);
  /* each node's output and its gradient; on the CPU the ReLU runs inside
   * the Linear before it (linear_relu): no output of its own there */
  g_assert_cmpint(e2.per_sample_bytes, ==, 2 * 4 * (6 + 5 + 5 + 3) - 4 * 5);
  em_train_config cd = c;
  cd.device = dev; /* a device runs the two ops */
  em_train_memory_estimate e3;
  em_train_estimate_memory(spec, &cd, 100, &e3);
  g_assert_cmpint(e3.per_sample_bytes, ==, 2 * 4 * (6 + 5 + 5 + 3));
  /* the CPU has no pre-flight; a device with too little free memory */
  int batch;
  char note[512];
  g_assert_cmpint(em_train_preflight(spec, &c, &batch, note, sizeof note, &err), ==, EM_OK);
  em_device_info info;
  g_assert_cmpint(em_device_info_get(dev, &info, &err), ==, EM_OK);
  c.device = dev;
  int64_t huge = (info.free_bytes - e1.fixed_bytes) / e1.per_sample_bytes + 1;
  c.batch_size = huge > (1 << 30) ? 1 << 30 : (int)huge;
  if (huge <= (1 << 30)) {
    g_assert_cmpint(em_train_preflight(spec, &c, &batch, note, sizeof note, &err), ==,
                    EM_ERR_NOMEM);
    g_assert_nonnull(strstr(err.msg, "pre-flight"));
    g_assert_nonnull(strstr(err.msg, "--batch"));
    c.auto_batch = true;
    g_assert_cmpint(em_train_preflight(spec, &c, &batch, note, sizeof note, &err), ==, EM_OK);
    g_assert_cmpint(batch, <, c.batch_size);
    g_assert_nonnull(strstr(note, "--auto-batch"));
  }
  c.batch_size = 8;
  c.auto_batch = false;
  g_assert_cmpint(em_train_preflight(spec, &c, &batch, note, sizeof note, &err), ==, EM_OK);
  g_assert_cmpint(batch, ==, 8);
  em_spec_free(spec);
}

/* ---- out of device memory in the middle of a run (ref: its memory cap) ---------- */
static const char *oom_spec =
    "{\"name\": \"oom\", \"input\": {\"shape\": [16]}, \"nodes\": ["
    "{\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 64},"
    "{\"name\": \"relu\", \"type\": \"ReLU\"},"
    "{\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 3}]}";

typedef struct {
  int steps, warnings, dones;
  em_tensor *tenant; /* another user of the device, arriving after step 3 */
  int64_t leave;     /* bytes it leaves free */
  char warning[2048];
} oom_run;

static bool oom_event(const em_train_event *ev, void *user) {
  oom_run *o = user;
  if (ev->kind == EM_EVENT_STEP && ++o->steps == 3 && !o->tenant) {
    em_device_release_cached(dev);
    em_device_info info;
    em_error err = {0};
    g_assert_cmpint(em_device_info_get(dev, &info, &err), ==, EM_OK);
    const int64_t n[1] = {(info.free_bytes - o->leave) / 4};
    o->tenant = em_tensor_new_on(dev, EM_DTYPE_F32, 1, n, &err);
    g_assert_nonnull(o->tenant);
  }
  if (ev->kind == EM_EVENT_WARNING) {
    o->warnings++;
    snprintf(o->warning, sizeof o->warning, "%s", ev->message);
  }
  if (ev->kind == EM_EVENT_DONE) o->dones++;
  return true;
}

/* Trains the oom spec on dev (512 samples, batch 64, no shuffle) while a
 * tenant takes the device's room after step 3; the run's status, with its
 * summary and final batch size in *sum and *batch. */
static em_status oom_train(bool auto_batch, oom_run *o, em_train_summary *sum, int *batch,
                           em_error *err) {
  em_spec *spec = em_spec_parse(oom_spec, "<oom>", err);
  g_assert_nonnull(spec);
  em_model *m = em_model_new(spec, 3, err);
  g_assert_nonnull(m);
  em_train_config c;
  em_train_config_defaults(&c);
  c.batch_size = 64;
  c.epochs = 1;
  c.shuffle = false;
  c.workers = 0;
  c.threads = 1;
  c.optim.momentum = 0.9;
  c.device = dev;
  c.auto_batch = auto_batch;
  const int64_t shape[1] = {16};
  em_dataset *train = em_dataset_synthetic_split(512, 1, shape, 3, 0.5, 1, true, err);
  g_assert_nonnull(train);
  memset(o, 0, sizeof *o);
  o->leave = 48 * 1024; /* a step at batch 64 wants more than this, at 16 less */
  em_trainer *t = em_trainer_new(m, &c, train, NULL, err);
  g_assert_nonnull(t);
  em_status st = em_trainer_run(t, oom_event, o, err);
  em_trainer_summary(t, sum);
  *batch = em_trainer_batch_size(t);
  em_tensor_free(o->tenant);
  em_trainer_free(t);
  em_model_free(m);
  em_dataset_free(train);
  em_spec_free(spec);
  return st;
}

static void test_oom_mid_run(void) {
  if (dev.kind != EM_DEVICE_REF) {
    g_test_skip("needs the reference device's memory cap");
    return;
  }
  oom_run o;
  em_train_summary sum;
  int batch;
  em_error err = {0};
  /* without auto_batch: the run stops at step 4 with the allocator's
   * message; the three steps before were reported (and so recorded) */
  g_assert_cmpint(oom_train(false, &o, &sum, &batch, &err), ==, EM_ERR_NOMEM);
  g_assert_cmpint(o.steps, ==, 3);
  g_assert_cmpint(o.dones, ==, 0);
  g_assert_nonnull(strstr(err.msg, "step 4 (batch size 64): out of memory on ref:0"));
  g_assert_nonnull(strstr(err.msg, "reserved"));
  g_assert_nonnull(strstr(err.msg, "--auto-batch"));
  g_assert_false(em_device_error_pending());
  /* with it: the batch halves until the step fits, the run goes on from
   * sample 192 and ends after the 512 samples */
  em_error_clear(&err);
  g_assert_cmpint(oom_train(true, &o, &sum, &batch, &err), ==, EM_OK);
  g_assert_cmpint(batch, <, 64);
  g_assert_cmpint(o.warnings, >=, 1);
  g_assert_nonnull(strstr(o.warning, "going on at batch size"));
  g_assert_cmpint(o.dones, ==, 1);
  g_assert_cmpint(sum.steps, ==, 3 + (512 - 192) / batch);
  g_assert_cmpint(o.steps, ==, sum.steps);
  g_assert_true(isfinite(sum.final_train_loss));
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  /* a cap on the reference device (read at its first use) for the
   * out-of-memory test; everything else here needs far less */
  setenv("EMBER_REF_DEVICE_MEMORY", "67108864", 0);
  const char *name = getenv("EMBER_TEST_DEVICE");
  em_error err = {0};
  if (em_device_parse(name && *name ? name : "ref", &dev, &err) != EM_OK ||
      em_device_check(dev, &err) != EM_OK) {
    printf("skip: %s\n", err.msg);
    return 77;
  }
  g_test_add_func("/device/train/model-move", test_model_move);
  g_test_add_func("/device/train/optimizers", test_optimizers);
  g_test_add_func("/device/train/clip-scaler", test_clip_and_scaler);
  g_test_add_func("/device/train/preflight", test_preflight);
  g_test_add_func("/device/train/oom-mid-run", test_oom_mid_run);
  return g_test_run();
}
