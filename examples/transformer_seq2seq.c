/* transformer_seq2seq.c - Vaswani et al. 2017, "Attention Is All You Need" (NeurIPS 2017): the Transformer's
 * encoder-decoder, from <attngrad/layers.h>:
 *   encoder  x = dropout(E[src] sqrt(d) + PE), then ag_encoder_layer's (self-attention over the valid source words)
 *   decoder  y = dropout(E[tgt_in] sqrt(d) + PE), then ag_decoder_layer's (causal self-attention, cross-attention
 *            over the encoder's output, the FFN; post-LN, as the paper)
 *   output   logits = y E^T: one table for both embeddings and the pre-softmax projection (section 3.4)
 * main() trains it with Adam (beta2 0.98, eps 1e-9) under the paper's rate (a warm-up, then 1/sqrt(step)) and
 * label smoothing 0.1, on the task examples/seq2seq_attention.c learns (reversing digit sequences of lengths 1-10),
 * decodes the test set greedily, 100 sequences a word at a time from the decoder layers' key-value caches
 * (greedy_decode), then with beam search (beam_decode, the caches reordered to the hypotheses kept), and draws one
 * sentence's cross-attention.  tests/test_transformer_seq2seq.c gradchecks it (f64),
 * checks the cached decoding against the full decoder, and that it learns. */
#include "attngrad.h"
#include "attngrad/layers.h"
#include "reversal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Logits [B, Nt, V] of every target position, fed tgt_in [B, Nt] of lengths tgt_len (NULL: all Nt; the padding's
 * logits are then the bias-free projection of 0, and no product is spent on it); *cross (if not NULL) receives the
 * last layer's cross-attention [B, h, Nt, Ns]. */
static ag_tensor *tseq_decode(const tseq *m, ag_tensor *memory, const int32_t *src_len, const int32_t *tgt_in,
                              const int32_t *tgt_len, int B, int Nt, bool training, ag_rng *rng, ag_tensor **cross) {
    ag_tensor *y = embed(m, tgt_in, B, Nt, 0, training, rng);
    for (int l = 0; l < m->layers; l++)
        y = ag_decoder_layer_forward_probs(&m->dec[l], y, tgt_len, memory, src_len, training, rng,
                                           l == m->layers - 1 ? cross : NULL);
    return ag_linear_t(y, m->embed, NULL);
}

/* The training loss (B <= 256): label-smoothed cross-entropy over the target positions that count (labels -1 do
 * not), a target's length running to its last that does. */
static ag_tensor *tseq_loss(const tseq *m, const reversal *d, int k0, int B, double smoothing, bool training,
                            ag_rng *rng) {
    int32_t tgt_len[256];
    for (int b = 0; b < B; b++)
        for (tgt_len[b] = d->Nt; tgt_len[b] > 0 && d->labels[(k0 + b) * d->Nt + tgt_len[b] - 1] < 0;) tgt_len[b]--;
    ag_tensor *memory = tseq_encode(m, d->src + k0 * d->Ns, d->len + k0, B, d->Ns, training, rng);
    ag_tensor *logits = tseq_decode(m, memory, d->len + k0, d->tgt_in + k0 * d->Nt, tgt_len, B, d->Nt, training, rng, NULL);
    return ag_cross_entropy_smoothed(logits, d->labels + k0 * d->Nt, -1, smoothing);
}

/* Greedy decoding of rows [k0, k0 + B) of d (B <= 256), a word at a time for all B together: each decoder layer
 * keeps its keys and values (ag_kv_cache_init_batch) and reads the source's from a cache made once
 * (ag_kv_cache_memory), so a word costs its own projections and one pass over what is cached.  Returns how many
 * come out exactly right (their target, then EOS), or -1 (ag_errmsg says why) where the device has no room for the
 * caches; words [B, Nt] and logits [B, Nt, VOCAB] receive what it chose and saw, where not NULL. */
