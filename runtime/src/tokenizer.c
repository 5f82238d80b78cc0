/*
 * tokenizer.c — the tokenizer's pipeline: vocabulary, UTF-8 decoding, added tokens, and the loop
 * that streams every code point through normalizer -> pre_tokenizer -> wordpiece -> post_processor.
 * emb_tokenizer_pre_tokenize runs the stages up to the words; encode hands each word to WordPiece.
 */
#include "tokenizer.h"
#include "platform.h"

typedef struct emb_vocab_entry {
    uint32_t offset;     /* into the caller's vocab buffer */
    uint32_t len;        /* bytes */
} emb_vocab_entry;

typedef struct emb_added_token {
    const uint8_t *text;   /* into the caller's vocab buffer */
    size_t len;
    int32_t id;
} emb_added_token;

struct emb_tokenizer {
    emb_tokenizer_config cfg;
    const uint8_t *vocab;          /* (vocab_len) caller's bytes: tokens separated by '\n' */
    emb_vocab_entry *tokens;       /* (n_tokens) id -> text */
    size_t n_tokens;
    int32_t *table;                /* (table_mask + 1) open addressing, linear probing: id or -1 */
    uint32_t table_mask;
    size_t max_token_len;          /* bytes of the longest token */
    emb_added_token added[EMB_TOKENIZER_MAX_ADDED];   /* longest first: the first match is the longest */
    size_t n_added;
    uint8_t added_first[256];      /* 1 where an added token starts with that byte */
};

/* ---- vocabulary ------------------------------------------------------------------------------ */

/* FNV-1a, fed in pieces so "##" + a substring of the word hashes without copying. */
static uint32_t fnv1a(uint32_t h, const uint8_t *s, size_t len) {
    for (size_t i = 0; i < len; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}
#define FNV_OFFSET 2166136261u

static int bytes_equal(const uint8_t *a, const uint8_t *b, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (a[i] != b[i]) return 0;
    }
    return 1;
}

static int entry_equals(const emb_tokenizer *tok, const emb_vocab_entry *e, const uint8_t *prefix,
                        size_t prefix_len, const uint8_t *s, size_t len) {
    if (e->len != prefix_len + len) return 0;
    const uint8_t *text = tok->vocab + e->offset;
    return bytes_equal(text, prefix, prefix_len) && bytes_equal(text + prefix_len, s, len);
}

int32_t emb_vocab_find(const emb_tokenizer *tok, const uint8_t *prefix, size_t prefix_len,
                       const uint8_t *s, size_t len) {
    uint32_t slot = fnv1a(fnv1a(FNV_OFFSET, prefix, prefix_len), s, len) & tok->table_mask;
    for (;;) {
        int32_t id = tok->table[slot];
        if (id < 0) return -1;
        if (entry_equals(tok, &tok->tokens[id], prefix, prefix_len, s, len)) return id;
        slot = (slot + 1) & tok->table_mask;
    }
}

size_t emb_vocab_max_token_len(const emb_tokenizer *tok) { return tok->max_token_len; }
int32_t emb_tokenizer_unk_id(const emb_tokenizer *tok) { return tok->cfg.unk_id; }
size_t emb_tokenizer_vocab_size(const emb_tokenizer *tok) { return tok ? tok->n_tokens : 0; }

const char *emb_tokenizer_id_to_token(const emb_tokenizer *tok, int32_t id, size_t *len) {
    if (!tok || id < 0 || (size_t)id >= tok->n_tokens) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = tok->tokens[id].len;
    return (const char *)tok->vocab + tok->tokens[id].offset;
}

int32_t emb_tokenizer_token_to_id(const emb_tokenizer *tok, const char *text, size_t len) {
    if (!tok || (!text && len)) return -1;
    return emb_vocab_find(tok, (const uint8_t *)"", 0, (const uint8_t *)text, len);
}

static emb_status build_vocab(emb_tokenizer *tok, const uint8_t *vocab, size_t vocab_len) {
    size_t n = 1;
    for (size_t i = 0; i < vocab_len; i++) n += vocab[i] == '\n';
    if (vocab[vocab_len - 1] == '\n') n--;   /* a final newline ends the last token */
    if (vocab_len > UINT32_MAX || n > (size_t)INT32_MAX / 2 || n > SIZE_MAX / 16) return EMB_STATUS_UNSUPPORTED;
    size_t table_size = 16;
    while (table_size < 2 * n) table_size *= 2;   /* load factor <= 1/2 */

    tok->tokens = (emb_vocab_entry *)emb_alloc(n * sizeof(emb_vocab_entry));
    tok->table = (int32_t *)emb_alloc(table_size * sizeof(int32_t));
    if (!tok->tokens || !tok->table) return EMB_STATUS_OUT_OF_MEMORY;
    tok->n_tokens = n;
    tok->table_mask = (uint32_t)(table_size - 1);
    for (size_t i = 0; i < table_size; i++) tok->table[i] = -1;

    size_t start = 0;
    for (size_t id = 0; id < n; id++) {
        size_t end = start;
        while (end < vocab_len && vocab[end] != '\n') end++;
        emb_vocab_entry *e = &tok->tokens[id];
        e->offset = (uint32_t)start;
        e->len = (uint32_t)(end - start);
        if (e->len > tok->max_token_len) tok->max_token_len = e->len;
        const uint8_t *text = vocab + start;
        uint32_t slot = fnv1a(FNV_OFFSET, text, e->len) & tok->table_mask;
        for (;;) {
            int32_t other = tok->table[slot];
            if (other < 0 || entry_equals(tok, &tok->tokens[other], text, 0, text, e->len)) {
                tok->table[slot] = (int32_t)id;   /* a repeated token: the later id wins */
                break;
            }
            slot = (slot + 1) & tok->table_mask;
        }
        start = end + 1;
    }
    return EMB_STATUS_OK;
}

