/* train-options.c: parsing `ember train` / `ember eval` flags and
 * applying them over a configuration. */
#include "train-options.h"

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-common.h"
#include "em-device.h"

/* Flags: the training settings' are the settings table's (em-train.h),
 * code OPT_SETTING + row; the others are this command's own. */
enum {
  OPT_SETTING = 256,
  OPT_INIT = 1024, OPT_SAVE, OPT_QUIET, OPT_WEIGHTS, OPT_HELP, OPT_REGISTRY, OPT_NO_RECORD,
  OPT_NAME, OPT_CKPT_DIR, OPT_KEEP_CKPT, OPT_RESUME, OPT_STOP_AFTER, OPT_PROFILE,
  OPT_PROFILE_STEPS, OPT_DETECT_ANOMALY, OPT_DDP, OPT_NO_PREFLIGHT, OPT_QUANTIZE, OPT_REPORT,
};

static const struct option own_opts[] = {
    {"init", required_argument, 0, OPT_INIT},
    {"save", required_argument, 0, OPT_SAVE},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"weights", required_argument, 0, OPT_WEIGHTS},
    {"help", no_argument, 0, OPT_HELP},
    {"registry", required_argument, 0, OPT_REGISTRY},
    {"no-record", no_argument, 0, OPT_NO_RECORD},
    {"name", required_argument, 0, OPT_NAME},
    {"checkpoint-dir", required_argument, 0, OPT_CKPT_DIR},
    {"keep-checkpoints", required_argument, 0, OPT_KEEP_CKPT},
    {"resume", required_argument, 0, OPT_RESUME},
    {"profile", required_argument, 0, OPT_PROFILE},
    {"profile-steps", required_argument, 0, OPT_PROFILE_STEPS},
    {"detect-anomaly", no_argument, 0, OPT_DETECT_ANOMALY},
    {"ddp", no_argument, 0, OPT_DDP},
    {"no-preflight", no_argument, 0, OPT_NO_PREFLIGHT},
    {"quantize", required_argument, 0, OPT_QUANTIZE},
    {"report", no_argument, 0, OPT_REPORT},
    {"stop-after-steps", required_argument, 0, OPT_STOP_AFTER}, /* tests: not in --help */
};

#define MAX_ROWS 96
#define N_OWN ((int)(sizeof own_opts / sizeof *own_opts))

/* The table's flags, then the command's own, for getopt_long. */
static const struct option *long_opts(void) {
  static struct option opts[MAX_ROWS + N_OWN + 1];
  if (opts[0].name) return opts;
  int n, k = 0;
  const em_setting *rows = em_settings(&n);
  if (n > MAX_ROWS) abort(); /* a broken build: raise MAX_ROWS with the table */
  for (int i = 0; i < n; i++)
    if (rows[i].flag)
      opts[k++] = (struct option){rows[i].flag, rows[i].metavar ? required_argument : no_argument,
                                  0, OPT_SETTING + i};
  for (int i = 0; i < N_OWN; i++) opts[k++] = own_opts[i];
  return opts;
}

static const em_setting *row_of(int code) {
  int n;
  const em_setting *rows = em_settings(&n);
  return code >= OPT_SETTING && code < OPT_SETTING + n ? &rows[code - OPT_SETTING] : NULL;
}

/* Checks one setting's value; applies it when cfg is given. */
static void apply_one(int code, const char *arg, em_train_config *cfg) {
  em_train_config scratch;
  if (!cfg) {
    em_train_config_defaults(&scratch);
    cfg = &scratch;
  }
  const em_setting *s = row_of(code);
  char flag[48];
  snprintf(flag, sizeof flag, "--%s", s->flag);
  em_error err = {0};
  switch (s->type) {
  case EM_SETTING_INT:
  case EM_SETTING_SEED: em_setting_set_int(s, cfg, cli_parse_int(flag, arg, s->min, s->max)); break;
  case EM_SETTING_NUM: em_setting_set_num(s, cfg, cli_parse_num(flag, arg, s->lo, s->hi)); break;
  case EM_SETTING_BOOL: em_setting_set_bool(s, cfg, s->flag_sets); break;
  case EM_SETTING_CHOICE: {
    /* choosing another optimiser resets its settings, lr included */
    char known[256];
    if (em_setting_set_text(s, cfg, flag, arg, &err) != EM_OK) {
      em_setting_choices(s, ", ", known, sizeof known);
      cli_die_usage("%s expects one of %s, got '%s'", flag, known, arg);
    }
    break;
  }
  default: /* text: a name, a folder, a device */
    if (em_setting_set_text(s, cfg, flag, arg, &err) != EM_OK) cli_die_usage("%s", err.msg);
    break;
  }
  /* the one rule between a value and its range: 0 is off, else above 1 */
  if (s->offset == offsetof(em_train_config, divergence_spike_factor) &&
      cfg->divergence_spike_factor > 0 && cfg->divergence_spike_factor <= 1)
    cli_die_usage("--divergence-spike-factor must be above 1 (a norm that many times the "
                  "recent largest is a divergence) or 0 (off), got '%s'", arg);
}

