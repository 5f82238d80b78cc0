/*
 * test_engine.c — the engine's C tests: kernels against plain math, the bundle reader against
 * hostile inputs, and small random models of every feature combination built here in memory
 * (synth.h): batch invariance, the same bits for every kernel set and thread count, pooling
 * modes, prompts, token types and Dense modules against plain computations, input checks.
 *
 *   test_engine [BUNDLE.emb]     with a real bundle (e.g. all-MiniLM-L6-v2), also mutates it
 *                                and checks batch invariance on random batch compositions
 *
 * Prints one line per failure and ends with "N passed, N failed"; exit status 1 on failure.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "edgembed.h"
#include "emb_math.h"
#include "kernels.h"
#include "model.h"

#define TEST_SEED 0x9E3779B97F4A7C15ull
#include "check.h"
#include "synth.h"

/* ── math and kernels ──────────────────────────────────────────────────────────────── */

static void test_math(void) {
    double worst_exp = 0, worst_erf = 0;
    for (float x = -80.0f; x < 80.0f; x += 0.01f) {
        double r = fabs((double)emb_expf(x) - exp((double)x)) / exp((double)x);
        if (r > worst_exp) worst_exp = r;
    }
    for (float x = -6.0f; x < 6.0f; x += 0.001f) {
        double e = fabs((double)emb_erff(x) - erf((double)x));
        if (e > worst_erf) worst_erf = e;
    }
    CHECK(worst_exp < 3e-7, "expf relative error %g", worst_exp);
    CHECK(worst_erf < 1e-6, "erf absolute error %g", worst_erf);
    /* GELU against the exact form in double; tanh-GELU would be off by up to 4.7e-4 */
    double worst_gelu = 0;
    for (float x = -8.0f; x < 8.0f; x += 0.003f) {
        double g = 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
        double e = fabs((double)emb_gelu1(x) - g);
        if (e > worst_gelu) worst_gelu = e;
    }
    CHECK(worst_gelu < 2e-6, "gelu error %g", worst_gelu);
    double worst_tanh = 0, worst_gt = 0, worst_log1p = 0;
    for (float x = -20.0f; x < 20.0f; x += 0.0007f) {
        worst_tanh = fmax(worst_tanh, fabs((double)emb_tanhf(x) - tanh((double)x)));
        double g = 0.5 * x * (1.0 + tanh(0.79788456080286535588 * (x + 0.044715 * (double)x * x * x)));
        worst_gt = fmax(worst_gt, fabs((double)emb_gelu_tanh1(x) - g));
    }
    for (float x = 0.0f; x < 1e6f; x = x < 1e-6f ? x + 1e-9f : x * 1.0007f) {
        double want = log1p((double)x);
        worst_log1p = fmax(worst_log1p, fabs((double)emb_log1pf(x) - want) / (want > 1e-30 ? want : 1e-30));
    }
    CHECK(worst_tanh < 3e-7, "tanh absolute error %g", worst_tanh);
    CHECK(worst_gt < 3e-6, "gelu_tanh error %g", worst_gt);
    CHECK(worst_log1p < 3e-7, "log1p relative error %g", worst_log1p);
    CHECK(emb_tanhf(0.0f) == 0.0f && emb_tanhf(100.0f) == 1.0f && emb_tanhf(-100.0f) == -1.0f, "tanh limits");
    CHECK(emb_log1pf(0.0f) == 0.0f && isnan(emb_log1pf(NAN)) && isfinite(emb_log1pf(INFINITY)), "log1p edges");
    /* SiLU x · sigmoid(x) against double: relative error where it is not tiny, absolute near 0 */
    double worst_silu = 0;
    for (float x = -120.0f; x < 120.0f; x += 0.0013f) {
        double want = (double)x / (1.0 + exp(-(double)x));
        worst_silu = fmax(worst_silu, fabs((double)emb_silu1(x) - want) / fmax(fabs(want), 1e-3));
    }
    CHECK(worst_silu < 1e-6, "silu error %g", worst_silu);
    CHECK(emb_silu1(0.0f) == 0.0f && !signbit(emb_silu1(0.0f)) && emb_silu1(100.0f) == 100.0f &&
              fabsf(emb_silu1(-100.0f)) < 1e-30f && isnan(emb_silu1(NAN)),
          "silu edges");
}

static void test_quantize(void) {
    float x[64];
    int8_t q[64];
    float s[2];
    for (int i = 0; i < 64; i++) x[i] = 0.0f;
    x[0] = 127.0f;  /* scale exactly 1 */
    x[1] = 2.5f;    /* half to even: 2 */
    x[2] = 3.5f;    /* 4 */
    x[3] = -2.5f;   /* -2 */
    x[4] = -127.0f;
    x[5] = 0.49f;
    emb_quantize_rows_ref(x, 1, 64, q, s);
    CHECK(s[0] == 1.0f, "scale %g", (double)s[0]);
    CHECK(q[0] == 127 && q[1] == 2 && q[2] == 4 && q[3] == -2 && q[4] == -127 && q[5] == 0,
          "q = %d %d %d %d %d %d", q[0], q[1], q[2], q[3], q[4], q[5]);
    CHECK(s[1] == 0.0f && q[40] == 0, "zero block: scale %g", (double)s[1]);
    x[33] = NAN;
    x[34] = INFINITY;
    emb_quantize_rows_ref(x, 1, 64, q, s);  /* must not trap; values are unspecified */
    CHECK(1, "nan");
}

/* y = bias + Σ_b (sx·sw) · Σ q·q written plainly over an unpacked W, then compared bit for bit. */
static void test_gemm(void) {
    enum { M = 7, N = 12, K = 96, NB = K / 32 };
    static int8_t w[N][K], packed[N * K], xq[M * K];
    static float ws[N][NB], packed_s[N * NB], xs[M * NB], bias[N], y[M * N];
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) w[n][k] = (int8_t)((int)(rng() % 255) - 127);
        for (int b = 0; b < NB; b++) ws[n][b] = frand(0.001f, 0.05f);
        bias[n] = frand(-1, 1);
    }
    for (int i = 0; i < M * K; i++) xq[i] = (int8_t)((int)(rng() % 255) - 127);
    for (int i = 0; i < M * NB; i++) xs[i] = frand(0.0f, 0.1f);
    for (int g = 0; g < N / 4; g++) {
        for (int j = 0; j < K / 4; j++) {
            for (int r = 0; r < 4; r++) {
                for (int c = 0; c < 4; c++) packed[((g * (K / 4) + j) * 4 + r) * 4 + c] = w[4 * g + r][4 * j + c];
            }
        }
        for (int b = 0; b < NB; b++) {
            for (int r = 0; r < 4; r++) packed_s[(g * NB + b) * 4 + r] = ws[4 * g + r][b];
        }
    }
    emb_linear lin = {packed, packed_s, bias, N, K, NULL, NULL};
    emb_gemm_q8_ref(xq, xs, M, &lin, y, N);
    int exact = 1;
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int b = 0; b < NB; b++) {
                int32_t is = 0;
                for (int k = 32 * b; k < 32 * b + 32; k++) is += xq[m * K + k] * w[n][k];
                acc += (xs[m * NB + b] * ws[n][b]) * (float)is;
            }
            if (y[m * N + n] != acc + bias[n]) exact = 0;
        }
    }
    CHECK(exact, "gemm_q8_ref differs from the scheme's formula");
#if EMB_KERNELS == EMB_KERNELS_NATIVE
    /* every native kernel set this CPU runs against the reference, bit for bit, on several shapes
       (tests/runtime/test_native.c checks the other kernels, threads and whole models) */
    static const emb_kernels *const sets[] = EMB_NATIVE_KERNEL_SETS;
    int shapes[][3] = {{1, 4, 32}, {3, 8, 64}, {7, 12, 96}, {16, 1152, 384}, {5, 384, 1536}};
    for (unsigned v = 0; v < sizeof sets / sizeof sets[0]; v++) {
        if (sets[v]->supported && !sets[v]->supported()) continue;
        int same = 1;
        for (unsigned s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int mm = shapes[s][0], nn = shapes[s][1], kk = shapes[s][2];
            int8_t *wq = malloc((size_t)(nn * kk)), *xx = malloc((size_t)(mm * kk));
            float *wsc = malloc(sizeof(float) * (size_t)(nn * kk / 32)), *xsc = malloc(sizeof(float) * (size_t)(mm * kk / 32));
            float *b2 = malloc(sizeof(float) * (size_t)nn), *y1 = malloc(sizeof(float) * (size_t)(mm * nn)),
                  *y2 = malloc(sizeof(float) * (size_t)(mm * nn));
            for (int i = 0; i < nn * kk; i++) wq[i] = (int8_t)((int)(rng() % 255) - 127);
            for (int i = 0; i < mm * kk; i++) xx[i] = (int8_t)((int)(rng() % 255) - 127);
            for (int i = 0; i < nn * kk / 32; i++) wsc[i] = frand(0, 0.05f);
            for (int i = 0; i < mm * kk / 32; i++) xsc[i] = frand(0, 0.2f);
            for (int i = 0; i < nn; i++) b2[i] = frand(-1, 1);
            emb_linear l2 = {wq, wsc, b2, nn, kk, NULL, NULL};
            emb_gemm_q8_ref(xx, xsc, (size_t)mm, &l2, y1, (size_t)nn);
            sets[v]->gemm_q8(xx, xsc, (size_t)mm, &l2, y2, (size_t)nn);
            if (memcmp(y1, y2, sizeof(float) * (size_t)(mm * nn)) != 0) same = 0;
            free(wq), free(xx), free(wsc), free(xsc), free(b2), free(y1), free(y2);
        }
        CHECK(same, "%s GEMM differs from the reference", sets[v]->name);
    }
#endif
}

/* n4k4 cells of W (n, k) row-major, n % 4 == 0, k % 4 == 0: out[((g·k/4 + j)·4 + r)·4 + c] = W[4g + r][4j + c] */
static void pack_n4k4_f32(const float *w, int n, int k, float *out) {
    for (int g = 0; g < n / 4; g++) {
        for (int j = 0; j < k / 4; j++) {
            for (int r = 0; r < 4; r++) {
                for (int c = 0; c < 4; c++) out[((g * (k / 4) + j) * 4 + r) * 4 + c] = w[(4 * g + r) * k + 4 * j + c];
            }
        }
    }
}

/* The fp32 linear: bit for bit the order edgembed.h documents (4 lanes by k mod 4, combined as
   emb_hsum4, then the bias), and close to the double-precision product; odd M covers the tail. */
static void test_gemm_f32(void) {
    enum { M = 5, N = 12, K = 96 };
    static float w[N * K], packed[N * K], x[M * K], bias[N], y[M * N];
    for (int i = 0; i < N * K; i++) w[i] = frand(-1, 1);
    for (int i = 0; i < M * K; i++) x[i] = frand(-2, 2);
    for (int n = 0; n < N; n++) bias[n] = frand(-1, 1);
    pack_n4k4_f32(w, N, K, packed);
    emb_linear lin = {NULL, NULL, bias, N, K, packed, NULL};
    emb_gemm_f32_ref(x, M, &lin, y, N);
    int exact = 1;
    double worst = 0;
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            float l[4] = {0, 0, 0, 0};
            double d = bias[n];
            for (int k = 0; k < K; k++) {
                l[k & 3] += x[m * K + k] * w[n * K + k];
                d += (double)x[m * K + k] * w[n * K + k];
            }
            if (y[m * N + n] != emb_hsum4(l[0], l[1], l[2], l[3]) + bias[n]) exact = 0;
            if (y[m * N + n] != emb_dot_f32_ref(x + m * K, w + n * K, K) + bias[n]) exact = 0;
            worst = fmax(worst, fabs(y[m * N + n] - d));
        }
    }
    CHECK(exact, "gemm_f32_ref differs from its summation order");
    CHECK(worst < 1e-4, "gemm_f32_ref error %g", worst);
}

