/* em-data-dirs.c: the one resolver of the workbench's data folders. */
#include "em-data-dirs.h"

#include "em-core-config.h"

static gboolean is_dir(const char *d) { return d && g_file_test(d, G_FILE_TEST_IS_DIR); }

char *em_data_dir_find(const char *kind) {
  g_return_val_if_fail(kind && *kind, NULL);
  const char *src = g_getenv("EMBER_SOURCE_ROOT");
  char *d = src && *src ? g_build_filename(src, "data", kind, NULL) : NULL;
  if (is_dir(d)) return d;
  g_free(d);
  d = g_build_filename(EM_SOURCE_DATA_DIR, kind, NULL);
  if (is_dir(d)) return d;
  g_free(d);
  d = g_build_filename(EM_INSTALLED_DATA_DIR, kind, NULL);
  if (is_dir(d)) return d;
  g_free(d);
  for (const char *const *dirs = g_get_system_data_dirs(); *dirs; dirs++) {
    d = g_build_filename(*dirs, "ember", kind, NULL);
    if (is_dir(d)) return d;
    g_free(d);
  }
  return NULL;
}
