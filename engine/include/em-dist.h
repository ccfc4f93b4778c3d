/* em-dist.h: data-parallel training across processes.
 *
 * A communicator is a small table of collectives plus a context (house
 * style 7): rank, world, all-reduce (sum or average, f32, in place;
 * blocking, or started and then tested/waited for), broadcast, barrier,
 * abort. Open MPI is the CPU implementation (em_comm_mpi_new, built when
 * meson finds MPI); NCCL is the GPU path of the same table
 * (em_comm_nccl_new, built when meson finds MPI, CUDA and NCCL), its
 * unique id broadcast over an MPI communicator, one process per GPU.
 * A communicator reduces buffers in the memory of one device
 * (em_comm_device): host memory for MPI, cuda:N memory for NCCL.
 *
 * Every wait is bounded: a collective that does not complete within the
 * communicator's timeout (default 30 s, EMBER_DDP_TIMEOUT=seconds) fails
 * with EM_ERR_IO and a message naming the call, so that a rank whose peer
 * died reports it instead of hanging. After such an error the caller
 * must em_comm_abort: a collective still in flight cannot be cancelled.
 * Beside the collectives, ranks send short notices (comm-notice.c): a
 * failure, "busy" while rank 0 writes a checkpoint (no timeout then), and
 * how each rank ends (em_comm_end), so that the ranks agree on how a job
 * ends before anyone aborts it.
 *
 * em_ddp is the gradient bucketer of DistributedDataParallel: the
 * parameters, in reverse order (the order backward finalises them), are
 * grouped into buckets of about bucket_mb; during backward, as soon as
 * every gradient of a bucket is final (the autograd hook of em-tensor.h),
 * the bucket is copied into a flat buffer and its all-reduce starts
 * while backward goes on; em_ddp_finish waits for all of them and writes
 * the averaged gradients back. The buckets live where the gradients do
 * (em-device.h): on a device they are device buffers, filled and read
 * back with the device's copies and kernels; gradients on a CUDA device
 * are reduced with NCCL (EMBER_DDP_COMM=mpi: with MPI, through host
 * buffers). */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "em-device.h"
#include "em-error.h"
#include "em-tensor.h"

/* ---- the communicator ----------------------------------------------------- */
typedef struct em_comm em_comm;

/* A request of a started all-reduce; done or waited for once. */
typedef int em_comm_req;

typedef struct em_comm_vtable {
  const char *name; /* "mpi", "nccl", "fake" */
  /* In-place sum over all ranks of buf (n floats), started: *req
   * identifies it until test says done or wait returns. */
  em_status (*iallreduce_sum_f32)(void *ctx, float *buf, int64_t n, em_comm_req *req,
                                  em_error *err);
  /* *done is set when req completed (its buffer then holds the sum). */
  em_status (*test)(void *ctx, em_comm_req req, bool *done, em_error *err);
  /* Broadcast of bytes from root, started (then test/wait like an
   * all-reduce). */
  em_status (*ibroadcast)(void *ctx, void *buf, int64_t bytes, int root, em_comm_req *req,
                          em_error *err);
  em_status (*ibarrier)(void *ctx, em_comm_req *req, em_error *err);
  /* Ends every rank of the job (the process does not return). NULL: the
   * implementation has no peers to end; the caller just exits. */
  void (*abort)(void *ctx, int code);
  void (*free)(void *ctx); /* finalises (NULL is fine) */
  /* As iallreduce_sum_f32 for n doubles in host memory: loss sums and
   * sample counts, exact as a single process has them. NULL: summed
   * through floats (em_comm_allreduce_sum_f64). */
  em_status (*iallreduce_sum_f64)(void *ctx, double *buf, int64_t n, em_comm_req *req,
                                  em_error *err);
  /* The side channel of notices (below): sends the bytes (at most
   * EM_COMM_NOTICE_MAX) to rank `to` without waiting, and takes one that
   * arrived, if any (*got; *from its sender). Messages from one rank
   * arrive in the order sent. NULL: none (nothing is said or heard). */
  em_status (*notify)(void *ctx, int to, const void *msg, int bytes, em_error *err);
  em_status (*poll)(void *ctx, void *msg, int cap, int *from, bool *got, em_error *err);
} em_comm_vtable;

#define EM_COMM_NOTICE_MAX 1100

/* Takes ownership of ctx (vt->free releases it). */
em_comm *em_comm_new(const em_comm_vtable *vt, void *ctx, int rank, int world, em_error *err);
/* Initialises MPI (MPI_THREAD_FUNNELED) over MPI_COMM_WORLD, its errors
 * returned rather than fatal. EM_ERR_UNSUPPORTED, with a message saying
 * how to get it, when this build has no MPI. */
