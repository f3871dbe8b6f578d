/* test_optim.c - the optimizers against independent f64 references.
 *
 * Each test runs a few steps on a fixed problem (a separable quadratic
 * f = sum_k ½ a_k (x_k - c_k)², or a linear f = sum_k g_k x_k) spread over
 * two parameters, and compares every parameter value with
 *   - a closed form where one exists (SGD and SGD + weight decay on the
 *     quadratic, Adam and AdamW on the linear function), and
 *   - a trajectory computed here, element by element in double, straight
 *     from the formulas of PyTorch's documentation (ref_step below).
 * One test per optimizer and option.  Then: option strings, clipping, the
 * L2 penalty, and zero allocations per step. */
#include "optim_util.h"
#include "../optim/kernels.h"
#include "lr_scale_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h> /* close */

/* f64: only rounding separates the two computations; f32: the optimizer
 * runs in float and drifts from the double reference by a few ulps/step. */
#define ATOL (IS_F64 ? 1e-13 : 2e-6)
#define RTOL (IS_F64 ? 1e-12 : 2e-5)

enum { K = 9 }; /* elements: w [2,3] then b [3] */

typedef struct {
    ag_params ps;
    double a[K], c[K], x0[K];
    bool linear; /* f = sum_k c_k x_k instead of the quadratic */
} problem;

static void problem_init(problem *p, bool linear) {
    memset(p, 0, sizeof *p);
    ag_param(&p->ps, "w", 2, (int[]){2, 3});
    ag_param(&p->ps, "b", 1, (int[]){3});
    for (int k = 0; k < K; k++) {
        p->a[k] = 0.4 + 0.3 * k;            /* curvatures 0.4 .. 2.8 */
        p->c[k] = 0.7 * sin(1.0 + k);       /* minimum, or slope when linear */
        p->x0[k] = 1.1 - 0.29 * k;          /* both signs */
    }
    p->linear = linear;
    for (int k = 0; k < K; k++) *(k < 6 ? &p->ps.items[0]->data[k] : &p->ps.items[1]->data[k - 6]) = (ag_real)p->x0[k];
}

static ag_real *elem(problem *p, int k, bool grad) {
    ag_tensor *t = p->ps.items[k < 6 ? 0 : 1];
    return (grad ? t->grad : t->data) + (k < 6 ? k : k - 6);
}

static double problem_grad(const problem *p, int k, double x) { return p->linear ? p->c[k] : p->a[k] * (x - p->c[k]); }

static void set_grads(problem *p) {
    for (int k = 0; k < K; k++) *elem(p, k, true) = (ag_real)problem_grad(p, k, (double)*elem(p, k, false));
}

/* ---- the reference: PyTorch's documented algorithms, in double ---- */

typedef struct {
    double x[K], s0[K], s1[K], s2[K]; /* momentum | m, v, vmax | v, u | sum | square avg, buffer, grad avg */
    int t;
} reference;

static void ref_step(const ag_optim_config *c, reference *r, const problem *p) {
    r->t++;
    const int t = r->t;
    for (int k = 0; k < K; k++) {
        double x = r->x[k], g = problem_grad(p, k, x), wd = c->weight_decay;
        switch (c->kind) {
        case AG_SGD: {
            g = g + wd * x;
            if (c->momentum != 0) {
                double *b = &r->s0[k];
                *b = t > 1 ? c->momentum * *b + (1 - c->dampening) * g : g;
                g = c->nesterov ? g + c->momentum * *b : *b;
            }
            x = x - c->lr * g;
            break;
        }
        case AG_ADAM:
        case AG_ADAMW: {
            if (c->kind == AG_ADAMW) x = x - c->lr * wd * x;
            else g = g + wd * x;
            double *m = &r->s0[k], *v = &r->s1[k], *vmax = &r->s2[k];
            *m = c->beta1 * *m + (1 - c->beta1) * g;
            *v = c->beta2 * *v + (1 - c->beta2) * g * g;
            double mhat = *m / (1 - pow(c->beta1, t));
            if (c->amsgrad) *vmax = fmax(*vmax, *v);
            double vhat = (c->amsgrad ? *vmax : *v) / (1 - pow(c->beta2, t));
            x = x - c->lr * mhat / (sqrt(vhat) + c->eps);
            break;
        }
        case AG_ADADELTA: {
            g = g + wd * x;
            double *v = &r->s0[k], *u = &r->s1[k];
            *v = *v * c->rho + g * g * (1 - c->rho);
            double dx = sqrt(*u + c->eps) / sqrt(*v + c->eps) * g;
            *u = *u * c->rho + dx * dx * (1 - c->rho);
            x = x - c->lr * dx;
            break;
        }
        case AG_ADAGRAD: { /* torch.optim.Adagrad's algorithm, as its documentation writes it */
            double clr = c->lr / (1 + (t - 1) * c->lr_decay), *sum = &r->s0[k];
            if (t == 1) *sum = c->initial_accumulator_value;
            g = g + wd * x;
            *sum = *sum + g * g;
            x = x - clr * g / (sqrt(*sum) + c->eps);
            break;
        }
        case AG_RMSPROP: { /* torch.optim.RMSprop's */
            double *v = &r->s0[k], *b = &r->s1[k], *gave = &r->s2[k];
            g = g + wd * x;
            *v = c->alpha * *v + (1 - c->alpha) * g * g;
            double vt = *v;
            if (c->centered) {
                *gave = *gave * c->alpha + (1 - c->alpha) * g;
                vt = vt - *gave * *gave;
            }
            if (c->momentum > 0) {
                *b = c->momentum * *b + g / (sqrt(vt) + c->eps);
                x = x - c->lr * *b;
            } else {
                x = x - c->lr * g / (sqrt(vt) + c->eps);
            }
            break;
        }
        case AG_MUON: /* a step over whole matrices, not an element's: tests/test_optim_muon.c */
        case AG_ADAFACTOR: break; /* over whole rows and columns: tests/test_optim_adafactor.c */
        }
        r->x[k] = x;
    }
}

/* Runs `steps` updates of the library's optimizer and of the reference
 * side by side, checking every element after every step. */
static void compare(const char *what, const char *spec, bool linear, int steps) {
    ag_optim_config cfg;
    ag_status st = ag_optim_parse(spec, &cfg);
    CHECK(st == AG_OK, "%s: %s", spec, ag_errmsg());
    problem p;
    problem_init(&p, linear);
    ag_optimizer opt;
    CHECK(ag_optim_init(&opt, &p.ps, &cfg) == AG_OK);
    reference r = {0};
    memcpy(r.x, p.x0, sizeof r.x);
    double worst = 0;
    for (int s = 0; s < steps; s++) {
        set_grads(&p);
        ag_optim_step(&opt);
        ref_step(&cfg, &r, &p);
        for (int k = 0; k < K; k++) {
            double got = *elem(&p, k, false), err = fabs(got - r.x[k]);
            CHECK(err <= ATOL + RTOL * fabs(r.x[k]), "%s (%s) step %d element %d: %.17g, reference %.17g", what,
                  spec, s + 1, k, got, r.x[k]);
            worst = check_worst(worst, err);
        }
    }
    CHECK(opt.step == steps);
    printf("  %-34s %-44s %d steps, max |error| %.1e\n", what, spec, steps, worst);
    ag_optim_free(&opt);
    ag_params_free(&p.ps);
}

/* ---- closed forms ---- */

/* SGD with weight decay wd on the quadratic: the gradient is
 * (a + wd) x - a c, so x_t = x* + (1 - lr (a + wd))^t (x0 - x*) with
 * x* = a c / (a + wd).  wd = 0 is plain gradient descent. */
static void sgd_closed_form(double lr, double wd, int steps) {
    char spec[96];
    snprintf(spec, sizeof spec, "sgd:lr=%g,weight_decay=%g", lr, wd);
    ag_optim_config cfg;
    CHECK(ag_optim_parse(spec, &cfg) == AG_OK);
    problem p;
    problem_init(&p, false);
    ag_optimizer opt;
    ag_optim_init(&opt, &p.ps, &cfg);
    for (int s = 0; s < steps; s++) {
        set_grads(&p);
        ag_optim_step(&opt);
    }
    for (int k = 0; k < K; k++) {
        double xs = p.a[k] * p.c[k] / (p.a[k] + wd);
        double want = xs + pow(1 - lr * (p.a[k] + wd), steps) * (p.x0[k] - xs);
        CHECK_NEAR(*elem(&p, k, false), want, ATOL, RTOL);
    }
    printf("  closed form %-22s %d steps\n", spec, steps);
    ag_optim_free(&opt);
    ag_params_free(&p.ps);
}

/* Adam on a linear function: the gradient g is constant, so m_t/(1-β1^t) = g
 * and v_t/(1-β2^t) = g² exactly: every step moves lr g / (|g| + eps).
 * AdamW also shrinks x by (1 - lr wd) first: x_t = r^t x0 - s (1-r^t)/(1-r). */
static void adam_closed_form(const char *spec, int steps) {
    ag_optim_config cfg;
    CHECK(ag_optim_parse(spec, &cfg) == AG_OK, "%s", ag_errmsg());
    problem p;
    problem_init(&p, true);
    ag_optimizer opt;
    ag_optim_init(&opt, &p.ps, &cfg);
    for (int s = 0; s < steps; s++) {
        set_grads(&p);
        ag_optim_step(&opt);
    }
    for (int k = 0; k < K; k++) {
        double g = p.c[k], move = cfg.lr * g / (fabs(g) + cfg.eps), want;
        if (cfg.kind == AG_ADAMW && cfg.weight_decay != 0) {
            double r = 1 - cfg.lr * cfg.weight_decay;
            want = pow(r, steps) * p.x0[k] - move * (1 - pow(r, steps)) / (1 - r);
        } else {
            want = p.x0[k] - steps * move;
        }
        /* the bias corrections cancel only up to rounding: a little slack */
        CHECK_NEAR(*elem(&p, k, false), want, IS_F64 ? 1e-12 : 1e-5, IS_F64 ? 1e-12 : 1e-5);
    }
    printf("  closed form %-34s %d steps\n", spec, steps);
    ag_optim_free(&opt);
    ag_params_free(&p.ps);
}

