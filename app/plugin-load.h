/* plugin-load.h: loading plugins for `ember` and `ember-workbench`, from
 * (in this order; the first plugin to take a name keeps it):
 *   --plugin-dir DIR      (a global option: anywhere on the line, repeatable)
 *   $EMBER_PLUGIN_PATH    (folders separated by ':')
 *   <registry folder>/plugins   ($EMBER_HOME/plugins, else
 *                         $XDG_DATA_HOME/ember/plugins, else
 *                         ~/.local/share/ember/plugins: the default
 *                         registry's, never that of --registry)
 *   <libdir>/ember/plugins      (where `meson install` puts plugins/)
 * Only files the host trusts load (em-plugin.h: owned by the user or
 * root, not writable by others). A plugin that cannot load is a warning
 * on stderr, never fatal; `ember plugins` lists what loaded and what was
 * refused.
 *
 * When: `ember` loads them before a command that needs them all (train,
 * plugins: its command table says), and for any other command only when
 * something names a layer type, dataset kind or metric that is not built
 * in (em_plugin_set_loader), so that `ember runs` and the like run no
 * plugin code. The workbench loads them at start (its palette). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "em-store.h"

/* Takes the global options out of argv (--plugin-dir DIR, and when
 * take_metric --metric NAME), keeps them for the load, installs the load
 * to run on the first lookup of a name not built in, and returns the new
 * argc. Loads nothing. */
int app_plugin_options(int argc, char **argv, bool take_metric);
/* Loads the plugins of the folders above (once; later calls do nothing). */
void app_plugins_load_now(void);
/* Selects the --metric names (plugins' metrics: loads the plugins then);
 * an unknown one is a usage error (exit 2). */
void app_plugins_select_metrics(void);
/* All three: options, load, metrics (the workbench). */
int app_plugins_load(int argc, char **argv, bool take_metric);

/* Loads the plugins a run recorded (em_store_run_tag_plugins) that are
 * not loaded here (by name), so `ember train --resume` needs no
 * --plugin-dir. A recorded file is loaded only when its bytes have the
 * SHA-256 the tag recorded (checked on the descriptor it is then loaded
 * from) and it passes the host's owner and mode checks; else an error
 * (what to do: --plugin-dir), and the caller stops (exit 1). One loaded
 * from the user's folders is kept, with a warning when its hash differs. */
em_status app_plugins_restore(em_store *s, int64_t run, em_error *err);

/* The plugin metrics of the latest evaluation as {"macro_f1": 0.91, ...}
 * (empty when none were asked for), for a command's JSON. */
json_t *app_metrics_json(void);
/* The same as ", macro_f1 0.9100" (or "") into buf. */
const char *app_metrics_text(char *buf, size_t n);
