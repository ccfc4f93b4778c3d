/* test-config-json.c: the training config as JSON and back (every field,
 * exactly), errors that name the key, and the defaults and range checks
 * of the checkpoint and divergence fields. */
#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-train.h"

/* A config with every field away from its default. */
static void config_unusual(em_train_config *c) {
  em_train_config_defaults(c);
  strcpy(c->dataset, "cifar10");
  strcpy(c->data_dir, "/data/cifar \"10\"");
  c->batch_size = 96;
  c->epochs = 7;
  c->limit = 12345;
  c->shuffle = false;
  c->drop_last = true;
  c->workers = 3;
  em_optim_config_defaults(&c->optim, EM_OPTIM_ADAMW);
  c->optim.lr = 0.1 + 0.2; /* 0.30000000000000004: needs all 17 digits */
  c->optim.momentum = 0.7;
  c->optim.dampening = 0.1;
  c->optim.weight_decay = 1e-5;
  c->optim.nesterov = true;
  c->optim.beta1 = 0.85;
  c->optim.beta2 = 0.995;
  c->optim.eps = 1e-7;
  c->optim.amsgrad = true;
  /* the schedule's base lr is the optimiser's (config-json.c) */
  em_schedule_init(&c->schedule, EM_SCHED_ONECYCLE, c->optim.lr);
  c->schedule.step_size = 11;
  c->schedule.gamma = 0.25;
  c->schedule.total_steps = 999;
  c->schedule.eta_min = 1e-6;
  c->schedule.warmup_steps = 13;
  c->schedule.warmup_start_factor = 0.2;
  c->schedule.pct_start = 0.4;
  c->schedule.div_factor = 20;
  c->schedule.final_div_factor = 1e3;
  c->schedule.cycle_momentum = false;
  c->schedule.base_momentum = 0.8;
  c->schedule.max_momentum = 0.9;
  c->clip_grad_norm = 2.5;
  c->accumulate = 4;
  c->loss = EM_LOSS_MSE;
  c->label_smoothing = 0.1;
  c->seed = UINT64_MAX - 5; /* above JSON's signed range */
  c->threads = 5;
  c->eval_every = 2;
  c->checkpoint_every = 250;
  strcpy(c->checkpoint_dir, "runs/ckpt");
  c->on_divergence = EM_DIVERGENCE_STOP;
  c->divergence_lr_factor = 0.25;
  c->divergence_spike_factor = 20;
  c->max_rollbacks = 9;
}

static void assert_config_equal(const em_train_config *a, const em_train_config *b) {
  g_assert_cmpstr(a->dataset, ==, b->dataset);
  g_assert_cmpstr(a->data_dir, ==, b->data_dir);
  g_assert_cmpint(a->batch_size, ==, b->batch_size);
  g_assert_cmpint(a->epochs, ==, b->epochs);
  g_assert_cmpint(a->limit, ==, b->limit);
  g_assert_cmpint(a->shuffle, ==, b->shuffle);
  g_assert_cmpint(a->drop_last, ==, b->drop_last);
  g_assert_cmpint(a->workers, ==, b->workers);
  g_assert_cmpint(a->optim.kind, ==, b->optim.kind);
  const em_optim_config *o = &a->optim, *q = &b->optim;
  g_assert_true(o->lr == q->lr && o->momentum == q->momentum && o->dampening == q->dampening);
  g_assert_true(o->weight_decay == q->weight_decay && o->beta1 == q->beta1);
  g_assert_true(o->beta2 == q->beta2 && o->eps == q->eps);
  g_assert_cmpint(o->nesterov, ==, q->nesterov);
  g_assert_cmpint(o->amsgrad, ==, q->amsgrad);
  const em_schedule *s = &a->schedule, *t = &b->schedule;
  g_assert_cmpint(s->kind, ==, t->kind);
  g_assert_true(s->lr == t->lr && s->gamma == t->gamma && s->eta_min == t->eta_min);
  g_assert_cmpint(s->step_size, ==, t->step_size);
  g_assert_cmpint(s->total_steps, ==, t->total_steps);
  g_assert_cmpint(s->warmup_steps, ==, t->warmup_steps);
  g_assert_true(s->warmup_start_factor == t->warmup_start_factor);
  g_assert_true(s->pct_start == t->pct_start && s->div_factor == t->div_factor);
  g_assert_true(s->final_div_factor == t->final_div_factor);
  g_assert_cmpint(s->cycle_momentum, ==, t->cycle_momentum);
  g_assert_true(s->base_momentum == t->base_momentum && s->max_momentum == t->max_momentum);
  g_assert_true(a->clip_grad_norm == b->clip_grad_norm);
  g_assert_cmpint(a->accumulate, ==, b->accumulate);
  g_assert_cmpint(a->loss, ==, b->loss);
  g_assert_true(a->label_smoothing == b->label_smoothing);
  g_assert_cmpuint(a->seed, ==, b->seed);
  g_assert_cmpint(a->threads, ==, b->threads);
  g_assert_cmpint(a->eval_every, ==, b->eval_every);
  g_assert_cmpint(a->checkpoint_every, ==, b->checkpoint_every);
  g_assert_cmpstr(a->checkpoint_dir, ==, b->checkpoint_dir);
  g_assert_cmpint(a->on_divergence, ==, b->on_divergence);
  g_assert_true(a->divergence_lr_factor == b->divergence_lr_factor);
  g_assert_true(a->divergence_spike_factor == b->divergence_spike_factor);
  g_assert_cmpint(a->max_rollbacks, ==, b->max_rollbacks);
}

