/* cases_attention.c - op cases for the softmax family, head split/merge and
 * fused attention: several shapes each, N = 1, fully masked rows (the first
 * query under PAST, an example of length 0), padded batches, per-head and
 * per-sentence masks with finite penalties, and logits of magnitude ~1e3;
 * then the same at the device's sizes (widths 33, 37, 300), with every
 * broadcast of a mask and the library's masks made on the device (its mask
 * cache: the runner sets the current device to the inputs'). */
#include "opcase.h"
#include "../ops/softmax.h" /* ag__softmax_pool, ag__softmax_mix_ref_planes: ops for one model each */
#include "../ops/attention.h" /* ag__attention_block_rows */

#include <math.h>
#include <stdlib.h>

/* Rounds every value to a multiple of step: with a power-of-two step and
 * small products, f32 and f64 builds then compute identical large logits,
 * so f32_vs_f64 compares the ops rather than the rounding of the inputs. */
static ag_tensor *quantized(ag_tensor *t, double step) {
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(step * round((double)t->data[i] / step));
    return t;
}

static const ag_mask_spec past = {.dir = AG_MASK_PAST};
static const ag_mask_spec past_incl = {.dir = AG_MASK_PAST_INCL};

/* ---- softmax along the last axis ---- */

static int sm_35(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 5)); return 1; }
static int sm_n1(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(4, 1)); return 1; }
static int sm_17(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 3.0, true, SHAPE(2, 17)); return 1; }
/* Near ties at magnitude 1e3: only a max-subtracted softmax stays finite. */
static int sm_large(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, 0, 3.0, true, SHAPE(3, 6));
    for (int64_t i = 0; i < in[0]->size; i++) in[0]->data[i] += (i % 3 == 2) ? -1000 : 1000;
    quantized(in[0], 1.0 / 64);
    return 1;
}
static ag_tensor *f_softmax(ag_tensor **in) { return ag_softmax(in[0]); }
static ag_tensor *f_log_softmax(ag_tensor **in) { return ag_log_softmax(in[0]); }

/* ---- masked softmax ---- */

static int sm_b_h_44(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 3, 4, 4)); return 1; }
static int sm_b_h_55(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 3, 5, 5)); return 1; }
static int sm_b_55(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 5, 5)); return 1; }
static int sm_b_h_11(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 2, 1, 1)); return 1; }
static int sm_large_44(ag_tensor **in, ag_rng *r) {
    in[0] = quantized(tc_away(r, 900, 1100, true, SHAPE(2, 4, 4)), 1.0 / 64);
    return 1;
}

/* Near ties at magnitude 1e3, rows of either sign: the weights spread
 * over a row's keys (with +-1e3 mixed they would be one-hot, gradients 0). */
static int sm_ties_44(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, 997, 1000, true, SHAPE(2, 4, 4));
    for (int64_t i = 0; i < in[0]->size; i++)
        if ((i / 4) % 2) in[0]->data[i] = -in[0]->data[i];
    quantized(in[0], 1.0 / 64);
    return 1;
}

/* PAST on [N,N]: the first query of every slice is fully masked. */
static ag_tensor *f_msm_past(ag_tensor **in) { return ag_masked_softmax(in[0], ag_mask(&past, 4), 0.7); }

/* Per-head masks with finite penalties: past + log distance, future + word
 * distance, faraway(2). */
static ag_tensor *f_msm_heads(ag_tensor **in) {
    const ag_mask_spec specs[3] = {
        {.dir = AG_MASK_PAST, .dist = AG_DIST_LOG},
        {.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_WORD, .weight = 1.5},
        {.faraway = 2},
    };
    return ag_masked_softmax(in[0], ag_mask_heads(specs, 3, 5), 0.5);
}

/* Padded batch, keys and query rows: [B,1,N,N] against [B,h,N,N]. */
static const int32_t len_42[] = {4, 2};
static ag_tensor *f_msm_pad4(ag_tensor **in) {
    return ag_masked_softmax(in[0], ag_mask_padding(len_42, 2, 4, 4, true), 1.0);
}

/* Key padding [B,1,N] against [B,N,N]; example 1 has length 0. */
static const int32_t len_503[] = {5, 0, 3};
static ag_tensor *f_msm_keypad3(ag_tensor **in) {
    return ag_masked_softmax(in[0], ag_mask_padding(len_503, 3, 5, 3, false), 1.3);
}

/* N = 1: PAST masks the only key (zeros), PAST_INCL keeps it (ones). */
static ag_tensor *f_msm_n1_past(ag_tensor **in) { return ag_masked_softmax(in[0], ag_mask(&past, 1), 1.0); }
static ag_tensor *f_msm_n1_incl(ag_tensor **in) { return ag_masked_softmax(in[0], ag_mask(&past_incl, 1), 1.0); }

static ag_tensor *f_msm_large(ag_tensor **in) { return ag_masked_softmax(in[0], ag_mask(&past_incl, 4), 1.0); }
/* Logits ~1e3 where rows are fully masked: query 0 under PAST, and every
 * row of an empty example (key and query padding, lengths 4 and 0). */
static ag_tensor *f_msm_large_past(ag_tensor **in) { return ag_masked_softmax(in[0], ag_mask(&past, 4), 0.9); }
static const int32_t len_40[] = {4, 0}, len_31[] = {3, 1};
static ag_tensor *f_msm_large_pad0(ag_tensor **in) {
    return ag_masked_softmax(in[0], ag_mask_padding(len_40, 2, 4, 3, true), 1.0);
}
/* Query padding with a length-1 example: its one live row has one key. */
static ag_tensor *f_msm_pad_len1(ag_tensor **in) {
    return ag_masked_softmax(in[0], ag_mask_padding(len_31, 2, 4, 4, true), 1.0);
}

/* ---- softmax over an axis, valid positions only ---- */

static int pool_354(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 5, 4)); return 1; }
static int pool_2342(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 3, 4, 2)); return 1; }
static const int32_t len_41[] = {4, 1};
static ag_tensor *f_pool_len(ag_tensor **in) { return ag_softmax_axis_len(in[0], 1, len_503); }
static ag_tensor *f_pool_axis2(ag_tensor **in) { return ag_softmax_axis_len(in[0], 2, len_41); }
static ag_tensor *f_pool_neg_axis(ag_tensor **in) { return ag_softmax_axis_len(in[0], -2, len_41); }
static ag_tensor *f_pool_nolen(ag_tensor **in) { return ag_softmax_axis_len(in[0], 0, NULL); }
/* Logits ~1e3 over lengths 5, 1 and 0 (near ties: only a max-subtracted
 * softmax over the valid positions is finite). */
static int pool_large(ag_tensor **in, ag_rng *r) {
    in[0] = quantized(tc_away(r, 900, 1100, true, SHAPE(3, 5, 4)), 1.0 / 64);
    return 1;
}
static ag_tensor *f_pool_len_large(ag_tensor **in) { return ag_softmax_axis_len(in[0], 1, (const int32_t[]){5, 1, 0}); }

/* ---- softmax pooling (ag__softmax_pool): in[0] the scores, in[1] the
 * values, both [B,N,d]: an empty example, padding, length 1, no lengths,
 * the same tensor as scores and values (its gradient stored, then added),
 * logits ~1e3 ---- */
