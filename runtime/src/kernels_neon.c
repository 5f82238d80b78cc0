/*
 * kernels_neon.c — two kernel sets for ARM64, bit for bit equal to the reference:
 * "neon-dotprod" (ARMv8.2 dot product, e.g. Neoverse, Cortex-A55/A76 and later, Apple M) and
 * "neon" (any ARM64: Cortex-A53/A72). Both use the float kernels of kernels_f32.inc on 4 lanes,
 * which are exactly the reference's 4 lanes.
 *
 * neon-dotprod GEMM: sdot multiplies signed by signed bytes, four products per 32-bit lane, and
 * its by-element form takes the 4 bytes of lane L of a second register: an n4k4 cell (4 output
 * rows × 4 k) is one 16-byte load, and one 16-byte load of the activations serves four cells
 * (lanes 0-3). Each lane of the int32 accumulator is one output row, so no offset or correction
 * is needed and the float epilogue is lane-wise. Tiles: 4 rows × 2 groups (8 outputs), 8 int32 +
 * 8 float accumulators of the 32 registers.
 *
 * neon GEMM: smull widens a cell times the broadcast activations to 16-bit products (rows 0-1 and
 * rows 2-3), sadalp adds their pairs into 32-bit lanes, and one addp per block gives the four rows'
 * sums.
 *
 * Speed on real ARM hardware is not measured here; the ARM64 build is checked for correctness
 * under qemu (runtime/build.sh arm64-test).
 */
#include "cpu_features.h"
#include "emb_math.h"
#include "kernels.h"

#if EMB_KERNELS == EMB_KERNELS_NATIVE && defined(__aarch64__)
#include <arm_neon.h>

#define DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#define INLINE static inline __attribute__((always_inline))

/* ── neon-dotprod GEMM ─────────────────────────────────────────────────────────────── */

INLINE DOTPROD void dot_tile(const int8_t *xq, const float *xs, size_t k, size_t nb, const int8_t *wq, const float *ws,
                             const float *bias, float *y, size_t ldy, const int MR, const int NG) {
    float32x4_t facc[4][2];
    for (int r = 0; r < MR; r++) facc[r][0] = facc[r][1] = vdupq_n_f32(0.0f);
    for (size_t b = 0; b < nb; b++) {
        int32x4_t acc[4][2];
        for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = vdupq_n_s32(0);
        for (size_t j = b * 8; j < b * 8 + 8; j += 4) {  /* 16 k: cells j .. j+3 */
            int8x16_t x[4];
            for (int r = 0; r < MR; r++) x[r] = vld1q_s8(xq + (size_t)r * k + 4 * j);
            for (int g = 0; g < NG; g++) {
                const int8_t *cell = wq + (size_t)g * 4 * k + j * 16;
                int8x16_t w0 = vld1q_s8(cell), w1 = vld1q_s8(cell + 16), w2 = vld1q_s8(cell + 32),
                          w3 = vld1q_s8(cell + 48);
                for (int r = 0; r < MR; r++) {
                    acc[r][g] = vdotq_laneq_s32(acc[r][g], w0, x[r], 0);
                    acc[r][g] = vdotq_laneq_s32(acc[r][g], w1, x[r], 1);
                    acc[r][g] = vdotq_laneq_s32(acc[r][g], w2, x[r], 2);
                    acc[r][g] = vdotq_laneq_s32(acc[r][g], w3, x[r], 3);
                }
            }
        }
        for (int g = 0; g < NG; g++) {
            float32x4_t sw = vld1q_f32(ws + (size_t)g * 4 * nb + b * 4);
            for (int r = 0; r < MR; r++) {
                float32x4_t scale = vmulq_f32(vdupq_n_f32(xs[(size_t)r * nb + b]), sw);
                facc[r][g] = vaddq_f32(facc[r][g], vmulq_f32(scale, vcvtq_f32_s32(acc[r][g])));
            }
        }
    }
    for (int r = 0; r < MR; r++) {
        for (int g = 0; g < NG; g++) {
            vst1q_f32(y + (size_t)r * ldy + 4 * g, vaddq_f32(facc[r][g], vld1q_f32(bias + 4 * g)));
        }
    }
}

static DOTPROD void gemm_q8_dotprod(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y,
                                    size_t ldy) {
    size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4;
    for (size_t g = 0; g < ng; g += 2) {
        const int8_t *wq = w->q + g * 4 * k;
        const float *ws = w->scale + g * 4 * nb, *bias = w->bias + g * 4;
        int two = g + 1 < ng;
        for (size_t i = 0; i < m; i += 4) {
            size_t mr = m - i < 4 ? m - i : 4;
            const int8_t *xr = xq + i * k;
            const float *sr = xs + i * nb;
            float *yt = y + i * ldy + g * 4;
            switch (mr * 2 + (size_t)two) {
            case 9: dot_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 4, 2); break;
            case 8: dot_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 4, 1); break;
            case 7: dot_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 3, 2); break;
            case 6: dot_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 3, 1); break;
            case 5: dot_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 2, 2); break;
            case 4: dot_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 2, 1); break;
            case 3: dot_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 1, 2); break;
            default: dot_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 1, 1); break;
            }
        }
    }
}

/* ── neon GEMM (no dot product) ────────────────────────────────────────────────────── */

