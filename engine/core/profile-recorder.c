/* profile-recorder.c: profiling sessions, the spans of each thread and the
 * ring buffer of finished records.
 *
 * Each thread keeps a stack of open spans (steps, layers, ranges, ops,
 * backward nodes). Closing a span computes its self time and FLOPs
 * (children's are added to the parent) and, while a session records,
 * copies it into the ring under one mutex. Spans opened in an earlier
 * session are closed without being recorded. Strings that must outlive
 * their caller (layer paths, range names) are interned once and kept
 * for the life of the process.
 *
 * The per-thread state is allocated on a thread's first span and freed
 * when the thread exits. */
#include "profile-private.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

_Atomic int em_profile_hooks_;
_Atomic int em_prof_track_memory_;

#define MAX_SPANS 64
#define TAG_SLOTS 4096 /* node -> layer tags per thread */
#define TAG_PROBES 8
#define LAYER_CACHE 64
#define SITE_CACHE 256

/* ---- session (under lock) ------------------------------------------------------- */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static em_prof_record *ring;
static int64_t ring_cap, ring_total;
#define MEM_CAP 4096
static em_prof_mem_sample *mem_ring;
static int64_t mem_total;
static _Atomic int64_t origin_ns;    /* the session's zero, absolute */
static _Atomic int64_t origin_ticks; /* the same instant in ticks */
static _Atomic int session;         /* bumped by every start */
static _Atomic int64_t step_count;  /* steps begun this session */
static _Atomic int next_tid;

static int64_t abs_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Span times are taken in ticks: the x86 time-stamp counter where it is
 * invariant (constant rate, running in every power state: a few ns to
 * read, where clock_gettime may be a system call in a virtual machine),
 * else CLOCK_MONOTONIC nanoseconds. Ticks become nanoseconds when the
 * records are read, at the rate measured over the whole session. */
static bool use_tsc;

static bool tsc_invariant(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
#else
  return false;
#endif
}

static inline int64_t ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  if (use_tsc) return (int64_t)__rdtsc();
#endif
  return abs_ns();
}

int64_t em_prof_now(void) {
  return ticks() - atomic_load_explicit(&origin_ticks, memory_order_relaxed);
}

/* Nanoseconds per tick over the session so far. */
static double ns_per_tick(void) {
  if (!use_tsc) return 1.0;
  int64_t dt = ticks() - atomic_load(&origin_ticks), dn = abs_ns() - atomic_load(&origin_ns);
  return dt > 0 && dn > 0 ? (double)dn / (double)dt : 1.0;
}

static bool recording(void) {
  return (atomic_load_explicit(&em_profile_hooks_, memory_order_relaxed) & EM_HOOK_PROFILE) != 0;
}

/* ---- interned strings ------------------------------------------------------------------ */
#define MAX_STRINGS 8192
#define STRING_SLOTS 16384
static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static char *strings[MAX_STRINGS];
static _Atomic int32_t n_strings;
static int32_t string_slots[STRING_SLOTS]; /* id + 1; 0 empty */

static uint64_t str_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

int32_t em_prof_intern(const char *s) {
  uint64_t h = str_hash(s);
  pthread_mutex_lock(&intern_lock);
  int32_t id = -1;
  for (uint64_t k = 0; k < STRING_SLOTS; k++) {
    int32_t *slot = &string_slots[(h + k) & (STRING_SLOTS - 1)];
    if (*slot == 0) {
      int32_t n = atomic_load(&n_strings);
      char *copy = n < MAX_STRINGS ? strdup(s) : NULL;
      if (copy) {
        strings[n] = copy;
        *slot = n + 1;
        atomic_store(&n_strings, n + 1);
        id = n;
      }
      break;
    }
    if (!strcmp(strings[*slot - 1], s)) {
      id = *slot - 1;
      break;
    }
  }
  pthread_mutex_unlock(&intern_lock);
  return id;
}

const char *em_prof_string(int32_t id) {
  return id >= 0 && id < atomic_load(&n_strings) ? strings[id] : "?";
}

/* ---- per-thread state ---------------------------------------------------------------- */
typedef struct {
  em_prof_record r;
  int session;     /* the session it was opened in; 0: not recorded */
  int64_t child_ns;
  double child_flops;
  int64_t bytes0;
  int32_t site;    /* -1 until the span allocates */
  int n_in;
  em_tensor *in[EM_PROF_SHAPES];
} span;

