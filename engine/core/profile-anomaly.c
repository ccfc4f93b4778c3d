/* profile-anomaly.c: anomaly mode. Every op's output and every gradient a
 * backward node writes is scanned for NaN and infinity; the first one is
 * kept with the layer and op that produced it, for em_anomaly_check.
 *
 * Views (outputs sharing an input's storage) produce no new values and
 * are not scanned. After the first anomaly nothing more is scanned until
 * the mode is cleared: the first is the one that matters.
 *
 * A scan reads each value once, vectorised and over the thread pool
 * (tests/bench/bench-profile: a step costs 2-5% more with the mode on; a
 * value-by-value loop had made fmnist-cnn's 1.7x slower). */
#include "core-private.h"
#include "profile-private.h"
#include "em-device.h"
#include "em-pool.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool found;
static char message[1024];

void em_anomaly_set(bool on) {
  em_anomaly_clear();
  if (on) {
    em_prof_new_tag_session();
    atomic_fetch_or(&em_profile_hooks_, EM_HOOK_ANOMALY);
  } else {
    atomic_fetch_and(&em_profile_hooks_, ~EM_HOOK_ANOMALY);
  }
}

bool em_anomaly_enabled(void) {
  return (atomic_load(&em_profile_hooks_) & EM_HOOK_ANOMALY) != 0;
}

void em_anomaly_clear(void) {
  pthread_mutex_lock(&lock);
  atomic_store(&found, false);
  message[0] = 0;
  pthread_mutex_unlock(&lock);
}

em_status em_anomaly_check(em_error *err) {
  if (!atomic_load(&found)) return EM_OK;
  pthread_mutex_lock(&lock);
  em_status st = em_error_set(err, EM_ERR_NUMERIC, "%s", message);
  pthread_mutex_unlock(&lock);
  return st;
}

static int scan_host(const em_tensor *t);

/* A device tensor is scanned in a host copy (anomaly mode is for finding
 * where a NaN starts, not for speed). */
static int scan_device(const em_tensor *t) {
  if (!t->data) return 0; /* no data after an out-of-memory error */
  size_t nbytes = em_tensor_nbytes(t);
  void *host = malloc(nbytes);
  if (!host) return 0;
  em_tensor h = *t;
  h.data = host;
  h.offset = 0;
  h.device = em_device_cpu();
  em_set_contiguous_strides(&h);
  em_strided_copy(&h, t);
  int kind = scan_host(&h);
  free(host);
  return kind;
}

/* 0: all finite; 1: the first non-finite value is NaN; 2: infinity. */
static int scan(const em_tensor *t) {
  if (t->dtype != EM_DTYPE_F32 && t->dtype != EM_DTYPE_F64) return 0;
  if (em_tensor_numel(t) == 0) return 0;
  return em_on_device(t) ? scan_device(t) : scan_host(t);
}

/* The first non-finite value of x[0, n) (n when none): a block's largest
 * exponent field is compared once (an integer maximum the compiler
 * vectorises; a float test per value with an early exit does not), and
 * only a block that holds one is searched value by value. T is the
 * float type, U the unsigned integer of its size, EXP its exponent bits. */
#define FIRST_NONFINITE(NAME, T, U, EXP)                                \
  static int64_t NAME(const T *x, int64_t n) {                          \
    enum { BLOCK = 4096 / (int)sizeof(T) };                             \
    for (int64_t b = 0; b < n; b += BLOCK) {                            \
      int64_t e = b + BLOCK < n ? b + BLOCK : n;                        \
      U top = 0;                                                        \
      for (int64_t i = b; i < e; i++) {                                 \
        U u;                                                            \
        memcpy(&u, &x[i], sizeof u);                                    \
        u &= (EXP);                                                     \
        top = u > top ? u : top;                                        \
      }                                                                 \
      if (top == (EXP))                                                 \
        for (int64_t i = b; i < e; i++)                                 \
          if (!isfinite(x[i])) return i;                                \
    }                                                                   \
    return n;                                                           \
  }
FIRST_NONFINITE(first_nonfinite_f32, float, uint32_t, 0x7f800000u)
FIRST_NONFINITE(first_nonfinite_f64, double, uint64_t, 0x7ff0000000000000ull)

typedef struct {
  const void *x;
  bool f64;
  _Atomic int64_t first; /* the smallest non-finite index found so far */
} scan_job;

