/* pool2d.c: placeholder until its owner lands the real op. */
#include "ops-private.h"

em_tensor *em_max_pool2d(em_tensor *x, const em_pool2d_params *p) {
  (void)x;
  (void)p;
  EM_ASSERT(!"op pending");
}

em_tensor *em_avg_pool2d(em_tensor *x, const em_pool2d_params *p) {
  (void)x;
  (void)p;
  EM_ASSERT(!"op pending");
}
