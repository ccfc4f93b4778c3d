/* cli-common.h: what every `ember` command shares: usage errors (exit 2),
 * reporting an em_error (exit 1), number and argument parsing, opening
 * the registry, human times ("2026-11-29 21:04", "1m 23s"), clocks and
 * the usable cores.
 *
 * The program may exit on bad usage; the libraries it calls never do. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "em-error.h"
#include "em-quant.h"
#include "em-store.h"

#define CLI_EXIT_USAGE 2

/* The whole --help text (cli-usage.c). */
/* `ember --help`: the commands, the settings table's flags, the rest. */
void cli_usage_print(FILE *f);

/* "ember: <message>" plus a pointer to --help on stderr; exits with 2. */
_Noreturn void cli_die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "ember: <what>: <message>" on stderr. Returns the exit status: 2 for a
 * spec or a value the user gave (EM_ERR_INVALID, EM_ERR_SHAPE), else 1. */
int cli_fail(const em_error *err, const char *what);
/* The same, always exit status 1: registry commands, where an unknown run
 * or alias is bad input rather than bad usage. */
int cli_fail1(const em_error *err, const char *what);
/* Data-parallel ranks other than 0: every message starts "ember: rank N: ";
 * hold_errors: errors (cli_fail, cli_fail1) are kept, not printed, so that
 * rank 0 prints them once for the job (the rank prints its own with
 * cli_print_held when rank 0 does not answer). */
void cli_set_rank(int rank, bool hold_errors);
/* The first error reported ("what: message"), or "". */
const char *cli_first_error(void);
/* Prints the first error if it was held. */
void cli_print_held(void);
/* Exits with a usage error naming flag when path cannot be written: empty,
 * a folder, or in a folder that is missing or not writable; atomic: as
 * em_atomic_begin will write it (a device, a pipe, a link into a missing
 * folder are refused too). */
void cli_check_output_path(const char *flag, const char *path, bool atomic);
/* "ember: warning: ..." on stderr. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Out of memory in the program itself: says so and exits 1. */
void *cli_xmalloc(size_t n);
char *cli_xstrdup(const char *s);

long long cli_parse_int(const char *flag, const char *s, long long lo, long long hi);
double cli_parse_num(const char *flag, const char *s, double lo, double hi);

/* Options of the registry commands: a table of these, ended by {0}. */
typedef struct {
  const char *name;    /* "json", without the dashes */
  const char **value;  /* takes a value (--name VALUE or --name=VALUE) when set */
  bool *flag;          /* a switch when set */
} cli_opt;

/* Parses argv[first..argc): the options in opts (unknown ones are usage
 * errors naming them; "--" ends the options) and between min_pos and
 * max_pos positional arguments into pos. `what` names the command in
 * messages ("run show"). Returns the number of positionals. */
int cli_parse_args(int argc, char **argv, int first, const cli_opt *opts, const char **pos,
                   int min_pos, int max_pos, const char *what);

/* The registry folder: dir when given (--registry), else
 * em_store_default_dir ($EMBER_HOME, $XDG_DATA_HOME/ember, ...). */
em_status cli_registry_dir(const char *dir, char *out, size_t cap, em_error *err);
/* True when <dir>/registry.db exists, even as a broken link, or dir is
 * not a folder (a read command on a folder that never held a registry
 * shows an empty list instead of failing; these fail with the reason). */
bool cli_registry_exists(const char *dir);
/* Opens the registry for a command; on failure prints the error and
 * returns NULL. */
em_store *cli_store_open(const char *dir_flag, bool read_only);

/* A run id from the command line: a positive number, or "latest" (the
 * newest run). Unknown ids are the store's error later. */
em_status cli_run_id(em_store *s, const char *text, int64_t *id, em_error *err);

/* Local time "2026-11-29 21:04" ("-" for 0). */
void cli_format_time(double unix_s, char *buf, size_t cap);
/* "0.4s", "23s", "1m 23s", "2h 05m", "3d 4h". */
void cli_format_duration(double seconds, char *buf, size_t cap);
/* "812 B", "1.4 MiB" (em_format_bytes), "-" for a negative (unknown) size. */
void cli_format_bytes(int64_t n, char *buf, size_t cap);
/* Seconds since the epoch, now (wall clock). */
double cli_wall_now(void);
/* Seconds on the monotonic clock (for durations and deadlines). */
double cli_mono_now(void);
/* The cores this process may run on (its CPU affinity), at least 1. */
int cli_usable_cores(void);
/* --quantize's value (NULL: EM_QUANT_NONE); a bad one exits with 2. */
em_quant_mode cli_parse_quantize(const char *text);
/* EM_ERR_INVALID, saying why, when --quantize int8 quantised no layer of
 * model `name` (rep from em_model_quantize): a model without a Linear
 * layer, or with only ones too wide, would run f32 under an int8 label. */
em_status cli_quant_check(const em_quant_report *rep, const char *name, em_error *err);
