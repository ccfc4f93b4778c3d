/* cuda-check.h: the check macros of the CUDA backend (engine/cuda): how a
 * failed CUDA runtime call is recorded and what it becomes. C and C++
 * (cuda-private.h includes it for the .cu files; a C test of the backend
 * may include it on its own, with the toolkit's include folder). */
#pragma once

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "em-error.h"

/* ---- check macros ------------------------------------------------------- */
/* Each records the failed call's text, the library's message, the function
 * and the line in a thread-local error (em_cuda_last_error) and
 * returns a status (EM_ERR_NOMEM for an allocation failure, else
 * EM_ERR_UNSUPPORTED). */
em_status em_cuda_check_rt(cudaError_t e, const char *call, const char *func, int line);
/* The message of the last failed call on this thread. */
const em_error *em_cuda_last_error(void);

#define EM_CUDA_CHECK(call) em_cuda_check_rt((call), #call, __func__, __LINE__)

/* A failure outside a kernel entry (making a device's context, the
 * backend's copies, synchronize and allocator frees, which return void)
 * becomes the thread's device error (em_device_error_raise, unless one
 * is pending) with the recorded message, which names the call, the
 * function and the line; the caller goes on. From then on the ops skip
 * their kernels (em-device.h) and the trainer stops the run with that
 * message, as after a failed kernel: a host copy that failed leaves its
 * destination unread, and nothing aborts. */
void em_cuda_fail_raise(void);
#define EM_CUDA_RAISE(call) \
  do { if (EM_CUDA_CHECK(call) != EM_OK) em_cuda_fail_raise(); } while (0)

/* A failure inside a kernel entry (em_k_* of em-backend.h) becomes the
 * entry's status instead: EM_CUDA_KCHECK latches the first failed call of
 * the entry on this thread (its recorded message names the call, the
 * function and the line), the entry goes on (later calls on a failed
 * stream fail too, harmlessly: nothing is read back on the host) and
 * returns em_cuda_kernel_end(), which takes the latch, hands its message
 * to em_kernel_fail and resets it. So every helper of an entry keeps its
 * plain shape and no failure aborts the process. */
void em_cuda_kernel_fail(void);
em_status em_cuda_kernel_end(void);
#define EM_CUDA_KCHECK(call) \
  do { if (EM_CUDA_CHECK(call) != EM_OK) em_cuda_kernel_fail(); } while (0)
/* After a <<<...>>> launch (only inside kernel entries): a bad
 * configuration shows up here. */
#define EM_CUDA_LAUNCHED() EM_CUDA_KCHECK(cudaGetLastError())

#ifdef __cplusplus
}
#endif
