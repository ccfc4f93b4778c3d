/* json-fields.c: typed fields of the config readers (the spec's
 * "training" section, the config JSON), with messages that name the key
 * and say what it must be. */
#include "train-private.h"

#include <stdio.h>
#include <string.h>

const char *em_json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "?";
}

em_status em_json_want_num(const char *sec, const char *key, const json_t *v, double *out,
                           em_error *err) {
  if (!json_is_number(v))
    return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" must be a number, not %s", sec, key,
                        em_json_kind(v));
  *out = json_number_value(v);
  return EM_OK;
}

em_status em_json_want_int(const char *sec, const char *key, const json_t *v, int64_t lo,
                           int64_t hi, int64_t *out, em_error *err) {
  if (!json_is_integer(v))
    return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" must be a whole number, not %s", sec,
                        key, em_json_kind(v));
  int64_t x = json_integer_value(v);
  if (x < lo || x > hi)
    return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" must be from %lld to %lld, got %lld",
                        sec, key, (long long)lo, (long long)hi, (long long)x);
  *out = x;
  return EM_OK;
}

em_status em_json_want_bool(const char *sec, const char *key, const json_t *v, bool *out,
                            em_error *err) {
  if (!json_is_boolean(v))
    return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" must be true or false, not %s", sec,
                        key, em_json_kind(v));
  *out = json_is_true(v);
  return EM_OK;
}

em_status em_json_want_str(const char *sec, const char *key, const json_t *v, char *out,
                           size_t n, em_error *err) {
  if (!json_is_string(v))
    return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" must be a string, not %s", sec, key,
                        em_json_kind(v));
  if (strlen(json_string_value(v)) >= n)
    return em_error_set(err, EM_ERR_INVALID, "\"%s\".\"%s\" is too long (at most %zu bytes)",
                        sec, key, n - 1);
  snprintf(out, n, "%s", json_string_value(v));
  return EM_OK;
}
