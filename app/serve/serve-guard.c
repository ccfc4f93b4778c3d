/* serve-guard.c: the front door. One thread owns the listening socket and
 * holds each new connection until the head of its first request is in,
 * then hands it to libmicrohttpd (MHD_add_connection). On the way it
 *
 *   - answers 503 (Retry-After: 1) and closes past --max-connections open
 *     connections, or --max-connections-per-ip from one address;
 *   - answers 400 once and closes a request line that is not one
 *     (METHOD SP TARGET SP HTTP/1.x, visible ASCII): libmicrohttpd 0.9.75
 *     took "\x00\x01\x02\xff\r\n" for an empty line (it tests line[0]),
 *     skipped it and held the connection, unanswered, until its idle
 *     timeout;
 *   - answers 400 once to a Content-Length that is not a decimal number
 *     of at most 19 digits: libmicrohttpd 0.9.75 refuses -5, 12abc or
 *     2^64 itself, with its own HTML page, and sends that response's
 *     status line and headers twice (it builds them in its error path
 *     and again in its state machine); it never calls the handler, so the
 *     check has to come before it sees the request;
 *   - closes (408) a connection whose head is not in within
 *     --header-timeout (slowloris: one byte a second used to hold a
 *     connection as long as the client liked).
 *
 * It reads nothing: the head is looked at with MSG_PEEK, and SO_RCVLOWAT
 * (one byte more than was seen) keeps poll from waking until more comes.
 * Later requests on a kept-alive connection are libmicrohttpd's alone:
 * its idle timeout bounds them, not the header deadline. */
#include "serve-head.h"
#include "serve-private.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

typedef struct serve_pending {
  int fd;
  struct sockaddr_storage addr;
  socklen_t alen;
  double deadline;
  size_t seen; /* bytes peeked so far */
} pending;

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

/* libmicrohttpd's notice that a connection it was handed closed. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  serve_server *srv = cls;
  (void)socket_context;
  if (code != MHD_CONNECTION_NOTIFY_CLOSED) return;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  if (ci && ci->client_addr) {
    unsigned char key[16];
    addr_key(ci->client_addr, key);
    ip_count(&srv->guard, key, -1);
  }
  atomic_fetch_sub(&srv->guard.open, 1);
}

/* ---- raw answers -------------------------------------------------------------------- */

/* Sends a short answer and closes: what the client sent is read first
 * (closing with unread data would reset the connection, the answer lost). */
