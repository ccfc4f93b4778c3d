/* layer-attention.c: the MultiheadAttention layer type (PyTorch's
 * nn.MultiheadAttention with batch_first=True, self-attention: query, key
 * and value are the one input) and the attention block that
 * TransformerEncoderLayer (layer-transformer.c) shares.
 *
 *   qkv = x in_proj_weight^T + in_proj_bias        (N, L, 3D)
 *   q, k, v = qkv[..., 0:D], [D:2D], [2D:3D], each seen as (N, H, L, D/H)
 *   o = sdpa(q, k, v)                               (N, H, L, D/H)
 *   y = merge_heads(o) out_proj.weight^T + out_proj.bias
 *
 * The heads are views: em_sdpa_packed reads q, k and v strided out of
 * qkv, writes o with the heads already merged, (N, L, D), and its
 * backward writes qkv's gradient in place, so no head is copied either
 * way. A generation step (the KV cache) splits qkv with em_slice and
 * em_transpose views and runs em_sdpa over the cache. Parameter names
 * and their order are PyTorch's state-dict's, so weights move both ways. */
#include "nn-private.h"
#include "em-device.h"

#include <math.h>
#include <stdlib.h>

/* The (N, L, D) input through one self-attention block. */
em_tensor *em_nn_self_attention(em_tensor *x, em_tensor *in_w, em_tensor *in_b, em_tensor *out_w,
                                em_tensor *out_b, int heads, bool causal, double dropout,
                                const em_forward_ctx *ctx) {
  int64_t N = x->shape[0], L = x->shape[1], D = x->shape[2];
  int64_t flat[2] = {N * L, D}, packed[3] = {N, L, 3 * D}, merged[3] = {N, L, D};
  em_tensor *x2 = em_reshape(x, 2, flat);
  em_tensor *qkv = em_reshape(em_linear(x2, in_w, in_b), 3, packed); /* (N, L, 3D) */
  em_sdpa_params sp = {.causal = causal,
                       .dropout_p = ctx->training ? dropout : 0.0,
                       .training = ctx->training,
                       .rng = ctx->rng};
  em_tensor *m = em_reshape(em_sdpa_packed(qkv, heads, &sp), 2, flat); /* (N L, D) */
  return em_reshape(em_linear(m, out_w, out_b), 3, merged);
}

/* ---- generation: the KV cache ---------------------------------------------------- */

/* The keys and values of the positions seen so far, (N, H, max_len, E)
 * each, persistent. */
typedef struct {
  em_tensor *k, *v;
} kv_cache;

void em_nn_kv_cache_free(void *state) {
  kv_cache *c = state;
  if (!c) return;
  em_tensor_free(c->k);
  em_tensor_free(c->v);
  free(c);
}

em_tensor *em_nn_self_attention_step(em_tensor *x, em_tensor *in_w, em_tensor *in_b,
                                     em_tensor *out_w, em_tensor *out_b, int heads, int64_t pos,
                                     int64_t max_len, void **state, em_error *err) {
  int64_t N = x->shape[0], T = x->shape[1], D = x->shape[2], E = D / heads;
  if (em_on_device(x)) {
    em_error_set(err, EM_ERR_UNSUPPORTED, "generation runs on the CPU (the KV cache lives there)");
    return NULL;
  }
  kv_cache *c = *state;
  if (!c) {
    int64_t shape[4] = {N, heads, max_len, E};
    c = calloc(1, sizeof *c);
    if (!c || !(c->k = em_tensor_new(x->dtype, 4, shape, err)) ||
        !(c->v = em_tensor_new(x->dtype, 4, shape, err))) {
      if (!c) em_error_set(err, EM_ERR_NOMEM, "out of memory for the KV cache");
      em_nn_kv_cache_free(c);
      return NULL;
    }
    *state = c;
  }
  if (c->k->shape[0] != N || pos + T > c->k->shape[2]) {
    em_error_set(err, EM_ERR_SHAPE, "positions [%lld, %lld) of %lld sequences do not fit the cache "
                 "(%lld of %lld)", (long long)pos, (long long)(pos + T), (long long)N,
                 (long long)c->k->shape[0], (long long)c->k->shape[2]);
    return NULL;
  }
  int64_t flat[2] = {N * T, D}, split[4] = {N, T, heads, E}, merged[3] = {N, T, D};
  em_tensor *qkv = em_linear(em_reshape(x, 2, flat), in_w, in_b); /* (N T, 3D) */
  em_tensor *part[3];
  for (int p = 0; p < 3; p++)
    part[p] = em_transpose(em_reshape(em_slice(qkv, 1, p * D, (p + 1) * D, 1), 4, split), 1, 2);
  em_tensor_copy_(em_slice(c->k, 2, pos, pos + T, 1), part[1]);
  em_tensor_copy_(em_slice(c->v, 2, pos, pos + T, 1), part[2]);
  /* the new queries see every cached key up to their own position: the
   * causal mask aligned to the end (em_sdpa) */
  em_sdpa_params sp = {.causal = true};
  em_tensor *o = em_sdpa(part[0], em_slice(c->k, 2, 0, pos + T, 1),
                         em_slice(c->v, 2, 0, pos + T, 1), &sp); /* (N, H, T, E) */
  em_tensor *m = em_reshape(em_contiguous(em_transpose(o, 1, 2)), 2, flat);
  return em_reshape(em_linear(m, out_w, out_b), 3, merged);
}

