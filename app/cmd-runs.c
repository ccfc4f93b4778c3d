/* cmd-runs.c: `ember runs` (the list) and `ember run show|delete|tag|note`.
 *
 * Reads open the registry read-only; delete, tag and note open it for
 * writing (which also marks runs whose process vanished as "killed"). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "em-store.h"

static double run_duration(const em_run *r) {
  double end = r->ended > 0 ? r->ended : r->status == EM_RUN_RUNNING ? cli_wall_now() : NAN;
  return end - r->started;
}

/* ---- ember runs ------------------------------------------------------------ */

int cli_cmd_runs(int argc, char **argv) {
  const char *registry = NULL, *model = NULL, *status = NULL, *limit = NULL, *dataset = NULL,
             *spec = NULL;
  bool json = false;
  const cli_opt opts[] = {{"registry", &registry, NULL}, {"model", &model, NULL},
                          {"status", &status, NULL},     {"limit", &limit, NULL},
                          {"dataset", &dataset, NULL},   {"spec", &spec, NULL},
                          {"json", NULL, &json},         {0}};
  cli_parse_args(argc, argv, 2, opts, NULL, 0, 0, "runs");
  em_run_filter f = {.model = model, .any_status = true, .dataset = dataset,
                     .spec_sha256 = spec};
  em_error err = {0};
  if (status) {
    if (em_run_status_parse(status, &f.status, &err) != EM_OK)
      cli_die_usage("--status: %s", err.msg);
    f.any_status = false;
  }
  if (limit) f.limit = (int)cli_parse_int("--limit", limit, 1, 1 << 30);

  char dir[4096];
  if (cli_registry_dir(registry, dir, sizeof dir, &err) != EM_OK) return cli_fail1(&err, NULL);
  em_run *runs = NULL;
  int n = 0;
  if (cli_registry_exists(dir)) {
    em_store *s = cli_store_open(registry, true);
    if (!s) return 1;
    em_status st = em_store_runs_list(s, &f, &runs, &n, &err);
    em_store_close(s);
    if (st != EM_OK) return cli_fail1(&err, NULL);
  }
  cli_table *t = cli_table_new();
  cli_table_column(t, "ID", "id", CLI_ALIGN_RIGHT);
  cli_table_column(t, "NAME", "name", CLI_ALIGN_LEFT);
  cli_table_column(t, "MODEL", "model", CLI_ALIGN_LEFT);
  cli_table_column(t, "STATUS", "status", CLI_ALIGN_LEFT);
  cli_table_column(t, "STARTED", "started", CLI_ALIGN_LEFT);
  cli_table_column(t, "DURATION", "duration_s", CLI_ALIGN_RIGHT);
  cli_table_column(t, "STEPS", "steps", CLI_ALIGN_RIGHT);
  cli_table_column(t, "TEST ACC", "test_accuracy", CLI_ALIGN_RIGHT);
  cli_table_column(t, "TEST LOSS", "test_loss", CLI_ALIGN_RIGHT);
  for (int i = 0; i < n; i++) {
    const em_run *r = &runs[i];
    cli_table_row(t);
    cli_table_int(t, r->id);
    cli_table_str(t, r->name);
    cli_table_str(t, r->model);
    cli_table_str(t, em_run_status_name(r->status));
    cli_table_time(t, r->started);
    cli_table_duration(t, run_duration(r));
    cli_table_int(t, r->steps);
    cli_table_pct(t, r->final_test_accuracy);
    cli_table_num(t, r->final_test_loss, "%.4f");
  }
  if (json) cli_json_print(cli_table_json(t));
  else if (n == 0) printf("no runs%s in %s\n", model || status || dataset || spec ? " match" : " yet", dir);
  else cli_table_print(t, stdout, "");
  cli_table_free(t);
  em_runs_free(runs, n);
  return 0;
}

/* ---- ember run show ---------------------------------------------------------- */

