/* vecmath.h - exp, log, sigmoid, tanh and friends that a compiler can
 * vectorise.
 *
 * libm's expf/tanhf are calls the auto-vectoriser cannot see through, and in
 * the LSTM's gate loop they cost as much as the recurrent GEMM.  Here they
 * are branch-free arithmetic on floats (Cephes' polynomials, 2^k built in
 * the exponent bits), so a loop over them compiles to SIMD.  Accuracy: a
 * few ulp in f32 (tests/test_vecmath.c measures it).  In the f64 build (the
 * gradient checks) they are libm's functions, exact to the last bit. */
#ifndef AG_VECMATH_H
#define AG_VECMATH_H

#include "../graph/internal.h"

#ifdef AG_REAL_DOUBLE

static inline ag_real ag__vexp(ag_real x) { return exp(x); }
static inline ag_real ag__vsigmoid(ag_real x) { return ag__sigmoid(x); }
static inline ag_real ag__vtanh(ag_real x) { return tanh(x); }
static inline ag_real ag__vexp_full(ag_real x) { return exp(x); }
static inline ag_real ag__vexpm1(ag_real x) { return expm1(x); }
static inline ag_real ag__vlog(ag_real x) { return log(x); }
static inline ag_real ag__vsoftplus(ag_real x) { return ag__softplus(x); }
static inline ag_real ag__vlog_sigmoid(ag_real x) { return -ag__softplus(-x); }

#else

/* The clamps below compile to SIMD selects because the project builds with
 * -fno-trapping-math (meson.build): with GCC's default -ftrapping-math both
 * arms of a float ?: may not be evaluated, and the loop stays scalar. */

/* Bits <-> float without breaking strict aliasing (compiles to nothing). */
static inline int32_t ag__fbits(float f) {
    int32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}
static inline float ag__bitsf(int32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
/* 2^k for k in [-127, 128): the exponent field k + 127 (0 gives +0).  In
 * unsigned arithmetic, as for a NaN argument k is garbage that must not be
 * undefined behaviour (the NaN itself propagates through the result). */
static inline float ag__pow2i(int32_t k) { return ag__bitsf((int32_t)(((uint32_t)k + 127u) << 23)); }

/* e^x = 2^k e^r with k = round(x / ln 2), |r| <= ln2 / 2 (ln 2 split in a
 * hi and lo part so r is exact); e^r by Cephes' degree-6 polynomial. */
static inline float ag__vexp(float x) {
    const float hi = 88.0f, lo = -87.3f; /* 2^k stays a normal float; e^x saturates at e^88 */
    float xc = x > hi ? hi : x < lo ? lo : x;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = xc * 1.44269504088896341f + shifter;
    float kf = t - shifter;
    int32_t k = ag__fbits(t) - 0x4B400000; /* no float->int conversion: NaN would make it undefined */
    float r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    float out = y * ag__pow2i(k); /* computed before the select: a conditional multiply would block SIMD */
    return x < lo ? 0.0f : out; /* e^-87.3 is just above FLT_MIN: flush below it */
}

static inline float ag__vsigmoid(float x) { return 1.0f / (1.0f + ag__vexp(-x)); }

/* tanh: Cephes' odd polynomial below |x| = 0.625 (no cancellation near 0),
 * 1 - 2 / (e^{2|x|} + 1) above; both are computed and one is selected. */
static inline float ag__vtanh(float x) {
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
 * k = round(x / ln 2) comes out of the 1.5 * 2^23 shifter's low bits (no
 * float->int conversion, which NaN would make undefined), and 2^k is applied
 * as two normal factors 2^(k/2) 2^(k-k/2), so k in [-150, 128] never leaves
 * the exponent range on the way. */
static inline float ag__vexp_full(float x) {
    const float hi = 88.72283935546875f, lo = -103.97208404541015625f;
    float xc = x > hi ? hi : x < lo ? lo : x;
    const float shifter = 12582912.0f;
    float t = xc * 1.44269504088896341f + shifter;
    float kf = t - shifter;
    int32_t k = ag__fbits(t) - 0x4B400000;
    float r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * (r * r) + r + 1.0f;
    int32_t k1 = k >> 1, k2 = k - k1;
    float out = y * ag__pow2i(k1) * ag__pow2i(k2);
    out = x < lo ? 0.0f : out;
    return x > hi ? INFINITY : out;
}

/* e^x - 1 without cancellation near 0: with x = k ln2 + r,
 * e^x - 1 = 2^k (e^r - 1) + (2^k - 1), where e^r - 1 = r + r^2 P(r) is the
 * exp polynomial without its leading 1 and 2^k - 1 is exact.  Saturates
 * like vexp above 88 (ELU only feeds it x <= 0). */
static inline float ag__vexpm1(float x) {
    const float hi = 88.0f, lo = -88.0f; /* below lo, 2^k = 0 and the result is -1 */
    float xc = x > hi ? hi : x < lo ? lo : x;
    const float shifter = 12582912.0f;
    float t = xc * 1.44269504088896341f + shifter;
    float kf = t - shifter;
    int32_t k = ag__fbits(t) - 0x4B400000;
    float r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float em1 = p * (r * r) + r;
    float s = ag__pow2i(k); /* k >= -127, where the bits give 0 */
    return s * em1 + (s - 1.0f);
}

/* ln x for a positive normal finite x, Cephes' logf: x = 2^e m with m in
 * [sqrt(1/2), sqrt(2)), ln m = f - f^2/2 + f^3 P(f), f = m - 1, and ln 2
 * split in a hi and lo part.  No special cases: callers that can see
 * them select (a loop with several selects in series stops vectorising). */
static inline float ag__vlog_normal(float x) {
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
static inline float ag__vlog(float x) {
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
static inline float ag__vlog1p01(float y) {
    float u = 1.0f + y;
    return ag__vlog_normal(u) + (y - (u - 1.0f)) / u; /* NaN y: the correction is NaN */
}

/* softplus(x) = ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|): no overflow, and
 * full relative accuracy in the e^x tail. */
static inline float ag__vsoftplus(float x) {
    float pos = x > 0 ? x : 0.0f;
    return pos + ag__vlog1p01(ag__vexp(-fabsf(x)));
}

/* ln sigmoid(x) = -softplus(-x) = min(x, 0) - ln(1 + e^-|x|). */
static inline float ag__vlog_sigmoid(float x) {
    float neg = x < 0 ? x : 0.0f;
    return neg - ag__vlog1p01(ag__vexp(-fabsf(x)));
}

#endif
#endif
