/* test-watchdog.c: the divergence watchdog. The detector on its own; then
 * the trainer on data with one poisoned sample (NaN, or scaled up 1000x
 * to make a gradient spike) and with an absurd learning rate: stopping
 * with EM_ERR_NUMERIC and a DIVERGENCE event, rolling back to the last
 * checkpoint with a lower learning rate, and giving up after
 * max_rollbacks. */
#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-io.h"
#include "train-helpers.h"
#include "train-private.h"

static void test_detector(void) {
  em_watchdog w;
  em_watchdog_init(&w, 10);
  /* during the warm-up nothing but non-finite values counts */
  for (int i = 0; i < EM_WATCHDOG_WARMUP - 1; i++)
    g_assert_cmpint(em_watchdog_check_norm(&w, i == 3 ? 1000.0 : 1.0), ==, EM_WATCH_OK);
  g_assert_cmpint(em_watchdog_check_norm(&w, NAN), ==, EM_WATCH_NORM_NONFINITE);
  g_assert_cmpint(em_watchdog_check_norm(&w, INFINITY), ==, EM_WATCH_NORM_NONFINITE);
  g_assert_cmpint(em_watchdog_check_loss(&w, NAN), ==, EM_WATCH_LOSS_NONFINITE);
  g_assert_cmpint(em_watchdog_check_loss(&w, -INFINITY), ==, EM_WATCH_LOSS_NONFINITE);
  g_assert_cmpint(em_watchdog_check_loss(&w, 3.5), ==, EM_WATCH_OK);
  g_assert_cmpint(em_watchdog_check_norm(&w, 1.0), ==, EM_WATCH_OK); /* the 20th */
  /* 1000 is still among the last 50: 9000 is below 10x of it */
  g_assert_cmpfloat(em_watchdog_max(&w), ==, 1000.0);
  g_assert_cmpint(em_watchdog_check_norm(&w, 9000), ==, EM_WATCH_OK);
  /* push the big ones out of the window */
  for (int i = 0; i < EM_WATCHDOG_WINDOW; i++)
    g_assert_cmpint(em_watchdog_check_norm(&w, 2.0), ==, EM_WATCH_OK);
  g_assert_cmpfloat(em_watchdog_max(&w), ==, 2.0);
  g_assert_cmpint(em_watchdog_check_norm(&w, 19.9), ==, EM_WATCH_OK);
  g_assert_cmpint(em_watchdog_check_norm(&w, 199.1), ==, EM_WATCH_NORM_SPIKE);
  /* a spike is not remembered */
  g_assert_cmpfloat(em_watchdog_max(&w), ==, 19.9);
  em_watchdog_reset(&w);
  g_assert_cmpint(w.seen, ==, 0);
  g_assert_cmpint(em_watchdog_check_norm(&w, 1e6), ==, EM_WATCH_OK);
  /* factor 0: spikes are not checked */
  em_watchdog_init(&w, 0);
  for (int i = 0; i < 30; i++) em_watchdog_check_norm(&w, 1.0);
  g_assert_cmpint(em_watchdog_check_norm(&w, 1e9), ==, EM_WATCH_OK);
}

/* ---- a dataset with one poisoned sample ------------------------------------- */

typedef struct {
  em_dataset *inner;
  int64_t poison; /* sample index */
  bool nan;       /* NaN, else x 1000 with a wrong label */
} poisoned;

static int64_t p_len(const void *impl) { return em_dataset_len(((const poisoned *)impl)->inner); }
static int p_shape(const void *impl, int64_t *shape) {
  return em_dataset_sample_shape(((const poisoned *)impl)->inner, shape);
}
static int p_classes(const void *impl) {
  return em_dataset_num_classes(((const poisoned *)impl)->inner);
}
static em_status p_get(const void *impl, int64_t i, float *x, int64_t *y, em_error *err) {
  const poisoned *p = impl;
  em_status st = em_dataset_get(p->inner, i, x, y, err);
  if (st == EM_OK && i == p->poison) {
    for (int64_t k = 0; k < em_dataset_sample_numel(p->inner); k++)
      x[k] = p->nan ? NAN : x[k] * 1000.0f;
    /* a wrong label too: a big input the model already gets right has
     * next to no gradient */
    if (!p->nan) *y = (*y + 1) % em_dataset_num_classes(p->inner);
  }
  return st;
}
static void p_free(void *impl) {
  poisoned *p = impl;
  em_dataset_free(p->inner);
  free(p);
}
static const em_dataset_vtable poisoned_vt = {
    .kind = "poisoned", .len = p_len, .sample_shape = p_shape, .num_classes = p_classes,
    .get = p_get, .free = p_free};

