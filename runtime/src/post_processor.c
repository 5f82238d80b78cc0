/*
 * post_processor.c — TemplateProcessing "[CLS] A [SEP]" and truncation.
 *
 * tokenizers truncates the sequence to max_length - 2 ids (LongestFirst on a single sequence keeps
 * the first ones) and then adds [CLS] and [SEP]. The sink receives the sequence's ids as the
 * WordPiece stage produces them: it stores those that fit (after ids[0], kept for [CLS]) and counts
 * them all, so the caller learns the untruncated length in the same pass.
 */
#include "platform.h"
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

/* ==== General tokenizers: truncation, the template, offset trimming ============================
 *
 * As tokenizers' Tokenizer::post_process: the sequences are truncated to max_length minus the
 * template's special tokens (one sequence: the first ids, or the last with truncate_left; a pair:
 * longest_first, only_first or only_second), then ByteLevel / RobertaProcessing trim offsets,
 * then the template puts the special tokens around them. Offsets are trimmed in characters, as
 * tokenizers' Python API reports them: a token's leading 'Ġ' / whitespace characters move its
 * start right, its trailing ones move its end left.
 */

/* The byte position `count` characters after p, not beyond limit. */
static uint32_t chars_forward(const uint8_t *s, uint32_t p, uint32_t limit, size_t count) {
    size_t pos = p;
    while (count-- > 0 && pos < limit) emb_utf8_next(s, limit, &pos);
    return (uint32_t)pos;
}

/* The byte position `count` characters before end, not before floor (both character starts). */
static uint32_t chars_back(const uint8_t *s, uint32_t floor, uint32_t end, size_t count) {
    size_t n = 0, pos = floor;
    while (pos < end) {   /* characters in [floor, end) */
        emb_utf8_next(s, end, &pos);
        n++;
    }
    if (count >= n) return floor;
    size_t keep = n - count;
    pos = floor;
    while (keep-- > 0) emb_utf8_next(s, end, &pos);
    return (uint32_t)pos;
}

static size_t chars_before(const uint8_t *s, uint32_t end, size_t enough) {
    size_t n = 0, pos = 0;
    while (pos < end && n < enough) {
        emb_utf8_next(s, end, &pos);
        n++;
    }
    return n;
}

/* tokenizers' process_offsets on one encoding (after truncation). */
static void trim_offsets(const emb_tokenizer_spec *spec, const uint8_t *text, emb_token *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t lead = t[i].lead, trail = t[i].trail;
        if (!lead && !trail) continue;
        uint32_t start = t[i].start, end = t[i].end;
        if (lead) {
            int is_first = i == 0 || start == 0;
            if (is_first && spec->trim_add_prefix_space && lead == 1) lead = 0;
            start = chars_forward(text, start, end, lead);
        }
        if (trail && chars_before(text, end, trail) >= trail) {
            end = chars_back(text, start, end, trail);
        }
        t[i].start = start;
        t[i].end = end;
    }
}

emb_status emb_post_processor_assemble(const emb_tokenizer *tok, const char *a, size_t a_len, const char *b,
                                       size_t b_len, emb_tokens *ta, emb_tokens *tb, int truncate,
                                       int32_t *ids, int32_t *type_ids, uint32_t *offsets, size_t cap,
                                       size_t *n_ids, size_t *n_full) {
    const emb_tokenizer_spec *spec = emb_tokenizer_spec_of(tok);
    const int32_t(*tpl)[2] = tb ? spec->pair : spec->single;
    size_t n_tpl = tb ? spec->n_pair : spec->n_single;
    if (tb && n_tpl == 0) return EMB_STATUS_UNSUPPORTED;
    size_t n_special = 0;
    for (size_t i = 0; i < n_tpl; i++) n_special += tpl[i][0] >= 0;
    size_t na = ta->n, nb = tb ? tb->n : 0;
    size_t full = na + nb + n_special, max = (size_t)spec->max_length;
    if (n_full) *n_full = full;
    *n_ids = 0;
    size_t ka = na, kb = nb;   /* ids kept of each */
    if (full > max) {
        if (!truncate) return EMB_STATUS_TOO_LONG;
        size_t room = max > n_special ? max - n_special : 0;
        size_t remove = na + nb - room;
        if (!tb) {
            if (spec->truncation == EMB_TRUNCATION_ONLY_SECOND) return EMB_STATUS_TOO_LONG;
            ka = room;
        } else if (spec->truncation == EMB_TRUNCATION_LONGEST_FIRST) {
            if (room == 0) {
                ka = kb = 0;
            } else {
                size_t n1 = na, n2 = nb;
                int swap = n1 > n2;
                if (swap) {
                    size_t x = n1;
                    n1 = n2;
                    n2 = x;
                }
                n2 = n1 > room ? n1 : (n1 > room - n1 ? n1 : room - n1);
                if (n1 + n2 > room) {
                    n1 = room / 2;
                    n2 = n1 + room % 2;
                }
                if (swap) {
                    size_t x = n1;
                    n1 = n2;
                    n2 = x;
                }
                ka = n1 < na ? n1 : na;
                kb = n2 < nb ? n2 : nb;
            }
        } else if (spec->truncation == EMB_TRUNCATION_ONLY_FIRST) {
            if (na <= remove) return EMB_STATUS_TOO_LONG;   /* tokenizers: "sequence to truncate too short" */
            ka = na - remove;
        } else {
            if (nb <= remove) return EMB_STATUS_TOO_LONG;
            kb = nb - remove;
        }
    }
    size_t n = ka + kb + n_special;
    *n_ids = n;
    if (cap < n) return EMB_STATUS_BUFFER_TOO_SMALL;
    /* the kept tokens (no pointer arithmetic on an empty list's NULL) */
    emb_token *va = ta->v ? ta->v + (spec->truncate_left ? na - ka : 0) : NULL;
    emb_token *vb = tb && tb->v ? tb->v + (spec->truncate_left ? nb - kb : 0) : NULL;
    if (spec->trim_offsets) {
        trim_offsets(spec, (const uint8_t *)a, va, ka);
        if (vb) trim_offsets(spec, (const uint8_t *)b, vb, kb);
    }
    (void)a_len;
    (void)b_len;
    size_t o = 0;
    for (size_t i = 0; i < n_tpl; i++) {
        int32_t item = tpl[i][0], type = tpl[i][1];
        const emb_token *src = NULL;
        size_t cnt = 0;
        if (item == EMB_TEMPLATE_A) {
            src = va;
            cnt = ka;
        } else if (item == EMB_TEMPLATE_B) {
            src = vb;
            cnt = kb;
        }
        if (item >= 0) {
            ids[o] = item;
            if (type_ids) type_ids[o] = type;
            if (offsets) offsets[2 * o] = offsets[2 * o + 1] = 0;
            o++;
            continue;
        }
        for (size_t k = 0; k < cnt; k++, o++) {
            ids[o] = src[k].id;
            if (type_ids) type_ids[o] = type;
            if (offsets) {
                offsets[2 * o] = src[k].start;
                offsets[2 * o + 1] = src[k].end;
            }
        }
    }
    return EMB_STATUS_OK;
}
