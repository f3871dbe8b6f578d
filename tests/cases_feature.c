/* cases_feature.c - op cases for attention along any axis: the masked
 * softmax along an axis other than the last (ag_masked_softmax_axis),
 * feature-wise additive attention (ag_feature_attention, DiSAN's
 * token2token) and scalar additive self-attention (MPSAN's masked unit,
 * ag__additive_self_attention).  Edge cases: length 1, padding and an empty example, fully
 * masked slices and rows, finite penalties, saturated tanh; and each new op
 * against the same function composed from the older ops (a difference that
 * must be 0 with 0 gradients).  Masks are made on the inputs' device. */
#include "opcase.h"
#include "../ops/additive.h" /* ag__additive_self_attention: MPSAN's masked unit */

#include <math.h>

static const ag_mask_spec past = {.dir = AG_MASK_PAST};
static const ag_mask_spec future = {.dir = AG_MASK_FUTURE};
static const ag_mask_spec future_word = {.dir = AG_MASK_FUTURE_INCL, .dist = AG_DIST_WORD, .weight = 0.5};

/* ---- masked softmax along an axis ---- */

static int ax_2443(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 4, 4, 3)); return 1; }
static int ax_354(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 5, 4)); return 1; }
static int ax_253(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 5, 3)); return 1; }
static int ax_314(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(3, 1, 4)); return 1; }
static int ax_23(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 3)); return 1; }
/* Logits ~1e3, multiples of 1/64 (f32 and f64 see the same values). */
static int ax_large(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 900, 1100, true, SHAPE(2, 4, 3));
    for (int64_t i = 0; i < in[0]->size; i++) in[0]->data[i] = (ag_real)(round((double)in[0]->data[i] * 64) / 64);
    return 1;
}

/* Per-feature scores [B,Nq,Nk,d] over the keys (axis 2) under a direction
 * mask [1,N,N,1]: the first query of every example is fully masked. */
static ag_tensor *f_ax_past(ag_tensor **in) {
    return ag_masked_softmax_axis(in[0], 2, ag_reshape(ag_mask(&past, 4), 4, (int[]){1, 4, 4, 1}), 0.8);
}
static ag_tensor *f_ax_nomask(ag_tensor **in) { return ag_masked_softmax_axis(in[0], 1, NULL, 0.7); }
static ag_tensor *f_ax_neg_axis(ag_tensor **in) { return ag_masked_softmax_axis(in[0], -2, NULL, 1.0); }
/* Key padding [B,N,1] over axis 1, lengths 5 and 0 (an empty example). */
static ag_tensor *f_ax_padding(ag_tensor **in) {
    ag_real m[10];
    for (int t = 0; t < 10; t++) m[t] = t < 5 ? 0 : -INFINITY;
    return ag_masked_softmax_axis(in[0], 1, tc_const_like(in[0], 3, (int[]){2, 5, 1}, m), 1.2);
}
/* Axis 0 of [2,3] under a full mask with finite penalties; column 1 fully masked. */
static ag_tensor *f_ax_axis0(ag_tensor **in) {
    ag_real m[6] = {0, -INFINITY, -0.5, 0.3, -INFINITY, 0};
    return ag_masked_softmax_axis(in[0], 0, tc_const_like(in[0], 2, (int[]){2, 3}, m), 1.0);
}
/* Logits ~1e3 over the keys under PAST: query 0 fully masked. */
static int ax_large_2443(ag_tensor **in, ag_rng *r) {
    in[0] = tc_away(r, 997, 1000, true, SHAPE(2, 4, 4, 3));
    for (int64_t i = 0; i < in[0]->size; i++) in[0]->data[i] = (ag_real)(round((double)in[0]->data[i] * 64) / 64);
    return 1;
}
static ag_tensor *f_ax_len1(ag_tensor **in) { return ag_masked_softmax_axis(in[0], 1, NULL, 2.0); }
/* The last axis is ag_masked_softmax itself (a difference of 0). */
static ag_tensor *f_ax_last(ag_tensor **in) {
    return ag_sub(ag_masked_softmax_axis(in[0], 3, ag_mask(&past, 4), 0.5),
                  ag_masked_softmax(in[0], ag_mask(&past, 4), 0.5));
}
static int ax_2344(ag_tensor **in, ag_rng *r) { in[0] = tc_away(r, 0.1, 2.0, true, SHAPE(2, 3, 4, 4)); return 1; }
/* Against the composition it replaces: permute the axis last, mask, permute
 * back.  The difference is 0 and so is its gradient. */
static ag_tensor *f_ax_vs_permute(ag_tensor **in) {
    ag_tensor *m = ag_reshape(ag_mask(&future_word, 4), 4, (int[]){1, 4, 4, 1});
    ag_tensor *x_last = ag_permute(in[0], (int[]){0, 1, 3, 2});   /* [B,Nq,d,Nk] */
    ag_tensor *m_last = ag_reshape(ag_mask(&future_word, 4), 4, (int[]){1, 4, 1, 4});
    ag_tensor *composed = ag_permute(ag_masked_softmax(x_last, m_last, 0.9), (int[]){0, 1, 3, 2});
    return ag_sub(ag_masked_softmax_axis(in[0], 2, m, 0.9), composed);
}

