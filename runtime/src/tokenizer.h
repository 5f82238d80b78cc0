/*
 * tokenizer.h — the engine's tokenizers (internal API): BERT WordPiece, streaming, below; then
 * the general pipeline of SentencePiece Unigram, byte-level BPE and WordPiece with offsets.
 *
 * UTF-8 text becomes token ids exactly as Hugging Face `tokenizers` computes them for a BERT
 * tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece, TemplateProcessing [CLS] A [SEP]):
 *
 *   utf8 ─► added tokens ─► normalizer ─► pre_tokenizer ─► wordpiece ─► post_processor ─► ids
 *   (decode,  (split on      (clean text,   (split on        (greedy        ([CLS] … [SEP],
 *    U+FFFD)   [CLS] etc.)    CJK, NFD, Mn,  whitespace,      longest-match,  truncation)
 *                             lowercase)     isolate punct.)  "##", [UNK])
 *
 * The stages stream: each code point flows through all of them as it is decoded, so memory use is
 * fixed (a few KiB of stack per call) whatever the text's length, and nothing is allocated per call.
 * A tokenizer never changes after init, so any number of threads may encode with one at once.
 * See docs/tokenizer.md for the exact behaviour, the invalid UTF-8 policy and the Unicode version.
 */
#ifndef EMB_TOKENIZER_H
#define EMB_TOKENIZER_H

#include "bundle.h"
#include "edgembed.h"

/* Longest word (in characters, after normalization) the WordPiece stage can hold; words longer
   than max_input_chars_per_word become [UNK]. Bounds the per-call stack use (~3 KiB). */
#define EMB_TOKENIZER_MAX_WORD_CHARS 256
/* Most added tokens (tokens matched in the raw text before normalization, e.g. [MASK]). */
#define EMB_TOKENIZER_MAX_ADDED 64

typedef struct emb_tokenizer_config {
    int32_t lowercase;            /* BertNormalizer.lowercase */
    int32_t strip_accents;        /* 1/0; the loader resolves tokenizer.json's null to lowercase */
    int32_t handle_chinese_chars; /* put spaces around CJK ideographs */
    int32_t clean_text;           /* drop controls/U+FFFD/NUL, map whitespace to ' ' */
    int32_t unk_id, cls_id, sep_id, pad_id;
    int32_t max_input_chars_per_word;   /* 100: longer words become [UNK]; at most EMB_TOKENIZER_MAX_WORD_CHARS */
    int32_t max_length;           /* including [CLS] and [SEP], e.g. 256; at least 2 */
} emb_tokenizer_config;
/* tests/python/test_tokenizer_parity.py fills it through ctypes, laid out from this header */
EMB_ASSERT_FIELD(emb_tokenizer_config, lowercase, 0);
EMB_ASSERT_FIELD(emb_tokenizer_config, strip_accents, 4);
EMB_ASSERT_FIELD(emb_tokenizer_config, handle_chinese_chars, 8);
EMB_ASSERT_FIELD(emb_tokenizer_config, clean_text, 12);
EMB_ASSERT_FIELD(emb_tokenizer_config, unk_id, 16);
EMB_ASSERT_FIELD(emb_tokenizer_config, cls_id, 20);
EMB_ASSERT_FIELD(emb_tokenizer_config, sep_id, 24);
EMB_ASSERT_FIELD(emb_tokenizer_config, pad_id, 28);
EMB_ASSERT_FIELD(emb_tokenizer_config, max_input_chars_per_word, 32);
EMB_ASSERT_FIELD(emb_tokenizer_config, max_length, 36);
EMB_ASSERT_SIZE(emb_tokenizer_config, 40);

typedef struct emb_tokenizer emb_tokenizer;   /* opaque */

