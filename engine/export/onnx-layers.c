/* onnx-layers.c: each built-in layer type as ONNX operators (opset 17),
 * with inference semantics: Dropout is the identity (handled by the
 * caller, which aliases its output), BatchNorm2d uses running statistics,
 * GELU is the exact erf form Ember computes. The forms are registered
 * where plugin layers' forms are (em_layer_onnx_add) and reached the same
 * way (onnx-plugin.c's em_onnx_form_layer); `forms` below is the table. */
#include "onnx-forms.h"

#include "../plugin/plugin-host.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* Index of attribute `name` in the node's type table (an invariant: the
 * built-in types declare these). */
static int attr_index(const em_layer_node *n, const char *name) {
  for (int i = 0; i < n->type->n_attrs; i++)
    if (!strcmp(n->type->attrs[i].name, name)) return i;
  EM_ASSERT(!"attribute missing from a built-in layer type");
  return -1;
}

static int64_t attr_i(const em_layer_node *n, const char *name, int k) {
  return em_attr_int(n, attr_index(n, name), k);
}

void em_onnx_linear(const form_args *a) {
  em_onnx_builder *b = a->b;
  const char *name = a->node->name, *x = a->in[0], *out = a->out;
  em_tensor *const *t = a->t;
  const char *const *tn = a->tn;
  bool bias = a->n_t > 1;
  em_onnx_init_tensor(b, tn[0], t[0]);
  if (bias) em_onnx_init_tensor(b, tn[1], t[1]);
  if (a->in_shapes[0].ndim == 2) { /* (N, D) @ (K, D)^T + (K) */
    const char *in[3] = {x, tn[0], bias ? tn[1] : NULL};
    Onnx__NodeProto *n = em_onnx_node(b, "Gemm", name, bias ? 3 : 2, in, out);
    em_onnx_attr_int(b, n, "transB", 1);
    return;
  }
  /* (N, ..., D) @ (D, K) [+ (K)]: MatMul broadcasts over the leading dims. */
  em_tensor wt = *t[0];
  wt.shape[0] = t[0]->shape[1];
  wt.shape[1] = t[0]->shape[0];
  wt.stride[0] = t[0]->stride[1];
  wt.stride[1] = t[0]->stride[0];
  char *wt_name = em_onnx_printf(b, "%s.T", tn[0]);
  if (!wt_name) return;
  em_onnx_init_tensor(b, wt_name, &wt);
  if (!bias) {
    em_onnx_op2(b, "MatMul", name, x, wt_name, out);
    return;
  }
  char *mm = em_onnx_tmp_name(b, name, "matmul");
  char *nm = em_onnx_printf(b, "%s/matmul", name), *na = em_onnx_printf(b, "%s/add", name);
  if (!mm || !nm || !na) return;
  em_onnx_op2(b, "MatMul", nm, x, wt_name, mm);
  em_onnx_op2(b, "Add", na, mm, tn[1], out);
}

static void conv2d(const form_args *a) {
  em_onnx_builder *b = a->b;
  const em_layer_node *node = a->node;
  const char *x = a->in[0], *out = a->out;
  em_tensor *const *t = a->t;
  const char *const *tn = a->tn;
  bool bias = a->n_t > 1;
  em_onnx_init_tensor(b, tn[0], t[0]);
  if (bias) em_onnx_init_tensor(b, tn[1], t[1]);
  const char *in[3] = {x, tn[0], bias ? tn[1] : NULL};
  Onnx__NodeProto *n = em_onnx_node(b, "Conv", node->name, bias ? 3 : 2, in, out);
  int64_t k[2] = {attr_i(node, "kernel_size", 0), attr_i(node, "kernel_size", 1)};
  int64_t s[2] = {attr_i(node, "stride", 0), attr_i(node, "stride", 1)};
  int64_t d[2] = {attr_i(node, "dilation", 0), attr_i(node, "dilation", 1)};
  int64_t ph = attr_i(node, "padding", 0), pw = attr_i(node, "padding", 1);
  int64_t p[4] = {ph, pw, ph, pw}; /* begins, then ends */
  em_onnx_attr_ints(b, n, "kernel_shape", 2, k);
  em_onnx_attr_ints(b, n, "strides", 2, s);
  em_onnx_attr_ints(b, n, "dilations", 2, d);
  em_onnx_attr_ints(b, n, "pads", 4, p);
  em_onnx_attr_int(b, n, "group", attr_i(node, "groups", 0));
}

