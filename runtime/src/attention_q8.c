/*
 * attention_q8.c — attention with int8 products, on any kernel set (kernels.h).
 *
 * Per head of one sequence (n tokens, head size D), with the scheme of the linear layers: int8
 * codes and one float scale per row and block of 32 along the summed dimension.
 *
 *   keys    K (n, D)  → the "weights" of the score GEMM: N = n keys, K = D       (n4k4, as a linear)
 *   values  Vᵀ (D, n) → the "weights" of the output GEMM: N = D, K = n keys        (n4k4)
 *   queries Q (n, D)  → int8 rows, blocks along D
 *   for QB queries at a time:
 *     S = Q·Kᵀ                 gemm_q8: exact integer block sums, (s_q·s_k)·Σ per block
 *     P = softmax(S·scale + relative bias), the window's keys only      softmax_rows, fp32
 *     P → int8 rows, blocks of 32 keys (zeros past the sequence)
 *     O = P·V                  gemm_q8
 *
 * The float arithmetic is the kernels' own — the GEMM's epilogue, the quantization rule, the
 * fp32 attention's softmax — so every kernel set gives the same bits here because it gives them
 * for each kernel; the packing and copying between them is plain C. A row's result depends on
 * its own sequence only, never on QB or on how heads are split between workers.
 *
 * Shapes: Dp = pad32(D) (the K of the score GEMM), D4 = pad4(D) (the N of the output GEMM),
 * n4 = pad4(n), n32 = pad32(n). Padding rows and columns hold zeros, so padded keys score 0 and
 * get probability 0 from the softmax, which never looks past n.
 */
#include "kernels.h"

#define EMB_ATTN_QB 32 /* queries per pass: their scores (QB, n32) stay in cache */

static size_t pad4(size_t n) { return (n + 3) & ~(size_t)3; }
static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }
static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

/* The scratch, carved in one place for the size query and for the run. */
typedef struct q8_scratch {
    float *f;      /* (max(n4·Dp, D4·n32)) floats gathered for quantization */
    emb_qx *q;     /* the same count of codes: keys, values, then the queries */
    float *qs;     /* their block scales */
    int8_t *kq;    /* (n4/4, Dp/4, 4, 4) the keys packed */
    float *ks;     /* (n4/4, Dp/32, 4) */
    int8_t *vq;    /* (D4/4, n32/4, 4, 4) the values packed */
    float *vs;     /* (D4/4, n32/32, 4) */
    float *s;      /* (QB, n32) scores, then probabilities */
    emb_qx *pq;    /* (QB, n32) probabilities quantized */
    float *ps;     /* (QB, n32/32) */
    float *o;      /* (QB, D4) output rows */
    float *zeros;  /* (max(n4, D4)) the GEMMs' bias */
} q8_scratch;

static size_t carve(size_t n, size_t d, uint8_t *base, q8_scratch *out) {
    size_t n4 = pad4(n), n32 = emb_pad32(n), dp = emb_pad32(d), d4 = pad4(d);
    size_t cells = max2(n4 * dp, d4 * n32);
    size_t sizes[12] = {
        cells * 4, cells * sizeof(emb_qx), cells / EMB_BLOCK * 4, n4 * dp, n4 * dp / EMB_BLOCK * 4, d4 * n32,
        d4 * n32 / EMB_BLOCK * 4, EMB_ATTN_QB * n32 * 4, EMB_ATTN_QB * n32 * sizeof(emb_qx),
        EMB_ATTN_QB * n32 / EMB_BLOCK * 4, EMB_ATTN_QB * d4 * 4, max2(n4, d4) * 4,
    };
    void *parts[12];
    size_t at = 0;
    for (int i = 0; i < 12; i++) {
        parts[i] = base ? base + at : NULL;
        at += up64(sizes[i]);
    }
    if (out) {
        out->f = parts[0], out->q = parts[1], out->qs = parts[2], out->kq = parts[3], out->ks = parts[4];
        out->vq = parts[5], out->vs = parts[6], out->s = parts[7], out->pq = parts[8], out->ps = parts[9];
        out->o = parts[10], out->zeros = parts[11];
    }
    return at;
}

size_t emb_attention_q8_scratch(size_t n, size_t d) { return carve(n, d, NULL, NULL); }

/* Codes q (rows, kp) and scales (rows, kp/32), rows a multiple of 4, into the n4k4 packing of
   a linear layer (model.h): what gemm_q8 reads as weights. */
