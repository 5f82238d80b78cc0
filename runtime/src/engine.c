/*
 * engine.c — the public API: status messages, model from bundle, context, tokenize, encode.
 *
 * Input checks live here, so encoder.c and the kernels can assume valid shapes and ids.
 */
#include "edgembed.h"

#include "bundle.h"
#include "kernels.h"
#include "model.h"
#include "platform.h"
#include "threads.h"

#define EMB_STR_(x) #x
#define EMB_STR(x) EMB_STR_(x)

const char *emb_status_str(emb_status status) {
    switch (status) {
    case EMB_STATUS_OK: return "ok";
    case EMB_STATUS_INVALID_ARGUMENT: return "invalid argument (a NULL pointer, a zero size or an option out of range)";
    case EMB_STATUS_OUT_OF_MEMORY: return "out of memory";
    case EMB_STATUS_BUFFER_TOO_SMALL: return "the output buffer is too small for the result";
    case EMB_STATUS_BAD_MAGIC:
        return "not an edgembed bundle (magic missing); create one with `embed bundle MODEL`";
    case EMB_STATUS_BAD_VERSION:
        return "bundle format version outside the supported range " EMB_STR(EMB_BUNDLE_VERSION_MIN)
               " through " EMB_STR(EMB_BUNDLE_VERSION_MAX) "; regenerate the bundle with `embed bundle MODEL`";
    case EMB_STATUS_TRUNCATED:
        return "the bundle is truncated (shorter than its header declares); download or regenerate it with `embed bundle MODEL`";
    case EMB_STATUS_CORRUPT:
        return "the bundle is corrupt (bad header, shapes, offsets or checksum); regenerate it with `embed bundle MODEL`";
    case EMB_STATUS_UNSUPPORTED:
        return "the bundle uses a feature this engine build does not support (architecture, quantization or tokenizer)";
    case EMB_STATUS_TOO_LONG:
        return "input longer than the model's max length; enable truncation or shorten it";
    }
    return "unknown status";
}

/* ── reading the configuration ─────────────────────────────────────────────────────── */

static const void *tensor(const emb_bundle *b, const char *name, emb_dtype dt, int ndim, int64_t d0,
                          int64_t d1, int64_t d2, int64_t d3) {
    const emb_tensor *t = emb_bundle_tensor(b, name);
    int64_t want[4] = {d0, d1, d2, d3};
    if (!t || t->dtype != dt || t->ndim != ndim) return NULL;
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] != want[i]) return NULL;
    }
    return t->data;
}

/* "layers.<l>.<name><suffix>" into buf (cut to fit; a cut name simply finds no tensor). */
static const char *layer_name(char *buf, size_t cap, int32_t l, const char *name, const char *suffix) {
    size_t n = 0;
    char digits[12];
    int nd = 0;
    do {
        digits[nd++] = (char)('0' + l % 10);
        l /= 10;
    } while (l && nd < 11);
    for (const char *p = "layers."; *p && n + 1 < cap; p++) buf[n++] = *p;
    while (nd && n + 1 < cap) buf[n++] = digits[--nd];
    if (n + 1 < cap) buf[n++] = '.';
    for (const char *p = name; *p && n + 1 < cap; p++) buf[n++] = *p;
    for (const char *p = suffix; *p && n + 1 < cap; p++) buf[n++] = *p;
    buf[n] = '\0';
    return buf;
}

static emb_status load_linear(const emb_bundle *b, int32_t l, const char *name, int32_t n, int32_t k, emb_linear *out) {
    char buf[96];
    out->n = n;
    out->k = k;
    out->q = tensor(b, layer_name(buf, sizeof buf, l, name, ".q"), EMB_DTYPE_I8, 4, n / 4, k / 4, 4, 4);
    out->scale = tensor(b, layer_name(buf, sizeof buf, l, name, ".scale"), EMB_DTYPE_F32, 3, n / 4, k / EMB_BLOCK, 4, 0);
    out->bias = tensor(b, layer_name(buf, sizeof buf, l, name, ".bias"), EMB_DTYPE_F32, 1, n, 0, 0, 0);
    return (out->q && out->scale && out->bias) ? EMB_STATUS_OK : EMB_STATUS_CORRUPT;
}

