/* ember-cli.c: `ember`, the command line. No display needed.
 *
 *   ember train SPEC [flags]      train, evaluate per epoch, print JSON last
 *   ember eval SPEC --weights F   test loss and accuracy of saved weights
 *   ember info SPEC               layer table: output shapes, parameters
 */
#include <errno.h>
#include <stdarg.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli-progress.h"
#include "em-pool.h"
#include "em-train.h"

#define EXIT_USAGE 2

static const char *usage_text =
    "usage: ember train SPEC [options]\n"
    "       ember eval SPEC --weights FILE [--batch N] [--data-dir DIR] [--threads N]\n"
    "       ember info SPEC\n"
    "\n"
    "train options (defaults come from the spec's \"training\" section):\n"
    "  --epochs N            passes over the training set (0: save the initial weights)\n"
    "  --batch N             batch size\n"
    "  --lr X                learning rate\n"
    "  --optimizer NAME      sgd | adam | adamw\n"
    "  --momentum X          SGD momentum\n"
    "  --nesterov            Nesterov momentum (SGD)\n"
    "  --weight-decay X      weight decay (L2 for sgd/adam, decoupled for adamw)\n"
    "  --schedule NAME       constant | step | cosine | warmup | warmup-cosine | onecycle\n"
    "  --warmup-steps N      linear warm-up length (warmup, warmup-cosine)\n"
    "  --clip-grad-norm X    clip the gradients' total L2 norm to X\n"
    "  --accumulate N        micro-batches per optimiser step\n"
    "  --label-smoothing X   cross-entropy label smoothing\n"
    "  --seed N              seed for initialisation, shuffling and dropout\n"
    "  --threads N           CPU threads (OpenBLAS and Ember's pool)\n"
    "  --workers N           data-loader threads\n"
    "  --limit N             use only the first N training samples\n"
    "  --no-shuffle          keep the training set in file order\n"
    "  --dataset NAME        fashion-mnist | cifar10 | synthetic\n"
    "  --data-dir DIR        folder of the dataset's files\n"
    "  --init FILE           start from these weights (.safetensors)\n"
    "  --save FILE           write the final weights (.safetensors)\n"
    "  --quiet               no progress output\n";

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ember: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(run 'ember --help' for the options)\n");
  va_end(ap);
  exit(EXIT_USAGE);
}

static int fail(const em_error *err, const char *what) {
  fprintf(stderr, "ember: %s%s%s\n", what ? what : "", what ? ": " : "", err->msg);
  return err->status == EM_ERR_INVALID || err->status == EM_ERR_SHAPE ? EXIT_USAGE : 1;
}

static long long parse_int(const char *flag, const char *s, long long lo, long long hi) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    die_usage("%s expects a whole number from %lld to %lld, got '%s'", flag, lo, hi, s);
  return v;
}

static double parse_num(const char *flag, const char *s, double lo, double hi) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi)
    die_usage("%s expects a number from %g to %g, got '%s'", flag, lo, hi, s);
  return v;
}

static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

enum {
  OPT_EPOCHS = 256, OPT_BATCH, OPT_LR, OPT_OPTIMIZER, OPT_MOMENTUM, OPT_NESTEROV, OPT_WD,
  OPT_SCHEDULE, OPT_WARMUP, OPT_CLIP, OPT_ACCUM, OPT_SMOOTH, OPT_SEED, OPT_THREADS, OPT_WORKERS,
  OPT_LIMIT, OPT_NO_SHUFFLE, OPT_DATASET, OPT_DATA_DIR, OPT_INIT, OPT_SAVE, OPT_QUIET,
  OPT_WEIGHTS, OPT_HELP,
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
    {"init", required_argument, 0, OPT_INIT},
    {"save", required_argument, 0, OPT_SAVE},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"weights", required_argument, 0, OPT_WEIGHTS},
    {"help", no_argument, 0, OPT_HELP},
    {0, 0, 0, 0},
};

typedef struct {
  const char *init, *save, *weights;
  bool quiet;
  bool threads_given;
} cli_extra;

