/* cases_shape.c - op cases for differences from a reference block,
 * permute/transpose, concat, slice,
 * index_select, embedding, cross-entropy (plain and fused with the
 * classifier), soft-target KL, mse and dropout: several shapes each, size-1
 * dims, repeated indices and the edge cases of the losses; then the same
 * ops at the device's sizes (33, 37, 301 off multiples of 32, padding ids,
 * dropout rows over several mask blocks); dropout copies beside dropout. */
#include "opcase.h"
#include <string.h>
#include "attngrad/layers.h" /* ag_zero_padding */
#include "../ops/dropout.h" /* ag__dropout_copies: MPSAN's four masks of one input; ag__dropout_planes */
#include "../ops/shape.h"   /* ag__ref_differences: MPSAN's fusion columns */


/* One input of the given shape, values in +-[0.1, 2). */
#define ONE_INPUT(NAME, ...)                                                     \
    static int NAME(ag_tensor **in, ag_rng *r) {                                 \
        in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(__VA_ARGS__));                  \
        return 1;                                                                \
    }

ONE_INPUT(x_34, 3, 4)
ONE_INPUT(x_234, 2, 3, 4)
ONE_INPUT(x_2345, 2, 3, 4, 5)
ONE_INPUT(x_1314, 1, 3, 1, 4)
ONE_INPUT(x_1_5, 1, 5)
ONE_INPUT(x_7, 7)
ONE_INPUT(x_523, 5, 2, 3)
ONE_INPUT(x_1234, 1, 2, 3, 4)
ONE_INPUT(x_356, 3, 5, 6)
ONE_INPUT(x_453, 4, 5, 3)
ONE_INPUT(x_2356, 2, 3, 5, 6)

/* ---- permute and transpose ---- */

static ag_tensor *f_perm_heads(ag_tensor **in) { return ag_permute(in[0], (int[]){0, 2, 1, 3}); }
static ag_tensor *f_perm_3102(ag_tensor **in) { return ag_permute(in[0], (int[]){3, 1, 0, 2}); }
static ag_tensor *f_perm_1230(ag_tensor **in) { return ag_permute(in[0], (int[]){1, 2, 3, 0}); }
static ag_tensor *f_perm_identity(ag_tensor **in) { return ag_permute(in[0], (int[]){0, 1, 2, 3}); }
static ag_tensor *f_perm_201(ag_tensor **in) { return ag_permute(in[0], (int[]){2, 0, 1}); }
static ag_tensor *f_perm_10(ag_tensor **in) { return ag_permute(in[0], (int[]){1, 0}); }
static ag_tensor *f_perm_1d(ag_tensor **in) { return ag_permute(in[0], (int[]){0}); }
static ag_tensor *f_transpose_last(ag_tensor **in) { return ag_transpose(in[0], -1, -2); }
static ag_tensor *f_transpose_02(ag_tensor **in) { return ag_transpose(in[0], 0, 2); }
static ag_tensor *f_transpose_same(ag_tensor **in) { return ag_transpose(in[0], 1, 1); }
/* Permuting back and forth is the identity: both backwards must compose. */
static ag_tensor *f_perm_roundtrip(ag_tensor **in) {
    ag_tensor *y = ag_permute(in[0], (int[]){3, 1, 0, 2});
    return ag_mul(ag_permute(y, (int[]){2, 1, 3, 0}), in[0]);
}

/* ---- concat ---- */

#define CONCAT_SETUP(NAME, SA, SB, SC)                                           \
    static int NAME(ag_tensor **in, ag_rng *r) {                                 \
        in[0] = tc_away(r, 0.1, 2.0, true, SA);                                  \
        in[1] = tc_away(r, 0.1, 2.0, true, SB);                                  \
        in[2] = tc_away(r, 0.1, 2.0, true, SC);                                  \
        return 3;                                                                \
    }

CONCAT_SETUP(cat_axis0, SHAPE(2, 3, 4), SHAPE(1, 3, 4), SHAPE(3, 3, 4))
CONCAT_SETUP(cat_axis1, SHAPE(2, 1, 4), SHAPE(2, 3, 4), SHAPE(2, 2, 4))
CONCAT_SETUP(cat_axis2, SHAPE(2, 3, 4), SHAPE(2, 3, 1), SHAPE(2, 3, 2))
CONCAT_SETUP(cat_4d_axis3, SHAPE(2, 1, 3, 2), SHAPE(2, 1, 3, 1), SHAPE(2, 1, 3, 3))
CONCAT_SETUP(cat_1d, SHAPE(3), SHAPE(1), SHAPE(4))

static int cat_two_and_frozen(ag_tensor **in, ag_rng *r) { /* one input needs no gradient */
    in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 2));
    in[1] = tc_away(r, 0.1, 2.0, false, SHAPE(3, 4));
    in[2] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 1));
    return 3;
}

static ag_tensor *f_cat0(ag_tensor **in) { return ag_concat(in, 3, 0); }
static ag_tensor *f_cat1(ag_tensor **in) { return ag_concat(in, 3, 1); }
static ag_tensor *f_cat_last(ag_tensor **in) { return ag_concat(in, 3, -1); }
static ag_tensor *f_cat_two(ag_tensor **in) { return ag_concat(in, 2, 0); }
static ag_tensor *f_cat_single(ag_tensor **in) { return ag_concat(in, 1, 1); }
/* 11 inputs (more than a tape node holds), the same tensors several times:
 * each occurrence's gradient must add up. */
static ag_tensor *f_cat_many_repeated(ag_tensor **in) {
    ag_tensor *xs[11];
    for (int i = 0; i < 11; i++) xs[i] = in[i % 3];
    return ag_concat(xs, 11, 1);
}

/* ---- differences from a reference block (ag__ref_differences) ---- */

ONE_INPUT(x_3_15, 3, 15)
static ag_tensor *f_refdiff_g1(ag_tensor **in) { return ag__ref_differences(in[0], 1); }   /* [3,4] -> [3,2] */
static ag_tensor *f_refdiff_d1(ag_tensor **in) { return ag__ref_differences(in[0], 3); }   /* [2,3,4], d = 1 */
static ag_tensor *f_refdiff_1d(ag_tensor **in) { return ag__ref_differences(in[0], 6); }   /* [7] -> [6] */
/* Used twice: the second backward adds to the gradient the first stored. */
static ag_tensor *f_refdiff_twice(ag_tensor **in) {
    return ag_add(ag__ref_differences(in[0], 4), ag_mul_scalar(ag__ref_differences(in[0], 4), 0.5));
}
/* Against MPSAN's former composition (slices, a broadcast subtraction):
 * a difference of 0 with 0 gradients. */
static ag_tensor *f_refdiff_vs_slices(ag_tensor **in) {
    int lead = in[0]->shape[0], d = 3, g = 4;
    ag_tensor *blocks = ag_reshape(ag_slice(in[0], 1, 0, g * d), 3, (int[]){lead, g, d});
    ag_tensor *last = ag_reshape(ag_slice(in[0], 1, g * d, (g + 1) * d), 3, (int[]){lead, 1, d});
    ag_tensor *composed = ag_reshape(ag_sub(blocks, last), 2, (int[]){lead, g * d});
    return tc_difference(ag_sub(ag__ref_differences(in[0], g), composed), ag_slice(in[0], 1, 0, g * d));
}
static ag_tensor *f_refdiff_g4(ag_tensor **x) { return ag__ref_differences(x[0], 4); }

/* ag_zero_padding (layers.h): rows at or past the lengths 0, an empty
 * example and a full one; a 4-D x; x used again beside it, so its
 * gradient adds to one that is there already */
static const int32_t pad_len[3] = {5, 0, 2};
static ag_tensor *f_zero_padding(ag_tensor **in) { return ag_zero_padding(in[0], pad_len); }
static ag_tensor *f_zero_padding_twice(ag_tensor **in) { return ag_mul(ag_zero_padding(in[0], pad_len), in[0]); }
/* ag_max_over_time: the max over each example's valid positions, 0 for the empty one */
static ag_tensor *f_max_over_time(ag_tensor **in) { return ag_max_over_time(in[0], pad_len); }
/* Lengths 1, 0, 4 and 2 of N = 4: a length-1 example (its max is its first
 * row), an empty one, a full one, padding; values distinct (no ties: the
 * max's gradient is one-sided at them) */