static void test_sgd(void) {
    sgd_closed_form(0.1, 0, 20);
    sgd_closed_form(0.05, 0.3, 20);
    compare("sgd", "sgd:lr=0.1", false, 20);
    compare("sgd weight_decay", "sgd:lr=0.1,weight_decay=0.05", false, 20);
    compare("sgd momentum", "sgd:lr=0.05,momentum=0.9", false, 30);
    compare("sgd momentum dampening", "sgd:lr=0.05,momentum=0.9,dampening=0.3", false, 30);
    compare("sgd nesterov", "sgd:lr=0.05,momentum=0.8,nesterov=1", false, 30);
    compare("sgd nesterov weight_decay", "sgd:lr=0.05,momentum=0.8,nesterov=true,weight_decay=0.1", false, 30);
    /* momentum's first step takes the gradient as the buffer, dampening or
     * not: after one step dampening must make no difference */
    problem p1, p2;
    problem_init(&p1, false);
    problem_init(&p2, false);
    ag_optimizer o1, o2;
    ag_optim_config c1, c2;
    ag_optim_parse("sgd:lr=0.1,momentum=0.9", &c1);
    ag_optim_parse("sgd:lr=0.1,momentum=0.9,dampening=0.5", &c2);
    ag_optim_init(&o1, &p1.ps, &c1);
    ag_optim_init(&o2, &p2.ps, &c2);
    set_grads(&p1), set_grads(&p2);
    ag_optim_step(&o1), ag_optim_step(&o2);
    for (int k = 0; k < K; k++) CHECK(*elem(&p1, k, false) == *elem(&p2, k, false));
    set_grads(&p1), set_grads(&p2);
    ag_optim_step(&o1), ag_optim_step(&o2);
    CHECK(*elem(&p1, 0, false) != *elem(&p2, 0, false), "dampening had no effect on step 2");
    CHECK(o1.n_slots == 1 && !strcmp(ag_optim_slot_name(&o1, 0), "momentum"));
    CHECK(ag_optim_state(&o1, "b", "momentum") == o1.slot[1]);
    ag_optim_free(&o1), ag_optim_free(&o2);
    ag_params_free(&p1.ps), ag_params_free(&p2.ps);
    /* without momentum SGD keeps no state */
    ag_optimizer o;
    problem p;
    problem_init(&p, false);
    ag_optim_config c = ag_optim_defaults(AG_SGD);
    ag_optim_init(&o, &p.ps, &c);
    CHECK(o.n_slots == 0 && o.state == NULL && ag_optim_state(&o, "w", "momentum") == NULL);
    ag_optim_free(&o);
    ag_params_free(&p.ps);
}

static void test_adam(void) {
    adam_closed_form("adam:lr=0.01", 25);
    adam_closed_form("adam:lr=0.01,eps=0.1", 25);
    adam_closed_form("adamw:lr=0.01,weight_decay=0.5", 25);
    compare("adam", "adam:lr=0.05", false, 30);
    compare("adam betas", "adam:lr=0.05,beta1=0.5,beta2=0.9", false, 30);
    compare("adam eps", "adam:lr=0.05,eps=0.01", false, 30);
    compare("adam weight_decay (L2)", "adam:lr=0.05,weight_decay=0.2", false, 30);
    compare("adam amsgrad", "adam:lr=0.2,beta2=0.9,amsgrad=1", false, 40);
    compare("adamw", "adamw:lr=0.05", false, 30);
    compare("adamw weight_decay", "adamw:lr=0.05,weight_decay=0.3", false, 30);
    compare("adamw amsgrad", "adamw:lr=0.2,beta2=0.9,weight_decay=0.1,amsgrad=1", false, 40);
    /* amsgrad must matter on this problem (v shrinks near the minimum), and
     * decoupled decay must differ from L2 decay, or the tests above prove
     * nothing about those options */
    const char *pairs[][2] = {{"adam:lr=0.2,beta2=0.9", "adam:lr=0.2,beta2=0.9,amsgrad=1"},
                              {"adam:lr=0.05,weight_decay=0.3", "adamw:lr=0.05,weight_decay=0.3"}};
    for (int i = 0; i < 2; i++) {
        problem p1, p2;
        problem_init(&p1, false);
        problem_init(&p2, false);
        ag_optim_config c1, c2;
        ag_optim_parse(pairs[i][0], &c1);
        ag_optim_parse(pairs[i][1], &c2);
        ag_optimizer o1, o2;
        ag_optim_init(&o1, &p1.ps, &c1);
        ag_optim_init(&o2, &p2.ps, &c2);
        for (int s = 0; s < 40; s++) {
            set_grads(&p1), set_grads(&p2);
            ag_optim_step(&o1), ag_optim_step(&o2);
        }
        double diff = 0;
        for (int k = 0; k < K; k++) diff = fmax(diff, fabs((double)*elem(&p1, k, false) - *elem(&p2, k, false)));
        CHECK(diff > 1e-3, "'%s' and '%s' end %g apart", pairs[i][0], pairs[i][1], diff);
        ag_optim_free(&o1), ag_optim_free(&o2);
        ag_params_free(&p1.ps), ag_params_free(&p2.ps);
    }
}

static void test_adadelta(void) {
    compare("adadelta defaults", "adadelta", false, 30);
    compare("adadelta lr rho (papers)", "adadelta:lr=0.5,rho=0.95", false, 30);
    compare("adadelta eps", "adadelta:eps=0.01", false, 30);
    compare("adadelta weight_decay", "adadelta:lr=0.5,weight_decay=0.2", false, 30);
    /* first step by hand: v = (1-ρ) g², Δ = sqrt(eps)/sqrt(v + eps) g */
    problem p;
    problem_init(&p, false);
    ag_optim_config c;
    ag_optim_parse("adadelta:lr=0.5,rho=0.95", &c);
    ag_optimizer o;
    ag_optim_init(&o, &p.ps, &c);
    set_grads(&p);
    ag_optim_step(&o);
    for (int k = 0; k < K; k++) {
        double g = problem_grad(&p, k, p.x0[k]), v = 0.05 * g * g;
        CHECK_NEAR(*elem(&p, k, false), p.x0[k] - 0.5 * sqrt(1e-6) / sqrt(v + 1e-6) * g, ATOL, RTOL);
    }
    CHECK(!strcmp(ag_optim_slot_name(&o, 0), "v") && !strcmp(ag_optim_slot_name(&o, 1), "u"));
    ag_optim_free(&o);
    ag_params_free(&p.ps);
}

static void test_adagrad(void) {
    compare("adagrad defaults", "adagrad", false, 30);
    compare("adagrad lr_decay", "adagrad:lr=0.3,lr_decay=0.05", false, 30);
    compare("adagrad initial sum, eps", "adagrad:lr=0.3,initial_accumulator_value=0.1,eps=1e-3", false, 30);
    compare("adagrad weight_decay", "adagrad:lr=0.3,weight_decay=0.2", false, 30);
    /* the first step by hand, from the initial sum s0: s = s0 + g^2, x -= lr g / (sqrt(s) + eps) */
    problem p;
    problem_init(&p, false);
    ag_optim_config c;
    ag_optim_parse("adagrad:lr=0.3,initial_accumulator_value=0.5", &c);
    ag_optimizer o;
    ag_optim_init(&o, &p.ps, &c);
    CHECK(*ag_optim_state(&o, "w", "sum") == (ag_real)0.5, "the sum starts at initial_accumulator_value");
    set_grads(&p);
    ag_optim_step(&o);
    for (int k = 0; k < K; k++) {
        double g = problem_grad(&p, k, p.x0[k]);
        CHECK_NEAR(*elem(&p, k, false), p.x0[k] - 0.3 * g / (sqrt(0.5 + g * g) + 1e-10), ATOL, RTOL);
    }
    CHECK(o.n_slots == 1 && !strcmp(ag_optim_slot_name(&o, 0), "sum"));
    ag_optim_free(&o);
    ag_params_free(&p.ps);
}

static void test_rmsprop(void) {
    compare("rmsprop defaults", "rmsprop", false, 30);
    compare("rmsprop alpha eps", "rmsprop:lr=0.05,alpha=0.9,eps=1e-3", false, 30);
    compare("rmsprop momentum", "rmsprop:lr=0.02,momentum=0.9", false, 40);
    compare("rmsprop centered", "rmsprop:lr=0.02,alpha=0.9,centered=1", false, 40);
    compare("rmsprop centered momentum", "rmsprop:lr=0.01,momentum=0.5,centered=1,weight_decay=0.1", false, 40);
    compare("rmsprop weight_decay", "rmsprop:lr=0.05,weight_decay=0.2", false, 30);
    /* the slots each setting keeps, by name */
    const struct {
        const char *spec;
        int slots;
        const char *names[3];
    } kept[] = {{"rmsprop", 1, {"square_avg"}},
                {"rmsprop:momentum=0.9", 2, {"square_avg", "momentum_buffer"}},
                {"rmsprop:centered=1", 2, {"square_avg", "grad_avg"}},
                {"rmsprop:momentum=0.9,centered=1", 3, {"square_avg", "momentum_buffer", "grad_avg"}}};
    for (int i = 0; i < 4; i++) {
        problem p;
        problem_init(&p, false);
        ag_optim_config c;
        ag_optim_parse(kept[i].spec, &c);
        ag_optimizer o;
        ag_optim_init(&o, &p.ps, &c);
        CHECK(o.n_slots == kept[i].slots, "%s: %d slots", kept[i].spec, o.n_slots);
        for (int k = 0; k < kept[i].slots && k < o.n_slots; k++)
            CHECK(!strcmp(ag_optim_slot_name(&o, k), kept[i].names[k]), "%s: slot %d is '%s'", kept[i].spec, k,
                  ag_optim_slot_name(&o, k));
        ag_optim_free(&o);
        ag_params_free(&p.ps);
    }
}

