/* onnx-export.c: em_export_onnx: the model proto (opset 17, a dynamic
 * batch, metadata), the graph walk over the spec's nodes, and the atomic
 * write (temporary file, fsync, rename, fsync of the folder). */
#include "export-private.h"
#include "em-io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ONNX_IR_VERSION 8 /* the IR that opset 17 ships with (onnx 1.12) */

/* A value info: name, elem type, (batch "batch", ...dims), the first of
 * dims "sequence" when seq (a token model's free length). */
static Onnx__ValueInfoProto *value_info(em_onnx_builder *b, const char *name, int32_t elem,
                                        int ndim, const int64_t *dims /* no batch */, bool seq) {
  Onnx__ValueInfoProto *v = em_onnx_alloc(b, sizeof *v);
  Onnx__TypeProto *tp = em_onnx_alloc(b, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = em_onnx_alloc(b, sizeof *tt);
  Onnx__TensorShapeProto *sh = em_onnx_alloc(b, sizeof *sh);
  Onnx__TensorShapeProto__Dimension **dv = em_onnx_alloc(b, (size_t)(ndim + 1) * sizeof *dv);
  if (!v || !tp || !tt || !sh || !dv) return NULL;
  onnx__value_info_proto__init(v);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sh);
  for (int d = 0; d <= ndim; d++) {
    dv[d] = em_onnx_alloc(b, sizeof **dv);
    if (!dv[d]) return NULL;
    onnx__tensor_shape_proto__dimension__init(dv[d]);
    if (d == 0 || (d == 1 && seq)) {
      dv[d]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dv[d]->dim_param = em_onnx_strdup(b, d ? "sequence" : "batch");
    } else {
      dv[d]->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dv[d]->dim_value = dims[d - 1];
    }
  }
  sh->n_dim = (size_t)ndim + 1;
  sh->dim = dv;
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  tt->shape = sh;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  v->name = em_onnx_strdup(b, name);
  v->type = tp;
  return v;
}

static void meta_add(em_onnx_builder *b, Onnx__ModelProto *mp, const char *key, const char *value) {
  if (!value) return;
  Onnx__StringStringEntryProto *e = em_onnx_alloc(b, sizeof *e);
  Onnx__StringStringEntryProto **arr =
      em_onnx_alloc(b, (mp->n_metadata_props + 1) * sizeof *arr);
  if (!e || !arr) return;
  onnx__string_string_entry_proto__init(e);
  e->key = em_onnx_strdup(b, key);
  e->value = em_onnx_strdup(b, value);
  if (mp->n_metadata_props) memcpy(arr, mp->metadata_props, mp->n_metadata_props * sizeof *arr);
  arr[mp->n_metadata_props++] = e;
  mp->metadata_props = arr;
}

/* The graph's nodes, in spec order (a topological order). */
static em_status build_graph(em_onnx_builder *b, const em_model *m, em_error *err) {
  const em_spec *spec = em_model_spec(m);
  int n = spec->n_nodes;
  const char **value = em_onnx_alloc(b, (size_t)n * sizeof *value);
  if (!value) return em_error_set(err, EM_ERR_NOMEM, "out of memory building the ONNX graph");
  em_status st = EM_OK;
  for (int i = 0; i < n && st == EM_OK; i++) {
    const em_spec_node *sn = &spec->nodes[i];
    if (!sn->live) continue; /* the output does not depend on it */
    const char *in[EM_LAYER_MAX_INPUTS];
    for (int k = 0; k < sn->n_in; k++) in[k] = sn->in[k] < 0 ? "input" : value[sn->in[k]];
    bool is_out = i == spec->output;
    if (em_onnx_layer_is_identity(sn->type)) {
      /* The identity at inference: later nodes read its input. */
      value[i] = in[0];
      if (is_out && !em_onnx_node(b, "Identity", sn->name, 1, in, "output"))
        return em_error_set(err, EM_ERR_NOMEM, "out of memory building the ONNX graph");
      continue;
    }
    /* Values take their node's name; a node named like the graph's input
     * or output gets "<name>/value", which no node name can be (they hold
     * no '/'; "output_value" could be another node's). */
    value[i] = is_out ? "output"
               : (!strcmp(sn->name, "input") || !strcmp(sn->name, "output"))
                   ? em_onnx_printf(b, "%s/value", sn->name)
                   : sn->name;
    em_tensor *t[EM_LAYER_MAX_PARAMS];
    const char *tn[EM_LAYER_MAX_PARAMS];
    for (int k = 0; k < sn->n_decl; k++) {
      char full[512];
      snprintf(full, sizeof full, "%s.%s", sn->name, sn->decl[k].name);
      int idx = em_model_tensor_find(m, full);
      EM_ASSERT(idx >= 0);
      t[k] = em_model_tensor(m, idx, &tn[k]);
    }
    const em_quant_layer *ql = em_quant_plan_layer(em_model_quant_plan(m), i);
    if (ql) /* int8 (engine/quant): exported as what the engine computes */
      st = em_onnx_quant_linear(b, sn->name, in[0], value[i], ql, tn[0],
                                sn->n_decl > 1 ? tn[1] : NULL, err);
    else
      st = em_onnx_layer(b, spec, i, in, value[i], t, tn, err);
  }
  return st;
}

static bool write_all(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= (size_t)w;
  }
  return true;
}

