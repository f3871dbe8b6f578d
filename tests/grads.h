/* grads.h - one step of a test's model, for comparing two runs of it (with
 * and without recomputation, on two devices): the loss sum(f(ctx)^2) on the
 * current device, backward, and every parameter's gradient copied out in
 * the order of ps into one malloc'd array (the caller frees it).  ps ends
 * on the CPU (where its gradients are read), and the step ends. */
#ifndef AG_TEST_GRADS_H
#define AG_TEST_GRADS_H

#include "attngrad.h"

#include <stdlib.h>
#include <string.h>

static inline int64_t grads_total(const ag_params *ps) {
    int64_t total = 0;
    for (int p = 0; p < ps->count; p++) total += ps->items[p]->size;
    return total;
}

static inline ag_real *grads_of_sum_squares(ag_params *ps, ag_tensor *(*f)(void *), void *ctx, double *loss) {
    ag_params_zero_grad(ps);
    ag_tensor *l = ag_sum(ag_square(f(ctx)));
    ag_backward(l);
    *loss = ag_item(l);
    ag_params_to(ps, AG_CPU);
    ag_real *g = malloc((size_t)grads_total(ps) * sizeof *g);
    int64_t at = 0;
    for (int p = 0; p < ps->count; at += ps->items[p]->size, p++)
        memcpy(g + at, ps->items[p]->grad, (size_t)ps->items[p]->size * sizeof *g);
    ag_step_end();
    return g;
}

#endif
