/* test_param_stack.c - parameters stored as one block (ag_param_stack):
 * each member a parameter of its own (name, shape, checkpoint entry), one
 * [G, ...] tensor to an op (ag_param_stack_view) whose gradient lands in
 * the members' own; the block moved between devices whole and freed once
 * (ASan and valgrind watch the frees).  On a GPU, or the CUDA emulator,
 * the same on the device. */
#include "check.h"
#include "fatal.h"
#include "attngrad.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { G = 3, ROWS = 2, COLS = 4, N = ROWS * COLS };

typedef struct {
    ag_params ps;
    ag_tensor *before, *w[G], *after;
} model;

static void make(model *m) {
    memset(m, 0, sizeof *m);
    m->before = ag_param(&m->ps, "before", 1, (int[]){3});
    ag_scope_push("enc");
    ag_param_stack(&m->ps, "unit%d.w", G, 2, (int[]){ROWS, COLS}, m->w);
    ag_scope_pop();
    m->after = ag_param(&m->ps, "after", 1, (int[]){5});
    for (int g = 0; g < G; g++)
        for (int i = 0; i < N; i++) m->w[g]->data[i] = (ag_real)(10 * g + i);
}

static void test_members_are_parameters(void) {
    model m;
    make(&m);
    CHECK(m.ps.count == G + 2, "%d parameters", m.ps.count);
    char want[32];
    for (int g = 0; g < G; g++) {
        snprintf(want, sizeof want, "enc.unit%d.w", g);
        CHECK(ag_params_find(&m.ps, want) == m.w[g], "no parameter '%s'", want);
        CHECK(m.w[g]->ndim == 2 && m.w[g]->shape[0] == ROWS && m.w[g]->shape[1] == COLS && m.w[g]->size == N);
        CHECK(m.w[g]->data == m.w[0]->data + g * N && m.w[g]->grad == m.w[0]->grad + g * N,
              "member %d is not plane %d of the block", g, g);
    }
    CHECK(ag_params_numel(&m.ps) == 3 + G * N + 5);
    ag_params_free(&m.ps);
}

/* loss = sum(view * x): d/d w[g][i] = x[g, i]; a second backward adds. */
static void run_view(model *m, ag_device dev, ag_real *grads /* [G * N] */) {
    ag_real xs[G * N];
    for (int i = 0; i < G * N; i++) xs[i] = (ag_real)(i % 7) - 3;
    ag_params_zero_grad(&m->ps);
    for (int rep = 0; rep < 2; rep++) {
        ag_tensor *view = ag_param_stack_view(m->w[0]);
        CHECK(view->ndim == 3 && view->shape[0] == G && view->shape[1] == ROWS && view->shape[2] == COLS &&
                  view->device == dev,
              "the view is not [%d,%d,%d] on the members' device", G, ROWS, COLS);
        ag_tensor *x = ag_to(ag_tensor_from(xs, 3, (int[]){G, ROWS, COLS}), dev);
        ag_real loss = ag_item(ag_sum(ag_mul(view, x)));
        ag_real want = 0;
        for (int i = 0; i < G * N; i++) want += (ag_real)(10 * (i / N) + i % N) * xs[i];
        CHECK(loss == want, "sum(view * x) = %g, want %g: the view does not read the members", (double)loss, (double)want);
        ag_backward(ag_sum(ag_mul(view, x)));
        ag_step_end();
    }
    for (int g = 0; g < G; g++) ag_tensor_read(m->w[g], grads + g * N); /* values: unchanged */
    for (int i = 0; i < G * N; i++)
        CHECK(grads[i] == (ag_real)(10 * (i / N) + i % N), "member values changed at %d", i);
    /* the members' gradients, read as tensors of their own */
    for (int g = 0; g < G; g++) {
        ag_tensor grad_of = *m->w[g];
        grad_of.data = m->w[g]->grad;
        ag_tensor_read(&grad_of, grads + g * N);
    }
    for (int i = 0; i < G * N; i++)
        CHECK(grads[i] == 2 * xs[i], "%s: d/dw[%d][%d] = %g after two backwards, want %g", ag_device_name(dev), i / N,
              i % N, (double)grads[i], (double)(2 * xs[i]));
}

