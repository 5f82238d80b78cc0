/*
 * activations.c — the activations with no kernel of their own, in plain C.
 *
 * They are element-wise, so whatever the compiler vectorizes, each output is the same sequence
 * of float operations on every host: the same bits in every build (-ffp-contract=off). The exact
 * GELU, the one on every BERT-family hot path, has vector kernels instead (kernels.h).
 */
#include "emb_math.h"
#include "kernels.h"
#include "model.h"

void emb_act_ref(int32_t act, float *x, size_t n) {
    switch (act) {
    case EMB_ACT_GELU:
        for (size_t i = 0; i < n; i++) x[i] = emb_gelu1(x[i]);
        break;
    case EMB_ACT_GELU_TANH:
        for (size_t i = 0; i < n; i++) x[i] = emb_gelu_tanh1(x[i]);
        break;
    case EMB_ACT_RELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case EMB_ACT_TANH:
        for (size_t i = 0; i < n; i++) x[i] = emb_tanhf(x[i]);
        break;
    case EMB_ACT_SILU:
        for (size_t i = 0; i < n; i++) x[i] = emb_silu1(x[i]);
        break;
    default:
        break;
    }
}