static void pool2d(const form_args *a, bool avg) {
  em_onnx_builder *b = a->b;
  const em_layer_node *node = a->node;
  const char *x = a->in[0], *out = a->out;
  int ks = attr_index(node, "kernel_size"), ss = attr_index(node, "stride");
  int64_t k[2], s[2], p[4];
  for (int a = 0; a < 2; a++) {
    k[a] = em_attr_int(node, ks, a);
    s[a] = node->attr[ss].given ? em_attr_int(node, ss, a) : k[a]; /* PyTorch's default */
    p[a] = p[a + 2] = attr_i(node, "padding", a);
  }
  bool padded = p[0] || p[1];
  if (avg && padded) {
    /* Ember averages over the whole window, padding included. ONNX says
     * that with count_include_pad=1, but consumers differ (OpenCV 4.6
     * ignores it), so the zeros are padded explicitly: (N, C, H+2ph,
     * W+2pw), then an unpadded AveragePool. */
    int64_t pads[8] = {0, 0, p[0], p[1], 0, 0, p[0], p[1]};
    char *pn = em_onnx_printf(b, "%s/pads", node->name);
    char *v = em_onnx_tmp_name(b, node->name, "padded");
    char *nn = em_onnx_printf(b, "%s/Pad", node->name);
    if (!pn || !v || !nn) return;
    em_onnx_init_i64s(b, pn, 8, pads);
    em_onnx_op2(b, "Pad", nn, x, pn, v); /* mode "constant", value 0 */
    x = v;
    memset(p, 0, sizeof p);
  }
  Onnx__NodeProto *n = em_onnx_node(b, avg ? "AveragePool" : "MaxPool", node->name, 1, &x, out);
  em_onnx_attr_ints(b, n, "kernel_shape", 2, k);
  em_onnx_attr_ints(b, n, "strides", 2, s);
  em_onnx_attr_ints(b, n, "pads", 4, p);
  if (avg) em_onnx_attr_int(b, n, "count_include_pad", 1);
}

static void flatten(const form_args *a) {
  em_onnx_builder *b = a->b;
  const em_layer_node *node = a->node;
  const char *x = a->in[0], *out = a->out;
  const em_shape *in = &a->in_shapes[0];
  int s = (int)attr_i(node, "start_dim", 0), e = (int)attr_i(node, "end_dim", 0);
  s = s < 0 ? s + in->ndim : s;
  e = e < 0 ? e + in->ndim : e;
  if (s == 1 && e == in->ndim - 1) {
    Onnx__NodeProto *n = em_onnx_node(b, "Flatten", node->name, 1, &x, out);
    em_onnx_attr_int(b, n, "axis", 1);
    return;
  }
  /* Reshape to [0 (keep)..., -1, the dims after end_dim]. */
  int64_t shape[EM_MAX_DIMS];
  int k = 0;
  for (int d = 0; d < s; d++) shape[k++] = 0;
  shape[k++] = -1;
  for (int d = e + 1; d < in->ndim; d++) shape[k++] = in->shape[d];
  char *sn = em_onnx_printf(b, "%s/shape", node->name);
  if (!sn) return;
  em_onnx_init_i64s(b, sn, k, shape);
  em_onnx_op2(b, "Reshape", node->name, x, sn, out);
}

/* 0.5 x (1 + erf(x / sqrt 2)), as in engine/ops/unary.c. */
/* 0.5 x (1 + tanh(k (x + c x^3))), k = sqrt(2 / pi), c = 0.044715 */
static void gelu_tanh(const form_args *a) {
  em_onnx_builder *b = a->b;
  const char *name = a->node->name, *x = a->in[0], *out = a->out;
  static const char *const what[] = {"square", "cube", "cubic", "inner", "scaled", "tanh",
                                     "one_plus", "product"};
  char *v[8], *n[8];
  for (int k = 0; k < 8; k++) {
    v[k] = em_onnx_tmp_name(b, name, what[k]);
    n[k] = em_onnx_printf(b, "%s/%s", name, what[k]);
  }
  char *c_c = em_onnx_printf(b, "%s/c", name), *c_k = em_onnx_printf(b, "%s/k", name);
  char *c_one = em_onnx_printf(b, "%s/one", name), *c_half = em_onnx_printf(b, "%s/half", name);
  char *n_out = em_onnx_printf(b, "%s/Mul_half", name);
  if (b->failed) return;
  em_onnx_init_scalar(b, c_c, 0.044715f);
  em_onnx_init_scalar(b, c_k, (float)sqrt(2.0 / M_PI));
  em_onnx_init_scalar(b, c_one, 1.f);
  em_onnx_init_scalar(b, c_half, 0.5f);
  em_onnx_op2(b, "Mul", n[0], x, x, v[0]);
  em_onnx_op2(b, "Mul", n[1], v[0], x, v[1]);
  em_onnx_op2(b, "Mul", n[2], v[1], c_c, v[2]);
  em_onnx_op2(b, "Add", n[3], x, v[2], v[3]);
  em_onnx_op2(b, "Mul", n[4], v[3], c_k, v[4]);
  em_onnx_op1(b, "Tanh", n[5], v[4], v[5]);
  em_onnx_op2(b, "Add", n[6], v[5], c_one, v[6]);
  em_onnx_op2(b, "Mul", n[7], x, v[6], v[7]);
  em_onnx_op2(b, "Mul", n_out, v[7], c_half, out);
}

