/*
 * test_tokenizer.c — unit tests of the engine's tokenizer stages, with a tiny vocabulary and, when
 * given its path, the real all-MiniLM-L6-v2 vocab.txt.
 *
 *   cc -std=c11 -Iruntime/include -Iruntime/src runtime/src/{tokenizer,normalizer,pre_tokenizer,
 *      wordpiece,post_processor,unicode_tables,platform_native}.c tests/runtime/test_tokenizer.c
 *   ./a.out [path/to/vocab.txt]     (default: $EDGEMBED_TEST_HF_DIR/vocab.txt, when set)
 * runtime/build.sh test builds it and passes the pulled model's vocab.txt. Prints "N passed,
 * N failed"; exits non-zero on any failure, including a vocabulary it was given but cannot read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "unicode_tables.h"

static int n_passed, n_failed;

#define CHECK(cond)                                                             \
    do {                                                                        \
        if (cond) {                                                             \
            n_passed++;                                                         \
        } else {                                                                \
            n_failed++;                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                       \
    } while (0)

/* ---- UTF-8 decoding ------------------------------------------------------------------------ */

/* Decodes exactly len bytes from a heap copy of that size (so a sanitizer sees any over-read). */
static size_t decode(const char *bytes, size_t len, uint32_t *out, size_t cap) {
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, bytes, len);
    size_t pos = 0, n = 0;
    while (pos < len && n < cap) out[n++] = emb_utf8_next(copy, len, &pos);
    free(copy);
    return n;
}

static int decodes_to(const char *bytes, size_t len, const uint32_t *want, size_t n_want) {
    uint32_t got[64];
    size_t n = decode(bytes, len, got, 64);
    if (n != n_want) return 0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i]) return 0;
    }
    return 1;
}

