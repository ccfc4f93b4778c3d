/* em-spec-costs.h: what the builder shows beside every node and under the
 * model, computed from a parsed spec alone (shape inference, no tensors):
 * each node's forward FLOPs and activation bytes per sample, and a
 * pre-flight estimate of peak training memory on the CPU for a batch size
 * and the spec's optimiser, against the memory the machine has free. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-nn.h"
#include "em-train.h"

typedef struct {
  double flops;          /* forward, one sample: 2 x MACs for Linear/Conv2d,
                            one op per output value elsewhere */
  int64_t act_bytes;     /* the node's output for one sample */
} em_node_cost;

/* Fills costs[em_spec_node_count(spec)]. */
void em_spec_costs_compute(const em_spec *spec, em_node_cost *costs);

typedef struct {
  em_train_memory_estimate mem; /* the engine's pre-flight estimate (em-train.h) */
  int64_t available_bytes;      /* MemAvailable (0: unknown) */
  bool fits;
  int64_t max_batch;            /* the largest batch that fits (0: none) */
} em_memory_estimate;

/* available_bytes < 0: read /proc/meminfo (MemAvailable). */
void em_memory_estimate_compute(const em_spec *spec, int64_t batch, int64_t available_bytes,
                                em_memory_estimate *out);
/* Bytes free for a new process: the host's free memory as the engine
 * reports it (em_device_info_get of the CPU: MemAvailable). */
int64_t em_memory_available(void);
/* Bytes are formatted by the engine's em_format_bytes (em-tensor.h). */
/* "3.4 MFLOP" into buf; returns buf. */
const char *em_format_flops(double flops, char *buf, size_t n);
