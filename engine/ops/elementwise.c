/* elementwise.c: placeholder until its owner lands the real op. */
#include "ops-private.h"

em_tensor *em_add(em_tensor *a, em_tensor *b) {
  (void)a;
  (void)b;
  EM_ASSERT(!"op pending");
}

em_tensor *em_sub(em_tensor *a, em_tensor *b) {
  (void)a;
  (void)b;
  EM_ASSERT(!"op pending");
}

em_tensor *em_mul(em_tensor *a, em_tensor *b) {
  (void)a;
  (void)b;
  EM_ASSERT(!"op pending");
}

em_tensor *em_div(em_tensor *a, em_tensor *b) {
  (void)a;
  (void)b;
  EM_ASSERT(!"op pending");
}

em_tensor *em_add_scalar(em_tensor *x, double s) {
  (void)x;
  (void)s;
  EM_ASSERT(!"op pending");
}

em_tensor *em_mul_scalar(em_tensor *x, double s) {
  (void)x;
  (void)s;
  EM_ASSERT(!"op pending");
}

em_tensor *em_pow_scalar(em_tensor *x, double p) {
  (void)x;
  (void)p;
  EM_ASSERT(!"op pending");
}

em_tensor *em_neg(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}