/* The rescored decoder's candidate bound (heads.c) on random data: the int8 logit of every
   (token, entry) lies within the token's bound of the exact one, so no logit that is positive in
   fp32 is left out; and the bound is not vacuous (most negative logits are ruled out). Shapes
   with a short last block (C = 80 in blocks of 32) and weights and activations of mixed scale. */
static void test_rescore_bound(void) {
    enum { V = 400, C = 80, KP = 96, T = 40, NB = KP / 32 };
    static float w[V * KP], packed_s[V * NB], ws[V * NB], x[T * KP], xs[T * NB], bias[V], y[T * V], coef[2 * NB];
    static float exact[V * C];
    static int8_t wq[V * KP], packed[V * KP], xq[T * KP];
    memset(w, 0, sizeof w);
    memset(x, 0, sizeof x);
    for (int v = 0; v < V; v++) {
        float spread = v % 7 == 0 ? 1.0f : 0.5f;  /* some rows with larger weights */
        for (int j = 0; j < C; j++) w[v * KP + j] = frand(-spread, spread) * (j % 11 == 0 ? 3.0f : 1.0f);
        bias[v] = frand(-12.0f, 1.0f);          /* most logits negative, some near zero */
        for (int j = 0; j < C; j++) exact[v * C + j] = w[v * KP + j];
    }
    emb_quantize_rows_ref(w, V, KP, wq, ws);
    for (int g = 0; g < V / 4; g++) {
        for (int j = 0; j < KP / 4; j++) {
            for (int r = 0; r < 4; r++) {
                for (int c = 0; c < 4; c++) packed[((g * (KP / 4) + j) * 4 + r) * 4 + c] = wq[(4 * g + r) * KP + 4 * j + c];
            }
        }
        for (int b = 0; b < NB; b++) {
            for (int r = 0; r < 4; r++) packed_s[(g * NB + b) * 4 + r] = ws[(4 * g + r) * NB + b];
        }
    }
    emb_linear dec = {packed, packed_s, bias, V, KP, NULL, NULL};
    emb_rescore_coefficients(&dec, exact, V, C, coef);
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < C; j++) x[t * KP + j] = frand(-1, 1) * (t % 5 == 0 ? 8.0f : 1.0f) * (j == t ? 20.0f : 1.0f);
    }
    emb_quantize_rows_ref(x, T, KP, xq, xs);
    emb_gemm_q8_ref(xq, xs, T, &dec, y, V);
    int within = 1, missed = 0, positive = 0;
    long candidates = 0;
    double worst = 0;
    for (int t = 0; t < T; t++) {
        float e = emb_rescore_bound(coef, x + t * KP, xs + t * NB, KP);
        for (int v = 0; v < V; v++) {
            double d = bias[v];
            for (int j = 0; j < C; j++) d += (double)x[t * KP + j] * exact[v * C + j];
            float f = emb_dot_f32_ref(x + t * KP, exact + v * C, C) + bias[v];
            double err = fabs((double)y[t * V + v] - d);
            if (err > e) within = 0;
            worst = fmax(worst, err / e);
            int cand = y[t * V + v] > -e;
            candidates += cand;
            if (f > 0.0f || d > 0) {
                positive++;
                if (!cand) missed++;
            }
        }
    }
    CHECK(within, "an int8 logit outside its bound (worst error / bound %g)", worst);
    CHECK(missed == 0 && positive > 0, "%d of %d positive logits not candidates", missed, positive);
    CHECK(candidates < (long)T * V / 2, "bound too loose: %ld candidates of %d", candidates, T * V);
}

static void test_layernorm_attention(void) {
    enum { C = 64, H = 2, NT = 5 };
    static float x[NT * C], res[NT * C], g[C], b[C], qkv[NT * 3 * C], out[NT * C], scores[NT];
    for (int i = 0; i < NT * C; i++) {
        x[i] = frand(-3, 3);
        res[i] = frand(-1, 1);
    }
    for (int i = 0; i < C; i++) {
        g[i] = frand(0.5f, 1.5f);
        b[i] = frand(-0.2f, 0.2f);
    }
    static float want[NT * C];
    for (int t = 0; t < NT; t++) {
        double mean = 0, var = 0;
        for (int i = 0; i < C; i++) mean += (double)x[t * C + i] + res[t * C + i];
        mean /= C;
        for (int i = 0; i < C; i++) {
            double d = (double)x[t * C + i] + res[t * C + i] - mean;
            var += d * d;
        }
        var /= C;
        for (int i = 0; i < C; i++) {
            want[t * C + i] = (float)(((double)x[t * C + i] + res[t * C + i] - mean) / sqrt(var + 1e-12) * g[i] + b[i]);
        }
    }
    emb_layernorm_ref(x, res, NT, C, C, g, b, 1e-12f);
    double worst = 0;
    for (int i = 0; i < NT * C; i++) worst = fmax(worst, fabs((double)x[i] - want[i]));
    CHECK(worst < 2e-5, "layernorm error %g", worst);

    for (int i = 0; i < NT * 3 * C; i++) qkv[i] = frand(-2, 2);
    emb_attention_ref(qkv, NT, C, H, out, scores);
    worst = 0;
    int d = C / H;
    for (int h = 0; h < H; h++) {
        for (int i = 0; i < NT; i++) {
            double p[NT], mx = -1e300, sum = 0;
            for (int j = 0; j < NT; j++) {
                double s = 0;
                for (int e = 0; e < d; e++) s += (double)qkv[i * 3 * C + h * d + e] * qkv[j * 3 * C + C + h * d + e];
                p[j] = s / sqrt((double)d);
                mx = fmax(mx, p[j]);
            }
            for (int j = 0; j < NT; j++) sum += (p[j] = exp(p[j] - mx));
            for (int e = 0; e < d; e++) {
                double o = 0;
                for (int j = 0; j < NT; j++) o += p[j] / sum * qkv[j * 3 * C + 2 * C + h * d + e];
                worst = fmax(worst, fabs(o - out[i * C + h * d + e]));
            }
        }
    }
    CHECK(worst < 1e-5, "attention error %g", worst);
}

/* ── bundles ───────────────────────────────────────────────────────────────────────── */

enum { TC = 32, TF = 64, TV = 9, TP = 8, TL = 2 };

static uint8_t *tiny_bundle(size_t *size, const char *version, int bad_crc) {
    synth_spec sp = synth_bert();
    sp.version = version;
    sp.bad_crc = bad_crc;
    return synth_bundle(&sp, size);
}

static void test_status_strings(void) {
    for (int s = 0; s <= 9; s++) CHECK(emb_status_str((emb_status)s) != NULL, "status %d", s);
    CHECK(strstr(emb_status_str(EMB_STATUS_BAD_VERSION), "2 through 2") != NULL, "version range");
    CHECK(strstr(emb_status_str(EMB_STATUS_BAD_VERSION), "embed bundle MODEL") != NULL, "how to regenerate");
    CHECK(emb_status_str((emb_status)99) != NULL, "unknown status");
}

static size_t hlen_of(const uint8_t *bytes) {
    size_t h = 0;
    for (int i = 7; i >= 0; i--) h = (h << 8) | bytes[i];
    return h;
}

static emb_status load(const uint8_t *bytes, size_t size) {
    emb_model *m = NULL;
    emb_status s = emb_model_init(&m, bytes, size);
    if (s == EMB_STATUS_OK) CHECK(m != NULL, "model set on success");
    else CHECK(m == NULL, "model NULL on failure");
    emb_model_free(m);
    return s;
}

/* A copy of `good` with the first `from` in its header replaced by `to` (same length), the
   checksum recomputed when fix is set; the status of loading it. */
static emb_status load_edited(const uint8_t *good, size_t size, const char *from, const char *to, int fix) {
    uint8_t *copy = aligned_alloc(64, (size + 63) / 64 * 64);
    memcpy(copy, good, size);
    char *at = strstr((char *)copy + 8, from);
    CHECK(at != NULL && strlen(from) == strlen(to), "edit %s", from);
    emb_status s = EMB_STATUS_OK;
    if (at) {
        memcpy(at, to, strlen(to));
        if (fix) synth_fix_crc(copy, size);
        s = load(copy, size);
    }
    free(copy);
    return s;
}

static emb_status load_spec(const synth_spec *sp) {
    size_t size;
    uint8_t *b = synth_bundle(sp, &size);
    emb_status s = load(b, size);
    free(b);
    return s;
}

