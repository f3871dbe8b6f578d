/* opcase_run.c - runs the op case table (tests/opcase.h) in one mode:
 *
 *   --gradcheck  f64: every case's gradients against central differences
 *                on the CPU.
 *   --dump       every case's forward values, printed; f32_vs_f64 runs this
 *                in the f32 and the f64 build and compares.
 *   --device     every case on the CPU and on the device from the same
 *                inputs, forward and backward compared element by element
 *                (the pattern of ggml's test-backend-ops), then, in f64,
 *                every case gradchecked on the device.  Exit 77 without a
 *                device.  AG_TEST_CUDA_ON_CPU=1 runs the "device" side on
 *                the CPU too: on a machine without a GPU it checks the
 *                cases themselves (inputs, constants made on their inputs'
 *                device, the gradcheck's set-up) before they reach a kernel.
 *   --time       forward and forward+backward time of every case (median
 *                of --reps N runs after 3 warm-up runs; --cuda on the GPU).
 *
 * An argument that is not an option filters the cases by substring. */
#include "check.h"
#include "opcase.h"
#include "../bench/bench_time.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OPCASE_LIST_SET(set) set##_cases,
static const op_case *const case_sets[] = {OPCASE_SETS(OPCASE_LIST_SET) NULL};

/* ---- inputs ---- */

static bool is_uniform(const op_case *c) { return c->setup == NULL; }

/* A uniform case's inputs (opcase.h, tc_uniform_inputs); for a gradient
 * check within [-4, 4]: central differences see the projected output sum
 * to f64's roundoff, and e^20 terms (the comparison's large logits) would
 * drown a small one's difference. */
static int uniform_inputs(const tc_uniform_inputs *u, ag_tensor **in, ag_rng *rng, bool for_gradcheck) {
    double lo = for_gradcheck ? fmax(u->lo, -4) : u->lo, hi = for_gradcheck ? fmin(u->hi, 4) : u->hi;
    for (int i = 0; i < u->n; i++) {
        const tc_shape *s = &u->shape[i];
        in[i] = u->divisor && i == 1 ? tc_away(rng, 0.5, 2.0, true, s->ndim, s->dims)
                                     : tc_uniform(rng, lo, hi, true, s->ndim, s->dims);
        for (int64_t j = 0; j < in[i]->size; j++) in[i]->data[j] = (ag_real)(float)in[i]->data[j];
    }
    return u->n;
}

/* Case c's inputs, on the CPU: the same ones for the same seed. */
static int make_inputs(const op_case *c, ag_tensor **in, bool for_gradcheck) {
    ag_rng rng;
    ag_rng_seed(&rng, 42);
    ag_device old = ag_get_device();
    ag_set_device(AG_CPU); /* setups fill tensors in place */
    int n = c->setup ? c->setup(in, &rng) : uniform_inputs(&c->uniform, in, &rng, for_gradcheck);
    ag_set_device(old);
    return n;
}

/* c's forward on dev: the inputs moved there (on the CPU they stay
 * themselves) and the current device set to dev, so that the masks the
 * case asks the library for are made there, as a model's are. */
static ag_tensor *forward_on(const op_case *c, ag_tensor **in, int n, ag_device dev) {
    ag_tensor *moved[OPCASE_MAX_INPUTS] = {0};
    for (int i = 0; i < n; i++) moved[i] = ag_to(in[i], dev);
    ag_device old = ag_get_device();
    ag_set_device(dev);
    ag_tensor *out = c->forward(moved);
    ag_set_device(old);
    return out;
}

/* ---- gradient checks, on the CPU or the device ---- */

/* A uniform case is sized for the device's kernels: its gradient checks
 * skip outputs over this (the larger products are compared with the CPU's,
 * whose own gradchecks run on smaller shapes). */
enum { GRADCHECK_OUT_MAX = 1200 };

typedef struct {
    const op_case *c;
    ag_tensor **in;
    int n;
    ag_device dev;
} run_ctx;

/* The leaves stay on the CPU (the check perturbs them there), the op runs
 * on their copies on the device, and the output comes back for the
 * projection: the analytic gradient is the device's backward, through
 * ag_to both ways. */
