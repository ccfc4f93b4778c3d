/* bench-gemm.c: the GEMM library's ceiling on the shapes Ember's models
 * use, beside Ember's own em_gemm (gemm-fast.c on AVX-512 and AVX2). Times
 * cblas_sgemm and em_gemm (median of repetitions, each em_gemm call in
 * its own scope as in a training step) for each shape of the MLP's and
 * the CNN's forward and backward products at batch 128 and prints one
 * JSON object: {"core": ..., "threads": ..., "shapes": [...]}, "gflops"
 * being OpenBLAS's and "ember_gflops" em_gemm's.
 *
 * usage: bench-gemm [THREADS] */
#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench-timing.h"
#include "em-pool.h"
#include "em-tensor.h"
#include "ops-private.h"

typedef struct {
  const char *name;
  int m, n, k;
  int ta, tb;
} shape;

static const shape shapes[] = {
    /* MLP 784-256-128-10, batch 128: forward y = x w^T, dX = gy w, dW = gy^T x */
    {"mlp.fc1.fwd", 128, 256, 784, 0, 1},
    {"mlp.fc1.dW", 256, 784, 128, 1, 0},
    {"mlp.fc2.fwd", 128, 128, 256, 0, 1},
    {"mlp.fc2.dX", 128, 256, 128, 0, 0},
    {"mlp.fc2.dW", 128, 256, 128, 1, 0},
    {"mlp.fc3.fwd", 128, 10, 128, 0, 1},
    {"mlp.fc3.dX", 128, 128, 10, 0, 0},
    {"mlp.fc3.dW", 10, 128, 128, 1, 0},
    /* CNN conv2 as one im2col GEMM over the batch: (64, 288) @ (288, 128*196) */
    {"cnn.conv2.fwd", 64, 25088, 288, 0, 0},
    {"cnn.conv2.dW", 64, 288, 25088, 0, 1},
    {"cnn.conv2.dX", 288, 25088, 64, 1, 0},
    {"cnn.fc1.fwd", 128, 128, 3136, 0, 1},
    {"cnn.fc1.dW", 128, 3136, 128, 1, 0},
    /* bench-gpt.py's GPT (D 128, FF 512, V 96) at 16 x 128 tokens: the packed in-projection,
     * the out-projection, the feed-forward pair and the tied head, forward and backward */
    {"gpt.in_proj.fwd", 2048, 384, 128, 0, 1},
    {"gpt.in_proj.dX", 2048, 128, 384, 0, 0},
    {"gpt.in_proj.dW", 384, 128, 2048, 1, 0},
    {"gpt.out_proj.fwd", 2048, 128, 128, 0, 1},
    {"gpt.out_proj.dW", 128, 128, 2048, 1, 0},
    {"gpt.linear1.fwd", 2048, 512, 128, 0, 1},
    {"gpt.linear1.dX", 2048, 128, 512, 0, 0},
    {"gpt.linear1.dW", 512, 128, 2048, 1, 0},
    {"gpt.linear2.fwd", 2048, 128, 512, 0, 1},
    {"gpt.linear2.dX", 2048, 512, 128, 0, 0},
    {"gpt.linear2.dW", 128, 512, 2048, 1, 0},
    {"gpt.head.fwd", 2048, 96, 128, 0, 1},
    {"square.1024", 1024, 1024, 1024, 0, 0},
};

/* Median seconds per call of one shape, by OpenBLAS or by em_gemm. */
static double time_shape(const shape *p, const float *a, const float *b, float *c, bool ember) {
  double flop = 2.0 * p->m * p->n * p->k;
  int reps = (int)(2e9 / flop) + 3; /* ~10 ms of work per sample */
  int lda = p->ta ? p->m : p->k, ldb = p->tb ? p->k : p->n;
  double t[9];
  for (int r = 0; r < 10; r++) {
    double t0 = bench_now_s();
    for (int i = 0; i < reps; i++) {
      if (ember) {
        em_scope *s = em_scope_begin();
        em_gemm(EM_DTYPE_F32, p->ta, p->tb, p->m, p->n, p->k, 1.0, a, lda, b, ldb, 0.0, c, p->n);
        em_scope_end(s);
      } else {
        cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans,
                    p->tb ? CblasTrans : CblasNoTrans, p->m, p->n, p->k, 1.0f, a, lda, b, ldb,
                    0.0f, c, p->n);
      }
    }
    if (r > 0) t[r - 1] = (bench_now_s() - t0) / reps; /* first run warms up */
  }
  return bench_median(t, 9);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  em_set_num_threads(threads); /* the pool and OpenBLAS */
  printf("{\"core\": \"%s\", \"threads\": %d, \"shapes\": [", openblas_get_corename(), threads);
  /* Ember's pass first, then OpenBLAS's: OpenBLAS's threads keep spinning
   * for a while after each call and would slow the pool's. */
  enum { N_SHAPES = sizeof shapes / sizeof *shapes };
  double t_ember[N_SHAPES], t_blas[N_SHAPES];
  for (int pass = 0; pass < 2; pass++)
    for (size_t s = 0; s < N_SHAPES; s++) {
      const shape *p = &shapes[s];
      size_t na = (size_t)p->m * p->k, nb = (size_t)p->k * p->n, nc = (size_t)p->m * p->n;
      float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4);
      for (size_t i = 0; i < na; i++) a[i] = (float)(i % 13) * 0.01f;
      for (size_t i = 0; i < nb; i++) b[i] = (float)(i % 7) * 0.01f;
      if (pass == 0) t_ember[s] = time_shape(p, a, b, c, true);
      else t_blas[s] = time_shape(p, a, b, c, false);
      free(a);
      free(b);
      free(c);
    }
  for (size_t s = 0; s < N_SHAPES; s++) {
    const shape *p = &shapes[s];
    double flop = 2.0 * p->m * p->n * p->k;
    printf("%s{\"name\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"gflops\": %.1f, "
           "\"ember_gflops\": %.1f}",
           s ? ", " : "", p->name, p->m, p->n, p->k, flop / t_blas[s] * 1e-9,
           flop / t_ember[s] * 1e-9);
  }
  printf("]}\n");
  em_pool_shutdown();
  return 0;
}