static int x_distinct_443(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, 0, 1, true, SHAPE(4, 4, 3));
    for (int64_t i = 0; i < in[0]->size; i++) in[0]->data[i] += (ag_real)(0.1 * (double)((i * 7) % 48));
    return 1;
}
static const int32_t len_1042[4] = {1, 0, 4, 2};
static ag_tensor *f_max_over_time_1042(ag_tensor **in) { return ag_max_over_time(in[0], len_1042); }
static ag_tensor *f_zero_padding_1042(ag_tensor **in) { return ag_zero_padding(in[0], len_1042); }
/* N = 1: lengths 1 and 0 */
ONE_INPUT(x_213, 2, 1, 3)
static ag_tensor *f_max_over_time_n1(ag_tensor **in) { return ag_max_over_time(in[0], (const int32_t[]){1, 0}); }

/* ---- slice ---- */

static ag_tensor *f_slice_axis0(ag_tensor **in) { return ag_slice(in[0], 0, 1, 3); }     /* a view */
static ag_tensor *f_slice_mid(ag_tensor **in) { return ag_slice(in[0], 1, 1, 3); }
static ag_tensor *f_slice_last_len1(ag_tensor **in) { return ag_slice(in[0], -1, 2, 3); }
static ag_tensor *f_slice_full(ag_tensor **in) { return ag_slice(in[0], 2, 0, 4); }
static ag_tensor *f_slice_view_after_1(ag_tensor **in) { return ag_slice(in[0], 1, 1, 2); } /* [1,2,3,4]: a view */
/* Two overlapping slices of one tensor: the overlap gets both gradients. */
static ag_tensor *f_slice_overlap(ag_tensor **in) {
    return ag_mul(ag_slice(in[0], 0, 0, 2), ag_slice(in[0], 0, 1, 3));
}
/* Slicing a slice (a view of a view), then a copying slice of that. */
static ag_tensor *f_slice_of_slice(ag_tensor **in) {
    ag_tensor *rows = ag_slice(in[0], 0, 1, 2);
    return ag_tanh(ag_slice(rows, 2, 1, 4));
}

/* ---- index_select and embedding ---- */

static ag_tensor *f_isel_rows_repeated(ag_tensor **in) {
    static const int32_t idx[] = {2, 0, 2, 2, 1};
    return ag_index_select(in[0], 0, idx, 5);
}
static ag_tensor *f_isel_mid(ag_tensor **in) {
    static const int32_t idx[] = {1, 1, 0};
    return ag_index_select(in[0], 1, idx, 3);
}
static ag_tensor *f_isel_last(ag_tensor **in) {
    static const int32_t idx[] = {3, 0, 3, 1, 3, 2, 0};
    return ag_index_select(in[0], -1, idx, 7);
}
static ag_tensor *f_isel_one(ag_tensor **in) {
    static const int32_t idx[] = {4};
    return ag_index_select(in[0], 0, idx, 1);
}

/* ---- reverse_padded: each example's valid positions reversed ---- */

static const int32_t rev_len[] = {5, 1, 0, 3}; /* full, one word, empty, padded */
static ag_tensor *f_reverse_lengths(ag_tensor **in) { return ag_reverse_padded(in[0], rev_len); }
static ag_tensor *f_reverse_all(ag_tensor **in) { return ag_reverse_padded(in[0], NULL); } /* [2,3,4,5]: 4-D rows */
/* Its own inverse: twice is x again (0 up to nothing at all), plus x for a gradient to measure. */
static ag_tensor *f_reverse_twice(ag_tensor **in) {
    return tc_difference(ag_sub(ag_reverse_padded(ag_reverse_padded(in[0], rev_len), rev_len), in[0]), in[0]);
}
/* Position t of example b holds x's position len - 1 - t: the first word read is the last one. */
static ag_tensor *f_reverse_vs_select(ag_tensor **in) {
    static const int32_t last_of_b3[] = {2, 1, 0, 3, 4}; /* example 3 (length 3), by hand */
    ag_tensor *b3 = ag_slice(in[0], 0, 3, 4);
    ag_tensor *want = ag_index_select(b3, 1, last_of_b3, 5);
    return tc_difference(ag_sub(ag_slice(ag_reverse_padded(in[0], rev_len), 0, 3, 4), want), want);
}

static int emb_table(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(6, 4));
    return 1;
}
static int emb_table_d1(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(3, 1));
    return 1;
}

static const int32_t emb_ids_2d[] = {1, 5, 1, 0, 1, 3}; /* [2, 3], id 1 three times */
static ag_tensor *f_emb_2d(ag_tensor **in) { return ag_embedding(in[0], emb_ids_2d, 2, (int[]){2, 3}); }
static ag_tensor *f_emb_1d(ag_tensor **in) {
    static const int32_t ids[] = {0, 5, 5, 2};
    return ag_embedding(in[0], ids, 1, (int[]){4});
}
static ag_tensor *f_emb_3d_ids(ag_tensor **in) {
    static const int32_t ids[] = {2, 0, 2, 1, 1, 1, 0, 2};
    return ag_embedding(in[0], ids, 3, (int[]){2, 2, 2});
}
static ag_tensor *f_emb_scalar_id(ag_tensor **in) {
    static const int32_t id = 4;
    return ag_embedding(in[0], &id, 0, NULL);
}
/* The model pattern: look up, then a nonlinearity, then pool. */
static ag_tensor *f_emb_then_pool(ag_tensor **in) {
    return ag_sum_axis(ag_tanh(ag_embedding(in[0], emb_ids_2d, 2, (int[]){2, 3})), 1, false);
}

/* ---- cross-entropy ---- */

static int logits_45(ag_tensor **in, ag_rng *r) { in[0] = tc_uniform(r, -3, 3, true, SHAPE(4, 5)); return 1; }
static int logits_234(ag_tensor **in, ag_rng *r) { in[0] = tc_uniform(r, -3, 3, true, SHAPE(2, 3, 4)); return 1; }
static int logits_1d(ag_tensor **in, ag_rng *r) { in[0] = tc_uniform(r, -3, 3, true, SHAPE(6)); return 1; }
static int logits_c1(ag_tensor **in, ag_rng *r) { in[0] = tc_uniform(r, -3, 3, true, SHAPE(3, 1)); return 1; }
/* |z| ~ 1e4, on a grid of 1/8 so f32 holds them exactly and the f32 run
 * computes the same function.  Row 2 mixes +1e4 and -1e4: a softmax that
 * saturates to exactly 0 and 1. */
static int logits_large(ag_tensor **in, ag_rng *r) {
    in[0] = ag_tensor_new(SHAPE(3, 4));
    for (int64_t i = 0; i < 12; i++) {
        double base = i < 4 ? 1e4 : i < 8 ? -1e4 : (i % 2 ? 1e4 : -1e4);
        in[0]->data[i] = (ag_real)(base + (double)(int)(ag_rng_uniform(r) * 24) / 8);
    }
    in[0]->requires_grad = true;
    return 1;
}

static ag_tensor *f_ce(ag_tensor **in) {
    static const int32_t y[] = {2, 0, 4, 4};
    return ag_cross_entropy(in[0], y, -1);
}
static ag_tensor *f_ce_ignore(ag_tensor **in) { /* rows 1 and 3 are padding */
    static const int32_t y[] = {3, -100, 0, -100};
    return ag_cross_entropy(in[0], y, -100);
}
static ag_tensor *f_ce_ignore_is_class(ag_tensor **in) { /* pad id 0 is also a class index */
    static const int32_t y[] = {0, 1, 0, 3};
    return ag_cross_entropy(in[0], y, 0);
}
static ag_tensor *f_ce_all_ignored(ag_tensor **in) {
    static const int32_t y[] = {-1, -1, -1, -1};
    return ag_cross_entropy(in[0], y, -1);
}
static ag_tensor *f_ce_3d(ag_tensor **in) {
    static const int32_t y[] = {0, 3, 1, 2, 2, -1};
    return ag_cross_entropy(in[0], y, -1);
}
static ag_tensor *f_ce_1d(ag_tensor **in) {
    static const int32_t y[] = {5};
    return ag_cross_entropy(in[0], y, -1);
}
static ag_tensor *f_ce_c1(ag_tensor **in) {
    static const int32_t y[] = {0, 0, 0};
    return ag_cross_entropy(in[0], y, -1);
}
static ag_tensor *f_ce_large(ag_tensor **in) {
    static const int32_t y[] = {1, 3, 3};
    return ag_cross_entropy(in[0], y, -1);
}
/* Row 2 with the label on a -1e4 logit: the loss is ~2e4 and the gradient
 * exactly -1 / +1 / 0.  (Both cases see a relative error of ~3.4e-7 in the
 * numeric gradient: 1e-6 is not a multiple of ulp(1e4) = 2^-39, so the step
 * actually taken is 1e-6 * (1 + 3.4e-7).  That is within rtol.) */