static void test_bundle_errors(void) {
    size_t size;
    uint8_t *good = tiny_bundle(&size, "2", 0);
    CHECK(load(good, size) == EMB_STATUS_OK, "tiny bundle loads");

    uint8_t *v1 = tiny_bundle(&size, "1", 0);
    CHECK(load(v1, size) == EMB_STATUS_BAD_VERSION, "version 1 (the format before the header checksum)");
    free(v1);
    uint8_t *v3 = tiny_bundle(&size, "3", 0);
    CHECK(load(v3, size) == EMB_STATUS_BAD_VERSION, "version 3");
    free(v3);
    uint8_t *crc = tiny_bundle(&size, "2", 1);
    CHECK(load(crc, size) == EMB_STATUS_CORRUPT, "bad crc");
    free(crc);

    CHECK(load(good, 0) == EMB_STATUS_INVALID_ARGUMENT, "empty");
    CHECK(load(good, 5) == EMB_STATUS_TRUNCATED, "5 bytes");
    CHECK(emb_model_init(NULL, good, size) == EMB_STATUS_INVALID_ARGUMENT, "NULL out");
    emb_model *m = (emb_model *)1;
    CHECK(emb_model_init(&m, NULL, size) == EMB_STATUS_INVALID_ARGUMENT && m == NULL, "NULL bytes");
    CHECK(emb_model_init(&m, good + 1, size - 1) == EMB_STATUS_INVALID_ARGUMENT, "misaligned");

    uint8_t *copy = aligned_alloc(64, (size + 63) / 64 * 64);
    memcpy(copy, good, size);
    copy[9] = 'X';
    CHECK(load(copy, size) == EMB_STATUS_BAD_MAGIC, "magic");
    memcpy(copy, good, size);
    memcpy(copy, "\x08\0\0\0\0\0\0\0{}      ", 16);
    CHECK(load(copy, size) == EMB_STATUS_BAD_MAGIC, "plain safetensors");
    memcpy(copy, good, size);
    copy[size - 1] ^= 0x55;
    CHECK(load(copy, size) == EMB_STATUS_CORRUPT, "flipped data byte");

    /* every truncation is refused, never read past */
    int all_refused = 1;
    for (size_t n = 1; n < size; n += (n < 4096 ? 1 : 97)) {
        memcpy(copy, good, n);
        emb_status s = load(copy, n);
        if (s == EMB_STATUS_OK) all_refused = 0;
    }
    CHECK(all_refused, "a truncated bundle loaded");

    /* random byte flips in the header: none loads (the checksum covers the header) and nothing
       crashes (ASan/UBSan watch the reads); with the checksum skipped, the checks behind it */
    size_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | good[i];
    int ok_flips = 0, ok_unchecked = 0;
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(copy, good, size);
        int flips = 1 + (int)(rng() % 4);
        for (int f = 0; f < flips; f++) copy[8 + rng() % hlen] ^= (uint8_t)(1 + rng() % 255);
        if (memcmp(copy, good, size) != 0 && load(copy, size) == EMB_STATUS_OK) ok_flips++;
        emb_model *mm = NULL;
        if (emb_model_init_ex(&mm, copy, size, 0) == EMB_STATUS_OK) ok_unchecked++;
        emb_model_free(mm);
    }
    CHECK(ok_flips == 0, "%d bundles with edited headers loaded", ok_flips);
    CHECK(1, "header flips survived (%d loaded with the checksum skipped)", ok_unchecked);

    /* an edited configuration value: refused by the checksum even where no shape depends on it */
    CHECK(load_edited(good, size, "\"n_heads\":\"1\"", "\"n_heads\":\"2\"", 0) == EMB_STATUS_CORRUPT, "n_heads edited");
    CHECK(load_edited(good, size, "\"pooling\":\"mean\"", "\"pooling\":\"cls\" ", 0) == EMB_STATUS_CORRUPT, "pooling edited");
    /* with the checksum recomputed, every value is still checked against the shapes */
    CHECK(load_edited(good, size, "\"dim\":\"32\"", "\"dim\":\"64\"", 1) == EMB_STATUS_CORRUPT, "dim vs shapes");
    CHECK(load_edited(good, size, "\"ffn_dim\":\"64\"", "\"ffn_dim\":\"96\"", 1) == EMB_STATUS_CORRUPT, "ffn_dim vs shapes");
    CHECK(load_edited(good, size, "\"n_layers\":\"2\"", "\"n_layers\":\"1\"", 1) == EMB_STATUS_CORRUPT,
          "n_layers: the tensors of layer 1 are left over");
    CHECK(load_edited(good, size, "\"n_layers\":\"2\"", "\"n_layers\":\"3\"", 1) == EMB_STATUS_CORRUPT, "n_layers: missing layer");
    CHECK(load_edited(good, size, "\"vocab_size\":\"9\"", "\"vocab_size\":\"8\"", 1) == EMB_STATUS_CORRUPT, "vocab_size");
    CHECK(load_edited(good, size, "\"max_positions\":\"8\"", "\"max_positions\":\"9\"", 1) == EMB_STATUS_CORRUPT, "max_positions");
    CHECK(load_edited(good, size, "\"max_length\":\"8\"", "\"max_length\":\"9\"", 1) == EMB_STATUS_CORRUPT,
          "max_length past the position table");
    CHECK(load_edited(good, size, "\"position_offset\":\"0\"", "\"position_offset\":\"1\"", 1) == EMB_STATUS_CORRUPT,
          "position_offset past the position table");
    CHECK(load_edited(good, size, "\"type_vocab_size\":\"2\"", "\"type_vocab_size\":\"3\"", 1) == EMB_STATUS_CORRUPT, "type_vocab_size");
    CHECK(load_edited(good, size, "\"norm_bias\":\"true\"", "\"norm_bias\":\"xxxx\"", 1) == EMB_STATUS_CORRUPT, "a bad flag");
    CHECK(load_edited(good, size, "\"ffn_bias\":\"true\"", "\"ffn_bias\":\"tru_\"", 1) == EMB_STATUS_CORRUPT, "a bad flag");
    CHECK(load_edited(good, size, "\"final_norm\":\"false\"", "\"final_norm\":\"true\" ", 1) == EMB_STATUS_CORRUPT,
          "final_norm without its tensors");
    CHECK(load_edited(good, size, "\"n_dense\":\"0\"", "\"n_dense\":\"1\"", 1) == EMB_STATUS_CORRUPT, "n_dense");
    CHECK(load_edited(good, size, "\"layer_attention\":\"gg\"", "\"layer_attention\":\"gl\"", 1) == EMB_STATUS_CORRUPT,
          "a local layer without a window");
    CHECK(load_edited(good, size, "\"layer_attention\":\"gg\"", "\"layer_attention\":\"gx\"", 1) == EMB_STATUS_CORRUPT,
          "a layer kind");
    CHECK(load_edited(good, size, "\"relative_buckets\":\"0\"", "\"relative_buckets\":\"4\"", 1) == EMB_STATUS_CORRUPT,
          "relative buckets without their tables");
    CHECK(load_edited(good, size, "\"activation\":\"gelu\"", "\"activation\":\"silu\"", 1) == EMB_STATUS_OK, "silu");
    CHECK(load_edited(good, size, "\"activation\":\"gelu\"", "\"activation\":\"mish\"", 1) == EMB_STATUS_UNSUPPORTED,
          "an activation this build does not know");
    CHECK(load_edited(good, size, "\"activation\":\"gelu\"", "\"activation\":\"tanh\"", 1) == EMB_STATUS_UNSUPPORTED,
          "an activation only the Dense modules and the classifier take");
    CHECK(load_edited(good, size, "\"head\":\"none\"", "\"head\":\"nope\"", 1) == EMB_STATUS_UNSUPPORTED, "a head");
    CHECK(load_edited(good, size, "\"quantization\":\"int8-block32\"", "\"quantization\":\"int4-block32\"", 1) ==
              EMB_STATUS_UNSUPPORTED, "quantization");
    CHECK(load_edited(good, size, "\"position\":\"absolute\"", "\"position\":\"rotary__\"", 1) == EMB_STATUS_UNSUPPORTED,
          "a position kind");
    CHECK(load_edited(good, size, "\"position_pad_id\":\"none\"", "\"position_pad_id\":\"xyzw\"", 1) == EMB_STATUS_CORRUPT,
          "position_pad_id");
    CHECK(load_edited(good, size, "\"layer_norm_eps\":\"1e-12\"", "\"layer_norm_eps\":\"1e+12\"", 1) == EMB_STATUS_CORRUPT,
          "layer_norm_eps out of range");
    CHECK(load_edited(good, size, "\"n_heads\":\"1\"", "\"n_heads\":\"3\"", 1) == EMB_STATUS_CORRUPT, "C not a multiple of H");
    CHECK(load_edited(good, size, "\"dim\":\"32\"", "\"dix\":\"32\"", 1) == EMB_STATUS_CORRUPT, "a missing key");

    /* keys and tensors the configuration does not use */
    synth_spec sp = synth_bert();
    sp.extra_meta = ",\"mystery\":\"1\"";
    CHECK(load_spec(&sp) == EMB_STATUS_CORRUPT, "an unknown metadata key");
    sp = synth_bert();
    sp.extra_meta = ",\"rope_theta_global\":\"10000.0\"";
    CHECK(load_spec(&sp) == EMB_STATUS_CORRUPT, "a key of a feature the model does not have");
    sp = synth_bert();
    sp.extra_meta = ",\"tokenizer.something_new\":\"1\"";
    CHECK(load_spec(&sp) == EMB_STATUS_OK, "tokenizer.* keys belong to the tokenizer");
    sp = synth_bert();
    sp.attention = "int4";
    CHECK(load_spec(&sp) == EMB_STATUS_UNSUPPORTED, "an attention kind this engine does not run");
    sp.attention = "int8";
    CHECK(load_spec(&sp) == EMB_STATUS_OK, "int8 attention");
    sp.attention = "fp32";
    CHECK(load_spec(&sp) == EMB_STATUS_OK, "fp32 attention");
    /* "auto": int8 from attention.int8_min_tokens tokens on, that key required and 1 .. 65536 */
    sp.attention = "auto";
    CHECK(load_spec(&sp) == EMB_STATUS_CORRUPT, "auto attention without its threshold");
    sp.extra_meta = ",\"attention.int8_min_tokens\":\"64\"";
    CHECK(load_spec(&sp) == EMB_STATUS_OK, "auto attention");
    sp.extra_meta = ",\"attention.int8_min_tokens\":\"65536\"";
    CHECK(load_spec(&sp) == EMB_STATUS_OK, "auto attention, the largest threshold");
    static const char *const bad_min[] = {"0", "65537", "-1", "", "6x", "99999999999"};
    for (size_t i = 0; i < sizeof bad_min / sizeof *bad_min; i++) {
        char extra[96];
        snprintf(extra, sizeof extra, ",\"attention.int8_min_tokens\":\"%s\"", bad_min[i]);
        sp.extra_meta = extra;
        CHECK(load_spec(&sp) == EMB_STATUS_CORRUPT, "auto attention, threshold '%s'", bad_min[i]);
    }
    sp.attention = "int8", sp.extra_meta = ",\"attention.int8_min_tokens\":\"64\"";
    CHECK(load_spec(&sp) == EMB_STATUS_CORRUPT, "a threshold without auto attention");
    sp.attention = NULL;
    CHECK(load_spec(&sp) == EMB_STATUS_CORRUPT, "a threshold with fp32 attention");
    sp = synth_bert();
    sp.extra_tensor = "layers.0.attention.qkv.extra";
    CHECK(load_spec(&sp) == EMB_STATUS_CORRUPT, "an unused tensor");
    sp = synth_bert();
    sp.extra_tensor = "final_norm.weight";
    CHECK(load_spec(&sp) == EMB_STATUS_CORRUPT, "a final norm the configuration does not have");

    /* the padding of a linear layer must be exact zeros */
    sp = synth_bert();
    sp.c = 40;
    sp.heads = 2;
    size_t psize;
    uint8_t *padded = synth_bundle(&sp, &psize);
    CHECK(load(padded, psize) == EMB_STATUS_OK, "C = 40 loads");
    const char *entry = strstr((char *)padded + 8, "\"layers.0.attention.out.q\":{\"dtype\":\"I8\",\"shape\":[16,16,4,4],\"data_offsets\":[");
    CHECK(entry != NULL, "entry of layers.0.attention.out.q");
    if (entry) {
        size_t begin = (size_t)strtoul(strstr(entry, "data_offsets\":[") + 15, NULL, 10);
        uint8_t *data = padded + 8 + hlen_of(padded);
        data[begin + (size_t)(11 * 16 * 16)] = 1;  /* a cell of rows 44..47: padding */
        synth_fix_crc(padded, psize);
        CHECK(load(padded, psize) == EMB_STATUS_CORRUPT, "a nonzero padding row");
    }
    free(padded);
    free(copy);
    free(good);
}

