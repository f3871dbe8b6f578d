/* model.c - the registry of model kinds and the calls every model shares. */
#include "models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const ag_model_kind ag_mpsan_kind;
extern const ag_model_kind ag_dual_axial_kind;
extern const ag_model_kind ag_ms_san_kind;
extern const ag_model_kind ag_mtsa_kind;
extern const ag_model_kind ag_poslm_kind;

static const ag_model_kind *const kinds[] = {
    &ag_mpsan_kind,
    &ag_dual_axial_kind,
    &ag_ms_san_kind,
    &ag_mtsa_kind,
    &ag_poslm_kind,
    NULL,
};

const ag_model_kind *const *ag_model_kinds(void) { return kinds; }

const ag_model_kind *ag_model_find(const char *name) {
    for (int i = 0; kinds[i]; i++)
        if (strcmp(kinds[i]->name, name) == 0) return kinds[i];
    return NULL;
}

ag_model_config ag_model_defaults(const ag_model_kind *kind) {
    ag_model_config c = {.vocab = 100, .classes = 2, .keep = 1.0, .seed = 1, .batch = 32,
                         .optim = "adam:lr=1e-3", .layers = 1, .heads = 1};
    kind->defaults(&c);
    return c;
}

void ag_model_init(ag_model *m, const ag_model_kind *kind, const ag_model_config *cfg) {
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->cfg = *cfg;
    ag_rng_seed(&m->rng, cfg->seed);
    kind->build(m);
}

void ag_model_capture_axes(ag_model *m, const char *name, ag_tensor *w, int axes) {
    if (!m->capture_maps || m->n_maps == AG_MAX_MAPS) return;
    ag_attn_map *map = &m->maps[m->n_maps++];
    snprintf(map->name, sizeof map->name, "%s", name);
    map->w = w;
    map->axes = axes;
}

void ag_model_capture(ag_model *m, const char *name, ag_tensor *w) { ag_model_capture_axes(m, name, w, AG_MAP_SENTENCE); }

ag_tensor *ag_model_forward(ag_model *m, const ag_batch *b, bool training) {
    m->n_maps = 0;
    return m->kind->forward(m, b, training);
}

void ag_model_free(ag_model *m) {
    if (m->kind && m->kind->destroy) m->kind->destroy(m);
    ag_params_free(&m->params);
    memset(m, 0, sizeof *m);
}

ag_model_config ag_model_tiny(const ag_model_kind *kind) {
    ag_model_config c = ag_model_defaults(kind);
    c.vocab = 10;
    c.classes = 3;
    c.keep = 1.0;
    c.seed = 7;
    kind->tiny(&c);
    return c;
}

static int32_t *ints(size_t n) { return calloc(n ? n : 1, sizeof(int32_t)); }

void ag_tiny_batch(const ag_model *m, ag_batch *b, uint64_t seed) {
    enum { B = 2, N = 5 };
    static const int32_t lengths[B] = {5, 3};
    ag_rng r;
    ag_rng_seed(&r, seed);
    memset(b, 0, sizeof *b);
    if (m->kind->batch_opts) m->kind->batch_opts(&m->cfg, &b->opts);
    b->rows = b->max_rows = B;
    b->width = b->width_b = b->max_width = N;
    b->tokens = ints(B * N);
    b->lengths = ints(B);
    b->labels = ints(B);
    b->tokens_b = ints(B * N);
    b->lengths_b = ints(B);
    b->targets = ints(B * N);
    b->heads = ints(B * N);
    b->heads_b = ints(B * N);
    b->bigrams = ints(B * N);
    b->bigrams_b = ints(B * N);
    int V = m->cfg.vocab, nbi = m->cfg.n_bigram;
    for (int i = 0; i < B; i++) {
        b->lengths[i] = b->lengths_b[i] = lengths[i];
        b->labels[i] = (int32_t)(ag_rng_next(&r) % (uint64_t)m->cfg.classes);
        for (int t = 0; t < N; t++) {
            bool valid = t < lengths[i];
            int k = i * N + t;
            b->tokens[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            b->tokens_b[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            b->targets[k] = valid ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            /* a small tree: t -> t+1 except a second root at t = 2 */
            b->heads[k] = b->heads_b[k] = !valid ? AG_HEAD_PAD : (t == lengths[i] - 1 || t == 2) ? -1 : t + 1;
        }
        for (int t = 0; t < N; t++) {
            int k = i * N + t;
            b->bigrams[k] = (nbi > 1 && t + 1 < lengths[i]) ? ag_bigram_id(b->tokens[k], b->tokens[k + 1], nbi) : 0;
            b->bigrams_b[k] = (nbi > 1 && t + 1 < lengths[i]) ? ag_bigram_id(b->tokens_b[k], b->tokens_b[k + 1], nbi) : 0;
        }
    }
}

void ag_tiny_batch_free(ag_batch *b) {
    free(b->tokens); free(b->lengths); free(b->labels); free(b->tokens_b); free(b->lengths_b);
    free(b->targets); free(b->heads); free(b->heads_b); free(b->bigrams); free(b->bigrams_b);
    memset(b, 0, sizeof *b);
}

ag_tensor *ag_model_loss(ag_model *m, const ag_batch *b, bool training) {
    ag_tensor *logits = ag_model_forward(m, b, training);
    if (!logits) return NULL; /* bad input (e.g. a parse); ag_errmsg() says why */
    if (m->cfg.task == AG_TASK_LM) return ag_cross_entropy(logits, b->targets, 0);
    return ag_cross_entropy(logits, b->labels, -1);
}