/* ---- feature-wise attention: in[0] = q [B,Nq,d], in[1] = k, in[2] = v [B,Nk,d] ---- */

static int fa_setup(ag_tensor **in, ag_rng *r, int B, int Nq, int Nk, int d, double qk) {
    in[0] = tc_uniform(r, -qk, qk, true, 3, (int[]){B, Nq, d});
    in[1] = tc_uniform(r, -qk, qk, true, 3, (int[]){B, Nk, d});
    in[2] = tc_uniform(r, -1, 1, true, 3, (int[]){B, Nk, d});
    return 3;
}
static int fa_253(ag_tensor **in, ag_rng *r) { return fa_setup(in, r, 2, 5, 5, 3, 2); }
static int fa_n1(ag_tensor **in, ag_rng *r) { return fa_setup(in, r, 2, 1, 1, 3, 2); }
static int fa_large(ag_tensor **in, ag_rng *r) { return fa_setup(in, r, 2, 4, 4, 3, 40); }
/* q, k ~1e3 at c = 1000: logits c tanh((q + k) / c) to ~760, near ties
 * (q, k within 1000 - [0, 3), multiples of 1/64).  f32's tanh is good to
 * an ulp, which c makes ~1e-4 of a logit: v within [0.9, 1) keeps what
 * that moves in the output under f32_vs_f64's 2e-5 of its scale. */
static int fa_1e3(ag_tensor **in, ag_rng *r) {
    int n = fa_setup(in, r, 2, 4, 4, 3, 1);
    for (int i = 0; i < 2; i++) {
        in[i] = tc_uniform(r, 997, 1000, true, SHAPE(2, 4, 3));
        for (int64_t j = 0; j < in[i]->size; j++) in[i]->data[j] = (ag_real)(round((double)in[i]->data[j] * 64) / 64);
    }
    in[2] = tc_uniform(r, 0.9, 1, true, SHAPE(2, 4, 3));
    return n;
}
static int fa_cross(ag_tensor **in, ag_rng *r) { return fa_setup(in, r, 2, 3, 5, 4, 2); }
static int fa_443(ag_tensor **in, ag_rng *r) { return fa_setup(in, r, 2, 4, 4, 3, 2); }
/* q and k constant: only v is checked (for the weights' case). */
static int fa_v_only(ag_tensor **in, ag_rng *r) {
    int n = fa_setup(in, r, 2, 4, 4, 3, 2);
    in[0]->requires_grad = in[1]->requires_grad = false;
    return n;
}

static const int32_t len_53[] = {5, 3}, len_40[] = {4, 0};

/* DiSAN's forward direction with padding: query 0 has no key (output 0). */
static ag_tensor *f_fa_past_len(ag_tensor **in) {
    return ag_feature_attention(in[0], in[1], in[2], ag_mask(&past, 5), len_53, 5.0, NULL);
}
static ag_tensor *f_fa_future(ag_tensor **in) {
    return ag_feature_attention(in[0], in[1], in[2], ag_mask(&future, 5), NULL, 1.0, NULL);
}
static ag_tensor *f_fa_nomask(ag_tensor **in) { return ag_feature_attention(in[0], in[1], in[2], NULL, NULL, 2.0, NULL); }
/* An empty example (length 0) and a length-4 one, no direction mask. */
static ag_tensor *f_fa_empty(ag_tensor **in) { return ag_feature_attention(in[0], in[1], in[2], NULL, len_40, 5.0, NULL); }
/* N = 1: PAST leaves no key (zeros); with no mask the weight is 1. */
static ag_tensor *f_fa_n1_past(ag_tensor **in) {
    return ag_feature_attention(in[0], in[1], in[2], ag_mask(&past, 1), NULL, 5.0, NULL);
}
static ag_tensor *f_fa_n1(ag_tensor **in) { return ag_feature_attention(in[0], in[1], in[2], NULL, NULL, 5.0, NULL); }
/* |q + k| up to 80 at c = 5: tanh saturates; finite distance penalties. */
static ag_tensor *f_fa_large(ag_tensor **in) {
    return ag_feature_attention(in[0], in[1], in[2], ag_mask(&future_word, 4), len_40 + 0, 5.0, NULL);
}
/* Logits ~1e3 under PAST (query 0 fully masked) with lengths 4 and 1. */
static ag_tensor *f_fa_1e3(ag_tensor **in) {
    return ag_feature_attention(in[0], in[1], in[2], ag_mask(&past, 4), (const int32_t[]){4, 1}, 1000.0, NULL);
}
/* Cross attention, 3 queries over 5 keys, a per-example key mask [B,1,Nk]. */
static ag_tensor *f_fa_cross(ag_tensor **in) {
    ag_real m[10];
    for (int t = 0; t < 10; t++) m[t] = t < 5 ? (t == 2 ? -INFINITY : 0) : t < 7 ? 0 : -INFINITY;
    return ag_feature_attention(in[0], in[1], in[2], tc_const_like(in[0], 3, (int[]){2, 1, 5}, m), NULL, 3.0, NULL);
}
/* Against the [B,N,N,d] composition it replaces: scores by broadcasting,
 * c tanh, the masked softmax over the keys, the weighted sum.  The
 * difference is 0 and so are its gradients.  v is added to it: the two
 * sides sum in different orders, so in f32 the difference is roundoff of
 * terms of size 1, and f32_vs_f64 measures it against that scale. */
