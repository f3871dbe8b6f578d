/* disan.c - a DiSAN-like classifier (directional multi-dimensional self-attention, Shen et al. 2018) on the ops
 * for attention along any axis: embeddings, h = elu(x W_h + b_h), a forward and a backward DiSA block each
 * computing s_i = sum_j softmax_j(c tanh((W1 h_i + b + W2 h_j) / c) + M_ij) ⊙ h_j per feature with
 * ag_feature_attention (no [B,N,N,d] tensor) under the direction masks M^fw (j < i: a word reads the words
 * before it, as in the authors' code) and M^bw (j > i), a fusion gate u = F ⊙ h + (1 - F) ⊙ s, multi-dimensional
 * source2token pooling of [u_fw, u_bw], an ELU layer and the classifier.  main() trains it with Adam on the generated order task (data/synth.c: which marker comes first,
 * and how far apart - a bag of words sits at 25%) and writes heatmaps of one test sentence: each direction's
 * weights averaged over the features, and the pooling's weights per feature (disan [OUT_PREFIX]).
 * tests/test_disan.c gradchecks it and checks that it learns. */
#include "attngrad.h"
#include "attngrad/data.h"
#include "attngrad/layers.h"
#include "attngrad/train.h" /* ag_heatmap_svg, ag_host_values */
#include <stdio.h>

typedef struct {
    ag_tensor *w1, *b1, *w2, *wf1, *wf2, *bf; /* query and key projections, fusion gate */
    ag_mask_dir dir;
} disa;

typedef struct {
    int dim;
    ag_params ps;
    ag_tensor *embed, *wh, *bh, *pw1, *pb1, *pw2, *pb2, *wc, *bc, *wo, *bo;
    disa fw, bw;
} disan;

static disa disa_new(ag_params *ps, const char *scope, int d, ag_mask_dir dir, ag_rng *rng) {
    ag_scope_push("%s", scope);
    disa a = {.dir = dir};
    a.w1 = ag_param_glorot(ps, "w1", d, d, rng), a.b1 = ag_param_bias(ps, "b1", d);
    a.w2 = ag_param_glorot(ps, "w2", d, d, rng);
    a.wf1 = ag_param_glorot(ps, "wf1", d, d, rng), a.wf2 = ag_param_glorot(ps, "wf2", d, d, rng);
    a.bf = ag_param_bias(ps, "bf", d);
    ag_scope_pop();
    return a;
}

static void disan_build(disan *m, int vocab, int classes, int dim, ag_rng *rng) {
    *m = (disan){.dim = dim};
    ag_params *ps = &m->ps;
    m->embed = ag_param_embedding(ps, "embed.weight", vocab, dim, 0.3, 0, rng);
    m->wh = ag_param_glorot(ps, "fuse.w", dim, dim, rng), m->bh = ag_param_bias(ps, "fuse.b", dim);
    m->fw = disa_new(ps, "fw", dim, AG_MASK_PAST, rng); /* the paper's M^fw_ij = 0 for i < j, i the key (docs/layers.md) */
    m->bw = disa_new(ps, "bw", dim, AG_MASK_FUTURE, rng);
    m->pw1 = ag_param_glorot(ps, "pool.w1", 2 * dim, 2 * dim, rng), m->pb1 = ag_param_bias(ps, "pool.b1", 2 * dim);
    m->pw2 = ag_param_glorot(ps, "pool.w2", 2 * dim, 2 * dim, rng), m->pb2 = ag_param_bias(ps, "pool.b2", 2 * dim);
    m->wc = ag_param_glorot(ps, "hidden.w", 2 * dim, dim, rng), m->bc = ag_param_bias(ps, "hidden.b", dim);
    m->wo = ag_param_glorot(ps, "out.w", dim, classes, rng), m->bo = ag_param_bias(ps, "out.b", classes);
}

/* One direction: the feature-wise attention of h over itself, then the fusion gate.  weights (or NULL) receives
 * the attention weights [B,N,N,d]. */