em_comm *em_comm_mpi_new(int *argc, char ***argv, em_error *err);
/* Whether this build can make an MPI communicator. */
bool em_comm_mpi_available(void);
/* NCCL over the GPU dev (cuda:N) of this process, bootstrapped over an
 * MPI communicator (borrowed: it must outlive the result, and every rank
 * of it calls this together): rank 0 makes the unique id and broadcasts
 * it, each rank joins with its own GPU. Buffers of its collectives are
 * dev's memory; a host buffer given to it (a scalar, a loss) goes through
 * the bootstrap communicator instead. Fails on every rank (never hangs)
 * when any rank cannot join: no GPU, more ranks on a node than GPUs,
 * NCCL's own errors; EM_ERR_UNSUPPORTED when this build has no NCCL. */
em_comm *em_comm_nccl_new(em_comm *bootstrap, em_device dev, em_error *err);
/* Whether this build can make an NCCL communicator. */
bool em_comm_nccl_available(void);
/* The device of kind `kind` this rank should use: index = its rank on
 * its node (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID;
 * 0 outside a job), one process per GPU. An error saying so when the
 * node has more ranks than devices of that kind (for kinds that have
 * several devices: CUDA). */
em_status em_dist_local_device(em_device_kind kind, em_device *out, em_error *err);
void em_comm_free(em_comm *c); /* finalises; NULL is fine */

int em_comm_rank(const em_comm *c);
int em_comm_world(const em_comm *c);
const char *em_comm_name(const em_comm *c);
/* Where the buffers of c's collectives live: the CPU (host memory; the
 * reference device's memory is host memory too) or cuda:N. */
em_device em_comm_device(const em_comm *c);
/* Seconds a wait may last before it fails (> 0); EMBER_DDP_TIMEOUT sets
 * it in em_comm_new, which refuses a value that is not a number > 0. */
void em_comm_set_timeout(em_comm *c, double seconds);
double em_comm_timeout(const em_comm *c);

/* Blocking collectives, bounded by the timeout. */
em_status em_comm_allreduce_sum_f32(em_comm *c, float *buf /* (n) */, int64_t n, em_error *err);
/* buf in host memory; through floats where the implementation has no
 * double sum. */
em_status em_comm_allreduce_sum_f64(em_comm *c, double *buf /* (n) */, int64_t n, em_error *err);
/* (avg divides on the host: buf is host memory.) */
em_status em_comm_allreduce_avg_f32(em_comm *c, float *buf /* (n) */, int64_t n, em_error *err);
em_status em_comm_broadcast(em_comm *c, void *buf, int64_t bytes, int root, em_error *err);
em_status em_comm_barrier(em_comm *c, em_error *err);
/* Non-blocking all-reduce (sum), test and bounded wait. */
em_status em_comm_iallreduce_sum_f32(em_comm *c, float *buf /* (n) */, int64_t n,
                                     em_comm_req *req, em_error *err);
em_status em_comm_test(em_comm *c, em_comm_req req, bool *done, em_error *err);
em_status em_comm_wait(em_comm *c, em_comm_req req, const char *what, em_error *err);
/* A flag (borrowed; NULL: none) that, once set, makes a wait that has
 * already lasted 2 s give up with EM_ERR_CANCELLED: a process asked to
 * stop (mpirun sends SIGTERM when another rank died) stops waiting for
 * a peer that is gone instead of waiting out the timeout; peers that
 * were asked too reach the collective well within the 2 s. Not while a
 * peer said it is busy (em_comm_say_busy): that peer is alive and will
 * come. */
void em_comm_set_cancel(em_comm *c, const atomic_bool *flag);
/* Ends the whole job with code (MPI_Abort); returns only for a
 * communicator without peers to end. */
void em_comm_abort(em_comm *c, int code);

/* ---- notices (comm-notice.c) -------------------------------------------------
 * Every wait takes the notices that arrived. A peer's failure makes the
 * wait (and every later one) fail at once with the peer's status and
 * "rank N: its message", instead of timing out on a peer that will not
 * come. A peer that said it is busy (rank 0 writing a checkpoint) is
 * waited for without the timeout until it says it is idle again; a
 * frozen rank 0 in that window is not detected. */
/* Tells every other rank that this one failed with e. */
void em_comm_say_failed(em_comm *c, const em_error *e);
/* Tells every other rank that this one works alone for a while (busy),
 * or is back (idle: their timeout starts again). */
void em_comm_say_busy(em_comm *c, bool busy);
/* The first rank heard failing, or -1. */
int em_comm_peer_failed(const em_comm *c);

/* How a job ends, agreed by em_comm_end. */
typedef struct {
  int code;     /* the exit code every rank takes */
  bool failed;  /* some rank failed (or did not say): end with em_comm_abort */
  bool heard;   /* ranks other than 0: rank 0 answered within the timeout */
} em_comm_ending;

/* Called on rank 0 for each other rank that failed, with its message
 * ("" when it only echoed another rank's failure). */
