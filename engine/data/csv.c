/* csv.c: CSV files of numbers: the table reader (feature columns and at
 * most one integer label column, loaded into memory as floats) and the
 * CSV dataset on top of it. Errors name the file, the line and the column
 * (both 1-based, as an editor shows them). */
#include "data-private.h"
#include "em-io.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the table reader ---------------------------------------------------- */
void em_csv_table_options_defaults(em_csv_table_options *o) {
  o->label_column = EM_CSV_LAST_COLUMN;
  o->header = EM_CSV_HEADER_NO;
  o->delimiter = ',';
  o->columns = 0;
  o->columns_why = NULL;
}

void em_csv_table_clear(em_csv_table *t) {
  if (!t) return;
  free(t->x);
  free(t->labels);
  free(t->lines);
  memset(t, 0, sizeof *t);
  t->label_column = -1;
}

/* Strips spaces, tabs and a trailing '\r' in place. */
static char *trim(char *b, char *e) {
  while (b < e && (*b == ' ' || *b == '\t')) b++;
  while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) e--;
  *e = '\0';
  return b;
}

static int64_t count_fields(const char *line, char delim) {
  int64_t n = 1;
  for (const char *p = line; *p; p++) n += *p == delim;
  return n;
}

static bool blank(const char *line) {
  for (const char *p = line; *p; p++)
    if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') return false;
  return true;
}

/* Whether line reads as a header ("label,p0,p1"): no field of it is a
 * number, and some field is not empty. A first line with numbers and a
 * word ("0.5,1.2.3,0.25,1": a typo) is data, whose bad field is then
 * reported, rather than a header that silently drops a row. */
