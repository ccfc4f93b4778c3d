/* dist-mpi.c: the communicator over MPI (Open MPI on the CPU).
 *
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN, so that a failing call comes
 * back as a status (through EM_MPI_CHECK, which names the call, function
 * and line) rather than ending the process from inside the library.
 * Collectives are the non-blocking ones (MPI_Iallreduce, MPI_Ibcast,
 * MPI_Ibarrier): comm.c waits on them with a timeout, so no call here
 * can block for ever. Requests live in a small table of slots.
 *
 * The side channel of notices (comm-notice.c) is point-to-point on a
 * duplicate of MPI_COMM_WORLD, so a notice never matches a collective:
 * one receive from any rank is always posted, and sends go out with
 * MPI_Isend from buffers of their own, completed as later calls test
 * them. */
#include "dist-private.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQS 256
#define MAX_SENDS 64 /* notices in flight */

typedef struct {
  MPI_Request reqs[MAX_REQS];
  bool used[MAX_REQS];
  bool we_initialised; /* MPI_Finalize is ours to call */
  MPI_Comm side;       /* the notices' communicator, or MPI_COMM_NULL */
  MPI_Request recv;    /* the posted receive of a notice */
  char inbox[EM_COMM_NOTICE_MAX];
  MPI_Request sends[MAX_SENDS];
  char outbox[MAX_SENDS][EM_COMM_NOTICE_MAX];
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

/* ---- notices ------------------------------------------------------------------ */
static em_status mpi_notify(void *ctx, int to, const void *msg, int bytes, em_error *err) {
  mpi_ctx *m = ctx;
  if (m->side == MPI_COMM_NULL) return EM_OK;
  if (bytes < 0 || bytes > EM_COMM_NOTICE_MAX)
    return em_error_set(err, EM_ERR_INVALID, "MPI: a notice of %d bytes is too long", bytes);
  for (int i = 0; i < MAX_SENDS; i++) {
    if (m->sends[i] != MPI_REQUEST_NULL) {
      int flag = 0;
      EM_MPI_CHECK(MPI_Test(&m->sends[i], &flag, MPI_STATUS_IGNORE), err);
      if (!flag) continue;
    }
    memcpy(m->outbox[i], msg, (size_t)bytes);
    EM_MPI_CHECK(MPI_Isend(m->outbox[i], bytes, MPI_BYTE, to, 0, m->side, &m->sends[i]), err);
    return EM_OK;
  }
  /* every slot in flight (a job of more ranks than slots, told one thing
   * each): wait for one, since a notice dropped is a peer that times out
   * or an orderly end taken for a failure; a notice is a small message,
   * sent eagerly, so the wait is short */
  int i = MPI_UNDEFINED;
  EM_MPI_CHECK(MPI_Waitany(MAX_SENDS, m->sends, &i, MPI_STATUS_IGNORE), err);
  if (i == MPI_UNDEFINED) i = 0;
  memcpy(m->outbox[i], msg, (size_t)bytes);
  EM_MPI_CHECK(MPI_Isend(m->outbox[i], bytes, MPI_BYTE, to, 0, m->side, &m->sends[i]), err);
  return EM_OK;
}

static em_status mpi_poll(void *ctx, void *msg, int cap, int *from, bool *got, em_error *err) {
  mpi_ctx *m = ctx;
  *got = false;
  if (m->side == MPI_COMM_NULL) return EM_OK;
  int flag = 0, n = 0;
  MPI_Status status;
  EM_MPI_CHECK(MPI_Test(&m->recv, &flag, &status), err);
  if (!flag) return EM_OK;
  MPI_Get_count(&status, MPI_BYTE, &n);
  memset(msg, 0, (size_t)cap);
  memcpy(msg, m->inbox, (size_t)(n < cap ? n : cap));
  *from = status.MPI_SOURCE;
  *got = true;
  EM_MPI_CHECK(MPI_Irecv(m->inbox, EM_COMM_NOTICE_MAX, MPI_BYTE, MPI_ANY_SOURCE, 0, m->side,
                         &m->recv),
               err);
  return EM_OK;
}

/* Withdraws the posted receive and lets the sends go (a peer that is
 * gone never takes them). */
static void side_close(mpi_ctx *m) {
  if (m->side == MPI_COMM_NULL) return;
  if (m->recv != MPI_REQUEST_NULL) {
    MPI_Cancel(&m->recv);
    MPI_Wait(&m->recv, MPI_STATUS_IGNORE);
  }
  for (int i = 0; i < MAX_SENDS; i++)
    if (m->sends[i] != MPI_REQUEST_NULL) MPI_Request_free(&m->sends[i]);
  MPI_Comm_free(&m->side);
}

static void mpi_abort(void *ctx, int code) {
  (void)ctx;
  MPI_Abort(MPI_COMM_WORLD, code);
}

static void mpi_free(void *ctx) {
  mpi_ctx *m = ctx;
  int fin = 0;
  MPI_Finalized(&fin);
  if (m && !fin) side_close(m);
  if (m && m->we_initialised && !fin) MPI_Finalize();
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
    .notify = mpi_notify,
    .poll = mpi_poll,
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
  m->side = MPI_COMM_NULL;
  m->recv = MPI_REQUEST_NULL;
  for (int i = 0; i < MAX_SENDS; i++) m->sends[i] = MPI_REQUEST_NULL;
  /* the notices' channel (without it the ranks only time out) */
  if (world > 1 && MPI_Comm_dup(MPI_COMM_WORLD, &m->side) == MPI_SUCCESS) {
    MPI_Comm_set_errhandler(m->side, MPI_ERRORS_RETURN);
    if (MPI_Irecv(m->inbox, EM_COMM_NOTICE_MAX, MPI_BYTE, MPI_ANY_SOURCE, 0, m->side,
                  &m->recv) != MPI_SUCCESS) {
      MPI_Comm_free(&m->side);
      m->side = MPI_COMM_NULL;
    }
  }
  return em_comm_new(&mpi_vtable, m, rank, world, err);
}
