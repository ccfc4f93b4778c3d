/* test-schedule.c: every learning-rate schedule (and one-cycle's
 * momentum) over its whole range against PyTorch 1.13's schedulers,
 * name parsing, config checks and the values past the end. */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-optim.h"
#include "torch-ref.h"

typedef struct {
  const char *path;
  em_schedule s;
  bool adam;     /* one-cycle cycles Adam's beta1 rather than SGD's momentum */
  int64_t steps; /* steps compared: 0 .. steps - 1 */
} sched_case;

static sched_case cases[] = {
  {.path = "/engine/schedule/constant", .steps = 20},
  {.path = "/engine/schedule/step", .steps = 50},
  {.path = "/engine/schedule/cosine", .steps = 41},
  {.path = "/engine/schedule/cosine-to-zero", .steps = 26},
  {.path = "/engine/schedule/warmup", .steps = 30},
  {.path = "/engine/schedule/warmup-default-factor", .steps = 12},
  {.path = "/engine/schedule/warmup-cosine", .steps = 51},
  {.path = "/engine/schedule/onecycle", .steps = 100},
  {.path = "/engine/schedule/onecycle-adam", .adam = true, .steps = 37},
  {.path = "/engine/schedule/onecycle-no-momentum", .steps = 20},
};
#define N_CASES ((int)G_N_ELEMENTS(cases))

static void cases_init(void) {
  em_schedule *s;
  s = &cases[0].s, em_schedule_init(s, EM_SCHED_CONSTANT, 0.1);
  s = &cases[1].s, em_schedule_init(s, EM_SCHED_STEP, 0.1);
  s->step_size = 7, s->gamma = 0.5;
  s = &cases[2].s, em_schedule_init(s, EM_SCHED_COSINE, 0.1);
  s->total_steps = 40, s->eta_min = 1e-3;
  s = &cases[3].s, em_schedule_init(s, EM_SCHED_COSINE, 0.3);
  s->total_steps = 25;
  s = &cases[4].s, em_schedule_init(s, EM_SCHED_WARMUP, 0.05);
  s->warmup_steps = 10, s->warmup_start_factor = 0.1;
  s = &cases[5].s, em_schedule_init(s, EM_SCHED_WARMUP, 0.05);
  s->warmup_steps = 5;
  s = &cases[6].s, em_schedule_init(s, EM_SCHED_WARMUP_COSINE, 0.1);
  s->warmup_steps = 8, s->warmup_start_factor = 0.01, s->total_steps = 50, s->eta_min = 1e-4;
  s = &cases[7].s, em_schedule_init(s, EM_SCHED_ONECYCLE, 0.1);
  s->total_steps = 100;
  s = &cases[8].s, em_schedule_init(s, EM_SCHED_ONECYCLE, 3e-3);
  s->total_steps = 37, s->pct_start = 0.25, s->div_factor = 10, s->final_div_factor = 100;
  s->base_momentum = 0.8, s->max_momentum = 0.9;
  s = &cases[9].s, em_schedule_init(s, EM_SCHED_ONECYCLE, 0.5);
  s->total_steps = 20, s->cycle_momentum = false;
}

static tref_batch *reference(void) {
  static tref_batch *ref;
  static char *why;
  static bool tried;
  if (!tried) {
    tried = true;
    ref = tref_batch_new();
    for (int ci = 0; ci < N_CASES; ci++) {
      const em_schedule *s = &cases[ci].s;
      tref_case(ref, "sched");
      tref_word(ref, em_schedule_kind_name(s->kind));
      tref_word(ref, cases[ci].adam ? "adam" : "sgd");
      tref_num(ref, s->lr);
      tref_int(ref, s->step_size);
      tref_num(ref, s->gamma);
      tref_int(ref, s->total_steps);
      tref_num(ref, s->eta_min);
      tref_int(ref, s->warmup_steps);
      tref_num(ref, s->warmup_start_factor);
      tref_num(ref, s->pct_start);
      tref_num(ref, s->div_factor);
      tref_num(ref, s->final_div_factor);
      tref_int(ref, s->cycle_momentum);
      tref_num(ref, s->base_momentum);
      tref_num(ref, s->max_momentum);
      tref_int(ref, cases[ci].steps);
    }
    tref_batch_run_or_skip(&ref, &why);
  } else if (!ref) {
    g_test_skip(why);
  }
  return ref;
}

static void test_against_torch(gconstpointer data) {
  const sched_case *c = data;
  em_error err;
  g_assert_cmpint(em_schedule_check(&c->s, &err), ==, EM_OK);
  tref_batch *ref = reference();
  if (!ref) return;
  int64_t n;
  const double *want = tref_result(ref, (int)(c - cases), &n);
  g_assert_cmpint(n, ==, 2 * c->steps);
  double *lr = g_new(double, c->steps), *mom = g_new(double, c->steps);
  /* The momentum PyTorch's optimiser starts with (see optim-ref.py). */
  double base = 0.9;
  for (int64_t t = 0; t < c->steps; t++) {
    lr[t] = em_schedule_lr(&c->s, t);
    mom[t] = em_schedule_momentum(&c->s, t, base);
  }
  double worst = 0;
  g_autofree char *what_lr = g_strdup_printf("%s lr", c->path);
  g_autofree char *what_mom = g_strdup_printf("%s momentum", c->path);
  /* The schedules are in double: PyTorch's recursive forms drift from
   * the closed forms by rounding only. */
  g_assert_true(tref_close(what_lr, lr, want, c->steps, 1e-12, &worst));
  g_assert_true(tref_close(what_mom, mom, want + c->steps, c->steps, 1e-12, &worst));
  g_test_message("%s: worst error %.3g", c->path, worst);
  g_free(lr);
  g_free(mom);
}

