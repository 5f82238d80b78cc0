/*
 * kernels_avx512.c — the "avx512-vnni" kernel set: x86-64 with AVX-512 F/BW/VL/DQ and VNNI, every
 * kernel on 512-bit vectors, bit for bit equal to the reference; and the "amx" set, the same but
 * for its int8 GEMM on AMX tiles (below, "the amx set").
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
 * cell (packed once per call when several row tiles use them). pf: NULL, or the next slice's
 * weights, fetched into L2 a cache line per four cells while this tile runs: with few rows a
 * slice's weights are used for a short time and come from memory whenever other work has evicted
 * them (a call of 1 x 10 tokens after other work: ~1.3x faster with the fetch, docs/native.md);
 * only the first row tile of the first chunk of rows fetches, as later ones find them in L2.
 */
INLINE AVX512 void tile(const int8_t *xq, size_t k, const float *xs, size_t nb, const int32_t *corr, size_t cb,
                        size_t b0, size_t b1, const int8_t *wq, const float *ws, const float *bias, float *y,
                        size_t ldy, int first, int last, const int MR, const int NG, const int8_t *wp,
                        const int PACKED, const int CELLS, const int8_t *pf) {
    const __mmask16 mask = (__mmask16)((1u << (4 * NG)) - 1u);
    size_t gstride = 4 * k, sstride = 4 * nb;
    __m512 facc[12];
    for (int r = 0; r < MR; r++) {
        facc[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y + (size_t)r * ldy);
    }
    for (size_t b = b0; b < b1; b++) {
        __m512i acc[12]; /* starts at −128·Σx: after the block it holds Σ x·w exactly */
        for (int r = 0; r < MR; r++) acc[r] = _mm512_set1_epi32(-corr[(size_t)r * cb + (b - b0)]);
        for (size_t j = b * CELLS; j < b * CELLS + CELLS; j++) {
            __m512i w = PACKED ? _mm512_load_si512((const void *)(wp + (j - b0 * CELLS) * 64)) : weights(wq, gstride, j, NG);
            if (pf && (j & 3) == 0) {
                for (int q = 0; q < 4; q++) _mm_prefetch((const char *)(pf + q * gstride + j * 16), _MM_HINT_T1);
            }
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

/* corr[r][b - b0] = 128 · Σ of row r's codes in block b (BLK codes, a multiple of 32), for
   rows × blocks b0 .. b1-1 */
INLINE AVX512 void corrections(const int8_t *xq, size_t k, size_t rows, size_t b0, size_t b1, int32_t *corr,
                               const int BLK) {
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    size_t cb = b1 - b0;
    for (size_t r = 0; r < rows; r++) {
        for (size_t b = b0; b < b1; b++) {
            __m256i s = _mm256_setzero_si256();
            for (int h = 0; h < BLK; h += 32) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(xq + r * k + b * BLK + h));
                s = _mm256_add_epi64(s, _mm256_sad_epu8(_mm256_xor_si256(v, flip), _mm256_setzero_si256()));
            }  /* Σ (x + 128) */
            __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            int32_t sum = (int32_t)(_mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1)) - 128 * BLK;
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
INLINE AVX512 void gemm_blocks(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy,
                               const int BLK) {
    const int CELLS = BLK / 4, CHUNK = EMB_GEMM_BLOCKS * EMB_BLOCK / BLK;  /* K 2048 per chunk */
    size_t k = (size_t)w->k, nb = k / (size_t)BLK, ng = (size_t)w->n / 4;
    int32_t corr[EMB_GEMM_ROWS * EMB_GEMM_BLOCKS];
    _Alignas(64) int8_t packed[EMB_GEMM_BLOCKS * 8 * 64];
    for (size_t i0 = 0; i0 < m; i0 += EMB_GEMM_ROWS) {
        size_t rows = m - i0 < EMB_GEMM_ROWS ? m - i0 : EMB_GEMM_ROWS;
        size_t n_tiles = rows <= 12 ? 1 : (rows + 7) / 8, per = (rows + n_tiles - 1) / n_tiles;
        for (size_t b0 = 0; b0 < nb; b0 += (size_t)CHUNK) {
            size_t b1 = nb - b0 < (size_t)CHUNK ? nb : b0 + (size_t)CHUNK, cb = b1 - b0;
            int first = b0 == 0, last = b1 == nb;
            corrections(xq + i0 * k, k, rows, b0, b1, corr, BLK);
            /* outputs outer, rows inner: a 16-output slice of W stays in L1 across the row tiles */
            for (size_t g = 0; g < ng; g += 4) {
                const int8_t *wq = w->q + g * 4 * k;
                const float *ws = w->scale + g * 4 * nb, *bias = w->bias + g * 4;
                size_t left = ng - g;
                const int8_t *wp = NULL;
                const int8_t *next = i0 == 0 && left >= 8 ? wq + 16 * k : NULL;  /* tile()'s pf */
                if (left >= 4 && n_tiles > 2) {
                    for (size_t j = b0 * CELLS; j < b1 * CELLS; j++) {
                        _mm512_store_si512((void *)(packed + (j - b0 * CELLS) * 64), weights(wq, 4 * k, j, 4));
                    }
                    wp = packed;
                }
                for (size_t i = 0; i < rows;) {
                    const int8_t *xr = xq + (i0 + i) * k;
                    const float *sr = xs + (i0 + i) * nb;
                    const int32_t *cr = corr + i * cb;
                    float *yt = y + (i0 + i) * ldy + g * 4;
                    size_t mr = rows - i < per ? rows - i : per;
                    const int8_t *pf = i == 0 ? next : NULL;  /* the first row tile fetches them */
                    if (left < 4) { /* the last 1-3 groups: one row at a time */
                        if (left == 3) tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 1, 3, NULL, 0, CELLS, NULL);
                        else if (left == 2) tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 1, 2, NULL, 0, CELLS, NULL);
                        else tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, 1, 1, NULL, 0, CELLS, NULL);
                        i += 1;
                        continue;
                    }
#define EMB_TILE(R)                                                                                     \
    case R:                                                                                             \
        if (wp) tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, R, 4, wp, 1, CELLS, pf);     \
        else tile(xr, k, sr, nb, cr, cb, b0, b1, wq, ws, bias, yt, ldy, first, last, R, 4, NULL, 0, CELLS, pf);   \
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

/* The engine's scheme: blocks of EMB_BLOCK (benchmarks/block64.c instantiates 64 beside it) */
static AVX512 void gemm_q8_avx512(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y,
                                  size_t ldy) {
    gemm_blocks(xq, xs, m, w, y, ldy, EMB_BLOCK);
}

/* ── the "amx" set: the int8 GEMM on AMX tiles ─────────────────────────────────────── */
/*
 * tdpbssd multiplies signed by signed bytes: C (rows × 16 int32) += A (rows × 32 codes of one
 * block) · B (8 rows of 64 bytes: cell j of four n4k4 groups side by side, the layout vpdpbusd's
 * weights() builds, without the XOR). Each block's sum is exact, as vpdpbusd's, and the float
 * epilogue is tile()'s, so the bits are the other sets'. The B rows of a 16-output slice come
 * from the weights' tile layout made at load (emb_linear.qt), else are packed once per call and
 * chunk of K, and are shared by every row tile; two blocks run at once on
 * tiles 0-2 and 3-5 so that one block's epilogue overlaps the next one's tdpbssd. Row tiles are
 * 16 rows, then one of the rest. Output groups past the last full slice of 16 (only in linears
 * narrower than a multiple of 16: the self-check's, the int8 attention's keys) go
 * through gemm_q8_avx512.
 */
#define AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")))

typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

INLINE AMX void amx_epilogue(const int32_t *c, const float *xs, size_t nb, size_t b, __m512 sw, __m512 *facc,
                             const int MR) {
    for (int r = 0; r < MR; r++) {
        __m512 scale = _mm512_mul_ps(_mm512_set1_ps(xs[(size_t)r * nb + b]), sw);
        facc[r] = _mm512_add_ps(facc[r], _mm512_mul_ps(scale, _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r))));
    }
}

/* y[0 .. MR-1][0 .. 15] for blocks b0 .. b1-1 of one slice, as tile() with NG = 4. Blocks
   alternate between tiles 0-2 and 3-5: the next block's tdpbssd is issued before this block's
   sums are stored and added, so the two overlap. bp: the slice's B rows of block b0 on. */
#define AMX_ISSUE(A, B, C, blk)                                            \
    do {                                                                   \
        _tile_zero(C);                                                     \
        _tile_loadd(A, xq + (blk) * EMB_BLOCK, (long)k);                   \
        _tile_loadd(B, bp + ((blk) - b0) * 8 * 64, 64);                    \
        _tile_dpbssd(C, A, B);                                             \
    } while (0)
#define AMX_FINISH(C, blk)                                                                 \
    do {                                                                                   \
        _tile_stored(C, c, 64);                                                            \
        amx_epilogue(c, xs, nb, (blk), scales(ws, 4 * nb, (blk), 4), facc, MR);            \
    } while (0)

INLINE AMX void amx_tile(const int8_t *xq, size_t k, const float *xs, size_t nb, size_t b0, size_t b1,
                         const int8_t *bp, const float *ws, const float *bias, float *y, size_t ldy, int first,
                         int last, const int MR) {
    _Alignas(64) int32_t c[16 * 16];
    __m512 facc[16];
    for (int r = 0; r < MR; r++) facc[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)r * ldy);
    AMX_ISSUE(0, 1, 2, b0);
    for (size_t b = b0;;) {
        if (b + 1 < b1) AMX_ISSUE(3, 4, 5, b + 1);
        AMX_FINISH(2, b);
        if (++b >= b1) break;
        if (b + 1 < b1) AMX_ISSUE(0, 1, 2, b + 1);
        AMX_FINISH(5, b);
        if (++b >= b1) break;
    }
    __m512 vb = last ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    for (int r = 0; r < MR; r++) {
        _mm512_storeu_ps(y + (size_t)r * ldy, last ? _mm512_add_ps(facc[r], vb) : facc[r]);
    }
}
#undef AMX_ISSUE
#undef AMX_FINISH

/* Rows 0 .. m-1 (m a multiple of `rows`, rows ≤ 16) of the first `full` groups. */
static AMX void amx_rows(const int8_t *xq, const float *xs, size_t m, size_t rows, const emb_linear *w, size_t full,
                         float *y, size_t ldy) {
    size_t k = (size_t)w->k, nb = k / EMB_BLOCK;
    amx_config cfg;
    __builtin_memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; t++) {
        int is_b = t == 1 || t == 4, is_a = t == 0 || t == 3;
        cfg.rows[t] = (uint8_t)(is_b ? 8 : rows);
        cfg.colsb[t] = (uint16_t)(is_a ? EMB_BLOCK : 64);
    }
    _tile_loadconfig(&cfg);
    _Alignas(64) int8_t packed[EMB_GEMM_BLOCKS * 8 * 64];
    for (size_t b0 = 0; b0 < nb; b0 += EMB_GEMM_BLOCKS) {
        size_t b1 = nb - b0 < EMB_GEMM_BLOCKS ? nb : b0 + EMB_GEMM_BLOCKS;
        int first = b0 == 0, last = b1 == nb;
        for (size_t g = 0; g < full; g += 4) {
            const int8_t *wq = w->q + g * 4 * k, *bp = packed;
            if (w->qt) {
                bp = w->qt + g * 4 * k + b0 * 8 * 64;  /* made at load */
            } else {
                for (size_t j = b0 * 8; j < b1 * 8; j++) {
                    const int8_t *p = wq + j * 16;
                    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 4 * k)), 1);
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 8 * k)), 2);
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 12 * k)), 3);
                    _mm512_store_si512((void *)(packed + (j - b0 * 8) * 64), v);
                }
            }
            const float *ws = w->scale + g * 4 * nb, *bias = w->bias + g * 4;
            for (size_t i = 0; i < m; i += rows) {
                const int8_t *xr = xq + i * k;
                const float *sr = xs + i * nb;
                float *yt = y + i * ldy + g * 4;
#define EMB_AMX_TILE(R) \
    case R: amx_tile(xr, k, sr, nb, b0, b1, bp, ws, bias, yt, ldy, first, last, R); break;
                switch (rows) {
                EMB_AMX_TILE(16) EMB_AMX_TILE(15) EMB_AMX_TILE(14) EMB_AMX_TILE(13) EMB_AMX_TILE(12)
                EMB_AMX_TILE(11) EMB_AMX_TILE(10) EMB_AMX_TILE(9) EMB_AMX_TILE(8) EMB_AMX_TILE(7)
                EMB_AMX_TILE(6) EMB_AMX_TILE(5) EMB_AMX_TILE(4) EMB_AMX_TILE(3) EMB_AMX_TILE(2)
                default: break;
                EMB_AMX_TILE(1)
                }
#undef EMB_AMX_TILE
            }
        }
    }
    _tile_release();
}

