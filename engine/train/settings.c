/* settings.c: the training settings, one table. Each row is one field of
 * em_train_config: where the spec and the config JSON keep it, its type
 * and range, its default, its flag and help. config.c (the spec),
 * config-json.c (the round trip), validate, the CLI's flags and --help and
 * the workbench's form are all read off this table; nothing else lists
 * the settings. The rows are in the config JSON's order. */
#include "train-private.h"
#include "em-device.h"

#include <float.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The names of the enum settings, by index (NULL past the last). */
static const char *optim_name(int i) { return em_optim_kind_name((em_optim_kind)i); }
/* The dataset kinds registered (the built-ins, and the plugins' loaded so
 * far): the dataset row's names, for its help. */
static const char *dataset_name(int i) {
  const em_dataset_type *k = em_dataset_type_at(i);
  return k ? k->name : NULL;
}

/* Choosing another optimiser starts from its defaults. */
static void choose_optim(em_train_config *c, int v) {
  if ((em_optim_kind)v != c->optim.kind) em_optim_config_defaults(&c->optim, (em_optim_kind)v);
}

static const char *sched_name(int i) {
  return i >= 0 && i < EM_SCHED_COUNT ? em_schedule_kind_name((em_sched_kind)i) : NULL;
}
static const char *loss_name(int i) {
  static const char *const names[] = {"cross_entropy", "mse"};
  return i >= 0 && i < 2 ? names[i] : NULL;
}
static const char *divergence_name(int i) {
  static const char *const names[] = {"auto", "rollback", "stop"};
  return i >= 0 && i < 3 ? names[i] : NULL;
}
static const char *amp_name(int i) {
  return i >= 0 && i <= EM_AMP_F16 ? em_amp_mode_name((em_amp_mode)i) : NULL;
}

#define AT(field) .offset = offsetof(em_train_config, field), \
                  .size = sizeof(((em_train_config *)0)->field)
#define SPEC(sec, k) .spec_section = sec, .spec_key = k
#define ON (EM_SETTING_SPEC | EM_SETTING_JSON) /* in the spec and the JSON */
#define OWN (ON | EM_SETTING_OWN_DEFAULT)
#define STEPS ((int64_t)1 << 40)