static ag_tensor *fa_vs_composed(ag_tensor **in, double c) {
    int B = 2, N = 4, d = 3;
    ag_tensor *qi = ag_reshape(in[0], 4, (int[]){B, N, 1, d}), *kj = ag_reshape(in[1], 4, (int[]){B, 1, N, d});
    ag_tensor *s = ag_mul_scalar(ag_tanh(ag_mul_scalar(ag_add(qi, kj), 1 / c)), c);
    ag_tensor *m4 = ag_reshape(ag_mask(&future_word, N), 4, (int[]){1, N, N, 1});
    ag_tensor *p = ag_masked_softmax_axis(s, 2, m4, 1.0);
    ag_tensor *composed = ag_sum_axis(ag_mul(p, ag_reshape(in[2], 4, (int[]){B, 1, N, d})), 2, false);
    ag_tensor *diff = ag_sub(ag_feature_attention(in[0], in[1], in[2], ag_mask(&future_word, N), NULL, c, NULL),
                             composed);
    return tc_difference(diff, in[2]);
}
static ag_tensor *f_fa_vs_composed(ag_tensor **in) { return fa_vs_composed(in, 2.5); }
/* At logits ~1e3 (fa_1e3, c = 1000): the fused op's own shifts must not
 * lose what the composition's softmax keeps. */
static ag_tensor *f_fa_vs_composed_1e3(ag_tensor **in) { return fa_vs_composed(in, 1000); }
/* The weights it hands out for heatmaps are the ones it used: with q and k
 * constant, out - sum_j w v is 0 for every v only if w is right (its
 * gradient in v is the op's weights minus w). */
static ag_tensor *f_fa_weights(ag_tensor **in) {
    ag_tensor *w = NULL;
    ag_tensor *out = ag_feature_attention(in[0], in[1], in[2], ag_mask(&past, 4), NULL, 5.0, &w);
    ag_tensor *mixed = ag_sum_axis(ag_mul(w, ag_reshape(in[2], 4, (int[]){2, 1, 4, 3})), 2, false);
    return ag_add(ag_sub(out, mixed), ag_mul_scalar(in[2], 0.25)); /* a nonzero gradient besides */
}


/* ---- MPSAN's masked unit (ag__additive_self_attention): in[0] = h
 * [B,N,d], in[1] = u, in[2] = v [d], in[3] = bias [1] ---- */

static int add_setup(ag_tensor **in, ag_rng *r, int B, int N, int d, double hmax, double uvmax) {
    in[0] = tc_uniform(r, -hmax, hmax, true, 3, (int[]){B, N, d});
    in[1] = tc_uniform(r, -uvmax, uvmax, true, 1, (int[]){d});
    in[2] = tc_uniform(r, -uvmax, uvmax, true, 1, (int[]){d});
    in[3] = tc_uniform(r, -0.5, 0.5, true, 1, (int[]){1});
    return 4;
}
static int add_253(ag_tensor **in, ag_rng *r) { return add_setup(in, r, 2, 5, 3, 1, 1); }
static int add_354(ag_tensor **in, ag_rng *r) { return add_setup(in, r, 3, 5, 4, 1, 1); }
static int add_n1(ag_tensor **in, ag_rng *r) { return add_setup(in, r, 2, 1, 3, 1, 1); }
/* |z| to ~240: the tanh saturates, and the ELU's logits reach ~48. */
static int add_large(ag_tensor **in, ag_rng *r) { return add_setup(in, r, 2, 4, 3, 20, 2); }
/* h, u, v and bias constant; in[4] [2,4,4] only gives the output a gradient. */
/* ELU scores ~1500: z = h.u + h.v + bias ~ 6000 at c = 4, where the ELU
 * is linear; the size is in the bias, so the keys' logits stay within a
 * few units of each other and their slope in h (u / c ~ 0.75) and the
 * outputs (~1) stay small, as the central differences and f32's
 * comparison with the device want.  There h.v + bias is the same for
 * every key of a query, so the softmax cancels it: v's and the bias's
 * gradients are 0 up to roundoff (which the device need not share), and
 * they are constants here.  Multiples of 1/16 (and z / 4): exact in f32. */
