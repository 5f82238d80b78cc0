/*
 * edgembed.h — the one public header of the edgembed engine.
 *
 * The engine turns UTF-8 text into sentence embeddings with a transformer encoder (the BERT,
 * DistilBERT, MPNet, RoBERTa / XLM-RoBERTa and ModernBERT families, described by features rather
 * than by name) whose weights come from one bundle file (.emb). It never prints, exits or aborts:
 * every function that can fail returns an emb_status, and emb_status_str() says what went wrong.
 *
 *   text ─► emb_model_tokenize ─► ids ─► emb_context_run ────────────────► (S × dim) floats
 *            (normalizer, pre_tokenizer,     (encoder: embeddings, layers of attention + FFN;
 *             wordpiece, post_processor)      pooling; Dense modules; L2 norm)
 *
 * Objects:
 *   emb_model    configuration + weights + tokenizer. It REFERENCES the caller's bundle
 *                bytes (no copy of the weights): keep them alive and unchanged until
 *                emb_model_free. Read-only after init, so any number of threads may share it.
 *   emb_context  the run state of one thread: one arena planned at init for a maximum number
 *                of tokens per call. emb_context_run allocates nothing.
 *
 * ─────────────────────────────────────────────────────────────────────────────────────
 * BUNDLE FORMAT, versions EMB_BUNDLE_VERSION_MIN through EMB_BUNDLE_VERSION_MAX (2 through 2)
 * ─────────────────────────────────────────────────────────────────────────────────────
 * A bundle is a valid safetensors file, so `safetensors`, `huggingface_hub` and friends can
 * list its tensors and metadata; edgembed adds a fixed first key (the magic), alignment, a
 * checksum and the packed weight layout. All numbers are little-endian.
 *
 *  1. bytes 0..7    u64 H, the length of the JSON header. 8 + H is a multiple of 64.
 *  2. bytes 8..     the JSON header (UTF-8), right-padded with spaces (0x20) to H bytes.
 *                   It begins with exactly  {"__metadata__":{"edgembed_bundle":"<V>"
 *                   where <V> is the format version in decimal (the magic; a file without
 *                   it is EMB_STATUS_BAD_MAGIC, another V is EMB_STATUS_BAD_VERSION).
 *  3. "__metadata__" maps strings to strings (safetensors allows nothing else). Every key below
 *     is required unless marked "when …"; a key not listed here (other than "tokenizer.*") is
 *     EMB_STATUS_CORRUPT. Integers are decimal, flags "true" or "false".
 *        edgembed_bundle   format version, "2"
 *        crc32             8 lowercase hex digits: the CRC-32 (zlib's) of the WHOLE FILE with
 *                          these 8 digits read as "00000000" — header and weights alike
 *        name              model name (printable ASCII)
 *        family            the checkpoint's model_type, e.g. "bert", "mpnet", "modernbert"
 *                          (informational: everything below is what the engine runs)
 *        dim, n_layers, n_heads, ffn_dim, vocab_size   C, L, H, F, V (D = C / H)
 *        max_length        tokens per sequence after truncation, special tokens included
 *        layer_norm_eps    decimal float, e.g. "1e-12"
 *        position          "absolute" (a learned table) or "rotary"
 *        max_positions     P, rows of embeddings.position          (when position is absolute)
 *        position_offset   the row of a sequence's first token: 0 (BERT), padding_idx + 1
 *                          (RoBERTa, XLM-R, MPNet)                (when position is absolute)
 *        position_pad_id   "none", or the padding id: a token with this id takes row pad_id and
 *                          the rows of later tokens do not count it, as transformers'
 *                          create_position_ids_from_input_ids     (when position is absolute)
 *        rope_theta_global, rope_theta_local   the rotary bases, decimal floats; informational,
 *                          the engine reads the tables rotary.*   (when position is rotary)
 *        relative_buckets  B, 0 = none: MPNet's relative attention bias, one table for all layers
 *        type_vocab_size   token types; 0 = none (no embeddings.token_type)
 *        norm              "post" (x = LN(x + f(x)), BERT) or "pre" (x = x + f(LN(x)), ModernBERT)
 *        norm_bias         the LayerNorms have biases
 *        attention_bias    the attention's linear layers (qkv, out) have biases
 *        ffn_bias          the FFN's linear layers (up, down) have biases
 *        final_norm        a LayerNorm after the last layer (pre-norm models)
 *        ffn               "mlp" (down(act(up x))) or "glu" (down(act(up_in x) · up_gate x))
 *        activation        "gelu" (the exact erf form), "gelu_tanh", "relu" or "silu" (x · sigmoid x)
 *        layer_attention   L characters, 'g' a layer attending to every token of its sequence,
 *                          'l' one attending to tokens at most local_window positions away
 *        local_window      w: keys j with |i − j| <= w (ModernBERT: local_attention / 2); 0 when
 *                          no layer is 'l'
 *        pooling           "cls", "mean", "max", "lasttoken", "mean_sqrt_len_tokens" or
 *                          "weightedmean", as sentence-transformers' Pooling module; several
 *                          joined by '+' ("cls+mean") are concatenated in that order
 *        include_prompt    false: leading prompt tokens (a per-sequence count the caller passes
 *                          in emb_request.prompt_lengths) are left out of the pooling
 *        n_dense           sentence-transformers Dense modules after pooling, 0 .. 8
 *        dense.<i>.activation   "identity", "tanh" or "silu"      (when i < n_dense)
 *        normalize         the model ends with a Normalize module (L2)
 *        head              "none" (the pooled embedding), "classifier" (a sequence
 *                          classification head: rerankers) or "mlm" (a masked-LM head: SPLADE)
 *        n_labels          logits per sequence                          (head "classifier")
 *        classifier.pooling     "cls" (the first token) or "mean" (every token) (head "classifier")
 *        classifier.activation  after classifier.dense: "tanh" (BERT's pooler, RoBERTa), "relu"
 *                          (DistilBERT), "gelu" or "gelu_tanh" (ModernBERT's
 *                          classifier_activation), "silu" or "identity"
 *        classifier.score_activation  what a cross-encoder applies to the logits ("identity",
 *                          "sigmoid", "tanh", …): informational, the engine returns logits
 *        mlm.activation    after mlm.transform: "gelu", "gelu_tanh", "relu" or "silu"  (head "mlm")
 *        sparse.pooling    SPLADE over a sequence's tokens: "max" or "sum"      (head "mlm")
 *        sparse.activation "relu": log(1 + relu(logit)); "log1p_relu": log(1 + that)
 *        sparse.max_active_dims  optional (head "mlm"), 1 .. vocab_size: the model keeps only
 *                          that many largest weights (sentence-transformers' max_active_dims);
 *                          informational: hosts apply it (e.g. as emb_request.top_k)
 *        quantization      "int8-block32"  (scheme below; docs/quantization.md), or
 *                          "fp32-rescored" (head "mlm" only): every linear but mlm.decoder is
 *                          fp32 (NAME.weight below) and so is the word table (embeddings.word);
 *                          mlm.decoder stays int8 and its logits are rescored exactly: those its
 *                          error bound leaves possibly positive are recomputed in fp32 from the
 *                          fp32 rows (runtime/src/heads.c; docs/quantization.md, "Rerankers and
 *                          SPLADE models"). An engine before it refuses it: EMB_STATUS_UNSUPPORTED
 *        weight_layout     "n4k4"          (packing below)
 *        attention         "fp32" (the default; absent means it too), "int8": QKᵀ and P·V as
 *                          int8 products with a scale per row and block of 32, or "auto": int8
 *                          for each sequence of at least attention.int8_min_tokens tokens (its
 *                          own length, never its batch's), fp32 for shorter ones
 *                          (docs/quantization.md, "Attention"). An engine before "auto" refuses
 *                          it: EMB_STATUS_UNSUPPORTED
 *        attention.int8_min_tokens  decimal 1 .. 65536, with "auto" only (required there)
 *        tokenizer         "wordpiece", "unigram" or "bpe" (their tables: below)
 *        tokenizer.lowercase, tokenizer.strip_accents, tokenizer.handle_chinese_chars,
 *        tokenizer.clean_text            "true" or "false"             (wordpiece)
 *        tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
 *        tokenizer.max_input_chars_per_word   decimal integers          (wordpiece)
 *  4. every other key names a tensor: {"dtype":"F32"|"I32"|"I8"|"U8"|"F64","shape":[...],
 *     "data_offsets":[begin,end]}, offsets relative to the data region. The writer places
 *     every tensor at a 64-byte-aligned offset; F32 and I32 tensors must be at least 4-aligned,
 *     F64 ones 8-aligned.
 *     Every tensor must be one the configuration uses (or "__pad.*" padding, or "tokenizer.*").
 *  5. the data region: bytes 8 + H .. end of file, tensors back to back in header order.
 *
 * Tensors (l = 0 .. L-1; "linear" = NAME.q, NAME.scale and, when its layer has biases
 * (attention_bias, ffn_bias), NAME.bias; every shape is checked against the configuration):
 *    embeddings.word.q         I8  (V, C)          row-major
 *    embeddings.word.scale     F32 (V, ⌈C/32⌉)     one scale per row and block of 32
 *    embeddings.word           F32 (V, C)          instead of both with "fp32-rescored"
 *    embeddings.position       F32 (P, C)          when position is absolute
 *    embeddings.token_type     F32 (type_vocab_size, C)    when type_vocab_size > 0
 *    embeddings.norm.weight    F32 (C)   and .bias with norm_bias
 *    encoder.relative_bias     F32 (B, H)          when B > 0
 *    encoder.relative_bucket   I32 (2·max_length − 1)   when B > 0: entry d + max_length − 1 is the
 *                          bucket of relative position d = j − i (key minus query), in 0 .. B−1,
 *                          computed by the writer exactly as transformers' relative_position_bucket
 *    rotary.global.cos / .sin  F32 (max_length, D/2)  when position is rotary and a layer is 'g'
 *    rotary.local.cos / .sin   F32 (max_length, D/2)  when position is rotary and a layer is 'l':
 *                          cos(p · θ^(−2i/D)) and sin(…) for position p and frequency i, float32 as
 *                          transformers computes them
 *    layers.l.attention.qkv    linear, N = 3C, K = C  (rows: query, then key, then value)
 *    layers.l.attention.out    linear, N = C,  K = C
 *    layers.l.attention.norm.weight (C) and .bias with norm_bias;  norm "pre": may be absent
 *                          (no norm before that layer's attention, ModernBERT's layer 0)
 *    layers.l.ffn.up           linear, N = F (mlp) or 2F (glu: rows 0..F−1 the input, F..2F−1
 *                          the gate), K = C
 *    layers.l.ffn.down         linear, N = C,  K = F
 *    layers.l.ffn.norm.weight (C) and .bias with norm_bias
 *    final_norm.weight (C) and .bias with norm_bias   when final_norm
 *    dense.<i>.weight          F32 (E_i, K_i)  K_0 = C × the pooling modes, K_i = E_{i−1}; the
 *                          embedding has E_{n−1} floats
 *    dense.<i>.bias            F32 (E_i)       optional (a Dense module without bias)
 *    classifier.dense.weight   F32 (C, C), .bias (C)   optional: BERT's pooler, RoBERTa's dense
 *    classifier.norm.weight    F32 (C), .bias (C)      optional: ModernBERT's head norm
 *    classifier.out.weight     F32 (n_labels, C), .bias (n_labels)   head "classifier"
 *    mlm.transform             linear, N = C, K = C (its .bias optional)    head "mlm"
 *    mlm.norm.weight           F32 (C), .bias (C)
 *    mlm.decoder               linear, N = V, K = C (its .bias optional; a tied decoder is a
 *                          copy of the word embeddings in this layout); always int8
 *    mlm.decoder.weight        F32 (V, C)  "fp32-rescored" with a decoder not tied to the word
 *                          embeddings: its fp32 rows for rescoring (tied: embeddings.word's)
 *    tokenizer.vocab           U8  (bytes)  the tokens joined by '\n'; id = line index (wordpiece)
 *
 * Unigram and BPE tokenizers (written by python/edgembed/export/tokenizer_tables.py from
 * tokenizer.json; read by runtime/src/tokenizer_bundle.c; k = a step's index, from 0):
 *    tokenizer.vocab           U8  all token texts back to back, by id (model and added tokens)
 *    tokenizer.vocab_offsets   I32 (n_vocab + 1)  token i is vocab[off[i] .. off[i+1])
 *    tokenizer.scores          F64 (n_model)      unigram log probabilities
 *    tokenizer.merges          I32 (n, 3)         bpe: left id, right id, merged id; rank = row
 *    tokenizer.added           I32 (n, 4)         id, flags (1 single_word, 2 lstrip, 4 rstrip,
 *                                                 8 normalized, 16 special), start, end of the
 *                                                 text matched in tokenizer.added_text (U8)
 *    tokenizer.template.single / .pair  I32 (k, 2)  (item, type id): item >= 0 a special
 *                                                 token's id, -1 the first text, -2 the second
 *    tokenizer.normalizers.k.data / .content       U8 a step's charsmap or pattern / replacement
 *    tokenizer.pre_tokenizers.k.replacement / .literal   U8 Metaspace's character / a literal
 *  with the metadata tokenizer.n_model, tokenizer.unk_id (absent: none), tokenizer.byte_fallback,
 *  .fuse_unk, .ignore_merges, .trim_offsets, .trim_add_prefix_space ("true"/"false"),
 *  tokenizer.normalizers (steps, space-separated: precompiled nfc strip replace lowercase
 *  prepend), tokenizer.pre_tokenizers (whitespace_split metaspace byte_level split), each
 *  step's options as tokenizer.<normalizers|pre_tokenizers>.k.<option>, tokenizer.truncation
 *  (longest_first, only_first, only_second) and tokenizer.truncation_side (right, left).
 *  docs/tokenizer.md lists what each means.
 *
 * A linear layer y = x W^T + b with W (N, K) is stored zero-padded to Np × Kp, Np and Kp the
 * multiples of 32 at or above N and K (so every activation row is a whole number of blocks and
 * its padding stays exactly 0), as
 *    NAME.q      I8  (Np/4, Kp/4, 4, 4)  q[g][j][r][c] = round_half_even(W[4g+r][4j+c] / s)
 *    NAME.scale  F32 (Np/4, Kp/32, 4)    s[g][b][r]    = max|W[4g+r][32b .. 32b+31]| / 127
 *    NAME.bias   F32 (Np)                b, then zeros
 * i.e. the "n4k4" layout: groups of 4 output rows, and inside a group 16-byte cells of
 * 4 rows × 4 consecutive k. Every kernel (scalar, SIMD128, relaxed SIMD, AVX-512, AVX2, NEON)
 * reads it as is. An fp32 linear ("fp32-rescored") has instead of .q and .scale
 *    NAME.weight F32 (Np/4, Kp/4, 4, 4)  w[g][j][r][c] = W[4g+r][4j+c]  (the same cells, fp32)
 * computed as y[m][n] = bias[n] + ((l0 + l2) + (l1 + l3)), l_c = Σ_{k ≡ c mod 4} x[m][k] ·
 * W[n][k] in increasing k, every product and sum rounded to fp32 (no FMA). When K % 32 != 0 the last block of a row is SHORT: its scale is the max over its
 * K % 32 real values / 127, which is exactly what zero-padding the block gives.
 *
 * Arithmetic (docs/quantization.md): each token's activation row x (K, zero-padded to Kp) is
 * quantized at run time per block of 32: s_x = max|x_b| / 127, q_x = round_half_even(x / s_x) in
 * [-127, 127] (scale 0 for a block of zeros); y[m][n] = bias[n] + Σ_b (s_x[m][b] · s_w[n][b]) ·
 * (float) Σ_{k in b} q_x[m][k] · q_w[n][k], the block terms added in fp32 in increasing b.
 * Nothing depends on a token's batch-mates, so a text's vector is the same in any batch.
 *
 * Compatibility: a bundle of another format version is refused with EMB_STATUS_BAD_VERSION (the
 * version 1 format left its header out of the checksum, so an edited configuration went
 * unnoticed); regenerate it from the model with `embed bundle MODEL`.
 *
 * Shape letters: T tokens in a packed batch, S sequences, C hidden size (dim), H heads,
 * D head size, F FFN size, L layers, V vocabulary, P positions, B relative buckets, E output
 * size of a Dense module, N/K outputs/inputs of a linear.
 */
