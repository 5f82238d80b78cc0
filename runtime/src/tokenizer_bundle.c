/*
 * tokenizer_bundle.c — the tokenizer a bundle describes: reads the "tokenizer" metadata and the
 * "tokenizer.*" tables (layout: include/edgembed.h) and builds the stages from them. Kept apart
 * from tokenizer.c so that the tokenizer itself builds and is tested without the bundle reader.
 *
 * A general tokenizer (unigram, bpe) references its tables in the bundle (no copy): the
 * vocabulary, scores, merges, added-token texts, charsmaps and strings stay where they are.
 */
#include "bundle.h"
#include "platform.h"
#include "tokenizer.h"

static emb_status wordpiece_from_bundle(emb_tokenizer **out, const emb_bundle *b, int32_t vocab_size,
                                        int32_t max_length) {
    emb_status s;
    emb_tokenizer_config tc;
    int32_t clean, chinese, lower, strip;
    if ((s = emb_bundle_meta_bool(b, "tokenizer.lowercase", &lower)) ||
        (s = emb_bundle_meta_bool(b, "tokenizer.strip_accents", &strip)) ||
        (s = emb_bundle_meta_bool(b, "tokenizer.handle_chinese_chars", &chinese)) ||
        (s = emb_bundle_meta_bool(b, "tokenizer.clean_text", &clean)) ||
        (s = emb_bundle_meta_int(b, "tokenizer.unk_id", 0, vocab_size - 1, &tc.unk_id)) ||
        (s = emb_bundle_meta_int(b, "tokenizer.cls_id", 0, vocab_size - 1, &tc.cls_id)) ||
        (s = emb_bundle_meta_int(b, "tokenizer.sep_id", 0, vocab_size - 1, &tc.sep_id)) ||
        (s = emb_bundle_meta_int(b, "tokenizer.pad_id", 0, vocab_size - 1, &tc.pad_id)) ||
        (s = emb_bundle_meta_int(b, "tokenizer.max_input_chars_per_word", 1, 1 << 20, &tc.max_input_chars_per_word))) {
        return s;
    }
    tc.lowercase = lower;
    tc.strip_accents = strip;
    tc.handle_chinese_chars = chinese;
    tc.clean_text = clean;
    tc.max_length = max_length;
    const emb_tensor *vocab = emb_bundle_tensor(b, "tokenizer.vocab");
    if (!vocab || vocab->dtype != EMB_DTYPE_U8 || vocab->ndim != 1) return EMB_STATUS_CORRUPT;
    return emb_tokenizer_init(out, &tc, (const char *)vocab->data, vocab->nbytes);
}

/* ---- general tokenizers ------------------------------------------------------------------------ */

typedef struct reader {
    const emb_bundle *b;
    char key[96];
} reader;

static const char *key2(reader *r, const char *a, size_t k, const char *c) {
    /* "tokenizer.<a>.<k>.<c>" */
    size_t n = 0;
    const char *parts[3] = {"tokenizer.", a, "."};
    for (int i = 0; i < 3; i++) {
        for (const char *p = parts[i]; *p && n < sizeof r->key - 16; p++) r->key[n++] = *p;
    }
    char digits[8];
    size_t nd = 0;
    do {
        digits[nd++] = (char)('0' + k % 10);
        k /= 10;
    } while (k && nd < sizeof digits);
    while (nd) r->key[n++] = digits[--nd];
    r->key[n++] = '.';
    for (const char *p = c; *p && n < sizeof r->key - 1; p++) r->key[n++] = *p;
    r->key[n] = 0;
    return r->key;
}

static size_t cstr_len(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

static int bytes_eq(const char *a, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (a[i] != b[i]) return 0;
    }
    return 1;
}

static int meta_eq(const emb_str *v, const char *s) {
    size_t n = cstr_len(s);
    return v && v->len == n && bytes_eq(v->ptr, s, n);
}

