/* tune-queue.c: a queue of single runs as a sweep (em-tune.h's
 * {"queue": [...]} descriptions): each entry one trial, run in order,
 * P at a time, and taken over after a kill like a sweep's. */
#include "tune-private.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-io.h"

em_status em_tune_queue_parse(em_tune_desc *d, json_t *queue, const char *base_dir,
                              em_error *err) {
  if (!json_is_array(queue) || json_array_size(queue) == 0 ||
      json_array_size(queue) > EM_TUNE_MAX_QUEUE)
    return em_error_set(err, EM_ERR_INVALID, "queue: a list of 1 to %d runs, each {\"spec\": "
                        "PATH}", EM_TUNE_MAX_QUEUE);
  d->sampler = EM_TUNE_QUEUE;
  size_t i;
  json_t *e;
  json_array_foreach(queue, i, e) {
    const char *path = json_string_value(json_object_get(e, "spec"));
    json_t *embedded = json_object_get(e, "spec_json");
    if (!path)
      return em_error_set(err, EM_ERR_INVALID, "queue[%zu]: {\"spec\": PATH} names a spec file",
                          i);
    d->queue_path[d->n_queue] = strdup(path);
    if (json_is_object(embedded)) {
      d->queue_text[d->n_queue] = json_dumps(embedded, JSON_INDENT(2));
    } else {
      char *full = em_tune_dir_join(base_dir, path);
      d->queue_text[d->n_queue] = full ? em_read_text(full, false) : NULL;
      if (!d->queue_text[d->n_queue]) {
        em_status st = em_error_set(err, EM_ERR_IO, "queue[%zu]: cannot read '%s'", i,
                                    full ? full : path);
        free(full);
        d->n_queue++;
        return st;
      }
      free(full);
    }
    d->n_queue++;
  }
  d->trials = d->n_queue;
  d->spec_path = strdup(d->queue_path[0]);
  d->spec_text = strdup(d->queue_text[0]);
  return EM_OK;
}

char *em_tune_queue_recorded(json_t *o, const em_tune_desc *d) {
  json_t *q = json_object_get(o, "queue");
  for (int i = 0; i < d->n_queue && i < (int)json_array_size(q); i++) {
    json_t *spec = json_loads(d->queue_text[i], 0, NULL);
    if (spec) json_object_set_new(json_array_get(q, (size_t)i), "spec_json", spec);
  }
  return json_dumps(o, JSON_COMPACT);
}

int em_tune_queue_index(const em_tune_desc *d, const char *params_json) {
  json_t *p = json_loads(params_json, 0, NULL);
  json_t *v = json_object_get(p, "queue");
  int i = json_is_integer(v) ? (int)json_integer_value(v) : -1;
  json_decref(p);
  return i >= 0 && i < d->n_queue ? i : -1;
}

const char *em_tune_trial_spec_name(const em_tune_desc *d, const char *params_json) {
  int i = d->sampler == EM_TUNE_QUEUE ? em_tune_queue_index(d, params_json) : -1;
  const char *path = i >= 0 ? d->queue_path[i] : d->spec_path;
  const char *base = strrchr(path, '/');
  return base ? base + 1 : path;
}