/* Schedules change opt->lr between steps; the next step must use it. */
static void test_lr_change(void) {
    problem p;
    problem_init(&p, false);
    ag_optim_config c;
    ag_optim_parse("sgd:lr=0.1", &c);
    ag_optimizer o;
    ag_optim_init(&o, &p.ps, &c);
    set_grads(&p);
    ag_optim_step(&o);
    double x1 = *elem(&p, 3, false);
    o.lr = 0.01;
    set_grads(&p);
    ag_optim_step(&o);
    double want = x1 - 0.01 * problem_grad(&p, 3, x1);
    CHECK_NEAR(*elem(&p, 3, false), want, ATOL, RTOL);
    CHECK(o.cfg.lr == 0.1, "the configured rate stays as given");
    ag_optim_free(&o);
    ag_params_free(&p.ps);
}

static void test_parse(void) {
    ag_optim_config c;
    CHECK(ag_optim_parse("sgd:lr=0.1,momentum=0.9", &c) == AG_OK);
    CHECK(c.kind == AG_SGD && c.lr == 0.1 && c.momentum == 0.9 && c.dampening == 0 && !c.nesterov && c.weight_decay == 0);
    CHECK(ag_optim_parse("adam:lr=1e-3", &c) == AG_OK);
    CHECK(c.kind == AG_ADAM && c.lr == 1e-3 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 &&
          c.weight_decay == 0 && !c.amsgrad);
    CHECK(ag_optim_parse("adamw", &c) == AG_OK && c.kind == AG_ADAMW && c.weight_decay == 1e-2 && c.lr == 1e-3);
    CHECK(ag_optim_parse("adadelta", &c) == AG_OK && c.lr == 1.0 && c.rho == 0.9 && c.eps == 1e-6 && c.weight_decay == 0);
    CHECK(ag_optim_parse("adadelta:lr=0.5,rho=0.95", &c) == AG_OK && c.lr == 0.5 && c.rho == 0.95 && c.eps == 1e-6);
    CHECK(ag_optim_parse("sgd", &c) == AG_OK && c.lr == 1e-3 && !c.lazy);
    /* eps 0 would divide 0 by 0 wherever a gradient element is 0 (an unused
     * embedding row): refused by name in every optimizer that has one */
    static const char *const zero_eps[] = {"adam:eps=0", "adamw:eps=0", "adadelta:eps=0", "adagrad:eps=0", "rmsprop:eps=0"};
    for (int i = 0; i < 5; i++)
        CHECK(ag_optim_parse(zero_eps[i], &c) == AG_ERR_ARG && strstr(ag_errmsg(), "eps 0 must be > 0"), "%s: %s",
              zero_eps[i], ag_errmsg());
    char spec[160];
    CHECK(ag_optim_parse("adadelta:lazy=1", &c) == AG_OK && c.lazy);
    CHECK(strstr(ag_optim_format(&c, spec, sizeof spec), ",lazy=1") && ag_optim_parse(spec, &c) == AG_OK && c.lazy,
          "lazy written and read back: %s", spec);
    CHECK(ag_optim_parse("adam", &c) == AG_OK && !strstr(ag_optim_format(&c, spec, sizeof spec), "lazy"),
          "lazy=0 is left out, as in the specs written before it: %s", spec);

    /* over a config: the same kind keeps what the spec leaves out, another starts from its defaults */
    ag_optim_config base, over;
    ag_optim_parse("sgd:lr=0.1,momentum=0.9,nesterov=1,weight_decay=1e-4", &base);
    CHECK(ag_optim_parse_over("sgd:lr=0.01", &base, &over) == AG_OK && over.lr == 0.01 && over.momentum == 0.9 &&
          over.nesterov && over.weight_decay == 1e-4);
    CHECK(ag_optim_parse_over("adam:eps=1e-6", &base, &over) == AG_OK && over.kind == AG_ADAM && over.lr == 1e-3 &&
          over.eps == 1e-6 && over.weight_decay == 0);
    CHECK(ag_optim_parse_over("sgd", NULL, &over) == AG_OK && over.lr == 1e-3 && over.momentum == 0);
    EXPECT_ERROR(ag_optim_parse_over("sgd:dampening=0.5", &base, &over), AG_ERR_ARG, "nesterov", "dampening");
    ag_sched_config sbase, sover;
    ag_sched_parse("plateau:factor=0.5,patience=3,mode=max", &sbase);
    CHECK(ag_sched_parse_over("plateau:patience=7", &sbase, &sover) == AG_OK && sover.patience == 7 &&
          sover.factor == 0.5 && sover.mode_max);
    CHECK(ag_sched_parse_over("step:step_size=2", &sbase, &sover) == AG_OK && sover.kind == AG_SCHED_STEP &&
          sover.gamma == 0.1);
    ag_lr_steps lbase, lover;
    ag_lr_steps_parse("cosine:warmup=100,total=1000,min_ratio=0.1", &lbase);
    CHECK(ag_lr_steps_parse_over("cosine:total=2000", &lbase, &lover) == AG_OK && lover.total == 2000 &&
          lover.warmup == 100 && lover.min_ratio == 0.1);

    EXPECT_ERROR(ag_optim_parse("sgd:lr=abc", &c), AG_ERR_ARG, "'lr'", "abc");
    EXPECT_ERROR(ag_optim_parse("sgd:lr=0.1x", &c), AG_ERR_ARG, "'lr'", "0.1x");
    EXPECT_ERROR(ag_optim_parse("sgd:lr=1e999", &c), AG_ERR_ARG, "'lr'");
    EXPECT_ERROR(ag_optim_parse("sgd:lr=nan", &c), AG_ERR_ARG, "'lr'");
    /* decimal only: strtod's hex, its leading blanks and inf are refused (they read as values nobody wrote) */
    EXPECT_ERROR(ag_optim_parse("sgd:lr=0x1", &c), AG_ERR_ARG, "'lr'", "'0x1' is not a finite number");
    EXPECT_ERROR(ag_optim_parse("sgd:lr= 0.1", &c), AG_ERR_ARG, "'lr'", "' 0.1' is not a finite number");
    EXPECT_ERROR(ag_optim_parse("sgd:lr=-inf", &c), AG_ERR_ARG, "'lr'", "not a finite number");
    EXPECT_ERROR(ag_sched_parse("step:step_size= 2", &sbase), AG_ERR_ARG, "'step_size'", "not an integer");
    EXPECT_ERROR(ag_sched_parse("step:step_size=0x2", &sbase), AG_ERR_ARG, "'step_size'", "not an integer");
    EXPECT_ERROR(ag_optim_parse("adam:lr=1e-400", &c), AG_ERR_ARG, "'lr'", "'1e-400' is too close to 0 for a double");
    CHECK(ag_optim_parse("sgd:lr=+.5e-1,momentum=-0", &c) == AG_OK && c.lr == 0.05, "%s", ag_errmsg());
    EXPECT_ERROR(ag_optim_parse("sgd:lr=", &c), AG_ERR_ARG, "'lr'", "empty");
    EXPECT_ERROR(ag_optim_parse("sgd:momentun=0.9", &c), AG_ERR_ARG, "'momentun'", "momentum");
    EXPECT_ERROR(ag_optim_parse("adam:momentum=0.9", &c), AG_ERR_ARG, "'momentum'", "adam");
    EXPECT_ERROR(ag_optim_parse("adadelta:beta1=0.9", &c), AG_ERR_ARG, "'beta1'");
    EXPECT_ERROR(ag_optim_parse("sgd:lr", &c), AG_ERR_ARG, "'lr'", "no value");
    EXPECT_ERROR(ag_optim_parse("sgd:lr=0.1,lr=0.2", &c), AG_ERR_ARG, "'lr'", "twice");
    EXPECT_ERROR(ag_optim_parse("sgd:lr=0.1,", &c), AG_ERR_ARG, "trailing");
    EXPECT_ERROR(ag_optim_parse("sgd:,lr=0.1", &c), AG_ERR_ARG, "empty key");
    EXPECT_ERROR(ag_optim_parse("sgd:nesterov=yes", &c), AG_ERR_ARG, "'nesterov'", "yes");
    EXPECT_ERROR(ag_optim_parse("rmsprp:lr=0.1", &c), AG_ERR_ARG, "'rmsprp'");
    EXPECT_ERROR(ag_optim_parse("adagrad:momentum=0.9", &c), AG_ERR_ARG, "'momentum'", "adagrad");
    EXPECT_ERROR(ag_optim_parse("rmsprop:nesterov=1", &c), AG_ERR_ARG, "'nesterov'");
    EXPECT_ERROR(ag_optim_parse("adagrad:lr_decay=-1", &c), AG_ERR_ARG, "lr_decay");
    EXPECT_ERROR(ag_optim_parse("adagrad:initial_accumulator_value=-0.1", &c), AG_ERR_ARG, "initial_accumulator_value");
    EXPECT_ERROR(ag_optim_parse("rmsprop:alpha=-0.5", &c), AG_ERR_ARG, "alpha");
    EXPECT_ERROR(ag_optim_parse("rmsprop:momentum=-0.5", &c), AG_ERR_ARG, "momentum");
    CHECK(ag_optim_parse("adagrad", &c) == AG_OK && c.kind == AG_ADAGRAD && c.lr == 1e-2 && c.lr_decay == 0 &&
          c.initial_accumulator_value == 0 && c.eps == 1e-10 && c.weight_decay == 0);
    CHECK(ag_optim_parse("rmsprop", &c) == AG_OK && c.kind == AG_RMSPROP && c.lr == 1e-2 && c.alpha == 0.99 &&
          c.eps == 1e-8 && c.momentum == 0 && !c.centered && c.weight_decay == 0);
    EXPECT_ERROR(ag_optim_parse("", &c), AG_ERR_ARG, "empty");
    EXPECT_ERROR(ag_optim_parse(":lr=1", &c), AG_ERR_ARG, "no name");
    /* values PyTorch refuses */
    EXPECT_ERROR(ag_optim_parse("sgd:lr=-0.1", &c), AG_ERR_ARG, "lr");
    EXPECT_ERROR(ag_optim_parse("sgd:nesterov=1", &c), AG_ERR_ARG, "nesterov");
    EXPECT_ERROR(ag_optim_parse("sgd:momentum=0.9,dampening=0.1,nesterov=1", &c), AG_ERR_ARG, "nesterov");
    EXPECT_ERROR(ag_optim_parse("adam:beta1=1", &c), AG_ERR_ARG, "beta1");
    EXPECT_ERROR(ag_optim_parse("adam:beta2=-0.1", &c), AG_ERR_ARG, "beta2");
    EXPECT_ERROR(ag_optim_parse("adamw:weight_decay=-1", &c), AG_ERR_ARG, "weight_decay");
    EXPECT_ERROR(ag_optim_parse("adadelta:rho=1.5", &c), AG_ERR_ARG, "rho");
    EXPECT_ERROR(ag_optim_parse("adadelta:eps=-1e-6", &c), AG_ERR_ARG, "eps");
    /* a failed parse leaves the output alone */
    c = ag_optim_defaults(AG_ADADELTA);
    ag_optim_parse("adam:lr=x", &c);
    CHECK(c.kind == AG_ADADELTA && c.lr == 1.0);

    /* format then parse gives the same config, numbers included */
    const char *specs[] = {"sgd:lr=0.1,momentum=0.9,nesterov=1,weight_decay=1.2e-6",
                           "adam:lr=0.00033333333333333332,beta2=0.98,amsgrad=1",
                           "adamw:lr=3e-4", "adadelta:lr=0.5,rho=0.95,eps=1e-7",
                           "adagrad:lr=0.05,lr_decay=1e-4,initial_accumulator_value=0.1",
                           "rmsprop:lr=1e-3,alpha=0.95,momentum=0.9,centered=1,weight_decay=1e-5"};
    for (int i = 0; i < (int)(sizeof specs / sizeof *specs); i++) {
        ag_optim_config a, b;
        char buf[512];
        CHECK(ag_optim_parse(specs[i], &a) == AG_OK, "%s: %s", specs[i], ag_errmsg());
        ag_optim_format(&a, buf, sizeof buf);
        CHECK(ag_optim_parse(buf, &b) == AG_OK, "%s: %s", buf, ag_errmsg());
        CHECK(a.kind == b.kind && a.lr == b.lr && a.weight_decay == b.weight_decay && a.momentum == b.momentum &&
                  a.dampening == b.dampening && a.nesterov == b.nesterov && a.beta1 == b.beta1 && a.beta2 == b.beta2 &&
                  a.amsgrad == b.amsgrad && a.rho == b.rho && a.eps == b.eps && a.lr_decay == b.lr_decay &&
                  a.initial_accumulator_value == b.initial_accumulator_value && a.alpha == b.alpha &&
                  a.centered == b.centered,
              "'%s' -> '%s' changed the config", specs[i], buf);
    }
    char buf[512];
    ag_optim_parse("sgd:lr=0.1,momentum=0.9", &c);
    CHECK(!strcmp(ag_optim_format(&c, buf, sizeof buf), "sgd:lr=0.1,momentum=0.9,dampening=0,nesterov=0,weight_decay=0"),
          "%s", buf);
}

