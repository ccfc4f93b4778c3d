/* serve-head.h: the front door's check of a request's head (serve-guard.c),
 * on its own so that the fuzz target (tests/fuzz/fuzz-http-head.c) calls
 * the very function the guard does. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HEAD_MAX 16384 /* a request's head larger than this: 431 */

typedef enum {
  HEAD_MORE,
  HEAD_OK,
  HEAD_BAD_LINE,
  HEAD_BAD_LENGTH,
  HEAD_BAD_CODING,
  HEAD_TOO_BIG
} head_verdict;

/* What the front door needs of a head that passed, to find where its
 * request ends and the next one's head begins. */
typedef struct {
  size_t len;              /* bytes of the head, through its empty line */
  bool chunked;            /* Transfer-Encoding: chunked (Content-Length then ignored) */
  uint64_t content_length; /* the first Content-Length (0 when none) */
} serve_head;

/* The verdict on buf (n bytes of a connection, n <= HEAD_MAX, from the
 * start of a request): HEAD_MORE while the head is not all in, HEAD_OK
 * once it is and its request line and Content-Length values pass (and
 * *out, when not NULL, is filled); HEAD_BAD_LINE for a request line that
 * is not METHOD SP TARGET SP HTTP/1.x in visible ASCII (judged as soon as
 * it shows), HEAD_BAD_LENGTH for a Content-Length that is not 1-19
 * digits, HEAD_BAD_CODING for a Transfer-Encoding other than "chunked" or
 * a header line folded onto the next (RFC 9112 5.2: either leaves where
 * the body ends in doubt), HEAD_TOO_BIG for HEAD_MAX bytes without the
 * head's end. */
head_verdict serve_look_at_head(const char *buf, size_t n, serve_head *out);
