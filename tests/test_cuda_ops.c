/* test_cuda_ops.c - every op with a CUDA implementation, forward and
 * backward, on the CPU and on the GPU from the same inputs, compared
 * element by element (the pattern of ggml's test-backend-ops).
 *
 * Each case makes its inputs as CPU leaves, runs op(inputs) . w on the CPU
 * and again on copies moved with ag_to; backward of the GPU run comes back
 * through ag_to, so the leaves' gradients compare directly (and ag_to's
 * gradient is checked on the way).  The f64 build then gradchecks every
 * case on the GPU by central differences.
 *
 * Tolerance: |cpu - cuda| <= TOL * max(|cpu|, |cuda|, rms), rms being the
 * root mean square of the CPU array.  The rms floor is there because an
 * element that is a sum of terms of mixed sign (a product's entry, a
 * softmax gradient y (g - g.y)) carries the roundoff of its terms, which
 * are of the array's size, not of its own: element-wise relative error on
 * a near-cancelled entry measures the cancellation, not the kernel.
 * TOL: f64 1e-10 (the kernels compute the CPU's expressions without FMA
 * contraction; what remains is summation order in cuBLAS and the
 * reductions), f32 1e-5 (the same, at float's 6e-8 unit roundoff times the
 * sums' lengths here, up to ~1000).  Exit 77 without a GPU.
 *
 * AG_TEST_CUDA_ON_CPU=1 runs the "GPU" side on the CPU too: on a machine
 * without a GPU it checks the cases themselves (inputs, constants, the
 * gradcheck's set-up) before they ever reach a kernel.
 *
 * Op families add their cases in tests/cuda_ops_<family>.inc: a table of
 * op_case and the functions it names, listed in `families` below. */
#include "check.h"
#include "attngrad.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef AG_REAL_DOUBLE
static const double TOL = 1e-10;
#else
static const double TOL = 1e-5;
#endif

typedef ag_tensor *(*op_fn)(ag_tensor **in);

typedef struct {
    const char *name;
    op_fn f;
    int n_in;
    int ndim[3];
    int shape[3][4];
    double lo, hi; /* inputs uniform in [lo, hi] */
    bool sign;     /* random sign on top (for divisors kept away from 0) */
} op_case;

/* A constant input (a mask, labels, indices) on the device of ref: ops
 * build theirs from host values with this, once per device. */
static inline ag_tensor *const_like(const ag_tensor *ref, int ndim, const int *shape, const ag_real *values) {
    ag_tensor *t = ag_tensor_from(values, ndim, shape);
    return ag_to(t, ref->device);
}

static ag_rng rng;
static ag_device GPU = AG_CUDA; /* AG_CPU under AG_TEST_CUDA_ON_CPU */

static ag_tensor *make_leaf(ag_params *ps, const char *name, int ndim, const int *shape, double lo, double hi,
                            bool sign) {
    ag_tensor *t = ag_param(ps, name, ndim, shape);
    for (int64_t i = 0; i < t->size; i++) {
        double v = lo + (hi - lo) * ag_rng_uniform(&rng);
        if (sign && ag_rng_uniform(&rng) < 0.5) v = -v;
        t->data[i] = (ag_real)v;
    }
    return t;
}

/* The worst |a - b| / max(|a|, |b|, rms(a)) over two host arrays (see the
 * top of the file for why the rms floor). */
static double worst_rel(const ag_real *a, const ag_real *b, int64_t n, int64_t *at) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)a[i] * (double)a[i];
    double rms = n ? sqrt(ss / (double)n) : 0, worst = 0;
    *at = -1;
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        if (x == y || (isnan(x) && isnan(y))) continue;
        double d = fabs(x - y), m = fmax(fmax(fabs(x), fabs(y)), rms);
        double r = isfinite(d) ? d / fmax(m, 1e-300) : INFINITY;
        if (r > worst) worst = r, *at = i;
    }
    return worst;
}

