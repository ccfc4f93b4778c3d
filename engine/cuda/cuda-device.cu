/* cuda-device.cu: the CUDA backend table (em_cuda_backend): device count
 * and info, the per-device context (one non-default stream, cuBLAS and
 * cuDNN handles made on first use), copies (uploads from pageable memory
 * through page-locked staging buffers), page-locked host memory, the
 * check macros' record of the last failed call, and the kernel table that
 * points into the op family files (cuda-*.cu). */
#include "cuda-libs.h"

#include <dlfcn.h>
#include <mutex>
#include <stdio.h>
#include <string.h>

/* ---- errors -------------------------------------------------------------- */

static thread_local em_error last_error;

const em_error *em_cuda_last_error(void) { return &last_error; }

static em_status record(const char *lib, em_status st, int code, const char *what,
                        const char *call, const char *func, int line) {
  return em_error_set(&last_error, st, "%s call failed in %s (engine/cuda, line %d): %s -> %s (%d)",
                      lib, func, line, call, what ? what : "unknown error", code);
}

em_status em_cuda_check_rt(cudaError_t e, const char *call, const char *func, int line) {
  if (e == cudaSuccess) return EM_OK;
  return record("CUDA", e == cudaErrorMemoryAllocation ? EM_ERR_NOMEM : EM_ERR_UNSUPPORTED, (int)e,
                cudaGetErrorString(e), call, func, line);
}

em_status em_cuda_check_blas(cublasStatus_t s, const char *call, const char *func, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return EM_OK;
  const em_cublas_api *api = em_cuda_cublas_api();
  return record("cuBLAS", s == CUBLAS_STATUS_ALLOC_FAILED ? EM_ERR_NOMEM : EM_ERR_UNSUPPORTED,
                (int)s, api ? api->status_string(s) : "cuBLAS status", call, func, line);
}

em_status em_cuda_check_dnn(cudnnStatus_t s, const char *call, const char *func, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return EM_OK;
  return record("cuDNN", s == CUDNN_STATUS_ALLOC_FAILED ? EM_ERR_NOMEM : EM_ERR_UNSUPPORTED,
                (int)s, cudnnGetErrorString(s), call, func, line);
}

void em_cuda_fail_raise(void) { em_device_error_raise(&last_error); }

/* The first failed call of the kernel entry running on this thread. */
static thread_local em_error kernel_error;

void em_cuda_kernel_fail(void) {
  if (kernel_error.status == EM_OK) kernel_error = last_error;
}

em_status em_cuda_kernel_end(void) {
  em_status st = kernel_error.status;
  if (st == EM_OK) return EM_OK;
  kernel_error.status = EM_OK;
  return em_kernel_fail(st, "%s", kernel_error.msg);
}

/* ---- device count -------------------------------------------------------- */

static std::once_flag count_once;
static int device_count;
static cudaError_t count_error = cudaSuccess;

int em_cuda_count(void) {
  std::call_once(count_once, [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (EM_CUDA_CHECK(e) != EM_OK) {
      count_error = e;
      (void)cudaGetLastError(); /* not sticky: clear it */
      n = 0;
    } else if (n == 0) {
      count_error = cudaErrorNoDevice;
    }
    device_count = n;
  });
  return device_count;
}

static void why_none(em_error *err) {
  em_cuda_count();
  em_error_set(err, EM_ERR_UNSUPPORTED, "no CUDA device: %s",
               cudaGetErrorString(count_error == cudaSuccess ? cudaErrorNoDevice : count_error));
}

