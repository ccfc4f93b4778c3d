/* test-nccl-comm.c: the NCCL communicator (engine/dist/dist-nccl.c) on
 * real GPUs, one rank per GPU; run as `mpirun -np 2 test-nccl-comm` by
 * test_ddp_gpu.py (suite gpu).
 *
 * - all-reduce of device buffers (1 M floats; several in flight, waited
 *   for out of order), broadcast of a device buffer from rank 1;
 * - host buffers and the barrier go through the MPI bootstrap;
 * - a collective sees what the CUDA backend's stream queued before it:
 *   a fill queued right before each of 20 all-reduces of 16 M floats;
 * - the gradient bucketer on CUDA gradients picks NCCL and averages;
 * - a peer that never comes: the waiting rank gives up after the
 *   communicator's timeout (2 s here) with ncclCommAbort, no hang.
 *
 * Exits 77 (skip) when this rank has no GPU of its own. A failure prints
 * what failed and ends the job (MPI_Abort through the communicator), so
 * that the other rank does not wait for ever. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-device.h"
#include "em-dist.h"

static em_comm *g_mpi;
static int g_rank;

static void fail(const char *what, const em_error *err) {
  fprintf(stderr, "rank %d: FAILED: %s%s%s\n", g_rank, what, err ? ": " : "",
          err ? err->msg : "");
  fflush(stderr);
  em_comm_abort(g_mpi, 1);
  exit(1);
}

#define CHECK(cond, what)        \
  do {                           \
    if (!(cond)) fail(what, NULL); \
  } while (0)
#define CHECK_OK(call, err)                      \
  do {                                           \
    if ((call) != EM_OK) fail(#call, (err));     \
  } while (0)

static em_tensor *device_floats(em_device dev, int64_t n, em_error *err) {
  em_tensor *t = em_tensor_new_on(dev, EM_DTYPE_F32, 1, &n, err);
  if (!t) fail("em_tensor_new_on", err);
  return t;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  em_error err = {0};
  if (!(g_mpi = em_comm_mpi_new(&argc, &argv, &err))) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  g_rank = em_comm_rank(g_mpi);
  int world = em_comm_world(g_mpi), rank = g_rank;
  em_device dev;
  if (em_dist_local_device(EM_DEVICE_CUDA, &dev, &err) != EM_OK) {
    printf("rank %d: skip: %s\n", rank, err.msg);
    em_comm_free(g_mpi);
    return 77;
  }
  em_comm *nc = em_comm_nccl_new(g_mpi, dev, &err);
  if (!nc) fail("em_comm_nccl_new", &err);
  CHECK(!strcmp(em_comm_name(nc), "nccl"), "the communicator's name");
  CHECK(em_device_eq(em_comm_device(nc), dev), "the communicator's device");
  CHECK(em_comm_rank(nc) == rank && em_comm_world(nc) == world, "rank and world");

  /* 1. all-reduce of a device buffer */
  const int64_t n = 1 << 20;
  float *h = malloc(sizeof(float) * (size_t)n);
  CHECK(h != NULL, "malloc");
  em_tensor *t = device_floats(dev, n, &err);
  for (int64_t i = 0; i < n; i++) h[i] = (float)(rank + 1 + i % 7);
  em_tensor_upload(t, h);
  CHECK_OK(em_comm_allreduce_sum_f32(nc, em_f32(t), n, &err), &err);
  em_tensor_download(t, h);
  double rsum = world * (world + 1) / 2.0;
  for (int64_t i = 0; i < n; i++)
    if (h[i] != (float)(rsum + world * (double)(i % 7))) fail("device all-reduce values", NULL);
  printf("rank %d: all-reduce of %lld floats on %s: ok\n", rank, (long long)n,
         em_device_str(dev, (char[32]){0}, 32));

  /* 2. three in flight, waited for in reverse order */
  em_tensor *u[3];
  em_comm_req req[3];
  for (int k = 0; k < 3; k++) {
    u[k] = device_floats(dev, 1000 + k, &err);
    em_tensor_fill_(u[k], (double)(k + 1) * (rank + 1));
    CHECK_OK(em_comm_iallreduce_sum_f32(nc, em_f32(u[k]), 1000 + k, &req[k], &err), &err);
  }
  for (int k = 2; k >= 0; k--) {
    CHECK_OK(em_comm_wait(nc, req[k], "an all-reduce", &err), &err);
    em_tensor_download(u[k], h);
    for (int i = 0; i < 1000 + k; i++)
      if (h[i] != (float)((k + 1) * rsum)) fail("in-flight all-reduce values", NULL);
    em_tensor_free(u[k]);
  }
  printf("rank %d: three in flight: ok\n", rank);

  /* 3. broadcast of a device buffer from rank 1 */
  if (world > 1) {
    em_tensor_fill_(t, rank == 1 ? 42.0 : -1.0);
    CHECK_OK(em_comm_broadcast(nc, em_f32(t), (int64_t)em_tensor_nbytes(t), 1, &err), &err);
    em_tensor_download(t, h);
    for (int64_t i = 0; i < n; i++)
      if (h[i] != 42.0f) fail("broadcast values", NULL);
    printf("rank %d: broadcast from rank 1: ok\n", rank);
  }

  /* 4. host buffers and the barrier: through the bootstrap */
  float hs[3] = {(float)rank, 1.0f, 2.0f};
  CHECK_OK(em_comm_allreduce_sum_f32(nc, hs, 3, &err), &err);
  CHECK(hs[0] == (float)(world * (world - 1) / 2) && hs[1] == (float)world, "host all-reduce");
  int64_t pos[2] = {rank == 0 ? 7 : 0, rank == 0 ? 9 : 0};
  CHECK_OK(em_comm_broadcast(nc, pos, sizeof pos, 0, &err), &err);
  CHECK(pos[0] == 7 && pos[1] == 9, "host broadcast");
  CHECK_OK(em_comm_barrier(nc, &err), &err);
  printf("rank %d: host buffers through MPI: ok\n", rank);

  /* 5. ordering after the backend's stream: the fill is queued there,
   * the all-reduce on NCCL's own stream must wait for it */
  const int64_t big = 16 << 20;
  em_tensor *b = device_floats(dev, big, &err);
  float *hb = malloc(sizeof(float) * (size_t)big);
  CHECK(hb != NULL, "malloc");
  for (int it = 0; it < 20; it++) {
    em_tensor_fill_(b, (double)(rank + 1 + it));
    CHECK_OK(em_comm_allreduce_sum_f32(nc, em_f32(b), big, &err), &err);
    em_tensor_download(b, hb);
    float want = (float)(rsum + world * (double)it);
    for (int64_t i = 0; i < big; i += 4099)
      if (hb[i] != want) fail("an all-reduce ran before the fill queued before it", NULL);
    if (hb[big - 1] != want) fail("an all-reduce ran before the fill (last element)", NULL);
  }
  free(hb);
  em_tensor_free(b);
  printf("rank %d: 20 fills then all-reduces of %lld floats, in order: ok\n", rank,
         (long long)big);

  /* 6. the bucketer: CUDA gradients, NCCL picked over the MPI communicator */
  {
    int64_t shape[2][2] = {{300, 200}, {200, 1}};
    em_tensor *p[2];
    for (int k = 0; k < 2; k++) {
      p[k] = em_tensor_new_on(dev, EM_DTYPE_F32, 2, shape[k], &err);
      if (!p[k]) fail("a parameter", &err);
      em_tensor_set_requires_grad(p[k], true);
      bool fresh;
      em_tensor *g = em_grad_acquire(p[k], &fresh);
      em_tensor_fill_(g, (double)(rank + 1) * (k + 1));
    }
    em_ddp_options o;
    em_ddp_options_defaults(&o);
    o.comm = EM_DDP_COMM_NCCL;
    o.bucket_mb = 0.1;
    em_ddp *d = em_ddp_new(g_mpi, 2, p, &o, &err);
    if (!d) fail("em_ddp_new", &err);
    CHECK_OK(em_ddp_finish(d, &err), &err);
    em_ddp_stats st;
    em_ddp_get_stats(d, &st);
    CHECK(st.comm && !strcmp(st.comm, "nccl") && !st.staged, "the bucketer uses NCCL in place");
    CHECK(em_device_eq(st.device, dev), "the buckets live on the GPU");
    for (int k = 0; k < 2; k++) {
      int64_t m = em_tensor_numel(p[k]);
      em_tensor_download(p[k]->grad, h);
      float want = (float)(rsum * (k + 1) / world);
      for (int64_t i = 0; i < m; i++)
        if (h[i] != want) fail("averaged gradients", NULL);
    }
    printf("rank %d: bucketer over NCCL (%d buckets): ok\n", rank, st.n_buckets);
    em_ddp_free(d);
    for (int k = 0; k < 2; k++) em_tensor_free(p[k]);
  }

  /* 7. a peer that never comes: rank 0 waits, gives up after 2 s */
  if (world > 1) {
    em_comm_set_timeout(nc, 2.0);
    CHECK_OK(em_comm_barrier(g_mpi, &err), &err);
    double t0 = now();
    em_status st = EM_OK;
    if (rank == 0) {
      st = em_comm_allreduce_sum_f32(nc, em_f32(t), n, &err);
      double took = now() - t0;
      CHECK(st == EM_ERR_IO, "a lone all-reduce must fail");
      CHECK(strstr(err.msg, "did not complete within 2 s") != NULL, "the timeout's message");
      CHECK(took < 10, "the timeout is bounded");
      printf("rank 0: lone all-reduce gave up after %.1f s: %s\n", took, err.msg);
    }
    /* the other ranks join late: the collective cannot complete any more
     * (rank 0 aborted its communicator) and must time out too */
    float late = 0;
    CHECK_OK(em_comm_broadcast(g_mpi, &late, sizeof late, 0, &err), &err);
    if (rank != 0) {
      st = em_comm_allreduce_sum_f32(nc, em_f32(t), n, &err);
      CHECK(st != EM_OK, "an all-reduce whose peer aborted must fail");
      printf("rank %d: late all-reduce failed as it should after %.1f s: %s\n", rank,
             now() - t0, err.msg);
    }
    em_error e2 = {0};
    st = em_comm_allreduce_sum_f32(nc, em_f32(t), n, &e2);
    CHECK(st != EM_OK && strstr(e2.msg, "aborted"), "an aborted communicator refuses work");
  }

  em_tensor_free(t);
  free(h);
  em_comm_free(nc);
  CHECK_OK(em_comm_barrier(g_mpi, &err), &err);
  printf("rank %d: all ok\n", rank);
  em_comm_free(g_mpi);
  return 0;
}
