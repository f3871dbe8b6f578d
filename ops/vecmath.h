/* vecmath.h - exp, log, sigmoid, tanh and friends that a compiler can
 * vectorise.
 *
 * libm's expf/tanhf are calls the auto-vectoriser cannot see through: in
 * the LSTM's gate loop they cost as much as the recurrent GEMM, in a softmax
 * row expf was the whole cost.  Here they are branch-free arithmetic on
 * floats (Cephes' polynomials, 2^k built in the exponent bits), so a loop
 * over them compiles to SIMD; every exp variant shares one reduction and one
 * polynomial.  Accuracy: a few ulp in f32 (tests/test_vecmath.c measures
 * it).  In the f64 build (the gradient checks) they are libm's functions,
 * exact to the last bit. */
#ifndef AG_VECMATH_H
#define AG_VECMATH_H

/* The same functions compile for the GPU (the ops/cuda .cu files include this file
 * with AG_HD = __host__ __device__ and nvcc -fmad=false), so a CUDA kernel
 * and the CPU loop compute the same arithmetic, and tests/test_vecmath.c,
 * which runs on the CPU, checks the source the GPU runs.  (A .cu file built
 * for emulator/ is C++ without nvcc: AG_CUDA_EMULATOR.) */
#if defined(__CUDACC__) || defined(AG_CUDA_EMULATOR)
#include "../graph/prelude.cuh"
#define AG_VEC AG_HD
#else
#include "../graph/internal.h"
#define AG_HD
/* Always inlined on the CPU: a call left in a loop keeps the loop scalar.
 * GCC 12 did not inline ag__vnormal_cdf into GELU's backward loop (the
 * derivative takes it and the pdf, two exponentials each), and that loop
 * ran at ~50 ns an element, ten times its forward (docs/performance.md,
 * nineteenth round). */
#define AG_VEC __attribute__((always_inline))
#endif

#ifdef AG_REAL_DOUBLE

AG_VEC static inline ag_real ag__vexp(ag_real x) { return exp(x); }
AG_VEC static inline ag_real ag__vexp_nonpos(ag_real x) { return exp(x); }
AG_VEC static inline ag_real ag__vsigmoid(ag_real x) { return ag__sigmoid(x); }
AG_VEC static inline ag_real ag__vtanh(ag_real x) { return tanh(x); }
AG_VEC static inline ag_real ag__vexp_full(ag_real x) { return exp(x); }
AG_VEC static inline ag_real ag__vexpm1(ag_real x) { return expm1(x); }
AG_VEC static inline ag_real ag__vlog(ag_real x) { return log(x); }
AG_VEC static inline ag_real ag__vsoftplus(ag_real x) { return ag__softplus(x); }
AG_VEC static inline ag_real ag__vlog_sigmoid(ag_real x) { return -ag__softplus(-x); }
AG_VEC static inline ag_real ag__vnormal_pdf(ag_real x) { return exp(-0.5 * x * x) * (0.5 * M_2_SQRTPI * M_SQRT1_2); }
AG_VEC static inline ag_real ag__vnormal_cdf_with_pdf(ag_real x, ag_real pdf) {
    (void)pdf; /* libm's erfc is exact enough on its own */
    return 0.5 * erfc(-x * M_SQRT1_2);
}

#else

/* The clamps below compile to SIMD selects because the project builds with
 * -fno-trapping-math (meson.build): with GCC's default -ftrapping-math both
 * arms of a float ?: may not be evaluated, and the loop stays scalar. */

/* Bits <-> float without breaking strict aliasing (compiles to nothing). */
AG_VEC static inline int32_t ag__fbits(float f) {
    int32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}
