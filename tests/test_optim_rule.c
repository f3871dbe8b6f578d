/* test_optim_rule.c - update rules registered at run time (ag_optim_register),
 * with examples/lion.c's Lion, the very code users copy, compiled in:
 *   - its updates against Lion's formula computed here in double, over several
 *     steps, with weight decay, per-parameter weight decay, gradient clipping,
 *     a per-step schedule and lazy rows (f64: to 1e-15);
 *   - the same bits at 1 and 2 threads, on a parameter the step cuts into chunks;
 *   - specs: defaults, parse, format and back, parse_over, every refusal by name;
 *   - a rule's slots' initial values, an integer hyperparameter, the step t;
 *   - checkpoints: state saved as optim.lion.m.<param>, N steps + save + load +
 *     M steps = N + M steps, bit for bit;
 *   - the registry's refusals, each by name, and (where a CUDA device or the
 *     emulator is there) ag_optim_init's for parameters on the GPU;
 *   - with a plugin's path (tests/rule_then_fail_plugin.c), that a plugin whose
 *     ag_plugin_init registered a rule and then failed stays loaded.
 *
 *   test_optim_rule_f64 [rule_then_fail_plugin-f64.so] */
#include "optim_util.h"
#include "optim_step_cases.h"
#include "attngrad/model.h" /* ag_model_load_plugin */
#include "../examples/lion.c"
#include "lr_scale_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define TOL (IS_F64 ? 1e-15 : 2e-6)

static ag_optim_kind lion_kind(void) {
    ag_optim_kind k = AG_SGD;
    CHECK(ag_optim_find("lion", &k) && k >= AG_OPTIM_RULE_FIRST, "lion is a registered kind");
    return k;
}

/* ---- the registry ---- */

static void noop_update(ag_real *p, const ag_real *g, ag_real *const *slot, int64_t n, const ag_optim_args *a) {
    (void)p, (void)g, (void)slot, (void)n, (void)a;
}

static void expect_refused(const ag_optim_rule *r, const char *want1, const char *want2) {
    int before = 0;
    for (ag_optim_kind k = AG_OPTIM_RULE_FIRST; ag_optim_rule_of(k); k++) before++;
    EXPECT_ERROR(ag_optim_register(r), AG_ERR_ARG, "ag_optim_register", want1, want2);
    int after = 0;
    for (ag_optim_kind k = AG_OPTIM_RULE_FIRST; ag_optim_rule_of(k); k++) after++;
    CHECK(after == before, "a refused rule was registered all the same (%s)", want1);
}

