/*
 * tokenizer.c — the tokenizer's pipeline: vocabulary, UTF-8 decoding, added tokens, and the loop
 * that streams every code point through normalizer -> pre_tokenizer -> wordpiece -> post_processor.
 * emb_tokenizer_pre_tokenize runs the stages up to the words; encode hands each word to WordPiece.
 */
#include "tokenizer.h"
#include "platform.h"
#include "unicode_tables.h"

typedef struct emb_vocab_entry {
    uint32_t offset;     /* into the caller's vocab buffer */
    uint32_t len;        /* bytes */
} emb_vocab_entry;

typedef struct emb_added_token {
    const uint8_t *text;   /* into the caller's vocab buffer */
    size_t len;
    int32_t id;
} emb_added_token;

/* An added token of a general tokenizer, as code points (matched on decoded text). */
typedef struct emb_gadded {
    int32_t id, flags;
    const uint32_t *cps;
    size_t n;
    uint16_t lead, trail;   /* offset trimming of its text ('Ġ' or whitespace at its ends) */
} emb_gadded;

struct emb_tokenizer {
    int32_t type;                  /* emb_tokenizer_type */
    int32_t streaming;             /* WordPiece from emb_tokenizer_init[_ex]: ids alone stream */
    emb_tokenizer_config cfg;
    const uint8_t *vocab;          /* (vocab_len) caller's bytes: tokens separated by '\n' */
    emb_vocab_entry *tokens;       /* (n_tokens) id -> text (WordPiece; the others read offsets) */
    const int32_t *offsets;        /* (n_tokens + 1) the bundle's vocab_offsets (Unigram, BPE) */
    size_t n_tokens;
    int32_t *table;                /* (table_mask + 1) open addressing, linear probing: id or -1 */
    uint32_t table_mask;
    size_t max_token_len;          /* bytes of the longest token */
    emb_added_token added[EMB_TOKENIZER_MAX_ADDED];   /* longest first: the first match is the longest */
    size_t n_added;
    uint8_t added_first[256];      /* 1 where an added token starts with that byte */
    /* general tokenizers (Unigram, BPE) */
    emb_tokenizer_spec spec;
    emb_gadded *gadded;            /* (n_gadded) longest first */
    size_t n_gadded;
    uint32_t *gadded_cps;
    void *model_tables;            /* unigram.c / bpe.c */
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
                        size_t prefix_len, const uint8_t *s, size_t len);
static inline emb_vocab_entry entry_at(const emb_tokenizer *tok, int32_t id) {
    if (tok->offsets) {
        emb_vocab_entry e = {(uint32_t)tok->offsets[id], (uint32_t)(tok->offsets[id + 1] - tok->offsets[id])};
        return e;
    }
    return tok->tokens[id];
}

static int entry_equals(const emb_tokenizer *tok, const emb_vocab_entry *e, const uint8_t *prefix,
                        size_t prefix_len, const uint8_t *s, size_t len) {
    if (e->len != prefix_len + len) return 0;
    const uint8_t *text = tok->vocab + e->offset;
    return bytes_equal(text, prefix, prefix_len) && bytes_equal(text + prefix_len, s, len);
}

static int entry_equals_id(const emb_tokenizer *tok, int32_t id, const uint8_t *prefix, size_t prefix_len,
                           const uint8_t *s, size_t len) {
    emb_vocab_entry e = entry_at(tok, id);
    return entry_equals(tok, &e, prefix, prefix_len, s, len);
}