typedef struct {
  const em_node *node;
  int32_t layer;
  int session;
} node_tag;

typedef struct {
  const char *name; /* the caller's pointer */
  int32_t id;
} layer_cache_entry;

typedef struct {
  const char *op;
  int32_t layer;
  int32_t site; /* -1: empty */
  bool backward;
} site_cache_entry;

typedef struct {
  span spans[MAX_SPANS];
  int depth;
  int32_t tid;
  int64_t bytes;      /* allocated by this thread while tracking */
  int step_token;     /* the open step span, -1: none */
  node_tag tags[TAG_SLOTS];
  layer_cache_entry cache[LAYER_CACHE];
  site_cache_entry sites[SITE_CACHE]; /* sites are never forgotten: no invalidation */
} thread_state;

static _Thread_local thread_state *tls;
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p) {
  tls = NULL; /* runs on the exiting thread */
  free(p);
}
static void tls_init(void) { pthread_key_create(&tls_key, tls_free); }

static thread_state *state(void) {
  if (tls) return tls;
  pthread_once(&tls_once, tls_init);
  thread_state *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->tid = atomic_fetch_add(&next_tid, 1);
  s->step_token = -1;
  for (int i = 0; i < SITE_CACHE; i++) s->sites[i].site = -1;
  pthread_setspecific(tls_key, s);
  tls = s;
  return s;
}

/* ---- spans --------------------------------------------------------------------------------- */

static void add_shape(span *f, int ndim, const int64_t *shape) {
  if (f->r.n_shapes >= EM_PROF_SHAPES) return;
  int k = f->r.n_shapes++;
  f->r.ndim[k] = (int8_t)ndim;
  for (int d = 0; d < ndim && d < EM_PROF_DIMS; d++)
    f->r.dims[k][d] = shape[d] > INT32_MAX ? INT32_MAX : (int32_t)shape[d];
}

/* Opens a span of `kind` on s; layer < -1 inherits the parent's layer. */
static int open_span(thread_state *s, int kind, const char *name, int32_t layer) {
  if (s->depth >= MAX_SPANS) return -1;
  const span *parent = s->depth ? &s->spans[s->depth - 1] : NULL;
  span *f = &s->spans[s->depth];
  memset(&f->r, 0, offsetof(em_prof_record, dims));
  f->r.name = name;
  f->r.kind = (uint8_t)kind;
  f->r.tid = s->tid;
  f->r.depth = (uint8_t)s->depth;
  f->r.layer = layer < -1 ? (parent ? parent->r.layer : -1) : layer;
  f->r.in_backward = kind == EM_SPAN_BACKWARD || (parent && parent->r.in_backward);
  bool counted = kind == EM_SPAN_OP || kind == EM_SPAN_BACKWARD || kind == EM_SPAN_RANGE;
  bool parent_counted = parent && (parent->r.kind == EM_SPAN_OP ||
                                   parent->r.kind == EM_SPAN_BACKWARD ||
                                   parent->r.kind == EM_SPAN_RANGE);
  f->r.layer_outer = counted && !(parent_counted && parent->r.layer == f->r.layer);
  f->child_ns = 0;
  f->child_flops = 0;
  f->bytes0 = s->bytes;
  f->site = -1;
  f->n_in = 0;
  f->session = recording() ? atomic_load_explicit(&session, memory_order_relaxed) : 0;
  f->r.start_ns = f->session ? em_prof_now() : 0;
  return s->depth++;
}

static void push_record(const span *f) {
  pthread_mutex_lock(&lock);
  if (ring && recording() && f->session == atomic_load(&session)) {
    ring[ring_total % ring_cap] = f->r;
    ring_total++;
  }
  pthread_mutex_unlock(&lock);
}

/* Closes the innermost span. */
static void close_top(thread_state *s) {
  span *f = &s->spans[--s->depth];
  int64_t end = f->session ? em_prof_now() : 0, total = end - f->r.start_ns;
  f->r.end_ns = end;
  f->r.self_ns = total - f->child_ns;
  f->r.bytes = s->bytes - f->bytes0;
  f->r.flops += f->child_flops;
  if (s->depth > 0) {
    span *p = &s->spans[s->depth - 1];
    p->child_ns += total;
    p->child_flops += f->r.flops;
  }
  if (f->session) push_record(f);
}

/* Closes spans down to and including token (spans left open inside it,
 * by a caller that forgot to close them, end with it). */
