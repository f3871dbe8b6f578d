/* test_optim_lamb.c - update rules with sums over the whole parameter
 * (ag_optim_rule.sum, rule API 2), with examples/lamb.c's LAMB compiled in:
 *   - its updates against LAMB's formula computed here in double, over
 *     several steps: the trust ratio with and without weight decay,
 *     always_adapt, trust_clip, a parameter whose values start at 0 (ratio
 *     1), per-parameter weight decay, clipping and a per-step schedule
 *     (f64: to 1e-13), and that the ratio mattered;
 *   - a parameter of 19 blocks against the formula (one ratio for the whole
 *     parameter, not one a piece), and the same bits at 1 and 2 threads;
 *   - a parameter's rate scale (ag_optim_set_lr_scale) is LAMB at lr * s, its
 *     ratio its own;
 *   - a step the training step's gate skips changes nothing (the sum pass
 *     writes the moments, so it is skipped too);
 *   - no allocation once warm;
 *   - the spec (defaults, format and back, lazy=1 refused by name) and the
 *     registry's refusals of malformed sums; a rule of API 1 is read no
 *     further than its struct went.
 *
 *   test_optim_lamb_f32, test_optim_lamb_f64 */
#include "optim_util.h"
#include "optim_step_cases.h"
#include "../examples/lamb.c"
#include "lr_scale_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define TOL (IS_F64 ? 1e-13 : 3e-6)

static ag_optim_kind lamb_kind(void) {
    ag_optim_kind k = AG_SGD;
    CHECK(ag_optim_find("lamb", &k) && k >= AG_OPTIM_RULE_FIRST, "lamb is a registered kind");
    return k;
}

/* ---- the registry and the spec ---- */

static void noop_update(ag_real *p, const ag_real *g, ag_real *const *slot, int64_t n, const ag_optim_args *a) {
    (void)p, (void)g, (void)slot, (void)n, (void)a;
}
static void noop_sum(const ag_real *p, const ag_real *g, ag_real *const *slot, int64_t n, const ag_optim_args *a,
                     double *sums) {
    (void)p, (void)g, (void)slot, (void)n, (void)a, (void)sums;
}

static void test_register(void) {
    CHECK(ag_optim_register(&lamb_rule) == AG_OK, "%s", ag_errmsg());
    CHECK(ag_optim_rule_of(lamb_kind()) == &lamb_rule);
    static const ag_optim_rule no_sum = {.abi = AG_OPTIM_RULE_ABI, .name = "no_sum", .update = noop_update, .n_sums = 2};
    static const ag_optim_rule no_count = {.abi = AG_OPTIM_RULE_ABI, .name = "no_count", .update = noop_update,
                                           .sum = noop_sum};
    static const ag_optim_rule too_many = {.abi = AG_OPTIM_RULE_ABI, .name = "too_many", .update = noop_update,
                                           .n_sums = AG_OPTIM_MAX_SUMS + 1, .sum = noop_sum};
    static const ag_optim_rule negative = {.abi = AG_OPTIM_RULE_ABI, .name = "negative", .update = noop_update,
                                           .n_sums = -1, .sum = noop_sum};
    EXPECT_ERROR(ag_optim_register(&no_sum), AG_ERR_ARG, "rule 'no_sum': .n_sums 2 and .sum NULL", "or neither");
    EXPECT_ERROR(ag_optim_register(&no_count), AG_ERR_ARG, "rule 'no_count': .n_sums 0 and .sum set");
    EXPECT_ERROR(ag_optim_register(&too_many), AG_ERR_ARG, "rule 'too_many': .n_sums 5", "1 to 4 sums");
    EXPECT_ERROR(ag_optim_register(&negative), AG_ERR_ARG, "rule 'negative': .n_sums -1");
    ag_optim_kind k;
    CHECK(!ag_optim_find("no_sum", &k) && !ag_optim_find("too_many", &k), "a refused rule was registered");
    /* a rule built against API 1 ends before .n_sums: whatever follows its struct is not read */
    static const ag_optim_rule api1 = {.abi = 100 + (int)sizeof(ag_real), .name = "api1", .update = noop_update,
                                       .n_sums = 77};
    CHECK(ag_optim_register(&api1) == AG_OK, "a rule of API 1: %s", ag_errmsg());
    ag_optim_config c;
    CHECK(ag_optim_parse("api1:lazy=1", &c) == AG_OK, "an API 1 rule has no sums, so lazy=1 is its to take: %s",
          ag_errmsg());
}

