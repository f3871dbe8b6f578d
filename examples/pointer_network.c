/* pointer_network.c - Vinyals, Fortunato and Jaitly 2015, "Pointer Networks" (NeurIPS 2015): attention as the
 * output.  A GRU encodes a set of numbers, each embedded by a linear layer: e_j [B, N, H].  A GRU decoder,
 * started from the encoder's final state and fed the embedding of the number it pointed at last (a learnt start
 * vector first), scores every input, u_ij = v . tanh(W1 e_j + W2 d_i), and its output is softmax_j(u_ij) over
 * the inputs not pointed at yet (-inf on the others and on padding).  main() trains it with Adam to sort 5-10
 * numbers from [0, 1) (the target: their positions in increasing order) and prints the share of test sets it
 * sorts exactly, decoding greedily.  tests/test_pointer_network.c gradchecks it (f64) and checks that it learns. */
#include "attngrad.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int E, H;
    ag_params ps;
    ag_tensor *w_in, *b_in, *start, *w_keys, *w_query, *v;
    ag_gru_layer encoder, decoder;
} ptrnet;

static void ptrnet_build(ptrnet *m, int E, int H, ag_rng *rng) {
    *m = (ptrnet){.E = E, .H = H};
    ag_params *ps = &m->ps;
    m->w_in = ag_param_glorot(ps, "in.w", 1, E, rng);
    m->b_in = ag_param_uniform(ps, "in.b", 1, (int[]){E}, 0.5, rng);
    m->start = ag_param_uniform(ps, "start", 2, (int[]){1, E}, 0.5, rng);
    m->encoder = ag_param_gru(ps, "encoder", E, H, 1 / sqrt(H), rng);
    m->decoder = ag_param_gru(ps, "decoder", E, H, 1 / sqrt(H), rng);
    m->w_keys = ag_param_glorot(ps, "attn.keys", H, H, rng);   /* W1 */
    m->w_query = ag_param_glorot(ps, "attn.query", H, H, rng); /* W2 */
    m->v = ag_param_glorot(ps, "attn.v", H, 1, rng);
}

/* A batch: values [B, N] (0-padded), lengths [B], and for teacher forcing the positions in sorted order
 * order [B, N] (-1 past each length). */
typedef struct {
    int B, N;
    const ag_real *values;
    const int32_t *len, *order;
} sets;

/* What every step reads: the embedded inputs [B*N, E], their keys W1 e [B, N, H], the decoder's state. */
typedef struct {
    ag_tensor *x, *keys, *state;
} encoded;

static encoded ptrnet_encode(const ptrnet *m, const sets *d) {
    int B = d->B, N = d->N;
    ag_tensor *vals = ag_tensor_from(d->values, 3, (int[]){B, N, 1});
    ag_tensor *x = ag_dense(vals, m->w_in, m->b_in, AG_ACT_TANH);                /* [B, N, E] */
    ag_tensor *hn;
    ag_tensor *e = ag_gru(x, &m->encoder, 1, &(ag_gru_opts){.len = d->len, .h_n = &hn});
    return (encoded){.x = ag_reshape(x, 2, (int[]){B * N, m->E}), .keys = ag_linear(e, m->w_keys, NULL), .state = hn};
}

/* One step: the decoder reads y [B, 1, E]; the scores over the inputs [B, N] with -inf where used[b*N + j]
 * or past the length (a set whose steps are over keeps its valid inputs open: its label is ignored). */
static ag_tensor *ptrnet_step(const ptrnet *m, encoded *enc, const sets *d, ag_tensor *y, const bool *used, int step) {
    int B = d->B, N = d->N;
    ag_tensor *out = ag_gru(y, &m->decoder, 1, &(ag_gru_opts){.h0 = enc->state});      /* [B, 1, H] */
    enc->state = ag_reshape(out, 3, (int[]){1, B, m->H});
    ag_tensor *scores = ag_linear(ag_tanh(ag_add(enc->keys, ag_linear(out, m->w_query, NULL))), m->v, NULL);
    ag_tensor *mask = ag_tensor_new_host(2, (int[]){B, N});
    for (int b = 0; b < B; b++)
        for (int j = 0; j < N; j++)
            mask->data[b * N + j] = j >= d->len[b] || (step < d->len[b] && used[b * N + j]) ? -INFINITY : 0;
    return ag_add(ag_reshape(scores, 2, (int[]){B, N}), mask);
}

/* The embedded inputs at positions pick [B] (row b's), as the next step's input [B, 1, E]. */
static ag_tensor *picked(const ptrnet *m, const encoded *enc, int B, int N, const int32_t *pick) {
    int32_t rows[256];
    for (int b = 0; b < B; b++) rows[b] = b * N + (pick[b] >= 0 ? pick[b] : 0);
    return ag_reshape(ag_index_select(enc->x, 0, rows, B), 3, (int[]){B, 1, m->E});
}

