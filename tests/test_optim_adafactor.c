/* test_optim_adafactor.c - the Adafactor optimizer (AG_ADAFACTOR) on the CPU:
 *   - its steps against torch.optim.Adafactor's single-tensor loop written
 *     here in double, literally: a wide, a tall, a one-row and a 3-D
 *     parameter (its factors per leading index) and two vectors (one
 *     starting at 0: the eps2 floor), a per-parameter weight decay, a
 *     per-step schedule with rho = min(lr, 1/sqrt(t)) crossing over, every
 *     key, Hugging Face's scale_parameter and relative_step off and its
 *     first moment (beta1) on (f64: to 1e-13, f32: 2e-6); and that the
 *     factoring mattered;
 *   - the slots' names and shapes (torch's keepdim ones);
 *   - the same bits at 1 and 2 threads on a matrix the rows' and columns'
 *     passes cut;
 *   - a step the training step's gate skips changes nothing;
 *   - no allocation once warm;
 *   - the spec: defaults, format and back, every refusal by name.
 * The GPU's Adafactor against this one: tests/test_cuda_train.c; a
 * checkpoint's round trip: tests/test_checkpoint.c.
 *
 *   test_optim_adafactor_f32, test_optim_adafactor_f64 */
#include "optim_util.h"
#include "optim_step_cases.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define TOL (IS_F64 ? 1e-13 : 2e-6)

/* ---- the spec ---- */

static void test_specs(void) {
    ag_optim_config c, d;
    char spec[256];
    CHECK(ag_optim_parse("adafactor", &c) == AG_OK && c.kind == AG_ADAFACTOR && c.lr == 1e-2 &&
              c.beta2_decay == -0.8 && c.eps == 0 && c.eps2 == 1e-3 && c.d == 1 && c.weight_decay == 0,
          "%s", ag_errmsg());
    CHECK(!strcmp(ag_optim_format(&c, spec, sizeof spec),
                  "adafactor:lr=0.01,beta2_decay=-0.8,eps=0,eps2=0.001,d=1,weight_decay=0"), "%s", spec);
    CHECK(ag_optim_parse("adafactor:lr=0.5,beta2_decay=-0.5,eps=1e-20,eps2=0,d=2.5,ema=0.9", &c) == AG_OK, "%s",
          ag_errmsg());
    ag_optim_format(&c, spec, sizeof spec);
    CHECK(ag_optim_parse(spec, &d) == AG_OK && !memcmp(&c, &d, sizeof c), "round trip of %s", spec);
    CHECK(c.scale_parameter && c.relative_step && c.beta1 == 0, "torch's rule by default: HF's switches on, no beta1");
    CHECK(ag_optim_parse("adafactor:lr=1e-3,scale_parameter=0,relative_step=0", &c) == AG_OK && !c.scale_parameter &&
              !c.relative_step, "%s", ag_errmsg());
    CHECK(!strcmp(ag_optim_format(&c, spec, sizeof spec), "adafactor:lr=0.001,beta2_decay=-0.8,eps=0,eps2=0.001,d=1,"
                  "scale_parameter=0,relative_step=0,weight_decay=0"), "%s", spec);
    CHECK(ag_optim_parse(spec, &d) == AG_OK && !memcmp(&c, &d, sizeof c), "round trip of %s", spec);
    EXPECT_ERROR(ag_optim_parse("adafactor:scale_parameter=2", &c), AG_ERR_ARG, "scale_parameter");
    EXPECT_ERROR(ag_optim_parse("adam:relative_step=0", &c), AG_ERR_ARG, "unknown key 'relative_step'");
    EXPECT_ERROR(ag_optim_parse("adafactor:beta2_decay=0.1", &c), AG_ERR_ARG,
                 "optimizer 'adafactor': beta2_decay 0.1 must be finite and <= 0");
    EXPECT_ERROR(ag_optim_parse("adafactor:eps=-1", &c), AG_ERR_ARG, "optimizer 'adafactor': eps -1 must be finite and >= 0");
    EXPECT_ERROR(ag_optim_parse("adafactor:eps2=-1e-3", &c), AG_ERR_ARG, "eps2 -0.001 must be finite and >= 0");
    EXPECT_ERROR(ag_optim_parse("adafactor:d=0.5", &c), AG_ERR_ARG, "optimizer 'adafactor': d 0.5 must be finite and >= 1");
    EXPECT_ERROR(ag_optim_parse("adafactor:lazy=1", &c), AG_ERR_ARG, "lazy=1 is not for adafactor");
    CHECK(ag_optim_parse("adafactor:beta1=0.9,scale_parameter=0", &c) == AG_OK && c.beta1 == 0.9, "%s", ag_errmsg());
    CHECK(!strcmp(ag_optim_format(&c, spec, sizeof spec), "adafactor:lr=0.01,beta2_decay=-0.8,eps=0,eps2=0.001,d=1,"
                  "beta1=0.9,scale_parameter=0,weight_decay=0"), "%s", spec);
    CHECK(ag_optim_parse(spec, &d) == AG_OK && !memcmp(&c, &d, sizeof c), "round trip of %s", spec);
    EXPECT_ERROR(ag_optim_parse("adafactor:beta1=1", &c), AG_ERR_ARG, "optimizer 'adafactor': beta1 1 must be in [0, 1)");
    EXPECT_ERROR(ag_optim_parse("adafactor:momentum=0.9", &c), AG_ERR_ARG, "optimizer 'adafactor': unknown key 'momentum'");
}