static int spool_354(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 5, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(3, 5, 4));
    return 2;
}
static int spool_n1(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 1, 3));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(2, 1, 3));
    return 2;
}
static int spool_large(ag_tensor **in, ag_rng *r) { /* near ties at 1e3: only a max-subtracted softmax is finite */
    in[0] = quantized(tc_uniform(r, 995, 1000, true, SHAPE(2, 6, 3)), 1.0 / 64);
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(2, 6, 3));
    return 2;
}
static ag_tensor *f_spool_len(ag_tensor **in) { return ag__softmax_pool(in[0], in[1], len_503, NULL); }
static ag_tensor *f_spool_nolen(ag_tensor **in) { return ag__softmax_pool(in[0], in[1], NULL, NULL); }
static ag_tensor *f_spool_n1(ag_tensor **in) { return ag__softmax_pool(in[0], in[1], (const int32_t[]){1, 0}, NULL); }
static ag_tensor *f_spool_same(ag_tensor **in) { return ag__softmax_pool(in[0], in[0], len_503, NULL); }
static ag_tensor *f_spool_large(ag_tensor **in) { return ag__softmax_pool(in[0], in[1], (const int32_t[]){6, 2}, NULL); }
/* Against softmax_axis_len, product, sum (what it fuses) at logits ~1e3,
 * lengths 6 and 1 (v added for a gradient). */
static ag_tensor *f_spool_large_vs_composed(ag_tensor **in) {
    static const int32_t len[2] = {6, 1};
    ag_tensor *composed = ag_sum_axis(ag_mul(ag_softmax_axis_len(in[0], 1, len), in[1]), 1, false);
    return tc_difference(ag_sub(ag__softmax_pool(in[0], in[1], len, NULL), composed), ag_sum_axis(in[1], 1, false));
}
/* The weights it hands out (constants: the scores take no gradient here,
 * so the check's differences do not move them), pooled once more by a
 * product: twice the pooled values, forward compared on the device. */
static int spool_const_scores(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 0.1, 2.0, false, SHAPE(3, 5, 4));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(3, 5, 4));
    return 2;
}
static ag_tensor *f_spool_weights(ag_tensor **in) {
    ag_tensor *alpha;
    ag_tensor *out = ag__softmax_pool(in[0], in[1], len_503, &alpha);
    return ag_add(out, ag_sum_axis(ag_mul(alpha, in[1]), 1, false));
}

/* ---- heads ---- */

/* ---- softmax_mix: a softmax gate over sources, per feature ---- */
static int mix_5(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 3, 20));
    for (int g = 1; g <= 5; g++) in[g] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    return 6;
}
static int mix_split(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(3, 3, 4));
    for (int g = 1; g <= 3; g++) in[g] = tc_uniform(r, -1, 1, true, SHAPE(3, 4));
    return 4;
}
static int mix_large(ag_tensor **in, ag_rng *r) { /* logits ~ +-60: one source takes (almost) all */
    in[0] = tc_uniform(r, -60, 60, true, SHAPE(2, 9));
    for (int g = 1; g <= 3; g++) in[g] = tc_uniform(r, -1, 1, true, SHAPE(2, 3));
    return 4;
}
/* Logits ~1e3 (multiples of 1/64: f32 sees the same numbers), near ties
 * within a feature, so no source takes all: only a max-subtracted gate is
 * finite. */
static int mix_1e3(ag_tensor **in, ag_rng *r) {
    in[0] = quantized(tc_away(r, 995, 1000, true, SHAPE(2, 3, 20)), 1.0 / 64);
    for (int g = 1; g <= 5; g++) in[g] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    return 6;
}
static int mix_ref_1e3(ag_tensor **in, ag_rng *r) { /* against the reference's 0: it weighs e^-1e3, exactly 0 */
    in[0] = quantized(tc_away(r, 995, 1000, true, SHAPE(2, 3, 16)), 1.0 / 64);
    for (int g = 1; g <= 5; g++) in[g] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    return 6;
}
static int mix_planes_1e3(ag_tensor **in, ag_rng *r) {
    in[0] = quantized(tc_away(r, 995, 1000, true, SHAPE(2, 3, 16)), 1.0 / 64);
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(4, 2, 3, 4));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    return 3;
}
static int mix_one(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 5));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(2, 5));
    return 2;
}
static ag_tensor *f_mix_5(ag_tensor **in) { return ag_softmax_mix(in[0], in + 1, 5); }
static ag_tensor *f_mix_3(ag_tensor **in) { return ag_softmax_mix(in[0], in + 1, 3); }
static ag_tensor *f_mix_1(ag_tensor **in) { return ag_softmax_mix(in[0], in + 1, 1); }
static ag_tensor *f_mix_repeat(ag_tensor **in) { /* one tensor as two sources: both gradients add */
    return ag_softmax_mix(in[0], (ag_tensor *[]){in[1], in[2], in[1]}, 3);
}

/* With lengths: rows past each example's length are 0 and get no gradient,
 * exactly ag_zero_padding of the plain op; an empty example included. */
static const int32_t mix_lengths[2] = {3, 1}, mix_lengths_empty[2] = {0, 2};
static ag_tensor *f_mix_len(ag_tensor **in) { return ag_softmax_mix_len(in[0], in + 1, 5, mix_lengths); }
static ag_tensor *f_mix_len_empty(ag_tensor **in) { return ag_softmax_mix_len(in[0], in + 1, 5, mix_lengths_empty); }
static ag_tensor *f_mix_len_minus_padded(ag_tensor **in) {
    return ag_sub(ag_softmax_mix_len(in[0], in + 1, 5, mix_lengths),
                  ag_zero_padding(ag_softmax_mix(in[0], in + 1, 5), mix_lengths));
}
static ag_tensor *f_mix_len_repeat(ag_tensor **in) {
    return ag_softmax_mix_len(in[0], (ag_tensor *[]){in[1], in[2], in[1], in[3], in[4]}, 5, mix_lengths_empty);
}

/* With a reference source: z holds n-1 logits per feature, the last
 * source's is 0.  Against the plain gate on z with a zero block appended:
 * the same function, so the difference is 0 and so are its gradients. */
static int mix_ref_5(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 3, 16));
    for (int g = 1; g <= 5; g++) in[g] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    return 6;
}
static int mix_ref_split(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(3, 2, 4));
    for (int g = 1; g <= 3; g++) in[g] = tc_uniform(r, -1, 1, true, SHAPE(3, 4));
    return 4;
}
static int mix_ref_large(ag_tensor **in, ag_rng *r) { /* logits ~ +-60 against the reference's 0 */
    in[0] = tc_uniform(r, -60, 60, true, SHAPE(2, 6));
    for (int g = 1; g <= 3; g++) in[g] = tc_uniform(r, -1, 1, true, SHAPE(2, 3));
    return 4;
}
static int mix_ref_two(ag_tensor **in, ag_rng *r) { /* n = 2: a sigmoid gate between two sources */
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(1, 1, 5));
    for (int g = 1; g <= 2; g++) in[g] = tc_uniform(r, -1, 1, true, SHAPE(1, 1, 5));
    return 3;
}
static ag_tensor *f_mix_ref(ag_tensor **in) { return ag_softmax_mix_ref(in[0], in + 1, 5, NULL); }
static ag_tensor *f_mix_ref_len(ag_tensor **in) { return ag_softmax_mix_ref(in[0], in + 1, 5, mix_lengths); }
static ag_tensor *f_mix_ref_empty(ag_tensor **in) { return ag_softmax_mix_ref(in[0], in + 1, 5, mix_lengths_empty); }
static ag_tensor *f_mix_ref_3(ag_tensor **in) { return ag_softmax_mix_ref(in[0], in + 1, 3, NULL); }
static ag_tensor *f_mix_ref_2(ag_tensor **in) { return ag_softmax_mix_ref(in[0], in + 1, 2, (const int32_t[]){1}); }
static ag_tensor *f_mix_ref_minus_plain(ag_tensor **in) {
    ag_tensor *zero = ag_mul_scalar(ag_slice(in[0], 2, 0, 4), 0); /* the reference's logits */
    ag_tensor *z = ag_concat((ag_tensor *[]){in[0], zero}, 2, 2);
    return ag_sub(ag_softmax_mix_ref(in[0], in + 1, 5, mix_lengths), ag_softmax_mix_len(z, in + 1, 5, mix_lengths));
}
static ag_tensor *f_mix_ref_repeat(ag_tensor **in) { /* the reference also given as a gated source */
    return ag_softmax_mix_ref(in[0], (ag_tensor *[]){in[1], in[2], in[3], in[4], in[1]}, 5, mix_lengths_empty);
}

