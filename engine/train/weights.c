/* weights.c: a model's parameters and buffers to and from safetensors,
 * named as PyTorch names them (fc1.weight, bn1.running_mean, ...). A
 * training checkpoint loads too (its optimiser state, "optim/...", is not
 * the model's): a registered model version's weights are a checkpoint.
 * A model on a device is saved from host copies and loaded through one. */
#include "train-private.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-io.h"

em_status em_model_save(const em_model *m, const char *path, em_error *err) {
  int n = em_model_tensor_count(m);
  em_named_tensor *ts = calloc((size_t)(n ? n : 1), sizeof *ts);
  if (!ts) return em_error_set(err, EM_ERR_NOMEM, "out of memory saving '%s'", path);
  bool *owned = calloc((size_t)(n ? n : 1), sizeof *owned);
  em_status st = owned ? EM_OK : em_error_set(err, EM_ERR_NOMEM, "out of memory saving '%s'", path);
  for (int i = 0; i < n && st == EM_OK; i++)
    if (!(ts[i].t = em_train_host_copy(em_model_tensor(m, i, &ts[i].name), &owned[i], err)))
      st = em_error_prefix(err, "saving '%s'", path);
  const char *keys[1] = {"format"}, *vals[1] = {"ember"};
  if (st == EM_OK) st = em_safetensors_save(path, n, ts, 1, keys, vals, err);
  for (int i = 0; i < n && owned; i++)
    if (owned[i]) em_tensor_free((em_tensor *)ts[i].t);
  free(owned);
  free(ts);
  return st;
}

/* The values of a float tensor (contiguous, on the host) that are NaN or
 * infinite. */
static int64_t count_nonfinite(const em_tensor *t) {
  int64_t n = em_tensor_numel(t), bad = 0;
  if (t->dtype == EM_DTYPE_F32) {
    const float *v = em_f32(t);
    for (int64_t i = 0; i < n; i++) bad += !isfinite(v[i]);
  } else if (t->dtype == EM_DTYPE_F64) {
    const double *v = em_f64(t);
    for (int64_t i = 0; i < n; i++) bad += !isfinite(v[i]);
  }
  return bad;
}

/* t (host) as read from path: its values must all be numbers. */
static em_status check_finite(const em_tensor *t, const char *name, const char *path,
                              em_error *err) {
  int64_t bad = count_nonfinite(t);
  if (bad == 0) return EM_OK;
  return em_error_set(err, EM_ERR_FORMAT,
                      "'%s': tensor '%s' holds %lld NaN or infinite value%s of %lld; such "
                      "weights give no meaningful output (saved from a run that diverged?)",
                      path, name, (long long)bad, bad == 1 ? "" : "s",
                      (long long)em_tensor_numel(t));
}

static em_status unknown_tensor(const char *path, const char *name, em_error *err) {
  return em_error_set(err, EM_ERR_INVALID, /* a misfit, as a missing or reshaped one */
                      "'%s' holds a tensor '%s' that this model does not have; was it saved "
                      "from another model?", path, name);
}

typedef struct {
  em_model *m;
  const char *path;
  bool *taken; /* per model tensor */
} ckpt_take;

/* A checkpoint's tensor as it is verified: the model's ones are checked
 * and copied in, the optimiser's ("optim/...") passed over. */
static em_status take_model_tensor(const char *name, const em_tensor *t, void *ctx,
                                   em_error *err) {
  ckpt_take *c = ctx;
  if (strncmp(name, "optim/", 6) == 0) return EM_OK;
  int i = em_model_tensor_find(c->m, name);
  if (i < 0) return unknown_tensor(c->path, name, err);
  em_tensor *live = em_model_tensor(c->m, i, NULL);
  if (live->dtype != t->dtype || !em_tensor_same_shape(live, t)) {
    char a[160], b[160];
    return em_error_set(err, EM_ERR_SHAPE, "'%s': tensor '%.200s' is %s %s in the file, but "
                        "the model's is %s %s", c->path, name,
                        em_shape_str(t->ndim, t->shape, a, sizeof a), em_dtype_name(t->dtype),
                        em_shape_str(live->ndim, live->shape, b, sizeof b),
                        em_dtype_name(live->dtype));
  }
  EM_TRY(check_finite(t, name, c->path, err));
  em_tensor_copy_(live, t); /* onto the model's device, where it lives there */
  c->taken[i] = true;
  return EM_OK;
}

/* A training checkpoint (a registered version's weights): checked against
 * its checksum and state as resuming checks it, in the same pass that
 * reads the model's tensors out of it. */
static em_status load_checkpoint(em_model *m, em_safetensors *f, const char *path,
                                 em_error *err) {
  int n = em_model_tensor_count(m);
  ckpt_take c = {m, path, calloc((size_t)(n ? n : 1), sizeof(bool))};
  if (!c.taken) return em_error_set(err, EM_ERR_NOMEM, "out of memory loading '%s'", path);
  int64_t step, epoch;
  em_status st = em_checkpoint_verify_each(path, take_model_tensor, &c, &step, &epoch, err);
  for (int i = 0; i < n && st == EM_OK; i++) { /* every tensor of the model was there */
    if (c.taken[i]) continue;
    const char *name;
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    em_model_tensor(m, i, &name);
    st = em_safetensors_info(f, name, &dt, &nd, shape, err); /* says it is missing */
  }
  free(c.taken);
  return st;
}

em_status em_model_load(em_model *m, const char *path, em_error *err) {
  em_safetensors *f = em_safetensors_open(path, err);
  if (!f) return err ? err->status : EM_ERR_IO;
  const char *format = em_safetensors_meta(f, "format");
  if (format && strcmp(format, "ember-checkpoint") == 0) {
    em_status st = load_checkpoint(m, f, path, err);
    em_safetensors_close(f);
    return st;
  }
  int n = em_model_tensor_count(m);
  em_status st = EM_OK;
  /* Every tensor of the model must be in the file... */
  for (int i = 0; i < n && st == EM_OK; i++) {
    const char *name;
    em_tensor *t = em_model_tensor(m, i, &name);
    if (!em_on_device(t)) {
      st = em_safetensors_read(f, name, t, err);
      if (st == EM_OK) st = check_finite(t, name, path, err);
      continue;
    }
    em_tensor *h = em_tensor_new(t->dtype, t->ndim, t->shape, err); /* through the host */
    st = h ? em_safetensors_read(f, name, h, err) : (err ? err->status : EM_ERR_NOMEM);
    if (st == EM_OK) st = check_finite(h, name, path, err);
    if (st == EM_OK) em_tensor_copy_(t, h);
    em_tensor_free(h);
  }
  /* ...and the file must hold nothing the model does not know. */
  for (int k = 0; k < em_safetensors_count(f) && st == EM_OK; k++)
    if (em_model_tensor_find(m, em_safetensors_name(f, k)) < 0)
      st = unknown_tensor(path, em_safetensors_name(f, k), err);
  em_safetensors_close(f);
  return st;
}
