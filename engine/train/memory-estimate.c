/* memory-estimate.c: the pre-flight estimate of a run's peak training
 * memory, from the spec alone (shape inference, no tensors), and the
 * check against a device's free memory before a run starts there.
 *
 * The builder's estimate (ui/builder/em-spec-costs.c) is this one. Weights and buffers, one gradient per parameter and the optimiser's
 * state are fixed; every node's output and its gradient (everything an
 * op makes lives until the step's scope ends), plus what some ops keep
 * (Conv2d's unfolded input, MaxPool2d's indices), grow with the batch
 * (per node: em_spec_node_costs, layer-costs.c). A ReLU that runs inside
 * the Linear or Conv2d before it on the CPU (em_spec_node_fuses_relu; a
 * device runs the two ops) makes no output of its own there: its gradient
 * still counts (the masked one is a buffer of that size).
 * The device ops keep less than the CPU's (no unfolded input), so on a
 * device the estimate errs high, which is the safe side for a refusal. */
#include "train-private.h"

#include <stdio.h>
#include <string.h>

#include "em-device.h"

void em_train_estimate_memory(const em_spec *spec, const em_train_config *c, int64_t batch,
                              em_train_memory_estimate *out) {
  memset(out, 0, sizeof *out);
  out->batch = batch;
  int states = em_optim_state_per_param(&c->optim);
  int64_t params = em_spec_param_count(spec), buffers = em_spec_buffer_count(spec);
  out->weights_bytes = 4 * (params + buffers);
  out->grads_bytes = 4 * params;
  out->optim_bytes = 4 * params * states;
  out->optim_states = states;
  int64_t in_shape[EM_MAX_DIMS];
  int nd = em_spec_input_shape(spec, in_shape);
  int64_t act = em_spec_input_dtype(spec) == EM_DTYPE_I64 ? 8 : 4, ws = 0, fused = 0;
  for (int d = 0; d < nd; d++) act *= in_shape[d];
  int n = em_spec_node_count(spec);
  const bool cpu = em_device_is_cpu(c->device);
  for (int i = 0; i < n; i++) {
    em_node_costs nc;
    em_spec_node_costs(spec, i, &nc);
    act += nc.act_bytes;
    ws += nc.workspace_bytes;
    if (cpu && i > 0 && em_spec_node_fuses_relu(spec, i - 1)) fused += nc.act_bytes; /* no output */
  }
  out->fixed_bytes = out->weights_bytes + out->grads_bytes + out->optim_bytes;
  out->per_sample_bytes = 2 * act - fused + ws;
  out->act_bytes = (2 * act - fused) * batch;
  out->workspace_bytes = ws * batch;
  out->total_bytes = out->fixed_bytes + out->per_sample_bytes * batch;
}

em_status em_train_preflight(const em_spec *spec, const em_train_config *c, int *batch,
                             char *note, size_t cap, em_error *err) {
  *batch = c->batch_size;
  if (cap) note[0] = '\0';
  /* the CPU too: memory that runs out mid-step cannot be taken back there
   * (the host allocator's failure ends the process), so a batch past what
   * the machine has free is refused before it starts */
  em_device_info info;
  EM_TRY(em_device_info_get(c->device, &info, err));
  char dn[32];
  em_device_str(c->device, dn, sizeof dn);
  em_train_memory_estimate e;
  em_train_estimate_memory(spec, c, c->batch_size, &e);
  int64_t avail = info.free_bytes;
  if (e.total_bytes <= avail) return EM_OK;
  int64_t fits = avail > e.fixed_bytes && e.per_sample_bytes > 0
                     ? (avail - e.fixed_bytes) / e.per_sample_bytes : 0;
  char need[32], freeb[32], w[32], g[32], o[32], a[32];
  em_format_bytes(e.total_bytes, need, sizeof need);
  em_format_bytes(avail, freeb, sizeof freeb);
  if (c->auto_batch && fits >= 1) {
    int b = c->batch_size;
    while (b > 1 && b > fits) b /= 2; /* the batches --auto-batch would try */
    *batch = b;
    snprintf(note, cap, "pre-flight: batch %d on %s needs about %s but %s is free: starting "
             "at batch %d (--auto-batch)", c->batch_size, dn, need, freeb, b);
    return EM_OK;
  }
  char hint[256];
  if (fits >= 1)
    snprintf(hint, sizeof hint, "the largest batch that fits is about %lld: pass --batch %lld "
             "(ember train: or --auto-batch); --no-preflight skips this check (the estimate "
             "errs high)", (long long)fits, (long long)fits);
  else
    snprintf(hint, sizeof hint, "even one sample does not fit: train on a device with more "
             "memory");
  return em_error_set(err, EM_ERR_NOMEM,
                      "pre-flight: training '%s' at batch %d on %s needs about %s (weights %s, "
                      "gradients %s, optimizer state %s, activations %s) but %s has %s free; %s",
                      em_spec_name(spec), c->batch_size, dn, need,
                      em_format_bytes(e.weights_bytes, w, sizeof w),
                      em_format_bytes(e.grads_bytes, g, sizeof g), em_format_bytes(e.optim_bytes, o, sizeof o),
                      em_format_bytes(e.act_bytes + e.workspace_bytes, a, sizeof a), dn, freeb, hint);
}
