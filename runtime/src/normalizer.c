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
#include "platform.h"
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

/* ==== Normalizer steps of the general pipeline (Unigram, BPE) ==================================
 *
 * Each step maps one array of emb_nchar to another. Where a character comes from is tracked as
 * tokenizers' NormalizedString tracks it: a step is a list of transformations (char, change) —
 * change 0: replaces the next input character (and takes its bytes), change 1: is inserted (and
 * takes the bytes of the input character before it), change -k: replaces the next one and
 * removes k more — applied by apply_changes. Reproducing the list exactly, quirks included,
 * is what makes the offsets identical.
 */

typedef struct change_list {
    uint32_t *cp;
    int32_t *change;
    size_t n, cap;
} change_list;

static void change_push(emb_scratch *sc, change_list *t, uint32_t cp, int32_t change) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        uint32_t *a = (uint32_t *)emb_alloc(cap * sizeof(uint32_t));
        int32_t *b = (int32_t *)emb_alloc(cap * sizeof(int32_t));
        if (!a || !b) {
            emb_dealloc(a);
            emb_dealloc(b);
            sc->oom = 1;
            return;
        }
        if (t->n) {
            emb_memcpy(a, t->cp, t->n * sizeof(uint32_t));
            emb_memcpy(b, t->change, t->n * sizeof(int32_t));
        }
        emb_dealloc(t->cp);
        emb_dealloc(t->change);
        t->cp = a;
        t->change = b;
        t->cap = cap;
    }
    t->cp[t->n] = cp;
    t->change[t->n] = change;
    t->n++;
}

static void change_free(change_list *t) {
    emb_dealloc(t->cp);
    emb_dealloc(t->change);
}

/* NormalizedString::transform_range over the whole text, skipping `initial` input characters. */
static void apply_changes(emb_scratch *sc, const emb_nchars *in, const change_list *t, size_t initial,
                          emb_nchars *out) {
    size_t pos = initial;
    for (size_t k = 0; k < t->n && !sc->oom; k++) {
        uint32_t start = 0, end = 0;
        if (t->change[k] > 0) {
            if (pos > 0 && pos - 1 < in->n) {
                start = in->v[pos - 1].start;
                end = in->v[pos - 1].end;
            }
        } else {
            if (pos < in->n) {
                start = in->v[pos].start;
                end = in->v[pos].end;
            }
            pos += 1 + (size_t)(-(int64_t)t->change[k]);
        }
        emb_nchars_push(sc, out, t->cp[k], start, end);
    }
}

/* The "replace" helper of tokenizers' precompiled.rs: new characters for old_count old ones. */
static void replace_chars(emb_scratch *sc, change_list *t, const uint8_t *repl, size_t repl_len, size_t old_count) {
    size_t first = t->n, pos = 0;
    while (pos < repl_len) change_push(sc, t, emb_utf8_next(repl, repl_len, &pos), 0);
    if (sc->oom) return;
    size_t new_count = t->n - first;
    if (new_count > old_count) {
        for (size_t k = 0; k < new_count - old_count; k++) t->change[t->n - 1 - k] = 1;
    } else if (new_count < old_count && t->n > 0) {
        t->change[t->n - 1] -= (int32_t)(old_count - new_count);   /* may be the previous character's */
    }
}

/* ---- Precompiled: SentencePiece's charsmap ---------------------------------------------------
 * The charsmap is a u32 trie size in bytes, a Darts-clone double-array trie of that size (u32
 * units) mapping UTF-8 keys to offsets into the rest: NUL-terminated UTF-8 replacements. */

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct charsmap {
    const uint8_t *units;   /* n_units little-endian u32 */
    size_t n_units;
    const uint8_t *text;    /* replacements */
    size_t text_len;
} charsmap;

static int charsmap_open(const uint8_t *data, size_t len, charsmap *cm) {
    if (len < 4) return 0;
    uint32_t trie = le32(data);
    if (trie % 4 || trie > len - 4 || trie < 4) return 0;
    cm->units = data + 4;
    cm->n_units = trie / 4;
    cm->text = data + 4 + trie;
    cm->text_len = len - 4 - trie;
    return 1;
}