static int vectors_equal(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* Mean-pooled, unnormalized rows of n sequences (mean: every token's state counts); *row gets the
   row width, which is not the model's dim when the model pools otherwise (e.g. CLS and mean
   concatenated: mean alone is C wide). */
static emb_status mean_rows(emb_context *ctx, const int32_t *ids, const int32_t *lens, size_t n, float *out,
                            size_t cap, size_t *row) {
    emb_request rq = {ids, lens, NULL, NULL, n, EMB_OUTPUT_EMBEDDING, EMB_POOLING_MEAN, 0, -1, 0, 0};
    emb_output o = {out, cap, 0, 0, NULL};
    emb_status st = emb_context_run(ctx, &rq, &o);
    *row = o.row_size;
    return st;
}

/* The same batch through contexts with every available kernel set and 1-4 threads, split by rows
   (the whole batch) and by columns (a batch of a few tokens): every vector must be identical. */
static void check_threads_and_kernels(emb_model *m, const int32_t *ids, const int32_t *lens, int n_seqs,
                                      const char *what) {
    emb_model_info info;
    emb_model_get_info(m, &info);
    emb_model_config config;
    emb_model_get_config(m, &config);
    size_t total = 0, c = (size_t)(info.dim > config.hidden_dim ? info.dim : config.hidden_dim);
    for (int s = 0; s < n_seqs; s++) total += (size_t)lens[s];
    float *want = malloc(sizeof(float) * c * (size_t)n_seqs), *got = malloc(sizeof(float) * c * (size_t)n_seqs);
    emb_context *base = NULL;
    size_t row = 0, got_row = 0;
    CHECK(emb_context_init_ex(&base, m, total, 1, "reference") == EMB_STATUS_OK, "reference context");
    CHECK(mean_rows(base, ids, lens, (size_t)n_seqs, want, c * (size_t)n_seqs, &row) == EMB_STATUS_OK && row > 0,
          "reference encode");
    char names[256];
    snprintf(names, sizeof names, "%s", emb_kernels_available());
    int same = 1, tried = 0;
    for (char *name = strtok(names, " "); name; name = strtok(NULL, " ")) {
        for (int threads = 1; threads <= 4; threads++) {
            /* a real-size model: fewer contexts (this also runs under qemu), the slow reference once */
            int big = info.dim > 64;
            if (big && (threads == 2 || threads == 4 || (threads > 1 && strcmp(name, "reference") == 0))) continue;
            emb_context *ctx = NULL;
            if (emb_context_init_ex(&ctx, m, total, threads, name) != EMB_STATUS_OK) {
                CHECK(0, "%s: context with %s and %d threads", what, name, threads);
                continue;
            }
            CHECK(emb_context_threads(ctx) == threads && strcmp(emb_context_kernels(ctx), name) == 0, "context says");
            /* the whole batch (rows), then the first sequences alone (few tokens: columns) */
            if (mean_rows(ctx, ids, lens, (size_t)n_seqs, got, c * (size_t)n_seqs, &got_row) != EMB_STATUS_OK ||
                got_row != row || memcmp(want, got, sizeof(float) * row * (size_t)n_seqs) != 0)
                same = 0;
            size_t off = 0;
            for (int s = 0; s < n_seqs && s < 3; s++) {
                if (mean_rows(ctx, ids + off, lens + s, 1, got, c, &got_row) != EMB_STATUS_OK || got_row != row ||
                    memcmp(want + (size_t)s * row, got, sizeof(float) * row) != 0)
                    same = 0;
                off += (size_t)lens[s];
            }
            tried++;
            emb_context_free(ctx);
        }
    }
    CHECK(same && tried >= 3, "%s: vectors differ across kernel sets or thread counts (%d contexts)", what, tried);
    emb_context *ctx = NULL;
    CHECK(emb_context_init_ex(&ctx, m, total, 2, "no-such-kernels") == EMB_STATUS_UNSUPPORTED && !ctx,
          "unknown kernel set refused");
    CHECK(emb_context_init_ex(&ctx, m, total, -1, NULL) == EMB_STATUS_INVALID_ARGUMENT, "negative threads");
    CHECK(emb_context_init_ex(&ctx, m, total, 65, NULL) == EMB_STATUS_INVALID_ARGUMENT, "too many threads");
    emb_context_free(base);
    free(want), free(got);
}

/* Encodes sequences one by one and in random batch compositions; results must be bit-identical. */
static void check_batch_invariance(emb_model *m, int n_seqs, int max_len, int trials, const char *what) {
    emb_model_info info;
    emb_model_get_info(m, &info);
    size_t c = (size_t)info.dim;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_seqs * (size_t)max_len);
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)n_seqs);
    float *alone = malloc(sizeof(float) * c * (size_t)n_seqs);
    float *batch = malloc(sizeof(float) * c * (size_t)n_seqs);
    int32_t *bids = malloc(sizeof(int32_t) * (size_t)n_seqs * (size_t)max_len);
    int32_t *blens = malloc(sizeof(int32_t) * (size_t)n_seqs);
    int *order = malloc(sizeof(int) * (size_t)n_seqs);
    emb_context *ctx = NULL;
    CHECK(emb_context_init(&ctx, m, (size_t)n_seqs * (size_t)max_len) == EMB_STATUS_OK, "context");
    for (int s = 0; s < n_seqs; s++) {
        lens[s] = 2 + (int32_t)(rng() % (uint32_t)(max_len - 1));
        for (int i = 0; i < lens[s]; i++) ids[s * max_len + i] = (int32_t)(rng() % (uint32_t)info.vocab_size);
        CHECK(emb_context_encode(ctx, ids + s * max_len, &lens[s], 1, EMB_POOLING_MODEL, -1, alone + s * c, c) ==
                  EMB_STATUS_OK, "alone");
    }
    int invariant = 1;
    for (int t = 0; t < trials; t++) {
        int nb = 1 + (int)(rng() % (uint32_t)n_seqs);
        for (int s = 0; s < n_seqs; s++) order[s] = s;
        for (int s = n_seqs - 1; s > 0; s--) {
            int j = (int)(rng() % (uint32_t)(s + 1)), tmp = order[s];
            order[s] = order[j];
            order[j] = tmp;
        }
        size_t off = 0;
        for (int b = 0; b < nb; b++) {
            int s = order[b];
            blens[b] = lens[s];
            memcpy(bids + off, ids + s * max_len, sizeof(int32_t) * (size_t)lens[s]);
            off += (size_t)lens[s];
        }
        emb_status st = emb_context_encode(ctx, bids, blens, (size_t)nb, EMB_POOLING_MODEL, -1, batch, c * (size_t)nb);
        CHECK(st == EMB_STATUS_OK, "batch encode %d", st);
        for (int b = 0; b < nb; b++) {
            if (!vectors_equal(batch + (size_t)b * c, alone + (size_t)order[b] * c, c)) invariant = 0;
        }
    }
    CHECK(invariant, "%s: a vector changed with its batch", what);
    {
        size_t off = 0;
        for (int s = 0; s < n_seqs; s++) {
            memcpy(bids + off, ids + s * max_len, sizeof(int32_t) * (size_t)lens[s]);
            off += (size_t)lens[s];
        }
        check_threads_and_kernels(m, bids, lens, n_seqs, what);
    }
    float norm = 0;
    for (size_t j = 0; j < c; j++) norm += alone[j] * alone[j];
    CHECK(!info.normalize || fabsf(norm - 1.0f) < 1e-5f, "%s: normalized (|v|^2 = %g)", what, (double)norm);
    emb_context_free(ctx);
    free(ids), free(lens), free(alone), free(batch), free(bids), free(blens), free(order);
}

static void test_tiny_model(void) {
    size_t size;
    uint8_t *bytes = tiny_bundle(&size, "2", 0);
    emb_model *m = NULL;
    CHECK(emb_model_init(&m, bytes, size) == EMB_STATUS_OK, "tiny init");
    if (!m) return;
    emb_model_info info;
    emb_model_get_info(m, &info);
    CHECK(info.dim == TC && info.n_layers == TL && info.max_length == 8 && info.pooling == EMB_POOLING_MEAN &&
              info.normalize == 1 && info.version == 2,
          "info");
    size_t len = 0;
    const char *name = emb_model_get_meta(m, "name", &len);
    CHECK(name && len == 4 && memcmp(name, "tiny", 4) == 0, "meta name");
    CHECK(emb_model_get_meta(m, "nope", &len) == NULL, "meta absent");

    check_batch_invariance(m, 12, 8, 40, "tiny");
    /* enough tokens (~800) for 2-4 threads to run every layer of a group of sequences per task
       (encoder.c, the group split) */
    check_batch_invariance(m, 160, 8, 3, "tiny, sequence groups");

    emb_context *ctx = NULL;
    CHECK(emb_context_init(&ctx, m, 0) == EMB_STATUS_INVALID_ARGUMENT, "0 tokens");
    CHECK(emb_context_init(&ctx, m, 16) == EMB_STATUS_OK, "ctx");
    CHECK(emb_context_max_tokens(ctx) == 16, "max tokens");
    int32_t ids[20] = {2, 4, 5, 3, 2, 4, 3}, lens[3] = {4, 3, 0};
    float out[3 * TC];
    CHECK(emb_context_encode(ctx, ids, lens, 2, EMB_POOLING_MODEL, -1, out, 2 * TC) == EMB_STATUS_OK, "encode 2");
    CHECK(emb_context_encode(ctx, ids, lens, 2, EMB_POOLING_MODEL, -1, out, 2 * TC - 1) == EMB_STATUS_BUFFER_TOO_SMALL, "small out");
    CHECK(emb_context_encode(ctx, ids, lens, 3, EMB_POOLING_MODEL, -1, out, 3 * TC) == EMB_STATUS_INVALID_ARGUMENT, "length 0");
    lens[0] = 9;
    CHECK(emb_context_encode(ctx, ids, lens, 1, EMB_POOLING_MODEL, -1, out, TC) == EMB_STATUS_TOO_LONG, "too long");
    lens[0] = 4;
    ids[1] = TV;
    CHECK(emb_context_encode(ctx, ids, lens, 1, EMB_POOLING_MODEL, -1, out, TC) == EMB_STATUS_INVALID_ARGUMENT, "id >= V");
    ids[1] = -1;
    CHECK(emb_context_encode(ctx, ids, lens, 1, EMB_POOLING_MODEL, -1, out, TC) == EMB_STATUS_INVALID_ARGUMENT, "id < 0");
    ids[1] = 4;
    int32_t many[3] = {8, 8, 8};
    CHECK(emb_context_encode(ctx, ids, many, 3, EMB_POOLING_MODEL, -1, out, 3 * TC) == EMB_STATUS_INVALID_ARGUMENT, "over max_tokens");
    CHECK(emb_context_encode(ctx, ids, lens, 1, (emb_pooling)7, -1, out, TC) == EMB_STATUS_INVALID_ARGUMENT, "pooling");
    CHECK(emb_context_encode(NULL, ids, lens, 1, EMB_POOLING_MODEL, -1, out, TC) == EMB_STATUS_INVALID_ARGUMENT, "NULL ctx");

    /* CLS pooling, unnormalized: the first token's hidden state; for one token it is the mean */
    CHECK(emb_context_encode(ctx, ids, lens, 1, EMB_POOLING_CLS, 0, out, TC) == EMB_STATUS_OK, "cls");
    float mean_pooled[TC];
    CHECK(emb_context_encode(ctx, ids, lens, 1, EMB_POOLING_MEAN, 0, mean_pooled, TC) == EMB_STATUS_OK, "mean raw");
    CHECK(!vectors_equal(out, mean_pooled, TC), "cls differs from mean");
    int32_t one = 1;
    CHECK(emb_context_encode(ctx, ids, &one, 1, EMB_POOLING_CLS, 0, out, TC) == EMB_STATUS_OK, "cls of 1");
    CHECK(emb_context_encode(ctx, ids, &one, 1, EMB_POOLING_MEAN, 0, mean_pooled, TC) == EMB_STATUS_OK, "mean of 1");
    CHECK(vectors_equal(out, mean_pooled, TC), "one token: CLS equals mean");

    /* the tokenizer, through the model (vocab from the bundle) */
    int32_t tok[16];
    size_t n = 0, full = 0;
    emb_status st = emb_model_tokenize(m, "Hello, worlds!", 14, 1, tok, 16, &n, &full);
    CHECK(st == EMB_STATUS_OK && n == 7 && tok[0] == 2 && tok[1] == 4 && tok[2] == 7 && tok[3] == 5 && tok[4] == 6 &&
              tok[5] == 8 && tok[6] == 3,
          "tokenize: status %d, %zu ids", st, n);
    st = emb_model_tokenize(m, "hello hello hello hello hello hello hello", 41, 0, tok, 16, &n, &full);
    CHECK(st == EMB_STATUS_TOO_LONG && full == 9, "tokenize too long: %d, full %zu", st, full);
    st = emb_model_tokenize(m, "hello hello hello hello hello hello hello", 41, 1, tok, 16, &n, &full);
    CHECK(st == EMB_STATUS_OK && n == 8 && tok[7] == 3, "truncated: %d, %zu", st, n);
    st = emb_model_tokenize(m, "\xff\xfe hello", 8, 1, tok, 16, &n, NULL);
    CHECK(st == EMB_STATUS_OK, "invalid utf-8 accepted: %d", st);
    CHECK(emb_model_tokenize(NULL, "a", 1, 1, tok, 16, &n, NULL) == EMB_STATUS_INVALID_ARGUMENT, "NULL model");

    emb_context_free(ctx);
    emb_model_free(m);
    free(bytes);
}

