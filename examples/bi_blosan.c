/* bi_blosan.c - Bi-BloSAN (Shen, Zhou, Long, Jiang, Zhang, ICLR 2018, "Bi-directional block self-attention for
 * fast and memory-efficient sequence modeling") as a plugin model, following the authors' code (BiBloSA,
 * context_fusion/block_attention.py).  Embeddings x [B,N,d_e]; the sentence padded to m = ceil(N / r) blocks of r
 * tokens; per direction (forward: a token reads the tokens before it, AG_MASK_PAST; backward: after, FUTURE):
 *   h = elu(x W_h + b_h)                                       [B,m*r,d]
 *   u = DiSA(h) within each block: s = masked feature-wise self-attention (DiSAN's c tanh(../c), c = 5),
 *       u = G ⊙ h + (1 - G) ⊙ s, G = sigmoid(s W_g1 + h W_g2 + b_g)      (intra-block SAN)
 *   v = source2token(u) per block, p = elu(v W_p + b_p)         [B,m,d]   one vector per block
 *   e = DiSA(p) over the blocks (its own parameters)            [B,m,d]   each block's context (inter-block SAN)
 *   E = e repeated over its block's r tokens; c = [h ; u ; E]
 *   out = F ⊙ elu(c W_f + b_f) + (1 - F) ⊙ h, F = sigmoid(c W_F + b_F)   [B,m*r,d]   (the fusion gate)
 * then [out_fw ; out_bw] [B,m*r,2d] -> source2token over the sentence's valid tokens -> elu layer -> logits.
 * Every attention is ag_feature_attention: no [.., n, n, d] tensor at all, not even per block.  Padding: a
 * block's own length (0..r) masks its padded keys and zeroes its padded queries; empty blocks are masked at
 * the inter level; a token with no key (a block's first under the forward mask, a length-1 sentence) gets
 * s = 0.  The intra-block SAN is DiSAN's whole DiSA, gate included, as the inter-block one is in the
 * authors' code (their intra-block SAN pools s alone, which under the forward mask never sees a block's last
 * token, nor anything when r = 1: the gate's u sees every token of its block).
 * Sizes: --dim d_e, --hidden d.  The block length r: --hparams block=R, else the authors' ceil((2N)^(1/3)) (their
 * code's default; it minimises the memory n r + (n/r)^2) for N = the run's --max-len where given, else the
 * batch's width, so without either a sentence's blocks depend on its batch's width (a run on TREC: test accuracy
 * 88.6% evaluated a sentence at a time, 87.8% in batches of 500).  Defaults: the authors' SST settings (d_e = d = 300, keep 0.7 on the embeddings and
 * before the two last layers, L2 1e-4, batch 64, Adadelta lr 0.5).
 * Here the blocks save time, not memory: ag_feature_attention never holds [N,N,d], so DiSA over the whole
 * sentence (block >= N) takes as little (334 MB against 346 at B = 8, N = 256, d = 300, f32), but 3x the time
 * (1.2 s a step against 0.39 s on one thread, 2026-12-06).
 *
 *   ninja -C build examples/bi_blosan.so examples/bi_blosan-f64.so
 *   build/tools/attngrad --plugin build/examples/bi_blosan.so gradcheck --model bi_blosan --hparams block=2
 *   build/tools/attngrad --plugin build/examples/bi_blosan.so train --model bi_blosan --optim adam:lr=3e-3 --keep 1
 * tests/test_bi_blosan.sh gradchecks it (padding, a length-1 sentence) and trains it; tests/test_bi_blosan_memory.c
 * checks that its step memory grows linearly with the sentence. */
#include "attngrad/model.h"
#include <stdlib.h>

typedef struct { ag_tensor *w1, *b1, *w2, *g1, *g2, *gb; } disa; /* DiSAN's DiSA: attention and its gate */

typedef struct {
    ag_tensor *hw, *hb, *sw1, *sb1, *sw2, *sb2, *pw, *pb; /* token map, block source2token, block map */
    ag_tensor *fw, *fb, *Fw, *Fb;                         /* the fusion gate */
    disa intra, inter;
    ag_mask_dir dir;
} mblosa;

typedef struct {
    ag_tensor *embed, *pw1, *pb1, *pw2, *pb2, *cw, *cb, *ow, *ob;
    mblosa dirs[2];
} blosan;

static void blosan_defaults(ag_model_config *c) {
    c->dim = 300, c->hidden = 300, c->keep = 0.7, c->l2 = 1e-4, c->batch = 64;
    c->optim = "adadelta:lr=0.5,rho=0.95,eps=1e-6";
}