/* vocab: the tokens of vocab.txt joined by '\n' (id = line index); one trailing '\n' is allowed; it
   need not be NUL-terminated. Tokens are the exact bytes between newlines (no trimming); when a token
   appears twice, the later id wins (as tokenizers' vocab.txt loader does).
   REFERENCED, not copied: the caller keeps it alive and unchanged until emb_tokenizer_free.
   The added tokens are the vocab entries of unk_id, cls_id, sep_id, pad_id and, when the vocabulary
   has it, "[MASK]": the five special tokens of every BERT tokenizer.json. Use emb_tokenizer_init_ex
   to give the exact list.
   Errors: INVALID_ARGUMENT (NULL pointers, empty vocab, an id outside the vocab or naming an empty
   token, max_length < 2, max_input_chars_per_word < 0), UNSUPPORTED (max_input_chars_per_word above
   EMB_TOKENIZER_MAX_WORD_CHARS, 2^30 tokens or more, a vocab of 4 GiB or more), OUT_OF_MEMORY. */
emb_status emb_tokenizer_init(emb_tokenizer **out, const emb_tokenizer_config *cfg, const char *vocab, size_t vocab_len);

/* As emb_tokenizer_init, with the added tokens given as vocab ids (tokenizer.json's "added_tokens"
   whose "normalized" is false; their text is their vocab entry). The list replaces the default;
   n_added may be 0. At most EMB_TOKENIZER_MAX_ADDED (more: UNSUPPORTED). */
emb_status emb_tokenizer_init_ex(emb_tokenizer **out, const emb_tokenizer_config *cfg, const char *vocab,
                                 size_t vocab_len, const int32_t *added_ids, size_t n_added);

void emb_tokenizer_free(emb_tokenizer *tok);   /* NULL is allowed */

/* The tokenizer a bundle describes: its "tokenizer" metadata names the type and the
   "tokenizer.*" metadata and tensors hold its tables (layout: include/edgembed.h). Ids are checked
   against the model's vocab_size; max_length counts the special tokens. UNSUPPORTED for a
   tokenizer type this build does not implement, CORRUPT for bad tables. On failure *out is NULL. */
emb_status emb_tokenizer_from_bundle(emb_tokenizer **out, const emb_bundle *b, int32_t vocab_size,
                                     int32_t max_length);

/* Encodes one UTF-8 text to ids incl. [CLS]/[SEP]. Writes at most `cap` ids; *n_ids gets the number
   written (truncated to max_length when truncate != 0); *n_full gets the length the text would have
   without truncation (so callers can report/refuse truncation); n_full may be NULL.
   With truncate == 0 and n_full > max_length it returns EMB_STATUS_TOO_LONG (*n_ids = 0).
   cap < needed -> EMB_STATUS_BUFFER_TOO_SMALL, and *n_ids gets the number needed (ids may be NULL
   when cap == 0: a size query). utf8 may be NULL when len == 0. Invalid UTF-8 is replaced, never
   rejected: each maximal invalid subsequence becomes U+FFFD (docs/tokenizer.md).
   Thread-safe for concurrent calls on one tokenizer; allocates nothing. */
emb_status emb_tokenizer_encode(const emb_tokenizer *tok, const char *utf8, size_t len, int truncate,
                                int32_t *ids, size_t cap, size_t *n_ids, size_t *n_full);

/* Vocabulary size, and the text of one id (not NUL-terminated; NULL and *len = 0 for an id outside
   the vocabulary). The pointer is into the caller's vocab buffer. */
size_t emb_tokenizer_vocab_size(const emb_tokenizer *tok);
const char *emb_tokenizer_id_to_token(const emb_tokenizer *tok, int32_t id, size_t *len);
/* The id of a token's exact text, or -1. */
int32_t emb_tokenizer_token_to_id(const emb_tokenizer *tok, const char *text, size_t len);


/* ---- Between the stages (internal; the unit tests call these directly) ---------------------- */

/* UTF-8 decoding, the first step: the code point at s[*pos] (pos < len), advancing *pos. Each maximal
   invalid subsequence (Unicode's "maximal subpart" practice, as Python's decode(errors="replace"),
   WHATWG and ICU do it) becomes one U+FFFD. Reads nothing at or past s[len]. */
uint32_t emb_utf8_next(const uint8_t *s, size_t len, size_t *pos);

/* normalizer.c: BertNormalizer for one code point, except canonical ordering (see below). Writes
   0..EMB_NORMALIZER_MAX_OUT code points to out and returns their number. With strip_accents, a
   removed mark of combining class 0 leaves EMB_NORMALIZER_RUN_BREAK: no character, but the end of a
   combining run for the ordering (emb_word_push takes it). */
