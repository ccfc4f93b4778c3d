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
 * Errors inside the autograd hooks are kept and reported by
 * em_ddp_finish, the first call that can return them. */
#include "dist-private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  float *buf;        /* (numel) the bucket's gradients, flat */
  int64_t numel;
  int first, count;  /* its parameters: order[first .. first + count) */
  int pending;       /* gradients not final yet in this backward */
  bool launched, done;
  em_comm_req req;
  double t_launch, t_done;
} bucket;

struct em_ddp {
  em_comm *c;
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
}

static void keep_error(em_ddp *d, em_status st) {
  if (st != EM_OK && d->st == EM_OK) d->st = st;
}

static void launch_ready(em_ddp *d) {
  while (d->next_launch < d->nb && d->b[d->next_launch].pending == 0) {
    bucket *b = &d->b[d->next_launch++];
    if (d->st != EM_OK) continue;
    b->t_launch = em_dist_now();
    keep_error(d, em_comm_iallreduce_sum_f32(d->c, b->buf, b->numel, &b->req, &d->err));
    b->launched = d->st == EM_OK;
  }
}

static void progress(em_ddp *d) {
  for (int k = 0; k < d->next_launch && d->st == EM_OK; k++) {
    bucket *b = &d->b[k];
    if (!b->launched || b->done) continue;
    bool done = false;
    keep_error(d, em_comm_test(d->c, b->req, &done, &d->err));
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
  float *dst = b->buf + d->offset[i];
  int64_t n = em_tensor_numel(p);
  if (p->grad && !(p->flags & EM_TENSOR_GRAD_STALE))
    memcpy(dst, em_f32(p->grad), sizeof(float) * (size_t)n);
  else
    memset(dst, 0, sizeof(float) * (size_t)n); /* unused in this step */
  b->pending--;
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
  em_ddp *d = calloc(1, sizeof *d);
  if (!d) goto nomem;
  d->c = c;
  if (o) d->opt = *o;
  else em_ddp_options_defaults(&d->opt);
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
  for (int k = 0; k < d->nb; k++) {
    d->b[k].buf = malloc(sizeof(float) * (size_t)(d->b[k].numel ? d->b[k].numel : 1));
    if (!d->b[k].buf) goto nomem;
    d->b[k].pending = d->b[k].count;
  }
  d->stats.n_buckets = d->nb;
  d->hooks = (em_backward_hooks){.n = n, .leaves = d->params, .ready = on_ready,
                                 .node_done = on_node_done, .user = d};
  return d;
nomem:
  em_ddp_free(d);
  em_error_set(err, EM_ERR_NOMEM, "out of memory creating the gradient buckets");
  return NULL;
}

void em_ddp_free(em_ddp *d) {
  if (!d) return;
  if (d->b)
    for (int k = 0; k < d->nb; k++) free(d->b[k].buf);
  free(d->b);
  free(d->params);
  free(d->order);
  free(d->bucket_of);
  free(d->offset);
  free(d);
}

void em_ddp_backward_begin(em_ddp *d) {
  d->t_backward = em_dist_now();
  em_backward_set_hooks(&d->hooks);
}

void em_ddp_backward_end(em_ddp *d) {
  em_backward_set_hooks(NULL);
  d->stats.backward_s += em_dist_now() - d->t_backward;
  d->in_step = true;
  launch_ready(d);
}

em_status em_ddp_finish(em_ddp *d, em_error *err) {
  double t0 = em_dist_now();
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
    st = em_comm_wait(d->c, b->req, "the gradient all-reduce", &d->err);
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
    for (int j = 0; j < b->count; j++) {
      em_tensor *p = d->params[d->order[b->first + j]];
      bool fresh;
      em_tensor *g = em_grad_acquire(p, &fresh);
      if (!g) continue;
      float *dst = em_f32(g);
      const float *src = b->buf + d->offset[d->order[b->first + j]];
      int64_t n = em_tensor_numel(p);
      for (int64_t e = 0; e < n; e++) dst[e] = src[e] * inv;
    }
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

em_status em_ddp_broadcast_tensors(em_comm *c, int n, em_tensor *const *ts, em_error *err) {
  for (int i = 0; i < n; i++) {
    em_tensor *t = ts[i];
    if (!em_tensor_is_contiguous(t))
      return em_error_set(err, EM_ERR_INVALID, "broadcast of a non-contiguous tensor");
    EM_DIST_TRY(em_comm_broadcast(c, em_tensor_ptr(t), (int64_t)em_tensor_nbytes(t), 0, err));
  }
  return EM_OK;
}
