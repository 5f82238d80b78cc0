/*
 * emb_math.h — the few transcendental functions the encoder needs, without libm.
 *
 * Written as plain float arithmetic (no FMA: builds use -ffp-contract=off) so that the scalar
 * and SIMD kernels, native and wasm, compute them bit for bit the same way.
 */
#ifndef EMB_MATH_H
#define EMB_MATH_H

#include <stdint.h>

/* Round half to even (f32.nearest in wasm, roundss natively). */
static inline float emb_rintf(float x) { return __builtin_rintf(x); }

static inline float emb_bits_to_float(uint32_t u) {
    union { uint32_t u; float f; } v;
    v.u = u;
    return v.f;
}

/* The 4-lane horizontal sum order every kernel uses: (a0 + a2) + (a1 + a3). */
static inline float emb_hsum4(float a0, float a1, float a2, float a3) { return (a0 + a2) + (a1 + a3); }

/* exp(x), Cephes' single-precision polynomial, ~1 ulp; inputs clamped to [-87, 88], NaN to -87
   (a corrupt bundle may hold NaN weights; the float-to-int step below must never see one). */
#define EMB_EXP_LO (-87.0f)
#define EMB_EXP_HI 88.0f
#define EMB_LOG2E 1.44269504088896341f
#define EMB_LN2_HI 0.693359375f
#define EMB_LN2_LO (-2.12194440e-4f)
#define EMB_EXP_P0 1.9875691500e-4f
#define EMB_EXP_P1 1.3981999507e-3f
#define EMB_EXP_P2 8.3334519073e-3f
#define EMB_EXP_P3 4.1665795894e-2f
#define EMB_EXP_P4 1.6666665459e-1f
#define EMB_EXP_P5 5.0000001201e-1f

static inline float emb_expf(float x) {
    x = x > EMB_EXP_LO ? x : EMB_EXP_LO;
    x = x < EMB_EXP_HI ? x : EMB_EXP_HI;
    float n = emb_rintf(x * EMB_LOG2E);
    float r = x - n * EMB_LN2_HI;
    r = r - n * EMB_LN2_LO;
    float z = r * r;
    float y = EMB_EXP_P0;
    y = y * r + EMB_EXP_P1;
    y = y * r + EMB_EXP_P2;
    y = y * r + EMB_EXP_P3;
    y = y * r + EMB_EXP_P4;
    y = y * r + EMB_EXP_P5;
    y = y * z + r;
    y = y + 1.0f;
    return y * emb_bits_to_float((uint32_t)((int32_t)n + 127) << 23);
}

/*
 * erf(x), the rational approximation used by Eigen and XLA (odd degree-13 numerator over an
 * even degree-8 denominator on [-4, 4], erf = ±1 beyond): a few ulp, far below what GELU needs.
 */
#define EMB_ERF_A1 (-1.60960333262415e-02f)
#define EMB_ERF_A3 (-2.95459980854025e-03f)
#define EMB_ERF_A5 (-7.34990630326855e-04f)
#define EMB_ERF_A7 (-5.69250639462346e-05f)
#define EMB_ERF_A9 (-2.10102402082508e-06f)
#define EMB_ERF_A11 2.77068142495902e-08f
#define EMB_ERF_A13 (-2.72614225801306e-10f)
#define EMB_ERF_B0 (-1.42647390514189e-02f)
#define EMB_ERF_B2 (-7.37332916720468e-03f)
#define EMB_ERF_B4 (-1.68282697438203e-03f)
#define EMB_ERF_B6 (-2.13374055278905e-04f)
#define EMB_ERF_B8 (-1.45660718464996e-05f)

static inline float emb_erff(float x) {
    x = x < -4.0f ? -4.0f : x;
    x = x > 4.0f ? 4.0f : x;
    float x2 = x * x;
    float p = x2 * EMB_ERF_A13 + EMB_ERF_A11;
    p = p * x2 + EMB_ERF_A9;
    p = p * x2 + EMB_ERF_A7;
    p = p * x2 + EMB_ERF_A5;
    p = p * x2 + EMB_ERF_A3;
    p = p * x2 + EMB_ERF_A1;
    p = p * x;
    float q = x2 * EMB_ERF_B8 + EMB_ERF_B6;
    q = q * x2 + EMB_ERF_B4;
    q = q * x2 + EMB_ERF_B2;
    q = q * x2 + EMB_ERF_B0;
    return p / q;
}

