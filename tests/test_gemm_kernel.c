/* test_gemm_kernel.c - the packed f32 GEMM kernel (ops/gemm_kernel.c)
 * against a double-accumulated reference: every M, N, K from 1 past the
 * 6x16 blocking, both layouts of B, beta 0 and 1, alpha 1 and not; and
 * the bits of an element do not depend on M, on where its row sits, or on
 * the thread count.  The same sweep for the small in-place products
 * (ag__gemm_small: A B, A^T B, A B^T, strided operands), and the blocked
 * path with A or A^T, alone and as ag__gemm routes to it.  Skips (77)
 * where the kernel is not available. */
#include "check.h"
#include "../graph/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 24) * 2 - 1);
}

/* C = alpha A op(B) + beta C0 in double; |A||op(B)| for the error bound. */
static void reference(bool tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, float beta,
                      const float *C0, double *ref, double *mag) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, m = 0;
            for (int k = 0; k < K; k++) {
                double b = tb ? B[(int64_t)j * K + k] : B[(int64_t)k * N + j];
                s += (double)A[(int64_t)i * lda + k] * b;
                m += fabs((double)A[(int64_t)i * lda + k] * b);
            }
            ref[(int64_t)i * N + j] = alpha * s + (beta == 0 ? 0 : beta * (double)C0[(int64_t)i * N + j]);
            mag[(int64_t)i * N + j] = fabs(alpha) * m + (beta == 0 ? 0 : fabs(beta * (double)C0[(int64_t)i * N + j]));
        }
}

/* One product; returns the worst error relative to |A||B| + |beta C|. */
static double check_one(bool tb, int M, int N, int K, float alpha, float beta, uint64_t *seed) {
    int lda = K + 3; /* A's rows are strided, as the LSTM's gate rows are */
    float *A = malloc(sizeof(float) * ((size_t)M * lda + 1)), *B = malloc(sizeof(float) * ((size_t)K * N + 1));
    float *C = malloc(sizeof(float) * ((size_t)M * N + 1)), *C0 = malloc(sizeof(float) * ((size_t)M * N + 1));
    double *ref = malloc(sizeof(double) * ((size_t)M * N + 1)), *mag = malloc(sizeof(double) * ((size_t)M * N + 1));
    for (int64_t i = 0; i < (int64_t)M * lda; i++) A[i] = rnd(seed);
    for (int64_t i = 0; i < (int64_t)K * N; i++) B[i] = rnd(seed);
    for (int64_t i = 0; i < (int64_t)M * N; i++) C[i] = C0[i] = beta == 0 ? NAN : rnd(seed); /* beta 0 must not read C */
    reference(tb, M, N, K, alpha, A, lda, B, beta, C0, ref, mag);
    ag__packed_b P = ag__pack_b(tb, K, N, B);
    ag__gemm_packed(M, A, lda, &P, alpha, beta, C, N);
    double worst = 0;
    for (int64_t i = 0; i < (int64_t)M * N; i++) {
        double err = fabs(C[i] - ref[i]) / (mag[i] + 1e-30);
        if (!(err <= worst)) worst = err; /* NaN counts as the worst */
    }
    ag_step_end();
    free(A), free(B), free(C), free(C0), free(ref), free(mag);
    return worst;
}

