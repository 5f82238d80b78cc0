/*
 * kernels_simd128.c — wasm SIMD128 versions of the kernels in kernels.c, bit for bit equal.
 *
 * The int8 GEMM has no relaxed instructions to lean on: it widens to i16 and uses
 * i32x4.dot_i16x8_s. An n4k4 cell (4 output rows × 4 consecutive k) widens into two i16x8,
 * rows 0-1 and rows 2-3, each lane pair one row's k0..k3; one dot against (x_k0..x_k3) twice
 * gives [r0 k0k1, r0 k2k3, r1 k0k1, r1 k2k3]. Activations are kept widened to int16 (emb_qx),
 * so that pattern is a single 64-bit splat. The lane pairs are added once per block, then the
 * float work happens once per block (32 MACs per lane), in the reference's order.
 * Tiles of 4 rows × 4 outputs: 6 rows or 8 outputs ran slower (register spills on x64 hosts).
 */
#include <wasm_simd128.h>

#include "emb_math.h"
#include "kernels.h"

/* ── quantize ─────────────────────────────────────────────────────────────────────── */

/* One block of 32: its scale, and the codes as eight i32x4 (all zero when the scale is 0). */
static inline float quantize_block(const float *xb, v128_t qi[8]) {
    const v128_t lo = wasm_f32x4_splat(-127.0f), hi = wasm_f32x4_splat(127.0f);
    v128_t v[8];
    v128_t mx = wasm_f32x4_splat(0.0f);
    for (int j = 0; j < 8; j++) {
        v[j] = wasm_v128_load(xb + 4 * j);
        /* pmax(a, b) = a < b ? b : a: skips NaN like the reference's comparison */
        mx = wasm_f32x4_pmax(mx, wasm_f32x4_abs(v[j]));
    }
    float m0 = wasm_f32x4_extract_lane(mx, 0), m1 = wasm_f32x4_extract_lane(mx, 1);
    float m2 = wasm_f32x4_extract_lane(mx, 2), m3 = wasm_f32x4_extract_lane(mx, 3);
    float amax = m0 > m1 ? m0 : m1;
    amax = m2 > amax ? m2 : amax;
    amax = m3 > amax ? m3 : amax;
    float sc = amax / 127.0f;
    if (sc == 0.0f) {
        for (int j = 0; j < 8; j++) qi[j] = wasm_i32x4_splat(0);
        return sc;
    }
    v128_t vs = wasm_f32x4_splat(sc);
    for (int j = 0; j < 8; j++) {
        v128_t t = wasm_f32x4_nearest(wasm_f32x4_div(v[j], vs));
        t = wasm_f32x4_pmin(t, hi);
        t = wasm_v128_bitselect(t, lo, wasm_f32x4_ge(t, lo));  /* NaN → -127 */
        qi[j] = wasm_i32x4_trunc_sat_f32x4(t);
    }
    return sc;
}

void emb_quantize_rows_simd128(const float *x, size_t m, size_t k, int8_t *q, float *s) {
    size_t nb = k / EMB_BLOCK;
    for (size_t i = 0; i < m; i++) {
        for (size_t b = 0; b < nb; b++) {
            v128_t qi[8];
            s[i * nb + b] = quantize_block(x + i * k + b * EMB_BLOCK, qi);
            int8_t *qb = q + i * k + b * EMB_BLOCK;
            v128_t h0 = wasm_i16x8_narrow_i32x4(qi[0], qi[1]), h1 = wasm_i16x8_narrow_i32x4(qi[2], qi[3]);
            v128_t h2 = wasm_i16x8_narrow_i32x4(qi[4], qi[5]), h3 = wasm_i16x8_narrow_i32x4(qi[6], qi[7]);
            wasm_v128_store(qb, wasm_i8x16_narrow_i16x8(h0, h1));
            wasm_v128_store(qb + 16, wasm_i8x16_narrow_i16x8(h2, h3));
        }
    }
}

