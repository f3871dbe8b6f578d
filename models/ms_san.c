/* ms_san.c - MS-SAN (docs/models.md, MS-SAN): multi-head self-attention whose heads
 * each see another structural prior (direction + 1.5 x word or dependency
 * distance), a fusion gate instead of the residual, a position-wise FFN with
 * LayerNorm, attentive + max pooling and a ReLU classifier.  Sentence pairs
 * (AG_TASK_PAIR) run both sentences through the same encoder. */
#include "attngrad/model.h"
#include "internal.h"

#include <math.h>
#include <stdlib.h>

enum { HEADS = 6 };

typedef struct {
    ag_tensor *embed;
    ag_tensor *wq, *wk, *wv, *wo;
    ag_tensor *gate_wi, *gate_wo, *gate_w1, *gate_w2, *gate_b;
    ag_tensor *ffn_w1, *ffn_b1, *ffn_w2, *ffn_b2, *ln_gamma, *ln_beta;
    ag_tensor *pool_w1, *pool_b1, *pool_w2, *pool_b2;
    ag_tensor *cls_w, *cls_b, *out_w, *out_b;
} ms_san;

static void ms_san_defaults(ag_model_config *c) {
    c->dim = 300;
    c->hidden = 300; /* FFN inner size and classifier hidden size */
    c->heads = HEADS;
    c->keep = 0.9;
    c->l2 = 0;
    c->batch = 32;
    c->optim = "adam:lr=1e-3";
}

static void ms_san_tiny(ag_model_config *c) {
    c->dim = 12; /* 6 heads of 2 */
    c->hidden = 12;
}

/* Heads 0-2 look at the past (key k <= query q), 3-5 at the future; within
 * each half the distance prior is word, dependency-tree, none. */
static void head_masks(unsigned flags, ag_mask_spec spec[HEADS]) {
    static const ag_mask_dist prior[HEADS / 2] = {AG_DIST_WORD, AG_DIST_TREE, AG_DIST_NONE};
    for (int h = 0; h < HEADS; h++)
        spec[h] = (ag_mask_spec){
            .dir = h < HEADS / 2 ? AG_MASK_PAST_INCL : AG_MASK_FUTURE_INCL,
            .dist = (flags & AG_FLAG_NO_DIST) ? AG_DIST_NONE : prior[h % (HEADS / 2)],
            .weight = 1.5,
        };
}

static ag_status ms_san_build(ag_model *m) {
    const ag_model_config *c = &m->cfg;
    int d = c->dim, H = c->hidden;
    if (c->heads != HEADS) /* one head per structural prior (head_masks): the count is the model's */
        return ag_fail(AG_ERR_ARG, "ms_san: heads = %d, but MS-SAN has %d heads (one per direction and distance prior)",
                       c->heads, HEADS);
    if (d % HEADS) /* else the first forward fails in ag_split_heads */
        return ag_fail(AG_ERR_ARG, "ms_san: dim = %d must be a multiple of its %d heads", d, HEADS);
    ms_san *p = calloc(1, sizeof *p);
    int features = (c->task == AG_TASK_PAIR ? 8 : 2) * d; /* [r_p; r_h; r_p*r_h; |r_p-r_h|] or r */
    ag_params *ps = &m->params;
    ag_rng *r = &m->rng;
    p->embed = ag_param_embedding(ps, "embed.weight", c->vocab, d, 0.05, 0, r);
    p->wq = ag_param_glorot(ps, "attn.wq", d, d, r);
    p->wk = ag_param_glorot(ps, "attn.wk", d, d, r);
    p->wv = ag_param_glorot(ps, "attn.wv", d, d, r);
    p->wo = ag_param_glorot(ps, "attn.wo", d, d, r);
    p->gate_wi = ag_param_glorot(ps, "gate.wi", d, d, r);
    p->gate_wo = ag_param_glorot(ps, "gate.wo", d, d, r);
    p->gate_w1 = ag_param_glorot(ps, "gate.w1", d, d, r);
    p->gate_w2 = ag_param_glorot(ps, "gate.w2", d, d, r);
    p->gate_b = ag_param_bias(ps, "gate.b", d);
    p->ffn_w1 = ag_param_glorot(ps, "ffn.w1", d, H, r);
    p->ffn_b1 = ag_param_bias(ps, "ffn.b1", H);
    p->ffn_w2 = ag_param_glorot(ps, "ffn.w2", H, d, r);
    p->ffn_b2 = ag_param_bias(ps, "ffn.b2", d);
    p->ln_gamma = ag_param(ps, "ln.gamma", 1, (int[]){d});
    ag_init_constant(p->ln_gamma, 1.0);
    p->ln_beta = ag_param_bias(ps, "ln.beta", d);
    p->pool_w1 = ag_param_glorot(ps, "pool.w1", d, d, r);
    p->pool_b1 = ag_param_bias(ps, "pool.b1", d);
    p->pool_w2 = ag_param_glorot(ps, "pool.w2", d, d, r);
    p->pool_b2 = ag_param_bias(ps, "pool.b2", d);
    p->cls_w = ag_param_glorot(ps, "cls.hidden.weight", features, H, r);
    p->cls_b = ag_param_bias(ps, "cls.hidden.bias", H);
    p->out_w = ag_param_glorot(ps, "cls.out.weight", H, c->classes, r);
    p->out_b = ag_param_bias(ps, "cls.out.bias", c->classes);
    m->impl = p;
    return AG_OK;
}

