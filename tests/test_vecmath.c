/* test_vecmath.c - accuracy of the vectorisable f32 exp, sigmoid and tanh
 * (ops/vecmath.h) against double-precision libm, over the whole range the
 * LSTM and the Gaussian weights can feed them, plus the saturated ends. */
#include "../ops/vecmath.h"
#include "check.h"

#define ULP 5.9604645e-8 /* 2^-24: half an ulp of 1 in float, the unit of relative error */

int main(void) {
#ifdef AG_REAL_DOUBLE
    printf("test_vecmath: runs in the f32 build\n");
    return 1;
#else
    double worst_exp = 0, worst_sig = 0, worst_tanh = 0;
    for (double x = -100; x <= 100; x += 1.0 / 1024 + 1e-7) {
        float xf = (float)x;
        double e = exp((double)xf), s = 1 / (1 + exp(-(double)xf)), t = tanh((double)xf);
        if (xf > -87.3f && xf < 88.0f) worst_exp /* outside: flushes to 0, saturates at e^88 */ = fmax(worst_exp, fabs(ag__vexp(xf) - e) / e);
        if (s > 1.2e-38) worst_sig = fmax(worst_sig, fabs(ag__vsigmoid(xf) - s) / s);
        if (t != 0) worst_tanh = fmax(worst_tanh, fabs(ag__vtanh(xf) - t) / fabs(t));
    }
    for (float x = 1e-30f; x < 1; x *= 1.37f) { /* tanh near 0: relative accuracy, no cancellation */
        worst_tanh = fmax(worst_tanh, fabs(ag__vtanh(x) - tanh((double)x)) / tanh((double)x));
        worst_tanh = fmax(worst_tanh, fabs(ag__vtanh(-x) + tanh((double)x)) / tanh((double)x));
    }
    printf("  worst relative error: exp %.2f ulp, sigmoid %.2f ulp, tanh %.2f ulp\n", worst_exp / ULP,
           worst_sig / ULP, worst_tanh / ULP);
    CHECK(worst_exp < 4 * ULP, "exp: %.3g", worst_exp);
    CHECK(worst_sig < 4 * ULP, "sigmoid: %.3g", worst_sig);
    CHECK(worst_tanh < 4 * ULP, "tanh: %.3g", worst_tanh);
    /* the saturated ends are exact and finite */
    CHECK(ag__vexp(-90.0f) == 0 && ag__vexp(-1e30f) == 0, "exp underflows to 0");
    CHECK(isfinite(ag__vexp(1e30f)) && ag__vexp(1e30f) > 1e38f, "exp saturates finite");
    CHECK(ag__vexp(0.0f) == 1.0f, "exp(0) = 1");
    CHECK(ag__vsigmoid(1e30f) == 1.0f && ag__vsigmoid(-1e30f) < 1e-37f && ag__vsigmoid(-1e30f) >= 0, "sigmoid ends");
    CHECK(ag__vtanh(1e30f) == 1.0f && ag__vtanh(-1e30f) == -1.0f && ag__vtanh(0.0f) == 0.0f, "tanh ends");
    return check_summary("test_vecmath");
#endif
}