void emb_quantize_rows16_simd128(const float *x, size_t m, size_t k, int16_t *q, float *s) {
    size_t nb = k / EMB_BLOCK;
    for (size_t i = 0; i < m; i++) {
        for (size_t b = 0; b < nb; b++) {
            v128_t qi[8];
            s[i * nb + b] = quantize_block(x + i * k + b * EMB_BLOCK, qi);
            int16_t *qb = q + i * k + b * EMB_BLOCK;
            for (int j = 0; j < 4; j++) wasm_v128_store(qb + 8 * j, wasm_i16x8_narrow_i32x4(qi[2 * j], qi[2 * j + 1]));
        }
    }
}

/* ── int8 GEMM ────────────────────────────────────────────────────────────────────── */

#ifndef EMB_SIMD_MR
#define EMB_SIMD_MR 4  /* rows per tile, at most 6 */
#endif

/* MR rows × NG groups of 4 outputs. Integer sums of a block stay in registers; the float
 * accumulators are updated once per block. */
static inline __attribute__((always_inline)) void gemm_tile(const int16_t *xq, const float *xs, size_t k, size_t nb,
                                                            const int8_t *w0, const int8_t *w1, const float *s0,
                                                            const float *s1, float *y, size_t ldy, const int MR,
                                                            const int NG) {
    v128_t facc[EMB_SIMD_MR][2];
    for (int r = 0; r < MR; r++) {
        facc[r][0] = wasm_f32x4_splat(0.0f);
        facc[r][1] = wasm_f32x4_splat(0.0f);
    }
    for (size_t b = 0; b < nb; b++) {
        /* lo lanes: [r0 k0k1, r0 k2k3, r1 k0k1, r1 k2k3]; hi: the same for r2, r3 */
        v128_t lo[EMB_SIMD_MR][2], hi[EMB_SIMD_MR][2];
        for (int r = 0; r < MR; r++) {
            for (int g = 0; g < NG; g++) lo[r][g] = hi[r][g] = wasm_i32x4_splat(0);
        }
        for (int j = 0; j < EMB_BLOCK / 4; j++) {
            size_t cell = (b * (EMB_BLOCK / 4) + (size_t)j) * 16;
            v128_t wl[2], wh[2];
            for (int g = 0; g < NG; g++) {
                /* load8x8: each half widens with its load (one instruction, no extend_high) */
                wl[g] = wasm_i16x8_load8x8((g ? w1 : w0) + cell);
                wh[g] = wasm_i16x8_load8x8((g ? w1 : w0) + cell + 8);
            }
            for (int r = 0; r < MR; r++) {
                /* (x_k0, x_k1, x_k2, x_k3) twice: one 64-bit splat of the widened codes */
                v128_t xv = wasm_v128_load64_splat(xq + (size_t)r * k + b * EMB_BLOCK + (size_t)j * 4);
                for (int g = 0; g < NG; g++) {
                    lo[r][g] = wasm_i32x4_add(lo[r][g], wasm_i32x4_dot_i16x8(wl[g], xv));
                    hi[r][g] = wasm_i32x4_add(hi[r][g], wasm_i32x4_dot_i16x8(wh[g], xv));
                }
            }
        }
        v128_t sw[2] = {wasm_v128_load(s0 + b * 4), NG > 1 ? wasm_v128_load(s1 + b * 4) : wasm_i32x4_splat(0)};
        for (int r = 0; r < MR; r++) {
            v128_t sx = wasm_f32x4_splat(xs[(size_t)r * nb + b]);
            for (int g = 0; g < NG; g++) {
                v128_t even = wasm_i32x4_shuffle(lo[r][g], hi[r][g], 0, 2, 4, 6);
                v128_t odd = wasm_i32x4_shuffle(lo[r][g], hi[r][g], 1, 3, 5, 7);
                v128_t isum = wasm_i32x4_add(even, odd);
                facc[r][g] = wasm_f32x4_add(facc[r][g],
                                            wasm_f32x4_mul(wasm_f32x4_mul(sx, sw[g]), wasm_f32x4_convert_i32x4(isum)));
            }
        }
    }
    for (int r = 0; r < MR; r++) {
        wasm_v128_store(y + (size_t)r * ldy, facc[r][0]);
        if (NG > 1) wasm_v128_store(y + (size_t)r * ldy + 4, facc[r][1]);
    }
}

