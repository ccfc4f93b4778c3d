/* test-text-torch.c: a character-level language model's data and loss
 * against PyTorch 1.13 (text-torch-ref.py), from the same files and the
 * same initial weights:
 *   - the text dataset's windows: PyTorch reads the files itself (sorted
 *     names, UTF-8, its own sorted character set as the vocabulary, the
 *     last 10% of tokens held out) and its validation windows and their
 *     next-token targets equal the loader's, id for id;
 *   - the evaluation's per-token cross-entropy and accuracy over the
 *     validation split (batches of 5, the last one short) equal
 *     F.cross_entropy(logits.view(-1, V), y.view(-1)) over every
 *     position and (argmax == y).mean(), to 1e-5;
 *   - a training batch's loss and the token embedding's gradient through
 *     the trainer's loss (em_train_loss on (N, L, V) logits) to 1e-5.
 * The bound: f32 sums of a few thousand terms of order 1 in other
 * orders, a few ulp each, well under 1e-5. Skips without torch. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "em-nn.h"
#include "em-ops.h"
#include "em-rng.h"
#include "em-train.h"

#define L 16
#define BATCH 4
/* The text's characters, in code point order: the vocabulary. */
static const char vocab[] = "\n ,.Tabcdefghilmnorstwy\xc3\xa9";
#define V 24

static const char *const words[] = {"the",  "cat", "sat", "on",   "a",    "mat", "caf\xc3\xa9",
                                    "dog",  "ran", "to",  "wet",  "tree", "by",  "sea",
                                    "fish", "now", "we",  "are",  "all",  "here"};

/* Seeded English-ish text: words, commas and full stops, lines. */
static char *make_text(uint64_t seed, int n_words) {
  em_rng r;
  em_rng_seed(&r, seed);
  GString *s = g_string_new(NULL);
  for (int i = 0; i < n_words; i++) {
    const char *w = words[em_rng_below(&r, G_N_ELEMENTS(words))];
    g_string_append(s, i % 9 == 0 ? "T" : "");
    g_string_append(s, i % 9 == 0 ? w + 1 : w); /* "The" from "the"... a capital T */
    uint64_t p = em_rng_below(&r, 10);
    g_string_append(s, p == 0 ? "." : p == 1 ? "," : "");
    g_string_append(s, i % 11 == 10 ? "\n" : " ");
  }
  return g_string_free(s, FALSE);
}

static const char *spec_fmt =
    "{\"name\": \"text-torch\", \"input\": {\"shape\": [%d], \"dtype\": \"i64\"},"
    " \"tokenizer\": {\"type\": \"char\", \"vocab\": %s}, \"nodes\": ["
    " {\"name\": \"tok\", \"type\": \"Embedding\", \"num_embeddings\": %d, \"embedding_dim\": 32,"
    "  \"init_std\": 0.02},"
    " {\"name\": \"pos\", \"type\": \"PositionalEmbedding\", \"max_len\": %d, \"init_std\": 0.02},"
    " {\"name\": \"layers\", \"repeat\": 2, \"nodes\": [{\"name\": \"b\","
    "  \"type\": \"TransformerEncoderLayer\", \"nhead\": 4, \"dim_feedforward\": 64,"
    "  \"dropout\": 0.0, \"norm_first\": true, \"causal\": true, \"activation\": \"gelu\"}]},"
    " {\"name\": \"ln\", \"type\": \"LayerNorm\"},"
    " {\"name\": \"head\", \"type\": \"Linear\", \"out_features\": %d, \"bias\": false,"
    "  \"tie_weight\": \"tok\"}],"
    " \"training\": {\"dataset\": \"text\", \"data_dir\": \"%s\"}}";

