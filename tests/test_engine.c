#define _POSIX_C_SOURCE 200809L /* open_memstream */
/* test_engine.c - the tape, the arena and the error paths: gradients
 * accumulate, no-grad records nothing, marks rewind, a fixed-shape training
 * step allocates nothing after warm-up, misuse names the caller's line, and
 * the gradient check fails wrong, NaN and infinite gradients. */
#include "check.h"
#include "fatal.h"
#include "attngrad.h"
#include "../graph/internal.h" /* ag__param_bytes_limit */
#include "../ops/dropout.h"   /* ag__dropout_copies, ag__dropout_planes */
#include "../ops/mtsa.h"      /* ag__mtsa_attention_groups */

#include <math.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- every heap allocation of the process, counted ---- */
/* Interposing malloc catches allocations outside the library too (BLAS,
 * libc); sanitizers own malloc themselves, so there only the library's own
 * counter is used. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__has_feature)
#define COUNT_LIBC 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
/* Counted from every thread (a GEMM cut into parts calls BLAS on the
 * pool's workers too): atomic counts, and "inside BLAS" per thread - a
 * shared plain counter lost an update when two threads entered BLAS at
 * once, and from then on the BLAS's own mallocs counted as the process's. */
static _Atomic long libc_allocs, blas_allocs;
static _Thread_local int in_blas; /* > 0 while a BLAS routine runs on this thread (the wrappers below) */
static void count_alloc(void) { if (in_blas) blas_allocs++; else libc_allocs++; }
void *malloc(size_t n) { count_alloc(); return __libc_malloc(n); }
void *calloc(size_t n, size_t s) { count_alloc(); return __libc_calloc(n, s); }
void *realloc(void *p, size_t n) { count_alloc(); return __libc_realloc(p, n); }

/* The BLAS routines the engine calls, wrapped so that what the BLAS itself
 * allocates is counted apart: OpenBLAS 0.3.21's small-matrix sgemm kernel
 * for SkylakeX/Cooper Lake (which it also picks on AMD Zen 4) mallocs a
 * buffer on every call.  That is the BLAS's choice on that CPU, not an
 * allocation of ours; the test reports it and holds the rest of the process
 * to zero. */
