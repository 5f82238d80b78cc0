/*
 * pre_tokenizer.c — BertPreTokenizer: split on whitespace (removed), isolate punctuation.
 *
 * tokenizers splits with char::is_whitespace, then isolates every character that is ASCII
 * punctuation or in a Unicode punctuation category (P*). Symbols outside ASCII ('€', '©', emoji)
 * are not punctuation and stay inside words. Words are built here, one normalized character at a
 * time, with NFD's canonical ordering applied as they grow (normalizer.c explains why that is the
 * same as ordering the whole text first).
 */
#include "platform.h"
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

/* ==== Pre-tokenizer steps of the general pipeline (Unigram, BPE) ===============================
 *
 * A step maps the words of one emb_nchar array (word ends in `bounds`) to the words of another.
 * Splitting follows tokenizers' NormalizedString::split: a pattern cuts a word into alternating
 * matches and gaps, the behavior decides what to keep and what to merge, empty words vanish.
 */

static unsigned p2(uint32_t cp) { return emb_uc_props2(cp); }
static int is_letter(uint32_t cp) { return (p2(cp) & EMB_UC_P2_LETTER) != 0; }
static int is_number(uint32_t cp) { return (p2(cp) & EMB_UC_P2_NUMBER) != 0; }
static int is_ws(uint32_t cp) { return (emb_uc_flags(cp) & EMB_UC_WHITESPACE) != 0; }
static int is_other(uint32_t cp) { return !is_ws(cp) && !is_letter(cp) && !is_number(cp); }

/* ---- the regexes of byte-level tokenizers, as hand-written matchers --------------------------
 * Each returns the end of the match that Oniguruma finds at i (its alternatives tried in order,
 * each greedy with backtracking), or i when none matches there. \s is White_Space, \p{L} and
 * \p{N} are Oniguruma's (unicode_tables.h). */

static size_t run_of(const emb_nchar *c, size_t n, size_t i, int (*cls)(uint32_t)) {
    while (i < n && cls(c[i].cp)) i++;
    return i;
}

/* \s+(?!\S) then \s+ : whitespace, leaving the last one to a following non-space */
static size_t spaces_at(const emb_nchar *c, size_t n, size_t i) {
    size_t k = run_of(c, n, i, is_ws);
    if (k == i) return i;
    if (k == n || k - 1 == i) return k;
    return k - 1;
}

static size_t gpt2_at(const emb_nchar *c, size_t n, size_t i) {
    uint32_t cp = c[i].cp;
    if (cp == '\'' && i + 1 < n) {   /* 's|'t|'re|'ve|'m|'ll|'d */
        uint32_t x = c[i + 1].cp;
        if (x == 's' || x == 't' || x == 'm' || x == 'd') return i + 2;
        if (i + 2 < n) {
            uint32_t y = c[i + 2].cp;
            if ((x == 'r' && y == 'e') || (x == 'v' && y == 'e') || (x == 'l' && y == 'l')) return i + 3;
        }
    }
    size_t j = cp == ' ' && i + 1 < n ? i + 1 : i;   /*  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ */
    uint32_t first = c[j].cp;
    if (is_letter(first)) return run_of(c, n, j, is_letter);
    if (is_number(first)) return run_of(c, n, j, is_number);
    if (is_other(first)) return run_of(c, n, j, is_other);
    return spaces_at(c, n, i);
}

static int is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