int emb_charsmap_valid(const uint8_t *data, size_t len) {
    charsmap cm;
    if (!charsmap_open(data, len, &cm)) return 0;
    size_t pos = 0;   /* the replacements must be valid UTF-8, as tokenizers requires */
    while (pos < cm.text_len) {
        size_t at = pos;
        uint32_t cp = emb_utf8_next(cm.text, cm.text_len, &pos);
        if (cp == 0xFFFD && !(pos - at == 3 && cm.text[at] == 0xEF && cm.text[at + 1] == 0xBF && cm.text[at + 2] == 0xBD)) {
            return 0;
        }
    }
    return 1;
}

/* Darts-clone's common prefix search, first (shortest) result: spm_precompiled's transform(). */
static int charsmap_first(const charsmap *cm, const uint8_t *key, size_t len, const uint8_t **repl, size_t *repl_len) {
    size_t node = 0;
    uint32_t unit = le32(cm->units);
#define DA_OFFSET(u) (((u) >> 10) << (((u) & (1u << 9)) >> 6))
#define DA_LABEL(u) ((u) & ((1u << 31) | 0xFFu))
#define DA_HAS_LEAF(u) (((u) >> 8) & 1u)
#define DA_VALUE(u) ((u) & ((1u << 31) - 1u))
    node ^= DA_OFFSET(unit);
    for (size_t i = 0; i < len; i++) {
        uint8_t c = key[i];
        if (c == 0) break;
        node ^= c;
        if (node >= cm->n_units) return 0;
        unit = le32(cm->units + 4 * node);
        if (DA_LABEL(unit) != c) return 0;
        node ^= DA_OFFSET(unit);
        if (DA_HAS_LEAF(unit)) {
            if (node >= cm->n_units) return 0;
            size_t at = DA_VALUE(le32(cm->units + 4 * node));
            if (at > cm->text_len) return 0;
            size_t end = at;
            while (end < cm->text_len && cm->text[end]) end++;
            *repl = cm->text + at;
            *repl_len = end - at;
            return 1;
        }
    }
    return 0;
#undef DA_OFFSET
#undef DA_LABEL
#undef DA_HAS_LEAF
#undef DA_VALUE
}

static void run_precompiled(const emb_normalizer_step *step, emb_scratch *sc, const emb_nchars *in, emb_nchars *out) {
    charsmap cm;
    if (!charsmap_open(step->data, step->data_len, &cm)) return;   /* checked at init */
    change_list t = {NULL, NULL, 0, 0};
    size_t i = 0;
    /* As tokenizers: each extended grapheme cluster shorter than 6 bytes is looked up whole (its
       shortest prefix in the trie replaces all of it); otherwise each character on its own. */
    while (i < in->n && !sc->oom) {
        size_t j = emb_grapheme_end(in->v, in->n, i);
        uint8_t key[8];
        size_t key_len = 0;
        int small = 1;
        for (size_t k = i; k < j; k++) {
            uint8_t b[4];
            size_t l = emb_utf8_encode(in->v[k].cp, b);
            if (key_len + l >= 6) {
                small = 0;
                break;
            }
            emb_memcpy(key + key_len, b, l);
            key_len += l;
        }
        const uint8_t *repl;
        size_t repl_len;
        if (small && charsmap_first(&cm, key, key_len, &repl, &repl_len)) {
            replace_chars(sc, &t, repl, repl_len, j - i);
        } else {
            for (size_t k = i; k < j; k++) {
                size_t l = emb_utf8_encode(in->v[k].cp, key);
                if (charsmap_first(&cm, key, l, &repl, &repl_len)) {
                    replace_chars(sc, &t, repl, repl_len, 1);
                } else {
                    change_push(sc, &t, in->v[k].cp, 0);
                }
            }
        }
        i = j;
    }
    apply_changes(sc, in, &t, 0, out);
    change_free(&t);
}

/* ---- Extended grapheme clusters (UAX #29) --------------------------------------------------- */

