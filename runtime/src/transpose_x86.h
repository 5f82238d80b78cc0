/*
 * transpose_x86.h — an 8 × 8 float transpose on 256-bit vectors for the attention of
 * kernels_f32.inc (kernels_x86.c, kernels_avx512.c: AVX-512F includes AVX2). Data movement only:
 * it changes no value, so the attention's bits stay those of the reference.
 */
#ifndef EMB_TRANSPOSE_X86_H
#define EMB_TRANSPOSE_X86_H

#include <stddef.h>
#include <immintrin.h>

/* dst[e * ldd + j] = src[j * lds + e] for e, j < 8, with rows j ≥ rows of src read as zeros */
static inline __attribute__((always_inline, target("avx2"))) void emb_transpose8_avx2(
    const float *src, size_t lds, size_t rows, float *dst, size_t ldd) {
    __m256 r[8];
    for (size_t j = 0; j < 8; j++) r[j] = j < rows ? _mm256_loadu_ps(src + j * lds) : _mm256_setzero_ps();
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    /* u0: column 0 of rows 0-3 | column 4; u1: 1 | 5; u2: 2 | 6; u3: 3 | 7 (u4-u7: rows 4-7) */
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst + 0 * ldd, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(dst + 1 * ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

#endif
