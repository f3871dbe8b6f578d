/* optim_util.h - helpers shared by the optimizer, schedule, initializer and
 * checkpoint tests: catching fatal errors, tolerances per real type, and a
 * tiny deterministic classifier to train. */
#ifndef AG_OPTIM_UTIL_H
#define AG_OPTIM_UTIL_H

#include "attngrad.h"
#include "check.h"
#include "fatal.h"

#include <setjmp.h>
#include <string.h>

#define IS_F64 (sizeof(ag_real) == sizeof(double))

/* ---- fatal errors caught for inspection ---- */
/* A call that must fail with `status` and a message containing each string. */
#define EXPECT_ERROR(call, status, ...)                                                            \
    do {                                                                                           \
        ag_status st_ = (call);                                                                    \
        CHECK(st_ == (status), "%s returned %d, want %d (%s)", #call, (int)st_, (int)(status),     \
              ag_errmsg());                                                                        \
        const char *want_[] = {__VA_ARGS__};                                                       \
        for (size_t i_ = 0; i_ < sizeof want_ / sizeof *want_; i_++)                               \
            CHECK(strstr(ag_errmsg(), want_[i_]), "message '%s' lacks '%s'", ag_errmsg(), want_[i_]); \
    } while (0)

/* ---- a tiny classifier: 2-layer tanh MLP, softmax cross-entropy ----
 * Built from core ops only (log-sum-exp with the row max subtracted), so
 * these tests do not depend on the fused loss op. */
enum { MLP_IN = 5, MLP_HIDDEN = 8, MLP_CLASSES = 3, MLP_N = 64, MLP_BATCH = 16 };

typedef struct {
    ag_params ps;
    ag_tensor *w1, *b1, *w2, *b2;
    ag_real x[MLP_N * MLP_IN];
    int32_t y[MLP_N];
} tiny_mlp;

static inline void tiny_mlp_init(tiny_mlp *m, uint64_t seed) {
    memset(m, 0, sizeof *m);
    ag_rng rng;
    ag_rng_seed(&rng, seed);
    m->w1 = ag_param(&m->ps, "l1.weight", 2, (int[]){MLP_IN, MLP_HIDDEN});
    m->b1 = ag_param(&m->ps, "l1.bias", 1, (int[]){MLP_HIDDEN});
    m->w2 = ag_param(&m->ps, "l2.weight", 2, (int[]){MLP_HIDDEN, MLP_CLASSES});
    m->b2 = ag_param(&m->ps, "l2.bias", 1, (int[]){MLP_CLASSES});
    ag_init_glorot_uniform(m->w1, 1.0, &rng);
    ag_init_glorot_uniform(m->w2, 1.0, &rng);
    ag_init_uniform(m->b1, -0.1, 0.1, &rng);
    /* data: class = which of three fixed directions the input is closest to */
    for (int i = 0; i < MLP_N; i++) {
        double best = -1e9;
        for (int j = 0; j < MLP_IN; j++) m->x[i * MLP_IN + j] = (ag_real)ag_rng_normal(&rng);
        for (int c = 0; c < MLP_CLASSES; c++) {
            double s = 0;
            for (int j = 0; j < MLP_IN; j++) s += m->x[i * MLP_IN + j] * ((j + c) % 3 == 0 ? 1.0 : -0.5);
            if (s > best) best = s, m->y[i] = c;
        }
    }
}

/* Mean cross-entropy of logits [B, C] against labels. */
static inline ag_tensor *tiny_xent(ag_tensor *logits, const int32_t *labels) {
    int B = logits->shape[0], C = logits->shape[1];
    ag_tensor *onehot = ag_tensor_new(2, (int[]){B, C});
    for (int i = 0; i < B; i++) onehot->data[i * C + labels[i]] = 1;
    ag_tensor *mx = ag_max_axis(logits, 1, true);
    ag_tensor *lse = ag_add(mx, ag_log(ag_sum_axis(ag_exp(ag_sub(logits, mx)), 1, true)));
    ag_tensor *picked = ag_sum_axis(ag_mul(logits, onehot), 1, true);
    return ag_mean(ag_sub(lse, picked));
}

/* Loss of one minibatch of rows idx[0..MLP_BATCH). */
static inline ag_tensor *tiny_mlp_loss(tiny_mlp *m, const int *idx) {
    ag_tensor *x = ag_tensor_new(2, (int[]){MLP_BATCH, MLP_IN});
    int32_t y[MLP_BATCH];
    for (int i = 0; i < MLP_BATCH; i++) {
        memcpy(x->data + i * MLP_IN, m->x + idx[i] * MLP_IN, MLP_IN * sizeof(ag_real));
        y[i] = m->y[idx[i]];
    }
    ag_tensor *h = ag_tanh(ag_linear(x, m->w1, m->b1));
    return tiny_xent(ag_linear(h, m->w2, m->b2), y);
}

/* A minibatch drawn with the training generator (the data order is part of
 * what a checkpoint must restore). */
static inline void tiny_mlp_batch(ag_rng *rng, int *idx) {
    for (int i = 0; i < MLP_BATCH; i++) idx[i] = (int)(ag_rng_next(rng) % MLP_N);
}

#endif
