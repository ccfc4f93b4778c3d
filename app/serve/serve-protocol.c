/* serve-protocol.c: the Open Inference Protocol v2 (KServe v2 / Triton)
 * over HTTP/JSON, as far as a single-input, single-output model needs:
 *
 *   request  {"id"?, "parameters"?, "inputs": [{"name", "shape",
 *             "datatype", "parameters"?, "data"}], "outputs"?: [{"name",
 *             "parameters"?: {"classification": k}}]}
 *   response {"model_name", "model_version", "id"?, "outputs": [{"name",
 *             "shape", "datatype", "data"}]}
 *
 * The input is named "input" and the output "output" (the names Ember's
 * ONNX export gives them). "data" is row-major, flat or nested; its
 * element count must equal the shape's. FP32, FP64 and the integer types
 * are accepted for a float input, integer types for an index input.
 * "classification": k answers with Triton's classification extension: a
 * BYTES tensor (N, k) of "score:index" strings, best first.
 *
 * The binary tensor data extension: the body is the JSON header (its
 * length in the Inference-Header-Content-Length header) followed by raw
 * little-endian tensor bytes. An input with "parameters":
 * {"binary_data_size": B} has no "data" and takes its B bytes (its
 * element count times its datatype's size) from there; an output asked
 * for with "parameters": {"binary_data": true} (or every output, with the
 * request's "parameters": {"binary_data_output": true}) answers with
 * "parameters": {"binary_data_size": B} and its FP32 bytes after the
 * response's JSON. */
#include "serve-private.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <jansson.h>

typedef struct {
  const char *name;
  bool is_float;
  int64_t lo, hi; /* integer types' range (int64: the double range check below) */
  int size;       /* bytes of one element in binary tensor data */
  bool is_signed;
} dtype_info;

static const dtype_info dtypes[] = {
    {"FP32", true, 0, 0, 4, true},
    {"FP64", true, 0, 0, 8, true},
    {"INT8", false, -128, 127, 1, true},
    {"INT16", false, -32768, 32767, 2, true},
    {"INT32", false, INT32_MIN, INT32_MAX, 4, true},
    {"INT64", false, INT64_MIN, INT64_MAX, 8, true},
    {"UINT8", false, 0, 255, 1, false},
    {"UINT16", false, 0, 65535, 2, false},
    {"UINT32", false, 0, UINT32_MAX, 4, false},
    {"UINT64", false, 0, INT64_MAX, 8, false}, /* json integers are int64 */
};

static int fail(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *msg, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, cap, fmt, ap);
  va_end(ap);
  return 400;
}

/* Walks data (nested arrays of numbers) in row-major order into out. */
typedef struct {
  const serve_model *m;
  const dtype_info *dt;
  int64_t want, n;
  void *out;
  char *msg;
  size_t cap;
} walk;

/* One element: an integer i (is_int) or a real d. */
static int put_number(walk *w, bool is_int, int64_t i, double d) {
  if (w->n >= w->want)
    return fail(w->msg, w->cap, "input 'input': \"data\" has more elements than its shape "
                "holds (%lld)", (long long)w->want);
  if (is_int) {
    if (!w->dt->is_float && (i < w->dt->lo || i > w->dt->hi))
      return fail(w->msg, w->cap, "input 'input': element %lld (%lld) is out of range for %s",
                  (long long)w->n, (long long)i, w->dt->name);
    if (w->m->in_dtype == EM_DTYPE_I64) {
      ((int64_t *)w->out)[w->n++] = (int64_t)i;
      return 0;
    }
    d = (double)i;
  } else {
    if (!w->dt->is_float)
      return fail(w->msg, w->cap, "input 'input': element %lld (%g) is not an integer, as %s "
                  "needs", (long long)w->n, d, w->dt->name);
    if (isfinite(d) && fabs(d) > 3.4028234663852886e38) /* any type: the model reads FP32 */
      return fail(w->msg, w->cap, "input 'input': element %lld (%g) does not fit FP32%s",
                  (long long)w->n, d,
                  strcmp(w->dt->name, "FP32") ? ", the model's input type" : "");
  }
  ((float *)w->out)[w->n++] = (float)d;
  return 0;
}

