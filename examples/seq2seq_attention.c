/* seq2seq_attention.c - Bahdanau, Cho and Bengio 2015, "Neural Machine Translation by Jointly Learning to Align
 * and Translate" (ICLR 2015, RNNsearch), the first attention network, from <attngrad/layers.h>:
 *   encoder   h_j = [GRU->; GRU<-] over the source's valid words (ag_bigru)            [B, Ns, 2H]
 *   attention e_ij = v . tanh(W s_{i-1} + U h_j), alpha_i = softmax over the valid j, c_i = sum_j alpha_ij h_j
 *   decoder   s_i = GRU(s_{i-1}, [E y_{i-1}; c_i]) (ag_gru, a step at a time from h0), s_0 = tanh(W_s h<-_1 + b)
 *   output    tanh(W_o [s_i; c_i; E y_{i-1}] + b_o) -> logits (the paper's maxout layer, as tanh)
 * main() trains it with Adam on a generated task, reversing a sequence of digits (lengths 1-10: the alignment
 * the attention must find is the anti-diagonal), decodes the test set greedily and prints its exact-match
 * accuracy and one sentence's alignment.  tests/test_seq2seq_attention.c gradchecks it (f64: padding, a
 * length-1 source, both paths of a step) and checks that it learns. */
#include "attngrad.h"
#include "reversal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    int H, A;
    ag_params ps;
    ag_tensor *src_embed, *tgt_embed, *w_init, *b_init, *w_keys, *w_query, *v, *w_hidden, *b_hidden, *w_out, *b_out;
    ag_bigru_layer encoder;
    ag_gru_layer decoder;
} s2s;

static void s2s_build(s2s *m, int E, int H, int A, ag_rng *rng) {
    *m = (s2s){.H = H, .A = A};
    ag_params *ps = &m->ps;
    double bound = 1 / sqrt(H); /* nn.GRU's */
    m->src_embed = ag_param_embedding(ps, "src.embed", VOCAB, E, 0.1, PAD, rng);
    m->tgt_embed = ag_param_embedding(ps, "tgt.embed", VOCAB, E, 0.1, PAD, rng);
    m->encoder = ag_param_bigru(ps, "encoder", E, H, bound, rng);
    m->w_init = ag_param_glorot(ps, "init.w", H, H, rng);
    m->b_init = ag_param_bias(ps, "init.b", H);
    m->w_keys = ag_param_glorot(ps, "attn.keys", 2 * H, A, rng);   /* U */
    m->w_query = ag_param_glorot(ps, "attn.query", H, A, rng);     /* W */
    m->v = ag_param_glorot(ps, "attn.v", A, 1, rng);
    m->decoder = ag_param_gru(ps, "decoder", E + 2 * H, H, bound, rng);
    m->w_hidden = ag_param_glorot(ps, "out.hidden.w", 3 * H + E, H, rng);
    m->b_hidden = ag_param_bias(ps, "out.hidden.b", H);
    m->w_out = ag_param_glorot(ps, "out.w", H, VOCAB, rng);
    m->b_out = ag_param_bias(ps, "out.b", VOCAB);
}

/* What every decoder step reads: the annotations h, their keys U h, the source's lengths. */
typedef struct {
    ag_tensor *h, *keys;
    const int32_t *src_len;
} encoded;

/* The encoder, and s_0 from the backward GRU's state after the first word. */
static encoded s2s_encode(const s2s *m, const int32_t *src, const int32_t *src_len, int B, int Ns, ag_tensor **s0) {
    int H = m->H;
    encoded e = {.src_len = src_len};
    e.h = ag_bigru(ag_embedding(m->src_embed, src, 2, (int[]){B, Ns}), &m->encoder, src_len);
    e.keys = ag_linear(e.h, m->w_keys, NULL);
    ag_tensor *first_bw = ag_reshape(ag_slice(ag_slice(e.h, 1, 0, 1), 2, H, 2 * H), 2, (int[]){B, H});
    *s0 = ag_dense(first_bw, m->w_init, m->b_init, AG_ACT_TANH);
    return e;
}

/* One decoder step from *s [B, H] and the previous word's embedding y [B, 1, E]: *s becomes s_i, the
 * result is the logits [B, 1, V], *alpha (if not NULL) the attention [B, 1, Ns]. */
