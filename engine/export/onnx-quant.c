/* onnx-quant.c: a dynamic int8 Linear layer (engine/quant) as ONNX
 * operators of opset 17 that compute exactly what the engine computes
 * (the formulas of engine/quant/quant-private.h, op for op in f32):
 *
 *   lo = Min(ReduceMin(x, axes=[-1]), 0)      hi = Max(ReduceMax(x), 0)
 *   sx = Max((hi * 0.5 - lo * 0.5) / 127.5, FLT_MIN)
 *        + ReduceSum(x * 0, axes=[-1])        (.., 1) per row; NaN for a row
 *                                             with a NaN or an infinity
 *   zp = Clip(Round(Neg(lo) / sx), 0, 255)
 *   qa = Cast<uint8>(Clip(Round(x * (1 / sx)) + zp, 0, 255))
 *   acc = MatMulInteger(qa, Wq^T + 128, b_zero_point 128)
 *         - Cast<int32>(zp) * wsum                       int32
 *   y = Cast<float>(acc) * (sx * w_scale) + bias
 *
 * The activations are quantised with float operators rather than
 * QuantizeLinear, and the zero point is subtracted through the weights'
 * column sums rather than MatMulInteger's a_zero_point: per-axis
 * QuantizeLinear takes one axis (an (N, L, D) input has two of rows), and
 * runtimes (onnxruntime among them) accept only a scalar a_zero_point,
 * while a per-row one is what keeps a sample's answer independent of its
 * batch. Round is ties-to-even like rintf, so the numbers are the same.
 *
 * The weights go out as uint8 (wq + 128) with a weight zero point of 128
 * (U8U8), not as int8 (U8S8), though MatMulInteger's integers are the same
 * either way: on x86 processors with AVX2 but no VNNI (AMD Zen 1-3, Intel
 * before Ice Lake) onnxruntime's U8S8 kernel multiplies with vpmaddubsw,
 * whose pair of u8 * s8 products saturates at 32767 (2 * 255 * 127 is
 * more), so it returned wrong sums: on a Zen 3 every row of fmnist-cnn's
 * int8 outputs differed from the engine's, by up to 0.03. Its U8U8 kernel
 * widens to int16 first and is exact (as the engine's AVX2 kernel, for
 * the same reason: quant-pmadd.c). */
#include "export-private.h"

#include <float.h>
#include <string.h>

static const char *op(em_onnx_builder *b, const char *type, const char *base, const char *what,
                      int n_in, const char *const *in, const char *out) {
  char *nn = em_onnx_printf(b, "%s/%s", base, what);
  char *v = out ? (char *)out : em_onnx_tmp_name(b, base, what);
  if (!nn || !v || !em_onnx_node(b, type, nn, n_in, in, v)) return NULL;
  return v;
}

#define OP(type, what, out, ...)                                                            \
  op(b, type, name, what, (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *)),    \
     (const char *[]){__VA_ARGS__}, out)

