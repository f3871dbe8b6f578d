/* cases_core.c - op cases for elementwise ops, reductions, matmul, linear,
 * dense, reshape and ag_to: several shapes each, broadcasting and size-1
 * dims included; then the same ops at the device's sizes (widths 33, 37,
 * 1031 off multiples of 32, large arguments, every reduction axis). */
#include "opcase.h"

#include <math.h>

#include <string.h>

/* ---- binary ops with broadcasting ---- */

#define BINARY_SETUP(NAME, SA, SB, LO, HI)                                       \
    static int NAME(ag_tensor **in, ag_rng *r) {                                 \
        in[0] = tc_away(r, LO, HI, true, SA);                                    \
        in[1] = tc_away(r, LO, HI, true, SB);                                    \
        return 2;                                                                \
    }

BINARY_SETUP(same_34, SHAPE(3, 4), SHAPE(3, 4), 0.2, 2.0)
BINARY_SETUP(row_vec, SHAPE(2, 3, 4), SHAPE(4), 0.2, 2.0)
BINARY_SETUP(col_vec, SHAPE(2, 3, 4), SHAPE(2, 3, 1), 0.2, 2.0)
BINARY_SETUP(mask_like, SHAPE(2, 2, 3, 3), SHAPE(3, 3), 0.2, 2.0)
BINARY_SETUP(both_ways, SHAPE(3, 1), SHAPE(1, 4), 0.2, 2.0)
BINARY_SETUP(scalar_rhs, SHAPE(2, 5), SHAPE(1), 0.2, 2.0)
/* The broadcast operand on the left, and broadcasting in middle dims. */
BINARY_SETUP(col_vec_lhs, SHAPE(2, 3, 1), SHAPE(2, 3, 4), 0.2, 2.0)
BINARY_SETUP(row_vec_lhs, SHAPE(5), SHAPE(3, 2, 5), 0.2, 2.0)
BINARY_SETUP(middle_dims, SHAPE(2, 1, 3, 1), SHAPE(1, 4, 1, 5), 0.2, 2.0)
BINARY_SETUP(heads_mask, SHAPE(2, 3, 4, 4), SHAPE(2, 1, 1, 4), 0.2, 2.0)

static int with_0d(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 0.2, 2.0, true, SHAPE(2, 3));
    in[1] = tc_away(r, 0.2, 2.0, true, 0, NULL);
    return 2;
}

static int same_tensor_twice(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 0.2, 2.0, true, SHAPE(3, 4));
    return 1;
}

static ag_tensor *f_add(ag_tensor **in) { return ag_add(in[0], in[1]); }
static ag_tensor *f_sub(ag_tensor **in) { return ag_sub(in[0], in[1]); }
static ag_tensor *f_mul(ag_tensor **in) { return ag_mul(in[0], in[1]); }
static ag_tensor *f_div(ag_tensor **in) { return ag_div(in[0], in[1]); }
static ag_tensor *f_maximum(ag_tensor **in) { return ag_maximum(in[0], in[1]); }
static ag_tensor *f_square_by_mul(ag_tensor **in) { return ag_mul(in[0], in[0]); }
static ag_tensor *f_add_scalar(ag_tensor **in) { return ag_add_scalar(in[0], 0.7); }
static ag_tensor *f_mul_scalar(ag_tensor **in) { return ag_mul_scalar(in[0], -1.3); }
static ag_tensor *f_neg(ag_tensor **in) { return ag_neg(in[0]); }

/* ---- unary ops ---- */

static int vec_any(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.05, 3.0, true, SHAPE(2, 3, 4)); return 1; }
static int vec_pos(ag_tensor **in, ag_rng *r) { in[0] = tc_uniform(r, 0.2, 3.0, true, SHAPE(3, 5)); return 1; }
static int vec_1(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.05, 2.0, true, SHAPE(1)); return 1; }
/* Large magnitudes: the stable forms must stay finite with exact gradients. */
static int vec_large(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 20.0, 60.0, true, SHAPE(2, 4));
    return 1;
}

/* Magnitudes ~1e3, the standard's large logits (multiples of 1/64: the
 * f32 build sees the same numbers): e^-|x| underflows to exactly 0, so only
 * the stable forms give finite values and exact 0/1 gradients. */
static int vec_1e3(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 900, 1100, true, SHAPE(2, 4));
    for (int64_t i = 0; i < in[0]->size; i++) in[0]->data[i] = (ag_real)(round((double)in[0]->data[i] * 64) / 64);
    return 1;
}

static ag_tensor *f_exp(ag_tensor **in) { return ag_exp(in[0]); }
static ag_tensor *f_log(ag_tensor **in) { return ag_log(in[0]); }
static ag_tensor *f_sqrt(ag_tensor **in) { return ag_sqrt(in[0]); }
static ag_tensor *f_square(ag_tensor **in) { return ag_square(in[0]); }
static ag_tensor *f_abs(ag_tensor **in) { return ag_abs(in[0]); }
static ag_tensor *f_tanh(ag_tensor **in) { return ag_tanh(in[0]); }
static ag_tensor *f_sigmoid(ag_tensor **in) { return ag_sigmoid(in[0]); }
static ag_tensor *f_relu(ag_tensor **in) { return ag_relu(in[0]); }
static ag_tensor *f_elu(ag_tensor **in) { return ag_elu(in[0]); }
static ag_tensor *f_softplus(ag_tensor **in) { return ag_softplus(in[0]); }
static ag_tensor *f_log_sigmoid(ag_tensor **in) { return ag_log_sigmoid(in[0]); }
static ag_tensor *f_gelu(ag_tensor **in) { return ag_gelu(in[0]); }
static ag_tensor *f_silu(ag_tensor **in) { return ag_silu(in[0]); }
/* the gated unit over [..., 2F]: each activation, and equal to its composition */
static ag_tensor *f_glu_sigmoid(ag_tensor **in) { return ag_glu(in[0], AG_ACT_SIGMOID); }
static ag_tensor *f_glu_silu(ag_tensor **in) { return ag_glu(in[0], AG_ACT_SILU); }
static ag_tensor *f_glu_gelu(ag_tensor **in) { return ag_glu(in[0], AG_ACT_GELU); }
static ag_tensor *f_glu_relu(ag_tensor **in) { return ag_glu(in[0], AG_ACT_RELU); }
static ag_tensor *f_glu_elu(ag_tensor **in) { return ag_glu(in[0], AG_ACT_ELU); }
static ag_tensor *f_glu_tanh(ag_tensor **in) { return ag_glu(in[0], AG_ACT_TANH); }
static ag_tensor *f_glu_none(ag_tensor **in) { return ag_glu(in[0], AG_ACT_NONE); }
static ag_tensor *f_glu_vs_composed(ag_tensor **in) {
    int last = in[0]->ndim - 1, F = in[0]->shape[last] / 2;
    ag_tensor *composed = ag_mul(ag_silu(ag_slice(in[0], last, 0, F)), ag_slice(in[0], last, F, 2 * F));
    return tc_difference(ag_sub(ag_glu(in[0], AG_ACT_SILU), composed), ag_glu(in[0], AG_ACT_SILU));
}
static ag_tensor *f_clamp(ag_tensor **in) { return ag_clamp(in[0], -1.0, 1.5); }