static void compare(const char *what, const char *name, const ag_real *cpu, const ag_real *gpu, int64_t n) {
    int64_t at;
    double w = worst_rel(cpu, gpu, n, &at);
    CHECK(w <= TOL, "%s %s: worst relative difference %.3g at element %lld (cpu %.17g, cuda %.17g), tolerance %g",
          name, what, w, (long long)at, at >= 0 ? (double)cpu[at] : 0, at >= 0 ? (double)gpu[at] : 0, TOL);
    printf("%-28s %-8s %8lld elements, worst rel diff %.2e\n", name, what, (long long)n, w);
}

/* op(in) . w summed: a scalar whose gradient reaches every output element
 * with its own weight. */
static ag_tensor *loss_of(ag_tensor *out, ag_tensor *w) { return ag_sum(ag_mul(out, w)); }

static ag_tensor *f_to_and_back(ag_tensor **x); /* its output is on the CPU */

static void run_case(const op_case *c) {
    ag_params ps = {0};
    ag_tensor *in[3];
    for (int i = 0; i < c->n_in; i++) {
        char nm[8] = {'x', (char)('0' + i), 0};
        bool divisor = c->sign && i == 1;
        in[i] = make_leaf(&ps, nm, c->ndim[i], c->shape[i], divisor ? 0.5 : c->lo, divisor ? 2.0 : c->hi,
                          divisor || c->lo < 0);
    }
    /* CPU */
    ag_tensor *out = c->f(in);
    ag_tensor *w = ag_tensor_new(out->ndim, out->shape);
    for (int64_t i = 0; i < w->size; i++) w->data[i] = (ag_real)(ag_rng_uniform(&rng) - 0.5);
    ag_real *y_cpu = malloc((size_t)out->size * sizeof(ag_real));
    memcpy(y_cpu, out->data, (size_t)out->size * sizeof(ag_real));
    ag_params_zero_grad(&ps);
    ag_backward(loss_of(out, w));
    ag_real *g_cpu[3];
    for (int i = 0; i < c->n_in; i++) {
        g_cpu[i] = malloc((size_t)in[i]->size * sizeof(ag_real));
        memcpy(g_cpu[i], in[i]->grad, (size_t)in[i]->size * sizeof(ag_real));
    }
    /* GPU: the same leaves, moved */
    ag_params_zero_grad(&ps);
    ag_tensor *din[3];
    for (int i = 0; i < c->n_in; i++) din[i] = ag_to(in[i], GPU);
    ag_tensor *dout = c->f(din);
    ag_device want = c->f == f_to_and_back ? AG_CPU : GPU;
    CHECK(dout->device == want, "%s: the output is on the %s", c->name, ag_device_name(want));
    ag_real *y_gpu = malloc((size_t)dout->size * sizeof(ag_real));
    ag_tensor_read(dout, y_gpu);
    compare("forward", c->name, y_cpu, y_gpu, out->size);
    ag_backward(loss_of(dout, ag_to(w, dout->device)));
    for (int i = 0; i < c->n_in; i++) {
        char what[24]; /* room for any int: -Wformat-truncation in debug builds */
        snprintf(what, sizeof what, "grad x%d", i);
        compare(what, c->name, g_cpu[i], in[i]->grad, in[i]->size);
        free(g_cpu[i]);
    }
    free(y_cpu);
    free(y_gpu);
    ag_step_end();
    ag_params_free(&ps);
}

