/* em-ops.h: tensor operations of libember.
 *
 * Every op allocates its result in the current scope, works on f32 and
 * f64 (f64 is for gradient checks) unless noted, accepts any strides, and
 * records a tape node when an input requires grad and grad mode is on.
 * Shapes are validated by the layer/spec layer before ops run, so an op
 * given shapes that do not fit is a broken invariant (EM_ASSERT).
 *
 * Dimension letters in comments: N batch, C channels, H, W, L length,
 * D features, K classes. */
#pragma once

#include "em-tensor.h"
#include "em-rng.h"

/* ---- views and layout (views share storage) ------------------------------ */
/* Reshape: a view when the strides allow it, else a contiguous copy. One
 * entry of shape may be -1. */
em_tensor *em_reshape(em_tensor *x, int ndim, const int64_t *shape);
em_tensor *em_flatten(em_tensor *x, int start_dim); /* dims start.. merged */
em_tensor *em_transpose(em_tensor *x, int d0, int d1);
em_tensor *em_permute(em_tensor *x, const int *perm);
em_tensor *em_slice(em_tensor *x, int dim, int64_t start, int64_t end, int64_t step);
/* Broadcasts size-1 dims (and missing leading dims) to shape. */
em_tensor *em_expand(em_tensor *x, int ndim, const int64_t *shape);
em_tensor *em_contiguous(em_tensor *x); /* x itself when already contiguous */
em_tensor *em_concat(int n, em_tensor *const *xs, int dim);
em_tensor *em_cast(em_tensor *x, em_dtype dt); /* no grad through integer types */

/* ---- element-wise (binary ops broadcast like NumPy) ----------------------- */
em_tensor *em_add(em_tensor *a, em_tensor *b);
em_tensor *em_sub(em_tensor *a, em_tensor *b);
em_tensor *em_mul(em_tensor *a, em_tensor *b);
em_tensor *em_div(em_tensor *a, em_tensor *b);
em_tensor *em_add_scalar(em_tensor *x, double s);
em_tensor *em_mul_scalar(em_tensor *x, double s);
em_tensor *em_pow_scalar(em_tensor *x, double p);
em_tensor *em_neg(em_tensor *x);
em_tensor *em_exp(em_tensor *x);
em_tensor *em_log(em_tensor *x);
em_tensor *em_sqrt(em_tensor *x);
em_tensor *em_abs(em_tensor *x);
em_tensor *em_clamp(em_tensor *x, double lo, double hi); /* -INFINITY/INFINITY for none */
em_tensor *em_relu(em_tensor *x);
em_tensor *em_gelu(em_tensor *x); /* exact (erf) form, PyTorch's default */
/* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): GELU(approximate="tanh") */
em_tensor *em_gelu_tanh(em_tensor *x);
em_tensor *em_silu(em_tensor *x);
em_tensor *em_sigmoid(em_tensor *x);
em_tensor *em_tanh(em_tensor *x);

/* ---- reductions ------------------------------------------------------------ */
em_tensor *em_sum(em_tensor *x, int dim, bool keepdim);
em_tensor *em_mean(em_tensor *x, int dim, bool keepdim);
em_tensor *em_sum_all(em_tensor *x);  /* one element, shape [] */
em_tensor *em_mean_all(em_tensor *x);
/* Max along dim; *argmax (optional) receives an i64 tensor of positions. */
em_tensor *em_max(em_tensor *x, int dim, bool keepdim, em_tensor **argmax);
em_tensor *em_argmax(em_tensor *x, int dim, bool keepdim); /* i64, no grad */

/* ---- linear algebra (OpenBLAS) ------------------------------------------- */
/* a (..., L, D) @ b (..., D, K) -> (..., L, K); 2-D, or batched with the
 * leading dims broadcast. */
em_tensor *em_matmul(em_tensor *a, em_tensor *b);
/* y = x @ w^T + b: x (N, D), w (K, D), b (K) or NULL -> y (N, K). */
em_tensor *em_linear(em_tensor *x, em_tensor *w, em_tensor *b);
/* em_relu(em_linear(x, w, b)) with the ReLU done where the product is
 * stored and its gradient mask where the bias's is summed: the same
 * numbers, one op ("linear_relu") and one tensor fewer. On a device, under
 * bf16 autocast and in anomaly mode it is the two ops. */
em_tensor *em_linear_relu(em_tensor *x, em_tensor *w, em_tensor *b);

