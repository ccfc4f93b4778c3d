/* decode.c: em_decoder (em-nn.h), a model run a few positions at a time
 * over growing sequences, for generation.
 *
 * Each live node runs in spec order on the new positions alone: a
 * position-wise type (em_layer_type.position_wise) through its forward,
 * a type that looks across positions through its step with its own state
 * (the attention layers' KV caches, layer-attention.c). Everything runs
 * in inference mode without grad, so the numbers are the forward's on
 * the whole sequence, up to the order of the sums over keys. */
#include "nn-private.h"

#include <stdlib.h>
#include <string.h>

struct em_decoder {
  em_model *m;
  const em_spec *spec;
  int64_t batch, max_len, pos;
  void **state; /* per node */
};

bool em_spec_generates(const em_spec *s) {
  for (int i = 0; i <= s->output; i++)
    if (s->nodes[i].live && !s->nodes[i].type->position_wise && !s->nodes[i].type->step)
      return false;
  return true;
}

em_decoder *em_decoder_new(em_model *m, int64_t batch, int64_t max_len, em_error *err) {
  const em_spec *s = em_model_spec(m);
  if (s->input.dtype != EM_DTYPE_I64 || s->input.ndim != 2) {
    em_error_set(err, EM_ERR_INVALID, "model '%s' does not take token sequences (its input is "
                 "not i64 [L]): it cannot generate", s->name);
    return NULL;
  }
  if (batch < 1 || max_len < 1) {
    em_error_set(err, EM_ERR_INVALID, "generation needs a batch and a length of at least 1");
    return NULL;
  }
  for (int i = 0; i <= s->output; i++) {
    const em_spec_node *nd = &s->nodes[i];
    if (nd->live && !nd->type->position_wise && !nd->type->step) {
      em_error_set(err, EM_ERR_UNSUPPORTED, "model '%s': node '%s' (%s) looks across positions "
                   "and has no step for generation: only sequence layers (Embedding, "
                   "PositionalEmbedding, causal attention, position-wise layers) can generate",
                   s->name, nd->name, nd->type->name);
      return NULL;
    }
  }
  em_decoder *d = calloc(1, sizeof *d);
  if (d) d->state = calloc((size_t)s->n_nodes, sizeof *d->state);
  if (!d || !d->state) {
    free(d);
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  d->m = m;
  d->spec = s;
  d->batch = batch;
  d->max_len = max_len;
  return d;
}

static void free_states(em_decoder *d) {
  for (int i = 0; i < d->spec->n_nodes; i++) {
    if (d->state[i] && d->spec->nodes[i].type->state_free)
      d->spec->nodes[i].type->state_free(d->state[i]);
    d->state[i] = NULL;
  }
}

void em_decoder_free(em_decoder *d) {
  if (!d) return;
  free_states(d);
  free(d->state);
  free(d);
}

int64_t em_decoder_position(const em_decoder *d) { return d->pos; }

void em_decoder_reset(em_decoder *d) { d->pos = 0; /* caches are overwritten from 0 */ }

em_tensor *em_decoder_step(em_decoder *d, em_tensor *tokens, em_error *err) {
  const em_spec *s = d->spec;
  if (tokens->dtype != EM_DTYPE_I64 || tokens->ndim != 2 || tokens->shape[0] != d->batch ||
      tokens->shape[1] < 1) {
    char got[96];
    em_error_set(err, EM_ERR_SHAPE, "tokens must be i64 (%lld, T), got %s %s",
                 (long long)d->batch, em_dtype_name(tokens->dtype),
                 em_shape_str(tokens->ndim, tokens->shape, got, sizeof got));
    return NULL;
  }
  int64_t T = tokens->shape[1];
  if (d->pos + T > d->max_len) {
    em_error_set(err, EM_ERR_SHAPE, "%lld more positions would pass the %lld this generation "
                 "was set up for (at %lld now)", (long long)T, (long long)d->max_len,
                 (long long)d->pos);
    return NULL;
  }
  bool prev = em_no_grad_begin();
  em_forward_ctx ctx = {false, NULL};
  em_tensor **outs = em_scratch(sizeof *outs * (size_t)s->n_nodes);
  em_tensor *y = NULL;
  for (int i = 0; i <= s->output; i++) {
    const em_spec_node *nd = &s->nodes[i];
    outs[i] = NULL;
    if (!nd->live) continue;
    em_tensor *in[EM_LAYER_MAX_INPUTS], *params[EM_LAYER_MAX_PARAMS];
    for (int k = 0; k < nd->n_in; k++) in[k] = nd->in[k] < 0 ? tokens : outs[nd->in[k]];
    em_model_node_params(d->m, i, params);
    em_error e = {0};
    if (nd->type->check_input &&
        nd->type->check_input(&nd->view, nd->n_in, in, params, &ctx, &e) != EM_OK) {
      em_error_set(err, e.status, "model '%s': node '%s' (%s): %s", s->name, nd->name,
                   nd->type->name, e.msg);
      y = NULL;
      break;
    }
    y = nd->type->step ? nd->type->step(&nd->view, in[0], params, d->pos, d->max_len, &d->state[i], &e)
                       : nd->type->forward(&nd->view, nd->n_in, in, params, &ctx);
    if (!y) {
      em_error_set(err, e.status ? e.status : EM_ERR_INVALID, "model '%s': node '%s' (%s): %s",
                   s->name, nd->name, nd->type->name, e.msg[0] ? e.msg : "failed");
      break;
    }
    outs[i] = y;
  }
  em_grad_mode_restore(prev);
  if (!y) return NULL;
  if (y->ndim != 3) {
    em_error_set(err, EM_ERR_SHAPE, "model '%s': the output is not (N, L, V) logits",
                 s->name);
    return NULL;
  }
  d->pos += T;
  int64_t last[2] = {d->batch, y->shape[2]};
  return em_reshape(em_contiguous(em_slice(y, 1, T - 1, T, 1)), 2, last);
}