/* ---- against torch.optim.Adafactor's algorithm, in double ---- */

enum { N_PARAMS = 6, STEPS = 7, MAX_DIMS = 3 };
static const char *const names[N_PARAMS] = {"w", "t", "r", "s", "b", "z"};
static const int ndims[N_PARAMS] = {2, 2, 2, 3, 1, 1};
static const int shapes[N_PARAMS][MAX_DIMS] = {{3, 5}, {6, 4}, {1, 5}, {2, 3, 4}, {4}, {3}};

static int size_of(int p) {
    int n = 1;
    for (int d = 0; d < ndims[p]; d++) n *= shapes[p][d];
    return n;
}
static int cols_of(int p) { return shapes[p][ndims[p] - 1]; }
static int rows_of(int p) { return ndims[p] >= 2 ? shapes[p][ndims[p] - 2] : 1; }

/* The gradient at x: mostly O(1), a few tiny (below the eps1 floor where
 * eps is large), z's from 0. */
static double grad_of(int p, int k, double x) {
    int flat = 7 * p + k;
    double g = (0.3 + 0.02 * flat) * (x - 0.5 * sin(1.0 + flat)) + (flat % 4 == 1 ? 1e-3 : 0);
    return flat % 9 == 4 ? 1e-5 * g : g;
}

typedef struct {
    double *x[N_PARAMS], *row[N_PARAMS], *col[N_PARAMS], *var[N_PARAMS], *m[N_PARAMS];
} ada_ref;

/* torch's _single_tensor_adafactor for one parameter, in double: lr is the
 * step's rate (the schedule's), eps1 its eps or the real type's epsilon. */
static void ref_param(ada_ref *r, int p, const ag_optim_config *c, double lr, double wd, int t, double eps1,
                      bool factored) {
    const int n = size_of(p), cols = cols_of(p), rows = rows_of(p), batch = n / (rows * cols);
    double *x = r->x[p], *g = malloc((size_t)n * sizeof *g), *u = malloc((size_t)n * sizeof *u);
    for (int k = 0; k < n; k++) g[k] = grad_of(p, k, x[k]);
    double one_minus_beta2 = pow(t, c->beta2_decay), rho = c->relative_step ? fmin(lr, 1 / sqrt(t)) : lr, sq = 0;
    for (int k = 0; k < n; k++) sq += x[k] * x[k];
    double alpha = c->scale_parameter ? fmax(c->eps2, sqrt(sq) / sqrt(n)) * rho : rho; /* HF's switches */
    for (int k = 0; k < n; k++) x[k] *= 1 - lr * wd;
    if (factored && ndims[p] > 1) {
        for (int b = 0; b < batch; b++) {
            double *R = r->row[p] + b * rows, *C = r->col[p] + b * cols, mean = 0;
            const double *G = g + b * rows * cols;
            for (int i = 0; i < rows; i++) {
                double m = 0;
                for (int j = 0; j < cols; j++) m += G[i * cols + j] * G[i * cols + j];
                R[i] += one_minus_beta2 * (m / cols - R[i]);
            }
            for (int j = 0; j < cols; j++) {
                double m = 0;
                for (int i = 0; i < rows; i++) m += G[i * cols + j] * G[i * cols + j];
                C[j] += one_minus_beta2 * (m / rows - C[j]);
            }
            for (int i = 0; i < rows; i++) mean += R[i] / rows;
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < cols; j++) {
                    double v = R[i] * C[j] / fmax(mean, eps1);
                    u[b * rows * cols + i * cols + j] = G[i * cols + j] / sqrt(fmax(v, eps1 * eps1));
                }
        }
    } else {
        for (int k = 0; k < n; k++) {
            r->var[p][k] += one_minus_beta2 * (g[k] * g[k] - r->var[p][k]);
            u[k] = g[k] / sqrt(fmax(r->var[p][k], eps1 * eps1));
        }
    }
    double usq = 0;
    for (int k = 0; k < n; k++) usq += u[k] * u[k];
    double denom = fmax(1.0, sqrt(usq) / (sqrt(n) * c->d));
    for (int k = 0; k < n; k++) { /* HF's first moment: of the clipped, scaled update */
        double update = alpha / denom * u[k];
        if (c->beta1 > 0) update = r->m[p][k] = c->beta1 * r->m[p][k] + (1 - c->beta1) * update;
        x[k] -= update;
    }
    free(g), free(u);
}

