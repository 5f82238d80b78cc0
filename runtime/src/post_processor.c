/*
 * post_processor.c — TemplateProcessing "[CLS] A [SEP]" and truncation.
 *
 * tokenizers truncates the sequence to max_length - 2 ids (LongestFirst on a single sequence keeps
 * the first ones) and then adds [CLS] and [SEP]. The sink receives the sequence's ids as the
 * WordPiece stage produces them: it stores those that fit (after ids[0], kept for [CLS]) and counts
 * them all, so the caller learns the untruncated length in the same pass.
 */
#include "tokenizer.h"

void emb_id_sink_init(emb_id_sink *sink, int32_t *ids, size_t cap, size_t max_length) {
    sink->ids = ids;
    sink->cap = cap;
    sink->keep = max_length - 2;
    sink->n = 0;
}

void emb_id_sink_push(emb_id_sink *sink, int32_t id) {
    if (sink->n < sink->keep && sink->n + 1 < sink->cap) sink->ids[sink->n + 1] = id;
    sink->n++;
}

emb_status emb_post_processor_finish(const emb_tokenizer_config *cfg, emb_id_sink *sink, int truncate,
                                     size_t *n_ids, size_t *n_full) {
    size_t full = sink->n + 2;
    if (n_full) *n_full = full;
    if (!truncate && full > (size_t)cfg->max_length) {
        *n_ids = 0;
        return EMB_STATUS_TOO_LONG;
    }
    size_t kept = sink->n < sink->keep ? sink->n : sink->keep;
    *n_ids = kept + 2;
    if (sink->cap < kept + 2) return EMB_STATUS_BUFFER_TOO_SMALL;
    sink->ids[0] = cfg->cls_id;
    sink->ids[kept + 1] = cfg->sep_id;
    return EMB_STATUS_OK;
}