/* The sections of `run show`, each a table (JSON: an array). */
static cli_table *metrics_table(em_store *s, int64_t id, em_error *err) {
  em_metric_summary *m = NULL;
  int n = 0;
  if (em_store_metrics_summary(s, id, &m, &n, err) != EM_OK) return NULL;
  cli_table *t = cli_table_new();
  cli_table_column(t, "KEY", "key", CLI_ALIGN_LEFT);
  cli_table_column(t, "COUNT", "count", CLI_ALIGN_RIGHT);
  cli_table_column(t, "LAST STEP", "last_step", CLI_ALIGN_RIGHT);
  cli_table_column(t, "LAST", "last", CLI_ALIGN_RIGHT);
  cli_table_column(t, "MIN", "min", CLI_ALIGN_RIGHT);
  cli_table_column(t, "MAX", "max", CLI_ALIGN_RIGHT);
  for (int i = 0; i < n; i++) {
    cli_table_row(t);
    cli_table_str(t, m[i].key);
    cli_table_int(t, m[i].count);
    cli_table_int(t, m[i].last_step);
    cli_table_num(t, m[i].last, "%.6g");
    cli_table_num(t, m[i].min, "%.6g");
    cli_table_num(t, m[i].max, "%.6g");
  }
  em_metric_summaries_free(m, n);
  return t;
}

static cli_table *checkpoints_table(em_store *s, int64_t id, em_error *err) {
  em_checkpoint_row *c = NULL;
  int n = 0;
  if (em_store_checkpoints_list(s, id, &c, &n, err) != EM_OK) return NULL;
  cli_table *t = cli_table_new();
  cli_table_column(t, "STEP", "step", CLI_ALIGN_RIGHT);
  cli_table_column(t, "EPOCH", "epoch", CLI_ALIGN_RIGHT);
  cli_table_column(t, "KIND", "kind", CLI_ALIGN_LEFT);
  cli_table_column(t, "TEST LOSS", "metric", CLI_ALIGN_RIGHT);
  cli_table_column(t, "SIZE", "size", CLI_ALIGN_RIGHT);
  cli_table_column(t, "SHA256", "sha256", CLI_ALIGN_LEFT);
  cli_table_column(t, "PATH", "path", CLI_ALIGN_LEFT);
  for (int i = 0; i < n; i++) {
    cli_table_row(t);
    cli_table_int(t, c[i].step);
    cli_table_int(t, c[i].epoch + 1);
    cli_table_str(t, c[i].kind);
    cli_table_num(t, c[i].metric, "%.4f");
    cli_table_bytes(t, c[i].size);
    char shortsha[16];
    snprintf(shortsha, sizeof shortsha, "%.12s", c[i].sha256 ? c[i].sha256 : "");
    cli_table_cell(t, shortsha, c[i].sha256 ? json_string(c[i].sha256) : NULL);
    if (c[i].path && access(c[i].path, F_OK) != 0) { /* deleted behind the registry's back */
      char *shown = cli_xmalloc(strlen(c[i].path) + 16);
      sprintf(shown, "%s  (missing)", c[i].path);
      cli_table_cell(t, shown, cli_json_text(c[i].path));
      free(shown);
    } else {
      cli_table_str(t, c[i].path);
    }
  }
  em_checkpoint_rows_free(c, n);
  return t;
}

static cli_table *artifacts_table(em_store *s, int64_t id, em_error *err) {
  em_artifact *a = NULL;
  int n = 0;
  if (em_store_artifacts_list(s, id, &a, &n, err) != EM_OK) return NULL;
  cli_table *t = cli_table_new();
  cli_table_column(t, "ID", "id", CLI_ALIGN_RIGHT);
  cli_table_column(t, "KIND", "kind", CLI_ALIGN_LEFT);
  cli_table_column(t, "SIZE", "size", CLI_ALIGN_RIGHT);
  cli_table_column(t, "CREATED", "created", CLI_ALIGN_LEFT);
  cli_table_column(t, "PATH", "path", CLI_ALIGN_LEFT);
  for (int i = 0; i < n; i++) {
    cli_table_row(t);
    cli_table_int(t, a[i].id);
    cli_table_str(t, a[i].kind);
    cli_table_bytes(t, a[i].size);
    cli_table_time(t, a[i].created);
    cli_table_str(t, a[i].path);
  }
  em_artifacts_free(a, n);
  return t;
}

/* Model versions registered from the run (every model's versions). */
static cli_table *versions_table(em_store *s, int64_t id, em_error *err) {
  em_model_row *m = NULL;
  int nm = 0;
  if (em_store_models_list(s, &m, &nm, err) != EM_OK) return NULL;
  cli_table *t = cli_table_new();
  cli_table_column(t, "MODEL", "model", CLI_ALIGN_LEFT);
  cli_table_column(t, "VERSION", "version", CLI_ALIGN_RIGHT);
  cli_table_column(t, "ALIASES", "aliases", CLI_ALIGN_LEFT);
  cli_table_column(t, "CREATED", "created", CLI_ALIGN_LEFT);
  for (int i = 0; i < nm; i++) {
    em_version_row *v = NULL;
    int nv = 0;
    if (em_store_model_versions(s, m[i].name, &v, &nv, err) != EM_OK) {
      cli_table_free(t);
      em_model_rows_free(m, nm);
      return NULL;
    }
    for (int k = 0; k < nv; k++) {
      if (v[k].run != id) continue;
      cli_table_row(t);
      cli_table_str(t, m[i].name);
      cli_table_int(t, v[k].version);
      cli_table_str(t, v[k].aliases && v[k].aliases[0] ? v[k].aliases : NULL);
      cli_table_time(t, v[k].created);
    }
    em_version_rows_free(v, nv);
  }
  em_model_rows_free(m, nm);
  return t;
}

