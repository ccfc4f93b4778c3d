/* train-options.c: parsing `ember train` / `ember eval` flags and
 * applying them over a configuration. */
#include "train-options.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-common.h"
#include "em-device.h"

enum {
  /* settings: they change the configuration */
  OPT_EPOCHS = 256, OPT_BATCH, OPT_LR, OPT_OPTIMIZER, OPT_MOMENTUM, OPT_NESTEROV, OPT_WD,
  OPT_SCHEDULE, OPT_WARMUP, OPT_CLIP, OPT_ACCUM, OPT_SMOOTH, OPT_SEED, OPT_THREADS, OPT_WORKERS,
  OPT_LIMIT, OPT_NO_SHUFFLE, OPT_DATASET, OPT_DATA_DIR, OPT_CKPT_EVERY, OPT_ON_DIVERGENCE,
  OPT_DIV_LR_FACTOR, OPT_DIV_SPIKE, OPT_AMP, OPT_AMP_SCALER, OPT_AMP_INIT_SCALE, OPT_DEVICE,
  OPT_AUTO_BATCH, OPT_MAX_ROLLBACKS, OPT_LAST_SETTING,
  /* everything else */
  OPT_INIT, OPT_SAVE, OPT_QUIET, OPT_WEIGHTS, OPT_HELP, OPT_REGISTRY, OPT_NO_RECORD, OPT_NAME,
  OPT_CKPT_DIR, OPT_KEEP_CKPT, OPT_RESUME, OPT_STOP_AFTER, OPT_PROFILE, OPT_PROFILE_STEPS,
  OPT_DETECT_ANOMALY, OPT_DDP, OPT_NO_PREFLIGHT, OPT_QUANTIZE,
};

static const struct option long_opts[] = {
    {"epochs", required_argument, 0, OPT_EPOCHS},
    {"batch", required_argument, 0, OPT_BATCH},
    {"lr", required_argument, 0, OPT_LR},
    {"optimizer", required_argument, 0, OPT_OPTIMIZER},
    {"momentum", required_argument, 0, OPT_MOMENTUM},
    {"nesterov", no_argument, 0, OPT_NESTEROV},
    {"weight-decay", required_argument, 0, OPT_WD},
    {"schedule", required_argument, 0, OPT_SCHEDULE},
    {"warmup-steps", required_argument, 0, OPT_WARMUP},
    {"clip-grad-norm", required_argument, 0, OPT_CLIP},
    {"accumulate", required_argument, 0, OPT_ACCUM},
    {"label-smoothing", required_argument, 0, OPT_SMOOTH},
    {"seed", required_argument, 0, OPT_SEED},
    {"threads", required_argument, 0, OPT_THREADS},
    {"workers", required_argument, 0, OPT_WORKERS},
    {"limit", required_argument, 0, OPT_LIMIT},
    {"no-shuffle", no_argument, 0, OPT_NO_SHUFFLE},
    {"dataset", required_argument, 0, OPT_DATASET},
    {"data-dir", required_argument, 0, OPT_DATA_DIR},
    {"checkpoint-every", required_argument, 0, OPT_CKPT_EVERY},
    {"on-divergence", required_argument, 0, OPT_ON_DIVERGENCE},
    {"divergence-lr-factor", required_argument, 0, OPT_DIV_LR_FACTOR},
    {"max-rollbacks", required_argument, 0, OPT_MAX_ROLLBACKS},
    {"divergence-spike-factor", required_argument, 0, OPT_DIV_SPIKE},
    {"amp", required_argument, 0, OPT_AMP},
    {"amp-scaler", no_argument, 0, OPT_AMP_SCALER},
    {"amp-init-scale", required_argument, 0, OPT_AMP_INIT_SCALE},
    {"device", required_argument, 0, OPT_DEVICE},
    {"auto-batch", no_argument, 0, OPT_AUTO_BATCH},
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
    {"stop-after-steps", required_argument, 0, OPT_STOP_AFTER}, /* tests: not in --help */
    {0, 0, 0, 0},
};

static const char *flag_name(int code) {
  for (const struct option *o = long_opts; o->name; o++)
    if (o->val == code) return o->name;
  return "?";
}

