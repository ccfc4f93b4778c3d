/* em-export.h: exporting a model to ONNX for deployment.
 *
 * em_export_onnx writes a model built from the built-in layer types as an
 * ONNX model (opset 17, IR version 8): one graph input "input" of shape
 * (N, ...the spec's input shape) with N a dynamic dimension named
 * "batch", one output "output", the weights as float initializers (raw
 * little-endian data) named like the state dict ("fc1.weight"), and the
 * metadata below as metadata_props. Inference semantics: Dropout is left
 * out, BatchNorm2d uses its running statistics. A model quantised with
 * em_model_quantize (em-quant.h) has its int8 Linear layers written as
 * the same computation in ONNX operators (MatMulInteger over int8
 * initializers "fc1.weight_int8"...) and a "quantization" metadata entry.
 *
 * A plugin layer type is written by the mapping its plugin gave
 * (em_layer_onnx_fn, em-plugin.h); one without a mapping is refused with
 * EM_ERR_UNSUPPORTED naming the node and its type. The file is written to
 * a temporary beside path, synced and renamed: a crash never leaves a torn
 * model at path. */
#pragma once

#include <stdint.h>

#include "em-error.h"
#include "em-nn.h"

#define EM_ONNX_OPSET 17

typedef struct {
  const char *model_name;     /* NULL: the spec's name */
  const char *ember_version;  /* NULL: left out */
  int64_t run_id;             /* 0: not from the registry */
  int model_version;          /* 0: not a registered version */
  const char *registry_model; /* the registered model's name, or NULL */
  const char *description;    /* NULL: the spec's description */
} em_export_meta;

/* Whether nodes of this layer type export: it has an ONNX form (a
 * built-in's, or the one its plugin gave) or is the identity at inference
 * (Dropout). */
bool em_onnx_layer_exportable(const em_layer_type *type);

/* meta may be NULL (the spec's name and description only). */
em_status em_export_onnx(const em_model *m, const char *path, const em_export_meta *meta,
                         em_error *err);
