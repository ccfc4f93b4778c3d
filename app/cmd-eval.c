/* cmd-eval.c: `ember eval SPEC --weights FILE | NAME@ALIAS [--quantize int8]` (test
 * loss and accuracy of saved weights, optionally with int8 Linear layers)
 * and `ember info SPEC` (the layer table). eval reads the registry only for
 * a registered version NAME@ALIAS / NAME@VERSION (cli-model.h), evaluated
 * on the dataset its run recorded.
 * eval --device evaluates where it is told (the weights are loaded on the
 * host and moved there). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "em-cpu.h"
#include "cli-commands.h"
#include "cli-common.h"
#include "cli-model.h"
#include "cli-table.h"
#include "em-device.h"
#include "em-pool.h"
#include "em-quant.h"
#include "em-train.h"
#include "eval-report-print.h"
#include "plugin-load.h"
#include "train-options.h"

int cli_cmd_info(int argc, char **argv) {
  if (argc != 3 || argv[2][0] == '-') cli_die_usage("info expects one SPEC file");
  em_error err = {0};
  em_spec *spec = em_spec_load(argv[2], &err);
  if (!spec) return cli_fail(&err, NULL);
  /* The summary, its name and description (free text from the file) as
   * cli_display_text shows them: control characters and escape sequences
   * spelled out, not sent to the terminal. */
  size_t n = em_spec_format_summary(spec, NULL, 0);
  char *text = cli_xmalloc(n + 1);
  em_spec_format_summary(spec, text, n + 1);
  const char *name = em_spec_name(spec), *desc = em_spec_description(spec);
  size_t ln = strlen(name), ld = strlen(desc);
  const char *rest = text;
  if (strncmp(text, "model: ", 7) == 0 && strncmp(text + 7, name, ln) == 0 &&
      text[7 + ln] == '\n') {
    rest = text + 8 + ln;
    if (ld && strncmp(rest, "  ", 2) == 0 && strncmp(rest + 2, desc, ld) == 0 &&
        rest[2 + ld] == '\n')
      rest += 3 + ld;
    else
      ld = 0;
    char *dn = cli_display_text(name), *dd = cli_display_text(desc);
    printf("model: %s\n", dn);
    if (ld) printf("  %s\n", dd);
    free(dn);
    free(dd);
  }
  int rc = fputs(rest, stdout) >= 0 && fflush(stdout) == 0
               ? 0
               : cli_fail(&(em_error){.status = EM_ERR_IO, .msg = "cannot write the model summary"},
                          argv[2]);
  free(text);
  if (rc == 0) { /* what a CPU run of it would compute with */
    char kernels[256];
    em_cpu_kernels_describe(kernels, sizeof kernels);
    printf("cpu: %s\n", kernels);
  }
  em_spec_free(spec);
  return rc;
}

