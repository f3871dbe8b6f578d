/* test_optim_muon.c - the Muon optimizer (AG_MUON) on the CPU:
 *   - its steps against torch.optim.Muon's algorithm computed here in double,
 *     literally (a tall matrix transposed, Newton-Schulz on the wide side),
 *     on a wide (twice: one batch of two), a tall and a square matrix, with the AdamW part on an
 *     embedding table and a bias (its own weight decay group), clipping and
 *     a per-step schedule: nesterov or not, either scale, ns_steps, weight
 *     decay (f64: to 1e-13, f32: 2e-6); and that Newton-Schulz mattered;
 *   - a Muon matrix keeps one buffer (m), the others m and v;
 *   - ag_optim_set_muon: a matrix routed to the AdamW part and an embedding
 *     table routed to Muon's step follow the same reference on their new
 *     side, with their slots; its count; its refusals (another optimizer,
 *     after a step);
 *   - the same bits at 1 and 2 threads on a matrix the products cut;
 *   - a step the training step's gate skips changes nothing;
 *   - no allocation once warm;
 *   - the spec: defaults, format and back, every refusal by name.
 * The GPU's Muon against this one: tests/test_cuda_train.c; a checkpoint's
 * round trip: tests/test_checkpoint.c.
 *
 *   test_optim_muon_f32, test_optim_muon_f64 */
#include "optim_util.h"
#include "optim_step_cases.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define TOL (IS_F64 ? 1e-13 : 2e-6)

/* ---- the spec ---- */

static void test_specs(void) {
    ag_optim_config c, d;
    char spec[256];
    CHECK(ag_optim_parse("muon", &c) == AG_OK && c.kind == AG_MUON && c.lr == 1e-3 && c.momentum == 0.95 &&
              c.nesterov && c.ns_steps == 5 && c.eps == 1e-7 && c.weight_decay == 0.1 && c.match_rms_adamw &&
              c.beta1 == 0.9 && c.beta2 == 0.999 && c.adam_eps == 1e-8, "%s", ag_errmsg());
    CHECK(!strcmp(ag_optim_format(&c, spec, sizeof spec),
                  "muon:lr=0.001,momentum=0.95,nesterov=1,ns_steps=5,eps=1e-07,match_rms_adamw=1,beta1=0.9,"
                  "beta2=0.999,adam_eps=1e-08,weight_decay=0.1"), "%s", spec);
    CHECK(ag_optim_parse("muon:lr=0.02,nesterov=0,ns_steps=3,match_rms_adamw=0,beta2=0.95,swa=4", &c) == AG_OK,
          "%s", ag_errmsg());
    ag_optim_format(&c, spec, sizeof spec);
    CHECK(ag_optim_parse(spec, &d) == AG_OK && !memcmp(&c, &d, sizeof c), "round trip of %s", spec);
    EXPECT_ERROR(ag_optim_parse("muon:lazy=1", &c), AG_ERR_ARG, "optimizer 'muon': lazy=1 is not for muon");
    EXPECT_ERROR(ag_optim_parse("muon:ns_steps=0", &c), AG_ERR_ARG, "optimizer 'muon': ns_steps 0 must be in [1, 99]");
    EXPECT_ERROR(ag_optim_parse("muon:ns_steps=100", &c), AG_ERR_ARG, "ns_steps 100");
    EXPECT_ERROR(ag_optim_parse("muon:momentum=1", &c), AG_ERR_ARG, "optimizer 'muon': momentum 1 must be in [0, 1)");
    EXPECT_ERROR(ag_optim_parse("muon:eps=0", &c), AG_ERR_ARG, "optimizer 'muon': eps 0 must be finite and > 0");
    EXPECT_ERROR(ag_optim_parse("muon:adam_eps=0", &c), AG_ERR_ARG, "optimizer 'muon': adam_eps 0 must be > 0");
    EXPECT_ERROR(ag_optim_parse("muon:beta2=1", &c), AG_ERR_ARG, "beta2 1 (its AdamW part's) must be in [0, 1)");
    EXPECT_ERROR(ag_optim_parse("muon:rho=0.9", &c), AG_ERR_ARG, "optimizer 'muon': unknown key 'rho'");
}

/* ---- against torch.optim.Muon's algorithm, in double ---- */