static void test_utf8(void) {
    const uint32_t F = 0xFFFD;
    { const uint32_t w[] = {'a', 0xE9, 0x20AC, 0x1F600}; CHECK(decodes_to("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 10, w, 4)); }
    { const uint32_t w[] = {0, 'x'}; CHECK(decodes_to("\0x", 2, w, 2)); }
    { const uint32_t w[] = {F}; CHECK(decodes_to("\x80", 1, w, 1)); }                   /* lone continuation */
    { const uint32_t w[] = {F, F}; CHECK(decodes_to("\xC0\xAF", 2, w, 2)); }            /* overlong lead */
    { const uint32_t w[] = {F, F, F}; CHECK(decodes_to("\xE0\x80\x80", 3, w, 3)); }     /* overlong 3-byte */
    { const uint32_t w[] = {F, F, F}; CHECK(decodes_to("\xED\xA0\x80", 3, w, 3)); }     /* surrogate */
    { const uint32_t w[] = {F, F, F, F}; CHECK(decodes_to("\xF4\x90\x80\x80", 4, w, 4)); } /* > U+10FFFF */
    { const uint32_t w[] = {F}; CHECK(decodes_to("\xF0\x90\x80", 3, w, 1)); }           /* truncated at end */
    { const uint32_t w[] = {F, 'z'}; CHECK(decodes_to("\xE2\x82z", 3, w, 2)); }         /* truncated, resumes */
    { const uint32_t w[] = {F, F, 'a'}; CHECK(decodes_to("\xF5\xFF" "a", 3, w, 3)); }
    { const uint32_t w[] = {0x10FFFF, 0xFFFF}; CHECK(decodes_to("\xF4\x8F\xBF\xBF\xEF\xBF\xBF", 7, w, 2)); }
    { const uint32_t w[] = {F, 0xE9}; CHECK(decodes_to("\xE9\xC3\xA9", 3, w, 2)); }
}

/* ---- normalizer -------------------------------------------------------------------------------- */

static const emb_tokenizer_config BERT_UNCASED = {1, 1, 1, 1, 1, 2, 3, 0, 100, 16};

static int normalizes_to(const emb_tokenizer_config *cfg, uint32_t cp, const uint32_t *want, size_t n_want) {
    uint32_t out[EMB_NORMALIZER_MAX_OUT];
    size_t n = emb_normalizer_apply(cfg, cp, out);
    if (n != n_want) return 0;
    for (size_t i = 0; i < n; i++) {
        if (out[i] != want[i]) return 0;
    }
    return 1;
}

static void test_normalizer(void) {
    emb_tokenizer_config cased = BERT_UNCASED;
    cased.lowercase = 0;
    cased.strip_accents = 0;
    emb_tokenizer_config lower_only = BERT_UNCASED;
    lower_only.strip_accents = 0;
    emb_tokenizer_config raw = {0, 0, 0, 0, 1, 2, 3, 0, 100, 16};

    CHECK(normalizes_to(&BERT_UNCASED, 0, NULL, 0));           /* NUL dropped */
    CHECK(normalizes_to(&BERT_UNCASED, 0xFFFD, NULL, 0));      /* U+FFFD dropped */
    CHECK(normalizes_to(&BERT_UNCASED, 0x200B, NULL, 0));      /* ZERO WIDTH SPACE is Cf */
    CHECK(normalizes_to(&BERT_UNCASED, 0xE000, NULL, 0));      /* private use */
    CHECK(normalizes_to(&BERT_UNCASED, 0x0890, (const uint32_t[]){0x0890}, 1));  /* Cf after Unicode 8.0: kept */
    CHECK(normalizes_to(&BERT_UNCASED, '\t', (const uint32_t[]){' '}, 1));
    CHECK(normalizes_to(&BERT_UNCASED, 0x3000, (const uint32_t[]){' '}, 1));
    CHECK(normalizes_to(&BERT_UNCASED, 0x85, NULL, 0));        /* NEL: a control before it is whitespace */
    CHECK(normalizes_to(&raw, 0, (const uint32_t[]){0}, 1));
    CHECK(normalizes_to(&raw, 0x4E2D, (const uint32_t[]){0x4E2D}, 1));
    CHECK(normalizes_to(&BERT_UNCASED, 0x4E2D, (const uint32_t[]){' ', 0x4E2D, ' '}, 3));
    CHECK(normalizes_to(&BERT_UNCASED, 0xF900, (const uint32_t[]){' ', 0x8C48, ' '}, 3));  /* compat ideograph */
    CHECK(normalizes_to(&BERT_UNCASED, 'A', (const uint32_t[]){'a'}, 1));
    CHECK(normalizes_to(&BERT_UNCASED, 0xC9, (const uint32_t[]){'e'}, 1));      /* É -> e */
    CHECK(normalizes_to(&cased, 0xC9, (const uint32_t[]){0xC9}, 1));
    CHECK(normalizes_to(&lower_only, 0xC9, (const uint32_t[]){0xE9}, 1));
    CHECK(normalizes_to(&BERT_UNCASED, 0x130, (const uint32_t[]){'i'}, 1));     /* İ: NFD, drop dot, lower */
    CHECK(normalizes_to(&lower_only, 0x130, (const uint32_t[]){'i', 0x307}, 2)); /* full lowercase mapping */
    CHECK(normalizes_to(&BERT_UNCASED, 0x1F82, (const uint32_t[]){0x3B1}, 1));  /* ᾂ: 4-char NFD */
    CHECK(normalizes_to(&BERT_UNCASED, 0xD55C, (const uint32_t[]){0x1112, 0x1161, 0x11AB}, 3)); /* 한 */
    CHECK(normalizes_to(&BERT_UNCASED, 0xAC00, (const uint32_t[]){0x1100, 0x1161}, 2));         /* 가 */
    CHECK(normalizes_to(&BERT_UNCASED, 0x3A3, (const uint32_t[]){0x3C3}, 1));   /* Σ -> σ, no final form */
    CHECK(normalizes_to(&BERT_UNCASED, 0x10D50, (const uint32_t[]){0x10D70}, 1)); /* Unicode 16 case pair */
    CHECK(normalizes_to(&BERT_UNCASED, 0x11938, (const uint32_t[]){0x11938}, 1)); /* no NFD after 9.0 */
    CHECK(normalizes_to(&BERT_UNCASED, 0x1E944, (const uint32_t[]){0x1E944}, 1)); /* Mn after 8.0: kept */
    CHECK(normalizes_to(&BERT_UNCASED, 0x37E, (const uint32_t[]){';'}, 1));     /* singleton decomposition */
    CHECK(normalizes_to(&BERT_UNCASED, 0x301, NULL, 0));                         /* Mn of class 230 */
    CHECK(normalizes_to(&BERT_UNCASED, 0xFE0A, (const uint32_t[]){EMB_NORMALIZER_RUN_BREAK}, 1)); /* Mn of class 0 */
    CHECK(normalizes_to(&lower_only, 0xFE0A, (const uint32_t[]){0xFE0A}, 1));

    uint32_t d[EMB_UC_NFD_MAX_LEN];
    CHECK(emb_normalizer_nfd('a', d) == 1 && d[0] == 'a');
    CHECK(emb_normalizer_nfd(0x1E08, d) == 3 && d[0] == 'C' && d[1] == 0x327 && d[2] == 0x301); /* Ḉ */
    uint32_t l[EMB_UC_LOWER_MAX_LEN];
    CHECK(emb_normalizer_lower(0x100, l) == 1 && l[0] == 0x101);
    CHECK(emb_normalizer_lower(0x101, l) == 1 && l[0] == 0x101);
    CHECK(emb_normalizer_lower(0x1E9E, l) == 1 && l[0] == 0xDF);  /* ẞ -> ß */
    CHECK(emb_normalizer_lower(0x110000, l) == 1 && l[0] == 0x110000);

    /* canonical ordering: a, U+0301 (230), U+0316 (220) -> a, U+0316, U+0301 */
    uint32_t run[3] = {'a', 0x301, 0x316};
    emb_normalizer_order(run, 1, 3);
    CHECK(run[0] == 'a' && run[1] == 0x316 && run[2] == 0x301);
    uint32_t same[3] = {'a', 0x301, 0x300};   /* equal classes keep their order */
    emb_normalizer_order(same, 1, 3);
    CHECK(same[1] == 0x301 && same[2] == 0x300);
}

/* ---- pre-tokenizer ----------------------------------------------------------------------------- */

static void test_pre_tokenizer(void) {
    CHECK(emb_pre_tokenizer_kind('a') == EMB_PRE_TOKEN_KIND_WORD);
    CHECK(emb_pre_tokenizer_kind(' ') == EMB_PRE_TOKEN_KIND_SPLIT);
    CHECK(emb_pre_tokenizer_kind(0x2028) == EMB_PRE_TOKEN_KIND_SPLIT);
    CHECK(emb_pre_tokenizer_kind(0x1C) == EMB_PRE_TOKEN_KIND_WORD);    /* not White_Space */
    CHECK(emb_pre_tokenizer_kind('$') == EMB_PRE_TOKEN_KIND_ISOLATE);  /* ASCII symbol counts */
    CHECK(emb_pre_tokenizer_kind(0x20AC) == EMB_PRE_TOKEN_KIND_WORD);  /* € does not */
    CHECK(emb_pre_tokenizer_kind(0x3002) == EMB_PRE_TOKEN_KIND_ISOLATE);
    CHECK(emb_pre_tokenizer_kind(0x2E43) == EMB_PRE_TOKEN_KIND_WORD);  /* Po after Unicode 8.0 */
    CHECK(emb_pre_tokenizer_kind(0x166D) == EMB_PRE_TOKEN_KIND_ISOLATE);  /* Po in Unicode 8.0 */

    emb_word w;
    w.cap = 4;
    w.order = 1;
    emb_word_reset(&w);
    emb_word_push(&w, 'a');
    emb_word_push(&w, 0x301);
    emb_word_push(&w, 0x316);
    CHECK(w.n_chars == 3 && w.chars[1] == 0x316 && w.chars[2] == 0x301);
    emb_word_push(&w, 'b');
    emb_word_push(&w, 'c');
    CHECK(w.n_chars == 5);   /* counted past cap, not stored */

    /* a removed class-0 mark ends a combining run: U+1D16D (226) stays before U+1D165 (216) */
    emb_word_reset(&w);
    emb_word_push(&w, 'z');
    emb_word_push(&w, 0x1D16D);
    emb_word_push(&w, EMB_NORMALIZER_RUN_BREAK);
    emb_word_push(&w, 0x1D165);
    CHECK(w.n_chars == 3 && w.chars[1] == 0x1D16D && w.chars[2] == 0x1D165);
    emb_word_reset(&w);
    emb_word_push(&w, 'z');
    emb_word_push(&w, 0x1D16D);
    emb_word_push(&w, 0x1D165);
    CHECK(w.n_chars == 3 && w.chars[1] == 0x1D165 && w.chars[2] == 0x1D16D);
}

/* ---- whole pipeline, tiny vocabulary ------------------------------------------------------------ */

static const char TINY_VOCAB[] =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"      /* 0..4 */
    "un\n##aff\n##able\nhello\nworld\n"         /* 5..9 */
    ",\n!\na\n##a\n##aa\n"                      /* 10..14 */
    "\xe4\xb8\xad\n\xe6\x96\x87\ncafe\n";       /* 15 中, 16 文, 17 cafe (trailing newline) */

static emb_tokenizer *tiny(int max_length, int max_chars) {
    emb_tokenizer_config cfg = {1, 1, 1, 1, 1, 2, 3, 0, max_chars, max_length};
    emb_tokenizer *tok = NULL;
    emb_status s = emb_tokenizer_init(&tok, &cfg, TINY_VOCAB, sizeof TINY_VOCAB - 1);
    CHECK(s == EMB_STATUS_OK && tok != NULL);
    return tok;
}

static int encodes_n_to(const emb_tokenizer *tok, const char *text, size_t len, const int32_t *want, size_t n_want) {
    int32_t ids[64];
    size_t n = 0, full = 0;
    emb_status s = emb_tokenizer_encode(tok, text, len, 1, ids, 64, &n, &full);
    if (s != EMB_STATUS_OK || n != n_want) return 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] != want[i]) return 0;
    }
    return 1;
}

