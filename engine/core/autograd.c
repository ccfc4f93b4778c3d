/* autograd.c: grad mode, the tape and the backward walk.
 *
 * With the profiler or anomaly mode on (one branch on a global flag when
 * off), each recorded node is tagged with the layer its forward ran in,
 * and each backward function runs inside a backward span that names it
 * and that layer; anomaly mode then checks the gradients it wrote.
 *
 * Memory during the walk: a step keeps every activation to its end, but
 * the gradient of an intermediate tensor is dead once its node's
 * backward has run (every consumer's backward ran before it), and so are
 * that backward's temporaries (contiguous copies, accumulation buffers,
 * sums). After each node the walk frees both: the scope allocations the
 * backward made other than the gradients em_grad_acquire gave out, and
 * the output's gradient unless an input took it over (em_grad_adopt:
 * a reshape or an add hands its gradient on without a copy); the output's
 * grad is then NULL, as PyTorch leaves a non-leaf's. So the gradients
 * alive at once are those of the tensors between the nodes walked and
 * those still to come, not a whole step's, and the caching allocator
 * hands the freed blocks to the next nodes. Parameters' gradients
 * (persistent) and those of leaves made in the scope (a test's inputs,
 * a pipeline stage's received activations) stay: they have no node. */
#include "core-private.h"
#include "em-backend.h"
#include "profile-private.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local bool no_grad;

bool em_grad_enabled(void) { return !no_grad; }

bool em_no_grad_begin(void) {
  bool prev = !no_grad;
  no_grad = true;
  return prev;
}

void em_grad_mode_restore(bool prev) { no_grad = !prev; }

bool em_needs_grad(int n, em_tensor *const *inputs) {
  if (no_grad) return false;
  for (int k = 0; k < n; k++)
    if (inputs[k] && em_tensor_requires_grad(inputs[k])) return true;
  return false;
}

em_node *em_record(const char *op, em_backward_fn bw, em_tensor *out, int n,
                   em_tensor *const *inputs) {
  EM_ASSERT(n <= EM_NODE_MAX_INPUTS);
  em_node *node = em_scope_new_node();
  node->op = op;
  node->backward = bw;
  node->out = out;
  node->n_in = n;
  for (int k = 0; k < n; k++) node->in[k] = inputs[k];
  out->grad_fn = node;
  out->flags |= EM_TENSOR_REQUIRES_GRAD;
  if (em_profile_hooks_on()) em_prof_node_tag(node);
  return node;
}

/* The walk's node in progress: the gradient allocations to keep when its
 * temporaries go (those em_grad_acquire made, those em_grad_adopt
 * handed on). On overflow nothing of that node is released. */
#define KEEP_MAX 64
static _Thread_local struct {
  bool on, overflow;
  int n;
  void *p[KEEP_MAX];
} walk_keep;

static void keep_note(void *p) {
  if (!walk_keep.on) return;
  if (walk_keep.n < KEEP_MAX) walk_keep.p[walk_keep.n++] = p;
  else walk_keep.overflow = true;
}

static bool keep_has(const void *p) {
  for (int k = 0; k < walk_keep.n; k++)
    if (walk_keep.p[k] == p) return true;
  return false;
}

bool em_grad_adopt(em_tensor *x, em_tensor *g) {
  if (!walk_keep.on || !em_tensor_requires_grad(x) || x->grad ||
      (x->flags & EM_TENSOR_PERSISTENT) || !em_tensor_is_contiguous(g) ||
      !em_tensor_same_shape(x, g) || g->dtype != x->dtype || !em_device_eq(g->device, x->device))
    return false;
  x->grad = em_view_raw(g, g->ndim, g->shape, g->stride, g->offset);
  x->flags &= ~(uint32_t)EM_TENSOR_GRAD_STALE;
  keep_note(g->data);
  return true;
}

