/*
 * heads.c — what a model ends with besides pooling: a sequence-classification head (rerankers:
 * logits per sequence) and a masked-LM head with SPLADE pooling (sparse embeddings: a weight per
 * vocabulary entry).
 *
 *   classifier   v = the first token's state, or the mean of all tokens'
 *                v = act(v·Wd + bd)   (BERT's pooler, RoBERTa's dense: tanh; DistilBERT: relu)
 *                v = LN(v)            (ModernBERT's head)
 *                logits = v·Wo + bo   fp32, per sequence: one small matrix per text
 *   masked LM    h = LN(act(x·Wt + bt)) for every token, int8
 *                logits = h·Wd + bd   int8, the heaviest GEMM of these models (V outputs a token)
 *                w = log(1 + relu(logit))  (twice log1p for "log1p_relu"), then the max or the
 *                sum over the sequence's tokens, in token order; or every token's row
 *
 * The decoder runs in slices of EMB_VOCAB_SLICE outputs, one task each: a task folds every row
 * of its slice in token order, and slices never meet, so the weights do not depend on the
 * number of threads. Logits of one slice for R rows stay in the worker's scratch; a whole
 * vocabulary row is never stored for pooled output.
 */
#include "emb_math.h"
#include "kernels.h"
#include "model.h"
#include "platform.h"
#include "threads.h"

/* y (n) = W (n, k) · v (k) + b, each sum in 4 lanes by index mod 4. */
static void matvec(const float *w, const float *b, size_t n, size_t k, const float *v, float *y) {
    for (size_t e = 0; e < n; e++) {
        const float *row = w + e * k;
        float a[4] = {0, 0, 0, 0};
        for (size_t i = 0; i < k; i++) a[i & 3] += row[i] * v[i];
        float s = emb_hsum4(a[0], a[1], a[2], a[3]);
        y[e] = b ? s + b[e] : s;
    }
}

void emb_classifier_apply(const emb_config *cf, const emb_head_weights *h, const float *v, float *tmp, float *out) {
    size_t c = (size_t)cf->dim;
    const float *x = v;
    if (h->dense_w) {
        matvec(h->dense_w, h->dense_b, c, c, x, tmp);
        emb_act_ref(cf->cls_act, tmp, c);
        x = tmp;
    }
    if (h->norm_w) {
        if (x != tmp) emb_memcpy(tmp, x, sizeof(float) * c);
        emb_layernorm_ref(tmp, NULL, 1, c, c, h->norm_w, h->norm_b, cf->eps);
        x = tmp;
    }
    matvec(h->out_w, h->out_b, (size_t)cf->n_labels, c, x, out);
}

/* ── top-k ─────────────────────────────────────────────────────────────────────────── */

static int better(float av, int32_t ai, float bv, int32_t bi) { return av > bv || (av == bv && ai < bi); }

/* heap[0] is the worst kept entry */
static void sift_down(float *hv, int32_t *hi, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(hv[w], hi[w], hv[l], hi[l])) w = l;
        if (r < n && better(hv[w], hi[w], hv[r], hi[r])) w = r;
        if (w == i) return;
        float tv = hv[i];
        int32_t ti = hi[i];
        hv[i] = hv[w], hi[i] = hi[w];
        hv[w] = tv, hi[w] = ti;
        i = w;
    }
}