enum { N_PARAMS = 6, STEPS = 6 };
static const char *const names[N_PARAMS] = {"w", "t", "q", "embed.x", "b", "w2"};
/* b: [4]; w2 w's shape, after others: one batch of two (muon_matrices) */
static const int shapes[N_PARAMS][2] = {{3, 5}, {6, 4}, {4, 4}, {5, 3}, {4, 1}, {3, 5}};

typedef struct {
    double *x[N_PARAMS], *m[N_PARAMS], *v[N_PARAMS];
    bool muon[N_PARAMS]; /* takes Muon's step; else the AdamW part */
} muon_ref;

static int size_of(int p) { return shapes[p][0] * shapes[p][1]; }
static bool is_matrix(int p) { return p < 3 || p == 5; } /* the default side: weight matrices, not the embedding */

static double grad_of(int p, int k, double x) {
    int flat = 5 * p + k;
    return (0.3 + 0.02 * flat) * (x - 0.5 * sin(1.0 + flat)) + (flat % 4 == 1 ? 1e-3 : 0);
}

static double lerp(double a, double b, double w) { return w < 0.5 ? a + w * (b - a) : b - (b - a) * (1 - w); }

/* C [n, n] = X X^T of X [n, k] */
static void gram(const double *X, int n, int k, double *C) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += X[i * k + l] * X[j * k + l];
            C[i * n + j] = s;
        }
}

/* torch's _zeropower_via_newtonschulz, in double: X [r, c] in place. */
static void newton_schulz(double *X, int r, int c, int steps, double eps) {
    const bool tall = r > c;
    const int n = tall ? c : r, k = tall ? r : c; /* Y [n, k], the wide side */
    double *Y = malloc((size_t)n * k * sizeof *Y), *A = malloc((size_t)n * n * sizeof *A),
           *B = malloc((size_t)n * n * sizeof *B), *Z = malloc((size_t)n * k * sizeof *Z);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) Y[tall ? j * k + i : i * k + j] = X[i * c + j];
    double sq = 0;
    for (int i = 0; i < n * k; i++) sq += Y[i] * Y[i];
    double norm = fmax(sqrt(sq), eps);
    for (int i = 0; i < n * k; i++) Y[i] /= norm;
    for (int s = 0; s < steps; s++) {
        gram(Y, n, k, A);
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                double aa = 0;
                for (int l = 0; l < n; l++) aa += A[i * n + l] * A[l * n + j];
                B[i * n + j] = -4.7750 * A[i * n + j] + 2.0315 * aa;
            }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < k; j++) {
                double by = 0;
                for (int l = 0; l < n; l++) by += B[i * n + l] * Y[l * k + j];
                Z[i * k + j] = 3.4445 * Y[i * k + j] + by;
            }
        memcpy(Y, Z, (size_t)n * k * sizeof *Y);
    }
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) X[i * c + j] = Y[tall ? j * k + i : i * k + j];
    free(Y), free(A), free(B), free(Z);
}

/* One step: torch's clipping, then Muon on the matrices and AdamW on the
 * rest (b without weight decay).  orthogonal = false: X = u, to show that
 * Newton-Schulz matters. */
static void ref_step(muon_ref *r, const ag_optim_config *c, double lr, double clip, int t, bool orthogonal) {
    double *g[N_PARAMS], sq = 0;
    for (int p = 0; p < N_PARAMS; p++) {
        g[p] = malloc((size_t)size_of(p) * sizeof *g[p]);
        for (int k = 0; k < size_of(p); k++) g[p][k] = grad_of(p, k, r->x[p][k]), sq += g[p][k] * g[p][k];
    }
    double coef = clip / (sqrt(sq) + 1e-6);
    for (int p = 0; p < N_PARAMS; p++) {
        const int n = size_of(p), rows = shapes[p][0], cols = shapes[p][1];
        const double wd = p == 4 ? 0 : c->weight_decay;
        for (int k = 0; k < n; k++) g[p][k] = coef < 1 ? g[p][k] * coef : g[p][k];
        if (r->muon[p]) {
            double *u = malloc((size_t)n * sizeof *u);
            for (int k = 0; k < n; k++) {
                r->m[p][k] = lerp(r->m[p][k], g[p][k], 1 - c->momentum);
                u[k] = c->nesterov ? lerp(g[p][k], r->m[p][k], c->momentum) : r->m[p][k];
            }
            if (orthogonal) newton_schulz(u, rows, cols, c->ns_steps, c->eps);
            double scale = c->match_rms_adamw ? 0.2 * sqrt(fmax(rows, cols)) : sqrt(fmax(1, (double)cols / rows));
            for (int k = 0; k < n; k++) r->x[p][k] = r->x[p][k] * (1 - lr * wd) - lr * scale * u[k];
            free(u);
        } else {
            for (int k = 0; k < n; k++) {
                r->x[p][k] *= 1 - lr * wd;
                r->m[p][k] = c->beta1 * r->m[p][k] + (1 - c->beta1) * g[p][k];
                r->v[p][k] = c->beta2 * r->v[p][k] + (1 - c->beta2) * g[p][k] * g[p][k];
                double mhat = r->m[p][k] / (1 - pow(c->beta1, t)), vhat = r->v[p][k] / (1 - pow(c->beta2, t));
                r->x[p][k] -= lr * mhat / (sqrt(vhat) + c->adam_eps);
            }
        }
        free(g[p]);
    }
}