#define EMB_NORMALIZER_MAX_OUT 24   /* 3 (CJK spacing) x 4 (NFD) x 2 (lowercase) */
#define EMB_NORMALIZER_RUN_BREAK 0xFFFFFFFFu
size_t emb_normalizer_apply(const emb_tokenizer_config *cfg, uint32_t cp, uint32_t *out);
/* NFD's canonical ordering: chars[n-1] just arrived; move it left past the characters of its
   combining run (chars[run_start..n-1)) whose combining class is higher. Stable, like NFD's sort.
   The pre-tokenizer calls it while it builds a word: whitespace and punctuation have class 0, so a
   combining run never crosses a word boundary. */
void emb_normalizer_order(uint32_t *chars, size_t run_start, size_t n);
/* Full canonical decomposition of one code point (Hangul included); returns the length (1 when it
   does not decompose), at most EMB_UC_NFD_MAX_LEN. */
size_t emb_normalizer_nfd(uint32_t cp, uint32_t *out);
/* Lowercase mapping (Rust's char::to_lowercase); returns the length, at most EMB_UC_LOWER_MAX_LEN. */
size_t emb_normalizer_lower(uint32_t cp, uint32_t *out);

/* pre_tokenizer.c: BertPreTokenizer. */
typedef enum emb_pre_token_kind {
    EMB_PRE_TOKEN_KIND_WORD = 0,      /* part of a word */
    EMB_PRE_TOKEN_KIND_SPLIT = 1,     /* whitespace: ends the word, removed */
    EMB_PRE_TOKEN_KIND_ISOLATE = 2,   /* punctuation: ends the word, is a word of its own */
} emb_pre_token_kind;
emb_pre_token_kind emb_pre_tokenizer_kind(uint32_t cp);   /* EMB_NORMALIZER_RUN_BREAK: WORD */

/* A word being built: its first chars (up to the config's max_input_chars_per_word) and its length. */
typedef struct emb_word {
    uint32_t chars[EMB_TOKENIZER_MAX_WORD_CHARS];
    size_t n_chars;      /* characters pushed, including any not stored */
    size_t cap;          /* characters stored at most: max_input_chars_per_word */
    size_t run_start;    /* index after the last class-0 character (canonical ordering) */
    int order;           /* apply canonical ordering (strip_accents, i.e. NFD, is on) */
} emb_word;
void emb_word_reset(emb_word *w);
void emb_word_push(emb_word *w, uint32_t cp);   /* a character, or EMB_NORMALIZER_RUN_BREAK */

/* post_processor.c: collects the ids of the sequence and wraps them in [CLS] … [SEP]. */
typedef struct emb_id_sink {
    int32_t *ids;        /* caller's buffer; ids[0] is kept for [CLS] */
    size_t cap;          /* its capacity */
    size_t keep;         /* sequence ids kept: max_length - 2 */
    size_t n;            /* sequence ids pushed so far, kept or not */
} emb_id_sink;
void emb_id_sink_init(emb_id_sink *sink, int32_t *ids, size_t cap, size_t max_length);
void emb_id_sink_push(emb_id_sink *sink, int32_t id);
emb_status emb_post_processor_finish(const emb_tokenizer_config *cfg, emb_id_sink *sink, int truncate,
                                     size_t *n_ids, size_t *n_full);

/* wordpiece.c: the ids of one word (greedy longest match, "##" continuations, [UNK]). */
void emb_wordpiece_word(const emb_tokenizer *tok, const emb_word *w, emb_id_sink *sink);

/* tokenizer.c: everything before WordPiece. Decodes s, splits off the added tokens, normalizes and
   pre-tokenizes, and hands each word and added token to the callbacks, in text order. Words come
   with their length; only the first max_input_chars_per_word characters are stored. */
typedef struct emb_pre_tokens {
    void (*on_word)(void *ctx, const emb_word *word);
    void (*on_added)(void *ctx, int32_t id);
    void *ctx;
} emb_pre_tokens;
void emb_tokenizer_pre_tokenize(const emb_tokenizer *tok, const uint8_t *s, size_t len, const emb_pre_tokens *out);

