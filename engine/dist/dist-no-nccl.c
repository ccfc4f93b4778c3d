/* dist-no-nccl.c: the NCCL communicator's stand-in in a build without
 * it (no MPI to bootstrap it, no CUDA backend, or no NCCL): asking for
 * one is a clear error. */
#include "dist-private.h"

bool em_comm_nccl_available(void) { return false; }

em_comm *em_comm_nccl_new(em_comm *bootstrap, em_device dev, em_error *err) {
  (void)bootstrap;
  (void)dev;
  em_error_set(err, EM_ERR_UNSUPPORTED,
               "this ember was built without NCCL, so it cannot reduce gradients across GPUs "
               "with it: NCCL needs MPI, the CUDA backend and NCCL (nccl.h and libnccl in the "
               "CUDA toolkit) when the build is configured; EMBER_DDP_COMM=mpi reduces CUDA "
               "gradients over MPI instead");
  return NULL;
}
