/*
 * kernels_select.c — runs the choice that kernels.h spells out: which kernel set an emb_context
 * uses, and the self-check that a native set must pass first.
 *
 * Natively, the first call takes each set of EMB_NATIVE_KERNEL_SETS in turn: a set whose
 * `supported` test says yes is run on small problems (ragged shapes, tails, a K longer than one
 * chunk, NaN and infinity among the inputs) and compared with the reference bit for bit; the sets
 * that agree are available, best first. A wasm module has exactly one set, the one it was built
 * with, and keeps no state (in the threads build, globals would be shared by all instances).
 */
#include "edgembed.h"
#include "emb_math.h"
#include "kernels.h"
#include "platform.h"

#if EMB_KERNELS == EMB_KERNELS_NATIVE

/* ── the reference set ─────────────────────────────────────────────────────────────── */

const emb_kernels emb_kernels_reference = {
    "reference", NULL, emb_quantize_rows_ref, emb_gemm_q8_ref, emb_layernorm_ref, emb_gelu_ref,
    emb_attention_heads_ref, emb_softmax_rows_ref,
};

/* ── the self-check ────────────────────────────────────────────────────────────────── */

typedef struct check_rng {
    uint64_t s;
} check_rng;

static uint32_t next_u32(check_rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return (uint32_t)(r->s >> 11);
}
static float next_f(check_rng *r, float lo, float hi) {
    return lo + (hi - lo) * (float)(next_u32(r) & 0xFFFFFF) / 16777216.0f;
}

static int same_bytes(const void *a, const void *b, size_t n) {
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != y[i]) return 0;
    }
    return 1;
}

static int check_gemm(const emb_kernels *k, check_rng *r, size_t m, size_t n, size_t kk) {
    size_t nb = kk / EMB_BLOCK;
    int8_t *wq = emb_alloc(n * kk), *xq = emb_alloc(m * kk);
    float *ws = emb_alloc(4 * n * nb), *xs = emb_alloc(4 * m * nb), *bias = emb_alloc(4 * n);
    float *y1 = emb_alloc(4 * m * n), *y2 = emb_alloc(4 * m * n);
    int ok = wq && xq && ws && xs && bias && y1 && y2;
    if (ok) {
        for (size_t i = 0; i < n * kk; i++) wq[i] = (int8_t)((int)(next_u32(r) % 255) - 127);
        for (size_t i = 0; i < m * kk; i++) xq[i] = (int8_t)((int)(next_u32(r) % 255) - 127);
        for (size_t i = 0; i < n * nb; i++) ws[i] = next_f(r, 0.0f, 0.03f);
        for (size_t i = 0; i < m * nb; i++) xs[i] = next_f(r, 0.0f, 0.1f);
        for (size_t i = 0; i < n; i++) bias[i] = next_f(r, -1.0f, 1.0f);
        for (size_t i = 0; i < kk; i++) xq[i] = 127;  /* a row of extreme codes */
        for (size_t i = 0; i < kk && m > 1; i++) xq[kk + i] = -127;
        emb_linear lin = {wq, ws, bias, (int32_t)n, (int32_t)kk, NULL, NULL};
        emb_gemm_q8_ref(xq, xs, m, &lin, y1, n);
        emb_memset(y2, 0xA5, 4 * m * n);
        k->gemm_q8(xq, xs, m, &lin, y2, n);
        ok = same_bytes(y1, y2, 4 * m * n);
    }
    emb_dealloc(wq), emb_dealloc(xq), emb_dealloc(ws), emb_dealloc(xs), emb_dealloc(bias);
    emb_dealloc(y1), emb_dealloc(y2);
    return ok;
}