/* One of names[] (index), or -1. */
static int meta_choice(const emb_bundle *b, const char *key, const char *const *names, int n) {
    const emb_str *v = emb_bundle_meta(b, key);
    for (int i = 0; i < n; i++) {
        if (meta_eq(v, names[i])) return i;
    }
    return -1;
}

static emb_status meta_flag(const emb_bundle *b, const char *key, int32_t *out) {
    if (!emb_bundle_meta(b, key)) {
        *out = 0;
        return EMB_STATUS_OK;
    }
    return emb_bundle_meta_bool(b, key, out);
}

/* A U8 tensor's bytes, or none (absent: empty). */
static emb_status bytes_of(const emb_bundle *b, const char *name, const uint8_t **p, size_t *n) {
    const emb_tensor *t = emb_bundle_tensor(b, name);
    *p = (const uint8_t *)"";
    *n = 0;
    if (!t) return EMB_STATUS_OK;
    if (t->dtype != EMB_DTYPE_U8 || t->ndim != 1) return EMB_STATUS_CORRUPT;
    *p = t->data;
    *n = t->nbytes;
    return EMB_STATUS_OK;
}

/* The words of a space-separated list, each looked up in names[]; -1 for an unknown one. */
static size_t word_list(const emb_str *v, const char *const *names, int n_names, int32_t *out, size_t cap, int *bad) {
    size_t n = 0, i = 0;
    *bad = 0;
    while (v && i < v->len) {
        while (i < v->len && v->ptr[i] == ' ') i++;
        size_t j = i;
        while (j < v->len && v->ptr[j] != ' ') j++;
        if (j > i) {
            int found = -1;
            for (int k = 0; k < n_names; k++) {
                if (cstr_len(names[k]) == j - i && bytes_eq(names[k], v->ptr + i, j - i)) found = k;
            }
            if (found < 0 || n == cap) *bad = 1;
            else out[n++] = found;
        }
        i = j;
    }
    return n;
}

static const char *const NORMALIZERS[EMB_NORMALIZER_OP_COUNT] = {"",          "precompiled", "nfc",     "strip",
                                                                 "replace",   "lowercase",   "prepend", "bert"};
static const char *const PRE_TOKENIZERS[EMB_PRE_TOKENIZER_OP_COUNT] = {"", "whitespace_split", "metaspace",
                                                                       "byte_level", "split", "bert"};
static const char *const PREPEND[] = {"never", "first", "always"};
static const char *const PATTERNS[] = {"literal", "gpt2", "cl100k", "qwen2"};
static const char *const BEHAVIORS[] = {"removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"};
static const char *const TRUNCATION[] = {"longest_first", "only_first", "only_second"};

static emb_status read_template(const emb_bundle *b, const char *name, int32_t (*items)[2], size_t *n) {
    const emb_tensor *t = emb_bundle_tensor(b, name);
    *n = 0;
    if (!t) return EMB_STATUS_OK;
    if (t->dtype != EMB_DTYPE_I32 || t->ndim != 2 || t->shape[1] != 2 || t->shape[0] > EMB_TEMPLATE_MAX) {
        return EMB_STATUS_CORRUPT;
    }
    const int32_t *v = (const int32_t *)t->data;
    for (int64_t i = 0; i < t->shape[0]; i++) {
        items[i][0] = v[2 * i];
        items[i][1] = v[2 * i + 1];
    }
    *n = (size_t)t->shape[0];
    return EMB_STATUS_OK;
}

