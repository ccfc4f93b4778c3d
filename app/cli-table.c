/* cli-table.c: aligned terminal tables, --json and --csv output. */
#include "cli-table.h"

#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli-common.h"
#include "em-io.h"

typedef struct {
  char *text;
  json_t *value;
} cell;

typedef struct {
  char *header, *key;
  cli_align align;
} column;

struct cli_table {
  column *cols;
  int ncols, cap_cols;
  cell *cells; /* (rows, ncols) */
  int nrows, cap_rows;
  int cur; /* next column of the current row */
};

cli_table *cli_table_new(void) { return cli_xmalloc(sizeof(cli_table)); }

void cli_table_free(cli_table *t) {
  if (!t) return;
  for (int i = 0; i < t->nrows * t->ncols; i++) {
    free(t->cells[i].text);
    json_decref(t->cells[i].value);
  }
  for (int c = 0; c < t->ncols; c++) {
    free(t->cols[c].header);
    free(t->cols[c].key);
  }
  free(t->cells);
  free(t->cols);
  free(t);
}

static void *grow(void *p, int *cap, int need, size_t elem) {
  if (need <= *cap) return p;
  int nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *q = realloc(p, (size_t)nc * elem);
  if (!q) {
    fprintf(stderr, "ember: out of memory\n");
    exit(1);
  }
  memset((char *)q + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
  *cap = nc;
  return q;
}

void cli_table_column(cli_table *t, const char *header, const char *key, cli_align align) {
  t->cols = grow(t->cols, &t->cap_cols, t->ncols + 1, sizeof(column));
  t->cols[t->ncols++] = (column){cli_xstrdup(header), cli_xstrdup(key), align};
}

int cli_table_rows(const cli_table *t) { return t->nrows; }

void cli_table_row(cli_table *t) {
  /* the previous row's missing cells stay empty (text NULL, value NULL) */
  int ncells = t->nrows * t->ncols, cap = t->cap_rows * t->ncols;
  int need = ncells + t->ncols;
  if (need > cap) {
    int rows = t->cap_rows ? t->cap_rows * 2 : 16;
    cell *n = realloc(t->cells, (size_t)rows * (size_t)t->ncols * sizeof(cell));
    if (!n) {
      fprintf(stderr, "ember: out of memory\n");
      exit(1);
    }
    memset(n + ncells, 0, (size_t)(rows * t->ncols - ncells) * sizeof(cell));
    t->cells = n;
    t->cap_rows = rows;
  }
  t->nrows++;
  t->cur = 0;
}

json_t *cli_json_text(const char *s) {
  if (!s) return json_null();
  json_t *j = json_string(s);
  if (j) return j;
  char *valid = g_utf8_make_valid(s, -1); /* json_string refuses bytes that are not UTF-8 */
  j = json_string(valid);
  g_free(valid);
  return j ? j : json_null();
}

/* What a table cell shows of text from a user (a run name, a tag, a note):
 * valid UTF-8, and control characters spelled out ("\n", "\x1b"), so a
 * name holding a newline keeps its row on one line and one holding an
 * escape sequence cannot clear or recolour the terminal (C1 controls,
 * U+0080..U+009F, spelled "\u009b"). */
char *cli_display_text(const char *s) {
  char *valid = g_utf8_make_valid(s, -1);
  GString *out = g_string_sized_new(strlen(valid));
  for (const unsigned char *p = (const unsigned char *)valid; *p; p++) {
    if (*p == '\n') g_string_append(out, "\\n");
    else if (*p == '\t') g_string_append(out, "\\t");
    else if (*p == '\r') g_string_append(out, "\\r");
    else if (*p < 0x20 || *p == 0x7f) g_string_append_printf(out, "\\x%02x", *p);
    else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) /* C1 controls: 0x9b is a CSI too */
      g_string_append_printf(out, "\\u%04x", *++p);
    else g_string_append_c(out, (char)*p);
  }
  g_free(valid);
  char *copy = cli_xstrdup(out->str); /* the callers free() it */
  g_string_free(out, TRUE);
  return copy;
}

void cli_table_cell(cli_table *t, const char *text, json_t *value) {
  if (t->nrows == 0 || t->cur >= t->ncols) {
    /* a programming error in a command: keep going, drop the cell */
    json_decref(value);
    return;
  }
  cell *c = &t->cells[(t->nrows - 1) * t->ncols + t->cur++];
  c->text = cli_display_text(text ? text : "-");
  c->value = value ? value : json_null();
}

void cli_table_str(cli_table *t, const char *s) {
  cli_table_cell(t, s ? s : "-", cli_json_text(s));
}

void cli_table_int(cli_table *t, int64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", (long long)v);
  cli_table_cell(t, buf, json_integer((json_int_t)v));
}

json_t *cli_json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

void cli_table_num(cli_table *t, double v, const char *fmt) {
  char buf[64];
  if (!isfinite(v)) snprintf(buf, sizeof buf, "%s", isnan(v) ? "-" : v > 0 ? "inf" : "-inf");
  else snprintf(buf, sizeof buf, fmt ? fmt : "%.4g", v);
  cli_table_cell(t, buf, cli_json_num(v));
}

