/* test-text-train.c: the trainer on a language model's text: the model
 * takes i64 tokens, the loss is the mean over every position, accuracy
 * is per token, the summary says so (target_len); two epochs of a byte
 * model on a repetitive text learn it (the validation loss falls well
 * below log 256); and what does not fit is refused with a message:
 * a float input, an output that is not [L, V], too few classes, MSE. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "em-nn.h"
#include "em-train.h"

#define SPEC_HEAD "{\"name\": \"lm\", \"input\": {\"shape\": [8], \"dtype\": \"i64\"}, "
#define SPEC_NODES                                                                              \
  "\"nodes\": [{\"name\": \"tok\", \"type\": \"Embedding\", \"num_embeddings\": 256, "          \
  "\"embedding_dim\": 16}, {\"name\": \"pos\", \"type\": \"PositionalEmbedding\", "             \
  "\"max_len\": 8}, {\"name\": \"b\", \"type\": \"TransformerEncoderLayer\", \"nhead\": 2, "      \
  "\"dim_feedforward\": 32, \"dropout\": 0.0, \"norm_first\": true, \"causal\": true}, "         \
  "{\"name\": \"head\", \"type\": \"Linear\", \"out_features\": %d}]"

typedef struct {
  char *dir, *file;
  em_spec *spec;
  em_train_config cfg;
  em_dataset *train, *test;
} fixture;

static void fixture_open(fixture *f, const char *spec_tail, int out) {
  f->dir = g_dir_make_tmp("ember-text-train-XXXXXX", NULL);
  f->file = g_build_filename(f->dir, "abc.txt", NULL);
  GString *s = g_string_new(NULL);
  for (int i = 0; i < 300; i++) g_string_append(s, "abcdefg\n");
  g_assert_true(g_file_set_contents(f->file, s->str, (gssize)s->len, NULL));
  g_string_free(s, TRUE);
  char *fmt = g_strconcat(SPEC_HEAD, spec_tail, SPEC_NODES, "}", NULL);
  char *json = g_strdup_printf(fmt, out);
  em_error err = {0};
  f->spec = em_spec_parse(json, "lm.json", &err);
  if (!f->spec) g_error("%s", err.msg);
  g_free(json);
  g_free(fmt);
  em_train_config_defaults(&f->cfg);
  g_strlcpy(f->cfg.dataset, "text", sizeof f->cfg.dataset);
  g_strlcpy(f->cfg.data_dir, f->file, sizeof f->cfg.data_dir);
  f->cfg.batch_size = 16;
  f->cfg.epochs = 2;
  f->cfg.workers = 0;
  em_optim_config_defaults(&f->cfg.optim, EM_OPTIM_ADAMW);
  f->cfg.optim.lr = 1e-2;
  f->train = f->test = NULL;
}

static void fixture_close(fixture *f) {
  em_dataset_free(f->train);
  em_dataset_free(f->test);
  em_spec_free(f->spec);
  g_remove(f->file);
  g_rmdir(f->dir);
  g_free(f->file);
  g_free(f->dir);
}

static void test_learns_the_text(void) {
  fixture f;
  fixture_open(&f, "\"tokenizer\": {\"type\": \"byte\"}, ", 256);
  em_error err = {0};
  f.train = em_train_open_dataset(f.spec, &f.cfg, true, &err);
  if (!f.train) g_error("%s", err.msg);
  f.test = em_train_open_dataset(f.spec, &f.cfg, false, &err);
  g_assert_nonnull(f.test);
  em_model *m = em_model_new(f.spec, 1, &err);
  double before, acc0;
  g_assert_cmpint(em_evaluate(m, f.test, 32, EM_LOSS_CROSS_ENTROPY, 0, &before, &acc0, &err), ==,
                  EM_OK);
  g_assert_cmpfloat(fabs(before - log(256.0)), <, 1.5); /* near uniform over the bytes */
  em_trainer *t = em_trainer_new(m, &f.cfg, f.train, f.test, &err);
  if (!t) g_error("%s", err.msg);
  g_assert_cmpint(em_trainer_run(t, NULL, NULL, &err), ==, EM_OK);
  em_train_summary s;
  em_trainer_summary(t, &s);
  g_assert_true(s.evaluated);
  g_assert_cmpint(s.target_len, ==, 8);
  g_assert_cmpfloat(s.test_loss, <, 0.5); /* abcdefg\n: each byte tells the next */
  g_assert_cmpfloat(s.test_accuracy, >, 0.9);
  g_assert_cmpfloat(s.test_accuracy, <=, 1.0);
  em_trainer_free(t);
  em_model_free(m);
  fixture_close(&f);
}

/* em_train_open_dataset(spec, train) fails with a message holding want. */
static void expect_misfit(const char *tail, int out, em_loss_kind loss, const char *want) {
  fixture f;
  fixture_open(&f, tail, out);
  f.cfg.loss = loss;
  em_error err = {0};
  g_assert_null(em_train_open_dataset(f.spec, &f.cfg, true, &err));
  g_assert_cmpint(err.status, !=, EM_OK);
  if (!strstr(err.msg, want)) g_error("expected '%s' in: %s", want, err.msg);
  fixture_close(&f);
}

static void test_misfits(void) {
  const char *bytes = "\"tokenizer\": {\"type\": \"byte\"}, ";
  expect_misfit(bytes, 100, EM_LOSS_CROSS_ENTROPY,
                "the model outputs 100 classes per position but the text dataset has 256");
  expect_misfit(bytes, 256, EM_LOSS_MSE, "take the cross_entropy loss");
  expect_misfit("", 256, EM_LOSS_CROSS_ENTROPY, "add \"tokenizer\"");
  /* a float model on the text's token ids */
  fixture f;
  fixture_open(&f, bytes, 256);
  em_error err = {0};
  em_dataset *ds = em_train_open_dataset(f.spec, &f.cfg, true, &err);
  g_assert_nonnull(ds);
  em_spec *flat = em_spec_parse("{\"name\": \"f\", \"input\": {\"shape\": [8]}, \"nodes\": ["
                                "{\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 256}]}",
                                "f.json", &err);
  g_assert_nonnull(flat);
  g_assert_cmpint(em_train_check_fit(flat, ds, "text", EM_LOSS_CROSS_ENTROPY, &err), ==,
                  EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "gives token ids"));
  /* one output per sample: not [L, V] */
  em_spec *pooled = em_spec_parse(
      "{\"name\": \"p\", \"input\": {\"shape\": [8], \"dtype\": \"i64\"}, \"nodes\": ["
      "{\"name\": \"tok\", \"type\": \"Embedding\", \"num_embeddings\": 256, \"embedding_dim\": 4},"
      "{\"name\": \"pool\", \"type\": \"SequencePool\", \"mode\": \"mean\"},"
      "{\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 256}]}", "p.json", &err);
  g_assert_nonnull(pooled);
  g_assert_cmpint(em_train_check_fit(pooled, ds, "text", EM_LOSS_CROSS_ENTROPY, &err), ==,
                  EM_ERR_SHAPE);
  g_assert_nonnull(strstr(err.msg, "a label for each of 8 positions: the output must be [8, "));
  em_spec_free(pooled);
  em_spec_free(flat);
  em_dataset_free(ds);
  fixture_close(&f);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/train/text/learns", test_learns_the_text);
  g_test_add_func("/engine/train/text/misfits", test_misfits);
  return g_test_run();
}
