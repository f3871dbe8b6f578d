/* cases_shape.c - op cases for permute/transpose, concat, slice,
 * index_select, embedding, cross-entropy, soft-target KL, mse and dropout: several shapes
 * each, size-1 dims, repeated indices and the edge cases of the losses. */
#include "opcase.h"

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

const op_case shape_cases[] = {
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
    {"linear_t_cross_entropy/minus_unfused", lce_tied, f_lce_minus_unfused, 0, 0},
    {"linear_t_cross_entropy/used_twice", lce_tied, f_lce_twice, 0, 0},
    {"linear_cross_entropy/2d", lce_plain, f_lce_plain, 0, 0},
    {"linear_cross_entropy/all_ignored", lce_plain, f_lce_all_ignored, 0, 0},
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
    {NULL, NULL, NULL, 0, 0},
};
