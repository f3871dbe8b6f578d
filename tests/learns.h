/* learns.h - "it learns", for the examples' tests: Adam (lr) on a model's
 * parameters for `steps` steps of loss(ctx, step), the mean loss of the
 * first and of the last 20 steps.  Checks nothing itself: the caller says
 * what counts as learning. */
#ifndef AG_TEST_LEARNS_H
#define AG_TEST_LEARNS_H

#include "attngrad.h"
#include "check.h"

static inline void adam_learns(ag_params *ps, double lr, int steps, ag_tensor *(*loss_of)(void *ctx, int step),
                               void *ctx, double *first, double *last) {
    ag_optimizer opt;
    ag_optim_config cfg = ag_optim_defaults(AG_ADAM);
    cfg.lr = lr;
    CHECK(ag_optim_init(&opt, ps, &cfg) == AG_OK, "%s", ag_errmsg());
    *first = *last = 0;
    for (int step = 0; step < steps; step++) {
        ag_tensor *loss = loss_of(ctx, step);
        ag_params_zero_grad(ps);
        ag_backward(loss);
        ag_optim_step(&opt);
        if (step < 20) *first += ag_item(loss) / 20;
        if (step >= steps - 20) *last += ag_item(loss) / 20;
        ag_step_end();
    }
    ag_optim_free(&opt);
}

#endif