static int check_float_kernels(const emb_kernels *k, check_rng *r) {
    enum { M = 3, C = 96, N = 21, CA = 64, HA = 2 };
    float x1[M * C], x2[M * C], res[M * C], g[C], b[C], s1[M * C / 32], s2[M * C / 32];
    int8_t q1[M * C], q2[M * C];
    for (int i = 0; i < M * C; i++) {
        x1[i] = x2[i] = next_f(r, -6.0f, 6.0f);
        res[i] = next_f(r, -1.0f, 1.0f);
    }
    for (int i = 0; i < C; i++) {
        g[i] = next_f(r, 0.5f, 1.5f);
        b[i] = next_f(r, -0.2f, 0.2f);
    }
    for (int i = 32; i < 64; i++) x1[i] = x2[i] = 0.0f;  /* a block of zeros: scale 0 */
    x1[70] = x2[70] = 2.5f * (6.0f / 127.0f);                /* halfway cases and extremes */
    x1[100] = x2[100] = -emb_bits_to_float(0x7FC00000u);     /* NaN */
    x1[101] = x2[101] = emb_bits_to_float(0x7F800000u);      /* infinity */
    emb_quantize_rows_ref(x1, M, C, q1, s1);
    k->quantize_rows(x2, M, C, (emb_qx *)q2, s2);
    if (!same_bytes(q1, q2, sizeof q1) || !same_bytes(s1, s2, sizeof s1)) return 0;

    x1[100] = x2[100] = 0.3f;
    x1[101] = x2[101] = -0.3f;
    emb_gelu_ref(x1, M * C);
    k->gelu(x2, M * C);
    if (!same_bytes(x1, x2, sizeof x1)) return 0;
    emb_layernorm_ref(x1, res, M, C, C, g, b, 1e-12f);
    k->layernorm(x2, res, M, C, C, g, b, 1e-12f);
    if (!same_bytes(x1, x2, sizeof x1)) return 0;
    emb_layernorm_ref(x1, NULL, M, C, C, g, b, 1e-5f);
    k->layernorm(x2, NULL, M, C, C, g, b, 1e-5f);
    if (!same_bytes(x1, x2, sizeof x1)) return 0;
    /* a ragged width (45 of 64 columns per row, every vector's tail), with and without residual */
    emb_layernorm_ref(x1, res, 2, 45, 64, g, b, 1e-12f);
    k->layernorm(x2, res, 2, 45, 64, g, b, 1e-12f);
    emb_layernorm_ref(x1, NULL, 3, 29, 32, g, b, 1e-6f);
    k->layernorm(x2, NULL, 3, 29, 32, g, b, 1e-6f);
    if (!same_bytes(x1, x2, sizeof x1)) return 0;

    /* attention (n, C, H, first head, window, relative bias): head sizes the vectors divide (32,
       16) and ones they do not (12, 13), a window that leaves keys out, a relative bias */
    static const size_t shapes[][6] = {{N, CA, HA, 0, 0, 0},  {5, 24, 2, 0, 0, 0},  {1, CA, HA, 1, 0, 0},
                                       {18, CA, 1, 0, 0, 0},  {19, 64, 4, 0, 0, 1}, {23, 64, 2, 0, 5, 0},
                                       {9, 39, 3, 1, 0, 1},   {33, 32, 2, 0, 40, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s][0], c = shapes[s][1], h = shapes[s][2], h0 = shapes[s][3];
        size_t ldq = 3 * c + 4, ldo = c + 3, bias_ld = 2 * n + 15;
        size_t scratch = emb_attention_scratch(n, c / h);
        float *qkv = emb_alloc(4 * n * ldq), *o1 = emb_alloc(4 * n * ldo), *o2 = emb_alloc(4 * n * ldo);
        float *sc = emb_alloc(4 * scratch), *bias = emb_alloc(4 * h * bias_ld);
        int ok = qkv && o1 && o2 && sc && bias;
        if (ok) {
            for (size_t i = 0; i < n * ldq; i++) qkv[i] = next_f(r, -3.0f, 3.0f);
            for (size_t i = 0; i < h * bias_ld; i++) bias[i] = next_f(r, -2.0f, 2.0f);
            emb_memset(o2, 0, 4 * n * ldo);
            emb_memset(o1, 0, 4 * n * ldo);
            emb_attention_args a1 = {qkv, ldq, o1, ldo, n, c, h, shapes[s][5] ? bias : NULL, bias_ld, n - 1,
                                     shapes[s][4]};
            emb_attention_args a2 = a1;
            a2.out = o2;
            emb_attention_heads_ref(&a1, h0, h, sc);
            k->attention(&a2, h0, h, sc);
            ok = same_bytes(o1, o2, 4 * n * ldo);
        }
        emb_dealloc(sc);
        /* the int8 attention (its softmax, and the GEMM and quantization on these shapes) */
        size_t bytes = emb_attention_q8_scratch(n, c / h, h);
        sc = ok ? emb_alloc(bytes) : NULL;
        ok = ok && sc;
        if (ok) {
            emb_attention_args a1 = {qkv, ldq, o1, ldo, n, c, h, shapes[s][5] ? bias : NULL, bias_ld, n - 1,
                                     shapes[s][4]};
            emb_attention_args a2 = a1;
            a2.out = o2;
            emb_attention_q8(&emb_kernels_reference, &a1, h0, h, sc);
            emb_attention_q8(k, &a2, h0, h, sc);
            ok = same_bytes(o1, o2, 4 * n * ldo);
        }
        emb_dealloc(qkv), emb_dealloc(o1), emb_dealloc(o2), emb_dealloc(sc), emb_dealloc(bias);
        if (!ok) return 0;
    }
    return 1;
}

