/* kern-elementwise.h: the per-element math of the binary and unary
 * kernels (em_kbin, em_kun of em-kernel-ops.h), forward and backward, in float.
 *
 * The formulas and the conventions at kinks are those of the CPU ops
 * (engine/ops/unary.c, elementwise.c), which follow PyTorch:
 *  - relu'(0) = 0; abs'(0) = 0 (sign(x)); clamp passes the gradient where
 *    lo <= x <= hi, bounds included, and NaN passes through the forward;
 *  - gelu is the exact erf form, its derivative Phi(x) + x phi(x);
 *  - pow_scalar special-cases the exponents 2, 3, 0.5 and -1 like the CPU
 *    (x*x, x*x*x, sqrt, 1/x) and its derivative is p x^(p-1), 0 when p = 0;
 *  - exp, sqrt, sigmoid and tanh differentiate through y = f(x)
 *    (exp' = y, sqrt' = 0.5 / y, sigmoid' = y (1 - y), tanh' = 1 - y^2);
 *    the others through x.
 * The scalars p0, p1 arrive as double and are rounded to float once, as
 * the CPU's f32 kernels do. The CPU's vectorised expf / logf / erff /
 * tanhf are within an ulp of libm's and CUDA's, so unary ops agree with
 * the CPU to a few ulps, not bit for bit. */
#pragma once

#include "kern-common.h"
#include "em-kernel-ops.h"

#define EM_K_SQRT1_2 0.70710678118654752440f
#define EM_K_INV_SQRT_2PI 0.39894228040143267794f /* 1 / sqrt(2 pi) */

/* a OP b. */
EM_HD float em_kbin_f(int op, float a, float b) {
  switch (op) {
  case EM_KB_ADD: return a + b;
  case EM_KB_SUB: return a - b;
  case EM_KB_MUL: return a * b;
  default: return a / b; /* EM_KB_DIV */
  }
}

/* masked_fill: v where the mask byte is set, else x. */
EM_HD float em_kmasked_f(unsigned char m, float x, float v) { return m ? v : x; }

EM_HD float em_ksigmoid(float x) { return 1.f / (1.f + expf(-x)); }

/* min(max(x, lo), hi) with NaN passing through (PyTorch's clamp). */
EM_HD float em_kclamp(float x, float lo, float hi) {
  float r = x < lo ? lo : x;
  return r > hi ? hi : r;
}

EM_HD float em_kgelu(float x) { return 0.5f * x * (1.f + erff(x * EM_K_SQRT1_2)); }
/* d gelu / dx = Phi(x) + x phi(x) */
EM_HD float em_kgelu_grad(float x) {
  float cdf = 0.5f * (1.f + erff(x * EM_K_SQRT1_2));
  float pdf = EM_K_INV_SQRT_2PI * expf(-0.5f * x * x);
  return cdf + x * pdf;
}
/* GELU's tanh form and its derivative, as cpu-unary.c computes them */
EM_HD float em_kgelu_tanh(float x) {
  return 0.5f * x * (1.f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
}
EM_HD float em_kgelu_tanh_grad(float x) {
  float t = tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x));
  return 0.5f * (1.f + t) +
         0.5f * x * (1.f - t * t) * 0.79788456080286535588f * (1.f + 3.f * 0.044715f * x * x);
}
/* d silu / dx = s (1 + x (1 - s)), s = sigmoid(x) */
EM_HD float em_ksilu_grad(float x) {
  float s = em_ksigmoid(x);
  return s * (1.f + x * (1.f - s));
}

/* x ^ p with the CPU's exact forms for the common exponents. */
EM_HD float em_kpow(float x, float p) {
  if (p == 2.f) return x * x;
  if (p == 3.f) return x * x * x;
  if (p == 0.5f) return sqrtf(x);
  if (p == -1.f) return 1.f / x;
  return powf(x, p);
}
/* g * d(x^p)/dx, in the CPU's operation order for each form. */
EM_HD float em_kpow_grad(float g, float x, float p) {
  if (p == 2.f) return g * (2.f * x);
  if (p == 3.f) return g * (3.f * (x * x));
  if (p == 0.5f) return g * (0.5f * (1.f / sqrtf(x)));
  if (p == -1.f) return g * (-1.f / (x * x));
  if (p == 0.f) return 0.f;
  return g * (p * powf(x, p - 1.f));
}

/* y = f(x); p0, p1 as in em-kernel-ops.h (clamp bounds, the scalar). */
EM_HD float em_kun_f(int op, float x, float p0, float p1) {
  switch (op) {
  case EM_KU_NEG: return -x;
  case EM_KU_EXP: return expf(x);
  case EM_KU_LOG: return logf(x);
  case EM_KU_SQRT: return sqrtf(x);
  case EM_KU_ABS: return fabsf(x);
  case EM_KU_CLAMP: return em_kclamp(x, p0, p1);
  case EM_KU_RELU: return x < 0.f ? 0.f : x;
  case EM_KU_GELU: return em_kgelu(x);
  case EM_KU_GELU_TANH: return em_kgelu_tanh(x);
  case EM_KU_SILU: return x / (1.f + expf(-x));
  case EM_KU_SIGMOID: return em_ksigmoid(x);
  case EM_KU_TANH: return tanhf(x);
  case EM_KU_ADDS: return x + p0;
  case EM_KU_MULS: return x * p0;
  default: return em_kpow(x, p0); /* EM_KU_POWS */
  }
}

/* Whether op's derivative reads y = f(x) (else it reads x). */
EM_HD int em_kun_uses_y(int op) {
  return op == EM_KU_EXP || op == EM_KU_SQRT || op == EM_KU_SIGMOID || op == EM_KU_TANH;
}

/* g * f'(x), given x and y = f(x) (only the one em_kun_uses_y names is
 * read; pass 0 for the other). */
EM_HD float em_kun_df(int op, float g, float x, float y, float p0, float p1) {
  switch (op) {
  case EM_KU_NEG: return -g;
  case EM_KU_EXP: return g * y;
  case EM_KU_LOG: return g / x;
  case EM_KU_SQRT: return g / (2.f * y);
  case EM_KU_ABS: return x > 0.f ? g : (x < 0.f ? -g : 0.f);
  case EM_KU_CLAMP: return (x >= p0 && x <= p1) ? g : 0.f;
  case EM_KU_RELU: return x <= 0.f ? 0.f : g;
  case EM_KU_GELU: return g * em_kgelu_grad(x);
  case EM_KU_GELU_TANH: return g * em_kgelu_tanh_grad(x);
  case EM_KU_SILU: return g * em_ksilu_grad(x);
  case EM_KU_SIGMOID: return g * ((1.f - y) * y);
  case EM_KU_TANH: return g * (1.f - y * y);
  case EM_KU_ADDS: return g;
  case EM_KU_MULS: return g * p0;
  default: return em_kpow_grad(g, x, p0); /* EM_KU_POWS */
  }
}