static int ci_eq(uint32_t cp, char lower) {
    return cp == (uint32_t)lower || cp == (uint32_t)(lower - 32) || (lower == 's' && cp == 0x17F);
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t cl100k_at(const emb_nchar *c, size_t n, size_t i, size_t max_digits) {
    uint32_t cp = c[i].cp;
    if (cp == '\'' && i + 1 < n) {
        uint32_t x = c[i + 1].cp;
        if (ci_eq(x, 's') || ci_eq(x, 't') || ci_eq(x, 'm') || ci_eq(x, 'd')) return i + 2;
        if (i + 2 < n) {
            uint32_t y = c[i + 2].cp;
            if ((ci_eq(x, 'r') && ci_eq(y, 'e')) || (ci_eq(x, 'v') && ci_eq(y, 'e')) ||
                (ci_eq(x, 'l') && ci_eq(y, 'l'))) {
                return i + 3;
            }
        }
    }
    if (!is_crlf(cp) && !is_letter(cp) && !is_number(cp) && i + 1 < n && is_letter(c[i + 1].cp)) {
        return run_of(c, n, i + 1, is_letter);
    }
    if (is_letter(cp)) return run_of(c, n, i, is_letter);
    if (is_number(cp)) {
        size_t k = i;
        while (k < n && k - i < max_digits && is_number(c[k].cp)) k++;
        return k;
    }
    size_t j = cp == ' ' && i + 1 < n && is_other(c[i + 1].cp) ? i + 1 : i;
    if (is_other(c[j].cp)) return run_of(c, n, run_of(c, n, j, is_other), is_crlf);
    size_t k = run_of(c, n, i, is_ws);   /* \s*[\r\n]+ : up to the last \r or \n of the run */
    for (size_t p = k; p > i; p--) {
        if (is_crlf(c[p - 1].cp)) return p;
    }
    return spaces_at(c, n, i);
}

void emb_pattern_find(int32_t pattern, const uint8_t *literal, size_t literal_len, const emb_nchar *chars,
                      size_t n, void (*on_match)(void *ctx, size_t start, size_t end), void *ctx) {
    if (pattern == EMB_PATTERN_LITERAL) {
        uint32_t pat[64];
        size_t m = 0, pos = 0;
        while (pos < literal_len && m < 64) pat[m++] = emb_utf8_next(literal, literal_len, &pos);
        if (m == 0) return;
        for (size_t i = 0; i + m <= n;) {
            size_t k = 0;
            while (k < m && chars[i + k].cp == pat[k]) k++;
            if (k == m) {
                on_match(ctx, i, i + m);
                i += m;
            } else {
                i++;
            }
        }
        return;
    }
    for (size_t i = 0; i < n;) {
        size_t e;
        switch (pattern) {
        case EMB_PATTERN_GPT2: e = gpt2_at(chars, n, i); break;
        case EMB_PATTERN_CL100K: e = cl100k_at(chars, n, i, 3); break;
        case EMB_PATTERN_QWEN2: e = cl100k_at(chars, n, i, 1); break;
        default: return;
        }
        if (e > i) {
            on_match(ctx, i, e);
            i = e;
        } else {
            i++;
        }
    }
}

/* ---- splitting a word by behavior ----------------------------------------------------------- */

typedef struct piece {
    size_t start, end;
    int match;
} piece;

typedef struct split_ctx {
    emb_scratch *sc;
    piece *v;
    size_t n, cap;
    size_t last;   /* end of the last match */
    int invert;
} split_ctx;

static void piece_push(split_ctx *s, size_t start, size_t end, int match) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        piece *v = (piece *)emb_alloc(cap * sizeof(piece));
        if (!v) {
            s->sc->oom = 1;
            return;
        }
        if (s->n) emb_memcpy(v, s->v, s->n * sizeof(piece));
        emb_dealloc(s->v);
        s->v = v;
        s->cap = cap;
    }
    piece *p = &s->v[s->n++];
    p->start = start;
    p->end = end;
    p->match = s->invert ? !match : match;
}

static void on_match(void *ctx, size_t start, size_t end) {
    split_ctx *s = (split_ctx *)ctx;
    if (s->last < start) piece_push(s, s->last, start, 0);
    piece_push(s, start, end, 1);
    s->last = end;
}

static void word_end(emb_scratch *sc, emb_nchars *out, size_t **bounds, size_t *n_bounds, size_t *cap) {
    if (*n_bounds && (*bounds)[*n_bounds - 1] == out->n) return;   /* empty words vanish */
    if (out->n == 0) return;
    if (!emb_scratch_bounds(sc, bounds, cap, *n_bounds + 1)) return;
    (*bounds)[(*n_bounds)++] = out->n;
}

static void copy_chars(emb_scratch *sc, const emb_nchar *c, size_t from, size_t to, emb_nchars *out) {
    for (size_t i = from; i < to; i++) emb_nchars_push(sc, out, c[i].cp, c[i].start, c[i].end);
}

/* The pieces of one word (a list covering it) to words of out, by behavior: merged in place into
   ranges exactly as tokenizers folds them, then copied. */
