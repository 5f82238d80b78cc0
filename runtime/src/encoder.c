/*
 * encoder.c — the encoder over a packed batch: sequences back to back, no padding. One code
 * path for every family; the configuration's features pick the steps (model.h, edgembed.h):
 *
 *   x = LN(word[id] + position[row(p)] + token_type[type])                (T, C)
 *       (no position table with rotary positions, no token type without token types)
 *   per layer, post-norm (BERT, DistilBERT, MPNet, RoBERTa):
 *               qkv = x·Wqkv + b                          int8 linear over all T rows
 *               a   = attention(qkv) per sequence and head, fp32 (+ relative bias: MPNet)
 *               x   = LN(x + a·Wo + b)                    ┐ one panel of R rows at a time, so
 *               x   = LN(x + down(act(up x)))             ┘ each row's FFN runs while in cache
 *   per layer, pre-norm (ModernBERT):
 *               qkv = LN(x)·Wqkv; rotate q and k by the token's position (rotary)
 *               a   = attention(qkv), all keys or a sliding window
 *               x   = x + a·Wo;  x = x + down(act(up_in h) · up_gate h), h = LN(x)
 *   x = LN(x) after the last layer when the model has a final norm.
 *
 * Every step but attention works on each row alone, and attention never looks past its own
 * sequence, so a sequence's result does not depend on what else is in the batch.
 *
 * Buffers keep rows of Cp, up_n and Fp floats (multiples of 32) whose padding columns are exactly
 * 0: a GEMM writes all its padded outputs (zero weights and bias give +0), LayerNorm and attention
 * write only the real columns, so every quantized row is whole blocks with zero padding.
 *
 * The context's W workers (threads.h) share the work, split one of three ways:
 *   groups   many sequences (at least 2 groups per worker, none over half a worker's share):
 *            groups of consecutive sequences of about T / (4·W) tokens (at least 64), each
 *            task every layer of one group (task_group): one join per call, not three per layer.
 *   rows     few sequences. Tasks are panels of at most R rows (as many tasks as W needs to
 *            stay busy, of equal size), each running the fused FFN chain above on its panel
 *            with its own buffers; attention tasks are (sequence, head) pairs.
 *   columns  few tokens (T ≤ EMB_COLUMN_SPLIT_ROWS · W): a panel per worker would leave workers
 *            idle and make each read every weight, so each linear layer's outputs are cut into
 *            one slice per worker instead (whole blocks of 32: column_slice). An MLP's
 *            activation and quantization run on the slice that produced them (both work per
 *            block of 32 columns), and so do the rotary positions of a slice of whole heads;
 *            an attention task quantizes its own head when the head is whole blocks
 *            (task_attention_staged), and a GLU of whole blocks computes its product on its up
 *            projection's slices (task_glu_columns); row-wise steps for the norms (and the
 *            rest otherwise) in between.
 * Either way every output element is computed by the same operations in the same order as with
 * one worker, so the vectors do not depend on W or on the split (tests/runtime checks it).
 */
#include "kernels.h"
#include "model.h"
#include "platform.h"
#include "threads.h"

#define EMB_COLUMN_SPLIT_ROWS 8  /* per worker: below this many rows each, split columns */
#define EMB_GROUPS_PER_WORKER 4  /* sequence groups: tasks per worker, so that a late one costs little */
#define EMB_GROUP_MIN_ROWS 64    /* and rows per group at least, so that its GEMMs have full panels */
#define EMB_MAX_GROUPS 256

