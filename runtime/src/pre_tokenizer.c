/*
 * pre_tokenizer.c — BertPreTokenizer: split on whitespace (removed), isolate punctuation.
 *
 * tokenizers splits with char::is_whitespace, then isolates every character that is ASCII
 * punctuation or in a Unicode punctuation category (P*). Symbols outside ASCII ('€', '©', emoji)
 * are not punctuation and stay inside words. Words are built here, one normalized character at a
 * time, with NFD's canonical ordering applied as they grow (normalizer.c explains why that is the
 * same as ordering the whole text first).
 */
#include "tokenizer.h"
#include "unicode_tables.h"

emb_pre_token_kind emb_pre_tokenizer_kind(uint32_t cp) {
    unsigned flags = emb_uc_flags(cp);
    if (flags & EMB_UC_WHITESPACE) return EMB_PRE_TOKEN_KIND_SPLIT;
    if (flags & EMB_UC_PUNCT) return EMB_PRE_TOKEN_KIND_ISOLATE;
    return EMB_PRE_TOKEN_KIND_WORD;
}

void emb_word_reset(emb_word *w) {
    w->n_chars = 0;
    w->run_start = 0;
}

void emb_word_push(emb_word *w, uint32_t cp) {
    if (cp == EMB_NORMALIZER_RUN_BREAK) {
        w->run_start = w->n_chars;
        return;
    }
    /* A word longer than cap becomes [UNK] whatever its characters, so only its length counts. */
    if (w->n_chars >= w->cap) {
        w->n_chars++;
        return;
    }
    size_t n = w->n_chars;
    w->chars[n] = cp;
    w->n_chars = n + 1;
    if (!w->order) return;
    if (emb_uc_ccc(cp) == 0) {
        w->run_start = n + 1;
    } else {
        emb_normalizer_order(w->chars, w->run_start, n + 1);
    }
}