static void test_register(void) {
    CHECK(ag_optim_register(&lion_rule) == AG_OK, "%s", ag_errmsg());
    ag_optim_kind k = lion_kind();
    CHECK(ag_optim_rule_of(k) == &lion_rule && !strcmp(ag_optim_name(k), "lion"));
    CHECK(ag_optim_rule_of(AG_ADAM) == NULL && ag_optim_rule_of((ag_optim_kind)(AG_OPTIM_RULE_FIRST + 31)) == NULL);
    CHECK(ag_optim_find("adamw", &k) && k == AG_ADAMW);
    k = AG_SGD;
    CHECK(!ag_optim_find("lamb", &k) && k == AG_SGD && !strcmp(ag_optim_name((ag_optim_kind)99), "?"));

    static const ag_optim_hparam one[] = {{"beta", 0.9, 0, 1, AG_HPARAM_MAX_OPEN}, {NULL}};
    static const ag_optim_hparam reserved[] = {{"lr", 0.1, 0, 1, 0}, {NULL}}, averaging[] = {{"ema", 0.1, 0, 1, 0}, {NULL}};
    static const ag_optim_hparam twice[] = {{"beta", 0.9, 0, 1, 0}, {"beta", 0.5, 0, 1, 0}, {NULL}};
    static const ag_optim_hparam outside[] = {{"beta", 1, 0, 1, AG_HPARAM_MAX_OPEN}, {NULL}};
    static const ag_optim_hparam no_max[] = {{"eps", 1e-8, 0, 0, 0}, {NULL}}; /* max left out: 0 */
    static const ag_optim_hparam upper[] = {{"Beta", 0.9, 0, 1, 0}, {NULL}};
    static const ag_optim_hparam not_int[] = {{"k", 2.5, 1, 10, AG_HPARAM_INT}, {NULL}};
    static const ag_optim_hparam empty[] = {{"k", 2, 3, 1, 0}, {NULL}};
    static const ag_optim_hparam nine[] = {{"a", 0, 0, 1, 0}, {"b", 0, 0, 1, 0}, {"c", 0, 0, 1, 0}, {"d", 0, 0, 1, 0},
                                           {"e", 0, 0, 1, 0}, {"f", 0, 0, 1, 0}, {"g", 0, 0, 1, 0}, {"h", 0, 0, 1, 0},
                                           {"i", 0, 0, 1, 0}, {NULL}};
    static const ag_optim_slot dotted[] = {{"m.1", 0}, {NULL}};
    static const ag_optim_slot same[] = {{"m", 0}, {"m", 1}, {NULL}};
    static const ag_optim_slot five[] = {{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"e", 0}, {NULL}};
    static const ag_optim_slot inf[] = {{"m", HUGE_VAL}, {NULL}};
    const int abi = AG_OPTIM_RULE_ABI;
    const int other_real = AG_OPTIM_RULE_API_VERSION * 100 + (IS_F64 ? 4 : 8);
    expect_refused(NULL, "rule is NULL", "");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "lion", .update = noop_update}, "'lion' is already registered", "");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "adam", .update = noop_update}, "'adam' is a built-in optimizer", "");
    expect_refused(&(ag_optim_rule){.name = "mine", .update = noop_update}, "rule 'mine' has no .abi",
                   "AG_OPTIM_RULE_ABI");
    expect_refused(&(ag_optim_rule){.abi = other_real, .name = "mine", .update = noop_update}, "rule 'mine' was built against",
                   IS_F64 ? "with -DAG_REAL_DOUBLE" : "without -DAG_REAL_DOUBLE");
    expect_refused(&(ag_optim_rule){.abi = 900 + (int)sizeof(ag_real), .name = "mine", .update = noop_update},
                   "optimizer rule API 9", "rebuild it");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "a:b", .update = noop_update}, "rule name 'a:b' is not", "");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = NULL, .update = noop_update}, "rule name '(NULL)'", "");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine"}, "rule 'mine' has no update function", "");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .lr = -1, .update = noop_update}, "rule 'mine': default lr -1",
                   "finite and >= 0");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = reserved, .update = noop_update},
                   "hyperparameter 'lr'", "a key every optimizer has");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = averaging, .update = noop_update},
                   "hyperparameter 'ema'", "a key every optimizer has (lr, weight_decay, lazy, ema, swa, lookahead,");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = twice, .update = noop_update},
                   "hyperparameter 'beta'", "given twice");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = outside, .update = noop_update},
                   "rule 'mine': hyperparameter 'beta': its default 1 is not in [0, 1)", "");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = no_max, .update = noop_update},
                   "hyperparameter 'eps': its default 1e-08 is not in [0, 0]", "HUGE_VAL");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = upper, .update = noop_update},
                   "hyperparameter 'Beta'", "not a name");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = not_int, .update = noop_update},
                   "hyperparameter 'k': its default 2.5 is not an integer in [1, 10]", "");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = empty, .update = noop_update},
                   "hyperparameter 'k'", "an empty range");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = nine, .update = noop_update},
                   "hyperparameter 'i'", "one more than the 8");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .hparams = one, .slots = dotted, .update = noop_update},
                   "slot 'm.1'", "not a name");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .slots = same, .update = noop_update}, "slot 'm'",
                   "given twice");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .slots = five, .update = noop_update}, "slot 'e'",
                   "one more than the 4");
    expect_refused(&(ag_optim_rule){.abi = abi, .name = "mine", .slots = inf, .update = noop_update}, "slot 'm'",
                   "not finite");
}

/* ---- specs ---- */

