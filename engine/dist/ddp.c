/* ddp.c: the gradient bucketer of data-parallel training.
 *
 * Buckets: the parameters in reverse order (backward finalises the last
 * layers first), a new bucket whenever the next one would pass the
 * capacity (a parameter larger than it gets a bucket of its own). Each
 * bucket has one flat buffer (numel) that its gradients are copied into
 * as they become final; when its last one arrives the bucket's
 * all-reduce starts, buckets always in index order so that every rank
 * issues the same collectives in the same order. Between tape nodes
 * the pending requests are tested: Open MPI progresses a non-blocking
 * collective only inside MPI calls, and without these tests most of the
 * reduction would happen in em_ddp_finish, after backward.
 *
 * Where the buckets live: with the parameters. On the CPU they are
 * host memory; on a device, device memory (em_device_alloc), filled with
 * the backend's device-to-device copies and written back with its
 * kernels (a scaling copy per gradient), so nothing leaves the device
 * when the communicator reduces device memory (NCCL on the gradients'
 * GPU; MPI on the reference device, whose memory is host memory). When
 * it cannot (MPI with gradients on a GPU), each bucket has a pinned host
 * copy: downloaded when the bucket is complete, uploaded after its
 * all-reduce. Gradients on a CUDA device are reduced by an NCCL
 * communicator the bucketer makes over the job's (unless
 * EMBER_DDP_COMM=mpi); everything else the trainer says to the other
 * ranks (losses, stop flags, evaluation sums) stays on the job's.
 *
 * Errors inside the autograd hooks are kept and reported by
 * em_ddp_finish, the first call that can return them. */
#include "dist-private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-backend.h"

typedef struct {
  float *buf;        /* (numel) the bucket's gradients, flat, on the
                        parameters' device */
  float *host;       /* (numel) pinned host copy the all-reduce works on when
                        the communicator cannot read buf; else NULL */
  int64_t numel;
  int first, count;  /* its parameters: order[first .. first + count) */
  int pending;       /* gradients not final yet in this backward */
  bool launched, done;
  em_comm_req req;
  double t_launch, t_done;
} bucket;

struct em_ddp {
  em_comm *c;        /* the job's communicator (borrowed) */
  em_comm *own;      /* NCCL made for CUDA gradients, or NULL */
  em_comm *rc;       /* the one reducing the buckets: own or c */
  em_device dev;     /* where the parameters and the buckets live */
  const em_backend *be; /* dev's backend; NULL for the CPU */
  bool prepared;     /* buckets allocated on dev */
  em_ddp_options opt;
  int n;
  em_tensor **params;
  int *order;        /* (n) bucket order: parameter indices, reversed */
  int *bucket_of;    /* (n) per parameter */
  int64_t *offset;   /* (n) per parameter, in its bucket's buffer */
  int nb;
  bucket *b;
  int next_launch;   /* buckets before it are launched */
  bool in_step;      /* hooks ran since the last finish */
  double t_backward;
  em_status st;      /* the first error inside a hook */
  em_error err;
  em_backward_hooks hooks;
  em_ddp_stats stats;
};

void em_ddp_options_defaults(em_ddp_options *o) {
  o->bucket_mb = 1.0;
  o->overlap = true;
  o->progress = true;
  const char *e;
  if ((e = getenv("EMBER_DDP_BUCKET_MB"))) {
    double v = strtod(e, NULL);
    if (v > 0 && isfinite(v)) o->bucket_mb = v;
  }
  if ((e = getenv("EMBER_DDP_OVERLAP"))) o->overlap = strcmp(e, "0") != 0;
  if ((e = getenv("EMBER_DDP_PROGRESS"))) o->progress = strcmp(e, "0") != 0;
  o->comm = EM_DDP_COMM_AUTO;
  if ((e = getenv("EMBER_DDP_COMM"))) {
    if (!strcmp(e, "mpi")) o->comm = EM_DDP_COMM_MPI;
    else if (!strcmp(e, "nccl")) o->comm = EM_DDP_COMM_NCCL;
    else if (strcmp(e, "auto") && *e) o->comm = EM_DDP_COMM_BAD;
  }
  o->staging = false;
  if ((e = getenv("EMBER_DDP_STAGING"))) o->staging = strcmp(e, "0") != 0;
}

/* ---- the buckets' memory ------------------------------------------------------ */
static size_t bucket_bytes(const bucket *b) {
  return sizeof(float) * (size_t)(b->numel ? b->numel : 1);
}

