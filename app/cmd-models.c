/* cmd-models.c: the model registry from the command line:
 *
 *   ember models                                   models, versions, aliases
 *   ember model register RUN --name N [--checkpoint best|last|STEP]
 *   ember model versions N
 *   ember model promote N VERSION --alias A        move alias A to VERSION
 *       [--if-held DURATION]   only a canary that ran that long without a rollback
 *   ember model rollback N --alias A               move it back
 *   ember model history N                          every alias move
 *
 * Aliases are names like "production" or "staging": letters, digits,
 * '-', '_' and '.'; anything else is refused before the registry is
 * touched. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "em-store.h"

/* A model name or alias the registry would refuse is a usage error (exit
 * 2), checked by the registry's own rule (the CLI had a second, looser
 * one for aliases: 1 to 64 characters, '-' first allowed). */
static void check_name_or_die(const char *model, const char *alias) {
  em_error err = {0};
  if (em_store_check_name("model", model, &err) != EM_OK ||
      (alias && em_store_check_alias(model, alias, &err) != EM_OK))
    cli_die_usage("%s", err.msg);
}

int cli_cmd_models(int argc, char **argv) {
  const char *registry = NULL;
  bool json = false;
  const cli_opt opts[] = {{"registry", &registry, NULL}, {"json", NULL, &json}, {0}};
  cli_parse_args(argc, argv, 2, opts, NULL, 0, 0, "models");
  em_error err = {0};
  char dir[4096];
  if (cli_registry_dir(registry, dir, sizeof dir, &err) != EM_OK) return cli_fail1(&err, NULL);
  em_model_row *m = NULL;
  int n = 0;
  if (cli_registry_exists(dir)) {
    em_store *s = cli_store_open(registry, true);
    if (!s) return 1;
    em_status st = em_store_models_list(s, &m, &n, &err);
    em_store_close(s);
    if (st != EM_OK) return cli_fail1(&err, NULL);
  }
  cli_table *t = cli_table_new();
  cli_table_column(t, "NAME", "name", CLI_ALIGN_LEFT);
  cli_table_column(t, "VERSIONS", "versions", CLI_ALIGN_RIGHT);
  cli_table_column(t, "LATEST", "latest", CLI_ALIGN_RIGHT);
  cli_table_column(t, "ALIASES", "aliases", CLI_ALIGN_LEFT);
  cli_table_column(t, "CREATED", "created", CLI_ALIGN_LEFT);
  for (int i = 0; i < n; i++) {
    cli_table_row(t);
    cli_table_str(t, m[i].name);
    cli_table_int(t, m[i].versions);
    cli_table_int(t, m[i].latest);
    cli_table_cell(t, m[i].aliases && m[i].aliases[0] ? m[i].aliases : "-",
                   json_string(m[i].aliases ? m[i].aliases : ""));
    cli_table_time(t, m[i].created);
  }
  if (json) cli_json_print(cli_table_json(t));
  else if (n == 0) printf("no models yet in %s (ember model register RUN --name NAME)\n", dir);
  else cli_table_print(t, stdout, "");
  cli_table_free(t);
  em_model_rows_free(m, n);
  return 0;
}

