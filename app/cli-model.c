/* cli-model.c: a SPEC + weights or a registered NAME@ALIAS, opened into a
 * model with its weights (cli-model.h). */
#include "cli-model.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli-common.h"
#include "em-train.h"
#include "plugin-load.h"

em_status cli_model_open_ref(em_store *s, const char *ref, cli_model *out, em_error *err) {
  memset(out, 0, sizeof *out);
  em_status st = em_store_resolve_version(s, ref, &out->ref, err);
  if (st != EM_OK) return st;
  out->registered = true;
  /* the plugins its run was trained with, as --resume loads them: the
   * spec may name their layer types */
  if ((st = app_plugins_restore(s, out->ref.run, err)) != EM_OK) {
    cli_model_close(out);
    return st;
  }
  char src[300];
  snprintf(src, sizeof src, "<spec of %s, run %lld>", ref, (long long)out->ref.run);
  if (!(out->spec = em_spec_parse(out->ref.spec_json, src, err)) ||
      !(out->model = em_model_new(out->spec, 0, err)) ||
      em_model_load(out->model, out->ref.weights_path, err) != EM_OK) {
    st = err && err->status != EM_OK ? err->status : EM_ERR_INVALID;
    cli_model_close(out);
    return st;
  }
  snprintf(out->label, sizeof out->label, "%s@%s (version %d)", out->ref.name, out->ref.selector,
           out->ref.version);
  return EM_OK;
}

void cli_check_model_ref(const char *what, const char *weights) {
  if (!weights && strchr(what, '@') && !em_version_ref_looks_like(what) && access(what, F_OK) != 0)
    cli_die_usage("'%s' is not a model reference: give NAME@ALIAS or NAME@VERSION (a name, "
                  "'@', then an alias or a version number), or a SPEC file with --weights FILE",
                  what);
}

int cli_model_open(const char *what, const char *weights, const char *registry_dir,
                   cli_model *out) {
  memset(out, 0, sizeof *out);
  em_error err = {0};
  cli_check_model_ref(what, weights);
  if (!weights && em_version_ref_looks_like(what)) {
    em_store *s = cli_store_open(registry_dir, true);
    if (!s) return 1;
    em_status st = cli_model_open_ref(s, what, out, &err);
    em_store_close(s);
    return st == EM_OK ? 0 : cli_fail1(&err, what);
  }
  if (!weights) cli_die_usage("'%s' needs --weights FILE (or name a registered version as "
                              "NAME@ALIAS)", what);
  if (registry_dir) cli_die_usage("--registry goes with NAME@ALIAS, not with a SPEC file");
  int rc = 0;
  if (!(out->spec = em_spec_load(what, &err))) rc = cli_fail(&err, NULL);
  else if (!(out->model = em_model_new(out->spec, 0, &err))) rc = cli_fail(&err, what);
  else if (em_model_load(out->model, weights, &err) != EM_OK) rc = cli_fail(&err, weights);
  if (rc) cli_model_close(out);
  else snprintf(out->label, sizeof out->label, "%s", what);
  return rc;
}

void cli_model_close(cli_model *m) {
  if (!m) return;
  em_model_free(m->model);
  em_spec_free(m->spec);
  em_version_ref_clear(&m->ref);
  memset(m, 0, sizeof *m);
}

static const char *const fashion_mnist_names[10] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
static const char *const cifar10_names[10] = {"airplane", "automobile", "bird",  "cat",  "deer",
                                              "dog",      "frog",       "horse", "ship", "truck"};

/* The class names of the dataset the spec's "training" section trains on
 * (the trainer's default, fashion-mnist, when it names none), when the
 * model's outputs are exactly those classes; else NULL (generic names). */
const char *const *cli_class_names(const em_spec *spec, int classes) {
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  em_error err = {0};
  if (classes != 10 || em_train_config_from_spec(&cfg, spec, &err) != EM_OK) return NULL;
  if (!strcmp(cfg.dataset, "fashion-mnist")) return fashion_mnist_names;
  if (!strcmp(cfg.dataset, "cifar10")) return cifar10_names;
  return NULL;
}