static emb_status general_from_bundle(emb_tokenizer **out, const emb_bundle *b, int32_t vocab_size,
                                      int32_t max_length, int32_t type) {
    emb_status s;
    reader r = {b, {0}};
    emb_tokenizer_spec spec;
    emb_memset(&spec, 0, sizeof spec);
    spec.type = type;
    spec.max_length = max_length;

    const emb_tensor *vocab = emb_bundle_tensor(b, "tokenizer.vocab");
    const emb_tensor *offs = emb_bundle_tensor(b, "tokenizer.vocab_offsets");
    if (!vocab || vocab->dtype != EMB_DTYPE_U8 || vocab->ndim != 1) return EMB_STATUS_CORRUPT;
    if (!offs || offs->dtype != EMB_DTYPE_I32 || offs->ndim != 1 || offs->shape[0] < 2) return EMB_STATUS_CORRUPT;
    spec.vocab = vocab->data;
    spec.vocab_offsets = (const int32_t *)offs->data;
    spec.n_vocab = (size_t)offs->shape[0] - 1;
    if (spec.n_vocab > (size_t)vocab_size) return EMB_STATUS_CORRUPT;   /* every id must have an embedding */
    if ((uint64_t)spec.vocab_offsets[spec.n_vocab] > vocab->nbytes) return EMB_STATUS_CORRUPT;
    int32_t n_model;
    if ((s = emb_bundle_meta_int(b, "tokenizer.n_model", 1, (int64_t)spec.n_vocab, &n_model))) return s;
    spec.n_model = (size_t)n_model;
    spec.unk_id = -1;
    if (emb_bundle_meta(b, "tokenizer.unk_id") &&
        (s = emb_bundle_meta_int(b, "tokenizer.unk_id", 0, n_model - 1, &spec.unk_id))) {
        return s;
    }
    if ((s = meta_flag(b, "tokenizer.byte_fallback", &spec.byte_fallback)) ||
        (s = meta_flag(b, "tokenizer.fuse_unk", &spec.fuse_unk)) ||
        (s = meta_flag(b, "tokenizer.ignore_merges", &spec.ignore_merges)) ||
        (s = meta_flag(b, "tokenizer.trim_offsets", &spec.trim_offsets)) ||
        (s = meta_flag(b, "tokenizer.trim_add_prefix_space", &spec.trim_add_prefix_space))) {
        return s;
    }
    if (type == EMB_TOKENIZER_TYPE_WORDPIECE) {
        if ((s = emb_bundle_meta_int(b, "tokenizer.max_input_chars_per_word", 0, 1 << 20, &spec.max_input_chars_per_word))) {
            return s;
        }
    } else if (type == EMB_TOKENIZER_TYPE_UNIGRAM) {
        const emb_tensor *sc = emb_bundle_tensor(b, "tokenizer.scores");
        if (!sc || sc->dtype != EMB_DTYPE_F64 || sc->ndim != 1 || sc->shape[0] != n_model) return EMB_STATUS_CORRUPT;
        spec.scores = (const double *)sc->data;
    } else {
        const emb_tensor *m = emb_bundle_tensor(b, "tokenizer.merges");
        if (m) {
            if (m->dtype != EMB_DTYPE_I32 || m->ndim != 2 || m->shape[1] != 3) return EMB_STATUS_CORRUPT;
            spec.merges = (const int32_t *)m->data;
            spec.n_merges = (size_t)m->shape[0];
        }
    }
    int trunc = emb_bundle_meta(b, "tokenizer.truncation") ? meta_choice(b, "tokenizer.truncation", TRUNCATION, 3) : 0;
    if (trunc < 0) return EMB_STATUS_UNSUPPORTED;
    spec.truncation = trunc;
    const emb_str *side = emb_bundle_meta(b, "tokenizer.truncation_side");
    if (side && !meta_eq(side, "right") && !meta_eq(side, "left")) return EMB_STATUS_UNSUPPORTED;
    spec.truncate_left = meta_eq(side, "left");
    if ((s = read_template(b, "tokenizer.template.single", spec.single, &spec.n_single)) ||
        (s = read_template(b, "tokenizer.template.pair", spec.pair, &spec.n_pair))) {
        return s;
    }

    /* added tokens: (n, 4) id, flags, start, end of the text matched in tokenizer.added_text */
    const emb_tensor *added = emb_bundle_tensor(b, "tokenizer.added");
    const uint8_t *added_text;
    size_t added_len;
    if ((s = bytes_of(b, "tokenizer.added_text", &added_text, &added_len))) return s;
    emb_added_spec *adds = NULL;
    if (added) {
        if (added->dtype != EMB_DTYPE_I32 || added->ndim != 2 || added->shape[1] != 4) return EMB_STATUS_CORRUPT;
        size_t n = (size_t)added->shape[0];
        const int32_t *v = (const int32_t *)added->data;
        adds = (emb_added_spec *)emb_alloc(n * sizeof(emb_added_spec));
        if (!adds) return EMB_STATUS_OUT_OF_MEMORY;
        for (size_t i = 0; i < n; i++) {
            int32_t st = v[4 * i + 2], en = v[4 * i + 3];
            if (st < 0 || en <= st || (size_t)en > added_len) {
                emb_dealloc(adds);
                return EMB_STATUS_CORRUPT;
            }
            adds[i].id = v[4 * i];
            adds[i].flags = v[4 * i + 1];
            adds[i].text = added_text + st;
            adds[i].len = (size_t)(en - st);
        }
        spec.added = adds;
        spec.n_added = n;
    }

    /* normalizer and pre-tokenizer steps */
    int bad = 0;
    int32_t ops[EMB_TOKENIZER_MAX_STEPS];
    spec.n_normalizers = word_list(emb_bundle_meta(b, "tokenizer.normalizers"), NORMALIZERS, EMB_NORMALIZER_OP_COUNT, ops,
                                   EMB_TOKENIZER_MAX_STEPS, &bad);
    for (size_t k = 0; k < spec.n_normalizers && !bad; k++) {
        emb_normalizer_step *st = &spec.normalizers[k];
        st->op = ops[k];
        if ((s = bytes_of(b, key2(&r, "normalizers", k, "data"), &st->data, &st->data_len)) ||
            (s = bytes_of(b, key2(&r, "normalizers", k, "content"), &st->content, &st->content_len))) {
            break;
        }
        if (st->op == EMB_NORMALIZER_OP_STRIP) {
            if ((s = meta_flag(b, key2(&r, "normalizers", k, "left"), &st->a)) ||
                (s = meta_flag(b, key2(&r, "normalizers", k, "right"), &st->b))) {
                break;
            }
        } else if (st->op == EMB_NORMALIZER_OP_REPLACE) {
            const emb_str *kind = emb_bundle_meta(b, key2(&r, "normalizers", k, "pattern"));
            if (meta_eq(kind, "spaces")) st->a = EMB_REPLACE_SPACES;
            else if (meta_eq(kind, "literal") && st->data_len) st->a = EMB_REPLACE_LITERAL;
            else bad = 1;
        } else if (st->op == EMB_NORMALIZER_OP_PRECOMPILED) {
            if (!emb_charsmap_valid(st->data, st->data_len)) s = EMB_STATUS_CORRUPT;
        } else if (st->op == EMB_NORMALIZER_OP_BERT) {
            static const char *const flags[4] = {"clean_text", "handle_chinese_chars", "strip_accents", "lowercase"};
            for (int f = 0; f < 4 && s == EMB_STATUS_OK; f++) {
                int32_t on = 0;
                s = emb_bundle_meta_bool(b, key2(&r, "normalizers", k, flags[f]), &on);
                if (on) st->a |= 1 << f;   /* EMB_BERT_CLEAN_TEXT, _CHINESE, _STRIP_ACCENTS, _LOWERCASE */
            }
            if (s != EMB_STATUS_OK) break;
        }
    }
    if (s == EMB_STATUS_OK && !bad) {
        spec.n_pre_tokenizers = word_list(emb_bundle_meta(b, "tokenizer.pre_tokenizers"), PRE_TOKENIZERS, EMB_PRE_TOKENIZER_OP_COUNT, ops,
                                          EMB_TOKENIZER_MAX_STEPS, &bad);
    }
    for (size_t k = 0; k < spec.n_pre_tokenizers && !bad && s == EMB_STATUS_OK; k++) {
        emb_pre_tokenizer_step *st = &spec.pre_tokenizers[k];
        st->op = ops[k];
        if (st->op == EMB_PRE_TOKENIZER_OP_METASPACE) {
            const uint8_t *rep;
            size_t rep_len, pos = 0;
            if ((s = bytes_of(b, key2(&r, "pre_tokenizers", k, "replacement"), &rep, &rep_len))) break;
            if (rep_len == 0) {
                bad = 1;
                break;
            }
            st->replacement = emb_utf8_next(rep, rep_len, &pos);
            if (pos != rep_len) bad = 1;
            st->prepend = meta_choice(b, key2(&r, "pre_tokenizers", k, "prepend"), PREPEND, 3);
            if (st->prepend < 0) bad = 1;
            if ((s = meta_flag(b, key2(&r, "pre_tokenizers", k, "split"), &st->split))) break;
        } else if (st->op == EMB_PRE_TOKENIZER_OP_BYTE_LEVEL) {
            if ((s = meta_flag(b, key2(&r, "pre_tokenizers", k, "add_prefix_space"), &st->add_prefix_space)) ||
                (s = meta_flag(b, key2(&r, "pre_tokenizers", k, "use_regex"), &st->use_regex))) {
                break;
            }
        } else if (st->op == EMB_PRE_TOKENIZER_OP_SPLIT) {
            st->pattern = meta_choice(b, key2(&r, "pre_tokenizers", k, "pattern"), PATTERNS, 4);
            st->behavior = meta_choice(b, key2(&r, "pre_tokenizers", k, "behavior"), BEHAVIORS, 5);
            if (st->pattern < 0 || st->behavior < 0) bad = 1;
            if ((s = meta_flag(b, key2(&r, "pre_tokenizers", k, "invert"), &st->invert)) ||
                (s = bytes_of(b, key2(&r, "pre_tokenizers", k, "literal"), &st->literal, &st->literal_len))) {
                break;
            }
            if (st->pattern == EMB_PATTERN_LITERAL && st->literal_len == 0) bad = 1;
        }
    }
    if (s == EMB_STATUS_OK && bad) s = EMB_STATUS_UNSUPPORTED;
    if (s == EMB_STATUS_OK) s = emb_tokenizer_init_spec(out, &spec);
    emb_dealloc(adds);
    return s;
}