static void test_sizes(void) {
    uint64_t seed = 1;
    const int sizes[] = {1, 2, 3, 5, 6, 7, 8, 9, 12, 13, 15, 16, 17, 31, 32, 33, 47};
    const int n_sizes = (int)(sizeof sizes / sizeof *sizes);
    double worst = 0;
    int cases = 0;
    for (int tb = 0; tb <= 1; tb++)
        for (int mi = 0; mi < n_sizes; mi++)
            for (int ni = 0; ni < n_sizes; ni++)
                for (int ki = 0; ki < n_sizes; ki += 2)
                    for (int variant = 0; variant < 3; variant++) {
                        float alpha = variant == 2 ? 0.5f : 1, beta = variant == 0 ? 0 : 1;
                        double e = check_one(tb, sizes[mi], sizes[ni], sizes[ki], alpha, beta, &seed);
                        cases++;
                        if (!(e <= worst)) worst = e;
                        CHECK(e <= 1e-5, "tb %d M %d N %d K %d alpha %g beta %g: relative error %g", tb, sizes[mi],
                              sizes[ni], sizes[ki], alpha, beta, e);
                    }
    /* the LSTM's shapes: forward [ba,400]x[400,1600], backward [ba,1600]x[1600,400]^T */
    const int lstm[][4] = {{0, 32, 1600, 400}, {1, 32, 400, 1600}, {0, 29, 1600, 400}, {1, 1, 400, 1600}};
    for (int s = 0; s < 4; s++)
        for (int beta = 0; beta <= 1; beta++) {
            double e = check_one(lstm[s][0], lstm[s][1], lstm[s][2], lstm[s][3], 1, (float)beta, &seed);
            cases++;
            if (!(e <= worst)) worst = e;
            CHECK(e <= 1e-5, "LSTM shape %d beta %d: relative error %g", s, beta, e);
        }
    printf("  %d products, worst error %.3g of |A||B| + |beta C|\n", cases, worst);
}

/* ag__gemm_small: op(A) op(B) with A, B read in place (strided rows), for
 * A B, A^T B and A B^T. */
/* Relative error of C[i,j] = c against alpha op(A) op(B) + beta c0, the
 * sum taken in double (relative to the sum of the terms' magnitudes). */
static double element_error(bool ta, bool tb, int i, int j, int K, float alpha, const float *A, int lda, const float *B,
                            int ldb, float beta, float c0, float c) {
    double sum = 0, mag = 0;
    for (int k = 0; k < K; k++) {
        double p = (double)A[ta ? (int64_t)k * lda + i : (int64_t)i * lda + k] *
                   B[tb ? (int64_t)j * ldb + k : (int64_t)k * ldb + j];
        sum += p, mag += fabs(p);
    }
    double base = beta == 0 ? 0 : beta * (double)c0;
    return fabs(c - (alpha * sum + base)) / (fabs(alpha) * mag + fabs(base) + 1e-30);
}

static double check_small(bool ta, bool tb, int M, int N, int K, float alpha, float beta, uint64_t *seed) {
    int lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 5, ldc = N + 1;
    int arows = ta ? K : M, brows = tb ? N : K;
    float *A = malloc(sizeof(float) * ((size_t)arows * lda + 1)), *B = malloc(sizeof(float) * ((size_t)brows * ldb + 1));
    float *C = malloc(sizeof(float) * ((size_t)M * ldc + 1));
    double worst = 0;
    for (int64_t i = 0; i < (int64_t)arows * lda; i++) A[i] = rnd(seed);
    for (int64_t i = 0; i < (int64_t)brows * ldb; i++) B[i] = rnd(seed);
    for (int64_t i = 0; i < (int64_t)M * ldc; i++) C[i] = beta == 0 ? NAN : rnd(seed);
    float *C0 = malloc(sizeof(float) * ((size_t)M * ldc + 1));
    memcpy(C0, C, sizeof(float) * (size_t)M * ldc);
    CHECK(ag__gemm_small(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL), "refused %d %d", ta, tb);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double err = element_error(ta, tb, i, j, K, alpha, A, lda, B, ldb, beta, C0[(int64_t)i * ldc + j],
                                       C[(int64_t)i * ldc + j]);
            if (!(err <= worst)) worst = err;
        }
    for (int i = 0; i < M; i++) /* the column past N is not C's */
        CHECK(memcmp(&C[(int64_t)i * ldc + N], &C0[(int64_t)i * ldc + N], sizeof(float)) == 0, "wrote past N");
    free(A), free(B), free(C), free(C0);
    return worst;
}

