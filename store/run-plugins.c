/* run-plugins.c: the plugins a run was trained with, as its tags
 * ("plugin.<name>" = "<version> sha256:<hex> <file>"): lineage for
 * `ember run show`, and what `ember train --resume` loads again, only
 * when the file's bytes still have that SHA-256 (app/plugin-load.c).
 * Only the trainer writes them: em_store_run_tag refuses the prefix. */
#include "store-private.h"

#include <stdio.h>
#include <string.h>

#include "em-plugin.h"

em_status em_store_run_tag_plugins(em_store *s, int64_t run, em_error *err) {
  for (int i = 0; i < em_plugin_count(); i++) {
    const em_plugin_info *p = em_plugin_at(i);
    if (!p->loaded) continue;
    char key[128], value[1200];
    snprintf(key, sizeof key, EM_RUN_PLUGIN_TAG "%s", p->name);
    char hex[65];
    em_error e = {0};
    /* the bytes that were checked and loaded: by now the path may name
     * another file (replaced, renamed over) */
    bool hashed = p->fd >= 0 && em_store_fd_sha256(p->fd, p->path, hex, NULL, &e) == EM_OK;
    snprintf(value, sizeof value, "%s%s%s %s", p->version[0] ? p->version : "-",
             hashed ? " sha256:" : "", hashed ? hex : "", p->path);
    em_status st = em_store_run_tag_any(s, run, key, value, err);
    if (st != EM_OK) return st;
  }
  return EM_OK;
}

bool em_run_plugin_parse(const char *value, em_run_plugin *out) {
  memset(out, 0, sizeof *out);
  const char *sp = strchr(value, ' ');
  if (!sp || sp == value) return false;
  snprintf(out->version, sizeof out->version, "%.*s", (int)(sp - value), value);
  const char *rest = sp + 1;
  static const char tag[] = "sha256:";
  size_t hashed = sizeof tag - 1 + 64; /* "sha256:" and 64 hex digits */
  if (strncmp(rest, tag, sizeof tag - 1) == 0 && strlen(rest) >= hashed &&
      (rest[hashed] == ' ' || rest[hashed] == '\0')) {
    memcpy(out->sha256, rest + sizeof tag - 1, 64);
    rest += rest[hashed] ? hashed + 1 : hashed;
  }
  if (!rest[0] || strlen(rest) >= sizeof out->file) return false;
  memcpy(out->file, rest, strlen(rest) + 1);
  return true;
}