static void close_to(thread_state *s, int token) {
  while (s->depth > token) close_top(s);
}

/* ---- ops -------------------------------------------------------------------------------------- */

int em_op_begin_(const char *name, int n, em_tensor *const *inputs) {
  thread_state *s = state();
  if (!s) return -1;
  int tok = open_span(s, EM_SPAN_OP, name, -2);
  if (tok < 0) return -1;
  span *f = &s->spans[tok];
  for (int k = 0; k < n; k++) {
    em_tensor *t = inputs[k];
    if (!t) continue;
    add_shape(f, t->ndim, t->shape);
    if (f->n_in < EM_PROF_SHAPES) f->in[f->n_in++] = t;
  }
  return tok;
}

void em_op_note_shape_(int token, int ndim, const int64_t *shape) {
  thread_state *s = tls;
  if (s && token >= 0 && token < s->depth) add_shape(&s->spans[token], ndim, shape);
}

void em_op_add_flops_(double flops) {
  thread_state *s = tls;
  if (s && s->depth > 0) s->spans[s->depth - 1].r.flops += flops;
}

em_tensor *em_op_end_(int token, em_tensor *out) {
  thread_state *s = tls;
  if (!s || token < 0 || token >= s->depth) return out;
  span *f = &s->spans[token];
  const char *name = f->r.name;
  int32_t layer = f->r.layer;
  bool bw = f->r.in_backward;
  int n_in = f->n_in;
  em_tensor *in[EM_PROF_SHAPES];
  memcpy(in, f->in, sizeof(em_tensor *) * (size_t)n_in);
  close_to(s, token);
  if (out && (atomic_load_explicit(&em_profile_hooks_, memory_order_relaxed) & EM_HOOK_ANOMALY))
    em_anomaly_check_output(name, layer, bw, out, n_in, in);
  return out;
}

/* ---- layers and ranges --------------------------------------------------------------------- */

static int32_t current_layer(const thread_state *s) {
  return s->depth ? s->spans[s->depth - 1].r.layer : -1;
}

static int32_t layer_id(thread_state *s, const char *name) {
  int32_t parent = current_layer(s);
  if (parent >= 0) { /* nested: "outer/inner" */
    char path[512];
    snprintf(path, sizeof path, "%s/%s", em_prof_string(parent), name);
    return em_prof_intern(path);
  }
  layer_cache_entry *c = &s->cache[((uintptr_t)name >> 3) % LAYER_CACHE];
  if (c->name == name && !strcmp(em_prof_string(c->id), name)) return c->id;
  int32_t id = em_prof_intern(name);
  c->name = name;
  c->id = id;
  return id;
}

int em_profile_layer_begin_(const char *name) {
  thread_state *s = state();
  if (!s) return -1;
  return open_span(s, EM_SPAN_LAYER, "layer", layer_id(s, name ? name : "?"));
}

int em_profile_range_begin_(const char *name) {
  thread_state *s = state();
  if (!s) return -1;
  int32_t id = em_prof_intern(name ? name : "?");
  return open_span(s, EM_SPAN_RANGE, id >= 0 ? em_prof_string(id) : "range", -2);
}

void em_profile_span_end_(int token) {
  thread_state *s = tls;
  if (s && token >= 0 && token < s->depth) close_to(s, token);
}

/* ---- autograd ---------------------------------------------------------------------------------- */

static uint64_t node_hash(const em_node *n) {
  return ((uint64_t)(uintptr_t)n >> 4) * 0x9E3779B97F4A7C15ull >> 40;
}

/* Tags are valid for one hooks session: profiling and anomaly mode both
 * bump `session` when they start. */
void em_prof_node_tag(const em_node *node) {
  thread_state *s = state();
  if (!s) return;
  int sess = atomic_load_explicit(&session, memory_order_relaxed);
  int32_t layer = current_layer(s);
  uint64_t h = node_hash(node);
  node_tag *victim = &s->tags[h % TAG_SLOTS];
  for (int k = 0; k < TAG_PROBES; k++) {
    node_tag *t = &s->tags[(h + (uint64_t)k) % TAG_SLOTS];
    if (t->node == node || t->session != sess || !t->node) {
      victim = t;
      break;
    }
  }
  *victim = (node_tag){node, layer, sess};
}