#include <cblas.h>
#include <dlfcn.h>
#ifndef OPENBLAS_VERSION
typedef int blasint; /* another CBLAS (-Dblas=cblas): the reference header's int */
#endif
#define BLAS_WRAP(name, params, args)                                              \
    void name params {                                                            \
        static void(*real) params;                                                \
        if (!real) *(void **)&real = dlsym(RTLD_NEXT, #name);                     \
        in_blas++;                                                                \
        real args;                                                                \
        in_blas--;                                                                \
    }
#define GEMM_PARAMS(T)                                                                              \
    (const enum CBLAS_ORDER o, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,        \
     const blasint M, const blasint N, const blasint K, const T alpha, const T *A, const blasint lda, \
     const T *B, const blasint ldb, const T beta, T *C, const blasint ldc)
#define GEMV_PARAMS(T)                                                                             \
    (const enum CBLAS_ORDER o, const enum CBLAS_TRANSPOSE t, const blasint M, const blasint N,     \
     const T alpha, const T *A, const blasint lda, const T *x, const blasint incx, const T beta, T *y, \
     const blasint incy)
#define GER_PARAMS(T)                                                                             \
    (const enum CBLAS_ORDER o, const blasint M, const blasint N, const T alpha, const T *x,       \
     const blasint incx, const T *y, const blasint incy, T *A, const blasint lda)
BLAS_WRAP(cblas_sgemm, GEMM_PARAMS(float), (o, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
BLAS_WRAP(cblas_dgemm, GEMM_PARAMS(double), (o, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
BLAS_WRAP(cblas_sgemv, GEMV_PARAMS(float), (o, t, M, N, alpha, A, lda, x, incx, beta, y, incy))
BLAS_WRAP(cblas_dgemv, GEMV_PARAMS(double), (o, t, M, N, alpha, A, lda, x, incx, beta, y, incy))
BLAS_WRAP(cblas_sger, GER_PARAMS(float), (o, M, N, alpha, x, incx, y, incy, A, lda))
BLAS_WRAP(cblas_dger, GER_PARAMS(double), (o, M, N, alpha, x, incx, y, incy, A, lda))
#else
#define COUNT_LIBC 0
static long libc_allocs, blas_allocs;
#endif

/* ---- fatal errors caught for inspection ---- */
static void test_accumulation(void) {
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 1, (int[]){3});
    for (int i = 0; i < 3; i++) w->data[i] = (ag_real)(i + 1);
    /* loss = sum(w*w) + sum(3w): dL/dw = 2w + 3, with w used in two places */
    ag_tensor *loss = ag_add(ag_sum(ag_mul(w, w)), ag_sum(ag_mul_scalar(w, 3)));
    ag_backward(loss);
    for (int i = 0; i < 3; i++) CHECK_NEAR(w->grad[i], 2 * (i + 1) + 3, 0, 1e-6);
    ag_step_end();
    /* A second step without zeroing accumulates, as in PyTorch. */
    ag_backward(ag_sum(w));
    for (int i = 0; i < 3; i++) CHECK_NEAR(w->grad[i], 2 * (i + 1) + 4, 0, 1e-6);
    ag_params_zero_grad(&ps);
    CHECK(w->grad[0] == 0);
    ag_step_end();
    /* backward twice on one retained graph: intermediates are rebuilt,
     * leaves add up (test_lifetime: without retain it is refused) */
    ag_tensor *h = ag_tanh(w);
    ag_tensor *l2 = ag_sum(h);
    ag_backward_retain(l2);
    double g1 = w->grad[1];
    ag_backward(l2);
    CHECK_NEAR(w->grad[1], 2 * g1, 0, 1e-6);
    ag_step_end();
    ag_params_free(&ps);
}

/* ag_lerp against the composition it stands for, wired as MTSA's fusion
 * gate H + g (v - H) with g made from H and v (so H's and v's gradients
 * also come from another op): the same loss and every gradient, bit for
 * bit, in either precision. */
static void gate_run(bool fused, ag_real out[4][24]) {
    ag_params ps = {0};
    ag_tensor *H = ag_param(&ps, "H", 2, (int[]){4, 6}), *v = ag_param(&ps, "v", 2, (int[]){4, 6});
    ag_rng r;
    ag_rng_seed(&r, 7);
    for (int i = 0; i < 24; i++) H->data[i] = (ag_real)(2 * ag_rng_uniform(&r) - 1), v->data[i] = (ag_real)ag_rng_normal(&r);
    ag_tensor *g = ag_sigmoid(ag_mul(ag_add(H, v), ag_tanh(v)));
    ag_tensor *y = fused ? ag_lerp(H, v, g) : ag_add(H, ag_mul(g, ag_sub(v, H)));
    ag_tensor *loss = ag_sum(ag_mul(y, ag_exp(y)));
    ag_backward(loss);
    memcpy(out[0], y->data, sizeof out[0]);
    memcpy(out[1], H->grad, sizeof out[1]);
    memcpy(out[2], v->grad, sizeof out[2]);
    out[3][0] = ag_item(loss);
    ag_step_end();
    ag_params_free(&ps);
}

static void test_lerp_is_the_composition(void) {
    ag_real fused[4][24], composed[4][24];
    gate_run(true, fused);
    gate_run(false, composed);
    CHECK(memcmp(fused[0], composed[0], sizeof fused[0]) == 0, "ag_lerp's values differ from the composition's");
    CHECK(memcmp(fused[1], composed[1], sizeof fused[1]) == 0, "ag_lerp's gradient of a differs from the composition's");
    CHECK(memcmp(fused[2], composed[2], sizeof fused[2]) == 0, "ag_lerp's gradient of b differs from the composition's");
    CHECK(fused[3][0] == composed[3][0], "losses %.17g and %.17g", (double)fused[3][0], (double)composed[3][0]);
}

/* ag__dropout_copies against the ag_dropout calls it stands for, stacked
 * by a concat and reshape, then through one loss; x also used after them
 * (x_again: their backward adds to a gradient already there) or not (it
 * stores).  Values, x's gradient and the rng's state after, bit for bit. */
enum { COPIES = 4, CROWS = 8, CCOLS = 64, CX = CROWS * CCOLS };
static void copies_run(bool fused, bool x_again, ag_real y_out[COPIES * CX], ag_real gx[CX], ag_rng *after) {
    ag_params ps = {0};
    ag_tensor *x = ag_param(&ps, "x", 2, (int[]){CROWS, CCOLS});
    ag_rng r;
    ag_rng_seed(&r, 3);
    for (int i = 0; i < CX; i++) x->data[i] = (ag_real)(4 * ag_rng_uniform(&r) - 2);
    ag_rng_seed(&r, 11);
    ag_tensor *y;
    if (fused) y = ag__dropout_copies(x, COPIES, 0.7, true, &r);
    else {
        ag_tensor *calls[COPIES];
        for (int c = 0; c < COPIES; c++) calls[c] = ag_dropout(x, 0.7, true, &r);
        y = ag_reshape(ag_concat(calls, COPIES, 0), 3, (int[]){COPIES, CROWS, CCOLS});
    }
    *after = r;
    /* a weight per element of each plane: the planes' gradients differ, and
     * the order they are summed in shows in the bits */
    ag_tensor *w = ag_tensor_new(3, (int[]){COPIES, CROWS, CCOLS});
    ag_rng_seed(&r, 5);
    for (int i = 0; i < COPIES * CX; i++) w->data[i] = (ag_real)(2 * ag_rng_uniform(&r) - 1);
    ag_tensor *loss = ag_sum(ag_exp(ag_mul(y, w)));
    if (x_again) loss = ag_add(loss, ag_sum(ag_mul(x, x)));
    ag_backward(loss);
    memcpy(y_out, y->data, COPIES * CX * sizeof *y_out);
    memcpy(gx, x->grad, CX * sizeof *gx);
    ag_step_end();
    ag_params_free(&ps);
}

static void test_dropout_copies_are_the_calls(void) {
    for (int x_again = 0; x_again < 2; x_again++) {
        ag_real y[2][COPIES * CX], gx[2][CX];
        ag_rng after[2];
        copies_run(true, x_again, y[0], gx[0], &after[0]);
        copies_run(false, x_again, y[1], gx[1], &after[1]);
        CHECK(memcmp(y[0], y[1], sizeof y[0]) == 0, "x_again %d: the copies' values differ from the calls'", x_again);
        CHECK(memcmp(gx[0], gx[1], sizeof gx[0]) == 0, "x_again %d: x's gradient differs from the calls'", x_again);
        CHECK(memcmp(&after[0], &after[1], sizeof after[0]) == 0, "x_again %d: the rng's state differs after", x_again);
        int dropped = 0, same = 0; /* the masks are there, and are not one mask four times */
        for (int i = 0; i < CX; i++) {
            dropped += y[0][i] == 0;
            same += (y[0][i] == 0) == (y[0][CX + i] == 0);
        }
        CHECK(dropped > 0 && same < CX, "x_again %d: %d of %d dropped in plane 0, %d alike in plane 1", x_again,
              dropped, CX, same);
    }
}

/* ag__dropout_planes against ag_dropout on each plane's slice, the calls
 * drawing from the rng the op's draws came from (ag__dropout_draws), in
 * plane order, stacked back; through one loss, x used after or not.  Two
 * stacks: [G, 8, 64] (a plane's rows 8) and [G, 512] (a plane one row).
 * Values, x's gradient and the rng's state after, bit for bit. */
enum { PLANES = 3, PX = 512 };
static void planes_run(bool fused, bool x_again, int ndim, ag_real y_out[PLANES * PX], ag_real gx[PLANES * PX],
                       ag_rng *after) {
    int shape[3] = {PLANES, ndim == 3 ? 8 : PX, 64};
    ag_params ps = {0};
    ag_tensor *x = ag_param(&ps, "x", ndim, shape);
    ag_rng r;
    ag_rng_seed(&r, 3);
    for (int i = 0; i < PLANES * PX; i++) x->data[i] = (ag_real)(4 * ag_rng_uniform(&r) - 2);
    ag_rng_seed(&r, 11);
    ag_tensor *y;
    if (fused) {
        uint64_t draws[PLANES];
        ag__dropout_draws(&r, true, 0.7, draws, PLANES);
        y = ag__dropout_planes(x, 0.7, true, draws);
    } else {
        ag_tensor *calls[PLANES];
        for (int g = 0; g < PLANES; g++)
            calls[g] = ag_dropout(ag_reshape(ag_slice(x, 0, g, g + 1), ndim - 1, shape + 1), 0.7, true, &r);
        y = ag_reshape(ag_concat(calls, PLANES, 0), ndim, shape);
    }
    *after = r;
    ag_tensor *w = ag_tensor_new(ndim, shape); /* a weight an element: every gradient differs */
    ag_rng_seed(&r, 5);
    for (int i = 0; i < PLANES * PX; i++) w->data[i] = (ag_real)(2 * ag_rng_uniform(&r) - 1);
    ag_tensor *loss = ag_sum(ag_exp(ag_mul(y, w)));
    if (x_again) loss = ag_add(loss, ag_sum(ag_mul(x, x)));
    ag_backward(loss);
    memcpy(y_out, y->data, PLANES * PX * sizeof *y_out);
    memcpy(gx, x->grad, PLANES * PX * sizeof *gx);
    ag_step_end();
    ag_params_free(&ps);
}

static void test_dropout_planes_are_the_calls(void) {
    for (int ndim = 2; ndim <= 3; ndim++)
        for (int x_again = 0; x_again < 2; x_again++) {
            ag_real y[2][PLANES * PX], gx[2][PLANES * PX];
            ag_rng after[2];
            planes_run(true, x_again, ndim, y[0], gx[0], &after[0]);
            planes_run(false, x_again, ndim, y[1], gx[1], &after[1]);
            CHECK(memcmp(y[0], y[1], sizeof y[0]) == 0, "%d-D, x_again %d: the planes' values differ from the calls'",
                  ndim, x_again);
            CHECK(memcmp(gx[0], gx[1], sizeof gx[0]) == 0, "%d-D, x_again %d: x's gradient differs from the calls'",
                  ndim, x_again);
            CHECK(memcmp(&after[0], &after[1], sizeof after[0]) == 0, "%d-D, x_again %d: the rng's state differs",
                  ndim, x_again);
            int dropped = 0, same = 0; /* masks there, and plane 1's not plane 0's */
            for (int i = 0; i < PX; i++) {
                dropped += y[0][i] == 0;
                same += (y[0][i] == 0) == (y[0][PX + i] == 0);
            }
            CHECK(dropped > 0 && same < PX, "%d-D, x_again %d: %d of %d dropped in plane 0, %d alike in plane 1", ndim,
                  x_again, dropped, PX, same);
        }
}

/* A grouped dense layer (W [G, in, out], one op) against G separate
 * ag_dense calls on copies of its planes: the same outputs and gradients
 * of x, W and the bias, bit for bit, in either precision.  x's and dY's
 * zero rows (a row mask, padding) are 20 and 10 of 80 in groups 0 and 2,
 * none in group 1, so packed and plain groups sit side by side. */
enum { GL_G = 3, GL_ROWS = 80, GL_IN = 16, GL_OUT = 17 };
typedef struct {
    ag_real y[GL_G * GL_ROWS * GL_OUT], dx[GL_G * GL_ROWS * GL_IN], dw[GL_G * GL_IN * GL_OUT], db[GL_G * GL_OUT];
} grouped_results;

/* loss = sum(m y^2) for y = dense(m x): dY = 2 m y, 0 on the masked rows. */
static ag_tensor *grouped_layer_loss(ag_tensor *x, ag_tensor *w, ag_tensor *b, ag_tensor *m, ag_act act,
                                     ag_tensor **y) {
    *y = ag_dense(ag_mul(x, m), w, b, act);
    return ag_sum(ag_mul(ag_mul(*y, *y), m));
}

static void grouped_dense_run(bool grouped, ag_act act, bool bias, grouped_results *out) {
    enum { X = GL_ROWS * GL_IN, W = GL_IN * GL_OUT, Y = GL_ROWS * GL_OUT };
    static ag_real xs[GL_G * X], ws[GL_G * W], bs[GL_G * GL_OUT], ms[GL_G * GL_ROWS];
    ag_rng r;
    ag_rng_seed(&r, 11);
    for (int i = 0; i < GL_G * X; i++) xs[i] = (ag_real)(2 * ag_rng_uniform(&r) - 1);
    for (int i = 0; i < GL_G * W; i++) ws[i] = (ag_real)(0.5 * ag_rng_normal(&r));
    for (int i = 0; i < GL_G * GL_OUT; i++) bs[i] = (ag_real)ag_rng_normal(&r);
    for (int i = 0; i < GL_G * GL_ROWS; i++) {
        int g = i / GL_ROWS, row = i % GL_ROWS;
        ms[i] = (g == 0 && row >= 50 && row < 70) || (g == 2 && row % 8 == 3) ? 0 : 1;
    }
    ag_params ps = {0};
    if (grouped) {
        ag_tensor *x = ag_param(&ps, "x", 3, (int[]){GL_G, GL_ROWS, GL_IN});
        ag_tensor *w = ag_param(&ps, "w", 3, (int[]){GL_G, GL_IN, GL_OUT});
        ag_tensor *b = bias ? ag_param(&ps, "b", 2, (int[]){GL_G, GL_OUT}) : NULL, *y;
        memcpy(x->data, xs, sizeof xs);
        memcpy(w->data, ws, sizeof ws);
        if (b) memcpy(b->data, bs, sizeof bs);
        ag_tensor *m = ag_tensor_from(ms, 3, (int[]){GL_G, GL_ROWS, 1});
        ag_backward(grouped_layer_loss(x, w, b, m, act, &y));
        memcpy(out->y, y->data, sizeof out->y);
        memcpy(out->dx, x->grad, sizeof out->dx);
        memcpy(out->dw, w->grad, sizeof out->dw);
        if (b) memcpy(out->db, b->grad, sizeof out->db);
    } else {
        ag_tensor *x[GL_G], *w[GL_G], *b[GL_G], *y[GL_G], *loss = NULL;
        for (int g = 0; g < GL_G; g++) {
            char xn[8], wn[8], bn[8];
            snprintf(xn, sizeof xn, "x%d", g), snprintf(wn, sizeof wn, "w%d", g), snprintf(bn, sizeof bn, "b%d", g);
            x[g] = ag_param(&ps, xn, 2, (int[]){GL_ROWS, GL_IN});
            w[g] = ag_param(&ps, wn, 2, (int[]){GL_IN, GL_OUT});
            b[g] = bias ? ag_param(&ps, bn, 1, (int[]){GL_OUT}) : NULL;
            memcpy(x[g]->data, xs + g * X, sizeof(ag_real) * X);
            memcpy(w[g]->data, ws + g * W, sizeof(ag_real) * W);
            if (b[g]) memcpy(b[g]->data, bs + g * GL_OUT, sizeof(ag_real) * GL_OUT);
            ag_tensor *m = ag_tensor_from(ms + g * GL_ROWS, 2, (int[]){GL_ROWS, 1});
            ag_tensor *l = grouped_layer_loss(x[g], w[g], b[g], m, act, &y[g]);
            loss = loss ? ag_add(loss, l) : l; /* dL/dl is 1 whatever the order: each group's gradients alone */
        }
        ag_backward(loss);
        for (int g = 0; g < GL_G; g++) {
            memcpy(out->y + g * Y, y[g]->data, sizeof(ag_real) * Y);
            memcpy(out->dx + g * X, x[g]->grad, sizeof(ag_real) * X);
            memcpy(out->dw + g * W, w[g]->grad, sizeof(ag_real) * W);
            if (b[g]) memcpy(out->db + g * GL_OUT, b[g]->grad, sizeof(ag_real) * GL_OUT);
        }
    }
    ag_step_end();
    ag_params_free(&ps);
}

static void test_grouped_dense_is_separate_layers(void) {
    static grouped_results one, sep;
    const struct { ag_act act; bool bias; } runs[] = {{AG_ACT_ELU, true}, {AG_ACT_TANH, false}, {AG_ACT_NONE, true}};
    for (size_t k = 0; k < sizeof runs / sizeof *runs; k++) {
        memset(&one, 0, sizeof one);
        memset(&sep, 0, sizeof sep);
        grouped_dense_run(true, runs[k].act, runs[k].bias, &one);
        grouped_dense_run(false, runs[k].act, runs[k].bias, &sep);
        CHECK(memcmp(one.y, sep.y, sizeof one.y) == 0, "act %d: grouped ag_dense's values differ", (int)runs[k].act);
        CHECK(memcmp(one.dx, sep.dx, sizeof one.dx) == 0, "act %d: the gradients of x differ", (int)runs[k].act);
        CHECK(memcmp(one.dw, sep.dw, sizeof one.dw) == 0, "act %d: the gradients of W differ", (int)runs[k].act);
        CHECK(memcmp(one.db, sep.db, sizeof one.db) == 0, "act %d: the bias gradients differ", (int)runs[k].act);
    }
}

/* MTSA's G heads in one op against G ag_mtsa_attention calls on copies of
 * their slices: the same outputs and gradients of r, s and v, bit for
 * bit, in either precision (the op cases' difference holds the values and
 * the gradients only to roundoff).  Heads past and future as models/mtsa.c
 * makes them, lengths 6, 1, 0 and 4 of N = 6; loss = sum(H^2), so dH = 2H
 * whatever order the sum adds in. */
enum { MG_G = 2, MG_B = 4, MG_N = 6, MG_DH = 5 };
enum { MG_R = MG_B * MG_N * MG_N, MG_S = MG_B * MG_N * MG_DH };
typedef struct {
    ag_real h[MG_G * MG_S], dr[MG_G * MG_R], ds[MG_G * MG_S], dv[MG_G * MG_S];
} mtsa_heads_results;

static void mtsa_heads_run(bool grouped, ag_mtsa_score score, mtsa_heads_results *out) {
    static const int32_t len[MG_B] = {6, 1, 0, 4};
    static ag_real rs[MG_G * MG_R], ss[MG_G * MG_S], vs[MG_G * MG_S], ms[MG_G * MG_N * MG_N];
    ag_rng rng;
    ag_rng_seed(&rng, 5);
    for (int i = 0; i < MG_G * MG_R; i++) rs[i] = (ag_real)(4 * ag_rng_uniform(&rng) - 2);
    for (int i = 0; i < MG_G * MG_S; i++) ss[i] = (ag_real)(2 * ag_rng_uniform(&rng) - 1);
    for (int i = 0; i < MG_G * MG_S; i++) vs[i] = (ag_real)(2 * ag_rng_uniform(&rng) - 1);
    for (int g = 0; g < MG_G; g++)
        for (int q = 0; q < MG_N; q++)
            for (int k = 0; k < MG_N; k++) ms[(g * MG_N + q) * MG_N + k] = g < MG_G / 2 ? k < q : k > q;
    ag_params ps = {0};
    if (grouped) {
        ag_tensor *r = ag_param(&ps, "r", 4, (int[]){MG_G, MG_B, MG_N, MG_N});
        ag_tensor *s = ag_param(&ps, "s", 4, (int[]){MG_G, MG_B, MG_N, MG_DH});
        ag_tensor *v = ag_param(&ps, "v", 4, (int[]){MG_G, MG_B, MG_N, MG_DH});
        memcpy(r->data, rs, sizeof rs), memcpy(s->data, ss, sizeof ss), memcpy(v->data, vs, sizeof vs);
        ag_tensor *m = ag_tensor_from(ms, 3, (int[]){MG_G, MG_N, MG_N});
        ag_tensor *h = ag__mtsa_attention_groups(r, s, v, m, len, score);
        ag_backward(ag_sum(ag_mul(h, h)));
        memcpy(out->h, h->data, sizeof out->h);
        memcpy(out->dr, r->grad, sizeof out->dr), memcpy(out->ds, s->grad, sizeof out->ds);
        memcpy(out->dv, v->grad, sizeof out->dv);
    } else {
        ag_tensor *r[MG_G], *s[MG_G], *v[MG_G], *h[MG_G], *loss = NULL;
        for (int g = 0; g < MG_G; g++) {
            char rn[8], sn[8], vn[8];
            snprintf(rn, sizeof rn, "r%d", g), snprintf(sn, sizeof sn, "s%d", g), snprintf(vn, sizeof vn, "v%d", g);
            r[g] = ag_param(&ps, rn, 3, (int[]){MG_B, MG_N, MG_N});
            s[g] = ag_param(&ps, sn, 3, (int[]){MG_B, MG_N, MG_DH});
            v[g] = ag_param(&ps, vn, 3, (int[]){MG_B, MG_N, MG_DH});
            memcpy(r[g]->data, rs + g * MG_R, sizeof(ag_real) * MG_R);
            memcpy(s[g]->data, ss + g * MG_S, sizeof(ag_real) * MG_S);
            memcpy(v[g]->data, vs + g * MG_S, sizeof(ag_real) * MG_S);
            ag_tensor *m = ag_tensor_from(ms + g * MG_N * MG_N, 2, (int[]){MG_N, MG_N});
            h[g] = ag_mtsa_attention(r[g], s[g], v[g], m, len, score);
            ag_tensor *l = ag_sum(ag_mul(h[g], h[g]));
            loss = loss ? ag_add(loss, l) : l;
        }
        ag_backward(loss);
        for (int g = 0; g < MG_G; g++) {
            memcpy(out->h + g * MG_S, h[g]->data, sizeof(ag_real) * MG_S);
            memcpy(out->dr + g * MG_R, r[g]->grad, sizeof(ag_real) * MG_R);
            memcpy(out->ds + g * MG_S, s[g]->grad, sizeof(ag_real) * MG_S);
            memcpy(out->dv + g * MG_S, v[g]->grad, sizeof(ag_real) * MG_S);
        }
    }
    ag_step_end();
    ag_params_free(&ps);
}

static void test_mtsa_heads_are_separate_calls(void) {
    static mtsa_heads_results one, sep;
    const ag_mtsa_score scores[] = {AG_MTSA_LOG_SIGMOID, AG_MTSA_IDENTITY};
    for (int k = 0; k < 2; k++) {
        memset(&one, 0, sizeof one), memset(&sep, 0, sizeof sep);
        mtsa_heads_run(true, scores[k], &one);
        mtsa_heads_run(false, scores[k], &sep);
        CHECK(memcmp(one.h, sep.h, sizeof one.h) == 0, "score %d: the heads' outputs differ", k);
        CHECK(memcmp(one.dr, sep.dr, sizeof one.dr) == 0, "score %d: the gradients of r differ", k);
        CHECK(memcmp(one.ds, sep.ds, sizeof one.ds) == 0, "score %d: the gradients of s differ", k);
        CHECK(memcmp(one.dv, sep.dv, sizeof one.dv) == 0, "score %d: the gradients of v differ", k);
    }
}

/* A bias broadcast over more rows than a part's grain of elements (MPSAN at
 * batch 1024): its column parts once became 0 wide, a division by zero. */
static void test_broadcast_over_many_rows(void) {
    enum { ROWS = 40000, COLS = 3 };
    ag_params ps = {0};
    ag_tensor *x = ag_param(&ps, "x", 2, (int[]){ROWS, COLS});
    ag_tensor *b = ag_param(&ps, "b", 1, (int[]){COLS});
    for (int op = 0; op < 3; op++) {
        ag_params_zero_grad(&ps);
        ag_tensor *y = op == 0 ? ag_add(x, b) : op == 1 ? ag_sub(x, b) : ag_mul(x, b);
        for (int c = 0; c < COLS; c++) b->data[c] = (ag_real)(c + 1);
        ag_backward(ag_sum(y));
        for (int c = 0; c < COLS; c++) /* d/db of sum(x - b) is -ROWS; of sum(x * b), sum of x's column: 0 */
            CHECK(b->grad[c] == (op == 0 ? ROWS : op == 1 ? -ROWS : 0), "op %d: db[%d] = %g", op, c, (double)b->grad[c]);
        CHECK(x->grad[0] == (op < 2 ? 1 : b->data[0]) && x->grad[(int64_t)ROWS * COLS - 1] == (op < 2 ? 1 : b->data[COLS - 1]));
        ag_step_end();
    }
    ag_params_free(&ps);
}

static void test_no_grad_and_marks(void) {
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){2, 2});
    bool was = ag_set_grad_enabled(false);
    ag_tensor *y = ag_exp(w);
    CHECK(!y->requires_grad && y->node == NULL, "no-grad must record nothing");
    ag_set_grad_enabled(was);
    CHECK(ag_is_grad_enabled());
    ag_tensor *z = ag_exp(w);
    CHECK(z->requires_grad && z->node != NULL);
    ag_tensor *c = ag_tensor_fill(2, 1, (int[]){2});
    CHECK(!ag_mul(c, c)->requires_grad, "constants need no grad");

    ag_mark_t m = ag_mark();
    size_t before = ag_memstats().arena_high;
    for (int i = 0; i < 1000; i++) {
        ag_mark_t inner = ag_mark();
        ag_sum(ag_exp(w));
        ag_rewind(inner);
    }
    CHECK(ag_memstats().arena_high - before < 4096, "rewind must reuse memory");
    ag_rewind(m);
    ag_step_end();

    /* the high-water mark starts again from what the step holds: a small
     * step measured after a large one reads its own peak */
    ag_tensor *big = ag_exp(ag_tensor_fill(1, 1, (int[]){1 << 16}));
    (void)big;
    ag_step_end();
    size_t large = ag_memstats().arena_high;
    ag_memstats_reset_high();
    CHECK(ag_memstats().arena_high == 0, "reset between steps: high %zu, want 0", ag_memstats().arena_high);
    ag_sum(ag_exp(w));
    size_t small = ag_memstats().arena_high;
    CHECK(small > 0 && small < 4096 && large >= (1 << 16) * sizeof(ag_real),
          "after the reset the small step's peak: %zu (the large one's %zu)", small, large);
    ag_step_end();
    ag_params_free(&ps);
}

/* A fixed-shape training step: 2-layer MLP, squared error, manual SGD. */
static double train_step(ag_params *ps, const ag_real *x, const ag_real *y) {
    ag_tensor *w1 = ps->items[0], *b1 = ps->items[1], *w2 = ps->items[2], *b2 = ps->items[3];
    ag_tensor *xt = ag_tensor_from(x, 2, (int[]){16, 8});
    ag_tensor *yt = ag_tensor_from(y, 2, (int[]){16, 2});
    ag_tensor *h = ag_tanh(ag_linear(xt, w1, b1));
    ag_tensor *out = ag_linear(h, w2, b2);
    ag_tensor *loss = ag_mean(ag_square(ag_sub(out, yt)));
    ag_params_zero_grad(ps);
    ag_backward(loss);
    for (int i = 0; i < ps->count; i++)
        for (int64_t j = 0; j < ps->items[i]->size; j++) ps->items[i]->data[j] -= (ag_real)0.1 * ps->items[i]->grad[j];
    double l = ag_item(loss);
    ag_step_end();
    return l;
}

static void test_zero_alloc_steady_state(void) {
    ag_params ps = {0};
    ag_rng rng;
    ag_rng_seed(&rng, 7);
    ag_tensor *w1 = ag_param(&ps, "l1.weight", 2, (int[]){8, 32});
    ag_param(&ps, "l1.bias", 1, (int[]){32});
    ag_tensor *w2 = ag_param(&ps, "l2.weight", 2, (int[]){32, 2});
    ag_param(&ps, "l2.bias", 1, (int[]){2});
    for (int64_t i = 0; i < w1->size; i++) w1->data[i] = (ag_real)(ag_rng_uniform(&rng) - 0.5);
    for (int64_t i = 0; i < w2->size; i++) w2->data[i] = (ag_real)(ag_rng_uniform(&rng) - 0.5);
    ag_real x[16 * 8], y[16 * 2];
    for (int i = 0; i < 16 * 8; i++) x[i] = (ag_real)(ag_rng_uniform(&rng) - 0.5);
    for (int i = 0; i < 16 * 2; i++) y[i] = (ag_real)(ag_rng_uniform(&rng) - 0.5);

    double first = train_step(&ps, x, y);
    train_step(&ps, x, y);
    ag_mem_stats s0 = ag_memstats();
    long libc0 = libc_allocs, blas0 = blas_allocs;
    double last = 0;
    for (int i = 0; i < 50; i++) last = train_step(&ps, x, y);
    ag_mem_stats s1 = ag_memstats();
    CHECK(s1.allocs == s0.allocs, "library allocated %lld times in 50 steady steps",
          (long long)(s1.allocs - s0.allocs));
    /* valgrind replaces malloc itself, and then our counter never moves */
    if (COUNT_LIBC && libc0 == 0) printf("note: malloc interposition inactive here; library counter only\n");
    if (COUNT_LIBC && libc0 > 0) CHECK(libc_allocs == libc0, "process called malloc %ld times in 50 steady steps", libc_allocs - libc0);
    if (COUNT_LIBC && blas_allocs > blas0)
        printf("note: the BLAS itself called malloc %ld times in 50 steady steps (its kernel for this CPU)\n",
               blas_allocs - blas0);
    CHECK(last < first, "loss should fall: %g -> %g", first, last);
    ag_params_free(&ps);
}

/* A helper whose (site-stamping) ops sit on another line than its caller's. */
static ag_tensor *helper_square(ag_tensor *x) {
    return ag_mul(x, x);
}

static void test_errors_name_op_shapes_and_line(void) {
    ag_tensor *a = ag_tensor_new(2, (int[]){2, 3});
    ag_tensor *b = ag_tensor_new(2, (int[]){4, 3});
    int line = __LINE__ + 1;
    EXPECT_FATAL(ag_add(a, b), "ag_add", "[2,3]", "[4,3]", "test_engine.c");
    char at[64];
    snprintf(at, sizeof at, "test_engine.c:%d", line);
    CHECK(strstr(fatal_msg, at), "message '%s' lacks the caller's line %s", fatal_msg, at);
    EXPECT_FATAL(ag_matmul(a, a), "ag_matmul", "[2,3]", "inner");
    /* an op called without a stamp ((ag_add) skips the macro), after a
     * stamped one has returned, names no line rather than that one's */
    ag_tensor *t = ag_tanh(a);
    (void)t;
    EXPECT_FATAL((ag_add)(a, b), "ag_add", "[2,3]", "[4,3]");
    CHECK(!strstr(fatal_msg, "(at "), "an unstamped call named a line: '%s'", fatal_msg);
    /* nor after a call that returns no tensor (a statement's stamp) */
    ag_tensor *masks;
    CHECK(ag_mask_batch(&(ag_mask_spec){.dir = AG_MASK_PAST}, 1, 1, 2, (int32_t[]){2}, NULL, &masks) == AG_OK);
    EXPECT_FATAL((ag_add)(a, b), "ag_add", "[2,3]", "[4,3]");
    CHECK(!strstr(fatal_msg, "(at "), "a call after ag_mask_batch named its line: '%s'", fatal_msg);
    ag_params one = {0};
    ag_backward(ag_sum(ag_param(&one, "x", 1, (int[]){1})));
    EXPECT_FATAL((ag_add)(a, b), "ag_add", "[2,3]", "[4,3]");
    CHECK(!strstr(fatal_msg, "(at "), "a call after ag_backward named its line: '%s'", fatal_msg);
    ag_params_free(&one);
    /* sizes no machine holds: a parameter beyond memory is refused by name, a
     * shape whose element count overflows before any allocation */
    ag_params huge = {0};
    EXPECT_FATAL(ag_param(&huge, "embed.weight", 2, (int[]){1 << 30, 1 << 20}), "ag_param", "'embed.weight'",
                 "[1073741824,1048576]", "GiB");
    EXPECT_FATAL(ag_tensor_new(4, (int[]){1 << 30, 1 << 30, 1 << 30, 1 << 30}), "tensor", "more elements");
    CHECK(huge.count == 0);
    /* each fits, the set does not: the one that crosses the line and the largest are named */
    const double unit = 2.0 * sizeof(ag_real) * (1 << 20); /* a [1, 2^20] parameter with its gradient */
    ag__param_bytes_limit = 8.5 * unit;
    ag_param(&huge, "a.weight", 2, (int[]){4, 1 << 20});
    ag_param(&huge, "b.weight", 2, (int[]){3, 1 << 20});
    EXPECT_FATAL(ag_param(&huge, "c.weight", 2, (int[]){2, 1 << 20}), "ag_param", "'c.weight' [2,1048576] brings",
                 "3 parameters to", "largest: 'a.weight' [4,1048576]", "more than this machine's");
    CHECK(huge.count == 2);
    ag_params_free(&huge);
    ag__param_bytes_limit = 0;
    /* step memory beyond what the machine has: refused with both sizes, before any allocation */
    ag__arena_bytes_limit = 512.0 * (1 << 20);
    EXPECT_FATAL(ag__arena_alloc((size_t)1 << 30), "arena", "needs 1.0 GiB more memory", "512 MiB is available",
                 "batch is too large");
    ag__arena_bytes_limit = 0;
    /* ops inside the arguments stamp their own lines; the failing op's is
     * given back before it runs */
    line = __LINE__ + 1;
    EXPECT_FATAL(ag_add(helper_square(a), helper_square(b)), "ag_add", "[2,3]", "[4,3]");
    snprintf(at, sizeof at, "test_engine.c:%d", line);
    CHECK(strstr(fatal_msg, at), "nested call: message '%s' lacks the caller's line %s", fatal_msg, at);
    EXPECT_FATAL(ag_sum_axis(a, 2, false), "ag_sum_axis", "axis 2");
    EXPECT_FATAL(ag_reshape(a, 2, (int[]){4, 2}), "ag_reshape", "[2,3]", "[4,2]");
    EXPECT_FATAL(ag_backward(a), "backward");
    ag_tensor *c = ag_tensor_new(1, (int[]){3});
    c->device = AG_CUDA;
    EXPECT_FATAL(ag_add(a, c), "ag_add", "device");
    ag_tensor *e = ag_tensor_new(2, (int[]){0, 3});
    EXPECT_FATAL(ag_max_axis(e, 0, false), "ag_max_axis", "empty");
    /* an empty sum is 0, not an error */
    ag_tensor *s = ag_sum_axis(e, 0, false);
    CHECK(s->size == 3 && s->data[0] == 0 && s->data[2] == 0);
    ag_params ps = {0};
    ag_param(&ps, "w", 1, (int[]){2});
    EXPECT_FATAL(ag_param(&ps, "w", 1, (int[]){2}), "duplicate", "'w'");
    ag_params_free(&ps);
    ag_step_end();
}

/* A container's memory limit bounds what the process may take, not the
 * machine's memory: read from a fake cgroup folder (v2 names, then v1's). */
static void write_file(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void remove_files(const char *dir, const char *const *names, int n) {
    char path[256];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        remove(path);
    }
    rmdir(dir);
}

static void test_cgroup_memory_limit(void) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ag_cgroup_%d", (int)getpid());
    CHECK(mkdir(dir, 0700) == 0, "cannot make %s", dir);
    ag__cgroup_dir = dir;
    ag__mem_room machine = {0};
    {
        const char *saved = ag__cgroup_dir;
        ag__cgroup_dir = "/nonexistent";
        machine = ag__memory_room(true);
        ag__cgroup_dir = saved;
    }
    /* v2: a 600 MiB limit, 140 MiB charged of which 40 are reclaimable cache: 500 left */
    write_file(dir, "memory.max", "629145600\n");
    write_file(dir, "memory.current", "146800640\n"); /* 140 MiB, 40 of them reclaimable cache */
    write_file(dir, "memory.stat", "anon 10485760\ninactive_file 41943040\nactive_file 8388608\n");
    ag__mem_room r = ag__memory_room(true);
    if (machine.total > 600.0 * (1 << 20)) {
        CHECK(r.total == 600.0 * (1 << 20) && strstr(r.total_what, "cgroup"), "total %g (%s)", r.total, r.total_what);
        CHECK(r.free == 500.0 * (1 << 20) && strstr(r.free_what, "cgroup"), "free %g (%s)", r.free, r.free_what);
        EXPECT_FATAL(ag__arena_alloc((size_t)1 << 30), "arena", "needs 1.0 GiB more memory",
                     "500 MiB is left under its cgroup's memory limit");
        /* a parameter against the limit: [80, 2^20] takes 640 MiB with its gradient, over 600 */
        ag_params ps = {0};
        EXPECT_FATAL(ag_param(&ps, "big.weight", 2, (int[]){80, 1 << 20}), "ag_param", "'big.weight'",
                     "more than its cgroup's memory limit (600.0 MiB)");
        CHECK(ps.count == 0);
        ag_params_free(&ps);
    }
    /* "max" (v2) and v1's 2^63 rounded to a page mean no limit: the machine's */
    write_file(dir, "memory.max", "max\n");
    r = ag__memory_room(true);
    CHECK(r.total == machine.total && !strstr(r.total_what, "cgroup"), "v2 'max' read as %g (%s)", r.total,
          r.total_what);
    remove_files(dir, (const char *[]){"memory.max", "memory.current", "memory.stat"}, 3);
    CHECK(mkdir(dir, 0700) == 0, "cannot make %s", dir);
    write_file(dir, "memory.limit_in_bytes", "9223372036854771712\n");
    write_file(dir, "memory.usage_in_bytes", "1399468032\n");
    r = ag__memory_room(true);
    CHECK(r.total == machine.total && !strstr(r.free_what, "cgroup"), "v1 unlimited read as %g",
          r.total);
    /* v1 with a limit */
    write_file(dir, "memory.limit_in_bytes", "419430400\n"); /* 400 MiB */
    write_file(dir, "memory.usage_in_bytes", "524288000\n"); /* over it: nothing left, not a negative size */
    r = ag__memory_room(true);
    if (machine.total > 400.0 * (1 << 20))
        CHECK(r.total == 400.0 * (1 << 20) && r.free == 0, "v1 limit read as %g, %g left", r.total, r.free);
    remove_files(dir, (const char *[]){"memory.limit_in_bytes", "memory.usage_in_bytes"}, 2);
    ag__cgroup_dir = NULL;
    /* this process's own cgroups, whatever they are: a sane reading */
    r = ag__memory_room(true);
    CHECK(r.total > 0 && r.free >= 0 && r.free <= r.total * 1.01 + 1, "room %g of %g", r.free, r.total);
    ag_step_end();
}

/* The profiler charges each op to the line that called it, forward and
 * backward, and leaves ops alone when stopped. */
static void test_profiler_names_sites(void) {
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){3, 2});
    ag_real xs[12];
    for (int i = 0; i < 12; i++) xs[i] = (ag_real)(i % 5) - 2;
    ag_tensor *x = ag_tensor_from(xs, 2, (int[]){4, 3});
    for (int i = 0; i < 6; i++) w->data[i] = (ag_real)i / 4;
    ag_profile_start();
    int line = __LINE__ + 1;
    ag_tensor *y = ag_tanh(ag_linear(x, w, NULL));
    ag_backward(ag_sum(y));
    ag_profile_stop();
    ag_step_end();
    x = ag_tensor_from(xs, 2, (int[]){4, 3}); /* x died with its step */
    ag_tensor *z = ag_sum(ag_linear(x, w, NULL)); /* stopped: not counted */
    (void)z;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ag_profile_report(f, 1, 0);
    fclose(f);
    char site[64];
    snprintf(site, sizeof site, "test_engine.c:%d", line);
    const char *lin = strstr(buf, "ag_linear"), *tanh = strstr(buf, "ag_tanh");
    CHECK(lin && tanh, "report lacks the ops:\n%s", buf);
    CHECK(strstr(buf, site) != NULL, "report lacks the call site %s:\n%s", site, buf);
    /* one linear call (the second ran with the profiler stopped) */
    const char *row = lin ? strstr(lin, site) : NULL;
    double calls = 0;
    CHECK(row && sscanf(row + strlen(site), "%lf", &calls) == 1 && calls == 1, "linear calls %g:\n%s", calls, buf);
    free(buf);
    ag_step_end();
    ag_params_free(&ps);
}

