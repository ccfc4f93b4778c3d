/* cmd-sweep.c: `ember sweep`, many trials from one description
 * (em-tune.h), run by a queue whose state is in the registry.
 *
 *   ember sweep start FILE [--parallel P] [--name N]   record it and run it here
 *   ember sweep resume ID [--parallel P]               go on (after a kill, a stop, a pause)
 *   ember sweep status ID [--json]                     its trials
 *   ember sweep list [--json]
 *   ember sweep pause ID | cancel ID                   told to its runner through the registry
 *   ember queue SPEC... [--training JSON] [--parallel P] [--name N]   single runs, queued
 *       (a sweep of one trial per SPEC: status, resume and cancel as above)
 * each with --registry DIR. P trials run at once, each with cores / P
 * threads (at least 1). */
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "em-io.h"
#include "sweep-runner.h"

static int64_t sweep_id(const char *text) {
  return cli_parse_int("sweep ID", text, 1, INT64_MAX);
}

static int run_it(em_store *s, int64_t id, const char *regdir, const char *parallel_s, bool quiet) {
  int cores = cli_usable_cores();
  int parallel = parallel_s ? (int)cli_parse_int("--parallel", parallel_s, 1, 64) : 1;
  if (parallel > cores)
    cli_die_usage("--parallel %d is more than the %d cores: each trial needs one at least",
                  parallel, cores);
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "ember: sweep: cannot find this program's path\n");
    return 1;
  }
  self[n] = '\0';
  sweep_runner_options o = {.sweep = id, .ember = self, .registry = regdir,
                            .parallel = parallel, .threads = cores / parallel, .quiet = quiet};
  return sweep_runner_run(&o, s);
}

static int print_trials(em_store *s, int64_t id, bool json) {
  em_sweep_row sw;
  em_trial_row *t = NULL;
  int n = 0;
  em_error err = {0};
  if (em_store_sweep_get(s, id, &sw, &err) != EM_OK ||
      em_store_trials_list(s, id, &t, &n, &err) != EM_OK) {
    em_sweep_row_clear(&sw);
    return cli_fail1(&err, "sweep");
  }
  em_tune_desc d;
  bool have = em_tune_desc_parse(&d, sw.description_json, NULL, NULL) == EM_OK;
  cli_table *tb = cli_table_new();
  cli_table_column(tb, "TRIAL", "trial", CLI_ALIGN_RIGHT);
  cli_table_column(tb, "STATUS", "status", CLI_ALIGN_LEFT);
  cli_table_column(tb, "RUN", "run", CLI_ALIGN_RIGHT);
  cli_table_column(tb, "EPOCHS", "epochs", CLI_ALIGN_RIGHT);
  cli_table_column(tb, "STEPS", "steps", CLI_ALIGN_RIGHT);
  cli_table_column(tb, have ? d.metric : "METRIC", "metric", CLI_ALIGN_RIGHT);
  cli_table_column(tb, "SETTINGS", "params", CLI_ALIGN_LEFT);
  cli_table_column(tb, "DECISION", "decision", CLI_ALIGN_LEFT);
  int best = -1;
  int64_t steps = 0;
  for (int i = 0; i < n; i++) {
    steps += t[i].steps;
    if (have && t[i].status == EM_TRIAL_COMPLETED && isfinite(t[i].metric) &&
        (best < 0 || (d.maximize ? t[i].metric > t[best].metric : t[i].metric < t[best].metric)))
      best = i;
    cli_table_row(tb);
    cli_table_int(tb, t[i].number);
    cli_table_str(tb, em_trial_status_name(t[i].status));
    if (t[i].run) cli_table_int(tb, t[i].run);
    else cli_table_str(tb, NULL);
    cli_table_int(tb, t[i].epochs);
    cli_table_int(tb, t[i].steps);
    cli_table_num(tb, t[i].metric, "%.4f");
    cli_table_cell(tb, t[i].params_json, json_loads(t[i].params_json, 0, NULL));
    cli_table_str(tb, t[i].decision && t[i].decision[0] ? t[i].decision : NULL);
  }
  if (json) {
    json_t *o = json_pack("{s:I, s:s, s:s, s:o, s:I}", "sweep", (json_int_t)id, "name",
                          sw.name ? sw.name : "", "status", em_sweep_status_name(sw.status),
                          "trials", cli_table_json(tb), "steps", (json_int_t)steps);
    json_object_set_new(o, "best_trial", best >= 0 ? json_integer(t[best].number) : json_null());
    cli_json_print(o);
  } else {
    printf("sweep %lld%s%s: %s, %d trial%s, %lld steps in all\n", (long long)id,
           sw.name && sw.name[0] ? " " : "", sw.name ? sw.name : "",
           em_sweep_status_name(sw.status), n, n == 1 ? "" : "s", (long long)steps);
    cli_table_print(tb, stdout, "");
    if (best >= 0)
      printf("best: trial %d (run %lld), %s %.4f\n", t[best].number, (long long)t[best].run,
             d.metric, t[best].metric);
  }
  cli_table_free(tb);
  if (have) em_tune_desc_clear(&d);
  em_trial_rows_free(t, n);
  em_sweep_row_clear(&sw);
  return 0;
}