static ag_tensor *f_ce_large_wrong(ag_tensor **in) {
    static const int32_t y[] = {2};
    return ag_cross_entropy(ag_slice(in[0], 0, 2, 3), y, -1);
}
/* Logits from a linear layer, as in every classifier. */
static int ce_linear(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(3, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(4, 5));
    return 2;
}
static ag_tensor *f_ce_linear(ag_tensor **in) {
    static const int32_t y[] = {4, 1, 1};
    return ag_cross_entropy(ag_linear(in[0], in[1], NULL), y, -1);
}

/* ---- the fused classifier: linear (or tied linear_t) + cross-entropy ----
 * x [2,3,4] is 6 rows; an LM's ignore index 0 drops rows 1 and 4, whose x
 * must then get a zero gradient. */
static int lce_tied(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(5, 4)); /* [C, in] */
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(5));
    return 3;
}
static int lce_plain(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(6, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(4, 5)); /* [in, C] */
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(5));
    return 3;
}
/* Logits of a few hundred: the softmax saturates, the loss stays exact. */
static int lce_large(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 5, 10, true, SHAPE(3, 4));
    in[1] = tc_away(r, 5, 10, true, SHAPE(5, 4));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(5));
    return 3;
}
static const int32_t lce_lm_labels[] = {3, 0, 4, 1, 0, 2};
static ag_tensor *f_lce_tied(ag_tensor **in) { return ag_linear_t_cross_entropy(in[0], in[1], in[2], lce_lm_labels, 0); }
static ag_tensor *f_lce_tied_nobias(ag_tensor **in) {
    return ag_linear_t_cross_entropy(in[0], in[1], NULL, lce_lm_labels, 0);
}
static ag_tensor *f_lce_plain(ag_tensor **in) {
    static const int32_t y[] = {0, 4, -1, 4, 2, 1};
    return ag_linear_cross_entropy(in[0], in[1], in[2], y, -1);
}
static ag_tensor *f_lce_all_ignored(ag_tensor **in) {
    static const int32_t y[] = {-1, -1, -1, -1, -1, -1};
    return ag_linear_cross_entropy(in[0], in[1], in[2], y, -1);
}
/* The plain layout (W [in, C]) at logits of a few hundred too. */
static int lce_plain_large(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 5, 10, true, SHAPE(3, 4));
    in[1] = tc_away(r, 5, 10, true, SHAPE(4, 5));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(5));
    return 3;
}
static ag_tensor *f_lce_plain_large(ag_tensor **in) {
    static const int32_t y[] = {2, 0, 4};
    return ag_linear_cross_entropy(in[0], in[1], in[2], y, -1);
}
/* One row (a batch of one example), and the tied layout with every row ignored. */
static int lce_one_row(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(1, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(5, 4));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(5));
    return 3;
}
static ag_tensor *f_lce_one_row(ag_tensor **in) { return ag_linear_t_cross_entropy(in[0], in[1], in[2], (const int32_t[]){3}, -1); }
static ag_tensor *f_lce_t_all_ignored(ag_tensor **in) {
    static const int32_t y[] = {0, 0, 0, 0, 0, 0};
    return ag_add(ag_linear_t_cross_entropy(in[0], in[1], in[2], y, 0), ag_sum(ag_mul(in[0], in[0])));
}
static ag_tensor *f_lce_large(ag_tensor **in) {
    static const int32_t y[] = {1, 4, 0};
    return ag_linear_t_cross_entropy(in[0], in[1], in[2], y, -1);
}
/* The fused op minus the two ops it fuses: the value and every gradient
 * must be 0 (to the gradcheck's atol 1e-8). */
static ag_tensor *f_lce_minus_unfused(ag_tensor **in) {
    ag_tensor *fused = ag_linear_t_cross_entropy(in[0], in[1], in[2], lce_lm_labels, 0);
    return ag_sub(fused, ag_cross_entropy(ag_linear_t(in[0], in[1], in[2]), lce_lm_labels, 0));
}
/* Label smoothing: with padding rows, at saturated logits, on one class,
 * and against its definition composed of ops: (1 - eps) CE(y) + eps
 * mean_c(-log_softmax(z)_c) over the counted rows, a difference of 0. */
static ag_tensor *f_ce_smoothed(ag_tensor **in) {
    static const int32_t y[] = {3, -100, 0, 4};
    return ag_cross_entropy_smoothed(in[0], y, -100, 0.1);
}
/* Logits of a few hundred (the 1e4 of logits_large would make the smoothed
 * loss ~1e3, past what a central difference resolves at step 1e-6). */
static int logits_hundreds(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 100, 300, true, SHAPE(3, 5)); return 1; }
static ag_tensor *f_ce_smoothed_large(ag_tensor **in) {
    static const int32_t y[] = {1, 3, 3};
    return ag_cross_entropy_smoothed(in[0], y, -1, 0.3);
}
static ag_tensor *f_ce_smoothed_c1(ag_tensor **in) {
    static const int32_t y[] = {0, 0, 0};
    return ag_cross_entropy_smoothed(in[0], y, -1, 0.5);
}
static ag_tensor *f_ce_smoothed_vs_composed(ag_tensor **in) { /* logits [4,5], every row counted */
    static const int32_t y[] = {2, 0, 4, 4};
    double eps = 0.2;
    ag_tensor *uniform = ag_mul_scalar(ag_sum(ag_log_softmax(in[0])), -1.0 / (4 * 5)); /* mean over rows and classes */
    ag_tensor *composed = ag_add(ag_mul_scalar(ag_cross_entropy(in[0], y, -1), 1 - eps), ag_mul_scalar(uniform, eps));
    ag_tensor *smoothed = ag_cross_entropy_smoothed(in[0], y, -1, eps);
    return tc_difference(ag_sub(smoothed, composed), smoothed);
}
static ag_tensor *f_lce_smoothed(ag_tensor **in) {
    return ag_linear_t_cross_entropy_smoothed(in[0], in[1], in[2], lce_lm_labels, 0, 0.1);
}
static ag_tensor *f_lce_plain_smoothed(ag_tensor **in) {
    static const int32_t y[] = {0, 4, -1, 4, 2, 1};
    return ag_linear_cross_entropy_smoothed(in[0], in[1], in[2], y, -1, 0.25);
}
static ag_tensor *f_lce_smoothed_minus_unfused(ag_tensor **in) {
    ag_tensor *fused = ag_linear_t_cross_entropy_smoothed(in[0], in[1], in[2], lce_lm_labels, 0, 0.15);
    return ag_sub(fused, ag_cross_entropy_smoothed(ag_linear_t(in[0], in[1], in[2]), lce_lm_labels, 0, 0.15));
}
static ag_tensor *f_lce_smoothed_large(ag_tensor **in) {
    static const int32_t y[] = {1, 4, 0};
    return ag_linear_t_cross_entropy_smoothed(in[0], in[1], in[2], y, -1, 0.1);
}

/* Used twice in one graph (x feeds both, labels differ): gradients add. */
static ag_tensor *f_lce_twice(ag_tensor **in) {
    static const int32_t y[] = {1, 1, 1, 1, 1, 1};
    return ag_add(ag_linear_t_cross_entropy(in[0], in[1], in[2], lce_lm_labels, 0),
                  ag_linear_t_cross_entropy(ag_tanh(in[0]), in[1], NULL, y, -1));
}

