/* nn-private.h: what the files of engine/nn share. */
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
  int64_t n_params, n_buffer; /* values */
  bool live;                  /* the output depends on it */
} em_spec_node;

struct em_spec {
  json_t *root;
  char *source;
  const char *name, *description;
  json_t *loss, *training;
  em_shape input; /* batch dim -1 */
  int n_nodes;
  em_spec_node *nodes;
  int output;
  int64_t n_params, n_buffer;
};

/* Removes a registered type (the plugin host's rollback of a plugin that
 * failed to load; never a type a spec or model may still use). */
void em_layer_unregister(const em_layer_type *type);
/* While held (in this thread: the plugin host around a plugin's init),
 * em_layer_register refuses. */
void em_layer_register_hold(bool hold);

/* A copy of spec (re-parsed from a deep copy of its JSON). */
em_spec *em_spec_copy(const em_spec *spec, em_error *err);

/* Element count of a declaration, or -1 when it overflows. */
int64_t em_decl_numel(const em_param_decl *d);
/* Fills a parameter declaration. */
void em_decl_set(em_param_decl *d, const char *name, bool buffer, em_dtype dt, int ndim,
                 const int64_t *shape, em_init_kind init, double a);
/* Weight init over explicit fans (the model's scheme). */
void em_init_weight(em_tensor *t, em_weight_init scheme, int64_t fan_in, int64_t fan_out,
                    em_rng *rng);

/* A Linear or Conv2d node's forward followed by a ReLU's, as one op
 * (model.c fuses the pairs em_spec_node_fuses_relu names). */
em_tensor *em_linear_relu_layer_forward(const em_layer_node *node, em_tensor *x,
                                        em_tensor **params);
em_tensor *em_conv2d_relu_layer_forward(const em_layer_node *node, em_tensor *x,
                                        em_tensor **params);

/* Built-in layer types (registered on first use of the registry). */
extern const em_layer_type em_layer_linear, em_layer_conv2d, em_layer_batch_norm2d,
    em_layer_layer_norm, em_layer_dropout, em_layer_relu, em_layer_gelu, em_layer_silu,
    em_layer_sigmoid, em_layer_tanh, em_layer_max_pool2d, em_layer_avg_pool2d, em_layer_flatten,
    em_layer_embedding, em_layer_add;

/* ---- a small growing string (for messages and the summary) ---------------- */
typedef struct {
  char *s;
  size_t len, cap;
} em_strbuf;
void em_strbuf_printf(em_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void em_strbuf_free(em_strbuf *b);
