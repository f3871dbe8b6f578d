/* esim.c - Chen et al. 2017, "Enhanced LSTM for Natural Language Inference" (ACL 2017), ESIM without the tree-LSTM
 * variant, as a plugin model for the sentence-pair task of the attngrad programs (--task pair: SICK entailment, or
 * the generated span / reversed-span pairs).  Each sentence at its own width and lengths (tokens, lengths; tokens_b,
 * lengths_b); every layer is shared by the two sentences:
 *   Input encoding:   a = BiLSTM(E a) [B,Na,2h], b = BiLSTM(E b) [B,Nb,2h] (ag_bilstm, 0 at padding);
 *   Local inference:  e_ij = a_i . b_j [B,Na,Nb]; a~_i = sum_j softmax_j(e_ij) b_j over b's valid words,
 *                     b~_j = sum_i softmax_i(e_ij) a_i over a's (ag_soft_align, each sentence's lengths);
 *                     m_a = [a; a~; a - a~; a * a~] [B,Na,8h], m_b likewise;
 *   Composition:      v_a = BiLSTM(ReLU(m_a W_F + b_F)) [B,Na,2h] (F: 8h -> h), v_b likewise;
 *   Pooling:          v = [mean_a; max_a; mean_b; max_b] over each sentence's valid words [B,8h];
 *   Classifier:       logits = tanh(drop(v) W_1 + b_1) W_2 + b_2 (one hidden layer of h).
 * Dropout (keep) on the word vectors, on F's input and on both classifier layers' inputs: the paper's "dropout on
 * all feedforward connections".  Sizes: --dim (word vectors), --hidden (h: each LSTM direction, F and the MLP).
 * Defaults, the paper's (SNLI): d 300, h 300, keep 0.5, Adam lr 4e-4, batch 32; gradient-norm clip 10 is the
 * authors' code's, and so are the LSTMs' recurrent weights, orthogonal per gate (ag_init_orthogonal_chunks).
 * Differences: the LSTMs' input weights and biases from U(-1/sqrt(h), 1/sqrt(h)) (nn.LSTM's), not N(0, 0.01^2) and
 * 0; the word table's words missing from --embeddings from U(-0.05, 0.05), not N(0, 1); no tree-LSTM (HIM) variant.
 *
 *   ninja -C build examples/esim.so examples/esim-f64.so
 *   P=build/examples/esim.so
 *   build/tools/attngrad --plugin $P gradcheck --model esim --task pair --batch 4 --len 6   # f64 (loads ...-f64.so)
 *   build/tools/attngrad --plugin $P train --model esim --task pair --dim 32 --hidden 32 --keep 1 --out runs/esim
 *   build/tools/attngrad --plugin $P train --model esim --data DATA/sick \
 *       --embeddings DATA/glove/glove.6B.50d.datasets.txt --out runs/esim-sick   # SICK entailment
 *   build/tools/attngrad --plugin $P heatmap --ckpt runs/esim/best.safetensors --sentence "w1 w2 w3" \
 *       --sentence-b "w2 w3" --out maps/
 * The heatmap "align" is softmax_j(e_ij) [B,Na,Nb] (AG_MAP_CROSS): a row per word of a over b's words.  On the
 * generated pairs word order decides, so it reaches 95% dev accuracy where decomposable attention stops at 2/3; on
 * SICK with 50d vectors the paper's keep 0.5 underfits in 10 epochs (docs/results.md, a smoke run).
 * tests/test_esim.sh gradchecks it through the CLI and trains it; tests/test_esim_pairs.c gradchecks it on pairs
 * with a length-1 sentence on either side, b narrower and wider than a, and checks padding invariance. */
#include "attngrad/model.h"
#include <math.h>
#include <stdlib.h>

typedef struct {
    ag_tensor *embed, *proj_w, *proj_b, *mlp_w, *mlp_b, *out_w, *out_b;
    ag_bilstm_layer enc, comp;
} esim;

static void esim_defaults(ag_model_config *c) { /* the paper's SNLI settings */
    c->dim = 300, c->hidden = 300, c->keep = 0.5, c->batch = 32, c->clip = 10, c->optim = "adam:lr=4e-4";
}

/* F's bias stays 0: no row of m is 0 (a padded row holds a~), so no ReLU sits on its kink, and a bias drawn
 * negative could leave all 3 of F's units dead at the tiny sizes (every gradient before F then 0). */
static void esim_tiny(ag_model_config *c) { c->dim = 4, c->hidden = 3, c->keep = 1; }

/* The recurrent weights w_hh [h, 4h], each gate's [h, h] orthogonal: the authors' ortho_weight per gate. */
static void orthogonal_gates(ag_bilstm_layer *l, ag_rng *rng) {
    ag_init_orthogonal_chunks(l->fw.w_hh, 4, 1.0, rng);
    ag_init_orthogonal_chunks(l->bw.w_hh, 4, 1.0, rng);
}

