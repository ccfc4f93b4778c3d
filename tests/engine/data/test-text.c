/* test-text.c: the tokenizers and the text dataset (engine/data/text.c,
 * text-tokenizer.c): byte and char round trips (UTF-8 of 1 to 4 bytes),
 * what a char tokenizer refuses and where, a folder read in name order
 * (hidden, binary, linked-twice files and subfolders left out), the
 * deterministic split, the windows and their next-token targets, the
 * loader's (N, T) labels, the kind's files for lineage, and the errors
 * (a missing folder, an empty file, non-text bytes, a context too long,
 * no tokenizer, no vocabulary), each with a message that says what. */
#include <glib.h>
#include <string.h>
#include <unistd.h>

#include "data-test-util.h"
#include "em-data.h"

static em_tokenizer *bytes_tok(void) {
  em_tokenizer *t = em_tokenizer_new(EM_TOKENIZER_BYTE, NULL, 0, NULL);
  g_assert_nonnull(t);
  return t;
}

static em_tokenizer *char_tok(const char *vocab) {
  em_error err = {0};
  em_tokenizer *t = em_tokenizer_new(EM_TOKENIZER_CHAR, vocab, strlen(vocab), &err);
  if (!t) g_error("%s", err.msg);
  return t;
}

/* text -> ids -> text gives the same bytes; returns the id count. */
static size_t round_trip(const em_tokenizer *t, const char *text, size_t n) {
  int32_t *ids = g_new(int32_t, n + 1);
  size_t k = 0;
  em_error err = {0};
  g_assert_cmpint(em_tokenizer_encode(t, text, n, "mem", ids, &k, &err), ==, EM_OK);
  GString *back = g_string_new(NULL);
  for (size_t i = 0; i < k; i++) {
    char b[4];
    int len = em_tokenizer_decode(t, ids[i], b);
    g_assert_cmpint(len, >=, 1);
    g_string_append_len(back, b, len);
  }
  g_assert_cmpuint(back->len, ==, n);
  g_assert_true(memcmp(back->str, text, n) == 0);
  g_string_free(back, TRUE);
  g_free(ids);
  return k;
}

static void test_byte_round_trip(void) {
  em_tokenizer *t = bytes_tok();
  g_assert_cmpint(em_tokenizer_vocab_size(t), ==, 256);
  g_assert_cmpstr(em_tokenizer_kind_name(em_tokenizer_kind_of(t)), ==, "byte");
  char all[256];
  for (int i = 0; i < 256; i++) all[i] = (char)i; /* NUL and non-UTF-8 included */
  g_assert_cmpuint(round_trip(t, all, sizeof all), ==, 256);
  char b[4];
  g_assert_cmpint(em_tokenizer_decode(t, 256, b), ==, 0);
  g_assert_cmpint(em_tokenizer_decode(t, -1, b), ==, 0);
  em_error err = {0};
  g_assert_null(em_tokenizer_new(EM_TOKENIZER_BYTE, "ab", 2, &err));
  g_assert_nonnull(strstr(err.msg, "no vocabulary"));
  em_tokenizer_free(t);
}

static void test_char_round_trip(void) {
  /* ids are places in the vocabulary; 1-, 2-, 3- and 4-byte characters */
  const char *vocab = "ba\n \xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e"; /* b a \n ' ' é € 𝄞 */
  em_tokenizer *t = char_tok(vocab);
  g_assert_cmpint(em_tokenizer_vocab_size(t), ==, 7);
  const char *text = "ab \xc3\xa9\n\xe2\x82\xac\xf0\x9d\x84\x9e" "ba";
  int32_t ids[32];
  size_t k = 0;
  em_error err = {0};
  g_assert_cmpint(em_tokenizer_encode(t, text, strlen(text), "mem", ids, &k, &err), ==, EM_OK);
  const int32_t want[] = {1, 0, 3, 4, 2, 5, 6, 0, 1};
  g_assert_cmpuint(k, ==, G_N_ELEMENTS(want));
  for (size_t i = 0; i < k; i++) g_assert_cmpint(ids[i], ==, want[i]);
  g_assert_cmpuint(round_trip(t, text, strlen(text)), ==, 9);
  em_tokenizer_free(t);
}

/* Encoding text that t refuses: EM_ERR_FORMAT and a message with all of want. */
static void expect_refused(const em_tokenizer *t, const char *text, size_t n, const char *want1,
                           const char *want2) {
  int32_t ids[64];
  size_t k = 7;
  em_error err = {0};
  g_assert_cmpint(em_tokenizer_encode(t, text, n, "notes.txt", ids, &k, &err), ==,
                  EM_ERR_FORMAT);
  g_assert_cmpuint(k, ==, 0);
  if (!strstr(err.msg, want1) || !strstr(err.msg, want2))
    g_error("expected '%s' and '%s' in: %s", want1, want2, err.msg);
}

