/* nn-private.h: what the files of engine/nn share (beside nn-spec.h, what
 * they also show engine/export and the plugin host). */
#pragma once

#include "nn-spec.h"

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

/* The self-attention block of MultiheadAttention and
 * TransformerEncoderLayer (layer-attention.c): x (N, L, D) -> (N, L, D);
 * in_b and out_b may be NULL. */
em_tensor *em_nn_self_attention(em_tensor *x, em_tensor *in_w, em_tensor *in_b, em_tensor *out_w,
                                em_tensor *out_b, int heads, bool causal, double dropout,
                                const em_forward_ctx *ctx);
/* The same block over positions [pos, pos + T) of x (N, T, D), causal,
 * with the keys and values of the earlier positions in *state (a KV cache
 * of max_len positions, made at the first call; em_nn_kv_cache_free). */
em_tensor *em_nn_self_attention_step(em_tensor *x, em_tensor *in_w, em_tensor *in_b,
                                     em_tensor *out_w, em_tensor *out_b, int heads, int64_t pos,
                                     int64_t max_len, void **state, em_error *err);
void em_nn_kv_cache_free(void *state);
/* Node i's tensors in declaration order (a tied weight: its owner's). */
void em_model_node_params(const em_model *m, int i, em_tensor **params);
/* An (N, L, D) float input whose D divides into heads (what names D). */
em_status em_nn_attention_shape(const em_shape *in, int64_t heads, const char *what,
                                em_error *err);
/* in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias into
 * params[0..3], "self_attn."-prefixed when prefixed. */
void em_nn_attention_decls(em_param_decl *params, int64_t D, bool prefixed);

/* The nodes list with its repeated blocks expanded (spec-repeat.c): *flat
 * a new list (NULL when nodes holds no block, nothing to expand); when
 * out_name (the spec's "output", may be NULL) names a block,
 * *out_name_to is its last node's name (malloc'd), else NULL. */
em_status em_spec_expand_repeats(json_t *nodes, const char *out_name, char **out_name_to,
                                 json_t **flat, em_error *err);

/* spec-tokenizer.c: the spec's "tokenizer" object (NULL: none; *out
 * stays NULL) into a tokenizer (em-data.h) for a model whose input has
 * input_dtype. */
em_status em_spec_parse_tokenizer(const json_t *j, em_dtype input_dtype, em_tokenizer **out,
                                  em_error *err);

/* ---- a small growing string (for messages and the summary) ---------------- */
typedef struct {
  char *s;
  size_t len, cap;
} em_strbuf;
void em_strbuf_printf(em_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void em_strbuf_free(em_strbuf *b);

/* ---- what the spec parser's files share (spec-check.c, spec-attrs.c) ---- */
/* "a string", "an array"... for messages. */
const char *em_spec_json_kind(const json_t *v);
/* got is within a small edit distance of known: worth a "did you mean". */
bool em_spec_looks_like(const char *got, const char *known);
/* Every key of obj is one of known (else a message naming the key and where). */
em_status em_spec_check_keys(json_t *obj, const char *const *known, int n_known,
                             const char *where, em_error *err);
/* A node's name (what: "node name", ...): 1 to 64 of [A-Za-z0-9_-]. */
em_status em_spec_check_name(const char *name, const char *what, em_error *err);
/* A parameter's name: dotted identifiers. */
bool em_spec_param_name_ok(const char *name);
/* The node's attributes from obj against its type's descriptors. */
em_status em_spec_parse_attrs(em_spec_node *nd, json_t *obj, em_error *err);
