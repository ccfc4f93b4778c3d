/* serve-frame.c: a request body's end on the byte stream (serve-frame.h):
 * a Content-Length counts down; a chunked body is followed chunk by
 * chunk (size line, data, CRLF; a zero size, trailer lines, an empty
 * line), as libmicrohttpd reads it, so that both agree where the next
 * request starts. */
#include "serve-frame.h"

#include <string.h>

void serve_frame_begin(serve_frame *f, const serve_head *h) {
  *f = (serve_frame){.phase = FRAME_HEAD};
  if (h->chunked) f->phase = FRAME_CHUNK_SIZE;
  else if (h->content_length) {
    f->phase = FRAME_BODY;
    f->left = h->content_length;
  }
}

static int hex(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* The chunk size at the start of line [s, e) (no LF): false unless 1-16
 * hex digits, then nothing, spaces or tabs, or ';' extensions. */
static bool chunk_size(const char *s, const char *e, uint64_t *size) {
  uint64_t v = 0;
  int digits = 0;
  for (; s < e && hex(*s) >= 0; s++, digits++) v = v * 16 + (uint64_t)hex(*s);
  if (digits == 0 || digits > 16) return false;
  while (s < e && (*s == ' ' || *s == '\t')) s++;
  if (s < e && *s != ';' && !(*s == '\r' && s + 1 == e)) return false;
  *size = v;
  return true;
}

size_t serve_frame_take(serve_frame *f, const char *buf, size_t n) {
  size_t i = 0;
  while (i < n) {
    const char *s = buf + i;
    size_t avail = n - i;
    switch (f->phase) {
    case FRAME_HEAD:
    case FRAME_BAD: return i;
    case FRAME_BODY:
    case FRAME_CHUNK_DATA: {
      size_t k = f->left < avail ? (size_t)f->left : avail;
      i += k;
      f->left -= k;
      if (!f->left) f->phase = f->phase == FRAME_BODY ? FRAME_HEAD : FRAME_CHUNK_END;
      break;
    }
    case FRAME_CHUNK_END:
      if (s[0] == '\n') i += 1;
      else if (s[0] != '\r') f->phase = FRAME_BAD;
      else if (avail < 2) return i;
      else if (s[1] != '\n') f->phase = FRAME_BAD;
      else i += 2;
      if (f->phase != FRAME_BAD) f->phase = FRAME_CHUNK_SIZE;
      break;
    case FRAME_CHUNK_SIZE:
    case FRAME_TRAILER: {
      size_t look = avail < FRAME_LINE_MAX ? avail : FRAME_LINE_MAX;
      const char *lf = memchr(s, '\n', look);
      if (!lf) {
        if (look == FRAME_LINE_MAX) f->phase = FRAME_BAD;
        return i;
      }
      size_t len = (size_t)(lf - s) + 1;
      if (f->phase == FRAME_TRAILER) {
        bool empty = len == 1 || (len == 2 && s[0] == '\r');
        if ((f->trailer += len) > HEAD_MAX) {
          f->phase = FRAME_BAD;
          return i;
        }
        if (empty) f->phase = FRAME_HEAD;
      } else {
        uint64_t size;
        if (!chunk_size(s, lf, &size)) {
          f->phase = FRAME_BAD;
          return i;
        }
        f->left = size;
        f->phase = size ? FRAME_CHUNK_DATA : FRAME_TRAILER;
      }
      i += len;
      break;
    }
    }
  }
  return i;
}
