/* nn-common.c: shapes, parameter declarations and a growing string, shared
 * by the files of engine/nn. */
#include "nn-private.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *em_shape_format(const em_shape *s, char *buf, size_t n) {
  size_t used = 0;
  if (n == 0) return buf;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < s->ndim && used < n; i++) {
    const char *sep = i ? ", " : "";
    if (s->shape[i] < 0) used += (size_t)snprintf(buf + used, n - used, "%sN", sep);
    else used += (size_t)snprintf(buf + used, n - used, "%s%lld", sep, (long long)s->shape[i]);
  }
  if (used < n) snprintf(buf + used, n - used, "]");
  return buf;
}

void em_decl_set(em_param_decl *d, const char *name, bool buffer, em_dtype dt, int ndim,
                 const int64_t *shape, em_init_kind init, double a) {
  memset(d, 0, sizeof *d);
  d->name = name;
  d->buffer = buffer;
  d->dtype = dt;
  d->ndim = ndim;
  for (int i = 0; i < ndim; i++) d->shape[i] = shape[i];
  d->init = init;
  d->a = a;
}

int64_t em_decl_numel(const em_param_decl *d) {
  int64_t n = 1;
  for (int i = 0; i < d->ndim; i++) {
    if (d->shape[i] < 0 || __builtin_mul_overflow(n, d->shape[i], &n)) return -1;
  }
  return n;
}

void em_strbuf_printf(em_strbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0) return;
  if (b->len + (size_t)need + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + (size_t)need + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) return; /* the text stays short; callers only format messages */
    b->s = s;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)need;
}

void em_strbuf_free(em_strbuf *b) {
  free(b->s);
  b->s = NULL;
  b->len = b->cap = 0;
}

/* ---- choice attributes ---------------------------------------------------------- */

const char *em_attr_choice_name(const char *choices, int k, char *buf, size_t n) {
  const char *p = choices ? choices : "";
  for (int i = 0; i < k && p; i++) {
    p = strchr(p, '|');
    if (p) p++;
  }
  size_t len = p ? strcspn(p, "|") : 0;
  if (n == 0) return buf;
  if (len >= n) len = n - 1;
  memcpy(buf, p ? p : "", len);
  buf[len] = '\0';
  return buf;
}

int em_attr_choice_find(const char *choices, const char *name) {
  const char *p = choices;
  size_t len = strlen(name);
  for (int k = 0; p && *p; k++) {
    size_t n = strcspn(p, "|");
    if (n == len && !strncmp(p, name, len)) return k;
    p = p[n] ? p + n + 1 : NULL;
  }
  return -1;
}
