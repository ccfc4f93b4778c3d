/* layer-position.c: the PositionalEmbedding layer type: a learned vector
 * per position added to a sequence, x (N, L, D) + weight[0:L] (GPT's
 * wpe; in PyTorch an nn.Embedding(max_len, D) over arange(L), whose
 * state-dict entry is the same "weight" [max_len, D]). */
#include "nn-private.h"

enum { POS_MAX_LEN, POS_DIM, POS_STD };
static const em_attr_desc pos_attrs[] = {
    {"max_len", EM_ATTR_INT, true, 0, 1, EM_NN_MAX_SIZE, "longest sequence it has a vector for", NULL},
    {"embedding_dim", EM_ATTR_INT, false, 0, 1, EM_NN_MAX_SIZE,
     "vector size D (inferred; checked when given)", NULL},
    {"init_std", EM_ATTR_FLOAT, false, 1.0, 0, 100,
     "the weights' initial N(0, std^2) (nn.Embedding's 1; GPT-2's 0.02)", NULL},
};

static em_status pos_infer(const em_layer_node *node, int n_in, const em_shape *in, em_shape *out,
                           int *n_params, em_param_decl *params, em_error *err) {
  char buf[160];
  if (in->ndim != 3 || in->dtype != EM_DTYPE_F32)
    return em_error_set(err, EM_ERR_SHAPE, "expects a sequence of shape [N, L, D] (floats), got %s",
                        em_shape_format(in, buf, sizeof buf));
  int64_t T = em_attr_int(node, POS_MAX_LEN, 0), D = in->shape[2];
  if (node->attr[POS_DIM].given && em_attr_int(node, POS_DIM, 0) != D)
    return em_error_set(err, EM_ERR_SHAPE,
                        "embedding_dim is %lld but its input %s has %lld features",
                        (long long)em_attr_int(node, POS_DIM, 0),
                        em_shape_format(in, buf, sizeof buf), (long long)D);
  if (in->shape[1] > T)
    return em_error_set(err, EM_ERR_SHAPE,
                        "its input %s has %lld positions, more than max_len %lld",
                        em_shape_format(in, buf, sizeof buf), (long long)in->shape[1],
                        (long long)T);
  *out = *in;
  int64_t ws[2] = {T, D};
  em_decl_set(&params[0], "weight", false, EM_DTYPE_F32, 2, ws, EM_INIT_NORMAL,
              em_attr_float(node, POS_STD));
  *n_params = 1;
  return EM_OK;
}

static em_tensor *pos_forward(const em_layer_node *node, int n_in, em_tensor **in,
                              em_tensor **params, const em_forward_ctx *ctx) {
  int64_t L = in[0]->shape[1]; /* (N, L, D) + (L, D) */
  return em_add(in[0], em_slice(params[0], 0, 0, L, 1));
}

static em_status pos_check(const em_layer_node *node, int n_in, em_tensor **in,
                           em_tensor **params, const em_forward_ctx *ctx, em_error *err) {
  int64_t L = in[0]->shape[1], T = params[0]->shape[0];
  if (L > T)
    return em_error_set(err, EM_ERR_SHAPE,
                        "a sequence of %lld positions is longer than max_len %lld", (long long)L,
                        (long long)T);
  return EM_OK;
}

static em_tensor *pos_step(const em_layer_node *node, em_tensor *x, em_tensor **params,
                           int64_t pos, int64_t max_len, void **state, em_error *err) {
  int64_t T = x->shape[1], L = params[0]->shape[0]; /* (N, T, D) + weight[pos : pos + T] */
  if (pos + T > L) {
    em_error_set(err, EM_ERR_SHAPE, "position %lld is past max_len %lld (the longest sequence "
                 "this model has positions for)", (long long)(pos + T - 1), (long long)L);
    return NULL;
  }
  return em_add(x, em_slice(params[0], 0, pos, pos + T, 1));
}

const em_layer_type em_layer_positional_embedding = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "PositionalEmbedding",
    .category = "attention",
    .help = "adds a learned vector per position to a sequence (N, L, D)",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 3,
    .attrs = pos_attrs,
    .infer = pos_infer,
    .forward = pos_forward,
    .check_input = pos_check,
    .step = pos_step,
};
