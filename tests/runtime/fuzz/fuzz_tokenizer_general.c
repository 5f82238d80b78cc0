/*
 * fuzz_tokenizer_general.c — libFuzzer target: any bytes as text (invalid UTF-8 included)
 * through the Unigram and BPE tokenizers of tests/fixtures/tokenizers/, read from the
 * tokenizer-only bundles that runtime/tools/tokenizer_bundles.py writes into
 * build/fuzz/tokenizers/ (EMB_FUZZ_TOKENIZERS overrides the folder). The first byte picks the
 * tokenizer, whether the text is split into a pair, truncation and the output capacity.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static const char *const NAMES[] = {"xlmr-unigram", "unigram-byte-fallback", "roberta-bpe", "modernbert-bpe", "split-bpe"};
#define N_TOK (sizeof NAMES / sizeof NAMES[0])
static emb_tokenizer *toks[N_TOK][2];   /* max length 512 and 6 */
static char *blobs[N_TOK];

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(buf, 1, (size_t)len, f);
    fclose(f);
    return buf;
}

static void load(void) {
    const char *dir = getenv("EMB_FUZZ_TOKENIZERS");
    if (!dir) dir = "build/fuzz/tokenizers";
    for (size_t i = 0; i < N_TOK; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.emb", dir, NAMES[i]);
        size_t n = 0;
        blobs[i] = read_all(path, &n);
        for (int k = 0; k < 2 && blobs[i]; k++) {
            if (emb_tokenizer_from_bundle_bytes(&toks[i][k], blobs[i], n, 1 << 20, k ? 6 : 512) != EMB_STATUS_OK) {
                toks[i][k] = NULL;
            }
        }
        if (!toks[i][0]) {
            fprintf(stderr, "fuzz_tokenizer_general: cannot load %s (run runtime/tools/tokenizer_bundles.py %s)\n", path, dir);
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!blobs[0]) load();
    if (size == 0) return 0;
    uint8_t flags = data[0];
    const emb_tokenizer *tok = toks[(flags & 7) % N_TOK][(flags >> 3) & 1];
    /* the text in a heap buffer of its exact size, so ASan sees any read past its end */
    size_t len = size - 1, split = (flags & 0x10) ? len / 2 : len;
    char *a = malloc(split ? split : 1), *b = malloc(len - split ? len - split : 1);
    if (split) memcpy(a, data + 1, split);
    if (len - split) memcpy(b, data + 1 + split, len - split);
    size_t cap = (flags & 0x20) ? 3 : 2048, n = 0, full = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t)), *types = malloc(cap * sizeof(int32_t));
    uint32_t *offs = malloc(2 * cap * sizeof(uint32_t));
    emb_status s = emb_tokenizer_encode_ex(tok, a, split, (flags & 0x10) ? b : NULL, len - split, (flags & 0x40) != 0,
                                           ids, types, offs, cap, &n, &full);
    if (s == EMB_STATUS_OK) {
        for (size_t i = 0; i < n; i++) {   /* offsets stay inside their text */
            size_t lim = (flags & 0x10) ? len : split;
            if (offs[2 * i] > offs[2 * i + 1] || offs[2 * i + 1] > lim) abort();
        }
        if (!(flags & 0x10)) emb_utf8_offsets_to_chars(a, split, offs, 2 * n, flags >> 7);
    }
    free(ids);
    free(types);
    free(offs);
    free(a);
    free(b);
    return 0;
}