/* ---- reductions ---- */

static int red_234(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 3, 4)); return 1; }
static int red_1(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(1, 1)); return 1; }
/* Distinct values so max has no ties to make finite differences ambiguous. */
static int red_distinct(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, 0, 1, true, SHAPE(2, 3, 4));
    for (int64_t i = 0; i < in[0]->size; i++) in[0]->data[i] += (ag_real)(0.1 * (double)((i * 7) % 24));
    return 1;
}

static ag_tensor *f_sum(ag_tensor **in) { return ag_sum(in[0]); }
static ag_tensor *f_mean(ag_tensor **in) { return ag_mean(in[0]); }
static ag_tensor *f_sum0(ag_tensor **in) { return ag_sum_axis(in[0], 0, false); }
static ag_tensor *f_sum1k(ag_tensor **in) { return ag_sum_axis(in[0], 1, true); }
static ag_tensor *f_sum_last(ag_tensor **in) { return ag_sum_axis(in[0], -1, false); }
static ag_tensor *f_mean1(ag_tensor **in) { return ag_mean_axis(in[0], 1, false); }
static ag_tensor *f_mean_last_k(ag_tensor **in) { return ag_mean_axis(in[0], -1, true); }
static ag_tensor *f_max0(ag_tensor **in) { return ag_max_axis(in[0], 0, false); }
static ag_tensor *f_max1(ag_tensor **in) { return ag_max_axis(in[0], 1, true); }
static ag_tensor *f_max_last(ag_tensor **in) { return ag_max_axis(in[0], -1, false); }

/* ---- matmul and linear ---- */

#define MM_SETUP(NAME, SA, SB)                                                   \
    static int NAME(ag_tensor **in, ag_rng *r) {                                 \
        in[0] = tc_uniform(r, -1, 1, true, SA);                                  \
        in[1] = tc_uniform(r, -1, 1, true, SB);                                  \
        return 2;                                                                \
    }

MM_SETUP(mm_2d, SHAPE(3, 4), SHAPE(4, 5))
MM_SETUP(mm_2d_ta, SHAPE(4, 3), SHAPE(4, 5))
MM_SETUP(mm_2d_tb, SHAPE(3, 4), SHAPE(5, 4))
MM_SETUP(mm_2d_tt, SHAPE(4, 3), SHAPE(5, 4))
MM_SETUP(mm_3d, SHAPE(2, 3, 4), SHAPE(2, 4, 5))
MM_SETUP(mm_4d_tb, SHAPE(2, 2, 3, 4), SHAPE(2, 2, 5, 4))
MM_SETUP(mm_4d_ta, SHAPE(2, 2, 4, 3), SHAPE(2, 2, 4, 5))
MM_SETUP(mm_shared_b, SHAPE(2, 3, 4), SHAPE(4, 5))
MM_SETUP(mm_shared_b_t, SHAPE(2, 3, 4), SHAPE(5, 4))
MM_SETUP(mm_shared_b_ta, SHAPE(2, 4, 3), SHAPE(4, 5))
MM_SETUP(mm_shared_b_tt, SHAPE(2, 4, 3), SHAPE(5, 4))
MM_SETUP(mm_shared_a, SHAPE(3, 4), SHAPE(2, 2, 4, 5))
MM_SETUP(mm_shared_a_t, SHAPE(4, 3), SHAPE(2, 5, 4))
MM_SETUP(mm_ones, SHAPE(1, 1), SHAPE(1, 1))

/* Products with a side of 1 (level-2 BLAS underneath): op(A) [M,K] op(B)
 * [K,N] with M, N or K = 1, stored transposed where the case says so. */
MM_SETUP(mv, SHAPE(5, 4), SHAPE(4, 1))
MM_SETUP(mv_tt, SHAPE(4, 5), SHAPE(1, 4))
MM_SETUP(vm, SHAPE(1, 4), SHAPE(4, 3))
MM_SETUP(vm_tt, SHAPE(4, 1), SHAPE(3, 4))
MM_SETUP(outer, SHAPE(5, 1), SHAPE(1, 3))
MM_SETUP(outer_tt, SHAPE(1, 5), SHAPE(3, 1))
MM_SETUP(mv_batched, SHAPE(2, 5, 4), SHAPE(4, 1))

/* Batched products whose left operand is zero past each example's length
 * (5, 3, 1), as attention weights and gradients at padded positions: the
 * products run on the live block only. */
static const int padded_len[3] = {5, 3, 1};
static void zero_past_length(ag_tensor *a, bool cols) {
    int R = a->shape[1], C = a->shape[2];
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < R; i++)
            for (int k = 0; k < C; k++)
                if (i >= padded_len[b] || (cols && k >= padded_len[b])) a->data[(b * R + i) * C + k] = 0;
}
static int mm_padded_square(ag_tensor **in, ag_rng *r) { /* p [3,5,5] zero past the length both ways, h [3,5,4] */
    in[0] = tc_away(r, 0.1, 1, true, SHAPE(3, 5, 5));
    zero_past_length(in[0], true);
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(3, 5, 4));
    return 2;
}
static int mm_padded_rows(ag_tensor **in, ag_rng *r) { /* dS [3,5,4] zero rows past the length, h [3,5,4] */
    in[0] = tc_away(r, 0.1, 1, true, SHAPE(3, 5, 4));
    zero_past_length(in[0], false);
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(3, 5, 4));
    return 2;
}
/* MPSAN's unit: a masked softmax over keys (padding masked both ways) then
 * the weighted sum of the values, gradients into scores and values. */
static ag_tensor *f_attend_padded(ag_tensor **in) {
    ag_tensor *mask = ag_tensor_new_host(3, (int[]){3, 5, 5});
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 25; i++)
            if (i / 5 >= padded_len[b] || i % 5 >= padded_len[b]) mask->data[b * 25 + i] = -INFINITY;
    return ag_matmul(ag_masked_softmax(in[0], tc_to_device_of(in[0], mask), 1.0), in[1]);
}

/* MPSAN's other masks: a band of keys 1 <= |k - q| <= 2 or 3 and a
 * triangle k < q leave the weights zero outside a span of k per row (per
 * column for p^T): the f32 kernel multiplies each tile of rows over its
 * span only (13 queries: tiles of 5, 4, 4 rows).  Forward p h and p^T h,
 * backward p^T dC or p dC on the spans, dC h^T in full. */
