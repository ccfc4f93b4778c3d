/* plugin-host.h: what the plugin host shares with the rest of libember
 * (engine/nn, engine/train; a header of its own, not a folder-private one):
 * adding and removing entries of the registries it fills (metrics, layer
 * ONNX forms), the plugin load a registry lookup that
 * misses asks for, and the metric collector the evaluation feeds. */
#pragma once

#include "em-plugin.h"

/* Registries (plugin/registries.c). add fails on a name already taken.
 * Dataset kinds register in engine/data (em-data.h). */
em_status em_metric_add(const em_metric_type *metric, em_error *err);
void em_metric_remove(const em_metric_type *metric);
em_status em_layer_onnx_add(const em_layer_type *type, em_layer_onnx_fn fn, em_error *err);
void em_layer_onnx_remove(const em_layer_type *type);
/* The rule for a registered name (a metric, a dataset kind): 1 to 63 of
 * letters, digits, '_', '-' and '.'. */
bool em_registry_name_valid(const char *s);

/* A lookup of a layer type, dataset kind or metric found nothing: runs the
 * loader em_plugin_set_loader installed, once per process (the first
 * miss), and returns true when the lookup should be tried again. */
bool em_plugin_load_on_miss(void);

/* The metrics one evaluation computes (plugin/eval-metrics.c): those the
 * model's spec names plus those selected with em_metrics_select.
 * em_eval_metrics_begin returns NULL with *st = EM_OK when none are
 * asked for (the evaluation then pays nothing), NULL with *st an error
 * when the spec names one that is not registered. */
typedef struct em_eval_metrics em_eval_metrics;
em_eval_metrics *em_eval_metrics_begin(const em_spec *spec, em_status *st, em_error *err);
/* The names of the metrics em_eval_metrics_begin would compute, in its
 * order, comma-separated ("" for none): what data-parallel ranks compare,
 * since each metric adds a gather to every evaluation. */
void em_eval_metrics_names(const em_spec *spec, char *out, size_t cap);
/* One batch: out (N, K) float logits in dataset order, labels y (N). */
em_status em_eval_metrics_add(em_eval_metrics *em, const em_tensor *out /* (N, K) */,
                              const int64_t *y /* (N) */, em_error *err);
/* Computes every metric and publishes them (em_metrics_last); frees em. */
em_status em_eval_metrics_end(em_eval_metrics *em, em_error *err);
void em_eval_metrics_free(em_eval_metrics *em); /* NULL is fine */
/* A data-parallel evaluation sees only its rank's shard: before
 * em_eval_metrics_end, gather replaces the rows collected here (rows of
 * width k, in shard order) with the whole test set's, in dataset order, so
 * that every rank computes the metrics over all of it. gather takes the
 * arrays (malloc'd) and hands back new ones (malloc'd). */
typedef em_status (*em_eval_gather_fn)(void *user, int k, int64_t *rows,
                                       float **logits /* (rows, k) */,
                                       int64_t **labels /* (rows) */, em_error *err);
em_status em_eval_metrics_gather(em_eval_metrics *em, int k, em_eval_gather_fn fn, void *user,
                                 em_error *err);