/* ── every feature, on small random models ─────────────────────────────────────────── */

static emb_status run(emb_context *ctx, const int32_t *ids, const int32_t *lens, size_t n, const int32_t *types,
                      const int32_t *prompts, int output, int pooling, int normalize, int include, float *out,
                      size_t cap) {
    emb_request rq = {ids, lens, types, prompts, n, output, pooling, normalize, include, 0, 0};
    emb_output o = {out, cap, 0, 0, NULL};
    emb_status s = emb_context_run(ctx, &rq, &o);
    if (s == EMB_STATUS_OK || s == EMB_STATUS_BUFFER_TOO_SMALL) {
        size_t rows = 0;
        for (size_t i = 0; output == EMB_OUTPUT_TOKENS && i < n; i++) rows += (size_t)lens[i];
        CHECK(o.n_rows == (output == EMB_OUTPUT_TOKENS ? rows : n), "result rows");
    }
    return s;
}

/* sentence-transformers' pooling of one sequence's hidden states h (n, c), in double */
static void pool_double(const float *h, size_t n, size_t c, size_t skip, int mode, double *o) {
    for (size_t j = 0; j < c; j++) {
        double acc = mode == EMB_POOLING_MAX ? -1e300 : 0, wsum = 0;
        for (size_t i = skip; i < n; i++) {
            double v = h[i * c + j];
            if (mode == EMB_POOLING_MAX) acc = v > acc ? v : acc;
            else if (mode == EMB_POOLING_WEIGHTEDMEAN) acc += v * (double)(i + 1), wsum += (double)(i + 1);
            else acc += v;
        }
        double cnt = (double)(n - skip);
        switch (mode) {
        case EMB_POOLING_CLS: o[j] = h[skip * c + j]; break;
        case EMB_POOLING_LASTTOKEN: o[j] = h[(n - 1) * c + j]; break;
        case EMB_POOLING_MAX: o[j] = acc; break;
        case EMB_POOLING_WEIGHTEDMEAN: o[j] = acc / wsum; break;
        case EMB_POOLING_MEAN_SQRT_LEN_TOKENS: o[j] = acc / sqrt(cnt); break;
        default: o[j] = acc / cnt; break;
        }
    }
}

/* The model's pooling modes (emb_pooling values) from the spec's "a+b" string. */
static int spec_modes(const synth_spec *sp, int *modes) {
    static const char *const names[] = {"mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens", "weightedmean"};
    int n = 0;
    const char *p = sp->pooling;
    while (*p) {
        size_t len = strcspn(p, "+");
        for (int m = 0; m < 6; m++) {
            if (strlen(names[m]) == len && strncmp(p, names[m], len) == 0) modes[n++] = m + 1;
        }
        p += len;
        if (*p == '+') p++;
    }
    return n;
}

static double act_double(const char *act, double x) {
    if (strcmp(act, "tanh") == 0) return tanh(x);
    if (strcmp(act, "relu") == 0) return x > 0 ? x : 0;
    if (strcmp(act, "gelu") == 0) return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    if (strcmp(act, "gelu_tanh") == 0) return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    if (strcmp(act, "silu") == 0) return x / (1.0 + exp(-x));
    return x;
}

typedef struct model_case {
    const char *what;
    synth_spec sp;
} model_case;

static void check_model(const model_case *mc) {
    const synth_spec *sp = &mc->sp;
    size_t size;
    uint8_t *bytes = synth_bundle(sp, &size);
    emb_model *m = NULL;
    emb_status st = emb_model_init(&m, bytes, size);
    CHECK(st == EMB_STATUS_OK, "%s: loads (%s)", mc->what, emb_status_str(st));
    if (!m) {
        free(bytes);
        return;
    }
    emb_model_config cfg;
    emb_model_get_config(m, &cfg);
    size_t c = (size_t)cfg.hidden_dim, dim = (size_t)cfg.dim;
    int modes[6], n_modes = spec_modes(sp, modes);
    CHECK(cfg.version == 2 && (int)c == sp->c && cfg.type_vocab_size == sp->types && cfg.include_prompt == sp->include_prompt &&
              cfg.n_dense == sp->n_dense && cfg.head == EMB_HEAD_NONE && cfg.pooling == modes[0] &&
              (sp->n_dense ? (int)dim == sp->dense_e[sp->n_dense - 1] : dim == c * (size_t)n_modes),
          "%s: config", mc->what);

    enum { NS = 10 };
    int max_len = sp->max_length;
    int32_t lens[NS], prompts[NS], *ids = malloc(sizeof(int32_t) * NS * (size_t)max_len);
    int32_t *types = malloc(sizeof(int32_t) * NS * (size_t)max_len);
    size_t total = 0;
    for (int s = 0; s < NS; s++) {
        lens[s] = s == 0 ? 1 : s == 1 ? max_len : 1 + (int32_t)(rng() % (uint32_t)max_len);
        prompts[s] = (int32_t)(rng() % (uint32_t)lens[s]);
        for (int i = 0; i < lens[s]; i++, total++) {
            ids[total] = (int32_t)(rng() % (uint32_t)sp->vocab);
            types[total] = sp->types ? (int32_t)(rng() % (uint32_t)sp->types) : 0;
        }
    }
    const int32_t *ty = sp->types > 1 ? types : NULL;
    const int32_t *pr = sp->include_prompt ? NULL : prompts;
    emb_context *ctx = NULL;
    CHECK(emb_context_init(&ctx, m, total) == EMB_STATUS_OK, "%s: context", mc->what);
    float *want = malloc(sizeof(float) * dim * NS), *got = malloc(sizeof(float) * dim * NS);
    float *tok = malloc(sizeof(float) * c * total);

    /* each sequence alone, then the batch in random compositions: the same bits */
    size_t off = 0;
    for (int s = 0; s < NS; s++) {
        st = run(ctx, ids + off, lens + s, 1, ty ? ty + off : NULL, pr ? pr + s : NULL, EMB_OUTPUT_EMBEDDING, 0, -1, -1,
                 want + (size_t)s * dim, dim);
        CHECK(st == EMB_STATUS_OK, "%s: alone (%s)", mc->what, emb_status_str(st));
        off += (size_t)lens[s];
    }
    st = run(ctx, ids, lens, NS, ty, pr, EMB_OUTPUT_EMBEDDING, 0, -1, -1, got, dim * NS);
    CHECK(st == EMB_STATUS_OK && vectors_equal(want, got, dim * NS), "%s: the batch gives each sequence's own bits", mc->what);
    for (int trial = 0; trial < 6; trial++) {
        int a0 = (int)(rng() % NS), n = 1 + (int)(rng() % (uint32_t)(NS - a0));
        size_t o0 = 0;
        for (int s = 0; s < a0; s++) o0 += (size_t)lens[s];
        st = run(ctx, ids + o0, lens + a0, (size_t)n, ty ? ty + o0 : NULL, pr ? pr + a0 : NULL, EMB_OUTPUT_EMBEDDING, 0, -1,
                 -1, got, dim * NS);
        CHECK(st == EMB_STATUS_OK && vectors_equal(want + (size_t)a0 * dim, got, dim * (size_t)n),
              "%s: sequences %d..%d", mc->what, a0, a0 + n - 1);
    }
    if (cfg.normalize) {
        double nn = 0;
        for (size_t j = 0; j < dim; j++) nn += (double)want[j] * want[j];
        CHECK(fabs(nn - 1.0) < 1e-5, "%s: normalized (%g)", mc->what, nn);
    }

    /* every kernel set and thread count, split by rows (the batch) and by columns (a few tokens) */
    char names[256];
    snprintf(names, sizeof names, "%s", emb_kernels_available());
    int same = 1, tried = 0;
    for (char *name = strtok(names, " "); name; name = strtok(NULL, " ")) {
        for (int threads = 1; threads <= 3; threads++) {
            emb_context *kc = NULL;
            if (emb_context_init_ex(&kc, m, total, threads, name) != EMB_STATUS_OK) {
                CHECK(0, "%s: context %s x %d", mc->what, name, threads);
                continue;
            }
            run(kc, ids, lens, NS, ty, pr, EMB_OUTPUT_EMBEDDING, 0, -1, -1, got, dim * NS);
            same &= vectors_equal(want, got, dim * NS);
            run(kc, ids + 1, lens + 1, 1, ty ? ty + 1 : NULL, pr ? pr + 1 : NULL, EMB_OUTPUT_EMBEDDING, 0, -1, -1, got, dim);
            same &= vectors_equal(want + dim, got, dim);
            /* each short sequence alone: with 2-3 threads, the column split */
            size_t o = 0;
            for (int s = 0; s < NS; o += (size_t)lens[s], s++) {
                if (lens[s] > 16) continue;
                run(kc, ids + o, lens + s, 1, ty ? ty + o : NULL, pr ? pr + s : NULL, EMB_OUTPUT_EMBEDDING, 0, -1, -1, got,
                    dim);
                same &= vectors_equal(want + (size_t)s * dim, got, dim);
            }
            tried++;
            emb_context_free(kc);
        }
    }
    CHECK(same && tried >= 3, "%s: kernel sets and thread counts differ (%d contexts)", mc->what, tried);

    /* the hidden states, and every pooling mode from them (raw: no Dense in the model) */
    st = run(ctx, ids, lens, NS, ty, NULL, EMB_OUTPUT_TOKENS, 0, 0, 1, tok, c * total);
    CHECK(st == EMB_STATUS_OK, "%s: tokens", mc->what);
    CHECK(run(ctx, ids, lens, NS, ty, NULL, EMB_OUTPUT_TOKENS, 0, 0, 1, tok, c * total - 1) == EMB_STATUS_BUFFER_TOO_SMALL,
          "%s: tokens need T x C floats", mc->what);
    double *pd = malloc(sizeof(double) * (6 * c > dim ? 6 * c : dim) * 2);
    float *pf = malloc(sizeof(float) * c * NS);
    double worst = 0;
    for (int mode = EMB_POOLING_MEAN; mode <= EMB_POOLING_WEIGHTEDMEAN && !sp->n_dense; mode++) {
        for (int exclude = 0; exclude < 2; exclude++) {
            st = run(ctx, ids, lens, NS, ty, prompts, EMB_OUTPUT_EMBEDDING, mode, 0, exclude ? 0 : 1, pf, c * NS);
            CHECK(st == EMB_STATUS_OK, "%s: pooling %d", mc->what, mode);
            size_t t0 = 0;
            for (int s = 0; s < NS; s++) {
                pool_double(tok + t0 * c, (size_t)lens[s], c, exclude ? (size_t)prompts[s] : 0, mode, pd);
                for (size_t j = 0; j < c; j++) worst = fmax(worst, fabs(pd[j] - pf[(size_t)s * c + j]) / (1.0 + fabs(pd[j])));
                t0 += (size_t)lens[s];
            }
        }
    }
    CHECK(worst < 1e-5, "%s: pooling modes differ from a plain computation by %g", mc->what, worst);
    if (n_modes > 1 && !sp->n_dense) {  /* the model's modes, concatenated in its order */
        double worst_cat = 0;
        size_t t0 = 0;
        for (int s = 0; s < NS; s++) {
            for (int i = 0; i < n_modes; i++) {
                pool_double(tok + t0 * c, (size_t)lens[s], c, pr ? (size_t)prompts[s] : 0, modes[i], pd);
                for (size_t j = 0; j < c; j++) {
                    double v = want[(size_t)s * dim + (size_t)i * c + j];
                    worst_cat = fmax(worst_cat, fabs(pd[j] - v) / (1.0 + fabs(pd[j])));
                }
            }
            t0 += (size_t)lens[s];
        }
        CHECK(!cfg.normalize && worst_cat < 1e-5, "%s: concatenated modes differ by %g", mc->what, worst_cat);
    }
    if (n_modes > 1 && sp->n_dense) {  /* one mode alone cannot feed Dense modules made for several */
        CHECK(run(ctx, ids, lens, NS, ty, pr, EMB_OUTPUT_EMBEDDING, EMB_POOLING_MEAN, -1, -1, got, dim * NS) ==
                  EMB_STATUS_INVALID_ARGUMENT,
              "%s: a single mode for Dense modules of several", mc->what);
    }

    /* Dense modules: the pooled mean through them in double, against the engine */
    if (sp->n_dense) {
        emb_bundle b;
        emb_bundle_parse(&b, bytes, size, 1);
        double worst_d = 0;
        for (int s = 0; s < NS; s++) {
            size_t t0 = 0;
            for (int q = 0; q < s; q++) t0 += (size_t)lens[q];
            for (int i = n_modes - 1; i >= 0; i--) {  /* the model's modes, concatenated */
                pool_double(tok + t0 * c, (size_t)lens[s], c, pr ? (size_t)prompts[s] : 0, modes[i], pd);
                if (i) memmove(pd + (size_t)i * c, pd, sizeof(double) * c);
            }
            size_t k = c * (size_t)n_modes;
            for (int i = 0; i < sp->n_dense; i++) {
                char name[32];
                snprintf(name, sizeof name, "dense.%d.weight", i);
                const float *w = (const float *)emb_bundle_tensor(&b, name)->data;
                snprintf(name, sizeof name, "dense.%d.bias", i);
                const emb_tensor *bt = emb_bundle_tensor(&b, name);
                size_t e = (size_t)sp->dense_e[i];
                double *y = pd + (6 * c > dim ? 6 * c : dim);
                for (size_t r = 0; r < e; r++) {
                    double acc = bt ? ((const float *)bt->data)[r] : 0.0;
                    for (size_t j = 0; j < k; j++) acc += (double)w[r * k + j] * pd[j];
                    y[r] = act_double(sp->dense_act[i], acc);
                }
                memcpy(pd, y, sizeof(double) * e);
                k = e;
            }
            double nn = 0;
            for (size_t j = 0; j < dim; j++) nn += pd[j] * pd[j];
            for (size_t j = 0; j < dim; j++) {
                double v = cfg.normalize ? pd[j] / sqrt(nn) : pd[j];
                worst_d = fmax(worst_d, fabs(v - want[(size_t)s * dim + j]));
            }
        }
        emb_bundle_release(&b);
        CHECK(worst_d < 2e-5, "%s: Dense modules differ from a plain computation by %g", mc->what, worst_d);
    }

    /* token types: all 0 is the default; other types change the vectors */
    if (sp->types > 1) {
        int32_t *zeros = calloc(total, sizeof(int32_t));
        run(ctx, ids, lens, NS, zeros, pr, EMB_OUTPUT_EMBEDDING, 0, -1, -1, got, dim * NS);
        float *nul = malloc(sizeof(float) * dim * NS);
        run(ctx, ids, lens, NS, NULL, pr, EMB_OUTPUT_EMBEDDING, 0, -1, -1, nul, dim * NS);
        CHECK(vectors_equal(got, nul, dim * NS) && !vectors_equal(got, want, dim * NS), "%s: token types", mc->what);
        zeros[0] = sp->types;
        CHECK(run(ctx, ids, lens, NS, zeros, pr, EMB_OUTPUT_EMBEDDING, 0, -1, -1, got, dim * NS) == EMB_STATUS_INVALID_ARGUMENT,
              "%s: a type id out of range", mc->what);
        free(zeros), free(nul);
    } else if (sp->types == 0) {
        CHECK(run(ctx, ids, lens, NS, types, pr, EMB_OUTPUT_EMBEDDING, 0, -1, -1, got, dim * NS) == EMB_STATUS_INVALID_ARGUMENT,
              "%s: type ids for a model without token types", mc->what);
    }
    /* the request's checks */
    int32_t bad_prompt[NS];
    memcpy(bad_prompt, prompts, sizeof prompts);
    bad_prompt[3] = lens[3];
    CHECK(run(ctx, ids, lens, NS, ty, bad_prompt, EMB_OUTPUT_EMBEDDING, 0, -1, 0, got, dim * NS) == EMB_STATUS_INVALID_ARGUMENT,
          "%s: a prompt as long as its sequence", mc->what);
    CHECK(run(ctx, ids, lens, NS, ty, pr, 7, 0, -1, -1, got, dim * NS) == EMB_STATUS_INVALID_ARGUMENT, "%s: output kind", mc->what);
    CHECK(run(ctx, ids, lens, NS, ty, pr, EMB_OUTPUT_EMBEDDING, 7, -1, -1, got, dim * NS) == EMB_STATUS_INVALID_ARGUMENT,
          "%s: pooling mode", mc->what);
    CHECK(run(ctx, ids, lens, NS, ty, pr, EMB_OUTPUT_EMBEDDING, 0, -1, -1, got, dim * NS - 1) == EMB_STATUS_BUFFER_TOO_SMALL,
          "%s: a short output", mc->what);
    emb_request rq = {ids, lens, ty, pr, NS, 0, 0, -1, -1, 0, 0};
    emb_output res = {got, dim * NS, 0, 0, NULL};
    CHECK(emb_context_run(ctx, NULL, &res) == EMB_STATUS_INVALID_ARGUMENT, "%s: NULL request", mc->what);
    CHECK(emb_context_run(ctx, &rq, NULL) == EMB_STATUS_INVALID_ARGUMENT, "%s: NULL output", mc->what);
    rq.ids = NULL;
    CHECK(emb_context_run(ctx, &rq, &res) == EMB_STATUS_INVALID_ARGUMENT, "%s: NULL ids", mc->what);
    rq.ids = ids;
    emb_output query = {NULL, 0, 0, 0, NULL};
    CHECK(emb_context_run(ctx, &rq, &query) == EMB_STATUS_BUFFER_TOO_SMALL && query.n_rows == NS && query.row_size == dim,
          "%s: a size query", mc->what);

    free(pd), free(pf), free(tok), free(want), free(got), free(ids), free(types);
    emb_context_free(ctx);
    emb_model_free(m);
    free(bytes);
}

