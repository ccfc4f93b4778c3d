/* onnx-attention.c: the ONNX forms (opset 17) of the sequence layers:
 * PositionalEmbedding, MultiheadAttention and TransformerEncoderLayer,
 * composed of MatMul, Softmax, Transpose, Reshape, Slice and the Linear,
 * LayerNorm and GELU forms of onnx-layers.c. The batch and the sequence
 * length stay free in every Reshape (0 copies the input's dim), so
 * only the positional slice and the causal mask are sized from the
 * spec's sequence length. */
#include "onnx-forms.h"

#include <math.h>
#include <string.h>

#include "../nn/nn-spec.h"

static int attr_at(const em_layer_node *n, const char *name) {
  for (int i = 0; i < n->type->n_attrs; i++)
    if (!strcmp(n->type->attrs[i].name, name)) return i;
  EM_ASSERT(!"attribute missing from a built-in layer type");
  return -1;
}

static const char *tmp(em_onnx_builder *b, const char *name, const char *what) {
  return em_onnx_tmp_name(b, name, what);
}

static const char *node_name(em_onnx_builder *b, const char *name, const char *what) {
  return em_onnx_printf(b, "%s/%s", name, what);
}

static void perm(em_onnx_builder *b, const char *name, const char *what, const char *x,
                 const int64_t p[4], const char *out) {
  Onnx__NodeProto *n = em_onnx_node(b, "Transpose", node_name(b, name, what), 1, &x, out);
  if (n) em_onnx_attr_ints(b, n, "perm", 4, p);
}

/* Shape(x)[lo:hi] as a 1-D int64 value: the graph's own dims. */
static const char *dims_of(em_onnx_builder *b, const char *name, const char *what, const char *x,
                           int64_t lo, int64_t hi) {
  const char *shp = tmp(b, name, "shape"), *out = tmp(b, name, what);
  const char *c_lo = em_onnx_printf(b, "%s/%s_lo", name, what);
  const char *c_hi = em_onnx_printf(b, "%s/%s_hi", name, what);
  if (b->failed) return NULL;
  em_onnx_init_i64s(b, c_lo, 1, (int64_t[]){lo});
  em_onnx_init_i64s(b, c_hi, 1, (int64_t[]){hi});
  em_onnx_op1(b, "Shape", em_onnx_printf(b, "%s/%s_Shape", name, what), x, shp);
  em_onnx_node(b, "Slice", node_name(b, name, what), 3, (const char *[]){shp, c_lo, c_hi}, out);
  return out;
}

/* A Linear (weight w, bias b or NULL) of an (N, L, D) input, as a node
 * named name/what. */
static void linear(em_onnx_builder *b, const char *name, const char *what, const char *x,
                   const em_shape *xs, em_tensor *w, const char *wn, em_tensor *bias,
                   const char *bn, const char *out) {
  em_layer_node sub = {.name = node_name(b, name, what), .type = &em_layer_linear};
  em_tensor *t[2] = {w, bias};
  const char *tn[2] = {wn, bn};
  if (sub.name) em_onnx_linear(&(form_args){b, &sub, 1, &x, xs, out, bias ? 2 : 1, t, tn});
}

/* x (N, L, D) through self-attention with t/tn = in_proj_weight,
 * in_proj_bias, out_proj.weight, out_proj.bias (biases NULL when absent). */