static bool is_vector(const ag_tensor *p, void *ctx) {
    (void)ctx;
    return p->ndim == 1 && strcmp(p->name, "z");
}

/* factored false: every parameter's reference as a vector's (V per
 * element), to show the factoring matters. */
static double adafactor_case(const char *spec, bool factored) {
    ag_params ps = {0};
    ag_tensor *t[N_PARAMS];
    ada_ref r;
    for (int p = 0; p < N_PARAMS; p++) {
        t[p] = ag_param(&ps, names[p], ndims[p], (int *)shapes[p]);
        int n = size_of(p);
        r.x[p] = malloc((size_t)n * sizeof(double));
        r.row[p] = calloc((size_t)n, sizeof(double)), r.col[p] = calloc((size_t)n, sizeof(double));
        r.var[p] = calloc((size_t)n, sizeof(double)), r.m[p] = calloc((size_t)n, sizeof(double));
        for (int k = 0; k < n; k++) {
            t[p]->data[k] = p == 5 ? 0 : (ag_real)(1.1 - 0.17 * (5 * p + k) + 0.05 * p);
            r.x[p][k] = (double)t[p]->data[k];
        }
    }
    ag_optim_config c;
    CHECK(ag_optim_parse(spec, &c) == AG_OK, "%s: %s", spec, ag_errmsg());
    ag_optimizer o;
    CHECK(ag_optim_init(&o, &ps, &c) == AG_OK, "%s", ag_errmsg());
    CHECK(ag_optim_set_weight_decay(&o, is_vector, NULL, 0) == 1); /* b */
    ag_lr_steps warm;
    CHECK(ag_lr_steps_parse("cosine:warmup=2,total=8,min_ratio=0.1", &warm) == AG_OK, "%s", ag_errmsg());
    const double eps1 = c.eps > 0 ? c.eps : IS_F64 ? DBL_EPSILON : FLT_EPSILON;
    double worst = 0;
    for (int step = 1; step <= STEPS; step++) {
        for (int p = 0; p < N_PARAMS; p++)
            for (int k = 0; k < size_of(p); k++) t[p]->grad[k] = (ag_real)grad_of(p, k, (double)t[p]->data[k]);
        double lr = ag_lr_steps_apply(&warm, &o, c.lr);
        ag_optim_step(&o);
        ag_step_end();
        for (int p = 0; p < N_PARAMS; p++) {
            ref_param(&r, p, &c, lr, p == 4 ? 0 : c.weight_decay, step, eps1, factored);
            for (int k = 0; k < size_of(p); k++) {
                double got = (double)t[p]->data[k], want = r.x[p][k];
                worst = fmax(worst, isnan(got) ? INFINITY : fabs(got - want) / fmax(1, fabs(want)));
            }
            const ag_real *R = ag_optim_state(&o, names[p], "row_var"), *C = ag_optim_state(&o, names[p], "col_var"),
                          *V = ag_optim_state(&o, names[p], "variance");
            const int rows = rows_of(p), cols = cols_of(p), batch = size_of(p) / (rows * cols);
            for (int k = 0; factored && R && k < batch * rows; k++)
                worst = fmax(worst, fabs((double)R[k] - r.row[p][k]) / fmax(1, fabs(r.row[p][k])));
            for (int k = 0; factored && C && k < batch * cols; k++)
                worst = fmax(worst, fabs((double)C[k] - r.col[p][k]) / fmax(1, fabs(r.col[p][k])));
            for (int k = 0; factored && V && k < size_of(p); k++)
                worst = fmax(worst, fabs((double)V[k] - r.var[p][k]) / fmax(1, fabs(r.var[p][k])));
            const ag_real *M = ag_optim_state(&o, names[p], "exp_avg");
            CHECK(!M == !(c.beta1 > 0), "%s: exp_avg kept exactly with beta1", spec);
            for (int k = 0; M && k < size_of(p); k++)
                worst = fmax(worst, fabs((double)M[k] - r.m[p][k]) / fmax(1, fabs(r.m[p][k])));
        }
    }
    printf("  %-66s %d steps: worst error %.3g%s\n", spec, STEPS, worst, factored ? "" : " (reference unfactored)");
    for (int p = 0; p < N_PARAMS; p++) free(r.x[p]), free(r.row[p]), free(r.col[p]), free(r.var[p]), free(r.m[p]);
    ag_optim_free(&o);
    ag_params_free(&ps);
    return worst;
}