/* The checks both layers make of an (N, L, D) input and D / heads. */
em_status em_nn_attention_shape(const em_shape *in, int64_t heads, const char *what,
                                em_error *err) {
  char buf[160];
  if (in->ndim != 3 || in->dtype != EM_DTYPE_F32)
    return em_error_set(err, EM_ERR_SHAPE,
                        "expects a sequence of shape [N, L, D] (floats), got %s%s",
                        em_shape_format(in, buf, sizeof buf),
                        in->dtype != EM_DTYPE_F32 ? " of indices (add an Embedding before it)" : "");
  int64_t D = in->shape[2];
  if (D % heads)
    return em_error_set(err, EM_ERR_SHAPE, "%s %lld is not divisible by the %lld heads", what,
                        (long long)D, (long long)heads);
  return EM_OK;
}

/* The four attention parameters at params[0..3], named with prefix
 * ("" or "self_attn."), PyTorch's initialisation: xavier_uniform for the
 * packed projection, zeros for its bias and out_proj's, out_proj.weight
 * as a Linear's. */
void em_nn_attention_decls(em_param_decl *params, int64_t D, bool prefixed) {
  int64_t in_w[2] = {3 * D, D}, in_b = 3 * D, out_w[2] = {D, D};
  em_decl_set(&params[0], prefixed ? "self_attn.in_proj_weight" : "in_proj_weight", false,
              EM_DTYPE_F32, 2, in_w, EM_INIT_UNIFORM, sqrt(6.0 / (double)(D + 3 * D)));
  em_decl_set(&params[1], prefixed ? "self_attn.in_proj_bias" : "in_proj_bias", false,
              EM_DTYPE_F32, 1, &in_b, EM_INIT_ZEROS, 0);
  em_decl_set(&params[2], prefixed ? "self_attn.out_proj.weight" : "out_proj.weight", false,
              EM_DTYPE_F32, 2, out_w, EM_INIT_WEIGHT, 0);
  params[2].fan_in = D;
  params[2].fan_out = D;
  em_decl_set(&params[3], prefixed ? "self_attn.out_proj.bias" : "out_proj.bias", false,
              EM_DTYPE_F32, 1, &D, EM_INIT_ZEROS, 0);
}

/* ---- MultiheadAttention ---------------------------------------------------------- */

enum { MHA_DIM, MHA_HEADS, MHA_DROPOUT, MHA_BIAS, MHA_CAUSAL };
static const em_attr_desc mha_attrs[] = {
    {"embed_dim", EM_ATTR_INT, false, 0, 1, EM_NN_MAX_SIZE,
     "model width D (inferred; checked when given)", NULL},
    {"num_heads", EM_ATTR_INT, true, 0, 1, 4096, "heads H (D must divide by it)", NULL},
    {"dropout", EM_ATTR_FLOAT, false, 0, 0, 0.999, "dropout on the attention weights", NULL},
    {"bias", EM_ATTR_BOOL, false, 1, 0, 1, "learn the projections' biases", NULL},
    {"causal", EM_ATTR_BOOL, false, 0, 0, 1, "each position attends to itself and earlier ones", NULL},
};

static em_status mha_infer(const em_layer_node *node, int n_in, const em_shape *in, em_shape *out,
                           int *n_params, em_param_decl *params, em_error *err) {
  em_status st = em_nn_attention_shape(in, em_attr_int(node, MHA_HEADS, 0), "embed_dim", err);
  if (st != EM_OK) return st;
  int64_t D = in->shape[2];
  if (node->attr[MHA_DIM].given && em_attr_int(node, MHA_DIM, 0) != D) {
    char buf[160];
    return em_error_set(err, EM_ERR_SHAPE, "embed_dim is %lld but its input %s has %lld features",
                        (long long)em_attr_int(node, MHA_DIM, 0),
                        em_shape_format(in, buf, sizeof buf), (long long)D);
  }
  bool bias = em_attr_bool(node, MHA_BIAS);
  *out = *in;
  em_nn_attention_decls(params, D, false);
  if (bias) {
    *n_params = 4;
  } else { /* PyTorch's bias=False has no in_proj_bias nor out_proj.bias */
    params[1] = params[2];
    *n_params = 2;
  }
  return EM_OK;
}

static em_tensor *mha_forward(const em_layer_node *node, int n_in, em_tensor **in,
                              em_tensor **params, const em_forward_ctx *ctx) {
  bool bias = em_attr_bool(node, MHA_BIAS);
  em_tensor *in_w = params[0], *in_b = bias ? params[1] : NULL;
  em_tensor *out_w = bias ? params[2] : params[1], *out_b = bias ? params[3] : NULL;
  return em_nn_self_attention(in[0], in_w, in_b, out_w, out_b, (int)em_attr_int(node, MHA_HEADS, 0),
                              em_attr_bool(node, MHA_CAUSAL), em_attr_float(node, MHA_DROPOUT),
                              ctx);
}

static em_tensor *mha_step(const em_layer_node *node, em_tensor *x, em_tensor **params,
                           int64_t pos, int64_t max_len, void **state, em_error *err) {
  if (!em_attr_bool(node, MHA_CAUSAL)) {
    em_error_set(err, EM_ERR_UNSUPPORTED, "is not causal: its positions see later ones, which a "
                 "sequence generated one token at a time does not have yet (set \"causal\": true)");
    return NULL;
  }
  bool bias = em_attr_bool(node, MHA_BIAS);
  return em_nn_self_attention_step(x, params[0], bias ? params[1] : NULL,
                                   bias ? params[2] : params[1], bias ? params[3] : NULL,
                                   (int)em_attr_int(node, MHA_HEADS, 0), pos, max_len, state, err);
}

const em_layer_type em_layer_multihead_attention = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "MultiheadAttention",
    .category = "attention",
    .help = "self-attention over a sequence (N, L, D), H heads (PyTorch's, batch_first)",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 5,
    .attrs = mha_attrs,
    .infer = mha_infer,
    .forward = mha_forward,
    .step = mha_step,
    .state_free = em_nn_kv_cache_free,
};