static ag_tensor *gradcheck_forward(void *p) {
    run_ctx *r = p;
    return ag_to(forward_on(r->c, r->in, r->n, r->dev), AG_CPU);
}

static int64_t out_size(const op_case *c) {
    ag_tensor *in[OPCASE_MAX_INPUTS] = {0};
    int n = make_inputs(c, in, true);
    int64_t size = forward_on(c, in, n, AG_CPU)->size;
    ag_step_end();
    return size;
}

/* The largest |value| of t (NaN where one is NaN), and where. */
static double largest_abs(const ag_tensor *t, int64_t *at) {
    double worst = 0;
    for (int64_t i = 0; i < t->size; i++)
        if (!(fabs((double)t->data[i]) <= worst)) worst = fabs((double)t->data[i]), *at = i;
    return worst;
}

/* A difference case (OPCASE_DIFFERENCE) is its own test on the CPU: its
 * two computations of one function agree, so each difference it made
 * (tc_difference; none recorded: the output is the difference) is 0 to
 * f64's roundoff on terms of size ~1 (the inputs within [-4, 4]). */
static void check_difference_is_zero(const op_case *c) {
    ag_tensor *in[OPCASE_MAX_INPUTS] = {0};
    int n = make_inputs(c, in, true);
    tc_n_differences = 0;
    ag_tensor *out = forward_on(c, in, n, AG_CPU);
    int count = tc_n_differences ? tc_n_differences : 1;
    for (int d = 0; d < count; d++) {
        const ag_tensor *diff = tc_n_differences ? tc_differences[d] : out;
        int64_t at = -1;
        double worst = largest_abs(diff, &at);
        printf("  %-48s cpu  difference %d of %d, largest |value| %.2e\n", c->name, d + 1, count, worst);
        CHECK(worst <= 1e-10, "%s: difference %d: the two computations differ by %.3g at element %lld (want 0)",
              c->name, d + 1, worst, (long long)at);
    }
    ag_step_end();
}

enum { SETUP_CHECKS = 256 };

static void gradcheck_case(const op_case *c, ag_device dev) {
    if ((c->flags & OPCASE_DIFFERENCE) && dev == AG_CPU) check_difference_is_zero(c);
    if (is_uniform(c) && out_size(c) > GRADCHECK_OUT_MAX) return;
    ag_tensor *in[OPCASE_MAX_INPUTS] = {0}, *wrt[OPCASE_MAX_INPUTS];
    int n = make_inputs(c, in, true), nw = 0;
    for (int i = 0; i < n; i++)
        if (in[i]->requires_grad) wrt[nw++] = in[i];
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    /* A set-up case checks every element of an input up to SETUP_CHECKS,
     * more spread evenly: the 4,000-element inputs that make a layer pack
     * its zero rows (64 rows or more) cost a forward pair each, which in
     * CI's emulated GPU and under qemu came to minutes, and a wrong kernel
     * is wrong on more than one element in 16. */
    o.max_checks = SETUP_CHECKS;
    if (is_uniform(c)) {
        o.max_checks = 64; /* elements per input, spread evenly: two forwards each */
        /* The projected sum of up to GRADCHECK_OUT_MAX outputs of size ~1
         * carries ~1e-8 of central-difference roundoff at eps 1e-6 (the
         * setup cases use smaller shapes); rtol stays 1e-6, and a wrong
         * kernel is off by the size of the gradient itself. */
        o.atol = 1e-7;
    }
    if (c->atol) o.atol = c->atol;
    if (c->rtol) o.rtol = c->rtol;
    run_ctx ctx = {c, in, n, dev};
    ag_gradcheck_result r = ag_gradcheck(gradcheck_forward, &ctx, wrt, nw, &o);
    printf("  %-48s %-4s gradchk %6lld checked, max rel err %.2e\n", c->name, ag_device_name(dev),
           (long long)r.checked, r.max_rel_err);
    CHECK(nw > 0, "%s: no input requires grad", c->name);
    CHECK(r.ok, "%s gradcheck on the %s: input %d element %lld: analytic %.17g, numeric %.17g (rel %.3g)", c->name,
          ag_device_name(dev), r.worst_input, (long long)r.worst_index, r.analytic, r.numeric, r.max_rel_err);
    ag_step_end();
}

