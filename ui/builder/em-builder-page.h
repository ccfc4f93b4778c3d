/* em-builder-page.h: the model builder: a palette of the registered layer
 * types, the model's nodes as a list a person adds to, removes from,
 * reorders and configures (a property editor and an inputs editor for
 * residual merges), live shape inference with parameters, FLOPs and
 * activation memory per node, a pre-flight memory estimate for a batch,
 * inline errors at the offending node, open/save and the model zoo.
 *
 * Actions (group "builder"): add(s type), remove, move-up, move-down,
 * open, save, save-as, undo, redo (Ctrl+O, Ctrl+S, Ctrl+Shift+S,
 * Ctrl+Z, Ctrl+Shift+Z or Ctrl+Y). Every valid edit calls
 * em_app_state_set_spec. The document (em-model-doc.h) knows whether it
 * differs from its file (a dot after the title), keeps the undo history
 * and a recovery copy of unsaved changes; opening another model asks to
 * save them first. */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"

G_BEGIN_DECLS

#define EM_TYPE_BUILDER_PAGE (em_builder_page_get_type())
G_DECLARE_FINAL_TYPE(EmBuilderPage, em_builder_page, EM, BUILDER_PAGE, GtkBox)

GtkWidget *em_builder_page_new(EmAppState *state);
/* Loads a spec file into the builder (even an invalid one: its error is
 * shown at its node). FALSE with error when it cannot be read or is not
 * a JSON object with a "nodes" list. */
gboolean em_builder_page_open(EmBuilderPage *self, GFile *file, GError **error);
/* The document being edited, as JSON text (g_free). */
char *em_builder_page_dup_json(EmBuilderPage *self);
/* The error of the current document (NULL: valid) and the node it names
 * (NULL: none). */
const char *em_builder_page_get_error(EmBuilderPage *self);
const char *em_builder_page_get_error_node(EmBuilderPage *self);
/* The selected node's name (NULL: none); selects a node by name. */
const char *em_builder_page_get_selected(EmBuilderPage *self);
gboolean em_builder_page_select(EmBuilderPage *self, const char *name);
/* TRUE when the model differs from its file (or was never saved). */
gboolean em_builder_page_is_modified(EmBuilderPage *self);
/* What goes on once the person has chosen (saved or discarded). */
typedef void (*EmBuilderProceed)(EmBuilderPage *page, gpointer data);
/* Calls fn(page, data) now when the model has no unsaved changes;
 * otherwise asks "Save the changes to model X before <doing>?" with
 * Cancel, Discard and Save (Save As for an untitled model) and calls fn
 * after Discard or a successful save, never after Cancel. destroy (may be
 * NULL) frees data either way. */
void em_builder_page_confirm_discard(EmBuilderPage *self, const char *doing, EmBuilderProceed fn,
                                     gpointer data, GDestroyNotify destroy);
/* TRUE while the selected layer's profile figures are being gathered. */
gboolean em_builder_page_is_busy(EmBuilderPage *self);

G_END_DECLS
