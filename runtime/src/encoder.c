/*
 * encoder.c — the BERT encoder over a packed batch: sequences back to back, no padding.
 *
 *   x = LayerNorm(word[id] + position[p] + token_type[0])                 (T, C)
 *   per layer:  qkv = x·Wqkv + b                     int8 linear over all T rows
 *               a   = attention(qkv) per sequence and head, fp32
 *               x   = LayerNorm(x + a·Wo + b)        ┐ one panel of R rows at a time, so each
 *               x   = LayerNorm(x + GELU(x·W1)·W2)   ┘ row's FFN runs while it is in cache
 *
 * Every step but attention works on each row alone, and attention never looks past its own
 * sequence, so a sequence's result does not depend on what else is in the batch.
 *
 * The context's W workers (threads.h) share each step, split one of two ways:
 *   rows     the usual case. Tasks are panels of at most R rows (as many tasks as W needs to
 *            stay busy, of equal size), each running the fused FFN chain above on its panel
 *            with its own buffers; attention tasks are (sequence, head) pairs.
 *   columns  few tokens (T ≤ EMB_COLUMN_SPLIT_ROWS · W): a panel per worker would leave workers
 *            idle and make each read every weight, so each linear layer's outputs are cut into
 *            slices of EMB_COLUMN_SLICE instead (the FFN's GELU and quantization run on the slice
 *            that produced them: both work per block of 32 columns), with a row-wise step for
 *            each LayerNorm in between.
 * Either way every output element is computed by the same operations in the same order as with
 * one worker, so the vectors do not depend on W or on the split (tests/runtime checks it).
 */
#include "kernels.h"
#include "model.h"
#include "threads.h"

#define EMB_COLUMN_SPLIT_ROWS 8  /* per worker: below this many rows each, split columns */
#define EMB_COLUMN_SLICE 64      /* outputs per column task: whole zmm tiles and int8 blocks */

typedef struct job {
    emb_context *ctx;
    const emb_kernels *k;
    const emb_layer *L;
    size_t total;             /* T */
    size_t n_seqs;
    size_t rows;              /* rows per row task */
    size_t split_heads;       /* attention tasks: 1 per (sequence, head), 0 per sequence */
    int last;                 /* the last layer: its output is not quantized */
    /* a column-split linear layer: y[:, n0:n1] for slice t */
    const emb_linear *lin;
    const emb_qx *xq;
    const float *xs;
    float *y;
    size_t ldy;
    int ffn_up;               /* GELU and quantize the slice into hq/hs */
    int ffn_norm;             /* task_norm: 0 the attention LayerNorm, 1 the FFN one */
} job;

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static void embed(emb_context *ctx, const int32_t *ids, const int32_t *lengths, size_t n_seqs) {
    const emb_config *cf = &ctx->model->config;
    const emb_weights *w = &ctx->model->weights;
    size_t c = (size_t)cf->dim, nb = c / EMB_BLOCK, t = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        for (size_t p = 0; p < (size_t)lengths[s]; p++, t++) {
            size_t id = (size_t)ids[t];
            const int8_t *wq = w->word_q + id * c;
            const float *ws = w->word_scale + id * nb;
            const float *pos = w->position + p * c;
            float *row = ctx->x + t * c;
            for (size_t j = 0; j < c; j++) {
                row[j] = ((float)wq[j] * ws[j / EMB_BLOCK] + pos[j]) + w->token_type[j];
            }
        }
    }
}

/* ── tasks ─────────────────────────────────────────────────────────────────────────── */

/* rows [*r0, returned end) of row task t */
static size_t task_rows(const job *jb, size_t t, size_t *r0) {
    *r0 = t * jb->rows;
    return min_size(jb->total, *r0 + jb->rows);
}

static void task_embed_norm(void *arg, size_t t, int worker) {
    const job *jb = arg;
    const emb_config *cf = &jb->ctx->model->config;
    const emb_weights *w = &jb->ctx->model->weights;
    size_t c = (size_t)cf->dim, nb = c / EMB_BLOCK, r0, r1 = task_rows(jb, t, &r0);
    (void)worker;
    jb->k->layernorm(jb->ctx->x + r0 * c, NULL, r1 - r0, c, w->norm_w, w->norm_b, cf->eps);
    jb->k->quantize_rows(jb->ctx->x + r0 * c, r1 - r0, c, (emb_qx *)jb->ctx->xq + r0 * c, jb->ctx->xs + r0 * nb);
}

