/* plugin-load.c: the plugin folders of a program and loading them at
 * startup (see plugin-load.h). */
#include "plugin-load.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-plugin.h"
#include "em-store.h"

#define MAX_FLAG_VALUES 32

/* Removes argv[i] (and n - 1 values after it), keeping argv NULL-ended. */
static int take(int argc, char **argv, int i, int n) {
  memmove(&argv[i], &argv[i + n], (size_t)(argc - i - n + 1) * sizeof *argv);
  return argc - n;
}

/* "--flag VALUE" or "--flag=VALUE" at argv[i]: the value, and how many
 * words it took; NULL when argv[i] is another word. */
static const char *flag_value(int argc, char **argv, int i, const char *flag, int *words) {
  size_t n = strlen(flag);
  if (strncmp(argv[i], flag, n) != 0) return NULL;
  if (argv[i][n] == '=') {
    *words = 1;
    return argv[i] + n + 1;
  }
  if (argv[i][n] != 0) return NULL;
  if (i + 1 >= argc) {
    fprintf(stderr, "ember: %s needs a value\n", flag);
    exit(2);
  }
  *words = 2;
  return argv[i + 1];
}

/* The loaded plugin called name, or NULL. */
static const em_plugin_info *plugin_loaded(const char *name) {
  for (int i = 0; i < em_plugin_count(); i++)
    if (em_plugin_at(i)->loaded && !strcmp(em_plugin_at(i)->name, name)) return em_plugin_at(i);
  return NULL;
}

/* A plugin the run recorded, loaded here from a folder the user named:
 * says so when it is not the file the run was trained with (its SHA-256
 * differs). That is the user's own choice of plugin, so it loads. */
static void check_same_file(int64_t run, const char *name, const em_run_plugin *rec,
                            const char *path) {
  char hex[65];
  em_error err = {0};
  if (!rec->sha256[0] || em_store_file_sha256(path, hex, NULL, &err) != EM_OK) return;
  if (strcmp(hex, rec->sha256) != 0)
    fprintf(stderr, "ember: warning: plugin %s (%s) is not the file run %lld was trained with "
            "(SHA-256 %.12s..., recorded %.12s... for %s): the resumed run may differ from "
            "one that never stopped\n", name, path, (long long)run, hex, rec->sha256, rec->file);
}

/* The check em_plugin_load_file_verified runs before the module is mapped:
 * the bytes of the very descriptor it will load have the recorded SHA-256. */
static em_status same_bytes(int fd, const char *path, void *user, em_error *err) {
  const em_run_plugin *rec = user;
  char hex[65];
  em_status st = em_store_fd_sha256(fd, path, hex, NULL, err);
  if (st != EM_OK) return st;
  if (strcmp(hex, rec->sha256) != 0)
    return em_error_set(err, EM_ERR_INVALID, "its SHA-256 is %.12s..., not the %.12s... the run "
                        "recorded: it is not the file the run was trained with", hex,
                        rec->sha256);
  return EM_OK;
}

em_status app_plugins_restore(em_store *s, int64_t run, em_error *out) {
  em_run_annotation *a = NULL;
  int n = 0;
  em_error err = {0};
  if (em_store_run_annotations(s, run, &a, &n, &err) != EM_OK) return EM_OK;
  em_status st = EM_OK;
  for (int i = 0; i < n && st == EM_OK; i++) {
    em_run_plugin rec;
    if (strcmp(a[i].kind, "tag") != 0 || !a[i].key ||
        strncmp(a[i].key, EM_RUN_PLUGIN_TAG, strlen(EM_RUN_PLUGIN_TAG)) != 0)
      continue;
    app_plugins_load_now(); /* the user's own folders first: their copy wins */
    const char *name = a[i].key + strlen(EM_RUN_PLUGIN_TAG);
    bool parsed = em_run_plugin_parse(a[i].text, &rec);
    const em_plugin_info *have = parsed ? plugin_loaded(name) : NULL;
    if (have) { /* from --plugin-dir, EMBER_PLUGIN_PATH or the user's own folders */
      check_same_file(run, name, &rec, have->path);
      continue;
    }
    /* A tag names a file anyone who can write the registry (a shared
     * folder given with --registry) could have chosen: it is loaded only
     * when its bytes are the ones recorded, checked before it is mapped. */
    const char *why = NULL;
    if (!parsed) why = "its tag names no file";
    else if (!rec.sha256[0]) why = "its tag records no SHA-256 to check the file against";
    else if (em_plugin_load_file_verified(rec.file, same_bytes, &rec, &err) != EM_OK)
      why = err.msg;
    else if (!plugin_loaded(name))
      why = "that file is a plugin of another name";
    if (!why) {
      fprintf(stderr, "ember: plugin %s loaded from %s, as run %lld recorded (SHA-256 "
              "checked)\n", name, rec.file, (long long)run);
    } else {
      st = em_error_set(out, EM_ERR_INVALID,
                        "run %lld was trained with plugin %s from %s, which is not loaded: %s. "
                        "Nothing was changed; if you trust a copy of that plugin, give its "
                        "folder with --plugin-dir (or EMBER_PLUGIN_PATH)",
                        (long long)run, name, parsed ? rec.file : a[i].text, why);
    }
    em_error_clear(&err);
  }
  em_run_annotations_free(a, n);
  return st;
}