static void test_clip(void) {
    ag_params ps = {0};
    ag_tensor *a = ag_param(&ps, "a", 2, (int[]){2, 2});
    ag_tensor *b = ag_param(&ps, "b", 1, (int[]){3});
    const double ga[4] = {3, -4, 1, 2}, gb[3] = {-2, 0, 5}; /* norm sqrt(59) */
    for (int i = 0; i < 4; i++) a->grad[i] = (ag_real)ga[i];
    for (int i = 0; i < 3; i++) b->grad[i] = (ag_real)gb[i];
    double norm = ag_clip_grad_norm(&ps, 100);
    CHECK_NEAR(norm, sqrt(59.0), 1e-12, 1e-12);
    CHECK(a->grad[1] == (ag_real)-4 && b->grad[2] == (ag_real)5, "below max_norm nothing changes");
    norm = ag_clip_grad_norm(&ps, 2.0);
    CHECK_NEAR(norm, sqrt(59.0), 1e-12, 1e-12);
    double coef = 2.0 / (sqrt(59.0) + 1e-6), sq = 0;
    for (int i = 0; i < 4; i++) CHECK_NEAR(a->grad[i], ga[i] * coef, IS_F64 ? 1e-15 : 1e-6, IS_F64 ? 1e-14 : 1e-6);
    for (int i = 0; i < 3; i++) CHECK_NEAR(b->grad[i], gb[i] * coef, IS_F64 ? 1e-15 : 1e-6, IS_F64 ? 1e-14 : 1e-6);
    for (int i = 0; i < 4; i++) sq += (double)a->grad[i] * a->grad[i];
    for (int i = 0; i < 3; i++) sq += (double)b->grad[i] * b->grad[i];
    CHECK(sqrt(sq) <= 2.0 + 1e-5 && sqrt(sq) > 2.0 - 1e-5, "clipped norm %.9g", sqrt(sq));
    ag_params_zero_grad(&ps);
    CHECK(ag_clip_grad_norm(&ps, 1.0) == 0 && a->grad[0] == 0, "zero gradients stay zero");
    ag_params_free(&ps);
}

/* The step's finite checks: the norms, and on a non-finite one the first
 * tensor holding an inf or NaN, by name, shape, value and element. */
static void test_finite_checks(void) {
    ag_params ps = {0};
    ag_tensor *a = ag_param(&ps, "a", 2, (int[]){2, 2});
    ag_tensor *b = ag_param(&ps, "b", 1, (int[]){3});
    const double ga[4] = {3, -4, 1, 2}, gb[3] = {-2, 0, 5}; /* norm sqrt(59) */
    for (int i = 0; i < 4; i++) a->grad[i] = (ag_real)ga[i], a->data[i] = (ag_real)gb[i % 3];
    for (int i = 0; i < 3; i++) b->grad[i] = (ag_real)gb[i], b->data[i] = 1;
    CHECK_NEAR(ag_grad_norm(&ps), sqrt(59.0), 1e-12, 1e-12);
    CHECK(a->grad[1] == (ag_real)-4, "ag_grad_norm clips nothing");
    CHECK_NEAR(ag_params_norm(&ps), sqrt(4 + 0 + 25 + 4 + 3.0), 1e-12, 1e-12);
    double norm = 0;
    CHECK(ag_check_grads_finite(&ps, ag_grad_norm(&ps)) == AG_OK);
    CHECK(ag_check_params_finite(&ps, &norm) == AG_OK && norm == ag_params_norm(&ps));
    int64_t at = -1;
    CHECK(ag_params_find_nonfinite(&ps, false, &at) == NULL && ag_params_find_nonfinite(&ps, true, &at) == NULL);
    b->grad[2] = (ag_real)INFINITY;
    CHECK(ag_params_find_nonfinite(&ps, true, &at) == b && at == 2);
    CHECK(ag_check_grads_finite(&ps, ag_grad_norm(&ps)) == AG_ERR_NONFINITE);
    CHECK(strstr(ag_errmsg(), "gradient norm is inf") && strstr(ag_errmsg(), "the gradient of 'b' [3] holds inf at element 2"),
          "%s", ag_errmsg());
    a->data[3] = (ag_real)-NAN;
    CHECK(ag_check_params_finite(&ps, &norm) == AG_ERR_NONFINITE && isnan(norm));
    CHECK(strstr(ag_errmsg(), "parameter norm is nan: parameter 'a' [2,2] holds nan at element 3"), "%s", ag_errmsg());
    ag_params_free(&ps);
}

static void test_l2_penalty(void) {
    ag_params ps = {0};
    struct { const char *name; int ndim; int shape[2]; bool weight; } ps_spec[] = {
        {"embed.weight", 2, {4, 2}, false}, {"bigram.weight", 2, {3, 2}, false}, {"l1.weight", 2, {2, 3}, true},
        {"l1.bias", 1, {3}, false},          {"unit0.u", 1, {3}, false},          {"pos.w_sigma", 2, {3, 1}, true},
        {"ln.gamma", 1, {2}, false},         {"text.wq", 2, {2, 2}, true},
    };
    const int n = (int)(sizeof ps_spec / sizeof *ps_spec);
    ag_rng rng;
    ag_rng_seed(&rng, 3);
    for (int i = 0; i < n; i++) {
        ag_tensor *t = ag_param(&ps, ps_spec[i].name, ps_spec[i].ndim, ps_spec[i].shape);
        ag_init_uniform(t, -1, 1, &rng);
        CHECK(ag_is_weight_matrix(t) == ps_spec[i].weight, "%s", ps_spec[i].name);
    }
    const double gamma = 0.3;
    double value = ag_l2_penalty(&ps, gamma);
    /* the same penalty through autodiff: gamma * sum ½ W² over the weights */
    ag_params ref = {0};
    ag_tensor *total = NULL;
    for (int i = 0; i < n; i++) {
        ag_tensor *t = ag_param(&ref, ps_spec[i].name, ps_spec[i].ndim, ps_spec[i].shape);
        memcpy(t->data, ps.items[i]->data, (size_t)t->size * sizeof(ag_real));
        if (!ps_spec[i].weight) continue;
        ag_tensor *term = ag_mul_scalar(ag_sum(ag_square(t)), 0.5 * gamma);
        total = total ? ag_add(total, term) : term;
    }
    ag_backward(total);
    CHECK_NEAR(value, ag_item(total), IS_F64 ? 1e-14 : 1e-6, IS_F64 ? 1e-14 : 1e-6);
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < ps.items[i]->size; j++)
            CHECK_NEAR(ps.items[i]->grad[j], ref.items[i]->grad[j], 1e-15, IS_F64 ? 1e-15 : 1e-6);
    /* ag_l2_grad: the same gradient, to the bit, without the value (ref's
     * gradients now keep ag_l2_penalty's) */
    for (int i = 0; i < n; i++) {
        memcpy(ref.items[i]->grad, ps.items[i]->grad, (size_t)ps.items[i]->size * sizeof(ag_real));
        memset(ps.items[i]->grad, 0, (size_t)ps.items[i]->size * sizeof(ag_real));
    }
    ag_l2_grad(&ps, gamma);
    for (int i = 0; i < n; i++)
        for (int64_t j = 0; j < ps.items[i]->size; j++)
            CHECK(ps.items[i]->grad[j] == ref.items[i]->grad[j], "ag_l2_grad %s[%lld]", ps.items[i]->name, (long long)j);
    ag_step_end();
    ag_params_free(&ps);
    ag_params_free(&ref);
}