static const char *mlp_json =
    "{\"name\": \"mlp\", \"input\": {\"shape\": [16]}, \"nodes\": ["
    " {\"name\": \"fc1\", \"type\": \"Linear\", \"out_features\": 32},"
    " {\"name\": \"act\", \"type\": \"ReLU\"},"
    " {\"name\": \"fc2\", \"type\": \"Linear\", \"out_features\": 3}],"
    " \"training\": {\"optimizer\": \"sgd\", \"lr\": 0.05, \"momentum\": 0.9,"
    "  \"batch_size\": 32, \"epochs\": 1, \"workers\": 0, \"shuffle\": false}}";

/* 1280 samples, 40 steps; sample 965 is in batch 31 (step 31). */
static void poisoned_setup(th_setup *s, bool nan) {
  int64_t shape[1] = {16};
  th_setup_init(s, mlp_json, 1280, 1, shape, 3);
  poisoned *p = calloc(1, sizeof *p);
  p->inner = s->train;
  p->poison = 30 * 32 + 5;
  p->nan = nan;
  em_error err = {0};
  s->train = em_dataset_new(&poisoned_vt, p, &err);
  g_assert_nonnull(s->train);
  s->cfg.checkpoint_every = 10;
}

/* Every float tensor in the checkpoint (weights and optimiser state) is
 * finite. */
static void assert_finite_weights(const char *ckpt) {
  em_error err = {0};
  em_safetensors *f = em_safetensors_open(ckpt, &err);
  g_assert_nonnull(f);
  for (int i = 0; i < em_safetensors_count(f); i++) {
    const char *name = em_safetensors_name(f, i);
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    g_assert_cmpint(em_safetensors_info(f, name, &dt, &nd, shape, &err), ==, EM_OK);
    if (dt != EM_DTYPE_F32) continue;
    em_tensor *x = em_tensor_new(dt, nd, shape, &err);
    g_assert_cmpint(em_safetensors_read(f, name, x, &err), ==, EM_OK);
    for (int64_t k = 0; k < em_tensor_numel(x); k++) g_assert_true(isfinite(em_f32(x)[k]));
    em_tensor_free(x);
  }
  em_safetensors_close(f);
}

static void test_nan_stop(void) {
  for (int policy = 0; policy < 2; policy++) {
    th_setup s;
    poisoned_setup(&s, true);
    /* STOP with checkpoints, and AUTO without any: both stop */
    s.cfg.on_divergence = policy == 0 ? EM_DIVERGENCE_STOP : EM_DIVERGENCE_AUTO;
    char *dir = th_tmpdir();
    th_record rec;
    th_record_init(&rec);
    em_error err = {0};
    g_assert_cmpint(th_run(&s, policy == 0 ? dir : NULL, NULL, 5, &rec, &err), ==,
                    EM_ERR_NUMERIC);
    g_assert_nonnull(strstr(err.msg, "the loss became NaN at step 31"));
    g_assert_nonnull(strstr(err.msg, "--lr"));
    g_assert_nonnull(strstr(err.msg, "--checkpoint-every"));
    g_assert_cmpuint(rec.divergences->len, ==, 1);
    g_assert_cmpstr(g_ptr_array_index(rec.divergences, 0), ==, err.msg);
    g_assert_null(th_find(&rec, "final", 30)); /* no final checkpoint of a failed run */
    th_record_clear(&rec);
    th_rm_rf(dir);
    g_free(dir);
    th_setup_free(&s);
  }
}

static void test_nan_rollback_gives_up(void) {
  th_setup s;
  poisoned_setup(&s, true);
  s.cfg.on_divergence = EM_DIVERGENCE_ROLLBACK;
  s.cfg.max_rollbacks = 3;
  s.cfg.checkpoint_every = 7; /* the last one before the poisoned batch: step 28 */
  char *dir = th_tmpdir();
  th_record rec;
  th_record_init(&rec);
  em_error err = {0};
  /* the same batch is NaN whatever the learning rate */
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &rec, &err), ==, EM_ERR_NUMERIC);
  g_assert_cmpuint(rec.divergences->len, ==, 4);
  g_assert_cmpstr(g_ptr_array_index(rec.divergences, 0), ==,
                  "the loss became NaN at step 31 (epoch 1, batch 31); rolled back to step 28 "
                  "and lowered the learning rate x0.5 (lr scale 0.5)");
  g_assert_nonnull(strstr(g_ptr_array_index(rec.divergences, 2), "(lr scale 0.125)"));
  g_assert_nonnull(strstr(err.msg, "stopping after 3 rollbacks (lr scale 0.125)"));
  th_record_clear(&rec);
  th_rm_rf(dir);
  g_free(dir);
  th_setup_free(&s);
}

/* A NaN at the step right after the last checkpoint: rolling back to it
 * would repeat the step exactly, so the run stops at once (it rolled
 * back max_rollbacks times to the same end). */
static void test_nan_rollback_futile(void) {
  th_setup s;
  poisoned_setup(&s, true); /* checkpoints every 10 steps: the last at 30 */
  s.cfg.on_divergence = EM_DIVERGENCE_ROLLBACK;
  char *dir = th_tmpdir();
  th_record rec;
  th_record_init(&rec);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, dir, NULL, 5, &rec, &err), ==, EM_ERR_NUMERIC);
  g_assert_cmpuint(rec.divergences->len, ==, 1);
  g_assert_nonnull(strstr(err.msg, "the loss became NaN at step 31"));
  g_assert_nonnull(strstr(err.msg, "would repeat the step exactly"));
  th_record_clear(&rec);
  th_rm_rf(dir);
  g_free(dir);
  th_setup_free(&s);
}

