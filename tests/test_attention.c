/* test_attention.c - properties of the softmax family and fused attention
 * that a gradient check cannot see: the fused op equals matmul + masked
 * softmax + matmul (values and gradients), rows sum to 1, fully masked rows
 * are exact zeros with zero gradient, softmax matches a libm reference in
 * both builds (f32 uses a polynomial exp), MPSAN's masked unit in one op
 * equals its former composition, error messages name the op and
 * the shapes, and a training-like loop stops allocating.
 * Built against the f32 and the f64 library; tolerances follow ag_real. */
#include "attngrad.h"
#include "../ops/additive.h" /* ag__additive_self_attention: MPSAN's masked unit */
#include "../ops/softmax.h"  /* ag__softmax_pool: source2token's pooling */
#include "../ops/attention.h" /* ag__attention_block_rows */
#include "check.h"
#include "fatal.h"

#include <setjmp.h>
#include <string.h>

static const bool f64 = sizeof(ag_real) == sizeof(double);
#define TOL (f64 ? 1e-12 : 2e-6)

static ag_tensor *randn(ag_rng *r, double scale, bool grad, int ndim, const int *shape) {
    ag_tensor *t = ag_tensor_new(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(scale * ag_rng_normal(r));
    t->requires_grad = grad;
    return t;
}

static double max_abs_diff(const ag_real *a, const ag_real *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static bool all_finite(const ag_tensor *t) {
    for (int64_t i = 0; i < t->size; i++)
        if (!isfinite(t->data[i])) return false;
    return true;
}

/* ---- fused attention == matmul + masked softmax + matmul ---- */

static void compare_fused(const char *what, ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, double scale) {
    ag_rng r;
    ag_rng_seed(&r, 7);
    ag_tensor *probs = NULL;
    ag_tensor *fused = ag_attention(q, k, v, mask, scale, &probs);
    ag_real *seed = ag_tensor_like(fused)->data;
    for (int64_t i = 0; i < fused->size; i++) seed[i] = (ag_real)ag_rng_normal(&r);

    ag_backward_seeded(fused, seed);
    ag_real *gq = ag_tensor_like(q)->data, *gk = ag_tensor_like(k)->data, *gv = ag_tensor_like(v)->data;
    memcpy(gq, q->grad, (size_t)q->size * sizeof *gq);
    memcpy(gk, k->grad, (size_t)k->size * sizeof *gk);
    memcpy(gv, v->grad, (size_t)v->size * sizeof *gv);
    q->grad = k->grad = v->grad = NULL;

    ag_tensor *p = ag_masked_softmax(ag_matmul_t(q, false, k, true), mask, scale);
    ag_tensor *composed = ag_matmul(p, v);
    ag_backward_seeded(composed, seed);

    CHECK(all_finite(fused), "%s: non-finite output", what);
    CHECK(max_abs_diff(fused->data, composed->data, fused->size) <= 10 * TOL, "%s: outputs differ by %g", what,
          max_abs_diff(fused->data, composed->data, fused->size));
    CHECK(ag_same_shape(probs, p) && max_abs_diff(probs->data, p->data, p->size) <= TOL, "%s: probabilities differ",
          what);
    CHECK(!probs->requires_grad, "%s: the returned probabilities are constants", what);
    CHECK(max_abs_diff(gq, q->grad, q->size) <= 10 * TOL, "%s: dQ differs by %g", what,
          max_abs_diff(gq, q->grad, q->size));
    CHECK(max_abs_diff(gk, k->grad, k->size) <= 10 * TOL, "%s: dK differs by %g", what,
          max_abs_diff(gk, k->grad, k->size));
    CHECK(max_abs_diff(gv, v->grad, v->size) <= 10 * TOL, "%s: dV differs by %g", what,
          max_abs_diff(gv, v->grad, v->size));
    q->grad = k->grad = v->grad = NULL;
}

static void test_fused_equals_composition(void) {
    ag_rng r;
    ag_rng_seed(&r, 1);
    int B = 3, h = 2, N = 6, d = 5;
    ag_tensor *q = randn(&r, 1, true, 4, (int[]){B, h, N, d});
    ag_tensor *k = randn(&r, 1, true, 4, (int[]){B, h, N, d});
    ag_tensor *v = randn(&r, 1, true, 4, (int[]){B, h, N, d});
    compare_fused("no mask", q, k, v, NULL, 1 / sqrt(d));
    compare_fused("PAST [N,N]", q, k, v, ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, N), 0.4);
    const ag_mask_spec specs[2] = {{.dir = AG_MASK_PAST, .dist = AG_DIST_LOG}, {.faraway = 2}};
    compare_fused("per-head [h,N,N]", q, k, v, ag_mask_heads(specs, 2, N), 0.4);
    const int32_t len[3] = {6, 2, 0};
    compare_fused("padding [B,1,1,N]", q, k, v, ag_mask_padding(len, B, N, 4, false), 0.4);
    compare_fused("padding [B,1,N,N]", q, k, v, ag_mask_padding(len, B, N, 4, true), 0.4);
    const int32_t heads[18] = {1, 2, -1, 2, 3, 4, /* */ -1, 0, 0, 0, 0, 0, /* */ 0, 0, 0, 0, 0, 0};
    const ag_mask_spec ms[2] = {{.dir = AG_MASK_PAST_INCL, .dist = AG_DIST_TREE, .weight = 1.5},
                                {.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_WORD, .weight = 1.5}};
    ag_tensor *batch_mask = NULL;
    CHECK(ag_mask_batch(ms, 2, B, N, len, heads, &batch_mask) == AG_OK, "%s", ag_errmsg());
    compare_fused("batch [B,h,N,N]", q, k, v, batch_mask, 0.4);
    /* Cross attention with dv != d, 3-D. */
    ag_tensor *q3 = randn(&r, 1, true, 3, (int[]){2, 3, 4});
    ag_tensor *k3 = randn(&r, 1, true, 3, (int[]){2, 7, 4});
    ag_tensor *v3 = randn(&r, 1, true, 3, (int[]){2, 7, 9});
    compare_fused("cross, dv != d", q3, k3, v3, ag_mask_padding((int32_t[]){7, 3}, 2, 7, 3, false), 0.9);
    ag_step_end();
}

/* ---- MPSAN's masked unit in one op == the composition it replaced ---- */

/* out and p of ag__additive_self_attention and the gradients of h, u, v
 * and bias against MPSAN's former composition (two products, the adds, the
 * scaled tanh or the ELU, the masked softmax, the weighted sum). */
static void compare_unit(const char *what, ag_tensor *h, ag_tensor *u, ag_tensor *v, ag_tensor *bias, ag_tensor *mask,
                         bool elu) {
    ag_rng r;
    ag_rng_seed(&r, 9);
    int B = h->shape[0], N = h->shape[1], d = h->shape[2];
    const double c = 5.0;
    ag_tensor *in[4] = {h, u, v, bias}, *probs = NULL;
    ag_tensor *fused = ag__additive_self_attention(h, u, v, bias, mask, c, elu, &probs);
    ag_real *seed = ag_tensor_like(fused)->data;
    for (int64_t i = 0; i < fused->size; i++) seed[i] = (ag_real)ag_rng_normal(&r);
    ag_backward_seeded(fused, seed);
    ag_real *grads[4];
    for (int i = 0; i < 4; i++) {
        grads[i] = ag_tensor_like(in[i])->data;
        memcpy(grads[i], in[i]->grad, (size_t)in[i]->size * sizeof(ag_real));
        in[i]->grad = NULL;
    }

    ag_tensor *hu = ag_matmul(h, ag_reshape(u, 2, (int[]){d, 1}));
    ag_tensor *hv = ag_matmul(h, ag_reshape(v, 2, (int[]){d, 1}));
    ag_tensor *z = ag_add(ag_add(ag_reshape(hu, 3, (int[]){B, 1, N}), hv), bias);
    ag_tensor *e = elu ? ag_elu(ag_mul_scalar(z, 1 / c)) : ag_mul_scalar(ag_tanh(ag_mul_scalar(z, 1 / c)), c);
    ag_tensor *p = ag_masked_softmax(e, mask, 1.0);
    ag_tensor *composed = ag_matmul(p, h);
    ag_backward_seeded(composed, seed);

    CHECK(all_finite(fused), "%s: non-finite output", what);
    CHECK(max_abs_diff(fused->data, composed->data, fused->size) <= 10 * TOL, "%s: outputs differ by %g", what,
          max_abs_diff(fused->data, composed->data, fused->size));
    CHECK(ag_same_shape(probs, p) && max_abs_diff(probs->data, p->data, p->size) <= TOL,
          "%s: probabilities differ by %g", what, max_abs_diff(probs->data, p->data, p->size));
    CHECK(!probs->requires_grad, "%s: the returned probabilities are constants", what);
    static const char *const names[4] = {"h", "u", "v", "bias"};
    for (int i = 0; i < 4; i++) { /* u, v and bias sum over every pair: their scale is B N N */
        double tol = (i == 0 ? 10 : 10 * B * N) * TOL, diff = max_abs_diff(grads[i], in[i]->grad, in[i]->size);
        CHECK(diff <= tol, "%s: d%s differs by %g (tolerance %g)", what, names[i], diff, tol);
        in[i]->grad = NULL;
    }
}

static void test_additive_unit(void) {
    ag_rng r;
    ag_rng_seed(&r, 3);
    int B = 3, N = 6, d = 5;
    ag_tensor *h = randn(&r, 1, true, 3, (int[]){B, N, d});
    ag_tensor *u = randn(&r, 1, true, 1, (int[]){d}), *v = randn(&r, 1, true, 1, (int[]){d});
    ag_tensor *bias = randn(&r, 1, true, 1, (int[]){1});
    const int32_t len[3] = {6, 1, 0};
    /* MPSAN's four masks, as it makes them: -inf at padding, -ln|k-q| penalties */
    const ag_mask_spec specs[4] = {{.faraway = 2}, {.faraway = 3}, {.dir = AG_MASK_PAST, .dist = AG_DIST_LOG},
                                   {.dir = AG_MASK_FUTURE, .dist = AG_DIST_LOG}};
    ag_tensor *masks = NULL;
    CHECK(ag_mask_batch(specs, 4, B, N, len, NULL, &masks) == AG_OK, "%s", ag_errmsg());
    static const char *const names[4] = {"fa2, lengths 6,1,0", "fa3", "past_sd", "future_sd"};
    for (int i = 0; i < 4; i++) {
        ag_tensor *m = ag_reshape(ag_slice(masks, 1, i, i + 1), 3, (int[]){B, N, N});
        compare_unit(names[i], h, u, v, bias, m, false);
        compare_unit(names[i], h, u, v, bias, m, true);
        /* the plane read in place (MPSAN's way): the sliced mask's bits */
        ag_tensor *sliced = ag__additive_self_attention(h, u, v, bias, m, 5.0, i == 2, NULL);
        ag_tensor *in_place = ag__additive_self_attention_plane(h, u, v, bias, masks, i, 5.0, i == 2, NULL);
        CHECK(!memcmp(sliced->data, in_place->data, (size_t)sliced->size * sizeof(ag_real)),
              "%s: plane %d read in place differs from the sliced mask's result", names[i], i);
    }
    compare_unit("no mask", h, u, v, bias, NULL, false);
    compare_unit("PAST [N,N]", h, u, v, bias, ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, N), true);
    ag_tensor *big = randn(&r, 20, true, 3, (int[]){B, N, d}); /* saturated tanh, ELU logits ~1e2 */
    compare_unit("large logits", big, u, v, bias, NULL, false);
    compare_unit("large logits, ELU", big, u, v, bias, NULL, true);
    ag_step_end();
}

