/* em-error.h: statuses, error messages and the log callback of libember.
 *
 * Two tiers (house style 9): EM_ASSERT for broken invariants inside the
 * engine (prints file and line, aborts); a returned em_status plus a
 * message in an em_error for anything a user or a file can cause.
 * Library code never prints and never exits: it reports through the log
 * handler the host installs. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>

typedef enum {
  EM_OK = 0,
  EM_ERR_INVALID,     /* a bad argument or value from the caller or a spec */
  EM_ERR_SHAPE,       /* shapes that do not fit together */
  EM_ERR_IO,          /* a file that cannot be opened, read or written */
  EM_ERR_FORMAT,      /* a file whose contents are malformed or truncated */
  EM_ERR_NOMEM,       /* an allocation failed or a size is absurd */
  EM_ERR_UNSUPPORTED, /* a valid request this build or device cannot do */
  EM_ERR_NUMERIC,     /* NaN or infinity where a number is needed */
  EM_ERR_CANCELLED,   /* stopped on request */
} em_status;

typedef struct em_error {
  em_status status;
  char msg[1024];
} em_error;

/* Fills err (which may be NULL) and returns st, so that callers can write
 * `return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", ...);`. */
em_status em_error_set(em_error *err, em_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes an existing message: "context: old message". */
em_status em_error_prefix(em_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void em_error_clear(em_error *err);
const char *em_status_name(em_status st);

typedef enum { EM_LOG_DEBUG, EM_LOG_INFO, EM_LOG_WARNING, EM_LOG_ERROR } em_log_level;
typedef void (*em_log_fn)(em_log_level level, const char *msg, void *user);
/* Installs the handler that receives the engine's log lines; NULL drops them. */
void em_log_set_handler(em_log_fn fn, void *user);
void em_log_msg(em_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Broken invariant inside the engine: never for user input. */
_Noreturn void em_assert_fail(const char *expr, const char *file, int line, const char *func);
#define EM_ASSERT(x) \
  do { if (__builtin_expect(!(x), 0)) em_assert_fail(#x, __FILE__, __LINE__, __func__); } while (0)
