/* test_shape_errors.c - shape ops, losses and dropout beyond the gradient
 * checks: error messages of misuse, values against hand-computed numbers,
 * dropout statistics, views, and a steady state with no heap allocation. */
#include "attngrad.h"
#include "check.h"
#include "fatal.h"
#include "../ops/additive.h" /* MPSAN's ops for G units at once, internal */
#include "../ops/dropout.h"
#include "../ops/mtsa.h" /* MTSA's heads in one op, internal */
#include "../ops/softmax.h"

#include <setjmp.h>
#include <string.h>

/* ---- catching fatal errors ---- */

#define SHAPE(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__}

static ag_tensor *iota(int ndim, const int *shape) { /* 0, 1, 2, ... */
    ag_tensor *t = ag_tensor_new(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)i;
    return t;
}

static ag_tensor *with_grad(ag_tensor *t) {
    t->requires_grad = true;
    return t;
}

static void test_errors(void) {
    ag_fatal_handler old = ag_set_fatal_handler(catch_fatal);
    ag_tensor *x = ag_tensor_new(SHAPE(2, 3, 4));

    EXPECT_FATAL(ag_permute(x, (int[]){0, 0, 1}), "ag_permute", "[0,0,1]", "[2,3,4]", "test_shape_errors.c");
    EXPECT_FATAL(ag_permute(x, (int[]){0, 1, 3}), "ag_permute", "[0,1,3]", "[2,3,4]");
    EXPECT_FATAL(ag_permute(x, (int[]){-1, 0, 1}), "ag_permute", "[-1,0,1]");
    EXPECT_FATAL(ag_transpose(x, 0, 3), "ag_transpose", "axis 3", "[2,3,4]");

    ag_tensor *a = ag_tensor_new(SHAPE(2, 3)), *b = ag_tensor_new(SHAPE(2, 4)), *c = ag_tensor_new(SHAPE(2, 3, 1));
    EXPECT_FATAL(ag_lerp(a, a, c), "ag_lerp", "a [2,3]", "w [2,3,1]", "one shape", "test_shape_errors.c");
    EXPECT_FATAL(ag_lerp(a, b, a), "ag_lerp", "b [2,4]");
    EXPECT_FATAL(ag_concat((ag_tensor *[]){a, b}, 2, 0), "ag_concat", "input 1", "[2,4]", "[2,3]", "axis 0");
    EXPECT_FATAL(ag_softmax_mix(a, (ag_tensor *[]){a, b}, 2), "ag_softmax_mix", "source 1", "[2,4]", "[2,3]");
    EXPECT_FATAL(ag_softmax_mix(b, (ag_tensor *[]){a, a}, 2), "ag_softmax_mix", "logits [2,4]", "2 sources of [2,3]",
                 "[..., 6]");
    EXPECT_FATAL(ag_softmax_mix_len(ag_tensor_new(SHAPE(2, 6)), (ag_tensor *[]){a, a}, 2, (int32_t[]){1, 1}),
                 "ag_softmax_mix_len", "[B, N, d]", "[2,3]");
    ag_tensor *s3 = ag_tensor_new(SHAPE(2, 3, 4));
    EXPECT_FATAL(ag_softmax_mix_len(ag_tensor_new(SHAPE(2, 3, 8)), (ag_tensor *[]){s3, s3}, 2, (int32_t[]){3, 4}),
                 "ag_softmax_mix_len", "lengths[1] = 4", "[0, 3]", "[2,3,4]");
    EXPECT_FATAL(ag_softmax_mix_ref(ag_tensor_new(SHAPE(2, 3, 8)), (ag_tensor *[]){s3, s3}, 2, NULL),
                 "ag_softmax_mix_ref", "logits [2,3,8]", "the last one the reference", "[..., 4]");
    EXPECT_FATAL(ag_softmax_mix_ref(s3, (ag_tensor *[]){s3}, 1, NULL), "ag_softmax_mix_ref", "1 sources", "2 to 8");
    /* the planes of a stack as sources: a plane's shape must be the reference's */
    EXPECT_FATAL(ag__softmax_mix_ref_planes(ag_tensor_new(SHAPE(2, 3, 16)), ag_tensor_new(SHAPE(4, 2, 3, 5)), s3, NULL),
                 "ag__softmax_mix_ref_planes", "stack [4,2,3,5]", "reference [2,3,4]");
    EXPECT_FATAL(ag__softmax_mix_ref_planes(ag_tensor_new(SHAPE(2, 3, 12)), ag_tensor_new(SHAPE(4, 2, 3, 4)), s3, NULL),
                 "ag__softmax_mix_ref_planes", "logits [2,3,12]", "[..., 16]");
    EXPECT_FATAL(ag__additive_self_attention_planes(ag_tensor_new(SHAPE(4, 2, 3, 5)), ag_tensor_new(SHAPE(4, 5)),
                                                    ag_tensor_new(SHAPE(3, 5)), ag_tensor_new(SHAPE(4)), NULL, 0, 5.0,
                                                    false, NULL),
                 "ag__additive_self_attention_planes", "v [3,5]", "u and v [G,d], bias [G]");
    /* MTSA's G heads: r [G,B,N,N], s and v [G,B,N,dh], masks [G,N,N] or [N,N] */
    ag_tensor *mr = ag_tensor_new(SHAPE(2, 3, 4, 4)), *ms = ag_tensor_new(SHAPE(2, 3, 4, 5));
    EXPECT_FATAL(ag__mtsa_attention_groups(mr, ms, ms, ag_tensor_new(SHAPE(3, 4, 4)), NULL, AG_MTSA_LOG_SIGMOID),
                 "ag__mtsa_attention_groups", "r [2,3,4,4]", "masks [3,4,4]", "masks [G,N,N], [N,N] or NULL");
    ag_tensor *ms3 = ag_tensor_new(SHAPE(3, 3, 4, 5));
    EXPECT_FATAL(ag__mtsa_attention_groups(mr, ms3, ms3, NULL, NULL, AG_MTSA_LOG_SIGMOID), "ag__mtsa_attention_groups",
                 "r [2,3,4,4], s [3,3,4,5], v [3,3,4,5], masks NULL", "s and v [G,B,N,dh]");
    EXPECT_FATAL(ag__mtsa_attention_groups(ag_tensor_new(SHAPE(3, 4, 4)), ag_tensor_new(SHAPE(3, 4, 5)),
                                           ag_tensor_new(SHAPE(3, 4, 5)), NULL, NULL, AG_MTSA_IDENTITY),
                 "ag__mtsa_attention_groups", "r [3,4,4]", "want r [G,B,N,N]");
    EXPECT_FATAL(ag_concat((ag_tensor *[]){a, a, c}, 3, 1), "ag_concat", "input 2", "[2,3,1]", "[2,3]");
    EXPECT_FATAL(ag_concat((ag_tensor *[]){a}, 0, 0), "ag_concat", "at least one");
    EXPECT_FATAL(ag_concat((ag_tensor *[]){a, b}, 2, 2), "ag_concat", "axis 2", "[2,3]");

    EXPECT_FATAL(ag_slice(x, 1, 2, 4), "ag_slice", "[2, 4)", "axis 1", "[2,3,4]");
    EXPECT_FATAL(ag_slice(x, -1, -1, 2), "ag_slice", "[-1, 2)", "[2,3,4]");
    EXPECT_FATAL(ag_slice(x, 0, 2, 1), "ag_slice", "[2, 1)");
    EXPECT_FATAL(ag_slice(x, 3, 0, 1), "ag_slice", "axis 3");

    EXPECT_FATAL(ag_index_select(a, 1, (int32_t[]){0, 3, 1}, 3), "ag_index_select", "index 3", "position 1",
                 "[0, 3)", "[2,3]");
    EXPECT_FATAL(ag_index_select(a, 0, (int32_t[]){-2}, 1), "ag_index_select", "index -2", "position 0");

    ag_tensor *table = ag_tensor_new(SHAPE(6, 4));
    EXPECT_FATAL(ag_embedding(table, (int32_t[]){0, 1, 2, 6, 0, 0}, 2, (int[]){2, 3}), "ag_embedding", "id 6",
                 "position [1,0]", "[0, 6)", "[6,4]");
    EXPECT_FATAL(ag_embedding(table, (int32_t[]){3, -1}, 1, (int[]){2}), "ag_embedding", "id -1", "position [1]");
    EXPECT_FATAL(ag_embedding(x, (int32_t[]){0}, 1, (int[]){1}), "ag_embedding", "[V, d]", "[2,3,4]");
    EXPECT_FATAL(ag_embedding(table, (int32_t[]){0}, 4, (int[]){1, 1, 1, 1}), "ag_embedding", "4 dims");

    ag_tensor *logits = ag_tensor_new(SHAPE(4, 5));
    EXPECT_FATAL(ag_cross_entropy(logits, (int32_t[]){0, 1, 5, 2}, -1), "ag_cross_entropy", "label 5", "row 2",
                 "[0, 5)", "[4,5]");
    EXPECT_FATAL(ag_cross_entropy(logits, (int32_t[]){0, -1, 1, 2}, -100), "ag_cross_entropy", "label -1",
                 "row 1", "ignore_index -100");
    EXPECT_FATAL(ag_cross_entropy(ag_tensor_new(SHAPE(3, 0)), (int32_t[]){0}, -1), "ag_cross_entropy", "[3,0]");
    ag_tensor *hid = ag_tensor_new(SHAPE(2, 3, 4)), *dec = ag_tensor_new(SHAPE(5, 4));
    EXPECT_FATAL(ag_linear_t_cross_entropy(hid, ag_tensor_new(SHAPE(4, 5)), NULL, (int32_t[]){0, 0, 0, 0, 0, 0}, -1),
                 "ag_linear_t_cross_entropy", "[2,3,4]", "[4,5]", "W[C, in]");
    EXPECT_FATAL(ag_linear_cross_entropy(hid, dec, NULL, (int32_t[]){0, 0, 0, 0, 0, 0}, -1),
                 "ag_linear_cross_entropy", "[2,3,4]", "[5,4]", "W[in, C]");
    EXPECT_FATAL(ag_linear_t_cross_entropy(hid, dec, ag_tensor_new(SHAPE(4)), (int32_t[]){0, 0, 0, 0, 0, 0}, -1),
                 "ag_linear_t_cross_entropy", "bias [4]", "[5,4]");
    EXPECT_FATAL(ag_linear_t_cross_entropy(hid, dec, NULL, (int32_t[]){0, 1, 0, 5, 0, 0}, 0),
                 "ag_linear_t_cross_entropy", "label 5", "row 3", "[0, 5)", "ignore_index 0");

    /* ag_linear: one layer, and G layers W [G, in, out] */
    ag_tensor *w3 = ag_tensor_new(SHAPE(3, 4, 5));
    EXPECT_FATAL(ag_linear(x, ag_tensor_new(SHAPE(5, 5)), NULL), "ag_linear", "x [2,3,4]", "weight [5,5]",
                 "W[in, out] or W[G, in, out] with x[G, ..., in]");
    EXPECT_FATAL(ag_linear(x, w3, NULL), "ag_linear", "x [2,3,4]", "weight [3,4,5]", "x[G, ..., in]");
    /* x[G, ..., in]: G first, so 2 dims at least ([3,4] would be one row a group) */
    EXPECT_FATAL(ag_dense(ag_tensor_new(SHAPE(4)), w3, NULL, AG_ACT_TANH), "ag_dense", "x [4]", "[3,4,5]");
    EXPECT_FATAL(ag_linear(ag_tensor_new(SHAPE(3, 2, 4)), w3, ag_tensor_new(SHAPE(5))), "ag_linear", "bias [5]",
                 "weight [3,4,5]", "want [G, out]");
    EXPECT_FATAL(ag_dense(ag_tensor_new(SHAPE(3, 2, 4)), w3, ag_tensor_new(SHAPE(2, 5)), AG_ACT_ELU), "ag_dense",
                 "bias [2,5]", "weight [3,4,5]", "want [G, out]");
    EXPECT_FATAL(ag_linear(x, ag_tensor_new(SHAPE(4, 5)), ag_tensor_new(SHAPE(2, 5))), "ag_linear", "bias [2,5]",
                 "weight [4,5]", "want [out]");
    EXPECT_FATAL(ag_linear_t(ag_tensor_new(SHAPE(3, 2, 4)), w3, NULL), "ag_linear_t", "x [3,2,4]",
                 "W[out, in] or W[G, out, in]");
    EXPECT_FATAL(ag_linear(x, ag_tensor_new(SHAPE(1, 2, 4, 5)), NULL), "ag_linear", "weight [1,2,4,5]");
    EXPECT_FATAL(ag_mse(a, ag_tensor_new(SHAPE(3, 2))), "ag_mse", "[2,3]", "[3,2]");

    const ag_real ok_t[4 * 5] = {1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0};
    ag_real bad_t[4 * 5];
    memcpy(bad_t, ok_t, sizeof bad_t);
    bad_t[7] = (ag_real)-0.25, bad_t[6] = (ag_real)1.25; /* row 1 sums to 1 but holds a negative entry */
    EXPECT_FATAL(ag_kl_div_soft(logits, bad_t), "ag_kl_div_soft", "target[1, 2] = -0.25", "[4,5]");
    memcpy(bad_t, ok_t, sizeof bad_t);
    bad_t[19] = (ag_real)0.5; /* row 3 sums to 1.5 */
    EXPECT_FATAL(ag_kl_div_soft(logits, bad_t), "ag_kl_div_soft", "row 3 sums to 1.5", "[4,5]");
    bad_t[19] = (ag_real)NAN;
    EXPECT_FATAL(ag_kl_div_soft(logits, bad_t), "ag_kl_div_soft", "target[3, 4] = nan");
    EXPECT_FATAL(ag_kl_div_soft(logits, NULL), "ag_kl_div_soft", "no target", "[4,5]");
    EXPECT_FATAL(ag_kl_div_soft(ag_tensor_new(SHAPE(3, 0)), ok_t), "ag_kl_div_soft", "[3,0]");
    EXPECT_FATAL(ag_kl_div_soft(ag_tensor_new(SHAPE(0, 5)), ok_t), "ag_kl_div_soft", "[0,5]");

    ag_rng rng;
    ag_rng_seed(&rng, 1);
    EXPECT_FATAL(ag_dropout(a, 0.0, true, &rng), "ag_dropout", "keep probability 0 ");
    EXPECT_FATAL(ag_dropout(a, 1.5, true, &rng), "ag_dropout", "1.5");
    EXPECT_FATAL(ag_dropout(a, -0.1, false, &rng), "ag_dropout", "-0.1"); /* checked in eval too */
    EXPECT_FATAL(ag_dropout(a, NAN, true, &rng), "ag_dropout", "nan");
    EXPECT_FATAL(ag_dropout(a, 0.5, true, NULL), "ag_dropout", "rng");
    EXPECT_FATAL(ag__dropout_copies(a, 0, 0.5, true, &rng), "ag__dropout_copies", "0 copies", "1 to 16");
    EXPECT_FATAL(ag__dropout_copies(a, AG_DROPOUT_MAX_COPIES + 1, 0.5, true, &rng), "ag__dropout_copies",
                 "17 copies");
    EXPECT_FATAL(ag__dropout_copies(a, -1, 0.5, false, &rng), "ag__dropout_copies", "-1 copies"); /* eval too */
    EXPECT_FATAL(ag__dropout_copies(a, 4, 0.0, true, &rng), "ag__dropout_copies", "keep probability 0 ");
    EXPECT_FATAL(ag__dropout_copies(a, 4, 1.5, false, &rng), "ag__dropout_copies", "1.5");
    EXPECT_FATAL(ag__dropout_copies(a, 4, 0.5, true, NULL), "ag__dropout_copies", "rng");
    EXPECT_FATAL(ag__dropout_copies_drawn(a, 4, 0.5, true, NULL), "ag__dropout_copies_drawn", "draws");
    EXPECT_FATAL(ag__dropout_copies_drawn(a, 0, 0.5, false, NULL), "ag__dropout_copies_drawn", "0 copies");
    EXPECT_FATAL(ag__dropout_copies(ag_tensor_new(SHAPE(1, 2, 3, 4)), 2, 0.5, true, &rng), "ag__dropout_copies",
                 "4 dims");
    const uint64_t draws[AG_DROPOUT_MAX_COPIES + 1] = {1, 2, 3};
    ag_tensor *stack = ag_tensor_new(SHAPE(3, 4, 5));
    EXPECT_FATAL(ag__dropout_planes(stack, 0.0, true, draws), "ag__dropout_planes", "keep probability 0 ");
    EXPECT_FATAL(ag__dropout_planes(stack, 1.5, false, draws), "ag__dropout_planes", "1.5"); /* eval too */
    EXPECT_FATAL(ag__dropout_planes(ag_tensor_new(SHAPE(AG_DROPOUT_MAX_COPIES + 1, 2)), 0.5, true, draws),
                 "ag__dropout_planes", "17 planes", "1 to 16");
    EXPECT_FATAL(ag__dropout_planes(ag_tensor_new(SHAPE(0, 2)), 0.5, true, draws), "ag__dropout_planes", "0 planes");
    EXPECT_FATAL(ag__dropout_planes(ag_tensor_new(SHAPE(3)), 0.5, true, draws), "ag__dropout_planes", "1 dim");
    EXPECT_FATAL(ag__dropout_planes(stack, 0.5, true, NULL), "ag__dropout_planes", "draws");
    EXPECT_FATAL(ag__dropout_draws(NULL, true, 0.5, (uint64_t[1]){0}, 1), "ag__dropout_draws", "rng");

    ag_set_fatal_handler(old);
    ag_step_end();
}