#ifndef EMB_SIMD_NG
#define EMB_SIMD_NG 1  /* groups of 4 outputs per tile: 2 spills registers on x64 hosts */
#endif

#define TILE(mr, ng) gemm_tile(xr, sr, k, nb, w0, w1, s0, s1, yt, ldy, mr, ng)

void emb_gemm_q8_simd128(const int16_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy) {
    size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4;
    for (size_t i = 0; i < m; i += EMB_SIMD_MR) {
        size_t mr = m - i < EMB_SIMD_MR ? m - i : EMB_SIMD_MR;
        const int16_t *xr = xq + i * k;
        const float *sr = xs + i * nb;
        for (size_t g = 0; g < ng; g += EMB_SIMD_NG) {
            const int8_t *w0 = w->q + g * 4 * k, *w1 = w0 + 4 * k;
            const float *s0 = w->scale + g * 4 * nb, *s1 = s0 + 4 * nb;
            float *yt = y + i * ldy + g * 4;
            int two = EMB_SIMD_NG == 2 && g + 1 < ng;
            if (two) {
                switch (mr) {
#if EMB_SIMD_MR > 4
                case 6: TILE(6, 2); break;
                case 5: TILE(5, 2); break;
#endif
                case 4: TILE(4, 2); break;
                case 3: TILE(3, 2); break;
                case 2: TILE(2, 2); break;
                default: TILE(1, 2); break;
                }
            } else {
                switch (mr) {
#if EMB_SIMD_MR > 4
                case 6: TILE(6, 1); break;
                case 5: TILE(5, 1); break;
#endif
                case 4: TILE(4, 1); break;
                case 3: TILE(3, 1); break;
                case 2: TILE(2, 1); break;
                default: TILE(1, 1); break;
                }
            }
            /* bias last: y = Σ + bias, as the reference */
            for (size_t r = 0; r < mr; r++) {
                float *yr = yt + r * ldy;
                wasm_v128_store(yr, wasm_f32x4_add(wasm_v128_load(yr), wasm_v128_load(w->bias + g * 4)));
                if (two) wasm_v128_store(yr + 4, wasm_f32x4_add(wasm_v128_load(yr + 4), wasm_v128_load(w->bias + g * 4 + 4)));
            }
        }
    }
}
#undef TILE

/* ── LayerNorm, GELU ──────────────────────────────────────────────────────────────── */

static inline float hsum4v(v128_t a) {
    return emb_hsum4(wasm_f32x4_extract_lane(a, 0), wasm_f32x4_extract_lane(a, 1), wasm_f32x4_extract_lane(a, 2),
                     wasm_f32x4_extract_lane(a, 3));
}