/* Tags, notes and events: what people and the trainer added to the run. */
static cli_table *annotations_table(em_store *s, int64_t id, em_error *err) {
  em_run_annotation *a = NULL;
  int n = 0;
  if (em_store_run_annotations(s, id, &a, &n, err) != EM_OK) return NULL;
  cli_table *t = cli_table_new();
  cli_table_column(t, "KIND", "kind", CLI_ALIGN_LEFT);
  cli_table_column(t, "TIME", "time", CLI_ALIGN_LEFT);
  cli_table_column(t, "STEP", "step", CLI_ALIGN_RIGHT);
  cli_table_column(t, "KEY", "key", CLI_ALIGN_LEFT);
  cli_table_column(t, "TEXT", "text", CLI_ALIGN_LEFT);
  for (int i = 0; i < n; i++) {
    bool tag = strcmp(a[i].kind, "tag") == 0, note = strcmp(a[i].kind, "note") == 0;
    cli_table_row(t);
    cli_table_str(t, a[i].kind);
    if (tag) cli_table_cell(t, "-", NULL);
    else cli_table_time(t, a[i].time);
    if (tag || note) cli_table_cell(t, "-", NULL);
    else cli_table_int(t, a[i].step);
    cli_table_str(t, a[i].key);
    cli_table_str(t, a[i].text);
  }
  em_run_annotations_free(a, n);
  return t;
}

static cli_table *config_table(const char *config_json) {
  cli_table *t = cli_table_new();
  cli_table_column(t, "KEY", "key", CLI_ALIGN_LEFT);
  cli_table_column(t, "VALUE", "value", CLI_ALIGN_LEFT);
  json_t *cfg = json_loads(config_json ? config_json : "{}", 0, NULL);
  json_t *flat = json_object();
  if (cfg) em_json_flatten(cfg, "", flat);
  const char *k;
  json_t *v;
  json_object_foreach(flat, k, v) {
    char buf[512];
    em_json_leaf_text(v, buf, sizeof buf);
    cli_table_row(t);
    cli_table_str(t, k);
    cli_table_cell(t, buf, json_incref(v));
  }
  json_decref(flat);
  json_decref(cfg);
  return t;
}

static json_t *run_json(const em_run *r) {
  json_t *o = json_object();
  json_object_set_new(o, "id", json_integer(r->id));
  json_object_set_new(o, "name", cli_json_text(r->name ? r->name : ""));
  json_object_set_new(o, "model", cli_json_text(r->model ? r->model : ""));
  json_object_set_new(o, "status", json_string(em_run_status_name(r->status)));
  json_object_set_new(o, "message", cli_json_text(r->message));
  json_object_set_new(o, "started", cli_json_num(r->started));
  json_object_set_new(o, "ended", r->ended > 0 ? json_real(r->ended) : json_null());
  json_object_set_new(o, "duration_s", cli_json_num(run_duration(r)));
  json_object_set_new(o, "steps", json_integer(r->steps));
  json_object_set_new(o, "test_accuracy", cli_json_num(r->final_test_accuracy));
  json_object_set_new(o, "test_loss", cli_json_num(r->final_test_loss));
  json_object_set_new(o, "train_loss", cli_json_num(r->final_train_loss));
  json_object_set_new(o, "parent_run", r->parent_run ? json_integer(r->parent_run) : json_null());
  json_object_set_new(o, "seed", json_integer((json_int_t)r->seed));
  json_object_set_new(o, "device", json_string(r->device ? r->device : ""));
  json_object_set_new(o, "threads", json_integer(r->threads));
  json_object_set_new(o, "host", cli_json_text(r->host ? r->host : ""));
  json_object_set_new(o, "pid", json_integer(r->pid));
  json_object_set_new(o, "engine_version", json_string(r->engine_version ? r->engine_version : ""));
  json_object_set_new(o, "kernels", r->kernels ? json_string(r->kernels) : json_null());
  json_object_set_new(o, "spec_sha256", r->spec_sha256 ? json_string(r->spec_sha256) : json_null());
  json_t *spec = r->spec_json ? json_loads(r->spec_json, 0, NULL) : NULL;
  json_object_set_new(o, "spec", spec ? spec : json_null());
  if (r->dataset_name) {
    json_t *d = json_object();
    json_object_set_new(d, "name", cli_json_text(r->dataset_name));
    json_object_set_new(d, "path", cli_json_text(r->dataset_path ? r->dataset_path : ""));
    bool hashed = em_dataset_sha_known(r->dataset_sha256);
    json_object_set_new(d, "sha256", hashed ? json_string(r->dataset_sha256) : json_null());
    json_object_set_new(d, "size", json_integer(r->dataset_size));
    json_object_set_new(o, "dataset", d);
  } else {
    json_object_set_new(o, "dataset", json_null());
  }
  return o;
}

