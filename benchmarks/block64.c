/*
 * block64.c — what blocks of 64 along K would give the int8 GEMM of the amx and avx512-vnni
 * kernel sets.
 *
 * The int8 scheme scales every block of 32 codes along K (weights and activations), so each
 * block's exact integer sums are converted, scaled and added to the float sums (the epilogue)
 * every 32 codes; the amx set runs each tdpbssd on 32 codes — half a tile's K — and stores a
 * tile per block for that epilogue. This program times a kernel set's GEMM as built
 * (runtime/src/kernels_avx512.c, included below) against the same kernel with blocks of 64 (one
 * epilogue per 64 codes, and one tdpbssd per 64 on AMX: a scheme the bundles do not have;
 * benchmarks/block_size.py measures its accuracy) on random codes and scales of one shape, one
 * thread. The avx512-vnni kernel with blocks of 64 is the engine's own code instantiated with the
 * other block size (gemm_blocks); the AMX one is amx_tile's structure, below. Both kernels of a
 * set are checked first: the built one against the reference GEMM (emb_gemm_q8_ref), the blocks
 * of 64 against a scalar definition of their scheme in the reference's order (sum of
 * (s_x·s_w)·Σ per block, then the bias), bit for bit.
 *
 *   block64 SET M N K [SECONDS]   SET amx or avx512-vnni, N a multiple of 16, K of 64; prints:
 *       block64 SET M N K <µs, blocks of 32> <µs, blocks of 64> <ratio>
 *   (the best call of each, timed in alternating rounds for SECONDS in all, default 1)
 *
 * Exit status: 0 done; 1 the set cannot run here (no such CPU features, or the OS refused AMX's
 * tile state); 2 bad arguments; 3 a kernel differs from its definition. Build it with
 * runtime/cflags.txt's flags and -O3, linked with the objects of `runtime/build.sh native`
 * (build/native/obj) but kernels_avx512.o, whose code this file includes;
 * tests/python/test_block64.py shows the command.
 */
#define _POSIX_C_SOURCE 200809L
#include "kernels_avx512.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if EMB_KERNELS == EMB_KERNELS_NATIVE && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#define B64 64

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* amx_tile's structure with blocks of 64: A (rows × 64 codes), B (16 rows of 64 bytes) */
#define B64_ISSUE(A, B, C, blk)                                  \
    do {                                                         \
        _tile_zero(C);                                           \
        _tile_loadd(A, xq + (blk) * B64, (long)k);               \
        _tile_loadd(B, bp + (blk) * 16 * 64, 64);                \
        _tile_dpbssd(C, A, B);                                   \
    } while (0)
#define B64_FINISH(C, blk)                                                      \
    do {                                                                        \
        _tile_stored(C, c, 64);                                                 \
        amx_epilogue(c, xs, nb, (blk), scales(ws, 4 * nb, (blk), 4), facc, MR); \
    } while (0)

INLINE AMX void b64_tile(const int8_t *xq, size_t k, const float *xs, size_t nb, const int8_t *bp, const float *ws,
                         const float *bias, float *y, size_t ldy, const int MR) {
    _Alignas(64) int32_t c[16 * 16];
    __m512 facc[16];
    for (int r = 0; r < MR; r++) facc[r] = _mm512_setzero_ps();
    B64_ISSUE(0, 1, 2, 0);
    for (size_t b = 0;;) {
        if (b + 1 < nb) B64_ISSUE(3, 4, 5, b + 1);
        B64_FINISH(2, b);
        if (++b >= nb) break;
        if (b + 1 < nb) B64_ISSUE(0, 1, 2, b + 1);
        B64_FINISH(5, b);
        if (++b >= nb) break;
    }
    __m512 vb = _mm512_loadu_ps(bias);
    for (int r = 0; r < MR; r++) _mm512_storeu_ps(y + (size_t)r * ldy, _mm512_add_ps(facc[r], vb));
}

/* Rows 0 .. m-1 (a multiple of `rows`, ≤ 16); qt: the weights' tile layout; xs (M, K/64);
   ws (N/4, K/64, 4). */
