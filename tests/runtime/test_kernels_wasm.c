/*
 * test_kernels_wasm.c — the reference, SIMD128 and relaxed-SIMD kernels side by side in one wasm
 * module (build/wasm/kernels_test.wasm), compared bit for bit on random inputs.
 *
 * Exports: emb_test_kernels(seed) → number of mismatches (0 = all variants agree);
 *          emb_test_relaxed_probe() → the probe's answer on this host;
 *          emb_bench_gemm(variant, m, n, k, reps) → runs a GEMM reps times (timed by the host).
 * Run by tests/python/test_engine_wasm.py under wasmtime.
 */
#include "emb_math.h"
#include "kernels.h"
#include "platform.h"

#define EXPORT(name) __attribute__((export_name(#name), visibility("default")))

static uint32_t state;
static uint32_t rnd(void) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
}
static float frand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() & 0xFFFFFF) / 16777216.0f; }

static int same(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != y[i]) return 0;
    }
    return 1;
}

static int test_quantize(void) {
    enum { M = 5, K = 128 };
    float *x = emb_alloc(M * K * 4), *s1 = emb_alloc(M * K / 8), *s2 = emb_alloc(M * K / 8);
    int8_t *q1 = emb_alloc(M * K), *q2 = emb_alloc(M * K);
    for (int i = 0; i < M * K; i++) x[i] = frand(-5, 5) * (i % 7 == 0 ? 100.0f : 1.0f);
    for (int i = 32; i < 64; i++) x[i] = 0.0f;            /* a zero block */
    x[200] = emb_bits_to_float(0x7FC00000u);              /* NaN */
    x[300] = -0.0f;
    for (int i = 0; i < 32; i++) x[K + i] = (float)(i - 16) * 0.5f;  /* exact halves: ties to even */
    emb_quantize_rows_ref(x, M, K, q1, s1);
    emb_quantize_rows_simd128(x, M, K, q2, s2);
    int bad = !same(q1, q2, M * K) || !same(s1, s2, M * K / 8);
    int16_t *q16 = emb_alloc(M * K * 2);
    emb_quantize_rows16_simd128(x, M, K, q16, s2);
    for (int i = 0; i < M * K; i++) bad += q16[i] != q1[i];
    bad += !same(s1, s2, M * K / 8);
    emb_dealloc(x), emb_dealloc(s1), emb_dealloc(s2), emb_dealloc(q1), emb_dealloc(q2), emb_dealloc(q16);
    return bad;
}

static int test_gemm(int m, int n, int k) {
    int8_t *w = emb_alloc((size_t)(n * k)), *x = emb_alloc((size_t)(m * k));
    float *ws = emb_alloc((size_t)(n * k / 8)), *xs = emb_alloc((size_t)(m * k / 8)), *bias = emb_alloc((size_t)n * 4);
    float *y[3];
    for (int v = 0; v < 3; v++) y[v] = emb_alloc((size_t)(m * n * 4));
    for (int i = 0; i < n * k; i++) w[i] = (int8_t)((int)(rnd() % 255) - 127);
    for (int i = 0; i < m * k; i++) x[i] = (int8_t)((int)(rnd() % 255) - 127);
    for (int i = 0; i < n * k / 32; i++) ws[i] = frand(0.0f, 0.05f);
    for (int i = 0; i < m * k / 32; i++) xs[i] = frand(0.0f, 0.2f);
    for (int i = 0; i < n; i++) bias[i] = frand(-1, 1);
    emb_linear lin = {w, ws, bias, n, k, NULL, NULL};
    emb_gemm_q8_ref(x, xs, (size_t)m, &lin, y[0], (size_t)n);
    int16_t *x16 = emb_alloc((size_t)(m * k * 2));
    for (int i = 0; i < m * k; i++) x16[i] = x[i];
    emb_gemm_q8_simd128(x16, xs, (size_t)m, &lin, y[1], (size_t)n);
    emb_dealloc(x16);
    emb_gemm_q8_relaxed(x, xs, (size_t)m, &lin, y[2], (size_t)n);
    int bad = !same(y[0], y[1], (size_t)(m * n * 4));
    if (emb_relaxed_probe()) bad += !same(y[0], y[2], (size_t)(m * n * 4));
    emb_dealloc(w), emb_dealloc(x), emb_dealloc(ws), emb_dealloc(xs), emb_dealloc(bias);
    for (int v = 0; v < 3; v++) emb_dealloc(y[v]);
    return bad;
}

