/* test_softmax_exp.c - the f32 build's polynomial e^x used by the softmax
 * kernels (ops/softmax_rows.h) against libm in double, over its whole
 * domain x in [-inf, 0]: relative error within 2 ulp where the result is a
 * normal float, exact 0 below, exact 1 at 0. */
#include "../ops/softmax_rows.h"
#include "check.h"

int main(void) {
    double worst = 0, worst_x = 0;
    int64_t n = 0;
    /* Every 97th float bit pattern from -0 down to -87.34 (~11 million). */
    for (uint32_t bits = 0x80000000u; bits <= 0xC2AEAC50u; bits += 97) {
        float x;
        memcpy(&x, &bits, sizeof x);
        double want = exp((double)x), got = (double)ag__exp_nonpos(x);
        if (want < 0x1p-126) continue; /* subnormal range: checked below */
        double err = fabs(got - want) / want;
        if (err > worst) worst = err, worst_x = x;
        n++;
    }
    printf("max relative error %.3g (%.2f ulp) at x = %.9g over %lld points\n", worst, worst / 0x1p-24 / 2, worst_x,
           (long long)n);
    CHECK(worst <= 2 * 0x1p-23, "relative error %g at %.9g", worst, worst_x);
    CHECK(ag__exp_nonpos(0.0f) == 1.0f && ag__exp_nonpos(-0.0f) == 1.0f, "e^0 = 1");
    CHECK(ag__exp_nonpos(-INFINITY) == 0.0f && ag__exp_nonpos(-88.0f) == 0.0f && ag__exp_nonpos(-1e30f) == 0.0f,
          "underflow gives exactly 0 (masked entries get weight 0)");
    CHECK(ag__exp_nonpos(-87.0f) > 0, "still a normal float at -87");
    CHECK(isnan(ag__exp_nonpos(NAN)), "NaN propagates");
    return check_summary("test_softmax_exp");
}