static int put_value(walk *w, const json_t *v) {
  if (json_is_integer(v)) return put_number(w, true, json_integer_value(v), 0);
  if (json_is_real(v)) return put_number(w, false, 0, json_real_value(v));
  return fail(w->msg, w->cap, "input 'input': element %lld of \"data\" is not a number",
              (long long)w->n);
}

/* The nesting of "data": how deep its numbers lie (levels of lists) and
 * the length of the lists at each level. Nested data must be a block of
 * the shape (all lists at one level as long, every number at one depth),
 * its outer levels the shape's and its innermost lists the rest flat. */
typedef struct {
  int leaf_depth; /* -1: no number yet */
  bool ragged;
  int64_t len[EM_MAX_DIMS + 2]; /* len[l]: the lists' length at level l (-1 unseen) */
} nesting;

static void nesting_init(nesting *ns) {
  ns->leaf_depth = -1;
  ns->ragged = false;
  for (int l = 0; l < EM_MAX_DIMS + 2; l++) ns->len[l] = -1;
}

/* A number at depth d (inside d lists). */
static void nesting_leaf(nesting *ns, int d) {
  if (ns->leaf_depth < 0) ns->leaf_depth = d;
  else if (ns->leaf_depth != d) ns->ragged = true;
}

/* A list of n values at level l (0: data itself). */
static void nesting_list(nesting *ns, int l, int64_t n) {
  if (l >= EM_MAX_DIMS + 2) return; /* deeper than any shape: the depth check says so */
  if (ns->len[l] < 0) ns->len[l] = n;
  else if (ns->len[l] != n) ns->ragged = true;
}

/* 0, or a 400 when the nesting is not a block of shape gs (nd sizes). */
static int nesting_check(const nesting *ns, int nd, const int64_t *gs, char *msg, size_t cap) {
  if (ns->ragged)
    return fail(msg, cap, "input 'input': \"data\" is ragged (lists of one level differ in "
                "length, or numbers and lists are mixed): nest it as its shape, or send it flat");
  int d = ns->leaf_depth;
  if (d <= 1) return 0; /* flat (or a single number) */
  char got[200];
  if (d > nd)
    return fail(msg, cap, "input 'input': \"data\" is nested %d lists deep, deeper than shape "
                "%s", d, em_shape_str(nd, gs, got, sizeof got));
  int64_t rest = 1;
  for (int l = d - 1; l < nd; l++) rest *= gs[l];
  for (int l = 0; l < d; l++) {
    int64_t want = l < d - 1 ? gs[l] : rest;
    if (ns->len[l] != want)
      return fail(msg, cap, "input 'input': \"data\" has lists of %lld at nesting level %d "
                  "where shape %s needs %lld: nest it as its shape, or send it flat",
                  (long long)ns->len[l], l, em_shape_str(nd, gs, got, sizeof got),
                  (long long)want);
  }
  return 0;
}

/* ---- the fast path for "data" ---------------------------------------------------
 * jansson makes one object per number: for an image of 784 floats that is
 * most of a request's cost. So before jansson sees the body, the "data"
 * of the first input is found with a small skipper (strings and nesting
 * only) and its numbers are read straight into an array; jansson then
 * parses the body with that value replaced by []. Anything unusual (a
 * non-number element, an escaped key, an integer too large) leaves the
 * body to jansson alone, whose walk gives the error messages. */

typedef struct {
  double *v;       /* the numbers in order */
  int64_t *iv;     /* integer tokens' exact values (iv[k] valid when isint[k]) */
  unsigned char *isint;
  int64_t n;
  nesting nest;
} fast_data;

static const char *skip_ws(const char *p, const char *e) {
  while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  return p;
}

/* p at '"': past the closing quote, or NULL. */
static const char *skip_string(const char *p, const char *e) {
  for (p++; p < e; p++) {
    if (*p == '\\') p++;
    else if (*p == '"') return p + 1;
  }
  return NULL;
}

/* Past one value (not validated: jansson does that), or NULL. */
static const char *skip_value(const char *p, const char *e) {
  int depth = 0;
  do {
    p = skip_ws(p, e);
    if (p >= e) return NULL;
    if (*p == '"') {
      if (!(p = skip_string(p, e))) return NULL;
    } else if (*p == '[' || *p == '{') {
      depth++, p++;
    } else if (*p == ']' || *p == '}') {
      depth--, p++;
    } else if (*p == ',' || *p == ':') {
      p++;
    } else { /* a number or a literal, up to the next delimiter */
      const char *q = p;
      while (q < e && *q != '\0' && !strchr(" \n\r\t,:]}", *q)) q++;
      if (q == p) return NULL; /* a NUL: no JSON value (strchr would match it, and loop) */
      p = q;
    }
  } while (depth > 0);
  return p;
}

