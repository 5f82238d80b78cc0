/*
 * engine.c — the public API: status messages, model from bundle, context, tokenize, run.
 *
 * Every configuration value is read and checked here, against its range and against the shapes
 * of the tensors that depend on it; every metadata key and every tensor of the bundle must be
 * one the configuration uses. Input checks live here too, so encoder.c and the kernels can
 * assume valid shapes and ids.
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
        return "the bundle is corrupt or was altered (bad header, values, shapes, offsets or checksum); regenerate it with `embed bundle MODEL`";
    case EMB_STATUS_UNSUPPORTED:
        return "the bundle uses a feature this engine build does not support (architecture, activation, head, quantization or "
               "tokenizer); a newer edgembed may run it";
    case EMB_STATUS_TOO_LONG:
        return "input longer than the model's max length; enable truncation or shorten it";
    }
    return "unknown status";
}

/* ── reading the configuration ─────────────────────────────────────────────────────── */

/* What the loader has consumed: at the end every metadata key and tensor must have been. */
typedef struct loader {
    const emb_bundle *b;
    uint8_t meta_used[EMB_BUNDLE_MAX_META];
    uint8_t *tensor_used;     /* (n_tensors) */
} loader;

static int str_is(emb_str s, const char *lit) {
    size_t i = 0;
    for (; i < s.len; i++) {
        if (lit[i] == '\0' || lit[i] != s.ptr[i]) return 0;
    }
    return lit[i] == '\0';
}

static int has_prefix(emb_str s, const char *prefix) {
    size_t i = 0;
    for (; prefix[i]; i++) {
        if (i >= s.len || s.ptr[i] != prefix[i]) return 0;
    }
    return 1;
}

static const emb_str *meta(loader *ld, const char *key) {
    for (size_t i = 0; i < ld->b->n_meta; i++) {
        if (str_is(ld->b->meta[i].key, key)) {
            ld->meta_used[i] = 1;
            return &ld->b->meta[i].value;
        }
    }
    return NULL;
}

static emb_status meta_int(loader *ld, const char *key, int64_t lo, int64_t hi, int32_t *out) {
    meta(ld, key);
    return emb_bundle_meta_int(ld->b, key, lo, hi, out);
}

static emb_status meta_bool(loader *ld, const char *key, int32_t *out) {
    meta(ld, key);
    return emb_bundle_meta_bool(ld->b, key, out);
}

static emb_status meta_float(loader *ld, const char *key, double lo, double hi, float *out) {
    meta(ld, key);
    return emb_bundle_meta_float(ld->b, key, lo, hi, out);
}

/* One of `names` (n of them): *out its index. Missing: CORRUPT; another value: UNSUPPORTED. */
static emb_status meta_choice(loader *ld, const char *key, const char *const *names, int n, int32_t *out) {
    const emb_str *v = meta(ld, key);
    if (!v) return EMB_STATUS_CORRUPT;
    for (int i = 0; i < n; i++) {
        if (str_is(*v, names[i])) {
            *out = i;
            return EMB_STATUS_OK;
        }
    }
    return EMB_STATUS_UNSUPPORTED;
}

/* a, then the decimal num (when num >= 0), then b and c, into buf (cut to fit: a cut name simply
   finds no tensor) */
static const char *name_of(char *buf, size_t cap, const char *a, int32_t num, const char *b, const char *c) {
    size_t n = 0;
    for (const char *p = a; *p && n + 1 < cap; p++) buf[n++] = *p;
    if (num >= 0) {
        char digits[12];
        int nd = 0;
        do {
            digits[nd++] = (char)('0' + num % 10);
            num /= 10;
        } while (num && nd < 11);
        while (nd && n + 1 < cap) buf[n++] = digits[--nd];
    }
    for (const char *p = b; *p && n + 1 < cap; p++) buf[n++] = *p;
    for (const char *p = c; *p && n + 1 < cap; p++) buf[n++] = *p;
    buf[n] = '\0';
    return buf;
}

static const emb_tensor *find(loader *ld, const char *name) {
    const emb_tensor *t = emb_bundle_tensor(ld->b, name);
    if (t) ld->tensor_used[t - ld->b->tensors] = 1;
    return t;
}

/* The data of tensor `name` when it has this dtype and shape, else NULL. */
static const void *tensor(loader *ld, const char *name, emb_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2,
                          int64_t d3) {
    const emb_tensor *t = find(ld, name);
    int64_t want[4] = {d0, d1, d2, d3};
    if (!t || t->dtype != dt || t->ndim != ndim) return NULL;
    for (int i = 0; i < ndim; i++) {
        if (t->shape[i] != want[i]) return NULL;
    }
    return t->data;
}

static int present(const loader *ld, const char *name) { return emb_bundle_tensor(ld->b, name) != NULL; }

static const char *const POOLING_NAMES[] = {"mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens", "weightedmean"};
/* every activation's name, in emb_act's order; each key accepts some of them (a bit per emb_act) */
static const char *const ACT_NAMES[] = {"gelu", "gelu_tanh", "relu", "tanh", "identity", "silu"};
#define ACT_BIT(a) (1u << (a))
#define ENCODER_ACTS (ACT_BIT(EMB_ACT_GELU) | ACT_BIT(EMB_ACT_GELU_TANH) | ACT_BIT(EMB_ACT_RELU) | ACT_BIT(EMB_ACT_SILU))
#define DENSE_ACTS (ACT_BIT(EMB_ACT_IDENTITY) | ACT_BIT(EMB_ACT_TANH) | ACT_BIT(EMB_ACT_SILU))
#define CLASSIFIER_ACTS (ENCODER_ACTS | ACT_BIT(EMB_ACT_TANH) | ACT_BIT(EMB_ACT_IDENTITY))

/* An activation `key` may take (`allowed`): *out its emb_act. Missing: CORRUPT; another: UNSUPPORTED. */
static emb_status meta_act(loader *ld, const char *key, unsigned allowed, int32_t *out) {
    emb_status s = meta_choice(ld, key, ACT_NAMES, (int)(sizeof ACT_NAMES / sizeof ACT_NAMES[0]), out);
    if (s) return s;
    return allowed & ACT_BIT(*out) ? EMB_STATUS_OK : EMB_STATUS_UNSUPPORTED;
}