/* Every interval of a profile is charged once: an op called without a
 * stamp ((ag_tanh)(x) skips the call-site macro) as a step's first op is
 * charged from the step's start, not from the previous step's last op, so
 * forward + backward never exceed the wall time (before the fix the
 * previous step's backward, a 256^3 product's, was charged to it again). */
static void test_profiler_charges_once(void) {
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){256, 256});
    for (int64_t i = 0; i < w->size; i++) w->data[i] = (ag_real)((i % 7) - 3) / 16;
    ag_profile_start();
    for (int step = 0; step < 3; step++) {
        ag_tensor *x = ag_tensor_fill(0.25, 2, (int[]){256, 256});
        ag_tensor *first = (ag_tanh)(x); /* no stamp */
        ag_backward(ag_sum(ag_matmul(first, w)));
        ag_step_end();
    }
    ag_profile_stop();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ag_profile_report(f, 3, 0);
    fclose(f);
    int steps = 0;
    double wall = 0, fwd = 0, bwd = 0, outside = -1;
    int got = sscanf(buf, "ops per step (%d steps, %lf ms wall each): forward %lf ms, backward %lf ms, outside ops %lf ms",
                     &steps, &wall, &fwd, &bwd, &outside);
    CHECK(got == 5 && steps == 3, "report's first line:\n%s", buf);
    CHECK(outside >= 0 && fwd + bwd <= wall + 0.15, "forward %.1f + backward %.1f ms > wall %.1f ms:\n%s", fwd, bwd,
          wall, buf);
    free(buf);
    ag_params_free(&ps);
}