em_tensor *em_grad_acquire(em_tensor *t, bool *fresh) {
  if (!t || !em_tensor_requires_grad(t)) return NULL;
  if (!t->grad) {
    if (t->flags & EM_TENSOR_PERSISTENT) {
      em_error err;
      t->grad = em_tensor_new_on(t->device, t->dtype, t->ndim, t->shape, &err);
      if (!t->grad && em_on_device(t) && err.status == EM_ERR_NOMEM) {
        /* Out of device memory: raise the step's error; a data-less
         * stand-in lets the step run to its end, where the trainer
         * reports it. */
        em_device_error_raise(&err);
        *fresh = true;
        return em_empty_on(t->device, t->dtype, t->ndim, t->shape);
      }
      EM_ASSERT(t->grad && "out of memory for a gradient");
    } else {
      t->grad = em_empty_on(t->device, t->dtype, t->ndim, t->shape);
      keep_note(t->grad->data);
    }
    t->flags &= ~(uint32_t)EM_TENSOR_GRAD_STALE;
    *fresh = true;
    return t->grad;
  }
  *fresh = (t->flags & EM_TENSOR_GRAD_STALE) != 0;
  t->flags &= ~(uint32_t)EM_TENSOR_GRAD_STALE;
  return t->grad;
}

void em_tensor_zero_grad(em_tensor *t) { t->flags |= EM_TENSOR_GRAD_STALE; }

/* dst += src, with src of any strides (same numel as dst, contiguous). */
static void add_into(em_tensor *dst, const em_tensor *src) {
  if (em_on_device(dst) || em_on_device(src)) {
    EM_ASSERT(em_device_eq(dst->device, src->device) && "a gradient from another device");
    if (dst->data && src->data) EM_KCALL(em_kernels_of(dst), binary, EM_KB_ADD, false, dst, dst, src);
    return;
  }
  int64_t n = em_tensor_numel(dst);
  if (em_tensor_is_contiguous(src) && src->dtype == dst->dtype) {
    if (dst->dtype == EM_DTYPE_F32) {
      float *d = em_f32(dst);
      const float *s = em_f32(src);
      for (int64_t k = 0; k < n; k++) d[k] += s[k];
    } else {
      double *d = em_f64(dst);
      const double *s = em_f64(src);
      for (int64_t k = 0; k < n; k++) d[k] += s[k];
    }
    return;
  }
  /* Rare path: make a contiguous copy in the scope first. */
  em_tensor *c = em_empty(dst->dtype, dst->ndim, dst->shape);
  em_strided_copy(c, src);
  add_into(dst, c);
}

void em_grad_accumulate(em_tensor *t, const em_tensor *g) {
  bool fresh;
  em_tensor *dst = em_grad_acquire(t, &fresh);
  if (!dst) return;
  EM_ASSERT(em_tensor_numel(dst) == em_tensor_numel(g));
  if (fresh) em_strided_copy(dst, g);
  else add_into(dst, g);
}

static _Thread_local const em_backward_hooks *hooks;

void em_backward_set_hooks(const em_backward_hooks *h) { hooks = h; }

/* The hooks' leaves sorted by address, for a binary search per tape
 * input: a walk costs (tape inputs) x log(leaves), not x leaves. */
typedef struct {
  const em_tensor *t;
  int i;
} leaf_ref;

typedef struct {
  const em_backward_hooks *h;
  leaf_ref *sorted; /* (h->n) */
} leaf_set;

static int cmp_leaf_ref(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const leaf_ref *)a)->t, y = (uintptr_t)((const leaf_ref *)b)->t;
  return x < y ? -1 : x > y;
}

static int leaf_index(const leaf_set *ls, const em_tensor *t) {
  if (!t || t->grad_fn) return -1;
  leaf_ref key = {t, -1};
  const leaf_ref *r = bsearch(&key, ls->sorted, (size_t)ls->h->n, sizeof key, cmp_leaf_ref);
  return r ? r->i : -1;
}

