/* serve-generate.c: text from a served language model (the generate
 * extension of the Open Inference Protocol, as Triton names it):
 *
 *   POST /v2/models/NAME[/versions/V]/generate
 *     {"id"?, "text_input": "...", "parameters": {"max_tokens": 64,
 *      "temperature": 1, "top_k": 0, "top_p": 1, "seed": 0}}
 *   -> {"model_name", "model_version", "id"?, "text_output", "tokens"}
 *
 * A compute worker runs it alone (serve_job's custom run), through
 * em_generate (engine/nn/generate.c: the spec's tokenizer, a KV-cache
 * decoder, the sampler), the same as `ember generate`: temperature 0 is
 * greedy, and a seed repeats a sample. The prompt and the new text are
 * the tokenizer's; a model without one is refused (400). */
#include "serve-private.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-rng.h"

static bool append(void *user, const char *text, int n) {
  serve_gen *g = user;
  if (g->len + (size_t)n + 1 > g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 256;
    while (cap < g->len + (size_t)n + 1) cap *= 2;
    char *p = realloc(g->out, cap);
    if (!p) return false;
    g->out = p;
    g->cap = cap;
  }
  memcpy(g->out + g->len, text, (size_t)n);
  g->len += (size_t)n;
  g->out[g->len] = '\0';
  return true;
}

static void run(serve_job *j) {
  serve_gen *g = j->user_gen;
  em_error err = {0};
  em_rng rng;
  em_rng_seed(&rng, g->seed);
  g->len = 0;
  em_status st = em_generate(j->model->cm.model, g->prompt, g->prompt_len, "text_input",
                             g->max_tokens, &g->sp, &rng, append, g, &g->stats, &err);
  if (st == EM_OK && g->stats.tokens && !g->out)
    st = em_error_set(&err, EM_ERR_NOMEM, "out of memory for the generated text");
  j->status = st;
  if (st != EM_OK) snprintf(j->error, sizeof j->error, "%s", err.msg);
  j->done(j);
}

static bool number(json_t *p, const char *key, double lo, double hi, double *v, char *msg,
                   size_t cap) {
  json_t *x = json_object_get(p, key);
  if (!x) return true;
  if (!json_is_number(x) || !(json_number_value(x) >= lo && json_number_value(x) <= hi)) {
    snprintf(msg, cap, "parameters.%s must be a number from %g to %g", key, lo, hi);
    return false;
  }
  *v = json_number_value(x);
  return true;
}

int serve_generate_parse(const char *body, size_t len, const serve_model *m, serve_gen *g,
                         char *msg, size_t cap) {
  memset(g, 0, sizeof *g);
  if (!em_spec_tokenizer(m->cm.spec)) {
    snprintf(msg, cap, "model '%s' has no tokenizer: generate is for language models (its "
             "spec's \"tokenizer\"); use infer", m->name);
    return 400;
  }
  json_error_t je;
  json_t *o = json_loadb(body, len, 0, &je);
  const char *text = json_string_value(json_object_get(o, "text_input"));
  json_t *p = json_object_get(o, "parameters"), *id = json_object_get(o, "id");
  int code = 0;
  double max_tokens = 64, temperature = 1, top_k = 0, top_p = 1, seed = 0;
  if (!o) {
    snprintf(msg, cap, "the body is not JSON (line %d: %s)", je.line, je.text);
    code = 400;
  } else if (!text) {
    snprintf(msg, cap, "generate takes {\"text_input\": \"...\", \"parameters\": {\"max_tokens\": "
             "N, \"temperature\": T, \"top_k\": K, \"top_p\": P, \"seed\": S}}");
    code = 400;
  } else if ((p && !json_is_object(p)) || (id && !json_is_string(id))) {
    snprintf(msg, cap, "\"parameters\" must be an object and \"id\" a string");
    code = 400;
  } else if (!number(p, "max_tokens", 0, SERVE_GENERATE_MAX_TOKENS, &max_tokens, msg, cap) ||
             !number(p, "temperature", 0, 100, &temperature, msg, cap) ||
             !number(p, "top_k", 0, 1 << 30, &top_k, msg, cap) ||
             !number(p, "top_p", 0, 1, &top_p, msg, cap) ||
             !number(p, "seed", 0, 9007199254740992.0, &seed, msg, cap)) {
    code = 400;
  } else if (max_tokens != floor(max_tokens) || top_k != floor(top_k) || seed != floor(seed)) {
    snprintf(msg, cap, "parameters.max_tokens, top_k and seed are whole numbers");
    code = 400;
  }
  if (!code) {
    g->prompt_len = strlen(text);
    g->prompt = malloc(g->prompt_len + 1);
    g->id = id ? strdup(json_string_value(id)) : NULL;
    if (!g->prompt || (id && !g->id)) {
      snprintf(msg, cap, "out of memory");
      code = 500;
    } else {
      memcpy(g->prompt, text, g->prompt_len + 1);
      g->max_tokens = (int64_t)max_tokens;
      g->sp = (em_sample_params){temperature, (int64_t)top_k, top_p};
      g->seed = (uint64_t)seed;
    }
  }
  json_decref(o);
  if (code) serve_gen_clear(g);
  return code;
}

void serve_gen_clear(serve_gen *g) {
  free(g->prompt);
  free(g->out);
  free(g->id);
  memset(g, 0, sizeof *g);
}

void serve_generate_job(serve_job *j, serve_model *m, serve_gen *g, serve_job_done_fn done,
                        void *user) {
  *j = (serve_job){.model = m, .rows = 0, .custom = run, .user_gen = g, .done = done,
                   .user = user};
}

char *serve_generate_format(const serve_model *m, const serve_gen *g, size_t *len) {
  json_t *o = json_pack("{s:s, s:s}", "model_name", m->name, "model_version", m->version);
  if (g->id) json_object_set_new(o, "id", json_string(g->id));
  json_object_set_new(o, "text_output", json_stringn(g->out ? g->out : "", g->len));
  json_object_set_new(o, "tokens", json_integer(g->stats.tokens));
  char *txt = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (txt) *len = strlen(txt);
  return txt;
}