void emb_layernorm_simd128(float *x, const float *residual, size_t m, size_t c, size_t ld, const float *gamma,
                           const float *beta, float eps) {
    size_t cv = c / 4 * 4;  /* columns past cv go one by one, into the lane j & 3 */
    for (size_t i = 0; i < m; i++) {
        float *row = x + i * ld;
        v128_t a = wasm_f32x4_splat(0.0f);
        for (size_t j = 0; j < cv; j += 4) {
            v128_t v = wasm_v128_load(row + j);
            if (residual) {
                v = wasm_f32x4_add(v, wasm_v128_load(residual + i * ld + j));
                wasm_v128_store(row + j, v);
            }
            a = wasm_f32x4_add(a, v);
        }
        float l[4] = {wasm_f32x4_extract_lane(a, 0), wasm_f32x4_extract_lane(a, 1), wasm_f32x4_extract_lane(a, 2),
                      wasm_f32x4_extract_lane(a, 3)};
        for (size_t j = cv; j < c; j++) {
            if (residual) row[j] = row[j] + residual[i * ld + j];
            l[j & 3] += row[j];
        }
        float mean = emb_hsum4(l[0], l[1], l[2], l[3]) / (float)c;
        v128_t vm = wasm_f32x4_splat(mean);
        a = wasm_f32x4_splat(0.0f);
        for (size_t j = 0; j < cv; j += 4) {
            v128_t d = wasm_f32x4_sub(wasm_v128_load(row + j), vm);
            a = wasm_f32x4_add(a, wasm_f32x4_mul(d, d));
        }
        l[0] = wasm_f32x4_extract_lane(a, 0), l[1] = wasm_f32x4_extract_lane(a, 1);
        l[2] = wasm_f32x4_extract_lane(a, 2), l[3] = wasm_f32x4_extract_lane(a, 3);
        for (size_t j = cv; j < c; j++) {
            float d = row[j] - mean;
            l[j & 3] += d * d;
        }
        float var = emb_hsum4(l[0], l[1], l[2], l[3]) / (float)c;
        float invs = 1.0f / __builtin_sqrtf(var + eps);
        v128_t inv = wasm_f32x4_splat(invs);
        for (size_t j = 0; j < cv; j += 4) {
            v128_t d = wasm_f32x4_mul(wasm_f32x4_sub(wasm_v128_load(row + j), vm), inv);
            wasm_v128_store(row + j, wasm_f32x4_add(wasm_f32x4_mul(d, wasm_v128_load(gamma + j)), wasm_v128_load(beta + j)));
        }
        for (size_t j = cv; j < c; j++) row[j] = ((row[j] - mean) * invs) * gamma[j] + beta[j];
    }
}

static inline v128_t erf4(v128_t x) {
    x = wasm_f32x4_pmax(x, wasm_f32x4_splat(-4.0f));  /* x < -4 ? -4 : x */
    x = wasm_f32x4_pmin(x, wasm_f32x4_splat(4.0f));   /* x > 4 ? 4 : x */
    v128_t x2 = wasm_f32x4_mul(x, x);
#define MA(a, b, c) wasm_f32x4_add(wasm_f32x4_mul((a), (b)), wasm_f32x4_splat(c))
    v128_t p = MA(x2, wasm_f32x4_splat(EMB_ERF_A13), EMB_ERF_A11);
    p = MA(p, x2, EMB_ERF_A9);
    p = MA(p, x2, EMB_ERF_A7);
    p = MA(p, x2, EMB_ERF_A5);
    p = MA(p, x2, EMB_ERF_A3);
    p = MA(p, x2, EMB_ERF_A1);
    p = wasm_f32x4_mul(p, x);
    v128_t q = MA(x2, wasm_f32x4_splat(EMB_ERF_B8), EMB_ERF_B6);
    q = MA(q, x2, EMB_ERF_B4);
    q = MA(q, x2, EMB_ERF_B2);
    q = MA(q, x2, EMB_ERF_B0);
    return wasm_f32x4_div(p, q);
}

void emb_gelu_simd128(float *x, size_t n) {
    size_t i = 0;
    const v128_t half = wasm_f32x4_splat(0.5f), one = wasm_f32x4_splat(1.0f);
    const v128_t rs2 = wasm_f32x4_splat(0.70710678118654752f);
    for (; i + 4 <= n; i += 4) {
        v128_t v = wasm_v128_load(x + i);
        v128_t e = erf4(wasm_f32x4_mul(v, rs2));
        wasm_v128_store(x + i, wasm_f32x4_mul(wasm_f32x4_mul(v, half), wasm_f32x4_add(one, e)));
    }
    for (; i < n; i++) x[i] = emb_gelu1(x[i]);
}

