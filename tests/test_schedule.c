/* test_schedule.c - learning-rate schedules against sequences traced by
 * hand from PyTorch's definitions (StepLR, ExponentialLR, ReduceLROnPlateau),
 * and their option strings. */
#include "optim_util.h"

#include <math.h>
#include <stdio.h>

/* Steps a schedule through `metrics` and compares opt.lr after each epoch. */
static void trace(const char *spec, double lr0, const double *metrics, const double *want, int n) {
    ag_sched_config c;
    CHECK(ag_sched_parse(spec, &c) == AG_OK, "%s: %s", spec, ag_errmsg());
    ag_scheduler s;
    CHECK(ag_sched_init(&s, &c) == AG_OK);
    ag_optimizer opt = {.lr = lr0}; /* schedules only read and write lr */
    for (int e = 0; e < n; e++) {
        double lr = ag_sched_step(&s, &opt, metrics ? metrics[e] : 0);
        CHECK(lr == opt.lr);
        CHECK_NEAR(opt.lr, want[e], 0, 1e-15);
        if (fabs(opt.lr - want[e]) > 1e-15 * want[e]) {
            printf("  %s: epoch %d lr %.17g, want %.17g\n", spec, e + 1, opt.lr, want[e]);
            break;
        }
    }
    CHECK(s.last_epoch == n);
    printf("  %-70s %d epochs\n", spec, n);
}

static void test_step_and_exponential(void) {
    /* StepLR: lr *= gamma at epochs 3, 6, ... */
    const double step[] = {1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125};
    trace("step:step_size=3,gamma=0.5", 1.0, NULL, step, 9);
    const double step1[] = {0.09, 0.081, 0.0729}; /* step_size 1 is exponential decay */
    trace("step:step_size=1,gamma=0.9", 0.1, NULL, step1, 3);
    const double dflt[] = {0.2, 0.02, 0.02, 0.002, 0.002}; /* gamma defaults to 0.1 */
    trace("step:step_size=2", 0.2, NULL, dflt, 5);
    const double expo[] = {0.09, 0.081, 0.0729, 0.06561, 0.059049};
    trace("exponential:gamma=0.9", 0.1, NULL, expo, 5);
    const double keep[] = {0.3, 0.3, 0.3};
    trace("constant", 0.3, NULL, keep, 3);
}