static bool named_q_or_embed(const ag_tensor *p, void *ctx) {
    (void)ctx;
    return !strcmp(p->name, "q") || !strcmp(p->name, "embed.x") || !strcmp(p->name, "b");
}

static bool named_embed(const ag_tensor *p, void *ctx) {
    (void)ctx;
    return !strcmp(p->name, "embed.x");
}

/* rerouted: "q" (a square matrix) to the AdamW part and "embed.x" to
 * Muon's step, by ag_optim_set_muon before the first step. */
static double muon_case(const char *spec, bool orthogonal, bool rerouted) {
    ag_params ps = {0};
    ag_tensor *t[N_PARAMS];
    muon_ref r;
    for (int p = 0; p < N_PARAMS; p++) {
        r.muon[p] = rerouted ? p == 0 || p == 1 || p == 3 || p == 5 : is_matrix(p);
        t[p] = p == 4 ? ag_param(&ps, names[p], 1, (int[]){4}) : ag_param(&ps, names[p], 2, shapes[p]);
        r.x[p] = malloc((size_t)size_of(p) * sizeof(double));
        r.m[p] = calloc((size_t)size_of(p), sizeof(double)), r.v[p] = calloc((size_t)size_of(p), sizeof(double));
        for (int k = 0; k < size_of(p); k++) {
            t[p]->data[k] = (ag_real)(1.1 - 0.17 * (5 * p + k) + 0.05 * p);
            r.x[p][k] = (double)t[p]->data[k];
        }
    }
    ag_optim_config c;
    CHECK(ag_optim_parse(spec, &c) == AG_OK, "%s: %s", spec, ag_errmsg());
    ag_optimizer o;
    CHECK(ag_optim_init(&o, &ps, &c) == AG_OK, "%s", ag_errmsg());
    if (rerouted) { /* b matches too, but is no matrix: not set, still AdamW's */
        CHECK(ag_optim_set_muon(&o, named_q_or_embed, NULL, false) == 2, "q and embed.x set off Muon");
        CHECK(ag_optim_set_muon(&o, named_embed, NULL, true) == 1, "embed.x set on");
    }
    for (int p = 0; p < N_PARAMS; p++) /* a Muon matrix keeps its momentum only */
        CHECK(ag_optim_state(&o, names[p], "m") && !ag_optim_state(&o, names[p], "v") == r.muon[p],
              "%s: %s's slots", spec, names[p]);
    CHECK(ag_optim_set_weight_decay(&o, ag_param_is_bias_or_norm, NULL, 0) == 1); /* b */
    ag_lr_steps warm;
    CHECK(ag_lr_steps_parse("cosine:warmup=2,total=8,min_ratio=0.1", &warm) == AG_OK, "%s", ag_errmsg());
    const double clip = 0.8;
    double worst = 0;
    for (int step = 1; step <= STEPS; step++) {
        for (int p = 0; p < N_PARAMS; p++)
            for (int k = 0; k < size_of(p); k++) t[p]->grad[k] = (ag_real)grad_of(p, k, (double)t[p]->data[k]);
        double lr = ag_lr_steps_apply(&warm, &o, c.lr);
        ag_clip_grad_norm(&ps, clip);
        ag_optim_step(&o);
        ag_step_end();
        ref_step(&r, &c, lr, clip, step, orthogonal);
        for (int p = 0; p < N_PARAMS; p++) {
            const ag_real *m = ag_optim_state(&o, names[p], "m"), *v = ag_optim_state(&o, names[p], "v");
            for (int k = 0; k < size_of(p); k++) {
                double got[3] = {(double)t[p]->data[k], (double)m[k], v ? (double)v[k] : 0};
                double want[3] = {r.x[p][k], r.m[p][k], v ? r.v[p][k] : 0};
                for (int i = 0; i < 3; i++)
                    worst = fmax(worst, isnan(got[i]) ? INFINITY : fabs(got[i] - want[i]) / fmax(1, fabs(want[i])));
            }
        }
    }
    printf("  %-70s %d steps: worst error %.3g%s\n", spec, STEPS, worst, rerouted ? " (q AdamW, embed.x Muon)" : "");
    for (int p = 0; p < N_PARAMS; p++) free(r.x[p]), free(r.m[p]), free(r.v[p]);
    ag_optim_free(&o);
    ag_params_free(&ps);
    return worst;
}