static unsigned gcb_of(uint32_t cp) { return emb_uc_props2(cp) & EMB_UC_P2_GCB_MASK; }
static unsigned incb_of(uint32_t cp) { return (emb_uc_props2(cp) >> EMB_UC_P2_INCB_SHIFT) & 3u; }

size_t emb_grapheme_end(const emb_nchar *chars, size_t n, size_t i) {
    if (i >= n) return n;
    unsigned prev = gcb_of(chars[i].cp);
    unsigned p2 = emb_uc_props2(chars[i].cp);
    size_t ri = prev == EMB_UC_GCB_REGIONAL_INDICATOR;   /* regional indicators in a row */
    int emoji = (p2 & EMB_UC_P2_EXTPICT) != 0;            /* ExtPict Extend* so far (GB11) */
    int emoji_zwj = 0;                                    /* ... followed by ZWJ */
    int conjunct = incb_of(chars[i].cp) == EMB_UC_INCB_CONSONANT;   /* Consonant [Extend Linker]* (GB9c) */
    int linked = 0;                                       /* ... with a Linker in it */
    for (size_t k = i + 1; k < n; k++) {
        uint32_t cp = chars[k].cp;
        unsigned cur = gcb_of(cp);
        unsigned q2 = emb_uc_props2(cp);
        unsigned incb = (q2 >> EMB_UC_P2_INCB_SHIFT) & 3u;
        int join;
        if (prev == EMB_UC_GCB_CR && cur == EMB_UC_GCB_LF) join = 1;                                  /* GB3 */
        else if (prev == EMB_UC_GCB_CONTROL || prev == EMB_UC_GCB_CR || prev == EMB_UC_GCB_LF) join = 0; /* GB4 */
        else if (cur == EMB_UC_GCB_CONTROL || cur == EMB_UC_GCB_CR || cur == EMB_UC_GCB_LF) join = 0;    /* GB5 */
        else if (prev == EMB_UC_GCB_L && (cur == EMB_UC_GCB_L || cur == EMB_UC_GCB_V || cur == EMB_UC_GCB_LV ||
                                          cur == EMB_UC_GCB_LVT)) join = 1;                            /* GB6 */
        else if ((prev == EMB_UC_GCB_LV || prev == EMB_UC_GCB_V) && (cur == EMB_UC_GCB_V || cur == EMB_UC_GCB_T)) join = 1; /* GB7 */
        else if ((prev == EMB_UC_GCB_LVT || prev == EMB_UC_GCB_T) && cur == EMB_UC_GCB_T) join = 1;      /* GB8 */
        else if (cur == EMB_UC_GCB_EXTEND || cur == EMB_UC_GCB_ZWJ || cur == EMB_UC_GCB_SPACINGMARK) join = 1; /* GB9, GB9a */
        else if (prev == EMB_UC_GCB_PREPEND) join = 1;                                                /* GB9b */
        else if (conjunct && linked && incb == EMB_UC_INCB_CONSONANT) join = 1;                       /* GB9c */
        else if (emoji_zwj && (q2 & EMB_UC_P2_EXTPICT)) join = 1;                                     /* GB11 */
        else if (prev == EMB_UC_GCB_REGIONAL_INDICATOR && cur == EMB_UC_GCB_REGIONAL_INDICATOR) join = ri % 2 == 1; /* GB12, GB13 */
        else join = 0;                                                                                /* GB999 */
        if (!join) return k;
        /* the states after chars[k] */
        ri = cur == EMB_UC_GCB_REGIONAL_INDICATOR ? ri + 1 : 0;
        if (q2 & EMB_UC_P2_EXTPICT) {
            emoji = 1;
            emoji_zwj = 0;
        } else if (emoji && !emoji_zwj && cur == EMB_UC_GCB_EXTEND) {
            /* still ExtPict Extend* */
        } else if (emoji && !emoji_zwj && cur == EMB_UC_GCB_ZWJ) {
            emoji_zwj = 1;
        } else {
            emoji = emoji_zwj = 0;
        }
        if (incb == EMB_UC_INCB_CONSONANT) {
            conjunct = 1;
            linked = 0;
        } else if (conjunct && incb == EMB_UC_INCB_LINKER) {
            linked = 1;
        } else if (!(conjunct && incb == EMB_UC_INCB_EXTEND)) {
            conjunct = linked = 0;
        }
        prev = cur;
    }
    return n;
}