static void blosan_tiny(ag_model_config *c) { c->dim = 4, c->hidden = 4, c->keep = 1; }

static disa disa_new(ag_params *ps, const char *scope, int d, ag_rng *rng) {
    disa a;
    ag_scope_push("%s", scope);
    a.w1 = ag_param_glorot(ps, "w1", d, d, rng), a.b1 = ag_param_bias(ps, "b1", d);
    a.w2 = ag_param_glorot(ps, "w2", d, d, rng);
    a.g1 = ag_param_glorot(ps, "gate.w1", d, d, rng), a.g2 = ag_param_glorot(ps, "gate.w2", d, d, rng);
    a.gb = ag_param_bias(ps, "gate.b", d);
    ag_scope_pop();
    return a;
}

static mblosa mblosa_new(ag_params *ps, const char *scope, int E, int d, ag_mask_dir dir, ag_rng *rng) {
    mblosa a = {.dir = dir};
    ag_scope_push("%s", scope);
    a.hw = ag_param_glorot(ps, "map.w", E, d, rng), a.hb = ag_param_bias(ps, "map.b", d);
    a.intra = disa_new(ps, "intra", d, rng);
    a.sw1 = ag_param_glorot(ps, "block_pool.w1", d, d, rng), a.sb1 = ag_param_bias(ps, "block_pool.b1", d);
    a.sw2 = ag_param_glorot(ps, "block_pool.w2", d, d, rng), a.sb2 = ag_param_bias(ps, "block_pool.b2", d);
    a.pw = ag_param_glorot(ps, "inter.map.w", d, d, rng), a.pb = ag_param_bias(ps, "inter.map.b", d);
    a.inter = disa_new(ps, "inter", d, rng);
    a.fw = ag_param_glorot(ps, "fuse.w", 3 * d, d, rng), a.fb = ag_param_bias(ps, "fuse.b", d);
    a.Fw = ag_param_glorot(ps, "fuse.gate.w", 3 * d, d, rng), a.Fb = ag_param_bias(ps, "fuse.gate.b", d);
    ag_scope_pop();
    return a;
}

static ag_status blosan_build(ag_model *m) {
    const ag_model_config *c = &m->cfg;
    int E = c->dim, d = c->hidden, K = c->classes;
    double r = ag_model_hparam(m, "block", 0);
    if (E < 1 || d < 1) return ag_fail(AG_ERR_ARG, "bi_blosan: dim and hidden must be >= 1");
    if (r < 0 || r > 4096 || r != (int)r)
        return ag_fail(AG_ERR_ARG, "bi_blosan: --hparams block=%g: want a whole number of tokens, 1 to 4096 (0: auto)", r);
    blosan *p = calloc(1, sizeof *p);
    if (!p) return ag_fail(AG_ERR_NOMEM, "bi_blosan: out of memory");
    m->impl = p;
    ag_params *ps = &m->params;
    p->embed = ag_param_embedding(ps, "embed.weight", c->vocab, E, 0.05, AG_PAD_ID, &m->rng);
    p->dirs[0] = mblosa_new(ps, "fw", E, d, AG_MASK_PAST, &m->rng); /* the authors' 'forward': key j < query i */
    p->dirs[1] = mblosa_new(ps, "bw", E, d, AG_MASK_FUTURE, &m->rng);
    p->pw1 = ag_param_glorot(ps, "pool.w1", 2 * d, 2 * d, &m->rng), p->pb1 = ag_param_bias(ps, "pool.b1", 2 * d);
    p->pw2 = ag_param_glorot(ps, "pool.w2", 2 * d, 2 * d, &m->rng), p->pb2 = ag_param_bias(ps, "pool.b2", 2 * d);
    p->cw = ag_param_glorot(ps, "hidden.w", 2 * d, d, &m->rng), p->cb = ag_param_bias(ps, "hidden.b", d);
    p->ow = ag_param_glorot(ps, "out.w", d, K, &m->rng), p->ob = ag_param_bias(ps, "out.b", K);
    return AG_OK;
}

/* DiSA over h [S,n,d] (lengths[S] valid positions): DiSAN's masked feature-wise self-attention s, then its
 * gate G ⊙ h + (1 - G) ⊙ s, G = sigmoid(s W_g1 + h W_g2 + b_g). */
