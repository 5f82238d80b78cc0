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

void emb_layernorm_ref(float *x, const float *residual, size_t m, size_t c, const float *gamma,
                       const float *beta, float eps) {
    for (size_t i = 0; i < m; i++) {
        float *row = x + i * c;
        if (residual) {
            for (size_t j = 0; j < c; j++) row[j] = row[j] + residual[i * c + j];
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

void emb_attention_heads_ref(const float *qkv, size_t n, size_t c, size_t n_heads, size_t h0, size_t h1,
                             float *out, float *scratch) {
    size_t d_head = c / n_heads, ld = 3 * c;
    float scale = 1.0f / __builtin_sqrtf((float)d_head);
    float *scores = scratch;
    for (size_t h = h0; h < h1; h++) {
        for (size_t i = 0; i < n; i++) {
            const float *q = qkv + i * ld + h * d_head;
            float mx = -3.0e38f;
            for (size_t j = 0; j < n; j++) {
                const float *kr = qkv + j * ld + c + h * d_head;
                float a[4] = {0, 0, 0, 0};
                for (size_t d = 0; d < d_head; d++) a[d & 3] += q[d] * kr[d];
                float sc = emb_hsum4(a[0], a[1], a[2], a[3]) * scale;
                scores[j] = sc;
                mx = sc > mx ? sc : mx;
            }
            float a[4] = {0, 0, 0, 0};
            for (size_t j = 0; j < n; j++) {
                float e = emb_expf(scores[j] - mx);
                scores[j] = e;
                a[j & 3] += e;
            }
            float inv = 1.0f / emb_hsum4(a[0], a[1], a[2], a[3]);
            float *o = out + i * c + h * d_head;
            for (size_t d = 0; d < d_head; d++) o[d] = 0.0f;
            for (size_t j = 0; j < n; j++) {
                const float *v = qkv + j * ld + 2 * c + h * d_head;
                float p = scores[j] * inv;
                for (size_t d = 0; d < d_head; d++) o[d] += p * v[d];
            }
        }
    }
}

void emb_attention_ref(const float *qkv, size_t n, size_t c, size_t n_heads, float *out, float *scores) {
    emb_attention_heads_ref(qkv, n, c, n_heads, 0, n_heads, out, scores);
}
