/* workbench-main.c: `ember-workbench`, the GTK 4 workbench (ui/shell). */
#include "em-application.h"
#include "em-error.h"
#include "plugin-load.h"

/* The engine's warnings (a plugin refused at startup) on stderr. */
static void log_warnings(em_log_level level, const char *msg, void *user) {
  if (level >= EM_LOG_WARNING) g_printerr("ember-workbench: %s\n", msg);
}

int main(int argc, char **argv) {
  em_log_set_handler(log_warnings, NULL);
  argc = app_plugins_load(argc, argv, false); /* plugin layers join the builder's palette */
  EmApplication *app = em_application_new();
  int rc = g_application_run(G_APPLICATION(app), argc, argv);
  g_object_unref(app);
  return rc;
}