/* A tensor struct over the floats at p on the buckets' device, with
 * the shape of parameter t (for the kernels). */
static em_tensor flat_view(const em_ddp *d, float *p, const em_tensor *t) {
  em_tensor v;
  memset(&v, 0, sizeof v);
  v.dtype = EM_DTYPE_F32;
  v.ndim = t->ndim;
  int64_t s = 1;
  for (int k = t->ndim - 1; k >= 0; k--) {
    v.shape[k] = t->shape[k];
    v.stride[k] = s;
    s *= t->shape[k];
  }
  v.data = p;
  v.device = d->dev;
  return v;
}

static void buckets_release(em_ddp *d) {
  if (d->b)
    for (int k = 0; k < d->nb; k++) {
      bucket *b = &d->b[k];
      if (b->buf) {
        if (d->be) em_device_free(d->dev, b->buf, bucket_bytes(b));
        else free(b->buf);
      }
      if (b->host) em_host_pinned_free(b->host);
      b->buf = b->host = NULL;
    }
  d->prepared = false;
}

/* Whether c's collectives can work on memory of device dev in place. */
static bool comm_reads(const em_comm *c, em_device dev, bool staging) {
  em_device cd = em_comm_device(c);
  if (em_device_is_cpu(cd))
    return dev.kind == EM_DEVICE_CPU || (dev.kind == EM_DEVICE_REF && !staging);
  return em_device_eq(cd, dev);
}

/* The device every parameter lives on (they must agree). */
static em_status params_device(const em_ddp *d, em_device *out, em_error *err) {
  *out = d->n ? d->params[0]->device : em_device_cpu();
  for (int i = 1; i < d->n; i++)
    if (!em_device_eq(d->params[i]->device, *out)) {
      char a[32], b[32];
      return em_error_set(err, EM_ERR_INVALID,
                          "data-parallel training needs every parameter on one device: "
                          "parameter %d lives on %s, parameter 0 on %s", i,
                          em_device_str(d->params[i]->device, a, sizeof a),
                          em_device_str(*out, b, sizeof b));
    }
  return EM_OK;
}

/* The communicator for gradients on dev: NCCL for a CUDA device unless
 * told otherwise (made once, over the job's communicator). */
static em_status choose_comm(em_ddp *d, em_device dev, em_error *err) {
  if (d->own && !em_device_eq(em_comm_device(d->own), dev)) {
    em_comm_free(d->own);
    d->own = NULL;
  }
  d->rc = d->c;
  if (dev.kind != EM_DEVICE_CUDA || d->opt.comm == EM_DDP_COMM_MPI) return EM_OK;
  if (!em_comm_nccl_available()) {
    if (d->opt.comm != EM_DDP_COMM_NCCL) return EM_OK; /* MPI through host buffers */
    return em_error_set(err, EM_ERR_UNSUPPORTED,
                        "EMBER_DDP_COMM=nccl: this ember was built without NCCL (it needs MPI, "
                        "CUDA and NCCL at build time); EMBER_DDP_COMM=mpi reduces CUDA "
                        "gradients over MPI through host memory");
  }
  if (!d->own && !(d->own = em_comm_nccl_new(d->c, dev, err)))
    return em_error_prefix(err, "the gradients' NCCL communicator");
  d->rc = d->own;
  return EM_OK;
}

