/* test_recompute.c - ag_recompute (activation checkpointing), in f64, on
 * the CPU and on the GPU where the build has one (the emulator in CI):
 *   - a stack of residual blocks with dropout, each a region: the loss, the
 *     input's and every parameter's gradient as without the regions (to
 *     roundoff: the regions' sums are the same sums), and the generator
 *     left where the plain run leaves it;
 *   - a central-difference gradient check through the regions;
 *   - regions nested, a region returning its input, a region whose input
 *     needs no gradient but whose parameters do, a retained backward twice;
 *   - step memory: a deep stack's peak far below the plain one's, and no
 *     heap allocation once warm;
 *   - with gradients off it is f itself; misuse and an f that computes
 *     something else the second time are refused by name. */
#include "attngrad.h"
#include "check.h"
#include "fatal.h"
#include "../graph/device.h" /* ag__read_on: gradients read back from the GPU */

enum { B = 3, D = 5, L = 4 };

typedef struct {
    ag_params ps;
    ag_tensor *w1[L], *b1[L], *w2[L];
    ag_rng rng;     /* dropout's */
    double keep;
    int calls;      /* f's runs */
    int skew;       /* misuse: make the second run differ */
} stack;

static void stack_init(stack *s, int d, double keep) {
    *s = (stack){.keep = keep};
    ag_rng init;
    ag_rng_seed(&init, 3);
    for (int l = 0; l < L; l++) {
        char name[32];
        snprintf(name, sizeof name, "w1_%d", l);
        s->w1[l] = ag_param_uniform(&s->ps, name, 2, (int[]){d, 2 * d}, 0.8, &init);
        snprintf(name, sizeof name, "b1_%d", l);
        s->b1[l] = ag_param_uniform(&s->ps, name, 1, (int[]){2 * d}, 0.5, &init);
        snprintf(name, sizeof name, "w2_%d", l);
        s->w2[l] = ag_param_uniform(&s->ps, name, 2, (int[]){2 * d, d}, 0.8, &init);
    }
}

/* block l: x + dropout(tanh(x W1 + b1)) W2 */
typedef struct {
    stack *s;
    int l;
} block_ctx;

static ag_tensor *block(void *p, ag_tensor *const *in) {
    block_ctx *c = p;
    stack *s = c->s;
    s->calls++;
    ag_tensor *h = ag_dropout(ag_tanh(ag_linear(in[0], s->w1[c->l], s->b1[c->l])), s->keep, true, &s->rng);
    ag_tensor *y = ag_add(in[0], ag_matmul(h, s->w2[c->l]));
    if (s->skew && s->calls > 1) y = ag_slice(y, 1, 0, 1);
    return y;
}

/* the stack, each block a region (regions) or not; loss = mean of y^2 */
static ag_tensor *forward(stack *s, ag_tensor *x, bool regions) {
    for (int l = 0; l < L; l++) {
        block_ctx c = {s, l};
        x = regions ? ag_recompute(block, &c, sizeof c, 1, &x, &s->rng) : block(&c, &x);
    }
    return ag_mean(ag_square(x));
}

/* the loss and every gradient (x's last) of one step, from dropout seed 7 */
static void read_grad(const ag_tensor *t, ag_real *host) {
    ag__read_on(t->device, host, t->grad, (size_t)t->size * sizeof(ag_real));
}

static double step(stack *s, ag_tensor *x, bool regions, ag_real *grads, ag_rng *rng_after) {
    ag_params_zero_grad(&s->ps);
    x->grad = NULL;
    ag_rng_seed(&s->rng, 7);
    ag_tensor *loss = forward(s, x, regions);
    double value = ag_item(loss);
    ag_backward(loss);
    int64_t at = 0;
    for (int p = 0; p < s->ps.count; p++) {
        read_grad(s->ps.items[p], grads + at);
        at += s->ps.items[p]->size;
    }
    read_grad(x, grads + at);
    *rng_after = s->rng;
    ag_step_end();
    return value;
}