static void test_specs(void) {
    ag_optim_kind k = lion_kind();
    ag_optim_config c, d;
    char spec[256], again[256];
    CHECK(ag_optim_parse("lion", &c) == AG_OK && c.kind == k && c.lr == 1e-4 && c.weight_decay == 0 &&
              c.hparam[BETA1] == 0.9 && c.hparam[BETA2] == 0.99 && !c.lazy, "%s", ag_errmsg());
    d = ag_optim_defaults(k);
    CHECK(d.kind == k && d.lr == c.lr && d.hparam[BETA1] == 0.9 && d.hparam[BETA2] == 0.99 && d.hparam[2] == 0);
    CHECK(!strcmp(ag_optim_format(&c, spec, sizeof spec), "lion:lr=0.0001,beta1=0.9,beta2=0.99,weight_decay=0"), "%s", spec);
    CHECK(ag_optim_parse("lion:lr=3e-4,beta1=0.95,beta2=0.98,weight_decay=0.1,lazy=1", &c) == AG_OK, "%s", ag_errmsg());
    CHECK(c.lr == 3e-4 && c.hparam[BETA1] == 0.95 && c.hparam[BETA2] == 0.98 && c.weight_decay == 0.1 && c.lazy);
    ag_optim_format(&c, spec, sizeof spec);
    CHECK(!strcmp(spec, "lion:lr=0.0003,beta1=0.95,beta2=0.98,weight_decay=0.1,lazy=1"), "%s", spec);
    CHECK(ag_optim_parse(spec, &d) == AG_OK && d.kind == c.kind && d.lr == c.lr && d.weight_decay == c.weight_decay &&
              d.lazy && !memcmp(d.hparam, c.hparam, sizeof c.hparam), "round trip of %s", spec);
    CHECK(!strcmp(ag_optim_format(&d, again, sizeof again), spec), "%s then %s", spec, again);
    /* over a base: the keys left out keep the base's; another kind starts from its defaults */
    CHECK(ag_optim_parse_over("lion:beta2=0.9", &c, &d) == AG_OK && d.lr == 3e-4 && d.hparam[BETA1] == 0.95 &&
              d.hparam[BETA2] == 0.9 && d.weight_decay == 0.1 && d.lazy, "%s", ag_errmsg());
    CHECK(ag_optim_parse_over("adam", &c, &d) == AG_OK && d.kind == AG_ADAM && d.hparam[0] == 0 && d.lr == 1e-3);
    CHECK(ag_optim_parse_over("lion:lr=0.5", &d, &c) == AG_OK && c.kind == k && c.hparam[BETA1] == 0.9 && c.lr == 0.5);
    /* refusals, each naming the optimizer and the key */
    EXPECT_ERROR(ag_optim_parse("lion:eps=1e-8", &c), AG_ERR_ARG, "optimizer 'lion': unknown key 'eps'",
                 "(it takes: lr, beta1, beta2, weight_decay, lazy, ema, swa, lookahead, lookahead_alpha)");
    EXPECT_ERROR(ag_optim_parse("lion:beta1=1", &c), AG_ERR_ARG, "optimizer 'lion': beta1 1 must be in [0, 1)");
    EXPECT_ERROR(ag_optim_parse("lion:beta2=-0.5", &c), AG_ERR_ARG, "optimizer 'lion': beta2 -0.5 must be in [0, 1)");
    EXPECT_ERROR(ag_optim_parse("lion:beta2=abc", &c), AG_ERR_ARG, "key 'beta2': 'abc' is not a finite number");
    EXPECT_ERROR(ag_optim_parse("lion:beta1=0.5,beta1=0.6", &c), AG_ERR_ARG, "key 'beta1' given twice");
    EXPECT_ERROR(ag_optim_parse("lion:weight_decay=-1", &c), AG_ERR_ARG, "optimizer 'lion': weight_decay -1");
    EXPECT_ERROR(ag_optim_parse("lion:lr=-1", &c), AG_ERR_ARG, "optimizer 'lion': lr -1 must be >= 0");
    EXPECT_ERROR(ag_optim_parse("lamb:lr=1", &c), AG_ERR_ARG, "unknown optimizer 'lamb'", "rmsprop, muon, adafactor, lion)");
    c = ag_optim_defaults(k);
    c.hparam[BETA2] = NAN;
    EXPECT_ERROR(ag_optim_check(&c), AG_ERR_ARG, "optimizer 'lion': beta2 nan must be in [0, 1)");
    c.kind = (ag_optim_kind)(AG_OPTIM_RULE_FIRST + 31);
    EXPECT_ERROR(ag_optim_check(&c), AG_ERR_ARG, "unknown optimizer kind 95");
}

/* ---- Lion against its formula, in double ---- */

/* w [4, 3] (rows of 3) and b [3]: gradients from a quadratic, so that they
 * follow the values; in the lazy case rows go dead by turns. */
enum { W_ROWS = 4, W_COLS = 3, NW = W_ROWS * W_COLS, NB = 3, STEPS = 7 };