/* Dropout's mask: values are 0 or x/keep, the kept fraction is keep within
 * 5 sigma, neighbours are independent (pairs kept ~ keep^2: element order
 * interleaves the generator's lanes and halves), one rng draw per call, and
 * the same mask for any thread count. */
static void test_dropout_mask_statistics(void) {
    const int64_t n = 1 << 20;
    const double keep = 0.7;
    ag_tensor *x = ag_tensor_fill(1, 1, (int[]){(int)n});
    ag_rng rng, copy;
    ag_rng_seed(&rng, 5);
    copy = rng;
    ag_tensor *y = ag_dropout(x, keep, true, &rng);
    (void)ag_rng_next(&copy);
    CHECK(!memcmp(&rng, &copy, sizeof rng), "dropout took more than one draw from the rng");
    int64_t kept = 0, pairs = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        bool k = y->data[i] != 0;
        bad += k && fabs((double)y->data[i] - 1 / keep) > 1e-6;
        kept += k;
        pairs += k && i + 1 < n && y->data[i + 1] != 0;
    }
    double sigma = sqrt(n * keep * (1 - keep)), want_pairs = (double)(n - 1) * keep * keep;
    CHECK(bad == 0, "%lld kept values are not x/keep", (long long)bad);
    CHECK(fabs((double)kept - n * keep) < 5 * sigma, "kept %lld of %lld (want %.0f +- %.0f)", (long long)kept,
          (long long)n, n * keep, 5 * sigma);
    CHECK(fabs((double)pairs - want_pairs) < 5 * sqrt(want_pairs), "neighbour pairs kept %lld, want ~%.0f",
          (long long)pairs, want_pairs);
    ag_tensor *y2 = ag_dropout(x, keep, true, &rng);
    CHECK(memcmp(y->data, y2->data, (size_t)n * sizeof(ag_real)) != 0, "two calls drew the same mask");
    int threads = ag_get_num_threads();
    ag_set_num_threads(threads == 1 ? 2 : 1);
    ag_rng_seed(&rng, 5);
    ag_tensor *y3 = ag_dropout(x, keep, true, &rng);
    CHECK(!memcmp(y->data, y3->data, (size_t)n * sizeof(ag_real)), "the mask depends on the thread count");
    ag_set_num_threads(threads);
    ag_step_end();
}

