/* error.c: error messages, the log handler and the assertion path. */
#include "em-error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

em_status em_error_set(em_error *err, em_status st, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->status = st;
  }
  return st;
}

em_status em_error_prefix(em_error *err, const char *fmt, ...) {
  if (!err) return EM_ERR_INVALID;
  char head[512], old[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  snprintf(err->msg, sizeof err->msg, "%.500s: %.500s", head, old);
  return err->status;
}

void em_error_clear(em_error *err) {
  if (err) {
    err->status = EM_OK;
    err->msg[0] = '\0';
  }
}

const char *em_status_name(em_status st) {
  switch (st) {
  case EM_OK: return "ok";
  case EM_ERR_INVALID: return "invalid argument";
  case EM_ERR_SHAPE: return "shape mismatch";
  case EM_ERR_IO: return "input/output error";
  case EM_ERR_FORMAT: return "malformed data";
  case EM_ERR_NOMEM: return "out of memory";
  case EM_ERR_UNSUPPORTED: return "unsupported";
  case EM_ERR_NUMERIC: return "numerical error";
  case EM_ERR_CANCELLED: return "cancelled";
  }
  return "unknown status";
}

static em_log_fn log_fn;
static void *log_user;

void em_log_set_handler(em_log_fn fn, void *user) {
  log_fn = fn;
  log_user = user;
}

void em_log_msg(em_log_level level, const char *fmt, ...) {
  if (!log_fn) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  log_fn(level, buf, log_user);
}

void em_assert_fail(const char *expr, const char *file, int line, const char *func) {
  fprintf(stderr, "ember: internal error: assertion '%s' failed in %s (%s:%d)\n", expr, func, file,
          line);
  abort();
}
