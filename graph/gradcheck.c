/* gradcheck.c - analytic gradients against central finite differences.
 *
 * f's output is projected on a fixed random direction r, so one scalar
 * <f(x), r> exercises every output element with a distinct weight; a bug
 * that swaps or drops output elements cannot cancel out.  The projection is
 * summed in double so the check measures the op, not the check.
 *
 * Inputs and outputs may live on the GPU: values are read back and single
 * elements written through copies, slow and exact (f64 checks of the CUDA
 * code run so). */
#include "device.h"

#include <stdio.h>

ag_gradcheck_opts ag_gradcheck_defaults(void) {
    ag_gradcheck_opts o = {0};
    bool dbl = sizeof(ag_real) == sizeof(double);
    o.eps = dbl ? 1e-6 : 1e-2;
    o.atol = dbl ? 1e-8 : 1e-3;
    o.rtol = dbl ? 1e-6 : 1e-2;
    o.max_checks = 0;
    o.seed = 1234;
    return o;
}

static double project(const ag_tensor *out, const double *r) {
    const ag_real *x = out->data;
    if (out->device == AG_CUDA) { /* in the host arena: eval_projected rewinds it */
        ag_real *host = ag__arena_alloc((size_t)out->size * sizeof(ag_real));
        ag_tensor_read(out, host);
        x = host;
    }
    double s = 0;
    for (int64_t i = 0; i < out->size; i++) s += (double)x[i] * r[i];
    return s;
}

/* Element j of t's values (or gradient), on either device. */
static ag_real get(const ag_real *p, ag_device dev, int64_t j) {
    ag_real v;
    if (dev == AG_CUDA) ag__cuda_copy(&v, AG_CPU, p + j, AG_CUDA, sizeof v);
    else v = p[j];
    return v;
}

static void set(ag_real *p, ag_device dev, int64_t j, ag_real v) {
    if (dev == AG_CUDA) ag__cuda_copy(p + j, AG_CUDA, &v, AG_CPU, sizeof v);
    else p[j] = v;
}

static double eval_projected(ag_forward_fn f, void *ctx, const double *r, int64_t out_size) {
    ag_mark_t m = ag_mark();
    ag_tensor *out = f(ctx);
    if (!out) ag__fatal("gradcheck", "the function returned no tensor: %s", ag_errmsg());
    if (out->size != out_size) ag__fatal("gradcheck", "the function's output changed size between calls");
    double v = project(out, r);
    ag_rewind(m);
    return v;
}

ag_gradcheck_result ag_gradcheck(ag_forward_fn f, void *ctx, ag_tensor **wrt, int n,
                                 const ag_gradcheck_opts *opts) {
    ag_gradcheck_opts o = opts ? *opts : ag_gradcheck_defaults();
    ag_gradcheck_result res = {.ok = true, .worst_input = -1, .worst_index = -1};

    for (int i = 0; i < n; i++) {
        if (!wrt[i]->requires_grad) ag__fatal("gradcheck", "input %d does not require grad", i);
        if (!wrt[i]->persistent) wrt[i]->grad = NULL;
        else if (wrt[i]->device == AG_CUDA) ag__cuda_zero(wrt[i]->grad, (size_t)wrt[i]->size * sizeof(ag_real));
        else memset(wrt[i]->grad, 0, (size_t)wrt[i]->size * sizeof(ag_real));
    }

    /* Analytic pass: backward seeded with the projection direction. */
    ag_mark_t m = ag_mark();
    ag_tensor *out = f(ctx);
    if (!out) ag__fatal("gradcheck", "the function returned no tensor: %s", ag_errmsg());
    int64_t out_size = out->size;
    double *r = ag__malloc((size_t)(out_size ? out_size : 1) * sizeof *r);
    ag_real *seed = ag__malloc((size_t)(out_size ? out_size : 1) * sizeof *seed);
    ag_rng rng;
    ag_rng_seed(&rng, o.seed);
    for (int64_t i = 0; i < out_size; i++) {
        double u = 0.5 + ag_rng_uniform(&rng);           /* |r| in [0.5, 1.5) */
        r[i] = (ag_rng_next(&rng) & 1) ? u : -u;
        seed[i] = (ag_real)r[i];
    }
    if (out->requires_grad) ag_backward_seeded(out, seed);

    int64_t total = 0;
    for (int i = 0; i < n; i++) total += wrt[i]->size;
    double *analytic = ag__malloc((size_t)(total ? total : 1) * sizeof *analytic);
    for (int i = 0, off = 0; i < n; off += (int)wrt[i]->size, i++) {
        const ag_real *g = wrt[i]->grad;
        if (g && wrt[i]->device == AG_CUDA) {
            ag_real *host = ag__arena_alloc((size_t)wrt[i]->size * sizeof(ag_real)); /* rewound below */
            ag__cuda_copy(host, AG_CPU, g, AG_CUDA, (size_t)wrt[i]->size * sizeof(ag_real));
            g = host;
        }
        for (int64_t j = 0; j < wrt[i]->size; j++) {
            analytic[off + j] = g ? (double)g[j] : 0.0;
            double a = fabs(analytic[off + j]); /* a NaN, checked or not, is no small gradient */
            res.max_analytic = isnan(a) ? INFINITY : fmax(res.max_analytic, a);
        }
    }
    ag_rewind(m);
    for (int i = 0; i < n; i++)
        if (!wrt[i]->persistent) wrt[i]->grad = NULL;

    if (o.input_max_grad)
        for (int i = 0; i < n; i++) o.input_max_grad[i] = 0;
    /* Numeric pass, with recording off: only values are needed. */
    bool was = ag_set_grad_enabled(false);
    for (int i = 0, off = 0; i < n; off += (int)wrt[i]->size, i++) {
        ag_tensor *t = wrt[i];
        int64_t stride = 1;
        if (o.max_checks > 0 && t->size > o.max_checks) stride = (t->size + o.max_checks - 1) / o.max_checks;
        for (int64_t j = 0; j < t->size; j += stride) {
            ag_real orig = get(t->data, t->device, j);
            set(t->data, t->device, j, orig + (ag_real)o.eps);
            double plus = eval_projected(f, ctx, r, out_size);
            set(t->data, t->device, j, orig - (ag_real)o.eps);
            double minus = eval_projected(f, ctx, r, out_size);
            set(t->data, t->device, j, orig);
            double num = (plus - minus) / (2 * o.eps);
            double ana = analytic[off + j];
            double err = fabs(ana - num);
            /* Below atol/rtol a gradient is too small for finite differences
             * to resolve relatively (their noise is ~1e-10 absolute), so the
             * reported relative error measures it against that floor. */
            double scale = fmax(fmax(fabs(ana), fabs(num)), o.rtol > 0 ? o.atol / o.rtol : o.atol);
            double rel = err / scale;
            /* A NaN or infinite gradient, or a function that is not finite
             * around x, fails: NaN compares false, so the test is "within",
             * not "not beyond", and NaN errors rank as the worst. */
            if (isnan(rel)) rel = err = INFINITY;
            double big = fmax(fabs(ana), fabs(num)), true_rel = err == 0 ? 0 : big > 0 ? err / big : INFINITY;
            res.max_true_rel_err = fmax(res.max_true_rel_err, true_rel);
            res.max_grad = fmax(res.max_grad, big);
            if (o.input_max_grad) o.input_max_grad[i] = fmax(o.input_max_grad[i], big);
            res.checked++;
            if (!(err <= o.atol + o.rtol * fabs(num))) res.ok = false;
            if (err > res.max_abs_err) res.max_abs_err = err;
            if (rel > res.max_rel_err || res.worst_input < 0) {
                res.max_rel_err = fmax(rel, res.max_rel_err);
                res.worst_input = i;
                res.worst_index = j;
                res.analytic = ana;
                res.numeric = num;
            }
        }
    }
    ag_set_grad_enabled(was);
    ag__free(r);
    ag__free(seed);
    ag__free(analytic);
    return res;
}

