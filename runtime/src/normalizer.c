/*
 * normalizer.c — BertNormalizer, one code point at a time.
 *
 * tokenizers applies its steps to the whole text in this order, and so do we, per code point:
 *   1. clean_text: drop NUL, U+FFFD and controls (Cc/Cf/Co except \t \n \r); whitespace -> ' '
 *   2. handle_chinese_chars: a CJK ideograph c becomes ' ' c ' '
 *   3. strip_accents: NFD, then drop nonspacing marks (Mn)
 *   4. lowercase: char::to_lowercase (full mapping, no context: 'İ' -> "i̇", 'Σ' -> 'σ')
 * Every step is a function of one code point except NFD's canonical ordering, which stably sorts
 * each run of characters of nonzero combining class by class. Dropping marks after a stable sort
 * keeps the others in the order they would have had, so the Mn filter can run before the sort, with
 * one catch: a dropped mark of class 0 (a variation selector, many Indic signs) still ends a run, so
 * it leaves EMB_NORMALIZER_RUN_BREAK in its place. Lowercasing keeps combining classes (checked by
 * the table generator), so it can run before the sort too. The sort itself happens as a word is
 * built (emb_normalizer_order, called by the pre-tokenizer).
 * Character classes come from unicode_tables.h, which matches tokenizers' own Unicode data.
 */
#include "tokenizer.h"
#include "unicode_tables.h"

_Static_assert(EMB_NORMALIZER_MAX_OUT >= 3 * EMB_UC_NFD_MAX_LEN * EMB_UC_LOWER_MAX_LEN,
               "normalizer output bound");

enum {
    HANGUL_S_BASE = 0xAC00, HANGUL_L_BASE = 0x1100, HANGUL_V_BASE = 0x1161, HANGUL_T_BASE = 0x11A7,
    HANGUL_V_COUNT = 21, HANGUL_T_COUNT = 28, HANGUL_N_COUNT = HANGUL_V_COUNT * HANGUL_T_COUNT,
    HANGUL_S_COUNT = 19 * HANGUL_N_COUNT,
};

/* One-step decomposition from the sorted table; 0 when cp does not decompose. */
static size_t decompose_once(uint32_t cp, uint32_t *first, uint32_t *second) {
    size_t lo = 0, hi = EMB_UC_N_DECOMP;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t key = (uint32_t)(emb_uc_decomp[mid] >> 42);
        if (key < cp) {
            lo = mid + 1;
        } else if (key > cp) {
            hi = mid;
        } else {
            *first = (uint32_t)(emb_uc_decomp[mid] >> 21) & 0x1FFFFFu;
            *second = (uint32_t)emb_uc_decomp[mid] & 0x1FFFFFu;
            return *second ? 2 : 1;
        }
    }
    return 0;
}

/* Appends the full decomposition of cp to out[*n..]; depth-bounded (the generator checks that full
   decompositions fit EMB_UC_NFD_MAX_LEN). */
static void decompose_into(uint32_t cp, uint32_t *out, size_t *n, int depth) {
    uint32_t a, b;
    size_t k = depth < 8 ? decompose_once(cp, &a, &b) : 0;
    if (k == 0) {
        if (*n < EMB_UC_NFD_MAX_LEN) out[(*n)++] = cp;
        return;
    }
    decompose_into(a, out, n, depth + 1);
    if (k == 2) decompose_into(b, out, n, depth + 1);
}

size_t emb_normalizer_nfd(uint32_t cp, uint32_t *out) {
    if (!(emb_uc_flags(cp) & EMB_UC_HAS_DECOMP)) {
        out[0] = cp;
        return 1;
    }
    if (cp - HANGUL_S_BASE < (uint32_t)HANGUL_S_COUNT) {
        uint32_t s = cp - HANGUL_S_BASE;
        out[0] = HANGUL_L_BASE + s / HANGUL_N_COUNT;
        out[1] = HANGUL_V_BASE + (s % HANGUL_N_COUNT) / HANGUL_T_COUNT;
        if (s % HANGUL_T_COUNT == 0) return 2;
        out[2] = HANGUL_T_BASE + s % HANGUL_T_COUNT;
        return 3;
    }
    size_t n = 0;
    decompose_into(cp, out, &n, 0);
    return n;
}

size_t emb_normalizer_lower(uint32_t cp, uint32_t *out) {
    out[0] = cp;
    if (!(emb_uc_flags(cp) & EMB_UC_HAS_LOWER)) return 1;
    if (cp < 0x80) {
        out[0] = cp + 32;
        return 1;
    }
    for (size_t i = 0; i < EMB_UC_N_LOWER_MULTI; i++) {
        if (emb_uc_lower_multi[i][0] == cp) {
            size_t n = 0;
            while (n < EMB_UC_LOWER_MAX_LEN && emb_uc_lower_multi[i][1 + n]) {
                out[n] = emb_uc_lower_multi[i][1 + n];
                n++;
            }
            return n;
        }
    }
    /* the last run starting at or before cp */
    size_t lo = 0, hi = EMB_UC_N_LOWER_RUNS;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (emb_uc_lower_runs[mid].first <= cp) lo = mid + 1; else hi = mid;
    }
    if (lo > 0) {
        const emb_uc_lower_run *r = &emb_uc_lower_runs[lo - 1];
        uint32_t off = cp - r->first;
        if (off < (uint32_t)r->len * r->step && off % r->step == 0) out[0] = (uint32_t)((int32_t)cp + r->delta);
    }
    return 1;
}

size_t emb_normalizer_apply(const emb_tokenizer_config *cfg, uint32_t cp, uint32_t *out) {
    unsigned flags = emb_uc_flags(cp);
    if (cfg->clean_text) {
        if (flags & EMB_UC_DROP) return 0;
        if (flags & EMB_UC_WHITESPACE) {
            cp = ' ';
            flags = 0;
        }
    }
    uint32_t spaced[3] = {cp, 0, 0};
    size_t n_spaced = 1;
    if (cfg->handle_chinese_chars && (flags & EMB_UC_CJK)) {
        spaced[0] = ' ';
        spaced[1] = cp;
        spaced[2] = ' ';
        n_spaced = 3;
    }

    size_t n = 0;
    for (size_t i = 0; i < n_spaced; i++) {
        uint32_t decomposed[EMB_UC_NFD_MAX_LEN];
        size_t n_dec = 1;
        decomposed[0] = spaced[i];
        if (cfg->strip_accents) n_dec = emb_normalizer_nfd(spaced[i], decomposed);
        for (size_t j = 0; j < n_dec; j++) {
            uint32_t c = decomposed[j];
            if (cfg->strip_accents && (emb_uc_flags(c) & EMB_UC_MN)) {
                if (emb_uc_ccc(c) == 0) out[n++] = EMB_NORMALIZER_RUN_BREAK;
                continue;
            }
            if (cfg->lowercase) {
                n += emb_normalizer_lower(c, out + n);
            } else {
                out[n++] = c;
            }
        }
    }
    return n;
}

void emb_normalizer_order(uint32_t *chars, size_t run_start, size_t n) {
    if (n == 0) return;
    uint32_t c = chars[n - 1];
    unsigned ccc = emb_uc_ccc(c);
    size_t i = n - 1;
    while (i > run_start && emb_uc_ccc(chars[i - 1]) > ccc) {
        chars[i] = chars[i - 1];
        i--;
    }
    chars[i] = c;
}
