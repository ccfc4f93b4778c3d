/* model.c: a spec instantiated into persistent parameters and buffers,
 * and its forward pass.
 *
 * Tensors are kept in PyTorch's state-dict order (nodes in spec order,
 * each node's declarations in order) and named "<node>.<param>". Each
 * tensor is initialised from its own stream, seeded from the model seed
 * and its name, so adding a node does not change the others' values.
 * Forward allocates only scope memory (the node-output table is scratch),
 * so a steady training step does no malloc here. A quantised model
 * (em_model_quantize, engine/quant) runs its int8 Linear nodes through
 * the plan it holds, in inference only. em_model_to_device moves every
 * tensor to a device; forward then wants its input there. A Linear node
 * or Conv2d node whose output only a ReLU node reads runs with it as one
 * op (em_linear_relu, em_conv2d_relu: the same numbers, one tensor and one
 * pass fewer; em_spec_node_fuses_relu); the profiler then shows the pair
 * under the first node's name. */
#include "nn-private.h"
#include "em-device.h"
#include "em-profile.h"
#include "../quant/quant-layer.h"

#include <stdlib.h>
#include <string.h>

struct em_model {
  em_spec *spec; /* own copy */
  em_model_options opts;
  int n_tensors;
  em_tensor **tensors;
  char **names;
  bool *buffer;
  int *node_first; /* each node's first entry in node_tensor */
  int *node_tensor; /* per node, per declaration: its tensor (a tied weight: its owner's) */
  int n_params;
  int *param_idx; /* trainable tensors, in order */
  em_rng rng;     /* dropout stream when the caller gives none */
  em_quant_plan *quant; /* int8 Linear layers (engine/quant), or NULL */
  em_device device;     /* where every tensor lives */
  bool *fuse_relu;      /* em_spec_node_fuses_relu(spec, i) */
};

/* Which Linear and Conv2d nodes run with the ReLU after them (see the
 * top). */
static void find_fusions(em_model *m) {
  for (int i = 0; i < m->spec->n_nodes; i++) m->fuse_relu[i] = em_spec_node_fuses_relu(m->spec, i);
}

static uint64_t name_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

static void init_tensor(em_tensor *t, const em_param_decl *d, const em_model_options *o,
                        uint64_t seed) {
  em_rng r;
  em_rng_seed(&r, seed ^ name_hash(t->name));
  switch (d->init) {
  case EM_INIT_ZEROS: em_tensor_fill_(t, 0); break;
  case EM_INIT_ONES: em_tensor_fill_(t, 1); break;
  case EM_INIT_UNIFORM: em_init_uniform(t, -d->a, d->a, &r); break;
  case EM_INIT_NORMAL: em_init_normal(t, 0, d->a, &r); break;
  case EM_INIT_WEIGHT: em_init_weight(t, o->weight_init, d->fan_in, d->fan_out, &r); break;
  default: EM_ASSERT(!"unknown init kind");
  }
}

em_model *em_model_new(const em_spec *spec, uint64_t seed, em_error *err) {
  return em_model_new_with(spec, seed, NULL, err);
}

