/* test-sweep-stats.c: the plain C behind the Sweeps page, no widgets:
 * the axes of the parallel coordinates (a log range, a list, a choice, the
 * metric; positions and ticks), brushing as a filter, the best so far,
 * the importances (eta squared on cases worked by hand) and the form's
 * description (values typed as a person would, refused with the row at
 * fault, and accepted by em_tune_desc_parse). */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-sweep-desc.h"
#include "em-sweep-stats.h"

#define SPEC "\"spec\": \"m.json\", \"spec_json\": {\"name\": \"m\", \"nodes\": []}"

static void parse(em_tune_desc *d, const char *json) {
  em_error err = {0};
  if (em_tune_desc_parse(d, json, NULL, &err) != EM_OK) g_error("%s", err.msg);
}

static void test_axes(void) {
  em_tune_desc d;
  parse(&d, "{" SPEC ", \"sampler\": \"random\", \"parameters\": {"
            "\"training.lr\": {\"low\": 1e-4, \"high\": 1, \"log\": true},"
            "\"training.batch_size\": [32, 64, 128],"
            "\"training.optimizer\": {\"choice\": [\"sgd\", \"adam\"]}}}");
  const char *params[] = {
      "{\"training.lr\": 0.01, \"training.batch_size\": 64, \"training.optimizer\": \"adam\"}",
      "{\"training.lr\": 1e-4, \"training.batch_size\": 32, \"training.optimizer\": \"sgd\"}",
      "{\"training.lr\": 1.0, \"training.batch_size\": 100, \"training.optimizer\": \"sgd\"}",
      NULL};
  double metric[] = {0.5, 0.9, NAN, 0};
  em_sweep_table t;
  em_sweep_table_build(&t, &d, params, metric, 4);
  g_assert_cmpint(t.n_axes, ==, 4);
  g_assert_cmpint(t.n_params, ==, 3);
  g_assert_true(t.axis[0].log && !t.axis[0].categorical);
  g_assert_true(t.axis[1].categorical && t.axis[2].categorical);
  g_assert_cmpstr(t.axis[3].name, ==, "test_accuracy");
  g_assert_true(t.maximize);
  /* the log axis: 1e-2 is halfway between 1e-4 and 1 */
  g_assert_cmpfloat_with_epsilon(em_sweep_axis_pos(&t.axis[0], em_sweep_table_at(&t, 0, 0)), 0.5,
                                 1e-12);
  g_assert_cmpfloat_with_epsilon(em_sweep_axis_value(&t.axis[0], 0.5), 0.01, 1e-12);
  g_assert_cmpfloat(em_sweep_axis_pos(&t.axis[0], 1e-4), ==, 0);
  g_assert_cmpfloat(em_sweep_axis_pos(&t.axis[0], 5), ==, 1); /* clamped */
  /* the list: a position per value; 100 is not one of them */
  g_assert_cmpfloat(em_sweep_table_at(&t, 0, 1), ==, 1);
  g_assert_cmpfloat(em_sweep_axis_pos(&t.axis[1], 1), ==, 0.5);
  g_assert_true(isnan(em_sweep_table_at(&t, 2, 1)));
  g_assert_cmpfloat(em_sweep_table_at(&t, 0, 2), ==, 1); /* adam */
  g_assert_true(isnan(em_sweep_table_at(&t, 3, 0))); /* no settings */
  /* the metric's axis spans its values; a missing one is NAN */
  g_assert_cmpfloat(t.axis[3].lo, ==, 0);
  g_assert_cmpfloat(t.axis[3].hi, ==, 0.9);
  g_assert_true(isnan(em_sweep_table_at(&t, 2, 3)));
  /* ticks: the decades of the log axis, every value of a list, the
   * choice's names without their quotes */
  double pos[8];
  char label[8][EM_SWEEP_TICK_LABEL];
  int n = em_sweep_axis_ticks(&t.axis[0], pos, label, 8);
  g_assert_cmpint(n, ==, 5);
  g_assert_cmpstr(label[0], ==, "1e-04");
  g_assert_cmpstr(label[2], ==, "0.01");
  g_assert_cmpfloat_with_epsilon(pos[2], 0.5, 1e-12);
  g_assert_cmpstr(label[4], ==, "1");
  n = em_sweep_axis_ticks(&t.axis[0], pos, label, 2); /* every other decade */
  g_assert_cmpint(n, ==, 2);
  g_assert_cmpstr(label[1], ==, "0.1");
  n = em_sweep_axis_ticks(&t.axis[1], pos, label, 8);
  g_assert_cmpint(n, ==, 3);
  g_assert_cmpstr(label[2], ==, "128");
  g_assert_cmpfloat(pos[2], ==, 1);
  n = em_sweep_axis_ticks(&t.axis[2], pos, label, 8);
  g_assert_cmpstr(label[0], ==, "sgd");
  g_assert_cmpstr(label[1], ==, "adam");
  n = em_sweep_axis_ticks(&t.axis[3], pos, label, 8); /* 0 to 0.9: a step of 0.2 */
  g_assert_cmpint(n, ==, 5);
  g_assert_cmpstr(label[0], ==, "0");
  g_assert_cmpstr(label[4], ==, "0.8");
  g_assert_cmpfloat_with_epsilon(pos[4], 0.8 / 0.9, 1e-12);
  em_sweep_axis loss = {.lo = 1e-9, .hi = 2.19}, narrow = {.lo = 1, .hi = 1.0001};
  n = em_sweep_axis_ticks(&loss, pos, label, 8);
  g_assert_cmpint(n, ==, 4); /* 0.5, 1, 1.5, 2 */
  g_assert_cmpstr(label[0], ==, "0.5");
  n = em_sweep_axis_ticks(&narrow, pos, label, 8);
  g_assert_cmpint(n, >=, 2);
  /* brushing: batch 64 alone (around the middle of its axis); then also
   * a metric of 0.5 at least */
  em_sweep_brush b[EM_SWEEP_MAX_AXES] = {{0}};
  bool keep[4];
  g_assert_cmpint(em_sweep_table_filter(&t, b, keep), ==, 4);
  b[1] = (em_sweep_brush){true, 0.4, 0.6};
  g_assert_cmpint(em_sweep_table_filter(&t, b, keep), ==, 1);
  g_assert_true(keep[0] && !keep[1] && !keep[2] && !keep[3]);
  b[1].on = false;
  b[3] = (em_sweep_brush){true, em_sweep_axis_pos(&t.axis[3], 0.5), 1};
  g_assert_cmpint(em_sweep_table_filter(&t, b, keep), ==, 2); /* NAN is out */
  g_assert_true(keep[0] && keep[1]);
  /* a loss near 0: its axis starts at 0 */
  em_sweep_table l;
  double losses[] = {3.6e-11, 2.19, 0.5};
  em_sweep_table_build(&l, &d, params, losses, 3);
  g_assert_cmpfloat(l.axis[3].lo, ==, 0);
  g_assert_cmpfloat(l.axis[3].hi, ==, 2.19);
  em_sweep_table_clear(&l);
  /* a copy is its own */
  em_sweep_table c;
  em_sweep_table_copy(&c, &t);
  em_sweep_table_clear(&t);
  g_assert_cmpstr(c.axis[2].cats[1], ==, "\"adam\"");
  g_assert_cmpfloat(em_sweep_table_at(&c, 1, 3), ==, 0.9);
  em_sweep_table_clear(&c);
  em_tune_desc_clear(&d);
}