/* Checks one setting's value; applies it when cfg is given. */
static void apply_one(int code, const char *arg, em_train_config *cfg) {
  em_train_config scratch;
  if (!cfg) {
    em_train_config_defaults(&scratch);
    cfg = &scratch;
  }
  switch (code) {
  case OPT_EPOCHS: cfg->epochs = (int)cli_parse_int("--epochs", arg, 0, 1000000); break;
  case OPT_BATCH: cfg->batch_size = (int)cli_parse_int("--batch", arg, 1, 1 << 20); break;
  case OPT_LR: cfg->optim.lr = cli_parse_num("--lr", arg, 0, 1e6); break;
  case OPT_OPTIMIZER: {
    em_optim_kind k;
    if (strcmp(arg, "sgd") == 0) k = EM_OPTIM_SGD;
    else if (strcmp(arg, "adam") == 0) k = EM_OPTIM_ADAM;
    else if (strcmp(arg, "adamw") == 0) k = EM_OPTIM_ADAMW;
    else cli_die_usage("--optimizer expects sgd, adam or adamw, got '%s'", arg);
    if (k != cfg->optim.kind) em_optim_config_defaults(&cfg->optim, k); /* lr included */
    break;
  }
  case OPT_MOMENTUM: cfg->optim.momentum = cli_parse_num("--momentum", arg, 0, 1); break;
  case OPT_NESTEROV: cfg->optim.nesterov = true; break;
  case OPT_WD: cfg->optim.weight_decay = cli_parse_num("--weight-decay", arg, 0, 1e3); break;
  case OPT_SCHEDULE: {
    em_error err = {0};
    if (em_schedule_parse_name(arg, &cfg->schedule.kind, &err) != EM_OK)
      cli_die_usage("--schedule: %s", err.msg);
    break;
  }
  case OPT_WARMUP:
    cfg->schedule.warmup_steps = cli_parse_int("--warmup-steps", arg, 0, 1LL << 40);
    break;
  case OPT_CLIP: cfg->clip_grad_norm = cli_parse_num("--clip-grad-norm", arg, 0, 1e12); break;
  case OPT_ACCUM: cfg->accumulate = (int)cli_parse_int("--accumulate", arg, 1, 1 << 16); break;
  case OPT_SMOOTH: cfg->label_smoothing = cli_parse_num("--label-smoothing", arg, 0, 1); break;
  case OPT_SEED: cfg->seed = (uint64_t)cli_parse_int("--seed", arg, 0, INT64_MAX); break;
  case OPT_THREADS: cfg->threads = (int)cli_parse_int("--threads", arg, 1, 256); break;
  case OPT_WORKERS: cfg->workers = (int)cli_parse_int("--workers", arg, 0, 64); break;
  case OPT_LIMIT: cfg->limit = cli_parse_int("--limit", arg, 1, 1LL << 40); break;
  case OPT_NO_SHUFFLE: cfg->shuffle = false; break;
  case OPT_DATASET:
    if (strlen(arg) >= sizeof cfg->dataset) cli_die_usage("--dataset: the name is too long");
    snprintf(cfg->dataset, sizeof cfg->dataset, "%s", arg);
    break;
  case OPT_DATA_DIR:
    if (strlen(arg) >= sizeof cfg->data_dir) cli_die_usage("--data-dir: the path is too long");
    snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", arg); /* made absolute by cmd-train */
    break;
  case OPT_CKPT_EVERY:
    cfg->checkpoint_every = cli_parse_int("--checkpoint-every", arg, 0, 1LL << 40);
    break;
  case OPT_ON_DIVERGENCE:
    if (strcmp(arg, "rollback") == 0) cfg->on_divergence = EM_DIVERGENCE_ROLLBACK;
    else if (strcmp(arg, "stop") == 0) cfg->on_divergence = EM_DIVERGENCE_STOP;
    else if (strcmp(arg, "auto") == 0) cfg->on_divergence = EM_DIVERGENCE_AUTO;
    else cli_die_usage("--on-divergence expects rollback, stop or auto, got '%s'", arg);
    break;
  case OPT_DIV_LR_FACTOR:
    cfg->divergence_lr_factor = cli_parse_num("--divergence-lr-factor", arg, 1e-6, 1);
    break;
  case OPT_MAX_ROLLBACKS:
    cfg->max_rollbacks = (int)cli_parse_int("--max-rollbacks", arg, 0, 1000000);
    break;
  case OPT_DIV_SPIKE:
    cfg->divergence_spike_factor = cli_parse_num("--divergence-spike-factor", arg, 0, 1e12);
    if (cfg->divergence_spike_factor > 0 && cfg->divergence_spike_factor <= 1)
      cli_die_usage("--divergence-spike-factor must be above 1 (a norm that many times the "
                    "recent largest is a divergence) or 0 (off), got '%s'", arg);
    break;
  case OPT_AMP: {
    em_error err = {0};
    if (em_amp_mode_parse(arg, &cfg->amp, &err) != EM_OK)
      cli_die_usage("--amp expects bf16, f16 or off, got '%s'", arg);
    break;
  }
  case OPT_AMP_SCALER: cfg->amp_scaler = true; break;
  case OPT_AMP_INIT_SCALE:
    cfg->amp_init_scale = cli_parse_num("--amp-init-scale", arg, 1, 3.4e38);
    break;
  case OPT_DEVICE: {
    em_error err = {0};
    if (em_device_parse(arg, &cfg->device, &err) != EM_OK) cli_die_usage("--device: %s", err.msg);
    break;
  }
  case OPT_AUTO_BATCH: cfg->auto_batch = true; break;
  default: break;
  }
}

