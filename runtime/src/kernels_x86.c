/*
 * kernels_x86.c — two kernel sets for x86-64 CPUs on 256-bit vectors, bit for bit equal to the
 * reference: "avx-vnni" (AVX2 + AVX-VNNI: Alder Lake and later cores without AVX-512) and "avx2".
 * Both use the float kernels of kernels_f32.inc on 8 lanes; they differ in the int8 GEMM.
 *
 * avx-vnni: the tile of kernels_avx512.c on ymm, for 16 vector registers and no embedded
 * broadcast. A ymm holds cell j of two n4k4 groups (8 outputs × 4 k: one load, one insert), made
 * unsigned by XOR 0x80; each row's 4 activation bytes are broadcast (vpbroadcastd) as the signed
 * operand of the VEX vpdpbusd; each block's accumulator starts at −128·Σx per row.
 * 4 rows × 8 outputs: 4 int32 and 4 float accumulators leave registers for the rest. The same tile
 * built with the EVEX vpdpbusd of AVX-512 VL is the test-only set "avx-vnni-evex", so that machines
 * with AVX-512 VNNI but without AVX-VNNI (and qemu, which lacks it) still test the tile; the two
 * instructions compute the same thing, and the self-check guards the VEX one where it runs.
 *
 * avx2: vpmaddubsw multiplies unsigned by signed bytes with 16-bit sums of pairs, which the
 * +128 offset would overflow, so the activation's sign moves onto the weights (vpsignb) and its
 * absolute value (≤ 127) is the unsigned operand: |x|·sign(x)·w = x·w, pair sums ≤ 32258 never
 * saturate. One ymm holds two n4k4 cells (4 output rows × 8 consecutive k); vpmaddwd by ones then
 * yields, per 128-bit half, the 4 rows' sums of one cell; the two halves are added once per block.
 */
#include "cpu_features.h"
#include "emb_math.h"
#include "kernels.h"

#if EMB_KERNELS == EMB_KERNELS_NATIVE && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "transpose_x86.h"

#define AVX2 __attribute__((target("avx2")))
#define AVXVNNI __attribute__((target("avx2,avxvnni")))
#define AVX512VL __attribute__((target("avx2,avx512f,avx512vl,avx512vnni")))
#define INLINE static inline __attribute__((always_inline))

/* ── avx2 GEMM ─────────────────────────────────────────────────────────────────────── */

/* acc += Σ of four u8·s8 products per 32-bit lane */
INLINE AVX2 __m256i dot_avx2(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

INLINE AVX2 void avx2_tile(const int8_t *xq, const float *xs, size_t k, size_t nb, const int8_t *wq, const float *ws,
                           float *y, size_t ldy, const int MR, const int NG) {
    /* bytes 0-3 of each 64-bit half to a 128-bit lane's four 32-bit slots */
    const __m256i pattern = _mm256_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7,
                                             4, 5, 6, 7, 4, 5, 6, 7);
    __m128 facc[4][2];
    for (int r = 0; r < MR; r++) facc[r][0] = facc[r][1] = _mm_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i acc[4][2];
        for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
        for (int j = 0; j < EMB_BLOCK / 8; j++) {
            __m256i w[2];
            for (int g = 0; g < NG; g++) {
                w[g] = _mm256_loadu_si256(
                    (const __m256i *)(wq + (size_t)g * 4 * k + (b * (EMB_BLOCK / 4) + 2 * (size_t)j) * 16));
            }
            for (int r = 0; r < MR; r++) {
                long long x8;
                __builtin_memcpy(&x8, xq + (size_t)r * k + b * EMB_BLOCK + (size_t)j * 8, 8);
                __m256i xv = _mm256_shuffle_epi8(_mm256_set1_epi64x(x8), pattern);
                __m256i ax = _mm256_abs_epi8(xv);
                for (int g = 0; g < NG; g++) acc[r][g] = dot_avx2(acc[r][g], ax, _mm256_sign_epi8(w[g], xv));
            }
        }
        for (int g = 0; g < NG; g++) {
            __m128 sw = _mm_loadu_ps(ws + (size_t)g * 4 * nb + b * 4);
            for (int r = 0; r < MR; r++) {
                __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(acc[r][g]), _mm256_extracti128_si256(acc[r][g], 1));
                __m128 scale = _mm_mul_ps(_mm_set1_ps(xs[(size_t)r * nb + b]), sw);
                facc[r][g] = _mm_add_ps(facc[r][g], _mm_mul_ps(scale, _mm_cvtepi32_ps(isum)));
            }
        }
    }
    for (int r = 0; r < MR; r++) {
        for (int g = 0; g < NG; g++) _mm_storeu_ps(y + (size_t)r * ldy + 4 * (size_t)g, facc[r][g]);
    }
}

