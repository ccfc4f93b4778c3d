/* em-data-dirs.c: the workbench's side of the one resolver of Ember's data
 * folders (the engine's em_data_dir, em-io.h, which the CLI uses too). */
#include "em-data-dirs.h"

#include "em-io.h"

char *em_data_dir_find(const char *kind) {
  g_return_val_if_fail(kind && *kind, NULL);
  char dir[4096];
  return em_data_dir(kind, dir, sizeof dir) ? g_strdup(dir) : NULL;
}