/* ---- values ---- */

static void test_permute_concat_values(void) {
    ag_tensor *t = ag_transpose(iota(SHAPE(2, 3)), 0, 1);
    const ag_real want_t[] = {0, 3, 1, 4, 2, 5};
    CHECK(t->ndim == 2 && t->shape[0] == 3 && t->shape[1] == 2, "transpose of [2,3] is [3,2]");
    for (int i = 0; i < 6; i++) CHECK(t->data[i] == want_t[i], "transpose[%d] = %g", i, (double)t->data[i]);

    /* out[i,j,k,l] = x[k,j,l,i] for perm (3,1,0,2) of x [2,3,4,5]. */
    ag_tensor *x = iota(SHAPE(2, 3, 4, 5)), *p = ag_permute(x, (int[]){3, 1, 0, 2});
    CHECK(p->shape[0] == 5 && p->shape[1] == 3 && p->shape[2] == 2 && p->shape[3] == 4, "permuted shape [5,3,2,4]");
    int bad = 0;
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++)
                for (int l = 0; l < 4; l++)
                    bad += p->data[((i * 3 + j) * 2 + k) * 4 + l] != x->data[((k * 3 + j) * 4 + l) * 5 + i];
    CHECK(bad == 0, "%d permuted elements misplaced", bad);

    ag_tensor *a = iota(SHAPE(2, 2)), *b = ag_tensor_from((ag_real[]){10, 11}, SHAPE(2, 1));
    ag_tensor *c = ag_concat((ag_tensor *[]){a, b, a}, 3, 1);
    const ag_real want_c[] = {0, 1, 10, 0, 1, 2, 3, 11, 2, 3};
    CHECK(c->shape[0] == 2 && c->shape[1] == 5, "concat shape [2,5]");
    for (int i = 0; i < 10; i++) CHECK(c->data[i] == want_c[i], "concat[%d] = %g", i, (double)c->data[i]);

    /* 20 one-element pieces: a tree of concats, same result. */
    ag_tensor *pieces[20];
    for (int i = 0; i < 20; i++) pieces[i] = with_grad(ag_tensor_fill((ag_real)i, SHAPE(1)));
    ag_tensor *many = ag_concat(pieces, 20, 0);
    CHECK(many->ndim == 1 && many->shape[0] == 20, "20 pieces make [20]");
    for (int i = 0; i < 20; i++) CHECK(many->data[i] == i, "piece %d", i);
    ag_backward(ag_sum(ag_mul(many, many)));
    for (int i = 0; i < 20; i++) CHECK_NEAR(pieces[i]->grad[0], 2.0 * i, 0, 0);
    ag_step_end();
}