/* Records the description text (its base_dir resolves relative spec
 * paths) as a new sweep and runs it here. */
static int start(em_store *s, const char *text, const char *base_dir, const char *name,
                 const char *regdir, const char *parallel, bool json, bool quiet,
                 const char *what) {
  em_error err = {0};
  em_tune_desc d;
  if (em_tune_desc_parse(&d, text, base_dir, &err) != EM_OK) return cli_fail(&err, what);
  char *recorded = em_tune_desc_recorded(text, &d);
  int64_t id = 0;
  int rc = 0;
  json_t *o = json_loads(text, 0, NULL);
  const char *nm = name ? name : json_string_value(json_object_get(o, "name"));
  if (!recorded || em_store_sweep_create(s, nm, recorded, &id, &err) != EM_OK) {
    rc = cli_fail1(&err, what);
  } else {
    static const char *const samplers[] = {"grid", "random", "tpe", "queue"};
    fprintf(stderr, "sweep %lld: %d trial%s (%s%s%s), metric %s (%s)\n", (long long)id, d.trials,
            d.trials == 1 ? "" : "s", samplers[d.sampler],
            d.sampler == EM_TUNE_QUEUE ? " of single runs" : " sampler",
            d.pruner == EM_PRUNE_ASHA     ? ", ASHA pruning"
            : d.pruner == EM_PRUNE_MEDIAN ? ", median pruning"
                                          : "",
            d.metric, d.maximize ? "maximize" : "minimize");
    rc = run_it(s, id, regdir, parallel, quiet);
    if (rc == 0) rc = print_trials(s, id, json);
  }
  json_decref(o);
  free(recorded);
  em_tune_desc_clear(&d);
  return rc;
}

int cli_cmd_queue(int argc, char **argv) {
  const char *registry = NULL, *parallel = NULL, *name = NULL, *training = NULL;
  bool json = false, quiet = false;
  const cli_opt opts[] = {{"registry", &registry, NULL}, {"parallel", &parallel, NULL},
                          {"name", &name, NULL},         {"training", &training, NULL},
                          {"json", NULL, &json},         {"quiet", NULL, &quiet},
                          {0}};
  const char **pos = cli_xmalloc(sizeof(char *) * (size_t)argc);
  int np = cli_parse_args(argc, argv, 2, opts, pos, 1, EM_TUNE_MAX_QUEUE, "queue");
  json_t *tr = training ? json_loads(training, 0, NULL) : json_object();
  if (!json_is_object(tr))
    cli_die_usage("--training takes a JSON object of training settings for every run, e.g. "
                  "'{\"epochs\": 2, \"limit\": 5000}'");
  json_t *q = json_array();
  for (int i = 0; i < np; i++) {
    char *abs = realpath(pos[i], NULL);
    json_array_append_new(q, json_pack("{s:s}", "spec", abs ? abs : pos[i]));
    free(abs);
  }
  json_t *desc = json_pack("{s:o, s:o}", "queue", q, "training", tr);
  char *text = json_dumps(desc, JSON_COMPACT);
  json_decref(desc);
  free(pos);
  char regdir[4096];
  em_error err = {0};
  if (cli_registry_dir(registry, regdir, sizeof regdir, &err) != EM_OK) {
    free(text);
    return cli_fail1(&err, "registry");
  }
  em_store *s = cli_store_open(registry, false);
  int rc = s ? start(s, text, NULL, name, regdir, parallel, json, quiet, "queue") : 1;
  em_store_close(s);
  free(text);
  return rc;
}

