/* lion.c - the Lion optimizer (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") as a plugin
 * update rule for the attngrad programs.  Per element, with g the gradient and m the one slot:
 *     c = β1 m + (1-β1) g;   θ -= lr (sign(c) + wd θ);   m = β2 m + (1-β2) g
 * Defaults are the paper's: lr 1e-4, β1 0.9, β2 0.99, weight decay 0 (its λ: Lion wants a 3-10x smaller lr
 * and a 3-10x larger weight decay than AdamW).
 *
 *   ninja -C build examples/lion.so examples/lion-f64.so
 *   build/tools/attngrad --plugin build/examples/lion.so train --optim lion:lr=1e-4,weight_decay=0.1 --out runs/lion
 *   build/tools/optim_experiments --plugin build/examples/lion.so --optim lion:lr=3e-4 --optim adam:lr=1e-3
 * (cc -shared -fPIC -O3 -std=c11 -I include examples/lion.c -o lion.so, and again with -DAG_REAL_DOUBLE
 * -o lion-f64.so, builds it outside meson; -O3, as meson's release build: GCC vectorizes the loop, which at -O2
 * it leaves scalar, 4 times slower.)  tests/test_optim_rule.c checks it against the formula above, and
 * tests/test_optim_rule.sh trains and resumes with it through the CLI. */
#include "attngrad.h"

enum { BETA1, BETA2 }; /* a->hparam[] in the order of lion_hparams */

/* The update of n elements of one parameter: each on its own, so the library may cut a parameter anywhere. */
static void lion_update(ag_real *p, const ag_real *g, ag_real *const *slot, int64_t n, const ag_optim_args *a) {
    ag_real *m = slot[0];
    const ag_real b1 = (ag_real)a->hparam[BETA1], b2 = (ag_real)a->hparam[BETA2];
    const ag_real lr = (ag_real)a->lr, wd = (ag_real)a->weight_decay;
    for (int64_t j = 0; j < n; j++) {
        ag_real c = b1 * m[j] + (1 - b1) * g[j];
        ag_real sign = (ag_real)((c > 0) - (c < 0)); /* 0 at 0, as torch.sign */
        p[j] -= lr * (sign + wd * p[j]);
        m[j] = b2 * m[j] + (1 - b2) * g[j];
    }
}

static const ag_optim_hparam lion_hparams[] = {
    {"beta1", 0.9, 0, 1, AG_HPARAM_MAX_OPEN}, /* in [0, 1) */
    {"beta2", 0.99, 0, 1, AG_HPARAM_MAX_OPEN},
    {NULL},
};
static const ag_optim_slot lion_slots[] = {{"m", 0}, {NULL}};

static const ag_optim_rule lion_rule = {
    .abi = AG_OPTIM_RULE_ABI, /* always: the registry checks it */
    .name = "lion",
    .lr = 1e-4, .weight_decay = 0,
    .hparams = lion_hparams, .slots = lion_slots,
    .update = lion_update,
};

/* attngrad --plugin lion.so calls it; a plugin may register model kinds here too (ag_model_register). */
ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_optim_register(&lion_rule); }
