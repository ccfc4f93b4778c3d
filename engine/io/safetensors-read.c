/* safetensors-read.c: opening and validating safetensors files, and
 * reading tensors from them on demand. */
#include "io-private.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
  char *name;
  const em_st_dtype *dt;
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  uint64_t begin, end; /* in the data, after the header */
} st_entry;

struct em_safetensors {
  char *path;
  int fd;
  uint64_t data_start; /* 8 + header length */
  int n;
  st_entry *e;         /* (n), in data order */
  const st_entry **by_name; /* (n), into e, sorted by name */
  int n_meta;
  char **meta_keys, **meta_values; /* (n_meta) */
};

void em_safetensors_close(em_safetensors *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  for (int i = 0; i < f->n; i++) free(f->e[i].name);
  for (int i = 0; i < f->n_meta; i++) {
    free(f->meta_keys[i]);
    free(f->meta_values[i]);
  }
  free(f->e);
  free(f->by_name);
  free(f->meta_keys);
  free(f->meta_values);
  free(f->path);
  free(f);
}

static bool read_at(int fd, void *buf, size_t n, uint64_t off, size_t *got) {
  char *p = buf;
  *got = 0;
  while (*got < n) {
    size_t chunk = n - *got > (1u << 30) ? (1u << 30) : n - *got;
    ssize_t r = pread(fd, p + *got, chunk, (off_t)(off + *got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (r == 0) break;
    *got += (size_t)r;
  }
  return true;
}

static em_status parse_meta(em_safetensors *f, json_t *meta, em_error *err) {
  if (!json_is_object(meta))
    return em_error_set(err, EM_ERR_FORMAT, "'%s': \"__metadata__\" is not an object", f->path);
  size_t n = json_object_size(meta);
  f->meta_keys = calloc(n ? n : 1, sizeof(char *));
  f->meta_values = calloc(n ? n : 1, sizeof(char *));
  if (!f->meta_keys || !f->meta_values) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  const char *key;
  json_t *v;
  json_object_foreach(meta, key, v) {
    if (!json_is_string(v))
      return em_error_set(err, EM_ERR_FORMAT, "'%s': metadata '%.200s' is not a string",
                          f->path, key);
    f->meta_keys[f->n_meta] = strdup(key);
    f->meta_values[f->n_meta] = strdup(json_string_value(v));
    f->n_meta++;
    if (!f->meta_keys[f->n_meta - 1] || !f->meta_values[f->n_meta - 1])
      return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  }
  return EM_OK;
}

/* One tensor entry: {"dtype": s, "shape": [ints], "data_offsets": [b, e]}. */
static em_status parse_entry(em_safetensors *f, const char *name, json_t *v, st_entry *e,
                             em_error *err) {
  const char *p = f->path;
  if (!json_is_object(v))
    return em_error_set(err, EM_ERR_FORMAT, "'%s': the entry of tensor '%.200s' is not an "
                        "object", p, name);
  const char *key;
  json_t *field;
  json_object_foreach(v, key, field) {
    if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
      return em_error_set(err, EM_ERR_FORMAT, "'%s': tensor '%.200s' has an unknown field "
                          "'%.100s'", p, name, key);
  }
  json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
  json_t *offs = json_object_get(v, "data_offsets");
  if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
    return em_error_set(err, EM_ERR_FORMAT, "'%s': tensor '%.200s' needs a string \"dtype\", "
                        "an array \"shape\" and an array \"data_offsets\"", p, name);
  e->dt = em_st_dtype_find(json_string_value(dt));
  if (!e->dt)
    return em_error_set(err, EM_ERR_FORMAT, "'%s': tensor '%.200s' has unknown dtype '%.40s'", p,
                        name, json_string_value(dt));
  size_t nd = json_array_size(shape);
  if (nd > EM_MAX_DIMS)
    return em_error_set(err, EM_ERR_UNSUPPORTED, "'%s': tensor '%.200s' has %zu dimensions; at "
                        "most %d are supported", p, name, nd, EM_MAX_DIMS);
  e->ndim = (int)nd;
  uint64_t nbytes = (uint64_t)e->dt->size;
  for (size_t i = 0; i < nd; i++) {
    json_t *d = json_array_get(shape, i);
    if (!json_is_integer(d) || json_integer_value(d) < 0)
      return em_error_set(err, EM_ERR_FORMAT, "'%s': tensor '%.200s': shape entry %zu is not a "
                          "non-negative integer", p, name, i);
    e->shape[i] = json_integer_value(d);
    if (e->shape[i] > 0 && nbytes > (UINT64_C(1) << 62) / (uint64_t)e->shape[i])
      return em_error_set(err, EM_ERR_FORMAT, "'%s': tensor '%.200s' has an absurd shape", p,
                          name);
    nbytes *= (uint64_t)e->shape[i];
  }
  json_t *b = json_array_get(offs, 0), *en = json_array_get(offs, 1);
  if (json_array_size(offs) != 2 || !json_is_integer(b) || !json_is_integer(en) ||
      json_integer_value(b) < 0 || json_integer_value(en) < json_integer_value(b))
    return em_error_set(err, EM_ERR_FORMAT, "'%s': tensor '%.200s': \"data_offsets\" must be "
                        "[begin, end] with 0 <= begin <= end", p, name);
  e->begin = (uint64_t)json_integer_value(b);
  e->end = (uint64_t)json_integer_value(en);
  if (e->end - e->begin != nbytes) {
    char buf[160];
    return em_error_set(err, EM_ERR_FORMAT, "'%s': tensor '%.200s' (%s %s) needs %llu bytes "
                        "but its data_offsets [%llu, %llu] span %llu", p, name, e->dt->name,
                        em_shape_str(e->ndim, e->shape, buf, sizeof buf),
                        (unsigned long long)nbytes, (unsigned long long)e->begin,
                        (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
  }
  e->name = strdup(name);
  if (!e->name) return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  return EM_OK;
}

static int cmp_begin(const void *a, const void *b) {
  const st_entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_name(const void *a, const void *b) {
  return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

/* Before the JSON tree is built (its memory is about 1 KB an entry): the
 * entries at the top level and the items in all (each key or value is
 * preceded by a ':', a ',' or an opening bracket) counted in one pass
 * over the text, outside strings; too many is refused. */
static em_status check_counts(const em_safetensors *f, const char *text, size_t len,
                              em_error *err) {
  size_t depth = 0, entries = 0, items = 0;
  bool in_string = false;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
    case '"': in_string = true; break;
    case '{':
    case '[': depth++, items++; break;
    case '}':
    case ']': depth -= depth > 0; break;
    case ':': entries += depth == 1, items++; break;
    case ',': items++; break;
    default: break;
    }
  }
  if (entries > EM_ST_MAX_ENTRIES)
    return em_error_set(err, EM_ERR_FORMAT, "'%s': the header lists %zu entries; at most %d "
                        "(tensors and metadata) are read: corrupt or not a model's weights",
                        f->path, entries, EM_ST_MAX_ENTRIES);
  if (items > EM_ST_MAX_ITEMS)
    return em_error_set(err, EM_ERR_FORMAT, "'%s': the header holds %zu JSON keys and values; "
                        "at most %d are read: corrupt or not a model's weights", f->path, items,
                        EM_ST_MAX_ITEMS);
  return EM_OK;
}

/* Parses the header and checks the layout of the data. */
static em_status parse_header(em_safetensors *f, const char *text, size_t len, uint64_t data_len,
                              em_error *err) {
  em_status counted = check_counts(f, text, len, err);
  if (counted != EM_OK) return counted;
  json_error_t jerr;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root && strncmp(jerr.text, "end of file expected", 20) == 0) /* jansson's words */
    return em_error_set(err, EM_ERR_FORMAT, "'%s': the header has bytes after its JSON object "
                        "(only spaces may pad it): corrupt or not a safetensors file", f->path);
  if (!root)
    return em_error_set(err, EM_ERR_FORMAT, "'%s': the header is not valid JSON (%s at byte "
                        "%d): corrupt or not a safetensors file", f->path, jerr.text,
                        jerr.position);
  em_status st = EM_OK;
  if (!json_is_object(root)) {
    st = em_error_set(err, EM_ERR_FORMAT, "'%s': the header is not a JSON object", f->path);
    goto out;
  }
  size_t n = json_object_size(root);
  f->e = calloc(n ? n : 1, sizeof *f->e);
  f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
  if (!f->e || !f->by_name) {
    st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
    goto out;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "__metadata__") == 0) st = parse_meta(f, v, err);
    else if ((st = parse_entry(f, key, v, &f->e[f->n], err)) == EM_OK) f->n++;
    if (st != EM_OK) goto out;
  }
  /* The data must be packed: sorted by offset, each tensor starts where
   * the previous one ends, and the last one ends at the end of the file. */
  qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_begin);
  uint64_t pos = 0;
  for (int i = 0; i < f->n; i++) {
    const st_entry *e = &f->e[i];
    if (e->begin != pos) {
      if (e->begin < pos)
        st = em_error_set(err, EM_ERR_FORMAT, "'%s': the data of tensors '%.200s' and '%.200s' "
                          "overlap", f->path, f->e[i - 1].name, e->name);
      else
        st = em_error_set(err, EM_ERR_FORMAT, "'%s': a hole of %llu bytes before the data of "
                          "tensor '%.200s'", f->path, (unsigned long long)(e->begin - pos),
                          e->name);
      goto out;
    }
    pos = e->end;
  }
  if (pos > data_len) {
    st = em_error_set(err, EM_ERR_FORMAT, "'%s' is truncated: the header describes %llu bytes "
                      "of tensor data, the file holds %llu", f->path, (unsigned long long)pos,
                      (unsigned long long)data_len);
    goto out;
  }
  if (pos < data_len) {
    st = em_error_set(err, EM_ERR_FORMAT, "'%s': %llu bytes after the tensor data that no "
                      "tensor covers", f->path, (unsigned long long)(data_len - pos));
    goto out;
  }
  for (int i = 0; i < f->n; i++) f->by_name[i] = &f->e[i];
  qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
out:
  json_decref(root);
  return st;
}

