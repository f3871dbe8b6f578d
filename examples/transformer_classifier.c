/* transformer_classifier.c - a two-layer Transformer-encoder classifier from <attngrad/layers.h>: embedding +
 * sinusoidal positions, 4-head masked self-attention, residual + LayerNorm, FFN, masked mean pooling, a linear
 * classifier.  main() trains it with AdamW (no decay on biases and LayerNorm; warm-up, then cosine per step) on
 * the generated order task (data/synth.c: a bag of words sits at 25%), or on TREC given the data folder
 * (`transformer_classifier DATA`, DATA as tools/get-data.sh fills it: docs/data.md).
 * tests/test_transformer_classifier.c gradchecks it. */
#include "attngrad.h"
#include "attngrad/data.h"
#include "attngrad/layers.h"
#include <stdio.h>

typedef struct {
    int layers;
    ag_params ps;
    ag_tensor *embed, *w_out, *b_out;
    ag_encoder_layer layer[4];
} tfenc;

static void tfenc_build(tfenc *m, int vocab, int classes, int layers, const ag_encoder_config *cfg, ag_rng *rng) {
    *m = (tfenc){.layers = layers};
    m->embed = ag_param_embedding(&m->ps, "embed", vocab, cfg->d_model, 0.1, 0, rng);
    for (int l = 0; l < layers; l++) {
        ag_scope_push("layer%d", l);
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
/* The order task, or TREC's train and test files under data_dir. */
static int load(const char *data_dir, ag_dataset *tr, ag_dataset *te, int *classes, char *err) {
    if (!data_dir) {
        ag_synth_opts o = ag_synth_opts_default(AG_SYNTH_ORDER), o_test = o;
        o.n = 2400, o_test.n = 600, o_test.seed = 2, *classes = 4; /* test: other examples of the same task */
        return ag_synth(AG_SYNTH_ORDER, &o, tr, err, 256) || ag_synth(AG_SYNTH_ORDER, &o_test, te, err, 256);
    }
    const ag_benchmark *bm = ag_benchmark_find("trec");
    ag_load_opts lo = ag_load_opts_default();
    lo.lowercase = bm->lowercase, *classes = bm->n_classes;
    char train[1024], test[1024];
    snprintf(train, sizeof train, "%s/%s", data_dir, bm->train);
    snprintf(test, sizeof test, "%s/%s", data_dir, bm->test);
    return ag_dataset_load(train, bm->format, &lo, NULL, tr, err, 256) ||
           ag_dataset_load(test, bm->format, &lo, NULL, te, err, 256);
}
#define TRY(call) if ((call) != 0) return fprintf(stderr, "%s\n", err), 1

int main(int argc, char **argv) {
    char err[256];
    ag_dataset tr, te;
    ag_vocab *vocab;
    ag_sampler train, test; /* batches of tr, te */
    ag_batch batch;
    int classes, epochs = 12;
    TRY(load(argc > 1 ? argv[1] : NULL, &tr, &te, &classes, err));
    TRY(ag_vocab_build(&tr, NULL, 0, &(ag_vocab_opts){.min_count = 1}, &vocab, err, sizeof err));
    TRY(ag_dataset_encode(&tr, vocab, err, sizeof err) || ag_dataset_encode(&te, vocab, err, sizeof err));
    TRY(ag_sampler_init(&train, &tr, NULL, 0, &(ag_sampler_opts){.batch_size = 32, .shuffle = 1}, err, sizeof err));
    TRY(ag_sampler_init(&test, &te, NULL, 0, &(ag_sampler_opts){.batch_size = 100}, err, sizeof err));
    TRY(ag_batch_alloc(&batch, &tr, 100, &(ag_batch_opts){.max_width = 100, .max_len = 100}, err, sizeof err));
    ag_rng rng; /* initial values, dropout */
    ag_data_rng order; /* the epochs' shuffles */
    ag_rng_seed(&rng, 1), ag_data_rng_seed(&order, 1);
    tfenc m;
    ag_encoder_config cfg = {.d_model = 32, .heads = 4, .d_ff = 64, .keep = 0.9};
    tfenc_build(&m, ag_vocab_size(vocab), classes, 2, &cfg, &rng);
    ag_optimizer opt;
    ag_optim_init(&opt, &m.ps, &(ag_optim_config){.kind = AG_ADAMW, .lr = 3e-3, .weight_decay = 0.01, .beta1 = 0.9,
                                                   .beta2 = 0.98, .eps = 1e-8});
    ag_optim_set_weight_decay(&opt, ag_param_is_bias_or_norm, NULL, 0);
    ag_lr_steps sched = {.decay = AG_LR_COSINE, .warmup = 100, .total = (int)(epochs * train.n_batches)};
    for (int epoch = 1; epoch <= epochs; epoch++) {
        ag_sampler_epoch(&train, &order);
        double loss_sum = 0;
        for (int64_t i = 0; i < train.n_batches; i++) {
            int32_t rows;
            const int64_t *ix = ag_sampler_batch(&train, i, &rows);
            TRY(ag_batch_fill(&batch, &tr, ix, rows, err, sizeof err));
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
            TRY(ag_batch_fill(&batch, &te, ix, rows, err, sizeof err));
            ag_tensor *logits = tfenc_logits(&m, batch.tokens, batch.lengths, rows, batch.width, false, NULL);
            for (int r = 0; r < rows; r++) {
                const ag_real *row = logits->data + r * classes;
                int best = 0;
                for (int c = 1; c < classes; c++) best = row[c] > row[best] ? c : best;
                correct += best == batch.labels[r];
            }
            ag_step_end();
        }
        printf("epoch %2d  train loss %.4f  test accuracy %.1f%%\n", epoch, loss_sum / (double)train.n_batches,
               100.0 * correct / (double)te.n);
    }
    ag_optim_free(&opt), ag_params_free(&m.ps), ag_batch_free(&batch), ag_sampler_free(&train);
    ag_sampler_free(&test), ag_vocab_free(vocab), ag_dataset_free(&tr), ag_dataset_free(&te), ag_shutdown();
    return 0;
}
#endif