static void attention(em_onnx_builder *b, const char *name, const char *x, const em_shape *xs,
                      em_tensor *const *t, const char *const *tn, int64_t heads, bool causal,
                      const char *out) {
  int64_t L = xs->shape[1], D = xs->shape[2], E = D / heads;
  const char *qkv = tmp(b, name, "qkv");
  linear(b, name, "in_proj", x, xs, t[0], tn[0], t[1], tn[1], qkv);
  static const int64_t to_heads[4] = {0, 2, 1, 3}, to_keys[4] = {0, 2, 3, 1};
  const char *part[3];
  static const char *const what[3] = {"q", "k", "v"};
  const char *c_axes = em_onnx_printf(b, "%s/axis2", name);
  const char *c_split = em_onnx_printf(b, "%s/split_shape", name);
  if (b->failed) return;
  em_onnx_init_i64s(b, c_axes, 1, (int64_t[]){2});
  em_onnx_init_i64s(b, c_split, 4, (int64_t[]){0, 0, heads, E});
  for (int p = 0; p < 3; p++) {
    const char *c_lo = em_onnx_printf(b, "%s/%s_start", name, what[p]);
    const char *c_hi = em_onnx_printf(b, "%s/%s_end", name, what[p]);
    const char *sl = tmp(b, name, what[p]), *rs = em_onnx_printf(b, "%s/%s_heads", name, what[p]);
    const char *rsv = em_onnx_printf(b, "%s/%s_heads:0", name, what[p]);
    part[p] = em_onnx_printf(b, "%s/%s_t", name, what[p]);
    if (b->failed) return;
    em_onnx_init_i64s(b, c_lo, 1, (int64_t[]){p * D});
    em_onnx_init_i64s(b, c_hi, 1, (int64_t[]){(p + 1) * D});
    const char *ins[4] = {qkv, c_lo, c_hi, c_axes};
    em_onnx_node(b, "Slice", node_name(b, name, what[p]), 4, ins, sl);
    em_onnx_op2(b, "Reshape", rs, sl, c_split, rsv);
    perm(b, name, p == 1 ? "k_transpose" : p ? "v_transpose" : "q_transpose", rsv,
         p == 1 ? to_keys : to_heads, part[p]);
  }
  const char *s = tmp(b, name, "scores"), *ss = tmp(b, name, "scaled");
  const char *c_scale = em_onnx_printf(b, "%s/scale", name);
  if (b->failed) return;
  em_onnx_init_scalar(b, c_scale, (float)(1.0 / sqrt((double)E)));
  em_onnx_op2(b, "MatMul", node_name(b, name, "scores"), part[0], part[1], s);
  em_onnx_op2(b, "Mul", node_name(b, name, "scale"), s, c_scale, ss);
  if (causal) { /* + 0 on and below the diagonal, -inf above: the spec's
                  (L, L) cut to the graph's length (at most L: the
                  positions a model has) */
    const char *c_mask = em_onnx_printf(b, "%s/causal_mask", name), *sm = tmp(b, name, "masked");
    const char *c_zero = em_onnx_printf(b, "%s/mask_start", name);
    const char *c_axes = em_onnx_printf(b, "%s/mask_axes", name), *cut = tmp(b, name, "mask");
    const char *len = dims_of(b, name, "scores_length", ss, 2, 4);
    float *m = em_onnx_alloc(b, (size_t)(L * L) * sizeof *m);
    if (!m || !c_mask || !sm || !len || b->failed) return;
    for (int64_t i = 0; i < L; i++)
      for (int64_t j = 0; j < L; j++) m[i * L + j] = j > i ? -INFINITY : 0.f;
    em_tensor mt = {.dtype = EM_DTYPE_F32, .ndim = 2, .shape = {L, L}, .stride = {L, 1}, .data = m};
    em_onnx_init_tensor(b, c_mask, &mt);
    em_onnx_init_i64s(b, c_zero, 2, (int64_t[]){0, 0});
    em_onnx_init_i64s(b, c_axes, 2, (int64_t[]){0, 1});
    em_onnx_node(b, "Slice", node_name(b, name, "mask_slice"), 4,
                 (const char *[]){c_mask, c_zero, len, c_axes}, cut);
    em_onnx_op2(b, "Add", node_name(b, name, "mask"), ss, cut, sm);
    ss = sm;
  }
  const char *a = tmp(b, name, "weights"), *o = tmp(b, name, "context");
  const char *ot = tmp(b, name, "context_t"), *om = tmp(b, name, "merged");
  const char *c_merge = em_onnx_printf(b, "%s/merge_shape", name);
  if (b->failed) return;
  Onnx__NodeProto *sn = em_onnx_node(b, "Softmax", node_name(b, name, "softmax"), 1, &ss, a);
  if (sn) em_onnx_attr_int(b, sn, "axis", -1);
  em_onnx_op2(b, "MatMul", node_name(b, name, "context"), a, part[2], o);
  perm(b, name, "merge_transpose", o, to_heads, ot);
  em_onnx_init_i64s(b, c_merge, 3, (int64_t[]){0, 0, D});
  em_onnx_op2(b, "Reshape", node_name(b, name, "merge"), ot, c_merge, om);
  linear(b, name, "out_proj", om, xs, t[2], tn[2], t[3], tn[3], out);
}

/* ---- PositionalEmbedding: x + weight[0:L] ----------------------------------------- */

static void em_onnx_positional(const form_args *a) {
  em_onnx_builder *b = a->b;
  const char *name = a->node->name;
  em_onnx_init_tensor(b, a->tn[0], a->t[0]);
  const char *c_lo = em_onnx_printf(b, "%s/start", name);
  const char *c_ax = em_onnx_printf(b, "%s/axis0", name), *rows = tmp(b, name, "rows");
  const char *c_hi = dims_of(b, name, "length", a->in[0], 1, 2); /* the sequence's L */
  if (b->failed || !c_hi) return;
  em_onnx_init_i64s(b, c_lo, 1, (int64_t[]){0});
  em_onnx_init_i64s(b, c_ax, 1, (int64_t[]){0});
  const char *ins[4] = {a->tn[0], c_lo, c_hi, c_ax};
  em_onnx_node(b, "Slice", node_name(b, name, "Slice"), 4, ins, rows);
  em_onnx_op2(b, "Add", name, a->in[0], rows, a->out);
}

