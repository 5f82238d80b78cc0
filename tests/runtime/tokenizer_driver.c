/*
 * tokenizer_driver.c — a command-line front end to the engine's tokenizer, for the parity tests
 * (tests/python/test_tokenizer_parity.py), which build it with and without sanitizers.
 *
 *   tokenizer_driver encode VOCAB LOWER STRIP CJK CLEAN MAX_LENGTH TRUNCATE  < records > results
 *       stdin: records of (uint32 byte length, bytes); stdout, per record: int32 status,
 *       uint32 n_full, uint32 n_ids, n_ids x int32 ids. Little-endian (the host's order).
 *       Special ids are BERT's: [UNK] 100, [CLS] 101, [SEP] 102, [PAD] 0.
 *   tokenizer_driver words VOCAB LOWER STRIP CJK CLEAN  < records > results
 *       the stages before WordPiece: per record, items until a -3: an added token's id (>= 0), or -1
 *       then a word: uint32 length in characters, uint32 n stored, n x uint32 (the first
 *       characters, up to max_input_chars_per_word = 100).
 *   tokenizer_driver normalize LOWER STRIP CJK CLEAN  > results
 *       for every code point from 0 to 0x10FFFF except surrogates: uint32 n, n x uint32 (the
 *       normalizer's output for that code point alone, without EMB_NORMALIZER_RUN_BREAK).
 *   tokenizer_driver kinds  > results
 *       for every code point from 0 to 0x10FFFF: one byte, its pre-tokenizer kind.
 *   tokenizer_driver bundle FILE VOCAB_SIZE MAX_LENGTH PAIRS  < records > results
 *       a Unigram / BPE tokenizer from a tokenizer-only bundle, truncating: per record, int32
 *       status, n_full, n, then n ids, n type ids, 2n byte offsets. With PAIRS = 1 a record is
 *       a pair: uint32 length of the first text, the first text, the second.
 *   tokenizer_driver gnormalize FILE VOCAB_SIZE  < records > results
 *       a general tokenizer's normalizer steps alone: per record, uint32 n, n x uint32 code points.
 *   tokenizer_driver bench FILE VOCAB_SIZE MAX_LENGTH ROUNDS  < records > one JSON line
 *       load times and one-thread encode times of any tokenizer in a bundle
 *       (benchmarks/tokenizer_speed.py).
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer.h"

static int usage(void) {
    fprintf(stderr, "usage: tokenizer_driver encode VOCAB LOWER STRIP CJK CLEAN MAX_LENGTH TRUNCATE\n"
                    "       tokenizer_driver words VOCAB LOWER STRIP CJK CLEAN\n"
                    "       tokenizer_driver normalize LOWER STRIP CJK CLEAN\n"
                    "       tokenizer_driver kinds\n"
                    "       tokenizer_driver bundle FILE VOCAB_SIZE MAX_LENGTH PAIRS\n"
                    "       tokenizer_driver gnormalize FILE VOCAB_SIZE\n"
                    "       tokenizer_driver bench FILE VOCAB_SIZE MAX_LENGTH ROUNDS\n");
    return 2;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

/* A tokenizer with BERT's special ids from the vocab file argv[0] and the flags in argv[1..4]. */
static emb_tokenizer *open_tokenizer(char **argv, int max_length, char **vocab) {
    size_t vocab_len = 0;
    *vocab = read_file(argv[0], &vocab_len);
    if (!*vocab) {
        fprintf(stderr, "cannot read %s\n", argv[0]);
        return NULL;
    }
    emb_tokenizer_config cfg = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), 100, 101, 102, 0,
                                100, max_length};
    emb_tokenizer *tok = NULL;
    emb_status s = emb_tokenizer_init(&tok, &cfg, *vocab, vocab_len);
    if (s != EMB_STATUS_OK) fprintf(stderr, "emb_tokenizer_init: status %d\n", (int)s);
    return tok;
}

/* The next record from stdin, in a buffer of exactly its size (so a sanitizer sees any over-read). */
static char *read_record(uint32_t *len) {
    if (fread(len, 4, 1, stdin) != 1) return NULL;
    char *text = malloc(*len ? *len : 1);
    if (*len && fread(text, 1, *len, stdin) != *len) {
        fprintf(stderr, "short record\n");
        exit(1);
    }
    return text;
}

static void put_i32(int32_t v) { fwrite(&v, 4, 1, stdout); }

static void word_out(void *ctx, const emb_word *w) {
    (void)ctx;
    size_t stored = w->n_chars < w->cap ? w->n_chars : w->cap;
    put_i32(-1);
    put_i32((int32_t)w->n_chars);
    put_i32((int32_t)stored);
    fwrite(w->chars, 4, stored, stdout);
}

static void added_out(void *ctx, int32_t id) {
    (void)ctx;
    put_i32(id);
}