/* ---- the ops ---- */
static ag_tensor *f_add(ag_tensor **x) { return ag_add(x[0], x[1]); }
static ag_tensor *f_sub(ag_tensor **x) { return ag_sub(x[0], x[1]); }
static ag_tensor *f_mul(ag_tensor **x) { return ag_mul(x[0], x[1]); }
static ag_tensor *f_div(ag_tensor **x) { return ag_div(x[0], x[1]); }
static ag_tensor *f_maximum(ag_tensor **x) { return ag_maximum(x[0], x[1]); }
static ag_tensor *f_add_scalar(ag_tensor **x) { return ag_add_scalar(x[0], 0.75); }
static ag_tensor *f_mul_scalar(ag_tensor **x) { return ag_mul_scalar(x[0], -1.5); }
static ag_tensor *f_neg(ag_tensor **x) { return ag_neg(x[0]); }
static ag_tensor *f_exp(ag_tensor **x) { return ag_exp(x[0]); }
static ag_tensor *f_log(ag_tensor **x) { return ag_log(x[0]); }
static ag_tensor *f_sqrt(ag_tensor **x) { return ag_sqrt(x[0]); }
static ag_tensor *f_square(ag_tensor **x) { return ag_square(x[0]); }
static ag_tensor *f_abs(ag_tensor **x) { return ag_abs(x[0]); }
static ag_tensor *f_tanh(ag_tensor **x) { return ag_tanh(x[0]); }
static ag_tensor *f_sigmoid(ag_tensor **x) { return ag_sigmoid(x[0]); }
static ag_tensor *f_relu(ag_tensor **x) { return ag_relu(x[0]); }
static ag_tensor *f_elu(ag_tensor **x) { return ag_elu(x[0]); }
static ag_tensor *f_softplus(ag_tensor **x) { return ag_softplus(x[0]); }
static ag_tensor *f_log_sigmoid(ag_tensor **x) { return ag_log_sigmoid(x[0]); }
static ag_tensor *f_sum(ag_tensor **x) { return ag_sum(x[0]); }
static ag_tensor *f_mean(ag_tensor **x) { return ag_mean(x[0]); }
static ag_tensor *f_softmax(ag_tensor **x) { return ag_softmax(x[0]); }
static ag_tensor *f_matmul(ag_tensor **x) { return ag_matmul(x[0], x[1]); }
static ag_tensor *f_matmul_tn(ag_tensor **x) { return ag_matmul_t(x[0], true, x[1], false); }
static ag_tensor *f_matmul_nt(ag_tensor **x) { return ag_matmul_t(x[0], false, x[1], true); }
static ag_tensor *f_matmul_tt(ag_tensor **x) { return ag_matmul_t(x[0], true, x[1], true); }
static ag_tensor *f_to_and_back(ag_tensor **x) { return ag_to(ag_mul(x[0], x[0]), AG_CPU); }

#define S1(a) {a}
#define S2(a, b) {a, b}
#define S3(a, b, c) {a, b, c}
#define S4(a, b, c, d) {a, b, c, d}