int32_t emb_vocab_find(const emb_tokenizer *tok, const uint8_t *prefix, size_t prefix_len,
                       const uint8_t *s, size_t len) {
    uint32_t slot = fnv1a(fnv1a(FNV_OFFSET, prefix, prefix_len), s, len) & tok->table_mask;
    for (;;) {
        int32_t id = tok->table[slot];
        if (id < 0) return -1;
        if (entry_equals_id(tok, id, prefix, prefix_len, s, len)) return id;
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
    emb_vocab_entry e = entry_at(tok, id);
    if (len) *len = e.len;
    return (const char *)tok->vocab + e.offset;
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
            if (other < 0 || entry_equals_id(tok, other, text, 0, text, e->len)) {
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
    return id >= 0 && (size_t)id < tok->n_tokens && entry_at(tok, id).len > 0;
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
    tok->streaming = 1;
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

static emb_status wordpiece_general_setup(emb_tokenizer *tok);

emb_status emb_tokenizer_init_ex(emb_tokenizer **out, const emb_tokenizer_config *cfg, const char *vocab,
                                 size_t vocab_len, const int32_t *added_ids, size_t n_added) {
    emb_tokenizer *tok = NULL;
    emb_status st = init_common(out, cfg, vocab, vocab_len, &tok);
    if (st == EMB_STATUS_OK && n_added && !added_ids) st = EMB_STATUS_INVALID_ARGUMENT;
    for (size_t i = 0; st == EMB_STATUS_OK && i < n_added; i++) st = add_token(tok, added_ids[i]);
    if (st == EMB_STATUS_OK) st = wordpiece_general_setup(tok);
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
        if (st == EMB_STATUS_OK) st = wordpiece_general_setup(tok);
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
    emb_model_free_tables(tok);
    emb_dealloc(tok->gadded);
    emb_dealloc(tok->gadded_cps);
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
    if (!tok->streaming) {
        return emb_tokenizer_encode_ex(tok, utf8, len, NULL, 0, truncate, ids, NULL, NULL, cap, n_ids, n_full);
    }
    encode_state st;
    st.tok = tok;
    emb_id_sink_init(&st.sink, ids, cap, (size_t)tok->cfg.max_length);
    const emb_pre_tokens out = {encode_word, encode_added, &st};
    emb_tokenizer_pre_tokenize(tok, (const uint8_t *)utf8, len, &out);
    return emb_post_processor_finish(&tok->cfg, &st.sink, truncate, n_ids, n_full);
}

/* ==== General tokenizers: SentencePiece Unigram and byte-level BPE ============================ */

emb_tokenizer_type emb_tokenizer_get_type(const emb_tokenizer *tok) { return (emb_tokenizer_type)tok->type; }
const emb_tokenizer_spec *emb_tokenizer_spec_of(const emb_tokenizer *tok) { return &tok->spec; }

size_t emb_utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | ((cp >> 18) & 0x07));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

int32_t emb_vocab_lookup(const emb_tokenizer *tok, const uint8_t *s, size_t len) {
    return emb_vocab_find(tok, (const uint8_t *)"", 0, s, len);
}

int32_t emb_vocab_find_hashed(const emb_tokenizer *tok, uint32_t hash, const uint8_t *s, size_t len) {
    uint32_t slot = hash & tok->table_mask;
    for (;;) {
        int32_t id = tok->table[slot];
        if (id < 0) return -1;
        if (entry_equals_id(tok, id, (const uint8_t *)"", 0, s, len)) return id;
        slot = (slot + 1) & tok->table_mask;
    }
}

void *emb_tokenizer_model_tables(const emb_tokenizer *tok) { return tok->model_tables; }
void emb_tokenizer_set_model_tables(emb_tokenizer *tok, void *t) { tok->model_tables = t; }
size_t emb_tokenizer_n_model(const emb_tokenizer *tok) { return tok->spec.n_model; }

const uint8_t *emb_vocab_text(const emb_tokenizer *tok, int32_t id, size_t *len) {
    if (id < 0 || (size_t)id >= tok->n_tokens) {
        *len = 0;
        return (const uint8_t *)"";
    }
    emb_vocab_entry e = entry_at(tok, id);
    *len = e.len;
    return tok->vocab + e.offset;
}

/* ---- per-call work memory ------------------------------------------------------------------ */

void emb_scratch_init(emb_scratch *sc) { emb_memset(sc, 0, sizeof(*sc)); }

void emb_scratch_free(emb_scratch *sc) {
    emb_nchars *arrays[] = {&sc->text, &sc->norm, &sc->norm2, &sc->pre, &sc->pre2};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) emb_dealloc(arrays[i]->v);
    emb_dealloc(sc->bounds);
    emb_dealloc(sc->bounds2);
    emb_dealloc(sc->bytes);
    emb_dealloc(sc->byte_char);
    emb_dealloc(sc->model);
    emb_scratch_init(sc);
}

/* Grows *p (cap elements of size elem, n in use) to hold at least need; 0 on failure. */
static int grow(void **p, size_t *cap, size_t n, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / elem) return 0;
        c *= 2;
    }
    void *q = emb_alloc(c * elem);
    if (!q) return 0;
    if (n) emb_memcpy(q, *p, n * elem);
    emb_dealloc(*p);
    *p = q;
    *cap = c;
    return 1;
}