INLINE void mull_tile(const int8_t *xq, const float *xs, size_t k, size_t nb, const int8_t *wq, const float *ws,
                      const float *bias, float *y, size_t ldy, const int MR) {
    float32x4_t facc[4];
    for (int r = 0; r < MR; r++) facc[r] = vdupq_n_f32(0.0f);
    for (size_t b = 0; b < nb; b++) {
        int32x4_t lo[4], hi[4];  /* [r0 k01, r0 k23, r1 k01, r1 k23], the same for rows 2-3 */
        for (int r = 0; r < MR; r++) lo[r] = hi[r] = vdupq_n_s32(0);
        for (size_t j = b * 8; j < b * 8 + 8; j++) {
            int8x16_t cell = vld1q_s8(wq + j * 16);
            for (int r = 0; r < MR; r++) {
                int32_t x4;
                __builtin_memcpy(&x4, xq + (size_t)r * k + 4 * j, 4);
                int8x16_t xv = vreinterpretq_s8_s32(vdupq_n_s32(x4));
                lo[r] = vpadalq_s16(lo[r], vmull_s8(vget_low_s8(cell), vget_low_s8(xv)));
                hi[r] = vpadalq_s16(hi[r], vmull_high_s8(cell, xv));
            }
        }
        float32x4_t sw = vld1q_f32(ws + b * 4);
        for (int r = 0; r < MR; r++) {
            int32x4_t isum = vpaddq_s32(lo[r], hi[r]);
            float32x4_t scale = vmulq_f32(vdupq_n_f32(xs[(size_t)r * nb + b]), sw);
            facc[r] = vaddq_f32(facc[r], vmulq_f32(scale, vcvtq_f32_s32(isum)));
        }
    }
    for (int r = 0; r < MR; r++) vst1q_f32(y + (size_t)r * ldy, vaddq_f32(facc[r], vld1q_f32(bias)));
}

static void gemm_q8_neon(const int8_t *xq, const float *xs, size_t m, const emb_linear *w, float *y, size_t ldy) {
    size_t k = (size_t)w->k, nb = k / EMB_BLOCK, ng = (size_t)w->n / 4;
    for (size_t g = 0; g < ng; g++) {
        const int8_t *wq = w->q + g * 4 * k;
        const float *ws = w->scale + g * 4 * nb, *bias = w->bias + g * 4;
        for (size_t i = 0; i < m; i += 4) {
            size_t mr = m - i < 4 ? m - i : 4;
            const int8_t *xr = xq + i * k;
            const float *sr = xs + i * nb;
            float *yt = y + i * ldy + g * 4;
            switch (mr) {
            case 4: mull_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 4); break;
            case 3: mull_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 3); break;
            case 2: mull_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 2); break;
            default: mull_tile(xr, sr, k, nb, wq, ws, bias, yt, ldy, 1); break;
            }
        }
    }
}

/* ── float kernels: kernels_f32.inc on 4 lanes ─────────────────────────────────────── */

#define EMB_F32(name) name##_neon
#define EMB_F32_ATTR
#define EMB_F32_QB 4
#define VF float32x4_t
#define VW 4
#define F4 float32x4_t
#define vld(p) vld1q_f32(p)
#define vst(p, v) vst1q_f32((p), (v))
#define vset(x) vdupq_n_f32(x)
#define vadd(a, b) vaddq_f32((a), (b))
#define vsub(a, b) vsubq_f32((a), (b))
#define vmul(a, b) vmulq_f32((a), (b))
#define vdiv(a, b) vdivq_f32((a), (b))
#define vabs(a) vabsq_f32(a)
#define vrint(a) vrndnq_f32(a)
#define vpow2(n) vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23))
#define vhmax(v) vmaxvq_f32(v)
#define f4zero() vdupq_n_f32(0.0f)
#define f4store(p, a) vst1q_f32((p), (a))
#define f4load(p) vld1q_f32(p)
#define f4sum4(a, v) vaddq_f32((a), (v))
/* a > b ? a : b and a < b ? a : b exactly (fmax/fmin would return NaN for a NaN) */
INLINE float32x4_t vmax_gt(float32x4_t a, float32x4_t b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
INLINE float32x4_t vmin_lt(float32x4_t a, float32x4_t b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
INLINE void vst_i8(int8_t *p, float32x4_t v) {
    int16x4_t h = vmovn_s32(vcvtq_s32_f32(v));
    int32_t four = vget_lane_s32(vreinterpret_s32_s8(vmovn_s16(vcombine_s16(h, h))), 0);
    __builtin_memcpy(p, &four, 4);
}
#include "kernels_f32.inc"

#if defined(__linux__)
static int supported_dotprod(void) { return (emb_arm64_hwcap() & EMB_ARM64_HWCAP_ASIMDDP) != 0; }
#else
static int supported_dotprod(void) { return 0; }
#endif

const emb_kernels emb_kernels_neon_dotprod = {
    "neon-dotprod", supported_dotprod, quantize_rows_neon, gemm_q8_dotprod, layernorm_neon, gelu_neon,
    attention_neon, softmax_rows_neon,
};
const emb_kernels emb_kernels_neon = {
    "neon", NULL, quantize_rows_neon, gemm_q8_neon, layernorm_neon, gelu_neon, attention_neon,
    softmax_rows_neon,
};

#elif EMB_KERNELS == EMB_KERNELS_NATIVE
static int unsupported(void) { return 0; }
const emb_kernels emb_kernels_neon_dotprod = {
    "neon-dotprod", unsupported, emb_quantize_rows_ref, emb_gemm_q8_ref, emb_layernorm_ref, emb_gelu_ref,
    emb_attention_heads_ref, emb_softmax_rows_ref,
};
const emb_kernels emb_kernels_neon = {
    "neon", unsupported, emb_quantize_rows_ref, emb_gemm_q8_ref, emb_layernorm_ref, emb_gelu_ref,
    emb_attention_heads_ref, emb_softmax_rows_ref,
};
#else
typedef int emb_kernels_neon_unused; /* wasm: ISO C wants a declaration in every file */
#endif
