/* cli-common.c: usage errors, error reports, argument parsing, the
 * registry folder, human-readable times, clocks and the usable cores for
 * every `ember` command. */
#include "cli-common.h"
#include "cli-table.h"

#include "em-io.h"

#include <errno.h>
#include <float.h>
#include <libgen.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* "ember: ", or "ember: rank N: " on a data-parallel rank other than 0 */
static char g_prefix[48] = "ember: ";
static bool g_hold;            /* errors are held, not printed */
static char g_first[1400];     /* the first error reported */
static bool g_first_printed;

void cli_set_rank(int rank, bool hold_errors) {
  if (rank > 0) snprintf(g_prefix, sizeof g_prefix, "ember: rank %d: ", rank);
  g_hold = hold_errors;
}

const char *cli_first_error(void) { return g_first; }

void cli_print_held(void) {
  if (g_first[0] && !g_first_printed) fprintf(stderr, "%s%s\n", g_prefix, g_first);
  g_first_printed = true;
}

void cli_die_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s", g_prefix);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(run 'ember --help' for the commands and options)\n");
  va_end(ap);
  exit(CLI_EXIT_USAGE);
}

/* "ember: WHAT: message"; WHAT (often a file name) is left out when the
 * message quotes it already ('WHAT'), as the readers' messages do, or
 * starts with it ("WHAT: ...", as a plugin dataset's do). */
static void report(const em_error *err, const char *what) {
  if (what && err->msg[0]) {
    size_t n = strlen(what);
    if (strncmp(err->msg, what, n) == 0 && err->msg[n] == ':') what = NULL;
    for (const char *q = what ? strchr(err->msg, '\'') : NULL; q; q = strchr(q + 1, '\''))
      if (strncmp(q + 1, what, n) == 0 && q[1 + n] == '\'') {
        what = NULL;
        break;
      }
  }
  char line[sizeof g_first];
  snprintf(line, sizeof line, "%s%s%s", what ? what : "", what ? ": " : "",
           err->msg[0] ? err->msg : em_status_name(err->status));
  bool first = !g_first[0];
  if (first) memcpy(g_first, line, sizeof line);
  if (g_hold) return; /* cli_print_held, or rank 0, says the first */
  if (first) g_first_printed = true;
  fprintf(stderr, "%s%s\n", g_prefix, line);
}

int cli_fail(const em_error *err, const char *what) {
  report(err, what);
  return err->status == EM_ERR_INVALID || err->status == EM_ERR_SHAPE ? CLI_EXIT_USAGE : 1;
}

int cli_fail1(const em_error *err, const char *what) {
  report(err, what);
  return 1;
}

void cli_check_output_path(const char *flag, const char *path, bool atomic) {
  struct stat sb;
  if (!path[0]) cli_die_usage("%s needs a file name", flag);
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
    cli_die_usage("%s %s: that is a folder; give a file name", flag, path);
  if (atomic) { /* as the write will: a temporary beside the target, removed again */
    em_atomic_file f;
    em_error err = {0};
    if (em_atomic_begin(path, &f, &err) != EM_OK) cli_die_usage("%s: %s", flag, err.msg);
    em_atomic_end(&f, EM_ERR_INVALID, NULL);
    return;
  }
  char *copy = strdup(path);
  const char *dir = copy ? dirname(copy) : ".";
  if (access(dir, W_OK) != 0)
    cli_die_usage("%s %s: cannot write in the folder %s: %s", flag, path, dir, strerror(errno));
  free(copy);
}

void cli_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%swarning: ", g_prefix);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

void *cli_xmalloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (!p) {
    fprintf(stderr, "ember: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

char *cli_xstrdup(const char *s) {
  size_t n = strlen(s ? s : "") + 1;
  char *d = cli_xmalloc(n);
  memcpy(d, s ? s : "", n);
  return d;
}

long long cli_parse_int(const char *flag, const char *s, long long lo, long long hi) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    cli_die_usage("%s expects a whole number from %lld to %lld, got '%s'", flag, lo, hi, s);
  return v;
}

double cli_parse_num(const char *flag, const char *s, double lo, double hi) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  /* a decimal number: strtod also reads hexadecimal ("0x10" is 16), and
   * reports underflow (1e-320) as a range error though the value is fine */
  bool hex = strpbrk(s, "xX") != NULL, underflow = errno == ERANGE && fabs(v) <= DBL_MIN;
  if ((errno && !underflow) || hex || end == s || *end || !isfinite(v) || v < lo || v > hi)
    cli_die_usage("%s expects a number from %g to %g, got '%s'", flag, lo, hi, s);
  return v;
}

int cli_parse_args(int argc, char **argv, int first, const cli_opt *opts, const char **pos,
                   int min_pos, int max_pos, const char *what) {
  int np = 0;
  bool options = true;
  for (int i = first; i < argc; i++) {
    const char *a = argv[i];
    if (options && strcmp(a, "--") == 0) {
      options = false;
      continue;
    }
    if (options && a[0] == '-' && a[1] == '-' && a[2]) {
      const char *name = a + 2, *eq = strchr(name, '=');
      size_t len = eq ? (size_t)(eq - name) : strlen(name);
      const cli_opt *o = opts;
      while (o->name && !(strlen(o->name) == len && strncmp(o->name, name, len) == 0)) o++;
      if (!o->name) {
        if (len == 4 && strncmp(name, "help", 4) == 0) {
          cli_usage_print(stdout);
          exit(0);
        }
        cli_die_usage("%s: unknown option '%.*s'", what, (int)(len + 2), a);
      }
      if (o->value) {
        if (eq) *o->value = eq + 1;
        else if (i + 1 < argc) *o->value = argv[++i];
        else cli_die_usage("%s: --%s needs a value", what, o->name);
      } else {
        if (eq) cli_die_usage("%s: --%s takes no value", what, o->name);
        *o->flag = true;
      }
      continue;
    }
    if (options && a[0] == '-' && a[1] && !(a[1] >= '0' && a[1] <= '9'))
      cli_die_usage("%s: unknown option '%s'", what, a);
    if (np >= max_pos) cli_die_usage("%s: unexpected argument '%s'", what, a);
    pos[np++] = a;
  }
  if (np < min_pos)
    cli_die_usage("%s: expects %s%d argument%s, got %d", what, max_pos > min_pos ? "at least " : "",
                  min_pos, min_pos == 1 ? "" : "s", np);
  return np;
}

