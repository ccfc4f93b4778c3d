/* pieces.c: one optimiser step's updates over the thread pool together.
 *
 * Each parameter is cut into one contiguous share per thread of the pool
 * (on 16-element boundaries): thread t (em_parallel_each, always the same
 * core's thread) updates share t of every parameter. A row-major weight's
 * share t is its t-th block of rows, the block the GEMMs of the forward
 * and of dW hand to the same thread (engine/ops/gemm-fast.c), so the
 * weight, its gradient and its optimiser state stay in that core's cache.
 * A thread that starts late has its share taken by the others
 * (em_parallel_shares). Small models run in the calling thread
 * (EM_OPTIM_PARALLEL_MIN). */
#include "optim-private.h"

typedef struct {
  const em_optim_piece *pieces;
  int n, parts;
} share_job;

/* Element share s of n elements starts at. */
static int64_t share_start(int64_t n, int s, int parts) {
  if (s >= parts) return n;
  return (n * s / parts) & ~(int64_t)15;
}

static void run_share(void *ctx, int64_t s, int64_t end) {
  const share_job *j = ctx;
  (void)end;
  for (int i = 0; i < j->n; i++) {
    const em_optim_piece *p = &j->pieces[i];
    int64_t b = share_start(p->n, (int)s, j->parts), e = share_start(p->n, (int)s + 1, j->parts);
    if (b < e) p->fn(p->ctx, b, e);
  }
}

void em_optim_pieces_run(const em_optim_piece *pieces, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += pieces[i].n;
  share_job j = {.pieces = pieces, .n = n, .parts = 1};
  if (total < EM_OPTIM_PARALLEL_MIN) {
    run_share(&j, 0, 1);
    return;
  }
  j.parts = em_parallel_threads();
  em_parallel_shares(run_share, &j);
}
