/* run-plugins.c: the plugins a run was trained with, as its tags
 * ("plugin.<name>" = "<version> <file>"): lineage for `ember run show`,
 * and what `ember train --resume` loads again (app/plugin-load.c). */
#include "store-private.h"

#include <stdio.h>

#include "em-plugin.h"

em_status em_store_run_tag_plugins(em_store *s, int64_t run, em_error *err) {
  for (int i = 0; i < em_plugin_count(); i++) {
    const em_plugin_info *p = em_plugin_at(i);
    if (!p->loaded) continue;
    char key[128], value[1100];
    snprintf(key, sizeof key, EM_RUN_PLUGIN_TAG "%s", p->name);
    snprintf(value, sizeof value, "%s %s", p->version[0] ? p->version : "-", p->path);
    em_status st = em_store_run_tag(s, run, key, value, err);
    if (st != EM_OK) return st;
  }
  return EM_OK;
}