static emb_status load_model(emb_model *m) {
    const emb_bundle *b = &m->bundle;
    emb_config *cf = &m->config;
    emb_weights *w = &m->weights;
    emb_status s;

    if (!emb_bundle_meta_is(b, "arch", "bert") || !emb_bundle_meta_is(b, "hidden_act", "gelu") ||
        !emb_bundle_meta_is(b, "quantization", "int8-block32") || !emb_bundle_meta_is(b, "weight_layout", "n4k4")) {
        return EMB_STATUS_UNSUPPORTED;
    }
    if ((s = emb_bundle_meta_int(b, "dim", 32, 8192, &cf->dim)) || (s = emb_bundle_meta_int(b, "n_layers", 1, 256, &cf->n_layers)) ||
        (s = emb_bundle_meta_int(b, "n_heads", 1, 256, &cf->n_heads)) || (s = emb_bundle_meta_int(b, "ffn_dim", 32, 65536, &cf->ffn_dim)) ||
        (s = emb_bundle_meta_int(b, "vocab_size", 1, 1 << 24, &cf->vocab_size)) ||
        (s = emb_bundle_meta_int(b, "max_positions", 2, 1 << 16, &cf->max_positions)) ||
        (s = emb_bundle_meta_int(b, "type_vocab_size", 1, 1 << 16, &cf->type_vocab_size)) ||
        (s = emb_bundle_meta_int(b, "max_length", 2, 1 << 16, &cf->max_length)) || (s = emb_bundle_meta_bool(b, "normalize", &cf->normalize)) ||
        (s = emb_bundle_meta_float(b, "layer_norm_eps", &cf->eps))) {
        return s;
    }
    if (emb_bundle_meta_is(b, "pooling", "mean")) {
        cf->pooling = EMB_POOLING_MEAN;
    } else if (emb_bundle_meta_is(b, "pooling", "cls")) {
        cf->pooling = EMB_POOLING_CLS;
    } else {
        return EMB_STATUS_UNSUPPORTED;
    }
    if (cf->dim % EMB_BLOCK || cf->ffn_dim % EMB_BLOCK || cf->dim % cf->n_heads ||
        (cf->dim / cf->n_heads) % 4 || cf->max_length > cf->max_positions) {
        return EMB_STATUS_CORRUPT;
    }
    cf->head_dim = cf->dim / cf->n_heads;

    int64_t c = cf->dim;
    w->word_q = tensor(b, "embeddings.word.q", EMB_DTYPE_I8, 2, cf->vocab_size, c, 0, 0);
    w->word_scale = tensor(b, "embeddings.word.scale", EMB_DTYPE_F32, 2, cf->vocab_size, c / EMB_BLOCK, 0, 0);
    w->position = tensor(b, "embeddings.position", EMB_DTYPE_F32, 2, cf->max_positions, c, 0, 0);
    w->token_type = tensor(b, "embeddings.token_type", EMB_DTYPE_F32, 2, cf->type_vocab_size, c, 0, 0);
    w->norm_w = tensor(b, "embeddings.norm.weight", EMB_DTYPE_F32, 1, c, 0, 0, 0);
    w->norm_b = tensor(b, "embeddings.norm.bias", EMB_DTYPE_F32, 1, c, 0, 0, 0);
    if (!w->word_q || !w->word_scale || !w->position || !w->token_type || !w->norm_w || !w->norm_b) {
        return EMB_STATUS_CORRUPT;
    }
    w->layers = emb_alloc(sizeof(emb_layer) * (size_t)cf->n_layers);
    if (!w->layers) return EMB_STATUS_OUT_OF_MEMORY;
    for (int32_t l = 0; l < cf->n_layers; l++) {
        emb_layer *L = &w->layers[l];
        char name[96];
        if ((s = load_linear(b, l, "attention.qkv", 3 * cf->dim, cf->dim, &L->qkv)) ||
            (s = load_linear(b, l, "attention.out", cf->dim, cf->dim, &L->out)) ||
            (s = load_linear(b, l, "ffn.up", cf->ffn_dim, cf->dim, &L->up)) ||
            (s = load_linear(b, l, "ffn.down", cf->dim, cf->ffn_dim, &L->down))) {
            return s;
        }
        L->attn_norm_w = tensor(b, layer_name(name, sizeof name, l, "attention.norm.weight", ""), EMB_DTYPE_F32, 1, c, 0, 0, 0);
        L->attn_norm_b = tensor(b, layer_name(name, sizeof name, l, "attention.norm.bias", ""), EMB_DTYPE_F32, 1, c, 0, 0, 0);
        L->ffn_norm_w = tensor(b, layer_name(name, sizeof name, l, "ffn.norm.weight", ""), EMB_DTYPE_F32, 1, c, 0, 0, 0);
        L->ffn_norm_b = tensor(b, layer_name(name, sizeof name, l, "ffn.norm.bias", ""), EMB_DTYPE_F32, 1, c, 0, 0, 0);
        if (!L->attn_norm_w || !L->attn_norm_b || !L->ffn_norm_w || !L->ffn_norm_b) return EMB_STATUS_CORRUPT;
    }

    s = emb_tokenizer_from_bundle(&m->tokenizer, b, cf->vocab_size, cf->max_length);
    if (s != EMB_STATUS_OK) {
        m->tokenizer = NULL;
        return s;
    }
    return EMB_STATUS_OK;
}

