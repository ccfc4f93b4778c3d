/* em-devices.h: the devices the workbench offers for training, as the
 * engine reports them (em-device.h): the CPU, one entry per CUDA device
 * (em_device_count, em_device_info_get: name, compute capability,
 * memory), and the reference device when it is asked for.
 *
 * The reference device is the device code path run on the host: slow,
 * meant for tests. It is offered only when EMBER_WORKBENCH_REF_DEVICE is
 * set to a non-empty value other than "0", or when the person asked for
 * it (ember-workbench --device ref); a person choosing a training device
 * never meets it by mistake.
 *
 * Plain data, no widgets: the Train page's selector and the Memory page's
 * devices list share it. */
#pragma once

#include <glib.h>

#include "em-device.h"

G_BEGIN_DECLS

typedef struct {
  em_device device;
  char id[16];          /* "cpu", "cuda:0", "ref:0" (em_device_str) */
  char label[224];      /* for a selector: "cuda:0 · NVIDIA H200 · 139.8 GiB" */
  gboolean info_ok;     /* info was read (em_device_info_get) */
  em_device_info info;
  char info_error[256]; /* why not, when !info_ok */
} EmDeviceEntry;

/* Whether the reference device is offered by default (the environment
 * variable above). */
gboolean em_devices_show_ref(void);
/* The entries, CPU first, then CUDA devices, then (with_ref) reference
 * devices; a GArray of EmDeviceEntry (g_array_unref). Reads each device's
 * info now (the driver's free memory). */
GArray *em_devices_list(gboolean with_ref);
/* Re-reads e's info (free memory changes while training). */
void em_devices_refresh(EmDeviceEntry *e);
/* Why no CUDA device is offered, in em_device_check's words ("this build
 * has no CUDA backend (meson -Dcuda=enabled)", "no CUDA device is
 * present"); NULL when at least one is (g_free). */
char *em_devices_cuda_note(void);
/* "1.5 GiB": g_format_size with IEC units (g_free). */
char *em_devices_format_bytes(gint64 bytes);
/* "cuda:0 · NVIDIA H200", "ref:0 · reference device (host memory)",
 * "CPU": what a chart or a line names a device by (g_free). */
char *em_devices_display_name(em_device d);

G_END_DECLS
