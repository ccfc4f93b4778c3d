/* data-dirs.c: where Ember's data folders are (em-io.h: em_data_dir): the
 * model zoo ("models") for the workbench's pages and for a spec named by
 * its zoo name on the command line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/em-data-dirs-config.h" /* generated: build/engine/io */
#include "em-io.h"

static bool try_dir(char *out, size_t n, const char *a, const char *b, const char *kind) {
  if (!a || !*a) return false;
  int k = snprintf(out, n, "%s%s/%s", a, b, kind);
  struct stat sb;
  return k > 0 && (size_t)k < n && stat(out, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool em_data_dir(const char *kind, char *out, size_t n) {
  if (!kind || !*kind || !out || n == 0) return false;
  if (try_dir(out, n, getenv("EMBER_SOURCE_ROOT"), "/data", kind) ||
      try_dir(out, n, EM_SOURCE_DATA_DIR, "", kind) ||
      try_dir(out, n, EM_INSTALLED_DATA_DIR, "", kind))
    return true;
  const char *xdg = getenv("XDG_DATA_DIRS");
  if (!xdg || !*xdg) xdg = "/usr/local/share:/usr/share"; /* the XDG default */
  for (const char *p = xdg; *p;) {
    size_t k = strcspn(p, ":");
    char dir[1024];
    if (k && k < sizeof dir) {
      memcpy(dir, p, k);
      dir[k] = '\0';
      if (try_dir(out, n, dir, "/ember", kind)) return true;
    }
    p += k;
    if (*p == ':') p++;
  }
  out[0] = '\0';
  return false;
}