static int mm_banded(ag_tensor **in, ag_rng *r) { /* scores [2,13,13], values [2,13,3] */
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 13, 13));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(2, 13, 3));
    return 2;
}
static const ag_mask_spec band2 = {.faraway = 2}, band3 = {.faraway = 3}, past_keys = {.dir = AG_MASK_PAST};
static ag_tensor *f_attend_band(ag_tensor **in) {
    return ag_matmul(ag_masked_softmax(in[0], ag_mask(&band2, 13), 1.0), in[1]);
}
static ag_tensor *f_attend_band_ta(ag_tensor **in) {
    return ag_matmul_t(ag_masked_softmax(in[0], ag_mask(&band3, 13), 1.0), true, in[1], false);
}
static ag_tensor *f_attend_past(ag_tensor **in) {
    return ag_matmul(ag_masked_softmax(in[0], ag_mask(&past_keys, 13), 1.0), in[1]);
}

static ag_tensor *f_mm(ag_tensor **in) { return ag_matmul(in[0], in[1]); }
static ag_tensor *f_mm_ta(ag_tensor **in) { return ag_matmul_t(in[0], true, in[1], false); }
static ag_tensor *f_mm_tb(ag_tensor **in) { return ag_matmul_t(in[0], false, in[1], true); }
static ag_tensor *f_mm_tt(ag_tensor **in) { return ag_matmul_t(in[0], true, in[1], true); }

static int lin_3d(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(4, 5));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(5));
    return 3;
}
/* 200 rows: the bias gradient's column sums over 4 blocks of 64 rows, and
 * 4 x 130 partial sums, more than one GPU block (linear.cu: the last
 * block to finish adds them) */
static int lin_many_rows(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 100, 3));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(3, 130));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(130));
    return 3;
}
/* a weight that wants no gradient (a fixed gate) */
static int lerp_fixed_weight(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(4, 9));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(4, 9));
    in[2] = tc_uniform(r, 0, 1, false, SHAPE(4, 9));
    return 3;
}
static int lin_1row(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(4, 2));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(2));
    return 3;
}
static ag_tensor *f_linear(ag_tensor **in) { return ag_linear(in[0], in[1], in[2]); }
static ag_tensor *f_linear_nobias(ag_tensor **in) { return ag_linear(in[0], in[1], NULL); }

/* The packed paths need both sides of the product >= 16 (worth_packing). */
enum { IN = 16, OUT = 17 }; /* values in +-[0.1, 0.5] keep sums of 16 terms O(1) for the differences */

/* 80 rows, rows 5..24 and every 7th masked to 0 after the layer: their
 * gradient rows are exactly 0, and backward packs the other rows. */
static int lin_padded(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 0.1, 0.5, true, SHAPE(4, 20, IN));
    in[1] = tc_away(r, 0.1, 0.5, true, SHAPE(IN, OUT));
    in[2] = tc_away(r, 0.1, 0.5, true, SHAPE(OUT));
    in[3] = tc_uniform(r, 0, 1, false, SHAPE(4, 20, 1));
    for (int i = 0; i < 80; i++) in[3]->data[i] = (i >= 5 && i < 25) || i % 7 == 0 ? 0 : 1;
    return 4;
}
/* 80 rows of x, 30 of them all zero (padding after an embedding): forward
 * packs the other rows; the gradient reaches every row, the zero ones too. */
static int lin_zero_rows(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 0.1, 0.5, true, SHAPE(4, 20, IN));
    in[1] = tc_away(r, 0.1, 0.5, true, SHAPE(IN, OUT));
    in[2] = tc_away(r, 0.1, 0.5, true, SHAPE(OUT));
    for (int i = 0; i < 80; i++)
        if (i % 20 >= 13 || i == 3) memset(in[0]->data + i * IN, 0, IN * sizeof(ag_real));
    return 3;
}
/* A shared right operand (the LM's tied decoder x E^T): 80 rows, a third
 * of their gradients 0, so backward packs the other rows. */
static int mm_shared_padded(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 0.1, 0.5, true, SHAPE(4, 20, IN));
    in[1] = tc_away(r, 0.1, 0.5, true, SHAPE(OUT, IN));
    in[2] = tc_uniform(r, 0, 1, false, SHAPE(4, 20, 1));
    for (int i = 0; i < 80; i++) in[2]->data[i] = (i >= 5 && i < 25) || i % 7 == 0 ? 0 : 1;
    return 3;
}
static ag_tensor *f_mm_shared_padded_tb(ag_tensor **in) { return ag_mul(ag_matmul_t(in[0], false, in[1], true), in[2]); }
static ag_tensor *f_mm_shared_padded(ag_tensor **in) {
    return ag_mul(ag_matmul(in[0], ag_transpose(in[1], 0, 1)), in[2]);
}
static ag_tensor *f_linear_padded(ag_tensor **in) { return ag_mul(ag_linear(in[0], in[1], in[2]), in[3]); }
static ag_tensor *f_linear_padded_nobias(ag_tensor **in) { return ag_mul(ag_linear(in[0], in[1], NULL), in[3]); }

/* Zero rows on both sides: x's padding rows and dY's, the same rows
 * (backward reuses forward's packed x) or different ones (it packs anew). */
static int lin_zero_both(ag_tensor **in, ag_rng *r, bool same) {
    lin_zero_rows(in, r); /* x rows i % 20 >= 13 and 3 are zero */
    in[3] = tc_uniform(r, 0, 1, false, SHAPE(4, 20, 1));
    for (int i = 0; i < 80; i++) in[3]->data[i] = same ? !(i % 20 >= 13 || i == 3) : !(i % 20 < 4 || i == 50);
    return 4;
}
static int lin_zero_same(ag_tensor **in, ag_rng *r) { return lin_zero_both(in, r, true); }
static int lin_zero_other(ag_tensor **in, ag_rng *r) { return lin_zero_both(in, r, false); }

/* ag_dense: the activation fused into the linear, every kind, plain and on
 * the packed paths (zero rows of x and of the masked output). */
static ag_tensor *f_dense_relu(ag_tensor **in) { return ag_dense(in[0], in[1], in[2], AG_ACT_RELU); }
static ag_tensor *f_dense_elu(ag_tensor **in) { return ag_dense(in[0], in[1], in[2], AG_ACT_ELU); }
static ag_tensor *f_dense_tanh(ag_tensor **in) { return ag_dense(in[0], in[1], in[2], AG_ACT_TANH); }
static ag_tensor *f_dense_sigmoid(ag_tensor **in) { return ag_dense(in[0], in[1], in[2], AG_ACT_SIGMOID); }
static ag_tensor *f_dense_gelu(ag_tensor **in) { return ag_dense(in[0], in[1], in[2], AG_ACT_GELU); }
static ag_tensor *f_dense_silu_masked(ag_tensor **in) { return ag_mul(ag_dense(in[0], in[1], in[2], AG_ACT_SILU), in[3]); }
static ag_tensor *f_dense_none_nobias(ag_tensor **in) { return ag_dense(in[0], in[1], NULL, AG_ACT_NONE); }
static ag_tensor *f_dense_elu_masked(ag_tensor **in) { return ag_mul(ag_dense(in[0], in[1], in[2], AG_ACT_ELU), in[3]); }
static ag_tensor *f_dense_tanh_masked(ag_tensor **in) { return ag_mul(ag_dense(in[0], in[1], in[2], AG_ACT_TANH), in[3]); }

