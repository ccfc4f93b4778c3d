/* registries.c: the registries plugins fill besides the layer types and
 * dataset kinds (engine/nn, engine/data): metrics, and the ONNX forms of
 * layer types (the built-ins', engine/export/onnx-layers.c, and plugins'). Kept by pointer in registration order; the host
 * adds and removes entries (removal only rolls back a plugin whose load
 * failed). The two share one small list (reg_list) under one mutex. */
#include "plugin-host.h"

#include <pthread.h>
#include <string.h>

#define MAX_ENTRIES 128

/* Any function pointer, stored as this type and cast back on the way out
 * (a round trip C guarantees). */
typedef void (*reg_fn)(void);

/* One registered entry: the registered object (its address is its
 * identity), its name (NULL where the list is looked up by object) and,
 * for the ONNX forms, the function that goes with it. */
typedef struct {
  const void *item;
  const char *name;
  reg_fn fn;
} reg_entry;

/* A list of entries in registration order. `what` names one entry and
 * `what_plural` several, in the messages add writes. */
typedef struct {
  reg_entry e[MAX_ENTRIES];
  int n;
  const char *what;
  const char *what_plural;
} reg_list;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static reg_list metrics = {.what = "metric", .what_plural = "metrics"};
static reg_list onnx = {.what = "layer ONNX form", .what_plural = "layer ONNX forms"};

/* Appends e; a named entry fails on a name already taken. */
static em_status reg_add(reg_list *l, reg_entry e, em_error *err) {
  em_status st = EM_OK;
  pthread_mutex_lock(&lock);
  for (int i = 0; e.name && i < l->n && st == EM_OK; i++)
    if (!strcmp(l->e[i].name, e.name))
      st = em_error_set(err, EM_ERR_INVALID, "a %s named '%s' is already registered", l->what,
                        e.name);
  if (st == EM_OK && l->n == MAX_ENTRIES)
    st = em_error_set(err, EM_ERR_NOMEM, "too many %s (%d)", l->what_plural, MAX_ENTRIES);
  if (st == EM_OK) l->e[l->n++] = e;
  pthread_mutex_unlock(&lock);
  return st;
}

/* Removes the first entry for item, keeping the order of the others. */
static void reg_remove(reg_list *l, const void *item) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < l->n; i++)
    if (l->e[i].item == item) {
      memmove(&l->e[i], &l->e[i + 1], (size_t)(l->n - i - 1) * sizeof l->e[0]);
      l->n--;
      break;
    }
  pthread_mutex_unlock(&lock);
}

/* The first entry named name (when name is not NULL) or else for item; a
 * zeroed entry when there is none. */
static reg_entry reg_find(reg_list *l, const char *name, const void *item) {
  reg_entry found = {0};
  pthread_mutex_lock(&lock);
  for (int i = 0; i < l->n; i++)
    if (name ? !strcmp(l->e[i].name, name) : l->e[i].item == item) {
      found = l->e[i];
      break;
    }
  pthread_mutex_unlock(&lock);
  return found;
}

static int reg_count(reg_list *l) {
  pthread_mutex_lock(&lock);
  int n = l->n;
  pthread_mutex_unlock(&lock);
  return n;
}

/* Entry i's object, or NULL when i is out of range. */
static const void *reg_at(reg_list *l, int i) {
  pthread_mutex_lock(&lock);
  const void *item = i >= 0 && i < l->n ? l->e[i].item : NULL;
  pthread_mutex_unlock(&lock);
  return item;
}

bool em_registry_name_valid(const char *s) {
  if (!s || !s[0] || strlen(s) >= 64) return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '-' || *p == '.'))
      return false;
  return true;
}

/* The keys a run records of its own (store/run-recorder.c): a plugin
 * metric of one of these names would be written over them. */
static bool reserved_metric(const char *name) {
  static const char *const keys[] = {"loss",      "lr",       "grad_norm",
                                     "train_loss", "samples_per_sec", "test_loss",
                                     "test_accuracy", NULL};
  for (const char *const *k = keys; *k; k++)
    if (!strcmp(name, *k)) return true;
  return !strncmp(name, "mem_", 4);
}

em_status em_metric_add(const em_metric_type *m, em_error *err) {
  if (!m || !em_registry_name_valid(m->name) || !m->compute)
    return em_error_set(err, EM_ERR_INVALID,
                        "a metric needs a name (letters, digits, '_', '-', '.') and a compute "
                        "function");
  if (reserved_metric(m->name))
    return em_error_set(err, EM_ERR_INVALID,
                        "metric name '%s' is a run's own (loss, lr, grad_norm, train_loss, "
                        "samples_per_sec, test_loss, test_accuracy, mem_*): choose another",
                        m->name);
  return reg_add(&metrics, (reg_entry){.item = m, .name = m->name}, err);
}

void em_metric_remove(const em_metric_type *m) { reg_remove(&metrics, m); }

const em_metric_type *em_metric_find(const char *name) {
  const em_metric_type *m = reg_find(&metrics, name, NULL).item;
  if (!m && em_plugin_load_on_miss()) m = reg_find(&metrics, name, NULL).item;
  return m;
}

int em_metric_count(void) { return reg_count(&metrics); }

const em_metric_type *em_metric_at(int i) { return reg_at(&metrics, i); }

/* Looked up by layer type, so unnamed: several forms of one type are not
 * refused, and find answers the first. */
em_status em_layer_onnx_add(const em_layer_type *type, em_layer_onnx_fn fn, em_error *err) {
  return reg_add(&onnx, (reg_entry){.item = type, .fn = (reg_fn)fn}, err);
}

void em_layer_onnx_remove(const em_layer_type *type) { reg_remove(&onnx, type); }

em_layer_onnx_fn em_layer_onnx_find(const em_layer_type *type) {
  return (em_layer_onnx_fn)reg_find(&onnx, NULL, type).fn;
}