static void emit_pieces(emb_scratch *sc, const emb_nchar *c, piece *p, size_t np, int behavior,
                        emb_nchars *out, size_t **bounds, size_t *n_bounds, size_t *cap) {
    size_t nr = 0;   /* ranges, written over p[0..nr) */
    int prev = 0;
    if (behavior == EMB_SPLIT_MERGED_WITH_NEXT) {
        /* fold from the back, then reverse */
        for (size_t k = np; k-- > 0;) {
            piece q = p[k];
            if (q.match && !prev && nr) {
                p[np - nr].start = q.start;
            } else {
                nr++;
                p[np - nr] = q;
            }
            prev = q.match;
        }
        for (size_t k = np - nr; k < np; k++) {
            copy_chars(sc, c, p[k].start, p[k].end, out);
            word_end(sc, out, bounds, n_bounds, cap);
        }
        return;
    }
    for (size_t k = 0; k < np; k++) {
        piece q = p[k];
        int m = q.match;
        if (behavior == EMB_SPLIT_REMOVED) {
            if (!m) p[nr++] = q;
        } else if (behavior == EMB_SPLIT_MERGED_WITH_PREVIOUS && m && !prev && nr) {
            p[nr - 1].end = q.end;
        } else if (behavior == EMB_SPLIT_CONTIGUOUS && m == prev && nr) {
            p[nr - 1].end = q.end;
        } else {
            p[nr++] = q;
        }
        prev = m;
    }
    for (size_t k = 0; k < nr; k++) {
        copy_chars(sc, c, p[k].start, p[k].end, out);
        word_end(sc, out, bounds, n_bounds, cap);
    }
}

static void split_word(const emb_pre_tokenizer_step *step, emb_scratch *sc, const emb_nchar *c, size_t n,
                       int32_t pattern, int behavior, int invert, emb_nchars *out, size_t **bounds,
                       size_t *n_bounds, size_t *cap) {
    split_ctx s = {sc, NULL, 0, 0, 0, invert};
    emb_pattern_find(pattern, step ? step->literal : NULL, step ? step->literal_len : 0, c, n, on_match, &s);
    if (s.last < n) piece_push(&s, s.last, n, 0);
    if (!sc->oom) emit_pieces(sc, c, s.v, s.n, behavior, out, bounds, n_bounds, cap);
    emb_dealloc(s.v);
}

/* ---- the steps ------------------------------------------------------------------------------ */

static void metaspace_word(const emb_pre_tokenizer_step *step, emb_scratch *sc, const emb_nchar *c, size_t n,
                           emb_nchars *out, size_t **bounds, size_t *n_bounds, size_t *cap) {
    uint32_t r = step->replacement;
    size_t base = out->n;
    int starts = c[0].cp == ' ' || c[0].cp == r;
    int prepend = step->prepend == EMB_PREPEND_ALWAYS ||
                  (step->prepend == EMB_PREPEND_FIRST && c[0].start == 0);
    if (prepend && !starts) emb_nchars_push(sc, out, r, c[0].start, c[0].end);
    for (size_t i = 0; i < n; i++) emb_nchars_push(sc, out, c[i].cp == ' ' ? r : c[i].cp, c[i].start, c[i].end);
    if (!step->split) {
        word_end(sc, out, bounds, n_bounds, cap);
        return;
    }
    /* split on the replacement, each one merged with what follows it */
    size_t end = out->n;
    for (size_t i = base + 1; i < end; i++) {
        if (out->v[i].cp == r) {
            size_t save = out->n;
            out->n = i;
            word_end(sc, out, bounds, n_bounds, cap);
            out->n = save;
        }
    }
    word_end(sc, out, bounds, n_bounds, cap);
}

/* GPT-2's byte-to-unicode alphabet: printable bytes stand for themselves, the others for 256+k. */
uint32_t emb_byte_char(uint8_t b) {
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    uint32_t k;
    if (b < '!') k = b;
    else if (b < 0xA1) k = 33 + (uint32_t)(b - 0x7F);   /* 0x7F..0xA0 */
    else k = 33 + 34;                                    /* 0xAD */
    return 256 + k;
}

