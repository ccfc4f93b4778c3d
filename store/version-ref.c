/* version-ref.c: a registered model version named the way people name it
 * on the command line: "NAME@ALIAS" (production, staging...) or
 * "NAME@VERSION" (a number, 3 or v3), resolved to the version, its run, its
 * weights and the spec its run recorded. export, predict, eval and serve
 * share it; serve calls it again to notice an alias that moved. */
#include "store-private.h"

#include <stdlib.h>
#include <string.h>

/* "production" among "production, staging". */
static bool alias_listed(const char *list, const char *alias) {
  size_t n = strlen(alias);
  for (const char *p = list; p && *p;) {
    while (*p == ' ' || *p == ',') p++;
    size_t k = strcspn(p, ", ");
    if (k == n && !strncmp(p, alias, n)) return true;
    p += k;
  }
  return false;
}

bool em_version_ref_looks_like(const char *text) {
  const char *at = text ? strchr(text, '@') : NULL;
  return at && at != text && at[1] && !strchr(at + 1, '/');
}

bool em_store_selector_is_version(const char *sel, long *number) {
  if (*sel == 'v' || *sel == 'V') sel++; /* "v2", as the workbench shows versions */
  if (*sel < '0' || *sel > '9') { /* no sign, no space: strtol would take them */
    if (number) *number = 0;
    return false;
  }
  char *end;
  long n = strtol(sel, &end, 10);
  if (number) *number = n;
  return *sel && *end == '\0' && n > 0;
}

bool em_version_parse(const char *text, int *version) {
  long n = 0;
  bool ok = text && em_store_selector_is_version(text, &n) && n <= (1 << 30);
  if (version) *version = ok ? (int)n : 0;
  return ok;
}

bool em_version_ref_names_alias(const char *ref) {
  const char *at = ref ? strchr(ref, '@') : NULL;
  return at && !em_store_selector_is_version(at + 1, NULL);
}

em_status em_store_resolve_version(em_store *s, const char *ref, em_version_ref *out,
                                   em_error *err) {
  memset(out, 0, sizeof *out);
  const char *at = ref ? strchr(ref, '@') : NULL;
  if (!at || at == ref || !at[1] || (size_t)(at - ref) >= sizeof out->name ||
      strlen(at + 1) >= sizeof out->selector)
    return em_error_set(err, EM_ERR_INVALID,
                        "'%s' is not a model reference: write NAME@ALIAS or NAME@VERSION "
                        "(e.g. fmnist-mlp@production or fmnist-mlp@v3)",
                        ref ? ref : "");
  memcpy(out->name, ref, (size_t)(at - ref));
  out->name[at - ref] = '\0';
  strcpy(out->selector, at + 1);
  long want;
  bool by_number = em_store_selector_is_version(out->selector, &want);

  em_version_row *v = NULL;
  int nv = 0;
  em_status st = em_store_model_versions(s, out->name, &v, &nv, err);
  if (st != EM_OK) return st;
  const em_version_row *pick = NULL;
  for (int i = 0; i < nv && !pick; i++)
    if (by_number ? v[i].version == want : alias_listed(v[i].aliases, out->selector))
      pick = &v[i];
  if (!pick) {
    st = em_error_set(err, EM_ERR_INVALID,
                      "model '%s' has no %s '%s'; see `ember model versions %s` for its "
                      "versions and aliases",
                      out->name, by_number ? "version" : "alias", out->selector, out->name);
  } else {
    em_run run = {0};
    st = em_store_run_get(s, pick->run, &run, err);
    if (st == EM_OK && !run.spec_json)
      st = em_error_set(err, EM_ERR_FORMAT, "run %lld (version %d of '%s') recorded no spec",
                        (long long)pick->run, pick->version, out->name);
    if (st == EM_OK) {
      out->version = pick->version;
      out->run = pick->run;
      out->checkpoint = pick->checkpoint;
      out->weights_path = strdup(pick->weights_path);
      out->sha256 = strdup(pick->sha256 ? pick->sha256 : "");
      out->spec_json = strdup(run.spec_json);
      em_store_version_reference(s, out->name, pick->version, &out->reference_json, NULL);
      if (!out->weights_path || !out->sha256 || !out->spec_json) {
        em_version_ref_clear(out);
        st = em_error_set(err, EM_ERR_NOMEM, "out of memory resolving '%s'", ref);
      }
    }
    em_run_clear(&run);
  }
  em_version_rows_free(v, nv);
  return st;
}

void em_version_ref_clear(em_version_ref *r) {
  if (!r) return;
  free(r->weights_path);
  free(r->sha256);
  free(r->spec_json);
  free(r->reference_json);
  r->weights_path = r->sha256 = r->spec_json = r->reference_json = NULL;
}