void cli_train_opts_parse(int argc, char **argv, const char *cmd, cli_train_opts *o) {
  memset(o, 0, sizeof *o);
  o->keep_checkpoints = 3;
  int c;
  opterr = 0; /* we report unknown options ourselves */
  optind = 2; /* after the command word; GNU getopt moves SPEC to the end */
  while ((c = getopt_long(argc, argv, ":", long_opts, NULL)) != -1) {
    if (c >= OPT_EPOCHS && c < OPT_LAST_SETTING) {
      if (o->n_settings == CLI_MAX_SETTINGS) cli_die_usage("%s: too many flags", cmd);
      apply_one(c, optarg, NULL); /* check the value now: a bad one is named at once */
      static char names[OPT_LAST_SETTING - OPT_EPOCHS][32];
      char *nm = names[c - OPT_EPOCHS];
      snprintf(nm, sizeof names[0], "--%s", flag_name(c));
      o->settings[o->n_settings++] = (cli_setting){c, optarg, nm};
      if (c == OPT_THREADS) o->threads_given = true;
      if (c == OPT_DEVICE) {
        o->device_given = true;
        o->device = optarg;
      }
      if (c == OPT_AUTO_BATCH) o->device_given = true;
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
    case OPT_STOP_AFTER:
      o->stop_after_steps = cli_parse_int("--stop-after-steps", optarg, 1, 1LL << 40);
      break;
    case OPT_HELP: fputs(cli_usage_text, stdout); exit(0);
    case ':': cli_die_usage("%s needs a value", argv[optind - 1]);
    default: cli_die_usage("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) o->spec_path = argv[optind++];
  if (optind < argc) cli_die_usage("%s: unexpected argument '%s'", cmd, argv[optind]);
}

/* The last setting of that flag given, or NULL. */
static const cli_setting *last_given(const cli_train_opts *o, int code) {
  for (int i = o->n_settings - 1; i >= 0; i--)
    if (o->settings[i].code == code) return &o->settings[i];
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
  const cli_setting *opt = last_given(o, OPT_OPTIMIZER);
  if (opt) apply_one(OPT_OPTIMIZER, opt->arg, cfg);
  for (int i = 0; i < o->n_settings; i++) {
    const cli_setting *st = &o->settings[i];
    if (st->code != OPT_OPTIMIZER) apply_one(st->code, st->arg, cfg);
  }
  bool momentum = last_given(o, OPT_MOMENTUM), nesterov = last_given(o, OPT_NESTEROV);
  if (last_given(o, OPT_SMOOTH) && cfg->loss == EM_LOSS_MSE && cfg->label_smoothing > 0)
    cli_warn("--label-smoothing applies to the cross_entropy loss: this spec's loss is mse, so it "
             "has no effect");
  if (last_given(o, OPT_WARMUP) && cfg->schedule.kind != EM_SCHED_WARMUP &&
      cfg->schedule.kind != EM_SCHED_WARMUP_COSINE)
    cli_warn("--warmup-steps applies to the warmup and warmup-cosine schedules: %s does not use it",
             em_schedule_kind_name(cfg->schedule.kind));
  if (!last_given(o, OPT_LR) && cfg->optim.kind != spec_kind && cfg->optim.lr != spec_lr)
    cli_warn("--optimizer %s: lr %g, its default (the spec's %g was for %s; --lr sets another)",
             em_optim_kind_name(cfg->optim.kind), cfg->optim.lr, spec_lr,
             em_optim_kind_name(spec_kind));
  if (last_given(o, OPT_DATA_DIR) && strcmp(cfg->dataset, "synthetic") == 0)
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
  const cli_setting *div = last_given(o, OPT_ON_DIVERGENCE);
  if (div && strcmp(div->arg, "rollback") == 0 && !o->checkpoint_dir)
    cli_warn("--on-divergence rollback with --no-record needs --checkpoint-dir DIR (and "
             "--checkpoint-every N): without checkpoints there is nothing to roll back to");
}

const char *cli_train_opts_resume_conflict(const cli_train_opts *o) {
  for (int i = 0; i < o->n_settings; i++) {
    int c = o->settings[i].code; /* where it runs may change; what it computes may not */
    if (c != OPT_THREADS && c != OPT_DEVICE && c != OPT_AUTO_BATCH) return o->settings[i].flag;
  }
  return NULL;
}

const char *cli_train_opts_eval_conflict(const cli_train_opts *o) {
  for (int i = 0; i < o->n_settings; i++) {
    int c = o->settings[i].code; /* what an evaluation reads */
    if (c != OPT_BATCH && c != OPT_THREADS && c != OPT_DATASET && c != OPT_DATA_DIR &&
        c != OPT_DEVICE && c != OPT_SMOOTH)
      return o->settings[i].flag;
  }
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
    if (o->settings[i].code == OPT_AMP_INIT_SCALE && !cfg->amp_scaler)
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