static void answer_close(serve_guard *g, pending *p, int code, const char *reason,
                         const char *msg, const char *extra) {
  char body[400], out[800];
  int blen = snprintf(body, sizeof body, "{\"error\":\"%s\"}", msg);
  int n = snprintf(out, sizeof out, "HTTP/1.1 %d %s\r\nConnection: close\r\n%s"
                   "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                   code, reason, extra ? extra : "", blen, body);
  char sink[4096];
  while (recv(p->fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {}
  if (n > 0) (void)!send(p->fd, out, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
  shutdown(p->fd, SHUT_WR);
  close(p->fd);
  unsigned char key[16];
  addr_key((struct sockaddr *)&p->addr, key);
  ip_count(g, key, -1);
  atomic_fetch_sub(&g->open, 1);
  serve_metrics_response(g->metrics, code);
  p->fd = -1;
}

/* ---- the thread ---------------------------------------------------------------- */

static void accept_all(serve_guard *g, serve_server *srv) {
  for (;;) {
    pending p = {.alen = sizeof p.addr};
    p.fd = accept4(g->listen_fd, (struct sockaddr *)&p.addr, &p.alen,
                   SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (p.fd < 0) return;
    p.deadline = cli_mono_now() + srv->http.header_timeout_s;
    unsigned char key[16];
    addr_key((struct sockaddr *)&p.addr, key);
    int total = atomic_fetch_add(&g->open, 1) + 1;
    int from_ip = ip_count(g, key, 1);
    if (total > srv->http.max_connections || g->n_pending >= g->cap_pending) {
      answer_close(g, &p, 503, "Service Unavailable", "too many connections "
                   "(--max-connections): retry shortly", "Retry-After: 1\r\n");
      serve_metrics_refused(g->metrics, SERVE_REFUSED_LIMIT);
      continue;
    }
    if (from_ip > srv->http.max_connections_per_ip) {
      answer_close(g, &p, 503, "Service Unavailable", "too many connections from this "
                   "address (--max-connections-per-ip): retry shortly", "Retry-After: 1\r\n");
      serve_metrics_refused(g->metrics, SERVE_REFUSED_PER_IP);
      continue;
    }
    g->pending[g->n_pending++] = p;
  }
}

/* Looks at p's head; hands it on or answers it. */
static void look(serve_guard *g, serve_server *srv, pending *p) {
  char buf[HEAD_MAX];
  ssize_t n = recv(p->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    close(p->fd); /* gone before a request */
    unsigned char key[16];
    addr_key((struct sockaddr *)&p->addr, key);
    ip_count(g, key, -1);
    atomic_fetch_sub(&g->open, 1);
    p->fd = -1;
    return;
  }
  if (n < 0) return;
  switch (serve_look_at_head(buf, (size_t)n)) {
  case HEAD_MORE: {
    p->seen = (size_t)n;
    int lowat = (int)n + 1; /* poll wakes when more has come */
    setsockopt(p->fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
    return;
  }
  case HEAD_BAD_LINE:
    answer_close(g, p, 400, "Bad Request", "the request line is not METHOD TARGET HTTP/1.x "
                 "in visible ASCII", NULL);
    serve_metrics_refused(g->metrics, SERVE_REFUSED_BAD_REQUEST);
    return;
  case HEAD_BAD_LENGTH:
    answer_close(g, p, 400, "Bad Request", "Content-Length is not a decimal number of at most "
                 "19 digits", NULL);
    serve_metrics_refused(g->metrics, SERVE_REFUSED_BAD_REQUEST);
    return;
  case HEAD_TOO_BIG:
    answer_close(g, p, 431, "Request Header Fields Too Large", "the request's head is over "
                 "16384 bytes", NULL);
    serve_metrics_refused(g->metrics, SERVE_REFUSED_BAD_REQUEST);
    return;
  case HEAD_OK: break;
  }
  int one = 1;
  setsockopt(p->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
  /* libmicrohttpd owns it from here (and closes it on failure); its close
   * notice gives back the counts */
  if (MHD_add_connection(srv->daemon, p->fd, (struct sockaddr *)&p->addr, p->alen) != MHD_YES) {
    unsigned char key[16];
    addr_key((struct sockaddr *)&p->addr, key);
    ip_count(g, key, -1);
    atomic_fetch_sub(&g->open, 1);
  }
  p->fd = -1;
}

static void *guard_main(void *arg) {
  serve_server *srv = arg;
  serve_guard *g = &srv->guard;
  struct pollfd *fds = malloc(sizeof *fds * (size_t)(g->cap_pending + 2));
  if (!fds) return NULL;
  while (!atomic_load(&g->stopping)) {
    fds[0] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
    fds[1] = (struct pollfd){.fd = g->listen_fd, .events = POLLIN};
    double now = cli_mono_now(), next = now + 1;
    for (int i = 0; i < g->n_pending; i++) {
      fds[i + 2] = (struct pollfd){.fd = g->pending[i].fd, .events = POLLIN};
      if (g->pending[i].deadline < next) next = g->pending[i].deadline;
    }
    int ms = next > now ? (int)((next - now) * 1000) + 1 : 0;
    int n = poll(fds, (nfds_t)g->n_pending + 2, ms);
    if (n < 0 && errno != EINTR) break;
    if (atomic_load(&g->stopping)) break;
    int n_before = g->n_pending;
    now = cli_mono_now();
    for (int i = 0; i < n_before; i++) {
      pending *p = &g->pending[i];
      if (fds[i + 2].revents) look(g, srv, p);
      if (p->fd >= 0 && now >= p->deadline) {
        answer_close(g, p, 408, "Request Timeout", "the request's head did not come in "
                     "time (--header-timeout)", NULL);
        serve_metrics_refused(g->metrics, SERVE_REFUSED_HEADER_TIMEOUT);
      }
    }
    int w = 0; /* keep those still waiting */
    for (int i = 0; i < g->n_pending; i++)
      if (g->pending[i].fd >= 0) g->pending[w++] = g->pending[i];
    g->n_pending = w;
    if (fds[1].revents) accept_all(g, srv);
  }
  for (int i = 0; i < g->n_pending; i++) close(g->pending[i].fd);
  g->n_pending = 0;
  free(fds);
  return NULL;
}

/* ---- start, stop -------------------------------------------------------------- */

em_status serve_guard_listen(serve_server *srv, em_error *err) {
  serve_guard *g = &srv->guard;
  g->listen_fd = g->wake[0] = g->wake[1] = -1;
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
  g->cap_pending = srv->http.max_connections + 1;
  g->cap_ips = srv->http.max_connections + 1;
  g->pending = calloc((size_t)g->cap_pending, sizeof *g->pending);
  g->ips = calloc((size_t)g->cap_ips, sizeof *g->ips);
  if (!g->pending || !g->ips || pipe2(g->wake, O_CLOEXEC) != 0)
    return em_error_set(err, EM_ERR_IO, "out of memory for the connection table");
  pthread_mutex_init(&g->mu, NULL);
  return EM_OK;
}

void *serve_guard_notify(void) { return (void *)on_connection; }

em_status serve_guard_start(serve_server *srv, em_error *err) {
  serve_guard *g = &srv->guard;
  atomic_store(&g->stopping, false);
  if (pthread_create(&g->thread, NULL, guard_main, srv) != 0)
    return em_error_set(err, EM_ERR_IO, "could not start the connection thread");
  g->started = true;
  return EM_OK;
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
  if (g->wake[0] >= 0) close(g->wake[0]);
  if (g->wake[1] >= 0) close(g->wake[1]);
  g->listen_fd = g->wake[0] = g->wake[1] = -1;
}

void serve_guard_free(serve_server *srv) {
  serve_guard *g = &srv->guard;
  free(g->pending);
  free(g->ips);
  g->pending = NULL;
  g->ips = NULL;
}