/* tokenizer.c: vocabulary lookup of prefix followed by s (prefix may be empty); -1 when absent. */
int32_t emb_vocab_find(const emb_tokenizer *tok, const uint8_t *prefix, size_t prefix_len,
                       const uint8_t *s, size_t len);
size_t emb_vocab_max_token_len(const emb_tokenizer *tok);
int32_t emb_tokenizer_unk_id(const emb_tokenizer *tok);


/* ==== SentencePiece Unigram and byte-level BPE ==============================================
 *
 * The general pipeline, for tokenizer.json files whose normalizer, pre-tokenizer, model and
 * post-processor are any of those below (docs/tokenizer.md lists them):
 *
 *   utf8 ─► decode ─► added tokens ─► normalizer ─► added tokens ─► pre_tokenizer ─► unigram / bpe ─► post_processor
 *           (U+FFFD)   (as written)    (steps, in    (normalized)   (steps, in        (one word at     (truncation,
 *                                       order)                       order)            a time)          template, offsets)
 *
 * Unlike WordPiece's, this pipeline holds the whole text: every stage works on an array of
 * emb_nchar, each character with the bytes of the input it came from, so that every token knows
 * its offsets. Memory per call is up to about 60 bytes per character (a few such arrays) plus
 * the model's work arrays, allocated per call (emb_scratch) and freed before it returns.
 */

typedef enum emb_tokenizer_type {
    EMB_TOKENIZER_TYPE_WORDPIECE = 0,
    EMB_TOKENIZER_TYPE_UNIGRAM = 1,
    EMB_TOKENIZER_TYPE_BPE = 2,
} emb_tokenizer_type;

/* A character on its way through the stages and the input bytes [start, end) it stands for. */
typedef struct emb_nchar {
    uint32_t cp, start, end;
} emb_nchar;

typedef enum emb_normalizer_op {
    EMB_NORMALIZER_OP_PRECOMPILED = 1,   /* SentencePiece's precompiled charsmap */
    EMB_NORMALIZER_OP_NFC = 2,
    EMB_NORMALIZER_OP_STRIP = 3,         /* a: left, b: right */
    EMB_NORMALIZER_OP_REPLACE = 4,       /* pattern -> content; a: EMB_REPLACE_* */
    EMB_NORMALIZER_OP_LOWERCASE = 5,
    EMB_NORMALIZER_OP_PREPEND = 6,       /* content before a non-empty text */
    EMB_NORMALIZER_OP_BERT = 7,          /* BertNormalizer; a: EMB_BERT_* flags */
    EMB_NORMALIZER_OP_COUNT = 8,
} emb_normalizer_op;
enum { EMB_BERT_CLEAN_TEXT = 1, EMB_BERT_CHINESE = 2, EMB_BERT_STRIP_ACCENTS = 4, EMB_BERT_LOWERCASE = 8 };
typedef enum emb_replace_kind {
    EMB_REPLACE_LITERAL = 0,             /* every occurrence of the pattern string */
    EMB_REPLACE_SPACES = 1,              /* the regex " {2,}": runs of two or more U+0020 */
} emb_replace_kind;

typedef struct emb_normalizer_step {
    int32_t op, a, b;
    const uint8_t *data;                 /* precompiled: the charsmap; replace: the pattern (UTF-8) */
    size_t data_len;
    const uint8_t *content;              /* replace, prepend: the replacement (UTF-8) */
    size_t content_len;
} emb_normalizer_step;