static void test_slice_and_gather_values(void) {
    ag_tensor *x = with_grad(iota(SHAPE(4, 3)));
    ag_tensor *rows = ag_slice(x, 0, 1, 3);
    CHECK(rows->data == x->data + 3, "a leading-axis slice is a view");
    CHECK(rows->shape[0] == 2 && rows->shape[1] == 3 && rows->size == 6, "slice shape [2,3]");
    ag_tensor *col = ag_slice(x, 1, 2, 3);
    CHECK(col->shape[0] == 4 && col->shape[1] == 1, "column slice shape [4,1]");
    for (int i = 0; i < 4; i++) CHECK(col->data[i] == 3 * i + 2, "column slice [%d]", i);
    ag_tensor *empty = ag_slice(x, 1, 1, 1);
    CHECK(empty->size == 0 && empty->shape[1] == 0, "an empty slice");

    /* Repeated indices: their gradients add up. */
    ag_tensor *sel = ag_index_select(x, 0, (int32_t[]){2, 0, 2, 2}, 4);
    CHECK(sel->shape[0] == 4 && sel->data[0] == 6 && sel->data[3] == 0 && sel->data[11] == 8,
          "selected rows 2, 0, 2, 2");
    ag_backward(ag_sum(sel));
    const ag_real want[] = {1, 0, 3, 0};
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 3; k++) CHECK(x->grad[r * 3 + k] == want[r], "row %d: %g", r, (double)x->grad[r * 3 + k]);
    ag_step_end();

    ag_tensor *table = with_grad(iota(SHAPE(5, 2)));
    int32_t ids[] = {1, 4, 1, 1, 0, 3};
    ag_tensor *e = ag_embedding(table, ids, 2, (int[]){2, 3});
    ids[0] = 2; /* the op copied the ids: changing them now must not matter */
    CHECK(e->ndim == 3 && e->shape[0] == 2 && e->shape[1] == 3 && e->shape[2] == 2, "embedding shape [2,3,2]");
    CHECK(e->data[2] == 8 && e->data[3] == 9 && e->data[10] == 6, "embedded rows");
    ag_backward(ag_sum(e));
    const ag_real counts[] = {1, 3, 0, 1, 1};
    for (int v = 0; v < 5; v++)
        CHECK(table->grad[2 * v] == counts[v] && table->grad[2 * v + 1] == counts[v], "row %d used %g times", v,
              (double)counts[v]);
    ag_step_end();
}

