/* csv.c: a CSV file of numeric feature columns and one integer label
 * column, loaded into memory as floats. Errors name the file, the line
 * and the column (both 1-based, as an editor shows them). */
#include "data-private.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  o->header = false;
  o->delimiter = ',';
  o->num_classes = 0;
}

/* Strips spaces, tabs and a trailing '\r' in place. */
static char *trim(char *b, char *e) {
  while (b < e && (*b == ' ' || *b == '\t')) b++;
  while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) e--;
  *e = '\0';
  return b;
}

static int count_fields(const char *line, char delim) {
  int n = 1;
  for (const char *p = line; *p; p++) n += *p == delim;
  return n;
}

static bool blank(const char *line) {
  for (const char *p = line; *p; p++)
    if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') return false;
  return true;
}

typedef struct {
  const char *path;
  int64_t cap;
  int label_col, ncols;
  char delim;
} csv_parse;

/* Parses one data line into row n of s (growing it). */
static em_status csv_row(csv_set *s, csv_parse *p, char *line, int64_t lineno, em_error *err) {
  int nf = count_fields(line, p->delim);
  if (nf != p->ncols)
    return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld: %d columns, expected %d (as on the "
                        "first data line)", p->path, (long long)lineno, nf, p->ncols);
  if (s->n == p->cap) {
    int64_t nc = p->cap ? p->cap * 2 : 256;
    float *nx = realloc(s->x, sizeof(float) * (size_t)(nc * s->d));
    if (nx) s->x = nx;
    int64_t *ny = nx ? realloc(s->y, sizeof(int64_t) * (size_t)nc) : NULL;
    if (ny) s->y = ny;
    if (!nx || !ny) return em_error_set(err, EM_ERR_NOMEM, "out of memory loading '%s'", p->path);
    p->cap = nc;
  }
  float *x = s->x + s->n * s->d;
  char *b = line;
  int64_t f = 0;
  for (int col = 0; col < p->ncols; col++) {
    char *e = strchr(b, p->delim);
    if (!e) e = b + strlen(b);
    char *next = *e ? e + 1 : e;
    char *v = trim(b, e);
    if (*v == '\0')
      return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %d: empty value", p->path,
                          (long long)lineno, col + 1);
    char *end;
    errno = 0;
    if (col == p->label_col) {
      long long lab = strtoll(v, &end, 10);
      if (*end != '\0' || errno == ERANGE)
        return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %d: label '%.40s' is "
                            "not an integer", p->path, (long long)lineno, col + 1, v);
      if (lab < 0 || lab > (1 << 30))
        return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %d: label %lld is out "
                            "of range (labels are 0 to num_classes - 1)", p->path,
                            (long long)lineno, col + 1, lab);
      s->y[s->n] = lab;
    } else {
      double d = strtod(v, &end);
      if (*end != '\0' || end == v)
        return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %d: '%.40s' is not a "
                            "number", p->path, (long long)lineno, col + 1, v);
      if (!isfinite(d) || fabs(d) > 3.4e38)
        return em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %d: '%.40s' is not a "
                            "finite float", p->path, (long long)lineno, col + 1, v);
      x[f++] = (float)d;
    }
    b = next;
  }
  s->n++;
  return EM_OK;
}

em_dataset *em_dataset_csv(const char *path, const em_csv_options *o, em_error *err) {
  em_csv_options opts;
  em_csv_options_defaults(&opts);
  if (o) opts = *o;
  if (!path) {
    em_error_set(err, EM_ERR_INVALID, "CSV: no file name given");
    return NULL;
  }
  if (opts.delimiter == '\0' || opts.delimiter == '\n' || opts.delimiter == '\r' ||
      opts.delimiter == '"' || opts.delimiter == '.' || opts.delimiter == '-') {
    em_error_set(err, EM_ERR_INVALID, "CSV '%s': unusable delimiter", path);
    return NULL;
  }
  FILE *fp = fopen(path, "r");
  if (!fp) {
    em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    return NULL;
  }
  csv_set *s = calloc(1, sizeof *s);
  char *line = NULL;
  size_t linecap = 0;
  csv_parse p = {.path = path, .delim = opts.delimiter, .ncols = 0};
  em_status st = s ? EM_OK : em_error_set(err, EM_ERR_NOMEM, "out of memory");
  int64_t lineno = 0;
  while (st == EM_OK) {
    errno = 0;
    ssize_t len = getline(&line, &linecap, fp);
    if (len < 0) {
      if (ferror(fp))
        st = em_error_set(err, EM_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
      break;
    }
    lineno++;
    if (strlen(line) != (size_t)len) {
      st = em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld: a NUL byte (not a text file?)",
                        path, (long long)lineno);
      break;
    }
    if (lineno == 1 && opts.header) continue;
    if (blank(line)) continue;
    if (p.ncols == 0) {
      p.ncols = count_fields(line, p.delim);
      if (p.ncols < 2) {
        st = em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld: one column; a CSV dataset needs "
                          "feature columns and a label column", path, (long long)lineno);
        break;
      }
      p.label_col = opts.label_column < 0 ? p.ncols - 1 : opts.label_column;
      if (p.label_col >= p.ncols) {
        st = em_error_set(err, EM_ERR_INVALID, "'%s': label column %d does not exist (line %lld "
                          "has %d columns)", path, p.label_col + 1, (long long)lineno, p.ncols);
        break;
      }
      s->d = p.ncols - 1;
    }
    int64_t before = s->n;
    st = csv_row(s, &p, line, lineno, err);
    if (st == EM_OK && opts.num_classes > 0 && s->y[before] >= opts.num_classes)
      st = em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %d: label %lld is out of "
                        "range for %d classes", path, (long long)lineno, p.label_col + 1,
                        (long long)s->y[before], opts.num_classes);
    if (st == EM_OK && s->y[before] >= s->num_classes) s->num_classes = (int)s->y[before] + 1;
  }
  free(line);
  fclose(fp);
  if (st == EM_OK && s->n == 0)
    st = em_error_set(err, EM_ERR_FORMAT, "'%s' has no data lines", path);
  if (st != EM_OK) {
    csv_free(s);
    return NULL;
  }
  if (opts.num_classes > 0) s->num_classes = opts.num_classes;
  return em_dataset_new(&csv_vtable, s, err);
}