/* The mask is keyed by global row: a process holding rows 2..3 of a batch
 * (ag_set_dropout_row_base(2)) drops what one process drops on those rows,
 * also at a narrower padded width: element (t, j) of a [B,N,d] row keeps
 * its bit whatever N is. */
static void test_dropout_keyed_by_row(void) {
    enum { B = 4, N = 6, D = 5, N2 = 3 };
    ag_tensor *x = ag_tensor_fill(1, 3, (int[]){B, N, D}), *x2 = ag_tensor_fill(1, 3, (int[]){2, N2, D});
    ag_rng rng, r2;
    ag_rng_seed(&rng, 9);
    r2 = rng;
    ag_tensor *y = ag_dropout(x, 0.5, true, &rng);
    int64_t old = ag_set_dropout_row_base(2);
    ag_tensor *y2 = ag_dropout(x2, 0.5, true, &r2);
    ag_set_dropout_row_base(old);
    int bad = 0;
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < N2; t++)
            for (int j = 0; j < D; j++)
                bad += y2->data[(b * N2 + t) * D + j] != y->data[((b + 2) * N + t) * D + j];
    CHECK(bad == 0, "rows 2..3 at width %d got other masks than in the whole batch (%d elements differ)", N2, bad);
    CHECK(!memcmp(&rng, &r2, sizeof rng), "the draws taken depend on the rows held");
    ag_step_end();
}

