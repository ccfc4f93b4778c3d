/* cuda-none.c: the CUDA backend of a build without the CUDA toolkit
 * (meson -Dcuda=disabled, or auto without nvcc): there is none, and
 * em_device_check says how to get one. */
#include "device-private.h"

const em_backend *em_cuda_backend(void) { return NULL; }
