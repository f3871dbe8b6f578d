/* example_checks.h - the two checks every example model's test makes:
 *   gradcheck_params  its loss's gradient through every parameter against
 *                     central differences (ag_gradcheck's defaults);
 *   adam_halves_loss  "it learns": Adam (lr) on its parameters for `steps`
 *                     steps of loss(ctx, step), the mean loss of the last
 *                     20 steps under half that of the first 20.
 * Both print what they found. */
#ifndef AG_TEST_EXAMPLE_CHECKS_H
#define AG_TEST_EXAMPLE_CHECKS_H

#include "attngrad.h"
#include "check.h"

#include <stdio.h>

static inline void gradcheck_params(ag_forward_fn loss, void *ctx, ag_params *ps) {
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result r = ag_gradcheck(loss, ctx, ps->items, ps->count, &o);
    CHECK(r.ok, "parameter %s element %lld: analytic %.12g numeric %.12g", ps->items[r.worst_input]->name,
          (long long)r.worst_index, r.analytic, r.numeric);
    printf("  gradcheck: %d parameters, %lld elements, max rel err %.2e\n", ps->count, (long long)r.checked,
           r.max_rel_err);
    ag_step_end();
}

static inline void adam_halves_loss(ag_params *ps, double lr, int steps, ag_tensor *(*loss_of)(void *ctx, int step),
                                    void *ctx, const char *task) {
    ag_optimizer opt;
    ag_optim_config cfg = ag_optim_defaults(AG_ADAM);
    cfg.lr = lr;
    CHECK(ag_optim_init(&opt, ps, &cfg) == AG_OK, "%s", ag_errmsg());
    double first = 0, last = 0;
    for (int step = 0; step < steps; step++) {
        ag_tensor *loss = loss_of(ctx, step);
        ag_params_zero_grad(ps);
        ag_backward(loss);
        ag_optim_step(&opt);
        if (step < 20) first += ag_item(loss) / 20;
        if (step >= steps - 20) last += ag_item(loss) / 20;
        ag_step_end();
    }
    ag_optim_free(&opt);
    CHECK(last < 0.5 * first, "%s: the loss went from %.4f to %.4f over %d steps", task, first, last, steps);
    printf("  %s: loss %.4f (first 20 steps) -> %.4f (last 20)\n", task, first, last);
}

#endif
