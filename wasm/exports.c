/*
 * exports.c — the emb_*_wasm glue: the engine's public API as wasm exports.
 *
 * Every export takes and returns i32 (pointers and sizes are 32-bit in wasm32). Functions that
 * produce an object write it through an out-pointer and return an emb_status, because a C
 * global would be shared between the instances of the threads build. The host allocates its
 * buffers with emb_alloc_wasm (64-byte aligned) and writes inputs there directly.
 * The bindings' ABI modules (python/edgembed/backends/_abi.py WASM_EXPORTS, js/src/abi.ts EXPORTS)
 * list these exports; tests/python/test_abi.py checks them against this file and edgembed.h, and
 * runtime/tools/build_wasm.py checks every built module's exports against WASM_EXPORTS.
 * The module exports its memory (the threads build imports a shared env.memory instead and
 * exports __stack_pointer, which each worker's instance must set to a stack of its own before
 * its first call; see docs/engine.md).
 */
#include "edgembed.h"
#include "kernels.h"
#include "platform.h"

#define EXPORT(name) __attribute__((export_name(#name), visibility("default")))

EXPORT(emb_alloc_wasm) void *emb_alloc_wasm(size_t size) { return emb_alloc(size); }
EXPORT(emb_free_wasm) void emb_free_wasm(void *ptr) { emb_dealloc(ptr); }

EXPORT(emb_status_str_wasm) const char *emb_status_str_wasm(int32_t status) { return emb_status_str((emb_status)status); }

/* (EMB_BUNDLE_VERSION_MIN << 16) | EMB_BUNDLE_VERSION_MAX */
EXPORT(emb_bundle_versions_wasm) int32_t emb_bundle_versions_wasm(void) {
    return (EMB_BUNDLE_VERSION_MIN << 16) | EMB_BUNDLE_VERSION_MAX;
}

/* 0 reference, 1 SIMD128, 2 relaxed SIMD: the kernels this module was built with. */
EXPORT(emb_kernels_wasm) int32_t emb_kernels_wasm(void) { return EMB_KERNELS; }

/* 1 when this host computes the relaxed dot product exactly (relaxed build only; else 0). */
EXPORT(emb_relaxed_probe_wasm) int32_t emb_relaxed_probe_wasm(void) {
#if EMB_KERNELS == EMB_KERNELS_RELAXED
    return emb_relaxed_probe();
#else
    return 0;
#endif
}

EXPORT(emb_model_init_wasm) int32_t emb_model_init_wasm(emb_model **out, const void *bundle, size_t size) {
    return emb_model_init(out, bundle, size);
}
EXPORT(emb_model_free_wasm) void emb_model_free_wasm(emb_model *model) { emb_model_free(model); }
/* info: an emb_model_info (its layout is asserted in edgembed.h) */
EXPORT(emb_model_get_info_wasm) void emb_model_get_info_wasm(const emb_model *model, emb_model_info *info) {
    emb_model_get_info(model, info);
}
/* config: an emb_model_config (its layout is asserted in edgembed.h) */
EXPORT(emb_model_get_config_wasm) void emb_model_get_config_wasm(const emb_model *model, emb_model_config *config) {
    emb_model_get_config(model, config);
}
/* key: NUL-terminated; returns a pointer into the bundle (not NUL-terminated), length in *len */
EXPORT(emb_model_get_meta_wasm) const char *emb_model_get_meta_wasm(const emb_model *model, const char *key, size_t *len) {
    return emb_model_get_meta(model, key, len);
}
EXPORT(emb_model_tokenize_wasm)
int32_t emb_model_tokenize_wasm(const emb_model *model, const char *utf8, size_t len, int32_t truncate, int32_t *ids,
                                size_t cap, size_t *n_ids, size_t *n_full) {
    return emb_model_tokenize(model, utf8, len, truncate, ids, cap, n_ids, n_full);
}

EXPORT(emb_model_tokenize_ex_wasm)
int32_t emb_model_tokenize_ex_wasm(const emb_model *model, const char *utf8, size_t len, const char *pair, size_t pair_len,
                                   int32_t truncate, int32_t *ids, int32_t *type_ids, uint32_t *offsets, size_t cap,
                                   size_t *n_ids, size_t *n_full) {
    return emb_model_tokenize_ex(model, utf8, len, pair, pair_len, truncate, ids, type_ids, offsets, cap, n_ids, n_full);
}
EXPORT(emb_utf8_offsets_to_chars_wasm)
int32_t emb_utf8_offsets_to_chars_wasm(const char *utf8, size_t len, uint32_t *offsets, size_t n, int32_t utf16) {
    return emb_utf8_offsets_to_chars(utf8, len, offsets, n, utf16);
}

EXPORT(emb_context_init_wasm) int32_t emb_context_init_wasm(emb_context **out, const emb_model *model, size_t max_tokens) {
    return emb_context_init(out, model, max_tokens);
}
EXPORT(emb_context_free_wasm) void emb_context_free_wasm(emb_context *ctx) { emb_context_free(ctx); }
EXPORT(emb_context_max_tokens_wasm) size_t emb_context_max_tokens_wasm(const emb_context *ctx) {
    return emb_context_max_tokens(ctx);
}
EXPORT(emb_context_encode_wasm)
int32_t emb_context_encode_wasm(emb_context *ctx, const int32_t *ids, const int32_t *lengths, size_t n_seqs,
                                int32_t pooling, int32_t normalize, float *out, size_t out_cap) {
    return emb_context_encode(ctx, ids, lengths, n_seqs, (emb_pooling)pooling, normalize, out, out_cap);
}
/* request: an emb_request, output: an emb_output (layouts asserted in edgembed.h, 4-byte pointers
   and size_t in wasm32); n_rows and row_size are written back into *output */
EXPORT(emb_context_run_wasm)
int32_t emb_context_run_wasm(emb_context *ctx, const emb_request *request, emb_output *output) {
    return emb_context_run(ctx, request, output);
}