static AVX2 void gemm_q8_avx2(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy) {
    size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4;
    for (size_t i = 0; i < m; i += 4) {
        size_t mr = m - i < 4 ? m - i : 4;
        for (size_t g = 0; g < ng; g += 2) {
            const int8_t *wq = w->q + g * 4 * k;
            const float *ws = w->scale + g * 4 * nb;
            const int8_t *xr = xq + i * k;
            const float *sr = xs + i * nb;
            float *yt = y + i * ldy + g * 4;
            int two = g + 1 < ng;
            switch (mr * 2 + (size_t)two) {
            case 9: avx2_tile(xr, sr, k, nb, wq, ws, yt, ldy, 4, 2); break;
            case 8: avx2_tile(xr, sr, k, nb, wq, ws, yt, ldy, 4, 1); break;
            case 7: avx2_tile(xr, sr, k, nb, wq, ws, yt, ldy, 3, 2); break;
            case 6: avx2_tile(xr, sr, k, nb, wq, ws, yt, ldy, 3, 1); break;
            case 5: avx2_tile(xr, sr, k, nb, wq, ws, yt, ldy, 2, 2); break;
            case 4: avx2_tile(xr, sr, k, nb, wq, ws, yt, ldy, 2, 1); break;
            case 3: avx2_tile(xr, sr, k, nb, wq, ws, yt, ldy, 1, 2); break;
            default: avx2_tile(xr, sr, k, nb, wq, ws, yt, ldy, 1, 1); break;
            }
            for (size_t r = 0; r < mr; r++) { /* bias last: y = Σ + bias, as the reference */
                for (size_t c = 0; c < (two ? 8u : 4u); c++) yt[r * ldy + c] = yt[r * ldy + c] + w->bias[g * 4 + c];
            }
        }
    }
}

/* ── avx-vnni GEMM (and its EVEX twin) ─────────────────────────────────────────────── */

#define EMB_GEMM_ROWS 64    /* rows per chunk of the correction table */
#define EMB_GEMM_BLOCKS 64  /* K blocks per chunk (K = 2048): the table stays 16 KB */

