/* test-safetensors.c: safetensors round trips of every dtype, exchange
 * with PyTorch through tests/common/safetensors_io.py, atomic saving, and
 * truncated or corrupt files rejected with clear messages. */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data-test-util.h"
#include "em-io.h"

/* The reference tensors: the same formulas as REF_PY below. */
#define N_REF 7
static const char *const ref_names[N_REF] = {"f32", "f64", "i32", "i64", "u8", "scalar", "empty"};
static const em_dtype ref_dtypes[N_REF] = {EM_DTYPE_F32, EM_DTYPE_F64, EM_DTYPE_I32, EM_DTYPE_I64,
                                           EM_DTYPE_U8,  EM_DTYPE_F32, EM_DTYPE_F32};
static const int ref_ndim[N_REF] = {2, 1, 2, 1, 3, 0, 2};
static const int64_t ref_shape[N_REF][3] = {{2, 3}, {4}, {3, 2}, {5}, {2, 2, 2}, {0}, {0, 3}};

static double ref_value(int t, int64_t i) {
  switch (t) {
  case 0: return i * 0.5 - 1;
  case 1: return i / 3.0;
  case 2: return i * 1000 - 7;
  case 3: return (double)(i * ((int64_t)1 << 40) - 3);
  case 4: return (i * 37) % 256;
  case 5: return 3.25;
  default: return 0;
  }
}

static em_tensor *ref_tensor(int t) {
  em_error err = {0};
  em_tensor *x = em_tensor_new(ref_dtypes[t], ref_ndim[t], ref_shape[t], &err);
  g_assert_nonnull(x);
  for (int64_t i = 0; i < em_tensor_numel(x); i++) {
    double v = ref_value(t, i);
    switch (x->dtype) {
    case EM_DTYPE_F32: em_f32(x)[i] = (float)v; break;
    case EM_DTYPE_F64: em_f64(x)[i] = v; break;
    case EM_DTYPE_I32: ((int32_t *)em_tensor_ptr(x))[i] = (int32_t)v; break;
    case EM_DTYPE_I64: em_i64(x)[i] = t == 3 ? i * ((int64_t)1 << 40) - 3 : (int64_t)v; break;
    case EM_DTYPE_U8: ((uint8_t *)em_tensor_ptr(x))[i] = (uint8_t)v; break;
    default: g_assert_not_reached();
    }
  }
  return x;
}

static void assert_ref(const em_safetensors *f, int t) {
  em_error err = {0};
  em_dtype dt;
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  g_assert_cmpint(em_safetensors_info(f, ref_names[t], &dt, &ndim, shape, &err), ==, EM_OK);
  g_assert_cmpint(dt, ==, ref_dtypes[t]);
  g_assert_cmpint(ndim, ==, ref_ndim[t]);
  for (int d = 0; d < ndim; d++) g_assert_cmpint(shape[d], ==, ref_shape[t][d]);
  em_tensor *x = em_tensor_new(dt, ndim, shape, &err);
  em_tensor_fill_(x, 99);
  g_assert_cmpint(em_safetensors_read(f, ref_names[t], x, &err), ==, EM_OK);
  em_tensor *want = ref_tensor(t);
  g_assert_cmpmem(em_tensor_ptr(x), em_tensor_nbytes(x), em_tensor_ptr(want),
                  em_tensor_nbytes(want));
  em_tensor_free(x);
  em_tensor_free(want);
}

static char *save_refs(const char *dir, const char *name) {
  em_tensor *ts[N_REF];
  em_named_tensor nt[N_REF];
  for (int t = 0; t < N_REF; t++) {
    ts[t] = ref_tensor(t);
    nt[t] = (em_named_tensor){ref_names[t], ts[t]};
  }
  char *path = g_build_filename(dir, name, NULL);
  const char *keys[2] = {"epoch", "note"}, *values[2] = {"3", "caf\xc3\xa9 \"quoted\""};
  em_error err = {0};
  g_assert_cmpint(em_safetensors_save(path, N_REF, nt, 2, keys, values, &err), ==, EM_OK);
  for (int t = 0; t < N_REF; t++) em_tensor_free(ts[t]);
  return path;
}