static void pack(const emb_qx *q, const float *s, size_t rows, size_t kp, int8_t *wq, float *ws) {
    size_t kc = kp / 4, nb = kp / EMB_BLOCK;
    for (size_t g = 0; g < rows / 4; g++) {
        for (size_t c = 0; c < kc; c++) {
            int8_t *cell = wq + (g * kc + c) * 16;
            for (size_t r = 0; r < 4; r++) {
                const emb_qx *src = q + (4 * g + r) * kp + 4 * c;
                for (size_t e = 0; e < 4; e++) cell[r * 4 + e] = (int8_t)src[e];
            }
        }
        for (size_t b = 0; b < nb; b++) {
            for (size_t r = 0; r < 4; r++) ws[(g * nb + b) * 4 + r] = s[(4 * g + r) * nb + b];
        }
    }
}

/* Rows 0 .. n-1 of columns col .. col+d-1 of x (rows ld apart) into f (rows, dp), zero-padded
   to dp columns and to `rows` rows. */
static void gather_rows(const float *x, size_t ld, size_t col, size_t n, size_t d, size_t rows, size_t dp, float *f) {
    for (size_t i = 0; i < rows; i++) {
        float *dst = f + i * dp;
        size_t e = 0;
        if (i < n) {
            for (; e < d; e++) dst[e] = x[i * ld + col + e];
        }
        for (; e < dp; e++) dst[e] = 0.0f;
    }
}

void emb_attention_q8(const emb_kernels *k, const emb_attention_args *a, size_t h0, size_t h1, void *scratch) {
    size_t n = a->n, c = a->c, d = c / a->n_heads, ld = a->ldq;
    size_t n4 = pad4(n), n32 = emb_pad32(n), dp = emb_pad32(d), d4 = pad4(d), nbd = dp / EMB_BLOCK;
    q8_scratch sc;
    carve(n, d, scratch, &sc);
    for (size_t i = 0; i < max2(n4, d4); i++) sc.zeros[i] = 0.0f;
    float scale = 1.0f / __builtin_sqrtf((float)d);
    emb_linear keys = {sc.kq, sc.ks, sc.zeros, (int32_t)n4, (int32_t)dp, NULL};
    emb_linear values = {sc.vq, sc.vs, sc.zeros, (int32_t)d4, (int32_t)n32, NULL};
    for (size_t h = h0; h < h1; h++) {
        const float *bias = a->bias ? a->bias + h * a->bias_ld + a->bias_mid : NULL;
        /* keys: one row each, blocks along D */
        gather_rows(a->qkv, ld, c + h * d, n, d, n4, dp, sc.f);
        k->quantize_rows(sc.f, n4, dp, sc.q, sc.qs);
        pack(sc.q, sc.qs, n4, dp, sc.kq, sc.ks);
        /* values: one row per output column, blocks along the keys; transposed 8 keys at a
           time (8 rows of qkv read, 8 consecutive floats written to each of the d rows) */
        for (size_t j0 = 0; j0 < n; j0 += 8) {
            size_t jn = n - j0 < 8 ? n - j0 : 8;
            const float *v = a->qkv + j0 * ld + 2 * c + h * d;
            for (size_t e = 0; e < d; e++) {
                float *dst = sc.f + e * n32 + j0;
                for (size_t j = 0; j < jn; j++) dst[j] = v[j * ld + e];
            }
        }
        for (size_t e = 0; e < d4; e++) {
            for (size_t j = e < d ? n : 0; j < n32; j++) sc.f[e * n32 + j] = 0.0f;
        }
        k->quantize_rows(sc.f, d4, n32, sc.q, sc.qs);
        pack(sc.q, sc.qs, d4, n32, sc.vq, sc.vs);
        /* queries: all of them, blocks along D (sc.q and sc.qs now hold them) */
        gather_rows(a->qkv, ld, h * d, n, d, n, dp, sc.f);
        k->quantize_rows(sc.f, n, dp, sc.q, sc.qs);
        for (size_t i0 = 0; i0 < n; i0 += EMB_ATTN_QB) {
            size_t m = n - i0 < EMB_ATTN_QB ? n - i0 : EMB_ATTN_QB;
            k->gemm_q8(sc.q + i0 * dp, sc.qs + i0 * nbd, m, &keys, sc.s, n32);
            k->softmax_rows(sc.s, m, n, n32, i0, scale, bias, a->window);
            k->quantize_rows(sc.s, m, n32, sc.pq, sc.ps);
            k->gemm_q8(sc.pq, sc.ps, m, &values, sc.o, d4);
            for (size_t r = 0; r < m; r++) {
                float *dst = a->out + (i0 + r) * a->ldo + h * d;
                for (size_t e = 0; e < d; e++) dst[e] = sc.o[r * d4 + e];
            }
        }
    }
}
