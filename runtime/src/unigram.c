/*
 * unigram.c — SentencePiece Unigram: the most probable segmentation of a word (Viterbi).
 *
 * As tokenizers' Unigram::encode_optimized: for each character position, every vocabulary piece
 * that starts there extends the best path ending there (score = sum of the pieces' log
 * probabilities, in double precision, the first candidate kept on ties, shorter pieces first);
 * where no piece of exactly one character starts, the character may also be unknown, scoring
 * min_score - 10. Consecutive unknown characters become one unknown piece. An unknown piece is
 * looked up as a whole, then, with byte fallback, becomes its bytes <0xNN> (when all of them
 * are in the vocabulary), else [unk].
 *
 * The pieces starting at a position are found by extending the candidate one character at a time:
 * its FNV-1a hash grows with it, a bit set of the hashes of every prefix of every piece stops the
 * walk as soon as no piece can start with it, and the vocabulary hash table confirms a piece.
 */
#include "platform.h"
#include "tokenizer.h"

typedef struct unigram_tables {
    uint64_t *prefix_bits;   /* (prefix_mask / 64 + 1) bit set of prefix hashes */
    uint32_t prefix_mask;
    double min_score;
    int32_t byte_ids[256];   /* <0xNN> pieces, -1 when absent */
    size_t max_piece;        /* bytes of the longest piece */
} unigram_tables;

static int bit(const unigram_tables *t, uint32_t h) {
    uint32_t i = h & t->prefix_mask;
    return (t->prefix_bits[i >> 6] >> (i & 63)) & 1u;
}

emb_status emb_unigram_init(emb_tokenizer *tok) {
    const emb_tokenizer_spec *spec = emb_tokenizer_spec_of(tok);
    size_t n = spec->n_model;
    if (!spec->scores) return EMB_STATUS_CORRUPT;
    if (spec->unk_id < 0) return EMB_STATUS_UNSUPPORTED;   /* tokenizers needs one to encode */
    unigram_tables *t = (unigram_tables *)emb_alloc(sizeof(unigram_tables));
    if (!t) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(t, 0, sizeof(*t));
    emb_tokenizer_set_model_tables(tok, t);
    size_t bits = 1024;
    while (bits < 16 * n) bits *= 2;
    t->prefix_bits = (uint64_t *)emb_alloc(bits / 8);
    if (!t->prefix_bits) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(t->prefix_bits, 0, bits / 8);
    t->prefix_mask = (uint32_t)(bits - 1);
    t->min_score = 0;
    for (size_t id = 0; id < n; id++) {
        double s = spec->scores[id];
        if (!(s == s)) return EMB_STATUS_CORRUPT;   /* NaN */
        if (id == 0 || s < t->min_score) t->min_score = s;
        size_t len;
        const uint8_t *p = emb_vocab_text(tok, (int32_t)id, &len);
        if (len > t->max_piece) t->max_piece = len;
        uint32_t h = EMB_FNV_OFFSET;
        for (size_t i = 0; i < len; i++) {
            h = emb_fnv1a_byte(h, p[i]);
            if (i + 1 == len || (p[i + 1] & 0xC0) != 0x80) {   /* at a character boundary */
                uint32_t k = h & t->prefix_mask;
                t->prefix_bits[k >> 6] |= (uint64_t)1 << (k & 63);
            }
        }
    }
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        uint8_t name[6] = {'<', '0', 'x', (uint8_t)hex[b >> 4], (uint8_t)hex[b & 15], '>'};
        t->byte_ids[b] = emb_vocab_lookup(tok, name, 6);
    }
    return EMB_STATUS_OK;
}

void emb_model_free_tables(emb_tokenizer *tok) {
    void *p = emb_tokenizer_model_tables(tok);
    if (!p) return;
    if (emb_tokenizer_get_type(tok) == EMB_TOKENIZER_TYPE_UNIGRAM) {
        emb_dealloc(((unigram_tables *)p)->prefix_bits);
    } else {
        emb_bpe_free_tables(p);
        return;
    }
    emb_dealloc(p);
}

typedef struct node {
    double score;
    int32_t id;
    int32_t start;   /* char index the best piece ending here starts at; -1: none yet */
} node;

static void set_trims(const emb_tokenizer *tok, emb_tokens *out, size_t first) {
    if (!emb_tokenizer_spec_of(tok)->trim_offsets) return;
    for (size_t k = first; k < out->n; k++) emb_token_trim_counts(tok, &out->v[k]);
}

