/* serve-relay.c: a client connection as the front door relays it
 * (serve-guard.c says what every request passes and why a relay). Bytes
 * from the client wait in `in` until judged: a head by serve_look_at_head,
 * a body by serve_frame_take; judged bytes go on to libmicrohttpd's end of
 * the socketpair, its bytes come back through `out`. The buffers are
 * bounded (IN_CAP + OUT_CAP a connection) and a side that does not take
 * bytes stops the reads from the other (back-pressure, not buffering).
 *
 * An answer of the door's own on a connection libmicrohttpd holds waits
 * for the answers to the requests before it: libmicrohttpd's side is
 * half-closed after the last good request, libmicrohttpd answers what it
 * has and closes, and then this answer goes out (so pipelined answers
 * keep their order, with no parsing of responses here). That leans on
 * libmicrohttpd answering a request whose connection was half-closed
 * after it, which 0.9.75 does only with a connection timeout other than
 * its default (serve-http.c sets one on every request: see on_request). */
#include "serve-relay.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#define LINGER_S 1.0  /* after our last byte, what the client still sends is read and
                         dropped this long (a close with unread bytes would reset the
                         connection, the answer lost) */
#define DRAIN_S 30.0  /* libmicrohttpd's answers before one of ours, or what it left
                         when it closed, reach the client within this (the stop's bound
                         for answers in flight) */
#define RUN_ROUNDS 16 /* reads of one connection in a row (512 kB) before the others
                         get a turn: a client streaming a body as fast as loopback goes
                         would hold the thread */

serve_conn *serve_conn_new(int slot, int fd, const struct sockaddr_storage *addr, socklen_t alen) {
  serve_conn *c = malloc(sizeof *c);
  if (!c) return NULL;
  memset(c, 0, offsetof(serve_conn, in));
  c->slot = slot;
  c->cfd = fd;
  c->mfd = -1;
  c->addr = *addr;
  c->alen = alen;
  c->c_rd = c->c_wr = true; /* until a call says otherwise */
  c->frame.phase = FRAME_HEAD;
  /* the relay writes answers in the pieces it reads them: no Nagle wait
   * for the client's delayed ACK between a head and its body */
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return c;
}