void cli_train_opts_parse(int argc, char **argv, const char *cmd, cli_train_opts *o) {
  memset(o, 0, sizeof *o);
  o->keep_checkpoints = 3;
  int c;
  opterr = 0; /* we report unknown options ourselves */
  optind = 2; /* after the command word; GNU getopt moves SPEC to the end */
  while ((c = getopt_long(argc, argv, ":", long_opts(), NULL)) != -1) {
    const em_setting *s = row_of(c);
    if (s) {
      if (o->n_settings == CLI_MAX_SETTINGS) cli_die_usage("%s: too many flags", cmd);
      apply_one(c, optarg, NULL); /* check the value now: a bad one is named at once */
      static char names[MAX_ROWS][40];
      char *nm = names[c - OPT_SETTING];
      snprintf(nm, sizeof names[0], "--%s", s->flag);
      o->settings[o->n_settings++] = (cli_setting){c, optarg, nm};
      if (strcmp(s->key, "threads") == 0) o->threads_given = true;
      if (s->type == EM_SETTING_DEVICE) {
        o->device_given = true;
        o->device = optarg;
      }
      if (strcmp(s->key, "auto_batch") == 0) o->device_given = true;
      continue;
    }
    switch (c) {
    case OPT_INIT: o->init = optarg; break;
    case OPT_SAVE: o->save = optarg; break;
    case OPT_QUIET: o->quiet = true; break;
    case OPT_WEIGHTS: o->weights = optarg; break;
    case OPT_REGISTRY: o->registry = optarg; break;
    case OPT_NO_RECORD: o->no_record = true; break;
    case OPT_NAME: o->name = optarg; break;
    case OPT_CKPT_DIR: o->checkpoint_dir = optarg; break;
    case OPT_KEEP_CKPT:
      o->keep_checkpoints = (int)cli_parse_int("--keep-checkpoints", optarg, 1, 1000000);
      o->keep_given = true;
      break;
    case OPT_RESUME: o->resume = optarg; break;
    case OPT_PROFILE: o->profile = optarg; break;
    case OPT_PROFILE_STEPS:
      o->profile_steps = cli_parse_int("--profile-steps", optarg, 1, 1000000);
      break;
    case OPT_DETECT_ANOMALY: o->detect_anomaly = true; break;
    case OPT_DDP: o->ddp = true; break;
    case OPT_NO_PREFLIGHT: o->no_preflight = true; break;
    case OPT_QUANTIZE: o->quantize = optarg; break;
    case OPT_REPORT: o->report = true; break;
    case OPT_STOP_AFTER:
      o->stop_after_steps = cli_parse_int("--stop-after-steps", optarg, 1, 1LL << 40);
      break;
    case OPT_HELP: cli_usage_print(stdout); exit(0);
    case ':': cli_die_usage("%s needs a value", argv[optind - 1]);
    default: cli_die_usage("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) o->spec_path = argv[optind++];
  if (optind < argc) cli_die_usage("%s: unexpected argument '%s'", cmd, argv[optind]);
}

/* The last setting of that flag given ("lr" for --lr), or NULL. */
static const cli_setting *last_given(const cli_train_opts *o, const char *flag) {
  for (int i = o->n_settings - 1; i >= 0; i--)
    if (strcmp(row_of(o->settings[i].code)->flag, flag) == 0) return &o->settings[i];
  return NULL;
}

/* The last --optimizer first, wherever it stands: choosing another
 * optimiser than the spec's resets every setting to that optimiser's
 * defaults, lr included (the spec's lr was chosen for its own optimiser:
 * SGD's 0.1 diverges Adam), so --momentum, --weight-decay or --lr given
 * before it were lost. Then the rest, in order. */
void cli_train_opts_apply(const cli_train_opts *o, em_train_config *cfg) {
  double spec_lr = cfg->optim.lr;
  em_optim_kind spec_kind = cfg->optim.kind;
  const cli_setting *opt = last_given(o, "optimizer");
  if (opt) apply_one(opt->code, opt->arg, cfg);
  for (int i = 0; i < o->n_settings; i++) {
    const cli_setting *st = &o->settings[i];
    if (!(row_of(st->code)->flags & EM_SETTING_FIRST)) apply_one(st->code, st->arg, cfg);
  }
  bool momentum = last_given(o, "momentum"), nesterov = last_given(o, "nesterov");
  if (last_given(o, "label-smoothing") && cfg->loss == EM_LOSS_MSE && cfg->label_smoothing > 0)
    cli_warn("--label-smoothing applies to the cross_entropy loss: this spec's loss is mse, so it "
             "has no effect");
  if (last_given(o, "warmup-steps") && cfg->schedule.kind != EM_SCHED_WARMUP &&
      cfg->schedule.kind != EM_SCHED_WARMUP_COSINE)
    cli_warn("--warmup-steps applies to the warmup and warmup-cosine schedules: %s does not use it",
             em_schedule_kind_name(cfg->schedule.kind));
  if (!last_given(o, "lr") && cfg->optim.kind != spec_kind && cfg->optim.lr != spec_lr)
    cli_warn("--optimizer %s: lr %g, its default (the spec's %g was for %s; --lr sets another)",
             em_optim_kind_name(cfg->optim.kind), cfg->optim.lr, spec_lr,
             em_optim_kind_name(spec_kind));
  if (last_given(o, "data-dir") && strcmp(cfg->dataset, "synthetic") == 0)
    cli_warn("--data-dir is not read by the synthetic dataset (it makes its samples): it has no "
             "effect");
  if ((momentum || nesterov) && cfg->optim.kind != EM_OPTIM_SGD)
    cli_warn("%s applies to SGD only: %s uses its betas, so it has no effect",
             momentum ? "--momentum" : "--nesterov", em_optim_kind_name(cfg->optim.kind));
}

void cli_train_opts_warn_unrecorded(const cli_train_opts *o) {
  if (!o->no_record) return;
  const char *unused = o->name       ? "--name"
                       : o->registry ? "--registry"
                       : o->keep_given ? "--keep-checkpoints"
                                       : NULL;
  if (unused) cli_warn("%s is for recorded runs: with --no-record it has no effect", unused);
  const cli_setting *div = last_given(o, "on-divergence");
  if (div && strcmp(div->arg, "rollback") == 0 && !o->checkpoint_dir)
    cli_warn("--on-divergence rollback with --no-record needs --checkpoint-dir DIR (and "
             "--checkpoint-every N): without checkpoints there is nothing to roll back to");
}

const char *cli_train_opts_resume_conflict(const cli_train_opts *o) {
  for (int i = 0; i < o->n_settings; i++) /* where it runs may change; what it computes not */
    if (!(row_of(o->settings[i].code)->flags & EM_SETTING_RESUMABLE)) return o->settings[i].flag;
  return NULL;
}

const char *cli_train_opts_eval_conflict(const cli_train_opts *o) {
  for (int i = 0; i < o->n_settings; i++) /* what an evaluation reads */
    if (!(row_of(o->settings[i].code)->flags & EM_SETTING_EVAL)) return o->settings[i].flag;
  if (o->init) return "--init";
  if (o->save) return "--save";
  if (o->resume) return "--resume";
  if (o->name) return "--name";
  if (o->checkpoint_dir) return "--checkpoint-dir";
  if (o->no_record) return "--no-record";
  if (o->stop_after_steps) return "--stop-after-steps";
  if (o->profile) return "--profile";
  if (o->detect_anomaly) return "--detect-anomaly";
  if (o->ddp) return "--ddp";
  return NULL;
}

void cli_train_opts_check_amp(const cli_train_opts *o, const em_train_config *cfg) {
  for (int i = 0; i < o->n_settings; i++) /* the scaler's: without it, it was ignored */
    if (strcmp(row_of(o->settings[i].code)->key, "amp_init_scale") == 0 && !cfg->amp_scaler)
      cli_die_usage("--amp-init-scale sets the loss scaler's first scale: give --amp-scaler "
                    "(and --amp bf16) as well");
  /* f16 without a scaler ran without a word (on the CPU, f16 is refused) */
  if (cfg->amp == EM_AMP_F16 && !cfg->amp_scaler && !em_device_is_cpu(cfg->device))
    cli_warn("--amp f16 without --amp-scaler: small gradients underflow to 0 in f16; add "
             "--amp-scaler (PyTorch's GradScaler rules)");
}

void cli_train_opts_check_device(const cli_train_opts *o, const em_train_config *cfg) {
  em_error err = {0};
  if (em_device_check(cfg->device, &err) != EM_OK) {
    char dn[32];
    cli_die_usage("--device %s: %s", o->device ? o->device : em_device_str(cfg->device, dn,
                  sizeof dn), err.msg);
  }
}
