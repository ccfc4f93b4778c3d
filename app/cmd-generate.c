/* cmd-generate.c: `ember generate MODEL --prompt TEXT --tokens N`: text
 * from a language model (a SPEC with --weights, or NAME@ALIAS), through
 * the KV-cache decoder (em_decoder_*) and the sampler (em_sample_token),
 * encoded and decoded by the tokenizer its spec keeps.
 *
 * The text goes to stdout as it is made (the prompt, then each token's
 * bytes; a newline at the end); a line of figures to stderr. The model
 * sees at most its input's length L of context: when a sequence reaches
 * L positions, the decoder starts again from the last L / 2 tokens (one
 * forward over them), so a long generation costs a re-read every L / 2
 * tokens instead of a whole forward per token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-model.h"
#include "em-data.h"
#include "em-pool.h"
#include "em-rng.h"

typedef struct {
  em_decoder *dec;
  int64_t V;     /* the tokenizer's ids: the logits past them are never drawn */
  float *logits; /* (V) of the last position run */
} gen_state;

/* Runs ids [0, n) at the decoder's next positions; the last one's logits
 * into g->logits. */
static em_status feed(gen_state *g, const int32_t *ids, int64_t n, em_error *err) {
  em_scope *s = em_scope_begin();
  int64_t shape[2] = {1, n};
  em_tensor *t = em_empty(EM_DTYPE_I64, 2, shape); /* (1, T) */
  for (int64_t i = 0; i < n; i++) em_i64(t)[i] = ids[i];
  em_tensor *y = em_decoder_step(g->dec, t, err); /* (1, V_out) */
  if (y) memcpy(g->logits, em_f32(y), sizeof(float) * (size_t)g->V);
  em_scope_end(s);
  return y ? EM_OK : (err && err->status != EM_OK ? err->status : EM_ERR_INVALID);
}

static void put_token(const em_tokenizer *tok, int64_t id) {
  char b[4];
  int n = em_tokenizer_decode(tok, id, b);
  fwrite(b, 1, (size_t)n, stdout);
  fflush(stdout);
}

int cli_cmd_generate(int argc, char **argv) {
  const char *weights = NULL, *registry = NULL, *prompt = NULL, *tokens = "200",
             *temperature = "1", *top_k = "0", *top_p = "1", *seed = "0", *threads = NULL;
  const char *pos[1];
  const cli_opt opts[] = {{"weights", &weights, NULL},         {"registry", &registry, NULL},
                          {"prompt", &prompt, NULL},           {"tokens", &tokens, NULL},
                          {"temperature", &temperature, NULL}, {"top-k", &top_k, NULL},
                          {"top-p", &top_p, NULL},             {"seed", &seed, NULL},
                          {"threads", &threads, NULL},         {0}};
  cli_parse_args(argc, argv, 2, opts, pos, 1, 1, "generate");
  if (!prompt) cli_die_usage("generate: give --prompt TEXT (at least one token to start from)");
  int64_t n_new = cli_parse_int("--tokens", tokens, 0, 1000000);
  em_sample_params sp = {cli_parse_num("--temperature", temperature, 0, 100),
                         cli_parse_int("--top-k", top_k, 0, EM_DATASET_MAX_TOKEN),
                         cli_parse_num("--top-p", top_p, 0, 1)};
  em_rng rng;
  em_rng_seed(&rng, (uint64_t)cli_parse_int("--seed", seed, 0, INT64_MAX));
  em_set_num_threads(threads ? (int)cli_parse_int("--threads", threads, 1, 1024)
                             : cli_usable_cores());

  cli_model m;
  int rc = cli_model_open(pos[0], weights, registry, &m);
  if (rc) return rc;
  em_error err = {0};
  const em_tokenizer *tok = em_spec_tokenizer(m.spec);
  int64_t in[EM_MAX_DIMS] = {0};
  em_spec_input_shape(m.spec, in); /* [L]: the longest context it trained with */
  int64_t L = in[0];
  gen_state g = {0};
  int32_t *ids = NULL;
  if (!tok || em_tokenizer_vocab_size(tok) == 0) {
    fprintf(stderr, "ember: %s has no tokenizer%s: generation decodes ids with the one its spec "
            "keeps (\"tokenizer\")\n", m.label, tok ? " vocabulary" : "");
    rc = CLI_EXIT_USAGE;
    goto out;
  }
  g.V = em_tokenizer_vocab_size(tok);
  size_t np = strlen(prompt), n_prompt = 0;
  int64_t cap = (int64_t)np + n_new;
  ids = cli_xmalloc(sizeof *ids * (size_t)(cap > 0 ? cap : 1));
  g.logits = cli_xmalloc(sizeof *g.logits * (size_t)g.V);
  if (em_tokenizer_encode(tok, prompt, np, "--prompt", ids, &n_prompt, &err) != EM_OK) {
    cli_fail(&err, NULL);
    rc = CLI_EXIT_USAGE; /* the prompt is the user's: bad usage */
    goto out;
  }
  if (n_prompt == 0) {
    fprintf(stderr, "ember: generate: --prompt is empty: give at least one token to start from\n");
    rc = CLI_EXIT_USAGE;
    goto out;
  }
  if (!(g.dec = em_decoder_new(m.model, 1, L, &err))) {
    rc = cli_fail(&err, m.label);
    goto out;
  }
  double t0 = cli_mono_now();
  int64_t n = (int64_t)n_prompt, start = n > L ? n - L : 0; /* the context the model can see */
  em_status st = feed(&g, ids + start, n - start, &err);
  fwrite(prompt, 1, np, stdout);
  double t1 = cli_mono_now();
  for (int64_t k = 0; st == EM_OK && k < n_new; k++) {
    int64_t id = em_sample_token(g.logits, g.V, &sp, &rng);
    put_token(tok, id);
    ids[n++] = (int32_t)id;
    if (k + 1 == n_new) break;
    if (em_decoder_position(g.dec) < L) {
      st = feed(&g, ids + n - 1, 1, &err);
    } else { /* full: again from the last L / 2 tokens */
      em_decoder_reset(g.dec);
      int64_t keep = L / 2 > 0 ? L / 2 : 1;
      st = feed(&g, ids + n - keep, keep, &err);
    }
  }
  fputc('\n', stdout);
  fflush(stdout);
  if (st != EM_OK) {
    rc = cli_fail(&err, m.label);
    goto out;
  }
  double t2 = cli_mono_now();
  fprintf(stderr, "ember: %lld tokens in %.2f s (%.1f tokens/s after a prompt of %zu tokens in "
          "%.3f s)\n", (long long)n_new, t2 - t0, t2 > t1 ? (double)n_new / (t2 - t1) : 0.0,
          n_prompt, t1 - t0);
out:
  em_decoder_free(g.dec);
  free(g.logits);
  free(ids);
  cli_model_close(&m);
  return rc;
}