void emb_nchars_push(emb_scratch *sc, emb_nchars *a, uint32_t cp, uint32_t start, uint32_t end) {
    if (a->n == a->cap && !grow((void **)&a->v, &a->cap, a->n, a->n + 1, sizeof(emb_nchar))) {
        sc->oom = 1;
        return;
    }
    emb_nchar *c = &a->v[a->n++];
    c->cp = cp;
    c->start = start;
    c->end = end;
}

void *emb_scratch_model(emb_scratch *sc, size_t size) {
    if (size > sc->model_size) {
        size_t cap = sc->model_size;
        void *p = sc->model;
        if (!grow(&p, &cap, 0, size, 1)) {
            sc->oom = 1;
            return NULL;
        }
        sc->model = p;
        sc->model_size = cap;
    }
    return sc->model;
}

int emb_scratch_bytes(emb_scratch *sc, size_t n) {
    if (n <= sc->cap_bytes) return 1;
    size_t cap = sc->cap_bytes, cap2 = sc->cap_bytes;
    if (!grow((void **)&sc->bytes, &cap, 0, n, 1) || !grow((void **)&sc->byte_char, &cap2, 0, n, sizeof(uint32_t))) {
        sc->oom = 1;
        return 0;
    }
    sc->cap_bytes = cap < cap2 ? cap : cap2;
    return 1;
}

int emb_scratch_bounds(emb_scratch *sc, size_t **b, size_t *cap, size_t n) {
    if (n <= *cap) return 1;
    if (!grow((void **)b, cap, n - 1, n, sizeof(size_t))) {
        sc->oom = 1;
        return 0;
    }
    return 1;
}

void emb_tokens_push(emb_tokens *t, int32_t id, uint32_t start, uint32_t end) {
    if (t->n == t->cap && !grow((void **)&t->v, &t->cap, t->n, t->n + 1, sizeof(emb_token))) {
        t->oom = 1;
        return;
    }
    emb_token *k = &t->v[t->n++];
    k->id = id;
    k->start = start;
    k->end = end;
    k->lead = 0;
    k->trail = 0;
}

/* ---- init ------------------------------------------------------------------------------------ */

int emb_is_trim_char(uint32_t cp) { return cp == 0x120 || (emb_uc_flags(cp) & EMB_UC_WHITESPACE); }
#define is_trim_char emb_is_trim_char

/* Leading / trailing trimmable characters of a UTF-8 text (a token's text for offset trimming). */
static void trim_counts(const uint8_t *s, size_t len, uint16_t *lead, uint16_t *trail) {
    size_t pos = 0, n = 0, run = 0, first = 0;
    int in_lead = 1;
    while (pos < len) {
        uint32_t cp = emb_utf8_next(s, len, &pos);
        n++;
        if (is_trim_char(cp)) {
            run++;
            if (in_lead) first++;
        } else {
            run = 0;
            in_lead = 0;
        }
    }
    *lead = (uint16_t)(first > 0xFFFF ? 0xFFFF : first);
    *trail = (uint16_t)(run > 0xFFFF ? 0xFFFF : run);
    (void)n;
}

void emb_token_trim_counts(const emb_tokenizer *tok, emb_token *t) {
    size_t len;
    const uint8_t *s = emb_vocab_text(tok, t->id, &len);
    trim_counts(s, len, &t->lead, &t->trail);
}

