/* em-spec-costs.c: see the header. */
#include "em-spec-costs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "em-optim.h"
#include "em-train.h"

static int64_t numel_per_sample(const em_shape *s) {
  int64_t n = 1;
  for (int d = 1; d < s->ndim; d++) n *= s->shape[d];
  return n;
}

void em_spec_costs_compute(const em_spec *spec, em_node_cost *costs) {
  int n = em_spec_node_count(spec);
  for (int i = 0; i < n; i++) {
    const em_shape *o = em_spec_node_output(spec, i);
    const char *type = em_spec_node_type(spec, i)->name;
    int64_t numel = numel_per_sample(o);
    double p = (double)em_spec_node_param_count(spec, i);
    double flops = (double)numel;
    if (!strcmp(type, "Linear") && o->ndim >= 2 && o->shape[o->ndim - 1] > 0)
      flops = 2.0 * p * (double)(numel / o->shape[o->ndim - 1]); /* per output row */
    else if (!strcmp(type, "Conv2d") && o->ndim == 4)
      flops = 2.0 * p * (double)(o->shape[2] * o->shape[3]); /* per output position */
    else if (!strcmp(type, "Embedding"))
      flops = 0;
    costs[i].flops = flops;
    costs[i].act_bytes = numel * (o->dtype == EM_DTYPE_I64 ? 8 : 4);
  }
}

int64_t em_memory_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (f) {
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    if (kb >= 0) return (int64_t)kb * 1024;
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

void em_memory_estimate_compute(const em_spec *spec, int64_t batch, int64_t available_bytes,
                                em_memory_estimate *out) {
  memset(out, 0, sizeof *out);
  out->batch = batch;
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  em_error err = {0};
  if (em_train_config_from_spec(&cfg, spec, &err) != EM_OK) em_train_config_defaults(&cfg);
  out->optim_states = cfg.optim.kind == EM_OPTIM_SGD ? (cfg.optim.momentum > 0 ? 1 : 0) : 2;
  if (cfg.optim.kind != EM_OPTIM_SGD && cfg.optim.amsgrad) out->optim_states = 3;
  int64_t params = em_spec_param_count(spec), buffers = em_spec_buffer_count(spec);
  out->weights_bytes = 4 * (params + buffers);
  out->grads_bytes = 4 * params;
  out->optim_bytes = 4 * params * out->optim_states;
  int64_t in_shape[EM_MAX_DIMS];
  int nd = em_spec_input_shape(spec, in_shape);
  int64_t in_numel = 1;
  for (int d = 0; d < nd; d++) in_numel *= in_shape[d];
  /* Ops run in the step's scope and everything they make lives until the
   * step ends: each node's output and, in backward, its gradient (2x),
   * plus what some ops keep: Conv2d's unfolded input (C*kh*kw per output
   * position) and MaxPool2d's argmax indices (i64). Checked against
   * `ember profile`'s peak for the zoo's CNN (within 10%). */
  int64_t act = in_numel * (em_spec_input_dtype(spec) == EM_DTYPE_I64 ? 8 : 4), ws = 0;
  int n = em_spec_node_count(spec);
  em_node_cost *c = calloc((size_t)(n > 0 ? n : 1), sizeof *c);
  if (c) {
    em_spec_costs_compute(spec, c);
    for (int i = 0; i < n; i++) {
      const char *type = em_spec_node_type(spec, i)->name;
      const em_shape *o = em_spec_node_output(spec, i);
      act += c[i].act_bytes;
      if (!strcmp(type, "Conv2d") && o->ndim == 4 && o->shape[1] > 0)
        ws += em_spec_node_param_count(spec, i) / o->shape[1] * o->shape[2] * o->shape[3] * 4;
      else if (!strcmp(type, "MaxPool2d"))
        ws += c[i].act_bytes * 2;
    }
    free(c);
  }
  out->fixed_bytes = out->weights_bytes + out->grads_bytes + out->optim_bytes;
  out->per_sample_bytes = 2 * act + ws;
  out->act_bytes = 2 * act * batch;
  out->workspace_bytes = ws * batch;
  out->total_bytes = out->fixed_bytes + out->per_sample_bytes * batch;
  out->available_bytes = available_bytes < 0 ? em_memory_available() : available_bytes;
  out->fits = out->available_bytes == 0 || out->total_bytes <= out->available_bytes;
  if (out->available_bytes > out->fixed_bytes && out->per_sample_bytes > 0)
    out->max_batch = (out->available_bytes - out->fixed_bytes) / out->per_sample_bytes;
}

const char *em_format_bytes(int64_t bytes, char *buf, size_t n) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while ((v >= 1024 || v <= -1024) && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0) snprintf(buf, n, "%lld B", (long long)bytes);
  else snprintf(buf, n, "%.1f %s", v, units[u]);
  return buf;
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
