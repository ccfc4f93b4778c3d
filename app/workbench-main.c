/* workbench-main.c: `ember-workbench`, the GTK 4 workbench (ui/shell). */
#include "em-application.h"

int main(int argc, char **argv) {
  EmApplication *app = em_application_new();
  int rc = g_application_run(G_APPLICATION(app), argc, argv);
  g_object_unref(app);
  return rc;
}
