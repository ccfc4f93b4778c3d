/* text.c: the text dataset (em_dataset_text, em-data.h) and its kind
 * "text": a file or a folder of text files as one sequence of tokens,
 * its last EM_TEXT_VALIDATION_PERCENT percent the validation split, cut
 * into windows of `context` tokens whose targets are the next tokens.
 *
 * The tokens live as int32 ids (a char vocabulary stays below 2^21); a
 * sample converts its window to floats (exact below 2^24) and its
 * targets to int64. The files are read whole, once, at open. */
#include "data-private.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_TEXT_FILES 100000
#define DEFAULT_CONTEXT 128 /* for a dataset opened without a model (the Data page) */

typedef struct {
  int32_t *ids;    /* (n) this split's tokens */
  int64_t n;
  int64_t context; /* L */
  int vocab;       /* V */
} text_set;

static int64_t text_len(const void *impl) {
  const text_set *t = impl;
  return (t->n - 1) / t->context;
}

static int text_sample_shape(const void *impl, int64_t *shape) {
  shape[0] = ((const text_set *)impl)->context;
  return 1;
}

static int text_num_classes(const void *impl) { return ((const text_set *)impl)->vocab; }
static int64_t text_target_len(const void *impl) { return ((const text_set *)impl)->context; }

static em_status text_get(const void *impl, int64_t i, float *x /* (L) */, int64_t *y /* (L) */,
                          em_error *err) {
  (void)err;
  const text_set *t = impl;
  const int32_t *w = t->ids + i * t->context;
  for (int64_t j = 0; j < t->context; j++) {
    x[j] = (float)w[j];
    y[j] = w[j + 1];
  }
  return EM_OK;
}

static void text_free(void *impl) {
  text_set *t = impl;
  if (!t) return;
  free(t->ids);
  free(t);
}

static const em_dataset_vtable text_vtable = {
    .kind = "text",
    .len = text_len,
    .sample_shape = text_sample_shape,
    .num_classes = text_num_classes,
    .get = text_get,
    .free = text_free,
    .target_len = text_target_len,
    .token_samples = true,
};

/* ---- the files ----------------------------------------------------------------------- */

typedef struct {
  char **paths; /* (n) */
  int n;
  bool named;   /* path was a file named directly */
} text_files;