/* The GEMM on ymm for one vpdpbusd encoding (NAME: function prefix, ATTR: target, DPBUSD). */
#define EMB_VNNI_YMM_GEMM(NAME, ATTR, DPBUSD)                                                                     \
    INLINE ATTR void NAME##_tile(const int8_t *xq, size_t k, const float *xs, size_t nb, const int32_t *corr,      \
                                 size_t cb, size_t b0, size_t b1, const int8_t *wq, const float *ws,               \
                                 const float *bias, float *y, size_t ldy, int first, int last, const int MR,       \
                                 const int NG) {                                                                  \
        size_t gstride = 4 * k, sstride = 4 * nb;                                                                  \
        const __m256i flip = _mm256_set1_epi8((char)0x80);                                                        \
        __m256 facc[4];                                                                                           \
        for (int r = 0; r < MR; r++) {                                                                             \
            if (first) facc[r] = _mm256_setzero_ps();                                                              \
            else if (NG == 2) facc[r] = _mm256_loadu_ps(y + (size_t)r * ldy);                                      \
            else facc[r] = _mm256_zextps128_ps256(_mm_loadu_ps(y + (size_t)r * ldy));                              \
        }                                                                                                         \
        for (size_t b = b0; b < b1; b++) {                                                                         \
            __m256i acc[4]; /* starts at −128·Σx: after the block it holds Σ x·w exactly */                        \
            for (int r = 0; r < MR; r++) acc[r] = _mm256_set1_epi32(-corr[(size_t)r * cb + (b - b0)]);             \
            for (size_t j = b * 8; j < b * 8 + 8; j++) {                                                           \
                __m256i w = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(wq + j * 16)));               \
                if (NG == 2) w = _mm256_inserti128_si256(w, _mm_loadu_si128((const __m128i *)(wq + gstride + j * 16)), 1); \
                w = _mm256_xor_si256(w, flip);                                                                     \
                for (int r = 0; r < MR; r++) {                                                                     \
                    int32_t x4;                                                                                    \
                    __builtin_memcpy(&x4, xq + (size_t)r * k + 4 * j, 4);                                          \
                    acc[r] = DPBUSD(acc[r], w, _mm256_set1_epi32(x4));                                             \
                }                                                                                                 \
            }                                                                                                     \
            __m256 sw = _mm256_castps128_ps256(_mm_loadu_ps(ws + b * 4));                                          \
            if (NG == 2) sw = _mm256_insertf128_ps(sw, _mm_loadu_ps(ws + sstride + b * 4), 1);                     \
            for (int r = 0; r < MR; r++) {                                                                         \
                __m256 scale = _mm256_mul_ps(_mm256_set1_ps(xs[(size_t)r * nb + b]), sw);                          \
                facc[r] = _mm256_add_ps(facc[r], _mm256_mul_ps(scale, _mm256_cvtepi32_ps(acc[r])));                \
            }                                                                                                     \
        }                                                                                                         \
        __m256 vb = _mm256_setzero_ps();                                                                           \
        if (last) vb = NG == 2 ? _mm256_loadu_ps(bias) : _mm256_zextps128_ps256(_mm_loadu_ps(bias));               \
        for (int r = 0; r < MR; r++) {                                                                             \
            __m256 v = last ? _mm256_add_ps(facc[r], vb) : facc[r]; /* y = Σ + bias, as the reference */           \
            if (NG == 2) _mm256_storeu_ps(y + (size_t)r * ldy, v);                                                 \
            else _mm_storeu_ps(y + (size_t)r * ldy, _mm256_castps256_ps128(v));                                    \
        }                                                                                                         \
    }                                                                                                             \
    static ATTR void NAME##_corrections(const int8_t *xq, size_t k, size_t rows, size_t b0, size_t b1,            \
                                        int32_t *corr) {                                                          \
        const __m256i flip = _mm256_set1_epi8((char)0x80);                                                        \
        for (size_t r = 0; r < rows; r++) {                                                                        \
            for (size_t b = b0; b < b1; b++) {                                                                     \
                __m256i v = _mm256_loadu_si256((const __m256i *)(xq + r * k + b * EMB_BLOCK));                     \
                __m256i s = _mm256_sad_epu8(_mm256_xor_si256(v, flip), _mm256_setzero_si256());                    \
                __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));             \
                int32_t sum = (int32_t)(_mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1)) - 128 * EMB_BLOCK;         \
                corr[r * (b1 - b0) + (b - b0)] = 128 * sum;                                                        \
            }                                                                                                     \
        }                                                                                                         \
    }                                                                                                             \
    static ATTR void NAME(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy) { \
        size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4;                                        \
        int32_t corr[EMB_GEMM_ROWS * EMB_GEMM_BLOCKS];                                                            \
        for (size_t i0 = 0; i0 < m; i0 += EMB_GEMM_ROWS) {                                                         \
            size_t rows = m - i0 < EMB_GEMM_ROWS ? m - i0 : EMB_GEMM_ROWS;                                         \
            for (size_t b0 = 0; b0 < nb; b0 += EMB_GEMM_BLOCKS) {                                                  \
                size_t b1 = nb - b0 < EMB_GEMM_BLOCKS ? nb : b0 + EMB_GEMM_BLOCKS, cb = b1 - b0;                   \
                int first = b0 == 0, last = b1 == nb;                                                              \
                NAME##_corrections(xq + i0 * k, k, rows, b0, b1, corr);                                            \
                for (size_t g = 0; g < ng; g += 2) {                                                               \
                    const int8_t *wq = w->q + g * 4 * k;                                                           \
                    const float *ws = w->scale + g * 4 * nb, *bias = w->bias + g * 4;                              \
                    int two = g + 1 < ng;                                                                          \
                    for (size_t i = 0; i < rows; i += 4) {                                                         \
                        size_t mr = rows - i < 4 ? rows - i : 4;                                                   \
                        const int8_t *xr = xq + (i0 + i) * k;                                                      \
                        const float *sr = xs + (i0 + i) * nb;                                                      \
                        const int32_t *cr = corr + i * cb;                                                         \
                        float *yt = y + (i0 + i) * ldy + g * 4;                                                    \
                        switch (mr * 2 + (size_t)two) {                                                            \
                        case 9: NAME##_tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 4, 2); break; \
                        case 8: NAME##_tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 4, 1); break; \
                        case 7: NAME##_tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 3, 2); break; \
                        case 6: NAME##_tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 3, 1); break; \
                        case 5: NAME##_tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 2, 2); break; \
                        case 4: NAME##_tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 2, 1); break; \
                        case 3: NAME##_tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 1, 2); break; \
                        default: NAME##_tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 1, 1); break; \
                        }                                                                                         \
                    }                                                                                             \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    }

INLINE AVXVNNI __m256i dpbusd_vex(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
INLINE AVX512VL __m256i dpbusd_evex(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }

EMB_VNNI_YMM_GEMM(gemm_q8_avxvnni, AVXVNNI, dpbusd_vex)
EMB_VNNI_YMM_GEMM(gemm_q8_avxvnni_evex, AVX512VL, dpbusd_evex)

/* ── float kernels: kernels_f32.inc on 8 lanes ─────────────────────────────────────── */

#define EMB_F32(name) name##_avx2
#define EMB_F32_ATTR AVX2
#define EMB_F32_QB 2 /* 2 queries × 4 lane sums: 8 of the 16 registers */
#define VF __m256
#define VW 8
#define F4 __m128
#define vld(p) _mm256_loadu_ps(p)
#define vst(p, v) _mm256_storeu_ps((p), (v))
#define vset(x) _mm256_set1_ps(x)
#define vadd(a, b) _mm256_add_ps((a), (b))
#define vsub(a, b) _mm256_sub_ps((a), (b))
#define vmul(a, b) _mm256_mul_ps((a), (b))
#define vdiv(a, b) _mm256_div_ps((a), (b))
#define vabs(a) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (a))
#define vrint(a) _mm256_round_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vmax_gt(a, b) _mm256_max_ps((a), (b)) /* maxps: a > b ? a : b */
#define vmin_lt(a, b) _mm256_min_ps((a), (b)) /* minps: a < b ? a : b */
#define vpow2(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define f4zero() _mm_setzero_ps()
#define f4store(p, a) _mm_storeu_ps((p), (a))
#define f4load(p) _mm_loadu_ps(p)
INLINE AVX2 float vhmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0x4E));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0xB1));
    return _mm_cvtss_f32(m);
}
INLINE AVX2 void vst_i8(int8_t *p, __m256 v) {
    __m256i i = _mm256_cvtps_epi32(v);
    __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)p, _mm_packs_epi16(h, h));
}
INLINE AVX2 __m128 f4sum4(__m128 a, __m256 v) {
    a = _mm_add_ps(a, _mm256_castps256_ps128(v));
    return _mm_add_ps(a, _mm256_extractf128_ps(v, 1));
}
#define vtranspose8(src, lds, rows, dst, ldd) emb_transpose8_avx2((src), (lds), (rows), (dst), (ldd))
#include "kernels_f32.inc"