static int encodes_to(const emb_tokenizer *tok, const char *text, const int32_t *want, size_t n_want) {
    return encodes_n_to(tok, text, strlen(text), want, n_want);
}

static void test_pipeline(void) {
    emb_tokenizer *tok = tiny(16, 100);
    if (!tok) return;
    CHECK(emb_tokenizer_vocab_size(tok) == 18);
    size_t len = 0;
    const char *t = emb_tokenizer_id_to_token(tok, 17, &len);
    CHECK(t && len == 4 && memcmp(t, "cafe", 4) == 0);
    CHECK(emb_tokenizer_id_to_token(tok, 18, &len) == NULL && len == 0);
    CHECK(emb_tokenizer_token_to_id(tok, "##aff", 5) == 6);
    CHECK(emb_tokenizer_token_to_id(tok, "##af", 4) == -1);

    CHECK(encodes_to(tok, "", (const int32_t[]){2, 3}, 2));
    CHECK(encodes_to(tok, " \t\n", (const int32_t[]){2, 3}, 2));
    CHECK(encodes_to(tok, "Unaffable", (const int32_t[]){2, 5, 6, 7, 3}, 5));
    CHECK(encodes_to(tok, "Hello, WORLD!", (const int32_t[]){2, 8, 10, 9, 11, 3}, 6));
    CHECK(encodes_to(tok, "Caf\xc3\xa9", (const int32_t[]){2, 17, 3}, 3));            /* café -> cafe */
    CHECK(encodes_to(tok, "cafe\xcc\x81", (const int32_t[]){2, 17, 3}, 3));           /* e + U+0301 */
    CHECK(encodes_to(tok, "unx", (const int32_t[]){2, 1, 3}, 3));                     /* no ##x: [UNK] */
    CHECK(encodes_to(tok, "\xe4\xb8\xad\xe6\x96\x87", (const int32_t[]){2, 15, 16, 3}, 4));  /* 中文 */
    CHECK(encodes_to(tok, "aaaaa", (const int32_t[]){2, 12, 14, 14, 3}, 5));          /* a ##aa ##aa */
    CHECK(encodes_to(tok, "hello[MASK]world", (const int32_t[]){2, 8, 4, 9, 3}, 5));  /* added token */
    CHECK(encodes_to(tok, "[mask]", (const int32_t[]){2, 1, 1, 1, 3}, 5));            /* [ mask ] */
    CHECK(encodes_n_to(tok, "hel\x00lo\xef\xbf\xbd", 8, (const int32_t[]){2, 8, 3}, 3));   /* NUL and U+FFFD dropped */
    CHECK(encodes_to(tok, "hel\xfflo", (const int32_t[]){2, 8, 3}, 3));              /* invalid byte -> U+FFFD, dropped */
    CHECK(encodes_to(tok, "\xe2\x82[MASK]", (const int32_t[]){2, 4, 3}, 3));          /* truncated sequence before a token */

    /* Truncation: 20 words -> 14 kept + [CLS] + [SEP]. */
    const char *many = "a a a a a a a a a a a a a a a a a a a a";
    int32_t ids[64];
    size_t n = 0, full = 0;
    CHECK(emb_tokenizer_encode(tok, many, strlen(many), 1, ids, 64, &n, &full) == EMB_STATUS_OK);
    CHECK(n == 16 && full == 22 && ids[0] == 2 && ids[1] == 12 && ids[14] == 12 && ids[15] == 3);
    CHECK(emb_tokenizer_encode(tok, many, strlen(many), 0, ids, 64, &n, &full) == EMB_STATUS_TOO_LONG);
    CHECK(n == 0 && full == 22);
    CHECK(emb_tokenizer_encode(tok, many, strlen(many), 1, ids, 15, &n, &full) == EMB_STATUS_BUFFER_TOO_SMALL);
    CHECK(n == 16);
    CHECK(emb_tokenizer_encode(tok, "hello", 5, 1, NULL, 0, &n, NULL) == EMB_STATUS_BUFFER_TOO_SMALL && n == 3);
    CHECK(emb_tokenizer_encode(tok, "hello", 5, 0, ids, 3, &n, NULL) == EMB_STATUS_OK && n == 3 && ids[1] == 8);
    CHECK(emb_tokenizer_encode(tok, NULL, 0, 1, ids, 3, &n, &full) == EMB_STATUS_OK && n == 2 && full == 2);
    CHECK(emb_tokenizer_encode(tok, NULL, 1, 1, ids, 3, &n, &full) == EMB_STATUS_INVALID_ARGUMENT);
    CHECK(emb_tokenizer_encode(tok, "a", 1, 1, NULL, 3, &n, &full) == EMB_STATUS_INVALID_ARGUMENT);
    CHECK(emb_tokenizer_encode(tok, "a", 1, 1, ids, 3, NULL, &full) == EMB_STATUS_INVALID_ARGUMENT);
    CHECK(emb_tokenizer_encode(NULL, "a", 1, 1, ids, 3, &n, &full) == EMB_STATUS_INVALID_ARGUMENT);
    emb_tokenizer_free(tok);

    /* max_input_chars_per_word: 5 chars pass, 6 become [UNK]. */
    tok = tiny(16, 5);
    if (!tok) return;
    CHECK(encodes_to(tok, "aaaaa", (const int32_t[]){2, 12, 14, 14, 3}, 5));
    CHECK(encodes_to(tok, "aaaaaa", (const int32_t[]){2, 1, 3}, 3));
    CHECK(encodes_to(tok, "aaaaa\xcc\x81", (const int32_t[]){2, 12, 14, 14, 3}, 5));  /* the mark is stripped first */
    emb_tokenizer_free(tok);

    /* Exact added-token list: without [MASK], "[MASK]" is ordinary text. */
    emb_tokenizer_config cfg = {1, 1, 1, 1, 1, 2, 3, 0, 100, 16};
    const int32_t added[] = {2, 3};
    CHECK(emb_tokenizer_init_ex(&tok, &cfg, TINY_VOCAB, sizeof TINY_VOCAB - 1, added, 2) == EMB_STATUS_OK);
    if (tok) {
        CHECK(encodes_to(tok, "[MASK][CLS]", (const int32_t[]){2, 1, 1, 1, 2, 3}, 6));
        emb_tokenizer_free(tok);
    }
}

