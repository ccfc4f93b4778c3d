/* cmd-generate.c: `ember generate MODEL --prompt TEXT --tokens N`: text
 * from a language model (a SPEC with --weights, or NAME@ALIAS), through
 * the KV-cache decoder (em_decoder_*) and the sampler (em_sample_token),
 * encoded and decoded by the tokenizer its spec keeps (em_generate,
 * engine/nn/generate.c, which the server's generate endpoint runs too).
 *
 * The text goes to stdout as it is made (the prompt, then each token's
 * bytes; a newline at the end); a line of figures to stderr. */
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

/* Each token's text to stdout as it is made. */
static bool put_text(void *user, const char *text, int n) {
  (void)user;
  fwrite(text, 1, (size_t)n, stdout);
  fflush(stdout);
  return true;
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
  em_generate_stats gs;
  fwrite(prompt, 1, strlen(prompt), stdout);
  em_status st = em_generate(m.model, prompt, strlen(prompt), "--prompt", n_new, &sp, &rng,
                             put_text, NULL, &gs, &err);
  fputc('\n', stdout);
  fflush(stdout);
  if (st != EM_OK) {
    /* the prompt or the model is the user's choice: a usage mistake */
    cli_fail(&err, m.label);
    rc = err.status == EM_ERR_INVALID || err.status == EM_ERR_FORMAT ? CLI_EXIT_USAGE : 1;
    goto out;
  }
  fprintf(stderr, "ember: %lld tokens in %.2f s (%.1f tokens/s after a prompt of %lld tokens in "
          "%.3f s)\n", (long long)gs.tokens, gs.prompt_s + gs.generate_s,
          gs.generate_s > 0 ? (double)gs.tokens / gs.generate_s : 0.0,
          (long long)gs.prompt_tokens, gs.prompt_s);
out:
  cli_model_close(&m);
  return rc;
}