static em_status info(int index, em_device_info *out, em_error *err) {
  memset(out, 0, sizeof *out);
  if (index < 0 || index >= em_cuda_count())
    return em_error_set(err, EM_ERR_INVALID, "cuda:%d does not exist: %d CUDA devices", index,
                        em_cuda_count());
  cudaDeviceProp prop;
  em_status st = EM_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  if (st != EM_OK) {
    if (err) *err = last_error;
    return st;
  }
  size_t len = strnlen(prop.name, sizeof prop.name);
  if (len >= sizeof out->name) len = sizeof out->name - 1;
  memcpy(out->name, prop.name, len);
  out->name[len] = 0;
  out->total_bytes = (int64_t)prop.totalGlobalMem;
  out->compute_major = prop.major;
  out->compute_minor = prop.minor;
  out->multiprocessors = prop.multiProcessorCount;
  out->bf16 = prop.major >= 8; /* Ampere and later: bf16 tensor cores */
  out->f16 = prop.major >= 7;  /* Volta and later: f16 tensor cores */
  int prev = 0;
  size_t free_b = 0, total_b = 0;
  if (EM_CUDA_CHECK(cudaGetDevice(&prev)) == EM_OK &&
      EM_CUDA_CHECK(cudaSetDevice(index)) == EM_OK &&
      EM_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b)) == EM_OK) {
    out->free_bytes = (int64_t)free_b;
    out->total_bytes = (int64_t)total_b;
  }
  (void)EM_CUDA_CHECK(cudaSetDevice(prev));
  return EM_OK;
}

/* ---- contexts ------------------------------------------------------------ */

#define STAGE_SLOTS 4                   /* staging buffers of uploads (memcpy_h2d) */
#define STAGE_BYTES ((size_t)4 << 20)   /* each */

struct em_cuda_ctx {
  int index;
  int cc_major;
  cudaStream_t stream;
  cublasHandle_t cublas;
  cudnnHandle_t cudnn;
  std::mutex lock; /* guards making the handles */
  std::mutex dnn;  /* one thread at a time on the cuDNN handle */
  bool ready;
  /* Uploads from pageable memory (memcpy_h2d): a ring of page-locked
   * staging buffers, each with the event of its last copy. */
  std::mutex stage_lock;
  bool stage_made, stage_failed;
  int stage_next;
  void *stage_buf[STAGE_SLOTS];
  cudaEvent_t stage_done[STAGE_SLOTS];
};

#define EM_CUDA_MAX_DEVICES 256 /* em_device.index is a uint8_t */
static em_cuda_ctx contexts[EM_CUDA_MAX_DEVICES];
static std::mutex contexts_lock;

em_cuda_ctx *em_cuda_enter(int index) {
  EM_ASSERT(index >= 0 && index < em_cuda_count() && "CUDA device index out of range");
  em_cuda_ctx *c = &contexts[index];
  EM_CUDA_RAISE(cudaSetDevice(index));
  if (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE)) return c;
  std::lock_guard<std::mutex> g(contexts_lock);
  if (!c->ready) {
    cudaDeviceProp prop;
    EM_CUDA_RAISE(cudaGetDeviceProperties(&prop, index));
    c->index = index;
    c->cc_major = prop.major;
    EM_CUDA_RAISE(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    __atomic_store_n(&c->ready, true, __ATOMIC_RELEASE);
  }
  return c;
}

cudaStream_t em_cuda_stream(em_cuda_ctx *c) { return c->stream; }
int em_cuda_index(const em_cuda_ctx *c) { return c->index; }
int em_cuda_cc_major(const em_cuda_ctx *c) { return c->cc_major; }

/* ---- cuBLAS, loaded on first use ----------------------------------------- */

static std::once_flag cublas_once;
static em_cublas_api cublas_api;
static bool cublas_loaded;
static em_error cublas_error;

#define EM_STR2(x) #x
#define EM_STR(x) EM_STR2(x)

