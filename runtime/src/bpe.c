/*
 * bpe.c — byte-pair encoding: merges by rank, as tokenizers' BPE (word.rs merge_all).
 *
 * A word starts as one symbol per character (its vocabulary id; an unknown character becomes
 * [unk], consecutive ones fused when fuse_unk, or its bytes <0xNN> with byte fallback, or
 * nothing without an unk token). Then the pair of neighbours with the lowest merge rank, the
 * leftmost among equal ranks, is merged, again and again, from a min-heap of (rank, position)
 * that is refilled with the two new pairs around each merge; entries whose pair has changed are
 * skipped when they come out. With ignore_merges, a word that is itself in the vocabulary is
 * one token. The merge table maps (left id, right id) to a merge; it is built at init.
 */
#include "platform.h"
#include "tokenizer.h"

typedef struct bpe_tables {
    int32_t *slots;          /* (mask + 1) open addressing: merge row or -1 */
    uint32_t mask;
    int32_t low_ids[0x144];  /* id of each character below U+0144 (the byte-level alphabet), -1: absent */
    int32_t byte_ids[256];   /* <0xNN> */
} bpe_tables;

static uint32_t pair_hash(int32_t a, int32_t b) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

/* The merge row of (a, b), or -1. */
static int32_t find_merge(const bpe_tables *t, const int32_t *merges, int32_t a, int32_t b) {
    uint32_t slot = pair_hash(a, b) & t->mask;
    for (;;) {
        int32_t r = t->slots[slot];
        if (r < 0) return -1;
        if (merges[3 * r] == a && merges[3 * r + 1] == b) return r;
        slot = (slot + 1) & t->mask;
    }
}

emb_status emb_bpe_init(emb_tokenizer *tok) {
    const emb_tokenizer_spec *spec = emb_tokenizer_spec_of(tok);
    if (spec->n_merges && !spec->merges) return EMB_STATUS_CORRUPT;
    if (spec->n_merges > (size_t)INT32_MAX / 4) return EMB_STATUS_UNSUPPORTED;
    bpe_tables *t = (bpe_tables *)emb_alloc(sizeof(bpe_tables));
    if (!t) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(t, 0, sizeof(*t));
    emb_tokenizer_set_model_tables(tok, t);
    size_t size = 16;
    while (size < 2 * spec->n_merges) size *= 2;
    t->slots = (int32_t *)emb_alloc(size * sizeof(int32_t));
    if (!t->slots) return EMB_STATUS_OUT_OF_MEMORY;
    t->mask = (uint32_t)(size - 1);
    for (size_t i = 0; i < size; i++) t->slots[i] = -1;
    int32_t n_model = (int32_t)spec->n_model;
    for (size_t r = 0; r < spec->n_merges; r++) {
        const int32_t *m = spec->merges + 3 * r;
        if (m[0] < 0 || m[0] >= n_model || m[1] < 0 || m[1] >= n_model || m[2] < 0 || m[2] >= n_model) {
            return EMB_STATUS_CORRUPT;
        }
        uint32_t slot = pair_hash(m[0], m[1]) & t->mask;
        for (;;) {
            int32_t o = t->slots[slot];
            if (o < 0 || (spec->merges[3 * o] == m[0] && spec->merges[3 * o + 1] == m[1])) {
                t->slots[slot] = (int32_t)r;   /* a repeated pair: the later row wins, as in tokenizers */
                break;
            }
            slot = (slot + 1) & t->mask;
        }
    }
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        uint8_t name[6] = {'<', '0', 'x', (uint8_t)hex[b >> 4], (uint8_t)hex[b & 15], '>'};
        t->byte_ids[b] = emb_vocab_lookup(tok, name, 6);
    }
    for (uint32_t cp = 0; cp < 0x144; cp++) {
        uint8_t u[4];
        size_t l = emb_utf8_encode(cp, u);
        t->low_ids[cp] = emb_vocab_lookup(tok, u, l);
    }
    return EMB_STATUS_OK;
}

void emb_bpe_free_tables(void *p) {
    bpe_tables *t = (bpe_tables *)p;
    emb_dealloc(t->slots);
    emb_dealloc(t);
}

typedef struct symbol {
    int32_t id;
    int32_t prev, next;   /* -1: none */
    int32_t first, last;  /* characters of the word it covers; first < 0: merged away */
} symbol;

typedef struct merge_item {
    int32_t rank, pos, new_id;
} merge_item;