static void test_past_end(void) {
  em_schedule s;
  em_schedule_init(&s, EM_SCHED_COSINE, 0.1);
  s.total_steps = 10, s.eta_min = 0.01;
  g_assert_cmpfloat(em_schedule_lr(&s, 10), ==, 0.01);
  g_assert_cmpfloat(em_schedule_lr(&s, 1000), ==, 0.01);
  g_assert_cmpfloat(em_schedule_lr(&s, -3), ==, 0.1);
  em_schedule_init(&s, EM_SCHED_ONECYCLE, 0.1);
  s.total_steps = 10;
  g_assert_cmpfloat(em_schedule_lr(&s, 55), ==, em_schedule_lr(&s, 9));
  g_assert_cmpfloat_with_epsilon(em_schedule_lr(&s, 9), 0.1 / 25 / 1e4, 1e-18);
  g_assert_cmpfloat_with_epsilon(em_schedule_lr(&s, 0), 0.1 / 25, 1e-15);
  g_assert_cmpfloat(em_schedule_momentum(&s, 55, 0.5), ==, em_schedule_momentum(&s, 9, 0.5));
  /* pct_start * total_steps == 1 makes a one-step warm-up phase (PyTorch
   * divides by zero): no NaN here. */
  s.pct_start = 0.1;
  for (int t = 0; t < 12; t++) g_assert_true(isfinite(em_schedule_lr(&s, t)));
  em_schedule_init(&s, EM_SCHED_STEP, 1.0);
  s.step_size = 3;
  g_assert_cmpfloat(em_schedule_lr(&s, 2), ==, 1.0);
  g_assert_cmpfloat_with_epsilon(em_schedule_lr(&s, 3), 0.1, 1e-15);
  g_assert_cmpfloat_with_epsilon(em_schedule_lr(&s, 9), 1e-3, 1e-15);
  em_schedule_init(&s, EM_SCHED_WARMUP, 1.0);
  s.warmup_steps = 4;
  g_assert_cmpfloat(em_schedule_lr(&s, 4), ==, 1.0);
  g_assert_cmpfloat(em_schedule_lr(&s, 400), ==, 1.0);
  g_assert_cmpfloat(em_schedule_momentum(&s, 2, 0.7), ==, 0.7);
}

static void test_names(void) {
  static const char *const names[] = {"constant", "step", "cosine", "warmup", "warmup-cosine",
                                      "onecycle"};
  for (int k = 0; k < EM_SCHED_COUNT; k++) {
    em_sched_kind kind;
    g_assert_cmpint(em_schedule_parse_name(names[k], &kind, NULL), ==, EM_OK);
    g_assert_cmpint(kind, ==, k);
    g_assert_cmpstr(em_schedule_kind_name(kind), ==, names[k]);
  }
  em_error err;
  em_sched_kind kind;
  g_assert_cmpint(em_schedule_parse_name("cosin", &kind, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "'cosin'"));
  g_assert_cmpint(em_schedule_parse_name(NULL, &kind, &err), ==, EM_ERR_INVALID);
}

static void expect_bad(const em_schedule *s, const char *fragment) {
  em_error err;
  g_assert_cmpint(em_schedule_check(s, &err), ==, EM_ERR_INVALID);
  if (!strstr(err.msg, fragment)) g_error("message '%s' lacks '%s'", err.msg, fragment);
}

static void test_check(void) {
  em_schedule s;
  em_schedule_init(&s, EM_SCHED_STEP, 0.1);
  expect_bad(&s, "step_size");
  em_schedule_init(&s, EM_SCHED_COSINE, 0.1);
  expect_bad(&s, "total_steps");
  em_schedule_init(&s, EM_SCHED_WARMUP_COSINE, 0.1);
  s.warmup_steps = 10, s.total_steps = 10;
  expect_bad(&s, "must exceed warmup_steps");
  s.total_steps = 11, s.eta_min = -1;
  expect_bad(&s, "eta_min");
  em_schedule_init(&s, EM_SCHED_WARMUP, 0.1);
  s.warmup_steps = 3, s.warmup_start_factor = 0;
  expect_bad(&s, "warmup_start_factor");
  em_schedule_init(&s, EM_SCHED_ONECYCLE, 0.1);
  expect_bad(&s, "total_steps");
  s.total_steps = 100, s.pct_start = 1.5;
  expect_bad(&s, "pct_start");
  s.pct_start = 0.3, s.max_momentum = 1.0;
  expect_bad(&s, "max_momentum");
  em_schedule_init(&s, EM_SCHED_CONSTANT, -0.1);
  expect_bad(&s, "lr");
  em_schedule_init(&s, EM_SCHED_CONSTANT, 0.1);
  g_assert_cmpint(em_schedule_check(&s, NULL), ==, EM_OK);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  cases_init();
  for (int ci = 0; ci < N_CASES; ci++)
    g_test_add_data_func(cases[ci].path, &cases[ci], test_against_torch);
  g_test_add_func("/engine/schedule/past-end", test_past_end);
  g_test_add_func("/engine/schedule/names", test_names);
  g_test_add_func("/engine/schedule/check", test_check);
  return g_test_run();
}
