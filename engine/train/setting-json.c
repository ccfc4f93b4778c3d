/* setting-json.c: one row of the settings table (settings.c) from JSON
 * and to it, by its type: what the spec reader (config.c) and the config
 * JSON (config-json.c) share, so that neither lists the settings. */
#include "train-private.h"
#include "em-device.h"
#include "em-plugin.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A number in [lo, hi]; the message says the range. */
static em_status want_num_in(const char *sec, const char *key, const json_t *v, double lo,
                             double hi, double *out, em_error *err) {
  double x;
  EM_TRY(em_json_want_num(sec, key, v, &x, err));
  if (!(x >= lo && x <= hi)) {
    if (hi == DBL_MAX)
      return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" must be a number >= %g, got %g",
                          sec, key, lo, x);
    return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" must be from %g to %g, got %g", sec,
                        key, lo, hi, x);
  }
  *out = x;
  return EM_OK;
}

/* The config JSON's seed: an integer, or a decimal string above JSON's
 * (and jansson's) signed 64-bit range. */
static em_status want_seed(const char *sec, const json_t *v, uint64_t *out, em_error *err) {
  if (json_is_integer(v) && json_integer_value(v) >= 0) {
    *out = (uint64_t)json_integer_value(v);
    return EM_OK;
  }
  if (json_is_string(v)) {
    const char *s = json_string_value(v);
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (s[0] >= '0' && s[0] <= '9' && *end == '\0' && errno == 0) {
      *out = (uint64_t)x;
      return EM_OK;
    }
  }
  return em_error_set(err, EM_ERR_INVALID,
                      "\"%s\".\"seed\" must be a whole number from 0 to 2^64 - 1 (larger than "
                      "2^63 - 1 as a decimal string), not %s", sec, em_json_kind(v));
}

em_status em_setting_from_json(const em_setting *s, const char *sec, const char *key,
                               const json_t *v, bool ranged, em_train_config *c, em_error *err) {
  switch (s->type) {
  case EM_SETTING_INT: {
    int64_t lo = s->min, hi = s->max, x;
    if (!ranged) { /* the type's limits */
      lo = s->size == sizeof(int64_t) ? INT64_MIN : INT_MIN;
      hi = s->size == sizeof(int64_t) ? INT64_MAX : INT_MAX;
    }
    EM_TRY(em_json_want_int(sec, key, v, lo, hi, &x, err));
    em_setting_set_int(s, c, x);
    return EM_OK;
  }
  case EM_SETTING_SEED: {
    if (!ranged) return want_seed(sec, v, (uint64_t *)((char *)c + s->offset), err);
    int64_t x;
    EM_TRY(em_json_want_int(sec, key, v, s->min, s->max, &x, err));
    em_setting_set_int(s, c, x);
    return EM_OK;
  }
  case EM_SETTING_NUM: {
    double x;
    if (ranged) EM_TRY(want_num_in(sec, key, v, s->lo, s->hi, &x, err));
    else EM_TRY(em_json_want_num(sec, key, v, &x, err));
    em_setting_set_num(s, c, x);
    return EM_OK;
  }
  case EM_SETTING_BOOL: {
    bool b;
    EM_TRY(em_json_want_bool(sec, key, v, &b, err));
    em_setting_set_bool(s, c, b);
    return EM_OK;
  }
  case EM_SETTING_STR:
    return em_json_want_str(sec, key, v, (char *)c + s->offset, s->size, err);
  case EM_SETTING_CHOICE:
  case EM_SETTING_DEVICE: {
    if (!json_is_string(v))
      return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" must be a string, not %s", sec,
                          key, em_json_kind(v));
    char what[96];
    snprintf(what, sizeof what, "\"%s\".\"%s\"", sec, key);
    return em_setting_set_text(s, c, what, json_string_value(v), err);
  }
  case EM_SETTING_PAIR: {
    double pair[2];
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_number(json_array_get(v, 0)) ||
        !json_is_number(json_array_get(v, 1)))
      return em_error_set(err, EM_ERR_INVALID,
                          "\"%s\".\"%s\" must be two numbers, like [0.9, 0.999]", sec, key);
    for (int i = 0; i < 2; i++)
      EM_TRY(want_num_in(sec, key, json_array_get(v, (size_t)i), s->lo, s->hi, &pair[i], err));
    memcpy((char *)c + s->offset, pair, sizeof pair);
    return EM_OK;
  }
  case EM_SETTING_METRICS: return em_metrics_check_json(v, err);
  }
  return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\": a setting of no known type", sec,
                      key);
}

json_t *em_setting_to_json(const em_setting *s, const em_train_config *c) {
  const void *p = (const char *)c + s->offset;
  switch (s->type) {
  case EM_SETTING_INT: return json_integer((json_int_t)em_setting_get_int(s, c));
  case EM_SETTING_SEED: {
    uint64_t seed = *(const uint64_t *)p;
    if (seed <= (uint64_t)INT64_MAX) return json_integer((json_int_t)seed);
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, seed);
    return json_string(buf);
  }
  case EM_SETTING_NUM: {
    double x = em_setting_get_num(s, c); /* JSON has no NaN */
    return isfinite(x) ? json_real(x) : NULL;
  }
  case EM_SETTING_BOOL: return json_boolean(em_setting_get_bool(s, c));
  case EM_SETTING_STR: return json_string(p);
  case EM_SETTING_CHOICE: {
    int i = em_setting_get_choice(s, c);
    const char *name = i >= 0 ? s->choice_name(i) : NULL;
    return name ? json_string(name) : NULL;
  }
  case EM_SETTING_DEVICE: {
    char dev[32];
    return json_string(em_device_str(*(const em_device *)p, dev, sizeof dev));
  }
  default: return NULL; /* the spec's own forms (betas, metrics) */
  }
}