/* Steps make no heap allocation (and leave the step arena alone). */
static void test_no_allocation(void) {
    const char *specs[] = {"sgd:lr=0.1", "sgd:lr=0.1,momentum=0.9,nesterov=1", "adam:amsgrad=1,weight_decay=0.1",
                           "adamw", "adadelta:lr=0.5,rho=0.95,weight_decay=0.1"};
    for (int i = 0; i < 5; i++) {
        problem p;
        problem_init(&p, false);
        ag_optim_config c;
        ag_optim_parse(specs[i], &c);
        ag_optimizer o;
        ag_optim_init(&o, &p.ps, &c);
        ag_mem_stats before = ag_memstats();
        for (int s = 0; s < 100; s++) {
            set_grads(&p);
            ag_clip_grad_norm(&p.ps, 0.5);
            ag_l2_penalty(&p.ps, 1e-4);
            ag_optim_step(&o);
        }
        ag_mem_stats after = ag_memstats();
        CHECK(after.allocs == before.allocs && after.arena_high == before.arena_high, "%s: %lld allocations in 100 steps",
              specs[i], (long long)(after.allocs - before.allocs));
        ag_optim_free(&o);
        ag_params_free(&p.ps);
    }
}

static void test_misuse(void) {
    problem p;
    problem_init(&p, false);
    ag_optim_config c = ag_optim_defaults(AG_ADAM);
    ag_optimizer o;
    ag_optim_init(&o, &p.ps, &c);
    ag_param(&p.ps, "late", 1, (int[]){2});
    EXPECT_FATAL(ag_optim_step(&o), "ag_optim_step", "changed from 2 to 3", "test_optim.c");
    ag_optim_free(&o);
    ag_params_free(&p.ps);
    c.lr = -1;
    EXPECT_ERROR(ag_optim_init(&o, &p.ps, &c), AG_ERR_ARG, "lr");
}

/* ---- the parameters' average (ema=, swa=) ---- */

/* Element k of parameter p's average (slot "average"). */
static double average_of(const ag_optimizer *o, int k) {
    return (double)ag_optim_state(o, k < 6 ? "w" : "b", "average")[k < 6 ? k : k - 6];
}

/* `steps` updates of spec on the quadratic, the reference average kept
 * beside them from the values after each: AveragedModel's rule in double
 * (the first update averaged copies, then torch.lerp with w = 1 - D, or
 * 1/(n+1) after n), and for swa the plain mean of the values averaged. */
static void average_run(problem *p, ag_optimizer *o, int steps, double *avg, double *mean, int *n) {
    const ag_optim_config *c = &o->cfg;
    double sum[K] = {0};
    for (int t = 1; t <= steps; t++) {
        set_grads(p);
        ag_optim_step(o);
        if (c->swa > 0 && o->step < c->swa) continue;
        double w = *n == 0 ? 1 : c->ema > 0 ? 1 - c->ema : 1.0 / (*n + 1);
        for (int k = 0; k < K; k++) {
            double x = (double)*elem(p, k, false);
            avg[k] = w < 0.5 ? avg[k] + w * (x - avg[k]) : x - (x - avg[k]) * (1 - w);
            sum[k] += x;
        }
        (*n)++;
    }
    for (int k = 0; k < K; k++) mean[k] = *n ? sum[k] / *n : 0;
}

/* The average against the reference, on each rule and both kinds; the
 * swap trades values and back to the bit, and a step while swapped is
 * refused; the spec writes back; a checkpoint carries the average and its
 * count, so a run resumed mid-way ends on the uninterrupted run's average
 * to the bit, and an average switched on at a resume starts there. */
static void test_average(void) {
    const char *specs[] = {"adam:lr=0.05,ema=0.9", "sgd:lr=0.1,momentum=0.9,swa=3", "adadelta:lr=0.5,ema=0.3",
                           "rmsprop:lr=0.01,swa=1"};
    char path[] = "/tmp/test_optim_average.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    for (int i = 0; i < 4; i++) {
        problem p;
        problem_init(&p, false);
        ag_optim_config c;
        CHECK(ag_optim_parse(specs[i], &c) == AG_OK, "%s: %s", specs[i], ag_errmsg());
        ag_optimizer o;
        CHECK(ag_optim_init(&o, &p.ps, &c) == AG_OK);
        CHECK(!ag_optim_swap_average(&o), "%s: nothing to swap before an update", specs[i]);
        double avg[K] = {0}, mean[K];
        int n = 0;
        average_run(&p, &o, 6, avg, mean, &n);
        CHECK(o.averaged == n && n == (c.swa ? 7 - c.swa : 6), "%s: %lld updates averaged, want %d", specs[i],
              (long long)o.averaged, n);
        double worst = 0;
        for (int k = 0; k < K; k++) {
            double got = average_of(&o, k);
            worst = fmax(worst, fabs(got - avg[k]));
            CHECK(fabs(got - avg[k]) <= ATOL + RTOL * fabs(avg[k]), "%s: average[%d] %.17g, reference %.17g",
                  specs[i], k, got, avg[k]);
            if (c.swa) /* the running lerp is the mean */
                CHECK(fabs(got - mean[k]) <= ATOL + RTOL * fabs(mean[k]), "%s: average[%d] %.17g, the mean %.17g",
                      specs[i], k, got, mean[k]);
        }
        printf("  %-34s average of %d updates: worst abs diff %.2e\n", specs[i], n, worst);

        /* the swap */
        ag_real before[K], avg_before[K];
        for (int k = 0; k < K; k++) before[k] = *elem(&p, k, false), avg_before[k] = (ag_real)average_of(&o, k);
        CHECK(ag_optim_swap_average(&o) && o.swapped);
        for (int k = 0; k < K; k++)
            CHECK(*elem(&p, k, false) == avg_before[k] && (ag_real)average_of(&o, k) == before[k],
                  "%s: swapped element %d", specs[i], k);
        EXPECT_FATAL(ag_optim_step(&o), "ag_optim_step", "the parameters hold their average", "swap them back");
        CHECK(ag_optim_swap_average(&o) && !o.swapped);
        for (int k = 0; k < K; k++)
            CHECK(*elem(&p, k, false) == before[k] && (ag_real)average_of(&o, k) == avg_before[k],
                  "%s: swapped back, element %d", specs[i], k);

        /* 3 updates, a checkpoint, 3 more in a new optimizer: the 6 updates' average to the bit */
        problem q;
        problem_init(&q, false);
        ag_optimizer a, b;
        CHECK(ag_optim_init(&a, &q.ps, &c) == AG_OK);
        double ra[K] = {0}, rm[K];
        int rn = 0;
        average_run(&q, &a, 3, ra, rm, &rn);
        CHECK(ag_checkpoint_save(path, &q.ps, &a, NULL, NULL) == AG_OK, "%s", ag_errmsg());
        ag_optim_free(&a);
        CHECK(ag_optim_init(&b, &q.ps, &c) == AG_OK);
        CHECK(ag_checkpoint_load(path, &q.ps, &b, NULL, NULL) == AG_OK, "%s", ag_errmsg());
        CHECK(b.averaged == rn, "%s: %lld updates averaged after the load, %d saved", specs[i], (long long)b.averaged,
              rn);
        average_run(&q, &b, 3, ra, rm, &rn);
        for (int k = 0; k < K; k++)
            CHECK(average_of(&b, k) == average_of(&o, k) && *elem(&q, k, false) == *elem(&p, k, false),
                  "%s: resumed after 3 updates, element %d: average %.17g, uninterrupted %.17g", specs[i], k,
                  average_of(&b, k), average_of(&o, k));
        ag_optim_free(&b);
        ag_params_free(&q.ps);
        ag_optim_free(&o);
        ag_params_free(&p.ps);
    }

    /* switched on at a resume: it starts empty, and the next update is copied in */
    problem p;
    problem_init(&p, false);
    ag_optim_config plain, with;
    ag_optim_parse("adam:lr=0.05", &plain);
    ag_optim_parse("adam:lr=0.05,ema=0.99", &with);
    ag_optimizer o;
    ag_optim_init(&o, &p.ps, &plain);
    for (int t = 0; t < 3; t++) set_grads(&p), ag_optim_step(&o);
    CHECK(ag_checkpoint_save(path, &p.ps, &o, NULL, NULL) == AG_OK);
    ag_optim_free(&o);
    ag_optim_init(&o, &p.ps, &with);
    CHECK(ag_checkpoint_load(path, &p.ps, &o, NULL, NULL) == AG_OK, "%s", ag_errmsg());
    CHECK(o.step == 3 && o.averaged == 0 && !ag_optim_swap_average(&o), "an average switched on at a resume is empty");
    set_grads(&p), ag_optim_step(&o);
    for (int k = 0; k < K; k++)
        CHECK(average_of(&o, k) == (double)*elem(&p, k, false), "its first update is copied in (element %d)", k);
    ag_optim_free(&o);
    ag_params_free(&p.ps);
    remove(path);

    /* the spec */
    ag_optim_config c;
    char spec[160];
    CHECK(ag_optim_parse("adam:ema=0.999", &c) == AG_OK && c.ema == 0.999 &&
              strstr(ag_optim_format(&c, spec, sizeof spec), ",ema=0.999") && ag_optim_parse(spec, &c) == AG_OK &&
              c.ema == 0.999, "ema written and read back: %s", spec);
    CHECK(ag_optim_parse("sgd:swa=100", &c) == AG_OK && c.swa == 100 &&
              strstr(ag_optim_format(&c, spec, sizeof spec), ",swa=100"), "swa written back: %s", spec);
    CHECK(ag_optim_parse("adam", &c) == AG_OK && !strstr(ag_optim_format(&c, spec, sizeof spec), "ema") &&
              !strstr(spec, "swa"), "no average, none written: %s", spec);
    EXPECT_ERROR(ag_optim_parse("adam:ema=1", &c), AG_ERR_ARG, "optimizer 'adam': ema 1 must be in [0, 1)");
    EXPECT_ERROR(ag_optim_parse("sgd:swa=-2", &c), AG_ERR_ARG, "optimizer 'sgd': swa -2 must be >= 0");
    EXPECT_ERROR(ag_optim_parse("adam:ema=0.9,swa=5", &c), AG_ERR_ARG, "ema=0.9 and swa=5: one average at a time");
}

