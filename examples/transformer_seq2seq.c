/* transformer_seq2seq.c - Vaswani et al. 2017, "Attention Is All You Need" (NeurIPS 2017): the Transformer's
 * encoder-decoder, from <attngrad/layers.h>:
 *   encoder  x = dropout(E[src] sqrt(d) + PE), then ag_encoder_layer's (self-attention over the valid source words)
 *   decoder  y = dropout(E[tgt_in] sqrt(d) + PE), then ag_decoder_layer's (causal self-attention, cross-attention
 *            over the encoder's output, the FFN; post-LN, as the paper)
 *   output   logits = y E^T: one table for both embeddings and the pre-softmax projection (section 3.4)
 * main() trains it with Adam (beta2 0.98, eps 1e-9) under the paper's rate (a warm-up, then 1/sqrt(step)) and
 * label smoothing 0.1, on the task examples/seq2seq_attention.c learns (reversing digit sequences of lengths 1-10),
 * decodes the test set greedily, and draws one sentence's cross-attention.  Generation a word at a time keeps
 * each decoder layer's keys and values (ag_kv_cache, ag_decoder_layer_forward_cached): decode_cached.
 * tests/test_transformer_seq2seq.c gradchecks it (f64), checks the cached decoder against the full one, and that
 * it learns. */
#include "attngrad.h"
#include "attngrad/layers.h"
#include "reversal.h"

#include <math.h>
#include <stdio.h>

enum { MAX_LAYERS = 6 };

typedef struct {
    int layers;
    double keep; /* on the embeddings (the layers keep their own, cfg.keep) */
    ag_encoder_config cfg;
    ag_params ps;
    ag_tensor *embed; /* [VOCAB, d]: source, target and output */
    ag_encoder_layer enc[MAX_LAYERS];
    ag_decoder_layer dec[MAX_LAYERS];
} tseq;

static void tseq_build(tseq *m, const ag_encoder_config *cfg, int layers, ag_rng *rng) {
    *m = (tseq){.layers = layers, .keep = cfg->keep ? cfg->keep : 1, .cfg = *cfg};
    m->embed = ag_param_uniform(&m->ps, "embed", 2, (int[]){VOCAB, cfg->d_model}, 1 / sqrt(cfg->d_model), rng);
    for (int l = 0; l < layers; l++) {
        ag_scope_push("enc%d", l);
        m->enc[l] = ag_encoder_layer_new(&m->ps, cfg, rng);
        ag_scope_pop();
    }
    for (int l = 0; l < layers; l++) {
        ag_scope_push("dec%d", l);
        m->dec[l] = ag_decoder_layer_new(&m->ps, cfg, rng);
        ag_scope_pop();
    }
}

/* E[ids] sqrt(d) + the sinusoids of positions at..at+N-1, through dropout; ids [B, N]. */
static ag_tensor *embed(const tseq *m, const int32_t *ids, int B, int N, int at, bool training, ag_rng *rng) {
    int d = m->cfg.d_model;
    ag_tensor *pe = ag_slice(ag_sinusoidal_positions(at + N, d), 0, at, at + N);
    ag_tensor *x = ag_add(ag_mul_scalar(ag_embedding(m->embed, ids, 2, (int[]){B, N}), sqrt(d)), pe);
    return ag_dropout(x, m->keep, training, rng);
}

/* The encoder's output, the decoder's memory [B, Ns, d]. */
static ag_tensor *tseq_encode(const tseq *m, const int32_t *src, const int32_t *src_len, int B, int Ns, bool training,
                              ag_rng *rng) {
    ag_tensor *x = embed(m, src, B, Ns, 0, training, rng);
    for (int l = 0; l < m->layers; l++) x = ag_encoder_layer_forward(&m->enc[l], x, src_len, NULL, training, rng);
    return x;
}

/* Logits [B, Nt, V] of every target position, fed tgt_in [B, Nt]; *cross (if not NULL) receives the last layer's
 * cross-attention [B, h, Nt, Ns]. */
static ag_tensor *tseq_decode(const tseq *m, ag_tensor *memory, const int32_t *src_len, const int32_t *tgt_in, int B,
                              int Nt, bool training, ag_rng *rng, ag_tensor **cross) {
    ag_tensor *y = embed(m, tgt_in, B, Nt, 0, training, rng);
    for (int l = 0; l < m->layers; l++)
        y = ag_decoder_layer_forward_probs(&m->dec[l], y, memory, src_len, training, rng,
                                           l == m->layers - 1 ? cross : NULL);
    return ag_linear_t(y, m->embed, NULL);
}

/* The training loss: label-smoothed cross-entropy over the target positions that count (labels -1 do not). */
static ag_tensor *tseq_loss(const tseq *m, const reversal *d, int k0, int B, double smoothing, bool training,
                            ag_rng *rng) {
    ag_tensor *memory = tseq_encode(m, d->src + k0 * d->Ns, d->len + k0, B, d->Ns, training, rng);
    ag_tensor *logits = tseq_decode(m, memory, d->len + k0, d->tgt_in + k0 * d->Nt, B, d->Nt, training, rng, NULL);
    return ag_cross_entropy_smoothed(logits, d->labels + k0 * d->Nt, -1, smoothing);
}

#ifndef TSEQ_NO_MAIN
/* Greedy decoding of rows [k0, k0 + B) of d (B <= 256), each step the decoder over the prefix so far; how many
 * come out exactly right (their target, then EOS).  *align, when not NULL, receives row k0's cross-attention
 * [Nt, Ns] (the last layer's, averaged over heads) as decoded. */