static void byte_level_word(const emb_pre_tokenizer_step *step, emb_scratch *sc, const emb_nchar *c, size_t n,
                            emb_nchars *out, size_t **bounds, size_t *n_bounds, size_t *cap) {
    /* the prefix space (taking the first character's bytes, as NormalizedString::prepend does),
       then GPT-2's regex (isolated), then each character as the characters of its UTF-8 bytes */
    emb_nchars tmp = {NULL, 0, 0};
    const emb_nchar *w = c;
    size_t m = n;
    if (step->add_prefix_space && c[0].cp != ' ') {
        emb_nchars_push(sc, &tmp, ' ', c[0].start, c[0].end);
        for (size_t i = 0; i < n; i++) emb_nchars_push(sc, &tmp, c[i].cp, c[i].start, c[i].end);
        w = tmp.v;
        m = tmp.n;
    }
    split_ctx s = {sc, NULL, 0, 0, 0, 0};
    if (!sc->oom) {
        if (step->use_regex) emb_pattern_find(EMB_PATTERN_GPT2, NULL, 0, w, m, on_match, &s);
        if (s.last < m) piece_push(&s, s.last, m, 0);
    }
    for (size_t k = 0; k < s.n && !sc->oom; k++) {
        for (size_t i = s.v[k].start; i < s.v[k].end; i++) {
            uint8_t b[4];
            size_t l = emb_utf8_encode(w[i].cp, b);
            for (size_t j = 0; j < l; j++) emb_nchars_push(sc, out, emb_byte_char(b[j]), w[i].start, w[i].end);
        }
        word_end(sc, out, bounds, n_bounds, cap);
    }
    emb_dealloc(s.v);
    emb_dealloc(tmp.v);
}

void emb_pre_tokenizer_run(const emb_pre_tokenizer_step *step, emb_scratch *sc, const emb_nchars *in,
                           const size_t *bounds, size_t n_bounds, emb_nchars *out, size_t **out_bounds,
                           size_t *n_out_bounds, size_t *cap_out_bounds) {
    size_t begin = 0;
    for (size_t w = 0; w < n_bounds && !sc->oom; w++) {
        size_t end = bounds[w];
        const emb_nchar *c = in->v + begin;
        size_t n = end - begin;
        begin = end;
        if (n == 0) continue;
        switch (step->op) {
        case EMB_PRE_TOKENIZER_OP_WHITESPACE_SPLIT:
            for (size_t i = 0; i < n; i++) {
                if (is_ws(c[i].cp)) {
                    word_end(sc, out, out_bounds, n_out_bounds, cap_out_bounds);
                } else {
                    emb_nchars_push(sc, out, c[i].cp, c[i].start, c[i].end);
                }
            }
            word_end(sc, out, out_bounds, n_out_bounds, cap_out_bounds);
            break;
        case EMB_PRE_TOKENIZER_OP_METASPACE:
            metaspace_word(step, sc, c, n, out, out_bounds, n_out_bounds, cap_out_bounds);
            break;
        case EMB_PRE_TOKENIZER_OP_BYTE_LEVEL:
            byte_level_word(step, sc, c, n, out, out_bounds, n_out_bounds, cap_out_bounds);
            break;
        case EMB_PRE_TOKENIZER_OP_BERT:
            for (size_t i = 0; i < n; i++) {
                emb_pre_token_kind k = emb_pre_tokenizer_kind(c[i].cp);
                if (k != EMB_PRE_TOKEN_KIND_WORD) word_end(sc, out, out_bounds, n_out_bounds, cap_out_bounds);
                if (k != EMB_PRE_TOKEN_KIND_SPLIT) emb_nchars_push(sc, out, c[i].cp, c[i].start, c[i].end);
                if (k == EMB_PRE_TOKEN_KIND_ISOLATE) word_end(sc, out, out_bounds, n_out_bounds, cap_out_bounds);
            }
            word_end(sc, out, out_bounds, n_out_bounds, cap_out_bounds);
            break;
        case EMB_PRE_TOKENIZER_OP_SPLIT:
            split_word(step, sc, c, n, step->pattern, step->behavior, step->invert, out, out_bounds, n_out_bounds,
                       cap_out_bounds);
            break;
        default:
            copy_chars(sc, c, 0, n, out);
            word_end(sc, out, out_bounds, n_out_bounds, cap_out_bounds);
            break;
        }
    }
}
