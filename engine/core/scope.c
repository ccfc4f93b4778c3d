/* scope.c: step scopes. A scope owns the tensors, tape nodes and scratch
 * made while it is innermost on its thread and releases them in one go.
 * Scope objects, their arena chunks and their lists are kept on a per-
 * thread free list, so a steady training loop never calls malloc here. */
#include "core-private.h"
#include "em-backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_MIN (64 * 1024)
#define MAX_DEPTH 64

typedef struct chunk {
  struct chunk *next;
  size_t size, used;
  _Alignas(16) char mem[];
} chunk;

typedef struct {
  void *ptr;
  size_t nbytes;
  em_device device; /* where ptr lives (the CPU for most) */
} allocation;

struct em_scope {
  chunk *first, *cur;
  allocation *allocs;
  int64_t n_allocs, cap_allocs;
  em_node **tape;
  int64_t n_tape, cap_tape;
  em_scope *next_free;
};

static _Thread_local em_scope *stack[MAX_DEPTH];
static _Thread_local int depth;
static _Thread_local em_scope *free_scopes;

/* A thread's cached scopes go when the thread ends (a server's workers
 * come and go): a pthread key's destructor frees the free list. */
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static void free_scope_list(void *unused) {
  (void)unused;
  while (free_scopes) {
    em_scope *s = free_scopes;
    free_scopes = s->next_free;
    for (chunk *c = s->first; c;) {
      chunk *next = c->next;
      free(c);
      c = next;
    }
    free(s->allocs);
    free(s->tape);
    free(s);
  }
}

static void make_exit_key(void) { EM_ASSERT(pthread_key_create(&exit_key, free_scope_list) == 0); }

em_scope *em_scope_begin(void) {
  EM_ASSERT(depth < MAX_DEPTH);
  em_scope *s = free_scopes;
  if (s) free_scopes = s->next_free;
  else {
    s = calloc(1, sizeof *s);
    EM_ASSERT(s);
    /* a non-NULL value makes the destructor run at this thread's exit */
    pthread_once(&exit_key_once, make_exit_key);
    pthread_setspecific(exit_key, s);
  }
  s->cur = s->first;
  if (s->cur) s->cur->used = 0;
  stack[depth++] = s;
  return s;
}

em_scope *em_scope_current(void) { return depth ? stack[depth - 1] : NULL; }

void em_scope_end(em_scope *s) {
  EM_ASSERT(depth > 0 && stack[depth - 1] == s);
  depth--;
  for (int64_t i = s->n_allocs - 1; i >= 0; i--)
    em_device_free(s->allocs[i].device, s->allocs[i].ptr, s->allocs[i].nbytes);
  s->n_allocs = 0;
  s->n_tape = 0;
  for (chunk *c = s->first; c; c = c->next) c->used = 0;
  s->cur = s->first;
  s->next_free = free_scopes;
  free_scopes = s;
}

static em_scope *current_or_die(void) {
  em_scope *s = em_scope_current();
  EM_ASSERT(s && "tensor op outside em_scope_begin/em_scope_end");
  return s;
}

void *em_scope_arena_alloc(size_t n) {
  em_scope *s = current_or_die();
  n = (n + 15) & ~(size_t)15;
  for (;;) {
    chunk *c = s->cur;
    if (c && c->size - c->used >= n) {
      void *p = c->mem + c->used;
      c->used += n;
      return p;
    }
    if (c && c->next) { /* move on to a chunk kept from an earlier step */
      s->cur = c->next;
      s->cur->used = 0;
      continue;
    }
    size_t size = n > CHUNK_MIN ? n : CHUNK_MIN;
    chunk *fresh = malloc(sizeof *fresh + size);
    EM_ASSERT(fresh);
    fresh->next = NULL;
    fresh->size = size;
    fresh->used = 0;
    if (c) c->next = fresh;
    else s->first = fresh;
    s->cur = fresh;
  }
}

static void track(em_scope *s, void *p, size_t nbytes, em_device device) {
  if (s->n_allocs == s->cap_allocs) {
    s->cap_allocs = s->cap_allocs ? 2 * s->cap_allocs : 256;
    s->allocs = realloc(s->allocs, sizeof *s->allocs * (size_t)s->cap_allocs);
    EM_ASSERT(s->allocs);
  }
  s->allocs[s->n_allocs++] = (allocation){p, nbytes, device};
}

void *em_scratch(size_t nbytes) {
  em_scope *s = current_or_die();
  void *p = em_alloc(nbytes);
  EM_ASSERT(p && "out of memory");
  track(s, p, nbytes, em_device_cpu());
  return p;
}

void em_scratch_done(void *p) {
  em_scope *s = current_or_die();
  /* the scope's newest allocations, scanned back a few: a kernel's
   * scratch is taken last, or nearly (its output may follow it) */
  for (int64_t i = s->n_allocs - 1; i >= 0 && i >= s->n_allocs - 4; i--)
    if (s->allocs[i].ptr == p) {
      em_device_free(s->allocs[i].device, p, s->allocs[i].nbytes);
      memmove(&s->allocs[i], &s->allocs[i + 1],
              sizeof *s->allocs * (size_t)(s->n_allocs - i - 1));
      s->n_allocs--;
      return;
    }
}

int64_t em_scope_alloc_mark(void) { return current_or_die()->n_allocs; }

/* Frees allocation i of s and drops it from the list. */
static void release_at(em_scope *s, int64_t i) {
  em_device_free(s->allocs[i].device, s->allocs[i].ptr, s->allocs[i].nbytes);
  memmove(&s->allocs[i], &s->allocs[i + 1], sizeof *s->allocs * (size_t)(s->n_allocs - i - 1));
  s->n_allocs--;
}