/* ---- the gradient check itself: it must fail what is wrong ---- */

static ag_tensor *square_fn(void *p) { return ag_mul((ag_tensor *)p, (ag_tensor *)p); }

/* x * c with c a copy of x's values made outside the tape: backward says
 * d/dx = x, the function's true derivative is 2x. */
static ag_tensor *hidden_square_fn(void *p) {
    ag_tensor *x = p, *c = ag_tensor_new(x->ndim, x->shape);
    memcpy(c->data, x->data, (size_t)x->size * sizeof(ag_real));
    return ag_mul(x, c);
}

static ag_tensor *log_fn(void *p) { return ag_log((ag_tensor *)p); }
static ag_tensor *sqrt_fn(void *p) { return ag_sqrt((ag_tensor *)p); }

static void test_gradcheck_fails_what_is_wrong(void) {
    ag_params ps = {0};
    ag_tensor *x = ag_param(&ps, "x", 1, (int[]){4});
    for (int i = 0; i < 4; i++) x->data[i] = 0.5 + 0.25 * i;
    ag_gradcheck_result r = ag_gradcheck(square_fn, x, &x, 1, NULL);
    CHECK(r.ok && r.checked == 4, "a right gradient passes (rel err %g)", r.max_rel_err);
    r = ag_gradcheck(hidden_square_fn, x, &x, 1, NULL);
    CHECK(!r.ok, "a wrong gradient fails");
    x->data[2] = -1; /* log(-1) = NaN: the projected output is NaN, so is every difference */
    r = ag_gradcheck(log_fn, x, &x, 1, NULL);
    CHECK(!r.ok && isinf(r.max_rel_err), "a NaN output fails (rel %g)", r.max_rel_err);
    x->data[2] = 0; /* d sqrt(x) at 0 is inf */
    r = ag_gradcheck(sqrt_fn, x, &x, 1, NULL);
    CHECK(!r.ok && r.worst_index == 2, "an infinite gradient fails (worst %lld)", (long long)r.worst_index);
    ag_step_end();
    ag_params_free(&ps);
}