/* ---- init / free --------------------------------------------------------------------------- */

static int valid_id(const emb_tokenizer *tok, int32_t id) {
    return id >= 0 && (size_t)id < tok->n_tokens && tok->tokens[id].len > 0;
}

static emb_status add_token(emb_tokenizer *tok, int32_t id) {
    if (!valid_id(tok, id)) return EMB_STATUS_INVALID_ARGUMENT;
    for (size_t i = 0; i < tok->n_added; i++) {
        if (tok->added[i].id == id) return EMB_STATUS_OK;
    }
    if (tok->n_added == EMB_TOKENIZER_MAX_ADDED) return EMB_STATUS_UNSUPPORTED;
    emb_added_token t = {tok->vocab + tok->tokens[id].offset, tok->tokens[id].len, id};
    size_t i = tok->n_added++;
    while (i > 0 && tok->added[i - 1].len < t.len) {   /* keep longest first */
        tok->added[i] = tok->added[i - 1];
        i--;
    }
    tok->added[i] = t;
    tok->added_first[t.text[0]] = 1;
    return EMB_STATUS_OK;
}

static emb_status init_common(emb_tokenizer **out, const emb_tokenizer_config *cfg, const char *vocab,
                              size_t vocab_len, emb_tokenizer **tok_out) {
    if (!out) return EMB_STATUS_INVALID_ARGUMENT;
    *out = NULL;
    if (!cfg || !vocab || vocab_len == 0) return EMB_STATUS_INVALID_ARGUMENT;
    if (cfg->max_length < 2 || cfg->max_input_chars_per_word < 0) return EMB_STATUS_INVALID_ARGUMENT;
    if (cfg->max_input_chars_per_word > EMB_TOKENIZER_MAX_WORD_CHARS) return EMB_STATUS_UNSUPPORTED;

    emb_tokenizer *tok = (emb_tokenizer *)emb_alloc(sizeof(emb_tokenizer));
    if (!tok) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(tok, 0, sizeof(*tok));
    tok->cfg = *cfg;
    tok->vocab = (const uint8_t *)vocab;
    *tok_out = tok;
    emb_status st = build_vocab(tok, tok->vocab, vocab_len);
    if (st != EMB_STATUS_OK) return st;
    if (!valid_id(tok, cfg->unk_id) || !valid_id(tok, cfg->cls_id) || !valid_id(tok, cfg->sep_id) ||
        !valid_id(tok, cfg->pad_id)) {
        return EMB_STATUS_INVALID_ARGUMENT;
    }
    return EMB_STATUS_OK;
}

