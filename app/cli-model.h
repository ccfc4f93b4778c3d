/* cli-model.h: the model a command works on, named either way a person
 * names one: a SPEC file with --weights FILE, or a registered version
 * NAME@ALIAS / NAME@VERSION (its run's spec and its checkpoint's
 * weights). predict, eval, export and serve share it. */
#pragma once

#include "em-nn.h"
#include "em-store.h"

typedef struct {
  em_spec *spec;
  em_model *model;   /* weights loaded */
  bool registered;   /* from the registry (ref below is filled) */
  em_version_ref ref;
  char label[300];   /* "fmnist-mlp@production (version 3)" or the spec path */
} cli_model;

/* Exits 2 when `what` holds an '@' but is neither NAME@SELECTOR nor a file
 * ("fm@", "@1"): it was taken for a SPEC file, and the message asked for
 * --weights. weights given: nothing to check. */
void cli_check_model_ref(const char *what, const char *weights);
/* Opens what `what` names: when it looks like NAME@SOMETHING and weights is
 * NULL, a registered version from the registry at registry_dir (NULL: the
 * default); else a spec file, which then needs weights. On failure prints
 * the error and returns the exit status (never 0); out is then clear. */
int cli_model_open(const char *what, const char *weights, const char *registry_dir,
                   cli_model *out);
/* A registered version again (serve's reload): same as above but with an
 * open store and without printing; returns EM_OK or the error. */
em_status cli_model_open_ref(em_store *s, const char *ref, cli_model *out, em_error *err);
void cli_model_close(cli_model *m);
/* The class names of the dataset the spec's "training" section trains on
 * (fashion-mnist by default, cifar10), when the model's outputs are
 * exactly those classes; else NULL (callers print indices). */
const char *const *cli_class_names(const em_spec *spec, int classes);
