/* predict-input.c: the INPUT arguments of `ember predict` (PNG images, IDX
 * images files, CSV feature rows) told apart, checked against the model's
 * sample shape and read into batches (predict-input.h).
 *
 * The files are read by the engine's readers (em_idx_read,
 * em_csv_table_read), the ones its datasets use; what is left here is
 * what matters to prediction: labels are optional, and are checked
 * against the model's classes. Pixels are scaled exactly as
 * em_dataset_idx scales them: (float)byte / 255.0f. */
#include "predict-input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "em-data.h"
#include "em-io.h"

typedef enum { IN_PNG, IN_IDX, IN_CSV } in_kind;

typedef struct {
  in_kind kind;
  const char *path;  /* borrowed from the caller (argv) */
  int64_t first, n;  /* its samples are [first, first + n) of the sequence */
  uint8_t *pixels;   /* IDX: (n, numel) bytes */
  float *rows;       /* CSV: (n, numel) */
  int64_t *lines;    /* CSV: (n) the file line (1-based) of each row */
  int64_t *labels;   /* (n), or NULL: no labels */
} in_item;

struct predict_inputs {
  int n_items;
  in_item *items;
  int64_t count;
  int64_t shape[EM_MAX_DIMS]; /* the model's sample shape */
  int ndim;
  int64_t numel;
  int classes;
  /* How a PNG must look: channels (1 or 3) and height x width; height -1:
   * any height x width that makes numel (a model with a flat input). */
  int png_channels;
  int64_t png_h, png_w;
};

static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  if (a < b) return false;
  for (size_t i = 0; i < b; i++) {
    char c = s[a - b + i];
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
    if (c != suffix[i]) return false;
  }
  return true;
}

/* ---- telling the kinds apart ---------------------------------------------- */
static bool idx_magic(const uint8_t *b) { return b[0] == 0 && b[1] == 0 && b[2] >= 0x08; }

static bool looks_like_text(const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (b[i] < 0x20 && b[i] != '\n' && b[i] != '\r' && b[i] != '\t') return false;
  return n > 0;
}

static em_status detect_kind(const char *path, in_kind *kind, em_error *err) {
  struct stat st;
  if (stat(path, &st) != 0)
    return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
  if (S_ISDIR(st.st_mode))
    return em_error_set(err, EM_ERR_INVALID, "'%s' is a folder; give the files in it", path);
  /* each input is read more than once (its kind, then its data; an image
   * again when its batch comes), which a pipe cannot do */
  if (!S_ISREG(st.st_mode))
    return em_error_set(err, EM_ERR_INVALID, "'%s' is not a regular file (a pipe, socket or "
                        "device); save it to a file and give that", path);
  FILE *f = em_fopen_read(path, true);
  if (!f) return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, em_open_error(errno));
  uint8_t b[512];
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  if (n == 0) return em_error_set(err, EM_ERR_FORMAT, "'%s' is empty", path);
  if (n >= 8 && memcmp(b, png_signature, 8) == 0) {
    *kind = IN_PNG;
    return EM_OK;
  }
  if (ends_with(path, ".png"))
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is not a PNG image (it lacks the PNG signature)",
                        path);
  if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
    gzFile g = gzopen(path, "rb");
    uint8_t h[4];
    int got = g ? gzread(g, h, 4) : -1;
    if (g) gzclose(g);
    if (got == 4 && idx_magic(h)) {
      *kind = IN_IDX;
      return EM_OK;
    }
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is gzip-compressed but does not hold an IDX "
                        "file%s", path, got < 4 ? " (the data is corrupt or truncated)" : "");
  }
  if (n >= 4 && idx_magic(b)) {
    *kind = IN_IDX;
    return EM_OK;
  }
  if (ends_with(path, ".csv") || ends_with(path, ".txt") || looks_like_text(b, n)) {
    *kind = IN_CSV;
    return EM_OK;
  }
  return em_error_set(err, EM_ERR_FORMAT, "'%s' is not a PNG image, an IDX file (plain or .gz) "
                      "or a CSV file of numbers", path);
}

