/*
 * tokenizer.h — the engine's BERT WordPiece tokenizer (internal API).
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

#endif /* EMB_TOKENIZER_H */