/* ── attention ────────────────────────────────────────────────────────────────────── */

static inline v128_t exp4(v128_t x) {
    /* pmax(LO, x) = LO < x ? x : LO and pmin(HI, x) = x < HI ? x : HI: NaN → LO, as emb_expf */
    x = wasm_f32x4_pmax(wasm_f32x4_splat(EMB_EXP_LO), x);
    x = wasm_f32x4_pmin(wasm_f32x4_splat(EMB_EXP_HI), x);
    v128_t n = wasm_f32x4_nearest(wasm_f32x4_mul(x, wasm_f32x4_splat(EMB_LOG2E)));
    v128_t r = wasm_f32x4_sub(x, wasm_f32x4_mul(n, wasm_f32x4_splat(EMB_LN2_HI)));
    r = wasm_f32x4_sub(r, wasm_f32x4_mul(n, wasm_f32x4_splat(EMB_LN2_LO)));
    v128_t z = wasm_f32x4_mul(r, r);
    v128_t y = MA(wasm_f32x4_splat(EMB_EXP_P0), r, EMB_EXP_P1);
    y = MA(y, r, EMB_EXP_P2);
    y = MA(y, r, EMB_EXP_P3);
    y = MA(y, r, EMB_EXP_P4);
    y = MA(y, r, EMB_EXP_P5);
    y = wasm_f32x4_add(wasm_f32x4_mul(y, z), r);
    y = wasm_f32x4_add(y, wasm_f32x4_splat(1.0f));
    v128_t pow2 = wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_trunc_sat_f32x4(n), wasm_i32x4_splat(127)), 23);
    return wasm_f32x4_mul(y, pow2);
}
#undef MA

/* hsum4 of four vectors at once, each lane (x0 + x2) + (x1 + x3) exactly as emb_hsum4 */
static inline v128_t hsum4x4(v128_t a, v128_t b, v128_t c, v128_t d) {
    v128_t ab_lo = wasm_i32x4_shuffle(a, b, 0, 4, 1, 5), ab_hi = wasm_i32x4_shuffle(a, b, 2, 6, 3, 7);
    v128_t cd_lo = wasm_i32x4_shuffle(c, d, 0, 4, 1, 5), cd_hi = wasm_i32x4_shuffle(c, d, 2, 6, 3, 7);
    v128_t l0 = wasm_i64x2_shuffle(ab_lo, cd_lo, 0, 2), l1 = wasm_i64x2_shuffle(ab_lo, cd_lo, 1, 3);
    v128_t l2 = wasm_i64x2_shuffle(ab_hi, cd_hi, 0, 2), l3 = wasm_i64x2_shuffle(ab_hi, cd_hi, 1, 3);
    return wasm_f32x4_add(wasm_f32x4_add(l0, l2), wasm_f32x4_add(l1, l3));
}

static inline v128_t dot4(const float *q, const float *k, size_t d_head) {
    v128_t a = wasm_f32x4_splat(0.0f);
    for (size_t d = 0; d < d_head; d += 4) a = wasm_f32x4_add(a, wasm_f32x4_mul(wasm_v128_load(q + d), wasm_v128_load(k + d)));
    return a;
}