typedef struct {
    double x[NW + NB], m[NW + NB];
} lion_ref;

static double grad_of(int k, double x, int step, bool lazy) {
    int row = k < NW ? k / W_COLS : -1;
    if (lazy && row >= 0 && (row + step) % 3 == 0) return 0; /* a dead row this step */
    if (lazy && row < 0 && step % 2 == 1) return 0;          /* b: dead on odd steps */
    return (0.3 + 0.2 * k) * (x - 0.5 * sin(1.0 + k)) + (k % 4 == 1 ? 1e-3 : 0);
}

/* One step of the reference: every element in double, the clipping of
 * torch.nn.utils.clip_grad_norm_, Lion's formula, b without decay. */
static void ref_step(lion_ref *r, const ag_optim_config *c, double lr, double clip, int step, bool lazy) {
    double g[NW + NB], sq = 0;
    for (int k = 0; k < NW + NB; k++) g[k] = grad_of(k, r->x[k], step, lazy), sq += g[k] * g[k];
    double norm = sqrt(sq), coef = clip / (norm + 1e-6);
    for (int k = 0; k < NW + NB; k++) {
        if (coef < 1) g[k] *= coef;
        int row = k < NW ? k / W_COLS : -1;
        bool dead = true;
        for (int j = 0; j < (row >= 0 ? W_COLS : NB); j++)
            dead = dead && grad_of(row >= 0 ? row * W_COLS + j : NW + j, 0, step, lazy) == 0;
        if (lazy && dead) continue;
        double b1 = c->hparam[BETA1], b2 = c->hparam[BETA2], wd = k < NW ? c->weight_decay : 0;
        double u = b1 * r->m[k] + (1 - b1) * g[k];
        r->x[k] -= lr * ((u > 0) - (u < 0) + wd * r->x[k]);
        r->m[k] = b2 * r->m[k] + (1 - b2) * g[k];
    }
}

static double lion_case(const char *spec, bool lazy) {
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){W_ROWS, W_COLS});
    ag_tensor *b = ag_param(&ps, "b", 1, (int[]){NB});
    lion_ref r = {0};
    for (int k = 0; k < NW + NB; k++) {
        r.x[k] = 1.1 - 0.17 * k;
        *(k < NW ? &w->data[k] : &b->data[k - NW]) = (ag_real)r.x[k];
        r.x[k] = (double)(ag_real)r.x[k];
    }
    ag_optim_config c;
    CHECK(ag_optim_parse(spec, &c) == AG_OK, "%s: %s", spec, ag_errmsg());
    ag_optimizer o;
    CHECK(ag_optim_init(&o, &ps, &c) == AG_OK, "%s", ag_errmsg());
    CHECK(o.n_slots == 1 && !strcmp(ag_optim_slot_name(&o, 0), "m") && !ag_optim_slot_name(&o, 1));
    CHECK(ag_optim_set_weight_decay(&o, ag_param_is_bias_or_norm, NULL, 0) == 1); /* b: none */
    ag_lr_steps warm;
    CHECK(ag_lr_steps_parse("linear:warmup=3,total=10,min_ratio=0.2", &warm) == AG_OK, "%s", ag_errmsg());
    const double clip = 0.8;
    double worst = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int k = 0; k < NW + NB; k++) {
            ag_real *g = k < NW ? &w->grad[k] : &b->grad[k - NW];
            *g = (ag_real)grad_of(k, (double)(k < NW ? w->data[k] : b->data[k - NW]), step, lazy);
        }
        double lr = ag_lr_steps_apply(&warm, &o, c.lr);
        ag_clip_grad_norm(&ps, clip);
        ag_optim_step(&o);
        ref_step(&r, &c, lr, clip, step, lazy);
        const ag_real *m[2] = {ag_optim_state(&o, "w", "m"), ag_optim_state(&o, "b", "m")};
        for (int k = 0; k < NW + NB; k++) {
            double x = (double)(k < NW ? w->data[k] : b->data[k - NW]), mk = (double)(k < NW ? m[0][k] : m[1][k - NW]);
            worst = fmax(worst, fmax(fabs(x - r.x[k]), fabs(mk - r.m[k])));
            if (isnan(x) || isnan(mk)) worst = INFINITY;
        }
    }
    printf("  %-58s %d steps: worst error %.3g\n", spec, STEPS, worst);
    ag_optim_free(&o);
    ag_params_free(&ps);
    return worst;
}