static void load_cublas(void) {
  const char *names[] = {"libcublas.so." EM_STR(CUBLAS_VER_MAJOR), "libcublas.so"};
  void *lib = NULL;
  for (const char *n : names)
    if ((lib = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
  if (!lib) {
    const char *why = dlerror();
    em_error_set(&cublas_error, EM_ERR_UNSUPPORTED, "cannot load cuBLAS (%s): %s", names[0],
                 why ? why : "not found");
    return;
  }
  struct {
    const char *name;
    void **slot;
  } fns[] = {
      {"cublasCreate_v2", (void **)&cublas_api.create},
      {"cublasSetStream_v2", (void **)&cublas_api.set_stream},
      {"cublasSetMathMode", (void **)&cublas_api.set_math_mode},
      {"cublasGemmStridedBatchedEx", (void **)&cublas_api.gemm_strided_batched_ex},
      {"cublasGetStatusString", (void **)&cublas_api.status_string},
  };
  for (auto &f : fns) {
    *f.slot = dlsym(lib, f.name);
    if (!*f.slot) {
      em_error_set(&cublas_error, EM_ERR_UNSUPPORTED, "cuBLAS (%s) lacks %s", names[0], f.name);
      return;
    }
  }
  cublas_loaded = true;
}

const em_cublas_api *em_cuda_cublas_api(void) {
  std::call_once(cublas_once, load_cublas);
  if (!cublas_loaded) {
    last_error = cublas_error;
    return NULL;
  }
  return &cublas_api;
}

/* A library handle could not be made for want of device memory (most of
 * it may sit in the caching allocator's cache): the device's pending
 * out-of-memory error, as an allocation failure raises it. */
static void handle_oom(em_cuda_ctx *c, const char *lib) {
  em_memory_stats st;
  em_cuda_stats(c->index, &st);
  em_error e;
  memset(&e, 0, sizeof e);
  em_error_set(&e, EM_ERR_NOMEM,
               "out of memory on cuda:%d: %s could not make its handle (%lld bytes allocated, "
               "%lld reserved by the caching allocator); try a smaller --batch or --auto-batch",
               c->index, lib, (long long)st.allocated_bytes, (long long)st.reserved_bytes);
  em_device_error_raise(&e);
}

cublasHandle_t em_cuda_cublas(em_cuda_ctx *c) {
  std::lock_guard<std::mutex> g(c->lock);
  if (!c->cublas) {
    const em_cublas_api *api = em_cuda_cublas_api();
    if (!api) { /* reached from kernel entries: their status (cuda-private.h) */
      em_cuda_kernel_fail();
      return NULL;
    }
    cublasHandle_t h;
    cublasStatus_t made = api->create(&h); /* allocates its workspace */
    if (made == CUBLAS_STATUS_ALLOC_FAILED) { /* the cached blocks back, then once more */
      em_cuda_release_cached(c->index);
      made = api->create(&h);
      if (made == CUBLAS_STATUS_ALLOC_FAILED) {
        handle_oom(c, "cuBLAS");
        return NULL;
      }
    }
    /* Reached from kernel entries: a failure is their status and the
     * handle is made again on the next call. */
    if (EM_CUBLAS_CHECK(made) != EM_OK) {
      em_cuda_kernel_fail();
      return NULL;
    }
    /* f32 GEMMs in full f32 (PyTorch's default: no TF32). */
    if (EM_CUBLAS_CHECK(api->set_stream(h, c->stream)) != EM_OK ||
        EM_CUBLAS_CHECK(api->set_math_mode(h, CUBLAS_DEFAULT_MATH)) != EM_OK) {
      em_cuda_kernel_fail(); /* the handle leaks: the device is broken anyway */
      return NULL;
    }
    c->cublas = h;
  }
  return c->cublas;
}

cudnnHandle_t em_cuda_cudnn(em_cuda_ctx *c) {
  std::lock_guard<std::mutex> g(c->lock);
  if (!c->cudnn) {
    cudnnHandle_t h;
    cudnnStatus_t made = cudnnCreate(&h);
    if (made == CUDNN_STATUS_ALLOC_FAILED) { /* as for cuBLAS */
      em_cuda_release_cached(c->index);
      made = cudnnCreate(&h);
      if (made == CUDNN_STATUS_ALLOC_FAILED) {
        handle_oom(c, "cuDNN");
        return NULL;
      }
    }
    if (EM_CUDNN_CHECK(made) != EM_OK) { /* as for cuBLAS */
      em_cuda_kernel_fail();
      return NULL;
    }
    if (EM_CUDNN_CHECK(cudnnSetStream(h, c->stream)) != EM_OK) {
      em_cuda_kernel_fail();
      cudnnDestroy(h);
      return NULL;
    }
    c->cudnn = h;
  }
  return c->cudnn;
}

void em_cuda_cudnn_lock(em_cuda_ctx *c) { c->dnn.lock(); }
void em_cuda_cudnn_unlock(em_cuda_ctx *c) { c->dnn.unlock(); }

/* ---- scratch ------------------------------------------------------------- */

void *em_cuda_scratch(int index, size_t nbytes, const char *what) {
  em_device d = {(uint8_t)EM_DEVICE_CUDA, (uint8_t)index};
  return em_device_alloc(d, nbytes, what);
}

void em_cuda_scratch_free(int index, void *p, size_t nbytes) {
  em_device d = {(uint8_t)EM_DEVICE_CUDA, (uint8_t)index};
  em_device_free(d, p, nbytes);
}

/* ---- views --------------------------------------------------------------- */

em_kview em_cuda_view_bcast(const em_tensor *y, const em_tensor *x) {
  em_kview v;
  em_kview_bcast(&v, y->ndim, y->shape, x->ndim, x->shape, x->stride, x->offset);
  return v;
}

em_kview em_cuda_view(const em_tensor *t) { return em_cuda_view_bcast(t, t); }

/* ---- copies -------------------------------------------------------------- */

/* Whether host pointer p is page-locked memory CUDA knows (em_host_pinned_
 * alloc's blocks, anywhere inside them). */
static bool is_pinned(const void *p) {
  cudaPointerAttributes a;
  if (EM_CUDA_CHECK(cudaPointerGetAttributes(&a, p)) != EM_OK) {
    (void)cudaGetLastError(); /* a probe: clear it */
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

/* Staged uploads: a copy from pageable memory of at most STAGE_BYTES goes
 * through one of STAGE_SLOTS page-locked buffers (a host memcpy, then an
 * asynchronous copy and an event), so that the caller may reuse its
 * memory at once without waiting for the work queued before the copy
 * (a per-step stall of training: each batch is uploaded from the data
 * loader's pageable memory). A slot is reused once its previous copy has
 * finished (its event). */
/* Makes the staging buffers (caller holds stage_lock); false when page-
 * locked memory cannot be had (the uploads then synchronize instead). */
static bool stage_make(em_cuda_ctx *c) {
  if (c->stage_made) return true;
  if (c->stage_failed) return false;
  for (int i = 0; i < STAGE_SLOTS; i++) {
    if (EM_CUDA_CHECK(cudaHostAlloc(&c->stage_buf[i], STAGE_BYTES, cudaHostAllocPortable)) !=
            EM_OK ||
        EM_CUDA_CHECK(cudaEventCreateWithFlags(&c->stage_done[i], cudaEventDisableTiming)) !=
            EM_OK) {
      (void)cudaGetLastError();
      c->stage_failed = true;
      return false;
    }
  }
  c->stage_made = true;
  return true;
}

/* dst = n bytes of pageable src through a staging slot; false when there
 * is none (too large, or no page-locked memory). */
static bool stage_upload(em_cuda_ctx *c, void *dst, const void *src, size_t n) {
  if (n > STAGE_BYTES) return false;
  std::lock_guard<std::mutex> g(c->stage_lock);
  if (!stage_make(c)) return false;
  int i = c->stage_next;
  c->stage_next = (i + 1) % STAGE_SLOTS;
  EM_CUDA_RAISE(cudaEventSynchronize(c->stage_done[i])); /* the slot's last copy is done */
  memcpy(c->stage_buf[i], src, n);
  EM_CUDA_RAISE(cudaMemcpyAsync(dst, c->stage_buf[i], n, cudaMemcpyHostToDevice, c->stream));
  EM_CUDA_RAISE(cudaEventRecord(c->stage_done[i], c->stream));
  return true;
}

static void memcpy_h2d(int index, void *dst, const void *src, size_t n) {
  if (!n) return;
  em_cuda_ctx *c = em_cuda_enter(index);
  if (is_pinned(src)) { /* the caller keeps it until the copy is done */
    EM_CUDA_RAISE(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream));
    return;
  }
  if (stage_upload(c, dst, src, n)) return;
  /* Pageable memory may be reused by the caller as soon as we return. */
  EM_CUDA_RAISE(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream));
  EM_CUDA_RAISE(cudaStreamSynchronize(c->stream));
}

static void memcpy_d2h(int index, void *dst, const void *src, size_t n) {
  if (!n) return;
  em_cuda_ctx *c = em_cuda_enter(index);
  EM_CUDA_RAISE(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
  EM_CUDA_RAISE(cudaStreamSynchronize(c->stream));
}

static void memcpy_d2d(int index, void *dst, const void *src, size_t n) {
  if (!n) return;
  em_cuda_ctx *c = em_cuda_enter(index);
  EM_CUDA_RAISE(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->stream));
}

static void synchronize(int index) {
  em_cuda_ctx *c = em_cuda_enter(index);
  EM_CUDA_RAISE(cudaStreamSynchronize(c->stream));
}

static void *stream_of(int index) { return (void *)em_cuda_stream(em_cuda_enter(index)); }

/* Portable: page-locked (fast, asynchronous copies) for every device's
 * context, not only the one current when it was allocated. */
static void *host_alloc(size_t nbytes) {
  void *p = NULL;
  if (EM_CUDA_CHECK(cudaHostAlloc(&p, nbytes ? nbytes : 1, cudaHostAllocPortable)) != EM_OK) {
    (void)cudaGetLastError();
    return NULL;
  }
  return p;
}

static void host_free(void *p) {
  if (p) EM_CUDA_RAISE(cudaFreeHost(p));
}

static int count(void) { return em_cuda_count(); }

/* ---- the tables ---------------------------------------------------------- */

static em_kernels make_kernels(void) {
  em_kernels k;
  memset(&k, 0, sizeof k);
  k.fill = em_cuda_fill;
  k.copy = em_cuda_copy;
  k.binary = em_cuda_binary;
  k.unary = em_cuda_unary;
  k.unary_backward = em_cuda_unary_backward;
  k.reduce = em_cuda_reduce;
  k.sum_to = em_cuda_sum_to;
  k.gemm = em_cuda_gemm;
  k.conv2d_forward = em_cuda_conv2d_forward;
  k.conv2d_backward = em_cuda_conv2d_backward;
  k.pool2d_forward = em_cuda_pool2d_forward;
  k.pool2d_backward = em_cuda_pool2d_backward;
  k.batch_norm_forward = em_cuda_batch_norm_forward;
  k.batch_norm_backward = em_cuda_batch_norm_backward;
  k.layer_norm_forward = em_cuda_layer_norm_forward;
  k.layer_norm_backward = em_cuda_layer_norm_backward;
  k.softmax_forward = em_cuda_softmax_forward;
  k.softmax_backward = em_cuda_softmax_backward;
  k.cross_entropy_forward = em_cuda_cross_entropy_forward;
  k.cross_entropy_backward = em_cuda_cross_entropy_backward;
  k.embedding_forward = em_cuda_embedding_forward;
  k.embedding_backward = em_cuda_embedding_backward;
  k.dropout_mask = em_cuda_dropout_mask;
  k.masked_fill = em_cuda_masked_fill;
  k.sdpa_forward = em_cuda_sdpa_forward;
  k.sdpa_backward = em_cuda_sdpa_backward;
  k.sgd_step = em_cuda_sgd_step;
  k.adam_step = em_cuda_adam_step;
  k.sumsq = em_cuda_sumsq;
  k.unscale = em_cuda_unscale;
  return k;
}

static const em_kernels kernels = make_kernels();

static em_backend make_backend(void) {
  em_backend b;
  memset(&b, 0, sizeof b);
  b.name = "cuda";
  b.count = count;
  b.why_none = why_none;
  b.info = info;
  b.alloc = em_cuda_alloc;
  b.free = em_cuda_free;
  b.stats = em_cuda_stats;
  b.reset_peak = em_cuda_reset_peak;
  b.release_cached = em_cuda_release_cached;
  b.memcpy_h2d = memcpy_h2d;
  b.memcpy_d2h = memcpy_d2h;
  b.memcpy_d2d = memcpy_d2d;
  b.synchronize = synchronize;
  b.stream = stream_of;
  b.host_alloc = host_alloc;
  b.host_free = host_free;
  b.k = &kernels;
  return b;
}

static const em_backend backend = make_backend();

extern "C" const em_backend *em_cuda_backend(void) { return &backend; }