/* The gated sources as the planes of one stack (ag__softmax_mix_ref_planes,
 * MPSAN's four units): in[1] the stack [4,2,3,4], in[2] the reference. */
static int mix_planes_4(ag_tensor **in, ag_rng *r) {
    in[0] = tc_uniform(r, -2, 2, true, SHAPE(2, 3, 16));
    in[1] = tc_uniform(r, -1, 1, true, SHAPE(4, 2, 3, 4));
    in[2] = tc_uniform(r, -1, 1, true, SHAPE(2, 3, 4));
    return 3;
}
static ag_tensor *f_mix_planes(ag_tensor **in) { return ag__softmax_mix_ref_planes(in[0], in[1], in[2], mix_lengths); }
static ag_tensor *f_mix_planes_empty(ag_tensor **in) {
    return ag__softmax_mix_ref_planes(in[0], in[1], in[2], mix_lengths_empty);
}
/* Against the planes sliced out: the same bits, a difference of 0. */
static ag_tensor *f_mix_planes_vs_slices(ag_tensor **in) {
    ag_tensor *src[5];
    for (int g = 0; g < 4; g++) src[g] = ag_reshape(ag_slice(in[1], 0, g, g + 1), 3, (int[]){2, 3, 4});
    src[4] = in[2];
    return ag_sub(ag__softmax_mix_ref_planes(in[0], in[1], in[2], mix_lengths),
                  ag_softmax_mix_ref(in[0], src, 5, mix_lengths));
}

static int heads_2_3_12(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 3, 12)); return 1; }
static int heads_3_6(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 6)); return 1; }
static int heads_2345(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 3, 4, 5)); return 1; }
static int heads_324(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 2, 4)); return 1; }
static ag_tensor *f_split3(ag_tensor **in) { return ag_split_heads(in[0], 3); }
static ag_tensor *f_split2(ag_tensor **in) { return ag_split_heads(in[0], 2); }
static ag_tensor *f_split1(ag_tensor **in) { return ag_split_heads(in[0], 1); }
static ag_tensor *f_merge(ag_tensor **in) { return ag_merge_heads(in[0]); }
/* The round trip is the identity: gradients pass through both copies. */
static ag_tensor *f_split_merge(ag_tensor **in) { return ag_merge_heads(ag_split_heads(in[0], 4)); }

/* ---- fused attention ---- */

/* The attention cases call attn(): ag_attention, or inside recomputed()
 * ag_attention_recompute in blocks of `rows` query rows (0: the kernels'
 * own), each case then run both ways through the same function. */
static bool recomputing;
static ag_tensor *attn(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, double scale) {
    return recomputing ? ag_attention_recompute(q, k, v, mask, scale) : ag_attention(q, k, v, mask, scale, NULL);
}
static ag_tensor *recomputed(ag_tensor *(*f)(ag_tensor **), ag_tensor **in, int rows) {
    recomputing = true, ag__attention_block_rows = rows;
    ag_tensor *out = f(in);
    recomputing = false, ag__attention_block_rows = 0;
    return out;
}
/* ag_attention in blocks of `rows` query rows, each with its keys' span,
 * where the kernels would take these small slices whole. */
static ag_tensor *in_blocks(ag_tensor *(*f)(ag_tensor **), ag_tensor **in, int rows) {
    ag__attention_block_rows = rows;
    ag_tensor *out = f(in);
    ag__attention_block_rows = 0;
    return out;
}

#define ATTN_SETUP(NAME, SQ, SK, SV)                                               \
    static int NAME(ag_tensor **in, ag_rng *r) {                                   \
        in[0] = tc_away(r, 0.1, 1.5, true, SQ);                                     \
        in[1] = tc_away(r, 0.1, 1.5, true, SK);                                     \
        in[2] = tc_away(r, 0.1, 1.5, true, SV);                                     \
        return 3;                                                                   \
    }

ATTN_SETUP(attn_cross, SHAPE(2, 3, 4, 5), SHAPE(2, 3, 6, 5), SHAPE(2, 3, 6, 5))
ATTN_SETUP(attn_dv3, SHAPE(2, 4, 5), SHAPE(2, 6, 5), SHAPE(2, 6, 3))
ATTN_SETUP(attn_self4, SHAPE(2, 2, 4, 3), SHAPE(2, 2, 4, 3), SHAPE(2, 2, 4, 3))
ATTN_SETUP(attn_self5, SHAPE(2, 2, 5, 3), SHAPE(2, 2, 5, 3), SHAPE(2, 2, 5, 3))
ATTN_SETUP(attn_n1, SHAPE(2, 2, 1, 3), SHAPE(2, 2, 1, 3), SHAPE(2, 2, 1, 3))
ATTN_SETUP(attn_2d, SHAPE(3, 4), SHAPE(5, 4), SHAPE(5, 2))
/* grouped-query attention: 6 query heads on 2 key-value heads, and on 1 */
ATTN_SETUP(attn_grouped, SHAPE(2, 6, 5, 3), SHAPE(2, 2, 5, 3), SHAPE(2, 2, 5, 4))
ATTN_SETUP(attn_one_kv, SHAPE(2, 3, 4, 3), SHAPE(2, 1, 6, 3), SHAPE(2, 1, 6, 2))

/* Logits ~1e3 (quantized, so exact in f32): saturated but finite. */
static int attn_large(ag_tensor **in, ag_rng *r) {
    in[0] = quantized(tc_away(r, 10, 30, true, SHAPE(2, 4, 2)), 0.25);
    in[1] = quantized(tc_away(r, 10, 30, true, SHAPE(2, 4, 2)), 0.25);
    in[2] = tc_away(r, 0.1, 1.5, true, SHAPE(2, 4, 3));
    return 3;
}

static ag_tensor *f_attn_plain(ag_tensor **in) { return attn(in[0], in[1], in[2], NULL, 0.45); }
static ag_tensor *f_attn_past(ag_tensor **in) {
    return attn(in[0], in[1], in[2], ag_mask(&past, 4), 0.6);
}
static ag_tensor *f_attn_n1_past(ag_tensor **in) {
    return attn(in[0], in[1], in[2], ag_mask(&past, 1), 1.0);
}
static ag_tensor *f_attn_n1_incl(ag_tensor **in) {
    return attn(in[0], in[1], in[2], ag_mask(&past_incl, 1), 1.0);
}
static ag_tensor *f_attn_large(ag_tensor **in) {
    return attn(in[0], in[1], in[2], ag_mask(&past_incl, 4), 1.0);
}
/* The fused op against matmul, masked_softmax, matmul at logits ~1e3 with
 * a fully masked first row: a difference of 0 (v added for a gradient). */
static ag_tensor *f_attn_large_vs_composed(ag_tensor **in) {
    ag_tensor *m = ag_mask(&past, 4);
    ag_tensor *p = ag_masked_softmax(ag_matmul_t(in[0], false, in[1], true), m, 1.0);
    return tc_difference(ag_sub(attn(in[0], in[1], in[2], m, 1.0), ag_matmul(p, in[2])), in[2]);
}
/* MS-SAN style: per-sentence, per-head masks (direction + 1.5 * word or tree
 * distance) with a padded sentence, all in one [B,h,N,N] mask. */