/* ag_linear_t: the weight stored [out, in], as a tied decoder's table. */
static int lin_t_3d(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(5, 4));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(5));
    return 3;
}
static int lin_t_padded(ag_tensor **in, ag_rng *r) {
    int n = lin_padded(in, r);
    in[1] = tc_away(r, 0.1, 0.5, true, SHAPE(OUT, IN));
    return n;
}
static int lin_t_zero_rows(ag_tensor **in, ag_rng *r) {
    int n = lin_zero_rows(in, r);
    in[1] = tc_away(r, 0.1, 0.5, true, SHAPE(OUT, IN));
    return n;
}
static ag_tensor *f_linear_t(ag_tensor **in) { return ag_linear_t(in[0], in[1], in[2]); }
static ag_tensor *f_linear_t_nobias(ag_tensor **in) { return ag_linear_t(in[0], in[1], NULL); }
static ag_tensor *f_linear_t_padded(ag_tensor **in) { return ag_mul(ag_linear_t(in[0], in[1], in[2]), in[3]); }

/* Grouped layers, W [G, in, out]: G independent layers in one op (MPSAN's
 * attention units), each group checked as a layer of its own would be. */
static int grp_elu(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(4, 3, 5, 6));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(4, 6, 7));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(4, 7));
    return 3;
}
static int grp_plain(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(3, 2, 5));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(3, 5, 4));
    return 2;
}
static int grp_one(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(1, 4, 3));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(1, 3, 5));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(1, 5));
    return 3;
}
/* 130 rows a group: 3 blocks of 64 rows (the last of 2), and 2 x 3 x 70
 * partial sums, over one GPU block's 256 threads (as lin_many_rows) */
static int grp_many_rows(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 130, 9));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(2, 9, 70));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(2, 70));
    return 3;
}
static int grp_t(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(2, 5, 4));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(2, 5));
    return 3;
}
/* 3 groups of 80 rows, zero rows of x (mask in[3]) and of dY (mask in[4]):
 * group 0 has 20 of each (packed), group 1 10 (an eighth: packed), group
 * 2 only 4 (not packed), so packed and plain groups sit side by side.
 * same: dY's zero rows are x's (backward reuses forward's packed x). */
static bool grp_row_zero(int g, int row, bool other) {
    int n = g == 0 ? 20 : g == 1 ? 10 : 4, first = other ? 80 - n : 3;
    return row >= first && row < first + n;
}
static int grp_padded(ag_tensor **in, ag_rng *r, bool same) {
    in[0] = tc_away(r, 0.1, 0.5, true, SHAPE(3, 80, IN));
    in[1] = tc_away(r, 0.1, 0.5, true, SHAPE(3, IN, OUT));
    in[2] = tc_away(r, 0.1, 0.5, true, SHAPE(3, OUT));
    in[3] = tc_uniform(r, 0, 1, false, SHAPE(3, 80, 1));
    in[4] = tc_uniform(r, 0, 1, false, SHAPE(3, 80, 1));
    for (int i = 0; i < 240; i++) {
        in[3]->data[i] = !grp_row_zero(i / 80, i % 80, false);
        in[4]->data[i] = !grp_row_zero(i / 80, i % 80, !same);
    }
    return 5;
}
static int grp_padded_same(ag_tensor **in, ag_rng *r) { return grp_padded(in, r, true); }
static int grp_padded_other(ag_tensor **in, ag_rng *r) { return grp_padded(in, r, false); }
static ag_tensor *f_linear_grp_padded(ag_tensor **in) {
    return ag_mul(ag_linear(ag_mul(in[0], in[3]), in[1], in[2]), in[4]);
}
static ag_tensor *f_dense_elu_grp_padded(ag_tensor **in) {
    return ag_mul(ag_dense(ag_mul(in[0], in[3]), in[1], in[2], AG_ACT_ELU), in[4]);
}
static ag_tensor *f_dense_tanh_grp_padded(ag_tensor **in) {
    return ag_mul(ag_dense(ag_mul(in[0], in[3]), in[1], NULL, AG_ACT_TANH), in[4]);
}

/* ---- reshape, and a tensor feeding two consumers ---- */

static ag_tensor *f_reshape(ag_tensor **in) { return ag_reshape(in[0], 2, (int[]){4, -1}); }
static ag_tensor *f_reshape_chain(ag_tensor **in) {
    ag_tensor *v = ag_reshape(in[0], 3, (int[]){3, 2, 4});
    return ag_mul(ag_tanh(v), ag_reshape(in[0], 3, (int[]){3, 2, 4}));
}
static ag_tensor *f_two_uses(ag_tensor **in) { /* x used twice: both contributions must add */
    return ag_add(ag_exp(in[0]), ag_mul(in[0], in[0]));
}

/* ---- the device's sizes ---- */

/* A view twice, then an op reading it: the gradient goes back through both. */
static ag_tensor *f_reshape_twice(ag_tensor **x) {
    return ag_tanh(ag_reshape(ag_reshape(x[0], 1, (int[]){-1}), 3, (int[]){7, 1, 37}));
}
/* Two views of one input: the second backward adds. */
static ag_tensor *f_reshape_sum(ag_tensor **x) {
    return ag_add(ag_reshape(x[0], 1, (int[]){-1}), ag_reshape(x[0], 1, (int[]){-1}));
}
static ag_tensor *f_reshape_rows_33(ag_tensor **x) { return ag_reshape(x[0], 2, (int[]){-1, 33}); }
static ag_tensor *f_dense_sigmoid_nobias(ag_tensor **in) { return ag_dense(in[0], in[1], NULL, AG_ACT_SIGMOID); }
/* ag_to the CPU and back inside a graph: the output is on the CPU. */
static ag_tensor *f_to_and_back(ag_tensor **in) { return ag_to(ag_mul(in[0], in[0]), AG_CPU); }

#define AXIS_CASES(AX)                                                                                           \
    static ag_tensor *f_sum_axis##AX(ag_tensor **x) { return ag_sum_axis(x[0], AX, false); }                \
    static ag_tensor *f_sum_axis##AX##_keep(ag_tensor **x) { return ag_sum_axis(x[0], AX, true); }          \
    static ag_tensor *f_mean_axis##AX(ag_tensor **x) { return ag_mean_axis(x[0], AX, false); }              \
    static ag_tensor *f_mean_axis##AX##_keep(ag_tensor **x) { return ag_mean_axis(x[0], AX, true); }        \
    static ag_tensor *f_max_axis##AX(ag_tensor **x) { return ag_max_axis(x[0], AX, false); }                \
    static ag_tensor *f_max_axis##AX##_keep(ag_tensor **x) { return ag_max_axis(x[0], AX, true); }          \
    /* every value twice along the axis: ties, which go to the first copy */                               \
    static ag_tensor *f_max_axis##AX##_ties(ag_tensor **x) {                                                 \
        return ag_max_axis(ag_concat((ag_tensor *[]){x[0], x[0]}, 2, AX), AX, false);                        \
    }