static void test_cross_entropy_values(void) {
    ag_tensor *z = with_grad(ag_tensor_from((ag_real[]){1, 2, 3, 1, 1, 1}, SHAPE(2, 3)));
    ag_tensor *loss = ag_cross_entropy(z, (int32_t[]){2, 0}, -1);
    CHECK(loss->ndim == 0 && loss->size == 1, "a 0-dim loss");
    /* row 0: log(e + e^2 + e^3) - 3 = log(1 + e^-1 + e^-2); row 1: log 3 */
    CHECK_NEAR(ag_item(loss), 0.753109126556245, 1e-15, 1e-14);
    ag_backward_retain(loss);
    const double p0[] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
    for (int c = 0; c < 3; c++) {
        CHECK_NEAR(z->grad[c], (p0[c] - (c == 2)) / 2, 1e-15, 1e-14);
        CHECK_NEAR(z->grad[3 + c], (1.0 / 3 - (c == 0)) / 2, 1e-15, 1e-14);
    }
    ag_step_end();

    /* |z| ~ 1e4: finite, and exact. */
    ag_tensor *big = with_grad(ag_tensor_from((ag_real[]){1e4, 1e4 - 1, 1e4 - 2, -1e4, 1e4, -1e4}, SHAPE(2, 3)));
    ag_tensor *l1 = ag_cross_entropy(big, (int32_t[]){0, 99}, 99); /* row 1 ignored */
    CHECK_NEAR(ag_item(l1), 0.4076059644443803, 1e-15, 1e-14);
    ag_tensor *l2 = ag_cross_entropy(big, (int32_t[]){-1, 0}, -1); /* only row 1: label on -1e4 */
    CHECK_NEAR(ag_item(l2), 2e4, 0, 1e-15);
    ag_backward(l2);
    const ag_real want_g[] = {0, 0, 0, -1, 1, 0};
    for (int i = 0; i < 6; i++) CHECK(big->grad[i] == want_g[i], "grad[%d] = %g", i, (double)big->grad[i]);
    ag_step_end();

    /* Ignored rows: left out of the mean, and get exactly zero gradient. */
    ag_tensor *z2 = with_grad(ag_tensor_from((ag_real[]){1, 2, 3, 5, -5, 0, 1, 1, 1}, SHAPE(3, 3)));
    ag_tensor *l3 = ag_cross_entropy(z2, (int32_t[]){2, -1, 0}, -1);
    CHECK_NEAR(ag_item(l3), 0.753109126556245, 1e-15, 1e-14);
    ag_backward(l3);
    for (int c = 0; c < 3; c++) CHECK(z2->grad[3 + c] == 0, "ignored row: zero gradient at %d", c);
    ag_step_end();

    /* Every row ignored: 0 and a zero gradient, not NaN. */
    ag_tensor *z3 = with_grad(ag_tensor_from((ag_real[]){1, 2, 3, 4}, SHAPE(2, 2)));
    ag_tensor *l4 = ag_cross_entropy(z3, (int32_t[]){-1, -1}, -1);
    CHECK(ag_item(l4) == 0, "loss %g", (double)ag_item(l4));
    ag_backward(l4);
    CHECK(z3->grad != NULL, "a zero gradient, allocated");
    for (int i = 0; i < 4; i++) CHECK(z3->grad && z3->grad[i] == 0, "grad[%d] is zero", i);
    ag_step_end();

    /* Without recording the value is the same and nothing is taped. */
    bool was = ag_set_grad_enabled(false);
    ag_tensor *z4 = with_grad(ag_tensor_from((ag_real[]){1, 2, 3, 1, 1, 1}, SHAPE(2, 3)));
    ag_tensor *l5 = ag_cross_entropy(z4, (int32_t[]){2, 0}, -1);
    CHECK_NEAR(ag_item(l5), 0.753109126556245, 1e-15, 1e-14);
    CHECK(l5->node == NULL && !l5->requires_grad, "no tape node under no-grad");
    ag_set_grad_enabled(was);
    ag_step_end();
}

