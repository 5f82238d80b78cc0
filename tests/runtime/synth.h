/*
 * synth.h — valid bundles of small random models built in memory, one for any combination of
 * the encoder's features (edgembed.h, "BUNDLE FORMAT"), for the C tests. Include after check.h.
 *
 *   synth_spec sp = synth_bert();  sp.c = 45; sp.heads = 5;  ...
 *   uint8_t *bytes = synth_bundle(&sp, &size);   (64-byte aligned; free() it)
 *
 * Weights are random codes and scales with exact zeros in the padding of every linear layer, as
 * the writer makes them; rotary tables and relative buckets are computed as transformers does.
 * synth_fix_crc() recomputes the checksum after a test edits the header.
 */
#ifndef EMB_TEST_SYNTH_H
#define EMB_TEST_SYNTH_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"

typedef struct synth_spec {
    int c, heads, f, layers, vocab, max_positions, max_length;
    const char *position;     /* "absolute" or "rotary" */
    int offset, pad_id;       /* absolute positions; pad_id -1: "none" */
    int buckets;              /* relative buckets, 0 none */
    int types;                /* type_vocab_size */
    int pre_norm, norm_bias, linear_bias, final_norm, glu;  /* linear_bias: attention and FFN alike */
    int no_ffn_bias;          /* with linear_bias: the FFN without biases */
    int no_first_attn_norm;   /* pre-norm: layer 0 without attention.norm (ModernBERT) */
    const char *act;          /* "gelu", "gelu_tanh", "relu", "silu" */
    const char *pattern;      /* layer_attention; NULL: all 'g' */
    int window;
    const char *pooling;
    int include_prompt, normalize;
    int n_dense, dense_e[2], dense_bias;
    const char *dense_act[2];
    const char *attention;    /* "int8", "fp32", or NULL: no key (bundles written before it: fp32) */
    const char *version;      /* "2" */
    int bad_crc;
    const char *extra_meta;   /* appended to the metadata as is, e.g. ",\"x\":\"1\"" */
    const char *extra_tensor; /* the name of an extra F32 (4) tensor */
    /* heads: NULL "none"; "classifier" (n_labels logits) or "mlm" (vocabulary logits, SPLADE) */
    const char *head;
    int n_labels;
    const char *cls_pooling, *cls_act;  /* "cls" / "mean"; the activation after its dense */
    int cls_dense, cls_norm, cls_out_bias;   /* which optional classifier tensors to write */
    const char *mlm_act, *sparse_pooling, *sparse_act;
    int mlm_decoder_bias;
} synth_spec;