/* Teacher forcing: the mean cross-entropy of every step's pointer. */
static ag_tensor *ptrnet_loss(const ptrnet *m, const sets *d) {
    int B = d->B, N = d->N;
    encoded enc = ptrnet_encode(m, d);
    bool *used = calloc((size_t)B * N, sizeof *used);
    int32_t *labels = malloc((size_t)B * N * sizeof *labels), pick[256];
    ag_tensor *steps[64], *y = ag_embedding(m->start, (int32_t[256]){0}, 2, (int[]){B, 1});
    for (int i = 0; i < N && i < 64; i++) {
        steps[i] = ag_reshape(ptrnet_step(m, &enc, d, y, used, i), 3, (int[]){B, 1, N});
        for (int b = 0; b < B; b++) {
            pick[b] = labels[b * N + i] = d->order[b * N + i];
            if (pick[b] >= 0) used[b * N + pick[b]] = true;
        }
        y = picked(m, &enc, B, N, pick);
    }
    ag_tensor *loss = ag_cross_entropy(ag_concat(steps, N < 64 ? N : 64, 1), labels, -1); /* labels copied */
    free(used), free(labels);
    return loss;
}

/* n sets of 1 + (lo..hi) numbers in [0, 1): values, lengths and their sorted order, in arrays of width N = hi. */
typedef struct {
    int n, N;
    ag_real *values;
    int32_t *len, *order;
} sorting;

static sorting sorting_make(int n, int lo, int hi, ag_rng *rng) {
    sorting s = {.n = n, .N = hi};
    s.values = calloc((size_t)n * hi, sizeof *s.values), s.len = malloc((size_t)n * sizeof *s.len);
    s.order = malloc((size_t)n * hi * sizeof *s.order);
    for (int k = 0; k < n; k++) {
        int L = s.len[k] = lo + (int)(ag_rng_uniform(rng) * (hi - lo + 1)) % (hi - lo + 1);
        ag_real *v = s.values + k * hi;
        int32_t *o = s.order + k * hi;
        for (int j = 0; j < L; j++) v[j] = (ag_real)ag_rng_uniform(rng), o[j] = j;
        for (int j = 1; j < L; j++) /* insertion sort of the positions by value */
            for (int i = j; i > 0 && v[o[i]] < v[o[i - 1]]; i--) {
                int32_t t = o[i];
                o[i] = o[i - 1], o[i - 1] = t;
            }
        for (int j = L; j < hi; j++) o[j] = -1;
    }
    return s;
}

static sets batch_of(const sorting *s, int k0, int B) {
    return (sets){.B = B, .N = s->N, .values = s->values + k0 * s->N, .len = s->len + k0, .order = s->order + k0 * s->N};
}

static void sorting_free(sorting *s) { free(s->values), free(s->len), free(s->order); }

#ifndef PTRNET_NO_MAIN
/* Greedy decoding: how many sets of the batch come out exactly in order. */
static int sorted_exactly(const ptrnet *m, const sets *d) {
    int B = d->B, N = d->N, correct = 0;
    encoded enc = ptrnet_encode(m, d);
    bool used[256 * 16] = {0}, ok[256];
    int32_t pick[256];
    ag_tensor *y = ag_embedding(m->start, (int32_t[256]){0}, 2, (int[]){B, 1});
    for (int b = 0; b < B; b++) ok[b] = true;
    for (int i = 0; i < N; i++) {
        ag_tensor *u = ptrnet_step(m, &enc, d, y, used, i);
        for (int b = 0; b < B; b++) {
            int best = 0;
            for (int j = 1; j < N; j++) best = u->data[b * N + j] > u->data[b * N + best] ? j : best;
            pick[b] = best;
            if (i < d->len[b]) used[b * N + best] = true, ok[b] = ok[b] && best == d->order[b * N + i];
        }
        y = picked(m, &enc, B, N, pick);
    }
    for (int b = 0; b < B; b++) correct += ok[b];
    ag_step_end();
    return correct;
}

int main(void) {
    enum { BATCH = 64, STEPS = 2000, EVERY = 500 };
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    sorting train = sorting_make(20000, 5, 10, &rng), test = sorting_make(1000, 5, 10, &rng);
    ptrnet m;
    ptrnet_build(&m, 32, 64, &rng);
    ag_optimizer opt;
    ag_optim_config cfg = ag_optim_defaults(AG_ADAM);
    cfg.lr = 2e-3;
    ag_optim_init(&opt, &m.ps, &cfg);
    double loss_sum = 0;
    for (int step = 1; step <= STEPS; step++) {
        sets d = batch_of(&train, (step - 1) * BATCH % (train.n - BATCH), BATCH);
        ag_tensor *loss = ptrnet_loss(&m, &d);
        ag_params_zero_grad(&m.ps);
        ag_backward(loss);
        ag_clip_grad_norm(&m.ps, 2.0);
        ag_optim_step(&opt);
        loss_sum += ag_item(loss);
        ag_step_end();
        if (step % EVERY == 0) {
            int correct = 0;
            for (int k0 = 0; k0 + 200 <= test.n; k0 += 200) {
                sets t = batch_of(&test, k0, 200);
                correct += sorted_exactly(&m, &t);
            }
            printf("step %4d  train loss %.4f  test sets sorted exactly %.1f%%\n", step, loss_sum / EVERY,
                   100.0 * correct / test.n);
            loss_sum = 0;
        }
    }
    ag_optim_free(&opt), ag_params_free(&m.ps), sorting_free(&train), sorting_free(&test), ag_shutdown();
    return 0;
}
#endif