/* The fused classifier on x = the first rows of I, so its logits are rows
 * of W: the same numbers as test_cross_entropy_values. */
static void test_linear_cross_entropy_values(void) {
    ag_tensor *x = ag_tensor_from((ag_real[]){1, 0, 0, 0, 1, 0}, SHAPE(2, 3));
    ag_tensor *w = with_grad(ag_tensor_from((ag_real[]){1, 2, 3, 1, 1, 1, 7, 8, 9}, SHAPE(3, 3)));
    ag_tensor *loss = ag_linear_cross_entropy(x, w, NULL, (int32_t[]){2, 0}, -1);
    CHECK_NEAR(ag_item(loss), 0.753109126556245, 1e-15, 1e-14);
    ag_backward_retain(loss);
    const double p0[] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
    for (int c = 0; c < 3; c++) {
        CHECK_NEAR(w->grad[c], (p0[c] - (c == 2)) / 2, 1e-15, 1e-14);
        CHECK_NEAR(w->grad[3 + c], (1.0 / 3 - (c == 0)) / 2, 1e-15, 1e-14);
        CHECK(w->grad[6 + c] == 0, "no row of x reads W row 2");
    }
    /* backward again over the retained tape: the saved gradient was not
     * consumed, so W's adds up */
    ag_backward(loss);
    for (int c = 0; c < 3; c++) CHECK_NEAR(w->grad[c], p0[c] - (c == 2), 1e-15, 1e-14);
    ag_step_end();

    /* |z| ~ 1e4, the label on -1e4: the loss is 2e4 exactly and the gradient -1 / +1 / 0. */
    ag_tensor *big = with_grad(ag_tensor_from((ag_real[]){1e4, 1e4 - 1, 1e4 - 2, -1e4, 1e4, -1e4}, SHAPE(2, 3)));
    ag_tensor *xt = with_grad(ag_tensor_from((ag_real[]){1, 0, 0, 1}, SHAPE(2, 2)));
    ag_tensor *l2 = ag_linear_t_cross_entropy(xt, ag_transpose(big, 0, 1), NULL, (int32_t[]){-1, 0}, -1);
    CHECK_NEAR(ag_item(l2), 2e4, 0, 1e-15);
    ag_backward(l2);
    const ag_real want_g[] = {0, 0, 0, -1, 1, 0};
    for (int i = 0; i < 6; i++) CHECK(big->grad[i] == want_g[i], "grad[%d] = %g", i, (double)big->grad[i]);
    CHECK(xt->grad[0] == 0 && xt->grad[1] == 0, "the ignored row of x gets zero gradient");
    ag_step_end();

    /* No recording: the same value, nothing taped. */
    bool was = ag_set_grad_enabled(false);
    x = ag_tensor_from((ag_real[]){1, 0, 0, 0, 1, 0}, SHAPE(2, 3));
    w = with_grad(ag_tensor_from((ag_real[]){1, 2, 3, 1, 1, 1, 7, 8, 9}, SHAPE(3, 3)));
    ag_tensor *l3 = ag_linear_cross_entropy(x, w, NULL, (int32_t[]){2, 0}, -1);
    CHECK_NEAR(ag_item(l3), 0.753109126556245, 1e-15, 1e-14);
    CHECK(l3->node == NULL && !l3->requires_grad, "no tape node under no-grad");
    ag_set_grad_enabled(was);
    ag_step_end();
}