/* ---- PNG -------------------------------------------------------------------- */
/* Reads the header (signature and IHDR) only: the size is checked before
 * anything is predicted; the pixels are decoded batch by batch. */
static em_status png_check(const predict_inputs *in, const char *path, em_error *err) {
  int iw, ih, ic;
  em_status st = em_image_png_header(path, &iw, &ih, &ic, err);
  if (st != EM_OK) return st;
  int64_t w = iw, h = ih;
  bool fits = in->png_h < 0 ? w * h == in->numel : (h == in->png_h && w == in->png_w);
  if (!fits) {
    char want[96];
    em_shape_str(in->ndim, in->shape, want, sizeof want);
    if (in->png_h < 0)
      return em_error_set(err, EM_ERR_SHAPE, "'%s' is %lld x %lld pixels; the model takes "
                          "inputs of shape %s (%lld values)", path, (long long)w, (long long)h,
                          want, (long long)in->numel);
    int64_t got[3] = {in->png_channels, h, w};
    char have[96];
    return em_error_set(err, EM_ERR_SHAPE, "'%s' is %lld x %lld pixels, %s as the model reads "
                        "it; the model takes %s (%lld x %lld pixels)", path, (long long)w,
                        (long long)h, em_shape_str(in->ndim == 3 ? 3 : 2, in->ndim == 3 ? got : got + 1,
                                                   have, sizeof have),
                        want, (long long)in->png_w, (long long)in->png_h);
  }
  return EM_OK;
}

static em_status png_decode(const predict_inputs *in, const char *path, float *x, em_error *err) {
  em_image img;
  em_status st = em_image_read_png(path, in->png_channels, &img, err);
  if (st != EM_OK) return st;
  if ((int64_t)img.channels * img.height * img.width != in->numel) /* changed since opened */
    st = em_error_set(err, EM_ERR_SHAPE, "'%s' changed size while being read (%d x %d pixels)",
                      path, img.width, img.height);
  else memcpy(x, img.data, sizeof(float) * (size_t)in->numel);
  em_image_clear(&img);
  return st;
}

/* ---- IDX -------------------------------------------------------------------- */
/* The IDX images shape as a sample shape, the way em_dataset_idx reads it:
 * (N, H, W) -> (1, H, W), (N, D) -> (D), (N, C, H, W) -> (C, H, W). */
static int idx_sample_shape(const int64_t *dims, int nd, int64_t *shape) {
  if (nd == 3) {
    shape[0] = 1;
    shape[1] = dims[1];
    shape[2] = dims[2];
    return 3;
  }
  for (int i = 1; i < nd; i++) shape[i - 1] = dims[i];
  return nd - 1;
}

static em_status idx_open(const predict_inputs *in, in_item *it, const char *labels_path,
                          em_error *err) {
  int64_t dims[EM_MAX_DIMS];
  int nd;
  /* From one dimension, so that a labels file given as images is named
   * as such rather than as a file of too few dimensions. */
  em_status st = em_idx_read(it->path, "images", 1, EM_MAX_DIMS - 1, &nd, dims, &it->pixels, err);
  if (st != EM_OK) return st;
  if (nd == 1)
    return em_error_set(err, EM_ERR_FORMAT, "'%s' is an IDX labels file, not images: give it "
                        "with --labels", it->path);
  int64_t shape[EM_MAX_DIMS], numel = 1;
  int snd = idx_sample_shape(dims, nd, shape);
  for (int i = 0; i < snd; i++) numel *= shape[i];
  bool same = snd == in->ndim;
  for (int i = 0; same && i < snd; i++) same = shape[i] == in->shape[i];
  /* A flat side (a model taking (D), or an IDX file of (N, D) rows) takes
   * the other's values in row-major order. */
  if (!same && !(numel == in->numel && (snd == 1 || in->ndim == 1))) {
    char a[96], b[96];
    return em_error_set(err, EM_ERR_SHAPE, "'%s' holds samples of shape %s; the model takes %s",
                        it->path, em_shape_str(snd, shape, a, sizeof a),
                        em_shape_str(in->ndim, in->shape, b, sizeof b));
  }
  it->n = dims[0];
  if (it->n == 0)
    return em_error_set(err, EM_ERR_FORMAT, "'%s' holds no images (its header says 0)",
                        it->path);
  if (!labels_path) return EM_OK;
  /* Any dimension count is read, so that an images file given as labels
   * gets the message below. */
  int64_t ldims[EM_MAX_DIMS];
  int lnd;
  uint8_t *lab = NULL;
  st = em_idx_read(labels_path, "labels", 1, EM_MAX_DIMS, &lnd, ldims, &lab, err);
  if (st != EM_OK) return st;
  if (lnd != 1)
    st = em_error_set(err, EM_ERR_FORMAT, "'%s' has %d dimensions: it is not an IDX labels file "
                      "(those have 1)", labels_path, lnd);
  else if (ldims[0] != it->n)
    st = em_error_set(err, EM_ERR_FORMAT, "labels file '%s' holds %lld labels but '%s' holds "
                      "%lld images", labels_path, (long long)ldims[0], it->path,
                      (long long)it->n);
  else if (!(it->labels = malloc(sizeof(int64_t) * (size_t)(it->n ? it->n : 1))))
    st = em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s'", labels_path);
  for (int64_t i = 0; st == EM_OK && i < it->n; i++) {
    if (lab[i] >= in->classes)
      st = em_error_set(err, EM_ERR_FORMAT, "'%s': label %d of sample %lld is out of range for "
                        "the model's %d classes", labels_path, lab[i], (long long)i,
                        in->classes);
    else it->labels[i] = lab[i];
  }
  free(lab);
  return st;
}

