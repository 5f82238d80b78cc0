/*
 * model.h — the engine's internal structs: configuration, weights and run state kept apart.
 *
 * Shape letters: T tokens in a packed batch, S sequences, C hidden size, H heads, D head size
 * (C / H), F FFN size, L layers, V vocabulary, P positions, B relative buckets, E output size of a
 * Dense module, N/K outputs/inputs of a linear layer, R rows of a panel (the rows one pass of the
 * fused layer loop works on). A trailing p means "rounded up to a multiple of 32" (Cp, Fp, Np,
 * Kp): every activation row the engine keeps is a whole number of int8 blocks, and the padding
 * columns hold exactly zero (docs/quantization.md, "short last block").
 */
#ifndef EMB_MODEL_H
#define EMB_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "bundle.h"
#include "edgembed.h"
#include "tokenizer.h"

#define EMB_BLOCK 32  /* the int8 block along K: one scale per 32 values */

static inline size_t emb_pad32(size_t n) { return (n + 31u) & ~(size_t)31u; }

typedef struct emb_linear {
    const int8_t *q;      /* (Np/4, Kp/4, 4, 4) the "n4k4" packing, see edgembed.h */
    const float *scale;   /* (Np/4, Kp/32, 4) */
    const float *bias;    /* (Np); the model's zeros when the bundle has no linear biases */
    int32_t n, k;         /* Np, Kp: what the kernels compute over */
    const float *w;       /* fp32 weights (Np/4, Kp/4, 4, 4), the n4k4 packing of the zero-padded
                             W: the linear is fp32 (emb_gemm_f32_ref; q, scale NULL); NULL: int8 */
    const int8_t *qt;     /* NULL, or q in the AMX tile layout (engine.c, tile_weights): per 16 outputs,
                             K/4 rows of 64 bytes, row j = cell j of the slice's four groups; made at
                             load where the "amx" kernels run. At output n0 (a multiple of 16) it is
                             qt + n0·Kp, as q + n0·Kp is for q. */
} emb_linear;

/* Activations of the FFN, the Dense modules and the heads. */
typedef enum emb_act {
    EMB_ACT_GELU = 0,       /* exact erf form */
    EMB_ACT_GELU_TANH = 1,  /* the tanh approximation ("gelu_new", "gelu_pytorch_tanh") */
    EMB_ACT_RELU = 2,
    EMB_ACT_TANH = 3,
    EMB_ACT_IDENTITY = 4,
    EMB_ACT_SILU = 5,       /* x · sigmoid(x) ("silu", "swish") */
} emb_act;

typedef struct emb_layer {
    emb_linear qkv;           /* N = 3C: query, key, value rows */
    emb_linear out;           /* N = C */
    const float *attn_norm_w, *attn_norm_b;  /* (C); pre-norm layer without a norm: NULL */
    emb_linear up;            /* N = F, or 2F for GLU (input rows, then gate rows); K = C */
    emb_linear down;          /* N = C, K = F */
    const float *ffn_norm_w, *ffn_norm_b;    /* (C) */
    int32_t local;            /* sliding-window attention (config.local_window) */
    const float *rot_cos, *rot_sin;          /* rotary: (max_length, D/2) of this layer's theta */
} emb_layer;

typedef struct emb_dense {
    const float *w;           /* (E, K) row-major, fp32 */
    const float *b;           /* (E) or NULL */
    int32_t e, k;
    int32_t act;              /* emb_act: EMB_ACT_IDENTITY, EMB_ACT_TANH or EMB_ACT_SILU */
} emb_dense;

#define EMB_MAX_DENSE 8

typedef enum emb_position_kind { EMB_POSITION_ABSOLUTE = 0, EMB_POSITION_ROTARY = 1 } emb_position_kind;