AG_VEC static inline float ag__bitsf(int32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
/* 2^k for k in [-127, 128): the exponent field k + 127 (0 gives +0).  In
 * unsigned arithmetic, as for a NaN argument k is garbage that must not be
 * undefined behaviour (the NaN itself propagates through the result). */
AG_VEC static inline float ag__pow2i(int32_t k) { return ag__bitsf((int32_t)(((uint32_t)k + 127u) << 23)); }

/* ---- e^x: one Cephes core, several range policies ----
 *
 * Every exponential here is e^x = 2^k e^r with k = round(x / ln 2) and
 * |r| <= ln2 / 2: ag__exp_reduce splits x, ag__expm1_reduced gives e^r - 1,
 * and the variants differ only in how they clamp x and apply 2^k. */

typedef struct {
    float r;   /* x - k ln 2, |r| <= ln2 / 2 */
    int32_t k; /* round(x / ln 2) */
} ag__exp_split;

/* x = k ln 2 + r for x in [-104, 89] (callers clamp; NaN stays in r).  k is
 * rounded by the 1.5 * 2^23 shifter and read from its low bits: no
 * float->int conversion, which NaN would make undefined.  ln 2 is split in a
 * hi part with few bits (k * hi is exact) and a lo part, so r is exact. */
AG_VEC static inline ag__exp_split ag__exp_reduce(float x) {
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = x * 1.44269504088896341f + shifter;
    float kf = t - shifter;
    float r = x - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    return (ag__exp_split){r, ag__fbits(t) - 0x4B400000};
}

/* e^r - 1 = r + r^2 P(r) for |r| <= ln2 / 2, P Cephes' expf polynomial;
 * exp adds the 1, expm1 keeps the small result exact. */
AG_VEC static inline float ag__expm1_reduced(float r) {
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * (r * r) + r;
}

/* The smallest x whose e^x is a normal float (bits 0xC2AEAC4F). */
#define AG__EXP_MIN_NORMAL_ARG -87.33654f

/* e^x for x in [AG__EXP_MIN_NORMAL_ARG, 88]: there k is in [-126, 127], so
 * 2^k is a normal float.  ag__vexp_nonpos and ag__vexp clamp x into this
 * range and select their own values outside it. */
AG_VEC static inline float ag__exp_in_range(float x) {
    ag__exp_split s = ag__exp_reduce(x);
    return (ag__expm1_reduced(s.r) + 1.0f) * ag__pow2i(s.k);
}

/* e^x for x <= 0, the softmax family's case (x - max, e^-|x|): exactly +0
 * below AG__EXP_MIN_NORMAL_ARG (so -inf, a masked logit, weighs nothing),
 * NaN in NaN out, e^0 = 1.  Without ag__vexp's overflow clamp GCC also drops
 * the lower one (where it matters the value is selected away): a loop over
 * it is 31 AVX2 instructions per 8 floats, over ag__vexp 39 (GCC 12).  The
 * result is computed before the select: a conditional multiply would block
 * SIMD. */
AG_VEC static inline float ag__vexp_nonpos(float x) {
    const float lo = AG__EXP_MIN_NORMAL_ARG;
    float out = ag__exp_in_range(x < lo ? lo : x);
    return x < lo ? 0.0f : out;
}

/* e^x for any x, saturating at e^88 (the LSTM's sigmoid and tanh want a
 * finite value, not inf); +0 below AG__EXP_MIN_NORMAL_ARG. */
AG_VEC static inline float ag__vexp(float x) {
    const float hi = 88.0f, lo = AG__EXP_MIN_NORMAL_ARG;
    float out = ag__exp_in_range(x > hi ? hi : x < lo ? lo : x);
    return x < lo ? 0.0f : out;
}

AG_VEC static inline float ag__vsigmoid(float x) { return 1.0f / (1.0f + ag__vexp(-x)); }

/* tanh: Cephes' odd polynomial below |x| = 0.625 (no cancellation near 0),
 * 1 - 2 / (e^{2|x|} + 1) above; both are computed and one is selected. */
AG_VEC static inline float ag__vtanh(float x) {
    float ax = fabsf(x);
    float z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
                   3.33332819422e-1f) * z * x + x;
    float large = 1.0f - 2.0f / (ag__vexp(2.0f * ax) + 1.0f);
    large = x < 0 ? -large : large;
    return ax < 0.625f ? small : large;
}

/* e^x over the whole float range, as libm: +inf above ln(FLT_MAX), subnormal
 * results down to 2^-149, 0 below, NaN in NaN out (the exp op; vexp's
 * saturation is what the LSTM gates want, this is what a user's exp wants).
 * 2^k is applied as two normal factors 2^(k/2) 2^(k-k/2), so k in
 * [-150, 128] never leaves the exponent range on the way; on
 * [AG__EXP_MIN_NORMAL_ARG, 88] this is ag__vexp_nonpos's value, bit for bit. */