static bool is_header(const char *line, char delim) {
  bool word = false;
  for (const char *b = line;;) {
    const char *e = strchr(b, delim);
    if (!e) e = b + strlen(b);
    while (b < e && (*b == ' ' || *b == '\t')) b++;
    const char *end = e;
    while (end > b && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
      end--;
    if (end > b) {
      char *stop;
      strtod(b, &stop);
      if (stop == end) return false; /* a number */
      word = true;
    }
    if (!*e) return word;
    b = e + 1;
  }
}

/* Labels are class indices below this: a table's classes are counted
 * (the Data page keeps a count per class), and a stray 1e9 asked for a
 * billion of them. */
#define MAX_CLASSES (1 << 20)

/* The longest line read: a row of a million features. A longer one is no
 * table of numbers (a binary file, or text with no line ends): refused
 * before the whole file sits in memory as one line. */
#define MAX_LINE ((size_t)64 << 20)

/* Reads the next line of fp into *buf (grown; '\0'-terminated, its '\n'
 * kept), stopping at a NUL byte or past MAX_LINE bytes. Returns the
 * bytes read, 0 at the end of the file, -1 on a read error, -2 at a NUL
 * byte (*buf then holds what came before it, when anything did), -3 for
 * a line over MAX_LINE. */
static ssize_t read_line(FILE *fp, char **buf, size_t *cap) {
  size_t n = 0;
  int c = EOF;
  flockfile(fp);
  while ((c = getc_unlocked(fp)) != EOF) {
    if (c == '\0' || n == MAX_LINE) break;
    if (n + 2 > *cap) {
      size_t nc = *cap ? *cap * 2 : 4096;
      char *nb = realloc(*buf, nc);
      if (!nb) {
        funlockfile(fp);
        return -1;
      }
      *buf = nb;
      *cap = nc;
    }
    (*buf)[n++] = (char)c;
    if (c == '\n') break;
  }
  funlockfile(fp);
  if (n) (*buf)[n] = '\0'; /* also what came before a NUL */
  if (c == '\0') return -2;
  if (n == MAX_LINE && c != '\n' && c != EOF) return -3;
  if (c == EOF && ferror(fp)) return -1;
  return (ssize_t)n;
}

typedef struct {
  const char *path;
  int64_t cap;
  int64_t ncols;
  int label_col; /* -1: none */
  char delim;
  const char *why;
} csv_parse;

/* " (the line has semicolons: fields are separated by commas)" when a line
 * read as one field holds another common separator, else "". */
static const char *other_separator(const char *text, int64_t fields) {
  const char *other = fields == 1 && text ? strpbrk(text, ";\t|") : NULL;
  if (!other) return "";
  return *other == '\t' ? " (the line has tabs: fields are separated by commas)"
         : *other == ';' ? " (the line has semicolons: fields are separated by commas)"
                         : " (the line has '|': fields are separated by commas)";
}

/* strtod reads C's hexadecimal floats ("0x1p3"); a CSV number is decimal
 * (as Python, NumPy and pandas read it), so "0x2" is a typo, not 2. */
static bool hex_float(const char *v) { return strpbrk(v, "xXpP") != NULL; }

/* Parses one data line into row t->rows of t (growing it). */
static em_status csv_row(em_csv_table *t, csv_parse *p, char *line, int64_t lineno,
                         em_error *err) {
  int64_t nf = count_fields(line, p->delim);
  if (nf != p->ncols) { /* another separator in the line says more than the expected count */
    const char *sep = other_separator(line, nf);
    return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld: %lld column%s, expected %lld%s%s%s",
                        p->path, (long long)lineno, (long long)nf, nf == 1 ? "" : "s",
                        (long long)p->ncols, *sep ? sep : " (",
                        *sep ? "" : p->why ? p->why : "as on the first data line",
                        *sep ? "" : ")");
  }
  if (t->rows == p->cap) {
    int64_t nc = p->cap ? p->cap * 2 : 256;
    bool ok = true;
    float *nx = realloc(t->x, sizeof(float) * (size_t)(nc * (t->features ? t->features : 1)));
    if (nx) t->x = nx;
    else ok = false;
    int64_t *nl = ok ? realloc(t->lines, sizeof(int64_t) * (size_t)nc) : NULL;
    if (nl) t->lines = nl;
    else ok = false;
    if (ok && p->label_col >= 0) {
      int64_t *ny = realloc(t->labels, sizeof(int64_t) * (size_t)nc);
      if (ny) t->labels = ny;
      else ok = false;
    }
    if (!ok) return em_error_set(err, EM_ERR_NOMEM, "out of memory loading '%s'", p->path);
    p->cap = nc;
  }
  float *x = t->x + t->rows * t->features;
  char *b = line;
  int64_t f = 0;
  for (int64_t col = 0; col < p->ncols; col++) {
    char *e = strchr(b, p->delim);
    if (!e) e = b + strlen(b);
    char *next = *e ? e + 1 : e;
    char *v = trim(b, e);
    if (*v == '\0')
      return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %lld: empty value",
                          p->path, (long long)lineno, (long long)col + 1);
    char *end;
    errno = 0;
    if (col == p->label_col) {
      long long lab = strtoll(v, &end, 10);
      if (*end != '\0') { /* a whole number written as a decimal ("3.0", as pandas saves it) */
        char *dend;
        double d = strtod(v, &dend);
        if (*dend == '\0' && !hex_float(v) && isfinite(d) && d == floor(d) &&
            fabs(d) <= (double)(1 << 30)) {
          lab = (long long)d;
          end = dend;
          errno = 0;
        }
      }
      if (*end != '\0' || errno == ERANGE)
        return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %lld: label '%.40s' is "
                            "not an integer", p->path, (long long)lineno, (long long)col + 1, v);
      if (lab < 0 || lab >= MAX_CLASSES) /* past it, most likely a typo or not a label */
        return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %lld: label %lld is out "
                            "of range (labels are class indices 0 to %d at most)", p->path,
                            (long long)lineno, (long long)col + 1, lab, MAX_CLASSES - 1);
      t->labels[t->rows] = lab;
    } else {
      double d = strtod(v, &end);
      if (*end != '\0' || end == v || hex_float(v))
        return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %lld: '%.40s' is not a "
                            "number", p->path, (long long)lineno, (long long)col + 1, v);
      if (!isfinite(d) || fabs(d) > FLT_MAX)
        return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %lld: '%.40s' is not a "
                            "finite float", p->path, (long long)lineno, (long long)col + 1, v);
      x[f++] = (float)d;
    }
    b = next;
  }
  t->lines[t->rows] = lineno;
  t->rows++;
  return EM_OK;
}

/* Fixes the column count (and with it the label column and the features)
 * from the first data line, or from the options before any line. */