void em_onnx_gelu(const form_args *a) {
  em_onnx_builder *b = a->b;
  const char *name = a->node->name, *x = a->in[0], *out = a->out;
  if (em_attr_choice(a->node, attr_index(a->node, "approximate")) == 1) {
    gelu_tanh(a);
    return;
  }
  char *c_sqrt2 = em_onnx_printf(b, "%s/sqrt2", name), *c_one = em_onnx_printf(b, "%s/one", name);
  char *c_half = em_onnx_printf(b, "%s/half", name);
  char *v_div = em_onnx_tmp_name(b, name, "div"), *v_erf = em_onnx_tmp_name(b, name, "erf");
  char *v_add = em_onnx_tmp_name(b, name, "add"), *v_mul = em_onnx_tmp_name(b, name, "mul");
  char *n_div = em_onnx_printf(b, "%s/Div", name), *n_erf = em_onnx_printf(b, "%s/Erf", name);
  char *n_add = em_onnx_printf(b, "%s/Add", name), *n_mul = em_onnx_printf(b, "%s/Mul", name);
  char *n_mul2 = em_onnx_printf(b, "%s/Mul_half", name);
  if (b->failed) return;
  em_onnx_init_scalar(b, c_sqrt2, (float)sqrt(2.0));
  em_onnx_init_scalar(b, c_one, 1.f);
  em_onnx_init_scalar(b, c_half, 0.5f);
  em_onnx_op2(b, "Div", n_div, x, c_sqrt2, v_div);
  em_onnx_op1(b, "Erf", n_erf, v_div, v_erf);
  em_onnx_op2(b, "Add", n_add, v_erf, c_one, v_add);
  em_onnx_op2(b, "Mul", n_mul, x, v_add, v_mul);
  em_onnx_op2(b, "Mul", n_mul2, v_mul, c_half, out);
}

/* LayerNorm over the last nd dims (flattened to D), in primitive
 * operators:
 *   d = x - mean(x); y = d / sqrt(mean(d^2) + eps) * weight + bias
 * (the biased variance, as Ember and PyTorch compute it). The means are
 * MatMuls of (rows, D) with a (D, 1) column of 1/D and go back to
 * (rows, D) through a MatMul with a (1, D) row of ones, so every
 * elementwise op sees equal shapes. Opset 17 has LayerNormalization, but
 * consumers that predate it (Debian 12's OpenCV 4.6) cannot load it, nor
 * broadcast (N, D) against (N, 1); this form runs everywhere and costs
 * O(D) extra weights. */
