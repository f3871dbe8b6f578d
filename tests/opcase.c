/* opcase.c - input makers and constants shared by the op case tables. */
#include "opcase.h"

ag_tensor *tc_uniform(ag_rng *rng, double lo, double hi, bool grad, int ndim, const int *shape) {
    ag_tensor *t = ag_tensor_new(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(lo + (hi - lo) * ag_rng_uniform(rng));
    t->requires_grad = grad;
    return t;
}

ag_tensor *tc_away(ag_rng *rng, double lo, double hi, bool grad, int ndim, const int *shape) {
    ag_tensor *t = tc_uniform(rng, lo, hi, grad, ndim, shape);
    for (int64_t i = 0; i < t->size; i++)
        if (ag_rng_next(rng) & 1) t->data[i] = -t->data[i];
    return t;
}

ag_tensor *tc_const_like(const ag_tensor *ref, int ndim, const int *shape, const ag_real *values) {
    ag_tensor *t = ag_tensor_new_host(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = values[i];
    return ag_to(t, ref->device);
}

ag_tensor *tc_to_device_of(const ag_tensor *ref, ag_tensor *host) { return ag_to(host, ref->device); }

ag_tensor *tc_differences[TC_MAX_DIFFERENCES];
int tc_n_differences;

ag_tensor *tc_difference(ag_tensor *diff, ag_tensor *term) {
    if (tc_n_differences < TC_MAX_DIFFERENCES) tc_differences[tc_n_differences++] = diff;
    return term ? ag_add(diff, term) : diff;
}
