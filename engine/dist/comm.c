/* comm.c: the communicator's generic half: the table call-through, the
 * blocking collectives made of a start and a bounded wait, and the
 * timeout every wait obeys (suspended while a peer says it is busy; cut
 * short by a peer's failure: comm-notice.c). */
#include "dist-private.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

double em_dist_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

em_comm *em_comm_new(const em_comm_vtable *vt, void *ctx, int rank, int world, em_error *err) {
  if (!vt || world < 1 || rank < 0 || rank >= world) {
    if (vt && vt->free) vt->free(ctx);
    em_error_set(err, EM_ERR_INVALID, "communicator: rank %d of world %d: need 0 <= rank < world",
                 rank, world);
    return NULL;
  }
  em_comm *c = calloc(1, sizeof *c);
  if (!c) {
    if (vt->free) vt->free(ctx);
    em_error_set(err, EM_ERR_NOMEM, "out of memory creating a communicator");
    return NULL;
  }
  c->vt = vt;
  c->ctx = ctx;
  c->rank = rank;
  c->world = world;
  c->failed = -1;
  c->timeout_s = 30;
  const char *env = getenv("EMBER_DDP_TIMEOUT");
  if (env) { /* a misspelt value must not quietly become 30 s */
    char *end;
    double v = strtod(env, &end);
    if (end == env || *end || !(v > 0) || !isfinite(v)) {
      em_comm_free(c);
      em_error_set(err, EM_ERR_INVALID, "EMBER_DDP_TIMEOUT is '%s': it takes the seconds a "
                   "rank waits for the others, a number > 0 (default 30)", env);
      return NULL;
    }
    c->timeout_s = v;
  }
  return c;
}

void em_comm_free(em_comm *c) {
  if (!c) return;
  if (c->vt->free) c->vt->free(c->ctx);
  free(c->peers);
  free(c);
}

int em_comm_rank(const em_comm *c) { return c->rank; }
int em_comm_world(const em_comm *c) { return c->world; }
const char *em_comm_name(const em_comm *c) { return c->vt->name; }
em_device em_comm_device(const em_comm *c) { return c->device; }

void em_comm_set_timeout(em_comm *c, double seconds) {
  if (seconds > 0 && isfinite(seconds)) c->timeout_s = seconds;
}

double em_comm_timeout(const em_comm *c) { return c->timeout_s; }

void em_comm_set_cancel(em_comm *c, const atomic_bool *flag) { c->cancel = flag; }

em_status em_comm_iallreduce_sum_f32(em_comm *c, float *buf, int64_t n, em_comm_req *req,
                                     em_error *err) {
  return c->vt->iallreduce_sum_f32(c->ctx, buf, n, req, err);
}

em_status em_comm_test(em_comm *c, em_comm_req req, bool *done, em_error *err) {
  return c->vt->test(c->ctx, req, done, err);
}

/* Polls req until done: a few yields first (a shared-memory all-reduce of
 * a small buffer takes microseconds), then short sleeps, so that a rank
 * waiting for a slower one leaves it the core. The notices that arrive
 * meanwhile are taken: a peer's failure ends the wait with its message;
 * while a peer is busy neither the timeout nor a stop request ends it,
 * and the timeout starts again when the peer is back. */
em_status em_comm_wait(em_comm *c, em_comm_req req, const char *what, em_error *err) {
  double t0 = em_dist_now(), deadline = t0 + c->timeout_s;
  for (int spin = 0;; spin++) {
    bool done = false;
    em_status st = c->vt->test(c->ctx, req, &done, err);
    if (st != EM_OK) return em_error_prefix(err, "rank %d of %d, %s", c->rank, c->world, what);
    if (done) return EM_OK;
    double now = em_dist_now();
    /* (always before giving up: a peer's failure explains the wait) */
    bool late = now > deadline || (c->cancel && atomic_load(c->cancel) && now - t0 > 2.0);
    if (((spin & 15) == 0 || late) && em_comm_take_notices(c, err) != EM_OK)
      return em_error_prefix(err, "rank %d of %d, %s", c->rank, c->world, what);
    if (c->failed >= 0) {
      const em_comm_peer *p = &c->peers[c->failed];
      return em_error_set(err, p->status, "rank %d: %s", c->failed, p->msg);
    }
    if (c->busy > 0) { /* a peer works alone (rank 0's checkpoint): it will come */
      t0 = now;
      deadline = now + c->timeout_s;
    }
    if (c->cancel && atomic_load(c->cancel) && now - t0 > 2.0)
      return em_error_set(err, EM_ERR_CANCELLED,
                          "rank %d of %d: asked to stop while waiting for %s: another rank is "
                          "gone", c->rank, c->world, what);
    if (now > deadline)
      return em_error_set(err, EM_ERR_IO,
                          "rank %d of %d: %s did not complete within %g s: another rank "
                          "probably died or hangs (the timeout is EMBER_DDP_TIMEOUT seconds)",
                          c->rank, c->world, what, c->timeout_s);
    if (spin < 64) continue;
    struct timespec ts = {0, spin < 1000 ? 20000 : 200000};
    nanosleep(&ts, NULL);
  }
}

