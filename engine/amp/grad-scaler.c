/* grad-scaler.c: the dynamic loss scaler, with the rules of PyTorch's
 * torch.cuda.amp.GradScaler (_amp_foreach_non_finite_check_and_unscale_
 * and _amp_update_scale_): unscale by the f32 of 1/scale, skip the step
 * on any Inf/NaN and halve the scale, double it after growth_interval
 * clean steps when the result is finite. Gradients on a device are
 * unscaled there (the backend's unscale kernel, which also flags a
 * non-finite value in a one-element device tensor read back once). */
#include "em-amp.h"

#include <math.h>

#include "em-backend.h"

/* Unscales the device gradients among grads (all on one device) and
 * returns whether any held an Inf or NaN. */
static bool unscale_on_device(int n, em_tensor *const *grads, float inv) {
  em_tensor *first = NULL;
  for (int i = 0; i < n && !first; i++)
    if (grads[i] && em_on_device(grads[i])) first = grads[i];
  if (!first) return false;
  em_scope *sc = em_scope_begin();
  const int64_t one[1] = {1};
  em_tensor *found = em_zeros_on(first->device, EM_DTYPE_F32, 1, one); /* (1) */
  bool found_inf = false;
  if (found && found->data) {
    const em_kernels *k = em_kernels_of(first);
    for (int i = 0; i < n; i++) {
      em_tensor *g = grads[i];
      if (!g || !em_on_device(g)) continue;
      EM_ASSERT(em_device_eq(g->device, first->device) && "gradients on two devices");
      EM_ASSERT(g->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(g));
      EM_KCALL(k, unscale, g, inv, found);
    }
    found_inf = em_tensor_item(found) != 0;
  }
  em_scope_end(sc);
  return found_inf;
}

void em_grad_scaler_init(em_grad_scaler *s, bool enabled) {
  *s = (em_grad_scaler){.enabled = enabled,
                        .scale = enabled ? 65536.f : 1.f,
                        .growth_factor = 2.f,
                        .backoff_factor = 0.5f,
                        .growth_interval = 2000};
}

float em_grad_scaler_loss_scale(const em_grad_scaler *s) { return s->enabled ? s->scale : 1.f; }

bool em_grad_scaler_unscale(const em_grad_scaler *s, int n, em_tensor *const *grads) {
  if (!s->enabled) return false;
  const float inv = (float)(1.0 / (double)s->scale);
  bool found_inf = unscale_on_device(n, grads, inv);
  for (int i = 0; i < n; i++) {
    em_tensor *g = grads[i];
    if (!g || em_on_device(g)) continue;
    EM_ASSERT(g->dtype == EM_DTYPE_F32 && em_tensor_is_contiguous(g));
    float *p = em_f32(g);
    int64_t cnt = em_tensor_numel(g);
    for (int64_t j = 0; j < cnt; j++) {
      if (!isfinite(p[j])) found_inf = true;
      p[j] *= inv;
    }
  }
  return found_inf;
}

void em_grad_scaler_update(em_grad_scaler *s, bool found_inf) {
  if (!s->enabled) return;
  if (found_inf) {
    s->scale *= s->backoff_factor;
    s->growth_tracker = 0;
    s->skipped++;
    return;
  }
  if (s->growth_tracker + 1 == s->growth_interval) {
    float grown = s->scale * s->growth_factor;
    if (isfinite(grown)) s->scale = grown;
    s->growth_tracker = 0;
  } else {
    s->growth_tracker++;
  }
}
