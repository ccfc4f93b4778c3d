/* em-text-row.c: see the header. */
#include "em-text-row.h"

struct _EmTextRow {
  GObject parent_instance;
  gint64 id;
  char **cells;
  int n;
};

G_DEFINE_FINAL_TYPE(EmTextRow, em_text_row, G_TYPE_OBJECT)

static void em_text_row_finalize(GObject *object) {
  g_strfreev(EM_TEXT_ROW(object)->cells);
  G_OBJECT_CLASS(em_text_row_parent_class)->finalize(object);
}

static void em_text_row_class_init(EmTextRowClass *klass) {
  G_OBJECT_CLASS(klass)->finalize = em_text_row_finalize;
}

static void em_text_row_init(EmTextRow *self) {
  (void)self;
}

EmTextRow *em_text_row_new(gint64 id, char **cells) {
  EmTextRow *self = g_object_new(EM_TYPE_TEXT_ROW, NULL);
  self->id = id;
  self->cells = cells;
  self->n = cells ? (int)g_strv_length(cells) : 0;
  return self;
}

gint64 em_text_row_get_id(EmTextRow *self) {
  return self->id;
}

const char *em_text_row_get_cell(EmTextRow *self, int i) {
  return i >= 0 && i < self->n ? self->cells[i] : "";
}
