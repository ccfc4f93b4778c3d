/* bench-quant.c: the engine's side of bench-quant.py: fmnist-mlp's
 * forward (inference, no grad) in f32 and with int8 Linear layers, at
 * batch 1 (latency) and larger batches (throughput), the median over
 * repetitions. Prints one JSON object per line: first which kernels run,
 *   {"cpu_isa": level in force, "cpu_kernels": f32 kernel set, "describe": ...}
 * (EMBER_CPU_ISA caps both), then
 *   {"mode": "f32" | "int8", "kernel": ..., "batch": B, "ms": median ms per forward}
 * Every int8 kernel this CPU runs is timed (the best one, "default": true,
 * is what em_model_quantize picks).
 *
 * usage: bench-quant SPEC [THREADS [REPS [cpu|wall]]]   (defaults 2, 31, wall)
 * BENCH_QUANT_BATCHES=1,128 times only those batches (to profile one).
 *
 * With "cpu" the times are the calling thread's CPU time: on a machine
 * shared with other jobs, a 1-thread run then measures the work itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-timing.h"
#include "em-cpu.h"
#include "em-nn.h"
#include "em-pool.h"
#include "em-quant.h"

/* Median ms of one forward at batch n: reps samples, each the mean of
 * enough calls to last about a millisecond. */
static double time_forward(em_model *m, const float *x, int64_t n, int reps) {
  int64_t shape[4] = {n, 1, 28, 28};
  bool prev = em_no_grad_begin();
  em_error err = {0};
  int calls = n == 1 ? 200 : n <= 32 ? 40 : 8;
  double *t = malloc((size_t)reps * sizeof *t);
  for (int r = -2; r < reps; r++) { /* two warm-up samples */
    double t0 = bench_now_s();
    for (int c = 0; c < calls; c++) {
      em_scope *s = em_scope_begin();
      em_tensor *xt = em_tensor_wrap(EM_DTYPE_F32, 4, shape, (void *)x);
      if (!em_model_forward(m, xt, false, NULL, &err)) {
        fprintf(stderr, "bench-quant: forward: %s\n", err.msg);
        exit(1);
      }
      em_scope_end(s);
    }
    if (r >= 0) t[r] = (bench_now_s() - t0) / calls * 1e3;
  }
  em_grad_mode_restore(prev);
  qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
  double med = t[reps / 2];
  free(t);
  return med;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench-quant SPEC [THREADS [REPS]]\n");
    return 2;
  }
  int threads = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 31;
  if (threads < 1 || reps < 1) {
    fprintf(stderr, "bench-quant: THREADS and REPS must be positive\n");
    return 2;
  }
  if (argc > 4 && !strcmp(argv[4], "cpu")) bench_clock_id = CLOCK_THREAD_CPUTIME_ID;
  em_set_num_threads(threads);
  em_error err = {0};
  em_spec *spec = em_spec_load(argv[1], &err);
  em_model *m = spec ? em_model_new(spec, 1, &err) : NULL;
  if (!m) {
    fprintf(stderr, "bench-quant: %s\n", err.msg);
    return 1;
  }
  /* BENCH_QUANT_BATCHES=1,128 times only those (e.g. to profile one) */
  int64_t batches[8] = {1, 128, 256};
  size_t n_batches = 3;
  const char *only = getenv("BENCH_QUANT_BATCHES");
  if (only && *only) {
    n_batches = 0;
    for (char *e; *only && n_batches < 8; only = *e ? e + 1 : e) {
      long v = strtol(only, &e, 10);
      if (e == only || v < 1 || v > 256) {
        fprintf(stderr, "bench-quant: BENCH_QUANT_BATCHES: batches of 1 to 256, by commas\n");
        return 2;
      }
      batches[n_batches++] = v;
    }
  }
  char kinfo[256];
  em_cpu_kernels_describe(kinfo, sizeof kinfo);
  /* which kernels run: the f32 set (and the level in force), the int8 one per row below */
  printf("{\"cpu_isa\":\"%s\",\"cpu_kernels\":\"%s\",\"describe\":\"%s\"}\n",
         em_cpu_isa_name(em_cpu_isa_active()), em_cpu_kernels_active(), kinfo);
  float *x = malloc(256 * 784 * sizeof *x);
  srand(7);
  for (int i = 0; i < 256 * 784; i++) x[i] = (float)rand() / (float)RAND_MAX;
  for (size_t b = 0; b < n_batches; b++)
    printf("{\"mode\":\"f32\",\"kernel\":\"f32\",\"default\":true,\"batch\":%lld,\"ms\":%.5f}\n",
           (long long)batches[b], time_forward(m, x, batches[b], reps));
  /* int8 with each kernel, the default (best) one first */
  const char *kernels[] = {NULL, "avx512bw", "avx2", "sse2", "scalar"};
  for (int k = 0; k < 5; k++) {
    if (kernels[k]) setenv("EMBER_QUANT_KERNEL", kernels[k], 1);
    em_quant_report rep;
    if (em_model_quantize(m, EM_QUANT_INT8_DYNAMIC, &rep, &err) != EM_OK) {
      fprintf(stderr, "bench-quant: %s (skipped)\n", err.msg);
      continue;
    }
    for (size_t b = 0; b < n_batches; b++) {
      if (!strcmp(rep.kernel, "scalar") && batches[b] > 128) continue; /* slow, and known */
      printf("{\"mode\":\"int8\",\"kernel\":\"%s\",\"default\":%s,\"batch\":%lld,\"ms\":%.5f}\n",
             rep.kernel, k == 0 ? "true" : "false", (long long)batches[b],
             time_forward(m, x, batches[b], reps));
    }
    fflush(stdout);
  }
  em_model_free(m);
  em_spec_free(spec);
  free(x);
  return 0;
}