static void test_init_errors(void) {
    emb_tokenizer_config cfg = {1, 1, 1, 1, 1, 2, 3, 0, 100, 16};
    emb_tokenizer *tok = (emb_tokenizer *)&cfg;
    size_t vl = sizeof TINY_VOCAB - 1;
    CHECK(emb_tokenizer_init(NULL, &cfg, TINY_VOCAB, vl) == EMB_STATUS_INVALID_ARGUMENT);
    CHECK(emb_tokenizer_init(&tok, NULL, TINY_VOCAB, vl) == EMB_STATUS_INVALID_ARGUMENT && tok == NULL);
    CHECK(emb_tokenizer_init(&tok, &cfg, TINY_VOCAB, 0) == EMB_STATUS_INVALID_ARGUMENT);
    CHECK(emb_tokenizer_init(&tok, &cfg, NULL, vl) == EMB_STATUS_INVALID_ARGUMENT);
    emb_tokenizer_config bad = cfg;
    bad.unk_id = 18;
    CHECK(emb_tokenizer_init(&tok, &bad, TINY_VOCAB, vl) == EMB_STATUS_INVALID_ARGUMENT && tok == NULL);
    bad = cfg;
    bad.cls_id = -1;
    CHECK(emb_tokenizer_init(&tok, &bad, TINY_VOCAB, vl) == EMB_STATUS_INVALID_ARGUMENT);
    bad = cfg;
    bad.max_length = 1;
    CHECK(emb_tokenizer_init(&tok, &bad, TINY_VOCAB, vl) == EMB_STATUS_INVALID_ARGUMENT);
    bad = cfg;
    bad.max_input_chars_per_word = EMB_TOKENIZER_MAX_WORD_CHARS + 1;
    CHECK(emb_tokenizer_init(&tok, &bad, TINY_VOCAB, vl) == EMB_STATUS_UNSUPPORTED);
    const int32_t added[] = {17, 99};
    CHECK(emb_tokenizer_init_ex(&tok, &cfg, TINY_VOCAB, vl, added, 2) == EMB_STATUS_INVALID_ARGUMENT && tok == NULL);
    CHECK(emb_tokenizer_init_ex(&tok, &cfg, TINY_VOCAB, vl, NULL, 1) == EMB_STATUS_INVALID_ARGUMENT);
    /* an empty line can be a token, but not a special one */
    const char holes[] = "a\n\nb\nc";
    emb_tokenizer_config hc = {1, 1, 1, 1, 0, 2, 3, 0, 100, 16};
    CHECK(emb_tokenizer_init(&tok, &hc, holes, sizeof holes - 1) == EMB_STATUS_OK);
    if (tok) {
        CHECK(emb_tokenizer_vocab_size(tok) == 4);
        emb_tokenizer_free(tok);
    }
    hc.cls_id = 1;
    CHECK(emb_tokenizer_init(&tok, &hc, holes, sizeof holes - 1) == EMB_STATUS_INVALID_ARGUMENT);
    /* repeated token: the later id wins */
    const char dup[] = "x\ny\nx";
    emb_tokenizer_config dc = {1, 1, 1, 1, 0, 1, 1, 0, 100, 16};
    CHECK(emb_tokenizer_init(&tok, &dc, dup, sizeof dup - 1) == EMB_STATUS_OK);
    if (tok) {
        CHECK(emb_tokenizer_token_to_id(tok, "x", 1) == 2);
        emb_tokenizer_free(tok);
    }
    emb_tokenizer_free(NULL);
}