static int model_register(int argc, char **argv) {
  bool json = false;
  const char *registry = NULL, *name = NULL, *pick = "best", *pos[1];
  const cli_opt opts[] = {{"registry", &registry, NULL},
                          {"name", &name, NULL},
                          {"checkpoint", &pick, NULL},
                          {"json", NULL, &json},
                          {0}};
  cli_parse_args(argc, argv, 3, opts, pos, 1, 1, "model register");
  if (!name || !name[0]) cli_die_usage("model register needs --name NAME");
  check_name_or_die(name, NULL);
  em_checkpoint_pick how;
  int64_t step = 0;
  if (strcmp(pick, "best") == 0) how = EM_PICK_BEST;
  else if (strcmp(pick, "last") == 0) how = EM_PICK_LAST;
  else {
    how = EM_PICK_STEP;
    step = cli_parse_int("--checkpoint (best, last or a step)", pick, 0, 1LL << 62);
  }
  em_store *s = cli_store_open(registry, false);
  if (!s) return 1;
  em_error err = {0};
  int64_t run;
  int version = 0;
  em_status st = cli_run_id(s, pos[0], &run, &err);
  em_arch_diff d;
  if (st == EM_OK && em_store_model_arch_diff(s, name, run, &d, NULL) == EM_OK && d.differs) {
    char a[32], b[32];
    cli_warn("run %lld's model is not the architecture of %s v%d (%s parameters against %s): "
             "registered under the same name all the same; give it another --name if it is "
             "another model", (long long)run, name, d.latest_version,
             em_format_count(d.run_params, a, sizeof a), em_format_count(d.latest_params, b, sizeof b));
  }
  if (st == EM_OK) st = em_store_model_register(s, run, name, how, step, &version, &err);
  if (st == EM_OK) { /* what `ember serve` and `ember drift` judge live inputs against */
    em_error rerr = {0};
    if (em_store_version_build_reference(s, name, version, EM_DRIFT_REFERENCE_SAMPLES, &rerr) !=
        EM_OK)
      cli_warn("%s v%d has no drift reference (the server will not judge drift): %s; build it "
               "later with 'ember drift %s@%d --reference'", name, version, rerr.msg, name,
               version);
  }
  em_store_close(s);
  if (st != EM_OK) return cli_fail1(&err, "model register");
  if (json) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(name));
    json_object_set_new(o, "version", json_integer(version));
    json_object_set_new(o, "run", json_integer(run));
    json_object_set_new(o, "checkpoint", json_string(pick));
    cli_json_print(o);
  } else {
    printf("registered %s v%d from run %lld (checkpoint: %s)\n", name, version,
           (long long)run, pick);
  }
  return 0;
}

static int model_versions(const char *name, const char *registry, bool json) {
  em_store *s = cli_store_open(registry, true);
  if (!s) return 1;
  em_error err = {0};
  em_version_row *v = NULL;
  int n = 0;
  em_status st = em_store_model_versions(s, name, &v, &n, &err);
  em_store_close(s);
  if (st != EM_OK) return cli_fail1(&err, NULL);
  cli_table *t = cli_table_new();
  cli_table_column(t, "VERSION", "version", CLI_ALIGN_RIGHT);
  cli_table_column(t, "ALIASES", "aliases", CLI_ALIGN_LEFT);
  cli_table_column(t, "RUN", "run", CLI_ALIGN_RIGHT);
  cli_table_column(t, "STEP", "step", CLI_ALIGN_RIGHT); /* the checkpoint's; metrics are at it */
  cli_table_column(t, "TEST ACC", "test_accuracy", CLI_ALIGN_RIGHT);
  cli_table_column(t, "TEST LOSS", "test_loss", CLI_ALIGN_RIGHT);
  cli_table_column(t, "CREATED", "created", CLI_ALIGN_LEFT);
  cli_table_column(t, "SHA256", "sha256", CLI_ALIGN_LEFT);
  cli_table_column(t, "WEIGHTS", "weights", CLI_ALIGN_LEFT);
  for (int i = 0; i < n; i++) {
    json_t *mj = v[i].metrics_json ? json_loads(v[i].metrics_json, 0, NULL) : NULL;
    json_t *acc = json_object_get(mj, "test_accuracy"), *loss = json_object_get(mj, "test_loss");
    cli_table_row(t);
    cli_table_int(t, v[i].version);
    cli_table_cell(t, v[i].aliases && v[i].aliases[0] ? v[i].aliases : "-",
                   json_string(v[i].aliases ? v[i].aliases : ""));
    cli_table_int(t, v[i].run);
    json_t *step = json_object_get(json_object_get(mj, "checkpoint"), "step");
    if (json_is_integer(step)) cli_table_int(t, json_integer_value(step));
    else cli_table_cell(t, "-", NULL);
    cli_table_pct(t, json_is_number(acc) ? json_number_value(acc) : NAN);
    cli_table_num(t, json_is_number(loss) ? json_number_value(loss) : NAN, "%.4f");
    cli_table_time(t, v[i].created);
    char shortsha[16];
    snprintf(shortsha, sizeof shortsha, "%.12s", v[i].sha256 ? v[i].sha256 : "-");
    cli_table_cell(t, shortsha, v[i].sha256 ? json_string(v[i].sha256) : NULL);
    cli_table_str(t, v[i].weights_path);
    json_decref(mj);
  }
  if (json) cli_json_print(cli_table_json(t));
  else cli_table_print(t, stdout, "");
  cli_table_free(t);
  em_version_rows_free(v, n);
  return 0;
}