static void test_plateau(void) {
    /* min, rel threshold 0.1: an improvement must beat best * 0.9.
     * patience 2: the third bad epoch in a row cuts the rate; cooldown 1
     * swallows the epoch after a cut; min_lr 0.1 floors it, and a cut
     * smaller than eps is skipped.  Traced by hand:
     *  e1 10  better (best 10)        e2 9.5 bad 1 (9.5 >= 9)
     *  e3 8.9 better (best 8.9)       e4 9, e5 8.5: bad 1, 2 (>= 8.01)
     *  e6 8.2 bad 3 > 2: lr 0.5, cooldown 1
     *  e7 cooldown (bad reset)        e8, e9 bad 1, 2
     *  e10 cut to 0.25   e11 cooldown  e12, e13 bad  e14 cut to 0.125
     *  e15 cooldown  e16, e17  e18 cut to max(0.0625, 0.1) = 0.1
     *  e19 cooldown  e20, e21  e22 "cut" to max(0.05, 0.1) = 0.1: no change
     *  e23 1.0 better (best 1.0)      e24 0.95 bad (>= 0.9) */
    const double m1[] = {10, 9.5, 8.9, 9, 8.5, 8.2, 8.1, 8.3, 8.3, 8.3, 8.3, 8.3,
                         8.3, 8.3, 8.3, 8.3, 8.3, 8.3, 8.3, 8.3, 8.3, 8.3, 1.0, 0.95};
    const double l1[] = {1, 1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25,
                         0.25, 0.125, 0.125, 0.125, 0.125, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1};
    trace("plateau:mode=min,factor=0.5,patience=2,threshold=0.1,cooldown=1,min_lr=0.1", 1.0, m1, l1, 24);

    /* max, abs threshold 0.5, patience 0: any epoch not beating best + 0.5
     * cuts at once.  e1 1 better; e2 1.4 < 1.5 cut; e3 1.6 > 1.5 better;
     * e4 2.0 < 2.1 cut; e5 3 better; e6 3.5 <= 3.5 (not strictly) cut */
    const double m2[] = {1, 1.4, 1.6, 2.0, 3, 3.5};
    const double l2[] = {1, 0.1, 0.1, 0.01, 0.01, 0.001};
    trace("plateau:mode=max,threshold_mode=abs,threshold=0.5,patience=0", 1.0, m2, l2, 6);

    /* defaults: patience 10, factor 0.1, rel 1e-4: a flat metric cuts on
     * the 11th bad epoch, i.e. epoch 12 (epoch 1 sets best) */
    double m3[30], l3[30];
    for (int e = 0; e < 30; e++) {
        m3[e] = 5.0;
        l3[e] = e < 11 ? 1.0 : e < 22 ? 0.1 : 0.1 * 0.1;
    }
    trace("plateau", 1.0, m3, l3, 30);

    /* rel mode scales best even when it is negative, as PyTorch does:
     * min with best -1 needs a < -1 * (1 - 0.5) = -0.5, so -0.6 improves */
    const double m4[] = {-1, -0.6, -0.2, -0.2};
    const double l4[] = {1, 1, 0.1, 0.01};
    trace("plateau:threshold=0.5,patience=0", 1.0, m4, l4, 4);

    /* eps: a cut from 1e-9 to 5e-10 changes less than 1e-8 and is skipped */
    const double m5[] = {1, 2, 3};
    const double l5[] = {1e-9, 1e-9, 1e-9};
    trace("plateau:factor=0.5,patience=0", 1e-9, m5, l5, 3);
    const double l6[] = {1e-9, 5e-10, 2.5e-10};
    trace("plateau:factor=0.5,patience=0,eps=0", 1e-9, m5, l6, 3);

    /* NaN never improves */
    const double m7[] = {NAN, NAN};
    const double l7[] = {0.1, 0.01};
    trace("plateau:patience=0", 1.0, m7, l7, 2);
}

static bool same_config(const ag_sched_config *a, const ag_sched_config *b) {
    return a->kind == b->kind && a->step_size == b->step_size && (a->gamma == b->gamma || (isnan(a->gamma) && isnan(b->gamma))) &&
           a->mode_max == b->mode_max && a->factor == b->factor && a->patience == b->patience &&
           a->threshold == b->threshold && a->threshold_abs == b->threshold_abs && a->cooldown == b->cooldown &&
           a->min_lr == b->min_lr && a->eps == b->eps;
}

static void test_parse(void) {
    ag_sched_config c;
    CHECK(ag_sched_parse("plateau", &c) == AG_OK);
    CHECK(c.kind == AG_SCHED_PLATEAU && !c.mode_max && c.factor == 0.1 && c.patience == 10 && c.threshold == 1e-4 &&
          !c.threshold_abs && c.cooldown == 0 && c.min_lr == 0 && c.eps == 1e-8);
    CHECK(ag_sched_parse("plateau:mode=max,threshold_mode=abs,factor=0.5,patience=5", &c) == AG_OK);
    CHECK(c.mode_max && c.threshold_abs && c.factor == 0.5 && c.patience == 5);
    CHECK(ag_sched_parse("step:step_size=30", &c) == AG_OK && c.step_size == 30 && c.gamma == 0.1);
    EXPECT_ERROR(ag_sched_parse("step", &c), AG_ERR_ARG, "step_size");
    EXPECT_ERROR(ag_sched_parse("step:step_size=0", &c), AG_ERR_ARG, "step_size");
    EXPECT_ERROR(ag_sched_parse("step:step_size=2.5", &c), AG_ERR_ARG, "'step_size'", "2.5");
    EXPECT_ERROR(ag_sched_parse("exponential", &c), AG_ERR_ARG, "gamma");
    EXPECT_ERROR(ag_sched_parse("plateau:mode=median", &c), AG_ERR_ARG, "'mode'", "median", "'min' or 'max'");
    EXPECT_ERROR(ag_sched_parse("plateau:threshold_mode=relative", &c), AG_ERR_ARG, "'threshold_mode'");
    EXPECT_ERROR(ag_sched_parse("plateau:factor=1", &c), AG_ERR_ARG, "factor");
    EXPECT_ERROR(ag_sched_parse("plateau:patience=-1", &c), AG_ERR_ARG, "patience");
    EXPECT_ERROR(ag_sched_parse("plateau:gamma=0.5", &c), AG_ERR_ARG, "'gamma'");
    EXPECT_ERROR(ag_sched_parse("constant:gamma=0.5", &c), AG_ERR_ARG, "'gamma'", "no keys");
    EXPECT_ERROR(ag_sched_parse("cosine", &c), AG_ERR_ARG, "'cosine'");
    const char *specs[] = {"constant", "step:step_size=7,gamma=0.3", "exponential:gamma=0.95",
                           "plateau:mode=max,factor=0.5,patience=5,threshold=0.01,threshold_mode=abs,cooldown=2,min_lr=1e-5,eps=1e-9"};
    for (int i = 0; i < 4; i++) {
        ag_sched_config a, b;
        char buf[512];
        CHECK(ag_sched_parse(specs[i], &a) == AG_OK);
        ag_sched_format(&a, buf, sizeof buf);
        CHECK(ag_sched_parse(buf, &b) == AG_OK && same_config(&a, &b), "'%s' -> '%s'", specs[i], buf);
        if (i == 3) CHECK(!strcmp(buf, "plateau:mode=max,factor=0.5,patience=5,threshold=0.01,threshold_mode=abs,"
                                       "cooldown=2,min_lr=1e-05,eps=1e-09"), "%s", buf);
    }
}