/* "pooling": one of POOLING_NAMES, or several joined by '+' (concatenated in that order), each once. */
static emb_status pooling_modes(loader *ld, emb_config *cf) {
    const emb_str *v = meta(ld, "pooling");
    if (!v) return EMB_STATUS_CORRUPT;
    cf->n_pool_modes = 0;
    size_t start = 0;
    for (size_t i = 0; i <= v->len; i++) {
        if (i < v->len && v->ptr[i] != '+') continue;
        emb_str part = {v->ptr + start, i - start};
        int found = -1;
        for (int m = 0; m < 6; m++) {
            if (str_is(part, POOLING_NAMES[m])) found = m + 1;
        }
        if (found < 0) return part.len ? EMB_STATUS_UNSUPPORTED : EMB_STATUS_CORRUPT;
        for (int32_t j = 0; j < cf->n_pool_modes; j++) {
            if (cf->pool_modes[j] == found) return EMB_STATUS_CORRUPT;
        }
        if (cf->n_pool_modes == 6) return EMB_STATUS_CORRUPT;
        cf->pool_modes[cf->n_pool_modes++] = found;
        start = i + 1;
    }
    cf->pooling = cf->pool_modes[0];
    return EMB_STATUS_OK;
}

static emb_status load_config(loader *ld, emb_config *cf, int32_t dense_act[EMB_MAX_DENSE]) {
    emb_status s;
    int32_t choice;
    meta(ld, "edgembed_bundle");  /* checked by the parser */
    meta(ld, "crc32");
    if (!meta(ld, "name") || !meta(ld, "family")) return EMB_STATUS_CORRUPT;
    /* "fp32-rescored": fp32 linears and word table, an int8 masked-LM decoder rescored exactly
       (heads.c); SPLADE models only */
    static const char *const schemes[] = {"int8-block32", "fp32-rescored"}, *const n4k4[] = {"n4k4"};
    static const char *const heads[] = {"none", "classifier", "mlm"};
    if ((s = meta_choice(ld, "quantization", schemes, 2, &cf->linear_f32)) ||
        (s = meta_choice(ld, "weight_layout", n4k4, 1, &choice)) || (s = meta_choice(ld, "head", heads, 3, &cf->head))) {
        return s;
    }
    if (cf->linear_f32 && cf->head != EMB_HEAD_MLM) return EMB_STATUS_UNSUPPORTED;
    if (cf->head == EMB_HEAD_CLASSIFIER) {
        static const char *const pools[] = {"cls", "mean"};
        if ((s = meta_int(ld, "n_labels", 1, 65536, &cf->n_labels)) ||
            (s = meta_choice(ld, "classifier.pooling", pools, 2, &choice))) {
            return s;
        }
        cf->cls_pooling = choice ? EMB_POOLING_MEAN : EMB_POOLING_CLS;
        if ((s = meta_act(ld, "classifier.activation", CLASSIFIER_ACTS, &cf->cls_act))) return s;
        if (!meta(ld, "classifier.score_activation")) return EMB_STATUS_CORRUPT;  /* for hosts */
    } else if (cf->head == EMB_HEAD_MLM) {
        static const char *const pools[] = {"max", "sum"}, *const weights[] = {"relu", "log1p_relu"};
        if ((s = meta_act(ld, "mlm.activation", ENCODER_ACTS, &cf->mlm_act)) ||
            (s = meta_choice(ld, "sparse.pooling", pools, 2, &choice))) {
            return s;
        }
        cf->sparse_pooling = choice ? EMB_SPARSE_SUM : EMB_SPARSE_MAX;
        if ((s = meta_choice(ld, "sparse.activation", weights, 2, &cf->sparse_log1p2))) return s;
    }
    if ((s = meta_int(ld, "dim", 1, 16384, &cf->dim)) || (s = meta_int(ld, "n_layers", 1, 256, &cf->n_layers)) ||
        (s = meta_int(ld, "n_heads", 1, 256, &cf->n_heads)) || (s = meta_int(ld, "ffn_dim", 1, 65536, &cf->ffn_dim)) ||
        (s = meta_int(ld, "vocab_size", 1, 1 << 24, &cf->vocab_size)) ||
        (s = meta_int(ld, "max_length", 2, 1 << 16, &cf->max_length)) ||
        (s = meta_float(ld, "layer_norm_eps", 0.0, 1.0, &cf->eps)) ||
        (s = meta_int(ld, "relative_buckets", 0, 1024, &cf->rel_buckets)) ||
        (s = meta_int(ld, "type_vocab_size", 0, 1 << 16, &cf->type_vocab_size)) ||
        (s = meta_bool(ld, "final_norm", &cf->final_norm)) || (s = meta_bool(ld, "norm_bias", &cf->norm_bias)) ||
        (s = meta_bool(ld, "attention_bias", &cf->attention_bias)) ||
        (s = meta_bool(ld, "ffn_bias", &cf->ffn_bias)) ||
        (s = meta_int(ld, "local_window", 0, 1 << 20, &cf->local_window)) ||
        (s = meta_bool(ld, "include_prompt", &cf->include_prompt)) ||
        (s = meta_int(ld, "n_dense", 0, EMB_MAX_DENSE, &cf->n_dense)) ||
        (s = meta_bool(ld, "normalize", &cf->normalize))) {
        return s;
    }
    /* sentence-transformers' max_active_dims, for hosts (they pass it as emb_request.top_k);
       written only when the model sets it, 1 .. vocab_size */
    if (cf->head == EMB_HEAD_MLM && meta(ld, "sparse.max_active_dims") &&
        (s = meta_int(ld, "sparse.max_active_dims", 1, cf->vocab_size, &choice))) {
        return s;
    }
    static const char *const positions[] = {"absolute", "rotary"}, *const norms[] = {"post", "pre"};
    static const char *const ffns[] = {"mlp", "glu"};
    if ((s = meta_choice(ld, "position", positions, 2, &cf->position)) || (s = meta_choice(ld, "norm", norms, 2, &cf->pre_norm)) ||
        (s = meta_choice(ld, "ffn", ffns, 2, &cf->glu)) || (s = meta_act(ld, "activation", ENCODER_ACTS, &cf->act)) ||
        (s = pooling_modes(ld, cf))) {
        return s;
    }
    for (int32_t i = 0; i < cf->n_dense; i++) {
        char key[48];
        if ((s = meta_act(ld, name_of(key, sizeof key, "dense.", i, ".activation", ""), DENSE_ACTS, &dense_act[i]))) {
            return s;
        }
    }
    if (cf->dim % cf->n_heads) return EMB_STATUS_CORRUPT;
    cf->head_dim = cf->dim / cf->n_heads;
    cf->position_pad_id = -1;
    if (cf->position == EMB_POSITION_ABSOLUTE) {
        if ((s = meta_int(ld, "max_positions", 1, 1 << 20, &cf->max_positions)) ||
            (s = meta_int(ld, "position_offset", 0, 1 << 20, &cf->position_offset))) {
            return s;
        }
        const emb_str *pad = meta(ld, "position_pad_id");
        if (!pad) return EMB_STATUS_CORRUPT;
        if (!str_is(*pad, "none") &&
            (s = emb_bundle_meta_int(ld->b, "position_pad_id", 0, cf->vocab_size - 1, &cf->position_pad_id))) {
            return s;
        }
        /* the last row a token can take; a padding id's own row is position_pad_id */
        if ((int64_t)cf->position_offset + cf->max_length > cf->max_positions || cf->position_pad_id >= cf->max_positions) {
            return EMB_STATUS_CORRUPT;
        }
        if (cf->position_pad_id >= 0 && cf->position_offset != cf->position_pad_id + 1) return EMB_STATUS_CORRUPT;
    } else {
        float theta;
        if ((s = meta_float(ld, "rope_theta_global", 0.0, 1e12, &theta)) ||
            (s = meta_float(ld, "rope_theta_local", 0.0, 1e12, &theta))) {
            return s;
        }
        if (cf->head_dim % 2) return EMB_STATUS_CORRUPT;
    }
    const emb_str *pattern = meta(ld, "layer_attention");
    if (!pattern || pattern->len != (size_t)cf->n_layers) return EMB_STATUS_CORRUPT;
    int any_local = 0;
    for (size_t l = 0; l < pattern->len; l++) {
        if (pattern->ptr[l] != 'g' && pattern->ptr[l] != 'l') return EMB_STATUS_CORRUPT;
        any_local |= pattern->ptr[l] == 'l';
    }
    if (any_local != (cf->local_window > 0)) return EMB_STATUS_CORRUPT;
    /* "attention": "int8" (attention_q8.c), "fp32", or "auto": each sequence by its own length,
       int8 from "attention.int8_min_tokens" tokens on; bundles written before the key: fp32 */
    const emb_str *attention = meta(ld, "attention");
    if (attention && !str_is(*attention, "fp32")) {
        cf->attention_q8 = 1;
        cf->attention_q8_min = 1;
        if (str_is(*attention, "auto")) {
            if ((s = meta_int(ld, "attention.int8_min_tokens", 1, 1 << 16, &cf->attention_q8_min))) return s;
        } else if (!str_is(*attention, "int8")) {
            return EMB_STATUS_UNSUPPORTED;
        }
    }
    cf->dim_p = (int32_t)emb_pad32((size_t)cf->dim);
    cf->ffn_p = (int32_t)emb_pad32((size_t)cf->ffn_dim);
    cf->up_n = (int32_t)emb_pad32((size_t)cf->ffn_dim * (cf->glu ? 2u : 1u));
    cf->qkv_n = (int32_t)emb_pad32(3 * (size_t)cf->dim);
    return EMB_STATUS_OK;
}