typedef struct emb_config {
    int32_t dim;              /* C */
    int32_t dim_p;            /* Cp */
    int32_t n_layers;         /* L */
    int32_t n_heads;          /* H */
    int32_t head_dim;         /* D */
    int32_t ffn_dim;          /* F */
    int32_t ffn_p;            /* Fp */
    int32_t up_n;             /* Np of the FFN up linear: pad32(F) or pad32(2F) */
    int32_t qkv_n;            /* Np of the qkv linear: pad32(3C), the row stride of qkv */
    int32_t vocab_size;       /* V */
    int32_t max_length;       /* tokens per sequence after truncation */
    int32_t position;         /* emb_position_kind */
    int32_t max_positions;    /* P (absolute) */
    int32_t position_offset;  /* absolute: row of token 0 */
    int32_t position_pad_id;  /* absolute: -1, or the id whose tokens take row pad_id and are not counted */
    int32_t rel_buckets;      /* B, 0 = none */
    int32_t type_vocab_size;  /* 0 = no token types */
    int32_t pre_norm;         /* 0 post-norm (BERT), 1 pre-norm (ModernBERT) */
    int32_t norm_bias;        /* the LayerNorms have biases */
    int32_t attention_bias;   /* qkv and out have biases */
    int32_t ffn_bias;         /* up and down have biases */
    int32_t glu;              /* FFN: 0 act(up), 1 act(up_in) * up_gate */
    int32_t act;              /* emb_act of the FFN */
    int32_t final_norm;
    int32_t local_window;     /* sliding window half width w (|i - j| <= w); 0 when no layer is local */
    int32_t attention_q8;     /* attention products in int8 (attention_q8.c), else fp32 (the kernel set's) */
    int32_t attention_q8_min; /* with attention_q8: int8 for sequences of at least this many tokens, fp32
                                 below (1 for "int8"; "auto": attention.int8_min_tokens) */
    int32_t pooling;          /* emb_pooling: the first of pool_modes */
    int32_t n_pool_modes;     /* modes concatenated, in the model's order (sentence-transformers) */
    int32_t pool_modes[6];
    int32_t pooled_dim;       /* C × n_pool_modes: the width before the Dense modules */
    int32_t include_prompt;
    int32_t normalize;
    int32_t n_dense;
    int32_t out_dim;          /* the embedding length: C, or the last Dense module's E */
    float eps;                /* LayerNorm epsilon */
    int32_t head;             /* emb_head */
    int32_t n_labels;         /* classifier: logits per sequence */
    int32_t cls_pooling;      /* classifier: EMB_POOLING_CLS or EMB_POOLING_MEAN */
    int32_t cls_act;          /* classifier: emb_act after its dense */
    int32_t mlm_act;          /* mlm: emb_act after its transform */
    int32_t sparse_pooling;   /* mlm: EMB_SPARSE_MAX or EMB_SPARSE_SUM */
    int32_t sparse_log1p2;    /* mlm: SPLADE's "log1p_relu", log(1 + log(1 + relu(logit))) */
    int32_t linear_f32;       /* quantization "fp32-rescored": the encoder's and the transform's
                                 linears and the word table fp32, the decoder int8 with exact
                                 rescoring (heads.c) */
} emb_config;

/* What the model ends with beyond the encoder (heads.c). */
typedef struct emb_head_weights {
    const float *dense_w, *dense_b;  /* classifier: (C, C), (C); either may be NULL */
    const float *norm_w, *norm_b;    /* classifier: (C) or NULL; mlm: (C) */
    const float *out_w, *out_b;      /* classifier: (n_labels, C), (n_labels) or NULL */
    emb_linear transform;            /* mlm: N = C, K = C */
    emb_linear decoder;              /* mlm: N = V, K = C */
    const float *exact;              /* mlm, rescored: the decoder's fp32 rows (V, C) */
    float *bound;                    /* mlm, rescored: (2, Kp/32) coefficients of the int8 decoder's
                                        error bound per block (heads.c), allocated */
} emb_head_weights;

