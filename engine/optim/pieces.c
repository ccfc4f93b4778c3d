/* pieces.c: one optimiser step's updates over the thread pool together.
 *
 * Each parameter is cut into one contiguous share per thread of the pool
 * (on 16-element boundaries): thread t (em_parallel_each, always the same
 * core's thread) updates share t of every parameter. A row-major weight's
 * share t is its t-th block of rows, the block the GEMMs of the forward
 * and of dW hand to the same thread (engine/ops/gemm-fast.c), so the
 * weight, its gradient and its optimiser state stay in that core's cache.
 * A thread that starts late has its shares taken by the others. Small
 * models run in the calling thread (EM_OPTIM_PARALLEL_MIN). */
#include "optim-private.h"

#include <stdatomic.h>

#define MAX_SHARES 64 /* the pool's thread limit */

typedef struct {
  const em_optim_piece *pieces;
  int n, parts;
  atomic_bool taken[MAX_SHARES];
} share_job;

/* Element share s of n elements starts at. */
static int64_t share_start(int64_t n, int s, int parts) {
  if (s >= parts) return n;
  return (n * s / parts) & ~(int64_t)15;
}

static void run_share(const share_job *j, int s) {
  for (int i = 0; i < j->n; i++) {
    const em_optim_piece *p = &j->pieces[i];
    int64_t b = share_start(p->n, s, j->parts), e = share_start(p->n, s + 1, j->parts);
    if (b < e) p->fn(p->ctx, b, e);
  }
}

static void run_shares(void *ctx, int64_t t, int64_t end) {
  share_job *j = ctx;
  (void)end;
  for (int d = 0; d < j->parts; d++) {
    int s = (int)((t + d) % j->parts);
    if (!atomic_exchange(&j->taken[s], true)) run_share(j, s);
  }
}

void em_optim_pieces_run(const em_optim_piece *pieces, int n) {
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += pieces[i].n;
  share_job j = {.pieces = pieces, .n = n, .parts = 1};
  if (total >= EM_OPTIM_PARALLEL_MIN) j.parts = em_parallel_threads();
  if (j.parts > MAX_SHARES) j.parts = MAX_SHARES;
  for (int s = 0; s < j.parts; s++) atomic_init(&j.taken[s], false);
  if (j.parts == 1) run_share(&j, 0);
  else em_parallel_each(run_shares, &j);
}
