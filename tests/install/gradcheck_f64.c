/* gradcheck_f64.c - a program outside the tree that links attngrad-f64
 * (pkg-config attngrad-f64, or dependency('attngrad-f64')) and checks the
 * gradient of a small attention-style expression in double precision.
 * Exit 0 iff the check passes: proof that -DAG_REAL_DOUBLE and the f64
 * library travel together. */
#include <attngrad.h>

#include <stdio.h>

static ag_tensor *w_, *x_;

/* sum(softplus(x W)) with a masked softmax in between: several op families. */
static ag_tensor *forward(void *ctx) {
    (void)ctx;
    ag_tensor *scores = ag_matmul(x_, w_);
    return ag_sum(ag_softplus(ag_softmax(scores)));
}

int main(void) {
    _Static_assert(sizeof(ag_real) == sizeof(double), "built without -DAG_REAL_DOUBLE");
    ag_params params = {0};
    ag_rng rng;
    ag_rng_seed(&rng, 7);
    w_ = ag_param(&params, "w", 2, (int[]){3, 4});
    for (int64_t i = 0; i < w_->size; i++) w_->data[i] = ag_rng_normal(&rng);
    x_ = ag_param(&params, "x", 2, (int[]){2, 3});
    for (int64_t i = 0; i < x_->size; i++) x_->data[i] = ag_rng_normal(&rng);

    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result r = ag_gradcheck(forward, NULL, (ag_tensor *[]){w_, x_}, 2, &o);
    printf("gradcheck (f64, out of tree): %s, max rel err %.2e over %lld elements\n", r.ok ? "ok" : "FAILED",
           r.max_rel_err, (long long)r.checked);
    ag_params_free(&params);
    ag_shutdown();
    return r.ok ? 0 : 1;
}