static void test_view_gradient_lands_in_members(void) {
    model m;
    make(&m);
    ag_real g[G * N];
    run_view(&m, AG_CPU, g);
    EXPECT_FATAL(ag_param_stack_view(m.w[1]), "ag_param_stack_view", "'enc.unit1.w'", "not the first member");
    EXPECT_FATAL(ag_param_stack_view(m.before), "ag_param_stack_view", "'before'");
    ag_tensor *stale = ag_param_stack_view(m.w[0]);
    ag_step_end();
    EXPECT_FATAL(ag_exp(stale), "ag_exp");
    ag_step_end();
    ag_params_free(&m.ps);
}

static void test_bad_stacks(void) {
    ag_params ps = {0};
    ag_tensor *w[65];
    EXPECT_FATAL(ag_param_stack(&ps, "w%d", 1, 1, (int[]){2}, w), "ag_param_stack", "1 members", "2 to 64");
    EXPECT_FATAL(ag_param_stack(&ps, "w%d", 65, 1, (int[]){2}, w), "ag_param_stack", "65 members");
    /* names only: no memory, so no block (and no view) */
    ps.shapes_only = true;
    ag_param_stack(&ps, "s%d", 2, 1, (int[]){4}, w);
    CHECK(ps.count == 2 && !w[0]->data && !w[1]->data && w[0]->stack == 0);
    ag_params_free(&ps);
}

/* The block through a checkpoint: each member its own entry, loaded back
 * into the block. */
static void test_checkpoint_round_trip(void) {
    model m;
    make(&m);
    char path[] = "/tmp/ag_param_stack_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    CHECK(ag_checkpoint_save(path, &m.ps, NULL, NULL, NULL) == AG_OK, "%s", ag_errmsg());
    for (int g = 0; g < G; g++)
        for (int i = 0; i < N; i++) m.w[g]->data[i] = -1;
    CHECK(ag_checkpoint_load(path, &m.ps, NULL, NULL, NULL) == AG_OK, "%s", ag_errmsg());
    ag_tensor *view = ag_param_stack_view(m.w[0]);
    for (int i = 0; i < G * N; i++)
        CHECK(view->data[i] == (ag_real)(10 * (i / N) + i % N), "loaded value %d is %g", i, (double)view->data[i]);
    ag_step_end();
    remove(path);
    ag_params_free(&m.ps);
}

/* On the device: moved as one block, the same gradients, and back. */
static int test_on_device(void) {
    char why[256];
    if (!ag_cuda_available(why, sizeof why)) {
        printf("test_param_stack: no GPU (%s): the device part skipped\n", why);
        return 0;
    }
    model m;
    make(&m);
    ag_params_to(&m.ps, AG_CUDA);
    for (int g = 0; g < G; g++)
        CHECK(m.w[g]->device == AG_CUDA && m.w[g]->data == m.w[0]->data + g * N && m.w[g]->grad == m.w[0]->grad + g * N,
              "member %d left the block on the device", g);
    CHECK(m.before->device == AG_CUDA && m.after->device == AG_CUDA);
    ag_set_device(AG_CUDA);
    ag_real g[G * N];
    run_view(&m, AG_CUDA, g);
    ag_set_device(AG_CPU);
    ag_params_to(&m.ps, AG_CPU);
    for (int k = 0; k < G; k++)
        for (int i = 0; i < N; i++)
            CHECK(m.w[k]->data == m.w[0]->data + k * N && m.w[k]->data[i] == (ag_real)(10 * k + i) &&
                      m.w[k]->grad[i] == g[k * N + i],
                  "member %d element %d back on the CPU", k, i);
    ag_params_free(&m.ps);
    return 1;
}

int main(void) {
    test_members_are_parameters();
    test_view_gradient_lands_in_members();
    test_bad_stacks();
    test_checkpoint_round_trip();
    test_on_device();
    ag_shutdown();
    return check_summary("test_param_stack");
}