static ag_tensor *input(ag_device d, int rows, int cols) {
    ag_tensor *x = ag_tensor_new_host(2, (int[]){rows, cols});
    for (int64_t i = 0; i < x->size; i++) x->data[i] = (ag_real)sin(0.7 * (double)i + 0.3);
    x = ag_to(x, d);
    x->requires_grad = true;
    return x;
}

static void same_as_plain(ag_device d) {
    stack s;
    stack_init(&s, D, 0.7);
    ag_params_to(&s.ps, d);
    ag_set_device(d);
    int64_t n = L * (D * 2 * D + 2 * D + 2 * D * D) + B * D;
    ag_real *plain = calloc((size_t)n, sizeof *plain), *regions = calloc((size_t)n, sizeof *regions);
    ag_rng after_plain, after_regions;
    double lp = step(&s, input(d, B, D), false, plain, &after_plain);
    s.calls = 0;
    double lr = step(&s, input(d, B, D), true, regions, &after_regions);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        worst = check_worst(worst, fabs(plain[i] - regions[i]));
        scale = fmax(scale, fabs(plain[i]));
    }
    CHECK(lp == lr, "on the %s: loss %.17g with regions, %.17g without", ag_device_name(d), lr, lp);
    CHECK(worst <= 1e-14 * scale && scale > 1e-3, "on the %s: gradients differ by %.3g (scale %.3g)", ag_device_name(d),
          worst, scale);
    CHECK(s.calls == 2 * L, "f ran %d times for %d regions, want twice each", s.calls, L);
    CHECK(!memcmp(&after_plain, &after_regions, sizeof after_plain), "the generator is not where the plain run leaves it");
    printf("  %s: %d regions with dropout, gradients within %.2e of the plain stack's\n", ag_device_name(d), L, worst);
    if (d == AG_CUDA) { /* captured and replayed as CUDA graphs (an identical earlier stretch): the same bits */
        ag_cuda_graphs(true);
        int64_t g0 = ag_memstats().graph_launches;
        bool same = true;
        for (int k = 0; k < 10; k++) { /* a stretch replays from its 8th identical run (docs/design.md) */
            double again = step(&s, input(d, B, D), true, regions, &after_regions);
            same &= again == lp && !memcmp(plain, regions, (size_t)n * sizeof *plain);
        }
        int64_t replayed = ag_memstats().graph_launches - g0;
        ag_cuda_graphs(false);
        CHECK(same, "regions under CUDA graphs: not the plain stack's loss and gradients");
        CHECK(replayed > 0, "regions under CUDA graphs: no graph was replayed in 10 steps");
        printf("  cuda graphs: %lld graph launches in 10 steps with regions, the plain stack's bits\n", (long long)replayed);
    }
    free(plain);
    free(regions);
    ag_set_device(AG_CPU);
    ag_params_to(&s.ps, AG_CPU);
    ag_params_free(&s.ps);
}

/* ---- a gradient check through the regions ---- */

typedef struct {
    stack *s;
    ag_tensor *x;
} check_ctx;

static ag_tensor *loss_fn(void *p) {
    check_ctx *c = p;
    ag_rng_seed(&c->s->rng, 11); /* the same masks at every evaluation */
    return forward(c->s, c->x, true);
}

static void gradcheck(void) {
    stack s;
    stack_init(&s, 3, 0.8);
    ag_params ps = {0};
    ag_rng r;
    ag_rng_seed(&r, 2);
    ag_tensor *x = ag_param_uniform(&ps, "x", 2, (int[]){2, 3}, 1, &r);
    check_ctx c = {&s, x};
    ag_tensor *wrt[3 * L + 1];
    for (int p = 0; p < s.ps.count; p++) wrt[p] = s.ps.items[p];
    wrt[s.ps.count] = x;
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result res = ag_gradcheck(loss_fn, &c, wrt, s.ps.count + 1, &o);
    CHECK(res.ok && res.checked > 100, "gradcheck through regions: element %lld of input %d, analytic %.12g numeric %.12g",
          (long long)res.worst_index, res.worst_input, res.analytic, res.numeric);
    printf("  gradcheck through %d regions: %lld elements, max rel err %.2e\n", L, (long long)res.checked,
           res.max_rel_err);
    ag_params_free(&ps);
    ag_params_free(&s.ps);
}