typedef enum emb_pre_tokenizer_op {
    EMB_PRE_TOKENIZER_OP_WHITESPACE_SPLIT = 1,
    EMB_PRE_TOKENIZER_OP_METASPACE = 2,  /* replacement, prepend (EMB_PREPEND_*), split */
    EMB_PRE_TOKENIZER_OP_BYTE_LEVEL = 3, /* add_prefix_space, use_regex (GPT-2's) */
    EMB_PRE_TOKENIZER_OP_SPLIT = 4,      /* pattern (EMB_PATTERN_*, or a literal), behavior, invert */
    EMB_PRE_TOKENIZER_OP_BERT = 5,       /* BertPreTokenizer */
    EMB_PRE_TOKENIZER_OP_COUNT = 6,
} emb_pre_tokenizer_op;
typedef enum emb_prepend_scheme { EMB_PREPEND_NEVER = 0, EMB_PREPEND_FIRST = 1, EMB_PREPEND_ALWAYS = 2 } emb_prepend_scheme;
typedef enum emb_pattern {
    EMB_PATTERN_LITERAL = 0,             /* the string in literal */
    EMB_PATTERN_GPT2 = 1,                /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    EMB_PATTERN_CL100K = 2,              /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    EMB_PATTERN_QWEN2 = 3,               /* as CL100K with \p{N} for \p{N}{1,3} */
} emb_pattern;
typedef enum emb_split_behavior {
    EMB_SPLIT_REMOVED = 0, EMB_SPLIT_ISOLATED = 1, EMB_SPLIT_MERGED_WITH_PREVIOUS = 2,
    EMB_SPLIT_MERGED_WITH_NEXT = 3, EMB_SPLIT_CONTIGUOUS = 4,
} emb_split_behavior;

typedef struct emb_pre_tokenizer_step {
    int32_t op;
    uint32_t replacement;                /* metaspace */
    int32_t prepend, split;              /* metaspace */
    int32_t add_prefix_space, use_regex; /* byte level */
    int32_t pattern, behavior, invert;   /* split */
    const uint8_t *literal;              /* split with EMB_PATTERN_LITERAL */
    size_t literal_len;
} emb_pre_tokenizer_step;

#define EMB_TOKENIZER_MAX_STEPS 8

/* Added-token flags (tokenizer.json "added_tokens"). */
enum {
    EMB_ADDED_SINGLE_WORD = 1, EMB_ADDED_LSTRIP = 2, EMB_ADDED_RSTRIP = 4, EMB_ADDED_NORMALIZED = 8,
    EMB_ADDED_SPECIAL = 16,
};
typedef struct emb_added_spec {
    int32_t id, flags;
    const uint8_t *text;                 /* what is matched: the content, normalized when NORMALIZED */
    size_t len;
} emb_added_spec;

typedef enum emb_truncation {
    EMB_TRUNCATION_LONGEST_FIRST = 0, EMB_TRUNCATION_ONLY_FIRST = 1, EMB_TRUNCATION_ONLY_SECOND = 2,
} emb_truncation;

/* Template items: an id >= 0 is a special token; EMB_TEMPLATE_A / _B the first / second sequence. */
#define EMB_TEMPLATE_A (-1)
#define EMB_TEMPLATE_B (-2)
#define EMB_TEMPLATE_MAX 16

/* Everything a general tokenizer is made of. Arrays are REFERENCED, not copied: they must stay
   alive and unchanged until emb_tokenizer_free (a bundle's tensors do). */
typedef struct emb_tokenizer_spec {
    int32_t type;                        /* EMB_TOKENIZER_TYPE_UNIGRAM or _BPE */
    const uint8_t *vocab;                /* token texts back to back, by id */
    const int32_t *vocab_offsets;        /* (n_vocab + 1) token i is vocab[off[i] .. off[i+1]) */
    size_t n_vocab;
    size_t n_model;                      /* ids below it are the model's (scores, merges); the rest added tokens only */
    const double *scores;                /* unigram: (n_model) log probabilities */
    int32_t unk_id;                      /* -1: none */
    int32_t byte_fallback;               /* unigram: unknown pieces as <0xNN> tokens */
    const int32_t *merges;               /* bpe: (n_merges, 3) left id, right id, merged id; rank = row */
    size_t n_merges;
    int32_t fuse_unk, ignore_merges;     /* bpe */
    int32_t max_input_chars_per_word;    /* wordpiece: longer words are unk_id */
    const emb_added_spec *added;         /* (n_added) copied at init, text referenced */
    size_t n_added;
    emb_normalizer_step normalizers[EMB_TOKENIZER_MAX_STEPS];
    size_t n_normalizers;
    emb_pre_tokenizer_step pre_tokenizers[EMB_TOKENIZER_MAX_STEPS];
    size_t n_pre_tokenizers;
    int32_t single[EMB_TEMPLATE_MAX][2]; /* (item, type id) */
    size_t n_single;
    int32_t pair[EMB_TEMPLATE_MAX][2];
    size_t n_pair;
    int32_t trim_offsets;                /* ByteLevel / RobertaProcessing offset trimming */
    int32_t trim_add_prefix_space;       /* their add_prefix_space */
    int32_t max_length;                  /* with the template's special tokens */
    int32_t truncation;                  /* emb_truncation */
    int32_t truncate_left;               /* tokenizers' direction "left": keep the last ids */
} emb_tokenizer_spec;