static em_status csv_columns(em_csv_table *t, csv_parse *p, int label_column, int64_t ncols,
                             int64_t lineno, const char *text, em_error *err) {
  p->ncols = ncols;
  bool labelled = label_column != EM_CSV_NO_LABEL;
  if (labelled && ncols < 2) /* one column, but another separator in the line: say which */
    return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld: one column; a table with a label "
                        "column needs feature columns beside it%s", p->path, (long long)lineno,
                        other_separator(text, ncols));
  p->label_col = !labelled ? -1 : label_column < 0 ? (int)(ncols - 1) : label_column;
  if (p->label_col >= ncols) {
    if (lineno > 0)
      return em_error_set(err, EM_ERR_INVALID, "'%s': label column %d does not exist (line %lld "
                          "has %lld columns)", p->path, p->label_col + 1, (long long)lineno,
                          (long long)ncols);
    return em_error_set(err, EM_ERR_INVALID, "'%s': label column %d does not exist (rows have "
                        "%lld columns)", p->path, p->label_col + 1, (long long)ncols);
  }
  t->label_column = p->label_col;
  t->features = ncols - (labelled ? 1 : 0);
  return EM_OK;
}

em_status em_csv_table_read(const char *path, const em_csv_table_options *o, em_csv_table *out,
                            em_error *err) {
  memset(out, 0, sizeof *out);
  out->label_column = -1;
  em_csv_table_options opts;
  em_csv_table_options_defaults(&opts);
  if (o) opts = *o;
  if (!path) return em_error_set(err, EM_ERR_INVALID, "CSV: no file name given");
  if (opts.delimiter == '\0' || opts.delimiter == '\n' || opts.delimiter == '\r' ||
      opts.delimiter == '"' || opts.delimiter == '.' || opts.delimiter == '-')
    return em_error_set(err, EM_ERR_INVALID, "CSV '%s': unusable delimiter", path);
  if (opts.label_column < EM_CSV_NO_LABEL || opts.columns < 0)
    return em_error_set(err, EM_ERR_INVALID, "CSV '%s': bad options (label column %d, %lld "
                        "columns)", path, opts.label_column, (long long)opts.columns);
  csv_parse p = {.path = path, .delim = opts.delimiter, .why = opts.columns_why};
  em_status st = EM_OK;
  if (opts.columns > 0 &&
      (st = csv_columns(out, &p, opts.label_column, opts.columns, 0, NULL, err)) != EM_OK)
    return st;
  FILE *fp = em_fopen_read(path, true); /* as every input: a regular file */
  if (!fp)
    return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, em_open_error(errno));
  char *line = NULL;
  size_t linecap = 0;
  int64_t lineno = 0;
  bool first = true; /* no non-blank line yet */
  int64_t header_cols = 0, header_line = 0;
  while (st == EM_OK) {
    errno = 0;
    ssize_t len = read_line(fp, &line, &linecap);
    if (len == 0) break;
    lineno++;
    if (len == -1) {
      st = em_error_set(err, errno == ENOMEM ? EM_ERR_NOMEM : EM_ERR_IO, "cannot read '%s': %s",
                        path, strerror(errno ? errno : EIO));
      break;
    }
    if (len == -2) {
      if (lineno == 1 && line && strlen(line) >= 2 && (unsigned char)line[0] == 0x1f &&
          (unsigned char)line[1] == 0x8b)
        st = em_error_set(err, EM_ERR_FORMAT, "'%s' is gzip-compressed: decompress it first "
                          "(gunzip -k)", path);
      else
        st = em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld holds a NUL byte: it is not a "
                          "text (CSV) file", path, (long long)lineno);
      break;
    }
    if (len == -3) {
      st = em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld is longer than %zu MiB: it is not "
                        "a table of numbers (a binary file, or text without line ends?)", path,
                        (long long)lineno, MAX_LINE >> 20);
      break;
    }
    char *text = line;
    if (lineno == 1 && (unsigned char)text[0] == 0xEF && (unsigned char)text[1] == 0xBB &&
        (unsigned char)text[2] == 0xBF)
      text += 3; /* a UTF-8 byte order mark */
    const char *cr = strchr(text, '\r');
    if (cr && cr[1] != '\n' && cr[1] != '\0') {
      st = em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld has a carriage return inside it: "
                        "lines that end in CR alone (old Mac text) are not read; convert the "
                        "file to LF or CRLF line ends", path, (long long)lineno);
      break;
    }
    if (blank(text)) continue;
    bool was_first = first;
    first = false;
    if (was_first && (opts.header == EM_CSV_HEADER_YES ||
                      (opts.header == EM_CSV_HEADER_AUTO && is_header(text, p.delim)))) {
      header_cols = count_fields(text, p.delim);
      header_line = lineno;
    } else {
      if (p.ncols == 0 &&
          (st = csv_columns(out, &p, opts.label_column, count_fields(text, p.delim), lineno,
                            text, err)) != EM_OK)
        break;
      st = csv_row(out, &p, text, lineno, err);
    }
    /* a header names the data's columns: one that does not is most likely
     * not a header (or the wrong file), whether the width is the data's
     * own (train) or given (opts.columns: predict); checked once a data
     * line has been read, so that a data line of the wrong width says so
     * first. (With the width given, a 100,000-column header over 5-column
     * rows was accepted by predict and refused by train.) */
    if (st == EM_OK && header_cols && !was_first && header_cols != p.ncols) {
      st = em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, taken as the header, has %lld "
                        "column%s where the data has %lld", path, (long long)header_line,
                        (long long)header_cols, header_cols == 1 ? "" : "s", (long long)p.ncols);
      break;
    }
  }
  free(line);
  fclose(fp);
  return st;
}