static const int32_t len_53[] = {5, 3};
static const int32_t heads_53[] = {1, 2, -1, 2, 3, /* */ 2, 2, -1, 0, 0};
static ag_tensor *f_attn_batch_mask(ag_tensor **in) {
    const ag_mask_spec specs[2] = {
        {.dir = AG_MASK_PAST_INCL, .dist = AG_DIST_TREE, .weight = 1.5},
        {.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_WORD, .weight = 1.5},
    };
    ag_tensor *m = NULL;
    ag_mask_batch(specs, 2, 2, 5, len_53, heads_53, &m);
    return attn(in[0], in[1], in[2], m, 0.5);
}
/* Key padding [B,1,1,N] against [B,h,Nq,Nk]. */
static ag_tensor *f_attn_keypad_len0(ag_tensor **in) { /* example 1 empty: every row fully masked */
    return attn(in[0], in[1], in[2], ag_mask_padding((const int32_t[]){5, 0}, 2, 5, 4, false), 0.8);
}
static ag_tensor *f_attn_pad_len1(ag_tensor **in) { /* keys and queries, example 1 of length 1 */
    return attn(in[0], in[1], in[2], ag_mask_padding((const int32_t[]){4, 1}, 2, 5, 4, true), 0.8);
}
/* Logits ~1e3 under PAST: query 0 fully masked. */
static ag_tensor *f_attn_large_past(ag_tensor **in) {
    return attn(in[0], in[1], in[2], ag_mask(&past, 4), 1.0);
}
static ag_tensor *f_attn_keypad(ag_tensor **in) {
    return attn(in[0], in[1], in[2], ag_mask_padding(len_53, 2, 5, 4, false), 0.8);
}
/* Grouped: causal with padding (example 1 of length 1: query rows past it
 * fully masked), per-head masks, and against its key-value heads copied to
 * every query head of their group (a difference of 0 up to the sums'
 * order: the copy's gradient adds the group's in another order). */
static ag_tensor *f_attn_grouped_causal(ag_tensor **in) {
    ag_tensor *m = ag_add(ag_mask(&past_incl, 5), ag_mask_padding((const int32_t[]){5, 1}, 2, 5, 4, true));
    return attn(in[0], in[1], in[2], m, 0.7);
}
static ag_tensor *f_attn_grouped_heads(ag_tensor **in) { /* a mask per query head, two of a group alike */
    static const ag_mask_spec six[6] = {
        {.dir = AG_MASK_PAST}, {.dir = AG_MASK_FUTURE}, {.dir = AG_MASK_PAST_INCL, .dist = AG_DIST_WORD, .weight = 1.5},
        {.dir = AG_MASK_PAST}, {.dir = AG_MASK_FUTURE_INCL}, {.dist = AG_DIST_WORD, .weight = 0.5}};
    return attn(in[0], in[1], in[2], ag_mask_heads(six, 6, 5), 0.5);
}
static ag_tensor *f_attn_grouped_vs_copied(ag_tensor **in) { /* 6 or 8 query heads on 2 */
    static const int32_t six[] = {0, 0, 0, 1, 1, 1}, eight[] = {0, 0, 0, 0, 1, 1, 1, 1};
    int h = in[0]->shape[1];
    const int32_t *group = h == 6 ? six : eight;
    ag_tensor *k = ag_index_select(in[1], 1, group, h), *v = ag_index_select(in[2], 1, group, h);
    int n = in[0]->shape[2];
    ag_tensor *grouped = attn(in[0], in[1], in[2], ag_mask(&past, n), 0.6);
    return tc_difference(ag_sub(grouped, attn(in[0], k, v, ag_mask(&past, n), 0.6)), grouped);
}

/* The same cases recomputed (ag_attention_recompute), in blocks of 2 or 3
 * query rows (the last one shorter where the rows are odd) or of the
 * kernels' own choice (0); the masked ones also stored in such blocks
 * (each block's keys cut to its mask's span, the probabilities outside it
 * 0), where the kernels would take these small slices whole; and the
 * recomputed op against the stored one. */
#define RECOMPUTED(NAME, F, ROWS) \
    static ag_tensor *NAME(ag_tensor **in) { return recomputed(F, in, ROWS); }
#define BOTH_WAYS(CASE, ROWS)                                                            \
    RECOMPUTED(r_##CASE, f_##CASE, ROWS)                                                 \
    static ag_tensor *b_##CASE(ag_tensor **in) { return in_blocks(f_##CASE, in, ROWS); }
RECOMPUTED(r_attn_plain, f_attn_plain, 3)
RECOMPUTED(r_attn_plain_own, f_attn_plain, 0)
BOTH_WAYS(attn_past, 2)
BOTH_WAYS(attn_n1_past, 2)
BOTH_WAYS(attn_batch_mask, 2)
BOTH_WAYS(attn_keypad_len0, 2)
BOTH_WAYS(attn_pad_len1, 2)
BOTH_WAYS(attn_large_past, 3)
RECOMPUTED(r_attn_large_vs_composed, f_attn_large_vs_composed, 3)
BOTH_WAYS(attn_grouped_causal, 2)
BOTH_WAYS(attn_grouped_heads, 2)
RECOMPUTED(r_attn_grouped_vs_copied, f_attn_grouped_vs_copied, 2)
/* A sliding window of 2 under PAST_INCL with padding (example 1 of length
 * 1): each 2-row block's keys cut at both ends; and against the stored op. */
static ag_tensor *window_mask(void) {
    return ag_add(ag_mask(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL, .window = 2}, 5),
                  ag_mask_padding((const int32_t[]){5, 1}, 2, 5, 4, true));
}
static ag_tensor *f_attn_window(ag_tensor **in) { return attn(in[0], in[1], in[2], window_mask(), 0.7); }
BOTH_WAYS(attn_window, 2)
/* Blocks against one block: outputs and the probabilities themselves (a
 * heatmap's [B,h,Nq,Nk], 0 outside each block's span). */
static ag_tensor *f_attn_blocks_vs_whole(ag_tensor **in) {
    ag_tensor *m = window_mask(), *p_whole, *p_blocks;
    ag_tensor *whole = ag_attention(in[0], in[1], in[2], m, 0.7, &p_whole);
    ag__attention_block_rows = 2;
    ag_tensor *blocks = ag_attention(in[0], in[1], in[2], m, 0.7, &p_blocks);
    ag__attention_block_rows = 0;
    ag_tensor *probs = ag_sum(ag_square(ag_sub(p_blocks, p_whole))); /* constants: no gradient */
    return tc_difference(ag_add(ag_sub(blocks, whole), probs), whole);
}
static ag_tensor *f_attn_window_recomputed_vs_stored(ag_tensor **in) {
    ag_tensor *m = window_mask(), *stored = ag_attention(in[0], in[1], in[2], m, 0.7, NULL);
    ag__attention_block_rows = 2;
    ag_tensor *again = ag_attention_recompute(in[0], in[1], in[2], m, 0.7);
    ag__attention_block_rows = 0;
    return tc_difference(ag_sub(again, stored), stored);
}
static ag_tensor *f_attn_recomputed_vs_stored(ag_tensor **in) {
    ag_tensor *m = ag_add(ag_mask(&past_incl, 5), ag_mask_padding((const int32_t[]){5, 1}, 2, 5, 4, true));
    ag_tensor *stored = ag_attention(in[0], in[1], in[2], m, 0.7, NULL);
    ag__attention_block_rows = 2;
    ag_tensor *again = ag_attention_recompute(in[0], in[1], in[2], m, 0.7);
    ag__attention_block_rows = 0;
    return tc_difference(ag_sub(again, stored), stored);
}

/* ---- the device's sizes ---- */

#define NEG_INF (-(ag_real)INFINITY)

/* Heads: strict PAST (row 0 fully masked), FUTURE_INCL with word distance,
 * NONE with log distance, PAST_INCL within 2 positions and weight 1.5. */
static const ag_mask_spec softmax_specs[4] = {
    {.dir = AG_MASK_PAST},
    {.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_WORD},
    {.dist = AG_DIST_LOG},
    {.dir = AG_MASK_PAST_INCL, .faraway = 2, .dist = AG_DIST_WORD, .weight = 1.5},
};