/* Lookahead against its definition on the inner rule: the same rule
 * without it, stepped alongside, its values moved back by hand every k
 * updates (slow = lerp(slow, θ, α), θ = slow, from slow = θ0) give the
 * values, the slow weights and the rule's state to the bit; an average
 * beside it averages the values after the step back; a checkpoint taken
 * mid-cycle resumes to the uninterrupted bits; the spec writes back. */
static void test_lookahead(void) {
    const char *specs[] = {"adam:lr=0.05,lookahead=3", "sgd:lr=0.1,momentum=0.9,lookahead=2,lookahead_alpha=0.8",
                           "adadelta:lr=0.5,rho=0.95,lookahead=4,lookahead_alpha=1", "rmsprop:lr=0.01,lookahead=3,ema=0.5"};
    char path[] = "/tmp/test_optim_lookahead.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    for (int i = 0; i < 4; i++) {
        ag_optim_config c, inner;
        CHECK(ag_optim_parse(specs[i], &c) == AG_OK, "%s: %s", specs[i], ag_errmsg());
        inner = c, inner.lookahead = 0, inner.ema = 0;
        problem p, q;
        problem_init(&p, false), problem_init(&q, false);
        ag_optimizer o, r;
        CHECK(ag_optim_init(&o, &p.ps, &c) == AG_OK && ag_optim_init(&r, &q.ps, &inner) == AG_OK);
        ag_real slow[K];
        double avg[K] = {0};
        for (int k = 0; k < K; k++) slow[k] = *elem(&q, k, false);
        for (int t = 1; t <= 10; t++) {
            set_grads(&p), set_grads(&q);
            ag_optim_step(&o), ag_optim_step(&r);
            if (t % c.lookahead == 0)
                for (int k = 0; k < K; k++) *elem(&q, k, false) = slow[k] = ag__lerp(slow[k], *elem(&q, k, false),
                                                                                     (ag_real)c.lookahead_alpha);
            for (int k = 0; k < K; k++) { /* ema: of the values after the step back */
                double x = (double)*elem(&q, k, false), w = t == 1 ? 1 : 1 - c.ema;
                avg[k] = w < 0.5 ? avg[k] + w * (x - avg[k]) : x - (x - avg[k]) * (1 - w);
            }
            if (t == 4) CHECK(ag_checkpoint_save(path, &p.ps, &o, NULL, NULL) == AG_OK, "%s", ag_errmsg());
        }
        int same = 0;
        for (int k = 0; k < K; k++) {
            const char *name = k < 6 ? "w" : "b";
            int at = k < 6 ? k : k - 6;
            bool state = true;
            for (int s = 0; s < r.n_slots; s++)
                state = state && ag_optim_state(&o, name, ag_optim_slot_name(&r, s))[at] ==
                                     ag_optim_state(&r, name, ag_optim_slot_name(&r, s))[at];
            bool ok = *elem(&p, k, false) == *elem(&q, k, false) && ag_optim_state(&o, name, "slow")[at] == slow[k] &&
                      state;
            if (c.ema > 0) ok = ok && fabs(average_of(&o, k) - avg[k]) <= ATOL + RTOL * fabs(avg[k]);
            CHECK(ok, "%s: element %d after 10 updates: %.17g, by hand %.17g", specs[i], k, (double)*elem(&p, k, false),
                  (double)*elem(&q, k, false));
            same += ok;
        }
        printf("  %-50s %d of %d elements as by hand\n", specs[i], same, K);
        /* resumed from update 4, mid-cycle */
        problem u;
        problem_init(&u, false);
        ag_optimizer b;
        CHECK(ag_optim_init(&b, &u.ps, &c) == AG_OK);
        CHECK(ag_checkpoint_load(path, &u.ps, &b, NULL, NULL) == AG_OK && b.slow_set && b.step == 4, "%s",
              ag_errmsg());
        for (int t = 5; t <= 10; t++) set_grads(&u), ag_optim_step(&b);
        for (int k = 0; k < K; k++)
            CHECK(*elem(&u, k, false) == *elem(&p, k, false) &&
                      ag_optim_state(&b, k < 6 ? "w" : "b", "slow")[k < 6 ? k : k - 6] ==
                          ag_optim_state(&o, k < 6 ? "w" : "b", "slow")[k < 6 ? k : k - 6],
                  "%s: resumed at update 4, element %d", specs[i], k);
        /* evaluation: the slow weights swapped in (the average, where there is one), then back */
        ag_real trained[K];
        bool swapped_in = true, back = true;
        for (int k = 0; k < K; k++) trained[k] = *elem(&p, k, false);
        CHECK(ag_optim_swap_average(&o) && o.swapped, "%s: nothing swapped in", specs[i]);
        for (int k = 0; k < K; k++)
            swapped_in = swapped_in && (c.ema > 0 ? fabs(*elem(&p, k, false) - avg[k]) <= ATOL + RTOL * fabs(avg[k])
                                                  : *elem(&p, k, false) == slow[k]);
        CHECK(swapped_in, "%s: swapped in, the parameters are not the %s", specs[i],
              c.ema > 0 ? "average" : "slow weights");
        CHECK(ag_optim_swap_average(&o) && !o.swapped, "%s: not swapped back", specs[i]);
        for (int k = 0; k < K; k++) back = back && *elem(&p, k, false) == trained[k];
        CHECK(back, "%s: swapped back, the parameters are not the trained values", specs[i]);
        problem f;
        problem_init(&f, false);
        ag_optimizer fresh;
        CHECK(ag_optim_init(&fresh, &f.ps, &c) == AG_OK && !ag_optim_swap_average(&fresh),
              "%s: nothing to swap before an update", specs[i]);
        ag_optim_free(&fresh), ag_params_free(&f.ps);
        ag_optim_free(&b), ag_optim_free(&o), ag_optim_free(&r);
        ag_params_free(&u.ps), ag_params_free(&p.ps), ag_params_free(&q.ps);
    }
    remove(path);
    ag_optim_config c;
    char spec[200];
    CHECK(ag_optim_parse("adam:lookahead=5", &c) == AG_OK && c.lookahead == 5 && c.lookahead_alpha == 0.5 &&
              strstr(ag_optim_format(&c, spec, sizeof spec), ",lookahead=5,lookahead_alpha=0.5") &&
              ag_optim_parse(spec, &c) == AG_OK && c.lookahead == 5, "lookahead written and read back: %s", spec);
    CHECK(ag_optim_parse("adam", &c) == AG_OK && !strstr(ag_optim_format(&c, spec, sizeof spec), "lookahead"),
          "no lookahead, none written: %s", spec);
    EXPECT_ERROR(ag_optim_parse("sgd:lookahead=-1", &c), AG_ERR_ARG, "optimizer 'sgd': lookahead -1 must be >= 0");
    EXPECT_ERROR(ag_optim_parse("sgd:lookahead=5,lookahead_alpha=0", &c), AG_ERR_ARG, "lookahead_alpha 0 must be in (0, 1]");
    EXPECT_ERROR(ag_optim_parse("sgd:lookahead=5,lookahead_alpha=1.5", &c), AG_ERR_ARG, "lookahead_alpha 1.5 must be in (0, 1]");
}

/* Parameter groups: biases and LayerNorm gains get no weight decay, the
 * weight matrix keeps the config's, for coupled (sgd, adadelta) and
 * decoupled (adamw) decay alike.  With zero gradients only decay moves a
 * parameter. */
static void test_weight_decay_groups(void) {
    const char *specs[] = {"sgd:lr=0.5,weight_decay=0.1", "adamw:lr=0.5,weight_decay=0.1",
                           "adadelta:lr=0.5,weight_decay=0.1"};
    for (int k = 0; k < 3; k++) {
        ag_params ps = {0};
        ag_scope_push("enc");
        ag_tensor *w = ag_param(&ps, "w", 2, (int[]){2, 2});
        ag_tensor *b = ag_param(&ps, "b", 1, (int[]){2});
        ag_tensor *g = ag_param(&ps, "ln.gain", 1, (int[]){2});
        ag_scope_pop();
        CHECK(!strcmp(w->name, "enc.w") && !strcmp(g->name, "enc.ln.gain"), "%s %s", w->name, g->name);
        for (int i = 0; i < 4; i++) w->data[i] = 1;
        for (int i = 0; i < 2; i++) b->data[i] = g->data[i] = 1;
        ag_optim_config c;
        CHECK(ag_optim_parse(specs[k], &c) == AG_OK);
        ag_optimizer opt;
        CHECK(ag_optim_init(&opt, &ps, &c) == AG_OK);
        CHECK(ag_optim_set_weight_decay(&opt, ag_param_is_bias_or_norm, NULL, 0) == 2);
        ag_optim_step(&opt);
        CHECK(w->data[0] < 1, "%s: the matrix decays (%g)", specs[k], (double)w->data[0]);
        CHECK(b->data[0] == 1 && g->data[1] == 1, "%s: bias %g, gain %g moved", specs[k], (double)b->data[0],
              (double)g->data[1]);
        if (k == 0) CHECK_NEAR(w->data[0], 1 - 0.5 * 0.1, 1e-7, 0);
        if (k == 1) CHECK_NEAR(w->data[0], 1 - 0.5 * 0.1, 1e-7, 0); /* the decoupled shrink; m = 0 */
        ag_optim_free(&opt);
        ag_params_free(&ps);
    }
    EXPECT_FATAL(ag_scope_pop(), "ag_scope_pop", "no scope");
    EXPECT_FATAL(ag_scope_push("a.b"), "ag_scope_push", "'.'");
}