static AMX void gemm_q8_amx(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy) {
    size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4, full = ng / 4 * 4;
    if (m == 0) return;
    if (full < ng) {  /* the last 1-3 groups */
        emb_linear rest = {w->q + full * 4 * k, w->scale + full * 4 * nb, w->bias + full * 4, (int32_t)((ng - full) * 4),
                           w->k, NULL, NULL};
        gemm_q8_avx512(xq, xs, m, &rest, y + full * 4, ldy);
    }
    if (full == 0) return;
    size_t whole = m / 16 * 16, rest = m - whole;  /* tiles of 16 rows, then one of the rest */
    if (whole) amx_rows(xq, xs, whole, 16, w, full, y, ldy);
    if (rest) amx_rows(xq + whole * k, xs + whole * nb, rest, rest, w, full, y + whole * ldy, ldy);
}

static int amx_permitted = 0;  /* set by supported_amx (kernels_select.c calls it once per process) */

/* arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): 0 when this process may use the tiles. */
static int emb_amx_request(void) {
#if defined(__linux__)
    long ret;
    __asm__ __volatile__("syscall" : "=a"(ret) : "a"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
    return ret == 0 ? 0 : -1;
#else
    return -1;
#endif
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

/* AMX-TILE and AMX-INT8 in cpuid, the tile state enabled in XCR0 (bits 17, 18), and the
   kernel's permission for this process to use it (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+). */
static int supported_amx(void) {
    if (!supported_avx512()) return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return 0;  /* AMX-TILE, AMX-INT8 */
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x60000u) != 0x60000u) return 0;
    if (!amx_permitted) amx_permitted = emb_amx_request() == 0 ? 1 : -1;
    return amx_permitted == 1;
}

const emb_kernels emb_kernels_amx = {
    "amx", supported_amx, quantize_rows_avx512, gemm_q8_amx, layernorm_avx512, gelu_avx512,
    attention_avx512, softmax_rows_avx512,
};

#elif EMB_KERNELS == EMB_KERNELS_NATIVE
static int unsupported(void) { return 0; }
const emb_kernels emb_kernels_avx512vnni = {
    "avx512-vnni", unsupported, emb_quantize_rows_ref, emb_gemm_q8_ref, emb_layernorm_ref, emb_gelu_ref,
    emb_attention_heads_ref, emb_softmax_rows_ref,
};
const emb_kernels emb_kernels_amx = {
    "amx", unsupported, emb_quantize_rows_ref, emb_gemm_q8_ref, emb_layernorm_ref, emb_gelu_ref,
    emb_attention_heads_ref, emb_softmax_rows_ref,
};
#else
typedef int emb_kernels_avx512_unused; /* wasm: ISO C wants a declaration in every file */
#endif