static void test_features(void) {
    model_case cases[24];
    int n = 0;
    synth_spec s = synth_bert();
    cases[n++] = (model_case){"bert", s};
    s.attention = "int8";
    cases[n++] = (model_case){"bert-int8-attention", s};
    s = synth_bert();  /* sizes no vector divides: C = 45 (D = 9), F = 100 */
    s.c = 45, s.heads = 5, s.f = 100, s.max_positions = 24, s.max_length = 20, s.vocab = 30, s.pooling = "max";
    cases[n++] = (model_case){"ragged", s};
    s.attention = "int8";
    cases[n++] = (model_case){"ragged-int8-attention", s};
    s = synth_bert();  /* MPNet: relative buckets, positions from padding_idx + 1, no token types */
    s.c = 48, s.heads = 4, s.f = 96, s.max_positions = 30, s.max_length = 24, s.offset = 2, s.pad_id = 1;
    s.buckets = 32, s.types = 0, s.vocab = 20, s.attention = "fp32";
    cases[n++] = (model_case){"mpnet", s};
    s.attention = "int8", s.max_positions = 80, s.max_length = 70;  /* more queries than one pass */
    cases[n++] = (model_case){"mpnet-int8-attention", s};
    s = synth_bert();  /* RoBERTa / XLM-R: one token type, positions from padding_idx + 1 */
    s.c = 64, s.heads = 2, s.f = 128, s.max_positions = 22, s.max_length = 20, s.offset = 2, s.pad_id = 1, s.types = 1;
    s.pooling = "cls", s.act = "gelu_tanh";
    cases[n++] = (model_case){"roberta", s};
    s = synth_bert();  /* ModernBERT: rotary, GeGLU, pre-norm, no biases, local/global, final norm */
    s.c = 64, s.heads = 4, s.f = 80, s.layers = 4, s.max_length = 40, s.position = "rotary", s.types = 0;
    s.pre_norm = 1, s.norm_bias = 0, s.linear_bias = 0, s.final_norm = 1, s.glu = 1, s.no_first_attn_norm = 1;
    s.pattern = "glll", s.window = 6, s.vocab = 50, s.normalize = 0;
    cases[n++] = (model_case){"modernbert", s};
    s.attention = "int8";
    cases[n++] = (model_case){"modernbert-int8-attention", s};
    s.attention = NULL, s.linear_bias = 1, s.no_ffn_bias = 1, s.norm_bias = 1;  /* attention biases only */
    cases[n++] = (model_case){"modernbert-attention-bias", s};
    s = cases[n - 1].sp;  /* heads and GLU of whole blocks (D = 32, F = 96): the column split's own paths */
    s.c = 64, s.heads = 2, s.f = 96;
    cases[n++] = (model_case){"modernbert-blocks", s};
    s = cases[n - 2].sp;  /* the same with head size 26 and a window wider than the sequences */
    s.c = 52, s.heads = 2, s.f = 33, s.window = 64, s.pooling = "mean_sqrt_len_tokens", s.act = "relu";
    cases[n++] = (model_case){"modernbert-ragged", s};
    s.attention = "int8";
    cases[n++] = (model_case){"modernbert-ragged-int8-attention", s};
    s = synth_bert();  /* Dense modules after the pooling, prompts left out of it */
    s.c = 32, s.max_positions = 16, s.max_length = 16, s.n_dense = 2, s.dense_e[0] = 20, s.dense_e[1] = 12;
    s.dense_act[0] = "tanh", s.dense_act[1] = "identity", s.dense_bias = 1, s.include_prompt = 0, s.pooling = "weightedmean";
    cases[n++] = (model_case){"dense", s};
    s = synth_bert();
    s.include_prompt = 0, s.pooling = "lasttoken", s.normalize = 0, s.act = "relu";
    s.n_dense = 1, s.dense_e[0] = 7, s.dense_act[0] = "identity";
    cases[n++] = (model_case){"lasttoken", s};
    s = synth_bert();  /* several modes concatenated: CLS and mean (sentence-transformers' order) */
    s.pooling = "cls+mean", s.normalize = 0;
    cases[n++] = (model_case){"cls+mean", s};
    s.pooling = "max+mean+lasttoken", s.n_dense = 1, s.dense_e[0] = 10, s.dense_act[0] = "tanh", s.normalize = 1;
    cases[n++] = (model_case){"three-modes-dense", s};
    s = synth_bert();  /* SiLU in the FFN and in both Dense modules, a ragged width */
    s.c = 36, s.heads = 3, s.f = 70, s.act = "silu", s.n_dense = 2, s.dense_e[0] = 28, s.dense_e[1] = 9;
    s.dense_act[0] = "silu", s.dense_act[1] = "silu", s.dense_bias = 1;
    cases[n++] = (model_case){"silu-dense", s};
    for (int i = 0; i < n; i++) check_model(&cases[i]);
}

/* ── heads: sequence classification (rerankers) and the masked-LM head (SPLADE) ─────────── */

/* top-k indices of run_out's calls */
static int32_t run_indices[1 << 18];