void emb_top_k(const float *w, size_t n, size_t k, float *values, int32_t *indices) {
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(w[i] > 0.0f)) continue;  /* zeros (and NaN) are never taken */
        if (kept < k) {
            /* push, then restore the heap from the new leaf up */
            size_t j = kept++;
            values[j] = w[i], indices[j] = (int32_t)i;
            while (j > 0) {
                size_t parent = (j - 1) / 2;
                if (!better(values[parent], indices[parent], values[j], indices[j])) break;
                float tv = values[j];
                int32_t ti = indices[j];
                values[j] = values[parent], indices[j] = indices[parent];
                values[parent] = tv, indices[parent] = ti;
                j = parent;
            }
        } else if (k > 0 && better(w[i], (int32_t)i, values[0], indices[0])) {
            values[0] = w[i], indices[0] = (int32_t)i;
            sift_down(values, indices, kept, 0);
        }
    }
    /* heap sort: the worst to the end, so the row reads best first */
    for (size_t end = kept; end > 1; end--) {
        float tv = values[0];
        int32_t ti = indices[0];
        values[0] = values[end - 1], indices[0] = indices[end - 1];
        values[end - 1] = tv, indices[end - 1] = ti;
        sift_down(values, indices, end - 1, 0);
    }
    for (size_t j = kept; j < k; j++) values[j] = 0.0f, indices[j] = -1;
}

/* ── the masked-LM head and SPLADE ─────────────────────────────────────────────────── */

typedef struct sparse_job {
    emb_context *ctx;
    const emb_kernels *k;
    const emb_config *cf;
    const emb_head_weights *h;
    size_t rows;              /* transform tasks: rows per task (≤ R) */
    size_t total;             /* T */
    /* decoder tasks: the rows [r0, r1) of a group, the first sequence s0 at r0 (pooled) */
    size_t r0, r1;
    const int32_t *lengths;
    int per_token;
    int pooling;              /* EMB_SPARSE_MAX or EMB_SPARSE_SUM */
    float *acc;               /* the group's rows (V each): one per sequence, or per token */
} sparse_job;

static void task_transform(void *arg, size_t t, int worker) {
    const sparse_job *jb = arg;
    emb_context *ctx = jb->ctx;
    const emb_config *cf = jb->cf;
    size_t c = (size_t)cf->dim, cp = (size_t)cf->dim_p, nb = cp / EMB_BLOCK;
    size_t a = t * jb->rows, b = a + jb->rows < jb->total ? a + jb->rows : jb->total, m = b - a;
    size_t width = cf->dim_p > cf->up_n ? (size_t)cf->dim_p : (size_t)cf->up_n;
    float *panel = ctx->panel + (size_t)worker * ctx->panel_rows * width;
    emb_qx *xq = (emb_qx *)ctx->xq + a * cp;
    float *xs = ctx->xs + a * nb;
    jb->k->quantize_rows(ctx->x + a * cp, m, cp, xq, xs);
    jb->k->gemm_q8(xq, xs, m, &jb->h->transform, panel, cp);
    if (cf->mlm_act == EMB_ACT_GELU) jb->k->gelu(panel, m * cp);
    else emb_act_ref(cf->mlm_act, panel, m * cp);
    jb->k->layernorm(panel, NULL, m, c, cp, jb->h->norm_w, jb->h->norm_b, cf->eps);
    jb->k->quantize_rows(panel, m, cp, xq, xs);  /* the decoder's input, in place of the hidden state's */
}

/* One slice of the vocabulary for every row of the group: logits of R rows at a time, then
   their weights folded into their sequence's row (or copied to the token's), in row order. */