void emb_attention_simd128(const emb_attention_args *args, size_t h0, size_t h1, float *scores) {
    size_t n = args->n, c = args->c, d_head = c / args->n_heads, ld = args->ldq;
    if (d_head % 4 != 0 || (args->window && n > args->window + 1)) {
        emb_attention_heads_ref(args, h0, h1, scores);
        return;
    }
    const float *qkv = args->qkv;
    float scale = 1.0f / __builtin_sqrtf((float)d_head);
    for (size_t h = h0; h < h1; h++) {
        const float *kh = qkv + c + h * d_head, *vh = qkv + 2 * c + h * d_head;
        for (size_t i = 0; i < n; i++) {
            const float *q = qkv + i * ld + h * d_head;
            const float *bias = args->bias ? args->bias + h * args->bias_ld + args->bias_mid - i : NULL;
            /* scores, four keys at a time; the bias after the scale, as the reference */
            v128_t vmax = wasm_f32x4_splat(-3.0e38f), vscale = wasm_f32x4_splat(scale);
            size_t j = 0;
            for (; j + 4 <= n; j += 4) {
                v128_t sc = hsum4x4(dot4(q, kh + j * ld, d_head), dot4(q, kh + (j + 1) * ld, d_head),
                                    dot4(q, kh + (j + 2) * ld, d_head), dot4(q, kh + (j + 3) * ld, d_head));
                sc = wasm_f32x4_mul(sc, vscale);
                if (bias) sc = wasm_f32x4_add(sc, wasm_v128_load(bias + j));
                wasm_v128_store(scores + j, sc);
                vmax = wasm_f32x4_pmax(vmax, sc);
            }
            float mx = -3.0e38f;
            for (int l = 0; l < 4; l++) {
                float e = l == 0 ? wasm_f32x4_extract_lane(vmax, 0) : l == 1 ? wasm_f32x4_extract_lane(vmax, 1)
                          : l == 2 ? wasm_f32x4_extract_lane(vmax, 2) : wasm_f32x4_extract_lane(vmax, 3);
                mx = e > mx ? e : mx;
            }
            for (; j < n; j++) {
                v128_t a = dot4(q, kh + j * ld, d_head);
                float sc = hsum4v(a) * scale;
                if (bias) sc = sc + bias[j];
                scores[j] = sc;
                mx = sc > mx ? sc : mx;
            }
            /* softmax numerators and their sum, lane l summing keys j ≡ l (mod 4) */
            v128_t vmx = wasm_f32x4_splat(mx), a = wasm_f32x4_splat(0.0f);
            for (j = 0; j + 4 <= n; j += 4) {
                v128_t e = exp4(wasm_f32x4_sub(wasm_v128_load(scores + j), vmx));
                wasm_v128_store(scores + j, e);
                a = wasm_f32x4_add(a, e);
            }
            float lane[4] = {wasm_f32x4_extract_lane(a, 0), wasm_f32x4_extract_lane(a, 1),
                             wasm_f32x4_extract_lane(a, 2), wasm_f32x4_extract_lane(a, 3)};
            for (; j < n; j++) {
                float e = emb_expf(scores[j] - mx);
                scores[j] = e;
                lane[j & 3] += e;
            }
            v128_t inv = wasm_f32x4_splat(1.0f / emb_hsum4(lane[0], lane[1], lane[2], lane[3]));
            for (j = 0; j + 4 <= n; j += 4) wasm_v128_store(scores + j, wasm_f32x4_mul(wasm_v128_load(scores + j), inv));
            for (; j < n; j++) scores[j] = scores[j] * wasm_f32x4_extract_lane(inv, 0);
            /* out = Σ_j p_j v_j, keys in order; 32 outputs at a time stay in registers */
            float *o = args->out + i * args->ldo + h * d_head;
            for (size_t d0 = 0; d0 < d_head; d0 += 32) {
                size_t nv = d_head - d0 >= 32 ? 8 : (d_head - d0) / 4;
                v128_t acc[8];
                for (size_t t = 0; t < 8; t++) acc[t] = wasm_f32x4_splat(0.0f);
                for (j = 0; j < n; j++) {
                    v128_t p = wasm_f32x4_splat(scores[j]);
                    const float *v = vh + j * ld + d0;
                    if (nv == 8) {
                        for (size_t t = 0; t < 8; t++) acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(p, wasm_v128_load(v + 4 * t)));
                    } else {
                        for (size_t t = 0; t < nv; t++) acc[t] = wasm_f32x4_add(acc[t], wasm_f32x4_mul(p, wasm_v128_load(v + 4 * t)));
                    }
                }
                for (size_t t = 0; t < nv; t++) wasm_v128_store(o + d0 + 4 * t, acc[t]);
            }
        }
    }
}