static bool key_is(const char *k, const char *end, const char *name) {
  size_t n = strlen(name);
  return (size_t)(end - k) == n + 2 && !memcmp(k + 1, name, n);
}

/* In object p (at '{'), the value of key name: its start, or NULL. */
static const char *find_member(const char *p, const char *e, const char *name) {
  p = skip_ws(p + 1, e);
  while (p < e && *p == '"') {
    const char *k = p;
    if (!(p = skip_string(p, e))) return NULL;
    bool hit = key_is(k, p, name);
    p = skip_ws(p, e);
    if (p >= e || *p != ':') return NULL;
    p = skip_ws(p + 1, e);
    if (hit) return p;
    if (!(p = skip_value(p, e))) return NULL;
    p = skip_ws(p, e);
    if (p < e && *p == ',') p = skip_ws(p + 1, e);
  }
  return NULL;
}

/* The span of inputs[0].data in the body, if it can be found. */
static bool find_data(const char *b, size_t len, const char **s, const char **t) {
  const char *e = b + len, *p = skip_ws(b, e);
  if (p >= e || *p != '{' || !(p = find_member(p, e, "inputs")) || *p != '[') return false;
  p = skip_ws(p + 1, e);
  if (p >= e || *p != '{' || !(p = find_member(p, e, "data"))) return false;
  *s = p;
  return (*t = skip_value(p, e)) != NULL;
}

/* Reads the numbers of [s, t) (nested arrays of JSON numbers). */
static bool scan_numbers(const char *s, const char *t, fast_data *fd) {
  int64_t cap = (t - s) / 2 + 1; /* a number and a comma take 2 bytes at least */
  fd->v = malloc(sizeof *fd->v * (size_t)cap);
  fd->iv = malloc(sizeof *fd->iv * (size_t)cap);
  fd->isint = malloc((size_t)cap);
  if (!fd->v || !fd->iv || !fd->isint) return false;
  int depth = 0;
  int64_t count[EM_MAX_DIMS + 2]; /* count[l]: values so far in the open list at level l */
  bool want_value = true; /* a value may come (after '[' or ',') */
  bool comma = false;      /* the last token was ',' (so ']' may not follow) */
  const char *p = s;
  nesting_init(&fd->nest);
  while ((p = skip_ws(p, t)) < t) {
    char c = *p;
    if (c == '[') {
      if (!want_value || depth + 1 > EM_MAX_DIMS + 1) return false;
      if (depth > 0) count[depth - 1]++;
      count[depth++] = 0;
      comma = false, p++;
    } else if (c == ']') {
      if (depth == 0 || comma) return false;
      depth--;
      nesting_list(&fd->nest, depth, count[depth]);
      want_value = false, p++;
    } else if (c == ',') {
      if (want_value || depth == 0) return false;
      want_value = comma = true, p++;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (!want_value || fd->n >= cap) return false;
      /* strict JSON number syntax */
      const char *q = p;
      if (*q == '-') q++;
      if (q >= t || !(*q >= '0' && *q <= '9')) return false;
      if (*q == '0') q++;
      else while (q < t && *q >= '0' && *q <= '9') q++;
      bool is_int = true;
      if (q < t && *q == '.') {
        is_int = false, q++;
        if (q >= t || !(*q >= '0' && *q <= '9')) return false;
        while (q < t && *q >= '0' && *q <= '9') q++;
      }
      if (q < t && (*q == 'e' || *q == 'E')) {
        is_int = false, q++;
        if (q < t && (*q == '+' || *q == '-')) q++;
        if (q >= t || !(*q >= '0' && *q <= '9')) return false;
        while (q < t && *q >= '0' && *q <= '9') q++;
      }
      char num[64];
      if (q - p >= (ptrdiff_t)sizeof num) return false; /* leave long ones to jansson */
      memcpy(num, p, (size_t)(q - p));
      num[q - p] = '\0';
      errno = 0;
      if (is_int) {
        long long v = strtoll(num, NULL, 10);
        if (errno) return false;
        fd->iv[fd->n] = v;
        fd->v[fd->n] = (double)v;
      } else {
        fd->v[fd->n] = strtod(num, NULL);
        if (errno == ERANGE && isinf(fd->v[fd->n])) return false;
      }
      fd->isint[fd->n++] = is_int;
      if (depth > 0) count[depth - 1]++;
      nesting_leaf(&fd->nest, depth);
      want_value = comma = false;
      p = q;
    } else {
      return false; /* not a number: jansson's walk names it */
    }
  }
  return depth == 0 && !want_value;
}