static void test_small(void) {
    uint64_t seed = 3;
    const int sizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 17, 30, 33};
    const int n_sizes = (int)(sizeof sizes / sizeof *sizes);
    const bool layouts[3][2] = {{false, false}, {true, false}, {false, true}};
    double worst = 0;
    int cases = 0;
    for (int l = 0; l < 3; l++)
        for (int mi = 0; mi < n_sizes; mi++)
            for (int ni = 0; ni < n_sizes; ni++)
                for (int ki = 0; ki < n_sizes; ki += 2)
                    for (int variant = 0; variant < 3; variant++) {
                        float alpha = variant == 2 ? -0.5f : 1, beta = variant == 0 ? 0 : 1;
                        int M = sizes[mi], N = sizes[ni], K = sizes[ki];
                        double e = check_small(layouts[l][0], layouts[l][1], M, N, K, alpha, beta, &seed);
                        cases++;
                        if (!(e <= worst)) worst = e;
                        CHECK(e <= 1e-5, "small ta %d tb %d M %d N %d K %d alpha %g beta %g: relative error %g",
                              layouts[l][0], layouts[l][1], M, N, K, alpha, beta, e);
                    }
    /* MPSAN's per-example shapes */
    double e = check_small(false, false, 30, 300, 30, 1, 1, &seed);
    e = fmax(e, check_small(false, true, 30, 30, 300, 1, 1, &seed));
    e = fmax(e, check_small(true, false, 30, 300, 30, 1, 0, &seed));
    CHECK(e <= 1e-5, "MPSAN shapes: relative error %g", e);
    printf("  %d small products, worst error %.3g of |A||B| + |beta C|\n", cases + 3, fmax(worst, e));
}

/* Sparse left operands as MPSAN's masked attention weights make them:
 * ag__gemm_small with op(A)'s row spans (ag__k_spans) against the double
 * reference and, bit for bit, against the same product without spans (a
 * skipped term is 0 b: the sums cannot change).  Patterns of op(A)(i, k):
 * a band 1 <= |k - i| <= 2 or 3, a triangle k < i or k > i, all zero, one
 * nonzero, and a band with a NaN (its row of C NaN, the others exact). */
enum { BAND2, BAND3, PAST, FUTURE, ZERO, SINGLE, NAN_BAND, PATTERNS };
static const char *const pattern_name[PATTERNS] = {"band2", "band3", "past", "future", "zero", "single", "nan_band"};

static bool pattern_at(int pattern, int i, int k, int M, int K) {
    int d = k > i ? k - i : i - k;
    switch (pattern) {
    case BAND2: case NAN_BAND: return d >= 1 && d <= 2;
    case BAND3: return d >= 1 && d <= 3;
    case PAST: return k < i;
    case FUTURE: return k > i;
    case SINGLE: return i == M / 2 && k == (K * 2) / 3;
    default: return false;
    }
}

/* The spans and live block by brute force, for ag__k_spans to match. */
static void spans_by_hand(int pattern, int M, int K, ag__k_span *want, int *m, int *k) {
    *m = *k = 0;
    for (int i = 0; i < M; i++) {
        int lo = -1, hi = 0;
        for (int c = 0; c < K; c++)
            if (pattern_at(pattern, i, c, M, K)) lo = lo < 0 ? c : lo, hi = c + 1;
        want[i] = (ag__k_span){lo < 0 ? 0 : lo, hi};
        if (hi) *m = i + 1;
        if (hi > *k) *k = hi;
    }
}