static void test_specs(void) {
    ag_optim_config c, d;
    char spec[256];
    CHECK(ag_optim_parse("lamb", &c) == AG_OK && c.kind == lamb_kind() && c.lr == 1e-3 && c.weight_decay == 0.01 &&
              c.hparam[BETA1] == 0.9 && c.hparam[BETA2] == 0.999 && c.hparam[EPS] == 1e-6 &&
              c.hparam[ALWAYS_ADAPT] == 0 && c.hparam[TRUST_CLIP] == 0, "%s", ag_errmsg());
    CHECK(!strcmp(ag_optim_format(&c, spec, sizeof spec),
                  "lamb:lr=0.001,beta1=0.9,beta2=0.999,eps=1e-06,always_adapt=0,trust_clip=0,weight_decay=0.01"),
          "%s", spec);
    CHECK(ag_optim_parse("lamb:lr=0.02,eps=1e-3,trust_clip=1,ema=0.9", &c) == AG_OK, "%s", ag_errmsg());
    ag_optim_format(&c, spec, sizeof spec);
    CHECK(ag_optim_parse(spec, &d) == AG_OK && d.lr == c.lr && !memcmp(d.hparam, c.hparam, sizeof c.hparam) &&
              d.ema == c.ema, "round trip of %s", spec);
    EXPECT_ERROR(ag_optim_parse("lamb:lazy=1", &c), AG_ERR_ARG, "optimizer 'lamb': lazy=1 is not for a rule with sums",
                 "leave its skipped rows out");
    EXPECT_ERROR(ag_optim_parse("lamb:always_adapt=0.5", &c), AG_ERR_ARG, "optimizer 'lamb': always_adapt 0.5");
    EXPECT_ERROR(ag_optim_parse("lamb:eps=0", &c), AG_ERR_ARG, "optimizer 'lamb': eps 0 must be");
}

/* ---- against the formula ----
 * w [4, 3] and z [1, 2] with the config's weight decay (z's values start at
 * 0: its first ratio is 1), b [3] with none (a bias: Adam's step unless
 * always_adapt); gradients from a quadratic, so that they follow the values. */
enum { NW = 12, NZ = 2, NB = 3, N_ALL = NW + NZ + NB, STEPS = 7 };

typedef struct {
    double x[N_ALL], m[N_ALL], v[N_ALL];
} lamb_ref;

static int param_of(int k) { return k < NW ? 0 : k < NW + NZ ? 1 : 2; }
static const int first_of[4] = {0, NW, NW + NZ, N_ALL};

static double grad_of(int k, double x) { return (0.3 + 0.2 * k) * (x - 0.5 * sin(1.0 + k)) + (k % 4 == 1 ? 1e-3 : 0); }

/* One step in double: torch's clipping, then per parameter the moments, r,
 * the ratio over the whole parameter, the update.  ratio = false: q = 1. */
static void ref_step(lamb_ref *r, const ag_optim_config *c, double lr, double clip, int t, bool ratio) {
    double g[N_ALL], sq = 0;
    for (int k = 0; k < N_ALL; k++) g[k] = grad_of(k, r->x[k]), sq += g[k] * g[k];
    double coef = clip / (sqrt(sq) + 1e-6);
    const double b1 = c->hparam[BETA1], b2 = c->hparam[BETA2], eps = c->hparam[EPS];
    const double c1 = 1 - pow(b1, t), c2 = 1 - pow(b2, t);
    for (int p = 0; p < 3; p++) {
        double wd = p == 2 ? 0 : c->weight_decay, step[N_ALL], xsq = 0, rsq = 0;
        for (int k = first_of[p]; k < first_of[p + 1]; k++) {
            double gk = coef < 1 ? g[k] * coef : g[k];
            r->m[k] = b1 * r->m[k] + (1 - b1) * gk;
            r->v[k] = b2 * r->v[k] + (1 - b2) * gk * gk;
            step[k] = (r->m[k] / c1) / (sqrt(r->v[k]) / sqrt(c2) + eps) + wd * r->x[k];
            xsq += r->x[k] * r->x[k], rsq += step[k] * step[k];
        }
        double q = 1;
        if (ratio && (wd != 0 || c->hparam[ALWAYS_ADAPT] != 0) && xsq > 0 && rsq > 0) q = sqrt(xsq) / sqrt(rsq);
        if (c->hparam[TRUST_CLIP] != 0 && q > 1) q = 1;
        for (int k = first_of[p]; k < first_of[p + 1]; k++) r->x[k] -= lr * q * step[k];
    }
}