static int count_files(const char *dir) {
  GDir *d = g_dir_open(dir, 0, NULL);
  int n = 0;
  while (g_dir_read_name(d)) n++;
  g_dir_close(d);
  return n;
}

static void test_round_trip(void) {
  char *dir = dt_tmpdir();
  char *path = save_refs(dir, "ref.safetensors");
  g_assert_cmpint(count_files(dir), ==, 1); /* no temporary file left behind */
  em_error err = {0};
  em_safetensors *f = em_safetensors_open(path, &err);
  g_assert_nonnull(f);
  g_assert_cmpint(em_safetensors_count(f), ==, N_REF);
  for (int t = 0; t < N_REF; t++) {
    assert_ref(f, t);
    /* Names come in data order: the order saved. */
    if (t != 5 && t != 6) g_assert_cmpstr(em_safetensors_name(f, t), ==, ref_names[t]);
  }
  g_assert_null(em_safetensors_name(f, N_REF));
  g_assert_cmpstr(em_safetensors_meta(f, "epoch"), ==, "3");
  g_assert_cmpstr(em_safetensors_meta(f, "note"), ==, "caf\xc3\xa9 \"quoted\"");
  g_assert_null(em_safetensors_meta(f, "missing"));
  g_assert_cmpint(em_safetensors_meta_count(f), ==, 2);

  /* Mismatches name the tensor and both shapes. */
  int64_t wrong[2] = {3, 2};
  em_tensor *w = em_tensor_new(EM_DTYPE_F32, 2, wrong, &err);
  g_assert_cmpint(em_safetensors_read(f, "f32", w, &err), ==, EM_ERR_SHAPE);
  dt_assert_msg(err.msg, "'f32'", "[2, 3] f32", "[3, 2] f32", NULL);
  em_tensor_free(w);
  w = em_tensor_new(EM_DTYPE_F64, 2, ref_shape[0], &err);
  g_assert_cmpint(em_safetensors_read(f, "f32", w, &err), ==, EM_ERR_SHAPE);
  dt_assert_msg(err.msg, "[2, 3] f32", "[2, 3] f64", NULL);
  g_assert_cmpint(em_safetensors_read(f, "nope", w, &err), ==, EM_ERR_INVALID);
  dt_assert_msg(err.msg, path, "no tensor named 'nope'", NULL);
  em_tensor_free(w);

  /* Reading into a strided destination (a transposed view). */
  em_scope *s = em_scope_begin();
  em_tensor *base = em_tensor_new(EM_DTYPE_F32, 2, (int64_t[]){3, 2}, &err);
  em_tensor *view = em_view_raw(base, 2, (int64_t[]){2, 3}, (int64_t[]){1, 2}, 0);
  g_assert_cmpint(em_safetensors_read(f, "f32", view, &err), ==, EM_OK);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      g_assert_cmpfloat(em_f32(base)[j * 2 + i], ==, (float)ref_value(0, i * 3 + j));
  /* ... and saving from one: the view's row-major values are written. */
  em_named_tensor nt = {"t", view};
  char *p2 = g_build_filename(dir, "view.safetensors", NULL);
  g_assert_cmpint(em_safetensors_save(p2, 1, &nt, 0, NULL, NULL, &err), ==, EM_OK);
  em_safetensors *g = em_safetensors_open(p2, &err);
  g_assert_nonnull(g);
  em_tensor *back = em_tensor_new(EM_DTYPE_F32, 2, ref_shape[0], &err);
  g_assert_cmpint(em_safetensors_read(g, "t", back, &err), ==, EM_OK);
  for (int i = 0; i < 6; i++) g_assert_cmpfloat(em_f32(back)[i], ==, (float)ref_value(0, i));
  em_tensor_free(back);
  em_safetensors_close(g);
  em_tensor_free(base);
  em_scope_end(s);
  em_safetensors_close(f);

  /* Overwriting keeps it atomic: still one file each, new contents. */
  em_tensor *one = ref_tensor(5);
  nt = (em_named_tensor){"only", one};
  g_assert_cmpint(em_safetensors_save(path, 1, &nt, 0, NULL, NULL, &err), ==, EM_OK);
  g_assert_cmpint(count_files(dir), ==, 2);
  f = em_safetensors_open(path, &err);
  g_assert_cmpint(em_safetensors_count(f), ==, 1);
  g_assert_cmpint(em_safetensors_meta_count(f), ==, 0);
  em_safetensors_close(f);

  /* Bad requests fail before touching the disk. */
  em_named_tensor dup[2] = {{"a", one}, {"a", one}};
  g_assert_cmpint(em_safetensors_save(path, 2, dup, 0, NULL, NULL, &err), ==, EM_ERR_INVALID);
  dt_assert_msg(err.msg, "two tensors are named 'a'", NULL);
  dup[1].name = "__metadata__";
  g_assert_cmpint(em_safetensors_save(path, 2, dup, 0, NULL, NULL, &err), ==, EM_ERR_INVALID);
  char *nodir = g_build_filename(dir, "missing", "x.safetensors", NULL);
  g_assert_cmpint(em_safetensors_save(nodir, 1, &nt, 0, NULL, NULL, &err), ==, EM_ERR_IO);
  dt_assert_msg(err.msg, nodir, "temporary", NULL);
  g_assert_cmpint(count_files(dir), ==, 2);
  g_free(nodir);
  em_tensor_free(one);
  g_free(p2);
  g_free(path);
  dt_tmpdir_free(dir);
}

