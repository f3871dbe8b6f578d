/* transformer_classifier.c - a two-layer Transformer-encoder classifier from
 * models/layers.h: embedding + sinusoidal positions, 4-head masked
 * self-attention, residual + LayerNorm, FFN, masked mean pooling, a linear
 * classifier.  main() trains it with Adam (no decay on biases and
 * LayerNorm, warm-up then cosine per step) on the generated order task
 * (data/synth.c: which marker comes first, and how far apart - a bag of
 * words sits at 25%).  tests/test_transformer_classifier.c gradchecks it. */
#include "attngrad.h"
#include "../data/data.h"
#include "../models/layers.h"

#include <stdio.h>

enum { MAX_LAYERS = 4 };

typedef struct {
    int layers;
    ag_params ps;
    ag_tensor *embed, *w_out, *b_out;
    ag_encoder_layer layer[MAX_LAYERS];
} tfenc;

static void tfenc_build(tfenc *m, int vocab, int classes, int layers, const ag_encoder_config *cfg, ag_rng *rng) {
    *m = (tfenc){.layers = layers};
    m->embed = ag_param_embedding(&m->ps, "embed", vocab, cfg->d_model, 0.1, 0, rng);
    for (int l = 0; l < layers; l++) {
        char name[16];
        snprintf(name, sizeof name, "layer%d", l);
        ag_scope_push(name);
        m->layer[l] = ag_encoder_layer_new(&m->ps, cfg, rng);
        ag_scope_pop();
    }
    m->w_out = ag_param_glorot(&m->ps, "cls.weight", cfg->d_model, classes, rng);
    m->b_out = ag_param_bias(&m->ps, "cls.bias", classes);
}

/* tokens [B, N] (0 = padding), lengths [B] -> logits [B, classes]. */
static ag_tensor *tfenc_logits(const tfenc *m, const int32_t *tokens, const int32_t *lengths, int B, int N,
                               bool training, ag_rng *rng) {
    ag_tensor *h = ag_add_sinusoidal_positions(ag_embedding(m->embed, tokens, 2, (int[]){B, N}));
    for (int l = 0; l < m->layers; l++) /* padded keys masked by lengths */
        h = ag_encoder_layer_forward(&m->layer[l], h, lengths, NULL, training, rng);
    return ag_linear(ag_mean_over_time(h, lengths), m->w_out, m->b_out);
}

#ifndef TFENC_NO_MAIN
#define TRY(call)                                                                                                      \
    if ((call) != 0) return fprintf(stderr, "%s\n", err), 1

int main(void) {
    char err[256];
    ag_synth_opts so = ag_synth_opts_default(AG_SYNTH_ORDER);
    so.n = 3000;
    ag_dataset ds;
    ag_vocab *vocab;
    TRY(ag_synth(AG_SYNTH_ORDER, &so, &ds, err, sizeof err));
    TRY(ag_vocab_build(&ds, NULL, 0, &(ag_vocab_opts){.min_count = 1}, &vocab, err, sizeof err));
    TRY(ag_dataset_encode(&ds, vocab, err, sizeof err));
    int64_t idx[3000], n_train = 2400; /* the examples are drawn independently: the last 600 are the test set */
    for (int64_t i = 0; i < so.n; i++) idx[i] = i;
    ag_sampler train, test;
    ag_batch batch;
    TRY(ag_sampler_init(&train, &ds, idx, n_train, &(ag_sampler_opts){.batch_size = 32, .shuffle = 1}, err, sizeof err));
    TRY(ag_sampler_init(&test, &ds, idx + n_train, so.n - n_train, &(ag_sampler_opts){.batch_size = 100}, err, sizeof err));
    TRY(ag_batch_alloc(&batch, &ds, 100, &(ag_batch_opts){0}, err, sizeof err));

    ag_rng rng;
    ag_rng_seed(&rng, 1);
    ag_data_rng order;
    ag_data_rng_seed(&order, 1);
    tfenc m;
    ag_encoder_config cfg = {.d_model = 32, .heads = 4, .d_ff = 64, .keep = 0.9};
    tfenc_build(&m, ag_vocab_size(vocab), 4, 2, &cfg, &rng);
    ag_optimizer opt;
    ag_optim_init(&opt, &m.ps, &(ag_optim_config){.kind = AG_ADAMW, .lr = 3e-3, .weight_decay = 0.01, .beta1 = 0.9,
                                                   .beta2 = 0.98, .eps = 1e-8});
    ag_optim_set_weight_decay(&opt, ag_param_is_bias_or_norm, NULL, 0);
    int epochs = 12;
    ag_lr_steps sched = {.decay = AG_LR_COSINE, .warmup = 100, .total = (int)(epochs * train.n_batches)};
    for (int epoch = 1; epoch <= epochs; epoch++) {
        ag_sampler_epoch(&train, &order);
        double loss_sum = 0;
        for (int64_t i = 0; i < train.n_batches; i++) {
            int32_t rows;
            const int64_t *ix = ag_sampler_batch(&train, i, &rows);
            TRY(ag_batch_fill(&batch, &ds, ix, rows, err, sizeof err));
            ag_tensor *logits = tfenc_logits(&m, batch.tokens, batch.lengths, rows, batch.width, true, &rng);
            ag_tensor *loss = ag_cross_entropy(logits, batch.labels, -1);
            ag_params_zero_grad(&m.ps);
            ag_backward(loss);
            ag_lr_steps_apply(&sched, &opt, 3e-3);
            ag_optim_step(&opt);
            loss_sum += ag_item(loss);
            ag_step_end();
        }
        int correct = 0;
        for (int64_t i = 0; i < test.n_batches; i++) {
            int32_t rows;
            const int64_t *ix = ag_sampler_batch(&test, i, &rows);
            TRY(ag_batch_fill(&batch, &ds, ix, rows, err, sizeof err));
            ag_tensor *logits = tfenc_logits(&m, batch.tokens, batch.lengths, rows, batch.width, false, NULL);
            for (int r = 0; r < rows; r++) {
                int best = 0;
                for (int c = 1; c < 4; c++) best = logits->data[r * 4 + c] > logits->data[r * 4 + best] ? c : best;
                correct += best == batch.labels[r];
            }
            ag_step_end();
        }
        printf("epoch %2d  train loss %.4f  test accuracy %.1f%%\n", epoch, loss_sum / (double)train.n_batches,
               100.0 * correct / (double)(so.n - n_train));
    }
    ag_optim_free(&opt), ag_params_free(&m.ps), ag_batch_free(&batch), ag_sampler_free(&train);
    ag_sampler_free(&test), ag_vocab_free(vocab), ag_dataset_free(&ds), ag_shutdown();
    return 0;
}
#endif