/* ---- the dataset ------------------------------------------------------------ */
typedef struct {
  int64_t n, d;
  int num_classes;
  float *x;   /* (N, D) */
  int64_t *y; /* (N) */
} csv_set;

static int64_t csv_len(const void *impl) { return ((const csv_set *)impl)->n; }

static int csv_sample_shape(const void *impl, int64_t *shape) {
  shape[0] = ((const csv_set *)impl)->d;
  return 1;
}

static int csv_num_classes(const void *impl) { return ((const csv_set *)impl)->num_classes; }

static em_status csv_get(const void *impl, int64_t i, float *x /* (D) */, int64_t *y,
                         em_error *err) {
  const csv_set *s = impl;
  memcpy(x, s->x + i * s->d, sizeof(float) * (size_t)s->d);
  *y = s->y[i];
  return EM_OK;
}

static void csv_free(void *impl) {
  csv_set *s = impl;
  if (!s) return;
  free(s->x);
  free(s->y);
  free(s);
}

static const em_dataset_vtable csv_vtable = {
  .kind = "csv",
  .len = csv_len,
  .sample_shape = csv_sample_shape,
  .num_classes = csv_num_classes,
  .get = csv_get,
  .free = csv_free,
};

void em_csv_options_defaults(em_csv_options *o) {
  o->label_column = -1;
  o->header = EM_CSV_HEADER_NO;
  o->delimiter = ',';
  o->num_classes = 0;
}

/* split: -1 every row; 0 the training rows, 1 the held-out ones (every
 * EM_CSV_HOLDOUT_EVERY-th data row). The classes are counted over the
 * whole file, so that both splits agree on them. */