static ag_tensor *disa_forward(const disa *a, ag_tensor *h, const int32_t *lengths, ag_tensor **weights) {
    int N = h->shape[1];
    ag_mask_spec spec = {.dir = a->dir};
    ag_tensor *q = ag_linear(h, a->w1, a->b1), *k = ag_linear(h, a->w2, NULL);
    ag_tensor *s = ag_feature_attention(q, k, h, ag_mask(&spec, N), lengths, 5.0, weights);
    ag_tensor *f = ag_sigmoid(ag_add(ag_linear(s, a->wf1, a->bf), ag_linear(h, a->wf2, NULL)));
    return ag_lerp(s, h, f); /* F ⊙ h + (1 - F) ⊙ s */
}

/* Attention weights of the last forward that asked for them (heatmaps). */
typedef struct { ag_tensor *fw, *bw, *pool; } disan_maps;

/* tokens [B, N] (0 = padding), lengths [B] -> logits [B, classes]. */
static ag_tensor *disan_logits(const disan *m, const int32_t *tokens, const int32_t *lengths, int B, int N,
                               disan_maps *maps) {
    ag_tensor *x = ag_embedding(m->embed, tokens, 2, (int[]){B, N});
    ag_tensor *h = ag_dense(x, m->wh, m->bh, AG_ACT_ELU);
    ag_tensor *u = ag_concat((ag_tensor *[]){disa_forward(&m->fw, h, lengths, maps ? &maps->fw : NULL),
                                             disa_forward(&m->bw, h, lengths, maps ? &maps->bw : NULL)}, 2, 2);
    ag_tensor *pooled = ag_source2token_weights(u, lengths, m->pw1, m->pb1, m->pw2, m->pb2, AG_ACT_ELU,
                                                maps ? &maps->pool : NULL);
    return ag_linear(ag_dense(pooled, m->wc, m->bc, AG_ACT_ELU), m->wo, m->bo);
}

static int argmax_row(const ag_real *row, int n) {
    int best = 0;
    for (int c = 1; c < n; c++) best = row[c] > row[best] ? c : best;
    return best;
}

#define TRY(call) if ((call) != 0) return fprintf(stderr, "%s\n", err), -1

/* Trains on n_train examples of the order task for `epochs` and returns the test accuracy (-1 on an error);
 * *first and *last receive the mean training loss of the first and last epoch.  heatmaps (or NULL): the prefix of
 * the SVG files drawn for the first test sentence. */
