/* bench-ops-nn.c: wall time of the f32 fast kernels of the
 * neural-network ops, forward + backward, at shapes of the training hot
 * path. Usage: bench-ops-nn [threads]. Not a test: meson's benchmark(). */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "em-cpu.h"
#include "em-pool.h"
#include "gradcheck.h"

typedef em_tensor *(*op_fn)(em_tensor **in);

static em_rng drop_rng;
static em_tensor *op_ce(em_tensor **in) { return em_cross_entropy(in[0], in[1], 0.1); }
static em_tensor *op_bn(em_tensor **in) {
  return em_batch_norm(in[0], in[1], in[2], in[3], in[4], true, 0.1, 1e-5);
}
static em_tensor *op_ln(em_tensor **in) { return em_layer_norm(in[0], 1, in[1], in[2], 1e-5); }
static em_tensor *op_lsm(em_tensor **in) { return em_log_softmax(in[0], 1); }
static em_tensor *op_mse(em_tensor **in) { return em_mse_loss(in[0], in[1]); }
static em_tensor *op_drop(em_tensor **in) { return em_dropout(in[0], 0.5, true, &drop_rng); }
static em_tensor *op_emb(em_tensor **in) { return em_embedding(in[0], in[1]); }

/* Microseconds of the calling thread's CPU time: with other work on the
 * machine this is steadier than wall time (it leaves out pool workers). */
static double cpu_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Mean microseconds of forward + backward (and of forward alone), wall
 * and calling-thread CPU time. */
static void bench(const char *what, op_fn f, em_tensor **in, int iters) {
  double t_fwd = 0, t_all = 0, c_fwd = 0, c_all = 0;
  for (int it = -3; it < iters; it++) {
    em_scope *s = em_scope_begin();
    gint64 t0 = g_get_monotonic_time();
    double c0 = cpu_us();
    em_tensor *y = f(in);
    gint64 t1 = g_get_monotonic_time();
    double c1 = cpu_us();
    if (em_tensor_numel(y) == 1) em_backward(y);
    else em_backward_grad(y, y); /* any upstream gradient of the right shape */
    gint64 t2 = g_get_monotonic_time();
    double c2 = cpu_us();
    em_scope_end(s);
    if (it >= 0) {
      t_fwd += (double)(t1 - t0);
      t_all += (double)(t2 - t0);
      c_fwd += c1 - c0;
      c_all += c2 - c0;
    }
  }
  printf("%-32s fwd %8.1f us (cpu %8.1f)  fwd+bwd %8.1f us (cpu %8.1f)\n", what, t_fwd / iters,
         c_fwd / iters, t_all / iters, c_all / iters);
}

static em_tensor *targets(int64_t N, int64_t K) {
  em_tensor *t = em_tensor_new(EM_DTYPE_I64, 1, &N, NULL);
  for (int64_t i = 0; i < N; i++) em_i64(t)[i] = (i * 7) % K;
  return t;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  em_set_num_threads(threads);
  em_rng_seed(&drop_rng, 1);
  char kernels[256];
  em_cpu_kernels_describe(kernels, sizeof kernels);
  printf("threads: %d; %s\n", threads, kernels);
  {
    int64_t s[2] = {128, 10};
    em_tensor *in[2] = {gc_rand(EM_DTYPE_F32, 2, s, -3, 3, 1, true), targets(128, 10)};
    bench("cross_entropy (128, 10) ls=0.1", op_ce, in, 2000);
    bench("log_softmax (128, 10) dim 1", op_lsm, in, 2000);
    int64_t b[2] = {256, 1000};
    em_tensor *in2[2] = {gc_rand(EM_DTYPE_F32, 2, b, -3, 3, 2, true), targets(256, 1000)};
    bench("cross_entropy (256, 1000)", op_ce, in2, 200);
    bench("log_softmax (256, 1000) dim 1", op_lsm, in2, 200);
  }
  {
    int64_t xs[4] = {128, 32, 28, 28}, cs[1] = {32};
    em_tensor *in[5] = {gc_rand(EM_DTYPE_F32, 4, xs, -2, 2, 3, true),
                        gc_rand(EM_DTYPE_F32, 1, cs, 0.5, 1.5, 4, true),
                        gc_rand(EM_DTYPE_F32, 1, cs, -1, 1, 5, true),
                        gc_rand(EM_DTYPE_F32, 1, cs, 0, 0, 6, false),
                        gc_rand(EM_DTYPE_F32, 1, cs, 1, 1, 7, false)};
    bench("batch_norm (128, 32, 28, 28)", op_bn, in, 20);
    int64_t xs2[4] = {32, 16, 32, 32}, cs2[1] = {16};
    em_tensor *in2[5] = {gc_rand(EM_DTYPE_F32, 4, xs2, -2, 2, 3, true),
                         gc_rand(EM_DTYPE_F32, 1, cs2, 0.5, 1.5, 4, true),
                         gc_rand(EM_DTYPE_F32, 1, cs2, -1, 1, 5, true),
                         gc_rand(EM_DTYPE_F32, 1, cs2, 0, 0, 6, false),
                         gc_rand(EM_DTYPE_F32, 1, cs2, 1, 1, 7, false)};
    bench("batch_norm (32, 16, 32, 32)", op_bn, in2, 100);
    int64_t xs3[2] = {128, 256}, cs3[1] = {256};
    em_tensor *in3[5] = {gc_rand(EM_DTYPE_F32, 2, xs3, -2, 2, 3, true),
                         gc_rand(EM_DTYPE_F32, 1, cs3, 0.5, 1.5, 4, true),
                         gc_rand(EM_DTYPE_F32, 1, cs3, -1, 1, 5, true),
                         gc_rand(EM_DTYPE_F32, 1, cs3, 0, 0, 6, false),
                         gc_rand(EM_DTYPE_F32, 1, cs3, 1, 1, 7, false)};
    bench("batch_norm (128, 256)", op_bn, in3, 2000);
  }
  {
    int64_t xs[2] = {4096, 256}, ws[1] = {256};
    em_tensor *in[3] = {gc_rand(EM_DTYPE_F32, 2, xs, -2, 2, 8, true),
                        gc_rand(EM_DTYPE_F32, 1, ws, 0.5, 1.5, 9, true),
                        gc_rand(EM_DTYPE_F32, 1, ws, -1, 1, 10, true)};
    bench("layer_norm (4096, 256)", op_ln, in, 100);
    bench("dropout p=0.5 (4096, 256)", op_drop, in, 100);
    em_tensor *in2[2] = {in[0], gc_rand(EM_DTYPE_F32, 2, xs, -2, 2, 11, true)};
    bench("mse (4096, 256)", op_mse, in2, 100);
  }
  {
    int64_t ws[2] = {10000, 128}, is[2] = {32, 64};
    em_tensor *in[2] = {gc_rand(EM_DTYPE_F32, 2, ws, -1, 1, 12, true),
                        gc_rand(EM_DTYPE_I64, 2, is, 0, 9999, 13, false)};
    bench("embedding (10000, 128)[32, 64]", op_emb, in, 200);
  }
  em_pool_shutdown();
  return 0;
}