em_status em_ddp_prepare(em_ddp *d, em_error *err) {
  em_device dev;
  EM_DIST_TRY(params_device(d, &dev, err));
  if (d->prepared && em_device_eq(dev, d->dev)) return EM_OK;
  buckets_release(d);
  d->dev = dev;
  d->be = em_device_is_cpu(dev) ? NULL : em_backend_of_kind((em_device_kind)dev.kind);
  if (!em_device_is_cpu(dev) && !d->be) {
    char a[32];
    return em_error_set(err, EM_ERR_UNSUPPORTED, "the parameters live on %s, which this build "
                        "has no backend for", em_device_str(dev, a, sizeof a));
  }
  EM_DIST_TRY(choose_comm(d, dev, err));
  if (em_device_is_cpu(dev) && !em_device_is_cpu(em_comm_device(d->rc))) {
    char a[32];
    return em_error_set(err, EM_ERR_INVALID, "the %s communicator reduces %s memory, but the "
                        "parameters live on the CPU", em_comm_name(d->rc),
                        em_device_str(em_comm_device(d->rc), a, sizeof a));
  }
  bool stage = !comm_reads(d->rc, dev, d->opt.staging);
  for (int k = 0; k < d->nb; k++) {
    bucket *b = &d->b[k];
    size_t bytes = bucket_bytes(b);
    if (d->be) {
      b->buf = em_device_alloc(dev, bytes, "the gradient buckets");
      if (!b->buf) {
        em_status st = em_device_error_take(err);
        buckets_release(d);
        return st != EM_OK ? st
                           : em_error_set(err, EM_ERR_NOMEM, "out of device memory for the "
                                          "gradient buckets");
      }
    } else if (!(b->buf = malloc(bytes))) {
      buckets_release(d);
      return em_error_set(err, EM_ERR_NOMEM, "out of memory for the gradient buckets");
    }
    if (stage && !(b->host = em_host_pinned_alloc(bytes))) {
      buckets_release(d);
      return em_error_set(err, EM_ERR_NOMEM, "out of host memory for the gradient buckets' "
                          "host copies");
    }
  }
  d->stats.comm = em_comm_name(d->rc);
  d->stats.device = dev;
  d->stats.staged = stage;
  d->prepared = true;
  return EM_OK;
}

static void keep_error(em_ddp *d, em_status st) {
  if (st != EM_OK && d->st == EM_OK) d->st = st;
}

static void launch_ready(em_ddp *d) {
  while (d->next_launch < d->nb && d->b[d->next_launch].pending == 0) {
    bucket *b = &d->b[d->next_launch++];
    if (d->st != EM_OK) continue;
    b->t_launch = em_dist_now();
    float *buf = b->buf;
    if (b->host) { /* the communicator reads host memory only */
      d->be->memcpy_d2h(d->dev.index, b->host, b->buf, sizeof(float) * (size_t)b->numel);
      buf = b->host;
    }
    keep_error(d, em_comm_iallreduce_sum_f32(d->rc, buf, b->numel, &b->req, &d->err));
    b->launched = d->st == EM_OK;
  }
}

static void progress(em_ddp *d) {
  for (int k = 0; k < d->next_launch && d->st == EM_OK; k++) {
    bucket *b = &d->b[k];
    if (!b->launched || b->done) continue;
    bool done = false;
    keep_error(d, em_comm_test(d->rc, b->req, &done, &d->err));
    if (done) {
      b->done = true;
      b->t_done = em_dist_now();
    }
  }
}

/* Parameter i's gradient is final: into its bucket. */
static void on_ready(void *user, int i) {
  em_ddp *d = user;
  d->in_step = true;
  em_tensor *p = d->params[i];
  bucket *b = &d->b[d->bucket_of[i]];
  b->pending--;
  if (!d->prepared) return; /* em_ddp_prepare failed: kept in d->st */
  float *dst = b->buf + d->offset[i];
  int64_t n = em_tensor_numel(p);
  /* (a gradient without data: its allocation failed, the device error is
   * pending for the trainer; zeros keep the ranks' collectives matched) */
  bool have = em_tensor_current_grad(p) && p->grad->data;
  if (have && (!em_device_eq(p->grad->device, d->dev) || !em_tensor_is_contiguous(p->grad))) {
    char a[32];
    keep_error(d, em_error_set(&d->err, EM_ERR_INVALID, "the gradient of parameter %d lives on "
                               "%s, not with the parameter, or is not contiguous", i,
                               em_device_str(p->grad->device, a, sizeof a)));
    have = false;
  }
  if (d->be) {
    if (have) {
      d->be->memcpy_d2d(d->dev.index, dst, em_f32(p->grad), sizeof(float) * (size_t)n);
    } else { /* unused in this step */
      em_tensor v = flat_view(d, dst, p);
      EM_KCALL(d->be->k, fill, &v, 0.0);
    }
  } else if (have) {
    memcpy(dst, em_f32(p->grad), sizeof(float) * (size_t)n);
  } else {
    memset(dst, 0, sizeof(float) * (size_t)n); /* unused in this step */
  }
  if (d->opt.overlap) launch_ready(d);
}

static void on_node_done(void *user) {
  em_ddp *d = user;
  if (d->opt.progress && d->opt.overlap) progress(d);
}