static emb_status build_general_vocab(emb_tokenizer *tok, const emb_tokenizer_spec *spec) {
    size_t n = spec->n_vocab;
    if (n == 0 || n > (size_t)INT32_MAX / 2 || spec->n_model > n || spec->n_model == 0) return EMB_STATUS_CORRUPT;
    if (spec->vocab_offsets[0] != 0) return EMB_STATUS_CORRUPT;
    for (size_t i = 0; i < n; i++) {
        if (spec->vocab_offsets[i + 1] < spec->vocab_offsets[i]) return EMB_STATUS_CORRUPT;
    }
    size_t table_size = 16;
    while (table_size < 2 * spec->n_model) table_size *= 2;
    tok->table = (int32_t *)emb_alloc(table_size * sizeof(int32_t));
    if (!tok->table) return EMB_STATUS_OUT_OF_MEMORY;
    tok->vocab = spec->vocab;
    tok->offsets = spec->vocab_offsets;   /* the texts are read where they are: no copy, no entries */
    tok->n_tokens = n;
    tok->table_mask = (uint32_t)(table_size - 1);
    for (size_t i = 0; i < table_size; i++) tok->table[i] = -1;
    for (size_t id = 0; id < spec->n_model; id++) {
        emb_vocab_entry e = entry_at(tok, (int32_t)id);
        if (e.len > tok->max_token_len) tok->max_token_len = e.len;
        const uint8_t *text = tok->vocab + e.offset;
        uint32_t slot = fnv1a(FNV_OFFSET, text, e.len) & tok->table_mask;
        for (;;) {
            int32_t other = tok->table[slot];
            if (other < 0) {
                tok->table[slot] = (int32_t)id;
                break;
            }
            if (entry_equals_id(tok, other, text, 0, text, e.len)) {
                tok->table[slot] = (int32_t)id;   /* a repeated token: the later id wins, as in tokenizers */
                break;
            }
            slot = (slot + 1) & tok->table_mask;
        }
    }
    return EMB_STATUS_OK;
}

static emb_status build_general_added(emb_tokenizer *tok, const emb_tokenizer_spec *spec) {
    size_t total = 0;
    for (size_t i = 0; i < spec->n_added; i++) {
        const emb_added_spec *a = &spec->added[i];
        if (a->id < 0 || (size_t)a->id >= spec->n_vocab || a->len == 0 || (!a->text && a->len)) return EMB_STATUS_CORRUPT;
        if (a->flags & EMB_ADDED_SINGLE_WORD) return EMB_STATUS_UNSUPPORTED;
        total += a->len;   /* at least as many bytes as code points */
    }
    if (!spec->n_added) return EMB_STATUS_OK;
    tok->gadded = (emb_gadded *)emb_alloc(spec->n_added * sizeof(emb_gadded));
    tok->gadded_cps = (uint32_t *)emb_alloc(total * sizeof(uint32_t));
    if (!tok->gadded || !tok->gadded_cps) return EMB_STATUS_OUT_OF_MEMORY;
    size_t used = 0;
    for (size_t i = 0; i < spec->n_added; i++) {
        const emb_added_spec *a = &spec->added[i];
        emb_gadded g;
        g.id = a->id;
        g.flags = a->flags;
        g.cps = tok->gadded_cps + used;
        g.n = 0;
        size_t pos = 0;
        while (pos < a->len) tok->gadded_cps[used + g.n++] = emb_utf8_next(a->text, a->len, &pos);
        used += g.n;
        trim_counts(a->text, a->len, &g.lead, &g.trail);
        size_t k = tok->n_gadded++;
        while (k > 0 && tok->gadded[k - 1].n < g.n) {   /* longest first: the first match is the longest */
            tok->gadded[k] = tok->gadded[k - 1];
            k--;
        }
        tok->gadded[k] = g;
    }
    return EMB_STATUS_OK;
}

/* WordPiece through the general pipeline too (for offsets and pairs): BertNormalizer and
   BertPreTokenizer as steps, [CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1, its added tokens. */