static void task_vocab(void *arg, size_t t, int worker) {
    const sparse_job *jb = arg;
    emb_context *ctx = jb->ctx;
    const emb_config *cf = jb->cf;
    const emb_linear *dec = &jb->h->decoder;
    size_t v = (size_t)cf->vocab_size, cp = (size_t)cf->dim_p, nb = cp / EMB_BLOCK, r = ctx->panel_rows;
    size_t n0 = t * EMB_VOCAB_SLICE, n1 = n0 + EMB_VOCAB_SLICE < (size_t)dec->n ? n0 + EMB_VOCAB_SLICE : (size_t)dec->n;
    size_t real = n1 < v ? n1 - n0 : v - n0;  /* the decoder's padding rows are not the vocabulary's */
    emb_linear part = {dec->q + n0 * (size_t)dec->k, dec->scale + n0 * ((size_t)dec->k / EMB_BLOCK), dec->bias + n0,
                       (int32_t)(n1 - n0), dec->k};
    float *y = ctx->vocab + (size_t)worker * r * EMB_VOCAB_SLICE;
    size_t seq = 0, left = jb->per_token ? 0 : (size_t)jb->lengths[0];  /* the row's sequence, its rows to come */
    for (size_t p = jb->r0; p < jb->r1; p += r) {
        size_t m = jb->r1 - p < r ? jb->r1 - p : r;
        jb->k->gemm_q8((const emb_qx *)ctx->xq + p * cp, ctx->xs + p * nb, m, &part, y, EMB_VOCAB_SLICE);
        for (size_t i = 0; i < m; i++) {
            float *row = y + i * EMB_VOCAB_SLICE;
            for (size_t j = 0; j < real; j++) {
                float w = row[j] > 0.0f ? row[j] : 0.0f;
                w = emb_log1pf(w);
                if (cf->sparse_log1p2) w = emb_log1pf(w);
                row[j] = w;
            }
            if (jb->per_token) {
                emb_memcpy(jb->acc + (p + i - jb->r0) * v + n0, row, sizeof(float) * real);
                continue;
            }
            if (left == 0) left = (size_t)jb->lengths[++seq];
            float *acc = jb->acc + seq * v + n0;
            if (left-- == (size_t)jb->lengths[seq]) {  /* the sequence's first token */
                emb_memcpy(acc, row, sizeof(float) * real);
            } else if (jb->pooling == EMB_SPARSE_SUM) {
                for (size_t j = 0; j < real; j++) acc[j] = acc[j] + row[j];
            } else {
                for (size_t j = 0; j < real; j++) acc[j] = row[j] > acc[j] ? row[j] : acc[j];
            }
        }
    }
}

void emb_sparse_run(emb_context *ctx, const int32_t *lengths, size_t n_seqs, int per_token, int pooling, int top_k,
                    float *values, int32_t *indices) {
    const emb_config *cf = &ctx->model->config;
    size_t v = (size_t)cf->vocab_size, r = ctx->panel_rows, total = 0, k = top_k > 0 ? (size_t)top_k : 0;
    for (size_t s = 0; s < n_seqs; s++) total += (size_t)lengths[s];
    sparse_job jb = {0};
    jb.ctx = ctx;
    jb.k = ctx->kernels;
    jb.cf = cf;
    jb.h = &ctx->model->weights.head;
    jb.total = total;
    jb.rows = r;
    jb.per_token = per_token;
    jb.pooling = pooling;
    emb_threads_run(ctx->threads, (total + r - 1) / r, task_transform, &jb);

    /* groups of rows whose weights fit their destination: the output itself, or (top-k) the
       context's R rows of V floats, which hold R sequences' pooled rows or R tokens' rows */
    size_t slices = ((size_t)jb.h->decoder.n + EMB_VOCAB_SLICE - 1) / EMB_VOCAB_SLICE;
    size_t s0 = 0, t0 = 0;
    while (t0 < total) {
        size_t s1 = s0, t1 = t0;
        if (per_token) {
            t1 = k && total - t0 > r ? t0 + r : total;
        } else {
            while (s1 < n_seqs && (!k || s1 - s0 < r)) t1 += (size_t)lengths[s1++];
        }
        jb.r0 = t0, jb.r1 = t1, jb.lengths = lengths + s0;
        size_t out_row = per_token ? t0 : s0, rows = per_token ? t1 - t0 : s1 - s0;
        jb.acc = k ? ctx->acc : values + out_row * v;
        emb_threads_run(ctx->threads, slices, task_vocab, &jb);
        for (size_t i = 0; k && i < rows; i++) {
            emb_top_k(ctx->acc + i * v, v, k, values + (out_row + i) * k, indices + (out_row + i) * k);
        }
        s0 = s1, t0 = t1;
    }
}