/* Applies the flags over cfg (which already holds the spec's defaults). */
static void parse_flags(int argc, char **argv, em_train_config *cfg, cli_extra *x) {
  int c;
  opterr = 0; /* we report unknown options ourselves */
  optind = 3; /* after the command word and the spec */
  while ((c = getopt_long(argc, argv, ":", long_opts, NULL)) != -1) {
    switch (c) {
    case OPT_EPOCHS: cfg->epochs = (int)parse_int("--epochs", optarg, 0, 1000000); break;
    case OPT_BATCH: cfg->batch_size = (int)parse_int("--batch", optarg, 1, 1 << 20); break;
    case OPT_LR: cfg->optim.lr = parse_num("--lr", optarg, 0, 1e6); break;
    case OPT_OPTIMIZER: {
      em_optim_kind k;
      if (strcmp(optarg, "sgd") == 0) k = EM_OPTIM_SGD;
      else if (strcmp(optarg, "adam") == 0) k = EM_OPTIM_ADAM;
      else if (strcmp(optarg, "adamw") == 0) k = EM_OPTIM_ADAMW;
      else die_usage("--optimizer expects sgd, adam or adamw, got '%s'", optarg);
      if (k != cfg->optim.kind) { /* switching kind: that optimiser's defaults, keep lr */
        double lr = cfg->optim.lr;
        em_optim_config_defaults(&cfg->optim, k);
        cfg->optim.lr = lr;
      }
      break;
    }
    case OPT_MOMENTUM: cfg->optim.momentum = parse_num("--momentum", optarg, 0, 1); break;
    case OPT_NESTEROV: cfg->optim.nesterov = true; break;
    case OPT_WD: cfg->optim.weight_decay = parse_num("--weight-decay", optarg, 0, 1e3); break;
    case OPT_SCHEDULE: {
      em_error err = {0};
      if (em_schedule_parse_name(optarg, &cfg->schedule.kind, &err) != EM_OK)
        die_usage("--schedule: %s", err.msg);
      break;
    }
    case OPT_WARMUP:
      cfg->schedule.warmup_steps = parse_int("--warmup-steps", optarg, 0, 1LL << 40);
      break;
    case OPT_CLIP: cfg->clip_grad_norm = parse_num("--clip-grad-norm", optarg, 0, 1e12); break;
    case OPT_ACCUM: cfg->accumulate = (int)parse_int("--accumulate", optarg, 1, 1 << 16); break;
    case OPT_SMOOTH: cfg->label_smoothing = parse_num("--label-smoothing", optarg, 0, 1); break;
    case OPT_SEED: cfg->seed = (uint64_t)parse_int("--seed", optarg, 0, 1LL << 62); break;
    case OPT_THREADS:
      cfg->threads = (int)parse_int("--threads", optarg, 1, 256);
      x->threads_given = true;
      break;
    case OPT_WORKERS: cfg->workers = (int)parse_int("--workers", optarg, 0, 64); break;
    case OPT_LIMIT: cfg->limit = parse_int("--limit", optarg, 1, 1LL << 40); break;
    case OPT_NO_SHUFFLE: cfg->shuffle = false; break;
    case OPT_DATASET: snprintf(cfg->dataset, sizeof cfg->dataset, "%s", optarg); break;
    case OPT_DATA_DIR: snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", optarg); break;
    case OPT_INIT: x->init = optarg; break;
    case OPT_SAVE: x->save = optarg; break;
    case OPT_QUIET: x->quiet = true; break;
    case OPT_WEIGHTS: x->weights = optarg; break;
    case OPT_HELP: fputs(usage_text, stdout); exit(0);
    case ':': die_usage("%s needs a value", argv[optind - 1]);
    default: die_usage("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) die_usage("unexpected argument '%s'", argv[optind]);
}

static int cmd_info(int argc, char **argv) {
  if (argc != 3) die_usage("info expects one SPEC file");
  em_error err = {0};
  em_spec *spec = em_spec_load(argv[2], &err);
  if (!spec) return fail(&err, NULL);
  int rc = em_spec_print_summary(spec, stdout, &err) == EM_OK ? 0 : fail(&err, argv[2]);
  em_spec_free(spec);
  return rc;
}

/* Spec, config and flags: shared by train and eval. */
static em_spec *load_setup(int argc, char **argv, em_train_config *cfg, cli_extra *x) {
  if (argc < 3 || argv[2][0] == '-') die_usage("%s expects a SPEC file first", argv[1]);
  em_error err = {0};
  em_spec *spec = em_spec_load(argv[2], &err);
  if (!spec) exit(fail(&err, NULL));
  em_train_config_defaults(cfg);
  if (em_train_config_from_spec(cfg, spec, &err) != EM_OK) exit(fail(&err, argv[2]));
  parse_flags(argc, argv, cfg, x);
  if (em_train_config_validate(cfg, &err) != EM_OK) exit(fail(&err, NULL));
  return spec;
}

static em_dataset *open_data(const em_spec *spec, const em_train_config *cfg, bool train) {
  em_error err = {0};
  int64_t shape[EM_MAX_DIMS], out[EM_MAX_DIMS];
  int nd = em_spec_input_shape(spec, shape);
  em_spec_output_shape(spec, out);
  em_dataset *ds = em_dataset_open_named(cfg->dataset, cfg->data_dir, train, shape, nd,
                                         (int)out[0], &err);
  if (!ds) exit(fail(&err, cfg->dataset));
  if (em_train_check_fit(spec, ds, cfg->dataset, cfg->loss, &err) != EM_OK)
    exit(fail(&err, NULL));
  return ds;
}

static void print_result_json(const em_train_config *cfg, const em_train_summary *s,
                              const char *spec_name, int64_t params) {
  json_t *o = json_object();
  json_object_set_new(o, "model", json_string(spec_name));
  json_object_set_new(o, "epochs", json_integer(s->epochs));
  json_object_set_new(o, "steps", json_integer(s->steps));
  json_object_set_new(o, "batch_size", json_integer(cfg->batch_size));
  json_object_set_new(o, "params", json_integer(params));
  json_object_set_new(o, "train_loss", json_real(s->final_train_loss));
  if (s->evaluated) {
    json_object_set_new(o, "test_loss", json_real(s->test_loss));
    json_object_set_new(o, "test_accuracy", json_real(s->test_accuracy));
  } else {
    json_object_set_new(o, "test_loss", json_null());
    json_object_set_new(o, "test_accuracy", json_null());
  }
  json_object_set_new(o, "train_seconds", json_real(s->train_seconds));
  json_object_set_new(o, "train_samples_per_sec", json_real(s->train_samples_per_sec));
  json_object_set_new(o, "threads", json_integer(cfg->threads));
  json_object_set_new(o, "blas_core", json_string(em_blas_core()));
  json_object_set_new(o, "seed", json_integer((json_int_t)cfg->seed));
  json_object_set_new(o, "stopped", json_boolean(s->stopped));
  json_object_set_new(o, "peak_rss_mb", json_real(round(peak_rss_mb() * 10) / 10));
  char *txt = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
  printf("%s\n", txt);
  fflush(stdout);
  free(txt);
  json_decref(o);
}

static int cmd_train(int argc, char **argv) {
  em_train_config cfg;
  cli_extra x = {0};
  em_spec *spec = load_setup(argc, argv, &cfg, &x);
  em_error err = {0};
  em_dataset *train = open_data(spec, &cfg, true);
  em_dataset *test = open_data(spec, &cfg, false);
  em_model *model = em_model_new(spec, cfg.seed, &err);
  int rc = 0;
  if (!model) {
    rc = fail(&err, argv[2]);
    goto out;
  }
  if (x.init && em_model_load(model, x.init, &err) != EM_OK) {
    rc = fail(&err, x.init);
    goto out;
  }
  em_train_summary sum = {0};
  if (cfg.epochs > 0) {
    em_trainer *tr = em_trainer_new(model, &cfg, train, test, &err);
    if (!tr) {
      rc = fail(&err, NULL);
      goto out;
    }
    cli_progress prog;
    cli_progress_init(&prog, x.quiet, em_spec_name(spec));
    em_status st = em_trainer_run(tr, cli_progress_event, &prog, &err);
    cli_progress_finish(&prog);
    em_trainer_summary(tr, &sum);
    em_trainer_free(tr);
    if (st != EM_OK) {
      rc = fail(&err, "training stopped");
      goto out;
    }
  }
  if (x.save && em_model_save(model, x.save, &err) != EM_OK) {
    rc = fail(&err, x.save);
    goto out;
  }
  print_result_json(&cfg, &sum, em_spec_name(spec), em_spec_param_count(spec));
out:
  em_model_free(model);
  em_dataset_free(train);
  em_dataset_free(test);
  em_spec_free(spec);
  return rc;
}

static int cmd_eval(int argc, char **argv) {
  em_train_config cfg;
  cli_extra x = {0};
  em_spec *spec = load_setup(argc, argv, &cfg, &x);
  if (!x.weights) die_usage("eval needs --weights FILE");
  em_error err = {0};
  em_dataset *test = open_data(spec, &cfg, false);
  em_model *model = em_model_new(spec, cfg.seed, &err);
  int rc = 0;
  double loss = 0, acc = 0;
  if (!model) rc = fail(&err, argv[2]);
  else if (em_model_load(model, x.weights, &err) != EM_OK) rc = fail(&err, x.weights);
  else {
    em_set_num_threads(cfg.threads);
    if (em_evaluate(model, test, cfg.batch_size, cfg.loss, 0.0, &loss, &acc, &err) != EM_OK)
      rc = fail(&err, "evaluation");
  }
  if (rc == 0) {
    fprintf(stderr, "test loss %.4f, accuracy %.2f%% on %lld samples\n", loss, 100 * acc,
            (long long)em_dataset_len(test));
    printf("{\"model\":\"%s\",\"test_loss\":%.6g,\"test_accuracy\":%.6g,\"peak_rss_mb\":%.1f}\n",
           em_spec_name(spec), loss, acc, peak_rss_mb());
  }
  em_model_free(model);
  em_dataset_free(test);
  em_spec_free(spec);
  return rc;
}

static void log_to_stderr(em_log_level level, const char *msg, void *user) {
  (void)user;
  if (level >= EM_LOG_WARNING) fprintf(stderr, "ember: %s\n", msg);
}

/* OpenBLAS 0.3.21 does not recognise some recent processors (Sapphire
 * Rapids under KVM, for one) and falls back to its SSE3 "Prescott"
 * kernels, several times slower. Its kernel is chosen when the library
 * loads, from OPENBLAS_CORETYPE: so when that is unset and the fallback
 * ran on a processor with AVX2 or AVX-512, start again with the matching
 * kernel family named. A person's own OPENBLAS_CORETYPE always wins. */
static void use_processor_blas_kernels(char **argv) {
  if (getenv("OPENBLAS_CORETYPE") || strcmp(em_blas_core(), "Prescott") != 0) return;
  __builtin_cpu_init();
  const char *core = NULL;
  if (__builtin_cpu_supports("avx512f")) core = "SkylakeX";
  else if (__builtin_cpu_supports("avx2")) core = "Haswell";
  if (!core) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE"); /* exec failed: carry on as we are */
}

int main(int argc, char **argv) {
  use_processor_blas_kernels(argv);
  em_log_set_handler(log_to_stderr, NULL);
  if (argc < 2) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    fputs(usage_text, stdout);
    return 0;
  }
  if (strcmp(cmd, "train") == 0) return cmd_train(argc, argv);
  if (strcmp(cmd, "eval") == 0) return cmd_eval(argc, argv);
  if (strcmp(cmd, "info") == 0) return cmd_info(argc, argv);
  die_usage("unknown command '%s'; commands: train, eval, info", cmd);
}
