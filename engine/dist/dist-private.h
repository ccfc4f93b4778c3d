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
};

/* Monotonic seconds. */
double em_dist_now(void);

#define EM_DIST_TRY(x)             \
  do {                             \
    em_status st_ = (x);           \
    if (st_ != EM_OK) return st_;  \
  } while (0)