emb_status emb_model_init(emb_model **out, const void *bundle, size_t size) {
    return emb_model_init_ex(out, bundle, size, 1);
}

emb_status emb_model_init_ex(emb_model **out, const void *bundle, size_t size, int verify_crc) {
    if (!out) return EMB_STATUS_INVALID_ARGUMENT;
    *out = NULL;
    if (!bundle || size == 0 || ((uintptr_t)bundle & 3u)) return EMB_STATUS_INVALID_ARGUMENT;
    emb_model *m = emb_alloc(sizeof(emb_model));
    if (!m) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(m, 0, sizeof *m);
    emb_status s = emb_bundle_parse(&m->bundle, bundle, size, verify_crc);
    if (s == EMB_STATUS_OK) s = load_model(m);
    if (s != EMB_STATUS_OK) {
        emb_model_free(m);
        return s;
    }
    *out = m;
    return EMB_STATUS_OK;
}

void emb_model_free(emb_model *model) {
    if (!model) return;
    if (model->tokenizer) emb_tokenizer_free(model->tokenizer);
    emb_dealloc(model->weights.layers);
    emb_bundle_release(&model->bundle);
    emb_dealloc(model);
}

void emb_model_get_info(const emb_model *model, emb_model_info *info) {
    if (!model || !info) return;
    const emb_config *cf = &model->config;
    info->dim = cf->dim;
    info->n_layers = cf->n_layers;
    info->n_heads = cf->n_heads;
    info->ffn_dim = cf->ffn_dim;
    info->vocab_size = cf->vocab_size;
    info->max_length = cf->max_length;
    info->pooling = cf->pooling;
    info->normalize = cf->normalize;
    info->version = model->bundle.version;
}

const char *emb_model_get_meta(const emb_model *model, const char *key, size_t *len) {
    if (!model || !key) return NULL;
    const emb_str *v = emb_bundle_meta(&model->bundle, key);
    if (!v) return NULL;
    if (len) *len = v->len;
    return v->ptr;
}

emb_status emb_model_tokenize(const emb_model *model, const char *utf8, size_t len, int truncate, int32_t *ids,
                              size_t cap, size_t *n_ids, size_t *n_full) {
    if (!model || (!utf8 && len) || !n_ids || (!ids && cap)) return EMB_STATUS_INVALID_ARGUMENT;
    size_t full = 0;
    emb_status s = emb_tokenizer_encode(model->tokenizer, utf8 ? utf8 : "", len, truncate, ids, cap, n_ids, &full);
    if (n_full) *n_full = full;
    return s;
}

emb_status emb_model_tokenize_ex(const emb_model *model, const char *utf8, size_t len, const char *pair,
                                 size_t pair_len, int truncate, int32_t *ids, int32_t *type_ids, uint32_t *offsets,
                                 size_t cap, size_t *n_ids, size_t *n_full) {
    if (!model || (!utf8 && len) || (!pair && pair_len) || !n_ids || (!ids && cap)) return EMB_STATUS_INVALID_ARGUMENT;
    return emb_tokenizer_encode_ex(model->tokenizer, utf8 ? utf8 : "", len, pair, pair_len, truncate, ids, type_ids,
                                   offsets, cap, n_ids, n_full);
}

/* ── context ───────────────────────────────────────────────────────────────────────── */

#define EMB_MAX_CONTEXT_TOKENS ((size_t)1 << 20)

static size_t align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

emb_status emb_context_init(emb_context **out, const emb_model *model, size_t max_tokens) {
    return emb_context_init_ex(out, model, max_tokens, 1, NULL);
}

#if EMB_KERNELS == EMB_KERNELS_NATIVE
#define EMB_R EMB_NATIVE_PANEL_ROWS
#else
#define EMB_R EMB_PANEL_ROWS
#endif
#define EMB_N_PARTS 10

