/* mpsan.c - MPSAN (MODELS.md §1): four masked self-attention units with
 * DiSAN-style scores, a position-wise fusion gate over the four outputs and
 * the input, source2token pooling and an ELU classifier.  For SICK
 * relatedness (AG_TASK_RELATEDNESS) both sentences go through the same
 * encoder and a sigmoid head scores the pair over the bins 1..5. */
#include "attngrad/model.h"
#include "internal.h"
#include "../ops/additive.h" /* ag__additive_self_attention: the masked unit in one op */
#include "../ops/shape.h"    /* ag__ref_differences: the fusion's columns against the reference */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { UNITS = 4, SOURCES = UNITS + 1 };

typedef struct {
    ag_tensor *embed;
    struct { ag_tensor *w, *b, *u, *v, *bias; } unit[UNITS];
    ag_tensor *fusion_w, *fusion_b;
    ag_tensor *pool_w1, *pool_b1, *pool_w2, *pool_b2;
    ag_tensor *cls_w, *cls_b, *out_w, *out_b; /* the classifier, or the relatedness head */
} mpsan;

static void mpsan_defaults(ag_model_config *c) {
    c->dim = 300;
    c->keep = 0.7;
    c->l2 = 1e-7;
    c->batch = 64;
    c->optim = "adadelta:lr=0.5,rho=0.95,eps=1e-6";
    if (c->task == AG_TASK_RELATEDNESS) { /* the paper's SICK setting */
        c->keep = 0.55;
        c->l2 = 5e-4;
        c->optim = "adadelta:lr=0.7,rho=0.95,eps=1e-6";
    }
}

/* fa2, fa3, past_sd, future_sd (the paper's bw is our PAST, fw our FUTURE) */
static void unit_masks(unsigned flags, ag_mask_spec spec[UNITS]) {
    ag_mask_dist dist = (flags & AG_FLAG_LINEAR_DIST) ? AG_DIST_WORD : AG_DIST_LOG;
    spec[0] = (ag_mask_spec){.dir = AG_MASK_NONE, .faraway = 2};
    spec[1] = (ag_mask_spec){.dir = AG_MASK_NONE, .faraway = 3};
    spec[2] = (ag_mask_spec){.dir = AG_MASK_PAST, .dist = dist};
    spec[3] = (ag_mask_spec){.dir = AG_MASK_FUTURE, .dist = dist};
}

static void mpsan_tiny(ag_model_config *c) { c->dim = 4; }

static ag_status mpsan_build(ag_model *m) {
    mpsan *p = calloc(1, sizeof *p);
    int d = m->cfg.dim, K = m->cfg.classes;
    ag_params *ps = &m->params;
    ag_rng *r = &m->rng;
    char name[64];
    p->embed = ag_param_embedding(ps, "embed.weight", m->cfg.vocab, d, 0.05, 0, r);
    double uv_bound = sqrt(6.0 / (d + 1)); /* Glorot for a [d, 1] map */
    for (int i = 0; i < UNITS; i++) {
        snprintf(name, sizeof name, "unit%d.dense.weight", i);
        p->unit[i].w = ag_param_glorot(ps, name, d, d, r);
        snprintf(name, sizeof name, "unit%d.dense.bias", i);
        p->unit[i].b = ag_param_bias(ps, name, d);
        snprintf(name, sizeof name, "unit%d.u", i);
        p->unit[i].u = ag_param_uniform(ps, name, 1, (int[]){d}, uv_bound, r);
        snprintf(name, sizeof name, "unit%d.v", i);
        p->unit[i].v = ag_param_uniform(ps, name, 1, (int[]){d}, uv_bound, r);
        snprintf(name, sizeof name, "unit%d.b", i);
        p->unit[i].bias = ag_param(ps, name, 1, (int[]){1});
    }
    p->fusion_w = ag_param_glorot(ps, "fusion.weight", d, SOURCES * d, r);
    p->fusion_b = ag_param_bias(ps, "fusion.bias", SOURCES * d);
    p->pool_w1 = ag_param_glorot(ps, "pool.w1", d, d, r);
    p->pool_b1 = ag_param_bias(ps, "pool.b1", d);
    p->pool_w2 = ag_param_glorot(ps, "pool.w2", d, d, r);
    p->pool_b2 = ag_param_bias(ps, "pool.b2", d);
    if (m->cfg.task == AG_TASK_RELATEDNESS) { /* on [u_a * u_b ; |u_a - u_b|] */
        p->cls_w = ag_param_glorot(ps, "rel.hidden.weight", 2 * d, d, r);
        p->cls_b = ag_param_bias(ps, "rel.hidden.bias", d);
        p->out_w = ag_param_glorot(ps, "rel.out.weight", d, AG_RELATEDNESS_BINS, r);
        p->out_b = ag_param_bias(ps, "rel.out.bias", AG_RELATEDNESS_BINS);
    } else {
        p->cls_w = ag_param_glorot(ps, "cls.hidden.weight", d, d, r);
        p->cls_b = ag_param_bias(ps, "cls.hidden.bias", d);
        p->out_w = ag_param_glorot(ps, "cls.out.weight", d, K, r);
        p->out_b = ag_param_bias(ps, "cls.out.bias", K);
    }
    m->impl = p;
    return AG_OK;
}

/* e[q,k] = c tanh((h_k.U + h_q.V + b) / c), then masked softmax over k and
 * s_q = sum_k p[q,k] h_k: the values are h itself.  One op
 * (ops/additive.c): the composition of products, adds, the scaled tanh,
 * the masked softmax and the weighted sum was 30 launches a unit on the
 * GPU, forward and backward; the op takes 4.  It reads plane i of the
 * four units' masks [B,4,N,N] where it lies (no slice: a launch a unit). */