static void test_reference(void) {
    const char *specs[] = {"adafactor",
                           /* the schedule's lr (warmup 2, cosine) passes 1/sqrt(t) at steps 2-6: rho takes the cap */
                           "adafactor:lr=2,weight_decay=0.1",
                           "adafactor:lr=0.05,beta2_decay=-0.5,eps=1e-3,eps2=0.1,d=2",
                           "adafactor:lr=1e-3,scale_parameter=0,relative_step=0", /* T5's fine-tuning recipe */
                           "adafactor:lr=2,relative_step=0,weight_decay=0.1", /* rho stays lr */
                           "adafactor:lr=0.05,scale_parameter=0,d=1.5",
                           "adafactor:lr=1e-3,beta1=0.9,scale_parameter=0,relative_step=0", /* HF's with momentum */
                           "adafactor:lr=2,beta1=0.5,weight_decay=0.1",
                           "adafactor:lr=0.2,beta2_decay=0,d=1.5,weight_decay=0.01"}; /* w = 1: the last g² alone */
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) { /* every one: the count was once written out, and short */
        double worst = adafactor_case(specs[i], true);
        CHECK(worst <= TOL, "%s: worst error %.3g over %d steps (tolerance %g)", specs[i], worst, STEPS, TOL);
    }
    double plain = adafactor_case("adafactor:lr=0.05", false);
    CHECK(plain > 1e-3, "Adafactor matches an unfactored reference (%.3g): the test sees no factoring", plain);
}

/* ---- the slots: torch's names and keepdim shapes ---- */

static void test_slots(void) {
    ag_params ps = {0};
    for (int p = 0; p < N_PARAMS; p++) ag_param(&ps, names[p], ndims[p], (int *)shapes[p]);
    ag_optim_config c;
    ag_optimizer o;
    CHECK(ag_optim_parse("adafactor:swa=1", &c) == AG_OK && ag_optim_init(&o, &ps, &c) == AG_OK);
    int shape[AG_MAX_DIMS];
    CHECK(ag_optim_state_shape(&o, "w", "row_var", shape) == 2 && shape[0] == 3 && shape[1] == 1);
    CHECK(ag_optim_state_shape(&o, "w", "col_var", shape) == 2 && shape[0] == 1 && shape[1] == 5);
    CHECK(ag_optim_state_shape(&o, "s", "row_var", shape) == 3 && shape[0] == 2 && shape[1] == 3 && shape[2] == 1);
    CHECK(ag_optim_state_shape(&o, "s", "col_var", shape) == 3 && shape[0] == 2 && shape[1] == 1 && shape[2] == 4);
    CHECK(ag_optim_state_shape(&o, "b", "variance", shape) == 1 && shape[0] == 4);
    CHECK(ag_optim_state_shape(&o, "s", "average", shape) == 3 && shape[2] == 4, "the average: the parameter's shape");
    CHECK(ag_optim_state_shape(&o, "w", "variance", shape) == -1 && !ag_optim_state(&o, "w", "variance"));
    CHECK(ag_optim_state_shape(&o, "b", "row_var", shape) == -1 && !ag_optim_state(&o, "b", "col_var"));
    CHECK(ag_optim_state_shape(&o, "w", "m", shape) == -1 && ag_optim_state_shape(&o, "nope", "row_var", shape) == -1);
    CHECK(ag_optim_state_shape(&o, "w", "exp_avg", shape) == -1, "no first moment without beta1");
    ag_optim_free(&o);
    CHECK(ag_optim_parse("adafactor:beta1=0.9", &c) == AG_OK && ag_optim_init(&o, &ps, &c) == AG_OK);
    CHECK(ag_optim_state_shape(&o, "s", "exp_avg", shape) == 3 && shape[0] == 2 && shape[1] == 3 && shape[2] == 4,
          "exp_avg: the parameter's shape");
    CHECK(ag_optim_state_shape(&o, "b", "exp_avg", shape) == 1 && shape[0] == 4);
    ag_optim_free(&o);
    ag_params_free(&ps);
}

/* ---- 1 and 2 threads, a skipped step, no allocation ---- */

int main(void) {
    printf("%s build\n", IS_F64 ? "f64" : "f32");
    test_specs();
    test_reference();
    test_slots();
    threads_case("adafactor:lr=0.01,weight_decay=0.01", big_grads_waves, 3, 0); /* e: factored; v: a vector */
    gate_and_memory_case("adafactor:lr=0.01", big_grads_waves, 10);
    ag_shutdown();
    return check_summary("optim_adafactor");
}
