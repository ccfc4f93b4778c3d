/* serve-guard.c: the front door. One thread owns the listening socket and
 * every client connection for its whole life. libmicrohttpd never sees a
 * client's socket: it gets one end of a socketpair (MHD_add_connection,
 * with the client's address, which it reports as the peer), and this
 * thread relays the bytes both ways, reading each request's head and
 * finding where its body ends (serve-frame.c) so that the next head is
 * judged too. On every request of a connection, the first or a later one
 * kept alive, it
 *
 *   - answers 400 once and closes after a request line that is not one
 *     (METHOD SP TARGET SP HTTP/1.x, visible ASCII): libmicrohttpd 0.9.75
 *     took "\x00\x01\x02\xff\r\n" for an empty line (it tests line[0]),
 *     skipped it and held the connection, unanswered, until its timeout;
 *   - answers 400 once to a Content-Length that is not a decimal number
 *     of at most 19 digits: libmicrohttpd 0.9.75 refuses -5, 12abc or
 *     2^64 itself, with its own HTML page, and sends that response's
 *     status line and headers twice (it builds them in its error path
 *     and again in its state machine); it never calls the handler, so the
 *     check has to come before it sees the head. So does a
 *     Transfer-Encoding other than chunked, or a folded header line
 *     (either leaves the body's end in doubt);
 *   - answers 431 to a head over 16 kB;
 *   - answers 408 and closes when a head is not in within
 *     --header-timeout (of the connect for the first request, of the
 *     head's first byte for a later one: slowloris, a byte a second,
 *     used to hold a connection as long as the client liked);
 *   - closes a connection whose body is not in within --body-timeout of
 *     its head (libmicrohttpd's answer could not come mid-upload anyway),
 *     or whose chunked body's framing breaks (see end_mid_body);
 *   - answers 503 (Retry-After: 1) and closes past --max-connections open
 *     connections, or --max-connections-per-ip from one address.
 * An answer of its own on a connection libmicrohttpd holds waits for the
 * answers to the requests before it: libmicrohttpd's side is half-closed
 * after the last good request, libmicrohttpd answers what it has and
 * closes, and then this answer goes out (so pipelined answers keep their
 * order, with no parsing of responses here). That leans on libmicrohttpd
 * answering a request whose connection was half-closed after it, which
 * 0.9.75 does only with a connection timeout other than its default
 * (serve-http.c sets one on every request: see on_request).
 *
 * Why a relay, not a watch over libmicrohttpd's own sockets (TCP_INFO's
 * byte counts for a request's start, its callbacks for the phases): that
 * could cut slow heads and bodies, but never stop libmicrohttpd from
 * answering a bad Content-Length twice or from holding a garbage line,
 * since it reads the head before anything can look at it. The relay
 * costs a copy each way and two socket hops per request (see README for
 * the figures); the buffers are bounded (IN_CAP + OUT_CAP a connection),
 * and a side that does not take bytes stops the reads from the other
 * (back-pressure, not buffering). */
#include "serve-frame.h"
#include "serve-head.h"
#include "serve-private.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#define IN_CAP (2 * HEAD_MAX) /* client bytes not yet passed on: a whole head fits */
#define OUT_CAP 32768         /* libmicrohttpd's bytes not yet sent to the client */
#define LINGER_S 1.0          /* after our last byte, what the client still sends is read
                                 and dropped this long (a close with unread bytes would
                                 reset the connection, the answer lost) */
#define DRAIN_S 30.0          /* libmicrohttpd's answers before one of ours, or what it
                                 left when it closed, reach the client within this (the
                                 stop's bound for answers in flight) */
#define SCAN_S 0.05           /* how often deadlines are looked at */
#define STOP_S 2.0            /* at the stop, for what libmicrohttpd left to send */
#define RUN_ROUNDS 16         /* reads of one connection in a row (512 kB) before the
                                 others get a turn: a client streaming a body as fast as
                                 loopback goes would hold the thread */

#define EV_LISTEN UINT64_MAX
#define EV_WAKE (UINT64_MAX - 1)

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
} conn;

/* ---- open connections per address ------------------------------------------------ */

/* The address without its port, as 16 bytes (IPv4 mapped). */
static void addr_key(const struct sockaddr *sa, unsigned char key[16]) {
  memset(key, 0, 16);
  if (sa->sa_family == AF_INET) {
    key[10] = key[11] = 0xff;
    memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
  }
}