static void check_spans(bool ta, int pattern, int M, int N, int K, float alpha, float beta, uint64_t *seed) {
    int lda = (ta ? M : K) + 2, ldb = N + 3, ldc = N + 1, arows = ta ? K : M;
    float *A = calloc((size_t)arows * lda + 1, sizeof(float)), *B = malloc(sizeof(float) * ((size_t)K * ldb + 1));
    float *C = malloc(sizeof(float) * ((size_t)M * ldc + 1)), *C0 = malloc(sizeof(float) * ((size_t)M * ldc + 1));
    float *Cd = malloc(sizeof(float) * ((size_t)M * ldc + 1));
    int nan_row = M / 3, nan_k = nan_row + 1 < K ? nan_row + 1 : -1; /* inside nan_row's band */
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            float v = pattern == NAN_BAND && i == nan_row && k == nan_k ? NAN : 0.1f + 0.9f * fabsf(rnd(seed));
            if (pattern_at(pattern, i, k, M, K)) A[ta ? (int64_t)k * lda + i : (int64_t)i * lda + k] = v;
        }
    for (int64_t i = 0; i < (int64_t)K * ldb; i++) B[i] = rnd(seed);
    for (int64_t i = 0; i < (int64_t)M * ldc; i++) C0[i] = beta == 0 ? NAN : rnd(seed);
    ag__k_span spans[AG_SPAN_ROWS], want[AG_SPAN_ROWS];
    int m, k, want_m, want_k;
    ag__k_spans(A, ta, M, K, lda, spans, &m, &k);
    spans_by_hand(pattern, M, K, want, &want_m, &want_k);
    CHECK(m == want_m && k == want_k, "%s ta %d M %d K %d: live block %dx%d, want %dx%d", pattern_name[pattern], ta, M,
          K, m, k, want_m, want_k);
    for (int i = 0; i < M; i++)
        CHECK(spans[i].lo == want[i].lo && spans[i].hi == want[i].hi, "%s ta %d M %d K %d: row %d span [%d,%d), want "
              "[%d,%d)", pattern_name[pattern], ta, M, K, i, spans[i].lo, spans[i].hi, want[i].lo, want[i].hi);
    memcpy(C, C0, sizeof(float) * (size_t)M * ldc);
    memcpy(Cd, C0, sizeof(float) * (size_t)M * ldc);
    CHECK(ag__gemm_small(ta, false, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, spans), "refused spans");
    CHECK(ag__gemm_small(ta, false, M, N, K, alpha, A, lda, B, ldb, beta, Cd, ldc, NULL), "refused dense");
    double worst = 0;
    for (int i = 0; i < M; i++) {
        bool nan_in_row = pattern == NAN_BAND && i == nan_row && nan_k >= 0;
        for (int j = 0; j < N; j++) {
            float c = C[(int64_t)i * ldc + j], cd = Cd[(int64_t)i * ldc + j];
            if (nan_in_row) { /* NaN times anything: the whole row is NaN, as without spans */
                CHECK(isnan(c) && isnan(cd), "%s ta %d M %d N %d K %d: C[%d,%d] = %g, want NaN", pattern_name[pattern],
                      ta, M, N, K, i, j, c);
                continue;
            }
            double err = element_error(ta, false, i, j, K, alpha, A, lda, B, ldb, beta, C0[(int64_t)i * ldc + j], c);
            if (!(err <= worst)) worst = err;
            CHECK(memcmp(&c, &cd, sizeof c) == 0, "%s ta %d M %d N %d K %d: C[%d,%d] %a with spans, %a without",
                  pattern_name[pattern], ta, M, N, K, i, j, c, cd);
        }
        CHECK(memcmp(&C[(int64_t)i * ldc + N], &C0[(int64_t)i * ldc + N], sizeof(float)) == 0, "wrote past N");
    }
    CHECK(worst <= 1e-5, "%s ta %d M %d N %d K %d alpha %g beta %g: relative error %g", pattern_name[pattern], ta, M,
          N, K, alpha, beta, worst);
    free(A), free(B), free(C), free(C0), free(Cd);
}

