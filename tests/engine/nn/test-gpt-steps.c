/* test-gpt-steps.c: ten AdamW steps of a small GPT (token and learned
 * positional embeddings, two pre-norm causal GELU encoder layers, a final
 * LayerNorm, the head tied to the token embedding) from the same initial
 * weights and on the same token batches as PyTorch 1.13
 * (gpt-steps-ref.py): every step's loss within 1e-4.
 *
 * The bound: the losses are means of ~64 f32 cross-entropies of order 3;
 * the two libraries sum the same terms in other orders (GEMM blocking, the
 * attention's tiles), a few ulp per op, which AdamW's early steps (its
 * update is lr * m / sqrt(v), near lr in size whatever the gradient's
 * scale) carry forward without amplifying; 1e-4 is 30 ulp of the loss,
 * well above that and well below the 1e-2 a step moves it. Skips when
 * PyTorch cannot be imported. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "em-nn.h"
#include "em-ops.h"
#include "em-optim.h"
#include "em-rng.h"
#include "em-train.h"

#define STEPS 10
#define N 4
#define L 12
#define V 23

static const char *spec_json =
    "{\"name\": \"gpt-steps\", \"input\": {\"shape\": [12], \"dtype\": \"i64\"}, \"nodes\": ["
    " {\"name\": \"tok\", \"type\": \"Embedding\", \"num_embeddings\": 23, \"embedding_dim\": 32,"
    "  \"init_std\": 0.02},"
    " {\"name\": \"pos\", \"type\": \"PositionalEmbedding\", \"max_len\": 16, \"init_std\": 0.02},"
    " {\"name\": \"layers\", \"repeat\": 2, \"nodes\": [{\"name\": \"b\","
    "  \"type\": \"TransformerEncoderLayer\", \"nhead\": 4, \"dim_feedforward\": 64,"
    "  \"dropout\": 0.0, \"norm_first\": true, \"causal\": true, \"activation\": \"gelu\"}]},"
    " {\"name\": \"ln\", \"type\": \"LayerNorm\"},"
    " {\"name\": \"head\", \"type\": \"Linear\", \"out_features\": 23, \"bias\": false,"
    "  \"tie_weight\": \"tok\"}]}";

static int run_reference(const char *dir) {
  const char *root = g_getenv("EMBER_SOURCE_ROOT");
  if (!root || !g_file_test("/usr/bin/python3", G_FILE_TEST_IS_EXECUTABLE)) return 77;
  char *script = g_build_filename(root, "tests", "engine", "nn", "gpt-steps-ref.py", NULL);
  char *argv[] = {"/usr/bin/python3", script, (char *)dir, NULL};
  int status = 0;
  char *err_out = NULL;
  GError *error = NULL;
  if (!g_spawn_sync(NULL, argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, NULL, &err_out, &status,
                    &error))
    g_error("cannot run the reference: %s", error->message);
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  if (rc && rc != 77) g_printerr("%s", err_out);
  g_free(err_out);
  g_free(script);
  return rc;
}

static void test_adamw_steps(void) {
  char *dir = g_dir_make_tmp("ember-gpt-steps-XXXXXX", NULL);
  em_error err = {0};
  em_spec *s = em_spec_parse(spec_json, "gpt.json", &err);
  g_assert_nonnull(s);
  em_model *m = em_model_new(s, 11, &err);
  g_assert_nonnull(m);
  char *init = g_build_filename(dir, "init.safetensors", NULL);
  g_assert_cmpint(em_model_save(m, init, &err), ==, EM_OK);
  /* the token batches: steps x (N, L + 1), targets the shift; sequences
   * that count up from a random start, so there is something to learn */
  static int64_t tok[STEPS][N][L + 1];
  em_rng r;
  em_rng_seed(&r, 5);
  for (int t = 0; t < STEPS; t++)
    for (int i = 0; i < N; i++) {
      int64_t start = (int64_t)(em_rng_next(&r) % V);
      for (int j = 0; j <= L; j++) tok[t][i][j] = (start + j) % V;
    }
  char *tpath = g_build_filename(dir, "tokens.bin", NULL);
  g_assert_true(g_file_set_contents(tpath, (const char *)tok, sizeof tok, NULL));
  em_optim_config oc;
  em_optim_config_defaults(&oc, EM_OPTIM_ADAMW);
  oc.lr = 3e-3;
  oc.beta1 = 0.9;
  oc.beta2 = 0.95;
  oc.weight_decay = 0.1;
  char *cj = g_strdup_printf("{\"spec\": %s, \"steps\": %d, \"batch\": %d, \"length\": %d, "
                             "\"adamw\": {\"lr\": %.17g, \"betas\": [%.17g, %.17g], \"eps\": %.17g, "
                             "\"weight_decay\": %.17g}}",
                             spec_json, STEPS, N, L, oc.lr, oc.beta1, oc.beta2, oc.eps,
                             oc.weight_decay);
  char *cpath = g_build_filename(dir, "case.json", NULL);
  g_assert_true(g_file_set_contents(cpath, cj, -1, NULL));

  int np = em_model_param_count(m);
  em_tensor **params = g_new(em_tensor *, np);
  const char **names = g_new(const char *, np);
  for (int i = 0; i < np; i++) params[i] = em_model_param(m, i, &names[i]);
  em_optimizer *o = em_optimizer_new(&oc, np, params, names, &err);
  g_assert_nonnull(o);
  double losses[STEPS];
  for (int t = 0; t < STEPS; t++) {
    em_scope *sc = em_scope_begin();
    int64_t x[N][L], y[N * L];
    for (int i = 0; i < N; i++)
      for (int j = 0; j < L; j++) x[i][j] = tok[t][i][j], y[i * L + j] = tok[t][i][j + 1];
    int64_t xs[2] = {N, L}, ys[1] = {N * L}, flat[2] = {N * L, V};
    em_tensor *logits = em_model_forward(m, em_from_data(EM_DTYPE_I64, 2, xs, x), true, NULL, &err);
    g_assert_nonnull(logits);
    em_tensor *loss = em_cross_entropy(em_reshape(logits, 2, flat),
                                       em_from_data(EM_DTYPE_I64, 1, ys, y), 0);
    losses[t] = em_tensor_item(loss);
    em_optimizer_zero_grad(o);
    em_backward(loss);
    em_optimizer_step(o);
    em_scope_end(sc);
  }
  int rc = run_reference(dir);
  if (rc == 77) {
    g_test_skip("PyTorch is not importable by /usr/bin/python3");
  } else {
    g_assert_cmpint(rc, ==, 0);
    char *lpath = g_build_filename(dir, "losses.bin", NULL), *raw = NULL;
    gsize len = 0;
    g_assert_true(g_file_get_contents(lpath, &raw, &len, NULL));
    g_assert_cmpint(len, ==, sizeof losses);
    const double *want = (const double *)raw;
    for (int t = 0; t < STEPS; t++) {
      if (g_test_verbose()) g_printerr("step %d: ember %.7f torch %.7f\n", t, losses[t], want[t]);
      g_assert_cmpfloat(fabs(losses[t] - want[t]), <=, 1e-4);
    }
    g_assert_cmpfloat(losses[STEPS - 1], <, losses[0]); /* it learns */
    g_free(raw);
    g_free(lpath);
  }
  em_optimizer_free(o);
  g_free(params);
  g_free(names);
  em_model_free(m);
  em_spec_free(s);
  g_free(cj);
  g_free(cpath);
  g_free(tpath);
  g_free(init);
  g_free(dir);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/nn/gpt-steps/adamw-10", test_adamw_steps);
  return g_test_run();
}
