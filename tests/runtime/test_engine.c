/*
 * test_engine.c — the engine's C tests: kernels against plain math, the bundle reader against
 * hostile inputs, and a tiny model built here in memory (batch invariance, input checks).
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
    emb_linear lin = {packed, packed_s, bias, N, K};
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
            emb_linear l2 = {wq, wsc, b2, nn, kk};
            emb_gemm_q8_ref(xx, xsc, (size_t)mm, &l2, y1, (size_t)nn);
            sets[v]->gemm_q8(xx, xsc, (size_t)mm, &l2, y2, (size_t)nn);
            if (memcmp(y1, y2, sizeof(float) * (size_t)(mm * nn)) != 0) same = 0;
            free(wq), free(xx), free(wsc), free(xsc), free(b2), free(y1), free(y2);
        }
        CHECK(same, "%s GEMM differs from the reference", sets[v]->name);
    }
#endif
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
    emb_layernorm_ref(x, res, NT, C, g, b, 1e-12f);
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

/* ── a tiny bundle, built here ─────────────────────────────────────────────────────── */

typedef struct tbuf {
    uint8_t *p;
    size_t n, cap;
} tbuf;

static void tb_put(tbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 1024;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

typedef struct tiny_tensor {
    const char *name;
    const char *dtype;
    int ndim;
    int shape[4];
} tiny_tensor;

enum { TC = 32, TF = 64, TV = 9, TP = 8, TL = 2 };
static const char TINY_VOCAB[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\n,\n!";

/* Builds a valid tiny bundle (C=32, 1 head, F=64, 2 layers, V=9, P=8, max_length 8); *size set. */
static uint8_t *tiny_bundle(size_t *size, const char *version, int bad_crc) {
    tiny_tensor ts[64];
    int nt = 0;
    ts[nt++] = (tiny_tensor){"embeddings.word.q", "I8", 2, {TV, TC}};
    ts[nt++] = (tiny_tensor){"embeddings.word.scale", "F32", 2, {TV, TC / 32}};
    ts[nt++] = (tiny_tensor){"embeddings.position", "F32", 2, {TP, TC}};
    ts[nt++] = (tiny_tensor){"embeddings.token_type", "F32", 2, {2, TC}};
    ts[nt++] = (tiny_tensor){"embeddings.norm.weight", "F32", 1, {TC}};
    ts[nt++] = (tiny_tensor){"embeddings.norm.bias", "F32", 1, {TC}};
    static char names[TL][16][64];
    for (int l = 0; l < TL; l++) {
        const char *lin[4] = {"attention.qkv", "attention.out", "ffn.up", "ffn.down"};
        int nn[4] = {3 * TC, TC, TF, TC}, kk[4] = {TC, TC, TC, TF};
        int k = 0;
        for (int i = 0; i < 4; i++) {
            snprintf(names[l][k], 64, "layers.%d.%s.q", l, lin[i]);
            ts[nt++] = (tiny_tensor){names[l][k++], "I8", 4, {nn[i] / 4, kk[i] / 4, 4, 4}};
            snprintf(names[l][k], 64, "layers.%d.%s.scale", l, lin[i]);
            ts[nt++] = (tiny_tensor){names[l][k++], "F32", 3, {nn[i] / 4, kk[i] / 32, 4}};
            snprintf(names[l][k], 64, "layers.%d.%s.bias", l, lin[i]);
            ts[nt++] = (tiny_tensor){names[l][k++], "F32", 1, {nn[i]}};
        }
        const char *norms[4] = {"attention.norm.weight", "attention.norm.bias", "ffn.norm.weight", "ffn.norm.bias"};
        for (int i = 0; i < 4; i++) {
            snprintf(names[l][k], 64, "layers.%d.%s", l, norms[i]);
            ts[nt++] = (tiny_tensor){names[l][k++], "F32", 1, {TC}};
        }
    }
    ts[nt++] = (tiny_tensor){"tokenizer.vocab", "U8", 1, {(int)sizeof(TINY_VOCAB) - 1}};

    tbuf data = {0}, hdr = {0};
    char line[512];
    snprintf(line, sizeof line,
             "{\"__metadata__\":{\"edgembed_bundle\":\"%s\",\"name\":\"tiny\",\"arch\":\"bert\",\"dim\":\"%d\","
             "\"n_layers\":\"%d\",\"n_heads\":\"1\",\"ffn_dim\":\"%d\",\"vocab_size\":\"%d\",\"max_positions\":\"%d\","
             "\"type_vocab_size\":\"2\",\"layer_norm_eps\":\"1e-12\",\"hidden_act\":\"gelu\",\"max_length\":\"8\",",
             version, TC, TL, TF, TV, TP);
    tb_put(&hdr, line, strlen(line));
    const char *rest =
        "\"pooling\":\"mean\",\"normalize\":\"true\",\"quantization\":\"int8-block32\",\"weight_layout\":\"n4k4\","
        "\"tokenizer\":\"wordpiece\",\"tokenizer.lowercase\":\"true\",\"tokenizer.strip_accents\":\"true\","
        "\"tokenizer.handle_chinese_chars\":\"true\",\"tokenizer.clean_text\":\"true\",\"tokenizer.unk_id\":\"1\","
        "\"tokenizer.cls_id\":\"2\",\"tokenizer.sep_id\":\"3\",\"tokenizer.pad_id\":\"0\","
        "\"tokenizer.max_input_chars_per_word\":\"100\",\"data_crc32\":\"CRC_HERE\"}";
    tb_put(&hdr, rest, strlen(rest));
    for (int i = 0; i < nt; i++) {
        size_t count = 1, elem = strcmp(ts[i].dtype, "F32") == 0 ? 4 : 1;
        for (int d = 0; d < ts[i].ndim; d++) count *= (size_t)ts[i].shape[d];
        while (data.n % 64) tb_put(&data, "", 1);
        size_t begin = data.n;
        for (size_t j = 0; j < count; j++) {
            if (strcmp(ts[i].name, "tokenizer.vocab") == 0) {
                tb_put(&data, &TINY_VOCAB[j], 1);
            } else if (elem == 4) {
                int is_scale = strstr(ts[i].name, "scale") != NULL;
                int is_norm_w = strstr(ts[i].name, "norm.weight") != NULL;
                float v = is_scale ? frand(0.002f, 0.02f) : is_norm_w ? frand(0.8f, 1.2f) : frand(-0.5f, 0.5f);
                tb_put(&data, &v, 4);
            } else {
                int8_t v = (int8_t)((int)(rng() % 255) - 127);
                tb_put(&data, &v, 1);
            }
        }
        char shape[64] = "";
        for (int d = 0; d < ts[i].ndim; d++) {
            char one[16];
            snprintf(one, sizeof one, d ? ",%d" : "%d", ts[i].shape[d]);
            strcat(shape, one);
        }
        snprintf(line, sizeof line, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
                 ts[i].name, ts[i].dtype, shape, begin, data.n);
        tb_put(&hdr, line, strlen(line));
    }
    tb_put(&hdr, "}", 1);
    while ((8 + hdr.n) % 64) tb_put(&hdr, " ", 1);
    char crc[9];
    snprintf(crc, sizeof crc, "%08x", emb_crc32(data.p, data.n) ^ (bad_crc ? 1u : 0u));
    memcpy(strstr((char *)hdr.p, "CRC_HERE"), crc, 8);

    *size = 8 + hdr.n + data.n;
    uint8_t *out = aligned_alloc(64, (*size + 63) / 64 * 64);
    uint64_t h = hdr.n;
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(h >> (8 * i));
    memcpy(out + 8, hdr.p, hdr.n);
    memcpy(out + 8 + hdr.n, data.p, data.n);
    free(hdr.p);
    free(data.p);
    return out;
}

static void test_status_strings(void) {
    for (int s = 0; s <= 9; s++) CHECK(emb_status_str((emb_status)s) != NULL, "status %d", s);
    CHECK(strstr(emb_status_str(EMB_STATUS_BAD_VERSION), "1 through 1") != NULL, "version range");
    CHECK(strstr(emb_status_str(EMB_STATUS_BAD_VERSION), "embed bundle MODEL") != NULL, "how to regenerate");
    CHECK(emb_status_str((emb_status)99) != NULL, "unknown status");
}

static emb_status load(const uint8_t *bytes, size_t size) {
    emb_model *m = NULL;
    emb_status s = emb_model_init(&m, bytes, size);
    if (s == EMB_STATUS_OK) CHECK(m != NULL, "model set on success");
    else CHECK(m == NULL, "model NULL on failure");
    emb_model_free(m);
    return s;
}

static void test_bundle_errors(void) {
    size_t size;
    uint8_t *good = tiny_bundle(&size, "1", 0);
    CHECK(load(good, size) == EMB_STATUS_OK, "tiny bundle loads");

    uint8_t *v2 = tiny_bundle(&size, "2", 0);
    CHECK(load(v2, size) == EMB_STATUS_BAD_VERSION, "version 2");
    free(v2);
    uint8_t *v0 = tiny_bundle(&size, "0", 0);
    CHECK(load(v0, size) == EMB_STATUS_BAD_VERSION, "version 0");
    free(v0);
    uint8_t *crc = tiny_bundle(&size, "1", 1);
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

    /* random byte flips in the header: any status, no crash (ASan/UBSan watch the reads) */
    size_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | good[i];
    int ok_flips = 0;
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(copy, good, size);
        int flips = 1 + (int)(rng() % 4);
        for (int f = 0; f < flips; f++) copy[8 + rng() % hlen] = (uint8_t)rng();
        if (load(copy, size) == EMB_STATUS_OK) ok_flips++;
    }
    CHECK(1, "header flips survived (%d still loaded)", ok_flips);

    /* a bundle whose shapes disagree with its config: dim 64 with dim-32 tensors */
    memcpy(copy, good, size);
    char *dim = strstr((char *)copy + 8, "\"dim\":\"32\"");
    if (dim) memcpy(dim, "\"dim\":\"64\"", 10);
    CHECK(load(copy, size) == EMB_STATUS_CORRUPT, "shape mismatch");
    memcpy(copy, good, size);
    char *arch = strstr((char *)copy + 8, "\"bert\"");
    memcpy(arch, "\"bart\"", 6);
    CHECK(load(copy, size) == EMB_STATUS_UNSUPPORTED, "unknown arch");
    free(copy);
    free(good);
}

static int vectors_equal(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* The same batch through contexts with every available kernel set and 1-4 threads, split by rows
   (the whole batch) and by columns (a batch of a few tokens): every vector must be identical. */
static void check_threads_and_kernels(emb_model *m, const int32_t *ids, const int32_t *lens, int n_seqs,
                                      const char *what) {
    emb_model_info info;
    emb_model_get_info(m, &info);
    size_t c = (size_t)info.dim, total = 0;
    for (int s = 0; s < n_seqs; s++) total += (size_t)lens[s];
    float *want = malloc(sizeof(float) * c * (size_t)n_seqs), *got = malloc(sizeof(float) * c * (size_t)n_seqs);
    emb_context *base = NULL;
    CHECK(emb_context_init_ex(&base, m, total, 1, "reference") == EMB_STATUS_OK, "reference context");
    CHECK(emb_context_encode(base, ids, lens, (size_t)n_seqs, EMB_POOLING_MEAN, 0, want, c * (size_t)n_seqs) ==
              EMB_STATUS_OK, "reference encode");
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
            emb_context_encode(ctx, ids, lens, (size_t)n_seqs, EMB_POOLING_MEAN, 0, got, c * (size_t)n_seqs);
            if (memcmp(want, got, sizeof(float) * c * (size_t)n_seqs) != 0) same = 0;
            size_t off = 0;
            for (int s = 0; s < n_seqs && s < 3; s++) {
                emb_context_encode(ctx, ids + off, lens + s, 1, EMB_POOLING_MEAN, 0, got, c);
                if (memcmp(want + (size_t)s * c, got, sizeof(float) * c) != 0) same = 0;
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
    CHECK(fabsf(norm - 1.0f) < 1e-5f, "%s: normalized (|v|^2 = %g)", what, (double)norm);
    emb_context_free(ctx);
    free(ids), free(lens), free(alone), free(batch), free(bids), free(blens), free(order);
}

static void test_tiny_model(void) {
    size_t size;
    uint8_t *bytes = tiny_bundle(&size, "1", 0);
    emb_model *m = NULL;
    CHECK(emb_model_init(&m, bytes, size) == EMB_STATUS_OK, "tiny init");
    if (!m) return;
    emb_model_info info;
    emb_model_get_info(m, &info);
    CHECK(info.dim == TC && info.n_layers == TL && info.max_length == 8 && info.pooling == EMB_POOLING_MEAN &&
              info.normalize == 1 && info.version == 1,
          "info");
    size_t len = 0;
    const char *name = emb_model_get_meta(m, "name", &len);
    CHECK(name && len == 4 && memcmp(name, "tiny", 4) == 0, "meta name");
    CHECK(emb_model_get_meta(m, "nope", &len) == NULL, "meta absent");

    check_batch_invariance(m, 12, 8, 40, "tiny");

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
    test_layernorm_attention();
    test_bundle_errors();
    test_tiny_model();
    if (argc > 1) {
        test_real_bundle(argv[1]);
    } else {
        printf("skipped the real-bundle checks: no bundle given (pass a .emb path; runtime/build.sh "
               "test writes one with the Python exporter)\n");
    }
    printf("kernels: %s\n", emb_kernels_available());
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
