/* test-decode.c: generation with a KV cache (em_decoder) against full
 * recomputation. The reference runs the model's ordinary forward on the
 * whole sequence so far, padded to the spec's length (a causal model's
 * logits at position t do not depend on what comes after t), and takes
 * the logits at the last real position; greedy decoding must give exactly
 * the same tokens, and the logits agree to f32 rounding.
 *
 * The bound: each logit is a sum over D = 16 products after two encoder
 * layers; the cached and the full paths add the same terms but the
 * attention's sums over keys in different tile orders, a few ulp per
 * layer at values of order 1: 1e-5 absolute is well above that and far
 * below the logits' gaps greedy decoding depends on (checked: the argmax
 * margin of every step exceeds it). */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "em-nn.h"
#include "em-ops.h"
#include "em-rng.h"

#define V 13
#define L 24

static const char *gpt_spec =
    "{\"name\": \"tiny-gpt\", \"input\": {\"shape\": [24], \"dtype\": \"i64\"}, \"nodes\": ["
    " {\"name\": \"tok\", \"type\": \"Embedding\", \"num_embeddings\": 13, \"embedding_dim\": 16},"
    " {\"name\": \"pos\", \"type\": \"PositionalEmbedding\", \"max_len\": 24},"
    " {\"name\": \"layers\", \"repeat\": 2, \"nodes\": [{\"name\": \"b\","
    "  \"type\": \"TransformerEncoderLayer\", \"nhead\": 2, \"dim_feedforward\": 32,"
    "  \"dropout\": 0.1, \"norm_first\": true, \"causal\": true, \"activation\": \"gelu\"}]},"
    " {\"name\": \"ln\", \"type\": \"LayerNorm\"},"
    " {\"name\": \"head\", \"type\": \"Linear\", \"out_features\": 13, \"bias\": false,"
    "  \"tie_weight\": \"tok\"}]}";

static em_model *new_model(const char *text) {
  em_error err = {0};
  em_spec *s = em_spec_parse(text, "gpt.json", &err);
  if (!s) g_error("%s", err.msg);
  em_model *m = em_model_new(s, 7, &err);
  if (!m) g_error("%s", err.msg);
  em_spec_free(s);
  return m;
}

/* The logits (V) after seq[0..t) by the full forward, padded with 0s. */
static void full_logits(em_model *m, const int64_t *seq, int t, float *out) {
  em_scope *sc = em_scope_begin();
  int64_t padded[L] = {0}, shape[2] = {1, L};
  memcpy(padded, seq, (size_t)t * sizeof *seq);
  em_error err = {0};
  bool prev = em_no_grad_begin();
  em_tensor *y = em_model_forward(m, em_from_data(EM_DTYPE_I64, 2, shape, padded), false, NULL, &err);
  em_grad_mode_restore(prev);
  if (!y) g_error("%s", err.msg);
  y = em_contiguous(y); /* (1, L, V) */
  memcpy(out, em_f32(y) + (int64_t)(t - 1) * V, V * sizeof *out);
  em_scope_end(sc);
}

static int argmax(const float *x, float *margin) {
  int best = 0;
  for (int k = 1; k < V; k++)
    if (x[k] > x[best]) best = k;
  float second = -INFINITY;
  for (int k = 0; k < V; k++)
    if (k != best && x[k] > second) second = x[k];
  *margin = x[best] - second;
  return best;
}

