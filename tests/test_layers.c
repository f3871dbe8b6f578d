/* test_layers.c - the shared layers of models/layers.c in f64: a gradient
 * check of each against central differences (through its inputs and
 * parameters), on batches with padding, a length-1 example and an empty
 * one, the values those edge cases must give, and the errors misuse gets. */
#include "check.h"
#include "fatal.h"
#include "../models/models.h"

#include <string.h>

enum { B = 3, N = 4, D = 3 };

/* Lengths: full, length 1, partial; and with an empty example. */
static const int32_t lengths_padded[B] = {4, 1, 2};
static const int32_t lengths_empty[B] = {3, 0, 2};

typedef struct {
    ag_params ps; /* persistent: the checks end steps (ag_step_end) */
    ag_tensor *x, *w1, *b1, *w2, *b2;
    const int32_t *lengths;
    ag_act act;
} layer_ctx;

static ag_tensor *max_over_time_fn(void *p) {
    layer_ctx *c = p;
    return ag_max_over_time(c->x, c->lengths);
}

static ag_tensor *source2token_fn(void *p) {
    layer_ctx *c = p;
    return ag_source2token(c->x, c->lengths, c->w1, c->b1, c->w2, c->b2, c->act);
}

static ag_tensor *zero_padding_fn(void *p) {
    layer_ctx *c = p;
    return ag_zero_padding(c->x, c->lengths);
}

static ag_tensor *activate_fn(void *p) {
    layer_ctx *c = p;
    return ag_activate(c->x, c->act);
}

static void gradcheck(const char *label, ag_forward_fn f, void *ctx, ag_tensor **wrt, int n) {
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result r = ag_gradcheck(f, ctx, wrt, n, &o);
    CHECK(r.ok, "%s: input %d element %lld analytic %.12g numeric %.12g", label, r.worst_input,
          (long long)r.worst_index, r.analytic, r.numeric);
    ag_step_end();
}

static void setup(layer_ctx *c, ag_rng *r, const int32_t *lengths, ag_act act) {
    memset(c, 0, sizeof *c);
    c->x = ag_param_uniform(&c->ps, "x", 3, (int[]){B, N, D}, 1, r);
    c->w1 = ag_param_uniform(&c->ps, "w1", 2, (int[]){D, D}, 0.8, r);
    c->b1 = ag_param_uniform(&c->ps, "b1", 1, (int[]){D}, 0.3, r);
    c->w2 = ag_param_uniform(&c->ps, "w2", 2, (int[]){D, D}, 0.8, r);
    c->b2 = ag_param_uniform(&c->ps, "b2", 1, (int[]){D}, 0.3, r);
    c->lengths = lengths;
    c->act = act;
}

static void free_ctx(layer_ctx *c) { ag_params_free(&c->ps); }

/* Max over valid t: the gradient goes to the argmax inside the length
 * only; an empty example pools to 0 and gets no gradient. */
static void test_max_over_time(ag_rng *r) {
    const int32_t *cases[2] = {lengths_padded, lengths_empty};
    for (int k = 0; k < 2; k++) {
        layer_ctx c;
        setup(&c, r, cases[k], AG_ACT_NONE);
        gradcheck(k ? "max_over_time, empty example" : "max_over_time, padding", max_over_time_fn, &c, &c.x, 1);
        ag_tensor *m = ag_max_over_time(c.x, c.lengths);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < D; j++) {
                double want = c.lengths[b] > 0 ? -INFINITY : 0;
                for (int t = 0; t < c.lengths[b]; t++) want = fmax(want, c.x->data[(b * N + t) * D + j]);
                CHECK(m->data[b * D + j] == want, "max[%d,%d] = %g, want %g", b, j, m->data[b * D + j], want);
            }
        ag_step_end();
        free_ctx(&c);
    }
}

/* Source2token pooling through x and all four parameters, with each
 * smooth activation; an empty example pools to 0. */
static void test_source2token(ag_rng *r) {
    const ag_act acts[] = {AG_ACT_ELU, AG_ACT_TANH, AG_ACT_SIGMOID, AG_ACT_NONE};
    for (int a = 0; a < 4; a++)
        for (int k = 0; k < 2; k++) {
            layer_ctx c;
            setup(&c, r, k ? lengths_empty : lengths_padded, acts[a]);
            char label[64];
            snprintf(label, sizeof label, "source2token act %d%s", (int)acts[a], k ? ", empty example" : "");
            gradcheck(label, source2token_fn, &c, (ag_tensor *[]){c.x, c.w1, c.b1, c.w2, c.b2}, 5);
            if (k) {
                ag_tensor *s = ag_source2token(c.x, c.lengths, c.w1, c.b1, c.w2, c.b2, c.act);
                for (int j = 0; j < D; j++) CHECK(s->data[1 * D + j] == 0, "empty example pooled to %g", s->data[D + j]);
                ag_step_end();
            }
            free_ctx(&c);
        }
}

