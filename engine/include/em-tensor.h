/* em-tensor.h: tensors, step scopes, the caching allocator and the
 * autograd tape of libember.
 *
 * A tensor is a small flat struct: dtype, shape, strides (in elements),
 * an offset into the storage it views, its gradient and the tape node
 * that made it. There are no reference counts:
 *
 *  - Tensors made by ops belong to the innermost open scope of the calling
 *    thread (em_scope_begin / em_scope_end) and are released together
 *    when it ends. Their memory comes from a size-class caching allocator
 *    and their structs from an arena that keeps its chunks, so a training
 *    step does no malloc once it has run once.
 *  - Persistent tensors (parameters, buffers, optimiser state) are made
 *    with em_tensor_new and freed with em_tensor_free. Their .grad is
 *    persistent too.
 *  - Anything kept past a step is copied out (em_tensor_item, or
 *    em_tensor_copy_ into a persistent tensor).
 *
 * Autograd is define-by-run: an op whose inputs require grad (while grad
 * mode is on) appends a node to the scope's tape; em_backward walks the
 * tape in reverse and accumulates into .grad. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "em-error.h"

#define EM_MAX_DIMS 8

typedef enum {
  EM_DTYPE_F32 = 0,
  EM_DTYPE_F64,
  EM_DTYPE_I32,
  EM_DTYPE_I64,
  EM_DTYPE_U8,
  EM_DTYPE_COUNT
} em_dtype;

size_t em_dtype_size(em_dtype dt);
const char *em_dtype_name(em_dtype dt);
bool em_dtype_is_float(em_dtype dt);

typedef struct em_node em_node;

/* Where a tensor's storage lives (em-device.h); zero is the CPU. */
typedef enum {
  EM_DEVICE_CPU = 0,
  EM_DEVICE_CUDA,
  EM_DEVICE_REF, /* the device code path run on the host (tests) */
  EM_DEVICE_KIND_COUNT
} em_device_kind;
typedef struct {
  uint8_t kind;  /* em_device_kind */
  uint8_t index; /* which device of that kind */
} em_device;

enum {
  EM_TENSOR_REQUIRES_GRAD = 1u << 0,
  EM_TENSOR_PERSISTENT = 1u << 1, /* made by em_tensor_new: caller frees */
  EM_TENSOR_OWNS_DATA = 1u << 2,  /* persistent and owns its data */
  EM_TENSOR_GRAD_STALE = 1u << 3, /* .grad holds old values: overwrite, don't add */
};

typedef struct em_tensor {
  em_dtype dtype;
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  int64_t stride[EM_MAX_DIMS]; /* in elements */
  int64_t offset;              /* in elements, from data */
  void *data;                  /* base of the storage this tensor views */
  struct em_tensor *grad;      /* contiguous, same shape; NULL until backward */
  em_node *grad_fn;            /* the tape node that made it, or NULL (leaf) */
  uint32_t flags;
  em_device device;            /* where data lives; zero: the CPU */
  const char *name;            /* optional, for messages and the profiler */
} em_tensor;
/* True when t lives off the CPU (its ops go to the device layer). */
static inline bool em_on_device(const em_tensor *t) { return t->device.kind != EM_DEVICE_CPU; }

/* ---- shapes ---------------------------------------------------------- */
int64_t em_tensor_numel(const em_tensor *t);
size_t em_tensor_nbytes(const em_tensor *t);
bool em_tensor_is_contiguous(const em_tensor *t);
bool em_tensor_same_shape(const em_tensor *a, const em_tensor *b);
/* Pointer to the first element (data + offset). */
static inline void *em_tensor_ptr(const em_tensor *t) {
  extern const size_t em_dtype_sizes_[];
  return (char *)t->data + t->offset * (int64_t)em_dtype_sizes_[t->dtype];
}
static inline float *em_f32(const em_tensor *t) { return (float *)em_tensor_ptr(t); }
static inline double *em_f64(const em_tensor *t) { return (double *)em_tensor_ptr(t); }
static inline int64_t *em_i64(const em_tensor *t) { return (int64_t *)em_tensor_ptr(t); }
static inline bool em_tensor_requires_grad(const em_tensor *t) {
  return (t->flags & EM_TENSOR_REQUIRES_GRAD) != 0;
}
/* t's gradient from the last backward: NULL when it has none, or when
 * zero_grad made it stale (its values are old; the next backward
 * overwrites them). */
static inline em_tensor *em_tensor_current_grad(const em_tensor *t) {
  return t && t->grad && !(t->flags & EM_TENSOR_GRAD_STALE) ? t->grad : NULL;
}
/* "[128, 784]" into buf; returns buf. */
const char *em_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);
/* "512 B", "808.2 KiB", "1.5 GiB" (binary units, one decimal) into buf;
 * returns buf. */
const char *em_format_bytes(int64_t bytes, char *buf, size_t n);

/* ---- persistent tensors (caller frees) --------------------------------- */
/* Zero-filled. Returns NULL (and fills err) when the size is absurd or
 * memory runs out. */
em_tensor *em_tensor_new(em_dtype dt, int ndim, const int64_t *shape, em_error *err);
void em_tensor_free(em_tensor *t); /* frees .grad too; NULL is fine */
void em_tensor_set_requires_grad(em_tensor *t, bool on);
/* Copies src's values into dst (same numel and dtype; any strides). */
void em_tensor_copy_(em_tensor *dst, const em_tensor *src);
void em_tensor_fill_(em_tensor *t, double v);
/* Reads one element as a double (any dtype, any strides). */
double em_tensor_get(const em_tensor *t, const int64_t *index);
/* The single value of a one-element tensor. */
double em_tensor_item(const em_tensor *t);