/* ---- softmax invariants ---- */

static void test_rows(void) {
    ag_rng r;
    ag_rng_seed(&r, 2);
    int N = 5;
    ag_tensor *x = randn(&r, 3, true, 4, (int[]){2, 3, N, N});
    ag_tensor *mask = ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, N);
    ag_tensor *y = ag_masked_softmax(x, mask, 1.0);
    bool rows_sum_to_1 = true, masked_zero = true;
    for (int64_t row = 0; row < y->size / N; row++) {
        int q = (int)(row % N);
        double s = 0;
        for (int kk = 0; kk < N; kk++) {
            ag_real p = y->data[row * N + kk];
            s += p;
            if (kk >= q && p != 0) masked_zero = false;
        }
        if (q == 0 ? s != 0 : fabs(s - 1) > 4 * TOL) rows_sum_to_1 = false;
    }
    CHECK(rows_sum_to_1, "rows sum to 1 (and the fully masked first row to exactly 0)");
    CHECK(masked_zero, "masked entries are exactly 0");

    /* A fully masked row passes exactly zero gradient, and nothing is NaN. */
    ag_real *seed = ag_tensor_fill(1, 4, y->shape)->data;
    for (int64_t i = 0; i < y->size; i++) seed[i] = (ag_real)(i % 7) - 3;
    ag_backward_seeded(y, seed);
    bool first_row_zero = true;
    for (int64_t row = 0; row < y->size / N; row += N)
        for (int kk = 0; kk < N; kk++) first_row_zero = first_row_zero && x->grad[row * N + kk] == 0;
    CHECK(first_row_zero, "no gradient through a fully masked row");
    CHECK(all_finite(y), "no NaN in the output");

    /* A whole example padded away (length 0) in fused attention: exact zeros. */
    ag_tensor *qkv = randn(&r, 1, true, 4, (int[]){2, 1, 3, 4});
    ag_tensor *out = ag_attention(qkv, qkv, qkv, ag_mask_padding((int32_t[]){3, 0}, 2, 3, 4, false), 0.5, NULL);
    ag_backward(ag_sum(out));
    bool zero_out = true, zero_grad = true;
    for (int i = 12; i < 24; i++) {
        zero_out = zero_out && out->data[i] == 0;
        zero_grad = zero_grad && qkv->grad[i] == 0;
    }
    CHECK(zero_out && zero_grad, "a length-0 example: zero output and zero gradient");
    CHECK(all_finite(out), "no NaN in attention output");
    ag_step_end();
}