static int supported_avx2(void) { return (emb_x86_features() & EMB_X86_AVX2) != 0; }
static int supported_avxvnni(void) { return (emb_x86_features() & EMB_X86_AVXVNNI) != 0; }
static int supported_evex(void) {
    unsigned need = EMB_X86_AVX2 | EMB_X86_AVX512 | EMB_X86_AVX512VNNI;
    return (emb_x86_features() & need) == need;
}

const emb_kernels emb_kernels_avxvnni = {
    "avx-vnni", supported_avxvnni, quantize_rows_avx2, gemm_q8_avxvnni, layernorm_avx2, gelu_avx2, attention_avx2,
    softmax_rows_avx2,
};
const emb_kernels emb_kernels_avx2 = {
    "avx2", supported_avx2, quantize_rows_avx2, gemm_q8_avx2, layernorm_avx2, gelu_avx2, attention_avx2,
    softmax_rows_avx2,
};
const emb_kernels emb_kernels_avxvnni_evex = {
    "avx-vnni-evex", supported_evex, quantize_rows_avx2, gemm_q8_avxvnni_evex, layernorm_avx2, gelu_avx2,
    attention_avx2, softmax_rows_avx2,
};

#elif EMB_KERNELS == EMB_KERNELS_NATIVE
static int unsupported(void) { return 0; }
const emb_kernels emb_kernels_avxvnni = {
    "avx-vnni", unsupported, emb_quantize_rows_ref, emb_gemm_q8_ref, emb_layernorm_ref, emb_gelu_ref,
    emb_attention_heads_ref, emb_softmax_rows_ref,
};
const emb_kernels emb_kernels_avx2 = {
    "avx2", unsupported, emb_quantize_rows_ref, emb_gemm_q8_ref, emb_layernorm_ref, emb_gelu_ref,
    emb_attention_heads_ref, emb_softmax_rows_ref,
};
const emb_kernels emb_kernels_avxvnni_evex = {
    "avx-vnni-evex", unsupported, emb_quantize_rows_ref, emb_gemm_q8_ref, emb_layernorm_ref, emb_gelu_ref,
    emb_attention_heads_ref, emb_softmax_rows_ref,
};
#else
typedef int emb_kernels_x86_unused; /* wasm: ISO C wants a declaration in every file */
#endif