static const char SYNTH_VOCAB_HEAD[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n##s\n,\n!";
enum { SYNTH_VOCAB_HEAD_N = 9 };

static synth_spec synth_bert(void) {
    synth_spec s;
    memset(&s, 0, sizeof s);
    s.c = 32, s.heads = 1, s.f = 64, s.layers = 2, s.vocab = 9, s.max_positions = 8, s.max_length = 8;
    s.position = "absolute", s.pad_id = -1, s.types = 2, s.norm_bias = 1, s.linear_bias = 1;
    s.act = "gelu", s.pooling = "mean", s.include_prompt = 1, s.normalize = 1, s.version = "2";
    return s;
}

typedef struct synth_buf {
    uint8_t *p;
    size_t n, cap;
} synth_buf;

static void sb_put(synth_buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 4096;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void sb_str(synth_buf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_meta(synth_buf *h, const char *key, const char *value) {
    char line[640];
    snprintf(line, sizeof line, ",\"%s\":\"%s\"", key, value);
    sb_str(h, line);
}

static void sb_meta_int(synth_buf *h, const char *key, long v) {
    char num[32];
    snprintf(num, sizeof num, "%ld", v);
    sb_meta(h, key, num);
}

typedef struct synth_ctx {
    synth_buf hdr, data;
} synth_ctx;

/* A tensor entry and its data (count elements of elem bytes), 64-byte aligned. */
static void sb_tensor(synth_ctx *x, const char *name, const char *dtype, int ndim, const long *shape, const void *bytes) {
    size_t count = 1, elem = strcmp(dtype, "F32") == 0 || strcmp(dtype, "I32") == 0 ? 4 : 1;
    for (int d = 0; d < ndim; d++) count *= (size_t)shape[d];
    while (x->data.n % 64) sb_put(&x->data, "", 1);
    size_t begin = x->data.n;
    sb_put(&x->data, bytes, count * elem);
    char line[512], dims[96] = "";
    for (int d = 0; d < ndim; d++) {
        char one[24];
        snprintf(one, sizeof one, d ? ",%ld" : "%ld", shape[d]);
        strcat(dims, one);
    }
    snprintf(line, sizeof line, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}", name, dtype,
             dims, begin, x->data.n);
    sb_str(&x->hdr, line);
}

/* an F32 tensor of `rows` rows of `n` values (rows 0: one dimension) */
static void sb_f32_2d(synth_ctx *x, const char *name, long rows, long n, float lo, float hi) {
    long count = (rows ? rows : 1) * n;
    float *v = malloc(sizeof(float) * (size_t)count);
    for (long i = 0; i < count; i++) v[i] = frand(lo, hi);
    long shape[2] = {rows, n};
    if (rows) sb_tensor(x, name, "F32", 2, shape, v);
    else sb_tensor(x, name, "F32", 1, shape + 1, v);
    free(v);
}

static void sb_f32(synth_ctx *x, const char *name, long n, float lo, float hi) { sb_f32_2d(x, name, 0, n, lo, hi); }

static long synth_pad32(long n) { return (n + 31) / 32 * 32; }

/* A linear W (n, k) in the n4k4 packing with zero padding, and its bias when wanted. */
static void sb_linear(synth_ctx *x, const char *name, long n, long k, int bias) {
    long np = synth_pad32(n), kp = synth_pad32(k), kb = kp / 32;
    int8_t *q = calloc((size_t)(np * kp), 1);
    float *s = calloc((size_t)(np * kb), sizeof(float));
    for (long row = 0; row < n; row++) {
        long g = row / 4, r = row % 4;
        for (long col = 0; col < k; col++) q[((g * (kp / 4) + col / 4) * 4 + r) * 4 + col % 4] = (int8_t)((int)(rng() % 255) - 127);
        for (long b = 0; b < (k + 31) / 32; b++) s[(g * kb + b) * 4 + r] = frand(0.02f, 0.06f) / sqrtf((float)k) * 4.0f;
    }
    char buf[128];
    long qs[4] = {np / 4, kp / 4, 4, 4}, ss[3] = {np / 4, kb, 4};
    snprintf(buf, sizeof buf, "%s.q", name);
    sb_tensor(x, buf, "I8", 4, qs, q);
    snprintf(buf, sizeof buf, "%s.scale", name);
    sb_tensor(x, buf, "F32", 3, ss, s);
    if (bias) {
        float *bv = calloc((size_t)np, sizeof(float));
        for (long i = 0; i < n; i++) bv[i] = frand(-0.2f, 0.2f);
        long bs[1] = {np};
        snprintf(buf, sizeof buf, "%s.bias", name);
        sb_tensor(x, buf, "F32", 1, bs, bv);
        free(bv);
    }
    free(q), free(s);
}

static void sb_norm(synth_ctx *x, const char *name, long c, int bias) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s.weight", name);
    sb_f32(x, buf, c, 0.8f, 1.2f);
    if (bias) {
        snprintf(buf, sizeof buf, "%s.bias", name);
        sb_f32(x, buf, c, -0.2f, 0.2f);
    }
}

/* transformers' MPNet relative_position_bucket (num_buckets, max_distance 128) of d = j − i */
static int synth_bucket(int d, int num_buckets) {
    int ret = 0, n = -d, nb = num_buckets / 2;
    if (n < 0) ret += nb;
    n = abs(n);
    int max_exact = nb / 2;
    if (n < max_exact) return ret + n;
    int v = max_exact + (int)(logf((float)n / (float)max_exact) / logf(128.0f / (float)max_exact) * (float)(nb - max_exact));
    return ret + (v < nb - 1 ? v : nb - 1);
}

static void synth_fix_crc(uint8_t *bytes, size_t size) {
    char *at = strstr((char *)bytes + 8, "\"crc32\":\"");
    if (!at) return;
    at += 9;
    memcpy(at, "00000000", 8);
    char crc[9];
    snprintf(crc, sizeof crc, "%08x", emb_crc32(0, bytes, size));
    memcpy(at, crc, 8);
}

static uint8_t *synth_bundle(const synth_spec *sp, size_t *size) {
    synth_ctx x;
    memset(&x, 0, sizeof x);
    long c = sp->c, d = sp->c / sp->heads;
    int rotary = strcmp(sp->position, "rotary") == 0;
    char pattern[260];
    for (int l = 0; l < sp->layers; l++) pattern[l] = sp->pattern ? sp->pattern[l] : 'g';
    pattern[sp->layers] = '\0';

    char line[256];
    snprintf(line, sizeof line, "{\"__metadata__\":{\"edgembed_bundle\":\"%s\",\"crc32\":\"00000000\"", sp->version);
    sb_str(&x.hdr, line);
    sb_meta(&x.hdr, "name", "tiny");
    sb_meta(&x.hdr, "family", rotary ? "modernbert" : sp->buckets ? "mpnet" : "bert");
    sb_meta_int(&x.hdr, "dim", c);
    sb_meta_int(&x.hdr, "n_layers", sp->layers);
    sb_meta_int(&x.hdr, "n_heads", sp->heads);
    sb_meta_int(&x.hdr, "ffn_dim", sp->f);
    sb_meta_int(&x.hdr, "vocab_size", sp->vocab);
    sb_meta_int(&x.hdr, "max_length", sp->max_length);
    sb_meta(&x.hdr, "layer_norm_eps", "1e-12");
    sb_meta(&x.hdr, "position", sp->position);
    if (rotary) {
        sb_meta(&x.hdr, "rope_theta_global", "160000.0");
        sb_meta(&x.hdr, "rope_theta_local", "10000.0");
    } else {
        sb_meta_int(&x.hdr, "max_positions", sp->max_positions);
        sb_meta_int(&x.hdr, "position_offset", sp->offset);
        if (sp->pad_id < 0) sb_meta(&x.hdr, "position_pad_id", "none");
        else sb_meta_int(&x.hdr, "position_pad_id", sp->pad_id);
    }
    sb_meta_int(&x.hdr, "relative_buckets", sp->buckets);
    sb_meta_int(&x.hdr, "type_vocab_size", sp->types);
    sb_meta(&x.hdr, "norm", sp->pre_norm ? "pre" : "post");
    sb_meta(&x.hdr, "norm_bias", sp->norm_bias ? "true" : "false");
    sb_meta(&x.hdr, "attention_bias", sp->linear_bias ? "true" : "false");
    sb_meta(&x.hdr, "ffn_bias", sp->linear_bias && !sp->no_ffn_bias ? "true" : "false");
    sb_meta(&x.hdr, "final_norm", sp->final_norm ? "true" : "false");
    sb_meta(&x.hdr, "ffn", sp->glu ? "glu" : "mlp");
    sb_meta(&x.hdr, "activation", sp->act);
    sb_meta(&x.hdr, "layer_attention", pattern);
    sb_meta_int(&x.hdr, "local_window", sp->window);
    sb_meta(&x.hdr, "pooling", sp->pooling);
    sb_meta(&x.hdr, "include_prompt", sp->include_prompt ? "true" : "false");
    sb_meta_int(&x.hdr, "n_dense", sp->n_dense);
    for (int i = 0; i < sp->n_dense; i++) {
        char key[32];
        snprintf(key, sizeof key, "dense.%d.activation", i);
        sb_meta(&x.hdr, key, sp->dense_act[i]);
    }
    sb_meta(&x.hdr, "normalize", sp->normalize ? "true" : "false");
    sb_meta(&x.hdr, "head", sp->head ? sp->head : "none");
    int classifier = sp->head && strcmp(sp->head, "classifier") == 0, mlm = sp->head && strcmp(sp->head, "mlm") == 0;
    if (classifier) {
        sb_meta_int(&x.hdr, "n_labels", sp->n_labels);
        sb_meta(&x.hdr, "classifier.pooling", sp->cls_pooling);
        sb_meta(&x.hdr, "classifier.activation", sp->cls_act);
        sb_meta(&x.hdr, "classifier.score_activation", "identity");
    }
    if (mlm) {
        sb_meta(&x.hdr, "mlm.activation", sp->mlm_act);
        sb_meta(&x.hdr, "sparse.pooling", sp->sparse_pooling);
        sb_meta(&x.hdr, "sparse.activation", sp->sparse_act);
    }
    sb_meta(&x.hdr, "quantization", "int8-block32");
    sb_meta(&x.hdr, "weight_layout", "n4k4");
    if (sp->attention) sb_meta(&x.hdr, "attention", sp->attention);
    sb_meta(&x.hdr, "tokenizer", "wordpiece");
    sb_meta(&x.hdr, "tokenizer.lowercase", "true");
    sb_meta(&x.hdr, "tokenizer.strip_accents", "true");
    sb_meta(&x.hdr, "tokenizer.handle_chinese_chars", "true");
    sb_meta(&x.hdr, "tokenizer.clean_text", "true");
    sb_meta(&x.hdr, "tokenizer.unk_id", "1");
    sb_meta(&x.hdr, "tokenizer.cls_id", "2");
    sb_meta(&x.hdr, "tokenizer.sep_id", "3");
    sb_meta(&x.hdr, "tokenizer.pad_id", "0");
    sb_meta(&x.hdr, "tokenizer.max_input_chars_per_word", "100");
    if (sp->extra_meta) sb_str(&x.hdr, sp->extra_meta);
    sb_str(&x.hdr, "}");

    /* embeddings */
    long nb = (c + 31) / 32;
    int8_t *wq = malloc((size_t)(sp->vocab * c));
    float *ws = malloc(sizeof(float) * (size_t)(sp->vocab * nb));
    for (long i = 0; i < sp->vocab * c; i++) wq[i] = (int8_t)((int)(rng() % 255) - 127);
    for (long i = 0; i < sp->vocab * nb; i++) ws[i] = frand(0.002f, 0.02f);
    long sh2[2] = {sp->vocab, c};
    sb_tensor(&x, "embeddings.word.q", "I8", 2, sh2, wq);
    sh2[1] = nb;
    sb_tensor(&x, "embeddings.word.scale", "F32", 2, sh2, ws);
    free(wq), free(ws);
    if (!rotary) sb_f32_2d(&x, "embeddings.position", sp->max_positions, c, -0.5f, 0.5f);
    if (sp->types) sb_f32_2d(&x, "embeddings.token_type", sp->types, c, -0.5f, 0.5f);
    sb_norm(&x, "embeddings.norm", c, sp->norm_bias);
    if (sp->buckets) {
        sb_f32_2d(&x, "encoder.relative_bias", sp->buckets, sp->heads, -1.0f, 1.0f);
        long span = 2L * sp->max_length - 1, sh[1] = {span};
        int32_t *bk = malloc(sizeof(int32_t) * (size_t)span);
        for (long i = 0; i < span; i++) bk[i] = synth_bucket((int)(i - (sp->max_length - 1)), sp->buckets);
        sb_tensor(&x, "encoder.relative_bucket", "I32", 1, sh, bk);
        free(bk);
    }
    if (rotary) {
        int kinds[2] = {strchr(pattern, 'g') != NULL, strchr(pattern, 'l') != NULL};
        const char *names[2][2] = {{"rotary.global.cos", "rotary.global.sin"}, {"rotary.local.cos", "rotary.local.sin"}};
        double thetas[2] = {160000.0, 10000.0};
        long half = d / 2, sh[2] = {sp->max_length, half};
        float *tab = malloc(sizeof(float) * (size_t)(sp->max_length * half));
        for (int k = 0; k < 2; k++) {
            if (!kinds[k]) continue;
            for (int part = 0; part < 2; part++) {
                for (long p = 0; p < sp->max_length; p++) {
                    for (long i = 0; i < half; i++) {
                        float inv = (float)(1.0 / pow(thetas[k], (double)(2 * i) / (double)d));
                        double a = (double)((float)p * inv);
                        tab[p * half + i] = (float)(part ? sin(a) : cos(a));
                    }
                }
                sb_tensor(&x, names[k][part], "F32", 2, sh, tab);
            }
        }
        free(tab);
    }
    for (int l = 0; l < sp->layers; l++) {
        char name[96];
        snprintf(name, sizeof name, "layers.%d.attention.qkv", l);
        sb_linear(&x, name, 3 * c, c, sp->linear_bias);
        snprintf(name, sizeof name, "layers.%d.attention.out", l);
        sb_linear(&x, name, c, c, sp->linear_bias);
        snprintf(name, sizeof name, "layers.%d.ffn.up", l);
        sb_linear(&x, name, (long)sp->f * (sp->glu ? 2 : 1), c, sp->linear_bias && !sp->no_ffn_bias);
        snprintf(name, sizeof name, "layers.%d.ffn.down", l);
        sb_linear(&x, name, c, sp->f, sp->linear_bias && !sp->no_ffn_bias);
        if (!(sp->pre_norm && sp->no_first_attn_norm && l == 0)) {
            snprintf(name, sizeof name, "layers.%d.attention.norm", l);
            sb_norm(&x, name, c, sp->norm_bias);
        }
        snprintf(name, sizeof name, "layers.%d.ffn.norm", l);
        sb_norm(&x, name, c, sp->norm_bias);
    }
    if (sp->final_norm) sb_norm(&x, "final_norm", c, sp->norm_bias);
    long k = c;
    for (const char *p = sp->pooling; *p; p++) k += *p == '+' ? c : 0;  /* concatenated modes */
    for (int i = 0; i < sp->n_dense; i++) {
        char name[48];
        long e = sp->dense_e[i], sh[2] = {e, k};
        float *wd = malloc(sizeof(float) * (size_t)(e * k));
        for (long j = 0; j < e * k; j++) wd[j] = frand(-0.3f, 0.3f);
        snprintf(name, sizeof name, "dense.%d.weight", i);
        sb_tensor(&x, name, "F32", 2, sh, wd);
        free(wd);
        if (sp->dense_bias) {
            snprintf(name, sizeof name, "dense.%d.bias", i);
            sb_f32(&x, name, e, -0.1f, 0.1f);
        }
        k = e;
    }
    if (classifier) {
        if (sp->cls_dense) {
            sb_f32_2d(&x, "classifier.dense.weight", c, c, -0.3f, 0.3f);
            sb_f32(&x, "classifier.dense.bias", c, -0.1f, 0.1f);
        }
        if (sp->cls_norm) {
            sb_f32(&x, "classifier.norm.weight", c, 0.8f, 1.2f);
            sb_f32(&x, "classifier.norm.bias", c, -0.1f, 0.1f);
        }
        sb_f32_2d(&x, "classifier.out.weight", sp->n_labels, c, -0.3f, 0.3f);
        if (sp->cls_out_bias) sb_f32(&x, "classifier.out.bias", sp->n_labels, -0.1f, 0.1f);
    }
    if (mlm) {
        sb_linear(&x, "mlm.transform", c, c, 1);
        sb_norm(&x, "mlm.norm", c, sp->norm_bias);
        sb_linear(&x, "mlm.decoder", sp->vocab, c, sp->mlm_decoder_bias);
    }
    if (sp->extra_tensor) sb_f32(&x, sp->extra_tensor, 4, 0, 1);
    /* the vocabulary: the fixed head, then filler words */
    synth_buf vocab = {0};
    sb_str(&vocab, SYNTH_VOCAB_HEAD);
    for (int i = SYNTH_VOCAB_HEAD_N; i < sp->vocab; i++) {
        char w[16];
        snprintf(w, sizeof w, "\nw%d", i);
        sb_str(&vocab, w);
    }
    long vs[1] = {(long)vocab.n};
    sb_tensor(&x, "tokenizer.vocab", "U8", 1, vs, vocab.p);
    free(vocab.p);
    sb_str(&x.hdr, "}");
    while ((8 + x.hdr.n) % 64) sb_put(&x.hdr, " ", 1);

    *size = 8 + x.hdr.n + x.data.n;
    uint8_t *out = aligned_alloc(64, (*size + 63) / 64 * 64);
    uint64_t h = x.hdr.n;
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)(h >> (8 * i));
    memcpy(out + 8, x.hdr.p, x.hdr.n);
    memcpy(out + 8 + x.hdr.n, x.data.p, x.data.n);
    free(x.hdr.p);
    free(x.data.p);
    synth_fix_crc(out, *size);
    if (sp->bad_crc) {
        char *at = strstr((char *)out + 8, "\"crc32\":\"") + 9;
        at[7] = at[7] == '0' ? '1' : '0';
    }
    return out;
}

#endif