/* A length-1 example pools to its one row, whatever the scores. */
static void test_length_one(ag_rng *r) {
    layer_ctx c;
    setup(&c, r, lengths_padded, AG_ACT_TANH);
    ag_tensor *s = ag_source2token(c.x, c.lengths, c.w1, c.b1, c.w2, c.b2, c.act);
    ag_tensor *m = ag_max_over_time(c.x, c.lengths);
    for (int j = 0; j < D; j++) {
        CHECK_NEAR(s->data[1 * D + j], c.x->data[(1 * N) * D + j], 1e-15, 0);
        CHECK(m->data[1 * D + j] == c.x->data[(1 * N) * D + j], "max of one row");
    }
    ag_step_end();
    free_ctx(&c);
}

static void test_padding_and_activations(ag_rng *r) {
    layer_ctx c;
    setup(&c, r, lengths_empty, AG_ACT_NONE);
    gradcheck("zero_padding", zero_padding_fn, &c, &c.x, 1);
    const ag_act acts[] = {AG_ACT_ELU, AG_ACT_TANH, AG_ACT_SIGMOID, AG_ACT_RELU, AG_ACT_NONE};
    for (int a = 0; a < 5; a++) {
        c.act = acts[a];
        char label[32];
        snprintf(label, sizeof label, "activate %d", (int)acts[a]);
        gradcheck(label, activate_fn, &c, &c.x, 1); /* x in (-1, 1): ReLU's kink at 0 is not hit */
    }
    free_ctx(&c);
}

/* ag_zero_padding on [B, N] and [B, N, h, d]: the mask broadcasts over
 * every trailing dim. */
static ag_tensor *zero_padding_4d_fn(void *p) { return ag_zero_padding((ag_tensor *)p, lengths_empty); }

static void test_zero_padding_ranks(ag_rng *r) {
    ag_params ps = {0};
    ag_tensor *x2 = ag_param_uniform(&ps, "x2", 2, (int[]){B, N}, 1, r);
    ag_tensor *x4 = ag_param_uniform(&ps, "x4", 4, (int[]){B, N, 2, 3}, 1, r);
    ag_tensor *y2 = ag_zero_padding(x2, lengths_padded), *y4 = ag_zero_padding(x4, lengths_empty);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < N; t++) {
            CHECK(y2->data[b * N + t] == (t < lengths_padded[b] ? x2->data[b * N + t] : 0), "2-D [%d,%d]", b, t);
            for (int k = 0; k < 6; k++) {
                int64_t i = (int64_t)(b * N + t) * 6 + k;
                CHECK(y4->data[i] == (t < lengths_empty[b] ? x4->data[i] : 0), "4-D [%d,%d,%d]", b, t, k);
            }
        }
    ag_step_end();
    gradcheck("zero_padding 4-D", zero_padding_4d_fn, x4, &x4, 1);
    ag_params_free(&ps);
}

/* Misuse stops with a message naming the layer, the shape or the length. */
static void test_misuse(ag_rng *r) {
    ag_params ps = {0};
    ag_tensor *x = ag_param_uniform(&ps, "x", 3, (int[]){B, N, D}, 1, r);
    ag_tensor *flat = ag_param_uniform(&ps, "flat", 2, (int[]){B, N}, 1, r);
    ag_tensor *one = ag_param_uniform(&ps, "one", 1, (int[]){B}, 1, r);
    const int32_t negative[B] = {4, -1, 2}, too_long[B] = {4, 5, 2};
    EXPECT_FATAL(ag_max_over_time(x, negative), "ag_max_over_time", "lengths[1] = -1", "[0, 4]");
    EXPECT_FATAL(ag_max_over_time(x, too_long), "ag_max_over_time", "lengths[1] = 5");
    EXPECT_FATAL(ag_max_over_time(flat, lengths_padded), "ag_max_over_time", "[3,4]", "[B, N, d]");
    EXPECT_FATAL(ag_zero_padding(x, too_long), "ag_valid_mask", "lengths[1] = 5");
    EXPECT_FATAL(ag_zero_padding(one, lengths_padded), "ag_zero_padding", "[3]");
    EXPECT_FATAL(ag_valid_mask(negative, B, N), "ag_valid_mask", "lengths[1] = -1");
    ag_step_end();
    ag_params_free(&ps);
}

int main(void) {
    ag_rng r;
    ag_rng_seed(&r, 5);
    test_max_over_time(&r);
    test_source2token(&r);
    test_length_one(&r);
    test_padding_and_activations(&r);
    test_zero_padding_ranks(&r);
    test_misuse(&r);
    ag_shutdown();
    return check_summary("test_layers");
}