/* ---- MultiheadAttention ----------------------------------------------------------- */

static void em_onnx_attention(const form_args *a) {
  const em_layer_node *n = a->node;
  bool bias = em_attr_bool(n, attr_at(n, "bias"));
  em_tensor *t[4] = {a->t[0], bias ? a->t[1] : NULL, bias ? a->t[2] : a->t[1],
                     bias ? a->t[3] : NULL};
  const char *tn[4] = {a->tn[0], bias ? a->tn[1] : NULL, bias ? a->tn[2] : a->tn[1],
                       bias ? a->tn[3] : NULL};
  attention(a->b, n->name, a->in[0], &a->in_shapes[0], t, tn,
            em_attr_int(n, attr_at(n, "num_heads"), 0), em_attr_bool(n, attr_at(n, "causal")),
            a->out);
}

/* ---- TransformerEncoderLayer ------------------------------------------------------ */

/* A LayerNorm over the last dim, t/tn its weight and bias. */
static void norm(em_onnx_builder *b, const char *name, const char *what, const char *x,
                 const em_shape *xs, em_tensor *const *t, const char *const *tn, double eps,
                 const char *out) {
  em_attr_value attrs[2] = {{false, 1, {0}}, {true, 1, {eps}}}; /* normalized_shape, eps */
  em_layer_node sub = {.name = node_name(b, name, what), .type = &em_layer_layer_norm,
                       .attr = attrs};
  if (sub.name) em_onnx_layer_norm(&(form_args){b, &sub, 1, &x, xs, out, 2, t, tn});
}

static void em_onnx_encoder(const form_args *a) {
  em_onnx_builder *b = a->b;
  const em_layer_node *n = a->node;
  const char *name = n->name, *x = a->in[0];
  const em_shape *xs = &a->in_shapes[0];
  em_tensor *const *t = a->t; /* PyTorch's order: self_attn (4), linear1, linear2, norm1, norm2 */
  const char *const *tn = a->tn;
  double eps = em_attr_float(n, attr_at(n, "layer_norm_eps"));
  int64_t heads = em_attr_int(n, attr_at(n, "nhead"), 0), F = t[4]->shape[0];
  bool causal = em_attr_bool(n, attr_at(n, "causal"));
  bool gelu = em_attr_choice(n, attr_at(n, "activation")) == 1;
  em_shape fs = *xs; /* the feed-forward's hidden (N, L, F) */
  fs.shape[2] = F;
  const char *sa_in = x, *h1 = tmp(b, name, "norm1"), *sa = tmp(b, name, "attn");
  const char *r1 = tmp(b, name, "residual1"), *x1 = r1, *f1 = tmp(b, name, "linear1");
  const char *fa = tmp(b, name, "act"), *f2 = tmp(b, name, "linear2");
  bool pre = em_attr_bool(n, attr_at(n, "norm_first"));
  if (b->failed) return;
  if (pre) {
    norm(b, name, "norm1", x, xs, t + 8, tn + 8, eps, h1);
    sa_in = h1;
  }
  attention(b, em_onnx_printf(b, "%s/self_attn", name), sa_in, xs, t, tn, heads, causal, sa);
  em_onnx_op2(b, "Add", node_name(b, name, "residual1"), x, sa, r1);
  if (!pre) {
    x1 = tmp(b, name, "normed1");
    norm(b, name, "norm1", r1, xs, t + 8, tn + 8, eps, x1);
  }
  const char *ff_in = x1;
  if (pre) {
    ff_in = tmp(b, name, "norm2");
    norm(b, name, "norm2", x1, xs, t + 10, tn + 10, eps, ff_in);
  }
  linear(b, name, "linear1", ff_in, xs, t[4], tn[4], t[5], tn[5], f1);
  if (gelu) {
    em_attr_value exact[1] = {{false, 1, {0}}}; /* approximate: none */
    em_layer_node sub = {.name = node_name(b, name, "gelu"), .type = &em_layer_gelu, .attr = exact};
    if (sub.name) em_onnx_gelu(&(form_args){b, &sub, 1, &f1, &fs, fa, 0, NULL, NULL});
  } else {
    em_onnx_op1(b, "Relu", node_name(b, name, "relu"), f1, fa);
  }
  linear(b, name, "linear2", fa, &fs, t[6], tn[6], t[7], tn[7], f2);
  if (pre) {
    em_onnx_op2(b, "Add", node_name(b, name, "residual2"), x1, f2, a->out);
  } else {
    const char *r2 = tmp(b, name, "residual2");
    em_onnx_op2(b, "Add", node_name(b, name, "residual2"), x1, f2, r2);
    norm(b, name, "norm2", r2, xs, t + 10, tn + 10, eps, a->out);
  }
}

