/* serve-log.c: the request log (--request-log FILE). One JSON line per
 * logged inference request: when it was answered, its id, the role and
 * version that answered, the HTTP status, the latency, its rows and the
 * class each row was given (the argmax of a class vector), and, only
 * with --request-log-inputs, the input values. --request-log-sample F
 * logs that share of the requests, exactly (request i is logged when
 * floor((i + 1) F) > floor(i F)), so a rate stays honest at any load.
 * Past --request-log-max-mb the file becomes FILE.1 (an older FILE.1 is
 * replaced) and a new FILE starts: at most twice the size on disk. */
#include "serve-private.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

em_status serve_log_open(serve_log *l, const char *path, double sample, bool inputs,
                         int64_t max_bytes, em_error *err) {
  memset(l, 0, sizeof *l);
  if (strlen(path) + 3 > sizeof l->path)
    return em_error_set(err, EM_ERR_INVALID, "--request-log: the path is too long");
  snprintf(l->path, sizeof l->path, "%s", path);
  if (!(l->f = fopen(path, "a")))
    return em_error_set(err, EM_ERR_IO, "--request-log: cannot open '%s': %s", path,
                        strerror(errno));
  fseek(l->f, 0, SEEK_END);
  l->bytes = ftell(l->f);
  l->sample = sample;
  l->inputs = inputs;
  l->max_bytes = max_bytes;
  pthread_mutex_init(&l->mu, NULL);
  return EM_OK;
}

void serve_log_close(serve_log *l) {
  if (!l->f) return;
  fclose(l->f);
  l->f = NULL;
  pthread_mutex_destroy(&l->mu);
}

/* Under mu: FILE -> FILE.1 and a new FILE. A failure keeps the old file
 * growing (said once): the log is not worth a request. */
static void rotate(serve_log *l) {
  char old[sizeof l->path + 2];
  snprintf(old, sizeof old, "%s.1", l->path);
  fflush(l->f);
  if (rename(l->path, old) != 0) {
    if (!l->said) fprintf(stderr, "ember serve: warning: cannot rotate the request log: %s\n",
                          strerror(errno));
    l->said = true;
    l->max_bytes = 0;
    return;
  }
  FILE *f = fopen(l->path, "a");
  if (!f) {
    fprintf(stderr, "ember serve: warning: request log: cannot open '%s' again: %s; logging "
            "stops\n", l->path, strerror(errno));
    fclose(l->f);
    l->f = NULL;
    return;
  }
  fclose(l->f);
  l->f = f;
  l->bytes = 0;
}

static bool sampled(serve_log *l) {
  uint64_t i = atomic_fetch_add(&l->seq, 1);
  return floor((double)(i + 1) * l->sample) > floor((double)i * l->sample);
}

void serve_log_request(serve_log *l, const serve_log_entry *e) {
  if (!l || !l->f || !sampled(l)) return;
  struct timeval tv;
  gettimeofday(&tv, NULL);
  const serve_model *m = e->model;
  json_t *o = json_object();
  json_object_set_new(o, "time", json_real((double)tv.tv_sec + tv.tv_usec / 1e6));
  json_object_set_new(o, "id", e->id ? json_string(e->id) : json_null());
  json_object_set_new(o, "role", json_string(e->role ? "canary" : "stable"));
  json_object_set_new(o, "version", json_string(m->version));
  json_object_set_new(o, "status", json_integer(e->status));
  json_object_set_new(o, "latency_ms", json_real(round(e->seconds * 1e6) / 1e3));
  json_object_set_new(o, "rows", json_integer(e->rows));
  int classes = em_drift_classes(m->out_shape, m->out_ndim);
  if (e->out && classes) {
    json_t *p = json_array();
    for (int64_t i = 0; i < e->rows; i++)
      json_array_append_new(p, json_integer(em_drift_argmax(e->out + i * classes, classes)));
    json_object_set_new(o, "predicted", p);
  }
  if (l->inputs && e->in) {
    json_t *x = json_array();
    for (int64_t i = 0; i < e->rows * m->in_numel; i++)
      json_array_append_new(x, m->in_dtype == EM_DTYPE_F32
                                   ? json_real(((const float *)e->in)[i])
                                   : json_integer(((const int64_t *)e->in)[i]));
    json_object_set_new(o, "input", x);
  }
  char *line = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(7));
  json_decref(o);
  if (!line) return;
  size_t n = strlen(line);
  pthread_mutex_lock(&l->mu);
  if (l->f) {
    fwrite(line, 1, n, l->f);
    fputc('\n', l->f);
    fflush(l->f); /* a line is whole on disk when the answer leaves */
    l->bytes += (int64_t)n + 1;
    if (l->max_bytes > 0 && l->bytes >= l->max_bytes) rotate(l);
  }
  pthread_mutex_unlock(&l->mu);
  free(line);
}