int cli_cmd_eval(int argc, char **argv) {
  cli_train_opts o;
  cli_train_opts_parse(argc, argv, "eval", &o);
  em_quant_mode qmode = cli_parse_quantize(o.quantize);
  if (!o.spec_path) cli_die_usage("eval expects a SPEC file or a model NAME@ALIAS");
  /* a registered version, as predict, export and serve take it: its run's
   * spec and its weights, evaluated on the data its run trained on */
  cli_check_model_ref(o.spec_path, o.weights);
  bool by_ref = !o.weights && em_version_ref_looks_like(o.spec_path);
  if (!by_ref && !o.weights) cli_die_usage("eval needs --weights FILE (or a model NAME@ALIAS)");
  const char *unused = cli_train_opts_eval_conflict(&o);
  if (unused)
    cli_die_usage("%s is an 'ember train' option: eval takes --weights, --batch, --threads, "
                  "--dataset, --data-dir, --device, --label-smoothing, --quantize and --metric "
                  "(it evaluates the whole test set in f32, or int8 with --quantize)", unused);
  em_error err = {0};
  cli_model cm = {0};
  em_spec *spec = NULL;
  if (by_ref) {
    int orc = cli_model_open(o.spec_path, NULL, o.registry, &cm);
    if (orc) return orc;
    spec = cm.spec;
  } else if (!(spec = em_spec_load(o.spec_path, &err))) {
    return cli_fail(&err, NULL);
  }
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  if (em_train_config_from_spec(&cfg, spec, &err) != EM_OK) {
    if (by_ref) cli_model_close(&cm);
    else em_spec_free(spec);
    return cli_fail(&err, o.spec_path);
  }
  if (by_ref) { /* the dataset the version's run recorded (flags still apply over it) */
    em_store *st = cli_store_open(o.registry, true);
    em_run r = {0};
    if (st && em_store_run_get(st, cm.ref.run, &r, NULL) == EM_OK && r.dataset_name) {
      snprintf(cfg.dataset, sizeof cfg.dataset, "%s", r.dataset_name);
      snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", r.dataset_path ? r.dataset_path : "");
    }
    em_run_clear(&r);
    if (st) em_store_close(st);
  }
  cli_train_opts_apply(&o, &cfg);
  cli_train_opts_check_device(&o, &cfg); /* --device: exit 2 when unusable */
  int rc = 0;
  em_dataset *test = NULL;
  em_model *model = NULL;
  em_quant_report qrep = {0};
  double loss = 0, acc = 0;
  if (em_train_config_validate(&cfg, &err) != EM_OK) rc = cli_fail(&err, NULL);
  else if (!(test = em_train_open_dataset(spec, &cfg, false, &err))) rc = cli_fail(&err, NULL);
  else if (by_ref ? !(model = cm.model) : !(model = em_model_new(spec, cfg.seed, &err)))
    rc = cli_fail(&err, o.spec_path);
  else if (!by_ref && em_model_load(model, o.weights, &err) != EM_OK)
    rc = cli_fail(&err, o.weights);
  else if (qmode != EM_QUANT_NONE && (em_model_quantize(model, qmode, &qrep, &err) != EM_OK ||
                                      cli_quant_check(&qrep, em_spec_name(spec), &err) != EM_OK))
    rc = cli_fail(&err, "--quantize int8");
  else if (em_model_to_device(model, cfg.device, &err) != EM_OK)
    rc = cli_fail(&err, "--device");
  else {
    em_set_num_threads(cfg.threads);
    if (em_evaluate(model, test, cfg.batch_size, cfg.loss, 0.0, &loss, &acc, &err) != EM_OK)
      rc = cli_fail(&err, "evaluation");
  }
  if (rc == 0) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (qmode != EM_QUANT_NONE)
      fprintf(stderr, "int8: %d Linear layers quantised (%s kernel), weights %.1f -> %.1f KiB%s\n",
              qrep.layers_quantized, qrep.kernel, (double)qrep.weight_bytes_f32 / 1024,
              (double)qrep.weight_bytes_int8 / 1024,
              qrep.layers_too_wide ? "; wider ones (over 65536 inputs) stay f32" : "");
    char mbuf[512];
    fprintf(stderr, "test loss %.4f, accuracy %.2f%%%s on %lld samples\n", loss, 100 * acc,
            app_metrics_text(mbuf, sizeof mbuf), (long long)em_dataset_len(test));
    if (!isfinite(loss))
      fprintf(stderr, "ember: warning: the test loss is %s: the model's outputs overflow on "
              "this data\n", isnan(loss) ? "NaN" : "infinite");
    json_t *res = json_object(); /* non-finite numbers as null (cli_json_num) */
    json_object_set_new(res, "model", json_string(em_spec_name(spec)));
    json_object_set_new(res, "test_loss", cli_json_num(loss));
    json_object_set_new(res, "test_accuracy", cli_json_num(acc));
    json_object_set_new(res, "quantization", json_string(qmode != EM_QUANT_NONE ? "int8" : "none"));
    json_object_set_new(res, "peak_rss_mb", cli_json_num(round(ru.ru_maxrss / 1024.0 * 10) / 10));
    json_object_set_new(res, "metrics", app_metrics_json()); /* plugin metrics, when asked for */
    if (o.report) {
      em_eval_report rep;
      if (em_eval_report_run(model, test, cfg.batch_size, 5, &rep, &err) != EM_OK) {
        rc = cli_fail(&err, "--report");
      } else {
        const char *const *names = cli_class_names(spec, rep.classes);
        eval_report_print(&rep, names, stderr);
        json_t *rj = eval_report_json(&rep, names);
        json_object_set_new(res, "report", rj);
        em_store *st = by_ref ? cli_store_open(o.registry, false) : NULL;
        char path[4200];
        if (st && eval_report_keep(st, cm.ref.run, rj, path, sizeof path) == 0)
          fprintf(stderr, "report kept with run %lld (%s)\n", (long long)cm.ref.run, path);
        if (st) em_store_close(st);
        em_eval_report_clear(&rep);
      }
    }
    char *txt = json_dumps(res, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (txt && rc == 0) printf("%s\n", txt);
    free(txt);
    json_decref(res);
  }
  em_dataset_free(test);
  if (by_ref) {
    cli_model_close(&cm); /* its spec and model */
  } else {
    em_model_free(model);
    em_spec_free(spec);
  }
  return rc;
}