/* softmax, log-softmax and the pooling softmax against a direct libm
 * reference in double: in f32 this measures the polynomial exp. */
static void test_against_reference(void) {
    ag_rng r;
    ag_rng_seed(&r, 3);
    int rows = 40, n = 67;
    ag_tensor *x = ag_tensor_new(2, (int[]){rows, n});
    for (int64_t i = 0; i < x->size; i++) /* spreads from 1e-3 to 1e3, so exp sees [-87, 0] */
        x->data[i] = (ag_real)(ag_rng_normal(&r) * pow(10, (double)(i / n % 7) - 3));
    double scale = 0.37, ulp_half = f64 ? 0x1p-53 : 0x1p-24;
    ag_tensor *y = ag_masked_softmax(x, NULL, scale), *ly = ag_log_softmax(x);
    double worst = 0, worst_log = 0;
    for (int i = 0; i < rows; i++) {
        const ag_real *xr = x->data + (int64_t)i * n;
        double mx = -INFINITY, s = 0, ls = 0, lmx = -INFINITY;
        /* compares, not fmax: GCC 12's aarch64 vectorizer dies on that (docs/design.md, "Other CPUs") */
        for (int j = 0; j < n; j++) {
            mx = scale * (double)xr[j] > mx ? scale * (double)xr[j] : mx;
            lmx = xr[j] > lmx ? xr[j] : lmx;
        }
        for (int j = 0; j < n; j++) {
            s += exp(scale * (double)xr[j] - mx);
            ls += exp((double)xr[j] - lmx);
        }
        for (int j = 0; j < n; j++) {
            /* Rounding the logit z = scale*x and z - max to ag_real is an
             * absolute error of up to ~ulp(|z| + |max|) in the exponent,
             * hence that relative error in e^(z - max) for any exp: allow
             * for it, and measure what the op adds on top. */
            double z = scale * (double)xr[j], want = exp(z - mx) / s;
            double tol = (f64 ? 1e-13 : 2e-6) + 2 * ulp_half * (fabs(z) + fabs(mx));
            double err = fabs((double)y->data[(int64_t)i * n + j] - want) / fmax(want, 1e-30);
            if (want > 1e-30) worst = check_worst(worst, err / tol);
            double lwant = (double)xr[j] - lmx - log(ls);
            double lerr = fabs((double)ly->data[(int64_t)i * n + j] - lwant) / fmax(1, fabs(lwant));
            worst_log = check_worst(worst_log, lerr);
        }
    }
    CHECK(worst <= 1, "softmax vs libm: relative error %g of the allowed", worst);
    CHECK(worst_log <= (f64 ? 1e-13 : 2e-6), "log_softmax vs libm: relative error %g", worst_log);

    /* Pooling softmax over valid positions, per feature. */
    ag_tensor *p = ag_tensor_new(3, (int[]){2, 4, 3});
    for (int64_t i = 0; i < p->size; i++) p->data[i] = (ag_real)ag_rng_normal(&r);
    const int32_t len[2] = {3, 4};
    ag_tensor *a = ag_softmax_axis_len(p, 1, len);
    double pool_err = 0;
    bool padded_zero = true;
    for (int b = 0; b < 2; b++)
        for (int f = 0; f < 3; f++) {
            double mx = -INFINITY, s = 0;
            for (int t = 0; t < len[b]; t++) mx = check_worst(mx, p->data[(b * 4 + t) * 3 + f]);
            for (int t = 0; t < len[b]; t++) s += exp((double)p->data[(b * 4 + t) * 3 + f] - mx);
            for (int t = 0; t < 4; t++) {
                double got = (double)a->data[(b * 4 + t) * 3 + f];
                if (t >= len[b]) padded_zero = padded_zero && got == 0;
                else pool_err = check_worst(pool_err, fabs(got - exp((double)p->data[(b * 4 + t) * 3 + f] - mx) / s));
            }
        }
    CHECK(pool_err <= TOL && padded_zero, "softmax_axis_len vs reference: %g, padded zero %d", pool_err, padded_zero);
    ag_step_end();
}