/* ---- the real vocabulary ---------------------------------------------------------------------- */

static void test_minilm(const char *path) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);  /* asked for these checks: a vocabulary that cannot be read fails them */
    if (!f) {
        fprintf(stderr, "the all-MiniLM-L6-v2 checks cannot run: cannot open %s\n", path);
        return;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *vocab = malloc((size_t)size);
    size_t got = fread(vocab, 1, (size_t)size, f);
    fclose(f);
    emb_tokenizer_config cfg = {1, 1, 1, 1, 100, 101, 102, 0, 100, 256};
    emb_tokenizer *tok = NULL;
    CHECK(emb_tokenizer_init(&tok, &cfg, vocab, got) == EMB_STATUS_OK);
    if (tok) {
        CHECK(emb_tokenizer_vocab_size(tok) == 30522);
        /* ids from tokenizers 0.23.3 with the model's tokenizer.json */
        CHECK(encodes_to(tok, "Hello, world!", (const int32_t[]){101, 7592, 1010, 2088, 999, 102}, 6));
        CHECK(encodes_to(tok, "hello [MASK] world", (const int32_t[]){101, 7592, 103, 2088, 102}, 5));
        CHECK(encodes_to(tok, "[unused0] [UNK]", (const int32_t[]){101, 1031, 15171, 2692, 1033, 100, 102}, 7));
        CHECK(encodes_to(tok, "\xc4\xb0stanbul", (const int32_t[]){101, 9960, 102}, 3));
        CHECK(encodes_to(tok, "H\xc3\xa9llo w\xc3\xb6rld", (const int32_t[]){101, 7592, 2088, 102}, 4));
        emb_tokenizer_free(tok);
    }
    free(vocab);
}

