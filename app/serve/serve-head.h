/* serve-head.h: the guard's check of a first request's head (serve-guard.c),
 * on its own so that the fuzz target (tests/fuzz/fuzz-http-head.c) calls
 * the very function the guard does. */
#pragma once

#include <stddef.h>

#define HEAD_MAX 16384 /* a first request's head larger than this: 431 */

typedef enum { HEAD_MORE, HEAD_OK, HEAD_BAD_LINE, HEAD_BAD_LENGTH, HEAD_TOO_BIG } head_verdict;

/* The verdict on buf (n bytes peeked from the connection, n <= HEAD_MAX):
 * HEAD_MORE while the head is not all in, HEAD_OK once it is and its
 * request line and Content-Length values pass; HEAD_BAD_LINE for a request
 * line that is not METHOD SP TARGET SP HTTP/1.x in visible ASCII (judged
 * as soon as it shows), HEAD_BAD_LENGTH for a Content-Length that is not
 * 1-19 digits, HEAD_TOO_BIG for HEAD_MAX bytes without the head's end. */
head_verdict serve_look_at_head(const char *buf, size_t n);