static AMX void b64_rows(const int8_t *xq, const float *xs, size_t m, size_t rows, const int8_t *qt, const float *ws,
                         const float *bias, size_t n, size_t k, float *y, size_t ldy) {
    size_t nb = k / B64;
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 6; t++) {
        cfg.rows[t] = (uint8_t)(t == 1 || t == 4 ? 16 : rows);
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    for (size_t g = 0; g < n / 4; g += 4) {
        for (size_t i = 0; i < m; i += rows) {
            const int8_t *xr = xq + i * k;
            const float *sr = xs + i * nb, *wsg = ws + g * 4 * nb, *bg = bias + g * 4;
            const int8_t *bp = qt + g * 4 * k;
            float *yt = y + i * ldy + g * 4;
#define B64_TILE(R) \
    case R: b64_tile(xr, k, sr, nb, bp, wsg, bg, yt, ldy, R); break;
            switch (rows) {
            B64_TILE(16) B64_TILE(15) B64_TILE(14) B64_TILE(13) B64_TILE(12) B64_TILE(11) B64_TILE(10)
            B64_TILE(9) B64_TILE(8) B64_TILE(7) B64_TILE(6) B64_TILE(5) B64_TILE(4) B64_TILE(3) B64_TILE(2)
            default: break;
            B64_TILE(1)
            }
#undef B64_TILE
        }
    }
    _tile_release();
}

static void b64_gemm_amx(const emb_linear *w, const int8_t *xq, const float *xs, size_t m, float *y) {
    size_t n = (size_t)w->n, k = (size_t)w->k, whole = m / 16 * 16, rest = m - whole, nb = k / B64;
    if (whole) b64_rows(xq, xs, whole, 16, w->qt, w->scale, w->bias, n, k, y, n);
    if (rest) b64_rows(xq + whole * k, xs + whole * nb, rest, rest, w->qt, w->scale, w->bias, n, k, y + whole * n, n);
}

static AVX512 void b64_gemm_avx512(const emb_linear *w, const int8_t *xq, const float *xs, size_t m, float *y) {
    gemm_blocks(xq, xs, m, w, y, (size_t)w->n, B64);
}

typedef void (*gemm_fn)(const int8_t *, const float *, size_t, const emb_linear *, float *, size_t);
typedef void (*b64_fn)(const emb_linear *, const int8_t *, const float *, size_t, float *);

/* The scheme of blocks of 64, in the reference's order (the n4k4 code of output o at k is
   q[((o/4)·K/4 + k/4)·16 + (o%4)·4 + k%4]). */
static void b64_definition(const int8_t *xq, const float *xs, size_t m, const int8_t *q, const float *ws,
                           const float *bias, size_t n, size_t k, float *y) {
    size_t nb = k / B64, cells = k / 4;
    for (size_t r = 0; r < m; r++) {
        for (size_t o = 0; o < n; o++) {
            float acc = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                int32_t s = 0;
                for (size_t kk = b * B64; kk < (b + 1) * B64; kk++) {
                    s += (int32_t)xq[r * k + kk] * (int32_t)q[((o / 4) * cells + kk / 4) * 16 + (o % 4) * 4 + kk % 4];
                }
                acc = acc + (xs[r * nb + b] * ws[(o / 4) * 4 * nb + b * 4 + o % 4]) * (float)s;
            }
            y[r * n + o] = acc + bias[o];
        }
    }
}

static uint64_t state = 0x853C49E6748FEA9Bull;
static uint32_t next(void) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(state >> 33);
}
static float scale(void) { return (float)(next() % 1000 + 1) * 1e-5f; }

/* 64-byte aligned, as the engine's buffers and weights (emb_alloc): tile rows that cross a
   cache line load slower */
static void *alloc64(size_t size) { return aligned_alloc(64, (size + 63u) & ~(size_t)63u); }

