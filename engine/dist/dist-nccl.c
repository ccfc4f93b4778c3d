/* dist-nccl.c: the communicator over NCCL, for gradients on CUDA GPUs,
 * one process per GPU.
 *
 * Bootstrap: over an MPI communicator (borrowed). Every rank first checks
 * what it can alone (its device, the node's rank count against its GPUs)
 * and the ranks agree on the outcome (a sum of failure flags), so that no
 * rank waits for one that gave up; then rank 0 makes the unique id and
 * broadcasts it, and each rank joins (ncclCommInitRankConfig) with its own
 * GPU; they agree again on whether everyone joined.
 *
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): no NCCL
 * call can hang, a call that returns ncclInProgress is polled
 * (ncclCommGetAsyncError) until done within the communicator's timeout.
 * Collectives run on a stream of their own, after the work queued on the
 * CUDA backend's stream so far (an event it records there and this stream
 * waits for; a backend without a stream entry is synchronized instead),
 * and each records a CUDA event: test is cudaEventQuery (and the
 * communicator's asynchronous error), the generic wait in comm.c polls
 * it. A collective still running after the timeout aborts the NCCL
 * communicator (ncclCommAbort), which ends its kernels; the caller then
 * ends the job (em_comm_abort).
 *
 * Buffers are device memory of this process's GPU. A host buffer (the
 * trainer's losses, stop flags, evaluation sums) and the barrier go to
 * the bootstrap communicator: request numbers from MAX_REQS up are its
 * (MAX_REQS + its request).
 *
 * Every NCCL and CUDA runtime call goes through EM_NCCL_CHECK /
 * EM_CUDART_CHECK, which name the call, the function and the line. */
#include "dist-private.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "em-backend.h"

#define MAX_REQS 256

typedef struct {
  ncclComm_t comm;
  em_comm *boot;          /* the MPI communicator it was made over (borrowed) */
  em_comm *self;          /* the em_comm around this context (its timeout) */
  int index;              /* the CUDA device */
  cudaStream_t stream;    /* the collectives' stream */
  cudaEvent_t before;     /* recorded on the backend's stream before a collective */
  cudaEvent_t after[MAX_REQS]; /* recorded after each collective */
  double started[MAX_REQS];    /* when it was queued */
  bool used[MAX_REQS];
  bool broken;            /* aborted: an error or a timeout */
} nccl_ctx;

/* ---- check macros ------------------------------------------------------------ */
static em_status nccl_fail(ncclResult_t r, ncclComm_t comm, const char *call, const char *func,
                           int line, em_error *err) {
  const char *last = comm ? ncclGetLastError(comm) : ncclGetLastError(NULL);
  return em_error_set(err, EM_ERR_IO, "NCCL: %s failed: %s%s%s (in %s line %d)", call,
                      ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "", func,
                      line);
}

static em_status cudart_fail(cudaError_t e, const char *call, const char *func, int line,
                             em_error *err) {
  (void)cudaGetLastError(); /* clear it: it is reported here */
  return em_error_set(err, e == cudaErrorMemoryAllocation ? EM_ERR_NOMEM : EM_ERR_IO,
                      "CUDA: %s failed: %s (%s, in %s line %d)", call, cudaGetErrorString(e),
                      cudaGetErrorName(e), func, line);
}

static em_status settle(nccl_ctx *x, double timeout_s, const char *call, em_error *err);