/* ---- CSV -------------------------------------------------------------------- */
/* label_column: 0-based, EM_CSV_LAST_COLUMN or EM_CSV_NO_LABEL. A first
 * line with a word in it is a header; every data line has the model's
 * features, plus the label when there is one. */
static em_status csv_open(const predict_inputs *in, in_item *it, int label_column,
                          em_error *err) {
  bool labelled = label_column != EM_CSV_NO_LABEL;
  int64_t want = in->numel + (labelled ? 1 : 0);
  if (labelled && label_column != EM_CSV_LAST_COLUMN && (label_column < 0 || label_column >= want))
    return em_error_set(err, EM_ERR_INVALID, "--label-column %d: a labelled row of '%s' has "
                        "%lld columns (the model's %lld features and the label), so the label "
                        "column is 0 to %lld", label_column, it->path, (long long)want,
                        (long long)in->numel, (long long)want - 1);
  char why[160];
  snprintf(why, sizeof why, "the model takes %lld features%s", (long long)in->numel,
           labelled ? ", plus the label column" : "; --label-column names a label column");
  em_csv_table_options o;
  em_csv_table_options_defaults(&o);
  o.label_column = label_column;
  o.header = EM_CSV_HEADER_AUTO;
  o.columns = want;
  o.columns_why = why;
  em_csv_table t;
  em_status st = em_csv_table_read(it->path, &o, &t, err);
  for (int64_t i = 0; st == EM_OK && labelled && i < t.rows; i++)
    if (t.labels[i] >= in->classes)
      st = em_error_set(err, EM_ERR_FORMAT, "'%s' line %lld, column %d: label '%lld' is not a "
                        "class index 0..%d", it->path, (long long)t.lines[i],
                        t.label_column + 1, (long long)t.labels[i], in->classes - 1);
  if (st != EM_OK) {
    em_csv_table_clear(&t);
    return st;
  }
  if (t.rows == 0) {
    em_csv_table_clear(&t);
    return em_error_set(err, EM_ERR_FORMAT, "'%s' holds no rows of numbers", it->path);
  }
  it->n = t.rows;
  it->rows = t.x;
  it->labels = t.labels;
  it->lines = t.lines;
  return EM_OK;
}