static int add_1e3(ag_tensor **in, ag_rng *r) {
    add_setup(in, r, 3, 5, 3, 1, 1);
    in[1] = tc_uniform(r, 2, 4, true, SHAPE(3));
    in[3]->data[0] = 6000;
    for (int i = 0; i < 4; i++)
        for (int64_t j = 0; j < in[i]->size; j++) in[i]->data[j] = (ag_real)(round((double)in[i]->data[j] * 16) / 16);
    in[2]->requires_grad = in[3]->requires_grad = false;
    return 4;
}
static int add_const(ag_tensor **in, ag_rng *r) {
    add_setup(in, r, 2, 4, 3, 1, 1);
    for (int i = 0; i < 4; i++) in[i]->requires_grad = false;
    in[4] = tc_uniform(r, -1, 1, true, 3, (int[]){2, 4, 4});
    return 5;
}

static const ag_mask_spec past_sd = {.dir = AG_MASK_PAST, .dist = AG_DIST_LOG};
static const ag_mask_spec fa2 = {.dir = AG_MASK_NONE, .faraway = 2};
static const int32_t len_510[] = {5, 1, 0};

/* MPSAN's masks as the model makes them (ag_mask_batch): [B,1,N,N] seen as
 * [B,N,N], -inf at padded keys and on padded query rows. */
static ag_tensor *batch_mask(const ag_mask_spec *spec, int B, int N, const int32_t *lengths) {
    ag_tensor *m = NULL;
    if (ag_mask_batch(spec, 1, B, N, lengths, NULL, &m) != AG_OK) return NULL;
    return ag_reshape(m, 3, (int[]){B, N, N});
}

static ag_tensor *unit(ag_tensor **in, ag_tensor *mask, double c, bool elu) {
    return ag__additive_self_attention(in[0], in[1], in[2], in[3], mask, c, elu, NULL);
}
/* PAST as [N,N] for every example: query 0 has no key (output 0). */
static ag_tensor *f_add_past(ag_tensor **in) { return unit(in, ag_mask(&past, 5), 5.0, false); }
static ag_tensor *f_add_nomask(ag_tensor **in) { return unit(in, NULL, 2.0, false); }
/* The ELU score (AG_FLAG_ELU_SCORE) under FUTURE with finite distance penalties. */
static ag_tensor *f_add_elu(ag_tensor **in) { return unit(in, ag_mask(&future_word, 5), 5.0, true); }
/* past_sd with lengths 5, 1 and 0: padding, a length-1 example (its one
 * query has no past key) and an empty one. */
static ag_tensor *f_add_lengths(ag_tensor **in) { return unit(in, batch_mask(&past_sd, 3, 5, len_510), 5.0, false); }
static ag_tensor *f_add_lengths_elu(ag_tensor **in) {
    return unit(in, batch_mask(&fa2, 3, 5, len_510), 5.0, true);
}
/* N = 1: PAST leaves no key (zeros); with no mask the weight is 1. */
static ag_tensor *f_add_n1_past(ag_tensor **in) { return unit(in, ag_mask(&past, 1), 5.0, false); }
static ag_tensor *f_add_n1(ag_tensor **in) { return unit(in, NULL, 5.0, false); }
static ag_tensor *f_add_large(ag_tensor **in) { return unit(in, ag_mask(&fa2, 4), 5.0, false); }
static ag_tensor *f_add_large_elu(ag_tensor **in) { return unit(in, NULL, 5.0, true); }
/* ELU logits ~1500 under past_sd with lengths 5, 1 and 0 */
static ag_tensor *f_add_1e3_elu(ag_tensor **in) { return unit(in, batch_mask(&past_sd, 3, 5, len_510), 4.0, true); }

/* The composition MPSAN ran before the op (models/mpsan.c until issue 38):
 * two products, the adds, the scaled tanh or the ELU, the masked softmax,
 * the weighted sum.  *prob gets its probabilities. */
static ag_tensor *unit_composed(ag_tensor **in, ag_tensor *mask, double c, bool elu, ag_tensor **prob) {
    ag_tensor *h = in[0];
    int B = h->shape[0], N = h->shape[1], d = h->shape[2];
    ag_tensor *hu = ag_matmul(h, ag_reshape(in[1], 2, (int[]){d, 1}));
    ag_tensor *hv = ag_matmul(h, ag_reshape(in[2], 2, (int[]){d, 1}));
    ag_tensor *z = ag_add(ag_add(ag_reshape(hu, 3, (int[]){B, 1, N}), hv), in[3]);
    ag_tensor *e = elu ? ag_elu(ag_mul_scalar(z, 1 / c)) : ag_mul_scalar(ag_tanh(ag_mul_scalar(z, 1 / c)), c);
    *prob = ag_masked_softmax(e, mask, 1.0);
    return ag_matmul(*prob, h);
}
/* The op against the composition: a difference of 0 with 0 gradients.  h
 * is added to it: the two sides sum in different orders, so in f32 the
 * difference is roundoff of terms of size 1, and f32_vs_f64 measures it
 * against that scale. */