/* ── reading the weights ───────────────────────────────────────────────────────────── */

/* The padding of a packed linear (rows n .. np-1, columns k .. kp-1) holds exact zeros. */
static int padding_is_zero(const emb_linear *lin, size_t n, size_t k) {
    size_t np = (size_t)lin->n, kp = (size_t)lin->k, kb = kp / EMB_BLOCK;
    for (size_t row = 0; lin->w && row < np; row++) {  /* fp32: the same packing, no scales */
        size_t g = row / 4, r = row % 4;
        for (size_t col = row < n ? k : 0; col < kp; col++) {
            if (lin->w[((g * (kp / 4) + col / 4) * 4 + r) * 4 + col % 4] != 0.0f) return 0;
        }
        if (row >= n && lin->bias[row] != 0.0f) return 0;
    }
    for (size_t row = 0; !lin->w && row < np; row++) {
        size_t g = row / 4, r = row % 4;
        size_t from = row < n ? k : 0;
        for (size_t col = from; col < kp; col++) {
            if (lin->q[((g * (kp / 4) + col / 4) * 4 + r) * 4 + col % 4] != 0) return 0;
        }
        for (size_t b = row < n ? (k + EMB_BLOCK - 1) / EMB_BLOCK : 0; b < kb; b++) {
            if (lin->scale[(g * kb + b) * 4 + r] != 0.0f) return 0;
        }
        if (row >= n && lin->bias[row] != 0.0f) return 0;
    }
    return 1;
}

/* NAME.q, NAME.scale and (when its layer has biases) NAME.bias of a linear W (n, k); an fp32
   linear (f32) has NAME.weight, F32 (Np/4, Kp/4, 4, 4) in the same packing, instead of both. */