/* A file from a header string and data bytes (header padded as given). */
static char *write_raw(const char *dir, const char *header, const void *data, size_t n) {
  size_t hl = strlen(header);
  GByteArray *b = g_byte_array_new();
  guint8 len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (guint8)((uint64_t)hl >> (8 * i));
  g_byte_array_append(b, len8, 8);
  g_byte_array_append(b, (const guint8 *)header, (guint)hl);
  if (n) g_byte_array_append(b, data, (guint)n);
  char *p = dt_write(dir, "raw.safetensors", b->data, b->len, false);
  g_byte_array_unref(b);
  return p;
}

static void expect_bad(const char *dir, const char *header, size_t data_len, em_status want,
                       const char *needle) {
  guint8 data[64] = {0};
  char *p = write_raw(dir, header, data, data_len);
  em_error err = {0};
  em_safetensors *f = em_safetensors_open(p, &err);
  if (f) g_error("opened a bad file: %s", header);
  g_assert_cmpint(err.status, ==, want);
  dt_assert_msg(err.msg, p, needle, NULL);
  g_free(p);
}

static void test_corrupt(void) {
  char *dir = dt_tmpdir();
  char *path = save_refs(dir, "ref.safetensors");
  size_t n;
  guint8 *good = dt_read(path, &n);
  em_error err = {0};
  /* Every truncation is rejected. */
  for (size_t len = 0; len < n; len++) {
    char *p = dt_write(dir, "cut.safetensors", good, len, false);
    em_safetensors *f = em_safetensors_open(p, &err);
    g_assert_null(f);
    g_assert_cmpint(err.status, ==, EM_ERR_FORMAT);
    dt_assert_msg(err.msg, p, NULL);
    if (len < 8) dt_assert_msg(err.msg, "truncated", "8-byte", NULL);
    else if (len == n - 1) dt_assert_msg(err.msg, "truncated", "the header describes", NULL);
    g_free(p);
  }
  /* Extra bytes at the end. */
  GByteArray *longer = g_byte_array_new();
  g_byte_array_append(longer, good, (guint)n);
  g_byte_array_append(longer, (const guint8 *)"junk", 4);
  char *p = dt_write(dir, "long.safetensors", longer->data, longer->len, false);
  g_assert_null(em_safetensors_open(p, &err));
  dt_assert_msg(err.msg, "4 bytes after the tensor data", NULL);
  g_free(p);
  g_byte_array_unref(longer);

  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", 8,
             EM_ERR_FORMAT, "not valid JSON");
  expect_bad(dir, "[1, 2]", 0, EM_ERR_FORMAT, "does not start with '{'");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
             EM_ERR_FORMAT, "not valid JSON");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
             EM_ERR_FORMAT, "unknown dtype 'F33'");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
             EM_ERR_FORMAT, "needs 12 bytes");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
             EM_ERR_FORMAT, "non-negative");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
             EM_ERR_FORMAT, "0 <= begin <= end");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
             EM_ERR_FORMAT, "unknown field 'x'");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
             EM_ERR_FORMAT, "overlap");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
             EM_ERR_FORMAT, "hole of 4 bytes");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
             EM_ERR_FORMAT, "truncated");
  expect_bad(dir, "{\"__metadata__\":{\"k\":3}}", 0, EM_ERR_FORMAT, "metadata 'k' is not a string");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":"
             "[0,4]}}", 4, EM_ERR_UNSUPPORTED, "9 dimensions");
  expect_bad(dir, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
             "\"data_offsets\":[0,4]}}", 4, EM_ERR_FORMAT, "absurd");

  /* Too many entries or JSON items: refused before the JSON tree is built
   * (1.75 million empty tensors in a 100 MiB header took 2 GB and 30 s).
   * 65536 entries are read; one more is refused. */
  for (int extra = 0; extra <= 1; extra++) {
    GString *h = g_string_new("{");
    for (int i = 0; i < 65536 + extra; i++)
      g_string_append_printf(h, "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],"
                             "\"data_offsets\":[0,0]}", i ? "," : "", i);
    g_string_append(h, "}");
    gint64 t0 = g_get_monotonic_time();
    if (extra) {
      expect_bad(dir, h->str, 0, EM_ERR_FORMAT, "lists 65537 entries; at most 65536");
      g_assert_cmpint(g_get_monotonic_time() - t0, <, G_USEC_PER_SEC / 2);
    } else {
      p = write_raw(dir, h->str, NULL, 0);
      em_safetensors *f = em_safetensors_open(p, &err);
      g_assert_nonnull(f);
      g_assert_cmpint(em_safetensors_count(f), ==, 65536);
      em_safetensors_close(f);
      g_free(p);
    }
    g_string_free(h, TRUE);
  }
  GString *h = g_string_new("{\"a\":{\"dtype\":\"F32\",\"shape\":[0");
  for (int i = 0; i < (1 << 20); i++) g_string_append(h, ",0");
  g_string_append(h, "],\"data_offsets\":[0,0]}}");
  expect_bad(dir, h->str, 0, EM_ERR_FORMAT, "JSON keys and values; at most 1048576");
  g_string_free(h, TRUE);

  /* A header length far beyond the file. */
  guint8 huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
  p = dt_write(dir, "huge.safetensors", huge, 10, false);
  g_assert_null(em_safetensors_open(p, &err));
  dt_assert_msg(err.msg, p, "header length", NULL);
  g_free(p);
  huge[0] = 100;
  huge[7] = 0;
  for (int i = 1; i < 7; i++) huge[i] = 0;
  p = dt_write(dir, "huge.safetensors", huge, 10, false);
  g_assert_null(em_safetensors_open(p, &err));
  dt_assert_msg(err.msg, p, "header length 100", "only 2 bytes follow", NULL);
  g_free(p);

  /* Dtypes Ember does not compute with open, and say so per tensor. */
  p = write_raw(dir, "{\"h\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                "\"u\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}  ", "abcdef", 6);
  em_safetensors *f = em_safetensors_open(p, &err);
  g_assert_nonnull(f);
  g_assert_cmpint(em_safetensors_count(f), ==, 2);
  g_assert_cmpint(em_safetensors_info(f, "h", NULL, NULL, NULL, &err), ==, EM_ERR_UNSUPPORTED);
  dt_assert_msg(err.msg, "'h' is BF16", NULL);
  g_assert_cmpint(em_safetensors_info(f, "u", NULL, NULL, NULL, &err), ==, EM_OK);
  em_safetensors_close(f);
  g_free(p);

  g_assert_null(em_safetensors_open("/nonexistent-ember/x.safetensors", &err));
  g_assert_cmpint(err.status, ==, EM_ERR_IO);
  dt_assert_msg(err.msg, "/nonexistent-ember/x.safetensors", "No such file", NULL);
  g_assert_null(em_safetensors_open(dir, &err));
  dt_assert_msg(err.msg, "not a regular file", NULL);

  /* Random corruption: an error or a file, never a crash. */
  GRand *r = g_rand_new_with_seed(11);
  int opened = 0;
  for (int it = 0; it < 400; it++) {
    guint8 *b = g_memdup2(good, n);
    int flips = g_rand_int_range(r, 1, 4);
    for (int k = 0; k < flips; k++) {
      size_t at = (size_t)g_rand_int_range(r, 0, (gint32)(n < 300 ? n : 300));
      b[at] = (guint8)g_rand_int_range(r, 0, 256);
    }
    p = dt_write(dir, "fuzz.safetensors", b, n, false);
    f = em_safetensors_open(p, &err);
    if (f) {
      opened++;
      for (int i = 0; i < em_safetensors_count(f); i++) {
        em_dtype dt;
        int nd;
        int64_t shape[EM_MAX_DIMS];
        const char *name = em_safetensors_name(f, i);
        if (em_safetensors_info(f, name, &dt, &nd, shape, &err) != EM_OK) continue;
        em_tensor *t = em_tensor_new(dt, nd, shape, &err);
        if (t) em_safetensors_read(f, name, t, &err);
        em_tensor_free(t);
      }
      em_safetensors_close(f);
    } else {
      g_assert_cmpint(err.status, !=, EM_OK);
    }
    g_free(p);
    g_free(b);
  }
  g_test_message("%d of 400 corrupted files still opened (changed values only)", opened);
  g_rand_free(r);
  g_free(good);
  g_free(path);
  dt_tmpdir_free(dir);
}