static emb_status run_out(emb_context *ctx, const int32_t *ids, const int32_t *lens, size_t n, const int32_t *types,
                          int output, int pooling, int top_k, int per_token, float *values, size_t cap, emb_output *o) {
    emb_request rq = {ids, lens, types, NULL, n, output, pooling, -1, -1, top_k, per_token};
    CHECK(cap <= sizeof run_indices / sizeof run_indices[0], "run_out: indices for %zu", cap);
    *o = (emb_output){values, cap, 0, 0, top_k ? run_indices : NULL};
    return emb_context_run(ctx, &rq, o);
}

/* NS random sequences (the first of one token, the second of max_length), their token types. */
enum { HS = 7 };
static size_t head_inputs(const synth_spec *sp, int32_t *lens, int32_t **ids, int32_t **types) {
    int max_len = sp->max_length;
    *ids = malloc(sizeof(int32_t) * HS * (size_t)max_len);
    *types = malloc(sizeof(int32_t) * HS * (size_t)max_len);
    size_t total = 0;
    for (int s = 0; s < HS; s++) {
        lens[s] = s == 0 ? 1 : s == 1 ? max_len : 2 + (int32_t)(rng() % (uint32_t)(max_len - 1));
        for (int i = 0; i < lens[s]; i++, total++) {
            (*ids)[total] = (int32_t)(rng() % (uint32_t)sp->vocab);
            (*types)[total] = sp->types > 1 && i >= lens[s] / 2 ? 1 : 0;  /* a pair: the second half type 1 */
        }
    }
    return total;
}

static void check_classifier(const char *what, const synth_spec *sp) {
    size_t size;
    uint8_t *bytes = synth_bundle(sp, &size);
    emb_model *m = NULL;
    emb_status st = emb_model_init(&m, bytes, size);
    CHECK(st == EMB_STATUS_OK, "%s: loads (%s)", what, emb_status_str(st));
    if (!m) {
        free(bytes);
        return;
    }
    emb_model_config cfg;
    emb_model_get_config(m, &cfg);
    CHECK(cfg.head == EMB_HEAD_CLASSIFIER && cfg.n_labels == sp->n_labels && cfg.sparse_pooling == 0, "%s: config", what);
    size_t c = (size_t)sp->c, nl = (size_t)sp->n_labels;
    int32_t lens[HS], *ids, *types;
    size_t total = head_inputs(sp, lens, &ids, &types);
    const int32_t *ty = sp->types > 1 ? types : NULL;
    emb_context *ctx = NULL;
    CHECK(emb_context_init(&ctx, m, total) == EMB_STATUS_OK, "%s: context", what);
    float *tok = malloc(sizeof(float) * c * total), *logits = malloc(sizeof(float) * nl * HS);
    float *got = malloc(sizeof(float) * nl * HS);
    emb_output o;
    CHECK(run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_TOKENS, 0, 0, 0, tok, c * total, &o) == EMB_STATUS_OK, "%s: tokens", what);
    st = run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SCORES, 0, 0, 0, logits, nl * HS, &o);
    CHECK(st == EMB_STATUS_OK && o.n_rows == HS && o.row_size == nl, "%s: scores (%s)", what, emb_status_str(st));

    /* the head in double from the hidden states and the bundle's tensors */
    emb_bundle b;
    emb_bundle_parse(&b, bytes, size, 1);
    const emb_tensor *dw = emb_bundle_tensor(&b, "classifier.dense.weight"), *db = emb_bundle_tensor(&b, "classifier.dense.bias");
    const emb_tensor *nw = emb_bundle_tensor(&b, "classifier.norm.weight"), *nbias = emb_bundle_tensor(&b, "classifier.norm.bias");
    const emb_tensor *ow = emb_bundle_tensor(&b, "classifier.out.weight"), *ob = emb_bundle_tensor(&b, "classifier.out.bias");
    double *v = malloc(sizeof(double) * c * 2), worst = 0;
    size_t t0 = 0;
    int mean = strcmp(sp->cls_pooling, "mean") == 0;
    for (int s = 0; s < HS; s++) {
        pool_double(tok + t0 * c, (size_t)lens[s], c, 0, mean ? EMB_POOLING_MEAN : EMB_POOLING_CLS, v);
        if (dw) {
            for (size_t r = 0; r < c; r++) {
                double acc = db ? ((const float *)db->data)[r] : 0.0;
                for (size_t j = 0; j < c; j++) acc += (double)((const float *)dw->data)[r * c + j] * v[j];
                v[c + r] = act_double(sp->cls_act, acc);
            }
            memcpy(v, v + c, sizeof(double) * c);
        }
        if (nw) {
            double mu = 0, var = 0;
            for (size_t j = 0; j < c; j++) mu += v[j];
            mu /= (double)c;
            for (size_t j = 0; j < c; j++) var += (v[j] - mu) * (v[j] - mu);
            var /= (double)c;
            for (size_t j = 0; j < c; j++) {
                v[j] = (v[j] - mu) / sqrt(var + 1e-12) * ((const float *)nw->data)[j] + (nbias ? ((const float *)nbias->data)[j] : 0.0);
            }
        }
        for (size_t r = 0; r < nl; r++) {
            double acc = ob ? ((const float *)ob->data)[r] : 0.0;
            for (size_t j = 0; j < c; j++) acc += (double)((const float *)ow->data)[r * c + j] * v[j];
            worst = fmax(worst, fabs(acc - logits[(size_t)s * nl + r]) / (1.0 + fabs(acc)));
        }
        t0 += (size_t)lens[s];
    }
    emb_bundle_release(&b);
    CHECK(worst < 1e-5, "%s: logits differ from a plain computation by %g", what, worst);

    /* each sequence alone, every kernel set and thread count: the same bits */
    int same = 1;
    t0 = 0;
    for (int s = 0; s < HS; s++) {
        run_out(ctx, ids + t0, lens + s, 1, ty ? ty + t0 : NULL, EMB_OUTPUT_SCORES, 0, 0, 0, got, nl, &o);
        same &= vectors_equal(got, logits + (size_t)s * nl, nl);
        t0 += (size_t)lens[s];
    }
    CHECK(same, "%s: a sequence's logits changed with its batch", what);
    char names[256];
    snprintf(names, sizeof names, "%s", emb_kernels_available());
    same = 1;
    for (char *name = strtok(names, " "); name; name = strtok(NULL, " ")) {
        for (int threads = 1; threads <= 3; threads += 2) {
            emb_context *kc = NULL;
            if (emb_context_init_ex(&kc, m, total, threads, name) != EMB_STATUS_OK) continue;
            run_out(kc, ids, lens, HS, ty, EMB_OUTPUT_SCORES, 0, 0, 0, got, nl * HS, &o);
            same &= vectors_equal(got, logits, nl * HS);
            emb_context_free(kc);
        }
    }
    CHECK(same, "%s: kernel sets and thread counts differ", what);

    /* the request's checks */
    CHECK(run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SCORES, 0, 0, 0, got, nl * HS - 1, &o) == EMB_STATUS_BUFFER_TOO_SMALL &&
              o.n_rows == HS && o.row_size == nl,
          "%s: a short output says what it needs", what);
    int32_t idx[8];
    CHECK(run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 0, 0, got, nl * HS, &o) == EMB_STATUS_INVALID_ARGUMENT &&
              run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 2, 0, got, 8, &o) == EMB_STATUS_INVALID_ARGUMENT,
          "%s: SPARSE needs a masked-LM head", what);
    (void)idx;
    CHECK(run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_EMBEDDING, 0, 0, 0, got, c * HS > nl * HS ? nl * HS : c * HS, &o) ==
              (c > nl ? EMB_STATUS_BUFFER_TOO_SMALL : EMB_STATUS_OK),
          "%s: the embedding output is still there", what);

    /* the header's checks: labels against the out weight's rows, the pooling and activation names */
    char from[32], to[32];
    snprintf(from, sizeof from, "\"n_labels\":\"%d\"", sp->n_labels);
    snprintf(to, sizeof to, "\"n_labels\":\"%d\"", sp->n_labels + 1);
    CHECK(load_edited(bytes, size, from, to, 1) == EMB_STATUS_CORRUPT, "%s: n_labels edited", what);
    CHECK(load_edited(bytes, size, "\"classifier.out.weight\"", "\"classifier.xyz.weight\"", 1) == EMB_STATUS_CORRUPT,
          "%s: no out weight", what);
    snprintf(from, sizeof from, "\"classifier.pooling\":\"%s\"", sp->cls_pooling);
    snprintf(to, sizeof to, "\"classifier.pooling\":\"%s\"", mean ? "xyzw" : "xyz");
    CHECK(load_edited(bytes, size, from, to, 1) == EMB_STATUS_UNSUPPORTED, "%s: unknown classifier pooling", what);
    CHECK(load_edited(bytes, size, "\"head\":\"classifier\"", "\"head\":\"classifiex\"", 1) == EMB_STATUS_UNSUPPORTED,
          "%s: unknown head", what);
    CHECK(load_edited(bytes, size, "\"head\":\"classifier\"", "\"head\":\"none\"      ", 1) == EMB_STATUS_CORRUPT &&
              load_edited(bytes, size, "\"head\":\"classifier\"", "\"head\":\"mlm\"       ", 1) != EMB_STATUS_OK,
          "%s: another head with classifier tensors", what);

    free(v), free(tok), free(logits), free(got), free(ids), free(types);
    emb_context_free(ctx);
    emb_model_free(m);
    free(bytes);
}

/* the k largest of w (n) by weight then lower index, zeros left out: what EMB_OUTPUT_SPARSE top_k gives */
static int top_k_matches(const float *w, size_t n, size_t k, const float *values, const int32_t *indices) {
    unsigned char *taken = calloc(n, 1);
    int ok = 1;
    for (size_t j = 0; j < k && ok; j++) {
        size_t best = n;
        for (size_t i = 0; i < n; i++) {
            if (!taken[i] && w[i] > 0.0f && (best == n || w[i] > w[best])) best = i;
        }
        if (best == n) ok = indices[j] == -1 && values[j] == 0.0f;
        else ok = indices[j] == (int32_t)best && memcmp(&values[j], &w[best], sizeof(float)) == 0, taken[best] = 1;
    }
    free(taken);
    return ok;
}