/* sum(x²) + 1e-12 sum(y): y's gradient, 1e-12, is under what the check
 * resolves, so a wrong one would pass; max_grad (over both inputs) hides
 * that, input_max_grad shows it. */
static ag_tensor *loud_and_quiet_fn(void *p) {
    ag_tensor **xy = p;
    return ag_add(ag_sum(ag_mul(xy[0], xy[0])), ag_mul_scalar(ag_sum(xy[1]), 1e-12));
}

static void test_gradcheck_max_grad_per_input(void) {
    ag_params ps = {0};
    ag_tensor *xy[2] = {ag_param(&ps, "x", 1, (int[]){3}), ag_param(&ps, "y", 1, (int[]){2})};
    for (int i = 0; i < 3; i++) xy[0]->data[i] = 0.5 + 0.25 * i;
    double per_input[2] = {-1, -1};
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    o.input_max_grad = per_input;
    ag_gradcheck_result r = ag_gradcheck(loud_and_quiet_fn, xy, xy, 2, &o);
    CHECK(r.ok && r.max_grad > 1, "max_grad is the loud input's: %g", r.max_grad);
    CHECK(per_input[0] > 1 && per_input[1] < 1e-9, "per input: x %g (want ~2), y %g (want ~1e-12)", per_input[0],
          per_input[1]);
    ag_step_end();
    ag_params_free(&ps);
}


/* out = scale sum(y), whose backward adds grad_scale to each element's
 * gradient: a gradient of grad_scale where the truth is scale. */
typedef struct {
    double scale, grad_scale;
} scaled_sum;

static void scaled_sum_forward(ag_custom_call *c) {
    const scaled_sum *k = c->params;
    double s = 0;
    for (int64_t i = 0; i < c->in[0]->size; i++) s += c->in[0]->data[i];
    c->out->data[0] = (ag_real)(k->scale * s);
}

static void scaled_sum_backward(ag_custom_call *c) {
    const scaled_sum *k = c->params;
    for (int64_t i = 0; i < c->in[0]->size; i++) c->grad_in[0][i] += (ag_real)(k->grad_scale * c->grad_out[0]);
}

static const ag_custom_fn scaled_sum_fn = {"scaled_sum", scaled_sum_forward, scaled_sum_backward, 0};

typedef struct {
    ag_tensor *x, *y;
    scaled_sum k;
    bool softmax; /* y a bias added to every score of a softmax instead */
} zero_case;

/* sum(x²) + scaled_sum(y), or + w . softmax(s + y) with y [1]: y's
 * gradient is zero by structure there (every score shifts alike). */
static ag_tensor *zero_case_fn(void *p) {
    zero_case *z = p;
    ag_tensor *loud = ag_sum(ag_mul(z->x, z->x));
    if (z->softmax) {
        ag_tensor *s = ag_tensor_from((ag_real[]){0.3, -1.2, 0.8}, 1, (int[]){3});
        ag_tensor *w = ag_tensor_from((ag_real[]){1.5, -0.5, 2}, 1, (int[]){3});
        return ag_add(loud, ag_sum(ag_mul(w, ag_softmax(ag_add(s, z->y)))));
    }
    return ag_add(loud, ag_custom_op(&scaled_sum_fn, &z->y, 1, 1, (int[]){1}, &z->k, sizeof z->k));
}