static const em_setting table[] = {
    {.key = "dataset", SPEC("training", "dataset"), .type = EM_SETTING_STR, AT(dataset),
     .flags = ON | EM_SETTING_EVAL, .def_str = "fashion-mnist", .choice_name = dataset_name,
     .flag = "dataset", .metavar = "NAME", .help = "\na plugin's (`ember plugins` lists them)"},
    {.key = "data_dir", SPEC("training", "data_dir"), .type = EM_SETTING_STR, AT(data_dir),
     .flags = ON | EM_SETTING_EVAL, .def_str = "", .flag = "data-dir", .metavar = "DIR",
     .help = "folder of the dataset's files (csv: the file; 1 row in 5 is held out)"},
    {.key = "batch_size", SPEC("training", "batch_size"), .type = EM_SETTING_INT, AT(batch_size),
     .flags = ON | EM_SETTING_EVAL, .min = 1, .max = 1 << 20, .def = 64, .flag = "batch",
     .metavar = "N", .help = "batch size"},
    {.key = "epochs", SPEC("training", "epochs"), .type = EM_SETTING_INT, AT(epochs), .flags = ON,
     .min = 0, .max = 1000000, .def = 1, .flag = "epochs", .metavar = "N",
     .help = "passes over the training set (0: save the initial weights;\nnothing is recorded)"},
    {.key = "limit", SPEC("training", "limit"), .type = EM_SETTING_INT, AT(limit), .flags = ON,
     .min = 0, .max = STEPS, .flag = "limit", .metavar = "N",
     .help = "use only the first N training samples (0: all)"},
    {.key = "shuffle", SPEC("training", "shuffle"), .type = EM_SETTING_BOOL, AT(shuffle),
     .flags = ON, .def = 1, .flag = "no-shuffle", .flag_sets = false,
     .help = "keep the training set in file order"},
    {.key = "drop_last", SPEC("training", "drop_last"), .type = EM_SETTING_BOOL, AT(drop_last),
     .flags = ON},
    {.key = "workers", SPEC("training", "workers"), .type = EM_SETTING_INT, AT(workers),
     .flags = ON, .min = 0, .max = 64, .def = 1, .flag = "workers", .metavar = "N",
     .help = "data-loader threads (0: the training thread)"},
    /* the optimiser: choosing one resets the rest to its defaults */
    {.key = "kind", .group = "optim", SPEC("training", "optimizer"), .type = EM_SETTING_CHOICE,
     AT(optim.kind), .flags = ON | EM_SETTING_FIRST, .choice_name = optim_name,
     .choose = choose_optim, .flag = "optimizer", .metavar = "NAME"},
    {.key = "lr", .group = "optim", SPEC("training", "lr"), .type = EM_SETTING_NUM,
     AT(optim.lr), .flags = OWN, .lo = 0, .hi = 1e12, .flag = "lr", .metavar = "X",
     .help = "learning rate (by default sgd 0.01, adam and adamw 1e-3)"},
    {.key = "momentum", .group = "optim", SPEC("training", "momentum"), .type = EM_SETTING_NUM,
     AT(optim.momentum), .flags = OWN, .lo = 0, .hi = 1, .flag = "momentum", .metavar = "X",
     .help = "SGD momentum"},
    {.key = "dampening", .group = "optim", SPEC("training", "dampening"),
     .type = EM_SETTING_NUM, AT(optim.dampening), .flags = OWN, .lo = 0, .hi = 1},
    {.key = "weight_decay", .group = "optim", SPEC("training", "weight_decay"),
     .type = EM_SETTING_NUM, AT(optim.weight_decay), .flags = OWN, .lo = 0, .hi = 1e3,
     .flag = "weight-decay", .metavar = "X",
     .help = "weight decay (L2 for sgd/adam, decoupled for adamw)"},
    {.key = "nesterov", .group = "optim", SPEC("training", "nesterov"), .type = EM_SETTING_BOOL,
     AT(optim.nesterov), .flags = OWN, .flag = "nesterov", .flag_sets = true,
     .help = "Nesterov momentum (SGD)"},
    /* the spec writes the betas as a pair, the JSON as two keys */
    {.key = "beta1", .group = "optim", .type = EM_SETTING_NUM, AT(optim.beta1),
     .flags = EM_SETTING_JSON | EM_SETTING_OWN_DEFAULT, .lo = 0, .hi = 1},
    {.key = "beta2", .group = "optim", .type = EM_SETTING_NUM, AT(optim.beta2),
     .flags = EM_SETTING_JSON | EM_SETTING_OWN_DEFAULT, .lo = 0, .hi = 1},
    {.key = "betas", .group = "optim", SPEC("training", "betas"), .type = EM_SETTING_PAIR,
     .offset = offsetof(em_train_config, optim.beta1), .size = 2 * sizeof(double),
     .flags = EM_SETTING_SPEC | EM_SETTING_OWN_DEFAULT, .lo = 0, .hi = 1},
    {.key = "eps", .group = "optim", SPEC("training", "eps"), .type = EM_SETTING_NUM,
     AT(optim.eps), .flags = OWN, .lo = 0, .hi = DBL_MAX},
    {.key = "amsgrad", .group = "optim", SPEC("training", "amsgrad"), .type = EM_SETTING_BOOL,
     AT(optim.amsgrad), .flags = OWN},
    /* the schedule: the spec's "schedule" is its name, or an object of
     * these keys ("type" the name); what each kind needs is
     * em_schedule_check's */
    {.key = "type", .group = "schedule", SPEC("training", "schedule"),
     .type = EM_SETTING_CHOICE, AT(schedule.kind), .flags = OWN, .choice_name = sched_name,
     .flag = "schedule", .metavar = "NAME",
     .help = "constant | step | cosine | warmup | warmup-cosine | onecycle"},
    {.key = "step_size", .group = "schedule", SPEC("schedule", "step_size"),
     .type = EM_SETTING_INT, AT(schedule.step_size), .flags = OWN, .min = 0, .max = STEPS},
    {.key = "gamma", .group = "schedule", SPEC("schedule", "gamma"), .type = EM_SETTING_NUM,
     AT(schedule.gamma), .flags = OWN, .lo = 0, .hi = DBL_MAX},
    {.key = "total_steps", .group = "schedule", SPEC("schedule", "total_steps"),
     .type = EM_SETTING_INT, AT(schedule.total_steps), .flags = OWN, .min = 0, .max = STEPS},
    {.key = "eta_min", .group = "schedule", SPEC("schedule", "eta_min"), .type = EM_SETTING_NUM,
     AT(schedule.eta_min), .flags = OWN, .lo = 0, .hi = DBL_MAX},
    {.key = "warmup_steps", .group = "schedule", SPEC("schedule", "warmup_steps"),
     .type = EM_SETTING_INT, AT(schedule.warmup_steps), .flags = OWN, .min = 0, .max = STEPS,
     .flag = "warmup-steps", .metavar = "N",
     .help = "linear warm-up length (warmup, warmup-cosine)"},
    {.key = "warmup_start_factor", .group = "schedule", SPEC("schedule", "warmup_start_factor"),
     .type = EM_SETTING_NUM, AT(schedule.warmup_start_factor), .flags = OWN, .lo = 0, .hi = 1},
    {.key = "pct_start", .group = "schedule", SPEC("schedule", "pct_start"),
     .type = EM_SETTING_NUM, AT(schedule.pct_start), .flags = OWN, .lo = 0, .hi = 1},
    {.key = "div_factor", .group = "schedule", SPEC("schedule", "div_factor"),
     .type = EM_SETTING_NUM, AT(schedule.div_factor), .flags = OWN, .lo = 0, .hi = DBL_MAX},
    {.key = "final_div_factor", .group = "schedule", SPEC("schedule", "final_div_factor"),
     .type = EM_SETTING_NUM, AT(schedule.final_div_factor), .flags = OWN, .lo = 0,
     .hi = DBL_MAX},
    {.key = "cycle_momentum", .group = "schedule", SPEC("schedule", "cycle_momentum"),
     .type = EM_SETTING_BOOL, AT(schedule.cycle_momentum), .flags = OWN},
    {.key = "base_momentum", .group = "schedule", SPEC("schedule", "base_momentum"),
     .type = EM_SETTING_NUM, AT(schedule.base_momentum), .flags = OWN, .lo = 0, .hi = 1},
    {.key = "max_momentum", .group = "schedule", SPEC("schedule", "max_momentum"),
     .type = EM_SETTING_NUM, AT(schedule.max_momentum), .flags = OWN, .lo = 0, .hi = 1},
    {.key = "clip_grad_norm", SPEC("training", "clip_grad_norm"), .type = EM_SETTING_NUM,
     AT(clip_grad_norm), .flags = ON, .lo = 0, .hi = 1e12, .flag = "clip-grad-norm",
     .metavar = "X", .help = "clip the gradients' total L2 norm to X (0: off)"},
    {.key = "accumulate", SPEC("training", "accumulate"), .type = EM_SETTING_INT, AT(accumulate),
     .flags = ON, .min = 1, .max = 1 << 16, .def = 1, .flag = "accumulate", .metavar = "N",
     .help = "micro-batches per optimiser step"},
    {.key = "loss", SPEC("loss", "type"), .type = EM_SETTING_CHOICE, AT(loss), .flags = ON,
     .choice_name = loss_name},
    {.key = "label_smoothing", SPEC("loss", "label_smoothing"), .type = EM_SETTING_NUM,
     AT(label_smoothing), .flags = ON | EM_SETTING_EVAL, .lo = 0, .hi = 1,
     .flag = "label-smoothing", .metavar = "X", .help = "cross-entropy label smoothing"},
    {.key = "seed", SPEC("training", "seed"), .type = EM_SETTING_SEED, AT(seed), .flags = ON,
     .min = 0, .max = INT64_MAX, .flag = "seed", .metavar = "N",
     .help = "seed for initialisation, shuffling and dropout"},
    /* the machine's, not the model's: not a spec key; default: its cores */
    {.key = "threads", .type = EM_SETTING_INT, AT(threads),
     .flags = EM_SETTING_JSON | EM_SETTING_OWN_DEFAULT | EM_SETTING_RESUMABLE | EM_SETTING_EVAL,
     .min = 1, .max = 1024, .flag = "threads", .metavar = "N",
     .help = "CPU threads (OpenBLAS and Ember's pool; default: the cores)"},
    {.key = "eval_every", SPEC("training", "eval_every"), .type = EM_SETTING_INT, AT(eval_every),
     .flags = ON, .min = 0, .max = 1000000, .def = 1},
    {.key = "early_stop", SPEC("training", "early_stop"), .type = EM_SETTING_STR, AT(early_stop),
     .flags = ON | EM_SETTING_SPARSE, .def_str = "", .flag = "early-stop", .metavar = "METRIC:N",
     .help = "stop when test_loss or test_accuracy has not improved\nfor N evaluations (the "
     "run completes there)"},
    {.key = "checkpoint_every", SPEC("training", "checkpoint_every"), .type = EM_SETTING_INT,
     AT(checkpoint_every), .flags = ON, .min = 0, .max = STEPS, .flag = "checkpoint-every",
     .metavar = "N", .help = "also checkpoint every N optimiser steps (default 0: at each\n"
     "evaluation and at the end, when recording)"},
    /* set by the command from its run's folder, not by a person */
    {.key = "checkpoint_dir", .type = EM_SETTING_STR, AT(checkpoint_dir),
     .flags = EM_SETTING_JSON, .def_str = ""},
    {.key = "on_divergence", .type = EM_SETTING_CHOICE, AT(on_divergence),
     .flags = EM_SETTING_JSON, .choice_name = divergence_name, .flag = "on-divergence",
     .metavar = "P", .help = "rollback (to the last checkpoint, lower lr) | stop;\n"
     "default: rollback when checkpoints are written, else stop"},
    {.key = "divergence_lr_factor", SPEC("training", "divergence_lr_factor"),
     .type = EM_SETTING_NUM, AT(divergence_lr_factor), .flags = ON, .lo = 1e-6, .hi = 1,
     .def = 0.5, .flag = "divergence-lr-factor", .metavar = "X",
     .help = "a rollback multiplies the lr by X (default 0.5)"},
    {.key = "divergence_spike_factor", SPEC("training", "divergence_spike_factor"),
     .type = EM_SETTING_NUM, AT(divergence_spike_factor), .flags = ON, .lo = 0, .hi = 1e12,
     .def = 10, .flag = "divergence-spike-factor", .metavar = "X",
     .help = "a gradient norm over X times the largest of the last\n50 steps is a "
     "divergence (default 10; 0: only NaN/inf are)"},
    {.key = "max_rollbacks", SPEC("training", "max_rollbacks"), .type = EM_SETTING_INT,
     AT(max_rollbacks), .flags = ON, .min = 0, .max = 1000000, .def = 5,
     .flag = "max-rollbacks", .metavar = "N",
     .help = "rollbacks before the run stops with an error (default 5)"},
    {.key = "amp", SPEC("training", "amp"), .type = EM_SETTING_CHOICE, AT(amp),
     .flags = ON | EM_SETTING_SPARSE, .choice_name = amp_name, .flag = "amp", .metavar = "MODE",
     .help = "off (default) | bf16: Linear/matmul in bf16 with f32 sums\n(AMX or "
     "AVX512-BF16 CPUs; else f32; on a GPU: tensor\ncores) | f16 (GPU only; with "
     "--amp-scaler)"},
    {.key = "amp_scaler", SPEC("training", "amp_scaler"), .type = EM_SETTING_BOOL,
     AT(amp_scaler), .flags = ON | EM_SETTING_SPARSE, .flag = "amp-scaler", .flag_sets = true,
     .help = "dynamic loss scaling (GradScaler's rules; off for bf16)"},
    {.key = "amp_init_scale", SPEC("training", "amp_init_scale"), .type = EM_SETTING_NUM,
     AT(amp_init_scale), .flags = ON | EM_SETTING_SPARSE, .lo = 1, .hi = 3.4e38, .def = 65536,
     .flag = "amp-init-scale", .metavar = "S",
     .help = "the scaler's first scale (default 65536; a float's range)"},
    {.key = "device", SPEC("training", "device"), .type = EM_SETTING_DEVICE, AT(device),
     .flags = ON | EM_SETTING_SPARSE | EM_SETTING_RESUMABLE | EM_SETTING_EVAL, .flag = "device",
     .metavar = "D", .help = "cpu (default) | cuda | cuda:N | ref (the device code path on\n"
     "the host, for tests); the model, optimiser state and batches\nlive there. A pre-flight "
     "estimate refuses a batch that will\nnot fit; out of device memory stops the run with "
     "the\nallocator's state (recorded as failed). --resume may change it"},
    {.key = "auto_batch", SPEC("training", "auto_batch"), .type = EM_SETTING_BOOL,
     AT(auto_batch), .flags = ON | EM_SETTING_SPARSE | EM_SETTING_RESUMABLE,
     .flag = "auto-batch", .flag_sets = true,
     .help = "out of device memory (or a pre-flight that does not fit):\nhalve the batch size "
     "and go on, said in a warning"},
    /* the plugins' metrics, computed at evaluation: checked, not a field */
    {.key = "metrics", SPEC("training", "metrics"), .type = EM_SETTING_METRICS,
     .flags = EM_SETTING_SPEC},
};

