/* marker-plugin.c: a plugin whose constructor runs the moment the module
 * is mapped (before any check of its table could refuse it) and appends a
 * line to the file $EMBER_TEST_MARKER: the test's stand-in for code a
 * plugin an attacker planted would run. Built as marker-plugin.plugin (not
 * "*.so", so no folder loads it by itself); tests copy it where they need
 * it. Its table is good: trusted, it loads as plugin "marker". */
#include "em-plugin.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void mark(void) {
  /* $EMBER_TEST_MARKER_SWAP=FROM:TO renames FROM over TO (this very file,
   * say) the moment the module is mapped: the test's stand-in for a file
   * replaced between its load and anything that reads it by path later */
  const char *swap = getenv("EMBER_TEST_MARKER_SWAP");
  const char *colon = swap ? strchr(swap, ':') : NULL;
  if (colon) {
    char from[4096];
    snprintf(from, sizeof from, "%.*s", (int)(colon - swap), swap);
    (void)!rename(from, colon + 1);
  }
  const char *path = getenv("EMBER_TEST_MARKER");
  if (!path || !path[0]) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  static const char line[] = "marker plugin constructor ran\n";
  ssize_t w = write(fd, line, sizeof line - 1);
  (void)w;
  close(fd);
}

static em_status init(em_plugin_host *h, em_error *err) {
  (void)h;
  (void)err;
  return EM_OK;
}

static const em_plugin_table table = {EM_PLUGIN_API_VERSION, "marker", "1.0",
                                      "writes $EMBER_TEST_MARKER when mapped (test)", init};
EM_PLUGIN_EXPORT const em_plugin_table *ember_plugin_entry(void) { return &table; }
