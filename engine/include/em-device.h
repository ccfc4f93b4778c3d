/* em-device.h: where tensors live and where their ops run.
 *
 * A tensor lives on one device: the CPU (the default; a zeroed em_device
 * is the CPU), a CUDA GPU, or the reference device. Ops run where their
 * inputs live; inputs on different devices are a clear error naming both,
 * never a silent copy. Moving data is explicit: em_to_device (scoped, with
 * autograd) and em_tensor_move_ (persistent tensors: parameters, buffers,
 * optimiser state).
 *
 * Each device kind has a backend table (em-backend.h):
 * memory (a caching allocator with the CPU's statistics), copies and the
 * kernels of the device-generic op layer (engine/device/). The CPU keeps
 * its own tuned ops (engine/ops/); every op there hands off to the device
 * layer when its inputs live elsewhere.
 *
 * The reference device ("ref") is the device code path run on the host:
 * its memory is host memory behind the device allocator (with an optional
 * cap, EMBER_REF_DEVICE_MEMORY bytes, so that out-of-memory can be
 * tested), its kernels are the same element and row bodies the CUDA
 * kernels run (engine/device/kernels/), called from host loops. Tests use
 * it to check the device layer against the CPU ops on machines without a
 * GPU; it is slow and not meant for training.
 *
 * Out of device memory: an op cannot return an error, so the allocation
 * that fails records a sticky error on the calling thread (the op, the
 * size asked for and the allocator's state) and the op returns a tensor
 * with no data; every later device op on such a tensor does nothing. The
 * caller (the trainer, once per step) collects it with em_device_error_take
 * and stops cleanly, or retries with a smaller batch. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "em-error.h"
#include "em-tensor.h"

/* em_device_kind and em_device are declared in em-tensor.h (every tensor
 * carries one). */

/* "cpu", "cuda", "cuda:N", "ref", "ref:N". Checks the syntax only. */
em_status em_device_parse(const char *s, em_device *out, em_error *err);
/* "cpu", "cuda:0", "ref:0" into buf; returns buf. */
const char *em_device_str(em_device d, char *buf, size_t n);
/* "cpu", "cuda", "ref" ("unknown" past the last kind). */
const char *em_device_kind_name(em_device_kind k);
static inline em_device em_device_cpu(void) { return (em_device){EM_DEVICE_CPU, 0}; }
static inline bool em_device_eq(em_device a, em_device b) {
  return a.kind == b.kind && (a.kind == EM_DEVICE_CPU || a.index == b.index);
}
static inline bool em_device_is_cpu(em_device d) { return d.kind == EM_DEVICE_CPU; }

/* Whether this build has the backend of kind k (CPU and ref always; CUDA
 * when meson found the toolkit). */
bool em_device_kind_built(em_device_kind k);
/* The number of devices of kind k present (0 when the backend is not
 * built or no device is found; the CPU counts 1). */
int em_device_count(em_device_kind k);
/* EM_OK when d can be used now; otherwise a message a person can act on
 * ("this build has no CUDA backend (meson -Dcuda=enabled)", "no CUDA
 * device is present", "cuda:3 does not exist: 2 CUDA devices (cuda:0,
 * cuda:1)"). */
em_status em_device_check(em_device d, em_error *err);

typedef struct {
  char name[128];          /* "NVIDIA H200", "reference device (host memory)" */
  int64_t total_bytes;     /* device memory */
  int64_t free_bytes;      /* free now, as the driver reports it */
  int compute_major, compute_minor; /* CUDA compute capability; 0 otherwise */
  int multiprocessors;
  bool bf16, f16;          /* fast bf16 / f16 arithmetic */
} em_device_info;
em_status em_device_info_get(em_device d, em_device_info *out, em_error *err);

/* The allocator statistics of d (the CPU's are em_memory_stats_get). */
void em_device_memory_stats(em_device d, em_memory_stats *out);
void em_device_memory_reset_peak(em_device d);
/* Returns d's cached free blocks to the driver. */
void em_device_release_cached(em_device d);
/* Waits until every kernel and copy queued on d has finished. */
void em_device_synchronize(em_device d);

/* ---- tensors on devices ------------------------------------------------ */
/* Scoped tensors on d (em_empty / em_zeros / em_full with a device). */
em_tensor *em_empty_on(em_device d, em_dtype dt, int ndim, const int64_t *shape);
em_tensor *em_zeros_on(em_device d, em_dtype dt, int ndim, const int64_t *shape);
em_tensor *em_full_on(em_device d, em_dtype dt, int ndim, const int64_t *shape, double v);
/* A persistent, zero-filled tensor on d (em_tensor_new with a device);
 * NULL and err filled when d is unusable or its memory is exhausted. */
em_tensor *em_tensor_new_on(em_device d, em_dtype dt, int ndim, const int64_t *shape,
                            em_error *err);
/* Moves a persistent tensor's storage (and its gradient, if any) to d:
 * the values are copied, the old storage is freed, the struct (and so
 * every pointer to it) stays. Views of the old storage are invalid after.
 * Nothing changes when it fails. */
em_status em_tensor_move_(em_tensor *t, em_device d, em_error *err);
/* A scoped copy of x on d (x itself when it is already there). Gradients
 * flow back to x. */
em_tensor *em_to_device(em_tensor *x, em_device d);
/* Copies n = numel(dst) values between a host buffer and a contiguous
 * tensor on any device (synchronous). */
void em_tensor_upload(em_tensor *dst, const void *host);
void em_tensor_download(const em_tensor *src, void *host);

/* ---- page-locked host memory (loader batches bound for a GPU) --------- */
/* Host memory the GPU copies from asynchronously (cudaHostAlloc); plain
 * aligned memory when no GPU backend is built. NULL when exhausted. */
void *em_host_pinned_alloc(size_t nbytes);
void em_host_pinned_free(void *p);

/* ---- out of device memory (see the top of this file) ------------------- */
/* True when an allocation on this thread failed since the last take. */
bool em_device_error_pending(void);
/* Moves the pending error into err (message: "out of memory on cuda:0 in
 * conv2d: asked 1.50 GiB; allocated 70.1 GiB, reserved 71.0 GiB (cached
 * 0.9 GiB in 12 blocks, largest 0.5 GiB), peak 75.2 GiB; device total
 * 139.8 GiB, free 0.4 GiB") and clears it; returns EM_OK when none. The
 * caller then ends the step's scope, which frees what the step held. */
em_status em_device_error_take(em_error *err);
