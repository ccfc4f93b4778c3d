/* eval-report-print.c: `ember eval --report`: the evaluation report
 * (em_eval_report, em-train.h) as tables on stdout and as JSON, the JSON
 * also kept with a registered version's run (artifacts/runs/<run>/
 * eval-report.json, kind "eval-report") so runs compare by it. */
#include "eval-report-print.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli-common.h"
#include "cli-table.h"
#include "em-io.h"

static const char *class_label(const char *const *names, int c, char *buf, size_t cap) {
  if (names) return names[c];
  snprintf(buf, cap, "%d", c);
  return buf;
}

json_t *eval_report_json(const em_eval_report *r, const char *const *names) {
  json_t *o = json_object(), *conf = json_array(), *norm = json_array(), *cls = json_array();
  int k = r->classes;
  char buf[16];
  for (int t = 0; t < k; t++) {
    json_t *row = json_array(), *nrow = json_array();
    int64_t sum = 0;
    for (int p = 0; p < k; p++) sum += r->confusion[t * k + p];
    for (int p = 0; p < k; p++) {
      json_array_append_new(row, json_integer(r->confusion[t * k + p]));
      json_array_append_new(nrow, json_real(sum ? (double)r->confusion[t * k + p] / sum : 0));
    }
    json_array_append_new(conf, row);
    json_array_append_new(norm, nrow);
    double pr, rc, f1;
    int64_t support;
    em_eval_report_class(r, t, &pr, &rc, &f1, &support);
    json_array_append_new(cls, json_pack("{s:i, s:s, s:f, s:f, s:f, s:I}", "class", t, "name",
                                         class_label(names, t, buf, sizeof buf), "precision", pr,
                                         "recall", rc, "f1", f1, "support",
                                         (json_int_t)support));
  }
  json_t *bins = json_array();
  for (int b = 0; b < EM_EVAL_BINS; b++)
    json_array_append_new(bins, json_pack("{s:f, s:f, s:I, s:o, s:o}", "low", (double)b / EM_EVAL_BINS,
                                          "high", (double)(b + 1) / EM_EVAL_BINS, "count",
                                          (json_int_t)r->bin_n[b], "confidence",
                                          r->bin_n[b] ? json_real(r->bin_conf[b] / r->bin_n[b]) : json_null(),
                                          "accuracy",
                                          r->bin_n[b] ? json_real((double)r->bin_correct[b] / r->bin_n[b])
                                                      : json_null()));
  json_t *worst = json_array();
  for (int i = 0; i < r->n_worst; i++) {
    const em_eval_mistake *m = &r->worst[i];
    char b2[16];
    json_array_append_new(worst, json_pack("{s:I, s:i, s:s, s:i, s:s, s:f}", "index",
                                           (json_int_t)m->index, "true", m->truth, "true_name",
                                           class_label(names, m->truth, buf, sizeof buf), "pred",
                                           m->pred, "pred_name",
                                           class_label(names, m->pred, b2, sizeof b2),
                                           "confidence", m->confidence));
  }
  json_object_set_new(o, "samples", json_integer(r->n));
  json_object_set_new(o, "accuracy", json_real(r->accuracy));
  json_object_set_new(o, "top_k", json_integer(r->top_k));
  json_object_set_new(o, "top_k_accuracy", json_real(r->top_k_accuracy));
  json_object_set_new(o, "ece", json_real(r->ece));
  json_object_set_new(o, "confusion", conf);
  json_object_set_new(o, "confusion_normalized", norm);
  json_object_set_new(o, "classes", cls);
  json_object_set_new(o, "calibration", bins);
  json_object_set_new(o, "worst_mistakes", worst);
  return o;
}

void eval_report_print(const em_eval_report *r, const char *const *names, FILE *out) {
  int k = r->classes;
  char buf[16];
  fprintf(out, "confusion matrix (rows: true class, columns: predicted)\n");
  fprintf(out, "%12s", "");
  for (int p = 0; p < k; p++) fprintf(out, " %6.6s", class_label(names, p, buf, sizeof buf));
  fputc('\n', out);
  for (int t = 0; t < k; t++) {
    fprintf(out, "%12.12s", class_label(names, t, buf, sizeof buf));
    for (int p = 0; p < k; p++) fprintf(out, " %6lld", (long long)r->confusion[t * k + p]);
    fputc('\n', out);
  }
  cli_table *tb = cli_table_new();
  cli_table_column(tb, "CLASS", "class", CLI_ALIGN_LEFT);
  cli_table_column(tb, "PRECISION", "precision", CLI_ALIGN_RIGHT);
  cli_table_column(tb, "RECALL", "recall", CLI_ALIGN_RIGHT);
  cli_table_column(tb, "F1", "f1", CLI_ALIGN_RIGHT);
  cli_table_column(tb, "SUPPORT", "support", CLI_ALIGN_RIGHT);
  for (int c = 0; c < k; c++) {
    double pr, rc, f1;
    int64_t support;
    em_eval_report_class(r, c, &pr, &rc, &f1, &support);
    cli_table_row(tb);
    cli_table_str(tb, class_label(names, c, buf, sizeof buf));
    cli_table_num(tb, pr, "%.4f");
    cli_table_num(tb, rc, "%.4f");
    cli_table_num(tb, f1, "%.4f");
    cli_table_int(tb, support);
  }
  fputc('\n', out);
  cli_table_print(tb, out, "");
  cli_table_free(tb);
  fprintf(out, "\naccuracy %.4f, top-%d accuracy %.4f, expected calibration error %.4f (%d bins "
          "of confidence)\n", r->accuracy, r->top_k, r->top_k_accuracy, r->ece, EM_EVAL_BINS);
  if (r->n_worst) {
    fprintf(out, "most confident mistakes:\n");
    char b2[16];
    for (int i = 0; i < r->n_worst && i < 10; i++)
      fprintf(out, "  sample %lld: %s taken for %s (%.4f)\n", (long long)r->worst[i].index,
              class_label(names, r->worst[i].truth, buf, sizeof buf),
              class_label(names, r->worst[i].pred, b2, sizeof b2), r->worst[i].confidence);
  }
}

int eval_report_keep(em_store *s, int64_t run, const json_t *report, char *path, size_t cap) {
  char rel[64];
  snprintf(rel, sizeof rel, "runs/%lld", (long long)run);
  char dir[4096];
  em_store_artifact_path(s, rel, dir, sizeof dir);
  mkdir(dir, 0755);
  snprintf(path, cap, "%s/eval-report.json", dir);
  em_error err = {0};
  char *txt = json_dumps(report, JSON_INDENT(1));
  FILE *f = txt ? fopen(path, "w") : NULL;
  bool ok = f && fputs(txt, f) >= 0;
  if (f && fclose(f) != 0) ok = false;
  free(txt);
  if (!ok) {
    fprintf(stderr, "ember: warning: the report is not kept with run %lld: cannot write %s\n",
            (long long)run, path);
    return 1;
  }
  if (em_store_artifact_add(s, path, "eval-report", run, NULL, &err) != EM_OK) {
    cli_warn("the report is not recorded with run %lld: %s", (long long)run, err.msg);
    return 1;
  }
  return 0;
}