/* The reference tensors in Python; checks C's file and writes its own. */
static const char REF_PY[] =
  "import sys, torch\n"
  "sys.path.insert(0, sys.argv[1])\n"
  "import safetensors_io as st\n"
  "def ref():\n"
  "    i = lambda n: torch.arange(n, dtype=torch.int64)\n"
  "    return {\n"
  "        'f32': (i(6).double() * 0.5 - 1).float().reshape(2, 3),\n"
  "        'f64': i(4).double() / 3.0,\n"
  "        'i32': (i(6) * 1000 - 7).int().reshape(3, 2),\n"
  "        'i64': i(5) * (1 << 40) - 3,\n"
  "        'u8': ((i(8) * 37) % 256).to(torch.uint8).reshape(2, 2, 2),\n"
  "        'scalar': torch.tensor(3.25, dtype=torch.float32),\n"
  "        'empty': torch.zeros(0, 3, dtype=torch.float32),\n"
  "    }\n"
  "got, meta = st.load(sys.argv[2], with_metadata=True)\n"
  "want = ref()\n"
  "assert list(got) == list(want), (list(got), list(want))\n"
  "for k in want:\n"
  "    assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k\n"
  "    assert torch.equal(got[k], want[k]), (k, got[k], want[k])\n"
  "assert meta == {'epoch': '3', 'note': 'caf\\u00e9 \"quoted\"'}, meta\n"
  "out = dict(reversed(list(want.items())))\n"
  "out['bf16'] = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)\n"
  "out['strided'] = torch.arange(6, dtype=torch.float64).reshape(2, 3).t()\n"
  "st.save(sys.argv[3], out, metadata={'framework': 'torch'})\n"
  "print('ok')\n";

