/*
 * kernels.h — the encoder's compute kernels, and the ONE place where a kernel set is chosen.
 *
 * Every kernel has a plain C reference (kernels.c, suffix _ref). Beside it:
 *
 *   wasm, fixed when the module is built:
 *     kernels_simd128.c  (_simd128)   SIMD128, every kernel
 *     kernels_relaxed.c  (_relaxed)   the GEMM on relaxed SIMD; the rest from SIMD128
 *   native, chosen at run time (EMB_NATIVE_KERNEL_SETS below, best first):
 *     kernels_avx512.c   "amx"           x86-64 AMX-INT8 GEMM (tdpbssd tiles) + the AVX-512 kernels
 *                        "avx512-vnni"   x86-64 AVX-512 VNNI: every kernel on zmm
 *     kernels_x86.c      "avx-vnni"      x86-64 AVX-VNNI (VEX vpdpbusd) GEMM + the AVX2 float kernels
 *                        "avx2"          x86-64 AVX2 GEMM (vpmaddubsw) + the AVX2 float kernels
 *     kernels_neon.c     "neon-dotprod"  ARM64 sdot GEMM + NEON float kernels
 *                        "neon"          ARM64 NEON float kernels, reference GEMM
 *     kernels_select.c   "reference"     the _ref kernels
 *
 * A native kernel set is used when the CPU and OS support it (its `supported` test: cpuid and
 * XGETBV on x86-64, getauxval(AT_HWCAP) on Linux ARM64) AND it passes a self-check against the
 * reference, bit for bit, when the library first needs kernels (kernels_select.c). The library is
 * compiled for the baseline instruction set; each set's instructions sit behind per-function
 * target attributes, so a CPU without them never executes one. Adding an instruction set is one
 * new file defining an emb_kernels table, plus its line in EMB_NATIVE_KERNEL_SETS.
 *
 * All variants give bit-identical results: the int8 block sums are exact integers, and every
 * float reduction follows the order the reference spells out (4 lanes, index mod 4, combined as
 * (l0 + l2) + (l1 + l3)); nothing is fused into an FMA (-ffp-contract=off). tests/runtime checks
 * each set against the reference, natively and in wasm.
 *
 * Shapes: M rows (tokens), K inputs, N outputs, C hidden, D head size, n tokens of a sequence.
 * GEMMs see padded shapes (N % 4 == 0, K % 32 == 0); LayerNorm and attention see the real C and
 * D with row strides, so any hidden, head and FFN size runs on every set.
 */
#ifndef EMB_KERNELS_H
#define EMB_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define EMB_KERNELS_REF 0
#define EMB_KERNELS_SIMD128 1
#define EMB_KERNELS_RELAXED 2
#define EMB_KERNELS_NATIVE 3

#ifndef EMB_KERNELS
#if defined(__wasm_relaxed_simd__)
#define EMB_KERNELS EMB_KERNELS_RELAXED
#elif defined(__wasm_simd128__)
#define EMB_KERNELS EMB_KERNELS_SIMD128
#elif defined(__wasm__)
#define EMB_KERNELS EMB_KERNELS_REF
#else
#define EMB_KERNELS EMB_KERNELS_NATIVE
#endif
#endif

/* x (M, K) f32 → q (M, K) i8 and s (M, K/32) f32, per row and block of 32 (docs/quantization.md);
   K is a multiple of 32 (a short block arrives zero-padded, which is what its rule means). */
void emb_quantize_rows_ref(const float *x, size_t m, size_t k, int8_t *q, float *s);
/* y (M, N), row stride ldy = bias + Σ_b (s_x·s_w) · Σ_k q_x·q_w, W in the n4k4 packing. */
void emb_gemm_q8_ref(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy);
/* The fp32 linear (w->w set, the n4k4 packing of fp32 values: cells of 4 outputs × 4 consecutive
   k): y (M, N), row stride ldy = bias + x (M, K) · Wᵀ, x's rows K apart, each sum in 4 lanes by
   k mod 4 combined as emb_hsum4: the definition; gemm_f32.c has the AVX-512 and SIMD128 kernels
   with its bits (emb_gemm_f32_for picks one), the same natively and in every wasm build. */
