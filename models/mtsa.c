/* mtsa.c - MTSA (docs/models.md, MTSA): multi-mask tensorized self-attention.  Each
 * head mixes a token2token score R[q,k] with a multi-dim source2token score
 * S[k,l] under its own direction mask (head 0 PAST, head 1 FUTURE, the
 * diagonal excluded), fuses the result with its values through a gate, and
 * the concatenated heads go through source2token pooling and a ReLU
 * classifier.  The heads run as one in every op, on [heads, ...] tensors
 * (their parameters stacked, ag_param_stack), so a step launches what one
 * head did.  The [N,N,dh] tensor of scores is never formed: the product
 * of the two exponentials factorises into two GEMMs
 * (ag__mtsa_attention_groups, ag_mtsa_attention's kernels). */
#include "attngrad/model.h"
#include "internal.h"
#include "../ops/dropout.h"  /* ag__dropout_planes: the heads' dropouts in one op each */
#include "../ops/mtsa.h"     /* ag__mtsa_attention_groups: every head's attention in one op */
#include "../ops/softmax.h"  /* ag__softmax_pool: the pooling's softmax and weighted sum in one op */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { MAX_HEADS = 16 };

/* The heads' parameters, each kind one stack (ag_param_stack): head c's
 * are member c, named head{c}.wv, ... as docs/models.md names them.  The heads
 * run as one in every op, on [heads, ...] tensors. */
typedef struct {
    ag_tensor *wv[MAX_HEADS], *bv[MAX_HEADS], *wq[MAX_HEADS], *wk[MAX_HEADS], *ws1[MAX_HEADS], *bs1[MAX_HEADS],
        *ws2[MAX_HEADS], *bs2[MAX_HEADS], *wg[MAX_HEADS], *bg[MAX_HEADS];
} mtsa_heads;

