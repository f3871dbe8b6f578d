/* test_vecmath.c - accuracy of the vectorisable f32 exp, sigmoid and tanh
 * (ops/vecmath.h) against double-precision libm, over the whole range the
 * LSTM can feed them, plus the saturated ends; of the softmax family's exp
 * over its whole domain x <= 0; and of the elementwise ops' kernels
 * (full-range exp, expm1, log, softplus, log-sigmoid, GELU's Phi and phi,
 * SiLU) over a sweep of float bit patterns, with their special values. */
#include "../ops/vecmath.h"
#include "check.h"

#define ULP 5.9604645e-8 /* 2^-24: half an ulp of 1 in float, the unit of relative error */

#ifndef AG_REAL_DOUBLE
static double rel(double got, double want) { return want == 0 ? fabs(got) : fabs(got - want) / fabs(want); }

/* Every 1021st float bit pattern (both signs, ~4 million values). */
static void elementwise_kernels(void) {
    double w_exp = 0, w_sub = 0, w_expm1 = 0, w_log = 0, w_sp = 0, w_ls = 0;
    for (uint64_t b = 0; b <= 0xFFFFFFFFu; b += 1021) {
        uint32_t bits = (uint32_t)b;
        float x;
        memcpy(&x, &bits, sizeof x);
        if (isnan(x) || isinf(x)) continue;
        double xd = x;
        double e = exp(xd);
        if (e >= 0x1p-126 && e <= 3.4028234663852886e38) w_exp = check_worst(w_exp, rel(ag__vexp_full(x), e));
        else if (e < 0x1p-126) w_sub = check_worst(w_sub, fabs(ag__vexp_full(x) - e) / 0x1p-149); /* in subnormal steps */
        if (xd <= 88) w_expm1 = check_worst(w_expm1, rel(ag__vexpm1(x), expm1(xd)));
        if (xd > 0) w_log = check_worst(w_log, fabs(ag__vlog(x) - log(xd)) / fmax(fabs(log(xd)), 1)); /* abs near x = 1 */
        /* softplus and log-sigmoid build on vexp_nonpos, whose e^-|x|
         * flushes to 0 below ln FLT_MIN: their tails end there, at 1e-38 */
        double sp = xd > 0 ? xd + log1p(exp(-xd)) : log1p(exp(xd));
        if (x >= AG__EXP_MIN_NORMAL_ARG) w_sp = check_worst(w_sp, rel(ag__vsoftplus(x), sp));
        double ls = xd < 0 ? xd - log1p(exp(xd)) : -log1p(exp(-xd));
        if (x <= -AG__EXP_MIN_NORMAL_ARG) w_ls = check_worst(w_ls, rel(ag__vlog_sigmoid(x), ls));
    }
    for (float x = 1.0f; x < 1.001f; x = nextafterf(x, 2)) /* ln near 1: relative accuracy */
        w_log = check_worst(w_log, rel(ag__vlog(x), log((double)x)));
    printf("  elementwise kernels: exp %.2f ulp (subnormal results within %.2f steps), expm1 %.2f, log %.2f, "
           "softplus %.2f, log_sigmoid %.2f ulp\n", w_exp / ULP, w_sub, w_expm1 / ULP, w_log / ULP, w_sp / ULP,
           w_ls / ULP);
    CHECK(w_exp < 4 * ULP && w_sub <= 1, "exp: %.3g, subnormal %.3g steps", w_exp, w_sub);
    CHECK(w_expm1 < 4 * ULP, "expm1: %.3g", w_expm1);
    CHECK(w_log < 4 * ULP, "log: %.3g", w_log);
    CHECK(w_sp < 6 * ULP, "softplus: %.3g", w_sp);
    CHECK(w_ls < 6 * ULP, "log_sigmoid: %.3g", w_ls);
    /* the ends and special values are libm's */
    CHECK(ag__vexp_full(89.0f) == INFINITY && ag__vexp_full(INFINITY) == INFINITY, "exp overflows to inf");
    CHECK(ag__vexp_full(88.7f) < INFINITY && ag__vexp_full(88.7f) > 3.3e38f, "exp(88.7) is finite");
    CHECK(ag__vexp_full(-104.0f) == 0 && ag__vexp_full(-INFINITY) == 0, "exp underflows to 0");
    CHECK(ag__vexp_full(0.0f) == 1.0f && isnan(ag__vexp_full(NAN)), "exp(0) = 1, NaN propagates");
    CHECK(ag__vexpm1(0.0f) == 0.0f && ag__vexpm1(-INFINITY) == -1.0f && ag__vexpm1(-1e30f) == -1.0f, "expm1 ends");
    CHECK(ag__vexpm1(1e-20f) == 1e-20f, "expm1 keeps tiny arguments");
    CHECK(ag__vlog(1.0f) == 0.0f && ag__vlog(0.0f) == -INFINITY && ag__vlog(INFINITY) == INFINITY, "log ends");
    CHECK(isnan(ag__vlog(-1.0f)) && isnan(ag__vlog(NAN)) && isnan(ag__vlog(-INFINITY)), "log of negatives is NaN");
    CHECK(fabs(ag__vlog(1e-45f) - log((double)1e-45f)) < 1e-5 && fabs(ag__vlog(1e-40f) - log((double)1e-40f)) < 1e-5,
          "log of subnormals");
    CHECK(ag__vsoftplus(INFINITY) == INFINITY && ag__vsoftplus(-INFINITY) == 0 && ag__vsoftplus(100.0f) == 100.0f,
          "softplus ends");
    CHECK(ag__vsoftplus(-50.0f) > 0 && rel(ag__vsoftplus(-50.0f), exp(-50.0)) < 4 * ULP, "softplus tail");
    CHECK(ag__vlog_sigmoid(-INFINITY) == -INFINITY && ag__vlog_sigmoid(INFINITY) == 0, "log_sigmoid ends");
    CHECK(isnan(ag__vsoftplus(NAN)) && isnan(ag__vlog_sigmoid(NAN)), "NaN propagates");
}

