/* json-write.c: JSON text with numbers in their shortest round-tripping
 * form, laid out as the zoo's spec files are (em-io.h: em_json_write). */
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "em-io.h"

typedef struct {
  char *s;
  size_t len, cap;
  bool ok;
} buf;

static void put(buf *b, const char *s, size_t n) {
  if (!b->ok) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (b->len + n + 1 > cap) cap *= 2;
    char *t = realloc(b->s, cap);
    if (!t) {
      b->ok = false;
      return;
    }
    b->s = t;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static void put_string(buf *b, const char *s, size_t n) {
  put(b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[8];
    switch (c) {
    case '"': puts_(b, "\\\""); break;
    case '\\': puts_(b, "\\\\"); break;
    case '\b': puts_(b, "\\b"); break;
    case '\f': puts_(b, "\\f"); break;
    case '\n': puts_(b, "\\n"); break;
    case '\r': puts_(b, "\\r"); break;
    case '\t': puts_(b, "\\t"); break;
    default:
      if (c < 0x20) {
        snprintf(esc, sizeof esc, "\\u%04x", c);
        puts_(b, esc);
      } else {
        put(b, (const char *)&s[i], 1);
      }
    }
  }
  put(b, "\"", 1);
}

bool em_json_real_format(double v, char *out, size_t size) {
  if (!isfinite(v) || size < 32) return false;
  char tmp[64];
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, v);
    if (prec == 17 || strtod(tmp, NULL) == v) break;
  }
  /* the locale's decimal point (a GTK program runs in the user's locale) */
  const char *dp = localeconv()->decimal_point;
  if (dp && dp[0] && strcmp(dp, ".")) {
    char *p = strstr(tmp, dp);
    if (p) {
      size_t dl = strlen(dp);
      *p = '.';
      memmove(p + 1, p + dl, strlen(p + dl) + 1);
    }
  }
  /* a real stays a real when read back: 1.0, not 1 */
  if (!strpbrk(tmp, ".eE")) strcat(tmp, ".0");
  /* jansson's exponent: no '+', no leading zeros (1e-6, 1e20) */
  char *e = strchr(tmp, 'e');
  if (e) {
    char *start = e + 1, *end = e + 2;
    if (*start == '-') start++;
    while (*end == '0' && end[1]) end++;
    if (end != start) memmove(start, end, strlen(end) + 1);
  }
  if (strlen(tmp) + 1 > size) return false;
  memcpy(out, tmp, strlen(tmp) + 1);
  return true;
}

/* v on one line, as it would be written inline */
static void write_value(buf *b, const json_t *v, int width, int indent, int col);

static void write_inline(buf *b, const json_t *v) { write_value(b, v, -1, 0, 0); }

static size_t inline_len(const json_t *v) {
  buf t = {.ok = true};
  write_inline(&t, v);
  size_t n = t.ok ? t.len : (size_t)-1;
  free(t.s);
  return n;
}

static void newline(buf *b, int indent) {
  put(b, "\n", 1);
  for (int i = 0; i < indent; i++) put(b, " ", 1);
}

/* width < 0: everything on one line; width 0: every non-empty container
 * over several lines; width > 0: a container on one line when it fits in
 * width columns from col (its trailing comma included). */
static void write_value(buf *b, const json_t *v, int width, int indent, int col) {
  char num[64];
  switch (json_typeof(v)) {
  case JSON_NULL: puts_(b, "null"); return;
  case JSON_TRUE: puts_(b, "true"); return;
  case JSON_FALSE: puts_(b, "false"); return;
  case JSON_INTEGER:
    snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    puts_(b, num);
    return;
  case JSON_REAL:
    if (!em_json_real_format(json_real_value(v), num, sizeof num)) b->ok = false;
    else puts_(b, num);
    return;
  case JSON_STRING: put_string(b, json_string_value(v), json_string_length(v)); return;
  case JSON_ARRAY:
  case JSON_OBJECT: break;
  }
  bool is_obj = json_is_object(v);
  size_t n = is_obj ? json_object_size(v) : json_array_size(v);
  if (n == 0) {
    puts_(b, is_obj ? "{}" : "[]");
    return;
  }
  bool one_line = width < 0 || (width > 0 && col + inline_len(v) + 1 <= (size_t)width);
  put(b, is_obj ? "{" : "[", 1);
  if (is_obj) {
    const char *key;
    json_t *m;
    size_t i = 0;
    json_object_foreach((json_t *)v, key, m) {
      if (i++) put(b, ",", 1);
      if (one_line) {
        if (i > 1) put(b, " ", 1);
      } else {
        newline(b, indent + 2);
      }
      size_t at = b->len;
      put_string(b, key, strlen(key));
      puts_(b, ": ");
      write_value(b, m, one_line ? -1 : width, indent + 2, indent + 2 + (int)(b->len - at));
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      if (i) put(b, ",", 1);
      if (one_line) {
        if (i) put(b, " ", 1);
      } else {
        newline(b, indent + 2);
      }
      write_value(b, json_array_get(v, i), one_line ? -1 : width, indent + 2, indent + 2);
    }
  }
  if (!one_line) newline(b, indent);
  put(b, is_obj ? "}" : "]", 1);
}

char *em_json_write(const json_t *v, int width) {
  if (!v) return NULL;
  buf b = {.ok = true};
  write_value(&b, v, width, 0, 0);
  if (!b.ok) {
    free(b.s);
    return NULL;
  }
  return b.s;
}