static emb_status load_linear(loader *ld, const char *name, int32_t n, int32_t k, int with_bias, const float *zeros,
                              int f32, emb_linear *out) {
    char buf[96];
    int64_t np = (int64_t)emb_pad32((size_t)n), kp = (int64_t)emb_pad32((size_t)k);
    out->n = (int32_t)np;
    out->k = (int32_t)kp;
    out->q = NULL;
    out->scale = out->w = NULL;
    if (f32) {
        out->w = tensor(ld, name_of(buf, sizeof buf, name, -1, ".weight", ""), EMB_DTYPE_F32, 4, np / 4, kp / 4, 4, 4);
    } else {
        out->q = tensor(ld, name_of(buf, sizeof buf, name, -1, ".q", ""), EMB_DTYPE_I8, 4, np / 4, kp / 4, 4, 4);
        out->scale = tensor(ld, name_of(buf, sizeof buf, name, -1, ".scale", ""), EMB_DTYPE_F32, 3, np / 4, kp / EMB_BLOCK, 4, 0);
    }
    out->bias = with_bias ? tensor(ld, name_of(buf, sizeof buf, name, -1, ".bias", ""), EMB_DTYPE_F32, 1, np, 0, 0, 0) : zeros;
    if ((f32 ? !out->w : !out->q || !out->scale) || !out->bias) return EMB_STATUS_CORRUPT;
    return padding_is_zero(out, (size_t)n, (size_t)k) ? EMB_STATUS_OK : EMB_STATUS_CORRUPT;
}

void emb_tile_layout(const int8_t *q, size_t n, size_t k, int8_t *qt) {
    size_t cells = k / 4;
    for (size_t s = 0; s < n / 16; s++) {
        for (size_t j = 0; j < cells; j++) {
            for (size_t g = 0; g < 4; g++) emb_memcpy(qt + (s * cells + j) * 64 + g * 16, q + ((4 * s + g) * cells + j) * 16, 16);
        }
    }
}

/* The AMX tile layout of every int8 linear whose N is a multiple of 16 (all of a bundle's: N is
   padded to 32), in one allocation, where the "amx" kernel set runs: its GEMM then reads the
   weights as they are instead of packing them on every call (model.h, emb_linear.qt). */
static emb_status tile_weights(emb_model *m) {
#if EMB_KERNELS == EMB_KERNELS_NATIVE
    if (!emb_kernels_find("amx")) return EMB_STATUS_OK;
    emb_weights *w = &m->weights;
    emb_linear *lins[4 * 64 + 2];
    size_t n_lins = 0, bytes = 0;
    for (int32_t l = 0; l < m->config.n_layers && l < 64; l++) {
        emb_layer *L = &w->layers[l];
        lins[n_lins++] = &L->qkv, lins[n_lins++] = &L->out, lins[n_lins++] = &L->up, lins[n_lins++] = &L->down;
    }
    lins[n_lins++] = &w->head.transform, lins[n_lins++] = &w->head.decoder;
    for (size_t i = 0; i < n_lins; i++) {
        const emb_linear *lin = lins[i];
        if (lin->q && lin->n % 16 == 0) bytes += (size_t)lin->n * (size_t)lin->k;
    }
    if (bytes == 0 || m->config.n_layers > 64) return EMB_STATUS_OK;
    w->tiles = emb_alloc(bytes);
    if (!w->tiles) return EMB_STATUS_OUT_OF_MEMORY;
    int8_t *p = w->tiles;
    for (size_t i = 0; i < n_lins; i++) {
        emb_linear *lin = lins[i];
        if (!lin->q || lin->n % 16) continue;
        emb_tile_layout(lin->q, (size_t)lin->n, (size_t)lin->k, p);
        lin->qt = p;
        p += (size_t)lin->n * (size_t)lin->k;
    }
#else
    (void)m;
#endif
    return EMB_STATUS_OK;
}

/* NAME.weight (C) and, with norm biases, NAME.bias. Absent and optional: both NULL. */
static emb_status load_norm(loader *ld, const char *name, int optional, const emb_config *cf, const float *zeros,
                            const float **w, const float **b) {
    char buf[96];
    *w = *b = NULL;
    if (optional && !present(ld, name_of(buf, sizeof buf, name, -1, ".weight", ""))) {
        return present(ld, name_of(buf, sizeof buf, name, -1, ".bias", "")) ? EMB_STATUS_CORRUPT : EMB_STATUS_OK;
    }
    *w = tensor(ld, name_of(buf, sizeof buf, name, -1, ".weight", ""), EMB_DTYPE_F32, 1, cf->dim, 0, 0, 0);
    *b = cf->norm_bias ? tensor(ld, name_of(buf, sizeof buf, name, -1, ".bias", ""), EMB_DTYPE_F32, 1, cf->dim, 0, 0, 0)
                       : zeros;
    return *w && *b ? EMB_STATUS_OK : EMB_STATUS_CORRUPT;
}

/* MPNet: the bias of every (head, j − i) from the bucket table, precomputed once (model.h). */
static emb_status load_relative(loader *ld, emb_model *m) {
    const emb_config *cf = &m->config;
    emb_weights *w = &m->weights;
    int64_t span = 2 * (int64_t)cf->max_length - 1;
    const float *bias = tensor(ld, "encoder.relative_bias", EMB_DTYPE_F32, 2, cf->rel_buckets, cf->n_heads, 0, 0);
    const int32_t *bucket = tensor(ld, "encoder.relative_bucket", EMB_DTYPE_I32, 1, span, 0, 0, 0);
    if (!bias || !bucket) return EMB_STATUS_CORRUPT;
    for (int64_t i = 0; i < span; i++) {
        if (bucket[i] < 0 || bucket[i] >= cf->rel_buckets) return EMB_STATUS_CORRUPT;
    }
    w->rel_ld = (size_t)span + 16;  /* the vector kernels read up to 15 past the last key */
    w->rel = emb_alloc(sizeof(float) * w->rel_ld * (size_t)cf->n_heads);
    if (!w->rel) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(w->rel, 0, sizeof(float) * w->rel_ld * (size_t)cf->n_heads);
    for (size_t h = 0; h < (size_t)cf->n_heads; h++) {
        for (size_t d = 0; d < (size_t)span; d++) w->rel[h * w->rel_ld + d] = bias[(size_t)bucket[d] * (size_t)cf->n_heads + h];
    }
    return EMB_STATUS_OK;
}

static emb_status load_head(loader *ld, emb_model *m);

