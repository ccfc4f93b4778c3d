/* bench-profile.c: what the op profiler costs. Training steps of the zoo's
 * MLP and CNN (data/models/fmnist-{mlp,cnn}.json) on fixed synthetic
 * batches, with the profiler compiled in but off, and on (records, memory
 * tracking, step marks), and with anomaly mode on; runs of `steps` steps
 * alternate between the modes for `reps` rounds so that drift in the
 * machine's speed hits every mode alike. Prints the median step time of
 * each mode (and its fastest step, the least disturbed by other load on a
 * shared machine) and the overheads against off, and the profiler's cost
 * per record on a tiny op.
 *
 *   bench-profile [--reps N] [--steps N] [--batch N] [--threads N] [MODEL_DIR]
 *
 * Built (with bench-timing.c) with -DBENCH_BASELINE against an engine
 * without the profiler, it times the off mode alone: off against that
 * baseline is the disabled cost. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-cpu.h"
#include "bench-timing.h"
#include "em-ops.h"
#include "em-optim.h"
#include "em-nn.h"
#include "em-pool.h"
#ifndef BENCH_BASELINE
#include "em-profile.h"
#endif

enum { MODE_OFF, MODE_PROFILE, MODE_ANOMALY, N_MODES };
static const char *mode_names[N_MODES] = {"off", "profiler on", "anomaly mode"};

static double now_ms(void) { return 1e3 * bench_now_s(); }

typedef struct {
  em_model *model;
  em_optimizer *opt;
  em_tensor *x, *y; /* persistent batch */
} bench;

static void step(bench *b) {
#ifndef BENCH_BASELINE
  em_profile_step_begin();
#endif
  em_scope *s = em_scope_begin();
  em_error err = {0};
  em_tensor *out = em_model_forward(b->model, b->x, true, NULL, &err);
  if (!out) {
    fprintf(stderr, "bench-profile: %s\n", err.msg);
    exit(1);
  }
  em_backward(em_cross_entropy(out, b->y, 0.0));
  em_scope_end(s);
  em_optimizer_step(b->opt);
  em_optimizer_zero_grad(b->opt);
#ifndef BENCH_BASELINE
  em_profile_step_end();
#endif
}

static void set_mode(int mode) {
#ifndef BENCH_BASELINE
  em_profile_stop();
  em_anomaly_set(mode == MODE_ANOMALY);
  if (mode == MODE_PROFILE) {
    em_error err = {0};
    if (em_profile_start(NULL, &err) != EM_OK) {
      fprintf(stderr, "bench-profile: %s\n", err.msg);
      exit(1);
    }
  }
#else
  (void)mode;
#endif
}