static void test_lion_reference(void) {
    const char *specs[] = {"lion:lr=0.01,beta1=0.9,beta2=0.99,weight_decay=0.1",
                           "lion:lr=0.02,beta1=0.5,beta2=0.9,weight_decay=0.3,lazy=1",
                           "lion:lr=0.01,beta1=0,beta2=0,weight_decay=0"}; /* sign descent: m is g */
    for (int i = 0; i < 3; i++) {
        double worst = lion_case(specs[i], i == 1);
        CHECK(worst <= TOL, "%s: worst error %.3g over %d steps (tolerance %g)", specs[i], worst, STEPS, TOL);
    }
    /* the lazy case's dead rows matter: the dense rule on the same gradients is far from the lazy reference */
    double dense = lion_case("lion:lr=0.02,beta1=0.5,beta2=0.9,weight_decay=0.3", true);
    CHECK(dense > 1e-3, "the dense rule matches the lazy reference (%.3g): the test sees no dead row", dense);
}

/* A rule's ag_optim_args.lr is the parameter's own rate: a scale s on b
 * updates it as Lion at lr * s (and scale 0 not at all, decay included). */
static void test_lr_scale(void) {
    lr_scale_case("lion:lr=0.01,beta1=0.9,beta2=0.99,weight_decay=0.1", 0.25, AG_CPU, 6);
    lr_scale_case("lion:lr=0.01,beta1=0.9,beta2=0.99,weight_decay=0.1", 0, AG_CPU, 6);
}

/* ---- a rule's slots' initial values, an integer hyperparameter, t ---- */

/* value += t * k; acc += g; seen = t (checks every argument a step hands over) */
static void probe_update(ag_real *p, const ag_real *g, ag_real *const *slot, int64_t n, const ag_optim_args *a) {
    for (int64_t j = 0; j < n; j++) {
        p[j] += (ag_real)((double)a->t * a->hparam[0] + a->lr * 1000 + a->weight_decay * 100);
        slot[0][j] += g[j];
        slot[1][j] = (ag_real)a->t;
    }
}

static const ag_optim_hparam probe_hparams[] = {{"k", 2, 1, 10, AG_HPARAM_INT | AG_HPARAM_MIN_OPEN}, {NULL}};
static const ag_optim_slot probe_slots[] = {{"acc", 0.5}, {"seen", -1}, {NULL}};
static const ag_optim_rule probe_rule = {.abi = AG_OPTIM_RULE_ABI, .name = "probe", .lr = 0, .weight_decay = 0,
                                         .hparams = probe_hparams, .slots = probe_slots, .update = probe_update};

static void test_probe(void) {
    CHECK(ag_optim_register(&probe_rule) == AG_OK, "%s", ag_errmsg());
    ag_optim_config c;
    EXPECT_ERROR(ag_optim_parse("probe:k=2.5", &c), AG_ERR_ARG, "optimizer 'probe': k 2.5 must be an integer in (1, 10]");
    EXPECT_ERROR(ag_optim_parse("probe:k=1", &c), AG_ERR_ARG, "k 1 must be an integer in (1, 10]");
    CHECK(ag_optim_parse("probe:k=3,weight_decay=0.02", &c) == AG_OK && c.hparam[0] == 3, "%s", ag_errmsg());
    char spec[128];
    CHECK(!strcmp(ag_optim_format(&c, spec, sizeof spec), "probe:lr=0,k=3,weight_decay=0.02"), "%s", spec);
    ag_params ps = {0};
    ag_tensor *x = ag_param(&ps, "x", 1, (int[]){5});
    ag_tensor *frozen = ag_param(&ps, "frozen", 1, (int[]){2});
    ag_param_freeze(frozen);
    ag_optimizer o;
    CHECK(ag_optim_init(&o, &ps, &c) == AG_OK, "%s", ag_errmsg());
    CHECK(o.n_slots == 2 && !ag_optim_state(&o, "frozen", "acc"));
    const ag_real *acc = ag_optim_state(&o, "x", "acc"), *seen = ag_optim_state(&o, "x", "seen");
    CHECK(acc && seen && acc[0] == (ag_real)0.5 && acc[4] == (ag_real)0.5 && seen[2] == -1, "initial values");
    for (int j = 0; j < 5; j++) x->grad[j] = (ag_real)(j + 1);
    for (int t = 1; t <= 3; t++) {
        o.lr = 0.001 * t;
        ag_optim_step(&o);
    }
    /* x: 3 * (1 + 2 + 3) + 1000 * 0.001 * (1 + 2 + 3) + 100 * 0.02 * 3 */
    CHECK_NEAR(x->data[3], 30, 1e-5, 0);
    CHECK(acc[3] == (ag_real)(0.5 + 3 * 4) && seen[3] == 3 && frozen->data[0] == 0, "acc %g seen %g", (double)acc[3],
          (double)seen[3]);
    ag_optim_free(&o);
    ag_params_free(&ps);
}