typedef struct {
    ag_tensor *embed;
    mtsa_heads head;
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
static void init_bias(ag_model *m, ag_tensor *b) {
    if (m->cfg.bias_init > 0) ag_init_uniform(b, -m->cfg.bias_init, m->cfg.bias_init, &m->rng);
}

static ag_tensor *bias(ag_model *m, const char *name, int n) {
    ag_tensor *b = ag_param_bias(&m->params, name, n);
    init_bias(m, b);
    return b;
}

/* The stack of the heads' `what` ([in, out] weights, or [out] biases when
 * in is 0), uninitialised: build draws head by head, as it always did. */
static void head_stack(ag_model *m, const char *what, int in, int out, ag_tensor **members) {
    char fmt[32];
    snprintf(fmt, sizeof fmt, "head%%d.%s", what);
    if (in > 0) ag_param_stack(&m->params, fmt, m->cfg.heads, 2, (int[]){in, out}, members);
    else ag_param_stack(&m->params, fmt, m->cfg.heads, 1, (int[]){out}, members);
}

static ag_status mtsa_build(ag_model *m) {
    int de = m->cfg.dim, dh = m->cfg.hidden, heads = m->cfg.heads, hn = heads * dh, K = m->cfg.classes;
    if (heads < 2 || heads % 2 || heads > MAX_HEADS) {
        return ag_fail(AG_ERR_ARG, "mtsa: heads = %d, want an even number in [2, %d] (half PAST, half FUTURE)",
                       heads, MAX_HEADS);
    }
    mtsa *p = calloc(1, sizeof *p);
    ag_params *ps = &m->params;
    ag_rng *r = &m->rng;
    p->embed = ag_param_embedding(ps, "embed.weight", m->cfg.vocab, de, 0.05, 0, r);
    mtsa_heads *h = &p->head;
    head_stack(m, "wv", de, dh, h->wv);
    head_stack(m, "bv", 0, dh, h->bv);
    head_stack(m, "wq", dh, dh, h->wq);
    head_stack(m, "wk", dh, dh, h->wk);
    head_stack(m, "ws1", dh, dh, h->ws1);
    head_stack(m, "bs1", 0, dh, h->bs1);
    head_stack(m, "ws2", dh, dh, h->ws2);
    head_stack(m, "bs2", 0, dh, h->bs2);
    head_stack(m, "wg", 2 * dh, dh, h->wg);
    head_stack(m, "bg", 0, dh, h->bg);
    for (int c = 0; c < heads; c++) { /* head by head, in the order the draws always came */
        ag_tensor *weights[] = {h->wv[c], h->wq[c], h->wk[c], h->ws1[c], h->ws2[c], h->wg[c]};
        ag_tensor *biases[] = {h->bv[c], NULL, NULL, h->bs1[c], h->bs2[c], h->bg[c]}; /* each after its weight */
        for (int k = 0; k < 6; k++) {
            ag_init_glorot_uniform(weights[k], 1.0, r);
            if (biases[k]) init_bias(m, biases[k]);
        }
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

/* The {0,1} direction masks [heads,N,N]: the first half of the heads
 * PAST (k < q), the second half FUTURE (k > q); never the diagonal.
 * ag__mtsa_attention_groups adds valid(q) and valid(k) itself. */
static ag_tensor *direction_masks(int heads, int N) {
    ag_tensor *mask = ag_tensor_new_host(3, (int[]){heads, N, N});
    for (int c = 0; c < heads; c++)
        for (int q = 0; q < N; q++)
            for (int k = 0; k < N; k++) mask->data[((int64_t)c * N + q) * N + k] = c < heads / 2 ? k < q : k > q;
    return ag_to(mask, ag_get_device());
}

/* Dropout on the input of every dense layer, each with its own mask, as
 * the authors' code does (dense_keep_prob on every layer of the module).
 * A head's draws, in the order its ops once drew them when the heads ran
 * one after another: x before Wv, v twice for the scores, v before Ws1,
 * the ReLU's output before Ws2, [v; H] before the gate. */
enum { DROP_X, DROP_Q, DROP_K, DROP_S1, DROP_S2, DROP_GATE, DROPS };

typedef struct {
    uint64_t at[DROPS][MAX_HEADS]; /* at[site][head] */
} head_draws;

/* Every head's draws up front, head by head: a seeded run drops what it
 * dropped before the heads ran as one. */
static void draw_heads(ag_model *m, bool training, head_draws *d) {
    uint64_t by_head[MAX_HEADS * DROPS];
    int heads = m->cfg.heads;
    ag__dropout_draws(&m->rng, training, m->cfg.keep, by_head, heads * DROPS);
    for (int c = 0; c < heads; c++)
        for (int k = 0; k < DROPS; k++) d->at[k][c] = by_head[c * DROPS + k];
}

/* x's planes [heads, ...] each dropped with its head's draw at `site`. */
static ag_tensor *drop_heads(ag_model *m, ag_tensor *x, const head_draws *d, int site, bool training) {
    return ag__dropout_planes(x, m->cfg.keep, training, d->at[site]);
}

static ag_tensor *stack_of(ag_tensor *const *members) { return ag_param_stack_view(members[0]); }

/* R = q k^T / sqrt(dh) per head [heads,B,N,N], q = x1 Wq and k = x2 Wk, x1
 * and x2 being v under two dropout masks.  R = x1 (Wq Wk^T / sqrt(dh)) x2^T
 * is the same function: one [dh,dh] product replaces k's [rows,dh] x
 * [dh,dh], and in backward two more replace k's weight and input gradients
 * - fewer FLOPs whenever a head has more rows than dh (training: 32 x 30 >
 * 300). */
static ag_tensor *scores(ag_model *m, ag_tensor *v, const head_draws *d, bool training) {
    const mtsa_heads *p = &((mtsa *)m->impl)->head;
    int dh = m->cfg.hidden, rows = (int)(v->size / v->shape[0] / dh);
    double scale = 1 / sqrt((double)dh);
    ag_tensor *x1 = AG_AT(drop_heads, m, v, d, DROP_Q, training), *x2 = AG_AT(drop_heads, m, v, d, DROP_K, training);
    ag_tensor *wq = stack_of(p->wq), *wk = stack_of(p->wk);
    if (rows <= dh) /* a small batch: k itself is cheaper */
        return ag_mul_scalar(ag_matmul_t(ag_linear(x1, wq, NULL), false, ag_linear(x2, wk, NULL), true), scale);
    ag_tensor *wqk = ag_mul_scalar(ag_matmul_t(wq, false, wk, true), scale); /* [heads,dh,dh] */
    return ag_matmul_t(ag_linear(x1, wqk, NULL), false, x2, true);
}

/* Every head at once on x [B,N,d_e] -> [heads,B,N,dh]: head c is plane c
 * of each tensor, and each op runs the heads as one (grouped dense layers
 * on the stacked weights, batched products, one attention op). */
static ag_tensor *heads_forward(ag_model *m, ag_tensor *x, const int32_t *len, bool training) {
    const mtsa_heads *p = &((mtsa *)m->impl)->head;
    int heads = m->cfg.heads, B = x->shape[0], N = x->shape[1];
    head_draws d;
    draw_heads(m, training, &d);
    ag_tensor *xs = AG_AT(ag__dropout_copies_drawn, x, heads, m->cfg.keep, training, d.at[DROP_X]); /* [heads,B,N,d_e] */
    ag_tensor *v = ag_dense(xs, stack_of(p->wv), stack_of(p->bv), AG_ACT_RELU);             /* [heads,B,N,dh] */
    ag_tensor *R = scores(m, v, &d, training);                                               /* [heads,B,N,N] */
    ag_tensor *hidden = ag_dense(drop_heads(m, v, &d, DROP_S1, training), stack_of(p->ws1), stack_of(p->bs1),
                                 AG_ACT_RELU);
    ag_tensor *S = ag_linear(drop_heads(m, hidden, &d, DROP_S2, training), stack_of(p->ws2), stack_of(p->bs2));
    ag_mtsa_score score = (m->cfg.flags & AG_FLAG_EXP_SCORE) ? AG_MTSA_IDENTITY : AG_MTSA_LOG_SIGMOID;
    ag_tensor *M = direction_masks(heads, N);
    ag_tensor *H = AG_AT(ag__mtsa_attention_groups, R, S, v, M, len, score);
    for (int c = 0; m->capture_maps && c < heads; c++) { /* the token2token gate M ⊙ sigmoid(R); S adds the per-feature part */
        char name[40];
        snprintf(name, sizeof name, "%s gate, head %d", c < heads / 2 ? "past" : "future", c + 1);
        ag_tensor *Rc = ag_reshape(ag_slice(R, 0, c, c + 1), 3, (int[]){B, N, N});
        ag_tensor *Mc = ag_reshape(ag_slice(M, 0, c, c + 1), 2, (int[]){N, N});
        ag_model_capture(m, name, ag_mul(ag_sigmoid(Rc), Mc));
    }
    /* Fusion gate: H <- g v + (1 - g) H = H + g (v - H). */
    ag_tensor *vh = ag_concat((ag_tensor *[]){v, H}, 2, 3);
    ag_tensor *g = ag_dense(drop_heads(m, vh, &d, DROP_GATE, training), stack_of(p->wg), stack_of(p->bg), AG_ACT_SIGMOID);
    return ag_lerp(H, v, g);
}

static ag_tensor *mtsa_forward(ag_model *m, const ag_batch *b, bool training) {
    mtsa *p = m->impl;
    int B = b->rows, N = b->width, heads = m->cfg.heads, dh = m->cfg.hidden;
    ag_tensor *x = ag_embedding(p->embed, b->tokens, 2, (int[]){B, N}); /* [B,N,d_e] */

    /* The heads side by side per position: [heads,B,N,dh] -> [B,N,heads dh] */
    ag_tensor *outs = heads_forward(m, x, b->lengths, training);
    ag_tensor *side = ag_reshape(ag_permute(outs, (int[]){1, 2, 0, 3}), 3, (int[]){B, N, heads * dh});
    ag_tensor *u = ag_zero_padding(side, b->lengths); /* [B,N,hn] */

    /* Source2token pooling, written out because the authors drop out the
     * inputs of both dense layers but pool the undropped u. */
    ag_tensor *a1 = ag_dense(ag_model_dropout(m, u, training), p->pool_w1, p->pool_b1, AG_ACT_RELU);
    ag_tensor *A = ag_linear(ag_model_dropout(m, a1, training), p->pool_w2, p->pool_b2);
    ag_tensor *s = AG_AT(ag__softmax_pool, A, u, b->lengths, NULL); /* softmax over valid t per feature, sum: [B,hn] */

    ag_tensor *hidden = ag_dense(ag_model_dropout(m, s, training), p->cls_w, p->cls_b, AG_ACT_RELU);
    return ag_linear(ag_model_dropout(m, hidden, training), p->out_w, NULL);
}

static void mtsa_destroy(ag_model *m) { free(m->impl); }

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