em_status cli_registry_dir(const char *dir, char *out, size_t cap, em_error *err) {
  if (dir && !dir[0]) /* not the default registry in its place: gc there would act on it */
    return em_error_set(err, EM_ERR_INVALID, "--registry was given an empty path (an unset "
                        "shell variable?): give a folder, or leave --registry out for the "
                        "default registry");
  if (dir) {
    if ((size_t)snprintf(out, cap, "%s", dir) >= cap)
      return em_error_set(err, EM_ERR_INVALID, "--registry: the path is too long");
    return EM_OK;
  }
  return em_store_default_dir(out, cap, err);
}

bool cli_registry_exists(const char *dir) {
  char path[4096];
  struct stat st;
  /* a path that is a file, and a registry.db that is a broken link (a
   * drive not mounted), are not "no registry yet": opening says what */
  if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) return true;
  snprintf(path, sizeof path, "%s/registry.db", dir);
  if (lstat(path, &st) == 0) return true;
  snprintf(path, sizeof path, "%s/artifacts", dir); /* registry.db lost beside its files */
  return stat(path, &st) == 0;
}

em_store *cli_store_open(const char *dir_flag, bool read_only) {
  char dir[4096];
  em_error err = {0};
  if (cli_registry_dir(dir_flag, dir, sizeof dir, &err) != EM_OK) {
    cli_fail1(&err, "registry");
    return NULL;
  }
  em_store *s = em_store_open(dir, read_only, &err);
  if (!s) cli_fail1(&err, NULL);
  return s;
}

em_status cli_run_id(em_store *s, const char *text, int64_t *id, em_error *err) {
  if (strcmp(text, "latest") == 0) {
    em_run_filter f = {.any_status = true, .limit = 1};
    em_run *runs = NULL;
    int n = 0;
    if (em_store_runs_list(s, &f, &runs, &n, err) != EM_OK) return err->status;
    if (n == 0) {
      em_runs_free(runs, n);
      return em_error_set(err, EM_ERR_INVALID, "the registry %s holds no runs yet",
                          em_store_dir(s));
    }
    *id = runs[0].id;
    em_runs_free(runs, n);
    return EM_OK;
  }
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end || v < 1)
    return em_error_set(err, EM_ERR_INVALID,
                        "'%s' is not a run id: give the number 'ember runs' shows, or 'latest'",
                        text);
  *id = v;
  return EM_OK;
}

/* Times past the year 9999 and durations past 30,000 years come only
 * from a damaged registry: shown as "-", like a missing one. */
#define CLI_MAX_UNIX_S 253402300799.0
#define CLI_MAX_DURATION_S 1e12

void cli_format_time(double unix_s, char *buf, size_t cap) {
  time_t t = (time_t)(unix_s > 0 && unix_s <= CLI_MAX_UNIX_S ? unix_s : 0);
  struct tm tm;
  if (t == 0 || !localtime_r(&t, &tm) || !strftime(buf, cap, "%Y-%m-%d %H:%M", &tm))
    snprintf(buf, cap, "-");
}

void cli_format_duration(double s, char *buf, size_t cap) {
  if (!isfinite(s) || s < 0 || s > CLI_MAX_DURATION_S) {
    snprintf(buf, cap, "-");
    return;
  }
  if (s < 10) {
    snprintf(buf, cap, "%.1fs", s);
    return;
  }
  long t = (long)(s + 0.5);
  if (t < 60) snprintf(buf, cap, "%lds", t);
  else if (t < 3600) snprintf(buf, cap, "%ldm %02lds", t / 60, t % 60);
  else if (t < 86400) snprintf(buf, cap, "%ldh %02ldm", t / 3600, t / 60 % 60);
  else snprintf(buf, cap, "%ldd %ldh", t / 86400, t / 3600 % 24);
}

void cli_format_bytes(int64_t n, char *buf, size_t cap) {
  if (n < 0) snprintf(buf, cap, "-");
  else em_format_bytes(n, buf, cap);
}

double cli_wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double cli_mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_usable_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

em_status cli_quant_check(const em_quant_report *rep, const char *name, em_error *err) {
  if (rep->layers_quantized > 0) return EM_OK;
  char *shown = cli_display_text(name);
  em_status st =
      rep->layers_too_wide
          ? em_error_set(err, EM_ERR_INVALID, "the Linear layers of model '%s' have more than %d "
                         "inputs, more than int8's exact int32 sums take: they stay f32; run it "
                         "without --quantize", shown, EM_QUANT_MAX_INPUTS)
          : em_error_set(err, EM_ERR_INVALID, "model '%s' has no Linear layer, the layers int8 "
                         "covers; run it without --quantize", shown);
  free(shown);
  return st;
}

em_quant_mode cli_parse_quantize(const char *text) {
  em_quant_mode mode = EM_QUANT_NONE;
  em_error err = {0};
  if (text && em_quant_mode_parse(text, &mode, &err) != EM_OK)
    cli_die_usage("--quantize: %s", err.msg);
  return mode;
}