#define N_ROWS ((int)(sizeof table / sizeof *table))

const em_setting *em_settings(int *n) {
  *n = N_ROWS;
  return table;
}

static bool same(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

const em_setting *em_setting_by_key(const char *group, const char *key) {
  for (int i = 0; i < N_ROWS; i++)
    if ((table[i].flags & EM_SETTING_JSON) && same(table[i].group, group) &&
        strcmp(table[i].key, key) == 0)
      return &table[i];
  return NULL;
}

const em_setting *em_setting_by_spec(const char *section, const char *key) {
  for (int i = 0; i < N_ROWS; i++)
    if ((table[i].flags & EM_SETTING_SPEC) && same(table[i].spec_section, section) &&
        strcmp(table[i].spec_key, key) == 0)
      return &table[i];
  return NULL;
}

const em_setting *em_setting_by_flag(const char *flag) {
  for (int i = 0; i < N_ROWS; i++)
    if (table[i].flag && strcmp(table[i].flag, flag) == 0) return &table[i];
  return NULL;
}

/* ---- typed access ---------------------------------------------------------- */

static void *field(const em_setting *s, em_train_config *c) { return (char *)c + s->offset; }
static const void *cfield(const em_setting *s, const em_train_config *c) {
  return (const char *)c + s->offset;
}

int64_t em_setting_get_int(const em_setting *s, const em_train_config *c) {
  const void *p = cfield(s, c);
  if (s->type == EM_SETTING_SEED) return (int64_t) * (const uint64_t *)p;
  return s->size == sizeof(int64_t) ? *(const int64_t *)p : *(const int *)p;
}

void em_setting_set_int(const em_setting *s, em_train_config *c, int64_t v) {
  void *p = field(s, c);
  if (s->type == EM_SETTING_SEED) *(uint64_t *)p = (uint64_t)v;
  else if (s->size == sizeof(int64_t)) *(int64_t *)p = v;
  else *(int *)p = (int)v;
}

double em_setting_get_num(const em_setting *s, const em_train_config *c) {
  return *(const double *)cfield(s, c);
}

void em_setting_set_num(const em_setting *s, em_train_config *c, double v) {
  *(double *)field(s, c) = v;
}

bool em_setting_get_bool(const em_setting *s, const em_train_config *c) {
  return *(const bool *)cfield(s, c);
}

void em_setting_set_bool(const em_setting *s, em_train_config *c, bool v) {
  *(bool *)field(s, c) = v;
}

/* The enums are int-sized (C11 6.7.2.2 leaves it to the compiler; GCC
 * and Clang make these int). */
_Static_assert(sizeof(em_optim_kind) == sizeof(int) && sizeof(em_sched_kind) == sizeof(int) &&
                   sizeof(em_loss_kind) == sizeof(int) &&
                   sizeof(em_divergence_policy) == sizeof(int) &&
                   sizeof(em_amp_mode) == sizeof(int),
               "the settings table reads enums as int");

int em_setting_get_choice(const em_setting *s, const em_train_config *c) {
  return *(const int *)cfield(s, c);
}

void em_setting_set_choice(const em_setting *s, em_train_config *c, int v) {
  if (s->choose) {
    s->choose(c, v);
    return;
  }
  *(int *)field(s, c) = v;
}

void em_setting_choices(const em_setting *s, const char *sep, char *buf, size_t n) {
  buf[0] = '\0';
  const char *name;
  for (int i = 0; (name = s->choice_name(i)) != NULL; i++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? sep : "", name);
}

em_status em_setting_set_text(const em_setting *s, em_train_config *c, const char *what,
                              const char *text, em_error *err) {
  switch (s->type) {
  case EM_SETTING_STR:
    if (strlen(text) >= s->size)
      return em_error_set(err, EM_ERR_INVALID, "%s is too long (at most %zu bytes)", what,
                          s->size - 1);
    snprintf(field(s, c), s->size, "%s", text);
    return EM_OK;
  case EM_SETTING_CHOICE: {
    const char *name;
    for (int i = 0; (name = s->choice_name(i)) != NULL; i++)
      if (strcmp(name, text) == 0) {
        em_setting_set_choice(s, c, i);
        return EM_OK;
      }
    char known[256];
    em_setting_choices(s, ", ", known, sizeof known);
    return em_error_set(err, EM_ERR_INVALID, "%s is \"%s\"; expected one of %s", what, text,
                        known);
  }
  case EM_SETTING_DEVICE: {
    em_device d;
    EM_TRY(em_device_parse(text, &d, err));
    *(em_device *)field(s, c) = d;
    return EM_OK;
  }
  default:
    return em_error_set(err, EM_ERR_INVALID, "%s takes a number or a switch, not text", what);
  }
}

static void keys(bool spec, const char *where, char *buf, size_t n) {
  buf[0] = '\0';
  if (spec && same(where, "schedule")) snprintf(buf, n, "type"); /* the name, in the object */
  for (int i = 0; i < N_ROWS; i++) {
    const em_setting *s = &table[i];
    bool in = spec ? (s->flags & EM_SETTING_SPEC) && same(s->spec_section, where)
                   : (s->flags & EM_SETTING_JSON) && same(s->group, where);
    if (in)
      snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? ", " : "",
               spec ? s->spec_key : s->key);
  }
  /* the JSON's groups are keys of its top level */
  if (!spec && !where) snprintf(buf + strlen(buf), n - strlen(buf), ", optim, schedule");
}