emb_status emb_context_init_ex(emb_context **out, const emb_model *model, size_t max_tokens, int32_t n_threads,
                               const char *kernels) {
    if (!out) return EMB_STATUS_INVALID_ARGUMENT;
    *out = NULL;
    if (!model || max_tokens == 0 || max_tokens > EMB_MAX_CONTEXT_TOKENS) return EMB_STATUS_INVALID_ARGUMENT;
    if (n_threads < 0 || n_threads > EMB_MAX_THREADS) return EMB_STATUS_INVALID_ARGUMENT;
    size_t w = n_threads > 1 ? (size_t)n_threads : 1;
    const emb_kernels *kset = emb_kernels_find(kernels);
    if (!kset) return EMB_STATUS_UNSUPPORTED;
    const emb_config *cf = &model->config;
    size_t t = max_tokens, c = (size_t)cf->dim, f = (size_t)cf->ffn_dim, r = EMB_R;
    size_t max_seq = t < (size_t)cf->max_length ? t : (size_t)cf->max_length;
    size_t scratch = emb_attention_scratch(max_seq, (size_t)cf->head_dim);
    /* sizes in 64-bit first: on wasm32 a large max_tokens must fail cleanly, not wrap around */
    uint64_t t64 = t, c64 = c, f64 = f, wr = (uint64_t)w * r, qx = sizeof(emb_qx);
    uint64_t sizes64[EMB_N_PARTS] = {
        t64 * c64 * 4, t64 * 3 * c64 * 4, t64 * c64 * 4, t64 * c64 * qx, t64 * (c64 / EMB_BLOCK) * 4, (t64 + 1) * 4,
        wr * (c > f ? c64 : f64) * 4, wr * f64 * qx, wr * (f64 / EMB_BLOCK) * 4, (uint64_t)w * scratch * 4,
    };
    uint64_t total64 = 0;
    size_t sizes[EMB_N_PARTS];
    for (int i = 0; i < EMB_N_PARTS; i++) {
        total64 += (sizes64[i] + 63u) & ~(uint64_t)63u;
        sizes[i] = (size_t)sizes64[i];
    }
    if (total64 > (uint64_t)(SIZE_MAX / 2)) return EMB_STATUS_OUT_OF_MEMORY;
    size_t total = (size_t)total64;

    emb_context *ctx = emb_alloc(sizeof(emb_context));
    if (!ctx) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(ctx, 0, sizeof *ctx);
    uint8_t *arena = emb_alloc(total);
    emb_status st = arena ? emb_threads_init(&ctx->threads, (int)w) : EMB_STATUS_OUT_OF_MEMORY;
    if (st != EMB_STATUS_OK) {
        emb_dealloc(arena);
        emb_dealloc(ctx);
        return st;
    }
    emb_memset(arena, 0, total);
    ctx->model = model;
    ctx->kernels = kset;
    ctx->n_workers = w;
    ctx->max_tokens = t;
    ctx->max_seq = max_seq;
    ctx->panel_rows = r;
    ctx->scratch_floats = scratch;
    ctx->arena = arena;
    uint8_t *p = arena;
    void *parts[EMB_N_PARTS];
    for (int i = 0; i < EMB_N_PARTS; i++) {
        parts[i] = p;
        p += align64(sizes[i]);
    }
    ctx->x = parts[0];
    ctx->qkv = parts[1];
    ctx->attn = parts[2];
    ctx->xq = parts[3];
    ctx->xs = parts[4];
    ctx->starts = parts[5];
    ctx->panel = parts[6];
    ctx->hq = parts[7];
    ctx->hs = parts[8];
    ctx->scratch = parts[9];
    *out = ctx;
    return EMB_STATUS_OK;
}

void emb_context_free(emb_context *ctx) {
    if (!ctx) return;
    emb_threads_free(ctx->threads);
    emb_dealloc(ctx->arena);
    emb_dealloc(ctx);
}

int32_t emb_context_threads(const emb_context *ctx) { return ctx ? (int32_t)ctx->n_workers : 0; }

const char *emb_context_kernels(const emb_context *ctx) { return ctx ? ctx->kernels->name : ""; }

size_t emb_context_max_tokens(const emb_context *ctx) { return ctx ? ctx->max_tokens : 0; }

emb_status emb_context_encode(emb_context *ctx, const int32_t *ids, const int32_t *lengths, size_t n_seqs,
                              emb_pooling pooling, int normalize, float *out, size_t out_cap) {
    if (!ctx || !ids || !lengths || !out || n_seqs == 0) return EMB_STATUS_INVALID_ARGUMENT;
    const emb_config *cf = &ctx->model->config;
    if (pooling != EMB_POOLING_MODEL && pooling != EMB_POOLING_MEAN && pooling != EMB_POOLING_CLS) {
        return EMB_STATUS_INVALID_ARGUMENT;
    }
    size_t total = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        if (lengths[s] <= 0) return EMB_STATUS_INVALID_ARGUMENT;
        if (lengths[s] > cf->max_length) return EMB_STATUS_TOO_LONG;
        total += (size_t)lengths[s];
        if (total > ctx->max_tokens) return EMB_STATUS_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < total; i++) {
        if (ids[i] < 0 || ids[i] >= cf->vocab_size) return EMB_STATUS_INVALID_ARGUMENT;
    }
    if (n_seqs > out_cap / (size_t)cf->dim) return EMB_STATUS_BUFFER_TOO_SMALL;

    emb_encoder_forward(ctx, ids, lengths, n_seqs);
    emb_pooling pool = pooling == EMB_POOLING_MODEL ? (emb_pooling)cf->pooling : pooling;
    int norm = normalize < 0 ? cf->normalize : normalize > 0;
    emb_pool(ctx->x, (size_t)cf->dim, lengths, n_seqs, pool, norm, out);
    return EMB_STATUS_OK;
}
