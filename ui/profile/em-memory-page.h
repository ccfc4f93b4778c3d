/* em-memory-page.h: the Memory page: allocated, reserved and peak bytes
 * over the steps of the running training (from "run-progress": the
 * allocator of the run's device, which the chart's title and the figures
 * name: "Memory (cuda:0 · NVIDIA H200)"), that allocator's summary
 * (em_memory_summary), the devices list (em-devices-panel.h) and a leak
 * warning when em_leak_check suspects a steady climb (checked every few
 * seconds while training). Before a run it shows the device chosen for
 * the next one. */
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
/* The device shown: "CPU", "cuda:0 · NVIDIA H200", "ref:0 · ...". */
const char *em_memory_page_get_device_name(EmMemoryPage *self);
/* The line of the latest figures, and the allocator's summary. */
const char *em_memory_page_get_now_text(EmMemoryPage *self);
const char *em_memory_page_get_summary(EmMemoryPage *self);
/* The EmDevicesPanel (em-devices-panel.h). */
GtkWidget *em_memory_page_get_devices_panel(EmMemoryPage *self);

G_END_DECLS