void em_onnx_layer_norm(const form_args *a) {
  em_onnx_builder *b = a->b;
  const char *name = a->node->name, *x = a->in[0], *out = a->out;
  em_tensor *const *t = a->t;
  const char *const *tn = a->tn;
  const em_shape *in = &a->in_shapes[0];
  int64_t D = em_tensor_numel(t[0]);
  const em_layer_node *node = a->node;
  /* Weight and bias as (D) (they are contiguous model tensors). */
  em_tensor flat[2];
  for (int k = 0; k < 2; k++) {
    EM_ASSERT(em_tensor_is_contiguous(t[k]));
    flat[k] = *t[k];
    flat[k].ndim = 1;
    flat[k].shape[0] = D;
    flat[k].stride[0] = 1;
    em_onnx_init_tensor(b, tn[k], &flat[k]);
  }
  char *c_eps = em_onnx_printf(b, "%s/eps", name), *c_avg = em_onnx_printf(b, "%s/avg", name);
  char *c_ones = em_onnx_printf(b, "%s/ones", name);
  if (b->failed) return;
  em_onnx_init_scalar(b, c_eps, (float)em_attr_float(node, attr_index(node, "eps")));
  em_tensor col = {.dtype = EM_DTYPE_F32, .ndim = 2, .shape = {D, 1}, .stride = {1, 1}};
  em_tensor row = {.dtype = EM_DTYPE_F32, .ndim = 2, .shape = {1, D}, .stride = {D, 1}};
  float *vals = em_onnx_alloc(b, (size_t)D * sizeof *vals);
  if (!vals) return;
  for (int64_t k = 0; k < D; k++) vals[k] = 1.f / (float)D;
  col.data = vals;
  em_onnx_init_tensor(b, c_avg, &col);
  for (int64_t k = 0; k < D; k++) vals[k] = 1.f;
  row.data = vals;
  em_onnx_init_tensor(b, c_ones, &row);

  /* (rows, D): MatMuls over more than 2 dims trip older consumers
   * (OpenCV 4.6 refuses some and miscomputes others), so anything else is
   * reshaped to 2-D and back. */
  bool reshape = in->ndim > 2;
  const char *xf = x; /* (rows, D) */
  if (reshape) {
    int64_t shape[2] = {-1, D};
    char *sn = em_onnx_printf(b, "%s/flat_shape", name), *v = em_onnx_tmp_name(b, name, "flat");
    char *nn = em_onnx_printf(b, "%s/Reshape_flat", name);
    if (!sn || !v || !nn) return;
    em_onnx_init_i64s(b, sn, 2, shape);
    xf = em_onnx_op2(b, "Reshape", nn, x, sn, v);
  }
  static const char *const what[] = {"mean1", "mean", "centered", "square", "var1", "var_eps",
                                     "std1", "std", "normalized", "scaled", "shifted"};
  char *v[11], *nn[11];
  for (int k = 0; k < 11; k++) {
    v[k] = em_onnx_tmp_name(b, name, what[k]);
    nn[k] = em_onnx_printf(b, "%s/%s", name, what[k]);
  }
  if (b->failed || !xf) return;
  const char *y = reshape ? v[10] : out;
  em_onnx_op2(b, "MatMul", nn[0], xf, c_avg, v[0]);   /* (rows, 1) */
  em_onnx_op2(b, "MatMul", nn[1], v[0], c_ones, v[1]); /* (rows, D) */
  em_onnx_op2(b, "Sub", nn[2], xf, v[1], v[2]);
  em_onnx_op2(b, "Mul", nn[3], v[2], v[2], v[3]);
  em_onnx_op2(b, "MatMul", nn[4], v[3], c_avg, v[4]);
  em_onnx_op2(b, "Add", nn[5], v[4], c_eps, v[5]);
  em_onnx_op1(b, "Sqrt", nn[6], v[5], v[6]);
  em_onnx_op2(b, "MatMul", nn[7], v[6], c_ones, v[7]);
  em_onnx_op2(b, "Div", nn[8], v[2], v[7], v[8]);
  em_onnx_op2(b, "Mul", nn[9], v[8], tn[0], v[9]);
  em_onnx_op2(b, "Add", nn[10], v[9], tn[1], y);
  if (reshape) { /* back to the input's shape, the batch as it comes */
    int64_t shape[EM_MAX_DIMS];
    shape[0] = -1;
    for (int k = 1; k < in->ndim; k++) shape[k] = in->shape[k];
    char *sn = em_onnx_printf(b, "%s/out_shape", name);
    char *n2 = em_onnx_printf(b, "%s/Reshape_back", name);
    if (!sn || !n2) return;
    if (b->free_length) /* the input's own shape, its length as it comes */
      em_onnx_op1(b, "Shape", em_onnx_printf(b, "%s/Shape", name), x, sn);
    else
      em_onnx_init_i64s(b, sn, in->ndim, shape);
    em_onnx_op2(b, "Reshape", n2, y, sn, out);
  }
}

static void batch_norm2d(const form_args *a) {
  for (int k = 0; k < 4; k++) em_onnx_init_tensor(a->b, a->tn[k], a->t[k]);
  const char *ins[5] = {a->in[0], a->tn[0], a->tn[1], a->tn[2], a->tn[3]};
  Onnx__NodeProto *n = em_onnx_node(a->b, "BatchNormalization", a->node->name, 5, ins, a->out);
  em_onnx_attr_float(a->b, n, "epsilon",
                     (float)em_attr_float(a->node, attr_index(a->node, "eps")));
}

static void relu(const form_args *a) { em_onnx_op1(a->b, "Relu", a->node->name, a->in[0], a->out); }
static void sigmoid(const form_args *a) {
  em_onnx_op1(a->b, "Sigmoid", a->node->name, a->in[0], a->out);
}
static void tanh_(const form_args *a) { em_onnx_op1(a->b, "Tanh", a->node->name, a->in[0], a->out); }

