/* fuzz-http-head.c: the bytes as what the serve guard peeked from a new
 * connection (at most HEAD_MAX): serve_look_at_head, the check that
 * answers 400/431 before libmicrohttpd sees a request, on every prefix a
 * slow client's bytes would show it (up to 65 peeks of growing length),
 * checking that once the head is judged more bytes never change the
 * verdict. */
#include "serve-head.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > HEAD_MAX) size = HEAD_MAX;
  /* a copy of exactly size bytes: ASan sees any read past the peek */
  char *buf = malloc(size ? size : 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  head_verdict first = HEAD_MORE;
  size_t step = size / 64 + 1;
  for (size_t n = 0;; n = n + step < size ? n + step : size) {
    head_verdict v = serve_look_at_head(buf, n);
    if (first == HEAD_MORE) first = v;
    else if (v != first) abort(); /* a verdict taken back */
    if (n == size) break;
  }
  free(buf);
  return 0;
}
