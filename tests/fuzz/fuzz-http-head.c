/* fuzz-http-head.c: the bytes as a connection's stream through the serve
 * guard: serve_look_at_head, the check that answers 400/431 before
 * libmicrohttpd sees a request, and serve_frame_take, which finds where
 * each body ends so that the next head is judged too. The walk over the
 * stream (head, body, head, ...) is made with the bytes all at once and
 * again fed in growing pieces, as a slow client's bytes would come (up to
 * 65 of them); both walks must agree on every request's end and on where
 * and why it stopped: once judged, more bytes never change a verdict.
 * Every head that passed ends within what was seen, and every take stays
 * within what it was given. */
#include "serve-frame.h"
#include "serve-head.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ENDS 64

typedef struct {
  size_t ends[MAX_ENDS]; /* where each head and each body ended */
  int n_ends;
  size_t pos;            /* where the walk stopped */
  head_verdict verdict;  /* why: HEAD_MORE for the end of the bytes, FRAME_BAD as -1 */
} walk_result;

static void mark(walk_result *r, size_t pos) {
  if (r->n_ends < MAX_ENDS) r->ends[r->n_ends++] = pos;
}

static walk_result walk(const char *buf, size_t size, size_t step) {
  walk_result r = {.verdict = HEAD_MORE};
  serve_frame f = {.phase = FRAME_HEAD};
  size_t have = 0, pos = 0;
  do {
    have = have + step < size ? have + step : size;
    for (;;) {
      size_t avail = have - pos;
      if (f.phase == FRAME_HEAD) {
        if (!avail) break;
        serve_head h = {0};
        head_verdict v = serve_look_at_head(buf + pos, avail < HEAD_MAX ? avail : HEAD_MAX, &h);
        if (v == HEAD_MORE) break;
        if (v != HEAD_OK) {
          r.pos = pos;
          r.verdict = v;
          return r;
        }
        if (h.len == 0 || h.len > avail) abort();
        pos += h.len;
        serve_frame_begin(&f, &h);
        mark(&r, pos);
      } else {
        size_t k = serve_frame_take(&f, buf + pos, avail);
        if (k > avail) abort();
        pos += k;
        if (f.phase == FRAME_BAD) {
          r.pos = pos;
          r.verdict = (head_verdict)-1;
          return r;
        }
        if (f.phase != FRAME_HEAD) break; /* more of the body to come */
        mark(&r, pos);
      }
    }
  } while (have < size);
  r.pos = pos;
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4 * HEAD_MAX) size = 4 * HEAD_MAX;
  /* a copy of exactly size bytes: ASan sees any read past the end */
  char *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  walk_result whole = walk(buf, size, size ? size : 1);
  walk_result pieces = walk(buf, size, size / 64 + 1);
  if (whole.pos != pieces.pos || whole.verdict != pieces.verdict ||
      whole.n_ends != pieces.n_ends ||
      memcmp(whole.ends, pieces.ends, sizeof whole.ends[0] * (size_t)whole.n_ends))
    abort(); /* a verdict or a request's end taken back */
  free(buf);
  return 0;
}
