/* conv-private.h: what the files of conv2d and the 2-D pools share.
 *
 * em_conv2d runs one of three implementations:
 *  - engine/device/kernels/conv-ref.c: the plain 7-loop reference (f32 or
 *    f64, any strides), with a loop backward, shared with the reference
 *    device. f64 always runs here (it exists for gradient checks); the
 *    tests compare the fast paths against it.
 *  - conv-winograd.c: forward and dX of f32 3x3 stride-1 convolutions
 *    with enough channels, as Winograd F(2x2, 3x3) on AVX-512 and AVX2
 *    (2.25x fewer multiply-adds).
 *  - conv-fast.c: every other f32 convolution, as tiles of a small GEMM
 *    micro-kernel (conv-kernel.c): implicit GEMMs over a zero-padded copy
 *    of each image for stride 1 (no im2col matrix), im2col otherwise.
 * Both fast paths split images over the thread pool, each thread taking
 * work from a shared counter and packing into its own scratch slot.
 * The CPU's kernel entries (cpu-conv.c, cpu-pool.c) choose between them;
 * the pools' reference is engine/device/kernels/pool-ref.c. */
#pragma once

#include "ops-private.h"
#include "../device/kernels/conv-ref.h"

/* ---- the variant files' own declarations ------------------------------------
 * conv-kernel.c, conv-fast.c, conv-winograd.c and pool-fast.c are compiled
 * once per instruction set (cpu-kernels.h, which they include first and
 * which renames these per variant); the rest of the engine reaches them
 * through em_cpu_kernels_get(). */
#ifdef EM_ISA
/* ---- micro-kernels (conv-kernel.c), f32 ----------------------------------- */
/* Tile geometry by instruction set: EM_CONV_MR rows by EM_CONV_NR columns
 * (two vectors) of accumulators held in registers. */
#if defined(__AVX512F__)
#define EM_CONV_VL 16
#define EM_CONV_MR 8
#elif defined(__AVX__)
#define EM_CONV_VL 8
#define EM_CONV_MR 6
#else
#define EM_CONV_VL 4
#define EM_CONV_MR 4
#endif
#define EM_CONV_NR (2 * EM_CONV_VL)

/* c (MR, NR, ldc) = a (k, MR) @ B (k, NR): a is a packed panel, row kk of
 * B is the NR floats at b + off[kk]. */
void em_conv_kernel_rows(int64_t k, const float *a, const float *b, const int64_t *off, float *c,
                         int64_t ldc);
/* c (MR, NR, ldc) += A (MR, k) @ b (k, NR): row r of A is the k floats at
 * arow[r], b is a packed panel. */
void em_conv_kernel_acc(int64_t k, const float *const *arow, const float *b, float *c,
                        int64_t ldc);

/* ---- dynamic work split ------------------------------------------------------ */
/* n items over the pool's threads: em_conv_queue_run makes one call of fn
 * per thread; a call claims a scratch slot (em_conv_queue_slot), then
 * takes items until none are left (em_conv_queue_take returns -1), so a
 * thread that the scheduler delays (other jobs on a shared machine)
 * simply takes fewer. */
typedef struct {
  _Atomic int64_t next_item;
  int64_t n_items;
  _Atomic int next_slot;
  int n_slots; /* em_get_num_threads() */
} em_conv_queue;
void em_conv_queue_init(em_conv_queue *q, int64_t n_items);
int em_conv_queue_slot(em_conv_queue *q);
int64_t em_conv_queue_take(em_conv_queue *q);
/* Runs fn(ctx, 0, n_slots) per thread, or once inline when small is set
 * (waking a worker costs microseconds). */
void em_conv_queue_run(em_conv_queue *q, bool small, void (*fn)(void *ctx, int64_t, int64_t),
                       void *ctx);

#endif /* EM_ISA */

/* ---- the fast paths (the geometry and the loop reference: conv-geom.h,
 * conv-ref.h in engine/device/kernels/) ------------------------------------------ */
/* The fast path wants x contiguous (w and b any strides). */
#ifdef EM_ISA
void em_conv2d_fast_forward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                            const em_tensor *b, em_tensor *y);
#endif
#ifdef EM_ISA
void em_conv2d_fast_backward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                             const em_tensor *gy, const em_conv_grads *out);
#endif

/* Winograd F(2x2, 3x3) (conv-winograd.c): 3x3 kernels, stride 1,
 * dilation 1, padding <= 2, at least 8 channels in and out per group, on
 * AVX-512 and AVX2+FMA; forward and dX (dW stays on the direct path, see
 * conv-winograd.c). Same contracts as the fast path; gx is overwritten
 * when fresh, else accumulated. */
#ifdef EM_ISA
bool em_conv_winograd_ok(const em_conv_geom *g);
void em_conv_winograd_forward(const em_conv_geom *g, const em_tensor *x, const em_tensor *w,
                              const em_tensor *b, em_tensor *y);
void em_conv_winograd_backward_x(const em_conv_geom *g, const em_tensor *w,
                                 const em_tensor *gy, em_tensor *gx, bool fresh);
#endif

/* The CPU's kernels that always run the loop reference (cpu-conv.c,
 * cpu-pool.c), for the entry points below. */
em_k_conv2d_forward em_cpu_conv2d_ref_forward;
em_k_conv2d_backward em_cpu_conv2d_ref_backward;
em_k_pool2d_forward em_cpu_pool2d_ref_forward;
em_k_pool2d_backward em_cpu_pool2d_ref_backward;

/* The reference entry points with autograd, for tests: same semantics as
 * em_conv2d / em_max_pool2d / em_avg_pool2d, always on the loop
 * reference (f32 or f64). */
em_tensor *em_conv2d_ref(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p);
em_tensor *em_max_pool2d_ref(em_tensor *x, const em_pool2d_params *p);
em_tensor *em_avg_pool2d_ref(em_tensor *x, const em_pool2d_params *p);