void emb_unigram_word(const emb_tokenizer *tok, emb_scratch *sc, const emb_nchar *chars, size_t n, emb_tokens *out) {
    const emb_tokenizer_spec *spec = emb_tokenizer_spec_of(tok);
    const unigram_tables *t = (const unigram_tables *)emb_tokenizer_model_tables(tok);
    /* the word in UTF-8, with each character's first byte */
    size_t n_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b[4];
        n_bytes += emb_utf8_encode(chars[i].cp, b);
    }
    if (!emb_scratch_bytes(sc, n_bytes + 1)) return;
    uint8_t *bytes = sc->bytes;
    uint32_t *char_at = sc->byte_char;   /* char index -> byte offset, n + 1 entries */
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        char_at[i] = (uint32_t)pos;
        pos += emb_utf8_encode(chars[i].cp, bytes + pos);
    }
    char_at[n] = (uint32_t)pos;
    if (n > (SIZE_MAX - 16) / (sizeof(node) + 3 * sizeof(int32_t))) {
        sc->oom = 1;
        return;
    }
    node *best = (node *)emb_scratch_model(sc, (n + 1) * (sizeof(node) + 3 * sizeof(int32_t)));
    if (!best) return;
    int32_t *path = (int32_t *)(best + n + 1);   /* (n + 1) x 3: start, end, id of the pieces, backwards */
    for (size_t i = 0; i <= n; i++) {
        best[i].score = 0;
        best[i].id = 0;
        best[i].start = -1;
    }
    double unk_score = t->min_score - 10.0;
    for (size_t i = 0; i < n; i++) {
        double here = best[i].score;
        int single = 0;
        uint32_t h = EMB_FNV_OFFSET;
        size_t b0 = char_at[i];
        for (size_t j = i; j < n; j++) {
            size_t from = char_at[j], to = char_at[j + 1];
            if (to - b0 > t->max_piece) break;
            for (size_t k = from; k < to; k++) h = emb_fnv1a_byte(h, bytes[k]);
            if (!bit(t, h)) break;   /* no piece starts with bytes[b0..to) */
            int32_t id = emb_vocab_find_hashed(tok, h, bytes + b0, to - b0);
            if (id < 0) continue;
            double cand = spec->scores[id] + here;
            node *target = &best[j + 1];
            if (target->start < 0 || cand > target->score) {
                target->score = cand;
                target->start = (int32_t)i;
                target->id = id;
            }
            if (j == i) single = 1;
        }
        if (!single) {
            double cand = unk_score + here;
            node *target = &best[i + 1];
            if (target->start < 0 || cand > target->score) {
                target->score = cand;
                target->start = (int32_t)i;
                target->id = spec->unk_id;
            }
        }
    }
    /* back from the end; consecutive unknown pieces fuse */
    size_t np = 0;
    size_t end = n;
    while (end > 0) {
        const node *nd = &best[end];
        size_t start = (size_t)nd->start;
        if (nd->id == spec->unk_id && np > 0 && path[3 * (np - 1) + 2] == spec->unk_id) {
            path[3 * (np - 1)] = (int32_t)start;   /* extends the unknown piece after it */
        } else {
            path[3 * np] = (int32_t)start;
            path[3 * np + 1] = (int32_t)end;
            path[3 * np + 2] = nd->id;
            np++;
        }
        end = start;
    }
    for (size_t k = np; k-- > 0;) {
        size_t s = (size_t)path[3 * k], e = (size_t)path[3 * k + 1];
        int32_t id = path[3 * k + 2];
        uint32_t start = chars[s].start, stop = chars[e - 1].end;
        if (id != spec->unk_id) {
            size_t first = out->n;
            emb_tokens_push(out, id, start, stop);
            set_trims(tok, out, first);
            continue;
        }
        /* an unknown piece: as a whole, else its bytes, else [unk]; its text is its own */
        const uint8_t *txt = bytes + char_at[s];
        size_t len = char_at[e] - char_at[s];
        int32_t whole = emb_vocab_lookup(tok, txt, len);
        if (whole < 0 && spec->byte_fallback) {
            size_t b = 0;
            while (b < len && t->byte_ids[txt[b]] >= 0) b++;
            if (b == len) {
                for (b = 0; b < len; b++) emb_tokens_push(out, t->byte_ids[txt[b]], start, stop);
                continue;
            }
        }
        emb_tokens_push(out, whole >= 0 ? whole : spec->unk_id, start, stop);
        if (spec->trim_offsets && !out->oom) {
            emb_token *tk = &out->v[out->n - 1];
            size_t lead = 0, trail = 0;
            while (s + lead < e && emb_is_trim_char(chars[s + lead].cp)) lead++;
            while (trail < e - s && emb_is_trim_char(chars[e - 1 - trail].cp)) trail++;
            tk->lead = (uint16_t)(lead > 0xFFFF ? 0xFFFF : lead);
            tk->trail = (uint16_t)(trail > 0xFFFF ? 0xFFFF : trail);
        }
    }
}

size_t emb_model_tables_memory(const emb_tokenizer *tok) {
    const void *p = emb_tokenizer_model_tables(tok);
    if (!p) return 0;
    if (emb_tokenizer_get_type(tok) == EMB_TOKENIZER_TYPE_UNIGRAM) {
        const unigram_tables *t = (const unigram_tables *)p;
        return sizeof(*t) + ((size_t)t->prefix_mask + 1) / 8;
    }
    return emb_bpe_tables_memory(p);
}
