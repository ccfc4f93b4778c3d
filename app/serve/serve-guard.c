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
 *     or whose chunked body's framing breaks (serve-relay.c, end_mid_body);
 *   - answers 503 (Retry-After: 1) and closes past --max-connections open
 *     connections, or --max-connections-per-ip from one address (as it
 *     accepts them, here).
 * (An answer of its own comes after libmicrohttpd's answers to the
 * requests before it: serve-relay.c.)
 *
 * Why a relay, not a watch over libmicrohttpd's own sockets (TCP_INFO's
 * byte counts for a request's start, its callbacks for the phases): that
 * could cut slow heads and bodies, but never stop libmicrohttpd from
 * answering a bad Content-Length twice or from holding a garbage line,
 * since it reads the head before anything can look at it. The relay
 * costs a copy each way and two socket hops per request (see README for
 * the figures).
 *
 * This file holds the listening socket, the limits, the thread and its
 * loop; a connection's relay (its buffers, its requests' heads and bodies,
 * its answers and deadlines) is serve-relay.c. */
#include "serve-relay.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define SCAN_S 0.05 /* how often deadlines are looked at */
#define STOP_S 2.0  /* at the stop, for what libmicrohttpd left to send */

#define EV_LISTEN UINT64_MAX
#define EV_WAKE (UINT64_MAX - 1)

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

void serve_guard_release(serve_guard *g, const struct sockaddr_storage *addr) {
  unsigned char key[16];
  addr_key((const struct sockaddr *)addr, key);
  ip_count(g, key, -1);
  atomic_fetch_sub(&g->open, 1);
}

/* ---- the thread ---------------------------------------------------------------- */

/* A connection refused as it is accepted (it holds no slot): what it sent
 * is read first, the answer sent, the socket closed. */
static void refuse_at_accept(serve_guard *g, int fd, const struct sockaddr_storage *addr,
                             const char *msg, serve_refused why) {
  char out[800], sink[4096];
  size_t n = serve_answer_format(out, sizeof out, 503, "Service Unavailable", msg,
                                 "Retry-After: 1\r\n");
  while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {}
  if (n) (void)!send(fd, out, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  close(fd);
  serve_guard_release(g, addr);
  serve_metrics_response(g->metrics, 503);
  serve_metrics_refused(g->metrics, why);
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
    int slot = 0;
    while (slot < g->cap_conns && g->conns[slot]) slot++;
    serve_conn *c = slot < g->cap_conns ? serve_conn_new(slot, fd, &addr, alen) : NULL;
    if (!c) {
      close(fd);
      serve_guard_release(g, &addr);
      continue;
    }
    c->head_deadline = cli_mono_now() + srv->http.header_timeout_s;
    g->conns[slot] = c;
    g->n_conns++;
    serve_conn_run(g, srv, c);
  }
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
        if (g->conns[i] && g->conns[i]->mfd < 0) serve_conn_kill(g, g->conns[i]);
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
      } else if (g->conns[evs[i].data.u64 >> 1]) { /* else closed earlier in this batch */
        serve_conn_event(g, srv, g->conns[evs[i].data.u64 >> 1], evs[i].events,
                         evs[i].data.u64 & 1);
      }
    }
    int n_again = g->n_again; /* those that used their rounds, once each */
    g->n_again = 0;
    memcpy(g->again_run, g->again, sizeof *g->again * (size_t)n_again);
    for (int i = 0; i < n_again; i++) {
      serve_conn *c = g->conns[g->again_run[i]];
      if (c && c->again) {
        c->again = false;
        serve_conn_run(g, srv, c);
      }
    }
    now = cli_mono_now();
    if (now >= next_scan) {
      serve_conns_scan(g, srv, now);
      next_scan = now + SCAN_S;
    }
  }
  for (int i = 0; i < g->cap_conns; i++)
    if (g->conns[i]) serve_conn_kill(g, g->conns[i]);
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