/* ---- the device against the CPU ----
 *
 * Tolerance: |cpu - dev| <= TOL * max(|cpu|, |dev|, rms), rms being the
 * root mean square of the CPU array.  The rms floor is there because an
 * element that is a sum of terms of mixed sign (a product's entry, a
 * softmax gradient y (g - g.y)) carries the roundoff of its terms, which
 * are of the array's size, not of its own: element-wise relative error on
 * a near-cancelled entry measures the cancellation, not the kernel.
 * TOL: f64 1e-10 (the kernels compute the CPU's expressions without FMA
 * contraction; what remains is summation order in cuBLAS and the
 * reductions), f32 1e-5 (the same, at float's 6e-8 unit roundoff times the
 * sums' lengths here, up to ~1000).  A case whose output is a difference
 * of two computations of one function (OPCASE_DIFFERENCE) is 0 on the CPU,
 * exactly or to roundoff, and so is its rms: the floor is then 1, the size
 * of the terms whose roundoff the difference carries. */
#ifdef AG_REAL_DOUBLE
static const double TOL = 1e-10;
#else
static const double TOL = 1e-5;
#endif

/* The worst |a - b| / max(|a|, |b|, rms(a), floor) over two host arrays. */
static double worst_rel(const ag_real *a, const ag_real *b, int64_t n, double floor, int64_t *at) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)a[i] * (double)a[i];
    double rms = fmax(n ? sqrt(ss / (double)n) : 0, floor), worst = 0;
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

static void compare(const char *what, const op_case *c, ag_device dev, const ag_real *cpu, const ag_real *on_dev,
                    int64_t n) {
    int64_t at;
    double w = worst_rel(cpu, on_dev, n, c->flags & OPCASE_DIFFERENCE ? 1 : 0, &at);
    CHECK(w <= TOL, "%s %s: worst relative difference %.3g at element %lld (cpu %.17g, %s %.17g), tolerance %g", c->name,
          what, w, (long long)at, at >= 0 ? (double)cpu[at] : 0, ag_device_name(dev),
          at >= 0 ? (double)on_dev[at] : 0, TOL);
    printf("  %-48s %-8s %8lld elements, worst rel diff %.2e\n", c->name, what, (long long)n, w);
}

/* t's values (or its gradient's: zeros where none reached it) in a host array. */
static ag_real *values_of(const ag_tensor *t) {
    ag_real *v = calloc((size_t)(t->size ? t->size : 1), sizeof *v);
    ag_tensor_read(t, v);
    return v;
}
static ag_real *grad_of(const ag_tensor *t) { /* a CPU leaf's */
    ag_real *g = calloc((size_t)(t->size ? t->size : 1), sizeof *g);
    if (t->grad) memcpy(g, t->grad, (size_t)t->size * sizeof *g);
    return g;
}

/* op(in) . w summed, w fixed: a scalar whose gradient reaches every output
 * element with its own weight. */
static ag_tensor *weighted_sum(ag_tensor *out) {
    ag_rng rng;
    ag_rng_seed(&rng, 7);
    ag_tensor *w = ag_tensor_new_host(out->ndim, out->shape);
    for (int64_t i = 0; i < w->size; i++) w->data[i] = (ag_real)(ag_rng_uniform(&rng) - 0.5);
    return ag_sum(ag_mul(out, ag_to(w, out->device)));
}