json_t *app_metrics_json(void) {
  em_metric_value v[EM_EVAL_MAX_METRICS];
  int n = em_metrics_last(v, EM_EVAL_MAX_METRICS, NULL);
  json_t *o = json_object();
  for (int i = 0; i < n; i++) /* JSON has no NaN: null */
    json_object_set_new(o, v[i].name, isfinite(v[i].value) ? json_real(v[i].value) : json_null());
  return o;
}

const char *app_metrics_text(char *buf, size_t n) {
  em_metric_value v[EM_EVAL_MAX_METRICS];
  int k = em_metrics_last(v, EM_EVAL_MAX_METRICS, NULL);
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < k && len < n; i++) {
    int w = snprintf(buf + len, n - len, ", %s %.4f", v[i].name, v[i].value);
    if (w > 0) len += (size_t)w;
  }
  return buf;
}

/* The global options, kept for when plugins are loaded. */
static const char *opt_dirs[MAX_FLAG_VALUES], *opt_metrics[MAX_FLAG_VALUES];
static int n_opt_dirs, n_opt_metrics;

int app_plugin_options(int argc, char **argv, bool take_metric) {
  for (int i = 1; i < argc;) {
    int words = 0;
    const char *v;
    if (!strcmp(argv[i], "--")) break;
    if ((v = flag_value(argc, argv, i, "--plugin-dir", &words)) && n_opt_dirs < MAX_FLAG_VALUES)
      opt_dirs[n_opt_dirs++] = v;
    else if (take_metric && (v = flag_value(argc, argv, i, "--metric", &words)) &&
             n_opt_metrics < MAX_FLAG_VALUES)
      opt_metrics[n_opt_metrics++] = v;
    if (words) argc = take(argc, argv, i, words);
    else i++;
  }
  em_plugin_set_loader(app_plugins_load_now); /* a name not built in loads them */
  return argc;
}

void app_plugins_load_now(void) {
  static bool started; /* once; and a lookup during the load does not start it again */
  if (started) return;
  started = true;
  for (int i = 0; i < n_opt_dirs; i++) em_plugins_load_dir(opt_dirs[i], "--plugin-dir");
  const char *path = getenv("EMBER_PLUGIN_PATH");
  if (path && path[0]) {
    char *copy = strdup(path), *save = NULL;
    for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d; d = strtok_r(NULL, ":", &save))
      em_plugins_load_dir(d, "EMBER_PLUGIN_PATH");
    free(copy);
  }
  char home[4096], dir[4200];
  em_error err = {0};
  if (em_store_default_dir(home, sizeof home, &err) == EM_OK) {
    snprintf(dir, sizeof dir, "%s/plugins", home);
    em_plugins_load_dir(dir, "default");
  }
#ifdef EMBER_PLUGIN_INSTALL_DIR
  em_plugins_load_dir(EMBER_PLUGIN_INSTALL_DIR, "installed");
#endif
}

void app_plugins_select_metrics(void) {
  em_error err = {0};
  for (int i = 0; i < n_opt_metrics; i++) /* a plugin's: the lookup loads them */
    if (em_metrics_select(opt_metrics[i], &err) != EM_OK) {
      fprintf(stderr, "ember: --metric: %s\n", err.msg);
      exit(2);
    }
}

int app_plugins_load(int argc, char **argv, bool take_metric) {
  argc = app_plugin_options(argc, argv, take_metric);
  app_plugins_load_now();
  app_plugins_select_metrics();
  return argc;
}
