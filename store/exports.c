/* exports.c: a registered model version exported to ONNX inside the
 * registry (artifacts/exports/NAME-vVERSION[-int8].onnx) and recorded as an
 * artifact of kind "export" on the version's run, so that the lineage
 * dataset -> spec -> run -> checkpoint -> version -> export holds. */
#include "store-private.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "em-export.h"

em_status em_store_export_version(em_store *s, const char *name, int version,
                                  em_quant_mode quant, const char *ember_version, char *path,
                                  size_t cap, int64_t *artifact_id, em_error *err) {
  em_version_row *v = NULL;
  int nv = 0;
  em_status vst = em_store_model_versions(s, name, &v, &nv, err);
  if (vst != EM_OK) return vst;
  const em_version_row *pick = NULL;
  for (int i = 0; i < nv && !pick; i++)
    if (v[i].version == version) pick = &v[i];
  em_status st = EM_OK;
  em_run run = {0};
  em_spec *spec = NULL;
  em_model *model = NULL;
  if (!pick) {
    st = em_error_set(err, EM_ERR_INVALID, "model '%s' has no version %d; see `ember model "
                      "versions %s`", name, version, name);
    goto out;
  }
  if ((st = em_store_run_get(s, pick->run, &run, err)) != EM_OK) goto out;
  char src[64];
  snprintf(src, sizeof src, "<spec of run %lld>", (long long)pick->run);
  if (!run.spec_json) {
    st = em_error_set(err, EM_ERR_FORMAT, "run %lld recorded no spec", (long long)pick->run);
    goto out;
  }
  if (!(spec = em_spec_parse(run.spec_json, src, err))) {
    st = err->status;
    goto out;
  }
  if (!(model = em_model_new(spec, 0, err))) {
    st = err->status;
    goto out;
  }
  if ((st = em_model_load(model, pick->weights_path, err)) != EM_OK) goto out;
  if (quant != EM_QUANT_NONE && (st = em_model_quantize(model, quant, NULL, err)) != EM_OK)
    goto out;
  char dir[4096], rel[512];
  em_store_artifact_path(s, "exports", dir, sizeof dir);
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    st = em_error_set(err, EM_ERR_IO, "cannot create '%s': %s", dir, strerror(errno));
    goto out;
  }
  snprintf(rel, sizeof rel, "exports/%s-v%d%s.onnx", name, version,
           quant != EM_QUANT_NONE ? "-int8" : "");
  em_store_artifact_path(s, rel, path, cap);
  em_export_meta meta = {.ember_version = ember_version,
                         .run_id = pick->run,
                         .model_version = version,
                         .registry_model = name};
  if ((st = em_export_onnx(model, path, &meta, err)) != EM_OK) goto out;
  st = em_store_artifact_add(s, path, "export", pick->run, artifact_id, err);
out:
  em_model_free(model);
  em_spec_free(spec);
  em_run_clear(&run);
  em_version_rows_free(v, nv);
  return st;
}