static em_status write_atomic(const char *path, const uint8_t *data, size_t len, em_error *err) {
  em_atomic_file f;
  em_status st = em_atomic_begin(path, &f, err);
  if (st != EM_OK) return st;
  if (!write_all(f.fd, data, len))
    st = em_error_set(err, EM_ERR_IO, "cannot write '%s': %s", f.tmp, strerror(errno));
  return em_atomic_end(&f, st, err);
}

em_status em_export_onnx(const em_model *m, const char *path, const em_export_meta *meta,
                         em_error *err) {
  if (!m || !path || !path[0])
    return em_error_set(err, EM_ERR_INVALID, "ONNX export: no model or no output file given");
  const em_spec *spec = em_model_spec(m);
  em_export_meta none = {0};
  if (!meta) meta = &none;

  em_onnx_builder b = {0};
  Onnx__ModelProto *mp = em_onnx_alloc(&b, sizeof *mp);
  Onnx__GraphProto *g = em_onnx_alloc(&b, sizeof *g);
  Onnx__OperatorSetIdProto *ops = em_onnx_alloc(&b, sizeof *ops);
  Onnx__OperatorSetIdProto **opsv = em_onnx_alloc(&b, sizeof *opsv);
  Onnx__ValueInfoProto **inv = em_onnx_alloc(&b, sizeof *inv);
  Onnx__ValueInfoProto **outv = em_onnx_alloc(&b, sizeof *outv);
  if (b.failed) {
    em_onnx_builder_free(&b);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory building the ONNX model");
  }
  onnx__model_proto__init(mp);
  onnx__graph_proto__init(g);
  onnx__operator_set_id_proto__init(ops);
  b.graph = g;

  const char *name = meta->model_name ? meta->model_name : em_spec_name(spec);
  g->name = em_onnx_strdup(&b, name);
  int64_t dims[EM_MAX_DIMS], odims[EM_MAX_DIMS];
  int nd = em_spec_input_shape(spec, dims), ond = em_spec_output_shape(spec, odims);
  bool idx = em_spec_input_dtype(spec) == EM_DTYPE_I64;
  /* tokens in, a row of logits per token out (a language model): the
   * length is free (every sequence form reads it off the graph) */
  bool seq = idx && nd == 1 && ond == 2 && odims[0] == dims[0] && em_spec_generates(spec);
  b.free_length = seq;
  em_status st = build_graph(&b, m, err);
  if (st == EM_OK) {
    inv[0] = value_info(&b, "input",
                        idx ? ONNX__TENSOR_PROTO__DATA_TYPE__INT64
                            : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT,
                        nd, dims, seq);
    outv[0] = value_info(&b, "output", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ond, odims, seq);
    g->n_input = g->n_output = 1;
    g->input = inv;
    g->output = outv;

    ops->domain = em_onnx_strdup(&b, "");
    ops->has_version = 1;
    ops->version = EM_ONNX_OPSET;
    opsv[0] = ops;
    mp->n_opset_import = 1;
    mp->opset_import = opsv;
    mp->has_ir_version = 1;
    mp->ir_version = ONNX_IR_VERSION;
    mp->producer_name = em_onnx_strdup(&b, "ember");
    if (meta->ember_version) mp->producer_version = em_onnx_strdup(&b, meta->ember_version);
    if (meta->model_version > 0) {
      mp->has_model_version = 1;
      mp->model_version = meta->model_version;
    }
    const char *desc = meta->description ? meta->description : em_spec_description(spec);
    if (desc && desc[0]) mp->doc_string = em_onnx_strdup(&b, desc);
    mp->graph = g;

    meta_add(&b, mp, "model_name", name);
    meta_add(&b, mp, "ember_version", meta->ember_version);
    if (meta->registry_model) meta_add(&b, mp, "registry_model", meta->registry_model);
    if (meta->model_version > 0)
      meta_add(&b, mp, "registry_version", em_onnx_printf(&b, "%d", meta->model_version));
    if (meta->run_id > 0)
      meta_add(&b, mp, "registry_run", em_onnx_printf(&b, "%lld", (long long)meta->run_id));
    if (em_model_quant_mode(m) == EM_QUANT_INT8_DYNAMIC)
      meta_add(&b, mp, "quantization",
               "int8-dynamic: Linear layers with per-output-channel symmetric int8 weights, "
               "per-row asymmetric uint8 activations, int32 accumulation, f32 rescale and bias");
    if (b.failed) st = em_error_set(err, EM_ERR_NOMEM, "out of memory building the ONNX model");
  }
  if (st == EM_OK) {
    size_t len = onnx__model_proto__get_packed_size(mp);
    /* protobuf's parsers stop at 2 GiB a message: weights past that go in
     * ONNX's external data files, which this exporter does not write */
    uint8_t *buf = len <= (size_t)INT32_MAX ? malloc(len ? len : 1) : NULL;
    if (len > (size_t)INT32_MAX) {
      st = em_error_set(err, EM_ERR_UNSUPPORTED,
                        "the model is %.2f GiB as ONNX, over the 2 GiB a protobuf file can "
                        "hold (no reader would load it); weights in external data files are "
                        "not written by this exporter",
                        (double)len / (1u << 30));
    } else if (!buf) {
      st = em_error_set(err, EM_ERR_NOMEM, "out of memory serialising the ONNX model (%zu bytes)",
                        len);
    } else {
      size_t w = onnx__model_proto__pack(mp, buf);
      EM_ASSERT(w == len);
      st = write_atomic(path, buf, len, err);
      free(buf);
    }
  }
  em_onnx_builder_free(&b);
  if (st != EM_OK) em_error_prefix(err, "exporting '%s' to ONNX", name);
  return st;
}
