/* text-tokenizer.c: the byte and char tokenizers (em-data.h), strict
 * UTF-8 decoding, and the set of characters a text holds (what the text
 * kind suggests as a char tokenizer's vocabulary). */
#include "data-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CODE_POINT 0x10FFFF

struct em_tokenizer {
  em_tokenizer_kind kind;
  int64_t size;         /* V */
  uint32_t *chars;      /* char: (V) the code point of each id */
  int32_t ascii[128];   /* char: the id of each ASCII character, -1 when none */
  uint32_t *sorted_cp;  /* char: (V) the code points in ascending order */
  int32_t *sorted_id;   /* char: (V) their ids */
};

int em_utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
  if (n == 0) return 0;
  uint8_t b = s[0];
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  int len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 0;
  if (len == 0 || b > 0xF4 || (size_t)len > n) return 0;
  uint32_t c = b & (0x3F >> (len - 1));
  for (int k = 1; k < len; k++) {
    if ((s[k] & 0xC0) != 0x80) return 0;
    c = c << 6 | (s[k] & 0x3F);
  }
  static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < least[len] || c > MAX_CODE_POINT || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return len;
}

/* UTF-8 of cp into out (room for 4); returns the length. */
static int utf8_put(uint32_t cp, char *out) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | cp >> 12);
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | cp >> 18);
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

void em_text_locate(const char *text, size_t at, int64_t *line, int64_t *col) {
  const uint8_t *s = (const uint8_t *)text;
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < at; i++) {
    if (s[i] == '\n') {
      ++*line;
      *col = 1;
    } else if ((s[i] & 0xC0) != 0x80) { /* the first byte of a character */
      ++*col;
    }
  }
}

/* "U+00E9 'é'", "byte 0xff", "U+0007" for messages. */
static void describe_char(uint32_t cp, char *buf, size_t n) {
  char u[5] = {0};
  if (cp >= 0x20 && cp != 0x7F && !(cp >= 0x80 && cp < 0xA0)) {
    utf8_put(cp, u);
    snprintf(buf, n, "U+%04X '%s'", (unsigned)cp, u);
  } else {
    snprintf(buf, n, "U+%04X", (unsigned)cp);
  }
}

/* EM_ERR_FORMAT for the text at byte `at` of source: why. */
static em_status text_error(const char *source, const char *text, size_t at, const char *why,
                            em_error *err) {
  int64_t line, col;
  em_text_locate(text, at, &line, &col);
  return em_error_set(err, EM_ERR_FORMAT, "%s:%lld:%lld: %s", source, (long long)line,
                      (long long)col, why);
}

/* The next character of text at *i, or an error saying why it is not text. */
static em_status next_char(const char *text, size_t n, size_t *i, const char *source,
                           uint32_t *cp, em_error *err) {
  const uint8_t *s = (const uint8_t *)text + *i;
  int len = em_utf8_next(s, n - *i, cp);
  char why[160];
  if (len == 0) {
    snprintf(why, sizeof why, "byte 0x%02x is not UTF-8 text (the char tokenizer reads UTF-8; "
             "the byte tokenizer takes any bytes)", s[0]);
    return text_error(source, text, *i, why, err);
  }
  if (*cp == 0)
    return text_error(source, text, *i, "a NUL byte: this is not a text file (the char "
                      "tokenizer reads UTF-8 text; the byte tokenizer takes any bytes)", err);
  *i += (size_t)len;
  return EM_OK;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

em_tokenizer *em_tokenizer_new(em_tokenizer_kind kind, const char *vocab, size_t vocab_bytes,
                               em_error *err) {
  if (kind != EM_TOKENIZER_BYTE && kind != EM_TOKENIZER_CHAR) {
    em_error_set(err, EM_ERR_INVALID, "unknown tokenizer kind %d", (int)kind);
    return NULL;
  }
  if (kind == EM_TOKENIZER_BYTE && vocab) {
    em_error_set(err, EM_ERR_INVALID, "a byte tokenizer has no vocabulary (its ids are the 256 "
                 "byte values)");
    return NULL;
  }
  em_tokenizer *t = calloc(1, sizeof *t);
  if (!t) goto nomem;
  t->kind = kind;
  for (int c = 0; c < 128; c++) t->ascii[c] = -1;
  if (kind == EM_TOKENIZER_BYTE) {
    t->size = 256;
    return t;
  }
  if (!vocab) return t; /* no vocabulary yet */
  if (vocab_bytes == 0) {
    em_error_set(err, EM_ERR_INVALID, "the char tokenizer's vocabulary is empty");
    goto fail;
  }
  t->chars = malloc(vocab_bytes * sizeof *t->chars);
  if (!t->chars) goto nomem;
  em_error e = {0};
  for (size_t i = 0; i < vocab_bytes;) {
    uint32_t cp;
    if (next_char(vocab, vocab_bytes, &i, "the char tokenizer's vocabulary", &cp, &e) != EM_OK) {
      em_error_set(err, EM_ERR_INVALID, "%s", e.msg);
      goto fail;
    }
    t->chars[t->size++] = cp;
  }
  t->sorted_cp = malloc((size_t)t->size * sizeof *t->sorted_cp);
  t->sorted_id = malloc((size_t)t->size * sizeof *t->sorted_id);
  if (!t->sorted_cp || !t->sorted_id) goto nomem;
  memcpy(t->sorted_cp, t->chars, (size_t)t->size * sizeof *t->chars);
  qsort(t->sorted_cp, (size_t)t->size, sizeof *t->sorted_cp, cmp_u32);
  for (int64_t k = 1; k < t->size; k++)
    if (t->sorted_cp[k] == t->sorted_cp[k - 1]) {
      char d[48];
      describe_char(t->sorted_cp[k], d, sizeof d);
      em_error_set(err, EM_ERR_INVALID, "the char tokenizer's vocabulary holds %s twice: each "
                   "character must appear once (its place is its id)", d);
      goto fail;
    }
  for (int64_t id = 0; id < t->size; id++) { /* the ids, in the sorted order */
    uint32_t cp = t->chars[id];
    if (cp < 128) t->ascii[cp] = (int32_t)id;
    size_t lo = 0, hi = (size_t)t->size;
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      if (t->sorted_cp[mid] <= cp) lo = mid;
      else hi = mid;
    }
    t->sorted_id[lo] = (int32_t)id;
  }
  return t;
nomem:
  em_error_set(err, EM_ERR_NOMEM, "out of memory making a tokenizer");
fail:
  em_tokenizer_free(t);
  return NULL;
}