static void test_greedy_matches_full(void) {
  em_model *m = new_model(gpt_spec);
  em_error err = {0};
  em_decoder *d = em_decoder_new(m, 1, L, &err);
  g_assert_nonnull(d);
  for (int round = 0; round < 2; round++) { /* the second after a reset */
    int64_t seq[L] = {3, 1, 4};
    int n = 3;
    float cached[V], full[V], margin;
    em_scope *sc = em_scope_begin();
    int64_t shape[2] = {1, n};
    em_tensor *lg = em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, shape, seq), &err);
    g_assert_nonnull(lg);
    memcpy(cached, em_f32(lg), sizeof cached);
    em_scope_end(sc);
    while (n < L) {
      full_logits(m, seq, n, full);
      for (int k = 0; k < V; k++) g_assert_cmpfloat(fabsf(cached[k] - full[k]), <=, 1e-5f);
      int a = argmax(cached, &margin), b = argmax(full, &margin);
      g_assert_cmpint(a, ==, b);
      g_assert_cmpfloat(margin, >, 1e-5f);
      seq[n++] = a;
      if (n == L) break;
      sc = em_scope_begin();
      int64_t one[2] = {1, 1};
      lg = em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, one, &seq[n - 1]), &err);
      if (!lg) g_error("%s", err.msg);
      memcpy(cached, em_f32(lg), sizeof cached);
      em_scope_end(sc);
    }
    g_assert_cmpint(em_decoder_position(d), ==, L - 1);
    /* past the length it was set up for: an error, nothing cached */
    sc = em_scope_begin();
    int64_t two[2] = {1, 2};
    g_assert_null(em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, two, seq), &err));
    g_assert_nonnull(strstr(err.msg, "would pass the 24"));
    g_assert_cmpint(em_decoder_position(d), ==, L - 1);
    em_scope_end(sc);
    em_decoder_reset(d);
  }
  em_decoder_free(d);
  em_model_free(m);
}

/* Two sequences at once: each as if alone. */
static void test_batch(void) {
  em_model *m = new_model(gpt_spec);
  em_error err = {0};
  em_decoder *d = em_decoder_new(m, 2, 8, &err), *d1 = em_decoder_new(m, 1, 8, &err);
  int64_t both[2][4] = {{5, 6, 7, 8}, {12, 0, 2, 9}};
  em_scope *sc = em_scope_begin();
  int64_t shape[2] = {2, 4}, one[2] = {1, 4};
  em_tensor *lg = em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, shape, both), &err);
  em_tensor *l1 = em_decoder_step(d1, em_from_data(EM_DTYPE_I64, 2, one, both[1]), &err);
  g_assert_nonnull(lg);
  g_assert_nonnull(l1);
  for (int k = 0; k < V; k++)
    g_assert_cmpfloat(fabsf(em_f32(lg)[V + k] - em_f32(l1)[k]), <=, 1e-5f);
  em_scope_end(sc);
  em_decoder_free(d);
  em_decoder_free(d1);
  em_model_free(m);
}

static void test_errors(void) {
  em_model *m = new_model(gpt_spec);
  em_error err = {0};
  em_decoder *d = em_decoder_new(m, 1, 40, &err); /* longer than the positions */
  em_scope *sc = em_scope_begin();
  int64_t bad[3] = {1, 13, 2}, shape[2] = {1, 3};
  g_assert_null(em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, shape, bad), &err));
  g_assert_nonnull(strstr(err.msg, "index 13 at position 1 is outside [0, 13)"));
  int64_t many[30] = {0}, s30[2] = {1, 30};
  g_assert_null(em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, s30, many), &err));
  g_assert_nonnull(strstr(err.msg, "longer than max_len 24"));
  int64_t s20[2] = {1, 20}, s5[2] = {1, 5};
  g_assert_nonnull(em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, s20, many), &err));
  g_assert_null(em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, s5, many), &err));
  g_assert_nonnull(strstr(err.msg, "position 24 is past max_len 24"));
  g_assert_cmpint(em_decoder_position(d), ==, 20);
  em_scope_end(sc);
  em_decoder_free(d);
  em_model_free(m);

  /* a model that looks across positions without a step */
  m = new_model("{\"name\": \"c\", \"input\": {\"shape\": [8], \"dtype\": \"i64\"}, \"nodes\": ["
                " {\"name\": \"tok\", \"type\": \"Embedding\", \"num_embeddings\": 5,"
                "  \"embedding_dim\": 4},"
                " {\"name\": \"flat\", \"type\": \"Flatten\"},"
                " {\"name\": \"fc\", \"type\": \"Linear\", \"out_features\": 3}]}");
  g_assert_null(em_decoder_new(m, 1, 8, &err));
  g_assert_nonnull(strstr(err.msg, "node 'flat' (Flatten) looks across positions"));
  em_model_free(m);

  /* attention that is not causal */
  m = new_model("{\"name\": \"nc\", \"input\": {\"shape\": [8], \"dtype\": \"i64\"}, \"nodes\": ["
                " {\"name\": \"tok\", \"type\": \"Embedding\", \"num_embeddings\": 5,"
                "  \"embedding_dim\": 4},"
                " {\"name\": \"attn\", \"type\": \"MultiheadAttention\", \"num_heads\": 2}]}");
  d = em_decoder_new(m, 1, 8, &err);
  g_assert_nonnull(d);
  sc = em_scope_begin();
  int64_t t2[2] = {1, 2}, s2[2] = {1, 2};
  g_assert_null(em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, s2, t2), &err));
  g_assert_nonnull(strstr(err.msg, "node 'attn' (MultiheadAttention): is not causal"));
  em_scope_end(sc);
  em_decoder_free(d);
  em_model_free(m);
}