static const op_case cases[] = {
    /* binary, same shape and broadcast (sizes not multiples of 32) */
    {"add [37,33]+[37,33]", f_add, 2, {2, 2}, {S2(37, 33), S2(37, 33)}, -1, 1, false},
    {"add [5,7,33]+[33] (bias)", f_add, 2, {3, 1}, {S3(5, 7, 33), S1(33)}, -1, 1, false},
    {"sub [5,33]-[1,33]", f_sub, 2, {2, 2}, {S2(5, 33), S2(1, 33)}, -1, 1, false},
    {"mul [5,7,33]*[5,7,1] (column)", f_mul, 2, {3, 3}, {S3(5, 7, 33), S3(5, 7, 1)}, -1, 1, false},
    {"mul [2,3,4,5]*[3,1,5]", f_mul, 2, {4, 3}, {S4(2, 3, 4, 5), S3(3, 1, 5)}, -1, 1, false},
    {"div [9,13]/[9,13]", f_div, 2, {2, 2}, {S2(9, 13), S2(9, 13)}, -1, 1, true},
    {"div [4,9]/[1] (scalar-like)", f_div, 2, {2, 1}, {S2(4, 9), S1(1)}, -1, 1, true},
    {"maximum [100]", f_maximum, 2, {1, 1}, {S1(100), S1(100)}, -1, 1, false},
    {"add [1]+[1] (length 1)", f_add, 2, {1, 1}, {S1(1), S1(1)}, -1, 1, false},
    /* affine */
    {"add_scalar [1000]", f_add_scalar, 1, {1}, {S1(1000)}, -2, 2, false},
    {"mul_scalar [1000]", f_mul_scalar, 1, {1}, {S1(1000)}, -2, 2, false},
    {"neg [7]", f_neg, 1, {1}, {S1(7)}, -2, 2, false},
    /* the unary table, moderate and large arguments */
    {"exp [1031]", f_exp, 1, {1}, {S1(1031)}, -20, 20, false},
    {"log [1031]", f_log, 1, {1}, {S1(1031)}, 1e-3, 50, false},
    {"sqrt [1031]", f_sqrt, 1, {1}, {S1(1031)}, 1e-3, 50, false},
    {"square [1031]", f_square, 1, {1}, {S1(1031)}, -5, 5, false},
    {"abs [1031]", f_abs, 1, {1}, {S1(1031)}, -5, 5, false},
    {"tanh [1031]", f_tanh, 1, {1}, {S1(1031)}, -30, 30, false},
    {"sigmoid [1031]", f_sigmoid, 1, {1}, {S1(1031)}, -60, 60, false},
    {"relu [1031]", f_relu, 1, {1}, {S1(1031)}, -5, 5, false},
    {"elu [1031]", f_elu, 1, {1}, {S1(1031)}, -10, 10, false},
    {"softplus [1031] (large |x|)", f_softplus, 1, {1}, {S1(1031)}, -100, 100, false},
    {"log_sigmoid [1031] (large |x|)", f_log_sigmoid, 1, {1}, {S1(1031)}, -100, 100, false},
    /* reductions */
    {"sum [1]", f_sum, 1, {1}, {S1(1)}, -1, 1, false},
    {"sum [100003]", f_sum, 1, {1}, {S1(100003)}, -1, 1, false},
    {"mean [3,1025]", f_mean, 1, {2}, {S2(3, 1025)}, -1, 1, false},
    /* softmax: odd widths, length 1, large logits */
    {"softmax [3,5,37]", f_softmax, 1, {3}, {S3(3, 5, 37)}, -3, 3, false},
    {"softmax [4,1] (length 1)", f_softmax, 1, {2}, {S2(4, 1)}, -3, 3, false},
    {"softmax [6,300] (logits to 1e3)", f_softmax, 1, {2}, {S2(6, 300)}, -1000, 1000, false},
    /* products on cuBLAS: 2-D, the transposes, batched, a shared operand */
    {"matmul [17,33]@[33,45]", f_matmul, 2, {2, 2}, {S2(17, 33), S2(33, 45)}, -1, 1, false},
    {"matmul_t TN [33,17]@[33,45]", f_matmul_tn, 2, {2, 2}, {S2(33, 17), S2(33, 45)}, -1, 1, false},
    {"matmul_t NT [17,33]@[45,33]", f_matmul_nt, 2, {2, 2}, {S2(17, 33), S2(45, 33)}, -1, 1, false},
    {"matmul_t TT [33,17]@[45,33]", f_matmul_tt, 2, {2, 2}, {S2(33, 17), S2(45, 33)}, -1, 1, false},
    {"matmul [3,17,33]@[3,33,45]", f_matmul, 2, {3, 3}, {S3(3, 17, 33), S3(3, 33, 45)}, -1, 1, false},
    {"matmul [3,17,33]@[33,45] (shared B)", f_matmul, 2, {3, 2}, {S3(3, 17, 33), S2(33, 45)}, -1, 1, false},
    {"matmul [17,33]@[3,33,45] (shared A)", f_matmul, 2, {2, 3}, {S2(17, 33), S3(3, 33, 45)}, -1, 1, false},
    {"matmul_t NT [2,3,9,33]@[33... ]", f_matmul_nt, 2, {4, 4}, {S4(2, 3, 9, 33), S4(2, 3, 11, 33)}, -1, 1, false},
    /* ag_to and back inside a graph */
    {"ag_to cuda -> cpu [41]", f_to_and_back, 1, {1}, {S1(41)}, -1, 1, false},
};

/* The families' cases (each .inc defines cases_<family>[]). */
#include "cuda_ops_tensor.inc"
#include "cuda_ops_softmax.inc"
#include "cuda_ops_loss.inc"
#include "cuda_ops_seq.inc"
#include "cuda_ops_feature.inc"

/* Each family's table. */
static const struct {
    const op_case *cases;
    size_t n;
} families[] = {
    {cases, sizeof cases / sizeof *cases},
    {cases_tensor, sizeof cases_tensor / sizeof *cases_tensor},
    {cases_softmax, sizeof cases_softmax / sizeof *cases_softmax},
    {cases_loss, sizeof cases_loss / sizeof *cases_loss},
    {cases_seq, sizeof cases_seq / sizeof *cases_seq},
    {cases_feature, sizeof cases_feature / sizeof *cases_feature},
};

