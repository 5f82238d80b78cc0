/*
 * kernels_avx512.c — the "avx512-vnni" kernel set: x86-64 with AVX-512 F/BW/VL/DQ and VNNI, every
 * kernel on 512-bit vectors, bit for bit equal to the reference.
 *
 * The int8 GEMM. vpdpbusd multiplies unsigned by signed bytes, four products per 32-bit lane, and
 * takes its signed operand straight from memory as a broadcast of one 32-bit word. So the
 * activations are that operand — x[m][4j .. 4j+3], broadcast to all 16 lanes, no shuffle — and
 * the weights are made unsigned: w + 128 is w XOR 0x80, which turns each product sum into
 * Σ x·w + 128·Σ x. The correction 128·Σ x depends only on the row and the block, so it is
 * computed once per GEMM call, and each block's int32 accumulator starts at −128·Σ x. A zmm of weights
 * holds cell j of four consecutive n4k4 groups (16 outputs × 4 k: four 16-byte loads); each lane
 * is one output, so the float epilogue (once per block of 32: the exact sum to float, times
 * s_x·s_w, added to the running sum) is plain lane-wise arithmetic in the reference's order.
 * Tiles are up to 12 rows × 16 outputs: 12 int32 and 12 float accumulators. Measured on a Zen 4 core:
 * 8×16 ran at ~150 G-MAC/s (65 % of vpdpbusd's 234 peak there); 4×32 and 6×32 at 125–145, and
 * building the weights by a 4×4 transpose of 64-byte loads instead of inserts at ~140.
 *
 * The float kernels come from kernels_f32.inc with 16 lanes.
 */
#include "cpu_features.h"
#include "emb_math.h"
#include "kernels.h"

#if EMB_KERNELS == EMB_KERNELS_NATIVE && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "transpose_x86.h"

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define INLINE static inline __attribute__((always_inline))

#define EMB_GEMM_ROWS 64    /* rows per chunk of the correction table */
#define EMB_GEMM_BLOCKS 64  /* K blocks per chunk (K = 2048): the table stays 16 KB */

/* The 16 (or 4·NG) outputs of groups g .. g+NG-1 at cell j, as unsigned bytes w + 128. */
INLINE AVX512 __m512i weights(const int8_t *g0, size_t gstride, size_t j, const int NG) {
    const int8_t *p = g0 + j * 16;
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
    if (NG > 1) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + gstride)), 1);
    if (NG > 2) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 * gstride)), 2);
    if (NG > 3) v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 3 * gstride)), 3);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}

INLINE AVX512 __m512 scales(const float *s0, size_t sstride, size_t b, const int NG) {
    const float *p = s0 + b * 4;
    __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(p));
    if (NG > 1) v = _mm512_insertf32x4(v, _mm_loadu_ps(p + sstride), 1);
    if (NG > 2) v = _mm512_insertf32x4(v, _mm_loadu_ps(p + 2 * sstride), 2);
    if (NG > 3) v = _mm512_insertf32x4(v, _mm_loadu_ps(p + 3 * sstride), 3);
    return v;
}

/*
 * y[0 .. MR-1][0 .. 4·NG-1] for blocks b0 .. b1-1: from zero (first) or from y (a later chunk of
 * K), plus the bias after the last chunk. xq, xs: the tile's first row; corr: (MR, cb). wp: NULL,
 * or the 16 outputs' weights of blocks b0 .. b1-1 already as weights() makes them, 64 bytes per
 * cell (packed once per call when several row tiles use them).
 */
