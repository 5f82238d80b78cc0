/*
 * test_tokenizer_wasm.c — the engine's tokenizers alone in a wasm module
 * (build/wasm/tokenizer_test.wasm), so that a host can check that wasm tokenizes exactly as the
 * native build: any tokenizer-only bundle (runtime/tools/tokenizer_bundles.py) in, ids, type ids
 * and byte offsets out. Run by tests/python/test_tokenizer_parity_unigram_bpe.py under wasmtime.
 *
 * Exports (all i32): emb_test_alloc(size), emb_test_free(ptr),
 *   emb_test_tokenizer(bundle, size, vocab_size, max_length) → tokenizer or 0,
 *   emb_test_encode(tok, a, a_len, b, b_len, ids, types, offsets, cap, counts) → emb_status
 *     (b = 0: one text; counts receives n_ids and n_full as two u32).
 */
#include "platform.h"
#include "tokenizer.h"

#define EXPORT(name) __attribute__((export_name(#name), visibility("default")))

EXPORT(emb_test_alloc) void *emb_test_alloc(size_t size) { return emb_alloc(size); }
EXPORT(emb_test_free) void emb_test_free(void *p) { emb_dealloc(p); }

EXPORT(emb_test_tokenizer) emb_tokenizer *emb_test_tokenizer(const void *bundle, size_t size, int32_t vocab_size,
                                                             int32_t max_length) {
    emb_tokenizer *tok = NULL;
    if (emb_tokenizer_from_bundle_bytes(&tok, bundle, size, vocab_size, max_length) != EMB_STATUS_OK) return NULL;
    return tok;
}

EXPORT(emb_test_encode) int32_t emb_test_encode(const emb_tokenizer *tok, const char *a, size_t a_len, const char *b,
                                                size_t b_len, int32_t *ids, int32_t *types, uint32_t *offsets, size_t cap,
                                                uint32_t *counts) {
    size_t n = 0, full = 0;
    emb_status s = emb_tokenizer_encode_ex(tok, a, a_len, b, b_len, 1, ids, types, offsets, cap, &n, &full);
    counts[0] = (uint32_t)n;
    counts[1] = (uint32_t)full;
    return (int32_t)s;
}