static void test_char_refusals(void) {
  em_tokenizer *t = char_tok("abc\n\xc3\xa9");
  /* line 2, column 3 (columns in characters: é is one) */
  expect_refused(t, "abc\n\xc3\xa9" "ax", 8, "notes.txt:2:3:", "U+0078 'x' is not in");
  expect_refused(t, "ab\xff" "c", 4, "notes.txt:1:3:", "byte 0xff is not UTF-8");
  expect_refused(t, "a\xc3", 2, "notes.txt:1:2:", "not UTF-8");     /* cut short */
  expect_refused(t, "a\xc0\x80", 3, "notes.txt:1:2:", "not UTF-8"); /* overlong NUL */
  expect_refused(t, "a\xed\xa0\x80", 4, ":1:2:", "not UTF-8");      /* a surrogate */
  expect_refused(t, "ab\0c", 4, "notes.txt:1:3:", "NUL byte");
  em_tokenizer_free(t);
  em_error err = {0};
  g_assert_null(em_tokenizer_new(EM_TOKENIZER_CHAR, "abca", 4, &err));
  g_assert_cmpint(err.status, ==, EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "U+0061 'a' twice"));
  g_assert_null(em_tokenizer_new(EM_TOKENIZER_CHAR, "a\xfe", 2, &err));
  g_assert_nonnull(strstr(err.msg, "vocabulary:1:2: byte 0xfe"));
  g_assert_null(em_tokenizer_new(EM_TOKENIZER_CHAR, "", 0, &err));
  g_assert_nonnull(strstr(err.msg, "empty"));
  /* no vocabulary yet: size 0, encodes nothing */
  t = em_tokenizer_new(EM_TOKENIZER_CHAR, NULL, 0, &err);
  g_assert_nonnull(t);
  g_assert_cmpint(em_tokenizer_vocab_size(t), ==, 0);
  int32_t ids[4];
  size_t k;
  g_assert_cmpint(em_tokenizer_encode(t, "a", 1, "x", ids, &k, &err), ==, EM_ERR_INVALID);
  em_tokenizer_free(t);
}

/* A folder: b.txt and a.txt (read a then b), a hidden file, a binary
 * index, a second name for a.txt, and a subfolder: only a and b count. */
static char *make_folder(const char *a, const char *b) {
  char *dir = dt_tmpdir();
  g_free(dt_write(dir, "b.txt", b, strlen(b), false));
  g_free(dt_write(dir, "a.txt", a, strlen(a), false));
  g_free(dt_write(dir, ".hidden", "zzzz", 4, false));
  g_free(dt_write(dir, "a.dat", "\0\0\0\2idx", 8, false));
  char *link = g_build_filename(dir, "a.u8", NULL);
  g_assert_cmpint(symlink("a.txt", link), ==, 0);
  g_free(link);
  char *sub = g_build_filename(dir, "sub", NULL);
  g_assert_cmpint(g_mkdir(sub, 0755), ==, 0);
  g_free(sub);
  return dir;
}

static void free_folder(char *dir) {
  char *sub = g_build_filename(dir, "sub", NULL);
  g_rmdir(sub);
  g_free(sub);
  dt_tmpdir_free(dir);
}

/* Every window of ds: x = text[i L ..], y = text[i L + 1 ..] (byte ids). */
static void check_windows(const em_dataset *ds, const char *text, int64_t L) {
  float x[64];
  int64_t y[64];
  em_error err = {0};
  for (int64_t i = 0; i < em_dataset_len(ds); i++) {
    g_assert_cmpint(em_dataset_get(ds, i, x, y, &err), ==, EM_OK);
    for (int64_t j = 0; j < L; j++) {
      g_assert_cmpfloat(x[j], ==, (float)(uint8_t)text[i * L + j]);
      g_assert_cmpint(y[j], ==, (uint8_t)text[i * L + j + 1]);
    }
  }
}