static void print_header(const em_run *r) {
  char started[32], ended[32], dur[32];
  cli_format_time(r->started, started, sizeof started);
  cli_format_time(r->ended, ended, sizeof ended);
  cli_format_duration(run_duration(r), dur, sizeof dur);
  char *name = cli_display_text(r->name ? r->name : "");
  char *msg = cli_display_text(r->message ? r->message : "");
  printf("run %lld  %s\n", (long long)r->id, name);
  printf("  model        %s\n", r->model ? r->model : "-");
  printf("  status       %s%s%s\n", em_run_status_name(r->status), r->message ? ": " : "", msg);
  free(name);
  free(msg);
  printf("  started      %s   ended %s   (%s)\n", started, ended, dur);
  printf("  steps        %lld\n", (long long)r->steps);
  if (isfinite(r->final_test_accuracy))
    printf("  test         accuracy %.2f%%, loss %.4f\n", 100 * r->final_test_accuracy,
           r->final_test_loss);
  if (r->parent_run) printf("  resumed from run %lld\n", (long long)r->parent_run);
  printf("  seed %llu, device %s, %d threads, host %s (pid %lld), ember %s\n",
         (unsigned long long)r->seed, r->device ? r->device : "-", r->threads,
         r->host ? r->host : "-", (long long)r->pid, r->engine_version ? r->engine_version : "-");
  if (r->kernels) printf("  kernels      %s\n", r->kernels);
  printf("  spec sha256  %s\n", r->spec_sha256 ? r->spec_sha256 : "-");
  if (r->dataset_name) {
    char size[32];
    cli_format_bytes(r->dataset_size, size, sizeof size);
    bool hashed = em_dataset_sha_known(r->dataset_sha256);
    printf("  dataset      %s at %s (%s, ", r->dataset_name,
           r->dataset_path && r->dataset_path[0] ? r->dataset_path : "-", size);
    if (hashed) printf("sha256 %.16s)\n", r->dataset_sha256);
    else printf("%s)\n", r->dataset_sha256 ? "no files: its contents are not hashed" : "-");
  } else {
    printf("  dataset      -\n");
  }
}

static void print_section(const char *title, const cli_table *t) {
  printf("\n%s\n", title);
  if (cli_table_rows(t) == 0) printf("  (none)\n");
  else cli_table_print(t, stdout, "  ");
}

static int run_show(int argc, char **argv) {
  const char *registry = NULL, *pos[1];
  bool json = false;
  const cli_opt opts[] = {{"registry", &registry, NULL}, {"json", NULL, &json}, {0}};
  cli_parse_args(argc, argv, 3, opts, pos, 1, 1, "run show");
  em_store *s = cli_store_open(registry, true);
  if (!s) return 1;
  em_error err = {0};
  int64_t id;
  em_run r;
  memset(&r, 0, sizeof r);
  if (cli_run_id(s, pos[0], &id, &err) != EM_OK || em_store_run_get(s, id, &r, &err) != EM_OK) {
    em_store_close(s);
    return cli_fail1(&err, NULL);
  }
  int rc = 0;
  enum { N_SECTIONS = 6 };
  const char *titles[N_SECTIONS] = {"config", "metrics", "checkpoints", "artifacts",
                                    "model versions registered from it",
                                    "tags, notes and events"};
  const char *keys[N_SECTIONS] = {"config", "metrics", "checkpoints", "artifacts", "versions",
                                  "annotations"};
  cli_table *tables[N_SECTIONS] = {config_table(r.config_json), metrics_table(s, id, &err)};
  if (tables[1]) tables[2] = checkpoints_table(s, id, &err);
  if (tables[2]) tables[3] = artifacts_table(s, id, &err);
  if (tables[3]) tables[4] = versions_table(s, id, &err);
  if (tables[4]) tables[5] = annotations_table(s, id, &err);
  if (!tables[N_SECTIONS - 1]) {
    rc = cli_fail1(&err, NULL);
  } else if (json) {
    json_t *o = run_json(&r);
    json_t *cfg = json_loads(r.config_json ? r.config_json : "null", 0, NULL);
    json_object_set_new(o, "config", cfg ? cfg : json_null());
    for (int i = 1; i < N_SECTIONS; i++) json_object_set_new(o, keys[i], cli_table_json(tables[i]));
    cli_json_print(o);
  } else {
    print_header(&r);
    for (int i = 0; i < N_SECTIONS; i++) print_section(titles[i], tables[i]);
  }
  for (int i = 0; i < N_SECTIONS; i++) cli_table_free(tables[i]);
  em_run_clear(&r);
  em_store_close(s);
  return rc;
}

