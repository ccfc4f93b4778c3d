/* train-helpers.c: see train-helpers.h. */
#include "train-helpers.h"

#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "em-io.h"

char *th_tmpdir(void) {
  GError *gerr = NULL;
  char *dir = g_dir_make_tmp("ember-train-XXXXXX", &gerr);
  g_assert_no_error(gerr);
  return dir;
}

void th_rm_rf(const char *dir) {
  GDir *d = g_dir_open(dir, 0, NULL);
  if (!d) return;
  const char *name;
  while ((name = g_dir_read_name(d))) {
    char *p = g_build_filename(dir, name, NULL);
    if (g_file_test(p, G_FILE_TEST_IS_DIR)) th_rm_rf(p);
    else g_unlink(p);
    g_free(p);
  }
  g_dir_close(d);
  g_rmdir(dir);
}

void th_setup_init(th_setup *s, const char *spec_json, int64_t n_train, int ndim,
                   const int64_t *shape, int classes) {
  em_error err = {0};
  s->spec = em_spec_parse(spec_json, "test spec", &err);
  if (!s->spec) g_error("%s", err.msg);
  em_train_config_defaults(&s->cfg);
  g_assert_cmpint(em_train_config_from_spec(&s->cfg, s->spec, &err), ==, EM_OK);
  s->cfg.threads = 1;
  s->train = em_dataset_synthetic_split(n_train, ndim, shape, classes, 0.5, 1, true, &err);
  s->test = em_dataset_synthetic_split(64, ndim, shape, classes, 0.5, 1, false, &err);
  g_assert_nonnull(s->train);
  g_assert_nonnull(s->test);
}

void th_setup_free(th_setup *s) {
  em_dataset_free(s->train);
  em_dataset_free(s->test);
  em_spec_free(s->spec);
}

void th_record_init(th_record *r) {
  memset(r, 0, sizeof *r);
  r->ckpt_paths = g_ptr_array_new_with_free_func(g_free);
  r->ckpt_kinds = g_ptr_array_new_with_free_func(g_free);
  r->divergences = g_ptr_array_new_with_free_func(g_free);
  r->epoch_losses = g_array_new(FALSE, FALSE, sizeof(double));
  r->ckpt_accuracy = g_array_new(FALSE, FALSE, sizeof(double));
  r->epoch_indices = g_array_new(FALSE, FALSE, sizeof(int64_t));
}

void th_record_clear(th_record *r) {
  g_ptr_array_unref(r->ckpt_paths);
  g_ptr_array_unref(r->ckpt_kinds);
  g_ptr_array_unref(r->divergences);
  g_array_unref(r->epoch_losses);
  g_array_unref(r->ckpt_accuracy);
  g_array_unref(r->epoch_indices);
}

static bool on_event(const em_train_event *ev, void *user) {
  th_record *r = user;
  r->last_lr_scale = ev->lr_scale;
  switch (ev->kind) {
  case EM_EVENT_STEP: r->steps++; break;
  case EM_EVENT_EPOCH_END:
    g_array_append_val(r->epoch_losses, ev->loss);
    g_array_append_val(r->epoch_indices, ev->epoch);
    break;
  case EM_EVENT_CHECKPOINT:
    g_assert_nonnull(ev->path);
    g_assert_true(g_path_is_absolute(ev->path));
    g_assert_true(g_file_test(ev->path, G_FILE_TEST_IS_REGULAR));
    g_ptr_array_add(r->ckpt_paths, g_strdup(ev->path));
    g_ptr_array_add(r->ckpt_kinds, g_strdup(ev->checkpoint_kind));
    g_array_append_val(r->ckpt_accuracy, ev->test_accuracy);
    break;
  case EM_EVENT_DIVERGENCE:
    g_assert_nonnull(ev->message);
    g_ptr_array_add(r->divergences, g_strdup(ev->message));
    break;
  case EM_EVENT_START:
  case EM_EVENT_EVAL:
  case EM_EVENT_WARNING:
  case EM_EVENT_PROFILE:
  case EM_EVENT_DONE: break;
  }
  return r->hook ? r->hook(r->trainer, ev, r->hook_user) : true;
}

em_status th_run(th_setup *s, const char *dir, const char *resume, uint64_t model_seed,
                 th_record *rec, em_error *err) {
  em_model *m = em_model_new(s->spec, model_seed, err);
  g_assert_nonnull(m);
  em_train_config cfg = s->cfg;
  snprintf(cfg.checkpoint_dir, sizeof cfg.checkpoint_dir, "%s", dir ? dir : "");
  if (!dir) cfg.checkpoint_every = 0;
  em_trainer *t = em_trainer_new(m, &cfg, s->train, s->test, err);
  if (!t) g_error("%s", err->msg);
  em_status st = EM_OK;
  if (resume) st = em_trainer_load_checkpoint(t, resume, err);
  if (st == EM_OK) {
    rec->trainer = t;
    st = em_trainer_run(t, on_event, rec, err);
  }
  em_trainer_free(t);
  em_model_free(m);
  return st;
}

const char *th_find(const th_record *r, const char *kind, int64_t step) {
  char suffix[64];
  snprintf(suffix, sizeof suffix, "step-%09lld.safetensors", (long long)step);
  for (guint i = 0; i < r->ckpt_paths->len; i++) {
    const char *p = g_ptr_array_index(r->ckpt_paths, i);
    if (strcmp(g_ptr_array_index(r->ckpt_kinds, i), kind) == 0 && g_str_has_suffix(p, suffix))
      return p;
  }
  return NULL;
}

void th_assert_same_checkpoint(const char *a, const char *b) {
  em_error err = {0};
  em_safetensors *fa = em_safetensors_open(a, &err), *fb = em_safetensors_open(b, &err);
  g_assert_nonnull(fa);
  g_assert_nonnull(fb);
  g_assert_cmpint(em_safetensors_count(fa), ==, em_safetensors_count(fb));
  int n = em_safetensors_count(fa);
  g_assert_cmpint(n, >, 4);
  for (int i = 0; i < n; i++) {
    const char *name = em_safetensors_name(fa, i);
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    g_assert_cmpint(em_safetensors_info(fa, name, &dt, &nd, shape, &err), ==, EM_OK);
    em_tensor *x = em_tensor_new(dt, nd, shape, &err), *y = em_tensor_new(dt, nd, shape, &err);
    g_assert_cmpint(em_safetensors_read(fa, name, x, &err), ==, EM_OK);
    if (em_safetensors_read(fb, name, y, &err) != EM_OK) g_error("%s", err.msg);
    if (memcmp(em_tensor_ptr(x), em_tensor_ptr(y), em_tensor_nbytes(x)) != 0)
      g_error("tensor '%s' differs between '%s' and '%s'", name, a, b);
    em_tensor_free(x);
    em_tensor_free(y);
  }
  static const char *const keys[] = {"epoch",    "batch",      "step",       "rng",
                                     "lr_scale", "rollbacks",  "loss_sum",   "grad_norms",
                                     "grad_norms_seen", "spec"};
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
    const char *va = em_safetensors_meta(fa, keys[k]), *vb = em_safetensors_meta(fb, keys[k]);
    g_assert_nonnull(va);
    g_assert_nonnull(vb);
    if (strcmp(va, vb) != 0) g_error("metadata '%s' differs: '%s' vs '%s'", keys[k], va, vb);
  }
  em_safetensors_close(fa);
  em_safetensors_close(fb);
}