em_model *em_model_new_with(const em_spec *spec, uint64_t seed, const em_model_options *opts,
                            em_error *err) {
  em_model_options o = {EM_DTYPE_F32, EM_WEIGHT_INIT_DEFAULT};
  if (opts) o = *opts;
  if (o.dtype != EM_DTYPE_F32 && o.dtype != EM_DTYPE_F64) {
    em_error_set(err, EM_ERR_UNSUPPORTED, "model '%s': dtype %s is not supported (f32 or f64)",
                 spec->name, em_dtype_name(o.dtype));
    return NULL;
  }
  if ((unsigned)o.weight_init > EM_WEIGHT_INIT_XAVIER_NORMAL) {
    em_error_set(err, EM_ERR_INVALID, "model '%s': unknown weight init scheme %d", spec->name,
                 (int)o.weight_init);
    return NULL;
  }
  em_model *m = calloc(1, sizeof *m);
  if (!m) {
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  m->opts = o;
  m->spec = em_spec_copy(spec, err);
  if (!m->spec) {
    free(m);
    return NULL;
  }
  const em_spec *s = m->spec;
  size_t total = 0, n_nodes = (size_t)s->n_nodes; /* both small: checked by the spec */
  for (int i = 0; i < s->n_nodes; i++) total += (size_t)s->nodes[i].n_decl;
  m->tensors = calloc(total + 1, sizeof *m->tensors);
  m->names = calloc(total + 1, sizeof *m->names);
  m->buffer = calloc(total + 1, sizeof *m->buffer);
  m->param_idx = calloc(total + 1, sizeof *m->param_idx);
  m->node_first = calloc(n_nodes, sizeof *m->node_first);
  m->node_tensor = calloc(total + 1, sizeof *m->node_tensor);
  m->fuse_relu = calloc(n_nodes, sizeof *m->fuse_relu);
  if (!m->tensors || !m->names || !m->buffer || !m->param_idx || !m->node_first ||
      !m->node_tensor || !m->fuse_relu) {
    em_model_free(m);
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  int slot = 0;
  for (int i = 0; i < s->n_nodes; i++) {
    const em_spec_node *nd = &s->nodes[i];
    m->node_first[i] = slot;
    for (int k = 0; k < nd->n_decl; k++, slot++) {
      const em_param_decl *d = &nd->decl[k];
      if (k == nd->tie_decl) { /* the owner's tensor (an earlier node: made already) */
        m->node_tensor[slot] = m->node_tensor[m->node_first[nd->tie_node] + nd->tie_src];
        continue;
      }
      size_t len = strlen(nd->name) + strlen(d->name) + 2;
      char *name = malloc(len);
      em_dtype dt = d->dtype == EM_DTYPE_I64 ? EM_DTYPE_I64 : o.dtype;
      em_error e = {0};
      em_tensor *t = name ? em_tensor_new(dt, d->ndim, d->shape, &e) : NULL;
      if (!t) {
        if (!name) em_error_set(&e, EM_ERR_NOMEM, "out of memory");
        em_error_set(err, e.status, "model '%s': node '%s': parameter '%s': %s", s->name,
                     nd->name, d->name, e.msg);
        free(name);
        em_model_free(m);
        return NULL;
      }
      snprintf(name, len, "%s.%s", nd->name, d->name);
      t->name = name;
      int idx = m->n_tensors++;
      m->node_tensor[slot] = idx;
      m->tensors[idx] = t;
      m->names[idx] = name;
      m->buffer[idx] = d->buffer;
      init_tensor(t, d, &o, seed);
      if (!d->buffer) {
        em_tensor_set_requires_grad(t, true);
        m->param_idx[m->n_params++] = idx;
      }
    }
  }
  find_fusions(m);
  em_rng_seed(&m->rng, seed ^ 0x5DEECE66Dull);
  return m;
}

void em_model_free(em_model *m) {
  if (!m) return;
  for (int i = 0; i < m->n_tensors; i++) {
    em_tensor_free(m->tensors[i]);
    free(m->names[i]);
  }
  free(m->tensors);
  free(m->names);
  free(m->buffer);
  free(m->param_idx);
  free(m->node_first);
  free(m->node_tensor);
  free(m->fuse_relu);
  em_quant_plan_free(m->quant);
  em_spec_free(m->spec);
  free(m);
}

const em_spec *em_model_spec(const em_model *m) { return m->spec; }
em_dtype em_model_dtype(const em_model *m) { return m->opts.dtype; }
int em_model_param_count(const em_model *m) { return m->n_params; }
int em_model_tensor_count(const em_model *m) { return m->n_tensors; }
em_quant_plan *em_model_quant_plan(const em_model *m) { return m->quant; }

void em_model_set_quant_plan(em_model *m, em_quant_plan *p) {
  if (m->quant != p) em_quant_plan_free(m->quant);
  m->quant = p;
}

em_tensor *em_model_param(const em_model *m, int i, const char **name) {
  EM_ASSERT(i >= 0 && i < m->n_params);
  int k = m->param_idx[i];
  if (name) *name = m->names[k];
  return m->tensors[k];
}

em_tensor *em_model_tensor(const em_model *m, int i, const char **name) {
  EM_ASSERT(i >= 0 && i < m->n_tensors);
  if (name) *name = m->names[i];
  return m->tensors[i];
}

int em_model_tensor_find(const em_model *m, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (!strcmp(m->names[i], name)) return i;
  /* a tied weight's own name ("head.weight") finds its owner's tensor */
  const em_spec *s = m->spec;
  for (int i = 0; i < s->n_nodes; i++) {
    const em_spec_node *nd = &s->nodes[i];
    size_t n = strlen(nd->name);
    if (nd->tie_decl >= 0 && !strncmp(name, nd->name, n) && name[n] == '.' &&
        !strcmp(name + n + 1, nd->decl[nd->tie_decl].name))
      return m->node_tensor[m->node_first[i] + nd->tie_decl];
  }
  return -1;
}

bool em_model_tensor_is_buffer(const em_model *m, int i) {
  EM_ASSERT(i >= 0 && i < m->n_tensors);
  return m->buffer[i];
}

void em_model_zero_grad(em_model *m) {
  for (int i = 0; i < m->n_params; i++) em_tensor_zero_grad(m->tensors[m->param_idx[i]]);
}

em_device em_model_device(const em_model *m) { return m->device; }

em_status em_model_to_device(em_model *m, em_device d, em_error *err) {
  if (em_device_eq(d, m->device)) return EM_OK;
  const em_spec *s = m->spec;
  char dn[32];
  em_device_str(d, dn, sizeof dn);
  if (!em_device_is_cpu(d)) {
    if (m->opts.dtype != EM_DTYPE_F32)
      return em_error_set(err, EM_ERR_UNSUPPORTED,
                          "model '%s' is %s: only f32 models run on %s (f64 is for gradient "
                          "checks on the CPU)", s->name, em_dtype_name(m->opts.dtype), dn);
    if (m->quant)
      return em_error_set(err, EM_ERR_UNSUPPORTED,
                          "model '%s' is quantised (int8): its int8 layers run on the CPU only",
                          s->name);
    if (em_device_check(d, err) != EM_OK) return err ? err->status : EM_ERR_INVALID;
  }
  em_device from = m->device;
  for (int i = 0; i < m->n_tensors; i++) {
    em_error e = {0};
    if (em_tensor_move_(m->tensors[i], d, &e) == EM_OK) continue;
    for (int k = i - 1; k >= 0; k--) em_tensor_move_(m->tensors[k], from, NULL); /* undo */
    return em_error_set(err, e.status, "model '%s': moving '%s' to %s: %s", s->name,
                        m->names[i], dn, e.msg);
  }
  m->device = d;
  return EM_OK;
}

/* ---- forward -------------------------------------------------------------------- */

static em_status check_input(const em_model *m, const em_tensor *x, em_error *err) {
  const em_spec *s = m->spec;
  char want[160], got[160];
  if (!em_device_eq(x->device, m->device))
    return em_error_set(err, EM_ERR_INVALID,
                        "model '%s': the input is on %s but the model is on %s; move the input "
                        "first (em_to_device)", s->name, em_device_str(x->device, got, sizeof got),
                        em_device_str(m->device, want, sizeof want));
  em_dtype dt = s->input.dtype == EM_DTYPE_I64 ? EM_DTYPE_I64 : m->opts.dtype;
  if (x->dtype != dt)
    return em_error_set(err, EM_ERR_INVALID, "model '%s': input has dtype %s, expected %s",
                        s->name, em_dtype_name(x->dtype), em_dtype_name(dt));
  bool ok = x->ndim == s->input.ndim && x->shape[0] >= 1;
  for (int d = 1; ok && d < x->ndim; d++) ok = x->shape[d] == s->input.shape[d];
  if (!ok)
    return em_error_set(err, EM_ERR_SHAPE, "model '%s': input has shape %s, expected %s", s->name,
                        em_shape_str(x->ndim, x->shape, got, sizeof got),
                        em_shape_format(&s->input, want, sizeof want));
  return EM_OK;
}

em_tensor *em_model_forward(em_model *m, em_tensor *x, bool training, em_rng *rng,
                            em_error *err) {
  const em_spec *s = m->spec;
  if (check_input(m, x, err) != EM_OK) return NULL;
  if (m->quant && (training || em_grad_enabled())) { /* int8 layers have no backward */
    em_error_set(err, EM_ERR_UNSUPPORTED,
                 "model '%s' is quantised (int8) and runs inference only: %s; run it in "
                 "no-grad mode, or undo the quantisation first",
                 s->name, training ? "training mode is on" : "gradients are wanted");
    return NULL;
  }
  em_forward_ctx ctx = {training, rng ? rng : &m->rng};
  em_tensor **outs = em_scratch(sizeof *outs * (size_t)s->n_nodes);
  bool relu_done = false;
  for (int i = 0; i <= s->output; i++) {
    const em_spec_node *nd = &s->nodes[i];
    outs[i] = NULL;
    if (!nd->live) continue;
    if (relu_done) { /* this ReLU ran inside the Linear before it */
      outs[i] = outs[i - 1];
      relu_done = false;
      continue;
    }
    em_tensor *in[EM_LAYER_MAX_INPUTS];
    for (int k = 0; k < nd->n_in; k++) in[k] = nd->in[k] < 0 ? x : outs[nd->in[k]];
    em_tensor *params[EM_LAYER_MAX_PARAMS];
    for (int k = 0; k < nd->n_decl; k++) params[k] = m->tensors[m->node_tensor[m->node_first[i] + k]];
    if (nd->type->check_input) {
      em_error e = {0};
      em_status st = nd->type->check_input(&nd->view, nd->n_in, in, params, &ctx, &e);
      if (st != EM_OK) {
        em_error_set(err, st, "model '%s': node '%s' (%s): %s", s->name, nd->name,
                     nd->type->name, e.msg);
        return NULL;
      }
    }
    /* the profiler and anomaly mode name the layer its ops ran in */
    int span = em_profile_layer_begin(nd->name);
    const em_quant_layer *ql = em_quant_plan_layer(m->quant, i);
    relu_done = m->fuse_relu[i]; /* the int8 layer's ReLU too, in its rescale */
    em_tensor *y = ql          ? em_quant_linear_forward(ql, m->quant->kernel, in[0], relu_done)
                   : relu_done ? (nd->type == &em_layer_conv2d ? em_conv2d_relu_layer_forward
                                                               : em_linear_relu_layer_forward)(
                                     &nd->view, in[0], params)
                               : nd->type->forward(&nd->view, nd->n_in, in, params, &ctx);
    em_profile_layer_end(span);
    /* what shape inference promised (a plugin's bug shows here, not later) */
    bool ok = y && y->ndim == nd->out.ndim && y->shape[0] == x->shape[0];
    for (int d = 1; ok && d < y->ndim; d++) ok = y->shape[d] == nd->out.shape[d];
    if (!ok) {
      char got[160], want[160];
      em_error_set(err, EM_ERR_SHAPE,
                   "model '%s': node '%s' (%s): forward gave %s but shape inference said %s",
                   s->name, nd->name, nd->type->name,
                   y ? em_shape_str(y->ndim, y->shape, got, sizeof got) : "nothing",
                   em_shape_format(&nd->out, want, sizeof want));
      return NULL;
    }
    /* and its dtype and device: the next layer's kernels assume them */
    em_dtype want_dt = nd->out.dtype == EM_DTYPE_I64 ? EM_DTYPE_I64 : m->opts.dtype;
    if (y->dtype != want_dt || !em_device_eq(y->device, m->device)) {
      char dev[32], want_dev[32];
      em_error_set(err, EM_ERR_INVALID,
                   "model '%s': node '%s' (%s): forward gave a %s tensor on %s, where the model "
                   "runs in %s on %s", s->name, nd->name, nd->type->name,
                   em_dtype_name(y->dtype), em_device_str(y->device, dev, sizeof dev),
                   em_dtype_name(want_dt), em_device_str(m->device, want_dev, sizeof want_dev));
      return NULL;
    }
    outs[i] = y;
  }
  return outs[s->output];
}

void em_model_node_params(const em_model *m, int i, em_tensor **params) {
  const em_spec_node *nd = &m->spec->nodes[i];
  for (int k = 0; k < nd->n_decl; k++) params[k] = m->tensors[m->node_tensor[m->node_first[i] + k]];
}