/* An NCCL call on x's communicator; ncclInProgress is waited out. */
#define EM_NCCL_CHECK(x, call, err)                                                  \
  do {                                                                               \
    ncclResult_t r_ = (call);                                                        \
    if (r_ == ncclInProgress)                                                        \
      EM_DIST_TRY(settle((x), nccl_timeout(x), #call, (err)));                       \
    else if (r_ != ncclSuccess)                                                      \
      return nccl_fail(r_, (x)->comm, #call, __func__, __LINE__, (err));             \
  } while (0)

#define EM_CUDART_CHECK(call, err)                                                   \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) return cudart_fail(e_, #call, __func__, __LINE__, (err)); \
  } while (0)

static double nccl_timeout(const nccl_ctx *x) {
  return x->self ? em_comm_timeout(x->self) : em_comm_timeout(x->boot);
}

/* Ends the communicator's kernels and frees it: after an error or a
 * timeout, when a peer may never come. */
static void abort_comm(nccl_ctx *x) {
  if (x->comm) ncclCommAbort(x->comm);
  x->comm = NULL;
  x->broken = true;
}

/* Polls the communicator's state until a non-blocking call is done. */
static em_status settle(nccl_ctx *x, double timeout_s, const char *call, em_error *err) {
  double deadline = em_dist_now() + timeout_s;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(x->comm, &state);
    if (r != ncclSuccess) {
      em_status st = nccl_fail(r, x->comm, "ncclCommGetAsyncError", __func__, __LINE__, err);
      abort_comm(x);
      return st;
    }
    if (state == ncclSuccess) return EM_OK;
    if (state != ncclInProgress) {
      em_status st = nccl_fail(state, x->comm, call, __func__, __LINE__, err);
      abort_comm(x);
      return st;
    }
    if (em_dist_now() > deadline) {
      abort_comm(x);
      return em_error_set(err, EM_ERR_IO, "NCCL: %s did not complete within %.0f s (the NCCL "
                          "communicator was aborted; the timeout is EMBER_DDP_TIMEOUT seconds)",
                          call, timeout_s);
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

/* ---- requests --------------------------------------------------------------- */
static em_status slot_get(nccl_ctx *x, em_comm_req *req, em_error *err) {
  for (int i = 0; i < MAX_REQS; i++)
    if (!x->used[i]) {
      *req = i;
      return EM_OK;
    }
  return em_error_set(err, EM_ERR_INVALID, "NCCL: more than %d collectives in flight", MAX_REQS);
}

/* Whether p is memory of this communicator's GPU (else host memory);
 * memory of another GPU is an error. */
static em_status on_gpu(nccl_ctx *x, const void *p, bool *yes, em_error *err) {
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) { /* not known to CUDA: plain host memory */
    (void)cudaGetLastError();
    *yes = false;
    return EM_OK;
  }
  *yes = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  if (*yes && a.device != x->index)
    return em_error_set(err, EM_ERR_INVALID, "NCCL: a buffer on cuda:%d given to the "
                        "communicator of cuda:%d", a.device, x->index);
  return EM_OK;
}

/* The collective about to be queued must see what the backend's stream
 * has queued so far (the buckets' copies, the weights' last update). */
static em_status after_backend(nccl_ctx *x, em_error *err) {
  const em_backend *be = em_cuda_backend();
  void *s = be && be->stream ? be->stream(x->index) : NULL;
  if (!s) {
    if (be) be->synchronize(x->index);
    return EM_OK;
  }
  EM_CUDART_CHECK(cudaEventRecord(x->before, (cudaStream_t)s), err);
  EM_CUDART_CHECK(cudaStreamWaitEvent(x->stream, x->before, 0), err);
  return EM_OK;
}

static em_status usable(nccl_ctx *x, em_error *err) {
  if (x->broken)
    return em_error_set(err, EM_ERR_IO, "NCCL: the communicator was aborted after an earlier "
                        "error");
  EM_CUDART_CHECK(cudaSetDevice(x->index), err);
  return EM_OK;
}

/* The collective just queued on x->stream: its completion event, and the
 * slot taken. */
static em_status queued(nccl_ctx *x, int slot, em_error *err) {
  EM_CUDART_CHECK(cudaEventRecord(x->after[slot], x->stream), err);
  x->used[slot] = true;
  x->started[slot] = em_dist_now();
  return EM_OK;
}

/* Doubles are host sums (losses, counts): the bootstrap communicator's. */
static em_status nccl_iallreduce_f64(void *ctx, double *buf, int64_t n, em_comm_req *req,
                                     em_error *err) {
  nccl_ctx *x = ctx;
  EM_DIST_TRY(usable(x, err));
  bool gpu;
  EM_DIST_TRY(on_gpu(x, buf, &gpu, err));
  if (gpu)
    return em_error_set(err, EM_ERR_UNSUPPORTED, "NCCL: a sum of doubles in GPU memory (host "
                        "memory only)");
  if (!x->boot->vt->iallreduce_sum_f64) { /* the bootstrap is MPI, which has it */
    return em_error_set(err, EM_ERR_UNSUPPORTED, "NCCL: the bootstrap communicator cannot sum "
                        "doubles");
  }
  EM_DIST_TRY(x->boot->vt->iallreduce_sum_f64(x->boot->ctx, buf, n, req, err));
  *req += MAX_REQS;
  return EM_OK;
}

static em_status nccl_iallreduce(void *ctx, float *buf, int64_t n, em_comm_req *req,
                                 em_error *err) {
  nccl_ctx *x = ctx;
  if (n < 0)
    return em_error_set(err, EM_ERR_INVALID, "NCCL: an all-reduce of %lld floats",
                        (long long)n);
  EM_DIST_TRY(usable(x, err));
  bool gpu;
  EM_DIST_TRY(on_gpu(x, buf, &gpu, err));
  if (!gpu) {
    EM_DIST_TRY(em_comm_iallreduce_sum_f32(x->boot, buf, n, req, err));
    *req += MAX_REQS;
    return EM_OK;
  }
  int slot = 0;
  EM_DIST_TRY(slot_get(x, &slot, err));
  EM_DIST_TRY(after_backend(x, err));
  EM_NCCL_CHECK(x, ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, x->comm, x->stream),
                err);
  EM_DIST_TRY(queued(x, slot, err));
  *req = slot;
  return EM_OK;
}

static em_status nccl_ibroadcast(void *ctx, void *buf, int64_t bytes, int root,
                                 em_comm_req *req, em_error *err) {
  nccl_ctx *x = ctx;
  if (bytes < 0)
    return em_error_set(err, EM_ERR_INVALID, "NCCL: a broadcast of %lld bytes",
                        (long long)bytes);
  EM_DIST_TRY(usable(x, err));
  bool gpu;
  EM_DIST_TRY(on_gpu(x, buf, &gpu, err));
  if (!gpu) {
    EM_DIST_TRY(x->boot->vt->ibroadcast(x->boot->ctx, buf, bytes, root, req, err));
    *req += MAX_REQS;
    return EM_OK;
  }
  int slot = 0;
  EM_DIST_TRY(slot_get(x, &slot, err));
  EM_DIST_TRY(after_backend(x, err));
  EM_NCCL_CHECK(x, ncclBroadcast(buf, buf, (size_t)bytes, ncclUint8, root, x->comm, x->stream),
                err);
  EM_DIST_TRY(queued(x, slot, err));
  *req = slot;
  return EM_OK;
}

static em_status nccl_ibarrier(void *ctx, em_comm_req *req, em_error *err) {
  nccl_ctx *x = ctx;
  EM_DIST_TRY(x->boot->vt->ibarrier(x->boot->ctx, req, err));
  *req += MAX_REQS;
  return EM_OK;
}

static em_status nccl_test(void *ctx, em_comm_req req, bool *done, em_error *err) {
  nccl_ctx *x = ctx;
  if (req >= MAX_REQS) return em_comm_test(x->boot, req - MAX_REQS, done, err);
  if (req < 0 || !x->used[req])
    return em_error_set(err, EM_ERR_INVALID, "NCCL: request %d is not in flight", req);
  EM_DIST_TRY(usable(x, err));
  cudaError_t e = cudaEventQuery(x->after[req]);
  if (e == cudaSuccess) {
    *done = true;
    x->used[req] = false;
    return EM_OK;
  }
  if (e != cudaErrorNotReady) return cudart_fail(e, "cudaEventQuery", __func__, __LINE__, err);
  *done = false;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(x->comm, &state);
  if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
    em_status st = nccl_fail(r != ncclSuccess ? r : state, x->comm,
                             "a collective (ncclCommGetAsyncError)", __func__, __LINE__, err);
    abort_comm(x);
    return st;
  }
  double timeout = nccl_timeout(x);
  if (em_dist_now() - x->started[req] > timeout) {
    abort_comm(x); /* ends the kernels that wait for a peer */
    return em_error_set(err, EM_ERR_IO, "NCCL: a collective did not complete within %.0f s: "
                        "another rank probably died or hangs (ncclCommAbort called; the "
                        "timeout is EMBER_DDP_TIMEOUT seconds)", timeout);
  }
  return EM_OK;
}

static void nccl_abort(void *ctx, int code) {
  nccl_ctx *x = ctx;
  abort_comm(x);
  em_comm_abort(x->boot, code);
}

static void nccl_free(void *ctx) {
  nccl_ctx *x = ctx;
  if (!x) return;
  cudaSetDevice(x->index);
  if (x->comm) { /* flush what is queued, within the timeout; abort otherwise */
    em_error err = {0};
    ncclResult_t r = ncclCommFinalize(x->comm);
    if (r == ncclInProgress)
      r = settle(x, nccl_timeout(x), "ncclCommFinalize", &err) == EM_OK ? ncclSuccess
                                                                         : ncclInternalError;
    if (r == ncclSuccess && x->comm) {
      ncclCommDestroy(x->comm);
      x->comm = NULL;
    }
    abort_comm(x); /* what is left, if anything */
  }
  for (int i = 0; i < MAX_REQS; i++)
    if (x->after[i]) cudaEventDestroy(x->after[i]);
  if (x->before) cudaEventDestroy(x->before);
  if (x->stream) cudaStreamDestroy(x->stream);
  free(x);
}

static const em_comm_vtable nccl_vtable = {
    .name = "nccl",
    .iallreduce_sum_f32 = nccl_iallreduce,
    .test = nccl_test,
    .ibroadcast = nccl_ibroadcast,
    .ibarrier = nccl_ibarrier,
    .abort = nccl_abort,
    .free = nccl_free,
    .iallreduce_sum_f64 = nccl_iallreduce_f64,
};

bool em_comm_nccl_available(void) { return true; }

/* ---- making one ----------------------------------------------------------------- */
/* What a rank can check and set up alone: the device, the node's ranks
 * against its GPUs, the stream and events. */
static em_status local_setup(nccl_ctx *x, em_device dev, em_error *err) {
  if (dev.kind != EM_DEVICE_CUDA) {
    char a[32];
    return em_error_set(err, EM_ERR_INVALID, "NCCL reduces memory of CUDA devices, not %s",
                        em_device_str(dev, a, sizeof a));
  }
  EM_DIST_TRY(em_device_check(dev, err));
  em_device local;
  EM_DIST_TRY(em_dist_local_device(EM_DEVICE_CUDA, &local, err));
  x->index = dev.index;
  EM_CUDART_CHECK(cudaSetDevice(x->index), err);
  EM_CUDART_CHECK(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking), err);
  EM_CUDART_CHECK(cudaEventCreateWithFlags(&x->before, cudaEventDisableTiming), err);
  for (int i = 0; i < MAX_REQS; i++)
    EM_CUDART_CHECK(cudaEventCreateWithFlags(&x->after[i], cudaEventDisableTiming), err);
  return EM_OK;
}