static void test_spans(void) {
    uint64_t seed = 17;
    const int sizes[][3] = {{30, 300, 30}, {1, 17, 1}, {5, 16, 5}, {7, 33, 9}, {13, 8, 13}, {32, 40, 31}, {29, 300, 30},
                            {128, 20, 128}};
    int cases = 0;
    for (int ta = 0; ta <= 1; ta++)
        for (int pattern = 0; pattern < PATTERNS; pattern++)
            for (int s = 0; s < 8; s++)
                for (int variant = 0; variant < 3; variant++) {
                    float alpha = variant == 2 ? -0.5f : 1, beta = variant == 0 ? 0 : 1;
                    check_spans(ta, pattern, sizes[s][0], sizes[s][1], sizes[s][2], alpha, beta, &seed);
                    cases++;
                }
    printf("  %d products with row spans, bits as without\n", cases);
}

/* Row r of C has the same bits whatever M is, wherever the row sits in A,
 * and whatever the thread count (the parts are whole panels). */
static void test_bits(void) {
    uint64_t seed = 7;
    int M = 37, N = 1600, K = 400;
    float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
    float *C1 = malloc(sizeof(float) * (size_t)M * N), *C2 = malloc(sizeof(float) * (size_t)M * N);
    for (int64_t i = 0; i < (int64_t)M * K; i++) A[i] = rnd(&seed);
    for (int64_t i = 0; i < (int64_t)K * N; i++) B[i] = rnd(&seed);
    ag_set_num_threads(1);
    ag__packed_b P = ag__pack_b(false, K, N, B);
    ag__gemm_packed(M, A, K, &P, 1, 0, C1, N);
    for (int threads = 1; threads <= 3; threads++) {
        ag_set_num_threads(threads);
        ag__gemm_packed(M, A, K, &P, 1, 0, C2, N);
        CHECK(!memcmp(C1, C2, sizeof(float) * (size_t)M * N), "threads %d changed the bits", threads);
        for (int m0 = 0; m0 < M; m0 += 7) { /* rows [m0, m0 + m) alone */
            int m = M - m0 < 5 ? M - m0 : 5 + m0 % 3;
            ag__gemm_packed(m, A + (int64_t)m0 * K, K, &P, 1, 0, C2, N);
            CHECK(!memcmp(C1 + (int64_t)m0 * N, C2, sizeof(float) * (size_t)m * N), "rows %d..%d alone differ", m0,
                  m0 + m);
        }
    }
    ag_step_end();
    free(A), free(B), free(C1), free(C2);
}

/* The blocked path (blocks of rows of A sized by K: 132 rows at K = 300,
 * 24 at 1500, 6 at 4001), through ag__gemm_packed_op with A or A^T, and
 * through ag__gemm where it routes here: M across block boundaries, sizes
 * not multiples of the blocking, beta 0 with C full of NaN, beta 1,
 * alpha != 1, B and B^T.  via_gemm: the product as ag__gemm runs it
 * (lda, ldc natural), else a packed one with strided A and C. */
static double check_op(bool via_gemm, bool ta, bool tb, int M, int N, int K, float alpha, float beta, uint64_t *seed) {
    int lda = (ta ? M : K) + (via_gemm ? 0 : 3), ldc = N + (via_gemm ? 0 : 2), arows = ta ? K : M;
    float *A = malloc(sizeof(float) * ((size_t)arows * lda + 1)), *B = malloc(sizeof(float) * ((size_t)K * N + 1));
    float *C = malloc(sizeof(float) * ((size_t)M * ldc + 1)), *C0 = malloc(sizeof(float) * ((size_t)M * ldc + 1));
    for (int64_t i = 0; i < (int64_t)arows * lda; i++) A[i] = rnd(seed);
    for (int64_t i = 0; i < (int64_t)K * N; i++) B[i] = rnd(seed);
    for (int64_t i = 0; i < (int64_t)M * ldc; i++) C[i] = C0[i] = beta == 0 ? NAN : rnd(seed);
    if (via_gemm) {
        ag__gemm(ta, tb, M, N, K, alpha, A, B, beta, C);
    } else {
        ag__packed_b P = ag__pack_b(tb, K, N, B);
        ag__gemm_packed_op(ta, M, A, lda, &P, alpha, beta, C, ldc);
    }
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double err = element_error(ta, tb, i, j, K, alpha, A, lda, B, tb ? K : N, beta, C0[(int64_t)i * ldc + j],
                                       C[(int64_t)i * ldc + j]);
            if (!(err <= worst)) worst = err;
        }
    for (int i = 0; i < M && ldc > N; i++) /* the columns past N are not C's */
        CHECK(memcmp(&C[(int64_t)i * ldc + N], &C0[(int64_t)i * ldc + N], sizeof(float) * (size_t)(ldc - N)) == 0,
              "wrote past N");
    ag_step_end();
    free(A), free(B), free(C), free(C0);
    return worst;
}

