/* test_bi_blosan_model.c - examples/bi_blosan.c (included as is, registered through its ag_plugin_init):
 * - an f64 gradient check of its loss through every parameter on a padded batch of lengths 7, 1 and 4 (a
 *   length-1 sentence, a partly and a wholly empty block), at block lengths 1, 2, 3 (7 = 2 blocks and 1 token),
 *   10 (one block longer than the sentence) and the automatic one; with the parameters drawn wide enough
 *   (embeddings and biases from U(-1, 1)) that every gradient is far above the check's tolerance, and checked
 *   to be (the tiny CLI check's are ~1e-11 for the attention's projections: it passes whatever they are);
 * - what a padded row computes does not depend on the padding: a sentence's logits are the same alone and in
 *   a batch with a longer one, at a fixed block length;
 * - its step memory (the arena's high-water mark) grows linearly with the sentence at a fixed block length and
 *   at the automatic one: no [N,N,d] tensor, nor [N,N], is ever made. */
#include "../examples/bi_blosan.c"

#include "check.h"


enum { B = 3, N = 7 };
static const int32_t lengths[B] = {7, 1, 4};

static ag_model make(const char *hparams, int dim, uint64_t seed) {
    const ag_model_kind *kind = ag_model_find("bi_blosan");
    ag_model_config c = ag_model_tiny(kind);
    c.hparams = hparams, c.dim = c.hidden = dim, c.seed = seed;
    ag_model m;
    CHECK(ag_model_init(&m, kind, &c) == AG_OK, "%s", ag_errmsg());
    return m;
}

static void fill(ag_batch *b, const ag_model *m, const int32_t *lens, int rows) {
    for (int i = 0; i < rows; i++) {
        b->lengths[i] = lens[i], b->labels[i] = i % m->cfg.classes;
        for (int t = 0; t < b->width; t++) b->tokens[i * b->width + t] = t < lens[i] ? 2 + (3 * i + t) % 8 : 0;
    }
}

typedef struct { ag_model *m; ag_batch *b; } ctx;
static ag_tensor *loss_fn(void *p) { ctx *c = p; return ag_model_loss(c->m, c->b, false); }