static void run_model(const char *path, int reps, int steps, int batch) {
  em_error err = {0};
  em_spec *spec = em_spec_load(path, &err);
  if (!spec) {
    fprintf(stderr, "bench-profile: %s\n", err.msg);
    exit(1);
  }
  bench b = {0};
  b.model = em_model_new(spec, 1, &err);
  int np = em_model_param_count(b.model);
  em_tensor **params = calloc((size_t)np, sizeof *params);
  for (int i = 0; i < np; i++) params[i] = em_model_param(b.model, i, NULL);
  em_optim_config oc;
  em_optim_config_defaults(&oc, EM_OPTIM_SGD);
  oc.lr = 1e-3;
  b.opt = em_optimizer_new(&oc, np, params, NULL, &err);
  int64_t shape[EM_MAX_DIMS + 1] = {batch};
  int nd = em_spec_input_shape(spec, shape + 1);
  int64_t classes[EM_MAX_DIMS];
  em_spec_output_shape(spec, classes);
  b.x = em_tensor_new(EM_DTYPE_F32, nd + 1, shape, &err);
  b.y = em_tensor_new(EM_DTYPE_I64, 1, shape, &err);
  em_rng rng;
  em_rng_seed(&rng, 5);
  em_init_normal(b.x, 0, 1, &rng);
  for (int64_t i = 0; i < batch; i++) em_i64(b.y)[i] = i % classes[0];

  int modes = 1;
#ifndef BENCH_BASELINE
  modes = N_MODES;
#endif
  double *t[N_MODES];
  for (int m = 0; m < modes; m++) t[m] = calloc((size_t)(reps * steps), sizeof(double));
  for (int i = 0; i < 3; i++) step(&b); /* warm-up: gradients, allocator cache */
  for (int r = 0; r < reps; r++)
    for (int m = 0; m < modes; m++) {
      int mode = (m + r) % modes; /* rotate the order too */
      set_mode(mode);
      for (int i = 0; i < steps; i++) {
        double t0 = now_ms();
        step(&b);
        t[mode][r * steps + i] = now_ms() - t0;
      }
    }
  set_mode(MODE_OFF);
  double med[N_MODES], best[N_MODES];
  for (int m = 0; m < modes; m++) {
    qsort(t[m], (size_t)(reps * steps), sizeof(double), bench_cmp_double);
    med[m] = t[m][reps * steps / 2];
    best[m] = t[m][0];
  }
  /* the median, and the fastest step (least disturbed by other load) */
  printf("%-12s batch %4d:", em_spec_name(spec), batch);
  for (int m = 0; m < modes; m++) {
    printf("  %s %.3f ms", mode_names[m], med[m]);
    if (m) printf(" (%+.1f%%)", 100.0 * (med[m] / med[0] - 1));
  }
  printf("\n%-23s", "  fastest step:");
  for (int m = 0; m < modes; m++) {
    printf("  %s %.3f ms", mode_names[m], best[m]);
    if (m) printf(" (%+.1f%%)", 100.0 * (best[m] / best[0] - 1));
  }
  printf("\n");
  for (int m = 0; m < modes; m++) free(t[m]);
  em_tensor_free(b.x);
  em_tensor_free(b.y);
  em_optimizer_free(b.opt);
  free(params);
  em_model_free(b.model);
  em_spec_free(spec);
}

/* ns per call of a tiny op (relu of 16 values), off and on: the
 * profiler's own cost per record, free of the machine's noise on long
 * steps. */
static void run_tiny_ops(int reps) {
  enum { CALLS = 100000, PER_SCOPE = 500 };
  int modes = 1;
#ifndef BENCH_BASELINE
  modes = 2;
#endif
  double best[2] = {1e30, 1e30};
  int64_t shape[1] = {16};
  for (int r = 0; r < reps; r++)
    for (int m = 0; m < modes; m++) {
      set_mode(m == 0 ? MODE_OFF : MODE_PROFILE);
      double t0 = now_ms();
      for (int i = 0; i < CALLS; i += PER_SCOPE) {
        em_scope *s = em_scope_begin();
        em_tensor *x = em_full(EM_DTYPE_F32, 1, shape, 1.0);
        for (int k = 0; k < PER_SCOPE; k++) x = em_relu(x);
        em_scope_end(s);
      }
      double ns = 1e6 * (now_ms() - t0) / CALLS;
      if (ns < best[m]) best[m] = ns;
    }
  set_mode(MODE_OFF);
  printf("tiny op (relu of 16 values): off %.1f ns/call", best[0]);
  if (modes > 1) printf(", profiler on %.1f ns/call (+%.1f ns per record)", best[1], best[1] - best[0]);
  printf("\n");
}

int main(int argc, char **argv) {
  int reps = 7, steps = 10, batch = 128, threads = 2;
  const char *dir = "data/models";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (argv[i][0] != '-') dir = argv[i];
    else {
      fprintf(stderr, "usage: bench-profile [--reps N] [--steps N] [--batch N] [--threads N] [MODEL_DIR]\n");
      return 2;
    }
  }
  if (reps < 1 || steps < 1 || batch < 1 || threads < 1) {
    fprintf(stderr, "bench-profile: reps, steps, batch and threads must be >= 1\n");
    return 2;
  }
  em_set_num_threads(threads);
  char kernels[256];
  em_cpu_kernels_describe(kernels, sizeof kernels);
  printf("median step time over %d rounds of %d steps, %d threads (%s)\n", reps, steps,
         threads, kernels);
  run_tiny_ops(reps);
  char path[1024];
  snprintf(path, sizeof path, "%s/fmnist-mlp.json", dir);
  run_model(path, reps, steps, batch);
  snprintf(path, sizeof path, "%s/fmnist-cnn.json", dir);
  run_model(path, reps, steps, batch);
  return 0;
}