/* Per-parameter rates: a scale s on one parameter updates it to the bit as
 * the optimizer at lr * s, every kind, with a per-step schedule on top;
 * scale 0 keeps it as it was; a later call wins; bad scales stop. */
static void test_lr_scale_groups(void) {
    lr_scale_all(AG_CPU);
    ag_params ps;
    lr_scale_params(&ps, AG_CPU);
    ag_optim_config c = ag_optim_defaults(AG_SGD);
    ag_optimizer o;
    CHECK(ag_optim_init(&o, &ps, &c) == AG_OK && !o.lr_scale, "no scale until one is set");
    CHECK(ag_optim_set_lr_scale(&o, ag_param_is_bias_or_norm, NULL, 0.5) == 1 && o.lr_scale[0] == 1 &&
          o.lr_scale[1] == 0.5);
    CHECK(ag_optim_set_lr_scale(&o, lr_scale_named, "b", 2) == 1 && o.lr_scale[1] == 2, "the later call wins");
    CHECK(ag_optim_set_lr_scale(&o, lr_scale_named, "nothing", 3) == 0 && o.lr_scale[0] == 1);
    EXPECT_FATAL(ag_optim_set_lr_scale(&o, lr_scale_named, "b", -1), "ag_optim_set_lr_scale", "scale -1",
                 "finite and >= 0");
    EXPECT_FATAL(ag_optim_set_lr_scale(&o, lr_scale_named, "b", NAN), "ag_optim_set_lr_scale", "scale nan");
    EXPECT_FATAL(ag_optim_set_lr_scale(&o, lr_scale_named, "b", INFINITY), "ag_optim_set_lr_scale", "scale inf");
    ag_optim_free(&o);
    ag_params_free(&ps);
}

/* ---- the training step's fused update and parameter norm ----
 * ag__optim_step_gated_params_sq takes the squares in the update's pass;
 * they must be ag__params_sq_on's after ag__optim_step_gated to the bit,
 * and the values the same, for parameters across chunks and blocks, a
 * frozen one, an empty one, a skipped update (NaN gate), 1 and 2 threads.
 * With clear_grads the update also zeroes the gradients it read (the
 * training step's next zero_grad): the same values, every trained
 * gradient 0 after it, and every gradient as it was where the gate
 * skipped the update or the parameter is frozen. */
static void fused_set(ag_params *ps) {
    ag_param(ps, "w", 2, (int[]){300, 250}); /* 75000: three update chunks, 19 blocks */
    ag_param(ps, "b", 1, (int[]){5});
    ag_param(ps, "frozen", 1, (int[]){4100});
    ag_param(ps, "empty", 1, (int[]){0});
    ag_param(ps, "e", 2, (int[]){9, 4096});
    uint64_t r = 12345;
    for (int i = 0; i < ps->count; i++)
        for (int64_t k = 0; k < ps->items[i]->size; k++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            ps->items[i]->data[k] = (ag_real)((double)(r >> 40) / (1 << 24) - 0.5);
            ps->items[i]->grad[k] = (ag_real)((double)((r >> 16) & 0xffffff) / (1 << 24) - 0.5) * (k % 7 != 0);
        }
    ag_param_freeze(ps->items[2]);
}

static bool same_reals(const ag_real *x, const ag_real *y, int64_t n) {
    return n == 0 || !memcmp(x, y, (size_t)n * sizeof *x);
}

static bool all_zero(const ag_real *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] != 0) return false;
    return true;
}

static void test_fused_params_sq(void) {
    const char *specs[] = {"adam:weight_decay=0.01", "adadelta:lr=0.5,rho=0.95", "sgd:lr=0.1,momentum=0.9"};
    for (int threads = 1; threads <= 2; threads++)
        for (int i = 0; i < 3; i++)
            for (int gated = 0; gated < 2; gated++)
                for (int clear = 0; clear < 2; clear++) {
                    ag_set_num_threads(threads);
                    ag_params a = {0}, b = {0};
                    fused_set(&a);
                    fused_set(&b);
                    ag_optim_config c;
                    ag_optim_parse(specs[i], &c);
                    ag_optimizer oa, ob;
                    ag_optim_init(&oa, &a, &c);
                    ag_optim_init(&ob, &b, &c);
                    double gate = gated ? NAN : 1.0, sa = 0, sb = 0;
                    bool cleared = !clear, grads_ok = true;
                    for (int step = 0; step < 3; step++) {
                        for (int p = 0; p < a.count; p++) /* b's gradients as a's: a backward's */
                            memcpy(b.items[p]->grad, a.items[p]->grad, (size_t)a.items[p]->size * sizeof(ag_real));
                        ag__optim_step_gated(&oa, &gate);
                        sa = *ag__params_sq_on(&a, AG_CPU);
                        sb = *ag__optim_step_gated_params_sq(&ob, &gate, AG_CPU, clear, &cleared);
                        for (int p = 0; p < a.count; p++) {
                            const ag_tensor *pa = a.items[p], *pb = b.items[p];
                            bool zeroed = clear && !gated && pb->requires_grad;
                            grads_ok = grads_ok && (zeroed ? all_zero(pb->grad, pb->size)
                                                           : same_reals(pa->grad, pb->grad, pa->size));
                        }
                        ag_step_end();
                    }
                    bool same = memcmp(&sa, &sb, sizeof sa) == 0;
                    for (int p = 0; p < a.count; p++)
                        same = same && same_reals(a.items[p]->data, b.items[p]->data, a.items[p]->size);
                    CHECK(same && sa > 0, "%s, %d threads%s%s: fused squares %.17g, separate %.17g", specs[i],
                          threads, gated ? ", update skipped" : "", clear ? ", gradients cleared" : "", sb, sa);
                    CHECK(cleared == (bool)clear && grads_ok, "%s, %d threads%s%s: cleared %d, gradients %s", specs[i],
                          threads, gated ? ", update skipped" : "", clear ? ", gradients cleared" : "", cleared,
                          grads_ok ? "as expected" : "wrong (zeroed where they should stay, or left where cleared)");
                    ag_optim_free(&oa);
                    ag_optim_free(&ob);
                    ag_params_free(&a);
                    ag_params_free(&b);
                }
    ag_set_num_threads(1);
}

/* lazy=1: a row whose gradient is all zero keeps its value and state;
 * the others get the dense rule's bits.  Against the dense optimizer on a
 * copy whose dead rows are put back after each step, for rows that cross
 * the update's chunks (a row live through its far end only), a vector, a
 * skipped update, the gradients cleared or not, 1 and 2 threads. */
enum { LAZY_PARAMS = 3 };
static const int lazy_shape[LAZY_PARAMS][2] = {{300, 250}, {1, 7}, {2000, 54}};

static void lazy_set(ag_params *ps) {
    ag_param(ps, "e", 2, (int[]){300, 250}); /* rows cross the 32768-element chunks: row 131 holds 32750-32999 */
    ag_param(ps, "v", 1, (int[]){7});
    ag_param(ps, "t", 2, (int[]){2000, 54});
    uint64_t r = 99;
    for (int i = 0; i < ps->count; i++)
        for (int64_t k = 0; k < ps->items[i]->size; k++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            ps->items[i]->data[k] = (ag_real)((double)(r >> 40) / (1 << 24) - 0.5);
        }
}

/* Step `step`'s gradients: every 7th row (shifting with the step) and
 * row 131 of e through its last element only; v live on odd steps. */
static void lazy_grads(ag_params *ps, int step) {
    for (int i = 0; i < LAZY_PARAMS; i++) {
        ag_tensor *p = ps->items[i];
        int rows = lazy_shape[i][0], cols = lazy_shape[i][1];
        for (int rr = 0; rr < rows; rr++)
            for (int c = 0; c < cols; c++) {
                bool live = i == 1 ? step % 2 == 1 : (rr + step) % 7 == 0;
                if (i == 0 && rr == 131) live = c == cols - 1;
                p->grad[(int64_t)rr * cols + c] = live ? (ag_real)(0.01 * ((rr * 31 + c * 7 + step) % 19) - 0.09) : 0;
            }
    }
}

static bool row_is_zero(const ag_real *g, int cols) {
    for (int c = 0; c < cols; c++)
        if (g[c] != 0) return false;
    return true;
}

/* (Adadelta's lazy rows, and rmsprop's without momentum or centering, keep the dense rule's decay:
 * test_lazy_decaying.) */