static ag_real *element(ag_tensor *const *t, int k) { return &t[param_of(k)]->data[k - first_of[param_of(k)]]; }

/* The worst difference from the reference (relative above 1) over STEPS steps. */
static double lamb_case(const char *spec, bool ratio) {
    ag_params ps = {0};
    ag_tensor *t[3] = {ag_param(&ps, "w", 2, (int[]){4, 3}), ag_param(&ps, "z", 2, (int[]){1, NZ}),
                       ag_param(&ps, "b", 1, (int[]){NB})};
    lamb_ref r = {0};
    for (int k = 0; k < N_ALL; k++) {
        *element(t, k) = (ag_real)(param_of(k) == 1 ? 0 : 1.1 - 0.17 * k);
        r.x[k] = (double)*element(t, k);
    }
    ag_optim_config c;
    CHECK(ag_optim_parse(spec, &c) == AG_OK, "%s: %s", spec, ag_errmsg());
    ag_optimizer o;
    CHECK(ag_optim_init(&o, &ps, &c) == AG_OK, "%s", ag_errmsg());
    CHECK(o.n_slots == 2 && !strcmp(ag_optim_slot_name(&o, 1), "v"));
    CHECK(ag_optim_set_weight_decay(&o, ag_param_is_bias_or_norm, NULL, 0) == 1); /* b */
    ag_lr_steps warm;
    CHECK(ag_lr_steps_parse("linear:warmup=3,total=10,min_ratio=0.2", &warm) == AG_OK, "%s", ag_errmsg());
    const double clip = 0.8;
    double worst = 0;
    for (int step = 1; step <= STEPS; step++) {
        for (int k = 0; k < N_ALL; k++) {
            int p = param_of(k);
            t[p]->grad[k - first_of[p]] = (ag_real)grad_of(k, (double)*element(t, k));
        }
        double lr = ag_lr_steps_apply(&warm, &o, c.lr);
        ag_clip_grad_norm(&ps, clip);
        ag_optim_step(&o);
        ag_step_end();
        ref_step(&r, &c, lr, clip, step, ratio);
        const char *names[3] = {"w", "z", "b"};
        for (int k = 0; k < N_ALL; k++) {
            int p = param_of(k);
            double got[3] = {(double)*element(t, k), (double)ag_optim_state(&o, names[p], "m")[k - first_of[p]],
                             (double)ag_optim_state(&o, names[p], "v")[k - first_of[p]]};
            double want[3] = {r.x[k], r.m[k], r.v[k]};
            for (int i = 0; i < 3; i++) worst = fmax(worst, isnan(got[i]) ? INFINITY : fabs(got[i] - want[i]) / fmax(1, fabs(want[i])));
        }
    }
    printf("  %-66s %d steps: worst error %.3g\n", spec, STEPS, worst);
    ag_optim_free(&o);
    ag_params_free(&ps);
    return worst;
}

static void test_reference(void) {
    const char *specs[] = {"lamb:lr=0.05,weight_decay=0.05",
                           "lamb:lr=0.02,beta1=0.5,beta2=0.9,eps=1e-3,weight_decay=0.1,always_adapt=1",
                           "lamb:lr=0.05,weight_decay=0.3,trust_clip=1",
                           "lamb:lr=0.05,weight_decay=0"}; /* no ratio anywhere: Adam's step, eps as torch's */
    for (int i = 0; i < 4; i++) {
        double worst = lamb_case(specs[i], true);
        CHECK(worst <= TOL, "%s: worst error %.3g over %d steps (tolerance %g)", specs[i], worst, STEPS, TOL);
    }
    /* the ratios matter: the same steps with q = 1 are far from them */
    double plain = lamb_case("lamb:lr=0.05,weight_decay=0.05", false);
    CHECK(plain > 1e-3, "LAMB matches the reference without its trust ratio (%.3g): the test sees no ratio", plain);
}