AXIS_CASES(0)
AXIS_CASES(1)
AXIS_CASES(2)
AXIS_CASES(3)

/* One input reduced three ways: the backward that runs first stores, the
 * others add (sum first, then max; max first, then sum). */
static ag_tensor *f_axis_mix_smm(ag_tensor **x) {
    ag_tensor *s = ag_sum_axis(x[0], 1, false), *m = ag_max_axis(x[0], 1, false);
    return ag_add(ag_add(s, m), ag_mean_axis(x[0], 1, false));
}
static ag_tensor *f_axis_mix_ms(ag_tensor **x) {
    ag_tensor *m = ag_max_axis(x[0], 1, false);
    return ag_add(m, ag_sum_axis(x[0], 1, false));
}

static ag_tensor *f_clamp_point(ag_tensor **x) { return ag_clamp(x[0], 0.25, 0.25); } /* no gradient at all */
static ag_tensor *f_lerp(ag_tensor **x) { return ag_lerp(x[0], x[1], x[2]); }
/* a gradient that aliases another: both terms summed into one buffer */
static ag_tensor *f_lerp_same_ends(ag_tensor **x) { return ag_lerp(x[0], x[0], x[1]); }
static ag_tensor *f_lerp_weight_is_start(ag_tensor **x) { return ag_lerp(x[0], x[1], x[0]); }
/* a used again after the gate: its gradient added to by another op */
static ag_tensor *f_lerp_then_mul(ag_tensor **x) { return ag_mul(ag_lerp(x[0], x[1], ag_sigmoid(x[2])), x[0]); }
/* Clamp's input used twice, clamp's backward last: where it clamps, the
 * gradient stays as square's left it. */
static ag_tensor *f_clamp_twice(ag_tensor **x) {
    ag_tensor *c = ag_clamp(x[0], -0.5, 0.5);
    return ag_add(c, ag_square(x[0]));
}