static void test_best_so_far(void) {
  double v[] = {0.5, NAN, 0.7, 0.6}, b[4];
  em_sweep_best_so_far(v, 4, true, b);
  g_assert_cmpfloat(b[0], ==, 0.5);
  g_assert_cmpfloat(b[1], ==, 0.5);
  g_assert_cmpfloat(b[2], ==, 0.7);
  g_assert_cmpfloat(b[3], ==, 0.7);
  em_sweep_best_so_far(v, 4, false, b);
  g_assert_cmpfloat(b[3], ==, 0.5);
  double w[] = {NAN, 2};
  em_sweep_best_so_far(w, 2, false, b);
  g_assert_true(isnan(b[0]));
  g_assert_cmpfloat(b[1], ==, 2);
}

/* A 2 x 2 grid: a metric of a alone is all a's; a + b is half each. */
static void test_importance(void) {
  em_tune_desc d;
  parse(&d, "{" SPEC ", \"parameters\": {\"training.a\": [0, 1], \"training.b\": [0, 1]}}");
  const char *params[] = {"{\"training.a\": 0, \"training.b\": 0}",
                          "{\"training.a\": 0, \"training.b\": 1}",
                          "{\"training.a\": 1, \"training.b\": 0}",
                          "{\"training.a\": 1, \"training.b\": 1}"};
  double only_a[] = {0, 0, 10, 10}, sum[] = {0, 1, 1, 2}, flat[] = {3, 3, 3, 3};
  em_sweep_table t;
  double eta[2];
  em_sweep_table_build(&t, &d, params, only_a, 4);
  g_assert_cmpint(em_sweep_importance(&t, NULL, eta), ==, 4);
  g_assert_cmpfloat_with_epsilon(eta[0], 1, 1e-12);
  g_assert_cmpfloat_with_epsilon(eta[1], 0, 1e-12);
  em_sweep_table_clear(&t);
  em_sweep_table_build(&t, &d, params, sum, 4);
  em_sweep_importance(&t, NULL, eta);
  g_assert_cmpfloat_with_epsilon(eta[0], 0.5, 1e-12);
  g_assert_cmpfloat_with_epsilon(eta[1], 0.5, 1e-12);
  /* the trials used: without the last, b's groups are {0, 1} and {1}:
   * y = 0, 1, 1 (mean 2/3, SS 2/3); a's means 0.5 and 1: between
   * 2 (1/2 - 2/3)^2 + (1 - 2/3)^2 = 1/6, so 1/4 */
  bool use[] = {true, true, true, false};
  g_assert_cmpint(em_sweep_importance(&t, use, eta), ==, 3);
  g_assert_cmpfloat_with_epsilon(eta[0], 0.25, 1e-12);
  g_assert_cmpfloat_with_epsilon(eta[1], 0.25, 1e-12);
  bool two[] = {true, true, false, false}; /* fewer than 3 trials say nothing */
  g_assert_cmpint(em_sweep_importance(&t, two, eta), ==, 2);
  g_assert_true(isnan(eta[0]) && isnan(eta[1]));
  em_sweep_table_clear(&t);
  em_sweep_table_build(&t, &d, params, flat, 4); /* a metric that does not vary */
  em_sweep_importance(&t, NULL, eta);
  g_assert_true(isnan(eta[0]));
  em_sweep_table_clear(&t);
  em_tune_desc_clear(&d);
  /* a range, cut into round(sqrt(9)) = 3 equal bins: a metric that is
   * the bin's number is all the range's */
  parse(&d, "{" SPEC ", \"sampler\": \"random\", \"parameters\": {\"training.m\": {\"low\": 0, "
            "\"high\": 1}}}");
  const char *rp[9];
  char buf[9][48];
  double y[9];
  double x[9] = {0.05, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.95};
  for (int i = 0; i < 9; i++) {
    g_snprintf(buf[i], sizeof buf[i], "{\"training.m\": %g}", x[i]);
    rp[i] = buf[i];
    y[i] = i / 3;
  }
  g_assert_cmpint(em_sweep_importance_bins(9), ==, 3);
  g_assert_cmpint(em_sweep_importance_bins(2), ==, 2);
  g_assert_cmpint(em_sweep_importance_bins(100), ==, 5);
  em_sweep_table_build(&t, &d, rp, y, 9);
  em_sweep_importance(&t, NULL, eta);
  g_assert_cmpfloat_with_epsilon(eta[0], 1, 1e-12);
  em_sweep_table_clear(&t);
  em_tune_desc_clear(&d);
}