static em_dataset *csv_open(const char *path, const em_csv_options *o, int split, em_error *err) {
  em_csv_options opts;
  em_csv_options_defaults(&opts);
  if (o) opts = *o;
  em_csv_table_options to;
  em_csv_table_options_defaults(&to);
  to.label_column = opts.label_column < 0 ? EM_CSV_LAST_COLUMN : opts.label_column;
  to.header = opts.header;
  to.delimiter = opts.delimiter;
  em_csv_table t;
  em_status st = em_csv_table_read(path, &to, &t, err);
  if (st == EM_OK && t.rows == 0)
    st = em_error_set(err, EM_ERR_FORMAT, "'%s' has no data lines", path);
  if (st == EM_OK && split >= 0 && t.rows < EM_CSV_HOLDOUT_EVERY)
    st = em_error_set(err, EM_ERR_FORMAT,
                      "'%s' has %lld data line%s; training from a CSV holds out one row in %d "
                      "for testing, so it needs at least %d",
                      path, (long long)t.rows, t.rows == 1 ? "" : "s", EM_CSV_HOLDOUT_EVERY,
                      EM_CSV_HOLDOUT_EVERY);
  int num_classes = 0;
  for (int64_t i = 0; st == EM_OK && i < t.rows; i++) {
    if (opts.num_classes > 0 && t.labels[i] >= opts.num_classes)
      st = em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %d: label %lld is out of "
                        "range for %d classes", path, (long long)t.lines[i], t.label_column + 1,
                        (long long)t.labels[i], opts.num_classes);
    else if (t.labels[i] >= num_classes) num_classes = (int)t.labels[i] + 1;
  }
  csv_set *s = st == EM_OK ? calloc(1, sizeof *s) : NULL;
  if (st == EM_OK && !s) st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
  if (st != EM_OK) {
    em_csv_table_clear(&t);
    return NULL;
  }
  /* keep the split's rows, in file order, at the front of the table */
  int64_t kept = t.rows;
  if (split >= 0) {
    kept = 0;
    for (int64_t i = 0; i < t.rows; i++) {
      if ((i % EM_CSV_HOLDOUT_EVERY == EM_CSV_HOLDOUT_EVERY - 1) != (split == 1)) continue;
      memmove(t.x + kept * t.features, t.x + i * t.features, sizeof(float) * (size_t)t.features);
      t.labels[kept++] = t.labels[i];
    }
  }
  s->n = kept;
  s->d = t.features;
  s->num_classes = opts.num_classes > 0 ? opts.num_classes : num_classes;
  s->x = t.x;
  s->y = t.labels;
  free(t.lines);
  return em_dataset_new(&csv_vtable, s, err);
}

em_dataset *em_dataset_csv(const char *path, const em_csv_options *o, em_error *err) {
  return csv_open(path, o, -1, err);
}

em_dataset *em_dataset_csv_split(const char *path, const em_csv_options *o, bool train,
                                 em_error *err) {
  return csv_open(path, o, train ? 0 : 1, err);
}

/* The built-in kind "csv": --data-dir is the file; 1 row in 5 is held
 * out (em_dataset_csv_split). */
static em_dataset *csv_kind_open(const char *d, bool train, const void *options, em_error *err) {
  const em_dataset_want *want = options;
  if (!d) {
    em_error_set(err, EM_ERR_INVALID,
                 "the csv dataset needs its file: give --data-dir FILE.csv (numeric columns, "
                 "the label last)");
    return NULL;
  }
  /* read twice (the training rows, then the held-out ones): a pipe
   * would give its rows to the first reading only */
  struct stat sb;
  if (stat(d, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    if (S_ISDIR(sb.st_mode))
      em_error_set(err, EM_ERR_INVALID, "'%s' is a folder: the csv dataset's --data-dir is "
                   "the CSV file itself", d);
    else
      em_error_set(err, EM_ERR_INVALID,
                   "'%s' is not a regular file: training reads a CSV twice (its training and "
                   "its held-out rows), so save it to a file first", d);
    return NULL;
  }
  /* a first line with no number in it is a header, as `ember predict`
   * reads CSV (the Data page opens it here too) */
  em_csv_options o;
  em_csv_options_defaults(&o);
  o.header = EM_CSV_HEADER_AUTO;
  /* a label past the model's outputs is named by its line (it read as a
   * model that needs more outputs, a typo's 7 making 8 classes) */
  if (want && want->classes > 0) o.num_classes = want->classes;
  return em_dataset_csv_split(d, &o, train, err);
}

/* One file for both splits: named once, for the training split. */
static em_status csv_kind_files(const char *d, bool train, char (*found)[4096], int room,
                                int *n, em_error *err) {
  (void)room; /* at least 5 */
  *n = 0;
  if (!d)
    return em_error_set(err, EM_ERR_INVALID,
                        "the csv dataset needs its file: give --data-dir FILE.csv");
  if (strlen(d) >= sizeof found[0])
    return em_error_set(err, EM_ERR_INVALID, "file name too long: '%.200s...'", d);
  if (train) {
    memcpy(found[0], d, strlen(d) + 1);
    *n = 1;
  }
  return EM_OK;
}

const em_dataset_builtin em_dataset_kind_csv = {
  .type = {.name = "csv", .help = "a CSV file of numbers, the label last (a header line is "
           "skipped)", .open = csv_kind_open},
  .files = csv_kind_files,
};
