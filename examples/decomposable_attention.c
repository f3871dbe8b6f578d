/* decomposable_attention.c - Parikh et al. 2016, "A Decomposable Attention Model for Natural Language Inference"
 * (EMNLP 2016), the vanilla version (no intra-sentence attention), as a plugin model for the sentence-pair task of
 * the attngrad programs (--task pair: SICK entailment, or the generated span / reversed-span pairs):
 *   embeddings a [B,Na,d] (tokens, lengths), b [B,Nb,d] (tokens_b, lengths_b), each sentence at its own width;
 *   Attend:    e_ij = F(a_i) . F(b_j) [B,Na,Nb], F a two-layer ReLU net;
 *              beta_i  = sum_j softmax_j(e_ij) b_j over the valid j, alpha_j = sum_i softmax_i(e_ij) a_i over
 *              the valid i (ag_soft_align_scores, each sentence's lengths);
 *   Compare:   v1_i = G([a_i ; beta_i]), v2_j = G([b_j ; alpha_j]), G a two-layer ReLU net (shared);
 *   Aggregate: v = [sum_{valid i} v1_i ; sum_{valid j} v2_j], logits = ReLU(drop(v) W_h + b_h) W_out + b_out.
 * Dropout (keep) on the input of every layer of F, G and H, as the paper.  Sizes: --dim (d), --hidden (F's, G's and
 * H's width).  The defaults are the paper's (d 300, hidden 200, keep 0.8, Adagrad lr 0.05, batch 4), without its
 * projection of the GloVe vectors (give --dim 200 for its width).
 *
 *   ninja -C build examples/decomposable_attention.so examples/decomposable_attention-f64.so
 *   P=build/examples/decomposable_attention.so
 *   build/tools/attngrad --plugin $P gradcheck --model dam --batch 4 --len 6   # f64 (loads ...-f64.so)
 *   build/tools/attngrad --plugin $P train --model dam --optim adam:lr=3e-3 --batch 32 --max-steps 300 --out runs/dam
 *   build/tools/attngrad --plugin $P train --model dam --data DATA/sick --out runs/dam-sick   # SICK entailment
 *   build/tools/attngrad --plugin $P heatmap --ckpt runs/dam/best.safetensors --sentence "w1 w2 w3" \
 *       --sentence-b "w2 w3" --out maps/
 * The heatmap "attend" is softmax_j(e_ij), [B,Na,Nb] (AG_MAP_CROSS): a row per word of sentence a, its
 * distribution over sentence b's words.  (cc -shared -fPIC -O2 -std=c11 -I include examples/decomposable_attention.c
 * -o dam.so, and again with -DAG_REAL_DOUBLE -o dam-f64.so, builds it outside meson.)  Its task is the pair task,
 * the only one it has a head for.  The model sees no word order, so on the generated pairs (span vs reversed span)
 * 2/3 accuracy is its ceiling.  tests/test_decomposable_attention.sh gradchecks it on padded pair batches (the
 * second sentence of its own lengths and width) and checks that a few training steps lower the loss;
 * test_decomposable_attention_pairs.c gradchecks it on pairs where b is wider than a, and narrower. */
#include "attngrad/model.h"
#include <stdio.h>
#include <stdlib.h>

enum { F1, F2, G1, G2, H1, OUT, N_LAYERS };
static const char *const layer_names[N_LAYERS] = {"attend.f1", "attend.f2", "compare.g1", "compare.g2",
                                                  "aggregate.h", "out"};

typedef struct {
    ag_tensor *embed, *w[N_LAYERS], *b[N_LAYERS];
} dam;

static void dam_defaults(ag_model_config *c) { /* the paper's SNLI settings */
    c->dim = 300, c->hidden = 200, c->keep = 0.8, c->batch = 4, c->optim = "adagrad:lr=0.05";
}

/* Biases from U(-0.1, 0.1): with zero ones a position whose ReLU layer is all 0 puts the next layer on its kink. */
static void dam_tiny(ag_model_config *c) { c->dim = 4, c->hidden = 3, c->keep = 1, c->bias_init = 0.1; }

