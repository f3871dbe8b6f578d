/* test_init.c - initializers: exact values from the documented draws,
 * reproducibility from the seed, the distributions' moments, Glorot's fan
 * from [in, out] storage, and the misuse errors. */
#include "optim_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* Largest |G - gain^2 I| of the Gram matrix of one [r, c] matrix w: W W^T
 * (r x r) when r <= c, W^T W (c x c) when r >= c; in double. */
static double gram_error(const ag_real *w, int r, int c, double gain) {
    bool rows = r <= c;
    int k = rows ? r : c, len = rows ? c : r;
    double worst = 0;
    for (int i = 0; i < k; i++)
        for (int j = 0; j < k; j++) {
            double s = 0;
            for (int l = 0; l < len; l++)
                s += rows ? (double)w[i * c + l] * w[j * c + l] : (double)w[l * c + i] * w[l * c + j];
            worst = fmax(worst, fabs(s - (i == j ? gain * gain : 0)));
        }
    return worst;
}

/* Orthogonal: the Gram matrix of the short side is gain^2 I (to 1e-12 in
 * f64, to f32's rounding in f32), Q is the QR of the seed's normal draws with
 * R's diagonal positive (Q^T A upper triangular, diagonal > 0), stacked
 * matrices each orthogonal and drawn one after another, same seed same
 * values, and the f32 values are the f64 ones rounded. */
static void test_orthogonal(void) {
    ag_params ps = {0};
    const double tol = IS_F64 ? 1e-12 : 1e-5;
    const int shapes[][2] = {{4, 4}, {3, 7}, {7, 3}, {1, 5}, {5, 1}, {1, 1}, {40, 25}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int r = shapes[s][0], c = shapes[s][1];
        ag_tensor *w = ag_param(&ps, "w", 2, (int[]){r, c});
        ag_rng r1, r2;
        ag_rng_seed(&r1, 7 + s);
        ag_rng_seed(&r2, 7 + s);
        double gain = s % 2 ? 1.0 : 1.7;
        ag_init_orthogonal(w, gain, &r1);
        double err = gram_error(w->data, r, c, gain);
        CHECK(err <= tol * gain * gain, "[%d,%d] gain %g: |Gram - gain^2 I| %g", r, c, gain, err);
        /* the draws: M [r, c] row-major; A = M if r >= c else M^T (m x n, tall).
         * Q^T A = R with R upper triangular and its diagonal positive. */
        bool tall = r >= c;
        int m = tall ? r : c, n = tall ? c : r;
        double *A = calloc((size_t)m * n, sizeof *A);
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) A[tall ? i * n + j : j * n + i] = ag_rng_normal(&r2);
        CHECK(memcmp(&r1, &r2, sizeof r1) == 0, "[%d,%d]: one normal draw per element", r, c);
        double worst_low = 0, min_diag = INFINITY, scale = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double rij = 0; /* (Q^T A)[i, j], Q[:, i] = W's row i (wide) or column i (tall), over gain */
                for (int l = 0; l < m; l++) rij += (tall ? w->data[l * c + i] : w->data[i * c + l]) / gain * A[l * n + j];
                scale = fmax(scale, fabs(rij));
                if (i > j) worst_low = fmax(worst_low, fabs(rij));
                if (i == j) min_diag = fmin(min_diag, rij);
            }
        CHECK(worst_low <= tol * 10 * scale && min_diag > 0, "[%d,%d]: Q^T A not upper triangular with a positive "
              "diagonal (below %g, diagonal min %g)", r, c, worst_low, min_diag);
        if (r == 1 && c == 1) CHECK(w->data[0] == (ag_real)gain, "[1,1] is gain: %g", (double)w->data[0]);
        free(A);
        /* the same seed, the same bits */
        ag_tensor *u = ag_param(&ps, "u", 2, (int[]){r, c});
        ag_rng_seed(&r2, 7 + s);
        ag_init_orthogonal(u, gain, &r2);
        CHECK(memcmp(w->data, u->data, (size_t)w->size * sizeof(ag_real)) == 0, "[%d,%d]: not reproducible", r, c);
        ag_params_free(&ps);
        ps = (ag_params){0};
    }
    /* [3, 4, 6]: three matrices, each orthogonal, each from its own draws
     * (the first equal to a [4, 6] drawn from the same seed) */
    ag_tensor *st = ag_param(&ps, "stack", 3, (int[]){3, 4, 6}), *one = ag_param(&ps, "one", 2, (int[]){4, 6});
    ag_rng r1, r2;
    ag_rng_seed(&r1, 3);
    ag_rng_seed(&r2, 3);
    ag_init_orthogonal(st, 1.0, &r1);
    ag_init_orthogonal(one, 1.0, &r2);
    for (int k = 0; k < 3; k++) CHECK(gram_error(st->data + k * 24, 4, 6, 1.0) <= tol, "stacked matrix %d", k);
    CHECK(memcmp(st->data, one->data, 24 * sizeof(ag_real)) == 0, "the first stacked matrix is drawn first");
    CHECK(memcmp(st->data, st->data + 24, 24 * sizeof(ag_real)) != 0, "stacked matrices differ");
    /* different seeds, different matrices */
    ag_rng_seed(&r2, 4);
    ag_init_orthogonal(one, 1.0, &r2);
    CHECK(memcmp(st->data, one->data, 24 * sizeof(ag_real)) != 0, "another seed");
    /* drawn and factored in double: the f32 build's values are the f64 build's
     * (these, from it) rounded to float */
    ag_rng_seed(&r1, 11);
    ag_init_orthogonal(one, 1.0, &r1);
    const double ref[3] = {0.51755087917624865, 0.081046204499435837, 0.16332121112247458}; /* [0], [7], [23] */
    const int at[3] = {0, 7, 23};
    for (int k = 0; k < 3; k++)
        CHECK(one->data[at[k]] == (ag_real)ref[k] || (IS_F64 && fabs(one->data[at[k]] - ref[k]) <= 1e-15),
              "seed 11 [%d] = %.17g, the f64 build's %.17g", at[k], (double)one->data[at[k]], ref[k]);
    /* misuse: fewer than 2 dims, by name and shape; a zero-size one is left alone */
    ag_tensor *bias = ag_param(&ps, "cls.bias", 1, (int[]){5});
    EXPECT_FATAL(ag_init_orthogonal(bias, 1.0, &r1), "ag_init_orthogonal", "[5]", "cls.bias", "test_init.c");
    ag_tensor *empty = ag_param(&ps, "empty", 2, (int[]){0, 3});
    ag_init_orthogonal(empty, 1.0, &r1);
    ag_params_free(&ps);
}