static int greedy_decode(const tseq *m, const reversal *d, int k0, int B, int32_t *words, ag_real *logits) {
    if (B < 1 || B > 256) return ag_fail(AG_ERR_ARG, "greedy_decode: %d sequences, want 1 to 256", B), -1;
    int Nt = d->Nt, correct = -1;
    const int32_t *src_len = d->len + k0;
    ag_kv_cache self[MAX_LAYERS] = {0}, memory[MAX_LAYERS] = {0};
    int32_t prev[256], ok[256];
    ag_real z[256 * VOCAB];
    bool grad = ag_set_grad_enabled(false);
    ag_tensor *enc = tseq_encode(m, d->src + k0 * d->Ns, src_len, B, d->Ns, false, NULL);
    for (int l = 0; l < m->layers; l++)
        if (ag_kv_cache_init_batch(&self[l], &m->dec[l].self.attn, B, Nt, enc->device) != AG_OK ||
            ag_kv_cache_memory(&memory[l], &m->dec[l].cross, enc) != AG_OK)
            goto done;
    ag_step_end(); /* the encoder's output lives on in the memory caches alone */
    for (int b = 0; b < B; b++) prev[b] = BOS, ok[b] = 1;
    for (int t = 0; t < Nt; t++) {
        ag_tensor *y = embed(m, prev, B, 1, t, false, NULL);
        for (int l = 0; l < m->layers; l++) y = ag_decoder_layer_forward_cached(&m->dec[l], y, &memory[l], src_len, &self[l]);
        ag_tensor_read(ag_linear_t(y, m->embed, NULL), z); /* [B, 1, V] */
        for (int b = 0; b < B; b++) {
            prev[b] = reversal_pick(d, k0 + b, t, z + b * VOCAB, &ok[b]);
            if (words) words[b * Nt + t] = prev[b];
            for (int v = 0; logits && v < VOCAB; v++) logits[((int64_t)b * Nt + t) * VOCAB + v] = z[b * VOCAB + v];
        }
        ag_step_end();
    }
    correct = 0;
    for (int b = 0; b < B; b++) correct += ok[b];
done:
    for (int l = 0; l < m->layers; l++) ag_kv_cache_free(&self[l]), ag_kv_cache_free(&memory[l]);
    ag_step_end();
    ag_set_grad_enabled(grad);
    return correct;
}

/* Candidate c (its word w, from hypothesis f) into the best n <= K of one source's, kept best first. */
static void keep_best(int K, int *n, double *score, int32_t *word, int32_t *from, double c, int32_t w, int32_t f) {
    if (*n == K && !(c > score[K - 1])) return;
    int at = *n < K ? (*n)++ : K - 1;
    for (; at > 0 && score[at - 1] < c; at--) score[at] = score[at - 1], word[at] = word[at - 1], from[at] = from[at - 1];
    score[at] = c, word[at] = w, from[at] = f;
}

/* Beam search over rows [k0, k0 + B) of d (B K <= 256): K hypotheses a source, scored by the sum of their words'
 * log-probabilities; one that has said EOS stays as it is (fed PAD), its score fixed.  The caches hold the B K
 * hypotheses, reordered each step to those kept (ag_kv_cache_select); each source's memory is read by its K.
 * Returns how many sources' best hypothesis is exactly right, or -1 (ag_errmsg) where the device has no room;
 * words [B, Nt] and scores [B] receive the best hypotheses and their log-probabilities, where not NULL. */