static ag_tensor *vs_composed_c(ag_tensor **in, bool elu, double c) {
    ag_tensor *mask = batch_mask(&past_sd, 3, 5, len_510), *prob;
    ag_tensor *diff = ag_sub(unit(in, mask, c, elu), unit_composed(in, mask, c, elu, &prob));
    return tc_difference(diff, in[0]);
}
static ag_tensor *vs_composed(ag_tensor **in, bool elu) { return vs_composed_c(in, elu, 5.0); }
static ag_tensor *f_add_vs_composed(ag_tensor **in) { return vs_composed(in, false); }
static ag_tensor *f_add_vs_composed_elu(ag_tensor **in) { return vs_composed(in, true); }
/* ELU logits ~1500 (add_1e3, c = 4) */
static ag_tensor *f_add_vs_composed_elu_1e3(ag_tensor **in) { return vs_composed_c(in, true, 4.0); }
/* The probabilities it hands out for heatmaps are the composition's
 * (inputs constant; in[4] gives the output a gradient). */
static ag_tensor *f_add_probs(ag_tensor **in) {
    ag_tensor *mask = ag_mask(&past_sd, 4), *probs = NULL, *composed;
    ag__additive_self_attention(in[0], in[1], in[2], in[3], mask, 5.0, false, &probs);
    unit_composed(in, mask, 5.0, false, &composed);
    return tc_difference(ag_sub(probs, composed), ag_mul_scalar(in[4], 0.25));
}
/* MPSAN's four masks as ag_mask_batch makes them, [B,4,N,N]: each unit
 * reads its plane in place (ag__additive_self_attention_plane). */
static const ag_mask_spec mpsan_specs[4] = {
    {.dir = AG_MASK_NONE, .faraway = 2},
    {.dir = AG_MASK_NONE, .faraway = 3},
    {.dir = AG_MASK_PAST, .dist = AG_DIST_LOG},
    {.dir = AG_MASK_FUTURE, .dist = AG_DIST_LOG},
};
static ag_tensor *mpsan_masks(int B, int N, const int32_t *lengths) {
    ag_tensor *m = NULL;
    return ag_mask_batch(mpsan_specs, 4, B, N, lengths, NULL, &m) == AG_OK ? m : NULL;
}
/* Plane 2 (PAST) under lengths 5, 1 and 0. */
static ag_tensor *f_add_plane(ag_tensor **in) {
    return ag__additive_self_attention_plane(in[0], in[1], in[2], in[3], mpsan_masks(3, 5, len_510), 2, 5.0, false,
                                             NULL);
}
/* Every plane read in place against the same plane sliced out: the same
 * bits, so a difference of exactly 0 (in[0] added as in vs_composed). */
static ag_tensor *f_add_plane_vs_slice(ag_tensor **in) {
    ag_tensor *masks = mpsan_masks(3, 5, len_510), *sum = in[0];
    for (int i = 0; i < 4; i++) {
        ag_tensor *sliced = ag_reshape(ag_slice(masks, 1, i, i + 1), 3, (int[]){3, 5, 5});
        ag_tensor *in_place = ag__additive_self_attention_plane(in[0], in[1], in[2], in[3], masks, i, 5.0, i == 1, NULL);
        sum = ag_add(sum, tc_difference(ag_sub(in_place, unit(in, sliced, 5.0, i == 1)), NULL));
    }
    return sum;
}

/* ---- MPSAN's four units as one op (ag__additive_self_attention_planes):
 * in[0] = h [G,B,N,d], in[1] = u, in[2] = v [G,d], in[3] = bias [G] ---- */

static int units_setup(ag_tensor **in, ag_rng *r, int G, int B, int N, int d) {
    in[0] = tc_uniform(r, -1, 1, true, 4, (int[]){G, B, N, d});
    in[1] = tc_uniform(r, -1, 1, true, 2, (int[]){G, d});
    in[2] = tc_uniform(r, -1, 1, true, 2, (int[]){G, d});
    in[3] = tc_uniform(r, -0.5, 0.5, true, 1, (int[]){G});
    return 4;
}
static int units_4354(ag_tensor **in, ag_rng *r) { return units_setup(in, r, 4, 3, 5, 4); }
static int units_2354(ag_tensor **in, ag_rng *r) { return units_setup(in, r, 2, 3, 5, 4); }

/* The four planes under lengths 5, 1 and 0 (padding, length 1, empty). */
static ag_tensor *f_units_4(ag_tensor **in) {
    return ag__additive_self_attention_planes(in[0], in[1], in[2], in[3], mpsan_masks(3, 5, len_510), 0, 5.0, false,
                                              NULL);
}
/* Two units on planes 1 and 2, ELU scores: the units' offsets into the masks. */
static ag_tensor *f_units_2_from_1_elu(ag_tensor **in) {
    return ag__additive_self_attention_planes(in[0], in[1], in[2], in[3], mpsan_masks(3, 5, len_510), 1, 5.0, true,
                                              NULL);
}
/* Unit g of the op against the one-unit op on the slices of unit g: the
 * same bits, a difference of exactly 0 (in[0] added as in vs_composed). */