typedef void (*em_comm_failure_fn)(void *user, int rank, const char *msg);

/* The end of a job, called once by every rank when it is done: each rank
 * says how it ends (code: its exit code; failed; msg: its error, or "")
 * to rank 0, which waits for all of them (bounded by the timeout), hands
 * the failed ones to report, and sends everyone the job's ending: the
 * first failure's code, else rank 0's code when non-zero, else the first
 * other non-zero code (a stop by a signal that reached one rank). Ranks
 * other than 0 wait for that answer (without the timeout while rank 0 is
 * busy). A rank that did not say in time counts as failed. */
void em_comm_end(em_comm *c, int code, bool failed, const char *msg,
                 em_comm_failure_fn report, void *user, em_comm_ending *out);

/* ---- the gradient bucketer ------------------------------------------------- */
typedef struct em_ddp em_ddp;

typedef enum {
  EM_DDP_COMM_AUTO, /* NCCL for CUDA gradients when built, else the given one */
  EM_DDP_COMM_MPI,  /* always the communicator given to em_ddp_new */
  EM_DDP_COMM_NCCL, /* NCCL for CUDA gradients; an error when not built */
  EM_DDP_COMM_BAD,  /* EMBER_DDP_COMM held something else: em_ddp_new fails */
} em_ddp_comm;

typedef struct {
  double bucket_mb; /* bucket capacity; default 1 (EMBER_DDP_BUCKET_MB) */
  bool overlap;     /* start buckets during backward; default true
                       (EMBER_DDP_OVERLAP=0: all after backward, for measuring) */
  bool progress;    /* test pending requests between tape nodes, so that the
                       MPI library progresses them; default true
                       (EMBER_DDP_PROGRESS=0 turns it off) */
  em_ddp_comm comm; /* who reduces gradients on a CUDA device; default
                       auto (EMBER_DDP_COMM=auto|mpi|nccl) */
  bool staging;     /* reduce device buckets through host buffers even when
                       the communicator can read the device's memory (the
                       reference device): tests the path of MPI with CUDA
                       gradients; default false (EMBER_DDP_STAGING=1) */
} em_ddp_options;

/* The defaults, then the EMBER_DDP_* environment variables over them
 * (an unknown EMBER_DDP_COMM value is kept as an error that em_ddp_new
 * reports). */
void em_ddp_options_defaults(em_ddp_options *o);

/* What the bucketer measured over the steps since em_ddp_new. */
typedef struct {
  int64_t steps;
  int n_buckets;
  int64_t bytes_per_step;   /* bytes all-reduced per step (f32 gradients) */
  double backward_s;        /* total time inside backwards with the hooks */
  double comm_s;            /* total time from each step's first bucket start to
                               its last bucket's completion */
  double exposed_s;         /* total time em_ddp_finish waited (not hidden) */
  double finish_s;          /* total time of em_ddp_finish (wait + average + copy) */
  const char *comm;         /* the communicator reducing the buckets: "mpi", "nccl" */
  em_device device;         /* where the buckets live */
  bool staged;              /* reduced through host copies of the buckets */
} em_ddp_stats;

/* params: the model's parameters (borrowed; the order of em_model_param),
 * all on one device. The communicator is borrowed. A collective: every
 * rank of c calls it (it may set up NCCL over c). */
em_ddp *em_ddp_new(em_comm *c, int n, em_tensor *const *params, const em_ddp_options *o,
                   em_error *err);
void em_ddp_free(em_ddp *d); /* NULL is fine */
/* Puts the buckets (and, for CUDA gradients, the NCCL communicator) on
 * the device the parameters live on now, when they moved since the last
 * call; a collective like em_ddp_new. The trainer calls it at the start
 * of each run; em_ddp_backward_begin does too (its errors then reported
 * by em_ddp_finish). */
em_status em_ddp_prepare(em_ddp *d, em_error *err);
/* Around the backward of the micro-batch that ends an optimiser step:
 * begin installs the autograd hooks on this thread, end removes them
 * and starts any bucket not started yet. */
void em_ddp_backward_begin(em_ddp *d);
void em_ddp_backward_end(em_ddp *d);
/* Waits for every bucket, divides by world and writes the gradients. */
em_status em_ddp_finish(em_ddp *d, em_error *err);
void em_ddp_get_stats(const em_ddp *d, em_ddp_stats *out);
/* A hash of the bucket layout (each bucket's size and parameters): ranks
 * whose layouts differ would issue mismatched all-reduces. */
uint32_t em_ddp_layout_hash(const em_ddp *d);
/* Broadcasts the tensors (f32 or f64, contiguous) from rank 0, e.g. the
 * initial weights so that every replica starts equal. A tensor on a
 * device whose memory c cannot read goes through a host copy. */
em_status em_ddp_broadcast_tensors(em_comm *c, int n, em_tensor *const *ts, em_error *err);
