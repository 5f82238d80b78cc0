/*
 * gemm_f32.c — the fp32 linear layer's kernels: the reference (kernels.c, emb_gemm_f32_ref) and
 * an AVX-512 one that computes the same bits, and the choice between them.
 *
 * The reference's order is one sum per output and lane k mod 4, in increasing k, combined as
 * emb_hsum4. In the n4k4 packing one cell is 4 outputs × 4 consecutive k, so one zmm register
 * holds exactly the 16 (output, lane) sums of a group: each step multiplies a cell by the
 * input's 4 values at those k (broadcast to the 4 outputs) and adds, as the reference does, lane
 * by lane; nothing is fused (separate vmulps and vaddps) and the 4 lanes of each output are
 * combined in scalar code as emb_hsum4. So the kernel gives the reference's bits, checked by
 * tests/runtime/test_native.c.
 *
 * The choice follows the context's kernel set: the AVX-512 kernel with the "avx512-vnni" set
 * (whose CPUs have AVX-512 F), the reference with every other native set; in wasm a SIMD128
 * kernel (one f32x4 of 4 lane sums per output), in both SIMD builds.
 */
#include "emb_math.h"
#include "kernels.h"

#if EMB_KERNELS == EMB_KERNELS_NATIVE && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define EMB_F32_ROWS 8  /* rows per pass: one cell load serves 8 independent sums */

__attribute__((target("avx512f"))) static inline void f32_rows(const float *x, size_t rows, size_t k,
                                                                const float *cells, const float *bias, float *y,
                                                                size_t ldy) {
    __m512 acc[EMB_F32_ROWS];
    for (size_t q = 0; q < EMB_F32_ROWS; q++) acc[q] = _mm512_setzero_ps();
    for (size_t j = 0; j < k / 4; j++) {
        __m512 cell = _mm512_loadu_ps(cells + 16 * j);
        for (size_t q = 0; q < rows; q++) {
            __m512 xv = _mm512_broadcast_f32x4(_mm_loadu_ps(x + q * k + 4 * j));
            acc[q] = _mm512_add_ps(acc[q], _mm512_mul_ps(xv, cell));
        }
    }
    for (size_t q = 0; q < rows; q++) {
        float t[16];
        _mm512_storeu_ps(t, acc[q]);
        for (int r = 0; r < 4; r++) y[q * ldy + (size_t)r] = emb_hsum4(t[4 * r], t[4 * r + 1], t[4 * r + 2], t[4 * r + 3]) + bias[r];
    }
}

__attribute__((target("avx512f"))) static void gemm_f32_avx512(const float *x, size_t m, const emb_linear *w, float *y,
                                                                size_t ldy) {
    size_t k = (size_t)w->k, ng = (size_t)w->n / 4;
    for (size_t i = 0; i < m; i += EMB_F32_ROWS) {
        size_t rows = m - i < EMB_F32_ROWS ? m - i : EMB_F32_ROWS;
        for (size_t g = 0; g < ng; g++) {
            const float *cells = w->w + g * 4 * k, *b = w->bias + 4 * g;
            float *yg = y + i * ldy + 4 * g;
            switch (rows) {  /* a constant count for each, so the sums stay in registers */
            case 8: f32_rows(x + i * k, 8, k, cells, b, yg, ldy); break;
            case 7: f32_rows(x + i * k, 7, k, cells, b, yg, ldy); break;
            case 6: f32_rows(x + i * k, 6, k, cells, b, yg, ldy); break;
            case 5: f32_rows(x + i * k, 5, k, cells, b, yg, ldy); break;
            case 4: f32_rows(x + i * k, 4, k, cells, b, yg, ldy); break;
            case 3: f32_rows(x + i * k, 3, k, cells, b, yg, ldy); break;
            case 2: f32_rows(x + i * k, 2, k, cells, b, yg, ldy); break;
            default: f32_rows(x + i * k, 1, k, cells, b, yg, ldy); break;
            }
        }
    }
}

emb_gemm_f32_fn emb_gemm_f32_for(const emb_kernels *k) {
    return k == &emb_kernels_avx512vnni || k == &emb_kernels_amx ? gemm_f32_avx512 : emb_gemm_f32_ref;
}
#elif defined(__wasm_simd128__)
#include <wasm_simd128.h>

/* SIMD128: one f32x4 per (row, output) holds that output's 4 lane sums; the same products and
   sums as the reference, lane by lane (wasm SIMD128 has no fused multiply-add). */
static inline void f32_rows(const float *x, size_t rows, size_t k, const float *cells, const float *bias, float *y,
                            size_t ldy) {
    v128_t acc[4][4];
    for (size_t q = 0; q < 4; q++) {
        for (int r = 0; r < 4; r++) acc[q][r] = wasm_f32x4_splat(0.0f);
    }
    for (size_t j = 0; j < k / 4; j++) {
        const float *cell = cells + 16 * j;
        v128_t c0 = wasm_v128_load(cell), c1 = wasm_v128_load(cell + 4), c2 = wasm_v128_load(cell + 8),
               c3 = wasm_v128_load(cell + 12);
        for (size_t q = 0; q < rows; q++) {
            v128_t xv = wasm_v128_load(x + q * k + 4 * j);
            acc[q][0] = wasm_f32x4_add(acc[q][0], wasm_f32x4_mul(xv, c0));
            acc[q][1] = wasm_f32x4_add(acc[q][1], wasm_f32x4_mul(xv, c1));
            acc[q][2] = wasm_f32x4_add(acc[q][2], wasm_f32x4_mul(xv, c2));
            acc[q][3] = wasm_f32x4_add(acc[q][3], wasm_f32x4_mul(xv, c3));
        }
    }
    for (size_t q = 0; q < rows; q++) {
        for (int r = 0; r < 4; r++) {
            v128_t a = acc[q][r];
            y[q * ldy + (size_t)r] = emb_hsum4(wasm_f32x4_extract_lane(a, 0), wasm_f32x4_extract_lane(a, 1),
                                               wasm_f32x4_extract_lane(a, 2), wasm_f32x4_extract_lane(a, 3)) +
                                     bias[r];
        }
    }
}

static void gemm_f32_simd128(const float *x, size_t m, const emb_linear *w, float *y, size_t ldy) {
    size_t k = (size_t)w->k, ng = (size_t)w->n / 4;
    for (size_t i = 0; i < m; i += 4) {
        size_t rows = m - i < 4 ? m - i : 4;
        for (size_t g = 0; g < ng; g++) {
            const float *cells = w->w + g * 4 * k, *b = w->bias + 4 * g;
            float *yg = y + i * ldy + 4 * g;
            switch (rows) {  /* a constant count for each, so the sums stay in registers */
            case 4: f32_rows(x + i * k, 4, k, cells, b, yg, ldy); break;
            case 3: f32_rows(x + i * k, 3, k, cells, b, yg, ldy); break;
            case 2: f32_rows(x + i * k, 2, k, cells, b, yg, ldy); break;
            default: f32_rows(x + i * k, 1, k, cells, b, yg, ldy); break;
            }
        }
    }
}

emb_gemm_f32_fn emb_gemm_f32_for(const emb_kernels *k) {
    (void)k;
    return gemm_f32_simd128;
}
#else
emb_gemm_f32_fn emb_gemm_f32_for(const emb_kernels *k) {
    (void)k;
    return emb_gemm_f32_ref;
}
#endif