static ag_tensor *disa_forward(const disa *a, ag_mask_dir dir, ag_tensor *h, const int32_t *lengths) {
    ag_mask_spec spec = {.dir = dir};
    ag_tensor *s = ag_feature_attention(ag_linear(h, a->w1, a->b1), ag_linear(h, a->w2, NULL), h,
                                        ag_mask(&spec, h->shape[1]), lengths, 5.0, NULL);
    return ag_lerp(s, h, ag_sigmoid(ag_add(ag_linear(s, a->g1, a->gb), ag_linear(h, a->g2, NULL))));
}

/* One direction over x [B, m*r, d_e] -> [B, m*r, d]. */
static ag_tensor *mblosa_forward(const mblosa *a, ag_tensor *x, int m, int r, const int32_t *blen,
                                 const int32_t *nblocks, const int32_t *block_of) {
    int B = x->shape[0], d = a->hb->shape[0];
    ag_tensor *h = ag_dense(x, a->hw, a->hb, AG_ACT_ELU);
    ag_tensor *u = disa_forward(&a->intra, a->dir, ag_reshape(h, 3, (int[]){B * m, r, d}), blen); /* per block */
    ag_tensor *v = ag_source2token(u, blen, a->sw1, a->sb1, a->sw2, a->sb2, AG_ACT_ELU);          /* [B*m,d] */
    ag_tensor *pv = ag_dense(ag_reshape(v, 3, (int[]){B, m, d}), a->pw, a->pb, AG_ACT_ELU);
    ag_tensor *e = disa_forward(&a->inter, a->dir, pv, nblocks);                                 /* [B,m,d] */
    ag_tensor *E = ag_index_select(e, 1, block_of, m * r); /* each block's context at its tokens */
    ag_tensor *c = ag_concat((ag_tensor *[]){h, ag_reshape(u, 3, (int[]){B, m * r, d}), E}, 3, 2);
    return ag_lerp(h, ag_dense(c, a->fw, a->fb, AG_ACT_ELU), ag_dense(c, a->Fw, a->Fb, AG_ACT_SIGMOID));
}

/* --hparams block=R, else the authors' ceil((2N)^(1/3)) for the run's --max-len
 * (every batch then cuts a sentence alike), else for the batch's width. */
static int block_len(const ag_model *m, int N) {
    int r = (int)ag_model_hparam(m, "block", 0);
    if (r > 0) return r;
    if (m->cfg.max_len > 0) N = m->cfg.max_len;
    for (r = 1; r * r * r < 2 * N;) r++;
    return r;
}

static ag_tensor *blosan_forward(ag_model *m, const ag_batch *b, bool training) {
    blosan *p = m->impl;
    int B = b->rows, N = b->width, E = m->cfg.dim, r = block_len(m, N), nb = (N + r - 1) / r, M = nb * r;
    int32_t blen[B * nb + 1], nblocks[B + 1], block_of[M + 1]; /* the ops copy such arrays when called */
    for (int i = 0; i < B; i++) {
        nblocks[i] = (b->lengths[i] + r - 1) / r;
        for (int l = 0; l < nb; l++) {
            int left = b->lengths[i] - l * r;
            blen[i * nb + l] = left < 0 ? 0 : left > r ? r : left;
        }
    }
    for (int t = 0; t < M; t++) block_of[t] = t / r;
    ag_tensor *x = ag_model_dropout(m, ag_embedding(p->embed, b->tokens, 2, (int[]){B, N}), training);
    if (M > N) x = ag_concat((ag_tensor *[]){x, ag_tensor_new(3, (int[]){B, M - N, E})}, 2, 1); /* pad to m*r */
    ag_tensor *u = ag_concat((ag_tensor *[]){mblosa_forward(&p->dirs[0], x, nb, r, blen, nblocks, block_of),
                                             mblosa_forward(&p->dirs[1], x, nb, r, blen, nblocks, block_of)}, 2, 2);
    ag_tensor *sent = ag_source2token(u, b->lengths, p->pw1, p->pb1, p->pw2, p->pb2, AG_ACT_ELU); /* [B,2d] */
    ag_tensor *hid = ag_dense(ag_model_dropout(m, sent, training), p->cw, p->cb, AG_ACT_ELU);
    return ag_linear(ag_model_dropout(m, hid, training), p->ow, p->ob);
}

static void blosan_destroy(ag_model *m) { free(m->impl); }

static const ag_model_kind blosan_kind = {
    .abi = AG_MODEL_ABI,
    .name = "bi_blosan",
    .defaults = blosan_defaults, .tiny = blosan_tiny,
    .build = blosan_build, .forward = blosan_forward, .destroy = blosan_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY),
    .reads = "hidden,max-len",
    .hparams = "block",
};

ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_model_register(&blosan_kind); }
