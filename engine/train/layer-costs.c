/* layer-costs.c: what one sample costs at a spec node besides its output:
 * the FLOPs the builder shows, and the workspace the memory estimate
 * counts (what an op keeps until the step ends besides its output). One
 * table of the layer types that differ from the default (an elementwise
 * FLOP per output value, no workspace), by type name, so that a plugin's
 * type of another name takes the default. */
#include "train-private.h"

#include <string.h>

/* Node i's per-sample cost, from its output shape o (N, ...) and its
 * parameter count p. */
typedef struct {
  const char *type;
  double (*flops)(const em_shape *o, int64_t numel, double p);
  int64_t (*workspace)(const em_shape *o, int64_t bytes, int64_t p);
} cost_row;

static double linear_flops(const em_shape *o, int64_t numel, double p) {
  if (o->ndim < 2 || o->shape[o->ndim - 1] <= 0) return (double)numel;
  return 2.0 * p * (double)(numel / o->shape[o->ndim - 1]); /* per output row */
}

static double conv_flops(const em_shape *o, int64_t numel, double p) {
  if (o->ndim != 4) return (double)numel;
  return 2.0 * p * (double)(o->shape[2] * o->shape[3]); /* per output position */
}

/* The CPU's Conv2d keeps its unfolded input: (C_in k k) x (H_out W_out). */
static int64_t conv_workspace(const em_shape *o, int64_t bytes, int64_t p) {
  (void)bytes;
  if (o->ndim != 4 || o->shape[1] <= 0) return 0;
  return p / o->shape[1] * o->shape[2] * o->shape[3] * 4;
}

static double no_flops(const em_shape *o, int64_t numel, double p) {
  (void)o, (void)numel, (void)p;
  return 0;
}

/* MaxPool2d keeps an index per output value (8 bytes). */
static int64_t pool_workspace(const em_shape *o, int64_t bytes, int64_t p) {
  (void)o, (void)p;
  return bytes * 2;
}

/* Self-attention on (N, L, D): the projections as a Linear's (2 p per
 * position: every weight is one multiply-add per position) plus q k^T and
 * the weights times v, 2 L D multiply-adds per position. */
static double attention_flops(const em_shape *o, int64_t numel, double p) {
  if (o->ndim != 3) return (double)numel;
  double L = (double)o->shape[1], D = (double)o->shape[2];
  return 2.0 * p * L + 4.0 * L * L * D;
}

/* What the block keeps for backward besides its output, per position: q,
 * k and v (3 D) and the merged heads (D); the fused attention keeps one
 * logsumexp per head and query, which is less than a D. */
static int64_t attention_workspace(const em_shape *o, int64_t bytes, int64_t p) {
  (void)p;
  return bytes * 4;
}

/* An encoder layer: the attention's 4 D, its output, two residual sums,
 * two norms' outputs and the feed-forward's output (6 D), and its hidden
 * layer before and after the activation (2 F), F from the parameter count
 * p = 4 D^2 + 4 D (attention) + 2 D F + F + D (feed-forward) + 4 D (norms). */
static int64_t encoder_workspace(const em_shape *o, int64_t bytes, int64_t p) {
  if (o->ndim != 3 || o->shape[2] <= 0) return 0;
  int64_t D = o->shape[2], L = o->shape[1], F = (p - 4 * D * D - 9 * D) / (2 * D + 1);
  return bytes / (L * D) * L * (10 * D + 2 * (F > 0 ? F : 0));
}

static const cost_row rows[] = {
    {"MultiheadAttention", attention_flops, attention_workspace},
    {"TransformerEncoderLayer", attention_flops, encoder_workspace},
    {"Linear", linear_flops, NULL},
    {"Conv2d", conv_flops, conv_workspace},
    {"MaxPool2d", NULL, pool_workspace},
    {"Embedding", no_flops, NULL}, /* a gather */
};

void em_spec_node_costs(const em_spec *spec, int i, em_node_costs *out) {
  const char *type = em_spec_node_type(spec, i)->name;
  const em_shape *o = em_spec_node_output(spec, i);
  int64_t numel = 1;
  for (int d = 1; d < o->ndim; d++) numel *= o->shape[d];
  int64_t p = em_spec_node_param_count(spec, i);
  out->act_bytes = numel * (o->dtype == EM_DTYPE_I64 ? 8 : 4);
  out->flops = (double)numel;
  out->workspace_bytes = 0;
  for (size_t k = 0; k < sizeof rows / sizeof *rows; k++)
    if (!strcmp(type, rows[k].type)) {
      if (rows[k].flops) out->flops = rows[k].flops(o, numel, (double)p);
      if (rows[k].workspace) out->workspace_bytes = rows[k].workspace(o, out->act_bytes, p);
      break;
    }
}
