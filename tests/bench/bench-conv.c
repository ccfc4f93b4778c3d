/* bench-conv.c: forward and backward of fmnist-cnn's convolutions and
 * pools at batch 128, the median of several repetitions each, with
 * GFLOP/s for the convolutions (a multiply-add counts 2; backward is dX +
 * dW, or dW alone for the first layer, whose input needs no grad).
 * bench-conv.py times the same ops in PyTorch for comparison.
 *
 * usage: bench-conv [THREADS [REPS [cpu|wall [OP]]]]   (defaults 2, 15, wall)
 *
 * With "cpu" the times are the calling thread's CPU time rather than wall
 * time: on a machine shared with other jobs, a 1-thread run then measures
 * the work itself, not the time the scheduler gave to others (with more
 * threads it misses the pool workers' share). OP runs only the
 * ops whose name starts with it (conv1, conv2, maxpool1, maxpool2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-cpu.h"
#include "bench-timing.h"
#include "em-ops.h"
#include "em-pool.h"

/* Marks t's gradient stale so each repetition overwrites it, as after
 * zero_grad in training. */
static void zero_grads(em_tensor *x, em_tensor *w, em_tensor *b) {
  if (em_tensor_requires_grad(x)) em_tensor_zero_grad(x);
  if (w) em_tensor_zero_grad(w);
  if (b) em_tensor_zero_grad(b);
}

static em_tensor *rand_tensor(int ndim, const int64_t *shape, unsigned seed, bool grad) {
  em_tensor *t = em_tensor_new(EM_DTYPE_F32, ndim, shape, NULL);
  em_rng r;
  em_rng_seed(&r, seed);
  for (int64_t k = 0; k < em_tensor_numel(t); k++)
    em_f32(t)[k] = (float)(em_rng_uniform(&r) * 2 - 1);
  em_tensor_set_requires_grad(t, grad);
  return t;
}

typedef struct {
  const char *name;
  bool pool;
  int64_t C, H, K; /* input channels, square size, output channels (conv) */
  bool x_grad;
} bench_op;

static const bench_op ops[] = {
    {"conv1 1->32 3x3 p1 28x28", false, 1, 28, 32, false},
    {"conv2 32->64 3x3 p1 14x14", false, 32, 14, 64, true},
    {"maxpool1 2x2 32x28x28", true, 32, 28, 0, true},
    {"maxpool2 2x2 64x14x14", true, 64, 14, 0, true},
};

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 15;
  if (reps < 1) reps = 1;
  if (argc > 3 && strcmp(argv[3], "cpu") == 0) bench_clock_id = CLOCK_THREAD_CPUTIME_ID;
  em_set_num_threads(threads);
  const int64_t N = 128;
  char kernels[256];
  em_cpu_kernels_describe(kernels, sizeof kernels);
  printf("batch %lld, %d threads, median of %d, %s time; %s\n", (long long)N, threads, reps,
         bench_clock_id == CLOCK_MONOTONIC ? "wall" : "CPU", kernels);
  printf("%-28s %9s %9s %9s %9s %11s\n", "op", "fwd ms", "bwd ms", "total ms", "best ms",
         "GFLOP/s fwd/bwd");
  double sum_total = 0;
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
    const bench_op *op = &ops[o];
    if (argc > 4 && strncmp(op->name, argv[4], strlen(argv[4])) != 0) continue;
    int64_t xs[4] = {N, op->C, op->H, op->H}, ws[4] = {op->K, op->C, 3, 3}, bs[1] = {op->K};
    em_tensor *x = rand_tensor(4, xs, 1, op->x_grad);
    em_tensor *w = op->pool ? NULL : rand_tensor(4, ws, 2, true);
    em_tensor *b = op->pool ? NULL : rand_tensor(1, bs, 3, true);
    em_conv2d_params cp = {{1, 1}, {1, 1}, {1, 1}, 1};
    em_pool2d_params pp = {{2, 2}, {2, 2}, {0, 0}, true};
    int64_t ys[4] = {N, op->pool ? op->C : op->K, op->pool ? op->H / 2 : op->H,
                     op->pool ? op->H / 2 : op->H};
    em_tensor *gy = rand_tensor(4, ys, 4, false);
    double *tf = malloc(sizeof(double) * (size_t)reps), *tb = malloc(sizeof(double) * (size_t)reps);
    for (int r = -2; r < reps; r++) { /* two warm-up runs fill the caching allocator */
      zero_grads(x, w, b);
      em_scope *s = em_scope_begin();
      double t0 = bench_now_s();
      em_tensor *y = op->pool ? em_max_pool2d(x, &pp) : em_conv2d(x, w, b, &cp);
      double t1 = bench_now_s();
      /* y's node alone, as the tape walk runs it: em_backward_grad would
       * first copy gy into y's gradient, a cost that is not the op's */
      bool prev = em_no_grad_begin();
      y->grad = gy;
      y->grad_fn->backward(y->grad_fn);
      em_grad_mode_restore(prev);
      double t2 = bench_now_s();
      em_scope_end(s);
      if (r >= 0) {
        tf[r] = t1 - t0;
        tb[r] = t2 - t1;
      }
    }
    double best = tf[0] + tb[0];
    for (int r = 1; r < reps; r++)
      if (tf[r] + tb[r] < best) best = tf[r] + tb[r];
    double f = bench_median(tf, reps), bw = bench_median(tb, reps);
    sum_total += f + bw;
    if (op->pool) {
      printf("%-28s %9.3f %9.3f %9.3f %9.3f %11s\n", op->name, 1e3 * f, 1e3 * bw,
             1e3 * (f + bw), 1e3 * best, "-");
    } else {
      double fwd_flops = 2.0 * (double)(N * op->K * op->H * op->H * op->C * 9);
      double bwd_flops = fwd_flops * (op->x_grad ? 2 : 1);
      printf("%-28s %9.3f %9.3f %9.3f %9.3f %5.0f/%-5.0f\n", op->name, 1e3 * f, 1e3 * bw,
             1e3 * (f + bw), 1e3 * best, fwd_flops / f * 1e-9, bwd_flops / bw * 1e-9);
    }
    free(tf);
    free(tb);
    em_tensor_free(x);
    em_tensor_free(w);
    em_tensor_free(b);
    em_tensor_free(gy);
  }
  printf("%-28s %9s %9s %9.3f\n", "all", "", "", 1e3 * sum_total);
  em_pool_shutdown();
  return 0;
}
