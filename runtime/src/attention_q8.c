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

/*
 * The whole-row path, for head sizes of whole blocks (D % 32 == 0, so Dp = D4 = D and a head's
 * blocks are blocks of the row): the queries and keys of heads h0 .. h1-1 are quantized one
 * token at a time, all heads in one call on the row's contiguous columns, and the values 32 keys
 * at a time (one block of every output column); each head's codes then go to its own packed
 * arrays by 4-byte cells. The QKV buffer is read once, row after row, instead of once per head
 * with strided rows; the blocks and their arithmetic are the per-head path's, so are the bits.
 */
typedef struct rows_scratch {
    emb_qx *qq;    /* (H, n, D) the queries' codes */
    float *qs;     /* (H, n, D/32) */
    int8_t *kq;    /* (H, n4/4, D/4, 4, 4) the keys packed */
    float *ks;     /* (H, n4/4, D/32, 4) */
    int8_t *vq;    /* (H, D/4, n32/4, 4, 4) the values packed */
    float *vs;     /* (H, D/4, n32/32, 4) */
    float *t;      /* (H·D, 32) one block of keys of the values, transposed */
    emb_qx *tq;    /* (H·D, 32) its codes; also one row's codes (H·D) */
    float *ts;     /* (H·D) its scales; also one row's scales */
    float *s;      /* (QB, n32) scores, then probabilities */
    emb_qx *pq;    /* (QB, n32) */
    float *ps;     /* (QB, n32/32) */
    float *zeros;  /* (max(n4, D)) the GEMMs' bias */
} rows_scratch;

static size_t carve_rows(size_t n, size_t d, size_t heads, uint8_t *base, rows_scratch *out) {
    size_t n4 = pad4(n), n32 = emb_pad32(n), hd = heads * d;
    size_t sizes[13] = {
        hd * n * sizeof(emb_qx), hd * n / EMB_BLOCK * 4, hd * n4, hd * n4 / EMB_BLOCK * 4, hd * n32,
        hd * n32 / EMB_BLOCK * 4, hd * EMB_BLOCK * 4, hd * EMB_BLOCK * sizeof(emb_qx), hd * 4,
        EMB_ATTN_QB * n32 * 4, EMB_ATTN_QB * n32 * sizeof(emb_qx), EMB_ATTN_QB * n32 / EMB_BLOCK * 4,
        max2(n4, d) * 4,
    };
    void *parts[13];
    size_t at = 0;
    for (int i = 0; i < 13; i++) {
        parts[i] = base ? base + at : NULL;
        at += up64(sizes[i]);
    }
    if (out) {
        out->qq = parts[0], out->qs = parts[1], out->kq = parts[2], out->ks = parts[3], out->vq = parts[4];
        out->vs = parts[5], out->t = parts[6], out->tq = parts[7], out->ts = parts[8], out->s = parts[9];
        out->pq = parts[10], out->ps = parts[11], out->zeros = parts[12];
    }
    return at;
}

size_t emb_attention_q8_scratch(size_t n, size_t d, size_t heads) {
    size_t bytes = carve(n, d, NULL, NULL);
    return d % EMB_BLOCK == 0 ? max2(bytes, carve_rows(n, d, heads, NULL, NULL)) : bytes;
}

/* The score GEMM writes columns 0 .. n4-1 of the (QB, n32) scores; the softmax's last vector of
   a row may read on to n32 (it neither stores nor sums those lanes, kernels_f32.inc). Zeros
   there, once per call (the softmax leaves zeros past n), so it only ever reads defined floats. */
static void zero_score_tails(float *s, size_t n) {
    size_t n4 = pad4(n), n32 = emb_pad32(n);
    for (size_t r = 0; r < EMB_ATTN_QB; r++) {
        for (size_t j = n4; j < n32; j++) s[r * n32 + j] = 0.0f;
    }
}

/* 4 codes into one cell row of a packing (int8 weights, whatever emb_qx is) */
static inline void cell4(int8_t *dst, const emb_qx *src) {
    if (sizeof(emb_qx) == 1) {
        __builtin_memcpy(dst, src, 4);
    } else {
        for (int e = 0; e < 4; e++) dst[e] = (int8_t)src[e];
    }
}