emb_status emb_tokenizer_init_ex(emb_tokenizer **out, const emb_tokenizer_config *cfg, const char *vocab,
                                 size_t vocab_len, const int32_t *added_ids, size_t n_added) {
    emb_tokenizer *tok = NULL;
    emb_status st = init_common(out, cfg, vocab, vocab_len, &tok);
    if (st == EMB_STATUS_OK && n_added && !added_ids) st = EMB_STATUS_INVALID_ARGUMENT;
    for (size_t i = 0; st == EMB_STATUS_OK && i < n_added; i++) st = add_token(tok, added_ids[i]);
    if (st != EMB_STATUS_OK) {
        emb_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return EMB_STATUS_OK;
}

emb_status emb_tokenizer_init(emb_tokenizer **out, const emb_tokenizer_config *cfg, const char *vocab,
                              size_t vocab_len) {
    emb_tokenizer *tok = NULL;
    emb_status st = init_common(out, cfg, vocab, vocab_len, &tok);
    if (st == EMB_STATUS_OK) {
        const int32_t ids[4] = {cfg->pad_id, cfg->unk_id, cfg->cls_id, cfg->sep_id};
        for (size_t i = 0; st == EMB_STATUS_OK && i < 4; i++) st = add_token(tok, ids[i]);
        int32_t mask = emb_vocab_find(tok, (const uint8_t *)"", 0, (const uint8_t *)"[MASK]", 6);
        if (st == EMB_STATUS_OK && mask >= 0) st = add_token(tok, mask);
    }
    if (st != EMB_STATUS_OK) {
        emb_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return EMB_STATUS_OK;
}

void emb_tokenizer_free(emb_tokenizer *tok) {
    if (!tok) return;
    emb_dealloc(tok->tokens);
    emb_dealloc(tok->table);
    emb_dealloc(tok);
}

/* ---- encode ------------------------------------------------------------------------------------ */

uint32_t emb_utf8_next(const uint8_t *s, size_t len, size_t *pos) {
    size_t i = *pos;
    uint8_t b0 = s[i++];
    if (b0 < 0x80) {
        *pos = i;
        return b0;
    }
    size_t need;
    uint32_t cp;
    uint8_t lo = 0x80, hi = 0xBF;   /* allowed range of the next byte (Unicode Table 3-7) */
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        cp = b0 & 0x1Fu;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        cp = b0 & 0x0Fu;
        if (b0 == 0xE0) lo = 0xA0;        /* no overlong forms */
        if (b0 == 0xED) hi = 0x9F;        /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        cp = b0 & 0x07u;
        if (b0 == 0xF0) lo = 0x90;        /* no overlong forms */
        if (b0 == 0xF4) hi = 0x8F;        /* nothing above U+10FFFF */
    } else {
        *pos = i;                         /* 80..C1, F5..FF: never valid */
        return 0xFFFD;
    }
    for (size_t k = 0; k < need; k++) {
        if (i >= len || s[i] < lo || s[i] > hi) {
            *pos = i;                     /* the offending byte starts the next sequence */
            return 0xFFFD;
        }
        cp = (cp << 6) | (s[i++] & 0x3Fu);
        lo = 0x80;
        hi = 0xBF;
    }
    *pos = i;
    return cp;
}

/* The longest added token at s, as tokenizers matches them (leftmost-longest, on the raw text). */
static const emb_added_token *match_added(const emb_tokenizer *tok, const uint8_t *s, size_t len) {
    for (size_t i = 0; i < tok->n_added; i++) {
        const emb_added_token *t = &tok->added[i];
        if (t->len <= len && bytes_equal(s, t->text, t->len)) return t;
    }
    return NULL;
}

static void flush_word(const emb_pre_tokens *out, emb_word *word) {
    if (word->n_chars) out->on_word(out->ctx, word);
    emb_word_reset(word);
}

void emb_tokenizer_pre_tokenize(const emb_tokenizer *tok, const uint8_t *s, size_t len, const emb_pre_tokens *out) {
    const emb_tokenizer_config *cfg = &tok->cfg;
    emb_word word;
    word.cap = (size_t)cfg->max_input_chars_per_word;
    word.order = cfg->strip_accents != 0;
    emb_word_reset(&word);

    size_t pos = 0;
    while (pos < len) {
        if (tok->added_first[s[pos]]) {
            const emb_added_token *t = match_added(tok, s + pos, len - pos);
            if (t) {
                /* The text between added tokens is normalized and split on its own. */
                flush_word(out, &word);
                out->on_added(out->ctx, t->id);
                pos += t->len;
                continue;
            }
        }
        uint32_t cp = emb_utf8_next(s, len, &pos);
        uint32_t normalized[EMB_NORMALIZER_MAX_OUT];
        size_t n = emb_normalizer_apply(cfg, cp, normalized);
        for (size_t i = 0; i < n; i++) {
            switch (emb_pre_tokenizer_kind(normalized[i])) {
            case EMB_PRE_TOKEN_KIND_WORD:
                emb_word_push(&word, normalized[i]);
                break;
            case EMB_PRE_TOKEN_KIND_SPLIT:
                flush_word(out, &word);
                break;
            case EMB_PRE_TOKEN_KIND_ISOLATE:
                flush_word(out, &word);
                emb_word_push(&word, normalized[i]);
                flush_word(out, &word);
                break;
            }
        }
    }
    flush_word(out, &word);
}

typedef struct encode_state {
    const emb_tokenizer *tok;
    emb_id_sink sink;
} encode_state;

static void encode_word(void *ctx, const emb_word *word) {
    encode_state *st = (encode_state *)ctx;
    emb_wordpiece_word(st->tok, word, &st->sink);
}

static void encode_added(void *ctx, int32_t id) { emb_id_sink_push(&((encode_state *)ctx)->sink, id); }

emb_status emb_tokenizer_encode(const emb_tokenizer *tok, const char *utf8, size_t len, int truncate,
                                int32_t *ids, size_t cap, size_t *n_ids, size_t *n_full) {
    if (!tok || !n_ids || (!utf8 && len) || (!ids && cap)) return EMB_STATUS_INVALID_ARGUMENT;
    encode_state st;
    st.tok = tok;
    emb_id_sink_init(&st.sink, ids, cap, (size_t)tok->cfg.max_length);
    const emb_pre_tokens out = {encode_word, encode_added, &st};
    emb_tokenizer_pre_tokenize(tok, (const uint8_t *)utf8, len, &out);
    return emb_post_processor_finish(&tok->cfg, &st.sink, truncate, n_ids, n_full);
}