static int32_t node_layer(const thread_state *s, const em_node *node) {
  int sess = atomic_load_explicit(&session, memory_order_relaxed);
  uint64_t h = node_hash(node);
  for (int k = 0; k < TAG_PROBES; k++) {
    const node_tag *t = &s->tags[(h + (uint64_t)k) % TAG_SLOTS];
    if (t->node == node && t->session == sess) return t->layer;
  }
  return -1;
}

int em_prof_backward_begin(const em_node *node) {
  thread_state *s = state();
  if (!s) return -1;
  int tok = open_span(s, EM_SPAN_BACKWARD, node->op ? node->op : "?", node_layer(s, node));
  if (tok < 0) return -1;
  span *f = &s->spans[tok];
  if (node->out->grad) add_shape(f, node->out->grad->ndim, node->out->grad->shape);
  for (int k = 0; k < node->n_in; k++)
    if (node->in[k]) add_shape(f, node->in[k]->ndim, node->in[k]->shape);
  return tok;
}

void em_prof_backward_end(int token, const em_node *node) {
  thread_state *s = tls;
  if (!s || token < 0 || token >= s->depth) return;
  const char *name = s->spans[token].r.name;
  int32_t layer = s->spans[token].r.layer;
  close_to(s, token);
  if (atomic_load_explicit(&em_profile_hooks_, memory_order_relaxed) & EM_HOOK_ANOMALY)
    em_anomaly_check_node(name, layer, node);
}

/* ---- memory tracking ------------------------------------------------------------------------- */

int em_prof_alloc_site(int64_t bytes) {
  thread_state *s = state();
  if (!s) return 0;
  s->bytes += bytes;
  if (!s->depth) return 0;
  span *f = &s->spans[s->depth - 1];
  if (f->site < 0) {
    bool named = f->r.kind == EM_SPAN_OP || f->r.kind == EM_SPAN_BACKWARD ||
                 f->r.kind == EM_SPAN_RANGE;
    const char *op = named ? f->r.name : NULL;
    bool bw = f->r.in_backward;
    uint64_t h = ((uint64_t)(uintptr_t)op >> 3) * 31 + (uint64_t)(uint32_t)f->r.layer * 7 + bw;
    site_cache_entry *c = &s->sites[h % SITE_CACHE];
    if (c->site < 0 || c->op != op || c->layer != f->r.layer || c->backward != bw)
      *c = (site_cache_entry){op, f->r.layer, em_prof_site_intern(op, f->r.layer, bw), bw};
    f->site = c->site;
  }
  return f->site;
}

/* ---- sessions ------------------------------------------------------------------------------------ */

void em_profile_options_defaults(em_profile_options *o) {
  o->capacity = 65536;
  o->track_memory = true;
}

static void decide_clock(void) { use_tsc = tsc_invariant() && !getenv("EMBER_PROFILE_NO_TSC"); }

em_status em_profile_start(const em_profile_options *o, em_error *err) {
  em_profile_options d;
  em_profile_options_defaults(&d);
  if (!o) o = &d;
  if (o->capacity < 16 || o->capacity > ((int64_t)1 << 26))
    return em_error_set(err, EM_ERR_INVALID,
                        "profiler capacity %lld is out of range: keep between 16 and %lld records",
                        (long long)o->capacity, (long long)1 << 26);
  em_prof_record *r = malloc(sizeof *r * (size_t)o->capacity);
  em_prof_mem_sample *m = malloc(sizeof *m * MEM_CAP);
  if (!r || !m) {
    free(r);
    free(m);
    return em_error_set(err, EM_ERR_NOMEM,
                        "out of memory for a profiler ring of %lld records; ask for fewer",
                        (long long)o->capacity);
  }
  em_profile_stop();
  pthread_mutex_lock(&lock);
  free(ring);
  free(mem_ring);
  ring = r;
  ring_cap = o->capacity;
  ring_total = 0;
  mem_ring = m;
  mem_total = 0;
  static pthread_once_t tsc_once = PTHREAD_ONCE_INIT;
  pthread_once(&tsc_once, decide_clock);
  atomic_store(&origin_ticks, ticks());
  atomic_store(&origin_ns, abs_ns());
  atomic_store(&step_count, 0);
  atomic_fetch_add(&session, 1);
  pthread_mutex_unlock(&lock);
  if (o->track_memory) {
    em_alloc_tagging(true);
    atomic_store(&em_prof_track_memory_, 1);
  }
  atomic_fetch_or(&em_profile_hooks_, EM_HOOK_PROFILE);
  return EM_OK;
}

