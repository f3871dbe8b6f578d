/* dual_axial.c - dual-axial self-attention (docs/models.md, dual-axial): one light
 * multi-dimensional self-attention module applied along the text axis (with
 * the distance attenuation zeta and 1/len) and, on the transposed input,
 * along the feature axis; a fusion gate sums both over the text and a
 * sigmoid classifier reads the result.  Every batch is exactly L wide.
 *
 * Memory: the largest tensors are the scores, [B,L,L] and [B,d,d]; the
 * attention output is one GEMM of the weights with V, never [B,L,L,d]. */
#include "attngrad/model.h"
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    ag_tensor *wq, *wk, *wv;
} axial_params;

typedef struct {
    ag_tensor *embed, *bigram;          /* bigram NULL under AG_FLAG_NO_BIGRAM or 0 buckets */
    axial_params text, feat;            /* feat unused under AG_FLAG_TEXT_ONLY */
    ag_tensor *gate_wf, *gate_wt, *gate_b;
    ag_tensor *cls_w, *cls_b, *out_w, *out_b;
} dual_axial;

/* 100k hashed bigram buckets: big enough that the frequent bigrams of the
 * paper's corpora rarely share a row, small enough (12.8M weights at d 128)
 * for Adam's dense update every step.  The paper gives no count. */
enum { DEFAULT_BIGRAM_BUCKETS = 100000 };

static void dual_axial_defaults(ag_model_config *c) {
    c->dim = 128;
    c->fixed_len = 64;
    c->n_bigram = DEFAULT_BIGRAM_BUCKETS;
    c->keep = 1.0; /* the paper uses no dropout */
    c->l2 = 0;
    c->batch = 64;
    c->optim = "adam:lr=1e-3,beta1=0.9,beta2=0.999,eps=1e-8";
}

static void dual_axial_tiny(ag_model_config *c) {
    c->dim = 4;
    c->fixed_len = 5;
    c->n_bigram = 10;
}

/* 0 buckets means no bigram embedding, as the no_bigram flag: the model and
 * its batches (dual_axial_batch_opts) must agree on whether ids exist. */
static bool has_bigrams(const ag_model_config *c) { return !(c->flags & AG_FLAG_NO_BIGRAM) && c->n_bigram != 0; }
static bool has_feature_axis(const ag_model_config *c) { return !(c->flags & AG_FLAG_TEXT_ONLY); }

static axial_params axial_build(ag_params *ps, const char *prefix, int n, ag_rng *r) {
    char name[32];
    axial_params a;
    snprintf(name, sizeof name, "%s.wq", prefix);
    a.wq = ag_param_glorot(ps, name, n, n, r);
    snprintf(name, sizeof name, "%s.wk", prefix);
    a.wk = ag_param_glorot(ps, name, n, n, r);
    snprintf(name, sizeof name, "%s.wv", prefix);
    a.wv = ag_param_glorot(ps, name, n, n, r);
    return a;
}

static ag_status dual_axial_build(ag_model *m) {
    const ag_model_config *c = &m->cfg;
    /* Ids are 1 + hash mod (n - 1): one bucket would be row 0 ("no bigram") alone. */
    if (has_bigrams(c) && c->n_bigram < 2)
        return ag_fail(AG_ERR_ARG, "dual_axial: --bigrams %d: want 0 (no bigram embedding) or at least 2 buckets "
                       "(bucket 0 means \"no bigram\")", c->n_bigram);
    dual_axial *p = calloc(1, sizeof *p);
    int d = c->dim, L = c->fixed_len;
    ag_params *ps = &m->params;
    ag_rng *r = &m->rng;
    p->embed = ag_param_embedding(ps, "embed.weight", c->vocab, d, 0.05, 0, r);
    /* Row 0 ("no bigram") starts at zero and stays there: forward masks it. */
    if (has_bigrams(c)) p->bigram = ag_param_embedding(ps, "bigram.weight", c->n_bigram, d, 0.05, 0, r);
    p->text = axial_build(ps, "text", d, r);
    if (has_feature_axis(c)) {
        p->feat = axial_build(ps, "feat", L, r);
        p->gate_wf = ag_param_glorot(ps, "gate.wf", d, d, r);
        p->gate_wt = ag_param_glorot(ps, "gate.wt", d, d, r);
        p->gate_b = ag_param_bias(ps, "gate.b", d);
    }
    p->cls_w = ag_param_glorot(ps, "cls.hidden.weight", d, d, r);
    p->cls_b = ag_param_bias(ps, "cls.hidden.bias", d);
    p->out_w = ag_param_glorot(ps, "cls.out.weight", d, c->classes, r);
    p->out_b = ag_param_bias(ps, "cls.out.bias", c->classes);
    m->impl = p;
    return AG_OK;
}

/* x_t = E_uni[w_t] + E_bi[bigram_t], zero at padded t.  The looked-up bigram
 * rows are multiplied by a constant 0/1 mask that is 0 where the id is 0 (no
 * bigram) or t is padding, so row 0 adds nothing and gets exactly no
 * gradient, and tokens beyond len cannot leak in.  [B,L,d] */
static ag_tensor *embed_input(const dual_axial *p, const ag_batch *b, int L) {
    int B = b->rows;
    ag_tensor *x = ag_zero_padding(ag_embedding(p->embed, b->tokens, 2, (int[]){B, L}), b->lengths);
    if (!p->bigram) return x;
    ag_tensor *present = ag_tensor_new_host(3, (int[]){B, L, 1});
    for (int i = 0; i < B; i++)
        for (int t = 0; t < L && t < b->lengths[i]; t++) present->data[i * L + t] = b->bigrams[i * L + t] != 0;
    return ag_add(x, ag_mul(ag_embedding(p->bigram, b->bigrams, 2, (int[]){B, L}), ag_to(present, x->device)));
}

