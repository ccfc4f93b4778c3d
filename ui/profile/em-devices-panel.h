/* em-devices-panel.h: the devices list of the Memory page: each device
 * the workbench can train on (em-devices.h: the CPU, every CUDA device,
 * the reference device when offered) with its name, compute capability
 * and total / free memory, and for the device of the current (or last)
 * run its allocator's allocated / reserved / peak bytes. Without a CUDA
 * device a line says why, in the engine's words ("this build has no CUDA
 * backend (meson -Dcuda=enabled)", "no CUDA device is present").
 *
 * Refreshed when a run starts or ends, when the chosen device changes,
 * at most once a second while a run reports progress and the panel is on
 * screen, and on Refresh. */
#pragma once

#include <gtk/gtk.h>

#include "em-app-state.h"

G_BEGIN_DECLS

#define EM_TYPE_DEVICES_PANEL (em_devices_panel_get_type())
G_DECLARE_FINAL_TYPE(EmDevicesPanel, em_devices_panel, EM, DEVICES_PANEL, GtkBox)

/* state may be NULL: the devices without a run. */
GtkWidget *em_devices_panel_new(EmAppState *state);
/* Re-reads the devices, their free memory and the run device's stats. */
void em_devices_panel_refresh(EmDevicesPanel *self);
guint em_devices_panel_get_n_devices(EmDevicesPanel *self);
/* The id of device i ("cpu", "cuda:0", "ref:0"); NULL past the end. */
const char *em_devices_panel_get_id(EmDevicesPanel *self, guint i);
/* The lines shown for device i, joined by newlines (g_free); NULL past
 * the end. */
char *em_devices_panel_get_text(EmDevicesPanel *self, guint i);
/* Why no CUDA device is listed; NULL when one is. */
const char *em_devices_panel_get_note(EmDevicesPanel *self);

G_END_DECLS
