/* registries.c: the registries plugins fill besides the layer types:
 * dataset kinds, metrics, and the ONNX forms of plugin layer types. Kept
 * by pointer in registration order; the host adds and removes entries
 * (removal only rolls back a plugin whose load failed). */
#include "plugin-private.h"

#include <pthread.h>
#include <string.h>

#define MAX_ENTRIES 128

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const em_dataset_type *kinds[MAX_ENTRIES];
static int n_kinds;
static const em_metric_type *metrics[MAX_ENTRIES];
static int n_metrics;
static struct {
  const em_layer_type *type;
  em_layer_onnx_fn fn;
} onnx[MAX_ENTRIES];
static int n_onnx;

/* Removes entry i of an array of n pointers-sized slots, keeping order. */
#define REMOVE_AT(arr, n, i)                                              \
  do {                                                                    \
    memmove(&(arr)[i], &(arr)[(i) + 1], (size_t)((n) - (i) - 1) * sizeof (arr)[0]); \
    (n)--;                                                                \
  } while (0)

static bool valid_name(const char *s) {
  if (!s || !s[0] || strlen(s) >= 64) return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '-' || *p == '.'))
      return false;
  return true;
}

em_status em_dataset_type_add(const em_dataset_type *k, em_error *err) {
  if (!k || !valid_name(k->name) || !k->open)
    return em_error_set(err, EM_ERR_INVALID,
                        "a dataset kind needs a name (letters, digits, '_', '-', '.') and an open "
                        "function");
  if (em_dataset_name_is_builtin(k->name))
    return em_error_set(err, EM_ERR_INVALID, "dataset '%s' is built in", k->name);
  em_status st = EM_OK;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_kinds && st == EM_OK; i++)
    if (!strcmp(kinds[i]->name, k->name))
      st = em_error_set(err, EM_ERR_INVALID, "a dataset kind named '%s' is already registered",
                        k->name);
  if (st == EM_OK && n_kinds == MAX_ENTRIES)
    st = em_error_set(err, EM_ERR_NOMEM, "too many dataset kinds (%d)", MAX_ENTRIES);
  if (st == EM_OK) kinds[n_kinds++] = k;
  pthread_mutex_unlock(&lock);
  return st;
}

void em_dataset_type_remove(const em_dataset_type *k) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_kinds; i++)
    if (kinds[i] == k) {
      REMOVE_AT(kinds, n_kinds, i);
      break;
    }
  pthread_mutex_unlock(&lock);
}

const em_dataset_type *em_dataset_type_find(const char *name) {
  const em_dataset_type *k = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_kinds && !k; i++)
    if (!strcmp(kinds[i]->name, name)) k = kinds[i];
  pthread_mutex_unlock(&lock);
  return k;
}

int em_dataset_type_count(void) {
  pthread_mutex_lock(&lock);
  int n = n_kinds;
  pthread_mutex_unlock(&lock);
  return n;
}

const em_dataset_type *em_dataset_type_at(int i) {
  pthread_mutex_lock(&lock);
  const em_dataset_type *k = i >= 0 && i < n_kinds ? kinds[i] : NULL;
  pthread_mutex_unlock(&lock);
  return k;
}

em_status em_metric_add(const em_metric_type *m, em_error *err) {
  if (!m || !valid_name(m->name) || !m->compute)
    return em_error_set(err, EM_ERR_INVALID,
                        "a metric needs a name (letters, digits, '_', '-', '.') and a compute "
                        "function");
  em_status st = EM_OK;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_metrics && st == EM_OK; i++)
    if (!strcmp(metrics[i]->name, m->name))
      st = em_error_set(err, EM_ERR_INVALID, "a metric named '%s' is already registered",
                        m->name);
  if (st == EM_OK && n_metrics == MAX_ENTRIES)
    st = em_error_set(err, EM_ERR_NOMEM, "too many metrics (%d)", MAX_ENTRIES);
  if (st == EM_OK) metrics[n_metrics++] = m;
  pthread_mutex_unlock(&lock);
  return st;
}

void em_metric_remove(const em_metric_type *m) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_metrics; i++)
    if (metrics[i] == m) {
      REMOVE_AT(metrics, n_metrics, i);
      break;
    }
  pthread_mutex_unlock(&lock);
}

const em_metric_type *em_metric_find(const char *name) {
  const em_metric_type *m = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_metrics && !m; i++)
    if (!strcmp(metrics[i]->name, name)) m = metrics[i];
  pthread_mutex_unlock(&lock);
  return m;
}

int em_metric_count(void) {
  pthread_mutex_lock(&lock);
  int n = n_metrics;
  pthread_mutex_unlock(&lock);
  return n;
}

const em_metric_type *em_metric_at(int i) {
  pthread_mutex_lock(&lock);
  const em_metric_type *m = i >= 0 && i < n_metrics ? metrics[i] : NULL;
  pthread_mutex_unlock(&lock);
  return m;
}

em_status em_layer_onnx_add(const em_layer_type *type, em_layer_onnx_fn fn, em_error *err) {
  em_status st = EM_OK;
  pthread_mutex_lock(&lock);
  if (n_onnx == MAX_ENTRIES)
    st = em_error_set(err, EM_ERR_NOMEM, "too many plugin layer ONNX forms (%d)", MAX_ENTRIES);
  else {
    onnx[n_onnx].type = type;
    onnx[n_onnx++].fn = fn;
  }
  pthread_mutex_unlock(&lock);
  return st;
}

void em_layer_onnx_remove(const em_layer_type *type) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_onnx; i++)
    if (onnx[i].type == type) {
      REMOVE_AT(onnx, n_onnx, i);
      break;
    }
  pthread_mutex_unlock(&lock);
}

em_layer_onnx_fn em_layer_onnx_find(const em_layer_type *type) {
  em_layer_onnx_fn fn = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_onnx && !fn; i++)
    if (onnx[i].type == type) fn = onnx[i].fn;
  pthread_mutex_unlock(&lock);
  return fn;
}
