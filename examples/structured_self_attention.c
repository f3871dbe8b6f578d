/* structured_self_attention.c - Lin et al. 2017, "A Structured Self-attentive Sentence Embedding" (ICLR 2017), as
 * a plugin model for the attngrad programs: word embeddings -> a bidirectional LSTM (u units per direction) ->
 * H [B,N,2u]; r attention hops A = softmax over the valid positions of W_s2 tanh(W_s1 H^T) [B,r,N]; M = A H
 * [B,r,2u], flattened -> a ReLU layer -> logits.  The loss adds the penalization P = ||A A^T - I||_F^2 (mean over
 * the batch, times --hparams penalty=C, 1 by default) to the cross-entropy.  Sizes: --dim (embedding), --hidden (u;
 * also d_a, and the MLP's width is 2u), --heads (r hops).  --flags no_penalty drops P.
 *
 *   ninja -C build examples/structured_self_attention.so examples/structured_self_attention-f64.so
 *   P=build/examples/structured_self_attention.so
 *   build/tools/attngrad --plugin $P gradcheck --model ssa            # f64 (loads ...-f64.so)
 *   build/tools/attngrad --plugin $P train --model ssa --heads 4 --optim adam:lr=3e-3 --max-steps 300 --out runs/ssa
 *   build/tools/optim_experiments --plugin $P --model ssa --heads 4 --optim adam:lr=3e-3 --optim sgd:lr=0.06
 *   build/tools/attngrad --plugin $P heatmap --ckpt runs/ssa/best.safetensors --sentence "w1 A w2 B" --out maps/
 * The heatmap of A has the hops as rows and the sentence's words as columns (AG_MAP_SLOTS).  The defaults are the
 * paper's (r 30, SGD lr 0.06); on the short sentences of the generated task r 4 and Adam learn in 300 steps.
 * (cc -shared -fPIC -O2 -std=c11 -I include examples/structured_self_attention.c -o ssa.so, and again with
 * -DAG_REAL_DOUBLE -o ssa-f64.so, builds it outside meson.)  tests/test_structured_self_attention.sh
 * gradchecks it on a padded batch with a length-1 sentence. */
#include "attngrad/model.h"
#include <math.h>
#include <stdlib.h>

enum { NO_PENALTY = AG_FLAG_OWN(0) };

typedef struct {
    ag_tensor *embed, *ws1, *ws2, *w_mlp, *b_mlp, *w_out, *b_out;
    ag_bilstm_layer lstm;
    ag_tensor *attn; /* A^T [B,N,r] of the last forward, for the penalization */
} ssa;

static void ssa_defaults(ag_model_config *c) { /* the paper's Yelp/age settings (u 300, d_a 350, r 30) */
    c->dim = 100, c->hidden = 300, c->heads = 30;
    c->keep = 0.5, c->batch = 32, c->clip = 0.5, c->optim = "sgd:lr=0.06";
}

static void ssa_tiny(ag_model_config *c) { c->dim = 4, c->hidden = 3, c->heads = 2, c->keep = 1; }

static ag_status ssa_build(ag_model *m) {
    const ag_model_config *c = &m->cfg;
    int E = c->dim, u = c->hidden, r = c->heads, K = c->classes;
    if (E < 1 || u < 1 || r < 1) return ag_fail(AG_ERR_ARG, "ssa: dim, hidden and heads must be >= 1");
    ssa *p = calloc(1, sizeof *p);
    if (!p) return ag_fail(AG_ERR_NOMEM, "ssa: out of memory");
    m->impl = p;
    ag_params *ps = &m->params;
    p->embed = ag_param_embedding(ps, "embed.weight", c->vocab, E, 0.1, AG_PAD_ID, &m->rng);
    p->lstm = ag_param_bilstm(ps, "lstm", E, u, 1 / sqrt(u), &m->rng); /* lstm.fw.*, lstm.bw.* */
    p->ws1 = ag_param_glorot(ps, "attn.ws1", 2 * u, u, &m->rng); /* d_a = u */
    p->ws2 = ag_param_glorot(ps, "attn.ws2", u, r, &m->rng);
    p->w_mlp = ag_param_glorot(ps, "mlp.w", r * 2 * u, 2 * u, &m->rng);
    p->b_mlp = ag_param_bias(ps, "mlp.b", 2 * u);
    p->w_out = ag_param_glorot(ps, "out.w", 2 * u, K, &m->rng);
    p->b_out = ag_param_bias(ps, "out.b", K);
    return AG_OK;
}

static ag_tensor *ssa_forward(ag_model *m, const ag_batch *b, bool training) {
    ssa *p = m->impl;
    int B = b->rows, N = b->width, u = m->cfg.hidden, r = m->cfg.heads;
    ag_tensor *x = ag_embedding(p->embed, b->tokens, 2, (int[]){B, N});
    ag_tensor *h = ag_bilstm(x, &p->lstm, b->lengths); /* H [B,N,2u], 0 at padding */
    ag_tensor *scores = ag_linear(ag_dense(h, p->ws1, NULL, AG_ACT_TANH), p->ws2, NULL); /* [B,N,r] */
    p->attn = ag_softmax_axis_len(scores, 1, b->lengths);        /* A^T: over valid positions, per hop */
    if (m->capture_maps) /* A [B,r,N]: rows the hops, columns the words */
        ag_model_capture_axes(m, "hops", ag_transpose(p->attn, 1, 2), AG_MAP_SLOTS);
    ag_tensor *mm = ag_matmul_t(p->attn, true, h, false);       /* M = A H [B,r,2u] */
    ag_tensor *z = ag_dense(ag_reshape(mm, 2, (int[]){B, r * 2 * u}), p->w_mlp, p->b_mlp, AG_ACT_RELU);
    return ag_linear(ag_model_dropout(m, z, training), p->w_out, p->b_out);
}

/* P = mean over the batch of ||A A^T - I||_F^2, from A^T [B,N,r]. */
static ag_tensor *penalization(ag_tensor *at) {
    int B = at->shape[0], r = at->shape[2];
    ag_tensor *eye = ag_tensor_new_host(2, (int[]){r, r});
    for (int i = 0; i < r; i++) eye->data[i * r + i] = 1;
    ag_tensor *g = ag_matmul_t(at, true, at, false); /* A A^T [B,r,r] */
    return ag_mul_scalar(ag_sum(ag_square(ag_sub(g, ag_to(eye, ag_get_device())))), 1.0 / B);
}

static ag_tensor *ssa_loss(ag_model *m, const ag_batch *b, bool training) {
    ag_tensor *logits = ssa_forward(m, b, training);
    ag_tensor *ce = logits ? ag_model_objective_of(m, b, logits, training) : NULL;
    if (!ce || (m->cfg.flags & NO_PENALTY)) return ce;
    double coef = ag_model_hparam(m, "penalty", 1.0); /* the paper's coefficient of P, --hparams penalty=C */
    return ag_add(ce, ag_mul_scalar(penalization(((ssa *)m->impl)->attn), coef));
}

static void ssa_destroy(ag_model *m) { free(m->impl); }

static const ag_model_kind ssa_kind = {
    .abi = AG_MODEL_ABI,
    .name = "ssa",
    .defaults = ssa_defaults, .tiny = ssa_tiny,
    .build = ssa_build, .forward = ssa_forward, .loss = ssa_loss, .destroy = ssa_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY),
    .reads = "hidden,heads,max-len",
    .flag_names = "no_penalty",
    .hparams = "penalty",
};

ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_model_register(&ssa_kind); }