void emb_gemm_f32_ref(const float *x, size_t m, const emb_linear *w, float *y, size_t ldy);
typedef void (*emb_gemm_f32_fn)(const float *x, size_t m, const emb_linear *w, float *y, size_t ldy);
/* gemm_f32.c: the fp32 linear kernel to use with kernel set k (the same bits as the reference). */
emb_gemm_f32_fn emb_gemm_f32_for(const struct emb_kernels *k);
/* Σ a_i b_i over n in 4 lanes by i mod 4, combined as emb_hsum4 (the fp32 linear's order). */
float emb_dot_f32_ref(const float *a, const float *b, size_t n);
/* x (M, C), rows ld apart, ← LayerNorm(x + residual) · gamma + beta over the first c columns
   (the rest of each row is left as it is); residual (M, C), rows ld apart, may be NULL. */
void emb_layernorm_ref(float *x, const float *residual, size_t m, size_t c, size_t ld, const float *gamma,
                       const float *beta, float eps);
/* x (n) ← GELU(x), exact erf form. */
void emb_gelu_ref(float *x, size_t n);

/*
 * Attention over one sequence of n tokens. Head h reads columns h·D .. h·D+D-1 of the queries
 * (qkv[i][·]), keys (qkv[i][c + ·]) and values (qkv[i][2c + ·]), D = c / n_heads, and writes
 * the same columns of out. score(i, j) = (q_i · k_j) · (1/√D), plus bias[h·bias_ld + bias_mid +
 * j − i] when bias is set (MPNet's relative buckets; the table covers j − i up to n + 15 past
 * bias_mid for the vector kernels' padding); with window > 0 only keys |i − j| ≤ window count
 * (sliding-window layers). Softmax over the keys, then Σ_j p_j v_j.
 */
typedef struct emb_attention_args {
    const float *qkv;     /* (n, ldq) */
    size_t ldq;
    float *out;           /* (n, ldo) */
    size_t ldo;
    size_t n, c, n_heads;
    const float *bias;    /* NULL or (n_heads, bias_ld) */
    size_t bias_ld, bias_mid;
    size_t window;        /* 0: every key */
} emb_attention_args;

/* Heads h0 .. h1-1. scratch: emb_attention_scratch(n, D) floats (the reference uses n). The
   vector sets fall back to it for head sizes their vectors do not divide and for windows that
   leave keys out. */
void emb_attention_heads_ref(const emb_attention_args *a, size_t h0, size_t h1, float *scratch);
/* Every head of a packed problem qkv (n, 3C) → out (n, C), no bias or window. */
void emb_attention_ref(const float *qkv, size_t n, size_t c, size_t n_heads, float *out, float *scores);

/*
 * The softmax of int8 attention (attention_q8.c), for m query rows i0 .. i0+m-1 of one head of a
 * sequence of n tokens. Row r of s (stride ld ≥ pad32(n)) holds the raw scores q·k of keys
 * 0 .. n-1 (what lies beyond is ignored); it becomes the probabilities
 *     p_j = exp(x_j − max) / Σ exp(x_k − max),   x_j = s_j · scale (+ bias[j − i]),
 * over the keys of the query's window (|i − j| ≤ window; every key when window is 0), with
 * p_j = 0 for the other keys and for j in n .. pad32(n)-1, so that a row is whole int8 blocks.
 * bias points at j − i = 0 of the head's relative bias row (as emb_attention_args), or NULL.
 * The operations are the fp32 attention's, in its order: the same probabilities.
 */
void emb_softmax_rows_ref(float *s, size_t m, size_t n, size_t ld, size_t i0, float scale, const float *bias,
                          size_t window);

#if defined(__wasm_simd128__)
void emb_quantize_rows_simd128(const float *x, size_t m, size_t k, int8_t *q, float *s);
/* the same codes, widened to 16 bits: the SIMD128 GEMM splats four of them with one load */
void emb_quantize_rows16_simd128(const float *x, size_t m, size_t k, int16_t *q, float *s);
void emb_gemm_q8_simd128(const int16_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy);
void emb_layernorm_simd128(float *x, const float *residual, size_t m, size_t c, size_t ld, const float *gamma,
                           const float *beta, float eps);
