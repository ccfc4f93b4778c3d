/* registry.c: the registry of layer types. Built-in types register on
 * first use; a plugin's types are registered by the plugin host when its
 * init succeeds (em_plugin_add_layer stages them), and em_layer_register
 * called from inside a plugin's init is refused: a refused plugin is
 * unloaded, and its type would be left behind pointing into it. Types are
 * kept by pointer in registration order (the GUI palette's order). */
#include "nn-private.h"
#include "../plugin/plugin-host.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TYPES 256

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;
static const em_layer_type *types[MAX_TYPES];
static int n_types;

static em_status add_type(const em_layer_type *t, em_error *err) {
  if (!t || !t->name || !t->name[0])
    return em_error_set(err, EM_ERR_INVALID, "layer type without a name");
  if (t->api_version != EM_LAYER_API_VERSION)
    return em_error_set(err, EM_ERR_UNSUPPORTED,
                        "layer type '%s' was built for layer API %d; this engine has %d", t->name,
                        t->api_version, EM_LAYER_API_VERSION);
  if (!t->infer || !t->forward)
    return em_error_set(err, EM_ERR_INVALID, "layer type '%s' lacks infer or forward", t->name);
  if (t->min_inputs < 1 || t->max_inputs < t->min_inputs || t->max_inputs > EM_LAYER_MAX_INPUTS)
    return em_error_set(err, EM_ERR_INVALID, "layer type '%s': bad input counts %d..%d", t->name,
                        t->min_inputs, t->max_inputs);
  if (t->n_attrs < 0 || t->n_attrs > EM_LAYER_MAX_ATTRS || (t->n_attrs && !t->attrs))
    return em_error_set(err, EM_ERR_INVALID, "layer type '%s': bad attribute table", t->name);
  for (int i = 0; i < t->n_attrs; i++) {
    const char *a = t->attrs[i].name;
    if (!a || !strcmp(a, "name") || !strcmp(a, "type") || !strcmp(a, "inputs"))
      return em_error_set(err, EM_ERR_INVALID, "layer type '%s': attribute %d has a reserved name",
                          t->name, i);
    if (t->attrs[i].kind == EM_ATTR_CHOICE && (!t->attrs[i].choices || !t->attrs[i].choices[0]))
      return em_error_set(err, EM_ERR_INVALID, "layer type '%s': choice attribute '%s' lists no "
                          "choices", t->name, a);
  }
  em_status st = EM_OK;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_types && st == EM_OK; i++)
    if (!strcmp(types[i]->name, t->name))
      st = em_error_set(err, EM_ERR_INVALID, "a layer type named '%s' is already registered",
                        t->name);
  if (st == EM_OK && n_types == MAX_TYPES)
    st = em_error_set(err, EM_ERR_NOMEM, "too many layer types (%d)", MAX_TYPES);
  if (st == EM_OK) types[n_types++] = t;
  pthread_mutex_unlock(&lock);
  return st;
}

static void register_builtins(void) {
  static const em_layer_type *const builtins[] = {
      &em_layer_linear,     &em_layer_conv2d,      &em_layer_batch_norm2d, &em_layer_layer_norm,
      &em_layer_dropout,    &em_layer_relu,        &em_layer_gelu,         &em_layer_silu,
      &em_layer_sigmoid,    &em_layer_tanh,        &em_layer_max_pool2d,   &em_layer_avg_pool2d,
      &em_layer_flatten,    &em_layer_embedding,   &em_layer_add,
      &em_layer_positional_embedding, &em_layer_multihead_attention,
      &em_layer_transformer_encoder_layer, &em_layer_to_sequence, &em_layer_class_token,
      &em_layer_sequence_pool,
  };
  for (size_t i = 0; i < sizeof builtins / sizeof *builtins; i++)
    EM_ASSERT(add_type(builtins[i], NULL) == EM_OK);
}

static _Thread_local bool held; /* a plugin's init is running in this thread */

void em_layer_register_hold(bool hold) { held = hold; }

em_status em_layer_register(const em_layer_type *type, em_error *err) {
  if (held)
    return em_error_set(err, EM_ERR_INVALID,
                        "a plugin registers its layer types with em_plugin_add_layer from its "
                        "init (em-plugin.h), not with em_layer_register");
  pthread_once(&builtins_once, register_builtins);
  return add_type(type, err);
}

void em_layer_unregister(const em_layer_type *type) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_types; i++)
    if (types[i] == type) {
      memmove(&types[i], &types[i + 1], (size_t)(n_types - i - 1) * sizeof types[0]);
      n_types--;
      break;
    }
  pthread_mutex_unlock(&lock);
}

int em_layer_type_count(void) {
  pthread_once(&builtins_once, register_builtins);
  pthread_mutex_lock(&lock);
  int n = n_types;
  pthread_mutex_unlock(&lock);
  return n;
}

const em_layer_type *em_layer_type_at(int i) {
  pthread_once(&builtins_once, register_builtins);
  pthread_mutex_lock(&lock);
  const em_layer_type *t = i >= 0 && i < n_types ? types[i] : NULL;
  pthread_mutex_unlock(&lock);
  return t;
}

static const em_layer_type *find_type(const char *name) {
  const em_layer_type *t = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < n_types && !t; i++)
    if (!strcmp(types[i]->name, name)) t = types[i];
  pthread_mutex_unlock(&lock);
  return t;
}

const em_layer_type *em_layer_type_find(const char *name) {
  pthread_once(&builtins_once, register_builtins);
  const em_layer_type *t = find_type(name);
  if (!t && em_plugin_load_on_miss()) t = find_type(name); /* a plugin's, maybe */
  return t;
}