static emb_status load_weights(loader *ld, emb_model *m, const int32_t dense_act[EMB_MAX_DENSE]) {
    const emb_config *cf = &m->config;
    emb_weights *w = &m->weights;
    emb_status s;
    int64_t c = cf->dim, half = cf->head_dim / 2;
    size_t widest = (size_t)cf->qkv_n > (size_t)cf->up_n ? (size_t)cf->qkv_n : (size_t)cf->up_n;
    w->zeros = emb_alloc(sizeof(float) * widest);
    w->layers = emb_alloc(sizeof(emb_layer) * (size_t)cf->n_layers);
    if (!w->zeros || !w->layers) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(w->zeros, 0, sizeof(float) * widest);
    emb_memset(w->layers, 0, sizeof(emb_layer) * (size_t)cf->n_layers);

    if (cf->linear_f32) {
        w->word_f32 = tensor(ld, "embeddings.word", EMB_DTYPE_F32, 2, cf->vocab_size, c, 0, 0);
        if (!w->word_f32) return EMB_STATUS_CORRUPT;
    } else {
        w->word_q = tensor(ld, "embeddings.word.q", EMB_DTYPE_I8, 2, cf->vocab_size, c, 0, 0);
        w->word_scale = tensor(ld, "embeddings.word.scale", EMB_DTYPE_F32, 2, cf->vocab_size, (c + EMB_BLOCK - 1) / EMB_BLOCK, 0, 0);
        if (!w->word_q || !w->word_scale) return EMB_STATUS_CORRUPT;
    }
    if (cf->position == EMB_POSITION_ABSOLUTE) {
        w->position = tensor(ld, "embeddings.position", EMB_DTYPE_F32, 2, cf->max_positions, c, 0, 0);
        if (!w->position) return EMB_STATUS_CORRUPT;
    }
    if (cf->type_vocab_size) {
        w->token_type = tensor(ld, "embeddings.token_type", EMB_DTYPE_F32, 2, cf->type_vocab_size, c, 0, 0);
        if (!w->token_type) return EMB_STATUS_CORRUPT;
    }
    if ((s = load_norm(ld, "embeddings.norm", 0, cf, w->zeros, &w->norm_w, &w->norm_b))) return s;
    if (cf->rel_buckets && (s = load_relative(ld, m))) return s;

    const float *rot[2][2] = {{NULL, NULL}, {NULL, NULL}};  /* [global, local][cos, sin] */
    const emb_str *pattern = emb_bundle_meta(ld->b, "layer_attention");
    if (cf->position == EMB_POSITION_ROTARY) {
        static const char *const names[2][2] = {{"rotary.global.cos", "rotary.global.sin"},
                                                {"rotary.local.cos", "rotary.local.sin"}};
        for (int kind = 0; kind < 2; kind++) {
            int used = 0;
            for (size_t l = 0; l < pattern->len; l++) used |= pattern->ptr[l] == (kind ? 'l' : 'g');
            for (int part = 0; used && part < 2; part++) {
                rot[kind][part] = tensor(ld, names[kind][part], EMB_DTYPE_F32, 2, cf->max_length, half, 0, 0);
                if (!rot[kind][part]) return EMB_STATUS_CORRUPT;
            }
        }
    }

    for (int32_t l = 0; l < cf->n_layers; l++) {
        emb_layer *L = &w->layers[l];
        char name[96];
        int ab = cf->attention_bias, fb = cf->ffn_bias;
        if ((s = load_linear(ld, name_of(name, sizeof name, "layers.", l, ".attention.qkv", ""), 3 * cf->dim, cf->dim,
                             ab, w->zeros, cf->linear_f32, &L->qkv)) ||
            (s = load_linear(ld, name_of(name, sizeof name, "layers.", l, ".attention.out", ""), cf->dim, cf->dim, ab,
                             w->zeros, cf->linear_f32, &L->out)) ||
            (s = load_linear(ld, name_of(name, sizeof name, "layers.", l, ".ffn.up", ""),
                             cf->ffn_dim * (cf->glu ? 2 : 1), cf->dim, fb, w->zeros, cf->linear_f32, &L->up)) ||
            (s = load_linear(ld, name_of(name, sizeof name, "layers.", l, ".ffn.down", ""), cf->dim, cf->ffn_dim, fb,
                             w->zeros, cf->linear_f32, &L->down)) ||
            (s = load_norm(ld, name_of(name, sizeof name, "layers.", l, ".attention.norm", ""), cf->pre_norm, cf,
                           w->zeros, &L->attn_norm_w, &L->attn_norm_b)) ||
            (s = load_norm(ld, name_of(name, sizeof name, "layers.", l, ".ffn.norm", ""), 0, cf, w->zeros,
                           &L->ffn_norm_w, &L->ffn_norm_b))) {
            return s;
        }
        L->local = pattern->ptr[l] == 'l';
        L->rot_cos = rot[L->local][0];
        L->rot_sin = rot[L->local][1];
    }
    if (cf->final_norm && (s = load_norm(ld, "final_norm", 0, cf, w->zeros, &w->final_w, &w->final_b))) return s;

    m->config.pooled_dim = cf->dim * cf->n_pool_modes;
    int32_t k = m->config.pooled_dim;
    for (int32_t i = 0; i < cf->n_dense; i++) {
        char name[48];
        const emb_tensor *t = find(ld, name_of(name, sizeof name, "dense.", i, ".weight", ""));
        if (!t || t->dtype != EMB_DTYPE_F32 || t->ndim != 2 || t->shape[1] != k || t->shape[0] > 65536) {
            return EMB_STATUS_CORRUPT;
        }
        emb_dense *d = &w->dense[i];
        d->e = (int32_t)t->shape[0];
        d->k = k;
        d->w = (const float *)t->data;
        d->act = dense_act[i];
        if (present(ld, name_of(name, sizeof name, "dense.", i, ".bias", ""))) {
            d->b = tensor(ld, name, EMB_DTYPE_F32, 1, d->e, 0, 0, 0);
            if (!d->b) return EMB_STATUS_CORRUPT;
        }
        k = d->e;
    }
    m->config.out_dim = k;
    return load_head(ld, m);
}

/* An optional F32 tensor of shape (d0) or (d0, d1): NULL when absent, *bad when present but wrong. */
static const float *optional(loader *ld, const char *name, int64_t d0, int64_t d1, int *bad) {
    if (!present(ld, name)) return NULL;
    const float *t = tensor(ld, name, EMB_DTYPE_F32, d1 ? 2 : 1, d0, d1, 0, 0);
    if (!t) *bad = 1;
    return t;
}