static ag_status dam_build(ag_model *m) {
    const ag_model_config *c = &m->cfg;
    int d = c->dim, h = c->hidden;
    if (d < 1 || h < 1) return ag_fail(AG_ERR_ARG, "dam: dim and hidden must be >= 1");
    dam *p = calloc(1, sizeof *p);
    if (!p) return ag_fail(AG_ERR_NOMEM, "dam: out of memory");
    m->impl = p;
    const int in[N_LAYERS] = {d, h, 2 * d, h, 2 * h, h}, out[N_LAYERS] = {h, h, h, h, h, c->classes};
    p->embed = ag_param_embedding(&m->params, "embed.weight", c->vocab, d, 0.1, AG_PAD_ID, &m->rng);
    for (int l = 0; l < N_LAYERS; l++) {
        char name[48];
        snprintf(name, sizeof name, "%s.weight", layer_names[l]);
        p->w[l] = ag_param_glorot(&m->params, name, in[l], out[l], &m->rng);
        snprintf(name, sizeof name, "%s.bias", layer_names[l]);
        p->b[l] = c->bias_init > 0 ? ag_param_uniform(&m->params, name, 1, &out[l], c->bias_init, &m->rng)
                                   : ag_param_bias(&m->params, name, out[l]);
    }
    return AG_OK;
}

/* Layer l of the model on drop(x): ReLU, the output layer linear. */
static ag_tensor *layer(ag_model *m, int l, ag_tensor *x, bool training) {
    dam *p = m->impl;
    x = ag_model_dropout(m, x, training);
    return ag_dense(x, p->w[l], p->b[l], l == OUT ? AG_ACT_NONE : AG_ACT_RELU);
}

static ag_tensor *two_layers(ag_model *m, int l, ag_tensor *x, bool training) {
    return layer(m, l + 1, layer(m, l, x, training), training);
}

static ag_tensor *dam_forward(ag_model *m, const ag_batch *bt, bool training) {
    dam *p = m->impl;
    int B = bt->rows, Na = bt->width, Nb = bt->width_b;
    ag_tensor *a = ag_embedding(p->embed, bt->tokens, 2, (int[]){B, Na});   /* [B,Na,d] */
    ag_tensor *b = ag_embedding(p->embed, bt->tokens_b, 2, (int[]){B, Nb}); /* [B,Nb,d] */
    /* Attend */
    ag_tensor *e = ag_matmul_t(two_layers(m, F1, a, training), false, two_layers(m, F1, b, training), true);
    ag_tensor *beta, *alpha, *attend; /* [B,Na,d], [B,Nb,d], softmax_j(e_ij) [B,Na,Nb] */
    ag_soft_align_scores(e, a, b, bt->lengths, bt->lengths_b, &beta, &alpha, &attend);
    if (m->capture_maps) /* a's words as rows, each a distribution over b's words */
        ag_model_capture_axes(m, "attend", attend, AG_MAP_CROSS);
    /* Compare */
    ag_tensor *v1 = two_layers(m, G1, ag_concat((ag_tensor *[]){a, beta}, 2, 2), training);  /* [B,Na,h] */
    ag_tensor *v2 = two_layers(m, G1, ag_concat((ag_tensor *[]){b, alpha}, 2, 2), training); /* [B,Nb,h] */
    /* Aggregate: sums over the valid positions */
    ag_tensor *s1 = ag_sum_axis(ag_zero_padding(v1, bt->lengths), 1, false);
    ag_tensor *s2 = ag_sum_axis(ag_zero_padding(v2, bt->lengths_b), 1, false);
    return layer(m, OUT, layer(m, H1, ag_concat((ag_tensor *[]){s1, s2}, 2, 1), training), training);
}

static void dam_destroy(ag_model *m) { free(m->impl); }

static const ag_model_kind dam_kind = {
    .abi = AG_MODEL_ABI,
    .name = "dam",
    .defaults = dam_defaults, .tiny = dam_tiny,
    .build = dam_build, .forward = dam_forward, .destroy = dam_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_PAIR),
    .reads = "hidden,max-len",
};

ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_model_register(&dam_kind); }