/* The constant that multiplies softplus(s[q,k]) on the text axis:
 * zeta[q,k] * valid(k) as [B,L,L], or valid(k) alone as [B,1,L]. */
static ag_tensor *text_key_weights(const int32_t *lengths, int B, int L, bool zeta) {
    ag_tensor *valid = ag_reshape(ag_valid_mask(lengths, B, L), 3, (int[]){B, 1, L});
    if (!zeta) return valid;
    /* 1 / ln(e|q-k| + e), cached on the current device, times valid(k): an
     * op, not a loop over the mask's values (on a GPU they are not the host's) */
    return ag_mul(ag_reshape(ag_mask_attenuation(M_E, M_E, L), 3, (int[]){1, L, L}), valid);
}

/* The light multi-dimensional self-attention on rows x[B,n,m] (n items of m
 * features): s = Q K^T, alpha = softplus(s) (AG_FLAG_SOFTMAX: softmax over
 * the keys key_mask allows) times key_weights (may be NULL), w = alpha V,
 * out = softplus(w) ⊙ x. */
static ag_tensor *axial_attention(ag_model *m, const char *axis, int map_axes, ag_tensor *x, const axial_params *a,
                                  ag_tensor *key_mask, ag_tensor *key_weights) {
    ag_tensor *q = ag_linear(x, a->wq, NULL), *k = ag_linear(x, a->wk, NULL), *v = ag_linear(x, a->wv, NULL);
    ag_tensor *s = ag_matmul_t(q, false, k, true);                                /* [B,n,n] */
    ag_tensor *alpha = (m->cfg.flags & AG_FLAG_SOFTMAX) ? ag_masked_softmax(s, key_mask, 1.0) : ag_softplus(s);
    if (key_weights) alpha = ag_mul(alpha, key_weights);
    ag_model_capture_axes(m, axis, alpha, map_axes);
    return ag_mul(ag_softplus(ag_matmul(alpha, v)), x);
}

static ag_tensor *dual_axial_forward(ag_model *m, const ag_batch *b, bool training) {
    dual_axial *p = m->impl;
    const ag_model_config *c = &m->cfg;
    /* Read the batch at its own width: one other than fixed_len then fails
     * loudly in the feature axis' [L,L] projections instead of being misread. */
    int B = b->rows, L = b->width;
    ag_tensor *x = embed_input(p, b, L);                                          /* [B,L,d] */

    /* Text axis: Ht = softplus(w) ⊙ x / len, zero at padded q because x is. */
    ag_tensor *inv_len = ag_tensor_new_host(3, (int[]){B, 1, 1});
    for (int i = 0; i < B; i++) inv_len->data[i] = (ag_real)1 / (ag_real)(b->lengths[i] > 0 ? b->lengths[i] : 1);
    inv_len = ag_to(inv_len, x->device);
    ag_tensor *pad = (c->flags & AG_FLAG_SOFTMAX) ? ag_mask_padding(b->lengths, B, L, 3, false) : NULL;
    ag_tensor *zeta_valid = text_key_weights(b->lengths, B, L, !(c->flags & AG_FLAG_NO_ZETA));
    ag_tensor *ht = ag_mul(axial_attention(m, "text", AG_MAP_SENTENCE, x, &p->text, pad, zeta_valid), inv_len);

    /* Sum over q: every term is 0 at padded q (Ht and Hf both are), so the
     * sum over all L rows is the sum over the valid ones. */
    ag_tensor *summed;
    if (has_feature_axis(c)) {
        /* Feature axis: the same module on Y = x^T [B,d,L]; padded columns
         * of Y are 0, so Hf is 0 at padded q.  Every feature is a valid key. */
        ag_tensor *y = ag_transpose(x, 1, 2);
        ag_tensor *hf = ag_transpose(axial_attention(m, "feature", AG_MAP_FEATURES, y, &p->feat, NULL, NULL), 1, 2);
        ag_tensor *f = ag_sigmoid(ag_add(ag_linear(hf, p->gate_wf, NULL), ag_linear(ht, p->gate_wt, p->gate_b)));
        ag_tensor *fused = ag_lerp(hf, ht, f);                                     /* f Ht + (1-f) Hf */
        summed = ag_sum_axis(fused, 1, false);
    } else {
        summed = ag_sum_axis(ht, 1, false);
    }
    ag_tensor *u = ag_tanh(summed);                                               /* [B,d] */

    ag_tensor *hidden = ag_dense(ag_dropout(u, c->keep, training, &m->rng), p->cls_w, p->cls_b, AG_ACT_SIGMOID);
    return ag_linear(ag_dropout(hidden, c->keep, training, &m->rng), p->out_w, p->out_b);
}

static void dual_axial_batch_opts(const ag_model_config *c, ag_batch_opts *o) {
    o->fixed_len = c->fixed_len;
    o->n_bigram = has_bigrams(c) ? c->n_bigram : 0;
}

static void dual_axial_destroy(ag_model *m) { free(m->impl); }

const ag_model_kind ag__dual_axial_kind = {
    .abi = AG_MODEL_ABI,
    .name = "dual_axial",
    .defaults = dual_axial_defaults,
    .tiny = dual_axial_tiny,
    .build = dual_axial_build,
    .forward = dual_axial_forward,
    .batch_opts = dual_axial_batch_opts,
    .destroy = dual_axial_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY),
    .reads = "fixed-len,bigrams",
    .flags = AG_FLAG_NO_BIGRAM | AG_FLAG_SOFTMAX | AG_FLAG_NO_ZETA | AG_FLAG_TEXT_ONLY,
};