/* ---- f64: the finite-difference gradient check of every case on the GPU:
 * the leaves stay on the CPU (the check perturbs them there), the op runs
 * on their GPU copies, and the output comes back for the projection; the
 * analytic gradient is the GPU's backward, through ag_to both ways. ---- */
#ifdef AG_REAL_DOUBLE
static const op_case *gc_case;
static ag_tensor *gc_in[3];

static ag_tensor *gpu_forward(void *ctx) {
    (void)ctx;
    ag_tensor *d[3];
    for (int i = 0; i < gc_case->n_in; i++) d[i] = ag_to(gc_in[i], GPU);
    return ag_to(gc_case->f(d), AG_CPU);
}

/* Central differences see the projected output sum to f64's roundoff, so
 * the check takes arguments within [-4, 4] (not the forward comparison's
 * large logits: e^20 terms drown a small one's difference) and cases whose
 * output has at most OUT_MAX elements (the larger products are compared
 * with the CPU's, whose own gradchecks run on smaller shapes). */
enum { OUT_MAX = 1200 };

static int64_t out_size(const op_case *c) {
    ag_params ps = {0};
    ag_tensor *in[3];
    for (int i = 0; i < c->n_in; i++) {
        char nm[8] = {'x', (char)('0' + i), 0}; /* distinct names for up to 3 inputs */
        in[i] = make_leaf(&ps, nm, c->ndim[i], c->shape[i], 0.5, 1, false);
    }
    int64_t n = c->f(in)->size;
    ag_step_end();
    ag_params_free(&ps);
    return n;
}

static void gradcheck_case(const op_case *c) {
    if (out_size(c) > OUT_MAX) return;
    ag_params ps = {0};
    double lo = c->lo < -4 ? -4 : c->lo, hi = c->hi > 4 ? 4 : c->hi;
    for (int i = 0; i < c->n_in; i++) {
        char nm[8] = {'x', (char)('0' + i), 0};
        bool divisor = c->sign && i == 1;
        gc_in[i] = make_leaf(&ps, nm, c->ndim[i], c->shape[i], divisor ? 0.5 : lo, divisor ? 2.0 : hi,
                             divisor || lo < 0);
    }
    gc_case = c;
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    o.max_checks = 64; /* elements per input, spread evenly: two GPU forwards each */
    /* The projected sum of up to OUT_MAX outputs of size ~1 carries ~1e-8 of
     * central-difference roundoff at eps 1e-6 (the CPU gradchecks of
     * tests/cases_*.c use smaller shapes); rtol stays 1e-6, and a wrong
     * kernel is off by the size of the gradient itself. */
    o.atol = 1e-7;
    ag_gradcheck_result r = ag_gradcheck(gpu_forward, NULL, gc_in, c->n_in, &o);
    CHECK(r.ok, "%s gradcheck on the GPU: worst at input %d element %lld: analytic %.17g, numeric %.17g (rel %.3g)",
          c->name, r.worst_input, (long long)r.worst_index, r.analytic, r.numeric, r.max_rel_err);
    printf("%-28s gradchk  %8lld elements, max rel err %.2e\n", c->name, (long long)r.checked, r.max_rel_err);
    ag_step_end();
    ag_params_free(&ps);
}
#endif

int main(void) {
    char why[256];
    const char *on_cpu = getenv("AG_TEST_CUDA_ON_CPU");
    if (on_cpu && *on_cpu == '1') {
        GPU = AG_CPU;
        printf("AG_TEST_CUDA_ON_CPU: both sides on the cpu (the cases' own check, not the kernels')\n");
    } else if (!ag_cuda_available(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    ag_rng_seed(&rng, 42);
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
        for (size_t i = 0; i < families[f].n; i++) run_case(&families[f].cases[i]);
#ifdef AG_REAL_DOUBLE
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
        for (size_t i = 0; i < families[f].n; i++) gradcheck_case(&families[f].cases[i]);
#endif
    ag_shutdown();
    return check_summary("test_cuda_ops");
}