static void test_folder_split_windows(void) {
  /* training the first 90% of the bytes (a, then b), validation the rest */
  const char *a = "The quick brown fox jumps over the lazy.";
  const char *b = "Pack my box with five dozen liquor jugs, then sphinx of black quartz: judge";
  char text[256];
  snprintf(text, sizeof text, "%s%s", a, b);
  size_t n = strlen(text);
  char *dir = make_folder(a, b);
  em_tokenizer *t = bytes_tok();
  em_error err = {0};
  const int64_t L = 8;
  em_dataset *tr = em_dataset_text(dir, t, L, true, &err);
  if (!tr) g_error("%s", err.msg);
  em_dataset *va = em_dataset_text(dir, t, L, false, &err);
  g_assert_nonnull(va);
  int64_t n_val = (int64_t)n * EM_TEXT_VALIDATION_PERCENT / 100, n_tr = (int64_t)n - n_val;
  g_assert_cmpint(em_dataset_len(tr), ==, (n_tr - 1) / L);
  g_assert_cmpint(em_dataset_len(va), ==, (n_val - 1) / L);
  g_assert_cmpint(em_dataset_num_classes(tr), ==, 256);
  g_assert_cmpint(em_dataset_target_len(tr), ==, L);
  g_assert_cmpint(em_dataset_labels_per_sample(tr), ==, L);
  g_assert_true(em_dataset_token_samples(tr));
  int64_t shape[4];
  g_assert_cmpint(em_dataset_sample_shape(tr, shape), ==, 1);
  g_assert_cmpint(shape[0], ==, L);
  check_windows(tr, text, L);
  check_windows(va, text + n_tr, L);
  float mean = 0, sd = 1;
  g_assert_cmpint(em_dataset_set_normalize(tr, 1, &mean, &sd, &err), ==, EM_ERR_INVALID);

  /* the loader: y is (N, T), sample by sample */
  em_loader_config c;
  em_loader_config_defaults(&c);
  c.batch_size = 4;
  c.shuffle = false;
  c.workers = 2;
  em_loader *ld = em_loader_new(tr, &c, &err);
  g_assert_nonnull(ld);
  em_batch bt;
  int64_t seen = 0;
  while (em_loader_next(ld, &bt, &err)) {
    for (int64_t i = 0; i < bt.n; i++)
      for (int64_t j = 0; j < L; j++) {
        int64_t at = (seen + i) * L + j;
        g_assert_cmpfloat(bt.x[i * L + j], ==, (float)(uint8_t)text[at]);
        g_assert_cmpint(bt.y[i * L + j], ==, (uint8_t)text[at + 1]);
      }
    seen += bt.n;
  }
  g_assert_cmpint(err.status, ==, EM_OK);
  g_assert_cmpint(seen, ==, em_dataset_len(tr));
  em_loader_free(ld);

  /* the kind: files for lineage (a and b, once, for the training split) */
  char(*paths)[1024] = g_malloc(8 * sizeof *paths);
  int k = -1;
  g_assert_cmpint(em_dataset_files_named("text", dir, true, paths, 8, &k, &err), ==, EM_OK);
  g_assert_cmpint(k, ==, 2);
  g_assert_true(g_str_has_suffix(paths[0], "/a.txt") && g_str_has_suffix(paths[1], "/b.txt"));
  g_assert_cmpint(em_dataset_files_named("text", dir, false, paths, 8, &k, &err), ==, EM_OK);
  g_assert_cmpint(k, ==, 0);
  g_assert_cmpint(em_dataset_files_named("text", dir, true, paths, 1, &k, &err), ==,
                  EM_ERR_INVALID);
  g_assert_nonnull(strstr(err.msg, "room was given for 1"));
  g_free(paths);
  /* the kind opened for a model: its tokenizer and its input [L] */
  int64_t in[1] = {L};
  em_dataset_want want = {in, 1, 256, t};
  em_dataset *kd = em_dataset_open_want("text", dir, true, &want, &err);
  g_assert_nonnull(kd);
  g_assert_cmpint(em_dataset_len(kd), ==, em_dataset_len(tr));
  check_windows(kd, text, L);
  em_dataset_free(kd);
  em_dataset_free(tr);
  em_dataset_free(va);
  em_tokenizer_free(t);
  free_folder(dir);
}

/* A file with non-ASCII text through the char tokenizer: the same split
 * in tokens (characters), not bytes. */
static void test_char_file(void) {
  GString *s = g_string_new(NULL);
  for (int i = 0; i < 30; i++) g_string_append(s, i % 3 ? "ab" : "\xc3\xa9\n");
  char *dir = dt_tmpdir();
  char *path = dt_write(dir, "t.txt", s->str, s->len, false);
  em_tokenizer *t = char_tok("\nab\xc3\xa9");
  em_error err = {0};
  em_dataset *tr = em_dataset_text(path, t, 4, true, &err);
  if (!tr) g_error("%s", err.msg);
  g_assert_cmpint(em_dataset_num_classes(tr), ==, 4);
  /* 60 characters: 54 train, 6 validation */
  g_assert_cmpint(em_dataset_len(tr), ==, (54 - 1) / 4);
  float x[4];
  int64_t y[4];
  g_assert_cmpint(em_dataset_get(tr, 0, x, y, &err), ==, EM_OK);
  g_assert_cmpfloat(x[0], ==, 3); /* é */
  g_assert_cmpfloat(x[1], ==, 0); /* \n */
  g_assert_cmpint(y[0], ==, 0);
  g_assert_cmpint(y[1], ==, 1); /* a */
  em_dataset_free(tr);
  em_tokenizer_free(t);
  g_string_free(s, TRUE);
  g_free(path);
  dt_tmpdir_free(dir);
}