int cli_cmd_sweep(int argc, char **argv) {
  if (argc < 3) cli_die_usage("sweep expects start, resume, status, list, pause or cancel");
  const char *sub = argv[2], *registry = NULL, *parallel = NULL, *name = NULL, *pos[1] = {NULL};
  bool json = false, quiet = false;
  const cli_opt opts[] = {{"registry", &registry, NULL}, {"parallel", &parallel, NULL},
                          {"name", &name, NULL},         {"json", NULL, &json},
                          {"quiet", NULL, &quiet},       {0}};
  bool list = !strcmp(sub, "list");
  char what[32];
  snprintf(what, sizeof what, "sweep %s", sub);
  cli_parse_args(argc, argv, 3, opts, pos, list ? 0 : 1, list ? 0 : 1, what);
  char regdir[4096];
  em_error err = {0};
  if (cli_registry_dir(registry, regdir, sizeof regdir, &err) != EM_OK)
    return cli_fail1(&err, "registry");
  bool reads = list || !strcmp(sub, "status");
  em_store *s = cli_store_open(registry, reads);
  if (!s) return 1;
  int rc = 0;
  if (!strcmp(sub, "start")) {
    char *text = em_read_text(pos[0], false);
    if (!text) {
      fprintf(stderr, "ember: sweep start: cannot read '%s'\n", pos[0]);
      rc = 1;
    } else {
      char *copy = strdup(pos[0]);
      rc = start(s, text, dirname(copy), name, regdir, parallel, json, quiet, pos[0]);
      free(copy);
    }
    free(text);
  } else if (!strcmp(sub, "resume")) {
    int64_t id = sweep_id(pos[0]);
    em_sweep_row sw;
    if (em_store_sweep_get(s, id, &sw, &err) != EM_OK) {
      rc = cli_fail1(&err, "sweep resume");
    } else {
      em_sweep_row_clear(&sw);
      rc = run_it(s, id, regdir, parallel, quiet);
      if (rc == 0) print_trials(s, id, json);
    }
  } else if (!strcmp(sub, "status")) {
    rc = print_trials(s, sweep_id(pos[0]), json);
  } else if (list) {
    em_sweep_row *rows = NULL;
    int n = 0;
    if (em_store_sweeps_list(s, &rows, &n, &err) != EM_OK) {
      rc = cli_fail1(&err, "sweep list");
    } else {
      cli_table *t = cli_table_new();
      cli_table_column(t, "SWEEP", "sweep", CLI_ALIGN_RIGHT);
      cli_table_column(t, "NAME", "name", CLI_ALIGN_LEFT);
      cli_table_column(t, "STATUS", "status", CLI_ALIGN_LEFT);
      cli_table_column(t, "CREATED", "created", CLI_ALIGN_LEFT);
      for (int i = 0; i < n; i++) {
        cli_table_row(t);
        cli_table_int(t, rows[i].id);
        cli_table_str(t, rows[i].name);
        cli_table_str(t, em_sweep_status_name(rows[i].status));
        cli_table_time(t, rows[i].created);
      }
      if (json) cli_json_print(cli_table_json(t));
      else cli_table_print(t, stdout, "");
      cli_table_free(t);
      em_sweep_rows_free(rows, n);
    }
  } else if (!strcmp(sub, "pause") || !strcmp(sub, "cancel")) {
    int64_t id = sweep_id(pos[0]);
    em_sweep_row sw;
    bool cancel = !strcmp(sub, "cancel");
    if (em_store_sweep_get(s, id, &sw, &err) != EM_OK) {
      rc = cli_fail1(&err, what);
    } else if (sw.status == EM_SWEEP_COMPLETED || sw.status == EM_SWEEP_CANCELLED) {
      fprintf(stderr, "ember: sweep %lld is %s already\n", (long long)id,
              em_sweep_status_name(sw.status));
      rc = 1;
    } else if (em_store_sweep_set_status(s, id, cancel ? EM_SWEEP_CANCELLED : EM_SWEEP_PAUSED,
                                         &err) != EM_OK) {
      rc = cli_fail1(&err, what);
    } else {
      printf("sweep %lld %s%s\n", (long long)id, cancel ? "cancelled" : "paused",
             sw.runner_pid ? (cancel ? ": its runner stops its trials" : ": its runner starts "
                                                                         "no new trial")
                           : "");
    }
    em_sweep_row_clear(&sw);
  } else {
    cli_die_usage("sweep: unknown subcommand '%s'; expected start, resume, status, list, pause "
                  "or cancel", sub);
  }
  em_store_close(s);
  return rc;
}