/* GELU's pieces: Phi, phi, GELU and its derivative over every 257th float
 * bit pattern of [-14, 14] (the left tail down to Phi ~ 1e-44, where the
 * e^-87 flush ends it) and the tails beyond, against libm's erfc in
 * double; and SiLU, x sigmoid(x). */
static void gelu_kernels(void) {
    double w_cdf = 0, w_pdf = 0, w_gelu = 0, w_grad = 0, w_silu = 0;
    for (uint64_t b = 0; b <= 0xFFFFFFFFu; b += 257) {
        uint32_t bits = (uint32_t)b;
        float x;
        memcpy(&x, &bits, sizeof x);
        if (!(fabsf(x) <= 14)) continue;
        double xd = x, cdf = 0.5 * erfc(-xd / sqrt(2.0)), pdf = exp(-0.5 * xd * xd) / sqrt(2 * M_PI);
        if (cdf > 1e-37) w_cdf = check_worst(w_cdf, rel(ag__vnormal_cdf(x), cdf));
        if (pdf > 1e-37) w_pdf = check_worst(w_pdf, rel(ag__vnormal_pdf(x), pdf));
        if (cdf > 1.2e-38 && fabs(xd * cdf) > 1.2e-38) /* normal values on the way */
            w_gelu = check_worst(w_gelu, rel(ag__vgelu(x), xd * cdf));
        /* the derivative cancels near x = -0.75 (Phi + x phi = 0): absolute there */
        double grad = cdf + xd * pdf;
        if (cdf > 1e-37) w_grad = check_worst(w_grad, fabs(ag__vgelu_grad(x) - grad) / fmax(fabs(grad), 0.1));
        double silu = xd / (1 + exp(-xd));
        if (x != 0 && fabs(silu) > 1e-37) w_silu = check_worst(w_silu, rel(x * ag__vsigmoid(x), silu));
    }
    printf("  gelu kernels: Phi %.2f ulp, phi %.2f, gelu %.2f, its derivative %.2f (abs below 0.1), silu %.2f ulp\n",
           w_cdf / ULP, w_pdf / ULP, w_gelu / ULP, w_grad / ULP, w_silu / ULP);
    CHECK(w_cdf < 8 * ULP && w_pdf < 5 * ULP && w_gelu < 8 * ULP, "Phi %.3g, phi %.3g, gelu %.3g", w_cdf, w_pdf, w_gelu);
    CHECK(w_grad < 16 * ULP && w_silu < 6 * ULP, "gelu' %.3g, silu %.3g", w_grad, w_silu);
    /* the ends: Phi saturates, the tails flush to 0, NaN propagates */
    CHECK(ag__vnormal_cdf(40.0f) == 1 && ag__vnormal_cdf(INFINITY) == 1 && ag__vnormal_cdf(-40.0f) == 0 &&
          ag__vnormal_cdf(-INFINITY) == 0, "Phi ends");
    CHECK(ag__vgelu(100.0f) == 100.0f && ag__vgelu(-100.0f) == 0 && ag__vgelu_grad(100.0f) == 1 &&
          ag__vgelu_grad(-100.0f) == 0, "gelu ends");
    CHECK(isnan(ag__vgelu(NAN)) && isnan(ag__vgelu_grad(NAN)), "NaN propagates");
    /* PyTorch's torch.nn.functional.gelu(1.0), (-1.0), in double */
    CHECK(rel(ag__vgelu(1.0f), 0.8413447460685429) < 2 * ULP && rel(ag__vgelu(-1.0f), -0.15865525393145707) < 4 * ULP,
          "gelu(1) %.9g, gelu(-1) %.9g", ag__vgelu(1.0f), ag__vgelu(-1.0f));
}

