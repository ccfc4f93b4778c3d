/* cmd-compare.c: `ember compare RUN RUN... [--csv|--json]`: runs side by
 * side. Rows: what the runs are (name, model, status, steps, duration),
 * the settings whose values differ (the config flattened to dotted keys,
 * "config.optim.lr"), then per metric its final value and its best (the
 * lowest of a loss, the highest of an accuracy or a throughput). One
 * column per run. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "em-store.h"

#define MAX_RUNS 32

typedef struct {
  em_run run;
  json_t *config; /* flattened */
  em_metric_summary *m;
  int nm;
} compared;

/* 1: higher is better, -1: lower is better, 0: no "best" */
static int best_sense(const char *key) {
  if (strstr(key, "accuracy") || strstr(key, "samples_per_sec")) return 1;
  if (strstr(key, "loss")) return -1;
  return 0;
}

static const em_metric_summary *find_metric(const compared *c, const char *key) {
  for (int i = 0; i < c->nm; i++)
    if (strcmp(c->m[i].key, key) == 0) return &c->m[i];
  return NULL;
}

static void row_label(cli_table *t, const char *label) {
  cli_table_row(t);
  cli_table_str(t, label);
}

static void add_metric_rows(cli_table *t, const compared *c, int n, const char *key) {
  char label[160];
  snprintf(label, sizeof label, "%s (final)", key);
  row_label(t, label);
  for (int i = 0; i < n; i++) {
    const em_metric_summary *m = find_metric(&c[i], key);
    cli_table_num(t, m ? m->last : NAN, "%.6g");
  }
  int sense = best_sense(key);
  if (!sense) return;
  snprintf(label, sizeof label, "%s (best, %s)", key, sense > 0 ? "max" : "min");
  row_label(t, label);
  for (int i = 0; i < n; i++) {
    const em_metric_summary *m = find_metric(&c[i], key);
    cli_table_num(t, m ? (sense > 0 ? m->max : m->min) : NAN, "%.6g");
  }
}

int cli_cmd_compare(int argc, char **argv) {
  const char *registry = NULL, *pos[MAX_RUNS];
  bool json = false, csv = false;
  const cli_opt opts[] = {
      {"registry", &registry, NULL}, {"json", NULL, &json}, {"csv", NULL, &csv}, {0}};
  int n = cli_parse_args(argc, argv, 2, opts, pos, 2, MAX_RUNS, "compare");
  if (json && csv) cli_die_usage("compare: give --json or --csv, not both");
  em_store *s = cli_store_open(registry, true);
  if (!s) return 1;
  compared c[MAX_RUNS];
  memset(c, 0, sizeof c);
  em_error err = {0};
  int rc = 0, loaded = 0;
  for (; loaded < n; loaded++) {
    int64_t id;
    compared *x = &c[loaded];
    if (cli_run_id(s, pos[loaded], &id, &err) != EM_OK ||
        em_store_run_get(s, id, &x->run, &err) != EM_OK ||
        em_store_metrics_summary(s, id, &x->m, &x->nm, &err) != EM_OK) {
      rc = cli_fail1(&err, NULL);
      loaded++;
      goto out;
    }
    for (int k = 0; k < loaded; k++) /* its JSON would hold one of the two: a key per run */
      if (c[k].run.id == id) {
        em_error_set(&err, EM_ERR_INVALID, "compare: run %lld is given twice ('%s' and '%s')",
                     (long long)id, pos[k], pos[loaded]);
        rc = cli_fail1(&err, NULL);
        loaded++;
        goto out;
      }
    x->config = json_object();
    json_t *cfg = json_loads(x->run.config_json ? x->run.config_json : "{}", 0, NULL);
    if (cfg) em_json_flatten(cfg, "config", x->config);
    json_decref(cfg);
  }

  cli_table *t = cli_table_new();
  cli_table_column(t, "", "key", CLI_ALIGN_LEFT);
  for (int i = 0; i < n; i++) {
    char head[64], key[64];
    snprintf(head, sizeof head, "RUN %lld", (long long)c[i].run.id);
    snprintf(key, sizeof key, "run_%lld", (long long)c[i].run.id);
    cli_table_column(t, head, key, CLI_ALIGN_RIGHT);
  }
  row_label(t, "name");
  for (int i = 0; i < n; i++) cli_table_str(t, c[i].run.name);
  row_label(t, "model");
  for (int i = 0; i < n; i++) cli_table_str(t, c[i].run.model);
  row_label(t, "status");
  for (int i = 0; i < n; i++) cli_table_str(t, em_run_status_name(c[i].run.status));
  row_label(t, "steps");
  for (int i = 0; i < n; i++) cli_table_int(t, c[i].run.steps);
  row_label(t, "spec sha256");
  for (int i = 0; i < n; i++) {
    const char *sha = c[i].run.spec_sha256;
    char shortsha[16];
    snprintf(shortsha, sizeof shortsha, "%.12s", sha ? sha : "-");
    cli_table_cell(t, shortsha, sha ? json_string(sha) : NULL);
  }

  /* The settings that differ: every key any run has, in first-seen order. */
  json_t *keys = json_object();
  for (int i = 0; i < n; i++) {
    const char *k;
    json_t *v;
    json_object_foreach(c[i].config, k, v) json_object_set_new(keys, k, json_true());
  }
  const char *k;
  json_t *unused;
  json_object_foreach(keys, k, unused) {
    json_t *first = json_object_get(c[0].config, k);
    bool differ = false;
    for (int i = 1; i < n && !differ; i++) {
      json_t *v = json_object_get(c[i].config, k);
      differ = !first || !v || !json_equal(first, v);
    }
    if (!differ) continue;
    row_label(t, k);
    for (int i = 0; i < n; i++) {
      json_t *v = json_object_get(c[i].config, k);
      char buf[256];
      if (v) em_json_leaf_text(v, buf, sizeof buf);
      cli_table_cell(t, v ? buf : "-", v ? json_incref(v) : NULL);
    }
  }
  json_decref(keys);

  /* Metrics: every key any run recorded, sorted (summaries come sorted). */
  json_t *mkeys = json_object();
  for (int i = 0; i < n; i++)
    for (int m = 0; m < c[i].nm; m++) json_object_set_new(mkeys, c[i].m[m].key, json_true());
  const char **sorted = cli_xmalloc(json_object_size(mkeys) * sizeof *sorted + 1);
  size_t nk = 0;
  json_object_foreach(mkeys, k, unused) sorted[nk++] = k;
  for (size_t a = 1; a < nk; a++) /* insertion sort: a handful of keys */
    for (size_t b = a; b > 0 && strcmp(sorted[b - 1], sorted[b]) > 0; b--) {
      const char *tmp = sorted[b];
      sorted[b] = sorted[b - 1];
      sorted[b - 1] = tmp;
    }
  for (size_t i = 0; i < nk; i++) add_metric_rows(t, c, n, sorted[i]);
  free(sorted);
  json_decref(mkeys);

  if (json) cli_json_print(cli_table_json(t));
  else if (csv) cli_table_print_csv(t, stdout);
  else cli_table_print(t, stdout, "");
  cli_table_free(t);
out:
  for (int i = 0; i < loaded; i++) {
    em_run_clear(&c[i].run);
    em_metric_summaries_free(c[i].m, c[i].nm);
    json_decref(c[i].config);
  }
  em_store_close(s);
  return rc;
}