AG_VEC static inline float ag__vexp_full(float x) {
    const float hi = 88.72283935546875f, lo = -103.97208404541015625f;
    float xc = x > hi ? hi : x < lo ? lo : x;
    ag__exp_split s = ag__exp_reduce(xc);
    int32_t k1 = s.k >> 1, k2 = s.k - k1;
    float out = (ag__expm1_reduced(s.r) + 1.0f) * ag__pow2i(k1) * ag__pow2i(k2);
    out = x < lo ? 0.0f : out;
    return x > hi ? INFINITY : out;
}

/* e^x - 1 without cancellation near 0: with x = k ln2 + r,
 * e^x - 1 = 2^k (e^r - 1) + (2^k - 1), where e^r - 1 is the polynomial's
 * (no leading 1 to cancel) and 2^k - 1 is exact.  Saturates like vexp
 * above 88 (ELU only feeds it x <= 0). */
AG_VEC static inline float ag__vexpm1(float x) {
    const float hi = 88.0f, lo = -88.0f; /* below lo, 2^k = 0 and the result is -1 */
    float xc = x > hi ? hi : x < lo ? lo : x;
    ag__exp_split s = ag__exp_reduce(xc);
    float scale = ag__pow2i(s.k); /* k >= -127, where the bits give 0 */
    return scale * ag__expm1_reduced(s.r) + (scale - 1.0f);
}

/* ln x for a positive normal finite x, Cephes' logf: x = 2^e m with m in
 * [sqrt(1/2), sqrt(2)), ln m = f - f^2/2 + f^3 P(f), f = m - 1, and ln 2
 * split in a hi and lo part.  No special cases: callers that can see
 * them select (a loop with several selects in series stops vectorising). */
AG_VEC static inline float ag__vlog_normal(float x) {
    int32_t bits = ag__fbits(x);
    int32_t e = ((bits >> 23) & 0xff) - 126;
    float m = ag__bitsf((bits & 0x007fffff) | 0x3f000000); /* [0.5, 1) */
    int32_t low = m < 0.707106781186547524f;
    float f = m * (float)(1 + low) - 1.0f; /* exact: m or 2m, minus 1 */
    float ef = (float)(e - low);
    float z = f * f;
    float y = 7.0376836292e-2f;
    y = y * f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z;
    y = y + ef * -2.12194440e-4f;
    y = y - 0.5f * z;
    return f + y + ef * 0.693359375f;
}

/* ln x as libm: subnormals are scaled by 2^23 first; 0 gives -inf,
 * negatives and NaN give NaN, +inf gives +inf. */
AG_VEC static inline float ag__vlog(float x) {
    const float tiny = 1.17549435e-38f; /* FLT_MIN */
    float sub = x < tiny ? 8388608.0f : 1.0f;
    float out = ag__vlog_normal(x * sub) - (x < tiny ? 15.942385152878742f : 0.0f); /* 23 ln 2 */
    out = x == INFINITY ? INFINITY : out;
    out = x == 0 ? -INFINITY : out;
    return x >= 0 ? out : NAN; /* false for NaN too */
}

/* ln(1 + y) for y in [0, 1] (the tails of softplus and log-sigmoid, with
 * y = e^-|x|): ln(u) for u = 1 + y rounded, plus the rounding error of u
 * to first order, (y - (u - 1)) / u, so tiny y give y exactly. */
AG_VEC static inline float ag__vlog1p01(float y) {
    float u = 1.0f + y;
    return ag__vlog_normal(u) + (y - (u - 1.0f)) / u; /* NaN y: the correction is NaN */
}

/* softplus(x) = ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|): no overflow, and
 * full relative accuracy in the e^x tail. */
AG_VEC static inline float ag__vsoftplus(float x) {
    float pos = x > 0 ? x : 0.0f;
    return pos + ag__vlog1p01(ag__vexp_nonpos(-fabsf(x)));
}

/* ln sigmoid(x) = -softplus(-x) = min(x, 0) - ln(1 + e^-|x|). */
AG_VEC static inline float ag__vlog_sigmoid(float x) {
    float neg = x < 0 ? x : 0.0f;
    return neg - ag__vlog1p01(ag__vexp_nonpos(-fabsf(x)));
}

