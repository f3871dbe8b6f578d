/* vecmath.h - exp, sigmoid and tanh that a compiler can vectorise.
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

#else

/* The clamps below compile to SIMD selects because the project builds with
 * -fno-trapping-math (meson.build): with GCC's default -ftrapping-math both
 * arms of a float ?: may not be evaluated, and the loop stays scalar. */

/* e^x = 2^k e^r with k = round(x / ln 2), |r| <= ln2 / 2 (ln 2 split in a
 * hi and lo part so r is exact); e^r by Cephes' degree-6 polynomial. */
static inline float ag__vexp(float x) {
    const float hi = 88.0f, lo = -87.3f; /* 2^k stays a normal float; e^x saturates at e^88 */
    float xc = x > hi ? hi : x < lo ? lo : x;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float kf = (xc * 1.44269504088896341f + shifter) - shifter;
    float r = xc - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)kf + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float out = y * scale; /* computed before the select: a conditional multiply would block SIMD */
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

#endif
#endif
