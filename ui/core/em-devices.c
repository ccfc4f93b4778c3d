/* em-devices.c: the devices the workbench offers (see the header). */
#include "em-devices.h"

#include <stdio.h>
#include <string.h>

gboolean em_devices_show_ref(void) {
  const char *v = g_getenv("EMBER_WORKBENCH_REF_DEVICE");
  return v && v[0] && strcmp(v, "0") != 0;
}

char *em_devices_format_bytes(gint64 bytes) {
  return g_format_size_full(bytes < 0 ? 0 : (guint64)bytes, G_FORMAT_SIZE_IEC_UNITS);
}

static void make_label(EmDeviceEntry *e) {
  if (e->device.kind == EM_DEVICE_CPU) {
    g_strlcpy(e->label, "CPU", sizeof e->label);
  } else if (e->device.kind == EM_DEVICE_REF) {
    g_snprintf(e->label, sizeof e->label, "Reference device (%s) · slow, for tests", e->id);
  } else if (e->info_ok) {
    char *total = em_devices_format_bytes(e->info.total_bytes);
    g_snprintf(e->label, sizeof e->label, "%s · %s · %s", e->id, e->info.name, total);
    g_free(total);
  } else {
    g_snprintf(e->label, sizeof e->label, "%s", e->id);
  }
}

void em_devices_refresh(EmDeviceEntry *e) {
  em_error err = {0};
  e->info_error[0] = '\0';
  e->info_ok = em_device_info_get(e->device, &e->info, &err) == EM_OK;
  if (!e->info_ok) g_strlcpy(e->info_error, err.msg, sizeof e->info_error);
}

static void add(GArray *out, em_device d) {
  EmDeviceEntry e;
  memset(&e, 0, sizeof e);
  e.device = d;
  em_device_str(d, e.id, sizeof e.id);
  em_devices_refresh(&e);
  make_label(&e);
  g_array_append_val(out, e);
}

GArray *em_devices_list(gboolean with_ref) {
  GArray *out = g_array_new(FALSE, TRUE, sizeof(EmDeviceEntry));
  add(out, em_device_cpu());
  int n = em_device_count(EM_DEVICE_CUDA);
  for (int i = 0; i < n && i < 256; i++) add(out, (em_device){EM_DEVICE_CUDA, (uint8_t)i});
  if (with_ref) {
    n = em_device_count(EM_DEVICE_REF);
    for (int i = 0; i < n && i < 256; i++) add(out, (em_device){EM_DEVICE_REF, (uint8_t)i});
  }
  return out;
}

char *em_devices_cuda_note(void) {
  if (em_device_count(EM_DEVICE_CUDA) > 0) return NULL;
  em_error err = {0};
  if (em_device_check((em_device){EM_DEVICE_CUDA, 0}, &err) == EM_OK) return NULL;
  return g_strdup(err.msg[0] ? err.msg : "no CUDA device is present");
}

char *em_devices_display_name(em_device d) {
  if (em_device_is_cpu(d)) return g_strdup("CPU");
  char id[16];
  em_device_str(d, id, sizeof id);
  em_device_info info;
  em_error err = {0};
  if (em_device_info_get(d, &info, &err) == EM_OK && info.name[0])
    return g_strdup_printf("%s · %s", id, info.name);
  return g_strdup(id);
}