/* A tiny Unigram and a tiny byte-level BPE built from their specs: pieces, unknowns, byte
   fallback, merges by rank, added tokens with lstrip, templates, truncation, offsets. */
static void test_general(void) {
    static const char uvocab[] = "<unk>" "<s>" "</s>" "\xe2\x96\x81" "\xe2\x96\x81" "ab" "\xe2\x96\x81" "a" "b" "c" "<0x7A>";
    /* ids: 0 <unk>, 1 <s>, 2 </s>, 3 ▁, 4 ▁ab, 5 ▁a, 6 b, 7 c, 8 <0x7A> */
    static const int32_t uoff[] = {0, 5, 8, 12, 15, 20, 24, 25, 26, 32};
    static const double scores[] = {0, 0, 0, -3, -1, -2, -2, -2, -9};
    emb_tokenizer_spec sp;
    memset(&sp, 0, sizeof sp);
    sp.type = EMB_TOKENIZER_TYPE_UNIGRAM;
    sp.vocab = (const uint8_t *)uvocab;
    sp.vocab_offsets = uoff;
    sp.n_vocab = sp.n_model = 9;
    sp.scores = scores;
    sp.unk_id = 0;
    sp.byte_fallback = 1;
    sp.pre_tokenizers[0].op = EMB_PRE_TOKENIZER_OP_METASPACE;
    sp.pre_tokenizers[0].replacement = 0x2581;
    sp.pre_tokenizers[0].prepend = EMB_PREPEND_ALWAYS;
    sp.pre_tokenizers[0].split = 1;
    sp.n_pre_tokenizers = 1;
    const int32_t single[3][2] = {{1, 0}, {EMB_TEMPLATE_A, 0}, {2, 0}};
    memcpy(sp.single, single, sizeof single);
    sp.n_single = 3;
    sp.max_length = 6;
    emb_tokenizer *tok = NULL;
    CHECK(emb_tokenizer_init_spec(&tok, &sp) == EMB_STATUS_OK);
    int32_t ids[16];
    uint32_t offs[32];
    size_t n = 0, full = 0;
    /* "ab cz": ▁ab (best: -1 beats ▁a + b), ▁ + c, z unknown -> byte fallback <0x7A> */
    CHECK(emb_tokenizer_encode_ex(tok, "ab cz", 5, NULL, 0, 1, ids, NULL, offs, 16, &n, &full) == EMB_STATUS_OK);
    {
        const int32_t want[] = {1, 4, 3, 7, 8, 2};
        const uint32_t woff[] = {0, 0, 0, 2, 2, 3, 3, 4, 4, 5, 0, 0};
        CHECK(n == 6 && full == 6 && memcmp(ids, want, sizeof want) == 0 && memcmp(offs, woff, sizeof woff) == 0);
    }
    CHECK(emb_tokenizer_encode_ex(tok, "ab cz b", 7, NULL, 0, 1, ids, NULL, NULL, 16, &n, &full) == EMB_STATUS_OK);
    CHECK(n == 6 && full == 8 && ids[5] == 2);   /* truncated to 6, </s> last */
    CHECK(emb_tokenizer_encode_ex(tok, "ab cz b", 7, NULL, 0, 0, ids, NULL, NULL, 16, &n, &full) == EMB_STATUS_TOO_LONG);
    CHECK(emb_tokenizer_encode_ex(tok, "ab", 2, "ab", 2, 1, ids, NULL, NULL, 16, &n, &full) == EMB_STATUS_UNSUPPORTED);
    emb_tokenizer_free(tok);
    sp.unk_id = 99;   /* outside the model */
    CHECK(emb_tokenizer_init_spec(&tok, &sp) == EMB_STATUS_CORRUPT && tok == NULL);
    sp.unk_id = 0;
    sp.n_single = 0;   /* a template without $A */
    CHECK(emb_tokenizer_init_spec(&tok, &sp) == EMB_STATUS_CORRUPT);

    /* byte-level BPE: a b merge to ab, ab c to abc; "<m>" an added token with lstrip */
    static const char bvocab[] = "abcababc" "\xc4\xa0" "<m>";
    static const int32_t boff[] = {0, 1, 2, 3, 5, 8, 10, 13};
    static const int32_t merges[] = {0, 1, 3, 3, 2, 4};
    emb_added_spec add = {6, EMB_ADDED_LSTRIP | EMB_ADDED_SPECIAL, (const uint8_t *)"<m>", 3};
    memset(&sp, 0, sizeof sp);
    sp.type = EMB_TOKENIZER_TYPE_BPE;
    sp.vocab = (const uint8_t *)bvocab;
    sp.vocab_offsets = boff;
    sp.n_vocab = 7;
    sp.n_model = 6;
    sp.unk_id = -1;
    sp.merges = merges;
    sp.n_merges = 2;
    sp.added = &add;
    sp.n_added = 1;
    sp.pre_tokenizers[0].op = EMB_PRE_TOKENIZER_OP_BYTE_LEVEL;
    sp.pre_tokenizers[0].use_regex = 1;
    sp.n_pre_tokenizers = 1;
    const int32_t only_a[1][2] = {{EMB_TEMPLATE_A, 0}};
    memcpy(sp.single, only_a, sizeof only_a);
    sp.n_single = 1;
    sp.max_length = 64;
    CHECK(emb_tokenizer_init_spec(&tok, &sp) == EMB_STATUS_OK);
    /* "abc x <m>": abc; Ġ then x unknown (no unk token: dropped); " <m>" with its space */
    CHECK(emb_tokenizer_encode_ex(tok, "abc x <m>", 9, NULL, 0, 1, ids, NULL, offs, 16, &n, &full) == EMB_STATUS_OK);
    {
        const int32_t want[] = {4, 5, 6};
        const uint32_t woff[] = {0, 3, 3, 4, 5, 9};
        CHECK(n == 3 && memcmp(ids, want, sizeof want) == 0 && memcmp(offs, woff, sizeof woff) == 0);
    }
    emb_tokenizer_free(tok);

    /* offsets in characters: code points and UTF-16 units, invalid bytes as one U+FFFD */
    {
        uint32_t o[] = {0, 1, 3, 7, 8, 9};
        CHECK(emb_utf8_offsets_to_chars("a\xc3\xa9\xf0\x9f\x98\x80\xffz", 9, o, 6, 0) == EMB_STATUS_OK);
        const uint32_t w[] = {0, 1, 2, 3, 4, 5};
        CHECK(memcmp(o, w, sizeof w) == 0);
        uint32_t u[] = {7, 3, 2};
        CHECK(emb_utf8_offsets_to_chars("a\xc3\xa9\xf0\x9f\x98\x80\xffz", 9, u, 3, 1) == EMB_STATUS_OK);
        CHECK(u[0] == 4 && u[1] == 2 && u[2] == 1);   /* the emoji is 2 units; inside é: its start */
        uint32_t bad[] = {10};
        CHECK(emb_utf8_offsets_to_chars("abc", 3, bad, 1, 0) == EMB_STATUS_INVALID_ARGUMENT);
    }
    /* a charsmap that does not fit together is refused */
    CHECK(!emb_charsmap_valid((const uint8_t *)"\x08\0\0\0abcd", 8));
    CHECK(!emb_charsmap_valid((const uint8_t *)"\x03\0\0\0abcdefg", 11));
}

int main(int argc, char **argv) {
    test_utf8();
    test_general();
    test_normalizer();
    test_pre_tokenizer();
    test_pipeline();
    test_init_errors();
    /* the real vocabulary: argv[1], or $EDGEMBED_TEST_HF_DIR/vocab.txt */
    char path[4096];
    const char *dir = getenv("EDGEMBED_TEST_HF_DIR");
    if (argc > 1) {
        test_minilm(argv[1]);
    } else if (dir && (size_t)snprintf(path, sizeof path, "%s/vocab.txt", dir) < sizeof path) {
        test_minilm(path);
    } else {
        printf("skipped the all-MiniLM-L6-v2 checks: no vocab.txt given (pass its path, set "
               "EDGEMBED_TEST_HF_DIR, or run runtime/build.sh test, which passes the pulled model's)\n");
    }
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