static void test_blocked(void) {
    uint64_t seed = 11;
    const int shapes[][3] = {{265, 40, 300}, {133, 17, 300}, {49, 33, 1500}, {25, 16, 1500}, {13, 17, 4001},
                             {7, 31, 4001}};
    const int gemm_shapes[][3] = {{600, 40, 50}, {600, 20, 700}, {513, 1024, 33}, {256, 16, 2048}, {64, 17, 16}};
    double worst = 0;
    int cases = 0;
    for (int variant = 0; variant < 3; variant++) {
        float alpha = variant == 2 ? -0.5f : 1, beta = variant == 0 ? 0 : 1;
        for (int t = 0; t < 4; t++) { /* ta, tb */
            bool ta = t & 1, tb = t & 2;
            for (int s = 0; s < 6; s++) {
                double e = check_op(false, ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], alpha, beta, &seed);
                cases++;
                if (!(e <= worst)) worst = e;
                CHECK(e <= 1e-5, "blocked ta %d tb %d M %d N %d K %d alpha %g beta %g: relative error %g", ta, tb,
                      shapes[s][0], shapes[s][1], shapes[s][2], alpha, beta, e);
            }
            if (ta) continue;
            for (int s = 0; s < 5; s++) {
                double e = check_op(true, false, tb, gemm_shapes[s][0], gemm_shapes[s][1], gemm_shapes[s][2], alpha,
                                    beta, &seed);
                cases++;
                if (!(e <= worst)) worst = e;
                CHECK(e <= 1e-5, "ag__gemm tb %d M %d N %d K %d alpha %g beta %g: relative error %g", tb,
                      gemm_shapes[s][0], gemm_shapes[s][1], gemm_shapes[s][2], alpha, beta, e);
            }
        }
    }
    printf("  %d blocked products, worst error %.3g of |A||B| + |beta C|\n", cases, worst);
}

/* test_bits across blocks: 24-row blocks at K = 1500, A or A^T. */
static void test_blocked_bits(void) {
    uint64_t seed = 13;
    int M = 61, N = 40, K = 1500;
    float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
    float *C1 = malloc(sizeof(float) * (size_t)M * N), *C2 = malloc(sizeof(float) * (size_t)M * N);
    for (int64_t i = 0; i < (int64_t)M * K; i++) A[i] = rnd(&seed);
    for (int64_t i = 0; i < (int64_t)K * N; i++) B[i] = rnd(&seed);
    ag__packed_b P = ag__pack_b(true, K, N, B);
    for (int ta = 0; ta <= 1; ta++) {
        int lda = ta ? M : K;
        ag_set_num_threads(1);
        ag__gemm_packed_op(ta, M, A, lda, &P, 1, 0, C1, N);
        for (int threads = 1; threads <= 3; threads++) {
            ag_set_num_threads(threads);
            ag__gemm_packed_op(ta, M, A, lda, &P, 1, 0, C2, N);
            CHECK(!memcmp(C1, C2, sizeof(float) * (size_t)M * N), "ta %d threads %d changed the bits", ta, threads);
            for (int m0 = 0; m0 < M; m0 += 13) { /* rows [m0, m0 + m) alone, off the block boundaries */
                int m = M - m0 < 11 ? M - m0 : 11 + m0 % 5;
                ag__gemm_packed_op(ta, m, A + (ta ? m0 : (int64_t)m0 * K), lda, &P, 1, 0, C2, N);
                CHECK(!memcmp(C1 + (int64_t)m0 * N, C2, sizeof(float) * (size_t)m * N), "ta %d rows %d..%d alone differ",
                      ta, m0, m0 + m);
            }
        }
    }
    ag_set_num_threads(1);
    ag_step_end();
    free(A), free(B), free(C1), free(C2);
}

