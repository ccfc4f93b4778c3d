/* tune-desc.c: a sweep's description (em-tune.h). */
#include "tune-private.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-io.h"

static em_status bad(em_error *err, const char *fmt, const char *key) {
  return em_error_set(err, EM_ERR_INVALID, fmt, key);
}

static em_status parse_param(em_tune_param *p, const char *path, json_t *v, em_error *err) {
  if (strlen(path) >= sizeof p->path)
    return bad(err, "parameters: the path '%.60s...' is too long", path);
  snprintf(p->path, sizeof p->path, "%s", path);
  if (strncmp(path, "training.", 9) && strncmp(path, "schedule.", 9) && strncmp(path, "loss.", 5) &&
      strncmp(path, "nodes.", 6))
    return bad(err, "parameters: '%s' is not a training setting (training.X, schedule.X, "
               "loss.X) or a node attribute (nodes.NAME.ATTR)", path);
  if (!strncmp(path, "nodes.", 6) && !strchr(path + 6, '.'))
    return bad(err, "parameters: '%s' names a node but no attribute (nodes.NAME.ATTR)", path);
  json_t *list = json_is_array(v) ? v : json_object_get(v, "choice");
  if (list) {
    p->kind = json_is_array(v) ? EM_TUNE_LIST : EM_TUNE_CHOICE;
    if (!json_is_array(list) || json_array_size(list) == 0 ||
        json_array_size(list) > EM_TUNE_MAX_VALUES)
      return bad(err, "parameters: '%s' wants 1 to 64 values", path);
    for (size_t i = 0; i < json_array_size(list); i++)
      p->values[p->n_values++] = json_dumps(json_array_get(list, i), JSON_ENCODE_ANY | JSON_COMPACT);
    return EM_OK;
  }
  json_t *lo = json_object_get(v, "low"), *hi = json_object_get(v, "high");
  if (!json_is_number(lo) || !json_is_number(hi))
    return bad(err, "parameters: '%s' is a list of values, {\"choice\": [...]} or a range "
               "{\"low\": X, \"high\": Y[, \"log\": true][, \"int\": true]}", path);
  p->kind = EM_TUNE_RANGE;
  p->low = json_number_value(lo);
  p->high = json_number_value(hi);
  p->log = json_is_true(json_object_get(v, "log"));
  p->integer = json_is_true(json_object_get(v, "int"));
  if (!(p->low < p->high) || !isfinite(p->low) || !isfinite(p->high))
    return bad(err, "parameters: '%s' needs low < high", path);
  if (p->log && p->low <= 0) return bad(err, "parameters: '%s' is log-uniform: low must be > 0", path);
  return EM_OK;
}

char *em_tune_dir_join(const char *dir, const char *path) {
  if (path[0] == '/' || !dir || !dir[0]) return strdup(path);
  size_t n = strlen(dir) + strlen(path) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", dir, path);
  return s;
}

em_status em_tune_desc_parse(em_tune_desc *d, const char *json, const char *base_dir,
                             em_error *err) {
  memset(d, 0, sizeof *d); /* every parameter zeroed too */
  json_error_t je;
  json_t *o = json_loads(json, 0, &je);
  if (!json_is_object(o)) {
    json_decref(o);
    return em_error_set(err, EM_ERR_FORMAT, "the sweep is not a JSON object (line %d: %s)",
                        je.line, je.text);
  }
  em_status st = EM_OK;
  static const char *const known[] = {"spec", "parameters", "sampler", "metric", "direction",
                                      "trials", "time_budget_s", "seed", "pruner", "training",
                                      "name", "spec_json", "queue", NULL};
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    bool ok = false;
    for (int i = 0; known[i] && !ok; i++) ok = !strcmp(known[i], key);
    if (!ok) {
      st = bad(err, "unknown key '%s' (known: spec, parameters, sampler, metric, direction, "
               "trials, time_budget_s, seed, pruner, training, name, queue)", key);
      goto out;
    }
  }
  json_t *queue = json_object_get(o, "queue");
  if (queue) { /* single runs: no spec, parameters or sampler of its own */
    if ((st = em_tune_queue_parse(d, queue, base_dir, err)) != EM_OK) goto out;
    goto have_trials;
  }
  const char *spec = json_string_value(json_object_get(o, "spec"));
  if (!spec) {
    st = bad(err, "%s: the base spec's path (\"spec\": \"data/models/fmnist-mlp.json\")", "spec");
    goto out;
  }
  d->spec_path = strdup(spec);
  json_t *embedded = json_object_get(o, "spec_json"); /* a recorded sweep's copy of the spec */
  if (json_is_object(embedded)) {
    d->spec_text = json_dumps(embedded, JSON_PRESERVE_ORDER | JSON_INDENT(2));
    goto have_spec;
  }
  char *full = em_tune_dir_join(base_dir, spec);
  d->spec_text = full ? em_read_text(full, false) : NULL;
  if (!d->spec_text) {
    st = em_error_set(err, EM_ERR_IO, "spec: cannot read '%s'", full ? full : spec);
    free(full);
    goto out;
  }
  free(full);