static char *form_json(const em_sweep_form *f, em_error *err) {
  memset(err, 0, sizeof *err);
  return em_sweep_form_to_json(f, err);
}

static void test_form(void) {
  char *spec = g_build_filename(g_getenv("EMBER_SOURCE_ROOT"), "data", "models",
                                "fmnist-mlp.json", NULL);
  em_sweep_form f = {.spec = spec, .name = "s1", .sampler = "random", .metric = "test_loss",
                     .maximize = false, .trials = 6, .pruner = "asha", .limit = 500,
                     .epochs = 2, .training_json = "{\"dataset\": \"synthetic\", \"epochs\": 9}"};
  f.p[0] = (em_sweep_form_param){"training.lr", EM_SWEEP_KIND_LOG_RANGE, "1e-4 .. 0.3"};
  f.p[1] = (em_sweep_form_param){" training.batch_size ", EM_SWEEP_KIND_CHOICE, "32, 64,128"};
  f.p[2] = (em_sweep_form_param){"nodes.fc1.out_features", EM_SWEEP_KIND_RANGE, "64 .. 256"};
  f.p[3] = (em_sweep_form_param){"", EM_SWEEP_KIND_LIST, "ignored"};
  em_error err;
  char *json = form_json(&f, &err);
  g_assert_nonnull(json);
  em_tune_desc d;
  if (em_tune_desc_parse(&d, json, NULL, &err) != EM_OK) g_error("%s\n%s", err.msg, json);
  g_assert_cmpint(d.n_params, ==, 3);
  g_assert_cmpstr(d.p[0].path, ==, "training.lr");
  g_assert_true(d.p[0].kind == EM_TUNE_RANGE && d.p[0].log && !d.p[0].integer);
  g_assert_cmpfloat(d.p[0].low, ==, 1e-4);
  g_assert_cmpstr(d.p[1].path, ==, "training.batch_size");
  g_assert_true(d.p[1].kind == EM_TUNE_CHOICE);
  g_assert_cmpint(d.p[1].n_values, ==, 3);
  g_assert_cmpstr(d.p[1].values[2], ==, "128");
  g_assert_true(d.p[2].integer && !d.p[2].log); /* whole numbers: an integer range */
  g_assert_true(d.sampler == EM_TUNE_RANDOM && !d.maximize && d.pruner == EM_PRUNE_ASHA);
  g_assert_cmpint(d.trials, ==, 6);
  g_assert_cmpstr(d.metric, ==, "test_loss");
  /* the per-trial overrides over the base's */
  g_assert_nonnull(strstr(d.training_json, "\"dataset\":\"synthetic\""));
  g_assert_nonnull(strstr(d.training_json, "\"epochs\":2"));
  g_assert_nonnull(strstr(d.training_json, "\"limit\":500"));
  em_tune_desc_clear(&d);
  free(json);
  /* a list keeps numbers numbers and names strings */
  f.sampler = "grid";
  f.p[0] = (em_sweep_form_param){"training.lr", EM_SWEEP_KIND_LIST, "0.001, 1e-2, 1"};
  f.p[1] = (em_sweep_form_param){"training.optimizer", EM_SWEEP_KIND_LIST, "sgd, 'adam'"};
  f.p[2].path = NULL;
  f.trials = 0;
  json = form_json(&f, &err);
  g_assert_nonnull(json);
  g_assert_nonnull(strstr(json, "[\n      0.001,\n      0.01,\n      1\n    ]"));
  g_assert_nonnull(strstr(json, "\"adam\""));
  parse(&d, json);
  g_assert_cmpint(em_tune_grid_size(&d), ==, 6);
  g_assert_cmpint(d.trials, ==, 6);
  em_tune_desc_clear(&d);
  free(json);
  /* refusals, each naming its row */
  struct { const char *path; em_sweep_kind kind; const char *values, *says; } bad[] = {
      {"training.lr", EM_SWEEP_KIND_LIST, " , ", "training.lr: no values"},
      {"training.lr", EM_SWEEP_KIND_RANGE, "0.3", "training.lr: a range is written"},
      {"training.lr", EM_SWEEP_KIND_RANGE, "5 .. 1", "LOW < HIGH"},
      {"training.lr", EM_SWEEP_KIND_LOG_RANGE, "0 .. 1", "a log range starts above 0"},
      {"training.lr", EM_SWEEP_KIND_RANGE, "a .. b", "wants two numbers"},
  };
  f.p[1].path = NULL;
  for (guint i = 0; i < G_N_ELEMENTS(bad); i++) {
    f.p[0] = (em_sweep_form_param){bad[i].path, bad[i].kind, bad[i].values};
    g_assert_null(form_json(&f, &err));
    if (!strstr(err.msg, bad[i].says)) g_error("'%s' does not say '%s'", err.msg, bad[i].says);
  }
  f.p[0] = (em_sweep_form_param){"training.lr", EM_SWEEP_KIND_LIST, "0.1"};
  f.p[1] = (em_sweep_form_param){"training.lr ", EM_SWEEP_KIND_LIST, "0.2"};
  g_assert_null(form_json(&f, &err));
  g_assert_nonnull(strstr(err.msg, "training.lr is varied twice"));
  f.p[0].path = f.p[1].path = NULL;
  g_assert_null(form_json(&f, &err));
  g_assert_nonnull(strstr(err.msg, "choose a setting to vary"));
  f.spec = NULL;
  g_assert_null(form_json(&f, &err));
  g_assert_nonnull(strstr(err.msg, "no model"));
  g_free(spec);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/sweeps/stats/axes", test_axes);
  g_test_add_func("/sweeps/stats/best-so-far", test_best_so_far);
  g_test_add_func("/sweeps/stats/importance", test_importance);
  g_test_add_func("/sweeps/desc/form", test_form);
  return g_test_run();
}