/* Logits of magnitude 1e3 (and a finite -1e30 penalty) stay finite. */
static void test_large_logits(void) {
    ag_rng r;
    ag_rng_seed(&r, 4);
    ag_tensor *x = randn(&r, 1000, true, 3, (int[]){4, 6, 6});
    ag_tensor *m = ag_tensor_new(2, (int[]){6, 6});
    m->data[3] = (ag_real)-1e30;
    ag_tensor *y = ag_masked_softmax(x, m, 1.0);
    ag_backward(ag_sum(ag_mul(y, y)));
    CHECK(all_finite(y) && all_finite(&(ag_tensor){.size = x->size, .data = x->grad}), "large logits: finite");
    ag_tensor *q = randn(&r, 30, true, 3, (int[]){2, 5, 4}), *k = randn(&r, 30, true, 3, (int[]){2, 5, 4});
    ag_tensor *v = randn(&r, 1, true, 3, (int[]){2, 5, 4});
    ag_tensor *o = ag_attention(q, k, v, NULL, 1.0, NULL);
    ag_backward(ag_sum(o));
    CHECK(all_finite(o) && all_finite(&(ag_tensor){.size = q->size, .data = q->grad}), "attention: finite");
    ag_step_end();
}

/* ---- misuse ---- */

static void test_misuse(void) {
    ag_fatal_handler old = ag_set_fatal_handler(catch_fatal);
    ag_tensor *x = ag_tensor_new(3, (int[]){2, 4, 4});
    ag_tensor *bad_mask = ag_tensor_new(2, (int[]){3, 4});
    EXPECT_FATAL_AT(ag_masked_softmax(x, bad_mask, 1.0), "ag_masked_softmax", "[3,4]", "[2,4,4]");
    ag_tensor *wide = ag_tensor_new(2, (int[]){4, 5});
    EXPECT_FATAL_AT(ag_masked_softmax(x, wide, 1.0), "ag_masked_softmax", "[4,5]", "[2,4,4]");
    ag_tensor *bigger = ag_tensor_new(4, (int[]){3, 2, 4, 4});
    EXPECT_FATAL_AT(ag_masked_softmax(x, bigger, 1.0), "ag_masked_softmax", "[3,2,4,4]", "[2,4,4]");
    /* [B,1,N] padding meant for [B,N,N] scores, given [B,h,N,N] scores. */
    ag_tensor *x4 = ag_tensor_new(4, (int[]){2, 3, 4, 4});
    EXPECT_FATAL_AT(ag_masked_softmax(x4, ag_mask_padding((int32_t[]){4, 2}, 2, 4, 3, false), 1.0),
                 "ag_masked_softmax", "[2,1,4]", "[2,3,4,4]");
    ag_tensor *grad_mask = ag_tensor_new(2, (int[]){4, 4});
    grad_mask->requires_grad = true;
    EXPECT_FATAL_AT(ag_masked_softmax(x, grad_mask, 1.0), "ag_masked_softmax", "requires grad", "[4,4]");
    EXPECT_FATAL_AT(ag_softmax(ag_scalar(1)), "ag_softmax", "0-dim", "softmax");
    EXPECT_FATAL_AT(ag_log_softmax(ag_scalar(1)), "ag_log_softmax", "0-dim", "log-softmax");

    EXPECT_FATAL_AT(ag_softmax_axis_len(x, 0, (int32_t[]){1, 1}), "ag_softmax_axis_len", "[2,4,4]", "axis cannot be 0");
    EXPECT_FATAL_AT(ag_softmax_axis_len(x, 1, (int32_t[]){1, 5}), "ag_softmax_axis_len", "lengths[1] = 5", "[2,4,4]");
    EXPECT_FATAL_AT(ag_softmax_axis_len(x, 3, NULL), "ag_softmax_axis_len", "axis 3", "[2,4,4]");

    ag_tensor *q = ag_tensor_new(4, (int[]){2, 3, 4, 5}), *k = ag_tensor_new(4, (int[]){2, 3, 6, 5});
    ag_tensor *k_bad_d = ag_tensor_new(4, (int[]){2, 3, 6, 4}), *v = ag_tensor_new(4, (int[]){2, 3, 6, 7});
    ag_tensor *v_bad_n = ag_tensor_new(4, (int[]){2, 3, 5, 7}), *k_bad_b = ag_tensor_new(4, (int[]){2, 2, 6, 5});
    EXPECT_FATAL_AT(ag_attention(q, k_bad_d, v, NULL, 1, NULL), "ag_attention", "[2,3,4,5]", "[2,3,6,4]");
    EXPECT_FATAL_AT(ag_attention(q, k, v_bad_n, NULL, 1, NULL), "ag_attention", "[2,3,6,5]", "[2,3,5,7]");
    EXPECT_FATAL_AT(ag_attention(q, k_bad_b, v, NULL, 1, NULL), "ag_attention", "[2,3,4,5]", "[2,2,6,5]");
    EXPECT_FATAL_AT(ag_attention(q, k, v, ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST}, 4), 1, NULL), "ag_attention",
                 "[4,4]", "[2,3,4,6]");
    EXPECT_FATAL_AT(ag_attention(ag_tensor_new(1, (int[]){5}), k, v, NULL, 1, NULL), "ag_attention", "[5]", "[2,3,6,5]");

    EXPECT_FATAL_AT(ag_split_heads(ag_tensor_new(3, (int[]){2, 3, 10}), 3), "ag_split_heads", "[2,3,10]", "3 heads");
    EXPECT_FATAL_AT(ag_split_heads(ag_tensor_new(4, (int[]){2, 3, 4, 6}), 2), "ag_split_heads", "[2,3,4,6]", "2 heads");
    EXPECT_FATAL_AT(ag_merge_heads(ag_tensor_new(2, (int[]){3, 6})), "ag_merge_heads", "[3,6]", "[h, N, d]");

    const char *unit = "ag__additive_self_attention";
    ag_tensor *h = ag_tensor_new(3, (int[]){2, 4, 5}), *u5 = ag_tensor_new(1, (int[]){5});
    ag_tensor *u4 = ag_tensor_new(1, (int[]){4}), *b1 = ag_tensor_new(1, (int[]){1}), *b2 = ag_tensor_new(1, (int[]){2});
    EXPECT_FATAL(ag__additive_self_attention(h, u4, u5, b1, NULL, 5, false, NULL), unit, "[2,4,5]", "u [4]");
    EXPECT_FATAL(ag__additive_self_attention(h, u5, u5, b2, NULL, 5, false, NULL), unit, "bias [2]", "one element");
    EXPECT_FATAL(ag__additive_self_attention(x, u5, u5, b1, NULL, 5, false, NULL), unit, "[2,4,4]", "u [5]");
    EXPECT_FATAL(ag__additive_self_attention(h, u5, u5, b1, NULL, 0, false, NULL), unit, "c = 0", "c > 0");
    EXPECT_FATAL(ag__additive_self_attention(h, u5, u5, b1, ag_tensor_new(2, (int[]){4, 5}), 5, false, NULL), unit,
                    "[4,5]", "[2,4,4]");
    const char *plane = "ag__additive_self_attention_plane";
    ag_tensor *masks = ag_tensor_new(4, (int[]){2, 4, 4, 4});
    EXPECT_FATAL(ag__additive_self_attention_plane(h, u5, u5, b1, masks, 4, 5, false, NULL), plane, "plane 4",
                 "[2,4,4,4]");
    EXPECT_FATAL(ag__additive_self_attention_plane(h, u5, u5, b1, masks, -1, 5, false, NULL), plane, "plane -1",
                 "0 <= plane < P");
    EXPECT_FATAL(ag__additive_self_attention_plane(h, u5, u5, b1, ag_tensor_new(4, (int[]){2, 4, 3, 4}), 0, 5, false,
                                                   NULL),
                 plane, "[2,4,3,4]", "[2,P,4,4]");
    EXPECT_FATAL(ag__additive_self_attention_plane(h, u5, u5, b1, ag_tensor_new(3, (int[]){2, 4, 4}), 0, 5, false, NULL),
                 plane, "[2,4,4]", "[2,P,4,4]");
    const char *pool = "ag__softmax_pool";
    EXPECT_FATAL(ag__softmax_pool(h, ag_tensor_new(3, (int[]){2, 4, 6}), NULL, NULL), pool, "[2,4,5]", "[2,4,6]",
                 "[B,N,d]");
    EXPECT_FATAL(ag__softmax_pool(ag_tensor_new(2, (int[]){8, 5}), h, NULL, NULL), pool, "[8,5]", "[B,N,d]");
    EXPECT_FATAL(ag__softmax_pool(h, h, (int32_t[]){4, 5}, NULL), pool, "lengths[1] = 5", "[0, 4]", "[2,4,5]");
    EXPECT_FATAL(ag__softmax_pool(h, h, (int32_t[]){-1, 2}, NULL), pool, "lengths[0] = -1");
    ag_set_fatal_handler(old);
    ag_step_end();
}