/* ---- KL divergence from a soft target ---- */

/* Tai et al.'s relatedness targets over 5 classes: y = 3.6 puts 0.4 on
 * class 3 and 0.6 on class 4 (1-based), the rest exactly 0. */
static const ag_real kl_tai[4 * 5] = {
    0, 0, 0.4, 0.6, 0,       /* y = 3.6 */
    1, 0, 0, 0, 0,           /* y = 1: one-hot */
    0, 0, 0, 0.25, 0.75,     /* y = 4.75 */
    0.2, 0.1, 0.3, 0.15, 0.25, /* dense: every entry counts */
};
static ag_tensor *f_kl_tai(ag_tensor **in) { return ag_kl_div_soft(in[0], kl_tai); }
static ag_tensor *f_kl_3d(ag_tensor **in) { /* [2,3,4]: six rows */
    static const ag_real t[6 * 4] = {0.5, 0.5, 0, 0, 0, 0, 0, 1, 0.1, 0.2, 0.3, 0.4,
                                     0.25, 0.25, 0.25, 0.25, 0, 0.9, 0.1, 0, 1, 0, 0, 0};
    return ag_kl_div_soft(in[0], t);
}
static ag_tensor *f_kl_1d(ag_tensor **in) { /* one row of 6 */
    static const ag_real t[6] = {0, 0.3, 0, 0.3, 0.4, 0};
    return ag_kl_div_soft(in[0], t);
}
static ag_tensor *f_kl_c1(ag_tensor **in) { /* C = 1: the loss is the constant 0 */
    static const ag_real t[3] = {1, 1, 1};
    return ag_add(ag_kl_div_soft(in[0], t), ag_sum_axis(ag_mul(in[0], in[0]), 0, false));
}
/* |z| ~ 1e4 (rows as in logits_large; row 2 alternates -1e4, +1e4): the
 * targets sit on the large logits, so the loss stays O(1). */
static ag_tensor *f_kl_large(ag_tensor **in) {
    static const ag_real t[3 * 4] = {0, 0.5, 0.5, 0, 0.25, 0, 0, 0.75, 0, 0.5, 0, 0.5};
    return ag_kl_div_soft(in[0], t);
}
/* Row 2 with a tenth of the mass on a -1e4 logit: p saturates at exactly 0
 * and 1, the loss is ~2e3 and the gradient at the -1e4 logit is exactly
 * -0.1.  (The ~3e-7 relative error is the numeric step's, as explained for
 * cross-entropy above.) */
static ag_tensor *f_kl_large_saturated(ag_tensor **in) {
    static const ag_real t[4] = {0.1, 0.5, 0, 0.4};
    return ag_kl_div_soft(ag_slice(in[0], 0, 2, 3), t);
}
static ag_tensor *f_kl_linear(ag_tensor **in) { /* the relatedness head: linear -> 5 logits */
    return ag_kl_div_soft(ag_linear(in[0], in[1], NULL), kl_tai + 5);
}

/* ---- mse ---- */

static int mse_pair(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(3, 4));
    in[1] = tc_uniform(r, -2, 2, true, SHAPE(3, 4));
    return 2;
}
static int mse_fixed_target(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 1, 3));
    in[1] = tc_uniform(r, -2, 2, false, SHAPE(2, 1, 3));
    return 2;
}
static int mse_one(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(1));
    in[1] = tc_uniform(r, -2, 2, true, SHAPE(1));
    return 2;
}
static ag_tensor *f_mse(ag_tensor **in) { return ag_mse(in[0], in[1]); }

/* ---- dropout: re-seeded inside the forward so every call draws one mask ---- */

static ag_tensor *dropout_seeded(ag_tensor *x, double keep, bool training) {
    ag_rng rng;
    ag_rng_seed(&rng, 7);
    return ag_dropout(x, keep, training, &rng);
}
static ag_tensor *f_dropout_07(ag_tensor **in) { return dropout_seeded(in[0], 0.7, true); }
static ag_tensor *f_dropout_05(ag_tensor **in) { return dropout_seeded(in[0], 0.5, true); }
static ag_tensor *f_dropout_keep1(ag_tensor **in) { /* identity: x * x through a no-op */
    return ag_mul(dropout_seeded(in[0], 1.0, true), in[0]);
}
static ag_tensor *f_dropout_eval(ag_tensor **in) {
    return ag_tanh(dropout_seeded(in[0], 0.5, false));
}
static ag_tensor *f_dropout_then_tanh(ag_tensor **in) {
    return ag_tanh(dropout_seeded(in[0], 0.8, true));
}

/* ---- dropout copies: G masks of one input, the same re-seeding ---- */

static ag_tensor *copies_seeded(ag_tensor *x, int copies, double keep, bool training) {
    ag_rng rng;
    ag_rng_seed(&rng, 7);
    return ag__dropout_copies(x, copies, keep, training, &rng);
}
static ag_tensor *f_copies4_tanh(ag_tensor **in) { return ag_tanh(copies_seeded(in[0], 4, 0.7, true)); }
static ag_tensor *f_copies1_tanh(ag_tensor **in) { return ag_tanh(copies_seeded(in[0], 1, 0.7, true)); }
static ag_tensor *f_copies_eval(ag_tensor **in) { return ag_tanh(copies_seeded(in[0], 3, 0.5, false)); }
/* x used again after the copies: their backward adds to a gradient already there */
static ag_tensor *f_copies_times_x(ag_tensor **in) { return ag_mul(copies_seeded(in[0], 4, 0.7, true), in[0]); }
static ag_tensor *f_copies_keep1_times_x(ag_tensor **in) { return ag_mul(copies_seeded(in[0], 3, 1.0, true), in[0]); }
/* The op against the calls it stands for, with one seed: the planes are
 * the calls' outputs exactly (the difference is 0), and through the term
 * the gradient check reaches the op's own gradient. */
static ag_tensor *f_copies_minus_calls(ag_tensor **in) {
    enum { COPIES = 4 };
    ag_tensor *x = in[0], *calls[COPIES];
    ag_rng rng;
    ag_rng_seed(&rng, 7);
    for (int c = 0; c < COPIES; c++) calls[c] = ag_dropout(x, 0.7, true, &rng);
    int shape[4] = {COPIES};
    memcpy(shape + 1, x->shape, (size_t)x->ndim * sizeof *shape);
    ag_tensor *stacked = ag_reshape(ag_concat(calls, COPIES, 0), x->ndim + 1, shape);
    ag_tensor *y = copies_seeded(x, COPIES, 0.7, true);
    return tc_difference(ag_sub(y, stacked), ag_tanh(y));
}
/* With CUDA graphs on for the op (on the device only: the CPU has none),
 * its draws go to device memory in one staged copy and the kernel reads
 * them there; the device must still draw the CPU's masks. */
/* The copies from draws taken beforehand (MTSA's heads take theirs in
 * their old order) against the copies drawing from the same rng: 0. */
static ag_tensor *f_copies_drawn_minus_copies(ag_tensor **in) {
    ag_rng rng;
    ag_rng_seed(&rng, 7);
    uint64_t draws[5];
    ag__dropout_draws(&rng, true, 0.7, draws, 5);
    return ag_sub(ag__dropout_copies_drawn(in[0], 5, 0.7, true, draws), copies_seeded(in[0], 5, 0.7, true));
}
static ag_tensor *f_copies_drawn_eval(ag_tensor **in) {
    return ag_tanh(ag__dropout_copies_drawn(in[0], 2, 0.7, false, NULL));
}
static ag_tensor *f_copies_graphs(ag_tensor **in) {
    bool graphs = in[0]->device == AG_CUDA;
    if (graphs) ag_cuda_graphs(true);
    ag_tensor *y = copies_seeded(in[0], 4, 0.7, true);
    if (graphs) ag_cuda_graphs(false); /* runs what was recorded */
    return ag_tanh(y);
}

/* ---- dropout planes: each plane of a stack dropped as its own call, the
 * calls' draws taken before (ag__dropout_draws) from a rng re-seeded ---- */

