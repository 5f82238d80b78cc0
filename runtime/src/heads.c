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
 * Rescored (config.linear_f32: the encoder and the transform fp32): the int8 decoder's logits
 * are made exact where it matters. With x̂ = s_x q_x, ŵ = s_w q_w (|x − x̂| ≤ s_x/2, |w − ŵ| ≤
 * s_w/2), each product's error is |x w − x̂ ŵ| ≤ |x| s_w/2 + |w| s_x/2 + s_x s_w/4, so a logit's
 * error is at most, for every vocabulary row v,
 *     E = Σ_b [ (max_v s_w(v, b) / 2) · Σ_{j∈b} |x_j| + s_x(b) · max_v (Σ_{j∈b} |w_vj| / 2 + 8 s_w(v, b)) ]
 * (blocks b of 32; the two maxima over the vocabulary are the coefficients computed at load),
 * taken 1 % larger plus 1e-4 for the float rounding of both sums. A logit whose int8 value is
 * at most −E is negative, so relu gives 0; every other one (about 31 a token of SPLADE-tiny's
 * 30,522) is recomputed in fp32 from the decoder's fp32 rows, h · w_v + b_v (emb_dot_f32_ref).
 * The weights are then fp32's: every logit that is positive in fp32 is recomputed exactly.
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

void emb_rescore_coefficients(const emb_linear *dec, const float *exact, size_t v, size_t c, float *bound) {
    size_t kb = (size_t)dec->k / EMB_BLOCK;
    for (size_t b = 0; b < kb; b++) bound[b] = bound[kb + b] = 0.0f;
    for (size_t row = 0; row < v; row++) {
        size_t g = row / 4, r = row % 4;
        const float *w = exact + row * c;
        for (size_t b = 0; b < kb; b++) {
            float sw = dec->scale[(g * kb + b) * 4 + r], a = 0.0f;
            for (size_t j = b * EMB_BLOCK; j < (b + 1) * EMB_BLOCK && j < c; j++) a += w[j] < 0 ? -w[j] : w[j];
            float half = 0.5f * sw, other = 0.5f * a + (float)(EMB_BLOCK / 4) * sw;
            bound[b] = half > bound[b] ? half : bound[b];
            bound[kb + b] = other > bound[kb + b] ? other : bound[kb + b];
        }
    }
}

float emb_rescore_bound(const float *bound, const float *x, const float *xs, size_t kp) {
    size_t kb = kp / EMB_BLOCK;
    float e = 0.0f;
    for (size_t b = 0; b < kb; b++) {
        float a = 0.0f;
        for (size_t j = b * EMB_BLOCK; j < (b + 1) * EMB_BLOCK; j++) a += x[j] < 0 ? -x[j] : x[j];
        e += bound[b] * a + xs[b] * bound[kb + b];
    }
    return 1.01f * e + 1e-4f;
}

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
    if (jb->h->transform.w) {
        ctx->gemm_f32(ctx->x + a * cp, m, &jb->h->transform, panel, cp);
    } else {
        jb->k->quantize_rows(ctx->x + a * cp, m, cp, xq, xs);
        jb->k->gemm_q8(xq, xs, m, &jb->h->transform, panel, cp);
    }
    if (cf->mlm_act == EMB_ACT_GELU) jb->k->gelu(panel, m * cp);
    else emb_act_ref(cf->mlm_act, panel, m * cp);
    jb->k->layernorm(panel, NULL, m, c, cp, jb->h->norm_w, jb->h->norm_b, cf->eps);
    jb->k->quantize_rows(panel, m, cp, xq, xs);  /* the decoder's input, in place of the hidden state's */
    if (jb->h->exact) {  /* rescored: the decoder's float input (in place of the hidden state) and bound */
        emb_memcpy(ctx->x + a * cp, panel, sizeof(float) * m * cp);
        for (size_t i = 0; i < m; i++) ctx->err[a + i] = emb_rescore_bound(jb->h->bound, panel + i * cp, xs + i * nb, cp);
    }
}

/* log(1 + relu(logit)), twice log1p for "log1p_relu" */
static float sparse_weight(const emb_config *cf, float logit) {
    float w = emb_log1pf(logit > 0.0f ? logit : 0.0f);
    return cf->sparse_log1p2 ? emb_log1pf(w) : w;
}

/* Rescored: the weights of rows p .. p+m-1 in y (R, EMB_VOCAB_SLICE) for vocabulary entries
   n0 .. n0+real-1 from their int8 logits there: from the exact logit where the bound leaves it
   possibly positive, else 0 (what a logit ≤ 0 gives: emb_log1pf(0) = 0). */
static void rescore(const sparse_job *jb, size_t p, size_t m, size_t n0, size_t real, float *y) {
    const emb_context *ctx = jb->ctx;
    const emb_head_weights *h = jb->h;
    size_t c = (size_t)jb->cf->dim, cp = (size_t)jb->cf->dim_p;
    for (size_t i = 0; i < m; i++) {
        float *row = y + i * EMB_VOCAB_SLICE, lim = -ctx->err[p + i];
        const float *x = ctx->x + (p + i) * cp;
        for (size_t j = 0; j < real; j++) {
            if (!(row[j] > lim)) {
                row[j] = 0.0f;
                continue;
            }
            row[j] = sparse_weight(jb->cf, emb_dot_f32_ref(x, h->exact + (n0 + j) * c, c) + h->decoder.bias[n0 + j]);
        }
    }
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
                       (int32_t)(n1 - n0), dec->k, NULL,
                       dec->qt && n0 % 16 == 0 ? dec->qt + n0 * (size_t)dec->k : NULL};
    float *y = ctx->vocab + (size_t)worker * r * EMB_VOCAB_SLICE;
    size_t seq = 0, left = jb->per_token ? 0 : (size_t)jb->lengths[0];  /* the row's sequence, its rows to come */
    for (size_t p = jb->r0; p < jb->r1; p += r) {
        size_t m = jb->r1 - p < r ? jb->r1 - p : r;
        jb->k->gemm_q8((const emb_qx *)ctx->xq + p * cp, ctx->xs + p * nb, m, &part, y, EMB_VOCAB_SLICE);
        if (jb->h->exact) rescore(jb, p, m, n0, real, y);
        for (size_t i = 0; i < m; i++) {
            float *row = y + i * EMB_VOCAB_SLICE;
            for (size_t j = 0; !jb->h->exact && j < real; j++) row[j] = sparse_weight(cf, row[j]);
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