em_status em_comm_allreduce_sum_f32(em_comm *c, float *buf, int64_t n, em_error *err) {
  em_comm_req r;
  EM_DIST_TRY(c->vt->iallreduce_sum_f32(c->ctx, buf, n, &r, err));
  return em_comm_wait(c, r, "an all-reduce", err);
}

em_status em_comm_allreduce_sum_f64(em_comm *c, double *buf, int64_t n, em_error *err) {
  em_comm_req r;
  if (c->vt->iallreduce_sum_f64) {
    EM_DIST_TRY(c->vt->iallreduce_sum_f64(c->ctx, buf, n, &r, err));
    return em_comm_wait(c, r, "an all-reduce", err);
  }
  float *f = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!f) return em_error_set(err, EM_ERR_NOMEM, "out of memory for an all-reduce");
  for (int64_t i = 0; i < n; i++) f[i] = (float)buf[i];
  em_status st = em_comm_allreduce_sum_f32(c, f, n, err);
  for (int64_t i = 0; st == EM_OK && i < n; i++) buf[i] = f[i];
  free(f);
  return st;
}

em_status em_comm_allreduce_avg_f32(em_comm *c, float *buf, int64_t n, em_error *err) {
  EM_DIST_TRY(em_comm_allreduce_sum_f32(c, buf, n, err));
  float inv = 1.0f / (float)c->world;
  for (int64_t i = 0; i < n; i++) buf[i] *= inv;
  return EM_OK;
}

em_status em_comm_broadcast(em_comm *c, void *buf, int64_t bytes, int root, em_error *err) {
  if (root < 0 || root >= c->world)
    return em_error_set(err, EM_ERR_INVALID, "broadcast from rank %d of a world of %d", root,
                        c->world);
  em_comm_req r;
  EM_DIST_TRY(c->vt->ibroadcast(c->ctx, buf, bytes, root, &r, err));
  return em_comm_wait(c, r, "a broadcast", err);
}

em_status em_comm_barrier(em_comm *c, em_error *err) {
  em_comm_req r;
  EM_DIST_TRY(c->vt->ibarrier(c->ctx, &r, err));
  return em_comm_wait(c, r, "a barrier", err);
}

void em_comm_abort(em_comm *c, int code) {
  if (c && c->vt->abort) c->vt->abort(c->ctx, code);
}

/* The rank's place on its node, as the launcher says (Open MPI, MPICH,
 * Slurm); -1 when none does. */
static int local_env(const char *const *names) {
  for (int i = 0; names[i]; i++) {
    const char *v = getenv(names[i]);
    if (v && *v) {
      char *end;
      long x = strtol(v, &end, 10);
      if (*end == '\0' && x >= 0 && x < 1 << 20) return (int)x;
    }
  }
  return -1;
}

em_status em_dist_local_device(em_device_kind kind, em_device *out, em_error *err) {
  static const char *const rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                          "SLURM_LOCALID", NULL};
  static const char *const size_vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                          "SLURM_NTASKS_PER_NODE", NULL};
  *out = (em_device){(uint8_t)kind, 0};
  if (kind != EM_DEVICE_CUDA) return EM_OK; /* the CPU, or ref (any index shares the host) */
  int local = local_env(rank_vars), size = local_env(size_vars);
  if (local < 0) local = 0;
  if (size < local + 1) size = local + 1;
  int count = em_device_count(kind);
  if (count < 1) return em_device_check(*out, err);
  if (size > count)
    return em_error_set(err, EM_ERR_INVALID,
                        "%d ranks run on this node but it has %d CUDA device%s: data-parallel "
                        "training runs one process per GPU (mpirun -np %d per node)",
                        size, count, count == 1 ? "" : "s", count);
  if (local > 255)
    return em_error_set(err, EM_ERR_INVALID, "local rank %d is beyond the device indices", local);
  out->index = (uint8_t)local;
  return EM_OK;
}