void em_profile_stop(void) {
  atomic_fetch_and(&em_profile_hooks_, ~EM_HOOK_PROFILE);
  if (atomic_exchange(&em_prof_track_memory_, 0)) em_alloc_tagging(false);
}

bool em_profile_running(void) { return recording(); }

int64_t em_profile_record_count(void) {
  pthread_mutex_lock(&lock);
  int64_t n = ring_total < ring_cap ? ring_total : ring_cap;
  pthread_mutex_unlock(&lock);
  return n;
}

int64_t em_profile_dropped_count(void) {
  pthread_mutex_lock(&lock);
  int64_t n = ring_total > ring_cap ? ring_total - ring_cap : 0;
  pthread_mutex_unlock(&lock);
  return n;
}

void em_prof_new_tag_session(void) {
  if (!recording()) atomic_fetch_add(&session, 1);
}

em_prof_record *em_prof_records_copy(int64_t *n) {
  pthread_mutex_lock(&lock);
  int64_t kept = ring_total < ring_cap ? ring_total : ring_cap;
  em_prof_record *out = kept ? malloc(sizeof *out * (size_t)kept) : NULL;
  if (out) {
    int64_t first = ring_total - kept;
    double scale = ns_per_tick();
    for (int64_t i = 0; i < kept; i++) {
      em_prof_record *r = &out[i];
      *r = ring[(first + i) % ring_cap];
      if (scale != 1.0) {
        r->start_ns = (int64_t)((double)r->start_ns * scale);
        r->end_ns = (int64_t)((double)r->end_ns * scale);
        r->self_ns = (int64_t)((double)r->self_ns * scale);
      }
    }
  }
  *n = out ? kept : 0;
  pthread_mutex_unlock(&lock);
  return out;
}

em_prof_mem_sample *em_prof_mem_samples_copy(int64_t *n) {
  pthread_mutex_lock(&lock);
  int64_t kept = mem_total < MEM_CAP ? mem_total : MEM_CAP;
  em_prof_mem_sample *out = kept ? malloc(sizeof *out * (size_t)kept) : NULL;
  if (out) {
    int64_t first = mem_total - kept;
    double scale = ns_per_tick();
    for (int64_t i = 0; i < kept; i++) {
      out[i] = mem_ring[(first + i) % MEM_CAP];
      out[i].ts_ns = (int64_t)((double)out[i].ts_ns * scale);
    }
  }
  *n = out ? kept : 0;
  pthread_mutex_unlock(&lock);
  return out;
}

/* ---- steps --------------------------------------------------------------------------------------- */

void em_profile_step_begin(void) {
  if (!recording()) return;
  thread_state *s = state();
  if (!s) return;
  if (s->step_token >= 0 && s->step_token < s->depth) close_to(s, s->step_token);
  int tok = open_span(s, EM_SPAN_STEP, "step", -2);
  if (tok >= 0) s->spans[tok].r.step = atomic_fetch_add(&step_count, 1) + 1;
  s->step_token = tok;
}

/* The span begun as a step held no batch (the loader's end of an epoch):
 * it is kept as a range, "epoch.end", and gives its step number back, so
 * that per-step figures divide by the steps trained. */
void em_profile_step_cancel(void) {
  thread_state *s = tls;
  if (s && s->step_token >= 0 && s->step_token < s->depth &&
      s->spans[s->step_token].r.kind == EM_SPAN_STEP) {
    span *f = &s->spans[s->step_token];
    f->r.kind = EM_SPAN_RANGE;
    f->r.name = "epoch.end";
    if (f->r.step > 0) atomic_fetch_sub(&step_count, 1);
    f->r.step = 0;
  }
  em_profile_step_end();
}

void em_profile_step_end(void) {
  em_prof_leak_sample();
  thread_state *s = tls;
  if (s && s->step_token >= 0) {
    if (s->step_token < s->depth) close_to(s, s->step_token);
    s->step_token = -1;
  }
  if (!recording()) return;
  em_memory_stats ms;
  em_memory_stats_get(&ms);
  pthread_mutex_lock(&lock);
  if (mem_ring) {
    mem_ring[mem_total % MEM_CAP] = (em_prof_mem_sample){em_prof_now(), ms.allocated_bytes,
                                                          ms.reserved_bytes};
    mem_total++;
  }
  pthread_mutex_unlock(&lock);
}
