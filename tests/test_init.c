/* test_init.c - initializers: exact values from the documented draws,
 * reproducibility from the seed, the distributions' moments, Glorot's fan
 * from [in, out] storage, and the misuse errors. */
#include "optim_util.h"

#include <math.h>
#include <stdio.h>

/* Mean and variance of a tensor, in double. */
static void moments(const ag_tensor *t, double *mean, double *var) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t->size; i++) s += t->data[i];
    *mean = s / (double)t->size;
    for (int64_t i = 0; i < t->size; i++) s2 += ((double)t->data[i] - *mean) * ((double)t->data[i] - *mean);
    *var = s2 / (double)t->size;
}

static void test_exact_values(void) {
    ag_params ps = {0};
    ag_tensor *t = ag_param(&ps, "t", 2, (int[]){3, 4});
    ag_rng r1, r2;
    /* uniform: a + (b - a) u for each draw u, in row-major order */
    ag_rng_seed(&r1, 11);
    ag_rng_seed(&r2, 11);
    ag_init_uniform(t, -0.05, 0.05, &r1);
    for (int64_t i = 0; i < t->size; i++) CHECK(t->data[i] == (ag_real)(-0.05 + 0.1 * ag_rng_uniform(&r2)));
    CHECK(memcmp(&r1, &r2, sizeof r1) == 0, "one draw per element");
    /* normal: mean + std z */
    ag_init_normal(t, 0.5, 2.0, &r1);
    for (int64_t i = 0; i < t->size; i++) CHECK(t->data[i] == (ag_real)(0.5 + 2.0 * ag_rng_normal(&r2)));
    /* Glorot uniform on [3, 4]: bound sqrt(6 / 7) */
    ag_init_glorot_uniform(t, 1.0, &r1);
    double bound = sqrt(6.0 / 7.0);
    for (int64_t i = 0; i < t->size; i++) CHECK(t->data[i] == (ag_real)(-bound + 2 * bound * ag_rng_uniform(&r2)));
    /* Glorot normal with gain 2: std 2 sqrt(2 / 7) */
    ag_init_glorot_normal(t, 2.0, &r1);
    double std = 2.0 * sqrt(2.0 / 7.0);
    for (int64_t i = 0; i < t->size; i++) CHECK(t->data[i] == (ag_real)(std * ag_rng_normal(&r2)));
    ag_init_constant(t, 0.25);
    for (int64_t i = 0; i < t->size; i++) CHECK(t->data[i] == (ag_real)0.25);
    ag_init_zeros(t);
    for (int64_t i = 0; i < t->size; i++) CHECK(t->data[i] == 0);
    /* the same seed twice gives the same tensor, bit for bit */
    ag_tensor *u = ag_param(&ps, "u", 2, (int[]){3, 4});
    ag_rng_seed(&r1, 5);
    ag_rng_seed(&r2, 5);
    ag_init_glorot_uniform(t, 1.0, &r1);
    ag_init_glorot_uniform(u, 1.0, &r2);
    CHECK(memcmp(t->data, u->data, (size_t)t->size * sizeof(ag_real)) == 0);
    ag_params_free(&ps);
}

static void test_distributions(void) {
    ag_params ps = {0};
    ag_rng rng;
    ag_rng_seed(&rng, 2024);
    const int in = 200, out = 300;
    const double n = in * out;
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){in, out});
    double mean, var;

    ag_init_uniform(w, -0.1, 0.3, &rng);
    moments(w, &mean, &var);
    double lo = 1, hi = -1;
    for (int64_t i = 0; i < w->size; i++) lo = w->data[i] < lo ? w->data[i] : lo, hi = check_worst(hi, w->data[i]);
    CHECK(lo >= -0.1 && hi < 0.3 && lo < -0.099 && hi > 0.299, "range [%g, %g]", lo, hi);
    /* 5 standard errors: var(U) = 0.4²/12, and var of the sample variance */
    CHECK(fabs(mean - 0.1) < 5 * sqrt(0.16 / 12 / n), "mean %g", mean);
    CHECK(fabs(var - 0.16 / 12) < 5 * 0.16 / 12 * sqrt(0.8 / n), "var %g", var);

    ag_init_normal(w, -1.0, 0.5, &rng);
    moments(w, &mean, &var);
    CHECK(fabs(mean + 1.0) < 5 * 0.5 / sqrt(n), "mean %g", mean);
    CHECK(fabs(var - 0.25) < 5 * 0.25 * sqrt(2 / n), "var %g", var);

    /* Glorot: variance 2 / (in + out) for both, uniform within the bound */
    double want = 2.0 / (in + out), bound = sqrt(6.0 / (in + out));
    ag_init_glorot_uniform(w, 1.0, &rng);
    moments(w, &mean, &var);
    double big = 0;
    for (int64_t i = 0; i < w->size; i++) big = check_worst(big, fabs(w->data[i]));
    CHECK(big <= bound && big > 0.999 * bound, "max |w| %g, bound %g", big, bound);
    CHECK(fabs(mean) < 5 * sqrt(want / n) && fabs(var - want) < 5 * want * sqrt(0.8 / n), "mean %g var %g", mean, var);
    ag_init_glorot_normal(w, 1.0, &rng);
    moments(w, &mean, &var);
    CHECK(fabs(mean) < 5 * sqrt(want / n) && fabs(var - want) < 5 * want * sqrt(2 / n), "mean %g var %g", mean, var);

    /* stacked matrices [h, in, out]: the fan is in + out, not h * ... */
    ag_tensor *heads = ag_param(&ps, "heads", 3, (int[]){4, 10, 30});
    ag_init_glorot_uniform(heads, 1.0, &rng);
    big = 0;
    for (int64_t i = 0; i < heads->size; i++) big = check_worst(big, fabs(heads->data[i]));
    CHECK(big <= sqrt(6.0 / 40) && big > 0.95 * sqrt(6.0 / 40), "max %g", big);
    ag_params_free(&ps);
}

static void test_misuse(void) {
    ag_params ps = {0};
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    ag_tensor *bias = ag_param(&ps, "cls.bias", 1, (int[]){5});
    EXPECT_FATAL(ag_init_glorot_uniform(bias, 1.0, &rng), "ag_init_glorot_uniform", "[5]", "cls.bias", "test_init.c");
    EXPECT_FATAL(ag_init_glorot_normal(bias, 1.0, &rng), "ag_init_glorot_normal", "[5]");
    EXPECT_FATAL(ag_init_uniform(bias, 1.0, -1.0, &rng), "ag_init_uniform", "U(1, -1)");
    EXPECT_FATAL(ag_init_normal(bias, 0, -1, &rng), "ag_init_normal", "std");
    ag_params_free(&ps);
}

int main(void) {
    test_exact_values();
    test_distributions();
    test_misuse();
    ag_shutdown();
    return check_summary(IS_F64 ? "test_init_f64" : "test_init_f32");
}