static void compare_case(const op_case *c, ag_device dev) {
    ag_tensor *in[OPCASE_MAX_INPUTS] = {0};
    ag_real *g_cpu[OPCASE_MAX_INPUTS] = {0};
    int n = make_inputs(c, in, false);
    ag_tensor *out = forward_on(c, in, n, AG_CPU);
    int64_t n_out = out->size;
    bool backward = out->requires_grad;
    ag_real *y_cpu = values_of(out);
    if (backward) {
        ag_backward(weighted_sum(out));
        for (int i = 0; i < n; i++)
            if (in[i]->requires_grad) g_cpu[i] = grad_of(in[i]);
    }
    ag_step_end();

    n = make_inputs(c, in, false); /* the same leaves again, without gradients */
    ag_tensor *dout = forward_on(c, in, n, dev);
    ag_device want = c->flags & OPCASE_ENDS_ON_CPU ? AG_CPU : dev;
    CHECK(dout->device == want, "%s: the output is on the %s, not the %s", c->name, ag_device_name(dout->device),
          ag_device_name(want));
    CHECK(dout->size == n_out, "%s: %lld outputs on the %s, %lld on the cpu", c->name, (long long)dout->size,
          ag_device_name(dev), (long long)n_out);
    if (dout->size == n_out) {
        ag_real *y_dev = values_of(dout);
        compare("forward", c, dev, y_cpu, y_dev, n_out);
        free(y_dev);
    }
    if (backward) {
        ag_backward(weighted_sum(dout));
        for (int i = 0; i < n; i++) {
            if (!g_cpu[i]) continue;
            char what[24]; /* room for any int: -Wformat-truncation in debug builds */
            snprintf(what, sizeof what, "grad x%d", i);
            ag_real *g_dev = grad_of(in[i]);
            compare(what, c, dev, g_cpu[i], g_dev, in[i]->size);
            free(g_dev);
            free(g_cpu[i]);
        }
    }
    free(y_cpu);
    ag_step_end();
}

/* ---- forward values for f32_vs_f64 ---- */

static void dump_case(const op_case *c) {
    ag_tensor *in[OPCASE_MAX_INPUTS] = {0};
    int n = make_inputs(c, in, false);
    ag_tensor *out = forward_on(c, in, n, AG_CPU);
    printf("case %lld %s\n", (long long)out->size, c->name);
    for (int64_t i = 0; i < out->size; i++) printf("%.10e\n", (double)out->data[i]);
    ag_step_end();
}

/* ---- timing ---- */

/* The case's inputs as parameters on dev (persistent, moved once), so a
 * timed run is the op's work alone: forward, backward from a fixed d(out)
 * made once where the op runs, ag_step_end.  Each time ends with ag_sync
 * (the GPU's queued work inside it; on the CPU it returns at once). */
static void time_case(const op_case *c, ag_device dev, int reps) {
    ag_params inputs = {0}, seeds = {0};
    ag_tensor *in[OPCASE_MAX_INPUTS] = {0}, *p[OPCASE_MAX_INPUTS] = {0};
    int n = make_inputs(c, in, false);
    for (int i = 0; i < n; i++) {
        char name[8] = {'x', (char)('0' + i), 0};
        p[i] = ag_param(&inputs, name, in[i]->ndim, in[i]->shape);
        memcpy(p[i]->data, in[i]->data, (size_t)in[i]->size * sizeof(ag_real));
        if (!in[i]->requires_grad) ag_param_freeze(p[i]);
    }
    ag_step_end();
    ag_params_to(&inputs, dev);
    ag_tensor *seed = NULL;
    double *fwd = malloc((size_t)reps * 2 * sizeof *fwd), *both = fwd + reps;
    ag_device old = ag_get_device();
    ag_set_device(dev);
    for (int r = -3; r < reps; r++) { /* 3 warm-up runs grow the arena to size */
        double t0 = bench_wall_ms();
        ag_tensor *out = c->forward(p);
        ag_sync();
        double t1 = bench_wall_ms();
        if (out->requires_grad && out->size > 0) {
            if (!seed) {
                seed = ag_param(&seeds, "seed", out->ndim, out->shape);
                for (int64_t j = 0; j < seed->size; j++) seed->data[j] = (ag_real)((j % 13) - 6) / 6;
                ag_params_to(&seeds, dev);
            }
            ag_backward_seeded_tensor(out, seed);
            ag_sync();
        }
        double t2 = bench_wall_ms();
        ag_step_end();
        if (r >= 0) fwd[r] = t1 - t0, both[r] = t2 - t0;
    }
    ag_set_device(old);
    printf("%-56s %10.4f %12.4f\n", c->name, bench_median(fwd, reps), bench_median(both, reps));
    free(fwd);
    ag_params_free(&seeds);
    ag_params_free(&inputs);
}

