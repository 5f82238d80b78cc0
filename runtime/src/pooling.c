/* pooling.c — one vector per sequence from its tokens' hidden states, then L2 normalization. */
#include "emb_math.h"
#include "model.h"

void emb_pool(const float *x, size_t c, const int32_t *lengths, size_t n_seqs, emb_pooling pooling,
              int normalize, float *out) {
    size_t t = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        size_t n = (size_t)lengths[s];
        float *o = out + s * c;
        if (pooling == EMB_POOLING_CLS) {
            for (size_t j = 0; j < c; j++) o[j] = x[t * c + j];
        } else {
            for (size_t j = 0; j < c; j++) o[j] = 0.0f;
            for (size_t i = 0; i < n; i++) {
                for (size_t j = 0; j < c; j++) o[j] += x[(t + i) * c + j];
            }
            for (size_t j = 0; j < c; j++) o[j] = o[j] / (float)n;
        }
        if (normalize) {
            float a[4] = {0, 0, 0, 0};
            for (size_t j = 0; j < c; j++) a[j & 3] += o[j] * o[j];
            float norm = __builtin_sqrtf(emb_hsum4(a[0], a[1], a[2], a[3]));
            norm = norm > 1e-12f ? norm : 1e-12f;  /* as torch.nn.functional.normalize */
            for (size_t j = 0; j < c; j++) o[j] = o[j] / norm;
        }
        t += n;
    }
}