static int model_history(const char *name, const char *registry, bool json) {
  em_store *s = cli_store_open(registry, true);
  if (!s) return 1;
  em_error err = {0};
  em_audit_row *a = NULL;
  int n = 0;
  em_status st = em_store_model_history(s, name, &a, &n, &err);
  em_store_close(s);
  if (st != EM_OK) return cli_fail1(&err, NULL);
  cli_table *t = cli_table_new();
  cli_table_column(t, "TIME", "time", CLI_ALIGN_LEFT);
  cli_table_column(t, "ALIAS", "alias", CLI_ALIGN_LEFT);
  cli_table_column(t, "ACTION", "action", CLI_ALIGN_LEFT);
  cli_table_column(t, "FROM", "from_version", CLI_ALIGN_RIGHT);
  cli_table_column(t, "TO", "to_version", CLI_ALIGN_RIGHT);
  cli_table_column(t, "USER", "user", CLI_ALIGN_LEFT);
  cli_table_column(t, "HOST", "host", CLI_ALIGN_LEFT);
  cli_table_column(t, "DETAIL", "detail", CLI_ALIGN_LEFT);
  for (int i = 0; i < n; i++) {
    cli_table_row(t);
    cli_table_time(t, a[i].time);
    cli_table_str(t, a[i].alias);
    cli_table_str(t, a[i].action);
    if (a[i].from_version) cli_table_int(t, a[i].from_version);
    else cli_table_cell(t, "-", NULL);
    cli_table_int(t, a[i].to_version);
    cli_table_str(t, a[i].user);
    cli_table_str(t, a[i].host);
    cli_table_str(t, a[i].detail ? a[i].detail : "");
  }
  if (json) cli_json_print(cli_table_json(t));
  else if (n == 0) printf("%s: no alias has been moved yet\n", name);
  else cli_table_print(t, stdout, "");
  cli_table_free(t);
  em_audit_rows_free(a, n);
  return 0;
}

/* "90", "90s", "10m", "2h" or "1d" in seconds; < 0 when it is none of them. */
static double parse_duration(const char *text) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || !(v >= 0) || !isfinite(v)) return -1;
  double unit = !*end || !strcmp(end, "s") ? 1 : !strcmp(end, "m") ? 60 : !strcmp(end, "h") ? 3600
              : !strcmp(end, "d")                                   ? 86400
                                                                    : -1;
  return unit < 0 ? -1 : v * unit;
}

/* --if-held: version ran as a canary of name (a "canary-start" row in the
 * audit log, `ember serve --canary`) at least `held` seconds ago, and no
 * rollback of it came after that start. */
static em_status check_held(em_store *s, const char *name, int version, double held,
                            const char *held_text, em_error *err) {
  em_audit_row *rows = NULL;
  int n = 0;
  em_status st = em_store_model_history(s, name, &rows, &n, err);
  if (st != EM_OK) return st;
  const em_audit_row *start = NULL, *broke = NULL;
  for (int i = 0; i < n; i++) {
    if (rows[i].from_version != version) continue;
    if (!strcmp(rows[i].action, "canary-start")) start = &rows[i], broke = NULL;
    else if (start && !strcmp(rows[i].action, "canary-rollback")) broke = &rows[i];
  }
  struct timeval tv;
  gettimeofday(&tv, NULL);
  double now = (double)tv.tv_sec + tv.tv_usec / 1e6, ran = start ? now - start->time : 0;
  char ago[64];
  if (!start)
    st = em_error_set(err, EM_ERR_INVALID, "--if-held: v%d of %s never ran as a canary (ember "
                      "serve %s@ALIAS --canary %d:PCT records its start)", version, name, name,
                      version);
  else if (broke)
    st = em_error_set(err, EM_ERR_INVALID, "--if-held: v%d's canary was rolled back (%s): it did "
                      "not hold its objectives; see 'ember model history %s'", version,
                      broke->detail, name);
  else if (ran < held) {
    cli_format_duration(ran, ago, sizeof ago);
    st = em_error_set(err, EM_ERR_INVALID, "--if-held %s: v%d has run as a canary for %s only",
                      held_text, version, ago);
  }
  em_audit_rows_free(rows, n);
  return st;
}