static emb_status wordpiece_general_setup(emb_tokenizer *tok) {
    emb_tokenizer_spec *spec = &tok->spec;
    const emb_tokenizer_config *cfg = &tok->cfg;
    spec->type = EMB_TOKENIZER_TYPE_WORDPIECE;
    spec->n_vocab = tok->n_tokens;
    spec->n_model = tok->n_tokens;
    spec->unk_id = cfg->unk_id;
    spec->max_length = cfg->max_length;
    spec->normalizers[0].op = EMB_NORMALIZER_OP_BERT;
    spec->normalizers[0].a = (cfg->clean_text ? EMB_BERT_CLEAN_TEXT : 0) | (cfg->handle_chinese_chars ? EMB_BERT_CHINESE : 0) |
                             (cfg->strip_accents ? EMB_BERT_STRIP_ACCENTS : 0) | (cfg->lowercase ? EMB_BERT_LOWERCASE : 0);
    spec->n_normalizers = 1;
    spec->pre_tokenizers[0].op = EMB_PRE_TOKENIZER_OP_BERT;
    spec->n_pre_tokenizers = 1;
    const int32_t single[3][2] = {{cfg->cls_id, 0}, {EMB_TEMPLATE_A, 0}, {cfg->sep_id, 0}};
    const int32_t pair[5][2] = {{cfg->cls_id, 0}, {EMB_TEMPLATE_A, 0}, {cfg->sep_id, 0}, {EMB_TEMPLATE_B, 1}, {cfg->sep_id, 1}};
    emb_memcpy(spec->single, single, sizeof single);
    emb_memcpy(spec->pair, pair, sizeof pair);
    spec->n_single = 3;
    spec->n_pair = 5;
    emb_added_spec adds[EMB_TOKENIZER_MAX_ADDED];
    for (size_t i = 0; i < tok->n_added; i++) {
        adds[i].id = tok->added[i].id;
        adds[i].flags = EMB_ADDED_SPECIAL;
        adds[i].text = tok->added[i].text;
        adds[i].len = tok->added[i].len;
    }
    spec->added = adds;
    spec->n_added = tok->n_added;
    emb_status st = build_general_added(tok, spec);
    spec->added = NULL;
    return st;
}

int32_t emb_tokenizer_max_input_chars(const emb_tokenizer *tok) { return tok->cfg.max_input_chars_per_word; }

static int valid_template(const int32_t (*items)[2], size_t n, size_t n_vocab, int pair) {
    int have_a = 0, have_b = 0;
    if (n > EMB_TEMPLATE_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        int32_t it = items[i][0];
        if (it == EMB_TEMPLATE_A) have_a++;
        else if (it == EMB_TEMPLATE_B) have_b++;
        else if (it < 0 || (size_t)it >= n_vocab) return 0;
        if (items[i][1] < 0 || items[i][1] > 255) return 0;
    }
    return have_a == 1 && have_b == (pair ? 1 : 0);
}