/* f's output as doubles in a fresh host array of *size elements. */
static double *eval_values(ag_forward_fn f, void *ctx, int64_t *size) {
    ag_mark_t m = ag_mark();
    ag_tensor *out = f(ctx);
    if (!out) ag__fatal("ag_gradcheck_shift", "the function returned no tensor: %s", ag_errmsg());
    ag_real *host = ag__arena_alloc((size_t)(out->size ? out->size : 1) * sizeof(ag_real));
    ag_tensor_read(out, host);
    double *v = ag__malloc((size_t)(out->size ? out->size : 1) * sizeof *v);
    for (int64_t i = 0; i < out->size; i++) v[i] = (double)host[i];
    *size = out->size;
    ag_rewind(m);
    return v;
}

/* All of t's values from host memory, on either device. */
static void write_all(ag_tensor *t, const ag_real *host) {
    if (t->device == AG_CUDA) ag__cuda_copy(t->data, AG_CUDA, host, AG_CPU, (size_t)t->size * sizeof(ag_real));
    else memcpy(t->data, host, (size_t)t->size * sizeof(ag_real));
}

/* The largest |after - before|, NaN counting as infinite (no invariance),
 * and the largest |before|. */
static void moved_by(const double *before, const double *after, int64_t n, double *change, double *scale) {
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(after[i] - before[i]);
        *change = isnan(d) ? INFINITY : fmax(*change, d);
        *scale = fmax(*scale, fabs(before[i]));
    }
}

double ag_gradcheck_shift(ag_forward_fn f, void *ctx, ag_tensor *t, double shift, uint64_t seed) {
    bool was = ag_set_grad_enabled(false); /* values only */
    int64_t n = 0;
    double *before = eval_values(f, ctx, &n), change = 0, scale = 0;
    ag_real *saved = ag__malloc((size_t)(t->size ? t->size : 1) * sizeof *saved);
    ag_real *moved = ag__malloc((size_t)(t->size ? t->size : 1) * sizeof *moved);
    double *step = ag__malloc((size_t)(t->size ? t->size : 1) * sizeof *step);
    ag_tensor_read(t, saved);
    ag_rng rng;
    ag_rng_seed(&rng, seed);
    /* distances of their own: equal ones of opposite signs would cancel a
     * dependence alike on every element (a tiny sum(t)) */
    for (int64_t j = 0; j < t->size; j++) {
        double d = shift * (0.5 + 0.5 * ag_rng_uniform(&rng));
        step[j] = (ag_rng_next(&rng) & 1) ? d : -d;
    }
    /* the step and its opposite: a function that is flat only on one side
     * (a score in the linear piece of an ELU, a ReLU dead beyond its kink)
     * moves on the other */
    for (int side = 1; side >= -1; side -= 2) {
        for (int64_t j = 0; j < t->size; j++) moved[j] = saved[j] + (ag_real)(side * step[j]);
        write_all(t, moved);
        int64_t n_moved = 0;
        double *after = eval_values(f, ctx, &n_moved);
        write_all(t, saved);
        if (n_moved != n) ag__fatal("ag_gradcheck_shift", "the function's output changed size between calls");
        moved_by(before, after, n, &change, &scale);
        ag__free(after);
    }
    ag_set_grad_enabled(was);
    ag__free(before);
    ag__free(saved);
    ag__free(moved);
    ag__free(step);
    return scale > 0 ? change / scale : change;
}
