/* cmd-profile.c: `ember profile SPEC`: runs a few training steps of a spec
 * under the op profiler (em_profile_training: the trainer's own loop, a
 * few warm-up steps first, which allocate gradients and fill the
 * allocator's cache, then N profiled steps) and prints what they spent
 * their time and memory on. */
#include "cmd-profile.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "em-pool.h"
#include "em-profile.h"
#include "em-train.h"

#define EXIT_USAGE 2

static const char *usage =
    "usage: ember profile SPEC [options]\n"
    "\n"
    "Runs training steps of SPEC under the op profiler and prints the op table\n"
    "(top ops, and per layer), the FLOPs of matmul and conv ops, the memory\n"
    "summary and a leak check.\n"
    "\n"
    "  --steps N         profiled steps (default 20)\n"
    "  --warmup N        steps run before profiling starts (default 2)\n"
    "  --trace FILE      write a Chrome trace / Perfetto JSON of the profiled steps\n"
    "  --top N           rows of the op table (default 15; 0: all)\n"
    "  --sort COL        name | count | total | self | mean | percent | flops | bytes\n"
    "                    (default total)\n"
    "  --batch N         batch size (default: the spec's)\n"
    "  --threads N       CPU threads\n"
    "  --dataset NAME    fashion-mnist | cifar10 | csv | synthetic | a plugin's\n"
    "  --data-dir DIR    folder of the dataset's files (csv: the file)\n"
    "  --seed N          seed for initialisation and shuffling\n"
    "  --detect-anomaly  stop at the first op that produces NaN or infinity\n"
    "  --no-preflight    skip the memory estimate that refuses a batch past the\n"
    "                    memory free (it errs high)\n";

typedef struct {
  const char *spec_path, *trace;
  int steps, warmup, top;
  em_op_table_col sort;
  bool no_preflight;
} options;

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ember profile: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(run 'ember profile --help' for the options)\n");
  va_end(ap);
  return EXIT_USAGE;
}

static int failure(const em_error *err, const char *what) {
  fprintf(stderr, "ember profile: %s%s%s\n", what ? what : "", what ? ": " : "", err->msg);
  return err->status == EM_ERR_INVALID || err->status == EM_ERR_SHAPE ? EXIT_USAGE : 1;
}

static bool parse_count(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

enum { O_STEPS = 256, O_WARMUP, O_TRACE, O_TOP, O_SORT, O_BATCH, O_THREADS, O_DATASET,
       O_DATA_DIR, O_SEED, O_ANOMALY, O_HELP, O_NO_PREFLIGHT };

/* Fills o and the config's overrides; returns -1 to go on, else an exit status. */
static int parse(int argc, char **argv, options *o, bool *anomaly, int *batch, int *threads,
                 long long *seed, const char **dataset, const char **data_dir) {
  static const struct option longs[] = {
      {"steps", required_argument, 0, O_STEPS},     {"warmup", required_argument, 0, O_WARMUP},
      {"trace", required_argument, 0, O_TRACE},     {"top", required_argument, 0, O_TOP},
      {"sort", required_argument, 0, O_SORT},       {"batch", required_argument, 0, O_BATCH},
      {"threads", required_argument, 0, O_THREADS}, {"dataset", required_argument, 0, O_DATASET},
      {"data-dir", required_argument, 0, O_DATA_DIR}, {"seed", required_argument, 0, O_SEED},
      {"detect-anomaly", no_argument, 0, O_ANOMALY}, {"help", no_argument, 0, O_HELP},
      {"no-preflight", no_argument, 0, O_NO_PREFLIGHT},
      {0, 0, 0, 0},
  };
  opterr = 0;
  optind = 0; /* GNU: start over (another command may have run getopt) */
  int c;
  long long v;
  while ((c = getopt_long(argc, argv, ":", longs, NULL)) != -1) {
    switch (c) {
    case O_STEPS:
      if (!parse_count(optarg, 1, 100000, &v)) return usage_error("--steps expects 1 to 100000, got '%s'", optarg);
      o->steps = (int)v;
      break;
    case O_WARMUP:
      if (!parse_count(optarg, 0, 1000, &v)) return usage_error("--warmup expects 0 to 1000, got '%s'", optarg);
      o->warmup = (int)v;
      break;
    case O_TOP:
      if (!parse_count(optarg, 0, 100000, &v)) return usage_error("--top expects 0 to 100000, got '%s'", optarg);
      o->top = (int)v;
      break;
    case O_BATCH:
      if (!parse_count(optarg, 1, 1 << 20, &v)) return usage_error("--batch expects 1 to 1048576, got '%s'", optarg);
      *batch = (int)v;
      break;
    case O_THREADS:
      if (!parse_count(optarg, 1, 256, &v)) return usage_error("--threads expects 1 to 256, got '%s'", optarg);
      *threads = (int)v;
      break;
    case O_SEED:
      if (!parse_count(optarg, 0, 1LL << 62, &v)) return usage_error("--seed expects a whole number >= 0, got '%s'", optarg);
      *seed = v;
      break;
    case O_SORT: {
      em_error err = {0};
      if (em_op_table_parse_col(optarg, &o->sort, &err) != EM_OK) return usage_error("--sort: %s", err.msg);
      break;
    }
    case O_TRACE: o->trace = optarg; break;
    case O_DATASET: *dataset = optarg; break;
    case O_DATA_DIR: *data_dir = optarg; break;
    case O_ANOMALY: *anomaly = true; break;
    case O_NO_PREFLIGHT: o->no_preflight = true; break;
    case O_HELP: fputs(usage, stdout); return 0;
    case ':': return usage_error("%s needs a value", argv[optind - 1]);
    default: return usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind >= argc) return usage_error("expects a SPEC file");
  o->spec_path = argv[optind++];
  if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
  return -1;
}

/* A spec's name, its control characters spelled out ("\x1b") as the other
 * commands' cli_display_text does (this file is also built without the
 * CLI's tables, into tests/engine/profile): a name cannot send escape
 * sequences to the terminal. */
static void print_name(const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p < 0x20 || *p == 0x7f) printf("\\x%02x", *p);
    else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) printf("\\u%04x", *++p);
    else putchar(*p);
  }
}