static void fast_data_clear(fast_data *fd) {
  free(fd->v);
  free(fd->iv);
  free(fd->isint);
  memset(fd, 0, sizeof *fd);
}

static int walk_data(walk *w, const json_t *v, int depth) {
  if (!json_is_array(v)) return put_value(w, v);
  if (depth > EM_MAX_DIMS + 1)
    return fail(w->msg, w->cap, "input 'input': \"data\" is nested deeper than its shape");
  size_t i;
  const json_t *e;
  json_array_foreach(v, i, e) {
    int rc = walk_data(w, e, depth + 1);
    if (rc) return rc;
  }
  return 0;
}

/* The values in data (nested lists counted through, at most as deep as
 * walk_data takes them), so that the input is sized only once the body
 * is known to hold it. */
static int64_t count_values(const json_t *v, int depth, nesting *ns) {
  if (!json_is_array(v) || depth > EM_MAX_DIMS + 1) {
    nesting_leaf(ns, depth);
    return 1;
  }
  nesting_list(ns, depth, (int64_t)json_array_size(v));
  int64_t n = 0;
  size_t i;
  const json_t *e;
  json_array_foreach(v, i, e) n += count_values(e, depth + 1, ns);
  return n;
}

static bool only_keys(const json_t *obj, const char *const *keys, const char **bad) {
  const char *k;
  const json_t *v;
  json_object_foreach((json_t *)obj, k, v) {
    bool ok = false;
    for (const char *const *p = keys; *p && !ok; p++) ok = !strcmp(k, *p);
    if (!ok) {
      *bad = k;
      return false;
    }
  }
  return true;
}

/* The binary part of a request: bytes after the JSON header, and whether
 * an input took them. */
typedef struct {
  const unsigned char *p;
  size_t n;
  bool header;  /* the request named its JSON header's length */
  bool used;
} binary_part;

/* Element k of little-endian binary data of dtype dt, as put_number wants. */
static int put_binary(walk *w, const unsigned char *p) {
  const dtype_info *dt = w->dt;
  if (dt->is_float) {
    double d;
    if (dt->size == 4) {
      float f;
      memcpy(&f, p, 4);
      d = f;
    } else {
      memcpy(&d, p, 8);
    }
    return put_number(w, false, 0, d);
  }
  uint64_t u = 0;
  for (int b = dt->size - 1; b >= 0; b--) u = u << 8 | p[b];
  int64_t i;
  if (dt->is_signed && dt->size < 8 && (u >> (8 * dt->size - 1)) & 1)
    i = (int64_t)(u | (~(uint64_t)0 << (8 * dt->size))); /* sign-extend */
  else if (!dt->is_signed && dt->size == 8 && u > (uint64_t)INT64_MAX)
    return fail(w->msg, w->cap, "input 'input': element %lld (%llu) is out of range for UINT64 "
                "(at most %lld)", (long long)w->n, (unsigned long long)u, (long long)INT64_MAX);
  else
    i = (int64_t)u;
  return put_number(w, true, i, 0);
}