/* ---- nesting, identity, parameters alone, retained ---- */

static ag_tensor *two_blocks(void *p, ag_tensor *const *in) { /* a region of two regions */
    stack *s = p;
    ag_tensor *x = in[0];
    for (int l = 0; l < 2; l++) {
        block_ctx c = {s, l};
        x = ag_recompute(block, &c, sizeof c, 1, &x, &s->rng);
    }
    return x;
}

static ag_tensor *identity(void *p, ag_tensor *const *in) {
    (void)p;
    return in[0];
}

static void shapes(void) {
    stack s;
    stack_init(&s, D, 1);
    ag_rng_seed(&s.rng, 1);
    /* nested: two regions inside one, against the two blocks plainly */
    ag_tensor *x = input(AG_CPU, B, D);
    ag_backward(ag_sum(ag_square(two_blocks(&s, &x))));
    ag_real want[B * D], got[B * D], wgrad[2 * D * D];
    memcpy(want, x->grad, sizeof want);
    memcpy(wgrad, s.w2[1]->grad, sizeof wgrad);
    ag_step_end();
    ag_params_zero_grad(&s.ps);
    x = input(AG_CPU, B, D);
    ag_backward(ag_sum(ag_square(ag_recompute(two_blocks, &s, 0, 1, &x, &s.rng))));
    memcpy(got, x->grad, sizeof got);
    double d = 0, dw = 0;
    for (int i = 0; i < B * D; i++) d = check_worst(d, fabs(got[i] - want[i]));
    for (int i = 0; i < 2 * D * D; i++) dw = check_worst(dw, fabs(s.w2[1]->grad[i] - wgrad[i]));
    CHECK(d <= 1e-14 && dw <= 1e-14, "nested regions: x's gradient off by %.3g, w2_1's by %.3g", d, dw);
    ag_step_end();

    /* a region that returns its input: the gradient passes as it is, added to what x had */
    x = input(AG_CPU, B, D);
    ag_tensor *y = ag_recompute(identity, NULL, 0, 1, &x, NULL);
    CHECK(y != x && y->data != x->data, "a region's output is its own tensor");
    ag_backward(ag_add(ag_sum(ag_mul_scalar(y, 3)), ag_sum(x)));
    bool four = true;
    for (int i = 0; i < B * D; i++) four &= x->grad[i] == 4;
    CHECK(four, "identity region: x's gradient %g, want 3 + 1", (double)x->grad[0]);
    ag_step_end();

    /* x a constant: the region is recorded for its parameters all the same */
    ag_params_zero_grad(&s.ps);
    x = input(AG_CPU, B, D);
    x->requires_grad = false;
    block_ctx c0 = {&s, 0};
    ag_tensor *out = ag_recompute(block, &c0, sizeof c0, 1, &x, &s.rng);
    CHECK(out->requires_grad, "a region over a constant whose parameters need gradients needs one");
    ag_backward(ag_sum(out));
    double w = 0;
    for (int64_t i = 0; i < s.w1[0]->size; i++) w = fmax(w, fabs(s.w1[0]->grad[i]));
    CHECK(w > 1e-3, "w1_0 got no gradient through a region over a constant");
    ag_step_end();

    /* retained: a second backward recomputes again and adds the same again */
    ag_params_zero_grad(&s.ps);
    x = input(AG_CPU, B, D);
    ag_tensor *loss = ag_sum(ag_square(ag_recompute(block, &c0, sizeof c0, 1, &x, &s.rng)));
    ag_backward_retain(loss);
    ag_real once[B * D];
    memcpy(once, x->grad, sizeof once);
    ag_backward(loss);
    bool twice = true;
    for (int i = 0; i < B * D; i++) twice &= fabs(x->grad[i] - 2 * once[i]) <= 1e-14 * fabs(once[i]) + 1e-300;
    CHECK(twice, "a retained backward twice through a region: not twice the gradient");
    ag_step_end();
    ag_params_free(&s.ps);
}