/* GELU, the exact erf form of BERT's "gelu": x/2 · (1 + erf(x/√2)). */
static inline float emb_gelu1(float x) { return (x * 0.5f) * (1.0f + emb_erff(x * 0.70710678118654752f)); }

/*
 * tanh(x), Cephes' tanhf: an odd polynomial below |x| = 0.625, 1 − 2 / (e^{2|x|} + 1) above
 * (|x| clamped to 44, where tanh is ±1 in float); a few ulp. NaN stays NaN.
 */
static inline float emb_tanhf(float x) {
    float z = x < 0.0f ? -x : x;
    if (z >= 0.625f) {
        z = z < 44.0f ? z : 44.0f;
        float s = emb_expf(z + z);
        z = 1.0f - 2.0f / (s + 1.0f);
        return x < 0.0f ? -z : z;
    }
    float s = x * x;
    float p = -5.70498872745e-3f * s + 2.06390887954e-2f;
    p = p * s - 5.37397155531e-2f;
    p = p * s + 1.33314422036e-1f;
    p = p * s - 3.33332819422e-1f;
    return p * s * x + x;
}

/* GELU, the tanh form ("gelu_new", "gelu_pytorch_tanh"): x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³))). */
static inline float emb_gelu_tanh1(float x) {
    float inner = 0.79788456080286536f * (x + 0.044715f * ((x * x) * x));
    return (x * 0.5f) * (1.0f + emb_tanhf(inner));
}

/* SiLU ("silu", "swish"): x · sigmoid(x), as x / (1 + e^(−x)); e^(−x) saturates at e^88, where
   the result is x / 1.65e38, within 1e-36 of torch's (0 or a denormal). NaN stays NaN. */
static inline float emb_silu1(float x) { return x / (1.0f + emb_expf(-x)); }

/*
 * log(1 + x) for x >= 0 (the SPLADE weight log1p(relu(logit))): u = 1 + x split as 2^e · m with
 * m in [√½, √2), log m from Cephes' logf polynomial, and the rounding error of 1 + x added back
 * as c / u (the classic log1p correction), so that small x keeps its precision. NaN → NaN.
 */
static inline float emb_log1pf(float x) {
    if (!(x > 0.0f)) return x == 0.0f ? 0.0f : x;  /* 0 (and -0) → 0; NaN stays NaN */
    if (x > 3.0e38f) x = 3.0e38f;                   /* infinity → log(3e38) */
    float u = 1.0f + x;
    float c = (u - 1.0f) == x ? 0.0f : (x - (u - 1.0f)) / u;  /* what 1 + x lost */
    union { float f; uint32_t i; } v;
    v.f = u;
    int32_t e = (int32_t)((v.i >> 23) & 0xFF) - 126;
    v.i = (v.i & 0x807FFFFFu) | 0x3F000000u;       /* m in [0.5, 1) */
    float m = v.f;
    if (m < 0.70710678118654752f) {
        e -= 1;
        m = m + m - 1.0f;
    } else {
        m = m - 1.0f;
    }
    float z = m * m;
    float y = 7.0376836292e-2f;
    y = y * m - 1.1514610310e-1f;
    y = y * m + 1.1676998740e-1f;
    y = y * m - 1.2420140846e-1f;
    y = y * m + 1.4249322787e-1f;
    y = y * m - 1.6668057665e-1f;
    y = y * m + 2.0000714765e-1f;
    y = y * m - 2.4999993993e-1f;
    y = y * m + 3.3333331174e-1f;
    y = y * m * z;
    float fe = (float)e;
    y = y + fe * -2.12194440e-4f;
    y = y - 0.5f * z;
    float r = m + y;
    r = r + fe * 0.693359375f;
    return r + c;
}

#endif /* EMB_MATH_H */