/* Per-step schedules: values from their formulas at chosen steps, the
 * warm-up's ramp, and the specs. */
static void test_per_step(void) {
    ag_lr_steps s;
    CHECK(ag_lr_steps_parse("cosine:warmup=4,total=12,min_ratio=0.1", &s) == AG_OK, "%s", ag_errmsg());
    CHECK(s.decay == AG_LR_COSINE && s.warmup == 4 && s.total == 12 && s.min_ratio == 0.1);
    const double cosine[] = {0.25, 0.5, 0.75, 1, 0.1 + 0.9 * (1 + cos(M_PI / 8)) / 2, 0.1 + 0.9 * (1 + cos(M_PI / 4)) / 2};
    for (int t = 1; t <= 6; t++) CHECK_NEAR(ag_lr_steps_factor(&s, t), cosine[t - 1], 1e-15, 1e-15);
    CHECK_NEAR(ag_lr_steps_factor(&s, 8), 0.55, 1e-15, 1e-15); /* halfway */
    CHECK_NEAR(ag_lr_steps_factor(&s, 12), 0.1, 1e-15, 1e-15);
    CHECK_NEAR(ag_lr_steps_factor(&s, 100), 0.1, 1e-15, 1e-15); /* stays at the floor */

    CHECK(ag_lr_steps_parse("inv_sqrt:warmup=4", &s) == AG_OK);
    CHECK_NEAR(ag_lr_steps_factor(&s, 2), 0.5, 0, 1e-15);
    CHECK_NEAR(ag_lr_steps_factor(&s, 4), 1, 0, 1e-15);
    CHECK_NEAR(ag_lr_steps_factor(&s, 16), 0.5, 0, 1e-15);
    /* the Transformer's rate: d^-0.5 min(t^-0.5, t w^-1.5), d = 512, w = 4 */
    for (int t = 1; t <= 40; t += 3)
        CHECK_NEAR(pow(512, -0.5) * pow(4, -0.5) * ag_lr_steps_factor(&s, t),
                   pow(512, -0.5) * fmin(pow(t, -0.5), t * pow(4, -1.5)), 1e-16, 1e-14);
    CHECK(ag_lr_steps_parse("inv_sqrt", &s) == AG_OK);
    CHECK_NEAR(ag_lr_steps_factor(&s, 9), 1.0 / 3, 0, 1e-15);

    CHECK(ag_lr_steps_parse("linear:total=10", &s) == AG_OK);
    CHECK_NEAR(ag_lr_steps_factor(&s, 1), 0.9, 0, 1e-15);
    CHECK_NEAR(ag_lr_steps_factor(&s, 10), 0, 1e-15, 0);
    CHECK(ag_lr_steps_parse("constant:warmup=10", &s) == AG_OK);
    CHECK_NEAR(ag_lr_steps_factor(&s, 5), 0.5, 0, 1e-15);
    CHECK(ag_lr_steps_factor(&s, 11) == 1);

    /* apply sets the coming step's rate from the optimizer's step */
    ag_optimizer opt = {.lr = 1, .step = 4};
    CHECK_NEAR(ag_lr_steps_apply(&s, &opt, 0.2), 0.1, 0, 1e-15); /* step 5 of 10 warm-up steps */
    CHECK(opt.lr == ag_lr_steps_factor(&s, 5) * 0.2);

    char buf[128];
    CHECK(ag_lr_steps_parse("cosine:total=100,warmup=10", &s) == AG_OK);
    CHECK(!strcmp(ag_lr_steps_format(&s, buf, sizeof buf), "cosine:warmup=10,total=100,min_ratio=0"), "%s", buf);
    CHECK(ag_lr_steps_parse("cosine:warmup=10", &s) == AG_ERR_ARG && strstr(ag_errmsg(), "total"), "%s", ag_errmsg());
    CHECK(ag_lr_steps_parse("inv_sqrt:total=5", &s) == AG_ERR_ARG && strstr(ag_errmsg(), "total"), "%s", ag_errmsg());
    CHECK(ag_lr_steps_parse("noam", &s) == AG_ERR_ARG && strstr(ag_errmsg(), "inv_sqrt"), "%s", ag_errmsg());
    CHECK(ag_lr_steps_parse("linear:total=10,min_ratio=2", &s) == AG_ERR_ARG, "%s", ag_errmsg());

    /* SGDR: cycles of 4, 8, 16 steps after 2 of warm-up, each from 1 down
     * toward 0.1, as torch's CosineAnnealingWarmRestarts(T_0=4, T_mult=2,
     * eta_min=0.1 base) gives at epoch u = t - warmup, the steps since the
     * warm-up, through the cycles */
    CHECK(ag_lr_steps_parse("cosine_restarts:warmup=2,period=4,mult=2,min_ratio=0.1", &s) == AG_OK, "%s", ag_errmsg());
    CHECK_NEAR(ag_lr_steps_factor(&s, 1), 0.5, 0, 1e-15);
    static const struct { int t; double u, T; } at[] = {{2, 0, 4}, {4, 2, 4}, {5, 3, 4}, {6, 0, 8}, {10, 4, 8},
                                                         {13, 7, 8}, {14, 0, 16}, {22, 8, 16}, {30, 0, 32}};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++)
        CHECK_NEAR(ag_lr_steps_factor(&s, at[i].t), 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * at[i].u / at[i].T)), 1e-15, 1e-15);
    CHECK(!strcmp(ag_lr_steps_format(&s, buf, sizeof buf), "cosine_restarts:warmup=2,period=4,mult=2,min_ratio=0.1"),
          "%s", buf);
    CHECK(ag_lr_steps_parse("cosine_restarts:period=3", &s) == AG_OK && s.mult == 1);
    CHECK_NEAR(ag_lr_steps_factor(&s, 3000001), ag_lr_steps_factor(&s, 1), 1e-15, 1e-15); /* every 3 steps alike */
    CHECK_NEAR(ag_lr_steps_factor(&s, 2), 0.5 * (1 + cos(2 * M_PI / 3)), 1e-15, 1e-15); /* u = t without warm-up */
    CHECK(ag_lr_steps_parse("cosine_restarts:mult=2", &s) == AG_ERR_ARG && strstr(ag_errmsg(), "period"), "%s",
          ag_errmsg());
    CHECK(ag_lr_steps_parse("cosine_restarts:period=5,mult=0", &s) == AG_ERR_ARG && strstr(ag_errmsg(), "mult"), "%s",
          ag_errmsg());
    printf("  per-step schedules\n");
}

int main(void) {
    test_per_step();
    test_step_and_exponential();
    test_plateau();
    test_parse();
    ag_shutdown();
    return check_summary("test_schedule");
}