static bool is_plus_zero(float f) { return f == 0 && !signbit(f); }

/* The softmax family's e^x (ag__vexp_nonpos) over its domain x <= 0: every
 * 97th float bit pattern from -0 down to -inf (~22 million).  Where e^x is
 * a normal float: within 4 units of 2^-24 relative, and bit for bit the
 * value of ag__vexp and ag__vexp_full (one core); below: exactly +0, so a
 * masked logit (-inf) weighs nothing. */
static void softmax_exp(void) {
    const float lo = AG__EXP_MIN_NORMAL_ARG;
    double worst = 0, worst_x = 0;
    int64_t normal = 0, not_shared = 0, not_flushed = 0;
    for (uint64_t b = 0x80000000u; b <= 0xFF800000u; b += 97) {
        uint32_t bits = (uint32_t)b;
        float x;
        memcpy(&x, &bits, sizeof x);
        float got = ag__vexp_nonpos(x);
        if (x < lo) {
            not_flushed += !is_plus_zero(got);
            continue;
        }
        double err = rel(got, exp((double)x));
        if (!(err <= worst)) worst = check_worst(worst, err), worst_x = x;
        not_shared += memcmp(&got, &(float){ag__vexp(x)}, sizeof got) != 0 ||
                      memcmp(&got, &(float){ag__vexp_full(x)}, sizeof got) != 0;
        normal++;
    }
    printf("  softmax exp (x <= 0): %.2f ulp at x = %.9g over %lld normal results\n", worst / ULP, worst_x,
           (long long)normal);
    CHECK(worst < 4 * ULP, "softmax exp: %.3g at %.9g", worst, worst_x);
    CHECK(not_shared == 0, "%lld results differ from ag__vexp or ag__vexp_full", (long long)not_shared);
    CHECK(not_flushed == 0, "%lld results below ln FLT_MIN are not +0", (long long)not_flushed);
    CHECK(ag__vexp_nonpos(0.0f) == 1.0f && ag__vexp_nonpos(-0.0f) == 1.0f, "e^0 = 1");
    CHECK(is_plus_zero(ag__vexp_nonpos(-INFINITY)) && is_plus_zero(ag__vexp_nonpos(-1e30f)), "-inf gives +0");
    CHECK(ag__vexp_nonpos(lo) >= 0x1p-126f && is_plus_zero(ag__vexp_nonpos(nextafterf(lo, -INFINITY))),
          "e^x is a normal float down to ln FLT_MIN, +0 below");
    CHECK(isnan(ag__vexp_nonpos(NAN)) && isnan(ag__vexp_nonpos(-NAN)), "NaN propagates");
}
#endif

int main(void) {
#ifdef AG_REAL_DOUBLE
    printf("test_vecmath: runs in the f32 build\n");
    return 1;
#else
    double worst_exp = 0, worst_sig = 0, worst_tanh = 0;
    for (double x = -100; x <= 100; x += 1.0 / 1024 + 1e-7) {
        float xf = (float)x;
        double e = exp((double)xf), s = 1 / (1 + exp(-(double)xf)), t = tanh((double)xf);
        if (xf >= AG__EXP_MIN_NORMAL_ARG && xf <= 88.0f) /* outside: flushes to 0, saturates at e^88 */
            worst_exp = check_worst(worst_exp, fabs(ag__vexp(xf) - e) / e);
        if (s > 1.2e-38) worst_sig = check_worst(worst_sig, fabs(ag__vsigmoid(xf) - s) / s);
        if (t != 0) worst_tanh = check_worst(worst_tanh, fabs(ag__vtanh(xf) - t) / fabs(t));
    }
    for (float x = 1e-30f; x < 1; x *= 1.37f) { /* tanh near 0: relative accuracy, no cancellation */
        worst_tanh = check_worst(worst_tanh, fabs(ag__vtanh(x) - tanh((double)x)) / tanh((double)x));
        worst_tanh = check_worst(worst_tanh, fabs(ag__vtanh(-x) + tanh((double)x)) / tanh((double)x));
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
    softmax_exp();
    elementwise_kernels();
    gelu_kernels();
    return check_summary("test_vecmath");
#endif
}