/* ---- a fixed-shape loop stops allocating (masks cached, all else in the arena) ---- */

static void test_steady_state(void) {
    ag_rng r;
    ag_rng_seed(&r, 5);
    int B = 4, h = 2, N = 8, d = 6;
    const int32_t len[4] = {8, 5, 1, 3};
    const int32_t heads[32] = {1, 2, 3, 4, 5, 6, 7, -1, 1, 2, 3, 4, -1, 0, 0, 0,
                               -1, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0};
    const ag_mask_spec specs[2] = {{.dir = AG_MASK_PAST_INCL, .dist = AG_DIST_TREE, .weight = 1.5},
                                   {.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_WORD, .weight = 1.5}};
    int64_t allocs_after_warmup = 0;
    for (int step = 0; step < 5; step++) {
        if (step == 2) allocs_after_warmup = ag_memstats().allocs;
        ag_tensor *x = randn(&r, 1, true, 3, (int[]){B, N, h * d});
        ag_tensor *qh = ag_split_heads(x, h);
        ag_tensor *m = NULL;
        ag_mask_batch(specs, 2, B, N, len, heads, &m);
        ag_tensor *o = ag_attention(qh, qh, qh, m, 0.4, NULL);
        ag_tensor *s = ag_masked_softmax(ag_merge_heads(o), ag_mask_padding(len, B, h * d, 3, false), 1.0);
        ag_tensor *pooled = ag_softmax_axis_len(s, 1, len);
        ag_backward(ag_sum(ag_log_softmax(pooled)));
        ag_step_end();
    }
    CHECK(ag_memstats().allocs == allocs_after_warmup, "steps 3-5 allocated %lld times",
          (long long)(ag_memstats().allocs - allocs_after_warmup));
}