static ag_tensor *masked_unit(ag_model *m, int sentence, int i, ag_tensor *w, ag_tensor *masks, bool training) {
    mpsan *p = m->impl;
    const double c = 5.0;
    ag_tensor *x = ag_dropout(w, m->cfg.keep, training, &m->rng);
    ag_tensor *h = ag_dense(x, p->unit[i].w, p->unit[i].b, AG_ACT_ELU);          /* [B,N,d] */
    ag_tensor *prob = NULL;                                                      /* [B,N,N] */
    ag_tensor *s = AG_AT(ag__additive_self_attention_plane, h, p->unit[i].u, p->unit[i].v, p->unit[i].bias, masks, i,
                         c, m->cfg.flags & AG_FLAG_ELU_SCORE, m->capture_maps ? &prob : NULL);
    static const char *const names[UNITS] = {"fa2", "fa3", "past_sd", "future_sd"};
    if (prob) ag_model_capture_axes(m, names[i], prob, sentence);
    return s;
}

/* The fusion's weights or bias [..., 5d] as differences from the last
 * (reference) block of d: [..., 4d] with block g = block g - block 4.
 * Their gradient flows back to all five blocks (the last gets minus the
 * sum of the others'), so fusion.weight trains as in the paper.  One op
 * (ops/shape.h): two launches each on the GPU, where the slices, the
 * subtraction and the reshapes of the two took 18 a step. */
static ag_tensor *ref_columns(ag_tensor *t) { return AG_AT(ag__ref_differences, t, UNITS); }

/* The position fusion's linear layer as differences from the reference
 * block (ref_columns): built once per forward, shared by both sentences of
 * a pair. */
typedef struct {
    ag_tensor *w, *b;
} fusion_diff;

/* The sentence vector u [B, d] of tokens [B, N]; sentence tags its attention maps. */
static ag_tensor *encode(ag_model *m, int sentence, const int32_t *tokens, const int32_t *lengths, int B, int N,
                         fusion_diff fd, bool training) {
    mpsan *p = m->impl;
    ag_tensor *w = ag_embedding(p->embed, tokens, 2, (int[]){B, N});             /* [B,N,d] */

    ag_mask_spec spec[UNITS];
    unit_masks(m->cfg.flags, spec);
    ag_tensor *masks;
    if (ag_mask_batch(spec, UNITS, B, N, lengths, NULL, &masks) != AG_OK)
        return NULL; /* cannot happen without tree distances */

    ag_tensor *sources[SOURCES]; /* S = (s_fa2, s_fa3, s_past_sd, s_future_sd, w), each [B,N,d] */
    for (int i = 0; i < UNITS; i++) sources[i] = masked_unit(m, sentence, i, w, masks, training);
    sources[UNITS] = w;

    /* Position fusion: z_t = w_t Wp + bp [B,N,5d], a softmax over the five
     * sources per feature, o_t = sum_g a_g S_g.  The softmax sees only the
     * differences z_g - z_w (w the reference source), so those are what
     * the linear layer computes: four products of [d,d] columns, not five. */
    ag_tensor *z = ag_linear(ag_dropout(w, m->cfg.keep, training, &m->rng), fd.w, fd.b); /* [B,N,4d] */
    ag_tensor *o = ag_softmax_mix_ref(z, sources, SOURCES, lengths); /* [B,N,d], 0 at padding */

    return ag_source2token(ag_dropout(o, m->cfg.keep, training, &m->rng), lengths, p->pool_w1, p->pool_b1,
                           p->pool_w2, p->pool_b2, AG_ACT_ELU);
}

static ag_tensor *mpsan_forward(ag_model *m, const ag_batch *b, bool training) {
    mpsan *p = m->impl;
    fusion_diff fd = {ref_columns(p->fusion_w), ref_columns(p->fusion_b)};
    ag_tensor *u = encode(m, AG_MAP_SENTENCE, b->tokens, b->lengths, b->rows, b->width, fd, training);
    if (!u) return NULL;
    ag_tensor *hidden;
    if (m->cfg.task == AG_TASK_RELATEDNESS) { /* Tai et al.'s similarity features, then a sigmoid layer */
        ag_tensor *ub = encode(m, AG_MAP_SENTENCE_B, b->tokens_b, b->lengths_b, b->rows, b->width_b, fd, training);
        if (!ub) return NULL;
        ag_tensor *parts[2] = {ag_mul(u, ub), ag_abs(ag_sub(u, ub))};
        ag_tensor *features = ag_concat(parts, 2, 1);                             /* [B,2d] */
        hidden = ag_dense(ag_dropout(features, m->cfg.keep, training, &m->rng), p->cls_w, p->cls_b, AG_ACT_SIGMOID);
    } else {
        hidden = ag_dense(ag_dropout(u, m->cfg.keep, training, &m->rng), p->cls_w, p->cls_b, AG_ACT_ELU);
    }
    return ag_linear(ag_dropout(hidden, m->cfg.keep, training, &m->rng), p->out_w, p->out_b);
}

static void mpsan_batch_opts(const ag_model_config *c, ag_batch_opts *o) { (void)c; (void)o; }

static void mpsan_destroy(ag_model *m) { free(m->impl); }

const ag_model_kind ag__mpsan_kind = {
    .abi = AG_MODEL_ABI,
    .name = "mpsan",
    .defaults = mpsan_defaults,
    .tiny = mpsan_tiny,
    .build = mpsan_build,
    .forward = mpsan_forward,
    .batch_opts = mpsan_batch_opts,
    .destroy = mpsan_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY) | AG_TASK_BIT(AG_TASK_RELATEDNESS),
    .reads = "max-len",
    .flags = AG_FLAG_ELU_SCORE | AG_FLAG_LINEAR_DIST,
};