/* last[i]: the lowest tape index with leaves[i] as an input (the walk's
 * last contribution to its gradient), or -1. */
static void find_last_uses(const leaf_set *ls, em_node **tape, int64_t n, int64_t *last) {
  for (int i = 0; i < ls->h->n; i++) last[i] = -1;
  for (int64_t k = 0; k < n; k++)
    for (int j = 0; j < tape[k]->n_in; j++) {
      int i = leaf_index(ls, tape[k]->in[j]);
      if (i >= 0 && last[i] < 0) last[i] = k;
    }
}

/* After node k: the leaves whose gradient it finalised. */
static void fire_ready(const leaf_set *ls, const em_node *node, int64_t k, int64_t *last) {
  for (int j = 0; j < node->n_in; j++) {
    int i = leaf_index(ls, node->in[j]);
    if (i >= 0 && last[i] == k) {
      last[i] = -2; /* fired */
      ls->h->ready(ls->h->user, i);
    }
  }
}

/* After node's backward: its temporaries and its output's gradient (see
 * the top), unless the output is persistent or the record overflowed. */
static void release_node(em_node *node, int64_t mark) {
  em_tensor *out = node->out;
  if (walk_keep.overflow || (out->flags & EM_TENSOR_PERSISTENT)) return;
  em_scope_release_since(mark, walk_keep.p, walk_keep.n);
  if (!keep_has(out->grad->data)) em_scope_release(out->grad->data);
  out->grad = NULL;
}

static void walk_tape(void) {
  int64_t n;
  em_node **tape = em_scope_tape(&n);
  const em_backward_hooks *h = hooks;
  int64_t *last = NULL;
  leaf_set ls = {h, NULL};
  if (h) {
    size_t nl = (size_t)(h->n > 0 ? h->n : 1);
    last = em_scope_arena_alloc(sizeof(int64_t) * nl);
    ls.sorted = em_scope_arena_alloc(sizeof(leaf_ref) * nl);
    for (int i = 0; i < h->n; i++) ls.sorted[i] = (leaf_ref){h->leaves[i], i};
    qsort(ls.sorted, (size_t)h->n, sizeof(leaf_ref), cmp_leaf_ref);
    find_last_uses(&ls, tape, n, last);
  }
  for (int64_t k = n - 1; k >= 0; k--) {
    em_node *node = tape[k];
    if (node->out->grad && node->backward) {
      const int64_t mark = em_scope_alloc_mark();
      walk_keep.on = true;
      walk_keep.overflow = false;
      walk_keep.n = 0;
      if (em_profile_hooks_on()) {
        int tok = em_prof_backward_begin(node);
        node->backward(node);
        em_prof_backward_end(tok, node);
      } else {
        node->backward(node);
      }
      walk_keep.on = false;
      release_node(node, mark);
    }
    if (h) {
      fire_ready(&ls, node, k, last);
      if (h->node_done) h->node_done(h->user);
    }
  }
  if (h)
    for (int i = 0; i < h->n; i++)
      if (last[i] == -1) h->ready(h->user, i);
  em_scope_tape_clear();
}

void em_backward(em_tensor *loss) {
  EM_ASSERT(em_tensor_numel(loss) == 1);
  if (!em_tensor_requires_grad(loss)) return;
  bool prev = em_no_grad_begin();
  bool fresh;
  em_tensor *g = em_grad_acquire(loss, &fresh);
  if (fresh) em_tensor_fill_(g, 1.0);
  else em_tensor_fill_(g, em_tensor_item(g) + 1.0);
  walk_tape();
  em_grad_mode_restore(prev);
}

void em_backward_grad(em_tensor *out, const em_tensor *grad) {
  if (!em_tensor_requires_grad(out)) return;
  bool prev = em_no_grad_begin();
  em_grad_accumulate(out, grad);
  walk_tape();
  em_grad_mode_restore(prev);
}