static int item_less(const merge_item *a, const merge_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(merge_item *h, size_t *n, merge_item x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!item_less(&x, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static merge_item heap_pop(merge_item *h, size_t *n) {
    merge_item top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const merge_item *best = &x;
        if (l < *n && item_less(&h[l], best)) {
            m = l;
            best = &h[l];
        }
        if (r < *n && item_less(&h[r], best)) m = r;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = x;
    return top;
}

static void push_pair(const bpe_tables *t, const emb_tokenizer_spec *spec, merge_item *heap, size_t *nh,
                      const symbol *sym, int32_t pos) {
    int32_t next = sym[pos].next;
    if (next < 0) return;
    int32_t r = find_merge(t, spec->merges, sym[pos].id, sym[next].id);
    if (r < 0) return;
    merge_item it = {r, pos, spec->merges[3 * r + 2]};
    heap_push(heap, nh, it);
}

void emb_bpe_word(const emb_tokenizer *tok, emb_scratch *sc, const emb_nchar *chars, size_t n, emb_tokens *out) {
    const emb_tokenizer_spec *spec = emb_tokenizer_spec_of(tok);
    const bpe_tables *t = (const bpe_tables *)emb_tokenizer_model_tables(tok);
    size_t first_out = out->n;
    {
        /* the word's UTF-8, for ignore_merges and for characters outside the byte alphabet */
        size_t n_bytes = 0;
        for (size_t i = 0; i < n; i++) {
            uint8_t b[4];
            n_bytes += emb_utf8_encode(chars[i].cp, b);
        }
        if (!emb_scratch_bytes(sc, n_bytes + 1)) return;
        size_t pos = 0;
        for (size_t i = 0; i < n; i++) {
            sc->byte_char[i] = (uint32_t)pos;
            pos += emb_utf8_encode(chars[i].cp, sc->bytes + pos);
        }
        sc->byte_char[n] = (uint32_t)pos;
        if (spec->ignore_merges) {
            int32_t id = emb_vocab_lookup(tok, sc->bytes, n_bytes);
            if (id >= 0) {
                emb_tokens_push(out, id, chars[0].start, chars[n - 1].end);
                if (spec->trim_offsets) {
                    /* the token's text is the word itself */
                    size_t lead = 0, trail = 0;
                    while (lead < n && emb_is_trim_char(chars[lead].cp)) lead++;
                    while (trail < n && emb_is_trim_char(chars[n - 1 - trail].cp)) trail++;
                    if (!out->oom) {
                        out->v[out->n - 1].lead = (uint16_t)(lead > 0xFFFF ? 0xFFFF : lead);
                        out->v[out->n - 1].trail = (uint16_t)(trail > 0xFFFF ? 0xFFFF : trail);
                    }
                }
                return;
            }
        }
    }
    if (n > (SIZE_MAX / 4) / (sizeof(symbol) + 3 * sizeof(merge_item))) {
        sc->oom = 1;
        return;
    }
    /* at most one symbol per byte (byte fallback), and three heap entries per merge and pair */
    size_t max_sym = sc->byte_char[n];
    symbol *sym = (symbol *)emb_scratch_model(sc, max_sym * sizeof(symbol) + 3 * (max_sym + 1) * sizeof(merge_item));
    if (!sym) return;
    merge_item *heap = (merge_item *)(sym + max_sym);
    int32_t ns = 0;
    int32_t unk_first = -1, unk_n = 0;   /* a pending unknown symbol */
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = chars[i].cp;
        int32_t id;
        const uint8_t *s = sc->bytes + sc->byte_char[i];
        size_t len = sc->byte_char[i + 1] - sc->byte_char[i];
        id = cp < 0x144 ? t->low_ids[cp] : emb_vocab_lookup(tok, s, len);   /* byte-level words: the table */
        if (id >= 0) {
            if (unk_n) {
                sym[ns] = (symbol){spec->unk_id, ns - 1, -1, unk_first, unk_first + unk_n - 1};
                ns++;
                unk_n = 0;
            }
            sym[ns] = (symbol){id, ns - 1, -1, (int32_t)i, (int32_t)i};
            ns++;
            continue;
        }
        if (spec->byte_fallback) {
            size_t b = 0;
            while (b < len && t->byte_ids[s[b]] >= 0) b++;
            if (b == len) {
                for (b = 0; b < len; b++) {
                    sym[ns] = (symbol){t->byte_ids[s[b]], ns - 1, -1, (int32_t)i, (int32_t)i};
                    ns++;
                }
                continue;
            }
        }
        if (spec->unk_id >= 0) {
            if (unk_n && spec->fuse_unk) {
                unk_n++;
            } else {
                if (unk_n) {
                    sym[ns] = (symbol){spec->unk_id, ns - 1, -1, unk_first, unk_first + unk_n - 1};
                    ns++;
                }
                unk_first = (int32_t)i;
                unk_n = 1;
            }
        }
    }
    if (unk_n) {
        sym[ns] = (symbol){spec->unk_id, ns - 1, -1, unk_first, unk_first + unk_n - 1};
        ns++;
    }
    for (int32_t k = 0; k + 1 < ns; k++) sym[k].next = k + 1;
    size_t nh = 0;
    for (int32_t k = 0; k + 1 < ns; k++) push_pair(t, spec, heap, &nh, sym, k);
    while (nh > 0) {
        merge_item top = heap_pop(heap, &nh);
        symbol *cur = &sym[top.pos];
        if (cur->first < 0 || cur->next < 0) continue;
        symbol *right = &sym[cur->next];
        int32_t r = find_merge(t, spec->merges, cur->id, right->id);
        if (r < 0 || spec->merges[3 * r + 2] != top.new_id) continue;   /* an expired entry */
        cur->id = top.new_id;
        cur->last = right->last;
        cur->next = right->next;
        right->first = -1;
        if (cur->next >= 0) sym[cur->next].prev = top.pos;
        if (cur->prev >= 0) push_pair(t, spec, heap, &nh, sym, cur->prev);
        push_pair(t, spec, heap, &nh, sym, top.pos);
    }
    for (int32_t k = 0; k < ns; k++) {
        if (sym[k].first < 0) continue;
        emb_tokens_push(out, sym[k].id, chars[sym[k].first].start, chars[sym[k].last].end);
    }
    if (spec->trim_offsets) {
        for (size_t k = first_out; k < out->n; k++) emb_token_trim_counts(tok, &out->v[k]);
    }
}

size_t emb_bpe_tables_memory(const void *p) {
    const bpe_tables *t = (const bpe_tables *)p;
    return sizeof(*t) + ((size_t)t->mask + 1) * sizeof(int32_t);
}