emb_status emb_tokenizer_init_spec(emb_tokenizer **out, const emb_tokenizer_spec *spec) {
    if (!out) return EMB_STATUS_INVALID_ARGUMENT;
    *out = NULL;
    if (!spec || !spec->vocab_offsets || (!spec->vocab && spec->n_vocab)) return EMB_STATUS_INVALID_ARGUMENT;
    if (spec->type != EMB_TOKENIZER_TYPE_UNIGRAM && spec->type != EMB_TOKENIZER_TYPE_BPE &&
        spec->type != EMB_TOKENIZER_TYPE_WORDPIECE) {
        return EMB_STATUS_UNSUPPORTED;
    }
    if (spec->type == EMB_TOKENIZER_TYPE_WORDPIECE &&
        (spec->unk_id < 0 || spec->max_input_chars_per_word < 0)) {
        return EMB_STATUS_CORRUPT;
    }
    if (spec->n_normalizers > EMB_TOKENIZER_MAX_STEPS || spec->n_pre_tokenizers > EMB_TOKENIZER_MAX_STEPS) {
        return EMB_STATUS_UNSUPPORTED;
    }
    if (!valid_template(spec->single, spec->n_single, spec->n_vocab, 0) ||
        (spec->n_pair && !valid_template(spec->pair, spec->n_pair, spec->n_vocab, 1))) {
        return EMB_STATUS_CORRUPT;
    }
    if (spec->unk_id < -1 || spec->unk_id >= (int32_t)spec->n_model) return EMB_STATUS_CORRUPT;
    if (spec->truncation < 0 || spec->truncation > EMB_TRUNCATION_ONLY_SECOND) return EMB_STATUS_CORRUPT;
    size_t n_special = 0;
    for (size_t i = 0; i < spec->n_single; i++) n_special += spec->single[i][0] >= 0;
    if (spec->max_length < (int32_t)n_special + 1) return EMB_STATUS_INVALID_ARGUMENT;

    emb_tokenizer *tok = (emb_tokenizer *)emb_alloc(sizeof(emb_tokenizer));
    if (!tok) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(tok, 0, sizeof(*tok));
    tok->type = spec->type;
    tok->spec = *spec;
    tok->spec.added = NULL;   /* copied into gadded */
    tok->cfg.max_length = spec->max_length;
    tok->cfg.unk_id = spec->unk_id;
    tok->cfg.max_input_chars_per_word = spec->max_input_chars_per_word;
    emb_status st = build_general_vocab(tok, spec);
    if (st == EMB_STATUS_OK) st = build_general_added(tok, spec);
    if (st == EMB_STATUS_OK && spec->type == EMB_TOKENIZER_TYPE_UNIGRAM) st = emb_unigram_init(tok);
    if (st == EMB_STATUS_OK && spec->type == EMB_TOKENIZER_TYPE_BPE) st = emb_bpe_init(tok);
    if (st != EMB_STATUS_OK) {
        emb_tokenizer_free(tok);
        return st;
    }
    *out = tok;
    return EMB_STATUS_OK;
}

/* ---- encode ------------------------------------------------------------------------------------ */

/* The longest added token of one kind (normalized or not) at chars[i], or NULL. */
static const emb_gadded *match_gadded(const emb_tokenizer *tok, const emb_nchar *chars, size_t n, size_t i,
                                      int normalized) {
    for (size_t k = 0; k < tok->n_gadded; k++) {
        const emb_gadded *g = &tok->gadded[k];
        if (((g->flags & EMB_ADDED_NORMALIZED) != 0) != normalized || g->n > n - i) continue;
        size_t j = 0;
        while (j < g->n && chars[i + j].cp == g->cps[j]) j++;
        if (j == g->n) return g;
    }
    return NULL;
}

static int is_space(uint32_t cp) { return (emb_uc_flags(cp) & EMB_UC_WHITESPACE) != 0; }

typedef struct general_state {
    const emb_tokenizer *tok;
    emb_scratch *sc;
    emb_tokens *out;
} general_state;

/* An added token covering chars[i..j): its id, the input bytes, and the trim counts of the
   text it matched (lstrip/rstrip whitespace included, as tokenizers keeps it in the token). */
static void emit_added(general_state *g, const emb_gadded *a, const emb_nchar *chars, size_t i, size_t j) {
    emb_tokens_push(g->out, a->id, chars[i].start, chars[j - 1].end);
    if (g->out->oom) return;
    emb_token *t = &g->out->v[g->out->n - 1];
    size_t lead = 0, trail = 0;
    while (i + lead < j && is_trim_char(chars[i + lead].cp)) lead++;
    while (trail < j - i && is_trim_char(chars[j - 1 - trail].cp)) trail++;
    t->lead = (uint16_t)(lead > 0xFFFF ? 0xFFFF : lead);
    t->trail = (uint16_t)(trail > 0xFFFF ? 0xFFFF : trail);
}

/* Calls piece(g, from, to) for the text between matches and emits the matches, tokenizers'
   AddedVocabulary::find_matches on one string (leftmost-longest; lstrip / rstrip take the
   whitespace before / after a match into it). */