/* What a step needs. */
/* --trace FILE can be written: checked before the profiling, which it
 * followed (a folder or an unwritable path failed after all the work). A
 * file made for the check is removed again. */
static em_status check_trace_path(const char *path, em_error *err) {
  struct stat st;
  bool existed = stat(path, &st) == 0;
  if (existed && S_ISDIR(st.st_mode))
    return em_error_set(err, EM_ERR_IO, "--trace %s: that is a folder; give a file name", path);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return em_error_set(err, EM_ERR_IO, "--trace %s: cannot write there: %s", path,
                        strerror(errno));
  close(fd);
  if (!existed) unlink(path);
  return EM_OK;
}

static void print_flops(const em_op_table *t, int steps) {
  bool any = false;
  for (int i = 0; i < t->n_rows; i++) {
    const em_op_row *r = &t->rows[i];
    if (r->flops <= 0) continue;
    if (!any) printf("\nFLOPs (matmul, linear and conv; forward and each backward GEMM)\n");
    any = true;
    printf("  %-28s %10.3f GFLOP/step %9.2f GFLOP/s\n", r->name, 1e-9 * r->flops / steps,
           r->total_ms > 0 ? 1e-6 * r->flops / r->total_ms : 0.0);
  }
}

int em_cli_profile(int argc, char **argv) {
  options o = {.steps = 20, .warmup = 2, .top = 15, .sort = EM_OP_COL_TOTAL};
  bool anomaly = false;
  int batch = 0, threads = 0;
  long long seed = -1;
  const char *dataset = NULL, *data_dir = NULL;
  int rc = parse(argc, argv, &o, &anomaly, &batch, &threads, &seed, &dataset, &data_dir);
  if (rc >= 0) return rc;

  em_error err = {0};
  em_spec *spec = em_spec_load(o.spec_path, &err);
  if (!spec) return failure(&err, NULL);
  em_train_config cfg;
  em_train_config_defaults(&cfg);
  if (em_train_config_from_spec(&cfg, spec, &err) != EM_OK) {
    em_spec_free(spec);
    return failure(&err, o.spec_path);
  }
  if (batch) cfg.batch_size = batch;
  if (threads) cfg.threads = threads;
  if (seed >= 0) cfg.seed = (uint64_t)seed;
  if (dataset) snprintf(cfg.dataset, sizeof cfg.dataset, "%s", dataset);
  if (data_dir) snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data_dir);
  em_model *model = NULL;
  em_dataset *ds = NULL;
  rc = 0;
  if (em_train_config_validate(&cfg, &err) != EM_OK) {
    rc = failure(&err, NULL);
    goto out;
  }
  em_set_num_threads(cfg.threads);
  if (o.trace && check_trace_path(o.trace, &err) != EM_OK) {
    rc = failure(&err, NULL);
    goto out;
  }
  if (!o.no_preflight) { /* a batch past the memory free is refused, as ember train does */
    int fits;
    char note[512];
    if (em_train_preflight(spec, &cfg, &fits, note, sizeof note, &err) != EM_OK) {
      rc = failure(&err, NULL);
      goto out;
    }
    if (fits != cfg.batch_size) { /* the spec's auto_batch: profile the batch that fits */
      fprintf(stderr, "ember profile: %s\n", note);
      cfg.batch_size = fits;
    }
  }

  ds = em_train_open_dataset(spec, &cfg, true, &err);
  if (!ds) {
    rc = failure(&err, NULL);
    goto out;
  }
  model = em_model_new(spec, cfg.seed, &err);
  if (!model) {
    rc = failure(&err, o.spec_path);
    goto out;
  }
  em_profile_training_options po = {.warmup = o.warmup, .steps = o.steps,
                                     .detect_anomaly = anomaly};
  if (em_profile_training(model, &cfg, ds, &po, &err) != EM_OK) {
    rc = failure(&err, "profiled training");
    goto out;
  }
  em_memory_stats ms = po.memory;
  double median = po.step_ms_median, loss = po.last_loss;
  double wall = po.step_ms_mean * po.steps_done;
  char of[64]; /* with accumulation a step is several batches: the op table counts batches */
  if (cfg.accumulate > 1) snprintf(of, sizeof of, "%d batches of %d", cfg.accumulate, cfg.batch_size);
  else snprintf(of, sizeof of, "batch %d", cfg.batch_size);
  printf("ember profile: ");
  print_name(em_spec_name(spec));
  printf(", %d steps of %s on %s (%d threads) after %d warm-up steps\n", o.steps, of,
         cfg.dataset, em_get_num_threads(), o.warmup);
  printf("step time: median %.3f ms, mean %.3f ms; last loss %.4f\n\n", median, wall / o.steps,
         loss);

  em_op_table t;
  if (em_op_table_build(&t, EM_OP_TABLE_BY_OP, &err) != EM_OK) {
    rc = failure(&err, NULL);
    goto out;
  }
  em_op_table_sort(&t, o.sort, o.sort != EM_OP_COL_NAME);
  char *txt = em_op_table_format(&t, o.top);
  printf("Top ops\n%s", txt ? txt : "(out of memory)\n");
  free(txt);
  if (t.dropped && t.steps < o.steps) /* the ring kept the newest records only */
    printf("(the profiler keeps %lld records: the tables, the FLOPs and the trace cover the "
           "last %lld of the %d steps; profile fewer --steps to see them all)\n",
           (long long)t.records, (long long)t.steps, o.steps);
  print_flops(&t, t.steps > 0 ? (int)t.steps : o.steps); /* per step the records hold */
  em_op_table_free(&t);

  if (em_op_table_build(&t, EM_OP_TABLE_BY_LAYER, &err) == EM_OK) {
    em_op_table_sort(&t, o.sort, o.sort != EM_OP_COL_NAME);
    txt = em_op_table_format(&t, 0);
    printf("\nPer layer\n%s", txt ? txt : "(out of memory)\n");
    free(txt);
    em_op_table_free(&t);
  }

  txt = em_memory_summary(&ms, "cpu");
  printf("\n%s", txt ? txt : "(out of memory)\n");
  free(txt);
  em_leak_report leak;
  em_leak_check(o.steps < 10 ? o.steps : 10, &leak);
  printf("leak check: %s\n", leak.message);

  if (o.trace) {
    if (em_profile_write_trace(o.trace, &err) != EM_OK) {
      rc = failure(&err, NULL);
      goto out;
    }
    printf("trace: %s (%lld events; open it in https://ui.perfetto.dev)\n", o.trace,
           (long long)em_profile_record_count());
  }
out:
  em_model_free(model);
  em_dataset_free(ds);
  em_spec_free(spec);
  return rc;
}
