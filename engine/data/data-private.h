/* data-private.h: what the dataset files of engine/data share: reading
 * whole (gzip or plain) files with clear errors. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "em-data.h"

/* A built-in dataset kind: the em_dataset_type every kind has, and what
 * the registry knows of the built-ins besides (registry.c lists them;
 * each is defined beside its reader). A plugin's kind needs a folder and
 * reports no files. */
typedef struct {
  em_dataset_type type;
  /* Refused without --data-dir: "the <name> dataset needs its folder:
   * give --data-dir DIR (<dir_hint>)". false: it has a default folder, or
   * no files, or its open says what it needs. */
  bool needs_dir;
  const char *dir_hint;
  /* The files its split reads from dir (NULL when not given): up to room
   * (at least 5) paths into found, *n their count; more is an error. A
   * file both splits read is named once, for the training split. NULL:
   * it reads none (synthetic). */
  em_status (*files)(const char *dir, bool train, char (*found)[4096], int room, int *n,
                     em_error *err);
} em_dataset_builtin;

extern const em_dataset_builtin em_dataset_kind_fashion_mnist, em_dataset_kind_cifar10,
    em_dataset_kind_csv, em_dataset_kind_synthetic, em_dataset_kind_text;

/* ---- text (text-tokenizer.c, for text.c) ---- */
/* The code point at s (n bytes left) into *cp; returns its length in
 * bytes, 0 when s does not start a valid UTF-8 sequence (cut short, a
 * stray continuation byte, overlong, a surrogate, past U+10FFFF). */
int em_utf8_next(const uint8_t *s, size_t n, uint32_t *cp);
/* The 1-based line and column (in characters) of byte `at` of text. */
void em_text_locate(const char *text, size_t at, int64_t *line, int64_t *col);
/* The set of characters texts hold: zero it, add texts (an error names
 * source, line and column of a byte that is not UTF-8 text), read it as
 * a UTF-8 string of each character once in code point order (malloc'd,
 * NUL-terminated; *bytes its length), clear it. */
typedef struct {
  uint64_t *bits; /* (0x110000 / 64) */
  int64_t count;
} em_charset;
em_status em_charset_add(em_charset *cs, const char *text, size_t n, const char *source,
                         em_error *err);
char *em_charset_string(const em_charset *cs, size_t *bytes);
void em_charset_clear(em_charset *cs);

/* x[k] = p[k] / 255 for k < n (the two must not overlap). */
void em_pixels_to_unit(const uint8_t *restrict p, float *restrict x, int64_t n);
/* Asks for the n bytes at p to be brought into the cache. */
void em_prefetch_bytes(const void *p, int64_t n);

/* Opens path for reading through zlib, which reads gzip and plain files
 * alike. Fails (naming the file) when it is missing, unreadable or a
 * folder. */
em_status em_gz_open(const char *path, gzFile *out, em_error *err);

/* Reads exactly n bytes. A short read is EM_ERR_FORMAT "'path' is
 * truncated: <what> needs n bytes, the file has only m"; a gzip error is
 * EM_ERR_FORMAT with zlib's message. */
em_status em_gz_read_exact(gzFile f, const char *path, void *buf, size_t n, const char *what,
                           em_error *err);

/* Reads n bytes into a new malloc'd buffer that grows as data arrives, so
 * a header that claims more than the file holds reports a truncated file
 * instead of allocating what it claims. */
em_status em_gz_read_alloc(gzFile f, const char *path, size_t n, const char *what,
                           uint8_t **out, em_error *err);

/* Deflate's largest expansion: a 258-byte match from 2 bits, about
 * 1032:1. No gzip file inflates to more than this times its size. */
#define EM_DEFLATE_MAX_RATIO 1032

/* The whole content of a single-member gzip file that holds exactly size
 * bytes (its trailer says so and its checksum holds), decompressed in one
 * go by libdeflate, about 2.5x zlib's speed (Fashion-MNIST's 47 MB of
 * training images: 0.13 s against 0.32 s); malloc'd. NULL, with nothing
 * said, for any other file (plain, damaged, several members, another
 * size, a claim beyond deflate's 1032:1 ratio): the caller then reads it
 * through zlib, whose messages say what is wrong. */
uint8_t *em_gz_whole(const char *path, size_t size);

/* Reads the rest of the file into a new malloc'd buffer (*n its size). */
em_status em_gz_read_rest(gzFile f, const char *path, uint8_t **out, size_t *n, em_error *err);
/* The size of f's (decompressed) contents, read through in small pieces
 * and not kept; f is rewound to its start. For a reader that can tell a
 * wrong size before it loads the file. */
em_status em_gz_measure(gzFile f, const char *path, uint64_t *n, em_error *err);

/* EM_ERR_FORMAT when the file has bytes left ("'path' has extra bytes
 * after <what>"), or a gzip error at its end (a bad checksum). */
em_status em_gz_expect_end(gzFile f, const char *path, const char *what, em_error *err);

/* For a gzip file: EM_ERR_FORMAT ("trailing data after the gzip stream")
 * when bytes that are not another gzip member follow its last member.
 * zlib's gzread drops them without a word, so a file with a tail of
 * garbage (or a second file appended) read as good. EM_OK for a plain
 * file, one member or several, and for a damaged stream (the reader has
 * said what is wrong with it already). It inflates the file once more,
 * output discarded. */
em_status em_gz_check_trailing(const char *path, em_error *err);