/* The seven reductions along axis AX of one shape (NAME: its text). */
#define AXIS_ROWS(AX, NAME, ...)                                                                                \
    UNIFORM_CASE("sum_axis " NAME " axis " #AX, f_sum_axis##AX, -1, 1, __VA_ARGS__),                           \
    UNIFORM_CASE("sum_axis " NAME " axis " #AX " keep", f_sum_axis##AX##_keep, -1, 1, __VA_ARGS__),            \
    UNIFORM_CASE("mean_axis " NAME " axis " #AX, f_mean_axis##AX, -1, 1, __VA_ARGS__),                         \
    UNIFORM_CASE("mean_axis " NAME " axis " #AX " keep", f_mean_axis##AX##_keep, -1, 1, __VA_ARGS__),          \
    UNIFORM_CASE("max_axis " NAME " axis " #AX, f_max_axis##AX, -1, 1, __VA_ARGS__),                           \
    UNIFORM_CASE("max_axis " NAME " axis " #AX " keep", f_max_axis##AX##_keep, -1, 1, __VA_ARGS__),            \
    UNIFORM_CASE("max_axis " NAME " axis " #AX " ties", f_max_axis##AX##_ties, -1, 1, __VA_ARGS__)

const op_case core_cases[] = {
    {"add/same", same_34, f_add, 0, 0},
    {"add/row_vector", row_vec, f_add, 0, 0},
    {"add/col_vector", col_vec, f_add, 0, 0},
    {"add/mask_over_batch_heads", mask_like, f_add, 0, 0},
    {"add/both_broadcast", both_ways, f_add, 0, 0},
    {"add/0d", with_0d, f_add, 0, 0},
    {"sub/row_vector", row_vec, f_sub, 0, 0},
    {"sub/both_broadcast", both_ways, f_sub, 0, 0},
    {"mul/col_vector", col_vec, f_mul, 0, 0},
    {"mul/scalar", scalar_rhs, f_mul, 0, 0},
    {"mul/same_tensor_twice", same_tensor_twice, f_square_by_mul, 0, 0},
    {"div/same", same_34, f_div, 0, 0},
    {"div/mask_over_batch_heads", mask_like, f_div, 0, 0},
    {"maximum/same", same_34, f_maximum, 0, 0},
    {"maximum/row_vector", row_vec, f_maximum, 0, 0},
    {"mul/col_vector_lhs", col_vec_lhs, f_mul, 0, 0},
    {"div/row_vector_lhs", row_vec_lhs, f_div, 0, 0},
    {"sub/middle_dims", middle_dims, f_sub, 0, 0},
    {"mul/middle_dims", middle_dims, f_mul, 0, 0},
    {"maximum/middle_dims", middle_dims, f_maximum, 0, 0},
    {"div/padding_mask_over_heads", heads_mask, f_div, 0, 0},
    {"add_scalar", same_tensor_twice, f_add_scalar, 0, 0},
    {"mul_scalar", same_tensor_twice, f_mul_scalar, 0, 0},
    {"neg", same_tensor_twice, f_neg, 0, 0},
    {"exp", vec_any, f_exp, 0, 0},
    {"exp/len1", vec_1, f_exp, 0, 0},
    {"log", vec_pos, f_log, 0, 0},
    {"sqrt", vec_pos, f_sqrt, 0, 0},
    {"square", vec_any, f_square, 0, 0},
    {"abs", vec_any, f_abs, 0, 0},
    {"tanh", vec_any, f_tanh, 0, 0},
    {"sigmoid", vec_any, f_sigmoid, 0, 0},
    {"sigmoid/large", vec_large, f_sigmoid, 0, 0},
    {"relu", vec_any, f_relu, 0, 0},
    {"elu", vec_any, f_elu, 0, 0},
    {"softplus", vec_any, f_softplus, 0, 0},
    {"softplus/large", vec_large, f_softplus, 0, 0},
    {"log_sigmoid", vec_any, f_log_sigmoid, 0, 0},
    {"log_sigmoid/large", vec_large, f_log_sigmoid, 0, 0},
    {"gelu", vec_any, f_gelu, 0, 0},
    {"gelu/large", vec_large, f_gelu, 0, 0},
    {"silu", vec_any, f_silu, 0, 0},
    {"silu/large", vec_large, f_silu, 0, 0},
    {"softplus/logits_1e3", vec_1e3, f_softplus, 0, 0},
    {"log_sigmoid/logits_1e3", vec_1e3, f_log_sigmoid, 0, 0},
    {"sigmoid/logits_1e3", vec_1e3, f_sigmoid, 0, 0},
    {"silu/logits_1e3", vec_1e3, f_silu, 0, 0},
    {"elu/logits_1e3", vec_1e3, f_elu, 0, 0},
    {"gelu/logits_1e3", vec_1e3, f_gelu, 0, 0},
    {"glu/sigmoid", vec_any, f_glu_sigmoid, 0, 0},
    {"glu/silu", vec_any, f_glu_silu, 0, 0},
    {"glu/gelu", vec_any, f_glu_gelu, 0, 0},
    {"glu/relu", vec_any, f_glu_relu, 0, 0},
    {"glu/elu", vec_any, f_glu_elu, 0, 0},
    {"glu/tanh", vec_any, f_glu_tanh, 0, 0},
    {"glu/none_bilinear", vec_any, f_glu_none, 0, 0},
    {"glu/silu_large", vec_large, f_glu_silu, 0, 0},
    {"glu/silu_logits_1e3", vec_1e3, f_glu_silu, 0, 0},
    {"glu/silu_equals_composed", vec_any, f_glu_vs_composed, .flags = OPCASE_DIFFERENCE},
    {"clamp", vec_any, f_clamp, 0, 0},
    {"sum", red_234, f_sum, 0, 0},
    {"sum/1x1", red_1, f_sum, 0, 0},
    {"mean", red_234, f_mean, 0, 0},
    {"sum_axis/0", red_234, f_sum0, 0, 0},
    {"sum_axis/1_keepdim", red_234, f_sum1k, 0, 0},
    {"sum_axis/last", red_234, f_sum_last, 0, 0},
    {"sum_axis/size1", red_1, f_sum0, 0, 0},
    {"mean_axis/1", red_234, f_mean1, 0, 0},
    {"mean_axis/last_keepdim", red_234, f_mean_last_k, 0, 0},
    {"max_axis/0", red_distinct, f_max0, 0, 0},
    {"max_axis/1_keepdim", red_distinct, f_max1, 0, 0},
    {"max_axis/last", red_distinct, f_max_last, 0, 0},
    {"max_axis/size1", red_1, f_max0, 0, 0},
    {"matmul/2d", mm_2d, f_mm, 0, 0},
    {"matmul/2d_ta", mm_2d_ta, f_mm_ta, 0, 0},
    {"matmul/2d_tb", mm_2d_tb, f_mm_tb, 0, 0},
    {"matmul/2d_tt", mm_2d_tt, f_mm_tt, 0, 0},
    {"matmul/3d", mm_3d, f_mm, 0, 0},
    {"matmul/4d_tb", mm_4d_tb, f_mm_tb, 0, 0},
    {"matmul/4d_ta", mm_4d_ta, f_mm_ta, 0, 0},
    {"matmul/shared_b", mm_shared_b, f_mm, 0, 0},
    {"matmul/shared_b_tb", mm_shared_b_t, f_mm_tb, 0, 0},
    {"matmul/shared_b_ta", mm_shared_b_ta, f_mm_ta, 0, 0},
    {"matmul/shared_b_tt", mm_shared_b_tt, f_mm_tt, 0, 0},
    {"matmul/shared_a", mm_shared_a, f_mm, 0, 0},
    {"matmul/shared_a_ta_tb", mm_shared_a_t, f_mm_tt, 0, 0},
    {"matmul/1x1", mm_ones, f_mm, 0, 0},
    {"matmul/padded_live_block", mm_padded_square, f_mm, 0, 0},
    {"matmul/padded_live_block_ta", mm_padded_square, f_mm_ta, 0, 0},
    {"matmul/padded_rows_tb", mm_padded_rows, f_mm_tb, 0, 0},
    {"matmul/padded_attention", mm_padded_square, f_attend_padded, 0, 0},
    {"matmul/band_attention", mm_banded, f_attend_band, 0, 0},
    {"matmul/band_attention_ta", mm_banded, f_attend_band_ta, 0, 0},
    {"matmul/past_attention", mm_banded, f_attend_past, 0, 0},
    {"matmul/matrix_vector", mv, f_mm, 0, 0},
    {"matmul/matrix_vector_tt", mv_tt, f_mm_tt, 0, 0},
    {"matmul/vector_matrix", vm, f_mm, 0, 0},
    {"matmul/vector_matrix_tt", vm_tt, f_mm_tt, 0, 0},
    {"matmul/outer", outer, f_mm, 0, 0},
    {"matmul/outer_tt", outer_tt, f_mm_tt, 0, 0},
    {"matmul/matrix_vector_shared", mv_batched, f_mm, 0, 0},
    {"linear/3d", lin_3d, f_linear, 0, 0},
    {"linear/no_bias", lin_3d, f_linear_nobias, 0, 0},
    {"lerp/fixed_weight", lerp_fixed_weight, f_lerp, 0, 0},
    {"linear/1d_input", lin_1row, f_linear, 0, 0},
    /* 26,000 outputs: their projected sum's roundoff, over the central
     * difference's 2e-6, is up to ~5e-7 (linear is exact in its inputs, and
     * its worst element is 4e-7 off), so atol 1e-6 against gradients of
     * 0.02-0.1; the device's gradients equal the CPU's bit for bit */
    {"linear/many_rows", lin_many_rows, f_linear, 1e-6, 0},
    {"dense/tanh_many_rows", lin_many_rows, f_dense_tanh, 1e-6, 0},
    {"linear/zero_gradient_rows", lin_padded, f_linear_padded, 0, 0},
    {"linear/zero_input_rows", lin_zero_rows, f_linear, 0, 0},
    {"matmul/shared_b_zero_gradient_rows", mm_shared_padded, f_mm_shared_padded, 0, 0},
    {"matmul/shared_b_tb_zero_gradient_rows", mm_shared_padded, f_mm_shared_padded_tb, 0, 0},
    {"linear/zero_input_rows_no_bias", lin_zero_rows, f_linear_nobias, 0, 0},
    {"linear/zero_gradient_rows_no_bias", lin_padded, f_linear_padded_nobias, 0, 0},
    {"linear/zero_rows_both_same", lin_zero_same, f_linear_padded, 0, 0},
    {"linear/zero_rows_both_different", lin_zero_other, f_linear_padded, 0, 0},
    {"dense/relu", lin_3d, f_dense_relu, 0, 0},
    {"dense/elu", lin_3d, f_dense_elu, 0, 0},
    {"dense/gelu", lin_3d, f_dense_gelu, 0, 0},
    {"dense/silu_zero_rows_both_same", lin_zero_same, f_dense_silu_masked, 0, 0},
    {"dense/tanh", lin_3d, f_dense_tanh, 0, 0},
    {"dense/sigmoid", lin_3d, f_dense_sigmoid, 0, 0},
    {"dense/none_no_bias", lin_3d, f_dense_none_nobias, 0, 0},
    {"dense/relu_zero_input_rows", lin_zero_rows, f_dense_relu, 0, 0},
    {"dense/elu_zero_rows_both_same", lin_zero_same, f_dense_elu_masked, 0, 0},
    {"dense/tanh_zero_gradient_rows", lin_padded, f_dense_tanh_masked, 0, 0},
    {"linear_t/3d", lin_t_3d, f_linear_t, 0, 0},
    {"linear_t/no_bias", lin_t_3d, f_linear_t_nobias, 0, 0},
    {"linear_t/zero_gradient_rows", lin_t_padded, f_linear_t_padded, 0, 0},
    {"linear_t/zero_input_rows", lin_t_zero_rows, f_linear_t, 0, 0},
    {"linear_grouped/elu_bias", grp_elu, f_dense_elu, 0, 0},
    {"linear_grouped/no_act_no_bias", grp_plain, f_linear_nobias, 0, 0},
    {"linear_grouped/one_group", grp_one, f_linear, 0, 0},
    {"linear_grouped/transposed", grp_t, f_linear_t, 0, 0},
    /* 18,200 outputs: atol as linear/many_rows's */
    {"linear_grouped/tanh_many_rows", grp_many_rows, f_dense_tanh, 1e-6, 0},
    /* 4,080 outputs: their projected sum carries ~2e-8 of the central
     * difference's roundoff (opcase_run.c), so the uniform cases' atol */
    {"linear_grouped/zero_rows_both_same", grp_padded_same, f_linear_grp_padded, 1e-7, 0},
    {"linear_grouped/zero_rows_both_different", grp_padded_other, f_linear_grp_padded, 1e-7, 0},
    {"linear_grouped/elu_zero_rows_both_same", grp_padded_same, f_dense_elu_grp_padded, 1e-7, 0},
    {"linear_grouped/tanh_no_bias_zero_rows_different", grp_padded_other, f_dense_tanh_grp_padded, 1e-7, 0},
    {"reshape", red_234, f_reshape, 0, 0},
    {"reshape/two_views", red_234, f_reshape_chain, 0, 0},
    {"graph/tensor_used_twice", vec_any, f_two_uses, 0, 0},
    /* ---- the device's sizes ---- */
    /* binary, same shape and broadcast (sizes not multiples of 32) */
    UNIFORM_CASE("add [37,33]+[37,33]", f_add, -1, 1, DIMS(37, 33), DIMS(37, 33)),
    UNIFORM_CASE("add [5,7,33]+[33] (bias)", f_add, -1, 1, DIMS(5, 7, 33), DIMS(33)),
    UNIFORM_CASE("sub [5,33]-[1,33]", f_sub, -1, 1, DIMS(5, 33), DIMS(1, 33)),
    UNIFORM_CASE("mul [5,7,33]*[5,7,1] (column)", f_mul, -1, 1, DIMS(5, 7, 33), DIMS(5, 7, 1)),
    UNIFORM_CASE("mul [2,3,4,5]*[3,1,5]", f_mul, -1, 1, DIMS(2, 3, 4, 5), DIMS(3, 1, 5)),
    DIVISOR_CASE("div [9,13]/[9,13]", f_div, -1, 1, DIMS(9, 13), DIMS(9, 13)),
    DIVISOR_CASE("div [4,9]/[1] (scalar-like)", f_div, -1, 1, DIMS(4, 9), DIMS(1)),
    UNIFORM_CASE("maximum [100]", f_maximum, -1, 1, DIMS(100), DIMS(100)),
    UNIFORM_CASE("add [1]+[1] (length 1)", f_add, -1, 1, DIMS(1), DIMS(1)),
    /* affine */
    UNIFORM_CASE("add_scalar [1000]", f_add_scalar, -2, 2, DIMS(1000)),
    UNIFORM_CASE("mul_scalar [1000]", f_mul_scalar, -2, 2, DIMS(1000)),
    UNIFORM_CASE("neg [7]", f_neg, -2, 2, DIMS(7)),
    /* the unary table, moderate and large arguments */
    UNIFORM_CASE("exp [1031]", f_exp, -20, 20, DIMS(1031)),
    UNIFORM_CASE("log [1031]", f_log, 1e-3, 50, DIMS(1031)),
    UNIFORM_CASE("sqrt [1031]", f_sqrt, 1e-3, 50, DIMS(1031)),
    UNIFORM_CASE("square [1031]", f_square, -5, 5, DIMS(1031)),
    UNIFORM_CASE("abs [1031]", f_abs, -5, 5, DIMS(1031)),
    UNIFORM_CASE("tanh [1031]", f_tanh, -30, 30, DIMS(1031)),
    UNIFORM_CASE("sigmoid [1031]", f_sigmoid, -60, 60, DIMS(1031)),
    UNIFORM_CASE("relu [1031]", f_relu, -5, 5, DIMS(1031)),
    UNIFORM_CASE("elu [1031]", f_elu, -10, 10, DIMS(1031)),
    UNIFORM_CASE("softplus [1031] (large |x|)", f_softplus, -100, 100, DIMS(1031)),
    UNIFORM_CASE("log_sigmoid [1031] (large |x|)", f_log_sigmoid, -100, 100, DIMS(1031)),
    UNIFORM_CASE("gelu [1031] (to the tails)", f_gelu, -15, 15, DIMS(1031)),
    UNIFORM_CASE("silu [1031] (large |x|)", f_silu, -100, 100, DIMS(1031)),
    /* reductions (sum [1]: sum/1x1 above) */
    UNIFORM_CASE("sum [100003]", f_sum, -1, 1, DIMS(100003)),
    UNIFORM_CASE("mean [3,1025]", f_mean, -1, 1, DIMS(3, 1025)),
    /* reductions along every axis, keepdim both ways, max with ties */
    AXIS_ROWS(0, "[3,5,33,2]", DIMS(3, 5, 33, 2)),
    AXIS_ROWS(1, "[2,37,3,5]", DIMS(2, 37, 3, 5)),
    AXIS_ROWS(2, "[2,3,33,5]", DIMS(2, 3, 33, 5)),
    AXIS_ROWS(3, "[2,3,5,37]", DIMS(2, 3, 5, 37)),
    AXIS_ROWS(1, "[3,1,33]", DIMS(3, 1, 33)),
    AXIS_ROWS(2, "[5,7,37]", DIMS(5, 7, 37)),
    AXIS_ROWS(0, "[37]", DIMS(37)),
    UNIFORM_CASE("sum, max, mean axis 1 (grads add)", f_axis_mix_smm, -1, 1, DIMS(4, 33, 5)),
    UNIFORM_CASE("max, sum axis 1 (grads add)", f_axis_mix_ms, -1, 1, DIMS(4, 33, 5)),
    /* clamp: inside, both sides, a point range, gradient added */
    UNIFORM_CASE("clamp [1031] [-1, 1.5]", f_clamp, -3, 3, DIMS(1031)),
    UNIFORM_CASE("clamp [37] [0.25, 0.25]", f_clamp_point, -1, 1, DIMS(37)),
    UNIFORM_CASE("clamp + square [5,33]", f_clamp_twice, -1, 1, DIMS(5, 33)),
    /* lerp: weights inside and outside [0, 1], ends and weight aliased, a
     * sigmoid gate as the models write it, one element, large values */
    UNIFORM_CASE("lerp [3,5,37]", f_lerp, -2, 2, DIMS(3, 5, 37), DIMS(3, 5, 37), DIMS(3, 5, 37)),
    UNIFORM_CASE("lerp (x, x, w) [5,33]", f_lerp_same_ends, -2, 2, DIMS(5, 33), DIMS(5, 33)),
    UNIFORM_CASE("lerp (a, b, a) [5,33]", f_lerp_weight_is_start, -2, 2, DIMS(5, 33), DIMS(5, 33)),
    UNIFORM_CASE("lerp sigmoid gate, a reused [2,7,33]", f_lerp_then_mul, -3, 3, DIMS(2, 7, 33), DIMS(2, 7, 33),
                 DIMS(2, 7, 33)),
    UNIFORM_CASE("lerp [1]", f_lerp, -1, 1, DIMS(1), DIMS(1), DIMS(1)),
    /* a bias gradient of 16,400 partial sums (one block of rows): more
     * than the last block of the GPU's column sums adds, so a kernel of
     * their own (linear.cu) */
    UNIFORM_CASE("linear [1,1] x [1,16400] + bias", f_linear, -1, 1, DIMS(1, 1), DIMS(1, 16400), DIMS(16400)),
    UNIFORM_CASE("lerp [6,300] values to 1e3", f_lerp, -1000, 1000, DIMS(6, 300), DIMS(6, 300), DIMS(6, 300)),
    /* products on cuBLAS: 2-D, the transposes, batched, a shared operand */
    UNIFORM_CASE("matmul [17,33]@[33,45]", f_mm, -1, 1, DIMS(17, 33), DIMS(33, 45)),
    UNIFORM_CASE("matmul_t TN [33,17]@[33,45]", f_mm_ta, -1, 1, DIMS(33, 17), DIMS(33, 45)),
    UNIFORM_CASE("matmul_t NT [17,33]@[45,33]", f_mm_tb, -1, 1, DIMS(17, 33), DIMS(45, 33)),
    UNIFORM_CASE("matmul_t TT [33,17]@[45,33]", f_mm_tt, -1, 1, DIMS(33, 17), DIMS(45, 33)),
    UNIFORM_CASE("matmul [3,17,33]@[3,33,45]", f_mm, -1, 1, DIMS(3, 17, 33), DIMS(3, 33, 45)),
    UNIFORM_CASE("matmul [3,17,33]@[33,45] (shared B)", f_mm, -1, 1, DIMS(3, 17, 33), DIMS(33, 45)),
    UNIFORM_CASE("matmul [17,33]@[3,33,45] (shared A)", f_mm, -1, 1, DIMS(17, 33), DIMS(3, 33, 45)),
    UNIFORM_CASE("matmul_t NT [2,3,9,33]@[2,3,11,33]", f_mm_tb, -1, 1, DIMS(2, 3, 9, 33), DIMS(2, 3, 11, 33)),
    /* linear: bias, transposed W, activations, 3-D x */
    UNIFORM_CASE("linear [9,33]@[33,37]+b", f_linear, -1, 1, DIMS(9, 33), DIMS(33, 37), DIMS(37)),
    UNIFORM_CASE("linear [2,5,33]@[33,45]", f_linear_nobias, -1, 1, DIMS(2, 5, 33), DIMS(33, 45)),
    UNIFORM_CASE("linear_t [9,33]@[37,33]^T+b", f_linear_t, -1, 1, DIMS(9, 33), DIMS(37, 33), DIMS(37)),
    UNIFORM_CASE("dense relu [70,33]@[33,37]+b", f_dense_relu, -1, 1, DIMS(70, 33), DIMS(33, 37), DIMS(37)),
    UNIFORM_CASE("dense elu [9,33]@[33,37]+b", f_dense_elu, -1, 1, DIMS(9, 33), DIMS(33, 37), DIMS(37)),
    UNIFORM_CASE("dense gelu [9,33]@[33,37]+b", f_dense_gelu, -1, 1, DIMS(9, 33), DIMS(33, 37), DIMS(37)),
    UNIFORM_CASE("dense tanh [9,33]@[33,37]+b", f_dense_tanh, -1, 1, DIMS(9, 33), DIMS(33, 37), DIMS(37)),
    UNIFORM_CASE("dense sigmoid [9,33]@[33,37]", f_dense_sigmoid_nobias, -1, 1, DIMS(9, 33), DIMS(33, 37)),
    /* grouped: one batched product, each group's bias and column sums */
    UNIFORM_CASE("dense elu grouped [3,9,33]@[3,33,37]+b", f_dense_elu, -1, 1, DIMS(3, 9, 33), DIMS(3, 33, 37),
                 DIMS(3, 37)),
    UNIFORM_CASE("linear_t grouped [3,5,33]@[3,37,33]^T", f_linear_t_nobias, -1, 1, DIMS(3, 5, 33), DIMS(3, 37, 33)),
    UNIFORM_CASE("linear grouped [2,70,33]@[2,33,37]+b", f_linear, -1, 1, DIMS(2, 70, 33), DIMS(2, 33, 37),
                 DIMS(2, 37)),
    /* 16 x 1 x 1025 partial sums: each group's far under what the last
     * block adds, the sixteen together over it (add_partials_kernel), in
     * 16,400 outputs (a million, at fewer groups, slowed the emulator's
     * whole run: its waits scan the memory the run has taken) */
    UNIFORM_CASE("linear grouped [16,1,1]@[16,1,1025]+b", f_linear, -1, 1, DIMS(16, 1, 1), DIMS(16, 1, 1025),
                 DIMS(16, 1025)),
    UNIFORM_CASE("dense tanh grouped [16,1,1]@[16,1,1025]+b", f_dense_tanh, -1, 1, DIMS(16, 1, 1),
                 DIMS(16, 1, 1025), DIMS(16, 1025)),
    /* reshape: a view on the device, its gradient copied or added back */
    UNIFORM_CASE("reshape [5,7,33]->[-1,33]", f_reshape_rows_33, -1, 1, DIMS(5, 7, 33)),
    UNIFORM_CASE("reshape twice [7,37]", f_reshape_twice, -1, 1, DIMS(7, 37)),
    UNIFORM_CASE("reshape + reshape [3,33] (grad adds)", f_reshape_sum, -1, 1, DIMS(3, 33)),
    /* ag_to the CPU and back inside a graph */
    {.name = "ag_to cuda -> cpu [41]", .forward = f_to_and_back, .uniform = UNIFORM_INPUTS(false, -1, 1, DIMS(41)),
     .flags = OPCASE_ENDS_ON_CPU},
    {NULL, NULL, NULL, 0, 0},
};