static emb_status load_head(loader *ld, emb_model *m) {
    const emb_config *cf = &m->config;
    emb_head_weights *h = &m->weights.head;
    int64_t c = cf->dim;
    int bad = 0;
    emb_status s;
    if (cf->head == EMB_HEAD_CLASSIFIER) {
        h->dense_w = optional(ld, "classifier.dense.weight", c, c, &bad);
        h->dense_b = optional(ld, "classifier.dense.bias", c, 0, &bad);
        h->norm_w = optional(ld, "classifier.norm.weight", c, 0, &bad);
        h->norm_b = optional(ld, "classifier.norm.bias", c, 0, &bad);
        h->out_w = optional(ld, "classifier.out.weight", cf->n_labels, c, &bad);
        h->out_b = optional(ld, "classifier.out.bias", cf->n_labels, 0, &bad);
        if (bad || !h->out_w || (h->dense_b && !h->dense_w) || (h->norm_b && !h->norm_w)) return EMB_STATUS_CORRUPT;
        if (h->norm_w && !h->norm_b) h->norm_b = m->weights.zeros;
    } else if (cf->head == EMB_HEAD_MLM) {
        if ((s = load_linear(ld, "mlm.transform", cf->dim, cf->dim, present(ld, "mlm.transform.bias"), m->weights.zeros,
                             cf->linear_f32, &h->transform)) ||
            (s = load_norm(ld, "mlm.norm", 0, cf, m->weights.zeros, &h->norm_w, &h->norm_b))) {
            return s;
        }
        /* the decoder's bias may be as long as the vocabulary padded to 32: a zeros buffer that long */
        size_t vp = emb_pad32((size_t)cf->vocab_size);
        int with_bias = present(ld, "mlm.decoder.bias");
        const float *zeros = m->weights.zeros;
        if (!with_bias) {
            m->weights.vocab_zeros = emb_alloc(sizeof(float) * vp);
            if (!m->weights.vocab_zeros) return EMB_STATUS_OUT_OF_MEMORY;
            emb_memset(m->weights.vocab_zeros, 0, sizeof(float) * vp);
            zeros = m->weights.vocab_zeros;
        }
        if ((s = load_linear(ld, "mlm.decoder", cf->vocab_size, cf->dim, with_bias, zeros, 0, &h->decoder))) return s;
        if (cf->linear_f32) {  /* rescored: the decoder's own fp32 rows, or the word table it is tied to */
            h->exact = present(ld, "mlm.decoder.weight")
                           ? tensor(ld, "mlm.decoder.weight", EMB_DTYPE_F32, 2, cf->vocab_size, c, 0, 0)
                           : m->weights.word_f32;
            h->bound = emb_alloc(sizeof(float) * 2 * ((size_t)h->decoder.k / EMB_BLOCK));
            if (!h->exact) return EMB_STATUS_CORRUPT;
            if (!h->bound) return EMB_STATUS_OUT_OF_MEMORY;
            emb_rescore_coefficients(&h->decoder, h->exact, (size_t)cf->vocab_size, (size_t)c, h->bound);
        }
    }
    return EMB_STATUS_OK;
}

/* Every metadata key and tensor was used by the configuration (the tokenizer's excepted). */
static emb_status check_all_used(const loader *ld) {
    const emb_bundle *b = ld->b;
    for (size_t i = 0; i < b->n_meta; i++) {
        emb_str key = b->meta[i].key;
        if (!ld->meta_used[i] && !str_is(key, "tokenizer") && !has_prefix(key, "tokenizer.")) return EMB_STATUS_CORRUPT;
    }
    for (size_t i = 0; i < b->n_tensors; i++) {
        if (!ld->tensor_used[i] && !has_prefix(b->tensors[i].name, "tokenizer.")) return EMB_STATUS_CORRUPT;
    }
    return EMB_STATUS_OK;
}

static emb_status load_model(emb_model *m) {
    loader ld;
    emb_memset(&ld, 0, sizeof ld);
    ld.b = &m->bundle;
    ld.tensor_used = emb_alloc(m->bundle.n_tensors + 1);
    if (!ld.tensor_used) return EMB_STATUS_OUT_OF_MEMORY;
    emb_memset(ld.tensor_used, 0, m->bundle.n_tensors + 1);
    int32_t dense_act[EMB_MAX_DENSE] = {0};
    emb_status s = load_config(&ld, &m->config, dense_act);
    if (s == EMB_STATUS_OK) s = load_weights(&ld, m, dense_act);
    if (s == EMB_STATUS_OK) s = tile_weights(m);
    if (s == EMB_STATUS_OK) s = check_all_used(&ld);
    emb_dealloc(ld.tensor_used);
    if (s != EMB_STATUS_OK) return s;
    s = emb_tokenizer_from_bundle(&m->tokenizer, &m->bundle, m->config.vocab_size, m->config.max_length);
    if (s != EMB_STATUS_OK) m->tokenizer = NULL;
    return s;
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
    emb_dealloc(model->weights.rel);
    emb_dealloc(model->weights.zeros);
    emb_dealloc(model->weights.vocab_zeros);
    emb_dealloc(model->weights.head.bound);
    emb_dealloc(model->weights.tiles);
    emb_bundle_release(&model->bundle);
    emb_dealloc(model);
}

void emb_model_get_info(const emb_model *model, emb_model_info *info) {
    if (!model || !info) return;
    const emb_config *cf = &model->config;
    info->dim = cf->out_dim;
    info->n_layers = cf->n_layers;
    info->n_heads = cf->n_heads;
    info->ffn_dim = cf->ffn_dim;
    info->vocab_size = cf->vocab_size;
    info->max_length = cf->max_length;
    info->pooling = cf->pooling;
    info->normalize = cf->normalize;
    info->version = model->bundle.version;
}