/* Sampling: frequencies over 20,000 draws within 5 standard deviations
 * of the filtered, renormalised probabilities (sqrt(p (1 - p) / n) is at
 * most 0.0035 here, so 0.018). */
static void test_sampling(void) {
  const float lg[4] = {logf(0.5f), logf(0.3f), logf(0.2f), -INFINITY};
  em_rng r;
  em_rng_seed(&r, 1);
  g_assert_cmpint(em_sample_token(lg, 4, NULL, &r), ==, 0);
  g_assert_cmpint(em_sample_token(lg, 4, &(em_sample_params){0, 0, 1}, &r), ==, 0);
  g_assert_cmpint(em_sample_token(lg, 4, &(em_sample_params){2.0, 1, 1}, &r), ==, 0);
  struct {
    em_sample_params p;
    double want[4];
  } cases[] = {
      {{1.0, 0, 1.0}, {0.5, 0.3, 0.2, 0}},
      {{1.0, 2, 1.0}, {0.625, 0.375, 0, 0}},   /* top-k 2 */
      {{1.0, 0, 0.7}, {0.625, 0.375, 0, 0}},   /* the nucleus reaching 0.7: 0.5 + 0.3 */
      {{1.0, 0, 0.4}, {1, 0, 0, 0}},           /* 0.5 alone reaches it */
  };
  const int n = 20000;
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int count[4] = {0};
    em_rng_seed(&r, 42);
    for (int k = 0; k < n; k++) count[em_sample_token(lg, 4, &cases[c].p, &r)]++;
    for (int k = 0; k < 4; k++)
      g_assert_cmpfloat(fabs((double)count[k] / n - cases[c].want[k]), <=, 0.018);
  }
  /* temperature 2 flattens: p ~ (0.5, 0.3, 0.2)^(1/2), renormalised */
  double z = sqrt(0.5) + sqrt(0.3) + sqrt(0.2);
  int count[4] = {0};
  em_rng_seed(&r, 3);
  for (int k = 0; k < n; k++) count[em_sample_token(lg, 4, &(em_sample_params){2.0, 0, 1}, &r)]++;
  g_assert_cmpfloat(fabs((double)count[0] / n - sqrt(0.5) / z), <=, 0.018);
  g_assert_cmpfloat(fabs((double)count[2] / n - sqrt(0.2) / z), <=, 0.018);
  /* the same seed, the same draws */
  em_rng a, b;
  em_rng_seed(&a, 9);
  em_rng_seed(&b, 9);
  for (int k = 0; k < 100; k++)
    g_assert_cmpint(em_sample_token(lg, 4, &cases[0].p, &a), ==,
                    em_sample_token(lg, 4, &cases[0].p, &b));
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/nn/decode/greedy-matches-full", test_greedy_matches_full);
  g_test_add_func("/engine/nn/decode/batch", test_batch);
  g_test_add_func("/engine/nn/decode/errors", test_errors);
  g_test_add_func("/engine/nn/decode/sampling", test_sampling);
  return g_test_run();
}
