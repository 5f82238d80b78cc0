/*
 * kernels.c — the reference kernels: plain C, the definition of every result.
 *
 * The SIMD variants must match these bit for bit, so the float reductions here are written in
 * the lane order a 4-wide vector unit uses (see kernels.h).
 */
#include "kernels.h"

#include "emb_math.h"

void emb_quantize_rows_ref(const float *x, size_t m, size_t k, int8_t *q, float *s) {
    size_t nb = k / EMB_BLOCK;
    for (size_t i = 0; i < m; i++) {
        for (size_t b = 0; b < nb; b++) {
            const float *xb = x + i * k + b * EMB_BLOCK;
            int8_t *qb = q + i * k + b * EMB_BLOCK;
            float amax = 0.0f;
            for (int j = 0; j < EMB_BLOCK; j++) {
                float a = xb[j] < 0 ? -xb[j] : xb[j];
                amax = a > amax ? a : amax;
            }
            float sc = amax / 127.0f;
            s[i * nb + b] = sc;
            for (int j = 0; j < EMB_BLOCK; j++) {
                float v = sc != 0.0f ? emb_rintf(xb[j] / sc) : 0.0f;
                v = v > 127.0f ? 127.0f : v;
                v = v >= -127.0f ? v : -127.0f;  /* also maps NaN to -127: never UB */
                qb[j] = (int8_t)v;
            }
        }
    }
}

void emb_gemm_q8_ref(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy) {
    size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4;
    for (size_t i = 0; i < m; i++) {
        const int8_t *xr = xq + i * k;
        const float *sr = xs + i * nb;
        for (size_t g = 0; g < ng; g++) {
            const int8_t *wg = w->q + g * 4 * k;        /* (K/4, 4, 4) cells of this group */
            const float *sg = w->scale + g * 4 * nb;    /* (K/32, 4) */
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (size_t b = 0; b < nb; b++) {
                int32_t isum[4] = {0, 0, 0, 0};
                for (size_t j = 0; j < EMB_BLOCK / 4; j++) {
                    const int8_t *cell = wg + (b * (EMB_BLOCK / 4) + j) * 16;
                    const int8_t *xv = xr + b * EMB_BLOCK + j * 4;
                    for (int r = 0; r < 4; r++) {
                        for (int c = 0; c < 4; c++) isum[r] += (int32_t)xv[c] * (int32_t)cell[r * 4 + c];
                    }
                }
                for (int r = 0; r < 4; r++) acc[r] += (sr[b] * sg[b * 4 + r]) * (float)isum[r];
            }
            for (int r = 0; r < 4; r++) y[i * ldy + g * 4 + r] = acc[r] + w->bias[g * 4 + r];
        }
    }
}

/* Rows of x two at a time against one group of 4 outputs: each cell of W (4 outputs × 4
   consecutive k, the n4k4 packing) serves both rows, and acc[q][4r + c] is output r's lane c
   (k mod 4) of row q, summed in k order whatever is computed beside it. */
static inline void f32_group(const float *x0, const float *x1, int rows, const float *cell, size_t kc,
                             float acc[2][16]) {
    for (int q = 0; q < 2; q++) {
        for (int e = 0; e < 16; e++) acc[q][e] = 0.0f;
    }
    for (size_t j = 0; j < kc; j++, cell += 16) {
        for (int q = 0; q < rows; q++) {
            const float *xv = (q ? x1 : x0) + 4 * j;
            for (int e = 0; e < 16; e++) acc[q][e] += xv[e & 3] * cell[e];
        }
    }
}

void emb_gemm_f32_ref(const float *x, size_t m, const emb_linear *w, float *y, size_t ldy) {
    size_t k = (size_t)w->k, ng = (size_t)w->n / 4, kc = k / 4;  /* n % 4 == 0, k % 32 == 0 */
    for (size_t i = 0; i < m; i += 2) {
        int rows = i + 1 < m ? 2 : 1;
        for (size_t g = 0; g < ng; g++) {
            float acc[2][16];
            if (rows == 2) f32_group(x + i * k, x + (i + 1) * k, 2, w->w + g * 4 * k, kc, acc);
            else f32_group(x + i * k, NULL, 1, w->w + g * 4 * k, kc, acc);
            for (int q = 0; q < rows; q++) {
                float *yr = y + (i + (size_t)q) * ldy + g * 4;
                for (int r = 0; r < 4; r++) {
                    const float *a = acc[q] + 4 * r;
                    yr[r] = emb_hsum4(a[0], a[1], a[2], a[3]) + w->bias[g * 4 + (size_t)r];
                }
            }
        }
    }
}

float emb_dot_f32_ref(const float *a, const float *b, size_t n) {
    float l[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) l[i & 3] += a[i] * b[i];
    return emb_hsum4(l[0], l[1], l[2], l[3]);
}

