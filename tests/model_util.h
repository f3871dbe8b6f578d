/* model_util.h - helpers of the per-model tests (test_<model>.c): batch
 * views and copies, and catching fatal errors. */
#ifndef AG_MODEL_UTIL_H
#define AG_MODEL_UTIL_H

#include "check.h"
#include "fatal.h"
#include "attngrad/model.h"
#include "../train/internal.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* Row i of b as a batch of one row (a view: no copies). */
static inline ag_batch batch_row(const ag_batch *b, int i) {
    ag_batch r = *b;
    int N = b->width, Nb = b->width_b;
    r.rows = 1;
    r.tokens += i * N;
    r.lengths += i;
    r.labels += i;
    if (r.scores) r.scores += i;
    if (r.heads) r.heads += i * N;
    if (r.bigrams) r.bigrams += i * N;
    if (r.targets) r.targets += i * N;
    if (r.tokens_b) r.tokens_b += i * Nb, r.lengths_b += i;
    if (r.heads_b) r.heads_b += i * Nb;
    if (r.bigrams_b) r.bigrams_b += i * Nb;
    return r;
}

/* Fills every padded position of the token and bigram rows with arbitrary
 * in-range ids, and padded heads with arbitrary valid-looking parents: a
 * model must ignore all of them. */
static inline void fill_padding_with_junk(ag_batch *b, int vocab, int n_bigram, uint64_t seed) {
    ag_rng r;
    ag_rng_seed(&r, seed);
    for (int second = 0; second < 2; second++) {
        int N = second ? b->width_b : b->width;
        const int32_t *len = second ? b->lengths_b : b->lengths;
        int32_t *tok = second ? b->tokens_b : b->tokens, *bi = second ? b->bigrams_b : b->bigrams;
        int32_t *heads = second ? b->heads_b : b->heads;
        if (!tok) continue;
        for (int i = 0; i < b->rows; i++)
            for (int t = len[i]; t < N; t++) {
                tok[i * N + t] = 1 + (int32_t)(ag_rng_next(&r) % (uint64_t)(vocab - 1));
                if (bi && n_bigram > 1) bi[i * N + t] = 1 + (int32_t)(ag_rng_next(&r) % (uint64_t)(n_bigram - 1));
                if (heads) heads[i * N + t] = 0;
            }
    }
}

/* The logits of b, copied out of the step (out must hold rows * classes). */
static inline void model_logits(ag_model *m, const ag_batch *b, double *out) {
    bool was = ag_set_grad_enabled(false);
    ag_tensor *logits = ag_model_forward(m, b, false);
    for (int64_t i = 0; i < logits->size; i++) out[i] = logits->data[i];
    ag_set_grad_enabled(was);
    ag_step_end();
}

/* An example's logits depend on nothing but its own tokens up to its
 * length: the tiny batch (3 classes, seed 13) row by row gives its logits,
 * and so does the batch with junk in every padded position. */
static inline void check_independence(ag_model *m, int n_bigram) {
    ag_batch b;
    ag_tiny_batch(m, &b, 13);
    double both[6], alone[3], junk[6];
    model_logits(m, &b, both);
    for (int i = 0; i < b.rows; i++) {
        ag_batch row = batch_row(&b, i);
        model_logits(m, &row, alone);
        for (int k = 0; k < 3; k++) CHECK_NEAR(alone[k], both[i * 3 + k], 1e-13, 1e-12);
    }
    fill_padding_with_junk(&b, m->cfg.vocab, n_bigram, 99);
    model_logits(m, &b, junk);
    for (int k = 0; k < 6; k++) CHECK_NEAR(junk[k], both[k], 1e-13, 1e-12);
    ag_model_batch_free(&b);
}

/* Training steps on b (forward, backward, optimizer) after a short warm-up
 * make no heap allocation at all: everything comes from the step arena and
 * the cached masks. */
static inline void check_steady_state(ag_model *m, const ag_batch *b) {
    ag_optim_config oc;
    ag_optimizer opt;
    CHECK(ag_optim_parse(m->cfg.optim, &oc) == AG_OK && ag_optim_init(&opt, &m->params, &oc) == AG_OK, "%s",
          ag_errmsg());
    int64_t allocs = 0;
    for (int step = 0; step < 8; step++) {
        if (step == 3) allocs = ag_memstats().allocs;
        ag_params_zero_grad(&m->params);
        ag_backward(ag_model_loss(m, b, true));
        ag_optim_step(&opt);
        ag_step_end();
    }
    CHECK(ag_memstats().allocs == allocs, "%s: %lld allocations in 5 steady steps", m->kind->name,
          (long long)(ag_memstats().allocs - allocs));
    ag_optim_free(&opt);
}

#endif