static int words(char **argv) {
    char *vocab, *text;
    emb_tokenizer *tok = open_tokenizer(argv, 256, &vocab);
    if (!tok) return 1;
    const emb_pre_tokens out = {word_out, added_out, NULL};
    uint32_t len;
    while ((text = read_record(&len)) != NULL) {
        emb_tokenizer_pre_tokenize(tok, (const uint8_t *)text, len, &out);
        put_i32(-3);
        free(text);
    }
    emb_tokenizer_free(tok);
    free(vocab);
    return 0;
}

static int encode(char **argv) {
    char *vocab, *text;
    emb_tokenizer *tok = open_tokenizer(argv, atoi(argv[5]), &vocab);
    if (!tok) return 1;
    int truncate = atoi(argv[6]);
    emb_status s;
    size_t ids_cap = 1024;
    int32_t *ids = malloc(ids_cap * sizeof *ids);
    uint32_t len;
    while ((text = read_record(&len)) != NULL) {
        size_t n = 0, full = 0;
        s = emb_tokenizer_encode(tok, text, len, truncate, ids, ids_cap, &n, &full);
        if (s == EMB_STATUS_BUFFER_TOO_SMALL) {
            ids_cap = n;
            ids = realloc(ids, ids_cap * sizeof *ids);
            s = emb_tokenizer_encode(tok, text, len, truncate, ids, ids_cap, &n, &full);
        }
        int32_t st = (int32_t)s;
        uint32_t head[2] = {(uint32_t)full, s == EMB_STATUS_OK ? (uint32_t)n : 0};
        fwrite(&st, 4, 1, stdout);
        fwrite(head, 4, 2, stdout);
        if (s == EMB_STATUS_OK) fwrite(ids, 4, n, stdout);
        free(text);
    }
    free(ids);
    emb_tokenizer_free(tok);
    free(vocab);
    return 0;
}

static int normalize(char **argv) {
    emb_tokenizer_config cfg = {atoi(argv[0]), atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), 0, 0, 0, 0, 100, 256};
    uint32_t out[1 + EMB_NORMALIZER_MAX_OUT];
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        size_t n = emb_normalizer_apply(&cfg, cp, out + 1), kept = 0;
        for (size_t i = 0; i < n; i++) {
            if (out[1 + i] != EMB_NORMALIZER_RUN_BREAK) out[1 + kept++] = out[1 + i];
        }
        out[0] = (uint32_t)kept;
        fwrite(out, 4, 1 + kept, stdout);
    }
    return 0;
}

static int kinds(void) {
    for (uint32_t cp = 0; cp < 0x110000; cp++) putchar((int)emb_pre_tokenizer_kind(cp));
    return 0;
}

/* A general tokenizer from a tokenizer-only bundle file: per record, status, n_full, n, then n ids,
   n type ids and 2n byte offsets (int32 each). A pair record holds the two texts back to back,
   the first one's length in its first 4 bytes. */
static int bundle(char **argv) {
    size_t size = 0;
    char *bytes = read_file(argv[0], &size);
    if (!bytes) {
        fprintf(stderr, "cannot read %s\n", argv[0]);
        return 1;
    }
    emb_tokenizer *tok = NULL;
    emb_status s = emb_tokenizer_from_bundle_bytes(&tok, bytes, size, atoi(argv[1]), atoi(argv[2]));
    if (s != EMB_STATUS_OK) {
        fprintf(stderr, "emb_tokenizer_from_bundle_bytes: status %d\n", (int)s);
        return 1;
    }
    int pairs = atoi(argv[3]);
    size_t cap = 1024;
    int32_t *ids = malloc(cap * 4), *types = malloc(cap * 4);
    uint32_t *offs = malloc(cap * 8);
    char *text;
    uint32_t len;
    while ((text = read_record(&len)) != NULL) {
        const char *a = text, *b = NULL;
        size_t a_len = len, b_len = 0;
        if (pairs) {
            uint32_t first;
            memcpy(&first, text, 4);
            a = text + 4;
            a_len = first;
            b = text + 4 + first;
            b_len = len - 4 - first;
        }
        size_t n = 0, full = 0;
        s = emb_tokenizer_encode_ex(tok, a, a_len, b, b_len, 1, ids, types, offs, cap, &n, &full);
        if (s == EMB_STATUS_BUFFER_TOO_SMALL) {
            cap = n;
            ids = realloc(ids, cap * 4);
            types = realloc(types, cap * 4);
            offs = realloc(offs, cap * 8);
            s = emb_tokenizer_encode_ex(tok, a, a_len, b, b_len, 1, ids, types, offs, cap, &n, &full);
        }
        put_i32((int32_t)s);
        put_i32((int32_t)full);
        put_i32(s == EMB_STATUS_OK ? (int32_t)n : 0);
        if (s == EMB_STATUS_OK) {
            fwrite(ids, 4, n, stdout);
            fwrite(types, 4, n, stdout);
            fwrite(offs, 4, 2 * n, stdout);
        }
        free(text);
    }
    free(ids);
    free(types);
    free(offs);
    emb_tokenizer_free(tok);
    free(bytes);
    return 0;
}