/* ---- ember run delete | tag | note -------------------------------------------- */

static int run_change(int argc, char **argv, const char *what) {
  const char *registry = NULL, *pos[64];
  bool json = false;
  const cli_opt opts[] = {{"registry", &registry, NULL}, {"json", NULL, &json}, {0}};
  char cmd[32];
  snprintf(cmd, sizeof cmd, "run %s", what);
  bool del = strcmp(what, "delete") == 0, tag = strcmp(what, "tag") == 0;
  int np = cli_parse_args(argc, argv, 3, opts, pos, del ? 1 : 2, del ? 1 : tag ? 2 : 64, cmd);
  char key[256] = "";
  const char *value = NULL;
  if (tag) {
    const char *eq = strchr(pos[1], '=');
    if (!eq || eq == pos[1] || (size_t)(eq - pos[1]) >= sizeof key)
      cli_die_usage("run tag expects KEY=VALUE, got '%s'", pos[1]);
    snprintf(key, sizeof key, "%.*s", (int)(eq - pos[1]), pos[1]);
    value = eq + 1;
  }
  char text[8192] = "";
  if (!del && !tag) { /* the note: the remaining words */
    size_t len = 0;
    for (int i = 1; i < np; i++) {
      int w = snprintf(text + len, sizeof text - len, "%s%s", i > 1 ? " " : "", pos[i]);
      if (w < 0 || (size_t)w >= sizeof text - len) cli_die_usage("run note: the text is too long");
      len += (size_t)w;
    }
    if (!text[0]) cli_die_usage("run note expects TEXT");
  }
  em_store *s = cli_store_open(registry, false);
  if (!s) return 1;
  em_error err = {0};
  int64_t id;
  em_status st = cli_run_id(s, pos[0], &id, &err);
  if (st == EM_OK) {
    if (del) st = em_store_run_delete(s, id, &err);
    else if (tag) st = em_store_run_tag(s, id, key, value, &err);
    else st = em_store_run_note(s, id, text, &err);
  }
  em_store_close(s);
  if (st != EM_OK) return cli_fail1(&err, NULL);
  if (json) {
    json_t *o = json_object();
    json_object_set_new(o, "run", json_integer(id));
    json_object_set_new(o, "action", json_string(what));
    if (tag) {
      json_object_set_new(o, "key", cli_json_text(key));
      json_object_set_new(o, "value", cli_json_text(value));
    } else if (!del) {
      json_object_set_new(o, "note", cli_json_text(text));
    }
    cli_json_print(o);
  } else if (del) {
    printf("deleted run %lld\n", (long long)id);
  } else if (tag) {
    char *k = cli_display_text(key), *v = cli_display_text(value);
    printf("run %lld: %s = %s\n", (long long)id, k, v);
    free(k);
    free(v);
  } else {
    printf("run %lld: note added\n", (long long)id);
  }
  return 0;
}

int cli_cmd_run(int argc, char **argv) {
  if (argc < 3) cli_die_usage("run expects show, delete, tag or note");
  const char *sub = argv[2];
  if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
    cli_usage_print(stdout);
    return 0;
  }
  if (strcmp(sub, "show") == 0) return run_show(argc, argv);
  if (strcmp(sub, "delete") == 0 || strcmp(sub, "tag") == 0 || strcmp(sub, "note") == 0)
    return run_change(argc, argv, sub);
  cli_die_usage("run: unknown subcommand '%s'; expected show, delete, tag or note", sub);
}
