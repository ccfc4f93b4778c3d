/* dist-mpi.c: the communicator over MPI (Open MPI on the CPU).
 *
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN, so that a failing call comes
 * back as a status (through EM_MPI_CHECK, which names the call, function
 * and line) rather than ending the process from inside the library.
 * Collectives are the non-blocking ones (MPI_Iallreduce, MPI_Ibcast,
 * MPI_Ibarrier): comm.c waits on them with a timeout, so no call here
 * can block for ever. Requests live in a small table of slots. */
#include "dist-private.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

#define MAX_REQS 256

typedef struct {
  MPI_Request reqs[MAX_REQS];
  bool used[MAX_REQS];
  bool we_initialised; /* MPI_Finalize is ours to call */
} mpi_ctx;

static em_status mpi_fail(int rc, const char *call, const char *func, int line, em_error *err) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return em_error_set(err, EM_ERR_IO, "MPI: %s failed (%s, in %s line %d)", call, msg, func,
                      line);
}

#define EM_MPI_CHECK(call, err)                                           \
  do {                                                                    \
    int rc_ = (call);                                                     \
    if (rc_ != MPI_SUCCESS) return mpi_fail(rc_, #call, __func__, __LINE__, err); \
  } while (0)

static em_status slot_get(mpi_ctx *m, em_comm_req *req, em_error *err) {
  for (int i = 0; i < MAX_REQS; i++)
    if (!m->used[i]) {
      m->used[i] = true;
      *req = i;
      return EM_OK;
    }
  return em_error_set(err, EM_ERR_INVALID, "MPI: more than %d collectives in flight", MAX_REQS);
}

/* In-place sum of n values of type dt (named for messages) over all ranks. */
static em_status mpi_iallreduce_of(mpi_ctx *m, void *buf, int64_t n, MPI_Datatype dt,
                                   const char *values, em_comm_req *req, em_error *err) {
  if (n < 0 || n > INT_MAX)
    return em_error_set(err, EM_ERR_INVALID, "MPI: an all-reduce of %lld %s is too large",
                        (long long)n, values);
  EM_DIST_TRY(slot_get(m, req, err));
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, dt, MPI_SUM, MPI_COMM_WORLD, &m->reqs[*req]);
  if (rc != MPI_SUCCESS) {
    m->used[*req] = false;
    return mpi_fail(rc, "MPI_Iallreduce", __func__, __LINE__, err);
  }
  return EM_OK;
}

static em_status mpi_iallreduce(void *ctx, float *buf, int64_t n, em_comm_req *req,
                                em_error *err) {
  return mpi_iallreduce_of(ctx, buf, n, MPI_FLOAT, "floats", req, err);
}

static em_status mpi_iallreduce_f64(void *ctx, double *buf, int64_t n, em_comm_req *req,
                                    em_error *err) {
  return mpi_iallreduce_of(ctx, buf, n, MPI_DOUBLE, "doubles", req, err);
}

static em_status mpi_ibroadcast(void *ctx, void *buf, int64_t bytes, int root, em_comm_req *req,
                                em_error *err) {
  mpi_ctx *m = ctx;
  if (bytes < 0 || bytes > INT_MAX)
    return em_error_set(err, EM_ERR_INVALID, "MPI: a broadcast of %lld bytes is too large",
                        (long long)bytes);
  EM_DIST_TRY(slot_get(m, req, err));
  int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &m->reqs[*req]);
  if (rc != MPI_SUCCESS) {
    m->used[*req] = false;
    return mpi_fail(rc, "MPI_Ibcast", __func__, __LINE__, err);
  }
  return EM_OK;
}

static em_status mpi_ibarrier(void *ctx, em_comm_req *req, em_error *err) {
  mpi_ctx *m = ctx;
  EM_DIST_TRY(slot_get(m, req, err));
  int rc = MPI_Ibarrier(MPI_COMM_WORLD, &m->reqs[*req]);
  if (rc != MPI_SUCCESS) {
    m->used[*req] = false;
    return mpi_fail(rc, "MPI_Ibarrier", __func__, __LINE__, err);
  }
  return EM_OK;
}

static em_status mpi_test(void *ctx, em_comm_req req, bool *done, em_error *err) {
  mpi_ctx *m = ctx;
  if (req < 0 || req >= MAX_REQS || !m->used[req])
    return em_error_set(err, EM_ERR_INVALID, "MPI: request %d is not in flight", req);
  int flag = 0;
  EM_MPI_CHECK(MPI_Test(&m->reqs[req], &flag, MPI_STATUS_IGNORE), err);
  *done = flag != 0;
  if (flag) m->used[req] = false;
  return EM_OK;
}

static void mpi_abort(void *ctx, int code) {
  (void)ctx;
  MPI_Abort(MPI_COMM_WORLD, code);
}

static void mpi_free(void *ctx) {
  mpi_ctx *m = ctx;
  if (m && m->we_initialised) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  free(m);
}

static const em_comm_vtable mpi_vtable = {
    .name = "mpi",
    .iallreduce_sum_f32 = mpi_iallreduce,
    .test = mpi_test,
    .ibroadcast = mpi_ibroadcast,
    .ibarrier = mpi_ibarrier,
    .abort = mpi_abort,
    .free = mpi_free,
    .iallreduce_sum_f64 = mpi_iallreduce_f64,
};

bool em_comm_mpi_available(void) { return true; }

em_comm *em_comm_mpi_new(int *argc, char ***argv, em_error *err) {
  mpi_ctx *m = calloc(1, sizeof *m);
  if (!m) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory creating the MPI communicator");
    return NULL;
  }
  int inited = 0, provided = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      free(m);
      em_error_set(err, EM_ERR_IO, "MPI_Init_thread failed: is this run under mpirun?");
      return NULL;
    }
    m->we_initialised = true;
  }
  int rank = 0, world = 1;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return em_comm_new(&mpi_vtable, m, rank, world, err);
}