static ag_tensor *planes_seeded(ag_tensor *x, double keep, bool training) {
    uint64_t draws[AG_DROPOUT_MAX_COPIES];
    ag_rng rng;
    ag_rng_seed(&rng, 7);
    ag__dropout_draws(&rng, training, keep, draws, x->shape[0]);
    return ag__dropout_planes(x, keep, training, draws);
}
static ag_tensor *f_planes_tanh(ag_tensor **in) { return ag_tanh(planes_seeded(in[0], 0.7, true)); }
static ag_tensor *f_planes_eval(ag_tensor **in) { /* x itself, no draws to read */
    return ag_tanh(ag__dropout_planes(in[0], 0.5, false, NULL));
}
/* x used again: the planes' backward adds to a gradient already there */
static ag_tensor *f_planes_times_x(ag_tensor **in) { return ag_mul(planes_seeded(in[0], 0.7, true), in[0]); }
/* The op against ag_dropout on each plane's slice, the calls drawing in
 * plane order from the same seed (so call g's draw is draws[g]), stacked
 * back: the difference is 0, and the term checks the op's gradient. */
static ag_tensor *f_planes_minus_calls(ag_tensor **in) {
    ag_tensor *x = in[0], *calls[AG_DROPOUT_MAX_COPIES];
    int planes = x->shape[0];
    ag_rng rng;
    ag_rng_seed(&rng, 7);
    for (int g = 0; g < planes; g++)
        calls[g] = ag_dropout(ag_reshape(ag_slice(x, 0, g, g + 1), x->ndim - 1, x->shape + 1), 0.7, true, &rng);
    ag_tensor *stacked = ag_reshape(ag_concat(calls, planes, 0), x->ndim, x->shape);
    ag_tensor *y = planes_seeded(x, 0.7, true);
    return tc_difference(ag_sub(y, stacked), ag_tanh(y));
}
/* CUDA graphs on for the op, as f_copies_graphs: the draws staged in
 * device memory, the masks still the CPU's. */
static ag_tensor *f_planes_graphs(ag_tensor **in) {
    bool graphs = in[0]->device == AG_CUDA;
    if (graphs) ag_cuda_graphs(true);
    ag_tensor *y = planes_seeded(in[0], 0.7, true);
    if (graphs) ag_cuda_graphs(false); /* runs what was recorded */
    return ag_tanh(y);
}

/* ---- the device's sizes ---- */

static ag_tensor *f_permute_3120(ag_tensor **x) { return ag_permute(x[0], (int[]){3, 1, 2, 0}); }
static ag_tensor *f_permute_0213(ag_tensor **x) { return ag_permute(x[0], (int[]){0, 2, 1, 3}); }
static ag_tensor *f_permute_2301(ag_tensor **x) { return ag_permute(x[0], (int[]){2, 3, 0, 1}); }
static ag_tensor *f_permute_201(ag_tensor **x) { return ag_permute(x[0], (int[]){2, 0, 1}); }
static ag_tensor *f_transpose_01(ag_tensor **x) { return ag_transpose(x[0], 0, 1); }
static ag_tensor *f_transpose_12(ag_tensor **x) { return ag_transpose(x[0], 1, -1); }
static ag_tensor *f_transpose_13(ag_tensor **x) { return ag_transpose(x[0], 1, 3); }
/* A permute's input used twice: the second gradient is added, not stored. */
static ag_tensor *f_transpose_twice(ag_tensor **x) { return ag_add(ag_transpose(x[0], 0, 1), ag_transpose(x[0], 1, 0)); }

static ag_tensor *f_concat2(ag_tensor **x) { return ag_concat(x, 3, 2); }
/* The same input in two places: its gradient is the sum of both parts. */
static ag_tensor *f_concat_repeat(ag_tensor **x) { return ag_concat((ag_tensor *[]){x[0], x[1], x[0]}, 3, -1); }

static ag_tensor *f_slice0(ag_tensor **x) { return ag_slice(x[0], 0, 1, 4); } /* a view */
static ag_tensor *f_slice1(ag_tensor **x) { return ag_slice(x[0], 1, 5, 30); }
static ag_tensor *f_slice2(ag_tensor **x) { return ag_slice(x[0], -1, 36, 37); } /* length 1 */
/* Two slices of one input, overlapping: both gradients add into it. */
static ag_tensor *f_slice_overlap_33(ag_tensor **x) { return ag_mul(ag_slice(x[0], 1, 0, 20), ag_slice(x[0], 1, 13, 33)); }

/* Repeated indices (2 three times), the first and last rows, a row never read. */
static const int32_t SELECT[] = {2, 0, 2, 6, 2, 5, 1, 3};
static ag_tensor *f_select0(ag_tensor **x) { return ag_index_select(x[0], 0, SELECT, 8); }
static ag_tensor *f_select1(ag_tensor **x) { return ag_index_select(x[0], 1, SELECT, 8); }
static ag_tensor *f_select2(ag_tensor **x) { return ag_index_select(x[0], 2, SELECT, 8); }
static const int32_t SELECT_REV[] = {3, 1, 5, 2, 6, 2, 0, 2};
static ag_tensor *f_select_twice(ag_tensor **x) {
    return ag_add(ag_index_select(x[0], 1, SELECT, 8), ag_index_select(x[0], 1, SELECT_REV, 8));
}
static ag_tensor *f_select_empty(ag_tensor **x) { return ag_index_select(x[0], 0, SELECT, 0); }
static ag_tensor *f_select_one(ag_tensor **x) { return ag_index_select(x[0], 1, (const int32_t[]){4}, 1); }

/* Ids [4, 9] of a [37, 33] table, padded with id 0 as a batch is (a long
 * run of one id: its gradient sums every padded position), a word twice. */
static ag_tensor *f_embedding(ag_tensor **x) {
    int32_t ids[4 * 9];
    for (int i = 0; i < 4 * 9; i++) ids[i] = i % 9 < 3 + 2 * (i / 9) ? (int32_t)((i * 7 + 3) % 36 + 1) : 0;
    ids[5] = ids[20] = 36; /* the last row, twice */
    return ag_embedding(x[0], ids, 2, (int[]){4, 9});
}
static ag_tensor *f_embedding_twice(ag_tensor **x) {
    static const int32_t a[] = {1, 4, 4, 0, 0}, b[] = {0, 4, 2, 2, 0};
    return ag_mul(ag_embedding(x[0], a, 1, (int[]){5}), ag_embedding(x[0], b, 1, (int[]){5}));
}

enum { IGNORE = -100, MAX_ROWS = 64 };

/* Labels for rows of C classes: a spread of classes (first and last
 * included), the last of every `every` rows ignored (0: none); every < 0: all. */
static const int32_t *labels_of(int64_t rows, int C, int every) {
    static int32_t y[MAX_ROWS];
    for (int64_t r = 0; r < rows && r < MAX_ROWS; r++) {
        bool ignored = every < 0 || (every > 0 && r % every == every - 1);
        y[r] = ignored ? IGNORE : r == 1 ? C - 1 : (int32_t)(r * 7 % C);
    }
    return y;
}

static int64_t rows_of(const ag_tensor *x) { return x->size / x->shape[x->ndim - 1]; }
static int classes_of(const ag_tensor *x) { return x->shape[x->ndim - 1]; }

static ag_tensor *f_ce_spread(ag_tensor **x) {
    return ag_cross_entropy(x[0], labels_of(rows_of(x[0]), classes_of(x[0]), 4), IGNORE);
}
static ag_tensor *f_ce_spread_all_counted(ag_tensor **x) {
    return ag_cross_entropy(x[0], labels_of(rows_of(x[0]), classes_of(x[0]), 0), IGNORE);
}
static ag_tensor *f_ce_spread_none_counted(ag_tensor **x) {
    return ag_cross_entropy(x[0], labels_of(rows_of(x[0]), classes_of(x[0]), -1), IGNORE);
}

