/*
 * edgembed.h — the one public header of the edgembed engine.
 *
 * The engine turns UTF-8 text into sentence embeddings with a BERT-family encoder whose
 * weights come from one bundle file (.emb). It never prints, exits or aborts: every
 * function that can fail returns an emb_status, and emb_status_str() says what went wrong.
 *
 *   text ─► emb_model_tokenize ─► ids ─► emb_context_encode ─► (n × dim) floats
 *            (normalizer, pre_tokenizer,     (encoder: embeddings, layers of
 *             wordpiece, post_processor)      attention + FFN; pooling; L2 norm)
 *
 * Objects:
 *   emb_model    configuration + weights + tokenizer. It REFERENCES the caller's bundle
 *                bytes (no copy of the weights): keep them alive and unchanged until
 *                emb_model_free. Read-only after init, so any number of threads may share it.
 *   emb_context  the run state of one thread: one arena planned at init for a maximum number
 *                of tokens per call. emb_context_encode allocates nothing.
 *
 * ─────────────────────────────────────────────────────────────────────────────────────
 * BUNDLE FORMAT, versions EMB_BUNDLE_VERSION_MIN through EMB_BUNDLE_VERSION_MAX (1 through 1)
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
 *  3. "__metadata__" maps strings to strings (safetensors allows nothing else):
 *        edgembed_bundle   format version, "1"
 *        name              model name (printable ASCII)
 *        arch              "bert"
 *        dim, n_layers, n_heads, ffn_dim, vocab_size, max_positions, type_vocab_size
 *                          decimal integers (C, L, H, F, V, P; D = C / H)
 *        layer_norm_eps    decimal float, e.g. "1e-12"
 *        hidden_act        "gelu" (the exact erf form)
 *        max_length        tokens per sequence after truncation, [CLS] and [SEP] included
 *        pooling           "mean" or "cls";  normalize  "true" or "false"
 *        quantization      "int8-block32"  (scheme below; docs/quantization.md)
 *        weight_layout     "n4k4"          (packing below)
 *        tokenizer         "wordpiece", "unigram" or "bpe" (their tables: below)
 *        tokenizer.lowercase, tokenizer.strip_accents, tokenizer.handle_chinese_chars,
 *        tokenizer.clean_text            "true" or "false"             (wordpiece)
 *        tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
 *        tokenizer.max_input_chars_per_word   decimal integers          (wordpiece)
 *        data_crc32        CRC-32 (zlib's polynomial) of the whole data region, 8 hex digits
 *  4. every other key names a tensor: {"dtype":"F32"|"I8"|"U8"|"I32"|"F64","shape":[...],
 *     "data_offsets":[begin,end]}, offsets relative to the data region. The writer places
 *     every tensor at a 64-byte-aligned offset; F32 tensors must be at least 4-aligned.
 *  5. the data region: bytes 8 + H .. end of file, tensors back to back in header order.
 *
 * Tensors (l = 0 .. L-1; "linear" = the three tensors NAME.q, NAME.scale, NAME.bias):
 *    embeddings.word.q         I8  (V, C)          row-major
 *    embeddings.word.scale     F32 (V, C/32)       one scale per row and block of 32
 *    embeddings.position       F32 (P, C)
 *    embeddings.token_type     F32 (type_vocab_size, C)
 *    embeddings.norm.weight / .bias                 F32 (C)
 *    layers.l.attention.qkv    linear, N = 3C, K = C  (rows: query, then key, then value)
 *    layers.l.attention.out    linear, N = C,  K = C
 *    layers.l.attention.norm.weight / .bias         F32 (C)
 *    layers.l.ffn.up           linear, N = F,  K = C
 *    layers.l.ffn.down         linear, N = C,  K = F
 *    layers.l.ffn.norm.weight / .bias               F32 (C)
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
 * A linear layer y = x W^T + b with W (N, K), N % 4 == 0, K % 32 == 0, is stored as
 *    NAME.q      I8  (N/4, K/4, 4, 4)   q[g][j][r][c] = round_half_even(W[4g+r][4j+c] / s)
 *    NAME.scale  F32 (N/4, K/32, 4)     s[g][b][r]    = max|W[4g+r][32b .. 32b+31]| / 127
 *    NAME.bias   F32 (N)
 * i.e. the "n4k4" layout: groups of 4 output rows, and inside a group 16-byte cells of
 * 4 rows × 4 consecutive k. Every kernel (scalar, SIMD128, relaxed SIMD) reads it as is.
 *
 * Arithmetic (docs/quantization.md): each token's activation row x (K) is quantized at run
 * time per block of 32: s_x = max|x_b| / 127, q_x = round_half_even(x / s_x) in [-127, 127]
 * (scale 0 for a block of zeros); y[m][n] = bias[n] + Σ_b (s_x[m][b] · s_w[n][b]) ·
 * (float) Σ_{k in b} q_x[m][k] · q_w[n][k], the block terms added in fp32 in increasing b.
 * Nothing depends on a token's batch-mates, so a text's vector is the same in any batch.
 *
 * A bundle from another format version is refused with EMB_STATUS_BAD_VERSION; regenerate
 * it from the model with `embed bundle MODEL`.
 *
 * Shape letters: T tokens in a packed batch, S sequences, C hidden size (dim), H heads,
 * D head size, F FFN size, L layers, V vocabulary, P positions, N/K outputs/inputs of a linear.
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

#define EMB_BUNDLE_VERSION_MIN 1
#define EMB_BUNDLE_VERSION_MAX 1
#define EMB_BUNDLE_ALIGN 64

typedef enum emb_status {
    EMB_STATUS_OK = 0,
    EMB_STATUS_INVALID_ARGUMENT = 1,  /* a NULL pointer, a zero size, an option out of range */
    EMB_STATUS_OUT_OF_MEMORY = 2,
    EMB_STATUS_BUFFER_TOO_SMALL = 3,  /* the caller's output buffer cannot hold the result */
    EMB_STATUS_BAD_MAGIC = 4,         /* not an edgembed bundle */
    EMB_STATUS_BAD_VERSION = 5,       /* a bundle version outside the supported range */
    EMB_STATUS_TRUNCATED = 6,         /* the bundle ends before its declared size */
    EMB_STATUS_CORRUPT = 7,           /* inconsistent sizes, offsets or checksums */
    EMB_STATUS_UNSUPPORTED = 8,       /* a valid bundle feature this build cannot run */
    EMB_STATUS_TOO_LONG = 9,          /* input exceeds the model's max length with truncation off */
} emb_status;

