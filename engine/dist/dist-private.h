/* dist-private.h: what the files of engine/dist share. */
#pragma once

#include "em-dist.h"

struct em_comm {
  const em_comm_vtable *vt;
  void *ctx;
  int rank, world;
  em_device device; /* where its buffers live (em_comm_device); the CPU
                       unless the implementation sets it after em_comm_new */
  double timeout_s;
  const atomic_bool *cancel;
  /* what the other ranks said (comm-notice.c) */
  struct em_comm_peer *peers; /* (world) */
  int busy;                   /* peers busy now */
  int failed;                 /* the first peer heard failing, or -1 */
  bool ended;                 /* rank 0's ending arrived */
  em_comm_ending ending;
};

typedef struct em_comm_peer {
  bool busy, done, failed;
  int code;
  em_status status;
  char msg[1024];
} em_comm_peer;

/* Takes every notice that arrived; EM_OK unless the side channel fails. */
em_status em_comm_take_notices(em_comm *c, em_error *err);

/* Monotonic seconds. */
double em_dist_now(void);

#define EM_DIST_TRY(x)             \
  do {                             \
    em_status st_ = (x);           \
    if (st_ != EM_OK) return st_;  \
  } while (0)
