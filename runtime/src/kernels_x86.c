/*
 * kernels_x86.c — the int8 GEMM on x86-64 for native builds, bit for bit equal to the reference,
 * chosen at run time (kernels.h maps emb_gemm_q8 to emb_gemm_q8_x86 natively): AVX-512 VNNI
 * (vpdpbusd on ymm) when the CPU has it, else AVX2, else the reference.
 *
 * One ymm holds two n4k4 cells (4 output rows × 8 consecutive k). vpmaddubsw multiplies
 * unsigned by signed bytes, so the activation's sign moves onto the weights (vpsignb) and its
 * absolute value (≤ 127) is the unsigned operand: |x|·sign(x)·w = x·w, pair sums ≤ 32258 never
 * saturate. vpmaddwd by ones then yields, per 128-bit half, the 4 rows' sums of one cell; the two
 * halves are added once per block; with VNNI one vpdpbusd does vpmaddubsw + vpmaddwd + vpaddd.
 * The float epilogue is the reference's, lane by lane.
 */
#include "kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))
#define VNNI __attribute__((target("avx2,avx512vnni,avx512vl")))

/* acc += Σ of four u8·s8 products per 32-bit lane */
static inline AVX2 __attribute__((always_inline)) __m256i dot_avx2(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
static inline VNNI __attribute__((always_inline)) __m256i dot_vnni(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(acc, u, s);  /* one instruction, no intermediate saturation */
}

/* The tile and the driver, once per instruction set (DOT: dot_avx2 or dot_vnni). */
#define EMB_X86_GEMM(NAME, ATTR, DOT)                                                                          \
    static inline ATTR __attribute__((always_inline)) void NAME##_tile(                                        \
        const int8_t *xq, const float *xs, size_t k, size_t nb, const int8_t *wq, const float *ws, float *y,    \
        size_t ldy, const int MR, const int NG) {                                                              \
        /* bytes 0-3 of each 64-bit half to a 128-bit lane's four 32-bit slots */                              \
        const __m256i pattern = _mm256_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, \
                                                 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7);                             \
        __m128 facc[4][2];                                                                                     \
        for (int r = 0; r < MR; r++) facc[r][0] = facc[r][1] = _mm_setzero_ps();                               \
        for (size_t b = 0; b < nb; b++) {                                                                      \
            __m256i acc[4][2];                                                                                 \
            for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();                       \
            for (int j = 0; j < EMB_BLOCK / 8; j++) {                                                          \
                __m256i w[2];                                                                                  \
                for (int g = 0; g < NG; g++) {                                                                 \
                    w[g] = _mm256_loadu_si256(                                                                 \
                        (const __m256i *)(wq + (size_t)g * 4 * k + (b * (EMB_BLOCK / 4) + 2 * (size_t)j) * 16)); \
                }                                                                                              \
                for (int r = 0; r < MR; r++) {                                                                 \
                    long long x8;                                                                              \
                    __builtin_memcpy(&x8, xq + (size_t)r * k + b * EMB_BLOCK + (size_t)j * 8, 8);             \
                    __m256i xv = _mm256_shuffle_epi8(_mm256_set1_epi64x(x8), pattern);                         \
                    __m256i ax = _mm256_abs_epi8(xv);                                                          \
                    for (int g = 0; g < NG; g++) acc[r][g] = DOT(acc[r][g], ax, _mm256_sign_epi8(w[g], xv));   \
                }                                                                                              \
            }                                                                                                  \
            for (int g = 0; g < NG; g++) {                                                                     \
                __m128 sw = _mm_loadu_ps(ws + (size_t)g * 4 * nb + b * 4);                                     \
                for (int r = 0; r < MR; r++) {                                                                 \
                    __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(acc[r][g]),                            \
                                                 _mm256_extracti128_si256(acc[r][g], 1));                      \
                    __m128 scale = _mm_mul_ps(_mm_set1_ps(xs[(size_t)r * nb + b]), sw);                        \
                    facc[r][g] = _mm_add_ps(facc[r][g], _mm_mul_ps(scale, _mm_cvtepi32_ps(isum)));             \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        for (int r = 0; r < MR; r++) {                                                                         \
            for (int g = 0; g < NG; g++) _mm_storeu_ps(y + (size_t)r * ldy + 4 * (size_t)g, facc[r][g]);      \
        }                                                                                                      \
    }                                                                                                          \
    static ATTR void NAME(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y,           \
                          size_t ldy) {                                                                        \
        size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4;                                    \
        for (size_t i = 0; i < m; i += 4) {                                                                    \
            size_t mr = m - i < 4 ? m - i : 4;                                                                 \
            for (size_t g = 0; g < ng; g += 2) {                                                               \
                const int8_t *wq = w->q + g * 4 * k;                                                           \
                const float *ws = w->scale + g * 4 * nb;                                                       \
                const int8_t *xr = xq + i * k;                                                                 \
                const float *sr = xs + i * nb;                                                                 \
                float *yt = y + i * ldy + g * 4;                                                               \
                int two = g + 1 < ng;                                                                          \
                switch (mr * 2 + (size_t)two) {                                                                \
                case 9: NAME##_tile(xr, sr, k, nb, wq, ws, yt, ldy, 4, 2); break;                              \
                case 8: NAME##_tile(xr, sr, k, nb, wq, ws, yt, ldy, 4, 1); break;                              \
                case 7: NAME##_tile(xr, sr, k, nb, wq, ws, yt, ldy, 3, 2); break;                              \
                case 6: NAME##_tile(xr, sr, k, nb, wq, ws, yt, ldy, 3, 1); break;                              \
                case 5: NAME##_tile(xr, sr, k, nb, wq, ws, yt, ldy, 2, 2); break;                              \
                case 4: NAME##_tile(xr, sr, k, nb, wq, ws, yt, ldy, 2, 1); break;                              \
                case 3: NAME##_tile(xr, sr, k, nb, wq, ws, yt, ldy, 1, 2); break;                              \
                default: NAME##_tile(xr, sr, k, nb, wq, ws, yt, ldy, 1, 1); break;                             \
                }                                                                                              \
                for (size_t r = 0; r < mr; r++) { /* bias last: y = Σ + bias, as the reference */              \
                    for (size_t c = 0; c < (two ? 8u : 4u); c++) {                                             \
                        yt[r * ldy + c] = yt[r * ldy + c] + w->bias[g * 4 + c];                                \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }

EMB_X86_GEMM(gemm_avx2, AVX2, dot_avx2)
EMB_X86_GEMM(gemm_vnni, VNNI, dot_vnni)

int emb_x86_level(void) {
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")) return 2;
    return __builtin_cpu_supports("avx2") ? 1 : 0;
}

void emb_gemm_q8_x86_at(int level, const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y,
                        size_t ldy) {
    if (level >= 2) {
        gemm_vnni(xq, xs, m, w, y, ldy);
    } else if (level == 1) {
        gemm_avx2(xq, xs, m, w, y, ldy);
    } else {
        emb_gemm_q8_ref(xq, xs, m, w, y, ldy);
    }
}

void emb_gemm_q8_x86(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy) {
    emb_gemm_q8_x86_at(emb_x86_level(), xq, xs, m, w, y, ldy);
}

#else
typedef int emb_kernels_x86_unused;  /* ISO C wants a declaration in every file */
#endif
