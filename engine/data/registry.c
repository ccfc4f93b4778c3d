/* registry.c: the registry of dataset kinds, as engine/nn/registry.c is
 * the layer types'. The built-in kinds (each defined beside its reader,
 * em_dataset_builtin) register on first use; a plugin's kinds are
 * registered by the plugin host when its init succeeds, and removed again
 * only to roll back a plugin whose load failed. Kept by pointer in
 * registration order (the Data page's order). Opening a kind by name and
 * listing its files for lineage are read off the entries; no other list
 * of dataset names exists. */
#include "data-private.h"
#include "em-plugin.h"

#include "../plugin/plugin-host.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KINDS 128

/* One kind; builtin NULL for a plugin's. */
typedef struct {
  const em_dataset_type *type;
  const em_dataset_builtin *builtin;
} kind_entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;
static kind_entry kinds[MAX_KINDS];
static int n_kinds;

static em_status add_kind(kind_entry e, em_error *err) {
  const em_dataset_type *k = e.type;
  if (!k || !em_registry_name_valid(k->name) || !k->open)
    return em_error_set(err, EM_ERR_INVALID,
                        "a dataset kind needs a name (letters, digits, '_', '-', '.') and an open "
                        "function");
  em_status st = EM_OK;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_kinds && st == EM_OK; i++)
    if (!strcmp(kinds[i].type->name, k->name))
      st = kinds[i].builtin
               ? em_error_set(err, EM_ERR_INVALID, "dataset '%s' is built in", k->name)
               : em_error_set(err, EM_ERR_INVALID,
                              "a dataset kind named '%s' is already registered", k->name);
  if (st == EM_OK && n_kinds == MAX_KINDS)
    st = em_error_set(err, EM_ERR_NOMEM, "too many dataset kinds (%d)", MAX_KINDS);
  if (st == EM_OK) kinds[n_kinds++] = e;
  pthread_mutex_unlock(&lock);
  return st;
}

static void register_builtins(void) {
  static const em_dataset_builtin *const builtins[] = {
      &em_dataset_kind_fashion_mnist, &em_dataset_kind_cifar10, &em_dataset_kind_csv,
      &em_dataset_kind_synthetic, &em_dataset_kind_text,
  };
  for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
    EM_ASSERT(add_kind((kind_entry){&builtins[i]->type, builtins[i]}, NULL) == EM_OK);
}

em_status em_dataset_type_add(const em_dataset_type *kind, em_error *err) {
  pthread_once(&builtins_once, register_builtins);
  return add_kind((kind_entry){kind, NULL}, err);
}

void em_dataset_type_remove(const em_dataset_type *kind) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_kinds; i++)
    if (kinds[i].type == kind && !kinds[i].builtin) {
      memmove(&kinds[i], &kinds[i + 1], (size_t)(n_kinds - i - 1) * sizeof kinds[0]);
      n_kinds--;
      break;
    }
  pthread_mutex_unlock(&lock);
}

int em_dataset_type_count(void) {
  pthread_once(&builtins_once, register_builtins);
  pthread_mutex_lock(&lock);
  int n = n_kinds;
  pthread_mutex_unlock(&lock);
  return n;
}

const em_dataset_type *em_dataset_type_at(int i) {
  pthread_once(&builtins_once, register_builtins);
  pthread_mutex_lock(&lock);
  const em_dataset_type *t = i >= 0 && i < n_kinds ? kinds[i].type : NULL;
  pthread_mutex_unlock(&lock);
  return t;
}

static kind_entry find_entry(const char *name) {
  kind_entry e = {0};
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_kinds && !e.type; i++)
    if (!strcmp(kinds[i].type->name, name)) e = kinds[i];
  pthread_mutex_unlock(&lock);
  return e;
}

/* The entry named name, loading the plugins on a miss. */
static kind_entry lookup(const char *name) {
  pthread_once(&builtins_once, register_builtins);
  kind_entry e = find_entry(name);
  if (!e.type && em_plugin_load_on_miss()) e = find_entry(name); /* a plugin's, maybe */
  return e;
}

const em_dataset_type *em_dataset_type_find(const char *name) { return lookup(name).type; }