/* KL(t || softmax z): against numbers computed by hand (mpmath, 30 digits),
 * equal to cross-entropy for one-hot targets, zero when t = softmax z. */
static void test_kl_div_soft_values(void) {
    ag_tensor *z = with_grad(ag_tensor_from((ag_real[]){1, 2, 3, 1, 1, 1}, SHAPE(2, 3)));
    const ag_real t[6] = {0, 0.4, 0.6, 1, 0, 0};
    ag_tensor *loss = ag_kl_div_soft(z, t);
    CHECK(loss->ndim == 0 && loss->size == 1, "a 0-dim loss");
    /* row 0: 0.4 (log 0.4 - log p_1) + 0.6 (log 0.6 - log p_2) = 0.13459429743512387; row 1: log 3 */
    CHECK_NEAR(ag_item(loss), 0.61660329305161678, 1e-15, 1e-14);
    ag_backward(loss);
    const double g0[] = {0.045015286585190229, -0.077635764472601174, 0.032620477887410945};
    for (int c = 0; c < 3; c++) {
        CHECK_NEAR(z->grad[c], g0[c], 1e-15, 1e-14);
        CHECK_NEAR(z->grad[3 + c], (1.0 / 3 - (c == 0)) / 2, 1e-15, 1e-14);
    }
    ag_step_end();

    /* one-hot targets: KL = CE (H(t) = 0), and the same gradient */
    ag_tensor *a = with_grad(ag_tensor_from((ag_real[]){0.3, -1, 2, 0.5, 4, -2, 1, 1}, SHAPE(2, 4)));
    ag_tensor *b = with_grad(ag_tensor_from((ag_real[]){0.3, -1, 2, 0.5, 4, -2, 1, 1}, SHAPE(2, 4)));
    ag_tensor *kl = ag_kl_div_soft(a, (ag_real[]){0, 0, 0, 1, 0, 1, 0, 0});
    ag_tensor *ce = ag_cross_entropy(b, (int32_t[]){3, 1}, -1);
    CHECK_NEAR(ag_item(kl), ag_item(ce), 1e-15, 1e-14);
    ag_backward(kl);
    ag_backward(ce);
    for (int i = 0; i < 8; i++) CHECK_NEAR(a->grad[i], b->grad[i], 1e-16, 1e-14);
    ag_step_end();

    /* t = softmax z: zero loss and zero gradient; |z| ~ 1e4 stays finite */
    ag_tensor *u = with_grad(ag_tensor_from((ag_real[]){0, 0, 0, 0, 1e4, -1e4, 1e4 - 1, 1e4}, SHAPE(2, 4)));
    ag_tensor *l2 = ag_kl_div_soft(u, (ag_real[]){0.25, 0.25, 0.25, 0.25, 0, 0.5, 0, 0.5});
    /* row 1: z - max = (0, -2e4, -1, 0), s = log(2 + e^-1); half the mass on p_1 = e^-2e4 / e^s */
    double lse1 = log(2 + exp(-1.0));
    CHECK_NEAR(ag_item(l2), (0.5 * (log(0.5) + 2e4 + lse1) + 0.5 * (log(0.5) + lse1)) / 2, 0, 1e-14);
    ag_backward(l2);
    for (int c = 0; c < 4; c++) CHECK(fabs(u->grad[c]) < 1e-17, "t = p: grad[%d] = %g", c, (double)u->grad[c]);
    CHECK_NEAR(u->grad[5], -0.25, 0, 1e-15);
    CHECK(isfinite(u->grad[4]) && isfinite(u->grad[6]) && isfinite(u->grad[7]));
    ag_step_end();
}