/* The two tiles give every element the same FMA chain: the same bits, on
 * the packed path, the small products and the spans. */
static void test_tiles_agree(void) {
    uint64_t seed = 11;
    const int sizes[][3] = {{37, 1600, 400}, {61, 40, 150}, {13, 33, 7}, {30, 300, 30}, {1, 17, 5}, {25, 16, 64}};
    int same = 0;
    for (int s = 0; s < 6; s++) {
        int M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
        float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
        float *C[2][3];
        for (int64_t i = 0; i < (int64_t)M * K; i++) A[i] = (i % 5 == 0) ? 0 : rnd(&seed); /* zeros: spans */
        for (int64_t i = 0; i < (int64_t)K * N; i++) B[i] = rnd(&seed);
        for (int w = 0; w < 2; w++) {
            ag__gemm_kernel_256(w == 1);
            for (int v = 0; v < 3; v++) C[w][v] = malloc(sizeof(float) * (size_t)M * N);
            ag_mark_t m = ag_mark();
            ag__packed_b P = ag__pack_b(false, K, N, B);
            ag__gemm_packed(M, A, K, &P, 1, 0, C[w][0], N);
            ag_rewind(m);
            CHECK(ag__gemm_small(false, false, M, N, K, -0.5f, A, K, B, N, 0, C[w][1], N, NULL));
            if (M <= AG_SPAN_ROWS) {
                ag__k_span spans[AG_SPAN_ROWS];
                int mm, kk;
                ag__k_spans(A, false, M, K, K, spans, &mm, &kk);
                CHECK(ag__gemm_small(false, false, M, N, K, 1, A, K, B, N, 0, C[w][2], N, spans));
            } else {
                memcpy(C[w][2], C[w][0], sizeof(float) * (size_t)M * N);
            }
        }
        for (int v = 0; v < 3; v++) {
            bool eq = !memcmp(C[0][v], C[1][v], sizeof(float) * (size_t)M * N);
            CHECK(eq, "%dx%dx%d (%s): the 512-bit and 256-bit tiles differ", M, N, K,
                  v == 0 ? "packed" : v == 1 ? "small" : "spans");
            same += eq;
            free(C[0][v]), free(C[1][v]);
        }
        free(A), free(B);
    }
    ag__gemm_kernel_256(false);
    printf("  the 512-bit and 256-bit tiles: the same bits in %d of 18 products\n", same);
}

int main(void) {
#ifdef AG_REAL_DOUBLE
    puts("f32 only: skipped");
    return 77;
#else
    if (!ag__packed_gemm_ok()) {
        puts("no AVX2+FMA: the kernel is not used here, skipped");
        return 77;
    }
#ifdef __x86_64__ /* where ag__packed_gemm_ok() can be true */
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f");
#else
    bool avx512 = false;
#endif
    for (int pass = 0; pass < (avx512 ? 2 : 1); pass++) { /* the 512-bit tile, then the 256-bit one */
        ag__gemm_kernel_256(pass == 1 || !avx512);
        printf("%s tile:\n", pass == 1 || !avx512 ? "256-bit" : "512-bit");
        test_sizes();
        test_bits();
        test_blocked();
        test_blocked_bits();
        test_small();
        test_spans();
    }
    if (avx512) test_tiles_agree();
    else puts("no AVX-512: the 512-bit tile is not used here, not compared");
    ag_shutdown();
    return check_summary("gemm_kernel");
#endif
}