/* ---- main ---- */

static void usage(void) {
    fprintf(stderr, "usage: test_ops [--gradcheck | --dump | --device | --time [--cuda] [--reps N]] [FILTER]\n");
    exit(2);
}

/* The device of --device: the GPU, the CPU under AG_TEST_CUDA_ON_CPU=1,
 * or none (false: skip). */
static bool device_under_test(ag_device *dev) {
    char why[256];
    if (check_env_on("AG_TEST_CUDA_ON_CPU")) {
        printf("AG_TEST_CUDA_ON_CPU: both sides on the cpu (the cases' own check, not the kernels')\n");
        *dev = AG_CPU;
        return true;
    }
    if (!ag_cuda_available(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return false;
    }
    *dev = AG_CUDA;
    return true;
}

static bool selected(const op_case *c, const char *filter) { return !filter || strstr(c->name, filter); }

int opcase_main(int argc, char **argv, opcase_mode mode) {
    const char *filter = NULL;
    int reps = 21;
    ag_device dev = AG_CPU;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gradcheck")) mode = OPCASE_GRADCHECK;
        else if (!strcmp(argv[i], "--dump")) mode = OPCASE_DUMP;
        else if (!strcmp(argv[i], "--device")) mode = OPCASE_DEVICE;
        else if (!strcmp(argv[i], "--time")) mode = OPCASE_TIME;
        else if (!strcmp(argv[i], "--cuda")) dev = AG_CUDA;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (argv[i][0] == '-' || filter) usage();
        else filter = argv[i];
    }
    if (reps < 1) reps = 1;
    if (mode == OPCASE_GRADCHECK && sizeof(ag_real) != sizeof(double)) {
        fprintf(stderr, "gradient checks run in the f64 build\n");
        return 2;
    }
    char why[256];
    if (mode == OPCASE_TIME && dev == AG_CUDA && !ag_cuda_available(why, sizeof why)) {
        fprintf(stderr, "test_ops --time --cuda: %s\n", why);
        return 1;
    }
    if (mode == OPCASE_DEVICE && !device_under_test(&dev)) return 77;
    if (mode == OPCASE_TIME)
        printf("%-56s %10s %12s   (%s, median of %d, %d threads)\n", "case", "fwd ms", "fwd+bwd ms",
               ag_device_name(dev), reps, ag_get_num_threads());
    int cases = 0;
    for (const op_case *const *set = case_sets; *set; set++)
        for (const op_case *c = *set; c->name; c++) {
            if (!selected(c, filter)) continue;
            cases++;
            switch (mode) {
            case OPCASE_GRADCHECK: gradcheck_case(c, AG_CPU); break;
            case OPCASE_DUMP: dump_case(c); break;
            case OPCASE_DEVICE: compare_case(c, dev); break;
            case OPCASE_TIME: time_case(c, dev, reps); break;
            }
        }
#ifdef AG_REAL_DOUBLE
    /* AG_TEST_NO_GRADCHECK=1 (the emulator's bounds_ runs): the gradcheck
     * runs the kernels the comparison ran, on the same shapes, so it adds
     * nothing to a check of bounds; the plain run gradchecks every case */
    if (mode == OPCASE_DEVICE && check_env_on("AG_TEST_NO_GRADCHECK"))
        printf("AG_TEST_NO_GRADCHECK: the comparisons only, no gradcheck on the %s\n", ag_device_name(dev));
    else if (mode == OPCASE_DEVICE) /* after every comparison: a wrong kernel shows first as a difference */
        for (const op_case *const *set = case_sets; *set; set++)
            for (const op_case *c = *set; c->name; c++)
                if (selected(c, filter)) gradcheck_case(c, dev);
#endif
    ag_shutdown();
    if (mode == OPCASE_DUMP) {
        printf("end %d\n", cases); /* f32_vs_f64 checks that it read every case */
        return 0;
    }
    if (mode == OPCASE_TIME) return 0;
    CHECK(cases > 0, "no case matches '%s'", filter ? filter : "");
    return check_summary(mode == OPCASE_DEVICE ? "test_cuda_ops" : "test_ops");
}
