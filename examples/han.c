/* han.c - the word level of Yang et al. 2016, "Hierarchical Attention Networks for Document Classification"
 * (NAACL 2016), as a plugin model for the attngrad programs: word embeddings -> a bidirectional GRU (--hidden
 * units per direction) -> h [B,N,2H]; u = tanh(h W + b) [B,N,2H]; alpha = softmax over the valid positions of
 * u . u_w (a learnt word-context vector); s = sum_t alpha_t h_t [B,2H] -> logits.  The paper applies the same
 * encoder and attention again over a document's sentence vectors; the data sets here are single sentences, for
 * which the sentence level would attend over one vector with weight 1, so this is the whole model on them.
 * Sizes: --dim (embedding, 200 in the paper), --hidden (50).  --flags lstm swaps the bidirectional GRU for a
 * bidirectional LSTM of the same width (the encoder as the only change).
 *
 *   ninja -C build examples/han.so examples/han-f64.so
 *   build/tools/attngrad --plugin build/examples/han.so gradcheck --model han        # f64 (loads han-f64.so)
 *   build/tools/attngrad --plugin build/examples/han.so train --model han --max-steps 300 --out runs/han
 *   build/tools/attngrad --plugin build/examples/han.so heatmap --ckpt runs/han/best.safetensors \
 *       --sentence "w1 A w2 B" --out maps/
 * The defaults are the paper's (dim 200, hidden 50, batch 64, SGD with momentum 0.9; its rate came from a grid
 * search on dev sets the paper does not report, 0.05 here).  tests/test_han.sh gradchecks it on a padded batch
 * with a length-1 sentence, both encoders, and trains it. */
#include "attngrad/model.h"
#include <math.h>
#include <stdlib.h>

enum { LSTM_ENCODER = AG_FLAG_OWN(0) };

typedef struct {
    ag_tensor *embed, *w_att, *b_att, *context, *w_out, *b_out;
    ag_bigru_layer gru;
    ag_bilstm_layer lstm;
} han;

static void han_defaults(ag_model_config *c) {
    c->dim = 200, c->hidden = 50;
    c->keep = 1, c->batch = 64, c->optim = "sgd:lr=0.05,momentum=0.9";
}

static void han_tiny(ag_model_config *c) { c->dim = 4, c->hidden = 3, c->keep = 1; }

static ag_status han_build(ag_model *m) {
    const ag_model_config *c = &m->cfg;
    int E = c->dim, H = c->hidden, K = c->classes;
    if (E < 1 || H < 1) return ag_fail(AG_ERR_ARG, "han: dim and hidden must be >= 1");
    han *p = calloc(1, sizeof *p);
    if (!p) return ag_fail(AG_ERR_NOMEM, "han: out of memory");
    m->impl = p;
    ag_params *ps = &m->params;
    p->embed = ag_param_embedding(ps, "embed.weight", c->vocab, E, 0.1, AG_PAD_ID, &m->rng);
    if (c->flags & LSTM_ENCODER) p->lstm = ag_param_bilstm(ps, "encoder", E, H, 1 / sqrt(H), &m->rng);
    else p->gru = ag_param_bigru(ps, "encoder", E, H, 1 / sqrt(H), &m->rng); /* encoder.fw.*, encoder.bw.* */
    p->w_att = ag_param_glorot(ps, "attn.w", 2 * H, 2 * H, &m->rng);
    p->b_att = ag_param_bias(ps, "attn.b", 2 * H);
    p->context = ag_param_glorot(ps, "attn.context", 2 * H, 1, &m->rng); /* u_w */
    p->w_out = ag_param_glorot(ps, "out.w", 2 * H, K, &m->rng);
    p->b_out = ag_param_bias(ps, "out.b", K);
    return AG_OK;
}

static ag_tensor *han_forward(ag_model *m, const ag_batch *b, bool training) {
    han *p = m->impl;
    int B = b->rows, N = b->width, H = m->cfg.hidden;
    ag_tensor *x = ag_model_dropout(m, ag_embedding(p->embed, b->tokens, 2, (int[]){B, N}), training);
    ag_tensor *h = m->cfg.flags & LSTM_ENCODER ? ag_bilstm(x, &p->lstm, b->lengths)
                                               : ag_bigru(x, &p->gru, b->lengths); /* [B,N,2H], 0 at padding */
    ag_tensor *u = ag_dense(h, p->w_att, p->b_att, AG_ACT_TANH);                    /* [B,N,2H] */
    ag_tensor *alpha = ag_softmax_axis_len(ag_linear(u, p->context, NULL), 1, b->lengths); /* [B,N,1] */
    if (m->capture_maps) /* [B,1,N]: one row, the word-context vector's query */
        ag_model_capture_axes(m, "words", ag_transpose(alpha, 1, 2), AG_MAP_SLOTS);
    ag_tensor *s = ag_reshape(ag_matmul_t(alpha, true, h, false), 2, (int[]){B, 2 * H}); /* sum_t alpha_t h_t */
    return ag_linear(ag_model_dropout(m, s, training), p->w_out, p->b_out);
}

static void han_destroy(ag_model *m) { free(m->impl); }

static const ag_model_kind han_kind = {
    .abi = AG_MODEL_ABI,
    .name = "han",
    .defaults = han_defaults, .tiny = han_tiny,
    .build = han_build, .forward = han_forward, .destroy = han_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY),
    .reads = "hidden,max-len",
    .flag_names = "lstm",
};

ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_model_register(&han_kind); }