/* ---- the sequence ------------------------------------------------------------ */
predict_inputs *predict_inputs_open(int n, const char *const *paths,
                                    const predict_input_options *o, em_error *err) {
  predict_inputs *in = calloc(1, sizeof *in);
  if (!in || !(in->items = calloc((size_t)(n ? n : 1), sizeof *in->items))) {
    free(in);
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  in->ndim = o->ndim;
  in->numel = 1;
  for (int i = 0; i < o->ndim; i++) {
    in->shape[i] = o->shape[i];
    in->numel *= o->shape[i];
  }
  in->classes = o->classes;
  in->png_channels = 1;
  in->png_h = in->png_w = -1;
  if (o->ndim == 3 && (o->shape[0] == 1 || o->shape[0] == 3)) {
    in->png_channels = (int)o->shape[0];
    in->png_h = o->shape[1];
    in->png_w = o->shape[2];
  } else if (o->ndim == 2) {
    in->png_h = o->shape[0];
    in->png_w = o->shape[1];
  }
  em_status st = EM_OK;
  int idx_inputs = 0, csv_inputs = 0;
  for (int i = 0; i < n && st == EM_OK; i++) {
    in_item *it = &in->items[in->n_items++];
    it->path = paths[i];
    if ((st = detect_kind(paths[i], &it->kind, err)) != EM_OK) break;
    switch (it->kind) {
    case IN_PNG:
      it->n = 1;
      st = png_check(in, paths[i], err);
      break;
    case IN_IDX:
      idx_inputs++;
      st = idx_open(in, it, o->labels_path, err);
      break;
    case IN_CSV:
      csv_inputs++;
      st = csv_open(in, it, o->label_column, err);
      break;
    }
    it->first = in->count;
    in->count += it->n;
  }
  if (st == EM_OK && o->labels_path && idx_inputs != 1)
    st = em_error_set(err, EM_ERR_INVALID, "--labels '%s' goes with exactly one IDX images "
                      "input; %d were given", o->labels_path, idx_inputs);
  if (st == EM_OK && o->label_column != EM_CSV_NO_LABEL && csv_inputs == 0)
    st = em_error_set(err, EM_ERR_INVALID, "--label-column goes with CSV inputs; none was given");
  if (st != EM_OK) {
    predict_inputs_free(in);
    return NULL;
  }
  return in;
}

void predict_inputs_free(predict_inputs *in) {
  if (!in) return;
  for (int i = 0; i < in->n_items; i++) {
    free(in->items[i].pixels);
    free(in->items[i].rows);
    free(in->items[i].labels);
    free(in->items[i].lines);
  }
  free(in->items);
  free(in);
}

int64_t predict_inputs_count(const predict_inputs *in) { return in->count; }

/* The item holding sample i (items are in sequence order). */
static const in_item *item_of(const predict_inputs *in, int64_t i) {
  int lo = 0, hi = in->n_items - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (in->items[mid].first <= i) lo = mid;
    else hi = mid - 1;
  }
  return &in->items[lo];
}

em_status predict_inputs_read(predict_inputs *in, int64_t first, int64_t n,
                              float *x /* (n, ...sample) */, int64_t *y /* (n) */,
                              em_error *err) {
  for (int64_t s = 0; s < n; s++) {
    int64_t i = first + s;
    const in_item *it = item_of(in, i);
    int64_t k = i - it->first;
    float *xs = x + s * in->numel;
    y[s] = it->labels ? it->labels[k] : -1;
    switch (it->kind) {
    case IN_PNG: {
      em_status st = png_decode(in, it->path, xs, err);
      if (st != EM_OK) return st;
      break;
    }
    case IN_IDX: {
      const uint8_t *p = it->pixels + k * in->numel;
      for (int64_t j = 0; j < in->numel; j++) xs[j] = (float)p[j] / 255.0f;
      break;
    }
    case IN_CSV:
      memcpy(xs, it->rows + k * in->numel, sizeof(float) * (size_t)in->numel);
      break;
    }
  }
  return EM_OK;
}

void predict_inputs_source(const predict_inputs *in, int64_t i, char *buf, size_t cap) {
  const in_item *it = item_of(in, i);
  if (it->kind == IN_PNG) snprintf(buf, cap, "%s", it->path);
  else if (it->kind == IN_CSV) /* its line, as the CSV's errors and an editor count */
    snprintf(buf, cap, "%s:%lld", it->path, (long long)it->lines[i - it->first]);
  else snprintf(buf, cap, "%s:%lld", it->path, (long long)(i - it->first)); /* image index */
}
