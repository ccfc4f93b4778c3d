/* sdpa-composed.c: em_sdpa composed of the existing ops (matmul,
 * masked_fill, softmax, dropout, matmul), the (N, H, L, S) scores kept for
 * backward. A stand-in for the fused kernel (engine/ops/sdpa.c, to
 * come) with the same contract (em-ops.h). */
#include "em-ops.h"

#include <math.h>
#include <string.h>

#include "em-device.h"

em_tensor *em_sdpa(em_tensor *q, em_tensor *k, em_tensor *v, const em_sdpa_params *p) {
  int64_t N = q->shape[0], L = q->shape[2], S = k->shape[2], E = q->shape[3];
  double scale = p->scale > 0 ? p->scale : 1.0 / sqrt((double)E);
  em_tensor *s = em_mul_scalar(em_matmul(q, em_transpose(k, 2, 3)), scale); /* (N, H, L, S) */
  em_tensor *mask = NULL;
  if (p->causal || p->key_padding_mask) {
    int64_t ms[4] = {N, 1, L, S};
    mask = em_zeros(EM_DTYPE_U8, 4, ms);
    uint8_t *m = em_tensor_ptr(mask);
    const em_tensor *kp = p->key_padding_mask ? em_to_device((em_tensor *)p->key_padding_mask, em_device_cpu())
                                              : NULL;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < S; j++) {
          bool off = p->causal && j > i + S - L;
          if (kp) off |= ((const uint8_t *)kp->data)[kp->offset + n * kp->stride[0] +
                                                     j * kp->stride[1]] != 0;
          m[(n * L + i) * S + j] = off;
        }
    if (em_on_device(q)) mask = em_to_device(mask, q->device);
    s = em_masked_fill(s, mask, -INFINITY);
  }
  em_tensor *a = em_softmax(s, 3);
  if (mask) a = em_masked_fill(a, mask, 0.0); /* a fully masked row: NaN -> 0 */
  if (p->training && p->dropout_p > 0) a = em_dropout(a, p->dropout_p, true, p->rng);
  return em_matmul(a, v);
}