/* The old rule took a parameter as zero by structure where its largest
 * max(|a|, |n|) was under 1e-9: finite differences at eps 1e-6 carry
 * ~1e-10 of noise, so a wrong gradient of 1e-10 where the truth is 0, or
 * 0 where the truth is 1e-10, passed as zero.  max_analytic (the analytic
 * gradient alone, at roundoff for a true zero: under 1e-13 of the largest
 * gradient) catches the first, ag_gradcheck_shift (a true zero leaves the
 * loss at roundoff, 1e-12, when y moves by 0.5) the second; a bias before
 * a softmax passes both.  The bounds are test_models' and attngrad
 * gradcheck's (train/internal.h).  f64 only: in f32 a 1e-10 term is under
 * the loss's roundoff, so neither check could see it. */
static void test_gradcheck_zero_verified(void) {
    if (sizeof(ag_real) != sizeof(double)) return;
    ag_params ps = {0};
    ag_tensor *x = ag_param(&ps, "x", 1, (int[]){3}), *y = ag_param(&ps, "y", 1, (int[]){2}),
              *bias = ag_param(&ps, "bias", 1, (int[]){1});
    for (int i = 0; i < 3; i++) x->data[i] = 0.5 + 0.25 * i;
    y->data[0] = 0.4, y->data[1] = -0.7, bias->data[0] = 0.2;
    static const struct {
        const char *what;
        scaled_sum k;
        bool softmax, zero; /* truly zero by structure */
    } cases[] = {
        {"true gradient 0, backward 1e-10", {0, 1e-10}, false, false},
        {"true gradient 1e-10, backward 0", {1e-10, 0}, false, false},
        {"a bias before a softmax", {0, 0}, true, true},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        zero_case z = {x, cases[c].softmax ? bias : y, cases[c].k, cases[c].softmax};
        ag_gradcheck_result rx = ag_gradcheck(zero_case_fn, &z, &x, 1, NULL);
        ag_gradcheck_result ry = ag_gradcheck(zero_case_fn, &z, &z.y, 1, NULL);
        CHECK(rx.ok && rx.max_grad > 1 && ry.ok && ry.max_grad <= 1e-9,
              "%s: the old rule passes it as zero (x ok %d |g| %g, y ok %d |g| %g)", cases[c].what, rx.ok, rx.max_grad,
              ry.ok, ry.max_grad);
        double largest = fmax(rx.max_grad, ry.max_grad), moved = ag_gradcheck_shift(zero_case_fn, &z, z.y, 0.5, 17);
        bool zero = ry.max_analytic <= 1e-13 * largest && moved <= 1e-12;
        CHECK(zero == cases[c].zero, "%s: verified zero %d, want %d (max |a| %.3g of a largest %.3g; moved by 0.5 "
              "the loss moves %.3g)", cases[c].what, zero, cases[c].zero, ry.max_analytic, largest, moved);
        CHECK(z.y->data[0] == (cases[c].softmax ? 0.2 : 0.4), "the shift gave y its values back");
        ag_step_end();
    }
    ag_params_free(&ps);
}

/* ---- ag_try: a programmer error returns instead of ending the program ---- */

typedef struct {
    ag_tensor *a, *b, *out;
    int depth; /* nested tries */
} try_ctx;

static void try_bad_add(void *ctx) {
    try_ctx *c = ctx;
    c->out = ag_exp(c->a);                   /* recorded, then forgotten by the rewind */
    c->out = ag_add(c->out, c->b);           /* [2,3] + [4,3]: a shape error */
}

static void try_huge_step(void *ctx) {
    (void)ctx;
    ag_set_grad_enabled(false);              /* restored by ag_try */
    ag__arena_alloc((size_t)1 << 30);
}

static void try_nested(void *ctx) {
    try_ctx *c = ctx;
    c->depth = ag_try(try_bad_add, c) == AG_ERR_ARG; /* the inner try catches; the outer sees nothing */
    c->out = ag_exp(c->a);
}

static void test_try_recovers(void) {
    ag_params ps = {0};
    ag_tensor *a = ag_param(&ps, "a", 2, (int[]){2, 3});
    try_ctx c = {.a = a, .b = ag_tensor_new(2, (int[]){4, 3})};
    ag_mark_t before = ag_mark();
    CHECK(ag_try(try_bad_add, &c) == AG_ERR_ARG);
    CHECK(strstr(ag_errmsg(), "ag_add") && strstr(ag_errmsg(), "[2,3]") && strstr(ag_errmsg(), "[4,3]"), "%s",
          ag_errmsg());
    ag_mark_t after = ag_mark();
    CHECK(after.tape_len == before.tape_len && after.arena_pos == before.arena_pos &&
          after.arena_chunk == before.arena_chunk, "tape and arena rewound to the call");
    /* a step too large for memory: AG_ERR_NOMEM, grad mode back as it was */
    ag__arena_bytes_limit = 64.0 * (1 << 20);
    CHECK(ag_try(try_huge_step, &c) == AG_ERR_NOMEM && strstr(ag_errmsg(), "arena"), "%s", ag_errmsg());
    ag__arena_bytes_limit = 0;
    CHECK(ag_is_grad_enabled());
    CHECK(ag_try(try_nested, &c) == AG_OK && c.depth == 1 && c.out->requires_grad);
    /* the engine works on: a step and its gradient */
    ag_backward(ag_sum(ag_exp(a)));
    CHECK(a->grad[0] == 1, "d/da sum(exp(a)) at 0: %g", a->grad[0]);
    ag_step_end();
    ag_params_free(&ps);
}

/* ---- anomaly mode: the op that makes the first inf or NaN, by name ---- */

static void test_anomaly_mode(void) {
    ag_params ps = {0};
    ag_tensor *x = ag_param(&ps, "x", 1, (int[]){3}); /* zeros */
    CHECK(!ag_anomaly_enabled());
    CHECK(isinf(ag_log(x)->data[0]), "off: log(0) = -inf goes by");
    ag_step_end();
    CHECK(!ag_anomaly(true) && ag_anomaly_enabled());
    char at[64];
    snprintf(at, sizeof at, "test_engine.c:%d", __LINE__ + 1);
    EXPECT_FATAL(ag_log(x), "ag_log: anomaly mode: the output [3] holds -inf at element 0, from finite inputs [3]", at);
    ag_step_end();
    /* forward finite, backward not: d sqrt(x) / dx at 0, named at the op's line, not backward's */
    snprintf(at, sizeof at, "test_engine.c:%d", __LINE__ + 1);
    ag_tensor *y = ag_sum(ag_sqrt(x));
    EXPECT_FATAL(ag_backward(y), "ag_sqrt: anomaly mode: backward made the gradient of input 1 [3], parameter x hold inf",
                 at);
    ag_step_end();
    ag_params_zero_grad(&ps);
    /* a constant's -inf (a mask) passes through an op unreported; softmax makes it finite */
    ag_tensor *mask = ag_tensor_from((ag_real[]){0, -INFINITY, 0}, 1, (int[]){3});
    ag_tensor *p = ag_softmax(ag_add(x, mask));
    ag_backward(ag_sum(ag_mul(p, p)));
    CHECK(p->data[1] == 0 && isfinite(x->grad[0]));
    ag_step_end();
    /* a caught anomaly (ag_try) leaves the engine usable */
    CHECK(ag_anomaly(false));
    ag_params_free(&ps);
}

int main(void) {
    test_accumulation();
    test_lerp_is_the_composition();
    test_grouped_dense_is_separate_layers();
    test_mtsa_heads_are_separate_calls();
    test_dropout_copies_are_the_calls();
    test_dropout_planes_are_the_calls();
    test_broadcast_over_many_rows();
    test_gradcheck_fails_what_is_wrong();
    test_gradcheck_max_grad_per_input();
    test_gradcheck_zero_verified();
    test_dropout_mask_statistics();
    test_dropout_keyed_by_row();
    test_profiler_names_sites();
    test_profiler_charges_once();
    test_no_grad_and_marks();
    test_zero_alloc_steady_state();
    test_errors_name_op_shapes_and_line();
    test_cgroup_memory_limit();
    test_try_recovers();
    test_anomaly_mode();
    ag_shutdown();
    return check_summary("test_engine");
}