/* ---- neural-network ops ---------------------------------------------------- */
typedef struct {
  int stride[2], padding[2], dilation[2]; /* (H, W) */
  int groups;
} em_conv2d_params;
/* x (N, C, H, W), w (K, C/groups, kh, kw), b (K) or NULL -> (N, K, H', W') */
em_tensor *em_conv2d(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p);
/* em_relu(em_conv2d(x, w, b, p)) with the ReLU done in place on the
 * convolution's output and its gradient mask taken from it: the same
 * numbers, one op ("conv2d_relu") and one activation tensor fewer (the
 * convolution's backward needs its input, not its output). On a device
 * and in anomaly mode it is the two ops. */
em_tensor *em_conv2d_relu(em_tensor *x, em_tensor *w, em_tensor *b, const em_conv2d_params *p);

typedef struct {
  int kernel[2], stride[2], padding[2]; /* (H, W) */
  bool count_include_pad;               /* avg pool: PyTorch's default true */
} em_pool2d_params;
em_tensor *em_max_pool2d(em_tensor *x, const em_pool2d_params *p); /* (N,C,H,W) */
em_tensor *em_avg_pool2d(em_tensor *x, const em_pool2d_params *p);

/* x (N, C, ...) normalised per channel. In training, batch statistics are
 * used and running_mean/var (C, may be NULL) are updated in place with
 * momentum (unbiased variance, like PyTorch); in eval the running stats
 * are used. weight/bias (C) may be NULL. */
em_tensor *em_batch_norm(em_tensor *x, em_tensor *weight, em_tensor *bias,
                         em_tensor *running_mean, em_tensor *running_var,
                         bool training, double momentum, double eps);
/* Normalises over the last `nd` dims; weight/bias have those dims' shape. */
em_tensor *em_layer_norm(em_tensor *x, int nd, em_tensor *weight, em_tensor *bias, double eps);
/* Zeroes with probability p and scales by 1/(1-p) when training. */
em_tensor *em_dropout(em_tensor *x, double p, bool training, em_rng *rng);
/* x where mask is 0, value where it is not: mask u8 (nonzero = fill),
 * broadcastable to x's shape (a causal mask (T, T) over scores
 * (B, H, T, T)); PyTorch's masked_fill. The gradient flows to x where
 * mask is 0; mask has none. value may be -INFINITY. */
em_tensor *em_masked_fill(em_tensor *x, em_tensor *mask, double value);
/* Scaled dot-product attention: q (N, H, L, E), k (N, H, S, E), v (N, H,
 * S, Ev) -> (N, H, L, Ev), softmax(q k^T * scale + mask) v. causal: query
 * i sees keys j <= i + S - L (PyTorch's tril when L == S; a KV-cache step
 * with L = 1 sees every key). key_padding_mask (N, S) u8, nonzero = key
 * ignored, may be NULL. A row with every key masked gives zeros (and
 * passes no gradient). Fused (engine/ops/sdpa.c): backward keeps the
 * output and one log-sum-exp per query row, not the (N, H, L, S)
 * weights; dropout draws two numbers from rng, and its mask is the one
 * em_dropout would draw over those weights from the same state. */
typedef struct {
  bool causal;
  const em_tensor *key_padding_mask;
  double dropout_p; /* on the attention weights, when training */
  bool training;
  em_rng *rng;
  double scale; /* 0: 1 / sqrt(E) */
} em_sdpa_params;
em_tensor *em_sdpa(em_tensor *q, em_tensor *k, em_tensor *v, const em_sdpa_params *p);
/* Self-attention over a packed in-projection: qkv (N, L, 3 D), q, k, v
 * its column blocks [0, D), [D, 2D), [2D, 3D), each split into `heads`
 * heads of E = D / heads adjacent features (PyTorch's in_proj layout) ->
 * (N, L, D), the heads' outputs side by side: em_sdpa over those views,
 * merged back (the same numbers), without copying the heads apart or
 * together, forward or backward. p's mask is over (N, L) keys. */
em_tensor *em_sdpa_packed(em_tensor *qkv, int heads, const em_sdpa_params *p);
em_tensor *em_softmax(em_tensor *x, int dim);
em_tensor *em_log_softmax(em_tensor *x, int dim);
/* logits (N, K), target i64 (N) class indices -> mean loss, shape []. With
 * logits on a device the targets may stay on the host (checked there and
 * copied up, so the step never waits to read them back). */
em_tensor *em_cross_entropy(em_tensor *logits, em_tensor *target, double label_smoothing);
em_tensor *em_mse_loss(em_tensor *a, em_tensor *b); /* mean */
/* weight (V, D), idx i64 (any shape S) -> (S..., D). An index outside
 * [0, V) is a broken invariant; data loaders validate indices. */
em_tensor *em_embedding(em_tensor *weight, em_tensor *idx);
