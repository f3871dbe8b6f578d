/* test_custom_op.c - a user-written op (examples/custom_op.c, included as
 * is) on the tape: f64 gradient check through both inputs, values and
 * gradients equal to the same function composed of built-in ops, saved
 * state and parameters reaching backward, and the engine's checks applied
 * to it (a stale input, a second backward, a missing backward). */
#define CUSTOM_OP_NO_MAIN
#include "../examples/custom_op.c"

#include "check.h"
#include "fatal.h"

#include <string.h>

static ag_tensor *a, *b;

static ag_tensor *cosine_fn_check(void *ctx) {
    (void)ctx;
    return cosine_similarity(a, b);
}

/* The same with built-in ops: sum(a*b) / sqrt(sum(a*a) sum(b*b)). */
static ag_tensor *cosine_composed(ag_tensor *x, ag_tensor *y) {
    ag_tensor *dot = ag_sum_axis(ag_mul(x, y), -1, false);
    return ag_div(dot, ag_sqrt(ag_mul(ag_sum_axis(ag_square(x), -1, false), ag_sum_axis(ag_square(y), -1, false))));
}

/* y = scale * x with scale from params: params are copied at the call. */
static void scale_forward(ag_custom_call *c) {
    double s = *(const double *)c->params;
    for (int64_t i = 0; i < c->out->size; i++) c->out->data[i] = (ag_real)(s * c->in[0]->data[i]);
    *(double *)c->saved = s; /* saved_bytes of step memory */
}
static void scale_backward(ag_custom_call *c) {
    double s = *(const double *)c->saved;
    for (int64_t i = 0; i < c->out->size; i++) c->grad_in[0][i] += (ag_real)(s * c->grad_out[i]);
}
static const ag_custom_fn scale_fn = {"scale", scale_forward, scale_backward, sizeof(double)};
static const ag_custom_fn no_backward_fn = {"no_backward", scale_forward, NULL, sizeof(double)};

int main(void) {
    ag_params ps = {0};
    ag_rng rng;
    ag_rng_seed(&rng, 3);
    a = ag_param(&ps, "a", 3, (int[]){2, 3, 5});
    b = ag_param(&ps, "b", 3, (int[]){2, 3, 5});
    ag_init_normal(a, 0, 1, &rng);
    ag_init_normal(b, 0, 1, &rng);

    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result r = ag_gradcheck(cosine_fn_check, NULL, (ag_tensor *[]){a, b}, 2, &o);
    CHECK(r.ok, "cosine gradcheck: input %d element %lld analytic %.12g numeric %.12g", r.worst_input,
          (long long)r.worst_index, r.analytic, r.numeric);
    CHECK(r.checked == 60, "checked %lld elements", (long long)r.checked);
    ag_step_end();

    /* the same values and gradients as the composition of built-in ops */
    ag_params_zero_grad(&ps);
    ag_tensor *c1 = cosine_similarity(a, b);
    CHECK(c1->ndim == 2 && c1->shape[0] == 2 && c1->shape[1] == 3 && c1->node && !strcmp(c1->op, "cosine_similarity"));
    ag_real seed[6] = {1, -2, 0.5, 3, -1, 2};
    ag_backward_seeded(c1, seed);
    ag_real ga[30], gb[30];
    memcpy(ga, a->grad, sizeof ga);
    memcpy(gb, b->grad, sizeof gb);
    ag_params_zero_grad(&ps);
    ag_tensor *c2 = cosine_composed(a, b);
    ag_backward_seeded(c2, seed);
    for (int i = 0; i < 6; i++) CHECK_NEAR(c1->data[i], c2->data[i], 1e-14, 1e-14);
    for (int i = 0; i < 30; i++) {
        CHECK_NEAR(ga[i], a->grad[i], 1e-13, 1e-12);
        CHECK_NEAR(gb[i], b->grad[i], 1e-13, 1e-12);
    }
    /* the engine's checks hold for it: a second backward is refused */
    EXPECT_FATAL_AT(ag_backward_seeded(c1, seed), "backward", "second", "cosine_similarity");
    ag_step_end();

    /* params are copied (the caller's variable may change), saved_bytes reach backward */
    ag_params_zero_grad(&ps);
    double s = 2.5;
    ag_tensor *y = ag_custom_op(&scale_fn, &a, 1, a->ndim, a->shape, &s, sizeof s);
    s = 100;
    ag_backward(ag_sum(y));
    CHECK(y->data[7] == 2.5 * a->data[7] && a->grad[7] == 2.5, "y %g grad %g", (double)y->data[7], (double)a->grad[7]);
    /* no input needs a gradient: recorded nowhere, any backward is fine */
    ag_tensor *k = ag_tensor_fill(1, 1, (int[]){3});
    CHECK(ag_custom_op(&no_backward_fn, &k, 1, 1, k->shape, &s, sizeof s)->node == NULL);
    EXPECT_FATAL_AT(ag_custom_op(&no_backward_fn, &a, 1, a->ndim, a->shape, &s, sizeof s), "no_backward",
                    "no backward function");
    ag_step_end();
    /* a tensor of a finished step is refused, naming the custom op it came from */
    ag_tensor *old = cosine_similarity(a, b);
    int old_shape[AG_MAX_DIMS], old_ndim = old->ndim; /* read while it is alive */
    memcpy(old_shape, old->shape, sizeof old_shape);
    ag_step_end();
    EXPECT_FATAL_AT(ag_custom_op(&scale_fn, &old, 1, old_ndim, old_shape, &s, sizeof s), "scale",
                    "cosine_similarity", "finished step");
    ag_step_end();
    EXPECT_FATAL(cosine_similarity(a, ag_tensor_new(1, (int[]){5})), "cosine_similarity", "[2,3,5]", "[5]");
    ag_step_end();
    ag_params_free(&ps);
    ag_shutdown();
    return check_summary("test_custom_op");
}