/* scores [2,4,9,9], per-head positional masks [4,9,9] from the cache, scale 0.5 */
static ag_tensor *f_msm_heads_cached(ag_tensor **x) { return ag_masked_softmax(x[0], ag_mask_heads(softmax_specs, 4, 9), 0.5); }

/* [3,37] against a [3,37] mask: row 1 fully masked, others in part */
static ag_tensor *f_msm_full(ag_tensor **x) {
    ag_real m[3 * 37];
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 37; c++) m[r * 37 + c] = r == 1 || (r == 2 && c % 3 == 0) ? NEG_INF : (ag_real)(0.1 * c);
    return ag_masked_softmax(x[0], tc_const_like(x[0], 2, (int[]){3, 37}, m), 1.0);
}

/* [5,300] logits to 1e3 against a [300] mask row, scale 0.7 */
static ag_tensor *f_msm_large_row(ag_tensor **x) {
    ag_real m[300];
    for (int c = 0; c < 300; c++) m[c] = c % 7 == 3 ? NEG_INF : 0;
    return ag_masked_softmax(x[0], tc_const_like(x[0], 1, (int[]){300}, m), 0.7);
}

/* length 1: [4,1] against [1], scale 2 */
static ag_tensor *f_msm_len1(ag_tensor **x) {
    ag_real m[1] = {0};
    return ag_masked_softmax(x[0], tc_const_like(x[0], 1, (int[]){1}, m), 2.0);
}

/* padding of keys and query rows: [2,3,6,6] against ag_mask_padding's
 * [2,1,6,6] (lengths 6 and 2: rows 2..5 of example 1 fully masked), scale -0.3 */
static ag_tensor *f_msm_pad_queries(ag_tensor **x) {
    return ag_masked_softmax(x[0], ag_mask_padding((const int32_t[]){6, 2}, 2, 6, 4, true), -0.3);
}

/* key padding [3,1,1,300] against [3,2,7,300] (lengths 300, 17, 0: the last
 * example fully masked) */
static ag_tensor *f_msm_pad_keys(ag_tensor **x) {
    return ag_masked_softmax(x[0], ag_mask_padding((const int32_t[]){300, 17, 0}, 3, 300, 4, false), 1.0);
}

/* ag_mask_batch's [2,2,6,6] (positional heads, padding of length 4), scale 0.9 */
static ag_tensor *f_msm_batch(ag_tensor **x) {
    ag_tensor *m = NULL;
    if (ag_mask_batch(softmax_specs, 2, 2, 6, (const int32_t[]){6, 4}, NULL, &m) != AG_OK) {
        fprintf(stderr, "ag_mask_batch: %s\n", ag_errmsg());
        abort();
    }
    return ag_masked_softmax(x[0], m, 0.9);
}

/* a [B,N,N] scores tensor against a 2-D mask with a fully masked first row */
static ag_tensor *f_msm_mask2d(ag_tensor **x) { return ag_masked_softmax(x[0], ag_mask(&softmax_specs[0], 33), 1.0); }

/* the attenuation factor (a cached constant) multiplying scores */
static ag_tensor *f_attenuation(ag_tensor **x) { return ag_mul(x[0], ag_mask_attenuation(M_E, M_E, 11)); }

/* ag_valid_mask [2,5,1] (lengths 5, 2) broadcast over features */
static ag_tensor *f_valid_mask(ag_tensor **x) { return ag_mul(x[0], ag_valid_mask((const int32_t[]){5, 2}, 2, 5)); }

static ag_tensor *f_sm_len_mid(ag_tensor **x) { /* [3,7,5] along 1, lengths 7, 1, 0 */
    return ag_softmax_axis_len(x[0], 1, (const int32_t[]){7, 1, 0});
}
static ag_tensor *f_sm_len_last(ag_tensor **x) { /* [3,37] along the last axis (inner 1) */
    return ag_softmax_axis_len(x[0], -1, (const int32_t[]){37, 4, 1});
}
static ag_tensor *f_sm_len_4d(ag_tensor **x) { /* [2,5,4,3] along 2: several slices per example */
    return ag_softmax_axis_len(x[0], 2, (const int32_t[]){4, 2});
}
static ag_tensor *f_sm_len_none(ag_tensor **x) { return ag_softmax_axis_len(x[0], 1, NULL); }

/* pooling at the device's sizes: widths 37 and 33 off multiples of 32 */
static ag_tensor *f_spool_mid(ag_tensor **x) { return ag__softmax_pool(x[0], x[1], (const int32_t[]){7, 1, 0}, NULL); }
static ag_tensor *f_spool_none(ag_tensor **x) { return ag__softmax_pool(x[0], x[1], NULL, NULL); }

/* mixtures of 2 sources: z [2,5,2*37] or [2,5,2,37] over sources [2,5,37] */
static ag_tensor *f_mix2(ag_tensor **x) { return ag_softmax_mix(x[0], (ag_tensor *[]){x[1], x[2]}, 2); }
static ag_tensor *f_mix2_len(ag_tensor **x) {
    return ag_softmax_mix_len(x[0], (ag_tensor *[]){x[1], x[2]}, 2, (const int32_t[]){5, 2});
}
static ag_tensor *f_mix2_ref(ag_tensor **x) { /* z [2,5,37]: one logit, the reference's 0 */
    return ag_softmax_mix_ref(x[0], (ag_tensor *[]){x[1], x[2]}, 2, (const int32_t[]){3, 0});
}

/* heads: [B,N,h*d] and [N,h*d] both ways, twice (gradients add) */
static ag_tensor *f_split4(ag_tensor **x) { return ag_split_heads(x[0], 4); }
static ag_tensor *f_split_twice(ag_tensor **x) { return ag_mul(ag_split_heads(x[0], 3), ag_split_heads(x[0], 3)); }
/* A fused projection's q, k, v taken apart by column ranges, as
 * ag_mha_forward does ([2,5,20]: 2 query heads of 4, 1 key-value head,
 * 4 columns unused, whose gradient stays 0), through grouped attention;
 * and a range against the slice of it split (a difference of 0). */
static ag_tensor *f_split_at_qkv(ag_tensor **x) {
    ag_tensor *q = ag_split_heads_at(x[0], 0, 2, 4), *k = ag_split_heads_at(x[0], 8, 1, 4);
    return attn(q, k, ag_split_heads_at(x[0], 12, 1, 4), NULL, 0.5);
}
static ag_tensor *f_split_at_vs_slice(ag_tensor **x) {
    ag_tensor *at = ag_split_heads_at(x[0], 4, 2, 3);
    return tc_difference(ag_sub(at, ag_split_heads(ag_slice(x[0], x[0]->ndim - 1, 4, 10), 2)), at);
}
static ag_tensor *f_merge_twice(ag_tensor **x) { return ag_mul(ag_merge_heads(x[0]), ag_merge_heads(x[0])); }
static ag_tensor *f_split_tanh_merge(ag_tensor **x) { return ag_merge_heads(ag_tanh(ag_split_heads(x[0], 5))); }

/* attention: [2,3,7,16] queries on 9 keys, a [2,1,7,9] mask with padded
 * keys and a fully masked query row, scale 0.25 */
