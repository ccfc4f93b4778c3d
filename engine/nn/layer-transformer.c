/* layer-transformer.c: the TransformerEncoderLayer layer type, PyTorch's
 * nn.TransformerEncoderLayer(batch_first=True) with its parameter names
 * and order (self_attn.*, linear1.*, linear2.*, norm1.*, norm2.*), and
 * `causal` for a decoder-only (GPT) block:
 *
 *   norm_first:  x = x + drop(sa(norm1(x)));  x = x + drop(ff(norm2(x)))
 *   otherwise:   x = norm1(x + drop(sa(x)));  x = norm2(x + drop(ff(x)))
 *   ff(x) = linear2(drop(act(linear1(x))))
 *
 * sa is layer-attention.c's self-attention block (its own dropout on the
 * attention weights); every dropout has probability `dropout`, as in
 * PyTorch. */
#include "nn-private.h"

#include <math.h>

enum { TE_DMODEL, TE_NHEAD, TE_FF, TE_DROPOUT, TE_ACT, TE_EPS, TE_NORM_FIRST, TE_CAUSAL };
enum { TE_ACT_RELU, TE_ACT_GELU };
static const em_attr_desc te_attrs[] = {
    {"d_model", EM_ATTR_INT, false, 0, 1, EM_NN_MAX_SIZE,
     "model width D (inferred; checked when given)", NULL},
    {"nhead", EM_ATTR_INT, true, 0, 1, 4096, "attention heads (D must divide by it)", NULL},
    {"dim_feedforward", EM_ATTR_INT, false, 2048, 1, EM_NN_MAX_SIZE,
     "width of the feed-forward block", NULL},
    {"dropout", EM_ATTR_FLOAT, false, 0.1, 0, 0.999, "dropout probability (every dropout)", NULL},
    {"activation", EM_ATTR_CHOICE, false, TE_ACT_RELU, 0, 0, "the feed-forward activation",
     "relu|gelu"},
    {"layer_norm_eps", EM_ATTR_FLOAT, false, 1e-5, 0, 1, "added to the norms' variance", NULL},
    {"norm_first", EM_ATTR_BOOL, false, 0, 0, 1, "normalise before each block (pre-LN, GPT)", NULL},
    {"causal", EM_ATTR_BOOL, false, 0, 0, 1, "each position attends to itself and earlier ones", NULL},
};

/* parameter slots, PyTorch's state-dict order */
enum { P_IN_W, P_IN_B, P_OUT_W, P_OUT_B, P_L1_W, P_L1_B, P_L2_W, P_L2_B, P_N1_W, P_N1_B, P_N2_W,
       P_N2_B, P_COUNT };

static void linear_decls(em_param_decl *w, em_param_decl *b, const char *wn, const char *bn,
                         int64_t K, int64_t D) {
  int64_t ws[2] = {K, D};
  em_decl_set(w, wn, false, EM_DTYPE_F32, 2, ws, EM_INIT_WEIGHT, 0);
  w->fan_in = D;
  w->fan_out = K;
  em_decl_set(b, bn, false, EM_DTYPE_F32, 1, &K, EM_INIT_UNIFORM, 1.0 / sqrt((double)D));
}

static em_status te_infer(const em_layer_node *node, int n_in, const em_shape *in, em_shape *out,
                          int *n_params, em_param_decl *params, em_error *err) {
  em_status st = em_nn_attention_shape(in, em_attr_int(node, TE_NHEAD, 0), "d_model", err);
  if (st != EM_OK) return st;
  int64_t D = in->shape[2], F = em_attr_int(node, TE_FF, 0);
  if (node->attr[TE_DMODEL].given && em_attr_int(node, TE_DMODEL, 0) != D) {
    char buf[160];
    return em_error_set(err, EM_ERR_SHAPE, "d_model is %lld but its input %s has %lld features",
                        (long long)em_attr_int(node, TE_DMODEL, 0),
                        em_shape_format(in, buf, sizeof buf), (long long)D);
  }
  *out = *in;
  em_nn_attention_decls(params, D, true);
  linear_decls(&params[P_L1_W], &params[P_L1_B], "linear1.weight", "linear1.bias", F, D);
  linear_decls(&params[P_L2_W], &params[P_L2_B], "linear2.weight", "linear2.bias", D, F);
  em_decl_set(&params[P_N1_W], "norm1.weight", false, EM_DTYPE_F32, 1, &D, EM_INIT_ONES, 0);
  em_decl_set(&params[P_N1_B], "norm1.bias", false, EM_DTYPE_F32, 1, &D, EM_INIT_ZEROS, 0);
  em_decl_set(&params[P_N2_W], "norm2.weight", false, EM_DTYPE_F32, 1, &D, EM_INIT_ONES, 0);
  em_decl_set(&params[P_N2_B], "norm2.bias", false, EM_DTYPE_F32, 1, &D, EM_INIT_ZEROS, 0);
  *n_params = P_COUNT;
  return EM_OK;
}

