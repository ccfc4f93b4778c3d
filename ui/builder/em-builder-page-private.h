/* em-builder-page-private.h: what the files of the model builder share
 * (house style 2): the page's fields and the functions one file gives the
 * others. em-builder-page.c holds the document, its rows and the actions
 * on nodes; em-builder-editor.c the property and inputs editors;
 * em-builder-files.c open, save and the model zoo; em-builder-palette.c
 * the palette; em-builder-profile.c the selected layer's profile figures. */
#pragma once

#include <jansson.h>

#include "em-builder-page.h"
#include "em-model-doc.h"
#include "em-nn.h"

struct _EmBuilderPage {
  GtkBox parent_instance;
  GtkListBox *palette_list, *node_list;
  GtkDropDown *zoo_dropdown;
  GtkLabel *title_label, *totals_label, *estimate_label, *profile_label;
  GtkBox *header_box, *inputs_box;
  GtkGrid *props_grid;
  GtkSpinButton *batch_spin;

  EmAppState *state;
  json_t *doc;          /* the spec being edited */
  em_spec *spec;        /* its parse, NULL when invalid */
  em_spec *prefix;      /* invalid: the parse of the nodes before the one in error (or NULL) */
  char *path;           /* file it came from / was saved to */
  char *original;       /* the text it was read from or saved as: written
                           back byte for byte while doc still holds it */
  char *error, *error_node;
  int selected;         /* node index, -1: none */
  gboolean loading;     /* filling editors: ignore their signals */
  gboolean disposed;
  char *published;      /* the JSON last given to the app state */
  GCancellable *profile_cancel;
  int palette_types;    /* registered types when the palette was filled */
  gboolean profile_pending;
  char **zoo_paths;     /* index i+1 of the dropdown */
  GtkFileChooserNative *chooser;
  EmModelDoc *mdoc;       /* path, modified, undo/redo, recovery (em-builder-document.c) */
  GtkWidget *recovery_bar; /* offers a copy a crashed session left, or NULL */
  char *recovery_file;    /* that copy */
  void *pending_close;    /* what a "Save" answer goes on to once Save As has saved */
};

static inline json_t *em_builder_nodes(EmBuilderPage *self) { return json_object_get(self->doc, "nodes"); }
static inline int em_builder_n_nodes(EmBuilderPage *self) { return (int)json_array_size(em_builder_nodes(self)); }
static inline json_t *em_builder_node_at(EmBuilderPage *self, int i) { return json_array_get(em_builder_nodes(self), (size_t)i); }
static inline const char *em_builder_node_name(EmBuilderPage *self, int i) {
  return json_string_value(json_object_get(em_builder_node_at(self, i), "name"));
}

/* em-builder-page.c */
void em_builder_reparse(EmBuilderPage *self); /* parses the document; publishes it if valid */
void em_builder_refresh(EmBuilderPage *self, gboolean rebuild_editor);
void em_builder_add_layer(EmBuilderPage *self, const char *type_name);
/* em-builder-document.c */
char *em_builder_doc_text(EmBuilderPage *self);   /* the document as noted (g_free) */
void em_builder_doc_loaded(EmBuilderPage *self);  /* a new document: the history restarts */
void em_builder_doc_sync_actions(EmBuilderPage *self);
void em_builder_doc_after_save(EmBuilderPage *self, gboolean saved);
void em_builder_doc_offer_recovery(EmBuilderPage *self, GtkBox *column);
void em_builder_act_undo(GtkWidget *w, const char *n, GVariant *p);
void em_builder_act_redo(GtkWidget *w, const char *n, GVariant *p);
/* em-builder-editor.c */
void em_builder_fill_editor(EmBuilderPage *self);
/* em-builder-files.c */
void em_builder_show_error(EmBuilderPage *self, const char *msg);
void em_builder_take_batch(EmBuilderPage *self);
void em_builder_fill_zoo(EmBuilderPage *self);
void em_builder_on_zoo_selected(GtkDropDown *dd, GParamSpec *ps, EmBuilderPage *self);
void em_builder_act_open(GtkWidget *w, const char *n, GVariant *p);
void em_builder_act_save(GtkWidget *w, const char *n, GVariant *p);
void em_builder_act_save_as(GtkWidget *w, const char *n, GVariant *p);
/* Saves to the document's file: FALSE when it has none or the write
 * failed (the error is shown on the page). */
gboolean em_builder_save_now(EmBuilderPage *self);
/* em-builder-palette.c */
void em_builder_fill_palette(EmBuilderPage *self);
void em_builder_on_palette_activated(GtkListBox *box, GtkListBoxRow *row, EmBuilderPage *self);
/* em-builder-profile.c */
void em_builder_fill_profile(EmBuilderPage *self);
