/* bench-gpt.c: the engine's side of bench-gpt.py: a GPT's training steps
 * (forward, cross-entropy over every position, backward, AdamW) on random
 * token batches, and greedy generation with the KV cache (em_decoder),
 * one sequence at a time. Prints one JSON line:
 *   {"train_tokens_per_sec": median over the timed steps, "gen_tokens_per_sec": ...,
 *    "cpu_kernels": ..., "loss_first", "loss_last"}
 *
 * usage: bench-gpt SPEC BATCH STEPS GEN_TOKENS [THREADS]   (the spec's input is [L] i64) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench-timing.h"
#include "em-cpu.h"
#include "em-nn.h"
#include "em-ops.h"
#include "em-optim.h"
#include "em-pool.h"
#include "em-rng.h"

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: bench-gpt SPEC BATCH STEPS GEN_TOKENS [THREADS]\n");
    return 2;
  }
  int64_t B = atoll(argv[2]);
  int steps = atoi(argv[3]), gen = atoi(argv[4]), threads = argc > 5 ? atoi(argv[5]) : 2;
  em_set_num_threads(threads);
  em_error err = {0};
  em_spec *spec = em_spec_load(argv[1], &err);
  em_model *m = spec ? em_model_new(spec, 1, &err) : NULL;
  if (!m) {
    fprintf(stderr, "bench-gpt: %s\n", err.msg);
    return 1;
  }
  int64_t L, V, out[EM_MAX_DIMS];
  em_spec_input_shape(spec, &L);
  em_spec_output_shape(spec, out);
  V = out[1];
  em_optim_config oc;
  em_optim_config_defaults(&oc, EM_OPTIM_ADAMW);
  oc.lr = 1e-3;
  int np = em_model_param_count(m);
  em_tensor **params = malloc((size_t)np * sizeof *params);
  const char **names = malloc((size_t)np * sizeof *names);
  for (int i = 0; i < np; i++) params[i] = em_model_param(m, i, &names[i]);
  em_optimizer *o = em_optimizer_new(&oc, np, params, names, &err);
  int64_t *x = malloc((size_t)(B * L) * sizeof *x), *y = malloc((size_t)(B * L) * sizeof *y);
  em_rng r;
  em_rng_seed(&r, 3);
  double *t = malloc((size_t)steps * sizeof *t), first = 0, last = 0;
  for (int s = -2; s < steps; s++) { /* two warm-up steps */
    for (int64_t k = 0; k < B * L; k++) {
      x[k] = (int64_t)(em_rng_next(&r) % (uint64_t)V);
      y[k] = (x[k] + 1) % V;
    }
    double t0 = bench_now_s();
    em_scope *sc = em_scope_begin();
    int64_t xs[2] = {B, L}, ys[1] = {B * L}, flat[2] = {B * L, V};
    em_tensor *logits = em_model_forward(m, em_from_data(EM_DTYPE_I64, 2, xs, x), true, NULL, &err);
    if (!logits) {
      fprintf(stderr, "bench-gpt: %s\n", err.msg);
      return 1;
    }
    em_tensor *loss = em_cross_entropy(em_reshape(logits, 2, flat),
                                       em_from_data(EM_DTYPE_I64, 1, ys, y), 0);
    double lv = em_tensor_item(loss);
    em_optimizer_zero_grad(o);
    em_backward(loss);
    em_optimizer_step(o);
    em_scope_end(sc);
    if (s >= 0) t[s] = bench_now_s() - t0;
    if (s == 0) first = lv;
    last = lv;
  }
  double train = (double)(B * L) / bench_median(t, steps);
  /* generation: a 16-token prompt, then gen tokens one at a time */
  double gen_rate = 0;
  if (gen > 0) {
    int64_t total = 16 + gen <= L ? 16 + gen : L;
    em_decoder *d = em_decoder_new(m, 1, total, &err);
    if (!d) {
      fprintf(stderr, "bench-gpt: %s\n", err.msg);
      return 1;
    }
    int64_t prompt[16];
    for (int k = 0; k < 16; k++) prompt[k] = k % V;
    em_scope *sc = em_scope_begin();
    int64_t ps[2] = {1, 16};
    em_tensor *lg = em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, ps, prompt), &err);
    int64_t next = em_sample_token(em_f32(lg), V, NULL, NULL);
    em_scope_end(sc);
    double t0 = bench_now_s();
    int64_t made = 0;
    while (em_decoder_position(d) < total) {
      sc = em_scope_begin();
      int64_t one[2] = {1, 1};
      lg = em_decoder_step(d, em_from_data(EM_DTYPE_I64, 2, one, &next), &err);
      if (!lg) {
        fprintf(stderr, "bench-gpt: %s\n", err.msg);
        return 1;
      }
      next = em_sample_token(em_f32(lg), V, NULL, NULL);
      em_scope_end(sc);
      made++;
    }
    gen_rate = (double)made / (bench_now_s() - t0);
    em_decoder_free(d);
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("{\"train_tokens_per_sec\":%.1f,\"gen_tokens_per_sec\":%.1f,\"cpu_kernels\":\"%s\","
         "\"loss_first\":%.5f,\"loss_last\":%.5f,\"peak_rss_mb\":%.1f}\n",
         train, gen_rate, em_cpu_kernels_active(), first, last, ru.ru_maxrss / 1024.0);
  em_optimizer_free(o);
  em_model_free(m);
  em_spec_free(spec);
  return 0;
}