/* ---- threads: the same bits at 1 and 2, dense and lazy ---- */

static void big_grads(ag_params *ps, int step) {
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        int64_t cols = p->shape[p->ndim - 1];
        for (int64_t k = 0; k < p->size; k++)
            p->grad[k] = (k / cols + step) % 5 == 0 ? 0 : (ag_real)(0.01 * (double)((k * 7 + step) % 23) - 0.1);
    }
}

static void test_threads(void) {
    threads_case("lion:lr=0.01,weight_decay=0.1", big_grads, 4, 1.0);
    threads_case("lion:lr=0.01,weight_decay=0.1,lazy=1", big_grads, 4, 1.0);
}

/* ---- no allocation in a step ---- */

static void test_no_allocation(void) { gate_and_memory_case("lion:weight_decay=0.1", big_grads, 20); }

/* ---- checkpoints ---- */

static void train(tiny_mlp *m, ag_optimizer *o, ag_train_state *ts, const ag_lr_steps *warm, int steps) {
    int idx[MLP_BATCH];
    for (int k = 0; k < steps; k++) {
        tiny_mlp_batch(&ts->rng, idx);
        ag_tensor *loss = tiny_mlp_loss(m, idx);
        ag_params_zero_grad(&m->ps);
        ag_backward(loss);
        ag_clip_grad_norm(&m->ps, 1.0);
        ag_lr_steps_apply(warm, o, o->cfg.lr);
        ag_optim_step(o);
        ag_step_end();
        ts->step++;
    }
}

static void test_checkpoint(void) {
    enum { N = 7, M = 9 };
    char dir[] = "/tmp/test_optim_rule.XXXXXX", path[128];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/lion.safetensors", dir);
    ag_optim_config oc;
    ag_lr_steps warm;
    CHECK(ag_optim_parse("lion:lr=3e-3,beta2=0.95,weight_decay=0.2", &oc) == AG_OK);
    CHECK(ag_lr_steps_parse("cosine:warmup=4,total=30", &warm) == AG_OK);

    tiny_mlp a, b;
    tiny_mlp_init(&a, 3);
    ag_optimizer oa, ob;
    ag_optim_init(&oa, &a.ps, &oc);
    ag_optim_set_weight_decay(&oa, ag_param_is_bias_or_norm, NULL, 0);
    ag_train_state ta = {0}, tb = {0};
    ag_rng_seed(&ta.rng, 11);
    train(&a, &oa, &ta, &warm, N);
    CHECK(ag_checkpoint_save(path, &a.ps, &oa, NULL, &ta) == AG_OK, "%s", ag_errmsg());
    train(&a, &oa, &ta, &warm, M);

    ag_st_file f;
    CHECK(ag_st_read(path, &f) == AG_OK, "%s", ag_errmsg());
    const ag_st_tensor *m1 = ag_st_get(&f, "optim.lion.m.l1.weight");
    CHECK(m1 && m1->numel == MLP_IN * MLP_HIDDEN && ag_st_get(&f, "optim.lion.m.l2.bias"), "the state by slot name");
    CHECK(ag_st_meta(&f, "optim") && !strcmp(ag_st_meta(&f, "optim"), "lion:lr=0.003,beta1=0.9,beta2=0.95,weight_decay=0.2"),
          "%s", ag_st_meta(&f, "optim"));
    ag_st_close(&f);

    tiny_mlp_init(&b, 3); /* the same data; other values, which the file's must replace */
    ag_rng other;
    ag_rng_seed(&other, 999);
    for (int i = 0; i < b.ps.count; i++) ag_init_uniform(b.ps.items[i], -3, 3, &other);
    ag_optim_init(&ob, &b.ps, &oc);
    ag_optim_set_weight_decay(&ob, ag_param_is_bias_or_norm, NULL, 0);
    CHECK(ag_checkpoint_load(path, &b.ps, &ob, NULL, &tb) == AG_OK, "%s", ag_errmsg());
    CHECK(ob.step == N && tb.step == N);
    train(&b, &ob, &tb, &warm, M);
    bool same = oa.step == ob.step && oa.lr == ob.lr;
    for (int i = 0; i < a.ps.count; i++)
        same = same && !memcmp(a.ps.items[i]->data, b.ps.items[i]->data, (size_t)a.ps.items[i]->size * sizeof(ag_real)) &&
               !memcmp(oa.slot[i], ob.slot[i], (size_t)a.ps.items[i]->size * sizeof(ag_real));
    CHECK(same, "lion: %d steps + save + load + %d steps differs from %d uninterrupted", N, M, N + M);
    printf("  checkpoint: lion %d + %d steps resumed: %s\n", N, M, same ? "identical" : "DIFFERENT");

    /* another optimizer's run refuses the file by its kind; the same run with another rule's too */
    ag_optimizer adam;
    ag_optim_config ac = ag_optim_defaults(AG_ADAM);
    ag_optim_init(&adam, &b.ps, &ac);
    EXPECT_ERROR(ag_checkpoint_load(path, &b.ps, &adam, NULL, NULL), AG_ERR_ARG, "holds 'lion' optimizer state",
                 "this run uses 'adam'");
    ag_optim_free(&adam);
    ag_optim_free(&oa), ag_optim_free(&ob);
    ag_params_free(&a.ps), ag_params_free(&b.ps);
    unlink(path);
    rmdir(dir);
}

