/*
 * fuzz_tokenizer_tables.c — libFuzzer target: a tokenizer-only bundle (seeds: small Unigram and
 * BPE tables, tests/fixtures/fuzz/tokenizer_tables/) parsed without its checksum, so mutations
 * reach the tables: emb_tokenizer_from_bundle must refuse bad ones (CORRUPT, UNSUPPORTED) and
 * the tokenizers it builds must encode a few texts without reading out of bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "tokenizer.h"

static const char *const TEXTS[] = {
    "Hello world, ça va? 日本語 ＡＢＣ① a\r\nb", " <s> </s> <mask> x", "\xff\xfe\xe2\x82 broken", "don't 12345 \t\n ",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a copy of exactly its size, 8-aligned (the bundle reader wants aligned tensors) */
    uint64_t *copy = malloc(size ? (size + 7) / 8 * 8 : 8);
    if (size) memcpy(copy, data, size);
    emb_bundle b;
    if (emb_bundle_parse(&b, copy, size, 0) == EMB_STATUS_OK) {
        emb_tokenizer *tok = NULL;
        if (emb_tokenizer_from_bundle(&tok, &b, 1 << 16, 64) == EMB_STATUS_OK) {
            int32_t ids[64], types[64];
            uint32_t offs[128];
            for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++) {
                size_t n = 0, full = 0;
                emb_tokenizer_encode_ex(tok, TEXTS[i], strlen(TEXTS[i]), i & 1 ? TEXTS[0] : NULL, i & 1 ? strlen(TEXTS[0]) : 0,
                                        1, ids, types, offs, 64, &n, &full);
            }
            emb_tokenizer_free(tok);
        }
        emb_bundle_release(&b);
    }
    free(copy);
    return 0;
}
