/* spec-attrs.c: a node's attributes in a spec: each value against its
 * layer type's descriptor (em_attr_desc: kind, range, choices), and the
 * message for an attribute the type does not have (with a guess). */
#include "nn-private.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static em_status check_range(const em_attr_desc *d, double v, em_error *err) {
  bool integral = d->kind != EM_ATTR_FLOAT, small = d->max <= 1e6 && d->min >= -1e6;
  if (!isfinite(v))
    return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be a finite number", d->name);
  if (v < d->min) {
    if (d->min == 1 && integral)
      return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be positive, got %.0f",
                          d->name, v);
    if (d->min == 0 && !(small && !integral))
      return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must not be negative, got %g",
                          d->name, v);
  } else if (v <= d->max) {
    return EM_OK;
  } else if (!small || (integral && d->min >= 0)) {
    return em_error_set(err, EM_ERR_NOMEM,
                        "attribute '%s' is absurdly large (%.17g; the limit is %.17g)", d->name, v,
                        d->max);
  }
  if (small)
    return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be between %g and %g, got %g",
                        d->name, d->min, d->max, v);
  return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be at least %g, got %g", d->name,
                      d->min, v);
}

static em_status parse_int(const em_attr_desc *d, json_t *v, double *out, const char *expect,
                           em_error *err) {
  if (!json_is_integer(v))
    return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be %s, got %s", d->name, expect,
                        em_spec_json_kind(v));
  json_int_t i = json_integer_value(v);
  /* clamp before converting so that huge values still read as too large */
  double x = i > (json_int_t)1 << 52 ? 0x1p52 : i < -((json_int_t)1 << 52) ? -0x1p52 : (double)i;
  *out = x;
  return check_range(d, x, err);
}

static em_status parse_attr(const em_attr_desc *d, json_t *v, em_attr_value *out, em_error *err) {
  out->given = true;
  switch (d->kind) {
  case EM_ATTR_INT:
    out->n = 1;
    return parse_int(d, v, &out->v[0], "an integer", err);
  case EM_ATTR_FLOAT:
    if (!json_is_number(v))
      return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be a number, got %s", d->name,
                          em_spec_json_kind(v));
    out->n = 1;
    out->v[0] = json_number_value(v);
    return check_range(d, out->v[0], err);
  case EM_ATTR_BOOL:
    if (!json_is_boolean(v))
      return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be true or false, got %s",
                          d->name, em_spec_json_kind(v));
    out->n = 1;
    out->v[0] = json_is_true(v);
    return EM_OK;
  case EM_ATTR_CHOICE: {
    int k = json_is_string(v) ? em_attr_choice_find(d->choices, json_string_value(v)) : -1;
    if (k < 0) {
      em_strbuf b = {0};
      for (const char *p = d->choices; p && *p;) {
        size_t n = strcspn(p, "|");
        em_strbuf_printf(&b, "%s\"%.*s\"", b.len ? ", " : "", (int)n, p);
        p = p[n] ? p + n + 1 : p + n;
      }
      em_status st =
          json_is_string(v)
              ? em_error_set(err, EM_ERR_INVALID, "attribute '%s' is \"%s\"; it may be %s",
                             d->name, json_string_value(v), b.s ? b.s : "")
              : em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be a string (%s), got %s",
                             d->name, b.s ? b.s : "", em_spec_json_kind(v));
      em_strbuf_free(&b);
      return st;
    }
    out->n = 1;
    out->v[0] = k;
    return EM_OK;
  }
  case EM_ATTR_INT2:
  case EM_ATTR_INTS: {
    const char *expect = d->kind == EM_ATTR_INT2 ? "an integer or a list [h, w] of integers"
                                                 : "an integer or a list of integers";
    if (json_is_integer(v)) {
      out->n = d->kind == EM_ATTR_INT2 ? 2 : 1;
      em_status st = parse_int(d, v, &out->v[0], expect, err);
      out->v[1] = out->v[0];
      return st;
    }
    if (!json_is_array(v))
      return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be %s, got %s", d->name,
                          expect, em_spec_json_kind(v));
    size_t n = json_array_size(v);
    if (d->kind == EM_ATTR_INT2 && n != 2)
      return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must be %s, got a list of %zu",
                          d->name, expect, n);
    if (n < 1 || n > EM_MAX_DIMS - 1)
      return em_error_set(err, EM_ERR_INVALID, "attribute '%s' must list 1 to %d integers, got %zu",
                          d->name, EM_MAX_DIMS - 1, n);
    out->n = (int)n;
    for (size_t k = 0; k < n; k++) {
      em_status st = parse_int(d, json_array_get(v, k), &out->v[k], expect, err);
      if (st != EM_OK) return st;
    }
    return EM_OK;
  }
  }
  return em_error_set(err, EM_ERR_INVALID, "attribute '%s' has an unknown kind", d->name);
}

static em_status unknown_attr(const em_layer_type *t, const char *key, em_error *err) {
  em_strbuf known = {0};
  const char *guess = NULL;
  for (int i = 0; i < t->n_attrs; i++) {
    em_strbuf_printf(&known, "%s%s", i ? ", " : "", t->attrs[i].name);
    if (!guess && em_spec_looks_like(key, t->attrs[i].name)) guess = t->attrs[i].name;
  }
  em_status st;
  if (t->n_attrs == 0)
    st = em_error_set(err, EM_ERR_INVALID, "unknown attribute '%s'; %s takes no attributes", key,
                      t->name);
  else if (guess)
    st = em_error_set(err, EM_ERR_INVALID, "unknown attribute '%s' (did you mean '%s'?); known: %s",
                      key, guess, known.s);
  else
    st = em_error_set(err, EM_ERR_INVALID, "unknown attribute '%s'; known: %s", key, known.s);
  em_strbuf_free(&known);
  return st;
}

em_status em_spec_parse_attrs(em_spec_node *nd, json_t *obj, em_error *err) {
  const em_layer_type *t = nd->type;
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    if (!strcmp(key, "name") || !strcmp(key, "type") || !strcmp(key, "inputs") ||
        !strcmp(key, "tie_weight"))
      continue;
    int i = 0;
    while (i < t->n_attrs && strcmp(t->attrs[i].name, key)) i++;
    if (i == t->n_attrs) return unknown_attr(t, key, err);
    em_status st = parse_attr(&t->attrs[i], v, &nd->attr[i], err);
    if (st != EM_OK) return st;
  }
  for (int i = 0; i < t->n_attrs; i++) {
    const em_attr_desc *d = &t->attrs[i];
    em_attr_value *a = &nd->attr[i];
    if (a->given) continue;
    if (d->required)
      return em_error_set(err, EM_ERR_INVALID, "missing required attribute '%s' (%s)", d->name,
                          d->help ? d->help : d->kind == EM_ATTR_INT ? "an integer" : "a value");
    a->n = d->kind == EM_ATTR_INT2 ? 2 : 1;
    a->v[0] = a->v[1] = d->def;
  }
  return EM_OK;
}

/* ---- input ----------------------------------------------------------------------- */
