/* poslm.c - the positional attentive language model (docs/models.md, positional LM): a
 * multi-layer LSTM whose top states h_0..h_t are summarised into a context
 * c_t, combined with h_t and decoded through the tied embedding.  The
 * context is, by cfg.attention,
 *   positional  Gaussian weights over the window i <= t around a learnt
 *               mean position mu_t (ag_gaussian_mu / ag_gaussian_context);
 *   standard    softmax over i <= t of a query-independent score of h_i;
 *   none        no context: the LSTM baseline, o_t = h_t.
 * Every context at t reads only h_0..h_t, so the model stays causal. */
#include "attngrad/model.h" /* first: the public ops' call-site macros, so errors and the profiler name this file's lines */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LAYERS = 8 };

typedef struct {
    ag_tensor *embed, *dec_bias;
    ag_lstm_layer lstm[MAX_LAYERS];
    ag_lstm_layer pos_lstm;
    ag_tensor *w_mu, *b_mu, *w_sigma, *b_sigma;   /* positional */
    ag_tensor *att_w1, *att_b1, *att_w2, *att_b2; /* standard */
    ag_tensor *cat_w, *cat_b;                     /* positional and standard */
    ag_tensor *last_mu, *last_weights;            /* of the last forward, step arena */
} poslm;

#define INIT_RANGE 0.1              /* U(-0.1, 0.1) for every parameter, as the authors' code */
#define GAUSS_EPS 1e-3              /* gamma = exp(-(p - mu)^2 / (2 sigma^2 + 1e-3)) */

static void poslm_defaults(ag_model_config *c) {
    c->task = AG_TASK_LM;
    c->vocab = 10001; /* PTB 10000 + <pad>; the trainer sets it from the data */
    c->dim = 400;     /* E */
    c->hidden = 400;  /* H */
    c->layers = 0;    /* 2, or 3 for the LSTM baseline */
    c->pos_hidden = 20;
    c->attention = AG_LM_POSITIONAL;
    c->keep = 0.5;        /* embedding output and decoder input */
    c->keep_layers = 0.8; /* between LSTM layers */
    c->l2 = 0;            /* the weight decay below is SGD's, over every parameter */
    c->batch = 32;
    c->optim = "sgd:lr=30,weight_decay=1.2e-6";
    c->clip = 0.25;
    c->sched = "plateau:mode=min,factor=0.5,patience=5";
}

static void poslm_tiny(ag_model_config *c) {
    c->vocab = 8;
    c->dim = c->hidden = 4;
    c->pos_hidden = 3;
    c->keep_layers = 1;
    /* m_t near 0.7 keeps m_t . b_t above the floor t/len at every t (and
     * mu_t within a few window widths of the positions i/len), so the
     * positional parameters get a gradient to check. */
    c->pos_mu_bias = 0.7;
}

static int layer_count(const ag_model_config *c) {
    return c->layers > 0 ? c->layers : c->attention == AG_LM_NONE ? 3 : 2;
}

