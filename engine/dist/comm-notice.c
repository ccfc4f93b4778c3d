/* comm-notice.c: what ranks say to each other beside the collectives.
 *
 * Collectives cannot tell a rank why a peer is late: a peer that failed
 * never joins, one that writes a checkpoint joins in a minute, one that
 * froze never does. Notices carry that: FAIL (the peer's message, so
 * that rank 0 can record it and everyone stops waiting), BUSY and IDLE
 * (rank 0 writing a checkpoint or finishing the run: wait for it without
 * the timeout), DONE (how a rank ends, to rank 0) and END (the job's
 * ending, from rank 0). They travel on the implementation's side channel
 * (MPI: point-to-point on a duplicate of the job's communicator, so they
 * never match a collective). */
#include "dist-private.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N_FAIL = 1, N_BUSY, N_IDLE, N_DONE, N_END };

typedef struct {
  int32_t kind, code, status, failed;
  char msg[1024];
} notice;

_Static_assert(sizeof(notice) <= EM_COMM_NOTICE_MAX, "a notice must fit the side channel");

static em_comm_peer *peers(em_comm *c) {
  if (!c->peers) c->peers = calloc((size_t)c->world, sizeof *c->peers);
  return c->peers; /* NULL when out of memory: nothing is kept */
}

static void say(em_comm *c, int to, int kind, int code, bool failed, em_status st,
                const char *msg) {
  if (!c->vt->notify || to == c->rank) return;
  notice n;
  memset(&n, 0, sizeof n);
  n.kind = kind;
  n.code = code;
  n.failed = failed;
  n.status = (int32_t)st;
  snprintf(n.msg, sizeof n.msg, "%s", msg ? msg : "");
  /* a notice that cannot be sent is not worth failing for: the peers
   * then learn it from their timeout */
  c->vt->notify(c->ctx, to, &n, (int)sizeof n, NULL);
}

static void say_all(em_comm *c, int kind, int code, bool failed, em_status st, const char *msg) {
  for (int r = 0; r < c->world; r++) say(c, r, kind, code, failed, st, msg);
}

em_status em_comm_take_notices(em_comm *c, em_error *err) {
  if (!c->vt->poll) return EM_OK;
  for (;;) {
    notice n;
    int from = -1;
    bool got = false;
    EM_DIST_TRY(c->vt->poll(c->ctx, &n, (int)sizeof n, &from, &got, err));
    if (!got) return EM_OK;
    em_comm_peer *p = peers(c);
    if (!p || from < 0 || from >= c->world) continue;
    n.msg[sizeof n.msg - 1] = '\0';
    em_comm_peer *q = &p[from];
    switch (n.kind) {
    case N_FAIL:
      if (!q->failed) {
        q->failed = true;
        q->status = n.status != EM_OK ? (em_status)n.status : EM_ERR_IO;
        snprintf(q->msg, sizeof q->msg, "%s", n.msg);
      }
      if (c->failed < 0) c->failed = from;
      if (q->busy) c->busy--; /* a failed peer is not busy */
      q->busy = false;
      break;
    case N_IDLE:
      if (q->busy) c->busy--;
      q->busy = false;
      break;
    case N_BUSY:
      if (!q->busy) c->busy++;
      q->busy = true;
      break;
    case N_DONE:
      q->done = true;
      q->code = n.code;
      if (n.failed) {
        q->failed = true;
        if (n.msg[0]) snprintf(q->msg, sizeof q->msg, "%s", n.msg);
      }
      if (q->busy) c->busy--;
      q->busy = false;
      break;
    case N_END:
      c->ended = true;
      c->ending.code = n.code;
      c->ending.failed = n.failed;
      if (q->busy) c->busy--;
      q->busy = false;
      break;
    default:
      break;
    }
  }
}

void em_comm_say_failed(em_comm *c, const em_error *e) {
  if (!c || c->world < 2) return;
  say_all(c, N_FAIL, 0, true, e ? e->status : EM_ERR_IO,
          e && e->msg[0] ? e->msg : "it failed (no message)");
}

void em_comm_say_busy(em_comm *c, bool busy) {
  if (c && c->world > 1) say_all(c, busy ? N_BUSY : N_IDLE, 0, false, EM_OK, NULL);
}

int em_comm_peer_failed(const em_comm *c) { return c ? c->failed : -1; }

static void nap(void) {
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
}

/* Rank 0: every rank's DONE (bounded by the timeout), then the ending. */
static void end_rank0(em_comm *c, int code, bool failed, em_comm_failure_fn report, void *user,
                      em_comm_ending *out) {
  em_comm_peer *p = peers(c);
  double deadline = em_dist_now() + c->timeout_s;
  for (;;) {
    em_error e = {0};
    if (em_comm_take_notices(c, &e) != EM_OK) break;
    int waiting = 0;
    for (int r = 1; p && r < c->world; r++) waiting += !p[r].done;
    if (!p || !waiting || em_dist_now() > deadline) break;
    nap();
  }
  out->code = failed ? code : 0;
  out->failed = failed;
  bool stopped = !failed && code != 0;
  for (int r = 1; r < c->world; r++) {
    em_comm_peer *q = p ? &p[r] : NULL;
    if (!q || !q->done) {
      char msg[160];
      snprintf(msg, sizeof msg, "rank %d did not say how it ended within %g s", r, c->timeout_s);
      if (report) report(user, r, msg);
      if (!out->failed) out->code = 1;
      out->failed = true;
      continue;
    }
    if (q->failed) {
      if (report) report(user, r, q->msg);
      if (!out->failed) out->code = q->code ? q->code : 1;
      out->failed = true;
    } else if (!out->failed && !stopped && out->code == 0 && q->code != 0) {
      out->code = q->code; /* a stop by a signal that reached only that rank */
    }
  }
  if (!out->failed && stopped) out->code = code;
  say_all(c, N_END, out->code, out->failed, EM_OK, NULL);
}

void em_comm_end(em_comm *c, int code, bool failed, const char *msg, em_comm_failure_fn report,
                 void *user, em_comm_ending *out) {
  *out = (em_comm_ending){.code = code, .failed = failed, .heard = true};
  if (!c || c->world < 2 || !c->vt->notify) return;
  if (c->rank == 0) {
    end_rank0(c, code, failed, report, user, out);
    return;
  }
  say(c, 0, N_DONE, code, failed, EM_OK, msg);
  double deadline = em_dist_now() + c->timeout_s;
  for (;;) {
    em_error e = {0};
    if (em_comm_take_notices(c, &e) != EM_OK) break;
    if (c->ended) {
      *out = c->ending;
      out->heard = true;
      return;
    }
    double now = em_dist_now();
    if (c->busy > 0) deadline = now + c->timeout_s; /* rank 0 is finishing the run */
    if (now > deadline) break;
    nap();
  }
  out->heard = false;
  out->failed = true;
  if (!failed) out->code = 1;
}
