/* test-diagnostics.c: what the trainer observes about a run without
 * changing it: a profiled window written as a trace with its op table,
 * memory figures in every step event, and anomaly mode naming the layer
 * that produced a NaN (while without it the NaN loss stops the run). */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "em-profile.h"
#include "em-train.h"

static const char *spec_json =
    "{\"name\": \"tiny\", \"input\": {\"shape\": [1, 8, 8]},"
    " \"nodes\": ["
    "  {\"name\": \"conv\", \"type\": \"Conv2d\", \"out_channels\": 4, \"kernel_size\": 3, \"padding\": 1},"
    "  {\"name\": \"relu\", \"type\": \"ReLU\"},"
    "  {\"name\": \"flat\", \"type\": \"Flatten\"},"
    "  {\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 3}],"
    " \"training\": {\"dataset\": \"synthetic\", \"optimizer\": \"sgd\", \"lr\": 0.05,"
    "  \"batch_size\": 16, \"epochs\": 1, \"workers\": 0}}";

typedef struct {
  int steps, profiles, mem_bad;
  char *table, *trace;
} seen;

static bool on_event(const em_train_event *ev, void *user) {
  seen *s = user;
  if (ev->kind == EM_EVENT_STEP) {
    s->steps++;
    em_memory_stats ms;
    em_memory_stats_get(&ms);
    /* the figures are the allocator's, taken after the step */
    if (ev->mem_allocated <= 0 || ev->mem_peak < ev->mem_allocated ||
        ev->mem_reserved < ev->mem_allocated || ev->mem_peak > ms.peak_allocated_bytes)
      s->mem_bad++;
  } else if (ev->kind == EM_EVENT_PROFILE) {
    s->profiles++;
    g_free(s->table);
    g_free(s->trace);
    s->table = g_strdup(ev->message);
    s->trace = g_strdup(ev->path);
  }
  return true;
}

typedef struct {
  em_spec *spec;
  em_dataset *train;
  em_train_config cfg;
  em_model *m;
} fixture;

static void fixture_init(fixture *f) {
  em_error err = {0};
  f->spec = em_spec_parse(spec_json, "tiny", &err);
  g_assert_nonnull(f->spec);
  em_train_config_defaults(&f->cfg);
  g_assert_cmpint(em_train_config_from_spec(&f->cfg, f->spec, &err), ==, EM_OK);
  f->cfg.threads = 1;
  int64_t shape[3] = {1, 8, 8};
  f->train = em_dataset_synthetic_split(256, 3, shape, 3, 0.5, 1, true, &err);
  g_assert_nonnull(f->train);
  f->m = em_model_new(f->spec, 3, &err);
  g_assert_nonnull(f->m);
}

static void fixture_free(fixture *f) {
  em_model_free(f->m);
  em_dataset_free(f->train);
  em_spec_free(f->spec);
}

static void test_profile_window(void) {
  fixture f;
  fixture_init(&f);
  char *dir = g_dir_make_tmp("ember-diag-XXXXXX", NULL);
  char *trace = g_build_filename(dir, "trace.json", NULL);
  em_train_diagnostics d;
  em_train_diagnostics_defaults(&d);
  g_strlcpy(d.trace_path, trace, sizeof d.trace_path);
  d.start_batch = 2;
  d.batches = 4;
  em_error err = {0};
  em_trainer *t = em_trainer_new(f.m, &f.cfg, f.train, NULL, &err);
  g_assert_nonnull(t);
  em_trainer_set_diagnostics(t, &d);
  seen s = {0};
  g_assert_cmpint(em_trainer_run(t, on_event, &s, &err), ==, EM_OK);
  g_assert_cmpint(s.steps, ==, 16);
  g_assert_cmpint(s.mem_bad, ==, 0);
  g_assert_cmpint(s.profiles, ==, 1);
  g_assert_cmpstr(s.trace, ==, trace);
  g_assert_nonnull(strstr(s.table, "conv2d"));
  g_assert_nonnull(strstr(s.table, "linear"));
  g_assert_false(em_profile_running());
  char *text = NULL;
  g_assert_true(g_file_get_contents(trace, &text, NULL, NULL));
  g_assert_nonnull(strstr(text, "\"traceEvents\""));
  g_free(text);
  em_trainer_free(t);
  g_free(s.table);
  g_free(s.trace);
  g_unlink(trace);
  g_rmdir(dir);
  g_free(trace);
  g_free(dir);
  fixture_free(&f);
}

