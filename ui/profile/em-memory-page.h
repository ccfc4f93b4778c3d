/* em-memory-page.h: the Memory page: allocated, reserved and peak bytes
 * over the steps of the running training (from "run-progress"), the
 * allocator's summary (em_memory_summary) and a leak warning when
 * em_leak_check suspects a steady climb (checked every few seconds while
 * training). */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"

G_BEGIN_DECLS

#define EM_TYPE_MEMORY_PAGE (em_memory_page_get_type())
G_DECLARE_FINAL_TYPE(EmMemoryPage, em_memory_page, EM, MEMORY_PAGE, GtkBox)

GtkWidget *em_memory_page_new(EmAppState *state);
/* Points plotted per series (allocated, reserved, peak: all the same). */
gint64 em_memory_page_get_n_points(EmMemoryPage *self);
/* The latest allocated/peak bytes shown. */
gint64 em_memory_page_get_last_allocated(EmMemoryPage *self);
gint64 em_memory_page_get_last_peak(EmMemoryPage *self);
/* Refreshes the summary and runs the leak check now. */
void em_memory_page_refresh(EmMemoryPage *self);
const char *em_memory_page_get_warning(EmMemoryPage *self); /* NULL: none */

G_END_DECLS