/* Adds delta to the count of key's open connections; returns the new count. */
static int ip_count(serve_guard *g, const unsigned char key[16], int delta) {
  pthread_mutex_lock(&g->mu);
  int free_slot = -1, n = 0;
  for (int i = 0; i < g->n_ips; i++) {
    if (g->ips[i].count == 0) {
      if (free_slot < 0) free_slot = i;
      continue;
    }
    if (!memcmp(g->ips[i].key, key, 16)) {
      n = g->ips[i].count += delta;
      pthread_mutex_unlock(&g->mu);
      return n;
    }
  }
  if (delta > 0) {
    if (free_slot < 0 && g->n_ips < g->cap_ips) free_slot = g->n_ips++;
    if (free_slot >= 0) {
      memcpy(g->ips[free_slot].key, key, 16);
      n = g->ips[free_slot].count = delta;
    }
  }
  pthread_mutex_unlock(&g->mu);
  return n;
}

static void release(serve_guard *g, const struct sockaddr_storage *addr) {
  unsigned char key[16];
  addr_key((const struct sockaddr *)addr, key);
  ip_count(g, key, -1);
  atomic_fetch_sub(&g->open, 1);
}

/* ---- answers ---------------------------------------------------------------------- */

static size_t format_answer(char *out, size_t cap, int code, const char *reason,
                            const char *msg, const char *extra) {
  char body[400];
  int blen = snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
  int n = snprintf(out, cap, "HTTP/1.1 %d %s\r\nConnection: close\r\n%s"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                   code, reason, extra ? extra : "", blen, body);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* A connection refused as it is accepted (it holds no slot): what it sent
 * is read first, the answer sent, the socket closed. */
static void refuse_at_accept(serve_guard *g, int fd, const struct sockaddr_storage *addr,
                             const char *msg, serve_refused why) {
  char out[800], sink[4096];
  size_t n = format_answer(out, sizeof out, 503, "Service Unavailable", msg, "Retry-After: 1\r\n");
  while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {}
  if (n) (void)!send(fd, out, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  close(fd);
  release(g, addr);
  serve_metrics_response(g->metrics, 503);
  serve_metrics_refused(g->metrics, why);
}

/* Judged bad: nothing after the requests already passed on goes to
 * libmicrohttpd; the answer goes out once libmicrohttpd is done with
 * them (at once when it has none), then the connection closes. */
static void refuse(serve_guard *g, conn *c, int code, const char *reason, const char *msg,
                   serve_refused why) {
  c->answer_len = format_answer(c->answer, sizeof c->answer, code, reason, msg, NULL);
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
static void end_mid_body(conn *c) {
  double end = cli_mono_now() + LINGER_S;
  if (!c->end_deadline || end < c->end_deadline) c->end_deadline = end;
}

/* ---- connections ------------------------------------------------------------------ */

static void conn_kill(serve_guard *g, conn *c) {
  if (c->cfd >= 0) close(c->cfd); /* closing removes it from the epoll set */
  if (c->mfd >= 0) close(c->mfd);
  release(g, &c->addr);
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
static void conn_watch(serve_guard *g, conn *c) {
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
static bool hand_off(serve_guard *g, serve_server *srv, conn *c) {
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
static bool judge(serve_guard *g, serve_server *srv, conn *c) {
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
static void conn_run(serve_guard *g, serve_server *srv, conn *c) {
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
        conn_kill(g, c);
        return;
      }
    }
    if (judge(g, srv, c)) moved = true;
    if (c->dead || (c->mfd < 0 && c->c_eof && !c->refusing)) { /* or gone before a whole head */
      conn_kill(g, c);
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
        conn_kill(g, c);
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
      conn_kill(g, c);
      return;
    }
    if (!moved) break;
  }
  conn_watch(g, c);
}

/* Deadlines: a head late, 408; a body late, closed; an end that does not come, closed. */
static void scan(serve_guard *g, serve_server *srv, double now) {
  for (int i = 0; i < g->cap_conns; i++) {
    conn *c = g->conns[i];
    if (!c) continue;
    if (c->end_deadline && now >= c->end_deadline) {
      conn_kill(g, c);
      continue;
    }
    if (c->refusing) continue;
    if (c->frame.phase == FRAME_HEAD && c->head_deadline && now >= c->head_deadline) {
      refuse(g, c, 408, "Request Timeout", "the request's head did not come in time "
             "(--header-timeout)", SERVE_REFUSED_HEADER_TIMEOUT);
      conn_run(g, srv, c);
    } else if (c->frame.phase != FRAME_HEAD && c->body_deadline && now >= c->body_deadline) {
      /* libmicrohttpd cannot answer in the middle of an upload */
      serve_metrics_response(g->metrics, 408);
      conn_kill(g, c);
    }
  }
}

static void accept_all(serve_guard *g, serve_server *srv) {
  for (;;) {
    struct sockaddr_storage addr;
    socklen_t alen = sizeof addr;
    int fd = accept4(g->listen_fd, (struct sockaddr *)&addr, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    unsigned char key[16];
    addr_key((struct sockaddr *)&addr, key);
    int total = atomic_fetch_add(&g->open, 1) + 1;
    int from_ip = ip_count(g, key, 1);
    if (total > srv->http.max_connections || g->n_conns >= g->cap_conns) {
      refuse_at_accept(g, fd, &addr, "too many connections (--max-connections): retry shortly",
                       SERVE_REFUSED_LIMIT);
      continue;
    }
    if (from_ip > srv->http.max_connections_per_ip) {
      refuse_at_accept(g, fd, &addr, "too many connections from this address "
                       "(--max-connections-per-ip): retry shortly", SERVE_REFUSED_PER_IP);
      continue;
    }
    conn *c = malloc(sizeof *c);
    int slot = 0;
    while (slot < g->cap_conns && g->conns[slot]) slot++;
    if (!c || slot == g->cap_conns) {
      free(c);
      close(fd);
      release(g, &addr);
      continue;
    }
    memset(c, 0, offsetof(conn, in));
    c->slot = slot;
    c->cfd = fd;
    c->mfd = -1;
    c->addr = addr;
    c->alen = alen;
    c->c_rd = c->c_wr = true; /* until a call says otherwise */
    c->head_deadline = cli_mono_now() + srv->http.header_timeout_s;
    c->frame.phase = FRAME_HEAD;
    /* the relay writes answers in the pieces it reads them: no Nagle wait
     * for the client's delayed ACK between a head and its body */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    g->conns[slot] = c;
    g->n_conns++;
    conn_run(g, srv, c);
  }
}

static void on_event(serve_guard *g, serve_server *srv, const struct epoll_event *ev) {
  conn *c = g->conns[ev->data.u64 >> 1];
  if (!c) return; /* closed earlier in this batch */
  bool rd = ev->events & (EPOLLIN | EPOLLHUP | EPOLLERR);
  bool wr = ev->events & (EPOLLOUT | EPOLLHUP | EPOLLERR);
  bool hup = ev->events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
  if (ev->data.u64 & 1) {
    c->m_rd |= rd || hup;
    c->m_wr |= wr;
    c->m_hup |= hup;
  } else {
    c->c_rd |= rd || hup;
    c->c_wr |= wr;
    c->c_hup |= hup;
  }
  conn_run(g, srv, c);
}

static void *guard_main(void *arg) {
  serve_server *srv = arg;
  serve_guard *g = &srv->guard;
  struct epoll_event evs[64];
  double next_scan = 0, stop_at = 0;
  for (;;) {
    if (atomic_load(&g->no_handoff) && !atomic_load(&g->no_handoff_ack)) {
      epoll_ctl(g->epoll_fd, EPOLL_CTL_DEL, g->listen_fd, NULL);
      for (int i = 0; i < g->cap_conns; i++) /* those libmicrohttpd never had */
        if (g->conns[i] && g->conns[i]->mfd < 0) conn_kill(g, g->conns[i]);
      atomic_store(&g->no_handoff_ack, true);
    }
    double now = cli_mono_now();
    if (atomic_load(&g->stopping)) {
      if (!stop_at) stop_at = now + STOP_S;
      if (!g->n_conns || now >= stop_at) break;
    }
    int wait_ms = g->n_again ? 0 : g->n_conns ? (int)(SCAN_S * 1000) + 1 : 1000;
    int n = epoll_wait(g->epoll_fd, evs, 64, wait_ms);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; i++) {
      if (evs[i].data.u64 == EV_WAKE) {
        char sink[64];
        while (read(g->wake[0], sink, sizeof sink) > 0) {}
      } else if (evs[i].data.u64 == EV_LISTEN) {
        if (!atomic_load(&g->no_handoff)) accept_all(g, srv);
      } else {
        on_event(g, srv, &evs[i]);
      }
    }
    int n_again = g->n_again; /* those that used their rounds, once each */
    g->n_again = 0;
    memcpy(g->again_run, g->again, sizeof *g->again * (size_t)n_again);
    for (int i = 0; i < n_again; i++) {
      conn *c = g->conns[g->again_run[i]];
      if (c && c->again) {
        c->again = false;
        conn_run(g, srv, c);
      }
    }
    now = cli_mono_now();
    if (now >= next_scan) {
      scan(g, srv, now);
      next_scan = now + SCAN_S;
    }
  }
  for (int i = 0; i < g->cap_conns; i++)
    if (g->conns[i]) conn_kill(g, g->conns[i]);
  atomic_store(&g->no_handoff_ack, true); /* whoever waits for it, if it ended first */
  return NULL;
}

/* ---- start, stop -------------------------------------------------------------- */

em_status serve_guard_listen(serve_server *srv, em_error *err) {
  serve_guard *g = &srv->guard;
  g->listen_fd = g->wake[0] = g->wake[1] = g->epoll_fd = -1;
  char port[16];
  snprintf(port, sizeof port, "%d", srv->http.port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE}, *ai = NULL;
  int rc = getaddrinfo(srv->http.host, port, &hints, &ai);
  if (rc != 0)
    return em_error_set(err, EM_ERR_INVALID, "cannot listen on host '%s': %s", srv->http.host,
                        gai_strerror(rc));
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd >= 0 && ai->ai_family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  bool ok = fd >= 0 && bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0;
  freeaddrinfo(ai);
  if (!ok) {
    if (fd >= 0) close(fd);
    return em_error_set(err, EM_ERR_IO, "cannot listen on %s port %d (in use? try --port 0 "
                        "for any free port)", srv->http.host, srv->http.port);
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  getsockname(fd, (struct sockaddr *)&ss, &sl);
  srv->bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
  g->listen_fd = fd;
  g->metrics = &srv->metrics;
  g->cap_conns = srv->http.max_connections + 1;
  g->cap_ips = srv->http.max_connections + 1;
  g->conns = calloc((size_t)g->cap_conns, sizeof *g->conns);
  g->again = calloc((size_t)g->cap_conns, sizeof *g->again);
  g->again_run = calloc((size_t)g->cap_conns, sizeof *g->again_run);
  g->ips = calloc((size_t)g->cap_ips, sizeof *g->ips);
  pthread_mutex_init(&g->mu, NULL);
  if (!g->conns || !g->again || !g->again_run || !g->ips || pipe2(g->wake, O_CLOEXEC | O_NONBLOCK) != 0 ||
      (g->epoll_fd = epoll_create1(EPOLL_CLOEXEC)) < 0)
    return em_error_set(err, EM_ERR_IO, "out of memory for the connection table");
  struct epoll_event lev = {.events = EPOLLIN, .data.u64 = EV_LISTEN};
  struct epoll_event wev = {.events = EPOLLIN, .data.u64 = EV_WAKE};
  if (epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, fd, &lev) != 0 ||
      epoll_ctl(g->epoll_fd, EPOLL_CTL_ADD, g->wake[0], &wev) != 0)
    return em_error_set(err, EM_ERR_IO, "cannot watch the listening socket: %s",
                        strerror(errno));
  return EM_OK;
}

em_status serve_guard_start(serve_server *srv, em_error *err) {
  serve_guard *g = &srv->guard;
  atomic_store(&g->stopping, false);
  atomic_store(&g->no_handoff, false);
  atomic_store(&g->no_handoff_ack, false);
  if (pthread_create(&g->thread, NULL, guard_main, srv) != 0)
    return em_error_set(err, EM_ERR_IO, "could not start the connection thread");
  g->started = true;
  return EM_OK;
}

void serve_guard_stop_handoff(serve_server *srv) {
  serve_guard *g = &srv->guard;
  if (!g->started) return;
  atomic_store(&g->no_handoff, true);
  (void)!write(g->wake[1], "x", 1);
  while (!atomic_load(&g->no_handoff_ack)) usleep(1000);
}

void serve_guard_stop(serve_server *srv) {
  serve_guard *g = &srv->guard;
  if (g->started) {
    atomic_store(&g->stopping, true);
    (void)!write(g->wake[1], "x", 1);
    pthread_join(g->thread, NULL);
    g->started = false;
  }
  if (g->listen_fd >= 0) close(g->listen_fd);
  if (g->epoll_fd >= 0) close(g->epoll_fd);
  if (g->wake[0] >= 0) close(g->wake[0]);
  if (g->wake[1] >= 0) close(g->wake[1]);
  g->listen_fd = g->epoll_fd = g->wake[0] = g->wake[1] = -1;
}

void serve_guard_free(serve_server *srv) {
  serve_guard *g = &srv->guard;
  free(g->conns);
  free(g->again);
  free(g->again_run);
  free(g->ips);
  g->again = g->again_run = NULL;
  g->conns = NULL;
  g->ips = NULL;
}