static void check_mlm(const char *what, const synth_spec *sp) {
    size_t size;
    uint8_t *bytes = synth_bundle(sp, &size);
    emb_model *m = NULL;
    emb_status st = emb_model_init(&m, bytes, size);
    CHECK(st == EMB_STATUS_OK, "%s: loads (%s)", what, emb_status_str(st));
    if (!m) {
        free(bytes);
        return;
    }
    emb_model_config cfg;
    emb_model_get_config(m, &cfg);
    int sum = strcmp(sp->sparse_pooling, "sum") == 0;
    CHECK(cfg.head == EMB_HEAD_MLM && cfg.sparse_pooling == (sum ? EMB_SPARSE_SUM : EMB_SPARSE_MAX) && cfg.n_labels == 0,
          "%s: config", what);
    size_t v = (size_t)sp->vocab;
    int32_t lens[HS], *ids, *types;
    size_t total = head_inputs(sp, lens, &ids, &types);
    const int32_t *ty = sp->types > 1 ? types : NULL;
    emb_context *ctx = NULL;
    CHECK(emb_context_init(&ctx, m, total) == EMB_STATUS_OK, "%s: context", what);
    float *rows = malloc(sizeof(float) * v * total), *pooled = malloc(sizeof(float) * v * HS);
    float *got = malloc(sizeof(float) * v * total);
    int32_t *idx = malloc(sizeof(int32_t) * v * total);
    emb_output o;
    st = run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 0, 1, rows, v * total, &o);
    CHECK(st == EMB_STATUS_OK && o.n_rows == total && o.row_size == v, "%s: per token (%s)", what, emb_status_str(st));
    st = run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 0, 0, pooled, v * HS, &o);
    CHECK(st == EMB_STATUS_OK && o.n_rows == HS && o.row_size == v, "%s: pooled (%s)", what, emb_status_str(st));
    int nonneg = 1, nonzero = 0;
    for (size_t i = 0; i < v * total; i++) nonneg &= rows[i] >= 0.0f, nonzero += rows[i] > 0.0f;
    CHECK(nonneg && nonzero > (int)(v * total / 10) && nonzero < (int)(v * total), "%s: weights >= 0, some zero (%d of %zu)",
          what, nonzero, v * total);

    /* the pooled rows are the token rows folded in token order: max, or sum (both, by request) */
    for (int mode = 0; mode < 2; mode++) {
        int pooling = mode ? EMB_SPARSE_SUM : EMB_SPARSE_MAX;
        float *want = pooling == (sum ? EMB_SPARSE_SUM : EMB_SPARSE_MAX) ? pooled : got;
        if (want == got) run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, pooling, 0, 0, got, v * HS, &o);
        int same = 1;
        size_t t0 = 0;
        float *acc = malloc(sizeof(float) * v);
        for (int s = 0; s < HS; s++) {
            memcpy(acc, rows + t0 * v, sizeof(float) * v);
            for (int i = 1; i < lens[s]; i++) {
                const float *r = rows + (t0 + (size_t)i) * v;
                for (size_t j = 0; j < v; j++) acc[j] = pooling == EMB_SPARSE_SUM ? acc[j] + r[j] : (r[j] > acc[j] ? r[j] : acc[j]);
            }
            same &= vectors_equal(acc, want + (size_t)s * v, v);
            t0 += (size_t)lens[s];
        }
        free(acc);
        CHECK(same, "%s: %s pooling is the fold of the token rows", what, mode ? "sum" : "max");
    }

    /* top-k: the k largest of each row, best first, ties to the lower id, -1 past the nonzero ones */
    size_t ks[3] = {1, 5, v};
    for (int q = 0; q < 3; q++) {
        size_t k = ks[q];
        st = run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, (int)k, 0, got, k * HS, &o);
        CHECK(st == EMB_STATUS_OK && o.n_rows == HS && o.row_size == k, "%s: top %zu (%s)", what, k, emb_status_str(st));
        int ok = 1;
        for (int s = 0; s < HS; s++) ok &= top_k_matches(pooled + (size_t)s * v, v, k, got + (size_t)s * k, o.indices + (size_t)s * k);
        CHECK(ok, "%s: top %zu of the pooled rows", what, k);
        (void)idx;
    }
    {
        emb_request rq = {ids, lens, ty, NULL, HS, EMB_OUTPUT_SPARSE, 0, -1, -1, 3, 1};
        emb_output to = {got, 3 * total, 0, 0, idx};
        st = emb_context_run(ctx, &rq, &to);
        int ok = st == EMB_STATUS_OK && to.n_rows == total && to.row_size == 3;
        for (size_t t = 0; ok && t < total; t++) ok &= top_k_matches(rows + t * v, v, 3, got + t * 3, idx + t * 3);
        CHECK(ok, "%s: top 3 of every token's row", what);
    }

    /* alone and in a batch, every kernel set and thread count: the same bits */
    int same = 1;
    size_t t0 = 0;
    for (int s = 0; s < HS; s++) {
        run_out(ctx, ids + t0, lens + s, 1, ty ? ty + t0 : NULL, EMB_OUTPUT_SPARSE, 0, 0, 0, got, v, &o);
        same &= vectors_equal(got, pooled + (size_t)s * v, v);
        t0 += (size_t)lens[s];
    }
    CHECK(same, "%s: a sequence's weights changed with its batch", what);
    char names[256];
    snprintf(names, sizeof names, "%s", emb_kernels_available());
    same = 1;
    int tried = 0;
    for (char *name = strtok(names, " "); name; name = strtok(NULL, " ")) {
        for (int threads = 1; threads <= 3; threads += 2) {
            emb_context *kc = NULL;
            if (emb_context_init_ex(&kc, m, total, threads, name) != EMB_STATUS_OK) continue;
            run_out(kc, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 0, 0, got, v * HS, &o);
            same &= vectors_equal(got, pooled, v * HS);
            run_out(kc, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 0, 1, got, v * total, &o);
            same &= vectors_equal(got, rows, v * total);
            emb_context_free(kc);
            tried++;
        }
    }
    CHECK(same && tried >= 2, "%s: kernel sets and thread counts differ", what);

    /* the request's checks */
    CHECK(run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 0, 0, got, v * HS - 1, &o) == EMB_STATUS_BUFFER_TOO_SMALL &&
              o.n_rows == HS && o.row_size == v,
          "%s: a short output says what it needs", what);
    CHECK(run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 4, 1, got, 4 * total - 1, &o) == EMB_STATUS_BUFFER_TOO_SMALL &&
              o.n_rows == total && o.row_size == 4,
          "%s: a short top-k output", what);
    CHECK(run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 4, 0, got, 4 * HS, &o) == EMB_STATUS_OK, "%s: top 4", what);
    emb_request rq = {ids, lens, ty, NULL, HS, EMB_OUTPUT_SPARSE, 0, -1, -1, 4, 0};
    emb_output no_idx = {got, 4 * HS, 0, 0, NULL};
    CHECK(emb_context_run(ctx, &rq, &no_idx) == EMB_STATUS_INVALID_ARGUMENT, "%s: top-k without indices", what);
    CHECK(run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, (int)v + 1, 0, got, v * HS, &o) == EMB_STATUS_INVALID_ARGUMENT &&
              run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, -1, 0, got, v * HS, &o) == EMB_STATUS_INVALID_ARGUMENT &&
              run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 0, 0, 2, got, v * total, &o) == EMB_STATUS_INVALID_ARGUMENT &&
              run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SPARSE, 3, 0, 0, got, v * HS, &o) == EMB_STATUS_INVALID_ARGUMENT &&
              run_out(ctx, ids, lens, HS, ty, EMB_OUTPUT_SCORES, 0, 0, 0, got, v * HS, &o) == EMB_STATUS_INVALID_ARGUMENT,
          "%s: top_k out of range, per_token not 0/1, an unknown sparse pooling, SCORES without a classifier", what);

    /* the header's checks */
    CHECK(load_edited(bytes, size, "\"mlm.decoder.q\"", "\"mlm.decodex.q\"", 1) == EMB_STATUS_CORRUPT, "%s: no decoder", what);
    CHECK(load_edited(bytes, size, "\"mlm.norm.weight\"", "\"mlm.norx.weight\"", 1) == EMB_STATUS_CORRUPT, "%s: no norm", what);
    char from[64], to[64];
    snprintf(from, sizeof from, "\"sparse.pooling\":\"%s\"", sp->sparse_pooling);
    snprintf(to, sizeof to, "\"sparse.pooling\":\"%s\"", sum ? "mea" : "mea");
    CHECK(load_edited(bytes, size, from, to, 1) == EMB_STATUS_UNSUPPORTED, "%s: unknown sparse pooling", what);
    snprintf(from, sizeof from, "\"vocab_size\":\"%d\"", sp->vocab);
    snprintf(to, sizeof to, "\"vocab_size\":\"%d\"", sp->vocab - 1);
    CHECK(load_edited(bytes, size, from, to, 1) == EMB_STATUS_CORRUPT, "%s: vocab_size against the decoder", what);

    free(rows), free(pooled), free(got), free(idx), free(ids), free(types);
    emb_context_free(ctx);
    emb_model_free(m);
    free(bytes);
}

static void test_heads(void) {
    synth_spec s = synth_bert();  /* BERT's pooler (dense + tanh on [CLS]) and classifier, pairs */
    s.head = "classifier", s.n_labels = 1, s.cls_pooling = "cls", s.cls_act = "tanh", s.cls_dense = 1, s.cls_out_bias = 1;
    check_classifier("bert-reranker", &s);
    s.n_labels = 3, s.cls_act = "relu";  /* DistilBERT's pre_classifier + ReLU, three labels */
    check_classifier("distilbert-classifier", &s);
    s = synth_bert();  /* ModernBERT: mean pooling, dense + GELU + norm, no biases, ragged sizes */
    s.c = 45, s.heads = 5, s.f = 100, s.max_positions = 24, s.max_length = 20, s.vocab = 30, s.types = 0;
    s.head = "classifier", s.n_labels = 2, s.cls_pooling = "mean", s.cls_act = "gelu", s.cls_dense = 1, s.cls_norm = 1;
    check_classifier("modernbert-classifier", &s);
    s.cls_act = "silu", s.act = "silu";  /* ModernBERT's classifier_activation and hidden_activation silu */
    check_classifier("silu-classifier", &s);
    s = synth_bert();  /* BERT's masked-LM head, SPLADE max; the vocabulary not a multiple of 32, > a slice */
    s.vocab = 1100, s.head = "mlm", s.mlm_act = "gelu", s.sparse_pooling = "max", s.sparse_act = "relu", s.mlm_decoder_bias = 1;
    check_mlm("splade-max", &s);
    s.c = 45, s.heads = 5, s.f = 100, s.vocab = 77, s.sparse_pooling = "sum", s.sparse_act = "log1p_relu";
    s.mlm_act = "gelu_tanh", s.mlm_decoder_bias = 0, s.norm_bias = 0;
    check_mlm("splade-sum-ragged", &s);
}

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = aligned_alloc(64, ((size_t)n + 63) / 64 * 64);
    *size = fread(p, 1, (size_t)n, f);
    fclose(f);
    return p;
}

static void test_real_bundle(const char *path) {
    size_t size = 0;
    uint8_t *bytes = read_file(path, &size);
    CHECK(bytes != NULL, "cannot read %s", path);
    if (!bytes) return;
    emb_model *m = NULL;
    emb_status st = emb_model_init(&m, bytes, size);
    CHECK(st == EMB_STATUS_OK, "real bundle: %s", emb_status_str(st));
    if (m) {
        check_batch_invariance(m, 8, 32, 6, "real");
        emb_model_free(m);
    }
    /* truncations at a spread of points, and the data checksum */
    uint8_t *copy = aligned_alloc(64, (size + 63) / 64 * 64);
    int refused = 1;
    for (int i = 0; i < 40; i++) {
        size_t n = (size_t)(rng() % (uint32_t)size);
        memcpy(copy, bytes, n);
        if (load(copy, n) == EMB_STATUS_OK) refused = 0;
    }
    CHECK(refused, "truncated real bundle loaded");
    memcpy(copy, bytes, size);
    copy[size / 2] ^= 1;
    CHECK(load(copy, size) == EMB_STATUS_CORRUPT, "one flipped weight bit is caught by the CRC");
    free(copy);
    free(bytes);
}

int main(int argc, char **argv) {
    test_status_strings();
    test_math();
    test_quantize();
    test_gemm();
    test_gemm_f32();
    test_rescore_bound();
    test_layernorm_attention();
    test_bundle_errors();
    test_tiny_model();
    test_features();
    test_heads();
    for (int i = 1; i < argc; i++) {
        printf("== %s\n", argv[i]);
        test_real_bundle(argv[i]);
    }
    if (argc < 2) {
        printf("skipped the real-bundle checks: no bundle given (pass .emb paths; runtime/build.sh "
               "test writes one with the Python exporter)\n");
    }
    printf("kernels: %s\n", emb_kernels_available());
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
