/* test_lifetime.c - the three misuses that used to give silent wrong answers,
 * each refused now with a message that says what to do:
 *   - a tensor of a finished step (after ag_step_end) fed to an op, to
 *     ag_backward or read with ag_item;
 *   - a second ag_backward over the same tape (unless the first one kept it
 *     with ag_backward_retain);
 *   - a mask whose broadcast against the scores is ambiguous ([B,1,N]
 *     against [B,h,N,N] with B == h).
 * Each case was checked to fail on the code before the checks existed. */
#include "check.h"
#include "fatal.h"
#include "attngrad.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static ag_tensor *ramp(int ndim, const int *shape, double scale) {
    ag_tensor *t = ag_tensor_new(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(scale * sin(0.7 * (double)i + 0.3));
    return t;
}

/* loss = sum(tanh(x W)) */
static ag_tensor *small_loss(ag_tensor *w) {
    ag_tensor *x = ramp(2, (int[]){4, 3}, 1.0);
    return ag_sum(ag_tanh(ag_matmul(x, w)));
}

static void test_stale_tensor_refused(void) {
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){3, 2});
    for (int i = 0; i < 6; i++) w->data[i] = (ag_real)(0.1 * (i + 1));

    /* a late backward: the loss's step has ended */
    ag_tensor *loss = small_loss(w);
    ag_step_end();
    ag_params_zero_grad(&ps);
    EXPECT_FATAL_AT(ag_backward(loss), "backward", "ag_sum", "step", "ag_step_end");
    CHECK(w->grad[0] == 0, "a refused backward wrote a gradient: %g", (double)w->grad[0]);
    ag_step_end();

    /* an old activation fed into the next step, before and after that step
     * has allocated over it */
    ag_tensor *h = ag_tanh(ag_matmul(ramp(2, (int[]){4, 3}, 1.0), w));
    ag_step_end();
    EXPECT_FATAL_AT(ag_add(h, ag_scalar(1)), "ag_add", "ag_tanh", "finished step");
    ag_step_end();
    ag_tensor *h2 = ag_tanh(ag_matmul(ramp(2, (int[]){4, 3}, 1.0), w));
    ag_step_end();
    for (int i = 0; i < 3; i++) (void)small_loss(w); /* the same kind of step, allocating over h2 */
    EXPECT_FATAL_AT(ag_mul(h2, ag_scalar(2)), "ag_mul");
    ag_step_end();

    /* reading a value of a finished step: ag_item refuses it at the caller's
     * line, before and after the arena has handed its memory out again */
    ag_tensor *l1 = small_loss(w);
    ag_real alive = ag_item(l1);
    CHECK(isfinite(alive), "ag_item of a live tensor");
    ag_step_end();
    char at[64];
    snprintf(at, sizeof at, "%s:%d", __FILE__, __LINE__ + 1);
    EXPECT_FATAL_AT((void)ag_item(l1), "ag_item", "ag_sum", "finished step", at);
    ag_step_end();
    ag_tensor *l2 = small_loss(w);
    ag_step_end();
    for (int i = 0; i < 3; i++) (void)small_loss(w);
    EXPECT_FATAL_AT((void)ag_item(l2), "ag_item");
    ag_step_end();

    /* constants (no op recorded) and every op family */
    ag_tensor *c = ag_tensor_fill(1, 2, (int[]){4, 2});
    ag_step_end();
    EXPECT_FATAL_AT(ag_exp(c), "ag_exp", "ag_tensor_fill");
    EXPECT_FATAL_AT(ag_matmul(c, w), "ag_matmul");
    EXPECT_FATAL_AT(ag_linear(ag_tensor_new(2, (int[]){4, 3}), w, c), "ag_linear");
    EXPECT_FATAL_AT(ag_softmax(c), "ag_softmax");
    EXPECT_FATAL_AT(ag_layernorm(c, NULL, NULL, 1e-5), "ag_layernorm");
    EXPECT_FATAL_AT(ag_reshape(c, 1, (int[]){8}), "ag_reshape");
    EXPECT_FATAL_AT(ag_sum(c), "ag_sum");
    EXPECT_FATAL_AT(ag_cross_entropy(c, (int32_t[]){0, 1, 0, 1}, -1), "ag_cross_entropy");
    EXPECT_FATAL_AT(ag_concat((ag_tensor *[]){ag_tensor_new(2, (int[]){4, 2}), c}, 2, 0), "ag_concat");
    ag_st_writer wr = {0}; /* nor written to a checkpoint */
    EXPECT_FATAL(ag_st_add_tensor(&wr, "c", c), "ag_st_add_tensor", "step");
    ag_st_writer_free(&wr);
    ag_step_end();

    /* parameters and tensors of the current step stay usable across steps */
    for (int step = 0; step < 3; step++) {
        ag_tensor *l = small_loss(w);
        ag_backward(l);
        ag_step_end();
    }
    CHECK(isfinite(w->grad[0]));
    ag_params_free(&ps);
}