void em_tokenizer_free(em_tokenizer *t) {
  if (!t) return;
  free(t->chars);
  free(t->sorted_cp);
  free(t->sorted_id);
  free(t);
}

em_tokenizer_kind em_tokenizer_kind_of(const em_tokenizer *t) { return t->kind; }

const char *em_tokenizer_kind_name(em_tokenizer_kind k) {
  return k == EM_TOKENIZER_BYTE ? "byte" : k == EM_TOKENIZER_CHAR ? "char" : "?";
}

int64_t em_tokenizer_vocab_size(const em_tokenizer *t) { return t->size; }

/* The id of code point cp, or -1. */
static int32_t char_id(const em_tokenizer *t, uint32_t cp) {
  if (cp < 128) return t->ascii[cp];
  size_t lo = 0, hi = (size_t)t->size;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (t->sorted_cp[mid] < cp) lo = mid + 1;
    else hi = mid;
  }
  return lo < (size_t)t->size && t->sorted_cp[lo] == cp ? t->sorted_id[lo] : -1;
}

em_status em_tokenizer_encode(const em_tokenizer *t, const char *text, size_t n,
                              const char *source, int32_t *ids, size_t *n_ids, em_error *err) {
  *n_ids = 0;
  if (t->kind == EM_TOKENIZER_BYTE) {
    for (size_t i = 0; i < n; i++) ids[i] = (uint8_t)text[i];
    *n_ids = n;
    return EM_OK;
  }
  if (t->size == 0 && n > 0)
    return em_error_set(err, EM_ERR_INVALID, "%s: the char tokenizer has no vocabulary",
                        source);
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    size_t at = i;
    uint32_t cp = (uint8_t)text[i];
    int32_t id = cp && cp < 128 ? t->ascii[cp] : -1;
    if (id >= 0) {
      i++;
    } else {
      em_status st = next_char(text, n, &i, source, &cp, err);
      if (st != EM_OK) return st;
      if ((id = char_id(t, cp)) < 0) {
        char d[48], why[160];
        describe_char(cp, d, sizeof d);
        snprintf(why, sizeof why, "%s is not in the char tokenizer's vocabulary of %lld "
                 "characters", d, (long long)t->size);
        return text_error(source, text, at, why, err);
      }
    }
    ids[k++] = id;
  }
  *n_ids = k;
  return EM_OK;
}

int em_tokenizer_decode(const em_tokenizer *t, int64_t id, char *out) {
  if (id < 0 || id >= t->size) return 0;
  if (t->kind == EM_TOKENIZER_BYTE) {
    out[0] = (char)(uint8_t)id;
    return 1;
  }
  return utf8_put(t->chars[id], out);
}

/* ---- a text's characters ------------------------------------------------------------- */

em_status em_charset_add(em_charset *cs, const char *text, size_t n, const char *source,
                         em_error *err) {
  if (!cs->bits && !(cs->bits = calloc((MAX_CODE_POINT + 64) / 64, sizeof *cs->bits)))
    return em_error_set(err, EM_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    em_status st = next_char(text, n, &i, source, &cp, err);
    if (st != EM_OK) return st;
    uint64_t bit = (uint64_t)1 << (cp % 64);
    if (!(cs->bits[cp / 64] & bit)) {
      cs->bits[cp / 64] |= bit;
      cs->count++;
    }
  }
  return EM_OK;
}

char *em_charset_string(const em_charset *cs, size_t *bytes) {
  char *s = malloc((size_t)cs->count * 4 + 1);
  size_t k = 0;
  if (!s) return NULL;
  for (uint32_t cp = 0; cs->bits && cp <= MAX_CODE_POINT; cp++)
    if (cs->bits[cp / 64] >> (cp % 64) & 1) k += (size_t)utf8_put(cp, s + k);
  s[k] = '\0';
  *bytes = k;
  return s;
}

void em_charset_clear(em_charset *cs) {
  free(cs->bits);
  cs->bits = NULL;
  cs->count = 0;
}