static void test_reference(void) {
    const char *specs[] = {"muon:lr=0.02",
                           "muon:lr=0.05,nesterov=0,weight_decay=0",
                           "muon:lr=0.05,match_rms_adamw=0,ns_steps=2,momentum=0.8,beta2=0.95,adam_eps=1e-6",
                           "muon:lr=0.01,ns_steps=9,eps=0.5,weight_decay=0.3"}; /* eps above the first norms */
    for (int i = 0; i < 4; i++) {
        double worst = muon_case(specs[i], true, false);
        CHECK(worst <= TOL, "%s: worst error %.3g over %d steps (tolerance %g)", specs[i], worst, STEPS, TOL);
    }
    for (int i = 0; i < 4; i += 2) {
        double worst = muon_case(specs[i], true, true);
        CHECK(worst <= TOL, "%s, q on AdamW and embed.x on Muon: worst error %.3g over %d steps", specs[i], worst, STEPS);
    }
    double plain = muon_case("muon:lr=0.02", false, false);
    CHECK(plain > 1e-3, "Muon matches the reference without Newton-Schulz (%.3g): the test sees no orthogonalisation",
          plain);
}

/* ---- ag_optim_set_muon's refusals ---- */

typedef struct {
    ag_optimizer *o;
} route_ctx;

static bool any_param(const ag_tensor *p, void *ctx) {
    (void)p, (void)ctx;
    return true;
}

static void route_off(void *ctx) { ag_optim_set_muon(((route_ctx *)ctx)->o, any_param, NULL, false); }

static void test_routing_refusals(void) {
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){3, 4});
    ag_optim_config c;
    ag_optimizer o;
    route_ctx ctx = {&o};
    CHECK(ag_optim_parse("adamw", &c) == AG_OK && ag_optim_init(&o, &ps, &c) == AG_OK);
    EXPECT_ERROR(ag_try(route_off, &ctx), AG_ERR_ARG, "ag_optim_set_muon: the optimizer is adamw");
    ag_optim_free(&o);
    CHECK(ag_optim_parse("muon", &c) == AG_OK && ag_optim_init(&o, &ps, &c) == AG_OK);
    for (int k = 0; k < w->size; k++) w->grad[k] = (ag_real)(0.1 * k);
    ag_optim_step(&o);
    ag_step_end();
    EXPECT_ERROR(ag_try(route_off, &ctx), AG_ERR_ARG, "ag_optim_set_muon: after 1 steps");
    CHECK(!ag_optim_state(&o, "w", "v"), "a refused call changed the slots");
    ag_optim_free(&o);
    ag_params_free(&ps);
}

/* ---- 1 and 2 threads, a skipped step, no allocation ---- */

int main(void) {
    printf("%s build\n", IS_F64 ? "f64" : "f32");
    test_specs();
    test_reference();
    test_routing_refusals();
    threads_case("muon:lr=0.01", big_grads_waves, 3, 0); /* e: Muon's, tall; v: AdamW's */
    gate_and_memory_case("muon:lr=0.01", big_grads_waves, 10);
    ag_shutdown();
    return check_summary("optim_muon");
}