int emb_kernels_self_check(const emb_kernels *k) {
    check_rng r = {0x2545F4914F6CDD1Dull};
    /* GEMM shapes: tails in M and N, one row, more rows than a chunk, K over one chunk */
    static const size_t shapes[][3] = {{11, 52, 96}, {1, 4, 32}, {70, 20, 64}, {3, 36, 2080}, {8, 48, 1536}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (!check_gemm(k, &r, shapes[s][0], shapes[s][1], shapes[s][2])) return 1;
    }
    return check_float_kernels(k, &r) ? 0 : 1;
}

/* ── the choice, once per process ──────────────────────────────────────────────────── */

#include <pthread.h>

#define EMB_N_SETS 7

static const emb_kernels *const sets[EMB_N_SETS] = EMB_NATIVE_KERNEL_SETS;
static int usable[EMB_N_SETS];
static char available[160];
static pthread_once_t chosen = PTHREAD_ONCE_INIT;

static void choose(void) {
    size_t len = 0;
    for (int i = 0; i < EMB_N_SETS; i++) {
        const emb_kernels *k = sets[i];
        usable[i] = (!k->supported || k->supported()) && (k == &emb_kernels_reference || emb_kernels_self_check(k) == 0);
        for (const char *p = k->name; usable[i] && *p && len + 2 < sizeof available; p++) available[len++] = *p;
        if (usable[i] && len + 2 < sizeof available) available[len++] = ' ';
    }
    available[len ? len - 1 : 0] = '\0';
}

static int same_name(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

const emb_kernels *emb_kernels_find(const char *name) {
    pthread_once(&chosen, choose);
    for (int i = 0; i < EMB_N_SETS; i++) {
        if (usable[i] && (!name || !*name || same_name(name, sets[i]->name))) return sets[i];
    }
    return NULL;
}

const char *emb_kernels_available(void) {
    pthread_once(&chosen, choose);
    return available;
}

#else /* wasm: the one set the module was built with */

#if EMB_KERNELS == EMB_KERNELS_RELAXED
static const emb_kernels builtin = {"relaxed-simd", NULL, emb_quantize_rows_simd128, emb_gemm_q8_relaxed,
                                    emb_layernorm_simd128, emb_gelu_simd128, emb_attention_simd128,
                                    emb_softmax_rows_simd128};
#elif EMB_KERNELS == EMB_KERNELS_SIMD128
static const emb_kernels builtin = {"simd128", NULL, emb_quantize_rows16_simd128, emb_gemm_q8_simd128,
                                    emb_layernorm_simd128, emb_gelu_simd128, emb_attention_simd128,
                                    emb_softmax_rows_simd128};
#else
static const emb_kernels builtin = {"reference", NULL, emb_quantize_rows_ref, emb_gemm_q8_ref,
                                    emb_layernorm_ref, emb_gelu_ref, emb_attention_heads_ref,
                                    emb_softmax_rows_ref};
#endif

const emb_kernels *emb_kernels_find(const char *name) {
    if (!name || !*name) return &builtin;
    const char *a = name, *b = builtin.name;
    while (*a && *a == *b) a++, b++;
    return *a == *b ? &builtin : NULL;
}

int emb_kernels_self_check(const emb_kernels *k) { return k == &builtin ? 0 : 1; }

const char *emb_kernels_available(void) { return builtin.name; }

#endif
