/* unary.c: placeholder until its owner lands the real op. */
#include "ops-private.h"

em_tensor *em_exp(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_log(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_sqrt(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_abs(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_clamp(em_tensor *x, double lo, double hi) {
  (void)x;
  (void)lo;
  (void)hi;
  EM_ASSERT(!"op pending");
}

em_tensor *em_relu(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_gelu(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_silu(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_sigmoid(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}

em_tensor *em_tanh(em_tensor *x) {
  (void)x;
  EM_ASSERT(!"op pending");
}
