/* rule_then_fail_plugin.c - a plugin whose ag_plugin_init registers an
 * optimizer rule and then fails: ag_model_load_plugin must keep it loaded,
 * since the rule stays registered and its update is this plugin's code
 * (tests/test_optim_rule.c steps with it after the failed load). */
#include "attngrad/model.h"

static void halve(ag_real *p, const ag_real *g, ag_real *const *slot, int64_t n, const ag_optim_args *a) {
    (void)g, (void)slot, (void)a;
    for (int64_t j = 0; j < n; j++) p[j] *= (ag_real)0.5;
}

static const ag_optim_rule halve_rule = {.abi = AG_OPTIM_RULE_ABI, .name = "halve", .update = halve};

ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) {
    ag_status st = ag_optim_register(&halve_rule);
    return st ? st : ag_fail(AG_ERR_ARG, "fails after registering its rule");
}
