/* json-flatten.c: a recorded config or spec as dotted keys, for showing
 * runs and finding where they differ (ember run show, ember compare, the
 * workbench's Compare and Registry pages). See em-store.h. */
#include "em-store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void em_json_flatten(const json_t *v, const char *prefix, json_t *out) {
  if (json_is_object(v) && json_object_size(v) > 0) {
    const char *k;
    json_t *child;
    json_object_foreach((json_t *)v, k, child) {
      size_t n = strlen(prefix) + strlen(k) + 2;
      char *key = malloc(n);
      if (!key) return;
      snprintf(key, n, "%s%s%s", prefix, *prefix ? "." : "", k);
      em_json_flatten(child, key, out);
      free(key);
    }
    return;
  }
  json_object_set(out, *prefix ? prefix : "(value)", (json_t *)v);
}

const char *em_json_leaf_text(const json_t *v, char *buf, size_t cap) {
  if (!v) snprintf(buf, cap, "\xe2\x80\x94");
  else if (json_is_string(v)) snprintf(buf, cap, "%s", json_string_value(v));
  else if (json_is_integer(v)) snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
  else if (json_is_real(v)) snprintf(buf, cap, "%.6g", json_real_value(v));
  else if (json_is_true(v)) snprintf(buf, cap, "true");
  else if (json_is_false(v)) snprintf(buf, cap, "false");
  else if (json_is_null(v)) snprintf(buf, cap, "null");
  else {
    char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
    snprintf(buf, cap, "%s", s ? s : "?");
    free(s);
  }
  return buf;
}