/* ---- a plugin that registered a rule, then failed: kept loaded ---- */

static void test_failed_plugin(const char *path) {
    if (!path) {
        printf("  plugin: not tested (no rule_then_fail_plugin.so given)\n");
        return;
    }
    EXPECT_ERROR(ag_model_load_plugin(path), AG_ERR_ARG, "ag_plugin_init failed: fails after registering its rule");
    ag_optim_config c;
    CHECK(ag_optim_parse("halve", &c) == AG_OK, "the rule stays registered: %s", ag_errmsg());
    ag_params ps = {0};
    ag_tensor *x = ag_param(&ps, "x", 1, (int[]){3});
    x->data[1] = 3;
    ag_optimizer o;
    CHECK(ag_optim_init(&o, &ps, &c) == AG_OK, "%s", ag_errmsg());
    ag_optim_step(&o); /* the plugin's code: a crash if it had been unloaded */
    CHECK(x->data[1] == (ag_real)1.5, "halve gave %g", (double)x->data[1]);
    ag_optim_free(&o);
    ag_params_free(&ps);
}

/* ---- a GPU: refused at init, naming the rule and the device ---- */

static void test_cuda(void) {
    char why[256];
    if (!ag_cuda_available(why, sizeof why)) {
        printf("  cuda: not tested (%s)\n", why);
        return;
    }
    ag_params ps = {0};
    ag_param(&ps, "w", 2, (int[]){2, 3});
    ag_params_to(&ps, AG_CUDA);
    ag_optim_config c;
    ag_optim_parse("lion", &c);
    ag_optimizer o;
    EXPECT_ERROR(ag_optim_init(&o, &ps, &c), AG_ERR_ARG, "optimizer 'lion' is a registered rule",
                 "the parameters are on the cuda");
    CHECK(o.state == NULL && o.slot == NULL && o.n_params == 0, "a refused init leaves nothing to free");
    ag_optim_config adam = ag_optim_defaults(AG_ADAM);
    CHECK(ag_optim_init(&o, &ps, &adam) == AG_OK, "a built-in optimizer on the same parameters: %s", ag_errmsg());
    ag_optim_free(&o);
    ag_params_free(&ps);
    printf("  cuda: lion refused on the GPU, adam taken\n");
}

int main(int argc, char **argv) {
    printf("%s build\n", IS_F64 ? "f64" : "f32");
    test_register();
    test_specs();
    test_lion_reference();
    test_lr_scale();
    test_probe();
    test_threads();
    test_no_allocation();
    test_checkpoint();
    test_failed_plugin(argc > 1 ? argv[1] : NULL);
    test_cuda();
    ag_shutdown();
    return check_summary("optim_rule");
}
