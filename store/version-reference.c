/* version-reference.c: a registered version's drift reference (em-drift.h),
 * built from its run's training data with its own weights, kept in
 * model_versions.reference_json. */
#include "em-store.h"
#include "store-private.h"

#include <stdlib.h>
#include <string.h>

#include "em-drift.h"

em_status em_store_version_set_reference(em_store *s, const char *name, int version,
                                         const char *json, em_error *err) {
  em_status st = em_store_require_writable(s, "recording a drift reference", err);
  int64_t model = 0;
  if (!st) st = em_store_model_id(s, name, &model, err);
  if (!st)
    st = EM_SQL_RUN(s, err, "UPDATE model_versions SET reference_json = ? WHERE model = ? AND "
                    "version = ?", "tin", json, model, version);
  if (!st && sqlite3_changes(s->db) == 0)
    st = em_error_set(err, EM_ERR_INVALID, "model '%s' has no version %d", name, version);
  return st;
}

em_status em_store_version_reference(em_store *s, const char *name, int version, char **json,
                                     em_error *err) {
  *json = NULL;
  int64_t model = 0;
  em_status st = em_store_model_id(s, name, &model, err);
  sqlite3_stmt *q = NULL;
  bool row = false;
  if (!st)
    st = EM_SQL_PREPARE(s, "SELECT reference_json FROM model_versions WHERE model = ? AND "
                        "version = ?", &q, err);
  if (!st) st = EM_SQL_BIND(s, q, err, "in", model, version);
  if (!st) st = EM_SQL_STEP(s, q, &row, err);
  if (!st && row && sqlite3_column_text(q, 0)) {
    *json = strdup((const char *)sqlite3_column_text(q, 0));
    if (!*json) st = em_error_set(err, EM_ERR_NOMEM, "out of memory reading a drift reference");
  }
  if (q) sqlite3_reset(q);
  if (!st && !row) st = em_error_set(err, EM_ERR_INVALID, "model '%s' has no version %d", name, version);
  return st;
}

em_status em_store_version_build_reference(em_store *s, const char *name, int version,
                                           int64_t max_samples, em_error *err) {
  char ref_text[160];
  snprintf(ref_text, sizeof ref_text, "%s@%d", name, version);
  em_version_ref v;
  em_run run;
  memset(&run, 0, sizeof run);
  em_spec *spec = NULL;
  em_model *model = NULL;
  em_dataset *ds = NULL;
  em_drift_ref *r = calloc(1, sizeof *r);
  char *json = NULL;
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  em_status st = r ? em_store_resolve_version(s, ref_text, &v, err)
                   : em_error_set(err, EM_ERR_NOMEM, "out of memory");
  if (st) goto out_r;
  if ((st = em_store_run_get(s, v.run, &run, err))) goto out;
  if (!(spec = em_spec_parse(v.spec_json, "the version's spec", err))) goto fail;
  if ((st = em_train_config_from_json(&cfg, run.config_json ? run.config_json : "{}", err)))
    goto out;
  cfg.device = em_device_cpu(); /* where the reference is built */
  if (!(ds = em_train_open_dataset(spec, &cfg, true, err))) goto fail;
  if (!(model = em_model_new(spec, 0, err))) goto fail;
  if ((st = em_model_load(model, v.weights_path, err))) goto out;
  if ((st = em_drift_ref_of_data(r, model, ds, max_samples, err))) goto out;
  if (!(json = em_drift_ref_to_json(r))) {
    st = em_error_set(err, EM_ERR_NOMEM, "out of memory writing the drift reference");
    goto out;
  }
  st = em_store_version_set_reference(s, name, version, json, err);
  goto out;
fail:
  st = err->status ? err->status : EM_ERR_INVALID;
out:
  free(json);
  em_model_free(model);
  em_dataset_free(ds);
  em_spec_free(spec);
  em_run_clear(&run);
  em_version_ref_clear(&v);
out_r:
  free(r);
  return st;
}