emb_status emb_tokenizer_from_bundle(emb_tokenizer **out, const emb_bundle *b, int32_t vocab_size,
                                     int32_t max_length) {
    *out = NULL;
    emb_status s;
    if (emb_bundle_meta_is(b, "tokenizer", "wordpiece") && emb_bundle_meta(b, "tokenizer.normalizers")) {
        s = general_from_bundle(out, b, vocab_size, max_length, EMB_TOKENIZER_TYPE_WORDPIECE);   /* with steps */
    } else if (emb_bundle_meta_is(b, "tokenizer", "wordpiece")) {
        s = wordpiece_from_bundle(out, b, vocab_size, max_length);
    } else if (emb_bundle_meta_is(b, "tokenizer", "unigram")) {
        s = general_from_bundle(out, b, vocab_size, max_length, EMB_TOKENIZER_TYPE_UNIGRAM);
    } else if (emb_bundle_meta_is(b, "tokenizer", "bpe")) {
        s = general_from_bundle(out, b, vocab_size, max_length, EMB_TOKENIZER_TYPE_BPE);
    } else {
        return EMB_STATUS_UNSUPPORTED;
    }
    if (s != EMB_STATUS_OK) {
        *out = NULL;
        return (s == EMB_STATUS_OUT_OF_MEMORY || s == EMB_STATUS_UNSUPPORTED) ? s : EMB_STATUS_CORRUPT;
    }
    return EMB_STATUS_OK;
}

emb_status emb_tokenizer_from_bundle_bytes(emb_tokenizer **out, const void *bytes, size_t size,
                                           int32_t vocab_size, int32_t max_length) {
    if (!out) return EMB_STATUS_INVALID_ARGUMENT;
    *out = NULL;
    emb_bundle b;
    emb_status s = emb_bundle_parse(&b, bytes, size, 1);
    if (s != EMB_STATUS_OK) return s;
    s = emb_tokenizer_from_bundle(out, &b, vocab_size, max_length);
    emb_bundle_release(&b);
    return s;
}