static void test_lazy(void) {
    const char *specs[] = {"adam:weight_decay=0.01,lazy=1", "adamw:amsgrad=1,lazy=1",
                           "sgd:lr=0.1,momentum=0.9,lazy=1",
                           "adagrad:weight_decay=0.01,initial_accumulator_value=0.1,lazy=1",
                           "rmsprop:momentum=0.9,centered=1,lazy=1"};
    for (int threads = 1; threads <= 2; threads++)
        for (int i = 0; i < (int)(sizeof specs / sizeof *specs); i++)
            for (int variant = 0; variant < 3; variant++) { /* plain, gradients cleared, update skipped once */
                ag_set_num_threads(threads);
                ag_params a = {0}, b = {0};
                lazy_set(&a);
                lazy_set(&b);
                ag_optim_config lazy, dense;
                CHECK(ag_optim_parse(specs[i], &lazy) == AG_OK && lazy.lazy, "%s: %s", specs[i], ag_errmsg());
                dense = lazy;
                dense.lazy = false;
                ag_optimizer oa, ob;
                ag_optim_init(&oa, &a, &lazy);
                ag_optim_init(&ob, &b, &dense);
                bool same = true, cleared_ok = true;
                for (int step = 0; step < 4; step++) {
                    lazy_grads(&a, step);
                    lazy_grads(&b, step);
                    /* b's dead rows as they were: values and every slot */
                    ag_tensor *kept[LAZY_PARAMS][4];
                    for (int p = 0; p < LAZY_PARAMS; p++)
                        for (int sl = -1; sl < ob.n_slots; sl++) {
                            const ag_real *src = sl < 0 ? b.items[p]->data
                                                        : ag_optim_state(&ob, b.items[p]->name, ag_optim_slot_name(&ob, sl));
                            kept[p][sl + 1] = ag_tensor_new(1, (int[]){(int)b.items[p]->size});
                            memcpy(kept[p][sl + 1]->data, src, (size_t)b.items[p]->size * sizeof(ag_real));
                        }
                    double gate = variant == 2 && step == 1 ? NAN : 1.0;
                    bool cleared = false, clear = variant == 1;
                    double psq = *ag__optim_step_gated_params_sq(&oa, &gate, AG_CPU, clear, &cleared);
                    ag__optim_step_gated(&ob, &gate);
                    ag_params z = {0}; /* the values with the dead rows 0: what the squares cover */
                    for (int p = 0; p < LAZY_PARAMS; p++) {
                        int rows = lazy_shape[p][0], cols = lazy_shape[p][1];
                        ag_tensor *zp = ag_param(&z, b.items[p]->name, b.items[p]->ndim, b.items[p]->shape);
                        for (int rr = 0; rr < rows; rr++) {
                            int64_t at = (int64_t)rr * cols;
                            bool dead = row_is_zero(b.items[p]->grad + at, cols);
                            for (int c = 0; c < cols; c++) zp->data[at + c] = dead ? 0 : a.items[p]->data[at + c];
                            if (!dead) continue;
                            for (int sl = -1; sl < ob.n_slots; sl++) {
                                ag_real *dst = sl < 0 ? b.items[p]->data
                                                      : ag_optim_state(&ob, b.items[p]->name, ag_optim_slot_name(&ob, sl));
                                memcpy(dst + at, kept[p][sl + 1]->data + at, (size_t)cols * sizeof(ag_real));
                            }
                        }
                        same = same && same_reals(a.items[p]->data, b.items[p]->data, a.items[p]->size);
                        for (int sl = 0; sl < oa.n_slots; sl++)
                            same = same && same_reals(ag_optim_state(&oa, a.items[p]->name, ag_optim_slot_name(&oa, sl)),
                                                      ag_optim_state(&ob, b.items[p]->name, ag_optim_slot_name(&ob, sl)),
                                                      a.items[p]->size);
                        if (clear && isfinite(gate)) cleared_ok = cleared_ok && cleared && all_zero(a.items[p]->grad, a.items[p]->size);
                    }
                    double want = *ag__params_sq_on(&z, AG_CPU);
                    same = same && memcmp(&psq, &want, sizeof psq) == 0 && psq > 0;
                    ag_params_free(&z);
                    ag_step_end();
                }
                CHECK(same, "%s, %d threads, %s: lazy against dense with its dead rows put back", specs[i], threads,
                      variant == 0 ? "plain" : variant == 1 ? "gradients cleared" : "an update skipped");
                CHECK(cleared_ok, "%s, %d threads: gradients not all cleared", specs[i], threads);
                /* row 1 of t is never live in these 4 steps: its first value as lazy_set made it,
                 * where weight decay or momentum would have moved it */
                ag_params fresh = {0};
                lazy_set(&fresh);
                CHECK(same_reals(a.items[2]->data + 54, fresh.items[2]->data + 54, 54), "%s: a dead row moved",
                      specs[i]);
                ag_params_free(&fresh);
                ag_optim_free(&oa);
                ag_optim_free(&ob);
                ag_params_free(&a);
                ag_params_free(&b);
            }
    ag_set_num_threads(1);
}

/* Lazy adadelta (and rmsprop without momentum or centering) without
 * weight decay is the dense rule to the bit: a zero gradient only decays
 * their state, so a dead row's state gets the steps it missed (each a
 * multiply by rho, alpha) when it is next live, or when the state is
 * read.  Against the dense rule on the same gradients (every row live one
 * step in 7, so rows owe up to 6 steps; row 131 of e live through its far
 * end only, across a chunk), 14 steps: the values after every step, the
 * state at the end (and once mid-way, which brings every row up to date
 * there), with the gradients cleared, with an update skipped by the gate
 * (no step for the counts either), and through a checkpoint saved mid-way
 * into a fresh optimizer; 1 and 2 threads. */
static void test_lazy_decaying(void) {
    const char *specs[] = {"adadelta:lr=0.5,rho=0.95,lazy=1", "rmsprop:lr=0.01,alpha=0.9,lazy=1"};
    char path[] = "/tmp/test_optim_lazy.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    for (int threads = 1; threads <= 2; threads++)
        for (int i = 0; i < (int)(sizeof specs / sizeof *specs); i++)
            for (int variant = 0; variant < 4; variant++) { /* plain (a read mid-way), cleared, a skip, a checkpoint */
                ag_set_num_threads(threads);
                ag_params a = {0}, b = {0};
                lazy_set(&a);
                lazy_set(&b);
                ag_optim_config lazy, dense;
                CHECK(ag_optim_parse(specs[i], &lazy) == AG_OK, "%s", ag_errmsg());
                dense = lazy;
                dense.lazy = false;
                ag_optimizer oa, ob;
                ag_optim_init(&oa, &a, &lazy);
                ag_optim_init(&ob, &b, &dense);
                const char *first_slot = ag_optim_slot_name(&oa, 0);
                bool values_same = true;
                for (int step = 0; step < 14; step++) {
                    lazy_grads(&a, step);
                    lazy_grads(&b, step);
                    double gate = variant == 2 && step == 3 ? NAN : 1.0;
                    bool cleared = false;
                    if (variant == 1) (void)ag__optim_step_gated_params_sq(&oa, &gate, AG_CPU, true, &cleared);
                    else ag__optim_step_gated(&oa, &gate);
                    ag__optim_step_gated(&ob, &gate);
                    if (!isfinite(gate)) ag__optim_step_not_taken(&oa), ag__optim_step_not_taken(&ob);
                    for (int p = 0; p < LAZY_PARAMS; p++)
                        values_same = values_same && same_reals(a.items[p]->data, b.items[p]->data, a.items[p]->size);
                    if (variant == 0 && step == 8) /* a read mid-way: every row brought up to date there */
                        CHECK(same_reals(ag_optim_state(&oa, "t", first_slot), ag_optim_state(&ob, "t", first_slot),
                                         2000 * 54),
                              "%s, %d threads: the state read at step 8", specs[i], threads);
                    if (variant == 3 && step == 5) { /* saved, and read back by a fresh optimizer */
                        CHECK(ag_checkpoint_save(path, &a, &oa, NULL, NULL) == AG_OK, "%s", ag_errmsg());
                        ag_optim_free(&oa);
                        ag_optim_init(&oa, &a, &lazy);
                        CHECK(ag_checkpoint_load(path, &a, &oa, NULL, NULL) == AG_OK && oa.step == 6, "%s",
                              ag_errmsg());
                    }
                    ag_step_end();
                }
                const char *way[] = {"plain", "gradients cleared", "an update skipped", "through a checkpoint"};
                CHECK(values_same, "%s, %d threads, %s: the values against the dense rule's", specs[i], threads,
                      way[variant]);
                bool owed = false; /* the state before it is read: some row still owes steps */
                for (int64_t r = 0; r < 2000; r++) owed = owed || oa.missed[2][r] > 0;
                CHECK(owed, "%s, %d threads, %s: no row of t owes a step before the read", specs[i], threads,
                      way[variant]);
                for (int p = 0; p < LAZY_PARAMS; p++)
                    for (int sl = 0; sl < oa.n_slots; sl++) {
                        const char *slot = ag_optim_slot_name(&oa, sl), *name = a.items[p]->name;
                        CHECK(same_reals(ag_optim_state(&oa, name, slot), ag_optim_state(&ob, name, slot),
                                         a.items[p]->size),
                              "%s, %d threads, %s: %s of %s against the dense rule's", specs[i], threads, way[variant],
                              slot, name);
                    }
                int owing = 0;
                for (int64_t r = 0; r < 2000; r++) owing += oa.missed[2][r] != 0;
                CHECK(owing == 0, "%s: %d rows of t still owe steps after the read", specs[i], owing);
                ag_optim_free(&oa);
                ag_optim_free(&ob);
                ag_params_free(&a);
                ag_params_free(&b);
            }
    ag_set_num_threads(1);
    unlink(path);
}

int main(void) {
    printf("%s build\n", IS_F64 ? "f64" : "f32");
    test_fused_params_sq();
    test_lazy();
    test_lazy_decaying();
    test_weight_decay_groups();
    test_lr_scale_groups();
    test_sgd();
    test_adam();
    test_adadelta();
    test_adagrad();
    test_rmsprop();
    test_lr_change();
    test_parse();
    test_clip();
    test_finite_checks();
    test_l2_penalty();
    test_no_allocation();
    test_misuse();
    test_average();
    test_lookahead();
    ag_shutdown();
    return check_summary(IS_F64 ? "test_optim_f64" : "test_optim_f32");
}