/* ---- step scopes ------------------------------------------------------- */
typedef struct em_scope em_scope;

/* Opens a scope on the calling thread; scopes nest. Ops allocate their
 * results in the innermost one. */
em_scope *em_scope_begin(void);
/* Releases every tensor and tape node made in the scope, which must be
 * the innermost one. */
void em_scope_end(em_scope *s);
em_scope *em_scope_current(void);

/* A new tensor in the current scope (an op without a scope is a broken
 * invariant). Contents undefined / zero-filled. */
em_tensor *em_empty(em_dtype dt, int ndim, const int64_t *shape);
em_tensor *em_zeros(em_dtype dt, int ndim, const int64_t *shape);
em_tensor *em_full(em_dtype dt, int ndim, const int64_t *shape, double v);
em_tensor *em_empty_like(const em_tensor *t);
em_tensor *em_zeros_like(const em_tensor *t);
/* Copies n = numel values of dtype dt from src into a new scoped tensor. */
em_tensor *em_from_data(em_dtype dt, int ndim, const int64_t *shape, const void *src);
em_tensor *em_scalar(em_dtype dt, double v);
/* A view struct over t's storage with the given geometry (scoped). */
em_tensor *em_view_raw(const em_tensor *t, int ndim, const int64_t *shape,
                       const int64_t *stride, int64_t offset);
/* A scoped tensor struct over memory the caller owns (contiguous). */
em_tensor *em_tensor_wrap(em_dtype dt, int ndim, const int64_t *shape, void *data);
/* Scratch memory released with the current scope (for kernels). */
void *em_scratch(size_t nbytes);
/* A kernel done with scratch p gives it back now rather than at the
 * scope's end (when p is among the scope's newest allocations; else it
 * stays to the end), so that a step's many products do not each hold
 * their packing buffers until the step ends. */
void em_scratch_done(void *p);

/* ---- caching allocator -------------------------------------------------- */
/* 64-byte aligned blocks rounded to size classes (at most 1/3 padding up
 * to 1 MiB, at most 1/16 above); freed blocks are kept for reuse.
 * Thread-safe. */
void *em_alloc(size_t nbytes);
void em_free(void *p, size_t nbytes);
typedef struct {
  int64_t allocated_bytes; /* in use now */
  int64_t reserved_bytes;  /* in use plus cached */
  int64_t peak_allocated_bytes;
  int64_t alloc_count;     /* calls that took a block */
  int64_t system_alloc_count; /* calls that reached the system allocator */
  int64_t free_count;         /* blocks handed back */
  int64_t peak_reserved_bytes;
  int64_t cached_blocks;      /* free blocks kept for reuse */
  int64_t largest_free_block; /* bytes of the largest cached block (0: none) */
} em_memory_stats;
void em_memory_stats_get(em_memory_stats *out);
void em_memory_reset_peak(void);
void em_memory_release_cached(void);

/* ---- autograd ----------------------------------------------------------- */
/* The thread's grad mode; em_no_grad_begin returns the previous mode for
 * em_grad_mode_restore. */
bool em_grad_enabled(void);
bool em_no_grad_begin(void);
void em_grad_mode_restore(bool prev);

#define EM_NODE_MAX_INPUTS 4
typedef void (*em_backward_fn)(em_node *n);
struct em_node {
  const char *op;
  em_backward_fn backward;
  em_tensor *out;
  int n_in;
  em_tensor *in[EM_NODE_MAX_INPUTS];
  em_tensor *saved[EM_NODE_MAX_INPUTS]; /* extra tensors backward needs */
  double f[4];                          /* op scalars */
  int64_t i[16];                        /* op integers */
  void *ctx;                            /* op data in scope memory */
};

/* True when an op on these inputs must be recorded. */
bool em_needs_grad(int n, em_tensor *const *inputs);
/* Appends a node for out (marks out as requiring grad) and returns it for
 * the op to fill saved/f/i/ctx. Inputs that do not require grad are kept
 * too; backward skips them. */
em_node *em_record(const char *op, em_backward_fn bw, em_tensor *out, int n,
                   em_tensor *const *inputs);

/* The gradient buffer of t for backward to write into. *fresh is set when
 * its contents are undefined (new, or stale after zero_grad): the caller
 * then overwrites rather than accumulates. NULL if t needs no grad. */
em_tensor *em_grad_acquire(em_tensor *t, bool *fresh);
/* Adds g into t's gradient (any strides, same numel; allocates as needed). */
void em_grad_accumulate(em_tensor *t, const em_tensor *g);

/* Runs backward from a one-element loss (seed 1) through the current
 * scope's tape, and consumes the tape (PyTorch's retain_graph=False): a
 * second backward in the same scope finds no graph until ops record a new
 * one. */
void em_backward(em_tensor *loss);
/* Runs backward from any tensor, seeding its gradient with `grad` (same
 * shape), like PyTorch's out.backward(grad). */
void em_backward_grad(em_tensor *out, const em_tensor *grad);
/* Marks the gradient stale: the next backward overwrites it. */
void em_tensor_zero_grad(em_tensor *t);
/* Hooks of this thread's next backwards (data-parallel gradient
 * reduction): ready(user, i) is called once per tensor leaves[i] as soon
 * as its gradient is final, i.e. right after the last tape node (in the
 * backward walk) that has it as an input, or at the end of the walk for
 * a leaf the tape never reaches (its gradient is then untouched); and
 * node_done(user), when not NULL, after every node. The struct is
 * borrowed until em_backward_set_hooks(NULL). */
typedef struct {
  int n;
  em_tensor *const *leaves;
  void (*ready)(void *user, int i);
  void (*node_done)(void *user);
  void *user;
} em_backward_hooks;
void em_backward_set_hooks(const em_backward_hooks *h);