static void split_added(general_state *g, const emb_nchar *chars, size_t n, int normalized,
                        void (*piece)(general_state *, const emb_nchar *, size_t, size_t)) {
    const emb_tokenizer *tok = g->tok;
    size_t from = 0, i = 0;
    while (i < n) {
        const emb_gadded *a = tok->n_gadded ? match_gadded(tok, chars, n, i, normalized) : NULL;
        if (!a) {
            i++;
            continue;
        }
        size_t start = i, stop = i + a->n;
        if (a->flags & EMB_ADDED_LSTRIP) {
            while (start > from && is_space(chars[start - 1].cp)) start--;
        }
        if (a->flags & EMB_ADDED_RSTRIP) {
            while (stop < n && is_space(chars[stop].cp)) stop++;
        }
        if (from < start) piece(g, chars, from, start);
        emit_added(g, a, chars, start, stop);
        from = i = stop;
    }
    if (from < n) piece(g, chars, from, n);
}

/* The model on each word of the pre-tokenized text. */
static void model_words(general_state *g, const emb_nchars *chars, const size_t *bounds, size_t n_bounds) {
    size_t begin = 0;
    for (size_t w = 0; w < n_bounds; w++) {
        size_t end = bounds[w];
        if (end > begin) {
            if (g->tok->type == EMB_TOKENIZER_TYPE_UNIGRAM) {
                emb_unigram_word(g->tok, g->sc, chars->v + begin, end - begin, g->out);
            } else if (g->tok->type == EMB_TOKENIZER_TYPE_WORDPIECE) {
                emb_wordpiece_word_chars(g->tok, g->sc, chars->v + begin, end - begin, g->out);
            } else {
                emb_bpe_word(g->tok, g->sc, chars->v + begin, end - begin, g->out);
            }
        }
        begin = end;
    }
}

/* A normalized piece without added tokens: pre-tokenizer steps, then the model. */
static void pre_tokenize_piece(general_state *g, const emb_nchar *chars, size_t from, size_t to) {
    emb_scratch *sc = g->sc;
    const emb_tokenizer_spec *spec = &g->tok->spec;
    sc->pre.n = 0;
    for (size_t i = from; i < to; i++) emb_nchars_push(sc, &sc->pre, chars[i].cp, chars[i].start, chars[i].end);
    if (!emb_scratch_bounds(sc, &sc->bounds, &sc->cap_bounds, 1)) return;
    sc->bounds[0] = sc->pre.n;
    sc->n_bounds = 1;
    for (size_t s = 0; s < spec->n_pre_tokenizers && !sc->oom; s++) {
        sc->pre2.n = 0;
        sc->n_bounds2 = 0;
        emb_pre_tokenizer_run(&spec->pre_tokenizers[s], sc, &sc->pre, sc->bounds, sc->n_bounds, &sc->pre2,
                              &sc->bounds2, &sc->n_bounds2, &sc->cap_bounds2);
        emb_nchars t = sc->pre;
        sc->pre = sc->pre2;
        sc->pre2 = t;
        size_t *b = sc->bounds;
        sc->bounds = sc->bounds2;
        sc->bounds2 = b;
        size_t nb = sc->n_bounds, cb = sc->cap_bounds;
        sc->n_bounds = sc->n_bounds2;
        sc->cap_bounds = sc->cap_bounds2;
        sc->n_bounds2 = nb;
        sc->cap_bounds2 = cb;
    }
    if (!sc->oom) model_words(g, &sc->pre, sc->bounds, sc->n_bounds);
}

/* Raw text between two added tokens: normalizer steps, then the normalized added tokens. */
static void normalize_piece(general_state *g, const emb_nchar *chars, size_t from, size_t to) {
    emb_scratch *sc = g->sc;
    const emb_tokenizer_spec *spec = &g->tok->spec;
    sc->norm.n = 0;
    for (size_t i = from; i < to; i++) emb_nchars_push(sc, &sc->norm, chars[i].cp, chars[i].start, chars[i].end);
    for (size_t s = 0; s < spec->n_normalizers && !sc->oom; s++) {
        sc->norm2.n = 0;
        emb_normalizer_run(&spec->normalizers[s], sc, &sc->norm, &sc->norm2);
        emb_nchars t = sc->norm;
        sc->norm = sc->norm2;
        sc->norm2 = t;
    }
    if (sc->oom || sc->norm.n == 0) return;
    /* The pieces' pre-tokenization reuses sc->pre, not sc->norm, so norm stays valid here. */
    split_added(g, sc->norm.v, sc->norm.n, 1, pre_tokenize_piece);
}