static ag_status poslm_build(ag_model *m) {
    ag_model_config *c = &m->cfg;
    int V = c->vocab, E = c->dim, H = c->hidden, P = c->pos_hidden;
    c->layers = layer_count(c);
    if (c->attention < AG_LM_POSITIONAL || c->attention > AG_LM_NONE)
        return ag_fail(AG_ERR_ARG, "poslm: attention = %d (want 0, 1 or 2)", c->attention);
    if (c->layers > MAX_LAYERS) return ag_fail(AG_ERR_ARG, "poslm: %d layers (at most %d)", c->layers, MAX_LAYERS);
    if (c->attention == AG_LM_NONE && H != E)
        return ag_fail(AG_ERR_ARG, "poslm: without attention the tied decoder reads h_t, so hidden (%d) must "
                       "equal dim (%d)", H, E);
    poslm *p = calloc(1, sizeof *p);
    ag_params *ps = &m->params;
    ag_rng *r = &m->rng;
    char name[64];
    /* the pad row drawn too: it is a row of the tied decoder */
    p->embed = ag_param_uniform(ps, "embed.weight", 2, (int[]){V, E}, INIT_RANGE, r);
    for (int l = 0; l < c->layers; l++) {
        snprintf(name, sizeof name, "lstm.l%d", l);
        p->lstm[l] = ag_param_lstm(ps, name, l == 0 ? E : H, H, INIT_RANGE, r);
    }
    if (c->attention == AG_LM_POSITIONAL) {
        p->pos_lstm = ag_param_lstm(ps, "pos.lstm", H, P, INIT_RANGE, r);
        p->w_mu = ag_param_uniform(ps, "pos.w_mu", 2, (int[]){P, 3}, INIT_RANGE, r);
        p->b_mu = ag_param_uniform(ps, "pos.b_mu", 1, (int[]){3}, INIT_RANGE, r);
        for (int j = 0; j < 3 && p->b_mu->data; j++) p->b_mu->data[j] += (ag_real)c->pos_mu_bias; /* none: shapes only */
        p->w_sigma = ag_param_uniform(ps, "pos.w_sigma", 2, (int[]){P, 1}, INIT_RANGE, r);
        p->b_sigma = ag_param_uniform(ps, "pos.b_sigma", 1, (int[]){1}, INIT_RANGE, r);
    } else if (c->attention == AG_LM_STANDARD) {
        p->att_w1 = ag_param_uniform(ps, "att.w1", 2, (int[]){H, H}, INIT_RANGE, r);
        p->att_b1 = ag_param_uniform(ps, "att.b1", 1, (int[]){H}, INIT_RANGE, r);
        p->att_w2 = ag_param_uniform(ps, "att.w2", 2, (int[]){H, 1}, INIT_RANGE, r);
        p->att_b2 = ag_param_uniform(ps, "att.b2", 1, (int[]){1}, INIT_RANGE, r);
    }
    if (c->attention != AG_LM_NONE) {
        p->cat_w = ag_param_uniform(ps, "cat.weight", 2, (int[]){2 * H, E}, INIT_RANGE, r);
        p->cat_b = ag_param_uniform(ps, "cat.bias", 1, (int[]){E}, INIT_RANGE, r);
    }
    p->dec_bias = ag_param_uniform(ps, "dec.bias", 1, (int[]){V}, INIT_RANGE, r);
    m->impl = p;
    return AG_OK;
}

/* c_t = sum_{i<=t} gamma[t,i] h_i around mu_t (docs/models.md, positional LM). */
static ag_tensor *positional_context(ag_model *m, ag_tensor *h, const int32_t *len) {
    poslm *p = m->impl;
    ag_tensor *g = ag_lstm(h, &p->pos_lstm, 1, &(ag_lstm_opts){.len = len});          /* [B,N,P] */
    ag_tensor *mix = ag_dense(g, p->w_mu, p->b_mu, AG_ACT_RELU);                      /* m_t [B,N,3] */
    ag_tensor *sigma = ag_dense(g, p->w_sigma, p->b_sigma, AG_ACT_SIGMOID);           /* [B,N,1] */
    p->last_mu = ag_gaussian_mu(mix, len);                                            /* [B,N] */
    bool strict = m->cfg.flags & AG_FLAG_STRICT;
    return ag_gaussian_context(h, p->last_mu, sigma, len, strict, GAUSS_EPS, &p->last_weights);
}

/* The attentive-LM baseline: a_i = w2 . tanh(h_i W1 + b1) + b2 depends on i
 * alone, so every query t sees the same score row, masked to i <= t and to
 * the example's length. */
static ag_tensor *standard_context(ag_model *m, ag_tensor *h, const int32_t *len) {
    poslm *p = m->impl;
    int B = h->shape[0], N = h->shape[1];
    ag_tensor *a = ag_linear(ag_dense(h, p->att_w1, p->att_b1, AG_ACT_TANH), p->att_w2, p->att_b2); /* [B,N,1] */
    /* [B,1,N(i)] + [1,N(t),1] zeros: the score row broadcast to every query t */
    ag_tensor *scores = ag_add(ag_reshape(a, 3, (int[]){B, 1, N}), ag_tensor_new(3, (int[]){1, N, 1}));
    ag_tensor *mask;
    ag_mask_batch(&(ag_mask_spec){.dir = AG_MASK_PAST_INCL}, 1, B, N, len, NULL, &mask); /* no tree: cannot fail */
    p->last_weights = ag_masked_softmax(scores, ag_reshape(mask, 3, (int[]){B, N, N}), 1.0);
    return ag_matmul(p->last_weights, h);                                             /* [B,N,H] */
}