/* open fails with status st and a message holding want1 and want2. */
static void expect_open_error(const char *path, const em_tokenizer *t, int64_t L, bool train,
                              em_status st, const char *want1, const char *want2) {
  em_error err = {0};
  g_assert_null(em_dataset_text(path, t, L, train, &err));
  g_assert_cmpint(err.status, ==, st);
  if (!strstr(err.msg, want1) || (want2 && !strstr(err.msg, want2)))
    g_error("expected '%s' and '%s' in: %s", want1, want2 ? want2 : "", err.msg);
}

static void test_errors(void) {
  em_tokenizer *b = bytes_tok(), *c = char_tok("ab\n");
  expect_open_error("/nonexistent/ember-text", b, 4, true, EM_ERR_IO, "/nonexistent/ember-text",
                    "cannot open");
  char *dir = dt_tmpdir();
  char *empty = dt_write(dir, "empty.txt", "", 0, false);
  expect_open_error(empty, b, 4, true, EM_ERR_INVALID, "empty.txt' is empty", NULL);
  /* a folder of nothing but an empty file: too short, not "no files" */
  expect_open_error(dir, b, 4, true, EM_ERR_INVALID, "holds 0 tokens", "context 4");
  g_free(empty);
  char *bin = dt_write(dir, "empty.txt", "ab\nab\x80zz", 8, false);
  expect_open_error(bin, c, 4, true, EM_ERR_FORMAT, "empty.txt:2:3: byte 0x80 is not UTF-8",
                    NULL);
  g_free(bin);
  char *bad = dt_write(dir, "empty.txt", "ab\nabz", 6, false);
  expect_open_error(bad, c, 2, true, EM_ERR_FORMAT, "empty.txt:2:3: U+007A 'z' is not in",
                    NULL);
  g_free(bad);
  char *nul = dt_write(dir, "empty.txt", "ab\0ab", 5, false);
  expect_open_error(nul, c, 2, true, EM_ERR_FORMAT, "empty.txt:1:3: a NUL byte", NULL);
  expect_open_error(dir, b, 2, true, EM_ERR_INVALID, "holds no text files", dir); /* binary */
  g_free(nul);
  char *shortt = dt_write(dir, "empty.txt", "abababababab", 12, false);
  expect_open_error(shortt, b, 16, true, EM_ERR_INVALID, "training split", "needs 17");
  expect_open_error(shortt, b, 2, false, EM_ERR_INVALID, "validation split of", "holds 1 tokens");
  g_free(shortt);
  /* the kind: a model's input that is not one sequence; no tokenizer;
   * no vocabulary (the text's characters, to paste) */
  int64_t in2[2] = {2, 2}, in1[1] = {2};
  em_error err = {0};
  em_dataset_want w2 = {in2, 2, 3, b};
  g_assert_null(em_dataset_open_want("text", dir, true, &w2, &err));
  g_assert_nonnull(strstr(err.msg, "must be one sequence"));
  em_dataset_want w0 = {in1, 1, 3, NULL};
  g_assert_null(em_dataset_open_want("text", dir, true, &w0, &err));
  g_assert_nonnull(strstr(err.msg, "add \"tokenizer\""));
  g_free(dt_write(dir, "empty.txt", "b\xc3\xa9" "a\nab", 7, false));
  em_tokenizer *none = em_tokenizer_new(EM_TOKENIZER_CHAR, NULL, 0, &err);
  em_dataset_want wn = {in1, 1, 3, none};
  g_assert_null(em_dataset_open_want("text", dir, true, &wn, &err));
  if (!strstr(err.msg, "the text's 4 characters, in code point order, are \"\\na"
              "b\\u00E9\""))
    g_error("unexpected: %s", err.msg);
  g_assert_null(em_dataset_open_want("text", NULL, true, &wn, &err));
  g_assert_nonnull(strstr(err.msg, "--data-dir"));
  em_tokenizer_free(none);
  em_tokenizer_free(b);
  em_tokenizer_free(c);
  dt_tmpdir_free(dir);
}

int main(int argc, char **argv) {
  g_test_init(&argc, &argv, NULL);
  g_test_add_func("/data/tokenizer/byte", test_byte_round_trip);
  g_test_add_func("/data/tokenizer/char", test_char_round_trip);
  g_test_add_func("/data/tokenizer/refusals", test_char_refusals);
  g_test_add_func("/data/text/folder-split-windows", test_folder_split_windows);
  g_test_add_func("/data/text/char-file", test_char_file);
  g_test_add_func("/data/text/errors", test_errors);
  return g_test_run();
}
