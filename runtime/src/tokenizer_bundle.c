/*
 * tokenizer_bundle.c — the tokenizer a bundle describes: reads the "tokenizer" metadata and the
 * "tokenizer.*" tables (layout: include/edgembed.h) and builds the stages from them. Kept apart
 * from tokenizer.c so that the tokenizer itself builds and is tested without the bundle reader.
 */
#include "bundle.h"
#include "tokenizer.h"

emb_status emb_tokenizer_from_bundle(emb_tokenizer **out, const emb_bundle *b, int32_t vocab_size,
                                     int32_t max_length) {
    emb_status s;
    *out = NULL;
    if (!emb_bundle_meta_is(b, "tokenizer", "wordpiece")) return EMB_STATUS_UNSUPPORTED;
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
    s = emb_tokenizer_init(out, &tc, (const char *)vocab->data, vocab->nbytes);
    if (s != EMB_STATUS_OK) {
        *out = NULL;
        return (s == EMB_STATUS_OUT_OF_MEMORY || s == EMB_STATUS_UNSUPPORTED) ? s : EMB_STATUS_CORRUPT;
    }
    return EMB_STATUS_OK;
}
