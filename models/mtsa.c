/* mtsa.c - MTSA (MODELS.md §5): multi-mask tensorized self-attention.  Each
 * head mixes a token2token score R[q,k] with a multi-dim source2token score
 * S[k,l] under its own direction mask (head 0 PAST, head 1 FUTURE, the
 * diagonal excluded), fuses the result with its values through a gate, and
 * the concatenated heads go through source2token pooling and a ReLU
 * classifier.  The [N,N,dh] tensor of scores is never formed: the product
 * of the two exponentials factorises into two GEMMs (ag_mtsa_attention). */
#include "attngrad/model.h"
#include "internal.h"
#include "../ops/softmax.h" /* ag__softmax_pool: the pooling's softmax and weighted sum in one op */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { MAX_HEADS = 16 };

typedef struct {
    ag_tensor *wv, *bv, *wq, *wk, *ws1, *bs1, *ws2, *bs2, *wg, *bg;
} mtsa_head;

typedef struct {
    ag_tensor *embed;
    mtsa_head *head; /* cfg.heads of them */
    ag_tensor *pool_w1, *pool_b1, *pool_w2, *pool_b2;
    ag_tensor *cls_w, *cls_b, *out_w;
} mtsa;

/* The TREC setting of the paper; other tasks change keep, batch, optimizer. */
static void mtsa_defaults(ag_model_config *c) {
    c->dim = 300;    /* d_e */
    c->hidden = 300; /* dh per head */
    c->heads = 2;
    c->keep = 0.5;
    c->l2 = 1e-4;
    c->batch = 32;
    c->optim = "adadelta:lr=0.5,rho=0.95,eps=1e-6";
}

static void mtsa_tiny(ag_model_config *c) {
    c->dim = 4;
    c->hidden = 4;
    /* With zero biases a token whose v row is all zero (ReLU cuts every
     * feature, likely at dh = 4) puts v Ws1 + bs1 exactly on the ReLU kink,
     * where central differences see half a slope. */
    c->bias_init = 0.1;
}

/* Zero, or U(-bias_init, bias_init) for the tiny gradient check. */
static ag_tensor *bias(ag_model *m, const char *name, int n) {
    ag_tensor *b = ag_param_bias(&m->params, name, n);
    if (m->cfg.bias_init > 0) ag_init_uniform(b, -m->cfg.bias_init, m->cfg.bias_init, &m->rng);
    return b;
}

static ag_tensor *head_param(ag_model *m, int c, const char *what, int in, int out) {
    char name[64];
    snprintf(name, sizeof name, "head%d.%s", c, what);
    return in > 0 ? ag_param_glorot(&m->params, name, in, out, &m->rng) : bias(m, name, out);
}

static ag_status mtsa_build(ag_model *m) {
    int de = m->cfg.dim, dh = m->cfg.hidden, heads = m->cfg.heads, hn = heads * dh, K = m->cfg.classes;
    if (heads < 2 || heads % 2 || heads > MAX_HEADS) {
        return ag_fail(AG_ERR_ARG, "mtsa: heads = %d, want an even number in [2, %d] (half PAST, half FUTURE)",
                       heads, MAX_HEADS);
    }
    mtsa *p = calloc(1, sizeof *p);
    p->head = calloc((size_t)heads, sizeof *p->head);
    ag_params *ps = &m->params;
    ag_rng *r = &m->rng;
    p->embed = ag_param_embedding(ps, "embed.weight", m->cfg.vocab, de, 0.05, 0, r);
    for (int c = 0; c < heads; c++) {
        mtsa_head *h = &p->head[c];
        h->wv = head_param(m, c, "wv", de, dh);
        h->bv = head_param(m, c, "bv", 0, dh);
        h->wq = head_param(m, c, "wq", dh, dh);
        h->wk = head_param(m, c, "wk", dh, dh);
        h->ws1 = head_param(m, c, "ws1", dh, dh);
        h->bs1 = head_param(m, c, "bs1", 0, dh);
        h->ws2 = head_param(m, c, "ws2", dh, dh);
        h->bs2 = head_param(m, c, "bs2", 0, dh);
        h->wg = head_param(m, c, "wg", 2 * dh, dh);
        h->bg = head_param(m, c, "bg", 0, dh);
    }
    p->pool_w1 = ag_param_glorot(ps, "pool.w1", hn, hn, r);
    p->pool_b1 = bias(m, "pool.b1", hn);
    p->pool_w2 = ag_param_glorot(ps, "pool.w2", hn, hn, r);
    p->pool_b2 = bias(m, "pool.b2", hn);
    /* The classifier is dh wide: 300 in the paper, as the authors' code
     * (pre_logits has hn = dh units). */
    p->cls_w = ag_param_glorot(ps, "cls.hidden.weight", hn, dh, r);
    p->cls_b = bias(m, "cls.hidden.bias", dh);
    p->out_w = ag_param_glorot(ps, "cls.out.weight", dh, K, r);
    m->impl = p;
    return AG_OK;
}

/* The {0,1} direction mask [N,N] of head c: the first half of the heads
 * PAST (k < q), the second half FUTURE (k > q); never the diagonal.
 * ag_mtsa_attention adds valid(q) and valid(k) itself. */
static ag_tensor *direction_mask(int c, int heads, int N) {
    ag_tensor *mask = ag_tensor_new_host(2, (int[]){N, N});
    bool past = c < heads / 2;
    for (int q = 0; q < N; q++)
        for (int k = 0; k < N; k++) mask->data[q * N + k] = past ? k < q : k > q;
    return ag_to(mask, ag_get_device());
}