static void test_spike(void) {
  th_setup s;
  poisoned_setup(&s, false);
  s.cfg.on_divergence = EM_DIVERGENCE_STOP;
  th_record rec;
  th_record_init(&rec);
  em_error err = {0};
  g_assert_cmpint(th_run(&s, NULL, NULL, 5, &rec, &err), ==, EM_ERR_NUMERIC);
  g_assert_nonnull(strstr(err.msg, "the gradient norm jumped to"));
  g_assert_nonnull(strstr(err.msg, "at step 31, over 10x the largest of the last 30 steps"));
  g_assert_cmpuint(rec.divergences->len, ==, 1);
  th_record_clear(&rec);
  /* spikes off: the run goes through */
  s.cfg.divergence_spike_factor = 0;
  th_record_init(&rec);
  g_assert_cmpint(th_run(&s, NULL, NULL, 5, &rec, &err), ==, EM_OK);
  g_assert_cmpuint(rec.divergences->len, ==, 0);
  th_record_clear(&rec);
  th_setup_free(&s);
}

static void test_spike_rollback_recovers(void) {
  th_setup s;
  poisoned_setup(&s, false);
  s.cfg.on_divergence = EM_DIVERGENCE_AUTO; /* with checkpoints: roll back */
  char *dir = th_tmpdir();
  th_record rec;
  th_record_init(&rec);
  em_error err = {0};
  em_status st = th_run(&s, dir, NULL, 5, &rec, &err);
  if (st != EM_OK) g_error("%s", err.msg);
  /* The spike at step 31 rolled back to step 30 with half the lr; the
   * watchdog starts afresh, so the second pass over the batch is not
   * judged against the old norms, and the run ends. */
  g_assert_cmpuint(rec.divergences->len, ==, 1);
  const char *msg = g_ptr_array_index(rec.divergences, 0);
  g_assert_nonnull(strstr(msg, "rolled back to step 30 and lowered the learning rate x0.5"));
  g_assert_cmpfloat(rec.last_lr_scale, ==, 0.5);
  const char *fin = th_find(&rec, "final", 40);
  g_assert_nonnull(fin);
  char v[64];
  g_assert_cmpint(em_checkpoint_read_meta(fin, "lr_scale", v, sizeof v, &err), ==, EM_OK);
  g_assert_cmpstr(v, ==, "0.5");
  g_assert_cmpint(em_checkpoint_read_meta(fin, "rollbacks", v, sizeof v, &err), ==, EM_OK);
  g_assert_cmpstr(v, ==, "1");
  assert_finite_weights(fin);
  th_record_clear(&rec);
  th_rm_rf(dir);
  g_free(dir);
  th_setup_free(&s);
}

/* An absurd learning rate: the loss (or the gradient) overflows. With a
 * checkpoint after every step a rollback would repeat the failing step
 * exactly: both policies stop at the first divergence. */
static void test_huge_lr(void) {
  int64_t shape[1] = {16};
  for (int policy = 0; policy < 2; policy++) {
    th_setup s;
    th_setup_init(&s, mlp_json, 512, 1, shape, 3);
    s.cfg.optim.lr = 1e12;
    s.cfg.epochs = 3;
    s.cfg.on_divergence = policy == 0 ? EM_DIVERGENCE_STOP : EM_DIVERGENCE_ROLLBACK;
    s.cfg.checkpoint_every = 1;
    char *dir = th_tmpdir();
    th_record rec;
    th_record_init(&rec);
    em_error err = {0};
    g_assert_cmpint(th_run(&s, dir, NULL, 5, &rec, &err), ==, EM_ERR_NUMERIC);
    g_assert_nonnull(strstr(err.msg, policy == 0 ? "; stopping. Try a lower learning rate"
                                                 : "would repeat the step exactly"));
    g_assert_cmpuint(rec.divergences->len, ==, 1);
    th_record_clear(&rec);
    th_rm_rf(dir);
    g_free(dir);
    th_setup_free(&s);
  }
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/train/watchdog/detector", test_detector);
  g_test_add_func("/train/watchdog/nan-stop", test_nan_stop);
  g_test_add_func("/train/watchdog/nan-rollback-gives-up", test_nan_rollback_gives_up);
  g_test_add_func("/train/watchdog/nan-rollback-futile", test_nan_rollback_futile);
  g_test_add_func("/train/watchdog/spike-stop", test_spike);
  g_test_add_func("/train/watchdog/spike-rollback-recovers", test_spike_rollback_recovers);
  g_test_add_func("/train/watchdog/huge-lr", test_huge_lr);
  return g_test_run();
}
