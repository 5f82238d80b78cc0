/*
 * kernels_relaxed.c — the int8 GEMM on wasm relaxed SIMD, bit for bit equal to the reference.
 *
 * i32x4.relaxed_dot_i8x16_i7x16_add_s multiplies 16 signed bytes by 16 bytes that must lie in
 * 0..127 (x86 lowers it to pmaddubsw, which reads the second operand as unsigned), and adds
 * groups of 4 products into the 4 lanes. With the n4k4 packing one n4k4 cell against
 * (x_k0..x_k3) repeated four times gives the 4 output rows' partial sums directly.
 * Activations are signed, so each is split: x = x⁺ − x⁻ with x⁺ = max(x, 0), x⁻ = max(−x, 0),
 * both in 0..127, and acc += dot(w, x⁺) + dot(−w, x⁻). −w is safe: weights lie in [−127, 127].
 * Integer sums are exact, so the result is the reference's whatever the host's lowering —
 * provided the host computes the instruction correctly, which emb_relaxed_probe checks
 * (Node 20's V8 does not).
 */
#include <wasm_simd128.h>

#include "kernels.h"

static inline __attribute__((always_inline)) void gemm_tile(const int8_t *xq, const float *xs, size_t k, size_t nb,
                                                            const int8_t *w0, const int8_t *w1, const float *s0,
                                                            const float *s1, float *y, size_t ldy, const int MR,
                                                            const int NG) {
    v128_t facc[4][2];
    for (int r = 0; r < MR; r++) {
        facc[r][0] = wasm_f32x4_splat(0.0f);
        facc[r][1] = wasm_f32x4_splat(0.0f);
    }
    const v128_t zero = wasm_i8x16_splat(0);
    for (size_t b = 0; b < nb; b++) {
        v128_t acc[4][2];
        for (int r = 0; r < MR; r++) {
            acc[r][0] = wasm_i32x4_splat(0);
            acc[r][1] = wasm_i32x4_splat(0);
        }
        for (int j = 0; j < EMB_BLOCK / 4; j++) {
            size_t cell = (b * (EMB_BLOCK / 4) + (size_t)j) * 16;
            v128_t wp[2], wn[2];
            for (int g = 0; g < NG; g++) {
                wp[g] = wasm_v128_load((g ? w1 : w0) + cell);
                wn[g] = wasm_i8x16_neg(wp[g]);
            }
            for (int r = 0; r < MR; r++) {
                v128_t xv = wasm_v128_load32_splat(xq + (size_t)r * k + b * EMB_BLOCK + (size_t)j * 4);
                v128_t xp = wasm_i8x16_max(xv, zero);
                v128_t xn = wasm_i8x16_sub(xp, xv);
                for (int g = 0; g < NG; g++) {
                    acc[r][g] = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(wp[g], xp, acc[r][g]);
                    acc[r][g] = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(wn[g], xn, acc[r][g]);
                }
            }
        }
        v128_t sw0 = wasm_v128_load(s0 + b * 4), sw1 = NG > 1 ? wasm_v128_load(s1 + b * 4) : sw0;
        for (int r = 0; r < MR; r++) {
            v128_t sx = wasm_f32x4_splat(xs[(size_t)r * nb + b]);
            facc[r][0] = wasm_f32x4_add(facc[r][0],
                                        wasm_f32x4_mul(wasm_f32x4_mul(sx, sw0), wasm_f32x4_convert_i32x4(acc[r][0])));
            if (NG > 1) {
                facc[r][1] = wasm_f32x4_add(
                    facc[r][1], wasm_f32x4_mul(wasm_f32x4_mul(sx, sw1), wasm_f32x4_convert_i32x4(acc[r][1])));
            }
        }
    }
    for (int r = 0; r < MR; r++) {
        wasm_v128_store(y + (size_t)r * ldy, facc[r][0]);
        if (NG > 1) wasm_v128_store(y + (size_t)r * ldy + 4, facc[r][1]);
    }
}