static int run_reference(const char *dir) {
  const char *root = g_getenv("EMBER_SOURCE_ROOT");
  if (!root || !g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE)) return 77;
  char *script = g_build_filename(root, "tests", "engine", "train", "text-torch-ref.py", NULL);
  char *argv[] = {"/usr/bin/python3", script, (char *)dir, NULL};
  int status = 0;
  char *out = NULL, *err_out = NULL;
  GError *error = NULL;
  if (!g_spawn_sync(NULL, argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err_out, &status,
                    &error))
    g_error("cannot run the reference: %s", error->message);
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (rc && rc != 77) g_printerr("%s%s", out, err_out);
  g_free(out);
  g_free(err_out);
  g_free(script);
  return rc;
}

static gsize read_bin(const char *dir, const char *name, void *dst, gsize cap) {
  char *p = g_build_filename(dir, name, NULL), *raw = NULL;
  gsize len = 0;
  g_assert_true(g_file_get_contents(p, &raw, &len, NULL));
  g_assert_cmpuint(len, <=, cap);
  memcpy(dst, raw, len);
  g_free(raw);
  g_free(p);
  return len;
}

static void test_text_torch(void) {
  char *dir = g_dir_make_tmp("ember-text-torch-XXXXXX", NULL);
  char *data = g_build_filename(dir, "data", NULL);
  g_assert_cmpint(g_mkdir(data, 0755), ==, 0);
  /* two files, read b then c (a name order that is not the writing order) */
  char *t1 = make_text(1, 260), *t2 = make_text(2, 200);
  char *p1 = g_build_filename(data, "c.txt", NULL), *p2 = g_build_filename(data, "b.txt", NULL);
  g_assert_true(g_file_set_contents(p1, t1, -1, NULL));
  g_assert_true(g_file_set_contents(p2, t2, -1, NULL));
  json_t *vj = json_string(vocab);
  char *vq = json_dumps(vj, JSON_ENCODE_ANY);
  char *spec_json = g_strdup_printf(spec_fmt, L, vq, V, L, V, data);
  em_error err = {0};
  em_spec *s = em_spec_parse(spec_json, "text-torch.json", &err);
  if (!s) g_error("%s", err.msg);
  g_assert_cmpint(em_tokenizer_vocab_size(em_spec_tokenizer(s)), ==, V);
  em_model *m = em_model_new(s, 7, &err);
  g_assert_nonnull(m);
  char *init = g_build_filename(dir, "init.safetensors", NULL);
  g_assert_cmpint(em_model_save(m, init, &err), ==, EM_OK);
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  g_assert_cmpint(em_train_config_from_spec(&cfg, s, &err), ==, EM_OK);
  em_dataset *train = em_train_open_dataset(s, &cfg, true, &err);
  if (!train) g_error("%s", err.msg);
  em_dataset *val = em_train_open_dataset(s, &cfg, false, &err);
  g_assert_nonnull(val);
  int64_t n_val = em_dataset_len(val);
  g_assert_cmpint(n_val % 5, !=, 0); /* the evaluation's last batch is short */

  /* the validation windows, through the loader */
  int64_t *vx = g_new(int64_t, n_val * L), *vy = g_new(int64_t, n_val * L);
  em_loader_config lc;
  em_loader_config_defaults(&lc);
  lc.batch_size = 5;
  lc.shuffle = false;
  em_loader *ld = em_loader_new(val, &lc, &err);
  em_batch b;
  int64_t k = 0;
  while (em_loader_next(ld, &b, &err)) {
    for (int64_t i = 0; i < b.n * L; i++) vx[k + i] = (int64_t)b.x[i], vy[k + i] = b.y[i];
    k += b.n * L;
  }
  g_assert_cmpint(k, ==, n_val * L);
  em_loader_free(ld);
  double loss = 0, acc = 0;
  g_assert_cmpint(em_evaluate(m, val, 5, EM_LOSS_CROSS_ENTROPY, 0, &loss, &acc, &err), ==,
                  EM_OK);

  /* the first training batch: the trainer's loss and tok.weight's gradient */
  em_scope *sc = em_scope_begin();
  float bx[BATCH * L];
  int64_t by[BATCH * L];
  for (int i = 0; i < BATCH; i++)
    g_assert_cmpint(em_dataset_get(train, i, bx + i * L, by + i * L, &err), ==, EM_OK);
  int64_t xs[2] = {BATCH, L};
  int64_t bxi[BATCH * L];
  for (int i = 0; i < BATCH * L; i++) bxi[i] = (int64_t)bx[i];
  em_tensor *logits = em_model_forward(m, em_from_data(EM_DTYPE_I64, 2, xs, bxi), true, NULL,
                                       &err);
  g_assert_nonnull(logits);
  g_assert_cmpint(logits->ndim, ==, 3);
  em_tensor *tl = em_train_loss(EM_LOSS_CROSS_ENTROPY, logits,
                                em_tensor_wrap(EM_DTYPE_I64, 2, xs, by), 0);
  double train_loss = em_tensor_item(tl);
  em_backward(tl);
  int w = em_model_tensor_find(m, "tok.weight");
  g_assert_cmpint(w, >=, 0);
  em_tensor *g = em_tensor_current_grad(em_model_tensor(m, w, NULL));
  g_assert_nonnull(g);
  float grad[V * 32];
  memcpy(grad, em_f32(g), sizeof grad);
  em_scope_end(sc);

  char *cj = g_strdup_printf("{\"spec\": %s, \"data\": \"%s\", \"context\": %d, \"batch\": %d}",
                             spec_json, data, L, BATCH);
  char *cpath = g_build_filename(dir, "case.json", NULL);
  g_assert_true(g_file_set_contents(cpath, cj, -1, NULL));
  int rc = run_reference(dir);
  if (rc == 77) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
  } else {
    g_assert_cmpint(rc, ==, 0);
    int64_t *px = g_new(int64_t, n_val * L + 1), *py = g_new(int64_t, n_val * L + 1);
    g_assert_cmpuint(read_bin(dir, "val-x.bin", px, sizeof *px * (n_val * L + 1)), ==,
                     sizeof *px * n_val * L);
    g_assert_cmpuint(read_bin(dir, "val-y.bin", py, sizeof *py * (n_val * L + 1)), ==,
                     sizeof *py * n_val * L);
    for (int64_t i = 0; i < n_val * L; i++) {
      g_assert_cmpint(vx[i], ==, px[i]);
      g_assert_cmpint(vy[i], ==, py[i]);
    }
    double want[3];
    g_assert_cmpuint(read_bin(dir, "result.bin", want, sizeof want), ==, sizeof want);
    if (g_test_verbose())
      g_printerr("val loss %.7f / %.7f, acc %.6f / %.6f, train loss %.7f / %.7f\n", loss,
                 want[0], acc, want[1], train_loss, want[2]);
    g_assert_cmpfloat(fabs(loss - want[0]), <=, 1e-5);
    g_assert_cmpfloat(fabs(acc - want[1]), <=, 1e-5);
    g_assert_cmpfloat(fabs(train_loss - want[2]), <=, 1e-5);
    float tg[V * 32];
    g_assert_cmpuint(read_bin(dir, "grad.bin", tg, sizeof tg), ==, sizeof tg);
    for (int i = 0; i < V * 32; i++) g_assert_cmpfloat(fabs(grad[i] - tg[i]), <=, 1e-5);
    g_free(px);
    g_free(py);
  }
  g_free(vx);
  g_free(vy);
  em_dataset_free(train);
  em_dataset_free(val);
  em_model_free(m);
  em_spec_free(s);
  const char *names[] = {"case.json", "init.safetensors", "val-x.bin", "val-y.bin",
                         "result.bin", "grad.bin"};
  for (size_t i = 0; i < G_N_ELEMENTS(names); i++) {
    char *p = g_build_filename(dir, names[i], NULL);
    g_remove(p);
    g_free(p);
  }
  g_remove(p1);
  g_remove(p2);
  g_rmdir(data);
  g_rmdir(dir);
  free(vq);
  json_decref(vj);
  g_free(cj);
  g_free(cpath);
  g_free(init);
  g_free(spec_json);
  g_free(t1);
  g_free(t2);
  g_free(p1);
  g_free(p2);
  g_free(data);
  g_free(dir);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/train/text/torch", test_text_torch);
  return g_test_run();
}