have_spec:;
  json_t *params = json_object_get(o, "parameters");
  if (!json_is_object(params) || json_object_size(params) == 0 ||
      json_object_size(params) > EM_TUNE_MAX_PARAMS) {
    st = bad(err, "%s: an object of 1 to 16 settings to vary", "parameters");
    goto out;
  }
  json_object_foreach(params, key, v) {
    d->n_params++; /* counted first: what it holds is freed on an error too */
    if ((st = parse_param(&d->p[d->n_params - 1], key, v, err)) != EM_OK) goto out;
  }
  const char *sampler = json_string_value(json_object_get(o, "sampler"));
  if (!sampler || !strcmp(sampler, "grid")) d->sampler = EM_TUNE_GRID;
  else if (!strcmp(sampler, "random")) d->sampler = EM_TUNE_RANDOM;
  else if (!strcmp(sampler, "tpe")) d->sampler = EM_TUNE_TPE;
  else {
    st = bad(err, "sampler: '%s' is not grid, random or tpe", sampler);
    goto out;
  }
  for (int i = 0; d->sampler == EM_TUNE_GRID && i < d->n_params; i++)
    if (d->p[i].kind != EM_TUNE_LIST) {
      st = bad(err, "parameters: '%s' is a range or a choice: the grid sampler takes lists "
               "(or use \"sampler\": \"random\" or \"tpe\")", d->p[i].path);
      goto out;
    }
  d->trials = 0;
have_trials:;
  const char *metric = json_string_value(json_object_get(o, "metric"));
  snprintf(d->metric, sizeof d->metric, "%s", metric ? metric : "test_accuracy");
  const char *dir = json_string_value(json_object_get(o, "direction"));
  d->maximize = dir ? !strcmp(dir, "maximize") : !strstr(d->metric, "loss");
  if (dir && strcmp(dir, "maximize") && strcmp(dir, "minimize")) {
    st = bad(err, "direction: '%s' is not maximize or minimize", dir);
    goto out;
  }
  json_t *trials = json_object_get(o, "trials");
  int64_t grid = em_tune_grid_size(d);
  if (d->sampler != EM_TUNE_QUEUE)
    d->trials = json_is_integer(trials) ? (int)json_integer_value(trials)
                : d->sampler == EM_TUNE_GRID ? (int)grid
                                             : 10;
  if (d->trials < 1 || d->trials > 100000) {
    st = bad(err, "%s: 1 to 100000", "trials");
    goto out;
  }
  if (d->sampler == EM_TUNE_GRID && d->trials > grid) d->trials = (int)grid;
  json_t *tb = json_object_get(o, "time_budget_s");
  d->time_budget_s = json_is_number(tb) ? json_number_value(tb) : 0;
  json_t *seed = json_object_get(o, "seed");
  d->seed = json_is_integer(seed) ? (uint64_t)json_integer_value(seed) : 0;
  json_t *pr = json_object_get(o, "pruner");
  const char *pt = json_is_string(pr) ? json_string_value(pr)
                   : json_string_value(json_object_get(pr, "type"));
  d->min_epochs = 1;
  d->reduction = 3;
  d->startup = 3;
  if (!pt || !strcmp(pt, "none")) d->pruner = EM_PRUNE_NONE;
  else if (!strcmp(pt, "asha")) d->pruner = EM_PRUNE_ASHA;
  else if (!strcmp(pt, "median")) d->pruner = EM_PRUNE_MEDIAN;
  else {
    st = bad(err, "pruner: '%s' is not asha, median or none", pt);
    goto out;
  }
  json_t *me = json_object_get(pr, "min_epochs"), *rf = json_object_get(pr, "reduction"),
         *su = json_object_get(pr, "startup");
  if (json_is_integer(me)) d->min_epochs = (int)json_integer_value(me);
  if (json_is_integer(rf)) d->reduction = (int)json_integer_value(rf);
  if (json_is_integer(su)) d->startup = (int)json_integer_value(su);
  if (d->min_epochs < 1 || d->reduction < 2 || d->startup < 1) {
    st = bad(err, "%s: min_epochs >= 1, reduction >= 2, startup >= 1", "pruner");
    goto out;
  }
  json_t *tr = json_object_get(o, "training");
  if (tr && !json_is_object(tr)) {
    st = bad(err, "%s: an object of training settings for every trial", "training");
    goto out;
  }
  d->training_json = tr ? json_dumps(tr, JSON_COMPACT) : strdup("{}");
out:
  json_decref(o);
  if (st != EM_OK) em_tune_desc_clear(d);
  return st;
}

void em_tune_desc_clear(em_tune_desc *d) {
  for (int i = 0; i < d->n_params; i++)
    for (int k = 0; k < d->p[i].n_values; k++) free(d->p[i].values[k]);
  for (int i = 0; i < d->n_queue; i++) {
    free(d->queue_path[i]);
    free(d->queue_text[i]);
  }
  free(d->spec_path);
  free(d->spec_text);
  free(d->training_json);
  memset(d, 0, sizeof *d);
}

int64_t em_tune_grid_size(const em_tune_desc *d) {
  int64_t n = 1;
  for (int i = 0; i < d->n_params; i++)
    if (d->p[i].kind == EM_TUNE_LIST && n < (1LL << 40)) n *= d->p[i].n_values;
  return n;
}

char *em_tune_desc_recorded(const char *json, const em_tune_desc *d) {
  if (d->sampler == EM_TUNE_QUEUE) {
    json_t *q = json_loads(json, 0, NULL);
    char *txt = q ? em_tune_queue_recorded(q, d) : NULL;
    json_decref(q);
    return txt;
  }
  json_t *o = json_loads(json, 0, NULL), *spec = json_loads(d->spec_text, JSON_DECODE_ANY, NULL);
  if (!o || !spec) {
    json_decref(o);
    json_decref(spec);
    return NULL;
  }
  json_object_set_new(o, "spec_json", spec);
  char *txt = json_dumps(o, JSON_PRESERVE_ORDER | JSON_COMPACT);
  json_decref(o);
  return txt;
}
