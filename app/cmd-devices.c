/* cmd-devices.c: `ember devices [--json]`: where this build can train:
 * the CPU, the reference device, and each CUDA device with its name,
 * compute capability and memory (total and free now). A kind this build
 * or machine lacks is listed with the reason (no GPU, no CUDA backend),
 * so that a person sees why `--device cuda` would be refused. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "em-amp.h"
#include "em-cpu.h"
#include "em-device.h"
#include "em-pool.h"
#include "em-quant.h"


/* One device as a JSON object. */
static json_t *device_json(em_device d, const em_device_info *info) {
  char name[32];
  json_t *o = json_object();
  json_object_set_new(o, "device", json_string(em_device_str(d, name, sizeof name)));
  json_object_set_new(o, "kind", json_string(em_device_kind_name((em_device_kind)d.kind)));
  json_object_set_new(o, "name", json_string(info->name));
  json_object_set_new(o, "total_bytes", json_integer((json_int_t)info->total_bytes));
  json_object_set_new(o, "free_bytes", json_integer((json_int_t)info->free_bytes));
  if (d.kind == EM_DEVICE_CPU) { /* the kernels that run here (em-cpu.h) */
    json_object_set_new(o, "isa", json_string(em_cpu_isa_name(em_cpu_isa_active())));
    json_object_set_new(o, "isa_detected", json_string(em_cpu_isa_name(em_cpu_isa_detected())));
    json_object_set_new(o, "kernels", json_string(em_cpu_kernels_active()));
    json_object_set_new(o, "blas_core", json_string(em_blas_core()));
    json_object_set_new(o, "int8_kernel", json_string(em_quant_kernel_best_name()));
    json_object_set_new(o, "bf16_kernel", json_string(em_bf16_kernel_name(em_bf16_kernel_best())));
  }
  if (d.kind == EM_DEVICE_CUDA) {
    char cc[16];
    snprintf(cc, sizeof cc, "%d.%d", info->compute_major, info->compute_minor);
    json_object_set_new(o, "compute_capability", json_string(cc));
    json_object_set_new(o, "multiprocessors", json_integer(info->multiprocessors));
    json_object_set_new(o, "bf16", json_boolean(info->bf16));
    json_object_set_new(o, "f16", json_boolean(info->f16));
  }
  return o;
}

static double gib(int64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

int cli_cmd_devices(int argc, char **argv) {
  bool as_json = false;
  const cli_opt opts[] = {{"json", NULL, &as_json}, {0}};
  cli_parse_args(argc, argv, 2, opts, NULL, 0, 0, "devices");
  json_t *list = json_array(), *unavailable = json_array();
  for (int k = 0; k < EM_DEVICE_KIND_COUNT; k++) {
    int n = em_device_count((em_device_kind)k);
    if (k == EM_DEVICE_CPU) n = 1;
    if (n == 0) { /* why: not built, or none present */
      em_error err = {0};
      em_device_check((em_device){(uint8_t)k, 0}, &err);
      json_array_append_new(unavailable, json_pack("{s:s, s:s}", "kind", em_device_kind_name((em_device_kind)k),
                                                   "reason", err.msg));
      continue;
    }
    for (int i = 0; i < n; i++) {
      em_device d = {(uint8_t)k, (uint8_t)i};
      em_device_info info;
      em_error err = {0};
      if (em_device_info_get(d, &info, &err) != EM_OK) {
        char dn[32];
        json_array_append_new(unavailable,
                              json_pack("{s:s, s:s}", "kind",
                                        em_device_str(d, dn, sizeof dn), "reason", err.msg));
        continue;
      }
      json_array_append_new(list, device_json(d, &info));
    }
  }
  if (as_json) {
    json_t *o = json_pack("{s:o, s:o}", "devices", list, "unavailable", unavailable);
    char *txt = json_dumps(o, JSON_COMPACT);
    printf("%s\n", txt);
    free(txt);
    json_decref(o);
    return 0;
  }
  printf("%-8s %-40s %-8s %12s %12s\n", "DEVICE", "NAME", "COMPUTE", "TOTAL GiB", "FREE GiB");
  size_t i;
  json_t *d;
  json_array_foreach(list, i, d) {
    const char *cc = json_string_value(json_object_get(d, "compute_capability"));
    printf("%-8s %-40.40s %-8s %12.1f %12.1f\n",
           json_string_value(json_object_get(d, "device")),
           json_string_value(json_object_get(d, "name")), cc ? cc : "-",
           gib((int64_t)json_integer_value(json_object_get(d, "total_bytes"))),
           gib((int64_t)json_integer_value(json_object_get(d, "free_bytes"))));
  }
  if (json_array_size(list) > 0) { /* what the cpu row computes with */
    char kernels[256];
    em_cpu_kernels_describe(kernels, sizeof kernels);
    printf("cpu kernels: %s; int8 %s, bf16 %s\n", kernels, em_quant_kernel_best_name(),
           em_bf16_kernel_name(em_bf16_kernel_best()));
  }
  json_array_foreach(unavailable, i, d)
    printf("%-8s unavailable: %s\n", json_string_value(json_object_get(d, "kind")),
           json_string_value(json_object_get(d, "reason")));
  json_decref(list);
  json_decref(unavailable);
  return 0;
}