void cli_table_pct(cli_table *t, double v) {
  char buf[32];
  if (!isfinite(v)) snprintf(buf, sizeof buf, "-");
  else snprintf(buf, sizeof buf, "%.2f%%", 100 * v);
  cli_table_cell(t, buf, cli_json_num(v));
}

void cli_table_time(cli_table *t, double unix_s) {
  char buf[32];
  cli_format_time(unix_s, buf, sizeof buf);
  cli_table_cell(t, buf, unix_s > 0 ? json_real(unix_s) : json_null());
}

void cli_table_duration(cli_table *t, double s) {
  char buf[32];
  cli_format_duration(s, buf, sizeof buf);
  cli_table_cell(t, buf, cli_json_num(s >= 0 ? s : NAN));
}

void cli_table_bytes(cli_table *t, int64_t n) {
  char buf[32];
  cli_format_bytes(n, buf, sizeof buf);
  cli_table_cell(t, buf, n >= 0 ? json_integer((json_int_t)n) : json_null());
}

/* Terminal width of UTF-8 text (cells hold valid UTF-8): two columns for
 * a wide character (CJK, most emoji), none for a combining mark, else
 * one, so that a column of such names stays aligned. */
static int width(const char *s) {
  int w = 0;
  for (const char *p = s; *p; p = g_utf8_next_char(p)) {
    gunichar c = g_utf8_get_char(p);
    w += g_unichar_iszerowidth(c) ? 0 : g_unichar_iswide(c) ? 2 : 1;
  }
  return w;
}

static const char *text_at(const cli_table *t, int r, int c) {
  const char *s = t->cells[r * t->ncols + c].text;
  return s ? s : "";
}

void cli_table_print(const cli_table *t, FILE *f, const char *indent) {
  int *w = cli_xmalloc((size_t)(t->ncols ? t->ncols : 1) * sizeof(int));
  for (int c = 0; c < t->ncols; c++) {
    w[c] = width(t->cols[c].header);
    for (int r = 0; r < t->nrows; r++) {
      int x = width(text_at(t, r, c));
      if (x > w[c]) w[c] = x;
    }
  }
  for (int r = -1; r < t->nrows; r++) {
    fputs(indent ? indent : "", f);
    for (int c = 0; c < t->ncols; c++) {
      const char *s = r < 0 ? t->cols[c].header : text_at(t, r, c);
      int pad = w[c] - width(s);
      bool last = c + 1 == t->ncols;
      if (t->cols[c].align == CLI_ALIGN_RIGHT) fprintf(f, "%*s%s", pad, "", s);
      else fprintf(f, "%s%*s", s, last ? 0 : pad, "");
      if (!last) fputs("  ", f);
    }
    fputc('\n', f);
  }
  free(w);
}

json_t *cli_table_json(const cli_table *t) {
  json_t *a = json_array();
  for (int r = 0; r < t->nrows; r++) {
    json_t *o = json_object();
    for (int c = 0; c < t->ncols; c++) {
      json_t *v = t->cells[r * t->ncols + c].value;
      json_object_set(o, t->cols[c].key, v ? v : json_null());
    }
    json_array_append_new(a, o);
  }
  return a;
}

static void csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\n\r")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

/* The shortest "%.Ng" that reads back as the same double. */
static void shortest(double v, char *buf, size_t cap) {
  for (int p = 6; p <= 17; p++) {
    snprintf(buf, cap, "%.*g", p, v);
    if (strtod(buf, NULL) == v) return;
  }
}

void cli_table_print_csv(const cli_table *t, FILE *f) {
  for (int c = 0; c < t->ncols; c++) {
    if (c) fputc(',', f);
    csv_field(f, t->cols[c].key);
  }
  fputc('\n', f);
  for (int r = 0; r < t->nrows; r++) {
    for (int c = 0; c < t->ncols; c++) {
      if (c) fputc(',', f);
      json_t *v = t->cells[r * t->ncols + c].value;
      char buf[64];
      switch (v ? json_typeof(v) : JSON_NULL) {
      case JSON_INTEGER: fprintf(f, "%lld", (long long)json_integer_value(v)); break;
      case JSON_REAL:
        shortest(json_real_value(v), buf, sizeof buf);
        fputs(buf, f);
        break;
      case JSON_STRING: csv_field(f, json_string_value(v)); break;
      case JSON_TRUE: fputs("true", f); break;
      case JSON_FALSE: fputs("false", f); break;
      default: break; /* null and nested values: empty */
      }
    }
    fputc('\n', f);
  }
}

void cli_json_print(json_t *v) {
  /* jansson's JSON_INDENT(2) layout, numbers in their shortest form that
   * reads back equal (a spec's lr 0.1, not 0.10000000000000001) */
  char *s = em_json_write(v, 0);
  if (s) printf("%s\n", s);
  free(s);
  json_decref(v);
}