/* x [rows, in], W [in, C] (or [C, in] for _t), bias [C] when there are 3 inputs */
static ag_tensor *f_lce_spread(ag_tensor **x) {
    return ag_linear_cross_entropy(x[0], x[1], x[2], labels_of(rows_of(x[0]), x[1]->shape[1], 3), IGNORE);
}
static ag_tensor *f_lce_spread_nobias(ag_tensor **x) {
    return ag_linear_cross_entropy(x[0], x[1], NULL, labels_of(rows_of(x[0]), x[1]->shape[1], 0), IGNORE);
}
static ag_tensor *f_lce_t_spread(ag_tensor **x) {
    return ag_linear_t_cross_entropy(x[0], x[1], x[2], labels_of(rows_of(x[0]), x[1]->shape[0], 3), IGNORE);
}
static ag_tensor *f_ce_spread_smoothed(ag_tensor **x) {
    return ag_cross_entropy_smoothed(x[0], labels_of(rows_of(x[0]), classes_of(x[0]), 4), IGNORE, 0.1);
}
static ag_tensor *f_lce_t_spread_smoothed(ag_tensor **x) {
    return ag_linear_t_cross_entropy_smoothed(x[0], x[1], x[2], labels_of(rows_of(x[0]), x[1]->shape[0], 3), IGNORE,
                                              0.1);
}
static ag_tensor *f_lce_spread_none_counted(ag_tensor **x) {
    return ag_linear_cross_entropy(x[0], x[1], x[2], labels_of(rows_of(x[0]), x[1]->shape[1], -1), IGNORE);
}

/* A target distribution per row: weights c % 5 + 1, with zeros (0 log 0)
 * at every 7th class, normalised in double. */
static ag_tensor *f_kl_spread(ag_tensor **x) {
    static ag_real t[MAX_ROWS * 400];
    int C = classes_of(x[0]);
    int64_t rows = rows_of(x[0]);
    for (int64_t r = 0; r < rows; r++) {
        double mass = 0;
        for (int c = 0; c < C; c++) mass += c % 7 == 3 ? 0 : (double)((c + r) % 5 + 1);
        for (int c = 0; c < C; c++) t[r * C + c] = (ag_real)(c % 7 == 3 ? 0 : ((c + r) % 5 + 1) / mass);
    }
    return ag_kl_div_soft(x[0], t);
}

/* The rng seeded the same for both runs: the mask the device draws must be the CPU's. */
static ag_tensor *f_dropout_09(ag_tensor **x) { return dropout_seeded(x[0], 0.9, true); }
static ag_tensor *f_dropout_keep1_plain(ag_tensor **x) { return dropout_seeded(x[0], 1.0, true); }
static ag_tensor *f_dropout_eval_plain(ag_tensor **x) { return dropout_seeded(x[0], 0.5, false); }
static ag_tensor *f_copies4_07(ag_tensor **x) { return copies_seeded(x[0], 4, 0.7, true); }
static ag_tensor *f_copies3_09(ag_tensor **x) { return copies_seeded(x[0], 3, 0.9, true); }
static ag_tensor *f_copies8_05(ag_tensor **x) { return copies_seeded(x[0], 8, 0.5, true); }
static ag_tensor *f_copies4_eval(ag_tensor **x) { return copies_seeded(x[0], 4, 0.5, false); }
static ag_tensor *f_planes_07(ag_tensor **x) { return planes_seeded(x[0], 0.7, true); }
static ag_tensor *f_planes_09(ag_tensor **x) { return planes_seeded(x[0], 0.9, true); }

/* ag_last_positions (models/layers.c): the last valid row, 0 for the empty example */
static ag_tensor *f_last_positions(ag_tensor **in) { return ag_last_positions(in[0], (const int32_t[]){4, 0, 1}); }
static ag_tensor *f_last_positions_full(ag_tensor **in) { return ag_last_positions(in[0], NULL); }