/* The decoder's input o_t [B,N,E] (docs/models.md, positional LM), dropout included. */
static ag_tensor *decoder_input(ag_model *m, const ag_batch *b, bool training) {
    poslm *p = m->impl;
    const ag_model_config *c = &m->cfg;
    int B = b->rows, N = b->width;
    p->last_mu = p->last_weights = NULL;
    ag_tensor *x = ag_embedding(p->embed, b->tokens, 2, (int[]){B, N});               /* [B,N,E] */
    ag_lstm_opts lo = {.len = b->lengths, .keep = c->keep_layers, .training = training, .rng = &m->rng};
    ag_tensor *h = ag_lstm(ag_dropout(x, c->keep, training, &m->rng), p->lstm, c->layers, &lo); /* [B,N,H] */

    ag_tensor *o = h;
    if (c->attention != AG_LM_NONE) {
        ag_tensor *ctx = c->attention == AG_LM_POSITIONAL ? positional_context(m, h, b->lengths)
                                                          : standard_context(m, h, b->lengths);
        ag_model_capture(m, c->attention == AG_LM_POSITIONAL ? "positional" : "standard",
                         ((poslm *)m->impl)->last_weights);
        o = ag_dense(ag_concat((ag_tensor *[]){ctx, h}, 2, 2), p->cat_w, p->cat_b, AG_ACT_TANH); /* [B,N,E] */
    }
    return ag_dropout(o, c->keep, training, &m->rng);
}

/* o's rows at each row's last position [B,1,E] (position 0 of an empty
 * row), for generation, which reads no other. */
static ag_tensor *last_positions(ag_tensor *o, const int32_t *len) {
    int B = o->shape[0], N = o->shape[1], E = o->shape[2];
    int32_t *at = malloc((size_t)(B ? B : 1) * sizeof *at);
    if (!at) ag_fatal("poslm", "out of memory for %d row indices", B);
    for (int r = 0; r < B; r++) at[r] = r * N + (len[r] > 0 ? len[r] - 1 : 0);
    ag_tensor *last = ag_index_select(ag_reshape(o, 2, (int[]){B * N, E}), 0, at, B); /* copies at */
    free(at);
    return ag_reshape(last, 3, (int[]){B, 1, E});
}

/* The decoder is the embedding itself: logits = o E^T + b_dec [B,N,V].
 * Padding positions carry no loss: zero rows of o skip the decoder's
 * products, and their logits are b_dec alone.  With m->last_logits only
 * each row's last position is decoded, [B,1,V]: a drawn word costs a
 * product of one row, not of the n words so far (the decoder is most of
 * the LM's multiply-adds, V = 33,279 on WikiText-2). */
static ag_tensor *poslm_forward(ag_model *m, const ag_batch *b, bool training) {
    poslm *p = m->impl;
    ag_tensor *o = decoder_input(m, b, training);
    o = m->last_logits ? last_positions(o, b->lengths) : ag_zero_padding(o, b->lengths);
    return ag_linear_t(o, p->embed, p->dec_bias);
}

/* The mean cross-entropy over the non-pad targets, with the decoder fused
 * into it: the [B,N,V] logits are never built (padding rows are not
 * multiplied at all).  The same loss as forward's logits give. */
static ag_tensor *poslm_loss(ag_model *m, const ag_batch *b, bool training) {
    poslm *p = m->impl;
    ag_tensor *o = ag_zero_padding(decoder_input(m, b, training), b->lengths); /* as in forward */
    double eps = training ? m->cfg.label_smoothing : 0;
    if (eps > 0) return ag_linear_t_cross_entropy_smoothed(o, p->embed, p->dec_bias, b->targets, AG_PAD_ID, eps);
    return ag_linear_t_cross_entropy(o, p->embed, p->dec_bias, b->targets, AG_PAD_ID);
}