/* ---- NFC (unicode-normalization-alignments: Unicode 9.0 data, as NFD) ------------------------ */

static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= HANGUL_L_BASE && a < HANGUL_L_BASE + 19 && b >= HANGUL_V_BASE && b < HANGUL_V_BASE + HANGUL_V_COUNT) {
        return HANGUL_S_BASE + ((a - HANGUL_L_BASE) * HANGUL_V_COUNT + (b - HANGUL_V_BASE)) * HANGUL_T_COUNT;
    }
    if (a - HANGUL_S_BASE < (uint32_t)HANGUL_S_COUNT && (a - HANGUL_S_BASE) % HANGUL_T_COUNT == 0 &&
        b > HANGUL_T_BASE && b < HANGUL_T_BASE + HANGUL_T_COUNT) {
        return a + (b - HANGUL_T_BASE);
    }
    if (!(emb_uc_props2(b) & EMB_UC_P2_COMP2)) return 0;
    uint64_t key = (uint64_t)a << 42 | (uint64_t)b << 21;
    size_t lo = 0, hi = EMB_UC_N_COMP;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t k = emb_uc_comp[mid] & ~(uint64_t)0x1FFFFF;
        if (k < key) lo = mid + 1;
        else if (k > key) hi = mid;
        else return (uint32_t)(emb_uc_comp[mid] & 0x1FFFFF);
    }
    return 0;
}

/* NFC of the whole text: full canonical decomposition, canonical ordering, canonical composition,
   with the changes of unicode-normalization-alignments: a decomposition's first character 0,
   the others 1 (inserted); the ordering moves each character with its change; a composition
   adds the removed character's change minus one to the starter's. */
/* NFD's changes: full canonical decomposition (first character 0, the others 1), then the
   canonical ordering, each character moving with its change. */
static void decompose_changes(emb_scratch *sc, const emb_nchars *in, change_list *t) {
    for (size_t i = 0; i < in->n && !sc->oom; i++) {
        uint32_t buf[EMB_UC_NFD_MAX_LEN];
        size_t k = emb_normalizer_nfd(in->v[i].cp, buf);
        for (size_t j = 0; j < k; j++) change_push(sc, t, buf[j], j > 0);
    }
    if (sc->oom) return;
    for (size_t i = 1; i < t->n; i++) {   /* stable sort of each run of nonzero classes */
        unsigned c = emb_uc_ccc(t->cp[i]);
        if (!c) continue;
        size_t j = i;
        uint32_t x = t->cp[i];
        int32_t xc = t->change[i];
        while (j > 0 && emb_uc_ccc(t->cp[j - 1]) > c) {
            t->cp[j] = t->cp[j - 1];
            t->change[j] = t->change[j - 1];
            j--;
        }
        t->cp[j] = x;
        t->change[j] = xc;
    }
}

static void run_nfc(emb_scratch *sc, const emb_nchars *in, emb_nchars *out) {
    change_list t = {NULL, NULL, 0, 0};
    decompose_changes(sc, in, &t);
    if (sc->oom) {
        change_free(&t);
        return;
    }
    /* canonical composition, in place */
    size_t starter = (size_t)-1, w = 0;
    int last = -1;   /* class of the last character kept since the starter; -1: none */
    for (size_t i = 0; i < t.n; i++) {
        uint32_t cp = t.cp[i];
        int ccc = (int)emb_uc_ccc(cp);
        if (starter != (size_t)-1 && (last == -1 || last < ccc)) {
            uint32_t c = compose_pair(t.cp[starter], cp);
            if (c) {
                t.cp[starter] = c;
                t.change[starter] += t.change[i] - 1;
                continue;
            }
        }
        if (ccc == 0) {
            starter = w;
            last = -1;
        } else {
            last = ccc;
        }
        t.cp[w] = cp;
        t.change[w] = t.change[i];
        w++;
    }
    t.n = w;
    apply_changes(sc, in, &t, 0, out);
    change_free(&t);
}