/* ---- ToSequence, ClassToken, SequencePool ------------------------------------------ */

static void em_onnx_to_sequence(const form_args *a) { /* Reshape (N, C, -1), Transpose */
  em_onnx_builder *b = a->b;
  const char *name = a->node->name, *c_shape = em_onnx_printf(b, "%s/shape", name);
  const char *flat = tmp(b, name, "flat");
  if (b->failed) return;
  em_onnx_init_i64s(b, c_shape, 3, (int64_t[]){0, a->in_shapes[0].shape[1], -1});
  em_onnx_op2(b, "Reshape", node_name(b, name, "Reshape"), a->in[0], c_shape, flat);
  Onnx__NodeProto *n = em_onnx_node(b, "Transpose", name, 1, &flat, a->out);
  if (n) em_onnx_attr_ints(b, n, "perm", 3, (int64_t[]){0, 2, 1});
}

/* The token broadcast to (N, 1, D) by Expand over the input's batch
 * (Shape, Slice [0:1], Concat with [1, D]), then Concat on the sequence. */
static void em_onnx_class_token(const form_args *a) {
  em_onnx_builder *b = a->b;
  const char *name = a->node->name, *x = a->in[0];
  int64_t D = a->in_shapes[0].shape[2];
  em_onnx_init_tensor(b, a->tn[0], a->t[0]);
  const char *shp = tmp(b, name, "shape"), *nb = tmp(b, name, "batch");
  const char *full = tmp(b, name, "token_shape"), *tok = tmp(b, name, "tokens");
  const char *c0 = em_onnx_printf(b, "%s/zero", name), *c1 = em_onnx_printf(b, "%s/one", name);
  const char *c_rest = em_onnx_printf(b, "%s/rest", name);
  if (b->failed) return;
  em_onnx_init_i64s(b, c0, 1, (int64_t[]){0});
  em_onnx_init_i64s(b, c1, 1, (int64_t[]){1});
  em_onnx_init_i64s(b, c_rest, 2, (int64_t[]){1, D});
  em_onnx_op1(b, "Shape", node_name(b, name, "Shape"), x, shp);
  em_onnx_node(b, "Slice", node_name(b, name, "Slice"), 3, (const char *[]){shp, c0, c1}, nb);
  Onnx__NodeProto *cn = em_onnx_node(b, "Concat", node_name(b, name, "Concat_shape"), 2,
                                     (const char *[]){nb, c_rest}, full);
  if (cn) em_onnx_attr_int(b, cn, "axis", 0);
  em_onnx_op2(b, "Expand", node_name(b, name, "Expand"), a->tn[0], full, tok);
  Onnx__NodeProto *n = em_onnx_node(b, "Concat", name, 2, (const char *[]){tok, x}, a->out);
  if (n) em_onnx_attr_int(b, n, "axis", 1);
}

static void em_onnx_sequence_pool(const form_args *a) {
  em_onnx_builder *b = a->b;
  const em_layer_node *nd = a->node;
  if (em_attr_choice(nd, attr_at(nd, "mode")) == 1) { /* mean */
    Onnx__NodeProto *n = em_onnx_node(b, "ReduceMean", nd->name, 1, &a->in[0], a->out);
    if (n) em_onnx_attr_ints(b, n, "axes", 1, (int64_t[]){1});
    if (n) em_onnx_attr_int(b, n, "keepdims", 0);
    return;
  }
  const char *c0 = em_onnx_printf(b, "%s/first", nd->name);
  if (b->failed) return;
  em_onnx_init_raw(b, c0, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL, (int64_t[]){0},
                   sizeof(int64_t));
  Onnx__NodeProto *n = em_onnx_node(b, "Gather", nd->name, 2, (const char *[]){a->in[0], c0},
                                    a->out);
  if (n) em_onnx_attr_int(b, n, "axis", 1);
}

EM_ONNX_FORM(em_onnx_to_sequence)
EM_ONNX_FORM(em_onnx_class_token)
EM_ONNX_FORM(em_onnx_sequence_pool)
EM_ONNX_FORM(em_onnx_positional)
EM_ONNX_FORM(em_onnx_attention)
EM_ONNX_FORM(em_onnx_encoder)
