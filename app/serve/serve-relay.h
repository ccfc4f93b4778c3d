/* serve-relay.h: one client connection as the front door relays it
 * (serve-relay.c), for the door's thread (serve-guard.c), which accepts
 * connections, owns the table they sit in and runs their events. */
#pragma once

#include "serve-frame.h"
#include "serve-head.h"
#include "serve-private.h"

#include <sys/socket.h>

#define IN_CAP (2 * HEAD_MAX) /* client bytes not yet passed on: a whole head fits */
#define OUT_CAP 32768         /* libmicrohttpd's bytes not yet sent to the client */

typedef struct serve_conn {
  int slot, cfd, mfd; /* the client's socket; ours of the pair (-1 before the first head) */
  struct sockaddr_storage addr;
  socklen_t alen;
  bool c_rd, c_wr, m_rd, m_wr; /* readable, writable as epoll last said (false at EAGAIN) */
  uint32_t c_ev, m_ev;         /* the events asked for */
  bool c_hup, m_hup;           /* epoll said the side's input ends (EPOLLRDHUP) */
  bool c_eof, m_eof;           /* each side's end of input seen */
  bool c_shut, m_shut;         /* our writes to each side ended */
  bool refusing;               /* judged bad: nothing more is passed on; answer when done */
  bool dead;                   /* to be closed (libmicrohttpd would not take it) */
  bool again;                  /* in the list to be run again (it used its rounds) */
  serve_frame frame;           /* the current request's body (FRAME_HEAD between) */
  double head_deadline, body_deadline, end_deadline; /* 0: none */
  size_t in_len, passed; /* in[0, passed) judged, to go to libmicrohttpd; the rest not yet */
  size_t out_off, out_len;
  size_t answer_len;
  char answer[800];
  char in[IN_CAP];
  char out[OUT_CAP];
} serve_conn;

/* A connection just accepted in table slot slot (malloc'd; NULL: no memory).
 * Its first head's deadline is the caller's to set. */
serve_conn *serve_conn_new(int slot, int fd, const struct sockaddr_storage *addr, socklen_t alen);
/* epoll's events on the client's socket, or on libmicrohttpd's side (mhd). */
void serve_conn_event(serve_guard *g, serve_server *srv, serve_conn *c, uint32_t events, bool mhd);
/* Moves what can move on c; it may be closed (freed) on return. */
void serve_conn_run(serve_guard *g, serve_server *srv, serve_conn *c);
/* Closes both sides, frees c and its table slot, gives back its counts. */
void serve_conn_kill(serve_guard *g, serve_conn *c);
/* The deadlines of every connection in the table, at monotonic time now. */
void serve_conns_scan(serve_guard *g, serve_server *srv, double now);
/* An answer of the door's own (Connection: close, a JSON error body) into
 * out; its length, 0 when it does not fit. extra: header lines, or NULL. */
size_t serve_answer_format(char *out, size_t cap, int code, const char *reason, const char *msg,
                           const char *extra);

/* serve-guard.c: gives back a closed connection's counts (open, and per address). */
void serve_guard_release(serve_guard *g, const struct sockaddr_storage *addr);