static void gradcheck(const char *hparams) {
    ag_model m = make(hparams, 4, 7);
    ag_rng rng;
    ag_rng_seed(&rng, 11);
    for (int p = 0; p < m.params.count; p++) { /* embeddings and biases wide: attention scores that vary */
        ag_tensor *t = m.params.items[p];
        if (t->ndim == 1 || !strcmp(t->name, "embed.weight"))
            for (int64_t e = 0; e < t->size; e++) t->data[e] = 2 * ag_rng_uniform(&rng) - 1;
    }
    ag_batch b;
    ag_model_batch_alloc(&m, B, N, &b);
    fill(&b, &m, lengths, B);
    ctx c = {&m, &b};
    ag_gradcheck_opts o = ag_gradcheck_defaults();
    ag_gradcheck_result r = ag_gradcheck(loss_fn, &c, m.params.items, m.params.count, &o);
    CHECK(r.ok, "%s: parameter %s element %lld analytic %.12g numeric %.12g", hparams,
          m.params.items[r.worst_input]->name, (long long)r.worst_index, r.analytic, r.numeric);
    /* not vacuous: every gradient 10x the tolerance or more, but those no finite difference can see: a per-feature
     * shift of a softmax's scores (the poolings' b2), scores of a query with one key at most (r <= 2 within a
     * block, 2 blocks or fewer between them), the gate of an attention that has no key at all (r = 1, 1 block),
     * a pooling over one position (r = 1) */
    ag_params_zero_grad(&m.params);
    ag_backward(loss_fn(&c));
    int r_len = block_len(&m, N), blocks = (N + r_len - 1) / r_len;
    for (int p = 0; p < m.params.count; p++) {
        ag_tensor *t = m.params.items[p];
        double most = 0;
        for (int64_t e = 0; e < t->size; e++) most = fmax(most, fabs(t->grad[e]));
        const char *n = strchr(t->name, '.') ? strchr(t->name, '.') + 1 : t->name; /* past fw. / bw. */
        bool intra = !strncmp(n, "intra.", 6), inter = !strncmp(n, "inter.", 6);
        bool scores = (intra || inter) && (!strcmp(n + 6, "w1") || !strcmp(n + 6, "b1") || !strcmp(n + 6, "w2"));
        bool blind = strstr(t->name, "pool.b2") || (intra && r_len <= 2 && scores) || (inter && blocks <= 2 && scores) ||
                     (!strcmp(n, "intra.gate.w1") && r_len == 1) || (!strcmp(n, "inter.gate.w1") && blocks == 1) ||
                     (!strncmp(n, "block_pool.", 11) && r_len == 1);
        if (!blind) CHECK(most > 1e-7, "%s: %s: largest gradient %.3g", hparams, t->name, most);
    }
    ag_step_end();
    printf("  gradcheck %-9s r = %d: %lld elements of %d parameters, max rel err %.2e\n", hparams, r_len,
           (long long)r.checked, m.params.count, r.max_rel_err);
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

/* Row 1 (length 4) of a batch 9 wide gives the logits it gives alone at width 4, at block length 3. */
static void padding_invariant(void) {
    ag_model m = make("block=3", 6, 3);
    ag_batch wide, alone;
    ag_model_batch_alloc(&m, 2, 9, &wide);
    ag_model_batch_alloc(&m, 1, 4, &alone);
    fill(&wide, &m, (const int32_t[]){9, 4}, 2);
    fill(&alone, &m, (const int32_t[]){4}, 1);
    memcpy(alone.tokens, wide.tokens + 9, 4 * sizeof *alone.tokens);
    ag_tensor *lw = ag_model_forward(&m, &wide, false), *la = ag_model_forward(&m, &alone, false);
    int K = m.cfg.classes;
    for (int k = 0; k < K; k++) CHECK_NEAR(lw->data[K + k], la->data[k], 1e-13, 1e-12);
    ag_step_end();
    ag_model_batch_free(&wide), ag_model_batch_free(&alone);
    ag_model_free(&m);
}

/* Bytes of step arena for one forward and backward of one sentence of n tokens at d = 8: the high-water mark
 * started again before the step (ag_memstats_reset_high), so each size reads its own peak. */
static size_t step_bytes(const char *hparams, int n) {
    ag_model m = make(hparams, 8, 1);
    ag_batch b;
    ag_model_batch_alloc(&m, 1, n, &b);
    fill(&b, &m, (const int32_t[]){n}, 1);
    ag_memstats_reset_high();
    ag_backward(ag_model_loss(&m, &b, true));
    ag_step_end();
    size_t used = ag_memstats().arena_high;
    ag_model_batch_free(&b);
    ag_model_free(&m);
    return used;
}

/* [N,d] tensors only: doubling N about doubles the step (1.96-2.16x measured: the blocks' padding, a product's
 * scratch); the check allows 2.25x.  One [N,N,d] tensor (d = 8) would add half its size at n over 2x, 4x the
 * whole step at n = 1024, and one [N,N] tensor 0.43x the step there. */
static void linear_memory(const char *hparams) {
    size_t prev = 0;
    for (int n = 64; n <= 1024; n *= 2) {
        size_t used = step_bytes(hparams, n), cube = (size_t)n * n * 8 * sizeof(ag_real);
        printf("  %-8s n = %4d: arena %9zu bytes, one [n,n,d] tensor %10zu\n", hparams, n, used, cube);
        if (prev) CHECK(used <= 2.25 * prev, "%s n = %d: %zu bytes after %zu at n/2", hparams, n, used, prev);
        prev = used;
    }
}

int main(void) {
    ag_set_num_threads(1);
    CHECK(ag_plugin_init() == AG_OK, "%s", ag_errmsg());
    linear_memory("block=4");
    linear_memory("block=0"); /* automatic: r = 6 .. 13, m = 11 .. 79 blocks */
    const char *settings[] = {"block=1", "block=2", "block=3", "block=10", "block=0"};
    for (int i = 0; i < 5; i++) gradcheck(settings[i]);
    padding_invariant();
    ag_shutdown();
    return check_summary("test_bi_blosan_model");
}
