/* spec-check.c: what spec.c's checks share: a JSON value's kind for
 * messages, "did you mean" guesses (edit distance), the allowed keys of an
 * object and the rules for a node's and a parameter's name. */
#include "nn-private.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAME_LEN 64

/* "a string", "an array"... for messages. */
const char *em_spec_json_kind(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a fractional number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "a value";
}

/* Edit distance (case-insensitive) of two short strings, capped at 9. */
static int distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 9;
  int row[64];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int best = diag + cost;
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb] > 9 ? 9 : row[lb];
}

/* True when `got` looks like a misspelling of `known`. */
bool em_spec_looks_like(const char *got, const char *known) {
  size_t lg = strlen(got), lk = strlen(known);
  if (lg >= 3 && lk >= lg && !strncasecmp(got, known, lg)) return true;
  if (lk >= 3 && lg >= lk && !strncasecmp(got, known, lk)) return true;
  return distance(got, known) <= (lk > 5 ? 2 : 1);
}

/* ---- small checks ------------------------------------------------------------ */

em_status em_spec_check_keys(json_t *obj, const char *const *known, int n_known,
                             const char *where, em_error *err) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    bool ok = false;
    for (int i = 0; i < n_known && !ok; i++) ok = !strcmp(key, known[i]);
    if (ok) continue;
    em_strbuf b = {0};
    for (int i = 0; i < n_known; i++) em_strbuf_printf(&b, "%s%s", i ? ", " : "", known[i]);
    em_status st = em_error_set(err, EM_ERR_INVALID, "unknown key '%s' %s; known: %s", key, where,
                                b.s ? b.s : "");
    em_strbuf_free(&b);
    return st;
  }
  return EM_OK;
}

em_status em_spec_check_name(const char *name, const char *what, em_error *err) {
  size_t n = strlen(name);
  if (n == 0) return em_error_set(err, EM_ERR_INVALID, "%s is empty", what);
  if (n > MAX_NAME_LEN)
    return em_error_set(err, EM_ERR_INVALID, "%s '%.40s...' is longer than %d characters", what,
                        name, MAX_NAME_LEN);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (!isalnum(c) && c != '_' && c != '-')
      return em_error_set(err, EM_ERR_INVALID,
                          "%s '%s' may only hold letters, digits, '_' and '-' (it becomes part of "
                          "parameter names such as '%s.weight')",
                          what, name, name);
  }
  return EM_OK;
}

/* A parameter's name: a node name's characters, and dots between them
 * for a sub-module's ("self_attn.out_proj.weight", as PyTorch names it). */
bool em_spec_param_name_ok(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > MAX_NAME_LEN || name[0] == '.' || name[n - 1] == '.') return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c == '.' && name[i + 1] == '.') return false;
    if (!isalnum(c) && c != '_' && c != '-' && c != '.') return false;
  }
  return true;
}

/* ---- attributes --------------------------------------------------------------- */