static em_tensor *drop(em_tensor *x, double p, const em_forward_ctx *ctx) {
  return p > 0 && ctx->training ? em_dropout(x, p, true, ctx->rng) : x;
}

/* linear over the last dim of (N, L, D) */
static em_tensor *linear3(em_tensor *x, em_tensor *w, em_tensor *b, bool relu) {
  int64_t N = x->shape[0], L = x->shape[1], D = x->shape[2], K = w->shape[0];
  int64_t flat[2] = {N * L, D}, back[3] = {N, L, K};
  em_tensor *x2 = em_reshape(x, 2, flat);
  return em_reshape(relu ? em_linear_relu(x2, w, b) : em_linear(x2, w, b), 3, back);
}

/* The block around its self-attention sa (the forward's, or a
 * generation step's with its KV cache); NULL when sa fails. */
typedef struct {
  bool step;
  int64_t pos, max_len;
  void **state;
  em_error *err;
} sa_how;

static em_tensor *self_attention(const em_layer_node *node, em_tensor *h, em_tensor **p,
                                 const em_forward_ctx *ctx, const sa_how *how) {
  int heads = (int)em_attr_int(node, TE_NHEAD, 0);
  if (how->step)
    return em_nn_self_attention_step(h, p[P_IN_W], p[P_IN_B], p[P_OUT_W], p[P_OUT_B], heads,
                                     how->pos, how->max_len, how->state, how->err);
  double pd = em_attr_float(node, TE_DROPOUT);
  return drop(em_nn_self_attention(h, p[P_IN_W], p[P_IN_B], p[P_OUT_W], p[P_OUT_B], heads,
                                   em_attr_bool(node, TE_CAUSAL), pd, ctx),
              pd, ctx);
}

static em_tensor *feed_forward(const em_layer_node *node, em_tensor *h, em_tensor **p,
                               const em_forward_ctx *ctx) {
  double pd = em_attr_float(node, TE_DROPOUT);
  bool gelu = em_attr_choice(node, TE_ACT) == TE_ACT_GELU;
  em_tensor *a = gelu ? em_gelu(linear3(h, p[P_L1_W], p[P_L1_B], false))
                      : linear3(h, p[P_L1_W], p[P_L1_B], true);
  return drop(linear3(drop(a, pd, ctx), p[P_L2_W], p[P_L2_B], false), pd, ctx);
}

static em_tensor *te_block(const em_layer_node *node, em_tensor *x, em_tensor **p,
                           const em_forward_ctx *ctx, const sa_how *how) {
  double eps = em_attr_float(node, TE_EPS);
  em_tensor *a;
  if (em_attr_bool(node, TE_NORM_FIRST)) {
    if (!(a = self_attention(node, em_layer_norm(x, 1, p[P_N1_W], p[P_N1_B], eps), p, ctx, how)))
      return NULL;
    x = em_add(x, a);
    return em_add(x, feed_forward(node, em_layer_norm(x, 1, p[P_N2_W], p[P_N2_B], eps), p, ctx));
  }
  if (!(a = self_attention(node, x, p, ctx, how))) return NULL;
  x = em_layer_norm(em_add(x, a), 1, p[P_N1_W], p[P_N1_B], eps);
  return em_layer_norm(em_add(x, feed_forward(node, x, p, ctx)), 1, p[P_N2_W], p[P_N2_B], eps);
}

static em_tensor *te_forward(const em_layer_node *node, int n_in, em_tensor **in,
                             em_tensor **p, const em_forward_ctx *ctx) {
  return te_block(node, in[0], p, ctx, &(sa_how){false, 0, 0, NULL, NULL});
}

static em_tensor *te_step(const em_layer_node *node, em_tensor *x, em_tensor **p, int64_t pos,
                          int64_t max_len, void **state, em_error *err) {
  if (!em_attr_bool(node, TE_CAUSAL)) {
    em_error_set(err, EM_ERR_UNSUPPORTED, "is not causal: its positions see later ones, which a "
                 "sequence generated one token at a time does not have yet (set \"causal\": true)");
    return NULL;
  }
  em_forward_ctx ctx = {false, NULL};
  return te_block(node, x, p, &ctx, &(sa_how){true, pos, max_len, state, err});
}

const em_layer_type em_layer_transformer_encoder_layer = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "TransformerEncoderLayer",
    .category = "attention",
    .help = "self-attention then a feed-forward block, each with a residual and a LayerNorm "
            "(PyTorch's, batch_first)",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 8,
    .attrs = te_attrs,
    .infer = te_infer,
    .forward = te_forward,
    .step = te_step,
    .state_free = em_nn_kv_cache_free,
};