const op_case shape_cases[] = {
    {"ref_differences/[3,4] g1", x_34, f_refdiff_g1, 0, 0},
    {"ref_differences/[2,3,4] d1", x_234, f_refdiff_d1, 0, 0},
    {"ref_differences/[7] g6", x_7, f_refdiff_1d, 0, 0},
    {"ref_differences/used_twice", x_3_15, f_refdiff_twice, 0, 0},
    {"ref_differences/equals_slices", x_3_15, f_refdiff_vs_slices, .flags = OPCASE_DIFFERENCE},
    {"max_over_time/lengths_1_0_4_2", x_distinct_443, f_max_over_time_1042, 0, 0},
    {"max_over_time/N1_lengths_1_0", x_213, f_max_over_time_n1, 0, 0},
    {"zero_padding/lengths_1_0_4_2", x_distinct_443, f_zero_padding_1042, 0, 0},
    {"permute/heads_0213", x_2345, f_perm_heads, 0, 0},
    {"permute/3102", x_2345, f_perm_3102, 0, 0},
    {"permute/1230", x_2345, f_perm_1230, 0, 0},
    {"permute/identity", x_2345, f_perm_identity, 0, 0},
    {"permute/size1_dims", x_1314, f_perm_3102, 0, 0},
    {"permute/3d", x_234, f_perm_201, 0, 0},
    {"permute/2d", x_34, f_perm_10, 0, 0},
    {"permute/1d", x_7, f_perm_1d, 0, 0},
    {"permute/roundtrip", x_2345, f_perm_roundtrip, 0, 0},
    {"transpose/last_two", x_234, f_transpose_last, 0, 0},
    {"transpose/0_2", x_234, f_transpose_02, 0, 0},
    {"transpose/2d_row", x_1_5, f_transpose_last, 0, 0},
    {"transpose/4d_last_two", x_1314, f_transpose_last, 0, 0},
    {"transpose/same_axis", x_234, f_transpose_same, 0, 0},
    {"concat/axis0_3_inputs", cat_axis0, f_cat0, 0, 0},
    {"concat/axis1_3_inputs", cat_axis1, f_cat1, 0, 0},
    {"concat/axis2_3_inputs", cat_axis2, f_cat_last, 0, 0},
    {"concat/4d_last_axis", cat_4d_axis3, f_cat_last, 0, 0},
    {"concat/1d", cat_1d, f_cat0, 0, 0},
    {"concat/2_inputs", cat_axis0, f_cat_two, 0, 0},
    {"concat/1_input", cat_axis1, f_cat_single, 0, 0},
    {"concat/frozen_input", cat_two_and_frozen, f_cat_last, 0, 0},
    {"concat/11_inputs_repeated", cat_two_and_frozen, f_cat_many_repeated, 0, 0},
    {"slice/axis0_view", x_523, f_slice_axis0, 0, 0},
    {"slice/middle_axis", x_234, f_slice_mid, 0, 0},
    {"slice/last_axis_len1", x_234, f_slice_last_len1, 0, 0},
    {"slice/full_range", x_234, f_slice_full, 0, 0},
    {"slice/view_after_size1", x_1234, f_slice_view_after_1, 0, 0},
    {"slice/4d_len1", x_2345, f_slice_last_len1, 0, 0},
    {"slice/overlapping", x_523, f_slice_overlap, 0, 0},
    {"slice/of_slice", x_234, f_slice_of_slice, 0, 0},
    {"index_select/rows_repeated", x_34, f_isel_rows_repeated, 0, 0},
    {"index_select/middle_axis", x_234, f_isel_mid, 0, 0},
    {"index_select/last_axis_repeated", x_234, f_isel_last, 0, 0},
    {"index_select/one_index", x_523, f_isel_one, 0, 0},
    {"reverse_padded/lengths_5_1_0_3", x_453, f_reverse_lengths, 0, 0},
    {"reverse_padded/4d_no_lengths", x_2345, f_reverse_all, 0, 0},
    {"reverse_padded/twice_is_identity", x_453, f_reverse_twice, .flags = OPCASE_DIFFERENCE},
    {"reverse_padded/equals_index_select", x_453, f_reverse_vs_select, .flags = OPCASE_DIFFERENCE},
    {"embedding/2d_ids_repeated", emb_table, f_emb_2d, 0, 0},
    {"embedding/1d_ids", emb_table, f_emb_1d, 0, 0},
    {"embedding/3d_ids_d1", emb_table_d1, f_emb_3d_ids, 0, 0},
    {"embedding/one_id", emb_table, f_emb_scalar_id, 0, 0},
    {"embedding/then_pool", emb_table, f_emb_then_pool, 0, 0},
    {"cross_entropy/2d", logits_45, f_ce, 0, 0},
    {"cross_entropy/ignore_rows", logits_45, f_ce_ignore, 0, 0},
    {"cross_entropy/ignore_index_is_class", logits_45, f_ce_ignore_is_class, 0, 0},
    {"cross_entropy/all_ignored", logits_45, f_ce_all_ignored, 0, 0},
    {"cross_entropy/3d_logits", logits_234, f_ce_3d, 0, 0},
    {"cross_entropy/1d_logits", logits_1d, f_ce_1d, 0, 0},
    {"cross_entropy/one_class", logits_c1, f_ce_c1, 0, 0},
    {"cross_entropy/large_logits", logits_large, f_ce_large, 0, 0},
    {"cross_entropy/large_logits_saturated", logits_large, f_ce_large_wrong, 0, 0},
    {"cross_entropy/after_linear", ce_linear, f_ce_linear, 0, 0},
    {"linear_t_cross_entropy/lm_padding", lce_tied, f_lce_tied, 0, 0},
    {"linear_t_cross_entropy/no_bias", lce_tied, f_lce_tied_nobias, 0, 0},
    {"linear_t_cross_entropy/large_logits", lce_large, f_lce_large, 0, 0},
    {"linear_t_cross_entropy/minus_unfused", lce_tied, f_lce_minus_unfused, .flags = OPCASE_DIFFERENCE},
    {"linear_t_cross_entropy/used_twice", lce_tied, f_lce_twice, 0, 0},
    {"linear_cross_entropy/2d", lce_plain, f_lce_plain, 0, 0},
    {"linear_cross_entropy/all_ignored", lce_plain, f_lce_all_ignored, 0, 0},
    {"linear_cross_entropy/large_logits", lce_plain_large, f_lce_plain_large, 0, 0},
    {"linear_t_cross_entropy/one_row", lce_one_row, f_lce_one_row, 0, 0},
    {"linear_t_cross_entropy/all_ignored", lce_tied, f_lce_t_all_ignored, 0, 0},
    {"cross_entropy_smoothed/ignore_rows", logits_45, f_ce_smoothed, 0, 0},
    {"cross_entropy_smoothed/large_logits", logits_hundreds, f_ce_smoothed_large, 0, 0},
    {"cross_entropy_smoothed/one_class", logits_c1, f_ce_smoothed_c1, 0, 0},
    {"cross_entropy_smoothed/equals_composed", logits_45, f_ce_smoothed_vs_composed, .flags = OPCASE_DIFFERENCE},
    {"linear_t_cross_entropy_smoothed/lm_padding", lce_tied, f_lce_smoothed, 0, 0},
    {"linear_t_cross_entropy_smoothed/large_logits", lce_large, f_lce_smoothed_large, 0, 0},
    {"linear_t_cross_entropy_smoothed/minus_unfused", lce_tied, f_lce_smoothed_minus_unfused, .flags = OPCASE_DIFFERENCE},
    {"linear_cross_entropy_smoothed/2d", lce_plain, f_lce_plain_smoothed, 0, 0},
    {"kl_div_soft/tai_targets", logits_45, f_kl_tai, 0, 0},
    {"kl_div_soft/3d_logits", logits_234, f_kl_3d, 0, 0},
    {"kl_div_soft/1d_logits", logits_1d, f_kl_1d, 0, 0},
    {"kl_div_soft/one_class", logits_c1, f_kl_c1, 0, 0},
    {"kl_div_soft/large_logits", logits_large, f_kl_large, 0, 0},
    {"kl_div_soft/large_logits_saturated", logits_large, f_kl_large_saturated, 0, 0},
    {"kl_div_soft/after_linear", ce_linear, f_kl_linear, 0, 0},
    {"mse/both_grads", mse_pair, f_mse, 0, 0},
    {"mse/fixed_target", mse_fixed_target, f_mse, 0, 0},
    {"mse/one_element", mse_one, f_mse, 0, 0},
    {"dropout/keep_0.7", x_34, f_dropout_07, 0, 0},
    {"dropout/keep_0.5_4d", x_2345, f_dropout_05, 0, 0},
    {"dropout/keep_1_identity", x_234, f_dropout_keep1, 0, 0},
    {"dropout/eval_identity", x_234, f_dropout_eval, 0, 0},
    {"dropout/then_tanh", x_523, f_dropout_then_tanh, 0, 0},
    {"dropout_copies/4_keep_0.7_tanh", x_356, f_copies4_tanh, 0, 0},
    {"dropout_copies/1_copy", x_356, f_copies1_tanh, 0, 0},
    {"dropout_copies/eval", x_356, f_copies_eval, 0, 0},
    {"dropout_copies/times_x", x_356, f_copies_times_x, 0, 0},
    {"dropout_copies/keep_1_times_x", x_356, f_copies_keep1_times_x, 0, 0},
    {"dropout_copies/1d", x_7, f_copies4_tanh, 0, 0},
    {"dropout_copies/equals_calls", x_356, f_copies_minus_calls, .flags = OPCASE_DIFFERENCE},
    {"dropout_copies/cuda_graphs", x_356, f_copies_graphs, 0, 0},
    {"dropout_copies/drawn_equals_drawing", x_356, f_copies_drawn_minus_copies, .flags = OPCASE_DIFFERENCE},
    {"dropout_copies/drawn_eval_no_draws", x_356, f_copies_drawn_eval, 0, 0},
    {"dropout_planes/2_keep_0.7_tanh", x_2356, f_planes_tanh, 0, 0},
    {"dropout_planes/1_plane", x_1314, f_planes_tanh, 0, 0},
    {"dropout_planes/eval", x_2356, f_planes_eval, 0, 0},
    {"dropout_planes/times_x", x_2356, f_planes_times_x, 0, 0},
    {"dropout_planes/2d_one_row_a_plane", x_34, f_planes_tanh, 0, 0},
    {"dropout_planes/equals_calls", x_2356, f_planes_minus_calls, .flags = OPCASE_DIFFERENCE},
    {"dropout_planes/equals_calls_2d", x_34, f_planes_minus_calls, .flags = OPCASE_DIFFERENCE},
    {"dropout_planes/cuda_graphs", x_2356, f_planes_graphs, 0, 0},
    /* ---- the device's sizes ---- */
    /* permute and transpose: every axis of 3-D and 4-D shapes */
    UNIFORM_CASE("permute [2,3,5,37] (3,1,2,0)", f_permute_3120, -1, 1, DIMS(2, 3, 5, 37)),
    UNIFORM_CASE("permute [2,3,5,37] (0,2,1,3)", f_permute_0213, -1, 1, DIMS(2, 3, 5, 37)),
    UNIFORM_CASE("permute [3,1,33,4] (2,3,0,1)", f_permute_2301, -1, 1, DIMS(3, 1, 33, 4)),
    UNIFORM_CASE("permute [4,33,5] (2,0,1)", f_permute_201, -1, 1, DIMS(4, 33, 5)),
    UNIFORM_CASE("transpose [33,37] 0,1", f_transpose_01, -1, 1, DIMS(33, 37)),
    UNIFORM_CASE("transpose [1,37] 0,1", f_transpose_01, -1, 1, DIMS(1, 37)),
    UNIFORM_CASE("transpose [5,7,33] 0,2", f_transpose_02, -1, 1, DIMS(5, 7, 33)),
    UNIFORM_CASE("transpose [5,7,33] 1,2", f_transpose_12, -1, 1, DIMS(5, 7, 33)),
    UNIFORM_CASE("transpose [5,7,33] 0,1", f_transpose_01, -1, 1, DIMS(5, 7, 33)),
    UNIFORM_CASE("transpose [2,3,5,7] 1,3", f_transpose_13, -1, 1, DIMS(2, 3, 5, 7)),
    UNIFORM_CASE("transpose twice [9,9] (grad adds)", f_transpose_twice, -1, 1, DIMS(9, 9)),
    /* concat of 3 pieces along the outer, middle and inner axes */
    UNIFORM_CASE("concat axis 0 [1|3|2,5,33]", f_cat0, -1, 1, DIMS(1, 5, 33), DIMS(3, 5, 33), DIMS(2, 5, 33)),
    UNIFORM_CASE("concat axis 1 [2,5|3|1,7]", f_cat1, -1, 1, DIMS(2, 5, 7), DIMS(2, 3, 7), DIMS(2, 1, 7)),
    UNIFORM_CASE("concat axis 2 [4,5,1|33|7]", f_concat2, -1, 1, DIMS(4, 5, 1), DIMS(4, 5, 33), DIMS(4, 5, 7)),
    UNIFORM_CASE("concat x0,x1,x0 (grad sums)", f_concat_repeat, -1, 1, DIMS(3, 37), DIMS(3, 5)),
    /* slice: a view (outer 1), a middle axis, length 1 at the end, overlapping */
    UNIFORM_CASE("slice [5,7,33] axis 0 [1,4)", f_slice0, -1, 1, DIMS(5, 7, 33)),
    UNIFORM_CASE("slice [3,37,5] axis 1 [5,30)", f_slice1, -1, 1, DIMS(3, 37, 5)),
    UNIFORM_CASE("slice [3,5,37] axis 2 [36,37)", f_slice2, -1, 1, DIMS(3, 5, 37)),
    UNIFORM_CASE("slice overlapping [4,33]", f_slice_overlap_33, -1, 1, DIMS(4, 33)),
    /* gathers: repeated indices sum their gradients (one id, d = 1: embedding/one_id, /3d_ids_d1) */
    UNIFORM_CASE("index_select [7,5,3] axis 0", f_select0, -1, 1, DIMS(7, 5, 3)),
    UNIFORM_CASE("index_select [3,7,33] axis 1", f_select1, -1, 1, DIMS(3, 7, 33)),
    UNIFORM_CASE("index_select [2,3,7] axis 2", f_select2, -1, 1, DIMS(2, 3, 7)),
    UNIFORM_CASE("index_select twice [3,7,33] (adds)", f_select_twice, -1, 1, DIMS(3, 7, 33)),
    UNIFORM_CASE("index_select [4,3] no index", f_select_empty, -1, 1, DIMS(4, 3)),
    UNIFORM_CASE("index_select [2,5,37] one index", f_select_one, -1, 1, DIMS(2, 5, 37)),
    UNIFORM_CASE("embedding [37,33] ids [4,9] pad 0", f_embedding, -1, 1, DIMS(37, 33)),
    UNIFORM_CASE("embedding twice [5,33] (adds)", f_embedding_twice, -1, 1, DIMS(5, 33)),
    /* cross-entropy: ignored rows, odd class counts, 3-D logits, large logits, all ignored
     * (1 class: cross_entropy/one_class) */
    UNIFORM_CASE("cross_entropy [12,37] ignore", f_ce_spread, -3, 3, DIMS(12, 37)),
    UNIFORM_CASE("cross_entropy [3,4,301]", f_ce_spread_all_counted, -3, 3, DIMS(3, 4, 301)),
    UNIFORM_CASE("cross_entropy [6,33] logits 1e3", f_ce_spread, -1000, 1000, DIMS(6, 33)),
    UNIFORM_CASE("cross_entropy [4,37] all ignored", f_ce_spread_none_counted, -3, 3, DIMS(4, 37)),
    /* fused linear + cross-entropy: bias or not, W transposed, V 37/301, all ignored */
    UNIFORM_CASE("linear_ce [9,33]@[33,37]+b", f_lce_spread, -1, 1, DIMS(9, 33), DIMS(33, 37), DIMS(37)),
    UNIFORM_CASE("linear_ce [7,33]@[33,301]", f_lce_spread_nobias, -1, 1, DIMS(7, 33), DIMS(33, 301)),
    UNIFORM_CASE("linear_t_ce [2,5,33]@[37,33]^T+b", f_lce_t_spread, -1, 1, DIMS(2, 5, 33), DIMS(37, 33), DIMS(37)),
    UNIFORM_CASE("linear_ce all ignored", f_lce_spread_none_counted, -1, 1, DIMS(4, 33), DIMS(33, 37), DIMS(37)),
    UNIFORM_CASE("cross_entropy smoothed [12,37] ignore", f_ce_spread_smoothed, -3, 3, DIMS(12, 37)),
    UNIFORM_CASE("cross_entropy smoothed [6,301] logits 1e3", f_ce_spread_smoothed, -1000, 1000, DIMS(6, 301)),
    UNIFORM_CASE("linear_t_ce smoothed [2,5,33]@[301,33]^T+b", f_lce_t_spread_smoothed, -1, 1, DIMS(2, 5, 33),
                 DIMS(301, 33), DIMS(301)),
    /* MSE and KL to a soft target (zeros in the target, large logits; mse [1]: mse/one_element) */
    UNIFORM_CASE("mse [7,33]", f_mse, -2, 2, DIMS(7, 33), DIMS(7, 33)),
    UNIFORM_CASE("kl_div_soft [6,37]", f_kl_spread, -3, 3, DIMS(6, 37)),
    UNIFORM_CASE("kl_div_soft [3,301] logits 1e3", f_kl_spread, -1000, 1000, DIMS(3, 301)),
    /* dropout: the device draws the CPU's mask, 2-D and 3-D (row keyed), keep 0.5, 0.9, 1, eval */
    UNIFORM_CASE("dropout [4,37] keep 0.5", f_dropout_05, -1, 1, DIMS(4, 37)),
    UNIFORM_CASE("dropout [3,5,33] keep 0.9", f_dropout_09, -1, 1, DIMS(3, 5, 33)),
    UNIFORM_CASE("dropout [1000] keep 0.5", f_dropout_05, -1, 1, DIMS(1000)),
    /* rows of several 4096-element mask blocks, and tails that are not whole draws of 16 */
    UNIFORM_CASE("dropout [3,4100] keep 0.5", f_dropout_05, -1, 1, DIMS(3, 4100)),
    UNIFORM_CASE("dropout [8209] keep 0.9", f_dropout_09, -1, 1, DIMS(8209)),
    UNIFORM_CASE("dropout [4,37] keep 1", f_dropout_keep1_plain, -1, 1, DIMS(4, 37)),
    UNIFORM_CASE("dropout [4,37] eval", f_dropout_eval_plain, -1, 1, DIMS(4, 37)),
    /* dropout copies: every plane the CPU's mask, over several blocks too; 8, the most */
    UNIFORM_CASE("dropout_copies 4 [4,37] keep 0.7", f_copies4_07, -1, 1, DIMS(4, 37)),
    UNIFORM_CASE("dropout_copies 3 [3,4100] keep 0.9", f_copies3_09, -1, 1, DIMS(3, 4100)),
    UNIFORM_CASE("dropout_copies 8 [2,3,33] keep 0.5", f_copies8_05, -1, 1, DIMS(2, 3, 33)),
    UNIFORM_CASE("dropout_copies 4 [4,37] eval", f_copies4_eval, -1, 1, DIMS(4, 37)),
    /* dropout planes: a plane's rows of 1 and of several blocks (rows 4100 long) */
    UNIFORM_CASE("dropout_planes [4,37] keep 0.7", f_planes_07, -1, 1, DIMS(4, 37)),
    UNIFORM_CASE("dropout_planes [2,2,4100] keep 0.9", f_planes_09, -1, 1, DIMS(2, 2, 4100)),
    UNIFORM_CASE("ref_differences [33,185] g4", f_refdiff_g4, -2, 2, DIMS(33, 185)),
    UNIFORM_CASE("zero_padding [3,5,37] len 5,0,2", f_zero_padding, -2, 2, DIMS(3, 5, 37)),
    UNIFORM_CASE("zero_padding [3,5,2,33] len 5,0,2", f_zero_padding, -2, 2, DIMS(3, 5, 2, 33)),
    UNIFORM_CASE("zero_padding [3,5] times x", f_zero_padding_twice, -2, 2, DIMS(3, 5)),
    UNIFORM_CASE("max_over_time [3,5,37] len 5,0,2", f_max_over_time, -2, 2, DIMS(3, 5, 37)),
    UNIFORM_CASE("last_positions [3,4,37] len 4,0,1", f_last_positions, -2, 2, DIMS(3, 4, 37)),
    UNIFORM_CASE("last_positions [3,4,37] no lengths", f_last_positions_full, -2, 2, DIMS(3, 4, 37)),
    UNIFORM_CASE("ref_differences [1500] g4", f_refdiff_g4, -2, 2, DIMS(1500)),
    {NULL, NULL, NULL, 0, 0},
};
