/* custom_op.c - a user-written op on the tape: cosine similarity along the
 * last axis, cos(a, b) = a.b / (|a| |b|), in one pass forward and one
 * backward instead of seven ops, with the norms saved for backward:
 *   d cos / d a = b / (|a||b|) - cos a / |a|^2   (and the same for b).
 * main() learns vectors whose cosine with fixed targets is 1.
 * tests/test_custom_op.c includes this file and gradchecks the op in f64. */
#include "attngrad.h"

#include <math.h>
#include <stdio.h>

/* |a| and |b| of each row, floored at eps so a zero row gives 0, not NaN. */
static const double COS_EPS = 1e-8;

static void cosine_forward(ag_custom_call *c) {
    const ag_tensor *a = c->in[0], *b = c->in[1];
    int d = a->shape[a->ndim - 1];
    int64_t rows = c->out->size;
    ag_tensor *norms = ag_tensor_new(1, (int[]){(int)(2 * rows)}); /* step memory, kept for backward */
    for (int64_t r = 0; r < rows; r++) {
        const ag_real *x = a->data + r * d, *y = b->data + r * d;
        double dot = 0, xx = 0, yy = 0;
        for (int i = 0; i < d; i++) dot += x[i] * y[i], xx += x[i] * x[i], yy += y[i] * y[i];
        double nx = fmax(sqrt(xx), COS_EPS), ny = fmax(sqrt(yy), COS_EPS);
        norms->data[2 * r] = (ag_real)nx;
        norms->data[2 * r + 1] = (ag_real)ny;
        c->out->data[r] = (ag_real)(dot / (nx * ny));
    }
    c->saved = norms->data;
}

static void cosine_backward(ag_custom_call *c) {
    const ag_tensor *a = c->in[0], *b = c->in[1];
    const ag_real *norms = c->saved;
    int d = a->shape[a->ndim - 1];
    for (int64_t r = 0; r < c->out->size; r++) {
        const ag_real *x = a->data + r * d, *y = b->data + r * d;
        double nx = norms[2 * r], ny = norms[2 * r + 1], cos = c->out->data[r], g = c->grad_out[r];
        for (int i = 0; i < d; i++) {
            if (c->grad_in[0]) c->grad_in[0][r * d + i] += (ag_real)(g * (y[i] / (nx * ny) - cos * x[i] / (nx * nx)));
            if (c->grad_in[1]) c->grad_in[1][r * d + i] += (ag_real)(g * (x[i] / (nx * ny) - cos * y[i] / (ny * ny)));
        }
    }
}

static const ag_custom_fn cosine_fn = {"cosine_similarity", cosine_forward, cosine_backward, 0};

/* a, b [..., d] of the same shape -> [...].  Called through AG_AT like the
 * library's ops, its errors would name the caller's line. */
ag_tensor *cosine_similarity(ag_tensor *a, ag_tensor *b) {
    if (!ag_same_shape(a, b) || a->ndim < 1) {
        char sa[64], sb[64];
        ag_fatal("cosine_similarity", "shapes %s and %s differ (want the same [..., d])", ag_shape_str(a, sa, sizeof sa),
                 ag_shape_str(b, sb, sizeof sb));
    }
    return ag_custom_op(&cosine_fn, (ag_tensor *[]){a, b}, 2, a->ndim - 1, a->shape, NULL, 0);
}

#ifndef CUSTOM_OP_NO_MAIN
int main(void) {
    ag_params ps = {0};
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    ag_tensor *v = ag_param(&ps, "v", 2, (int[]){4, 3});
    ag_init_normal(v, 0, 1, &rng);
    const ag_real targets[12] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
    for (int step = 0; step <= 200; step++) {
        ag_tensor *t = ag_tensor_from(targets, 2, (int[]){4, 3});
        ag_tensor *loss = ag_mean(ag_neg(cosine_similarity(v, t))); /* -mean cos: -1 when aligned */
        ag_params_zero_grad(&ps);
        ag_backward(loss);
        for (int64_t i = 0; i < v->size; i++) v->data[i] -= 0.5f * v->grad[i];
        if (step % 50 == 0) printf("step %3d  mean cosine %.4f\n", step, -(double)ag_item(loss));
        ag_step_end();
    }
    ag_params_free(&ps);
    ag_shutdown();
    return 0;
}
#endif
