/* plugin-load.h: loading plugins at the start of `ember` and
 * `ember-workbench`, from (in this order; the first plugin to take a name
 * keeps it):
 *   --plugin-dir DIR      (a global option: anywhere on the line, repeatable)
 *   $EMBER_PLUGIN_PATH    (folders separated by ':')
 *   <registry folder>/plugins   ($EMBER_HOME/plugins, else
 *                         $XDG_DATA_HOME/ember/plugins, else
 *                         ~/.local/share/ember/plugins)
 *   <libdir>/ember/plugins      (where `meson install` puts plugins/)
 * A plugin that cannot load is a warning on stderr, never fatal; `ember
 * plugins` lists what loaded and what was refused. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "em-store.h"

/* Takes the global options out of argv (--plugin-dir DIR, and when
 * take_metric --metric NAME, selected once the plugins are in), loads
 * the plugins, and returns the new argc. A bad --metric is a usage error
 * (exit 2). */
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