/* A rule's ag_optim_args.lr is the parameter's own rate, and its sums its
 * own: a scale s on b updates it as LAMB at lr * s (scale 0: not at all). */
static void test_lr_scale(void) {
    lr_scale_case("lamb:lr=0.01,weight_decay=0.1", 0.25, AG_CPU, 6);
    lr_scale_case("lamb:lr=0.01,weight_decay=0.1,always_adapt=1", 0, AG_CPU, 6);
}

/* ---- a parameter of many blocks: one ratio over all of it, any thread count ---- */

static double big_grad(int64_t k, int step) { return 0.01 * (double)((k * 7 + step) % 23) - 0.1 + 0.05 * (k % 1000 == 0); }

static void big_grads(ag_params *ps, int step) {
    for (int i = 0; i < ps->count; i++)
        for (int64_t k = 0; k < ps->items[i]->size; k++) ps->items[i]->grad[k] = (ag_real)big_grad(k, step);
}

static void test_blocks(void) {
    const char *spec = "lamb:lr=0.01,weight_decay=0.1";
    ag_optim_config c;
    CHECK(ag_optim_parse(spec, &c) == AG_OK);
    ag_params ps = {0};
    ag_optimizer o;
    big_params(&ps);
    double *x = malloc(BIG_N * sizeof *x), *m = calloc(BIG_N, sizeof *m), *v = calloc(BIG_N, sizeof *v);
    for (int64_t k = 0; k < BIG_N; k++) x[k] = (double)ps.items[0]->data[k];
    CHECK(ag_optim_init(&o, &ps, &c) == AG_OK, "%s", ag_errmsg());
    double worst = 0;
    for (int step = 1; step <= 3; step++) {
        big_grads(&ps, step);
        ag_optim_step(&o);
        ag_step_end();
        double c1 = 1 - pow(0.9, step), c2 = 1 - pow(0.999, step), xsq = 0, rsq = 0;
        for (int64_t k = 0; k < BIG_N; k++) { /* e against the formula: its step first, then the one ratio */
            double g = (double)(ag_real)big_grad(k, step);
            m[k] = 0.9 * m[k] + 0.1 * g, v[k] = 0.999 * v[k] + 0.001 * g * g;
            xsq += x[k] * x[k];
            double r = (m[k] / c1) / (sqrt(v[k]) / sqrt(c2) + 1e-6) + 0.1 * x[k];
            rsq += r * r;
        }
        double q = sqrt(xsq) / sqrt(rsq);
        for (int64_t k = 0; k < BIG_N; k++) {
            double r = (m[k] / c1) / (sqrt(v[k]) / sqrt(c2) + 1e-6) + 0.1 * x[k];
            x[k] -= 0.01 * q * r;
            worst = fmax(worst, fabs((double)ps.items[0]->data[k] - x[k]));
        }
    }
    printf("  %s, a [%d, %d] parameter, 3 steps: worst error %.3g\n", spec, BIG_ROWS, BIG_COLS, worst);
    CHECK(worst <= TOL, "the [%d, %d] parameter against the formula: worst error %.3g", BIG_ROWS, BIG_COLS, worst);
    ag_optim_free(&o), ag_params_free(&ps);
    free(x), free(m), free(v);
}

int main(void) {
    printf("%s build\n", IS_F64 ? "f64" : "f32");
    test_register();
    test_specs();
    test_reference();
    test_lr_scale();
    test_blocks();
    threads_case("lamb:lr=0.01,weight_decay=0.1", big_grads, 3, 0);
    gate_and_memory_case("lamb:weight_decay=0.1", big_grads, 20);
    ag_shutdown();
    return check_summary("optim_lamb");
}