static int beam_decode(const tseq *m, const reversal *d, int k0, int B, int K, int32_t *words, double *scores) {
    if (B < 1 || K < 1 || B * K > 256)
        return ag_fail(AG_ERR_ARG, "beam_decode: %d sources of %d hypotheses, want 1 to 256 in all", B, K), -1;
    int Nt = d->Nt, S = B * K, correct = -1;
    ag_kv_cache self[MAX_LAYERS] = {0}, memory[MAX_LAYERS] = {0};
    int32_t source[256], src_len[256], word[256], from[256];
    int32_t *hist = calloc((size_t)S * Nt, sizeof *hist), *was = calloc((size_t)S * Nt, sizeof *was); /* words so far */
    double score[256], kept[256];
    bool ended[256], ended_was[256];
    ag_real z[256 * VOCAB];
    for (int s = 0; s < S; s++) source[s] = s / K, src_len[s] = d->len[k0 + s / K];
    bool grad = ag_set_grad_enabled(false);
    if (!hist || !was) {
        ag_fail(AG_ERR_NOMEM, "beam_decode: no memory for the words of %d hypotheses", S);
        goto done;
    }
    ag_tensor *enc = tseq_encode(m, d->src + k0 * d->Ns, d->len + k0, B, d->Ns, false, NULL);
    enc = ag_index_select(enc, 0, source, S); /* each source's memory for its K hypotheses */
    for (int l = 0; l < m->layers; l++)
        if (ag_kv_cache_init_batch(&self[l], &m->dec[l].self.attn, S, Nt, enc->device) != AG_OK ||
            ag_kv_cache_memory(&memory[l], &m->dec[l].cross, enc) != AG_OK)
            goto done;
    ag_step_end();
    for (int s = 0; s < S; s++) word[s] = BOS, score[s] = s % K ? -INFINITY : 0, ended[s] = false; /* one to start */
    for (int t = 0; t < Nt; t++) {
        ag_tensor *y = embed(m, word, S, 1, t, false, NULL);
        for (int l = 0; l < m->layers; l++) y = ag_decoder_layer_forward_cached(&m->dec[l], y, &memory[l], src_len, &self[l]);
        ag_tensor_read(ag_log_softmax(ag_linear_t(y, m->embed, NULL)), z); /* [S, 1, V] */
        for (int b = 0; b < B; b++) { /* the K best continuations of source b's hypotheses */
            int n = 0;
            for (int j = b * K; j < (b + 1) * K && score[j] > -INFINITY; j++)
                for (int v = 0; v < (ended[j] ? 1 : VOCAB); v++)
                    keep_best(K, &n, kept + b * K, word + b * K, from + b * K, ended[j] ? score[j] : score[j] + z[j * VOCAB + v],
                              ended[j] ? PAD : v, j);
            for (int i = n; i < K; i++) kept[b * K + i] = -INFINITY, word[b * K + i] = PAD, from[b * K + i] = b * K;
        }
        memcpy(was, hist, sizeof(int32_t) * S * Nt), memcpy(ended_was, ended, sizeof(bool) * S);
        for (int s = 0; s < S; s++) { /* each kept hypothesis: its parent's words, then its own */
            memcpy(hist + s * Nt, was + from[s] * Nt, (size_t)t * sizeof(int32_t));
            hist[s * Nt + t] = word[s], score[s] = kept[s], ended[s] = ended_was[from[s]] || word[s] == EOS;
        }
        for (int l = 0; l < m->layers; l++) ag_kv_cache_select(&self[l], from);
        ag_step_end();
    }
    correct = 0;
    for (int b = 0; b < B; b++) { /* hypothesis b K is source b's best */
        int32_t ok = 1;
        for (int t = 0; t < Nt; t++) {
            int want = d->labels[(k0 + b) * Nt + t];
            ok = ok && (want < 0 || hist[b * K * Nt + t] == want);
            if (words) words[b * Nt + t] = hist[b * K * Nt + t];
        }
        correct += ok;
        if (scores) scores[b] = score[b * K];
    }
done:
    for (int l = 0; l < m->layers; l++) ag_kv_cache_free(&self[l]), ag_kv_cache_free(&memory[l]);
    free(hist), free(was);
    ag_step_end();
    ag_set_grad_enabled(grad);
    return correct;
}

/* Row k's cross-attention [Nt, Ns] (the last layer's, averaged over heads) over the words it was decoded to. */
static void alignment(const tseq *m, const reversal *d, int k, const int32_t *words, double *align) {
    int32_t in[64] = {BOS};
    for (int t = 1; t < d->Nt; t++) in[t] = words[t - 1];
    ag_tensor *cross, *memory = tseq_encode(m, d->src + k * d->Ns, d->len + k, 1, d->Ns, false, NULL);
    (void)tseq_decode(m, memory, d->len + k, in, NULL, 1, d->Nt, false, NULL, &cross); /* [1, h, Nt, Ns] */
    for (int t = 0; t < d->Nt; t++)
        for (int j = 0; j < d->Ns; j++) {
            align[t * d->Ns + j] = 0;
            for (int i = 0; i < m->cfg.heads; i++) align[t * d->Ns + j] += cross->data[((int64_t)i * d->Nt + t) * d->Ns + j] / m->cfg.heads;
        }
    ag_step_end();
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
            for (int k0 = 0; k0 + 100 <= test.n; k0 += 100) {
                int c = greedy_decode(&m, &test, k0, 100, NULL, NULL);
                if (c < 0) return fprintf(stderr, "%s\n", ag_errmsg()), 1;
                correct += c;
            }
            printf("step %4d  train loss %.4f  test exact match %.1f%%\n", step, loss_sum / EVERY, 100.0 * correct / test.n);
            loss_sum = 0;
        }
    }
    int beam = 0;
    for (int k0 = 0; k0 + 50 <= test.n; k0 += 50) {
        int c = beam_decode(&m, &test, k0, 50, 4, NULL, NULL);
        if (c < 0) return fprintf(stderr, "%s\n", ag_errmsg()), 1;
        beam += c;
    }
    printf("beam search, 4 hypotheses a source: test exact match %.1f%%\n", 100.0 * beam / test.n);
    int32_t words[16];
    double align[11 * 10];
    greedy_decode(&m, &test, 0, 1, words, NULL);
    alignment(&m, &test, 0, words, align);
    reversal_print_alignment(&test, align);
    ag_optim_free(&opt), ag_params_free(&m.ps), reversal_free(&train), reversal_free(&test), ag_shutdown();
    return 0;
}
#endif