int main(int argc, char **argv) {
    const char *set = argc > 1 ? argv[1] : "";
    long am = argc > 4 ? atol(argv[2]) : 0, an = argc > 4 ? atol(argv[3]) : 0, ak = argc > 4 ? atol(argv[4]) : 0;
    double secs = argc > 5 ? atof(argv[5]) : 1.0;
    int amx = strcmp(set, "amx") == 0, avx512 = strcmp(set, "avx512-vnni") == 0;
    if (argc < 5 || argc > 6 || !(amx || avx512) || am < 1 || am > 4096 || an < 16 || an % 16 || an > 8192 ||
        ak < 64 || ak % 64 || ak > 8192 || !(secs > 0.0 && secs <= 60.0)) {
        fprintf(stderr, "usage: block64 SET M N K [SECONDS]  (SET amx or avx512-vnni; 1 ≤ M ≤ 4096; N a multiple of "
                        "16 up to 8192; K a multiple of 64 up to 8192; 0 < SECONDS ≤ 60)\n");
        return 2;
    }
    if (amx && !supported_amx()) {
        fprintf(stderr, "block64: this CPU has no AMX-INT8, or the OS refused the tile state\n");
        return 1;
    }
    if (avx512 && !supported_avx512()) {
        fprintf(stderr, "block64: this CPU has no AVX-512 VNNI\n");
        return 1;
    }
    gemm_fn built = amx ? gemm_q8_amx : gemm_q8_avx512;
    b64_fn b64 = amx ? b64_gemm_amx : b64_gemm_avx512;
    size_t m = (size_t)am, n = (size_t)an, k = (size_t)ak, nb32 = k / 32, nb64 = k / 64;
    int8_t *xq = alloc64(m * k), *q = alloc64(n * k), *qt = alloc64(n * k);
    float *xs32 = alloc64(4 * m * nb32), *ws32 = alloc64(4 * n * nb32), *xs64 = alloc64(4 * m * nb64);
    float *ws64 = alloc64(4 * n * nb64), *bias = alloc64(4 * n), *y = alloc64(4 * m * n), *yd = alloc64(4 * m * n);
    if (!xq || !q || !qt || !xs32 || !ws32 || !xs64 || !ws64 || !bias || !y || !yd) return 2;
    for (size_t i = 0; i < m * k; i++) xq[i] = (int8_t)((int)(next() % 255) - 127);
    for (size_t i = 0; i < n * k; i++) q[i] = (int8_t)((int)(next() % 255) - 127);
    for (size_t i = 0; i < m * nb32; i++) xs32[i] = scale();
    for (size_t i = 0; i < n * nb32; i++) ws32[i] = scale();
    for (size_t i = 0; i < m * nb64; i++) xs64[i] = scale();
    for (size_t i = 0; i < n * nb64; i++) ws64[i] = scale();
    for (size_t i = 0; i < n; i++) bias[i] = (float)(next() % 2000) * 1e-3f - 1.0f;
    emb_tile_layout(q, n, k, qt);  /* as the engine lays the weights out at load */
    emb_linear w = {q, ws32, bias, (int32_t)n, (int32_t)k, NULL, amx ? qt : NULL};
    emb_linear w64 = {q, ws64, bias, (int32_t)n, (int32_t)k, NULL, amx ? qt : NULL};
    emb_gemm_q8_ref(xq, xs32, m, &w, yd, n);
    built(xq, xs32, m, &w, y, n);
    if (memcmp(y, yd, 4 * m * n) != 0) {
        fprintf(stderr, "block64: the built %s kernel differs from the reference GEMM\n", set);
        return 3;
    }
    b64_definition(xq, xs64, m, q, ws64, bias, n, k, yd);
    b64(&w64, xq, xs64, m, y);
    if (memcmp(y, yd, 4 * m * n) != 0) {
        fprintf(stderr, "block64: the %s kernel with blocks of 64 differs from their definition\n", set);
        return 3;
    }
    double best32 = 1e30, best64 = 1e30;
    for (int round = 0; round < 10; round++) {
        for (int which = 0; which < 2; which++) {
            double t0 = now(), t;
            do {
                double a = now();
                if (which) b64(&w64, xq, xs64, m, y);
                else built(xq, xs32, m, &w, y, n);
                t = now();
                double *best = which ? &best64 : &best32;
                if (t - a < *best) *best = t - a;
            } while (t - t0 < secs / 20);
        }
    }
    printf("block64 %s %zu %zu %zu %.3f %.3f %.3f\n", set, m, n, k, best32 * 1e6, best64 * 1e6, best32 / best64);
    free(xq), free(q), free(qt), free(xs32), free(ws32), free(xs64), free(ws64), free(bias), free(y), free(yd);
    return 0;
}

#else
int main(void) {
    fprintf(stderr, "block64: needs an x86-64 native build (gcc or clang)\n");
    return 1;
}
#endif