static int parse_input(const json_t *in, const serve_model *m, const fast_data *fd,
                       binary_part *bin, serve_infer_req *req, char *msg, size_t cap) {
  static const char *const keys[] = {"name", "shape", "datatype", "parameters", "data", NULL};
  const char *bad;
  if (!json_is_object(in)) return fail(msg, cap, "\"inputs\"[0] is not an object");
  if (!only_keys(in, keys, &bad))
    return fail(msg, cap, "input: unknown key \"%s\" (an input has name, shape, datatype, "
                "parameters and data)", bad);
  const json_t *name = json_object_get(in, "name"), *shape = json_object_get(in, "shape"),
               *dtype = json_object_get(in, "datatype"), *data = json_object_get(in, "data"),
               *params = json_object_get(in, "parameters");
  if (!json_is_string(name)) return fail(msg, cap, "input: \"name\" is missing or not a string");
  if (strcmp(json_string_value(name), "input"))
    return fail(msg, cap, "unknown input '%s': model '%s' takes one input named 'input'",
                json_string_value(name), m->name);
  const json_t *bsize = params ? json_object_get(params, "binary_data_size") : NULL;
  if (params && !json_is_object(params))
    return fail(msg, cap, "input 'input': \"parameters\" must be an object");
  if (bsize) {
    if (!json_is_integer(bsize) || json_integer_value(bsize) < 0)
      return fail(msg, cap, "input 'input': \"binary_data_size\" must be a byte count");
    if (!bin->header)
      return fail(msg, cap, "input 'input': binary tensor data needs the "
                  "Inference-Header-Content-Length header (the JSON header's length)");
    if (data)
      return fail(msg, cap, "input 'input': send its elements either as \"data\" or as binary "
                  "data (binary_data_size), not both");
    if ((uint64_t)json_integer_value(bsize) != bin->n)
      return fail(msg, cap, "input 'input': binary_data_size is %lld but %zu bytes follow the "
                  "JSON header", (long long)json_integer_value(bsize), bin->n);
  }
  if (!json_is_string(dtype)) return fail(msg, cap, "input 'input': \"datatype\" is missing");
  const dtype_info *dt = NULL;
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0] && !dt; i++)
    if (!strcmp(json_string_value(dtype), dtypes[i].name)) dt = &dtypes[i];
  if (!dt)
    return fail(msg, cap, "input 'input': datatype \"%s\" is not accepted; use FP32 (or FP64, "
                "INT8..INT64, UINT8..UINT64)", json_string_value(dtype));
  if (m->in_dtype == EM_DTYPE_I64 && dt->is_float)
    return fail(msg, cap, "input 'input': model '%s' takes indices: use an integer datatype "
                "(INT64, INT32...), not %s", m->name, dt->name);

  /* shape: [N, ...the sample shape] */
  char want[200], got[200];
  int64_t ws[EM_MAX_DIMS + 1];
  ws[0] = -1;
  memcpy(ws + 1, m->in_shape, sizeof(int64_t) * (size_t)m->in_ndim);
  em_shape_str(1 + m->in_ndim, ws, want, sizeof want);
  if (!json_is_array(shape) || json_array_size(shape) == 0)
    return fail(msg, cap, "input 'input': \"shape\" must be a list of sizes %s", want);
  size_t nd = json_array_size(shape);
  int64_t gs[EM_MAX_DIMS + 1] = {0};
  for (size_t d = 0; d < nd && d <= EM_MAX_DIMS; d++) {
    const json_t *v = json_array_get(shape, d);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      return fail(msg, cap, "input 'input': \"shape\" entry %zu is not a size (a non-negative "
                  "integer)", d);
    gs[d] = json_integer_value(v);
  }
  bool ok = nd == (size_t)(1 + m->in_ndim);
  for (int d = 0; ok && d < m->in_ndim; d++) ok = gs[d + 1] == m->in_shape[d];
  if (!ok)
    return fail(msg, cap, "input 'input': shape %s does not fit model '%s', which takes %s",
                nd <= EM_MAX_DIMS + 1 ? em_shape_str((int)nd, gs, got, sizeof got) : "(too long)",
                m->name, want);
  if (gs[0] < 1) return fail(msg, cap, "input 'input': the batch dimension is 0: send a row");
  if (gs[0] > (int64_t)1 << 24)
    return fail(msg, cap, "input 'input': batch of %lld rows is too large",
                (long long)gs[0]);
  if (!data && !bsize) return fail(msg, cap, "input 'input': \"data\" is missing");

  req->rows = gs[0];
  int64_t want_n = gs[0] * m->in_numel;
  if (bsize) { /* the binary tensor data extension */
    if ((uint64_t)want_n * (uint64_t)dt->size != bin->n)
      return fail(msg, cap, "input 'input': %zu bytes of binary data but shape %s of %s needs "
                  "%lld", bin->n, em_shape_str((int)nd, gs, got, sizeof got), dt->name,
                  (long long)(want_n * dt->size));
    size_t esz = m->in_dtype == EM_DTYPE_I64 ? sizeof(int64_t) : sizeof(float);
    req->in = malloc(esz * (size_t)(want_n ? want_n : 1));
    if (!req->in) return fail(msg, cap, "out of memory for %lld input elements", (long long)want_n);
    walk w = {m, dt, want_n, 0, req->in, msg, cap};
    int rc = 0;
    for (int64_t k = 0; k < want_n && !rc; k++) rc = put_binary(&w, bin->p + k * dt->size);
    bin->used = true;
    return rc;
  }
  nesting ns;
  nesting_init(&ns);
  int64_t have_n = fd ? fd->n : count_values(data, 0, &ns);
  if (have_n != want_n) /* before sizing the input by the shape it claims */
    return fail(msg, cap, "input 'input': \"data\" has %lld elements but shape %s needs %lld",
                (long long)have_n, em_shape_str((int)nd, gs, got, sizeof got), (long long)want_n);
  int rc = nesting_check(fd ? &fd->nest : &ns, (int)nd, gs, msg, cap);
  if (rc) return rc;
  size_t esz = m->in_dtype == EM_DTYPE_I64 ? sizeof(int64_t) : sizeof(float);
  req->in = malloc(esz * (size_t)want_n);
  if (!req->in) return fail(msg, cap, "out of memory for %lld input elements", (long long)want_n);
  walk w = {m, dt, want_n, 0, req->in, msg, cap};
  if (fd) /* read by the fast path (data is [] here) */
    for (int64_t k = 0; k < fd->n && !rc; k++)
      rc = put_number(&w, fd->isint[k], fd->iv[k], fd->v[k]);
  else rc = walk_data(&w, data, 0);
  if (rc) return rc;
  if (w.n != want_n)
    return fail(msg, cap, "input 'input': \"data\" has %lld elements but shape %s needs %lld",
                (long long)w.n, em_shape_str((int)nd, gs, got, sizeof got), (long long)want_n);
  return 0;
}