typedef struct job {
    emb_context *ctx;
    const emb_kernels *k;
    const emb_config *cf;
    const emb_weights *w;
    const emb_layer *L;       /* the layer being run */
    const emb_layer *next;    /* the layer after it; NULL for the last */
    size_t total;             /* T */
    size_t n_seqs;
    size_t rows;              /* rows per row task */
    size_t split_heads;       /* attention tasks: 1 per (sequence, head), 0 per sequence */
    /* a column-split linear layer: y[:, n0:n1] for slice t */
    const emb_linear *lin;
    const void *xq;           /* emb_qx, or floats with fp32 linears */
    const float *xs;
    float *y;
    size_t ldy;
    size_t slice;             /* outputs per column task */
    int ffn_up;               /* an MLP's up linear: activation and quantization of the slice into hq/hs */
    int after_ffn;            /* task_norm: 0 after the attention output, 1 after the FFN */
    int rotary_slices;        /* a QKV column slice rotates its own heads (slices of whole heads) */
    /* sequence groups: group t is sequences group[t] .. group[t+1]-1, every layer in one task */
    size_t n_groups;
    size_t group[EMB_MAX_GROUPS + 1];
} job;

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* ── linear layers: int8 (quantized input) or fp32 (the input's copy) ────────────────
   A linear layer's input buffers (xq, hq) hold the quantized rows for an int8 model and a copy
   of the float rows for fp32 linears (config.linear_f32): stage() makes them, linear() reads
   them, qat() is the element at an offset in either. */

static void *qat(const job *jb, void *base, size_t off) {
    return jb->cf->linear_f32 ? (void *)((float *)base + off) : (void *)((emb_qx *)base + off);
}

static void stage(const job *jb, const float *x, size_t m, size_t k, void *q, float *s) {
    if (jb->cf->linear_f32) emb_memcpy(q, x, sizeof(float) * m * k);
    else jb->k->quantize_rows(x, m, k, q, s);
}

static void linear(const job *jb, const void *q, const float *s, size_t m, const emb_linear *lin, float *y,
                   size_t ldy) {
    if (lin->w) jb->ctx->gemm_f32(q, m, lin, y, ldy);
    else jb->k->gemm_q8(q, s, m, lin, y, ldy);
}

/* ── steps on rows, shared by both splits ──────────────────────────────────────────── */

static void activation(const job *jb, float *x, size_t n) {
    if (jb->cf->act == EMB_ACT_GELU) jb->k->gelu(x, n);
    else emb_act_ref(jb->cf->act, x, n);
}

/* x (m, Cp) ← x + y; padding stays 0 + 0. */
static void add_rows(float *x, const float *y, size_t m, size_t cp) {
    for (size_t i = 0; i < m * cp; i++) x[i] = x[i] + y[i];
}

/* The input of layer L's attention for rows x (m, Cp), quantized into (xq, xs): x itself
   (post-norm, or a pre-norm layer without a norm), else LN(x), computed in tmp (m, Cp). */
static void attention_input(const job *jb, const emb_layer *L, const float *x, size_t m, float *tmp, void *xq,
                            float *xs) {
    const emb_config *cf = jb->cf;
    size_t c = (size_t)cf->dim, cp = (size_t)cf->dim_p;
    if (cf->pre_norm && L->attn_norm_w) {
        emb_memcpy(tmp, x, sizeof(float) * m * cp);
        jb->k->layernorm(tmp, NULL, m, c, cp, L->attn_norm_w, L->attn_norm_b, cf->eps);
        x = tmp;
    }
    stage(jb, x, m, cp, xq, xs);
}

/* After the attention output projection y (m, Cp): the residual and norm, then the FFN's
   input quantized into (xq, xs). */
static void after_attention(const job *jb, float *x, const float *y, size_t m, float *tmp, void *xq, float *xs) {
    const emb_config *cf = jb->cf;
    const emb_layer *L = jb->L;
    size_t c = (size_t)cf->dim, cp = (size_t)cf->dim_p;
    if (!cf->pre_norm) {
        jb->k->layernorm(x, y, m, c, cp, L->attn_norm_w, L->attn_norm_b, cf->eps);
        stage(jb, x, m, cp, xq, xs);
        return;
    }
    add_rows(x, y, m, cp);
    emb_memcpy(tmp, x, sizeof(float) * m * cp);
    jb->k->layernorm(tmp, NULL, m, c, cp, L->ffn_norm_w, L->ffn_norm_b, cf->eps);
    stage(jb, tmp, m, cp, xq, xs);
}

/* The FFN's hidden layer from the up projection u (m, up_n), quantized into (hq, hs): act(u),
   or for a GLU act(u[:, :F]) · u[:, F:2F] written to h (m, Fp) with zero padding. */
static void ffn_hidden(const job *jb, float *u, size_t m, float *h, void *hq, float *hs) {
    const emb_config *cf = jb->cf;
    size_t f = (size_t)cf->ffn_dim, fp = (size_t)cf->ffn_p, un = (size_t)cf->up_n;
    if (!cf->glu) {
        activation(jb, u, m * un);  /* padding: act(0) = 0 */
        stage(jb, u, m, fp, hq, hs);
        return;
    }
    for (size_t r = 0; r < m; r++) {
        float *ur = u + r * un, *hr = h + r * fp;
        activation(jb, ur, f);
        for (size_t j = 0; j < f; j++) hr[j] = ur[j] * ur[f + j];
        for (size_t j = f; j < fp; j++) hr[j] = 0.0f;
    }
    stage(jb, h, m, fp, hq, hs);
}

/* After the FFN's down projection y (m, Cp): the residual and norm, then the next layer's
   attention input (or, after the last layer, the final norm). */
static void after_ffn(const job *jb, float *x, const float *y, size_t m, float *tmp, void *xq, float *xs) {
    const emb_config *cf = jb->cf;
    const emb_layer *L = jb->L;
    size_t c = (size_t)cf->dim, cp = (size_t)cf->dim_p;
    if (!cf->pre_norm) {
        jb->k->layernorm(x, y, m, c, cp, L->ffn_norm_w, L->ffn_norm_b, cf->eps);
    } else {
        add_rows(x, y, m, cp);
    }
    if (jb->next) {
        attention_input(jb, jb->next, x, m, tmp, xq, xs);
    } else if (cf->final_norm) {
        jb->k->layernorm(x, NULL, m, c, cp, jb->w->final_w, jb->w->final_b, cf->eps);
    }
}

/* Rotary positions on the queries and keys of rows r0 .. r1-1 (transformers' rotate_half form:
   the first and second half of each head are the pair). */
static void rotate_rows(const job *jb, size_t r0, size_t r1) {
    const emb_config *cf = jb->cf;
    const emb_layer *L = jb->L;
    size_t c = (size_t)cf->dim, d = (size_t)cf->head_dim, half = d / 2, ld = (size_t)cf->qkv_n;
    for (size_t t = r0; t < r1; t++) {
        size_t p = (size_t)jb->ctx->pos[t];
        const float *cs = L->rot_cos + p * half, *sn = L->rot_sin + p * half;
        for (size_t part = 0; part < 2 * c; part += c) {  /* queries, then keys */
            for (size_t h = 0; h < (size_t)cf->n_heads; h++) {
                float *v = jb->ctx->qkv + t * ld + part + h * d;
                for (size_t j = 0; j < half; j++) {
                    float x1 = v[j], x2 = v[j + half];
                    v[j] = x1 * cs[j] - x2 * sn[j];
                    v[j + half] = x2 * cs[j] + x1 * sn[j];
                }
            }
        }
    }
}

/* ── embeddings ────────────────────────────────────────────────────────────────────── */

static void embed(emb_context *ctx, const int32_t *ids, const int32_t *types, const int32_t *lengths, size_t n_seqs) {
    const emb_config *cf = &ctx->model->config;
    const emb_weights *w = &ctx->model->weights;
    size_t c = (size_t)cf->dim, cp = (size_t)cf->dim_p, nb = (c + EMB_BLOCK - 1) / EMB_BLOCK, t = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        size_t counted = 0;  /* tokens of this sequence other than position_pad_id */
        for (size_t p = 0; p < (size_t)lengths[s]; p++, t++) {
            size_t id = (size_t)ids[t];
            float *row = ctx->x + t * cp;
            ctx->pos[t] = (int32_t)p;
            const float *pos = NULL, *type = NULL;
            if (w->position) {
                size_t at = (size_t)cf->position_offset + p;
                if (cf->position_pad_id >= 0) {  /* transformers' create_position_ids_from_input_ids */
                    if ((int32_t)id == cf->position_pad_id) {
                        at = (size_t)cf->position_pad_id;
                    } else {
                        at = (size_t)cf->position_offset + counted++;
                    }
                }
                pos = w->position + at * c;
            }
            if (w->token_type) type = w->token_type + (size_t)(types ? types[t] : 0) * c;
            if (w->word_f32) {  /* fp32 table: the sums in the same order */
                const float *wf = w->word_f32 + id * c;
                for (size_t j = 0; j < c; j++) {
                    float e = wf[j];
                    if (pos) e = e + pos[j];
                    if (type) e = e + type[j];
                    row[j] = e;
                }
                continue;
            }
            const int8_t *wq = w->word_q + id * c;
            const float *ws = w->word_scale + id * nb;
            /* block by block, one scale each: the inner loops vectorize (element-wise, so the
               same operations on each element as one at a time) */
            for (size_t b = 0; b < nb; b++) {
                size_t j0 = b * EMB_BLOCK, j1 = min_size(c, j0 + EMB_BLOCK);
                float sc = ws[b];
                if (pos && type) {
                    for (size_t j = j0; j < j1; j++) row[j] = ((float)wq[j] * sc + pos[j]) + type[j];
                } else if (pos) {
                    for (size_t j = j0; j < j1; j++) row[j] = (float)wq[j] * sc + pos[j];
                } else if (type) {
                    for (size_t j = j0; j < j1; j++) row[j] = (float)wq[j] * sc + type[j];
                } else {
                    for (size_t j = j0; j < j1; j++) row[j] = (float)wq[j] * sc;
                }
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

static float *worker_hidden(const job *jb, int worker) {
    const emb_config *cf = jb->cf;
    size_t width = cf->dim_p > cf->ffn_p ? (size_t)cf->dim_p : (size_t)cf->ffn_p;
    return jb->ctx->hidden + (size_t)worker * jb->ctx->panel_rows * width;
}

/* The embeddings' norm and layer 0's attention input for rows r0 .. r1-1. */
static void embed_norm_rows(const job *jb, size_t r0, size_t r1, int worker) {
    const emb_config *cf = jb->cf;
    emb_context *ctx = jb->ctx;
    size_t c = (size_t)cf->dim, cp = (size_t)cf->dim_p;
    jb->k->layernorm(ctx->x + r0 * cp, NULL, r1 - r0, c, cp, jb->w->norm_w, jb->w->norm_b, cf->eps);
    attention_input(jb, jb->L, ctx->x + r0 * cp, r1 - r0, worker_hidden(jb, worker), qat(jb, ctx->xq, r0 * cp),
                    ctx->xs + r0 * (cp / EMB_BLOCK));
}

static void task_embed_norm(void *arg, size_t t, int worker) {
    const job *jb = arg;
    size_t r0, r1 = task_rows(jb, t, &r0);
    embed_norm_rows(jb, r0, r1, worker);
}

/* The QKV projection of rows r0 .. r1-1 (and their rotary positions). */
static void qkv_rows(const job *jb, size_t r0, size_t r1) {
    emb_context *ctx = jb->ctx;
    size_t cp = (size_t)jb->cf->dim_p, ld = (size_t)jb->cf->qkv_n;
    linear(jb, qat(jb, ctx->xq, r0 * cp), ctx->xs + r0 * (cp / EMB_BLOCK), r1 - r0, &jb->L->qkv, ctx->qkv + r0 * ld,
           ld);
    if (jb->L->rot_cos) rotate_rows(jb, r0, r1);
}

static void task_qkv(void *arg, size_t t, int worker) {
    const job *jb = arg;
    size_t r0, r1 = task_rows(jb, t, &r0);
    (void)worker;
    qkv_rows(jb, r0, r1);
}

static void task_rotary(void *arg, size_t t, int worker) {
    const job *jb = arg;
    size_t r0, r1 = task_rows(jb, t, &r0);
    (void)worker;
    rotate_rows(jb, r0, r1);
}

/* Heads h0 .. h1-1 of sequence s. */
static void attention_heads(const job *jb, size_t s, size_t h0, size_t h1, int worker) {
    emb_context *ctx = jb->ctx;
    const emb_config *cf = jb->cf;
    size_t heads = (size_t)cf->n_heads, cp = (size_t)cf->dim_p, ld = (size_t)cf->qkv_n;
    size_t off = (size_t)ctx->starts[s], n = (size_t)ctx->starts[s + 1] - off;
    emb_attention_args a = {ctx->qkv + off * ld, ld, ctx->attn + off * cp, cp, n, (size_t)cf->dim, heads,
                            jb->w->rel, jb->w->rel_ld, (size_t)cf->max_length - 1,
                            jb->L->local ? (size_t)cf->local_window : 0};
    float *scratch = ctx->scratch + (size_t)worker * ctx->scratch_floats;
    /* by the sequence's own length, never the batch's: a text's vector is the same in any batch */
    if (cf->attention_q8 && n >= (size_t)cf->attention_q8_min) emb_attention_q8(jb->k, &a, h0, h1, scratch);
    else jb->k->attention(&a, h0, h1, scratch);
}

static void task_attention(void *arg, size_t t, int worker) {
    const job *jb = arg;
    size_t heads = (size_t)jb->cf->n_heads;
    if (jb->split_heads) attention_heads(jb, t / heads, t % heads, t % heads + 1, worker);
    else attention_heads(jb, t, 0, heads, worker);
}

/* Column split, heads of whole blocks (head_dim a multiple of 32, so C = Cp): attention task t
   also quantizes its own head's outputs, block by block as stage() of the whole rows would, and
   the out projection reads them without a loop of its own in between. */
static void task_attention_staged(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    size_t heads = (size_t)jb->cf->n_heads, d = (size_t)jb->cf->head_dim, cp = (size_t)jb->cf->dim_p;
    size_t s = t / heads, h = t % heads, r0 = (size_t)ctx->starts[s], r1 = (size_t)ctx->starts[s + 1];
    attention_heads(jb, s, h, h + 1, worker);
    for (size_t r = r0; r < r1; r++) {
        size_t at = r * cp + h * d;
        stage(jb, ctx->attn + at, 1, d, qat(jb, ctx->xq, at), ctx->xs + at / EMB_BLOCK);
    }
}

/* The layer's rest on the panel of rows r0 .. r0+m-1, with the worker's own buffers. */
static void ffn_rows(const job *jb, size_t r0, size_t m, int worker) {
    emb_context *ctx = jb->ctx;
    const emb_config *cf = jb->cf;
    const emb_layer *L = jb->L;
    size_t cp = (size_t)cf->dim_p, fp = (size_t)cf->ffn_p, un = (size_t)cf->up_n;
    size_t wr = (size_t)worker * ctx->panel_rows;
    float *panel = ctx->panel + wr * (cp > un ? cp : un);
    float *tmp = worker_hidden(jb, worker);
    void *hq = qat(jb, ctx->hq, wr * fp);
    float *hs = ctx->hs + wr * (fp / EMB_BLOCK);
    float *x = ctx->x + r0 * cp;
    void *xq = qat(jb, ctx->xq, r0 * cp);
    float *xs = ctx->xs + r0 * (cp / EMB_BLOCK);
    stage(jb, ctx->attn + r0 * cp, m, cp, xq, xs);
    linear(jb, xq, xs, m, &L->out, panel, cp);
    after_attention(jb, x, panel, m, tmp, xq, xs);
    linear(jb, xq, xs, m, &L->up, panel, un);
    ffn_hidden(jb, panel, m, tmp, hq, hs);
    linear(jb, hq, hs, m, &L->down, panel, cp);
    after_ffn(jb, x, panel, m, tmp, xq, xs);
}

static void task_ffn(void *arg, size_t t, int worker) {
    const job *jb = arg;
    size_t r0, r1 = task_rows(jb, t, &r0);
    ffn_rows(jb, r0, r1 - r0, worker);
}

/*
 * Group split: every layer of sequence group t in one task. Sequences never look at each other,
 * so a group needs no other task's results, and the call has one join instead of three per
 * layer: a worker that loses its core holds up one group, not every layer. The group's rows run
 * in equal panels of at most R rows, as the row split's.
 */
static void task_group(void *arg, size_t t, int worker) {
    job jb = *(const job *)arg;  /* this task's own layer pointers */
    const emb_context *ctx = jb.ctx;
    size_t s0 = jb.group[t], s1 = jb.group[t + 1], heads = (size_t)jb.cf->n_heads;
    size_t r0 = (size_t)ctx->starts[s0], r1 = (size_t)ctx->starts[s1], m = r1 - r0;
    size_t panels = (m + ctx->panel_rows - 1) / ctx->panel_rows, rows = (m + panels - 1) / panels;
    jb.L = &jb.w->layers[0];
    for (size_t r = r0; r < r1; r += rows) embed_norm_rows(&jb, r, min_size(r1, r + rows), worker);
    for (int32_t l = 0; l < jb.cf->n_layers; l++) {
        jb.L = &jb.w->layers[l];
        jb.next = l + 1 < jb.cf->n_layers ? &jb.w->layers[l + 1] : NULL;
        for (size_t r = r0; r < r1; r += rows) qkv_rows(&jb, r, min_size(r1, r + rows));
        for (size_t q = s0; q < s1; q++) attention_heads(&jb, q, 0, heads, worker);
        for (size_t r = r0; r < r1; r += rows) ffn_rows(&jb, r, min_size(r1, r + rows) - r, worker);
    }
}

/* Cuts the sequences into groups of at least max(T / (G·W), EMB_GROUP_MIN_ROWS) rows, in order;
   returns 1 when they make enough groups, each small enough, to keep W workers busy. */
static int plan_groups(job *jb, const int32_t *lengths, size_t workers) {
    size_t total = jb->total, want = EMB_GROUPS_PER_WORKER * workers;
    size_t target = (total + want - 1) / want, rows = 0, biggest = 0;
    if (target < EMB_GROUP_MIN_ROWS) target = EMB_GROUP_MIN_ROWS;
    jb->n_groups = 0;
    jb->group[0] = 0;
    for (size_t s = 0; s < jb->n_seqs; s++) {
        rows += (size_t)lengths[s];
        if (rows >= target || s + 1 == jb->n_seqs) {
            if (jb->n_groups == EMB_MAX_GROUPS) return 0;
            jb->group[++jb->n_groups] = s + 1;
            if (rows > biggest) biggest = rows;
            rows = 0;
        }
    }
    return jb->n_groups >= 2 * workers && biggest * 2 * workers <= total;
}

/* Column split, QKV slices of whole heads: the rotary positions of the query and key heads in
   columns n0 .. n1-1, for every row, right after the slice's projection. */
static void rotate_slice(const job *jb, size_t n0, size_t n1) {
    const emb_config *cf = jb->cf;
    const emb_layer *L = jb->L;
    size_t c = (size_t)cf->dim, d = (size_t)cf->head_dim, half = d / 2, ld = (size_t)cf->qkv_n;
    if (n1 > 2 * c) n1 = 2 * c;  /* values are not rotated */
    for (size_t t = 0; t < jb->total; t++) {
        size_t p = (size_t)jb->ctx->pos[t];
        const float *cs = L->rot_cos + p * half, *sn = L->rot_sin + p * half;
        for (size_t h0 = n0; h0 < n1; h0 += d) {
            float *v = jb->ctx->qkv + t * ld + h0;
            for (size_t j = 0; j < half; j++) {
                float x1 = v[j], x2 = v[j + half];
                v[j] = x1 * cs[j] - x2 * sn[j];
                v[j + half] = x2 * cs[j] + x1 * sn[j];
            }
        }
    }
}

/* Column split, a GLU of whole blocks (F a multiple of 32): slice t is columns n0 .. n1-1 of
   the up projection's input half and the same columns of its gate half, then act(in) · gate
   quantized into hq, element for element as ffn_hidden() does on whole rows. */
static void task_glu_columns(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    const emb_linear *lin = jb->lin;
    size_t f = (size_t)jb->cf->ffn_dim, un = (size_t)jb->cf->up_n, kk = (size_t)lin->k, kb = kk / EMB_BLOCK;
    size_t n0 = t * jb->slice, n1 = min_size(f, n0 + jb->slice);
    (void)worker;
    for (size_t part = 0; part <= f; part += f) {  /* the input half, then the gate half */
        size_t a = part + n0;
        emb_linear cols = {lin->q ? lin->q + a * kk : NULL, lin->scale ? lin->scale + a * kb : NULL, lin->bias + a,
                           (int32_t)(n1 - n0), lin->k, lin->w ? lin->w + a * kk : NULL,
                           lin->qt && a % 16 == 0 ? lin->qt + a * kk : NULL};
        linear(jb, jb->xq, jb->xs, jb->total, &cols, jb->y + a, un);
    }
    for (size_t r = 0; r < jb->total; r++) {
        float *ur = jb->y + r * un, *hr = (float *)jb->ctx->hidden + r * f;
        activation(jb, ur + n0, n1 - n0);
        for (size_t j = n0; j < n1; j++) hr[j] = ur[j] * ur[f + j];
        stage(jb, hr + n0, 1, n1 - n0, qat(jb, ctx->hq, r * f + n0), ctx->hs + r * (f / EMB_BLOCK) + n0 / EMB_BLOCK);
    }
}

/* Column split: slice t of a linear layer over all T rows. */
static void task_columns(void *arg, size_t t, int worker) {
    const job *jb = arg;
    size_t n0 = t * jb->slice, n1 = min_size((size_t)jb->lin->n, n0 + jb->slice);
    size_t kk = (size_t)jb->lin->k, kb = kk / EMB_BLOCK;
    emb_linear part = {jb->lin->q ? jb->lin->q + n0 * kk : NULL, jb->lin->scale ? jb->lin->scale + n0 * kb : NULL,
                       jb->lin->bias + n0, (int32_t)(n1 - n0), jb->lin->k, jb->lin->w ? jb->lin->w + n0 * kk : NULL,
                       jb->lin->qt && n0 % 16 == 0 ? jb->lin->qt + n0 * kk : NULL};
    (void)worker;
    linear(jb, jb->xq, jb->xs, jb->total, &part, jb->y + n0, jb->ldy);
    if (jb->rotary_slices) rotate_slice(jb, n0, n1);
    if (jb->ffn_up) {
        emb_context *ctx = jb->ctx;
        size_t f = jb->ldy;  /* an MLP: up_n = Fp */
        for (size_t r = 0; r < jb->total; r++) {
            float *row = jb->y + r * f + n0;
            activation(jb, row, n1 - n0);
            stage(jb, row, 1, n1 - n0, qat(jb, ctx->hq, r * f + n0), ctx->hs + r * (f / EMB_BLOCK) + n0 / EMB_BLOCK);
        }
    }
}

static void task_quantize_attn(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    size_t cp = (size_t)jb->cf->dim_p, r0, r1 = task_rows(jb, t, &r0);
    (void)worker;
    stage(jb, ctx->attn + r0 * cp, r1 - r0, cp, qat(jb, ctx->xq, r0 * cp), ctx->xs + r0 * (cp / EMB_BLOCK));
}

/* Column split: a GLU's product for rows of task t, from the up projection in the panel. */
static void task_glu(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    size_t fp = (size_t)jb->cf->ffn_p, un = (size_t)jb->cf->up_n, r0, r1 = task_rows(jb, t, &r0);
    ffn_hidden(jb, ctx->panel + r0 * un, r1 - r0, worker_hidden(jb, worker), qat(jb, ctx->hq, r0 * fp),
               ctx->hs + r0 * (fp / EMB_BLOCK));
}

/* Column split: the residual and norm after the attention output (after_ffn = 0) or the FFN (1)
   for rows of task t, the projection in the panel as a (T, Cp) matrix. */
static void task_norm(void *arg, size_t t, int worker) {
    const job *jb = arg;
    emb_context *ctx = jb->ctx;
    size_t cp = (size_t)jb->cf->dim_p, r0, r1 = task_rows(jb, t, &r0);
    float *x = ctx->x + r0 * cp, *tmp = worker_hidden(jb, worker);
    void *xq = qat(jb, ctx->xq, r0 * cp);
    float *xs = ctx->xs + r0 * (cp / EMB_BLOCK);
    if (jb->after_ffn) after_ffn(jb, x, ctx->panel + r0 * cp, r1 - r0, tmp, xq, xs);
    else after_attention(jb, x, ctx->panel + r0 * cp, r1 - r0, tmp, xq, xs);
}

/* Outputs per column task: the layer's share of one worker, rounded up to whole int8 blocks (so
   a slice's activation and quantization stay in it, and it starts on a 16-output tile). One
   task per worker: a 10-token text's tasks then take microseconds, and with slices of 64 (32
   for the narrow layers) the pool's hand-out and join between them cost more than the shorter
   tail saved (docs/benchmarks.md, "One column slice per worker"). A worker that has not
   started leaves its slice to the caller (threads.h). */
static size_t column_slice(const job *jb, size_t n) {
    size_t w = jb->ctx->n_workers, per = (n + w - 1) / w;
    return (per + EMB_BLOCK - 1) / EMB_BLOCK * EMB_BLOCK;
}

/* One column-split linear layer, a slice of column_slice outputs per task. */
static void run_columns(job *jb, const emb_linear *lin, const void *xq, const float *xs, float *y, size_t ldy,
                        int ffn_up, int rotary) {
    size_t n = (size_t)lin->n, slice = column_slice(jb, n);
    jb->lin = lin;
    jb->xq = xq;
    jb->xs = xs;
    jb->y = y;
    jb->ldy = ldy;
    jb->ffn_up = ffn_up;
    jb->slice = slice;
    jb->rotary_slices = rotary && slice % (size_t)jb->cf->head_dim == 0;
    emb_threads_run(jb->ctx->threads, (n + slice - 1) / slice, task_columns, jb);
}

/* A GLU's up projection and product in one loop (task_glu_columns), its F columns in slices. */
static void run_glu_columns(job *jb) {
    size_t f = (size_t)jb->cf->ffn_dim;
    jb->lin = &jb->L->up;
    jb->xq = jb->ctx->xq;
    jb->xs = jb->ctx->xs;
    jb->y = jb->ctx->panel;
    jb->slice = column_slice(jb, f);
    emb_threads_run(jb->ctx->threads, (f + jb->slice - 1) / jb->slice, task_glu_columns, jb);
}

/* ── the forward pass ──────────────────────────────────────────────────────────────── */

void emb_encoder_forward(emb_context *ctx, const int32_t *ids, const int32_t *type_ids, const int32_t *lengths,
                         size_t n_seqs) {
    const emb_config *cf = &ctx->model->config;
    const emb_weights *w = &ctx->model->weights;
    size_t cp = (size_t)cf->dim_p, un = (size_t)cf->up_n, heads = (size_t)cf->n_heads;
    size_t total = 0, workers = ctx->n_workers;
    for (size_t s = 0; s < n_seqs; s++) {
        ctx->starts[s] = (int32_t)total;
        total += (size_t)lengths[s];
    }
    ctx->starts[n_seqs] = (int32_t)total;

    job jb = {0};
    jb.ctx = ctx;
    jb.k = ctx->kernels;
    jb.cf = cf;
    jb.w = w;
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
    /* column split: attention tasks quantize their own head when it is whole blocks */
    int staged_heads = columns && cf->head_dim % EMB_BLOCK == 0 && cf->dim == cf->dim_p;
    /* and a GLU of whole blocks computes its product on the slices of its up projection */
    int glu_columns = columns && cf->glu && cf->ffn_dim % EMB_BLOCK == 0;

    embed(ctx, ids, type_ids, lengths, n_seqs);
    if (workers > 1 && !columns && plan_groups(&jb, lengths, workers)) {
        emb_threads_run(ctx->threads, jb.n_groups, task_group, &jb);
        return;
    }
    jb.L = &w->layers[0];
    if (columns) emb_threads_hold(ctx->threads, 1);  /* short loops, 7-10 a layer: no sleeping between them */
    emb_threads_run(ctx->threads, n_tasks, task_embed_norm, &jb);

    for (int32_t l = 0; l < cf->n_layers; l++) {
        jb.L = &w->layers[l];
        jb.next = l + 1 < cf->n_layers ? &w->layers[l + 1] : NULL;
        if (!columns) {
            emb_threads_run(ctx->threads, n_tasks, task_qkv, &jb);
            emb_threads_run(ctx->threads, n_attention, task_attention, &jb);
            emb_threads_run(ctx->threads, n_tasks, task_ffn, &jb);
            continue;
        }
        void *xq = ctx->xq, *hq = ctx->hq;
        run_columns(&jb, &jb.L->qkv, xq, ctx->xs, ctx->qkv, (size_t)cf->qkv_n, 0, jb.L->rot_cos != NULL);
        if (jb.L->rot_cos && !jb.rotary_slices) emb_threads_run(ctx->threads, n_tasks, task_rotary, &jb);
        if (staged_heads) {
            emb_threads_run(ctx->threads, n_attention, task_attention_staged, &jb);
        } else {
            emb_threads_run(ctx->threads, n_attention, task_attention, &jb);
            emb_threads_run(ctx->threads, n_tasks, task_quantize_attn, &jb);
        }
        run_columns(&jb, &jb.L->out, xq, ctx->xs, ctx->panel, cp, 0, 0);
        jb.after_ffn = 0;
        emb_threads_run(ctx->threads, n_tasks, task_norm, &jb);
        if (glu_columns) {
            run_glu_columns(&jb);
        } else {
            run_columns(&jb, &jb.L->up, xq, ctx->xs, ctx->panel, un, !cf->glu, 0);
            if (cf->glu) emb_threads_run(ctx->threads, n_tasks, task_glu, &jb);
        }
        run_columns(&jb, &jb.L->down, hq, ctx->hs, ctx->panel, cp, 0, 0);
        jb.after_ffn = 1;
        emb_threads_run(ctx->threads, n_tasks, task_norm, &jb);
    }
    if (columns) emb_threads_hold(ctx->threads, 0);
}