static ag_tensor *units_vs_one_by_one(ag_tensor **in, int first, bool elu) {
    ag_tensor *masks = mpsan_masks(3, 5, len_510);
    int G = in[0]->shape[0], B = 3, N = 5, d = in[0]->shape[3];
    ag_tensor *all = ag__additive_self_attention_planes(in[0], in[1], in[2], in[3], masks, first, 5.0, elu, NULL);
    ag_tensor *sum = in[0];
    for (int g = 0; g < G; g++) {
        ag_tensor *h = ag_reshape(ag_slice(in[0], 0, g, g + 1), 3, (int[]){B, N, d});
        ag_tensor *u = ag_reshape(ag_slice(in[1], 0, g, g + 1), 1, (int[]){d});
        ag_tensor *v = ag_reshape(ag_slice(in[2], 0, g, g + 1), 1, (int[]){d});
        ag_tensor *one = ag__additive_self_attention_plane(h, u, v, ag_slice(in[3], 0, g, g + 1), masks, first + g,
                                                           5.0, elu, NULL);
        ag_tensor *of_all = ag_reshape(ag_slice(all, 0, g, g + 1), 3, (int[]){B, N, d});
        ag_tensor *diff = tc_difference(ag_sub(of_all, one), NULL);
        sum = ag_add(sum, ag_reshape(diff, 4, (int[]){1, B, N, d}));
    }
    return sum;
}
static ag_tensor *f_units_vs_one_by_one(ag_tensor **in) { return units_vs_one_by_one(in, 0, false); }
static ag_tensor *f_units_vs_one_by_one_elu(ag_tensor **in) { return units_vs_one_by_one(in, 2, true); }

/* ---- sized for the device's kernels: x0 the scores, or q, k, v ---- */

static const int32_t len_471[3] = {4, 7, 1}, len_507[3] = {5, 0, 7};
#define NEG_INF (-(ag_real)INFINITY)

/* [2,7,7,13] over the keys (axis 2) under PAST as [1,7,7,1]: query 0 fully masked */
static ag_tensor *f_ax_keys(ag_tensor **x) {
    return ag_masked_softmax_axis(x[0], 2, ag_reshape(ag_mask(&past, 7), 4, (int[]){1, 7, 7, 1}), 0.7);
}
/* [3,9,37] over axis 1 under key padding [3,9,1] (lengths 9, 0, 4) */
static ag_tensor *f_ax_pad_keys(ag_tensor **x) {
    ag_real m[27];
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 9; t++) m[b * 9 + t] = t < (int[]){9, 0, 4}[b] ? 0 : NEG_INF;
    return ag_masked_softmax_axis(x[0], 1, tc_const_like(x[0], 3, (int[]){3, 9, 1}, m), 1.3);
}
static ag_tensor *f_ax0(ag_tensor **x) { return ag_masked_softmax_axis(x[0], 0, NULL, 1.0); }
static ag_tensor *f_ax1_scale2(ag_tensor **x) { return ag_masked_softmax_axis(x[0], 1, NULL, 2.0); }

/* The unit with x[0] = h [B,N,d], x[1] = [u; v] [2,d], x[2] = bias [1]
 * (a uniform case has at most three inputs). */
static ag_tensor *unit_uv(ag_tensor **x, ag_tensor *mask, bool elu) {
    int d = x[1]->shape[1];
    ag_tensor *u = ag_reshape(ag_slice(x[1], 0, 0, 1), 1, (int[]){d});
    ag_tensor *v = ag_reshape(ag_slice(x[1], 0, 1, 2), 1, (int[]){d});
    return ag__additive_self_attention(x[0], u, v, x[2], mask, 5.0, elu, NULL);
}
static const int32_t len_37_0_20[3] = {37, 0, 20}, len_9_1[2] = {9, 1};
/* N = 37 keys, more than a warp's lanes; d = 33 features */
static ag_tensor *f_addu_past_sd(ag_tensor **x) { return unit_uv(x, batch_mask(&past_sd, 3, 37, len_37_0_20), false); }
static ag_tensor *f_addu_fa2_elu(ag_tensor **x) { return unit_uv(x, batch_mask(&fa2, 3, 37, len_37_0_20), true); }
static ag_tensor *f_addu_future(ag_tensor **x) { return unit_uv(x, batch_mask(&future_word, 2, 9, len_9_1), false); }
static ag_tensor *f_addu_nomask_elu(ag_tensor **x) { return unit_uv(x, NULL, true); }
/* Plane 3 (FUTURE) of MPSAN's [3,4,37,37] masks, read in place. */
static ag_tensor *f_addu_plane3(ag_tensor **x) {
    int d = x[1]->shape[1];
    ag_tensor *u = ag_reshape(ag_slice(x[1], 0, 0, 1), 1, (int[]){d});
    ag_tensor *v = ag_reshape(ag_slice(x[1], 0, 1, 2), 1, (int[]){d});
    return ag__additive_self_attention_plane(x[0], u, v, x[2], mpsan_masks(3, 37, len_37_0_20), 3, 5.0, false, NULL);
}