/* The normalizer steps of a general tokenizer on each record: per record, uint32 n then n code
   points (what tokenizers' normalizer.normalize_str gives, as code points). */
static int gnormalize(char **argv) {
    size_t size = 0;
    char *bytes = read_file(argv[0], &size);
    if (!bytes) return 1;
    emb_tokenizer *tok = NULL;
    if (emb_tokenizer_from_bundle_bytes(&tok, bytes, size, atoi(argv[1]), 512) != EMB_STATUS_OK) return 1;
    const emb_tokenizer_spec *spec = emb_tokenizer_spec_of(tok);
    emb_scratch sc;
    emb_scratch_init(&sc);
    emb_nchars a = {NULL, 0, 0}, b = {NULL, 0, 0};
    char *text;
    uint32_t len;
    while ((text = read_record(&len)) != NULL) {
        a.n = 0;
        size_t pos = 0;
        while (pos < len) {
            size_t at = pos;
            uint32_t cp = emb_utf8_next((const uint8_t *)text, len, &pos);
            emb_nchars_push(&sc, &a, cp, (uint32_t)at, (uint32_t)pos);
        }
        for (size_t k = 0; k < spec->n_normalizers; k++) {
            b.n = 0;
            emb_normalizer_run(&spec->normalizers[k], &sc, &a, &b);
            emb_nchars t = a;
            a = b;
            b = t;
        }
        if (sc.oom) return 1;
        put_i32((int32_t)a.n);
        for (size_t i = 0; i < a.n; i++) put_i32((int32_t)a.v[i].cp);
        free(text);
    }
    free(a.v);
    free(b.v);
    emb_scratch_free(&sc);
    emb_tokenizer_free(tok);
    free(bytes);
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Timing for benchmarks/tokenizer_speed.py: loads the bundle `loads` times, then encodes every record
   (one text each) `rounds` times, one thread; prints one JSON line: the fastest load, the
   tokenizer's own memory, and the seconds, ids and bytes of each round. */
static int bench(char **argv) {
    size_t size = 0;
    char *bytes = read_file(argv[0], &size);
    if (!bytes) return 1;
    int32_t vocab_size = atoi(argv[1]), max_length = atoi(argv[2]), rounds = atoi(argv[3]), loads = 5;
    double best_load = 1e30;
    emb_tokenizer *tok = NULL;
    for (int i = 0; i < loads; i++) {
        double t0 = now();
        if (emb_tokenizer_from_bundle_bytes(&tok, bytes, size, vocab_size, max_length) != EMB_STATUS_OK) return 1;
        double t1 = now();
        if (t1 - t0 < best_load) best_load = t1 - t0;
        if (i + 1 < loads) emb_tokenizer_free(tok);
    }
    size_t n_rec = 0, cap_rec = 1024, total_bytes = 0;
    char **texts = malloc(cap_rec * sizeof *texts);
    uint32_t *lens = malloc(cap_rec * sizeof *lens), len;
    char *text;
    while ((text = read_record(&len)) != NULL) {
        if (n_rec == cap_rec) {
            cap_rec *= 2;
            texts = realloc(texts, cap_rec * sizeof *texts);
            lens = realloc(lens, cap_rec * sizeof *lens);
        }
        texts[n_rec] = text;
        lens[n_rec++] = len;
        total_bytes += len;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_length);
    printf("{\"load_s\": %.6f, \"memory\": %zu, \"texts\": %zu, \"bytes\": %zu, \"rounds\": [", best_load,
           emb_tokenizer_memory(tok), n_rec, total_bytes);
    for (int r = 0; r < rounds; r++) {
        size_t n_ids_total = 0;
        double t0 = now();
        for (size_t i = 0; i < n_rec; i++) {
            size_t n = 0, full = 0;
            emb_tokenizer_encode(tok, texts[i], lens[i], 1, ids, (size_t)max_length, &n, &full);
            n_ids_total += full;
        }
        double t1 = now();
        printf("%s[%.6f, %zu]", r ? ", " : "", t1 - t0, n_ids_total);
    }
    printf("]}\n");
    for (size_t i = 0; i < n_rec; i++) free(texts[i]);
    free(texts);
    free(lens);
    free(ids);
    emb_tokenizer_free(tok);
    free(bytes);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 6 && strcmp(argv[1], "bench") == 0) return bench(argv + 2);
    if (argc >= 4 && strcmp(argv[1], "gnormalize") == 0) return gnormalize(argv + 2);
    if (argc >= 6 && strcmp(argv[1], "bundle") == 0) return bundle(argv + 2);
    if (argc >= 9 && strcmp(argv[1], "encode") == 0) return encode(argv + 2);
    if (argc >= 7 && strcmp(argv[1], "words") == 0) return words(argv + 2);
    if (argc >= 6 && strcmp(argv[1], "normalize") == 0) return normalize(argv + 2);
    if (argc >= 2 && strcmp(argv[1], "kinds") == 0) return kinds();
    return usage();
}
