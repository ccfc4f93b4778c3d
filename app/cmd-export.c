/* cmd-export.c: `ember export` writes a model as ONNX (em-export.h).
 *
 *   ember export SPEC --weights FILE -o OUT.onnx [--quantize int8]
 *   ember export NAME@ALIAS|NAME@VERSION [-o OUT.onnx] [--registry DIR] [--quantize int8]
 *
 * The registry form takes the version's weights file and the spec its run
 * recorded, writes artifacts/exports/NAME-vV.onnx under the registry
 * (and -o OUT too, when given) and records the registry's file as an
 * artifact of kind "export" on the version's run. --quantize int8 exports
 * the Linear layers as dynamic int8 (em-quant.h; the metadata says so);
 * in the registry it is written as NAME-vV-int8.onnx (em_store_export_version). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "cli-model.h"
#include "plugin-load.h"
#include "em-export.h"
#include "em-io.h"
#include "em-quant.h"
#include "em-train.h"

#ifndef EMBER_VERSION
#define EMBER_VERSION "unknown"
#endif

/* Writes the model of spec + weights to out, quantised per qmode. */
static int export_model(const em_spec *spec, const char *weights, const char *out,
                        const em_export_meta *meta, em_quant_mode qmode) {
  em_error err = {0};
  em_model *model = em_model_new(spec, 0, &err);
  int rc = 0;
  em_quant_report rep = {0};
  if (!model) rc = cli_fail(&err, NULL);
  else if (em_model_load(model, weights, &err) != EM_OK) rc = cli_fail(&err, weights);
  else if (qmode != EM_QUANT_NONE && em_model_quantize(model, qmode, &rep, &err) != EM_OK)
    rc = cli_fail(&err, "--quantize");
  else if (qmode != EM_QUANT_NONE && cli_quant_check(&rep, em_spec_name(spec), &err) != EM_OK)
    rc = cli_fail(&err, "--quantize int8"); /* the file would say int8 and hold f32 only */
  else if (em_export_onnx(model, out, meta, &err) != EM_OK) rc = cli_fail(&err, out);
  em_model_free(model);
  return rc;
}

static int export_registry(const char *ref_text, const char *out, const char *registry,
                           em_quant_mode qmode) {
  em_store *s = cli_store_open(registry, false);
  if (!s) return 1;
  em_error err = {0};
  em_version_ref ref;
  int rc = 0;
  if (em_store_resolve_version(s, ref_text, &ref, &err) != EM_OK) {
    rc = cli_fail1(&err, ref_text);
    goto done;
  }
  if (app_plugins_restore(s, ref.run, &err) != EM_OK) { /* the spec may name their types */
    rc = cli_fail1(&err, ref_text);
    goto done;
  }
  const char *int8 = qmode != EM_QUANT_NONE ? " (int8)" : "";
  char inside[4096];
  int64_t art = 0;
  if (em_store_export_version(s, ref.name, ref.version, qmode, EMBER_VERSION, inside,
                              sizeof inside, &art, &err) != EM_OK) {
    rc = cli_fail1(&err, ref_text);
    goto done;
  }
  /* The registry keeps its own copy; -o elsewhere gets a second, equal
   * export (written atomically, like the first). */
  if (out) {
    char *ro = realpath(out, NULL);
    bool same = ro && !strcmp(ro, inside);
    free(ro);
    em_spec *spec = NULL;
    char src[64];
    snprintf(src, sizeof src, "<spec of run %lld>", (long long)ref.run);
    if (!same && !(spec = em_spec_parse(ref.spec_json, src, &err))) {
      rc = cli_fail1(&err, src);
    } else if (!same) {
      em_export_meta meta = {.ember_version = EMBER_VERSION,
                             .run_id = ref.run,
                             .model_version = ref.version,
                             .registry_model = ref.name};
      rc = export_model(spec, ref.weights_path, out, &meta, qmode);
    }
    em_spec_free(spec);
    if (rc) goto done;
    printf("exported %s version %d%s to %s\n", ref.name, ref.version, int8, out);
  }
  printf("recorded artifact %lld (%sexport of run %lld) at %s\n", (long long)art,
         qmode != EM_QUANT_NONE ? "int8 " : "", (long long)ref.run, inside);
done:
  em_version_ref_clear(&ref);
  em_store_close(s);
  return rc;
}

int cli_cmd_export(int argc, char **argv) {
  const char *weights = NULL, *out = NULL, *registry = NULL, *quantize = NULL, *pos[1] = {NULL};
  /* -o is the short form of --output. */
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], "-o")) argv[i] = "--output";
  const cli_opt opts[] = {{"weights", &weights, NULL},
                          {"output", &out, NULL},
                          {"registry", &registry, NULL},
                          {"quantize", &quantize, NULL},
                          {0}};
  cli_parse_args(argc, argv, 2, opts, pos, 1, 1, "export");
  em_quant_mode qmode = cli_parse_quantize(quantize);
  if (out) cli_check_output_path("-o", out, true); /* a folder, /dev/null: before any work */
  cli_check_model_ref(pos[0], weights);
  if (em_version_ref_looks_like(pos[0]) && !weights)
    return export_registry(pos[0], out, registry, qmode);
  if (!weights) cli_die_usage("export SPEC needs --weights FILE (or use NAME@ALIAS)");
  if (!out) cli_die_usage("export SPEC needs -o OUT.onnx");
  if (registry) cli_die_usage("--registry goes with NAME@ALIAS, not with a SPEC file");
  em_error err = {0};
  em_spec *spec = em_spec_load(pos[0], &err);
  if (!spec) return cli_fail(&err, NULL);
  em_export_meta meta = {.ember_version = EMBER_VERSION};
  int rc = export_model(spec, weights, out, &meta, qmode);
  if (rc == 0) {
    char *name = cli_display_text(em_spec_name(spec)), *where = cli_display_text(out);
    printf("exported %s%s to %s\n", name, qmode != EM_QUANT_NONE ? " (int8)" : "", where);
    free(name);
    free(where);
  }
  em_spec_free(spec);
  return rc;
}
