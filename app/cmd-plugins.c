/* cmd-plugins.c: `ember plugins [--json]`: the plugins that loaded, with
 * the layer types, dataset kinds and metrics each registered, the ones
 * refused and why, and the folders searched. Loading itself happens at
 * startup (plugin-load.c). */
#include <glib.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cli-table.h"
#include "em-plugin.h"

static json_t *names_json(int n, const char *const *names) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, cli_json_text(names[i]));
  return a;
}

static void print_names(const char *what, int n, const char *const *names) {
  if (!n) return;
  printf("  %-9s", what);
  for (int i = 0; i < n; i++) printf("%s%s", i ? ", " : "", names[i]);
  printf("\n");
}

static int print_json(void) {
  json_t *o = json_object(), *loaded = json_array(), *refused = json_array(), *dirs = json_array();
  for (int i = 0; i < em_plugin_count(); i++) {
    const em_plugin_info *p = em_plugin_at(i);
    json_t *e = json_object();
    json_object_set_new(e, "path", cli_json_text(p->path));
    if (p->loaded) {
      json_object_set_new(e, "name", cli_json_text(p->name));
      json_object_set_new(e, "version", cli_json_text(p->version));
      json_object_set_new(e, "description", cli_json_text(p->description));
      json_object_set_new(e, "layers", names_json(p->n_layers, p->layers));
      json_object_set_new(e, "datasets", names_json(p->n_datasets, p->datasets));
      json_object_set_new(e, "metrics", names_json(p->n_metrics, p->metrics));
      json_array_append_new(loaded, e);
    } else {
      json_object_set_new(e, "name", p->name[0] ? cli_json_text(p->name) : json_null());
      json_object_set_new(e, "reason", cli_json_text(p->reason));
      json_array_append_new(refused, e);
    }
  }
  for (int i = 0; i < em_plugin_dir_count(); i++) {
    const char *origin;
    bool exists;
    const char *d = em_plugin_dir_at(i, &origin, &exists);
    json_t *e = json_object();
    json_object_set_new(e, "path", cli_json_text(d));
    json_object_set_new(e, "origin", cli_json_text(origin));
    json_object_set_new(e, "exists", json_boolean(exists));
    json_array_append_new(dirs, e);
  }
  json_object_set_new(o, "api_version", json_integer(EM_PLUGIN_API_VERSION));
  json_object_set_new(o, "plugins", loaded);
  json_object_set_new(o, "refused", refused);
  json_object_set_new(o, "folders", dirs);
  char *txt = json_dumps(o, JSON_INDENT(2));
  json_decref(o);
  if (!txt) return 1;
  puts(txt);
  free(txt);
  return 0;
}

int cli_cmd_plugins(int argc, char **argv) {
  bool json = false;
  const cli_opt opts[] = {{"json", NULL, &json}, {0}};
  cli_parse_args(argc, argv, 2, opts, NULL, 0, 0, "plugins");
  if (json) return print_json();
  int loaded = 0;
  for (int i = 0; i < em_plugin_count(); i++) {
    const em_plugin_info *p = em_plugin_at(i);
    if (!p->loaded) {
      continue;
    }
    loaded++;
    printf("%s %s: %s\n", p->name, p->version, p->description);
    printf("  %-9s%s\n", "file", p->path);
    print_names("layers", p->n_layers, p->layers);
    print_names("datasets", p->n_datasets, p->datasets);
    print_names("metrics", p->n_metrics, p->metrics);
  }
  if (!loaded) printf("no plugins loaded\n");
  for (int i = 0; i < em_plugin_count(); i++) {
    const em_plugin_info *p = em_plugin_at(i);
    if (!p->loaded) printf("refused %s: %s\n", p->path, p->reason);
  }
  printf("plugin API version %d; folders searched:\n", EM_PLUGIN_API_VERSION);
  for (int i = 0; i < em_plugin_dir_count(); i++) {
    const char *origin;
    bool exists;
    const char *d = em_plugin_dir_at(i, &origin, &exists);
    printf("  %s (%s%s)\n", d, origin, exists ? "" : ", missing");
  }
  return 0;
}