/* Every rank says whether it is fine; EM_OK only when all are. A rank
 * that is fine but learns that another is not fails with a message
 * saying so (the failing one says why). */
static em_status agree(em_comm *boot, em_status mine, const char *what, em_error *err) {
  float bad = mine != EM_OK ? 1.0f : 0.0f;
  em_error e2 = {0};
  em_status st = em_comm_allreduce_sum_f32(boot, &bad, 1, mine != EM_OK ? &e2 : err);
  if (mine != EM_OK) return mine;
  if (st != EM_OK) return st;
  if (bad > 0)
    return em_error_set(err, EM_ERR_IO, "rank %d of %d: %.0f other rank%s could not %s (see "
                        "their messages)", em_comm_rank(boot), em_comm_world(boot), bad,
                        bad > 1 ? "s" : "", what);
  return EM_OK;
}

em_comm *em_comm_nccl_new(em_comm *boot, em_device dev, em_error *err) {
  nccl_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory creating the NCCL communicator");
    return NULL;
  }
  x->boot = boot;
  int rank = em_comm_rank(boot), world = em_comm_world(boot);
  em_status st = agree(boot, local_setup(x, dev, err), "set up their GPU for NCCL", err);

  /* rank 0's unique id, to everyone (with whether rank 0 got one) */
  struct {
    int32_t ok;
    ncclUniqueId id;
  } hello;
  memset(&hello, 0, sizeof hello);
  if (st == EM_OK) {
    em_status idst = EM_OK;
    if (rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&hello.id);
      if (r == ncclSuccess) hello.ok = 1;
      else idst = nccl_fail(r, NULL, "ncclGetUniqueId", __func__, __LINE__, err);
    }
    em_error e2 = {0};
    st = em_comm_broadcast(boot, &hello, (int64_t)sizeof hello, 0, idst != EM_OK ? &e2 : err);
    if (idst != EM_OK) st = idst;
    else if (st == EM_OK && !hello.ok)
      st = em_error_set(err, EM_ERR_IO, "rank %d of %d: rank 0 could not make an NCCL unique "
                        "id (see its message)", rank, world);
  }

  /* everyone joins, non-blocking, bounded by the timeout */
  if (st == EM_OK) {
    em_status mine = EM_OK;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&x->comm, world, hello.id, rank, &cfg);
    if (r == ncclInProgress)
      mine = settle(x, em_comm_timeout(boot), "ncclCommInitRankConfig", err);
    else if (r != ncclSuccess)
      mine = nccl_fail(r, x->comm, "ncclCommInitRankConfig", __func__, __LINE__, err);
    if (mine == EM_OK) {
      cudaError_t e = cudaSetDevice(x->index);
      if (e != cudaSuccess) mine = cudart_fail(e, "cudaSetDevice", __func__, __LINE__, err);
    }
    st = agree(boot, mine, "join the NCCL communicator", err);
  }
  if (st != EM_OK) {
    abort_comm(x);
    nccl_free(x);
    char a[32];
    em_error_prefix(err, "NCCL on %s", em_device_str(dev, a, sizeof a));
    return NULL;
  }
  em_comm *c = em_comm_new(&nccl_vtable, x, rank, world, err);
  if (!c) return NULL;
  c->device = dev;
  c->timeout_s = boot->timeout_s;
  c->cancel = boot->cancel;
  x->self = c;
  return c;
}