static void files_clear(text_files *f) {
  for (int i = 0; i < f->n; i++) free(f->paths[i]);
  free(f->paths);
  f->paths = NULL;
  f->n = 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The whole file at path (plain or gzip), malloc'd with a NUL after it. */
static em_status read_whole(const char *path, char **out, size_t *n, em_error *err) {
  gzFile f;
  em_status st = em_gz_open(path, &f, err);
  if (st != EM_OK) return st;
  uint8_t *buf = NULL;
  st = em_gz_read_rest(f, path, &buf, n, err);
  gzclose(f);
  if (st != EM_OK) return st;
  char *s = realloc(buf, *n + 1);
  if (!s) {
    free(buf);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory reading '%s'", path);
  }
  s[*n] = '\0';
  *out = s;
  return EM_OK;
}

/* Whether the file at path holds a NUL byte (it is binary). */
static bool is_binary(const char *path) {
  char *s;
  size_t n;
  if (read_whole(path, &s, &n, NULL) != EM_OK) return false; /* its read says why, later */
  bool bin = memchr(s, 0, n) != NULL;
  free(s);
  return bin;
}

/* path: a file (itself), or a folder: its text files, sorted by name,
 * each file once. */
static em_status list_files(const char *path, text_files *f, em_error *err) {
  memset(f, 0, sizeof *f);
  struct stat st;
  if (stat(path, &st) != 0)
    return em_error_set(err, EM_ERR_IO, "cannot open '%s': %s (the text dataset reads a text "
                        "file or a folder of them)", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    f->paths = malloc(sizeof *f->paths);
    if (!f->paths || !(f->paths[0] = strdup(path))) {
      free(f->paths);
      f->paths = NULL;
      return em_error_set(err, EM_ERR_NOMEM, "out of memory");
    }
    f->n = 1;
    f->named = true;
    return EM_OK;
  }
  DIR *d = opendir(path);
  if (!d) return em_error_set(err, EM_ERR_IO, "cannot read the folder '%s': %s", path,
                              strerror(errno));
  int cap = 0;
  em_status rc = EM_OK;
  for (struct dirent *e; rc == EM_OK && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (f->n == MAX_TEXT_FILES) {
      rc = em_error_set(err, EM_ERR_INVALID, "the folder '%s' holds more than %d files",
                        path, MAX_TEXT_FILES);
      break;
    }
    if (f->n == cap) {
      cap = cap ? 2 * cap : 64;
      char **p = realloc(f->paths, (size_t)cap * sizeof *p);
      if (!p) {
        rc = em_error_set(err, EM_ERR_NOMEM, "out of memory");
        break;
      }
      f->paths = p;
    }
    size_t len = strlen(path) + strlen(e->d_name) + 2;
    if (!(f->paths[f->n] = malloc(len))) {
      rc = em_error_set(err, EM_ERR_NOMEM, "out of memory");
      break;
    }
    snprintf(f->paths[f->n++], len, "%s/%s", path, e->d_name);
  }
  closedir(d);
  if (rc != EM_OK) {
    files_clear(f);
    return rc;
  }
  if (f->n) qsort(f->paths, (size_t)f->n, sizeof *f->paths, cmp_str);
  /* regular files, each (device, inode) once, not binary */
  dev_t *dev = calloc((size_t)f->n + 1, sizeof *dev);
  ino_t *ino = calloc((size_t)f->n + 1, sizeof *ino);
  if (!dev || !ino) {
    free(dev);
    free(ino);
    files_clear(f);
    return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  }
  int kept = 0;
  for (int i = 0; i < f->n; i++) {
    bool keep = stat(f->paths[i], &st) == 0 && S_ISREG(st.st_mode);
    for (int k = 0; keep && k < kept; k++) keep = !(dev[k] == st.st_dev && ino[k] == st.st_ino);
    if (keep) keep = !is_binary(f->paths[i]);
    if (!keep) {
      free(f->paths[i]);
      continue;
    }
    dev[kept] = st.st_dev;
    ino[kept] = st.st_ino;
    f->paths[kept++] = f->paths[i];
  }
  free(dev);
  free(ino);
  f->n = kept;
  if (kept == 0) {
    files_clear(f);
    return em_error_set(err, EM_ERR_INVALID, "the folder '%s' holds no text files (regular "
                        "files, not hidden, without NUL bytes)", path);
  }
  return EM_OK;
}

/* ---- the dataset ------------------------------------------------------------------------- */

/* EM_ERR_INVALID for a char tokenizer without a vocabulary: the text's
 * characters, as the JSON string to give as its "vocab". */
static em_status suggest_vocab(const text_files *f, em_error *err) {
  em_charset cs = {0};
  em_status st = EM_OK;
  for (int i = 0; i < f->n && st == EM_OK; i++) {
    char *s;
    size_t n;
    if ((st = read_whole(f->paths[i], &s, &n, err)) != EM_OK) break;
    st = em_charset_add(&cs, s, n, f->paths[i], err);
    free(s);
  }
  if (st != EM_OK) {
    em_charset_clear(&cs);
    return st;
  }
  size_t bytes = 0;
  char *v = em_charset_string(&cs, &bytes);
  json_t *js = v ? json_stringn(v, bytes) : NULL;
  char *q = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
  st = em_error_set(err, EM_ERR_INVALID, "the char tokenizer has no \"vocab\": the text's %lld "
                    "characters, in code point order, are %.700s%s (give that string as the "
                    "spec's \"tokenizer\": {\"type\": \"char\", \"vocab\": ...}, and %lld as the "
                    "vocabulary size of its Embedding and its head)", (long long)cs.count,
                    q ? q : "(out of memory)", q && strlen(q) > 700 ? "..." : "",
                    (long long)cs.count);
  free(q);
  json_decref(js);
  free(v);
  em_charset_clear(&cs);
  return st;
}

/* Every file's tokens, in order, into *ids (malloc'd), *n their count. */
static em_status encode_all(const text_files *f, const em_tokenizer *tok, int32_t **ids,
                            int64_t *n, em_error *err) {
  *ids = NULL;
  *n = 0;
  size_t cap = 0;
  em_status st = EM_OK;
  for (int i = 0; i < f->n && st == EM_OK; i++) {
    char *s;
    size_t len, got = 0;
    if ((st = read_whole(f->paths[i], &s, &len, err)) != EM_OK) break;
    if (len == 0 && f->named)
      st = em_error_set(err, EM_ERR_INVALID, "'%s' is empty: there is no text to train on",
                        f->paths[i]);
    if (st == EM_OK && (size_t)*n + len > cap) { /* a token is at least a byte */
      size_t want = cap ? cap : 1 << 16;
      while (want < (size_t)*n + len) want *= 2;
      int32_t *p = realloc(*ids, want * sizeof *p);
      if (p) {
        *ids = p;
        cap = want;
      } else {
        st = em_error_set(err, EM_ERR_NOMEM, "out of memory for the tokens of '%s'",
                          f->paths[i]);
      }
    }
    if (st == EM_OK) st = em_tokenizer_encode(tok, s, len, f->paths[i], *ids + *n, &got, err);
    if (st == EM_OK) *n += (int64_t)got;
    free(s);
  }
  if (st != EM_OK) {
    free(*ids);
    *ids = NULL;
    *n = 0;
  }
  return st;
}

em_dataset *em_dataset_text(const char *path, const em_tokenizer *tok, int64_t context,
                            bool train, em_error *err) {
  if (!path || !path[0]) {
    em_error_set(err, EM_ERR_INVALID, "the text dataset needs its file or folder");
    return NULL;
  }
  if (context < 1 || context > ((int64_t)1 << 24)) {
    em_error_set(err, EM_ERR_INVALID, "text dataset: a context of %lld tokens; 1 to 2^24 are "
                 "supported", (long long)context);
    return NULL;
  }
  int64_t V = em_tokenizer_vocab_size(tok);
  if (V > EM_DATASET_MAX_TOKEN) {
    em_error_set(err, EM_ERR_INVALID, "text dataset: a vocabulary of %lld tokens is more than "
                 "%lld", (long long)V, (long long)EM_DATASET_MAX_TOKEN);
    return NULL;
  }
  text_files f;
  if (list_files(path, &f, err) != EM_OK) return NULL;
  if (V == 0) {
    suggest_vocab(&f, err);
    files_clear(&f);
    return NULL;
  }
  int32_t *ids;
  int64_t n;
  em_status st = encode_all(&f, tok, &ids, &n, err);
  files_clear(&f);
  if (st != EM_OK) return NULL;
  int64_t n_val = n * EM_TEXT_VALIDATION_PERCENT / 100, n_train = n - n_val;
  int64_t first = train ? 0 : n_train, count = train ? n_train : n_val;
  if (count < context + 1) {
    free(ids);
    em_error_set(err, EM_ERR_INVALID, "the %s split of '%s' holds %lld tokens (of %lld in all; "
                 "validation is the last %d%%): a window of context %lld needs %lld; give more "
                 "text or a shorter context", train ? "training" : "validation", path,
                 (long long)count, (long long)n, EM_TEXT_VALIDATION_PERCENT, (long long)context,
                 (long long)context + 1);
    return NULL;
  }
  text_set *t = calloc(1, sizeof *t);
  if (!t) {
    free(ids);
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  if (first > 0) memmove(ids, ids + first, (size_t)count * sizeof *ids);
  int32_t *own = realloc(ids, (size_t)count * sizeof *ids);
  t->ids = own ? own : ids;
  t->n = count;
  t->context = context;
  t->vocab = (int)V;
  return em_dataset_new(&text_vtable, t, err);
}

/* ---- the kind "text" --------------------------------------------------------------------- */

/* With a model: its tokenizer and its input [L]; without one (the Data
 * page): bytes, windows of DEFAULT_CONTEXT. */
static em_dataset *text_open(const char *dir, bool train, const void *options, em_error *err) {
  const em_dataset_want *want = options;
  int64_t context = DEFAULT_CONTEXT;
  if (want && want->sample_ndim > 0) {
    if (want->sample_ndim != 1) {
      em_error_set(err, EM_ERR_SHAPE, "the text dataset gives windows of tokens: the model's "
                   "input must be one sequence, {\"shape\": [L], \"dtype\": \"i64\"}, not %d "
                   "dimensions", want->sample_ndim);
      return NULL;
    }
    context = want->sample_shape[0];
  }
  if (want && want->sample_ndim > 0 && !want->tokenizer) {
    em_error_set(err, EM_ERR_INVALID, "the text dataset encodes with the model's tokenizer, and "
                 "this spec has none: add \"tokenizer\": {\"type\": \"byte\"} (256 ids) or "
                 "{\"type\": \"char\", \"vocab\": \"...\"} to it");
    return NULL;
  }
  if (want && want->tokenizer) return em_dataset_text(dir, want->tokenizer, context, train, err);
  em_tokenizer *bytes = em_tokenizer_new(EM_TOKENIZER_BYTE, NULL, 0, err);
  em_dataset *ds = bytes ? em_dataset_text(dir, bytes, context, train, err) : NULL;
  em_tokenizer_free(bytes);
  return ds;
}

/* Both splits read every file: named once, for the training split. */
static em_status text_kind_files(const char *dir, bool train, char (*found)[4096], int room,
                                 int *n, em_error *err) {
  *n = 0;
  if (!train) return EM_OK;
  text_files f;
  em_status st = list_files(dir, &f, err);
  if (st != EM_OK) return st;
  if (f.n > room)
    st = em_error_set(err, EM_ERR_INVALID, "the text dataset reads %d files of '%s'; room was "
                      "given for %d", f.n, dir, room - 1);
  for (int i = 0; st == EM_OK && i < f.n; i++) {
    if (strlen(f.paths[i]) >= sizeof found[0])
      st = em_error_set(err, EM_ERR_INVALID, "file name too long: '%.200s...'", f.paths[i]);
    else memcpy(found[i], f.paths[i], strlen(f.paths[i]) + 1);
  }
  if (st == EM_OK) *n = f.n;
  files_clear(&f);
  return st;
}

const em_dataset_builtin em_dataset_kind_text = {
    .type = {.name = "text", .help = "a text file or a folder of them as windows of tokens for a "
             "language model (the spec's tokenizer; the last 10% validation)", .open = text_open},
    .needs_dir = true,
    .dir_hint = "a text file or a folder of them, such as /usr/share/games/fortunes",
    .files = text_kind_files,
};
