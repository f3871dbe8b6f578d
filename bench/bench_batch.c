/* bench_batch.c - see bench_batch.h. */
#include "bench_batch.h"


enum { BENCH_VOCAB = 20000, BENCH_CLASSES = 5 };

ag_model_config bench_config(const ag_model_kind *kind) {
    ag_model_config c = ag_model_defaults(kind);
    if (c.task != AG_TASK_LM) { /* the LM keeps its own vocabulary */
        c.vocab = BENCH_VOCAB;
        c.classes = BENCH_CLASSES;
    }
    return c;
}

int bench_width(const ag_model_config *c) {
    if (c->fixed_len > 0) return c->fixed_len;
    return c->task == AG_TASK_LM ? 35 : 30;
}

void bench_batch_make(const ag_model *m, int B, int N, uint64_t seed, ag_batch *b) {
    ag_rng r;
    ag_rng_seed(&r, seed);
    ag_model_batch_alloc(m, B, N, b);
    uint64_t V = (uint64_t)m->cfg.vocab, K = (uint64_t)(m->cfg.classes > 0 ? m->cfg.classes : 1);
    int lo = (N + 1) / 2, buckets = b->opts.n_bigram;
    for (int i = 0; i < B; i++) {
        int n = i == 0 ? N : lo + (int)(ag_rng_next(&r) % (uint64_t)(N - lo + 1));
        b->lengths[i] = b->lengths_b[i] = n;
        b->labels[i] = (int32_t)(ag_rng_next(&r) % K);
        for (int t = 0; t < N; t++) {
            size_t k = (size_t)i * N + t;
            bool valid = t < n;
            b->tokens[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (V - 2)) : 0;
            b->tokens_b[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (V - 2)) : 0;
            b->targets[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (V - 2)) : 0;
            /* a random tree: every word but the first hangs off an earlier one */
            b->heads[k] = b->heads_b[k] = !valid ? AG_HEAD_PAD
                                          : t == 0 ? AG_HEAD_ROOT
                                                   : (int32_t)(ag_rng_next(&r) % (uint64_t)t);
        }
        for (int t = 0; t + 1 < n && buckets > 1; t++) {
            size_t k = (size_t)i * N + t;
            b->bigrams[k] = ag_bigram_id(b->tokens[k], b->tokens[k + 1], buckets);
            b->bigrams_b[k] = ag_bigram_id(b->tokens_b[k], b->tokens_b[k + 1], buckets);
        }
    }
}