INLINE AVX512 void tile(const int8_t *xq, size_t k, const float *xs, size_t nb, const int32_t *corr, size_t cb,
                        size_t b0, size_t b1, const int8_t *wq, const float *ws, const float *bias, float *y,
                        size_t ldy, int first, int last, const int MR, const int NG, const int8_t *wp,
                        const int PACKED) {
    const __mmask16 mask = (__mmask16)((1u << (4 * NG)) - 1u);
    size_t gstride = 4 * k, sstride = 4 * nb;
    __m512 facc[12];
    for (int r = 0; r < MR; r++) {
        facc[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y + (size_t)r * ldy);
    }
    for (size_t b = b0; b < b1; b++) {
        __m512i acc[12]; /* starts at −128·Σx: after the block it holds Σ x·w exactly */
        for (int r = 0; r < MR; r++) acc[r] = _mm512_set1_epi32(-corr[(size_t)r * cb + (b - b0)]);
        for (size_t j = b * 8; j < b * 8 + 8; j++) {
            __m512i w = PACKED ? _mm512_load_si512((const void *)(wp + (j - b0 * 8) * 64)) : weights(wq, gstride, j, NG);
            for (int r = 0; r < MR; r++) {
                int32_t x4;
                __builtin_memcpy(&x4, xq + (size_t)r * k + 4 * j, 4);
                acc[r] = _mm512_dpbusd_epi32(acc[r], w, _mm512_set1_epi32(x4));
            }
        }
        __m512 sw = scales(ws, sstride, b, NG);
        for (int r = 0; r < MR; r++) {
            __m512 scale = _mm512_mul_ps(_mm512_set1_ps(xs[(size_t)r * nb + b]), sw);
            facc[r] = _mm512_add_ps(facc[r], _mm512_mul_ps(scale, _mm512_cvtepi32_ps(acc[r])));
        }
    }
    __m512 vb = last ? _mm512_maskz_loadu_ps(mask, bias) : _mm512_setzero_ps();
    for (int r = 0; r < MR; r++) {
        __m512 v = last ? _mm512_add_ps(facc[r], vb) : facc[r];  /* y = Σ + bias, as the reference */
        _mm512_mask_storeu_ps(y + (size_t)r * ldy, mask, v);
    }
}

/* corr[r][b - b0] = 128 · Σ of row r's codes in block b, for rows × blocks b0 .. b1-1 */
static AVX512 void corrections(const int8_t *xq, size_t k, size_t rows, size_t b0, size_t b1, int32_t *corr) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    size_t cb = b1 - b0;
    for (size_t r = 0; r < rows; r++) {
        for (size_t b = b0; b < b1; b++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(xq + r * k + b * EMB_BLOCK));
            __m256i s = _mm256_sad_epu8(_mm256_xor_si256(v, flip), _mm256_setzero_si256());  /* Σ (x + 128) */
            __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            int32_t sum = (int32_t)(_mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1)) - 128 * EMB_BLOCK;
            corr[r * cb + (b - b0)] = 128 * sum;
        }
    }
}

/*
 * Row tiles: up to 12 rows make one tile (a short text's tokens: each weight vector then feeds
 * up to 12 vpdpbusd), more are cut into tiles of at most 8 of equal size; with three tiles or
 * more, each 16-output slice of W is built once per call into `packed` (the inserts and the
 * XOR leave the inner loop) and every row tile loads it whole (for two tiles the copy cost more
 * than it saved).
 */
static AVX512 void gemm_q8_avx512(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y,
                                  size_t ldy) {
    size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4;
    int32_t corr[EMB_GEMM_ROWS * EMB_GEMM_BLOCKS];
    _Alignas(64) int8_t packed[EMB_GEMM_BLOCKS * 8 * 64];
    for (size_t i0 = 0; i0 < m; i0 += EMB_GEMM_ROWS) {
        size_t rows = m - i0 < EMB_GEMM_ROWS ? m - i0 : EMB_GEMM_ROWS;
        size_t n_tiles = rows <= 12 ? 1 : (rows + 7) / 8, per = (rows + n_tiles - 1) / n_tiles;
        for (size_t b0 = 0; b0 < nb; b0 += EMB_GEMM_BLOCKS) {
            size_t b1 = nb - b0 < EMB_GEMM_BLOCKS ? nb : b0 + EMB_GEMM_BLOCKS, cb = b1 - b0;
            int first = b0 == 0, last = b1 == nb;
            corrections(xq + i0 * k, k, rows, b0, b1, corr);
            /* outputs outer, rows inner: a 16-output slice of W stays in L1 across the row tiles */
            for (size_t g = 0; g < ng; g += 4) {
                const int8_t *wq = w->q + g * 4 * k;
                const float *ws = w->scale + g * 4 * nb, *bias = w->bias + g * 4;
                size_t left = ng - g;
                const int8_t *wp = NULL;
                if (left >= 4 && n_tiles > 2) {
                    for (size_t j = b0 * 8; j < b1 * 8; j++) {
                        _mm512_store_si512((void *)(packed + (j - b0 * 8) * 64), weights(wq, 4 * k, j, 4));
                    }
                    wp = packed;
                }
                for (size_t i = 0; i < rows;) {
                    const int8_t *xr = xq + (i0 + i) * k;
                    const float *sr = xs + (i0 + i) * nb;
                    const int32_t *cr = corr + i * cb;
                    float *yt = y + (i0 + i) * ldy + g * 4;
                    size_t mr = rows - i < per ? rows - i : per;
                    if (left < 4) { /* the last 1-3 groups: one row at a time */
                        if (left == 3) tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 1, 3, NULL, 0);
                        else if (left == 2) tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 1, 2, NULL, 0);
                        else tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 1, 1, NULL, 0);
                        i += 1;
                        continue;
                    }
#define EMB_TILE(R)                                                                                     \
    case R:                                                                                             \
        if (wp) tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, R, 4, wp, 1);   \
        else tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, R, 4, NULL, 0);    \
        break;
                    switch (mr) {
                    EMB_TILE(12) EMB_TILE(11) EMB_TILE(10) EMB_TILE(9) EMB_TILE(8) EMB_TILE(7)
                    EMB_TILE(6) EMB_TILE(5) EMB_TILE(4) EMB_TILE(3) EMB_TILE(2)
                    default: break;
                    EMB_TILE(1)
                    }
