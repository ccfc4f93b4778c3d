/* em-text-row.h: a read-only table row as a small GObject: an id and the
 * texts of its cells, for the Registry page's models, versions and
 * history tables. */
#pragma once

#include <glib-object.h>

G_BEGIN_DECLS

#define EM_TYPE_TEXT_ROW (em_text_row_get_type())
G_DECLARE_FINAL_TYPE(EmTextRow, em_text_row, EM, TEXT_ROW, GObject)

/* Takes cells (a NULL-terminated string array). */
EmTextRow *em_text_row_new(gint64 id, char **cells);
gint64 em_text_row_get_id(EmTextRow *self);
const char *em_text_row_get_cell(EmTextRow *self, int i); /* "" past the end */

G_END_DECLS
