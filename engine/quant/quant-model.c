/* quant-model.c: em_model_quantize (em-quant.h): the weights of a
 * model's Linear layers quantised per output channel and packed for the
 * kernel this CPU runs best, kept as the model's plan beside its f32
 * weights. */
#include "quant-private.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

em_status em_quant_mode_parse(const char *text, em_quant_mode *out, em_error *err) {
  if (text && !strcmp(text, "int8")) {
    *out = EM_QUANT_INT8_DYNAMIC;
    return EM_OK;
  }
  if (text && (!strcmp(text, "none") || !strcmp(text, "off"))) {
    *out = EM_QUANT_NONE;
    return EM_OK;
  }
  return em_error_set(err, EM_ERR_INVALID,
                      "unknown quantisation '%s': choose int8 (dynamic int8 Linear layers) or "
                      "none",
                      text ? text : "");
}

void em_quant_layer_clear(em_quant_layer *L) {
  free(L->wq);
  free(L->w_scale);
  free(L->w_sum);
  free(L->bias);
  free(L->packed);
  memset(L, 0, sizeof *L);
}

em_status em_quant_layer_init(em_quant_layer *L, int node, const float *w, const float *bias,
                              int64_t K, int64_t D, const em_qgemm_kernel *k, const char *what,
                              em_error *err) {
  memset(L, 0, sizeof *L);
  L->node = node;
  L->K = K;
  L->D = D;
  L->Dp = (D + EM_QUANT_K_ALIGN - 1) / EM_QUANT_K_ALIGN * EM_QUANT_K_ALIGN;
  size_t psize = k->packed_size(K, L->Dp);
  L->wq = malloc((size_t)(K * D));
  L->w_scale = malloc((size_t)K * sizeof *L->w_scale);
  L->w_sum = malloc((size_t)K * sizeof *L->w_sum);
  L->bias = bias ? malloc((size_t)K * sizeof *L->bias) : NULL;
  L->packed = psize ? aligned_alloc(64, (psize + 63) / 64 * 64) : NULL;
  if (!L->wq || !L->w_scale || !L->w_sum || (bias && !L->bias) || (psize && !L->packed)) {
    em_quant_layer_clear(L);
    return em_error_set(err, EM_ERR_NOMEM, "%s: out of memory quantising %lld x %lld weights",
                        what, (long long)K, (long long)D);
  }
  for (int64_t n = 0; n < K; n++) {
    const float *wr = w + n * D; /* (D) */
    float amax = 0.f;
    for (int64_t d = 0; d < D; d++) {
      if (!isfinite(wr[d])) {
        em_quant_layer_clear(L);
        return em_error_set(err, EM_ERR_NUMERIC,
                            "%s: weight [%lld, %lld] is %g: cannot quantise (retrain or load "
                            "other weights)",
                            what, (long long)n, (long long)d, (double)wr[d]);
      }
      amax = fabsf(wr[d]) > amax ? fabsf(wr[d]) : amax;
    }
    float s = amax / 127.f;
    if (!(s > 0.f)) s = 1.f; /* an all-zero row quantises to zeros */
    int32_t sum = 0;
    for (int64_t d = 0; d < D; d++) {
      float q = rintf(wr[d] / s);
      q = q < -127.f ? -127.f : q > 127.f ? 127.f : q;
      L->wq[n * D + d] = (int8_t)q;
      sum += (int32_t)q;
    }
    L->w_scale[n] = s;
    L->w_sum[n] = sum;
  }
  if (bias) memcpy(L->bias, bias, (size_t)K * sizeof *L->bias);
  if (psize) k->pack(L->wq, K, D, L->Dp, L->packed);
  return EM_OK;
}

void em_quant_plan_free(em_quant_plan *p) {
  if (!p) return;
  for (int i = 0; i < p->n_layers; i++) em_quant_layer_clear(&p->layers[i]);
  free(p->layers);
  free(p->node_layer);
  free(p);
}

const em_quant_layer *em_quant_plan_layer(const em_quant_plan *p, int node) {
  if (!p || node < 0 || node >= p->n_nodes || p->node_layer[node] < 0) return NULL;
  return &p->layers[p->node_layer[node]];
}

em_quant_mode em_model_quant_mode(const em_model *m) {
  const em_quant_plan *p = m ? em_model_quant_plan(m) : NULL;
  return p ? p->mode : EM_QUANT_NONE;
}

const char *em_quant_kernel_best_name(void) { return em_qgemm_kernel_best()->name; }

/* EMBER_QUANT_KERNEL=NAME picks a kernel (benchmarks, tests); else the
 * best this CPU runs. */