static void task_qkv(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    size_t c = (size_t)ctx->model->config.dim, nb = c / EMB_BLOCK, r0, r1 = task_rows(jb, t, &r0);
    (void)worker;
    jb->k->gemm_q8((emb_qx *)ctx->xq + r0 * c, ctx->xs + r0 * nb, r1 - r0, &jb->L->qkv, ctx->qkv + r0 * 3 * c, 3 * c);
}

static void task_attention(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    size_t c = (size_t)ctx->model->config.dim, heads = (size_t)ctx->model->config.n_heads;
    size_t s = jb->split_heads ? t / heads : t;
    size_t h0 = jb->split_heads ? t % heads : 0, h1 = jb->split_heads ? h0 + 1 : heads;
    size_t off = (size_t)ctx->starts[s], n = (size_t)ctx->starts[s + 1] - off;
    jb->k->attention(ctx->qkv + off * 3 * c, n, c, heads, h0, h1, ctx->attn + off * c,
                     ctx->scratch + (size_t)worker * ctx->scratch_floats);
}

/* The layer's rest on one panel of rows, with the worker's own buffers. */
static void task_ffn(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    const emb_kernels *k = jb->k;
    const emb_config *cf = &ctx->model->config;
    const emb_layer *L = jb->L;
    size_t c = (size_t)cf->dim, f = (size_t)cf->ffn_dim, nb = c / EMB_BLOCK, fb = f / EMB_BLOCK;
    size_t r0, m = task_rows(jb, t, &r0) - r0, wr = (size_t)worker * ctx->panel_rows;
    float *panel = ctx->panel + wr * (c > f ? c : f);
    emb_qx *hq = (emb_qx *)ctx->hq + wr * f;
    float *hs = ctx->hs + wr * fb;
    float *x = ctx->x + r0 * c;
    emb_qx *xq = (emb_qx *)ctx->xq + r0 * c;
    float *xs = ctx->xs + r0 * nb;
    k->quantize_rows(ctx->attn + r0 * c, m, c, xq, xs);
    k->gemm_q8(xq, xs, m, &L->out, panel, c);
    k->layernorm(x, panel, m, c, L->attn_norm_w, L->attn_norm_b, cf->eps);
    k->quantize_rows(x, m, c, xq, xs);
    k->gemm_q8(xq, xs, m, &L->up, panel, f);
    k->gelu(panel, m * f);
    k->quantize_rows(panel, m, f, hq, hs);
    k->gemm_q8(hq, hs, m, &L->down, panel, c);
    k->layernorm(x, panel, m, c, L->ffn_norm_w, L->ffn_norm_b, cf->eps);
    if (!jb->last) k->quantize_rows(x, m, c, xq, xs);
}

/* Column split: slice t of a linear layer over all T rows. */
static void task_columns(void *arg, size_t t, int worker) {
    const job *jb = arg;
    size_t n0 = t * EMB_COLUMN_SLICE, n1 = min_size((size_t)jb->lin->n, n0 + EMB_COLUMN_SLICE);
    size_t kk = (size_t)jb->lin->k, kb = kk / EMB_BLOCK;
    emb_linear part = {jb->lin->q + n0 * kk, jb->lin->scale + n0 * kb, jb->lin->bias + n0, (int32_t)(n1 - n0),
                       jb->lin->k};
    (void)worker;
    jb->k->gemm_q8(jb->xq, jb->xs, jb->total, &part, jb->y + n0, jb->ldy);
    if (jb->ffn_up) {
        emb_context *ctx = jb->ctx;
        size_t f = jb->ldy;
        for (size_t r = 0; r < jb->total; r++) {
            float *row = jb->y + r * f + n0;
            jb->k->gelu(row, n1 - n0);
            jb->k->quantize_rows(row, 1, n1 - n0, (emb_qx *)ctx->hq + r * f + n0,
                                 ctx->hs + r * (f / EMB_BLOCK) + n0 / EMB_BLOCK);
        }
    }
}

static void task_quantize_attn(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    size_t c = (size_t)ctx->model->config.dim, nb = c / EMB_BLOCK, r0, r1 = task_rows(jb, t, &r0);
    (void)worker;
    jb->k->quantize_rows(ctx->attn + r0 * c, r1 - r0, c, (emb_qx *)ctx->xq + r0 * c, ctx->xs + r0 * nb);
}