/* One sentence batch tokens[B,N] -> r = [r_att ; r_max] [B,2d], or NULL
 * when heads hold a bad parse (ag_errmsg() names the sentence and position).
 * `sentence` (AG_MAP_SENTENCE or _B) tags its attention map for heatmaps. */
static ag_tensor *encode(ag_model *m, int sentence, const int32_t *tokens, const int32_t *lengths,
                         const int32_t *heads, int B, int N, bool training) {
    ms_san *p = m->impl;
    double keep = m->cfg.keep;
    ag_mask_spec spec[HEADS];
    head_masks(m->cfg.flags, spec);
    ag_tensor *masks; /* [B,h,N,N]; -inf at padded keys and on padded query rows */
    if (ag_mask_batch(spec, HEADS, B, N, lengths, heads, &masks) != AG_OK) return NULL;

    ag_tensor *e = ag_dropout(ag_embedding(p->embed, tokens, 2, (int[]){B, N}), keep, training, &m->rng);
    ag_tensor *q = ag_split_heads(ag_linear(e, p->wq, NULL), HEADS);              /* [B,h,N,dk] */
    ag_tensor *k = ag_split_heads(ag_linear(e, p->wk, NULL), HEADS);
    ag_tensor *v = ag_split_heads(ag_linear(e, p->wv, NULL), HEADS);
    double scale = 1 / sqrt((double)q->shape[3]);
    ag_tensor *probs = NULL;
    ag_tensor *o = ag_linear(ag_merge_heads(ag_attention(q, k, v, masks, scale, m->capture_maps ? &probs : NULL)),
                             p->wo, NULL);
    if (probs) ag_model_capture_axes(m, "heads", probs, sentence);

    /* Fusion gate: G = f ⊙ Î + (1 - f) ⊙ Ô, written Ô + f ⊙ (Î - Ô). */
    ag_tensor *ei = ag_linear(e, p->gate_wi, NULL), *oo = ag_linear(o, p->gate_wo, NULL);
    ag_tensor *f = ag_sigmoid(ag_add(ag_linear(ei, p->gate_w1, NULL), ag_linear(oo, p->gate_w2, p->gate_b)));
    ag_tensor *g = ag_lerp(oo, ei, f);

    ag_tensor *ffn = ag_linear(ag_dense(g, p->ffn_w1, p->ffn_b1, AG_ACT_RELU), p->ffn_w2, p->ffn_b2);
    ag_tensor *u = ag_layernorm(ag_add(g, ag_dropout(ffn, keep, training, &m->rng)), p->ln_gamma, p->ln_beta, 1e-6);

    /* Both poolings skip padded rows, whatever U holds there. */
    ag_tensor *pooled[2] = {
        ag_source2token(u, lengths, p->pool_w1, p->pool_b1, p->pool_w2, p->pool_b2, AG_ACT_RELU),
        ag_max_over_time(u, lengths),
    };
    return ag_concat(pooled, 2, 1);
}

static ag_tensor *ms_san_forward(ag_model *m, const ag_batch *b, bool training) {
    ms_san *p = m->impl;
    int B = b->rows;
    ag_tensor *features = encode(m, AG_MAP_SENTENCE, b->tokens, b->lengths, b->heads, B, b->width, training);
    if (!features) return NULL;
    if (m->cfg.task == AG_TASK_PAIR) {
        ag_tensor *rp = features, *rh = encode(m, AG_MAP_SENTENCE_B, b->tokens_b, b->lengths_b, b->heads_b, B,
                                                b->width_b, training);
        if (!rh) return NULL;
        ag_tensor *parts[4] = {rp, rh, ag_mul(rp, rh), ag_abs(ag_sub(rp, rh))};
        features = ag_concat(parts, 4, 1);                                        /* [B,8d] */
    }
    ag_tensor *hidden = ag_dense(ag_model_dropout(m, features, training), p->cls_w, p->cls_b,
                                 AG_ACT_RELU);
    return ag_linear(ag_model_dropout(m, hidden, training), p->out_w, p->out_b);
}

static void ms_san_batch_opts(const ag_model_config *c, ag_batch_opts *o) {
    o->heads = !(c->flags & AG_FLAG_NO_DIST); /* the tree-distance heads read the parse */
}

static void ms_san_destroy(ag_model *m) { free(m->impl); }

const ag_model_kind ag__ms_san_kind = {
    .abi = AG_MODEL_ABI,
    .name = "ms_san",
    .defaults = ms_san_defaults,
    .tiny = ms_san_tiny,
    .build = ms_san_build,
    .forward = ms_san_forward,
    .batch_opts = ms_san_batch_opts,
    .destroy = ms_san_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY) | AG_TASK_BIT(AG_TASK_PAIR),
    .reads = "hidden,heads,max-len",
    .flags = AG_FLAG_NO_DIST,
};