#undef EMB_TILE
                    i += mr;
                }
            }
        }
    }
}

/* ── float kernels: kernels_f32.inc on 16 lanes ────────────────────────────────────── */

#define EMB_F32(name) name##_avx512
#define EMB_F32_ATTR AVX512
#define EMB_F32_QB 4
#define VF __m512
#define VW 16
#define F4 __m128
#define vld(p) _mm512_loadu_ps(p)
#define vst(p, v) _mm512_storeu_ps((p), (v))
#define vset(x) _mm512_set1_ps(x)
#define vadd(a, b) _mm512_add_ps((a), (b))
#define vsub(a, b) _mm512_sub_ps((a), (b))
#define vmul(a, b) _mm512_mul_ps((a), (b))
#define vdiv(a, b) _mm512_div_ps((a), (b))
#define vabs(a) _mm512_abs_ps(a)
#define vrint(a) _mm512_roundscale_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define vmax_gt(a, b) _mm512_max_ps((a), (b)) /* maxps: a > b ? a : b */
#define vmin_lt(a, b) _mm512_min_ps((a), (b)) /* minps: a < b ? a : b */
#define vpow2(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define vhmax(v) _mm512_reduce_max_ps(v)
#define vst_i8(p, v) _mm_storeu_si128((__m128i *)(p), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v)))
#define f4zero() _mm_setzero_ps()
#define f4store(p, a) _mm_storeu_ps((p), (a))
#define f4load(p) _mm_loadu_ps(p)
INLINE AVX512 __m128 f4sum4(__m128 a, __m512 v) {
    a = _mm_add_ps(a, _mm512_castps512_ps128(v));
    a = _mm_add_ps(a, _mm512_extractf32x4_ps(v, 1));
    a = _mm_add_ps(a, _mm512_extractf32x4_ps(v, 2));
    return _mm_add_ps(a, _mm512_extractf32x4_ps(v, 3));
}
#define vtranspose8(src, lds, rows, dst, ldd) emb_transpose8_avx2((src), (lds), (rows), (dst), (ldd))
#include "kernels_f32.inc"

static int supported_avx512(void) {
    unsigned need = EMB_X86_AVX512 | EMB_X86_AVX512VNNI;
    return (emb_x86_features() & need) == need;
}

const emb_kernels emb_kernels_avx512vnni = {
    "avx512-vnni", supported_avx512, quantize_rows_avx512, gemm_q8_avx512, layernorm_avx512, gelu_avx512,
    attention_avx512, softmax_rows_avx512,
};

#elif EMB_KERNELS == EMB_KERNELS_NATIVE
static int unsupported(void) { return 0; }
const emb_kernels emb_kernels_avx512vnni = {
    "avx512-vnni", unsupported, emb_quantize_rows_ref, emb_gemm_q8_ref, emb_layernorm_ref, emb_gelu_ref,
    emb_attention_heads_ref, emb_softmax_rows_ref,
};
#else
typedef int emb_kernels_avx512_unused; /* wasm: ISO C wants a declaration in every file */
#endif