/* Column split: x ← LayerNorm(x + panel) for rows of task t, then quantized for the next layer. */
static void task_norm(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    const emb_config *cf = &ctx->model->config;
    size_t c = (size_t)cf->dim, nb = c / EMB_BLOCK, r0, r1 = task_rows(jb, t, &r0);
    const float *gamma = jb->ffn_norm ? jb->L->ffn_norm_w : jb->L->attn_norm_w;
    const float *beta = jb->ffn_norm ? jb->L->ffn_norm_b : jb->L->attn_norm_b;
    (void)worker;
    jb->k->layernorm(ctx->x + r0 * c, ctx->panel + r0 * c, r1 - r0, c, gamma, beta, cf->eps);
    if (!jb->ffn_norm || !jb->last) {
        jb->k->quantize_rows(ctx->x + r0 * c, r1 - r0, c, (emb_qx *)ctx->xq + r0 * c, ctx->xs + r0 * nb);
    }
}

static void run_columns(job *jb, const emb_linear *lin, const emb_qx *xq, const float *xs, float *y, size_t ldy,
                        int ffn_up) {
    jb->lin = lin;
    jb->xq = xq;
    jb->xs = xs;
    jb->y = y;
    jb->ldy = ldy;
    jb->ffn_up = ffn_up;
    emb_threads_run(jb->ctx->threads, ((size_t)lin->n + EMB_COLUMN_SLICE - 1) / EMB_COLUMN_SLICE, task_columns, jb);
}

/* ── the forward pass ──────────────────────────────────────────────────────────────── */

void emb_encoder_forward(emb_context *ctx, const int32_t *ids, const int32_t *lengths, size_t n_seqs) {
    const emb_config *cf = &ctx->model->config;
    const emb_weights *w = &ctx->model->weights;
    size_t c = (size_t)cf->dim, f = (size_t)cf->ffn_dim, heads = (size_t)cf->n_heads;
    size_t total = 0, workers = ctx->n_workers;
    for (size_t s = 0; s < n_seqs; s++) {
        ctx->starts[s] = (int32_t)total;
        total += (size_t)lengths[s];
    }
    ctx->starts[n_seqs] = (int32_t)total;

    job jb = {0};
    jb.ctx = ctx;
    jb.k = ctx->kernels;
    jb.total = total;
    jb.n_seqs = n_seqs;
    jb.split_heads = workers > 1;
    int columns = workers > 1 && total <= EMB_COLUMN_SPLIT_ROWS * workers && total <= workers * ctx->panel_rows;
    /* row tasks: enough panels of at most R rows, a multiple of W of them, all of one size */
    size_t n_tasks = (total + ctx->panel_rows - 1) / ctx->panel_rows;
    if (workers > 1) n_tasks = (n_tasks + workers - 1) / workers * workers;
    if (columns) n_tasks = workers;
    jb.rows = (total + n_tasks - 1) / n_tasks;
    n_tasks = (total + jb.rows - 1) / jb.rows;
    size_t n_attention = jb.split_heads ? n_seqs * heads : n_seqs;

    embed(ctx, ids, lengths, n_seqs);
    emb_threads_run(ctx->threads, n_tasks, task_embed_norm, &jb);

    for (int32_t l = 0; l < cf->n_layers; l++) {
        jb.L = &w->layers[l];
        jb.last = l + 1 == cf->n_layers;
        if (!columns) {
            emb_threads_run(ctx->threads, n_tasks, task_qkv, &jb);
            emb_threads_run(ctx->threads, n_attention, task_attention, &jb);
            emb_threads_run(ctx->threads, n_tasks, task_ffn, &jb);
            continue;
        }
        emb_qx *xq = ctx->xq, *hq = ctx->hq;
        run_columns(&jb, &jb.L->qkv, xq, ctx->xs, ctx->qkv, 3 * c, 0);
        emb_threads_run(ctx->threads, n_attention, task_attention, &jb);
        emb_threads_run(ctx->threads, n_tasks, task_quantize_attn, &jb);
        run_columns(&jb, &jb.L->out, xq, ctx->xs, ctx->panel, c, 0);
        jb.ffn_norm = 0;
        emb_threads_run(ctx->threads, n_tasks, task_norm, &jb);
        run_columns(&jb, &jb.L->up, xq, ctx->xs, ctx->panel, f, 1);
        run_columns(&jb, &jb.L->down, hq, ctx->hs, ctx->panel, c, 0);
        jb.ffn_norm = 1;
        emb_threads_run(ctx->threads, n_tasks, task_norm, &jb);
    }
}