void emb_model_get_config(const emb_model *model, emb_model_config *config) {
    if (!model || !config) return;
    const emb_config *cf = &model->config;
    config->version = model->bundle.version;
    config->dim = cf->out_dim;
    config->hidden_dim = cf->dim;
    config->n_layers = cf->n_layers;
    config->n_heads = cf->n_heads;
    config->ffn_dim = cf->ffn_dim;
    config->vocab_size = cf->vocab_size;
    config->max_length = cf->max_length;
    config->type_vocab_size = cf->type_vocab_size;
    config->pooling = cf->pooling;
    config->include_prompt = cf->include_prompt;
    config->normalize = cf->normalize;
    config->n_dense = cf->n_dense;
    config->head = cf->head;
    config->n_labels = cf->n_labels;
    config->sparse_pooling = cf->sparse_pooling;
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
static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

emb_status emb_context_init(emb_context **out, const emb_model *model, size_t max_tokens) {
    return emb_context_init_ex(out, model, max_tokens, 1, NULL);
}

#if EMB_KERNELS == EMB_KERNELS_NATIVE
#define EMB_R EMB_NATIVE_PANEL_ROWS
#else
#define EMB_R EMB_PANEL_ROWS
#endif
#define EMB_N_PARTS 16

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
    size_t t = max_tokens, cp = (size_t)cf->dim_p, fp = (size_t)cf->ffn_p, un = (size_t)cf->up_n, r = EMB_R;
    size_t max_seq = t < (size_t)cf->max_length ? t : (size_t)cf->max_length;
    size_t scratch = emb_attention_scratch(max_seq, (size_t)cf->head_dim);
    int mlm = cf->head == EMB_HEAD_MLM;
    if (cf->attention_q8) {
        size_t q8 = (emb_attention_q8_scratch(max_seq, (size_t)cf->head_dim, (size_t)cf->n_heads) + 63) / 64 * 16;
        scratch = cf->attention_q8_min > 1 ? max_size(scratch, q8) : q8; /* "auto": both kinds */
    }
    size_t pool = (size_t)cf->pooled_dim;
    for (int32_t i = 0; i < cf->n_dense; i++) pool = max_size(pool, (size_t)model->weights.dense[i].e);
    /* sizes in 64-bit first: on wasm32 a large max_tokens must fail cleanly, not wrap around */
    uint64_t t64 = t, cp64 = cp, fp64 = fp, wr = (uint64_t)w * r, qx = cf->linear_f32 ? 4 : sizeof(emb_qx);
    uint64_t sizes64[EMB_N_PARTS] = {
        t64 * cp64 * 4,                     /* x */
        t64 * (uint64_t)cf->qkv_n * 4,      /* qkv */
        t64 * cp64 * 4,                     /* attn */
        t64 * cp64 * qx,                    /* xq */
        t64 * (cp64 / EMB_BLOCK) * 4,       /* xs */
        (t64 + 1) * 4,                      /* starts */
        t64 * 4,                            /* pos */
        wr * max_size(cp, un) * 4,          /* panel */
        wr * max_size(cp, fp) * 4,          /* hidden */
        wr * fp64 * qx,                     /* hq */
        wr * (fp64 / EMB_BLOCK) * 4,        /* hs */
        (uint64_t)w * scratch * 4,          /* scratch */
        (uint64_t)pool * 2 * 4,             /* pool */
        mlm ? wr * EMB_VOCAB_SLICE * 4 : 0, /* vocab: one slice of decoder logits */
        mlm ? (uint64_t)r * (uint64_t)cf->vocab_size * 4 : 0, /* acc */
        mlm && cf->linear_f32 ? t64 * 4 : 0, /* err */
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
    emb_memset(arena, 0, total);  /* padding columns start (and stay) exactly 0 */
    ctx->model = model;
    ctx->kernels = kset;
    ctx->gemm_f32 = emb_gemm_f32_for(kset);
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
    ctx->pos = parts[6];
    ctx->panel = parts[7];
    ctx->hidden = parts[8];
    ctx->hq = parts[9];
    ctx->hs = parts[10];
    ctx->scratch = parts[11];
    ctx->pool = parts[12];
    ctx->vocab = mlm ? parts[13] : NULL;
    ctx->acc = mlm ? parts[14] : NULL;
    ctx->err = mlm && cf->linear_f32 ? parts[15] : NULL;
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

/* ── running a request ─────────────────────────────────────────────────────────────── */

static emb_status check_request(const emb_context *ctx, const emb_request *rq, size_t *total_out) {
    const emb_config *cf = &ctx->model->config;
    if (!rq->ids || !rq->lengths || rq->n_seqs == 0) return EMB_STATUS_INVALID_ARGUMENT;
    switch (rq->output) {
    case EMB_OUTPUT_EMBEDDING:
        if (rq->pooling < EMB_POOLING_MODEL || rq->pooling > EMB_POOLING_WEIGHTEDMEAN) return EMB_STATUS_INVALID_ARGUMENT;
        break;
    case EMB_OUTPUT_TOKENS: break;
    case EMB_OUTPUT_SCORES:
        if (cf->head != EMB_HEAD_CLASSIFIER) return EMB_STATUS_INVALID_ARGUMENT;
        break;
    case EMB_OUTPUT_SPARSE:
        if (cf->head != EMB_HEAD_MLM || rq->top_k < 0 || rq->top_k > cf->vocab_size || (rq->per_token & ~1)) {
            return EMB_STATUS_INVALID_ARGUMENT;
        }
        if (rq->pooling < EMB_SPARSE_MODEL || rq->pooling > EMB_SPARSE_SUM) {
            return EMB_STATUS_INVALID_ARGUMENT;
        }
        break;
    default: return EMB_STATUS_INVALID_ARGUMENT;
    }
    size_t total = 0;
    for (size_t s = 0; s < rq->n_seqs; s++) {
        if (rq->lengths[s] <= 0) return EMB_STATUS_INVALID_ARGUMENT;
        if (rq->lengths[s] > cf->max_length) return EMB_STATUS_TOO_LONG;
        if (rq->prompt_lengths && (rq->prompt_lengths[s] < 0 || rq->prompt_lengths[s] >= rq->lengths[s])) {
            return EMB_STATUS_INVALID_ARGUMENT;
        }
        total += (size_t)rq->lengths[s];
        if (total > ctx->max_tokens) return EMB_STATUS_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < total; i++) {
        if (rq->ids[i] < 0 || rq->ids[i] >= cf->vocab_size) return EMB_STATUS_INVALID_ARGUMENT;
    }
    if (rq->type_ids) {
        for (size_t i = 0; i < total; i++) {
            if (rq->type_ids[i] < 0 || rq->type_ids[i] >= cf->type_vocab_size) return EMB_STATUS_INVALID_ARGUMENT;
        }
    }
    *total_out = total;
    return EMB_STATUS_OK;
}

/* SCORES (the classifier's logits) and SPARSE (the masked-LM head's SPLADE weights). */
static emb_status run_head(emb_context *ctx, const emb_request *rq, emb_output *out, size_t total) {
    const emb_config *cf = &ctx->model->config;
    int sparse = rq->output == EMB_OUTPUT_SPARSE;
    out->n_rows = sparse && rq->per_token ? total : rq->n_seqs;
    out->row_size = !sparse ? (size_t)cf->n_labels : rq->top_k ? (size_t)rq->top_k : (size_t)cf->vocab_size;
    if (out->n_rows > out->values_cap / out->row_size) return EMB_STATUS_BUFFER_TOO_SMALL;
    if (!out->values || (sparse && rq->top_k && !out->indices)) return EMB_STATUS_INVALID_ARGUMENT;
    emb_encoder_forward(ctx, rq->ids, rq->type_ids, rq->lengths, rq->n_seqs);
    if (sparse) {
        int pooling = rq->pooling == EMB_SPARSE_MODEL ? cf->sparse_pooling : rq->pooling;
        emb_sparse_run(ctx, rq->lengths, rq->n_seqs, rq->per_token, pooling, rq->top_k, out->values, out->indices);
        return EMB_STATUS_OK;
    }
    size_t c = (size_t)cf->dim, cp = (size_t)cf->dim_p, t = 0, n = (size_t)cf->n_labels;
    for (size_t q = 0; q < rq->n_seqs; q++) {
        float *v = ctx->pool;  /* the pooled vector, then the head's scratch */
        emb_pool(ctx->x + t * cp, c, cp, rq->lengths + q, NULL, 1, (emb_pooling)cf->cls_pooling, v);
        emb_classifier_apply(cf, &ctx->model->weights.head, v, v + c, out->values + q * n);
        t += (size_t)rq->lengths[q];
    }
    return EMB_STATUS_OK;
}

emb_status emb_context_run(emb_context *ctx, const emb_request *rq, emb_output *out) {
    if (!ctx || !rq || !out) return EMB_STATUS_INVALID_ARGUMENT;
    const emb_config *cf = &ctx->model->config;
    size_t total = 0;
    emb_status s = check_request(ctx, rq, &total);
    if (s != EMB_STATUS_OK) return s;
    if (rq->output == EMB_OUTPUT_SCORES || rq->output == EMB_OUTPUT_SPARSE) return run_head(ctx, rq, out, total);
    int tokens = rq->output == EMB_OUTPUT_TOKENS;
    /* the pooling: the model's modes (concatenated), or the one the request names */
    const int32_t *modes = cf->pool_modes;
    int32_t n_modes = cf->n_pool_modes, one = rq->pooling;
    if (rq->pooling != EMB_POOLING_MODEL) modes = &one, n_modes = 1;
    size_t c = (size_t)cf->dim, cp = (size_t)cf->dim_p, pooled = c * (size_t)n_modes;
    if (!tokens && cf->n_dense && pooled != (size_t)cf->pooled_dim) return EMB_STATUS_INVALID_ARGUMENT;
    out->n_rows = tokens ? total : rq->n_seqs;
    out->row_size = tokens ? c : cf->n_dense ? (size_t)cf->out_dim : pooled;
    if (out->n_rows > out->values_cap / out->row_size) return EMB_STATUS_BUFFER_TOO_SMALL;
    if (!out->values) return EMB_STATUS_INVALID_ARGUMENT;

    emb_encoder_forward(ctx, rq->ids, rq->type_ids, rq->lengths, rq->n_seqs);
    if (tokens) {
        for (size_t t = 0; t < total; t++) emb_memcpy(out->values + t * c, ctx->x + t * cp, sizeof(float) * c);
        return EMB_STATUS_OK;
    }
    int norm = rq->normalize < 0 ? cf->normalize : rq->normalize > 0;
    int include = rq->include_prompt < 0 ? cf->include_prompt : rq->include_prompt > 0;
    const int32_t *skip = include ? NULL : rq->prompt_lengths;
    size_t t = 0, width = out->row_size, pool_floats = (size_t)cf->pooled_dim;
    for (int32_t i = 0; i < cf->n_dense; i++) pool_floats = max_size(pool_floats, (size_t)ctx->model->weights.dense[i].e);
    for (size_t q = 0; q < rq->n_seqs; q++) {
        float *v = ctx->pool;
        for (int32_t i = 0; i < n_modes; i++) {
            emb_pool(ctx->x + t * cp, c, cp, rq->lengths + q, skip ? skip + q : NULL, 1, (emb_pooling)modes[i],
                     v + (size_t)i * c);
        }
        emb_dense_apply(&ctx->model->weights, cf->n_dense, v, pooled, v + pool_floats);
        if (norm) emb_l2_normalize(v, width);
        emb_memcpy(out->values + q * width, v, sizeof(float) * width);
        t += (size_t)rq->lengths[q];
    }
    return EMB_STATUS_OK;
}

emb_status emb_context_encode(emb_context *ctx, const int32_t *ids, const int32_t *lengths, size_t n_seqs,
                              emb_pooling pooling, int normalize, float *out, size_t out_cap) {
    if (!ctx || !ids || !lengths || !out || n_seqs == 0) return EMB_STATUS_INVALID_ARGUMENT;
    emb_request rq;
    emb_memset(&rq, 0, sizeof rq);
    rq.ids = ids;
    rq.lengths = lengths;
    rq.n_seqs = n_seqs;
    rq.output = EMB_OUTPUT_EMBEDDING;
    rq.pooling = (int32_t)pooling;
    rq.normalize = normalize;
    rq.include_prompt = -1;
    emb_output o = {out, out_cap, 0, 0, NULL};
    return emb_context_run(ctx, &rq, &o);
}