/* Dropout on the input of every dense layer, each with its own mask, as the
 * authors' code does (dense_keep_prob on every layer of the module). */
static ag_tensor *drop(ag_model *m, ag_tensor *x, bool training) {
    return ag_dropout(x, m->cfg.keep, training, &m->rng);
}

/* R = q k^T / sqrt(dh), q = x1 Wq and k = x2 Wk, x1 and x2 being v under
 * two dropout masks.  R = x1 (Wq Wk^T / sqrt(dh)) x2^T is the same
 * function: one [dh,dh] product replaces k's [rows,dh] x [dh,dh], and in
 * backward two more replace k's weight and input gradients - fewer FLOPs
 * whenever the batch has more rows than dh (training: 32 x 30 > 300). */
static ag_tensor *scores(ag_model *m, const mtsa_head *p, ag_tensor *v, bool training) {
    int dh = m->cfg.hidden, rows = (int)(v->size / dh);
    double scale = 1 / sqrt((double)dh);
    ag_tensor *x1 = drop(m, v, training), *x2 = drop(m, v, training);
    if (rows <= dh) /* a small batch: k itself is cheaper */
        return ag_mul_scalar(ag_matmul_t(ag_linear(x1, p->wq, NULL), false, ag_linear(x2, p->wk, NULL), true), scale);
    ag_tensor *wqk = ag_mul_scalar(ag_matmul_t(p->wq, false, p->wk, true), scale); /* [dh,dh] */
    return ag_matmul_t(ag_linear(x1, wqk, NULL), false, x2, true);
}

/* One head on x [B,N,d_e] -> [B,N,dh]. */
static ag_tensor *mtsa_head_forward(ag_model *m, int c, ag_tensor *x, const int32_t *len, bool training) {
    const mtsa_head *p = &((mtsa *)m->impl)->head[c];
    int N = x->shape[1];
    ag_tensor *v = ag_dense(drop(m, x, training), p->wv, p->bv, AG_ACT_RELU);
    ag_tensor *R = scores(m, p, v, training);                                       /* [B,N,N] */
    ag_tensor *S = ag_linear(drop(m, ag_dense(drop(m, v, training), p->ws1, p->bs1, AG_ACT_RELU), training),
                             p->ws2, p->bs2);                                           /* [B,N,dh] */
    ag_mtsa_score score = (m->cfg.flags & AG_FLAG_EXP_SCORE) ? AG_MTSA_IDENTITY : AG_MTSA_LOG_SIGMOID;
    ag_tensor *M = direction_mask(c, m->cfg.heads, N);
    ag_tensor *H = ag_mtsa_attention(R, S, v, M, len, score);
    if (m->capture_maps) { /* the token2token gate M ⊙ sigmoid(R); S adds the per-feature part */
        char name[40];
        snprintf(name, sizeof name, "%s gate, head %d", c < m->cfg.heads / 2 ? "past" : "future", c + 1);
        ag_model_capture(m, name, ag_mul(ag_sigmoid(R), M));
    }
    /* Fusion gate: H <- g v + (1 - g) H = H + g (v - H). */
    ag_tensor *g = ag_dense(drop(m, ag_concat((ag_tensor *[]){v, H}, 2, 2), training), p->wg, p->bg, AG_ACT_SIGMOID);
    return ag_lerp(H, v, g);
}

static ag_tensor *mtsa_forward(ag_model *m, const ag_batch *b, bool training) {
    mtsa *p = m->impl;
    int B = b->rows, N = b->width, heads = m->cfg.heads;
    ag_tensor *x = ag_embedding(p->embed, b->tokens, 2, (int[]){B, N}); /* [B,N,d_e] */

    ag_tensor *outs[MAX_HEADS];
    for (int c = 0; c < heads; c++) outs[c] = mtsa_head_forward(m, c, x, b->lengths, training);
    ag_tensor *u = ag_zero_padding(ag_concat(outs, heads, 2), b->lengths); /* [B,N,hn] */

    /* Source2token pooling, written out because the authors drop out the
     * inputs of both dense layers but pool the undropped u. */
    ag_tensor *a1 = ag_dense(drop(m, u, training), p->pool_w1, p->pool_b1, AG_ACT_RELU);
    ag_tensor *A = ag_linear(drop(m, a1, training), p->pool_w2, p->pool_b2);
    ag_tensor *s = AG_AT(ag__softmax_pool, A, u, b->lengths, NULL); /* softmax over valid t per feature, sum: [B,hn] */

    ag_tensor *hidden = ag_dense(drop(m, s, training), p->cls_w, p->cls_b, AG_ACT_RELU);
    return ag_linear(drop(m, hidden, training), p->out_w, NULL);
}

static void mtsa_destroy(ag_model *m) {
    mtsa *p = m->impl;
    if (p) free(p->head);
    free(p);
}

const ag_model_kind ag__mtsa_kind = {
    .abi = AG_MODEL_ABI,
    .name = "mtsa",
    .defaults = mtsa_defaults,
    .tiny = mtsa_tiny,
    .build = mtsa_build,
    .forward = mtsa_forward,
    .batch_opts = NULL,
    .destroy = mtsa_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY),
    .reads = "hidden,heads,max-len",
    .flags = AG_FLAG_EXP_SCORE,
};