em_status em_onnx_quant_linear(em_onnx_builder *b, const char *name, const char *x,
                               const char *out, const em_quant_layer *L, const char *weight_name,
                               const char *bias_name, em_error *err) {
  const int64_t K = L->K, D = L->D;
  /* Initializers: Wq^T + 128 (D, K) uint8 and its zero point 128, w_scale
   * (K), wsum (K) int32, bias (K). */
  uint8_t *wt = em_onnx_alloc(b, (size_t)(K * D));
  const uint8_t w_zero = 128;
  char *n_w = em_onnx_printf(b, "%s_uint8", weight_name);
  char *n_wz = em_onnx_printf(b, "%s_zero_point", weight_name);
  char *n_ws = em_onnx_printf(b, "%s_scale", weight_name);
  char *n_sum = em_onnx_printf(b, "%s_colsum", weight_name);
  char *c0 = em_onnx_printf(b, "%s/zero", name), *c255 = em_onnx_printf(b, "%s/qmax", name);
  char *ctiny = em_onnx_printf(b, "%s/tiny", name), *c1 = em_onnx_printf(b, "%s/one", name);
  char *chalf = em_onnx_printf(b, "%s/half", name), *cstep = em_onnx_printf(b, "%s/qmax_half", name);
  char *caxes = em_onnx_printf(b, "%s/last_axis", name);
  if (b->failed) goto nomem;
  for (int64_t k = 0; k < K; k++)
    for (int64_t d = 0; d < D; d++) wt[d * K + k] = (uint8_t)(L->wq[k * D + d] + w_zero);
  int64_t wdims[2] = {D, K};
  em_onnx_init_raw(b, n_w, ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 2, wdims, wt, 1);
  em_onnx_init_raw(b, n_wz, ONNX__TENSOR_PROTO__DATA_TYPE__UINT8, 0, NULL, &w_zero, 1);
  em_onnx_init_raw(b, n_ws, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &K, L->w_scale, 4);
  em_onnx_init_raw(b, n_sum, ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, &K, L->w_sum, 4);
  if (L->bias) em_onnx_init_raw(b, bias_name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, &K, L->bias, 4);
  em_onnx_init_scalar(b, c0, 0.f);
  em_onnx_init_scalar(b, c255, 255.f);
  em_onnx_init_scalar(b, ctiny, FLT_MIN);
  em_onnx_init_scalar(b, c1, 1.f);
  em_onnx_init_scalar(b, chalf, 0.5f);
  em_onnx_init_scalar(b, cstep, 127.5f);
  const int64_t last_axis = -1;
  em_onnx_init_i64s(b, caxes, 1, &last_axis);
  if (b->failed) goto nomem;

  /* per-row scale and zero point (.., 1) */
  const char *lo_r = OP("ReduceMin", "ReduceMin", NULL, x);
  const char *hi_r = OP("ReduceMax", "ReduceMax", NULL, x);
  if (!lo_r || !hi_r) goto nomem;
  Onnx__GraphProto *g = b->graph;
  int64_t axes = -1;
  em_onnx_attr_ints(b, g->node[g->n_node - 2], "axes", 1, &axes);
  em_onnx_attr_int(b, g->node[g->n_node - 2], "keepdims", 1);
  em_onnx_attr_ints(b, g->node[g->n_node - 1], "axes", 1, &axes);
  em_onnx_attr_int(b, g->node[g->n_node - 1], "keepdims", 1);
  const char *lo = OP("Min", "lo", NULL, lo_r, c0);
  const char *hi = OP("Max", "hi", NULL, hi_r, c0);
  const char *hh = hi ? OP("Mul", "hi_half", NULL, hi, chalf) : NULL;
  const char *lh = lo ? OP("Mul", "lo_half", NULL, lo, chalf) : NULL;
  const char *range = lh && hh ? OP("Sub", "range_half", NULL, hh, lh) : NULL;
  const char *s0 = range ? OP("Div", "step", NULL, range, cstep) : NULL;
  const char *s1 = s0 ? OP("Max", "step_min", NULL, s0, ctiny) : NULL;
  const char *x0 = OP("Mul", "x_times_zero", NULL, x, c0);
  const char *nf = x0 ? OP("ReduceSum", "nonfinite", NULL, x0, caxes) : NULL;
  if (!nf) goto nomem;
  em_onnx_attr_int(b, g->node[g->n_node - 1], "keepdims", 1);
  const char *sx = s1 ? OP("Add", "x_scale", NULL, s1, nf) : NULL;
  const char *nlo = lo ? OP("Neg", "neg_lo", NULL, lo) : NULL;
  const char *zq = nlo && sx ? OP("Div", "zp_div", NULL, nlo, sx) : NULL;
  const char *zr = zq ? OP("Round", "zp_round", NULL, zq) : NULL;
  const char *zp = zr ? OP("Clip", "x_zero_point", NULL, zr, c0, c255) : NULL;
  /* the activations as uint8 (.., D) */
  const char *inv = sx ? OP("Div", "x_inv_scale", NULL, c1, sx) : NULL;
  const char *xd = inv ? OP("Mul", "x_mul", NULL, x, inv) : NULL;
  const char *xr = xd ? OP("Round", "x_round", NULL, xd) : NULL;
  const char *xz = xr && zp ? OP("Add", "x_add_zp", NULL, xr, zp) : NULL;
  const char *xc = xz ? OP("Clip", "x_clip", NULL, xz, c0, c255) : NULL;
  const char *qa = xc ? OP("Cast", "x_quantized", NULL, xc) : NULL;
  if (!qa) goto nomem;
  em_onnx_attr_int(b, g->node[g->n_node - 1], "to", ONNX__TENSOR_PROTO__DATA_TYPE__UINT8);
  /* the integer product, less zp * column sums */
  const char *acc = OP("MatMulInteger", "MatMulInteger", NULL, qa, n_w, "", n_wz);
  const char *zpi = acc ? OP("Cast", "zp_int32", NULL, zp) : NULL;
  if (!zpi) goto nomem;
  em_onnx_attr_int(b, g->node[g->n_node - 1], "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT32);
  const char *corr = OP("Mul", "zp_correction", NULL, zpi, n_sum);
  const char *acc2 = corr ? OP("Sub", "acc", NULL, acc, corr) : NULL;
  const char *accf = acc2 ? OP("Cast", "acc_float", NULL, acc2) : NULL;
  if (!accf) goto nomem;
  em_onnx_attr_int(b, g->node[g->n_node - 1], "to", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
  /* rescale, bias */
  const char *sc = OP("Mul", "out_scale", NULL, sx, n_ws);
  const char *y = sc ? OP("Mul", "rescale", L->bias ? NULL : out, accf, sc) : NULL;
  if (y && L->bias) y = OP("Add", "bias", out, y, bias_name);
  if (!y || b->failed) goto nomem;
  return EM_OK;
nomem:
  return em_error_set(err, EM_ERR_NOMEM, "node '%s': out of memory building the ONNX graph",
                      name);
}
