/* cli-flatten.c: JSON objects as dotted keys. */
#include "cli-flatten.h"

#include <stdio.h>
#include <stdlib.h>

void cli_json_flatten(const json_t *v, const char *prefix, json_t *out) {
  if (!json_is_object(v)) {
    json_object_set(out, prefix[0] ? prefix : "value", (json_t *)v);
    return;
  }
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)v, k, x) {
    char key[512];
    snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", k);
    cli_json_flatten(x, key, out);
  }
}

void cli_json_leaf_text(const json_t *v, char *buf, size_t cap) {
  switch (json_typeof(v)) {
  case JSON_STRING: snprintf(buf, cap, "%s", json_string_value(v)); break;
  case JSON_INTEGER: snprintf(buf, cap, "%lld", (long long)json_integer_value(v)); break;
  case JSON_REAL: snprintf(buf, cap, "%.6g", json_real_value(v)); break;
  case JSON_TRUE: snprintf(buf, cap, "true"); break;
  case JSON_FALSE: snprintf(buf, cap, "false"); break;
  case JSON_NULL: snprintf(buf, cap, "null"); break;
  default: {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    snprintf(buf, cap, "%s", s ? s : "?");
    free(s);
  }
  }
}