static int parse_outputs(const json_t *outs, const serve_model *m, serve_infer_req *req,
                         char *msg, size_t cap) {
  static const char *const keys[] = {"name", "parameters", NULL};
  const char *bad;
  if (!json_is_array(outs)) return fail(msg, cap, "\"outputs\" must be a list");
  if (json_array_size(outs) > 1) /* the model has one; two would ask for it two ways */
    return fail(msg, cap, "\"outputs\" names %zu outputs: model '%s' has one, named 'output'",
                json_array_size(outs), m->name);
  size_t i;
  const json_t *o;
  json_array_foreach(outs, i, o) {
    if (!json_is_object(o)) return fail(msg, cap, "\"outputs\"[%zu] is not an object", i);
    if (!only_keys(o, keys, &bad))
      return fail(msg, cap, "\"outputs\"[%zu]: unknown key \"%s\"", i, bad);
    const json_t *name = json_object_get(o, "name");
    if (!json_is_string(name) || strcmp(json_string_value(name), "output"))
      return fail(msg, cap, "unknown output '%s': model '%s' has one output named 'output'",
                  json_is_string(name) ? json_string_value(name) : "", m->name);
    const json_t *params = json_object_get(o, "parameters");
    if (params && !json_is_object(params))
      return fail(msg, cap, "output 'output': \"parameters\" must be an object");
    const json_t *b = params ? json_object_get(params, "binary_data") : NULL;
    if (b && !json_is_boolean(b))
      return fail(msg, cap, "output 'output': \"binary_data\" must be true or false");
    if (b) req->binary_out = json_is_true(b);
    const json_t *k = params ? json_object_get(params, "classification") : NULL;
    if (k) {
      if (!json_is_integer(k) || json_integer_value(k) < 1 ||
          json_integer_value(k) > m->out_numel)
        return fail(msg, cap, "output 'output': \"classification\" must be an integer from 1 "
                    "to %lld", (long long)m->out_numel);
      req->classify = (int)json_integer_value(k);
    }
  }
  return 0;
}

