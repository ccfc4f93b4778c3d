/* onnx-builder.c: the arena and the small constructors (nodes,
 * attributes, initializers) the ONNX export builds its graph with. */
#include "export-private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *em_onnx_alloc(em_onnx_builder *b, size_t n) {
  if (b->failed) return NULL;
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    void **nb = realloc(b->blocks, cap * sizeof *nb);
    if (!nb) {
      b->failed = true;
      return NULL;
    }
    b->blocks = nb;
    b->cap = cap;
  }
  void *p = calloc(1, n ? n : 1);
  if (!p) {
    b->failed = true;
    return NULL;
  }
  b->blocks[b->n++] = p;
  return p;
}

char *em_onnx_strdup(em_onnx_builder *b, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = em_onnx_alloc(b, n);
  if (p) memcpy(p, s, n);
  return p;
}

char *em_onnx_printf(em_onnx_builder *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = n >= 0 ? em_onnx_alloc(b, (size_t)n + 1) : NULL;
  if (!p) return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

void em_onnx_builder_free(em_onnx_builder *b) {
  for (size_t i = 0; i < b->n; i++) free(b->blocks[i]);
  free(b->blocks);
  memset(b, 0, sizeof *b);
}

/* Grows an arena-held pointer array (old blocks stay in the arena). */
static void **grow(em_onnx_builder *b, void **arr, size_t n, size_t *cap) {
  if (n < *cap) return arr;
  size_t nc = *cap ? 2 * *cap : 16;
  void **na = em_onnx_alloc(b, nc * sizeof *na);
  if (!na) return NULL;
  if (n) memcpy(na, arr, n * sizeof *na);
  *cap = nc;
  return na;
}

Onnx__NodeProto *em_onnx_node(em_onnx_builder *b, const char *op_type, const char *name,
                              int n_in, const char *const *inputs, const char *output) {
  Onnx__GraphProto *g = b->graph;
  Onnx__NodeProto *n = em_onnx_alloc(b, sizeof *n);
  char **in = em_onnx_alloc(b, (size_t)(n_in ? n_in : 1) * sizeof *in);
  char **out = em_onnx_alloc(b, sizeof *out);
  void **nodes = grow(b, (void **)g->node, g->n_node, &b->cap_node);
  if (!n || !in || !out || !nodes) return NULL;
  onnx__node_proto__init(n);
  n->op_type = em_onnx_strdup(b, op_type);
  n->name = em_onnx_strdup(b, name);
  for (int k = 0; k < n_in; k++) in[k] = em_onnx_strdup(b, inputs[k]);
  n->n_input = (size_t)n_in;
  n->input = in;
  out[0] = em_onnx_strdup(b, output);
  n->n_output = 1;
  n->output = out;
  g->node = (Onnx__NodeProto **)nodes;
  g->node[g->n_node++] = n;
  return b->failed ? NULL : n;
}

static Onnx__AttributeProto *attr_add(em_onnx_builder *b, Onnx__NodeProto *n, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
  if (!n) return NULL;
  Onnx__AttributeProto *a = em_onnx_alloc(b, sizeof *a);
  Onnx__AttributeProto **arr = em_onnx_alloc(b, (n->n_attribute + 1) * sizeof *arr);
  if (!a || !arr) return NULL;
  onnx__attribute_proto__init(a);
  a->name = em_onnx_strdup(b, name);
  a->has_type = 1;
  a->type = type;
  if (n->n_attribute) memcpy(arr, n->attribute, n->n_attribute * sizeof *arr);
  arr[n->n_attribute++] = a;
  n->attribute = arr;
  return a;
}

void em_onnx_attr_int(em_onnx_builder *b, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr_add(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (!a) return;
  a->has_i = 1;
  a->i = v;
}

void em_onnx_attr_float(em_onnx_builder *b, Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = attr_add(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (!a) return;
  a->has_f = 1;
  a->f = v;
}

void em_onnx_attr_ints(em_onnx_builder *b, Onnx__NodeProto *n, const char *name, int k,
                       const int64_t *v) {
  Onnx__AttributeProto *a = attr_add(b, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *vals = em_onnx_alloc(b, (size_t)k * sizeof *vals);
  if (!a || !vals) return;
  memcpy(vals, v, (size_t)k * sizeof *vals);
  a->n_ints = (size_t)k;
  a->ints = vals;
}

/* A new initializer with its dims; raw_data of nbytes left for the caller. */
static Onnx__TensorProto *init_add(em_onnx_builder *b, const char *name, int32_t dtype, int ndim,
                                   const int64_t *dims, size_t nbytes) {
  Onnx__GraphProto *g = b->graph;
  Onnx__TensorProto *t = em_onnx_alloc(b, sizeof *t);
  int64_t *d = em_onnx_alloc(b, (size_t)(ndim ? ndim : 1) * sizeof *d);
  uint8_t *raw = em_onnx_alloc(b, nbytes);
  void **inits = grow(b, (void **)g->initializer, g->n_initializer, &b->cap_init);
  if (!t || !d || !raw || !inits) return NULL;
  onnx__tensor_proto__init(t);
  t->name = em_onnx_strdup(b, name);
  t->has_data_type = 1;
  t->data_type = dtype;
  if (ndim) memcpy(d, dims, (size_t)ndim * sizeof *d);
  t->n_dims = (size_t)ndim;
  t->dims = d;
  t->has_raw_data = 1;
  t->raw_data.len = nbytes;
  t->raw_data.data = raw;
  g->initializer = (Onnx__TensorProto **)inits;
  g->initializer[g->n_initializer++] = t;
  return t;
}

/* Little-endian bytes of v at p (the host may be either). */
static void put_f32(uint8_t *p, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  for (int k = 0; k < 4; k++) p[k] = (uint8_t)(u >> (8 * k));
}

static void put_i64(uint8_t *p, int64_t v) {
  uint64_t u = (uint64_t)v;
  for (int k = 0; k < 8; k++) p[k] = (uint8_t)(u >> (8 * k));
}

void em_onnx_init_tensor(em_onnx_builder *b, const char *name, const em_tensor *t) {
  EM_ASSERT(t->dtype == EM_DTYPE_F32 || t->dtype == EM_DTYPE_F64);
  /* A tied parameter ("tie_weight": one tensor under one name, read by
   * two layers) is one initializer: the second layer reads the first's. */
  const Onnx__GraphProto *g = b->graph;
  for (size_t k = 0; k < g->n_initializer; k++)
    if (!strcmp(g->initializer[k]->name, name) && g->initializer[k]->n_dims == (size_t)t->ndim &&
        !memcmp(g->initializer[k]->dims, t->shape, (size_t)t->ndim * sizeof(int64_t)))
      return;
  int64_t numel = em_tensor_numel(t);
  Onnx__TensorProto *p = init_add(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, t->ndim, t->shape,
                                  (size_t)numel * 4);
  if (!p) return;
  /* Walk the (possibly strided) tensor in row-major order. */
  int64_t idx[EM_MAX_DIMS] = {0};
  const char *base = em_tensor_ptr(t);
  for (int64_t e = 0; e < numel; e++) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
    float v = t->dtype == EM_DTYPE_F32 ? ((const float *)base)[off]
                                       : (float)((const double *)base)[off];
    put_f32(p->raw_data.data + 4 * e, v);
    for (int d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
}

void em_onnx_init_scalar(em_onnx_builder *b, const char *name, float v) {
  Onnx__TensorProto *p = init_add(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL, 4);
  if (p) put_f32(p->raw_data.data, v);
}

void em_onnx_init_i64s(em_onnx_builder *b, const char *name, int k, const int64_t *v) {
  int64_t dim = k;
  Onnx__TensorProto *p =
      init_add(b, name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, &dim, (size_t)k * 8);
  if (!p) return;
  for (int i = 0; i < k; i++) put_i64(p->raw_data.data + 8 * i, v[i]);
}

char *em_onnx_tmp_name(em_onnx_builder *b, const char *base, const char *what) {
  return em_onnx_printf(b, "%s/%s_%d", base, what, b->tmp_count++);
}

void em_onnx_init_raw(em_onnx_builder *b, const char *name, int32_t dtype, int ndim,
                      const int64_t *dims, const void *data, size_t elem_size) {
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) numel *= dims[d];
  size_t nbytes = (size_t)numel * elem_size;
  Onnx__TensorProto *p = init_add(b, name, dtype, ndim, dims, nbytes);
  if (!p) return;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  const uint8_t *src = data;
  for (int64_t e = 0; e < numel; e++) /* each element little-endian */
    for (size_t k = 0; k < elem_size; k++)
      p->raw_data.data[e * elem_size + k] = src[e * elem_size + elem_size - 1 - k];
#else
  memcpy(p->raw_data.data, data, nbytes);
#endif
}