/* "unknown dataset 'x'; known: a, b, ...; where plugins were looked for". */
static em_status unknown_dataset(const char *name, em_error *err) {
  char known[512] = "", search[1024];
  size_t len = 0;
  for (int i = 0; i < em_dataset_type_count() && len < sizeof known; i++) {
    int w = snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "",
                     em_dataset_type_at(i)->name);
    if (w > 0) len += (size_t)w;
  }
  em_plugin_search_summary(search, sizeof search);
  return em_error_set(err, EM_ERR_INVALID, "unknown dataset '%s'; known: %s; %s", name, known,
                      search);
}

/* EM_ERR_INVALID for a kind that needs a folder and was given none. */
static em_status check_dir(kind_entry e, const char *d, em_error *err) {
  if (d || (e.builtin && !e.builtin->needs_dir)) return EM_OK;
  const char *hint = e.builtin ? e.builtin->dir_hint : NULL;
  return em_error_set(err, EM_ERR_INVALID,
                      "the %s dataset needs its folder: give --data-dir DIR%s%s%s", e.type->name,
                      hint ? " (" : "", hint ? hint : "", hint ? ")" : "");
}

em_dataset *em_dataset_open_named(const char *name, const char *dir, bool train,
                                  const int64_t *sample_shape, int sample_ndim, int classes,
                                  em_error *err) {
  const em_dataset_want want = {sample_shape, sample_ndim, classes, NULL};
  return em_dataset_open_want(name, dir, train, &want, err);
}

em_dataset *em_dataset_open_want(const char *name, const char *dir, bool train,
                                 const em_dataset_want *want, em_error *err) {
  const char *d = dir && dir[0] ? dir : NULL;
  kind_entry e = lookup(name);
  if (!e.type) {
    unknown_dataset(name, err);
    return NULL;
  }
  if (check_dir(e, d, err) != EM_OK) return NULL;
  em_dataset *ds = e.type->open(d, train, want, err);
  /* A kind that fails without a word (a plugin's, say) must not leave
   * "ok" (or nothing) as the reason: say which kind failed, and its
   * status if it set one. */
  if (!ds && err && (err->status == EM_OK || !err->msg[0]))
    em_error_set(err, err->status == EM_OK ? EM_ERR_INVALID : err->status,
                 "the %s dataset%s could not open '%s' and gave no reason (status: %s)", name,
                 e.builtin ? "" : " (a plugin's kind)", d ? d : "its default folder",
                 err->status == EM_OK ? "none" : em_status_name(err->status));
  return ds;
}

static int cmp_path(const void *a, const void *b) { return strcmp(a, b); }

em_status em_dataset_files_named(const char *name, const char *dir, bool train,
                                 char (*paths)[1024], int cap, int *n, em_error *err) {
  const char *d = dir && dir[0] ? dir : NULL;
  *n = 0;
  kind_entry e = lookup(name);
  if (!e.type) return unknown_dataset(name, err);
  /* a plugin's kind: its files are its own business; synthetic has none */
  if (!e.builtin || !e.builtin->files) return EM_OK;
  em_status st = check_dir(e, d, err);
  if (st != EM_OK) return st;
  int room = cap < 5 ? 5 : cap + 1, k = 0; /* a kind with more than room says so */
  char(*found)[4096] = malloc((size_t)room * sizeof *found);
  if (!found) return em_error_set(err, EM_ERR_NOMEM, "out of memory listing the %s dataset's "
                                  "files", name);
  if ((st = e.builtin->files(d, train, found, room, &k, err)) != EM_OK) {
    free(found);
    return st;
  }
  if (k > cap) {
    free(found);
    return em_error_set(err, EM_ERR_INVALID, "the %s dataset reads %d files; room was given "
                        "for %d", name, k, cap);
  }
  for (int i = 0; i < k && st == EM_OK; i++) {
    char *abs = realpath(found[i], NULL);
    if (!abs) {
      st = em_error_set(err, EM_ERR_IO, "cannot find '%s', a file of the %s dataset: %s",
                        found[i], name, strerror(errno));
      break;
    }
    size_t len = strlen(abs);
    if (len < sizeof paths[i]) memcpy(paths[i], abs, len + 1);
    free(abs);
    if (len >= sizeof paths[i])
      st = em_error_set(err, EM_ERR_INVALID, "the path of '%s' is longer than %zu bytes",
                        found[i], sizeof paths[i] - 1);
  }
  free(found);
  if (st != EM_OK) return st;
  qsort(paths, (size_t)k, sizeof paths[0], cmp_path);
  *n = k;
  return EM_OK;
}