static emb_status encode_general(const emb_tokenizer *tok, emb_scratch *sc, const uint8_t *s, size_t len,
                                 emb_tokens *out) {
    if (len > UINT32_MAX) return EMB_STATUS_UNSUPPORTED;
    sc->text.n = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t at = pos;
        uint32_t cp = emb_utf8_next(s, len, &pos);
        emb_nchars_push(sc, &sc->text, cp, (uint32_t)at, (uint32_t)pos);
    }
    if (sc->oom) return EMB_STATUS_OUT_OF_MEMORY;
    general_state g = {tok, sc, out};
    split_added(&g, sc->text.v, sc->text.n, 0, normalize_piece);
    return (sc->oom || out->oom) ? EMB_STATUS_OUT_OF_MEMORY : EMB_STATUS_OK;
}

emb_status emb_tokenizer_encode_ex(const emb_tokenizer *tok, const char *a, size_t a_len, const char *b,
                                   size_t b_len, int truncate, int32_t *ids, int32_t *type_ids,
                                   uint32_t *offsets, size_t cap, size_t *n_ids, size_t *n_full) {
    if (!tok || !n_ids || (!a && a_len) || (!b && b_len) || (!ids && cap)) return EMB_STATUS_INVALID_ARGUMENT;
    *n_ids = 0;
    if (n_full) *n_full = 0;
    if (tok->streaming && !b && !type_ids && !offsets) {
        return emb_tokenizer_encode(tok, a, a_len, truncate, ids, cap, n_ids, n_full);   /* the streaming path */
    }
    emb_scratch sc;
    emb_scratch_init(&sc);
    emb_tokens ta = {NULL, 0, 0, 0}, tb = {NULL, 0, 0, 0};
    emb_status st = encode_general(tok, &sc, (const uint8_t *)a, a_len, &ta);
    if (st == EMB_STATUS_OK && b) st = encode_general(tok, &sc, (const uint8_t *)b, b_len, &tb);
    emb_scratch_free(&sc);
    if (st == EMB_STATUS_OK) {
        st = emb_post_processor_assemble(tok, a, a_len, b, b_len, &ta, b ? &tb : NULL, truncate, ids, type_ids,
                                         offsets, cap, n_ids, n_full);
    }
    emb_dealloc(ta.v);
    emb_dealloc(tb.v);
    return st;
}

/* ---- offsets in characters ------------------------------------------------------------------ */

emb_status emb_utf8_offsets_to_chars(const char *utf8, size_t len, uint32_t *offsets, size_t n, int utf16) {
    if ((!utf8 && len) || (!offsets && n)) return EMB_STATUS_INVALID_ARGUMENT;
    for (size_t i = 0; i < n; i++) {
        if (offsets[i] > len) return EMB_STATUS_INVALID_ARGUMENT;
    }
    /* one forward walk per run of non-decreasing offsets: offsets come mostly in order */
    const uint8_t *s = (const uint8_t *)utf8;
    size_t pos = 0, chars = 0;
    for (size_t i = 0; i < n; i++) {
        size_t want = offsets[i];
        if (want < pos) {
            pos = 0;
            chars = 0;
        }
        while (pos < want) {
            size_t next = pos;
            uint32_t cp = emb_utf8_next(s, len, &next);
            if (next > want) break;   /* inside this character: its start */
            pos = next;
            chars += (utf16 && cp >= 0x10000) ? 2 : 1;
        }
        offsets[i] = (uint32_t)chars;
    }
    return EMB_STATUS_OK;
}

size_t emb_tokenizer_memory(const emb_tokenizer *tok) {
    if (!tok) return 0;
    size_t total = sizeof(*tok) + (tok->tokens ? tok->n_tokens * sizeof(emb_vocab_entry) : 0) +
                   ((size_t)tok->table_mask + 1) * sizeof(int32_t);
    size_t cps = 0;
    for (size_t i = 0; i < tok->n_gadded; i++) cps += tok->gadded[i].n;
    total += tok->n_gadded * sizeof(emb_gadded) + cps * sizeof(uint32_t);
    return total + emb_model_tables_memory(tok);
}
