/* reduce.c: placeholder until its owner lands the real op. */
#include "ops-private.h"

em_tensor *em_sum(em_tensor *x, int dim, bool keepdim) {
  (void)x;
  (void)dim;
  (void)keepdim;
  EM_ASSERT(!"op pending");
}

em_tensor *em_mean(em_tensor *x, int dim, bool keepdim) {
  (void)x;
  (void)dim;
  (void)keepdim;
  EM_ASSERT(!"op pending");
}

em_tensor *em_sum_all(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_mean_all(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_max(em_tensor *x, int dim, bool keepdim, em_tensor **argmax) {
  (void)x;
  (void)dim;
  (void)keepdim;
  (void)argmax;
  EM_ASSERT(!"op pending");
}

em_tensor *em_argmax(em_tensor *x, int dim, bool keepdim) {
  (void)x;
  (void)dim;
  (void)keepdim;
  EM_ASSERT(!"op pending");
}