static void test_torch_exchange(void) {
  if (!dt_have_torch()) {
    g_test_skip("/usr/bin/python3 cannot import torch");
    return;
  }
  const char *root = g_getenv("EMBER_SOURCE_ROOT");
  if (!root) {
    g_test_skip("EMBER_SOURCE_ROOT is not set");
    return;
  }
  char *dir = dt_tmpdir();
  char *cpath = save_refs(dir, "from-c.safetensors");
  char *pypath = g_build_filename(dir, "from-torch.safetensors", NULL);
  char *common = g_build_filename(root, "tests", "common", NULL);
  char *argv[] = {"/usr/bin/python3", "-c", (char *)REF_PY, common, cpath, pypath, NULL};
  char *out = NULL, *errout = NULL;
  int status = 1;
  GError *e = NULL;
  g_assert_true(g_spawn_sync(NULL, argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &errout,
                             &status, &e));
  g_assert_no_error(e);
  if (!g_spawn_check_wait_status(status, NULL)) g_error("python failed:\n%s%s", out, errout);
  g_assert_cmpstr(out, ==, "ok\n");

  /* The file PyTorch wrote, read by C. */
  em_error err = {0};
  em_safetensors *f = em_safetensors_open(pypath, &err);
  if (!f) g_error("%s", err.msg);
  g_assert_cmpint(em_safetensors_count(f), ==, N_REF + 2);
  g_assert_cmpstr(em_safetensors_name(f, 0), ==, "empty"); /* data order: reversed */
  for (int t = 0; t < N_REF; t++) assert_ref(f, t);
  g_assert_cmpstr(em_safetensors_meta(f, "framework"), ==, "torch");
  g_assert_cmpint(em_safetensors_info(f, "bf16", NULL, NULL, NULL, &err), ==, EM_ERR_UNSUPPORTED);
  em_tensor *s = em_tensor_new(EM_DTYPE_F64, 2, (int64_t[]){3, 2}, &err);
  g_assert_cmpint(em_safetensors_read(f, "strided", s, &err), ==, EM_OK);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) g_assert_cmpfloat(em_f64(s)[i * 2 + j], ==, j * 3 + i);
  em_tensor_free(s);
  em_safetensors_close(f);
  g_assert_cmpint(count_files(dir), ==, 2); /* Python's save is atomic too */
  g_free(out);
  g_free(errout);
  g_free(common);
  g_free(pypath);
  g_free(cpath);
  dt_tmpdir_free(dir);
}