static int test_float_kernels(void) {
    enum { C = 64, H = 2, NMAX = 37 };
    int bad = 0;
    float *a = emb_alloc(NMAX * 3 * C * 4), *b = emb_alloc(NMAX * 3 * C * 4), *r = emb_alloc(NMAX * C * 4);
    float *g = emb_alloc(C * 4), *be = emb_alloc(C * 4), *o1 = emb_alloc(NMAX * C * 4), *o2 = emb_alloc(NMAX * C * 4);
    float *sc = emb_alloc(emb_attention_scratch(NMAX, 64) * 4);
    for (int i = 0; i < C; i++) g[i] = frand(0.5f, 1.5f), be[i] = frand(-0.1f, 0.1f);
    for (int res = 0; res < 2; res++) {
        for (int i = 0; i < 7 * C; i++) a[i] = b[i] = frand(-4, 4), r[i] = frand(-1, 1);
        emb_layernorm_ref(a, res ? r : NULL, 7, C, C, g, be, 1e-12f);
        emb_layernorm_simd128(b, res ? r : NULL, 7, C, C, g, be, 1e-12f);
        bad += !same(a, b, 7 * C * 4);
        /* ragged widths: 45 and 3 real columns of rows 64 apart */
        emb_layernorm_ref(a, res ? r : NULL, 3, 45, C, g, be, 1e-12f);
        emb_layernorm_simd128(b, res ? r : NULL, 3, 45, C, g, be, 1e-12f);
        emb_layernorm_ref(a, res ? r : NULL, 2, 3, C, g, be, 1e-6f);
        emb_layernorm_simd128(b, res ? r : NULL, 2, 3, C, g, be, 1e-6f);
        bad += !same(a, b, 7 * C * 4);
    }
    for (int i = 0; i < 203; i++) a[i] = b[i] = frand(-9, 9);
    emb_gelu_ref(a, 203);
    emb_gelu_simd128(b, 203);
    bad += !same(a, b, 203 * 4);
    int lens[6] = {1, 2, 3, 4, 9, NMAX};
    for (int t = 0; t < 6; t++) {
        for (int i = 0; i < lens[t] * 3 * C; i++) a[i] = frand(-3, 3);
        emb_attention_ref(a, (size_t)lens[t], C, H, o1, sc);
        emb_attention_args args = {a, 3 * C, o2, C, (size_t)lens[t], C, H, NULL, 0, 0, 0};
        emb_attention_simd128(&args, 0, H, sc);
        bad += !same(o1, o2, (size_t)lens[t] * C * 4);
    }
    /* (n, C, H, window, bias): a relative bias, head sizes 4 does not divide (13, 9), windows */
    static const int cases[][5] = {{9, 64, 2, 0, 1}, {NMAX, 64, 4, 0, 1}, {11, 39, 3, 0, 1}, {20, 45, 5, 0, 0},
                                   {NMAX, 64, 2, 5, 1}, {7, 64, 2, 40, 1}};
    float *bias = emb_alloc(4 * 4 * (2 * NMAX + 15));
    for (int i = 0; i < 4 * (2 * NMAX + 15); i++) bias[i] = frand(-2, 2);
    for (unsigned t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        size_t n = (size_t)cases[t][0], c = (size_t)cases[t][1], h = (size_t)cases[t][2];
        for (size_t i = 0; i < n * 3 * c; i++) a[i] = frand(-3, 3);
        emb_attention_args a1 = {a, 3 * c, o1, c, n, c, h, cases[t][4] ? bias : NULL, 2 * n + 15, n - 1, (size_t)cases[t][3]};
        emb_attention_args a2 = a1;
        a2.out = o2;
        emb_attention_heads_ref(&a1, 0, h, sc);
        emb_attention_simd128(&a2, 0, h, sc);
        bad += !same(o1, o2, n * c * 4);
    }
    /* the softmax of int8 attention (n, window, bias, first query): garbage past n is ignored */
    static const int soft[][4] = {{1, 0, 0, 0}, {9, 0, 1, 0}, {NMAX, 0, 1, 3}, {NMAX, 5, 0, 20}, {23, 3, 1, 7},
                                  {NMAX, 40, 1, 30}};
    for (unsigned t = 0; t < sizeof soft / sizeof soft[0]; t++) {
        size_t n = (size_t)soft[t][0], ld = 64, i0 = (size_t)soft[t][3], m = n - i0 < 4 ? n - i0 : 4;
        for (size_t i = 0; i < 4 * ld; i++) a[i] = b[i] = i % ld < n ? frand(-30, 30) : emb_bits_to_float(0x7FC00000u);
        const float *brow = soft[t][2] ? bias + (n - 1) : NULL;
        emb_softmax_rows_ref(a, m, n, ld, i0, 0.125f, brow, (size_t)soft[t][1]);
        emb_softmax_rows_simd128(b, m, n, ld, i0, 0.125f, brow, (size_t)soft[t][1]);
        bad += !same(a, b, m * ld * 4);
    }
    emb_dealloc(bias);
    emb_dealloc(a), emb_dealloc(b), emb_dealloc(r), emb_dealloc(g), emb_dealloc(be), emb_dealloc(o1), emb_dealloc(o2),
        emb_dealloc(sc);
    return bad;
}