em_ddp *em_ddp_new(em_comm *c, int n, em_tensor *const *params, const em_ddp_options *o,
                   em_error *err) {
  for (int i = 0; i < n; i++)
    if (params[i]->dtype != EM_DTYPE_F32 || !em_tensor_is_contiguous(params[i])) {
      em_error_set(err, EM_ERR_UNSUPPORTED,
                   "data-parallel training reduces f32 contiguous parameters; parameter %d is %s",
                   i, em_dtype_name(params[i]->dtype));
      return NULL;
    }
  em_ddp_options opt;
  if (o) opt = *o;
  else em_ddp_options_defaults(&opt);
  if (opt.comm == EM_DDP_COMM_BAD) {
    em_error_set(err, EM_ERR_INVALID, "EMBER_DDP_COMM is \"%s\": it takes auto, mpi or nccl",
                 getenv("EMBER_DDP_COMM") ? getenv("EMBER_DDP_COMM") : "");
    return NULL;
  }
  em_ddp *d = calloc(1, sizeof *d);
  if (!d) goto nomem;
  d->c = d->rc = c;
  d->opt = opt;
  d->n = n;
  size_t m = (size_t)(n > 0 ? n : 1);
  d->params = malloc(m * sizeof *d->params);
  d->order = malloc(m * sizeof *d->order);
  d->bucket_of = malloc(m * sizeof *d->bucket_of);
  d->offset = malloc(m * sizeof *d->offset);
  d->b = calloc(m, sizeof *d->b);
  if (!d->params || !d->order || !d->bucket_of || !d->offset || !d->b) goto nomem;
  memcpy(d->params, params, (size_t)n * sizeof *params);
  int64_t cap = (int64_t)(d->opt.bucket_mb * 1024 * 1024 / sizeof(float));
  if (cap < 1) cap = 1;
  for (int k = 0; k < n; k++) {
    int i = n - 1 - k;
    d->order[k] = i;
    int64_t numel = em_tensor_numel(params[i]);
    bucket *b = d->nb ? &d->b[d->nb - 1] : NULL;
    if (!b || (b->numel > 0 && b->numel + numel > cap)) {
      b = &d->b[d->nb++];
      b->first = k;
    }
    d->bucket_of[i] = (int)(b - d->b);
    d->offset[i] = b->numel;
    b->numel += numel;
    b->count++;
    d->stats.bytes_per_step += numel * (int64_t)sizeof(float);
  }
  for (int k = 0; k < d->nb; k++) d->b[k].pending = d->b[k].count;
  d->stats.n_buckets = d->nb;
  d->hooks = (em_backward_hooks){.n = n, .leaves = d->params, .ready = on_ready,
                                 .node_done = on_node_done, .user = d};
  if (em_ddp_prepare(d, err) != EM_OK) {
    em_ddp_free(d);
    return NULL;
  }
  return d;
nomem:
  em_ddp_free(d);
  em_error_set(err, EM_ERR_NOMEM, "out of memory creating the gradient buckets");
  return NULL;
}

void em_ddp_free(em_ddp *d) {
  if (!d) return;
  buckets_release(d);
  em_comm_free(d->own);
  free(d->b);
  free(d->params);
  free(d->order);
  free(d->bucket_of);
  free(d->offset);
  free(d);
}

void em_ddp_backward_begin(em_ddp *d) {
  d->t_backward = em_dist_now();
  if (d->st == EM_OK) keep_error(d, em_ddp_prepare(d, &d->err));
  em_backward_set_hooks(&d->hooks);
}

void em_ddp_backward_end(em_ddp *d) {
  em_backward_set_hooks(NULL);
  d->stats.backward_s += em_dist_now() - d->t_backward;
  d->in_step = true;
  launch_ready(d);
}

/* The buckets back into the gradients, divided by the world: on a device
 * one scaling kernel per gradient (after the upload of a staged bucket),
 * queued after the all-reduce that the host waited for. */
static void write_back(em_ddp *d, bucket *b, float inv) {
  if (b->host)
    d->be->memcpy_h2d(d->dev.index, b->buf, b->host, sizeof(float) * (size_t)b->numel);
  for (int j = 0; j < b->count; j++) {
    int i = d->order[b->first + j];
    em_tensor *p = d->params[i];
    bool fresh;
    em_tensor *g = em_grad_acquire(p, &fresh);
    if (!g || !g->data) continue; /* no gradient, or its allocation failed (device error) */
    float *src = b->buf + d->offset[i];
    if (d->be) {
      em_tensor v = flat_view(d, src, p);
      EM_KCALL(d->be->k, unary, EM_KU_MULS, g, &v, (double)inv, 0.0);
    } else {
      float *dst = em_f32(g);
      int64_t n = em_tensor_numel(p);
      for (int64_t e = 0; e < n; e++) dst[e] = src[e] * inv;
    }
  }
}