static int model_move(int argc, char **argv, bool promote) {
  const char *registry = NULL, *alias = NULL, *held_s = NULL, *pos[2];
  bool json = false;
  const cli_opt opts[] = {{"registry", &registry, NULL},
                          {"alias", &alias, NULL},
                          {"if-held", &held_s, NULL},
                          {"json", NULL, &json},
                          {0}};
  const char *what = promote ? "model promote" : "model rollback";
  cli_parse_args(argc, argv, 3, opts, pos, promote ? 2 : 1, promote ? 2 : 1, what);
  if (!alias) cli_die_usage("%s needs --alias ALIAS (e.g. --alias production)", what);
  double held = held_s ? parse_duration(held_s) : 0;
  if (held_s && (!promote || held < 0))
    cli_die_usage(promote ? "--if-held takes a duration (600, 90s, 10m, 2h, 1d), not '%s'"
                          : "--if-held is an option of 'model promote' ('%s')", held_s);
  check_name_or_die(pos[0], alias);
  int version = 0;
  if (promote) { /* 3 or v3: the workbench shows v3 */
    if (!em_version_parse(pos[1], &version))
      cli_die_usage("VERSION: '%s' is not a version (write 3 or v3)", pos[1]);
  }
  em_store *s = cli_store_open(registry, false);
  if (!s) return 1;
  em_error err = {0};
  /* promoting the version the alias already points at changes nothing
   * (and records nothing): say so rather than "promoted" */
  bool same = false;
  if (promote) {
    char ref_text[300];
    em_version_ref ref;
    snprintf(ref_text, sizeof ref_text, "%s@%s", pos[0], alias);
    if (em_store_resolve_version(s, ref_text, &ref, NULL) == EM_OK) {
      same = ref.version == version;
      em_version_ref_clear(&ref);
    }
  }
  em_status st = held_s ? check_held(s, pos[0], version, held, held_s, &err) : EM_OK;
  if (st == EM_OK)
    st = promote ? em_store_model_promote(s, pos[0], version, alias, &err)
                 : em_store_model_rollback(s, pos[0], alias, &version, &err);
  em_store_close(s);
  if (st != EM_OK) return cli_fail1(&err, what);
  if (json) {
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(pos[0]));
    json_object_set_new(o, "alias", json_string(alias));
    json_object_set_new(o, "version", json_integer(version));
    json_object_set_new(o, "changed", json_boolean(!same));
    cli_json_print(o);
  } else if (same) {
    printf("%s: %s already points at v%d: nothing changed\n", pos[0], alias, version);
  } else {
    printf("%s: %s -> v%d%s\n", pos[0], alias, version, promote ? "" : " (rolled back)");
  }
  return 0;
}

int cli_cmd_model(int argc, char **argv) {
  if (argc < 3)
    cli_die_usage("model expects register, versions, promote, rollback or history");
  const char *sub = argv[2];
  if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
    cli_usage_print(stdout);
    return 0;
  }
  if (strcmp(sub, "register") == 0) return model_register(argc, argv);
  if (strcmp(sub, "promote") == 0) return model_move(argc, argv, true);
  if (strcmp(sub, "rollback") == 0) return model_move(argc, argv, false);
  if (strcmp(sub, "versions") == 0 || strcmp(sub, "history") == 0) {
    const char *registry = NULL, *pos[1];
    bool json = false;
    const cli_opt opts[] = {{"registry", &registry, NULL}, {"json", NULL, &json}, {0}};
    char what[32];
    snprintf(what, sizeof what, "model %s", sub);
    cli_parse_args(argc, argv, 3, opts, pos, 1, 1, what);
    return sub[0] == 'v' ? model_versions(pos[0], registry, json)
                         : model_history(pos[0], registry, json);
  }
  cli_die_usage("model: unknown subcommand '%s'; expected register, versions, promote, "
                "rollback or history",
                sub);
}