/* ---- step memory ---- */

static void memory(void) {
    enum { DEEP = 16, ROWS = 64, COLS = 64 };
    stack s;
    stack_init(&s, COLS, 0.9);
    size_t peak[2];
    int64_t allocs[2];
    for (int regions = 0; regions < 2; regions++) {
        for (int k = 0; k < 3; k++) { /* warm: the third step's counts */
            ag_memstats_reset_high();
            int64_t a0 = ag_memstats().allocs;
            ag_tensor *x = input(AG_CPU, ROWS, COLS);
            for (int rep = 0; rep < DEEP / L; rep++)
                for (int l = 0; l < L; l++) {
                    block_ctx c = {&s, l};
                    x = regions ? ag_recompute(block, &c, sizeof c, 1, &x, &s.rng) : block(&c, &x);
                }
            ag_backward(ag_mean(ag_square(x)));
            ag_step_end();
            peak[regions] = ag_memstats().arena_high;
            allocs[regions] = ag_memstats().allocs - a0;
        }
    }
    CHECK(peak[1] * 3 < peak[0], "%d blocks [%d,%d]: step memory %zu bytes with regions, %zu without", DEEP, ROWS, COLS,
          peak[1], peak[0]);
    CHECK(allocs[1] == 0, "a warm step with regions made %lld heap allocations", (long long)allocs[1]);
    printf("  %d blocks of [%d,%d]: step memory %.0f KiB with regions, %.0f KiB without\n", DEEP, ROWS, COLS,
           peak[1] / 1024.0, peak[0] / 1024.0);
    ag_params_free(&s.ps);
}

/* ---- gradients off, misuse ---- */

static void misuse(void) {
    stack s;
    stack_init(&s, D, 1);
    ag_tensor *x = input(AG_CPU, B, D);
    bool was = ag_set_grad_enabled(false);
    block_ctx c = {&s, 0};
    s.calls = 0;
    ag_tensor *y = ag_recompute(block, &c, sizeof c, 1, &x, NULL);
    CHECK(s.calls == 1 && !y->requires_grad && !y->node, "with gradients off a region is f, run once");
    ag_set_grad_enabled(was);
    ag_tensor *many[9] = {x, x, x, x, x, x, x, x, x};
    EXPECT_FATAL_AT(ag_recompute(block, &c, sizeof c, 9, many, NULL), "ag_recompute", "9 inputs");
    EXPECT_FATAL_AT(ag_recompute(NULL, &c, sizeof c, 1, &x, NULL), "ag_recompute", "f is NULL");
    EXPECT_FATAL_AT(ag_recompute(block, &c, sizeof c, 1, (ag_tensor *[]){NULL}, NULL), "ag_recompute", "in[0]");
    /* an f that gives another shape the second time: refused when swept */
    s.calls = 0, s.skew = 1;
    ag_tensor *loss = ag_sum(ag_recompute(block, &c, sizeof c, 1, &x, &s.rng));
    EXPECT_FATAL(ag_backward(loss), "ag_recompute", "f gave [3,5]", "[3,1]", "the same function");
    ag_step_end();
    ag_params_free(&s.ps);
}

int main(void) {
    ag_set_num_threads(1);
    same_as_plain(AG_CPU);
    char why[256];
    if (ag_cuda_available(why, sizeof why)) same_as_plain(AG_CUDA);
    else printf("  on the GPU: not run (%s)\n", why);
    gradcheck();
    shapes();
    memory();
    misuse();
    ag_shutdown();
    return check_summary("test_recompute");
}
