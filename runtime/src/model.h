/*
 * model.h — the engine's internal structs: configuration, weights and run state kept apart.
 *
 * Shape letters: T tokens in a packed batch, C hidden size, H heads, D head size (C / H),
 * F FFN size, L layers, V vocabulary, P positions, N/K outputs/inputs of a linear layer,
 * R rows of a panel (the rows one pass of the fused layer loop works on).
 */
#ifndef EMB_MODEL_H
#define EMB_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "bundle.h"
#include "edgembed.h"
#include "tokenizer.h"

#define EMB_BLOCK 32  /* the int8 block along K: one scale per 32 values */

typedef struct emb_linear {
    const int8_t *q;      /* (N/4, K/4, 4, 4) the "n4k4" packing, see edgembed.h */
    const float *scale;   /* (N/4, K/32, 4) */
    const float *bias;    /* (N) */
    int32_t n, k;
} emb_linear;

typedef struct emb_layer {
    emb_linear qkv;           /* N = 3C: query, key, value rows */
    emb_linear out;           /* N = C */
    const float *attn_norm_w, *attn_norm_b;  /* (C) */
    emb_linear up;            /* N = F, K = C */
    emb_linear down;          /* N = C, K = F */
    const float *ffn_norm_w, *ffn_norm_b;    /* (C) */
} emb_layer;

typedef struct emb_config {
    int32_t dim;              /* C */
    int32_t n_layers;         /* L */
    int32_t n_heads;          /* H */
    int32_t head_dim;         /* D */
    int32_t ffn_dim;          /* F */
    int32_t vocab_size;       /* V */
    int32_t max_positions;    /* P */
    int32_t type_vocab_size;
    int32_t max_length;       /* tokens per sequence after truncation */
    int32_t pooling;          /* EMB_POOLING_MEAN or EMB_POOLING_CLS */
    int32_t normalize;
    float eps;                /* LayerNorm epsilon */
} emb_config;

typedef struct emb_weights {
    const int8_t *word_q;     /* (V, C) */
    const float *word_scale;  /* (V, C/32) */
    const float *position;    /* (P, C) */
    const float *token_type;  /* (type_vocab_size, C) */
    const float *norm_w, *norm_b;  /* (C) */
    emb_layer *layers;        /* (L), allocated; the arrays they point to are in the bundle */
} emb_weights;

struct emb_model {
    emb_config config;
    emb_weights weights;
    emb_bundle bundle;
    emb_tokenizer *tokenizer;
};

/* The run state: one arena, carved at init (engine.c), nothing allocated per call. W workers
   share a call (W = 1 without a pool); each has its own block of the per-worker buffers, and the
   W blocks of a buffer lie back to back, so that the column-split mode can use them as one
   (W·R, ·) matrix. */
struct emb_kernels;
struct emb_threads;
struct emb_context {
    const emb_model *model;
    const struct emb_kernels *kernels;  /* the kernel set (kernels.h) */
    struct emb_threads *threads; /* the other W - 1 workers; NULL when W = 1 */
    size_t n_workers;         /* W */
    size_t max_tokens;        /* T max */
    size_t max_seq;           /* longest sequence: min(T max, max_length) */
    size_t panel_rows;        /* R */
    void *arena;
    float *x;                 /* (T, C)  hidden state */
    float *qkv;               /* (T, 3C) query, key, value of every token */
    float *attn;              /* (T, C)  attention output before its projection */
    void *xq;                 /* (T, C)  emb_qx: quantized input of the next linear layer */
    float *xs;                /* (T, C/32) its block scales */
    int32_t *starts;          /* (T + 1) first token of each sequence of the call */
    float *panel;             /* (W, R, max(C, F)) float output of a linear layer for R rows */
    void *hq;                 /* (W, R, F)  emb_qx: quantized FFN hidden */
    float *hs;                /* (W, R, F/32) */
    float *scratch;           /* (W, emb_attention_scratch(max_seq, D)) attention scratch */
    size_t scratch_floats;    /* per worker */
};

#define EMB_PANEL_ROWS 16  /* R in wasm builds */
#define EMB_NATIVE_PANEL_ROWS 32  /* R in native builds */

/* engine.c: emb_model_init with the data checksum optional (verify_crc = 0 lets a fuzzer reach
   the checks that come after it). */
emb_status emb_model_init_ex(emb_model **out, const void *bundle, size_t size, int verify_crc);

/* encoder.c: the hidden states of all tokens into ctx->x. Inputs are already checked. */
void emb_encoder_forward(emb_context *ctx, const int32_t *ids, const int32_t *lengths, size_t n_seqs);

/* pooling.c: one pooled (and optionally L2-normalized) vector per sequence. */
void emb_pool(const float *x, size_t c, const int32_t *lengths, size_t n_seqs, emb_pooling pooling,
              int normalize, float *out);

#endif /* EMB_MODEL_H */