/* ---- word by word, for generation (ag_model_kind.lm_*) ----
 * What the context at the next position reads, kept between calls: the
 * LSTMs' states and every earlier position's top state h_i, with the
 * positional mean's inputs m_i and widths sigma_i, or the standard score
 * a_i.  Only the mean mu_t depends on the length (its floor t/len), so
 * it is recomputed from the kept m_i; everything else is computed once
 * per position.  The buffers live on the model's device and the ops'
 * outputs are written into them there (ag_buffer_write): feeding a word
 * waits for nothing and moves nothing across the bus (generate then reads
 * the logits, one wait a word). */
typedef struct {
    int capacity, n;            /* positions room for, fed so far */
    ag_buffer *h, *c;           /* [layers,1,H]: the LSTM's state after the last position fed */
    ag_buffer *ph, *pc;         /* [1,1,P]: the position LSTM's (positional) */
    ag_buffer *hist;            /* [capacity,H]: h_i */
    ag_buffer *mix, *sigma;     /* [capacity,3], [capacity]: m_i and sigma_i (positional) */
    ag_buffer *score;           /* [capacity]: a_i (standard) */
} poslm_state;

static void poslm_state_free(void *state) {
    poslm_state *s = state;
    if (!s) return;
    ag_buffer *buffers[] = {s->h, s->c, s->ph, s->pc, s->hist, s->mix, s->sigma, s->score};
    for (int i = 0; i < 8; i++) ag_buffer_free(buffers[i]);
    free(s);
}

static void *poslm_state_new(const ag_model *m, int capacity) {
    const poslm *p = m->impl;
    const ag_model_config *c = &m->cfg;
    int64_t H = c->hidden, P = c->pos_hidden > 0 ? c->pos_hidden : 1, L = c->layers;
    poslm_state *s = capacity >= 1 ? calloc(1, sizeof *s) : NULL;
    if (!s) return NULL;
    s->capacity = capacity;
    ag_device d = p->embed->device;
    /* no room (a full GPU, a text of 10^8 words): NULL, and generate
     * falls back to a forward a word, as the kind contract says */
    bool ok = (s->h = ag_buffer_new(d, L * H, "poslm state h")) && (s->c = ag_buffer_new(d, L * H, "poslm state c")) &&
              (s->ph = ag_buffer_new(d, P, "poslm state ph")) && (s->pc = ag_buffer_new(d, P, "poslm state pc")) &&
              (s->hist = ag_buffer_new(d, (int64_t)capacity * H, "poslm state h_i")) &&
              (s->mix = ag_buffer_new(d, (int64_t)capacity * 3, "poslm state m_i")) &&
              (s->sigma = ag_buffer_new(d, capacity, "poslm state sigma_i")) &&
              (s->score = ag_buffer_new(d, capacity, "poslm state a_i"));
    if (!ok) {
        poslm_state_free(s);
        return NULL;
    }
    return s;
}

/* ag_lstm over x [1,n,in] from the kept state h, c (none before the
 * first position, as forward starts); h and c then keep its final state. */
static ag_tensor *lstm_on(ag_tensor *x, const ag_lstm_layer *layers, int L, int H, bool first, ag_buffer *h, ag_buffer *c) {
    ag_tensor *hn, *cn;
    ag_lstm_opts lo = {.h_n = &hn, .c_n = &cn};
    if (!first) lo.h0 = ag_buffer_view(h, 0, 3, (int[]){L, 1, H}), lo.c0 = ag_buffer_view(c, 0, 3, (int[]){L, 1, H});
    ag_tensor *out = ag_lstm(x, layers, L, &lo);
    ag_buffer_write(h, 0, hn);
    ag_buffer_write(c, 0, cn);
    return out;
}