/* A NaN planted in fc's weight: anomaly mode names fc and its op; without
 * it the watchdog stops the run on the NaN loss. */
static void run_with_nan(bool anomaly, em_error *err) {
  fixture f;
  fixture_init(&f);
  int wi = em_model_tensor_find(f.m, "fc.weight");
  g_assert_cmpint(wi, >=, 0);
  em_tensor *w = em_model_tensor(f.m, wi, NULL);
  em_f32(w)[7] = NAN;
  f.cfg.on_divergence = EM_DIVERGENCE_STOP;
  em_trainer *t = em_trainer_new(f.m, &f.cfg, f.train, NULL, err);
  g_assert_nonnull(t);
  em_train_diagnostics d;
  em_train_diagnostics_defaults(&d);
  d.detect_anomaly = anomaly;
  em_trainer_set_diagnostics(t, &d);
  g_assert_cmpint(em_trainer_run(t, NULL, NULL, err), ==, EM_ERR_NUMERIC);
  g_assert_false(em_anomaly_enabled());
  em_trainer_free(t);
  fixture_free(&f);
}

static void test_anomaly_names_layer(void) {
  em_error err = {0};
  run_with_nan(true, &err);
  g_assert_nonnull(strstr(err.msg, "layer 'fc'"));
  g_assert_nonnull(strstr(err.msg, "forward"));
  em_error plain = {0};
  run_with_nan(false, &plain);
  g_assert_nonnull(strstr(plain.msg, "NaN"));
  g_assert_null(strstr(plain.msg, "layer 'fc'"));
}

/* em_profile_training: warm-up, then exactly the window, through the
 * trainer (its loader and optimiser ranges appear), then stops. */
static void test_profile_training(void) {
  fixture f;
  fixture_init(&f);
  em_error err = {0};
  em_profile_training_options o = {.warmup = 3, .steps = 4};
  g_assert_cmpint(em_profile_training(f.m, &f.cfg, f.train, &o, &err), ==, EM_OK);
  g_assert_cmpint(o.steps_done, ==, 4);
  g_assert_cmpfloat(o.step_ms_median, >, 0);
  g_assert_cmpfloat(o.step_ms_mean, >, 0);
  g_assert_cmpint(o.memory.peak_allocated_bytes, >, 0);
  g_assert_false(em_profile_running());
  em_op_table tab;
  g_assert_cmpint(em_op_table_build(&tab, EM_OP_TABLE_BY_OP, &err), ==, EM_OK);
  g_assert_cmpint(tab.steps, ==, 4);
  bool conv = false, opt = false, data = false;
  for (int i = 0; i < tab.n_rows; i++) {
    /* the Conv2d runs with the ReLU after it as one op */
    conv |= strcmp(tab.rows[i].name, "conv2d_relu") == 0 && tab.rows[i].count == 4;
    opt |= strcmp(tab.rows[i].name, "optimizer.step") == 0 && tab.rows[i].count == 4;
    data |= strcmp(tab.rows[i].name, "dataloader.next") == 0 && tab.rows[i].count == 4;
    g_test_message("%s x%lld", tab.rows[i].name, (long long)tab.rows[i].count);
  }
  em_op_table_free(&tab);
  g_assert_true(conv && opt && data);
  /* a cancel before the first batch: no step runs */
  _Atomic int cancel = 1;
  em_profile_training_options c = {.warmup = 0, .steps = 4, .cancel = &cancel};
  g_assert_cmpint(em_profile_training(f.m, &f.cfg, f.train, &c, &err), ==, EM_OK);
  g_assert_cmpint(c.steps_done, ==, 0);
  fixture_free(&f);
}