/* |x|, clamped to 20: e^-200 flushes to 0 anyway, and the Mills ratio's
 * polynomials below stay finite (a NaN stays NaN). */
AG_VEC static inline float ag__vabs20(float x) {
    float a = fabsf(x);
    return a > 20.0f ? 20.0f : a;
}

/* e^(-a^2/2) for a in [0, 20] with a^2 split as h^2 + l (a + h), h the top
 * 12 bits of a: h^2 is exact, so the rounding of the square never grows
 * with a^2 (one ulp of a^2 = 100 would be a relative error of 8e-6 in the
 * result).  The rest, u = -l (a + h) / 2, is small (|u| <= a^2 2^-11, 0.09
 * where the result is still a normal float), so e^u is Taylor's degree 5
 * (error below u^6 / 720 = 1e-9): one exponential, not two. */
AG_VEC static inline float ag__vexp_half_square(float a) {
    float h = ag__bitsf(ag__fbits(a) & (int32_t)0xfffff000), l = a - h;
    float u = -0.5f * l * (a + h);
    float eu = 1.0f + u * (1.0f + u * (0.5f + u * (1.0f / 6 + u * (1.0f / 24 + u * (1.0f / 120)))));
    return ag__vexp_nonpos(-0.5f * h * h) * eu;
}

/* The Mills ratio M(a) = Phi(-a) / phi(a) for a in [0, 20], written
 * 1 / (a + g(a)) with g = P / Q a (3, 4) rational fitted to relative
 * minimax over [0, 13.3] (tools/fit_mills.py: 0.7 units of 2^-24 in exact
 * arithmetic): M = Q / (a Q + P).  Q's rounding cancels between the two
 * places it appears, and P's is damped by P / (a Q + P), so the float
 * evaluation keeps M within 4 units of 2^-24; all coefficients are
 * positive, so nothing cancels for a >= 0. */
AG_VEC static inline float ag__vmills(float a) {
    float p = 0.7978845285345413f + a * (0.39580665989778174f + a * (0.10179370858984865f + a * 0.011381511873753483f));
    float q = 1.0f + a * (0.9514971564344893f + a * (0.4243228699431614f + a * (0.1014159772494692f +
              a * 0.011391975670246125f)));
    return q / (a * q + p);
}

/* phi(x) = e^(-x^2/2) / sqrt(2 pi). */
AG_VEC static inline float ag__vnormal_pdf(float x) { return 0.39894228040f * ag__vexp_half_square(ag__vabs20(x)); }

/* Phi(x) = P(X <= x) for X ~ N(0, 1), given pdf = phi(x): the tail
 * Phi(-|x|) = phi(x) M(|x|) below 0, 1 minus it above.  One formula for
 * every x, so there is no branch to select and no cancellation: the left
 * tail keeps its relative accuracy down to e^-87 (within 8 units of 2^-24,
 * tests/test_vecmath.c), and GELU's derivative shares phi's exponential. */
AG_VEC static inline float ag__vnormal_cdf_with_pdf(float x, float pdf) {
    float tail = pdf * ag__vmills(ag__vabs20(x));
    return x < 0 ? tail : 1.0f - tail;
}

#endif
/* ELU with alpha 1: x above 0, e^x - 1 below (either real type). */
AG_VEC static inline ag_real ag__velu(ag_real x) { return x > 0 ? x : ag__vexpm1(x); }

/* Phi(x), the standard normal distribution function (either real type). */
AG_VEC static inline ag_real ag__vnormal_cdf(ag_real x) { return ag__vnormal_cdf_with_pdf(x, ag__vnormal_pdf(x)); }

/* GELU, x Phi(x), as PyTorch's default (approximate='none'), and its
 * derivative Phi(x) + x phi(x), whose two terms share one phi (either
 * real type). */
AG_VEC static inline ag_real ag__vgelu(ag_real x) { return x * ag__vnormal_cdf(x); }
AG_VEC static inline ag_real ag__vgelu_grad(ag_real x) {
    ag_real pdf = ag__vnormal_pdf(x);
    return ag__vnormal_cdf_with_pdf(x, pdf) + x * pdf;
}

#endif
