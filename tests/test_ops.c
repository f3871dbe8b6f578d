/* test_ops.c - runs every op case: an f64 gradient check (default), or a
 * dump of forward values (--dump) that f32_vs_f64 compares across builds.
 * An optional argument filters cases by substring. */
#include "check.h"
#include "opcase.h"

#include <stdio.h>
#include <string.h>

static const op_case *const *case_sets(void) {
    static const op_case *const sets[] = {core_cases, shape_cases, attention_cases, seq_cases, feature_cases, NULL};
    return sets;
}

typedef struct {
    const op_case *c;
    ag_tensor **in;
} run_ctx;

static ag_tensor *run_forward(void *p) {
    run_ctx *r = p;
    return r->c->forward(r->in);
}

static void gradcheck_case(const op_case *c) {
    ag_tensor *in[OPCASE_MAX_INPUTS] = {0}, *wrt[OPCASE_MAX_INPUTS];
    ag_rng rng;
    ag_rng_seed(&rng, 42);
    int n = c->setup(in, &rng), nw = 0;
    for (int i = 0; i < n; i++)
        if (in[i]->requires_grad) wrt[nw++] = in[i];
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    if (c->atol) o.atol = c->atol;
    if (c->rtol) o.rtol = c->rtol;
    run_ctx ctx = {c, in};
    ag_gradcheck_result r = ag_gradcheck(run_forward, &ctx, wrt, nw, &o);
    printf("  %-40s %6lld checked  max rel err %.2e\n", c->name, (long long)r.checked, r.max_rel_err);
    CHECK(nw > 0, "%s: no input requires grad", c->name);
    CHECK(r.ok, "%s: input %d element %lld: analytic %.12g numeric %.12g", c->name, r.worst_input,
          (long long)r.worst_index, r.analytic, r.numeric);
    ag_step_end();
}

static void dump_case(const op_case *c) {
    ag_tensor *in[OPCASE_MAX_INPUTS] = {0};
    ag_rng rng;
    ag_rng_seed(&rng, 42);
    c->setup(in, &rng);
    ag_tensor *out = c->forward(in);
    printf("case %s %lld\n", c->name, (long long)out->size);
    for (int64_t i = 0; i < out->size; i++) printf("%.10e\n", (double)out->data[i]);
    ag_step_end();
}

int main(int argc, char **argv) {
    bool dump = argc > 1 && strcmp(argv[1], "--dump") == 0;
    const char *filter = argc > 1 + dump ? argv[1 + dump] : NULL;
    if (!dump && sizeof(ag_real) != sizeof(double)) {
        fprintf(stderr, "gradient checks run in the f64 build\n");
        return 2;
    }
    for (const op_case *const *set = case_sets(); *set; set++)
        for (const op_case *c = *set; c->name; c++) {
            if (filter && !strstr(c->name, filter)) continue;
            if (dump) dump_case(c);
            else gradcheck_case(c);
        }
    ag_shutdown();
    return dump ? 0 : check_summary("test_ops");
}
