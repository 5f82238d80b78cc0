/*
 * fuzz_tokenizer.c — libFuzzer target: any bytes as text (invalid UTF-8 included), the first
 * byte choosing the normalizer flags, truncation and the output capacity.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static const char VOCAB[] =
    "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nquick\nbrown\nfox\n##es\n##s\n##ing\na\nb\nc\n##a\n##b\n"
    "caf\n##e\ncafe\n\xc3\xa9\n\xe4\xb8\xad\n\xe6\x96\x87\n.\n,\n!\n?\n-\n'\n\xf0\x9f\x98\x80\nun\n##aff\n##able";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    uint8_t flags = data[0];
    emb_tokenizer_config cfg = {
        .lowercase = flags & 1, .strip_accents = (flags >> 1) & 1, .handle_chinese_chars = (flags >> 2) & 1,
        .clean_text = (flags >> 3) & 1, .unk_id = 1, .cls_id = 2, .sep_id = 3, .pad_id = 0,
        .max_input_chars_per_word = (flags & 0x10) ? 5 : 100, .max_length = (flags & 0x20) ? 8 : 512,
    };
    emb_tokenizer *tok = NULL;
    if (emb_tokenizer_init(&tok, &cfg, VOCAB, sizeof VOCAB - 1) != EMB_STATUS_OK) return 0;
    /* the text in a heap buffer of its exact size, so ASan sees any read past its end */
    size_t len = size - 1;
    char *text = malloc(len ? len : 1);
    if (len) memcpy(text, data + 1, len);
    size_t cap = (flags & 0x40) ? 3 : 600, n = 0, full = 0;
    int32_t *ids = malloc(sizeof(int32_t) * cap);
    emb_tokenizer_encode(tok, text, len, (flags & 0x80) != 0, ids, cap, &n, &full);
    free(ids);
    free(text);
    emb_tokenizer_free(tok);
    return 0;
}