em_safetensors *em_safetensors_open(const char *path, em_error *err) {
  if (!path) {
    em_error_set(err, EM_ERR_INVALID, "safetensors: no file name given");
    return NULL;
  }
  em_safetensors *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    em_error_set(err, EM_ERR_NOMEM, "out of memory");
    return NULL;
  }
  f->fd = em_open_read(path, true); /* read at offsets: a regular file */
  em_status st = EM_OK;
  char *text = NULL;
  struct stat sb;
  if (f->fd < 0) {
    st = em_error_set(err, EM_ERR_IO, "cannot open '%s': %s", path, em_open_error(errno));
    goto out;
  }
  if (fstat(f->fd, &sb) != 0) {
    st = em_error_set(err, EM_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    goto out;
  }
  uint64_t size = (uint64_t)sb.st_size;
  uint8_t len8[8];
  size_t got;
  if (!read_at(f->fd, len8, 8, 0, &got)) {
    st = em_error_set(err, EM_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    goto out;
  }
  if (got < 8) {
    st = em_error_set(err, EM_ERR_FORMAT, "'%s' is truncated: %zu bytes, less than the 8-byte "
                      "header length of a safetensors file", path, got);
    goto out;
  }
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
  if (hlen < 2 || hlen > EM_ST_MAX_HEADER) {
    st = em_error_set(err, EM_ERR_FORMAT, "'%s' is not a safetensors file: header length %llu "
                      "is not between 2 and %llu", path, (unsigned long long)hlen,
                      (unsigned long long)EM_ST_MAX_HEADER);
    goto out;
  }
  if (hlen > size - 8) {
    st = em_error_set(err, EM_ERR_FORMAT, "'%s' is truncated or not a safetensors file: header "
                      "length %llu, but only %llu bytes follow", path, (unsigned long long)hlen,
                      (unsigned long long)(size - 8));
    goto out;
  }
  text = malloc(hlen);
  if (!text) {
    st = em_error_set(err, EM_ERR_NOMEM, "out of memory");
    goto out;
  }
  if (!read_at(f->fd, text, hlen, 8, &got) || got < hlen) {
    st = em_error_set(err, EM_ERR_IO, "cannot read the header of '%s'", path);
    goto out;
  }
  if (text[0] != '{') {
    st = em_error_set(err, EM_ERR_FORMAT, "'%s' is not a safetensors file: the header does not "
                      "start with '{'", path);
    goto out;
  }
  f->data_start = 8 + hlen;
  st = parse_header(f, text, hlen, size - f->data_start, err);
out:
  free(text);
  if (st != EM_OK) {
    em_safetensors_close(f);
    return NULL;
  }
  return f;
}

int em_safetensors_count(const em_safetensors *f) { return f->n; }

const char *em_safetensors_name(const em_safetensors *f, int i) {
  return i >= 0 && i < f->n ? f->e[i].name : NULL;
}

static const st_entry *find(const em_safetensors *f, const char *name) {
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const st_entry *e = f->by_name[mid];
    int c = strcmp(name, e->name);
    if (c == 0) return e;
    if (c < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return NULL;
}

static em_status lookup(const em_safetensors *f, const char *name, const st_entry **out,
                        em_error *err) {
  *out = name ? find(f, name) : NULL;
  if (!*out)
    return em_error_set(err, EM_ERR_INVALID, "'%s' has no tensor named '%.200s'", f->path,
                        name ? name : "(null)");
  if ((*out)->dt->dtype < 0)
    return em_error_set(err, EM_ERR_UNSUPPORTED, "'%s': tensor '%.200s' is %s; Ember reads F32, "
                        "F64, I32, I64 and U8", f->path, name, (*out)->dt->name);
  return EM_OK;
}

em_status em_safetensors_info(const em_safetensors *f, const char *name, em_dtype *dt, int *ndim,
                              int64_t *shape, em_error *err) {
  const st_entry *e;
  em_status st = lookup(f, name, &e, err);
  if (st != EM_OK) return st;
  if (dt) *dt = (em_dtype)e->dt->dtype;
  if (ndim) *ndim = e->ndim;
  if (shape) memcpy(shape, e->shape, sizeof(int64_t) * (size_t)e->ndim);
  return EM_OK;
}

em_status em_safetensors_read(const em_safetensors *f, const char *name, em_tensor *dst,
                              em_error *err) {
  const st_entry *e;
  em_status st = lookup(f, name, &e, err);
  if (st != EM_OK) return st;
  bool same = dst->dtype == (em_dtype)e->dt->dtype && dst->ndim == e->ndim;
  for (int i = 0; same && i < e->ndim; i++) same = dst->shape[i] == e->shape[i];
  if (!same) {
    char a[160], b[160];
    return em_error_set(err, EM_ERR_SHAPE, "'%s': tensor '%.200s' is %s %s in the file, but the "
                        "destination is %s %s", f->path, name,
                        em_shape_str(e->ndim, e->shape, a, sizeof a),
                        em_dtype_name((em_dtype)e->dt->dtype),
                        em_shape_str(dst->ndim, dst->shape, b, sizeof b),
                        em_dtype_name(dst->dtype));
  }
  size_t nbytes = (size_t)(e->end - e->begin);
  if (nbytes == 0) return EM_OK;
  bool contiguous = em_tensor_is_contiguous(dst);
  void *buf = contiguous ? em_tensor_ptr(dst) : malloc(nbytes);
  if (!buf)
    return em_error_set(err, EM_ERR_NOMEM, "out of memory reading tensor '%.200s'", name);
  size_t got;
  if (!read_at(f->fd, buf, nbytes, f->data_start + e->begin, &got)) {
    st = em_error_set(err, EM_ERR_IO, "'%s': cannot read the data of tensor '%.200s': %s",
                      f->path, name, strerror(errno));
  } else if (got < nbytes) {
    st = em_error_set(err, EM_ERR_FORMAT, "'%s': the data of tensor '%.200s' ends early (the "
                      "file was truncated after it was opened)", f->path, name);
  } else if (!contiguous) {
    em_tensor c = {.dtype = dst->dtype, .ndim = dst->ndim, .data = buf};
    memcpy(c.shape, dst->shape, sizeof(int64_t) * (size_t)dst->ndim);
    int64_t s = 1;
    for (int i = dst->ndim - 1; i >= 0; i--) {
      c.stride[i] = s;
      s *= dst->shape[i];
    }
    em_tensor_copy_(dst, &c);
  }
  if (!contiguous) free(buf);
  return st;
}

const char *em_safetensors_meta(const em_safetensors *f, const char *key) {
  for (int i = 0; key && i < f->n_meta; i++)
    if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
  return NULL;
}

int em_safetensors_meta_count(const em_safetensors *f) { return f->n_meta; }

const char *em_safetensors_meta_key(const em_safetensors *f, int i) {
  return i >= 0 && i < f->n_meta ? f->meta_keys[i] : NULL;
}