size_t serve_answer_format(char *out, size_t cap, int code, const char *reason, const char *msg,
                           const char *extra) {
  char body[400];
  int blen = snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
  int n = snprintf(out, cap, "HTTP/1.1 %d %s\r\nConnection: close\r\n%s"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                   code, reason, extra ? extra : "", blen, body);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* Judged bad: nothing after the requests already passed on goes to
 * libmicrohttpd; the answer goes out once libmicrohttpd is done with
 * them (at once when it has none), then the connection closes. */
static void refuse(serve_guard *g, serve_conn *c, int code, const char *reason, const char *msg,
                   serve_refused why) {
  c->answer_len = serve_answer_format(c->answer, sizeof c->answer, code, reason, msg, NULL);
  c->refusing = true;
  c->in_len = c->passed;
  c->end_deadline = cli_mono_now() + DRAIN_S;
  serve_metrics_response(g->metrics, code);
  serve_metrics_refused(g->metrics, why);
}

/* A request that cannot be whole (a chunked body's framing broke, or the
 * client ended its input mid-body): libmicrohttpd 0.9.75 neither answers
 * nor closes on an end of input mid-body, it waits for the rest until its
 * timeout. It keeps LINGER_S to send what it has (an answer it gave from
 * the head, 413 say, or the answers before), then the connection is
 * closed: no answer of ours, which could come second to one of its own. */
static void end_mid_body(serve_conn *c) {
  double end = cli_mono_now() + LINGER_S;
  if (!c->end_deadline || end < c->end_deadline) c->end_deadline = end;
}

/* ---- connections ------------------------------------------------------------------ */

void serve_conn_kill(serve_guard *g, serve_conn *c) {
  if (c->cfd >= 0) close(c->cfd); /* closing removes it from the epoll set */
  if (c->mfd >= 0) close(c->mfd);
  serve_guard_release(g, &c->addr);
  g->conns[c->slot] = NULL;
  g->n_conns--;
  free(c);
}

static bool watch(serve_guard *g, int fd, uint32_t *have, uint32_t want, uint64_t tag) {
  if (*have == want) return true;
  struct epoll_event ev = {.events = want, .data.u64 = tag};
  bool ok = epoll_ctl(g->epoll_fd, *have ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) == 0;
  if (ok) *have = want;
  return ok;
}

/* Asks for EPOLLOUT on a side only while a write to it is blocked. */
static void conn_watch(serve_guard *g, serve_conn *c) {
  uint64_t tag = (uint64_t)c->slot << 1;
  uint32_t base = EPOLLIN | EPOLLRDHUP | EPOLLET;
  bool c_blocked = !c->c_wr && c->out_len > c->out_off;
  watch(g, c->cfd, &c->c_ev, base | (c_blocked ? EPOLLOUT : 0), tag);
  if (c->mfd >= 0) {
    bool m_blocked = !c->m_wr && c->passed && !c->m_shut;
    watch(g, c->mfd, &c->m_ev, base | (m_blocked ? EPOLLOUT : 0), tag | 1);
  }
}

/* The first head passed: libmicrohttpd gets its end of a socketpair. */
static bool hand_off(serve_guard *g, serve_server *srv, serve_conn *c) {
  int sv[2];
  if (atomic_load(&g->no_handoff) ||
      socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
    return false;
  /* libmicrohttpd owns sv[1] from here (and closes it on failure); the
   * address given is what it reports as the client's */
  if (MHD_add_connection(srv->daemon, sv[1], (struct sockaddr *)&c->addr, c->alen) != MHD_YES) {
    close(sv[0]);
    return false;
  }
  c->mfd = sv[0];
  c->m_wr = true;
  return true;
}

/* Judges what came in after the bytes already judged: heads, and where
 * bodies end. false when nothing changed. */
static bool judge(serve_guard *g, serve_server *srv, serve_conn *c) {
  bool moved = false;
  while (!c->refusing && c->passed < c->in_len) {
    const char *s = c->in + c->passed;
    size_t avail = c->in_len - c->passed;
    if (c->frame.phase != FRAME_HEAD) {
      size_t k = serve_frame_take(&c->frame, s, avail);
      c->passed += k;
      moved |= k > 0;
      if (c->frame.phase == FRAME_BAD) { /* nothing more is passed on */
        c->refusing = true;
        c->in_len = c->passed;
        end_mid_body(c);
        serve_metrics_refused(g->metrics, SERVE_REFUSED_BAD_REQUEST);
        return true;
      }
      if (c->frame.phase != FRAME_HEAD) return moved; /* the rest of the body is to come */
      c->body_deadline = 0;
      continue;
    }
    if (!c->head_deadline) c->head_deadline = cli_mono_now() + srv->http.header_timeout_s;
    serve_head h;
    switch (serve_look_at_head(s, avail < HEAD_MAX ? avail : HEAD_MAX, &h)) {
    case HEAD_MORE: return moved;
    case HEAD_BAD_LINE:
      refuse(g, c, 400, "Bad Request", "the request line is not METHOD TARGET HTTP/1.x in "
             "visible ASCII", SERVE_REFUSED_BAD_REQUEST);
      return true;
    case HEAD_BAD_LENGTH:
      refuse(g, c, 400, "Bad Request", "Content-Length is not a decimal number of at most 19 "
             "digits", SERVE_REFUSED_BAD_REQUEST);
      return true;
    case HEAD_BAD_CODING:
      refuse(g, c, 400, "Bad Request", "a Transfer-Encoding other than chunked, or a header "
             "line folded onto the next", SERVE_REFUSED_BAD_REQUEST);
      return true;
    case HEAD_TOO_BIG:
      refuse(g, c, 431, "Request Header Fields Too Large", "the request's head is over 16384 "
             "bytes", SERVE_REFUSED_BAD_REQUEST);
      return true;
    case HEAD_OK: break;
    }
    if (c->mfd < 0 && !hand_off(g, srv, c)) {
      c->dead = true;
      return true;
    }
    c->passed += h.len;
    c->head_deadline = 0;
    serve_frame_begin(&c->frame, &h);
    if (c->frame.phase != FRAME_HEAD)
      c->body_deadline = cli_mono_now() + srv->http.body_timeout_s;
    moved = true;
  }
  return moved;
}

/* SHORT_READ: a read that returns less than there was room for has
 * drained the socket, so it is not tried again until epoll says more came
 * (edge-triggered events come on every arrival, not only on an empty
 * socket's first): a read that would only say EAGAIN saved per side and
 * request. But an end of input that came with the bytes has no event of
 * its own left: once epoll said EPOLLRDHUP, reads go on until one says 0.
 *
 * Moves what can move on c, both ways, until nothing does (or for
 * RUN_ROUNDS, then it is run again after the others: with edge-triggered
 * events nothing else would come back to what it left unread). */
void serve_conn_run(serve_guard *g, serve_server *srv, serve_conn *c) {
  for (int round = 0;; round++) {
    if (round == RUN_ROUNDS) {
      if (!c->again) g->again[g->n_again++] = c->slot;
      c->again = true;
      break;
    }
    bool moved = false;
    ssize_t n;
    /* from the client */
    if (c->c_rd && !c->c_eof && c->in_len < IN_CAP) {
      size_t room = IN_CAP - c->in_len;
      n = recv(c->cfd, c->in + c->in_len, room, 0);
      if (n > 0) {
        if (!c->refusing && !c->c_shut) c->in_len += (size_t)n; /* else dropped */
        c->c_rd = (size_t)n == room || c->c_hup; /* short: drained (see SHORT_READ) */
        moved = true;
      } else if (n == 0) {
        c->c_eof = moved = true;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        c->c_rd = false;
      } else if (errno != EINTR) {
        serve_conn_kill(g, c);
        return;
      }
    }
    if (judge(g, srv, c)) moved = true;
    if (c->dead || (c->mfd < 0 && c->c_eof && !c->refusing)) { /* or gone before a whole head */
      serve_conn_kill(g, c);
      return;
    }
    /* to libmicrohttpd */
    if (c->mfd >= 0 && !c->m_shut && c->passed && c->m_wr) {
      n = send(c->mfd, c->in, c->passed, MSG_NOSIGNAL);
      if (n > 0) {
        memmove(c->in, c->in + n, c->in_len - (size_t)n);
        c->in_len -= (size_t)n;
        c->passed -= (size_t)n;
        moved = true;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        c->m_wr = false;
      } else if (n < 0 && errno != EINTR) { /* it closed: what it had not read is dropped */
        c->m_shut = moved = true;
        c->in_len = c->passed = 0;
      }
    }
    if (c->mfd >= 0 && !c->m_shut && !c->passed && (c->c_eof || c->refusing)) {
      shutdown(c->mfd, SHUT_WR); /* it answers what it has, then closes */
      c->m_shut = moved = true;
    }
    /* from libmicrohttpd */
    if (c->mfd >= 0 && c->m_rd && !c->m_eof && c->out_len < OUT_CAP) {
      size_t room = OUT_CAP - c->out_len;
      n = recv(c->mfd, c->out + c->out_len, room, 0);
      if (n > 0) {
        c->out_len += (size_t)n;
        c->m_rd = (size_t)n == room || c->m_hup;
        moved = true;
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        c->m_eof = moved = true;
        /* what is left goes to a client that takes it in time */
        if (!c->end_deadline) c->end_deadline = cli_mono_now() + DRAIN_S;
      } else if (errno != EINTR) {
        c->m_rd = false;
      }
    }
    if (c->c_eof && c->frame.phase != FRAME_HEAD && c->mfd >= 0 && !c->end_deadline)
      end_mid_body(c); /* the client ended mid-body */
    /* our answer, once libmicrohttpd is done */
    if (c->answer_len && c->out_len == 0 && (c->mfd < 0 || c->m_eof)) {
      memcpy(c->out, c->answer, c->answer_len);
      c->out_len = c->answer_len;
      c->answer_len = 0;
      moved = true;
    }
    /* to the client */
    if (c->out_len > c->out_off && c->c_wr) {
      n = send(c->cfd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
      if (n > 0) {
        c->out_off += (size_t)n;
        if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
        moved = true;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        c->c_wr = false;
      } else if (n < 0 && errno != EINTR) {
        serve_conn_kill(g, c);
        return;
      }
    }
    /* the end: libmicrohttpd closed (or never had a request) and all is sent */
    if (!c->c_shut && !c->out_len && !c->answer_len && (c->mfd >= 0 ? c->m_eof : c->refusing)) {
      shutdown(c->cfd, SHUT_WR);
      c->c_shut = moved = true;
      c->in_len = c->passed = 0;
      c->end_deadline = cli_mono_now() + LINGER_S;
    }
    if (c->c_shut && c->c_eof) {
      serve_conn_kill(g, c);
      return;
    }
    if (!moved) break;
  }
  conn_watch(g, c);
}

/* Deadlines: a head late, 408; a body late, closed; an end that does not come, closed. */
void serve_conns_scan(serve_guard *g, serve_server *srv, double now) {
  for (int i = 0; i < g->cap_conns; i++) {
    serve_conn *c = g->conns[i];
    if (!c) continue;
    if (c->end_deadline && now >= c->end_deadline) {
      serve_conn_kill(g, c);
      continue;
    }
    if (c->refusing) continue;
    if (c->frame.phase == FRAME_HEAD && c->head_deadline && now >= c->head_deadline) {
      refuse(g, c, 408, "Request Timeout", "the request's head did not come in time "
             "(--header-timeout)", SERVE_REFUSED_HEADER_TIMEOUT);
      serve_conn_run(g, srv, c);
    } else if (c->frame.phase != FRAME_HEAD && c->body_deadline && now >= c->body_deadline) {
      /* libmicrohttpd cannot answer in the middle of an upload */
      serve_metrics_response(g->metrics, 408);
      serve_conn_kill(g, c);
    }
  }
}

void serve_conn_event(serve_guard *g, serve_server *srv, serve_conn *c, uint32_t events, bool mhd) {
  bool rd = events & (EPOLLIN | EPOLLHUP | EPOLLERR);
  bool wr = events & (EPOLLOUT | EPOLLHUP | EPOLLERR);
  bool hup = events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
  if (mhd) {
    c->m_rd |= rd || hup;
    c->m_wr |= wr;
    c->m_hup |= hup;
  } else {
    c->c_rd |= rd || hup;
    c->c_wr |= wr;
    c->c_hup |= hup;
  }
  serve_conn_run(g, srv, c);
}