void emb_layernorm_ref(float *x, const float *residual, size_t m, size_t c, size_t ld, const float *gamma,
                       const float *beta, float eps) {
    for (size_t i = 0; i < m; i++) {
        float *row = x + i * ld;
        if (residual) {
            for (size_t j = 0; j < c; j++) row[j] = row[j] + residual[i * ld + j];
        }
        float a[4] = {0, 0, 0, 0};
        for (size_t j = 0; j < c; j++) a[j & 3] += row[j];
        float mean = emb_hsum4(a[0], a[1], a[2], a[3]) / (float)c;
        a[0] = a[1] = a[2] = a[3] = 0;
        for (size_t j = 0; j < c; j++) {
            float d = row[j] - mean;
            a[j & 3] += d * d;
        }
        float var = emb_hsum4(a[0], a[1], a[2], a[3]) / (float)c;
        float inv = 1.0f / __builtin_sqrtf(var + eps);
        for (size_t j = 0; j < c; j++) row[j] = ((row[j] - mean) * inv) * gamma[j] + beta[j];
    }
}

void emb_gelu_ref(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = emb_gelu1(x[i]);
}

/*
 * Each query's scores go over its keys j0 .. j1-1 (all n, or the window), in 4 lanes by the
 * key's index (j & 3, whatever j0 is), so that a vector kernel summing aligned groups of keys
 * — with exact zeros for the keys it leaves out — adds the same terms in the same order.
 */
void emb_attention_heads_ref(const emb_attention_args *a, size_t h0, size_t h1, float *scratch) {
    size_t n = a->n, c = a->c, d_head = c / a->n_heads, w = a->window;
    float scale = 1.0f / __builtin_sqrtf((float)d_head);
    float *scores = scratch;
    for (size_t h = h0; h < h1; h++) {
        const float *bias = a->bias ? a->bias + h * a->bias_ld + a->bias_mid : NULL;
        for (size_t i = 0; i < n; i++) {
            size_t j0 = w && i > w ? i - w : 0, j1 = w && i + w + 1 < n ? i + w + 1 : n;
            const float *q = a->qkv + i * a->ldq + h * d_head;
            float mx = -3.0e38f;
            for (size_t j = j0; j < j1; j++) {
                const float *kr = a->qkv + j * a->ldq + c + h * d_head;
                float l[4] = {0, 0, 0, 0};
                for (size_t e = 0; e < d_head; e++) l[e & 3] += q[e] * kr[e];
                float sc = emb_hsum4(l[0], l[1], l[2], l[3]) * scale;
                if (bias) sc = sc + bias[(ptrdiff_t)j - (ptrdiff_t)i];  /* bias points at j − i = 0 */
                scores[j] = sc;
                mx = sc > mx ? sc : mx;
            }
            float l[4] = {0, 0, 0, 0};
            for (size_t j = j0; j < j1; j++) {
                float e = emb_expf(scores[j] - mx);
                scores[j] = e;
                l[j & 3] += e;
            }
            float inv = 1.0f / emb_hsum4(l[0], l[1], l[2], l[3]);
            float *o = a->out + i * a->ldo + h * d_head;
            for (size_t e = 0; e < d_head; e++) o[e] = 0.0f;
            for (size_t j = j0; j < j1; j++) {
                const float *v = a->qkv + j * a->ldq + 2 * c + h * d_head;
                float p = scores[j] * inv;
                for (size_t e = 0; e < d_head; e++) o[e] += p * v[e];
            }
        }
    }
}

void emb_attention_ref(const float *qkv, size_t n, size_t c, size_t n_heads, float *out, float *scores) {
    emb_attention_args a = {qkv, 3 * c, out, c, n, c, n_heads, NULL, 0, 0, 0};
    emb_attention_heads_ref(&a, 0, n_heads, scores);
}

void emb_softmax_rows_ref(float *s, size_t m, size_t n, size_t ld, size_t i0, float scale, const float *bias,
                          size_t window) {
    size_t n32 = emb_pad32(n), w = window;
    for (size_t r = 0; r < m; r++) {
        size_t i = i0 + r, j0 = w && i > w ? i - w : 0, j1 = w && i + w + 1 < n ? i + w + 1 : n;
        float *row = s + r * ld;
        float mx = -3.0e38f;
        for (size_t j = j0; j < j1; j++) {
            float x = row[j] * scale;
            if (bias) x = x + bias[(ptrdiff_t)j - (ptrdiff_t)i];
            row[j] = x;
            mx = x > mx ? x : mx;
        }
        float l[4] = {0, 0, 0, 0};
        for (size_t j = j0; j < j1; j++) {
            float e = emb_expf(row[j] - mx);
            row[j] = e;
            l[j & 3] += e;
        }
        float inv = 1.0f / emb_hsum4(l[0], l[1], l[2], l[3]);
        for (size_t j = 0; j < n32; j++) row[j] = j >= j0 && j < j1 ? row[j] * inv : 0.0f;
    }
}