typedef struct emb_weights {
    const int8_t *word_q;     /* (V, C); NULL when the table is fp32 */
    const float *word_scale;  /* (V, ceil(C/32)) */
    const float *word_f32;    /* (V, C) fp32 (linear_f32), else NULL */
    const float *position;    /* (P, C) or NULL */
    const float *token_type;  /* (type_vocab_size, C) or NULL */
    const float *norm_w, *norm_b;  /* (C) */
    const float *final_w, *final_b;  /* (C) or NULL */
    emb_layer *layers;        /* (L), allocated; the arrays they point to are in the bundle */
    emb_dense dense[EMB_MAX_DENSE];
    emb_head_weights head;
    float *rel;               /* (H, 2·max_length - 1 + 16): relative bias by head and j - i, allocated */
    size_t rel_ld;            /* its row length */
    float *zeros;             /* (max(Np, C)): the bias of bias-free linears and norms, allocated */
    float *vocab_zeros;       /* (Vp): the bias of a bias-free MLM decoder, allocated */
    int8_t *tiles;            /* every linear's qt, allocated (NULL without AMX) */
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
   (W·R, ·) matrix. Row strides: Cp for width-C buffers, qkv_n for qkv, up_n / Fp for the FFN. */
struct emb_kernels;
struct emb_threads;
struct emb_context {
    const emb_model *model;
    const struct emb_kernels *kernels;  /* the kernel set (kernels.h) */
    void (*gemm_f32)(const float *x, size_t m, const emb_linear *w, float *y, size_t ldy);  /* its fp32 linear */
    struct emb_threads *threads; /* the other W - 1 workers; NULL when W = 1 */
    size_t n_workers;         /* W */
    size_t max_tokens;        /* T max */
    size_t max_seq;           /* longest sequence: min(T max, max_length) */
    size_t panel_rows;        /* R */
    void *arena;
    float *x;                 /* (T, Cp)  hidden state */
    float *qkv;               /* (T, qkv_n) query, key, value of every token */
    float *attn;              /* (T, Cp)  attention output before its projection */
    void *xq;                 /* (T, Cp)  emb_qx: quantized input of the next linear layer (floats
                                 with fp32 linears: its copy) */
    float *xs;                /* (T, Cp/32) its block scales */
    int32_t *starts;          /* (T + 1) first token of each sequence of the call */
    int32_t *pos;             /* (T) position of each token in its sequence */
    float *panel;             /* (W, R, max(Cp, up_n)) float output of a linear layer for R rows */
    float *hidden;            /* (W, R, max(Cp, Fp)) a norm's output (pre-norm), the GLU's output */
    void *hq;                 /* (W, R, Fp)  emb_qx: quantized FFN hidden (floats with fp32 linears) */
    float *hs;                /* (W, R, Fp/32) */
    float *scratch;           /* (W, emb_attention_scratch(max_seq, D)) attention scratch */
    size_t scratch_floats;    /* per worker */
    float *pool;              /* (max(Cp, Dense sizes) * 2) pooling and Dense scratch */
    float *vocab;             /* mlm: (W, R, EMB_VOCAB_SLICE) decoder logits of one slice */
    float *acc;               /* mlm: (R, Vp) one sequence's pooled weights, or R tokens' rows */
    float *err;               /* mlm, rescored: (T) each token's bound on its int8 logits' error */
};

#define EMB_VOCAB_SLICE 512  /* decoder outputs per task: a slice of the vocabulary */

#define EMB_PANEL_ROWS 16  /* R in wasm builds */
#define EMB_NATIVE_PANEL_ROWS 32  /* R in native builds */

/* engine.c: emb_model_init with the data checksum optional (verify_crc = 0 lets a fuzzer reach
   the checks that come after it). */
emb_status emb_model_init_ex(emb_model **out, const void *bundle, size_t size, int verify_crc);
/* engine.c: W's n4k4 codes q (n, k; n a multiple of 16) in the AMX tile layout qt (n·k bytes):
   per 16 outputs, k/4 rows of 64 bytes, row j = cell j of the slice's four groups side by side
   (emb_linear.qt; made at load where the "amx" set runs). */
void emb_tile_layout(const int8_t *q, size_t n, size_t k, int8_t *qt);

/* encoder.c: the hidden states of all tokens into ctx->x (row stride Cp). Inputs are already
   checked; type_ids may be NULL (all 0). */
void emb_encoder_forward(emb_context *ctx, const int32_t *ids, const int32_t *type_ids, const int32_t *lengths,
                         size_t n_seqs);

/* pooling.c: one vector per sequence from the hidden states x (row stride ld), over tokens
   skip[s] .. lengths[s]-1 of each (skip may be NULL), into out (S, C). */
void emb_pool(const float *x, size_t c, size_t ld, const int32_t *lengths, const int32_t *skip, size_t n_seqs,
              emb_pooling pooling, float *out);
/* pooling.c: the model's Dense modules on one pooled vector, in place: v holds C floats and room
   for every module's output; tmp as many floats. Returns the final length. */
size_t emb_dense_apply(const emb_weights *w, int32_t n_dense, float *v, size_t c, float *tmp);
/* pooling.c: v (n) ← v / max(‖v‖₂, 1e-12). */
void emb_l2_normalize(float *v, size_t n);

/* heads.c: the classification head's logits of one pooled vector v (C) into out (n_labels);
   tmp holds 2C floats. */
void emb_classifier_apply(const emb_config *cf, const emb_head_weights *h, const float *v, float *tmp, float *out);
/* heads.c: the masked-LM head and SPLADE weights for the context's last forward pass (ids of
   the call: n_seqs sequences of lengths) into values (rows, V), or the top_k largest of each row
   into values and indices (rows, top_k); rows are the sequences, or the tokens with per_token. */
void emb_sparse_run(emb_context *ctx, const int32_t *lengths, size_t n_seqs, int per_token, int pooling, int top_k,
                    float *values, int32_t *indices);
/* heads.c: the k largest of w (n), by weight then lower index, into (values, indices) (k);
   k − found entries at the end get index −1, weight 0 (weights of 0 are never taken). */
void emb_top_k(const float *w, size_t n, size_t k, float *values, int32_t *indices);

/* heads.c: the coefficients of the int8 decoder's error bound (h->bound, 2 · Kp/32 floats) from
   its block scales and its fp32 rows (h->exact, (V, C)); and one token's bound from its decoder
   input x (Kp floats, zero padding) and block scales xs (Kp/32). */
void emb_rescore_coefficients(const emb_linear *dec, const float *exact, size_t v, size_t c, float *bound);
float emb_rescore_bound(const float *bound, const float *x, const float *xs, size_t kp);

/* activations.c: x (n) ← act(x) for the activations with no kernel of their own (the plain C
   definitions, the same bits in every build); EMB_ACT_GELU goes to the kernel set's gelu. */
void emb_act_ref(int32_t act, float *x, size_t n);

#endif /* EMB_MODEL_H */
