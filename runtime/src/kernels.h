/*
 * kernels.h — the encoder's compute kernels, and the ONE place where a variant is chosen.
 *
 * Every kernel has a plain C reference (kernels.c, suffix _ref). kernels_simd128.c (suffix
 * _simd128) and kernels_relaxed.c (suffix _relaxed) sit beside it for wasm, kernels_x86.c (the
 * GEMM on AVX2, picked at run time) for native x86-64; a variant may leave a kernel to the one
 * below it. All variants give bit-identical results: the int8 block sums
 * are exact integers, and every float reduction follows the order the reference spells out
 * (4 lanes, k mod 4, combined as (l0 + l2) + (l1 + l3)). tests/runtime checks this.
 *
 * Shapes: M rows (tokens), K inputs, N outputs, C hidden, D head size, n tokens of a sequence.
 */
#ifndef EMB_KERNELS_H
#define EMB_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define EMB_KERNELS_REF 0
#define EMB_KERNELS_SIMD128 1
#define EMB_KERNELS_RELAXED 2

#ifndef EMB_KERNELS
#if defined(__wasm_relaxed_simd__)
#define EMB_KERNELS EMB_KERNELS_RELAXED
#elif defined(__wasm_simd128__)
#define EMB_KERNELS EMB_KERNELS_SIMD128
#else
#define EMB_KERNELS EMB_KERNELS_REF
#endif
#endif

/* x (M, K) f32 → q (M, K) i8 and s (M, K/32) f32, per row and block of 32 (docs/quantization.md). */
void emb_quantize_rows_ref(const float *x, size_t m, size_t k, int8_t *q, float *s);
/* y (M, N), row stride ldy = bias + Σ_b (s_x·s_w) · Σ_k q_x·q_w, W in the n4k4 packing. */
void emb_gemm_q8_ref(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy);
/* x (M, C) ← LayerNorm(x + residual) · gamma + beta; residual (M, C) may be NULL. */
void emb_layernorm_ref(float *x, const float *residual, size_t m, size_t c, const float *gamma,
                       const float *beta, float eps);
/* x (n) ← GELU(x), exact erf form. */
void emb_gelu_ref(float *x, size_t n);
/* One sequence of n tokens, every head: qkv (n, 3C) → out (n, C); scores: n floats of scratch. */
void emb_attention_ref(const float *qkv, size_t n, size_t c, size_t n_heads, float *out, float *scores);

#if EMB_KERNELS == EMB_KERNELS_REF && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define EMB_KERNELS_X86 1
/* kernels_x86.c: AVX-512 VNNI, AVX2 or _ref, as the CPU allows (checked per call: a load of
   a global). emb_x86_level: 2 VNNI, 1 AVX2, 0 neither; _at runs a given level (for tests). */
void emb_gemm_q8_x86(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy);
void emb_gemm_q8_x86_at(int level, const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y,
                        size_t ldy);
int emb_x86_level(void);
#endif
#if defined(__wasm_simd128__)
void emb_quantize_rows_simd128(const float *x, size_t m, size_t k, int8_t *q, float *s);
/* the same codes, widened to 16 bits: the SIMD128 GEMM splats four of them with one load */
void emb_quantize_rows16_simd128(const float *x, size_t m, size_t k, int16_t *q, float *s);
void emb_gemm_q8_simd128(const int16_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy);
void emb_layernorm_simd128(float *x, const float *residual, size_t m, size_t c, const float *gamma,
                           const float *beta, float eps);
void emb_gelu_simd128(float *x, size_t n);
void emb_attention_simd128(const float *qkv, size_t n, size_t c, size_t n_heads, float *out, float *scores);
#endif
#if defined(__wasm_relaxed_simd__)
void emb_gemm_q8_relaxed(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy);
/* The load-time probe: 1 when this host computes i32x4.relaxed_dot_i8x16_i7x16_add_s exactly. */
int32_t emb_relaxed_probe(void);
#endif

/*
 * emb_qx: how the chosen GEMM wants quantized activations stored. The values are always the
 * scheme's int8 codes (-127..127); only the SIMD128 GEMM keeps them widened to int16.
 */
#if EMB_KERNELS == EMB_KERNELS_SIMD128
typedef int16_t emb_qx;
#else
typedef int8_t emb_qx;
#endif

#if EMB_KERNELS == EMB_KERNELS_RELAXED
#define emb_quantize_rows emb_quantize_rows_simd128
#define emb_gemm_q8 emb_gemm_q8_relaxed
#define emb_layernorm emb_layernorm_simd128
#define emb_gelu emb_gelu_simd128
#define emb_attention emb_attention_simd128
#define EMB_KERNELS_NAME "relaxed-simd"
#elif EMB_KERNELS == EMB_KERNELS_SIMD128
#define emb_quantize_rows emb_quantize_rows16_simd128
#define emb_gemm_q8 emb_gemm_q8_simd128
#define emb_layernorm emb_layernorm_simd128
#define emb_gelu emb_gelu_simd128
#define emb_attention emb_attention_simd128
#define EMB_KERNELS_NAME "simd128"
#elif defined(EMB_KERNELS_X86)
#define emb_quantize_rows emb_quantize_rows_ref
#define emb_gemm_q8 emb_gemm_q8_x86
#define emb_layernorm emb_layernorm_ref
#define emb_gelu emb_gelu_ref
#define emb_attention emb_attention_ref
#define EMB_KERNELS_NAME "reference + x86 GEMM (AVX-512 VNNI or AVX2)"
#else
#define emb_quantize_rows emb_quantize_rows_ref
#define emb_gemm_q8 emb_gemm_q8_ref
#define emb_layernorm emb_layernorm_ref
#define emb_gelu emb_gelu_ref
#define emb_attention emb_attention_ref
#define EMB_KERNELS_NAME "reference"
#endif

#endif /* EMB_KERNELS_H */