static void test_roundtrip(void) {
  em_train_config a, b, d;
  em_error err = {0};
  for (int which = 0; which < 2; which++) {
    if (which == 0) config_unusual(&a);
    else em_train_config_defaults(&a);
    char *json = em_train_config_to_json(&a);
    g_assert_nonnull(json);
    memset(&b, 0x5A, sizeof b); /* from_json must fill every field */
    g_assert_cmpint(em_train_config_from_json(&b, json, &err), ==, EM_OK);
    assert_config_equal(&a, &b);
    char *again = em_train_config_to_json(&b);
    g_assert_cmpstr(json, ==, again);
    free(again);
    free(json);
  }
  /* The keys the registry and the CLI read are spelled as documented. */
  config_unusual(&a);
  char *json = em_train_config_to_json(&a);
  g_assert_nonnull(strstr(json, "\"on_divergence\":\"stop\""));
  g_assert_nonnull(strstr(json, "\"checkpoint_every\":250"));
  g_assert_nonnull(strstr(json, "\"seed\":\"18446744073709551610\""));
  g_assert_nonnull(strstr(json, "\"lr\":0.30000000000000004"));
  free(json);
  /* Missing keys keep their defaults. */
  g_assert_cmpint(em_train_config_from_json(&b, "{\"epochs\": 3}", &err), ==, EM_OK);
  em_train_config_defaults(&d);
  d.epochs = 3;
  assert_config_equal(&b, &d);
}

/* from_json fails with a message containing `needle`, leaving c as it was. */
static void expect_error(const char *json, const char *needle) {
  em_train_config c, before;
  config_unusual(&c);
  before = c;
  em_error err = {0};
  g_assert_cmpint(em_train_config_from_json(&c, json, &err), ==, EM_ERR_INVALID);
  if (!strstr(err.msg, needle)) g_error("'%s' lacks '%s'", err.msg, needle);
  assert_config_equal(&c, &before);
}

static void test_errors(void) {
  expect_error("{\"epochs\": 2, \"epoch\": 3}", "unknown key \"epoch\"");
  expect_error("{\"optim\": {\"lr\": 0.1, \"moment\": 0.9}}", "unknown key \"moment\"");
  expect_error("{\"schedule\": {\"type\": \"step\", \"steps\": 3}}", "unknown key \"steps\"");
  expect_error("{\"batch_size\": \"64\"}", "\"batch_size\" must be a whole number, not a string");
  expect_error("{\"batch_size\": 6.5}", "\"batch_size\"");
  expect_error("{\"shuffle\": 1}", "\"shuffle\" must be true or false");
  expect_error("{\"optim\": {\"lr\": \"fast\"}}", "\"config.optim\".\"lr\" must be a number");
  expect_error("{\"optim\": 3}", "\"optim\" must be an object");
  expect_error("{\"on_divergence\": \"panic\"}", "auto, rollback, stop");
  expect_error("{\"loss\": \"hinge\"}", "\"loss\" is \"hinge\"");
  expect_error("{\"seed\": -1}", "\"seed\"");
  expect_error("{\"workers\": 1e10}", "\"workers\"");
  expect_error("{\"threads\": 99999999999}", "\"threads\" must be from");
  expect_error("[1, 2]", "must be an object");
  expect_error("{\"epochs\": 2", "not valid JSON");
  expect_error("{\"epochs\": 2, \"epochs\": 3}", "not valid JSON");
}

static void test_new_field_defaults_and_ranges(void) {
  em_train_config c;
  em_train_config_defaults(&c);
  g_assert_cmpint(c.checkpoint_every, ==, 0);
  g_assert_cmpstr(c.checkpoint_dir, ==, "");
  g_assert_cmpint(c.on_divergence, ==, EM_DIVERGENCE_AUTO);
  g_assert_cmpfloat(c.divergence_lr_factor, ==, 0.5);
  g_assert_cmpfloat(c.divergence_spike_factor, ==, 10);
  g_assert_cmpint(c.max_rollbacks, ==, 5);
  em_error err = {0};
  g_assert_cmpint(em_train_config_validate(&c, &err), ==, EM_OK);
  em_train_config x = c;
  x.checkpoint_every = -1;
  g_assert_cmpint(em_train_config_validate(&x, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "checkpoint_every"));
  x = c;
  x.checkpoint_every = 10; /* but no folder */
  g_assert_cmpint(em_train_config_validate(&x, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "folder"));
  strcpy(x.checkpoint_dir, "/tmp/x");
  g_assert_cmpint(em_train_config_validate(&x, &err), ==, EM_OK);
  x = c;
  x.divergence_lr_factor = 0;
  g_assert_cmpint(em_train_config_validate(&x, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "divergence_lr_factor"));
  x.divergence_lr_factor = 1.5;
  g_assert_cmpint(em_train_config_validate(&x, &err), ==, EM_ERR_INVALID);
  x = c;
  x.divergence_spike_factor = 0.5;
  g_assert_cmpint(em_train_config_validate(&x, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "divergence_spike_factor"));
  x.divergence_spike_factor = 0; /* off */
  g_assert_cmpint(em_train_config_validate(&x, &err), ==, EM_OK);
  x = c;
  x.max_rollbacks = -1;
  g_assert_cmpint(em_train_config_validate(&x, &err), ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "max_rollbacks"));
  x = c;
  x.on_divergence = (em_divergence_policy)7;
  g_assert_cmpint(em_train_config_validate(&x, &err), ==, EM_ERR_INVALID);
  /* A number JSON cannot hold makes no JSON. */
  x = c;
  x.clip_grad_norm = NAN;
  g_assert_null(em_train_config_to_json(&x));
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/train/config/json-roundtrip", test_roundtrip);
  g_test_add_func("/train/config/json-errors", test_errors);
  g_test_add_func("/train/config/new-fields", test_new_field_defaults_and_ranges);
  return g_test_run();
}
