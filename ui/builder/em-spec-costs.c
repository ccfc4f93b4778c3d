/* em-spec-costs.c: see the header. */
#include "em-spec-costs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-device.h"
#include "em-optim.h"
#include "em-train.h"

void em_spec_costs_compute(const em_spec *spec, em_node_cost *costs) {
  int n = em_spec_node_count(spec);
  for (int i = 0; i < n; i++) { /* the engine's table, as the memory estimate reads it */
    em_node_costs nc;
    em_spec_node_costs(spec, i, &nc);
    costs[i].flops = nc.flops;
    costs[i].act_bytes = nc.act_bytes;
  }
}

int64_t em_memory_available(void) {
  em_device_info host; /* the engine reads /proc/meminfo's MemAvailable */
  em_device_info_get(em_device_cpu(), &host, NULL);
  return host.free_bytes;
}

void em_memory_estimate_compute(const em_spec *spec, int64_t batch, int64_t available_bytes,
                                em_memory_estimate *out) {
  memset(out, 0, sizeof *out);
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  em_error err = {0};
  if (em_train_config_from_spec(&cfg, spec, &err) != EM_OK) em_train_config_defaults(&cfg);
  em_train_estimate_memory(spec, &cfg, batch, &out->mem);
  out->available_bytes = available_bytes < 0 ? em_memory_available() : available_bytes;
  const em_train_memory_estimate *m = &out->mem;
  out->fits = out->available_bytes == 0 || m->total_bytes <= out->available_bytes;
  if (out->available_bytes > m->fixed_bytes && m->per_sample_bytes > 0)
    out->max_batch = (out->available_bytes - m->fixed_bytes) / m->per_sample_bytes;
}

const char *em_format_flops(double flops, char *buf, size_t n) {
  static const char *units[] = {"", "k", "M", "G", "T"};
  int u = 0;
  while (flops >= 1000 && u < 4) {
    flops /= 1000;
    u++;
  }
  snprintf(buf, n, u ? "%.1f %sFLOP" : "%.0f FLOP", flops, units[u]);
  return buf;
}
