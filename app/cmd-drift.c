/* cmd-drift.c: `ember drift`, a batch of inputs judged against a
 * registered version's drift reference (em-drift.h), offline: the same
 * figures the server's drift gauges give for its live window.
 *
 *   ember drift NAME@ALIAS|NAME@VERSION INPUT... [--limit N] [--psi X]
 *       [--js X] [--label-column C|last] [--json] [--registry DIR]
 *   ember drift NAME@REF --reference      (re)build the version's reference
 *
 * INPUTs are read as `ember predict` reads them (PNG, IDX, CSV). Prints a
 * row per feature (PSI, KS and its critical value) and the predicted
 * classes' Jensen-Shannon divergence. Exit status: 0 when nothing crossed
 * a limit, 3 when the inputs drifted (scripts tell it from an error, 1,
 * and a usage mistake, 2). */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-model.h"
#include "cli-table.h"
#include "em-drift.h"
#include "em-ops.h"
#include "predict-input.h"

#define DRIFT_EXIT 3
#define BATCH 256

/* Features and predicted classes of every input. */
static int observe(cli_model *m, predict_inputs *in, int64_t count, const em_drift_ref *r,
                   double *feats, int *pred) {
  int64_t shape[EM_MAX_DIMS + 1], out_shape[EM_MAX_DIMS], numel = 1;
  int nd = em_spec_input_shape(m->spec, shape + 1);
  int out_nd = em_spec_output_shape(m->spec, out_shape);
  for (int i = 0; i < nd; i++) numel *= shape[i + 1];
  int classes = em_drift_classes(out_shape, out_nd);
  float *x = cli_xmalloc(sizeof(float) * (size_t)(BATCH * numel));
  int64_t *y = cli_xmalloc(sizeof(int64_t) * BATCH);
  em_error err = {0};
  int rc = 0;
  bool prev = em_no_grad_begin();
  for (int64_t first = 0; first < count && rc == 0; first += BATCH) {
    int64_t n = count - first < BATCH ? count - first : BATCH;
    if (predict_inputs_read(in, first, n, x, y, &err) != EM_OK) {
      rc = cli_fail1(&err, NULL);
      break;
    }
    for (int64_t i = 0; i < n && r->n_features; i++)
      em_drift_features(shape + 1, nd, x + i * numel, feats + (first + i) * r->n_features);
    if (!r->classes || r->classes != classes) continue;
    em_scope *sc = em_scope_begin();
    shape[0] = n;
    em_tensor *out = em_model_forward(m->model, em_tensor_wrap(EM_DTYPE_F32, nd + 1, shape, x),
                                      false, NULL, &err);
    if (!out) rc = cli_fail(&err, m->label);
    else
      for (int64_t i = 0; i < n; i++)
        pred[first + i] = em_drift_argmax(em_f32(em_contiguous(out)) + i * classes, classes);
    em_scope_end(sc);
  }
  em_grad_mode_restore(prev);
  free(x);
  free(y);
  return rc;
}

static void print_stats(const em_drift_ref *r, const em_drift_stats *s, const em_drift_limits *lim,
                        bool drifted, const char *why, const char *label, bool as_json) {
  cli_table *t = cli_table_new();
  cli_table_column(t, "FEATURE", "feature", CLI_ALIGN_LEFT);
  cli_table_column(t, "PSI", "psi", CLI_ALIGN_RIGHT);
  cli_table_column(t, "KS", "ks", CLI_ALIGN_RIGHT);
  cli_table_column(t, "DRIFT", "drift", CLI_ALIGN_LEFT);
  for (int f = 0; f < r->n_features; f++) {
    bool d = s->psi[f] > lim->psi || (s->ks[f] > s->ks_critical && s->psi[f] > lim->psi / 2);
    cli_table_row(t);
    cli_table_str(t, r->f[f].name);
    cli_table_num(t, s->psi[f], "%.4f");
    cli_table_num(t, s->ks[f], "%.4f");
    cli_table_cell(t, d ? "yes" : "no", json_boolean(d));
  }
  if (as_json) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(label));
    json_object_set_new(o, "samples", json_integer(s->n));
    json_object_set_new(o, "reference_samples", json_integer(r->samples));
    json_object_set_new(o, "features", cli_table_json(t));
    json_object_set_new(o, "ks_critical", cli_json_num(s->ks_critical));
    json_object_set_new(o, "prediction_js", cli_json_num(s->js));
    json_object_set_new(o, "drift", json_boolean(drifted));
    json_object_set_new(o, "why", json_string(why));
    cli_json_print(o);
  } else {
    printf("%s: %lld inputs against a reference of %lld training samples (KS critical value "
           "%.4f at alpha 0.01; PSI limit %g)\n", label, (long long)s->n, (long long)r->samples,
           s->ks_critical, lim->psi);
    cli_table_print(t, stdout, "");
    if (isfinite(s->js)) printf("predicted classes: Jensen-Shannon %.4f (limit %g)\n", s->js, lim->js);
    printf(drifted ? "drift: %s\n" : "no drift%s\n", why);
  }
  cli_table_free(t);
}