void emb_gelu_simd128(float *x, size_t n);
void emb_attention_simd128(const emb_attention_args *a, size_t h0, size_t h1, float *scratch);
void emb_softmax_rows_simd128(float *s, size_t m, size_t n, size_t ld, size_t i0, float scale, const float *bias,
                              size_t window);
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

/*
 * A kernel set: what the encoder calls. `attention` runs heads h0 .. h1-1 of one sequence;
 * scratch holds emb_attention_scratch(n, D) floats. Every entry computes exactly what the
 * reference computes. (Element-wise steps with no kernel of their own — other activations, the
 * GLU product, rotary positions, residual adds, pooling, Dense — are plain C shared by every
 * set, so they give the same bits everywhere by construction.)
 */
typedef struct emb_kernels {
    const char *name;
    int (*supported)(void);  /* 1 when this CPU and OS can run the set; NULL: always */
    void (*quantize_rows)(const float *x, size_t m, size_t k, emb_qx *q, float *s);
    void (*gemm_q8)(const emb_qx *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy);
    void (*layernorm)(float *x, const float *residual, size_t m, size_t c, size_t ld, const float *gamma,
                      const float *beta, float eps);
    void (*gelu)(float *x, size_t n);
    void (*attention)(const emb_attention_args *a, size_t h0, size_t h1, float *scratch);
    void (*softmax_rows)(float *s, size_t m, size_t n, size_t ld, size_t i0, float scale, const float *bias,
                         size_t window);
} emb_kernels;

/* Floats of attention scratch for one sequence of n tokens and head size d (any kernel set):
   keys transposed (d, n rounded up to 16) and scores of 4 queries, or the reference's n scores. */
static inline size_t emb_attention_scratch(size_t n, size_t d) { return (d + 4) * ((n + 15) & ~(size_t)15); }

/*
 * attention_q8.c: the int8 attention, heads h0 .. h1-1 of one sequence, on kernel set k: QKᵀ and
 * P·V are int8 GEMMs with a scale per row and block of 32 (queries and keys blocked along D,
 * probabilities and values along the keys), the softmax k->softmax_rows in fp32. Every set
 * gives the reference's bits because it is made of kernels that do. scratch: at least
 * emb_attention_q8_scratch(n, D, H) bytes (H: the heads of a call, at most n_heads), 64-byte aligned.
 */
void emb_attention_q8(const emb_kernels *k, const emb_attention_args *a, size_t h0, size_t h1, void *scratch);
size_t emb_attention_q8_scratch(size_t n, size_t d, size_t heads);

#if EMB_KERNELS == EMB_KERNELS_NATIVE
/* The native kernel sets. Each file defines its table on every architecture; a set for another
   architecture has a `supported` test that answers 0. */
extern const emb_kernels emb_kernels_amx, emb_kernels_avx512vnni, emb_kernels_avxvnni, emb_kernels_avx2;
extern const emb_kernels emb_kernels_neon_dotprod, emb_kernels_neon, emb_kernels_reference;
/* Best first: the first set that is supported and passes its self-check is the default. */
#define EMB_NATIVE_KERNEL_SETS                                                                         \
    {&emb_kernels_amx, &emb_kernels_avx512vnni, &emb_kernels_avxvnni, &emb_kernels_avx2,              \
     &emb_kernels_neon_dotprod, &emb_kernels_neon, &emb_kernels_reference}
/* Not in the list: the AVX-VNNI GEMM's tile built with the EVEX vpdpbusd of AVX-512 VL, so that a
   CPU with AVX-512 VNNI but no AVX-VNNI (this project's test machines) still tests that tile. */
extern const emb_kernels emb_kernels_avxvnni_evex;
#endif

/* kernels_select.c */
/* The set to use: `name` (NULL or "" for the default), or NULL when that name is unknown, not
   supported here, or failed its self-check. Chooses once per process, thread-safe. */
const emb_kernels *emb_kernels_find(const char *name);
/* 0 when `k` agrees with the reference bit for bit on the self-check's problems. */
int emb_kernels_self_check(const emb_kernels *k);

#endif /* EMB_KERNELS_H */
