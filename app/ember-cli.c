/* ember-cli.c: `ember`, the command line (no display needed): main() and
 * the command table. Each command lives in its own cmd-*.c file. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli-commands.h"
#include "cli-common.h"
#include "cmd-profile.h"
#include "em-cpu.h"
#include "em-pool.h"
#include "plugin-load.h"

static void log_to_stderr(em_log_level level, const char *msg, void *user) {
  (void)user;
  if (level >= EM_LOG_WARNING) fprintf(stderr, "ember: %s\n", msg);
}

/* OpenBLAS 0.3.21 does not recognise some recent processors (Sapphire
 * Rapids under KVM, for one) and falls back to its SSE3 "Prescott"
 * kernels, several times slower; and under an EMBER_CPU_ISA cap below
 * what the processor has, OpenBLAS should run that level's kernels too,
 * so that a capped run computes as a processor of that level would. Its
 * kernel is chosen when the library loads, from OPENBLAS_CORETYPE: so
 * when that is unset and the kernel is not the one wanted, start again
 * with it named. A person's own OPENBLAS_CORETYPE always wins. */
static void use_processor_blas_kernels(char **argv) {
  if (getenv("OPENBLAS_CORETYPE")) return;
  em_cpu_isa have = em_cpu_isa_detected(), want = have;
  const char *cap = getenv("EMBER_CPU_ISA");
  em_cpu_isa capped;
  if (cap && em_cpu_isa_parse(cap, &capped) && capped < have) want = capped;
  const char *core = NULL;
  if (want < have) core = em_cpu_isa_blas_core(want);
  else if (strcmp(em_blas_core(), "Prescott") == 0 && have >= EM_CPU_ISA_AVX2)
    core = em_cpu_isa_blas_core(have);
  if (!core || strcmp(core, em_blas_core()) == 0) return;
  setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE"); /* exec failed: carry on as we are */
}

/* `ember profile` (cmd-profile.c) takes its own command word as argv[0]. */
static int cmd_profile(int argc, char **argv) { return em_cli_profile(argc - 1, argv + 1); }

/* plugins: load every plugin before the command runs (train records the
 * plugins it ran with; `plugins` lists them). The others load plugins only
 * when something they read names a layer type, dataset kind or metric
 * that is not built in (plugin-load.h): `ember runs` runs no plugin code. */
static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  bool plugins;
} commands[] = {
    {"train", cli_cmd_train, true},      {"eval", cli_cmd_eval, false},
    {"info", cli_cmd_info, false},       {"runs", cli_cmd_runs, false},
    {"run", cli_cmd_run, false},         {"compare", cli_cmd_compare, false},
    {"metrics", cli_cmd_metrics, false}, {"models", cli_cmd_models, false},
    {"model", cli_cmd_model, false},     {"gc", cli_cmd_gc, false},
    {"profile", cmd_profile, false},     {"export", cli_cmd_export, false},
    {"plugins", cli_cmd_plugins, true},  {"predict", cli_cmd_predict, false},
    {"serve", cli_cmd_serve, false},     {"devices", cli_cmd_devices, false},
    {"drift", cli_cmd_drift, false},     {"sweep", cli_cmd_sweep, false},
    {"generate", cli_cmd_generate, false}, {"queue", cli_cmd_queue, false},
};

int main(int argc, char **argv) {
  /* A reader that goes away (`ember train ... | head`) must not kill a
   * run that is training or recording: writes to a closed pipe fail with
   * EPIPE instead, and the progress output stops printing (cli-progress.c). */
  signal(SIGPIPE, SIG_IGN);
  use_processor_blas_kernels(argv);
  em_log_set_handler(log_to_stderr, NULL);
  em_cpu_isa_active(); /* a bad EMBER_CPU_ISA is warned of now, once */
  argc = app_plugin_options(argc, argv, true); /* --plugin-dir, --metric: global options */
  if (argc < 2) {
    cli_usage_print(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    cli_usage_print(stdout);
    return 0;
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0) {
    printf("ember %s\n", EMBER_VERSION);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(cmd, commands[i].name) == 0) {
      if (commands[i].plugins) app_plugins_load_now();
      app_plugins_select_metrics();
      return commands[i].run(argc, argv);
    }
  cli_die_usage("unknown command '%s'; commands: train, eval, info, runs, run, compare, "
                "metrics, models, model, plugins, gc, profile, export, predict, serve, drift, "
                "sweep, queue, devices, generate",
                cmd);
}