static ag_status esim_build(ag_model *m) {
    const ag_model_config *c = &m->cfg;
    int d = c->dim, h = c->hidden;
    if (d < 1 || h < 1) return ag_fail(AG_ERR_ARG, "esim: dim and hidden must be >= 1");
    esim *p = calloc(1, sizeof *p);
    if (!p) return ag_fail(AG_ERR_NOMEM, "esim: out of memory");
    m->impl = p;
    ag_params *ps = &m->params;
    double lb = 1 / sqrt(h);
    p->embed = ag_param_embedding(ps, "embed.weight", c->vocab, d, 0.1, AG_PAD_ID, &m->rng);
    p->enc = ag_param_bilstm(ps, "encode", d, h, lb, &m->rng); /* encode.fw.*, encode.bw.* */
    orthogonal_gates(&p->enc, &m->rng);
    p->proj_w = ag_param_glorot(ps, "project.weight", 8 * h, h, &m->rng);
    p->proj_b = c->bias_init > 0 ? ag_param_uniform(ps, "project.bias", 1, &h, c->bias_init, &m->rng)
                                 : ag_param_bias(ps, "project.bias", h);
    p->comp = ag_param_bilstm(ps, "compose", h, h, lb, &m->rng);
    orthogonal_gates(&p->comp, &m->rng);
    p->mlp_w = ag_param_glorot(ps, "mlp.weight", 8 * h, h, &m->rng);
    p->mlp_b = ag_param_bias(ps, "mlp.bias", h);
    p->out_w = ag_param_glorot(ps, "out.weight", h, c->classes, &m->rng);
    p->out_b = ag_param_bias(ps, "out.bias", c->classes);
    return AG_OK;
}

/* One side's enhancement, projection, composition and pooling: [mean; max] [B,4h]. */
static ag_tensor *compose(ag_model *m, ag_tensor *x, ag_tensor *xt, const int32_t *len, bool training) {
    esim *p = m->impl;
    ag_tensor *mx = ag_concat((ag_tensor *[]){x, xt, ag_sub(x, xt), ag_mul(x, xt)}, 4, 2); /* [B,N,8h] */
    ag_tensor *f = ag_dense(ag_model_dropout(m, mx, training), p->proj_w, p->proj_b, AG_ACT_RELU);   /* [B,N,h] */
    ag_tensor *v = ag_bilstm(f, &p->comp, len);                                          /* [B,N,2h] */
    return ag_concat((ag_tensor *[]){ag_mean_over_time(v, len), ag_max_over_time(v, len)}, 2, 1);
}

static ag_tensor *esim_forward(ag_model *m, const ag_batch *bt, bool training) {
    esim *p = m->impl;
    int B = bt->rows, Na = bt->width, Nb = bt->width_b;
    ag_tensor *ea = ag_model_dropout(m, ag_embedding(p->embed, bt->tokens, 2, (int[]){B, Na}), training);
    ag_tensor *eb = ag_model_dropout(m, ag_embedding(p->embed, bt->tokens_b, 2, (int[]){B, Nb}), training);
    ag_tensor *a = ag_bilstm(ea, &p->enc, bt->lengths);   /* [B,Na,2h] */
    ag_tensor *b = ag_bilstm(eb, &p->enc, bt->lengths_b); /* [B,Nb,2h] */
    ag_tensor *at, *bt_, *align; /* local inference: a~ [B,Na,2h], b~ [B,Nb,2h], softmax_j(e_ij) [B,Na,Nb] */
    ag_soft_align(a, b, bt->lengths, bt->lengths_b, &at, &bt_, &align);
    if (m->capture_maps) ag_model_capture_axes(m, "align", align, AG_MAP_CROSS);
    ag_tensor *v = ag_concat((ag_tensor *[]){compose(m, a, at, bt->lengths, training),
                                             compose(m, b, bt_, bt->lengths_b, training)}, 2, 1); /* [B,8h] */
    ag_tensor *hid = ag_dense(ag_model_dropout(m, v, training), p->mlp_w, p->mlp_b, AG_ACT_TANH);
    return ag_linear(ag_model_dropout(m, hid, training), p->out_w, p->out_b);
}

static void esim_destroy(ag_model *m) { free(m->impl); }

static const ag_model_kind esim_kind = {
    .abi = AG_MODEL_ABI,
    .name = "esim",
    .defaults = esim_defaults, .tiny = esim_tiny,
    .build = esim_build, .forward = esim_forward, .destroy = esim_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_PAIR),
    .reads = "hidden,max-len",
};

ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_model_register(&esim_kind); }
