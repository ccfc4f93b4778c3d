/* quant-layer.h: a quantised model as engine/quant shows it to the two
 * modules that hold one: engine/nn's model (which runs a plan's layers in
 * its forward) and engine/export (which writes them as ONNX operators).
 * The layer's numbers follow quant-private.h's formulas; the kernels are
 * opaque here. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-quant.h"

typedef struct em_qgemm_kernel em_qgemm_kernel;

/* One quantised Linear node. */
typedef struct {
  int node;       /* its index among the spec's nodes */
  int64_t K, D;   /* out_features, in_features */
  int64_t Dp;     /* D rounded up to EM_QUANT_K_ALIGN */
  int8_t *wq;     /* (K, D) the int8 weights, row-major */
  float *w_scale; /* (K) */
  int32_t *w_sum; /* (K) sum over d of wq */
  float *bias;    /* (K) a copy of the f32 bias, or NULL */
  void *packed;   /* wq in the kernel's layout (NULL: the kernel reads wq) */
} em_quant_layer;

/* The quantisation of one model. */
typedef struct em_quant_plan {
  em_quant_mode mode;
  const em_qgemm_kernel *kernel;
  int n_nodes;
  int *node_layer; /* (n_nodes) index into layers, or -1 */
  int n_layers;
  em_quant_layer *layers;
} em_quant_plan;

void em_quant_plan_free(em_quant_plan *p);
/* The quantised layer of spec node i, or NULL. */
const em_quant_layer *em_quant_plan_layer(const em_quant_plan *p, int node);

/* The layer's forward on a scoped tensor x (N, D) or (N, L, D): a new
 * scoped (N, K) / (N, L, K). Records nothing on the tape. */
em_tensor *em_quant_linear_forward(const em_quant_layer *L, const em_qgemm_kernel *k,
                                   em_tensor *x, bool relu);

/* Implemented in engine/nn/model.c: the model's plan (NULL when not
 * quantised), and replacing it (the old one is freed). */
em_quant_plan *em_model_quant_plan(const em_model *m);
void em_model_set_quant_plan(em_model *m, em_quant_plan *p);