static double disan_run(int n_train, int epochs, int dim, bool verbose, double *first, double *last,
                        const char *heatmaps) {
    char err[256];
    ag_dataset tr, te;
    ag_vocab *vocab;
    ag_sampler train, test;
    ag_batch batch;
    ag_synth_opts o = ag_synth_opts_default(AG_SYNTH_ORDER), o_test = o;
    o.n = n_train, o.max_len = o_test.max_len = 12, o_test.n = 400, o_test.seed = 2; /* other sentences */
    TRY(ag_synth(AG_SYNTH_ORDER, &o, &tr, err, sizeof err) || ag_synth(AG_SYNTH_ORDER, &o_test, &te, err, sizeof err));
    TRY(ag_vocab_build(&tr, NULL, 0, &(ag_vocab_opts){.min_count = 1}, &vocab, err, sizeof err));
    TRY(ag_dataset_encode(&tr, vocab, err, sizeof err) || ag_dataset_encode(&te, vocab, err, sizeof err));
    TRY(ag_sampler_init(&train, &tr, NULL, 0, &(ag_sampler_opts){.batch_size = 32, .shuffle = 1}, err, sizeof err));
    TRY(ag_sampler_init(&test, &te, NULL, 0, &(ag_sampler_opts){.batch_size = 100}, err, sizeof err));
    TRY(ag_batch_alloc(&batch, &tr, 100, &(ag_batch_opts){0}, err, sizeof err));
    ag_rng rng;
    ag_data_rng order;
    ag_rng_seed(&rng, 1), ag_data_rng_seed(&order, 1);
    disan m;
    disan_build(&m, ag_vocab_size(vocab), 4, dim, &rng);
    ag_optimizer opt;
    ag_optim_init(&opt, &m.ps, &(ag_optim_config){.kind = AG_ADAM, .lr = 3e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8});
    for (int epoch = 1; epoch <= epochs; epoch++) {
        ag_sampler_epoch(&train, &order);
        double loss_sum = 0;
        for (int64_t i = 0; i < train.n_batches; i++) {
            int32_t rows;
            const int64_t *ix = ag_sampler_batch(&train, i, &rows);
            TRY(ag_batch_fill(&batch, &tr, ix, rows, err, sizeof err));
            ag_tensor *loss =
                ag_cross_entropy(disan_logits(&m, batch.tokens, batch.lengths, rows, batch.width, NULL), batch.labels, -1);
            ag_params_zero_grad(&m.ps);
            ag_backward(loss);
            ag_optim_step(&opt);
            loss_sum += ag_item(loss);
            ag_step_end();
        }
        double mean = loss_sum / (double)train.n_batches;
        if (epoch == 1) *first = mean;
        *last = mean;
        if (verbose) printf("epoch %2d  train loss %.4f\n", epoch, mean);
    }
    int correct = 0;
    for (int64_t i = 0; i < test.n_batches; i++) {
        int32_t rows;
        const int64_t *ix = ag_sampler_batch(&test, i, &rows);
        TRY(ag_batch_fill(&batch, &te, ix, rows, err, sizeof err));
        ag_tensor *logits = disan_logits(&m, batch.tokens, batch.lengths, rows, batch.width, NULL);
        for (int r = 0; r < rows; r++) correct += argmax_row(logits->data + r * 4, 4) == batch.labels[r];
        ag_step_end();
    }
    if (heatmaps) { /* one sentence, no padding: the maps are [1,n,n] and [n, 2d] */
        disan_maps maps;
        TRY(ag_batch_fill(&batch, &te, (const int64_t[]){0}, 1, err, sizeof err));
        int n = batch.lengths[0];
        const char *words[64];
        for (int t = 0; t < n && t < 64; t++) words[t] = ag_dataset_word(&te, 0, 0, t);
        disan_logits(&m, batch.tokens, batch.lengths, 1, batch.width, &maps);
        char path[512];
        const struct { const char *name; ag_tensor *w; } dirs[2] = {{"fw", maps.fw}, {"bw", maps.bw}};
        for (int i = 0; i < 2; i++) { /* rows: query word, columns: the word it attends to */
            snprintf(path, sizeof path, "%s-%s.svg", heatmaps, dirs[i].name);
            ag_tensor *mean = ag_feature_map(dirs[i].w, AG_FEATURE_MEAN);
            TRY(ag_heatmap_svg(path, dirs[i].name, ag_host_values(mean), n, n, words, words));
        }
        snprintf(path, sizeof path, "%s-pool.svg", heatmaps); /* rows: features, columns: words */
        ag_tensor *per_feature = ag_transpose(ag_reshape(maps.pool, 2, (int[]){n, 2 * dim}), 0, 1);
        TRY(ag_heatmap_svg(path, "source2token, per feature", ag_host_values(per_feature), 2 * dim, n, NULL, words));
        ag_step_end();
        if (verbose) printf("heatmaps: %s-fw.svg, %s-bw.svg, %s-pool.svg\n", heatmaps, heatmaps, heatmaps);
    }
    double accuracy = correct / (double)te.n;
    ag_optim_free(&opt), ag_params_free(&m.ps), ag_batch_free(&batch), ag_sampler_free(&train);
    ag_sampler_free(&test), ag_vocab_free(vocab), ag_dataset_free(&tr), ag_dataset_free(&te);
    return accuracy;
}

#ifndef DISAN_NO_MAIN
int main(int argc, char **argv) {
    double first, last, acc = disan_run(2400, 10, 32, true, &first, &last, argc > 1 ? argv[1] : NULL);
    if (acc < 0) return 1;
    printf("test accuracy %.1f%% (a bag of words: 25%%)\n", 100 * acc);
    ag_shutdown();
    return 0;
}
#endif
