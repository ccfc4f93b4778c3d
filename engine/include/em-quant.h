/* em-quant.h: dynamic int8 quantisation of a model's Linear layers for
 * CPU inference.
 *
 * Weights are quantised once, per output channel, symmetric int8 (scale =
 * max|w_row| / 127). Activations are quantised on the fly, per row
 * (per sample), asymmetric uint8 with a zero point, so a sample's answer
 * never depends on what else is in its batch (micro-batching in
 * `ember serve` cannot change a result). The products accumulate in
 * int32 and are rescaled to f32, plus the f32 bias. Every other layer
 * runs in f32 as before.
 *
 * A quantised model runs inference only: em_model_forward with
 * training = true, or with grad mode on (wrap it in em_no_grad_begin /
 * em_grad_mode_restore), is an EM_ERR_UNSUPPORTED error. The float
 * weights are kept, so em_model_save still writes the f32 model, and
 * em_export_onnx writes the int8 form (MatMulInteger; metadata
 * "quantization").
 *
 * The integer GEMM runs on AVX512-VNNI, AVX-512BW, AVX2, SSE2 or a plain
 * loop, the best the CPU has under EMBER_CPU_ISA's cap (chosen at run
 * time; the environment variable
 * EMBER_QUANT_KERNEL=avx512-vnni|avx512bw|avx2|sse2|scalar forces one, for
 * tests and benchmarks); every kernel gives the same numbers. The exact formulas
 * are in engine/quant/quant-private.h. A layer with more than 65536
 * in_features stays f32 (its int32 sums could overflow). */
#pragma once

#include <stdint.h>

#include "em-error.h"
#include "em-nn.h"

/* A Linear layer with more inputs stays f32: its int8 products summed in
 * int32 would no longer be exact. */
#define EM_QUANT_MAX_INPUTS 65536

typedef enum {
  EM_QUANT_NONE = 0,
  EM_QUANT_INT8_DYNAMIC, /* Linear layers: int8 weights per channel, uint8 activations per row */
} em_quant_mode;

typedef struct {
  int layers_quantized;    /* Linear nodes now running in int8 */
  int layers_too_wide;     /* Linear nodes kept in f32: more than EM_QUANT_MAX_INPUTS inputs */
  int layers_kept;         /* other nodes (f32), the too-wide Linear ones included */
  int64_t weight_bytes_f32;  /* of the quantised layers' weights before */
  int64_t weight_bytes_int8; /* after (int8 values + f32 scales) */
  const char *kernel;      /* the int8 GEMM kernel chosen: "avx512-vnni", "avx512bw", "avx2",
                              "sse2", "scalar" */
} em_quant_report;

/* The int8 GEMM kernel em_model_quantize picks on this processor (under
 * EMBER_CPU_ISA's cap): "avx512-vnni", "avx512bw", "avx2", "sse2" (every
 * x86-64) or "scalar" (other processors). */
const char *em_quant_kernel_best_name(void);

/* "int8" -> EM_QUANT_INT8_DYNAMIC, "none"/"off" -> EM_QUANT_NONE; else an
 * error that lists the choices. */
em_status em_quant_mode_parse(const char *text, em_quant_mode *out, em_error *err);

/* Quantises m in place (mode NONE undoes it). rep may be NULL. A model
 * without Linear layers is quantised with nothing to do (layers_quantized
 * 0), not an error. The int8 weights are a copy: call again after loading
 * new weights. Errors: an f64 model (EM_ERR_UNSUPPORTED), NaN or infinite
 * weights (EM_ERR_NUMERIC, naming the node and position), memory; the
 * model is left as it was. Not thread-safe against a concurrent forward
 * of the same model. */
em_status em_model_quantize(em_model *m, em_quant_mode mode, em_quant_report *rep, em_error *err);
em_quant_mode em_model_quant_mode(const em_model *m);