static void test_mse_values(void) {
    ag_tensor *p = with_grad(ag_tensor_from((ag_real[]){1, 2, 3}, SHAPE(3)));
    ag_tensor *t = with_grad(ag_tensor_from((ag_real[]){0, 2, 5}, SHAPE(3)));
    ag_tensor *l = ag_mse(p, t);
    CHECK_NEAR(ag_item(l), 5.0 / 3, 1e-15, 1e-15);
    ag_backward(l);
    const double gp[] = {2.0 / 3, 0, -4.0 / 3};
    for (int i = 0; i < 3; i++) {
        CHECK_NEAR(p->grad[i], gp[i], 1e-15, 1e-15);
        CHECK_NEAR(t->grad[i], -gp[i], 1e-15, 1e-15);
    }
    ag_step_end();
}

/* ---- dropout ---- */

static void test_dropout(void) {
    enum { N = 200000 };
    const double keeps[] = {0.8, 0.5, 0.1};
    for (int k = 0; k < 3; k++) {
        double keep = keeps[k];
        ag_rng rng;
        ag_rng_seed(&rng, 100 + (uint64_t)k);
        ag_tensor *x = with_grad(ag_tensor_fill(1, SHAPE(N)));
        ag_tensor *y = ag_dropout(x, keep, true, &rng);
        int64_t kept = 0, odd = 0;
        double sum = 0;
        for (int64_t i = 0; i < N; i++) {
            kept += y->data[i] != 0;
            odd += y->data[i] != 0 && y->data[i] != (ag_real)(1 / keep);
            sum += y->data[i];
        }
        /* The kept count is Binomial(N, keep): 5 standard deviations. */
        double sd = sqrt(keep * (1 - keep) / N);
        CHECK(fabs((double)kept / N - keep) < 5 * sd, "keep %g: kept %g", keep, (double)kept / N);
        CHECK(fabs(sum / N - 1) < 5 * sd / keep, "keep %g: mean %g, want 1", keep, sum / N);
        CHECK(odd == 0, "kept units are scaled by exactly 1/keep");
        /* Backward uses the forward's mask. */
        ag_backward(ag_sum(y));
        int64_t mismatched = 0;
        for (int64_t i = 0; i < N; i++) mismatched += x->grad[i] != (y->data[i] != 0 ? (ag_real)(1 / keep) : 0);
        CHECK(mismatched == 0, "%lld gradients disagree with the mask", (long long)mismatched);
        ag_step_end();
    }

    /* Same seed, same mask; another seed, another mask. */
    ag_rng r1, r2, r3;
    ag_rng_seed(&r1, 5);
    ag_rng_seed(&r2, 5);
    ag_rng_seed(&r3, 6);
    ag_tensor *x = ag_tensor_fill(1, SHAPE(64));
    ag_tensor *a = ag_dropout(x, 0.5, true, &r1), *b = ag_dropout(x, 0.5, true, &r2);
    ag_tensor *c = ag_dropout(x, 0.5, true, &r3);
    CHECK(memcmp(a->data, b->data, 64 * sizeof(ag_real)) == 0, "seeded dropout is reproducible");
    CHECK(memcmp(a->data, c->data, 64 * sizeof(ag_real)) != 0, "another seed draws another mask");

    /* Evaluation and keep = 1: x itself, no tape node, rng untouched. */
    ag_rng before = r1;
    ag_tensor *leaf = with_grad(ag_tensor_fill(2, SHAPE(3)));
    CHECK(ag_dropout(leaf, 0.5, false, &r1) == leaf, "eval returns x itself");
    CHECK(ag_dropout(leaf, 1.0, true, &r1) == leaf, "keep = 1 returns x itself");
    CHECK(ag_dropout(leaf, 0.5, false, NULL) == leaf, "eval needs no rng");
    CHECK(memcmp(&before, &r1, sizeof r1) == 0, "identity dropout draws nothing");
    ag_step_end();
}

