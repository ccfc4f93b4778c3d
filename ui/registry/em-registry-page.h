/* em-registry-page.h: the Registry page: models with their versions and
 * aliases; register a run's checkpoint (best or last) as a new version,
 * promote a version to an alias ("production" by default) and roll an
 * alias back; the model's audit history. Export waits for ONNX export. */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"

G_BEGIN_DECLS

#define EM_TYPE_REGISTRY_PAGE (em_registry_page_get_type())
G_DECLARE_FINAL_TYPE(EmRegistryPage, em_registry_page, EM, REGISTRY_PAGE, GtkBox)

GtkWidget *em_registry_page_new(EmAppState *state);
/* The same, the run list read on a worker thread (the window's: ten
 * thousand runs never hold the main loop); so is every reload on
 * "registry-changed". */
GtkWidget *em_registry_page_new_async(EmAppState *state);
void em_registry_page_reload(EmRegistryPage *self);

/* What the page's buttons do, for tests and the shell (each reports its
 * error in the page's message line and returns FALSE on failure):
 * register run's best (best TRUE) or last checkpoint as a version of
 * model; promote the selected version to alias; roll alias back. */
gboolean em_registry_page_register(EmRegistryPage *self, gint64 run, gboolean best,
                                   const char *model);
gboolean em_registry_page_select_model(EmRegistryPage *self, const char *model);
gboolean em_registry_page_select_version(EmRegistryPage *self, int version);
const char *em_registry_page_get_message(EmRegistryPage *self);

G_END_DECLS