/* Builds a Unigram, BPE or WordPiece tokenizer of the general pipeline (WordPiece with steps:
   tokenizer.json files the streaming WordPiece cannot run, e.g. other added tokens). Checks every id and offset (CORRUPT for tables that do not
   fit together, UNSUPPORTED for an option this build does not have, OUT_OF_MEMORY). */
emb_status emb_tokenizer_init_spec(emb_tokenizer **out, const emb_tokenizer_spec *spec);

/* Any tokenizer, one text or a pair (b may be NULL: one text). ids as emb_tokenizer_encode;
   type_ids (may be NULL) the template's type id of each; offsets (may be NULL) two per id: the
   bytes [offsets[2i], offsets[2i+1]) of token i in its own text (a, or b for the tokens of b),
   (0, 0) for the template's special tokens. *n_full counts the ids before truncation. */
emb_status emb_tokenizer_encode_ex(const emb_tokenizer *tok, const char *a, size_t a_len, const char *b,
                                   size_t b_len, int truncate, int32_t *ids, int32_t *type_ids,
                                   uint32_t *offsets, size_t cap, size_t *n_ids, size_t *n_full);

emb_tokenizer_type emb_tokenizer_get_type(const emb_tokenizer *tok);

/* A tokenizer from bundle bytes (emb_bundle_parse, then emb_tokenizer_from_bundle); for tests. */
emb_status emb_tokenizer_from_bundle_bytes(emb_tokenizer **out, const void *bytes, size_t size,
                                           int32_t vocab_size, int32_t max_length);

/* ---- Between the stages of the general pipeline (internal) ---------------------------------- */

/* Per-call work memory: growable arrays. An allocation failure sets oom and later pushes do
   nothing, so the stages need not check every push; the pipeline checks oom at the end. */
typedef struct emb_nchars {
    emb_nchar *v;
    size_t n, cap;
} emb_nchars;
typedef struct emb_scratch {
    int oom;
    emb_nchars text;                     /* the decoded input */
    emb_nchars norm, norm2;              /* one segment through the normalizer steps (ping-pong) */
    emb_nchars pre, pre2;                /* its pre-tokenized characters */
    size_t *bounds, *bounds2;            /* word ends in pre / pre2 */
    size_t n_bounds, cap_bounds, n_bounds2, cap_bounds2;
    uint8_t *bytes;                      /* one word in UTF-8, and for each byte its char index */
    uint32_t *byte_char;
    size_t cap_bytes;
    void *model;                         /* the model's own work arrays */
    size_t model_size;
} emb_scratch;
void emb_scratch_init(emb_scratch *sc);
void emb_scratch_free(emb_scratch *sc);
void emb_nchars_push(emb_scratch *sc, emb_nchars *a, uint32_t cp, uint32_t start, uint32_t end);
void *emb_scratch_model(emb_scratch *sc, size_t size);   /* at least size bytes, or NULL (oom) */
int emb_scratch_bytes(emb_scratch *sc, size_t n);        /* bytes/byte_char hold n; 0 on oom */
int emb_scratch_bounds(emb_scratch *sc, size_t **b, size_t *cap, size_t n);

/* normalizer.c: one step over in (a segment), appending to out. */
void emb_normalizer_run(const emb_normalizer_step *step, emb_scratch *sc, const emb_nchars *in, emb_nchars *out);
/* UAX #29 extended grapheme clusters: the index after the cluster starting at chars[i]. */
size_t emb_grapheme_end(const emb_nchar *chars, size_t n, size_t i);

/* pre_tokenizer.c: one step over the words of in (ends in bounds), appending to out/out_bounds. */
void emb_pre_tokenizer_run(const emb_pre_tokenizer_step *step, emb_scratch *sc, const emb_nchars *in,
                           const size_t *bounds, size_t n_bounds, emb_nchars *out, size_t **out_bounds,
                           size_t *n_out_bounds, size_t *cap_out_bounds);