/* ---- Strip, Replace, Lowercase, Prepend ------------------------------------------------------- */

static int ws(uint32_t cp) { return (emb_uc_flags(cp) & EMB_UC_WHITESPACE) != 0; }

static void run_strip(const emb_normalizer_step *step, emb_scratch *sc, const emb_nchars *in, emb_nchars *out) {
    size_t lead = 0, trail = 0, n = in->n;
    if (step->a) {
        while (lead < n && ws(in->v[lead].cp)) lead++;
    }
    if (step->b) {
        while (trail < n - lead && ws(in->v[n - 1 - trail].cp)) trail++;
    }
    if (!lead && !trail) {
        for (size_t i = 0; i < n; i++) emb_nchars_push(sc, out, in->v[i].cp, in->v[i].start, in->v[i].end);
        return;
    }
    change_list t = {NULL, NULL, 0, 0};
    for (size_t i = lead; i < n - trail; i++) {
        change_push(sc, &t, in->v[i].cp, i == n - trail - 1 ? -(int32_t)trail : 0);
    }
    apply_changes(sc, in, &t, lead, out);
    change_free(&t);
}

/* Replace: each match (leftmost, not overlapping) becomes the content; its characters take the
   bytes of the match's last character (tokenizers inserts them after removing the match). */
static void run_replace(const emb_normalizer_step *step, emb_scratch *sc, const emb_nchars *in, emb_nchars *out) {
    uint32_t pat[64];
    size_t n_pat = 0, pos = 0;
    if (step->a == EMB_REPLACE_LITERAL) {
        while (pos < step->data_len && n_pat < 64) pat[n_pat++] = emb_utf8_next(step->data, step->data_len, &pos);
        if (n_pat == 0) return;
    }
    size_t i = 0;
    while (i < in->n && !sc->oom) {
        size_t m = 0;
        if (step->a == EMB_REPLACE_SPACES) {
            while (i + m < in->n && in->v[i + m].cp == ' ') m++;
            if (m < 2) m = 0;
        } else if (i + n_pat <= in->n) {
            size_t k = 0;
            while (k < n_pat && in->v[i + k].cp == pat[k]) k++;
            if (k == n_pat) m = n_pat;
        }
        if (!m) {
            emb_nchars_push(sc, out, in->v[i].cp, in->v[i].start, in->v[i].end);
            i++;
            continue;
        }
        const emb_nchar *last = &in->v[i + m - 1];
        size_t cpos = 0;
        while (cpos < step->content_len) {
            emb_nchars_push(sc, out, emb_utf8_next(step->content, step->content_len, &cpos), last->start, last->end);
        }
        i += m;
    }
}

static void run_lowercase(emb_scratch *sc, const emb_nchars *in, emb_nchars *out) {
    for (size_t i = 0; i < in->n; i++) {
        uint32_t lo[EMB_UC_LOWER_MAX_LEN];
        size_t k = emb_normalizer_lower(in->v[i].cp, lo);
        /* the extra characters are inserted: they take this character's bytes too */
        for (size_t j = 0; j < k; j++) emb_nchars_push(sc, out, lo[j], in->v[i].start, in->v[i].end);
    }
}

static void run_prepend(const emb_normalizer_step *step, emb_scratch *sc, const emb_nchars *in, emb_nchars *out) {
    if (in->n == 0) return;
    size_t pos = 0;
    /* NormalizedString::prepend: the new text replaces the first character, which is re-inserted */
    while (pos < step->content_len) {
        emb_nchars_push(sc, out, emb_utf8_next(step->content, step->content_len, &pos), in->v[0].start, in->v[0].end);
    }
    for (size_t i = 0; i < in->n; i++) emb_nchars_push(sc, out, in->v[i].cp, in->v[i].start, in->v[i].end);
}

/* ---- BertNormalizer, with offsets (the general pipeline; WordPiece ids alone stream above) ---- */

/* NormalizedString::filter: a removed character goes with the kept one before it (that one's
   change is minus the number removed after it); those before the first kept one are skipped. */