static void silu(const form_args *a) { /* x sigmoid(x) */
  em_onnx_builder *b = a->b;
  const char *name = a->node->name;
  char *v = em_onnx_tmp_name(b, name, "sigmoid");
  char *ns = em_onnx_printf(b, "%s/Sigmoid", name), *nm = em_onnx_printf(b, "%s/Mul", name);
  if (v && ns && nm) {
    em_onnx_op1(b, "Sigmoid", ns, a->in[0], v);
    em_onnx_op2(b, "Mul", nm, a->in[0], v, a->out);
  }
}

static void max_pool2d(const form_args *a) { pool2d(a, false); }
static void avg_pool2d(const form_args *a) { pool2d(a, true); }

static void embedding(const form_args *a) { /* weight[indices] */
  em_onnx_init_tensor(a->b, a->tn[0], a->t[0]);
  Onnx__NodeProto *n = em_onnx_node(a->b, "Gather", a->node->name, 2,
                                    (const char *[]){a->tn[0], a->in[0]}, a->out);
  em_onnx_attr_int(a->b, n, "axis", 0);
}

static void add(const form_args *a) { /* a chain of binary Adds */
  em_onnx_builder *b = a->b;
  const char *name = a->node->name, *acc = a->in[0];
  for (int k = 1; k < a->n_in && !b->failed; k++) {
    bool last = k == a->n_in - 1;
    const char *o = last ? a->out : em_onnx_tmp_name(b, name, "sum");
    const char *nn = a->n_in == 2 ? name : em_onnx_printf(b, "%s/Add_%d", name, k);
    if (o && nn) acc = em_onnx_op2(b, "Add", nn, acc, a->in[k], o);
  }
}

/* Each built-in form as an em_layer_onnx_fn, the plugins' kind: the
 * builder is the graph's (built-in forms name their nodes after the layer
 * node, as they always have). */
#define FORM(f) static EM_ONNX_FORM(f)
FORM(em_onnx_linear)
FORM(conv2d)
FORM(batch_norm2d)
FORM(em_onnx_layer_norm)
FORM(relu)
FORM(em_onnx_gelu)
FORM(silu)
FORM(sigmoid)
FORM(tanh_)
FORM(max_pool2d)
FORM(avg_pool2d)
FORM(flatten)
FORM(embedding)
FORM(add)

/* The built-in layer types' ONNX forms, added to the registry plugin
 * layers' forms are in (em_layer_onnx_add) on the first export. Dropout
 * has none: it is the identity at inference, which the exporter writes by
 * aliasing its input (em_onnx_layer_exportable says so). */
static const struct {
  const em_layer_type *type;
  em_layer_onnx_fn fn;
} forms[] = {
    {&em_layer_linear, em_onnx_linear_form},         {&em_layer_conv2d, conv2d_form},
    {&em_layer_batch_norm2d, batch_norm2d_form}, {&em_layer_layer_norm, em_onnx_layer_norm_form},
    {&em_layer_relu, relu_form},             {&em_layer_gelu, em_onnx_gelu_form},
    {&em_layer_silu, silu_form},             {&em_layer_sigmoid, sigmoid_form},
    {&em_layer_tanh, tanh__form},            {&em_layer_max_pool2d, max_pool2d_form},
    {&em_layer_avg_pool2d, avg_pool2d_form}, {&em_layer_flatten, flatten_form},
    {&em_layer_embedding, embedding_form},   {&em_layer_add, add_form},
    {&em_layer_positional_embedding, em_onnx_positional_form},
    {&em_layer_multihead_attention, em_onnx_attention_form},
    {&em_layer_transformer_encoder_layer, em_onnx_encoder_form},
    {&em_layer_to_sequence, em_onnx_to_sequence_form},
    {&em_layer_class_token, em_onnx_class_token_form},
    {&em_layer_sequence_pool, em_onnx_sequence_pool_form},
};

static pthread_once_t forms_once = PTHREAD_ONCE_INIT;

static void register_forms(void) {
  for (size_t k = 0; k < sizeof forms / sizeof *forms; k++)
    EM_ASSERT(em_layer_onnx_add(forms[k].type, forms[k].fn, NULL) == EM_OK);
}

void em_onnx_forms_register(void) { pthread_once(&forms_once, register_forms); }

bool em_onnx_layer_is_identity(const em_layer_type *type) { return type == &em_layer_dropout; }

bool em_onnx_layer_exportable(const em_layer_type *type) {
  em_onnx_forms_register();
  return em_onnx_layer_is_identity(type) || em_layer_onnx_find(type) != NULL;
}
