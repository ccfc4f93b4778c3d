/* dist-no-mpi.c: the MPI communicator's stand-in in a build without MPI:
 * asking for one is a clear error. */
#include "dist-private.h"

bool em_comm_mpi_available(void) { return false; }

em_comm *em_comm_mpi_new(int *argc, char ***argv, em_error *err) {
  (void)argc;
  (void)argv;
  em_error_set(err, EM_ERR_UNSUPPORTED,
               "this ember was built without MPI, so it cannot train data-parallel: install "
               "Open MPI (libopenmpi-dev, openmpi-bin) and reconfigure the build "
               "(meson setup --reconfigure BUILD -Dmpi=enabled)");
  return NULL;
}
