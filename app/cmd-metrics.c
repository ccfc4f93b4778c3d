/* cmd-metrics.c: `ember metrics RUN KEY [--csv|--json]`: every point of
 * one metric (step, value, wall time). A key the run never recorded is an
 * error that lists the keys it has, except while the run is still
 * running (its first rows may not be committed yet): then the list is
 * simply empty. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "em-store.h"

/* "run 3 has no metric 'x'; it recorded: loss, lr, ..." */
static int no_such_key(em_store *s, int64_t id, const char *key) {
  em_error err = {0};
  em_metric_summary *m = NULL;
  int n = 0;
  char keys[1024] = "";
  if (em_store_metrics_summary(s, id, &m, &n, &err) == EM_OK) {
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof keys - 1; i++) {
      int w = snprintf(keys + len, sizeof keys - len, "%s%s", i ? ", " : "", m[i].key);
      if (w > 0) len += (size_t)w;
    }
    em_metric_summaries_free(m, n);
  }
  fprintf(stderr, "ember: run %lld has no metric '%s'; it recorded: %s\n", (long long)id, key,
          keys[0] ? keys : "none");
  return 1;
}

int cli_cmd_metrics(int argc, char **argv) {
  const char *registry = NULL, *pos[2];
  bool json = false, csv = false;
  const cli_opt opts[] = {
      {"registry", &registry, NULL}, {"json", NULL, &json}, {"csv", NULL, &csv}, {0}};
  cli_parse_args(argc, argv, 2, opts, pos, 2, 2, "metrics");
  if (json && csv) cli_die_usage("metrics: give --json or --csv, not both");
  em_store *s = cli_store_open(registry, true);
  if (!s) return 1;
  em_error err = {0};
  int64_t id;
  em_run r;
  memset(&r, 0, sizeof r);
  em_metric_point *pts = NULL;
  int64_t n = 0;
  int rc = 0;
  if (cli_run_id(s, pos[0], &id, &err) != EM_OK || em_store_run_get(s, id, &r, &err) != EM_OK ||
      em_store_metrics_get(s, id, pos[1], &pts, &n, &err) != EM_OK) {
    rc = cli_fail1(&err, NULL);
    goto out;
  }
  if (n == 0 && r.status != EM_RUN_RUNNING) {
    rc = no_such_key(s, id, pos[1]);
    goto out;
  }
  cli_table *t = cli_table_new();
  cli_table_column(t, "STEP", "step", CLI_ALIGN_RIGHT);
  cli_table_column(t, "VALUE", "value", CLI_ALIGN_RIGHT);
  cli_table_column(t, "WALL", "wall", CLI_ALIGN_LEFT);
  for (int64_t i = 0; i < n; i++) {
    cli_table_row(t);
    cli_table_int(t, pts[i].step);
    cli_table_num(t, pts[i].value, "%.6g");
    char buf[32];
    time_t sec = (time_t)pts[i].wall;
    struct tm tm;
    localtime_r(&sec, &tm);
    size_t k = strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf + k, sizeof buf - k, ".%01d", (int)((pts[i].wall - (double)sec) * 10) % 10);
    cli_table_cell(t, buf, json_real(pts[i].wall));
  }
  if (json) cli_json_print(cli_table_json(t));
  else if (csv) cli_table_print_csv(t, stdout);
  else cli_table_print(t, stdout, "");
  cli_table_free(t);
out:
  free(pts);
  em_run_clear(&r);
  em_store_close(s);
  return rc;
}