int serve_infer_parse(const char *body, size_t len, size_t json_len, const serve_model *m,
                      serve_infer_req *req, char *msg, size_t cap) {
  static const char *const keys[] = {"id", "parameters", "inputs", "outputs", NULL};
  memset(req, 0, sizeof *req);
  if (json_len > len)
    return fail(msg, cap, "Inference-Header-Content-Length is %zu but the body has %zu bytes",
                json_len, len);
  binary_part bin = {(const unsigned char *)body + json_len, len - json_len, json_len != len,
                     false};
  len = json_len; /* the JSON header */
  json_error_t jerr;
  json_t *root = NULL;
  fast_data fd = {0};
  const char *ds, *dt;
  bool fast = false;
  if (m->in_dtype == EM_DTYPE_F32 && find_data(body, len, &ds, &dt) && scan_numbers(ds, dt, &fd)) {
    /* the body with inputs[0].data as [] */
    size_t a = (size_t)(ds - body), b = (size_t)(dt - body);
    char *rest = malloc(len - (b - a) + 3);
    if (rest) {
      memcpy(rest, body, a);
      memcpy(rest + a, "[]", 2);
      memcpy(rest + a + 2, body + b, len - b);
      root = json_loadb(rest, len - (b - a) + 2, JSON_REJECT_DUPLICATES, &jerr);
      free(rest);
      fast = root != NULL;
    }
  }
  if (!fast) {
    fast_data_clear(&fd);
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  }
  if (!root)
    return fail(msg, cap, "the body is not valid JSON: %s (line %d, column %d)", jerr.text,
                jerr.line, jerr.column);
  int rc = 0;
  const char *bad;
  const json_t *id = json_object_get(root, "id"), *inputs = json_object_get(root, "inputs"),
               *outputs = json_object_get(root, "outputs");
  if (!json_is_object(root)) rc = fail(msg, cap, "the body must be a JSON object");
  else if (!only_keys(root, keys, &bad))
    rc = fail(msg, cap, "unknown key \"%s\" (an inference request has id, parameters, inputs "
              "and outputs)", bad);
  else if (id && !json_is_string(id)) rc = fail(msg, cap, "\"id\" must be a string");
  else if (!json_is_array(inputs) || json_array_size(inputs) != 1)
    rc = fail(msg, cap, "\"inputs\" must be a list of one input (model '%s' takes 'input')",
              m->name);
  else if (!(rc = parse_input(json_array_get(inputs, 0), m, fast ? &fd : NULL, &bin, req, msg,
                              cap)) &&
           outputs)
    rc = parse_outputs(outputs, m, req, msg, cap);
  const json_t *rparams = json_is_object(root) ? json_object_get(root, "parameters") : NULL;
  if (!rc && rparams) {
    const json_t *bo = json_is_object(rparams) ? json_object_get(rparams, "binary_data_output")
                                               : NULL;
    if (!json_is_object(rparams)) rc = fail(msg, cap, "\"parameters\" must be an object");
    else if (bo && !json_is_boolean(bo))
      rc = fail(msg, cap, "\"binary_data_output\" must be true or false");
    else if (json_is_true(bo)) req->binary_out = true;
  }
  if (!rc && bin.n && !bin.used)
    rc = fail(msg, cap, "%zu bytes follow the JSON header but no input takes binary data "
              "(\"parameters\": {\"binary_data_size\": ...})", bin.n);
  if (!rc && req->binary_out && req->classify)
    rc = fail(msg, cap, "output 'output': the classification extension answers strings: ask "
              "for it without binary_data");
  if (!rc && id && !(req->id = strdup(json_string_value(id))))
    rc = fail(msg, cap, "out of memory");
  json_decref(root);
  fast_data_clear(&fd);
  if (rc) serve_infer_req_clear(req);
  return rc;
}

void serve_infer_req_clear(serve_infer_req *req) {
  free(req->id);
  free(req->in);
  memset(req, 0, sizeof *req);
}

static char *dump(json_t *obj, size_t *len) {
  char *s = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
  json_decref(obj);
  if (s) *len = strlen(s);
  return s;
}

static json_t *shape_json(int64_t rows, int ndim, const int64_t *shape) {
  json_t *a = json_array();
  json_array_append_new(a, json_integer(rows));
  for (int d = 0; d < ndim; d++) json_array_append_new(a, json_integer(shape[d]));
  return a;
}

/* Indices of the k largest of v[0..n) into idx, largest first (ties: the
 * lower index first). */
static void top_k(const float *v, int64_t n, int k, int64_t *idx) {
  for (int j = 0; j < k; j++) {
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++) {
      bool used = false;
      for (int t = 0; t < j && !used; t++) used = idx[t] == i;
      if (!used && (best < 0 || v[i] > v[best])) best = i;
    }
    idx[j] = best;
  }
}

