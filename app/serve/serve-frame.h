/* serve-frame.h: where a request's body ends on a connection's byte
 * stream (serve-frame.c), so that the front door (serve-guard.c) knows
 * where the next request's head starts and judges it too. A pure
 * function of the bytes, apart from the sockets (tests/fuzz calls it). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve-head.h"

typedef enum {
  FRAME_HEAD,       /* between requests: the next bytes are a head */
  FRAME_BODY,       /* a Content-Length body: left bytes to come */
  FRAME_CHUNK_SIZE, /* chunked: a chunk-size line */
  FRAME_CHUNK_DATA, /* chunked: left bytes of a chunk */
  FRAME_CHUNK_END,  /* chunked: the CRLF after a chunk's data */
  FRAME_TRAILER,    /* chunked: trailer lines up to an empty one */
  FRAME_BAD,        /* the chunked framing is broken: nothing more is passed on */
} serve_frame_phase;

typedef struct {
  serve_frame_phase phase;
  uint64_t left;  /* FRAME_BODY, FRAME_CHUNK_DATA: bytes to come */
  size_t trailer; /* FRAME_TRAILER: bytes of trailer lines so far */
} serve_frame;

#define FRAME_LINE_MAX 1024 /* a chunk-size line (with its extensions) */

/* Starts the body of a request whose head h passed. */
void serve_frame_begin(serve_frame *f, const serve_head *h);

/* Takes what of buf (n bytes that follow what was taken before) belongs
 * to the current body; returns that count (the bytes to pass on). Stops
 * at the body's end (phase FRAME_HEAD again) or where a line is not all
 * in yet; sets phase FRAME_BAD (and takes nothing more) when the chunked
 * framing is broken: a chunk size that is not 1-16 hex digits, a line
 * over FRAME_LINE_MAX, no CRLF after a chunk, trailers over HEAD_MAX. */
size_t serve_frame_take(serve_frame *f, const char *buf, size_t n);
