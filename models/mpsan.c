/* mpsan.c - MPSAN (docs/models.md, MPSAN): four masked self-attention units with
 * DiSAN-style scores, a position-wise fusion gate over the four outputs and
 * the input, source2token pooling and an ELU classifier.  For SICK
 * relatedness (AG_TASK_RELATEDNESS) both sentences go through the same
 * encoder and a sigmoid head scores the pair over the bins 1..5. */
#include "attngrad/model.h"
#include "internal.h"
#include "../ops/additive.h" /* ag__additive_self_attention_planes: the four masked units in one op */
#include "../ops/dropout.h"  /* ag__dropout_copies: the units' four dropouts of w in one */
#include "../ops/shape.h"    /* ag__ref_differences: the fusion's columns against the reference */
#include "../ops/softmax.h"  /* ag__softmax_mix_ref_planes: the fusion over the units' stack and w */

#include <math.h>
#include <stdlib.h>

enum { UNITS = 4, SOURCES = UNITS + 1 };

typedef struct {
    ag_tensor *embed;
    /* The four units' parameters, each kind one stack (ag_param_stack):
     * unit i's are member i, named as docs/models.md names them. */
    struct { ag_tensor *w[UNITS], *b[UNITS], *u[UNITS], *v[UNITS], *bias[UNITS]; } unit;
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
    p->embed = ag_param_embedding(ps, "embed.weight", m->cfg.vocab, d, 0.05, 0, r);
    double uv_bound = sqrt(6.0 / (d + 1)); /* Glorot for a [d, 1] map */
    ag_param_stack(ps, "unit%d.dense.weight", UNITS, 2, (int[]){d, d}, p->unit.w);
    ag_param_stack(ps, "unit%d.dense.bias", UNITS, 1, (int[]){d}, p->unit.b);
    ag_param_stack(ps, "unit%d.u", UNITS, 1, (int[]){d}, p->unit.u);
    ag_param_stack(ps, "unit%d.v", UNITS, 1, (int[]){d}, p->unit.v);
    ag_param_stack(ps, "unit%d.b", UNITS, 1, (int[]){1}, p->unit.bias);
    for (int i = 0; i < UNITS; i++) { /* unit by unit, as the draws always came */
        ag_init_glorot_uniform(p->unit.w[i], 1.0, r);
        ag_init_uniform(p->unit.u[i], -uv_bound, uv_bound, r);
        ag_init_uniform(p->unit.v[i], -uv_bound, uv_bound, r);
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

/* The four masked units, each
 *     h = ELU(drop(w) Wh + bh),
 *     e[q,k] = c tanh((h_k.U + h_q.V + b) / c), masked softmax over k,
 *     s_q = sum_k p[q,k] h_k (the values are h itself),
 * as one stack [4,B,N,d]: unit i is plane i.  The four run as one in each
 * op - four dropouts of w (ag__dropout_copies), one grouped dense on the
 * [4,d,d] stack of weights, one attention op over the four mask planes of
 * masks [B,4,N,N] (ops/additive.c) - so a step launches what one unit
 * did, and each unit computes what it computed alone, to the bit. */
static ag_tensor *masked_units(ag_model *m, int sentence, ag_tensor *w, ag_tensor *masks, bool training) {
    mpsan *p = m->impl;
    const double c = 5.0;
    ag_tensor *x = AG_AT(ag__dropout_copies, w, UNITS, m->cfg.keep, training, &m->rng);     /* [4,B,N,d] */
    ag_tensor *h = ag_dense(x, ag_param_stack_view(p->unit.w[0]), ag_param_stack_view(p->unit.b[0]), AG_ACT_ELU);
    ag_tensor *prob = NULL;                                                                  /* [4,B,N,N] */
    ag_tensor *s = AG_AT(ag__additive_self_attention_planes, h, ag_param_stack_view(p->unit.u[0]),
                         ag_param_stack_view(p->unit.v[0]), ag_param_stack_view(p->unit.bias[0]), masks, 0, c,
                         m->cfg.flags & AG_FLAG_ELU_SCORE, m->capture_maps ? &prob : NULL);
    static const char *const names[UNITS] = {"fa2", "fa3", "past_sd", "future_sd"};
    for (int i = 0; prob && i < UNITS; i++) {
        int B = w->shape[0], N = w->shape[1];
        ag_model_capture_axes(m, names[i], ag_reshape(ag_slice(prob, 0, i, i + 1), 3, (int[]){B, N, N}), sentence);
    }
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

    /* S = (s_fa2, s_fa3, s_past_sd, s_future_sd, w): the units' stack [4,B,N,d], then w */
    ag_tensor *units = masked_units(m, sentence, w, masks, training);

    /* Position fusion: z_t = w_t Wp + bp [B,N,5d], a softmax over the five
     * sources per feature, o_t = sum_g a_g S_g.  The softmax sees only the
     * differences z_g - z_w (w the reference source), so those are what
     * the linear layer computes: four products of [d,d] columns, not five. */
    ag_tensor *z = ag_linear(ag_model_dropout(m, w, training), fd.w, fd.b); /* [B,N,4d] */
    ag_tensor *o = AG_AT(ag__softmax_mix_ref_planes, z, units, w, lengths); /* [B,N,d], 0 at padding */

    return ag_source2token(ag_model_dropout(m, o, training), lengths, p->pool_w1, p->pool_b1,
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
        hidden = ag_dense(ag_model_dropout(m, features, training), p->cls_w, p->cls_b, AG_ACT_SIGMOID);
    } else {
        hidden = ag_dense(ag_model_dropout(m, u, training), p->cls_w, p->cls_b, AG_ACT_ELU);
    }
    return ag_linear(ag_model_dropout(m, hidden, training), p->out_w, p->out_b);
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