/* Per chunk: an LSTM's w_hh [H, 4H] in 4 chunks has each gate's [H, H]
 * orthogonal, chunk k drawn as the k-th of 4 [H, H] matrices from the
 * same seed; stacked leading dims go matrix by matrix; a count that does
 * not divide the last dim is refused by name. */
static void test_orthogonal_chunks(void) {
    const double tol = IS_F64 ? 1e-12 : 1e-5;
    ag_params ps = {0};
    const int H = 5, rows[] = {5, 3, 8}; /* square, wide and tall blocks */
    for (size_t t = 0; t < sizeof rows / sizeof *rows; t++) {
        int r = rows[t];
        ag_tensor *w = ag_param(&ps, "rnn.w_hh", 3, (int[]){2, r, 4 * H}), *one = ag_param(&ps, "one", 2, (int[]){r, H});
        ag_rng r1, r2;
        ag_rng_seed(&r1, 21);
        ag_rng_seed(&r2, 21);
        ag_init_orthogonal_chunks(w, 4, 1.3, &r1);
        ag_real block[8 * 5];
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < 4; k++) {
                for (int i = 0; i < r; i++)
                    for (int j = 0; j < H; j++) block[i * H + j] = w->data[(s * r + i) * 4 * H + k * H + j];
                double err = gram_error(block, r, H, 1.3);
                CHECK(err <= tol * 1.7, "[2,%d,%d] in 4 chunks: matrix %d chunk %d: |Gram - gain^2 I| %g", r, 4 * H, s, k,
                      err);
                ag_init_orthogonal(one, 1.3, &r2); /* the same draws, one [r, H] at a time */
                CHECK(memcmp(block, one->data, (size_t)r * H * sizeof(ag_real)) == 0,
                      "[%d,%d] matrix %d chunk %d: not the %d-th [%d,%d] of the seed", r, 4 * H, s, k, 4 * s + k, r, H);
            }
        CHECK(memcmp(&r1, &r2, sizeof r1) == 0, "[2,%d,%d] in 4 chunks: as many draws as 8 matrices", r, 4 * H);
        ag_params_free(&ps);
        ps = (ag_params){0};
    }
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    ag_tensor *w = ag_param(&ps, "lstm.w_hh", 2, (int[]){4, 18});
    EXPECT_FATAL(ag_init_orthogonal_chunks(w, 4, 1.0, &rng), "ag_init_orthogonal_chunks", "lstm.w_hh", "4 chunks",
                 "18", "test_init.c");
    EXPECT_FATAL(ag_init_orthogonal_chunks(w, 0, 1.0, &rng), "ag_init_orthogonal_chunks", "0 chunks");
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
    test_orthogonal();
    test_orthogonal_chunks();
    test_misuse();
    ag_shutdown();
    return check_summary(IS_F64 ? "test_init_f64" : "test_init_f32");
}