/* The stored op's backward reads its probabilities, not the mask: a mask
 * written over between forward and backward (every entry -inf) leaves the
 * gradients as they were, in one block a slice and in 2-row blocks with
 * their key spans (causal, and padding of the keys). */
static void test_backward_keeps_no_mask(void) {
    ag_rng r;
    for (int rows = 0; rows <= 2; rows += 2) {
        ag__attention_block_rows = rows;
        ag_real grads[2][3][2 * 2 * 7 * 4];
        for (int run = 0; run < 2; run++) {
            ag_rng_seed(&r, 9);
            ag_tensor *q = randn(&r, 1, true, 4, (int[]){2, 2, 7, 4}), *k = randn(&r, 1, true, 4, (int[]){2, 2, 7, 4});
            ag_tensor *v = randn(&r, 1, true, 4, (int[]){2, 2, 7, 4});
            ag_tensor *mask = ag_tensor_new(4, (int[]){2, 1, 7, 7});
            for (int b = 0; b < 2; b++) /* causal, and example 1's keys past 4 padding */
                for (int i = 0; i < 7; i++)
                    for (int j = 0; j < 7; j++) mask->data[(b * 7 + i) * 7 + j] = j > i || (b && j >= 4) ? -INFINITY : 0;
            ag_tensor *y = ag_attention(q, k, v, mask, 0.6, NULL);
            if (run) /* written over before backward */
                for (int64_t e = 0; e < mask->size; e++) mask->data[e] = -INFINITY;
            ag_backward(ag_sum(ag_square(y)));
            memcpy(grads[run][0], q->grad, sizeof grads[run][0]);
            memcpy(grads[run][1], k->grad, sizeof grads[run][1]);
            memcpy(grads[run][2], v->grad, sizeof grads[run][2]);
            ag_step_end();
        }
        CHECK(memcmp(grads[0], grads[1], sizeof grads[0]) == 0,
              "%d-row blocks: the gradients moved when the mask changed after forward", rows);
        double norm = 0;
        for (int e = 0; e < 2 * 2 * 7 * 4; e++) norm += fabs((double)grads[0][1][e]);
        CHECK(norm > 0, "%d-row blocks: K's gradient is zero, so the comparison proves nothing", rows);
    }
    ag__attention_block_rows = 0;
}

int main(void) {
    test_backward_keeps_no_mask();
    test_fused_equals_composition();
    test_additive_unit();
    test_rows();
    test_against_reference();
    test_large_logits();
    test_misuse();
    test_steady_state();
    ag_shutdown();
    return check_summary(f64 ? "test_attention (f64)" : "test_attention (f32)");
}