/* The matches of a pattern in chars[0..n): calls on_match(ctx, start, end) for each, in order. */
void emb_pattern_find(int32_t pattern, const uint8_t *literal, size_t literal_len, const emb_nchar *chars,
                      size_t n, void (*on_match)(void *ctx, size_t start, size_t end), void *ctx);

/* One token of a sequence before post-processing: id, input bytes [start, end), and the number of
   leading and trailing characters of its text that offset trimming removes ('Ġ' or whitespace). */
typedef struct emb_token {
    int32_t id;
    uint32_t start, end;
    uint16_t lead, trail;
} emb_token;
typedef struct emb_tokens {
    emb_token *v;
    size_t n, cap;
    int oom;
} emb_tokens;
void emb_tokens_push(emb_tokens *t, int32_t id, uint32_t start, uint32_t end);

/* unigram.c / bpe.c: the tokens of one word, chars[0..n) (n > 0). */
void emb_unigram_word(const emb_tokenizer *tok, emb_scratch *sc, const emb_nchar *chars, size_t n, emb_tokens *out);
void emb_bpe_word(const emb_tokenizer *tok, emb_scratch *sc, const emb_nchar *chars, size_t n, emb_tokens *out);
void emb_wordpiece_word_chars(const emb_tokenizer *tok, emb_scratch *sc, const emb_nchar *chars, size_t n, emb_tokens *out);
emb_status emb_unigram_init(emb_tokenizer *tok);
emb_status emb_bpe_init(emb_tokenizer *tok);
void emb_model_free_tables(emb_tokenizer *tok);

/* post_processor.c: truncation, the template and offset trimming, into the caller's arrays. */
emb_status emb_post_processor_assemble(const emb_tokenizer *tok, const char *a, size_t a_len, const char *b,
                                       size_t b_len, emb_tokens *ta, emb_tokens *tb, int truncate,
                                       int32_t *ids, int32_t *type_ids, uint32_t *offsets, size_t cap,
                                       size_t *n_ids, size_t *n_full);

/* tokenizer.c: what the model stages need from the tokenizer. */
const emb_tokenizer_spec *emb_tokenizer_spec_of(const emb_tokenizer *tok);
/* Id of a token's exact bytes in the model's vocabulary (ids < n_model), or -1. */
int32_t emb_vocab_lookup(const emb_tokenizer *tok, const uint8_t *s, size_t len);
const uint8_t *emb_vocab_text(const emb_tokenizer *tok, int32_t id, size_t *len);
size_t emb_utf8_encode(uint32_t cp, uint8_t *out);
/* FNV-1a, as the vocabulary hash: emb_vocab_find_hashed takes the hash of s (from emb_fnv1a). */
#define EMB_FNV_OFFSET 2166136261u
static inline uint32_t emb_fnv1a_byte(uint32_t h, uint8_t b) { return (h ^ b) * 16777619u; }
int32_t emb_vocab_find_hashed(const emb_tokenizer *tok, uint32_t hash, const uint8_t *s, size_t len);
void *emb_tokenizer_model_tables(const emb_tokenizer *tok);
void emb_tokenizer_set_model_tables(emb_tokenizer *tok, void *tables);
size_t emb_tokenizer_n_model(const emb_tokenizer *tok);
int32_t emb_tokenizer_max_input_chars(const emb_tokenizer *tok);
void emb_token_trim_counts(const emb_tokenizer *tok, emb_token *t);
uint32_t emb_byte_char(uint8_t b);
int emb_is_trim_char(uint32_t cp);                        /* 'Ġ' or White_Space: offset trimming removes it */
void emb_bpe_free_tables(void *tables);
/* Bytes a tokenizer allocated at init (its tables; the vocabulary it references is not counted). */
size_t emb_tokenizer_memory(const emb_tokenizer *tok);
size_t emb_model_tables_memory(const emb_tokenizer *tok);
size_t emb_bpe_tables_memory(const void *tables);                       /* GPT-2's byte-to-unicode alphabet */
int emb_charsmap_valid(const uint8_t *data, size_t len); /* a Precompiled charsmap fits together */

#endif /* EMB_TOKENIZER_H */
