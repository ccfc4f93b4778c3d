/* serve-head.c: the guard's look at the head of a connection's first
 * request (serve-head.h), a pure function of the bytes peeked so far, kept
 * apart from the socket code so that tests/fuzz can call it. */
#include "serve-head.h"

#include <stdbool.h>
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

/* Every Content-Length in the header lines [s, end) is 1-19 digits. */
static bool lengths_ok(const char *s, const char *end) {
  while (s < end) {
    const char *eol = memchr(s, '\n', (size_t)(end - s));
    if (!eol) eol = end;
    if ((size_t)(eol - s) > 15 && !strncasecmp(s, "content-length:", 15)) {
      const char *v = s + 15, *ve = eol;
      while (v < ve && (*v == ' ' || *v == '\t')) v++;
      while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
      if (ve == v || ve - v > 19) return false;
      for (const char *q = v; q < ve; q++)
        if (*q < '0' || *q > '9') return false;
    }
    s = eol + 1;
  }
  return true;
}

head_verdict serve_look_at_head(const char *buf, size_t n) {
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
  return lengths_ok(h, stop) ? HEAD_OK : HEAD_BAD_LENGTH;
}