static void filter_changes(emb_scratch *sc, const emb_nchars *in, unsigned drop_flag, emb_nchars *out) {
    change_list t = {NULL, NULL, 0, 0};
    size_t initial = 0, last = 0;
    int have = 0;
    int32_t removed = 0;
    for (size_t i = 0; i < in->n; i++) {
        if (!(emb_uc_flags(in->v[i].cp) & drop_flag)) {
            if (have) change_push(sc, &t, in->v[last].cp, -removed);
            else initial = (size_t)removed;
            have = 1;
            last = i;
            removed = 0;
        } else {
            removed++;
        }
    }
    if (have) change_push(sc, &t, in->v[last].cp, -removed);
    apply_changes(sc, in, &t, initial, out);
    change_free(&t);
}

static void swap_nchars(emb_nchars *a, emb_nchars *b) {
    emb_nchars t = *a;
    *a = *b;
    *b = t;
}

static void run_bert(const emb_normalizer_step *step, emb_scratch *sc, const emb_nchars *in, emb_nchars *out) {
    int flags = step->a;
    emb_nchars cur = {NULL, 0, 0}, nxt = {NULL, 0, 0};
    for (size_t i = 0; i < in->n; i++) emb_nchars_push(sc, &cur, in->v[i].cp, in->v[i].start, in->v[i].end);
    if (flags & EMB_BERT_CLEAN_TEXT) {
        filter_changes(sc, &cur, EMB_UC_DROP, &nxt);
        for (size_t i = 0; i < nxt.n; i++) {
            if (emb_uc_flags(nxt.v[i].cp) & EMB_UC_WHITESPACE) nxt.v[i].cp = ' ';
        }
        swap_nchars(&cur, &nxt);
        nxt.n = 0;
    }
    if (flags & EMB_BERT_CHINESE) {
        for (size_t i = 0; i < cur.n; i++) {
            const emb_nchar *c = &cur.v[i];
            int cjk = (emb_uc_flags(c->cp) & EMB_UC_CJK) != 0;
            if (cjk) emb_nchars_push(sc, &nxt, ' ', c->start, c->end);
            emb_nchars_push(sc, &nxt, c->cp, c->start, c->end);
            if (cjk) emb_nchars_push(sc, &nxt, ' ', c->start, c->end);
        }
        swap_nchars(&cur, &nxt);
        nxt.n = 0;
    }
    if (flags & EMB_BERT_STRIP_ACCENTS) {
        change_list t = {NULL, NULL, 0, 0};
        decompose_changes(sc, &cur, &t);
        apply_changes(sc, &cur, &t, 0, &nxt);
        change_free(&t);
        swap_nchars(&cur, &nxt);
        nxt.n = 0;
        filter_changes(sc, &cur, EMB_UC_MN, &nxt);
        swap_nchars(&cur, &nxt);
        nxt.n = 0;
    }
    if (flags & EMB_BERT_LOWERCASE) {
        run_lowercase(sc, &cur, out);
    } else {
        for (size_t i = 0; i < cur.n; i++) emb_nchars_push(sc, out, cur.v[i].cp, cur.v[i].start, cur.v[i].end);
    }
    emb_dealloc(cur.v);
    emb_dealloc(nxt.v);
}

void emb_normalizer_run(const emb_normalizer_step *step, emb_scratch *sc, const emb_nchars *in, emb_nchars *out) {
    switch (step->op) {
    case EMB_NORMALIZER_OP_PRECOMPILED: run_precompiled(step, sc, in, out); break;
    case EMB_NORMALIZER_OP_NFC: run_nfc(sc, in, out); break;
    case EMB_NORMALIZER_OP_STRIP: run_strip(step, sc, in, out); break;
    case EMB_NORMALIZER_OP_REPLACE: run_replace(step, sc, in, out); break;
    case EMB_NORMALIZER_OP_LOWERCASE: run_lowercase(sc, in, out); break;
    case EMB_NORMALIZER_OP_PREPEND: run_prepend(step, sc, in, out); break;
    case EMB_NORMALIZER_OP_BERT: run_bert(step, sc, in, out); break;
    default: break;
    }
}