/* ---- steady state: a fixed-shape step allocates nothing after warm-up ---- */

static void one_step(ag_tensor *table, ag_tensor *w, ag_rng *rng) {
    static const int32_t ids[] = {1, 2, 3, 0, 4, 4, 2, 1};
    static const int32_t labels[] = {1, 0, 2, -1, 2, 1, 0, 0};
    ag_tensor *e = ag_embedding(table, ids, 2, (int[]){2, 4});                 /* [2,4,3] */
    ag_tensor *h = ag_dropout(ag_transpose(e, 0, 1), 0.9, true, rng);          /* [4,2,3] */
    ag_tensor *cat = ag_concat((ag_tensor *[]){h, ag_slice(h, 2, 0, 1)}, 2, 2); /* [4,2,4] */
    ag_tensor *sel = ag_index_select(cat, 2, (int32_t[]){3, 0, 1, 2}, 4);
    ag_tensor *logits = ag_matmul(ag_permute(sel, (int[]){1, 0, 2}), w);       /* [2,4,3] */
    ag_tensor *loss = ag_add(ag_cross_entropy(logits, labels, -1), ag_mse(e, ag_tensor_like(e)));
    ag_backward(loss);
    ag_step_end();
}

static void test_steady_state(void) {
    ag_params ps = {0};
    ag_tensor *table = ag_param(&ps, "embed.weight", 2, (int[]){5, 3});
    ag_tensor *w = ag_param(&ps, "w", 2, (int[]){4, 3});
    for (int i = 0; i < 15; i++) table->data[i] = (ag_real)(0.1 * i - 0.7);
    for (int i = 0; i < 12; i++) w->data[i] = (ag_real)(0.05 * i - 0.3);
    ag_rng rng;
    ag_rng_seed(&rng, 3);
    for (int i = 0; i < 3; i++) one_step(table, w, &rng);
    int64_t allocs = ag_memstats().allocs;
    for (int i = 0; i < 5; i++) one_step(table, w, &rng);
    CHECK(ag_memstats().allocs == allocs, "%lld heap allocations in steady state",
          (long long)(ag_memstats().allocs - allocs));
    ag_params_free(&ps);
}

int main(void) {
    test_errors();
    test_permute_concat_values();
    test_slice_and_gather_values();
    test_cross_entropy_values();
    test_linear_cross_entropy_values();
    test_kl_div_soft_values();
    test_mse_values();
    test_dropout();
    test_steady_state();
    ag_shutdown();
    return check_summary("test_shape_errors");
}
