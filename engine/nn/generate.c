/* generate.c: text from a language model (em-nn.h's em_generate): the
 * prompt encoded by the model's tokenizer, one KV-cache decoder, the
 * sampler, each new token's text handed to a sink as it is made. What
 * `ember generate` and the server's generate endpoint share.
 *
 * The model sees at most its input's length L of context: a prompt
 * longer than L is cut to its last L tokens, and when a sequence reaches
 * L positions the decoder starts again from its last L / 2 tokens (one
 * forward over them), so a long generation costs a re-read every L / 2
 * tokens instead of a whole forward per token. */
#include "nn-private.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-data.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Runs ids [0, n) at the decoder's next positions; the last one's logits
 * into logits (V). */
static em_status feed(em_decoder *dec, int64_t V, const int32_t *ids, int64_t n, float *logits,
                      em_error *err) {
  em_scope *s = em_scope_begin();
  int64_t shape[2] = {1, n};
  em_tensor *t = em_empty(EM_DTYPE_I64, 2, shape); /* (1, T) */
  for (int64_t i = 0; i < n; i++) em_i64(t)[i] = ids[i];
  em_tensor *y = em_decoder_step(dec, t, err); /* (1, V_out) */
  if (y) memcpy(logits, em_f32(y), sizeof(float) * (size_t)V);
  em_scope_end(s);
  return y ? EM_OK : (err && err->status != EM_OK ? err->status : EM_ERR_INVALID);
}

em_status em_generate(em_model *m, const char *prompt, size_t prompt_len, const char *source,
                      int64_t n_new,
                      const em_sample_params *sp, em_rng *rng, em_generate_sink sink, void *user,
                      em_generate_stats *stats, em_error *err) {
  const em_spec *spec = em_model_spec(m);
  const em_tokenizer *tok = em_spec_tokenizer(spec);
  memset(stats, 0, sizeof *stats);
  if (!tok || em_tokenizer_vocab_size(tok) == 0)
    return em_error_set(err, EM_ERR_INVALID, "'%s' has no tokenizer%s: generation encodes and "
                        "decodes text with the one its spec keeps (\"tokenizer\")",
                        em_spec_name(spec), tok ? " vocabulary" : "");
  int64_t in[EM_MAX_DIMS] = {0};
  em_spec_input_shape(spec, in); /* [L]: the longest context it trained with */
  int64_t L = in[0], V = em_tokenizer_vocab_size(tok);
  int64_t cap = (int64_t)prompt_len + n_new;
  int32_t *ids = malloc(sizeof *ids * (size_t)(cap > 0 ? cap : 1));
  float *logits = malloc(sizeof *logits * (size_t)V);
  em_decoder *dec = NULL;
  size_t n_prompt = 0;
  em_status st = ids && logits ? EM_OK
                               : em_error_set(err, EM_ERR_NOMEM, "out of memory generating");
  if (st == EM_OK) st = em_tokenizer_encode(tok, prompt, prompt_len, source, ids, &n_prompt,
                                           err);
  if (st == EM_OK && n_prompt == 0)
    st = em_error_set(err, EM_ERR_INVALID, "%s is empty: give at least one token to start "
                      "from", source);
  if (st == EM_OK && !(dec = em_decoder_new(m, 1, L, err))) st = err->status;
  double t0 = now_s();
  int64_t n = (int64_t)n_prompt, start = n > L ? n - L : 0; /* the context the model can see */
  if (st == EM_OK) st = feed(dec, V, ids + start, n - start, logits, err);
  stats->prompt_tokens = (int64_t)n_prompt;
  stats->prompt_s = now_s() - t0;
  double t1 = now_s();
  for (int64_t k = 0; st == EM_OK && k < n_new; k++) {
    int64_t id = em_sample_token(logits, V, sp, rng);
    char b[4];
    int nb = em_tokenizer_decode(tok, id, b);
    ids[n++] = (int32_t)id;
    stats->tokens++;
    if (sink && !sink(user, b, nb)) break; /* the sink has enough */
    if (k + 1 == n_new) break;
    if (em_decoder_position(dec) < L) {
      st = feed(dec, V, ids + n - 1, 1, logits, err);
    } else { /* full: again from the last L / 2 tokens */
      em_decoder_reset(dec);
      int64_t keep = L / 2 > 0 ? L / 2 : 1;
      st = feed(dec, V, ids + n - keep, keep, logits, err);
    }
  }
  stats->generate_s = now_s() - t1;
  em_decoder_free(dec);
  free(logits);
  free(ids);
  return st;
}
