/*
 * wordpiece.c — WordPiece: greedy longest-match-first subwords with "##" continuations.
 *
 * As tokenizers' WordPiece: a word of more than max_input_chars_per_word characters is [UNK]; else,
 * from the word's start, take the longest prefix that is in the vocabulary, then the longest
 * "##"-prefixed continuation from where it ended, and so on; if some position has no match at all,
 * the whole word is [UNK] (the pieces found so far are dropped).
 */
#include "tokenizer.h"

static size_t utf8_encode(uint32_t cp, uint8_t *out) {
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

static int is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

void emb_wordpiece_word(const emb_tokenizer *tok, const emb_word *w, emb_id_sink *sink) {
    static const uint8_t prefix[2] = {'#', '#'};
    if (w->n_chars == 0) return;
    if (w->n_chars > w->cap) {
        emb_id_sink_push(sink, emb_tokenizer_unk_id(tok));
        return;
    }
    uint8_t bytes[EMB_TOKENIZER_MAX_WORD_CHARS * 4];   /* the word in UTF-8 (vocab keys are UTF-8) */
    size_t n_bytes = 0;
    for (size_t i = 0; i < w->n_chars; i++) n_bytes += utf8_encode(w->chars[i], bytes + n_bytes);

    int32_t pieces[EMB_TOKENIZER_MAX_WORD_CHARS];       /* each piece takes at least one character */
    size_t n_pieces = 0;
    size_t max_token = emb_vocab_max_token_len(tok);
    size_t start = 0;
    while (start < n_bytes) {
        /* No token is longer than max_token bytes, so longer candidates are skipped outright. */
        size_t end = n_bytes - start > max_token ? start + max_token : n_bytes;
        while (end > start && end < n_bytes && is_continuation(bytes[end])) end--;
        int32_t id = -1;
        while (end > start) {
            id = emb_vocab_find(tok, prefix, start ? 2 : 0, bytes + start, end - start);
            if (id >= 0) break;
            do {
                end--;
            } while (end > start && is_continuation(bytes[end]));
        }
        if (id < 0) {
            emb_id_sink_push(sink, emb_tokenizer_unk_id(tok));
            return;
        }
        pieces[n_pieces++] = id;
        start = end;
    }
    for (size_t i = 0; i < n_pieces; i++) emb_id_sink_push(sink, pieces[i]);
}

/* The same on a word of the general pipeline (offsets): each piece covers the characters it
   was matched from; an [UNK] word covers all of them. */
void emb_wordpiece_word_chars(const emb_tokenizer *tok, emb_scratch *sc, const emb_nchar *chars, size_t n, emb_tokens *out) {
    static const uint8_t prefix[2] = {'#', '#'};
    size_t max_chars = (size_t)emb_tokenizer_max_input_chars(tok);
    if (n > max_chars) {
        emb_tokens_push(out, emb_tokenizer_unk_id(tok), chars[0].start, chars[n - 1].end);
        return;
    }
    size_t n_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b[4];
        n_bytes += utf8_encode(chars[i].cp, b);
    }
    if (!emb_scratch_bytes(sc, n_bytes + 1)) return;
    uint8_t *bytes = sc->bytes;
    uint32_t *char_at = sc->byte_char;   /* char index -> first byte, n + 1 entries */
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        char_at[i] = (uint32_t)pos;
        pos += utf8_encode(chars[i].cp, bytes + pos);
    }
    char_at[n] = (uint32_t)pos;
    size_t first = out->n, start = 0;
    while (start < n) {
        size_t end = n;
        int32_t id = -1;
        while (end > start) {
            id = emb_vocab_find(tok, prefix, start ? 2 : 0, bytes + char_at[start], char_at[end] - char_at[start]);
            if (id >= 0) break;
            end--;
        }
        if (id < 0) {
            out->n = first;   /* the pieces found so far are dropped */
            emb_tokens_push(out, emb_tokenizer_unk_id(tok), chars[0].start, chars[n - 1].end);
            return;
        }
        emb_tokens_push(out, id, chars[start].start, chars[end - 1].end);
        start = end;
    }
}