#ifndef EDGEMBED_H
#define EDGEMBED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public functions; native builds compile everything else with hidden visibility. */
#if defined(__GNUC__) || defined(__clang__)
#define EMB_API __attribute__((visibility("default")))
#else
#define EMB_API
#endif

/*
 * Layout checks for the structs that cross the boundary (read and written by
 * python/edgembed/backends/_abi.py and js/src/abi.ts, in native and in wasm32 memory): every
 * field at the offset the bindings use, so no build (native, wasm, C++) compiles a layout they
 * would misread. Fields are fixed-width scalars, size_t or pointers; write the offsets of a
 * struct with pointer-wide fields with sizeof(void *), e.g. EMB_ASSERT_FIELD(s, n, 2 *
 * sizeof(void *)), so the line holds for wasm32 and 64-bit builds alike.
 * tests/python/test_abi.py checks that every field has its line, for both pointer widths.
 */
#if defined(__cplusplus)
#define EMB_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define EMB_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#else
#define EMB_STATIC_ASSERT(cond, msg) struct emb_static_assert_unused
#endif
#define EMB_ASSERT_FIELD(type, field, offset) \
    EMB_STATIC_ASSERT(offsetof(type, field) == (offset), #type "." #field " must be at byte " #offset)
#define EMB_ASSERT_SIZE(type, size) EMB_STATIC_ASSERT(sizeof(type) == (size), #type " must be " #size " bytes")

#define EMB_BUNDLE_VERSION_MIN 2
#define EMB_BUNDLE_VERSION_MAX 2
#define EMB_BUNDLE_ALIGN 64

typedef enum emb_status {
    EMB_STATUS_OK = 0,
    EMB_STATUS_INVALID_ARGUMENT = 1,  /* a NULL pointer, a zero size, an option out of range */
    EMB_STATUS_OUT_OF_MEMORY = 2,
    EMB_STATUS_BUFFER_TOO_SMALL = 3,  /* the caller's output buffer cannot hold the result */
    EMB_STATUS_BAD_MAGIC = 4,         /* not an edgembed bundle */
    EMB_STATUS_BAD_VERSION = 5,       /* a bundle version outside the supported range */
    EMB_STATUS_TRUNCATED = 6,         /* the bundle ends before its declared size */
    EMB_STATUS_CORRUPT = 7,           /* inconsistent sizes, offsets, values or checksum */
    EMB_STATUS_UNSUPPORTED = 8,       /* a valid bundle feature this build cannot run */
    EMB_STATUS_TOO_LONG = 9,          /* input exceeds the model's max length with truncation off */
} emb_status;

/* A static, human-readable message for a status; never NULL. */
EMB_API const char *emb_status_str(emb_status status);

/* ── model ─────────────────────────────────────────────────────────────────────────── */

typedef struct emb_model emb_model;

/* Pooling modes (sentence-transformers' names in the bundle's "pooling"). */
typedef enum emb_pooling {
    EMB_POOLING_MODEL = 0,           /* what the bundle says */
    EMB_POOLING_MEAN = 1,            /* mean over the sequence's tokens, special tokens included */
    EMB_POOLING_CLS = 2,             /* the first token's hidden state */
    EMB_POOLING_MAX = 3,             /* the largest value of each dimension over the tokens */
    EMB_POOLING_LASTTOKEN = 4,       /* the last token's hidden state */
    EMB_POOLING_MEAN_SQRT_LEN_TOKENS = 5,   /* the sum over the tokens / √(tokens) */
    EMB_POOLING_WEIGHTEDMEAN = 6,   /* Σ (i+1)·x_i / Σ (i+1), i the token's index in its sequence */
} emb_pooling;

/* How EMB_OUTPUT_SPARSE folds a sequence's token rows into one (SPLADE's pooling_strategy). */
typedef enum emb_sparse_pooling {
    EMB_SPARSE_MODEL = 0,   /* the bundle's "sparse.pooling" */
    EMB_SPARSE_MAX = 1,     /* the largest weight of each vocabulary entry over the tokens */
    EMB_SPARSE_SUM = 2,     /* the sum of its weights, added in token order */
} emb_sparse_pooling;

/* The first description of a model, kept as it was for hosts written against it. */
typedef struct emb_model_info {
    int32_t dim;            /* the length of one embedding (after any Dense module) */
    int32_t n_layers;       /* L */
    int32_t n_heads;        /* H */
    int32_t ffn_dim;        /* F */
    int32_t vocab_size;     /* V */
    int32_t max_length;     /* tokens per sequence, special tokens included */
    int32_t pooling;        /* emb_pooling: the model's mode */
    int32_t normalize;      /* 1 when the model's embeddings are L2-normalized */
    int32_t version;        /* bundle format version */
} emb_model_info;
EMB_ASSERT_FIELD(emb_model_info, dim, 0);
EMB_ASSERT_FIELD(emb_model_info, n_layers, 4);
EMB_ASSERT_FIELD(emb_model_info, n_heads, 8);
EMB_ASSERT_FIELD(emb_model_info, ffn_dim, 12);
EMB_ASSERT_FIELD(emb_model_info, vocab_size, 16);
EMB_ASSERT_FIELD(emb_model_info, max_length, 20);
EMB_ASSERT_FIELD(emb_model_info, pooling, 24);
EMB_ASSERT_FIELD(emb_model_info, normalize, 28);
EMB_ASSERT_FIELD(emb_model_info, version, 32);
EMB_ASSERT_SIZE(emb_model_info, 36);

/* What is in the model and what a request may ask of it. All int32, in this order. */
typedef struct emb_model_config {
    int32_t version;          /* bundle format version */
    int32_t dim;              /* the embedding length: C × the pooling modes, or the last Dense
                                 module's output */
    int32_t hidden_dim;       /* C, the length of a token's hidden state (EMB_OUTPUT_TOKENS) */
    int32_t n_layers;         /* L */
    int32_t n_heads;          /* H */
    int32_t ffn_dim;          /* F */
    int32_t vocab_size;       /* V */
    int32_t max_length;       /* tokens per sequence, special tokens included */
    int32_t type_vocab_size;  /* token types a request may give (0: none, type_ids must be NULL) */
    int32_t pooling;          /* emb_pooling: the model's mode (its first, when it concatenates several) */
    int32_t include_prompt;   /* 0: prompt tokens are left out of the pooling (prompt_lengths) */
    int32_t normalize;        /* 1 when the model's embeddings are L2-normalized */
    int32_t n_dense;          /* Dense modules after the pooling */
    int32_t head;             /* emb_head */
    int32_t n_labels;         /* EMB_HEAD_CLASSIFIER: logits per sequence (else 0) */
    int32_t sparse_pooling;   /* EMB_HEAD_MLM: EMB_SPARSE_MAX or EMB_SPARSE_SUM (else 0) */
} emb_model_config;
EMB_ASSERT_FIELD(emb_model_config, version, 0);
EMB_ASSERT_FIELD(emb_model_config, dim, 4);
EMB_ASSERT_FIELD(emb_model_config, hidden_dim, 8);
EMB_ASSERT_FIELD(emb_model_config, n_layers, 12);
EMB_ASSERT_FIELD(emb_model_config, n_heads, 16);
EMB_ASSERT_FIELD(emb_model_config, ffn_dim, 20);
EMB_ASSERT_FIELD(emb_model_config, vocab_size, 24);
EMB_ASSERT_FIELD(emb_model_config, max_length, 28);
EMB_ASSERT_FIELD(emb_model_config, type_vocab_size, 32);
EMB_ASSERT_FIELD(emb_model_config, pooling, 36);
EMB_ASSERT_FIELD(emb_model_config, include_prompt, 40);
EMB_ASSERT_FIELD(emb_model_config, normalize, 44);
EMB_ASSERT_FIELD(emb_model_config, n_dense, 48);
EMB_ASSERT_FIELD(emb_model_config, head, 52);
EMB_ASSERT_FIELD(emb_model_config, n_labels, 56);
EMB_ASSERT_FIELD(emb_model_config, sparse_pooling, 60);
EMB_ASSERT_SIZE(emb_model_config, 64);

/* What the model ends with beyond the encoder (the bundle's "head"). */
typedef enum emb_head {
    EMB_HEAD_NONE = 0,        /* the pooled embedding */
    EMB_HEAD_CLASSIFIER = 1,  /* n_labels logits per sequence (EMB_OUTPUT_SCORES) */
    EMB_HEAD_MLM = 2,         /* vocabulary logits per token, SPLADE weights (EMB_OUTPUT_SPARSE) */
} emb_head;

/*
 * Reads a bundle of `size` bytes at `bundle` (at least 4-byte aligned; 64 is best). Checks
 * the magic, version, header, every configuration value against the tensor shapes, offsets and
 * the checksum of the whole file. The model references these bytes until emb_model_free. On
 * failure *out is NULL.
 */
EMB_API emb_status emb_model_init(emb_model **out, const void *bundle, size_t size);
EMB_API void emb_model_free(emb_model *model);
EMB_API void emb_model_get_info(const emb_model *model, emb_model_info *info);
EMB_API void emb_model_get_config(const emb_model *model, emb_model_config *config);

/*
 * Looks up a string of the bundle's "__metadata__" (e.g. "name"). Returns a pointer into
 * the bundle (NOT NUL-terminated) and its length in *len, or NULL when the key is absent.
 */
EMB_API const char *emb_model_get_meta(const emb_model *model, const char *key, size_t *len);

/*
 * Tokenizes one UTF-8 text into ids ([CLS] … [SEP]). Invalid UTF-8 is read as U+FFFD.
 * With truncate != 0 the ids are cut to the model's max length (the last one stays [SEP]);
 * with truncate == 0 a longer text is EMB_STATUS_TOO_LONG. *n_ids receives the number of
 * ids written; *n_full (may be NULL) the length before truncation. Needs cap >= *n_ids, else
 * EMB_STATUS_BUFFER_TOO_SMALL (with *n_ids set to the length needed). Thread-safe.
 */
EMB_API emb_status emb_model_tokenize(const emb_model *model, const char *utf8, size_t len, int truncate,
                              int32_t *ids, size_t cap, size_t *n_ids, size_t *n_full);

/*
 * emb_model_tokenize for a text or a pair of texts, with each token's type id and offsets.
 * pair (pair_len bytes) is the second text, or NULL for one text. The pair gets the tokenizer's
 * pair template (e.g. [CLS] A [SEP] B [SEP], <s> A </s></s> B </s>) and, when too long, its
 * truncation strategy (tokenizer.json's, longest_first by default). type_ids (may be NULL):
 * cap ids' template type ids. offsets (may be NULL): 2 * cap values; token i covers the bytes
 * [offsets[2i], offsets[2i+1]) of its own text (the first, or the second for the pair's second
 * text's tokens); the template's special tokens have (0, 0). These are the offsets of Hugging
 * Face tokenizers' encodings, in bytes (emb_utf8_offsets_to_chars converts them). Other
 * arguments and statuses as emb_model_tokenize. Thread-safe.
 */
EMB_API emb_status emb_model_tokenize_ex(const emb_model *model, const char *utf8, size_t len, const char *pair,
                                         size_t pair_len, int truncate, int32_t *ids, int32_t *type_ids,
                                         uint32_t *offsets, size_t cap, size_t *n_ids, size_t *n_full);

/*
 * Converts n byte offsets into the UTF-8 text (each at most len) to character offsets, in place:
 * code points (utf16 == 0, as Python's str) or UTF-16 code units (utf16 != 0, as JavaScript's
 * String). Each maximal invalid UTF-8 subsequence counts as one U+FFFD, as decoding with
 * replacement does. An offset inside a character counts that character's start.
 * INVALID_ARGUMENT for an offset beyond len or NULL pointers.
 */
EMB_API emb_status emb_utf8_offsets_to_chars(const char *utf8, size_t len, uint32_t *offsets, size_t n, int utf16);

/* ── context ───────────────────────────────────────────────────────────────────────── */

typedef struct emb_context emb_context;

/*
 * Plans and allocates the run state for calls of at most `max_tokens` tokens in total
 * (all sequences of one call together). The context references the model, which must
 * outlive it. Use one context per thread.
 */
EMB_API emb_status emb_context_init(emb_context **out, const emb_model *model, size_t max_tokens);
EMB_API void emb_context_free(emb_context *ctx);
EMB_API size_t emb_context_max_tokens(const emb_context *ctx);

/*
 * emb_context_init with two choices. n_threads: threads that share each call, the
 * caller's included (a pool of n_threads - 1 threads lives with the context and sleeps between
 * calls); 1 (or 0) runs on the calling thread only; at most 64. Size it to the cores the
 * encoder may have: a context per core with n_threads = 1 and one context with n_threads =
 * cores both use every core, more would oversubscribe. wasm builds run one thread
 * (EMB_STATUS_UNSUPPORTED for more). kernels: NULL or "" for the best kernel set this CPU runs,
 * or one of emb_kernels_available()'s names (EMB_STATUS_UNSUPPORTED when it is not available).
 * The results do not depend on either choice: every kernel set and every thread count gives
 * the same bits.
 */
EMB_API emb_status emb_context_init_ex(emb_context **out, const emb_model *model, size_t max_tokens,
                                       int32_t n_threads, const char *kernels);
EMB_API int32_t emb_context_threads(const emb_context *ctx);
/* The name of the kernel set the context runs, e.g. "avx512-vnni", "neon-dotprod", "reference". */
EMB_API const char *emb_context_kernels(const emb_context *ctx);

/*
 * The kernel sets this machine runs, best first, separated by spaces (e.g. "avx512-vnni avx2
 * reference"): those whose instructions the CPU and OS support and that agreed with the
 * reference, bit for bit, in a self-check run the first time the library needs kernels.
 */
EMB_API const char *emb_kernels_available(void);

/* What a request computes. */
typedef enum emb_output_kind {
    EMB_OUTPUT_EMBEDDING = 0,  /* per sequence: pooling, Dense modules, L2 → values (S, dim) */
    EMB_OUTPUT_TOKENS = 1,     /* per token: the encoder's last hidden states → values (T, hidden_dim) */
    EMB_OUTPUT_SCORES = 2,     /* per sequence: the classification head's logits → values (S, n_labels) */
    EMB_OUTPUT_SPARSE = 3,     /* per sequence (or per token): SPLADE weights of the vocabulary, from
                                  the masked-LM head → values (rows, V), or with top_k the k largest
                                  → values and indices (rows, top_k) */
} emb_output_kind;

/*
 * One call's input: S sequences of token ids packed back to back (no padding) and what to
 * compute from them. Zero-initialize it and set what you need: the zeros are EMBEDDING with
 * the model's pooling, raw vectors and the prompt tokens pooled; set normalize and
 * include_prompt to -1 for the model's choices.
 */
typedef struct emb_request {
    const int32_t *ids;             /* (T) token ids, each < vocab_size */
    const int32_t *lengths;         /* (S) tokens per sequence, each 1 .. max_length, Σ = T ≤ max_tokens */
    const int32_t *type_ids;        /* NULL: every token type 0; else (T) token types, each <
                                       type_vocab_size (a model without token types takes NULL) */
    const int32_t *prompt_lengths;  /* NULL: no prompts; else (S) leading prompt tokens of each
                                       sequence, 0 .. lengths[s] − 1 (special tokens before the
                                       prompt included, as sentence-transformers counts them) */
    size_t n_seqs;                  /* S ≥ 1 */
    int32_t output;                 /* emb_output_kind */
    int32_t pooling;                /* EMBEDDING: emb_pooling; EMB_POOLING_MODEL the model's (all
                                       its modes concatenated); another mode alone gives (S, C),
                                       refused for a model whose Dense modules take more */
    int32_t normalize;              /* EMBEDDING: < 0 the model's choice, 0 raw, > 0 L2-normalized */
    int32_t include_prompt;         /* EMBEDDING: < 0 the model's choice, 0 pool without the
                                       prompt tokens, > 0 with them */
    int32_t top_k;                  /* SPARSE: 0 every weight (rows of V floats); k > 0 the k
                                       largest of each row, by weight then lower id, the rest of
                                       the row's k entries index −1 weight 0 */
    int32_t per_token;              /* SPARSE: 0 one row per sequence, folded as pooling says
                                       (an emb_sparse_pooling), 1 one row per token */
} emb_request;
EMB_ASSERT_FIELD(emb_request, ids, 0);
EMB_ASSERT_FIELD(emb_request, lengths, sizeof(void *));
EMB_ASSERT_FIELD(emb_request, type_ids, 2 * sizeof(void *));
EMB_ASSERT_FIELD(emb_request, prompt_lengths, 3 * sizeof(void *));
EMB_ASSERT_FIELD(emb_request, n_seqs, 4 * sizeof(void *));
EMB_ASSERT_FIELD(emb_request, output, 5 * sizeof(void *));
EMB_ASSERT_FIELD(emb_request, pooling, 5 * sizeof(void *) + 4);
EMB_ASSERT_FIELD(emb_request, normalize, 5 * sizeof(void *) + 8);
EMB_ASSERT_FIELD(emb_request, include_prompt, 5 * sizeof(void *) + 12);
EMB_ASSERT_FIELD(emb_request, top_k, 5 * sizeof(void *) + 16);
EMB_ASSERT_FIELD(emb_request, per_token, 5 * sizeof(void *) + 20);
EMB_ASSERT_SIZE(emb_request, 5 * sizeof(void *) + 24);

/* Where a call's results go (the caller's memory), and the shape of what it wrote. */
typedef struct emb_output {
    float *values;                  /* the rows, back to back */
    size_t values_cap;              /* floats values can hold */
    size_t n_rows;                  /* written: S, or T (TOKENS, SPARSE per token) */
    size_t row_size;                /* written: floats per row: dim, hidden_dim, n_labels, V or top_k */
    int32_t *indices;               /* SPARSE with top_k: (rows, top_k) vocabulary ids, values_cap
                                       of them; else unused (NULL) */
} emb_output;
EMB_ASSERT_FIELD(emb_output, values, 0);
EMB_ASSERT_FIELD(emb_output, values_cap, sizeof(void *));
EMB_ASSERT_FIELD(emb_output, n_rows, 2 * sizeof(void *));
EMB_ASSERT_FIELD(emb_output, row_size, 3 * sizeof(void *));
EMB_ASSERT_FIELD(emb_output, indices, 4 * sizeof(void *));
EMB_ASSERT_SIZE(emb_output, 5 * sizeof(void *));

/*
 * Runs one request. A sequence's result never depends on the other sequences of the call, the
 * kernel set or the thread count. Allocates nothing. Errors: INVALID_ARGUMENT (NULL pointers,
 * n_seqs 0, a length of 0, more tokens than the context holds, an id or type id out of range,
 * type ids for a model without token types, a prompt length ≥ its sequence's length, an
 * unknown option, SCORES without a classifier head, SPARSE without a masked-LM head or with
 * top_k > 0 and no indices), TOO_LONG (a sequence over max_length), BUFFER_TOO_SMALL
 * (values_cap too small; n_rows and row_size then say what is needed).
 */
EMB_API emb_status emb_context_run(emb_context *ctx, const emb_request *request, emb_output *output);

/*
 * The first call of the engine: EMB_OUTPUT_EMBEDDING of `n_seqs` sequences packed in `ids`
 * (lengths[i] each) into out[n_seqs][dim], token types 0, no prompts. pooling: EMB_POOLING_*;
 * normalize: < 0 the model's choice, 0 raw, > 0 L2-normalized; out_cap: floats out can hold.
 */
EMB_API emb_status emb_context_encode(emb_context *ctx, const int32_t *ids, const int32_t *lengths,
                              size_t n_seqs, emb_pooling pooling, int normalize, float *out,
                              size_t out_cap);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMBED_H */