#ifndef EMB_RELAXED_NG
#define EMB_RELAXED_NG 2
#endif

void emb_gemm_q8_relaxed(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy) {
    size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4;
    for (size_t i = 0; i < m; i += 4) {
        size_t mr = m - i < 4 ? m - i : 4;
        const int8_t *xr = xq + i * k;
        const float *sr = xs + i * nb;
        for (size_t g = 0; g < ng; g += EMB_RELAXED_NG) {
            const int8_t *w0 = w->q + g * 4 * k, *w1 = w0 + 4 * k;
            const float *s0 = w->scale + g * 4 * nb, *s1 = s0 + 4 * nb;
            float *yt = y + i * ldy + g * 4;
            int two = EMB_RELAXED_NG == 2 && g + 1 < ng;
            switch (mr * 2 + (size_t)two) {
            case 9: gemm_tile(xr, sr, k, nb, w0, w1, s0, s1, yt, ldy, 4, 2); break;
            case 8: gemm_tile(xr, sr, k, nb, w0, w1, s0, s1, yt, ldy, 4, 1); break;
            case 7: gemm_tile(xr, sr, k, nb, w0, w1, s0, s1, yt, ldy, 3, 2); break;
            case 6: gemm_tile(xr, sr, k, nb, w0, w1, s0, s1, yt, ldy, 3, 1); break;
            case 5: gemm_tile(xr, sr, k, nb, w0, w1, s0, s1, yt, ldy, 2, 2); break;
            case 4: gemm_tile(xr, sr, k, nb, w0, w1, s0, s1, yt, ldy, 2, 1); break;
            case 3: gemm_tile(xr, sr, k, nb, w0, w1, s0, s1, yt, ldy, 1, 2); break;
            default: gemm_tile(xr, sr, k, nb, w0, w1, s0, s1, yt, ldy, 1, 1); break;
            }
            for (size_t r = 0; r < mr; r++) {
                float *yr = yt + r * ldy;
                wasm_v128_store(yr, wasm_f32x4_add(wasm_v128_load(yr), wasm_v128_load(w->bias + g * 4)));
                if (two) wasm_v128_store(yr + 4, wasm_f32x4_add(wasm_v128_load(yr + 4), wasm_v128_load(w->bias + g * 4 + 4)));
            }
        }
    }
}

/*
 * The probe: the relaxed dot product on operands that expose every known wrong lowering
 * (signed second operand, saturation, lane order), compared with exact integer arithmetic.
 * Inputs go through volatile memory so the compiler cannot fold the instruction away.
 */
int32_t emb_relaxed_probe(void) {
    static volatile int8_t a[16] = {127, -127, 100, -1, -128, 127, 3, -7, 1, 2, 3, 4, -127, -127, -127, -127};
    static volatile int8_t b[16] = {127, 127, 0, 5, 127, 127, 99, 13, 10, 20, 30, 40, 127, 127, 127, 126};
    static volatile int32_t c[4] = {1, -2, 1000000, -1000000};
    int8_t av[16], bv[16];
    for (int i = 0; i < 16; i++) {
        av[i] = a[i];
        bv[i] = b[i];
    }
    v128_t r = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(wasm_v128_load(av), wasm_v128_load(bv),
                                                       wasm_i32x4_make(c[0], c[1], c[2], c[3]));
    int32_t got[4] = {wasm_i32x4_extract_lane(r, 0), wasm_i32x4_extract_lane(r, 1), wasm_i32x4_extract_lane(r, 2),
                      wasm_i32x4_extract_lane(r, 3)};
    for (int l = 0; l < 4; l++) {
        int32_t want = c[l];
        for (int i = 0; i < 4; i++) want += (int32_t)av[4 * l + i] * (int32_t)bv[4 * l + i];
        if (got[l] != want) return 0;
    }
    return 1;
}
