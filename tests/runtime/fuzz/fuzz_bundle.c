/*
 * fuzz_bundle.c — libFuzzer target: any bytes as a bundle. The checksum is skipped so that
 * mutated files reach the header, shape and tokenizer checks, and a model that loads is run
 * on a few tokens, through its head too (scores, sparse weights and their top 4). Nothing may
 * read out of bounds, trap or leak (ASan/UBSan/LeakSanitizer).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edgembed.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = aligned_alloc(64, size / 64 * 64 + 64);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    emb_model *m = NULL;
    if (emb_model_init_ex(&m, copy, size, 0) == EMB_STATUS_OK) {
        emb_model_info info;
        emb_model_get_info(m, &info);
        /* run the encoder only on small models: a hostile header may declare huge ones */
        if ((int64_t)info.dim * info.ffn_dim <= (1 << 16) && info.n_layers <= 4) {
            emb_context *ctx = NULL;
            if (emb_context_init(&ctx, m, 8) == EMB_STATUS_OK) {
                int32_t ids[8], len = info.max_length < 8 ? info.max_length : 8;
                float *out = malloc(sizeof(float) * (size_t)info.dim);
                for (int i = 0; i < 8; i++) ids[i] = (int32_t)((size_t)i * 7919u % (size_t)info.vocab_size);
                emb_context_encode(ctx, ids, &len, 1, EMB_POOLING_MODEL, -1, out, (size_t)info.dim);
                free(out);
                emb_model_config cfg;
                emb_model_get_config(m, &cfg);
                size_t rows = cfg.head == EMB_HEAD_CLASSIFIER ? (size_t)cfg.n_labels : (size_t)cfg.vocab_size;
                if (cfg.head != EMB_HEAD_NONE && rows <= (1 << 16)) {
                    float *v = malloc(sizeof(float) * rows * 8);
                    int32_t idx[4 * 8];
                    emb_request rq = {ids, &len, NULL, NULL, 1, EMB_OUTPUT_SCORES, 0, -1, -1, 0, 0};
                    emb_output o = {v, rows * 8, 0, 0, idx};
                    if (cfg.head == EMB_HEAD_MLM) {
                        rq.output = EMB_OUTPUT_SPARSE;
                        emb_context_run(ctx, &rq, &o);
                        rq.per_token = 1, rq.top_k = cfg.vocab_size < 4 ? cfg.vocab_size : 4;
                    }
                    emb_context_run(ctx, &rq, &o);
                    free(v);
                }
                emb_context_free(ctx);
            }
        }
        int32_t tok[16];
        size_t n = 0;
        emb_model_tokenize(m, "Hello, fuzz!", 12, 1, tok, 16, &n, NULL);
        emb_model_free(m);
    }
    free(copy);
    return 0;
}