static void attention_rows(const emb_kernels *k, const emb_attention_args *a, size_t h0, size_t h1, void *scratch) {
    size_t n = a->n, c = a->c, d = c / a->n_heads, ld = a->ldq, nh = h1 - h0, hd = nh * d;
    size_t n4 = pad4(n), n32 = emb_pad32(n), nbd = d / EMB_BLOCK, kc = d / 4, vc = n32 / 4, nbk = n32 / EMB_BLOCK;
    rows_scratch sc;
    carve_rows(n, d, nh, scratch, &sc);
    for (size_t i = 0; i < max2(n4, d); i++) sc.zeros[i] = 0.0f;
    zero_score_tails(sc.s, n);
    /* queries and keys, one token at a time: codes to each head's rows, keys into their cells */
    for (size_t j = 0; j < n; j++) {
        const float *row = a->qkv + j * ld;
        k->quantize_rows(row + h0 * d, 1, hd, sc.tq, sc.ts);
        for (size_t t = 0; t < nh; t++) {
            emb_qx *dst = sc.qq + (t * n + j) * d;
            for (size_t e = 0; e < d; e++) dst[e] = sc.tq[t * d + e];
            for (size_t b = 0; b < nbd; b++) sc.qs[(t * n + j) * nbd + b] = sc.ts[t * nbd + b];
        }
        k->quantize_rows(row + c + h0 * d, 1, hd, sc.tq, sc.ts);
        size_t g = j / 4, r = j % 4;
        for (size_t t = 0; t < nh; t++) {
            int8_t *kq = sc.kq + t * n4 * d + g * kc * 16 + r * 4;
            for (size_t cc = 0; cc < kc; cc++) cell4(kq + cc * 16, sc.tq + t * d + 4 * cc);
            float *ks = sc.ks + t * n4 * nbd + g * nbd * 4 + r;
            for (size_t b = 0; b < nbd; b++) ks[b * 4] = sc.ts[t * nbd + b];
        }
    }
    for (size_t j = n; j < n4; j++) { /* padding keys: zero codes, zero scales */
        size_t g = j / 4, r = j % 4;
        for (size_t t = 0; t < nh; t++) {
            int8_t *kq = sc.kq + t * n4 * d + g * kc * 16 + r * 4;
            for (size_t cc = 0; cc < kc; cc++) __builtin_memset(kq + cc * 16, 0, 4);
            float *ks = sc.ks + t * n4 * nbd + g * nbd * 4 + r;
            for (size_t b = 0; b < nbd; b++) ks[b * 4] = 0.0f;
        }
    }
    /* values: 32 keys at a time, every output column's block (zeros past n) */
    for (size_t kb = 0; kb < nbk; kb++) {
        size_t j0 = kb * EMB_BLOCK, jn = n - j0 < EMB_BLOCK ? n - j0 : EMB_BLOCK;
        if (jn < EMB_BLOCK) __builtin_memset(sc.t, 0, hd * EMB_BLOCK * sizeof(float)); /* one call, not hd short ones */
        for (size_t j = 0; j < jn; j++) {
            const float *v = a->qkv + (j0 + j) * ld + 2 * c + h0 * d;
            for (size_t e = 0; e < hd; e++) sc.t[e * EMB_BLOCK + j] = v[e];
        }
        k->quantize_rows(sc.t, hd, EMB_BLOCK, sc.tq, sc.ts);
        for (size_t t = 0; t < nh; t++) {
            for (size_t e = 0; e < d; e++) {
                size_t g = e / 4, r = e % 4;
                const emb_qx *src = sc.tq + (t * d + e) * EMB_BLOCK;
                int8_t *vq = sc.vq + t * d * n32 + (g * vc + kb * (EMB_BLOCK / 4)) * 16 + r * 4;
                for (size_t cc = 0; cc < EMB_BLOCK / 4; cc++) cell4(vq + cc * 16, src + 4 * cc);
                sc.vs[t * d * nbk + (g * nbk + kb) * 4 + r] = sc.ts[t * d + e];
            }
        }
    }
    float scale = 1.0f / __builtin_sqrtf((float)d);
    for (size_t t = 0; t < nh; t++) {
        size_t h = h0 + t;
        const float *bias = a->bias ? a->bias + h * a->bias_ld + a->bias_mid : NULL;
        emb_linear keys = {sc.kq + t * n4 * d, sc.ks + t * n4 * nbd, sc.zeros, (int32_t)n4, (int32_t)d, NULL, NULL};
        emb_linear values = {sc.vq + t * d * n32, sc.vs + t * d * nbk, sc.zeros, (int32_t)d, (int32_t)n32, NULL, NULL};
        const emb_qx *qq = sc.qq + t * n * d;
        const float *qs = sc.qs + t * n * nbd;
        for (size_t i0 = 0; i0 < n; i0 += EMB_ATTN_QB) {
            size_t m = n - i0 < EMB_ATTN_QB ? n - i0 : EMB_ATTN_QB;
            k->gemm_q8(qq + i0 * d, qs + i0 * nbd, m, &keys, sc.s, n32);
            k->softmax_rows(sc.s, m, n, n32, i0, scale, bias, a->window);
            k->quantize_rows(sc.s, m, n32, sc.pq, sc.ps);
            /* N = D: the GEMM writes this head's columns of the output rows, nothing else */
            k->gemm_q8(sc.pq, sc.ps, m, &values, a->out + i0 * a->ldo + h * d, a->ldo);
        }
    }
}

void emb_attention_q8(const emb_kernels *k, const emb_attention_args *a, size_t h0, size_t h1, void *scratch) {
    if ((a->c / a->n_heads) % EMB_BLOCK == 0) {
        attention_rows(k, a, h0, h1, scratch);
        return;
    }
    size_t n = a->n, c = a->c, d = c / a->n_heads, ld = a->ldq;
    size_t n4 = pad4(n), n32 = emb_pad32(n), dp = emb_pad32(d), d4 = pad4(d), nbd = dp / EMB_BLOCK;
    q8_scratch sc;
    carve(n, d, scratch, &sc);
    for (size_t i = 0; i < max2(n4, d4); i++) sc.zeros[i] = 0.0f;
    zero_score_tails(sc.s, n);
    float scale = 1.0f / __builtin_sqrtf((float)d);
    emb_linear keys = {sc.kq, sc.ks, sc.zeros, (int32_t)n4, (int32_t)dp, NULL, NULL};
    emb_linear values = {sc.vq, sc.vs, sc.zeros, (int32_t)d4, (int32_t)n32, NULL, NULL};
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