em_status em_ddp_finish(em_ddp *d, em_error *err) {
  double t0 = em_dist_now();
  if (d->st == EM_OK) keep_error(d, em_ddp_prepare(d, &d->err));
  if (d->own) { /* waits obey what the job's communicator was told */
    d->own->timeout_s = d->c->timeout_s;
    d->own->cancel = d->c->cancel;
  }
  if (!d->in_step) {
    /* no backward with the hooks since the last step (every micro-batch
     * was skipped): reduce the gradients as they are */
    for (int i = 0; i < d->n; i++) on_ready(d, i);
  }
  launch_ready(d);
  em_status st = d->st;
  for (int k = 0; k < d->nb && st == EM_OK; k++) {
    bucket *b = &d->b[k];
    if (!b->launched || b->done) continue;
    st = em_comm_wait(d->rc, b->req, "the gradient all-reduce", &d->err);
    b->done = true;
    b->t_done = em_dist_now();
  }
  double t1 = em_dist_now();
  if (st != EM_OK) {
    if (err) *err = d->err;
    return st;
  }
  /* the averaged gradients, back into .grad */
  float inv = 1.0f / (float)em_comm_world(d->c);
  double first = INFINITY, last = 0;
  for (int k = 0; k < d->nb; k++) {
    bucket *b = &d->b[k];
    if (b->t_launch < first) first = b->t_launch;
    if (b->t_done > last) last = b->t_done;
    write_back(d, b, inv);
    b->pending = b->count;
    b->launched = b->done = false;
  }
  d->next_launch = 0;
  d->in_step = false;
  d->stats.steps++;
  if (d->nb) d->stats.comm_s += last - first;
  d->stats.exposed_s += t1 - t0;
  d->stats.finish_s += em_dist_now() - t0;
  return EM_OK;
}

void em_ddp_get_stats(const em_ddp *d, em_ddp_stats *out) { *out = d->stats; }

uint32_t em_ddp_layout_hash(const em_ddp *d) {
  /* FNV-1a over who reduces (the job's MPI or a NCCL of its own: ranks on
   * different transports would each wait for the other), whether buckets
   * go through host memory, and each bucket's size and parameter count */
  uint32_t h = 2166136261u;
  h = (h ^ (d->rc == d->c ? 1u : 2u)) * 16777619u;
  h = (h ^ (d->opt.staging ? 1u : 0u)) * 16777619u;
  for (int k = 0; k < d->nb; k++) {
    uint64_t v[2] = {(uint64_t)d->b[k].numel, (uint64_t)d->b[k].count};
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < sizeof v; i++) h = (h ^ p[i]) * 16777619u;
  }
  return h;
}

/* One tensor through a host copy: for a device whose memory c cannot
 * read (a GPU under MPI). */
static em_status broadcast_staged(em_comm *c, em_tensor *t, em_error *err) {
  size_t bytes = em_tensor_nbytes(t);
  void *host = malloc(bytes ? bytes : 1);
  if (!host) return em_error_set(err, EM_ERR_NOMEM, "out of memory broadcasting a tensor");
  em_tensor_download(t, host);
  em_status st = em_comm_broadcast(c, host, (int64_t)bytes, 0, err);
  if (st == EM_OK) em_tensor_upload(t, host);
  free(host);
  return st;
}

em_status em_ddp_broadcast_tensors(em_comm *c, int n, em_tensor *const *ts, em_error *err) {
  for (int i = 0; i < n; i++) {
    em_tensor *t = ts[i];
    if (!em_tensor_is_contiguous(t))
      return em_error_set(err, EM_ERR_INVALID, "broadcast of a non-contiguous tensor");
    if (!comm_reads(c, t->device, false))
      EM_DIST_TRY(broadcast_staged(c, t, err));
    else
      EM_DIST_TRY(em_comm_broadcast(c, em_tensor_ptr(t), (int64_t)em_tensor_nbytes(t), 0, err));
  }
  return EM_OK;
}