static ag_tensor *f_attn_mask(ag_tensor **x) {
    ag_real m[2 * 7 * 9];
    for (int b = 0; b < 2; b++)
        for (int q = 0; q < 7; q++)
            for (int k = 0; k < 9; k++)
                m[(b * 7 + q) * 9 + k] = (b == 1 && (k >= 5 || q == 3)) ? NEG_INF : (ag_real)(-0.2 * abs(q - k));
    return attn(x[0], x[1], x[2], tc_const_like(x[0], 4, (int[]){2, 1, 7, 9}, m), 0.25);
}
static ag_tensor *f_attn_plain_1(ag_tensor **x) { return attn(x[0], x[1], x[2], NULL, 1.0); }
/* self-attention, q = k: the same gradient written twice */
static ag_tensor *f_attn_self(ag_tensor **x) {
    return attn(x[0], x[0], x[1], ag_mask_padding((const int32_t[]){6, 3}, 2, 6, 4, true), 0.35);
}
/* per-head positional masks [4,9,9] */
static ag_tensor *f_attn_heads(ag_tensor **x) {
    return attn(x[0], x[1], x[2], ag_mask_heads(softmax_specs, 4, 9), 0.5);
}
RECOMPUTED(r_attn_mask, f_attn_mask, 3)
RECOMPUTED(r_attn_plain_1, f_attn_plain_1, 5)
RECOMPUTED(r_attn_plain_1_own, f_attn_plain_1, 0)
RECOMPUTED(r_attn_self, f_attn_self, 4)
RECOMPUTED(r_attn_heads, f_attn_heads, 4)
RECOMPUTED(r_split_at_qkv, f_split_at_qkv, 2)

/* ag_soft_align (models/layers.c): a [3,5,4] against b [3,7,4], a length-1
 * and an empty sentence on either side; its three outputs flattened, one
 * after another.  The scores variant: e [3,5,7], b of another width. */
static ag_tensor *flat_all(ag_tensor *a, ag_tensor *b, ag_tensor *c) {
    ag_tensor *xs[3] = {ag_reshape(a, 1, (int[]){(int)a->size}), ag_reshape(b, 1, (int[]){(int)b->size}),
                        ag_reshape(c, 1, (int[]){(int)c->size})};
    return ag_concat(xs, 3, 0);
}
static ag_tensor *f_soft_align(ag_tensor **x) {
    ag_tensor *at, *bt, *pr;
    ag_soft_align(x[0], x[1], (const int32_t[]){5, 1, 0}, (const int32_t[]){2, 0, 7}, &at, &bt, &pr);
    return flat_all(at, bt, pr);
}
static ag_tensor *f_soft_align_scores(ag_tensor **x) {
    ag_tensor *at, *bt, *pr;
    ag_soft_align_scores(x[0], x[1], x[2], (const int32_t[]){5, 1, 0}, (const int32_t[]){2, 0, 7}, &at, &bt, &pr);
    return flat_all(at, bt, pr);
}