/* Four units on [3,37,33] each: x[1] = [u; v] per unit [4,2,33], x[2] the biases [4]. */
static ag_tensor *f_addu_units4(ag_tensor **x) {
    int G = x[1]->shape[0], d = x[1]->shape[2];
    ag_tensor *u = ag_reshape(ag_slice(x[1], 1, 0, 1), 2, (int[]){G, d});
    ag_tensor *v = ag_reshape(ag_slice(x[1], 1, 1, 2), 2, (int[]){G, d});
    return ag__additive_self_attention_planes(x[0], u, v, x[2], mpsan_masks(3, 37, len_37_0_20), 0, 5.0, false, NULL);
}

static ag_tensor *f_fa_past_471(ag_tensor **x) {
    return ag_feature_attention(x[0], x[1], x[2], ag_mask(&past, 7), len_471, 5.0, NULL);
}
static ag_tensor *f_fa_future_word_507(ag_tensor **x) {
    return ag_feature_attention(x[0], x[1], x[2], ag_mask(&future_word, 7), len_507, 2.0, NULL);
}
static ag_tensor *f_fa_plain(ag_tensor **x) { return ag_feature_attention(x[0], x[1], x[2], NULL, NULL, 5.0, NULL); }
/* 5 queries over 9 keys, a per-example key mask [2,1,9] (example 1 keeps 3 keys) */
static ag_tensor *f_fa_cross_9(ag_tensor **x) {
    ag_real m[18];
    for (int t = 0; t < 18; t++) m[t] = t < 9 ? (t % 4 == 1 ? NEG_INF : 0) : t < 12 ? 0 : NEG_INF;
    return ag_feature_attention(x[0], x[1], x[2], tc_const_like(x[0], 3, (int[]){2, 1, 9}, m), NULL, 3.0, NULL);
}

