/* em-sweep-desc.h: the Sweeps page's form as a sweep description (the
 * JSON of em-tune.h), with no widgets in it (unit-tested on its own).
 *
 * A setting's values are typed as a person would: a list or a choice as
 * "0.01, 0.1, 1" or "relu, gelu" (numbers stay numbers, true and false
 * booleans, anything else a string), a range as "1e-4 .. 0.3" (also
 * "1e-4, 0.3"); a range of whole numbers written without a point or an
 * exponent ("32 .. 256") is an integer range. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "em-error.h"

typedef enum {
  EM_SWEEP_KIND_LIST,      /* a grid axis */
  EM_SWEEP_KIND_RANGE,     /* uniform */
  EM_SWEEP_KIND_LOG_RANGE, /* log-uniform */
  EM_SWEEP_KIND_CHOICE,
} em_sweep_kind;

#define EM_SWEEP_FORM_PARAMS 4

typedef struct {
  const char *path;   /* "training.lr", "nodes.fc1.out_features"; NULL or "": unused row */
  em_sweep_kind kind;
  const char *values;
} em_sweep_form_param;

typedef struct {
  const char *spec;          /* the base spec's path */
  const char *name;          /* NULL: none */
  em_sweep_form_param p[EM_SWEEP_FORM_PARAMS];
  const char *sampler;       /* "grid", "random", "tpe" */
  const char *metric;
  bool maximize;
  int trials;                /* 0: the sampler's default (the grid's size) */
  const char *pruner;        /* "none", "asha", "median" */
  int64_t limit;             /* per-trial training overrides; 0: the base's */
  int epochs;
  const char *training_json; /* the base's training settings (a JSON object), NULL: none */
} em_sweep_form;

/* The description (malloc'd JSON), or NULL with a message naming the row
 * or field at fault. It is not checked against the spec: em_tune_desc_parse
 * does that. */
char *em_sweep_form_to_json(const em_sweep_form *f, em_error *err);
/* The kind's name in the form ("list", "range", "log range", "choice"). */
const char *em_sweep_kind_name(em_sweep_kind k);