const op_case attention_cases[] = {
    {"softmax [3,5]", sm_35, f_softmax, 0, 0},
    {"softmax N=1", sm_n1, f_softmax, 0, 0},
    {"softmax [2,17] (lane tail)", sm_17, f_softmax, 0, 0},
    {"softmax logits ~1e3", sm_large, f_softmax, 0, 0},
    {"masked_softmax PAST, scale", sm_b_h_44, f_msm_past, 0, 0},
    {"masked_softmax per-head penalties", sm_b_h_55, f_msm_heads, 0, 0},
    {"masked_softmax padding [B,1,N,N]", sm_b_h_44, f_msm_pad4, 0, 0},
    {"masked_softmax key padding, len 0", sm_b_55, f_msm_keypad3, 0, 0},
    {"masked_softmax N=1 PAST (all masked)", sm_b_h_11, f_msm_n1_past, 0, 0},
    {"masked_softmax N=1 PAST_INCL", sm_b_h_11, f_msm_n1_incl, 0, 0},
    {"masked_softmax logits ~1e3", sm_large_44, f_msm_large, 0, 0},
    {"masked_softmax logits ~1e3 PAST (first row masked)", sm_ties_44, f_msm_large_past, 0, 0},
    {"masked_softmax logits ~1e3 padding, len 0", sm_ties_44, f_msm_large_pad0, 0, 0},
    {"masked_softmax padding [B,1,N,N], len 1", sm_b_h_44, f_msm_pad_len1, 0, 0},
    {"log_softmax [3,5]", sm_35, f_log_softmax, 0, 0},
    {"log_softmax N=1", sm_n1, f_log_softmax, 0, 0},
    {"log_softmax logits ~1e3", sm_large, f_log_softmax, 0, 0},
    {"softmax_axis_len [B,N,d] axis 1, len 0", pool_354, f_pool_len, 0, 0},
    {"softmax_axis_len 4-D axis 2", pool_2342, f_pool_axis2, 0, 0},
    {"softmax_axis_len axis -2", pool_2342, f_pool_neg_axis, 0, 0},
    {"softmax_axis_len no lengths, axis 0", pool_354, f_pool_nolen, 0, 0},
    {"softmax_axis_len logits ~1e3, len 5,1,0", pool_large, f_pool_len_large, 0, 0},
    {"softmax_pool [3,5,4] len 5,0,3", spool_354, f_spool_len, 0, 0},
    {"softmax_pool no lengths", spool_354, f_spool_nolen, 0, 0},
    {"softmax_pool N=1, len 1,0", spool_n1, f_spool_n1, 0, 0},
    {"softmax_pool scores = values", spool_354, f_spool_same, 0, 0},
    {"softmax_pool logits ~1e3", spool_large, f_spool_large, 0, 0},
    {"softmax_pool logits ~1e3 equals the composition", spool_large, f_spool_large_vs_composed, .flags = OPCASE_DIFFERENCE},
    {"softmax_pool weights handed out", spool_const_scores, f_spool_weights, 0, 0},
    {"softmax_mix 5 sources [B,N,5d]", mix_5, f_mix_5, 0, 0},
    {"softmax_mix_len lengths 3, 1", mix_5, f_mix_len, 0, 0},
    {"softmax_mix_len an empty example", mix_5, f_mix_len_empty, 0, 0},
    {"softmax_mix_len minus zero_padding(softmax_mix)", mix_5, f_mix_len_minus_padded, .flags = OPCASE_DIFFERENCE},
    {"softmax_mix_len a source given twice", mix_5, f_mix_len_repeat, 0, 0},
    {"softmax_mix logits [N,3,d]", mix_split, f_mix_3, 0, 0},
    {"softmax_mix large logits", mix_large, f_mix_3, 0, 0},
    {"softmax_mix one source", mix_one, f_mix_1, 0, 0},
    {"softmax_mix logits ~1e3", mix_1e3, f_mix_5, 0, 0},
    {"softmax_mix_len logits ~1e3, lengths 0, 2", mix_1e3, f_mix_len_empty, 0, 0},
    {"softmax_mix_len minus zero_padding(softmax_mix), logits ~1e3", mix_1e3, f_mix_len_minus_padded,
     .flags = OPCASE_DIFFERENCE},
    {"softmax_mix a source given twice", mix_split, f_mix_repeat, 0, 0},
    {"softmax_mix_ref 5 sources [B,N,4d]", mix_ref_5, f_mix_ref, 0, 0},
    {"softmax_mix_ref planes 4 of a stack, lengths 3,1", mix_planes_4, f_mix_planes, 0, 0},
    {"softmax_mix_ref planes, an empty example", mix_planes_4, f_mix_planes_empty, 0, 0},
    {"softmax_mix_ref planes equal the slices", mix_planes_4, f_mix_planes_vs_slices, .flags = OPCASE_DIFFERENCE},
    {"softmax_mix_ref lengths 3, 1", mix_ref_5, f_mix_ref_len, 0, 0},
    {"softmax_mix_ref an empty example", mix_ref_5, f_mix_ref_empty, 0, 0},
    {"softmax_mix_ref minus softmax_mix_len with a 0 block", mix_ref_5, f_mix_ref_minus_plain, .flags = OPCASE_DIFFERENCE},
    {"softmax_mix_ref the reference given twice", mix_ref_5, f_mix_ref_repeat, 0, 0},
    {"softmax_mix_ref logits [N,2,d]", mix_ref_split, f_mix_ref_3, 0, 0},
    {"softmax_mix_ref large logits", mix_ref_large, f_mix_ref_3, 0, 0},
    {"softmax_mix_ref logits ~1e3, lengths 3, 1", mix_ref_1e3, f_mix_ref_len, 0, 0},
    {"softmax_mix_ref planes logits ~1e3, lengths 3, 1", mix_planes_1e3, f_mix_planes, 0, 0},
    {"softmax_mix_ref minus softmax_mix_len with a 0 block, logits ~1e3", mix_ref_1e3, f_mix_ref_minus_plain,
     .flags = OPCASE_DIFFERENCE},
    {"softmax_mix_ref two sources, length 1", mix_ref_two, f_mix_ref_2, 0, 0},
    {"split_heads [B,N,h*d]", heads_2_3_12, f_split3, 0, 0},
    {"split_heads [N,h*d]", heads_3_6, f_split2, 0, 0},
    {"split_heads h=1", heads_3_6, f_split1, 0, 0},
    {"merge_heads [B,h,N,d]", heads_2345, f_merge, 0, 0},
    {"merge_heads [h,N,d]", heads_324, f_merge, 0, 0},
    {"split then merge heads", heads_2_3_12, f_split_merge, 0, 0},
    {"attention cross Nq!=Nk", attn_cross, f_attn_plain, 0, 0},
    {"attention 3-D, dv!=d", attn_dv3, f_attn_plain, 0, 0},
    {"attention 2-D", attn_2d, f_attn_plain, 0, 0},
    {"attention PAST (first row masked)", attn_self4, f_attn_past, 0, 0},
    {"attention N=1 PAST (all masked)", attn_n1, f_attn_n1_past, 0, 0},
    {"attention N=1 PAST_INCL", attn_n1, f_attn_n1_incl, 0, 0},
    {"attention batch mask tree+pad", attn_self5, f_attn_batch_mask, 0, 0},
    {"attention key padding", attn_self5, f_attn_keypad, 0, 0},
    {"attention logits ~1e3", attn_large, f_attn_large, 0, 0},
    {"attention logits ~1e3 PAST (first row masked)", attn_large, f_attn_large_past, 0, 0},
    {"attention logits ~1e3 equals the composition", attn_large, f_attn_large_vs_composed, .flags = OPCASE_DIFFERENCE},
    {"attention key padding, len 0", attn_self5, f_attn_keypad_len0, 0, 0},
    {"attention padding, len 1", attn_self5, f_attn_pad_len1, 0, 0},
    {"attention grouped 6 on 2 heads, causal, len 1", attn_grouped, f_attn_grouped_causal, 0, 0},
    {"attention grouped 6 on 2 heads, per-head masks", attn_grouped, f_attn_grouped_heads, 0, 0},
    {"attention grouped 6 on 2 heads equals the heads copied", attn_grouped, f_attn_grouped_vs_copied,
     .flags = OPCASE_DIFFERENCE},
    {"attention one key-value head, Nq!=Nk", attn_one_kv, f_attn_plain, 0, 0},
    {"recomputed attention cross Nq!=Nk, 3-row blocks", attn_cross, r_attn_plain, 0, 0},
    {"recomputed attention 3-D, dv!=d", attn_dv3, r_attn_plain, 0, 0},
    {"recomputed attention 2-D, the kernels' blocks", attn_2d, r_attn_plain_own, 0, 0},
    {"recomputed attention PAST (first row masked), 2-row blocks", attn_self4, r_attn_past, 0, 0},
    {"recomputed attention N=1 PAST (all masked)", attn_n1, r_attn_n1_past, 0, 0},
    {"recomputed attention batch mask tree+pad", attn_self5, r_attn_batch_mask, 0, 0},
    {"recomputed attention key padding, len 0", attn_self5, r_attn_keypad_len0, 0, 0},
    {"recomputed attention padding, len 1", attn_self5, r_attn_pad_len1, 0, 0},
    {"recomputed attention logits ~1e3 PAST", attn_large, r_attn_large_past, 0, 0},
    {"recomputed attention logits ~1e3 equals the composition", attn_large, r_attn_large_vs_composed,
     .flags = OPCASE_DIFFERENCE},
    {"recomputed attention grouped 6 on 2 heads, causal, len 1", attn_grouped, r_attn_grouped_causal, 0, 0},
    {"recomputed attention grouped 6 on 2 heads, per-head masks", attn_grouped, r_attn_grouped_heads, 0, 0},
    {"recomputed attention grouped equals the heads copied", attn_grouped, r_attn_grouped_vs_copied,
     .flags = OPCASE_DIFFERENCE},
    {"recomputed attention one key-value head, Nq!=Nk", attn_one_kv, r_attn_plain, 0, 0},
    {"recomputed attention equals the stored, grouped, causal, len 1", attn_grouped, f_attn_recomputed_vs_stored,
     .flags = OPCASE_DIFFERENCE},
    {"attention sliding window 2, len 1", attn_grouped, f_attn_window, 0, 0},
    {"recomputed attention sliding window 2, len 1, 2-row blocks", attn_grouped, r_attn_window, 0, 0},
    {"recomputed attention sliding window equals the stored", attn_grouped, f_attn_window_recomputed_vs_stored,
     .flags = OPCASE_DIFFERENCE},
    {"attention in 2-row blocks, PAST (first row masked)", attn_self4, b_attn_past, 0, 0},
    {"attention in 2-row blocks, N=1 PAST (all masked)", attn_n1, b_attn_n1_past, 0, 0},
    {"attention in 2-row blocks, batch mask tree+pad", attn_self5, b_attn_batch_mask, 0, 0},
    {"attention in 2-row blocks, key padding, len 0", attn_self5, b_attn_keypad_len0, 0, 0},
    {"attention in 2-row blocks, padding, len 1", attn_self5, b_attn_pad_len1, 0, 0},
    {"attention in 3-row blocks, logits ~1e3 PAST", attn_large, b_attn_large_past, 0, 0},
    {"attention in 2-row blocks, grouped 6 on 2 heads, causal, len 1", attn_grouped, b_attn_grouped_causal, 0, 0},
    {"attention in 2-row blocks, grouped 6 on 2 heads, per-head masks", attn_grouped, b_attn_grouped_heads, 0, 0},
    {"attention in 2-row blocks, sliding window 2, len 1", attn_grouped, b_attn_window, 0, 0},
    {"attention in 2-row blocks equals one block, probabilities too", attn_grouped, f_attn_blocks_vs_whole,
     .flags = OPCASE_DIFFERENCE},
    /* ---- the device's sizes ---- */
    /* softmax: odd widths, large logits (length 1: softmax N=1) */
    UNIFORM_CASE("softmax [3,5,37]", f_softmax, -3, 3, DIMS(3, 5, 37)),
    UNIFORM_CASE("softmax [6,300] (logits to 1e3)", f_softmax, -1000, 1000, DIMS(6, 300)),
    /* masked softmax: every broadcast of the mask, fully masked rows, scale */
    UNIFORM_CASE("masked_softmax heads [2,4,9,9]", f_msm_heads_cached, -3, 3, DIMS(2, 4, 9, 9)),
    UNIFORM_CASE("masked_softmax full row [3,37]", f_msm_full, -3, 3, DIMS(3, 37)),
    UNIFORM_CASE("masked_softmax [5,300] 1e3 x.7", f_msm_large_row, -1000, 1000, DIMS(5, 300)),
    UNIFORM_CASE("masked_softmax [4,1] length 1", f_msm_len1, -3, 3, DIMS(4, 1)),
    UNIFORM_CASE("masked_softmax pad q [2,3,6,6]", f_msm_pad_queries, -3, 3, DIMS(2, 3, 6, 6)),
    UNIFORM_CASE("masked_softmax pad k [3,2,7,300]", f_msm_pad_keys, -3, 3, DIMS(3, 2, 7, 300)),
    UNIFORM_CASE("masked_softmax mask_batch", f_msm_batch, -3, 3, DIMS(2, 2, 6, 6)),
    UNIFORM_CASE("masked_softmax [3,33,33] mask2d", f_msm_mask2d, -3, 3, DIMS(3, 33, 33)),
    UNIFORM_CASE("attenuation [11,11]", f_attenuation, -3, 3, DIMS(11, 11)),
    UNIFORM_CASE("valid_mask [2,5,3]", f_valid_mask, -3, 3, DIMS(2, 5, 3)),
    /* log-softmax (length 1: log_softmax N=1) */
    UNIFORM_CASE("log_softmax [3,5,37]", f_log_softmax, -3, 3, DIMS(3, 5, 37)),
    UNIFORM_CASE("log_softmax [6,300] 1e3", f_log_softmax, -1000, 1000, DIMS(6, 300)),
    /* softmax along an axis over lengths */
    UNIFORM_CASE("softmax_axis_len [3,7,5]", f_sm_len_mid, -3, 3, DIMS(3, 7, 5)),
    UNIFORM_CASE("softmax_axis_len [3,37] last", f_sm_len_last, -3, 3, DIMS(3, 37)),
    UNIFORM_CASE("softmax_axis_len [2,5,4,3] ax 2", f_sm_len_4d, -3, 3, DIMS(2, 5, 4, 3)),
    UNIFORM_CASE("softmax_axis_len [4,6,33] none", f_sm_len_none, -1000, 1000, DIMS(4, 6, 33)),
    UNIFORM_CASE("softmax_pool [3,7,37] len 7,1,0", f_spool_mid, -3, 3, DIMS(3, 7, 37), DIMS(3, 7, 37)),
    UNIFORM_CASE("softmax_pool [4,6,33] 1e3", f_spool_none, -1000, 1000, DIMS(4, 6, 33), DIMS(4, 6, 33)),
    /* softmax-gated mixtures */
    UNIFORM_CASE("softmax_mix [2,5,74] 2x37", f_mix2, -3, 3, DIMS(2, 5, 74), DIMS(2, 5, 37), DIMS(2, 5, 37)),
    UNIFORM_CASE("softmax_mix split [2,5,2,37]", f_mix2, -3, 3, DIMS(2, 5, 2, 37), DIMS(2, 5, 37), DIMS(2, 5, 37)),
    UNIFORM_CASE("softmax_mix repeat [2,3,3*7]", f_mix_repeat, -3, 3, DIMS(2, 3, 21), DIMS(2, 3, 7), DIMS(2, 3, 7)),
    UNIFORM_CASE("softmax_mix_len [2,5,74]", f_mix2_len, -3, 3, DIMS(2, 5, 74), DIMS(2, 5, 37), DIMS(2, 5, 37)),
    UNIFORM_CASE("softmax_mix_ref [2,5,37]", f_mix2_ref, -3, 3, DIMS(2, 5, 37), DIMS(2, 5, 37), DIMS(2, 5, 37)),
    /* heads: [B,N,h*d] and [N,h*d] both ways */
    UNIFORM_CASE("split_heads [2,37,12] h=3", f_split3, -1, 1, DIMS(2, 37, 12)),
    UNIFORM_CASE("split_heads [37,12] h=4", f_split4, -1, 1, DIMS(37, 12)),
    UNIFORM_CASE("merge_heads [2,3,37,4]", f_merge, -1, 1, DIMS(2, 3, 37, 4)),
    UNIFORM_CASE("merge_heads [3,33,1]", f_merge, -1, 1, DIMS(3, 33, 1)),
    UNIFORM_CASE("split_heads twice [2,5,9] (adds)", f_split_twice, -1, 1, DIMS(2, 5, 9)),
    UNIFORM_CASE("split_heads_at q|k|v of [2,5,20], 4 unused", f_split_at_qkv, -1, 1, DIMS(2, 5, 20)),
    {.name = "split_heads_at [37,13] cols 4..10 = slice, split", .forward = f_split_at_vs_slice,
     .uniform = UNIFORM_INPUTS(false, -1, 1, DIMS(37, 13)), .flags = OPCASE_DIFFERENCE},
    UNIFORM_CASE("merge_heads twice [3,5,7] (adds)", f_merge_twice, -1, 1, DIMS(3, 5, 7)),
    UNIFORM_CASE("split, tanh, merge [3,7,35]", f_split_tanh_merge, -1, 1, DIMS(3, 7, 35)),
    /* fused attention */
    UNIFORM_CASE("attention mask [2,3,7|9,16|5]", f_attn_mask, -1, 1, DIMS(2, 3, 7, 16), DIMS(2, 3, 9, 16),
                 DIMS(2, 3, 9, 5)),
    UNIFORM_CASE("attention [33,16]x[37,16]", f_attn_plain_1, -1, 1, DIMS(33, 16), DIMS(37, 16), DIMS(37, 3)),
    UNIFORM_CASE("attention self q=k pad [2,2,6,5]", f_attn_self, -1, 1, DIMS(2, 2, 6, 5), DIMS(2, 2, 6, 3)),
    UNIFORM_CASE("attention heads [2,4,9,8]", f_attn_heads, -1, 1, DIMS(2, 4, 9, 8), DIMS(2, 4, 9, 8),
                 DIMS(2, 4, 9, 8)),
    UNIFORM_CASE("attention grouped [2,8,9,16] on 2 heads", f_attn_grouped_vs_copied, -1, 1, DIMS(2, 8, 9, 16),
                 DIMS(2, 2, 9, 16), DIMS(2, 2, 9, 16)),
    UNIFORM_CASE("attention grouped [2,4,33,8] on 1 head", f_attn_plain_1, -1, 1, DIMS(2, 4, 33, 8), DIMS(2, 1, 37, 8),
                 DIMS(2, 1, 37, 5)),
    UNIFORM_CASE("recomputed attention mask [2,3,7|9,16|5]", r_attn_mask, -1, 1, DIMS(2, 3, 7, 16),
                 DIMS(2, 3, 9, 16), DIMS(2, 3, 9, 5)),
    UNIFORM_CASE("recomputed attention [33,16]x[37,16]", r_attn_plain_1, -1, 1, DIMS(33, 16), DIMS(37, 16),
                 DIMS(37, 3)),
    UNIFORM_CASE("recomputed attention self q=k pad [2,2,6,5]", r_attn_self, -1, 1, DIMS(2, 2, 6, 5),
                 DIMS(2, 2, 6, 3)),
    UNIFORM_CASE("recomputed attention heads [2,4,9,8]", r_attn_heads, -1, 1, DIMS(2, 4, 9, 8), DIMS(2, 4, 9, 8),
                 DIMS(2, 4, 9, 8)),
    UNIFORM_CASE("recomputed attention grouped [2,4,33,8] on 1 head", r_attn_plain_1_own, -1, 1, DIMS(2, 4, 33, 8),
                 DIMS(2, 1, 37, 8), DIMS(2, 1, 37, 5)),
    UNIFORM_CASE("recomputed split_heads_at q|k|v of [2,5,20]", r_split_at_qkv, -1, 1, DIMS(2, 5, 20)),
    /* the layers' cross-sentence alignment */
    UNIFORM_CASE("soft_align [3,5,4]x[3,7,4] len 5,1,0 | 2,0,7", f_soft_align, -1, 1, DIMS(3, 5, 4), DIMS(3, 7, 4)),
    UNIFORM_CASE("soft_align_scores [3,5,7] a [3,5,4] b [3,7,6]", f_soft_align_scores, -2, 2, DIMS(3, 5, 7),
                 DIMS(3, 5, 4), DIMS(3, 7, 6)),
    {NULL, NULL, NULL, 0, 0},
};