static ag_tensor *s2s_step(const s2s *m, const encoded *e, ag_tensor **s, ag_tensor *y, ag_tensor **alpha) {
    int B = (*s)->shape[0], H = m->H;
    ag_tensor *query = ag_reshape(ag_linear(*s, m->w_query, NULL), 3, (int[]){B, 1, m->A});
    ag_tensor *scores = ag_linear(ag_tanh(ag_add(e->keys, query)), m->v, NULL);   /* [B, Ns, 1] */
    ag_tensor *a = ag_softmax_axis_len(scores, 1, e->src_len);                    /* 0 at padding */
    ag_tensor *c = ag_matmul_t(a, true, e->h, false);                             /* [B, 1, 2H] */
    ag_tensor *h0 = ag_reshape(*s, 3, (int[]){1, B, H});
    ag_tensor *out = ag_gru(ag_concat((ag_tensor *[]){y, c}, 2, 2), &m->decoder, 1, &(ag_gru_opts){.h0 = h0});
    *s = ag_reshape(out, 2, (int[]){B, H});
    if (alpha) *alpha = ag_transpose(a, 1, 2);
    ag_tensor *t = ag_dense(ag_concat((ag_tensor *[]){out, c, y}, 3, 2), m->w_hidden, m->b_hidden, AG_ACT_TANH);
    return ag_linear(t, m->w_out, m->b_out);
}

/* Teacher forcing: the logits [B, Nt, V] of every step, fed tgt_in [B, Nt] (BOS, then the target). */
static ag_tensor *s2s_logits(const s2s *m, const int32_t *src, const int32_t *src_len, int B, int Ns,
                             const int32_t *tgt_in, int Nt) {
    ag_tensor *s, *steps[64];
    encoded e = s2s_encode(m, src, src_len, B, Ns, &s);
    ag_tensor *y = ag_embedding(m->tgt_embed, tgt_in, 2, (int[]){B, Nt});
    for (int t = 0; t < Nt && t < 64; t++) steps[t] = s2s_step(m, &e, &s, ag_slice(y, 1, t, t + 1), NULL);
    return ag_concat(steps, Nt < 64 ? Nt : 64, 1);
}

#ifndef S2S_NO_MAIN
/* Greedy decoding of rows [k0, k0 + B) of d; how many come out exactly right (their target, then EOS).
 * *align, when not NULL, receives row k0's alignment [Nt, Ns] as decoded. */
static int greedy_correct(const s2s *m, const reversal *d, int k0, int B, double *align) {
    ag_tensor *s;
    encoded e = s2s_encode(m, d->src + k0 * d->Ns, d->len + k0, B, d->Ns, &s);
    int32_t prev[256], ok[256];
    for (int b = 0; b < B; b++) prev[b] = BOS, ok[b] = 1;
    for (int t = 0; t < d->Nt; t++) {
        ag_tensor *alpha, *logits = s2s_step(m, &e, &s, ag_embedding(m->tgt_embed, prev, 2, (int[]){B, 1}), &alpha);
        for (int b = 0; b < B; b++) prev[b] = reversal_pick(d, k0 + b, t, logits->data + b * VOCAB, &ok[b]);
        for (int j = 0; align && j < d->Ns; j++) align[t * d->Ns + j] = alpha->data[j];
    }
    int correct = 0;
    for (int b = 0; b < B; b++) correct += ok[b];
    ag_step_end();
    return correct;
}

int main(void) {
    enum { BATCH = 32, STEPS = 1500, EVERY = 250 };
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    reversal train = reversal_make(4000, 10, &rng), test = reversal_make(500, 10, &rng);
    s2s m;
    s2s_build(&m, 16, 48, 48, &rng);
    ag_optimizer opt;
    ag_optim_config cfg = ag_optim_defaults(AG_ADAM);
    cfg.lr = 3e-3;
    ag_optim_init(&opt, &m.ps, &cfg);
    double loss_sum = 0;
    for (int step = 1; step <= STEPS; step++) {
        int k0 = (step - 1) * BATCH % (train.n - BATCH);
        ag_tensor *logits = s2s_logits(&m, train.src + k0 * train.Ns, train.len + k0, BATCH, train.Ns,
                                       train.tgt_in + k0 * train.Nt, train.Nt);
        ag_tensor *loss = ag_cross_entropy(logits, train.labels + k0 * train.Nt, -1);
        ag_params_zero_grad(&m.ps);
        ag_backward(loss);
        ag_clip_grad_norm(&m.ps, 1.0);
        ag_optim_step(&opt);
        loss_sum += ag_item(loss);
        ag_step_end();
        if (step % EVERY == 0) {
            int correct = 0;
            for (int k0t = 0; k0t + 100 <= test.n; k0t += 100) correct += greedy_correct(&m, &test, k0t, 100, NULL);
            printf("step %4d  train loss %.4f  test exact match %.1f%%\n", step, loss_sum / EVERY, 100.0 * correct / test.n);
            loss_sum = 0;
        }
    }
    double align[11 * 10];
    greedy_correct(&m, &test, 0, 1, align);
    reversal_print_alignment(&test, align);
    ag_optim_free(&opt), ag_params_free(&m.ps), reversal_free(&train), reversal_free(&test), ag_shutdown();
    return 0;
}
#endif