static const em_qgemm_kernel *pick_kernel(em_error *err) {
  const char *want = getenv("EMBER_QUANT_KERNEL");
  if (!want || !want[0]) return em_qgemm_kernel_best();
  const em_qgemm_kernel *k = em_qgemm_kernel_find(want);
  if (!k || !k->supported()) {
    char names[256] = "";
    for (int i = 0; i < em_qgemm_kernel_count(); i++) {
      const em_qgemm_kernel *c = em_qgemm_kernel_at(i);
      if (!c->supported()) continue;
      strncat(names, names[0] ? ", " : "", sizeof names - strlen(names) - 1);
      strncat(names, c->name, sizeof names - strlen(names) - 1);
    }
    em_error_set(err, EM_ERR_UNSUPPORTED,
                 "EMBER_QUANT_KERNEL=%s: %s; this machine runs: %s", want,
                 k ? "this CPU lacks its instructions" : "no such kernel", names);
    return NULL;
  }
  return k;
}

static bool is_linear(const em_layer_type *t) {
  return !strcmp(t->name, "Linear") && t == em_layer_type_find("Linear");
}

em_status em_model_quantize(em_model *m, em_quant_mode mode, em_quant_report *rep,
                            em_error *err) {
  if (rep) memset(rep, 0, sizeof *rep);
  const em_spec *spec = em_model_spec(m);
  if (mode == EM_QUANT_NONE) {
    em_model_set_quant_plan(m, NULL);
    if (rep) rep->kernel = "none";
    return EM_OK;
  }
  if (mode != EM_QUANT_INT8_DYNAMIC)
    return em_error_set(err, EM_ERR_INVALID, "model '%s': unknown quantisation mode %d",
                        em_spec_name(spec), (int)mode);
  if (em_model_dtype(m) != EM_DTYPE_F32)
    return em_error_set(err, EM_ERR_UNSUPPORTED,
                        "model '%s': int8 quantisation needs an f32 model, this one is %s",
                        em_spec_name(spec), em_dtype_name(em_model_dtype(m)));
  const em_qgemm_kernel *k = pick_kernel(err);
  if (!k) return err ? err->status : EM_ERR_UNSUPPORTED;

  int n = em_spec_node_count(spec);
  em_quant_plan *p = calloc(1, sizeof *p);
  if (p) {
    p->node_layer = malloc((size_t)n * sizeof *p->node_layer);
    p->layers = calloc((size_t)n, sizeof *p->layers);
  }
  if (!p || !p->node_layer || !p->layers) {
    em_quant_plan_free(p);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  }
  p->mode = mode;
  p->kernel = k;
  p->n_nodes = n;
  em_quant_report r = {.kernel = k->name};
  for (int i = 0; i < n; i++) {
    p->node_layer[i] = -1;
    const char *name = em_spec_node_name(spec, i);
    char wn[512], bn[512];
    snprintf(wn, sizeof wn, "%s.weight", name);
    snprintf(bn, sizeof bn, "%s.bias", name);
    int wi = em_model_tensor_find(m, wn), bi = em_model_tensor_find(m, bn);
    const em_tensor *w = wi >= 0 ? em_model_tensor(m, wi, NULL) : NULL;
    const em_tensor *b = bi >= 0 ? em_model_tensor(m, bi, NULL) : NULL;
    /* Linear layers too wide for exact int32 sums stay f32. */
    if (!is_linear(em_spec_node_type(spec, i)) || !w || w->shape[1] > EM_QUANT_MAX_FEATURES) {
      r.layers_kept++;
      if (is_linear(em_spec_node_type(spec, i)) && w) r.layers_too_wide++;
      continue;
    }
    EM_ASSERT(em_tensor_is_contiguous(w) && (!b || em_tensor_is_contiguous(b)));
    int64_t K = w->shape[0], D = w->shape[1];
    char what[600];
    snprintf(what, sizeof what, "model '%s': node '%s'", em_spec_name(spec), name);
    em_status st = em_quant_layer_init(&p->layers[p->n_layers], i, em_f32(w),
                                       b ? em_f32(b) : NULL, K, D, k, what, err);
    if (st != EM_OK) {
      em_quant_plan_free(p);
      return st;
    }
    p->node_layer[i] = p->n_layers++;
    r.layers_quantized++;
    r.weight_bytes_f32 += K * D * 4;
    r.weight_bytes_int8 += K * D + K * 4;
  }
  em_model_set_quant_plan(m, p);
  if (rep) *rep = r;
  return EM_OK;
}