static int build_reference(const char *ref, const char *registry) {
  em_store *s = cli_store_open(registry, false);
  if (!s) return 1;
  em_error err = {0};
  em_version_ref v;
  em_status st = em_store_resolve_version(s, ref, &v, &err);
  if (st == EM_OK)
    st = em_store_version_build_reference(s, v.name, v.version, EM_DRIFT_REFERENCE_SAMPLES, &err);
  if (st == EM_OK)
    printf("built the drift reference of %s v%d from its run's training data\n", v.name,
           v.version);
  em_version_ref_clear(&v);
  em_store_close(s);
  return st == EM_OK ? 0 : cli_fail1(&err, ref);
}

int cli_cmd_drift(int argc, char **argv) {
  const char *limit = NULL, *psi = NULL, *js = NULL, *registry = NULL, *label_column = NULL;
  bool json = false, reference = false;
  const cli_opt opts[] = {{"limit", &limit, NULL},       {"psi", &psi, NULL},
                          {"js", &js, NULL},             {"registry", &registry, NULL},
                          {"label-column", &label_column, NULL},
                          {"json", NULL, &json},         {"reference", NULL, &reference},
                          {0}};
  const char **pos = cli_xmalloc(sizeof(char *) * (size_t)argc);
  int np = cli_parse_args(argc, argv, 2, opts, pos, 0, argc, "drift");
  if (np < 1 || !em_version_ref_looks_like(pos[0]))
    cli_die_usage("drift expects a registered version (NAME@ALIAS or NAME@VERSION) and INPUT "
                  "files (PNG, IDX or CSV), or --reference to build its reference");
  if (reference) {
    if (np > 1) cli_die_usage("drift --reference builds from the version's training data: "
                              "leave out the INPUT files");
    int rc = build_reference(pos[0], registry);
    free(pos);
    return rc;
  }
  if (np < 2) cli_die_usage("drift expects INPUT files (PNG, IDX or CSV) after %s", pos[0]);
  em_drift_limits lim = {.psi = psi ? cli_parse_num("--psi", psi, 0, 100) : 0.25,
                         .js = js ? cli_parse_num("--js", js, 0, 1) : 0.1};
  em_store *s = cli_store_open(registry, true);
  if (!s) return 1;
  cli_model m;
  em_error err = {0};
  if (cli_model_open_ref(s, pos[0], &m, &err) != EM_OK) {
    em_store_close(s);
    return cli_fail1(&err, pos[0]);
  }
  char *ref_json = NULL;
  em_drift_ref *r = cli_xmalloc(sizeof *r);
  em_status st = em_store_version_reference(s, m.ref.name, m.ref.version, &ref_json, &err);
  em_store_close(s);
  int rc = 0;
  predict_inputs *in = NULL;
  if (st == EM_OK && !ref_json) {
    fprintf(stderr, "ember: %s has no drift reference (registered before Ember kept them, or its "
            "data was gone then); build it with 'ember drift %s --reference'\n", m.label, pos[0]);
    rc = 1;
    goto out;
  }
  if (st == EM_OK) st = em_drift_ref_from_json(r, ref_json, &err);
  if (st != EM_OK) {
    rc = cli_fail1(&err, m.label);
    goto out;
  }
  predict_input_options io = {.label_column = EM_CSV_NO_LABEL};
  io.ndim = em_spec_input_shape(m.spec, io.shape);
  int64_t out_shape[EM_MAX_DIMS];
  int out_nd = em_spec_output_shape(m.spec, out_shape);
  io.classes = out_nd == 1 ? (int)out_shape[0] : 0;
  if (label_column)
    io.label_column = !strcmp(label_column, "last")
                          ? EM_CSV_LAST_COLUMN
                          : (int)cli_parse_int("--label-column", label_column, 0, INT_MAX);
  if (!(in = predict_inputs_open(np - 1, pos + 1, &io, &err))) {
    rc = cli_fail1(&err, NULL);
    goto out;
  }
  int64_t count = predict_inputs_count(in);
  if (limit) {
    int64_t lim_n = cli_parse_int("--limit", limit, 1, LLONG_MAX);
    if (lim_n < count) count = lim_n;
  }
  double *feats = cli_xmalloc(sizeof(double) * (size_t)(count * (r->n_features + 1)));
  int *pred = cli_xmalloc(sizeof(int) * (size_t)count);
  if ((rc = observe(&m, in, count, r, feats, pred)) == 0) {
    em_drift_stats ds;
    em_drift_compare(r, feats, count, r->classes ? pred : NULL, &ds);
    char why[512];
    bool drifted = em_drift_judge(r, &ds, &lim, why, sizeof why);
    print_stats(r, &ds, &lim, drifted, why, m.label, json);
    rc = drifted ? DRIFT_EXIT : 0;
  }
  free(feats);
  free(pred);
out:
  predict_inputs_free(in);
  free(ref_json);
  free(r);
  free(pos);
  cli_model_close(&m);
  return rc;
}
