/* softmax.c: placeholder until its owner lands the real op. */
#include "ops-private.h"

em_tensor *em_softmax(em_tensor *x, int dim) {
  (void)x;
  (void)dim;
  EM_ASSERT(!"op pending");
}

em_tensor *em_log_softmax(em_tensor *x, int dim) {
  (void)x;
  (void)dim;
  EM_ASSERT(!"op pending");
}
