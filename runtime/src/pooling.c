/*
 * pooling.c — one vector per sequence from its tokens' hidden states (sentence-transformers'
 * Pooling modes), the Dense modules after it, and L2 normalization.
 *
 * Plain C and per sequence: a vector depends on its own tokens only, and every host computes
 * the same float operations in the same order. Sums over tokens run in token order; dot products
 * over dimensions run in 4 lanes by index mod 4, as the kernels do.
 */
#include "emb_math.h"
#include "model.h"

/* Tokens skip .. n-1 of one sequence x (n, ld) → o (C). skip < n. */
static void pool_one(const float *x, size_t c, size_t ld, size_t n, size_t skip, emb_pooling pooling, float *o) {
    switch (pooling) {
    case EMB_POOLING_CLS:  /* the first pooled token (sentence-transformers: the first unmasked one) */
        for (size_t j = 0; j < c; j++) o[j] = x[skip * ld + j];
        return;
    case EMB_POOLING_LASTTOKEN:
        for (size_t j = 0; j < c; j++) o[j] = x[(n - 1) * ld + j];
        return;
    case EMB_POOLING_MAX:
        for (size_t j = 0; j < c; j++) o[j] = x[skip * ld + j];
        for (size_t i = skip + 1; i < n; i++) {
            for (size_t j = 0; j < c; j++) o[j] = x[i * ld + j] > o[j] ? x[i * ld + j] : o[j];
        }
        return;
    case EMB_POOLING_WEIGHTEDMEAN: {  /* token i weighs i + 1 (its position, counted from 1) */
        float wsum = 0.0f;
        for (size_t j = 0; j < c; j++) o[j] = 0.0f;
        for (size_t i = skip; i < n; i++) {
            float w = (float)(i + 1);
            wsum += w;
            for (size_t j = 0; j < c; j++) o[j] += x[i * ld + j] * w;
        }
        for (size_t j = 0; j < c; j++) o[j] = o[j] / wsum;
        return;
    }
    default: {  /* mean, mean_sqrt_len_tokens */
        for (size_t j = 0; j < c; j++) o[j] = 0.0f;
        for (size_t i = skip; i < n; i++) {
            for (size_t j = 0; j < c; j++) o[j] += x[i * ld + j];
        }
        float count = (float)(n - skip);
        float d = pooling == EMB_POOLING_MEAN_SQRT_LEN_TOKENS ? __builtin_sqrtf(count) : count;
        for (size_t j = 0; j < c; j++) o[j] = o[j] / d;
        return;
    }
    }
}

void emb_pool(const float *x, size_t c, size_t ld, const int32_t *lengths, const int32_t *skip, size_t n_seqs,
              emb_pooling pooling, float *out) {
    size_t t = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        size_t n = (size_t)lengths[s];
        pool_one(x + t * ld, c, ld, n, skip ? (size_t)skip[s] : 0, pooling, out + s * c);
        t += n;
    }
}

/* y (E) = W (E, K) · v (K) + b, then the activation; v and y must not overlap. */
static void dense_one(const emb_dense *d, const float *v, float *y) {
    size_t k = (size_t)d->k;
    for (size_t e = 0; e < (size_t)d->e; e++) {
        const float *w = d->w + e * k;
        float a[4] = {0, 0, 0, 0};
        for (size_t i = 0; i < k; i++) a[i & 3] += w[i] * v[i];
        float s = emb_hsum4(a[0], a[1], a[2], a[3]);
        y[e] = d->b ? s + d->b[e] : s;
    }
    emb_act_ref(d->act, y, (size_t)d->e);
}

size_t emb_dense_apply(const emb_weights *w, int32_t n_dense, float *v, size_t c, float *tmp) {
    for (int32_t i = 0; i < n_dense; i++) {
        dense_one(&w->dense[i], v, tmp);
        c = (size_t)w->dense[i].e;
        for (size_t j = 0; j < c; j++) v[j] = tmp[j];
    }
    return c;
}

void emb_l2_normalize(float *o, size_t c) {
    float a[4] = {0, 0, 0, 0};
    for (size_t j = 0; j < c; j++) a[j & 3] += o[j] * o[j];
    float norm = __builtin_sqrtf(emb_hsum4(a[0], a[1], a[2], a[3]));
    norm = norm > 1e-12f ? norm : 1e-12f;  /* as torch.nn.functional.normalize */
    for (size_t j = 0; j < c; j++) o[j] = o[j] / norm;
}