void em_settings_spec_keys(const char *section, char *buf, size_t n) {
  keys(true, section, buf, n);
}

void em_settings_json_keys(const char *group, char *buf, size_t n) { keys(false, group, buf, n); }

void em_setting_bounds(const em_setting *s, double *lo, double *hi) {
  bool whole = s->type == EM_SETTING_INT || s->type == EM_SETTING_SEED;
  *lo = whole ? (double)s->min : s->lo;
  *hi = whole ? (double)s->max : s->hi;
}

/* ---- defaults and ranges ---------------------------------------------------- */

void em_settings_apply_defaults(em_train_config *c) {
  for (int i = 0; i < N_ROWS; i++) {
    const em_setting *s = &table[i];
    if (!(s->flags & EM_SETTING_JSON) || (s->flags & EM_SETTING_OWN_DEFAULT)) continue;
    switch (s->type) {
    case EM_SETTING_INT:
    case EM_SETTING_SEED: em_setting_set_int(s, c, (int64_t)s->def); break;
    case EM_SETTING_NUM: em_setting_set_num(s, c, s->def); break;
    case EM_SETTING_BOOL: em_setting_set_bool(s, c, s->def != 0); break;
    case EM_SETTING_CHOICE: *(int *)field(s, c) = (int)s->def; break;
    case EM_SETTING_STR: snprintf(field(s, c), s->size, "%s", s->def_str); break;
    default: break; /* the device: zero is the CPU */
    }
  }
}

em_status em_settings_check_ranges(const em_train_config *c, em_error *err) {
  for (int i = 0; i < N_ROWS; i++) {
    const em_setting *s = &table[i];
    if (!(s->flags & EM_SETTING_JSON)) continue;
    if (s->type == EM_SETTING_INT) {
      int64_t v = em_setting_get_int(s, c);
      if (v < s->min || v > s->max)
        return em_error_set(err, EM_ERR_INVALID, "%s must be from %lld to %lld, got %lld",
                            s->key, (long long)s->min, (long long)s->max, (long long)v);
    } else if (s->type == EM_SETTING_NUM) {
      double v = em_setting_get_num(s, c);
      if (!(v >= s->lo && v <= s->hi))
        return em_error_set(err, EM_ERR_INVALID, "%s must be from %g to %g, got %g", s->key,
                            s->lo, s->hi, v);
    } else if (s->type == EM_SETTING_CHOICE) {
      int v = em_setting_get_choice(s, c);
      if (v < 0 || !s->choice_name(v)) {
        char known[256];
        em_setting_choices(s, ", ", known, sizeof known);
        return em_error_set(err, EM_ERR_INVALID, "unknown %s %d (%s)", s->key, v, known);
      }
    }
  }
  return EM_OK;
}
