/* em-sweep-desc.c: see the header. */
#include "em-sweep-desc.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *em_sweep_kind_name(em_sweep_kind k) {
  static const char *const names[] = {"list", "range", "log range", "choice"};
  return k >= 0 && k <= EM_SWEEP_KIND_CHOICE ? names[k] : "?";
}

static char *trimmed(const char *s, size_t n) {
  while (n && isspace((unsigned char)*s)) s++, n--;
  while (n && isspace((unsigned char)s[n - 1])) n--;
  if (n >= 2 && ((s[0] == '"' && s[n - 1] == '"') || (s[0] == '\'' && s[n - 1] == '\''))) {
    s++;
    n -= 2;
  }
  char *t = malloc(n + 1);
  memcpy(t, s, n);
  t[n] = '\0';
  return t;
}

/* A token as JSON: a number (an integer when written as one), a boolean,
 * null, or a string. */
static json_t *token_value(const char *tok, bool *whole) {
  char *end = NULL;
  double x = strtod(tok, &end);
  if (whole) *whole = false;
  if (*tok && end && !*end && isfinite(x)) {
    bool integer = !strpbrk(tok, ".eE") && fabs(x) < 9e15;
    if (whole) *whole = integer;
    return integer ? json_integer((json_int_t)x) : json_real(x);
  }
  if (!strcmp(tok, "true")) return json_true();
  if (!strcmp(tok, "false")) return json_false();
  if (!strcmp(tok, "null")) return json_null();
  return json_string(tok);
}

/* The comma-separated values of text, or NULL when there is none. */
static json_t *list_of(const char *text) {
  json_t *a = json_array();
  const char *s = text;
  for (;;) {
    const char *c = strchr(s, ',');
    size_t n = c ? (size_t)(c - s) : strlen(s);
    char *tok = trimmed(s, n);
    if (*tok) json_array_append_new(a, token_value(tok, NULL));
    free(tok);
    if (!c) break;
    s = c + 1;
  }
  if (json_array_size(a) == 0) {
    json_decref(a);
    return NULL;
  }
  return a;
}

static json_t *range_of(const char *text, bool log, const char *path, em_error *err) {
  const char *dots = strstr(text, "..");
  const char *sep = dots ? dots : strchr(text, ',');
  size_t skip = dots ? 2 : 1;
  if (!sep) {
    em_error_set(err, EM_ERR_INVALID, "%s: a range is written LOW .. HIGH (\"1e-4 .. 0.3\")",
                 path);
    return NULL;
  }
  char *a = trimmed(text, (size_t)(sep - text)), *b = trimmed(sep + skip, strlen(sep + skip));
  bool wa = false, wb = false;
  json_t *lo = token_value(a, &wa), *hi = token_value(b, &wb), *o = NULL;
  if (!json_is_number(lo) || !json_is_number(hi) ||
      !(json_number_value(lo) < json_number_value(hi))) {
    em_error_set(err, EM_ERR_INVALID, "%s: the range '%s' wants two numbers, LOW < HIGH", path,
                 text);
  } else if (log && json_number_value(lo) <= 0) {
    em_error_set(err, EM_ERR_INVALID, "%s: a log range starts above 0", path);
  } else {
    o = json_pack("{s:f, s:f}", "low", json_number_value(lo), "high", json_number_value(hi));
    if (log) json_object_set_new(o, "log", json_true());
    if (wa && wb) json_object_set_new(o, "int", json_true());
  }
  json_decref(lo);
  json_decref(hi);
  free(a);
  free(b);
  return o;
}

char *em_sweep_form_to_json(const em_sweep_form *f, em_error *err) {
  if (!f->spec || !*f->spec) {
    em_error_set(err, EM_ERR_INVALID, "no model: open or build one first (Builder page)");
    return NULL;
  }
  json_t *o = json_object(), *params = json_object();
  json_object_set_new(o, "spec", json_string(f->spec));
  if (f->name && *f->name) json_object_set_new(o, "name", json_string(f->name));
  char *out = NULL;
  for (int i = 0; i < EM_SWEEP_FORM_PARAMS; i++) {
    const em_sweep_form_param *p = &f->p[i];
    if (!p->path || !*p->path) continue;
    char *path = trimmed(p->path, strlen(p->path));
    json_t *v = NULL;
    if (p->kind == EM_SWEEP_KIND_RANGE || p->kind == EM_SWEEP_KIND_LOG_RANGE) {
      v = range_of(p->values ? p->values : "", p->kind == EM_SWEEP_KIND_LOG_RANGE, path, err);
    } else {
      json_t *list = list_of(p->values ? p->values : "");
      if (!list)
        em_error_set(err, EM_ERR_INVALID, "%s: no values (\"0.01, 0.1, 1\")", path);
      else if (p->kind == EM_SWEEP_KIND_CHOICE)
        v = json_pack("{s:o}", "choice", list);
      else
        v = list;
    }
    if (!v) {
      free(path);
      goto done;
    }
    if (json_object_get(params, path)) {
      em_error_set(err, EM_ERR_INVALID, "%s is varied twice", path);
      json_decref(v);
      free(path);
      goto done;
    }
    json_object_set_new(params, path, v);
    free(path);
  }
  if (json_object_size(params) == 0) {
    em_error_set(err, EM_ERR_INVALID, "choose a setting to vary (training.lr, nodes.fc1.out_features)");
    goto done;
  }
  json_object_set(o, "parameters", params);
  json_object_set_new(o, "sampler", json_string(f->sampler ? f->sampler : "grid"));
  json_object_set_new(o, "metric", json_string(f->metric && *f->metric ? f->metric
                                                                       : "test_accuracy"));
  json_object_set_new(o, "direction", json_string(f->maximize ? "maximize" : "minimize"));
  if (f->trials > 0) json_object_set_new(o, "trials", json_integer(f->trials));
  if (f->pruner && strcmp(f->pruner, "none"))
    json_object_set_new(o, "pruner", json_pack("{s:s}", "type", f->pruner));
  json_t *tr = f->training_json ? json_loads(f->training_json, 0, NULL) : NULL;
  if (!json_is_object(tr)) {
    json_decref(tr);
    tr = json_object();
  }
  if (f->limit > 0) json_object_set_new(tr, "limit", json_integer(f->limit));
  if (f->epochs > 0) json_object_set_new(tr, "epochs", json_integer(f->epochs));
  json_object_set_new(o, "training", tr);
  out = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
done:
  json_decref(params);
  json_decref(o);
  return out;
}
