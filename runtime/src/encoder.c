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
 */
#include "kernels.h"
#include "model.h"

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

void emb_encoder_forward(emb_context *ctx, const int32_t *ids, const int32_t *lengths, size_t n_seqs) {
    const emb_config *cf = &ctx->model->config;
    const emb_weights *w = &ctx->model->weights;
    size_t c = (size_t)cf->dim, f = (size_t)cf->ffn_dim, nb = c / EMB_BLOCK;
    size_t total = 0;
    for (size_t s = 0; s < n_seqs; s++) total += (size_t)lengths[s];

    embed(ctx, ids, lengths, n_seqs);
    emb_layernorm(ctx->x, NULL, total, c, w->norm_w, w->norm_b, cf->eps);
    emb_quantize_rows(ctx->x, total, c, ctx->xq, ctx->xs);

    for (int32_t l = 0; l < cf->n_layers; l++) {
        const emb_layer *L = &w->layers[l];
        for (size_t r0 = 0; r0 < total; r0 += EMB_PANEL_ROWS) {
            size_t m = total - r0 < EMB_PANEL_ROWS ? total - r0 : EMB_PANEL_ROWS;
            emb_gemm_q8((emb_qx *)ctx->xq + r0 * c, ctx->xs + r0 * nb, m, &L->qkv, ctx->qkv + r0 * 3 * c, 3 * c);
        }
        size_t off = 0;
        for (size_t s = 0; s < n_seqs; s++) {
            size_t n = (size_t)lengths[s];
            emb_attention(ctx->qkv + off * 3 * c, n, c, (size_t)cf->n_heads, ctx->attn + off * c, ctx->scores);
            off += n;
        }
        emb_quantize_rows(ctx->attn, total, c, ctx->xq, ctx->xs);

        for (size_t r0 = 0; r0 < total; r0 += EMB_PANEL_ROWS) {
            size_t m = total - r0 < EMB_PANEL_ROWS ? total - r0 : EMB_PANEL_ROWS;
            float *x = ctx->x + r0 * c;
            emb_qx *xq = (emb_qx *)ctx->xq + r0 * c;
            float *xs = ctx->xs + r0 * nb;
            emb_gemm_q8(xq, xs, m, &L->out, ctx->panel, c);
            emb_layernorm(x, ctx->panel, m, c, L->attn_norm_w, L->attn_norm_b, cf->eps);
            emb_quantize_rows(x, m, c, xq, xs);
            emb_gemm_q8(xq, xs, m, &L->up, ctx->panel, f);
            emb_gelu(ctx->panel, m * f);
            emb_quantize_rows(ctx->panel, m, f, (emb_qx *)ctx->hq, ctx->hs);
            emb_gemm_q8((emb_qx *)ctx->hq, ctx->hs, m, &L->down, ctx->panel, c);
            emb_layernorm(x, ctx->panel, m, c, L->ffn_norm_w, L->ffn_norm_b, cf->eps);
            if (l + 1 < cf->n_layers) emb_quantize_rows(x, m, c, xq, xs);
        }
    }
}