static bool kept(void *p, void *const *keep, int n_keep) {
  for (int k = 0; k < n_keep; k++)
    if (keep[k] == p) return true;
  return false;
}

void em_scope_release_since(int64_t mark, void *const *keep, int n_keep) {
  em_scope *s = current_or_die();
  EM_ASSERT(mark >= 0);
  for (int64_t i = s->n_allocs - 1; i >= mark; i--)
    if (!kept(s->allocs[i].ptr, keep, n_keep)) release_at(s, i);
}

bool em_scope_release(void *p) {
  em_scope *s = current_or_die();
  for (int64_t i = s->n_allocs - 1; i >= 0; i--)
    if (s->allocs[i].ptr == p) {
      release_at(s, i);
      return true;
    }
  return false;
}

em_node *em_scope_new_node(void) {
  em_scope *s = current_or_die();
  if (s->n_tape == s->cap_tape) {
    s->cap_tape = s->cap_tape ? 2 * s->cap_tape : 256;
    s->tape = realloc(s->tape, sizeof *s->tape * (size_t)s->cap_tape);
    EM_ASSERT(s->tape);
  }
  em_node *n = em_scope_arena_alloc(sizeof *n);
  memset(n, 0, sizeof *n);
  s->tape[s->n_tape++] = n;
  return n;
}

em_node **em_scope_tape(int64_t *count) {
  em_scope *s = current_or_die();
  *count = s->n_tape;
  return s->tape;
}

em_tensor *em_scope_tensor_struct(em_dtype dt, int ndim, const int64_t *shape) {
  EM_ASSERT(ndim >= 0 && ndim <= EM_MAX_DIMS);
  em_tensor *t = em_scope_arena_alloc(sizeof *t);
  memset(t, 0, sizeof *t);
  t->dtype = dt;
  t->ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    EM_ASSERT(shape[i] >= 0);
    t->shape[i] = shape[i];
  }
  em_set_contiguous_strides(t);
  return t;
}

em_tensor *em_empty(em_dtype dt, int ndim, const int64_t *shape) {
  em_tensor *t = em_scope_tensor_struct(dt, ndim, shape);
  t->data = em_scratch(em_tensor_nbytes(t));
  return t;
}

em_tensor *em_zeros(em_dtype dt, int ndim, const int64_t *shape) {
  em_tensor *t = em_empty(dt, ndim, shape);
  memset(t->data, 0, em_tensor_nbytes(t));
  return t;
}

em_tensor *em_full(em_dtype dt, int ndim, const int64_t *shape, double v) {
  em_tensor *t = em_empty(dt, ndim, shape);
  em_tensor_fill_(t, v);
  return t;
}

em_tensor *em_empty_like(const em_tensor *t) {
  return em_empty_on(t->device, t->dtype, t->ndim, t->shape);
}
em_tensor *em_zeros_like(const em_tensor *t) {
  return em_zeros_on(t->device, t->dtype, t->ndim, t->shape);
}

/* ---- tensors on devices ------------------------------------------------- */

em_tensor *em_empty_on(em_device d, em_dtype dt, int ndim, const int64_t *shape) {
  if (d.kind == EM_DEVICE_CPU) return em_empty(dt, ndim, shape);
  em_scope *s = current_or_die();
  em_tensor *t = em_scope_tensor_struct(dt, ndim, shape);
  t->device = d;
  size_t nbytes = em_tensor_nbytes(t);
  /* After an out-of-memory error the step only runs to its end: nothing
   * more is allocated (data stays NULL, device ops skip it). */
  if (em_device_error_pending()) return t;
  t->data = em_device_alloc(d, nbytes, NULL);
  if (t->data) track(s, t->data, nbytes, d);
  return t;
}

em_tensor *em_zeros_on(em_device d, em_dtype dt, int ndim, const int64_t *shape) {
  if (d.kind == EM_DEVICE_CPU) return em_zeros(dt, ndim, shape);
  em_tensor *t = em_empty_on(d, dt, ndim, shape);
  if (t->data && em_tensor_numel(t) > 0) EM_KCALL(em_kernels_of(t), fill, t, 0.0);
  return t;
}

em_tensor *em_full_on(em_device d, em_dtype dt, int ndim, const int64_t *shape, double v) {
  em_tensor *t = em_empty_on(d, dt, ndim, shape);
  em_tensor_fill_(t, v);
  return t;
}

em_tensor *em_from_data(em_dtype dt, int ndim, const int64_t *shape, const void *src) {
  em_tensor *t = em_empty(dt, ndim, shape);
  memcpy(t->data, src, em_tensor_nbytes(t));
  return t;
}

em_tensor *em_scalar(em_dtype dt, double v) { return em_full(dt, 0, NULL, v); }

em_tensor *em_view_raw(const em_tensor *t, int ndim, const int64_t *shape, const int64_t *stride,
                       int64_t offset) {
  em_tensor *v = em_scope_tensor_struct(t->dtype, ndim, shape);
  if (ndim > 0) memcpy(v->stride, stride, sizeof(int64_t) * (size_t)ndim);
  v->offset = offset;
  v->data = t->data;
  v->device = t->device;
  return v;
}

void em_scope_tape_clear(void) { current_or_die()->n_tape = 0; }

em_tensor *em_tensor_wrap(em_dtype dt, int ndim, const int64_t *shape, void *data) {
  em_tensor *t = em_scope_tensor_struct(dt, ndim, shape);
  t->data = data;
  return t;
}