static ag_tensor *poslm_feed(ag_model *m, void *state, const int32_t *ids, int n) {
    poslm *p = m->impl;
    poslm_state *s = state;
    const ag_model_config *c = &m->cfg;
    int L = c->layers, H = c->hidden, P = c->pos_hidden, at = s->n, len = s->n + n;
    if (n < 1 || n > s->capacity - at) {
        ag_fail(AG_ERR_ARG, "poslm: feeding %d words after %d: the state holds %d positions", n, at, s->capacity);
        return NULL;
    }
    if (p->embed->device != ag_buffer_device(s->hist)) {
        ag_fail(AG_ERR_ARG, "poslm: the generation state is on the %s, the model on the %s",
                ag_device_name(ag_buffer_device(s->hist)), ag_device_name(p->embed->device));
        return NULL;
    }

    ag_tensor *x = ag_embedding(p->embed, ids, 2, (int[]){1, n});                                  /* [1,n,E] */
    ag_tensor *h = lstm_on(x, p->lstm, L, H, at == 0, s->h, s->c);                                 /* [1,n,H] */
    ag_buffer_write(s->hist, (int64_t)at * H, h);
    ag_tensor *h_last = ag_slice(h, 1, n - 1, n);                                                  /* [1,1,H] */
    ag_tensor *hist = ag_buffer_view(s->hist, 0, 3, (int[]){1, len, H});
    ag_tensor *o = h_last;
    if (c->attention == AG_LM_POSITIONAL) { /* positional_context at t = len - 1 */
        ag_tensor *g = lstm_on(h, &p->pos_lstm, 1, P, at == 0, s->ph, s->pc);                     /* [1,n,P] */
        ag_buffer_write(s->mix, (int64_t)at * 3, ag_dense(g, p->w_mu, p->b_mu, AG_ACT_RELU));
        ag_buffer_write(s->sigma, at, ag_dense(g, p->w_sigma, p->b_sigma, AG_ACT_SIGMOID));
        ag_tensor *mu = ag_gaussian_mu(ag_buffer_view(s->mix, 0, 3, (int[]){1, len, 3}), &len);     /* [1,len] */
        ag_tensor *sigma = ag_buffer_view(s->sigma, 0, 3, (int[]){1, len, 1});
        ag_tensor *ctx = ag_gaussian_context(hist, mu, sigma, &len, c->flags & AG_FLAG_STRICT, GAUSS_EPS, NULL); /* [1,len,H] */
        o = ag_concat((ag_tensor *[]){ag_slice(ctx, 1, len - 1, len), h_last}, 2, 2);
    } else if (c->attention == AG_LM_STANDARD) { /* standard_context's last row: every i <= t */
        ag_tensor *a = ag_linear(ag_dense(h, p->att_w1, p->att_b1, AG_ACT_TANH), p->att_w2, p->att_b2); /* [1,n,1] */
        ag_buffer_write(s->score, at, a);
        ag_tensor *w = ag_softmax(ag_buffer_view(s->score, 0, 3, (int[]){1, 1, len}));            /* [1,1,len] */
        o = ag_concat((ag_tensor *[]){ag_matmul(w, hist), h_last}, 2, 2);
    }
    if (c->attention != AG_LM_NONE) o = ag_dense(o, p->cat_w, p->cat_b, AG_ACT_TANH);              /* [1,1,E] */
    s->n = len;
    return ag_linear_t(o, p->embed, p->dec_bias);                                                  /* [1,1,V] */
}

void ag__poslm_attention(const ag_model *m, ag_tensor **mu, ag_tensor **weights) {
    extern const ag_model_kind ag__poslm_kind;
    if (m->kind != &ag__poslm_kind) {
        fprintf(stderr, "ag__poslm_attention: model '%s' is not poslm\n", m->kind ? m->kind->name : "(none)");
        abort();
    }
    const poslm *p = m->impl;
    if (mu) *mu = p->last_mu;
    if (weights) *weights = p->last_weights;
}

static void poslm_destroy(ag_model *m) { free(m->impl); }

const ag_model_kind ag__poslm_kind = {
    .abi = AG_MODEL_ABI,
    .name = "poslm",
    .defaults = poslm_defaults,
    .tiny = poslm_tiny,
    .build = poslm_build,
    .forward = poslm_forward,
    .loss = poslm_loss,
    .batch_opts = NULL,
    .destroy = poslm_destroy,
    .tasks = AG_TASK_BIT(AG_TASK_LM),
    .reads = "hidden,layers,attention,max-len",
    .flags = AG_FLAG_STRICT,
    .lm_state_new = poslm_state_new,
    .lm_feed = poslm_feed,
    .lm_state_free = poslm_state_free,
};
