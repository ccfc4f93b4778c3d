/* nn-spec.h: a parsed spec's structure and the layer registry's hooks,
 * as engine/nn shows them to the two modules that read a model from the
 * inside: engine/export (the ONNX writer walks the nodes, their inputs,
 * attributes and shapes) and engine/plugin (the host registers a
 * plugin's layer types, and takes them back when its init fails), with
 * the built-in types export writes forms for. Every
 * other caller goes through em-nn.h. */
#pragma once

#include "em-nn.h"

/* Sizes a spec may ask for. Attribute sizes (features, channels) stay
 * below EM_NN_MAX_SIZE so that shape arithmetic cannot overflow; a tensor
 * (one sample's activation, or one parameter) holds at most
 * EM_NN_MAX_NUMEL values (4 GiB in f32); a model at most
 * EM_NN_MAX_PARAMS trainable values. */
#define EM_NN_MAX_SIZE ((double)(1 << 30))
#define EM_NN_MAX_KERNEL ((double)(1 << 16))
#define EM_NN_MAX_NUMEL ((int64_t)1 << 30)
#define EM_NN_MAX_PARAMS ((int64_t)1 << 31)
#define EM_NN_MAX_NODES 4096

/* One node of a parsed spec. */
typedef struct {
  const char *name; /* borrowed from the spec's JSON */
  const em_layer_type *type;
  em_attr_value attr[EM_LAYER_MAX_ATTRS];
  int n_in;
  int in[EM_LAYER_MAX_INPUTS]; /* node index, -1 = model input */
  const char *in_names[EM_LAYER_MAX_INPUTS];
  em_layer_node view; /* what the layer type sees */
  em_shape out;
  int n_decl;
  em_param_decl decl[EM_LAYER_MAX_PARAMS];
  int64_t n_params, n_buffer; /* values (a tied weight counts at its owner) */
  bool live;                  /* the output depends on it */
  /* "tie_weight": "tok": decl tie_decl ("weight") is node tie_node's decl
   * tie_src (PyTorch's head.weight = tok.weight); -1 when untied */
  int tie_decl, tie_node, tie_src;
} em_spec_node;

struct em_spec {
  json_t *root;
  json_t *flat;     /* the nodes with repeated blocks expanded, or NULL */
  char *flat_output; /* "output" when it names a block: its last node */
  char *source;
  const char *name, *description;
  json_t *loss, *training;
  em_shape input; /* batch dim -1 */
  int n_nodes;
  em_spec_node *nodes;
  int output;
  int64_t n_params, n_buffer;
  em_tokenizer *tokenizer; /* "tokenizer", or NULL */
};

/* Removes a registered type (the plugin host's rollback of a plugin that
 * failed to load; never a type a spec or model may still use). */
void em_layer_unregister(const em_layer_type *type);
/* While held (in this thread: the plugin host around a plugin's init),
 * em_layer_register refuses. */
void em_layer_register_hold(bool hold);

/* A copy of spec (re-parsed from a deep copy of its JSON). */
em_spec *em_spec_copy(const em_spec *spec, em_error *err);

/* Built-in layer types (registered on first use of the registry; export
 * gives each its ONNX form). */
extern const em_layer_type em_layer_linear, em_layer_conv2d, em_layer_batch_norm2d,
    em_layer_layer_norm, em_layer_dropout, em_layer_relu, em_layer_gelu, em_layer_silu,
    em_layer_sigmoid, em_layer_tanh, em_layer_max_pool2d, em_layer_avg_pool2d, em_layer_flatten,
    em_layer_embedding, em_layer_add, em_layer_multihead_attention,
    em_layer_transformer_encoder_layer, em_layer_positional_embedding, em_layer_to_sequence,
    em_layer_class_token, em_layer_sequence_pool;