static void scan_part(void *ctx, int64_t b, int64_t e) {
  scan_job *j = ctx;
  if (b >= atomic_load_explicit(&j->first, memory_order_relaxed)) return; /* one before it */
  int64_t i = j->f64 ? b + first_nonfinite_f64((const double *)j->x + b, e - b)
                     : b + first_nonfinite_f32((const float *)j->x + b, e - b);
  if (i == e) return;
  int64_t cur = atomic_load(&j->first);
  while (i < cur && !atomic_compare_exchange_weak(&j->first, &cur, i)) {
  }
}

/* Contiguous tensors are scanned over the thread pool; the first
 * non-finite value (the smallest index, whoever finds it) decides. */
static int scan_host(const em_tensor *t) {
  int64_t n = em_tensor_numel(t);
  if (em_tensor_is_contiguous(t)) {
    bool f64 = t->dtype == EM_DTYPE_F64;
    scan_job j = {.x = f64 ? (const void *)em_f64(t) : (const void *)em_f32(t), .f64 = f64};
    atomic_init(&j.first, n);
    em_parallel_for(n, 1 << 15, scan_part, &j);
    int64_t i = atomic_load(&j.first);
    if (i == n) return 0;
    double v = f64 ? em_f64(t)[i] : em_f32(t)[i];
    return isnan(v) ? 1 : 2;
  }
  int64_t idx[EM_MAX_DIMS] = {0};
  for (int64_t i = 0; i < n; i++) {
    double v = em_tensor_get(t, idx);
    if (!isfinite(v)) return isnan(v) ? 1 : 2;
    for (int d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
  return 0;
}

static const char *what(int kind) { return kind == 1 ? "NaN" : "infinity"; }

static void where(char *buf, size_t n, const char *op, int32_t layer, bool backward) {
  const char *dir = backward ? "backward" : "forward";
  if (layer >= 0) snprintf(buf, n, "layer '%s', op '%s' (%s)", em_prof_string(layer), op, dir);
  else snprintf(buf, n, "op '%s' (%s, outside layers)", op, dir);
}

/* Keeps msg as the anomaly unless one is kept already. */
static void keep(const char *msg) {
  pthread_mutex_lock(&lock);
  if (!atomic_load(&found)) {
    snprintf(message, sizeof message, "%s", msg);
    atomic_store(&found, true);
  }
  pthread_mutex_unlock(&lock);
}

void em_anomaly_check_output(const char *op, int32_t layer, bool backward, const em_tensor *out,
                             int n_in, em_tensor *const *inputs) {
  if (atomic_load_explicit(&found, memory_order_relaxed)) return;
  for (int k = 0; k < n_in; k++)
    if (inputs[k] && inputs[k]->data == out->data) return; /* a view */
  int kind = scan(out);
  if (!kind) return;
  char loc[256], shape[160], msg[1024];
  where(loc, sizeof loc, op, layer, backward);
  size_t len = (size_t)snprintf(msg, sizeof msg, "%s produced %s in its output %s", loc,
                                what(kind), em_shape_str(out->ndim, out->shape, shape, sizeof shape));
  for (int k = 0; k < n_in; k++) { /* say where it came from when an input held it */
    int in_kind = inputs[k] ? scan(inputs[k]) : 0;
    if (!in_kind || len >= sizeof msg) continue;
    if (inputs[k]->name)
      snprintf(msg + len, sizeof msg - len, "; its input '%s' already held %s", inputs[k]->name,
               what(in_kind));
    else
      snprintf(msg + len, sizeof msg - len, "; its input %d already held %s", k, what(in_kind));
    break;
  }
  keep(msg);
}

void em_anomaly_check_node(const char *op, int32_t layer, const em_node *node) {
  if (atomic_load_explicit(&found, memory_order_relaxed)) return;
  for (int k = 0; k < node->n_in; k++) {
    const em_tensor *x = node->in[k];
    if (!x || !em_tensor_requires_grad(x) || !x->grad) continue;
    int kind = scan(x->grad);
    if (!kind) continue;
    char loc[256], shape[160], msg[1024];
    where(loc, sizeof loc, op, layer, true);
    size_t len = (size_t)snprintf(msg, sizeof msg, "%s produced %s in the gradient of input %d %s",
                                  loc, what(kind), k,
                                  em_shape_str(x->ndim, x->shape, shape, sizeof shape));
    if (x->name && len < sizeof msg)
      len += (size_t)snprintf(msg + len, sizeof msg - len, " ('%s')", x->name);
    if (node->out->grad && scan(node->out->grad) && len < sizeof msg)
      snprintf(msg + len, sizeof msg - len, "; the gradient it received was already non-finite");
    keep(msg);
    return;
  }
}
