/* serve-head.c: the front door's look at the head of each request on a
 * connection (serve-head.h), a pure function of the bytes in so far, kept
 * apart from the socket code so that tests/fuzz can call it. */
#include "serve-head.h"

#include <string.h>
#include <strings.h>

static bool tchar(unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Whether line (len bytes, no CRLF) is METHOD SP TARGET SP HTTP/1.x. */
static bool request_line_ok(const unsigned char *s, size_t len) {
  size_t i = 0;
  while (i < len && tchar(s[i])) i++;
  if (i == 0 || i == len || s[i] != ' ') return false;
  size_t t = ++i;
  while (i < len && s[i] > 0x20 && s[i] < 0x7f) i++;
  if (i == t || i == len || s[i] != ' ') return false;
  i++;
  return len - i == 8 && !memcmp(s + i, "HTTP/1.", 7) && (s[i + 7] == '0' || s[i + 7] == '1');
}

static bool field_is(const char *s, const char *eol, const char *name, size_t n) {
  return (size_t)(eol - s) > n && !strncasecmp(s, name, n);
}

/* The value of the header line [s, eol) after its n-byte name, trimmed. */
static void field_value(const char *s, const char *eol, size_t n, const char **v,
                        const char **ve) {
  *v = s + n;
  *ve = eol;
  while (*v < *ve && (**v == ' ' || **v == '\t')) (*v)++;
  while (*ve > *v && ((*ve)[-1] == '\r' || (*ve)[-1] == ' ' || (*ve)[-1] == '\t')) (*ve)--;
}

/* The header lines [s, end): every Content-Length is 1-19 digits, a
 * Transfer-Encoding is "chunked", no line is folded; fills h. */
static head_verdict fields_ok(const char *s, const char *end, serve_head *h) {
  bool have_length = false;
  while (s < end) {
    const char *eol = memchr(s, '\n', (size_t)(end - s));
    if (!eol) eol = end;
    const char *v, *ve;
    if (*s == ' ' || *s == '\t') return HEAD_BAD_CODING; /* obs-fold */
    if (field_is(s, eol, "content-length:", 15)) {
      field_value(s, eol, 15, &v, &ve);
      if (ve == v || ve - v > 19) return HEAD_BAD_LENGTH;
      uint64_t n = 0;
      for (const char *q = v; q < ve; q++) {
        if (*q < '0' || *q > '9') return HEAD_BAD_LENGTH;
        n = n * 10 + (uint64_t)(*q - '0'); /* 19 digits fit */
      }
      if (!have_length) h->content_length = n; /* libmicrohttpd takes the first */
      have_length = true;
    } else if (field_is(s, eol, "transfer-encoding:", 18)) {
      field_value(s, eol, 18, &v, &ve);
      if (ve - v != 7 || strncasecmp(v, "chunked", 7) || h->chunked) return HEAD_BAD_CODING;
      h->chunked = true;
    }
    s = eol + 1;
  }
  return HEAD_OK;
}

head_verdict serve_look_at_head(const char *buf, size_t n, serve_head *out) {
  size_t i = 0;
  while (i < n && (buf[i] == '\r' || buf[i] == '\n')) i++; /* RFC 9112 2.2 */
  const char *line = buf + i, *end = buf + n;
  const char *lf = memchr(line, '\n', (size_t)(end - line));
  if (!lf) {
    /* a line not yet ended is judged by what it has: a NUL or a control
     * byte in the method is no method */
    for (const char *q = line; q < end && *q != ' '; q++)
      if (!tchar((unsigned char)*q)) return HEAD_BAD_LINE;
    return n >= HEAD_MAX ? HEAD_TOO_BIG : HEAD_MORE;
  }
  size_t llen = (size_t)(lf - line);
  if (llen && line[llen - 1] == '\r') llen--;
  if (!request_line_ok((const unsigned char *)line, llen)) return HEAD_BAD_LINE;
  /* the head ends at an empty line */
  const char *h = lf + 1, *stop = NULL;
  for (const char *q = h; q < end; q++) {
    if (*q != '\n') continue;
    if ((q > h && q[-1] == '\n') || (q - 1 > h && q[-1] == '\r' && q[-2] == '\n') ||
        q == h || (q == h + 1 && h[0] == '\r')) {
      stop = q;
      break;
    }
  }
  if (!stop) return n >= HEAD_MAX ? HEAD_TOO_BIG : HEAD_MORE;
  serve_head info = {.len = (size_t)(stop + 1 - buf)};
  /* the empty line itself is no field line */
  const char *fields_end = stop > h && stop[-1] == '\r' ? stop - 1 : stop;
  head_verdict v = fields_ok(h, fields_end, &info);
  if (v == HEAD_OK && out) *out = info;
  return v;
}