const op_case feature_cases[] = {
    {"softmax_axis/past_mask_axis2", ax_2443, f_ax_past, 0, 0},
    {"softmax_axis/no_mask_axis1", ax_354, f_ax_nomask, 0, 0},
    {"softmax_axis/negative_axis", ax_354, f_ax_neg_axis, 0, 0},
    {"softmax_axis/padding_empty_example", ax_253, f_ax_padding, 0, 0},
    {"softmax_axis/axis0_penalties_masked_column", ax_23, f_ax_axis0, 0, 0},
    {"softmax_axis/length_1", ax_314, f_ax_len1, 0, 0},
    {"softmax_axis/large_logits", ax_large, f_ax_nomask, 0, 0},
    {"softmax_axis/logits_1e3_past_mask_axis2", ax_large_2443, f_ax_past, 0, 0},
    {"softmax_axis/last_axis_is_masked_softmax", ax_2344, f_ax_last, .flags = OPCASE_DIFFERENCE},
    {"softmax_axis/equals_permuted", ax_2443, f_ax_vs_permute, .flags = OPCASE_DIFFERENCE},
    {"feature_attn/past_lengths_5_3", fa_253, f_fa_past_len, 0, 0},
    {"feature_attn/future_c1", fa_253, f_fa_future, 0, 0},
    {"feature_attn/no_mask", fa_253, f_fa_nomask, 0, 0},
    {"feature_attn/lengths_4_0", fa_443, f_fa_empty, 0, 0},
    {"feature_attn/N1_fully_masked", fa_n1, f_fa_n1_past, 0, 0},
    {"feature_attn/N1", fa_n1, f_fa_n1, 0, 0},
    {"feature_attn/saturated_penalties", fa_large, f_fa_large, 0, 0},
    {"feature_attn/cross_key_mask", fa_cross, f_fa_cross, 0, 0},
    {"feature_attn/logits_1e3_c1000_past_lengths_4_1", fa_1e3, f_fa_1e3, 0, 0},
    {"feature_attn/equals_composed_logits_1e3", fa_1e3, f_fa_vs_composed_1e3, .flags = OPCASE_DIFFERENCE},
    {"feature_attn/equals_composed", fa_443, f_fa_vs_composed, .flags = OPCASE_DIFFERENCE},
    {"feature_attn/weights", fa_v_only, f_fa_weights, 0, 0},
    {"additive_unit/past_c5", add_253, f_add_past, 0, 0},
    {"additive_unit/no_mask_c2", add_253, f_add_nomask, 0, 0},
    {"additive_unit/elu_future_penalties", add_253, f_add_elu, 0, 0},
    {"additive_unit/past_sd_lengths_5_1_0", add_354, f_add_lengths, 0, 0},
    {"additive_unit/elu_fa2_lengths_5_1_0", add_354, f_add_lengths_elu, 0, 0},
    {"additive_unit/N1_fully_masked", add_n1, f_add_n1_past, 0, 0},
    {"additive_unit/N1", add_n1, f_add_n1, 0, 0},
    {"additive_unit/saturated_tanh_fa2", add_large, f_add_large, 0, 0},
    {"additive_unit/elu_large_logits", add_large, f_add_large_elu, 0, 0},
    /* logits ~1500 resolve a step of 1e-6 in h to ~3e-7 of itself (ulp(6000)
     * = 9e-13 against z's steps of ~3e-6, as cross_entropy/large_logits
     * says); on h's gradient terms of ~0.1, which cancel to ~5e-4, that is
     * ~2e-8 absolute: atol 1e-7 */
    {"additive_unit/elu_logits_1e3_lengths_5_1_0", add_1e3, f_add_1e3_elu, 1e-7, 0},
    {"additive_unit/equals_composed_elu_logits_1e3", add_1e3, f_add_vs_composed_elu_1e3, .flags = OPCASE_DIFFERENCE},
    {"additive_unit/equals_composed", add_354, f_add_vs_composed, .flags = OPCASE_DIFFERENCE},
    {"additive_unit/equals_composed_elu", add_354, f_add_vs_composed_elu, .flags = OPCASE_DIFFERENCE},
    {"additive_unit/probs", add_const, f_add_probs, .flags = OPCASE_DIFFERENCE},
    {"additive_unit/plane_2_of_4_lengths_5_1_0", add_354, f_add_plane, 0, 0},
    {"additive_unit/plane_equals_slice", add_354, f_add_plane_vs_slice, .flags = OPCASE_DIFFERENCE},
    {"additive_units/4_planes_lengths_5_1_0", units_4354, f_units_4, 0, 0},
    {"additive_units/2_from_plane_1_elu", units_2354, f_units_2_from_1_elu, 0, 0},
    {"additive_units/equal_one_by_one", units_4354, f_units_vs_one_by_one, .flags = OPCASE_DIFFERENCE},
    {"additive_units/equal_one_by_one_elu_from_2", units_2354, f_units_vs_one_by_one_elu, .flags = OPCASE_DIFFERENCE},
    UNIFORM_CASE("softmax_axis [2,7,7,13] keys past", f_ax_keys, -3, 3, DIMS(2, 7, 7, 13)),
    UNIFORM_CASE("softmax_axis [3,9,37] ax1 pad 9,0,4", f_ax_pad_keys, -3, 3, DIMS(3, 9, 37)),
    UNIFORM_CASE("softmax_axis [40,33] ax0 to 1e3", f_ax0, -1000, 1000, DIMS(40, 33)),
    UNIFORM_CASE("softmax_axis [4,1,5] length 1", f_ax1_scale2, -3, 3, DIMS(4, 1, 5)),
    UNIFORM_CASE("feature_attn [3,7,13] past len 4,7,1", f_fa_past_471, -2, 2, DIMS(3, 7, 13), DIMS(3, 7, 13),
                 DIMS(3, 7, 13)),
    UNIFORM_CASE("feature_attn future+dist len 5,0,7", f_fa_future_word_507, -2, 2, DIMS(3, 7, 13), DIMS(3, 7, 13),
                 DIMS(3, 7, 13)),
    UNIFORM_CASE("feature_attn [2,33,40] q,k to 30", f_fa_plain, -30, 30, DIMS(2, 33, 40), DIMS(2, 33, 40),
                 DIMS(2, 33, 40)),
    UNIFORM_CASE("feature_attn [2,1,5] N 1", f_fa_plain, -2, 2, DIMS(2, 1, 5), DIMS(2, 1, 5), DIMS(2, 1, 5)),
    UNIFORM_CASE("feature_attn 5 queries, 9 keys", f_fa_cross_9, -2, 2, DIMS(2, 5, 6), DIMS(2, 9, 6), DIMS(2, 9, 6)),
    UNIFORM_CASE("additive_unit [3,37,33] past_sd len 37,0,20", f_addu_past_sd, -2, 2, DIMS(3, 37, 33), DIMS(2, 33),
                 DIMS(1)),
    UNIFORM_CASE("additive_unit [3,37,33] elu fa2 len 37,0,20", f_addu_fa2_elu, -2, 2, DIMS(3, 37, 33), DIMS(2, 33),
                 DIMS(1)),
    UNIFORM_CASE("additive_unit [2,9,13] future+dist len 9,1", f_addu_future, -2, 2, DIMS(2, 9, 13), DIMS(2, 13),
                 DIMS(1)),
    UNIFORM_CASE("additive_unit [2,33,5] elu logits to ~20", f_addu_nomask_elu, -3, 3, DIMS(2, 33, 5), DIMS(2, 5),
                 DIMS(1)),
    UNIFORM_CASE("additive_unit [3,37,33] plane 3 of 4, len 37,0,20", f_addu_plane3, -2, 2, DIMS(3, 37, 33),
                 DIMS(2, 33), DIMS(1)),
    UNIFORM_CASE("additive_units 4 x [3,37,33] len 37,0,20", f_addu_units4, -2, 2, DIMS(4, 3, 37, 33),
                 DIMS(4, 2, 33), DIMS(4)),
    {NULL, NULL, NULL, 0, 0},
};