char *serve_infer_format(const serve_model *m, const serve_infer_req *req, const float *out,
                         size_t *len, size_t *json_len) {
  json_t *root = json_object(), *o = json_object();
  json_object_set_new(root, "model_name", json_string(m->name));
  json_object_set_new(root, "model_version", json_string(m->version));
  if (req->id) json_object_set_new(root, "id", json_string(req->id));
  json_object_set_new(o, "name", json_string("output"));
  json_t *outs = json_array();
  json_array_append_new(outs, o);
  json_object_set_new(root, "outputs", outs); /* o stays ours to fill */
  bool binary = req->binary_out && !req->classify;
  size_t bytes = 0;
  if (req->classify) {
    int64_t k = req->classify, idx[4096];
    if (k > 4096) k = 4096;
    json_t *data = json_array();
    json_object_set_new(o, "shape", shape_json(req->rows, 1, &k));
    json_object_set_new(o, "datatype", json_string("BYTES"));
    for (int64_t r = 0; r < req->rows; r++) {
      const float *row = out + r * m->out_numel;
      top_k(row, m->out_numel, (int)k, idx);
      for (int64_t j = 0; j < k; j++) {
        char s[64];
        snprintf(s, sizeof s, "%.9g:%lld", (double)row[idx[j]], (long long)idx[j]);
        json_array_append_new(data, json_string(s));
      }
    }
    json_object_set_new(o, "data", data);
  } else {
    int64_t n = req->rows * m->out_numel;
    json_object_set_new(o, "shape", shape_json(req->rows, m->out_ndim, m->out_shape));
    json_object_set_new(o, "datatype", json_string("FP32"));
    if (binary) { /* the binary tensor data extension: the bytes after the JSON */
      bytes = sizeof(float) * (size_t)n;
      json_t *p = json_object();
      json_object_set_new(p, "binary_data_size", json_integer((json_int_t)bytes));
      json_object_set_new(o, "parameters", p);
    } else {
      json_t *data = json_array();
      for (int64_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) { /* JSON has no NaN or Inf: say so rather than drop values */
          json_decref(data);
          json_decref(root);
          return NULL;
        }
        json_array_append_new(data, json_real((double)out[i]));
      }
      json_object_set_new(o, "data", data);
    }
  }
  size_t hl = 0;
  char *head = dump(root, &hl);
  if (!head || !binary) {
    if (head) *len = *json_len = hl;
    return head;
  }
  char *body = malloc(hl + bytes + 1);
  if (body) {
    memcpy(body, head, hl);
    memcpy(body + hl, out, bytes); /* little-endian FP32 on x86-64 */
    body[hl + bytes] = 0;
    *len = hl + bytes;
    *json_len = hl;
  }
  free(head);
  return body;
}

static json_t *tensor_meta(const char *name, const char *dtype, int ndim, const int64_t *shape) {
  json_t *t = json_object();
  json_object_set_new(t, "name", json_string(name));
  json_object_set_new(t, "datatype", json_string(dtype));
  json_object_set_new(t, "shape", shape_json(-1, ndim, shape));
  return t;
}

char *serve_model_metadata(const serve_model *m, size_t *len) {
  json_t *root = json_object(), *versions = json_array(), *ins = json_array(),
         *outs = json_array();
  json_object_set_new(root, "name", json_string(m->name));
  json_array_append_new(versions, json_string(m->version));
  json_object_set_new(root, "versions", versions);
  json_object_set_new(root, "platform", json_string("ember"));
  json_array_append_new(ins, tensor_meta("input", m->in_dtype == EM_DTYPE_I64 ? "INT64" : "FP32",
                                         m->in_ndim, m->in_shape));
  json_array_append_new(outs, tensor_meta("output", "FP32", m->out_ndim, m->out_shape));
  json_object_set_new(root, "inputs", ins);
  json_object_set_new(root, "outputs", outs);
  return dump(root, len);
}

char *serve_error_body(const char *msg, size_t *len) {
  /* A message quotes the request (a path, a key) and may cut it inside a
   * character: JSON strings are UTF-8, and jansson takes nothing else (the
   * body came out as {}), so bad bytes become U+FFFD. */
  char *valid = g_utf8_make_valid(msg, -1);
  json_t *root = json_object();
  json_object_set_new(root, "error", json_string(valid));
  g_free(valid);
  return dump(root, len);
}
