/* layer-sequence.c: the layer types that turn images into sequences and
 * sequences into vectors, for a vision transformer:
 *
 *   ToSequence    (N, C, H, W) -> (N, H W, C): a feature map's positions
 *                 as tokens (the patches of a strided Conv2d), PyTorch's
 *                 x.flatten(2).transpose(1, 2);
 *   ClassToken    (N, L, D) -> (N, L + 1, D): a learned token first
 *                 (torchvision's ViT: class_token, shape [1, 1, D]);
 *   SequencePool  (N, L, D) -> (N, D): the first token ("first", with a
 *                 ClassToken) or the mean over the sequence ("mean"). */
#include "nn-private.h"

static em_status need_sequence(const em_shape *in, em_error *err) {
  char buf[160];
  if (in->ndim != 3 || in->dtype != EM_DTYPE_F32)
    return em_error_set(err, EM_ERR_SHAPE, "expects a sequence of shape [N, L, D] (floats), got %s",
                        em_shape_format(in, buf, sizeof buf));
  return EM_OK;
}

/* ---- ToSequence --------------------------------------------------------------------- */

static em_status to_seq_infer(const em_layer_node *node, int n_in, const em_shape *in,
                              em_shape *out, int *n_params, em_param_decl *params,
                              em_error *err) {
  char buf[160];
  if (in->ndim != 4)
    return em_error_set(err, EM_ERR_SHAPE, "expects a feature map of shape [N, C, H, W], got %s",
                        em_shape_format(in, buf, sizeof buf));
  *out = (em_shape){EM_DTYPE_F32, 3, {in->shape[0], in->shape[2] * in->shape[3], in->shape[1]}};
  *n_params = 0;
  return EM_OK;
}

static em_tensor *to_seq_forward(const em_layer_node *node, int n_in, em_tensor **in,
                                 em_tensor **params, const em_forward_ctx *ctx) {
  em_tensor *x = in[0]; /* (N, C, H, W) -> (N, C, H W) -> (N, H W, C) */
  int64_t flat[3] = {x->shape[0], x->shape[1], x->shape[2] * x->shape[3]};
  return em_contiguous(em_transpose(em_reshape(x, 3, flat), 1, 2));
}

const em_layer_type em_layer_to_sequence = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "ToSequence",
    .category = "attention",
    .help = "a feature map's positions as a sequence: (N, C, H, W) -> (N, H*W, C)",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = to_seq_infer,
    .forward = to_seq_forward,
};

/* ---- ClassToken ------------------------------------------------------------------------ */

static em_status cls_infer(const em_layer_node *node, int n_in, const em_shape *in, em_shape *out,
                           int *n_params, em_param_decl *params, em_error *err) {
  em_status st = need_sequence(in, err);
  if (st != EM_OK) return st;
  *out = *in;
  out->shape[1] += 1;
  int64_t shape[3] = {1, 1, in->shape[2]};
  em_decl_set(&params[0], "class_token", false, EM_DTYPE_F32, 3, shape, EM_INIT_ZEROS, 0);
  *n_params = 1;
  return EM_OK;
}

static em_tensor *cls_forward(const em_layer_node *node, int n_in, em_tensor **in,
                              em_tensor **params, const em_forward_ctx *ctx) {
  em_tensor *x = in[0]; /* (N, L, D) */
  int64_t shape[3] = {x->shape[0], 1, x->shape[2]};
  em_tensor *parts[2] = {em_expand(params[0], 3, shape), x};
  return em_concat(2, parts, 1);
}

const em_layer_type em_layer_class_token = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "ClassToken",
    .category = "attention",
    .help = "puts a learned token before the sequence: (N, L, D) -> (N, L+1, D)",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = cls_infer,
    .forward = cls_forward,
};

/* ---- SequencePool ---------------------------------------------------------------------- */

enum { SP_MODE };
enum { SP_FIRST, SP_MEAN };
static const em_attr_desc pool_attrs[] = {
    {"mode", EM_ATTR_CHOICE, false, SP_FIRST, 0, 0,
     "first: the first token (after a ClassToken); mean: the mean over the sequence",
     "first|mean"},
};

static em_status pool_infer(const em_layer_node *node, int n_in, const em_shape *in,
                            em_shape *out, int *n_params, em_param_decl *params, em_error *err) {
  em_status st = need_sequence(in, err);
  if (st != EM_OK) return st;
  *out = (em_shape){EM_DTYPE_F32, 2, {in->shape[0], in->shape[2]}};
  *n_params = 0;
  return EM_OK;
}

static em_tensor *pool_forward(const em_layer_node *node, int n_in, em_tensor **in,
                               em_tensor **params, const em_forward_ctx *ctx) {
  em_tensor *x = in[0]; /* (N, L, D) -> (N, D) */
  if (em_attr_choice(node, SP_MODE) == SP_MEAN) return em_mean(x, 1, false);
  int64_t shape[2] = {x->shape[0], x->shape[2]};
  return em_reshape(em_contiguous(em_slice(x, 1, 0, 1, 1)), 2, shape);
}

const em_layer_type em_layer_sequence_pool = {
    .api_version = EM_LAYER_API_VERSION,
    .name = "SequencePool",
    .category = "attention",
    .help = "a sequence to one vector: its first token or its mean, (N, L, D) -> (N, D)",
    .min_inputs = 1,
    .max_inputs = 1,
    .n_attrs = 1,
    .attrs = pool_attrs,
    .infer = pool_infer,
    .forward = pool_forward,
};