/* A saved file's mode is what open(O_CREAT, 0666) would give, as cp and
 * torch.save do: a new file 0666 less the umask, an existing one keeps
 * its own (it was always 0644, under umask 077 too). */
static unsigned mode_of(const char *path) {
  GStatBuf sb;
  g_assert_cmpint(g_stat(path, &sb), ==, 0);
  return (unsigned)(sb.st_mode & 07777);
}

static void test_mode(void) {
  char *dir = dt_tmpdir();
  em_error err = {0};
  em_tensor *one = ref_tensor(5);
  em_named_tensor nt = {"only", one};
  char *path = g_build_filename(dir, "m.safetensors", NULL);
  mode_t old = umask(077);
  g_assert_cmpint(em_safetensors_save(path, 1, &nt, 0, NULL, NULL, &err), ==, EM_OK);
  g_assert_cmpuint(mode_of(path), ==, 0600);
  umask(002);
  g_remove(path);
  g_assert_cmpint(em_safetensors_save(path, 1, &nt, 0, NULL, NULL, &err), ==, EM_OK);
  g_assert_cmpuint(mode_of(path), ==, 0664);
  /* An existing file keeps its mode, whatever the umask. */
  g_assert_cmpint(g_chmod(path, 0600), ==, 0);
  umask(022);
  g_assert_cmpint(em_safetensors_save(path, 1, &nt, 0, NULL, NULL, &err), ==, EM_OK);
  g_assert_cmpuint(mode_of(path), ==, 0600);
  g_assert_cmpint(g_chmod(path, 0640), ==, 0);
  g_assert_cmpint(em_safetensors_save(path, 1, &nt, 0, NULL, NULL, &err), ==, EM_OK);
  g_assert_cmpuint(mode_of(path), ==, 0640);
  /* Through a symlink: the file it names keeps its mode, a new one made
   * there follows the umask. */
  char *link = g_build_filename(dir, "l.safetensors", NULL);
  g_assert_cmpint(symlink("m.safetensors", link), ==, 0);
  g_assert_cmpint(em_safetensors_save(link, 1, &nt, 0, NULL, NULL, &err), ==, EM_OK);
  g_assert_cmpuint(mode_of(path), ==, 0640);
  g_remove(path);
  umask(027);
  g_assert_cmpint(em_safetensors_save(link, 1, &nt, 0, NULL, NULL, &err), ==, EM_OK);
  g_assert_cmpuint(mode_of(path), ==, 0640);
  umask(old);
  g_remove(link);
  g_free(link);
  g_free(path);
  em_tensor_free(one);
  dt_tmpdir_free(dir);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/engine/io/safetensors/round-trip", test_round_trip);
  g_test_add_func("/engine/io/safetensors/corrupt", test_corrupt);
  g_test_add_func("/engine/io/safetensors/torch-exchange", test_torch_exchange);
  g_test_add_func("/engine/io/safetensors/mode", test_mode);
  return g_test_run();
}