/* With accumulation (4 batches a step; 16 batches an epoch, so the window
 * of steps 3 to 7 crosses an epoch's end): the window counts optimiser
 * steps, not batches (the stop asked for after the last step came at the
 * end of its accumulation, and each batch after it wrote past the step
 * times: a heap overflow that aborted `ember profile`), and the epoch's
 * end, which holds no batch, is not counted as a step. */
static void test_profile_training_accumulate(void) {
  fixture f;
  fixture_init(&f);
  f.cfg.accumulate = 4;
  em_error err = {0};
  em_profile_training_options o = {.warmup = 2, .steps = 5};
  g_assert_cmpint(em_profile_training(f.m, &f.cfg, f.train, &o, &err), ==, EM_OK);
  g_assert_cmpint(o.steps_done, ==, 5);
  em_op_table tab;
  g_assert_cmpint(em_op_table_build(&tab, EM_OP_TABLE_BY_OP, &err), ==, EM_OK);
  g_assert_cmpint(tab.steps, ==, 20); /* the profiler's steps are batches */
  int64_t opt = 0, ends = 0;
  for (int i = 0; i < tab.n_rows; i++) {
    if (strcmp(tab.rows[i].name, "optimizer.step") == 0) opt = tab.rows[i].count;
    if (strcmp(tab.rows[i].name, "epoch.end") == 0) ends = tab.rows[i].count;
  }
  em_op_table_free(&tab);
  g_assert_cmpint(opt, ==, 5);
  g_assert_cmpint(ends, ==, 1);
  fixture_free(&f);
}

/* The per-node costs table (layer-costs.c) the memory estimate and the
 * builder read: one sample through a small CNN, worked out by hand. */
static void test_node_costs(void) {
  em_error err = {0};
  em_spec *spec = em_spec_parse(
      "{\"name\": \"c\", \"input\": {\"shape\": [1, 8, 8]}, \"nodes\": ["
      " {\"name\": \"conv\", \"type\": \"Conv2d\", \"out_channels\": 4, \"kernel_size\": 3,"
      "  \"padding\": 1},"
      " {\"name\": \"relu\", \"type\": \"ReLU\"},"
      " {\"name\": \"pool\", \"type\": \"MaxPool2d\", \"kernel_size\": 2},"
      " {\"name\": \"flat\", \"type\": \"Flatten\"},"
      " {\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 3}]}",
      "<test>", &err);
  g_assert_nonnull(spec);
  em_node_costs c[5];
  for (int i = 0; i < 5; i++) em_spec_node_costs(spec, i, &c[i]);
  /* conv: 40 weights at each of 8x8 positions; its unfolded input (9 x 64) */
  g_assert_cmpfloat(c[0].flops, ==, 2.0 * 40 * 64);
  g_assert_cmpint(c[0].workspace_bytes, ==, 40 / 4 * 64 * 4);
  g_assert_cmpint(c[0].act_bytes, ==, 4 * 64 * 4);
  g_assert_cmpfloat(c[1].flops, ==, 256); /* one per value */
  g_assert_cmpint(c[1].workspace_bytes, ==, 0);
  g_assert_cmpint(c[2].workspace_bytes, ==, 2 * 64 * 4); /* an i64 index per value */
  g_assert_cmpfloat(c[4].flops, ==, 2.0 * (64 * 3 + 3));
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  em_train_memory_estimate m;
  em_train_estimate_memory(spec, &cfg, 1, &m);
  g_assert_cmpint(m.workspace_bytes, ==, c[0].workspace_bytes + c[2].workspace_bytes);
  em_spec_free(spec);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/train/diagnostics/profile-window", test_profile_window);
  g_test_add_func("/train/diagnostics/node-costs", test_node_costs);
  g_test_add_func("/train/diagnostics/anomaly", test_anomaly_names_layer);
  g_test_add_func("/train/diagnostics/profile-training", test_profile_training);
  g_test_add_func("/train/diagnostics/profile-training-accumulate",
                  test_profile_training_accumulate);
  return g_test_run();
}