/* What the stale-tensor bug used to do: a correct first step, then the old
 * loss's backward after ag_step_end gave a wrong gradient silently. */
static void test_backward_twice_refused(void) {
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){3, 2});
    for (int i = 0; i < 6; i++) w->data[i] = (ag_real)(0.1 * (i + 1));

    ag_tensor *loss = small_loss(w);
    ag_backward(loss);
    double g = w->grad[1];
    EXPECT_FATAL_AT(ag_backward(loss), "backward", "second", "ag_backward_retain");
    CHECK_NEAR(w->grad[1], g, 0, 0); /* refused before it added anything */
    ag_step_end();

    /* retained: the second backward is allowed, and adds (leaves accumulate) */
    ag_params_zero_grad(&ps);
    loss = small_loss(w);
    ag_backward_retain(loss);
    CHECK_NEAR(w->grad[1], g, 1e-12, 1e-12);
    ag_backward(loss);
    CHECK_NEAR(w->grad[1], 2 * g, 1e-12, 1e-12);
    EXPECT_FATAL_AT(ag_backward(loss), "backward", "second");
    ag_step_end();

    /* two losses sharing a part of the graph: the second sweep reaches the
     * consumed part and is refused; disjoint tapes in one step are fine */
    ag_params_zero_grad(&ps);
    ag_tensor *h = ag_tanh(ag_matmul(ramp(2, (int[]){4, 3}, 1.0), w));
    ag_tensor *l1 = ag_sum(h), *l2 = ag_mean(ag_square(h));
    ag_backward(l1);
    EXPECT_FATAL_AT(ag_backward(l2), "backward", "ag_tanh");
    ag_step_end();
    ag_tensor *a = small_loss(w), *b = small_loss(w);
    ag_backward(a);
    ag_backward(b);
    ag_step_end();

    /* seeded backward has the same rule */
    ag_tensor *y = ag_tanh(ag_matmul(ramp(2, (int[]){4, 3}, 1.0), w));
    ag_real seed[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ag_backward_seeded(y, seed);
    EXPECT_FATAL_AT(ag_backward_seeded(y, seed), "backward", "second");
    ag_step_end();

    /* a rewound region forgets its nodes: mark, backward, rewind, again */
    ag_mark_t m = ag_mark();
    for (int i = 0; i < 3; i++) {
        ag_backward(small_loss(w));
        ag_rewind(m);
    }
    ag_step_end();
    ag_params_free(&ps);
}

static void test_ambiguous_mask_refused(void) {
    int B = 2, h = 2, N = 4;
    ag_tensor *scores = ramp(4, (int[]){B, h, N, N}, 2.0);
    const int32_t len[2] = {4, 1};
    /* [B,1,N] against [B,h,N,N]: right-aligned, B would pair with the heads */
    ag_tensor *pad3 = ag_mask_padding(len, B, N, 3, false);
    EXPECT_FATAL_AT(ag_masked_softmax(scores, pad3, 1.0), "ag_masked_softmax", "[2,1,4]", "[2,2,4,4]", "[2,1,1,4]",
                    "[1,2,1,4]");
    ag_tensor *q = ramp(4, (int[]){B, h, N, 3}, 1.0);
    EXPECT_FATAL_AT(ag_attention(q, q, q, pad3, 0.5, NULL), "ag_attention", "[2,1,1,4]");
    /* the 4-D mask is what to pass; the padded keys then get no weight */
    ag_tensor *p = ag_masked_softmax(scores, ag_mask_padding(len, B, N, 4, false), 1.0);
    for (int hh = 0; hh < h; hh++)
        for (int r = 0; r < N; r++)
            for (int k = 1; k < N; k++) CHECK(p->data[(((int64_t)1 * h + hh) * N + r) * N + k] == 0);
    /* unambiguous lower-rank masks still broadcast: [N,N], [h,N,N] when B != h */
    (void)ag_masked_softmax(scores, ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL}, N), 1.0);
    ag_tensor *s3 = ramp(4, (int[]){3, h, N, N}, 1.0);
    const ag_mask_spec specs[2] = {{.dir = AG_MASK_PAST_INCL}, {.dir = AG_MASK_FUTURE_INCL}};
    (void)ag_masked_softmax(s3, ag_mask_heads(specs, h, N), 1.0);
    /* ... and when B == h, the per-head mask must say so: [1,h,N,N] */
    EXPECT_FATAL_AT(ag_masked_softmax(scores, ag_mask_heads(specs, h, N), 1.0), "ag_masked_softmax", "[1,2,4,4]");
    (void)ag_masked_softmax(scores, ag_reshape(ag_mask_heads(specs, h, N), 4, (int[]){1, h, N, N}), 1.0);
    ag_step_end();
}

int main(void) {
    test_stale_tensor_refused();
    test_backward_twice_refused();
    test_ambiguous_mask_refused();
    ag_shutdown();
    return check_summary("test_lifetime");
}