/* ── the softmax of int8 attention ─────────────────────────────────────────────────── */

/* emb_softmax_rows_ref: vectors of 4 keys inside the window, its ragged edges one by one, each
   lane of the sum in increasing key order. */
void emb_softmax_rows_simd128(float *s, size_t m, size_t n, size_t ld, size_t i0, float scale, const float *bias,
                              size_t window) {
    size_t n32 = (n + 31) & ~(size_t)31, w = window;
    for (size_t r = 0; r < m; r++) {
        size_t i = i0 + r, j0 = w && i > w ? i - w : 0, j1 = w && i + w + 1 < n ? i + w + 1 : n;
        size_t ja = (j0 + 3) & ~(size_t)3, jb;
        if (ja > j1) ja = j1;
        jb = ja + (j1 - ja) / 4 * 4;
        float *row = s + r * ld;
        const float *b = bias ? bias - (ptrdiff_t)i : NULL; /* b[j]: the bias of key j */
        v128_t vs = wasm_f32x4_splat(scale), vm = wasm_f32x4_splat(-3.0e38f);
        float mx = -3.0e38f;
        for (size_t j = j0; j < ja; j++) {
            float x = row[j] * scale;
            if (b) x = x + b[j];
            row[j] = x;
            mx = x > mx ? x : mx;
        }
        for (size_t j = ja; j < jb; j += 4) {
            v128_t x = wasm_f32x4_mul(wasm_v128_load(row + j), vs);
            if (b) x = wasm_f32x4_add(x, wasm_v128_load(b + j));
            wasm_v128_store(row + j, x);
            vm = wasm_f32x4_pmax(vm, x); /* x > vm ? x : vm, NaN skipped like the reference */
        }
        for (size_t j = jb; j < j1; j++) {
            float x = row[j] * scale;
            if (b) x = x + b[j];
            row[j] = x;
            mx = x > mx ? x : mx;
        }
        for (int l = 0; l < 4 && jb > ja; l++) {
            float e = l == 0 ? wasm_f32x4_extract_lane(vm, 0) : l == 1 ? wasm_f32x4_extract_lane(vm, 1)
                      : l == 2 ? wasm_f32x4_extract_lane(vm, 2) : wasm_f32x4_extract_lane(vm, 3);
            mx = e > mx ? e : mx;
        }
        float l4[4] = {0, 0, 0, 0};
        for (size_t j = j0; j < ja; j++) {
            float e = emb_expf(row[j] - mx);
            row[j] = e;
            l4[j & 3] += e;
        }
        v128_t vmx = wasm_f32x4_splat(mx), a = wasm_v128_load(l4);
        for (size_t j = ja; j < jb; j += 4) {
            v128_t e = exp4(wasm_f32x4_sub(wasm_v128_load(row + j), vmx));
            wasm_v128_store(row + j, e);
            a = wasm_f32x4_add(a, e);
        }
        wasm_v128_store(l4, a);
        for (size_t j = jb; j < j1; j++) {
            float e = emb_expf(row[j] - mx);
            row[j] = e;
            l4[j & 3] += e;
        }
        float inv = 1.0f / emb_hsum4(l4[0], l4[1], l4[2], l4[3]);
        v128_t vi = wasm_f32x4_splat(inv);
        for (size_t j = 0; j < j0; j++) row[j] = 0.0f;
        for (size_t j = j0; j < ja; j++) row[j] = row[j] * inv;
        for (size_t j = ja; j < jb; j += 4) wasm_v128_store(row + j, wasm_f32x4_mul(wasm_v128_load(row + j), vi));
        for (size_t j = jb; j < j1; j++) row[j] = row[j] * inv;
        for (size_t j = j1; j < n32; j++) row[j] = 0.0f;
    }
}