EXPORT(emb_test_kernels) int32_t emb_test_kernels(uint32_t seed) {
    state = seed ? seed : 1;
    int bad = test_quantize() + test_float_kernels();
    int shapes[][3] = {{1, 4, 32}, {4, 8, 32}, {7, 12, 96}, {16, 24, 384}, {5, 1152, 384}, {3, 384, 1536}, {9, 20, 64},
                       {10, 36, 128}, {6, 8, 64}, {13, 16, 96}, {11, 12, 32}};
    for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bad += test_gemm(shapes[i][0], shapes[i][1], shapes[i][2]);
    return bad;
}

EXPORT(emb_test_relaxed_probe) int32_t emb_test_relaxed_probe(void) { return emb_relaxed_probe(); }

EXPORT(emb_bench_gemm) void emb_bench_gemm(int32_t variant, int32_t m, int32_t n, int32_t k, int32_t reps) {
    static int8_t *w, *x;
    static int16_t *x16;
    static float *ws, *xs, *bias, *y;
    static int32_t cap;
    if (m * k + n * k > cap) {
        emb_dealloc(w), emb_dealloc(x), emb_dealloc(ws), emb_dealloc(xs), emb_dealloc(bias), emb_dealloc(y);
        emb_dealloc(x16);
        cap = m * k + n * k;
        x16 = emb_alloc((size_t)(m * k * 2));
        w = emb_alloc((size_t)(n * k));
        x = emb_alloc((size_t)(m * k));
        ws = emb_alloc((size_t)(n * k / 8));
        xs = emb_alloc((size_t)(m * k / 8));
        bias = emb_alloc((size_t)n * 4);
        y = emb_alloc((size_t)(m * n * 4));
        for (int i = 0; i < n * k; i++) w[i] = (int8_t)((int)(rnd() % 255) - 127);
        for (int i = 0; i < m * k; i++) x16[i] = x[i] = (int8_t)((int)(rnd() % 255) - 127);
        for (int i = 0; i < n * k / 32; i++) ws[i] = 0.01f;
        for (int i = 0; i < m * k / 32; i++) xs[i] = 0.01f;
        for (int i = 0; i < n; i++) bias[i] = 0.0f;
    }
    emb_linear lin = {w, ws, bias, n, k, NULL, NULL};
    for (int r = 0; r < reps; r++) {
        if (variant == 0) emb_gemm_q8_ref(x, xs, (size_t)m, &lin, y, (size_t)n);
        else if (variant == 1) emb_gemm_q8_simd128(x16, xs, (size_t)m, &lin, y, (size_t)n);
        else emb_gemm_q8_relaxed(x, xs, (size_t)m, &lin, y, (size_t)n);
    }
}
