/* autocast.c: the amp mode names, the thread-local autocast mode and the
 * bf16 rounding of f32 buffers. */
#include "em-amp.h"

#include <string.h>

const char *em_amp_mode_name(em_amp_mode m) {
  switch (m) {
  case EM_AMP_BF16: return "bf16";
  case EM_AMP_F16: return "f16";
  default: return "off";
  }
}

em_status em_amp_mode_parse(const char *s, em_amp_mode *out, em_error *err) {
  if (s && strcmp(s, "off") == 0) *out = EM_AMP_OFF;
  else if (s && strcmp(s, "bf16") == 0) *out = EM_AMP_BF16;
  else if (s && strcmp(s, "f16") == 0) *out = EM_AMP_F16;
  else
    return em_error_set(err, EM_ERR_INVALID, "amp mode '%s' is not one of off, bf16, f16",
                        s ? s : "(null)");
  return EM_OK;
}

void em_bf16_round(const float *src, float *dst, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = em_bf16_to_f32(em_bf16_from_f32(src[i]));
}

static _Thread_local em_amp_mode autocast_mode;

em_amp_mode em_autocast_begin(em_amp_mode m) {
  em_amp_mode prev = autocast_mode;
  autocast_mode = m;
  return prev;
}

void em_autocast_restore(em_amp_mode prev) { autocast_mode = prev; }

em_amp_mode em_autocast_mode(void) { return autocast_mode; }

em_bf16_kernel em_autocast_kernel(void) {
  return autocast_mode == EM_AMP_BF16 ? em_bf16_kernel_best() : EM_BF16_KERNEL_NONE;
}