/* A static, human-readable message for a status; never NULL. */
EMB_API const char *emb_status_str(emb_status status);

/* ── model ─────────────────────────────────────────────────────────────────────────── */

typedef struct emb_model emb_model;

typedef enum emb_pooling {
    EMB_POOLING_MODEL = 0,  /* what the bundle says */
    EMB_POOLING_MEAN = 1,   /* mean over all tokens of a sequence, [CLS] and [SEP] included */
    EMB_POOLING_CLS = 2,    /* the first token's hidden state */
} emb_pooling;

typedef struct emb_model_info {
    int32_t dim;            /* C, the length of one embedding */
    int32_t n_layers;       /* L */
    int32_t n_heads;        /* H */
    int32_t ffn_dim;        /* F */
    int32_t vocab_size;     /* V */
    int32_t max_length;     /* tokens per sequence, [CLS] and [SEP] included */
    int32_t pooling;        /* emb_pooling: EMB_POOLING_MEAN or EMB_POOLING_CLS */
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

/*
 * Reads a bundle of `size` bytes at `bundle` (at least 4-byte aligned; 64 is best). Checks
 * the magic, version, header, shapes, offsets and the data checksum. The model references
 * these bytes until emb_model_free. On failure *out is NULL.
 */
EMB_API emb_status emb_model_init(emb_model **out, const void *bundle, size_t size);
EMB_API void emb_model_free(emb_model *model);
EMB_API void emb_model_get_info(const emb_model *model, emb_model_info *info);

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
 * emb_context_init with two choices. n_threads: threads that share each encode call, the
 * caller's included (a pool of n_threads - 1 threads lives with the context and sleeps between
 * calls); 1 (or 0) runs on the calling thread only; at most 64. Size it to the cores the
 * encoder may have: a context per core with n_threads = 1 and one context with n_threads =
 * cores both use every core, more would oversubscribe. wasm builds run one thread
 * (EMB_STATUS_UNSUPPORTED for more). kernels: NULL or "" for the best kernel set this CPU runs,
 * or one of emb_kernels_available()'s names (EMB_STATUS_UNSUPPORTED when it is not available).
 * The vectors do not depend on either choice: every kernel set and every thread count gives
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

/*
 * Encodes `n_seqs` sequences packed back to back in `ids` (lengths[i] ids each, no padding;
 * each 1 .. max_length, their sum at most the context's max_tokens) into out[n_seqs][dim].
 * pooling: EMB_POOLING_MODEL, _MEAN or _CLS; normalize: < 0 the model's choice, 0 raw, > 0
 * L2-normalized. out_cap is the capacity of out in floats. Allocates nothing; the result of a
 * sequence does not depend on the other sequences of the call.
 */
EMB_API emb_status emb_context_encode(emb_context *ctx, const int32_t *ids, const int32_t *lengths,
                              size_t n_seqs, emb_pooling pooling, int normalize, float *out,
                              size_t out_cap);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMBED_H */
