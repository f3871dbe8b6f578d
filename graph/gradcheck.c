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
        for (int64_t j = 0; j < wrt[i]->size; j++) analytic[off + j] = g ? (double)g[j] : 0.0;
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