static int greedy_correct(const tseq *m, const reversal *d, int k0, int B, double *align) {
    bool grad = ag_set_grad_enabled(false);
    int Nt = d->Nt, h = m->cfg.heads;
    ag_tensor *memory = tseq_encode(m, d->src + k0 * d->Ns, d->len + k0, B, d->Ns, false, NULL);
    int32_t prefix[256 * 16], ok[256];
    for (int b = 0; b < B; b++) prefix[b * Nt] = BOS, ok[b] = 1;
    for (int t = 0; t < Nt; t++) {
        int32_t in[256 * 16]; /* [B, t + 1] */
        for (int b = 0; b < B; b++)
            for (int j = 0; j <= t; j++) in[b * (t + 1) + j] = prefix[b * Nt + j];
        ag_tensor *cross, *logits = tseq_decode(m, memory, d->len + k0, in, B, t + 1, false, NULL, &cross);
        for (int b = 0; b < B; b++) {
            int next = reversal_pick(d, k0 + b, t, logits->data + ((int64_t)b * (t + 1) + t) * VOCAB, &ok[b]);
            if (t + 1 < Nt) prefix[b * Nt + t + 1] = next;
        }
        for (int j = 0; align && j < d->Ns; j++) { /* row t of example 0, over the heads */
            align[t * d->Ns + j] = 0;
            for (int i = 0; i < h; i++) align[t * d->Ns + j] += cross->data[((int64_t)i * (t + 1) + t) * d->Ns + j] / h;
        }
    }
    int correct = 0;
    for (int b = 0; b < B; b++) correct += ok[b];
    ag_step_end();
    ag_set_grad_enabled(grad);
    return correct;
}

#endif

/* Row k of d decoded greedily a word at a time, each decoder layer keeping its keys and values (ag_kv_cache), into
 * out [Nt] (the words it chose); the logits of each step into logits [Nt, VOCAB] when not NULL.  AG_ERR_NOMEM
 * (ag_errmsg says why) where the device has no room for the caches. */
static ag_status decode_cached(const tseq *m, const reversal *d, int k, int32_t *out, ag_real *logits) {
    ag_kv_cache cache[MAX_LAYERS];
    for (int l = 0; l < m->layers; l++)
        if (ag_kv_cache_init(&cache[l], &m->dec[l].self.attn, d->Nt, m->embed->device) != AG_OK) {
            while (l--) ag_kv_cache_free(&cache[l]);
            return AG_ERR_NOMEM;
        }
    bool grad = ag_set_grad_enabled(false);
    ag_tensor *memory = tseq_encode(m, d->src + k * d->Ns, d->len + k, 1, d->Ns, false, NULL);
    int32_t word = BOS;
    for (int t = 0; t < d->Nt; t++) {
        ag_tensor *y = embed(m, &word, 1, 1, t, false, NULL);
        for (int l = 0; l < m->layers; l++) y = ag_decoder_layer_forward_cached(&m->dec[l], y, memory, d->len + k, &cache[l]);
        ag_tensor *z = ag_linear_t(y, m->embed, NULL); /* [1, 1, V] */
        int32_t ok = 1;
        word = out[t] = reversal_pick(d, k, t, z->data, &ok);
        for (int v = 0; logits && v < VOCAB; v++) logits[t * VOCAB + v] = z->data[v];
    }
    for (int l = 0; l < m->layers; l++) ag_kv_cache_free(&cache[l]);
    ag_step_end();
    ag_set_grad_enabled(grad);
    return AG_OK;
}

#ifndef TSEQ_NO_MAIN
int main(void) {
    enum { BATCH = 32, STEPS = 2000, EVERY = 250 };
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    reversal train = reversal_make(4000, 10, &rng), test = reversal_make(500, 10, &rng);
    tseq m;
    tseq_build(&m, &(ag_encoder_config){.d_model = 32, .heads = 4, .d_ff = 64, .keep = 0.9}, 2, &rng);
    ag_optimizer opt;
    ag_optim_config cfg = ag_optim_defaults(AG_ADAM);
    cfg.beta2 = 0.98, cfg.eps = 1e-9;
    ag_optim_init(&opt, &m.ps, &cfg);
    ag_lr_steps rate = {.decay = AG_LR_INV_SQRT, .warmup = 200}; /* the paper's shape: t / warmup, then 1/sqrt(t) */
    double loss_sum = 0;
    for (int step = 1; step <= STEPS; step++) {
        ag_tensor *loss = tseq_loss(&m, &train, (step - 1) * BATCH % (train.n - BATCH), BATCH, 0.1, true, &rng);
        ag_params_zero_grad(&m.ps);
        ag_backward(loss);
        ag_lr_steps_apply(&rate, &opt, 2e-3);
        ag_optim_step(&opt);
        loss_sum += ag_item(loss);
        ag_step_end();
        if (step % EVERY == 0) {
            int correct = 0;
            for (int k0 = 0; k0 + 100 <= test.n; k0 += 100) correct += greedy_correct(&m, &test, k0, 100, NULL);
            printf("step %4d  train loss %.4f  test exact match %.1f%%\n", step, loss_sum / EVERY, 100.0 * correct / test.n);
            loss_sum = 0;
        }
    }
    int32_t words[16];
    if (decode_cached(&m, &test, 0, words, NULL) != AG_OK) return fprintf(stderr, "%s\n", ag_errmsg()), 1;
    printf("\ntest sequence 0 decoded a word at a time from the layers' key-value caches: ");
    for (int t = 0; t < test.Nt && words[t] != EOS; t++) putchar('0' + words[t] - DIGIT0);
    double align[11 * 10];
    greedy_correct(&m, &test, 0, 1, align);
    reversal_print_alignment(&test, align);
    ag_optim_free(&opt), ag_params_free(&m.ps), reversal_free(&train), reversal_free(&test), ag_shutdown();
    return 0;
}
#endif
